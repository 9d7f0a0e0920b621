//! The one wait for a conflicting launch in flight: a use that must follow a pending mark, a
//! reservation or a solo launch still enqueueing waits here, bounded by
//! `DeviceConfig::preflight_timeout`.
//!
//! Where the conflicting launch notifies when it is done (a mark's publish, a reservation's
//! release), the waiter blocks on that condvar ([`ConflictWait::block`]); where nothing
//! notifies (a solo launch takes itself out of flight under its stream's lock only), it sleeps
//! a short slice and looks again ([`ConflictWait::poll`]). Either way every round checks the
//! deadline first, so no wait outlives it. The wait costs nothing until a conflict is seen:
//! the uncontended path neither starts one nor reads the clock.

use crate::sync::Guard;
use std::sync::Condvar;
use std::time::{Duration, Instant};

/// How long a polled waiter sleeps before it looks again: a solo launch in flight holds its
/// uses for the length of one enqueue, a few microseconds to a few hundred.
const POLL: Duration = Duration::from_micros(20);

/// The deadline passed while a conflict remained; the caller names what it waited for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TimedOut;

/// A wait for a conflicting launch, bounded by a deadline fixed when it starts. Start one only
/// once a conflict is seen: the uncontended path reads no clock.
pub(crate) struct ConflictWait {
    timeout: Duration,
    /// `None` when `timeout` reaches past what `Instant` can hold: no deadline then, and a
    /// blocked waiter wakes every hour to look again.
    deadline: Option<Instant>,
}

impl ConflictWait {
    /// A wait that gives up `timeout` from now.
    pub(crate) fn start(timeout: Duration) -> Self {
        ConflictWait { timeout, deadline: Instant::now().checked_add(timeout) }
    }

    /// The timeout the wait was started with, for the error that reports it.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What is left before the deadline; [`TimedOut`] once it has passed.
    fn left(&self) -> Result<Duration, TimedOut> {
        let left = self.deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(TimedOut);
        }
        Ok(left)
    }

    /// One round of a notified wait, after the caller saw a conflict under `guard`: checks
    /// the deadline, then blocks on `cv` (which the conflicting launch notifies when it is
    /// done) until notified or the deadline, counted in the guarded state's waiters (`waiters`
    /// finds the counter) so that the notifier knows to notify. Hands the lock back re-taken.
    pub(crate) fn block<'a, T>(
        &self,
        cv: &Condvar,
        mut guard: Guard<'a, T>,
        waiters: impl Fn(&mut T) -> &mut u32,
    ) -> Result<Guard<'a, T>, TimedOut> {
        let left = self.left()?;
        *waiters(&mut guard) += 1;
        let mut guard = crate::sync::wait_timeout(cv, guard, left);
        *waiters(&mut guard) -= 1;
        Ok(guard)
    }

    /// One round of a polled wait that holds no lock between its looks: checks the deadline,
    /// then sleeps a short slice.
    pub(crate) fn poll(&self) -> Result<(), TimedOut> {
        let left = self.left()?;
        std::thread::sleep(left.min(POLL));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_polled_wait_ends_at_its_deadline() {
        let wait = ConflictWait::start(Duration::from_millis(30));
        let began = Instant::now();
        let mut rounds = 0u32;
        while wait.poll().is_ok() {
            rounds += 1;
            assert!(began.elapsed() < Duration::from_secs(10), "the polled wait outlived its deadline");
        }
        assert!(began.elapsed() >= Duration::from_millis(30), "the wait gave up early");
        assert!(rounds > 0);
    }

    #[test]
    fn a_notified_wait_that_is_never_notified_ends_at_its_deadline() {
        let (lock, cv) = (Mutex::new(0u32), Condvar::new());
        let wait = ConflictWait::start(Duration::from_millis(30));
        let began = Instant::now();
        let mut guard = crate::sync::lock(&lock);
        loop {
            match wait.block(&cv, guard, |w| w) {
                Ok(g) => guard = g,
                Err(TimedOut) => break,
            }
            assert!(began.elapsed() < Duration::from_secs(10), "the notified wait outlived its deadline");
        }
        assert!(began.elapsed() >= Duration::from_millis(30), "the wait gave up early");
        assert_eq!(*crate::sync::lock(&lock), 0, "the waiter count went back to zero");
    }

    #[test]
    fn a_zero_timeout_ends_before_any_pause() {
        let wait = ConflictWait::start(Duration::ZERO);
        assert_eq!(wait.poll(), Err(TimedOut));
        let (lock, cv) = (Mutex::new(0u32), Condvar::new());
        assert!(wait.block(&cv, crate::sync::lock(&lock), |w| w).is_err());
    }

    #[test]
    fn a_timeout_past_what_instant_holds_has_no_deadline() {
        let wait = ConflictWait::start(Duration::MAX);
        assert!(wait.deadline.is_none());
        assert_eq!(wait.poll(), Ok(()));
    }
}
