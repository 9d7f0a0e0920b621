//! CPU references of the library ops, shared by the simulator and GPU suites (one
//! implementation, two uses).

#[cfg(feature = "cusparse")]
pub mod sparse;
