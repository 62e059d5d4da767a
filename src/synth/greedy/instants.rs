//! The greedy's pending events, popped an instant at a time ([`Instants`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::FxHashMap;

use crate::units::Time;

/// How many delays [`Instants`] remembers the lanes of, past the map: each send schedules its
/// link's freeing and its arrival, at one of two delays each where chunks come in two sizes a
/// byte apart.
const RECENT_DELAYS: usize = 8;

/// The bit that keeps the lanes of relayed events ([`Instants::push_relayed`]) apart from the
/// others: no delay comes near it (2^63 ps is three months).
const RELAYED_LANES: u64 = 1 << 63;

/// The largest batch of events [`Instants::recycle`] keeps for reuse.
const KEPT_BATCH_EVENTS: usize = 256;

/// An event waiting in [`Instants`], with its instant and its place in the order of pushes.
#[derive(Clone, Copy, Debug)]
struct Pending<E> {
    time: Time,
    pushed: u64,
    event: E,
}

impl<E> Pending<E> {
    fn key(&self) -> (Time, u64) {
        (self.time, self.pushed)
    }
}

/// Pending events, popped an instant at a time, each instant's in the order they were pushed.
/// Every event is pushed a fixed delay after the instant being handled (a link kind's freeing or
/// arrival delay for one of the chunk sizes; a handful of delays in all), so the events of one
/// delay come in time order: each delay has a first-in first-out lane, and a heap over the
/// lanes' first events merges them. Chunks of two sizes a byte apart drift apart in time, so a
/// large mesh has tens of millions of instants of a few events each (13.4M for 100M sends on a
/// 100x100 mesh): a heap of instants with a hash map from instant to batch, read at scattered
/// places, was a seventh of the greedy's profile there; with lanes the whole synthesis took
/// 4-5% less time (2026-11-26).
///
/// Not the simulator's [`crate::sim::LaneQueue`]: that one keys a push's lane by the time since
/// its own last pop, which [`Instants::peek`] moves ahead of the instant being handled, so the
/// greedy's few delays no longer map to few lanes. Built on it, mesh 200x200 reached 6% fewer
/// sends in 182 s than with these lanes, in both launch orders (2026-11-26, two builds run
/// together).
pub(super) struct Instants<E> {
    /// The instant popped last: pushes are at it or later.
    now: Time,
    /// Pushes so far.
    pushed: u64,
    /// Per delay, its events in time order.
    lanes: Vec<VecDeque<Pending<E>>>,
    /// The lane of each delay seen.
    lane_of: FxHashMap<Time, usize>,
    /// The delays pushed at last ([`Time::MAX`]: none) and their lanes.
    recent: [(Time, usize); RECENT_DELAYS],
    /// The entry of `recent` a new delay replaces.
    replaced_next: usize,
    /// The first event of each lane that has one, earliest on top.
    heads: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Events taken from the lanes, in order, before all still in a lane: those a peek
    /// ([`Instants::peek`]) has looked at.
    front: VecDeque<Pending<E>>,
    /// Emptied batches, kept for their allocations.
    spare: Vec<Vec<E>>,
}

impl<E> Default for Instants<E> {
    fn default() -> Self {
        Instants {
            now: Time::ZERO,
            pushed: 0,
            lanes: Vec::new(),
            lane_of: FxHashMap::default(),
            recent: [(Time::MAX, 0); RECENT_DELAYS],
            replaced_next: 0,
            heads: BinaryHeap::new(),
            front: VecDeque::new(),
            spare: Vec::new(),
        }
    }
}

impl<E: Copy> Instants<E> {
    #[inline(always)]
    pub(super) fn push(&mut self, time: Time, event: E) {
        self.push_in_lane(Time(time.0 - self.now.0), time, event);
    }

    /// Pushes an event another worker decided at its instant `made` ([`super::split`]): those come in
    /// a batch between windows, each in time order within its delay since `made`, but not
    /// among the events pushed here, so they have lanes of their own.
    pub(super) fn push_relayed(&mut self, made: Time, time: Time, event: E) {
        self.push_in_lane(Time((time.0 - made.0) | RELAYED_LANES), time, event);
    }

    /// The instant of the earliest pending event.
    pub(super) fn next_time(&self) -> Option<Time> {
        match self.front.front() {
            Some(p) => Some(p.time),
            None => self.heads.peek().map(|Reverse((time, _, _))| *time),
        }
    }

    /// Pushes `event` at `time` into the lane of `delay` (the events of one lane are pushed in
    /// time order).
    #[inline(always)]
    fn push_in_lane(&mut self, delay: Time, time: Time, event: E) {
        debug_assert!(time < Time::MAX, "an event at the end of time");
        debug_assert!(
            time >= self.now,
            "an event before the instant being handled"
        );
        let pending = Pending {
            time,
            pushed: self.pushed,
            event,
        };
        self.pushed += 1;
        if self.front.back().is_some_and(|last| time < last.time) {
            // Before events already taken from the lanes: in its place among them.
            let at = self.front.partition_point(|p| p.key() <= pending.key());
            self.front.insert(at, pending);
            return;
        }
        let lane = match self.recent.iter().find(|&&(d, _)| d == delay) {
            Some(&(_, lane)) => lane,
            None => {
                let next = self.lanes.len();
                let lane = *self.lane_of.entry(delay).or_insert(next);
                if lane == next {
                    self.lanes.push(VecDeque::new());
                }
                self.recent[self.replaced_next] = (delay, lane);
                self.replaced_next = (self.replaced_next + 1) % RECENT_DELAYS;
                lane
            }
        };
        debug_assert!(
            self.lanes[lane].back().is_none_or(|last| last.time <= time),
            "a lane's events pushed out of time order"
        );
        if self.lanes[lane].is_empty() {
            self.heads.push(Reverse((time, pending.pushed, lane)));
        }
        self.lanes[lane].push_back(pending);
    }

    /// The earliest event still in a lane, taken out.
    #[inline(always)]
    fn take_from_lanes(&mut self) -> Option<Pending<E>> {
        let Reverse((_, _, lane)) = self.heads.pop()?;
        let pending = self.lanes[lane]
            .pop_front()
            .expect("a lane on the heap has events");
        if let Some(next) = self.lanes[lane].front() {
            self.heads.push(Reverse((next.time, next.pushed, lane)));
        }
        Some(pending)
    }

    /// The earliest pending event, taken out.
    fn take(&mut self) -> Option<Pending<E>> {
        self.front.pop_front().or_else(|| self.take_from_lanes())
    }

    /// The earliest instant and its events, in the order they were pushed.
    pub(super) fn pop(&mut self) -> Option<(Time, Vec<E>)> {
        let first = self.take()?;
        let mut batch = self.spare.pop().unwrap_or_default();
        batch.push(first.event);
        loop {
            match self.take() {
                Some(p) if p.time == first.time => batch.push(p.event),
                Some(later) => {
                    self.front.push_front(later);
                    break;
                }
                None => break,
            }
        }
        self.now = first.time;
        Some((first.time, batch))
    }

    /// The next `count` events after the instant popped last (fewer if fewer are pending), in
    /// the order they will be handled, read in place.
    pub(super) fn peek(&mut self, count: usize) -> Upcoming<'_, E> {
        while self.front.len() < count {
            match self.take_from_lanes() {
                Some(p) => self.front.push_back(p),
                None => break,
            }
        }
        let (first, second) = self.front.as_slices();
        let first = &first[..count.min(first.len())];
        let second = &second[..(count - first.len()).min(second.len())];
        Upcoming { first, second }
    }

    /// Returns an emptied batch for reuse, unless it is large: the first instants of a big
    /// mesh hold thousands of events each, and batches kept at that size for the few dozen of
    /// the instants after them would hold memory for nothing.
    pub(super) fn recycle(&mut self, batch: Vec<E>) {
        if batch.capacity() <= KEPT_BATCH_EVENTS {
            self.spare.push(batch);
        }
    }
}

/// The events to come, in the order they will be handled ([`Instants::peek`]).
pub(super) struct Upcoming<'a, E> {
    first: &'a [Pending<E>],
    second: &'a [Pending<E>],
}

impl<E: Copy> Upcoming<'_, E> {
    /// The `i`-th event to come, if peeked.
    pub(super) fn get(&self, i: usize) -> Option<E> {
        match self.first.get(i) {
            Some(p) => Some(p.event),
            None => self.second.get(i - self.first.len()).map(|p| p.event),
        }
    }
}
