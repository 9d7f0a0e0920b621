//! One module per CUDA library, each behind its cargo feature.

#[cfg(feature = "nvrtc")]
pub(crate) mod rtc;
