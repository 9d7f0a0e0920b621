//! `Lane`: the handle, its start on a worker thread with a stream and a bounded queue, and its
//! end (the last clone dropped joins the thread).
//!
//! The files: `worker/submit.rs` queues jobs (submit, try_submit, the declared-job entry);
//! `worker/run_loop.rs` is the worker thread's loop.

mod run_loop;
mod submit;

use super::job::Job;
use crate::device::{Device, DeviceShared, StreamId};
use crate::error::{Error, Result};
use crate::libs::Handles;
use crossbeam_channel::{bounded, Sender};
use run_loop::lane_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Per-lane options.
#[derive(Clone, Debug)]
pub struct LaneOptions {
    /// Jobs the queue holds before `submit` blocks and `try_submit` fails.
    pub capacity: usize,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions { capacity: 1024 }
    }
}

struct LaneInner {
    /// Unique in the process, never 0: what the lane's thread records as its role, so that
    /// waits that only this lane could end are refused on it.
    id: u64,
    name: Arc<str>,
    stream: StreamId,
    /// Held while a submit takes its ticket and pushes its job, so that this queue's order is
    /// ticket order (what makes reservations deadlock-free: see `track::reservation`).
    submit: crate::sync::Ranked<Mutex<()>, { crate::sync::rank::LANE_SUBMIT }>,
    device: Arc<DeviceShared>,
    tx: Option<Sender<Job>>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// A worker thread owning one stream. Cheap to clone; the last clone dropped runs the jobs
/// still queued and joins the thread, and the stream passes to the next lane the device
/// starts (a stream is in order, so that lane's work follows this one's), so that lanes can be
/// started and dropped without running out of [`DeviceConfig::max_streams`](crate::DeviceConfig).
///
/// ```
/// use cusched::{Device, SimConfig};
///
/// let device = Device::sim(SimConfig::default())?;
/// let lane = device.lane("upload")?;
/// // The job runs on the lane's thread, with the lane's stream and handles.
/// let buf = lane.submit(|cx| cx.device().upload(cx.stream(), &[7u8; 16])).wait()?;
/// assert_eq!(buf.download(lane.stream())?, [7u8; 16]);
/// # Ok::<(), cusched::Error>(())
/// ```
#[derive(Clone)]
pub struct Lane {
    inner: Arc<LaneInner>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lane({}, {})", self.inner.name, self.inner.stream)
    }
}

impl Device {
    /// Starts a lane named `name` on a stream of its own: a new one, or one a dropped lane gave
    /// back.
    pub fn lane(&self, name: &str) -> Result<Lane> {
        self.lane_with(name, LaneOptions::default())
    }

    /// Starts a lane with options.
    pub fn lane_with(&self, name: &str, options: LaneOptions) -> Result<Lane> {
        if options.capacity == 0 {
            return Err(Error::invalid("LaneOptions::capacity", "must be at least 1"));
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let shutdown = self.shared.shutdown_signal().ok_or(Error::Shutdown)?;
        // A stream a dropped lane gave back, or a new one.
        let stream = self.shared.lane_stream(name)?;
        let handles = match Handles::new(self, stream) {
            Ok(h) => h,
            Err(e) => {
                self.shared.release_stream(stream);
                return Err(e);
            }
        };
        let (tx, rx) = bounded::<Job>(options.capacity);
        let spin = self.shared.config.spin;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let device = self.shared.clone();
        let lane_name: Arc<str> = Arc::from(name);
        let worker_name = lane_name.clone();
        let spawned = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            crate::sync::role::set_lane(id);
            lane_loop(handles, rx, shutdown, spin, &worker_name);
            // The lane's handles are gone and it enqueues nothing more: a later lane may take
            // the stream (it is in order, so that lane's work follows this one's).
            device.release_stream(stream);
        });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                self.shared.release_stream(stream);
                return Err(Error::invalid("name", format!("could not spawn the lane thread: {e}")));
            }
        };
        let thread = Arc::new(Mutex::new(Some(thread)));
        self.shared.register_lane(thread.clone());
        Ok(Lane {
            inner: Arc::new(LaneInner {
                id,
                name: lane_name,
                stream,
                submit: crate::sync::Ranked::new(Mutex::new(())),
                device: self.shared.clone(),
                tx: Some(tx),
                thread,
            }),
        })
    }
}

impl Lane {
    /// The lane's stream.
    pub fn stream(&self) -> StreamId {
        self.inner.stream
    }

    /// The lane's name, shared (for the failure a declared job leaves on its writes).
    pub(super) fn name_shared(&self) -> Arc<str> {
        self.inner.name.clone()
    }

    /// The lane's name (also its thread's name).
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl Drop for LaneInner {
    fn drop(&mut self) {
        // Disconnecting the queue lets the worker run what is queued, then exit.
        drop(self.tx.take());
        let handle = crate::sync::lock(&self.thread).take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}
