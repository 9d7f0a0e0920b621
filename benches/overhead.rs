//! Host overhead per op: one small kernel with three buffer arguments (`c = a + b`), enqueued
//! back to back on one stream and alternating over two, through
//!
//! - (a) raw cudarc with its event tracking off (no ordering at all: the floor),
//! - (a+) (a) plus one `cuEventRecord` per op (the one driver call several streams need),
//! - (a++) (a+) plus, alternating over two streams, one `cuStreamWaitEvent` per op (the fence
//!   such an op needs: the fair reference for (c) on two streams),
//! - (b) raw cudarc with its tracking on (two streams exist, so it manages synchronization),
//! - (c1) cusched inline on a device of its own where only one stream ever commits (solo mode:
//!   no per-buffer marks, and `launch` takes no position),
//! - (c) cusched inline: a strict recorder around the same cudarc launch, on a device where
//!   several streams are in use (one event per commit),
//! - (c') cusched inline through the typed launch (`Kernel::launch`, returns a completion),
//! - (d) cusched on a lane (one job per op; on two lanes each lane writes its own output, so
//!   the lanes' jobs never conflict and the check of submit order finds nothing to report),
//! - (d0) (d) on a device opened with `DeviceConfig::submit_order` off: (d) against (d0) is the
//!   check's cost (a compare per use in a job, a stamp stored per commit),
//! - (e) (c) with a no-op `KernelTrace` hook set.
//!
//! After the table, each budget of the op path is checked against its reference row of the
//! same run: (c1) ≤ (a) + 0.3 µs, (c) ≤ (a+) + 0.25 µs (and, on two streams, ≤ (a++) + 0.25 µs),
//! (c') ≤ (c) + 0.2 µs, (e) ≤ (c) + 0.5 µs.
//!
//! A breakdown follows: the inline path of (c1) and (c) in pieces (declares only; + preflight
//! and commit around an empty enqueue; + the enqueue closure's own work without the launch;
//! the full path), each a row of the same run, so that the gap to (a) is explained in numbers.
//!
//! A second table shows, per row, what the process's other threads did meanwhile (from
//! `/proc`): the completion threads' CPU time and wake-ups per op, and how often the enqueuing
//! thread blocked or was preempted, to tell more work on the op path from contention with them.
//! The typed launch is broken down the same way: its declarations alone, then the whole launch,
//! each next to the recorder's piece.
//!
//! Host time is the enqueue loop only: batches of 256 ops (below the driver's queue depth, so a
//! launch never blocks on the GPU), synchronized between batches, median over batches.
//!
//! Run from the GPU bundle: `target/gpu-bundle/bin/bench-overhead [batches]`.

mod common;

use common::threads::ThreadSample;
use common::*;
use cusched::cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cusched::{Device, GpuRef, KernelTrace, LaunchRecorder, StreamId, TraceOptions};
use std::sync::Arc;
use std::time::Instant;

const N: u32 = 256;
const BATCH: usize = 256;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Raw {
    ev: cusched::cudarc::driver::CudaEvent,
    s: [Arc<CudaStream>; 2],
    f: CudaFunction,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
}

impl Raw {
    fn new(tracking: bool) -> Res<Raw> {
        let ctx = CudaContext::new(0)?;
        if !tracking {
            // SAFETY: this context object's slices are only used by this bench's own launches;
            // with tracking off nothing orders them, which is the point of the baseline.
            unsafe { ctx.disable_event_tracking() };
        }
        let s = [ctx.new_stream()?, ctx.new_stream()?];
        let module = ctx.load_module(cusched::cudarc::nvrtc::compile_ptx(ADD_SRC)?)?;
        let f = module.load_function("add3")?;
        let (a, b, c) = (s[0].alloc_zeros(N as usize)?, s[0].alloc_zeros(N as usize)?, s[0].alloc_zeros(N as usize)?);
        s[0].synchronize()?;
        let ev = ctx.new_event(None)?;
        Ok(Raw { ev, s, f, a, b, c })
    }

    /// Seconds per op of one batch, with the driver calls `sync` adds per op.
    fn batch(&mut self, streams: usize, sync: RawSync) -> Res<f64> {
        let cfg = LaunchConfig::for_num_elems(N);
        let record = sync != RawSync::None;
        let t = Instant::now();
        for i in 0..BATCH {
            let s = &self.s[i % streams];
            if sync == RawSync::RecordWait && streams > 1 && i > 0 {
                // The event last recorded, after the previous op on the other stream.
                s.wait(&self.ev)?;
            }
            let mut l = s.launch_builder(&self.f);
            l.arg(&self.a).arg(&self.b).arg(&mut self.c).arg(&N);
            // SAFETY: `add3` takes three float pointers and a length; each slice holds N floats.
            unsafe { l.launch(cfg) }?;
            if record {
                self.ev.record(s)?;
            }
        }
        let per_op = t.elapsed().as_secs_f64() / BATCH as f64;
        for s in &self.s {
            s.synchronize()?;
        }
        Ok(per_op)
    }
}

/// What a raw batch adds to each launch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RawSync {
    None,
    /// One `cuEventRecord` after each launch: what cusched's contract adds per op.
    Record,
    /// Also, with two streams, one `cuStreamWaitEvent` on the previous op's event before each
    /// launch: the fence an op alternating between streams over the same buffers needs.
    RecordWait,
}

struct Ours {
    device: Device,
    s: [StreamId; 2],
    kernel: cusched::Kernel,
    a: GpuRef<f32>,
    b: GpuRef<f32>,
    c: GpuRef<f32>,
    /// The second lane's output in (d) and (d0).
    c2: GpuRef<f32>,
}

fn recorder_launch(
    device: &Device,
    s: StreamId,
    f: &CudaFunction,
    a: &GpuRef<f32>,
    b: &GpuRef<f32>,
    c: &GpuRef<f32>,
) -> cusched::Result<()> {
    let mut rec = LaunchRecorder::new_strict(s);
    rec.read(a)?.read(b)?.write(c)?;
    rec.launch(device, |scope| {
        // SAFETY: (1) the kernel reads `a` and `b` and writes `c`, as declared, on the launch's
        // stream, enqueued before the closure returns, and no cudarc memory is made; (2) the
        // arguments are as in the raw baseline.
        unsafe {
            let mut l = scope.cuda_stream()?.launch_builder(f);
            l.arg(a.cuda_slice()?).arg(b.cuda_slice()?).arg(c.cuda_slice()?).arg(&N);
            l.launch(LaunchConfig::for_num_elems(N))
        }
        .map(drop)
        .map_err(|status| cusched::Error::Driver { call: "cuLaunchKernel", status })
    })
}

impl Ours {
    fn batch(&self, streams: usize, typed: bool) -> Res<f64> {
        let f = self.kernel.function()?;
        let t = Instant::now();
        for i in 0..BATCH {
            let s = self.s[i % streams];
            if typed {
                let launch = self
                    .kernel
                    .launch(&self.device, s, LaunchConfig::for_num_elems(N))
                    .read(&self.a)
                    .read(&self.b)
                    .write(&self.c)
                    .scalar(N);
                // SAFETY: 1. add3 reads a and b and writes c, as declared; 2. it touches indices
                // below N, the length of all three; 3. the parameters are three float pointers
                // and an unsigned, as declared.
                unsafe { launch.enqueue() }?;
            } else {
                recorder_launch(&self.device, s, f, &self.a, &self.b, &self.c)?;
            }
        }
        let per_op = t.elapsed().as_secs_f64() / BATCH as f64;
        for s in self.s {
            self.device.synchronize(s)?;
        }
        Ok(per_op)
    }

    fn lane_batch(&self, lanes: &[cusched::Lane]) -> Res<f64> {
        let t = Instant::now();
        // Each lane's last job: lanes run side by side, so the batch's last job can commit
        // while another lane still works through its queue. The batch ends when every lane's
        // last job has committed; otherwise the rest would run into the next row's batch.
        let mut last: Vec<Option<cusched::Completion<()>>> = lanes.iter().map(|_| None).collect();
        for i in 0..BATCH {
            let l = i % lanes.len();
            let c = if l == 0 { self.c.clone() } else { self.c2.clone() };
            let (k, a, b) = (self.kernel.clone(), self.a.clone(), self.b.clone());
            last[l] =
                Some(lanes[l].submit(move |cx| recorder_launch(cx.device(), cx.stream(), k.function()?, &a, &b, &c)));
        }
        for done in last.iter().flatten() {
            done.wait_committed()?;
        }
        let per_op = t.elapsed().as_secs_f64() / BATCH as f64;
        for done in last.into_iter().flatten() {
            done.wait()?;
        }
        for l in lanes {
            self.device.synchronize(l.stream())?;
        }
        Ok(per_op)
    }
}

struct Noop;
impl KernelTrace for Noop {}

/// The pieces of the inline path, each timed alone.
#[derive(Clone, Copy)]
enum Piece {
    /// A recorder with three declares, dropped unpreflighted (a list of uses: reserves nothing).
    Declares,
    /// Adds preflight and commit around an empty enqueue closure.
    Empty,
    /// Adds what the bench's closure does besides the launch: the stream, three validated
    /// slices and the context bind the launch itself makes (`cuCtxGetCurrent`).
    Args,
    /// The full path, as (c1)/(c).
    Full,
    /// Only the enqueue closure's work of `Args` (no recorder): its own cost.
    ArgsAlone,
    /// A typed launch with its three buffers and scalar declared, dropped unenqueued.
    TypedDeclares,
    /// The whole typed launch, as (c').
    TypedFull,
}

fn piece_batch(o: &Ours, stream: StreamId, piece: Piece) -> Res<f64> {
    let f = o.kernel.function()?;
    let (d, a, b, c) = (&o.device, &o.a, &o.b, &o.c);
    let args = |s: &Arc<CudaStream>| -> cusched::Result<()> {
        // SAFETY: the slices are only fetched and dropped: nothing is enqueued on them.
        let ptrs = unsafe { (a.cuda_slice()?, b.cuda_slice()?, c.cuda_slice()?) };
        std::hint::black_box(ptrs);
        s.context().bind_to_thread().map_err(|status| cusched::Error::Driver { call: "cuCtxGetCurrent", status })
    };
    let raw_stream = {
        let mut rec = LaunchRecorder::new_strict(stream);
        rec.read(a)?;
        // SAFETY: the stream is kept only to bind its context in `args`: nothing is enqueued on
        // it and no memory is made from it.
        rec.launch(d, |scope| Ok(unsafe { scope.cuda_stream() }?.clone()))?
    };
    let t = Instant::now();
    for _ in 0..BATCH {
        match piece {
            Piece::Declares => {
                let mut rec = LaunchRecorder::new_strict(stream);
                rec.read(a)?.read(b)?.write(c)?;
                std::hint::black_box(&rec);
            }
            Piece::Empty | Piece::Args => {
                let mut rec = LaunchRecorder::new_strict(stream);
                rec.read(a)?.read(b)?.write(c)?;
                rec.launch(d, |scope| match piece {
                    // SAFETY: `args` only binds the stream's context: nothing is enqueued.
                    Piece::Args => args(unsafe { scope.cuda_stream() }?),
                    _ => Ok(()),
                })?;
            }
            Piece::Full => recorder_launch(d, stream, f, a, b, c)?,
            Piece::ArgsAlone => args(&raw_stream)?,
            Piece::TypedDeclares | Piece::TypedFull => {
                let launch =
                    o.kernel.launch(d, stream, LaunchConfig::for_num_elems(N)).read(a).read(b).write(c).scalar(N);
                if matches!(piece, Piece::TypedFull) {
                    // SAFETY: as in `Ours::batch`: add3 reads a and b and writes c, indices below
                    // N, three float pointers and an unsigned, as declared.
                    unsafe { launch.enqueue() }?;
                } else {
                    std::hint::black_box(launch);
                }
            }
        }
    }
    let per_op = t.elapsed().as_secs_f64() / BATCH as f64;
    d.synchronize(stream)?;
    Ok(per_op)
}

/// The inline path in pieces on the one-stream device (lazy events) and on the several-stream
/// device's first stream (one event per commit), next to (a) of the same rounds.
fn breakdown(ours1: &Ours, ours: &Ours, raw: &mut Raw, batches: usize) -> Res<()> {
    let pieces = [
        (Piece::Declares, "recorder + 3 declares, dropped"),
        (Piece::Empty, "+ preflight + commit, empty enqueue"),
        (Piece::Args, "+ stream, 3 slices, context bind (no launch)"),
        (Piece::Full, "full path (launch included)"),
        (Piece::ArgsAlone, "stream, 3 slices, context bind alone"),
        (Piece::TypedDeclares, "typed: launch + 3 declares + scalar, dropped"),
        (Piece::TypedFull, "typed: full launch (completion dropped)"),
    ];
    let mut raw_samples = Vec::new();
    let mut samples = vec![[Vec::new(), Vec::new()]; pieces.len()];
    let (mut lock_samples, mut arc_samples) = (Vec::new(), Vec::new());
    for round in 0..batches + 3 {
        let r = raw.batch(1, RawSync::None)?;
        let (lock, arc) = (lock_pair(), arc_pair());
        if round >= 3 {
            lock_samples.push(lock);
            arc_samples.push(arc);
        }
        for (i, &(piece, _)) in pieces.iter().enumerate() {
            let one = piece_batch(ours1, ours1.s[0], piece)?;
            let several = piece_batch(ours, ours.s[0], piece)?;
            if round >= 3 {
                samples[i][0].push(one);
                samples[i][1].push(several);
            }
        }
        if round >= 3 {
            raw_samples.push(r);
        }
    }
    let raw_med = median(&mut raw_samples);
    println!(
        "\nbreakdown of the inline path, 1 stream, median of {batches} batches of {BATCH}; (a) this run: {}\n",
        ns(raw_med)
    );
    println!("| piece | one-stream device (lazy) | step | several streams (eager) | step |");
    println!("| --- | --- | --- | --- | --- |");
    let meds: Vec<[f64; 2]> = samples.iter_mut().map(|[one, two]| [median(one), median(two)]).collect();
    let of = |p: fn(&Piece) -> bool| pieces.iter().position(|(q, _)| p(q)).map_or([f64::NAN; 2], |i| meds[i]);
    let mut prev = [0.0, 0.0];
    for (i, (piece, label)) in pieces.iter().enumerate() {
        let m = meds[i];
        // Each piece adds to the one before; the typed pieces compare with the recorder's.
        let reference = match piece {
            Piece::ArgsAlone => None,
            Piece::TypedDeclares => Some(of(|p| matches!(p, Piece::Declares))),
            Piece::TypedFull => Some(of(|p| matches!(p, Piece::Full))),
            _ => Some(prev),
        };
        let step = |col: usize| reference.map_or_else(String::new, |r| format!("{:+.0} ns", (m[col] - r[col]) * 1e9));
        println!("| {label} | {} | {} | {} | {} |", ns(m[0]), step(0), ns(m[1]), step(1));
        if !matches!(piece, Piece::ArgsAlone | Piece::TypedDeclares | Piece::TypedFull) {
            prev = m;
        }
    }
    println!("\n(full path) - (a) is the tracker's share; (+ preflight + commit) - (declares) its commit-side part;");
    println!("the typed rows' steps are against the recorder's declares and full path.");
    // What the commit-side part is made of, on the one-stream device: per 3-buffer op, each
    // buffer's state lock taken twice (acquire, publish) and the stream's lock twice (fence,
    // commit): 8 lock/unlock pairs; and about 10 reference-count changes (the launch's device
    // handle, the stream's and each buffer's hold on the new event, the old events they drop,
    // the returned event). Priced back to back in a loop, where each waits for the one
    // before; inside the path they can cost less, so this bounds their share from above.
    let (lock, arc) = (median(&mut lock_samples), median(&mut arc_samples));
    let commit_side = meds[1][0] - meds[0][0];
    let locked = 8.0 * lock + 5.0 * arc;
    println!(
        "\nthe same thread, uncontended, back to back: a Mutex lock + unlock {}, an Arc clone + drop {}; 8 lock pairs + 10 count changes (5 pairs) at those prices = {} of the {} that preflight + commit add on one stream (at most {:.0}%)",
        ns(lock),
        ns(arc),
        ns(locked),
        ns(commit_side),
        100.0 * locked / commit_side
    );
    Ok(())
}

/// Seconds per uncontended `Mutex` lock and unlock on this thread.
fn lock_pair() -> f64 {
    let m = std::sync::Mutex::new(0u64);
    per_iteration(|| {
        let mut g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *g = std::hint::black_box(*g + 1);
    })
}

/// Seconds per `Arc` clone and drop on this thread.
fn arc_pair() -> f64 {
    let a = Arc::new(0u64);
    per_iteration(|| drop(std::hint::black_box(Arc::clone(std::hint::black_box(&a)))))
}

/// Seconds per call of `f`, over a few thousand calls in a row.
fn per_iteration(mut f: impl FnMut()) -> f64 {
    const N: usize = 4096;
    let t = Instant::now();
    for _ in 0..N {
        f();
    }
    t.elapsed().as_secs_f64() / N as f64
}

/// A device of its own for the one-stream rows: only its default stream ever commits, so its
/// commits record no event (the lazy path).
fn one_stream_device(kernel_src: &str) -> Res<Ours> {
    device_with(kernel_src, cusched::DeviceConfig::default())
}

/// A device of its own opened with `config`, its buffers on the default stream.
fn device_with(kernel_src: &str, config: cusched::DeviceConfig) -> Res<Ours> {
    let device = Device::open_with(0, config)?;
    let s = device.default_stream();
    Ok(Ours {
        a: device.alloc_zeros(s, N as usize)?,
        b: device.alloc_zeros(s, N as usize)?,
        c: device.alloc_zeros(s, N as usize)?,
        c2: device.alloc_zeros(s, N as usize)?,
        kernel: device.compile(kernel_src, &[])?.kernel("add3")?,
        s: [s, s],
        device,
    })
}

/// What each row runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Row {
    Raw,
    RawRecord,
    RawRecordWait,
    RawTracked,
    /// The recorder path on the one-stream device (1-stream column only).
    OursOneStream,
    Ours,
    Typed,
    Lane,
    /// (d) on a device with the check of submit order off.
    LaneNoOrderCheck,
    Hook,
}

fn main() -> Res<()> {
    let batches: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let device = match Device::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("bench-overhead needs a GPU: {e}");
            return Ok(());
        }
    };
    let s = [device.new_stream()?, device.new_stream()?];
    let kernel = device.compile(ADD_SRC, &[])?.kernel("add3")?;
    let ours = Ours {
        a: device.alloc_zeros(s[0], N as usize)?,
        b: device.alloc_zeros(s[0], N as usize)?,
        c: device.alloc_zeros(s[0], N as usize)?,
        c2: device.alloc_zeros(s[0], N as usize)?,
        device: device.clone(),
        s,
        kernel,
    };
    let ours1 = one_stream_device(ADD_SRC)?;
    let lanes1 = [device.lane("bench-1")?];
    let lanes2 = [device.lane("bench-2a")?, device.lane("bench-2b")?];
    let off =
        cusched::DeviceConfig { submit_order: cusched::SubmitOrderCheck::Off, ..cusched::DeviceConfig::default() };
    let ours_off = device_with(ADD_SRC, off)?;
    let off_lanes1 = [ours_off.device.lane("bench-off-1")?];
    let off_lanes2 = [ours_off.device.lane("bench-off-2a")?, ours_off.device.lane("bench-off-2b")?];
    let mut untracked = Raw::new(false)?;
    let mut tracked = Raw::new(true)?;

    let rows = [
        (Row::Raw, "(a) raw cudarc, tracking off"),
        (Row::RawRecord, "(a+) (a) plus one cuEventRecord per op"),
        (Row::RawRecordWait, "(a++) (a+) plus, on 2 streams, one cuStreamWaitEvent per op"),
        (Row::RawTracked, "(b) raw cudarc, tracking on"),
        (Row::OursOneStream, "(c1) cusched inline (recorder), one-stream device"),
        (Row::Ours, "(c) cusched inline (recorder), several streams in use"),
        (Row::Typed, "(c') cusched inline (typed launch), several streams in use"),
        (Row::Lane, "(d) cusched on a lane"),
        (Row::LaneNoOrderCheck, "(d0) (d), submit-order check off"),
        (Row::Hook, "(e) (c) with a KernelTrace hook"),
    ];
    let mut samples = vec![[Vec::new(), Vec::new()]; rows.len()];
    let mut threads = vec![[ThreadSample::default(); 2]; rows.len()];
    // Events recorded and waits queued per op, for the cusched rows.
    let mut calls = vec![[(0.0, 0.0); 2]; rows.len()];
    for streams in [1usize, 2] {
        let lanes: &[cusched::Lane] = if streams == 1 { &lanes1 } else { &lanes2 };
        let off_lanes: &[cusched::Lane] = if streams == 1 { &off_lanes1 } else { &off_lanes2 };
        for round in 0..batches + 3 {
            let warm = round < 3;
            // Interleaved, so clocks and caches treat every variant alike, and each round starts
            // at the next row, so that no row always runs right after the same other one.
            for i in (0..rows.len()).map(|k| (k + round) % rows.len()) {
                let row = rows[i].0;
                if row == Row::OursOneStream && streams == 2 {
                    continue;
                }
                let dev = match row {
                    Row::OursOneStream => &ours1.device,
                    Row::LaneNoOrderCheck => &ours_off.device,
                    _ => &device,
                };
                let before = dev.stats();
                let threads_before = ThreadSample::now();
                let t = match row {
                    Row::Raw => untracked.batch(streams, RawSync::None)?,
                    Row::RawRecord => untracked.batch(streams, RawSync::Record)?,
                    Row::RawRecordWait => untracked.batch(streams, RawSync::RecordWait)?,
                    Row::RawTracked => tracked.batch(streams, RawSync::None)?,
                    Row::OursOneStream => ours1.batch(1, false)?,
                    Row::Ours => ours.batch(streams, false)?,
                    Row::Typed => ours.batch(streams, true)?,
                    Row::Lane => ours.lane_batch(lanes)?,
                    Row::LaneNoOrderCheck => ours_off.lane_batch(off_lanes)?,
                    Row::Hook => {
                        device.set_trace(Arc::new(Noop), TraceOptions::default())?;
                        let t = ours.batch(streams, false);
                        device.clear_trace();
                        t?
                    }
                };
                let threads_after = ThreadSample::now();
                let after = dev.stats();
                if !warm {
                    samples[i][streams - 1].push(t);
                    threads[i][streams - 1].add(&threads_after.since(&threads_before));
                    let n = BATCH as f64;
                    calls[i][streams - 1] =
                        ((after.recorded - before.recorded) as f64 / n, (after.waits - before.waits) as f64 / n);
                }
            }
        }
    }
    // cudarc 0.19.10 with tracking on (see `DevicePtr`/`DevicePtrMut` for `CudaSlice`): each read
    // argument waits on the slice's write event and records its read event; the written one
    // waits on both events and records its write event. Same-stream waits are not skipped.
    let row_at = |row: Row| rows.iter().position(|r| r.0 == row).unwrap_or(0);
    calls[row_at(Row::Raw)] = [(0.0, 0.0); 2];
    calls[row_at(Row::RawRecord)] = [(1.0, 0.0); 2];
    calls[row_at(Row::RawRecordWait)] = [(1.0, 0.0), (1.0, 1.0)];
    calls[row_at(Row::RawTracked)] = [(3.0, 4.0); 2];
    let med: Vec<[Option<f64>; 2]> = samples
        .iter_mut()
        .map(|[one, two]| [(!one.is_empty()).then(|| median(one)), (!two.is_empty()).then(|| median(two))])
        .collect();
    let at = |row: Row, col: usize| rows.iter().position(|r| r.0 == row).and_then(|i| med[i][col]).unwrap_or(f64::NAN);
    let base = [at(Row::Raw, 0), at(Row::Raw, 1)];
    println!("host time per op, median of {batches} batches of {BATCH} (cuEventRecord calls / waits queued per op)\n");
    println!("| path | 1 stream | vs (a) | 2 streams | vs (a) |");
    println!("| --- | --- | --- | --- | --- |");
    for (i, (_, label)) in rows.iter().enumerate() {
        let cell = |col: usize| match med[i][col] {
            Some(m) => format!(
                "{} ({:.2} ev, {:.2} w) | {:+.0} ns",
                ns(m),
                calls[i][col].0,
                calls[i][col].1,
                (m - base[col]) * 1e9
            ),
            None => "n/a | n/a".to_string(),
        };
        println!("| {label} | {} | {} |", cell(0), cell(1));
    }
    let ops = (batches * BATCH) as u64;
    println!("\nother threads during the enqueue loops, per op: completion threads' CPU time, their wake-ups / the enqueuing thread blocked, preempted\n");
    println!("| path | 1 stream | 2 streams |");
    println!("| --- | --- | --- |");
    for (i, (row, label)) in rows.iter().enumerate() {
        let cell = |col: usize| if med[i][col].is_some() { threads[i][col].per_op(ops) } else { "n/a".to_string() };
        if *row != Row::Raw && *row != Row::RawTracked {
            println!("| {label} | {} | {} |", cell(0), cell(1));
        }
    }
    // The budgets, each against its own reference row of this run.
    let budgets = [
        ("(c1) one stream vs (a)", at(Row::OursOneStream, 0) - at(Row::Raw, 0), 300.0),
        ("(c) 1 stream vs (a+)", at(Row::Ours, 0) - at(Row::RawRecord, 0), 250.0),
        ("(c) 2 streams vs (a+)", at(Row::Ours, 1) - at(Row::RawRecord, 1), 250.0),
        ("(c) 2 streams vs (a++), the same driver calls", at(Row::Ours, 1) - at(Row::RawRecordWait, 1), 250.0),
        ("(c') typed vs (c), 1 stream", at(Row::Typed, 0) - at(Row::Ours, 0), 200.0),
        ("(c') typed vs (c), 2 streams", at(Row::Typed, 1) - at(Row::Ours, 1), 200.0),
        ("(e) hook vs (c), 1 stream", at(Row::Hook, 0) - at(Row::Ours, 0), 500.0),
        ("(e) hook vs (c), 2 streams", at(Row::Hook, 1) - at(Row::Ours, 1), 500.0),
    ];
    println!("\n| budget | delta | limit | |");
    println!("| --- | --- | --- | --- |");
    for (what, delta, limit) in budgets {
        let delta = delta * 1e9;
        println!("| {what} | {delta:+.0} ns | +{limit:.0} ns | {} |", if delta <= limit { "met" } else { "MISSED" });
    }
    breakdown(&ours1, &ours, &mut untracked, batches)?;
    println!(
        "\nevents created by cusched in total: {} + {} (one-stream device) (pooled: constant in steady state)",
        device.events_created(),
        ours1.device.events_created()
    );
    Ok(())
}
