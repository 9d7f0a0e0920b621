//! Several devices in one process: peer copies, peer access, and devices made together.
//!
//! Positions and clocks span devices (every stream of the process has one index, see
//! `track::registry`), so a buffer used on streams of two GPUs is fenced like one used on two
//! streams of one: `cuStreamWaitEvent` accepts an event of another context. A peer copy is one
//! launch on one stream that reads its source and writes its destination; both buffers record
//! it, so the copy waits for the conflicting uses of both on every device, and every later use
//! of either, on any device, waits for the copy. A buffer freed on one GPU after a peer read on
//! another is freed after that read, since the read is one of its outstanding uses.
//!
//! On the simulator, devices made with [`Device::sim_group`] share one simulated machine, whose
//! hazard checker sees the streams of all of them.

use crate::backend::cuda::peer;
use crate::backend::sim::SimConfig;
use crate::backend::{sim::SimShared, BackendCtx};
use crate::device::{Device, DeviceConfig, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::recorder::{pair_sim_naming, LaunchRecorder, PairLaunch, ResourceSealed};
use crate::trace::OpLabel;
use cudarc::driver::CudaContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

impl Device {
    /// `count` simulated devices on one simulated machine: their streams are CPU threads like
    /// [`Device::sim`]'s, and one hazard checker sees the streams of all of them, so that
    /// schedules across devices (peer copies, buffers used on several devices) are checked.
    /// [`sim_hazards`](Self::sim_hazards) on any of them reports the machine's hazards. Their
    /// ordinals are `0..count`.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let gpus = Device::sim_group(SimConfig::default(), 2)?;
    /// let (a, b) = (&gpus[0], &gpus[1]);
    /// let x = a.upload(a.default_stream(), &[1u32, 2, 3])?;
    /// let y = b.alloc_zeros::<u32>(b.default_stream(), 3)?;
    /// x.copy_to(a.default_stream(), &y)?; // waits for the upload; later uses of y wait for it
    /// assert_eq!(y.download(b.default_stream())?, [1, 2, 3]);
    /// assert!(a.sim_hazards()?.is_empty());
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn sim_group(sim: SimConfig, count: usize) -> Result<Vec<Device>> {
        Device::sim_group_with(sim, DeviceConfig::default(), count)
    }

    /// [`sim_group`](Self::sim_group) with a device configuration (every device gets a copy).
    pub fn sim_group_with(sim: SimConfig, config: DeviceConfig, count: usize) -> Result<Vec<Device>> {
        if count == 0 {
            return Err(Error::invalid("count", "a simulated machine needs at least one device"));
        }
        SimShared::group(&sim, count)
            .into_iter()
            .enumerate()
            .map(|(ordinal, ctx)| {
                let shared = DeviceShared::new(ordinal, BackendCtx::Sim(ctx), config.clone(), sim.fence_mutation)?;
                Ok(Device::owned(shared))
            })
            .collect()
    }

    /// Opens CUDA device `ordinal` on a context of its own instead of the primary context that
    /// [`Device::open`] shares with every other user of the GPU in the process. Two such devices
    /// on one GPU are two contexts: work of one cannot poison the other, and copies between
    /// them are peer copies. (Libraries that use the primary context themselves may not work
    /// on such a context: NCCL's sends and receives do not; see the `nccl` module.)
    pub fn open_isolated(ordinal: usize, config: DeviceConfig) -> Result<Device> {
        let ctx = peer::open_isolated(ordinal)?;
        Ok(Device::owned(DeviceShared::new(ordinal, BackendCtx::Cuda(ctx), config, None)?))
    }

    /// Lets kernels of this device read and write `peer`'s memory directly (plain and
    /// stream-ordered allocations alike). Returns `false` where the GPUs cannot map each
    /// other's memory (or are one GPU, which needs nothing). Access holds for the current
    /// contexts: after either device rebuilds a poisoned context, call it again.
    ///
    /// Declare such a kernel's uses of `peer`'s buffers on a recorder made
    /// [`with_peers`](LaunchRecorder::with_peers). Copies need none of this:
    /// [`GpuRef::copy_to`] enables access itself where the GPUs allow it, and is staged by the
    /// driver where they do not. On simulated devices this returns `true`.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<bool> {
        match (self.shared.backend(), peer.shared.backend()) {
            (BackendCtx::Sim(_), BackendCtx::Sim(_)) => Ok(true),
            (BackendCtx::Cuda(mine), BackendCtx::Cuda(theirs)) => {
                let epoch = self.shared.epoch();
                self.shared.check(peer::enable(&mine, &theirs), epoch)
            }
            (BackendCtx::Cuda(_), BackendCtx::Sim(_)) => {
                Err(Error::WrongBackend { what: "Device::enable_peer_access", needed: "cuda", actual: "sim" })
            }
            (BackendCtx::Sim(_), BackendCtx::Cuda(_)) => {
                Err(Error::WrongBackend { what: "Device::enable_peer_access", needed: "sim", actual: "cuda" })
            }
        }
    }

    /// Copies all of `src` into `dst` on `stream`, a stream of this device; the buffers may be
    /// of any devices of the process (of this one too). See [`GpuRef::copy_to`].
    pub fn copy_peer<T: Element>(&self, stream: StreamId, src: &GpuRef<T>, dst: &GpuRef<T>) -> Result<()> {
        copy_on(&self.shared, stream, src, dst)
    }
}

/// The op's name in traces, hazards and failures.
const COPY_PEER: OpLabel = OpLabel::new("memory", "copy_peer");

/// [`Device::copy_peer`] on `device`, which is borrowed rather than held: a copy made through
/// [`GpuRef::copy_to`] takes no handle of its own to the device.
#[inline(always)]
fn copy_on<T: Element>(device: &Arc<DeviceShared>, stream: StreamId, src: &GpuRef<T>, dst: &GpuRef<T>) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::invalid("dst", format!("has {} elements, the source has {}", dst.len(), src.len())));
    }
    if dst.same_buffer(src) {
        return Err(Error::invalid("dst", "is the source buffer itself"));
    }
    let (st, dt) = (src.track(), dst.track());
    if st.device.uid == dt.device.uid {
        // One device: an ordinary copy, which also checks the stream is of that device.
        return dst.copy_from(stream, src);
    }
    // Around either path: the general one names its kernels again inside, the same way.
    let _names = pair_sim_naming(device, stream, &COPY_PEER, [st, dt]);
    if let Some(admitted) = PairLaunch::admit(device, stream, st, dt, &COPY_PEER) {
        let launch = admitted?;
        enable_peers(src, dst);
        // SAFETY: 1. the buffers are distinct allocations of equal length (checked above);
        // 2. both are marked and the stream fenced against every conflicting marked use of
        // either, on every device, later uses wait for the commit, and both frees are ordered
        // after the copy (both buffers record it); 3. uses that take no marks (solo launches
        // while the stream is its device's solo stream) are on this same stream, ordered by
        // stream order.
        let out = unsafe { dst.memory().copy_from_peer(&launch, src.memory()) };
        return launch.commit(out);
    }
    copy_recorded(&Device::from_shared(device), stream, src, dst)
}

/// Enables peer access between the CUDA contexts of `src`'s and `dst`'s memory, once per
/// pair (see [`enable_once`]); simulated memory needs none.
#[inline(always)]
fn enable_peers<T: Element>(src: &GpuRef<T>, dst: &GpuRef<T>) {
    if let Some([from, to]) = src.memory().peer_contexts(dst.memory()) {
        let (st, dt) = (src.track(), dst.track());
        enable_once((st.device.uid, st.epoch, from), (dt.device.uid, dt.epoch, to));
    }
}

/// A peer copy through a recorder, for whatever [`PairLaunch`] leaves to the general path.
#[cold]
#[inline(never)]
fn copy_recorded<T: Element>(device: &Device, stream: StreamId, src: &GpuRef<T>, dst: &GpuRef<T>) -> Result<()> {
    let mut rec = LaunchRecorder::for_peer_copy(stream, COPY_PEER);
    rec.copy_uses(src.resource(), dst.resource())?;
    enable_peers(src, dst);
    rec.launch_in_place(device, |scope| {
        // SAFETY: 1. the buffers are distinct allocations of equal length (checked by the
        // caller); 2. the preflight made the stream wait for every conflicting use of both
        // buffers, on every device, later uses wait for the commit, and both frees are ordered
        // after the copy (both buffers record it).
        unsafe { dst.memory().copy_from_peer(scope, src.memory()) }
    })
}

impl<T: Element> GpuRef<T> {
    /// Copies this buffer into `dst`, a buffer of any device of the process (of this one too),
    /// on `stream`, a stream of either buffer's device. The copy is a read of this buffer and a
    /// write of `dst`: it waits for the conflicting uses of both, on every device, and every
    /// later use of either waits for it. Dropping either buffer afterwards frees it after the
    /// copy.
    ///
    /// Between GPUs that can map each other's memory, peer access is enabled the first time a
    /// pair copies (`cuCtxEnablePeerAccess`, and `cuMemPoolSetAccess` for stream-ordered
    /// allocations); otherwise `cuMemcpyPeerAsync` is staged through the host by the driver.
    /// Simulated devices copy on the host; their uses are checked when the devices share a
    /// machine ([`Device::sim_group`]).
    pub fn copy_to(&self, stream: StreamId, dst: &GpuRef<T>) -> Result<()> {
        let device = [&self.track().device, &dst.track().device]
            .into_iter()
            .find(|d| d.uid == stream.device)
            .ok_or_else(|| Error::ForeignDevice {
                what: stream.to_string(),
                expected: format!("a stream of {} or {}", self.track().device.label(), dst.track().device.label()),
                found: format!("#{}", stream.device),
            })?;
        copy_on(device, stream, self, dst)
    }
}

/// Device pairs (uid and context epoch of each) whose peer access was tried, so that each pair
/// asks the driver once per pair of contexts. Pairs are few and never reused (uids are not).
type PeerKey = (u32, u64, u32, u64);
static TRIED: Mutex<Option<HashMap<PeerKey, bool>>> = Mutex::new(None);

/// Enables peer access both ways between two contexts once, where the GPUs allow it. A failure
/// only costs speed (the copy is staged by the driver), so it is logged, not returned.
fn enable_once(a: (u32, u64, &Arc<CudaContext>), b: (u32, u64, &Arc<CudaContext>)) {
    let (lo, hi) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    let key = (lo.0, lo.1, hi.0, hi.1);
    // A thread copying between one pair over and over (the common case) skips the process-wide
    // lock and hash: a key, once tried, stays tried.
    thread_local! {
        static LAST: std::cell::Cell<Option<PeerKey>> = const { std::cell::Cell::new(None) };
    }
    if LAST.try_with(|l| l.get() == Some(key)).unwrap_or(false) {
        return;
    }
    let _ = LAST.try_with(|l| l.set(Some(key)));
    let mut tried = crate::sync::lock(&TRIED);
    let tried = tried.get_or_insert_with(HashMap::new);
    if tried.contains_key(&key) {
        return;
    }
    let on = [(lo.2, hi.2), (hi.2, lo.2)].into_iter().all(|(ctx, peer)| match peer::enable(ctx, peer) {
        Ok(on) => on,
        Err(e) => {
            log::debug!("cusched: peer access between devices #{} and #{} is off ({e}); copies are staged", lo.0, hi.0);
            false
        }
    });
    log::debug!("cusched: peer access between devices #{} and #{}: {}", lo.0, hi.0, if on { "on" } else { "off" });
    tried.insert(key, on);
}
