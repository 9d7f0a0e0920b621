//! Instance norm: each channel of each image normalized over its spatial positions,
//! `y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c]`, forward (training with the saved
//! statistics, `N·C` f32 values each; inference) and backward, through the backend's norm
//! operations in their instance mode. Operands are [`TensorView`]s (4-D or 5-D, either
//! layout; cuDNN's engines favour channels-last), parameters f32.

use super::builder::{Dt, GraphSpec, NormMode, Op};
use super::norm::{dt_of, NormStats};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::calls::{self, BatchNormArgs, BatchNormCall};
use crate::libs::cudnn::group_norm::{check_stats, SimGroupNorm};
use crate::libs::cudnn::tensor::{DnnElement, Shape, TensorView};
use crate::libs::cudnn::Cudnn;
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

/// The per-channel parameters' and the per-(image, channel) statistics' 4-D or 5-D shapes, in
/// `x`'s layout.
fn side_shapes(x: &Shape) -> (Shape, Shape) {
    let d = x.dims();
    let mut p = vec![1; d.len()];
    p[1] = d[1];
    let mut s = p.clone();
    s[0] = d[0];
    (Shape::new(x.layout(), &p), Shape::new(x.layout(), &s))
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

impl Cudnn {
    /// Instance norm forward: `y` = each channel of each image of `x` normalized over its
    /// spatial positions, times `scale[c]` plus `bias[c]` (f32, one per channel). With `saved`
    /// (both means and inverse deviations, `N·C` f32 each, image-major), a training step;
    /// without, inference.
    pub fn instance_norm_forward<T: DnnElement>(
        &mut self,
        epsilon: f32,
        x: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        bias: &GpuRef<f32>,
        y: &TensorView<'_, T>,
        saved: Option<&NormStats<'_>>,
    ) -> Result<Completion<()>> {
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(Error::invalid("epsilon", format!("{epsilon} must be finite and not negative")));
        }
        x.check("x")?;
        y.check_like("y", x)?;
        let (n, c) = (x.shape.dims()[0], x.shape.dims()[1]);
        validate::covers("scale", scale, Some(c), "one value per channel")?;
        validate::covers("bias", bias, Some(c), "one value per channel")?;
        let mut uses = vec![
            ("x", x.buf.id(), false),
            ("scale", scale.id(), false),
            ("bias", bias.id(), false),
            ("y", y.buf.id(), true),
        ];
        if let Some(s) = saved {
            check_stats(s, n * c, "instance", "channel")?;
            uses.push(("stats.inv_var", s.inv_var.id(), true));
            if let Some(m) = s.mean {
                uses.push(("stats.mean", m.id(), true));
            }
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("instance_norm_forward");
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "scale", scale, Access::Read)?;
        record(&mut rec, "bias", bias, Access::Read)?;
        record(&mut rec, "y", y.buf, Access::Write)?;
        if let Some(s) = saved {
            if let Some(m) = s.mean {
                record(&mut rec, "stats.mean", m, Access::Write)?;
            }
            record(&mut rec, "stats.inv_var", s.inv_var, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            let job = SimGroupNorm::per_channel(&x.shape, epsilon, x.buf.sim_data()?, scale.sim_data()?);
            let (b, yv) = (bias.sim_data()?, y.buf.sim_data()?);
            let st = saved
                .and_then(|s| s.mean.map(|m| (m, s.inv_var)))
                .map(|(m, v)| Ok::<_, Error>((m.sim_data()?, v.sim_data()?)))
                .transpose()?;
            return self.op.run_sim(rec, Vec::new(), move || job.forward(b, yv, st));
        }
        let (ps, ss) = side_shapes(&x.shape);
        let mut g = GraphSpec::default();
        let dt = dt_of::<T>();
        let xu = g.tensor(&i64s(x.shape.dims()), &i64s(&x.shape.strides()), dt);
        let su = g.tensor(&i64s(ps.dims()), &i64s(&ps.strides()), Dt::F32);
        let bu = g.tensor(&i64s(ps.dims()), &i64s(&ps.strides()), Dt::F32);
        let eu = g.scalar(Dt::F32);
        let yu = g.tensor(&i64s(y.shape.dims()), &i64s(&y.shape.strides()), dt);
        let stats = saved.map(|_| {
            let (d, st) = (i64s(ss.dims()), i64s(&ss.strides()));
            (g.tensor(&d, &st, Dt::F32), g.tensor(&d, &st, Dt::F32))
        });
        g.ops.push(Op::NormFwd {
            mode: NormMode::Instance,
            training: saved.is_some(),
            x: xu,
            scale: su,
            bias: Some(bu),
            eps: eu,
            y: yu,
            mean: stats.map(|s| s.0),
            inv_var: stats.map(|s| s.1),
        });
        let mut ptrs = vec![(xu, dptr(x.buf)?), (su, dptr(scale)?), (bu, dptr(bias)?), (yu, dptr(y.buf)?)];
        if let (Some((mu, vu)), Some(s)) = (stats, saved) {
            if let Some(m) = s.mean {
                ptrs.push((mu, dptr(m)?));
            }
            ptrs.push((vu, dptr(s.inv_var)?));
        }
        self.run_graph(g, rec, ptrs, Some((eu, epsilon)), "instance_norm_forward")
    }

    /// Instance norm backward: `dx` and the parameter gradients `dscale` and `dbias` (f32 per
    /// channel, overwritten: the sums over every image) from the forward op's `x`, `scale` and
    /// saved `stats`, and `dy`.
    ///
    /// On CUDA this is one op of `N` batch-norm backward calls, one per image (an image's
    /// channels normalized over its positions are a batch of one), the parameter gradients of
    /// each added to the last; cuDNN 9.19's graph engine for instance-norm backward gives the
    /// right `dx` but only one image's part of `dscale` and `dbias`.
    #[allow(clippy::too_many_arguments)]
    pub fn instance_norm_backward<T: DnnElement>(
        &mut self,
        epsilon: f32,
        x: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        stats: &NormStats<'_>,
        dx: &TensorView<'_, T>,
        dscale: &GpuRef<f32>,
        dbias: &GpuRef<f32>,
    ) -> Result<Completion<()>> {
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(Error::invalid("epsilon", format!("{epsilon} must be finite and not negative")));
        }
        x.check("x")?;
        let (n, c) = (x.shape.dims()[0], x.shape.dims()[1]);
        let (rec, mean) = self.norm_backward_recorder(
            "instance_norm_backward",
            (n * c, "instance", "channel"),
            [x, dy, dx],
            scale,
            stats,
            [dscale, dbias],
        )?;
        if self.op.device.is_simulated() {
            let job = SimGroupNorm::per_channel(&x.shape, epsilon, x.buf.sim_data()?, scale.sim_data()?);
            let io = (dy.buf.sim_data()?, mean.sim_data()?, stats.inv_var.sim_data()?);
            let out = (dx.buf.sim_data()?, dscale.sim_data()?, dbias.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || job.backward(io, out));
        }
        let handle = self.handle()?;
        // One image of a packed tensor is a packed tensor of one image, in the same layout.
        let mut image = x.shape.dims().to_vec();
        image[0] = 1;
        let image = Shape::new(x.shape.layout(), &image);
        let per_image: usize = image.dims().iter().product();
        let (image_bytes, stats_bytes) = (per_image * std::mem::size_of::<T>(), c * std::mem::size_of::<f32>());
        let base = [dptr(x.buf)?, dptr(dy.buf)?, dptr(dx.buf)?, dptr(mean)?, dptr(stats.inv_var)?];
        let (sp, dsp, dbp) = (dptr(scale)?, dptr(dscale)?, dptr(dbias)?);
        let dtype = crate::libs::cudnn::tensor::dtype::<T>();
        self.op.run(rec, Vec::new(), || {
            for i in 0..n {
                let at = |p: *mut c_void, bytes: usize| p.cast::<u8>().wrapping_add(i * bytes).cast::<c_void>();
                let args = BatchNormArgs {
                    x: at(base[0], image_bytes),
                    dy: at(base[1], image_bytes),
                    y: at(base[2], image_bytes),
                    scale: sp,
                    bias: std::ptr::null(),
                    mean: dsp,
                    var: dbp,
                    save_mean: at(base[3], stats_bytes),
                    save_inv_var: at(base[4], stats_bytes),
                };
                let call = BatchNormCall::Backward { accumulate_params: i > 0 };
                // SAFETY: (1) the handle was bound to this stream when made, and the op path
                // made its context current; (2) image `i` of `x`, `dy` and `dx` (validated as
                // `N` packed images of `image`'s shape) starts `i` images in, its statistics
                // `i·C` values in (validated to hold `N·C`), and the parameters and their
                // gradients hold `C` values, no written buffer another operand, all fenced by
                // preflight.
                unsafe { calls::batch_norm(handle, call, &image, dtype, f64::from(epsilon), 1.0, 0.0, args) }?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libs::cudnn::tensor::Layout;

    #[test]
    fn side_shapes_keep_the_layout() {
        let (p, s) = side_shapes(&Shape::nhwc(2, 3, 4, 5));
        assert_eq!((p.dims(), s.dims()), (&[1, 3, 1, 1][..], &[2, 3, 1, 1][..]));
        assert_eq!((p.layout(), s.strides()), (Layout::Nhwc, vec![3, 1, 3, 3]));
    }
}
