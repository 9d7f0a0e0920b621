//! Randomized multi-thread, multi-stream schedules on the simulator, checked by the shadow
//! happens-before checker; and the same schedules with fencing switched off, to prove the
//! checker fails when it should.
//!
//! The mixed workloads (`mixed_*`) drive every kind of op from several host threads at once:
//! allocations, uploads, kernels over random buffer sets (some through lanes, some holding
//! their preflight open across a sleep before committing), device and host copies, host
//! reads and writes, and frees mid-run; one of them also faults the simulated context and
//! goes on after the rebuild. Each thread checks its own buffers against a CPU model; buffers
//! shared by all threads only receive commutative additions, whose totals are checked.

use crate::common::*;
use cusched::{Access, Completion, Device, DeviceConfig, Error, GpuRef, HostBuffer, Lane, LaunchRecorder, StreamId};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
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
        fail_on_hazard: false,
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

const LEN: usize = 16;
const MIXED_THREADS: usize = 4;
const MIXED_STREAMS: usize = 4;
const SHARED: usize = 3;

/// What every worker thread of a mixed workload shares.
struct World {
    d: Device,
    streams: Vec<StreamId>,
    lanes: Vec<Lane>,
    /// Buffers all threads add to and read; replaced by the main thread between phases.
    shared: RwLock<Arc<Vec<GpuRef<u64>>>>,
    /// Set just before the context is faulted: from then on, errors from the old context are
    /// expected until the thread starts over with fresh buffers.
    faulting: AtomicBool,
    /// Each thread's sums added to the shared buffers in the current phase.
    adds: Mutex<Vec<Vec<u64>>>,
    /// Whether data mismatches around the rebuild fail the test too.
    strict_across_fault: bool,
    /// Data mismatches let through around the rebuild.
    tolerated: AtomicUsize,
    /// Set when a worker panicked, so that the others stop waiting for it.
    failed: AtomicBool,
    gate: Gate,
    seed: u64,
}

/// A barrier that gives up when a worker has failed, so a failing assertion is reported as
/// itself instead of as a hang.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self, parties: usize, failed: &AtomicBool) {
        let mut st = self.state.lock().unwrap();
        let round = st.1;
        st.0 += 1;
        if st.0 == parties {
            *st = (0, round + 1);
            self.cv.notify_all();
            return;
        }
        while st.1 == round {
            assert!(!failed.load(Ordering::SeqCst), "another worker failed");
            st = self.cv.wait_timeout(st, Duration::from_millis(50)).unwrap().0;
        }
    }
}

/// One thread's buffers and their expected contents.
#[derive(Default)]
struct Private {
    dev: Vec<(GpuRef<u64>, Vec<u64>)>,
    host: Vec<(HostBuffer<u64>, Vec<u64>)>,
    jobs: Vec<Completion<()>>,
    /// Per shared buffer, the sum this thread added.
    adds: Vec<u64>,
}

/// A kernel: `out = (out if read-write) + sum(ins) + c`, element-wise and wrapping; it also
/// reads one shared buffer and adds `k` to another when asked.
struct Kernel {
    out: (usize, bool),
    ins: Vec<usize>,
    shared_read: Option<usize>,
    shared_add: Option<(usize, u64)>,
    c: u64,
}

impl Kernel {
    fn random(rng: &mut Rng, buffers: usize, shared_ok: bool) -> Kernel {
        let out = rng.below(buffers as u64) as usize;
        let mut ins = Vec::new();
        for _ in 0..rng.below(3) {
            let i = rng.below(buffers as u64) as usize;
            if i != out && !ins.contains(&i) {
                ins.push(i);
            }
        }
        let (shared_read, shared_add) = if shared_ok {
            let r = rng.below(SHARED as u64 + 1) as usize;
            let a = rng.below(SHARED as u64 + 1) as usize;
            ((r < SHARED).then_some(r), (a < SHARED && a != r).then(|| (a, 1 + rng.below(100))))
        } else {
            (None, None)
        };
        Kernel { out: (out, rng.below(2) == 0), ins, shared_read, shared_add, c: rng.below(1000) }
    }

    /// The buffers the kernel uses, and how.
    fn uses(&self, p: &Private, shared: &[GpuRef<u64>]) -> Vec<(GpuRef<u64>, Access)> {
        let (o, rw) = self.out;
        let mut uses = vec![(p.dev[o].0.clone(), if rw { Access::ReadWrite } else { Access::Write })];
        uses.extend(self.ins.iter().map(|&i| (p.dev[i].0.clone(), Access::Read)));
        uses.extend(self.shared_read.map(|j| (shared[j].clone(), Access::Read)));
        uses.extend(self.shared_add.map(|(j, _)| (shared[j].clone(), Access::ReadWrite)));
        uses
    }

    /// The simulated kernel, touching exactly what `declare` declared.
    fn body(&self, p: &Private, shared: &[GpuRef<u64>]) -> cusched::Result<impl FnOnce() + Send + 'static> {
        let (o, rw) = self.out;
        let out = p.dev[o].0.sim_data()?;
        let ins = self.ins.iter().map(|&i| p.dev[i].0.sim_data()).collect::<cusched::Result<Vec<_>>>()?;
        let sr = self.shared_read.map(|j| shared[j].sim_data()).transpose()?;
        let sa = self.shared_add.map(|(j, k)| shared[j].sim_data().map(|m| (m, k))).transpose()?;
        let c = self.c;
        Ok(move || {
            let mut acc = vec![c; LEN];
            for m in &ins {
                acc.iter_mut().zip(m.read().iter()).for_each(|(a, x)| *a = a.wrapping_add(*x));
            }
            if let Some(m) = &sr {
                assert_eq!(m.read().len(), LEN);
            }
            if let Some((m, k)) = &sa {
                m.lock().iter_mut().for_each(|x| *x = x.wrapping_add(*k));
            }
            let mut o = out.lock();
            if rw {
                acc.iter_mut().zip(o.iter()).for_each(|(a, x)| *a = a.wrapping_add(*x));
            }
            o.copy_from_slice(&acc);
        })
    }

    /// Applies the kernel to the CPU model.
    fn apply(&self, p: &mut Private) {
        let (o, rw) = self.out;
        let mut acc = vec![self.c; LEN];
        for &i in &self.ins {
            acc.iter_mut().zip(&p.dev[i].1).for_each(|(a, x)| *a = a.wrapping_add(*x));
        }
        if rw {
            acc.iter_mut().zip(&p.dev[o].1).for_each(|(a, x)| *a = a.wrapping_add(*x));
        }
        p.dev[o].1 = acc;
        if let Some((j, k)) = self.shared_add {
            p.adds[j] = p.adds[j].wrapping_add(k);
        }
    }
}

fn declare(rec: &mut LaunchRecorder, uses: &[(GpuRef<u64>, Access)]) -> cusched::Result<()> {
    for (b, a) in uses {
        rec.access(b, *a)?;
    }
    Ok(())
}

fn random_data(rng: &mut Rng) -> Vec<u64> {
    (0..LEN).map(|_| rng.below(1 << 20)).collect()
}

/// One random op. Data mismatches panic; driver-level failures come back as errors.
fn random_op(w: &World, rng: &mut Rng, p: &mut Private, shared_ok: bool) -> cusched::Result<()> {
    let d = &w.d;
    let s = w.streams[rng.below(w.streams.len() as u64) as usize];
    let shared = w.shared.read().unwrap().clone();
    match rng.below(10) {
        // Allocations: uploaded, zeroed, or uninitialised then filled from another stream.
        0 | 1 if p.dev.len() < 6 => {
            let data = random_data(rng);
            let buf = match rng.below(3) {
                0 => d.upload(s, &data)?,
                1 => {
                    let b = d.alloc_zeros::<u64>(s, LEN)?;
                    p.dev.push((b, vec![0; LEN]));
                    return Ok(());
                }
                _ => {
                    let b = d.alloc::<u64>(s, LEN)?;
                    b.copy_from_slice(w.streams[rng.below(w.streams.len() as u64) as usize], &data)?;
                    b
                }
            };
            p.dev.push((buf, data));
        }
        // Kernels: on the caller's thread, holding the preflight across a sleep, or on a lane.
        2..=4 if !p.dev.is_empty() => {
            let k = Kernel::random(rng, p.dev.len(), shared_ok);
            let (uses, body) = (k.uses(p, &shared), k.body(p, &shared)?);
            match rng.below(3) {
                0 => {
                    let mut rec = LaunchRecorder::new_strict(s);
                    declare(&mut rec, &uses)?;
                    rec.launch(d, move |scope| scope.sim_kernel(body))?;
                }
                1 => {
                    let mut rec = LaunchRecorder::new_strict(s);
                    declare(&mut rec, &uses)?;
                    let launch = rec.preflight(d)?;
                    launch.scope().sim_kernel(body)?;
                    // Other threads' conflicting preflights wait for this commit meanwhile.
                    std::thread::sleep(Duration::from_micros(rng.below(1500)));
                    launch.commit()?;
                }
                _ => {
                    let lane = &w.lanes[rng.below(w.lanes.len() as u64) as usize];
                    let job = lane.submit(move |cx| {
                        let mut rec = cx.recorder();
                        declare(&mut rec, &uses)?;
                        rec.launch(cx.device(), move |scope| scope.sim_kernel(body))
                    });
                    // Later ops of this thread must follow the job in program order.
                    job.wait_committed().expect("a worker thread is not a lane job");
                    p.jobs.push(job);
                }
            }
            k.apply(p);
        }
        // Frees mid-run, sometimes after checking the contents.
        5 if p.dev.len() > 1 => {
            let (b, model) = p.dev.swap_remove(rng.below(p.dev.len() as u64) as usize);
            if rng.below(2) == 0 {
                jobs_done(p)?;
                check_data(w, &b.download(s)?, &model, &format!("{b:?} before its free"));
            }
            drop(b);
        }
        6 if !p.dev.is_empty() => {
            let i = rng.below(p.dev.len() as u64) as usize;
            jobs_done(p)?;
            check_data(w, &p.dev[i].0.download(s)?, &p.dev[i].1, &format!("{:?}", p.dev[i].0));
        }
        7 if p.dev.len() > 1 => {
            let (a, b) = (rng.below(p.dev.len() as u64) as usize, rng.below(p.dev.len() as u64) as usize);
            if a != b {
                p.dev[a].0.copy_from(s, &p.dev[b].0)?;
                p.dev[a].1 = p.dev[b].1.clone();
            }
        }
        // Pinned host buffers: allocate, copy both ways, read, write, free.
        8 | 9 => {
            if p.host.len() < 3 {
                let h = if rng.below(2) == 0 {
                    let data = random_data(rng);
                    (d.host_from_slice(&data)?, data)
                } else {
                    (d.alloc_host(LEN)?, vec![0; LEN])
                };
                p.host.push(h);
                return Ok(());
            }
            let h = rng.below(p.host.len() as u64) as usize;
            match rng.below(5) {
                0 if !p.dev.is_empty() => {
                    let i = rng.below(p.dev.len() as u64) as usize;
                    p.dev[i].0.copy_to_host(s, &mut p.host[h].0)?;
                    p.host[h].1 = p.dev[i].1.clone();
                }
                1 if !p.dev.is_empty() => {
                    let i = rng.below(p.dev.len() as u64) as usize;
                    p.dev[i].0.copy_from_host(s, &p.host[h].0)?;
                    p.dev[i].1 = p.host[h].1.clone();
                }
                2 => {
                    jobs_done(p)?;
                    let got = p.host[h].0.read()?.to_vec();
                    check_data(w, &got, &p.host[h].1, &format!("{:?}", p.host[h].0));
                }
                3 => {
                    let data = random_data(rng);
                    p.host[h].0.write()?.copy_from_slice(&data);
                    p.host[h].1 = data;
                }
                _ => drop(p.host.swap_remove(h)),
            }
        }
        _ => {}
    }
    Ok(())
}

/// Waits for the thread's lane jobs, so that a check sees their failures before their data:
/// `wait_committed` does not report a job's outcome, and a job racing the rebuild can fail
/// (and leave its buffers unchanged) while the buffers stay usable in the new context.
fn jobs_done(p: &mut Private) -> cusched::Result<()> {
    for job in p.jobs.drain(..) {
        job.wait()?;
    }
    Ok(())
}

/// Checks every buffer of `p` against its model, waits for its lane jobs, and frees it all.
fn settle(w: &World, p: &mut Private) -> cusched::Result<()> {
    jobs_done(p)?;
    for (b, model) in &p.dev {
        check_data(w, &b.download(w.streams[0])?, model, &format!("{b:?}"));
    }
    for (h, model) in &p.host {
        check_data(w, &h.read()?, model, &format!("{h:?}"));
    }
    p.dev.clear();
    p.host.clear();
    Ok(())
}

/// Compares a buffer's contents with its model. Around a rebuild (while `faulting`), a
/// mismatch is counted instead unless the world is strict: see
/// `mixed_workload_data_stays_correct_across_a_fault`.
fn check_data(w: &World, got: &[u64], model: &[u64], what: &str) {
    if got == model {
        return;
    }
    if w.faulting.load(Ordering::SeqCst) && !w.strict_across_fault {
        w.tolerated.fetch_add(1, Ordering::SeqCst);
        return;
    }
    panic!("seed {}: {what} (generation {}): got {got:?}, expected {model:?}", w.seed, w.d.generation());
}

/// `e` for messages. A driver status is shown by its code: formatting cudarc's `DriverError`
/// asks the CUDA library for its text, which panics where there is none.
fn describe(e: &Error) -> String {
    match e {
        Error::Driver { call, status } => format!("{call} failed: {:?}", status.0),
        e => e.to_string(),
    }
}

/// Whether `e` is what work of a faulted context may fail with.
fn fault_error(e: &Error) -> bool {
    matches!(e, Error::ContextPoisoned { .. } | Error::Stale { .. } | Error::Driver { .. })
}

/// `ops` random ops on one thread, starting from no buffers and ending with none; returns the
/// sums added to each shared buffer. With `fault_at`, the thread faults the context at that op.
fn run_phase(w: &World, rng: &mut Rng, ops: usize, fault_at: Option<usize>) -> Vec<u64> {
    let mut p = Private { adds: vec![0; SHARED], ..Default::default() };
    // After a fault error the thread starts over with fresh buffers, and leaves the shared
    // buffers (of the old context) alone.
    let mut shared_ok = true;
    for n in 0..ops {
        if fault_at == Some(n) {
            w.faulting.store(true, Ordering::SeqCst);
            let generation = w.d.generation();
            let err = cusched::Handles::new(&w.d, w.streams[0])
                .unwrap()
                .run(|cx| cx.recorder().launch(cx.device(), |s| s.sim_fault()))
                .wait()
                .expect_err("the faulting job fails");
            assert!(matches!(err, Error::ContextPoisoned { .. }), "seed {}: {}", w.seed, describe(&err));
            assert!(w.d.generation() > generation, "seed {}: the device rebuilt", w.seed);
        }
        if let Err(e) = random_op(w, rng, &mut p, shared_ok) {
            assert!(w.faulting.load(Ordering::SeqCst) && fault_error(&e), "seed {}: op {n}: {}", w.seed, describe(&e));
            p = Private { adds: vec![0; SHARED], ..Default::default() };
            shared_ok = false;
        }
    }
    match settle(w, &mut p) {
        Ok(()) => {}
        Err(e) => {
            assert!(w.faulting.load(Ordering::SeqCst) && fault_error(&e), "seed {}: settle: {}", w.seed, describe(&e))
        }
    }
    p.adds
}

fn mixed_world(seed: u64, strict_across_fault: bool) -> Arc<World> {
    let d = Device::sim_with(
        cusched::SimConfig { max_delay: Duration::from_micros(40), seed, ..Default::default() },
        // A loaded machine is not a hang: preflights wait out other threads' sleeps. The
        // threads' additions to the shared buffers commute: the workload means commit order,
        // which the check of submit order would report.
        DeviceConfig {
            preflight_timeout: Duration::from_secs(60),
            submit_order: cusched::SubmitOrderCheck::Off,
            ..DeviceConfig::default()
        },
    )
    .unwrap();
    let streams: Vec<_> =
        std::iter::once(d.default_stream()).chain((1..MIXED_STREAMS).map(|_| d.new_stream().unwrap())).collect();
    let lanes = (0..2).map(|i| d.lane(&format!("lane{i}")).unwrap()).collect();
    let shared = RwLock::new(Arc::new(fresh_shared(&d, &streams)));
    Arc::new(World {
        d,
        streams,
        lanes,
        shared,
        faulting: AtomicBool::new(false),
        adds: Mutex::default(),
        strict_across_fault,
        tolerated: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        gate: Gate::default(),
        seed,
    })
}

fn fresh_shared(d: &Device, streams: &[StreamId]) -> Vec<GpuRef<u64>> {
    (0..SHARED).map(|j| d.alloc_zeros::<u64>(streams[j % streams.len()], LEN).unwrap()).collect()
}

/// Checks the shared buffers hold the sums every thread added.
fn check_shared(w: &World, adds: &[Vec<u64>]) {
    let shared = w.shared.read().unwrap().clone();
    for (j, b) in shared.iter().enumerate() {
        let total = adds.iter().fold(0u64, |t, a| t.wrapping_add(a[j]));
        assert_eq!(b.download(w.streams[1]).unwrap(), vec![total; LEN], "seed {}: shared {j}", w.seed);
    }
}

fn assert_no_hazards(w: &World, when: &str) {
    for s in w.streams.iter().copied().chain(w.lanes.iter().map(Lane::stream)) {
        w.d.synchronize(s).unwrap();
    }
    let hazards = w.d.sim_hazards().unwrap();
    assert!(hazards.is_empty(), "seed {}: {when}: {} hazards, first {:?}", w.seed, hazards.len(), hazards.first());
}

/// Runs `phases` (ops per thread, and whether thread 0 faults the context at a random op)
/// on `MIXED_THREADS` threads. After each phase, with every thread waiting, the main thread
/// checks the hazards and the shared sums (unless the phase faulted: the faulted context's
/// history went with it), then hands out fresh shared buffers. Returns the data mismatches
/// tolerated around the rebuild.
fn mixed(seed: u64, phases: &'static [(usize, bool)], strict_across_fault: bool) -> usize {
    let w = mixed_world(seed, strict_across_fault);
    let parties = MIXED_THREADS + 1;
    let threads: Vec<_> = (0..MIXED_THREADS)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                let body = std::panic::AssertUnwindSafe(|| {
                    let mut rng = Rng::seeded(w.seed ^ ((t as u64 + 1) * 0x9E37_79B9));
                    for &(ops, fault) in phases {
                        let fault_at = (fault && t == 0).then(|| rng.below(ops as u64) as usize);
                        let adds = run_phase(&w, &mut rng, ops, fault_at);
                        w.adds.lock().unwrap().push(adds);
                        w.gate.wait(parties, &w.failed); // phase done
                        w.gate.wait(parties, &w.failed); // checked, fresh shared buffers
                    }
                });
                if let Err(panic) = std::panic::catch_unwind(body) {
                    w.failed.store(true, Ordering::SeqCst);
                    std::panic::resume_unwind(panic);
                }
            })
        })
        .collect();
    let main = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (i, &(_, fault)) in phases.iter().enumerate() {
            w.gate.wait(parties, &w.failed);
            let adds = std::mem::take(&mut *w.adds.lock().unwrap());
            if fault {
                assert!(w.faulting.load(Ordering::SeqCst), "seed {seed}: phase {i} faulted");
                w.faulting.store(false, Ordering::SeqCst);
            } else {
                check_shared(&w, &adds);
            }
            assert_no_hazards(&w, &format!("after phase {i}"));
            *w.shared.write().unwrap() = Arc::new(fresh_shared(&w.d, &w.streams));
            w.gate.wait(parties, &w.failed);
        }
    }));
    if main.is_err() {
        w.failed.store(true, Ordering::SeqCst);
    }
    // A worker's own panic says more than the main thread's "another worker failed".
    for t in threads {
        if let Err(panic) = t.join() {
            std::panic::resume_unwind(panic);
        }
    }
    if let Err(panic) = main {
        std::panic::resume_unwind(panic);
    }
    assert_no_hazards(&w, "end");
    assert!(w.d.sim_kernels_run().unwrap() > 0);
    w.tolerated.load(Ordering::SeqCst)
}

#[test]
fn mixed_workload_from_several_threads_is_ordered_and_correct() {
    let seed = Rng::new().next();
    let tolerated = bounded(Duration::from_secs(240), move || mixed(seed, &[(300, false), (300, false)], true));
    assert_eq!(tolerated, 0);
}

#[test]
fn mixed_workload_goes_on_after_a_fault_and_rebuild() {
    let seed = Rng::new().next();
    let tolerated =
        bounded(Duration::from_secs(240), move || mixed(seed, &[(150, false), (150, true), (300, false)], false));
    if tolerated > 0 {
        eprintln!("seed {seed}: {tolerated} data mismatches around the rebuild (see the strict test)");
    }
}

/// The same workload, failing on any data mismatch around the rebuild too: an op that races the
/// rebuild must fail rather than come back `Ok` without its work having run (a commit marks the
/// end of its work only in the context the work went to).
#[test]
fn mixed_workload_data_stays_correct_across_a_fault() {
    let seed = Rng::new().next();
    bounded(Duration::from_secs(240), move || mixed(seed, &[(150, false), (150, true), (300, false)], true));
}
