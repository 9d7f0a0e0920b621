//! KernelTrace hooks and the Chrome-trace timeline on the simulator: every op gets its four
//! calls in order with its lane, stream, library and name; failed ops still get all four; no
//! hook means no calls; the timeline's JSON has one group per lane whose tracks never overlap.

use crate::common::*;
use cusched::{
    Device, DeviceConfig, Error, GpuSpan, KernelTrace, LaunchRecorder, OpInfo, SimConfig, Timeline, TraceOptions,
};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// One hook call: op id, hook name, what the hook was given.
type Call = (u64, &'static str, OpInfo, Option<GpuSpan>);

#[derive(Default)]
struct Calls(Mutex<Vec<Call>>);

impl KernelTrace for Calls {
    fn before_enqueue(&self, op: &OpInfo) {
        self.0.lock().unwrap().push((op.id, "before_enqueue", op.clone(), None));
    }
    fn after_enqueue(&self, op: &OpInfo) {
        self.0.lock().unwrap().push((op.id, "after_enqueue", op.clone(), None));
    }
    fn before_completion(&self, op: &OpInfo, gpu: Option<GpuSpan>) {
        self.0.lock().unwrap().push((op.id, "before_completion", op.clone(), gpu));
    }
    fn after_completion(&self, op: &OpInfo, gpu: Option<GpuSpan>) {
        self.0.lock().unwrap().push((op.id, "after_completion", op.clone(), gpu));
    }
}

fn calls_settled(calls: &Calls, ops: usize) -> Vec<Call> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v = calls.0.lock().unwrap().clone();
        if v.len() >= ops * 4 || std::time::Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn hooks_see_every_op_in_order_with_its_lane_library_and_name() {
    let device = sim();
    let calls = Arc::new(Calls::default());
    device.set_trace(calls.clone(), TraceOptions { gpu_timing: true }).unwrap();
    let lane = device.lane("worker").unwrap();
    let out = lane
        .submit(|cx| {
            let buf = cx.device().upload(cx.stream(), &[1u32, 2, 3])?;
            let mut rec = cx.recorder().named("triple");
            rec.read_write(&buf)?;
            let data = buf.sim_data()?;
            rec.launch(cx.device(), move |scope| {
                scope.sim_kernel(move || data.lock().iter_mut().for_each(|x| *x *= 3))
            })?;
            buf.download(cx.stream())
        })
        .wait()
        .unwrap();
    assert_eq!(out, vec![3, 6, 9]);
    let calls = calls_settled(&calls, 3);
    assert_eq!(calls.len(), 12, "3 ops x 4 hooks: {:?}", calls.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>());
    let mut names = Vec::new();
    for id in calls.iter().map(|c| c.0).collect::<std::collections::BTreeSet<_>>() {
        let seq: Vec<_> = calls.iter().filter(|c| c.0 == id).collect();
        let kinds: Vec<_> = seq.iter().map(|c| c.1).collect();
        assert_eq!(kinds, ["before_enqueue", "after_enqueue", "before_completion", "after_completion"], "op {id}");
        let info = &seq[0].2;
        assert_eq!(info.lane.as_deref(), Some("worker"));
        assert_eq!(info.stream, lane.stream());
        names.push((info.library, info.op.to_string()));
        let gpu = seq[3].3.expect("GPU timing on: the completion hooks get a span");
        assert!(gpu.duration < Duration::from_secs(60), "a span of a kernel of microseconds: {gpu:?}");
    }
    assert_eq!(
        names,
        [("memory", "alloc".to_string()), ("user", "triple".to_string()), ("memory", "download".to_string())]
    );
}

#[test]
fn no_hook_no_calls_and_clear_stops_tracing() {
    let device = sim();
    let calls = Arc::new(Calls::default());
    device.upload(device.default_stream(), &[1u8]).unwrap();
    device.set_trace(calls.clone(), TraceOptions::default()).unwrap();
    device.upload(device.default_stream(), &[1u8]).unwrap();
    device.clear_trace();
    device.upload(device.default_stream(), &[1u8]).unwrap();
    let calls = calls_settled(&calls, 1);
    assert_eq!(calls.len(), 4, "only the op made while the hook was set is traced");
    assert!(calls.iter().all(|c| c.3.is_none()), "no GPU timing asked for, none given");
}

/// A traced op without a completion that faults the context: the completion thread that sees
/// the fault through the op's backlog classifies it, as it would a completion's, so the device
/// moves to a new context without waiting for the next op to find the poison.
#[test]
fn a_fault_seen_through_the_trace_backlog_poisons_and_rebuilds_the_context() {
    let device = sim();
    let calls = Arc::new(Calls::default());
    device.set_trace(calls.clone(), TraceOptions::default()).unwrap();
    let generation = device.generation();
    LaunchRecorder::new_strict(device.default_stream()).named("faults").launch(&device, |s| s.sim_fault()).unwrap();
    let calls = calls_settled(&calls, 1);
    assert_eq!(calls.len(), 4, "the faulting op's hooks ran");
    assert!(calls[2].3.is_none(), "a failed op has no GPU span");
    assert!(device.generation() > generation, "the fault seen by the backlog's watch rebuilt the context");
}

#[test]
fn a_failed_op_still_gets_all_four_calls() {
    let device = sim();
    let calls = Arc::new(Calls::default());
    device.set_trace(calls.clone(), TraceOptions::default()).unwrap();
    let other = Device::sim(SimConfig::default()).unwrap();
    let foreign = other.upload(other.default_stream(), &[1u8]).unwrap();
    let mut rec = LaunchRecorder::new_permissive(device.default_stream()).named("fails");
    rec.read(&foreign).unwrap();
    let err = rec.launch(&device, |_| Err::<(), _>(Error::QueueFull)).unwrap_err();
    assert!(matches!(err, Error::QueueFull));
    let calls = calls_settled(&calls, 1);
    let kinds: Vec<_> = calls.iter().map(|c| c.1).collect();
    assert_eq!(kinds, ["before_enqueue", "after_enqueue", "before_completion", "after_completion"]);
}

#[test]
fn timeline_json_has_one_group_per_lane_and_no_overlap_on_any_track() {
    let device = Device::sim(SimConfig {
        min_delay: Duration::from_micros(20),
        max_delay: Duration::from_micros(200),
        ..SimConfig::default()
    })
    .unwrap();
    let timeline = Timeline::new();
    device.set_trace(timeline.clone(), TraceOptions { gpu_timing: true }).unwrap();
    let names = ["upload", "compute", "download"];
    let lanes: Vec<_> = names.iter().map(|n| device.lane(n).unwrap()).collect();
    let mut done = Vec::new();
    for round in 0..20u32 {
        for lane in &lanes {
            done.push(lane.submit(move |cx| {
                let buf = cx.device().upload(cx.stream(), &[round; 64])?;
                let mut rec = cx.recorder().named("bump");
                rec.read_write(&buf)?;
                let data = buf.sim_data()?;
                rec.launch(cx.device(), move |s| s.sim_kernel(move || data.lock().iter_mut().for_each(|x| *x += 1)))?;
                cx.keep(buf);
                Ok(())
            }));
        }
    }
    for d in done {
        d.wait().unwrap();
    }
    // Completion hooks of the last ops may still be running on the completion thread.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while timeline.spans().len() < 3 * 20 * 2 * 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let path = std::env::temp_dir().join(format!("cusched-timeline-{}.json", std::process::id()));
    timeline.write_chrome_trace(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let counts = timeline::check_chrome_trace(&json, &names);
    for n in names {
        assert_eq!(counts[&format!("lane {n}/GPU")], 40, "20 rounds x (alloc + bump) GPU spans on lane {n}");
        assert_eq!(counts[&format!("lane {n}/host: {n}")], 40, "host spans on lane {n}'s thread");
    }
    assert_eq!(timeline.dropped(), 0);
}

/// A kernel on `s` that runs until `gate` says go (or two minutes pass).
fn held(device: &Device, s: cusched::StreamId, name: &'static str, gate: mpsc::Receiver<()>) {
    LaunchRecorder::new_strict(s)
        .named(name)
        .launch(device, move |scope| {
            scope.sim_kernel(move || {
                gate.recv_timeout(Duration::from_secs(120)).ok();
            })
        })
        .unwrap();
}

/// The trace backlog watches a stream's ops one event at a time. When the watched op finishes
/// after shutdown closed the completion thread to new registrations, the watch on the next op
/// must stay on that thread (which gives up on it after the watchdog), not block it until the
/// stuck op ends; and every op's completion hooks still run exactly once.
#[test]
fn shutdown_gives_up_on_a_stuck_op_in_the_trace_backlog_after_the_watchdog() {
    let watchdog = Duration::from_millis(200);
    let d =
        Device::sim_with(SimConfig::default(), DeviceConfig { watchdog: Some(watchdog), ..DeviceConfig::default() })
            .unwrap();
    let s = d.new_stream().unwrap();
    // Two streams in use: every commit records its event at once (a lazy one would be
    // recorded when first queried, after `b`, and cover `b` as well).
    d.upload(d.default_stream(), &[0u8]).unwrap();
    d.upload(s, &[0u8]).unwrap();
    let calls = Arc::new(Calls::default());
    d.set_trace(calls.clone(), TraceOptions::default()).unwrap();
    let (release_a, gate_a) = mpsc::channel::<()>();
    let (release_b, gate_b) = mpsc::channel::<()>();
    // `a` is watched at once; `b` waits in the backlog behind that watch.
    held(&d, s, "a", gate_a);
    held(&d, s, "b", gate_b);
    // On the completion thread, shutdown closes registrations there and then; only after that
    // does `a` finish, so the backlog's next watch (on `b`) meets a closed gate.
    let lane = d.lane("x").unwrap();
    let dev = d.clone();
    let (stopped_tx, stopped_rx) = mpsc::channel();
    lane.submit(|_| Ok(())).on_complete(move |_| {
        dev.shutdown().unwrap();
        release_a.send(()).ok();
        stopped_tx.send(()).ok();
    });
    stopped_rx.recv_timeout(Duration::from_secs(60)).expect("the callback runs");
    drop(lane);
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        d.shutdown().unwrap();
        done_tx.send(()).ok();
    });
    let returned = done_rx.recv_timeout(Duration::from_secs(60));
    release_b.send(()).ok();
    assert!(returned.is_ok(), "shutdown waited for the stuck op instead of giving up after the watchdog");
    let calls = calls.0.lock().unwrap().clone();
    let ids: std::collections::BTreeSet<_> = calls.iter().map(|c| c.0).collect();
    assert_eq!(ids.len(), 2, "two traced ops");
    for id in ids {
        let kinds: Vec<_> = calls.iter().filter(|c| c.0 == id).map(|c| c.1).collect();
        assert_eq!(kinds, ["before_enqueue", "after_enqueue", "before_completion", "after_completion"], "op {id}");
    }
}

thread_local! {
    /// Set by a launching thread just before its launch: the flag its kernel raises when it runs.
    static RAN: std::cell::RefCell<Option<Arc<std::sync::atomic::AtomicBool>>> = const { std::cell::RefCell::new(None) };
}

/// Checks that each op's completion hooks run once, in order, and only after its kernel ran.
#[derive(Default)]
struct AfterKernel {
    ran: Mutex<std::collections::HashMap<u64, Arc<std::sync::atomic::AtomicBool>>>,
    calls: Mutex<std::collections::HashMap<u64, Vec<&'static str>>>,
    early: std::sync::atomic::AtomicUsize,
}

impl AfterKernel {
    fn note(&self, op: &OpInfo, what: &'static str) {
        self.calls.lock().unwrap().entry(op.id).or_default().push(what);
    }
}

impl KernelTrace for AfterKernel {
    fn before_enqueue(&self, op: &OpInfo) {
        // Runs on the launching thread, before the kernel is enqueued.
        let flag = RAN.with(|r| r.borrow().clone()).expect("each launch sets its flag");
        self.ran.lock().unwrap().insert(op.id, flag);
        self.note(op, "before_enqueue");
    }
    fn after_enqueue(&self, op: &OpInfo) {
        self.note(op, "after_enqueue");
    }
    fn before_completion(&self, op: &OpInfo, _gpu: Option<GpuSpan>) {
        let ran = self.ran.lock().unwrap().get(&op.id).map(|f| f.load(std::sync::atomic::Ordering::SeqCst));
        if ran != Some(true) {
            self.early.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.note(op, "before_completion");
    }
    fn after_completion(&self, op: &OpInfo, _gpu: Option<GpuSpan>) {
        self.note(op, "after_completion");
    }
}

/// Threads sharing streams hand their traced ops to the backlog out of sequence order: every
/// op's completion hooks still run exactly once, in order, and never before its kernel ran.
#[test]
fn backlog_hooks_run_once_each_and_only_after_the_kernel_under_load() {
    bounded(Duration::from_secs(120), || {
        let d = Device::sim(SimConfig {
            min_delay: Duration::ZERO,
            max_delay: Duration::from_micros(50),
            seed: 11,
            ..SimConfig::default()
        })
        .unwrap();
        let streams = [d.default_stream(), d.new_stream().unwrap()];
        let hook = Arc::new(AfterKernel::default());
        d.set_trace(hook.clone(), TraceOptions::default()).unwrap();
        let (threads, per_thread) = (4, 250);
        std::thread::scope(|sc| {
            for t in 0..threads {
                let d = &d;
                sc.spawn(move || {
                    for i in 0..per_thread {
                        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
                        RAN.with(|r| *r.borrow_mut() = Some(flag.clone()));
                        let s = streams[(t + i) % 2];
                        LaunchRecorder::new_strict(s)
                            .launch(d, move |scope| {
                                scope.sim_kernel(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
                            })
                            .unwrap();
                    }
                });
            }
        });
        let ops = threads * per_thread;
        let done = || {
            let calls = hook.calls.lock().unwrap();
            calls.values().filter(|v| v.len() == 4).count()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while done() < ops && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        d.shutdown().unwrap();
        let calls = hook.calls.lock().unwrap();
        assert_eq!(calls.len(), ops, "every op traced");
        for (id, kinds) in calls.iter() {
            assert_eq!(kinds, &["before_enqueue", "after_enqueue", "before_completion", "after_completion"], "op {id}");
        }
        assert_eq!(hook.early.load(std::sync::atomic::Ordering::SeqCst), 0, "a completion hook ran before its kernel");
    });
}

#[test]
fn traced_ops_waiting_for_their_hooks_do_not_hold_their_fence_events() {
    bounded(Duration::from_secs(60), || {
        let device = sim();
        let (s, other) = (device.new_stream().unwrap(), device.new_stream().unwrap());
        // Two streams commit, so every commit records its event at once.
        LaunchRecorder::new_strict(other).launch(&device, |_| Ok(())).unwrap();
        let calls = Arc::new(Calls::default());
        device.set_trace(calls.clone(), TraceOptions::default()).unwrap();
        let (open, gate) = mpsc::channel();
        held(&device, s, "gate", gate);
        let before = device.events_created();
        // The stream is held, so none of these ops' hooks can run yet: they all wait in the
        // backlog. Their events are free for reuse all the same (nothing but the backlog's
        // newest needs them), so the pool makes only a few.
        const OPS: usize = 200;
        for _ in 0..OPS {
            LaunchRecorder::new_strict(s).named("waiting").launch(&device, |_| Ok(())).unwrap();
        }
        let made = device.events_created() - before;
        open.send(()).unwrap();
        let settled = calls_settled(&calls, OPS + 1);
        assert!(made < 20, "{made} events made for {OPS} traced ops waiting on a held stream");
        let completed = settled.iter().filter(|c| c.1 == "after_completion").count();
        assert_eq!(completed, OPS + 1, "every op's hooks ran once the stream moved");
    });
}
