//! A per-stream workspace: one grow-only device buffer a library's ops share as scratch (cuFFT's
//! work area; cuBLAS, cuSPARSE and cuDNN take one the same way).
//!
//! Ops on one stream run in order, so they can share the buffer; every op that uses it declares
//! it read-write on its recorder, so that work on other streams (none today, but the tracker
//! does not assume it) is fenced like for any buffer. When an op needs more, a larger buffer
//! replaces it and the old one goes to the reaper, freed after the work enqueued so far.

// Each library uses its own subset of the shared parts; with only some features on, the rest
// is unused.
#![cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]

use super::{record, OpStream};
use crate::error::Result;
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;

/// A grow-only scratch buffer on one stream.
#[derive(Default)]
pub(crate) struct Workspace {
    buf: Option<GpuRef<u8>>,
}

impl Workspace {
    /// Bytes held (the largest need so far).
    pub(crate) fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }

    /// Grows the workspace to at least `need` bytes and declares it read-write on `rec`.
    /// Returns it, or `None` when no op has needed any.
    pub(crate) fn use_on(
        &mut self,
        op: &OpStream,
        rec: &mut LaunchRecorder,
        need: usize,
    ) -> Result<Option<&GpuRef<u8>>> {
        if need > self.bytes() {
            let grown = op.device.alloc_scratch::<u8>(op.stream, need)?;
            if let Some(old) = self.buf.replace(grown) {
                op.retire("a replaced workspace", old);
            }
        }
        match &self.buf {
            Some(b) => {
                record(rec, "workspace", b, Access::ReadWrite)?;
                Ok(Some(b))
            }
            None => Ok(None),
        }
    }
}
