//! The simulator's events: each recording completes with the recording stream's clock, and
//! carries the fault or hazard a wait on it reports.

use super::checker::Vc;
use crate::hazard::Hazard;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// A hazard a stream found and has not yet reported through a wait: handed to every event the
/// stream passes after it, and taken by the first wait that observes one of those.
#[derive(Default)]
pub(super) struct Owed(pub(super) Mutex<Option<Hazard>>);

/// One recording of a simulated event; completed with the recording stream's clock.
#[derive(Default)]
pub(super) struct Record {
    /// The recording stream's machine ([`SimMachine::id`](super::SimMachine::id)): its clock
    /// means nothing on another.
    pub(super) machine: usize,
    /// The recording stream's clock and the host time when the stream passed the record.
    done: Mutex<Option<(Arc<Vc>, Instant)>>,
    /// The simulated context had faulted when the stream passed the record.
    failed: std::sync::atomic::AtomicBool,
    /// A hazard the stream owed when it passed the record
    /// ([`SimConfig::fail_on_hazard`](super::SimConfig::fail_on_hazard)).
    pub(super) owed: std::sync::OnceLock<Arc<Owed>>,
    /// The owed hazard, once a wait on this record took it: later waits on it see it again.
    observed: std::sync::OnceLock<Hazard>,
    cv: Condvar,
}

impl Record {
    pub(super) fn complete(&self, vc: Vc, failed: bool) {
        self.failed.store(failed, std::sync::atomic::Ordering::Release);
        *crate::sync::lock(&self.done) = Some((Arc::new(vc), Instant::now()));
        self.cv.notify_all();
    }

    fn outcome(&self, call: &'static str) -> crate::error::Result<()> {
        if self.failed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::error::Error::Driver { call, status: crate::backend::cuda::ILLEGAL_ADDRESS });
        }
        let hazard = match self.observed.get() {
            Some(h) => Some(h.clone()),
            None => self
                .owed
                .get()
                .and_then(|owed| crate::sync::lock(&owed.0).take())
                .map(|h| self.observed.get_or_init(|| h).clone()),
        };
        match hazard {
            Some(hazard) => Err(crate::error::Error::Hazard { hazard: Box::new(hazard), more: 0 }),
            None => Ok(()),
        }
    }

    pub(super) fn wait(&self) -> Arc<Vc> {
        self.wait_done().0
    }

    fn wait_done(&self) -> (Arc<Vc>, Instant) {
        let mut g = crate::sync::lock(&self.done);
        loop {
            if let Some(done) = g.as_ref() {
                return done.clone();
            }
            g = crate::sync::wait(&self.cv, g);
        }
    }
}

/// A virtual event. Like a CUDA event, it refers to its most recent recording; a wait captures
/// the recording current when it is enqueued, so re-recording never changes earlier waits.
#[derive(Default)]
pub(crate) struct SimEvent {
    current: Mutex<Option<Arc<Record>>>,
}

impl SimEvent {
    pub(super) fn current(&self) -> Option<Arc<Record>> {
        crate::sync::lock(&self.current).clone()
    }

    /// Starts a new recording by a stream of `machine`: later waits capture it, earlier ones
    /// keep theirs.
    pub(super) fn rerecord(&self, machine: usize) -> Arc<Record> {
        let rec = Arc::new(Record { machine, ..Record::default() });
        *crate::sync::lock(&self.current) = Some(rec.clone());
        rec
    }

    /// Whether the stream passed the recording; an error if the simulated context had
    /// faulted by then.
    pub(crate) fn query(&self) -> crate::error::Result<bool> {
        match self.current() {
            None => Ok(true),
            Some(r) if crate::sync::lock(&r.done).is_some() => r.outcome("cuEventQuery").map(|()| true),
            Some(_) => Ok(false),
        }
    }

    pub(crate) fn synchronize(&self) -> crate::error::Result<()> {
        match self.current() {
            None => Ok(()),
            Some(r) => {
                r.wait();
                r.outcome("cuEventSynchronize")
            }
        }
    }

    /// When the simulated stream passed the latest recording (waits for it); the simulation's
    /// stand-in for a CUDA timing event's timestamp.
    pub(crate) fn completed_at(&self) -> Instant {
        self.current().map_or_else(Instant::now, |r| r.wait_done().1)
    }
}
