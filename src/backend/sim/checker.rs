//! The simulator's happens-before checker (see the parent module's docs), and the names it
//! reports hazards with.
//!
//! # Names
//!
//! A hazard found on a stream thread knows only buffer ids and positions. The names the
//! program gave travel with each kernel: while a launch of the crate enqueues on a simulated
//! device, the enqueuing thread holds an [`Origin`] in a thread-local ([`naming`]) with the
//! op's name, its lane and the labels of the buffers it declared, and every simulated kernel
//! enqueued then carries it. The checker keeps each use's origin beside its position, and each
//! buffer's newest label, so that both uses of a hazard are named.

use crate::access::Access;
use crate::hazard::{Hazard, HazardKind, OpOrigin, SimOp};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Where a simulated kernel came from, and the labels of the buffers its launch declared.
#[derive(Default, Debug)]
pub(crate) struct Origin {
    pub(crate) op: OpOrigin,
    pub(crate) labels: SmallVec<[(u64, Arc<str>); 2]>,
}

/// An op's name as the recorder holds it: no copy is made unless a simulated kernel is
/// enqueued under it.
pub(crate) enum OpText {
    Static(&'static str),
    Shared(Arc<str>),
}

/// The launch a thread is enqueuing: its names as given, and the [`Origin`] made from them
/// once a kernel needs it (the op path itself allocates nothing for names).
struct Enqueuing {
    library: &'static str,
    op: OpText,
    lane: Option<Arc<str>>,
    labels: SmallVec<[(u64, Arc<str>); 2]>,
    built: Option<Arc<Origin>>,
}

thread_local! {
    /// The launch this thread is enqueuing on a simulated device, if any.
    static ENQUEUING: RefCell<Option<Enqueuing>> = const { RefCell::new(None) };
}

/// Names the simulated kernels this thread enqueues until the guard drops; restores the
/// enclosing launch's names then (a launch made inside another's enqueue).
#[must_use]
pub(crate) struct Naming(Option<Enqueuing>);

/// Starts naming this thread's simulated kernels: op `op` of `library`, on `lane`, with the
/// labels of the launch's buffers.
pub(crate) fn naming(
    library: &'static str,
    op: OpText,
    lane: Option<Arc<str>>,
    labels: SmallVec<[(u64, Arc<str>); 2]>,
) -> Naming {
    let now = Enqueuing { library, op, lane, labels, built: None };
    // A launch from a thread-local's destructor may find this one gone: its kernels go unnamed.
    Naming(ENQUEUING.try_with(|e| e.try_borrow_mut().ok().and_then(|mut e| e.replace(now))).ok().flatten())
}

impl Drop for Naming {
    fn drop(&mut self) {
        let previous = self.0.take();
        // A guard dropped while the thread-local is torn down has nothing to restore.
        let _ = ENQUEUING.try_with(|e| e.try_borrow_mut().map(|mut e| *e = previous));
    }
}

/// An op's name as hazards show it (see [`crate::hazard::op_name`]).
fn kernel_name(library: &str, op: &OpText) -> Arc<str> {
    let op = match op {
        OpText::Static(s) => s,
        OpText::Shared(s) => &**s,
    };
    crate::hazard::op_name(library, op)
}

/// The names of the launch this thread is enqueuing, for a kernel it enqueues now.
pub(super) fn current_origin() -> Option<Arc<Origin>> {
    ENQUEUING
        .try_with(|e| {
            let mut e = e.try_borrow_mut().ok()?;
            let e = e.as_mut()?;
            let built = e.built.get_or_insert_with(|| {
                let op = OpOrigin { kernel: Some(kernel_name(e.library, &e.op)), lane: e.lane.clone() };
                Arc::new(Origin { op, labels: e.labels.clone() })
            });
            Some(built.clone())
        })
        .ok()
        .flatten()
}

/// A use the checker remembers: its position and where it came from.
#[derive(Clone)]
struct Seen {
    op: SimOp,
    origin: Option<Arc<Origin>>,
}

impl Seen {
    fn origin(&self) -> OpOrigin {
        self.origin.as_ref().map(|o| o.op.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
struct History {
    last_write: Option<Seen>,
    reads: Vec<Seen>,
    /// The newest label a launch using the buffer carried.
    label: Option<Arc<str>>,
}

/// The machine's checker state: every buffer's history and the hazards found.
#[derive(Default)]
pub(super) struct Checker {
    histories: HashMap<u64, History>,
    pub(super) hazards: Vec<Hazard>,
    pub(super) kernels: u64,
}

pub(super) type Vc = Vec<u64>;

fn covers(vc: &Vc, op: SimOp) -> bool {
    vc.get(op.stream as usize).copied().unwrap_or(0) >= op.op
}

impl Checker {
    /// Checks kernel `me` (clock `vc`, names `origin`) against each declared use's history and
    /// records its uses; returns the hazards found.
    pub(super) fn check(
        &mut self,
        me: SimOp,
        vc: &Vc,
        uses: &[(u64, Access)],
        origin: Option<&Arc<Origin>>,
    ) -> Vec<Hazard> {
        self.kernels += 1;
        let mut found = Vec::new();
        let mine = Seen { op: me, origin: origin.cloned() };
        for &(buffer, access) in uses {
            let h = self.histories.entry(buffer).or_default();
            if let Some((_, l)) = origin.and_then(|o| o.labels.iter().find(|(b, _)| *b == buffer)) {
                h.label = Some(l.clone());
            }
            let mut flag = |kind, earlier: &Seen| {
                if !covers(vc, earlier.op) {
                    found.push(Hazard {
                        buffer,
                        label: h.label.clone(),
                        kind,
                        earlier: earlier.op,
                        later: me,
                        earlier_origin: earlier.origin(),
                        later_origin: mine.origin(),
                        access,
                    });
                }
            };
            if let Some(w) = &h.last_write {
                flag(if access.writes() { HazardKind::WriteAfterWrite } else { HazardKind::ReadAfterWrite }, w);
            }
            if access.writes() {
                for r in &h.reads {
                    flag(HazardKind::WriteAfterRead, r);
                }
                h.last_write = Some(mine.clone());
                h.reads.clear();
            } else {
                h.reads.retain(|r| r.op.stream != me.stream);
                h.reads.push(mine.clone());
            }
        }
        self.hazards.extend(found.iter().cloned());
        found
    }

    /// Records an undeclared access found while kernel `op` ran.
    pub(super) fn undeclared(
        &mut self,
        op: SimOp,
        origin: Option<&Arc<Origin>>,
        buffer: u64,
        access: Access,
    ) -> Hazard {
        let label = origin
            .and_then(|o| o.labels.iter().find(|(b, _)| *b == buffer).map(|(_, l)| l.clone()))
            .or_else(|| self.histories.get(&buffer).and_then(|h| h.label.clone()));
        let names = origin.map(|o| o.op.clone()).unwrap_or_default();
        let hazard = Hazard {
            buffer,
            label,
            kind: HazardKind::Undeclared,
            earlier: op,
            later: op,
            earlier_origin: names.clone(),
            later_origin: names,
            access,
        };
        self.hazards.push(hazard.clone());
        hazard
    }
}

/// The kernel a simulated stream thread is running, for [`kernel_access`].
pub(super) struct Running {
    pub(super) shared: Arc<super::SimShared>,
    pub(super) op: SimOp,
    pub(super) uses: SmallVec<[(u64, Access); 4]>,
    pub(super) origin: Option<Arc<Origin>>,
    /// Undeclared (buffer, wrote) pairs already reported, so a kernel that touches a buffer
    /// in a loop reports it once.
    reported: SmallVec<[(u64, bool); 2]>,
    /// The hazards its accesses caused, for the stream to hand to its next event.
    pub(super) found: Vec<Hazard>,
}

thread_local! {
    static RUNNING: RefCell<Option<Running>> = const { RefCell::new(None) };
}

impl Running {
    /// Publishes the kernel about to run on this stream thread.
    pub(super) fn enter(
        shared: Arc<super::SimShared>,
        op: SimOp,
        uses: SmallVec<[(u64, Access); 4]>,
        origin: Option<Arc<Origin>>,
    ) {
        let running = Running { shared, op, uses, origin, reported: SmallVec::new(), found: Vec::new() };
        // Stream threads are the simulator's own and never run user thread-local destructors,
        // but a thread-local torn down must not panic here either.
        let _ = RUNNING.try_with(|r| r.try_borrow_mut().map(|mut r| *r = Some(running)));
    }

    /// The kernel has returned: the hazards its accesses caused.
    pub(super) fn leave() -> Vec<Hazard> {
        RUNNING
            .try_with(|r| r.try_borrow_mut().ok().and_then(|mut r| r.take()))
            .ok()
            .flatten()
            .map(|r| r.found)
            .unwrap_or_default()
    }
}

/// Reports an actual access to simulated buffer `buffer`. Inside a simulated kernel, an access
/// its recorder did not declare is an [`HazardKind::Undeclared`] hazard; a read is covered by
/// any declared use, since a declared write is fenced at least as strictly as a read. Outside
/// any kernel (host code) it is not a kernel access and is ignored.
pub(crate) fn kernel_access(buffer: u64, access: Access) {
    let _ = RUNNING.try_with(|r| {
        // A guard dropped while the thread-local is being torn down, or a re-entrant access
        // from within this function, has no kernel to blame.
        let Ok(mut r) = r.try_borrow_mut() else { return };
        let Some(k) = r.as_mut() else { return };
        let declared = k.uses.iter().find(|(b, _)| *b == buffer).map(|&(_, a)| a);
        if declared.is_some_and(|d| d.writes() || !access.writes()) {
            return;
        }
        let key = (buffer, access.writes());
        if k.reported.contains(&key) {
            return;
        }
        k.reported.push(key);
        let access = if access.writes() { Access::Write } else { Access::Read };
        let hazard = k.shared.undeclared(k.op, k.origin.as_ref(), buffer, access);
        k.found.push(hazard);
    });
}
