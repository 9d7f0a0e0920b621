//! Fence planning as a pure function: which events must a stream wait on before a launch?

use super::{Clock, Pos};
use smallvec::SmallVec;

/// Something a stream can wait on: a position and the clock it carries.
pub(crate) trait FencePoint {
    fn pos(&self) -> Pos;
    fn clock(&self) -> &Clock;
}

/// The minimal set of `candidates` that stream `stream`, whose clock is `covered`, must wait on
/// so that every candidate happens before its next launch.
///
/// 1. Candidates on `stream` itself are already ordered by stream order.
/// 2. Candidates the stream's clock covers were waited on already, directly or transitively.
/// 3. Of the rest, one that another remaining candidate's clock covers is implied by waiting on
///    that other one. Coverage between distinct events is antisymmetric, so the maximal
///    elements always remain and together they cover every candidate.
pub(crate) fn plan_waits<'a, F: FencePoint>(stream: u32, covered: &Clock, candidates: &'a [F]) -> SmallVec<[&'a F; 4]> {
    let mut open: SmallVec<[&F; 4]> = SmallVec::new();
    for c in candidates {
        let p = c.pos();
        if p.stream == stream || covered.covers(p) || open.iter().any(|o| o.pos() == p) {
            continue;
        }
        open.push(c);
    }
    let keep: SmallVec<[bool; 4]> = open
        .iter()
        .map(|c| {
            let p = c.pos();
            !open.iter().any(|d| d.pos() != p && d.clock().covers(p))
        })
        .collect();
    open.into_iter().zip(keep).filter_map(|(c, k)| k.then_some(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Point(Pos, Clock);
    impl FencePoint for Point {
        fn pos(&self) -> Pos {
            self.0
        }
        fn clock(&self) -> &Clock {
            &self.1
        }
    }

    fn point(stream: u32, seq: u64, covers: &[(u32, u64)]) -> Point {
        let mut c = Clock::default();
        c.set(stream, seq);
        for &(t, k) in covers {
            c.set(t, k);
        }
        Point(Pos { stream, seq }, c)
    }

    fn planned(stream: u32, covered: &Clock, cands: &[Point]) -> Vec<Pos> {
        plan_waits(stream, covered, cands).iter().map(|p| p.0).collect()
    }

    #[test]
    fn same_stream_needs_no_wait() {
        let cands = [point(1, 4, &[])];
        assert!(planned(1, &Clock::default(), &cands).is_empty());
    }

    #[test]
    fn covered_candidate_needs_no_wait() {
        let mut mine = Clock::default();
        mine.set(0, 7);
        let cands = [point(0, 5, &[])];
        assert!(planned(2, &mine, &cands).is_empty());
    }

    #[test]
    fn candidate_implied_by_another_is_dropped() {
        // (1,3) waited on (0,2): waiting on (1,3) covers (0,2).
        let cands = [point(0, 2, &[]), point(1, 3, &[(0, 2)])];
        assert_eq!(planned(2, &Clock::default(), &cands), vec![Pos { stream: 1, seq: 3 }]);
    }

    #[test]
    fn independent_candidates_all_kept_and_duplicates_merged() {
        let cands = [point(0, 2, &[]), point(1, 3, &[]), point(0, 2, &[])];
        let got = planned(2, &Clock::default(), &cands);
        assert_eq!(got, vec![Pos { stream: 0, seq: 2 }, Pos { stream: 1, seq: 3 }]);
    }

    #[test]
    fn later_event_of_one_stream_implies_earlier() {
        let cands = [point(0, 2, &[]), point(0, 5, &[])];
        assert_eq!(planned(3, &Clock::default(), &cands), vec![Pos { stream: 0, seq: 5 }]);
    }
}
