//! Compares event-queue structures on the engine's real load: direct all-to-all on `switch:N`
//! (1 MiB per pair, 50 GiB/s, 500 ns), in both time models, and a jittered variant whose events
//! fall on distinct times. Run: `cargo bench --bench event_queue`.

use std::time::Instant;

use collsim::algorithms::{self, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::schedule::{Schedule, Transfer};
use collsim::sim::{
    simulate_with_queue, BucketQueue, Event, EventQueue, HeapQueue, LaneQueue, RadixQueue,
    SimOptions, TimeModel,
};
use collsim::topology::TopologyOptions;
use collsim::units::Time;
use priority_queue::PriorityQueue;

/// The `priority-queue` crate, with the sequence number inside the item (it merges equal items).
#[derive(Default)]
struct PqQueue {
    queue: PriorityQueue<(u64, Slot), std::cmp::Reverse<(u64, u64)>>,
    seq: u64,
}

/// `Event` is not `Hash`; the crate needs hashable items, so events are stored by sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Slot(u64);

struct PqEvents {
    inner: PqQueue,
    events: std::collections::HashMap<u64, Event>,
}

impl EventQueue<Event> for PqEvents {
    fn push(&mut self, time: Time, event: Event) {
        let seq = self.inner.seq;
        self.inner.seq += 1;
        self.events.insert(seq, event);
        self.inner
            .queue
            .push((seq, Slot(seq)), std::cmp::Reverse((time.ps(), seq)));
    }

    fn pop(&mut self) -> Option<(Time, Event)> {
        let ((seq, _), std::cmp::Reverse((time, _))) = self.inner.queue.pop()?;
        Some((Time(time), self.events.remove(&seq).unwrap()))
    }

    fn len(&self) -> usize {
        self.inner.queue.len()
    }
}

fn jittered(n: u32) -> Schedule {
    let mut s = Schedule::new();
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let bytes = (1 << 20) + ((7919 * i as u64 + 104729 * j as u64) % 65536);
            s.push(
                Transfer {
                    src: i,
                    dst: j,
                    bytes,
                },
                &[],
            );
        }
    }
    s
}

fn time<Q: EventQueue<Event>>(
    label: &str,
    schedule: &Schedule,
    n: u32,
    model: TimeModel,
    queue: Q,
) -> f64 {
    let topology = TopologyOptions::new(format!("switch:{n}"))
        .with_links("50GiB/s", "500ns")
        .build()
        .unwrap();
    let options = SimOptions {
        time_model: model,
        ..SimOptions::default()
    };
    let start = Instant::now();
    let result = simulate_with_queue(&topology, schedule, &options, &mut (), queue).unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "  {label:<14} {secs:>7.3} s   (finish {}, {} events)",
        result.finish, result.events
    );
    secs
}

fn main() {
    for n in [256u32, 512, 1024] {
        let c = Collective::new(
            CollectiveKind::AllToAll,
            (0..n).collect(),
            (n as u64) << 20,
            1,
            None,
        )
        .unwrap();
        let topology = TopologyOptions::new(format!("switch:{n}")).build().unwrap();
        let regular = algorithms::generate(Algorithm::Direct, &topology, &c).unwrap();
        let irregular = jittered(n);
        for (name, schedule) in [("regular", &regular), ("jittered", &irregular)] {
            for model in [TimeModel::Exact, TimeModel::Astra] {
                println!("switch:{n} {name} all-to-all, {} model", model.name());
                time("LaneQueue", schedule, n, model, LaneQueue::default());
                time("RadixQueue", schedule, n, model, RadixQueue::default());
                time("BucketQueue", schedule, n, model, BucketQueue::default());
                time("BinaryHeap", schedule, n, model, HeapQueue::default());
                if n <= 512 {
                    let pq = PqEvents {
                        inner: PqQueue::default(),
                        events: Default::default(),
                    };
                    time("priority-queue", schedule, n, model, pq);
                }
            }
        }
    }
}
