//! CPU references of the library ops, shared by the simulator's tests and the GPU tests: one
//! implementation, two uses.

#[cfg(feature = "cutensor")]
pub mod tensor;
