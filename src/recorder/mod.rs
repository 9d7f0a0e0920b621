//! `LaunchRecorder`: declare a launch's buffer uses, `preflight` (queue the fences), enqueue,
//! `commit` (record the event later uses wait on).
//!
//! The shape is reserve-then-commit, in types: [`LaunchRecorder::preflight`] consumes the
//! recorder, reserves every buffer (a conflicting preflight on another thread waits for this
//! launch's commit) and fences the stream, and returns a [`Preflighted`] launch. Only that
//! value gives the [`LaunchScope`] to enqueue on, and only it can be committed, once: so
//! recording after preflight, preflighting twice, committing without preflight and committing
//! twice do not compile. A `Preflighted` dropped without commit commits anyway and logs an
//! error, so no enqueued work is ever left unfenced.
//!
//! [`LaunchRecorder::launch`] does all of it around a closure and is the everyday path; every
//! op of the crate goes through its internal form, `launch_event` (`launch`). Every launch is
//! admit → fence → enqueue → commit; how it is admitted is decided once, at its preflight, as
//! an `Admission` (`admission`) whose strategy owns what the launch holds and how its commit
//! ends it: marked (`marked`), or, on a device that has run tracked work on one stream only,
//! solo for the closure form of a launch of device memory (`solo`, `track::solo`): it
//! reserves and publishes nothing, since stream order orders it, and `launch` records no
//! position unless a trace needs one. The hand-paired form is always marked.

mod admission;
mod context;
mod failure;
mod launch;
mod launched;
#[cfg(test)]
mod lazy_tests;
mod marked;
mod pair;
mod preflighted;
mod rebind;
mod recording;
mod reserved;
mod resource;
mod scope;
mod solo;

use admission::Choice;
pub(crate) use failure::collect_writes;
pub(crate) use launched::Launched;
pub(crate) use pair::{sim_naming as pair_sim_naming, PairLaunch};
pub use preflighted::Preflighted;
pub(crate) use rebind::{substitute, with_substitutes, Substitute};
pub(crate) use recording::{
    abandon_recording, keep_for_recording, refuse_if_recording, Finished, GraphBuild, LoopBody, Mode as RecordingMode,
};
use reserved::Reserved;
pub use resource::{External, Resource};
pub(crate) use resource::{ResourceKind, ResourceRef, ResourceSealed, Tracked};
pub use scope::LaunchScope;
#[cfg(feature = "nccl")]
pub(crate) use scope::SimEnqueuer;

use crate::device::BufferTrack;
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::trace::OpLabel;
use crate::track::{Access, HolderId};
use smallvec::SmallVec;
use std::sync::Arc;

const USER_LAUNCH: OpLabel = OpLabel::new("user", "launch");

#[derive(Clone)]
struct Use {
    buf: Arc<dyn Tracked>,
    access: Access,
    /// The buffer's id, kept beside it so that sorting and a solo launch's list of uses need
    /// no call through `buf`.
    id: u64,
}

impl Use {
    #[inline]
    fn track(&self) -> &BufferTrack {
        self.buf.track()
    }
}

/// Records the buffer uses of one launch (kernel, copy or library call) on one stream.
///
/// ```
/// use cusched::{Device, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let (s1, s2) = (device.new_stream()?, device.new_stream()?);
/// let a = device.upload(s1, &[1u32, 2, 3])?;
/// let b = device.alloc_zeros::<u32>(s2, 3)?;
/// let mut rec = LaunchRecorder::new_strict(s2);
/// rec.read(&a)?.write(&b)?;
/// let (src, dst) = (a.sim_data()?, b.sim_data()?);
/// // preflight makes s2 wait for a's upload on s1; commit records the event later users need.
/// rec.launch(&device, |scope| {
///     scope.sim_kernel(move || {
///         let src = src.read();
///         for (d, s) in dst.lock().iter_mut().zip(src.iter()) { *d = s * 10; }
///     })
/// })?;
/// assert_eq!(b.download(s1)?, vec![10, 20, 30]);
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// A recorder is only a list of declared uses until it is preflighted: cloning one (to retry
/// a preflight that failed, say) reserves nothing.
#[derive(Clone)]
pub struct LaunchRecorder {
    stream: StreamId,
    strict: bool,
    /// Buffers of other devices are accepted ([`with_peers`](Self::with_peers)).
    peers: bool,
    uses: SmallVec<[Use; 4]>,
    label: OpLabel,
    /// Runs now even on a stream a graph recording holds (an allocation's first write).
    unrecorded: bool,
}

impl std::fmt::Debug for LaunchRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchRecorder")
            .field("stream", &self.stream)
            .field("strict", &self.strict)
            .field("uses", &self.uses.iter().map(|u| (u.track().name(), u.access)).collect::<Vec<_>>())
            .finish()
    }
}

impl LaunchRecorder {
    /// A recorder that rejects untracked, foreign-device and stale memory with an error naming it.
    pub fn new_strict(stream: StreamId) -> Self {
        LaunchRecorder {
            stream,
            strict: true,
            peers: false,
            uses: SmallVec::new(),
            label: USER_LAUNCH,
            unrecorded: false,
        }
    }

    /// A recorder that skips untracked, foreign-device and stale memory (with a debug log).
    pub fn new_permissive(stream: StreamId) -> Self {
        LaunchRecorder {
            stream,
            strict: false,
            peers: false,
            uses: SmallVec::new(),
            label: USER_LAUNCH,
            unrecorded: false,
        }
    }

    /// A strict recorder with peers, named `label`, for a copy: see
    /// [`copy_uses`](Self::copy_uses).
    pub(crate) fn for_peer_copy(stream: StreamId, label: OpLabel) -> Self {
        LaunchRecorder { stream, strict: true, peers: true, uses: SmallVec::new(), label, unrecorded: false }
    }

    /// Declares a read of `src` and a write of `dst`, as [`read`](Self::read) and
    /// [`write`](Self::write) would, on a recorder with no uses yet: two distinct fresh
    /// buffers go in place at once, in id order; anything else is recorded use by use.
    pub(crate) fn copy_uses(&mut self, src: ResourceRef, dst: ResourceRef) -> Result<()> {
        debug_assert!(self.uses.is_empty());
        match (src, dst) {
            (ResourceRef(ResourceKind::Tracked(s)), ResourceRef(ResourceKind::Tracked(d))) => {
                let (st, dt) = (s.track(), d.track());
                let (read, write) = (st.id.0, dt.id.0);
                if read != write && st.is_fresh() && dt.is_fresh() {
                    let read = Use { buf: s, access: Access::Read, id: read };
                    let write = Use { buf: d, access: Access::Write, id: write };
                    let (first, second) = if read.id < write.id { (read, write) } else { (write, read) };
                    self.uses.push(first);
                    self.uses.push(second);
                    return Ok(());
                }
                self.record(ResourceRef(ResourceKind::Tracked(s)), Access::Read)?;
                self.record(ResourceRef(ResourceKind::Tracked(d)), Access::Write)?;
            }
            (src, dst) => {
                self.record(src, Access::Read)?;
                self.record(dst, Access::Write)?;
            }
        }
        Ok(())
    }

    /// Accepts buffers of other devices of this process too, for a launch that reads or writes
    /// peer memory (a peer copy, or a kernel given peer pointers after
    /// [`Device::enable_peer_access`]). Their uses are fenced like any other: the launch's
    /// stream waits for the conflicting uses on every device, and later uses on every device
    /// wait for the launch. Without it, a buffer of another device is
    /// [`Error::ForeignDevice`] (strict) or skipped (permissive), since a kernel given a pointer
    /// into another GPU's memory faults unless peer access is on.
    ///
    /// The buffers must be of the same backend as the stream (CUDA or simulated), else
    /// preflight fails with [`Error::WrongBackend`].
    pub fn with_peers(mut self) -> Self {
        self.peers = true;
        self
    }

    /// Names the launch for [`crate::KernelTrace`] hooks, the timeline and NVTX (library
    /// `"user"`; unnamed launches are `"launch"`).
    pub fn named(mut self, op: &'static str) -> Self {
        self.label = OpLabel::new("user", op);
        self
    }

    /// A buffer of another device must be of the stream's backend: a CUDA stream cannot wait on
    /// a simulated event, nor copy simulated memory.
    fn check_peer_backends(&self, device: &Device) -> Result<()> {
        let sim = device.is_simulated();
        let foreign = self.uses.iter().map(|u| u.track()).filter(|t| t.device.uid != device.shared.uid);
        for t in foreign {
            if t.device.is_simulated() != sim {
                let (needed, actual) = if sim { ("sim", "cuda") } else { ("cuda", "sim") };
                return Err(Error::WrongBackend { what: "a buffer of another device", needed, actual });
            }
        }
        Ok(())
    }

    /// Makes the launch run now even on a stream a graph recording holds, instead of being
    /// recorded (the first write of a buffer allocated there during the recording; its caller
    /// holds the stream's recording gate, so no capture is open).
    pub(crate) fn unrecorded(mut self) -> Self {
        self.unrecorded = true;
        self
    }

    /// Names the launch with a library's label (library ops name their launches this way).
    pub(crate) fn labelled(mut self, label: OpLabel) -> Self {
        self.label = label;
        self
    }

    /// The stream the launch runs on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Whether this recorder is strict.
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// Number of distinct tracked buffers recorded.
    pub fn recorded_count(&self) -> usize {
        self.uses.len()
    }

    /// Declares that the launch reads `buf`.
    pub fn read(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::Read)
    }

    /// Declares that the launch writes `buf` without reading it.
    pub fn write(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::Write)
    }

    /// Declares that the launch reads and writes `buf`.
    pub fn read_write(&mut self, buf: &impl Resource) -> Result<&mut Self> {
        self.record(buf.resource(), Access::ReadWrite)
    }

    /// Declares a use of a buffer held by its tracking side (a graph's recorded uses, replayed).
    pub(crate) fn access_tracked(&mut self, buf: Arc<dyn Tracked>, access: Access) -> Result<&mut Self> {
        self.record(ResourceRef(ResourceKind::Tracked(buf)), access)
    }

    /// Declares a use with an explicit [`Access`].
    pub fn access(&mut self, buf: &impl Resource, access: Access) -> Result<&mut Self> {
        self.record(buf.resource(), access)
    }

    /// A buffer of another device (without [`with_peers`](Self::with_peers)) or of an earlier
    /// generation: an error (strict) or skipped (permissive).
    #[cold]
    #[inline(never)]
    fn refuse(&self, t: &BufferTrack) -> Result<()> {
        if t.device.uid != self.stream.device && !self.peers {
            return self.reject(Error::ForeignDevice {
                what: t.name(),
                expected: format!("#{}", self.stream.device),
                found: t.device.label(),
            });
        }
        match t.check_fresh() {
            Ok(()) => Ok(()),
            Err(stale) => self.reject(stale),
        }
    }

    fn reject(&self, err: Error) -> Result<()> {
        if self.strict {
            return Err(err);
        }
        log::debug!("cusched: permissive recorder on {} skips a use: {err}", self.stream);
        Ok(())
    }

    fn record(&mut self, res: ResourceRef, access: Access) -> Result<&mut Self> {
        let ResourceRef(res) = res;
        let buf = match res {
            ResourceKind::External(what) => {
                self.reject(Error::Untracked { what })?;
                return Ok(self);
            }
            ResourceKind::Tracked(buf) => buf,
        };
        let t = buf.track();
        if (t.device.uid != self.stream.device && !self.peers) || !t.is_fresh() {
            self.refuse(t)?;
            return Ok(self);
        }
        // Kept sorted by buffer id, the order preflight reserves in (a launch uses few
        // buffers: a linear scan beats a search).
        let id = t.id.0;
        match self.uses.iter().position(|u| u.id >= id) {
            Some(i) if self.uses[i].id == id => self.uses[i].access = self.uses[i].access.merge(access),
            Some(i) => self.uses.insert(i, Use { buf, access, id }),
            None => self.uses.push(Use { buf, access, id }),
        }
        Ok(self)
    }

    /// Validates the recorder against `device` and queues every wait its uses need on its
    /// stream; returns the launch, to enqueue on through [`Preflighted::scope`] and then
    /// [`commit`](Preflighted::commit). Prefer [`launch`](Self::launch), which does all three.
    ///
    /// A hand-paired launch always takes marks, in solo mode too (see [`launch`](Self::launch)):
    /// there, on the one stream, it is ordered against solo launches by enqueue; once solo mode
    /// has closed, it waits for a conflicting solo launch still enqueueing, as for a mark.
    ///
    /// A read (or `read_write`) of a buffer whose last writer failed is
    /// [`Error::FailedInput`]. [`commit`](Preflighted::commit) counts as success: it clears the
    /// failure of what the launch writes.
    ///
    /// On error nothing is reserved and the recorder is gone: to retry (after a
    /// [`Error::BufferBusy`], say), preflight a clone.
    pub fn preflight(mut self, device: &Device) -> Result<Preflighted> {
        let reserved = self.admit(device, Choice::MarkedOnly, None)?;
        Ok(Preflighted::new(self.uses, device.shared.clone(), reserved))
    }
}

/// The launch's name as hazards show it (see [`crate::hazard::op_name`]).
#[cold]
fn op_origin_name(label: &OpLabel) -> Option<Arc<str>> {
    Some(crate::hazard::op_name(label.library, label.op()))
}

/// Clears the pending marks of `uses` without publishing an event: nothing was enqueued for
/// them, or the work that was has finished.
fn release(uses: &[Use], holder: HolderId) {
    for u in uses {
        u.track().publish(u.access, holder, None);
    }
}
