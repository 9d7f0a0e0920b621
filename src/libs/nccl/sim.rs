//! The simulator's communicators: the ranks of one communicator share a [`Clique`], where
//! their simulated kernels meet. A collective is a round, numbered by each rank's own
//! sequence of collectives (NCCL's rule: every rank issues the same collectives in the same
//! order): each rank's kernel brings its input, the last to arrive computes every rank's
//! output, and each rank's kernel takes its own and writes it, on its own stream. Point-to-point
//! messages are letters in a mailbox per (sender, receiver) pair: a send posts its data and
//! returns, a receive waits for the next letter, so that grouped sends and receives never wait
//! for each other in a cycle. Every wait is bounded by the communicator's timeout.

use super::{CommConfig, UniqueId};
use crate::error::{CollectiveFault, Error, Result};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A type-erased rank input or output.
pub(super) type AnyBox = Box<dyn Any + Send>;
/// What the last rank to arrive computes: every rank's output from every rank's input.
pub(super) type Compute = Box<dyn FnOnce(Vec<AnyBox>) -> Result<Vec<AnyBox>> + Send>;

/// The ranks of one simulated communicator.
pub(super) struct Clique {
    pub nranks: usize,
    timeout: Duration,
    state: Mutex<CliqueState>,
    cv: Condvar,
}

#[derive(Default)]
struct CliqueState {
    joined: usize,
    rounds: HashMap<u64, Round>,
    mail: HashMap<(usize, usize), VecDeque<AnyBox>>,
    shrunk: HashMap<Vec<usize>, Arc<Clique>>,
}

struct Round {
    /// What the first rank called: the others must call the same.
    sig: String,
    inputs: Vec<Option<AnyBox>>,
    arrived: usize,
    outputs: Option<Vec<Option<AnyBox>>>,
    error: Option<Error>,
    taken: usize,
}

/// Communicators being made from a simulated id, until every rank has joined.
static JOINING: Mutex<Option<HashMap<UniqueId, Arc<Clique>>>> = Mutex::new(None);

impl Clique {
    pub(super) fn new(nranks: usize, timeout: Duration) -> Arc<Clique> {
        let state = CliqueState { joined: nranks, ..Default::default() };
        Arc::new(Clique { nranks, timeout, state: Mutex::new(state), cv: Condvar::new() })
    }

    /// Joins the communicator of `id`, waiting (up to the init timeout) for all `nranks`.
    pub(super) fn join(id: &UniqueId, nranks: usize, config: &CommConfig) -> Result<Arc<Clique>> {
        let clique = {
            let mut joining = crate::sync::lock_unranked(&JOINING);
            let map = joining.get_or_insert_with(HashMap::new);
            let c = map.entry(*id).or_insert_with(|| {
                let c = Clique::new(nranks, config.timeout);
                crate::sync::lock_unranked(&c.state).joined = 0;
                c
            });
            if c.nranks != nranks {
                return Err(Error::invalid("nranks", format!("{nranks}, but another rank made it with {}", c.nranks)));
            }
            let c = c.clone();
            let mut st = crate::sync::lock_unranked(&c.state);
            st.joined += 1;
            if st.joined == nranks {
                map.remove(id);
                c.cv.notify_all();
            }
            drop(st);
            c
        };
        let give_up = Instant::now() + config.init_timeout;
        let mut st = clique.lock();
        while st.joined < nranks {
            st = clique.wait_until(st, give_up).ok_or_else(|| Error::Collective {
                call: "Communicator::init_rank",
                fault: CollectiveFault::Timeout,
                detail: "not every rank joined within the init timeout".into(),
            })?;
        }
        drop(st);
        Ok(clique)
    }

    fn lock(&self) -> MutexGuard<'_, CliqueState> {
        crate::sync::lock_unranked(&self.state)
    }

    /// Waits on the clique until notified or `give_up`; `None` once past it.
    fn wait_until<'a>(&self, st: MutexGuard<'a, CliqueState>, give_up: Instant) -> Option<MutexGuard<'a, CliqueState>> {
        let left = give_up.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        // Woken at least every few milliseconds, to see a rank's abort.
        let slice = left.min(Duration::from_millis(20));
        Some(self.cv.wait_timeout(st, slice).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0))
    }

    /// Rank `rank`'s part in collective round `seq`: brings `input`, computes every output
    /// with `compute` if it arrives last, and returns its own output.
    pub(super) fn meet(&self, me: &SimRank, seq: u64, sig: String, input: AnyBox, compute: Compute) -> Result<AnyBox> {
        let give_up = Instant::now() + self.timeout;
        let mut st = self.lock();
        let n = self.nranks;
        let round = st.rounds.entry(seq).or_insert_with(|| Round {
            sig: sig.clone(),
            inputs: (0..n).map(|_| None).collect(),
            arrived: 0,
            outputs: None,
            error: None,
            taken: 0,
        });
        if round.sig != sig && round.error.is_none() {
            round.error = Some(usage(format!("rank {} called {sig}, another rank {}", me.rank, round.sig)));
        }
        round.inputs[me.rank] = Some(input);
        round.arrived += 1;
        if round.arrived == n && round.error.is_none() {
            let inputs = round.inputs.iter_mut().map(|i| i.take()).collect::<Option<Vec<_>>>();
            drop(st);
            let outputs = inputs.ok_or_else(|| usage("a rank arrived twice".into())).and_then(compute);
            st = self.lock();
            if let Some(round) = st.rounds.get_mut(&seq) {
                match outputs {
                    Ok(o) => round.outputs = Some(o.into_iter().map(Some).collect()),
                    Err(e) => round.error = Some(e),
                }
            }
            self.cv.notify_all();
        }
        self.take_output(st, me, seq, give_up)
    }

    fn take_output(
        &self,
        mut st: MutexGuard<'_, CliqueState>,
        me: &SimRank,
        seq: u64,
        give_up: Instant,
    ) -> Result<AnyBox> {
        loop {
            let Some(round) = st.rounds.get_mut(&seq) else {
                return Err(usage("the round ended before this rank took its part".into()));
            };
            let out = match (&round.error, round.outputs.as_mut()) {
                (Some(e), _) => Some(Err(e.clone())),
                (None, Some(outs)) => outs[me.rank].take().map(Ok),
                (None, None) => None,
            };
            if let Some(out) = out {
                round.taken += 1;
                // Kept until every rank has come: one that comes after another gave up must
                // find the round's error, not start the round anew.
                if round.taken == self.nranks {
                    st.rounds.remove(&seq);
                }
                return out;
            }
            if let Some(e) = me.fault() {
                return Err(e);
            }
            match self.wait_until(st, give_up) {
                Some(g) => st = g,
                None => return Err(self.give_up(me, seq)),
            }
        }
    }

    /// This rank stops waiting for round `seq`: the round fails for the ranks still to come,
    /// and the rank's communicator is aborted (as NCCL's would be by its watchdog).
    fn give_up(&self, me: &SimRank, seq: u64) -> Error {
        let timeout = Error::Collective {
            call: "the communicator's watchdog",
            fault: CollectiveFault::Timeout,
            detail: format!("rank {} waited {:?} for the other ranks", me.rank, self.timeout),
        };
        let mut st = self.lock();
        if let Some(round) = st.rounds.get_mut(&seq) {
            round.error.get_or_insert(Error::Collective {
                call: "nccl",
                fault: CollectiveFault::Remote,
                detail: format!("rank {} gave up on this collective", me.rank),
            });
            round.taken += 1;
        }
        drop(st);
        me.set_fault(timeout.clone());
        timeout
    }

    /// Posts a letter from `from` to `to`.
    pub(super) fn post(&self, from: usize, to: usize, letter: AnyBox) {
        self.lock().mail.entry((from, to)).or_default().push_back(letter);
        self.cv.notify_all();
    }

    /// Takes the next letter from `from` to `me`, waiting for it.
    pub(super) fn take(&self, me: &SimRank, from: usize) -> Result<AnyBox> {
        let give_up = Instant::now() + self.timeout;
        let mut st = self.lock();
        loop {
            if let Some(letter) = st.mail.get_mut(&(from, me.rank)).and_then(VecDeque::pop_front) {
                return Ok(letter);
            }
            if let Some(e) = me.fault() {
                return Err(e);
            }
            match self.wait_until(st, give_up) {
                Some(g) => st = g,
                None => {
                    let e = Error::Collective {
                        call: "the communicator's watchdog",
                        fault: CollectiveFault::Timeout,
                        detail: format!("rank {} waited {:?} for a message from rank {from}", me.rank, self.timeout),
                    };
                    me.set_fault(e.clone());
                    return Err(e);
                }
            }
        }
    }
}

fn usage(detail: String) -> Error {
    Error::Collective { call: "nccl", fault: CollectiveFault::InvalidUsage, detail }
}

/// One rank of a simulated communicator.
pub(super) struct SimRank {
    pub clique: Arc<Clique>,
    pub rank: usize,
    seq: AtomicU64,
    fault: Mutex<Option<Error>>,
}

impl SimRank {
    pub(super) fn new(clique: Arc<Clique>, rank: usize) -> SimRank {
        SimRank { clique, rank, seq: AtomicU64::new(0), fault: Mutex::new(None) }
    }

    /// The next collective's round number.
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn fault(&self) -> Option<Error> {
        crate::sync::lock_unranked(&self.fault).clone()
    }

    fn set_fault(&self, e: Error) {
        crate::sync::lock_unranked(&self.fault).get_or_insert(e);
    }

    /// Aborts this rank: its waiting kernels stop with `fault`, later ops fail at once.
    pub(super) fn abort(&self, fault: Error) {
        self.set_fault(fault);
        self.clique.cv.notify_all();
    }

    /// The clique of the ranks left once `exclude` (sorted, distinct) is out: one per list,
    /// whichever rank asks first makes it.
    pub(super) fn shrunk(&self, exclude: &[usize], left: usize) -> Result<Arc<Clique>> {
        if let Some(e) = self.fault() {
            return Err(e);
        }
        let mut st = self.clique.lock();
        let c = st.shrunk.entry(exclude.to_vec()).or_insert_with(|| Clique::new(left, self.clique.timeout));
        Ok(c.clone())
    }
}
