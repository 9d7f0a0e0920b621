//! Batch normalization per channel (cuDNN's spatial mode): inference, training forward with
//! the running statistics updated, and backward.
//!
//! The per-channel parameters and statistics (`scale`, `bias`, means, variances) are f32
//! buffers of `C` values whatever the data's type, as cuDNN takes them.

use super::calls::{self, BatchNormArgs, BatchNormCall};
use super::tensor::{DnnElement, TensorView};
use super::{sim, Cudnn};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::GpuRef;
use crate::track::Access;
use std::ffi::c_void;

/// A batch normalization: `epsilon` (added to the variance), and the data result's scaling
/// (`out = alpha * result + beta * out`, `alpha` 1, `beta` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNorm {
    pub(super) epsilon: f64,
    pub(super) alpha: f32,
    pub(super) beta: f32,
}

impl BatchNorm {
    /// Per-channel normalization with `epsilon` added to the variance.
    pub fn new(epsilon: f64) -> Self {
        BatchNorm { epsilon, alpha: 1.0, beta: 0.0 }
    }

    /// `out = alpha * result + beta * out` for the data result (`y`, or `dx` backward; the
    /// parameter gradients are always overwritten).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    fn check(&self) -> Result<()> {
        if !self.epsilon.is_finite() || self.epsilon < 0.0 {
            return Err(Error::invalid(
                "batch_norm",
                format!("epsilon {} must be finite and not negative", self.epsilon),
            ));
        }
        if !self.alpha.is_finite() || !self.beta.is_finite() {
            return Err(Error::invalid("batch_norm", "alpha and beta must be finite"));
        }
        Ok(())
    }
}

/// The running statistics a training step updates:
/// `mean = (1 - factor) * mean + factor * batch mean`, and the same for `var` with the batch's
/// unbiased variance.
#[derive(Clone, Copy, Debug)]
pub struct RunningStats<'a> {
    /// `C` running means, read and written.
    pub mean: &'a GpuRef<f32>,
    /// `C` running variances, read and written.
    pub var: &'a GpuRef<f32>,
    /// The exponential average factor, in `[0, 1]` (1: the batch's statistics replace them).
    pub factor: f64,
}

/// The batch statistics a training step saves for the backward step: each channel's mean and
/// `1 / sqrt(variance + epsilon)`.
#[derive(Clone, Copy, Debug)]
pub struct SavedStats<'a> {
    /// `C` batch means.
    pub mean: &'a GpuRef<f32>,
    /// `C` inverse standard deviations.
    pub inv_var: &'a GpuRef<f32>,
}

/// Checks that each `(argument, buffer)` holds at least `c` values.
fn per_channel(params: &[(&'static str, &GpuRef<f32>)], c: usize) -> Result<()> {
    for (arg, buf) in params {
        validate::covers(arg, buf, Some(c), &format!("one value per channel ({c})"))?;
    }
    Ok(())
}

fn ptr<T: crate::memory::Element>(buf: &GpuRef<T>) -> Result<*mut c_void> {
    dptr(buf)
}

impl Cudnn {
    /// Batch-norm inference: `y = alpha * (scale * (x - mean) / sqrt(var + epsilon) + bias) +
    /// beta * y`, per channel, from given statistics (the running ones of training).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_inference<T: DnnElement>(
        &mut self,
        bn: &BatchNorm,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        bias: &GpuRef<f32>,
        mean: &GpuRef<f32>,
        var: &GpuRef<f32>,
    ) -> Result<Completion<()>> {
        bn.check()?;
        x.check("x")?;
        y.check_like("y", x)?;
        let c = x.shape.dims()[1];
        per_channel(&[("scale", scale), ("bias", bias), ("mean", mean), ("var", var)], c)?;
        no_aliasing(&[("x", x.buf.id(), false), ("y", y.buf.id(), true)])?;
        let mut rec = self.op.recorder("batch_norm_inference");
        record(&mut rec, "x", x.buf, Access::Read)?;
        for (arg, buf) in [("scale", scale), ("bias", bias), ("mean", mean), ("var", var)] {
            record(&mut rec, arg, buf, Access::Read)?;
        }
        record(&mut rec, "y", y.buf, if bn.beta == 0.0 { Access::Write } else { Access::ReadWrite })?;
        let (b, shape) = (*bn, x.shape.clone());
        if self.op.device.is_simulated() {
            let job = sim::BatchNorm {
                bn: b,
                shape,
                x: x.buf.sim_data()?,
                y: y.buf.sim_data()?,
                scale: scale.sim_data()?,
                bias: Some(bias.sim_data()?),
                mean: Some(mean.sim_data()?),
                var: Some(var.sim_data()?),
                kind: sim::BatchNormKind::Inference,
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let handle = self.handle()?;
        let args = BatchNormArgs {
            x: ptr(x.buf)?,
            y: ptr(y.buf)?,
            scale: ptr(scale)?,
            bias: ptr(bias)?,
            mean: ptr(mean)?,
            var: ptr(var)?,
            save_mean: std::ptr::null_mut(),
            save_inv_var: std::ptr::null_mut(),
            dy: std::ptr::null(),
        };
        let dtype = super::tensor::dtype::<T>();
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) `x` and `y` hold `shape` and are distinct, the parameters hold
            // `C` f32 values each, all fenced by preflight.
            unsafe {
                calls::batch_norm(handle, BatchNormCall::Inference, &shape, dtype, b.epsilon, b.alpha, b.beta, args)
            }
        })
    }

    /// Batch-norm training forward: normalizes `x` with its own per-channel mean and (biased)
    /// variance, `y = alpha * (scale * x̂ + bias) + beta * y`; updates the `running`
    /// statistics and writes the `saved` ones for [`batch_norm_backward`](Self::batch_norm_backward)
    /// (either may be left out).
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_training<T: DnnElement>(
        &mut self,
        bn: &BatchNorm,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        bias: &GpuRef<f32>,
        running: Option<&RunningStats<'_>>,
        saved: Option<&SavedStats<'_>>,
    ) -> Result<Completion<()>> {
        bn.check()?;
        x.check("x")?;
        y.check_like("y", x)?;
        let dims = x.shape.dims();
        let c = dims[1];
        // The running variance is the unbiased one: it divides by the count less one.
        if dims[0] * x.shape.spatial().iter().product::<usize>() < 2 {
            return Err(Error::invalid("x", "a training step needs at least 2 values per channel"));
        }
        per_channel(&[("scale", scale), ("bias", bias)], c)?;
        let mut uses = vec![
            ("x", x.buf.id(), false),
            ("y", y.buf.id(), true),
            ("scale", scale.id(), false),
            ("bias", bias.id(), false),
        ];
        if let Some(r) = running {
            if !(0.0..=1.0).contains(&r.factor) {
                return Err(Error::invalid("running", format!("the factor {} is not in [0, 1]", r.factor)));
            }
            per_channel(&[("running.mean", r.mean), ("running.var", r.var)], c)?;
            uses.extend([("running.mean", r.mean.id(), true), ("running.var", r.var.id(), true)]);
        }
        if let Some(s) = saved {
            per_channel(&[("saved.mean", s.mean), ("saved.inv_var", s.inv_var)], c)?;
            uses.extend([("saved.mean", s.mean.id(), true), ("saved.inv_var", s.inv_var.id(), true)]);
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("batch_norm_training");
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "scale", scale, Access::Read)?;
        record(&mut rec, "bias", bias, Access::Read)?;
        record(&mut rec, "y", y.buf, if bn.beta == 0.0 { Access::Write } else { Access::ReadWrite })?;
        if let Some(r) = running {
            record(&mut rec, "running.mean", r.mean, Access::ReadWrite)?;
            record(&mut rec, "running.var", r.var, Access::ReadWrite)?;
        }
        if let Some(s) = saved {
            record(&mut rec, "saved.mean", s.mean, Access::Write)?;
            record(&mut rec, "saved.inv_var", s.inv_var, Access::Write)?;
        }
        let (b, shape) = (*bn, x.shape.clone());
        if self.op.device.is_simulated() {
            let job = sim::BatchNorm {
                bn: b,
                shape,
                x: x.buf.sim_data()?,
                y: y.buf.sim_data()?,
                scale: scale.sim_data()?,
                bias: Some(bias.sim_data()?),
                mean: running.map(|r| r.mean.sim_data()).transpose()?,
                var: running.map(|r| r.var.sim_data()).transpose()?,
                kind: sim::BatchNormKind::Training {
                    factor: running.map_or(0.0, |r| r.factor),
                    saved: saved.map(|s| Ok::<_, Error>((s.mean.sim_data()?, s.inv_var.sim_data()?))).transpose()?,
                },
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let handle = self.handle()?;
        let null = std::ptr::null_mut();
        let args = BatchNormArgs {
            x: ptr(x.buf)?,
            y: ptr(y.buf)?,
            scale: ptr(scale)?,
            bias: ptr(bias)?,
            mean: running.map(|r| ptr(r.mean)).transpose()?.unwrap_or(null),
            var: running.map(|r| ptr(r.var)).transpose()?.unwrap_or(null),
            save_mean: saved.map(|s| ptr(s.mean)).transpose()?.unwrap_or(null),
            save_inv_var: saved.map(|s| ptr(s.inv_var)).transpose()?.unwrap_or(null),
            dy: std::ptr::null(),
        };
        let (dtype, factor) = (super::tensor::dtype::<T>(), running.map_or(0.0, |r| r.factor));
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) `x` and `y` hold `shape`, the parameters and statistics `C`
            // f32 values each (running and saved pairs both given or both null), no written
            // buffer is another operand, all fenced by preflight.
            unsafe {
                calls::batch_norm(
                    handle,
                    BatchNormCall::Training(factor),
                    &shape,
                    dtype,
                    b.epsilon,
                    b.alpha,
                    b.beta,
                    args,
                )
            }
        })
    }

    /// Batch-norm backward: `dx = alpha * ∂L/∂x + beta * dx`, and the parameter gradients
    /// `dscale` and `dbias` (overwritten), from the training step's input `x`, `scale` and
    /// `saved` statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_backward<T: DnnElement>(
        &mut self,
        bn: &BatchNorm,
        x: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
        scale: &GpuRef<f32>,
        dscale: &GpuRef<f32>,
        dbias: &GpuRef<f32>,
        saved: &SavedStats<'_>,
    ) -> Result<Completion<()>> {
        bn.check()?;
        x.check("x")?;
        dy.check_like("dy", x)?;
        dx.check_like("dx", x)?;
        let c = x.shape.dims()[1];
        per_channel(
            &[
                ("scale", scale),
                ("dscale", dscale),
                ("dbias", dbias),
                ("saved.mean", saved.mean),
                ("saved.inv_var", saved.inv_var),
            ],
            c,
        )?;
        no_aliasing(&[
            ("x", x.buf.id(), false),
            ("dy", dy.buf.id(), false),
            ("scale", scale.id(), false),
            ("saved.mean", saved.mean.id(), false),
            ("saved.inv_var", saved.inv_var.id(), false),
            ("dx", dx.buf.id(), true),
            ("dscale", dscale.id(), true),
            ("dbias", dbias.id(), true),
        ])?;
        let mut rec = self.op.recorder("batch_norm_backward");
        record(&mut rec, "x", x.buf, Access::Read)?;
        record(&mut rec, "dy", dy.buf, Access::Read)?;
        for (arg, buf) in [("scale", scale), ("saved.mean", saved.mean), ("saved.inv_var", saved.inv_var)] {
            record(&mut rec, arg, buf, Access::Read)?;
        }
        record(&mut rec, "dx", dx.buf, if bn.beta == 0.0 { Access::Write } else { Access::ReadWrite })?;
        record(&mut rec, "dscale", dscale, Access::Write)?;
        record(&mut rec, "dbias", dbias, Access::Write)?;
        let (b, shape) = (*bn, x.shape.clone());
        if self.op.device.is_simulated() {
            let job = sim::BatchNorm {
                bn: b,
                shape,
                x: x.buf.sim_data()?,
                y: dx.buf.sim_data()?,
                scale: scale.sim_data()?,
                bias: None,
                mean: Some(dscale.sim_data()?),
                var: Some(dbias.sim_data()?),
                kind: sim::BatchNormKind::Backward {
                    dy: dy.buf.sim_data()?,
                    saved: (saved.mean.sim_data()?, saved.inv_var.sim_data()?),
                },
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let handle = self.handle()?;
        let args = BatchNormArgs {
            x: ptr(x.buf)?,
            y: ptr(dx.buf)?,
            scale: ptr(scale)?,
            bias: std::ptr::null(),
            mean: ptr(dscale)?,
            var: ptr(dbias)?,
            save_mean: ptr(saved.mean)?,
            save_inv_var: ptr(saved.inv_var)?,
            dy: ptr(dy.buf)?,
        };
        let dtype = super::tensor::dtype::<T>();
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) `x`, `dy` and `dx` hold `shape`, the parameters, gradients
            // and statistics `C` f32 values each, no written buffer is another operand, all
            // fenced by preflight.
            unsafe {
                calls::batch_norm(
                    handle,
                    BatchNormCall::Backward { accumulate_params: false },
                    &shape,
                    dtype,
                    b.epsilon,
                    b.alpha,
                    b.beta,
                    args,
                )
            }
        })
    }
}
