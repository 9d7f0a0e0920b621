//! Delivery under load: many threads enqueue on many streams and take their completions by
//! callback, future, `wait`, `wait_timeout` or polling; every completion resolves exactly once
//! with its own value, callbacks of one stream run in that stream's order, and keep-alives drop
//! once, only after the GPU passed their job.

use crate::common::*;
use cusched::{Completion, Device, Handles, LaunchRecorder, StreamId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const STREAMS: usize = 6;
const THREADS: usize = 8;
const OPS: usize = 250;

/// What the test saw; violations are collected rather than panicking inside callbacks, which
/// run on the completion thread under `catch_unwind`.
#[derive(Default)]
struct Log {
    delivered: Mutex<HashMap<(usize, u64), u32>>,
    last_callback: Mutex<HashMap<usize, u64>>,
    violations: Mutex<Vec<String>>,
    keeps_dropped: AtomicUsize,
}

impl Log {
    fn violation(&self, v: String) {
        self.violations.lock().unwrap().push(v);
    }

    fn delivered(&self, stream: usize, seq: u64, got: cusched::Result<u64>, by_callback: bool) {
        match got {
            Ok(v) if v == seq => {}
            other => self.violation(format!("stream {stream} op {seq}: got {other:?}")),
        }
        *self.delivered.lock().unwrap().entry((stream, seq)).or_default() += 1;
        if by_callback {
            let mut last = self.last_callback.lock().unwrap();
            if let Some(&prev) = last.get(&stream) {
                if prev >= seq {
                    self.violation(format!("stream {stream}: callback of op {seq} ran after op {prev}'s"));
                }
            }
            last.insert(stream, seq);
        }
    }
}

/// Kept alive by a job: dropping it before the job's kernel ran is a violation.
struct Token {
    ran: Arc<AtomicBool>,
    log: Arc<Log>,
}

impl Drop for Token {
    fn drop(&mut self) {
        if !self.ran.load(Ordering::Acquire) {
            self.log.violation("a keep-alive dropped before its kernel ran".into());
        }
        self.log.keeps_dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// One op on `stream`: a simulated kernel (random delay from the simulator), optionally keeping
/// a token alive; its value is `seq`.
fn op(h: &mut Handles, seq: u64, keep: Option<Arc<Log>>) -> Completion<u64> {
    h.run(move |cx| {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        LaunchRecorder::new_strict(cx.stream())
            .launch(cx.device(), move |scope| scope.sim_kernel(move || flag.store(true, Ordering::Release)))?;
        if let Some(log) = keep {
            cx.keep(Token { ran, log });
        }
        Ok(seq)
    })
}

/// How a test thread takes a completion it did not hand to a callback.
fn take(c: Completion<u64>, how: u64) -> cusched::Result<u64> {
    match how {
        0 => block_on(c),
        1 => c.wait(),
        2 => c.wait_timeout(LIMIT),
        _ => loop {
            if let Some(v) = c.try_take() {
                break v;
            }
            std::thread::yield_now();
        },
    }
}

#[test]
fn every_completion_resolves_once_and_callbacks_keep_stream_order() {
    bounded(LIMIT, || {
        let d: Device = sim();
        let streams: Vec<StreamId> = (0..STREAMS).map(|_| d.new_stream().unwrap()).collect();
        // Held while numbering and enqueueing on a stream (and registering a callback), so an
        // op's number is its position on the stream.
        let order: Arc<Vec<Mutex<u64>>> = Arc::new((0..STREAMS).map(|_| Mutex::new(0)).collect());
        let log = Arc::new(Log::default());
        let keeps = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (d, streams, order, log, keeps) =
                    (d.clone(), streams.clone(), order.clone(), log.clone(), keeps.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::seeded(0x5eed + t as u64);
                    let mut handles: Vec<Handles> = streams.iter().map(|&s| Handles::new(&d, s).unwrap()).collect();
                    let mut held: Vec<(usize, u64, Completion<u64>, u64)> = Vec::new();
                    for _ in 0..OPS {
                        let s = rng.below(STREAMS as u64) as usize;
                        let how = rng.below(6);
                        let keep = (rng.below(2) == 0).then(|| {
                            keeps.fetch_add(1, Ordering::Relaxed);
                            log.clone()
                        });
                        let mut next = order[s].lock().unwrap();
                        let seq = *next;
                        *next += 1;
                        let c = op(&mut handles[s], seq, keep);
                        if how >= 4 {
                            let log = log.clone();
                            c.on_complete(move |r| log.delivered(s, seq, r, true));
                            continue;
                        }
                        drop(next);
                        held.push((s, seq, c, how));
                        // Take held completions in a random order, some long after their op.
                        while held.len() > rng.below(8) as usize {
                            let i = rng.below(held.len() as u64) as usize;
                            let (s, seq, c, how) = held.swap_remove(i);
                            log.delivered(s, seq, take(c, how), false);
                        }
                    }
                    for (s, seq, c, how) in held {
                        log.delivered(s, seq, take(c, how), false);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total = THREADS * OPS;
        // Callbacks still in flight finish before shutdown returns.
        d.shutdown().unwrap();
        let violations = log.violations.lock().unwrap();
        assert!(violations.is_empty(), "{} violations, first: {:?}", violations.len(), violations.first());
        let delivered = log.delivered.lock().unwrap();
        assert_eq!(delivered.len(), total, "every op delivered");
        assert!(delivered.values().all(|&n| n == 1), "an op was delivered more than once");
        let numbered: u64 = order.iter().map(|m| *m.lock().unwrap()).sum();
        assert_eq!(numbered as usize, total);
        assert_eq!(
            log.keeps_dropped.load(Ordering::Relaxed),
            keeps.load(Ordering::Relaxed),
            "keep-alives dropped once each"
        );
    });
}

#[test]
fn wait_all_returns_each_value_in_the_order_given_over_several_streams() {
    bounded(LIMIT, || {
        let d = sim();
        let streams: Vec<StreamId> = (0..3).map(|_| d.new_stream().unwrap()).collect();
        let mut handles: Vec<Handles> = streams.iter().map(|&s| Handles::new(&d, s).unwrap()).collect();
        // Interleaved over the streams, so that waiting newest first visits them out of order.
        let batch: Vec<Completion<u64>> =
            (0..60u64).map(|seq| op(&mut handles[(seq % 3) as usize], seq, None)).collect();
        let got: Vec<u64> = cusched::wait_all(batch).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, (0..60).collect::<Vec<u64>>());
    });
}
