//! Helpers shared by the benches: statistics, the tiny three-buffer kernel, a minimal
//! `block_on`, and raw cudarc setup for the side-by-side baselines.
#![allow(dead_code)]

pub mod threads;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// `c[i] = a[i] + b[i]`: three buffer arguments and a length, a few microseconds on a GPU.
pub const ADD_SRC: &str = r#"
extern "C" __global__ void add3(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"#;

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A percentile of `v` (sorted in place), `p` in 0..=100.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * p / 100.0).round() as usize;
    v[i]
}

pub fn us(d: f64) -> String {
    format!("{:.2} µs", d * 1e6)
}

pub fn ns(d: f64) -> String {
    format!("{:.0} ns", d * 1e9)
}

/// Ratio of the baseline's time to ours: above 1 means cusched is faster.
pub fn ratio(ours: f64, baseline: f64) -> String {
    format!("{:.3}x", baseline / ours)
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` to completion on this thread, parking between polls: the smallest executor, to
/// show that a completion's future needs no runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// Whether `--sim` was passed (run on the simulated backend).
pub fn sim_requested() -> bool {
    std::env::args().any(|a| a == "--sim")
}

/// Seconds per call: two warm-up calls, then `iters` timed ones, the batch followed by `sync`
/// (so the time is the GPU's when it is the bottleneck, the host's otherwise).
pub fn per_call(
    iters: usize,
    mut call: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
    mut sync: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    for _ in 0..2 {
        call()?;
    }
    sync()?;
    let t = std::time::Instant::now();
    for _ in 0..iters {
        call()?;
    }
    sync()?;
    Ok(t.elapsed().as_secs_f64() / iters as f64)
}

/// The best time of each over three interleaved rounds, so clocks and thermals treat both
/// alike: `(ours, raw)`.
pub fn best_of_3(
    mut ours: impl FnMut() -> Result<f64, Box<dyn std::error::Error>>,
    mut raw: impl FnMut() -> Result<f64, Box<dyn std::error::Error>>,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        best_ours = best_ours.min(ours()?);
        best_raw = best_raw.min(raw()?);
    }
    Ok((best_ours, best_raw))
}

/// [`best_of_3`] of [`per_call`] on each side, seconds per call: `(ours, raw)`.
pub fn interleaved(
    iters: usize,
    mut ours: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
    mut raw: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
    mut sync_ours: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
    mut sync_raw: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    best_of_3(|| per_call(iters, &mut ours, &mut sync_ours), || per_call(iters, &mut raw, &mut sync_raw))
}
