//! Host buffer access rules on the simulated backend: read guards are shared (several may be
//! held at once, on any threads), and a buffer made before `advance_generation` is stale.

use crate::common::*;
use cusched::Error;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn two_threads_hold_read_guards_of_one_host_buffer_at_once() {
    bounded(LIMIT, || {
        let d = sim();
        let host = Arc::new(d.host_from_slice(&[1u32, 2, 3]).unwrap());
        let both = Arc::new(Barrier::new(2));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (host, both) = (host.clone(), both.clone());
                std::thread::spawn(move || {
                    let g = host.read().unwrap();
                    // Both guards are alive here: shared reads must not exclude each other.
                    both.wait();
                    g.iter().sum::<u32>()
                })
            })
            .collect();
        for r in readers {
            assert_eq!(r.join().unwrap(), 6);
        }
    });
}

#[test]
fn one_thread_holds_two_read_guards_and_copies_from_the_buffer_meanwhile() {
    bounded(LIMIT, || {
        let d = sim();
        let s = d.default_stream();
        let host = d.host_from_slice(&[4u32, 5, 6]).unwrap();
        let buf = d.alloc_zeros::<u32>(s, 3).unwrap();
        let a = host.read().unwrap();
        let b = host.read().unwrap();
        // A GPU read of the buffer does not conflict with host reads.
        buf.copy_from_host(s, &host).unwrap();
        assert_eq!(buf.download(s).unwrap(), vec![4, 5, 6]);
        assert_eq!((&a[..], &b[..]), (&[4, 5, 6][..], &[4, 5, 6][..]));
    });
}

#[test]
fn host_buffer_is_stale_after_advance_generation() {
    let d = sim();
    let mut host = d.alloc_host::<f32>(4).unwrap();
    let made = d.generation();
    let current = d.advance_generation();
    match host.read() {
        Err(Error::Stale { made: m, current: c, .. }) => assert_eq!((m, c), (made, current)),
        other => panic!("read of a stale host buffer: expected Stale, got {other:?}"),
    }
    match host.write() {
        Err(Error::Stale { .. }) => {}
        other => panic!("write of a stale host buffer: expected Stale, got {other:?}"),
    };
}
