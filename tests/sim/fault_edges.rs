//! After a sticky fault on the simulator, every op that observes it reports `ContextPoisoned`
//! (or `Stale` for handles of the poisoned context), whichever call sees the fault first:
//! blocking downloads, host-buffer access, synchronize, lane jobs and inline ops.

use crate::common::*;
use cusched::{Device, Error, Handles, LaunchRecorder, StreamId};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Enqueues a faulting simulated kernel on `s`.
fn fault(d: &Device, s: StreamId) {
    LaunchRecorder::new_strict(s).named("oob_write").launch(d, |scope| scope.sim_fault()).unwrap();
}

/// Errors are shown through `Display`: cudarc's `Debug` of a driver status needs libcuda.
fn poisoned_or_stale<T>(what: &str, r: cusched::Result<T>) {
    match r {
        Err(Error::ContextPoisoned { .. }) | Err(Error::Stale { .. }) => {}
        Err(e) => panic!("{what} after a fault must be ContextPoisoned or Stale, got: {e}"),
        Ok(_) => panic!("{what} after a fault must be ContextPoisoned or Stale, got Ok"),
    }
}

#[test]
fn a_download_that_sees_the_fault_reports_context_poisoned() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        fault(&d, s);
        poisoned_or_stale("download", buf.download(s));
        // The device noticed: the buffer of the poisoned context is stale from now on.
        poisoned_or_stale("a second download", buf.download(s));
        assert!(d.generation() > 1, "the fault advanced the generation");
    })
}

#[test]
fn host_buffer_reads_that_see_the_fault_report_context_poisoned() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        let mut host = d.alloc_host::<u32>(8).unwrap();
        fault(&d, s);
        buf.copy_to_host(s, &mut host).unwrap();
        poisoned_or_stale("HostBuffer::read", host.read().map(|r| r.to_vec()));
        poisoned_or_stale("a second HostBuffer::read", host.read().map(|r| r.to_vec()));
    })
}

#[test]
fn host_buffer_writes_that_see_the_fault_report_context_poisoned() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let buf = d.alloc_zeros::<u32>(s, 8).unwrap();
        let mut host = d.host_from_slice(&[2u32; 8]).unwrap();
        fault(&d, s);
        buf.copy_from_host(s, &host).unwrap();
        poisoned_or_stale("HostBuffer::write", host.write().map(|mut w| w[0] = 1));
    })
}

#[test]
fn synchronize_lane_jobs_and_inline_ops_report_context_poisoned() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        fault(&d, s);
        poisoned_or_stale("synchronize", d.synchronize(s));
        poisoned_or_stale("a download after synchronize saw the fault", buf.download(s));

        let d = sim();
        let lane = d.lane("l").unwrap();
        let s = lane.stream();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        let job = lane.submit(move |cx| {
            fault(cx.device(), cx.stream());
            let b = buf.clone();
            cx.keep(b);
            Ok(())
        });
        poisoned_or_stale("a lane job", job.wait());

        let d = sim();
        let s = d.new_stream().unwrap();
        let mut h = Handles::new(&d, s).unwrap();
        let done = h.run(|h| {
            fault(h.device(), h.stream());
            Ok(())
        });
        poisoned_or_stale("an inline op", done.wait());
    })
}

#[test]
fn new_work_on_other_streams_after_the_fault_sees_stale_buffers() {
    bounded(LIMIT, || {
        let d = sim();
        let (s1, s2) = (d.default_stream(), d.new_stream().unwrap());
        let buf = d.upload(s1, &[1u32; 8]).unwrap();
        fault(&d, s1);
        poisoned_or_stale("download on the faulting stream", buf.download(s1));
        poisoned_or_stale("download on another stream", buf.download(s2));
        // Fresh buffers on the rebuilt context work.
        let fresh = d.upload(s2, &[5u32; 4]).unwrap();
        assert_eq!(fresh.download(s1).unwrap(), vec![5; 4]);
    })
}

/// Faults the context from another stream and waits until the device has moved to a new one.
fn fault_and_rebuild(d: &Device) {
    let other = d.new_stream().unwrap();
    let generation = d.generation();
    fault(d, other);
    poisoned_or_stale("synchronize of the faulting stream", d.synchronize(other));
    assert!(d.generation() > generation, "the fault made the device rebuild");
}

#[test]
fn a_commit_after_a_rebuild_reports_the_poison_of_the_context_its_work_went_to() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.new_stream().unwrap();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        let mut rec = LaunchRecorder::new_strict(s);
        rec.read_write(&buf).unwrap();
        let launch = rec.preflight(&d).unwrap();
        let data = buf.sim_data().unwrap();
        launch.scope().sim_kernel(move || data.lock().iter_mut().for_each(|x| *x += 1)).unwrap();
        // The kernel went to the stream of the first context; the device moves on before the
        // commit marks its end.
        fault_and_rebuild(&d);
        match launch.commit() {
            Err(Error::ContextPoisoned { .. }) => {}
            Err(e) => panic!("the commit must report the poison, got: {e}"),
            Ok(()) => panic!("the commit reported work of the poisoned context as done"),
        }
    })
}

#[test]
fn a_job_whose_work_went_to_a_poisoned_context_does_not_complete_ok() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.new_stream().unwrap();
        let buf = d.upload(s, &[1u32; 8]).unwrap();
        let mut h = Handles::new(&d, s).unwrap();
        let job = h.run(|h| {
            let data = buf.sim_data()?;
            let mut rec = h.recorder();
            rec.read_write(&buf)?;
            let launch = rec.preflight(h.device())?;
            launch.scope().sim_kernel(move || data.lock().iter_mut().for_each(|x| *x += 1))?;
            fault_and_rebuild(h.device());
            // The op itself reports the poison; the job's end must not read as success either.
            let _ = launch.commit();
            Ok(5)
        });
        poisoned_or_stale("the job", job.wait());
    })
}
