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
//!
//! A cached state that can be brought up to date with some of its inputs (a triangular solve's
//! analysis takes new values, not a new structure) asks which inputs were
//! [`written`](SameInputs::written) instead, and after bringing it up to date, under the same
//! marks, notes the positions anew ([`note_again`](SameInputs::note_again)).

use crate::error::{Error, Result};
use crate::memory::{Element, GpuRef};
use crate::track::Pos;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An input: its argument name, how to read its last write's position, and its buffer's name
/// (read only for an error, so that a launch that finds nothing written allocates nothing).
struct Input {
    arg: &'static str,
    at: Box<dyn Fn() -> Option<Pos> + Send + Sync>,
    name: Box<dyn Fn() -> String + Send + Sync>,
}

/// What [`Error::InputChanged`] says of a write between an op's count and its fill.
const BETWEEN_PHASES: &str = "was written by another launch after the op counted it and before it filled its output sized from that count; order that write before or after the op (wait for one of them, or run both on one stream or lane), or retry the op";

/// The inputs of one op of several launches and the positions its first launch saw (or, after
/// [`note_again`](SameInputs::note_again), the last launch that brought the op's state up to
/// date).
pub(super) struct SameInputs {
    op: &'static str,
    inputs: Vec<Input>,
    seen: Mutex<Option<Vec<Option<Pos>>>>,
    /// What the error says happened, and what to do.
    what: &'static str,
}

impl SameInputs {
    /// The inputs of op `op` on `device`, none yet; closes the device's solo mode (see the
    /// module docs), before the first launch is admitted.
    pub(super) fn new(op: &'static str, device: &crate::device::Device) -> Self {
        device.shared.close_solo();
        SameInputs { op, inputs: Vec::new(), seen: Mutex::new(None), what: BETWEEN_PHASES }
    }

    /// Adds `buf`, argument `arg`, to the inputs every launch must see unchanged.
    pub(super) fn input<T: Element>(mut self, arg: &'static str, buf: &GpuRef<T>) -> Self {
        let (at, named) = (buf.clone(), buf.clone());
        self.inputs.push(Input {
            arg,
            at: Box::new(move || at.track().last_write_pos()),
            name: Box::new(move || named.track().name()),
        });
        self
    }

    /// Has [`Error::InputChanged`] say `what` (when the input was written, and what to do)
    /// instead of naming a write between the op's phases.
    pub(super) fn saying(mut self, what: &'static str) -> Self {
        self.what = what;
        self
    }

    /// The positions noted, in the order the inputs were added (none before the first launch
    /// noted them).
    pub(super) fn noted(&self) -> Option<Vec<Option<Pos>>> {
        self.seen().clone()
    }

    /// Notes the first `first.len()` inputs at `first` (the positions an earlier op's first
    /// launch noted for the same buffers) and the others at their last writes now: for a plan
    /// whose later calls must see the inputs its setup saw and the arrays its setup wrote. Read
    /// the latter only while no other thread can write them (arrays the setup made, not yet
    /// handed out). Keeps positions noted before, as [`note`](Self::note) does.
    pub(super) fn note_with(&self, first: &[Option<Pos>]) {
        let rest = self.inputs.iter().skip(first.len()).map(|input| (input.at)());
        self.seen().get_or_insert_with(|| first.iter().copied().chain(rest).collect());
    }

    /// In the first launch, while it holds its marks: notes the inputs' last writes. Only the
    /// first note counts: a later one keeps the positions the first launch saw. Never fails; a
    /// `Result` to sit beside [`check`](Self::check) in the launches' closures.
    pub(super) fn note(&self) -> Result<()> {
        let mut seen = self.seen();
        if seen.is_none() {
            *seen = Some(self.positions());
        }
        Ok(())
    }

    /// In a launch that brings the op's state up to date with the inputs as they are now, while
    /// it holds its marks (so that no write commits between this and the update's enqueue):
    /// notes the inputs' last writes in place of the positions noted before.
    pub(super) fn note_again(&self) {
        *self.seen() = Some(self.positions());
    }

    /// In a later launch, while it holds its marks: [`Error::InputChanged`] naming the first
    /// input whose last write is not the one noted (all of them, if none were noted).
    pub(super) fn check(&self) -> Result<()> {
        self.written().refuse()
    }

    /// In a later launch, while it holds its marks: the inputs whose last write is not the one
    /// noted (all of them, if none were noted).
    pub(super) fn written(&self) -> Written {
        let seen = self.seen();
        let mut written = Written { args: Vec::new(), refusal: None };
        for (i, input) in self.inputs.iter().enumerate() {
            if seen.as_ref().and_then(|s| s.get(i)) != Some(&(input.at)()) {
                written.args.push(input.arg);
                if written.refusal.is_none() {
                    let buffer = (input.name)();
                    written.refusal =
                        Some(Error::InputChanged { op: self.op, arg: input.arg, buffer, what: self.what });
                }
            }
        }
        written
    }

    /// The inputs' last writes now, in the order they were added.
    fn positions(&self) -> Vec<Option<Pos>> {
        self.inputs.iter().map(|input| (input.at)()).collect()
    }

    /// The noted positions, under their lock. A panic while it was held left whole positions
    /// or none (each store is one assignment), so a poisoned lock is taken over.
    fn seen(&self) -> MutexGuard<'_, Option<Vec<Option<Pos>>>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The inputs a later launch found written since the positions noted.
pub(super) struct Written {
    /// Their argument names, in the order the inputs were added.
    args: Vec<&'static str>,
    /// [`Error::InputChanged`] naming the first of them; `None` when none was written.
    refusal: Option<Error>,
}

impl Written {
    /// Whether no input was written.
    pub(super) fn none(&self) -> bool {
        self.args.is_empty()
    }

    /// Whether some input was written, and each one written is among `args`.
    pub(super) fn only(&self, args: &[&str]) -> bool {
        !self.args.is_empty() && self.args.iter().all(|a| args.contains(a))
    }

    /// `Ok` when no input was written, else [`Error::InputChanged`] naming the first one.
    pub(super) fn refuse(self) -> Result<()> {
        self.refusal.map_or(Ok(()), Err)
    }
}
