//! The event-driven engine: link FIFOs, store-and-forward hops, dependency release.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::queue::{EventQueue, RadixQueue};
use super::SimOptions;
use crate::memory::prefetch;
use crate::schedule::{Op, Schedule, TransferIndex};
use crate::topology::{LinkId, NodeId, Router, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// What happens at an instant. Kept small: the queue holds a few per busy link.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A transfer's last byte reached `node`.
    Arrive {
        transfer: TransferIndex,
        node: NodeId,
        dst: NodeId,
        bytes: u64,
    },
    /// A link finished serialising its current message.
    LinkFree { link: LinkId },
    /// A transfer's endpoint/reduction delay has passed: it is complete.
    Complete { transfer: TransferIndex },
    /// Issue every transfer that has become ready, in list order.
    Issue,
}

/// Receives progress while a long simulation runs.
pub trait Observer {
    /// Called every so many completed transfers, and once at the end.
    fn progress(&mut self, _completed: u64, _total: u64) {}
}

impl Observer for () {}

/// What a simulation measured.
#[derive(Clone, Debug, Default)]
pub struct SimResult {
    /// Completion time of the last transfer: the collective time.
    pub finish: Time,
    /// Per transfer: when it was issued (empty unless recorded).
    pub issued: Vec<Time>,
    /// Per transfer: when it completed at its destination (empty unless recorded).
    pub completed: Vec<Time>,
    /// Per link: bytes carried.
    pub link_bytes: Vec<u64>,
    /// Per link: time spent serialising messages.
    pub link_busy: Vec<Time>,
    /// Per link: the most messages it held at once, the one being sent included (1: a message
    /// never waited there; 0: unused).
    pub link_max_queue: Vec<u32>,
    /// Per link: time during which a message waited for it.
    pub link_queued: Vec<Time>,
    /// Per link: busy intervals, back-to-back ones merged (empty unless recorded).
    pub busy_intervals: Vec<Vec<(Time, Time)>>,
    /// Events processed.
    pub events: u64,
    /// Messages put on links (a transfer over three links counts three).
    pub hops: u64,
}

/// Everything a hop touches on its link, in one cache line.
#[repr(align(64))]
struct LinkState {
    pending: VecDeque<TransferIndex>,
    bandwidth: Bandwidth,
    latency: Time,
    far_end: NodeId,
    busy: bool,
    /// Since when `pending` has been non-empty.
    queued_since: Time,
}

/// The links of every explicitly routed transfer, and how far along its route each one is.
struct Routes {
    start: Vec<u32>,
    links: Vec<LinkId>,
    taken: Vec<u32>,
}

impl Routes {
    fn new(topology: &Topology, schedule: &Schedule) -> Routes {
        let n = schedule.len();
        let mut start = Vec::with_capacity(n + 1);
        let mut links = Vec::new();
        start.push(0);
        for t in 0..n as TransferIndex {
            if let Some(route) = schedule.route(t) {
                links.extend(route.windows(2).map(|hop| {
                    topology
                        .link_between(hop[0], hop[1])
                        .expect("routes were checked against the topology")
                }));
            }
            start.push(links.len() as u32);
        }
        Routes {
            start,
            links,
            taken: vec![0; n],
        }
    }

    /// The next link of transfer `t`'s explicit route, if it has one.
    #[inline]
    fn next(&mut self, t: TransferIndex) -> Option<LinkId> {
        let i = t as usize;
        let (first, end) = (self.start[i], self.start[i + 1]);
        if first == end {
            return None;
        }
        let hop = first + self.taken[i];
        self.taken[i] += 1;
        debug_assert!(hop < end, "a routed transfer never leaves its route");
        Some(self.links[hop as usize])
    }
}

struct Engine<'a, Q> {
    schedule: &'a Schedule,
    router: &'a Router<'a>,
    routes: Option<Routes>,
    options: &'a SimOptions,
    links: Vec<LinkState>,
    queue: Q,
    waiting: Vec<u32>,
    dependents: (Vec<u32>, Vec<TransferIndex>),
    ready: BinaryHeap<Reverse<TransferIndex>>,
    issue_pending: bool,
    completed_count: u64,
    result: SimResult,
}

/// Simulates a checked schedule on a topology with the default event queue.
pub fn simulate(
    topology: &Topology,
    schedule: &Schedule,
    options: &SimOptions,
    observer: &mut dyn Observer,
) -> Result<SimResult, Error> {
    simulate_with_queue(topology, schedule, options, observer, RadixQueue::default())
}

/// Simulates with a caller-chosen event queue (for benchmarking queue structures).
pub fn simulate_with_queue<Q: EventQueue<Event>>(
    topology: &Topology,
    schedule: &Schedule,
    options: &SimOptions,
    observer: &mut dyn Observer,
    queue: Q,
) -> Result<SimResult, Error> {
    schedule.check(topology)?;
    let router = Router::with_routing(topology, schedule.destinations(), options.routing)?;
    let n = schedule.len();
    let links = topology
        .links()
        .iter()
        .map(|l| LinkState {
            busy: false,
            queued_since: Time::ZERO,
            far_end: l.dst,
            pending: VecDeque::new(),
            bandwidth: l.bandwidth,
            latency: l.latency,
        })
        .collect();
    let link_count = topology.links().len();
    let waiting = if schedule.has_deps() {
        (0..n as TransferIndex)
            .map(|t| schedule.deps(t).len() as u32)
            .collect()
    } else {
        Vec::new()
    };
    let mut engine = Engine {
        schedule,
        router: &router,
        routes: schedule
            .has_routes()
            .then(|| Routes::new(topology, schedule)),
        options,
        links,
        queue,
        waiting,
        dependents: if schedule.has_deps() {
            schedule.dependents()
        } else {
            (Vec::new(), Vec::new())
        },
        ready: BinaryHeap::new(),
        issue_pending: false,
        completed_count: 0,
        result: SimResult {
            issued: if options.record_transfers {
                vec![Time::ZERO; n]
            } else {
                Vec::new()
            },
            completed: if options.record_transfers {
                vec![Time::ZERO; n]
            } else {
                Vec::new()
            },
            link_bytes: vec![0; link_count],
            link_busy: vec![Time::ZERO; link_count],
            link_max_queue: vec![0; link_count],
            link_queued: vec![Time::ZERO; link_count],
            busy_intervals: if options.record_busy_intervals {
                vec![Vec::new(); link_count]
            } else {
                Vec::new()
            },
            ..SimResult::default()
        },
    };
    engine.run(observer)?;
    check_range(topology, &engine.result)?;
    Ok(engine.result)
}

/// Times saturate at [`Time::MAX`] and byte counts at `u64::MAX` instead of wrapping; a run that
/// reached either is refused, naming what overflowed.
fn check_range(topology: &Topology, result: &SimResult) -> Result<(), Error> {
    if !result.finish.fits() {
        return Err(Error::input(
            "the simulated time passes the largest collsim represents (2^64 ps, about 213 \
             days): give a smaller size, faster links or shorter latencies",
        ));
    }
    if let Some(l) = result.link_bytes.iter().position(|&b| b == u64::MAX) {
        let link = topology.link(l as LinkId);
        return Err(Error::input(format!(
            "link {} -> {} would carry more than {} bytes (2^64): give smaller transfers",
            link.src,
            link.dst,
            u64::MAX
        )));
    }
    Ok(())
}

const PROGRESS_EVERY: u64 = 1 << 20;

/// The transfer an event completes: an arrival at the transfer's destination, or the end of
/// its endpoint delay.
fn completing(event: &Event) -> Option<TransferIndex> {
    match *event {
        Event::Arrive {
            transfer,
            node,
            dst,
            ..
        } if node == dst => Some(transfer),
        Event::Complete { transfer } => Some(transfer),
        _ => None,
    }
}

/// The transfers that wait for `t` (CSR offsets and list; empty when nothing has dependencies).
fn dependents_of(
    dependents: &(Vec<u32>, Vec<TransferIndex>),
    t: TransferIndex,
) -> &[TransferIndex] {
    let (start, list) = dependents;
    match (start.get(t as usize), start.get(t as usize + 1)) {
        (Some(&lo), Some(&hi)) => &list[lo as usize..hi as usize],
        _ => &[],
    }
}

/// How many events ahead each prefetch stage looks.
const PREFETCH_DISTANCE: usize = 8;

impl<Q: EventQueue<Event>> Engine<'_, Q> {
    fn run(&mut self, observer: &mut dyn Observer) -> Result<(), Error> {
        let n = self.schedule.len() as u64;
        // Transfers without dependencies are issued at time zero, in list order.
        for t in 0..self.schedule.len() as TransferIndex {
            if self.waiting.is_empty() || self.waiting[t as usize] == 0 {
                self.issue(t, Time::ZERO);
            }
        }
        let mut next_report = PROGRESS_EVERY;
        while let Some((now, event)) = self.queue.pop() {
            self.result.events += 1;
            self.prefetch_upcoming();
            match event {
                Event::Arrive {
                    transfer,
                    node,
                    dst,
                    bytes,
                } => self.arrive(transfer, node, dst, bytes, now),
                Event::LinkFree { link } => {
                    let state = &mut self.links[link as usize];
                    state.busy = false;
                    if let Some(next) = state.pending.pop_front() {
                        if state.pending.is_empty() {
                            let l = link as usize;
                            self.result.link_queued[l] =
                                self.result.link_queued[l] + (now - state.queued_since);
                        }
                        let transfer = self.schedule.transfer(next);
                        self.transmit(link, next, transfer.dst, transfer.bytes, now);
                    }
                }
                Event::Complete { transfer } => self.complete(transfer, now),
                Event::Issue => {
                    self.issue_pending = false;
                    while let Some(Reverse(t)) = self.ready.pop() {
                        self.issue(t, now);
                    }
                }
            }
            if self.completed_count >= next_report {
                observer.progress(self.completed_count, n);
                next_report += PROGRESS_EVERY;
            }
        }
        observer.progress(self.completed_count, n);
        if self.completed_count != n {
            let stuck = (0..n as TransferIndex)
                .find(|&t| !self.waiting.is_empty() && self.waiting[t as usize] > 0)
                .map_or_else(|| "?".to_string(), |t| self.schedule.id(t).to_string());
            return Err(Error::input(format!(
                "simulation ended with {} of {n} transfers complete; transfer {stuck} never became ready",
                self.completed_count
            )));
        }
        Ok(())
    }

    /// Software pipelining over the events that follow: a link that frees soon has its state, then
    /// its queue head, then the queued transfer fetched into cache before the event is handled;
    /// a transfer that completes soon has its dependents' list, then their waiting counts.
    /// On large networks these are cache misses that dominate the run time otherwise.
    #[inline(always)]
    fn prefetch_upcoming(&self) {
        match self.queue.peek_ahead(PREFETCH_DISTANCE * 3) {
            Some(Event::LinkFree { link }) => prefetch(&self.links[*link as usize]),
            Some(Event::Arrive {
                transfer,
                node,
                dst,
                ..
            }) if node != dst => {
                let link = self.router.next_link_of(*transfer, *node, *dst);
                prefetch(&self.links[link as usize]);
            }
            Some(event) => {
                if let Some(start) =
                    completing(event).and_then(|t| self.dependents.0.get(t as usize))
                {
                    prefetch(start);
                }
            }
            None => {}
        }
        match self.queue.peek_ahead(PREFETCH_DISTANCE * 2) {
            Some(Event::LinkFree { link }) => {
                if let Some(head) = self.links[*link as usize].pending.as_slices().0.first() {
                    prefetch(head);
                }
            }
            Some(event) => {
                if let Some(first) = completing(event).and_then(|t| self.dependents_of(t).first()) {
                    prefetch(first);
                }
            }
            None => {}
        }
        match self.queue.peek_ahead(PREFETCH_DISTANCE) {
            Some(Event::LinkFree { link }) => {
                if let Some(&next) = self.links[*link as usize].pending.front() {
                    prefetch(&self.schedule.transfers()[next as usize]);
                }
            }
            Some(event) => {
                for &d in completing(event).map_or(&[][..], |t| self.dependents_of(t)) {
                    prefetch(&self.waiting[d as usize]);
                }
            }
            None => {}
        }
    }

    /// The transfers that wait for `t`, as [`Engine::complete`] releases them.
    fn dependents_of(&self, t: TransferIndex) -> &[TransferIndex] {
        dependents_of(&self.dependents, t)
    }

    fn issue(&mut self, t: TransferIndex, now: Time) {
        if self.options.record_transfers {
            self.result.issued[t as usize] = now;
        }
        if let Some(duration) = self.schedule.wait(t) {
            self.queue
                .push(now + duration, Event::Complete { transfer: t });
            return;
        }
        let transfer = self.schedule.transfer(t);
        self.forward(t, transfer.src, transfer.dst, transfer.bytes, now);
    }

    /// Puts transfer `t`, now at `at`, on its next link (or that link's queue).
    fn forward(&mut self, t: TransferIndex, at: NodeId, dst: NodeId, bytes: u64, now: Time) {
        let link = match self.routes.as_mut().and_then(|r| r.next(t)) {
            Some(link) => link,
            None => self.router.next_link_of(t, at, dst),
        };
        let state = &mut self.links[link as usize];
        if state.busy {
            if state.pending.is_empty() {
                state.queued_since = now;
            }
            state.pending.push_back(t);
            let held = state.pending.len() as u32 + 1;
            let most = &mut self.result.link_max_queue[link as usize];
            *most = (*most).max(held);
        } else {
            self.transmit(link, t, dst, bytes, now);
        }
    }

    fn transmit(&mut self, link: LinkId, t: TransferIndex, dst: NodeId, bytes: u64, now: Time) {
        let state = &mut self.links[link as usize];
        state.busy = true;
        let (free, arrive) = self
            .options
            .time_model
            .delays(bytes, state.bandwidth, state.latency);
        let node = state.far_end;
        self.result.hops += 1;
        self.queue.push(
            now + arrive,
            Event::Arrive {
                transfer: t,
                node,
                dst,
                bytes,
            },
        );
        self.queue.push(now + free, Event::LinkFree { link });
        let l = link as usize;
        self.result.link_max_queue[l] = self.result.link_max_queue[l].max(1);
        self.result.link_bytes[l] = self.result.link_bytes[l].saturating_add(bytes);
        self.result.link_busy[l] = self.result.link_busy[l] + free;
        if self.options.record_busy_intervals && free > Time::ZERO {
            let intervals = &mut self.result.busy_intervals[l];
            match intervals.last_mut() {
                Some(last) if last.1 == now => last.1 = now + free,
                _ => intervals.push((now, now + free)),
            }
        }
    }

    fn arrive(&mut self, t: TransferIndex, node: NodeId, dst: NodeId, bytes: u64, now: Time) {
        if node != dst {
            self.forward(t, node, dst, bytes, now);
            return;
        }
        let mut extra = self.options.endpoint_delay;
        if self.schedule.op(t) == Op::Reduce {
            extra = extra + self.options.reduction_delay;
            if let Some(bw) = self.options.reduce_bandwidth {
                extra = extra + bw.transmit_time(bytes);
            }
        }
        if extra > Time::ZERO {
            self.queue
                .push(now + extra, Event::Complete { transfer: t });
        } else {
            self.complete(t, now);
        }
    }

    fn complete(&mut self, t: TransferIndex, now: Time) {
        self.completed_count += 1;
        self.result.finish = self.result.finish.max(now);
        if self.options.record_transfers {
            self.result.completed[t as usize] = now;
        }
        if self.waiting.is_empty() {
            return;
        }
        for &d in dependents_of(&self.dependents, t) {
            self.waiting[d as usize] -= 1;
            if self.waiting[d as usize] == 0 {
                self.ready.push(Reverse(d));
                if !self.issue_pending {
                    self.issue_pending = true;
                    self.queue.push(now, Event::Issue);
                }
            }
        }
    }
}
