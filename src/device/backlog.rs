//! Traced ops that return no completion (user recorder launches, uploads, copies): their
//! completion hooks, run in batches.
//!
//! Giving each such op a completion of its own would allocate shared state, send a
//! registration to the completion thread and have that thread query (on a one-stream device
//! first record) one event per op, on the op path of every traced launch. Instead each op's
//! ticket waits in its stream's backlog, and the completion thread watches one event per
//! stream at a time, the newest in the backlog when the watch starts: one stream's work
//! finishes in order, so once the GPU has passed that event, every ticket at or before its
//! position is done. Hooks may so run a little after the GPU finished the op (at most one
//! watch later), which they allow: they only promise to run after it. The completion thread
//! queries a backlog's event once a millisecond at most (`LAZY_POLL` of the completion thread):
//! queries made while other threads enqueue contend with them inside the driver.

use super::DeviceShared;
use crate::completion_thread::Pending;
use crate::error::Result;
use crate::trace::TraceTicket;
use crate::track::EventRef;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One traced op waiting for the GPU: its position's sequence number on the stream. Only the
/// stream's newest event is kept (in [`StreamBacklog::newest`]): holding each op's event would
/// keep the stream from refilling its recent events in place and fill the device's event slab
/// while the hooks wait.
struct Waiting {
    seq: u64,
    ticket: TraceTicket,
}

struct StreamBacklog {
    /// The stream's process-wide index (the `stream` of its positions).
    stream: u32,
    /// In commit order, except that two threads sharing a stream can hand their ops in out of
    /// sequence order: everything is selected by position, never by place.
    waiting: Vec<Waiting>,
    /// The event of the highest position handed in while anything waits: it covers every
    /// waiting op, so it is what the next watch watches.
    newest: Option<EventRef>,
    /// The completion thread watches an event of this stream for the backlog.
    watching: bool,
    /// The stream's one watch, registered again for each event watched (never twice at once).
    watch: Arc<Watch>,
    /// An empty list with room, swapped in for `waiting` when a watch takes it: the two lists
    /// go back and forth between the enqueuing threads and the completion thread, so steady
    /// state allocates (and frees across threads) nothing.
    spare: Vec<Waiting>,
}

/// The device's backlog of traced ops without a completion, per stream.
#[derive(Default)]
pub(crate) struct Backlog {
    streams: Mutex<Vec<StreamBacklog>>,
}

/// What the completion thread watches for one stream's backlog: the GPU passing the event at
/// `seq`.
struct Watch {
    /// The device whose tracer holds the backlog (weak: the backlog holds this watch).
    device: Weak<DeviceShared>,
    stream: u32,
    /// The sequence number of the watched event's position; set under the backlog's lock
    /// before each registration.
    seq: AtomicU64,
    /// The context epoch of the watched event, set with `seq`: a failed query is classified
    /// for it.
    epoch: AtomicU64,
}

impl Backlog {
    /// Hands `ticket`'s completion hooks to the backlog: they run once the GPU has passed
    /// `event`. Watches `event` if nothing of its stream is watched yet.
    pub(crate) fn defer(device: &Arc<DeviceShared>, event: EventRef, ticket: TraceTicket) {
        let pos = event.pos();
        let start = {
            let mut streams = crate::sync::lock(&device.backlog.streams);
            let i = match streams.iter().position(|s| s.stream == pos.stream) {
                Some(i) => i,
                None => {
                    let watch = Arc::new(Watch {
                        device: Arc::downgrade(device),
                        stream: pos.stream,
                        seq: AtomicU64::new(0),
                        epoch: AtomicU64::new(0),
                    });
                    streams.push(StreamBacklog {
                        stream: pos.stream,
                        waiting: Vec::new(),
                        newest: None,
                        watching: false,
                        watch,
                        spare: Vec::new(),
                    });
                    streams.len() - 1
                }
            };
            let s = &mut streams[i];
            s.waiting.push(Waiting { seq: pos.seq, ticket });
            let start = (!s.watching).then(|| {
                s.watching = true;
                s.watch.seq.store(pos.seq, Ordering::Relaxed);
                s.watch.epoch.store(event.epoch(), Ordering::Relaxed);
                (s.watch.clone(), event.clone())
            });
            if s.newest.as_ref().is_none_or(|newest| newest.pos().seq < pos.seq) {
                s.newest = Some(event);
            }
            start
        };
        if let Some((watch, event)) = start {
            watch.register(device, event);
        }
    }

    /// Takes the tickets of `stream` at or before `seq` (all of them with `None`), in sequence
    /// order, and the watch to register again with the event to watch next, if anything is
    /// left. Hand the emptied list back with [`recycle`](Self::recycle).
    ///
    /// Threads enqueueing on the stream hand tickets in under the same lock meanwhile, so it is
    /// held only to swap lists: the tickets are sorted out between the two short holds. Nobody
    /// else takes from this stream meanwhile (its one watch is with the caller), and `watching`
    /// stays set, so no one starts a second watch.
    fn take(&self, stream: u32, seq: Option<u64>) -> (Vec<Waiting>, Option<(Arc<Watch>, EventRef)>) {
        let mut all = {
            let mut streams = crate::sync::lock(&self.streams);
            let Some(s) = streams.iter_mut().find(|s| s.stream == stream) else { return (Vec::new(), None) };
            let spare = std::mem::take(&mut s.spare);
            std::mem::replace(&mut s.waiting, spare)
        };
        // Positions of one stream are unique: an unstable sort (which allocates nothing) is
        // exact.
        all.sort_unstable_by_key(|w| w.seq);
        let done = all.partition_point(|w| seq.is_none_or(|seq| w.seq <= seq));
        let mut streams = crate::sync::lock(&self.streams);
        let Some(s) = streams.iter_mut().find(|s| s.stream == stream) else {
            all.truncate(done);
            return (all, None);
        };
        // Whatever still waits lies after `seq`, and the newest event covers all of it.
        s.waiting.extend(all.drain(done..));
        let next = if s.waiting.is_empty() {
            s.newest = None;
            None
        } else {
            s.newest.clone()
        };
        s.watching = next.is_some();
        let next = next.map(|ev| {
            s.watch.seq.store(ev.pos().seq, Ordering::Relaxed);
            s.watch.epoch.store(ev.epoch(), Ordering::Relaxed);
            (s.watch.clone(), ev)
        });
        drop(streams);
        (all, next)
    }

    /// Keeps `list` (emptied) as the stream's spare, if it has more room than the one there.
    fn recycle(&self, stream: u32, list: Vec<Waiting>) {
        debug_assert!(list.is_empty());
        let mut streams = crate::sync::lock(&self.streams);
        if let Some(s) = streams.iter_mut().find(|s| s.stream == stream) {
            if list.capacity() > s.spare.capacity() {
                s.spare = list;
            }
        }
    }

    /// Runs the hooks of the tickets of `stream` at or before `seq` (all with `None`), in
    /// commit order, outside the lock; returns the watch and the event to watch next.
    fn complete(&self, stream: u32, seq: Option<u64>, gpu_ok: bool) -> Option<(Arc<Watch>, EventRef)> {
        let (mut done, next) = self.take(stream, seq);
        for w in done.drain(..) {
            let t = w.ticket;
            crate::sync::guarded("a KernelTrace completion hook", move || {
                let span = t.completing(gpu_ok);
                t.completed(span);
            });
        }
        self.recycle(stream, done);
        next
    }
}

impl Watch {
    /// Hands the watch to the completion thread. Once the device has shut down there is none:
    /// the caller then waits for the GPU itself, as a refused completion does.
    fn register(self: Arc<Self>, device: &DeviceShared, event: EventRef) {
        let job: Arc<dyn Pending> = self.clone();
        let Err((_, mut event, _)) = device.completions().register(event.pos().stream, event, job) else { return };
        // Each round takes every ticket up to the event it waited for; what other threads added
        // meanwhile (nobody else watches while this does) is the next round's.
        loop {
            let outcome = event.synchronize();
            match self.step(device, outcome) {
                Some((_, next)) => event = next,
                None => return,
            }
        }
    }

    /// Runs the hooks of every ticket at or before the watched event; returns this watch and
    /// the event it watches next, if any is left. A failed query is classified first, as a
    /// completion's is: a sticky fault poisons (and rebuilds) the context now, not at the next
    /// op.
    fn step(&self, device: &DeviceShared, outcome: Result<()>) -> Option<(Arc<Watch>, EventRef)> {
        let seq = self.seq.load(Ordering::Relaxed);
        let gpu_ok = match outcome {
            Ok(()) => true,
            Err(e) => {
                let e = device.classify(e, self.epoch.load(Ordering::Relaxed));
                log::debug!("cusched: traced ops of stream {} end with an error: {e}", self.stream);
                false
            }
        };
        device.backlog.complete(self.stream, Some(seq), gpu_ok)
    }
}

impl Pending for Watch {
    fn resolve(&self, outcome: Result<()>) {
        let Some(device) = self.device.upgrade() else { return };
        if let Some((watch, event)) = self.step(&device, outcome) {
            watch.register(&device, event);
        }
    }

    fn resolve_then(&self, outcome: Result<()>) -> Option<EventRef> {
        let device = self.device.upgrade()?;
        self.step(&device, outcome).map(|(_, event)| event)
    }

    fn expire(&self, _waited: Duration) {
        // Hooks wait for the GPU however long it takes: nothing is resolved early.
    }

    fn prompt(&self) -> bool {
        false
    }

    fn abandon(&self, _waited: Duration) {
        // Shutdown gave up on the GPU: nothing of this stream will be watched again.
        let Some(device) = self.device.upgrade() else { return };
        device.backlog.complete(self.stream, None, false);
    }
}
