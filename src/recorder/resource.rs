//! What a recorder can be told about: tracked memory ([`crate::GpuRef`], [`crate::HostBuffer`])
//! and memory cusched does not track ([`External`]).

use crate::device::BufferTrack;
use std::sync::Arc;

/// The tracking side of a buffer, type-erased so that one recorder holds buffers of any
/// element type and keeps them alive until it commits.
pub(crate) trait Tracked: Send + Sync {
    fn track(&self) -> &BufferTrack;
}

/// What a recorder is given for one use: tracked memory, or memory cusched does not track.
pub(crate) enum ResourceKind {
    Tracked(Arc<dyn Tracked>),
    External(String),
}

mod sealed {
    /// Opaque token a [`super::Resource`] hands to recorders; only this crate can build one.
    #[allow(unreachable_pub, missing_debug_implementations)]
    pub struct ResourceRef(pub(crate) super::ResourceKind);

    pub trait Sealed {
        fn resource(&self) -> ResourceRef;
    }
}
pub(crate) use sealed::ResourceRef;
pub(crate) use sealed::Sealed as ResourceSealed;

/// Memory a [`crate::LaunchRecorder`] can be told about: [`crate::GpuRef`],
/// [`crate::HostBuffer`] and [`External`]. Sealed: tracking state lives only in this crate's
/// types.
pub trait Resource: sealed::Sealed {}

impl<R: Resource + ?Sized> sealed::Sealed for &R {
    fn resource(&self) -> ResourceRef {
        (**self).resource()
    }
}
impl<R: Resource + ?Sized> Resource for &R {}

/// Memory that cusched does not track: a pointer from another library (a TensorRT binding, a
/// framework's tensor). Strict recorders reject it; permissive recorders skip it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct External {
    /// Device address.
    pub ptr: u64,
    /// Size in bytes.
    pub bytes: usize,
}

impl sealed::Sealed for External {
    fn resource(&self) -> ResourceRef {
        ResourceRef(ResourceKind::External(format!("external memory at {:#x} ({} bytes)", self.ptr, self.bytes)))
    }
}
impl Resource for External {}
