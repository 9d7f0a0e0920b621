//! How a launch is admitted onto its stream, decided once at its preflight: a typed
//! [`Admission`] whose strategy owns what the launch holds until its commit, how the commit
//! ends it, and (through the strategy's own preflight) what it waits for.
//!
//! - **Marked** (`marked`): a pending mark on every buffer; a conflicting preflight elsewhere
//!   waits for the commit, which publishes the launch's event to the buffers.
//! - **Solo** (`solo`, `track::solo`): on a device that has run tracked work on one stream
//!   only, a closure-form launch of fresh device memory holds no buffer; it is counted in
//!   flight on its stream, and stream order orders it.
//! - **Recording** (`recording`): on a stream lent to a graph recording, the launch's work
//!   becomes nodes of the graph after the recorded ops it conflicts with; nothing is marked,
//!   fenced or run.

use super::{release, LaunchRecorder, Reserved, Use};
use crate::device::{Device, DeviceShared};
use crate::error::Result;
use crate::track::order::Stamp;
use crate::track::{CommitAt, EventRef, HeldHere, HolderId, StreamSlot};

/// Which strategies a preflight may choose from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Choice {
    /// Any: the closure form, committed on the thread that preflights it, may go solo.
    Any,
    /// Marks only: a hand-paired launch may be committed on another thread, so a close of solo
    /// mode could not tell whether the closing thread holds it (see `track::solo`); and a
    /// preflight again after a rebuild takes them too.
    MarkedOnly,
}

/// How a launch was admitted onto its stream.
pub(super) enum Admission {
    /// Pending marks on every buffer, taken by `holder`.
    Marked {
        /// Who holds the marks (the thread, or its lane job).
        holder: HolderId,
        /// The lane job making the launch, which its buffers remember for the check of
        /// submit order (`track::order`); [`Stamp::NONE`] outside jobs.
        stamp: Stamp,
    },
    /// A solo launch (see `track::solo`): no mark, counted in flight on its stream, whose
    /// lists its uses under this number until the commit.
    Solo {
        /// The launch's number on its stream.
        ticket: u64,
    },
    /// Recorded into a graph (see `recording`): the recording's turn is held until the
    /// commit, which ends the op's capture instead of recording an event.
    Recording {
        /// The recording.
        build: std::sync::Arc<super::recording::GraphBuild>,
    },
}

/// What one pass over a launch's uses finds: whether it may go solo, and which of the marked
/// preflight's checks it may skip.
#[derive(Clone, Copy)]
pub(super) struct Survey {
    /// Every handle is still of its device's generation (which may have advanced since the uses
    /// were recorded), no declared lane job reserved any of them, and the caller is not in a
    /// lane job: there is nothing to do before marks are taken.
    pub nothing_before_marks: bool,
    /// Every buffer is of the device's context as of `device_epoch` (buffers of other devices
    /// come only with peers, which take the full check): a fence returning that same context
    /// clears them all at once.
    pub of_device_context: bool,
    /// Every use is device memory, which a solo launch may leave out of the buffer states
    /// (pinned host memory's states are read by the host).
    pub device_memory: bool,
    /// The device's context epoch, read before the uses were looked at.
    pub device_epoch: u64,
    /// Every buffer of another device (with peers) is of the stream's backend, and its
    /// device's solo floor is known to need nothing more on this stream (see
    /// `StreamSlot::covers_peer_floor`): the marked preflight's peer checks have nothing to do.
    pub peers_settled: bool,
}

impl Survey {
    /// Looks at `uses` once, for a launch on `slot`; `peers`: the launch accepts buffers of
    /// other devices.
    #[inline(always)]
    fn of(uses: &[Use], shared: &DeviceShared, slot: &StreamSlot, peers: bool) -> Survey {
        let device_epoch = shared.epoch();
        let mut survey = Survey {
            nothing_before_marks: crate::track::reservation::outside_lane_jobs(),
            of_device_context: !peers,
            device_memory: true,
            device_epoch,
            peers_settled: true,
        };
        for u in uses {
            let t = u.track();
            survey.nothing_before_marks &= t.is_fresh() & t.reservations.is_empty();
            survey.of_device_context &= t.epoch == device_epoch;
            survey.device_memory &= t.device_memory;
            let other = &t.device;
            if peers && other.uid != shared.uid {
                survey.peers_settled &=
                    other.is_simulated() == shared.is_simulated() && slot.covers_peer_floor(other.uid);
            }
        }
        survey
    }
}

/// The strategy a preflight chose, before it is admitted.
enum Strategy {
    Solo,
    Marked,
}

impl LaunchRecorder {
    /// The preflight: decides once how the launch is admitted and admits it, checking the
    /// uses, waiting out what it must follow and fencing the stream; on error nothing stays
    /// reserved. `rebuilt_from`: the context epoch the stream was of when an earlier attempt
    /// waited for its device's rebuild. The uses stay in place: the closure form borrows them
    /// until its commit, the hand-paired form moves them into its
    /// [`Preflighted`](super::Preflighted).
    pub(super) fn admit(&mut self, device: &Device, choice: Choice, rebuilt_from: Option<u64>) -> Result<Reserved> {
        let shared = &device.shared;
        let slot = shared.stream(self.stream)?;
        if let Some(lent) = slot.recording() {
            if !self.unrecorded {
                return self.admit_lent(device, slot, choice, lent);
            }
        } else if super::rebind::in_recording_closure() {
            return Err(eager_in_recording(self.stream));
        }
        // A stream that has seen the floor is past solo mode: one load of its own slot, so
        // that steady state with several streams never reads the device's solo state. (The
        // device's first launch claims its stream as the solo one here, whatever it uses.)
        let may_solo = choice == Choice::Any && !slot.floor_seen() && shared.solo.open_on(self.stream.index);
        let survey = Survey::of(&self.uses, shared, slot, self.peers);
        let strategy = if may_solo & survey.nothing_before_marks & survey.of_device_context & survey.device_memory {
            Strategy::Solo
        } else {
            Strategy::Marked
        };
        match strategy {
            // `None`: solo mode closed meanwhile, or the context moved: the marked way then.
            Strategy::Solo => match self.admit_solo(shared, slot, survey.device_epoch) {
                Some(admitted) => admitted,
                None => self.admit_marked(device, slot, survey, rebuilt_from),
            },
            Strategy::Marked => self.admit_marked(device, slot, survey, rebuilt_from),
        }
    }
}

impl LaunchRecorder {
    /// A launch on a stream lent to a graph recording is recorded; only the closure form can
    /// be, since a hand-paired launch may commit on another thread, after the recording.
    #[cold]
    #[inline(never)]
    fn admit_lent(
        &mut self,
        device: &Device,
        slot: &StreamSlot,
        choice: Choice,
        lent: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> Result<Reserved> {
        if choice != Choice::Any {
            return Err(crate::error::Error::Recording {
                what: format!("a hand-paired preflight on {}, which a graph recording holds", self.stream),
                hint: "record launches with LaunchRecorder::launch (or any op of the crate)",
            });
        }
        let lent = super::recording::LentTo::of(lent)?;
        self.admit_recording(device, slot, lent)
    }
}

impl Admission {
    /// Whether the launch is recorded into a graph rather than run.
    #[inline(always)]
    pub(super) fn is_recording(&self) -> bool {
        matches!(self, Admission::Recording { .. })
    }

    /// Marks the end of the launch's work on `slot` with an event, as the strategy commits:
    /// `None` once the stream has left context `at.epoch`.
    #[inline(always)]
    pub(super) fn record(&self, device: &DeviceShared, slot: &StreamSlot, at: CommitAt) -> Option<Result<EventRef>> {
        match *self {
            Admission::Marked { .. } => slot.commit_in(&device.events, at),
            Admission::Solo { ticket } => slot.commit_solo(&device.solo, &device.events, at, ticket),
            Admission::Recording { .. } => Some(Err(recorded_has_no_event())),
        }
    }

    /// For a commit whose caller hands no event out: ends a launch whose work needs none (a
    /// solo launch: stream order orders its work, and a later position covers it), with an
    /// error once the stream has left context `epoch`. `None` when the strategy needs the
    /// event anyway ([`record`](Self::record) then).
    #[inline(always)]
    pub(super) fn end_unrecorded(&self, device: &DeviceShared, slot: &StreamSlot, epoch: u64) -> Option<Result<()>> {
        match *self {
            Admission::Marked { .. } => None,
            Admission::Recording { .. } => Some(Err(recorded_has_no_event())),
            Admission::Solo { ticket } => Some(match slot.end_solo(&device.solo, &device.events, epoch, ticket) {
                true => Ok(()),
                false => Err(device.poison_since(epoch)),
            }),
        }
    }

    /// Hands the committed event `ev` to what the launch holds: every marked buffer folds it
    /// into its state and drops its mark; a solo launch holds none.
    #[inline(always)]
    pub(super) fn publish(&self, uses: &[Use], ev: &EventRef) {
        match *self {
            Admission::Marked { holder, stamp } => {
                for u in uses {
                    u.track().publish_stamped(u.access, holder, Some(ev), stamp);
                }
            }
            Admission::Solo { .. } | Admission::Recording { .. } => {}
        }
    }

    /// Lets go of what the launch holds without an event (its commit failed and the stream
    /// has drained): the marks; a solo launch's commit has taken it out of flight already.
    pub(super) fn release(&self, uses: &[Use]) {
        match *self {
            Admission::Marked { holder, .. } => release(uses, holder),
            Admission::Solo { .. } | Admission::Recording { .. } => {}
        }
    }

    /// Until the commit, for a closure-form launch on device `device`: notes a solo launch as
    /// held by this thread, so that a conflicting use on another stream from inside its
    /// enqueue fails rather than waits for itself. Marks carry their holder already.
    #[inline(always)]
    pub(super) fn hold_here(&self, device: u32) -> Option<HeldHere> {
        match *self {
            Admission::Marked { .. } | Admission::Recording { .. } => None,
            Admission::Solo { ticket } => Some(HeldHere::enter(device, ticket)),
        }
    }
}

/// A recorded launch ends through `Reserved::end_recorded`, never through an event: reaching
/// an event commit with one is a defect, reported rather than papered over.
#[cold]
fn recorded_has_no_event() -> crate::error::Error {
    crate::error::Error::Recording {
        what: "a recorded launch reached an event commit".into(),
        hint: "this is a defect of cusched; please report it",
    }
}

/// A launch on a stream no recording holds, made by a graph's recording closure.
#[cold]
fn eager_in_recording(stream: crate::device::StreamId) -> crate::error::Error {
    crate::error::Error::Recording {
        what: format!("an op on {stream}, which the recording does not hold, inside a graph's recording closure"),
        hint: "enqueue the closure's ops on Recording::stream or Recording::handles; do eager work before or after recording",
    }
}
