//! Layer norm and RMS norm over the rows of a `rows x cols` matrix (each row normalized over
//! its `cols` values, as a transformer normalizes each token), forward (training, with the
//! saved statistics; inference) and backward, through the backend's NORM_FORWARD and
//! NORM_BACKWARD operations. The parameters (`scale`, `bias`) and statistics are f32.

use super::builder::{Dt, GraphSpec, NormMode, Op, Uid};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::tensor::{dtype, DnnElement};
use crate::libs::cudnn::{Cudnn, NAME};
use crate::libs::dtype::CudnnType;
use crate::libs::validate::{self, no_aliasing};
use crate::libs::{dptr, record};
use crate::memory::{GpuRef, SimMem};
use crate::track::Access;
use std::ffi::c_void;

/// Which normalization: layer norm (`(x - mean) / sqrt(var + eps) * scale + bias`) or RMS norm
/// (`x / sqrt(mean(x²) + eps) * scale`, no bias).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// Layer norm: scale and bias.
    Layer,
    /// RMS norm: scale only.
    Rms,
}

/// A row normalization of a `rows x cols` matrix (row-major, `cols` contiguous).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowNorm {
    /// Layer or RMS.
    pub kind: NormKind,
    /// Rows, each normalized on its own.
    pub rows: usize,
    /// Values per row.
    pub cols: usize,
    /// Added to the variance (the mean square for RMS norm).
    pub epsilon: f32,
}

/// The per-row statistics a training step saves for the backward step (f32, `rows` each):
/// the mean (layer norm only) and `1 / sqrt(var + eps)`.
#[derive(Clone, Copy, Debug)]
pub struct NormStats<'a> {
    /// Layer norm's row means; `None` for RMS norm.
    pub mean: Option<&'a GpuRef<f32>>,
    /// The inverse standard deviations (RMS norm: inverse root mean squares).
    pub inv_var: &'a GpuRef<f32>,
}

pub(super) fn dt_of<T: DnnElement>() -> Dt {
    match dtype::<T>() {
        CudnnType::Half => Dt::F16,
        CudnnType::Bfloat16 => Dt::Bf16,
        _ => Dt::F32,
    }
}

impl RowNorm {
    fn check(&self) -> Result<usize> {
        validate::dim64("rows", self.rows)?;
        validate::dim64("cols", self.cols)?;
        if !self.epsilon.is_finite() || self.epsilon < 0.0 {
            return Err(Error::invalid("norm", format!("epsilon {} must be finite and not negative", self.epsilon)));
        }
        self.rows.checked_mul(self.cols).ok_or_else(|| Error::invalid("norm", "rows x cols overflows"))
    }

    /// The matrix, the per-column parameters and the per-row statistics as 4-D tensors.
    fn shapes(&self) -> ([i64; 4], [i64; 4], [i64; 4], [i64; 4]) {
        let (r, c) = (self.rows as i64, self.cols as i64);
        ([r, c, 1, 1], [c, 1, c, c], [1, c, 1, 1], [r, 1, 1, 1])
    }

    fn check_stats(&self, s: &NormStats<'_>) -> Result<()> {
        match (self.kind, s.mean) {
            (NormKind::Layer, None) => return Err(Error::invalid("stats", "layer norm saves the row means too")),
            (NormKind::Rms, Some(_)) => return Err(Error::invalid("stats", "RMS norm saves no row means")),
            (_, Some(m)) => validate::covers("stats.mean", m, Some(self.rows), "one value per row")?,
            _ => {}
        }
        validate::covers("stats.inv_var", s.inv_var, Some(self.rows), "one value per row")
    }
}

impl Cudnn {
    /// Row normalization forward: `y` = each row of `x` normalized ([`NormKind`]), times
    /// `scale` (`cols` f32 values) plus `bias` (layer norm only; `cols` f32 values). With
    /// `saved`, a training step: the row statistics are written there for
    /// [`norm_backward`](Self::norm_backward); without, inference.
    pub fn norm_forward<T: DnnElement>(
        &mut self,
        n: &RowNorm,
        x: &GpuRef<T>,
        scale: &GpuRef<f32>,
        bias: Option<&GpuRef<f32>>,
        y: &GpuRef<T>,
        saved: Option<&NormStats<'_>>,
    ) -> Result<Completion<()>> {
        let len = n.check()?;
        validate::covers("x", x, Some(len), &format!("a {} x {} matrix", n.rows, n.cols))?;
        validate::covers("y", y, Some(len), &format!("a {} x {} matrix", n.rows, n.cols))?;
        validate::covers("scale", scale, Some(n.cols), "one value per column")?;
        match (n.kind, bias) {
            (NormKind::Layer, None) => return Err(Error::invalid("bias", "layer norm takes a bias")),
            (NormKind::Rms, Some(_)) => return Err(Error::invalid("bias", "RMS norm takes no bias")),
            (_, Some(b)) => validate::covers("bias", b, Some(n.cols), "one value per column")?,
            _ => {}
        }
        let mut uses = vec![("x", x.id(), false), ("scale", scale.id(), false), ("y", y.id(), true)];
        if let Some(b) = bias {
            uses.push(("bias", b.id(), false));
        }
        if let Some(s) = saved {
            n.check_stats(s)?;
            uses.push(("stats.inv_var", s.inv_var.id(), true));
            if let Some(m) = s.mean {
                uses.push(("stats.mean", m.id(), true));
            }
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("norm_forward");
        record(&mut rec, "x", x, Access::Read)?;
        record(&mut rec, "scale", scale, Access::Read)?;
        if let Some(b) = bias {
            record(&mut rec, "bias", b, Access::Read)?;
        }
        record(&mut rec, "y", y, Access::Write)?;
        if let Some(s) = saved {
            if let Some(m) = s.mean {
                record(&mut rec, "stats.mean", m, Access::Write)?;
            }
            record(&mut rec, "stats.inv_var", s.inv_var, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            let job = SimNorm { n: *n, x: x.sim_data()?, scale: scale.sim_data()? };
            let (b, yv) = (bias.map(|b| b.sim_data()).transpose()?, y.sim_data()?);
            let st = saved
                .map(|s| Ok::<_, Error>((s.mean.map(|m| m.sim_data()).transpose()?, s.inv_var.sim_data()?)))
                .transpose()?;
            return self.op.run_sim(rec, Vec::new(), move || job.forward(b, yv, st));
        }
        let mut g = GraphSpec::default();
        let (xd, xs, pd, sd) = n.shapes();
        let (dt, mode) = (dt_of::<T>(), if n.kind == NormKind::Rms { NormMode::Rms } else { NormMode::Layer });
        let xu = g.tensor(&xd, &xs, dt);
        let su = g.tensor(&pd, &xs, Dt::F32);
        let bu = bias.map(|_| g.tensor(&pd, &xs, Dt::F32));
        let eu = g.scalar(Dt::F32);
        let yu = g.tensor(&xd, &xs, dt);
        let mu = saved.and_then(|s| s.mean).map(|_| g.tensor(&sd, &[1, 1, 1, 1], Dt::F32));
        let vu = saved.map(|_| g.tensor(&sd, &[1, 1, 1, 1], Dt::F32));
        let training = saved.is_some();
        g.ops.push(Op::NormFwd { mode, training, x: xu, scale: su, bias: bu, eps: eu, y: yu, mean: mu, inv_var: vu });
        let mut ptrs = vec![(xu, dptr(x)?), (su, dptr(scale)?), (yu, dptr(y)?)];
        if let (Some(u), Some(b)) = (bu, bias) {
            ptrs.push((u, dptr(b)?));
        }
        if let (Some(u), Some(m)) = (mu, saved.and_then(|s| s.mean)) {
            ptrs.push((u, dptr(m)?));
        }
        if let (Some(u), Some(s)) = (vu, saved) {
            ptrs.push((u, dptr(s.inv_var)?));
        }
        self.run_graph(g, rec, ptrs, Some((eu, n.epsilon)), "norm_forward")
    }

    /// Row normalization backward: `dx`, `dscale` and (layer norm) `dbias` from the forward
    /// op's input `x`, `scale` and saved `stats`, and `dy`. The parameter gradients are
    /// overwritten (summed over the rows).
    #[allow(clippy::too_many_arguments)]
    pub fn norm_backward<T: DnnElement>(
        &mut self,
        n: &RowNorm,
        x: &GpuRef<T>,
        dy: &GpuRef<T>,
        scale: &GpuRef<f32>,
        stats: &NormStats<'_>,
        dx: &GpuRef<T>,
        dscale: &GpuRef<f32>,
        dbias: Option<&GpuRef<f32>>,
    ) -> Result<Completion<()>> {
        let len = n.check()?;
        for (arg, buf) in [("x", x), ("dy", dy), ("dx", dx)] {
            validate::covers(arg, buf, Some(len), &format!("a {} x {} matrix", n.rows, n.cols))?;
        }
        validate::covers("scale", scale, Some(n.cols), "one value per column")?;
        validate::covers("dscale", dscale, Some(n.cols), "one value per column")?;
        match (n.kind, dbias) {
            (NormKind::Layer, None) => return Err(Error::invalid("dbias", "layer norm's backward writes dbias")),
            (NormKind::Rms, Some(_)) => return Err(Error::invalid("dbias", "RMS norm has no bias")),
            (_, Some(b)) => validate::covers("dbias", b, Some(n.cols), "one value per column")?,
            _ => {}
        }
        n.check_stats(stats)?;
        let mut uses = vec![
            ("x", x.id(), false),
            ("dy", dy.id(), false),
            ("scale", scale.id(), false),
            ("stats.inv_var", stats.inv_var.id(), false),
            ("dx", dx.id(), true),
            ("dscale", dscale.id(), true),
        ];
        if let Some(m) = stats.mean {
            uses.push(("stats.mean", m.id(), false));
        }
        if let Some(b) = dbias {
            uses.push(("dbias", b.id(), true));
        }
        no_aliasing(&uses)?;
        let mut rec = self.op.recorder("norm_backward");
        for (arg, buf) in [("x", x), ("dy", dy)] {
            record(&mut rec, arg, buf, Access::Read)?;
        }
        record(&mut rec, "scale", scale, Access::Read)?;
        if let Some(m) = stats.mean {
            record(&mut rec, "stats.mean", m, Access::Read)?;
        }
        record(&mut rec, "stats.inv_var", stats.inv_var, Access::Read)?;
        record(&mut rec, "dx", dx, Access::Write)?;
        record(&mut rec, "dscale", dscale, Access::Write)?;
        if let Some(b) = dbias {
            record(&mut rec, "dbias", b, Access::Write)?;
        }
        if self.op.device.is_simulated() {
            let job = SimNorm { n: *n, x: x.sim_data()?, scale: scale.sim_data()? };
            let (dyv, dxv, dsv) = (dy.sim_data()?, dx.sim_data()?, dscale.sim_data()?);
            let db = dbias.map(|b| b.sim_data()).transpose()?;
            let st = (stats.mean.map(|m| m.sim_data()).transpose()?, stats.inv_var.sim_data()?);
            return self.op.run_sim(rec, Vec::new(), move || job.backward(dyv, st, dxv, dsv, db));
        }
        let mut g = GraphSpec::default();
        let (xd, xs, pd, sd) = n.shapes();
        let (dt, mode) = (dt_of::<T>(), if n.kind == NormKind::Rms { NormMode::Rms } else { NormMode::Layer });
        let (xu, dyu, su) = (g.tensor(&xd, &xs, dt), g.tensor(&xd, &xs, dt), g.tensor(&pd, &xs, Dt::F32));
        let mu = stats.mean.map(|_| g.tensor(&sd, &[1, 1, 1, 1], Dt::F32));
        let vu = g.tensor(&sd, &[1, 1, 1, 1], Dt::F32);
        let (dxu, dsu) = (g.tensor(&xd, &xs, dt), g.tensor(&pd, &xs, Dt::F32));
        let dbu = dbias.map(|_| g.tensor(&pd, &xs, Dt::F32));
        g.ops.push(Op::NormBwd {
            mode,
            eps: None,
            x: xu,
            dy: dyu,
            scale: su,
            mean: mu,
            inv_var: vu,
            dx: dxu,
            dscale: dsu,
            dbias: dbu,
        });
        let mut ptrs = vec![
            (xu, dptr(x)?),
            (dyu, dptr(dy)?),
            (su, dptr(scale)?),
            (vu, dptr(stats.inv_var)?),
            (dxu, dptr(dx)?),
            (dsu, dptr(dscale)?),
        ];
        if let (Some(u), Some(m)) = (mu, stats.mean) {
            ptrs.push((u, dptr(m)?));
        }
        if let (Some(u), Some(b)) = (dbu, dbias) {
            ptrs.push((u, dptr(b)?));
        }
        self.run_graph(g, rec, ptrs, None, "norm_backward")
    }

    /// Finds or makes the plan of `g`, takes its workspace and executes it with `ptrs` and,
    /// when given, a by-value f32 scalar `(uid, value)`.
    pub(super) fn run_graph(
        &mut self,
        g: GraphSpec,
        mut rec: crate::recorder::LaunchRecorder,
        ptrs: Vec<(Uid, *mut c_void)>,
        scalar: Option<(Uid, f32)>,
        op: &'static str,
    ) -> Result<Completion<()>> {
        self.op.bound_stream()?;
        let Some(handle) = self.raw.as_ref() else { return Err(self.op.unavailable_on_sim()) };
        let plan = self.graphs.get_or_make(g, &self.op, |g| {
            // SAFETY: the handle is live, its context bound above; `&mut self` keeps it to
            // this thread.
            unsafe { g.plan(handle.get()) }?.ok_or_else(|| Error::Unsupported {
                library: NAME,
                what: format!("{op} of this shape and type"),
                hint: "no engine of this cuDNN supports the graph; try f16 or bf16 data".into(),
            })
        })?;
        let work = self.work.use_on(&self.op, &mut rec, plan.work_bytes)?.map(|b| b.raw_device_ptr()).transpose()?;
        self.op.run(rec, Vec::new(), || {
            let mut ptrs = ptrs;
            if let Some((uid, value)) = &scalar {
                ptrs.push((*uid, value as *const f32 as *mut c_void));
            }
            let work = work.map_or(std::ptr::null_mut(), |w| w as *mut c_void);
            // SAFETY: (1) the handle made the plan, was bound to this stream when made, and the
            // op path made its context current; (2) every tensor of the graph in memory has its
            // buffer here, validated against its shape and fenced by preflight, and the scalar
            // points at a live f32 of this op's frame when given; (3) the workspace, declared read-write, holds
            // the plan's need and serves one op at a time.
            unsafe { plan.execute(handle.get(), &ptrs, work) }
        })
    }
}

/// The simulator's row normalization, in f64.
struct SimNorm<T: DnnElement> {
    n: RowNorm,
    x: SimMem<T>,
    scale: SimMem<f32>,
}

type Stats = (Option<SimMem<f32>>, SimMem<f32>);

impl<T: DnnElement> SimNorm<T> {
    /// Each row's mean (0 for RMS norm) and inverse deviation.
    fn stats(&self, x: &[f64]) -> Vec<(f64, f64)> {
        let (c, eps) = (self.n.cols, f64::from(self.n.epsilon));
        x.chunks(c)
            .take(self.n.rows)
            .map(|row| {
                let mean = if self.n.kind == NormKind::Rms { 0.0 } else { row.iter().sum::<f64>() / c as f64 };
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
                (mean, 1.0 / (var + eps).sqrt())
            })
            .collect()
    }

    fn forward(self, bias: Option<SimMem<f32>>, y: SimMem<T>, saved: Option<Stats>) {
        let x: Vec<f64> = self.x.read().iter().map(|v| v.to_f64()).collect();
        let scale: Vec<f64> = self.scale.read().iter().map(|&v| f64::from(v)).collect();
        let bias: Option<Vec<f64>> = bias.map(|b| b.read().iter().map(|&v| f64::from(v)).collect());
        let st = self.stats(&x);
        let c = self.n.cols;
        let mut dst = y.lock();
        for (r, &(mean, inv)) in st.iter().enumerate() {
            for j in 0..c {
                let b = bias.as_ref().map_or(0.0, |b| b[j]);
                dst[r * c + j] = T::from_f64((x[r * c + j] - mean) * inv * scale[j] + b);
            }
        }
        if let Some((m, v)) = saved {
            if let Some(m) = m {
                let mut m = m.lock();
                for (r, s) in st.iter().enumerate() {
                    m[r] = s.0 as f32;
                }
            }
            let mut v = v.lock();
            for (r, s) in st.iter().enumerate() {
                v[r] = s.1 as f32;
            }
        }
    }

    fn backward(self, dy: SimMem<T>, saved: Stats, dx: SimMem<T>, dscale: SimMem<f32>, dbias: Option<SimMem<f32>>) {
        let x: Vec<f64> = self.x.read().iter().map(|v| v.to_f64()).collect();
        let dyv: Vec<f64> = dy.read().iter().map(|v| v.to_f64()).collect();
        let scale: Vec<f64> = self.scale.read().iter().map(|&v| f64::from(v)).collect();
        let inv: Vec<f64> = saved.1.read().iter().map(|&v| f64::from(v)).collect();
        let mean: Vec<f64> = match &saved.0 {
            Some(m) => m.read().iter().map(|&v| f64::from(v)).collect(),
            None => vec![0.0; self.n.rows],
        };
        let (c, layer) = (self.n.cols, self.n.kind == NormKind::Layer);
        let (mut ds, mut db) = (vec![0.0; c], vec![0.0; c]);
        let mut out = vec![0.0; self.n.rows * c];
        for r in 0..self.n.rows {
            let xhat: Vec<f64> = (0..c).map(|j| (x[r * c + j] - mean[r]) * inv[r]).collect();
            let g: Vec<f64> = (0..c).map(|j| dyv[r * c + j] * scale[j]).collect();
            let mg = if layer { g.iter().sum::<f64>() / c as f64 } else { 0.0 };
            let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / c as f64;
            for j in 0..c {
                out[r * c + j] = inv[r] * (g[j] - mg - xhat[j] * mgx);
                ds[j] += dyv[r * c + j] * xhat[j];
                db[j] += dyv[r * c + j];
            }
        }
        let mut d = dx.lock();
        for (o, v) in d.iter_mut().zip(&out) {
            *o = T::from_f64(*v);
        }
        let mut s = dscale.lock();
        for (o, v) in s.iter_mut().zip(&ds) {
            *o = *v as f32;
        }
        if let Some(b) = dbias {
            let mut b = b.lock();
            for (o, v) in b.iter_mut().zip(&db) {
                *o = *v as f32;
            }
        }
    }
}
