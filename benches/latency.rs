//! Completion latency: from submitting one small kernel to the waiting thread running again,
//! through `Completion::wait`, `on_complete`, a future polled by a minimal executor, and a lane
//! job, against a raw cudarc launch plus `cuStreamSynchronize`. Back to back, and after the
//! threads have gone idle (parked), where the floor is waking a parked thread.
//!
//! `bench-latency [reps] [--spin=µs]` on a GPU; `bench-latency --sim` (or no GPU) runs the
//! cusched paths on the simulated backend against a simulated launch plus `Device::synchronize`.
//! `--spin` sets `DeviceConfig::spin` (default 50 µs): how long the completion thread polls
//! after each registration or delivery before it backs off.
//!
//! It ends with the goals (a callback or future at most 3 µs over raw back to back; after idle,
//! a callback, a future and a lane submit + wait at most one thread wake, half the channel
//! ping-pong, over raw after the same idle; the lane path also against its measured floor, the
//! same raw launch run by a worker thread parked as long as the lane's, within 1.10x; and the
//! future's floor back to back: the callback's delivery plus the time a parked executor thread
//! takes from its unpark to running, which raw synchronize, spinning on the calling thread,
//! does not pay), a lane job after idle by stage, and the completion thread's CPU time: per op in each section, and over half a second of idling, when
//! it should be parked (read from `/proc/self/task/<tid>/schedstat`, Linux only).

mod common;

use common::*;
use cusched::cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cusched::{Completion, Device, DeviceConfig, GpuRef, LaunchRecorder, Result as CuResult, SimConfig, StreamId};
use std::time::{Duration, Instant};

const N: u32 = 256;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One small op on `s` whose completion covers it: the typed launch on CUDA, a recorder around
/// a simulated kernel on the simulator.
fn op(
    device: &Device,
    kernel: Option<&cusched::Kernel>,
    s: StreamId,
    a: &GpuRef<f32>,
    c: &GpuRef<f32>,
) -> CuResult<Completion<()>> {
    match kernel {
        Some(k) => {
            let launch = k.launch(device, s, LaunchConfig::for_num_elems(N)).read(a).read(a).write(c).scalar(N);
            // SAFETY: 1. add3 reads its first two parameters (both `a`) and writes the third
            // (`c`), as declared; 2. it touches indices below N, the length of both buffers;
            // 3. the parameters are three float pointers and an unsigned, as declared.
            unsafe { launch.enqueue() }
        }
        // The recorder path returns no completion; a job on the stream covers the kernel.
        None => Ok(cusched::Handles::new(device, s)?.run(|cx| {
            let mut rec = cx.recorder();
            rec.read(a)?.write(c)?;
            let (x, y) = (a.sim_data()?, c.sim_data()?);
            rec.launch(cx.device(), move |scope| scope.sim_kernel(move || y.lock().copy_from_slice(&x.read())))
        })),
    }
}

struct Row {
    label: &'static str,
    samples: Vec<f64>,
}

/// On-CPU time of this process's completion thread (named `cusched-completion`, which the
/// kernel truncates to 15 bytes), from its schedstat; `None` before it started or off Linux.
fn completion_thread_cpu() -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with("cusched-complet") {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
            return Some(Duration::from_nanos(ns));
        }
    }
    None
}

fn cpu_us(d: Option<Duration>) -> String {
    d.map_or_else(|| "n/a".into(), |d| us(d.as_secs_f64()))
}

/// One goal row: `ours` against `budget`.
fn goal(what: &str, ours: f64, budget: f64, how: &str) {
    let verdict = if ours <= budget { "met".to_string() } else { format!("missed by {}", us(ours - budget)) };
    println!("| {what} | {} | {} ({how}) | {verdict} |", us(ours), us(budget));
}

fn main() -> Res<()> {
    let reps: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut config = DeviceConfig::default();
    if let Some(v) = std::env::args().find_map(|a| a.strip_prefix("--spin=").map(str::to_owned)) {
        config.spin = Duration::from_micros(v.parse()?);
    }
    println!("completion spin window (DeviceConfig::spin): {}\n", us(config.spin.as_secs_f64()));
    let gpu = if sim_requested() { None } else { Device::open_with(0, config.clone()).ok() };
    let device = match &gpu {
        Some(d) => d.clone(),
        None => {
            println!("running on the simulated backend (no GPU, or --sim): the baseline is a simulated launch plus synchronize\n");
            Device::sim_with(SimConfig { max_delay: Duration::ZERO, ..SimConfig::default() }, config)?
        }
    };
    let s = device.new_stream()?;
    let kernel = if device.is_simulated() { None } else { Some(device.compile(ADD_SRC, &[])?.kernel("add3")?) };
    let a = device.alloc_zeros::<f32>(s, N as usize)?;
    let c = device.alloc_zeros::<f32>(s, N as usize)?;
    let lane = device.lane("latency")?;
    // The raw baseline: its own context object with tracking off, its own stream.
    let raw = match &gpu {
        Some(_) => {
            let ctx = CudaContext::new(0)?;
            // SAFETY: the baseline's slices are used by its own launches on one stream only.
            unsafe { ctx.disable_event_tracking() };
            let st = ctx.new_stream()?;
            let f = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(ADD_SRC)?)?.load_function("add3")?;
            let (ra, rc) = (st.alloc_zeros::<f32>(N as usize)?, st.alloc_zeros::<f32>(N as usize)?);
            Some((st, f, ra, rc))
        }
        None => None,
    };

    // Per section: the medians of raw, on_complete, future, the ping-pong and the lane, and the
    // completion thread's CPU time per cusched op.
    let mut sections: Vec<([f64; 7], Option<Duration>)> = Vec::new();
    for (idle, title) in
        [(Duration::ZERO, "back to back"), (Duration::from_millis(2), "after 2 ms idle (threads parked)")]
    {
        let cpu_before = completion_thread_cpu();
        let reps = if idle.is_zero() { reps } else { reps.min(300) };
        let mut rows: Vec<Row> = [
            "raw launch + synchronize",
            "cusched wait()",
            "cusched on_complete",
            "cusched future (block_on)",
            "cusched lane submit + wait()",
            "wake floor: channel ping-pong",
            "wake floor: unpark to running (parked thread)",
            "raw on a parked worker thread, caller spinning",
        ]
        .into_iter()
        .map(|label| Row { label, samples: Vec::with_capacity(reps) })
        .collect();
        let (ping_tx, ping_rx) = crossbeam_channel::bounded::<Instant>(1);
        let (pong_tx, pong_rx) = crossbeam_channel::bounded::<Instant>(1);
        let echo = std::thread::spawn(move || {
            while let Ok(t) = ping_rx.recv() {
                if pong_tx.send(t).is_err() {
                    break;
                }
            }
        });
        // Unparks the measuring thread on request and says when: the time from that unpark to
        // the parked thread running again is what a future's executor pays on top of the
        // completion thread's delivery (its waker unparks a parked thread).
        let waiter = std::thread::current();
        let (unpark_tx, unpark_rx) = crossbeam_channel::bounded::<()>(1);
        let (unparked_tx, unparked_rx) = crossbeam_channel::bounded::<Instant>(1);
        let unparker = std::thread::spawn(move || {
            while unpark_rx.recv().is_ok() {
                // Let the requester reach `park` first.
                std::thread::sleep(Duration::from_micros(200));
                // Sent before the unpark, so that the woken thread finds it.
                if unparked_tx.send(Instant::now()).is_err() {
                    break;
                }
                waiter.unpark();
            }
        });
        // Back to back means the same path repeated with nothing in between, so each path runs
        // in blocks of consecutive reps (a lane worker or the completion thread stays as warm as
        // in a loop of that path alone); the paths take turns block by block, which spreads any
        // drift over all of them. The first rep of a block, and the first two rounds, warm up.
        // The lane path's own floor: the same raw launch + synchronize, run by a worker thread
        // parked on a channel (its own stream, as a lane has), for a caller that spins on the
        // reply as a lane job's waiter does. After idle it pays the wake of a thread idle as
        // long as the lane worker, which the ping-pong (one deep wake, one shallow) halves.
        let (work_tx, work_rx) = crossbeam_channel::bounded::<()>(1);
        let (done_tx, done_rx) = crossbeam_channel::bounded::<bool>(1);
        let worker = {
            let raw_worker = raw.as_ref().map(|(st, f, _, _)| (st.context().clone(), f.clone()));
            let (device, a, c) = (device.clone(), a.clone(), c.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let own = match raw_worker {
                    Some((ctx, f)) => {
                        let st = ctx.new_stream().map_err(|e| e.to_string())?;
                        let alloc = || st.alloc_zeros::<f32>(N as usize).map_err(|e| e.to_string());
                        let (ra, rc) = (alloc()?, alloc()?);
                        Some((st, f, ra, rc))
                    }
                    None => None,
                };
                let ws = device.new_stream().map_err(|e| e.to_string())?;
                while work_rx.recv().is_ok() {
                    let ok = match &own {
                        Some((st, f, ra, rc)) => {
                            let mut l = st.launch_builder(f);
                            let mut rc = rc.clone();
                            l.arg(ra).arg(ra).arg(&mut rc).arg(&N);
                            // SAFETY: `add3` takes three float pointers and a length; N floats each.
                            unsafe { l.launch(LaunchConfig::for_num_elems(N)) }.is_ok() && st.synchronize().is_ok()
                        }
                        None => {
                            let sim = || -> CuResult<()> {
                                let mut rec = LaunchRecorder::new_strict(ws);
                                rec.read(&a)?.write(&c)?;
                                let (x, y) = (a.sim_data()?, c.sim_data()?);
                                rec.launch(&device, move |sc| {
                                    sc.sim_kernel(move || y.lock().copy_from_slice(&x.read()))
                                })?;
                                device.synchronize(ws)
                            };
                            sim().is_ok()
                        }
                    };
                    if done_tx.send(ok).is_err() {
                        break;
                    }
                }
                Ok(())
            })
        };
        let block = if idle.is_zero() { 11 } else { 1 };
        let warm_rounds = if idle.is_zero() { 2 } else { 20 };
        let rounds = warm_rounds + reps.div_ceil(if block > 1 { block - 1 } else { 1 });
        for round in 0..rounds {
            for (i, row) in rows.iter_mut().enumerate() {
                for rep_in_block in 0..block {
                    let counted = round >= warm_rounds && (block == 1 || rep_in_block > 0) && row.samples.len() < reps;
                    if !idle.is_zero() {
                        std::thread::sleep(idle);
                    }
                    let t = Instant::now();
                    match i {
                        0 => match &raw {
                            Some((st, f, ra, rc)) => {
                                let mut l = st.launch_builder(f);
                                let mut rc = rc.clone();
                                l.arg(ra).arg(ra).arg(&mut rc).arg(&N);
                                // SAFETY: `add3` takes three float pointers and a length; N floats each.
                                unsafe { l.launch(LaunchConfig::for_num_elems(N)) }?;
                                st.synchronize()?;
                            }
                            None => {
                                let mut rec = LaunchRecorder::new_strict(s);
                                rec.read(&a)?.write(&c)?;
                                let (x, y) = (a.sim_data()?, c.sim_data()?);
                                rec.launch(&device, move |sc| {
                                    sc.sim_kernel(move || y.lock().copy_from_slice(&x.read()))
                                })?;
                                device.synchronize(s)?;
                            }
                        },
                        1 => op(&device, kernel.as_ref(), s, &a, &c)?.wait()?,
                        2 => {
                            let (tx, rx) = crossbeam_channel::bounded(1);
                            op(&device, kernel.as_ref(), s, &a, &c)?.on_complete(move |r| {
                                let _ = tx.send((Instant::now(), r.is_ok()));
                            });
                            let (at, ok) = rx.recv()?;
                            if !ok {
                                return Err("on_complete delivered an error".into());
                            }
                            if counted {
                                row.samples.push(at.duration_since(t).as_secs_f64());
                            }
                            continue;
                        }
                        3 => block_on(op(&device, kernel.as_ref(), s, &a, &c)?)?,
                        4 => {
                            let (k, a, c) = (kernel.clone(), a.clone(), c.clone());
                            lane.submit(move |cx| op(cx.device(), k.as_ref(), cx.stream(), &a, &c).map(drop)).wait()?
                        }
                        5 => {
                            ping_tx.send(t)?;
                            pong_rx.recv()?;
                        }
                        7 => {
                            work_tx.send(())?;
                            let ok = loop {
                                match done_rx.try_recv() {
                                    Ok(ok) => break ok,
                                    Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
                                    Err(e) => return Err(e.into()),
                                }
                            };
                            if !ok {
                                return Err("the raw worker's launch failed".into());
                            }
                        }
                        _ => {
                            unpark_tx.send(())?;
                            // A spurious return from `park` is possible: park until the unpark
                            // has been sent.
                            let at = loop {
                                std::thread::park();
                                if let Ok(at) = unparked_rx.try_recv() {
                                    break at;
                                }
                            };
                            if counted {
                                row.samples.push(Instant::now().duration_since(at).as_secs_f64());
                            }
                            continue;
                        }
                    }
                    if counted {
                        row.samples.push(t.elapsed().as_secs_f64());
                    }
                }
            }
        }
        drop(ping_tx);
        let _ = echo.join();
        drop(unpark_tx);
        let _ = unparker.join();
        drop(work_tx);
        match worker.join() {
            Ok(r) => r.map_err(|e| format!("the raw worker: {e}"))?,
            Err(_) => return Err("the raw worker panicked".into()),
        }
        // The thread starts on the first registration, so the first section may begin before it.
        let cpu = completion_thread_cpu()
            .map(|after| after.saturating_sub(cpu_before.unwrap_or_default()) / (4 * (rounds * block) as u32));
        println!("### {title}: median (p99) of {reps}\n");
        println!("| path | latency | vs raw |");
        println!("| --- | --- | --- |");
        let base = median(&mut rows[0].samples.clone());
        for row in &mut rows {
            let m = median(&mut row.samples);
            let p99 = percentile(&mut row.samples, 99.0);
            println!("| {} | {} ({}) | {} |", row.label, us(m), us(p99), ratio(m, base));
        }
        println!("\ncompletion thread CPU per cusched op: {}\n", cpu_us(cpu));
        let m = |i: usize| median(&mut rows[i].samples.clone());
        sections.push(([m(0), m(2), m(3), m(5), m(4), m(6), m(7)], cpu));
    }
    // Where a lane job's time goes after idle: from submit to the job starting on the worker
    // (the worker's wake), the job's body (the launch and its commit), from the job's end to
    // the caller seeing it committed (a spinning caller sees it at once; a parked one pays a
    // second wake), and from there to `wait` returning (the GPU's own part, as in raw).
    let stages = {
        let reps = reps.min(300);
        let mut stages: [Vec<f64>; 4] = Default::default();
        for rep in 0..reps + 20 {
            std::thread::sleep(Duration::from_millis(2));
            let marks = std::sync::Arc::new(std::sync::Mutex::new(None));
            let (k, a, c, m) = (kernel.clone(), a.clone(), c.clone(), marks.clone());
            let t0 = Instant::now();
            let done = lane.submit(move |cx| {
                let started = Instant::now();
                let r = op(cx.device(), k.as_ref(), cx.stream(), &a, &c).map(drop);
                *m.lock().unwrap_or_else(|e| e.into_inner()) = Some((started, Instant::now()));
                r
            });
            done.wait_committed()?;
            let seen = Instant::now();
            done.wait()?;
            let end = Instant::now();
            let Some((started, finished)) = *marks.lock().unwrap_or_else(|e| e.into_inner()) else {
                return Err("the lane job did not run".into());
            };
            if rep >= 20 {
                let span = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
                for (v, x) in stages.iter_mut().zip([
                    span(t0, started),
                    span(started, finished),
                    span(finished, seen),
                    span(seen, end),
                ]) {
                    v.push(x);
                }
            }
        }
        stages.map(|mut v| median(&mut v))
    };
    println!("### lane submit + wait after 2 ms idle, by stage: medians\n");
    println!("| stage | latency |");
    println!("| --- | --- |");
    for (what, x) in [
        "submit → job starts on the worker (one wake)",
        "job body (launch and commit)",
        "job end → caller sees it committed",
        "committed → wait returns (the GPU)",
    ]
    .into_iter()
    .zip(stages)
    {
        println!("| {what} | {} |", us(x));
    }
    println!();
    let idle_before = completion_thread_cpu();
    std::thread::sleep(Duration::from_millis(500));
    let idle_cpu = completion_thread_cpu().zip(idle_before).map(|(a, b)| a.saturating_sub(b));
    println!("### goals\n");
    println!("| goal | measured | budget | |");
    println!("| --- | --- | --- | --- |");
    let ([raw, cb, fut, _, lane, unpark, _], _) = sections[0];
    goal("on_complete, back to back", cb, raw + 3e-6, "raw + 3 µs");
    goal("future, back to back", fut, raw + 3e-6, "raw + 3 µs");
    goal("lane submit + wait, back to back", lane, raw * 1.10, "1.10x raw");
    // A future's executor thread is parked and must be woken, which raw synchronize (spinning on
    // the calling thread) never pays: its floor is the callback's delivery plus one wake.
    goal("future, back to back, against its floor", fut, cb + unpark, "on_complete + unpark to running");
    let ([raw, cb, fut, ping, lane, _, worker], _) = sections[1];
    goal("on_complete, after 2 ms idle", cb, raw + ping / 2.0, "raw after idle + one wake");
    goal("future, after 2 ms idle", fut, raw + ping / 2.0, "raw after idle + one wake");
    // The worker is parked and must be woken: that is the one wake; the caller must not pay a
    // second one waiting for the job to commit.
    goal("lane submit + wait, after 2 ms idle", lane, raw + ping / 2.0, "raw after idle + one wake");
    // The same with the wake the lane pays measured, not estimated: the raw launch run by a
    // thread parked as long as the lane worker, within the back-to-back lane budget over it.
    goal("lane submit + wait, after 2 ms idle, against its floor", lane, worker * 1.10, "1.10x raw on a parked worker");
    println!("\ncompletion thread CPU over 500 ms idle (parked: ~0): {}", cpu_us(idle_cpu));
    Ok(())
}
