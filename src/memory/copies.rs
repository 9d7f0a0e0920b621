//! Uploads, downloads and copies between device buffers and host memory. Each is one launch
//! on a strict recorder: the recorder fences it, the backend enqueues it.

use super::device_buffer::Init;
use super::{Element, GpuRef, HostBuffer};
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::recorder::{LaunchRecorder, LaunchScope};
use crate::trace::OpLabel;
use crate::track::EventRef;

impl Device {
    /// Allocates a buffer on `stream` and copies `data` into it. `data` may be reused as
    /// soon as this returns.
    ///
    /// From pageable memory (a `Vec`, say) the copy is queued and the call returns once the
    /// driver has staged `data`. From memory the driver copies asynchronously, pinned,
    /// registered or managed (a [`HostBuffer`] read guard, say), it waits for the copy to finish,
    /// and so for the work queued on `stream` before it; [`GpuRef::copy_from_host`] is the
    /// asynchronous path for pinned data.
    pub fn upload<T: Element>(&self, stream: StreamId, data: &[T]) -> Result<GpuRef<T>> {
        self.new_buffer(stream, data.len(), Init::Copy(data), false)
    }

    /// [`upload`](Self::upload) as scratch for the crate's own ops (see
    /// `BufferTrack::scratch`).
    #[cfg_attr(not(feature = "cublas"), allow(dead_code))]
    pub(crate) fn upload_scratch<T: Element>(&self, stream: StreamId, data: &[T]) -> Result<GpuRef<T>> {
        self.new_buffer(stream, data.len(), Init::Copy(data), true)
    }
}

/// Blocks until a copy's commit event has passed, so that its host source may be reused.
pub(super) fn finish_copy(device: &Device, ev: Option<EventRef>) -> Result<()> {
    match ev {
        Some(ev) => ev.synchronize().map_err(|e| device.shared.classify(e, ev.epoch())),
        None => Ok(()),
    }
}

impl<T: Element> GpuRef<T> {
    /// Queues the copy of `data` into the buffer, in a launch whose recorder declared the
    /// write. Returns whether the copy still reads `data` after this returns (pinned,
    /// registered or managed memory): then the caller must wait for the launch's event
    /// ([`finish_copy`]) before giving `data` back.
    pub(super) fn enqueue_from_slice(&self, scope: &LaunchScope<'_>, data: &[T]) -> Result<bool> {
        self.check_len("data", data.len())?;
        // SAFETY: 1. where the copy reads `data` after this returns, every caller waits for the
        // launch's event before the borrow of `data` ends; 2. the launch's recorder declared
        // the write of this buffer and fenced it, and the buffer's free waits for the launch.
        unsafe { self.memory().copy_from_host(scope, data) }
    }

    /// Copies `data` into the buffer on `stream`; `data` may be reused when this returns.
    ///
    /// From pageable memory the call returns once the driver has staged `data`; from pinned,
    /// registered or managed memory it waits for the copy to finish (see [`Device::upload`]).
    pub fn copy_from_slice(&self, stream: StreamId, data: &[T]) -> Result<()> {
        self.check_len("data", data.len())?;
        let device = self.device();
        refuse_recording(&device, stream, "a copy from a host slice")?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from_slice"));
        rec.write(self)?;
        let (source_in_flight, ev) =
            rec.launch_event(&device, |scope| self.enqueue_from_slice(scope, data))?.without_completion(&device);
        if source_in_flight {
            finish_copy(&device, ev)?;
        }
        Ok(())
    }

    /// Copies the buffer to a new `Vec`, blocking until the copy (and every write it must
    /// follow) has finished.
    ///
    /// Fails with [`Error::FailedInput`](crate::Error::FailedInput), copying nothing, when the
    /// buffer's last writer failed (a lane job or a launch that wrote it): its contents are
    /// not what the program meant to download.
    pub fn download(&self, stream: StreamId) -> Result<Vec<T>> {
        let device = self.device();
        refuse_recording(&device, stream, "a download")?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "download"));
        rec.read(self)?;
        let (staging, ev) = rec
            // SAFETY: 1. the staging is kept until the event recorded after the copy has been
            // waited for below (on failure it drops with an error of that wait or of the
            // commit, when the copy has failed or cannot run); 2. the recorder declared the read
            // and fenced it after the buffer's writers, and the free waits for the launch.
            .launch_event(&device, |scope| unsafe { self.memory().copy_to_staging(scope, self.len()) })?
            .without_completion(&device);
        if let Some(ev) = ev {
            device.shared.wait_event(&ev)?;
        }
        // SAFETY: 1. the launch's event has passed (waited for above); 2. a launch without an
        // event enqueued nothing that is still running.
        Ok(unsafe { staging.into_vec() })
    }

    /// Copies all of `src` into this buffer on `stream` (device to device).
    pub fn copy_from(&self, stream: StreamId, src: &GpuRef<T>) -> Result<()> {
        self.check_len("src", src.len())?;
        if self.same_buffer(src) {
            return Err(Error::invalid("src", "is the destination buffer itself"));
        }
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from"));
        rec.read(src)?.write(self)?;
        // SAFETY: 1. distinct buffers (checked above) of equal lengths (checked); 2. the
        // recorder declared both uses and fenced them, and both frees wait for the launch.
        let (this, src) = (self.resolved(), src.resolved());
        rec.launch(&self.device(), |scope| unsafe { this.memory().copy_from_device(scope, src.memory()) })
    }

    /// Copies pinned host memory into this buffer, asynchronously: `src` stays readable, and
    /// writing it through [`HostBuffer::write`] waits for this copy.
    ///
    /// `src` need not be kept alive until the copy has run: dropping it right away is safe.
    /// Its memory goes back to the device's pinned cache (or is freed) only after every copy
    /// that uses it has finished, and the host does not block for that.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let s = device.default_stream();
    /// let staging = device.host_from_slice(&[1u32, 2, 3])?;
    /// let x = device.alloc_zeros::<u32>(s, 3)?;
    /// x.copy_from_host(s, &staging)?;
    /// drop(staging); // the copy still reads it: the memory is reused only after the copy
    /// assert_eq!(x.download(s)?, vec![1, 2, 3]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn copy_from_host(&self, stream: StreamId, src: &HostBuffer<T>) -> Result<()> {
        self.check_len("src", src.len())?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_from_host"));
        rec.read(src)?.write(self)?;
        // SAFETY: 1. equal lengths (checked); 2. the recorder declared both uses and fenced
        // them: host writes to `src` (`HostBuffer::write`) and its free wait for this launch,
        // and so does this buffer's free.
        let this = self.resolved();
        rec.launch(&self.device(), |scope| unsafe { this.memory().copy_from_pinned(scope, &src.inner.memory) })
    }

    /// Copies this buffer into pinned host memory, asynchronously: reading `dst` through
    /// [`HostBuffer::read`] waits for the copy. Dropping `dst` before the copy has run is
    /// safe (its memory is reused only after the copy), though the data is then lost.
    pub fn copy_to_host(&self, stream: StreamId, dst: &mut HostBuffer<T>) -> Result<()> {
        self.check_len("dst", dst.len())?;
        let mut rec = LaunchRecorder::new_strict(stream).labelled(OpLabel::new("memory", "copy_to_host"));
        rec.read(self)?.write(&*dst)?;
        // SAFETY: 1. equal lengths (checked); no Rust reference to `dst`'s contents exists
        // (`dst` is borrowed mutably here, and `read`/`write` wait for this copy before handing
        // one out); 2. the recorder declared both uses and fenced them, and both frees wait for
        // the launch.
        let this = self.resolved();
        rec.launch(&self.device(), |scope| unsafe { this.memory().copy_to_pinned(scope, &dst.inner.memory) })
    }
}

/// Host copies that block on their data cannot be graph nodes: refused on a stream a graph
/// recording holds.
fn refuse_recording(device: &Device, stream: StreamId, what: &str) -> Result<()> {
    crate::recorder::refuse_if_recording(&device.shared, stream, || {
        Error::Recording {
        what: format!("{what} on {stream}, which a graph recording holds"),
        hint: "copy between pinned host buffers and the device (copy_from_host, copy_to_host) inside a graph, or outside the recording",
    }
    })
}
