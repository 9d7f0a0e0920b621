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
//!
//! A reusable plan has the same shape across calls: its setup sizes buffers (and makes arrays)
//! from its inputs' structure, and each later compute must see that structure. The plan keeps
//! a [`SameInputs`] whose positions are the setup's ([`note_with`](SameInputs::note_with)),
//! and each compute [`check`](SameInputs::check)s them under its marks.

use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::track::Pos;
use std::sync::OnceLock;

/// An input's argument name and how to read its last write's position.
type Input = (&'static str, Box<dyn Fn() -> (Option<Pos>, String) + Send + Sync>);

/// What [`Error::InputChanged`] says of a write between an op's count and its fill.
const BETWEEN_PHASES: &str = "was written by another launch after the op counted it and before it filled its output sized from that count; order that write before or after the op (wait for one of them, or run both on one stream or lane), or retry the op";

/// The inputs of one op of several launches and the positions its first launch saw.
pub(super) struct SameInputs {
    op: &'static str,
    inputs: Vec<Input>,
    seen: OnceLock<Vec<Option<Pos>>>,
    /// What the error says happened, and what to do.
    what: &'static str,
}

impl SameInputs {
    /// The inputs of op `op` on `device`, none yet; closes the device's solo mode (see the
    /// module docs), before the first launch is admitted.
    pub(super) fn new(op: &'static str, device: &crate::device::Device) -> Self {
        device.shared.close_solo();
        SameInputs { op, inputs: Vec::new(), seen: OnceLock::new(), what: BETWEEN_PHASES }
    }

    /// Adds `buf`, argument `arg`, to the inputs every launch must see unchanged.
    pub(super) fn input<T: Element>(mut self, arg: &'static str, buf: &GpuRef<T>) -> Self {
        let buf = buf.clone();
        self.inputs.push((arg, Box::new(move || (buf.track().last_write_pos(), buf.track().name()))));
        self
    }

    /// Has [`Error::InputChanged`] say `what` (when the input was written, and what to do)
    /// instead of naming a write between the op's phases.
    pub(super) fn saying(mut self, what: &'static str) -> Self {
        self.what = what;
        self
    }

    /// The positions the first launch noted, in the order the inputs were added (none before
    /// it noted them).
    pub(super) fn noted(&self) -> Option<&[Option<Pos>]> {
        self.seen.get().map(Vec::as_slice)
    }

    /// Notes the first `first.len()` inputs at `first` (the positions an earlier op's first
    /// launch noted for the same buffers) and the others at their last writes now: for a plan
    /// whose later calls must see the inputs its setup saw and the arrays its setup wrote. Read
    /// the latter only while no other thread can write them (arrays the setup made, not yet
    /// handed out).
    pub(super) fn note_with(&self, first: &[Option<Pos>]) {
        let rest = self.inputs.iter().skip(first.len()).map(|(_, at)| at().0);
        let _ = self.seen.set(first.iter().copied().chain(rest).collect());
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
                return Err(Error::InputChanged { op: self.op, arg, buffer: name, what: self.what });
            }
        }
        Ok(())
    }
}
