//! cuFFT: complex-to-complex, real-to-complex and complex-to-real transforms in single and
//! double precision, 1D to 3D, batched, with strides, distances and embeddings.
//!
//! Plans live in a bounded least-recently-used cache keyed on the whole layout (kind, sizes,
//! batch, both embeddings, strides and distances), so a plan is never reused for another
//! layout. Plans do not allocate their own work areas: the handle keeps one workspace, grown
//! to the largest plan's need, and every transform declares it on its recorder.
//!
//! Transforms are unnormalized, as in cuFFT: a forward then inverse transform multiplies by
//! the number of elements of one transform.

mod calls;

use super::plan_cache::PlanCache;
use super::validate as check;
use super::workspace::Workspace;
use super::{dptr, record, Library, OpStream, StreamLibrary};
use crate::completion::Completion;
use crate::device::StreamId;
use crate::error::{Error, Result};
use crate::memory::{Complex, Element, GpuRef};
use crate::track::Access;
use calls::RawPlan;

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

type Plans = PlanCache<PlanKey, RawPlan>;

/// A stream's cuFFT plans and work area. Get it from [`crate::Handles::fft`].
pub struct Fft {
    op: OpStream,
    plans: Plans,
    work: Workspace,
}

impl StreamLibrary for Fft {
    const LIBRARY: Library = Library {
        name: "cuFFT (libcufft)",
        hint: "install the CUDA toolkit's cuFFT library (libcufft.so.12)",
        present: calls::is_present,
        // cufftDestroy frees the plans' device data with a synchronizing free.
        objects: "cuFFT plans",
    };
    type Objects = Vec<RawPlan>;

    fn create(op: OpStream) -> Result<Fft> {
        Ok(Fft { op, plans: PlanCache::new(16, "an evicted cuFFT plan"), work: Workspace::default() })
    }

    fn op_stream(&mut self) -> &mut OpStream {
        &mut self.op
    }

    fn take_objects(&mut self) -> Option<Self::Objects> {
        self.plans.take_all()
    }
}

impl std::fmt::Debug for Fft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fft({}, {} of {} plans cached)", self.op.stream, self.plans.len(), self.plans.capacity())
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

/// `v` as the `i64` cuFFT's 64-bit plan takes.
fn fits_i64(arg: &'static str, what: &str, v: usize) -> Result<()> {
    if i64::try_from(v).is_err() {
        return Err(Error::invalid(arg, format!("{what} = {v} does not fit cuFFT's 64-bit int")));
    }
    Ok(())
}

/// Resolves and checks one side's layout; returns it and the elements it spans.
///
/// Every value handed to `cufftMakePlanMany64` is checked to fit `i64` on its own, also where
/// it is multiplied by zero in the span (a size of 1, a batch of 1), and so is every offset
/// the library computes from them.
fn resolve_side(
    arg: &'static str,
    given: &Option<DataLayout>,
    logical: &[usize],
    batch: usize,
) -> Result<(DataLayout, usize)> {
    let layout = match given {
        Some(l) => l.clone(),
        None => {
            let dist = logical
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .ok_or_else(|| Error::invalid(arg, format!("the packed size {logical:?} overflows usize")))?;
            DataLayout { embed: logical.to_vec(), stride: 1, dist }
        }
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
    for (i, &e) in layout.embed.iter().enumerate() {
        fits_i64(arg, &format!("embed[{i}]"), e)?;
    }
    fits_i64(arg, "stride", layout.stride)?;
    fits_i64(arg, "dist", layout.dist)?;
    for (i, (&e, &n)) in layout.embed.iter().zip(logical).enumerate().skip(1) {
        if e < n {
            return Err(Error::invalid(arg, format!("embed[{i}] = {e} is below the transform's {n} there")));
        }
    }
    // Element (x, y, z) lies at stride * ((x * embed[1] + y) * embed[2] + z): a strided tensor
    // whose stride along dimension i is stride times the embedding inside it.
    let strides = (0..logical.len())
        .map(|i| layout.embed[i + 1..].iter().try_fold(layout.stride, |a, &b| a.checked_mul(b)))
        .collect::<Option<Vec<usize>>>()
        .filter(|s| s.iter().all(|&v| i64::try_from(v).is_ok()))
        .ok_or_else(|| Error::invalid(arg, "stride times the inner embeddings does not fit cuFFT's 64-bit int"))?;
    let span = check::tensor_span(logical, &strides, batch, layout.dist)
        .filter(|&span| i64::try_from(span).is_ok())
        .ok_or_else(|| Error::invalid(arg, "the layout's extent does not fit cuFFT's 64-bit int"))?;
    Ok((layout, span))
}

/// Checks that the `batch` transforms of one side touch disjoint elements: each batch a block
/// past the previous one (dist at least one transform's extent), or batches interleaved inside
/// the stride (stride at least batch * dist).
fn disjoint_batches(arg: &'static str, layout: &DataLayout, dims: &[usize], batch: usize) -> Result<()> {
    if batch <= 1 {
        return Ok(());
    }
    let one = resolve_side(arg, &Some(layout.clone()), dims, 1)?.1;
    let interleaved = layout.dist.checked_mul(batch).is_some_and(|x| layout.stride >= x);
    if layout.dist < one && !interleaved {
        return Err(Error::invalid(
            arg,
            format!(
                "dist {} with stride {} makes transforms overlap (use dist >= {one}, or stride >= batch * dist)",
                layout.dist, layout.stride
            ),
        ));
    }
    Ok(())
}

impl Fft {
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
        self.plans.made()
    }

    /// Bytes of the shared work area (the largest cached plan's need so far).
    pub fn work_area_bytes(&self) -> usize {
        self.work.bytes()
    }

    /// Bounds the plan cache (at least 1); the least recently used plans beyond it are freed.
    pub fn set_plan_capacity(&mut self, capacity: usize) -> Result<()> {
        self.plans.set_capacity(capacity, &self.op)
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
        self.exec(key, input, output, Access::Read, "c2c", direction)
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
        self.exec(key, input, output, Access::Read, "r2c", Direction::Forward)
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
        self.exec(key, input, output, Access::ReadWrite, "c2r", Direction::Inverse)
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
        // Transforms write their outputs concurrently, and C2R / Z2D overwrite their inputs
        // too: the written sides' batches must not share elements. The input of the other
        // kinds is only read, so its batches may overlap.
        disjoint_batches("layout.output", &output, &out_dims, layout.batch)?;
        if matches!(kind, Kind::C2R | Kind::Z2D) {
            disjoint_batches("layout.input", &input, &in_dims, layout.batch)?;
        }
        if in_len < in_span {
            return Err(Error::invalid("input", format!("holds {in_len} elements, the layout needs {in_span}")));
        }
        if out_len < out_span {
            return Err(Error::invalid("output", format!("holds {out_len} elements, the layout needs {out_span}")));
        }
        Ok(PlanKey { kind, dims: layout.dims.clone(), batch: layout.batch, input, output })
    }

    /// Records the uses, finds or makes the plan, sizes the work area, and enqueues the
    /// transform.
    fn exec<I: Element, O: Element>(
        &mut self,
        key: PlanKey,
        input: &GpuRef<I>,
        output: &GpuRef<O>,
        input_access: Access,
        name: &'static str,
        direction: Direction,
    ) -> Result<Completion<()>> {
        let mut rec = self.op.recorder(name);
        record(&mut rec, "input", input, input_access)?;
        record(&mut rec, "output", output, Access::Write)?;
        let stream = self.op.bound_stream()?;
        // SAFETY: the stream is live in the bound context and outlives the plan (the device
        // keeps its streams until every library state is gone).
        let plan = self.plans.get_or_make(key, &self.op, |key| unsafe { RawPlan::make(key, stream.cu_stream()) })?;
        // The old area is retired on the device timeline, after the transforms that used it.
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|w| w.raw_device_ptr()).transpose()?;
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the plan was made for exactly these buffers' validated layout, on this
            // stream; the buffers are live and fenced by preflight, and `c2r` declared its input
            // as written; (2) the work area, declared read-write, holds at least the plan's
            // work size and serves one transform at a time (the stream is in order).
            unsafe {
                if let Some(w) = work {
                    plan.set_work_area(w)?;
                }
                plan.exec(dptr(input)?, dptr(output)?, direction)
            }
        })
    }
}
