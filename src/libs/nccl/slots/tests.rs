//! The slots' claims, publishes, sweeps and frees, with numbers for events.

use super::*;

/// Ends as numbers: a larger one passes a smaller one; none is known passed.
impl End for u32 {
    type Mark = u32;
    fn mark(&self) -> u32 {
        *self
    }
    fn covers(&self, earlier: &u32) -> bool {
        self >= earlier
    }
    fn known_done(_: &u32) -> bool {
        false
    }
    fn gone(_: &u32) -> bool {
        false
    }
}

#[test]
fn places_cover_the_chunks_in_order() {
    assert_eq!(place(0), (0, 0));
    assert_eq!(place(63), (0, 63));
    assert_eq!(place(64), (1, 0));
    assert_eq!(place(191), (1, 127));
    assert_eq!(place(192), (2, 0));
    let mut next = (0, 0);
    for i in 0..10_000u32 {
        let p = place(i);
        assert_eq!(p, next, "slot {i}");
        next = if p.1 + 1 == FIRST << p.0 { (p.0 + 1, 0) } else { (p.0, p.1 + 1) };
    }
}

#[test]
fn a_reused_slot_reads_done_for_its_old_op_and_its_own_state_for_the_new_one() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let first = slots.claim(&mut book).unwrap();
    assert_eq!(slots.state(first), ENQUEUING);
    slots.publish(first, Some(7));
    assert_eq!(slots.state(first), PENDING);
    assert_eq!(slots.event(first), Some(7));
    // Not reused while pending.
    slots.sweep(&mut book);
    let second = slots.claim(&mut book).unwrap();
    assert_ne!(first.idx, second.idx);
    assert!(slots.transition(first, PENDING, DONE));
    slots.sweep(&mut book);
    assert_eq!(book.pending.len(), 1);
    let third = slots.claim(&mut book).unwrap();
    assert_eq!(third.idx, first.idx, "the done op's slot is reused");
    assert_ne!(third.generation, first.generation);
    // The old op's completion still reads success, whatever the new op goes through.
    assert_eq!(slots.state(first), DONE);
    assert_eq!(slots.event(first), None);
    assert!(!slots.transition(first, PENDING, FAILED));
    slots.publish(third, Some(9));
    assert!(slots.transition(third, PENDING, FAILED));
    assert_eq!(slots.state(first), DONE);
    assert_eq!(slots.state(third), FAILED);
    // A failed op's slot is never handed out again.
    slots.sweep(&mut book);
    let fourth = slots.claim(&mut book).unwrap();
    assert_ne!(fourth.idx, third.idx);
    assert_eq!(slots.state(third), FAILED);
}

#[test]
fn tickets_round_trip_through_their_bits() {
    let t = Ticket { idx: u32::MAX - 3, generation: u64::MAX - 5 };
    assert_eq!(Ticket::from_bits(t.to_bits()), t);
}

#[test]
fn a_slot_failed_before_its_launch_committed_stays_failed() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let t = slots.claim(&mut book).unwrap();
    assert!(slots.transition(t, ENQUEUING, FAILED));
    slots.publish(t, Some(1));
    assert_eq!(slots.state(t), FAILED);
    let u = slots.claim(&mut book).unwrap();
    slots.publish(u, None);
    assert_eq!(slots.state(u), DONE);
}

#[test]
fn steady_state_reuses_a_few_slots() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    for i in 0..10_000 {
        let t = slots.claim(&mut book).unwrap();
        slots.publish(t, Some(i));
        assert!(slots.transition(t, PENDING, DONE));
        slots.sweep(&mut book);
    }
    assert_eq!(book.made, 1);
    assert!(book.pending.is_empty());
}

#[test]
fn slots_grow_past_the_first_chunk() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    // Claimed with no look of the watchdog between them but before the last: only the
    // first and the last are checkpoints.
    let mut all: Vec<_> = (0..999).map(|_| slots.claim(&mut book).unwrap()).collect();
    book.looked(Instant::now());
    all.push(slots.claim(&mut book).unwrap());
    for (i, t) in all.iter().enumerate() {
        slots.publish(*t, Some(i as u32));
    }
    // Each op's event passes the one before: only the checkpoints keep theirs (the first,
    // and the last, also the newest).
    for (i, t) in all.iter().enumerate() {
        let kept = i == 0 || i == all.len() - 1;
        assert_eq!(slots.event(*t), kept.then_some(i as u32), "op {i}");
        assert_eq!(slots.state(*t), PENDING);
    }
}

#[test]
fn a_sweep_frees_the_settled_front_and_everything_settled_once_the_list_is_long() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let all: Vec<_> = (0..4).map(|_| slots.claim(&mut book).unwrap()).collect();
    for (i, t) in all.iter().enumerate() {
        slots.publish(*t, Some(i as u32));
    }
    // The first pending, the others done: nothing behind it goes yet.
    for t in &all[1..] {
        assert!(slots.transition(*t, PENDING, DONE));
    }
    slots.sweep(&mut book);
    assert_eq!(book.pending.len(), 4);
    assert!(slots.transition(all[0], PENDING, FAILED));
    slots.sweep(&mut book);
    assert!(book.pending.is_empty());
    assert_eq!(book.free.len(), 3, "the failed op's slot is not reused");
    // A long list: one op stays pending at the front, the rest are swept behind it.
    let stuck = slots.claim(&mut book).unwrap();
    slots.publish(stuck, Some(0));
    let rest: Vec<_> = (0..FULL_SWEEP).map(|_| slots.claim(&mut book).unwrap()).collect();
    for t in &rest {
        slots.publish(*t, None);
    }
    slots.sweep(&mut book);
    assert_eq!(book.pending.iter().map(|e| e.ticket).collect::<Vec<_>>(), [stuck]);
}

#[test]
fn the_first_op_after_each_look_keeps_its_event() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let mut all = Vec::new();
    // Claims, and the watchdog's looks before each: the first claim, the first after a
    // look (two looks in a row count as one), and the newest keep their events.
    for looks in [0, 0, 2, 0, 1, 0, 0] {
        for _ in 0..looks {
            book.looked(Instant::now());
        }
        all.push(slots.claim(&mut book).unwrap());
    }
    for (i, t) in all.iter().enumerate() {
        slots.publish(*t, Some(i as u32));
    }
    let kept: Vec<bool> = all.iter().map(|t| slots.event(*t).is_some()).collect();
    assert_eq!(kept, [true, false, true, false, true, false, true]);
}

#[test]
fn an_ops_age_counts_from_the_first_look_that_finds_it() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let start = Instant::now();
    let a = slots.claim(&mut book).unwrap();
    assert_eq!(book.oldest(), None, "not seen by a look yet");
    book.looked(start);
    let b = slots.claim(&mut book).unwrap();
    let later = start + std::time::Duration::from_millis(2);
    book.looked(later);
    let since: Vec<_> = book.pending.iter().map(|e| (e.ticket, e.since)).collect();
    assert_eq!(since, [(a, Some(start)), (b, Some(later))]);
    assert_eq!(book.oldest(), Some(start));
    slots.publish(a, None);
    slots.sweep(&mut book);
    assert_eq!(book.oldest(), Some(later));
}

#[test]
fn an_op_keeps_its_event_until_a_later_op_passes_it() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    // The first op is a checkpoint: it keeps its event whatever passes it.
    let checkpoint = slots.claim(&mut book).unwrap();
    let a = slots.claim(&mut book).unwrap();
    let b = slots.claim(&mut book).unwrap();
    let c = slots.claim(&mut book).unwrap();
    slots.publish(checkpoint, Some(1));
    slots.publish(a, Some(2));
    assert_eq!(slots.event(checkpoint), Some(1));
    assert_eq!(slots.event(a), Some(2), "nothing has passed it yet");
    // An end that does not pass `a` (another stream, in the real thing) leaves it alone.
    slots.publish(b, Some(0));
    assert_eq!(slots.event(a), Some(2));
    slots.publish(c, Some(5));
    assert_eq!(slots.event(b), None, "c's end passes b's");
    assert_eq!(slots.event(c), Some(5));
    // Each slot still knows its mark.
    assert_eq!(slots.known_done(b), Some(false));
    assert_eq!(slots.state(b), PENDING);
}

#[test]
fn a_settled_op_is_not_emptied_by_a_late_successor() {
    let slots = Slots::<u32>::default();
    let mut book = Book::default();
    let _checkpoint = slots.claim(&mut book).unwrap();
    let a = slots.claim(&mut book).unwrap();
    let b = slots.claim(&mut book).unwrap();
    slots.publish(a, Some(2));
    assert!(slots.transition(a, PENDING, FAILED));
    slots.publish(b, Some(3));
    assert_eq!(slots.event(a), Some(2), "only a pending op's event is taken");
    assert_eq!(slots.state(a), FAILED);
}
