//! A preflighted launch: its buffers reserved and its stream fenced, waiting for its work to be
//! enqueued and committed.

use super::{LaunchScope, Reserved, Use};
use crate::device::{DeviceShared, StreamId};
use crate::error::Result;
use crate::track::EventRef;
use smallvec::SmallVec;
use std::sync::Arc;

/// A launch between [`LaunchRecorder::preflight`](crate::LaunchRecorder::preflight) and
/// [`commit`](Self::commit): every buffer it uses is reserved (a conflicting preflight on
/// another thread waits for the commit) and its stream waits for what the launch must follow.
/// Enqueue its work on [`scope`](Self::scope), then commit.
///
/// [`LaunchRecorder::launch`](crate::LaunchRecorder::launch) does all of this around a closure,
/// and is the path traces see; the hand-paired form is for enqueueing from code that cannot
/// run inside a closure.
///
/// ```
/// use cusched::{Device, LaunchRecorder, SimConfig};
/// let device = Device::sim(SimConfig::default())?;
/// let s = device.default_stream();
/// let a = device.alloc_zeros::<u32>(s, 3)?;
/// let mut rec = LaunchRecorder::new_strict(s);
/// rec.write(&a)?;
/// let launch = rec.preflight(&device)?;
/// let data = a.sim_data()?;
/// launch.scope().sim_kernel(move || data.lock().fill(7))?;
/// launch.commit()?;
/// assert_eq!(a.download(s)?, vec![7, 7, 7]);
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// Dropping a `Preflighted` without committing it commits it anyway and logs an error: work
/// already enqueued on its scope must not be left unfenced.
///
/// # Misuse does not compile
///
/// Recording a use after preflight (the recorder is consumed by it):
///
/// ```compile_fail,E0382
/// # use cusched::{Device, LaunchRecorder, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// # let s = device.default_stream();
/// # let (a, b) = (device.alloc_zeros::<u32>(s, 1)?, device.alloc_zeros::<u32>(s, 1)?);
/// let mut rec = LaunchRecorder::new_strict(s);
/// rec.write(&a)?;
/// let launch = rec.preflight(&device)?;
/// rec.write(&b)?;
/// launch.commit()?;
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// Preflighting twice:
///
/// ```compile_fail,E0382
/// # use cusched::{Device, LaunchRecorder, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// # let s = device.default_stream();
/// let rec = LaunchRecorder::new_strict(s);
/// let launch = rec.preflight(&device)?;
/// let again = rec.preflight(&device)?;
/// launch.commit()?;
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// Committing without preflight (a recorder has no `commit`):
///
/// ```compile_fail,E0599
/// # use cusched::{Device, LaunchRecorder, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// # let s = device.default_stream();
/// let rec = LaunchRecorder::new_strict(s);
/// rec.commit()?;
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// Committing twice:
///
/// ```compile_fail,E0382
/// # use cusched::{Device, LaunchRecorder, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// # let s = device.default_stream();
/// let launch = LaunchRecorder::new_strict(s).preflight(&device)?;
/// launch.commit()?;
/// launch.commit()?;
/// # Ok::<(), cusched::Error>(())
/// ```
///
/// Enqueueing on the scope after commit (the scope borrows the launch):
///
/// ```compile_fail,E0505
/// # use cusched::{Device, LaunchRecorder, SimConfig};
/// # let device = Device::sim(SimConfig::default())?;
/// # let s = device.default_stream();
/// let launch = LaunchRecorder::new_strict(s).preflight(&device)?;
/// let scope = launch.scope();
/// launch.commit()?;
/// scope.sim_kernel(|| {})?;
/// # Ok::<(), cusched::Error>(())
/// ```
#[must_use = "a preflighted launch must be committed once its work is enqueued (dropping it commits and logs an error)"]
pub struct Preflighted {
    uses: SmallVec<[Use; 4]>,
    device: Arc<DeviceShared>,
    reserved: Reserved,
    committed: bool,
}

impl std::fmt::Debug for Preflighted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preflighted")
            .field("stream", &self.reserved.stream)
            .field("uses", &self.uses.iter().map(|u| (u.track().name(), u.access)).collect::<Vec<_>>())
            .finish()
    }
}

impl Preflighted {
    /// The hand-paired launch: its uses, device and reservation, until its commit.
    pub(super) fn new(uses: SmallVec<[Use; 4]>, device: Arc<DeviceShared>, reserved: Reserved) -> Self {
        Preflighted { uses, device, reserved, committed: false }
    }

    /// The stream the launch runs on.
    pub fn stream(&self) -> StreamId {
        self.reserved.stream
    }

    /// The scope to enqueue the launch's work on.
    pub fn scope(&self) -> LaunchScope<'_> {
        LaunchScope::new(&self.reserved, &self.uses)
    }

    /// Records the launch's event on its stream and publishes it to every buffer it uses.
    /// Call after enqueueing.
    pub fn commit(self) -> Result<()> {
        self.commit_event().map(drop)
    }

    /// [`commit`](Self::commit), returning the event later uses wait on.
    pub(crate) fn commit_event(mut self) -> Result<EventRef> {
        self.committed = true;
        // A commit says the enqueue succeeded: what the launch writes is valid again.
        super::failure::settle(&self.uses, None, String::new);
        self.reserved.commit(&self.device, &self.uses)
    }
}

impl Drop for Preflighted {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        log::error!(
            "cusched: a launch on {} was dropped after preflight without commit; committing it so its work stays fenced",
            self.reserved.stream
        );
        if let Err(e) = self.reserved.commit(&self.device, &self.uses) {
            log::error!("cusched: committing the dropped launch failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::{ILLEGAL_ADDRESS, INVALID_HANDLE};
    use crate::backend::test_hooks::fail_next_record;
    use crate::{backend::sim::SimConfig, device::Device, error::Error, recorder::LaunchRecorder};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A launch on the default stream writing `buf`, preflighted, with a 150 ms kernel enqueued
    /// that sets the returned flag when it finishes.
    fn slow_write(d: &Device, buf: &crate::memory::GpuRef<u32>) -> (Preflighted, Arc<AtomicBool>) {
        let mut rec = LaunchRecorder::new_strict(d.default_stream());
        rec.write(buf).unwrap();
        let launch = rec.preflight(d).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        launch
            .scope()
            .sim_kernel(move || {
                std::thread::sleep(Duration::from_millis(150));
                flag.store(true, Ordering::SeqCst);
            })
            .unwrap();
        (launch, done)
    }

    /// A simulated device on which two streams have committed, so that every commit records
    /// its event at once.
    fn several_streams() -> Device {
        let d = Device::sim(SimConfig::default()).unwrap();
        let s2 = d.new_stream().unwrap();
        LaunchRecorder::new_strict(s2).launch(&d, |_| Ok(())).unwrap();
        d
    }

    #[test]
    fn recorders_and_preflighted_launches_can_move_between_threads() {
        fn send<T: Send>() {}
        send::<LaunchRecorder>();
        send::<Preflighted>();
    }

    #[test]
    fn a_failed_commit_record_releases_the_buffers_only_after_the_work_is_done() {
        let d = several_streams();
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let (launch, done) = slow_write(&d, &buf);
        fail_next_record(INVALID_HANDLE);
        let err = launch.commit().expect_err("the record failed");
        assert!(matches!(err, Error::Driver { call: "cuEventRecord", .. }), "{err}");
        assert!(done.load(Ordering::SeqCst), "the buffer was released while the kernel using it still ran");
    }

    #[test]
    fn a_sticky_failure_at_the_commit_record_is_context_poisoned() {
        let d = several_streams();
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let (launch, _) = slow_write(&d, &buf);
        fail_next_record(ILLEGAL_ADDRESS);
        let err = launch.commit().expect_err("the record failed");
        assert!(matches!(err, Error::ContextPoisoned { call: "cuEventRecord", .. }), "{err}");
        let err = buf.download(d.default_stream()).expect_err("the buffer is of the poisoned context");
        assert!(matches!(err, Error::Stale { .. }), "{err}");
    }

    #[test]
    fn a_sticky_failure_at_a_lazy_record_is_context_poisoned_for_the_waiter() {
        // One stream: the commit records nothing, so the fault shows at the first record,
        // made when the host waits.
        let d = Device::sim(SimConfig::default()).unwrap();
        let buf = d.alloc_zeros::<u32>(d.default_stream(), 4).unwrap();
        let (launch, _) = slow_write(&d, &buf);
        let ev = launch.commit_event().unwrap();
        assert_eq!(d.stats().recorded, 0, "a one-stream commit records lazily");
        fail_next_record(ILLEGAL_ADDRESS);
        let err = d.shared.wait_event(&ev).expect_err("the lazy record failed");
        assert!(matches!(err, Error::ContextPoisoned { call: "cuEventRecord", .. }), "{err}");
        let err = buf.download(d.default_stream()).expect_err("the buffer is of the poisoned context");
        assert!(matches!(err, Error::Stale { .. }), "{err}");
    }
}
