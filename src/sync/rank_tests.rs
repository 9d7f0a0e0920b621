//! The lock-order checker's tests: ranks in order pass, an inversion panics.

use super::*;
use std::sync::{Condvar, Mutex, RwLock};
use std::time::Duration;

fn panics(f: impl FnOnce()) -> String {
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("no panic");
    err.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn ranks_in_order_pass_and_are_released() {
    let (a, b, c) = (
        Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
        Ranked::<Mutex<u8>, { rank::STREAM }>::new(Mutex::new(0)),
        Mutex::new(0u8),
    );
    {
        let _a = lock(&a);
        let _b = lock(&b);
        let _c = lock(&c);
        assert_eq!(held::ranks(), vec![rank::BUFFER, rank::STREAM, rank::LEAF]);
    }
    assert!(held::ranks().is_empty());
    // Released out of order, then taken again.
    let ga = lock(&a);
    let gb = lock(&b);
    drop(ga);
    drop(gb);
    let _b = lock(&b);
    assert_eq!(held::ranks(), vec![rank::STREAM]);
}

#[test]
fn an_inversion_panics() {
    let buffer = Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0));
    let stream = Ranked::<Mutex<u8>, { rank::STREAM }>::new(Mutex::new(0));
    let msg = panics(|| {
        let _s = lock(&stream);
        let _b = lock(&buffer);
    });
    assert!(msg.contains("a buffer state lock") && msg.contains("a stream slot lock"), "{msg}");
    // The panic released what the thread held.
    assert!(held::ranks().is_empty());
}

#[test]
fn one_rank_twice_panics() {
    let (a, b) = (
        Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
        Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0)),
    );
    panics(|| {
        let _a = lock(&a);
        let _b = lock(&b);
    });
}

#[test]
fn anything_under_a_leaf_panics() {
    let leaf = Mutex::new(0u8);
    let (other, ranked) = (Mutex::new(0u8), Ranked::<RwLock<u8>, { rank::TRACER }>::new(RwLock::new(0)));
    panics(|| {
        let _l = lock(&leaf);
        let _o = lock(&other);
    });
    panics(|| {
        let _l = lock(&leaf);
        let _r = read(&ranked);
    });
    // A leaf under ranked locks is fine.
    let _r = write(&ranked);
    let _l = lock(&leaf);
}

#[test]
fn a_condvar_wait_releases_the_rank_and_takes_it_again() {
    let stream = Ranked::<Mutex<bool>, { rank::STREAM }>::new(Mutex::new(false));
    let buffer = Ranked::<Mutex<u8>, { rank::BUFFER }>::new(Mutex::new(0));
    let cv = Condvar::new();
    let g = lock(&stream);
    let g = wait_timeout(&cv, g, Duration::from_millis(1));
    assert_eq!(held::ranks(), vec![rank::STREAM]);
    drop(g);
    // Waiting while holding a lower rank is fine; its rank comes back checked.
    let _b = lock(&buffer);
    let g = wait_timeout(&cv, lock(&stream), Duration::from_millis(1));
    assert_eq!(held::ranks(), vec![rank::BUFFER, rank::STREAM]);
    drop(g);
}
