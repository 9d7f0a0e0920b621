//! A fake library, registered under `cfg(test)`: what adding a library through the registry
//! takes, shown on the simulator, where the NVIDIA libraries are not.
//!
//! Its one op, [`Fake::scale`], takes the path every library op takes: it validates its operand
//! view (errors name the argument), records its uses, finds its plan in the shared plan cache,
//! sizes the shared workspace (declared read-write), preflights, enqueues a simulated kernel,
//! and commits. Its "library objects" are its plans, which report where they were dropped, so
//! the tests see the reaper destroy them (evicted, or with the state) and a rebuild forget
//! them.

use super::plan_cache::PlanCache;
use super::validate as check;
use super::workspace::Workspace;
use super::{record, Library, OpStream, StreamLibrary};
use crate::completion::Completion;
use crate::error::Result;
use crate::memory::GpuRef;
use crate::track::Access;
use std::sync::mpsc;

/// The fake's library object: a plan, the indices a scale touches.
pub(crate) struct FakePlan {
    indices: Vec<usize>,
    /// Told the name of the thread that drops the plan.
    dropped: Option<mpsc::Sender<String>>,
}

impl Drop for FakePlan {
    fn drop(&mut self) {
        if let Some(tx) = &self.dropped {
            let _ = tx.send(std::thread::current().name().unwrap_or("?").to_string());
        }
    }
}

/// The fake library's per-stream state.
pub(crate) struct Fake {
    op: OpStream,
    plans: PlanCache<(usize, isize), FakePlan>,
    work: Workspace,
    dropped: Option<mpsc::Sender<String>>,
}

impl StreamLibrary for Fake {
    const LIBRARY: Library = Library {
        name: "Fake (libfake)",
        hint: "nothing to install: it is a test library",
        present: || true,
        objects: "fake plans",
    };
    type Objects = Vec<FakePlan>;

    fn create(op: OpStream) -> Result<Fake> {
        Ok(Fake { op, plans: PlanCache::new(4, "an evicted fake plan"), work: Workspace::default(), dropped: None })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Vec<FakePlan>> {
        self.plans.take_all()
    }
}

impl Fake {
    /// `x[i * inc] *= factor` for `i < n`.
    pub(crate) fn scale(&mut self, n: usize, x: &GpuRef<u32>, inc: isize, factor: u32) -> Result<Completion<()>> {
        check::dim("n", n, false)?;
        check::vector("x", "x.inc", x, inc, n, true)?;
        let mut rec = self.op.recorder("scale");
        record(&mut rec, "x", x, Access::ReadWrite)?;
        let dropped = self.dropped.clone();
        let plan = self.plans.get_or_make((n, inc), &self.op, |&(n, inc)| {
            let indices = (0..n).map(|i| i * inc.unsigned_abs()).collect();
            Ok(FakePlan { indices, dropped })
        })?;
        let indices = plan.indices.clone();
        let work = self.work.use_on(&self.op, &mut rec, n * 4)?.map(|w| w.sim_data()).transpose()?;
        let data = x.sim_data()?;
        self.op.run_in_scope(rec, Vec::new(), move |scope| {
            scope.sim_kernel(move || {
                let _scratch = work.as_ref().map(|w| w.lock());
                let mut x = data.lock();
                for i in indices {
                    x[i] *= factor;
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{backend::sim::SimConfig, device::Device, error::Error, libs::Handles};
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(60);

    fn fake_with_probe(h: &mut Handles) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        h.fake().unwrap().dropped = Some(tx);
        rx
    }

    #[test]
    fn a_library_added_through_the_registry_validates_records_and_runs() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
        let x = d.upload(d.default_stream(), &[1u32, 2, 3, 4, 5, 6]).unwrap();
        let before = d.stats();
        for (arg, got) in [
            ("n", h.fake().unwrap().scale(0, &x, 1, 2).map(drop)),
            ("x.inc", h.fake().unwrap().scale(3, &x, 0, 2).map(drop)),
            ("x.inc", h.fake().unwrap().scale(3, &x, -1, 2).map(drop)),
            ("x", h.fake().unwrap().scale(4, &x, 2, 2).map(drop)),
        ] {
            assert!(matches!(&got, Err(Error::InvalidArgument { arg: a, .. }) if *a == arg), "{arg}: {got:?}");
        }
        let after = d.stats();
        assert_eq!((after.events, after.waits), (before.events, before.waits), "a rejected op recorded something");
        assert_eq!(h.fake().unwrap().plans.made(), 0);

        h.fake().unwrap().scale(3, &x, 2, 10).unwrap().wait_timeout(LIMIT).unwrap();
        h.fake().unwrap().scale(3, &x, 2, 10).unwrap().wait_timeout(LIMIT).unwrap();
        assert_eq!(x.download(d.default_stream()).unwrap(), [100, 2, 300, 4, 500, 6]);
        let fake = h.fake().unwrap();
        assert_eq!((fake.plans.made(), fake.plans.len()), (1, 1), "the same layout reuses its plan");
        assert_eq!(fake.work.bytes(), 12);
        // A larger need grows the workspace; the old one goes to the reaper.
        fake.scale(6, &x, 1, 2).unwrap().wait_timeout(LIMIT).unwrap();
        assert_eq!((fake.plans.made(), fake.work.bytes()), (2, 24));

        // Lane jobs get the same accessor, on the lane's own state.
        let lane = d.lane("fake").unwrap();
        let y = x.clone();
        lane.submit(move |cx| cx.fake()?.scale(6, &y, 1, 2)?.wait()).wait_timeout(LIMIT).unwrap();
        assert_eq!(x.download(d.default_stream()).unwrap(), [400, 8, 1200, 16, 2000, 24]);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    }

    #[test]
    fn a_declared_job_needs_not_declare_the_library_workspace() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let lane = d.lane("fake").unwrap();
        let x = d.upload(d.default_stream(), &[1u32; 4]).unwrap();
        // The lane's workspace is made by an undeclared job, before the declared ones start:
        // only its being scratch lets them use it.
        let y = x.clone();
        lane.submit(move |cx| cx.fake()?.scale(4, &y, 1, 2)?.wait()).wait_timeout(LIMIT).unwrap();
        let y = x.clone();
        lane.job()
            .read_write(&x)
            .submit(move |cx, _| cx.fake()?.scale(4, &y, 1, 3)?.wait())
            .wait_timeout(LIMIT)
            .unwrap();
        // A larger need grows the workspace inside the declared job.
        let (y, big) = (x.clone(), d.upload(d.default_stream(), &[1u32; 16]).unwrap());
        let b = big.clone();
        lane.job()
            .read_write(&x)
            .read_write(&big)
            .submit(move |cx, _| {
                cx.fake()?.scale(16, &b, 1, 5)?.wait()?;
                cx.fake()?.scale(4, &y, 1, 5)?.wait()
            })
            .wait_timeout(LIMIT)
            .unwrap();
        assert_eq!(x.download(d.default_stream()).unwrap(), [30; 4]);
        assert_eq!(big.download(d.default_stream()).unwrap(), [5; 16]);
        assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    }

    #[test]
    fn evicted_plans_and_the_state_itself_go_to_the_reaper() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
        let dropped = fake_with_probe(&mut h);
        let x = d.upload(d.default_stream(), &[1u32; 8]).unwrap();
        let fake = h.fake().unwrap();
        fake.plans.set_capacity(1, &fake.op).unwrap();
        fake.scale(4, &x, 1, 2).unwrap().wait_timeout(LIMIT).unwrap();
        fake.scale(8, &x, 1, 2).unwrap().wait_timeout(LIMIT).unwrap();
        assert_eq!(dropped.recv_timeout(LIMIT).unwrap(), "cusched-reaper", "the evicted plan");
        drop(h);
        assert_eq!(dropped.recv_timeout(LIMIT).unwrap(), "cusched-reaper", "the state's plans");
    }

    #[test]
    fn a_rebuilt_context_gets_new_state_and_the_old_objects_are_forgotten() {
        let d = Device::sim(SimConfig::default()).unwrap();
        let mut h = Handles::new(&d, d.new_stream().unwrap()).unwrap();
        let dropped = fake_with_probe(&mut h);
        let x = d.upload(h.stream(), &[1u32; 4]).unwrap();
        h.fake().unwrap().scale(4, &x, 1, 3).unwrap().wait_timeout(LIMIT).unwrap();
        let generation = d.generation();
        let err = h.run(|cx| cx.recorder().launch(cx.device(), |s| s.sim_fault())).wait_timeout(LIMIT).unwrap_err();
        assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
        assert!(d.generation() > generation);

        let fresh = h.fake().unwrap();
        assert_eq!(fresh.plans.made(), 0, "made anew for the new context");
        let y = d.upload(h.stream(), &[1u32; 4]).unwrap();
        h.fake().unwrap().scale(4, &y, 1, 3).unwrap().wait_timeout(LIMIT).unwrap();
        assert_eq!(y.download(h.stream()).unwrap(), [3; 4]);
        drop(h);
        d.shutdown().unwrap();
        assert!(dropped.try_recv().is_err(), "a plan of the poisoned context was destroyed");
    }
}
