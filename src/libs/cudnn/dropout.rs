//! Dropout: random-number states kept on the device ([`Dropout`]), a forward op that draws a
//! mask from them and keeps it in a reserve buffer, and a backward op that applies the same
//! mask.
//!
//! The states are a tracked buffer like any other: seeding them is an op that writes them,
//! each forward op reads and advances them (two forward ops on one state are ordered, on any
//! stream), and the backward op reads them. Two states seeded alike draw the same masks in the
//! same order. The simulator's generator is not cuDNN's: its masks are as random, not equal.

use super::calls::{self, DropoutCall};
use super::tensor::{DnnElement, Shape, TensorView};
use super::{sim, Cudnn};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::libs::{dptr, record, validate};
use crate::memory::GpuRef;
use crate::track::Access;

/// Dropout's random-number states on the device, with the probability and seed they were made
/// for. Made by [`Cudnn::dropout`]; usable on any stream of its device.
#[derive(Clone, Debug)]
pub struct Dropout {
    states: GpuRef<u8>,
    probability: f32,
    seed: u64,
}

/// Bytes of the simulator's states: the seed and a counter of forward ops.
pub(super) const SIM_STATES: usize = 16;

impl Dropout {
    /// The probability that an element is dropped.
    pub fn probability(&self) -> f32 {
        self.probability
    }

    /// The seed the states were made from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The states' buffer (declared on every dropout op).
    pub fn states(&self) -> &GpuRef<u8> {
        &self.states
    }
}

impl Cudnn {
    /// Makes dropout states for `probability` (in `[0, 1)`) seeded with `seed`: allocates them
    /// on this stream and seeds them there, as an op that writes them.
    pub fn dropout(&mut self, probability: f32, seed: u64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&probability) {
            return Err(Error::invalid("probability", format!("{probability} is not in [0, 1)")));
        }
        let bytes = match &self.raw {
            Some(h) => {
                self.op.bound_stream()?;
                calls::dropout_states_bytes(h)?
            }
            None => SIM_STATES,
        };
        let states = self.op.device.alloc_zeros::<u8>(self.op.stream, bytes)?;
        let mut rec = self.op.recorder("dropout_init");
        record(&mut rec, "states", &states, Access::Write)?;
        if self.op.device.is_simulated() {
            let mem = states.sim_data()?;
            self.op.run_sim(rec, Vec::new(), move || sim::dropout_init(&mem, seed))?;
        } else {
            let handle = self.handle()?;
            let ptr = dptr::<u8, std::ffi::c_void>(&states)?;
            self.op.run(rec, Vec::new(), || {
                // SAFETY: (1) the handle was bound to this stream when made, and the op path made
                // its context current; (2) `states` holds the bytes cuDNN asked for and was
                // fenced as written by preflight.
                unsafe { calls::dropout(handle, probability, seed, ptr, bytes, DropoutCall::Init) }
            })?;
        }
        Ok(Dropout { states, probability, seed })
    }

    /// Bytes of the reserve buffer dropout of a `T` tensor of `shape` needs (it holds the mask
    /// from the forward op to the backward one).
    pub fn dropout_reserve_bytes<T: DnnElement>(&self, shape: &Shape) -> Result<usize> {
        let n = shape.check("shape")?;
        if self.op.device.is_simulated() {
            return Ok(n);
        }
        self.op.bound_stream()?;
        calls::dropout_reserve_bytes(shape, super::tensor::dtype::<T>())
    }

    /// Dropout forward: each element of `x` dropped with the states' probability `p`, the
    /// others scaled by `1 / (1 - p)`, into `y` (`x`'s shape); the mask kept in `reserve`
    /// ([`dropout_reserve_bytes`](Self::dropout_reserve_bytes) long). Advances the states.
    /// f32 and f16: cuDNN's dropout refuses bf16, which is
    /// [`Error::Unsupported`](crate::Error::Unsupported) before anything is recorded.
    pub fn dropout_forward<T: DnnElement>(
        &mut self,
        d: &Dropout,
        x: &TensorView<'_, T>,
        y: &TensorView<'_, T>,
        reserve: &GpuRef<u8>,
    ) -> Result<Completion<()>> {
        self.dropout_op(d, x, y, reserve, true)
    }

    /// Dropout backward: `dx = dy * mask / (1 - p)`, the mask the forward op kept in `reserve`,
    /// with the same states. `dx` has `dy`'s shape.
    pub fn dropout_backward<T: DnnElement>(
        &mut self,
        d: &Dropout,
        dy: &TensorView<'_, T>,
        dx: &TensorView<'_, T>,
        reserve: &GpuRef<u8>,
    ) -> Result<Completion<()>> {
        self.dropout_op(d, dy, dx, reserve, false)
    }

    /// Checks, records and runs a dropout op from `input` to `output`.
    fn dropout_op<T: DnnElement>(
        &mut self,
        d: &Dropout,
        input: &TensorView<'_, T>,
        output: &TensorView<'_, T>,
        reserve: &GpuRef<u8>,
        forward: bool,
    ) -> Result<Completion<()>> {
        let (inn, outn) = if forward { ("x", "y") } else { ("dy", "dx") };
        // Refused here, on the simulator too, as cuDNN refuses it (`CUDNN_STATUS_NOT_SUPPORTED`).
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<half::bf16>() {
            return Err(Error::Unsupported {
                library: super::NAME,
                what: format!("dropout of a bf16 tensor {:?}", input.shape.dims()),
                hint: "cuDNN's dropout takes f32 and f16 tensors: convert to one of them".into(),
            });
        }
        input.check(inn)?;
        output.check(outn)?;
        if output.shape != input.shape {
            return Err(Error::invalid(
                outn,
                format!(
                    "is {:?} {:?}; it must be `{inn}`'s {:?}",
                    output.shape.layout(),
                    output.shape.dims(),
                    input.shape.dims()
                ),
            ));
        }
        if output.buf.id() == input.buf.id() {
            return Err(Error::invalid(outn, format!("must not be the same buffer as `{inn}`")));
        }
        let need = self.dropout_reserve_bytes::<T>(&input.shape)?;
        validate::covers("reserve", reserve, Some(need), &format!("the mask of {:?}", input.shape.dims()))?;
        let need_states = match &self.raw {
            Some(h) => calls::dropout_states_bytes(h)?,
            None => SIM_STATES,
        };
        validate::covers("dropout", &d.states, Some(need_states), "this device's dropout states")?;
        let mut rec = self.op.recorder(if forward { "dropout_forward" } else { "dropout_backward" });
        record(&mut rec, inn, input.buf, Access::Read)?;
        record(&mut rec, outn, output.buf, Access::Write)?;
        record(&mut rec, "dropout", &d.states, if forward { Access::ReadWrite } else { Access::Read })?;
        record(&mut rec, "reserve", reserve, if forward { Access::Write } else { Access::Read })?;
        let (p, seed, shape) = (d.probability, d.seed, input.shape.clone());
        if self.op.device.is_simulated() {
            let job = sim::Dropout {
                p,
                count: need,
                states: d.states.sim_data()?,
                input: input.buf.sim_data()?,
                output: output.buf.sim_data()?,
                reserve: reserve.sim_data()?,
                forward,
            };
            return self.op.run_sim(rec, Vec::new(), move || job.run());
        }
        let handle = self.handle()?;
        let (states, states_bytes) = (dptr::<u8, std::ffi::c_void>(&d.states)?, d.states.len());
        let (a, b, r) =
            (dptr::<T, std::ffi::c_void>(input.buf)?, dptr::<T, std::ffi::c_void>(output.buf)?, dptr(reserve)?);
        let dtype = super::tensor::dtype::<T>();
        let call = if forward {
            DropoutCall::Forward { shape, dtype, x: a, y: b, reserve: r, reserve_bytes: need }
        } else {
            DropoutCall::Backward { shape, dtype, dy: a, dx: b, reserve: r, reserve_bytes: need }
        };
        self.op.run(rec, Vec::new(), || {
            // SAFETY: (1) the handle was bound to this stream when made, and the op path made its
            // context current; (2) the states were seeded by `Cudnn::dropout` (an op ordered
            // before this one by their tracked write), the data buffers hold the checked shape
            // and are distinct, the reserve holds the bytes cuDNN asked for, all fenced by
            // preflight.
            unsafe { calls::dropout(handle, p, seed, states, states_bytes, call) }
        })
    }
}
