//! Submitting to a lane: a job with declared uses ([`Lane::job`]), [`Lane::submit`] and
//! [`Lane::try_submit`]; the ticket and submit number each queued job takes under the lane's
//! submit lock, and the completion that a job dropped unrun resolves.

use super::Lane;
use crate::completion::{Completion, Shared};
use crate::error::{Error, Result};
use crate::lane::job::{Body, Call, Held, Job, JobBuilder};
use crate::libs::Handles;
use crate::track::reservation::{self, Ticket};
use crossbeam_channel::{Sender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

impl Lane {
    /// A job with declared buffer uses: `lane.job().read(&x).write(&y).submit(|cx, (x, y)| ...)`;
    /// the closure gets a handle to each declared buffer (see [`JobBuilder::submit`]).
    ///
    /// Submitting it reserves each declared buffer's next position, in submit order, so that
    /// every use of those buffers made after the submit returns — a job submitted later to any
    /// lane, or an op on the caller's own thread — is ordered after this job even if it would
    /// commit first: that use's preflight waits (bounded by
    /// [`DeviceConfig::preflight_timeout`](crate::DeviceConfig), then
    /// [`Error::BufferReserved`]) until this job has ended, then fences on the GPU as usual; no
    /// host thread waits for the GPU. The exception is a use inside a lane job submitted
    /// before this one, the job that submits it included: a job never waits for a job
    /// submitted after it (that job may be queued behind it, on its own lane), so such a use is
    /// ordered by commit, as with undeclared jobs. Reads declared by several jobs do not wait for each other;
    /// a later write waits for all of them. The job may use only what it declared, besides
    /// buffers made after it started and the libraries' own scratch (a strict recorder fails
    /// with [`Error::UndeclaredUse`] otherwise); a declared buffer the job never
    /// touches is released when the job ends, and a job that fails, panics or is never run
    /// (shutdown) releases everything it reserved. Such a job also leaves every buffer it
    /// declared a write of failed, in its turn: the jobs submitted after it that read one (and
    /// any later read) fail with [`Error::FailedInput`] naming this job, until a successful
    /// write replaces the contents, so a failed stage never hands stale data down a pipeline.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    ///
    /// let device = Device::sim(SimConfig::default())?;
    /// let (a, b) = (device.lane("a")?, device.lane("b")?);
    /// let x = device.alloc_zeros::<u32>(device.default_stream(), 4)?;
    /// let y = device.alloc_zeros::<u32>(device.default_stream(), 4)?;
    /// let src = device.upload(device.default_stream(), &[5u32; 4])?;
    /// // The closure gets a handle to each buffer it declared, in order.
    /// a.job().read(&src).write(&x).submit(|cx, (src, x)| x.copy_from(cx.stream(), &src));
    /// // No wait in between: the reservation orders this read of x after the job on lane a.
    /// b.job().read(&x).write(&y).submit(|cx, (x, y)| y.copy_from(cx.stream(), &x)).wait()?;
    /// assert_eq!(y.download(device.default_stream())?, [5u32; 4]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn job(&self) -> JobBuilder<'_> {
        JobBuilder::new(self)
    }

    pub(in crate::lane) fn make_job<T: Send + 'static>(
        &self,
        declared: Option<Held>,
        f: impl FnOnce(&mut Handles) -> Result<T> + Send + 'static,
    ) -> (Completion<T>, Job) {
        let (completion, shared) = Completion::queued_on(&self.inner.device, self.inner.id);
        let guard = CancelOnDrop(Some(shared));
        let body: Body = Box::new(move |call| {
            let mut guard = guard;
            let shared = guard.0.take()?;
            match call {
                Call::Run(h, scope) => {
                    shared.mark_running();
                    h.finish_job(&shared, f, scope)
                }
                Call::Cancel(e) => {
                    shared.enqueued(Err(e), None, Vec::new());
                    None
                }
            }
        });
        (completion, Job::new(declared, body))
    }

    /// Takes a ticket, reserves the job's declared buffers with it and pushes the job, all
    /// under the submit lock; a full queue gives the job back with nothing reserved.
    fn push(&self, tx: &Sender<Job>, mut job: Job) -> std::result::Result<(), TrySendError<Job>> {
        if job.is_declared() {
            reservation::note_declared();
        } else if !reservation::declared_seen() {
            job.reserve(Ticket::FIRST);
            let submit = crate::track::order::next_submit();
            job.submit = submit;
            let sent = tx.try_send(job);
            if sent.is_ok() {
                reservation::note_submitted(submit);
            }
            return sent;
        }
        let _order = crate::sync::lock(&self.inner.submit);
        job.reserve(Ticket::next());
        let submit = crate::track::order::next_submit();
        job.submit = submit;
        match tx.try_send(job) {
            Ok(()) => {
                reservation::note_submitted(submit);
                Ok(())
            }
            Err(TrySendError::Full(mut job)) => {
                job.unreserve();
                Err(TrySendError::Full(job))
            }
            Err(TrySendError::Disconnected(mut job)) => {
                job.unreserve();
                Err(TrySendError::Disconnected(job))
            }
        }
    }

    /// Queues `f` to run on the lane's thread, blocking while the queue is full. The completion
    /// resolves with `f`'s value once the GPU work `f` enqueued on the lane's thread has finished
    /// (on any stream; see [`Handles::run`](crate::Handles::run) for what counts), with
    /// `f`'s error, with [`Error::JobPanicked`] if it panicked, or with [`Error::Shutdown`] if the
    /// device shut down before it ran. From a job on this same lane, a full queue could never
    /// drain: the job is not queued and the completion resolves with [`Error::WouldDeadlock`].
    ///
    /// The job declares no buffers, so it reserves nothing: its uses are ordered with other
    /// lanes' by commit. A job submitted to lane A that writes `x`, then a job submitted to lane
    /// B that reads `x`, would read the old contents if B's job ran first; declare the uses
    /// with [`job`](Self::job) (which keeps submit order), or wait for the first job's
    /// [`Completion::wait_committed`] in between. An undeclared job still follows the
    /// reservations of declared jobs submitted before it.
    ///
    /// Such an inversion is not silent: every job carries its submit number, each buffer
    /// remembers the jobs of its last write and of the reads since, and when a job's use
    /// would take effect after a conflicting use by a job the same thread submitted after it on
    /// another lane (jobs submitted by two threads have no order to keep, and are not compared),
    /// the older job's op fails before it enqueues anything, with [`Error::SubmitOrder`]
    /// naming both jobs and the buffer (on the simulator, a
    /// [`HazardKind::SubmitOrder`](crate::HazardKind::SubmitOrder) hazard); see
    /// [`DeviceConfig::submit_order`](crate::DeviceConfig::submit_order) to log instead, or to
    /// turn the check off for a program that means commit order (updates that commute).
    ///
    /// Why undeclared jobs are not simply kept in submit order: nothing is known of their
    /// buffers until each use is made, so a later job's use could only be held back until
    /// every earlier job on every other lane had finished its body (whatever it uses), which
    /// runs the lanes' bodies one at a time in submit order: a lane thread's wake per job
    /// (about 15 µs from idle on an H100 host) on the host path, the overlap of host work
    /// between lanes lost, and a job that waits for a job submitted after it would deadlock.
    /// Holding back only conflicting uses cannot work either: the earlier job's uses are not
    /// known before it makes them. The check costs a compare per use instead, and declared
    /// jobs keep submit order where it is wanted.
    ///
    /// A job that fails (returns an error or panics) leaves the buffers it wrote failed: later
    /// reads fail with [`Error::FailedInput`] until a successful write. Reads ordered by commit
    /// that ran before the job ended are not affected.
    pub fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Handles) -> Result<T> + Send + 'static,
    ) -> Completion<T> {
        self.submit_job(None, f)
    }

    pub(in crate::lane) fn submit_job<T: Send + 'static>(
        &self,
        declared: Option<Held>,
        f: impl FnOnce(&mut Handles) -> Result<T> + Send + 'static,
    ) -> Completion<T> {
        let (completion, mut job) = self.make_job(declared, f);
        let Some(tx) = &self.inner.tx else { return completion };
        let mut backoff = Duration::from_micros(1);
        loop {
            if self.inner.device.is_shut_down() {
                job.cancel(Error::Shutdown);
                return completion;
            }
            match self.push(tx, job) {
                Ok(()) => return completion,
                Err(TrySendError::Full(j)) if crate::sync::role::lane() == self.inner.id => {
                    j.cancel(Error::WouldDeadlock {
                        what: format!(
                            "a job on lane `{}` submitted to the lane's own full queue, which only drains after the job returns; use try_submit, a larger LaneOptions::capacity, or another lane",
                            self.inner.name
                        ),
                    });
                    return completion;
                }
                Err(TrySendError::Full(j)) => {
                    // Wait for room without the submit lock (the worker never takes it), then
                    // take a fresh ticket: the submit happens when the job is queued.
                    job = j;
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(1));
                }
                Err(TrySendError::Disconnected(j)) => {
                    j.cancel(Error::Shutdown);
                    return completion;
                }
            }
        }
    }

    /// Like [`submit`](Self::submit) but fails with [`Error::QueueFull`] instead of blocking.
    pub fn try_submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Handles) -> Result<T> + Send + 'static,
    ) -> Result<Completion<T>> {
        self.try_submit_job(None, f)
    }

    pub(in crate::lane) fn try_submit_job<T: Send + 'static>(
        &self,
        declared: Option<Held>,
        f: impl FnOnce(&mut Handles) -> Result<T> + Send + 'static,
    ) -> Result<Completion<T>> {
        if self.inner.device.is_shut_down() {
            return Err(Error::Shutdown);
        }
        let (completion, job) = self.make_job(declared, f);
        match self.inner.tx.as_ref().map(|tx| self.push(tx, job)) {
            Some(Ok(())) => Ok(completion),
            Some(Err(TrySendError::Full(_))) => Err(Error::QueueFull),
            Some(Err(TrySendError::Disconnected(_))) | None => Err(Error::Shutdown),
        }
    }
}

/// Resolves a job's completion with [`Error::Shutdown`] if the job is dropped unrun (a queue
/// torn down with jobs still in it), so that no waiter hangs.
struct CancelOnDrop<T: Send + 'static>(Option<Arc<Shared<T>>>);

impl<T: Send + 'static> Drop for CancelOnDrop<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.enqueued(Err(Error::Shutdown), None, Vec::new());
        }
    }
}
