//! CPU references the simulator tests and the GPU tests share: one implementation per library,
//! built with the library's feature.

#[cfg(feature = "cufft")]
pub mod fft;
#[cfg(feature = "curand")]
pub mod rng;
