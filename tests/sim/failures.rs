//! Failures propagate along the data, on the simulator: a buffer whose last writer failed (a
//! lane job that returned an error, panicked or never ran; an inline launch or library op whose
//! enqueue failed) fails every later read of it, a download included, with an error naming the
//! failed op and the buffer, until a successful write replaces its contents. Every test is
//! bounded so that a hang fails it.

use crate::common::*;
use cusched::{Device, Error, GpuRef, Handles, LaunchRecorder, SimConfig, StreamId};
use std::time::Duration;

/// A hang guard, not a deadline: a loaded machine may be slow.
const LIMIT: Duration = Duration::from_secs(120);

/// `out = input * k` as one simulated kernel, on `s`.
fn scale(d: &Device, s: StreamId, out: &GpuRef<u64>, input: &GpuRef<u64>, k: u64) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s).named("scale");
    rec.read(input)?.write(out)?;
    let (src, dst) = (input.sim_data()?, out.sim_data()?);
    rec.launch(d, move |scope| {
        scope.sim_kernel(move || {
            let src = src.read();
            for (o, i) in dst.lock().iter_mut().zip(src.iter()) {
                *o = i * k;
            }
        })
    })
}

/// The three-lane pipeline of the issue (upload, scale, download), chunk by chunk with no wait
/// between stages; the upload of chunk `bad` fails. Returns each chunk's download.
fn pipeline(failing: usize, chunks: usize) -> Vec<cusched::Result<Vec<u64>>> {
    let d = sim();
    let (up, mid, down) = (d.lane("upload").unwrap(), d.lane("scale").unwrap(), d.lane("download").unwrap());
    let s = d.default_stream();
    let x = d.alloc_zeros::<u64>(s, 4).unwrap().with_label("x");
    let y = d.alloc_zeros::<u64>(s, 4).unwrap().with_label("y");
    let mut downloads = Vec::new();
    for i in 0..chunks {
        let xw = x.clone();
        up.job().write(&x).submit(move |cx, _| {
            if i == failing {
                return Err(bad("chunk", format!("chunk {i} could not be read")));
            }
            xw.copy_from_slice(cx.stream(), &[i as u64 + 1; 4])
        });
        let (xr, yw) = (x.clone(), y.clone());
        mid.job().read(&x).write(&y).submit(move |cx, _| scale(cx.device(), cx.stream(), &yw, &xr, 10));
        let yr = y.clone();
        downloads.push(down.job().read(&y).submit(move |cx: &mut Handles, _| yr.download(cx.stream())));
    }
    downloads.into_iter().map(|c| c.wait()).collect()
}

#[test]
fn a_failed_upload_job_fails_the_download_of_its_chunk_naming_the_upload() {
    bounded(LIMIT, || {
        let results = pipeline(2, 5);
        for (i, r) in results.iter().enumerate() {
            if i == 2 {
                let err = r.as_ref().expect_err("the chunk's upload failed: its download must not resolve Ok");
                assert!(is_failed_input(err), "{err:?}");
                let text = err.to_string();
                assert!(text.contains("upload"), "the error names the failed upload job: {text}");
                assert!(text.contains("could not be read"), "the error carries the upload's cause: {text}");
            } else {
                // A later successful upload rewrites x, and the chain runs again.
                assert_eq!(r.as_ref().map_err(|e| (i, e.clone())).unwrap(), &vec![(i as u64 + 1) * 10; 4], "chunk {i}");
            }
        }
    });
}

#[test]
#[cfg(feature = "cublas")]
fn a_failed_gemm_stage_fails_the_download_naming_the_gemm_job() {
    use cusched::blas::Gemm;
    bounded(LIMIT, || {
        let d = sim();
        let (up, mm, down) = (d.lane("upload").unwrap(), d.lane("gemm").unwrap(), d.lane("download").unwrap());
        let s = d.default_stream();
        let a = d.alloc_zeros::<f32>(s, 4).unwrap().with_label("a");
        let c = d.alloc_zeros::<f32>(s, 4).unwrap().with_label("c");
        let aw = a.clone();
        up.job().write(&a).submit(move |cx, _| aw.copy_from_slice(cx.stream(), &[1.0; 4]));
        let (ar, cw) = (a.clone(), c.clone());
        // A GEMM whose A is declared 2x2 with a leading dimension of 1: rejected, so the stage
        // fails.
        let gemm = mm.job().read(&a).write(&c).submit(move |cx, _| {
            cx.blas()?.gemm(&Gemm::new(2, 2, 2, &ar, &ar, &cw).leading(1, 2, 2))?;
            Ok(())
        });
        let cr = c.clone();
        let downloaded = down.job().read(&c).submit(move |cx, _| cr.download(cx.stream()));
        let gemm_err = gemm.wait().expect_err("the GEMM's arguments are invalid");
        let err = downloaded.wait().expect_err("the GEMM failed: the download must not resolve Ok with stale data");
        assert!(is_failed_input(&err), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("gemm"), "the error names the GEMM job's lane: {text}");
        assert!(text.contains(&gemm_err.to_string()), "the error carries the GEMM's cause: {text}");
    });
}

#[test]
fn an_inline_launch_whose_enqueue_fails_fails_later_reads_naming_the_op_and_the_buffer() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let x = d.upload(s, &[1u64, 2]).unwrap().with_label("weights");
        let mut rec = LaunchRecorder::new_strict(s).named("broken");
        rec.write(&x).unwrap();
        let data = x.sim_data().unwrap();
        let err = rec
            .launch(&d, move |scope| {
                scope.sim_kernel(move || data.lock()[0] = 99)?;
                Err::<(), _>(bad("tile", "too large"))
            })
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { arg: "tile", .. }), "{err:?}");
        let err = x.download(s).expect_err("x's last writer failed");
        assert!(is_failed_input(&err), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("broken"), "names the op: {text}");
        assert!(text.contains("weights"), "names the buffer's label: {text}");
        assert!(text.contains("too large"), "carries the cause: {text}");
        // A read on the GPU fails at its preflight too, enqueueing nothing.
        let y = d.alloc_zeros::<u64>(s, 2).unwrap();
        let err = scale(&d, s, &y, &x, 2).expect_err("x's last writer failed");
        assert!(is_failed_input(&err), "{err:?}");
        // The failed read-only use leaves y as it was: its own contents are fine.
        assert_eq!(y.download(s).unwrap(), [0, 0]);
    });
}

#[test]
fn a_successful_write_clears_the_failure_and_read_write_does_not() {
    bounded(LIMIT, || {
        // Both paths: one stream (no per-buffer state kept) and several.
        for streams in [1, 2] {
            let d = sim();
            let s = if streams == 1 { d.default_stream() } else { d.new_stream().unwrap() };
            let x = d.upload(s, &[1u64, 2]).unwrap();
            let mut rec = LaunchRecorder::new_strict(s);
            rec.write(&x).unwrap();
            rec.launch(&d, |_| Err::<(), _>(bad("n", "bad"))).unwrap_err();
            // read_write reads: it fails, and writes nothing.
            let mut rec = LaunchRecorder::new_strict(s);
            rec.read_write(&x).unwrap();
            let err = rec.launch(&d, |_| Ok(())).expect_err("read_write of a failed buffer");
            assert!(is_failed_input(&err), "{streams} streams: {err:?}");
            assert!(is_failed_input(&x.download(s).unwrap_err()), "{streams} streams");
            // A plain write replaces the contents and clears the failure.
            x.copy_from_slice(s, &[5, 6]).unwrap();
            assert_eq!(x.download(s).unwrap(), [5, 6], "{streams} streams");
        }
    });
}

#[test]
fn a_failed_read_only_op_does_not_fail_its_inputs() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let x = d.upload(s, &[3u64]).unwrap();
        let mut rec = LaunchRecorder::new_strict(s);
        rec.read(&x).unwrap();
        rec.launch(&d, |_| Err::<(), _>(bad("n", "bad"))).unwrap_err();
        assert_eq!(x.download(s).unwrap(), [3]);
    });
}

#[test]
fn an_undeclared_job_that_committed_a_write_and_then_failed_fails_that_buffer() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("undeclared").unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[1u64]).unwrap().with_label("half-written");
        let xw = x.clone();
        let job = lane.submit(move |cx| {
            xw.copy_from_slice(cx.stream(), &[2])?;
            Err::<(), _>(bad("step", "second half failed"))
        });
        job.wait().unwrap_err();
        let err = x.download(s).expect_err("the job that last wrote x failed");
        assert!(is_failed_input(&err), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("undeclared") && text.contains("half-written"), "{text}");
    });
}

#[test]
fn a_declared_job_that_panics_or_never_runs_fails_its_declared_writes() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("panics").unwrap();
        let s = d.default_stream();
        let x = d.upload(s, &[1u64]).unwrap();
        let panicked = lane.job().write(&x).submit(|_, _| -> cusched::Result<()> { panic!("job panics") });
        assert!(matches!(panicked.wait(), Err(Error::JobPanicked { .. })));
        let err = x.download(s).expect_err("x's declared writer panicked");
        assert!(is_failed_input(&err) && err.to_string().contains("job panics"), "{err:?}");

        // A declared write cancelled at shutdown.
        let d = Device::sim(SimConfig::default()).unwrap();
        let lane = d.lane("shut").unwrap();
        let y = d.upload(d.default_stream(), &[4u64]).unwrap();
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let blocker = lane.submit(move |_| {
            started_tx.send(()).ok();
            gate.recv().ok();
            Ok(())
        });
        started.recv().unwrap();
        let yw = y.clone();
        let queued = lane.job().write(&y).submit(move |cx, _| yw.copy_from_slice(cx.stream(), &[9]));
        let probe = lane.clone();
        let releaser = std::thread::spawn(move || {
            while !matches!(probe.try_submit(|_| Ok(())), Err(Error::Shutdown)) {
                std::thread::sleep(Duration::from_millis(1));
            }
            open.send(()).ok();
        });
        d.shutdown().unwrap();
        releaser.join().unwrap();
        blocker.wait().unwrap();
        assert!(matches!(queued.wait(), Err(Error::Shutdown)));
        let err = y.download(d.default_stream()).expect_err("y's declared writer never ran");
        assert!(is_failed_input(&err), "{err:?}");
    });
}

#[test]
fn the_error_names_the_buffer_its_label_the_failed_op_and_its_cause() {
    bounded(LIMIT, || {
        let d = sim();
        let lane = d.lane("upload").unwrap();
        let s = d.default_stream();
        let x = d.alloc_zeros::<u64>(s, 2).unwrap().with_label("input");
        let xw = x.clone();
        lane.job().write(&x).submit(move |cx, _| {
            xw.copy_from_slice(cx.stream(), &[1, 2])?;
            Err::<(), _>(bad("file", "truncated"))
        });
        match x.download(s) {
            Err(Error::FailedInput { buffer, label, op, cause }) => {
                assert!(buffer.contains("input") && buffer.contains(&x.id().to_string()), "{buffer}");
                assert_eq!(label.as_deref(), Some("input"));
                assert_eq!(op, "the job on lane `upload`");
                assert!(matches!(*cause, Error::InvalidArgument { arg: "file", .. }), "{cause:?}");
            }
            other => panic!("expected FailedInput, got {other:?}"),
        }
    });
}

#[test]
fn a_host_buffer_whose_copy_failed_fails_its_host_read_until_written() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let mut host = d.host_from_slice(&[1u64, 2]).unwrap();
        let mut rec = LaunchRecorder::new_strict(s).named("fill_host");
        rec.write(&host).unwrap();
        rec.launch(&d, |_| Err::<(), _>(bad("n", "bad"))).unwrap_err();
        let err = host.read().map(|_| ()).expect_err("the host buffer's last writer failed");
        assert!(matches!(&err, Error::FailedInput { op, .. } if op.contains("fill_host")), "{err:?}");
        host.write().unwrap().copy_from_slice(&[3, 4]);
        assert_eq!(&*host.read().unwrap(), &[3, 4]);
    });
}
