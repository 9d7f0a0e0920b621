//! All-reduce bus bandwidth on two GPUs of one process, cusched against raw NCCL on the same
//! buffers, side by side in one run (alternating, medians of several repetitions), from 8 KiB
//! to 1 GiB, then the small-message latency of both.
//!
//! cusched: one `Communicator::init_all` over both GPUs (blocking communicators, the default),
//! each iteration one `nccl::group` of both ranks' `all_reduce_in_place` (tracked ops, fenced,
//! with completions); the latency again with non-blocking communicators. Raw: NCCL's own
//! communicators (`ncclCommInitAll`, blocking), `ncclGroupStart`, two `ncclAllReduce` on the
//! same device buffers, `ncclGroupEnd`, on streams of their own; for the non-blocking latency,
//! NCCL's own non-blocking communicators (`ncclCommInitRankConfig` with `blocking = 0`), each
//! group followed by polling `ncclCommGetAsyncError` until NCCL's launch is done, as their
//! user must. Bus bandwidth is NCCL's
//! (`bytes / time * 2 (n - 1) / n`, which for two ranks is the algorithm bandwidth).
//!
//! Then the same sizes with one thread per GPU on both sides (each thread enqueues its own
//! rank's op, no group), the way `examples/data_parallel.rs` drives its GPUs.
//!
//! `raw+events/op` (both tables) is raw NCCL with one `cuEventRecord` per rank's stream after
//! each group (each op, one thread per GPU): the
//! event every tracked op records on a device of several streams (contract clause 2), so the
//! floor of a tracked collective; `vs floor` is cusched against it.
//!
//! `bench-nccl` needs NCCL on the loader path (`. tools/cuda-libs-env`); it sets
//! `NCCL_NVLS_ENABLE=0`. With one GPU it runs every table on two contexts of it
//! (`Device::open` and `Device::open_isolated`), each with a one-rank communicator of its own
//! (raw NCCL's made in the same contexts): nothing crosses a link and the GPU has next to
//! nothing to do, so each op costs its host enqueue, and cusched's time over raw's is its op
//! path around NCCL's call, with what two GPUs add to it on the host (a group's two contexts,
//! two threads' shared state); the goal needs two GPUs. `--single` runs one context alone.
//! Compare with `python3 benches/torch_allreduce.py` on the same GPUs. The goal: at least
//! 0.98x raw NCCL's bus bandwidth from 1 MiB up.

mod common;

use common::*;
use cusched::cudarc::driver::{CudaEvent, CudaStream};
use cusched::cudarc::nccl::sys;
use cusched::nccl::{self, CommConfig, Communicator, ReduceOp};
use cusched::{Device, DeviceConfig, GpuRef, Handles};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const REPS: usize = 5;

/// NCCL's own communicators and streams over both GPUs.
struct Raw {
    comms: Vec<sys::ncclComm_t>,
    /// Whether the communicators are blocking; a non-blocking one is polled after each group
    /// until NCCL has finished its launch, as its user must before the next call.
    blocking: bool,
    streams: Vec<Arc<CudaStream>>,
    /// One event per stream, for the floor of a tracked collective (see [`Raw::time`]).
    events: Vec<CudaEvent>,
    /// Whether the communicators are one-rank ones on contexts of one GPU, each made current
    /// before its call (NCCL would otherwise run it in the GPU's primary context).
    contexts_of_one_gpu: bool,
}

impl Raw {
    fn new(gpus: &[Device], one_rank_each: bool) -> Res<Raw> {
        if one_rank_each {
            return Raw::one_rank_each(gpus);
        }
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        let devs: Vec<i32> = gpus.iter().map(|g| g.ordinal() as i32).collect();
        // SAFETY: `comms` has room for one communicator per device in `devs`.
        let r = unsafe { sys::ncclCommInitAll(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) };
        check(r, "ncclCommInitAll")?;
        Raw::with_comms(gpus, comms, true)
    }

    /// A blocking one-rank communicator on each of `gpus` (contexts of one GPU), each made with
    /// its device's context current, as cusched makes its own.
    fn one_rank_each(gpus: &[Device]) -> Res<Raw> {
        let mut comms = Vec::with_capacity(gpus.len());
        for g in gpus {
            let mut id = sys::ncclUniqueId { internal: [0; 128] };
            // SAFETY: a valid out-pointer.
            check(unsafe { sys::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId")?;
            // SAFETY: no cudarc memory is made from the context; binding it makes it current for
            // the rank's init, as NCCL requires.
            unsafe { g.cuda_context() }?.bind_to_thread()?;
            let mut comm = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; the device's context is current.
            check(unsafe { sys::ncclCommInitRank(&mut comm, 1, id, 0) }, "ncclCommInitRank")?;
            comms.push(comm);
        }
        Raw::with_comms(gpus, comms, true)
    }

    /// Non-blocking communicators (`ncclConfig_t::blocking = 0`) over `gpus`, made in one group
    /// as the NCCL guide does it, each rank with its device's context current.
    fn new_non_blocking(gpus: &[Device]) -> Res<Raw> {
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: a valid out-pointer.
        check(unsafe { sys::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId")?;
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        // SAFETY: the group is ended below whatever happens in it.
        check(unsafe { sys::ncclGroupStart() }, "ncclGroupStart")?;
        let mut made = Ok(());
        for (rank, (g, comm)) in gpus.iter().zip(comms.iter_mut()).enumerate() {
            let mut cfg = non_blocking_config();
            // SAFETY: no cudarc memory is made from the context; binding it makes it current
            // for this rank's init, as NCCL requires.
            let bound: Res<()> = unsafe { g.cuda_context() }
                .map_err(|e| e.into())
                .and_then(|c| c.bind_to_thread().map_err(|e| e.into()));
            made = bound.and_then(|()| {
                // SAFETY: valid out-pointer and config; the rank's context is current.
                let r = unsafe { sys::ncclCommInitRankConfig(comm, gpus.len() as i32, id, rank as i32, &mut cfg) };
                check(r, "ncclCommInitRankConfig")
            });
            if made.is_err() {
                break;
            }
        }
        // SAFETY: ends the group opened above.
        let ended = check(unsafe { sys::ncclGroupEnd() }, "ncclGroupEnd");
        made?;
        ended?;
        let raw = Raw::with_comms(gpus, comms, false)?;
        raw.wait_ready()?;
        Ok(raw)
    }

    /// One `Raw` over the communicators of `each` (all blocking or all not).
    fn merged(each: Vec<Raw>) -> Raw {
        let blocking = each.iter().all(|r| r.blocking);
        let mut all =
            Raw { comms: Vec::new(), blocking, streams: Vec::new(), events: Vec::new(), contexts_of_one_gpu: true };
        for mut r in each {
            all.comms.append(&mut r.comms);
            all.streams.append(&mut r.streams);
            all.events.append(&mut r.events);
        }
        all
    }

    fn with_comms(gpus: &[Device], comms: Vec<sys::ncclComm_t>, blocking: bool) -> Res<Raw> {
        let (mut streams, mut events) = (Vec::with_capacity(gpus.len()), Vec::with_capacity(gpus.len()));
        for g in gpus {
            // SAFETY: 1. the raw side's streams enqueue only its own NCCL calls and event
            // records, on buffers cusched owns but does not use meanwhile (every cusched op is
            // waited for before they run, and they are synchronized before cusched's next);
            // 2. no cudarc memory is made from the context.
            let ctx = unsafe { g.cuda_context() }?;
            streams.push(ctx.new_stream()?);
            events.push(ctx.new_event(None)?);
        }
        Ok(Raw { comms, blocking, streams, events, contexts_of_one_gpu: false })
    }

    /// Polls every communicator until NCCL is done with its last call (non-blocking ones).
    fn wait_ready(&self) -> Res<()> {
        if self.blocking {
            return Ok(());
        }
        for &c in &self.comms {
            loop {
                let mut state = sys::ncclResult_t::ncclSuccess;
                // SAFETY: a live communicator and a valid out-pointer.
                check(unsafe { sys::ncclCommGetAsyncError(c, &mut state) }, "ncclCommGetAsyncError")?;
                match state {
                    sys::ncclResult_t::ncclInProgress => std::thread::yield_now(),
                    s => break check(s, "the communicator's async state")?,
                }
            }
        }
        Ok(())
    }

    /// Seconds per all-reduce of `bufs` (one per GPU), `iters` of them then a synchronize.
    /// With `event`, each group is followed by one `cuEventRecord` on each rank's stream: what
    /// every tracked op on a device of several streams adds to the driver calls (contract
    /// clause 2), the floor of a tracked collective.
    fn time(&self, bufs: &[(u64, usize)], iters: usize, event: bool) -> Res<f64> {
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: 1. the communicators and streams are live; 2. each pointer is a live
            // buffer of `n` f32 on its communicator's device, used by nothing else until the
            // synchronize below.
            unsafe {
                check(sys::ncclGroupStart(), "ncclGroupStart")?;
                let mut reduced = Ok(());
                for ((&(p, n), &comm), s) in bufs.iter().zip(&self.comms).zip(&self.streams) {
                    if self.contexts_of_one_gpu {
                        // Each communicator runs in its own context of the GPU: current for its call.
                        reduced = reduced.and(s.context().bind_to_thread().map_err(|e| e.into()));
                    }
                    let ptr = p as *mut std::ffi::c_void;
                    let t = sys::ncclDataType_t::ncclFloat32;
                    let r = sys::ncclAllReduce(ptr, ptr, n, t, sys::ncclRedOp_t::ncclSum, comm, s.cu_stream() as _);
                    reduced = reduced.and(check(r, "ncclAllReduce"));
                }
                // Ended whatever happened in it: a group left open breaks later calls.
                let ended = check(sys::ncclGroupEnd(), "ncclGroupEnd");
                reduced?;
                ended?;
            }
            self.wait_ready()?;
            if event {
                for (e, s) in self.events.iter().zip(&self.streams) {
                    e.record(s)?;
                }
            }
        }
        for s in &self.streams {
            s.synchronize()?;
        }
        Ok(t.elapsed().as_secs_f64() / iters as f64)
    }
}

/// `r` as an error naming `call` unless it is success (or, for a non-blocking call, in progress).
fn check(r: sys::ncclResult_t, call: &str) -> Res<()> {
    match r {
        sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
        r => Err(format!("{call}: {r:?}").into()),
    }
}

/// The config of a non-blocking communicator, every other field left to NCCL: nccl.h's
/// `NCCL_CONFIG_INITIALIZER`, with undefined ints `INT_MIN` and pointers null. (The crate has
/// its own; the raw side of the bench uses none of the crate's NCCL code.)
fn non_blocking_config() -> sys::ncclConfig_t {
    const UNDEF: i32 = i32::MIN;
    sys::ncclConfig_t {
        size: std::mem::size_of::<sys::ncclConfig_t>(),
        magic: 0xcafe_beef,
        // NCCL_VERSION(2, 28, 0): the layout this struct has.
        version: 22800,
        blocking: 0,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
        nChannelsPerNetPeer: UNDEF,
        nvlinkCentricSched: UNDEF,
    }
}

/// A raw communicator handed to the thread that drives its rank.
struct RankComm(sys::ncclComm_t);
// SAFETY: an NCCL communicator may be used from any thread; each is used by one thread at a
// time (its rank's), and the main thread only destroys them after joining.
unsafe impl Send for RankComm {}

impl Raw {
    /// Seconds per all-reduce with one thread per rank, each enqueueing its own `ncclAllReduce`
    /// (no group: the ranks meet on the GPUs), `iters` of them then a synchronize of its stream;
    /// timed from a barrier that starts every thread to the last thread's end. With `event`,
    /// each op is followed by one `cuEventRecord` on its rank's stream (the floor, as in
    /// [`Raw::time`]).
    fn time_threads(&self, bufs: &[(u64, usize)], iters: usize, event: bool) -> Res<f64> {
        // Its threads neither poll nor accept `ncclInProgress`: blocking communicators only.
        debug_assert!(self.blocking, "time_threads runs on blocking communicators");
        let start = std::sync::Barrier::new(bufs.len() + 1);
        std::thread::scope(|scope| {
            let mut threads = Vec::new();
            let ranks = bufs.iter().zip(&self.comms).zip(&self.streams).zip(&self.events);
            for (((&(p, n), &comm), s), e) in ranks {
                let (comm, start) = (RankComm(comm), &start);
                threads.push(scope.spawn(move || -> Result<(), String> {
                    let comm = comm;
                    s.context().bind_to_thread().map_err(|e| e.to_string())?;
                    start.wait();
                    let ptr = p as *mut std::ffi::c_void;
                    for _ in 0..iters {
                        // SAFETY: 1. the communicator and stream are live, used by this thread
                        // only; 2. the pointer is a live buffer of `n` f32 on the communicator's
                        // device, used by nothing else until the synchronize below.
                        let r = unsafe {
                            let t = sys::ncclDataType_t::ncclFloat32;
                            sys::ncclAllReduce(ptr, ptr, n, t, sys::ncclRedOp_t::ncclSum, comm.0, s.cu_stream() as _)
                        };
                        if r != sys::ncclResult_t::ncclSuccess {
                            return Err(format!("ncclAllReduce: {r:?}"));
                        }
                        if event {
                            e.record(s).map_err(|e| e.to_string())?;
                        }
                    }
                    s.synchronize().map_err(|e| e.to_string())
                }));
            }
            start.wait();
            let t = Instant::now();
            for th in threads {
                th.join().map_err(|_| "a rank's thread panicked")??;
            }
            Ok(t.elapsed().as_secs_f64() / iters as f64)
        })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if !self.blocking {
            // A non-blocking communicator is finalized first, every rank before any is waited
            // for (the ranks meet in it), then polled until done: its destroy would otherwise
            // leave the teardown to NCCL's thread, which the process's exit may cut short.
            for &c in &self.comms {
                // SAFETY: a live communicator with no op pending (each group was waited for).
                let _ = unsafe { sys::ncclCommFinalize(c) };
            }
            if let Err(e) = self.wait_ready() {
                eprintln!("bench-nccl: finalizing the raw non-blocking communicators: {e}");
            }
        }
        for &c in &self.comms {
            // SAFETY: a live communicator with no op pending (every stream was synchronized),
            // finalized if non-blocking.
            unsafe { sys::ncclCommDestroy(c) };
        }
    }
}

/// Seconds per all-reduce through cusched: `iters` groups of both ranks' ops, then a wait.
fn ours(h: &mut [Handles], comms: &[Communicator], bufs: &[GpuRef<f32>], iters: usize) -> Res<f64> {
    let t = Instant::now();
    let mut last = Vec::new();
    for _ in 0..iters {
        last = nccl::group(|| {
            let mut done = Vec::with_capacity(2);
            for ((h, c), b) in h.iter_mut().zip(comms).zip(bufs) {
                done.push(h.nccl()?.all_reduce_in_place(c, b, ReduceOp::Sum)?);
            }
            Ok(done)
        })?;
    }
    for r in cusched::wait_all(last) {
        r?;
    }
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}

/// Seconds per all-reduce through cusched with one thread per rank, each with its device's
/// handles calling its own `all_reduce_in_place` (no group), timed like
/// [`Raw::time_threads`].
fn ours_threads(h: &mut [Handles], comms: &[Communicator], bufs: &[GpuRef<f32>], iters: usize) -> Res<f64> {
    let start = std::sync::Barrier::new(bufs.len() + 1);
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for ((h, c), b) in h.iter_mut().zip(comms).zip(bufs) {
            let start = &start;
            threads.push(scope.spawn(move || -> cusched::Result<()> {
                start.wait();
                let mut last = None;
                for _ in 0..iters {
                    last = Some(h.nccl()?.all_reduce_in_place(c, b, ReduceOp::Sum)?);
                }
                last.map_or(Ok(()), |l| l.wait())
            }));
        }
        start.wait();
        let t = Instant::now();
        for th in threads {
            th.join().map_err(|_| "a rank's thread panicked")??;
        }
        Ok(t.elapsed().as_secs_f64() / iters as f64)
    })
}

fn main() -> Res<()> {
    // Set before NCCL loads, on the only thread.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    // `--spin MICROS`: the devices' spin window (DeviceConfig::spin), to see what the
    // completion threads' polling costs the op path; `--bytes N`: that one size only.
    let flag = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let mut config = DeviceConfig::default();
    if let Some(us) = flag("--spin") {
        config.spin = std::time::Duration::from_micros(us.parse()?);
    }
    let only: Option<usize> = flag("--bytes").map(|b| b.parse()).transpose()?;
    let single = std::env::args().any(|a| a == "--single");
    let (gpus, one_rank_each) = match (Device::open_with(0, config.clone()), Device::open_with(1, config.clone())) {
        (Ok(a), Ok(b)) => (vec![a, b], false),
        // One GPU: one-rank communicators, whose ops move nothing between GPUs, on two contexts
        // (or one, `--single`). The host's cost per op, cusched's op path around NCCL's own
        // call, is still measured side by side; the bandwidth goal is not (it needs two GPUs).
        (Ok(a), Err(e)) if single => {
            println!("bench-nccl: one GPU ({e}): one rank, the op path's host cost only, not the goal");
            (vec![a], false)
        }
        (Ok(a), Err(e)) => {
            println!(
                "bench-nccl: one GPU ({e}): a one-rank communicator on each of two contexts, the op path's host \
                 cost only, not the goal"
            );
            (vec![a, Device::open_isolated(0, config)?], true)
        }
        (Err(e), _) => {
            println!("bench-nccl: skipped, needs a GPU ({e})");
            return Ok(());
        }
    };
    let init = |config: &CommConfig| -> cusched::Result<Vec<Communicator>> {
        if !one_rank_each {
            return Communicator::init_all(&gpus, config);
        }
        let each: Vec<Vec<Communicator>> = gpus
            .iter()
            .map(|g| Communicator::init_all(std::slice::from_ref(g), config))
            .collect::<cusched::Result<_>>()?;
        Ok(each.into_iter().flatten().collect())
    };
    let comms = init(&CommConfig::default())?;
    let raw = Raw::new(&gpus, one_rank_each)?;
    // Ranks per communicator, for the bus bandwidth.
    let ranks = if one_rank_each { 1 } else { gpus.len() };
    let mut h: Vec<Handles> = gpus.iter().map(|g| Handles::new(g, g.new_stream()?)).collect::<cusched::Result<_>>()?;
    if let Some(secs) = std::env::args().skip_while(|a| a != "--profile").nth(1) {
        return profile(&gpus, &mut h, &comms, secs.parse()?);
    }
    if let Some(secs) = std::env::args().skip_while(|a| a != "--profile-raw").nth(1) {
        let bufs: Vec<GpuRef<f32>> =
            gpus.iter().map(|g| g.alloc_zeros::<f32>(g.default_stream(), 2048)).collect::<cusched::Result<_>>()?;
        let ptrs: Vec<(u64, usize)> =
            bufs.iter().map(|b| Ok((b.raw_device_ptr()?, 2048))).collect::<cusched::Result<_>>()?;
        let (start, secs, mut n) = (Instant::now(), secs.parse::<f64>()?, 0usize);
        while start.elapsed().as_secs_f64() < secs {
            raw.time(&ptrs, 1000, false)?;
            n += 1000;
        }
        println!("profile-raw: {n} all-reduces, {} per op", us(start.elapsed().as_secs_f64() / n as f64));
        return Ok(());
    }
    println!(
        "bench-nccl: all_reduce (sum, f32, in place) on {} GPU(s), {:?}",
        gpus.len(),
        comms[0].capabilities().nccl_version
    );
    println!(
        "{:>12} {:>6} {:>16} {:>16} {:>12} {:>12} {:>14} {:>8} {:>12}",
        "bytes", "iters", "cusched busbw", "raw busbw", "cusched/op", "raw/op", "raw+events/op", "ratio", "vs floor"
    );
    let mut bytes = only.unwrap_or(8usize << 10);
    while bytes <= only.unwrap_or(1 << 30) {
        let n = bytes / 4;
        let iters = ((8usize << 30) / bytes).clamp(5, 2000);
        let bufs: Vec<GpuRef<f32>> =
            gpus.iter().map(|g| g.alloc_zeros::<f32>(g.default_stream(), n)).collect::<cusched::Result<_>>()?;
        for g in &gpus {
            g.synchronize(g.default_stream())?;
        }
        let ptrs: Vec<(u64, usize)> =
            bufs.iter().map(|b| Ok((b.raw_device_ptr()?, n))).collect::<cusched::Result<_>>()?;
        ours(&mut h, &comms, &bufs, 3)?;
        raw.time(&ptrs, 3, true)?;
        let (mut t_ours, mut t_raw, mut t_event) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            t_ours.push(ours(&mut h, &comms, &bufs, iters)?);
            t_raw.push(raw.time(&ptrs, iters, false)?);
            t_event.push(raw.time(&ptrs, iters, true)?);
        }
        let (o, r, re) = (median(&mut t_ours), median(&mut t_raw), median(&mut t_event));
        let busbw = |t: f64| bus_bandwidth(bytes, ranks, t);
        println!(
            "{:>12} {:>6} {:>11.2} GB/s {:>11.2} GB/s {:>12} {:>12} {:>14} {:>8} {:>12}",
            bytes,
            iters,
            busbw(o),
            busbw(r),
            us(o),
            us(r),
            us(re),
            ratio(o, r),
            ratio(o, re)
        );
        bytes *= 2;
    }
    // One thread per rank, both sides: each thread enqueues only its own rank's op, so the
    // host enqueue of the two ranks runs in parallel instead of back to back in one group.
    println!("\none thread per GPU (each rank's op enqueued by its own thread, no group):");
    println!(
        "{:>12} {:>6} {:>16} {:>16} {:>12} {:>12} {:>14} {:>8} {:>12}",
        "bytes", "iters", "cusched busbw", "raw busbw", "cusched/op", "raw/op", "raw+events/op", "ratio", "vs floor"
    );
    let mut bytes = only.unwrap_or(8usize << 10);
    while bytes <= only.unwrap_or(1 << 30) {
        let n = bytes / 4;
        let iters = ((8usize << 30) / bytes).clamp(5, 2000);
        let bufs: Vec<GpuRef<f32>> =
            gpus.iter().map(|g| g.alloc_zeros::<f32>(g.default_stream(), n)).collect::<cusched::Result<_>>()?;
        for g in &gpus {
            g.synchronize(g.default_stream())?;
        }
        let ptrs: Vec<(u64, usize)> =
            bufs.iter().map(|b| Ok((b.raw_device_ptr()?, n))).collect::<cusched::Result<_>>()?;
        ours_threads(&mut h, &comms, &bufs, 3)?;
        raw.time_threads(&ptrs, 3, true)?;
        let (mut t_ours, mut t_raw, mut t_event) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            t_ours.push(ours_threads(&mut h, &comms, &bufs, iters)?);
            t_raw.push(raw.time_threads(&ptrs, iters, false)?);
            t_event.push(raw.time_threads(&ptrs, iters, true)?);
        }
        let (o, r, re) = (median(&mut t_ours), median(&mut t_raw), median(&mut t_event));
        let busbw = |t: f64| bus_bandwidth(bytes, ranks, t);
        println!(
            "{:>12} {:>6} {:>11.2} GB/s {:>11.2} GB/s {:>12} {:>12} {:>14} {:>8} {:>12}",
            bytes,
            iters,
            busbw(o),
            busbw(r),
            us(o),
            us(r),
            us(re),
            ratio(o, r),
            ratio(o, re)
        );
        bytes *= 2;
    }
    // Events the tracker had to create (none once its pool has warmed up, if ops release theirs).
    let created: Vec<u64> = gpus.iter().map(|g| g.events_created()).collect();
    println!("events created per GPU so far: {created:?}");
    latency(&gpus, &mut h, &comms, &raw)?;
    // The same latency with non-blocking communicators (`CommConfig::blocking = false`), whose
    // every launch NCCL finishes on a thread of its own.
    drop(comms);
    let nonblocking = init(&CommConfig::default().with_blocking(false))?;
    // Raw NCCL on non-blocking communicators too: NCCL finishes each of their launches on a
    // thread of its own, which its user polls, whoever the user is.
    drop(raw);
    let raw = if one_rank_each {
        let each: Vec<Raw> = gpus.iter().map(|g| Raw::new_non_blocking(std::slice::from_ref(g))).collect::<Res<_>>()?;
        Raw::merged(each)
    } else {
        Raw::new_non_blocking(&gpus)?
    };
    println!("non-blocking communicators (raw NCCL's non-blocking too):");
    latency(&gpus, &mut h, &nonblocking, &raw)
}

/// NCCL's bus bandwidth in GB/s: `bytes / t * 2 (n - 1) / n` for `n` ranks (for two, the
/// algorithm bandwidth; for one, zero, since nothing crosses a link).
fn bus_bandwidth(bytes: usize, ranks: usize, t: f64) -> f64 {
    let n = ranks as f64;
    bytes as f64 / t / 1e9 * 2.0 * (n - 1.0) / n
}

/// `--profile SECONDS`: 8 KiB all-reduces back to back for that long, for a sampling profiler
/// attached to the process (the host cost per op is what small messages pay);
/// `--profile-raw SECONDS` does the same through raw NCCL.
fn profile(gpus: &[Device], h: &mut [Handles], comms: &[Communicator], secs: f64) -> Res<()> {
    let bufs: Vec<GpuRef<f32>> =
        gpus.iter().map(|g| g.alloc_zeros::<f32>(g.default_stream(), 2048)).collect::<cusched::Result<_>>()?;
    for g in gpus {
        g.synchronize(g.default_stream())?;
    }
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        ours(h, comms, &bufs, 1000)?;
        n += 1000;
    }
    println!("profile: {n} all-reduces, {} per op", us(start.elapsed().as_secs_f64() / n as f64));
    Ok(())
}

/// Small-message latency: 8 bytes per rank, one op at a time, waited for each time.
fn latency(gpus: &[Device], h: &mut [Handles], comms: &[Communicator], raw: &Raw) -> Res<()> {
    let bufs: Vec<GpuRef<f32>> =
        gpus.iter().map(|g| g.alloc_zeros::<f32>(g.default_stream(), 2)).collect::<cusched::Result<_>>()?;
    for g in gpus {
        g.synchronize(g.default_stream())?;
    }
    let ptrs: Vec<(u64, usize)> = bufs.iter().map(|b| Ok((b.raw_device_ptr()?, 2))).collect::<cusched::Result<_>>()?;
    let (mut t_ours, mut t_raw) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        t_ours.push(ours(h, comms, &bufs, 1)?);
        t_raw.push(raw.time(&ptrs, 1, false)?);
    }
    let (o, r) = (median(&mut t_ours), median(&mut t_raw));
    let (o99, r99) = (percentile(&mut t_ours, 99.0), percentile(&mut t_raw, 99.0));
    println!("\nsmall-message latency (8 bytes, enqueue to completion, median / p99):");
    println!("  cusched {} / {}   raw NCCL {} / {}   cusched over raw: {}", us(o), us(o99), us(r), us(r99), us(o - r));
    Ok(())
}
