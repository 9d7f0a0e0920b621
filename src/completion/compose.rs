//! Completions that compose: [`Completion::map`], [`Completion::and_then`],
//! [`Completion::inspect`], [`Completion::then`] and [`Device::join`].
//!
//! Each makes a new completion, queued, and hands the source an `on_complete` callback that
//! fills it: the composed value is computed on the device's completion thread once the GPU
//! work is done, never by blocking that thread. Like any callback the step runs whether or
//! not anyone keeps the new completion, so dropping one cancels nothing. A chained op
//! ([`and_then`](Completion::and_then)) is enqueued from the callback, and the new completion
//! is filled by a callback of the chained op's completion in turn.
//!
//! A composed completion is filled only by the completion thread. Waiting on one from a
//! callback (which runs on that thread) before it is filled would wait for the waiting thread
//! itself: that wait returns [`Error::WouldDeadlock`] at once. Chain the work instead of waiting.

use super::shared::{Shared, FILLED_BY_CALLBACK};
use super::{Completion, View};
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};

/// Fills a composed completion, once.
struct Fill<U>(Arc<Shared<U>>);

impl<U: Send + 'static> Fill<U> {
    fn with(self, value: Result<U>) {
        self.0.enqueued(value, None, Vec::new());
    }

    /// Fills it with `next`'s outcome once `next` completes.
    fn after(self, next: Completion<U>) {
        next.on_complete(move |v| self.with(v));
    }
}

/// A queued completion on `device` that only a callback fills.
fn composed<U: Send + 'static>(device: &Arc<DeviceShared>) -> (Completion<U>, Fill<U>) {
    let (completion, shared) = Completion::queued_on(device, FILLED_BY_CALLBACK);
    (completion, Fill(shared))
}

impl<T: Send + 'static> Completion<T> {
    /// The device this completion's work runs on.
    fn device_shared(&self) -> Arc<DeviceShared> {
        match self.view() {
            View::Shared(s) => s.device.clone(),
            View::Local(device, _) => device.clone(),
        }
    }

    /// Runs `f` with the outcome once the GPU work has finished, on the device's completion
    /// thread, and returns a completion of what `f` returns: an
    /// [`on_complete`](Self::on_complete) whose result the program can wait for, poll or
    /// chain, with no channel of its own. Keep `f` short: it delays other completions.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let lane = device.lane("compute")?;
    /// let done = lane.submit(|cx| cx.device().upload(cx.stream(), &[1.0f32, 2.0]).map(|b| b.len()));
    /// // Runs when the job's GPU work is done, whether it succeeded or not.
    /// let report = done.then(|r| match r {
    ///     Ok(n) => format!("uploaded {n} values"),
    ///     Err(e) => format!("upload failed: {e}"),
    /// });
    /// assert_eq!(report.wait()?, "uploaded 2 values");
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn then<U: Send + 'static>(self, f: impl FnOnce(Result<T>) -> U + Send + 'static) -> Completion<U> {
        let (out, fill) = composed(&self.device_shared());
        self.on_complete(move |r| fill.with(Ok(f(r))));
        out
    }

    /// A completion of `f(value)`, computed once the GPU work has finished (on the device's
    /// completion thread). An error passes through without calling `f`.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let lane = device.lane("compute")?;
    /// let sum = lane
    ///     .submit(|cx| {
    ///         let x = cx.device().upload(cx.stream(), &[1u32, 2, 3])?;
    ///         x.download(cx.stream())
    ///     })
    ///     .map(|v| v.iter().sum::<u32>());
    /// assert_eq!(sum.wait()?, 6);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn map<U: Send + 'static>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Completion<U> {
        let (out, fill) = composed(&self.device_shared());
        self.on_complete(move |r| fill.with(r.map(f)));
        out
    }

    /// [`map`](Self::map) with a fallible `f`: its error becomes the completion's.
    #[cfg_attr(not(feature = "_library"), allow(dead_code))]
    pub(crate) fn try_map<U: Send + 'static>(self, f: impl FnOnce(T) -> Result<U> + Send + 'static) -> Completion<U> {
        let (out, fill) = composed(&self.device_shared());
        self.on_complete(move |r| fill.with(r.and_then(f)));
        out
    }

    /// Calls `f` with a reference to the value once the GPU work has finished (on the device's
    /// completion thread), and passes the value on: for logging or metrics without taking
    /// it. An error passes through without calling `f`.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// use std::sync::{atomic::{AtomicUsize, Ordering}, Arc};
    /// let device = Device::sim(SimConfig::default())?;
    /// let lane = device.lane("compute")?;
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let counter = seen.clone();
    /// let done = lane
    ///     .submit(|cx| cx.device().upload(cx.stream(), &[0u8; 16]).map(|b| b.len()))
    ///     .inspect(move |n| counter.store(*n, Ordering::Relaxed));
    /// assert_eq!(done.wait()?, 16);
    /// assert_eq!(seen.load(Ordering::Relaxed), 16);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn inspect(self, f: impl FnOnce(&T) + Send + 'static) -> Completion<T> {
        self.map(move |v| {
            f(&v);
            v
        })
    }

    /// Chains another op after this one's GPU work: once it has finished, `f` runs with the
    /// value (on the device's completion thread) and returns the next op's completion, and
    /// the returned completion resolves with that op's outcome. An error of either step, or
    /// one `f` returns, passes through.
    ///
    /// "After the GPU work" is the point: `f` sees the value only when the first op's kernels
    /// and copies are done, so it may read what they produced. `f` should only enqueue (submit
    /// a lane job, or run an op through [`Handles`](crate::Handles)) and return: it runs on the
    /// completion thread, where a long or blocking call delays every other completion.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let (upload, check) = (device.lane("upload")?, device.lane("check")?);
    /// let total = upload
    ///     .submit(|cx| {
    ///         let x = cx.device().upload(cx.stream(), &[1.5f32, 2.5])?;
    ///         cx.keep(x.clone());
    ///         Ok(x)
    ///     })
    ///     // The upload has finished: read it back on another lane.
    ///     .and_then(move |x| Ok(check.submit(move |cx| x.download(cx.stream()))))
    ///     .map(|v| v.iter().sum::<f32>());
    /// assert_eq!(total.wait()?, 4.0);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn and_then<U: Send + 'static>(
        self,
        f: impl FnOnce(T) -> Result<Completion<U>> + Send + 'static,
    ) -> Completion<U> {
        let (out, fill) = composed(&self.device_shared());
        self.on_complete(move |r| match r.and_then(f) {
            Ok(next) => fill.after(next),
            Err(e) => fill.with(Err(e)),
        });
        out
    }
}

/// What a join collects: each completion's outcome in input order, and how many are left.
struct Joined<T> {
    outcomes: Vec<Option<Result<T>>>,
    left: usize,
}

impl Device {
    /// One completion for several: ready once every one of `completions` is, with their
    /// values in the order given, or with the first error in that order. It waits for all of
    /// them even after one fails, so that once it resolves no GPU work of theirs is pending.
    /// The completions may belong to other devices too; an empty list is ready at once.
    ///
    /// Unlike [`wait_all`](crate::wait_all), it blocks nothing: wait on it, poll it, or chain
    /// it like any completion.
    ///
    /// ```
    /// use cusched::{Device, SimConfig};
    /// let device = Device::sim(SimConfig::default())?;
    /// let lanes = [device.lane("a")?, device.lane("b")?];
    /// let chunks: Vec<_> = (0..4u32)
    ///     .map(|i| {
    ///         lanes[i as usize % 2].submit(move |cx| {
    ///             let x = cx.device().upload(cx.stream(), &[i; 8])?;
    ///             x.download(cx.stream()).map(|v| v.iter().sum::<u32>())
    ///         })
    ///     })
    ///     .collect();
    /// let sums = device.join(chunks).map(|v| v.into_iter().sum::<u32>());
    /// assert_eq!(sums.wait()?, 8 * (0 + 1 + 2 + 3));
    /// # Ok::<(), cusched::Error>(())
    /// ```
    pub fn join<T: Send + 'static>(&self, completions: impl IntoIterator<Item = Completion<T>>) -> Completion<Vec<T>> {
        let completions: Vec<Completion<T>> = completions.into_iter().collect();
        let (out, fill) = composed(&self.shared);
        let n = completions.len();
        if n == 0 {
            fill.with(Ok(Vec::new()));
            return out;
        }
        let outcomes = (0..n).map(|_| None).collect();
        let state = Arc::new(Mutex::new(Some((Joined { outcomes, left: n }, fill))));
        for (i, c) in completions.into_iter().enumerate() {
            let state = state.clone();
            c.on_complete(move |r| {
                let mut st = crate::sync::lock(&state);
                let Some((joined, _)) = st.as_mut() else { return };
                joined.outcomes[i] = Some(r);
                joined.left -= 1;
                if joined.left > 0 {
                    return;
                }
                let Some((joined, fill)) = st.take() else { return };
                drop(st);
                let all: Result<Vec<T>> =
                    joined.outcomes.into_iter().map(|o| o.unwrap_or(Err(Error::AlreadyTaken))).collect();
                fill.with(all);
            });
        }
        out
    }
}
