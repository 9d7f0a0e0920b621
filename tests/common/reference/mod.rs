//! CPU references shared by the simulator and GPU suites, one module per library.

#[cfg(feature = "cublas")]
pub mod blas;
