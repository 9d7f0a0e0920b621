//! Activations, softmax and pooling, forward and backward: their parameters, checks and ops.

use super::calls::{self, Backward};
use super::tensor::{DnnElement, Shape, TensorView};
use super::{sim, Cudnn};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record, validate};
use crate::memory::GpuRef;
use crate::recorder::LaunchRecorder;
use crate::track::Access;
use std::ffi::c_void;

/// An activation function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ActivationMode {
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `min(max(x, 0), ceiling)`.
    ClippedRelu {
        /// The clip, above 0.
        ceiling: f64,
    },
    /// `x` for `x > 0`, else `alpha (e^x - 1)`.
    Elu {
        /// The negative side's scale.
        alpha: f64,
    },
    /// `x · sigmoid(beta x)` (SiLU for `beta` 1).
    Swish {
        /// The sigmoid's slope.
        beta: f64,
    },
}

/// An activation op: the function and the result's scaling (`out = alpha * f + beta * out`,
/// `alpha` 1, `beta` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Activation {
    pub(super) mode: ActivationMode,
    pub(super) alpha: f32,
    pub(super) beta: f32,
}

impl Activation {
    /// `mode`, unscaled.
    pub fn new(mode: ActivationMode) -> Self {
        Activation { mode, alpha: 1.0, beta: 0.0 }
    }

    /// `out = alpha * result + beta * out` (`beta` 0: `out` is not read).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    fn check(&self) -> Result<()> {
        scales("activation", self.alpha, self.beta)?;
        let ok = match self.mode {
            ActivationMode::ClippedRelu { ceiling } => ceiling.is_finite() && ceiling > 0.0,
            ActivationMode::Elu { alpha } => alpha.is_finite(),
            ActivationMode::Swish { beta } => beta.is_finite(),
            _ => true,
        };
        if !ok {
            return Err(Error::invalid(
                "activation",
                format!("{:?}: the coefficient must be finite (a ceiling above 0)", self.mode),
            ));
        }
        Ok(())
    }
}

/// How softmax is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxAlgo {
    /// `e^x / Σ e^x` as written: may overflow for large inputs.
    Fast,
    /// The maximum subtracted first: never overflows.
    Accurate,
    /// The log of the softmax (log-softmax), with the maximum subtracted.
    Log,
}

/// Over which elements softmax normalizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxMode {
    /// Over `C x spatial`, per image.
    Instance,
    /// Over `C`, per image and spatial position.
    Channel,
}

/// A softmax op: the algorithm, the mode and the result's scaling (`alpha` 1, `beta` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softmax {
    pub(super) algo: SoftmaxAlgo,
    pub(super) mode: SoftmaxMode,
    pub(super) alpha: f32,
    pub(super) beta: f32,
}

impl Softmax {
    /// `algo` over `mode`, unscaled.
    pub fn new(algo: SoftmaxAlgo, mode: SoftmaxMode) -> Self {
        Softmax { algo, mode, alpha: 1.0, beta: 0.0 }
    }

    /// `out = alpha * result + beta * out` (`beta` 0: `out` is not read).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }
}

/// Local response normalization across channels: each value divided by
/// `(k + alpha / n * Σ x²)^beta`, the sum over the `n` channels centred on its own (clipped at
/// the edges), as in AlexNet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lrn {
    pub(super) n: usize,
    pub(super) alpha: f64,
    pub(super) beta: f64,
    pub(super) k: f64,
    pub(super) scale_alpha: f32,
    pub(super) scale_beta: f32,
}

impl Lrn {
    /// A window of `n` channels (odd, 1 to 16), `alpha` (divided by `n`), the exponent `beta`
    /// (at least 0.01) and `k` (at least 1e-5): cuDNN's limits.
    pub fn new(n: usize, alpha: f64, beta: f64, k: f64) -> Self {
        Lrn { n, alpha, beta, k, scale_alpha: 1.0, scale_beta: 0.0 }
    }

    /// `out = alpha * result + beta * out` (`beta` 0: `out` is not read).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.scale_alpha = alpha;
        self.scale_beta = beta;
        self
    }

    fn check(&self) -> Result<()> {
        scales("lrn", self.scale_alpha, self.scale_beta)?;
        if !(1..=16).contains(&self.n) || self.n % 2 == 0 {
            return Err(Error::invalid("lrn", format!("the window {} must be odd, from 1 to 16", self.n)));
        }
        let ok = self.alpha.is_finite()
            && self.beta.is_finite()
            && self.beta >= 0.01
            && self.k.is_finite()
            && self.k >= 1e-5;
        if !ok {
            return Err(Error::invalid("lrn", "alpha must be finite, beta at least 0.01 and k at least 1e-5"));
        }
        Ok(())
    }
}

/// A pooling function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolingMode {
    /// The window's maximum; padding never wins. The backward op routes each gradient to the
    /// first maximum of its window (deterministically).
    Max,
    /// The window's mean, padding counted as zeros.
    AverageIncludePadding,
    /// The mean of the window's elements inside the input.
    AverageExcludePadding,
}

/// A pooling op: the function, per spatial dim the window, padding (0) and stride (the
/// window), and the result's scaling (`alpha` 1, `beta` 0).
///
/// ```
/// use cusched::cudnn::{Pooling, PoolingMode, Shape};
///
/// let pool = Pooling::new(PoolingMode::Max, &[3, 3]).pad(&[1, 1]).stride(&[2, 2]);
/// assert_eq!(pool.output_shape(&Shape::nchw(2, 4, 7, 7))?, Shape::nchw(2, 4, 4, 4));
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Pooling {
    mode: PoolingMode,
    window: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    alpha: f32,
    beta: f32,
}

/// A pooling op's checked window, padding and stride, one entry per spatial dim.
#[derive(Clone, Debug)]
pub(crate) struct PoolGeometry {
    pub mode: PoolingMode,
    pub window: Vec<usize>,
    pub pad: Vec<usize>,
    pub stride: Vec<usize>,
}

impl Pooling {
    /// `mode` over `window` (one entry per spatial dim), no padding, stride the window.
    pub fn new(mode: PoolingMode, window: &[usize]) -> Self {
        Pooling { mode, window: window.to_vec(), pad: Vec::new(), stride: Vec::new(), alpha: 1.0, beta: 0.0 }
    }

    /// Padding on both sides of each spatial dim (each below its window).
    pub fn pad(mut self, pad: &[usize]) -> Self {
        self.pad = pad.to_vec();
        self
    }

    /// The stride of each spatial dim.
    pub fn stride(mut self, stride: &[usize]) -> Self {
        self.stride = stride.to_vec();
        self
    }

    /// `out = alpha * result + beta * out` (`beta` 0: `out` is not read).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// The output shape of pooling `x`, in `x`'s layout.
    pub fn output_shape(&self, x: &Shape) -> Result<Shape> {
        let (_, dims) = self.geometry(x, "x")?;
        Ok(Shape::new(x.layout(), &dims))
    }

    fn geometry(&self, x: &Shape, xn: &'static str) -> Result<(PoolGeometry, Vec<usize>)> {
        scales("pooling", self.alpha, self.beta)?;
        x.check(xn)?;
        let sp = x.spatial().len();
        if self.window.len() != sp {
            return Err(Error::invalid(
                "pooling",
                format!("the window has {} entries; `{xn}` has {sp} spatial dims", self.window.len()),
            ));
        }
        let per_dim = |v: &[usize], what: &str, default: &[usize]| -> Result<Vec<usize>> {
            match v.len() {
                0 => Ok(default.to_vec()),
                n if n == sp => Ok(v.to_vec()),
                n => Err(Error::invalid("pooling", format!("{what} has {n} entries; `{xn}` has {sp} spatial dims"))),
            }
        };
        let geo = PoolGeometry {
            mode: self.mode,
            window: self.window.clone(),
            pad: per_dim(&self.pad, "pad", &vec![0; sp])?,
            stride: per_dim(&self.stride, "stride", &self.window)?,
        };
        let mut out = x.dims()[..2].to_vec();
        for i in 0..sp {
            let (n, win, p, s) = (x.spatial()[i], geo.window[i], geo.pad[i], geo.stride[i]);
            validate::dim("pooling", win, false)?;
            validate::dim("pooling", s, false)?;
            validate::dim("pooling", p, true)?;
            if p >= win {
                return Err(Error::invalid(
                    "pooling",
                    format!("spatial dim {i}: padding {p} is not below the window {win}"),
                ));
            }
            let padded = p
                .checked_mul(2)
                .and_then(|v| v.checked_add(n))
                .ok_or_else(|| Error::invalid("pooling", format!("spatial dim {i} overflows")))?;
            if win > padded {
                return Err(Error::invalid(
                    "pooling",
                    format!("spatial dim {i}: the window {win} exceeds the padded input's {padded}"),
                ));
            }
            out.push((padded - win) / s + 1);
        }
        Ok((geo, out))
    }
}

/// Checks an op's scaling.
fn scales(arg: &'static str, alpha: f32, beta: f32) -> Result<()> {
    if !alpha.is_finite() || !beta.is_finite() {
        return Err(Error::invalid(arg, "alpha and beta must be finite"));
    }
    Ok(())
}

/// Checks that `t` (argument `arg`) has `want`'s shape.
fn same_shape<T: DnnElement>(arg: &'static str, t: &TensorView<'_, T>, want: &Shape, of: &str) -> Result<()> {
    if t.shape != *want {
        return Err(Error::invalid(
            arg,
            format!(
                "is {:?} {:?}; it must be {:?} {:?}, as `{of}`",
                t.shape.layout(),
                t.shape.dims(),
                want.layout(),
                want.dims()
            ),
        ));
    }
    Ok(())
}

/// Checks that the written operand `out` is none of `inputs` (cuDNN reads them while writing it).
fn distinct<T: DnnElement>(out: (&'static str, &GpuRef<T>), inputs: &[(&'static str, &GpuRef<T>)]) -> Result<()> {
    for (arg, buf) in inputs {
        if buf.id() == out.1.id() {
            return Err(Error::invalid(out.0, format!("must not be the same buffer as `{arg}`")));
        }
    }
    Ok(())
}

/// The output's access: read too when `beta` keeps part of it.
fn out_access(beta: f32) -> Access {
    if beta == 0.0 {
        Access::Write
    } else {
        Access::ReadWrite
    }
}

/// Records the inputs read and the output written.
fn record_all<T: DnnElement>(
    rec: &mut LaunchRecorder,
    inputs: &[(&'static str, &GpuRef<T>)],
    out: (&'static str, &GpuRef<T>),
    beta: f32,
) -> Result<()> {
    for (arg, buf) in inputs {
        if buf.id() != out.1.id() {
            record(rec, arg, buf, Access::Read)?;
        }
    }
    let access = if inputs.iter().any(|(_, b)| b.id() == out.1.id()) { Access::ReadWrite } else { out_access(beta) };
    record(rec, out.0, out.1, access)
}

/// A device pointer for a call.
fn ptr<T: DnnElement>(buf: &GpuRef<T>) -> Result<*mut c_void> {
    dptr(buf)
}

impl Cudnn {
    /// Activation forward: `y = alpha * f(x) + beta * y`. `y` has `x`'s shape and may be `x`
    /// (in place).
    pub fn activation_forward<T: DnnElement>(
        &mut self,
        act: &Activation,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        act.check()?;
        x.check("x")?;
        y.check("y")?;
        same_shape("y", y, &x.shape, "x")?;
        let mut rec = self.op.recorder("activation_forward");
        record_all(&mut rec, &[("x", x.buf)], ("y", y.buf), act.beta)?;
        let (a, shape, dtype) = (*act, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || sim::activation_forward(&a, &shape, &xm, &ym));
        }
        let handle = self.handle()?;
        let (xp, yp) = (ptr(x.buf)?, ptr(y.buf)?);
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) both buffers hold `shape` (checked) and were fenced by
            // preflight; in place is allowed with one descriptor for both.
            unsafe { calls::activation(handle, a.mode, &shape, dtype, a.alpha, a.beta, Some((xp, yp)), None) }
        })
    }

    /// Activation backward: `dx = alpha * f'(x) ∘ dy + beta * dx`, from the forward op's input
    /// `x` and output `y`. Every tensor has `x`'s shape.
    pub fn activation_backward<T: DnnElement>(
        &mut self,
        act: &Activation,
        y: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        x: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        act.check()?;
        for (arg, t) in [("x", x), ("y", y), ("dy", dy), ("dx", dx)] {
            t.check(arg)?;
            same_shape(arg, t, &x.shape, "x")?;
        }
        distinct(("dx", dx.buf), &[("x", x.buf), ("y", y.buf)])?;
        let mut rec = self.op.recorder("activation_backward");
        record_all(&mut rec, &[("y", y.buf), ("dy", dy.buf), ("x", x.buf)], ("dx", dx.buf), act.beta)?;
        let (a, shape, dtype) = (*act, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let m = [y.buf.sim_data()?, dy.buf.sim_data()?, x.buf.sim_data()?, dx.buf.sim_data()?];
            return self.op.run_sim(rec, Vec::new(), move || sim::activation_backward(&a, &shape, m));
        }
        let handle = self.handle()?;
        let b = Backward { y: ptr(y.buf)?, dy: ptr(dy.buf)?, x: ptr(x.buf)?, dx: ptr(dx.buf)? };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) every buffer holds `shape` (checked), was fenced by
            // preflight, and `dx` is neither input cuDNN reads after writing it.
            unsafe { calls::activation(handle, a.mode, &shape, dtype, a.alpha, a.beta, None, Some(b)) }
        })
    }

    /// Softmax forward: `y = alpha * softmax(x) + beta * y` (log-softmax with
    /// [`SoftmaxAlgo::Log`]). `y` has `x`'s shape and may be `x` (in place).
    pub fn softmax_forward<T: DnnElement>(
        &mut self,
        sm: &Softmax,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        scales("softmax", sm.alpha, sm.beta)?;
        x.check("x")?;
        y.check("y")?;
        same_shape("y", y, &x.shape, "x")?;
        let mut rec = self.op.recorder("softmax_forward");
        record_all(&mut rec, &[("x", x.buf)], ("y", y.buf), sm.beta)?;
        let (s, shape, dtype) = (*sm, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || sim::softmax_forward(&s, &shape, &xm, &ym));
        }
        let handle = self.handle()?;
        let (xp, yp) = (ptr(x.buf)?, ptr(y.buf)?);
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) both buffers hold `shape` (checked) and were fenced by
            // preflight; in place is allowed with one descriptor for both.
            unsafe { calls::softmax(handle, s.algo, s.mode, &shape, dtype, s.alpha, s.beta, Some((xp, yp)), None) }
        })
    }

    /// Softmax backward: `dx = alpha * J(y)ᵀ dy + beta * dx`, from the forward op's output `y`
    /// (the log-softmax's output with [`SoftmaxAlgo::Log`]). Every tensor has `y`'s shape.
    pub fn softmax_backward<T: DnnElement>(
        &mut self,
        sm: &Softmax,
        y: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        scales("softmax", sm.alpha, sm.beta)?;
        for (arg, t) in [("y", y), ("dy", dy), ("dx", dx)] {
            t.check(arg)?;
            same_shape(arg, t, &y.shape, "y")?;
        }
        distinct(("dx", dx.buf), &[("y", y.buf)])?;
        let mut rec = self.op.recorder("softmax_backward");
        record_all(&mut rec, &[("y", y.buf), ("dy", dy.buf)], ("dx", dx.buf), sm.beta)?;
        let (s, shape, dtype) = (*sm, y.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let m = [y.buf.sim_data()?, dy.buf.sim_data()?, dx.buf.sim_data()?];
            return self.op.run_sim(rec, Vec::new(), move || sim::softmax_backward(&s, &shape, m));
        }
        let handle = self.handle()?;
        let b = Backward { y: ptr(y.buf)?, dy: ptr(dy.buf)?, x: std::ptr::null(), dx: ptr(dx.buf)? };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) every buffer holds `shape` (checked) and was fenced by
            // preflight; `dx` is not `y`.
            unsafe { calls::softmax(handle, s.algo, s.mode, &shape, dtype, s.alpha, s.beta, None, Some(b)) }
        })
    }

    /// LRN forward across channels: `y = alpha * lrn(x) + beta * y`. `y` has `x`'s shape.
    /// cuDNN's LRN takes f32 and f16, 4-D tensors in either layout and 5-D ones in NCDHW:
    /// anything else is [`Error::Unsupported`](crate::Error::Unsupported), before anything is
    /// recorded.
    pub fn lrn_forward<T: DnnElement>(
        &mut self,
        lrn: &Lrn,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        lrn.check()?;
        lrn_takes::<T>(&x.shape)?;
        x.check("x")?;
        y.check("y")?;
        same_shape("y", y, &x.shape, "x")?;
        distinct(("y", y.buf), &[("x", x.buf)])?;
        let mut rec = self.op.recorder("lrn_forward");
        record_all(&mut rec, &[("x", x.buf)], ("y", y.buf), lrn.scale_beta)?;
        let (l, shape, dtype) = (*lrn, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || sim::lrn_forward(&l, &shape, &xm, &ym));
        }
        let handle = self.handle()?;
        let (xp, yp) = (ptr(x.buf)?, ptr(y.buf)?);
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) both buffers hold `shape` (checked), are distinct, and were
            // fenced by preflight.
            unsafe { calls::lrn(handle, &l, &shape, dtype, Some((xp, yp)), None) }
        })
    }

    /// LRN backward (what [`lrn_forward`](Self::lrn_forward) takes, it takes):
    /// `dx = alpha * lrn'(x) dy + beta * dx`, from the forward op's input `x`
    /// and output `y`. Every tensor has `x`'s shape.
    pub fn lrn_backward<T: DnnElement>(
        &mut self,
        lrn: &Lrn,
        y: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        x: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        lrn.check()?;
        lrn_takes::<T>(&x.shape)?;
        for (arg, t) in [("x", x), ("y", y), ("dy", dy), ("dx", dx)] {
            t.check(arg)?;
            same_shape(arg, t, &x.shape, "x")?;
        }
        distinct(("dx", dx.buf), &[("x", x.buf), ("y", y.buf), ("dy", dy.buf)])?;
        let mut rec = self.op.recorder("lrn_backward");
        record_all(&mut rec, &[("y", y.buf), ("dy", dy.buf), ("x", x.buf)], ("dx", dx.buf), lrn.scale_beta)?;
        let (l, shape, dtype) = (*lrn, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let m = [y.buf.sim_data()?, dy.buf.sim_data()?, x.buf.sim_data()?, dx.buf.sim_data()?];
            return self.op.run_sim(rec, Vec::new(), move || sim::lrn_backward(&l, &shape, m));
        }
        let handle = self.handle()?;
        let b = Backward { y: ptr(y.buf)?, dy: ptr(dy.buf)?, x: ptr(x.buf)?, dx: ptr(dx.buf)? };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) every buffer holds `shape` (checked), was fenced by
            // preflight, and `dx` is none of the inputs.
            unsafe { calls::lrn(handle, &l, &shape, dtype, None, Some(b)) }
        })
    }

    /// Pooling forward: `y = alpha * pool(x) + beta * y`; `y` must be the shape
    /// [`Pooling::output_shape`] gives.
    pub fn pooling_forward<T: DnnElement>(
        &mut self,
        pool: &Pooling,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let (geo, want) = pool.geometry(&x.shape, "x")?;
        x.check("x")?;
        y.check("y")?;
        same_shape("y", y, &Shape::new(x.shape.layout(), &want), "the pooling of `x` gives")?;
        distinct(("y", y.buf), &[("x", x.buf)])?;
        let mut rec = self.op.recorder("pooling_forward");
        record_all(&mut rec, &[("x", x.buf)], ("y", y.buf), pool.beta)?;
        let (alpha, beta, xs, ys, dtype) =
            (pool.alpha, pool.beta, x.shape.clone(), y.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let (xm, ym) = (x.buf.sim_data()?, y.buf.sim_data()?);
            return self
                .op
                .run_sim(rec, Vec::new(), move || sim::pooling_forward(&geo, alpha, beta, &xs, &ys, &xm, &ym));
        }
        let handle = self.handle()?;
        let (xp, yp) = (ptr(x.buf)?, ptr(y.buf)?);
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) `x` holds `xs` and `y` the checked output shape `ys`, both
            // fenced by preflight, distinct buffers.
            unsafe {
                calls::pooling(
                    handle,
                    geo.mode,
                    &geo.window,
                    &geo.pad,
                    &geo.stride,
                    &xs,
                    &ys,
                    dtype,
                    alpha,
                    beta,
                    Some((xp, yp)),
                    None,
                )
            }
        })
    }

    /// Pooling backward: `dx = alpha * pool'(x) dy + beta * dx`, from the forward op's input
    /// `x` and output `y`. `dx` has `x`'s shape, `dy` `y`'s.
    pub fn pooling_backward<T: DnnElement>(
        &mut self,
        pool: &Pooling,
        y: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        x: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let (geo, want) = pool.geometry(&x.shape, "x")?;
        let ys = Shape::new(x.shape.layout(), &want);
        for (arg, t, shape, of) in [
            ("y", y, &ys, "the pooling of `x` gives"),
            ("dy", dy, &ys, "y"),
            ("x", x, &x.shape, "x"),
            ("dx", dx, &x.shape, "x"),
        ] {
            t.check(arg)?;
            same_shape(arg, t, shape, of)?;
        }
        distinct(("dx", dx.buf), &[("x", x.buf), ("y", y.buf), ("dy", dy.buf)])?;
        let mut rec = self.op.recorder("pooling_backward");
        record_all(&mut rec, &[("y", y.buf), ("dy", dy.buf), ("x", x.buf)], ("dx", dx.buf), pool.beta)?;
        let (alpha, beta, xs, dtype) = (pool.alpha, pool.beta, x.shape.clone(), super::tensor::dtype::<T>());
        if self.op.device.is_simulated() {
            let m = [y.buf.sim_data()?, dy.buf.sim_data()?, x.buf.sim_data()?, dx.buf.sim_data()?];
            return self.op.run_sim(rec, Vec::new(), move || sim::pooling_backward(&geo, alpha, beta, &xs, &ys, m));
        }
        let handle = self.handle()?;
        let b = Backward { y: ptr(y.buf)?, dy: ptr(dy.buf)?, x: ptr(x.buf)?, dx: ptr(dx.buf)? };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) `x` and `dx` hold `xs`, `y` and `dy` the checked output shape
            // `ys`, all fenced by preflight; `dx` is none of the inputs.
            unsafe {
                calls::pooling(
                    handle,
                    geo.mode,
                    &geo.window,
                    &geo.pad,
                    &geo.stride,
                    &xs,
                    &ys,
                    dtype,
                    alpha,
                    beta,
                    None,
                    Some(b),
                )
            }
        })
    }
}

/// What cuDNN's LRN refuses, refused before anything is recorded (on the simulator too, so
/// that code tested there runs on the GPU): bf16 tensors (`CUDNN_STATUS_NOT_SUPPORTED`), and
/// 5-D tensors that are not NCDHW (`CUDNN_STATUS_BAD_PARAM`: it takes 5-D tensors DHW-packed
/// only). 4-D tensors in either layout, f32 and f16, run.
fn lrn_takes<T: DnnElement>(shape: &Shape) -> Result<()> {
    let unsupported = |what: String, hint: &str| Error::Unsupported { library: super::NAME, what, hint: hint.into() };
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<half::bf16>() {
        return Err(unsupported(
            format!("LRN of a bf16 tensor {:?}", shape.dims()),
            "cuDNN's LRN takes f32 and f16 tensors: convert to one of them",
        ));
    }
    if shape.dims().len() == 5 && shape.layout() != super::tensor::Layout::Nchw {
        return Err(unsupported(
            format!("LRN of a 5-D NDHWC tensor {:?}", shape.dims()),
            "cuDNN's LRN takes 5-D tensors in NCDHW only (4-D tensors in either layout)",
        ));
    }
    Ok(())
}
