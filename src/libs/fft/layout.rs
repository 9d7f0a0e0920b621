//! A transform's layout: the public description ([`FftLayout`], [`DataLayout`]), the transform
//! kinds, and the checks that resolve a layout into the plan cache's key (every size fits
//! cuFFT's 64-bit plan, the buffers hold the layout, written batches do not overlap).

use super::{CallbackKey, Fft, Precision, StreamLibrary};
use crate::error::{Error, Result};
use crate::libs::validate as check;

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

/// The transform kinds; with the [`Precision`] they name cuFFT's types (`C2C` in single
/// precision is `CUFFT_C2C`, in double `CUFFT_Z2Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    C2C,
    R2C,
    C2R,
}

impl Kind {
    /// Whether the input (and output) side holds complex values.
    pub(super) fn complex_sides(self) -> (bool, bool) {
        match self {
            Kind::C2C => (true, true),
            Kind::R2C => (false, true),
            Kind::C2R => (true, false),
        }
    }
}

/// A layout with every `None` resolved: the plan cache's key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct PlanKey {
    pub(super) kind: Kind,
    pub(super) precision: Precision,
    pub(super) dims: Vec<usize>,
    pub(super) batch: usize,
    pub(super) input: DataLayout,
    pub(super) output: DataLayout,
    /// The load and store callbacks linked into the plan (CUDA only).
    pub(super) load: Option<CallbackKey>,
    pub(super) store: Option<CallbackKey>,
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
    /// Validates `layout` for `kind` in `precision` against buffers of `in_len` and `out_len`
    /// elements.
    pub(super) fn key(
        &self,
        kind: Kind,
        precision: Precision,
        layout: &FftLayout,
        in_len: usize,
        out_len: usize,
    ) -> Result<PlanKey> {
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
        if kind == Kind::C2R {
            disjoint_batches("layout.input", &input, &in_dims, layout.batch)?;
        }
        if matches!(precision, Precision::Half | Precision::BFloat16) {
            self.check_half(kind, precision, &layout.dims, (&input, in_span), (&output, out_span))?;
        }
        if in_len < in_span {
            return Err(Error::invalid("input", format!("holds {in_len} elements, the layout needs {in_span}")));
        }
        if out_len < out_span {
            return Err(Error::invalid("output", format!("holds {out_len} elements, the layout needs {out_span}")));
        }
        Ok(PlanKey {
            kind,
            precision,
            dims: layout.dims.clone(),
            batch: layout.batch,
            input,
            output,
            load: None,
            store: None,
        })
    }

    /// cuFFT's rules for half and bfloat16 transforms: every size a power of two, the real side
    /// of a real transform at unit stride, at most 2^32 elements a side, and a device of compute
    /// capability 5.3 (half) or 8.0 (bfloat16) or later. `cufftXtMakePlanMany` would refuse
    /// the first three with a bare `CUFFT_INVALID_SIZE` / `CUFFT_INVALID_VALUE`; here they name
    /// the argument, before anything is recorded.
    fn check_half(
        &self,
        kind: Kind,
        precision: Precision,
        dims: &[usize],
        (input, in_span): (&DataLayout, usize),
        (output, out_span): (&DataLayout, usize),
    ) -> Result<()> {
        if let Some(&d) = dims.iter().find(|d| !d.is_power_of_two()) {
            return Err(Error::invalid(
                "layout.dims",
                format!("{precision:?} transforms take power-of-two sizes only; {dims:?} has {d} (pad it, or use f32)"),
            ));
        }
        let real_side = match kind {
            Kind::C2C => None,
            Kind::R2C => Some(("layout.input", input)),
            Kind::C2R => Some(("layout.output", output)),
        };
        if let Some((arg, side)) = real_side.filter(|(_, side)| side.stride != 1) {
            return Err(Error::invalid(
                arg,
                format!(
                    "{precision:?} real transforms take the real side at stride 1, not {} (use embed and dist \
                     to space it)",
                    side.stride
                ),
            ));
        }
        for (arg, span) in [("layout.input", in_span), ("layout.output", out_span)] {
            if span > 1usize << 32 {
                return Err(Error::invalid(
                    arg,
                    format!("{precision:?} transforms address at most 2^32 elements a side; this one spans {span}"),
                ));
            }
        }
        let (major, minor) = self.op.device.compute_capability()?;
        let needed = if precision == Precision::Half { (5, 3) } else { (8, 0) };
        if (major, minor) < needed {
            return Err(Error::Unsupported {
                library: Fft::LIBRARY.name,
                what: format!("{precision:?} transforms on a device of compute capability {major}.{minor}"),
                hint: format!(
                    "cuFFT's {precision:?} transforms need compute capability {}.{} or later; use f32",
                    needed.0, needed.1
                ),
            });
        }
        Ok(())
    }
}
