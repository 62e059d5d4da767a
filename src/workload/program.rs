//! Per-rank programs and their execution on the event engine: the one model behind `collsim
//! train`, whether the iteration comes from a workload file (every rank running the same
//! program) or from Chakra execution traces (one program per rank).
//!
//! A rank's program is a DAG of nodes: compute (a wait of its duration on the rank's NPU),
//! collectives on a communicator, point-to-point sends and receives, and no-ops. Compute runs one
//! node at a time per rank, in the order the nodes become ready. The `k`-th collective of a
//! communicator on each of its members is one collective: it starts once every member has reached
//! it (its dependencies done on every member) and runs the chosen algorithm's schedule on the
//! members; the `k`-th send from rank `a` to `b` with a tag is the `k`-th receive at `b` from `a`
//! with that tag, one message that leaves once the send's dependencies are done. Collectives that
//! overlap share the network.
//!
//! The breakdown follows each rank's compute stream: the time between one compute node's end and
//! the next one's start is exposed communication, charged to the communication among the node's
//! dependencies that finished last (its kind, and its data- or model-parallel group), or idle
//! when it waited for no communication.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Range;

use rayon::prelude::*;

use super::{Breakdown, CommGroup, TrainOptions};
use crate::algorithms::{self, Algorithm};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{self, Schedule, TransferIndex};
use crate::sim::{self, Observer, SimOptions};
use crate::synth::{self, SynthOptions};
use crate::topology::{NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// Compute of `duration`; `forward` sorts it into the breakdown's forward or backward compute.
    Compute {
        duration: Time,
        forward: bool,
    },
    /// A collective among the ranks whose programs name `communicator`, run `times` times in a
    /// row (each after the one before); `group` is the kind of group its exposure is charged to.
    Collective {
        kind: CollectiveKind,
        bytes: u64,
        communicator: String,
        group: CommGroup,
        times: u32,
    },
    Send {
        peer: u32,
        bytes: u64,
        tag: u64,
    },
    Recv {
        peer: u32,
        bytes: u64,
        tag: u64,
    },
    /// Takes no time (memory and metadata nodes, and nodes of unknown types).
    Nop,
}

impl Task {
    fn is_communication(&self) -> bool {
        matches!(
            self,
            Task::Collective { .. } | Task::Send { .. } | Task::Recv { .. }
        )
    }

    /// The group kind this communication's exposure is charged to (messages: `pipeline`).
    fn group_name(&self) -> &'static str {
        match self {
            Task::Collective { group, .. } => group.name(),
            _ => "pipeline",
        }
    }

    /// The column this communication's exposure is charged to in `ranks.csv`.
    fn kind_name(&self) -> &'static str {
        match self {
            Task::Collective { kind, .. } => kind.name(),
            Task::Send { .. } | Task::Recv { .. } => "send-recv",
            _ => "none",
        }
    }
}

/// One node of a rank's program.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's id in its trace (reported in errors).
    pub id: u64,
    pub name: String,
    pub task: Task,
    /// Positions in the rank's node list of the nodes this one waits for.
    pub deps: Vec<u32>,
}

/// What every rank runs: rank `r` runs `ranks[r]` on NPU `npus[r]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub name: String,
    pub ranks: Vec<Vec<Node>>,
    /// Communicators whose collectives follow one another on every member (each waits for the
    /// previous one to end), as the program's maker promises. One whose links no other
    /// communication uses runs each collective in the time it takes alone on an idle network,
    /// computed once per size instead of simulated transfer by transfer: exact, since nothing
    /// else can be on those links and a collective starts on every member at once.
    pub serial_communicators: BTreeSet<String>,
}

impl Program {
    /// Refuses a placement that gives the ranks more or fewer NPUs than there are ranks.
    pub fn check_placement(&self, npus: &[NodeId]) -> Result<(), Error> {
        if npus.len() != self.ranks.len() {
            return Err(Error::input(format!(
                "{}: {} ranks on {} NPUs",
                self.name,
                self.ranks.len(),
                npus.len()
            )));
        }
        Ok(())
    }
}

/// Where one rank's iteration went.
#[derive(Clone, Debug, PartialEq)]
pub struct RankBreakdown {
    pub rank: u32,
    /// The rank's compute, exposed communication (data- and model-parallel) and total.
    pub breakdown: Breakdown,
    /// Exposed communication per kind (collective names, `send-recv`), in the order first seen.
    pub exposed_by_kind: Vec<(&'static str, Time)>,
    /// Exposed communication per group kind ([`CommGroup::name`]; point-to-point messages are
    /// `pipeline`), in the order first seen. Waits for a message its sender had not yet sent
    /// are not communication: they are the `bubble`.
    pub exposed_by_group: Vec<(&'static str, Time)>,
    /// Stalls of the compute stream waiting for a message that had not yet left its sender
    /// (in a pipeline, the bubble).
    pub bubble: Time,
    /// Stalls of the compute stream that waited for no communication.
    pub idle: Time,
}

/// A span of a rank's timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub rank: u32,
    pub name: String,
    pub compute: bool,
    pub start: Time,
    pub end: Time,
}

/// The result of running a program.
#[derive(Clone, Debug)]
pub struct Execution {
    /// The slowest rank's breakdown (ties to the lowest rank).
    pub breakdown: Breakdown,
    pub ranks: Vec<RankBreakdown>,
    /// Which of `ranks` is the slowest (the one `breakdown` is).
    pub slowest: usize,
    pub timeline: Vec<Span>,
    /// The serial communicators found alone on their links, whose collectives took the time
    /// they take alone ([`Program::serial_communicators`]), sorted.
    pub timed_alone: Vec<String>,
    /// Per link of the topology: bytes carried and time spent serialising them, the
    /// collectives timed alone included (as they ran alone).
    pub link_bytes: Vec<u64>,
    pub link_busy: Vec<Time>,
    /// Per link: the most messages it held at once, and the time messages waited for it (of
    /// the simulated traffic; collectives timed alone never wait).
    pub link_max_queue: Vec<u32>,
    pub link_queued: Vec<Time>,
}

/// Runs `program` on `topology`, rank `r` on NPU `npus[r]`.
pub fn execute(
    topology: &Topology,
    program: &Program,
    npus: &[NodeId],
    options: &TrainOptions,
    observer: &mut dyn Observer,
) -> Result<Execution, Error> {
    program.check_placement(npus)?;
    let mut builder = Emitter::new(topology, program, npus, options)?;
    builder.run()?;
    let sim_options = SimOptions {
        record_transfers: true,
        ..options.sim.clone()
    };
    let result = sim::simulate(topology, &builder.schedule, &sim_options, observer)?;
    let completed = &result.completed;
    let mut ranks = Vec::with_capacity(program.ranks.len());
    let mut timeline = Vec::new();
    for (r, nodes) in program.ranks.iter().enumerate() {
        let ends = &builder.end[r];
        let keep_spans = options
            .timeline_ranks
            .as_ref()
            .is_none_or(|list| list.contains(&(r as u32)));
        let mut row = RankBreakdown {
            rank: r as u32,
            breakdown: Breakdown {
                workload: program.name.clone(),
                algorithm: options.algorithm.name().to_string(),
                forward_compute: Time::ZERO,
                backward_compute: Time::ZERO,
                exposed_comm: Time::ZERO,
                exposed_data_parallel: Time::ZERO,
                exposed_model_parallel: Time::ZERO,
                total: Time::ZERO,
                notes: Vec::new(),
            },
            exposed_by_kind: Vec::new(),
            exposed_by_group: Vec::new(),
            bubble: Time::ZERO,
            idle: Time::ZERO,
        };
        let sum = &mut row.breakdown;
        let mut free = Time::ZERO;
        for &i in &builder.compute_order[r] {
            let node = &nodes[i as usize];
            let Task::Compute { forward, .. } = node.task else {
                unreachable!("the compute order holds compute nodes")
            };
            let wait = ends[i as usize];
            let (started, done) = (
                result.issued(&builder.schedule, wait),
                completed[wait as usize],
            );
            let stall = started - free.min(started);
            if stall > Time::ZERO {
                let binding = node
                    .deps
                    .iter()
                    .filter(|&&d| nodes[d as usize].task.is_communication())
                    .max_by_key(|&&d| completed[ends[d as usize] as usize]);
                match binding {
                    Some(&d) => {
                        let task = &nodes[d as usize].task;
                        charge_exposed(sum, &mut row.exposed_by_kind, task, stall);
                        // By group: the stall is split along the chain of communication it
                        // waited for (each its part after the one before it ended), and the
                        // part of a wait for a message before the message left its sender is
                        // the sender's lateness (the bubble), not communication.
                        let from = free.min(started);
                        let mut until = started;
                        let mut link = Some(d);
                        while let Some(e) = link {
                            if until <= from {
                                break;
                            }
                            let node = &nodes[e as usize];
                            let before = node
                                .deps
                                .iter()
                                .filter(|&&x| nodes[x as usize].task.is_communication())
                                .max_by_key(|&&x| completed[ends[x as usize] as usize])
                                .copied();
                            let begun = match node.task {
                                Task::Recv { .. } => {
                                    let left = builder.start[r][e as usize]
                                        .map_or(Time::ZERO, |s| {
                                            result.issued(&builder.schedule, s)
                                        });
                                    let left = left.clamp(from, until);
                                    row.bubble = row.bubble + (left - from);
                                    link = None;
                                    left
                                }
                                _ => match before {
                                    Some(x) => {
                                        link = Some(x);
                                        completed[ends[x as usize] as usize].clamp(from, until)
                                    }
                                    None => {
                                        link = None;
                                        from
                                    }
                                },
                            };
                            add_to(
                                &mut row.exposed_by_group,
                                node.task.group_name(),
                                until - begun,
                            );
                            until = begun;
                        }
                    }
                    None => row.idle = row.idle + stall,
                }
            }
            let spent = done - started;
            if forward {
                sum.forward_compute = sum.forward_compute + spent;
            } else {
                sum.backward_compute = sum.backward_compute + spent;
            }
            free = done;
            if keep_spans {
                timeline.push(Span {
                    rank: r as u32,
                    name: node.name.clone(),
                    compute: true,
                    start: started,
                    end: done,
                });
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            let end = completed[ends[i] as usize];
            sum.total = sum.total.max(end);
            if keep_spans && node.task.is_communication() {
                let start =
                    builder.start[r][i].map_or(Time::ZERO, |s| result.issued(&builder.schedule, s));
                timeline.push(Span {
                    rank: r as u32,
                    name: node.name.clone(),
                    compute: false,
                    start: start.min(end),
                    end,
                });
            }
        }
        // Communication the stream ends with, after its last compute (a distributed
        // optimizer's gathers after its step), is exposed too: charged to the last to finish.
        if sum.total > free {
            let tail = sum.total - free;
            let last = (0..nodes.len())
                .filter(|&i| nodes[i].task.is_communication())
                .max_by_key(|&i| completed[ends[i] as usize]);
            match last.map(|i| &nodes[i].task) {
                Some(task) => {
                    charge_exposed(sum, &mut row.exposed_by_kind, task, tail);
                    add_to(&mut row.exposed_by_group, task.group_name(), tail);
                }
                None => row.idle = row.idle + tail,
            }
        }
        ranks.push(row);
    }
    let slowest = (0..ranks.len())
        .max_by_key(|&r| (ranks[r].breakdown.total, std::cmp::Reverse(r)))
        .expect("programs have ranks");
    let mut breakdown = ranks[slowest].breakdown.clone();
    breakdown.notes = builder.notes;
    let mut timed_alone: Vec<String> = builder.solo.iter().cloned().collect();
    timed_alone.sort_unstable();
    let (mut link_bytes, mut link_busy) = (result.link_bytes, result.link_busy);
    for (l, &b) in builder.solo_link_bytes.iter().enumerate() {
        link_bytes[l] += b;
        link_busy[l] = link_busy[l] + builder.solo_link_busy[l];
    }
    Ok(Execution {
        breakdown,
        ranks,
        slowest,
        timeline,
        timed_alone,
        link_bytes,
        link_busy,
        link_max_queue: result.link_max_queue,
        link_queued: result.link_queued,
    })
}

/// Charges `stall`, a wait of the compute stream for `task`, as exposed communication: to the
/// total, `task`'s kind and its data- or model-parallel side.
fn charge_exposed(
    sum: &mut Breakdown,
    by_kind: &mut Vec<(&'static str, Time)>,
    task: &Task,
    stall: Time,
) {
    sum.exposed_comm = sum.exposed_comm + stall;
    add_to(by_kind, task.kind_name(), stall);
    match task {
        Task::Collective { group, .. } if group.is_model_parallel() => {
            sum.exposed_model_parallel = sum.exposed_model_parallel + stall
        }
        _ => sum.exposed_data_parallel = sum.exposed_data_parallel + stall,
    }
}

/// Adds `time` to `key`'s entry of `list`, appending the key when first seen.
fn add_to(list: &mut Vec<(&'static str, Time)>, key: &'static str, time: Time) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, t)) => *t = *t + time,
        None => list.push((key, time)),
    }
}

/// Where a node stands while the schedule is emitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    /// Dependencies done; a collective or receive waiting for its partners.
    Arrived,
    Done,
}

/// Builds the schedule of a program: every node's completion as a schedule entry.
struct Emitter<'a> {
    topology: &'a Topology,
    program: &'a Program,
    npus: &'a [NodeId],
    options: &'a TrainOptions,
    schedule: Schedule,
    /// Per rank and node: the schedule entry whose completion is the node's.
    end: Vec<Vec<TransferIndex>>,
    /// Per rank and communication node: the entry whose issue (its dependencies done) is when
    /// the communication began: a collective's start, a message (for its send and receive).
    start: Vec<Vec<Option<TransferIndex>>>,
    state: Vec<Vec<State>>,
    waiting: Vec<Vec<u32>>,
    /// Per rank, the nodes waiting for each node (compressed rows: node i's are
    /// `flat[offsets[i]..offsets[i + 1]]`).
    dependents: Vec<(Vec<u32>, Vec<u32>)>,
    /// Per rank, its compute nodes in the order they ran, and the last one's wait.
    compute_order: Vec<Vec<u32>>,
    last_compute: Vec<Option<TransferIndex>>,
    /// Per communicator: members (ranks) and, per member, its collective nodes in order.
    communicators: BTreeMap<String, Communicator>,
    /// Per (sender, receiver, tag): the sends and receives in order, and how many have been paired.
    channels: HashMap<(u32, u32, u64), Channel>,
    /// Per rank and node: its position among its communicator's collectives (the instance it
    /// joins) or among its channel's sends or receives (the message it pairs with).
    slot: Vec<Vec<u32>>,
    /// Collective schedules per (kind, bytes, members), made once.
    cache: HashMap<CollectiveKey, Part>,
    /// Serial communicators alone on their links ([`Program::serial_communicators`]), and the
    /// time each of their collectives takes alone.
    solo: HashSet<String>,
    solo_times: HashMap<CollectiveKey, Time>,
    /// Per solo collective: the links it used alone, with their bytes and busy time.
    solo_usage: HashMap<CollectiveKey, Vec<(usize, u64, Time)>>,
    /// Bytes and busy time the solo collectives put on each link (they run as waits).
    solo_link_bytes: Vec<u64>,
    solo_link_busy: Vec<Time>,
    unwound: synth::Unwound,
    notes: Vec<String>,
    ready: VecDeque<(u32, u32)>,
}

/// Peak memory of a training run per transfer of its schedule: measured, ResNet-50 on ring:8 at
/// 100000 chunks, 277.5M transfers in 16.35 GB (59 B each: the schedule, the collectives'
/// parts and the simulation); a little under, so the guard refuses only runs that cannot fit.
const TRAINING_BYTES_PER_TRANSFER: u64 = 56;

/// A collective by what makes it: kind, size and its members' NPUs (sorted).
type CollectiveKey = (CollectiveKind, u64, Vec<NodeId>);

/// A collective's schedule, ready to append, and its transfers nothing in it waits for.
struct Part {
    schedule: Schedule,
    sinks: Vec<TransferIndex>,
}

#[derive(Default)]
struct Communicator {
    members: Vec<u32>,
    /// Per member (in `members` order): its collective nodes in program order.
    nodes: Vec<Vec<u32>>,
    /// Per instance: how many members have arrived.
    arrived: Vec<u32>,
}

#[derive(Default)]
struct Channel {
    sends: Vec<u32>,
    recvs: Vec<u32>,
    /// Per send, the transfer once emitted.
    messages: Vec<Option<TransferIndex>>,
}

impl<'a> Emitter<'a> {
    fn new(
        topology: &'a Topology,
        program: &'a Program,
        npus: &'a [NodeId],
        options: &'a TrainOptions,
    ) -> Result<Emitter<'a>, Error> {
        let ranks = program.ranks.len();
        let mut communicators: BTreeMap<String, Communicator> = BTreeMap::new();
        let mut channels: HashMap<(u32, u32, u64), Channel> = HashMap::new();
        let mut dependents = Vec::with_capacity(ranks);
        let mut waiting = Vec::with_capacity(ranks);
        let mut slot = Vec::with_capacity(ranks);
        for (r, nodes) in program.ranks.iter().enumerate() {
            let mut offsets = vec![0u32; nodes.len() + 1];
            for node in nodes {
                for &d in &node.deps {
                    offsets[d as usize + 1] += 1;
                }
            }
            for i in 0..nodes.len() {
                offsets[i + 1] += offsets[i];
            }
            let mut flat = vec![0u32; offsets[nodes.len()] as usize];
            let mut filled = offsets.clone();
            let mut count = vec![0u32; nodes.len()];
            let mut slots = vec![u32::MAX; nodes.len()];
            // Appends node i to `list` and remembers where.
            let mut place = |list: &mut Vec<u32>, i: usize| {
                slots[i] = list.len() as u32;
                list.push(i as u32);
            };
            for (i, node) in nodes.iter().enumerate() {
                for &d in &node.deps {
                    let at = &mut filled[d as usize];
                    flat[*at as usize] = i as u32;
                    *at += 1;
                }
                count[i] = node.deps.len() as u32;
                match &node.task {
                    Task::Collective { communicator, .. } => {
                        let c = communicators.entry(communicator.clone()).or_default();
                        if c.members.last() != Some(&(r as u32)) {
                            c.members.push(r as u32);
                            c.nodes.push(Vec::new());
                        }
                        place(c.nodes.last_mut().expect("pushed"), i);
                    }
                    Task::Send { peer, tag, .. } => {
                        check_peer(program, r, node, *peer)?;
                        let ch = channels.entry((r as u32, *peer, *tag)).or_default();
                        place(&mut ch.sends, i);
                    }
                    Task::Recv { peer, tag, .. } => {
                        check_peer(program, r, node, *peer)?;
                        let ch = channels.entry((*peer, r as u32, *tag)).or_default();
                        place(&mut ch.recvs, i);
                    }
                    _ => {}
                }
            }
            dependents.push((offsets, flat));
            waiting.push(count);
            slot.push(slots);
        }
        // Collectives that name no communicator run on every rank.
        if let Some(all) = communicators.get("") {
            if all.members.len() != ranks {
                let missing = (0..ranks as u32)
                    .find(|r| !all.members.contains(r))
                    .expect("fewer members than ranks");
                return Err(Error::input(format!(
                    "{}: rank {} has collectives without a communicator (pg_name), which run on \
                     every rank, but rank {missing} has none",
                    program.name, all.members[0]
                )));
            }
        }
        for (name, c) in &mut communicators {
            let count = c.nodes[0].len();
            for (m, nodes) in c.members.iter().zip(&c.nodes) {
                if nodes.len() != count {
                    return Err(Error::input(format!(
                        "{}: rank {m} has {} collectives on communicator '{name}', rank {} has \
                         {count}",
                        program.name,
                        nodes.len(),
                        c.members[0]
                    )));
                }
            }
            for k in 0..count {
                let first = &program.ranks[c.members[0] as usize][c.nodes[0][k] as usize];
                for (m, nodes) in c.members.iter().zip(&c.nodes) {
                    let node = &program.ranks[*m as usize][nodes[k] as usize];
                    if !same_collective(&first.task, &node.task) {
                        return Err(Error::input(format!(
                            "{}: rank {m} node {} ({}) does not match rank {} node {} of the same \
                             collective on '{name}'",
                            program.name, node.id, node.name, c.members[0], first.id
                        )));
                    }
                }
            }
            c.arrived = vec![0; count];
        }
        for ((from, to, tag), ch) in &mut channels {
            if ch.sends.len() != ch.recvs.len() {
                return Err(Error::input(format!(
                    "{}: rank {from} sends {} messages with tag {tag} to rank {to}, which \
                     receives {}",
                    program.name,
                    ch.sends.len(),
                    ch.recvs.len()
                )));
            }
            ch.messages = vec![None; ch.sends.len()];
        }
        Ok(Emitter {
            topology,
            program,
            npus,
            options,
            schedule: Schedule::new(),
            end: program
                .ranks
                .iter()
                .map(|n| vec![TransferIndex::MAX; n.len()])
                .collect(),
            start: program.ranks.iter().map(|n| vec![None; n.len()]).collect(),
            state: program
                .ranks
                .iter()
                .map(|n| vec![State::Waiting; n.len()])
                .collect(),
            waiting,
            dependents,
            compute_order: vec![Vec::new(); ranks],
            last_compute: vec![None; ranks],
            communicators,
            channels,
            slot,
            cache: HashMap::new(),
            solo: HashSet::new(),
            solo_times: HashMap::new(),
            solo_usage: HashMap::new(),
            solo_link_bytes: Vec::new(),
            solo_link_busy: Vec::new(),
            unwound: synth::Unwound::default(),
            notes: Vec::new(),
            ready: VecDeque::new(),
        })
    }

    /// Emits every node in dependency order, or names one that never becomes ready.
    fn run(&mut self) -> Result<(), Error> {
        self.find_solo()?;
        self.reserve_memory()?;
        for (r, counts) in self.waiting.iter().enumerate() {
            for (i, &c) in counts.iter().enumerate() {
                if c == 0 {
                    self.ready.push_back((r as u32, i as u32));
                }
            }
        }
        let progress = self.options.progress.clone();
        if let Some(steps) = &progress {
            let tasks = self.program.ranks.iter().map(|r| r.len() as u64).sum();
            steps.begin("tasks laid out", tasks);
        }
        while let Some((r, i)) = self.ready.pop_front() {
            self.arrive(r, i)?;
            if let Some(steps) = &progress {
                steps.step();
            }
        }
        if let Some(steps) = &progress {
            steps.end();
        }
        for (r, states) in self.state.iter().enumerate() {
            if let Some(i) = states.iter().position(|&s| s != State::Done) {
                let node = &self.program.ranks[r][i];
                return Err(Error::input(format!(
                    "{}: rank {r} node {} ({}) never runs: its dependencies form a cycle, or a \
                     collective or message it needs is never reached by another rank",
                    self.program.name, node.id, node.name
                )));
            }
        }
        Ok(())
    }

    /// The schedule entries of node `i`'s dependencies on rank `r`.
    fn dep_ends(&self, r: u32, i: u32) -> Vec<TransferIndex> {
        self.program.ranks[r as usize][i as usize]
            .deps
            .iter()
            .map(|&d| self.end[r as usize][d as usize])
            .collect()
    }

    /// Node `i` of rank `r` has its dependencies done.
    fn arrive(&mut self, r: u32, i: u32) -> Result<(), Error> {
        let npu = self.npus[r as usize];
        let node = &self.program.ranks[r as usize][i as usize];
        match &node.task {
            Task::Compute { duration, .. } => {
                let mut deps = self.dep_ends(r, i);
                deps.extend(self.last_compute[r as usize]);
                let wait = self.schedule.push_wait(npu, *duration, &deps);
                self.last_compute[r as usize] = Some(wait);
                self.compute_order[r as usize].push(i);
                self.done(r, i, wait);
            }
            Task::Nop => {
                let deps = self.dep_ends(r, i);
                let wait = self.schedule.push_wait(npu, Time::ZERO, &deps);
                self.done(r, i, wait);
            }
            Task::Collective { communicator, .. } => {
                self.state[r as usize][i as usize] = State::Arrived;
                let k = self.slot[r as usize][i as usize] as usize;
                let c = self
                    .communicators
                    .get_mut(communicator)
                    .expect("listed above");
                c.arrived[k] += 1;
                if c.arrived[k] as usize == c.members.len() {
                    let communicator = communicator.clone();
                    self.collective(&communicator, k)?;
                }
            }
            Task::Send { peer, bytes, tag } => {
                let deps = self.dep_ends(r, i);
                // The message leaves once the send's dependencies are done (its issue time).
                let message = self.schedule.push(
                    crate::schedule::Transfer {
                        src: npu,
                        dst: self.npus[*peer as usize],
                        bytes: *bytes,
                    },
                    &deps,
                );
                let k = self.slot[r as usize][i as usize] as usize;
                let ch = self.channels.get_mut(&(r, *peer, *tag)).expect("listed");
                ch.messages[k] = Some(message);
                let recv = ch.recvs[k];
                self.start[r as usize][i as usize] = Some(message);
                self.done(r, i, message);
                let peer = *peer;
                if self.state[peer as usize][recv as usize] == State::Arrived {
                    self.receive(peer, recv, message, r);
                }
            }
            Task::Recv { peer, tag, .. } => {
                self.state[r as usize][i as usize] = State::Arrived;
                let k = self.slot[r as usize][i as usize] as usize;
                if let Some(message) = self.channels[&(*peer, r, *tag)].messages[k] {
                    let peer = *peer;
                    self.receive(r, i, message, peer);
                }
            }
        }
        Ok(())
    }

    /// Receive `i` on rank `r` completes with `message` (from `from`) and its own dependencies.
    fn receive(&mut self, r: u32, i: u32, message: TransferIndex, from: u32) {
        let mut deps = self.dep_ends(r, i);
        // A receive with nothing else to wait for ends with its message.
        let wait = if deps.is_empty() {
            message
        } else {
            deps.push(message);
            self.schedule
                .push_wait(self.npus[r as usize], Time::ZERO, &deps)
        };
        let Task::Recv { tag, .. } = self.program.ranks[r as usize][i as usize].task else {
            unreachable!("only receives are received")
        };
        let k = self.slot[r as usize][i as usize] as usize;
        let send = self.channels[&(from, r, tag)].sends[k];
        self.start[r as usize][i as usize] = self.start[from as usize][send as usize];
        self.done(r, i, wait);
    }

    /// Refuses, before anything is emitted, an iteration whose schedule cannot fit in memory:
    /// each distinct collective is made with one and two chunks, its transfers extended along
    /// that line to the chunks asked for (schedules grow with their pieces) and counted for every
    /// instance, beside a wait per node.
    fn reserve_memory(&mut self) -> Result<(), Error> {
        // Synthesized schedules and ForestColl's trees cost seconds to make; the synthesizer
        // guards its own memory.
        let algorithm = self.options.algorithm;
        if algorithm.synthesis().is_some() || algorithm == Algorithm::ForestColl {
            return Ok(());
        }
        let mut instances: HashMap<(CollectiveKind, u64, Vec<NodeId>), u64> = HashMap::new();
        for (name, c) in &self.communicators {
            let (m0, nodes) = (c.members[0], &c.nodes[0]);
            let npus = self.member_npus(c);
            // A solo communicator's collectives are one wait each.
            if npus.len() < 2 || self.solo.contains(name) {
                continue;
            }
            for &i in nodes {
                if let Task::Collective {
                    kind, bytes, times, ..
                } = self.program.ranks[m0 as usize][i as usize].task
                {
                    *instances.entry((kind, bytes, npus.clone())).or_default() += times as u64;
                }
            }
        }
        let chunks = self.options.chunks.unwrap_or(1).max(1) as u64;
        let nodes: u64 = self.program.ranks.iter().map(|r| r.len() as u64).sum();
        let mut transfers = 2 * nodes;
        for ((kind, bytes, npus), count) in instances {
            // Transfers grow linearly with the pieces: two small cuts give the line.
            let one = self.make_one(kind, bytes, &npus, 1)?.len() as u64;
            let two = self.make_one(kind, bytes, &npus, 2)?.len() as u64;
            let per_chunk = two.saturating_sub(one);
            // As `make_one` does: halved while the collective cannot be cut that finely.
            let mut fit = chunks;
            while fit > 1 && Collective::new(kind, npus.clone(), bytes, fit as u32, None).is_err() {
                fit /= 2;
            }
            let estimate = one.saturating_sub(per_chunk) + per_chunk.saturating_mul(fit);
            transfers = transfers.saturating_add(count.saturating_mul(estimate + 2));
        }
        crate::memory::ensure(
            crate::memory::bytes(transfers, TRAINING_BYTES_PER_TRANSFER),
            &format!(
                "the iteration's schedule (about {transfers} transfers with {chunks} chunks a \
                 collective)"
            ),
            "give a smaller --chunks",
        )
    }

    /// The NPUs of a communicator's members, sorted (the key of its collectives' schedules).
    fn member_npus(&self, c: &Communicator) -> Vec<NodeId> {
        let mut npus: Vec<NodeId> = c.members.iter().map(|&m| self.npus[m as usize]).collect();
        npus.sort_unstable();
        npus
    }

    /// Finds the serial communicators that no other communication shares a link with: every
    /// distinct collective and every sender-receiver pair is simulated alone once, and the
    /// links that carry its bytes are its links.
    fn find_solo(&mut self) -> Result<(), Error> {
        if self.program.serial_communicators.is_empty() {
            return Ok(());
        }
        const SHARED: u32 = u32::MAX;
        let links = self.topology.links().len();
        // Per link: the one user so far (communicator index + 1; 0 unused), or SHARED.
        let mut user = vec![0u32; links];
        // Marks `used` links as used by `id`.
        let claim = |user: &mut Vec<u32>, used: &[usize], id: u32| {
            for &l in used {
                if user[l] != id {
                    user[l] = if user[l] == 0 { id } else { SHARED };
                }
            }
        };
        let alone = SimOptions {
            record_transfers: false,
            ..self.options.sim.clone()
        };
        let names: Vec<String> = self.communicators.keys().cloned().collect();
        // Per communicator: its links, and per distinct collective the time it took alone and
        // the load it put on each link it used.
        let mut used: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
        // What a collective alone left on each link it used: the link, its bytes, its busy time.
        type Usage = Vec<(usize, u64, Time)>;
        type Alone = (CollectiveKey, Time, Usage);
        let mut alone_runs: Vec<Vec<Alone>> = vec![Vec::new(); names.len()];
        let progress = self.options.progress.clone();
        if let Some(steps) = &progress {
            steps.begin("communicators timed alone", names.len() as u64);
        }
        // Each communicator's distinct collectives, their schedules made in order.
        let mut jobs: Vec<(usize, CollectiveKey)> = Vec::new();
        for (index, name) in names.iter().enumerate() {
            if let Some(steps) = &progress {
                steps.step();
            }
            let c = &self.communicators[name];
            let npus = self.member_npus(c);
            if npus.len() < 2 {
                continue;
            }
            let m0 = c.members[0] as usize;
            let mut sizes: Vec<(CollectiveKind, u64)> = c.nodes[0]
                .iter()
                .filter_map(|&i| match self.program.ranks[m0][i as usize].task {
                    Task::Collective { kind, bytes, .. } => Some((kind, bytes)),
                    _ => None,
                })
                .collect();
            sizes.sort_unstable_by_key(|&(k, b)| (k.name(), b));
            sizes.dedup();
            for (kind, bytes) in sizes {
                let key = (kind, bytes, npus.clone());
                if !self.cache.contains_key(&key) {
                    let part = self.make(kind, bytes, &npus)?;
                    self.cache.insert(key.clone(), part);
                }
                jobs.push((index, key));
            }
        }
        // Each simulated alone, on as many threads as there are, kept in the jobs' order so the
        // links are claimed as before: its time and what it left on each link it used.
        if let Some(steps) = &progress {
            steps.begin("collectives timed alone", jobs.len() as u64);
        }
        let (topology, cache) = (self.topology, &self.cache);
        let runs: Vec<(Time, Usage)> = jobs
            .par_iter()
            .map(|(_, key)| {
                let result = sim::simulate(topology, &cache[key].schedule, &alone, &mut ())?;
                if let Some(steps) = &progress {
                    steps.step();
                }
                let usage = (0..links)
                    .filter(|&l| result.link_bytes[l] > 0)
                    .map(|l| (l, result.link_bytes[l], result.link_busy[l]))
                    .collect();
                Ok((result.finish, usage))
            })
            .collect::<Result<_, Error>>()?;
        for ((index, key), (finish, usage)) in jobs.into_iter().zip(runs) {
            let carried: Vec<usize> = usage.iter().map(|&(l, _, _)| l).collect();
            claim(&mut user, &carried, index as u32 + 1);
            used[index].extend(carried);
            alone_runs[index].push((key, finish, usage));
        }
        // Messages: one claimant for all of them (they are never alone).
        let mut pairs: Vec<(NodeId, NodeId)> = self
            .channels
            .keys()
            .map(|&(a, b, _)| (self.npus[a as usize], self.npus[b as usize]))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        // One simulation of a byte between every pair finds the links messages use.
        if !pairs.is_empty() {
            let mut all = Schedule::with_capacity(pairs.len());
            for (src, dst) in pairs {
                all.push(crate::schedule::Transfer { src, dst, bytes: 1 }, &[]);
            }
            let result = sim::simulate(self.topology, &all, &alone, &mut ())?;
            let carried: Vec<usize> = (0..links).filter(|&l| result.link_bytes[l] > 0).collect();
            claim(&mut user, &carried, SHARED - 1);
        }
        self.solo_link_bytes = vec![0; links];
        self.solo_link_busy = vec![Time::ZERO; links];
        for (index, name) in names.iter().enumerate() {
            let id = index as u32 + 1;
            let mine = &used[index];
            if !self.program.serial_communicators.contains(name)
                || mine.is_empty()
                || mine.iter().any(|&l| user[l] != id)
            {
                continue;
            }
            self.solo.insert(name.clone());
            for (key, finish, usage) in std::mem::take(&mut alone_runs[index]) {
                // Another model of the same call (the NCCL model) may time it instead.
                let modelled = match &self.options.solo_timer {
                    Some(timer) => timer.time(key.0, key.1, &key.2)?,
                    None => None,
                };
                self.solo_times
                    .insert(key.clone(), modelled.unwrap_or(finish));
                self.solo_usage.insert(key, usage);
            }
        }
        Ok(())
    }

    /// Every member has reached instance `k` of `communicator`: emit its schedule.
    fn collective(&mut self, communicator: &str, k: usize) -> Result<(), Error> {
        let c = &self.communicators[communicator];
        let members: Vec<(u32, u32)> = c
            .members
            .iter()
            .zip(&c.nodes)
            .map(|(&m, nodes)| (m, nodes[k]))
            .collect();
        let mut after: Vec<TransferIndex> = Vec::new();
        for &(m, i) in &members {
            after.extend(self.dep_ends(m, i));
        }
        after.sort_unstable();
        after.dedup();
        let (m0, i0) = members[0];
        let first_npu = self.npus[m0 as usize];
        let Task::Collective {
            kind, bytes, times, ..
        } = self.program.ranks[m0 as usize][i0 as usize].task
        else {
            unreachable!("communicators list collective nodes")
        };
        let mut npus: Vec<NodeId> = members
            .iter()
            .map(|&(m, _)| self.npus[m as usize])
            .collect();
        npus.sort_unstable();
        let key = (kind, bytes, npus.clone());
        if self.solo.contains(communicator) {
            // One wait from when every member has arrived.
            let once = self.solo_times[&key];
            for &(l, bytes, busy) in &self.solo_usage[&key] {
                self.solo_link_bytes[l] += bytes * times as u64;
                self.solo_link_busy[l] =
                    self.solo_link_busy[l] + Time::from_ps(busy.ps() * times as u64);
            }
            let end =
                self.schedule
                    .push_wait(first_npu, Time::from_ps(once.ps() * times as u64), &after);
            for (m, i) in members {
                self.start[m as usize][i as usize] = Some(end);
                self.done(m, i, end);
            }
            return Ok(());
        }
        let start = self.schedule.push_wait(first_npu, Time::ZERO, &after);
        if npus.len() < 2 {
            // A communicator of one rank has nothing to exchange.
            self.done(m0, i0, start);
            self.start[m0 as usize][i0 as usize] = Some(start);
            return Ok(());
        }
        if !self.cache.contains_key(&key) {
            let s = self.make(kind, bytes, &npus)?;
            self.cache.insert(key.clone(), s);
        }
        let part = &self.cache[&key];
        let mut end = start;
        for _ in 0..times {
            let base = self.schedule.append(&part.schedule, &[end]);
            let mut sinks: Vec<TransferIndex> = part.sinks.iter().map(|&t| base + t).collect();
            if sinks.is_empty() {
                sinks.push(end);
            }
            end = self.schedule.push_wait(first_npu, Time::ZERO, &sinks);
        }
        for (m, i) in members {
            self.start[m as usize][i as usize] = Some(start);
            self.done(m, i, end);
        }
        Ok(())
    }

    fn done(&mut self, r: u32, i: u32, end: TransferIndex) {
        self.end[r as usize][i as usize] = end;
        self.state[r as usize][i as usize] = State::Done;
        let (offsets, _) = &self.dependents[r as usize];
        let (from, to) = (offsets[i as usize], offsets[i as usize + 1]);
        for k in from..to {
            let d = self.dependents[r as usize].1[k as usize];
            let w = &mut self.waiting[r as usize][d as usize];
            *w -= 1;
            if *w == 0 {
                self.ready.push_back((r, d));
            }
        }
    }

    /// The schedule of one collective on `npus`, validated when asked, and its sinks.
    fn make(&mut self, kind: CollectiveKind, bytes: u64, npus: &[NodeId]) -> Result<Part, Error> {
        let chunks = self.options.chunks.unwrap_or(1).max(1);
        let mut s = self.make_one(kind, bytes, npus, chunks)?;
        if self.options.validate {
            let claim = s.collective.clone().expect("generated schedules claim");
            schedule::validate(&s, &claim, self.options.seed)
                .map_err(|e| Error::input(format!("{kind} on {npus:?}: {e}")))?;
        }
        s.collective = None;
        s.drop_pieces();
        let mut needed = vec![false; s.len()];
        for t in 0..s.len() as TransferIndex {
            for &d in s.deps(t) {
                needed[d as usize] = true;
            }
        }
        let sinks = (0..s.len() as TransferIndex)
            .filter(|&t| !needed[t as usize])
            .collect();
        Ok(Part { schedule: s, sinks })
    }

    fn make_one(
        &mut self,
        kind: CollectiveKind,
        bytes: u64,
        npus: &[NodeId],
        chunks: u32,
    ) -> Result<Schedule, Error> {
        let o = self.options;
        // As many chunks as asked for, halved while the collective cannot be cut that finely.
        let mut chunks = chunks;
        let c = loop {
            match Collective::new(kind, npus.to_vec(), bytes, chunks, None) {
                Ok(c) => break c,
                Err(_) if chunks > 1 => chunks /= 2,
                Err(e) => return Err(e),
            }
        };
        let whole = npus.len() == self.topology.active_npus().len();
        let generated = match o.algorithm {
            algorithm if algorithm.synthesis().is_some() => {
                let options = SynthOptions {
                    seed: o.seed,
                    method: algorithm.synthesis().expect("a synthesized algorithm"),
                    ..o.synth.clone()
                };
                synth::synthesize_cached(
                    self.topology,
                    &mut self.unwound,
                    std::slice::from_ref(&c),
                    &options,
                )
                .map(|mut s| s.schedules.remove(0))
            }
            // ForestColl packs its trees for the group on the whole network: its paths may leave
            // the group's NPUs.
            Algorithm::ForestColl => algorithms::forestcoll::produce(
                self.topology,
                &c,
                o.trees,
                o.chunks.map(|_| chunks),
            )
            .map(|(s, _)| s),
            Algorithm::Hierarchical | Algorithm::Themis if !whole => {
                match whole_dimensions(self.topology, npus) {
                    // The group is whole dimensions: generate on them and move onto its NPUs.
                    Some(range) => {
                        let sub = self.topology.sub_dimensions(range)?;
                        let local = Collective::new(
                            kind,
                            (0..npus.len() as NodeId).collect(),
                            bytes,
                            chunks,
                            None,
                        )?;
                        algorithms::generate_with(o.algorithm, &sub, &local, &o.multi_dim).map(
                            |mut s| {
                                s.relabel(npus);
                                s
                            },
                        )
                    }
                    None => Err(Error::input(format!(
                        "{}: a group of {} NPUs is not whole dimensions of {}",
                        o.algorithm.name(),
                        npus.len(),
                        self.topology.name()
                    ))),
                }
            }
            a => algorithms::generate_with(a, self.topology, &c, &o.multi_dim),
        };
        match generated {
            Ok(s) => Ok(s),
            Err(e) if o.algorithm != Algorithm::Direct => {
                let note = format!(
                    "{} {kind} of {bytes} B: {e}; ran direct instead",
                    o.algorithm.name()
                );
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
                algorithms::generate(Algorithm::Direct, self.topology, &c)
            }
            Err(e) => Err(e),
        }
    }
}

/// Two collective nodes are one collective when kind and size agree.
fn same_collective(a: &Task, b: &Task) -> bool {
    match (a, b) {
        (
            Task::Collective {
                kind: k1,
                bytes: b1,
                times: t1,
                ..
            },
            Task::Collective {
                kind: k2,
                bytes: b2,
                times: t2,
                ..
            },
        ) => k1 == k2 && b1 == b2 && t1 == t2,
        _ => false,
    }
}

fn check_peer(program: &Program, r: usize, node: &Node, peer: u32) -> Result<(), Error> {
    if peer as usize >= program.ranks.len() || peer as usize == r {
        return Err(Error::input(format!(
            "{}: rank {r} node {} ({}) names peer rank {peer} (ranks 0..{}, not itself)",
            program.name,
            node.id,
            node.name,
            program.ranks.len()
        )));
    }
    Ok(())
}

/// The dimensions `npus` (ascending) span when they are exactly the NPUs that differ from the
/// first in those dimensions only, on a fault-free dimensional network.
pub(crate) fn whole_dimensions(topology: &Topology, npus: &[NodeId]) -> Option<Range<usize>> {
    let dims = topology.dims();
    if dims.is_empty() || topology.active_npus().len() as u32 != topology.npus() {
        return None;
    }
    let strides = crate::topology::strides_of(dims);
    let coord = |v: NodeId, d: usize| (v / strides[d]) % dims[d].size;
    let first = npus[0];
    for a in 0..dims.len() {
        for b in a + 1..=dims.len() {
            let size: u32 = dims[a..b].iter().map(|d| d.size).product();
            if size as usize != npus.len() {
                continue;
            }
            let fits = npus.iter().all(|&v| {
                (0..dims.len())
                    .filter(|d| !(a..b).contains(d))
                    .all(|d| coord(v, d) == coord(first, d))
            });
            if fits {
                return Some(a..b);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    fn options() -> TrainOptions {
        TrainOptions::new(Algorithm::Ring)
    }

    fn node(id: u64, task: Task, deps: Vec<u32>) -> Node {
        Node {
            id,
            name: format!("n{id}"),
            task,
            deps,
        }
    }

    /// A collective on a communicator of one rank takes no time; compute on each rank runs one
    /// node at a time even without dependencies between the nodes.
    #[test]
    fn lone_collectives_are_free_and_compute_is_serial() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let compute = |us: u64| Task::Compute {
            duration: Time::from_ns(us * 1000),
            forward: true,
        };
        let rank = |r: u32| {
            vec![
                node(0, compute(3), vec![]),
                node(1, compute(4), vec![]),
                node(
                    2,
                    Task::Collective {
                        kind: CollectiveKind::AllReduce,
                        bytes: 1 << 20,
                        communicator: format!("solo{r}"),
                        group: CommGroup::Data,
                        times: 1,
                    },
                    vec![0, 1],
                ),
            ]
        };
        let program = Program {
            name: "p".into(),
            ranks: vec![rank(0), rank(1)],
            ..Program::default()
        };
        let run = execute(&t, &program, &[0, 1], &options(), &mut ()).unwrap();
        assert_eq!(run.breakdown.total, Time::from_ns(7000));
        assert_eq!(run.breakdown.exposed_comm, Time::ZERO);
    }

    /// A rank's time is its compute, exposed communication, bubble and idle time, also when it
    /// ends with communication after its last compute: a 2 MiB all-gather over a 1 GB/s ring of
    /// two (1 MiB each way, 1 us a hop) after 3 us of compute is exposed whole.
    #[test]
    fn communication_after_the_last_compute_is_exposed() {
        let t = TopologyOptions::new("ring:2")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let rank = vec![
            node(
                0,
                Task::Compute {
                    duration: Time::from_ns(3000),
                    forward: false,
                },
                vec![],
            ),
            node(
                1,
                Task::Collective {
                    kind: CollectiveKind::AllGather,
                    bytes: 1 << 21,
                    communicator: "dp".into(),
                    group: CommGroup::Data,
                    times: 1,
                },
                vec![0],
            ),
        ];
        let program = Program {
            name: "p".into(),
            ranks: vec![rank.clone(), rank],
            ..Program::default()
        };
        let run = execute(&t, &program, &[0, 1], &options(), &mut ()).unwrap();
        for r in &run.ranks {
            let b = &r.breakdown;
            let parts = b.forward_compute + b.backward_compute + b.exposed_comm + r.bubble + r.idle;
            assert_eq!(parts, b.total, "rank {}", r.rank);
            assert!(b.exposed_data_parallel > Time::from_ns(1_000_000));
            assert_eq!(r.exposed_by_group, vec![("data", b.exposed_comm)]);
        }
    }

    /// A collective that names no communicator runs on every rank: a rank without it is named.
    #[test]
    fn collectives_without_a_communicator_need_every_rank() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let all_reduce = Task::Collective {
            kind: CollectiveKind::AllReduce,
            bytes: 64,
            communicator: String::new(),
            group: CommGroup::Data,
            times: 1,
        };
        let program = Program {
            name: "p".into(),
            ranks: vec![vec![node(0, all_reduce, vec![])], vec![]],
            ..Program::default()
        };
        let err = execute(&t, &program, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 1 has none"), "{err}");
    }

    /// A receive whose send never comes, and a cycle through two ranks' messages, are named.
    #[test]
    fn unmatched_messages_are_refused() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let recv = |peer| Task::Recv {
            peer,
            bytes: 8,
            tag: 0,
        };
        let send = |peer| Task::Send {
            peer,
            bytes: 8,
            tag: 0,
        };
        let lonely = Program {
            name: "p".into(),
            ranks: vec![vec![node(0, recv(1), vec![])], vec![]],
            ..Program::default()
        };
        let err = execute(&t, &lonely, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("receives"), "{err}");
        // Each rank receives before it sends: neither message can leave.
        let deadlock = Program {
            name: "p".into(),
            ranks: vec![
                vec![node(0, recv(1), vec![]), node(1, send(1), vec![0])],
                vec![node(0, recv(0), vec![]), node(1, send(0), vec![0])],
            ],
            ..Program::default()
        };
        let err = execute(&t, &deadlock, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("never runs"), "{err}");
    }
}
