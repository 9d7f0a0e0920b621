//! Load and store callbacks: CUDA C++ device functions that cuFFT calls on every element it
//! loads from the input or stores to the output, linked into the plan's kernels (LTO callbacks,
//! `cufftXtSetJITCallback`), so a window on load or a scale on store costs no pass of its own
//! over memory.
//!
//! cusched compiles the source with NVRTC to LTO-IR (`-dlto`) for the device's architecture
//! when it makes the plan, and attaches it between `cufftCreate` and planning, as cuFFT
//! requires. The plan cache keys such a plan on the callbacks' source, symbol and data
//! address too: cuFFT bakes the data pointer into the plan, so another data buffer gets its own
//! plan. The data buffer is declared as a read of the transform.
//!
//! On the simulator, which runs no device code, a callback computes with its host closure
//! ([`FftCallback::sim`]); one without a closure is refused with
//! [`Error::Unsupported`](crate::Error::Unsupported) before anything is recorded.
//!
//! On the H100 this was tested on (CUDA 13.0: cuFFT 12.0.0.61, driver 580.159) cuFFT accepts
//! the callback and then fails planning with `CUFFT_INTERNAL_ERROR`, for NVRTC's LTO-IR and for
//! nvcc's `-dlto` fatbins alike, from plain C too (`tools/probes/fft_lto_*`): the op then fails
//! with [`Error::Library`](crate::Error::Library) naming the planning call, keeps no plan, and
//! plain transforms on the handle go on working.

use crate::memory::{Complex, Element, GpuRef};
use std::sync::Arc;

/// The host form of a callback, for the simulator: `f(offset, value, data)` returns the value
/// cuFFT would load or store, given the element's `offset` into the input (load) or output
/// (store) buffer, in elements, the value read (load) or computed (store), and the contents of
/// the callback's data buffer (empty without one). Values are complex in f64; a real side's
/// value has a zero imaginary part, and only the real part of the result is kept.
pub type SimCallback<D> = Arc<dyn Fn(usize, Complex<f64>, &[D]) -> Complex<f64> + Send + Sync>;

/// One load or store callback: CUDA C++ source defining an `extern "C" __device__` function
/// named `symbol`, the device buffer cuFFT hands it as `callerInfo`, and its host form for the
/// simulator.
///
/// The function has cuFFT's LTO callback signature for the side's type (`float2`, `double2`,
/// `float` or `double`; no headers are needed):
///
/// ```text
/// extern "C" __device__ float2 load(void* dataIn, unsigned long long offset, void* callerInfo, void* sharedPointer);
/// extern "C" __device__ void store(void* dataOut, unsigned long long offset, float2 element, void* callerInfo, void* sharedPointer);
/// ```
///
/// Callbacks take single and double precision transforms only (cuFFT has no half callbacks).
///
/// ```no_run
/// # use cusched::fft::{FftCallback, FftCallbacks};
/// # fn f(window: &cusched::GpuRef<f32>) {
/// let src = r#"extern "C" __device__ float2 window_load(void* in, unsigned long long i, void* w, void*) {
///     float2 v = ((float2*)in)[i]; float k = ((float*)w)[i % 4096]; return make_float2(v.x * k, v.y * k); }"#;
/// let load = FftCallback::new(src, "window_load")
///     .data(window)
///     .sim(|i, v, w: &[f32]| { let k = w[i % 4096] as f64; cusched::Complex::new(v.re * k, v.im * k) });
/// let callbacks = FftCallbacks::new().on_load(load);
/// # }
/// ```
#[derive(Clone)]
pub struct FftCallback<'a, D: Element = f32> {
    /// CUDA C++ source defining the callback.
    pub source: String,
    /// The callback's name (declare it `extern "C"`, or give its mangled name).
    pub symbol: String,
    /// The device buffer cuFFT passes as `callerInfo` (null without one); declared as read.
    pub data: Option<&'a GpuRef<D>>,
    /// The callback's host form, for the simulator.
    pub sim: Option<SimCallback<D>>,
}

impl<'a, D: Element> FftCallback<'a, D> {
    /// A callback named `symbol` defined in `source`, with no data and no host form.
    pub fn new(source: impl Into<String>, symbol: impl Into<String>) -> Self {
        FftCallback { source: source.into(), symbol: symbol.into(), data: None, sim: None }
    }

    /// Hands `data` to the callback as `callerInfo`.
    pub fn data(mut self, data: &'a GpuRef<D>) -> Self {
        self.data = Some(data);
        self
    }

    /// Sets the host form the simulator computes the callback with.
    pub fn sim(mut self, f: impl Fn(usize, Complex<f64>, &[D]) -> Complex<f64> + Send + Sync + 'static) -> Self {
        self.sim = Some(Arc::new(f));
        self
    }
}

impl<D: Element> std::fmt::Debug for FftCallback<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FftCallback")
            .field("symbol", &self.symbol)
            .field("source_bytes", &self.source.len())
            .field("data", &self.data.map(|d| d.len()))
            .field("sim", &self.sim.is_some())
            .finish()
    }
}

/// The callbacks of one transform: on load, on store, or both.
#[derive(Clone, Debug)]
pub struct FftCallbacks<'a, D: Element = f32> {
    /// Called on every element loaded from the input.
    pub load: Option<FftCallback<'a, D>>,
    /// Called on every element stored to the output.
    pub store: Option<FftCallback<'a, D>>,
}

impl<D: Element> Default for FftCallbacks<'_, D> {
    fn default() -> Self {
        FftCallbacks { load: None, store: None }
    }
}

impl<'a, D: Element> FftCallbacks<'a, D> {
    /// No callbacks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the load callback.
    pub fn on_load(mut self, callback: FftCallback<'a, D>) -> Self {
        self.load = Some(callback);
        self
    }

    /// Sets the store callback.
    pub fn on_store(mut self, callback: FftCallback<'a, D>) -> Self {
        self.store = Some(callback);
        self
    }

    pub(super) fn is_empty(&self) -> bool {
        self.load.is_none() && self.store.is_none()
    }
}

/// One callback as the plan cache keys it: cuFFT links the source and bakes the data address
/// into the plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct CallbackKey {
    pub(super) source: String,
    pub(super) symbol: String,
    pub(super) data: u64,
}
