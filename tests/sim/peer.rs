//! Two simulated devices on one simulated machine: uses across devices (peer copies, and
//! kernels declaring buffers of both with `with_peers`) are fenced, checked by the shared hazard
//! checker, and frees wait for peer uses.

use crate::common::*;
use cusched::{Device, Error, FenceMutation, GpuRef, HazardKind, LaunchRecorder, SimConfig, StreamId};
use std::time::Duration;

/// Two simulated devices sharing one checker, kernels of `0..max_us` µs.
fn pair_with(mutation: Option<FenceMutation>, max_us: u64, seed: u64) -> (Device, Device) {
    let config = SimConfig {
        min_delay: Duration::ZERO,
        max_delay: Duration::from_micros(max_us),
        seed,
        fence_mutation: mutation,
        // A mutation makes hazards on purpose: they are read from `sim_hazards`.
        fail_on_hazard: mutation.is_none(),
        ..SimConfig::default()
    };
    let mut g = Device::sim_group(config, 2).expect("sim group");
    let b = g.pop().unwrap();
    let a = g.pop().unwrap();
    (a, b)
}

fn pair() -> (Device, Device) {
    pair_with(None, 200, 11)
}

/// A kernel on `s` (of `d`) that sleeps `slow`, then sets every element of `out` to `v`.
fn fill(d: &Device, s: StreamId, out: &GpuRef<u32>, v: u32, slow: Duration) {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.write(out).unwrap();
    let m = out.sim_data().unwrap();
    rec.launch(d, |scope| {
        scope.sim_kernel(move || {
            std::thread::sleep(slow);
            m.lock().iter_mut().for_each(|x| *x = v);
        })
    })
    .unwrap();
}

/// A kernel on `s` that sleeps `slow`, then copies `input` into `out` (either may be a peer
/// buffer: the recorder is `with_peers`).
fn copy_kernel(d: &Device, s: StreamId, out: &GpuRef<u32>, input: &GpuRef<u32>, slow: Duration) {
    let mut rec = LaunchRecorder::new_strict(s).with_peers();
    rec.read(input).unwrap().write(out).unwrap();
    let (o, i) = (out.sim_data().unwrap(), input.sim_data().unwrap());
    rec.launch(d, |scope| {
        scope.sim_kernel(move || {
            std::thread::sleep(slow);
            let v = i.read().to_vec();
            o.lock().copy_from_slice(&v);
        })
    })
    .unwrap();
}

const SLOW: Duration = Duration::from_millis(20);

fn no_hazards(d: &Device) {
    let h = d.sim_hazards().unwrap();
    assert!(h.is_empty(), "hazards across devices: {h:?}");
}

#[test]
fn read_after_write_across_devices_push_and_pull() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
        let x = a.alloc_zeros::<u32>(sa, 64).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 64).unwrap();
        // Pull: the copy runs on B's stream and must wait for A's slow write.
        fill(&a, sa, &x, 7, SLOW);
        x.copy_to(sb, &y).unwrap();
        assert_eq!(y.download(b.default_stream()).unwrap(), vec![7; 64]);
        // Push: the copy runs on A's stream after another slow write on A's other stream.
        fill(&a, a.default_stream(), &x, 9, SLOW);
        x.copy_to(sa, &y).unwrap();
        assert_eq!(y.download(sb).unwrap(), vec![9; 64]);
        no_hazards(&a);
    });
}

#[test]
fn write_after_read_across_devices() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let sb = b.new_stream().unwrap();
        let x = a.upload(a.default_stream(), &[1u32; 32]).unwrap();
        let y = b.upload(sb, &[2u32; 32]).unwrap();
        let z = b.alloc_zeros::<u32>(sb, 32).unwrap();
        // B reads y slowly into z; then A overwrites y through a peer copy on A's stream: the
        // copy must wait for B's read, or z would see 1s.
        copy_kernel(&b, sb, &z, &y, SLOW);
        x.copy_to(a.default_stream(), &y).unwrap();
        assert_eq!(z.download(b.default_stream()).unwrap(), vec![2; 32], "the peer write overtook a read");
        assert_eq!(y.download(b.default_stream()).unwrap(), vec![1; 32]);
        no_hazards(&a);
    });
}

#[test]
fn write_after_write_across_devices() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let sb = b.new_stream().unwrap();
        let y = b.alloc_zeros::<u32>(sb, 16).unwrap();
        let x = a.alloc_zeros::<u32>(a.default_stream(), 16).unwrap();
        fill(&a, a.default_stream(), &x, 3, Duration::ZERO);
        // A slow peer write of y from A's stream, then a fast write of y on B: B's must land last.
        copy_kernel(&a, a.default_stream(), &y, &x, SLOW);
        fill(&b, sb, &y, 4, Duration::ZERO);
        assert_eq!(y.download(b.default_stream()).unwrap(), vec![4; 16]);
        no_hazards(&b);
    });
}

#[test]
fn a_buffer_freed_after_a_peer_read_is_freed_after_that_read() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let sb = b.new_stream().unwrap();
        let x = a.upload(a.default_stream(), &[5u32; 128]).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 128).unwrap();
        // B's slow kernel reads x (A's memory); x is dropped at once: its free on A's stream
        // must wait for that read (the checker sees the free as a write of x).
        copy_kernel(&b, sb, &y, &x, SLOW);
        drop(x);
        assert_eq!(y.download(sb).unwrap(), vec![5; 128]);
        // The same through a peer copy on B's stream, and the destination dropped too.
        let x = a.upload(a.default_stream(), &[6u32; 128]).unwrap();
        fill(&a, a.default_stream(), &x, 8, SLOW);
        x.copy_to(sb, &y).unwrap();
        drop(x);
        let out = y.download(sb).unwrap();
        drop(y);
        assert_eq!(out, vec![8; 128]);
        a.synchronize(a.default_stream()).unwrap();
        b.synchronize(sb).unwrap();
        no_hazards(&a);
    });
}

#[test]
fn the_shared_checker_sees_unordered_uses_across_devices() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair_with(Some(FenceMutation::NoFences), 0, 3);
        let x = a.upload(a.default_stream(), &[1u32; 8]).unwrap();
        let y = b.alloc_zeros::<u32>(b.default_stream(), 8).unwrap();
        fill(&a, a.default_stream(), &x, 2, SLOW);
        x.copy_to(b.default_stream(), &y).unwrap();
        a.synchronize(a.default_stream()).unwrap();
        b.synchronize(b.default_stream()).unwrap();
        let h = b.sim_hazards().unwrap();
        assert!(
            // Which kind depends on which ran first: nothing ordered them.
            h.iter().any(
                |h| h.buffer == x.id() && matches!(h.kind, HazardKind::ReadAfterWrite | HazardKind::WriteAfterRead)
            ),
            "the checker must see the copy on B and A's writes of x unordered: {h:?}"
        );
        assert_eq!(a.sim_hazards().unwrap(), h, "one checker for the whole machine");
    });
}

#[test]
fn the_shared_checker_sees_a_free_not_fenced_after_a_peer_read() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair_with(Some(FenceMutation::NoFreeFence), 0, 5);
        let x = a.upload(a.default_stream(), &[1u32; 8]).unwrap();
        let y = b.alloc_zeros::<u32>(b.default_stream(), 8).unwrap();
        let id = x.id();
        copy_kernel(&b, b.default_stream(), &y, &x, SLOW);
        drop(x);
        a.synchronize(a.default_stream()).unwrap();
        b.synchronize(b.default_stream()).unwrap();
        let h = a.sim_hazards().unwrap();
        assert!(
            // The free counts as a write; which kind depends on which ran first.
            h.iter()
                .any(|h| h.buffer == id && matches!(h.kind, HazardKind::ReadAfterWrite | HazardKind::WriteAfterRead)),
            "an unfenced free after a peer read must be reported: {h:?}"
        );
    });
}

#[test]
fn strict_recorders_reject_peer_buffers_unless_made_with_peers() {
    let (a, b) = pair();
    let y = b.alloc_zeros::<u32>(b.default_stream(), 4).unwrap();
    let mut rec = LaunchRecorder::new_strict(a.default_stream());
    let err = rec.read(&y).map(drop).expect_err("a buffer of another device");
    assert!(matches!(err, Error::ForeignDevice { .. }), "{err}");
    let mut rec = LaunchRecorder::new_permissive(a.default_stream());
    rec.read(&y).unwrap();
    assert_eq!(rec.recorded_count(), 0, "permissive recorders skip it");
    let mut rec = LaunchRecorder::new_strict(a.default_stream()).with_peers();
    rec.read(&y).unwrap();
    assert_eq!(rec.recorded_count(), 1);
}

#[test]
fn copy_to_checks_the_stream_and_the_lengths() {
    let (a, b) = pair();
    let c = Device::sim(SimConfig::default()).unwrap();
    let x = a.alloc_zeros::<u32>(a.default_stream(), 4).unwrap();
    let y = b.alloc_zeros::<u32>(b.default_stream(), 4).unwrap();
    let err = x.copy_to(c.default_stream(), &y).expect_err("a stream of neither device");
    assert!(matches!(err, Error::ForeignDevice { .. }), "{err}");
    let err = a.copy_peer(b.default_stream(), &x, &y).expect_err("copy_peer takes a stream of its own device");
    assert!(matches!(err, Error::ForeignDevice { .. }), "{err}");
    let short = b.alloc_zeros::<u32>(b.default_stream(), 3).unwrap();
    let err = x.copy_to(a.default_stream(), &short).expect_err("lengths differ");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = x.copy_to(a.default_stream(), &x).expect_err("itself");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    // A copy within one device through copy_to is an ordinary copy.
    let x2 = a.upload(a.default_stream(), &[4u32, 3, 2, 1]).unwrap();
    x2.copy_to(a.default_stream(), &x).unwrap();
    assert_eq!(x.download(a.default_stream()).unwrap(), [4, 3, 2, 1]);
}

#[test]
fn devices_made_apart_copy_too() {
    // Not on one machine: the copy is fenced and correct; the checkers just cannot see across.
    let a = Device::sim(SimConfig::default()).unwrap();
    let b = Device::sim(SimConfig::default()).unwrap();
    let x = a.upload(a.default_stream(), &[1u32, 2]).unwrap();
    let y = b.alloc_zeros::<u32>(b.default_stream(), 2).unwrap();
    fill(&a, a.default_stream(), &x, 6, SLOW);
    x.copy_to(b.default_stream(), &y).unwrap();
    assert_eq!(y.download(b.default_stream()).unwrap(), [6, 6]);
    assert!(a.sim_hazards().unwrap().is_empty() && b.sim_hazards().unwrap().is_empty());
}

#[test]
fn a_pipeline_a_to_b_to_a_keeps_program_order() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
        let src = a.alloc_zeros::<u32>(sa, 32).unwrap();
        let mid = b.alloc_zeros::<u32>(sb, 32).unwrap();
        let back = a.alloc_zeros::<u32>(a.default_stream(), 32).unwrap();
        for round in 1..=5u32 {
            fill(&a, sa, &src, round, Duration::from_millis(2));
            src.copy_to(sb, &mid).unwrap();
            // Stage 2 on B: mid += 100 * round, slowly.
            let mut rec = LaunchRecorder::new_strict(sb);
            rec.read_write(&mid).unwrap();
            let m = mid.sim_data().unwrap();
            rec.launch(&b, |scope| {
                scope.sim_kernel(move || {
                    std::thread::sleep(Duration::from_millis(2));
                    m.lock().iter_mut().for_each(|x| *x += 100 * round);
                })
            })
            .unwrap();
            mid.copy_to(a.default_stream(), &back).unwrap();
            assert_eq!(back.download(sa).unwrap(), vec![101 * round; 32]);
        }
        no_hazards(&a);
    });
}

/// One randomized schedule over two devices (three streams each): fills, read-modify-writes,
/// peer copies on a stream of either device, kernels reading buffers of both devices, and
/// buffers dropped and replaced mid-run, checked against a CPU model and the shared checker.
fn random_schedule(seed: u64, steps: usize) {
    let (a, b) = pair_with(None, 60, seed);
    let devs = [a, b];
    let streams: Vec<Vec<StreamId>> =
        devs.iter().map(|d| vec![d.default_stream(), d.new_stream().unwrap(), d.new_stream().unwrap()]).collect();
    const LEN: usize = 16;
    const BUFS: usize = 6;
    let mut rng = Rng::seeded(seed);
    // Buffer i lives on device i % 2.
    let mut bufs: Vec<GpuRef<u32>> =
        (0..BUFS).map(|i| devs[i % 2].alloc_zeros::<u32>(streams[i % 2][0], LEN).unwrap()).collect();
    let mut model = [0u32; BUFS];
    for _ in 0..steps {
        let i = rng.below(BUFS as u64) as usize;
        let j = (i + 1 + rng.below(BUFS as u64 - 1) as usize) % BUFS;
        let dev = rng.below(2) as usize;
        let s = streams[dev][rng.below(3) as usize];
        match rng.below(6) {
            0 => {
                // Fill on a stream of the buffer's own device.
                let v = rng.below(1000) as u32;
                let own = i % 2;
                fill(&devs[own], streams[own][rng.below(3) as usize], &bufs[i], v, Duration::ZERO);
                model[i] = v;
            }
            1 => {
                // Read-modify-write of i, reading j, on either device's stream.
                let mut rec = LaunchRecorder::new_strict(s).with_peers();
                rec.read_write(&bufs[i]).unwrap().read(&bufs[j]).unwrap();
                let (o, r) = (bufs[i].sim_data().unwrap(), bufs[j].sim_data().unwrap());
                rec.launch(&devs[dev], |scope| {
                    scope.sim_kernel(move || {
                        let add = r.read()[0];
                        o.lock().iter_mut().for_each(|x| *x = x.wrapping_mul(3).wrapping_add(add));
                    })
                })
                .unwrap();
                model[i] = model[i].wrapping_mul(3).wrapping_add(model[j]);
            }
            2 | 3 => {
                // Peer (or local) copy j -> i on a stream of either buffer's device.
                let side = if rng.below(2) == 0 { i % 2 } else { j % 2 };
                let s = streams[side][rng.below(3) as usize];
                bufs[j].copy_to(s, &bufs[i]).unwrap();
                model[i] = model[j];
            }
            4 => {
                // Replace buffer i: the old one is freed after its outstanding uses, anywhere.
                let own = i % 2;
                let fresh = devs[own].alloc_zeros::<u32>(streams[own][rng.below(3) as usize], LEN).unwrap();
                // Keep the contents through a copy, then drop the old buffer.
                bufs[i].copy_to(streams[own][0], &fresh).unwrap();
                bufs[i] = fresh;
            }
            _ => {
                // Check one buffer on a random stream of its device.
                let own = i % 2;
                let got = bufs[i].download(streams[own][rng.below(3) as usize]).unwrap();
                assert_eq!(got, vec![model[i]; LEN], "buffer {i} (seed {seed})");
            }
        }
    }
    for (i, buf) in bufs.iter().enumerate() {
        assert_eq!(
            buf.download(streams[i % 2][0]).unwrap(),
            vec![model[i]; LEN],
            "buffer {i} at the end (seed {seed})"
        );
    }
    drop(bufs);
    for (d, ss) in devs.iter().zip(&streams) {
        for s in ss {
            d.synchronize(*s).unwrap();
        }
    }
    let h = devs[0].sim_hazards().unwrap();
    assert!(h.is_empty(), "seed {seed}: hazards {h:?}");
}

#[test]
fn randomized_schedules_over_two_devices_have_no_hazards_and_correct_data() {
    let base = Rng::new().next();
    bounded(Duration::from_secs(300), move || {
        for k in 0..8 {
            random_schedule(base.wrapping_add(k), 400);
        }
    });
}

#[test]
fn a_peer_that_rebuilds_its_context_leaves_the_other_device_working() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let y = b.upload(b.default_stream(), &[1u32; 8]).unwrap();
        let z = b.upload(b.default_stream(), &[2u32; 8]).unwrap();
        // A reads y (a peer read) in a launch that faults: A's context is poisoned and rebuilt.
        let mut rec = LaunchRecorder::new_strict(a.default_stream()).with_peers();
        rec.read(&y).unwrap();
        rec.launch(&a, |s| s.sim_fault()).unwrap();
        let err = a.synchronize(a.default_stream()).expect_err("A's context is poisoned");
        assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
        // y's last read went to a context where nothing runs any more: it cannot be ordered
        // after it, so a write of y fails instead of waiting on a dead context.
        let mut rec = LaunchRecorder::new_strict(b.default_stream());
        rec.write(&y).unwrap();
        let err = rec.launch(&b, |s| s.sim_kernel(|| {})).expect_err("y was used by a poisoned context");
        assert!(matches!(err, Error::ContextPoisoned { .. }), "{err}");
        drop(y);
        // B's other buffers, and buffers of A's new context, work, across devices too: epochs
        // count per device, so B (still on its first context) accepts A's new buffers.
        assert_eq!(z.download(b.default_stream()).unwrap(), vec![2; 8]);
        let x = a.upload(a.default_stream(), &[3u32; 8]).unwrap();
        x.copy_to(b.default_stream(), &z).unwrap();
        assert_eq!(z.download(b.default_stream()).unwrap(), vec![3; 8]);
        fill(&b, b.default_stream(), &z, 4, SLOW);
        z.copy_to(a.default_stream(), &x).unwrap();
        assert_eq!(x.download(a.default_stream()).unwrap(), vec![4; 8]);
        no_hazards(&a);
    });
}

#[test]
fn lanes_of_two_devices_hand_buffers_to_each_other() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (la, lb) = (a.lane("a").unwrap(), b.lane("b").unwrap());
        let x = a.alloc_zeros::<u32>(a.default_stream(), 32).unwrap();
        let y = b.alloc_zeros::<u32>(b.default_stream(), 32).unwrap();
        for round in 1..=4u32 {
            let (x1, y1) = (x.clone(), y.clone());
            let (committed_tx, committed) = std::sync::mpsc::channel();
            // Lane A fills x slowly and pushes it to y; lane B doubles y and pulls it back to x.
            let first = la.submit(move |cx| {
                let mut rec = cx.recorder();
                rec.write(&x1)?;
                let m = x1.sim_data()?;
                rec.launch(cx.device(), |s| {
                    s.sim_kernel(move || {
                        std::thread::sleep(Duration::from_millis(2));
                        m.lock().iter_mut().for_each(|v| *v = round);
                    })
                })?;
                x1.copy_to(cx.stream(), &y1)?;
                let _ = committed_tx.send(());
                Ok(())
            });
            // Undeclared lane jobs are ordered by commit: the second is submitted once the
            // first has committed, while its simulated work may still run (fences order it).
            committed.recv().unwrap();
            let (x2, y2) = (x.clone(), y.clone());
            let second = lb.submit(move |cx| {
                let mut rec = cx.recorder();
                rec.read_write(&y2)?;
                let m = y2.sim_data()?;
                rec.launch(cx.device(), |s| s.sim_kernel(move || m.lock().iter_mut().for_each(|v| *v *= 2)))?;
                y2.copy_to(cx.stream(), &x2)
            });
            first.wait().unwrap();
            second.wait().unwrap();
            assert_eq!(x.download(a.default_stream()).unwrap(), vec![2 * round; 32], "round {round}");
        }
        no_hazards(&a);
    });
}

/// Repeated peer copies on one stream take the quick path once the stream has followed the
/// other device's solo floor; they must still follow every use made in between: a slow write
/// on the other device, a slow read on another stream of this device, and a slow write by a
/// lane job that declared it.
#[test]
fn repeated_peer_copies_follow_every_use_made_between_them() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (sa, sa2, sb) = (a.default_stream(), a.new_stream().unwrap(), b.default_stream());
        let x = a.upload(sa, &[1u32; 16]).unwrap();
        let y = b.upload(sb, &[0u32; 16]).unwrap();
        let z = a.alloc_zeros::<u32>(sa2, 16).unwrap();
        for _ in 0..3 {
            x.copy_to(sa, &y).unwrap();
        }
        // The other device writes x's peer y slowly: the next copy into y waits for it.
        fill(&b, sb, &y, 5, SLOW);
        x.copy_to(sa, &y).unwrap();
        assert_eq!(y.download(sb).unwrap(), vec![1; 16], "the copy overtook b's write");
        // A slow read of x on this device's other stream, then a write of x by a peer copy the
        // other way: the copy waits for the read.
        copy_kernel(&a, sa2, &z, &x, SLOW);
        fill(&b, sb, &y, 6, Duration::ZERO);
        y.copy_to(sa, &x).unwrap();
        assert_eq!(z.download(sa2).unwrap(), vec![1; 16], "the peer copy overtook a read");
        assert_eq!(x.download(sa).unwrap(), vec![6; 16]);
        // A declared lane job of b writes y slowly; the copy submitted after it reads y.
        let lane = b.lane("b").unwrap();
        let y2 = y.clone();
        let job = lane.job().write(&y).submit(move |cx, _| {
            let mut rec = cx.recorder();
            rec.write(&y2)?;
            let m = y2.sim_data()?;
            rec.launch(cx.device(), |s| {
                s.sim_kernel(move || {
                    std::thread::sleep(SLOW);
                    m.lock().iter_mut().for_each(|v| *v = 8);
                })
            })
        });
        y.copy_to(sa, &x).unwrap();
        job.wait().unwrap();
        assert_eq!(x.download(sa).unwrap(), vec![8; 16], "the copy overtook a declared job's write");
        no_hazards(&a);
    });
}

/// A peer copy reads its source: one whose last writer failed fails the copy, on the quick
/// path too, until a successful write replaces it; a stale peer buffer is refused.
#[test]
fn a_peer_copy_refuses_a_failed_or_stale_source_on_a_warm_stream() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (sa, sb) = (a.default_stream(), b.default_stream());
        let x = a.upload(sa, &[1u32; 8]).unwrap();
        let y = b.upload(sb, &[2u32; 8]).unwrap();
        for _ in 0..3 {
            y.copy_to(sa, &x).unwrap();
        }
        let mut rec = LaunchRecorder::new_strict(sb).named("breaks");
        rec.write(&y).unwrap();
        rec.launch(&b, |_| -> cusched::Result<()> { Err(bad("y", "the test fails this write")) })
            .expect_err("the write fails");
        let err = y.copy_to(sa, &x).expect_err("y's last writer failed");
        assert!(matches!(err, Error::FailedInput { .. }), "{err}");
        assert_eq!(x.download(sa).unwrap(), vec![2; 8], "a failed copy copied");
        fill(&b, sb, &y, 3, Duration::ZERO);
        y.copy_to(sa, &x).unwrap();
        assert_eq!(x.download(sa).unwrap(), vec![3; 8]);
        // b's context is poisoned and rebuilt: y is stale, and a copy of it is refused.
        let mut rec = LaunchRecorder::new_strict(sb);
        rec.read(&y).unwrap();
        rec.launch(&b, |s| s.sim_fault()).unwrap();
        b.synchronize(sb).expect_err("b's context is poisoned");
        let err = y.copy_to(sa, &x).expect_err("y is of b's old context");
        assert!(matches!(err, Error::Stale { .. } | Error::ContextPoisoned { .. }), "{err}");
        let y = b.upload(sb, &[4u32; 8]).unwrap();
        y.copy_to(sa, &x).unwrap();
        assert_eq!(x.download(sa).unwrap(), vec![4; 8]);
        no_hazards(&a);
    });
}

/// Counts the ops named `copy_peer` that a trace hook sees enqueued.
#[derive(Default)]
struct CopyCount(std::sync::atomic::AtomicUsize);

impl cusched::KernelTrace for CopyCount {
    fn before_enqueue(&self, op: &cusched::OpInfo) {
        if op.op == "copy_peer" {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn after_enqueue(&self, _: &cusched::OpInfo) {}
    fn before_completion(&self, _: &cusched::OpInfo, _: Option<cusched::GpuSpan>) {}
    fn after_completion(&self, _: &cusched::OpInfo, _: Option<cusched::GpuSpan>) {}
}

/// Warm peer copies (the pair of streams already past every first-time check) where the quick
/// path must not go: under a trace hook the copy is traced, in a lane job it is one of the
/// job's commits (a later use on the job's device follows it), and inside a launch that holds
/// the destination it fails at once instead of waiting for itself.
#[test]
fn warm_peer_copies_are_traced_join_their_job_and_refuse_a_destination_held_on_their_thread() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (sa, sb) = (a.default_stream(), b.default_stream());
        let x = a.upload(sa, &[1u32; 8]).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 8).unwrap();
        for _ in 0..3 {
            x.copy_to(sa, &y).unwrap();
        }
        let hook = std::sync::Arc::new(CopyCount::default());
        a.set_trace(hook.clone(), cusched::TraceOptions { gpu_timing: false }).unwrap();
        x.copy_to(sa, &y).unwrap();
        a.clear_trace();
        assert_eq!(hook.0.load(std::sync::atomic::Ordering::Relaxed), 1, "a warm copy went untraced");
        // In a lane job of b, slowly overwritten first: the job's own stream orders the copy
        // after b's write, and a download after the job sees the copy.
        fill(&b, sb, &y, 9, SLOW);
        let lane = a.lane("copier").unwrap();
        let (x2, y2) = (x.clone(), y.clone());
        lane.submit(move |cx| x2.copy_to(cx.stream(), &y2)).wait().unwrap();
        assert_eq!(y.download(sb).unwrap(), vec![1; 8], "the job's copy overtook b's write");
        // A launch on b holds y (its mark) while its enqueue copies into y on a's stream: the
        // copy must not wait for the launch around it.
        let mut rec = LaunchRecorder::new_strict(sb);
        rec.write(&y).unwrap();
        let inner = rec.launch(&b, |_| Ok(x.copy_to(sa, &y))).unwrap();
        assert!(matches!(inner, Err(Error::WouldDeadlock { .. })), "{inner:?}");
        x.copy_to(sa, &y).unwrap();
        assert_eq!(y.download(sb).unwrap(), vec![1; 8]);
        no_hazards(&a);
    });
}

/// Warm peer copies from two threads on two streams into one destination, racing a third
/// thread whose kernels on the destination's device read it on one stream and rewrite it on
/// another: every use is ordered against every conflicting one (the checker sees no hazard),
/// and the destination ends whole, as one of its writers left it.
#[test]
fn warm_peer_copies_racing_uses_on_both_devices_stay_ordered() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair_with(None, 300, 29);
        let (sa, sa2) = (a.default_stream(), a.new_stream().unwrap());
        let (sb, sb2) = (b.default_stream(), b.new_stream().unwrap());
        let x = a.upload(sa, &[1u32; 64]).unwrap();
        let x2 = a.upload(sa2, &[2u32; 64]).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 64).unwrap();
        let z = b.alloc_zeros::<u32>(sb2, 64).unwrap();
        for _ in 0..3 {
            x.copy_to(sa, &y).unwrap();
            x2.copy_to(sa2, &y).unwrap();
        }
        std::thread::scope(|s| {
            s.spawn(|| (0..40).for_each(|_| x.copy_to(sa, &y).unwrap()));
            s.spawn(|| (0..40).for_each(|_| x2.copy_to(sa2, &y).unwrap()));
            s.spawn(|| {
                for i in 0..40 {
                    copy_kernel(&b, sb2, &z, &y, Duration::ZERO);
                    if i % 8 == 0 {
                        fill(&b, sb, &y, 7, Duration::from_micros(300));
                    }
                }
            });
        });
        let v = y.download(sb).unwrap();
        assert!(v.iter().all(|e| *e == v[0]) && [1, 2, 7].contains(&v[0]), "y was torn: {v:?}");
        no_hazards(&a);
    });
}

// ---- peer3-review: what the quick peer path must leave to the general one ----

/// Copies `x` into `y` on `s` three times: enough for `s` to follow `y`'s device's solo floor
/// (and to remember it), so that later copies there may take the quick path.
fn warm(x: &GpuRef<u32>, s: StreamId, y: &GpuRef<u32>) {
    for _ in 0..3 {
        x.copy_to(s, y).unwrap();
    }
}

/// In a declared lane job, a warm copy is still one of the job's uses: a destination the job
/// did not declare is `UndeclaredUse`, and a job that fails after its copy leaves the
/// destination failed (its commits' writes are listed for the job's end).
#[test]
fn review_a_warm_copy_in_a_lane_job_is_checked_against_its_declarations_and_its_failure() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let sb = b.default_stream();
        let x = a.upload(a.default_stream(), &[1u32; 8]).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 8).unwrap();
        let lane = a.lane("copier").unwrap();
        // Undeclared jobs warm the lane's stream up (they take the general path: in a job).
        for _ in 0..3 {
            let (x2, y2) = (x.clone(), y.clone());
            lane.submit(move |cx| x2.copy_to(cx.stream(), &y2)).wait().unwrap();
        }
        // Declares the source only.
        let (x2, y2) = (x.clone(), y.clone());
        let r = lane.job().read(&x).submit(move |cx, _| x2.copy_to(cx.stream(), &y2)).wait();
        assert!(matches!(r, Err(Error::UndeclaredUse { .. })), "an undeclared destination was copied into: {r:?}");
        // A job that fails after its copy: the copy's write is the job's, and fails with it.
        let (x2, y2) = (x.clone(), y.clone());
        let r = lane
            .submit(move |cx| {
                x2.copy_to(cx.stream(), &y2)?;
                Err::<(), _>(Error::Shutdown)
            })
            .wait();
        assert!(r.is_err());
        let read = y.download(sb);
        assert!(matches!(read, Err(Error::FailedInput { .. })), "the failed job's copy left y unfailed: {read:?}");
        no_hazards(&a);
    });
}

/// A stream of `a` that copies peer memory often enough to be warm for `b`, but has never
/// waited on `a`'s own solo floor, copies a buffer a solo launch of `a` wrote: it must wait
/// on the floor (the buffer's state misses the solo write), quick path or not.
#[test]
fn review_a_warm_copy_follows_its_own_devices_solo_floor() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let (x_stream, s) = (a.default_stream(), a.new_stream().unwrap());
        let sb = b.default_stream();
        // Solo mode on x_stream: the allocation and a slow write of x are solo launches.
        let x = a.alloc_zeros::<u32>(x_stream, 8).unwrap();
        fill(&a, x_stream, &x, 5, SLOW);
        let y = b.alloc_zeros::<u32>(sb, 8).unwrap();
        // The first launch on `s` closes a's solo mode (the floor lands after the slow write);
        // copies of memory made after the close warm `s` up for b without touching the floor.
        let x2 = a.alloc_zeros::<u32>(s, 8).unwrap();
        warm(&x2, s, &y);
        x.copy_to(s, &y).unwrap();
        assert_eq!(y.download(sb).unwrap(), vec![5; 8], "the copy read x before its solo write");
        no_hazards(&a);
    });
}

/// Inside a graph's recording closure, a warm copy on a stream the recording does not hold is
/// refused, as any eager op there is (it would run at every recording).
#[test]
fn review_a_warm_copy_inside_a_recording_closure_is_refused() {
    bounded(Duration::from_secs(60), || {
        let (a, b) = pair();
        let sa = a.default_stream();
        let sb = b.default_stream();
        let x = a.upload(sa, &[1u32; 8]).unwrap();
        let y = b.alloc_zeros::<u32>(sb, 8).unwrap();
        let z = a.alloc_zeros::<u32>(sa, 8).unwrap();
        warm(&x, sa, &y);
        let (tx, rx) = std::sync::mpsc::channel();
        let (xr, yr, zr) = (x.clone(), y.clone(), z.clone());
        let _ = cusched::Graph::record(&a, move |rec| {
            let branch = rec.stream(0)?;
            fill(&rec.device().clone(), branch, &zr, 3, Duration::ZERO);
            let r = xr.copy_to(sa, &yr);
            tx.send(format!("{r:?}")).ok();
            r
        });
        let r = rx.recv().unwrap();
        assert!(r.contains("Recording"), "an eager copy ran inside a recording closure: {r}");
    });
}
