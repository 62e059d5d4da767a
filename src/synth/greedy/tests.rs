//! The greedy's event queue and runs on small networks.

use super::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// The events a peek asking for `count` events sees, in order.
fn peeked(instants: &mut Instants<Event>, count: usize) -> Vec<Event> {
    let upcoming = instants.peek(count);
    (0..).map_while(|i| upcoming.get(i)).collect()
}

/// Instants pop in time order, each with its events in the order they were pushed, whatever
/// mix of remembered, mapped and new delays the pushes have, before or among the events a
/// peek looked at (checked against a map of lists).
#[test]
fn instants_pop_in_time_order_with_events_in_push_order() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let mut instants = Instants::default();
    let mut expected: BTreeMap<Time, Vec<Event>> = BTreeMap::new();
    let mut now = 0u64;
    for round in 0..2000u32 {
        for _ in 0..rng.random_range(0..6) {
            let delays = [0, 1, 2, 2, 5, 9, 11, 13, 17, 19, 23];
            let time = Time(now + delays[rng.random_range(0..delays.len())]);
            let event = Event::LinkFree { link: round };
            instants.push(time, event);
            expected.entry(time).or_default().push(event);
        }
        if rng.random_bool(0.3) {
            // A peek moves the next instants to the front; pushes before them go there.
            let count = rng.random_range(1..8);
            let seen = peeked(&mut instants, count);
            let mut next = expected.values().flatten().copied();
            assert!(seen.iter().all(|&event| next.next() == Some(event)));
        }
        if rng.random_bool(0.6) {
            let popped = instants.pop();
            assert_eq!(popped, expected.pop_first());
            if let Some((time, mut batch)) = popped {
                now = time.0;
                batch.clear();
                instants.recycle(batch);
            }
        }
    }
    while let Some(popped) = instants.pop() {
        assert_eq!(Some(popped), expected.pop_first());
    }
    assert!(expected.is_empty());
}

/// Sends are numbered in 32 bits: a problem is refused when the copies it needs, less those
/// held from the start, pass [`MAX_SENDS`], and not at it.
#[test]
fn copies_past_the_send_numbers_are_refused_at_the_boundary() {
    let n = 1 << 16;
    let problem = |held| Problem::all_gather(n, 1, held);
    // 2^16 NPUs each wanting 2^16 chunks: 2^32 copies, one more than can be numbered.
    assert!(ensure_send_ids(n, &problem(0)).is_err());
    assert!(ensure_send_ids(n, &problem(1)).is_ok());
    // A 256x256 mesh's all-gather: every chunk held by one NPU from the start.
    assert!(ensure_send_ids(n, &problem(n)).is_ok());
    assert!(ensure_send_ids(n + 1, &problem(0)).is_err());
}

/// A link's rank among its source's outgoing links is its bit in a log entry's record of
/// the links it was of use to; links past the 32nd have no bit and check every entry.
#[test]
fn links_past_the_32nd_check_every_chunk() {
    let entry = |wanted| Candidate {
        instant: 0,
        chunk: 0,
        via: NONE,
        wanted,
    };
    let queue = |rank| Queue {
        src: 0,
        dst: 1,
        cursor: 0,
        free: true,
        crosses: false,
        rank,
    };
    assert!(queue(0).may_want(&entry(1)));
    assert!(!queue(0).may_want(&entry(2)));
    assert!(queue(31).may_want(&entry(1 << 31)));
    assert!(!queue(31).may_want(&entry(!(1 << 31))));
    assert!(queue(32).may_want(&entry(0)));
    assert_eq!(queue(5).wanted_bit(), 1 << 5);
    assert_eq!(queue(32).wanted_bit(), 0);
}

/// Events relayed from another worker, pushed between windows at their own instants and
/// delays, pop among the others in time order, each instant's in push order.
#[test]
fn relayed_events_pop_among_the_others_in_time_order() {
    let mut instants = Instants::default();
    let event = |link| Event::LinkFree { link };
    instants.push(Time(10), event(0));
    instants.push(Time(30), event(1));
    // In the order the other worker made them: at 1 with a delay of 29, at 2 and 4 with a
    // delay of 8 (lanes of their own, whatever instant this worker is at).
    instants.push_relayed(Time(1), Time(30), event(4));
    instants.push_relayed(Time(2), Time(10), event(3));
    instants.push_relayed(Time(4), Time(12), event(2));
    assert_eq!(instants.next_time(), Some(Time(10)));
    let order: Vec<(Time, Vec<Event>)> = std::iter::from_fn(|| instants.pop()).collect();
    assert_eq!(
        order,
        [
            (Time(10), vec![event(0), event(3)]),
            (Time(12), vec![event(2)]),
            (Time(30), vec![event(1), event(4)]),
        ]
    );
    assert_eq!(instants.next_time(), None);
}

/// A peek sees the next events in the order they will be handled, as many as asked for or
/// as are pending, and leaves them pending.
#[test]
fn a_peek_sees_the_events_to_come_in_order() {
    let mut instants = Instants::default();
    let event = |link| Event::LinkFree { link };
    for (time, link) in [(5, 0), (3, 1), (9, 2), (3, 3), (5, 4), (1, 5)] {
        instants.push(Time(time), event(link));
    }
    // In order: 5 | 1, 3 | 0, 4 | 2.
    assert_eq!(peeked(&mut instants, 1), [event(5)]);
    assert_eq!(peeked(&mut instants, 2), [event(5), event(1)]);
    assert_eq!(peeked(&mut instants, 10).len(), 6);
    // An instant earlier than those peeked at comes in its place.
    instants.push(Time(4), event(6));
    assert_eq!(
        peeked(&mut instants, 4),
        [event(5), event(1), event(3), event(6)]
    );
    let (time, batch) = instants.pop().unwrap();
    assert_eq!((time, batch), (Time(1), vec![event(5)]));
    assert_eq!(peeked(&mut instants, 2), [event(1), event(3)]);
    let order: Vec<Time> = std::iter::from_fn(|| instants.pop().map(|(t, _)| t)).collect();
    assert_eq!(order, [Time(3), Time(4), Time(5), Time(9)]);
}
