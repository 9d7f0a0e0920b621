//! CPU references shared by the GPU and simulator suites, one module per library.

#[cfg(feature = "cusolver")]
pub mod solver;
