//! The buffer's last committed write as a position, for an op of several launches with a host
//! step between them: its later launches compare what they see with what its first saw.

use super::{BufferOwner, BufferTrack};
use crate::track::Pos;

impl<D: BufferOwner> BufferTrack<D> {
    /// The position of the last committed write the state holds (`None` when it holds none).
    /// Positions are unique (a stream's sequence numbers only grow), so two reads that return
    /// the same position saw no tracked write commit between them. Read under a launch's
    /// pending mark on the buffer, it is the write that launch follows, and none can commit
    /// until the mark is gone. Solo launches never reach the state (see `solo`): a caller that
    /// needs their writes too closes solo mode first.
    // Its one user is cuSPARSE's count-then-fill ops.
    #[cfg_attr(not(feature = "cusparse"), allow(dead_code))]
    pub(crate) fn last_write_pos(&self) -> Option<Pos> {
        crate::sync::lock(&self.state).last_write.as_ref().map(|ev| ev.pos())
    }
}
