//! Helpers shared by the test suites.
#![allow(dead_code)]

pub mod fixture;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod reference;
#[cfg(feature = "nvrtc")]
pub mod slow;
pub mod timeline;

use cusched::{Device, DeviceConfig, Error, FenceMutation, SimConfig, StreamId};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// The CUDA device for GPU tests. Without one, prints a skip notice and returns `None`, unless
/// `CUSCHED_REQUIRE_GPU=1`, where the test fails instead.
pub fn gpu() -> Option<Device> {
    match Device::open(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("CUSCHED_REQUIRE_GPU=1 but no usable GPU: {e}");
            }
            eprintln!("skipping GPU test: {e}");
            None
        }
    }
}

/// [`gpu`] with `config`.
pub fn gpu_with(config: cusched::DeviceConfig) -> Option<Device> {
    match Device::open_with(0, config) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("CUSCHED_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("CUSCHED_REQUIRE_GPU=1 but no usable GPU: {e}");
            }
            eprintln!("skipping GPU test: {e}");
            None
        }
    }
}

/// A simulated device with short random delays.
pub fn sim() -> Device {
    sim_with(true)
}

/// A simulated device; `fencing: false` breaks every ordering rule ([`FenceMutation::NoFences`]).
pub fn sim_with(fencing: bool) -> Device {
    sim_mutated((!fencing).then_some(FenceMutation::NoFences))
}

/// A simulated device whose tracker breaks `mutation`'s ordering rule (checker self-tests).
/// With a mutation, hazards are expected: they are only listed, not failed on.
pub fn sim_mutated(mutation: Option<FenceMutation>) -> Device {
    Device::sim(SimConfig {
        min_delay: Duration::ZERO,
        max_delay: Duration::from_micros(30),
        seed: 7,
        fence_mutation: mutation,
        fail_on_hazard: mutation.is_none(),
        ..SimConfig::default()
    })
    .expect("sim device")
}

/// A simulated device (short random delays) whose preflights give up waiting after `timeout`:
/// a leaked reservation or a stalled wait then fails the test with `BufferReserved` or a
/// timeout instead of hanging it.
pub fn short_timeout(timeout: Duration) -> Device {
    Device::sim_with(
        SimConfig { min_delay: Duration::ZERO, max_delay: Duration::from_micros(30), seed: 7, ..SimConfig::default() },
        DeviceConfig { preflight_timeout: timeout, ..DeviceConfig::default() },
    )
    .expect("sim device")
}

/// The GPU, a new stream on it and that stream's library handles, for the library tests; `None`
/// without a GPU (see [`gpu`]).
pub fn gpu_setup() -> Option<(Device, StreamId, cusched::Handles)> {
    let d = gpu()?;
    let s = d.new_stream().unwrap();
    let h = cusched::Handles::new(&d, s).unwrap();
    Some((d, s, h))
}

/// A simulated device for tests that make hazards on purpose and read them from
/// `sim_hazards`: they are listed and logged, not failed on.
pub fn sim_listing_hazards() -> Device {
    Device::sim(SimConfig {
        min_delay: Duration::ZERO,
        max_delay: Duration::from_micros(30),
        seed: 7,
        fail_on_hazard: false,
        ..SimConfig::default()
    })
    .expect("sim device")
}

/// Small deterministic generator (splitmix64), seeded per test from the clock unless
/// `CUSCHED_SEED` is set; the seed is printed so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Self {
        let seed = std::env::var("CUSCHED_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        });
        eprintln!("rng seed {seed} (set CUSCHED_SEED to replay)");
        Rng(seed)
    }
    pub fn seeded(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// `n` random values in [-1, 1) (f32 values, so that an f32 op sees them exactly), as f64.
pub fn random(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.f32() as f64).collect()
}

/// Whether `e` is the failed-input error (by its `Debug` name, so that a test reads the same
/// whatever the variant's fields).
pub fn is_failed_input(e: &Error) -> bool {
    format!("{e:?}").starts_with("FailedInput")
}

/// A job's or launch's own error.
pub fn bad(arg: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument { arg, reason: reason.into() }
}

/// GELU, tanh approximation (cuBLASLt's epilogue).
pub fn gelu(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// The derivative of [`gelu`].
pub fn dgelu(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` to completion on this thread, parked between polls.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        // Unparked by the waker; the timeout only bounds a lost wake-up, which then shows as
        // slowness rather than a hang.
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// The name the test harness gives the test `name` of the module `module` (its
/// `module_path!()`): the path without the binary's crate name, as `--exact` wants it.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, inside)) => format!("{inside}::{name}"),
        None => name.to_string(),
    }
}

/// Runs `f` on a thread and fails if it has not finished within `limit`, so that a hang fails
/// the test instead of stalling CI. `limit` is a hang guard, not a deadline: give it a minute or
/// more, since a loaded machine may be slow. A panic in `f` is re-raised as is.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = h.join();
            v
        }
        // The sender was dropped unsent: the closure panicked (the thread may still be
        // unwinding, so join it rather than asking whether it finished).
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the closure returned without sending its value"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("test body did not finish within {limit:?}"),
    }
}

/// Launches `rec` (its uses declared by the caller) on `d` and runs `f` inside the launch with
/// the stream's context current on this thread, handing it the raw stream: the frame for calls
/// on a library's raw handle. Panics if the launch fails.
pub fn raw_launch<R>(
    d: &Device,
    rec: cusched::LaunchRecorder,
    f: impl FnOnce(cusched::cudarc::driver::sys::CUstream) -> R,
) -> R {
    rec.launch(d, |scope| {
        // SAFETY: the caller's `f` enqueues only work on the buffers it declared on `rec`, as
        // declared, on this stream and before the closure returns, and makes no cudarc memory.
        let cuda = unsafe { scope.cuda_stream() }?;
        cuda.context().bind_to_thread().map_err(|status| cusched::Error::Driver { call: "cuCtxSetCurrent", status })?;
        Ok(f(cuda.cu_stream()))
    })
    .unwrap()
}
