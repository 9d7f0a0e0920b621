//! Solo mode: while a device has run tracked work on one stream only, its launches of device
//! memory take no per-buffer marks (stream order orders them); the first launch on a second
//! stream (or on another device, through peers) waits for the launches in flight on the first,
//! and every later stream waits on one event, the floor, before it uses memory those launches
//! used. Checked with the simulator's hazard checker and exact results.

mod common;
use common::*;
use cusched::{Device, DeviceConfig, Error, GpuRef, LaunchRecorder, SimConfig, StreamId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

/// A kernel on `s` that sleeps `slow`, then adds `by` to every element of `x`.
fn add(d: &Device, s: StreamId, x: &GpuRef<u32>, by: u32, slow: Duration) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read_write(x)?;
    let m = x.sim_data()?;
    rec.launch(d, |scope| {
        scope.sim_kernel(move || {
            std::thread::sleep(slow);
            m.lock().iter_mut().for_each(|v| *v += by);
        })
    })
}

/// A kernel on `s` that copies `input` into `out`.
fn copy(d: &Device, s: StreamId, out: &GpuRef<u32>, input: &GpuRef<u32>) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s).with_peers();
    rec.read(input)?.write(out)?;
    let (o, i) = (out.sim_data()?, input.sim_data()?);
    rec.launch(d, |scope| {
        scope.sim_kernel(move || {
            let v = i.read().to_vec();
            o.lock().copy_from_slice(&v);
        })
    })
}

fn assert_clean(d: &Device) {
    let hazards = d.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "{hazards:?}");
}

#[test]
fn a_launch_on_the_only_stream_takes_no_mark() {
    // A hand-paired preflight always takes its marks. On a device with several streams, a
    // second launch of the same buffer on the same thread would wait for itself: an error.
    // On the device's only stream, the closure form takes none, so it runs, after the first
    // launch's work by stream order.
    let d = sim();
    let s = d.default_stream();
    let x = d.upload(s, &[1u32; 4]).unwrap();
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read_write(&x).unwrap();
    let first = rec.preflight(&d).unwrap();
    let m = x.sim_data().unwrap();
    first.scope().sim_kernel(move || m.lock().iter_mut().for_each(|v| *v *= 10)).unwrap();
    add(&d, s, &x, 1, Duration::ZERO).expect("a solo launch waits for no mark");
    first.commit().unwrap();
    assert_eq!(x.download(s).unwrap(), vec![11; 4], "stream order: the first launch's work, then the second");
    assert_clean(&d);

    let d = sim();
    let (s, s2) = (d.default_stream(), d.new_stream().unwrap());
    LaunchRecorder::new_strict(s2).launch(&d, |_| Ok(())).unwrap();
    let x = d.upload(s, &[1u32; 4]).unwrap();
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read_write(&x).unwrap();
    let first = rec.preflight(&d).unwrap();
    let err = add(&d, s, &x, 1, Duration::ZERO).expect_err("with several streams the mark holds");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
    first.commit().unwrap();
}

#[test]
fn a_launch_on_the_only_stream_hands_out_no_position_unless_asked() {
    let d = sim();
    let s = d.default_stream();
    let x = d.alloc_zeros::<u32>(s, 4).unwrap();
    let before = d.stats().events;
    for _ in 0..10 {
        add(&d, s, &x, 1, Duration::ZERO).unwrap();
    }
    assert_eq!(d.stats().events, before, "LaunchRecorder::launch hands out no event");
    assert_eq!(d.stats().recorded, 0, "and records none");
    // A host wait still covers them all: it takes its own position.
    assert_eq!(x.download(s).unwrap(), vec![10; 4]);
    assert_clean(&d);
}

#[test]
fn the_second_stream_waits_for_solo_launches_still_in_flight() {
    // A solo launch holds its enqueue open while another thread makes the device's first
    // launch on a second stream, reading the buffer the solo launch writes last. That launch
    // must wait for the solo launch's commit: a floor recorded earlier would not cover the
    // write, and the read would see 0.
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    d.synchronize(s0).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let enqueued = Arc::new(AtomicBool::new(false));
    let solo = {
        let (d, x, enqueued) = (d.clone(), x.clone(), enqueued.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.write(&x).unwrap();
            let m = x.sim_data().unwrap();
            rec.launch(&d, |scope| {
                inside_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                let r = scope.sim_kernel(move || m.lock().fill(7));
                enqueued.store(true, Ordering::SeqCst);
                r
            })
            .unwrap();
        })
    };
    inside_rx.recv().unwrap();
    copy(&d, s1, &y, &x).unwrap();
    assert!(enqueued.load(Ordering::SeqCst), "the second stream's launch ran before the solo launch's enqueue ended");
    solo.join().unwrap();
    assert_eq!(y.download(s1).unwrap(), vec![7; 4]);
    assert_clean(&d);
}

#[test]
fn a_second_stream_from_inside_a_solo_launch_is_would_deadlock_not_a_hang() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let t = std::time::Instant::now();
    let inner = LaunchRecorder::new_strict(s0)
        .launch(&d, |_| Ok(copy(&d, s1, &y, &x)))
        .expect("the outer launch itself is fine");
    let err = inner.expect_err("the inner launch would wait for the outer one");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "the error came after a wait");
    // Outside the enqueue, the second stream works, after the first stream's work.
    copy(&d, s1, &y, &x).unwrap();
    assert_eq!(y.download(s1).unwrap(), vec![1; 4]);
    assert_clean(&d);
}

#[test]
fn only_buffers_solo_launches_used_wait_on_the_floor() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[3u32; 4]).unwrap();
    let waits = d.stats().waits;
    // The second stream's first launches touch only its own new buffer: no wait.
    let z = d.alloc_zeros::<u32>(s1, 4).unwrap();
    add(&d, s1, &z, 1, Duration::ZERO).unwrap();
    assert_eq!(d.stats().waits, waits, "nothing on s1 needed the floor yet");
    // x was uploaded by a solo launch: its state misses that write, and the floor covers it.
    let y = d.alloc_zeros::<u32>(s1, 4).unwrap();
    copy(&d, s1, &y, &x).unwrap();
    assert_eq!(d.stats().waits, waits + 1, "one wait, on the floor");
    copy(&d, s1, &z, &x).unwrap();
    assert_eq!(d.stats().waits, waits + 1, "s1 covers the floor from then on");
    assert_eq!(y.download(s1).unwrap(), vec![3; 4]);
    assert_clean(&d);
}

#[test]
fn many_threads_on_one_stream_then_several_streams_stay_exact() {
    // Four threads add to shared buffers on the only stream (no marks), while a fifth starts
    // using two more streams halfway through (the close waits for whatever is in flight).
    // Every add is a read-modify-write, so a lost ordering shows as a wrong sum as well as a
    // hazard.
    for seed in 0..4u64 {
        let d = Device::sim(SimConfig {
            min_delay: Duration::ZERO,
            max_delay: Duration::from_micros(50),
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        let s0 = d.default_stream();
        let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
        let bufs: Vec<GpuRef<u32>> = (0..3).map(|_| d.alloc_zeros::<u32>(s0, 8).unwrap()).collect();
        d.synchronize(s0).unwrap();
        let start = Arc::new(Barrier::new(5));
        const EACH: u32 = 60;
        let mut threads = Vec::new();
        for t in 0..4u32 {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            threads.push(std::thread::spawn(move || {
                start.wait();
                for i in 0..EACH {
                    add(&d, s0, &bufs[((t + i) % 3) as usize], 1, Duration::ZERO).unwrap();
                }
            }));
        }
        {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            threads.push(std::thread::spawn(move || {
                start.wait();
                std::thread::sleep(Duration::from_millis(2));
                for i in 0..EACH {
                    let s = if i % 2 == 0 { s1 } else { s2 };
                    add(&d, s, &bufs[(i % 3) as usize], 1, Duration::ZERO).unwrap();
                }
            }));
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        let total: u32 = bufs.iter().map(|b| b.download(s0).unwrap()[0]).sum();
        assert_eq!(total, 5 * EACH, "seed {seed}: an add was lost");
        assert_clean(&d);
    }
}

#[test]
fn a_peer_launch_closes_the_other_devices_solo_mode_and_waits_on_its_floor() {
    let mut g = Device::sim_group(
        SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(200), seed: 3, ..SimConfig::default() },
        2,
    )
    .unwrap();
    let (b, a) = (g.pop().unwrap(), g.pop().unwrap());
    let (sa, sb) = (a.default_stream(), b.default_stream());
    let x = a.upload(sa, &[0u32; 4]).unwrap();
    // Solo writes on a's only stream, the last one slow.
    add(&a, sa, &x, 1, Duration::ZERO).unwrap();
    add(&a, sa, &x, 1, Duration::from_millis(30)).unwrap();
    let y = b.alloc_zeros::<u32>(sb, 4).unwrap();
    copy(&b, sb, &y, &x).unwrap();
    assert_eq!(y.download(sb).unwrap(), vec![2; 4], "the peer read ran before a's solo writes");
    assert!(a.sim_hazards().unwrap().is_empty());
    assert!(b.sim_hazards().unwrap().is_empty());
}

/// The wait bound of the devices below, short so that a stall shows as a failure quickly.
const TIMEOUT: Duration = Duration::from_secs(2);

fn short_timeout() -> Device {
    Device::sim_with(
        SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(30), seed: 7, ..SimConfig::default() },
        DeviceConfig { preflight_timeout: TIMEOUT, ..DeviceConfig::default() },
    )
    .unwrap()
}

#[test]
fn closing_solo_mode_waits_for_nothing_a_launch_does_not_use() {
    // T is inside a solo launch when C makes the device's first launch on s2, on a buffer of
    // its own: C neither waits for T nor blocks T, and T's own use of solo memory on s1 from
    // inside its launch is WouldDeadlock at once, not after C's wait.
    let d = short_timeout();
    let (s0, s1, s2) = (d.default_stream(), d.new_stream().unwrap(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    d.synchronize(s0).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let t = {
        let (d, x, y) = (d.clone(), x.clone(), y.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.read(&x).unwrap();
            rec.launch(&d, |_| {
                inside_tx.send(()).unwrap();
                closed_rx.recv().unwrap();
                let t0 = Instant::now();
                Ok((copy(&d, s1, &y, &x), t0.elapsed()))
            })
            .unwrap()
        })
    };
    inside_rx.recv().unwrap();
    let t0 = Instant::now();
    let z = d.alloc_zeros::<u32>(s2, 4);
    let closer_took = t0.elapsed();
    closed_tx.send(()).unwrap();
    let (inner, inner_took) = t.join().unwrap();
    assert!(z.is_ok(), "the first launch on s2 failed after {closer_took:?}: {:?}", z.err());
    assert!(closer_took < TIMEOUT / 2, "the first launch on s2 waited {closer_took:?}");
    assert!(matches!(inner, Err(Error::WouldDeadlock { .. })), "{inner:?}");
    assert!(inner_took < TIMEOUT / 2, "the WouldDeadlock came after {inner_took:?}");
    assert_clean(&d);
}

#[test]
fn a_helper_thread_inside_a_solo_launch_may_use_new_memory_on_another_stream() {
    // The enclosing launch cannot commit until its helper is done, so the helper's launch
    // must not wait for it: it uses no memory a solo launch used, and does not.
    let d = short_timeout();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let t0 = Instant::now();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.read(&x).unwrap();
    let inner = rec
        .launch(&d, |_| {
            Ok(std::thread::scope(|sc| {
                sc.spawn(|| -> cusched::Result<Vec<u32>> {
                    let a = d.upload(s1, &[5u32; 4])?;
                    let b = d.alloc_zeros::<u32>(s1, 4)?;
                    copy(&d, s1, &b, &a)?;
                    b.download(s1)
                })
                .join()
                .unwrap()
            }))
        })
        .unwrap();
    let took = t0.elapsed();
    assert_eq!(inner.unwrap(), vec![5; 4]);
    assert!(took < TIMEOUT / 2, "the helper waited {took:?}");
    assert_clean(&d);
}

#[test]
fn a_helper_thread_inside_a_solo_launch_using_solo_memory_elsewhere_fails_bounded() {
    // The documented limit: a use on another stream of memory a solo launch used waits for
    // every solo launch in flight when solo mode closed (it cannot tell which buffers they
    // use), here for the launch that waits for it. The wait ends at the preflight timeout
    // with BufferBusy; it never hangs.
    let d = short_timeout();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let a = d.upload(s0, &[5u32; 4]).unwrap();
    let b = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let t0 = Instant::now();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.read(&x).unwrap();
    let inner =
        rec.launch(&d, |_| Ok(std::thread::scope(|sc| sc.spawn(|| copy(&d, s1, &b, &a)).join().unwrap()))).unwrap();
    let took = t0.elapsed();
    assert!(matches!(inner, Err(Error::BufferBusy { .. })), "{inner:?}");
    assert!(took < TIMEOUT * 3, "the wait was not bounded: {took:?}");
    // Once the enclosing launch committed, the same use works.
    copy(&d, s1, &b, &a).unwrap();
    assert_eq!(b.download(s1).unwrap(), vec![5; 4]);
    assert_clean(&d);
}

#[test]
fn closing_solo_mode_while_holding_a_mark_a_solo_launch_waits_for_does_not_stall() {
    // C holds a hand-paired launch on s0 (a mark on `b`); T's solo launch waits, inside its
    // enqueue, for that mark. C's first launch on s1 touches neither, so it must not wait for
    // T (which waits for C).
    let d = short_timeout();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let b = d.alloc_zeros::<u32>(s0, 4).unwrap();
    d.synchronize(s0).unwrap();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.write(&b).unwrap();
    let held = rec.preflight(&d).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let t = {
        let (d, x, b) = (d.clone(), x.clone(), b.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.read(&x).unwrap();
            rec.launch(&d, |_| {
                inside_tx.send(()).unwrap();
                let mut marked = LaunchRecorder::new_strict(s0);
                marked.write(&b).unwrap();
                Ok(marked.preflight(&d).and_then(|p| p.commit()))
            })
            .unwrap()
        })
    };
    inside_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let z = d.alloc_zeros::<u32>(s1, 4);
    let took = t0.elapsed();
    held.commit().unwrap();
    t.join().unwrap().unwrap();
    assert!(z.is_ok(), "the first launch on s1 failed after {took:?}: {:?}", z.err());
    assert!(took < TIMEOUT / 2, "the first launch on s1 waited {took:?}");
    assert_clean(&d);
}
