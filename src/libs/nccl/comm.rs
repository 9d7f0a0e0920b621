//! [`Communicator`]: one rank of an NCCL communicator, bound to a device, and how to make one.

use super::sim::{Clique, SimRank};
use super::watch::CudaComm;
use super::{calls, UniqueId};
use crate::backend::BackendCtx;
use crate::device::Device;
use crate::error::{CollectiveFault, Error, Result};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a communicator behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CommConfig {
    /// How long an op may stay pending (from its enqueue until the GPU finishes it, as the
    /// communicator's watchdog sees it: its looks, every 2 ms while ops are pending, may find
    /// the op up to one look late) before the watchdog declares its peers gone: it aborts the
    /// communicator and the op resolves with [`CollectiveFault::Timeout`]. Count the work
    /// queued before the op on its stream in it. Default: 5 minutes.
    pub timeout: Duration,
    /// How long making a non-blocking communicator waits for every rank to join (a blocking
    /// one waits inside NCCL until they have joined, or one of them has failed). Default: 5
    /// minutes.
    pub init_timeout: Duration,
    /// Whether NCCL's calls block until they are done (`ncclConfig_t::blocking`). Default:
    /// `true`.
    ///
    /// A blocking communicator enqueues an op at raw NCCL's cost. NCCL waits inside its calls
    /// only while it talks to the peers: when the communicator is made, and when an op first
    /// connects to a peer. A peer that died there makes the call fail (its sockets close); a
    /// peer that is alive but never answers holds the call. Ops already enqueued are watched
    /// either way: a dead or silent peer makes them fail after [`timeout`](Self::timeout).
    ///
    /// A non-blocking communicator returns from every call at once and cusched polls it, so
    /// [`init_timeout`](Self::init_timeout) and [`timeout`](Self::timeout) bound the waits
    /// inside NCCL too; but NCCL finishes each launch on a thread it starts for it, which costs
    /// every op (or [`group`](super::group)) tens of microseconds.
    pub blocking: bool,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig { timeout: Duration::from_secs(300), init_timeout: Duration::from_secs(300), blocking: true }
    }
}

impl CommConfig {
    /// This config with `timeout` as [`timeout`](Self::timeout).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// This config with `timeout` as [`init_timeout`](Self::init_timeout).
    pub fn with_init_timeout(mut self, timeout: Duration) -> Self {
        self.init_timeout = timeout;
        self
    }

    /// This config with `blocking` as [`blocking`](Self::blocking).
    pub fn with_blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }
}

/// What a communicator can do, from [`Communicator::capabilities`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Capabilities {
    /// NCCL's version `(major, minor, patch)`; `None` on the simulator.
    pub nccl_version: Option<(u32, u32, u32)>,
    /// Whether the communicator was made from a [`UniqueId`] ([`Communicator::init_rank`]),
    /// so that its ranks may be in other processes or on other hosts.
    pub spans_processes: bool,
    /// Whether [`Communicator::shrink`] is available (NCCL 2.27 and later, and the simulator).
    pub shrink: bool,
    /// The reductions: `"sum"`, `"prod"`, `"max"`, `"min"`, `"avg"`, `"premulsum"`.
    pub reductions: &'static [&'static str],
    /// The element types: `"u8"`, `"i32"`, `"f16"`, `"bf16"`, `"f32"`, `"f64"`.
    pub types: &'static [&'static str],
}

/// One rank of a communicator, bound to a device. Cheap to clone: clones are the same rank.
/// Its ops run through [`crate::Handles::nccl`] on a stream of its device.
///
/// Dropping the last clone releases the communicator once its pending ops have finished (on
/// the watchdog's thread, never blocking the caller).
#[derive(Clone)]
pub struct Communicator {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// Process-wide id, to lock communicators in one order.
    pub uid: u64,
    pub device: Device,
    pub rank: usize,
    pub nranks: usize,
    pub from_id: bool,
    pub config: CommConfig,
    pub backend: Backend,
    /// The device generation the communicator was made in: NCCL's communicator lives in that
    /// context, and goes with it when the device rebuilds a poisoned one (which, as
    /// `Device::advance_generation`, makes it stale).
    pub generation: u64,
}

/// A collective's verdict: whether the watchdog failed it (its token is its
/// [`Watch`](super::watch::Watch)), read once its event has passed.
impl crate::completion::Judge for Inner {
    fn judge(&self, token: u128) -> Result<()> {
        match &self.backend {
            Backend::Cuda(c) if c.failed(super::watch::Watch::from_token(token)) => Err(c.failure()),
            _ => Ok(()),
        }
    }
}

pub(super) enum Backend {
    Cuda(CudaComm),
    Sim(SimRank),
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner;
        write!(f, "Communicator(rank {} of {} on {})", i.rank, i.nranks, i.device.shared.label())
    }
}

impl Communicator {
    /// One communicator over `devices` (rank `i` on `devices[i]`), made at once from this
    /// process (`ncclCommInitRankConfig` for every rank in one group). The devices are
    /// distinct, and all CUDA devices or all simulated devices of one
    /// [`Device::sim_group`].
    pub fn init_all(devices: &[Device], config: &CommConfig) -> Result<Vec<Communicator>> {
        check_devices(devices)?;
        if devices[0].is_simulated() {
            let clique = Clique::new(devices.len(), config.timeout);
            return Ok(devices.iter().enumerate().map(|(r, d)| sim_rank(d, &clique, r, false, config)).collect());
        }
        let n = c_int::try_from(devices.len()).map_err(|_| Error::invalid("devices", "too many devices"))?;
        let id = UniqueId::new()?;
        let ctxs = devices.iter().map(|d| d.shared.cuda_ctx("Communicator::init_all")).collect::<Result<Vec<_>>>()?;
        let mut made = Vec::with_capacity(devices.len());
        let deadline = deadline(config.init_timeout);
        let started = calls::group_start();
        let mut failed = started.err();
        if failed.is_none() {
            for (rank, ctx) in (0..n).zip(&ctxs) {
                let init = crate::backend::cuda::bind(ctx).and_then(|()| {
                    // SAFETY: the rank's device's context was made current just above.
                    unsafe { calls::init_rank(n, &id.to_bytes(), rank, config.blocking) }
                });
                match init {
                    Ok(c) => made.push(c),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Ends the group whatever happened in it: a group left open breaks later calls.
            failed = failed.or(calls::group_end().err());
        }
        if let Some(e) = failed.or_else(|| calls::wait_ready(&made, "ncclCommInitRankConfig", deadline).err()) {
            made.into_iter().for_each(calls::abort);
            return Err(e);
        }
        let comms = devices.iter().zip(made).enumerate();
        Ok(comms.map(|(rank, (d, raw))| cuda_rank(d, raw, rank, devices.len(), false, config)).collect())
    }

    /// Rank `rank` of a communicator of `nranks` ranks, on `device`, made from `id`: every rank
    /// (in this process or another, on this host or another) calls it with the same id, which
    /// one of them made with [`UniqueId::new`] and handed to the others. It returns once every
    /// rank has joined, or fails after [`CommConfig::init_timeout`].
    ///
    /// On a simulated device the ranks are threads of this process, and the id is
    /// [`UniqueId::simulated`].
    pub fn init_rank(
        device: &Device,
        id: &UniqueId,
        nranks: usize,
        rank: usize,
        config: &CommConfig,
    ) -> Result<Communicator> {
        let n = c_int::try_from(nranks).ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::invalid("nranks", format!("{nranks} ranks: a communicator has 1 to {} ranks", c_int::MAX))
        })?;
        if rank >= nranks {
            return Err(Error::invalid("rank", format!("rank {rank} of a communicator of {nranks} ranks")));
        }
        if device.is_simulated() != id.is_simulated() {
            let reason = if device.is_simulated() {
                "is an NCCL id; on a simulated device use UniqueId::simulated"
            } else {
                "is a simulated id; on a CUDA device use UniqueId::new"
            };
            return Err(Error::invalid("id", reason));
        }
        if device.is_simulated() {
            let clique = Clique::join(id, nranks, config)?;
            return Ok(sim_rank(device, &clique, rank, true, config));
        }
        if !calls::is_present() {
            return Err(super::super::unavailable::<super::Nccl>());
        }
        let ctx = device.shared.cuda_ctx("Communicator::init_rank")?;
        crate::backend::cuda::bind(&ctx)?;
        // SAFETY: the device's context was made current just above.
        let raw = unsafe { calls::init_rank(n, &id.to_bytes(), rank as c_int, config.blocking) }?;
        if let Err(e) = calls::wait_ready(&[raw], "ncclCommInitRankConfig", deadline(config.init_timeout)) {
            calls::abort(raw);
            return Err(e);
        }
        Ok(cuda_rank(device, raw, rank, nranks, true, config))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.inner.nranks
    }

    /// The device this rank is bound to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// What this communicator can do.
    pub fn capabilities(&self) -> Capabilities {
        let cuda = matches!(self.inner.backend, Backend::Cuda(_));
        let version = cuda.then(calls::version).and_then(|v| v.ok()).map(|v| {
            let v = v as u32;
            (v / 10000, v / 100 % 100, v % 100)
        });
        Capabilities {
            nccl_version: version,
            spans_processes: self.inner.from_id,
            shrink: !cuda || calls::has_symbol(b"ncclCommShrink"),
            reductions: &["sum", "prod", "max", "min", "avg", "premulsum"],
            types: &["u8", "i32", "f16", "bf16", "f32", "f64"],
        }
    }

    /// The fault that ended this communicator, if one has: every op fails with it since.
    pub fn fault(&self) -> Option<Error> {
        match &self.inner.backend {
            Backend::Cuda(c) => c.fault(),
            Backend::Sim(s) => s.fault(),
        }
    }

    /// Aborts the communicator (`ncclCommAbort`): its pending ops stop and resolve with
    /// [`CollectiveFault::Aborted`], later ops fail at once. The other ranks' ops on it then
    /// fail too (with their own timeout or NCCL's error).
    pub fn abort(&self) {
        let fault = Error::Collective {
            call: "Communicator::abort",
            fault: CollectiveFault::Aborted,
            detail: format!("rank {} aborted the communicator", self.inner.rank),
        };
        match &self.inner.backend {
            Backend::Cuda(c) => c.declare(fault),
            Backend::Sim(s) => s.abort(fault),
        }
    }

    /// A communicator of the ranks not in `exclude` (renumbered in rank order), from this live
    /// one (`ncclCommShrink`): every remaining rank calls it with the same list, and gets its
    /// new rank; an excluded rank gets `None`. Only a communicator with no fault shrinks (an
    /// aborted one is gone: make a new one with [`init_rank`](Self::init_rank)).
    pub fn shrink(&self, exclude: &[usize]) -> Result<Option<Communicator>> {
        let mut ranks = exclude.to_vec();
        ranks.sort_unstable();
        ranks.dedup();
        if let Some(&bad) = ranks.iter().find(|&&r| r >= self.inner.nranks) {
            return Err(Error::invalid(
                "exclude",
                format!("rank {bad} of a communicator of {} ranks", self.inner.nranks),
            ));
        }
        if ranks.len() == self.inner.nranks {
            return Err(Error::invalid("exclude", "excludes every rank"));
        }
        let left = self.inner.nranks - ranks.len();
        let new_rank = self.inner.rank - ranks.iter().filter(|&&r| r < self.inner.rank).count();
        let config = &self.inner.config;
        match &self.inner.backend {
            Backend::Sim(s) => {
                let clique = s.shrunk(&ranks, left)?;
                Ok((!ranks.contains(&self.inner.rank))
                    .then(|| sim_rank(&self.inner.device, &clique, new_rank, self.inner.from_id, config)))
            }
            Backend::Cuda(c) => {
                if !calls::has_symbol(b"ncclCommShrink") {
                    return Err(Error::Unsupported {
                        library: "NCCL (libnccl)",
                        what: "ncclCommShrink".into(),
                        hint: "install NCCL 2.27 or later, or make a new communicator with Communicator::init_rank"
                            .into(),
                    });
                }
                let raw = c.shrink(&ranks)?;
                Ok(raw.map(|raw| cuda_rank(&self.inner.device, raw, new_rank, left, self.inner.from_id, config)))
            }
        }
    }
}

fn deadline(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait).unwrap_or(now + Duration::from_secs(86_400 * 365))
}

fn new_inner(
    device: &Device,
    rank: usize,
    nranks: usize,
    from_id: bool,
    config: &CommConfig,
    backend: Backend,
) -> Inner {
    Inner {
        uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
        device: device.internal(),
        rank,
        nranks,
        from_id,
        config: config.clone(),
        backend,
        generation: device.shared.generation(),
    }
}

fn sim_rank(device: &Device, clique: &Arc<Clique>, rank: usize, from_id: bool, config: &CommConfig) -> Communicator {
    let backend = Backend::Sim(SimRank::new(clique.clone(), rank));
    Communicator { inner: Arc::new(new_inner(device, rank, clique.nranks, from_id, config, backend)) }
}

fn cuda_rank(
    device: &Device,
    raw: calls::RawComm,
    rank: usize,
    nranks: usize,
    from_id: bool,
    config: &CommConfig,
) -> Communicator {
    let backend = Backend::Cuda(CudaComm::new(raw, device, config.timeout, config.blocking));
    Communicator { inner: Arc::new(new_inner(device, rank, nranks, from_id, config, backend)) }
}

/// `devices` for [`Communicator::init_all`]: some, distinct, one backend, and simulated ones
/// on one machine.
fn check_devices(devices: &[Device]) -> Result<()> {
    let Some(first) = devices.first() else {
        return Err(Error::invalid("devices", "a communicator needs at least one device"));
    };
    for (i, d) in devices.iter().enumerate() {
        if devices[..i].iter().any(|e| e.shared.uid == d.shared.uid) {
            return Err(Error::invalid("devices", format!("device {} is listed twice", d.shared.label())));
        }
        if d.is_simulated() != first.is_simulated() {
            return Err(Error::invalid("devices", "mixes simulated and CUDA devices"));
        }
        if machine(d) != machine(first) {
            return Err(Error::invalid(
                "devices",
                "simulated devices of one communicator must come from one Device::sim_group",
            ));
        }
    }
    Ok(())
}

/// The simulated machine a device is on (`None` on CUDA).
fn machine(d: &Device) -> Option<usize> {
    match d.shared.backend() {
        BackendCtx::Sim(s) => Some(s.machine_id()),
        BackendCtx::Cuda(_) => None,
    }
}
