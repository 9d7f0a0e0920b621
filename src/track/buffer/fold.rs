//! The fold of a committed use into a buffer's state: a write replaces the last write and
//! clears the reads; a read replaces its stream's entry when newer.

use super::marks::State;
use crate::track::{Access, EventRef};

/// Folds a committed use into the state. `in_commit_order` keeps `reads` ordered by commit
/// (newest last), for the checker's `FenceMutation::LatestReaderOnly`.
#[inline]
pub(super) fn fold(st: &mut State, access: Access, ev: &EventRef, in_commit_order: bool) {
    use crate::track::plan::FencePoint;
    if access.writes() {
        st.last_write = Some(ev.clone());
        if !st.reads.is_empty() {
            st.reads.clear();
        }
        return;
    }
    // Two reads on one stream can commit out of sequence order when two threads share the
    // stream; keep the newer, which covers the older by stream order.
    let pos = ev.pos();
    let Some(i) = st.reads.iter().position(|r| r.pos().stream == pos.stream) else {
        st.reads.push(ev.clone());
        return;
    };
    if st.reads[i].pos().seq >= pos.seq {
        return;
    }
    if in_commit_order {
        st.reads.remove(i);
        st.reads.push(ev.clone());
    } else {
        st.reads[i] = ev.clone();
    }
}
