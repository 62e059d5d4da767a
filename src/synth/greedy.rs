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
//! A chunk with one destination (scatter, gather, all-to-all) is forwarded rather than copied:
//! it has a single holder at a time and moves only over links that bring it strictly closer to
//! its destination (by the links' delays), relaying through NPUs that do not want it.

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::network::Network;
use crate::units::Time;
use crate::Error;

/// No transfer: the chunk was held from the start.
pub(crate) const NONE: u32 = u32::MAX;

/// How many chunks that reached a link's source together a random choice looks at.
const TIE_WINDOW: usize = 64;

/// How many events (or NPUs to match) ahead the event loop fetches what they read, a step of a
/// chain of dependent fetches at each multiple of it: link slots, then their sources' inboxes,
/// then the queue heads, then the claims those name.
const PREFETCH_AHEAD: usize = 8;

/// Which NPUs must end up holding a chunk.
#[derive(Clone, Debug)]
pub(crate) enum Members {
    All,
    /// One flag per local NPU.
    Some(Vec<bool>),
}

impl Members {
    pub(crate) fn wants(&self, npu: u32) -> bool {
        match self {
            Members::All => true,
            Members::Some(flags) => flags[npu as usize],
        }
    }
}

/// A chunk that `npu` holds from time `ready` on, before any matching.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holding {
    pub npu: u32,
    pub chunk: u32,
    pub ready: Time,
}

/// What to spread: chunk sizes, who holds what at first, who must get what.
#[derive(Clone, Debug, Default)]
pub(crate) struct Problem {
    pub chunk_bytes: Vec<u64>,
    /// Index into `groups` for each chunk.
    pub chunk_group: Vec<u32>,
    pub groups: Vec<Members>,
    pub initial: Vec<Holding>,
    /// Per chunk, its one destination (local NPU), or [`NONE`] when every member of its group
    /// wants it. Empty when no chunk has a single destination.
    pub dest: Vec<u32>,
}

impl Problem {
    pub fn chunks(&self) -> u32 {
        self.chunk_bytes.len() as u32
    }

    /// The single destination of a chunk that has one.
    fn unicast(&self, chunk: u32) -> Option<u32> {
        self.dest
            .get(chunk as usize)
            .copied()
            .filter(|&d| d != NONE)
    }

    fn member(&self, npu: u32, chunk: u32) -> bool {
        if let [Members::All] = self.groups[..] {
            return true;
        }
        self.groups[self.chunk_group[chunk as usize] as usize].wants(npu)
    }

    /// True when `npu` must end up holding `chunk`.
    pub(crate) fn wants(&self, npu: u32, chunk: u32) -> bool {
        match self.unicast(chunk) {
            Some(d) => d == npu,
            None => self.member(npu, chunk),
        }
    }
}

/// One matched send: `chunk` over network link `link` from `start`, arriving at `arrive`, after
/// send `via` brought the chunk to the link's source (`NONE`: it was there from the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Send {
    pub link: u32,
    pub chunk: u32,
    pub via: u32,
    pub start: Time,
    pub arrive: Time,
}

/// A chunk that reached an NPU, which its outgoing links may pass on.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    ready: Time,
    chunk: u32,
    via: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    LinkFree { link: u32 },
    Arrive { npu: u32, chunk: u32, send: u32 },
}

/// The random stream of one trial: the same (seed, stream) always gives the same choices.
pub(crate) fn trial_rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// Pending events grouped by instant. Greedy matching acts on all events of an instant at once,
/// and on regular networks only a few instants are pending at any time, so a map of batches is
/// cheaper than a priority queue over single events. The instants pushed to last are remembered
/// with their batches: an instant's sends schedule their events at a few instants over and over
/// (each link kind's free and arrival times), and the map's search was a sixth of the matching.
#[derive(Default)]
struct Instants {
    /// Each pending instant's batch, in `batches`.
    by_time: BTreeMap<Time, usize>,
    batches: Vec<Vec<Event>>,
    /// Indices in `batches` of no pending instant.
    unused: Vec<usize>,
    /// Emptied batches, kept for their allocations.
    spare: Vec<Vec<Event>>,
    /// The last two instants pushed to and their batches, the most recent first.
    recent: [Option<(Time, usize)>; 2],
}

impl Instants {
    fn push(&mut self, time: Time, event: Event) {
        let slot = match self.recent {
            [Some((t, slot)), _] if t == time => slot,
            [first, Some((t, slot))] if t == time => {
                self.recent = [Some((t, slot)), first];
                slot
            }
            _ => {
                let slot = match self.by_time.get(&time) {
                    Some(&slot) => slot,
                    None => self.open(time),
                };
                self.recent = [Some((time, slot)), self.recent[0]];
                slot
            }
        };
        self.batches[slot].push(event);
    }

    /// A batch for a new pending instant.
    fn open(&mut self, time: Time) -> usize {
        let batch = self.spare.pop().unwrap_or_default();
        let slot = match self.unused.pop() {
            Some(slot) => {
                self.batches[slot] = batch;
                slot
            }
            None => {
                self.batches.push(batch);
                self.batches.len() - 1
            }
        };
        self.by_time.insert(time, slot);
        slot
    }

    /// The earliest instant and its events, in the order they were scheduled.
    fn pop(&mut self) -> Option<(Time, Vec<Event>)> {
        let (time, slot) = self.by_time.pop_first()?;
        for recent in &mut self.recent {
            if recent.is_some_and(|(t, _)| t == time) {
                *recent = None;
            }
        }
        self.unused.push(slot);
        Some((time, std::mem::take(&mut self.batches[slot])))
    }

    /// Returns an emptied batch for reuse.
    fn recycle(&mut self, batch: Vec<Event>) {
        self.spare.push(batch);
    }
}

/// What matching reads and writes of one link, in one cache line: one array per field cost a
/// memory miss each on large meshes.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct LinkSlot {
    src: u32,
    dst: u32,
    /// The position in its source's log of the next chunk it may send.
    cursor: u32,
    free: bool,
    /// Whether another link into the same NPU is faster (only then can a chunk be left to it).
    has_faster_sibling: bool,
    /// Whether it joins two clusters ([`Network::crosses`]).
    crosses: bool,
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
    words: usize,
    /// Per NPU, a bit per chunk: held or on its way.
    claimed: Vec<u64>,
    /// Per cluster of NPUs, a bit per chunk: some member holds it or has it on the way. A link
    /// between clusters never brings a cluster a chunk it already has or has coming: the chunk
    /// spreads inside on the fast links, and every link into the cluster carries another chunk.
    cluster_claimed: Vec<u64>,
    /// Per NPU, its log of received chunks.
    inbox: Vec<Inbox>,
    /// Per link, its matching state.
    slots: Vec<LinkSlot>,
    /// Per chunk, how many NPUs hold it or have it on the way.
    holders: Vec<u32>,
    /// The largest and the smallest chunk, whose delays are precomputed.
    largest: u64,
    smallest: u64,
    events: Instants,
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
}

impl State<'_> {
    /// True when link `l` (into `dst`) would do chunk `c` good: a copy `dst` wants and has not
    /// got coming, or the next hop of a unicast chunk towards its destination.
    fn useful(&self, l: u32, dst: u32, c: u32) -> bool {
        match self.problem.unicast(c) {
            Some(d) => {
                let src = self.slots[l as usize].src;
                let to = &self.to_dest[self.dest_index[d as usize] as usize];
                self.at[c as usize] == src
                    && !self.moving[c as usize]
                    && self.problem.member(dst, c)
                    && to[dst as usize] < to[src as usize]
            }
            None => self.problem.wants(dst, c) && !self.claimed(dst, c) && !self.cluster_has(l, c),
        }
    }

    /// The index in `claimed` of the word holding `npu`'s bit for `chunk`.
    fn claim_word(&self, npu: u32, chunk: u32) -> usize {
        npu as usize * self.words + chunk as usize / 64
    }

    fn claimed(&self, npu: u32, chunk: u32) -> bool {
        self.claimed[self.claim_word(npu, chunk)] >> (chunk % 64) & 1 == 1
    }

    fn claim(&mut self, npu: u32, chunk: u32) {
        self.holders[chunk as usize] += 1;
        let word = self.claim_word(npu, chunk);
        self.claimed[word] |= 1 << (chunk % 64);
        if self.net.clusters > 1 {
            let c = self.net.cluster[npu as usize] as usize;
            self.cluster_claimed[c * self.words + chunk as usize / 64] |= 1 << (chunk % 64);
        }
    }

    /// True when link `l` would bring its destination's cluster a chunk it already has (or has
    /// coming) from outside.
    fn cluster_has(&self, l: u32, chunk: u32) -> bool {
        let link = &self.slots[l as usize];
        if !link.crosses {
            return false;
        }
        let c = self.net.cluster[link.dst as usize] as usize;
        self.cluster_claimed[c * self.words + chunk as usize / 64] >> (chunk % 64) & 1 == 1
    }

    fn mark_dirty(&mut self, npu: u32) {
        if !self.inbox[npu as usize].dirty {
            self.inbox[npu as usize].dirty = true;
            self.dirty.push(npu);
        }
    }

    fn arrive(&mut self, npu: u32, chunk: u32, via: u32, now: Time) {
        let v = npu as usize;
        if self.inbox[v].log.len() == self.inbox[v].log.capacity() && self.inbox[v].log.len() >= 64
        {
            // Forget what every outgoing link has gone past before the log grows.
            let done = self
                .net
                .out_links(npu)
                .iter()
                .map(|&l| self.slots[l as usize].cursor)
                .min()
                .unwrap_or(0)
                - self.inbox[v].trimmed;
            self.inbox[v].log.drain(..done as usize);
            self.inbox[v].trimmed += done;
        }
        self.inbox[v].log.push(Candidate {
            ready: now,
            chunk,
            via,
        });
        if self.problem.unicast(chunk).is_some() {
            self.at[chunk as usize] = npu;
            self.moving[chunk as usize] = false;
        }
        for &l in self.net.out_links(npu) {
            let w = self.slots[l as usize].dst;
            if self.slots[l as usize].free && self.useful(l, w, chunk) {
                self.mark_dirty(w);
            }
        }
    }

    /// The entry of link `l`'s source log at absolute position `pos`, if it exists yet.
    fn entry(&self, src: u32, pos: u32) -> Option<Candidate> {
        self.inbox[src as usize]
            .log
            .get((pos - self.inbox[src as usize].trimmed) as usize)
            .copied()
    }

    /// Hints the CPU to fetch link `l`'s slot: the first of the dependent fetches that lead to
    /// its queue's head ([`State::prefetch_inbox`], then [`State::prefetch_head`]), each a few
    /// steps after the one before, so that none waits for memory (on a 200x200 mesh the slots
    /// are 10 MB and the inboxes 1.6 MB, and waiting for them was most of the matching).
    fn prefetch_slot(&self, l: u32) {
        crate::memory::prefetch(&self.slots[l as usize]);
    }

    /// Hints the CPU to fetch the inbox of link `l`'s source (its slot must be at hand).
    fn prefetch_inbox(&self, l: u32) {
        crate::memory::prefetch(&self.inbox[self.slots[l as usize].src as usize]);
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
        let src = self.slots[l as usize].src as usize;
        let pos = (self.slots[l as usize].cursor - self.inbox[src].trimmed) as usize;
        if let Some(entry) = self.inbox[src].log.get(pos) {
            crate::memory::prefetch(entry);
        }
    }

    /// Hints the CPU to fetch the word of `npu`'s claims that says whether it has `chunk`: the
    /// claims are a bit per NPU and chunk (100 MB on a 168x168 mesh), read at scattered places
    /// as chunks arrive and links pick, a miss each where they are not fetched ahead.
    fn prefetch_claim(&self, npu: u32, chunk: u32) {
        if let Some(word) = self.claimed.get(self.claim_word(npu, chunk)) {
            crate::memory::prefetch(word);
        }
    }

    /// Hints the CPU to fetch the link slots that an arrival of a chunk at `npu` reads.
    fn prefetch_out_slots(&self, npu: u32) {
        for &l in self.net.out_links(npu) {
            crate::memory::prefetch(&self.slots[l as usize]);
        }
    }

    /// Hints the CPU to fetch what an arrival of `chunk` at `npu` checks: whether each
    /// neighbour it may pass the chunk to has it (the slots must be at hand, see
    /// [`State::prefetch_out_slots`]).
    fn prefetch_arrival(&self, npu: u32, chunk: u32) {
        for &l in self.net.out_links(npu) {
            self.prefetch_claim(self.slots[l as usize].dst, chunk);
        }
    }

    /// Hints the CPU to fetch whether `dst` has the chunk at the head of each of its incoming
    /// links' queues (the heads must be at hand, see [`State::prefetch_head`]).
    fn prefetch_head_claims(&self, dst: u32) {
        for &l in self.net.in_links(dst) {
            let src = self.slots[l as usize].src;
            if let Some(head) = self.entry(src, self.slots[l as usize].cursor) {
                self.prefetch_claim(dst, head.chunk);
            }
        }
    }

    fn has_pending(&self, l: u32) -> bool {
        let src = self.slots[l as usize].src;
        self.entry(src, self.slots[l as usize].cursor).is_some()
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
            .filter(|&(arrive, m)| arrive < here && self.claimed(self.slots[m as usize].src, chunk))
            .min()
            .map(|(_, m)| m)
    }

    /// Takes the next chunk of link `l`'s queue for its destination `dst`: the earliest arrived,
    /// a random one among those that arrived together. Drops chunks `dst` no longer needs from
    /// this link (held, on the way, or sooner by a faster link), so the link's sends stay in the
    /// order their chunks reached its source.
    fn pick(&mut self, l: u32, dst: u32, now: Time, rng: &mut ChaCha8Rng) -> Option<Candidate> {
        let src = self.slots[l as usize].src;
        let useless = |s: &Self, c: u32| !s.useful(l, dst, c);
        let first = loop {
            let e = self.entry(src, self.slots[l as usize].cursor)?;
            if useless(self, e.chunk) {
                self.slots[l as usize].cursor += 1;
            } else if let Some(m) = self.better_elsewhere(l, dst, e.chunk, now) {
                // Leave it to `m` and book the time it will take there.
                self.slots[l as usize].cursor += 1;
                let m = &mut self.slots[m as usize];
                m.planned_until = m.planned_until.max(now) + m.serialization;
            } else {
                break e;
            }
        };
        let start = (self.slots[l as usize].cursor - self.inbox[src as usize].trimmed) as usize;
        let log = &self.inbox[src as usize].log;
        // Rarest first (fewest NPUs hold it or have it coming), then at random.
        let (mut chosen, mut seen, mut rarest) = (start, 0u32, u32::MAX);
        for (i, c) in log.iter().enumerate().skip(start).take(TIE_WINDOW) {
            if c.ready != first.ready {
                break;
            }
            if i > start
                && (useless(self, c.chunk) || self.better_elsewhere(l, dst, c.chunk, now).is_some())
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
        if chosen == start {
            self.slots[l as usize].cursor += 1;
        }
        Some(log[chosen])
    }

    fn match_into(
        &mut self,
        dst: u32,
        now: Time,
        links: &mut Vec<u32>,
        rng: &mut ChaCha8Rng,
        sink: &mut dyn FnMut(&Send),
    ) {
        links.clear();
        links.extend(
            self.net
                .in_links(dst)
                .iter()
                .copied()
                .filter(|&l| self.slots[l as usize].free && self.has_pending(l)),
        );
        if links.is_empty() {
            return;
        }
        links.shuffle(rng);
        links.sort_by_key(|&l| self.slots[l as usize].delay);
        for &l in links.iter() {
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
            self.slots[l as usize].free = false;
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
            self.events
                .push(now + free_after, Event::LinkFree { link: l });
            self.events.push(
                send.arrive,
                Event::Arrive {
                    npu: dst,
                    chunk: c.chunk,
                    send: self.sends,
                },
            );
            self.sends += 1;
            sink(&send);
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
    use std::cmp::Reverse;
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
/// slowest outgoing link has not gone past (measured on all-gathers: 2 B a send on a 64x64
/// mesh, 5 on 96x96, 4 on 200x200, whose whole run peaked at 7.8 GB).
const LOG_BYTES_PER_SEND: u64 = 6;

/// Bytes a run of the greedy on `problem` holds at its peak, about: the claims (a bit per NPU
/// and chunk), the link slots and the chunk logs.
pub(crate) fn bytes_for(net: &Network, problem: &Problem) -> u64 {
    let (n, chunks) = (net.npus() as u64, problem.chunks() as u64);
    let sends = n.saturating_mul(chunks);
    n * chunks.div_ceil(64) * 8
        + net.links.len() as u64 * std::mem::size_of::<LinkSlot>() as u64
        + sends.saturating_mul(LOG_BYTES_PER_SEND)
}

/// Runs the greedy matching once with the random stream `rng`, handing every send to `sink` in
/// issue order (by start time). Returns the time the last chunk arrives.
pub(crate) fn run(
    net: &Network,
    problem: &Problem,
    rng: &mut ChaCha8Rng,
    sink: &mut dyn FnMut(&Send),
) -> Result<Time, Error> {
    let n = net.npus();
    let chunks = problem.chunks();
    let words = chunks.div_ceil(64) as usize;
    let largest = problem.chunk_bytes.iter().copied().max().unwrap_or(0);
    let smallest = problem.chunk_bytes.iter().copied().min().unwrap_or(0);
    let mut slots: Vec<LinkSlot> = (0..net.links.len() as u32)
        .map(|l| {
            let (serialization, delay) = net.delays(l, largest);
            let link = &net.links[l as usize];
            LinkSlot {
                src: link.src,
                dst: link.dst,
                cursor: 0,
                free: true,
                has_faster_sibling: false,
                crosses: net.crosses[l as usize],
                planned_until: Time::ZERO,
                serialization,
                delay,
                smallest: net.delays(l, smallest),
            }
        })
        .collect();
    for l in 0..slots.len() {
        let own = slots[l].delay;
        slots[l].has_faster_sibling = net
            .in_links(slots[l].dst)
            .iter()
            .any(|&m| slots[m as usize].delay < own);
    }
    let mut state = State {
        net,
        problem,
        words,
        claimed: vec![0; n as usize * words],
        cluster_claimed: if net.clusters > 1 {
            vec![0; net.clusters as usize * words]
        } else {
            Vec::new()
        },
        inbox: vec![Inbox::default(); n as usize],
        slots,
        holders: vec![0; chunks as usize],
        largest,
        smallest,
        events: Instants::default(),
        dirty: Vec::new(),
        remaining: 0,
        sends: 0,
        makespan: Time::ZERO,
        at: vec![
            NONE;
            if problem.dest.is_empty() {
                0
            } else {
                chunks as usize
            }
        ],
        moving: vec![
            false;
            if problem.dest.is_empty() {
                0
            } else {
                chunks as usize
            }
        ],
        to_dest: Vec::new(),
        dest_index: Vec::new(),
    };
    if !problem.dest.is_empty() {
        let (index, tables) = delays_to_destinations(net, problem, &state.slots);
        state.dest_index = index;
        state.to_dest = tables;
    }
    let mut chunks_per_group = vec![0u64; problem.groups.len()];
    for (c, &g) in problem.chunk_group.iter().enumerate() {
        if problem.unicast(c as u32).is_none() {
            chunks_per_group[g as usize] += 1;
        }
    }
    state.remaining += (0..chunks)
        .filter(|&c| problem.unicast(c).is_some())
        .count() as u64;
    for (group, &count) in problem.groups.iter().zip(&chunks_per_group) {
        let members = match group {
            Members::All => n as u64,
            Members::Some(flags) => flags.iter().filter(|&&f| f).count() as u64,
        };
        state.remaining += members * count;
    }
    // The radix queue wants its pushes in time order from its last pop on.
    let mut initial = problem.initial.clone();
    initial.sort_by_key(|h| h.ready);
    for h in &initial {
        if !state.claimed(h.npu, h.chunk) {
            state.claim(h.npu, h.chunk);
            if problem.wants(h.npu, h.chunk) {
                state.remaining -= 1;
            }
        }
        state.events.push(
            h.ready,
            Event::Arrive {
                npu: h.npu,
                chunk: h.chunk,
                send: NONE,
            },
        );
    }
    let mut links = Vec::new();
    while let Some((now, mut events)) = state.events.pop() {
        for i in 0..events.len() {
            // What each event reads, fetched in dependent steps a few events apart.
            match events.get(i + 3 * PREFETCH_AHEAD) {
                Some(&Event::LinkFree { link }) => state.prefetch_slot(link),
                Some(&Event::Arrive { npu, .. }) => {
                    crate::memory::prefetch(&state.inbox[npu as usize]);
                }
                None => {}
            }
            match events.get(i + 2 * PREFETCH_AHEAD) {
                Some(&Event::LinkFree { link }) => state.prefetch_inbox(link),
                Some(&Event::Arrive { npu, .. }) => {
                    state.prefetch_out_slots(npu);
                    state.prefetch_log_end(npu);
                }
                None => {}
            }
            match events.get(i + PREFETCH_AHEAD) {
                Some(&Event::LinkFree { link }) => state.prefetch_head(link),
                Some(&Event::Arrive { npu, chunk, .. }) => state.prefetch_arrival(npu, chunk),
                None => {}
            }
            match events[i] {
                Event::LinkFree { link } => {
                    state.slots[link as usize].free = true;
                    if state.has_pending(link) {
                        state.mark_dirty(state.slots[link as usize].dst);
                    }
                }
                Event::Arrive { npu, chunk, send } => state.arrive(npu, chunk, send, now),
            }
        }
        events.clear();
        state.events.recycle(events);
        let mut dirty = std::mem::take(&mut state.dirty);
        for (i, &dst) in dirty.iter().enumerate() {
            if let Some(&ahead) = dirty.get(i + 4 * PREFETCH_AHEAD) {
                for &l in net.in_links(ahead) {
                    state.prefetch_slot(l);
                }
            }
            if let Some(&ahead) = dirty.get(i + 3 * PREFETCH_AHEAD) {
                for &l in net.in_links(ahead) {
                    state.prefetch_inbox(l);
                }
            }
            if let Some(&ahead) = dirty.get(i + 2 * PREFETCH_AHEAD) {
                for &l in net.in_links(ahead) {
                    state.prefetch_head(l);
                }
            }
            if let Some(&ahead) = dirty.get(i + PREFETCH_AHEAD) {
                state.prefetch_head_claims(ahead);
            }
            state.inbox[dst as usize].dirty = false;
            state.match_into(dst, now, &mut links, rng, sink);
        }
        dirty.clear();
        state.dirty = dirty;
    }
    if state.remaining > 0 {
        let (npu, chunk) = (0..n)
            .flat_map(|v| (0..chunks).map(move |c| (v, c)))
            .find(|&(v, c)| problem.wants(v, c) && !state.claimed(v, c))
            .expect("a pair is missing when some remain");
        return Err(Error::input(format!(
            "synthesis cannot deliver chunk {chunk} to NPU {}: no path through NPUs that take part",
            net.nodes[npu as usize]
        )));
    }
    Ok(state.makespan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Instants pop in time order, each with its events in the order they were pushed, whatever
    /// mix of remembered, mapped and new instants the pushes hit (checked against a map of
    /// lists), and batches given back are reused.
    #[test]
    fn instants_pop_in_time_order_with_events_in_push_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(29);
        let mut instants = Instants::default();
        let mut expected: BTreeMap<Time, Vec<Event>> = BTreeMap::new();
        let mut now = 0u64;
        for round in 0..2000u32 {
            for _ in 0..rng.random_range(0..6) {
                let time = Time(now + [1, 2, 2, 5, 9][rng.random_range(0..5)]);
                let event = Event::LinkFree { link: round };
                instants.push(time, event);
                expected.entry(time).or_default().push(event);
            }
            if rng.random_bool(0.6) {
                let popped = instants.pop();
                assert_eq!(popped, expected.pop_first());
                if let Some((time, mut batch)) = popped {
                    now = time.0;
                    batch.clear();
                    instants.recycle(batch);
                }
            }
        }
        while let Some(popped) = instants.pop() {
            assert_eq!(Some(popped), expected.pop_first());
        }
        assert!(expected.is_empty());
    }
}
