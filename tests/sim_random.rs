//! Randomized multi-thread, multi-stream schedules on the simulator, checked by the shadow
//! happens-before checker; and the same schedules with fencing switched off, to prove the
//! checker fails when it should.

mod common;
use common::*;
use cusched::{Access, Device, GpuRef, LaunchRecorder};
use std::sync::Arc;
use std::time::Duration;

const STREAMS: usize = 5;
const BUFFERS: usize = 16;
const THREADS: usize = 4;
const USES: usize = 10_000;

/// Runs `USES` declared buffer uses from `THREADS` host threads over `STREAMS` streams and
/// `BUFFERS` buffers; returns how many uses were issued.
fn random_schedule(d: &Device, seed: u64) -> usize {
    let streams: Vec<_> =
        std::iter::once(d.default_stream()).chain((1..STREAMS).map(|_| d.new_stream().unwrap())).collect();
    let buffers: Arc<Vec<GpuRef<u64>>> =
        Arc::new((0..BUFFERS).map(|i| d.alloc_zeros::<u64>(streams[i % STREAMS], 8).unwrap()).collect());
    let per_thread = USES / THREADS;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (d, streams, buffers) = (d.clone(), streams.clone(), buffers.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::seeded(seed ^ ((t as u64 + 1) * 0x1234_5678));
                let mut issued = 0;
                while issued < per_thread {
                    let s = streams[rng.below(STREAMS as u64) as usize];
                    let mut rec = LaunchRecorder::new_strict(s);
                    let n = 1 + rng.below(3) as usize;
                    for _ in 0..n {
                        let b = &buffers[rng.below(BUFFERS as u64) as usize];
                        let access = match rng.below(3) {
                            0 => Access::Read,
                            1 => Access::Write,
                            _ => Access::ReadWrite,
                        };
                        rec.access(b, access).unwrap();
                    }
                    issued += n;
                    rec.launch(&d, |scope| scope.sim_kernel(|| {})).unwrap();
                }
                issued
            })
        })
        .collect();
    let issued = handles.into_iter().map(|h| h.join().unwrap()).sum();
    for s in &streams {
        d.synchronize(*s).unwrap();
    }
    drop(buffers);
    for s in &streams {
        d.synchronize(*s).unwrap();
    }
    issued
}

#[test]
fn random_schedules_leave_no_conflicting_pair_unordered() {
    let seed = Rng::new().next();
    let uses = bounded(Duration::from_secs(240), move || {
        let d = sim();
        let uses = random_schedule(&d, seed);
        let hazards = d.sim_hazards().unwrap();
        assert!(hazards.is_empty(), "seed {seed}: {} hazards, first {:?}", hazards.len(), hazards.first());
        assert!(d.sim_kernels_run().unwrap() > 0);
        uses
    });
    assert!(uses >= USES);
}

#[test]
fn without_fences_the_checker_reports_hazards() {
    let seed = Rng::new().next();
    bounded(Duration::from_secs(240), move || {
        let d = sim_with(false);
        random_schedule(&d, seed);
        let hazards = d.sim_hazards().unwrap();
        assert!(!hazards.is_empty(), "seed {seed}: fencing was off, yet no hazard was found");
        assert_eq!(d.stats().waits, 0);
    });
}

#[test]
fn free_waits_for_outstanding_uses_on_other_streams() {
    let d = Device::sim(cusched::SimConfig {
        min_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(4),
        ..Default::default()
    })
    .unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    for _ in 0..20 {
        let a = d.upload(s0, &[1u32; 16]).unwrap();
        let mut rec = LaunchRecorder::new_strict(s1);
        rec.read(&a).unwrap();
        let data = a.sim_data().unwrap();
        rec.launch(&d, move |scope| scope.sim_kernel(move || assert_eq!(data.read()[0], 1))).unwrap();
        drop(a); // freed on s0 while s1's slow read is pending: the free must wait for it
    }
    d.synchronize(s0).unwrap();
    d.synchronize(s1).unwrap();
    assert!(d.sim_hazards().unwrap().is_empty(), "{:?}", d.sim_hazards().unwrap());
}

#[test]
fn unfenced_free_is_reported() {
    let d = Device::sim(cusched::SimConfig {
        min_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
        fence_mutation: Some(cusched::FenceMutation::NoFences),
        ..Default::default()
    })
    .unwrap();
    let (s0, s1) = (d.default_stream(), d.new_stream().unwrap());
    let a = d.upload(s0, &[1u32; 4]).unwrap();
    let id = a.id();
    d.synchronize(s0).unwrap();
    let mut rec = LaunchRecorder::new_strict(s1);
    rec.read(&a).unwrap();
    rec.launch(&d, |scope| scope.sim_kernel(|| std::thread::sleep(Duration::from_millis(20)))).unwrap();
    drop(a);
    d.synchronize(s0).unwrap();
    d.synchronize(s1).unwrap();
    let h = d.sim_hazards().unwrap();
    // Whichever of the read and the unfenced free runs first, the pair is reported.
    assert!(
        h.iter().any(|h| h.buffer == id
            && matches!(h.kind, cusched::HazardKind::WriteAfterRead | cusched::HazardKind::ReadAfterWrite)),
        "{h:?}"
    );
}
