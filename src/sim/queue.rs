//! The event queue: events ordered by (time, insertion sequence), so that events at equal times run
//! in the order they were scheduled, as DESIGN.md and ASTRA-sim require.
//!
//! Choice of structure, measured in one run by `cargo bench --bench event_queue` on the engine's real
//! load (direct all-to-all on `switch:N`, 1 MiB per pair, 50 GiB/s, 500 ns; release build, 2-core
//! machine; seconds for the simulation alone; 2026-11-24):
//!
//! | load                        | LaneQueue | RadixQueue | BucketQueue | BinaryHeap |
//! |-----------------------------|----------:|-----------:|------------:|-----------:|
//! | N=512 regular, exact        | 0.022     | 0.025      | 0.023       | 0.067      |
//! | N=512 jittered, astra       | 0.083     | 0.079      | 0.178       | 0.075      |
//! | N=1024 regular, exact       | 0.093     | 0.108      | 0.096       | 0.303      |
//! | N=1024 jittered, astra      | 0.441     | 0.425      | 0.849       | 0.427      |
//!
//! The `priority-queue` crate is 3-5x slower than std's `BinaryHeap`: it keeps a hash index of every
//! item for change-priority, which the engine never uses, and it has no FIFO order among equal
//! priorities, so the sequence number must ride inside the item anyway. The heap in turn pays
//! log(n) sift work on regular collective traffic, where many events share one time; a bucketed
//! map wins there but loses when every event has its own time (jittered sizes). The radix heap
//! matches the better of the two on both loads; the lane queue writes and reads each event of
//! regular traffic once where the radix heap moves it between buckets (on `switch:4096`, 67M
//! events, the engine runs 1.5 s instead of 1.9 s) and hands traffic of many delays to a radix
//! heap. It is the engine's queue.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use crate::units::Time;

/// A queue of events that pops the earliest, ties in scheduling order.
pub trait EventQueue<E> {
    fn push(&mut self, time: Time, event: E);
    fn pop(&mut self) -> Option<(Time, E)>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Entry<E> {
    time: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed, so that the max-heap pops the earliest (time, seq).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// `std::collections::BinaryHeap` keyed by (time, sequence number).
pub struct HeapQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for HeapQueue<E> {
    fn default() -> Self {
        HeapQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> for HeapQueue<E> {
    fn push(&mut self, time: Time, event: E) {
        self.heap.push(Entry {
            time: time.ps(),
            seq: self.next_seq,
            event,
        });
        self.next_seq += 1;
    }

    fn pop(&mut self) -> Option<(Time, E)> {
        self.heap.pop().map(|e| (Time(e.time), e.event))
    }

    fn len(&self) -> usize {
        self.heap.len()
    }
}

/// Events grouped by time: an ordered map from each distinct time to a FIFO of its events. The
/// collectives' regular traffic puts many events on few distinct times, so most pushes append to an
/// existing bucket and most pops are a `VecDeque::pop_front`.
pub struct BucketQueue<E> {
    now: u64,
    current: VecDeque<E>,
    later: BTreeMap<u64, VecDeque<E>>,
    /// Emptied buckets kept for reuse, to avoid an allocation per distinct time.
    spare: Vec<VecDeque<E>>,
    len: usize,
}

impl<E> Default for BucketQueue<E> {
    fn default() -> Self {
        BucketQueue {
            now: 0,
            current: VecDeque::new(),
            later: BTreeMap::new(),
            spare: Vec::new(),
            len: 0,
        }
    }
}

impl<E> EventQueue<E> for BucketQueue<E> {
    fn push(&mut self, time: Time, event: E) {
        let t = time.ps();
        debug_assert!(t >= self.now, "events are never scheduled in the past");
        self.len += 1;
        // `later` only holds times after `now`, so an event at `now` follows everything pending.
        if t == self.now {
            self.current.push_back(event);
            return;
        }
        let spare = &mut self.spare;
        self.later
            .entry(t)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push_back(event);
    }

    fn pop(&mut self) -> Option<(Time, E)> {
        if self.current.is_empty() {
            let (t, bucket) = self.later.pop_first()?;
            self.now = t;
            let old = std::mem::replace(&mut self.current, bucket);
            self.spare.push(old);
        }
        let event = self.current.pop_front()?;
        self.len -= 1;
        Some((Time(self.now), event))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A monotone radix heap: event times never precede the last popped time, so an event goes to the
/// bucket of the highest bit in which its time differs from that time. Push is O(1); each event is
/// redistributed at most once per bucket level. Equal times always map to the same bucket and
/// buckets are appended and redistributed in order, so equal times pop in scheduling order.
pub struct RadixQueue<E> {
    last: u64,
    /// Bucket 0: events at exactly `last`, popped from `now[head..]`.
    now: Vec<E>,
    head: usize,
    buckets: Vec<Vec<(u64, E)>>,
    /// Bit `b` set when `buckets[b]` is not empty.
    occupied: u64,
    len: usize,
}

impl<E> Default for RadixQueue<E> {
    fn default() -> Self {
        RadixQueue {
            last: 0,
            now: Vec::new(),
            head: 0,
            buckets: (0..64).map(|_| Vec::new()).collect(),
            occupied: 0,
            len: 0,
        }
    }
}

impl<E: Copy> RadixQueue<E> {
    /// Pops another event at the time of the last pop, if any is left: lets a caller handle all
    /// events of one instant before acting on them.
    pub fn pop_same_time(&mut self) -> Option<E> {
        let event = *self.now.get(self.head)?;
        self.head += 1;
        self.len -= 1;
        Some(event)
    }

    #[inline(always)]
    fn place(&mut self, time: u64, event: E) {
        match 64 - (time ^ self.last).leading_zeros() {
            0 => self.now.push(event),
            b => {
                let b = b as usize - 1;
                self.buckets[b].push((time, event));
                self.occupied |= 1 << b;
            }
        }
    }

    /// Moves the lowest non-empty bucket down once `now` is used up: its earliest time becomes
    /// `last`, and its events spread over the buckets below (those at `last` into `now`).
    #[cold]
    fn refill(&mut self) -> bool {
        self.now.clear();
        self.head = 0;
        if self.occupied == 0 {
            return false;
        }
        let b = self.occupied.trailing_zeros() as usize;
        self.occupied &= !(1 << b);
        let mut items = std::mem::take(&mut self.buckets[b]);
        self.last = items
            .iter()
            .map(|&(t, _)| t)
            .min()
            .expect("an occupied bucket is not empty");
        for &(t, e) in &items {
            self.place(t, e);
        }
        // Keep the allocation: the bucket will fill again.
        items.clear();
        self.buckets[b] = items;
        true
    }
}

impl<E: Copy> EventQueue<E> for RadixQueue<E> {
    #[inline]
    fn push(&mut self, time: Time, event: E) {
        let t = time.ps();
        debug_assert!(t >= self.last, "events are never scheduled in the past");
        self.len += 1;
        self.place(t, event);
    }

    #[inline]
    fn pop(&mut self) -> Option<(Time, E)> {
        if self.head == self.now.len() && !self.refill() {
            return None;
        }
        let event = self.now[self.head];
        self.head += 1;
        self.len -= 1;
        Some((Time(self.last), event))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// A FIFO in a power-of-two buffer, indexed by masking: a lane's push and pop are on the engine's
/// path of every event, where `VecDeque`'s wrap-around arithmetic for any capacity cost a
/// comparison and a conditional move each.
struct Ring<T> {
    buf: Vec<T>,
    head: usize,
    len: usize,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Ring {
            buf: Vec::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy> Ring<T> {
    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn front(&self) -> Option<&T> {
        (self.len > 0).then(|| &self.buf[self.head])
    }

    #[inline(always)]
    fn push_back(&mut self, value: T) {
        if self.len == self.buf.len() {
            self.grow(value);
        }
        let mask = self.buf.len() - 1;
        self.buf[(self.head + self.len) & mask] = value;
        self.len += 1;
    }

    #[inline(always)]
    fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = self.buf[self.head];
        self.head = (self.head + 1) & (self.buf.len() - 1);
        self.len -= 1;
        Some(value)
    }

    /// Doubles the buffer, the FIFO's items first in order; `fill` pads the unused slots.
    #[cold]
    fn grow(&mut self, fill: T) {
        let capacity = (self.buf.len() * 2).max(64);
        let mut buf = Vec::with_capacity(capacity);
        let mask = self.buf.len().wrapping_sub(1);
        buf.extend((0..self.len).map(|i| self.buf[(self.head + i) & mask]));
        buf.resize(capacity, fill);
        self.buf = buf;
        self.head = 0;
    }
}

/// Lanes a [`LaneQueue`] keeps: collectives push with a handful of distinct delays (each link
/// kind's serialisation and arrival delays, zero), and a pop compares every lane's head.
const LANES: usize = 8;

/// Events in FIFOs by delay ("lanes"), each in time order by construction; when more delays are
/// pending at once than there are lanes, every event moves to a [`RadixQueue`] until it runs dry.
///
/// Equal times pop in scheduling order without sequence numbers: an event pushed `d` before its
/// time was pushed at time minus `d`, and push times never decrease, so among events of one time
/// the one of the longer delay was scheduled first, and one lane keeps its own order. Moving to
/// the radix queue pushes the lanes' events in that same order, and the radix queue keeps it.
///
/// Regular collective traffic, a few delays over and over (each link kind's serialisation and
/// arrival delays, zero), then costs one write and one read an event, where the radix queue moves
/// each event between its buckets a few times; traffic of many delays (jittered sizes) costs what
/// the radix queue costs.
pub struct LaneQueue<E> {
    /// Time of the last pop: pushes are `now` + their delay.
    now: u64,
    /// Lanes in use, the first `used` of each array, by decreasing delay (a tie in time pops from
    /// the first): each one's delay, the time of its first event (`u64::MAX` when empty), its
    /// events in time order.
    used: usize,
    delays: [u64; LANES],
    heads: [u64; LANES],
    lanes: [Ring<(u64, E)>; LANES],
    /// Every pending event is in `radix` instead of the lanes.
    spilled: bool,
    radix: RadixQueue<E>,
    len: usize,
}

impl<E> Default for LaneQueue<E> {
    fn default() -> Self {
        LaneQueue {
            now: 0,
            used: 0,
            delays: [0; LANES],
            heads: [u64::MAX; LANES],
            lanes: std::array::from_fn(|_| Ring::default()),
            spilled: false,
            radix: RadixQueue::default(),
            len: 0,
        }
    }
}

impl<E: Copy> LaneQueue<E> {
    /// The lane for `delay`: its own, a new one, or an empty one given to it; None when every lane
    /// holds events of other delays.
    #[inline(always)]
    fn lane_for(&mut self, delay: u64) -> Option<usize> {
        match self.delays[..self.used].iter().position(|&d| d == delay) {
            Some(i) => Some(i),
            None => self.open_lane(delay),
        }
    }

    #[cold]
    fn open_lane(&mut self, delay: u64) -> Option<usize> {
        if self.used == LANES {
            let empty = self.lanes.iter().position(|l| l.is_empty())?;
            self.remove_lane(empty);
        }
        let at = self.delays[..self.used].partition_point(|&d| d > delay);
        // Shift the lanes after `at` up by one; the spare empty lane at `used` takes `at`.
        self.delays[at..=self.used].rotate_right(1);
        self.heads[at..=self.used].rotate_right(1);
        self.lanes[at..=self.used].rotate_right(1);
        self.delays[at] = delay;
        self.heads[at] = u64::MAX;
        self.used += 1;
        Some(at)
    }

    /// Drops empty lane `i`, keeping the others in order.
    fn remove_lane(&mut self, i: usize) {
        self.delays[i..self.used].rotate_left(1);
        self.heads[i..self.used].rotate_left(1);
        self.lanes[i..self.used].rotate_left(1);
        self.used -= 1;
    }

    /// The earliest lane head, ties to the longer delay (the earlier lane).
    #[inline(always)]
    fn pop_lanes(&mut self) -> Option<(u64, E)> {
        let mut best = 0;
        for i in 1..self.used {
            if self.heads[i] < self.heads[best] {
                best = i;
            }
        }
        if self.heads[best] == u64::MAX {
            // Empty, or events at the largest time (saturated): the first lane holding one.
            best = self.lanes.iter().position(|l| !l.is_empty())?;
        }
        let lane = &mut self.lanes[best];
        let event = lane.pop_front();
        self.heads[best] = lane.front().map_or(u64::MAX, |&(t, _)| t);
        event
    }

    /// Moves every lane's events to the radix queue, in the order they would have popped.
    #[cold]
    fn spill(&mut self) {
        while let Some((t, event)) = self.pop_lanes() {
            self.radix.push(Time(t), event);
        }
        self.spilled = true;
    }
}

impl<E: Copy> EventQueue<E> for LaneQueue<E> {
    #[inline]
    fn push(&mut self, time: Time, event: E) {
        let t = time.ps();
        debug_assert!(t >= self.now, "events are never scheduled in the past");
        self.len += 1;
        if !self.spilled {
            if let Some(i) = self.lane_for(t - self.now) {
                let lane = &mut self.lanes[i];
                if lane.is_empty() {
                    self.heads[i] = t;
                }
                lane.push_back((t, event));
                return;
            }
            self.spill();
        }
        self.radix.push(time, event);
    }

    #[inline]
    fn pop(&mut self) -> Option<(Time, E)> {
        let (t, event) = if self.spilled {
            let (t, event) = self.radix.pop()?;
            // Run dry: the lanes (all empty) take the next events again.
            self.spilled = !self.radix.is_empty();
            (t.ps(), event)
        } else {
            self.pop_lanes()?
        };
        self.now = t;
        self.len -= 1;
        Some((Time(t), event))
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring keeps FIFO order through wrap-arounds and through growing while wrapped.
    #[test]
    fn ring_is_a_fifo_across_wraps_and_growth() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (mut ring, mut expected) = (Ring::default(), VecDeque::new());
        for step in 0..20_000u32 {
            // Pushes outnumber pops, so the buffer grows at assorted head positions.
            if rng.random_bool(0.55) {
                ring.push_back(step);
                expected.push_back(step);
            } else {
                assert_eq!(ring.pop_front(), expected.pop_front());
            }
            assert_eq!(ring.front(), expected.front());
            assert_eq!(ring.is_empty(), expected.is_empty());
        }
        assert!(ring.buf.len() > 64, "the ring never grew");
        while let Some(v) = expected.pop_front() {
            assert_eq!(ring.pop_front(), Some(v));
        }
        assert_eq!(ring.pop_front(), None);
    }

    #[test]
    fn bucket_queue_matches_the_heap_on_a_random_load() {
        matches_the_heap(BucketQueue::default());
    }

    #[test]
    fn radix_queue_matches_the_heap_on_a_random_load() {
        matches_the_heap(RadixQueue::default());
    }

    #[test]
    fn lane_queue_matches_the_heap_on_a_random_load() {
        matches_the_heap(LaneQueue::default());
    }

    #[test]
    fn lane_queue_matches_the_heap_with_more_delays_than_lanes() {
        // 14 delays for 8 lanes: lanes are given up and taken again, events move to the radix
        // queue and back to the lanes once it runs dry.
        for seed in 0..20 {
            matches_the_heap_with(LaneQueue::default(), seed, |rng| {
                use rand::Rng;
                [0, 3, 7][rng.random_range(0..3)] * rng.random_range(0..8u64)
            });
        }
    }

    fn matches_the_heap(buckets: impl EventQueue<u32>) {
        // Schedule at now (often) or a little later, with many equal times.
        matches_the_heap_with(buckets, 7, |rng| {
            use rand::Rng;
            [0, 0, 1, 5, 5, 9, 1000, 1 << 20][rng.random_range(0..8)]
        });
    }

    /// Pushes (at the last popped time plus `delay`) and pops at random on `buckets` and on the
    /// binary heap: both pop the same events at the same times.
    fn matches_the_heap_with(
        mut buckets: impl EventQueue<u32>,
        seed: u64,
        delay: impl Fn(&mut rand_chacha::ChaCha8Rng) -> u64,
    ) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut heap = HeapQueue::default();
        let mut now = 0u64;
        let mut next_id = 0u32;
        for _ in 0..20_000 {
            if rng.random_bool(0.55) {
                let t = now + delay(&mut rng);
                heap.push(Time(t), next_id);
                buckets.push(Time(t), next_id);
                next_id += 1;
            } else {
                let (a, b) = (heap.pop(), buckets.pop());
                assert_eq!(a, b);
                if let Some((t, _)) = a {
                    now = t.ps();
                }
            }
            assert_eq!(heap.len(), buckets.len());
        }
        while let Some(a) = heap.pop() {
            assert_eq!(Some(a), buckets.pop());
        }
        assert!(buckets.is_empty());
    }

    #[test]
    fn equal_times_pop_in_scheduling_order() {
        let mut q = HeapQueue::default();
        q.push(Time(5), 'a');
        q.push(Time(1), 'b');
        q.push(Time(5), 'c');
        q.push(Time(1), 'd');
        q.push(Time(3), 'e');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!['b', 'd', 'e', 'a', 'c']);
    }
}
