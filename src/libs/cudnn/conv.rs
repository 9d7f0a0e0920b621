//! Convolutions: the parameters ([`Convolution`]), their checks against the operands' shapes,
//! and the three ops (forward, backward-data, backward-filter) with their plans.

use super::tensor::{DnnElement, Shape, TensorView};
use super::{sim, Cudnn};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::dtype::CudnnType;
use crate::libs::{dptr, record, validate};
use crate::memory::GpuRef;
use crate::track::Access;

/// Which convolution op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// `y = conv(x, w)`.
    Forward,
    /// `dx = convᵀ(w, dy)`.
    BackwardData,
    /// `dw = corr(x, dy)`.
    BackwardFilter,
}

/// How a convolution's algorithm is chosen, once per shape key (then cached).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AlgoSearch {
    /// cuDNN's heuristics (`cudnnGetConvolution*Algorithm_v7`): no GPU time, a good choice.
    #[default]
    Heuristic,
    /// Measure the candidates (`cudnnFindConvolution*Algorithm`) and keep the fastest: the
    /// first op of each new shape runs every candidate on memory cuDNN allocates itself and
    /// synchronizes the device, which can take tens of milliseconds.
    Find,
}

/// A convolution's parameters: per spatial dim padding (0), stride (1) and dilation (1),
/// groups (1), and the scaling of the result (`out = alpha * result + beta * out`, with
/// `alpha` 1 and `beta` 0). cuDNN computes a cross-correlation (the filter is not flipped), as
/// deep-learning frameworks call convolution.
///
/// A per-dim list left empty takes its default for every spatial dim; otherwise it has one
/// entry per spatial dim (2 for 4-D tensors, 3 for 5-D).
///
/// ```
/// use cusched::cudnn::{Convolution, Shape};
///
/// // A 3x3 depthwise convolution with stride 2 and padding 1 over 8 channels.
/// let conv = Convolution::new().pad(&[1, 1]).stride(&[2, 2]).groups(8);
/// let y = conv.output_shape(&Shape::nhwc(3, 8, 9, 9), &Shape::nhwc(8, 1, 3, 3))?;
/// assert_eq!(y, Shape::nhwc(3, 8, 5, 5));
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Convolution {
    pad: Vec<usize>,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    alpha: f32,
    beta: f32,
}

impl Default for Convolution {
    fn default() -> Self {
        Convolution { pad: Vec::new(), stride: Vec::new(), dilation: Vec::new(), groups: 1, alpha: 1.0, beta: 0.0 }
    }
}

/// The checked geometry of a convolution: one entry per spatial dim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Geometry {
    pub pad: Vec<usize>,
    pub stride: Vec<usize>,
    pub dilation: Vec<usize>,
    pub groups: usize,
}

/// The argument names of a direction's operands: input side, filter, output side.
fn names(dir: Direction) -> [&'static str; 3] {
    match dir {
        Direction::Forward => ["x", "w", "y"],
        Direction::BackwardData => ["dx", "w", "dy"],
        Direction::BackwardFilter => ["x", "dw", "dy"],
    }
}

impl Convolution {
    /// No padding, stride 1, no dilation, one group, `alpha` 1, `beta` 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Zero padding on both sides of each spatial dim.
    pub fn pad(mut self, pad: &[usize]) -> Self {
        self.pad = pad.to_vec();
        self
    }

    /// The stride of each spatial dim.
    pub fn stride(mut self, stride: &[usize]) -> Self {
        self.stride = stride.to_vec();
        self
    }

    /// The dilation of each spatial dim (1: a dense filter).
    pub fn dilation(mut self, dilation: &[usize]) -> Self {
        self.dilation = dilation.to_vec();
        self
    }

    /// Groups: the input channels and the filters split into `groups` equal parts, each part
    /// convolved on its own (input channels = filter channels × groups; `groups` equal to the
    /// input channels is a depthwise convolution).
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// `out = alpha * result + beta * out` (`beta` 0: `out` is not read).
    pub fn scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }

    /// The output shape of a forward convolution of `x` by filter `w`, in `x`'s layout.
    pub fn output_shape(&self, x: &Shape, w: &Shape) -> Result<Shape> {
        let (_, dims) = self.geometry(Direction::Forward, x, w)?;
        Ok(Shape::new(x.layout(), &dims))
    }

    /// Checks the parameters against the input side `x` (`dx`) and the filter `w`; returns the
    /// geometry and the output side's dims.
    fn geometry(&self, dir: Direction, x: &Shape, w: &Shape) -> Result<(Geometry, Vec<usize>)> {
        let [xn, wn, _] = names(dir);
        x.check(xn)?;
        w.check(wn)?;
        let rank = x.dims().len();
        if w.dims().len() != rank {
            return Err(Error::invalid(wn, format!("has {} dims but `{xn}` has {rank}", w.dims().len())));
        }
        let sp = rank - 2;
        let per_dim = |v: &[usize], what: &str, default: usize| -> Result<Vec<usize>> {
            match v.len() {
                0 => Ok(vec![default; sp]),
                n if n == sp => Ok(v.to_vec()),
                n => Err(Error::invalid("conv", format!("{what} has {n} entries; `{xn}` has {sp} spatial dims"))),
            }
        };
        let geo = Geometry {
            pad: per_dim(&self.pad, "pad", 0)?,
            stride: per_dim(&self.stride, "stride", 1)?,
            dilation: per_dim(&self.dilation, "dilation", 1)?,
            groups: self.groups,
        };
        for (&p, (&s, &d)) in geo.pad.iter().zip(geo.stride.iter().zip(&geo.dilation)) {
            validate::dim("conv", p, true)?;
            if s == 0 || d == 0 {
                return Err(Error::invalid("conv", "strides and dilations must be at least 1"));
            }
            validate::dim("conv", s, false)?;
            validate::dim("conv", d, false)?;
        }
        let (c, g) = (x.dims()[1], self.groups);
        if g == 0 || c % g != 0 {
            return Err(Error::invalid("conv", format!("groups {g} does not divide the {c} channels of `{xn}`")));
        }
        let (k, wc) = (w.dims()[0], w.dims()[1]);
        if wc.checked_mul(g) != Some(c) {
            return Err(Error::invalid(
                wn,
                format!("has {wc} channels per filter; with {g} groups `{xn}`'s {c} channels need {}", c / g),
            ));
        }
        if k % g != 0 {
            return Err(Error::invalid(wn, format!("its {k} filters do not split into {g} groups")));
        }
        let mut out = vec![x.dims()[0], k];
        for i in 0..sp {
            let (n, r) = (x.spatial()[i], w.spatial()[i]);
            let (p, s, d) = (geo.pad[i], geo.stride[i], geo.dilation[i]);
            let overflow = || Error::invalid("conv", format!("spatial dim {i} overflows"));
            let reach = (r - 1).checked_mul(d).and_then(|v| v.checked_add(1)).ok_or_else(overflow)?;
            let padded = p.checked_mul(2).and_then(|v| v.checked_add(n)).ok_or_else(overflow)?;
            if reach > padded {
                return Err(Error::invalid(
                    "conv",
                    format!("spatial dim {i}: the dilated filter spans {reach}, more than the padded input's {padded}"),
                ));
            }
            out.push((padded - reach) / s + 1);
        }
        Ok((geo, out))
    }

    /// Checks every operand of direction `dir`; returns the geometry.
    fn check<T: DnnElement>(
        &self,
        dir: Direction,
        x: &TensorView<'_, T>,
        w: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Geometry> {
        let [xn, wn, yn] = names(dir);
        if !self.alpha.is_finite() || !self.beta.is_finite() {
            return Err(Error::invalid("conv", "alpha and beta must be finite"));
        }
        let (geo, want) = self.geometry(dir, &x.shape, &w.shape)?;
        y.shape.check(yn)?;
        if y.shape.dims() != want.as_slice() {
            return Err(Error::invalid(
                yn,
                format!(
                    "is {:?} but the convolution of `{xn}` {:?} by `{wn}` {:?} gives {want:?}",
                    y.shape.dims(),
                    x.shape.dims(),
                    w.shape.dims()
                ),
            ));
        }
        x.check(xn)?;
        w.check(wn)?;
        y.check(yn)?;
        let out = match dir {
            Direction::Forward => (yn, y.buf),
            Direction::BackwardData => (xn, x.buf),
            Direction::BackwardFilter => (wn, w.buf),
        };
        for (arg, buf) in [(xn, x.buf), (wn, w.buf), (yn, y.buf)] {
            if arg != out.0 && buf.id() == out.1.id() {
                return Err(Error::invalid(
                    out.0,
                    format!("must not be the same buffer as `{arg}`: cuDNN writes one while reading the other"),
                ));
            }
        }
        Ok(geo)
    }
}

/// The plan cache's key: everything a convolution plan depends on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConvKey {
    pub dir: Direction,
    pub dtype: CudnnType,
    pub x: Shape,
    pub w: Shape,
    pub y: Shape,
    pub geo: Geometry,
    pub tensor_cores: bool,
    pub search: AlgoSearch,
    /// The activation of a fused convolution (its plan may need another algorithm).
    pub fused: Option<ConvActivation>,
}

impl Cudnn {
    /// Forward convolution: `y = alpha * conv(x, w) + beta * y`. `x` is `N x C x spatial`, `w`
    /// is `K x C/groups x filter spatial`, `y` must be the shape
    /// [`Convolution::output_shape`] gives (its layout may differ from `x`'s).
    pub fn conv_forward<T: DnnElement>(
        &mut self,
        conv: &Convolution,
        x: &TensorView<'_, T>,
        w: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let geo = conv.check(Direction::Forward, x, w, y)?;
        self.convolve(Direction::Forward, conv, geo, x, w, y, None)
    }

    /// Backward-data convolution, the gradient of the input:
    /// `dx = alpha * convᵀ(w, dy) + beta * dx`. The shapes are those of the forward
    /// convolution (`dx` as `x`, `dy` as `y`).
    pub fn conv_backward_data<T: DnnElement>(
        &mut self,
        conv: &Convolution,
        w: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let geo = conv.check(Direction::BackwardData, dx, w, dy)?;
        self.convolve(Direction::BackwardData, conv, geo, dx, w, dy, None)
    }

    /// Backward-filter convolution, the gradient of the filter:
    /// `dw = alpha * corr(x, dy) + beta * dw` (`beta` 1 accumulates over batches). The shapes
    /// are those of the forward convolution (`dw` as `w`, `dy` as `y`).
    pub fn conv_backward_filter<T: DnnElement>(
        &mut self,
        conv: &Convolution,
        x: &TensorView<'_, T>,
        dy: &TensorView<'_, T>,
        dw: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let geo = conv.check(Direction::BackwardFilter, x, dw, dy)?;
        self.convolve(Direction::BackwardFilter, conv, geo, x, dw, dy, None)
    }

    /// Fused forward convolution, bias and activation (one kernel):
    /// `y = act(alpha * conv(x, w) + beta * z + bias)`, with `alpha` and `beta` the
    /// convolution's [`scale`](Convolution::scale). `bias` holds one value per output channel;
    /// `z` (a residual, `y`'s shape; it may be `y` itself) is left out as `None`, which needs
    /// `beta` 0. cuDNN fuses [`ConvActivation::Relu`] with any algorithm and
    /// [`ConvActivation::Identity`] with the implicit precomputed GEMM only, which the plan
    /// then takes.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_bias_activation_forward<T: DnnElement>(
        &mut self,
        conv: &Convolution,
        act: ConvActivation,
        x: &TensorView<'_, T>,
        w: &TensorView<'_, T>,
        z: Option<&TensorView<'_, T>>,
        bias: &GpuRef<T>,
        y: &TensorView<'_, T>,
    ) -> Result<Completion<()>> {
        let geo = conv.check(Direction::Forward, x, w, y)?;
        let k = w.shape.dims()[0];
        let mut bias_dims = vec![1; y.shape.dims().len()];
        bias_dims[1] = k;
        let bias_shape = Shape::new(super::Layout::Nchw, &bias_dims);
        validate::covers("bias", bias, Some(k), &format!("one value per output channel ({k})"))?;
        if bias.id() == y.buf.id() {
            return Err(Error::invalid("bias", "must not be the same buffer as `y`"));
        }
        match z {
            Some(z) => {
                z.check("z")?;
                if z.shape != y.shape {
                    return Err(Error::invalid(
                        "z",
                        format!(
                            "is {:?} {:?}; it must be `y`'s {:?} {:?}",
                            z.shape.layout(),
                            z.shape.dims(),
                            y.shape.layout(),
                            y.shape.dims()
                        ),
                    ));
                }
            }
            None if conv.beta != 0.0 => {
                return Err(Error::invalid("z", "is left out, so the convolution's beta must be 0"));
            }
            None => {}
        }
        let fused = Fused { act, z: z.map(|z| z.buf), bias, bias_shape };
        self.convolve(Direction::Forward, conv, geo, x, w, y, Some(fused))
    }

    /// Records the uses, finds or makes the plan, sizes the workspace, and enqueues the op, or
    /// on the simulator computes it on the host under the same uses. `x`, `w`, `y` are the
    /// input side, the filter and the output side of the forward convolution, whichever of
    /// them the direction writes; `fused`, the epilogue of a fused forward convolution.
    #[allow(clippy::too_many_arguments)]
    fn convolve<T: DnnElement>(
        &mut self,
        dir: Direction,
        conv: &Convolution,
        geo: Geometry,
        x: &TensorView<'_, T>,
        w: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
        fused: Option<Fused<'_, T>>,
    ) -> Result<Completion<()>> {
        let [xn, wn, yn] = names(dir);
        // A fused op reads `y` only as its `z`.
        let reads_out = match &fused {
            Some(f) => f.z.is_some_and(|z| z.id() == y.buf.id()),
            None => conv.beta != 0.0,
        };
        let out_access = if reads_out { Access::ReadWrite } else { Access::Write };
        let op = match (dir, &fused) {
            (Direction::Forward, Some(_)) => "conv_bias_activation_forward",
            (Direction::Forward, None) => "conv_forward",
            (Direction::BackwardData, _) => "conv_backward_data",
            (Direction::BackwardFilter, _) => "conv_backward_filter",
        };
        let mut rec = self.op.recorder(op);
        let access = |arg: &str| if arg == names(dir)[out_index(dir)] { out_access } else { Access::Read };
        record(&mut rec, xn, x.buf, access(xn))?;
        record(&mut rec, wn, w.buf, access(wn))?;
        record(&mut rec, yn, y.buf, access(yn))?;
        if let Some(f) = &fused {
            record(&mut rec, "bias", f.bias, Access::Read)?;
            if let Some(z) = f.z.filter(|z| z.id() != y.buf.id()) {
                record(&mut rec, "z", z, Access::Read)?;
            }
        }
        let (alpha, beta) = (conv.alpha, conv.beta);
        if self.op.device.is_simulated() {
            let epilogue = match &fused {
                Some(f) => Some(sim::Epilogue {
                    relu: f.act == ConvActivation::Relu,
                    z: f.z.map(|z| z.sim_data()).transpose()?,
                    bias: f.bias.sim_data()?,
                }),
                None => None,
            };
            let job = sim::Conv {
                dir,
                x: (x.shape.clone(), x.buf.sim_data()?),
                w: (w.shape.clone(), w.buf.sim_data()?),
                y: (y.shape.clone(), y.buf.sim_data()?),
                geo,
                alpha,
                beta,
                epilogue,
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let dtype = super::tensor::dtype::<T>();
        let key = ConvKey {
            dir,
            dtype,
            x: x.shape.clone(),
            w: w.shape.clone(),
            y: y.shape.clone(),
            geo,
            tensor_cores: self.tf32 || dtype != CudnnType::Float,
            search: self.search,
            fused: fused.as_ref().map(|f| f.act),
        };
        self.op.bound_stream()?;
        let Some(handle) = self.raw.as_ref() else { return Err(self.op.unavailable_on_sim()) };
        let plan = self.plans.get_or_make(key, &self.op, |k| {
            // SAFETY: (1) the handle is live and its context was bound above; (2) `&mut self`
            // keeps it to this thread.
            let plan = unsafe { super::calls::ConvPlan::make(handle, k) }?;
            plan.ok_or_else(|| Error::Unsupported {
                library: super::NAME,
                what: format!(
                    "a {dir:?} convolution of {:?} {:?} by {:?} {:?} in {:?}",
                    k.x.layout(),
                    k.x.dims(),
                    k.w.layout(),
                    k.w.dims(),
                    k.dtype
                ),
                hint: "no algorithm supports this combination; try another layout or element type".into(),
            })
        })?;
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|b| b.raw_device_ptr()).transpose()?;
        let (a, b, out): (&GpuRef<T>, &GpuRef<T>, &GpuRef<T>) = match dir {
            Direction::Forward => (x.buf, w.buf, y.buf),
            Direction::BackwardData => (w.buf, y.buf, x.buf),
            Direction::BackwardFilter => (x.buf, y.buf, w.buf),
        };
        self.op.run(rec, Vec::new(), || {
            let work = work.map_or(std::ptr::null_mut(), |w| w as *mut std::ffi::c_void);
            match &fused {
                // SAFETY: (1) the handle was bound to this stream when made, and the op path made
                // its context current; (2) the buffers were validated against the plan's shapes
                // (`z` as `y`, `bias` one value per output channel), are live and were fenced by
                // preflight; (3) the workspace, declared read-write, holds at least the plan's
                // need and serves one op at a time (the stream is in order). Without `z`, `y`
                // stands in for it with `beta` 0.
                Some(f) => unsafe {
                    let z = match f.z {
                        Some(z) => dptr(z)?,
                        None => dptr(out)?,
                    };
                    plan.run_fused(
                        handle,
                        f.act,
                        alpha,
                        dptr(a)?,
                        dptr(b)?,
                        beta,
                        z,
                        &f.bias_shape,
                        dptr(f.bias)?,
                        dptr(out)?,
                        work,
                        dtype,
                    )
                },
                // SAFETY: (1) to (3) as above.
                None => unsafe { plan.run(handle, alpha, dptr(a)?, dptr(b)?, beta, dptr(out)?, work) },
            }
        })
    }
}

/// The activation a fused convolution applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvActivation {
    /// None: `y = alpha * conv + beta * z + bias`.
    Identity,
    /// `max(·, 0)`.
    Relu,
}

/// The epilogue of a fused forward convolution.
struct Fused<'a, T: DnnElement> {
    act: ConvActivation,
    z: Option<&'a GpuRef<T>>,
    bias: &'a GpuRef<T>,
    /// `1 x K x 1 x 1[ x 1]`.
    bias_shape: Shape,
}

/// Which of a direction's operands ([`names`] order) it writes.
fn out_index(dir: Direction) -> usize {
    match dir {
        Direction::Forward => 2,
        Direction::BackwardData => 0,
        Direction::BackwardFilter => 1,
    }
}
