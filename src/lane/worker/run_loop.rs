//! The lane thread's loop: spin briefly, then park on the queue; run each job, or cancel what
//! is queued once the device shuts down.

use crate::error::Error;
use crate::lane::job::Job;
use crate::libs::Handles;
use crossbeam_channel::{select, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) fn lane_loop(
    mut handles: Handles,
    jobs: Receiver<Job>,
    shutdown: Receiver<()>,
    spin: Duration,
    name: &Arc<str>,
) {
    loop {
        // Spin briefly before parking: waking a parked thread costs far more than a short spin.
        // Measured as elapsed time, so that no spin overflows `Instant`; shutdown ends it.
        let spin_start = Instant::now();
        let mut job = None;
        while spin_start.elapsed() < spin && !handles.device().shared.is_shut_down() {
            match jobs.try_recv() {
                Ok(j) => {
                    job = Some(Ok(j));
                    break;
                }
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
        let next = match job {
            Some(j) => j,
            None => select! {
                recv(jobs) -> j => j.map_err(|_| ()),
                recv(shutdown) -> _ => Err(()),
            },
        };
        match next {
            Ok(job) if !handles.device().shared.is_shut_down() => job.run(&mut handles, name),
            Ok(job) => {
                job.cancel(Error::Shutdown);
                drain(&jobs);
                return;
            }
            Err(()) if handles.device().shared.is_shut_down() => {
                drain(&jobs);
                return;
            }
            Err(()) => return,
        }
    }
}

fn drain(jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.try_recv() {
        job.cancel(Error::Shutdown);
    }
}
