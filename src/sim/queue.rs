//! The event queue: events ordered by (time, insertion sequence), so that events at equal times run
//! in the order they were scheduled, as DESIGN.md and ASTRA-sim require.
//!
//! Choice of structure, measured by `cargo bench --bench event_queue` on the engine's real load
//! (direct all-to-all on `switch:N`, 1 MiB per pair, astra time model; release build, 2-core machine):
//! std `BinaryHeap` keyed by (time, sequence) against the `priority-queue` crate (which needs the
//! sequence number inside the item because it merges equal items and keeps no FIFO order among
//! equal priorities). N=512: BinaryHeap 0.23 s, priority-queue 0.78 s; N=1024: 1.02 s vs 3.35 s.
//! The heap is kept: it is ~3.3x faster because priority-queue maintains a hash index of every
//! item for its change-priority operation, which the engine never needs.

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
    /// The event that will pop `ahead` pops from now, if the queue can tell cheaply (used to
    /// prefetch the memory it will touch).
    fn peek_ahead(&self, _ahead: usize) -> Option<&E> {
        None
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

    fn peek_ahead(&self, ahead: usize) -> Option<&E> {
        self.current.get(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_queue_matches_the_heap_on_a_random_load() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut heap = HeapQueue::default();
        let mut buckets = BucketQueue::default();
        let mut now = 0u64;
        let mut next_id = 0u32;
        for _ in 0..20_000 {
            if rng.random_bool(0.55) {
                // Schedule at now (often) or a little later, with many equal times.
                let t = now + [0, 0, 1, 5, 5, 9][rng.random_range(0..6)];
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
