//! Graphs on the simulator: recording, replay as one tracked op (fenced against eager work
//! both ways), fork and join across branches from the declared uses, rebinding, the typed
//! errors of what cannot be recorded, and the checker: a replay whose edges are dropped
//! (`FenceMutation::NoGraphEdges`) is reported.

use crate::common::*;
use cusched::{Device, Error, FenceMutation, GpuRef, Graph, HazardKind, LaunchRecorder, StreamId};

/// `out[i] = f(ins...)` as a simulated kernel on `stream`, declaring its reads and its write.
fn op(
    d: &Device,
    s: StreamId,
    name: &'static str,
    ins: &[&GpuRef<f32>],
    out: &GpuRef<f32>,
    f: fn(&[f32]) -> f32,
) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s).named(name);
    for i in ins {
        rec.read(*i)?;
    }
    rec.write(out)?;
    let ins: Vec<_> = ins.iter().map(|b| b.sim_data()).collect::<cusched::Result<_>>()?;
    let om = out.sim_data()?;
    rec.launch(d, move |scope| {
        scope.sim_kernel(move || {
            let reads: Vec<_> = ins.iter().map(|m| m.read().to_vec()).collect();
            for (i, o) in om.lock().iter_mut().enumerate() {
                let args: Vec<f32> = reads.iter().map(|r| r[i]).collect();
                *o = f(&args);
            }
        })
    })
}

/// x → (y = x + 1 on branch 1, z = 2x on branch 2) → w = y + z on branch 0: a fork and a join
/// the declared uses ask for.
fn diamond(d: &Device, x: &GpuRef<f32>, y: &GpuRef<f32>, z: &GpuRef<f32>, w: &GpuRef<f32>) -> Graph {
    let (x, y, z, w) = (x.clone(), y.clone(), z.clone(), w.clone());
    Graph::record(d, move |rec| {
        let (b0, b1, b2) = (rec.stream(0)?, rec.stream(1)?, rec.stream(2)?);
        let dev = rec.device().clone();
        op(&dev, b0, "seed", &[&x], &x, |a| a[0] + 1.0)?;
        op(&dev, b1, "plus_one", &[&x], &y, |a| a[0] + 1.0)?;
        op(&dev, b2, "double", &[&x], &z, |a| 2.0 * a[0])?;
        op(&dev, b0, "join", &[&y, &z], &w, |a| a[0] + a[1])
    })
    .unwrap()
}

#[test]
fn a_replay_runs_the_recorded_ops_in_the_order_their_uses_ask_for() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32; 64]).unwrap();
    let (y, z, w) = (d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap());
    let graph = diamond(&d, &x, &y, &z, &w);
    assert_eq!((graph.ops(), graph.buffers(), graph.branches().len()), (4, 4, 3));
    // Recording ran nothing.
    assert_eq!(x.download(s).unwrap(), vec![1.0; 64]);
    let exec = graph.instantiate().unwrap();
    let mut want = 1.0f32;
    for _ in 0..50 {
        exec.replay(s).unwrap();
        want += 1.0;
    }
    // After 50 replays x = 51; w = (x + 1) + 2x of the last replay's x.
    assert_eq!(x.download(s).unwrap(), vec![want; 64]);
    assert_eq!(w.download(s).unwrap(), vec![(want + 1.0) + 2.0 * want; 64]);
    d.shutdown().unwrap();
}

#[test]
fn dropped_edges_are_reported_by_the_checker() {
    let d = sim_mutated(Some(FenceMutation::NoGraphEdges));
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32; 64]).unwrap();
    let (y, z, w) = (d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap(), d.alloc_zeros(s, 64).unwrap());
    let exec = diamond(&d, &x, &y, &z, &w).instantiate().unwrap();
    for _ in 0..5 {
        exec.replay(s).unwrap();
    }
    d.synchronize(s).unwrap();
    let hazards = d.sim_hazards().unwrap();
    assert!(!hazards.is_empty(), "the graph's ops ran unordered, and no hazard was reported");
    assert!(hazards.iter().all(|h| h.kind != HazardKind::Undeclared), "{hazards:#?}");
}

#[test]
fn a_replay_is_fenced_against_eager_work_on_other_streams_both_ways() {
    let d = sim();
    let (s, eager) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s, &[0.0f32; 256]).unwrap();
    let y = d.alloc_zeros::<f32>(s, 256).unwrap();
    let (xr, yr) = (x.clone(), y.clone());
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        op(&rec.device().clone(), b, "copy_plus", &[&xr], &yr, |a| a[0] + 0.5)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    for round in 1..=20 {
        // An eager write on another stream, then the replay reading it, then an eager read.
        op(&d, eager, "eager_write", &[&x], &x, |a| a[0] + 1.0).unwrap();
        exec.replay(s).unwrap();
        let seen = d.alloc_zeros::<f32>(eager, 256).unwrap();
        op(&d, eager, "eager_read", &[&y], &seen, |a| a[0]).unwrap();
        assert_eq!(seen.download(eager).unwrap(), vec![round as f32 + 0.5; 256], "round {round}");
    }
    d.shutdown().unwrap();
}

#[test]
fn rebinding_points_the_graph_at_another_buffer() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[3.0f32; 16]).unwrap();
    let y = d.alloc_zeros::<f32>(s, 16).unwrap();
    let (xr, yr) = (x.clone(), y.clone());
    let mut exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        op(&rec.device().clone(), b, "square", &[&xr], &yr, |a| a[0] * a[0])
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.replay(s).unwrap();
    assert_eq!(y.download(s).unwrap(), vec![9.0; 16]);
    let x2 = d.upload(s, &[5.0f32; 16]).unwrap();
    exec.rebind(&x, &x2).unwrap();
    exec.replay(s).unwrap();
    assert_eq!(y.download(s).unwrap(), vec![25.0; 16]);
    // Again, from the stand-in; the graph no longer touches x.
    let x3 = d.upload(s, &[-2.0f32; 16]).unwrap();
    exec.rebind(&x2, &x3).unwrap();
    x.copy_from_slice(s, &[100.0; 16]).unwrap();
    exec.replay(s).unwrap();
    assert_eq!(y.download(s).unwrap(), vec![4.0; 16]);
    assert_eq!(exec.graph().buffers(), 2);

    let short = d.alloc_zeros::<f32>(s, 15).unwrap();
    assert!(matches!(exec.rebind(&x3, &short), Err(Error::InvalidArgument { arg: "new", .. })));
    let unrelated = d.alloc_zeros::<f32>(s, 16).unwrap();
    assert!(matches!(exec.rebind(&unrelated, &x3), Err(Error::InvalidArgument { arg: "old", .. })));
    let other = sim();
    let foreign = other.alloc_zeros::<f32>(other.default_stream(), 16).unwrap();
    assert!(matches!(exec.rebind(&x3, &foreign), Err(Error::ForeignDevice { .. })));
    // The refused rebindings changed nothing.
    exec.replay(s).unwrap();
    assert_eq!(y.download(s).unwrap(), vec![4.0; 16]);
    d.shutdown().unwrap();
}

#[test]
fn what_cannot_be_recorded_is_a_typed_error_and_abandons_the_recording() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32; 8]).unwrap();
    let xr = x.clone();
    let err = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        op(&rec.device().clone(), b, "bump", &[&xr], &xr, |a| a[0] + 1.0)?;
        xr.download(b).map(drop)
    })
    .unwrap_err();
    assert!(matches!(err, Error::Recording { .. }), "{err}");
    let xr = x.clone();
    let err = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        let mut pre = LaunchRecorder::new_strict(b);
        pre.read(&xr)?;
        pre.preflight(rec.device()).map(drop)
    })
    .unwrap_err();
    assert!(matches!(err, Error::Recording { .. }), "{err}");
    assert!(matches!(Graph::record(&d, |_| Ok(())), Err(Error::Recording { .. })));
    // Nothing stays lent or half-recorded: eager work and a new recording go on as usual.
    op(&d, s, "after", &[&x], &x, |a| a[0] * 10.0).unwrap();
    assert_eq!(x.download(s).unwrap(), vec![10.0; 8]);
    let xr = x.clone();
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        op(&rec.device().clone(), b, "halve", &[&xr], &xr, |a| a[0] / 2.0)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.replay(s).unwrap();
    assert_eq!(x.download(s).unwrap(), vec![5.0; 8]);
    d.shutdown().unwrap();
}

#[test]
fn allocations_on_a_branch_happen_at_once_and_the_graph_keeps_them() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[2.0f32; 32]).unwrap();
    let out = d.alloc_zeros::<f32>(s, 32).unwrap();
    let (xr, or) = (x.clone(), out.clone());
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        let dev = rec.device().clone();
        // Scratch made during the recording, on the branch: allocated now, used by the graph.
        let tmp = dev.alloc_zeros::<f32>(b, 32)?;
        op(&dev, b, "triple", &[&xr], &tmp, |a| 3.0 * a[0])?;
        op(&dev, b, "plus_tmp", &[&tmp, &xr], &or, |a| a[0] + a[1])
    })
    .unwrap()
    .instantiate()
    .unwrap();
    for _ in 0..3 {
        exec.replay(s).unwrap();
    }
    assert_eq!(out.download(s).unwrap(), vec![8.0; 32]);
    d.shutdown().unwrap();
}

#[test]
fn a_replay_after_the_context_was_poisoned_is_stale() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32; 8]).unwrap();
    let xr = x.clone();
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        op(&rec.device().clone(), b, "inc", &[&xr], &xr, |a| a[0] + 1.0)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.replay(s).unwrap().wait().unwrap();
    LaunchRecorder::new_strict(s).launch(&d, |scope| scope.sim_fault()).unwrap();
    assert!(d.synchronize(s).is_err());
    let err = exec.replay(s).unwrap_err();
    assert!(matches!(err, Error::Stale { .. }), "{err}");
}

/// Library ops record on the simulator too, and compute when the graph replays: a GEMM on one
/// branch and an axpy-like scaling of its output on another.
#[cfg(feature = "cublas")]
#[test]
fn library_ops_in_a_graph_compute_on_replay() {
    use cusched::blas::{Gemm, Vector};
    let d = sim();
    let s = d.default_stream();
    let (m, n, k) = (5usize, 4usize, 3usize);
    let a = d.upload(s, &(0..m * k).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
    let b = d.upload(s, &(0..k * n).map(|i| 1.0 - i as f32).collect::<Vec<_>>()).unwrap();
    let c = d.alloc_zeros::<f32>(s, m * n).unwrap();
    let (ar, br, cr) = (a.clone(), b.clone(), c.clone());
    let exec = Graph::record(&d, move |rec| {
        rec.handles(0)?.blas()?.gemm(&Gemm::new(m, n, k, &ar, &br, &cr))?;
        rec.handles(1)?.blas()?.scal(m * n, 2.0f32, Vector::from(&cr))?;
        Ok(())
    })
    .unwrap()
    .instantiate()
    .unwrap();
    // Nothing ran while recording.
    assert_eq!(c.download(s).unwrap(), vec![0.0; m * n]);
    exec.replay(s).unwrap().wait().unwrap();
    // Column-major C = A·B, doubled.
    let want: Vec<f32> = (0..m * n)
        .map(|idx| {
            let (i, j) = (idx % m, idx / m);
            2.0 * (0..k).map(|l| (i + l * m) as f32 * (1.0 - (l + j * k) as f32)).sum::<f32>()
        })
        .collect();
    assert_eq!(c.download(s).unwrap(), want);
    d.shutdown().unwrap();
}

/// A recording closure runs only on the graph's branches: an op it enqueues elsewhere would
/// run eagerly at every recording (and on the simulator at every replay), and while a
/// rebinding records again it would declare the new buffer but touch the old one. Refused.
#[test]
fn an_eager_op_inside_a_recording_closure_is_refused() {
    let d = sim();
    let (s, other) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s, &[1.0f32; 8]).unwrap();
    let y = d.alloc_zeros::<f32>(s, 8).unwrap();
    let (xr, yr) = (x.clone(), y.clone());
    let err = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        let dev = rec.device().clone();
        op(&dev, b, "recorded", &[&xr], &yr, |a| a[0])?;
        op(&dev, other, "eager", &[&xr], &xr, |a| a[0] + 1.0)
    })
    .unwrap_err();
    assert!(matches!(err, Error::Recording { .. }), "{err}");
    assert_eq!(x.download(s).unwrap(), vec![1.0; 8]);
    d.shutdown().unwrap();
}

/// A buffer the graph already uses cannot stand for another: ops that require distinct
/// buffers (a copy's source and destination) would get the same one.
#[test]
fn rebinding_to_a_buffer_the_graph_uses_is_refused() {
    let d = sim();
    let s = d.default_stream();
    let a = d.upload(s, &[2.0f32; 8]).unwrap();
    let b = d.alloc_zeros::<f32>(s, 8).unwrap();
    let (ar, br) = (a.clone(), b.clone());
    let mut exec = Graph::record(&d, move |rec| {
        let st = rec.stream(0)?;
        br.copy_from(st, &ar)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    let err = exec.rebind(&a, &b).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { arg: "new", .. }), "{err}");
    exec.replay(s).unwrap();
    assert_eq!(b.download(s).unwrap(), vec![2.0; 8]);
    d.shutdown().unwrap();
}

/// A loop body: `x = x / 2` and `count += 1` on branch `b`, and the condition set to go on
/// while `x >= 1` (the simulator's `cudaGraphSetConditional`).
fn halve(
    d: &Device,
    b: StreamId,
    x: &GpuRef<f32>,
    count: &GpuRef<f32>,
    cond: &cusched::LoopCondition,
) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(b).named("halve");
    rec.read_write(x)?.read_write(count)?;
    let (xm, cm, cond) = (x.sim_data()?, count.sim_data()?, cond.clone());
    rec.launch(d, move |scope| {
        scope.sim_kernel(move || {
            let mut x = xm.lock();
            x[0] /= 2.0;
            cm.lock()[0] += 1.0;
            cond.set_simulated(x[0] >= 1.0);
        })
    })
}

/// x = 100 halves until it is below 1: seven iterations, as the eager loop (whose host reads
/// x back after every step) takes.
fn eager_halvings(start: f32) -> (f32, f32) {
    let (mut x, mut n) = (start, 0.0);
    loop {
        x /= 2.0;
        n += 1.0;
        if x < 1.0 {
            return (x, n);
        }
    }
}

#[test]
fn a_while_loop_runs_its_body_until_a_kernel_clears_the_condition() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[100.0f32]).unwrap();
    let count = d.alloc_zeros::<f32>(s, 1).unwrap();
    let y = d.alloc_zeros::<f32>(s, 1).unwrap();
    let (xr, cr, yr) = (x.clone(), count.clone(), y.clone());
    let graph = Graph::record(&d, move |rec| {
        let (b0, b1) = (rec.stream(0)?, rec.stream(1)?);
        let dev = rec.device().clone();
        op(&dev, b0, "reset", &[], &cr, |_| 0.0)?;
        rec.while_loop(|_, cond| halve(&dev, b0, &xr, &cr, cond))?;
        // After the loop, on another branch: it must see the loop's last x.
        op(&dev, b1, "after", &[&xr], &yr, |a| a[0] * 10.0)
    })
    .unwrap();
    // reset, the loop (one op), after.
    assert_eq!(graph.ops(), 3);
    let exec = graph.instantiate().unwrap();
    exec.replay(s).unwrap().wait().unwrap();
    let (want_x, want_n) = eager_halvings(100.0);
    assert_eq!(x.download(s).unwrap(), [want_x]);
    assert_eq!(count.download(s).unwrap(), [want_n]);
    assert_eq!(y.download(s).unwrap(), [want_x * 10.0]);
    // Another start, another trip count; the body runs at least once.
    for start in [1000.0f32, 3.0, 0.5] {
        x.copy_from_slice(s, &[start]).unwrap();
        exec.replay(s).unwrap().wait().unwrap();
        let (want_x, want_n) = eager_halvings(start);
        assert_eq!((x.download(s).unwrap()[0], count.download(s).unwrap()[0]), (want_x, want_n), "from {start}");
    }
    d.shutdown().unwrap();
}

#[test]
fn a_while_loop_without_its_edges_is_reported_by_the_checker() {
    // The op after the loop reads what the loop wrote; without edges it races the body.
    let d = sim_mutated(Some(FenceMutation::NoGraphEdges));
    let s = d.default_stream();
    let x = d.upload(s, &[100.0f32]).unwrap();
    let count = d.alloc_zeros::<f32>(s, 1).unwrap();
    let y = d.alloc_zeros::<f32>(s, 1).unwrap();
    let (xr, cr, yr) = (x.clone(), count.clone(), y.clone());
    let exec = Graph::record(&d, move |rec| {
        let (b0, b1) = (rec.stream(0)?, rec.stream(1)?);
        let dev = rec.device().clone();
        rec.while_loop(|_, cond| halve(&dev, b0, &xr, &cr, cond))?;
        op(&dev, b1, "after", &[&xr], &yr, |a| a[0] * 10.0)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    for _ in 0..3 {
        x.copy_from_slice(s, &[100.0]).unwrap();
        let _ = exec.replay(s).unwrap().wait();
    }
    d.synchronize(s).unwrap();
    let hazards = d.sim_hazards().unwrap();
    assert!(!hazards.is_empty(), "the checker saw no race without the loop's edges");
    assert!(hazards.iter().all(|h| h.kind != HazardKind::Undeclared), "{hazards:#?}");
}

#[test]
fn a_failing_loop_body_abandons_the_recording() {
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[1.0f32; 4]).unwrap();
    let xr = x.clone();
    let e = Graph::record(&d, move |rec| {
        let b0 = rec.stream(0)?;
        let dev = rec.device().clone();
        op(&dev, b0, "before", &[&xr], &xr, |a| a[0] + 1.0)?;
        rec.while_loop(|_, _| Err(bad("body", "failed on purpose")))
    })
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Nothing stays lent: eager work on the device goes on.
    x.copy_from_slice(s, &[2.0; 4]).unwrap();
    assert_eq!(x.download(s).unwrap(), [2.0; 4]);
    d.shutdown().unwrap();
}

/// A module global first looked up while a graph is recorded: its first write (on the default
/// stream) happens at once, outside any capture, and the graph uses the global like a buffer.
#[cfg(feature = "nvrtc")]
#[test]
fn a_module_global_looked_up_while_recording_is_ordered_at_once() {
    let d = sim();
    let s = d.default_stream();
    let module = d.sim_module().unwrap();
    let x = d.upload(s, &[2.0f32; 8]).unwrap();
    let (xr, m) = (x.clone(), module.clone());
    let exec = Graph::record(&d, move |rec| {
        let b = rec.stream(0)?;
        let dev = rec.device().clone();
        let g = m.global::<f32>("g", 8)?;
        op(&dev, b, "into_global", &[&xr], &g, |a| a[0] + 1.0)
    })
    .unwrap()
    .instantiate()
    .unwrap();
    exec.replay(s).unwrap();
    let g = module.global::<f32>("g", 8).unwrap();
    assert_eq!(g.download(s).unwrap(), vec![3.0; 8]);
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards());
    d.shutdown().unwrap();
}
