//! CPU references of the library ops, shared by the simulator tests (against the simulator's
//! results) and the GPU tests (against the GPU's, and GPU against simulator): one
//! implementation, two uses.

#[cfg(feature = "cudnn")]
pub mod attention;
#[cfg(feature = "cudnn")]
pub mod attention_fp8;
#[cfg(feature = "cublas")]
pub mod blas;
#[cfg(feature = "cublas")]
pub mod blas_complex;
#[cfg(feature = "cublas")]
pub mod blas_ex;
#[cfg(feature = "cublas")]
pub mod blas_level3;
#[cfg(feature = "cublaslt")]
pub mod blas_lt;
#[cfg(feature = "cublaslt")]
pub mod blas_lt_types;
#[cfg(feature = "cudnn")]
pub mod cudnn;
#[cfg(feature = "cudnn")]
pub mod cudnn_recorded;
#[cfg(feature = "cufft")]
pub mod fft;
#[cfg(feature = "cudnn")]
pub mod matmul_act;
#[cfg(feature = "cudnn")]
pub mod norm;
#[cfg(feature = "curand")]
pub mod rng;
#[cfg(feature = "cudnn")]
pub mod rnn;
#[cfg(feature = "cusolver")]
pub mod solver;
#[cfg(feature = "cusolver")]
pub mod solver_irs;
#[cfg(feature = "cusolver")]
pub mod solver_sparse;
#[cfg(feature = "cusparse")]
pub mod sparse;
#[cfg(feature = "cusparse")]
pub mod sparse_mixed;
#[cfg(feature = "cutensor")]
pub mod tensor;
#[cfg(feature = "cutensor")]
pub mod tensor_complex;
