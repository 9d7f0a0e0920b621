//! cuFFT: complex-to-complex, real-to-complex and complex-to-real transforms in single and
//! double precision, 1D to 3D, batched, with strides, distances and embeddings.
//!
//! Plans live in a bounded least-recently-used cache keyed on the whole layout (kind, sizes,
//! batch, both embeddings, strides and distances), so a plan is never reused for another
//! layout. Plans do not allocate their own work areas: the handle keeps one work area, grown
//! to the largest plan's need, and every transform declares it on its recorder.
//!
//! Transforms are unnormalized, as in cuFFT: a forward then inverse transform multiplies by
//! the number of elements of one transform.

use super::validate as check;
use super::{dptr, record, OpStream};
use crate::completion::Completion;
use crate::device::{Device, StreamId};
use crate::error::{Error, Result};
use crate::memory::{Complex, Element, GpuRef};
use crate::track::Access;
use cudarc::cufft::sys;
use std::ffi::{c_int, c_longlong, c_void};

/// The direction of a complex-to-complex transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `exp(-2πi jk/n)`.
    Forward,
    /// `exp(+2πi jk/n)`, unnormalized.
    Inverse,
}

/// How one side (input or output) of a transform lies in memory, in elements of that side's
/// type, as in cuFFT's advanced layout: element `(x, y, z)` of transform `b` is at
/// `b * dist + stride * ((x * embed[1] + y) * embed[2] + z)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DataLayout {
    /// The storage dimensions (`embed[i] >= ` the logical size for `i >= 1`; `embed[0]` only
    /// documents the allocation). Same rank as the transform.
    pub embed: Vec<usize>,
    /// Distance between consecutive elements of one transform.
    pub stride: usize,
    /// Distance between the first elements of consecutive transforms.
    pub dist: usize,
}

/// A transform's shape: sizes (1 to 3 dimensions, outermost first), batch count, and the
/// input and output layouts (`None`: packed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FftLayout {
    /// Logical sizes, outermost first. For real transforms these are the real side's sizes; the
    /// complex side has `dims[last] / 2 + 1` in its last dimension.
    pub dims: Vec<usize>,
    /// How many transforms.
    pub batch: usize,
    /// The input's layout; `None`: packed.
    pub input: Option<DataLayout>,
    /// The output's layout; `None`: packed.
    pub output: Option<DataLayout>,
}

impl FftLayout {
    /// One packed 1D transform of `n` points.
    pub fn d1(n: usize) -> Self {
        FftLayout { dims: vec![n], batch: 1, input: None, output: None }
    }

    /// One packed 2D transform (`nx` outer, `ny` inner).
    pub fn d2(nx: usize, ny: usize) -> Self {
        FftLayout { dims: vec![nx, ny], batch: 1, input: None, output: None }
    }

    /// One packed 3D transform.
    pub fn d3(nx: usize, ny: usize, nz: usize) -> Self {
        FftLayout { dims: vec![nx, ny, nz], batch: 1, input: None, output: None }
    }

    /// `batch` packed transforms of these sizes.
    pub fn batched(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Sets explicit input and output layouts.
    pub fn with_layouts(mut self, input: DataLayout, output: DataLayout) -> Self {
        self.input = Some(input);
        self.output = Some(output);
        self
    }
}

/// The transform kinds, as cuFFT names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    C2C,
    R2C,
    C2R,
    Z2Z,
    D2Z,
    Z2D,
}

impl Kind {
    fn raw(self) -> sys::cufftType {
        use sys::cufftType_t as T;
        match self {
            Kind::C2C => T::CUFFT_C2C,
            Kind::R2C => T::CUFFT_R2C,
            Kind::C2R => T::CUFFT_C2R,
            Kind::Z2Z => T::CUFFT_Z2Z,
            Kind::D2Z => T::CUFFT_D2Z,
            Kind::Z2D => T::CUFFT_Z2D,
        }
    }

    /// Whether the input (and output) side holds complex values.
    fn complex_sides(self) -> (bool, bool) {
        match self {
            Kind::C2C | Kind::Z2Z => (true, true),
            Kind::R2C | Kind::D2Z => (false, true),
            Kind::C2R | Kind::Z2D => (true, false),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The float types cuFFT transforms: `f32` and `f64`.
pub trait FftFloat: Element + sealed::Sealed
where
    Complex<Self>: Element,
{
    #[doc(hidden)]
    const DOUBLE: bool;
}
impl FftFloat for f32 {
    const DOUBLE: bool = false;
}
impl FftFloat for f64 {
    const DOUBLE: bool = true;
}

/// A layout with every `None` resolved: the plan cache's key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    kind: Kind,
    dims: Vec<usize>,
    batch: usize,
    input: DataLayout,
    output: DataLayout,
}

struct Plan {
    key: PlanKey,
    handle: sys::cufftHandle,
    work_bytes: usize,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created by `cufftCreate`, destroyed once (on the reaper, with its context
        // bound, after the transforms enqueued with it have finished).
        let r = unsafe { sys::cufftDestroy(self.handle) };
        if r != sys::cufftResult::CUFFT_SUCCESS {
            log::error!("cusched: cufftDestroy failed: {r:?}");
        }
    }
}

impl Drop for Fft {
    fn drop(&mut self) {
        // cufftDestroy frees the plans' device data with a synchronizing free: the reaper runs
        // it once the stream's work is done, off this thread.
        if !self.plans.is_empty() {
            let plans = std::mem::take(&mut self.plans);
            self.op.retire("cuFFT plans", plans);
        }
    }
}

impl super::StreamLibrary for Fft {
    fn create(device: &Device, stream: StreamId) -> Result<Self> {
        Fft::new(device, stream)
    }

    fn op_stream(&self) -> &OpStream {
        &self.op
    }

    /// Drops plans of a poisoned context without calling cuFFT on them.
    fn abandon(mut self) {
        for p in self.plans.drain(..) {
            std::mem::forget(p);
        }
    }
}

/// A stream's cuFFT plans and work area. Get it from [`crate::Handles::fft`].
pub struct Fft {
    op: OpStream,
    /// Most recently used last.
    plans: Vec<Plan>,
    capacity: usize,
    work: Option<GpuRef<u8>>,
    plans_made: u64,
}

impl std::fmt::Debug for Fft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fft({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.capacity)
    }
}

fn status(call: &'static str, r: sys::cufftResult) -> Result<()> {
    if r == sys::cufftResult::CUFFT_SUCCESS {
        Ok(())
    } else {
        Err(Error::library(call, r))
    }
}

/// Logical sizes of one side: the complex side of a real transform is halved in its last
/// dimension.
fn side_dims(dims: &[usize], complex_half: bool) -> Vec<usize> {
    let mut d = dims.to_vec();
    if complex_half {
        if let Some(last) = d.last_mut() {
            *last = *last / 2 + 1;
        }
    }
    d
}

/// Resolves and checks one side's layout; returns it and the elements it spans.
fn resolve_side(
    arg: &'static str,
    given: &Option<DataLayout>,
    logical: &[usize],
    batch: usize,
) -> Result<(DataLayout, usize)> {
    let layout = match given {
        Some(l) => l.clone(),
        None => DataLayout { embed: logical.to_vec(), stride: 1, dist: logical.iter().product() },
    };
    if layout.embed.len() != logical.len() {
        return Err(Error::invalid(
            arg,
            format!("embed has {} dimensions, the transform {}", layout.embed.len(), logical.len()),
        ));
    }
    if layout.stride == 0 || layout.dist == 0 {
        return Err(Error::invalid(arg, "stride and dist must be at least 1"));
    }
    for (i, (&e, &n)) in layout.embed.iter().zip(logical).enumerate().skip(1) {
        if e < n {
            return Err(Error::invalid(arg, format!("embed[{i}] = {e} is below the transform's {n} there")));
        }
    }
    let overflow = || Error::invalid(arg, "the layout's extent overflows usize");
    // Index of the last element of one transform, then of the last transform.
    let mut last = 0usize;
    for (i, &n) in logical.iter().enumerate() {
        let inner = layout.embed[i + 1..].iter().try_fold(1usize, |a, &b| a.checked_mul(b)).ok_or_else(overflow)?;
        last = (n - 1).checked_mul(inner).and_then(|x| x.checked_add(last)).ok_or_else(overflow)?;
    }
    let span = last
        .checked_mul(layout.stride)
        .and_then(|x| x.checked_add(1))
        .and_then(|one| layout.dist.checked_mul(batch - 1).and_then(|x| x.checked_add(one)))
        .ok_or_else(overflow)?;
    Ok((layout, span))
}

impl Fft {
    pub(crate) fn new(device: &Device, stream: StreamId) -> Result<Fft> {
        // SAFETY: only tries to dlopen cuFFT by name; cudarc panics later if it is missing.
        if !device.is_simulated() && !unsafe { sys::is_culib_present() } {
            return Err(Error::LibraryUnavailable {
                library: "cuFFT (libcufft)",
                hint: "install the CUDA toolkit's cuFFT library (libcufft.so.12)",
            });
        }
        Ok(Fft {
            op: OpStream::new(device, stream, "cuFFT (libcufft)"),
            plans: Vec::new(),
            capacity: 16,
            work: None,
            plans_made: 0,
        })
    }

    /// The stream this handle enqueues on.
    pub fn stream(&self) -> StreamId {
        self.op.stream
    }

    /// Plans currently cached.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    /// Plans made since the handle was created (a cache hit makes none).
    pub fn plans_made(&self) -> u64 {
        self.plans_made
    }

    /// Bytes of the shared work area (the largest cached plan's need so far).
    pub fn work_area_bytes(&self) -> usize {
        self.work.as_ref().map_or(0, |w| w.len())
    }

    /// Bounds the plan cache (at least 1); the least recently used plans beyond it are freed.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        if capacity == 0 {
            return Err(Error::invalid("capacity", "must be at least 1"));
        }
        self.capacity = capacity;
        let excess = self.plans.len().saturating_sub(capacity);
        if excess > 0 {
            let evicted: Vec<Plan> = self.plans.drain(..excess).collect();
            self.op.retire("evicted cuFFT plans", evicted);
        }
        Ok(())
    }

    /// A complex-to-complex transform (`C2C` for `f32`, `Z2Z` for `f64`). `input` and `output`
    /// may be the same buffer (in place) when both layouts are equal.
    pub fn c2c<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<Complex<T>>,
        direction: Direction,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let kind = if T::DOUBLE { Kind::Z2Z } else { Kind::C2C };
        let in_place = input.same_buffer(output);
        let key = self.key(kind, layout, input.len(), output.len())?;
        if in_place && key.input != key.output {
            return Err(Error::invalid("output", "an in-place transform needs equal input and output layouts"));
        }
        let dir: c_int = match direction {
            Direction::Forward => -1,
            Direction::Inverse => 1,
        };
        self.exec(key, input, output, Access::Read, "c2c", move |plan, i, o| {
            // SAFETY: see `exec`: the plan matches the buffers' validated layout.
            unsafe {
                if T::DOUBLE {
                    status("cufftExecZ2Z", sys::cufftExecZ2Z(plan, i.cast(), o.cast(), dir))
                } else {
                    status("cufftExecC2C", sys::cufftExecC2C(plan, i.cast(), o.cast(), dir))
                }
            }
        })
    }

    /// A real-to-complex forward transform (`R2C` / `D2Z`); the output holds `dims[last]/2 + 1`
    /// complex values in the last dimension.
    pub fn r2c<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<T>,
        output: &GpuRef<Complex<T>>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let kind = if T::DOUBLE { Kind::D2Z } else { Kind::R2C };
        let key = self.key(kind, layout, input.len(), output.len())?;
        self.exec(key, input, output, Access::Read, "r2c", move |plan, i, o| {
            // SAFETY: see `exec`.
            unsafe {
                if T::DOUBLE {
                    status("cufftExecD2Z", sys::cufftExecD2Z(plan, i.cast(), o.cast()))
                } else {
                    status("cufftExecR2C", sys::cufftExecR2C(plan, i.cast(), o.cast()))
                }
            }
        })
    }

    /// A complex-to-real inverse transform (`C2R` / `Z2D`). cuFFT overwrites the input of
    /// these, so `input` is declared as written too.
    pub fn c2r<T: FftFloat>(
        &mut self,
        layout: &FftLayout,
        input: &GpuRef<Complex<T>>,
        output: &GpuRef<T>,
    ) -> Result<Completion<()>>
    where
        Complex<T>: Element,
    {
        let kind = if T::DOUBLE { Kind::Z2D } else { Kind::C2R };
        let key = self.key(kind, layout, input.len(), output.len())?;
        self.exec(key, input, output, Access::ReadWrite, "c2r", move |plan, i, o| {
            // SAFETY: see `exec`.
            unsafe {
                if T::DOUBLE {
                    status("cufftExecZ2D", sys::cufftExecZ2D(plan, i.cast(), o.cast()))
                } else {
                    status("cufftExecC2R", sys::cufftExecC2R(plan, i.cast(), o.cast()))
                }
            }
        })
    }

    /// Validates `layout` for `kind` against buffers of `in_len` and `out_len` elements.
    fn key(&self, kind: Kind, layout: &FftLayout, in_len: usize, out_len: usize) -> Result<PlanKey> {
        if layout.dims.is_empty() || layout.dims.len() > 3 {
            return Err(Error::invalid("layout.dims", format!("{} dimensions; cuFFT takes 1 to 3", layout.dims.len())));
        }
        for &d in &layout.dims {
            check::dim64("layout.dims", d)?;
        }
        check::dim64("layout.batch", layout.batch)?;
        let (cin, cout) = kind.complex_sides();
        let real = !(cin && cout);
        let in_dims = side_dims(&layout.dims, real && cin);
        let out_dims = side_dims(&layout.dims, real && cout);
        let (input, in_span) = resolve_side("layout.input", &layout.input, &in_dims, layout.batch)?;
        let (output, out_span) = resolve_side("layout.output", &layout.output, &out_dims, layout.batch)?;
        if layout.batch > 1 {
            // Transforms write disjoint elements when each batch is a block past the previous
            // one (dist at least one transform's extent), or when batches interleave inside the
            // stride (stride at least batch * dist).
            let one = resolve_side("layout.output", &Some(output.clone()), &out_dims, 1)?.1;
            let interleaved = output.dist.checked_mul(layout.batch).is_some_and(|x| output.stride >= x);
            if output.dist < one && !interleaved {
                return Err(Error::invalid(
                    "layout.output",
                    format!(
                        "dist {} with stride {} makes transforms overwrite each other (use dist >= {one}, or stride >= batch * dist)",
                        output.dist, output.stride
                    ),
                ));
            }
        }
        if in_len < in_span {
            return Err(Error::invalid("input", format!("holds {in_len} elements, the layout needs {in_span}")));
        }
        if out_len < out_span {
            return Err(Error::invalid("output", format!("holds {out_len} elements, the layout needs {out_span}")));
        }
        Ok(PlanKey { kind, dims: layout.dims.clone(), batch: layout.batch, input, output })
    }

    /// Records the uses, finds or makes the plan, sizes the work area, and enqueues `run`.
    fn exec<I: Element, O: Element>(
        &mut self,
        key: PlanKey,
        input: &GpuRef<I>,
        output: &GpuRef<O>,
        input_access: Access,
        name: &'static str,
        run: impl FnOnce(sys::cufftHandle, *mut c_void, *mut c_void) -> Result<()>,
    ) -> Result<Completion<()>> {
        let mut rec = self.op.recorder(name);
        record(&mut rec, "input", input, input_access)?;
        record(&mut rec, "output", output, Access::Write)?;
        let stream = self.op.cuda_stream()?;
        crate::backend::cuda::bind(stream.context())?;
        let plan_index = self.plan(key, stream.cu_stream())?;
        let need = self.plans[plan_index].work_bytes;
        if need > self.work_area_bytes() {
            // The old area is freed on the device timeline after the transforms that used it.
            self.work = Some(self.op.device.alloc::<u8>(self.op.stream, need)?);
        }
        if let Some(w) = &self.work {
            record(&mut rec, "work area", w, Access::ReadWrite)?;
        }
        let plan = self.plans[plan_index].handle;
        let work = self.work.as_ref().map(|w| w.raw_device_ptr()).transpose()?;
        self.op.run(rec, Vec::new(), || {
            if let Some(w) = work {
                // SAFETY: the work area is a live device buffer of at least the plan's work size.
                status("cufftSetWorkArea", unsafe { sys::cufftSetWorkArea(plan, w as *mut c_void) })?;
            }
            // The plan was made for exactly these buffers' validated layout, on this stream; the
            // buffers are live and fenced by preflight; `c2r` declared its input as written.
            run(plan, dptr(input)?, dptr(output)?)
        })
    }

    /// The index of the cached plan for `key`, made (and the least recently used evicted) on a
    /// miss. The found plan moves to the most recently used end.
    fn plan(&mut self, key: PlanKey, stream: crate::backend::cuda::CuStream) -> Result<usize> {
        if let Some(i) = self.plans.iter().position(|p| p.key == key) {
            let p = self.plans.remove(i);
            self.plans.push(p);
            return Ok(self.plans.len() - 1);
        }
        let mut handle: sys::cufftHandle = 0;
        // SAFETY: `handle` is a valid out-pointer.
        status("cufftCreate", unsafe { sys::cufftCreate(&mut handle) })?;
        let mut plan = Plan { key, handle, work_bytes: 0 };
        let to64 = |v: &[usize]| v.iter().map(|&x| x as c_longlong).collect::<Vec<_>>();
        let mut n = to64(&plan.key.dims);
        let mut inembed = to64(&plan.key.input.embed);
        let mut onembed = to64(&plan.key.output.embed);
        let k = &plan.key;
        let mut work = 0usize;
        // SAFETY: a fresh plan handle; the arrays hold `rank` entries each and outlive the
        // calls; the stream is live in the bound context.
        unsafe {
            status("cufftSetAutoAllocation", sys::cufftSetAutoAllocation(handle, 0))?;
            status(
                "cufftMakePlanMany64",
                sys::cufftMakePlanMany64(
                    handle,
                    n.len() as c_int,
                    n.as_mut_ptr(),
                    inembed.as_mut_ptr(),
                    k.input.stride as c_longlong,
                    k.input.dist as c_longlong,
                    onembed.as_mut_ptr(),
                    k.output.stride as c_longlong,
                    k.output.dist as c_longlong,
                    k.kind.raw(),
                    k.batch as c_longlong,
                    &mut work,
                ),
            )?;
            status("cufftSetStream", sys::cufftSetStream(handle, stream as _))?;
        }
        plan.work_bytes = work;
        self.plans_made += 1;
        if self.plans.len() >= self.capacity {
            // Inside an op: destroying here would synchronize the device on the op path.
            let evicted = self.plans.remove(0);
            self.op.retire("an evicted cuFFT plan", evicted);
        }
        self.plans.push(plan);
        Ok(self.plans.len() - 1)
    }
}

const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Fft>();
};
