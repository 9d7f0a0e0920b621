//! The simulator's cuFFT: every transform computed on the host with `rustfft`, from the
//! buffers' simulated memory, with cuFFT's semantics: the same advanced layouts (embeddings,
//! strides, distances), unnormalized, and the complex-to-real transforms reading only the
//! non-redundant half of a Hermitian spectrum (the imaginary parts of the bins that must be real,
//! DC and Nyquist, are ignored, as cuFFT does). cuFFT may overwrite the input of a
//! complex-to-real transform; the simulator leaves it as it was. Half and bfloat16 values are
//! widened to `f32`, transformed in `f32`, and rounded back to nearest: cuFFT computes them in
//! its own way, so results agree to a few units in the last place of the half type, scaled by
//! the transform's size, not bit for bit.
//!
//! A transform gathers its input (one read of the input buffer), transforms every batch, then
//! scatters the output (one write): in place (the same buffer on both sides) works as on the GPU.
//! Callbacks' host forms run on the gathered input and on the output before it is scattered,
//! each with no other buffer locked (their data buffer may be the input or the output); they
//! compute in f64, and the value is rounded to the transform's arithmetic type.

use super::sealed::Sealed;
use super::{Direction, FftFloat, PlanKey, SimCallback};
use crate::memory::{Complex, Element, SimMem};
use rustfft::num_complex::Complex as C;
use rustfft::num_traits::Zero;
use rustfft::{FftNum, FftPlanner};

/// Where one side's elements lie: the element of batch `b` at multi-index `(i0, i1, ..)` is at
/// `b * dist + sum(i_k * strides[k])`.
struct Side {
    dims: Vec<usize>,
    strides: Vec<usize>,
    dist: usize,
}

impl Side {
    /// The side of `key` (`input` or `output`) holding `dims` logical elements per transform.
    /// Validation already checked that every offset fits the buffer, so nothing here overflows.
    fn new(layout: &super::DataLayout, dims: Vec<usize>) -> Side {
        let strides =
            (0..dims.len()).map(|i| layout.embed[i + 1..].iter().product::<usize>() * layout.stride).collect();
        Side { dims, strides, dist: layout.dist }
    }

    /// Offsets of batch `b`'s elements, in row-major order of the logical dimensions.
    fn offsets(&self, b: usize) -> Vec<usize> {
        let mut out = vec![b * self.dist];
        for (&n, &s) in self.dims.iter().zip(&self.strides) {
            out = out.iter().flat_map(|&base| (0..n).map(move |i| base + i * s)).collect();
        }
        out
    }
}

/// The last dimension of a real transform's complex side: `n / 2 + 1` bins.
fn halved(dims: &[usize]) -> Vec<usize> {
    let mut d = dims.to_vec();
    if let Some(last) = d.last_mut() {
        *last = *last / 2 + 1;
    }
    d
}

/// The arithmetic type the simulator transforms `T` in.
type Wide<T> = <T as Sealed>::Compute;

fn to_c<T: FftFloat>(v: Complex<T>) -> C<Wide<T>>
where
    Complex<T>: Element,
{
    C::new(v.re.widen(), v.im.widen())
}

fn from_c<T: FftFloat>(v: C<Wide<T>>) -> Complex<T>
where
    Complex<T>: Element,
{
    Complex::new(T::narrow(v.re), T::narrow(v.im))
}

/// Transforms the packed row-major array `buf` of `dims` along every dimension.
fn fft_nd<T: FftNum>(planner: &mut FftPlanner<T>, buf: &mut [C<T>], dims: &[usize], direction: Direction) {
    for axis in 0..dims.len() {
        fft_axis(planner, buf, dims, axis, direction);
    }
}

/// Transforms the packed row-major array `buf` of `dims` along `axis` only.
fn fft_axis<T: FftNum>(
    planner: &mut FftPlanner<T>,
    buf: &mut [C<T>],
    dims: &[usize],
    axis: usize,
    direction: Direction,
) {
    let len = dims[axis];
    if len <= 1 || buf.is_empty() {
        return;
    }
    let fft = match direction {
        Direction::Forward => planner.plan_fft_forward(len),
        Direction::Inverse => planner.plan_fft_inverse(len),
    };
    let inner: usize = dims[axis + 1..].iter().product();
    if inner == 1 {
        // Contiguous lines: rustfft transforms every `len` chunk of the buffer in one call.
        fft.process(buf);
        return;
    }
    // Strided lines: each block of `len * inner` is transposed so its lines are contiguous,
    // transformed together, and transposed back.
    let block = len * inner;
    let mut scratch = vec![C::new(T::zero(), T::zero()); block];
    for chunk in buf.chunks_exact_mut(block) {
        for k in 0..len {
            for j in 0..inner {
                scratch[j * len + k] = chunk[k * inner + j];
            }
        }
        fft.process(&mut scratch);
        for k in 0..len {
            for j in 0..inner {
                chunk[k * inner + j] = scratch[j * len + k];
            }
        }
    }
}

/// A callback's host form and the simulated memory of its data buffer.
pub(super) struct Hook<D> {
    pub(super) f: SimCallback<D>,
    pub(super) data: Option<SimMem<D>>,
}

/// The host forms of a transform's callbacks.
pub(super) struct Hooks<D> {
    pub(super) load: Option<Hook<D>>,
    pub(super) store: Option<Hook<D>>,
}

impl<D: Element> Hook<D> {
    /// `values[i] = f(offsets[i], values[i], data)`, in f64, with the data buffer read once;
    /// `real` keeps only the real part of each result (a real side's value).
    ///
    /// Called with no other buffer's lock held: the data buffer may be the input or output.
    fn apply<W: Copy>(&self, offsets: &[usize], values: &mut [C<W>], real: bool, (to_f64, from_f64): Conv<W>) {
        let guard = self.data.as_ref().map(|d| d.read());
        let data: &[D] = guard.as_deref().unwrap_or(&[]);
        for (&o, v) in offsets.iter().zip(values.iter_mut()) {
            let r = (self.f)(o, Complex::new(to_f64(v.re), to_f64(v.im)), data);
            let im = if real { 0.0 } else { r.im };
            *v = C::new(from_f64(r.re), from_f64(im));
        }
    }
}

/// Conversions of an arithmetic type to and from the callbacks' f64.
type Conv<W> = (fn(W) -> f64, fn(f64) -> W);

/// The conversions of `T`'s simulator arithmetic to and from the callbacks' f64.
fn conv<T: FftFloat>() -> Conv<Wide<T>>
where
    Complex<T>: Element,
{
    (T::compute_to_f64, T::compute_from_f64)
}

/// Every offset of a side's `batch` transforms, batch after batch.
fn all_offsets(side: &Side, batch: usize) -> Vec<usize> {
    (0..batch).flat_map(|b| side.offsets(b)).collect()
}

/// A complex-to-complex transform (C2C, Z2Z) of `key`'s layout.
pub(super) fn c2c<T: FftFloat, D: Element>(
    key: PlanKey,
    input: SimMem<Complex<T>>,
    output: SimMem<Complex<T>>,
    direction: Direction,
    hooks: Hooks<D>,
) -> impl FnOnce() + Send + 'static
where
    Complex<T>: Element,
{
    move || {
        let (ins, outs) = (Side::new(&key.input, key.dims.clone()), Side::new(&key.output, key.dims.clone()));
        let per: usize = key.dims.iter().product();
        let in_offs = all_offsets(&ins, key.batch);
        let mut data: Vec<C<Wide<T>>> = {
            let src = input.read();
            in_offs.iter().map(|&o| to_c(src[o])).collect()
        };
        if let Some(h) = &hooks.load {
            h.apply(&in_offs, &mut data, false, conv::<T>());
        }
        let mut planner = FftPlanner::new();
        for batch in data.chunks_exact_mut(per) {
            fft_nd(&mut planner, batch, &key.dims, direction);
        }
        let out_offs = all_offsets(&outs, key.batch);
        if let Some(h) = &hooks.store {
            h.apply(&out_offs, &mut data, false, conv::<T>());
        }
        let mut dst = output.lock();
        for (&o, &v) in out_offs.iter().zip(&data) {
            dst[o] = from_c(v);
        }
    }
}

/// A real-to-complex forward transform (R2C, D2Z): the first `n / 2 + 1` bins of the last
/// dimension of the complex transform of the real input.
pub(super) fn r2c<T: FftFloat, D: Element>(
    key: PlanKey,
    input: SimMem<T>,
    output: SimMem<Complex<T>>,
    hooks: Hooks<D>,
) -> impl FnOnce() + Send + 'static
where
    Complex<T>: Element,
{
    move || {
        let half = halved(&key.dims);
        let (ins, outs) = (Side::new(&key.input, key.dims.clone()), Side::new(&key.output, half.clone()));
        let per: usize = key.dims.iter().product();
        let last = key.dims[key.dims.len() - 1];
        let bins = last / 2 + 1;
        let in_offs = all_offsets(&ins, key.batch);
        let mut data: Vec<C<Wide<T>>> = {
            let src = input.read();
            in_offs.iter().map(|&o| C::new(src[o].widen(), Wide::<T>::zero())).collect()
        };
        if let Some(h) = &hooks.load {
            h.apply(&in_offs, &mut data, true, conv::<T>());
        }
        let mut planner = FftPlanner::new();
        for batch in data.chunks_exact_mut(per) {
            fft_nd(&mut planner, batch, &key.dims, Direction::Forward);
        }
        let mut kept: Vec<C<Wide<T>>> = data.chunks_exact(last).flat_map(|row| row[..bins].iter().copied()).collect();
        let out_offs = all_offsets(&outs, key.batch);
        if let Some(h) = &hooks.store {
            h.apply(&out_offs, &mut kept, false, conv::<T>());
        }
        let mut dst = output.lock();
        for (&o, &v) in out_offs.iter().zip(&kept) {
            dst[o] = from_c(v);
        }
    }
}

/// A complex-to-real inverse transform (C2R, Z2D) of a Hermitian spectrum given by its first
/// `n / 2 + 1` bins in the last dimension: the inverse along the other dimensions on the half
/// spectrum, then, row by row, the full spectrum rebuilt by symmetry and the real part of its
/// inverse.
pub(super) fn c2r<T: FftFloat, D: Element>(
    key: PlanKey,
    input: SimMem<Complex<T>>,
    output: SimMem<T>,
    hooks: Hooks<D>,
) -> impl FnOnce() + Send + 'static
where
    Complex<T>: Element,
{
    move || {
        let half = halved(&key.dims);
        let (ins, outs) = (Side::new(&key.input, half.clone()), Side::new(&key.output, key.dims.clone()));
        let per_half: usize = half.iter().product();
        let last = key.dims[key.dims.len() - 1];
        let bins = last / 2 + 1;
        let in_offs = all_offsets(&ins, key.batch);
        let mut data: Vec<C<Wide<T>>> = {
            let src = input.read();
            in_offs.iter().map(|&o| to_c(src[o])).collect()
        };
        if let Some(h) = &hooks.load {
            h.apply(&in_offs, &mut data, false, conv::<T>());
        }
        let mut planner = FftPlanner::new();
        let rank = key.dims.len();
        for batch in data.chunks_exact_mut(per_half) {
            for axis in 0..rank - 1 {
                fft_axis(&mut planner, batch, &half, axis, Direction::Inverse);
            }
        }
        let inverse = planner.plan_fft_inverse(last);
        let zero = Wide::<T>::zero();
        let mut row = vec![C::new(zero, zero); last];
        let mut reals = Vec::with_capacity(per_half / bins * last * key.batch);
        for spectrum in data.chunks_exact(bins) {
            row[..bins].copy_from_slice(spectrum);
            for k in bins..last {
                row[k] = spectrum[last - k].conj();
            }
            inverse.process(&mut row);
            reals.extend(row.iter().map(|v| C::new(v.re, zero)));
        }
        let out_offs = all_offsets(&outs, key.batch);
        if let Some(h) = &hooks.store {
            h.apply(&out_offs, &mut reals, true, conv::<T>());
        }
        let mut dst = output.lock();
        for (&o, v) in out_offs.iter().zip(&reals) {
            dst[o] = T::narrow(v.re);
        }
    }
}
