//! Turning per-rank programs into one schedule for the event engine: every node's completion
//! becomes a schedule entry, collectives become their algorithm's transfers among the
//! members (or, on a serial communicator alone on its links, a wait of the time the collective
//! takes alone), and messages become transfers between their ranks.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Range;

use rayon::prelude::*;

use super::program::{Node, Program, Task};
use super::TrainOptions;
use crate::algorithms::{self, Algorithm};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{self, Schedule, TransferIndex};
use crate::sim::{self, SimOptions};
use crate::synth::{self, SynthOptions};
use crate::topology::{NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// Where a node stands while the schedule is emitted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    /// Dependencies done; a collective or receive waiting for its partners.
    Arrived,
    Done,
}

/// What emitting a program leaves for running it: the schedule, and where each node sits in it.
pub(super) struct Emitted {
    pub(super) schedule: Schedule,
    /// Per rank and node: the schedule entry whose completion is the node's.
    pub(super) end: Vec<Vec<TransferIndex>>,
    /// Per rank and communication node: the entry whose issue (its dependencies done) is when
    /// the communication began: a collective's start, a message (for its send and receive).
    pub(super) start: Vec<Vec<Option<TransferIndex>>>,
    /// Per rank, its compute nodes in the order they ran.
    pub(super) compute_order: Vec<Vec<u32>>,
    /// The serial communicators found alone on their links, sorted.
    pub(super) timed_alone: Vec<String>,
    /// Bytes and busy time the collectives timed alone put on each link (they run as waits).
    pub(super) solo_link_bytes: Vec<u64>,
    pub(super) solo_link_busy: Vec<Time>,
    pub(super) notes: Vec<String>,
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

/// Emits `program`'s schedule, rank `r` on NPU `npus[r]`, or names a node that never runs.
pub(super) fn emit(
    topology: &Topology,
    program: &Program,
    npus: &[NodeId],
    options: &TrainOptions,
) -> Result<Emitted, Error> {
    let mut emitter = Emitter::new(topology, program, npus, options)?;
    emitter.run()?;
    let mut timed_alone: Vec<String> = emitter.solo.into_iter().collect();
    timed_alone.sort_unstable();
    Ok(Emitted {
        schedule: emitter.schedule,
        end: emitter.end,
        start: emitter.start,
        compute_order: emitter.compute_order,
        timed_alone,
        solo_link_bytes: emitter.solo_link_bytes,
        solo_link_busy: emitter.solo_link_busy,
        notes: emitter.notes,
    })
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
fn whole_dimensions(topology: &Topology, npus: &[NodeId]) -> Option<Range<usize>> {
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
