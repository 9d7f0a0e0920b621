//! Observability: [`KernelTrace`] hooks around every op, the built-in Chrome-trace
//! [`Timeline`] sink, and (with the `nvtx` feature) NVTX ranges.
//!
//! Every op that goes through a [`crate::LaunchRecorder`] (library calls, typed kernel
//! launches, copies, user launches) is an *op* here. With no hook set, the op path pays one
//! relaxed atomic load; with a hook set, each op gets a [`TraceTicket`] that carries its
//! [`OpInfo`] from enqueue to completion, and, when GPU timing is on, two timing events
//! recorded around its GPU work.

mod nvtx;
mod timeline;

pub(crate) use nvtx::NvtxRange;
pub use timeline::{Timeline, TimelineSpan, TrackKind};

use crate::backend::{BackendCtx, RawEvent, RawStream};
use crate::error::Result;
use crate::track::StreamId;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// What an op is, as the hooks see it.
#[derive(Clone, Debug)]
pub struct OpInfo {
    /// Unique per device and op: pairs the four hook calls of one op.
    pub id: u64,
    /// The lane whose stream the op runs on, if it is a lane's.
    pub lane: Option<Arc<str>>,
    /// The stream the op was enqueued on.
    pub stream: StreamId,
    /// The library (`"cuBLAS"`, `"cuFFT"`, `"cuRAND"`, `"kernel"`, `"memory"`, `"user"`).
    pub library: &'static str,
    /// The op (`"gemm"`, a kernel's name, `"upload"`, or a name given with
    /// [`crate::LaunchRecorder::named`]).
    pub op: Cow<'static, str>,
}

/// When and how long the GPU ran an op, measured with timing events around its work on the
/// stream (after its fences, so waiting for other streams is not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuSpan {
    /// When the GPU started the op, on the host's clock (mapped through a reference event
    /// recorded when tracing started; accurate to about a microsecond).
    pub start: Instant,
    /// How long it ran.
    pub duration: Duration,
}

/// Hooks called around every op. All methods default to doing nothing.
///
/// `before_enqueue` and `after_enqueue` run on the enqueuing thread (a lane's thread, or
/// yours inline), bracketing the op's whole host cost (validation excluded: it runs before the
/// op exists). `before_completion` and `after_completion` run on whichever thread first sees
/// the GPU finish the op (the completion thread, or a thread in [`crate::Completion::wait`]):
/// before the op's completion publishes its value, drops its keep-alives and wakes waiters,
/// and after. For an op that returns no completion (a recorder launch, an upload, a copy) the
/// completion thread runs them in batches, within about a millisecond after the GPU finished
/// the op and never before. Hooks must be quick and must not block on the GPU.
///
/// ```
/// use cusched::{Device, KernelTrace, OpInfo, SimConfig, TraceOptions};
/// use std::sync::{atomic::{AtomicUsize, Ordering}, Arc};
///
/// #[derive(Default)]
/// struct Count(AtomicUsize);
/// impl KernelTrace for Count {
///     fn after_enqueue(&self, _op: &OpInfo) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let device = Device::sim(SimConfig::default())?;
/// let count = Arc::new(Count::default());
/// device.set_trace(count.clone(), TraceOptions::default())?;
/// device.upload(device.default_stream(), &[1u8, 2, 3])?;
/// assert_eq!(count.0.load(Ordering::Relaxed), 1);
/// # Ok::<(), cusched::Error>(())
/// ```
pub trait KernelTrace: Send + Sync + 'static {
    /// The op is about to be fenced and enqueued.
    fn before_enqueue(&self, op: &OpInfo) {
        let _ = op;
    }
    /// The op is enqueued and committed.
    fn after_enqueue(&self, op: &OpInfo) {
        let _ = op;
    }
    /// The GPU has finished the op; its completion is about to resolve.
    fn before_completion(&self, op: &OpInfo, gpu: Option<GpuSpan>) {
        let _ = (op, gpu);
    }
    /// The op's completion has resolved.
    fn after_completion(&self, op: &OpInfo, gpu: Option<GpuSpan>) {
        let _ = (op, gpu);
    }
}

/// How a device traces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceOptions {
    /// Record two timing events around every op so that the completion hooks get a
    /// [`GpuSpan`]. Costs about two `cuEventRecord`s per op.
    pub gpu_timing: bool,
}

/// The hook a device has, and what GPU timing needs.
struct Active {
    hook: Arc<dyn KernelTrace>,
    timing: Option<Timing>,
}

struct Timing {
    backend: BackendCtx,
    /// A timing event the GPU passed at `at`: GPU timestamps are mapped to host time from it.
    reference: RawEvent,
    at: Instant,
    pool: Mutex<Vec<RawEvent>>,
}

impl Timing {
    fn new(backend: &BackendCtx, reference_stream: &RawStream) -> Result<Timing> {
        let reference = backend.new_timing_event()?;
        reference_stream.record(&reference)?;
        reference.synchronize()?;
        Ok(Timing { backend: backend.clone(), reference, at: Instant::now(), pool: Mutex::new(Vec::new()) })
    }
}

/// The device's trace state. `on` is the only thing the op path reads when tracing is off.
#[derive(Default)]
pub(crate) struct Tracer {
    on: AtomicBool,
    active: crate::sync::Ranked<RwLock<Option<Arc<Active>>>, { crate::sync::rank::TRACER }>,
    next_id: AtomicU64,
}

impl Tracer {
    /// Whether a trace hook or timeline is set: what [`begin`](Self::begin) reads first.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn set(
        &self,
        hook: Arc<dyn KernelTrace>,
        options: TraceOptions,
        backend: &BackendCtx,
        reference_stream: &RawStream,
    ) -> Result<()> {
        let timing = if options.gpu_timing { Some(Timing::new(backend, reference_stream)?) } else { None };
        *crate::sync::write(&self.active) = Some(Arc::new(Active { hook, timing }));
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Moves GPU timing to a rebuilt context (its timing events and reference are new).
    pub(crate) fn rebase(&self, backend: &BackendCtx, reference_stream: &RawStream) {
        let mut active = crate::sync::write(&self.active);
        let Some(old) = active.as_ref().filter(|a| a.timing.is_some()).cloned() else { return };
        match Timing::new(backend, reference_stream) {
            Ok(t) => *active = Some(Arc::new(Active { hook: old.hook.clone(), timing: Some(t) })),
            Err(e) => {
                log::warn!("cusched: GPU timing is off after the context rebuild: {e}");
                *active = Some(Arc::new(Active { hook: old.hook.clone(), timing: None }));
            }
        }
    }

    pub(crate) fn clear(&self) {
        self.on.store(false, Ordering::Release);
        *crate::sync::write(&self.active) = None;
    }

    /// A ticket for a new op, or `None` (one relaxed load) when no hook is set.
    #[inline]
    pub(crate) fn begin(
        &self,
        lane: impl FnOnce() -> Option<Arc<str>>,
        stream: StreamId,
        label: &OpLabel,
    ) -> Option<TraceTicket> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let active = crate::sync::read(&self.active).clone()?;
        let info = OpInfo {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            lane: lane(),
            stream,
            library: label.library,
            op: label.op_cow(),
        };
        active.hook.before_enqueue(&info);
        Some(TraceTicket { active, info, start: None, end: None })
    }
}

/// What a recorder reports to the trace: which library and op it is. Cheap to make and
/// clone, since every op carries one whether or not a hook is set.
#[derive(Clone, Debug)]
pub(crate) struct OpLabel {
    pub library: &'static str,
    pub op: OpName,
}

#[derive(Clone, Debug)]
pub(crate) enum OpName {
    Static(&'static str),
    /// A runtime name (a compiled kernel's), shared rather than copied per op.
    #[cfg_attr(not(feature = "nvrtc"), allow(dead_code))]
    Shared(Arc<str>),
}

impl OpLabel {
    pub(crate) const fn new(library: &'static str, op: &'static str) -> Self {
        OpLabel { library, op: OpName::Static(op) }
    }

    pub(crate) fn op(&self) -> &str {
        match &self.op {
            OpName::Static(s) => s,
            OpName::Shared(s) => s,
        }
    }

    fn op_cow(&self) -> Cow<'static, str> {
        match &self.op {
            OpName::Static(s) => Cow::Borrowed(s),
            OpName::Shared(s) => Cow::Owned(s.to_string()),
        }
    }
}

/// One traced op, from enqueue to completion.
pub(crate) struct TraceTicket {
    active: Arc<Active>,
    info: OpInfo,
    start: Option<RawEvent>,
    end: Option<RawEvent>,
}

impl TraceTicket {
    fn timing_event(&self, stream: &RawStream) -> Option<RawEvent> {
        let timing = self.active.timing.as_ref()?;
        let ev = match crate::sync::lock(&timing.pool).pop() {
            Some(ev) => ev,
            None => match timing.backend.new_timing_event() {
                Ok(ev) => ev,
                Err(e) => {
                    log::warn!("cusched: no timing event for a traced op: {e}");
                    return None;
                }
            },
        };
        match stream.record(&ev) {
            Ok(()) => Some(ev),
            Err(e) => {
                log::warn!("cusched: recording a timing event failed: {e}");
                None
            }
        }
    }

    /// The op's fences are queued and its GPU work is about to be enqueued.
    pub(crate) fn gpu_start(&mut self, stream: &RawStream) {
        self.start = self.timing_event(stream);
    }

    /// The op's GPU work is enqueued (before its commit event).
    pub(crate) fn gpu_end(&mut self, stream: &RawStream) {
        if self.start.is_some() {
            self.end = self.timing_event(stream);
        }
    }

    /// The op is committed.
    pub(crate) fn enqueued(&self) {
        self.active.hook.after_enqueue(&self.info);
    }

    fn span(&self) -> Option<GpuSpan> {
        let timing = self.active.timing.as_ref()?;
        let (start, end) = (self.start.as_ref()?, self.end.as_ref()?);
        let offset = start.elapsed_since(&timing.reference).ok()?;
        let duration = end.elapsed_since(start).ok()?;
        Some(GpuSpan { start: timing.at + offset, duration })
    }

    /// Calls `before_completion`; hand the result to [`completed`](Self::completed).
    pub(crate) fn completing(&self, gpu_ok: bool) -> Option<GpuSpan> {
        let span = if gpu_ok { self.span() } else { None };
        self.active.hook.before_completion(&self.info, span);
        span
    }

    pub(crate) fn completed(self, span: Option<GpuSpan>) {
        self.active.hook.after_completion(&self.info, span);
    }
}

impl Drop for TraceTicket {
    fn drop(&mut self) {
        if let Some(timing) = &self.active.timing {
            let mut pool = crate::sync::lock(&timing.pool);
            pool.extend(self.start.take());
            pool.extend(self.end.take());
        }
    }
}
