//! `Lane`: a worker thread that owns one stream, a bounded job queue and the [`Handles`](crate::Handles) its
//! jobs work through (the libraries' per-stream context, made in `libs`).

mod job;
mod worker;

pub use job::{Declare, DeclaredArgs, JobBuilder};
pub use worker::{Lane, LaneOptions};

/// The former name of [`Handles`](crate::Handles), which a lane job receives: one type, one name.
#[deprecated(since = "0.1.0", note = "use `Handles`, the same type")]
pub type LaneCtx = crate::libs::Handles;
