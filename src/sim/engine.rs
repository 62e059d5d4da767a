//! The event-driven engine: link FIFOs, store-and-forward hops, dependency release.

use super::queue::{EventQueue, LaneQueue};
use super::waiting::{Middle, Waiting};
use super::SimOptions;
use crate::memory::prefetch;
use crate::schedule::{Op, Schedule, Transfer, TransferIndex};
use crate::topology::{Link, LinkId, NodeId, Router, Topology};
use crate::units::Time;
use crate::Error;

/// What happens at an instant, packed into 8 bytes so that a queue entry (time and event) is 16:
/// the queue moves every event a few times, and its traffic was the engine's largest cost.
///
/// Bits 62-63 are the kind; an arrival carries its transfer (bits 0-31) and the link it goes on
/// to (bits 32-61, `Event::AT_DESTINATION` where it has arrived), worked out as the transfer
/// starts the hop, its record at hand: an arrival that joins a busy link's queue then reads
/// nothing but that link's state (where it read the transfer's record, then the link's, one miss
/// behind the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event(u64);

/// An [`Event`] unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A transfer's last byte crossed a link; its route goes on over `next` from there (None: it
    /// reached its destination).
    Arrive {
        transfer: TransferIndex,
        next: Option<LinkId>,
    },
    /// A link finished serialising its current message.
    LinkFree { link: LinkId },
    /// A transfer's endpoint/reduction delay has passed: it is complete.
    Complete { transfer: TransferIndex },
    /// Issue every transfer that has become ready, in list order.
    Issue,
}

/// Links an [`Event`] can name: 30 bits, one value taken by `Event::AT_DESTINATION`.
pub const MAX_LINKS: usize = (1 << 30) - 1;

impl Event {
    const KIND: u32 = 62;
    const ARRIVE: u64 = 0;
    const LINK_FREE: u64 = 1;
    const COMPLETE: u64 = 2;
    const ISSUE: u64 = 3;
    /// An arrival's link field where the transfer has reached its destination.
    const AT_DESTINATION: u32 = MAX_LINKS as u32;

    #[inline(always)]
    pub fn arrive(transfer: TransferIndex, next: Option<LinkId>) -> Event {
        let next = next.unwrap_or(Self::AT_DESTINATION);
        Event(Self::ARRIVE << Self::KIND | (next as u64) << 32 | transfer as u64)
    }

    #[inline(always)]
    pub fn link_free(link: LinkId) -> Event {
        Event(Self::LINK_FREE << Self::KIND | (link as u64) << 32)
    }

    #[inline(always)]
    pub fn complete(transfer: TransferIndex) -> Event {
        Event(Self::COMPLETE << Self::KIND | transfer as u64)
    }

    pub const ISSUE_ALL: Event = Event(Self::ISSUE << Self::KIND);

    #[inline(always)]
    pub fn kind(self) -> EventKind {
        let transfer = self.0 as u32;
        let link = (self.0 >> 32) as u32 & ((1 << 30) - 1);
        match self.0 >> Self::KIND {
            Self::ARRIVE => EventKind::Arrive {
                transfer,
                next: (link != Self::AT_DESTINATION).then_some(link),
            },
            Self::LINK_FREE => EventKind::LinkFree { link },
            Self::COMPLETE => EventKind::Complete { transfer },
            _ => EventKind::Issue,
        }
    }
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
    /// Per transfer: when it completed at its destination (empty unless recorded). When each
    /// was issued is not kept: it is when its last dependency completed ([`SimResult::issued`]),
    /// and a second array as large as this one (0.5 GB for a 67M-transfer all-to-all) cost its
    /// size again in fresh memory, the dearest part of writing `transfers.parquet`.
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

impl SimResult {
    /// When transfer `t` was issued: when the last of its dependencies completed (the engine
    /// issues a transfer at that instant), time zero for one without. Needs the completions
    /// recorded.
    pub fn issued(&self, schedule: &Schedule, t: TransferIndex) -> Time {
        schedule
            .deps(t)
            .iter()
            .map(|&d| self.completed[d as usize])
            .max()
            .unwrap_or(Time::ZERO)
    }
}

/// What a hop touches on its link, in one cache line: the first and last runs of waiting messages
/// (the runs between wait in [`Engine::middles`], touched only where a run breaks), the messages
/// held, the far end, the delays of the last message size sent (collectives send one size over
/// and over; computing delays costs two floating-point divisions) and how many messages of that
/// size it has sent since its totals were last brought up to date (the totals, in
/// [`Engine::tallies`], then change only when the size does, not on every hop).
#[repr(align(64))]
struct LinkState {
    /// The transfers waiting, but for the runs in the link's [`Middle`].
    waiting: Waiting,
    /// Messages at the link, the one being sent included: 0 when the link is free.
    held: u32,
    far_end: NodeId,
    cached_bytes: u64,
    cached_free: Time,
    cached_arrive: Time,
    /// Messages of `cached_bytes` sent and not yet in the link's [`Tally`].
    untallied: u32,
    /// The most messages held at once.
    most_held: u32,
}

// A hop touches one cache line of link state.
const _: () = assert!(std::mem::size_of::<LinkState>() == 64);

/// A link's totals: bytes carried (saturating) and time spent serialising.
#[derive(Clone, Copy, Default)]
struct Tally {
    bytes: u64,
    busy: Time,
}

impl Tally {
    /// Adds `count` messages of `bytes` taking `free` each: the same saturated sums as adding
    /// them one by one, since every term is non-negative.
    fn add(&mut self, count: u32, bytes: u64, free: Time) {
        self.bytes = self
            .bytes
            .saturating_add(bytes.saturating_mul(count as u64));
        self.busy = self.busy + Time(free.ps().saturating_mul(count as u64));
    }
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

    /// The link [`Routes::next`] will give for `t`, without taking it.
    #[inline]
    fn peek(&self, t: TransferIndex) -> Option<LinkId> {
        let i = t as usize;
        let hop = self.start[i] + self.taken[i];
        (hop < self.start[i + 1]).then(|| self.links[hop as usize])
    }
}

struct Engine<'a, Q> {
    schedule: &'a Schedule,
    router: &'a Router<'a>,
    routes: Option<Routes>,
    options: &'a SimOptions,
    links: Vec<LinkState>,
    /// The topology's links: bandwidth and latency, read when a message size is not the cached one.
    topology_links: &'a [Link],
    /// Per link: its totals up to the messages its state has not tallied yet.
    tallies: Vec<Tally>,
    /// Per link: since when a message has been waiting there.
    queued_since: Vec<Time>,
    /// Per link: the runs waiting between the first and the last ([`LinkState::waiting`]).
    middles: Vec<Middle>,
    /// Whether link queues fold runs of indices ([`Middle::folds`]).
    fold_runs: bool,
    queue: Q,
    /// Per transfer, how many of its dependencies have not completed; empty when no transfer has
    /// more than one (completing a transfer then readies every dependent: 4 bytes a transfer
    /// saved on the largest synthesized schedules).
    unmet: Vec<u32>,
    dependents: (Vec<u32>, Vec<TransferIndex>),
    /// Transfers whose dependencies completed at this instant, in completion order.
    ready: Vec<TransferIndex>,
    /// The transfers being issued at one instant, in list order (kept for its allocation).
    batch: Vec<TransferIndex>,
    issue_pending: bool,
    completed_count: u64,
    /// Nothing happens when a transfer reaches its destination but its completion (no transfer
    /// waits for another, no endpoint or reduction delay): it completes as its last hop starts,
    /// without an arrival event (a quarter of the events of a switch all-to-all).
    completes_on_arrival: bool,
    result: SimResult,
}

/// Simulates a schedule on a topology with the default event queue, after checking the schedule
/// against the topology.
pub fn simulate(
    topology: &Topology,
    schedule: &Schedule,
    options: &SimOptions,
    observer: &mut dyn Observer,
) -> Result<SimResult, Error> {
    schedule.check(topology)?;
    simulate_checked(topology, schedule, options, observer)
}

/// Simulates a schedule that has passed [`Schedule::check`] against this topology (callers that
/// check it once for several uses; an unchecked schedule may panic here).
pub fn simulate_checked(
    topology: &Topology,
    schedule: &Schedule,
    options: &SimOptions,
    observer: &mut dyn Observer,
) -> Result<SimResult, Error> {
    run_engine(topology, schedule, options, observer, LaneQueue::default())
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
    run_engine(topology, schedule, options, observer, queue)
}

fn run_engine<Q: EventQueue<Event>>(
    topology: &Topology,
    schedule: &Schedule,
    options: &SimOptions,
    observer: &mut dyn Observer,
    queue: Q,
) -> Result<SimResult, Error> {
    let link_count = topology.links().len();
    if link_count > MAX_LINKS {
        return Err(Error::input(format!(
            "{} has {link_count} links; the simulator handles at most {MAX_LINKS}",
            topology.name(),
        )));
    }
    let router = Router::with_routing(topology, schedule.destinations(), options.routing)?;
    let n = schedule.len();
    let links = topology
        .links()
        .iter()
        .map(|l| {
            let (cached_free, cached_arrive) = options.time_model.link_delays(l, 0);
            LinkState {
                waiting: Waiting::default(),
                held: 0,
                far_end: l.dst,
                cached_bytes: 0,
                cached_free,
                cached_arrive,
                untallied: 0,
                most_held: 0,
            }
        })
        .collect();
    let unmet = if schedule.has_deps() && !schedule.deps_at_most_one_each() {
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
        topology_links: topology.links(),
        tallies: vec![Tally::default(); link_count],
        queued_since: vec![Time::ZERO; link_count],
        middles: (0..link_count).map(|_| Middle::default()).collect(),
        fold_runs: Middle::folds(n),
        queue,
        unmet,
        dependents: if schedule.has_deps() {
            schedule.dependents()
        } else {
            (Vec::new(), Vec::new())
        },
        ready: Vec::new(),
        batch: Vec::new(),
        issue_pending: false,
        completed_count: 0,
        completes_on_arrival: !schedule.has_deps()
            && options.endpoint_delay == Time::ZERO
            && !schedule.has_reductions(),
        result: SimResult {
            completed: if options.record_transfers {
                crate::memory::zeroed_prefaulted(n)
            } else {
                Vec::new()
            },
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
    for (state, tally) in engine.links.iter().zip(&mut engine.tallies) {
        tally.add(state.untallied, state.cached_bytes, state.cached_free);
    }
    engine.result.link_bytes = engine.tallies.iter().map(|t| t.bytes).collect();
    engine.result.link_busy = engine.tallies.iter().map(|t| t.busy).collect();
    engine.result.link_max_queue = engine.links.iter().map(|l| l.most_held).collect();
    check_range(topology, &engine.result)?;
    Ok(engine.result)
}

/// Times saturate at [`Time::MAX`] and byte counts at `u64::MAX` instead of wrapping; a run that
/// reached either is refused, naming what overflowed.
pub(super) fn check_range(topology: &Topology, result: &SimResult) -> Result<(), Error> {
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

/// How many transfers ahead each stage of the issue batch's prefetching looks.
const PREFETCH_DISTANCE: usize = 8;

impl<Q: EventQueue<Event>> Engine<'_, Q> {
    fn run(&mut self, observer: &mut dyn Observer) -> Result<(), Error> {
        let n = self.schedule.len() as u64;
        self.issue_at_zero();
        let mut next_report = PROGRESS_EVERY;
        while let Some((now, event)) = self.queue.pop() {
            self.result.events += 1;
            match event.kind() {
                EventKind::Arrive { transfer, next } => self.arrive(transfer, next, now),
                EventKind::LinkFree { link } => self.link_free(link, now),
                EventKind::Complete { transfer } => self.complete(transfer, now),
                EventKind::Issue => self.issue_ready(now),
            }
            if self.completed_count >= next_report {
                observer.progress(self.completed_count, n);
                next_report += PROGRESS_EVERY;
            }
        }
        observer.progress(self.completed_count, n);
        if self.completed_count != n {
            let stuck = (0..n as TransferIndex)
                .find(|&t| self.unmet.get(t as usize).is_some_and(|&u| u > 0))
                .map_or_else(|| "?".to_string(), |t| self.schedule.id(t).to_string());
            return Err(Error::input(format!(
                "simulation ended with {} of {n} transfers complete; transfer {stuck} never became ready",
                self.completed_count
            )));
        }
        Ok(())
    }

    /// Issues the transfers without dependencies at time zero, in list order. Consecutive ones
    /// that start on one link (a source's row of an all-to-all, tens of millions of transfers in
    /// all) are put on it as one run, as [`Engine::forward`] would put them one by one.
    fn issue_at_zero(&mut self) {
        let n = self.schedule.len() as TransferIndex;
        let simple = self.routes.is_none() && !self.schedule.has_waits();
        // The run being gathered: its link, first transfer and length.
        let mut run: Option<(LinkId, TransferIndex, u32)> = None;
        for t in 0..n {
            if !self.schedule.deps(t).is_empty() {
                continue;
            }
            if !simple {
                self.issue(t, Time::ZERO);
                continue;
            }
            let (src, dst) = self.schedule.ends(t);
            let link = self.router.next_link_of(t, src, dst);
            match &mut run {
                Some((l, first, len)) if *l == link && *first + *len == t => *len += 1,
                _ => {
                    if let Some(done) = run.replace((link, t, 1)) {
                        self.put_run(done);
                    }
                }
            }
        }
        if let Some(done) = run {
            self.put_run(done);
        }
    }

    /// Puts transfers `first..first + len`, just issued at time zero, on `link`: the first as
    /// [`Engine::forward`] puts any transfer, the rest behind it in one step.
    fn put_run(&mut self, (link, first, len): (LinkId, TransferIndex, u32)) {
        let Transfer { src, dst, bytes } = self.schedule.transfer(first);
        self.forward(first, src, dst, bytes, Time::ZERO);
        if len == 1 {
            return;
        }
        let l = link as usize;
        let state = &mut self.links[l];
        state.held += len - 1;
        state.most_held = state.most_held.max(state.held);
        state
            .waiting
            .push_consecutive(&mut self.middles[l], first + 1, len - 1, self.fold_runs);
        // `queued_since` is already time zero.
    }

    /// Issues every transfer that became ready at `now`, in list order. Issuing one never makes
    /// another ready, so the batch is known in full: each transfer's record, then its first link,
    /// then the tail of that link's queue are fetched a few transfers ahead of its turn (a batch's
    /// transfers are scattered over the schedule and its links over the network).
    fn issue_ready(&mut self, now: Time) {
        const D: usize = PREFETCH_DISTANCE;
        self.issue_pending = false;
        // Sorted once per instant: a heap kept in order as they arrive cost a log-depth walk
        // through scattered memory per transfer.
        let mut batch = std::mem::replace(&mut self.ready, std::mem::take(&mut self.batch));
        self.ready.clear();
        batch.sort_unstable();
        // First links of the transfers D and 2D ahead, by position modulo 4D.
        let mut first_links = [LinkId::MAX; 4 * D];
        for (i, &t) in batch.iter().enumerate() {
            if let Some(&ahead) = batch.get(i + 3 * D) {
                self.schedule.prefetch_transfer(ahead);
                if let Some(routes) = &self.routes {
                    prefetch(&routes.start[ahead as usize]);
                    prefetch(&routes.taken[ahead as usize]);
                }
            }
            if let Some(&ahead) = batch.get(i + 2 * D) {
                let link = self.first_link(ahead);
                if let Some(link) = link {
                    prefetch(&self.links[link as usize]);
                }
                first_links[(i + 2 * D) % (4 * D)] = link.unwrap_or(LinkId::MAX);
            }
            if i + D < batch.len() {
                let link = first_links[(i + D) % (4 * D)];
                if let Some(last) = self.middles.get(link as usize).and_then(Middle::back) {
                    prefetch(last);
                }
            }
            self.issue(t, now);
        }
        self.batch = batch;
    }

    /// The link transfer `t` is issued on (None for a local wait).
    #[inline(always)]
    fn first_link(&self, t: TransferIndex) -> Option<LinkId> {
        let (src, dst) = self.schedule.ends(t);
        (src != dst).then(|| self.peek_link(t, src, dst))
    }

    /// The link [`Engine::forward`] will put transfer `t`, now at `at`, on, without advancing its
    /// route: for fetching that link's state ahead.
    #[inline(always)]
    fn peek_link(&self, t: TransferIndex, at: NodeId, dst: NodeId) -> LinkId {
        self.routes
            .as_ref()
            .and_then(|r| r.peek(t))
            .unwrap_or_else(|| self.router.next_link_of(t, at, dst))
    }

    fn issue(&mut self, t: TransferIndex, now: Time) {
        if self.options.record_transfers {
            debug_assert_eq!(
                self.result.issued(self.schedule, t),
                now,
                "transfer {t} was issued when its last dependency completed"
            );
        }
        if let Some(duration) = self.schedule.wait(t) {
            self.queue.push(now + duration, Event::complete(t));
            return;
        }
        let transfer = self.schedule.transfer(t);
        self.forward(t, transfer.src, transfer.dst, transfer.bytes, now);
    }

    /// Puts transfer `t`, now at `at`, on its next link (or that link's queue).
    fn forward(&mut self, t: TransferIndex, at: NodeId, dst: NodeId, bytes: u64, now: Time) {
        let link = self.next_link(t, at, dst);
        self.enter(link, t, Some((bytes, dst)), now);
    }

    /// The link transfer `t`, at `at`, takes next: its route's, or the router's choice.
    #[inline(always)]
    fn next_link(&mut self, t: TransferIndex, at: NodeId, dst: NodeId) -> LinkId {
        match self.routes.as_mut().and_then(|r| r.next(t)) {
            Some(link) => link,
            None => self.router.next_link_of(t, at, dst),
        }
    }

    /// Puts transfer `t` on `link`, or in the link's queue; `record` is its size and destination
    /// when the caller has them (else they are read if the link is free).
    #[inline(always)]
    fn enter(&mut self, link: LinkId, t: TransferIndex, record: Option<(u64, NodeId)>, now: Time) {
        let l = link as usize;
        let state = &mut self.links[l];
        state.held += 1;
        let held = state.held;
        state.most_held = state.most_held.max(held);
        if held == 1 {
            let (bytes, dst) = record.unwrap_or_else(|| {
                let Transfer { bytes, dst, .. } = self.schedule.transfer(t);
                (bytes, dst)
            });
            self.transmit(link, t, bytes, dst, now);
            return;
        }
        state.waiting.push(&mut self.middles[l], t, self.fold_runs);
        if held == 2 {
            self.queued_since[l] = now;
        }
    }

    /// The link finished its message: the next waiting one, if any, starts.
    fn link_free(&mut self, link: LinkId, now: Time) {
        let l = link as usize;
        let state = &mut self.links[l];
        state.held -= 1;
        if state.held == 0 {
            return;
        }
        let next = state.waiting.pop(&mut self.middles[l], self.fold_runs);
        // The one after it is sent when this one is done, a serialisation time from now: fetch
        // its record now (the look-ahead over the event queue sees nothing when every event has
        // its own time, and this load was half the engine's time then).
        if let Some(after) = state.waiting.front() {
            self.schedule.prefetch_transfer(after);
        }
        if state.held == 1 {
            self.result.link_queued[l] = self.result.link_queued[l] + (now - self.queued_since[l]);
        }
        let Transfer { bytes, dst, .. } = self.schedule.transfer(next);
        self.transmit(link, next, bytes, dst, now);
    }

    /// Starts sending transfer `t`, bound for `dst`, on `link`, which has just become its.
    fn transmit(&mut self, link: LinkId, t: TransferIndex, bytes: u64, dst: NodeId, now: Time) {
        let l = link as usize;
        let state = &mut self.links[l];
        if bytes != state.cached_bytes || state.untallied == u32::MAX {
            self.tallies[l].add(state.untallied, state.cached_bytes, state.cached_free);
            state.untallied = 0;
            (state.cached_free, state.cached_arrive) = self
                .options
                .time_model
                .link_delays(&self.topology_links[l], bytes);
            state.cached_bytes = bytes;
        }
        state.untallied += 1;
        let (free, arrive) = (state.cached_free, state.cached_arrive);
        self.result.hops += 1;
        let far_end = state.far_end;
        if far_end != dst {
            let next = self.next_link(t, far_end, dst);
            self.queue.push(now + arrive, Event::arrive(t, Some(next)));
        } else if self.completes_on_arrival {
            self.complete(t, now + arrive);
        } else {
            self.queue.push(now + arrive, Event::arrive(t, None));
        }
        self.queue.push(now + free, Event::link_free(link));
        if self.options.record_busy_intervals {
            super::record_busy(&mut self.result.busy_intervals[l], now, free);
        }
    }

    fn arrive(&mut self, t: TransferIndex, next: Option<LinkId>, now: Time) {
        if let Some(link) = next {
            self.enter(link, t, None, now);
            return;
        }
        let mut extra = self.options.endpoint_delay;
        if self.schedule.op(t) == Op::Reduce {
            extra = extra + self.options.reduction_delay;
            if let Some(bw) = self.options.reduce_bandwidth {
                extra = extra + bw.transmit_time(self.schedule.transfer(t).bytes);
            }
        }
        if extra > Time::ZERO {
            self.queue.push(now + extra, Event::complete(t));
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
        let one_each = self.unmet.is_empty();
        for &d in dependents_of(&self.dependents, t) {
            let ready = one_each || {
                let unmet = &mut self.unmet[d as usize];
                *unmet -= 1;
                *unmet == 0
            };
            if ready {
                // Issued at this instant, in a batch that is often a handful: the batch's own
                // look-ahead has nothing to look ahead over, so fetch the record now.
                self.schedule.prefetch_transfer(d);
                self.ready.push(d);
                if !self.issue_pending {
                    self.issue_pending = true;
                    self.queue.push(now, Event::ISSUE_ALL);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pack_and_unpack() {
        let cases = [
            EventKind::Arrive {
                transfer: u32::MAX,
                next: Some((MAX_LINKS - 1) as LinkId),
            },
            EventKind::Arrive {
                transfer: 0,
                next: Some(0),
            },
            EventKind::Arrive {
                transfer: 7,
                next: None,
            },
            EventKind::LinkFree {
                link: (MAX_LINKS - 1) as LinkId,
            },
            EventKind::Complete { transfer: u32::MAX },
            EventKind::Issue,
        ];
        for kind in cases {
            let event = match kind {
                EventKind::Arrive { transfer, next } => Event::arrive(transfer, next),
                EventKind::LinkFree { link } => Event::link_free(link),
                EventKind::Complete { transfer } => Event::complete(transfer),
                EventKind::Issue => Event::ISSUE_ALL,
            };
            assert_eq!(event.kind(), kind);
        }
    }

    /// A link's bytes and busy time, tallied when the message size changes instead of per hop,
    /// are the sums over the messages it carried: on a switch, an NPU's uplink carries what it
    /// sends and its downlink what it receives, in sizes that change from message to message.
    #[test]
    fn link_totals_sum_every_message_they_carried() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let topology = crate::topology::TopologyOptions::new("switch:5")
            .build()
            .unwrap();
        let npus = topology.npus();
        let mut schedule = Schedule::new();
        for _ in 0..400 {
            let src = rng.random_range(0..npus);
            let dst = (src + rng.random_range(1..npus)) % npus;
            // Runs of one size, then another: the tally is flushed at every change.
            let bytes = [1u64 << 16, 3 << 15, 1 << 18][rng.random_range(0..3)];
            schedule.push_data(Transfer { src, dst, bytes }, &[], (0, 1), Op::Copy);
        }
        let options = SimOptions {
            record_busy_intervals: true,
            ..SimOptions::default()
        };
        let result = simulate(&topology, &schedule, &options, &mut ()).unwrap();
        for (l, link) in topology.links().iter().enumerate() {
            let carried: u64 = schedule
                .transfers()
                .filter(|t| t.src == link.src || t.dst == link.dst)
                .map(|t| t.bytes)
                .sum();
            assert_eq!(result.link_bytes[l], carried, "link {l}");
            let busy = result.busy_intervals[l]
                .iter()
                .fold(Time::ZERO, |sum, &(from, to)| sum + (to - from));
            assert_eq!(result.link_busy[l], busy, "link {l}");
            assert!(carried > 0, "link {l} carried nothing");
        }
    }

    /// A link's per-message hold keeps it busy beyond the bytes: three 1000 B messages on a 1
    /// GB/s link held 5 us each leave at 0, 6 and 12 us and the last arrives at 12 + 6 + 1 us
    /// (the in-order simulator takes its delays from the same `Link::delays`).
    #[test]
    fn a_per_message_hold_serialises_messages() {
        let hold = Time::from_ns(5_000);
        let links = Link::both_ways(
            0,
            1,
            (
                crate::units::Bandwidth::gb_per_sec(1.0),
                Time::from_ns(1_000),
            ),
        )
        .map(|l| Link {
            per_message: hold,
            ..l
        });
        let topology =
            Topology::from_parts("held".into(), 2, 0, links.to_vec(), Vec::new(), Vec::new())
                .unwrap();
        let mut schedule = Schedule::new();
        for _ in 0..3 {
            schedule.push(
                Transfer {
                    src: 0,
                    dst: 1,
                    bytes: 1000,
                },
                &[],
            );
        }
        let r = simulate(&topology, &schedule, &SimOptions::default(), &mut ()).unwrap();
        assert_eq!(r.finish, Time::from_ns(19_000));
        let l = topology.link_between(0, 1).unwrap() as usize;
        assert_eq!(r.link_busy[l], Time::from_ns(18_000));
    }

    /// A transfer that completes as its last hop starts (no arrival event) completes when the
    /// arrival event would have said: the same independent transfers sent as reductions of zero
    /// cost (which take the event) give the same times, link for link, with more events.
    #[test]
    fn completion_without_an_arrival_event_keeps_every_time() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for spec in ["mesh:3x3", "switch:5", "torus:3x3"] {
            let topology = crate::topology::TopologyOptions::new(spec).build().unwrap();
            let npus = topology.npus();
            let (mut copies, mut reductions) = (Schedule::new(), Schedule::new());
            for _ in 0..300 {
                let src = rng.random_range(0..npus);
                let dst = (src + rng.random_range(1..npus)) % npus;
                let transfer = Transfer {
                    src,
                    dst,
                    bytes: rng.random_range(1..4) << 16,
                };
                copies.push_data(transfer, &[], (0, 1), Op::Copy);
                reductions.push_data(transfer, &[], (0, 1), Op::Reduce);
            }
            let options = SimOptions {
                record_transfers: true,
                record_busy_intervals: true,
                ..SimOptions::default()
            };
            let a = simulate(&topology, &copies, &options, &mut ()).unwrap();
            let b = simulate(&topology, &reductions, &options, &mut ()).unwrap();
            assert!(a.events < b.events, "{spec}: the shortcut was not taken");
            assert_eq!(a.completed, b.completed, "{spec}");
            assert_eq!(a.finish, b.finish, "{spec}");
            assert_eq!(a.link_busy, b.link_busy, "{spec}");
            assert_eq!(a.link_queued, b.link_queued, "{spec}");
            assert_eq!(a.busy_intervals, b.busy_intervals, "{spec}");
        }
    }
}
