//! ASTRA-sim's system layer and Chakra runtime, as ASTRA-sim 2.x defines them (astra-sim/system:
//! `Sys`, `StreamBaseline`, `Ring`, `AllToAll`, `PacketBundle`, `MemBus`; astra-sim/workload:
//! `Workload`, `HardwareResource`), over ASTRA-sim's congestion-aware analytical network (links
//! with FIFO queues, whole-ns delays; see [`crate::sim::TimeModel::Astra`]).
//!
//! This is the time model `train --system FILE` runs: the system file's keys take the effect they
//! have in ASTRA-sim ([`Settings`]), so a run with ASTRA-sim's own network, system and workload
//! files gives ASTRA-sim's finish and exposed-communication times. Events are ordered as
//! ASTRA-sim orders them (one FIFO list per time; each rank batches its own events per tick),
//! because which of two same-time messages a link serves first changes later times.
//!
//! Messages are matched as ASTRA-sim's analytical front end matches them: by tag, source,
//! destination and size, the k-th send with the k-th receive.

mod algorithm;
mod settings;
mod stream;
mod workload;

use std::collections::{BTreeMap, HashMap, VecDeque};

pub use settings::{Implementation, Optimization, Policy, Settings};

use crate::topology::{LinkId, NodeId, Router, Topology};
use crate::units::Time;
use crate::workload::program::Program;
use crate::Error;

use stream::{Collective, Stream, SysState};
use workload::Runtime;

/// One rank's result, as ASTRA-sim's `sys[i] finished, T cycles, exposed communication E cycles`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankResult {
    pub rank: u32,
    /// When the rank's last node finished.
    pub finish: Time,
    /// Compute the rank ran (compute nodes' durations, 1 ns for a node of none).
    pub compute: Time,
    /// `finish - compute`: ASTRA-sim's exposed communication.
    pub exposed: Time,
}

/// How one link was used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkUse {
    /// Time spent serialising messages.
    pub busy: Time,
    /// Time during which a message waited for the link.
    pub queued: Time,
    /// The most messages the link held at once (1: none ever waited).
    pub max_queue: u32,
}

/// What a run gives: each rank's times, each link's use and the messages sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub ranks: Vec<RankResult>,
    /// Per link of the topology, by link id.
    pub links: Vec<LinkUse>,
    pub messages: u64,
}

/// Runs `program` (rank `r` on NPU `npus[r]`) with ASTRA-sim's system-layer semantics.
pub fn run(
    topology: &Topology,
    program: &Program,
    npus: &[NodeId],
    settings: &Settings,
) -> Result<Outcome, Error> {
    program.check_placement(npus)?;
    whole_communicators(program)?;
    let mut world = World::new(topology, program, npus, settings)?;
    for rank in 0..program.ranks.len() {
        world.workload_call(rank, workload::Call::Start)?;
    }
    while let Some((&time, _)) = world.events.first_key_value() {
        world.now = time;
        loop {
            let next = world.events.get_mut(&time).and_then(VecDeque::pop_front);
            let Some(event) = next else { break };
            world.handle(event)?;
        }
        world.events.remove(&time);
    }
    let ranks = world
        .runtimes
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            let finish = r.finished.ok_or_else(|| {
                Error::input(format!(
                    "{}: rank {rank} never finishes with ASTRA-sim's semantics: {}",
                    program.name,
                    r.stuck_reason(&program.ranks[rank])
                ))
            })?;
            Ok(RankResult {
                rank: rank as u32,
                finish: Time::from_ns(finish),
                compute: Time::from_ns(r.compute_ns),
                exposed: Time::from_ns(finish - r.compute_ns),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let links = world
        .links
        .iter()
        .map(|l| LinkUse {
            busy: Time::from_ns(l.busy),
            queued: Time::from_ns(l.queued),
            max_queue: l.max_queue,
        })
        .collect();
    Ok(Outcome {
        ranks,
        links,
        messages: world.messages,
    })
}

/// Whether ASTRA-sim's system layer runs collectives of `kind` (its native collectives).
pub fn runs(kind: crate::collective::CollectiveKind) -> bool {
    use crate::collective::CollectiveKind as K;
    matches!(
        kind,
        K::AllReduce | K::AllGather | K::ReduceScatter | K::AllToAll
    )
}

/// ASTRA-sim runs a collective on every NPU unless a communicator-group file says otherwise;
/// collsim does not read those files, so a collective must name no communicator (or `0`) or one
/// that every rank's program names.
fn whole_communicators(program: &Program) -> Result<(), Error> {
    use crate::workload::program::Task;
    let ranks = program.ranks.len();
    let mut members: HashMap<&str, (std::collections::BTreeSet<usize>, &str)> = HashMap::new();
    for (rank, nodes) in program.ranks.iter().enumerate() {
        for node in nodes {
            if let Task::Collective { communicator, .. } = &node.task {
                if !communicator.is_empty() && communicator != "0" {
                    let entry = members.entry(communicator).or_default();
                    entry.0.insert(rank);
                    entry.1 = &node.name;
                }
            }
        }
    }
    match members.iter().find(|(_, (m, _))| m.len() != ranks) {
        Some((name, (m, node))) => Err(Error::input(format!(
            "{}: node '{node}' runs on communicator '{name}' of {} of the {ranks} ranks: \
             ASTRA-sim's communicator groups are not modelled with --system (collectives run on \
             every rank)",
            program.name,
            m.len()
        ))),
        None => Ok(()),
    }
}

/// An event of the network's queue (ASTRA-sim's `EventQueue`).
#[derive(Clone, Copy, Debug)]
enum Event {
    /// A link finished serialising its chunk.
    LinkFree(LinkId),
    /// A chunk reached the far end of its current link.
    ChunkArrived(usize),
    /// A rank's batched events of this tick (`Sys::call_events`).
    CallEvents(usize),
    /// A receive completed before it was posted: its handler runs now.
    Deliver(Handler),
}

/// Who is told that a message arrived.
#[derive(Clone, Copy, Debug)]
enum Handler {
    /// Collective sends tell no one (ASTRA-sim passes no argument).
    Nobody,
    /// A collective's stream receives a packet.
    Stream(usize),
    /// A workload send or receive node finished.
    Node { rank: usize, node: u32 },
}

/// An event a rank registered with itself (`Sys::register_event`).
#[derive(Clone, Copy, Debug)]
enum SysEvent {
    /// A packet bundle's memory step finished (`PacketBundle::call`).
    Bundle(usize),
    /// A compute node finished.
    NodeDone(u32),
}

/// A chunk in the network: where it is, where it goes, and its message. Its route is taken hop
/// by hop from the router (fixed shortest paths: the route ASTRA-sim computes up front).
struct Chunk {
    size: u64,
    at: NodeId,
    dst: NodeId,
    message: MessageKey,
}

/// Tag, source rank, destination rank, size, and the k-th such message.
type MessageKey = (u64, u32, u32, u64, u32);

/// Tag, source rank, destination rank and size: the messages one counter numbers.
type Channel = (u64, u32, u32, u64);

/// Sends and receives so far on a channel, and its messages still tracked.
#[derive(Clone, Copy, Default)]
struct Counter {
    sends: u32,
    recvs: u32,
    open: u32,
}

#[derive(Default)]
struct Tracked {
    send: Option<Handler>,
    recv: Option<Handler>,
    arrived: bool,
}

#[derive(Default)]
struct LinkState {
    transmitting: bool,
    pending: VecDeque<usize>,
    busy: u64,
    /// Time with at least one message waiting, and since when one has been waiting.
    queued: u64,
    waiting_since: u64,
    max_queue: u32,
}

/// A packet bundle on its way through the endpoint and, when it reduces, local memory.
struct Bundle {
    stream: usize,
    needs_processing: bool,
    size: u64,
}

/// The whole simulated machine.
struct World<'a> {
    now: u64,
    events: BTreeMap<u64, VecDeque<Event>>,
    topology: &'a Topology,
    router: Router<'a>,
    npus: &'a [NodeId],
    settings: &'a Settings,
    links: Vec<LinkState>,
    chunks: Vec<Option<Chunk>>,
    free_chunks: Vec<usize>,
    /// Per (tag, source, destination, size): sends and receives so far, and messages of the key
    /// still tracked. Dropped when every send has met its receive and none is tracked, so the
    /// next ones count from 0 on both sides and pair as before.
    counters: HashMap<Channel, Counter>,
    tracker: HashMap<MessageKey, Tracked>,
    sys: Vec<SysState>,
    streams: Vec<Option<Stream>>,
    bundles: Vec<Option<Bundle>>,
    free_bundles: Vec<usize>,
    collectives: Vec<Option<Collective>>,
    runtimes: Vec<Runtime<'a>>,
    messages: u64,
    /// NPUs per dimension of the network (one entry for a flat network).
    physical_dims: Vec<u32>,
}

impl<'a> World<'a> {
    fn new(
        topology: &'a Topology,
        program: &'a Program,
        npus: &'a [NodeId],
        settings: &'a Settings,
    ) -> Result<World<'a>, Error> {
        let router = Router::new(topology, npus.iter().copied())?;
        let mut physical_dims: Vec<u32> = topology.dims().iter().map(|d| d.size).collect();
        if physical_dims.is_empty() || physical_dims.iter().product::<u32>() as usize != npus.len()
        {
            physical_dims = vec![npus.len() as u32];
        }
        let ranks = program.ranks.len();
        let sys = (0..ranks)
            .map(|_| SysState::new(settings, &physical_dims))
            .collect();
        let runtimes = program
            .ranks
            .iter()
            .map(|nodes| Runtime::new(nodes))
            .collect();
        Ok(World {
            now: 0,
            events: BTreeMap::new(),
            topology,
            router,
            npus,
            settings,
            links: (0..topology.links().len())
                .map(|_| LinkState::default())
                .collect(),
            chunks: Vec::new(),
            free_chunks: Vec::new(),
            counters: HashMap::new(),
            tracker: HashMap::new(),
            sys,
            streams: Vec::new(),
            bundles: Vec::new(),
            free_bundles: Vec::new(),
            collectives: Vec::new(),
            runtimes,
            messages: 0,
            physical_dims,
        })
    }

    /// `EventQueue::schedule_event`: after `delay` ns, behind what is already due then.
    fn schedule(&mut self, delay: u64, event: Event) {
        self.events
            .entry(self.now + delay)
            .or_default()
            .push_back(event);
    }

    fn handle(&mut self, event: Event) -> Result<(), Error> {
        match event {
            Event::LinkFree(link) => {
                let state = &mut self.links[link as usize];
                state.transmitting = false;
                if let Some(chunk) = state.pending.pop_front() {
                    if state.pending.is_empty() {
                        state.queued += self.now - state.waiting_since;
                    }
                    self.transmit(link, chunk);
                }
                Ok(())
            }
            Event::ChunkArrived(c) => self.chunk_arrived(c),
            Event::CallEvents(rank) => self.call_events(rank),
            Event::Deliver(handler) => self.invoke(handler),
        }
    }

    /// `Sys::register_event`: a rank's events of one tick share one network event, created by
    /// the first of them.
    fn register(&mut self, rank: usize, delay: u64, event: SysEvent) {
        let time = self.now + delay;
        let list = self.sys[rank].events.entry(time).or_default();
        list.push(event);
        if list.len() == 1 {
            self.schedule(delay, Event::CallEvents(rank));
        }
    }

    /// `Sys::call_events`: every event of this tick, including those registered while it runs.
    fn call_events(&mut self, rank: usize) -> Result<(), Error> {
        let now = self.now;
        let mut i = 0;
        loop {
            let next = self.sys[rank]
                .events
                .get(&now)
                .and_then(|list| list.get(i).copied());
            let Some(event) = next else { break };
            i += 1;
            match event {
                SysEvent::Bundle(b) => self.bundle_call(b)?,
                SysEvent::NodeDone(node) => {
                    self.workload_call(rank, workload::Call::Finished(node))?
                }
            }
        }
        self.sys[rank].events.remove(&now);
        Ok(())
    }

    fn invoke(&mut self, handler: Handler) -> Result<(), Error> {
        match handler {
            Handler::Nobody => Ok(()),
            Handler::Stream(s) => self.stream_received(s),
            Handler::Node { rank, node } => {
                self.workload_call(rank, workload::Call::Finished(node))
            }
        }
    }

    /// `sim_send`: the message enters the network now; `handler` runs when it arrives.
    fn send(
        &mut self,
        tag: u64,
        src: u32,
        dst: u32,
        size: u64,
        handler: Handler,
    ) -> Result<(), Error> {
        let counter = self.counters.entry((tag, src, dst, size)).or_default();
        let key = (tag, src, dst, size, counter.sends);
        counter.sends += 1;
        self.track(key).send = Some(handler);
        self.messages += 1;
        let (at, to) = (self.npus[src as usize], self.npus[dst as usize]);
        if at == to {
            // A message to oneself: ASTRA-sim's backends refuse one; it arrives at once here.
            return self.message_arrived(key);
        }
        let chunk = Chunk {
            size,
            at,
            dst: to,
            message: key,
        };
        let c = slab_insert(&mut self.chunks, &mut self.free_chunks, chunk);
        self.enter_link(c);
        Ok(())
    }

    /// `sim_recv`: `handler` runs when the matching message has arrived.
    fn recv(&mut self, tag: u64, src: u32, dst: u32, size: u64, handler: Handler) {
        let counter = self.counters.entry((tag, src, dst, size)).or_default();
        let key = (tag, src, dst, size, counter.recvs);
        counter.recvs += 1;
        let entry = self.track(key);
        if entry.arrived {
            self.untrack(key);
            self.schedule(0, Event::Deliver(handler));
        } else {
            entry.recv = Some(handler);
        }
    }

    /// The tracker's entry of `key`, made if new.
    fn track(&mut self, key: MessageKey) -> &mut Tracked {
        match self.tracker.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let (tag, src, dst, size, _) = key;
                if let Some(counter) = self.counters.get_mut(&(tag, src, dst, size)) {
                    counter.open += 1;
                }
                e.insert(Tracked::default())
            }
        }
    }

    /// Drops the entry of a message both ends have seen.
    fn untrack(&mut self, key: MessageKey) {
        self.tracker.remove(&key);
        let (tag, src, dst, size, _) = key;
        let short = (tag, src, dst, size);
        if let Some(counter) = self.counters.get_mut(&short) {
            counter.open -= 1;
            if counter.open == 0 && counter.sends == counter.recvs {
                self.counters.remove(&short);
            }
        }
    }

    fn enter_link(&mut self, c: usize) {
        let chunk = self.chunks[c].as_ref().expect("a live chunk");
        let link = self.router.next_link(chunk.at, chunk.dst);
        let state = &mut self.links[link as usize];
        let held = state.pending.len() as u32 + u32::from(state.transmitting) + 1;
        state.max_queue = state.max_queue.max(held);
        if state.transmitting {
            if state.pending.is_empty() {
                state.waiting_since = self.now;
            }
            state.pending.push_back(c);
        } else {
            self.transmit(link, c);
        }
    }

    /// `Link::schedule_chunk_transmission`.
    fn transmit(&mut self, link: LinkId, c: usize) {
        let l = self.topology.link(link);
        let chunk = self.chunks[c].as_mut().expect("a live chunk");
        chunk.at = l.dst;
        let size = chunk.size;
        let (free, arrive) = crate::sim::TimeModel::Astra.link_delays(l, size);
        let state = &mut self.links[link as usize];
        state.transmitting = true;
        state.busy += free.ps() / 1000;
        self.schedule(arrive.ps() / 1000, Event::ChunkArrived(c));
        self.schedule(free.ps() / 1000, Event::LinkFree(link));
    }

    fn chunk_arrived(&mut self, c: usize) -> Result<(), Error> {
        let chunk = self.chunks[c].as_mut().expect("a live chunk");
        if chunk.at != chunk.dst {
            self.enter_link(c);
            return Ok(());
        }
        let key = chunk.message;
        self.chunks[c] = None;
        self.free_chunks.push(c);
        self.message_arrived(key)
    }

    /// `process_chunk_arrival`: the sender's handler, then the receiver's if it is posted.
    fn message_arrived(&mut self, key: MessageKey) -> Result<(), Error> {
        let entry = self
            .tracker
            .get_mut(&key)
            .expect("a sent message is tracked");
        let send = entry.send.expect("the send registered its handler");
        match entry.recv {
            Some(recv) => {
                self.untrack(key);
                self.invoke(send)?;
                self.invoke(recv)
            }
            None => {
                entry.arrived = true;
                self.invoke(send)
            }
        }
    }

    /// A bundle is handed to the memory bus: it comes back after the endpoint delay
    /// (`MemBus::send_from_NPU_to_MA`/`send_from_MA_to_NPU` without a shared bus).
    fn release_bundle(&mut self, rank: usize, bundle: Bundle) {
        let b = slab_insert(&mut self.bundles, &mut self.free_bundles, bundle);
        self.register(rank, self.settings.endpoint_delay, SysEvent::Bundle(b));
    }

    /// `PacketBundle::call`: a reducing bundle first reads twice and writes once what it
    /// reduces at `local-mem-bw`; then its stream goes on.
    fn bundle_call(&mut self, b: usize) -> Result<(), Error> {
        let bundle = self.bundles[b].as_mut().expect("a live bundle");
        let stream = bundle.stream;
        if bundle.needs_processing {
            bundle.needs_processing = false;
            let size = bundle.size;
            let rank = self.streams[stream].as_ref().expect("a live stream").rank;
            let delay = 3 * memory_ns(size, self.settings.local_mem_bw);
            self.register(rank, delay, SysEvent::Bundle(b));
            return Ok(());
        }
        self.bundles[b] = None;
        self.free_bundles.push(b);
        self.stream_general(stream)
    }
}

/// Puts `item` in a free slot of `slots` (or a new one) and returns its index.
fn slab_insert<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<usize>, item: T) -> usize {
    match free.pop() {
        Some(at) => {
            slots[at] = Some(item);
            at
        }
        None => {
            slots.push(Some(item));
            slots.len() - 1
        }
    }
}

/// ns to move `bytes` through local memory of `gbps` GB/s, truncated as ASTRA-sim casts it;
/// 0 without a local memory bandwidth (ASTRA-sim's cast of an infinite delay comes out as 0).
fn memory_ns(bytes: u64, gbps: f64) -> u64 {
    if gbps <= 0.0 {
        return 0;
    }
    (bytes as f64 / (gbps * 1e9) * 1e9) as u64
}

#[cfg(test)]
mod tests;
