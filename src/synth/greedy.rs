//! One run of TACOS greedy link-chunk matching.
//!
//! Event-driven over link-free and arrival times. At each event time, every NPU with a free
//! incoming link matches chunks to those links: the fastest links choose first (earliest
//! arrival), ties in random order, and each link takes a chunk its source already holds and its
//! destination neither holds nor has on the way. A link sends the chunks that reached its source
//! in arrival order, choosing at random among those that arrived together: that keeps every
//! link's order the order the simulator's FIFO queues will serve, so the synthesizer's time
//! estimate is the simulated time of its schedule. Decisions of different destinations are
//! independent (each link has one destination), so the bookkeeping is per link and per NPU:
//! a queue of candidate chunks per link, a bitset of held-or-incoming chunks per NPU.
//!
//! Large spreads where every NPU wants every chunk (all-gathers) run on two workers, each
//! matching the links into half of the NPUs in windows of simulated time shorter than any send's
//! arrival delay ([`split`]).
//!
//! A chunk with one destination (scatter, gather, all-to-all) is forwarded rather than copied:
//! it has a single holder at a time and moves only over links that bring it strictly closer to
//! its destination (by the links' delays), relaying through NPUs that do not want it.

use std::cmp::Reverse;
use std::ops::Range;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::network::Network;
use crate::units::Time;
use crate::Error;

mod instants;
mod problem;
mod split;

use instants::Instants;
use problem::MAX_SENDS;
pub(crate) use problem::{ensure_send_ids, Holding, Members, Problem, Send, NONE};

/// How many chunks that reached a link's source together a random choice looks at.
const TIE_WINDOW: usize = 64;

/// How many events (or NPUs to match) ahead the event loop fetches what they read, a step of a
/// chain of dependent fetches at each multiple of it: link queues, then their sources' inboxes,
/// then the queue heads, then the claims those name ([`fetch_ahead`]).
const PREFETCH_AHEAD: usize = 8;
/// The steps of fetching for an event ([`State::prefetch_event`]) and for matching an NPU
/// ([`State::prefetch_matching`]).
const EVENT_STAGES: usize = 3;
const MATCH_STAGES: usize = 4;
/// The number of sends past which the greedy fetches ahead: below, its state and the in-order
/// windows it feeds stay in the caches (a 32 MiB L3 on this machine kind) and the fetches only
/// cost (a fifth of a 32x32 mesh's synthesis, 1M sends). It is where the earlier test, the
/// greedy's estimated state ([`bytes_for`]) at 6 B a send past 32 MiB, switched.
const PREFETCH_FROM_SENDS: u64 = 5_500_000;
/// How many entries of a free link's queue the last step of fetching for matching looks at, and
/// how many of those its destination's claims are fetched for ([`State::prefetch_head_claims`]).
const CLAIMS_SCANNED: usize = 8;
const CLAIMS_AHEAD: usize = 3;

/// A chunk that reached an NPU, which its outgoing links may pass on.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    /// The instant it arrived, numbered in time order (chunks that arrived together tie).
    instant: u32,
    chunk: u32,
    via: u32,
    /// Bit `k`: the NPU's `k`-th outgoing link could do the chunk good when it arrived. A link
    /// that could not never can (claims only grow), so a link's queue passes over the chunk
    /// without reading its destination's claims, a cache miss each on large networks: filling
    /// the bits costs nothing more, the arrival reads those claims (fetched ahead) anyway.
    wanted: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    LinkFree {
        link: u32,
    },
    /// `chunk` reaches `npu` by send `send` from NPU `from` ([`NONE`] for both: held from the
    /// start).
    Arrive {
        npu: u32,
        chunk: u32,
        send: u32,
        from: u32,
    },
}

/// The random stream of one trial: the same (seed, stream) always gives the same choices.
pub(crate) fn trial_rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// How many of an NPU's outgoing links have a bit in [`Candidate::wanted`].
const RANKED_LINKS: u8 = u32::BITS as u8;

/// Where a link's queue stands: what arrivals, freed links and matching read of every link they
/// look at, in 16 B. Each send has them look at about four links each; in the link's slot (a
/// cache line) that was a memory miss each on large meshes, here most are cache hits.
#[derive(Clone, Copy, Debug)]
struct Queue {
    src: u32,
    dst: u32,
    /// The position in its source's log of the next chunk it may send.
    cursor: u32,
    free: bool,
    /// Whether it joins two clusters ([`Network::crosses`]).
    crosses: bool,
    /// Its rank among its source's outgoing links, its bit in [`Candidate::wanted`];
    /// [`RANKED_LINKS`] or more: it has none and checks every chunk.
    rank: u8,
}

impl Queue {
    /// False when the link was no use to `entry` when it arrived, and so never will be.
    fn may_want(&self, entry: &Candidate) -> bool {
        self.rank >= RANKED_LINKS || entry.wanted >> self.rank & 1 == 1
    }

    /// Its bit in [`Candidate::wanted`] (none past the 32nd link).
    fn wanted_bit(&self) -> u32 {
        1u32.checked_shl(self.rank.into()).unwrap_or(0)
    }
}

/// What matching reads and writes of a link it sends on, in one cache line: one array per field
/// cost a memory miss each on large meshes.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct LinkSlot {
    /// Whether another link into the same NPU is faster (only then can a chunk be left to it).
    has_faster_sibling: bool,
    /// When it finishes its current send and the sends left to it by slower links.
    planned_until: Time,
    /// Link-free delay of the largest chunk.
    serialization: Time,
    /// Arrival delay of the largest chunk.
    delay: Time,
    /// Link-free and arrival delays of the smallest chunk: a size that does not divide evenly
    /// leaves chunks of two sizes, a byte apart, and computing a delay costs a division and a
    /// miss on the network's link.
    smallest: (Time, Time),
}

/// One NPU's received chunks.
#[derive(Clone, Debug, Default)]
struct Inbox {
    /// The chunks it received, in arrival order (shared by its outgoing links).
    log: Vec<Candidate>,
    /// How many entries were trimmed off the front of the log.
    trimmed: u32,
    /// Whether it is in [`State::dirty`].
    dirty: bool,
}

struct State<'a> {
    net: &'a Network,
    problem: &'a Problem,
    /// Every NPU wants every chunk (no group, no single destination), as in an all-gather:
    /// whether a link could use a chunk is then one bit of its destination's claims, asked
    /// for every entry of every queue.
    copies_to_all: bool,
    /// Words per NPU in `claimed`, per cluster in `cluster_claimed`: one bit per chunk.
    words: usize,
    /// Per NPU, a bit per chunk: held or on its way.
    claimed: Vec<u64>,
    /// Per cluster of NPUs, a bit per chunk: some member holds it or has it on the way. A link
    /// between clusters never brings a cluster a chunk it already has or has coming: the chunk
    /// spreads inside on the fast links, and every link into the cluster carries another chunk.
    cluster_claimed: Vec<u64>,
    /// Per NPU, its log of received chunks.
    inbox: Vec<Inbox>,
    /// Per link, where its queue stands.
    queues: Vec<Queue>,
    /// Per link, its delays and plans.
    slots: Vec<LinkSlot>,
    /// Per chunk, how many NPUs hold it or have it on the way.
    holders: Vec<u32>,
    /// The largest and the smallest chunk, whose delays are precomputed.
    largest: u64,
    smallest: u64,
    /// The number of the instant being matched ([`Candidate::instant`]).
    instant: u32,
    dirty: Vec<u32>,
    remaining: u64,
    sends: u32,
    makespan: Time,
    /// Per unicast chunk: its holder, and whether it is on its way to the next one.
    at: Vec<u32>,
    moving: Vec<bool>,
    /// Per destination of unicast chunks: every NPU's shortest delay to it (index by
    /// `dest_index`).
    to_dest: Vec<Vec<u64>>,
    dest_index: Vec<u32>,
    /// The NPUs whose incoming links this state matches: all of them, or one side's where the
    /// run is split between two workers ([`split`]). The claims, queues and logs of links into
    /// the others are not kept here.
    own: Range<u32>,
}

impl State<'_> {
    /// True when this state matches the links into `npu`.
    #[inline]
    fn owns(&self, npu: u32) -> bool {
        self.own.contains(&npu)
    }

    /// True when link `l` (into `dst`) would do chunk `c` good: a copy `dst` wants and has not
    /// got coming, or the next hop of a unicast chunk towards its destination.
    #[inline]
    fn useful(&self, l: u32, dst: u32, c: u32) -> bool {
        if self.copies_to_all {
            return !self.claimed(dst, c) && !self.cluster_has(l, c);
        }
        self.useful_in_general(l, dst, c)
    }

    /// [`State::useful`] where chunks go to groups or single destinations.
    #[inline(never)]
    fn useful_in_general(&self, l: u32, dst: u32, c: u32) -> bool {
        match self.problem.unicast(c) {
            Some(d) => {
                let src = self.queues[l as usize].src;
                let to = &self.to_dest[self.dest_index[d as usize] as usize];
                self.at[c as usize] == src
                    && !self.moving[c as usize]
                    && self.problem.member(dst, c)
                    && to[dst as usize] < to[src as usize]
            }
            None => self.problem.wants(dst, c) && !self.claimed(dst, c) && !self.cluster_has(l, c),
        }
    }

    /// The word holding bit `chunk` of row `row` (an NPU in `claimed`, a cluster in
    /// `cluster_claimed`), and the bit.
    fn chunk_bit(&self, row: u32, chunk: u32) -> (usize, u64) {
        (
            row as usize * self.words + chunk as usize / 64,
            1 << (chunk % 64),
        )
    }

    #[inline]
    fn claimed(&self, npu: u32, chunk: u32) -> bool {
        let (word, bit) = self.chunk_bit(npu, chunk);
        self.claimed[word] & bit != 0
    }

    fn claim(&mut self, npu: u32, chunk: u32) {
        self.holders[chunk as usize] += 1;
        let (word, bit) = self.chunk_bit(npu, chunk);
        self.claimed[word] |= bit;
        if self.net.clusters > 1 {
            let (word, bit) = self.chunk_bit(self.net.cluster[npu as usize], chunk);
            self.cluster_claimed[word] |= bit;
        }
    }

    /// True when link `l` would bring its destination's cluster a chunk it already has (or has
    /// coming) from outside.
    fn cluster_has(&self, l: u32, chunk: u32) -> bool {
        let link = &self.queues[l as usize];
        if !link.crosses {
            return false;
        }
        let (word, bit) = self.chunk_bit(self.net.cluster[link.dst as usize], chunk);
        self.cluster_claimed[word] & bit != 0
    }

    fn mark_dirty(&mut self, npu: u32) {
        if !self.inbox[npu as usize].dirty {
            self.inbox[npu as usize].dirty = true;
            self.dirty.push(npu);
        }
    }

    /// Logs `chunk`'s arrival at `npu` by send `via` from NPU `from` and marks the neighbours
    /// it may go on to: not `from`, which holds it (a claims read saved, a memory miss each on
    /// large meshes).
    fn arrive(&mut self, npu: u32, chunk: u32, via: u32, from: u32) {
        let v = npu as usize;
        let log = &self.inbox[v].log;
        if log.len() == log.capacity() && log.len() >= 64 {
            // Forget what every outgoing link has gone past before the log grows, when that is
            // an eighth of it or more: the rest moves down at most once per eighth of the log,
            // where a link that lags would have it moved for a few entries at a time.
            let done = self
                .net
                .out_links(npu)
                .iter()
                .map(|&l| &self.queues[l as usize])
                .filter(|queue| self.owns(queue.dst))
                .map(|queue| queue.cursor)
                .min()
                .unwrap_or(0)
                - self.inbox[v].trimmed;
            if done as usize >= log.len() / 8 {
                self.inbox[v].log.drain(..done as usize);
                self.inbox[v].trimmed += done;
            }
        }
        if self.problem.unicast(chunk).is_some() {
            self.at[chunk as usize] = npu;
            self.moving[chunk as usize] = false;
        }
        let mut wanted = 0;
        for &l in self.net.out_links(npu) {
            let queue = &self.queues[l as usize];
            let (w, free, bit) = (queue.dst, queue.free, queue.wanted_bit());
            if w != from && self.owns(w) && self.useful(l, w, chunk) {
                wanted |= bit;
                if free {
                    self.mark_dirty(w);
                }
            }
        }
        self.inbox[v].log.push(Candidate {
            instant: self.instant,
            chunk,
            via,
            wanted,
        });
    }

    /// Link `l`'s queue: its source's log from the link's cursor on.
    fn queued(&self, l: u32) -> &[Candidate] {
        let queue = &self.queues[l as usize];
        let inbox = &self.inbox[queue.src as usize];
        inbox
            .log
            .get((queue.cursor - inbox.trimmed) as usize..)
            .unwrap_or_default()
    }

    /// Hints the CPU to fetch link `l`'s queue: the first of the dependent fetches that lead to
    /// its head ([`State::prefetch_inbox`], then [`State::prefetch_head`]), each a few steps
    /// after the one before, so that none waits for memory (on a 200x200 mesh the queues are
    /// 2.6 MB and the inboxes 1.3 MB, and waiting for them was most of the matching).
    fn prefetch_queue(&self, l: u32) {
        crate::memory::prefetch(&self.queues[l as usize]);
    }

    /// Hints the CPU to fetch the inbox of link `l`'s source (its queue must be at hand).
    fn prefetch_inbox(&self, l: u32) {
        crate::memory::prefetch(&self.inbox[self.queues[l as usize].src as usize]);
    }

    /// Hints the CPU to fetch the end of `npu`'s log, where an arrival writes (its inbox must
    /// be at hand).
    fn prefetch_log_end(&self, npu: u32) {
        let log = &self.inbox[npu as usize].log;
        if let Some(last) = log.last() {
            crate::memory::prefetch(last);
        }
    }

    /// Hints the CPU to fetch the head of link `l`'s queue: the logs are large and each link
    /// reads its own place in its source's log, so the event loops fetch a few links ahead.
    fn prefetch_head(&self, l: u32) {
        if let Some(head) = self.queued(l).first() {
            crate::memory::prefetch(head);
        }
    }

    /// Hints the CPU to fetch the word of `npu`'s claims that says whether it has `chunk`: the
    /// claims are a bit per NPU and chunk (100 MB on a 168x168 mesh), read at scattered places
    /// as chunks arrive and links pick, a miss each where they are not fetched ahead.
    fn prefetch_claim(&self, npu: u32, chunk: u32) {
        if let Some(word) = self.claimed.get(self.chunk_bit(npu, chunk).0) {
            crate::memory::prefetch(word);
        }
    }

    /// Hints the CPU to fetch the queues of the links that an arrival of a chunk at `npu` reads.
    fn prefetch_out_queues(&self, npu: u32) {
        for &l in self.net.out_links(npu) {
            self.prefetch_queue(l);
        }
    }

    /// Hints the CPU to fetch what an arrival of `chunk` at `npu` checks: whether each
    /// neighbour it may pass the chunk to has it (the queues must be at hand, see
    /// [`State::prefetch_out_queues`]).
    fn prefetch_arrival(&self, npu: u32, chunk: u32, from: u32) {
        for &l in self.net.out_links(npu) {
            let dst = self.queues[l as usize].dst;
            if dst != from && self.owns(dst) {
                self.prefetch_claim(dst, chunk);
            }
        }
    }

    /// Hints the CPU to fetch whether `dst` has the chunks its free incoming links will look
    /// at: the first [`CLAIMS_AHEAD`] entries of each queue that the link's bit lets through
    /// (the heads must be at hand, see [`State::prefetch_head`]). A link passes over the
    /// entries `dst` got meanwhile by other links, each a claims read that waits for the one
    /// before: unfetched, on a 160x160 mesh those reads took a sixth of the whole run's time.
    fn prefetch_head_claims(&self, dst: u32) {
        for &l in self.net.in_links(dst) {
            let queue = &self.queues[l as usize];
            if !queue.free {
                continue;
            }
            self.queued(l)
                .iter()
                .take(CLAIMS_SCANNED)
                .filter(|entry| queue.may_want(entry))
                .take(CLAIMS_AHEAD)
                .for_each(|entry| self.prefetch_claim(dst, entry.chunk));
        }
    }

    /// Step `stage` (counting down to 1, the last before the event is handled) of fetching what
    /// `event` reads: a freed link's queue, source inbox and queue head; an arrival's inbox, its
    /// outgoing links' queues and log end, and its neighbours' claims.
    fn prefetch_event(&self, event: Event, stage: usize) {
        match (event, stage) {
            (Event::LinkFree { link }, 3) => self.prefetch_queue(link),
            (Event::LinkFree { link }, 2) => self.prefetch_inbox(link),
            (Event::LinkFree { link }, _) => self.prefetch_head(link),
            (Event::Arrive { npu, .. }, 3) => crate::memory::prefetch(&self.inbox[npu as usize]),
            (Event::Arrive { npu, .. }, 2) => {
                self.prefetch_out_queues(npu);
                self.prefetch_log_end(npu);
            }
            (
                Event::Arrive {
                    npu, chunk, from, ..
                },
                _,
            ) => self.prefetch_arrival(npu, chunk, from),
        }
    }

    /// Step `stage` (counting down to 1) of fetching what matching chunks into `dst` reads: its
    /// incoming links' queues, their sources' inboxes and the free links' slots, their queue
    /// heads, then `dst`'s claims of the chunks at those heads.
    fn prefetch_matching(&self, dst: u32, stage: usize) {
        let links = self.net.in_links(dst);
        match stage {
            4 => links.iter().for_each(|&l| self.prefetch_queue(l)),
            3 => {
                for &l in links {
                    self.prefetch_inbox(l);
                    if self.queues[l as usize].free {
                        crate::memory::prefetch(&self.slots[l as usize]);
                    }
                }
            }
            2 => links.iter().for_each(|&l| self.prefetch_head(l)),
            _ => self.prefetch_head_claims(dst),
        }
    }

    fn has_pending(&self, l: u32) -> bool {
        !self.queued(l).is_empty()
    }

    /// The faster link into `dst` that could deliver `chunk` before link `l` started now would,
    /// if any: its source holds the chunk (or has it on the way) and its planned sends leave room.
    /// On heterogeneous networks the slow link leaves such chunks to the fast one.
    fn better_elsewhere(&self, l: u32, dst: u32, chunk: u32, now: Time) -> Option<u32> {
        if !self.slots[l as usize].has_faster_sibling || self.problem.unicast(chunk).is_some() {
            return None;
        }
        let here = now + self.slots[l as usize].delay;
        self.net
            .in_links(dst)
            .iter()
            .copied()
            .filter(|&m| m != l && self.slots[m as usize].delay < self.slots[l as usize].delay)
            .map(|m| {
                (
                    self.slots[m as usize].planned_until.max(now) + self.slots[m as usize].delay,
                    m,
                )
            })
            .filter(|&(arrive, m)| {
                arrive < here && self.claimed(self.queues[m as usize].src, chunk)
            })
            .min()
            .map(|(_, m)| m)
    }

    /// Takes the next chunk of link `l`'s queue for its destination `dst`: the earliest arrived,
    /// a random one among those that arrived together. Drops chunks `dst` no longer needs from
    /// this link (held, on the way, or sooner by a faster link), so the link's sends stay in the
    /// order their chunks reached its source.
    fn pick(&mut self, l: u32, dst: u32, now: Time, rng: &mut ChaCha8Rng) -> Option<Candidate> {
        let useless = |s: &Self, e: &Candidate| {
            !s.queues[l as usize].may_want(e) || !s.useful(l, dst, e.chunk)
        };
        let first = loop {
            let e = *self.queued(l).first()?;
            if useless(self, &e) {
                self.queues[l as usize].cursor += 1;
            } else if let Some(m) = self.better_elsewhere(l, dst, e.chunk, now) {
                // Leave it to `m` and book the time it will take there.
                self.queues[l as usize].cursor += 1;
                let m = &mut self.slots[m as usize];
                m.planned_until = m.planned_until.max(now) + m.serialization;
            } else {
                break e;
            }
        };
        let queued = self.queued(l);
        // Rarest first (fewest NPUs hold it or have it coming), then at random.
        let (mut chosen, mut seen, mut rarest) = (0, 0u32, u32::MAX);
        for (i, c) in queued.iter().enumerate().take(TIE_WINDOW) {
            if c.instant != first.instant {
                break;
            }
            if i > 0 && (useless(self, c) || self.better_elsewhere(l, dst, c.chunk, now).is_some())
            {
                continue;
            }
            let holders = self.holders[c.chunk as usize];
            if holders < rarest {
                (rarest, seen) = (holders, 0);
            } else if holders > rarest {
                continue;
            }
            seen += 1;
            if seen == 1 || rng.random_range(0..seen) == 0 {
                chosen = i;
            }
        }
        // A chunk taken from further on stays in the log; its destination now holds it, so the
        // link passes over it later.
        let picked = queued[chosen];
        if chosen == 0 {
            self.queues[l as usize].cursor += 1;
        }
        Some(picked)
    }

    fn match_into(
        &mut self,
        dst: u32,
        events: &mut Instants<Event>,
        now: Time,
        links: &mut Vec<u32>,
        rng: &mut ChaCha8Rng,
        sink: &mut dyn FnMut(&[Send]),
    ) {
        links.clear();
        links.extend(
            self.net
                .in_links(dst)
                .iter()
                .copied()
                .filter(|&l| self.queues[l as usize].free && self.has_pending(l)),
        );
        if links.is_empty() {
            return;
        }
        links.shuffle(rng);
        links.sort_by_key(|&l| self.slots[l as usize].delay);
        for &l in links.iter() {
            if self.sends == NONE {
                // Out of send numbers (hops of single-destination chunks past the copies
                // [`ensure_send_ids`] counted): matching stops, and the run reports it.
                return;
            }
            let Some(c) = self.pick(l, dst, now, rng) else {
                continue;
            };
            let bytes = self.problem.chunk_bytes[c.chunk as usize];
            let slot = &self.slots[l as usize];
            let (free_after, arrive_after) = if bytes == self.largest {
                (slot.serialization, slot.delay)
            } else if bytes == self.smallest {
                slot.smallest
            } else {
                self.net.delays(l, bytes)
            };
            let send = Send {
                link: l,
                chunk: c.chunk,
                via: c.via,
                start: now,
                arrive: now + arrive_after,
            };
            self.claim(dst, c.chunk);
            self.queues[l as usize].free = false;
            let planned = &mut self.slots[l as usize].planned_until;
            *planned = (*planned).max(now + free_after);
            match self.problem.unicast(c.chunk) {
                Some(d) => {
                    self.moving[c.chunk as usize] = true;
                    if d == dst {
                        self.remaining -= 1;
                    }
                }
                None => self.remaining -= 1,
            }
            self.makespan = self.makespan.max(send.arrive);
            events.push(now + free_after, Event::LinkFree { link: l });
            events.push(
                send.arrive,
                Event::Arrive {
                    npu: dst,
                    chunk: c.chunk,
                    send: self.sends,
                    from: self.queues[l as usize].src,
                },
            );
            self.sends += 1;
            sink(std::slice::from_ref(&send));
        }
    }
}

/// Fetches ahead for entry `i` of a pass whose entries are `at(0)`, `at(1)`, ...: entry
/// `i + stage * PREFETCH_AHEAD` gets step `stage` (of `stages`, counting down to 1, each needing
/// the one before at hand). Before the first entry, the entries those would reach late get
/// their steps, the earlier steps first.
fn fetch_ahead<T>(
    i: usize,
    stages: usize,
    at: impl Fn(usize) -> Option<T>,
    mut step: impl FnMut(T, usize),
) {
    if i == 0 {
        for stage in (1..=stages).rev() {
            (0..stage * PREFETCH_AHEAD)
                .filter_map(&at)
                .for_each(|entry| step(entry, stage));
        }
    }
    for stage in 1..=stages {
        if let Some(entry) = at(i + stage * PREFETCH_AHEAD) {
            step(entry, stage);
        }
    }
}

/// For every destination of a unicast chunk, every NPU's shortest delay to it over the links
/// (the largest chunk's arrival delays); unreachable NPUs get `u64::MAX`. Returns the table index
/// of each NPU (`NONE` where it is no destination) and the tables.
fn delays_to_destinations(
    net: &Network,
    problem: &Problem,
    slots: &[LinkSlot],
) -> (Vec<u32>, Vec<Vec<u64>>) {
    let n = net.npus() as usize;
    let mut index = vec![NONE; n];
    let mut tables = Vec::new();
    for &d in problem.dest.iter().filter(|&&d| d != NONE) {
        if index[d as usize] != NONE {
            continue;
        }
        index[d as usize] = tables.len() as u32;
        let mut dist = vec![u64::MAX; n];
        dist[d as usize] = 0;
        let mut heap = std::collections::BinaryHeap::from([Reverse((0u64, d))]);
        while let Some(Reverse((t, v))) = heap.pop() {
            if t > dist[v as usize] {
                continue;
            }
            for &l in net.in_links(v) {
                let u = net.links[l as usize].src;
                let through = t + slots[l as usize].delay.ps();
                if through < dist[u as usize] {
                    dist[u as usize] = through;
                    heap.push(Reverse((through, u)));
                }
            }
        }
        tables.push(dist);
    }
    (index, tables)
}

/// What the chunk logs hold a send at their peak, with a margin: an NPU's log keeps what its
/// slowest outgoing link has not gone past. Measured on all-gathers with the event batches no
/// longer kept (2026-11-25): peak resident memory less the claims and the in-order windows,
/// about 1 B a send on a 96x96 mesh and 0.4 B on 200x200.
const LOG_BYTES_PER_SEND: u64 = 2;

/// Bytes a run of the greedy on `problem` holds at its peak, about: the claims (a bit per NPU
/// and chunk), the links' slots and queues (twice: a split run's two workers each keep them,
/// [`split`]) and the chunk logs.
pub(crate) fn bytes_for(net: &Network, problem: &Problem) -> u64 {
    let (n, chunks) = (net.npus() as u64, problem.chunks() as u64);
    let sends = problem.pairs(net.npus());
    let per_link = std::mem::size_of::<LinkSlot>() + std::mem::size_of::<Queue>();
    n * chunks.div_ceil(64) * 8
        + 2 * net.links.len() as u64 * per_link as u64
        + sends.saturating_mul(LOG_BYTES_PER_SEND)
}

/// Runs the greedy matching once with the random stream `rng`, handing every send to `sink` (a
/// few at a time) in an order that keeps each link's sends in start order and every send after
/// the one it depends on (by start time, or window by window where the run is split between two
/// workers, [`split`]). Returns the time the last chunk arrives.
pub(crate) fn run(
    net: &Network,
    problem: &Problem,
    rng: &mut ChaCha8Rng,
    sink: &mut dyn FnMut(&[Send]),
) -> Result<Time, Error> {
    if let Some(plan) = split::Split::plan(net, problem) {
        return split::run(net, problem, rng, sink, &plan);
    }
    let mut matching = Matching::new(State::new(net, problem, 0..net.npus()));
    matching.hold_initial(|_| true);
    while matching.step(rng, sink, &mut |_, send| send) {}
    matching.state.outcome()?;
    Ok(matching.state.makespan)
}

impl<'a> State<'a> {
    /// The state of a run that matches the links into the NPUs `own`, before anything is held.
    fn new(net: &'a Network, problem: &'a Problem, own: Range<u32>) -> State<'a> {
        let n = net.npus();
        let chunks = problem.chunks();
        let words = chunks.div_ceil(64) as usize;
        let largest = problem.chunk_bytes.iter().copied().max().unwrap_or(0);
        let smallest = problem.chunk_bytes.iter().copied().min().unwrap_or(0);
        let mut slots: Vec<LinkSlot> = (0..net.links.len() as u32)
            .map(|l| {
                let (serialization, delay) = net.delays(l, largest);
                LinkSlot {
                    has_faster_sibling: false,
                    planned_until: Time::ZERO,
                    serialization,
                    delay,
                    smallest: net.delays(l, smallest),
                }
            })
            .collect();
        let mut queues: Vec<Queue> = net
            .links
            .iter()
            .zip(&net.crosses)
            .map(|(link, &crosses)| Queue {
                src: link.src,
                dst: link.dst,
                cursor: 0,
                free: true,
                crosses,
                rank: RANKED_LINKS,
            })
            .collect();
        for npu in 0..n {
            for (rank, &l) in net.out_links(npu).iter().enumerate() {
                if rank == RANKED_LINKS as usize {
                    break;
                }
                queues[l as usize].rank = rank as u8;
            }
        }
        for l in 0..slots.len() {
            let own = slots[l].delay;
            slots[l].has_faster_sibling = net
                .in_links(queues[l].dst)
                .iter()
                .any(|&m| slots[m as usize].delay < own);
        }
        let per_chunk = |wanted: bool| match wanted {
            true => chunks as usize,
            false => 0,
        };
        let mut state = State {
            net,
            problem,
            copies_to_all: problem.copies_to_all(),
            words,
            // Only the rows of `own` are ever written: the others stay untouched zero pages.
            claimed: vec![0; n as usize * words],
            cluster_claimed: if net.clusters > 1 {
                vec![0; net.clusters as usize * words]
            } else {
                Vec::new()
            },
            inbox: vec![Inbox::default(); n as usize],
            queues,
            slots,
            holders: vec![0; chunks as usize],
            largest,
            smallest,
            instant: 0,
            dirty: Vec::new(),
            remaining: 0,
            sends: 0,
            makespan: Time::ZERO,
            at: vec![NONE; per_chunk(!problem.dest.is_empty())],
            moving: vec![false; per_chunk(!problem.dest.is_empty())],
            to_dest: Vec::new(),
            dest_index: Vec::new(),
            own,
        };
        if !problem.dest.is_empty() {
            let (index, tables) = delays_to_destinations(net, problem, &state.slots);
            state.dest_index = index;
            state.to_dest = tables;
        }
        state.remaining = match state.own == (0..n) {
            true => problem.copies_wanted(n),
            // Split runs are all-gathers ([`split::Split::plan`]): every NPU wants every chunk.
            false => state.own.len() as u64 * chunks as u64,
        };
        state
    }

    /// Fails naming a pair that could not be delivered, or for running out of send numbers.
    fn outcome(&self) -> Result<(), Error> {
        if self.remaining > 0 && self.sends == NONE {
            return Err(Error::input(format!(
                "synthesis numbers its sends in 32 bits and ran out after {MAX_SENDS}; try \
                 fewer NPUs or chunks"
            )));
        }
        match self.missing() {
            Some((npu, chunk)) => Err(undeliverable(self.net, npu, chunk)),
            None => Ok(()),
        }
    }

    /// The first (NPU, chunk) pair of `own` wanted and not delivered, if any.
    fn missing(&self) -> Option<(u32, u32)> {
        if self.remaining == 0 {
            return None;
        }
        let chunks = self.problem.chunks();
        let found = self
            .own
            .clone()
            .flat_map(|v| (0..chunks).map(move |c| (v, c)))
            .find(|&(v, c)| self.problem.wants(v, c) && !self.claimed(v, c));
        Some(found.expect("a pair is missing when some remain"))
    }
}

/// The error for a chunk that cannot reach an NPU.
fn undeliverable(net: &Network, npu: u32, chunk: u32) -> Error {
    Error::input(format!(
        "synthesis cannot deliver chunk {chunk} to NPU {}: no path through NPUs that take part",
        net.nodes[npu as usize]
    ))
}

/// A run's state and its pending events, stepped an instant at a time.
struct Matching<'a> {
    state: State<'a>,
    pending: Instants<Event>,
    /// Scratch for the links into one NPU.
    links: Vec<u32>,
    /// How many steps the fetching ahead takes for events and for matching (none on small runs).
    event_stages: usize,
    match_stages: usize,
}

impl<'a> Matching<'a> {
    fn new(state: State<'a>) -> Matching<'a> {
        let (event_stages, match_stages) =
            match state.problem.pairs(state.net.npus()) > PREFETCH_FROM_SENDS {
                true => (EVENT_STAGES, MATCH_STAGES),
                false => (0, 0),
            };
        Matching {
            state,
            pending: Instants::default(),
            links: Vec::new(),
            event_stages,
            match_stages,
        }
    }

    /// Claims what the NPUs of `own` hold from the start and schedules its arrival at every
    /// NPU that `arrives` accepts (its own, and those whose outgoing links it matches).
    fn hold_initial(&mut self, arrives: impl Fn(u32) -> bool) {
        let state = &mut self.state;
        for h in &state.problem.initial {
            if state.owns(h.npu) && !state.claimed(h.npu, h.chunk) {
                state.claim(h.npu, h.chunk);
                if state.problem.wants(h.npu, h.chunk) {
                    state.remaining -= 1;
                }
            }
            if arrives(h.npu) {
                self.pending.push(
                    h.ready,
                    Event::Arrive {
                        npu: h.npu,
                        chunk: h.chunk,
                        send: NONE,
                        from: NONE,
                    },
                );
            }
        }
    }

    /// Handles the next instant: its events, then the matching of every NPU they woke. `via`
    /// maps an arrival's (NPU, send number) to the number its forwarding depends on. False
    /// when nothing was pending.
    fn step(
        &mut self,
        rng: &mut ChaCha8Rng,
        sink: &mut dyn FnMut(&[Send]),
        via: &mut impl FnMut(u32, u32) -> u32,
    ) -> bool {
        let Some((now, mut events)) = self.pending.pop() else {
            return false;
        };
        let state = &mut self.state;
        state.instant = state.instant.wrapping_add(1);
        // Past the first instants, sends of chunks a byte apart in size drift apart in time and
        // an instant holds a few dozen events: the fetches look on into the next instants.
        let upcoming = self.pending.peek(self.event_stages * PREFETCH_AHEAD);
        let ahead = |i: usize| match events.get(i) {
            Some(&event) => Some(event),
            None => upcoming.get(i - events.len()),
        };
        for (i, &event) in events.iter().enumerate() {
            fetch_ahead(i, self.event_stages, ahead, |later, stage| {
                state.prefetch_event(later, stage)
            });
            match event {
                Event::LinkFree { link } => {
                    state.queues[link as usize].free = true;
                    if state.has_pending(link) {
                        state.mark_dirty(state.queues[link as usize].dst);
                    }
                }
                Event::Arrive {
                    npu,
                    chunk,
                    send,
                    from,
                } => {
                    let send = match send {
                        NONE => NONE,
                        _ => via(npu, send),
                    };
                    state.arrive(npu, chunk, send, from)
                }
            }
        }
        events.clear();
        self.pending.recycle(events);
        let mut dirty = std::mem::take(&mut state.dirty);
        for (i, &dst) in dirty.iter().enumerate() {
            let ahead = |j: usize| dirty.get(j).copied();
            fetch_ahead(i, self.match_stages, ahead, |later, stage| {
                state.prefetch_matching(later, stage)
            });
            state.inbox[dst as usize].dirty = false;
            state.match_into(dst, &mut self.pending, now, &mut self.links, rng, sink);
        }
        dirty.clear();
        state.dirty = dirty;
        true
    }
}

#[cfg(test)]
mod tests;
