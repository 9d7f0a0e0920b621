//! A queued lane job: its body, its submit ticket and the reservations it holds; and
//! [`JobBuilder`], which declares a job's buffers.

use super::Lane;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::Handles;
use crate::recorder::{Resource, ResourceKind, ResourceRef, Tracked};
use crate::track::reservation::{self, Declared, JobScope, Ticket};
use crate::track::Access;
use smallvec::SmallVec;
use std::sync::Arc;

pub(super) enum Call<'a> {
    Run(&'a mut crate::libs::Handles, JobScope),
    /// Resolve the job's completion with this error, unrun.
    Cancel(Error),
}

/// Runs or cancels the job; returns the job's error when it ran and failed.
pub(super) type Body = Box<dyn FnOnce(Call<'_>) -> Option<Error> + Send>;

/// A declared job's buffers and, once queued, the reservations they hold. Dropping it releases
/// them, so a job that ends, fails, panics or is dropped unrun never leaves a later use waiting.
#[derive(Default)]
pub(super) struct Held {
    ticket: Option<Ticket>,
    uses: SmallVec<[(Arc<dyn Tracked>, Access); 4]>,
    /// The lane the job was submitted to, naming it in the failure its writes carry if it fails.
    lane: Option<Arc<str>>,
}

impl Held {
    /// Reserves every declared buffer's next position for `ticket`.
    pub(super) fn reserve(&mut self, ticket: Ticket) {
        self.unreserve();
        for (b, a) in &self.uses {
            b.track().reservations.reserve(ticket, *a);
        }
        self.ticket = Some(ticket);
    }

    pub(super) fn unreserve(&mut self) {
        if let Some(t) = self.ticket.take() {
            for (b, _) in &self.uses {
                b.track().reservations.release(t);
            }
        }
    }

    /// The job failed (returned `cause`, panicked, or will never run) while holding its
    /// reservations: every buffer it declared a write of is failed (see
    /// [`Error::FailedInput`]), in the job's turn (once the jobs submitted before it are done
    /// with the buffer, as its write would have waited) and before its reservations are
    /// released, so that exactly the uses ordered after the job see it. An earlier failure
    /// left by a launch inside the job stays.
    #[cold]
    #[inline(never)]
    pub(super) fn fail_writes(&self, cause: &Error) {
        let Some(ticket) = self.ticket else { return };
        let op = format!("the job on lane `{}`", self.lane.as_deref().unwrap_or("?"));
        for (b, a) in &self.uses {
            if a.writes() {
                let t = b.track();
                if let Err(e) = reservation::await_before(t, *a, ticket, t.device.config.preflight_timeout) {
                    log::error!("cusched: {op} failed ({cause}); marking {} failed without its turn: {e}", t.name());
                }
                t.fail(&op, cause, true);
            }
        }
    }

    /// The declaration a job holding these uses is checked against.
    fn declared(&self) -> Declared {
        Declared::new(self.uses.iter().map(|(b, a)| (b.track().id, *a)).collect())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Still reserved: the job is dropped unrun (its queue torn down at shutdown).
        if self.ticket.is_some() {
            self.fail_writes(&Error::Shutdown);
        }
        self.unreserve();
    }
}

/// What a lane queue holds.
pub(super) struct Job {
    /// A declared job's buffers (boxed: most jobs declare none, and the queue's slots stay
    /// small). An empty declaration still makes every use checked.
    held: Option<Box<Held>>,
    /// Set when queued (under the lane's submit lock).
    ticket: Option<Ticket>,
    /// The job's submit number, set when queued (`track::order`).
    pub(super) submit: u64,
    body: Body,
}

impl Job {
    pub(super) fn new(declared: Option<Held>, body: Body) -> Job {
        Job { held: declared.map(Box::new), ticket: None, submit: 0, body }
    }

    /// Takes `ticket` and reserves the declared buffers with it. An undeclared job holds
    /// nothing but still carries its ticket: its uses follow the reservations of jobs
    /// submitted before it, and only those.
    pub(super) fn reserve(&mut self, ticket: Ticket) {
        if let Some(h) = &mut self.held {
            h.reserve(ticket);
        }
        self.ticket = Some(ticket);
    }

    pub(super) fn is_declared(&self) -> bool {
        self.held.is_some()
    }

    pub(super) fn unreserve(&mut self) {
        if let Some(h) = &mut self.held {
            h.unreserve();
        }
        self.ticket = None;
    }

    /// Runs the job on `handles`, then releases its reservations: its uses are committed (or
    /// it never made them), so later uses may fence on what it published.
    pub(super) fn run(mut self, handles: &mut crate::libs::Handles, lane: &Arc<str>) {
        let declared = self.held.as_ref().map(|h| h.declared());
        let scope = JobScope::new(self.ticket, declared, Some(lane.clone()), handles.stream()).submitted(self.submit);
        let body = std::mem::replace(&mut self.body, Box::new(|_| None));
        if let Some(e) = body(Call::Run(handles, scope)) {
            if let Some(h) = &self.held {
                h.fail_writes(&e);
            }
        }
        self.unreserve();
    }

    /// Resolves the job with `e`, unrun; a job still holding reservations (cancelled at
    /// shutdown) fails its declared writes first.
    pub(super) fn cancel(mut self, e: Error) {
        if let Some(h) = &self.held {
            h.fail_writes(&e);
        }
        self.unreserve();
        let body = std::mem::replace(&mut self.body, Box::new(|_| None));
        body(Call::Cancel(e));
    }
}

/// A lane job with declared buffer uses, made by [`Lane::job`]. Submitting it reserves each
/// declared buffer's next position, in submit order: every use of those buffers made after the
/// submit returns — on any lane, or inline — is ordered after this job, even if it commits
/// first, except a use inside a lane job submitted before this one (the submitting job
/// included), which is ordered by commit. See [`Lane::job`].
///
/// ```
/// use cusched::{Device, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let (upload, compute) = (device.lane("upload")?, device.lane("compute")?);
/// let s = device.default_stream();
/// let (x, y) = (device.alloc_zeros::<u32>(s, 4)?, device.alloc_zeros::<u32>(s, 4)?);
/// // Declared: the copy on the second lane is ordered after the fill on the first because it
/// // was submitted after it, with no wait in between. Each closure gets a handle to every
/// // buffer it declared, in order.
/// upload.job().write(&x).submit(|cx, (x,)| x.copy_from_slice(cx.stream(), &[7; 4]));
/// let copied = compute.job().read(&x).write(&y).submit(|cx, (x, y)| y.copy_from(cx.stream(), &x));
/// copied.wait()?;
/// assert_eq!(y.download(s)?, vec![7; 4]);
/// # Ok::<(), cusched::Error>(())
/// ```
#[must_use = "a job builder does nothing until submitted"]
pub struct JobBuilder<'a, B = ()> {
    lane: &'a Lane,
    held: Held,
    /// The first declaration that failed, reported at submit.
    error: Option<Error>,
    /// A handle to each declared buffer, in declaration order: what the job's closure gets.
    args: B,
}

/// What a declared job's closure gets for a buffer it declared: a clone of the
/// [`GpuRef`](crate::GpuRef) (it shares the memory), the [`External`](crate::External) itself;
/// a [`HostBuffer`](crate::HostBuffer) has one owner, so its place holds `()` (move it into the
/// closure yourself). Implemented for the crate's buffer types only.
pub trait Declare: Resource {
    /// The handle the closure gets.
    type Handle: Send + 'static;
    /// A handle to the same memory.
    fn handle(&self) -> Self::Handle;
}

impl<T: crate::memory::Element> Declare for crate::memory::GpuRef<T> {
    type Handle = crate::memory::GpuRef<T>;
    fn handle(&self) -> Self::Handle {
        self.clone()
    }
}

impl<T: crate::memory::Element> Declare for crate::memory::HostBuffer<T> {
    type Handle = ();
    fn handle(&self) {}
}

impl Declare for crate::recorder::External {
    type Handle = crate::recorder::External;
    fn handle(&self) -> Self::Handle {
        *self
    }
}

impl<R: Declare + ?Sized> Declare for &R {
    type Handle = R::Handle;
    fn handle(&self) -> Self::Handle {
        (**self).handle()
    }
}

/// The tuple of handles a declared job's closure gets, one more per declaration: `()`, then
/// `(x,)`, `(x, y)`, ... up to twelve.
pub trait DeclaredArgs<X> {
    /// The tuple with `X` appended.
    type Out;
    /// Appends `x`.
    fn append(self, x: X) -> Self::Out;
}

macro_rules! declared_args {
    ($($t:ident)*) => {
        impl<$($t,)* X> DeclaredArgs<X> for ($($t,)*) {
            type Out = ($($t,)* X,);
            #[allow(non_snake_case)]
            fn append(self, x: X) -> Self::Out {
                let ($($t,)*) = self;
                ($($t,)* x,)
            }
        }
    };
}
declared_args!();
declared_args!(A);
declared_args!(A B);
declared_args!(A B C);
declared_args!(A B C D);
declared_args!(A B C D E);
declared_args!(A B C D E F);
declared_args!(A B C D E F G);
declared_args!(A B C D E F G H);
declared_args!(A B C D E F G H I);
declared_args!(A B C D E F G H I J);
declared_args!(A B C D E F G H I J K);

impl<B> std::fmt::Debug for JobBuilder<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBuilder")
            .field("lane", &self.lane.name())
            .field("uses", &self.held.uses.iter().map(|(b, a)| (b.track().name(), *a)).collect::<Vec<_>>())
            .finish()
    }
}

impl<'a> JobBuilder<'a> {
    pub(super) fn new(lane: &'a Lane) -> Self {
        JobBuilder {
            lane,
            held: Held { ticket: None, uses: SmallVec::new(), lane: Some(lane.name_shared()) },
            error: None,
            args: (),
        }
    }
}

impl<'a, B> JobBuilder<'a, B> {
    /// Declares that the job reads `buf`; the closure gets a handle to it.
    pub fn read<R: Declare>(self, buf: &R) -> JobBuilder<'a, B::Out>
    where
        B: DeclaredArgs<R::Handle>,
    {
        self.access(buf, Access::Read)
    }

    /// Declares that the job writes `buf` (a write covers reading it too); the closure gets a
    /// handle to it.
    pub fn write<R: Declare>(self, buf: &R) -> JobBuilder<'a, B::Out>
    where
        B: DeclaredArgs<R::Handle>,
    {
        self.access(buf, Access::Write)
    }

    /// Declares that the job reads and writes `buf`; the closure gets a handle to it.
    pub fn read_write<R: Declare>(self, buf: &R) -> JobBuilder<'a, B::Out>
    where
        B: DeclaredArgs<R::Handle>,
    {
        self.access(buf, Access::ReadWrite)
    }

    /// Declares a use with an explicit [`Access`]; the closure gets a handle to `buf`. Memory
    /// cusched does not track ([`External`](crate::External)) and stale buffers cannot be
    /// reserved: submitting then fails with [`Error::Untracked`] or [`Error::Stale`].
    pub fn access<R: Declare>(mut self, buf: &R, access: Access) -> JobBuilder<'a, B::Out>
    where
        B: DeclaredArgs<R::Handle>,
    {
        self.record(buf, access);
        let JobBuilder { lane, held, error, args } = self;
        JobBuilder { lane, held, error, args: args.append(buf.handle()) }
    }

    /// Declares a use like [`access`](Self::access) without handing the closure a handle:
    /// for a declaration made only under a condition (the builder's type stays the same) or
    /// past the twelfth.
    pub fn declare(mut self, buf: &impl Resource, access: Access) -> Self {
        self.record(buf, access);
        self
    }

    fn record(&mut self, buf: &impl Resource, access: Access) {
        let ResourceRef(kind) = buf.resource();
        match kind {
            ResourceKind::External(what) => {
                self.error.get_or_insert(Error::Untracked { what });
            }
            ResourceKind::Tracked(b) => {
                if let Err(e) = b.track().check_fresh() {
                    self.error.get_or_insert(e);
                } else if let Some(u) = self.held.uses.iter_mut().find(|(u, _)| u.track().id == b.track().id) {
                    u.1 = u.1.merge(access);
                } else {
                    self.held.uses.push((b, access));
                }
            }
        }
    }
}

impl<B: Send + 'static> JobBuilder<'_, B> {
    /// Queues `f` like [`Lane::submit`], after reserving the declared buffers; `f` gets the
    /// lane's context and a handle to each declared buffer, as a tuple in declaration order
    /// (`|cx, (x, y)| ..` after `.read(&x).write(&y)`). The job may use only the buffers it
    /// declared, those it makes on its own thread (allocations and uploads) and the libraries'
    /// own scratch (a strict recorder in it fails with [`Error::UndeclaredUse`] otherwise,
    /// naming the buffer); its own uses never wait for its own reservations. A declaration
    /// error resolves the completion with it, unqueued.
    pub fn submit<T: Send + 'static>(
        self,
        f: impl FnOnce(&mut Handles, B) -> Result<T> + Send + 'static,
    ) -> Completion<T> {
        let JobBuilder { lane, held, error, args } = self;
        let f = move |cx: &mut Handles| f(cx, args);
        if let Some(e) = error {
            let (completion, job) = lane.make_job(None, f);
            job.cancel(e);
            return completion;
        }
        lane.submit_job(Some(held), f)
    }

    /// Like [`submit`](Self::submit) but fails with [`Error::QueueFull`] instead of blocking
    /// (nothing stays reserved then), and with a declaration's error.
    pub fn try_submit<T: Send + 'static>(
        self,
        f: impl FnOnce(&mut Handles, B) -> Result<T> + Send + 'static,
    ) -> Result<Completion<T>> {
        let JobBuilder { lane, held, error, args } = self;
        if let Some(e) = error {
            return Err(e);
        }
        lane.try_submit_job(Some(held), move |cx: &mut Handles| f(cx, args))
    }
}
