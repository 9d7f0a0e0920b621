//! `Access`: how a launch uses a buffer. The vocabulary every layer shares, from the
//! simulator's hazard checker up to the libraries, so it sits below all of them.

/// How a launch uses a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The launch only reads the buffer.
    Read,
    /// The launch overwrites the buffer without reading it.
    Write,
    /// The launch reads and writes the buffer.
    ReadWrite,
}

impl Access {
    /// Whether the use modifies the buffer (and so must wait for earlier reads).
    pub fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }

    /// The strongest of two uses of one buffer by one launch.
    pub fn merge(self, other: Access) -> Access {
        if self == other {
            self
        } else {
            Access::ReadWrite
        }
    }
}
