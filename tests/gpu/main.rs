//! The GPU suite: every test that needs a CUDA GPU, one module per subject. The tests are
//! `#[ignore]`d, so a plain `cargo test` only builds them; run them with `--include-ignored` on a
//! GPU machine (`CUSCHED_REQUIRE_GPU=1` fails a test that finds no GPU instead of skipping it),
//! one module with a filter: `cargo test --test gpu -- --include-ignored blas::`. Modules of a
//! library are built with its feature.
//!
//! Tests that must run in a process of their own live in their own binaries: `gpu_poison`
//! (faults the context on purpose), `alloc_free` (a counting global allocator) and
//! `nccl_processes` (one process per rank).

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "cublas")]
mod blas;
#[cfg(feature = "cublaslt")]
mod blas_lt;
#[cfg(feature = "cublaslt")]
mod blas_lt_fp8;
#[cfg(feature = "cublaslt")]
mod blas_lt_options;
#[cfg(feature = "cublaslt")]
mod blas_lt_sim;
#[cfg(feature = "cublaslt")]
mod blas_lt_types;
#[cfg(all(feature = "nvrtc", feature = "cublas", feature = "cufft", feature = "curand"))]
mod captures;
#[cfg(feature = "nvrtc")]
mod compose;
#[cfg(feature = "cudnn")]
mod cudnn;
#[cfg(feature = "cudnn")]
mod cudnn_graph;
#[cfg(feature = "cudnn")]
mod cudnn_rnn;
#[cfg(feature = "nvrtc")]
mod declared;
#[cfg(feature = "nvrtc")]
mod failures;
#[cfg(all(feature = "nvrtc", feature = "cublas", feature = "cufft"))]
mod fault_edges;
#[cfg(feature = "nvrtc")]
mod faults;
#[cfg(feature = "cufft")]
mod fft;
#[cfg(all(feature = "nvrtc", feature = "cublas", feature = "cufft"))]
mod graph;
#[cfg(any(feature = "cublaslt", feature = "cudnn", feature = "cutensor"))]
mod graph_libs;
#[cfg(feature = "nvrtc")]
mod hazards;
#[cfg(feature = "nvrtc")]
mod host_cache;
#[cfg(feature = "nvrtc")]
mod lanes;
#[cfg(feature = "nvrtc")]
mod launch_features;
#[cfg(feature = "nvrtc")]
mod module_globals;
#[cfg(feature = "nvrtc")]
mod modules;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "nccl")]
mod nccl_groups;
#[cfg(feature = "nccl")]
mod nccl_one_rank;
#[cfg(feature = "nvrtc")]
mod nvrtc;
#[cfg(feature = "nvrtc")]
mod peer;
#[cfg(feature = "curand")]
mod rng;
#[cfg(feature = "curand")]
mod rng_continuing;
#[cfg(feature = "cusolver")]
mod solver;
#[cfg(feature = "cusolver")]
mod solver_irs;
#[cfg(feature = "cusolver")]
mod solver_sim;
#[cfg(feature = "cusolver")]
mod solver_sparse;
#[cfg(feature = "nvrtc")]
mod soundness;
#[cfg(feature = "cusparse")]
mod sparse;
#[cfg(feature = "cusparse")]
mod sparse_cross;
#[cfg(feature = "cusparse")]
mod sparse_graph;
#[cfg(feature = "cusparse")]
mod sparse_layouts;
#[cfg(feature = "cusparse")]
mod sparse_mixed;
#[cfg(feature = "cusparse")]
mod sparse_phases;
#[cfg(feature = "cusparse")]
mod sparse_refusals;
#[cfg(feature = "cutensor")]
mod tensor;
#[cfg(feature = "nvrtc")]
mod trace;
