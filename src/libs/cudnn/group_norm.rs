//! Group norm: the channels of each image split into `groups` equal groups, each group
//! normalized over its channels and spatial positions, then scaled and shifted per channel:
//! `y = (x - mean[n, g]) / sqrt(var[n, g] + eps) * scale[c] + bias[c]`. Forward (training
//! with the saved statistics, `N·groups` f32 values each; inference) and backward.
//!
//! cuDNN 9.19 offers no group-norm engine on sm_90 (the backend's norm operation names the
//! mode, and no engine takes it), so each op is one recorded op made of legacy calls, in
//! channels-first order (a channels-last tensor is transformed there and back):
//! - a group of one image is a contiguous run, so the images' groups are the channels of a
//!   `1 × N·groups × (C/groups)·H·W × 1` tensor, and batch norm's spatial mode over it
//!   normalizes each group (scale 1, bias 0) and saves its statistics;
//! - batch-norm inference with mean 0 and variance 1 applies the per-channel `scale` and
//!   `bias` (forward), or multiplies `dy` by `scale` (backward);
//! - backward, batch-norm backward over the grouped view gives `dx` from `dy·scale`, and over
//!   the channels, fed the normalized input with mean 0 and inverse deviation 1, gives
//!   `dscale = Σ dy·x̂` and `dbias = Σ dy`.
//!
//! The intermediates live in the stream's workspace: two (channels-first) or five
//! (channels-last) tensors of `x`'s size, plus a few per-group values. The normalized input
//! that `dscale` sums over is rounded to the data type first.

use super::calls::{self, BatchNormArgs, BatchNormCall, RawHandle};
use super::tensor::{DnnElement, Layout, Shape, TensorView};
use super::{Cudnn, NormStats};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::{GpuRef, SimMem};
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// The epsilon of the batch-norm calls that only scale (variance `1 - AFFINE_EPS`): both are
/// exact in f32 and add up to 1, so their deviation is exactly 1.
const AFFINE_EPS: f32 = 1.0 / 1024.0;

/// Byte offsets of the workspace's parts are rounded up to this.
const ALIGN: usize = 256;

/// The checked geometry of a group norm.
#[derive(Clone, Debug)]
struct Groups {
    shape: Shape,
    n: usize,
    c: usize,
    groups: usize,
    /// Values per group of one image: `(C / groups) · H · W`.
    per_group: usize,
}

impl Groups {
    fn check<T: DnnElement>(groups: usize, epsilon: f32, x: &TensorView<'_, T>) -> Result<Groups> {
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(Error::invalid("epsilon", format!("{epsilon} must be finite and not negative")));
        }
        x.check("x")?;
        let len = x.shape.check("x")?;
        let (n, c) = (x.shape.dims()[0], x.shape.dims()[1]);
        if groups == 0 || c % groups != 0 {
            return Err(Error::invalid("groups", format!("{groups} must divide the {c} channels")));
        }
        let per_group = len / n / groups;
        if per_group < 2 {
            return Err(Error::invalid("groups", "each group must hold at least two values to have a variance"));
        }
        Ok(Groups { shape: x.shape.clone(), n, c, groups, per_group })
    }

    fn len(&self) -> usize {
        self.n * self.groups * self.per_group
    }

    /// The channels-first form of the tensor.
    fn nchw(&self) -> Shape {
        Shape::new(Layout::Nchw, self.shape.dims())
    }

    /// The tensor as batch norm's channels: one per group of each image.
    fn grouped(&self) -> Shape {
        Shape::new(Layout::Nchw, &[1, self.n * self.groups, self.per_group, 1])
    }

    fn channels_last(&self) -> bool {
        self.shape.layout() == Layout::Nhwc
    }
}

/// Checks the saved statistics of a group or instance norm (`count` values each: one per image
/// and `per`; `norm` names the op) and returns the means.
pub(super) fn check_stats<'s>(s: &NormStats<'s>, count: usize, norm: &str, per: &str) -> Result<&'s GpuRef<f32>> {
    let m = s.mean.ok_or_else(|| Error::invalid("stats", format!("{norm} norm saves the means too")))?;
    let what = format!("one value per image and {per}");
    validate::covers("stats.mean", m, Some(count), &what)?;
    validate::covers("stats.inv_var", s.inv_var, Some(count), &what)?;
    Ok(m)
}

/// Carves the workspace into parts of the given byte sizes, each aligned.
struct Parts {
    offsets: Vec<usize>,
    total: usize,
}

impl Parts {
    fn new(sizes: &[usize]) -> Result<Parts> {
        let mut offsets = Vec::with_capacity(sizes.len());
        let mut total = 0usize;
        for &s in sizes {
            offsets.push(total);
            total = total
                .checked_add(s)
                .and_then(|t| t.checked_next_multiple_of(ALIGN))
                .ok_or_else(|| Error::invalid("x", "its group-norm workspace overflows usize"))?;
        }
        Ok(Parts { offsets, total })
    }

    fn at(&self, base: *mut c_void, part: usize) -> *mut c_void {
        base.cast::<u8>().wrapping_add(self.offsets[part]).cast()
    }
}

/// The per-group and per-channel constants every op fills first: ones, zeros and the
/// affine variance, `max(N·groups, C)` values each.
struct Consts {
    ones: *mut c_void,
    zeros: *mut c_void,
    var: *mut c_void,
}

impl Consts {
    /// # Safety
    /// (1) `handle` is live, bound to the op's stream, its context current; (2) the three
    /// pointers are workspace parts of `count` f32 values each, declared by the op.
    unsafe fn fill(&self, handle: &RawHandle, count: usize) -> Result<()> {
        // SAFETY: the caller vouches for (1) and (2).
        unsafe {
            calls::fill_f32(handle, count, 1.0, self.ones)?;
            calls::fill_f32(handle, count, 0.0, self.zeros)?;
            calls::fill_f32(handle, count, 1.0 - AFFINE_EPS, self.var)
        }
    }
}

/// Batch-norm arguments with every pointer null, to fill in.
fn args() -> BatchNormArgs {
    let null = std::ptr::null_mut();
    BatchNormArgs {
        x: null,
        y: null,
        scale: null,
        bias: null,
        mean: null,
        var: null,
        save_mean: null,
        save_inv_var: null,
        dy: null,
    }
}

impl Cudnn {
    /// Group norm forward: `y` = each image's channels split into `groups` groups, each
    /// normalized over its channels and positions, times `scale[c]` plus `bias[c]` (f32, one
    /// per channel). With `saved` (means and inverse deviations, `N·groups` f32 each,
    /// image-major), a training step; without, inference. `groups` 1 is layer norm over each
    /// image, `groups` = C instance norm. 4-D or 5-D, either layout (channels-last is
    /// transformed to channels-first and back in the workspace).
    ///
    /// ```
    /// use cusched::cudnn::{Shape, TensorView};
    /// use cusched::{Device, Handles, SimConfig};
    ///
    /// let device = Device::sim(SimConfig::default())?;
    /// let s = device.new_stream()?;
    /// let mut h = Handles::new(&device, s)?;
    /// // One image, four channels of two values, two groups.
    /// let x = device.upload(s, &[1.0f32, 3.0, 1.0, 3.0, 0.0, 0.0, 4.0, 4.0])?;
    /// let y = device.alloc_zeros::<f32>(s, 8)?;
    /// let (scale, bias) = (device.upload(s, &[1.0f32; 4])?, device.upload(s, &[0.0f32; 4])?);
    /// let shape = Shape::nchw(1, 4, 1, 2);
    /// let t = |b| TensorView::new(b, shape.clone());
    /// h.cudnn()?.group_norm_forward(2, 0.0, &t(&x), &scale, &bias, &t(&y), None)?.wait()?;
    /// assert_eq!(y.download(s)?, [-1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 1.0]);
    /// # Ok::<(), cusched::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn group_norm_forward<T: DnnElement>(
        &mut self,
        groups: usize,
        epsilon: f32,
        x: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        bias: &GpuRef<f32>,
        y: &TensorView<'_, T>,
        saved: Option<&NormStats<'_>>,
    ) -> Result<Completion<()>> {
        let geo = Groups::check(groups, epsilon, x)?;
        y.check_like("y", x)?;
        validate::covers("scale", scale, Some(geo.c), "one value per channel")?;
        validate::covers("bias", bias, Some(geo.c), "one value per channel")?;
        let mut uses = vec![
            ("x", x.buf.id(), false),
            ("scale", scale.id(), false),
            ("bias", bias.id(), false),
            ("y", y.buf.id(), true),
        ];
        let stats = match saved {
            Some(s) => {
                let mean = check_stats(s, geo.n * groups, "group", "group")?;
                uses.extend([("stats.mean", mean.id(), true), ("stats.inv_var", s.inv_var.id(), true)]);
                Some((mean, s.inv_var))
            }
            None => None,
        };
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("group_norm_forward");
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "scale", scale, Access::Read)?;
        record(&mut rec, "bias", bias, Access::Read)?;
        record(&mut rec, "y", y.buf, Access::Write)?;
        if let Some((m, v)) = stats {
            record(&mut rec, "stats.mean", m, Access::Write)?;
            record(&mut rec, "stats.inv_var", v, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            let job = SimGroupNorm { geo, eps: epsilon, x: x.buf.sim_data()?, scale: scale.sim_data()? };
            let (b, yv) = (bias.sim_data()?, y.buf.sim_data()?);
            let st = stats.map(|(m, v)| Ok::<_, Error>((m.sim_data()?, v.sim_data()?))).transpose()?;
            return self.op.run_sim(rec, Vec::new(), move || job.forward(b, yv, st));
        }
        let (elem, count) = (std::mem::size_of::<T>(), (geo.n * groups).max(geo.c));
        let tensor = geo.len() * elem;
        // Constants, the normalized input (channels-first), and channels-last its input and
        // the normalized input transformed back.
        let mut sizes = vec![count * 4, count * 4, count * 4, tensor];
        if geo.channels_last() {
            sizes.push(tensor);
        }
        let parts = Parts::new(&sizes)?;
        let base = self
            .work
            .use_on(&self.op, &mut rec, parts.total)?
            .map(|b| b.raw_device_ptr())
            .transpose()?
            .ok_or_else(|| Error::invalid("x", "group norm needs a workspace"))? as *mut c_void;
        let handle = self.handle()?;
        let consts = Consts { ones: parts.at(base, 0), zeros: parts.at(base, 1), var: parts.at(base, 2) };
        let xhat = parts.at(base, 3);
        let (xp, yp, sp, bp) = (dptr(x.buf)?, dptr(y.buf)?, dptr(scale)?, dptr(bias)?);
        let (mp, vp) = match stats {
            Some((m, v)) => (dptr(m)?, dptr(v)?),
            None => (std::ptr::null_mut(), std::ptr::null_mut()),
        };
        let dtype = super::tensor::dtype::<T>();
        self.op.run(rec, Vec::new(), || {
            let (nchw, grouped) = (geo.nchw(), geo.grouped());
            // SAFETY (every call below): (1) the handle was bound to this stream when made,
            // and the op path made its context current; (2) `x` and `y` hold `shape`, the
            // parameters `C` values and the statistics `N·groups` (validated), the workspace
            // parts the sizes `parts` gave them, no written buffer another operand, all
            // fenced by preflight (the workspace declared read-write).
            unsafe {
                consts.fill(handle, count)?;
                let src = if geo.channels_last() {
                    let xt = parts.at(base, 4);
                    calls::transform(handle, &geo.shape, &nchw, dtype, xp, xt)?;
                    xt
                } else {
                    xp
                };
                let norm = BatchNormArgs {
                    x: src,
                    y: xhat,
                    scale: consts.ones,
                    bias: consts.zeros,
                    save_mean: mp,
                    save_inv_var: vp,
                    ..args()
                };
                calls::batch_norm(
                    handle,
                    BatchNormCall::Training(1.0),
                    &grouped,
                    dtype,
                    f64::from(epsilon),
                    1.0,
                    0.0,
                    norm,
                )?;
                // The affine step reads the normalized input in `x`'s layout.
                let (from, shape) = if geo.channels_last() {
                    let back = parts.at(base, 4);
                    calls::transform(handle, &nchw, &geo.shape, dtype, xhat, back)?;
                    (back, geo.shape.clone())
                } else {
                    (xhat, nchw)
                };
                let affine = BatchNormArgs {
                    x: from,
                    y: yp,
                    scale: sp,
                    bias: bp,
                    mean: consts.zeros,
                    var: consts.var,
                    ..args()
                };
                calls::batch_norm(
                    handle,
                    BatchNormCall::Inference,
                    &shape,
                    dtype,
                    f64::from(AFFINE_EPS),
                    1.0,
                    0.0,
                    affine,
                )
            }
        })
    }

    /// Group norm backward: `dx` and the parameter gradients `dscale` and `dbias` (f32 per
    /// channel, overwritten) from the forward op's `x`, `scale` and saved `stats`
    /// (`N·groups` each), and `dy`. See [`group_norm_forward`](Self::group_norm_forward).
    #[allow(clippy::too_many_arguments)]
    pub fn group_norm_backward<T: DnnElement>(
        &mut self,
        groups: usize,
        epsilon: f32,
        x: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        stats: &NormStats<'_>,
        dx: &TensorView<'_, T>,
        dscale: &GpuRef<f32>,
        dbias: &GpuRef<f32>,
    ) -> Result<Completion<()>> {
        let geo = Groups::check(groups, epsilon, x)?;
        let (mut rec, mean) = self.norm_backward_recorder(
            "group_norm_backward",
            (geo.n * groups, "group", "group"),
            [x, dy, dx],
            scale,
            stats,
            [dscale, dbias],
        )?;
        if self.op.device.is_simulated() {
            let job = SimGroupNorm { geo, eps: epsilon, x: x.buf.sim_data()?, scale: scale.sim_data()? };
            let io = (dy.buf.sim_data()?, mean.sim_data()?, stats.inv_var.sim_data()?);
            let out = (dx.buf.sim_data()?, dscale.sim_data()?, dbias.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || job.backward(io, out));
        }
        let (elem, ng) = (std::mem::size_of::<T>(), geo.n * groups);
        let count = ng.max(geo.c);
        let tensor = geo.len() * elem;
        // Constants; batch norm's parameter gradients over the groups (unused); `dy·scale`,
        // the normalized input; channels-last also `x`, `dy` and `dx` channels-first.
        let mut sizes = vec![count * 4, count * 4, count * 4, ng * 8, tensor, tensor];
        if geo.channels_last() {
            sizes.extend([tensor, tensor, tensor]);
        }
        let parts = Parts::new(&sizes)?;
        let base = self
            .work
            .use_on(&self.op, &mut rec, parts.total)?
            .map(|b| b.raw_device_ptr())
            .transpose()?
            .ok_or_else(|| Error::invalid("x", "group norm needs a workspace"))? as *mut c_void;
        let handle = self.handle()?;
        let consts = Consts { ones: parts.at(base, 0), zeros: parts.at(base, 1), var: parts.at(base, 2) };
        let spare = parts.at(base, 3);
        let spare_bias = spare.cast::<u8>().wrapping_add(ng * 4).cast::<c_void>();
        let (dyg, xhat) = (parts.at(base, 4), parts.at(base, 5));
        let ptrs = [dptr(x.buf)?, dptr(dy.buf)?, dptr(dx.buf)?, dptr(scale)?, dptr(dscale)?, dptr(dbias)?];
        let (mp, vp) = (dptr(mean)?, dptr(stats.inv_var)?);
        let dtype = super::tensor::dtype::<T>();
        self.op.run(rec, Vec::new(), || {
            let [xp, dyp, dxp, sp, dsp, dbp] = ptrs;
            let (nchw, grouped) = (geo.nchw(), geo.grouped());
            // SAFETY (every call below): (1) the handle was bound to this stream when made,
            // and the op path made its context current; (2) `x`, `dy` and `dx` hold `shape`,
            // the parameters and their gradients `C` values and the statistics `N·groups`
            // (validated), the workspace parts the sizes `parts` gave them, no written buffer
            // another operand, all fenced by preflight (the workspace declared read-write).
            unsafe {
                consts.fill(handle, count)?;
                let (src_x, src_dy, dst_dx) = if geo.channels_last() {
                    let (xt, dyt, dxt) = (parts.at(base, 6), parts.at(base, 7), parts.at(base, 8));
                    calls::transform(handle, &geo.shape, &nchw, dtype, xp, xt)?;
                    calls::transform(handle, &geo.shape, &nchw, dtype, dyp, dyt)?;
                    (xt, dyt, dxt)
                } else {
                    (xp, dyp, dxp)
                };
                let eps = f64::from(epsilon);
                // dy·scale, per channel.
                let mul = BatchNormArgs {
                    x: src_dy,
                    y: dyg,
                    scale: sp,
                    bias: consts.zeros,
                    mean: consts.zeros,
                    var: consts.var,
                    ..args()
                };
                calls::batch_norm(
                    handle,
                    BatchNormCall::Inference,
                    &nchw,
                    dtype,
                    f64::from(AFFINE_EPS),
                    1.0,
                    0.0,
                    mul,
                )?;
                // The normalized input, as the forward op made it.
                let norm = BatchNormArgs { x: src_x, y: xhat, scale: consts.ones, bias: consts.zeros, ..args() };
                calls::batch_norm(handle, BatchNormCall::Training(1.0), &grouped, dtype, eps, 1.0, 0.0, norm)?;
                // dx from dy·scale through each group's normalization.
                let back = BatchNormArgs {
                    x: src_x,
                    dy: dyg,
                    y: dst_dx,
                    scale: consts.ones,
                    mean: spare,
                    var: spare_bias,
                    save_mean: mp,
                    save_inv_var: vp,
                    ..args()
                };
                let call = BatchNormCall::Backward { accumulate_params: false };
                calls::batch_norm(handle, call, &grouped, dtype, eps, 1.0, 0.0, back)?;
                // dscale = Σ dy·x̂ and dbias = Σ dy per channel: batch norm's parameter
                // gradients of the normalized input, taken as already normalized. Its `dx`
                // is not wanted and lands on `dy·scale`, read for the last time above.
                let params = BatchNormArgs {
                    x: xhat,
                    dy: src_dy,
                    y: dyg,
                    scale: sp,
                    mean: dsp,
                    var: dbp,
                    save_mean: consts.zeros,
                    save_inv_var: consts.ones,
                    ..args()
                };
                calls::batch_norm(handle, call, &nchw, dtype, f64::from(AFFINE_EPS), 1.0, 0.0, params)?;
                if geo.channels_last() {
                    calls::transform(handle, &nchw, &geo.shape, dtype, dst_dx, dxp)?;
                }
                Ok(())
            }
        })
    }
}

impl Cudnn {
    /// The checks and declared uses a group or instance norm backward op shares: `dy` and `dx`
    /// of `x`'s shape, `scale`, `dscale` and `dbias` one value per channel, the statistics
    /// (`count`, `norm` and `per` as [`check_stats`] takes them), no written operand another
    /// one. Returns the op's recorder, named `op`, and the saved means.
    pub(super) fn norm_backward_recorder<'s, T: DnnElement>(
        &self,
        op: &'static str,
        (count, norm, per): (usize, &str, &str),
        [x, dy, dx]: [&TensorView<'_, T>; 3],
        scale: &GpuRef<f32>,
        stats: &NormStats<'s>,
        [dscale, dbias]: [&GpuRef<f32>; 2],
    ) -> Result<(LaunchRecorder, &'s GpuRef<f32>)> {
        dy.check_like("dy", x)?;
        dx.check_like("dx", x)?;
        let c = x.shape.dims()[1];
        for (arg, buf) in [("scale", scale), ("dscale", dscale), ("dbias", dbias)] {
            validate::covers(arg, buf, Some(c), "one value per channel")?;
        }
        let mean = check_stats(stats, count, norm, per)?;
        no_aliasing(&[
            ("x", x.buf.id(), false),
            ("dy", dy.buf.id(), false),
            ("scale", scale.id(), false),
            ("stats.mean", mean.id(), false),
            ("stats.inv_var", stats.inv_var.id(), false),
            ("dx", dx.buf.id(), true),
            ("dscale", dscale.id(), true),
            ("dbias", dbias.id(), true),
        ])?;
        let mut rec = self.op.recorder(op);
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "dy", dy.buf, Access::Read)?;
        for (arg, buf) in [("scale", scale), ("stats.mean", mean), ("stats.inv_var", stats.inv_var)] {
            record(&mut rec, arg, buf, Access::Read)?;
        }
        record(&mut rec, "dx", dx.buf, Access::Write)?;
        record(&mut rec, "dscale", dscale, Access::Write)?;
        record(&mut rec, "dbias", dbias, Access::Write)?;
        Ok((rec, mean))
    }
}

/// The simulator's group norm, in f64 (instance norm's too: one group per channel).
pub(super) struct SimGroupNorm<T: DnnElement> {
    geo: Groups,
    eps: f32,
    x: SimMem<T>,
    scale: SimMem<f32>,
}

pub(super) type SimIo<T> = (SimMem<T>, SimMem<f32>, SimMem<f32>);

impl<T: DnnElement> SimGroupNorm<T> {
    /// Instance norm of `shape`: a group per channel.
    pub(super) fn per_channel(shape: &Shape, eps: f32, x: SimMem<T>, scale: SimMem<f32>) -> Self {
        let (n, c) = (shape.dims()[0], shape.dims()[1]);
        let per_group = shape.dims()[2..].iter().product();
        SimGroupNorm { geo: Groups { shape: shape.clone(), n, c, groups: c, per_group }, eps, x, scale }
    }

    /// The storage index and channel of every value of group `g` of image `n`.
    fn members(&self, n: usize, g: usize) -> Vec<(usize, usize)> {
        let (d, st) = (self.geo.shape.dims(), self.geo.shape.strides());
        let sp: usize = d[2..].iter().product();
        let cpg = self.geo.c / self.geo.groups;
        let mut out = Vec::with_capacity(cpg * sp);
        for c in g * cpg..(g + 1) * cpg {
            for mut p in 0..sp {
                let mut at = n * st[0] + c * st[1];
                for k in (2..d.len()).rev() {
                    at += (p % d[k]) * st[k];
                    p /= d[k];
                }
                out.push((at, c));
            }
        }
        out
    }

    /// Each `(n, g)`'s mean and inverse deviation, image-major.
    fn stats(&self, x: &[f64]) -> Vec<(f64, f64)> {
        let mut out = Vec::with_capacity(self.geo.n * self.geo.groups);
        for n in 0..self.geo.n {
            for g in 0..self.geo.groups {
                let m = self.members(n, g);
                let mean = m.iter().map(|&(p, _)| x[p]).sum::<f64>() / m.len() as f64;
                let var = m.iter().map(|&(p, _)| (x[p] - mean) * (x[p] - mean)).sum::<f64>() / m.len() as f64;
                out.push((mean, 1.0 / (var + f64::from(self.eps)).sqrt()));
            }
        }
        out
    }

    pub(super) fn forward(self, bias: SimMem<f32>, y: SimMem<T>, saved: Option<(SimMem<f32>, SimMem<f32>)>) {
        let x: Vec<f64> = self.x.read().iter().map(|v| v.to_f64()).collect();
        let scale: Vec<f64> = self.scale.read().iter().map(|&v| f64::from(v)).collect();
        let bias: Vec<f64> = bias.read().iter().map(|&v| f64::from(v)).collect();
        let st = self.stats(&x);
        let mut dst = y.lock();
        for (k, &(mean, inv)) in st.iter().enumerate() {
            for (p, c) in self.members(k / self.geo.groups, k % self.geo.groups) {
                dst[p] = T::from_f64((x[p] - mean) * inv * scale[c] + bias[c]);
            }
        }
        if let Some((m, v)) = saved {
            let (mut m, mut v) = (m.lock(), v.lock());
            for (k, s) in st.iter().enumerate() {
                m[k] = s.0 as f32;
                v[k] = s.1 as f32;
            }
        }
    }

    pub(super) fn backward(self, io: SimIo<T>, out: SimIo<T>) {
        let x: Vec<f64> = self.x.read().iter().map(|v| v.to_f64()).collect();
        let dy: Vec<f64> = io.0.read().iter().map(|v| v.to_f64()).collect();
        let scale: Vec<f64> = self.scale.read().iter().map(|&v| f64::from(v)).collect();
        let mean: Vec<f64> = io.1.read().iter().map(|&v| f64::from(v)).collect();
        let inv: Vec<f64> = io.2.read().iter().map(|&v| f64::from(v)).collect();
        let c = self.geo.c;
        let (mut dx, mut ds, mut db) = (vec![0.0; x.len()], vec![0.0; c], vec![0.0; c]);
        for k in 0..self.geo.n * self.geo.groups {
            let m = self.members(k / self.geo.groups, k % self.geo.groups);
            let cnt = m.len() as f64;
            let xhat = |p: usize| (x[p] - mean[k]) * inv[k];
            let mg = m.iter().map(|&(p, ch)| dy[p] * scale[ch]).sum::<f64>() / cnt;
            let mgx = m.iter().map(|&(p, ch)| dy[p] * scale[ch] * xhat(p)).sum::<f64>() / cnt;
            for &(p, ch) in &m {
                dx[p] = inv[k] * (dy[p] * scale[ch] - mg - xhat(p) * mgx);
                ds[ch] += dy[p] * xhat(p);
                db[ch] += dy[p];
            }
        }
        let mut d = out.0.lock();
        for (o, v) in d.iter_mut().zip(&dx) {
            *o = T::from_f64(*v);
        }
        for (mem, vals) in [(&out.1, &ds), (&out.2, &db)] {
            let mut m = mem.lock();
            for (o, v) in m.iter_mut().zip(vals) {
                *o = *v as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_parts_are_aligned_and_do_not_overlap() {
        let p = Parts::new(&[4, 300, 1]).unwrap();
        assert_eq!(p.offsets, [0, 256, 768]);
        assert_eq!(p.total, 1024);
        assert!(Parts::new(&[usize::MAX, 1]).is_err());
    }

    #[test]
    fn the_grouped_view_puts_each_group_of_each_image_in_a_channel() {
        let g = Groups { shape: Shape::nhwc(3, 8, 4, 5), n: 3, c: 8, groups: 2, per_group: 80 };
        assert_eq!(g.grouped().dims(), &[1, 6, 80, 1]);
        assert_eq!(g.nchw().dims(), &[3, 8, 4, 5]);
        assert!(g.channels_last());
    }
}
