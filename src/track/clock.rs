//! Vector clocks over the streams of one device.

use smallvec::SmallVec;

/// A point on one stream's timeline: the `seq`-th commit on stream index `stream`.
/// Sequence numbers start at 1; 0 means "nothing".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Pos {
    pub stream: u32,
    pub seq: u64,
}

/// `clock[t]` is the highest commit of stream `t` known to have happened before this point.
/// Inline for up to eight streams, which covers most programs without a heap allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clock(SmallVec<[u64; 8]>);

impl Clock {
    /// The highest covered commit of stream `t` (0 when none).
    pub(crate) fn get(&self, t: u32) -> u64 {
        self.0.get(t as usize).copied().unwrap_or(0)
    }

    /// Sets stream `t`'s entry, growing the clock if needed.
    pub(crate) fn set(&mut self, t: u32, seq: u64) {
        let i = t as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = seq;
    }

    /// Whether `pos` happened before (or is) the point this clock describes.
    pub(crate) fn covers(&self, pos: Pos) -> bool {
        self.get(pos.stream) >= pos.seq
    }

    /// Makes this clock equal to `other`, reusing its storage (a plain copy: `clone_from`'s
    /// generic extend costs several times more for the few entries a clock has).
    pub(crate) fn copy_from(&mut self, other: &Clock) {
        if self.0.len() != other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        self.0.copy_from_slice(&other.0);
    }

    /// Element-wise maximum: afterwards this clock covers everything `other` covered.
    pub(crate) fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine = (*mine).max(*theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(stream: u32, seq: u64) -> Pos {
        Pos { stream, seq }
    }

    #[test]
    fn covers_earlier_positions_of_the_same_stream() {
        let mut c = Clock::default();
        c.set(2, 5);
        assert!(c.covers(pos(2, 5)));
        assert!(c.covers(pos(2, 1)));
        assert!(!c.covers(pos(2, 6)));
        assert!(!c.covers(pos(0, 1)));
        assert!(c.covers(pos(7, 0)), "seq 0 is the empty prefix, always covered");
    }

    #[test]
    fn join_is_transitive_coverage() {
        // Stream 1 waited on (0, 3); stream 2 then waited on stream 1's (1, 4).
        let mut s1 = Clock::default();
        s1.set(0, 3);
        s1.set(1, 4);
        let mut s2 = Clock::default();
        s2.set(2, 9);
        s2.join(&s1);
        assert!(s2.covers(pos(0, 3)), "covers what the event it waited on covered");
        assert!(s2.covers(pos(0, 2)));
        assert!(s2.covers(pos(1, 4)));
        assert!(!s2.covers(pos(0, 4)));
        assert_eq!(s2.get(2), 9, "its own entry survives the join");
    }

    #[test]
    fn join_grows_and_is_idempotent() {
        let mut a = Clock::default();
        a.set(0, 1);
        let mut b = Clock::default();
        b.set(11, 2);
        a.join(&b);
        let once = a.clone();
        a.join(&b);
        assert_eq!(a, once);
        assert_eq!(a.get(11), 2);
    }

    #[test]
    fn copy_from_makes_an_equal_clock_longer_or_shorter() {
        let mut long = Clock::default();
        long.set(5, 7);
        let mut short = Clock::default();
        short.set(1, 3);
        let mut c = short.clone();
        c.copy_from(&long);
        assert_eq!(c, long);
        c.copy_from(&short);
        assert_eq!(c, short, "entries past the shorter clock must go");
    }
}
