//! Raw library objects (handles, plans, generators), each owned once and destroyed once: the
//! one `Drop` of every library's objects.

// A library whose objects are not per-stream (NCCL's communicators are the user's) uses none
// of it: with only such a library on, it is unused.
#![cfg_attr(not(all(feature = "cublas", feature = "curand", feature = "cufft")), allow(dead_code))]

use super::Status;

/// A raw object of a library, and the call that destroys it.
///
/// # Safety
/// Implementing it promises that the object may be used from any thread, one thread at a time
/// (as every NVIDIA library handle, plan and generator may), so that [`Owned`] can be `Send`.
pub(crate) unsafe trait RawObject: Copy {
    /// The destroy call's name, for the log.
    const DESTROY: &'static str;
    /// Whether destroying it may synchronize the device (a handle, a plan, a generator): such
    /// a destroy would invalidate a graph capture open on its GPU on any thread, so it waits
    /// for them to close (see [`crate::backend::cuda::captures`]). Descriptors only free host
    /// memory.
    const SYNCHRONIZES: bool = false;
    /// The library's status type.
    type Status: Status;

    /// Destroys the object.
    ///
    /// # Safety
    /// Called once, with the object's context current, after the work enqueued with it has
    /// finished.
    unsafe fn destroy(self) -> Self::Status;
}

/// A library object, destroyed when dropped. Its owner (a library's per-stream state) uses it
/// through `&mut self` only, and hands it to the reaper to drop: on its context, after the
/// stream's work (see [`super::StreamLibrary::Objects`]).
pub(crate) struct Owned<R: RawObject>(R);

// SAFETY: (1) the `RawObject` contract: the object may be used from any thread, one at a time;
// (2) its one owner uses it through `&mut self`.
unsafe impl<R: RawObject> Send for Owned<R> {}

impl<R: RawObject> Owned<R> {
    /// Takes ownership of `raw`, just made.
    pub(crate) fn new(raw: R) -> Self {
        Owned(raw)
    }

    /// The raw object, for the library's calls.
    pub(crate) fn get(&self) -> R {
        self.0
    }
}

impl<R: RawObject> Drop for Owned<R> {
    fn drop(&mut self) {
        let raw = self.0;
        // SAFETY: (1) an `Owned` is made once per object and dropped once; (2) its owner drops
        // it on the reaper, with its context bound, after the work enqueued with it has
        // finished (or, when setting it up failed, before anything was enqueued with it).
        let destroy = || unsafe { raw.destroy() };
        // On the reaper the destroy is inside its gate already, and passes at once; elsewhere
        // (a setup that failed) it waits for captures open on the bound context's GPU.
        let status = if R::SYNCHRONIZES {
            crate::backend::cuda::captures::outside_captures_of_current(destroy)
        } else {
            destroy()
        };
        if let Err(e) = status.check(R::DESTROY) {
            log::error!("cusched: {e}");
        }
    }
}
