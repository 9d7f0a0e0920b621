//! FP8 attention forward: the graph of cuDNN's FP8 flash-attention engine (Hopper and later),
//! Q, K, V and O in E4M3 or E5M2 with the per-tensor scaling factors of FP8 training (as
//! Transformer Engine keeps them): the scores are computed from the descaled inputs, the
//! probabilities are scaled into FP8 for the second matmul, and the output is descaled and
//! scaled into O's FP8 range; the amax of the probabilities and of the output are written for
//! the next step's scales.

use super::builder::Dt;
use super::sdpa::{check_options, check_shapes, sim_job, stats_len};
use super::{Attention, AttnTensor};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::cudnn::tensor::sealed::Sealed;
use crate::libs::cudnn::{Cudnn, NAME};
use crate::libs::validate;
use crate::memory::{Element, GpuRef, F8E4M3, F8E5M2};

/// The FP8 element types attention takes: [`F8E4M3`] and [`F8E5M2`] (every tensor of one op
/// has the same type).
pub trait AttnFp8: Element + Sealed + fp8_seal::Sealed {}
impl AttnFp8 for F8E4M3 {}
impl AttnFp8 for F8E5M2 {}

mod fp8_seal {
    pub trait Sealed {}
    impl Sealed for super::F8E4M3 {}
    impl Sealed for super::F8E5M2 {}
}

/// The graph's type of `T`.
fn fp8_dt<T: AttnFp8>() -> Dt {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<F8E4M3>() {
        Dt::Fp8E4m3
    } else {
        Dt::Fp8E5m2
    }
}

/// The scaling factors of an FP8 attention, each one f32 on the device (`[1, 1, 1, 1]`): the
/// descales multiply a stored FP8 value back to its real value (the inverse of the scale it
/// was stored with), the scales multiply a real value into the FP8 range, and the amax
/// outputs receive the largest absolute value of the probabilities and of the output before
/// their scaling.
#[derive(Clone, Copy, Debug)]
pub struct Fp8Attention<'a> {
    /// Q's descale (read).
    pub descale_q: &'a GpuRef<f32>,
    /// K's descale (read).
    pub descale_k: &'a GpuRef<f32>,
    /// V's descale (read).
    pub descale_v: &'a GpuRef<f32>,
    /// The probabilities' descale, applied after the second matmul (read; usually `1 / scale_s`).
    pub descale_s: &'a GpuRef<f32>,
    /// The probabilities' scale into FP8 before the second matmul (read).
    pub scale_s: &'a GpuRef<f32>,
    /// O's scale into FP8 (read).
    pub scale_o: &'a GpuRef<f32>,
    /// The largest absolute probability, before `scale_s` (written).
    pub amax_s: &'a GpuRef<f32>,
    /// The largest absolute output, before `scale_o` (written).
    pub amax_o: &'a GpuRef<f32>,
}

impl<'a> Fp8Attention<'a> {
    /// Every operand with its name and whether the op writes it, in the graph's order.
    pub(crate) fn operands(&self) -> [(&'static str, &'a GpuRef<f32>, bool); 8] {
        [
            ("descale_q", self.descale_q, false),
            ("descale_k", self.descale_k, false),
            ("descale_v", self.descale_v, false),
            ("descale_s", self.descale_s, false),
            ("scale_s", self.scale_s, false),
            ("scale_o", self.scale_o, false),
            ("amax_s", self.amax_s, true),
            ("amax_o", self.amax_o, true),
        ]
    }
}

impl Cudnn {
    /// FP8 scaled dot-product attention forward (cuDNN's FP8 flash-attention engine, sm_90 and
    /// later): `o = fp8(scale_o · descale_s · descale_v · (fp8(scale_s · P) · v))` with
    /// `P = softmax(descale_q · descale_k · q·kᵀ · scale + mask)`, and the amax of `P` and of
    /// the output before `scale_o` written to `fp8.amax_s` and `fp8.amax_o`. Shapes and options
    /// as [`sdpa_forward`](Self::sdpa_forward) (causal and padding masks, grouped-query heads,
    /// the row statistics); head dims must be multiples of 16. On the simulator it is computed
    /// in f64 with the probabilities rounded to FP8 as the engine rounds them.
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_forward_fp8<T: AttnFp8>(
        &mut self,
        attn: &Attention<'_>,
        q: &AttnTensor<'_, T>,
        k: &AttnTensor<'_, T>,
        v: &AttnTensor<'_, T>,
        o: &AttnTensor<'_, T>,
        fp8: &Fp8Attention<'_>,
        stats: Option<&GpuRef<f32>>,
    ) -> Result<Completion<()>> {
        let z = check_shapes(q, k, v, o)?;
        if z.d % 16 != 0 {
            return Err(Error::Unsupported {
                library: NAME,
                what: format!("FP8 attention with head dim {}", z.d),
                hint: "cuDNN's FP8 attention takes head dims that are multiples of 16: pad the head dim".into(),
            });
        }
        check_options(attn, &z)?;
        if let Some(st) = stats {
            validate::covers(
                "stats",
                st,
                stats_len(&z),
                &format!("[{}, {}, {}, 1] f32 row statistics", z.b, z.h, z.s_q),
            )?;
        }
        for (arg, buf, _) in fp8.operands() {
            validate::covers(arg, buf, Some(1), "one f32 value")?;
        }
        let rec = self.forward_recorder(attn, [q, k, v, o], stats, Some(fp8))?;
        let scale = attn.scale.unwrap_or(1.0 / (z.d as f32).sqrt());
        if self.op.device.is_simulated() {
            let job = sim_job(attn, &z, f64::from(scale), [q, k, v])?;
            let out = (o.strides, o.buf.sim_data()?);
            let scales = fp8.operands().into_iter().map(|(_, b, _)| b.sim_data()).collect::<Result<Vec<_>>>()?;
            let st = stats.map(|s| s.sim_data()).transpose()?;
            return self.op.run_sim(rec, Vec::new(), move || job.forward_fp8(out, scales, st));
        }
        self.run_forward(rec, attn, &z, fp8_dt::<T>(), [q, k, v, o], stats, Some(fp8))
    }
}
