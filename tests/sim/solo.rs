//! Solo mode: while a device has run tracked work on one stream only, its launches of device
//! memory take no per-buffer marks (stream order orders them); the first launch on a second
//! stream (or on another device, through peers) ends solo mode, and a use elsewhere of memory
//! those launches used waits for the conflicting ones still in flight, then on an event of the
//! first stream that covers them (the floor, once all have committed). Checked with the
//! simulator's hazard checker and exact results.

use crate::common;
use crate::common::*;
use cusched::{Access, Device, DeviceConfig, Error, GpuRef, LaunchRecorder, SimConfig, StreamId};
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
fn a_conflicting_use_elsewhere_from_inside_a_solo_launch_is_would_deadlock_not_a_hang() {
    // The outer solo launch writes x; from inside its enqueue, a read of x on s1 would have to
    // wait for it, as it would for the outer launch's mark on x with several streams.
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let t = std::time::Instant::now();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.write(&x).unwrap();
    let inner = rec.launch(&d, |_| Ok(copy(&d, s1, &y, &x))).expect("the outer launch itself is fine");
    let err = inner.expect_err("the inner launch would wait for the outer one");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "the error came after a wait");
    // Outside the enqueue, the second stream works, after the first stream's work.
    copy(&d, s1, &y, &x).unwrap();
    assert_eq!(y.download(s1).unwrap(), vec![1; 4]);
    assert_clean(&d);
}

#[test]
fn a_use_elsewhere_from_inside_a_solo_launch_that_does_not_conflict_runs() {
    // The outer solo launch reads x and writes z; from inside its enqueue, a read of x into y
    // on s1 conflicts with neither: it runs at once, ordered after x's upload.
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[4u32; 4]).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let z = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.read(&x).unwrap().write(&z).unwrap();
    let inner = rec.launch(&d, |_| Ok(copy(&d, s1, &y, &x))).unwrap();
    inner.expect("a use that conflicts with no launch in flight waits for none");
    assert_eq!(y.download(s1).unwrap(), vec![4; 4]);
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

#[test]
fn closing_solo_mode_waits_for_nothing_a_launch_does_not_use() {
    // T is inside a solo launch (reading x, writing y) when C makes the device's first launch
    // on s2, on a buffer of its own: C neither waits for T nor blocks T, and T's own write of
    // y on s1 from inside its launch is WouldDeadlock at once, not after C's wait.
    let d = short_timeout(TIMEOUT);
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
            rec.read(&x).unwrap().write(&y).unwrap();
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
    let d = short_timeout(TIMEOUT);
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
fn a_helper_thread_inside_a_solo_launch_using_other_solo_memory_elsewhere_runs() {
    // a and b were used by solo launches that have committed; the enclosing launch uses
    // neither, so the helper's launch on s1 waits for nothing that waits for it.
    let d = short_timeout(TIMEOUT);
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
    inner.unwrap();
    assert!(took < TIMEOUT / 2, "the helper waited {took:?}");
    assert_eq!(b.download(s1).unwrap(), vec![5; 4]);
    assert_clean(&d);
}

#[test]
fn a_helper_thread_inside_a_solo_launch_using_its_memory_elsewhere_fails_bounded() {
    // The enclosing solo launch writes x and waits for its helper, whose read of x on s1 must
    // wait for that launch: as with its mark on x with several streams, the wait ends at the
    // preflight timeout with BufferBusy; it never hangs.
    let d = short_timeout(TIMEOUT);
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let b = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let t0 = Instant::now();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.write(&x).unwrap();
    let inner =
        rec.launch(&d, |_| Ok(std::thread::scope(|sc| sc.spawn(|| copy(&d, s1, &b, &x)).join().unwrap()))).unwrap();
    let took = t0.elapsed();
    assert!(matches!(inner, Err(Error::BufferBusy { .. })), "{inner:?}");
    assert!(took < TIMEOUT * 3, "the wait was not bounded: {took:?}");
    // Once the enclosing launch committed, the same use works.
    copy(&d, s1, &b, &x).unwrap();
    assert_eq!(b.download(s1).unwrap(), vec![1; 4]);
    assert_clean(&d);
}

/// What the two tests below start from: this thread holds a hand-paired write of `b` on s0,
/// and thread `t` is inside a solo launch on s0 (reading `x`) whose enqueue waits for that
/// mark.
struct HeldMark {
    d: Device,
    s1: StreamId,
    x: GpuRef<u32>,
    held: cusched::Preflighted,
    t: std::thread::JoinHandle<cusched::Result<()>>,
}

fn held_mark_waited_on_by_a_solo_launch() -> HeldMark {
    let d = short_timeout(TIMEOUT);
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
    HeldMark { d, s1, x, held, t }
}

#[test]
fn closing_solo_mode_while_holding_a_mark_a_solo_launch_waits_for_does_not_stall() {
    // C holds a hand-paired launch on s0 (a mark on `b`); T's solo launch waits, inside its
    // enqueue, for that mark. C's first launch on s1 touches neither, so it must not wait for
    // T (which waits for C).
    let HeldMark { d, s1, held, t, .. } = held_mark_waited_on_by_a_solo_launch();
    let t0 = Instant::now();
    let z = d.alloc_zeros::<u32>(s1, 4);
    let took = t0.elapsed();
    held.commit().unwrap();
    t.join().unwrap().unwrap();
    assert!(z.is_ok(), "the first launch on s1 failed after {took:?}: {:?}", z.err());
    assert!(took < TIMEOUT / 2, "the first launch on s1 waited {took:?}");
    assert_clean(&d);
}

/// C holds a hand-paired write of `b`; T's solo launch reads `x` and, inside its enqueue,
/// preflights `b` (waits for C). C then reads `x` on a second stream. Read/read never
/// conflicts: C must not wait for T (which waits for C), as with marks it would not.
#[test]
fn a_read_on_a_second_stream_while_holding_a_mark_does_not_cycle_through_the_floor() {
    let HeldMark { d, s1, x, held, t } = held_mark_waited_on_by_a_solo_launch();
    let y = d.alloc_zeros::<u32>(s1, 4).unwrap();
    let t0 = Instant::now();
    let r = copy(&d, s1, &y, &x);
    let took = t0.elapsed();
    held.commit().unwrap();
    let inner = t.join().unwrap();
    assert!(r.is_ok() && inner.is_ok(), "read on s1: {r:?} after {took:?}; T's inner preflight: {inner:?}");
}

/// A kernel on `s` (of `d`, with peers) that sleeps `slow`, then adds `by` to every element.
fn add_peer(d: &Device, s: StreamId, x: &GpuRef<u32>, by: u32, slow: Duration) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s).with_peers();
    rec.read_write(x)?;
    let m = x.sim_data()?;
    rec.launch(d, |scope| {
        if !slow.is_zero() {
            std::thread::sleep(slow);
        }
        scope.sim_kernel(move || m.lock().iter_mut().for_each(|v| *v += by))
    })
}

/// A kernel on `s` that adds `from` into `x`, element by element.
fn add_from(d: &Device, s: StreamId, x: &GpuRef<u32>, from: &GpuRef<u32>) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read_write(x)?.read(from)?;
    let (m, f) = (x.sim_data()?, from.sim_data()?);
    rec.launch(d, |scope| {
        scope.sim_kernel(move || {
            let v = f.read().to_vec();
            m.lock().iter_mut().zip(v).for_each(|(a, b)| *a = a.wrapping_add(b));
        })
    })
}

/// A kernel on `s` that adds one to every element of `x`.
fn add_one(d: &Device, s: StreamId, x: &GpuRef<u32>) -> cusched::Result<()> {
    add(d, s, x, 1, Duration::ZERO)
}

/// A random mix: threads on the solo stream (slow enqueues), a thread that starts using other
/// streams, allocating and dropping buffers, and a peer device reading.
#[test]
fn solo_launches_frees_a_second_stream_and_a_peer_device_at_random_stay_exact() {
    use std::sync::{Arc, Barrier};
    for seed in 0..12u64 {
        let mut g = Device::sim_group(
            SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(80), seed, ..SimConfig::default() },
            2,
        )
        .unwrap();
        let (p, d) = (g.pop().unwrap(), g.pop().unwrap());
        let s0 = d.default_stream();
        let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
        let ps = p.default_stream();
        let bufs: Vec<GpuRef<u32>> = (0..4).map(|_| d.alloc_zeros::<u32>(s0, 8).unwrap()).collect();
        let start = Arc::new(Barrier::new(5));
        let mut th = Vec::new();
        for t in 0..3u64 {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            th.push(std::thread::spawn(move || {
                let mut r = common::Rng::seeded(seed * 31 + t);
                start.wait();
                for _ in 0..40 {
                    let i = r.below(4) as usize;
                    let slow = Duration::from_micros(r.below(400));
                    // Solo launches (no peers): no marks while solo mode is open.
                    add(&d, s0, &bufs[i], 1, slow).unwrap();
                    // Short-lived temporaries on the solo stream, dropped at once (freed on s0).
                    let tmp = d.alloc_zeros::<u32>(s0, 8).unwrap();
                    add(&d, s0, &tmp, 1, Duration::ZERO).unwrap();
                    add_from(&d, s0, &bufs[i], &tmp).unwrap();
                }
            }));
        }
        {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            th.push(std::thread::spawn(move || {
                let mut r = common::Rng::seeded(seed * 77);
                start.wait();
                std::thread::sleep(Duration::from_micros(r.below(3000)));
                for k in 0..40 {
                    let s = if k % 2 == 0 { s1 } else { s2 };
                    let i = r.below(4) as usize;
                    add(&d, s, &bufs[i], 1, Duration::ZERO).unwrap();
                }
            }));
        }
        {
            let (p, bufs, start) = (p.clone(), bufs.clone(), start.clone());
            th.push(std::thread::spawn(move || {
                let mut r = common::Rng::seeded(seed * 91);
                start.wait();
                std::thread::sleep(Duration::from_micros(r.below(3000)));
                for _ in 0..20 {
                    let i = r.below(4) as usize;
                    add_peer(&p, ps, &bufs[i], 1, Duration::ZERO).unwrap();
                }
            }));
        }
        th.into_iter().for_each(|t| t.join().unwrap());
        let total: u32 = bufs.iter().map(|b| b.download(s0).unwrap()[0]).sum();
        assert_eq!(total, 3 * 40 * 2 + 40 + 20, "seed {seed}");
        let (h1, h2) = (d.sim_hazards().unwrap(), p.sim_hazards().unwrap());
        assert!(h1.is_empty() && h2.is_empty(), "seed {seed}: {h1:?} {h2:?}");
    }
}

/// After a nested solo launch of a second device has committed, a wait for that device's
/// solo launches, none of which this thread holds, must wait rather than be refused as
/// WouldDeadlock.
#[test]
fn a_committed_nested_solo_launch_of_another_device_leaves_no_false_would_deadlock() {
    let mut g = Device::sim_group(
        SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(30), seed: 1, ..SimConfig::default() },
        2,
    )
    .unwrap();
    let (p, d) = (g.pop().unwrap(), g.pop().unwrap());
    let s0 = d.default_stream();
    let (ps0, ps1) = (p.default_stream(), p.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let z = p.upload(ps0, &[2u32; 4]).unwrap();
    let w = p.alloc_zeros::<u32>(ps0, 4).unwrap();
    p.synchronize(ps0).unwrap();
    // U holds a solo launch on p's ps0 for 300 ms.
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let u = {
        let (p, w) = (p.clone(), w.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(ps0);
            rec.write(&w).unwrap();
            rec.launch(&p, |_| {
                in_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .unwrap()
        })
    };
    in_rx.recv().unwrap();
    let y = p.alloc_zeros::<u32>(ps0, 4).unwrap(); // a solo launch on p, committed at once
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.read(&x).unwrap();
    let inner = rec
        .launch(&d, |_| {
            // A solo launch on p (nested, committed), then p's second stream reads z.
            add_one(&p, ps0, &y)?;
            Ok(copy(&p, ps1, &y, &z))
        })
        .unwrap();
    u.join().unwrap();
    assert!(inner.is_ok(), "{inner:?}");
}

/// A kernel on `s` using `x` with `access`; sleeps `slow` in the enqueue closure first.
fn op(d: &Device, s: StreamId, x: &GpuRef<u32>, access: Access, slow: Duration) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.access(x, access)?;
    let m = x.sim_data()?;
    rec.launch(d, |scope| {
        if !slow.is_zero() {
            std::thread::sleep(slow);
        }
        scope.sim_kernel(move || {
            if access.writes() {
                m.lock().iter_mut().for_each(|v| *v += 1)
            } else {
                let _ = m.read().to_vec();
            }
        })
    })
}

/// T holds a solo launch that writes `a` only. Another thread U holds a solo launch writing
/// `b`. From inside T's enqueue, a read of `b` on s1 conflicts with U's launch, not T's: as
/// with marks, it waits for U's commit rather than failing.
#[test]
fn a_conflict_held_by_another_threads_solo_launch_is_waited_for_not_would_deadlock() {
    let d = Device::sim_with(
        SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(30), seed: 7, ..SimConfig::default() },
        DeviceConfig { preflight_timeout: Duration::from_secs(5), ..DeviceConfig::default() },
    )
    .unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let b = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let u = {
        let (d, b) = (d.clone(), b.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.write(&b).unwrap();
            let m = b.sim_data().unwrap();
            rec.launch(&d, |scope| {
                in_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                scope.sim_kernel(move || m.lock().fill(9))
            })
            .unwrap()
        })
    };
    in_rx.recv().unwrap();
    let mut rec = LaunchRecorder::new_strict(s0);
    rec.write(&a).unwrap();
    let inner = rec.launch(&d, |_| Ok(copy(&d, s1, &y, &b))).unwrap();
    u.join().unwrap();
    assert!(inner.is_ok(), "the read of b on s1 conflicts only with U's launch: {inner:?}");
}

#[test]
fn random_solo_reads_and_writes_with_two_more_streams_have_no_hazard() {
    for seed in 0..16u64 {
        let d = Device::sim(SimConfig {
            min_delay: Duration::ZERO,
            max_delay: Duration::from_micros(150),
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        let s0 = d.default_stream();
        let (s1, s2) = (d.new_stream().unwrap(), d.new_stream().unwrap());
        let bufs: Vec<GpuRef<u32>> = (0..3).map(|_| d.alloc_zeros::<u32>(s0, 8).unwrap()).collect();
        let start = Arc::new(Barrier::new(5));
        let mut th = Vec::new();
        for t in 0..3u64 {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            th.push(std::thread::spawn(move || {
                let mut r = common::Rng::seeded(seed * 31 + t);
                start.wait();
                for _ in 0..40 {
                    let i = r.below(3) as usize;
                    let acc = if r.below(3) == 0 { Access::Write } else { Access::Read };
                    let slow = Duration::from_micros(r.below(600));
                    op(&d, s0, &bufs[i], acc, slow).unwrap();
                }
            }));
        }
        for t in 0..2u64 {
            let (d, bufs, start) = (d.clone(), bufs.clone(), start.clone());
            th.push(std::thread::spawn(move || {
                let mut r = common::Rng::seeded(seed * 77 + t);
                start.wait();
                std::thread::sleep(Duration::from_micros(r.below(4000)));
                for k in 0..30 {
                    let s = if (k + t) % 2 == 0 { s1 } else { s2 };
                    let i = r.below(3) as usize;
                    let acc = if r.below(3) == 0 { Access::Write } else { Access::Read };
                    op(&d, s, &bufs[i], acc, Duration::ZERO).unwrap();
                }
            }));
        }
        th.into_iter().for_each(|t| t.join().unwrap());
        d.synchronize(s0).unwrap();
        let h = d.sim_hazards().unwrap();
        assert!(h.is_empty(), "seed {seed}: {h:?}");
    }
}

/// A solo read of b is in flight; a read of b on s1 runs at once (reads do not conflict),
/// then a write of b on s1 must still wait for the solo read.
#[test]
fn a_write_after_a_covered_read_elsewhere_still_waits_for_the_solo_read_in_flight() {
    let d = Device::sim(SimConfig {
        min_delay: Duration::ZERO,
        max_delay: Duration::from_micros(100),
        seed: 3,
        ..SimConfig::default()
    })
    .unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let b = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let enqueued = Arc::new(AtomicBool::new(false));
    let t = {
        let (d, b, enqueued) = (d.clone(), b.clone(), enqueued.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.read(&b).unwrap();
            let m = b.sim_data().unwrap();
            rec.launch(&d, |scope| {
                in_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                let r = scope.sim_kernel(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    let _ = m.read().to_vec();
                });
                enqueued.store(true, Ordering::SeqCst);
                r
            })
            .unwrap()
        })
    };
    in_rx.recv().unwrap();
    let t0 = Instant::now();
    op(&d, s1, &b, Access::Read, Duration::ZERO).unwrap();
    let read_took = t0.elapsed();
    op(&d, s1, &b, Access::Write, Duration::ZERO).unwrap();
    let write_took = t0.elapsed();
    let waited = enqueued.load(Ordering::SeqCst);
    t.join().unwrap();
    d.synchronize(s1).unwrap();
    d.synchronize(s0).unwrap();
    assert!(waited, "the write did not wait for the solo read (read {read_took:?}, write {write_took:?})");
    let h = d.sim_hazards().unwrap();
    assert!(h.is_empty(), "{h:?}");
}

/// A solo launch that reads `x` and, inside its enqueue, makes a second solo launch that adds
/// `by` to it: the thread holds two solo launches at once (a nested one).
fn nested_add(d: &Device, s: StreamId, x: &GpuRef<u32>, by: u32) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(x)?;
    rec.launch(d, |_| add(d, s, x, by, Duration::ZERO))
}

/// Runs its closure when the thread's thread-locals are destroyed.
struct AtExit(std::cell::RefCell<Option<Box<dyn FnOnce()>>>);

impl Drop for AtExit {
    fn drop(&mut self) {
        if let Some(f) = self.0.get_mut().take() {
            f();
        }
    }
}

thread_local! {
    static AT_EXIT: AtExit = const { AtExit(std::cell::RefCell::new(None)) };
}

/// Sets `f` to run from a thread-local's destructor on this thread, registered before any
/// thread-local the crate touches afterwards, so that `f` runs after those are destroyed.
fn at_thread_exit(f: impl FnOnce() + 'static) {
    AT_EXIT.with(|a| *a.0.borrow_mut() = Some(Box::new(f)));
}

/// What the child process of the test below runs: `nested` makes a nested solo launch from a
/// thread-local's destructor; `held` makes a use on a second stream that waits for another
/// thread's solo launch from one.
fn launch_from_a_thread_local_destructor(mode: &str) {
    let d = short_timeout(TIMEOUT);
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    let w = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let y = d.alloc_zeros::<u32>(s0, 4).unwrap();
    let (done_tx, done_rx) = mpsc::channel::<cusched::Result<()>>();
    match mode {
        "nested" => {
            let t = {
                let (d, x, w) = (d.clone(), x.clone(), w.clone());
                std::thread::spawn(move || {
                    let (dd, xx) = (d.clone(), x.clone());
                    at_thread_exit(move || done_tx.send(nested_add(&dd, s0, &xx, 1)).unwrap());
                    // Solo mode's own thread-locals are made now, after the one above: they
                    // are destroyed before it.
                    nested_add(&d, s0, &w, 1).unwrap();
                })
            };
            t.join().expect("the thread's exit");
            done_rx.recv().unwrap().expect("the nested solo launch from the destructor");
            assert_eq!(x.download(s0).unwrap(), vec![2; 4]);
        }
        "held" => {
            // S holds a solo write of x open until told to go on.
            let (inside_tx, inside_rx) = mpsc::channel::<()>();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let s = {
                let (d, x) = (d.clone(), x.clone());
                std::thread::spawn(move || {
                    let mut rec = LaunchRecorder::new_strict(s0);
                    rec.write(&x).unwrap();
                    let m = x.sim_data().unwrap();
                    rec.launch(&d, |scope| {
                        inside_tx.send(()).unwrap();
                        let _ = go_rx.recv_timeout(Duration::from_secs(30));
                        scope.sim_kernel(move || m.lock().fill(7))
                    })
                    .unwrap()
                })
            };
            inside_rx.recv().unwrap();
            let (started_tx, started_rx) = mpsc::channel::<()>();
            let t = {
                let (d, x, y, w) = (d.clone(), x.clone(), y.clone(), w.clone());
                std::thread::spawn(move || {
                    let dd = d.clone();
                    at_thread_exit(move || {
                        started_tx.send(()).unwrap();
                        done_tx.send(copy(&dd, s1, &y, &x)).unwrap();
                    });
                    nested_add(&d, s0, &w, 1).unwrap();
                })
            };
            started_rx.recv().unwrap();
            // Time for the destructor's launch to reach its wait for S (a shorter one still
            // passes once fixed, it only exercises less).
            std::thread::sleep(Duration::from_millis(100));
            go_tx.send(()).unwrap();
            s.join().unwrap();
            t.join().expect("the thread's exit");
            done_rx.recv().unwrap().expect("the use on s1 from the destructor");
            assert_eq!(y.download(s1).unwrap(), vec![7; 4]);
        }
        other => panic!("unknown mode {other}"),
    }
    assert_clean(&d);
}

/// A launch made from a thread-local's destructor, after solo mode's own thread-locals on
/// that thread are gone, must not panic there (a panic in a thread-local's destructor aborts
/// the process). Each case runs in a child process, so that an abort shows as a failure here.
#[test]
fn a_launch_from_a_thread_local_destructor_does_not_abort() {
    const MODE: &str = "CUSCHED_TEST_TLS_DESTRUCTOR_MODE";
    if let Some(mode) = std::env::var_os(MODE) {
        launch_from_a_thread_local_destructor(mode.to_str().unwrap());
        return;
    }
    for mode in ["nested", "held"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "--test-threads=1"])
            .arg(common::test_name(module_path!(), "a_launch_from_a_thread_local_destructor_does_not_abort"))
            .env(MODE, mode)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{mode}: the child exited with {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// S's solo write of x (x = 1) is inside its enqueue when this thread closes solo mode (a
/// launch on s1 of another buffer), then preflights a hand-paired write of x (x = 2), which
/// takes marks. Once solo mode has closed, conflicting launches follow preflight order: the
/// hand-paired write waits for S's launch, as it would for S's mark with several streams from
/// the start, and x ends at 2 either way. S goes on once the write committed, or after a
/// while if the write waits for it.
#[test]
fn a_hand_paired_write_preflighted_after_the_close_follows_a_solo_write_still_in_flight() {
    for several in [false, true] {
        let d = short_timeout(TIMEOUT);
        let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
        if several {
            LaunchRecorder::new_strict(s1).launch(&d, |_| Ok(())).unwrap();
        }
        let x = d.alloc_zeros::<u32>(s0, 4).unwrap();
        d.synchronize(s0).unwrap();
        let (inside_tx, inside_rx) = mpsc::channel::<()>();
        let (committed_tx, committed_rx) = mpsc::channel::<()>();
        let s = {
            let (d, x) = (d.clone(), x.clone());
            std::thread::spawn(move || {
                let mut rec = LaunchRecorder::new_strict(s0);
                rec.write(&x).unwrap();
                let m = x.sim_data().unwrap();
                rec.launch(&d, |scope| {
                    inside_tx.send(()).unwrap();
                    let _ = committed_rx.recv_timeout(Duration::from_millis(300));
                    scope.sim_kernel(move || m.lock().fill(1))
                })
                .unwrap()
            })
        };
        inside_rx.recv().unwrap();
        let _closes = d.alloc_zeros::<u32>(s1, 4).unwrap();
        let mut rec = LaunchRecorder::new_strict(s0);
        rec.write(&x).unwrap();
        let write = rec.preflight(&d).unwrap();
        let m = x.sim_data().unwrap();
        write.scope().sim_kernel(move || m.lock().fill(2)).unwrap();
        write.commit().unwrap();
        let _ = committed_tx.send(());
        s.join().unwrap();
        assert_eq!(x.download(s0).unwrap(), vec![2; 4], "several streams from the start: {several}");
        assert_clean(&d);
    }
}

/// While one solo launch (of another buffer) stays open, 3,000 uses on s1 of memory solo
/// launches used wait once on the solo stream's work from before the close, not once each on
/// a new event at its tail.
#[test]
fn uses_elsewhere_while_a_solo_launch_stays_open_wait_once_not_once_each() {
    let d = short_timeout(TIMEOUT);
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[3u32; 4]).unwrap();
    let h = d.alloc_zeros::<u32>(s0, 4).unwrap();
    d.synchronize(s0).unwrap();
    let (inside_tx, inside_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let s = {
        let (d, h) = (d.clone(), h.clone());
        std::thread::spawn(move || {
            let mut rec = LaunchRecorder::new_strict(s0);
            rec.write(&h).unwrap();
            let m = h.sim_data().unwrap();
            rec.launch(&d, |scope| {
                inside_tx.send(()).unwrap();
                let _ = done_rx.recv_timeout(Duration::from_secs(60));
                scope.sim_kernel(move || m.lock().fill(5))
            })
            .unwrap()
        })
    };
    inside_rx.recv().unwrap();
    let y = d.alloc_zeros::<u32>(s1, 4).unwrap();
    let (waits, recorded) = (d.stream_stats(s1).unwrap().waits, d.stream_stats(s0).unwrap().recorded);
    for _ in 0..3000 {
        copy(&d, s1, &y, &x).unwrap();
    }
    let waits = d.stream_stats(s1).unwrap().waits - waits;
    let recorded = d.stream_stats(s0).unwrap().recorded - recorded;
    done_tx.send(()).unwrap();
    s.join().unwrap();
    assert!(waits <= 1, "{waits} waits on s1 for 3,000 uses of x while one solo launch of h stayed open");
    assert!(recorded <= 1, "{recorded} events recorded on s0 for them");
    assert_eq!(y.download(s1).unwrap(), vec![3; 4]);
    assert_eq!(h.download(s0).unwrap(), vec![5; 4]);
    assert_clean(&d);
}

/// Past the close, once the floor is known done, a stream whose launches touch no memory a
/// solo launch used stops looking at solo mode (its first launch then waits once on the
/// floor, finished work); a use of such memory there later is still ordered after the solo
/// launches.
#[test]
fn streams_past_the_close_that_touch_no_solo_memory_stop_checking_solo_mode() {
    let d = sim();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let x = d.upload(s0, &[1u32; 4]).unwrap();
    add(&d, s0, &x, 1, Duration::from_millis(5)).unwrap();
    let z = d.alloc_zeros::<u32>(s1, 4).unwrap();
    // The floor is done, and known to be.
    d.synchronize(s0).unwrap();
    let checks = d.stream_stats(s1).unwrap().one_stream_checks;
    for _ in 0..1000 {
        add(&d, s1, &z, 1, Duration::ZERO).unwrap();
    }
    let checks = d.stream_stats(s1).unwrap().one_stream_checks - checks;
    assert!(checks <= 1, "1,000 launches on s1 of new memory looked at solo mode {checks} times");
    let y = d.alloc_zeros::<u32>(s1, 4).unwrap();
    copy(&d, s1, &y, &x).unwrap();
    assert_eq!(y.download(s1).unwrap(), vec![2; 4]);
    assert_eq!(z.download(s1).unwrap(), vec![1000; 4]);
    assert_clean(&d);
}
