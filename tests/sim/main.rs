//! The simulator suite: every test that runs without a GPU, one module per subject (a module
//! is named after its subject: `lanes`, `solo`, `sparse`, ...). Modules of a library are built
//! with its feature. Filter by module to run one subject: `cargo test --test sim solo::`.
//!
//! The library validation modules (`lib_validation`, `numerics_validation`,
//! `property_validation`, `solver_validation`, `solver_sparse`, `blas_lt`, `sparse`,
//! `sparse_more`, `sparse_layouts`, `sparse_mixed`, `sparse_convert`, `sparse_props`, `tensor`, `nccl_validation`) name a test `<op>_rejects_<what>`.

#[path = "../common/mod.rs"]
mod common;

mod alloc_oom;
#[cfg(feature = "cublas")]
mod blas;
#[cfg(feature = "cublaslt")]
mod blas_lt;
#[cfg(feature = "cublaslt")]
mod blas_lt_options;
#[cfg(feature = "cublaslt")]
mod blas_lt_sim;
#[cfg(feature = "cublaslt")]
mod blas_lt_types;
mod checker;
mod compose;
#[cfg(feature = "cudnn")]
mod cudnn;
#[cfg(feature = "cudnn")]
mod cudnn_graph;
#[cfg(feature = "cudnn")]
mod cudnn_rnn;
mod declared;
mod delivery;
mod failures;
mod fault_edges;
mod faults;
mod fences;
#[cfg(feature = "cufft")]
mod fft;
mod graph;
mod lanes;
mod layers;
#[cfg(any(feature = "cublas", feature = "curand", feature = "cufft"))]
mod lib_validation;
mod loud;
mod memory;
#[cfg(feature = "nvrtc")]
mod module_globals;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "nccl")]
mod nccl_faults;
#[cfg(feature = "nccl")]
mod nccl_validation;
#[cfg(any(feature = "cublas", feature = "cufft", feature = "cusolver"))]
mod numerics_validation;
mod order;
mod peer;
#[cfg(all(feature = "cublas", feature = "cufft"))]
mod pipeline_checked;
#[cfg(any(feature = "cublas", feature = "cufft", feature = "cusolver", feature = "cublaslt"))]
mod property_validation;
mod random;
#[cfg(any(
    feature = "cublas",
    feature = "cublaslt",
    feature = "curand",
    feature = "cusparse",
    feature = "cusolver",
    feature = "cutensor"
))]
mod raw_handles;
mod recorder;
mod reentrancy;
#[cfg(feature = "curand")]
mod rng;
#[cfg(feature = "nvrtc")]
mod rtc_sim;
mod shutdown;
mod solo;
#[cfg(feature = "cusolver")]
mod solver_irs;
#[cfg(feature = "cusolver")]
mod solver_sim;
#[cfg(feature = "cusolver")]
mod solver_sparse;
#[cfg(feature = "cusolver")]
mod solver_validation;
mod soundness;
#[cfg(feature = "cusparse")]
mod sparse;
#[cfg(feature = "cusparse")]
mod sparse_convert;
#[cfg(feature = "cusparse")]
mod sparse_layouts;
#[cfg(feature = "cusparse")]
mod sparse_mixed;
#[cfg(feature = "cusparse")]
mod sparse_more;
#[cfg(feature = "cusparse")]
mod sparse_phases;
#[cfg(feature = "cusparse")]
mod sparse_props;
#[cfg(feature = "cusparse")]
mod sparse_sim;
#[cfg(feature = "cutensor")]
mod tensor;
#[cfg(feature = "cutensor")]
mod tensor_sim;
mod trace;
