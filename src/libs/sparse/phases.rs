//! Ops of several launches with a host step between them: the first launch counts (blocks,
//! nonzeros, a product's entries), the host sizes the output from the count, and a later
//! launch fills it. Each launch is fenced on its own, so a write of an input that another
//! thread commits between them is ordered before the later launch, which would then fill the
//! output sized for the old contents with the new: the library writes past its end.
//!
//! [`SameInputs`] closes that gap. The first launch notes, while it holds its pending marks,
//! the position of every input's last write; every later launch compares them, while it holds
//! its own marks (no write can commit between the comparison and its enqueue), and refuses
//! with [`Error::InputChanged`] before enqueueing anything when one differs. Positions are
//! unique, so an equal one means no tracked write committed in between. Solo launches (see
//! `track::solo`) publish nothing to the buffers' states, so the op closes solo mode first:
//! from then on every launch of the device takes marks and publishes its writes. These ops
//! wait for the GPU on the host anyway, which costs far more than the marks do.

use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::track::Pos;
use std::sync::OnceLock;

/// An input's argument name and how to read its last write's position.
type Input = (&'static str, Box<dyn Fn() -> (Option<Pos>, String) + Send + Sync>);

/// The inputs of one op of several launches and the positions its first launch saw.
pub(super) struct SameInputs {
    op: &'static str,
    inputs: Vec<Input>,
    seen: OnceLock<Vec<Option<Pos>>>,
}

impl SameInputs {
    /// The inputs of op `op` on `device`, none yet; closes the device's solo mode (see the
    /// module docs), before the first launch is admitted.
    pub(super) fn new(op: &'static str, device: &crate::device::Device) -> Self {
        device.shared.close_solo();
        SameInputs { op, inputs: Vec::new(), seen: OnceLock::new() }
    }

    /// Adds `buf`, argument `arg`, to the inputs every launch must see unchanged.
    pub(super) fn input<T: Element>(mut self, arg: &'static str, buf: &GpuRef<T>) -> Self {
        let buf = buf.clone();
        self.inputs.push((arg, Box::new(move || (buf.track().last_write_pos(), buf.track().name()))));
        self
    }

    /// In the first launch, while it holds its marks: notes the inputs' last writes. Never
    /// fails; a `Result` to sit beside [`check`](Self::check) in the launches' closures.
    pub(super) fn note(&self) -> Result<()> {
        let _ = self.seen.set(self.inputs.iter().map(|(_, at)| at().0).collect());
        Ok(())
    }

    /// In a later launch, while it holds its marks: [`Error::InputChanged`] naming the first
    /// input whose last write is not the one the first launch noted (all of them, if the first
    /// launch noted none).
    pub(super) fn check(&self) -> Result<()> {
        let seen = self.seen.get();
        for (i, (arg, at)) in self.inputs.iter().enumerate() {
            let (now, name) = at();
            if seen.and_then(|s| s.get(i)) != Some(&now) {
                return Err(Error::InputChanged { op: self.op, arg, buffer: name });
            }
        }
        Ok(())
    }
}
