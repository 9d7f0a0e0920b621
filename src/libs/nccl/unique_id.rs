//! [`UniqueId`]: what one process makes and every rank passes to
//! [`Communicator::init_rank`](super::Communicator::init_rank), and the helpers that carry its
//! bytes through a file or any byte channel.

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The id of a communicator being made from several processes (NCCL's `ncclUniqueId`): one
/// process makes it ([`new`](Self::new)), hands its [`to_bytes`](Self::to_bytes) to every
/// other rank by whatever channel the program has (a file on shared storage, a socket, an
/// environment variable, MPI), and each rank passes it to
/// [`Communicator::init_rank`](super::Communicator::init_rank).
///
/// ```
/// use cusched::nccl::UniqueId;
/// let id = UniqueId::simulated();
/// let mut channel = Vec::new();
/// id.write_to(&mut channel)?; // a socket, a pipe, a file...
/// assert_eq!(UniqueId::read_from(&mut channel.as_slice())?, id);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; UniqueId::LEN],
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id holds the root's address: print a short digest, not the bytes.
        let digest =
            self.bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        write!(f, "UniqueId({digest:016x})")
    }
}

/// What starts the bytes [`UniqueId::write_to`] writes, so that a reader of the wrong stream
/// fails instead of making a communicator from noise.
const MAGIC: &[u8; 8] = b"cuschNID";

impl UniqueId {
    /// The id's length in bytes.
    pub const LEN: usize = 128;

    /// A fresh id from NCCL (`ncclGetUniqueId`), for communicators on CUDA devices. It names
    /// this process's host and a port it listens on: every rank must be able to reach it.
    /// [`Error::LibraryUnavailable`] without NCCL.
    pub fn new() -> Result<UniqueId> {
        if !super::calls::is_present() {
            return Err(super::super::unavailable::<super::Nccl>());
        }
        Ok(UniqueId { bytes: super::calls::unique_id()? })
    }

    /// A fresh id for communicators on simulated devices (random bytes; no NCCL needed).
    pub fn simulated() -> UniqueId {
        use std::hash::{BuildHasher, Hasher};
        let mut bytes = [0u8; Self::LEN];
        bytes[..4].copy_from_slice(b"SIM:");
        for chunk in bytes[4..].chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(Instant::now().elapsed().as_nanos() ^ std::process::id() as u128);
            let v = h.finish().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        UniqueId { bytes }
    }

    /// The id's bytes, to hand to the other ranks.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        self.bytes
    }

    /// The id from the bytes [`to_bytes`](Self::to_bytes) gave. `bytes` must be
    /// [`LEN`](Self::LEN) long.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let bytes = bytes.try_into().map_err(|_| {
            Error::invalid("bytes", format!("a unique id has {} bytes, got {}", Self::LEN, bytes.len()))
        })?;
        Ok(UniqueId { bytes })
    }

    /// Whether the id is for simulated devices ([`simulated`](Self::simulated)).
    pub(super) fn is_simulated(&self) -> bool {
        self.bytes.starts_with(b"SIM:")
    }

    /// Writes the id to `channel`: a marker, then its bytes.
    pub fn write_to(&self, channel: &mut impl Write) -> Result<()> {
        let io = |e: std::io::Error| Error::invalid("channel", format!("writing the unique id failed: {e}"));
        channel.write_all(MAGIC).map_err(io)?;
        channel.write_all(&self.bytes).map_err(io)?;
        channel.flush().map_err(io)
    }

    /// Reads an id that [`write_to`](Self::write_to) wrote to `channel`.
    pub fn read_from(channel: &mut impl Read) -> Result<UniqueId> {
        let mut buf = [0u8; MAGIC.len() + Self::LEN];
        channel
            .read_exact(&mut buf)
            .map_err(|e| Error::invalid("channel", format!("reading the unique id failed: {e}")))?;
        if &buf[..MAGIC.len()] != MAGIC {
            return Err(Error::invalid("channel", "does not hold a unique id written by UniqueId::write_to"));
        }
        UniqueId::from_bytes(&buf[MAGIC.len()..])
    }

    /// Writes the id to the file at `path`, whole or not at all: it is written to a file beside
    /// it and renamed, so that a rank polling with [`read_file`](Self::read_file) never reads
    /// half of it.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |e: std::io::Error| Error::invalid("path", format!("writing {}: {e}", path.display()));
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        self.write_to(&mut f)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Reads the id that [`write_file`](Self::write_file) wrote at `path`, waiting up to
    /// `wait` for the file to appear (the rank that writes it may start later).
    pub fn read_file(path: impl AsRef<Path>, wait: Duration) -> Result<UniqueId> {
        let path = path.as_ref();
        let give_up = Instant::now().checked_add(wait);
        loop {
            match std::fs::File::open(path) {
                Ok(mut f) => return UniqueId::read_from(&mut f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if give_up.is_some_and(|g| Instant::now() >= g) {
                        return Err(Error::Timeout { waited: wait });
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(Error::invalid("path", format!("reading {}: {e}", path.display()))),
            }
        }
    }
}
