//! Rooted collectives on switch hierarchies (broadcast, reduce, scatter, gather), planned port
//! by port.
//!
//! A root breaks the rank-by-rank symmetry the all-gather's plan rests on (`symmetric`), but
//! the network stays simple: every NPU has one up-link to each dimension's switch and one
//! down-link from it. The plan list-schedules those ports as TACOS's greedy does its links:
//! a port, once free, starts the best send its NPU has data for. Broadcast: the rarest piece the
//! NPU holds that some member of the port's group lacks (so each piece leaves the root once while
//! any is unsent, then spreads), to the member whose down-link frees first; a second plan takes
//! the piece rarest in the port's own group first. Scatter: a piece one dimension nearer its
//! destination, the one with the longest route still ahead first; a second plan gives the root's
//! ports quotas that empty them together. The sooner of each pair is kept. A send starts no
//! earlier than the receiver's down-link is free when the send reaches the switch, so no message
//! ever queues, and with timers at the planned starts where a port's queue would not start a send
//! on time anyway ([`emit`]) the simulation follows the plan exactly. Reduce and gather are broadcast and scatter mirrored in time, with
//! reductions for reduce. Planning costs a few operations a send, against the seconds the
//! search spends unwinding the switches of a 1024-NPU hierarchy.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::hierarchy::{emit, keep_while_faster, refined, x_ways, Emit, Hierarchy, Hop, Plan};
use super::{Choice, SynthOptions, Synthesis};
use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::flow::{Cap, FlowNetwork, INFINITE};
use crate::schedule::Op;
use crate::units::Time;
use crate::Error;

/// The most sub-chunks a broadcast's chunk is cut in: its pipeline fills one piece a hop, so
/// finer pieces pay while the root's ports are the bottleneck.
const MOST_X_WAY_BROADCAST: u32 = 256;

/// The most sub-chunks a scatter's chunk is cut in: it already has one piece per rank.
const MOST_X_WAY_SCATTER: u32 = 16;

/// The plan of `c` (broadcast, reduce, scatter or gather) on `h`: at the user's X-way chunking,
/// else X doubled while the plan finishes at least 1% sooner.
pub(crate) fn synthesize(
    h: &Hierarchy,
    c: &Collective,
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    let spreads = matches!(c.kind, CollectiveKind::Broadcast | CollectiveKind::Reduce);
    let n = h.npus() as u64;
    let root = c.root();
    let (most, sends): (u32, &dyn Fn(u32) -> u64) = match spreads {
        true => (MOST_X_WAY_BROADCAST, &|x| c.chunks as u64 * x as u64 * n),
        // Each piece crosses at most every dimension.
        false => (MOST_X_WAY_SCATTER, &|x| {
            c.chunks as u64 * x as u64 * n * h.dims() as u64
        }),
    };
    let ways = x_ways(c, options, most, sends)?;
    let plan_with = |x: u32, rarest: Rarest| {
        let r = refined(c, x);
        let bytes = |p: u32| r.piece_bytes(p, p + 1);
        match spreads {
            true => broadcast(h, root, r.piece_count(), bytes, rarest),
            // Balancing the root's ports pays where bandwidth decides, sending the longest
            // routes first where latency does: both planned, the sooner kept.
            false => [true, false]
                .map(|balanced| {
                    scatter(h, root, r.piece_count(), |p| p / r.chunks, bytes, balanced)
                })
                .into_iter()
                .min_by_key(|p| p.finish)
                .expect("two plans"),
        }
    };
    let (x, mut plan) = keep_while_faster(&ways, |x| plan_with(x, Rarest::Anywhere), |p| p.finish);
    if spreads {
        // Rarest in the port's own group first: slower where latency decides, faster where
        // the pipeline's drain does (hier_1024 at 64 MB: 0.615 -> 0.644 of the bound); one more
        // plan at the X kept, the sooner kept.
        let grouped = plan_with(x, Rarest::InGroup);
        if grouped.finish < plan.finish {
            plan = grouped;
        }
    }
    let claim = refined(c, x);
    let mut b = Builder::new(&claim)?;
    let how = match c.kind {
        CollectiveKind::Reduce => Emit::Mirrored { op: Op::Reduce },
        CollectiveKind::Gather => Emit::Mirrored { op: Op::Copy },
        _ => Emit::Forward { offset: Time::ZERO },
    };
    // The plan times every send at its own size.
    emit(h, &mut b, &plan, &[0], |_, piece| piece, how, true);
    Ok(Synthesis {
        schedules: vec![b.finish()],
        estimate: plan.finish,
        ilp: Vec::new(),
        streamed: None,
        simulated: None,
        choice: Choice {
            from_root: true,
            x_way: Some(x),
            ..Choice::default()
        },
    })
}

/// Every NPU's ports and the sends planned on them.
struct Ports<'h> {
    h: &'h Hierarchy,
    /// Per (NPU, dimension): when the up-link to the switch is next free.
    up_free: Vec<Time>,
    /// Per (NPU, dimension): when the down-link from the switch is next free.
    down_free: Vec<Time>,
    /// Per (NPU, dimension): when the port next looks for a send (`Time::MAX`: waiting for
    /// data); `due` holds these, and stale entries that no longer match.
    due_at: Vec<Time>,
    due: BinaryHeap<Reverse<(Time, u32, u32)>>,
    hops: Vec<Hop>,
}

impl<'h> Ports<'h> {
    /// Every port free, each due to look for a send at time zero.
    fn new(h: &'h Hierarchy) -> Ports<'h> {
        let slots = h.npus() as usize * h.dims();
        let due = (0..h.npus())
            .flat_map(|v| (0..h.dims() as u32).map(move |k| Reverse((Time::ZERO, v, k))))
            .collect();
        Ports {
            h,
            up_free: vec![Time::ZERO; slots],
            down_free: vec![Time::ZERO; slots],
            due_at: vec![Time::ZERO; slots],
            due,
            hops: Vec::new(),
        }
    }

    fn slot(&self, npu: u32, dim: usize) -> usize {
        npu as usize * self.h.dims() + dim
    }

    /// The next port due to look for a send, and when (it is due no more until it plans a
    /// send, [`Ports::look_at`] or [`Ports::sleep`]).
    fn next_due(&mut self) -> Option<(Time, u32, usize)> {
        while let Some(Reverse((t, v, k))) = self.due.pop() {
            let s = self.slot(v, k as usize);
            if self.due_at[s] == t {
                self.due_at[s] = Time::MAX;
                return Some((t, v, k as usize));
            }
        }
        None
    }

    /// Makes `npu`'s port in `dim` look for a send at `at` (if it is not due sooner).
    fn look_at(&mut self, npu: u32, dim: usize, at: Time) {
        let s = self.slot(npu, dim);
        let at = at.max(self.up_free[s]);
        if at < self.due_at[s] {
            self.due_at[s] = at;
            self.due.push(Reverse((at, npu, dim as u32)));
        }
    }

    /// Plans `piece` (`bytes` long, at `src` since `ready`) from `src` to `dst` across `dim`,
    /// starting no sooner than `now` nor before `dst`'s down-link is free when it reaches the
    /// switch; returns when it arrives.
    fn send(
        &mut self,
        (src, dst, dim): (u32, u32, usize),
        piece: u32,
        bytes: u64,
        ready: Time,
        now: Time,
    ) -> Time {
        let (port, trip) = self.h.port_and_trip(dim, bytes);
        let to_switch = port + self.h.latency[dim];
        let (up, down) = (self.slot(src, dim), self.slot(dst, dim));
        let start = now.max(Time::from_ps(
            self.down_free[down].ps().saturating_sub(to_switch.ps()),
        ));
        self.up_free[up] = start + port;
        self.down_free[down] = start + to_switch + port;
        self.look_at(src, dim, start + port);
        let arrive = start + trip;
        self.hops.push(Hop {
            start,
            ready,
            arrive,
            piece,
            src,
            dst,
        });
        arrive
    }

    fn finish(mut self) -> Plan {
        self.hops.sort_by_key(|h| h.start);
        let finish = self
            .hops
            .iter()
            .map(|h| h.arrive)
            .max()
            .unwrap_or(Time::ZERO);
        Plan {
            hops: self.hops,
            finish,
        }
    }
}

/// Which piece a broadcast's port sends among those its group lacks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rarest {
    /// The one fewest NPUs anywhere have (TACOS's rule).
    Anywhere,
    /// The one fewest members of the port's group have, then fewest anywhere.
    InGroup,
}

/// The broadcast of `pieces` pieces (piece `p` `bytes(p)` long) from `root`, each port sending
/// the `rarest` piece its group lacks.
fn broadcast(
    h: &Hierarchy,
    root: u32,
    pieces: u32,
    bytes: impl Fn(u32) -> u64,
    rarest: Rarest,
) -> Plan {
    let (n, x, dims) = (h.npus() as usize, pieces as usize, h.dims());
    let mut ports = Ports::new(h);
    let mut spread = Spread {
        x,
        has: vec![false; n * x],
        useful: vec![Vec::new(); n * dims],
        claims: (0..dims).map(|k| vec![0; h.groups(k) * x]).collect(),
        holders: vec![0; x],
    };
    for p in 0..pieces {
        spread.receive(h, root, p, Time::ZERO);
    }
    while let Some((t, u, k)) = ports.next_due() {
        let size = h.sizes[k];
        let group = h.group_index(u, k) * x;
        // The rarest piece here some member lacks, else when the next such piece arrives.
        let mut best: Option<((u32, u32), u32, Time)> = None;
        let mut next: Option<Time> = None;
        let useful = &mut spread.useful[ports.slot(u, k)];
        let mut i = 0;
        while i < useful.len() {
            let (at, p) = useful[i];
            // A group once complete stays so: the piece is of no more use to this port.
            if spread.claims[k][group + p as usize] >= size {
                useful.swap_remove(i);
                continue;
            }
            i += 1;
            let anywhere = spread.holders[p as usize];
            let rarity = match rarest {
                Rarest::Anywhere => (0, anywhere),
                Rarest::InGroup => (spread.claims[k][group + p as usize], anywhere),
            };
            if at > t {
                next = Some(next.map_or(at, |n| n.min(at)));
            } else if best.is_none_or(|(c, q, _)| (rarity, p) < (c, q)) {
                best = Some((rarity, p, at));
            }
        }
        let Some((_, p, ready)) = best else {
            // Else it waits for data: a piece that arrives wakes it.
            if let Some(at) = next {
                ports.look_at(u, k, at);
            }
            continue;
        };
        let here = h.coordinate(u, k);
        let v = (1..size)
            .map(|i| h.with_coordinate(u, k, (here + i) % size))
            .filter(|&v| !spread.has[v as usize * x + p as usize])
            .min_by_key(|&v| ports.down_free[ports.slot(v, k)])
            .expect("a member lacks the piece");
        let arrive = ports.send((u, v, k), p, bytes(p), ready, t);
        spread.receive(h, v, p, arrive);
        for k2 in 0..dims {
            ports.look_at(v, k2, arrive);
        }
    }
    ports.finish()
}

/// Where a broadcast's pieces are, or are on their way to.
struct Spread {
    x: usize,
    /// Per (NPU, piece): has it or is sent it.
    has: Vec<bool>,
    /// Per (NPU, dimension): pieces it has or is sent, with their arrival, that some member
    /// of its group in that dimension may lack.
    useful: Vec<Vec<(Time, u32)>>,
    /// Per dimension, per (group, piece): the members that have it or are sent it.
    claims: Vec<Vec<u32>>,
    /// Per piece: the NPUs that have it or are sent it.
    holders: Vec<u32>,
}

impl Spread {
    /// Piece `p` is `v`'s from `at` on.
    fn receive(&mut self, h: &Hierarchy, v: u32, p: u32, at: Time) {
        let x = self.x;
        self.has[v as usize * x + p as usize] = true;
        let dims = self.claims.len();
        for list in &mut self.useful[v as usize * dims..(v as usize + 1) * dims] {
            list.push((at, p));
        }
        self.holders[p as usize] += 1;
        for (k, claimed) in self.claims.iter_mut().enumerate() {
            claimed[h.group_index(v, k) * x + p as usize] += 1;
        }
    }
}

/// The scatter of `pieces` pieces (piece `p` `bytes(p)` long, for NPU `dest(p)`) from `root`,
/// the root's ports `balanced` by [`root_quotas`] or each free to take any piece it can carry.
fn scatter(
    h: &Hierarchy,
    root: u32,
    pieces: u32,
    dest: impl Fn(u32) -> u32,
    bytes: impl Fn(u32) -> u64,
    balanced: bool,
) -> Plan {
    let (n, dims) = (h.npus() as usize, h.dims());
    let masks = 1usize << dims;
    let mut ports = Ports::new(h);
    // Per (NPU, dimensions its pieces still cross): the pieces there, first arrival first.
    let mut waiting: Vec<BinaryHeap<Reverse<(Time, u32)>>> = vec![BinaryHeap::new(); n * masks];
    // Per set of dimensions: the route a piece still has across them (a typical piece's).
    let typical = bytes(0);
    let route: Vec<Time> = (0..masks)
        .map(|m| {
            (0..dims)
                .filter(|k| m >> k & 1 == 1)
                .fold(Time::ZERO, |sum, k| sum + h.port_and_trip(k, typical).1)
        })
        .collect();
    let mut counts = vec![0u64; masks];
    for p in 0..pieces {
        let m = h.differing(root, dest(p));
        if m != 0 {
            waiting[root as usize * masks + m].push(Reverse((Time::ZERO, p)));
            counts[m] += 1;
        }
    }
    let mut quota = match balanced {
        true => root_quotas(h, &counts, typical),
        false => vec![vec![u64::MAX; dims]; masks],
    };
    while let Some((t, u, k)) = ports.next_due() {
        // The piece here with the longest route after this dimension, else when the next
        // piece for this dimension arrives.
        // (route after this dimension, the piece's arrival and number reversed, its set).
        type Key = (Time, Reverse<(Time, u32)>, usize);
        let mut best: Option<Key> = None;
        let mut next: Option<Time> = None;
        for m in (0..masks).filter(|m| m >> k & 1 == 1) {
            let Some(&Reverse((at, p))) = waiting[u as usize * masks + m].peek() else {
                continue;
            };
            if u == root && quota[m][k] == 0 {
                continue;
            }
            let key = (route[m & !(1 << k)], Reverse((at, p)), m);
            if at > t {
                next = Some(next.map_or(at, |n| n.min(at)));
            } else if best.as_ref().is_none_or(|b| key > *b) {
                best = Some(key);
            }
        }
        let Some((_, _, m)) = best else {
            // Else it waits for data: a piece that arrives wakes it.
            if let Some(at) = next {
                ports.look_at(u, k, at);
            }
            continue;
        };
        let Reverse((ready, p)) = waiting[u as usize * masks + m].pop().expect("peeked");
        if u == root {
            quota[m][k] -= 1;
        }
        let v = h.with_coordinate(u, k, h.coordinate(dest(p), k));
        let arrive = ports.send((u, v, k), p, bytes(p), ready, t);
        let left = m & !(1 << k);
        if left != 0 {
            waiting[v as usize * masks + left].push(Reverse((arrive, p)));
            for k2 in (0..dims).filter(|k2| left >> k2 & 1 == 1) {
                ports.look_at(v, k2, arrive);
            }
        }
    }
    ports.finish()
}

/// Per set of dimensions (as bits) and per dimension: how many of the root's pieces that cross
/// those dimensions (`counts`, each `bytes` long) leave it through that dimension's port. The
/// split empties the root soonest, every port busy to the end: the least time whose port
/// capacities carry every piece, found by bisection on a max-flow from the sets to the ports.
/// Left free, each port would take the pieces with most route ahead, and the slow ports run
/// out of pieces they can carry while the fast ones still have a queue.
fn root_quotas(h: &Hierarchy, counts: &[u64], bytes: u64) -> Vec<Vec<u64>> {
    let dims = h.dims();
    let masks = counts.len();
    let total: u64 = counts.iter().sum();
    // Nodes: source, one per set, one per port, sink.
    let (source, sink) = (0u32, (masks + dims + 1) as u32);
    let mut net = FlowNetwork::new(masks + dims + 2);
    let port_node = |k: usize| (masks + 1 + k) as u32;
    let mut arcs = vec![Vec::new(); masks];
    for (m, &count) in counts.iter().enumerate().filter(|(_, &c)| c > 0) {
        net.add_arc(source, 1 + m as u32, count as Cap);
        for k in (0..dims).filter(|k| m >> k & 1 == 1) {
            arcs[m].push((k, net.add_arc(1 + m as u32, port_node(k), INFINITE)));
        }
    }
    let port_arcs: Vec<_> = (0..dims)
        .map(|k| net.add_arc(port_node(k), sink, 0))
        .collect();
    let piece_time: Vec<u64> = (0..dims)
        .map(|k| h.port_and_trip(k, bytes).0.ps().max(1))
        .collect();
    let carries = |net: &mut FlowNetwork, time: u64| {
        for (k, &arc) in port_arcs.iter().enumerate() {
            net.set_capacity(arc, (time / piece_time[k]).min(total) as Cap);
        }
        net.max_flow(&[source], &[sink], total as Cap) == total as Cap
    };
    // The slowest port alone carries everything by `high`.
    let (mut low, mut high) = (0u64, total * piece_time.iter().max().copied().unwrap_or(1));
    while low + 1 < high {
        let mid = low + (high - low) / 2;
        match carries(&mut net, mid) {
            true => high = mid,
            false => low = mid,
        }
    }
    carries(&mut net, high);
    let mut quota = vec![vec![0u64; dims]; masks];
    for (m, per_port) in arcs.iter().enumerate() {
        for &(k, arc) in per_port {
            quota[m][k] = net.flow(arc) as u64;
        }
    }
    quota
}

#[cfg(test)]
mod tests {
    use super::super::hierarchy::tests::{assert_followed_exactly, small_hierarchies};
    use super::*;

    /// On both hierarchies, for broadcast, reduce, scatter and gather rooted away from NPU 0,
    /// 1 KB to 64 MB: the schedule validates, the simulation follows the plan to the picosecond
    /// (no send ever queued for a port), and the synthesizer keeps the faster of the plan and the
    /// search over unwindings.
    #[test]
    fn rooted_plans_are_followed_exactly() {
        use CollectiveKind::*;
        for topology in small_hierarchies() {
            let npus = topology.active_npus();
            for kind in [Broadcast, Reduce, Scatter, Gather] {
                for size in [1_000, 1_000_000, 64_000_000] {
                    let c = Collective::new(kind, npus.clone(), size, 1, Some(5)).unwrap();
                    let plan = assert_followed_exactly(&topology, c, synthesize);
                    assert!(plan.choice.from_root, "{} {kind} {size}", topology.name());
                }
            }
        }
    }

    /// Every plan keeps each up-link and each down-link to one send at a time, sends a piece
    /// only from where it has arrived, and delivers: each broadcast piece reaches every NPU
    /// once, each scatter piece ends at its destination.
    #[test]
    fn plans_keep_one_send_per_port_and_deliver_every_piece() {
        for topology in small_hierarchies() {
            let h = Hierarchy::of(&topology, &[], &SynthOptions::default());
            assert!(h.is_none(), "no collective, no plan");
            let c = Collective::new(
                CollectiveKind::Broadcast,
                topology.active_npus(),
                1 << 20,
                1,
                None,
            )
            .unwrap();
            let h = Hierarchy::of(&topology, &[c], &SynthOptions::default()).unwrap();
            let n = h.npus();
            let bytes = |_| 4096;
            for root in [0, n - 1] {
                let plans = [
                    (broadcast(&h, root, 8, bytes, Rarest::Anywhere), None),
                    (broadcast(&h, root, 8, bytes, Rarest::InGroup), None),
                    (scatter(&h, root, 3 * n, |p| p / 3, bytes, true), Some(3)),
                    (scatter(&h, root, 3 * n, |p| p / 3, bytes, false), Some(3)),
                ];
                for (plan, per_rank) in plans {
                    assert_ports_hold_one_send(&h, &plan, 4096);
                    // (piece, NPU) -> arrival; the root holds everything from the start.
                    let mut at: std::collections::HashMap<(u32, u32), Time> = Default::default();
                    for hop in &plan.hops {
                        let held = match hop.src == root {
                            true => Time::ZERO,
                            false => at[&(hop.piece, hop.src)],
                        };
                        assert!(hop.ready == held && hop.ready <= hop.start, "{hop:?}");
                        let again = at.insert((hop.piece, hop.dst), hop.arrive);
                        assert!(again.is_none() || per_rank.is_some(), "{hop:?}");
                    }
                    match per_rank {
                        None => assert_eq!(at.len() as u32, 8 * (n - 1)),
                        Some(k) => {
                            for p in (0..k * n).filter(|p| p / k != root) {
                                assert!(at.contains_key(&(p, p / k)), "piece {p} delivered");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Sends on each port (an NPU's up-link to a dimension's switch, its down-link from it)
    /// never overlap.
    fn assert_ports_hold_one_send(h: &Hierarchy, plan: &Plan, bytes: u64) {
        let mut busy: std::collections::HashMap<(bool, u32, usize), Vec<(Time, Time)>> =
            Default::default();
        for hop in &plan.hops {
            let m = h.differing(hop.src, hop.dst);
            assert_eq!(m.count_ones(), 1, "one dimension a hop: {hop:?}");
            let k = m.trailing_zeros() as usize;
            let (port, trip) = h.port_and_trip(k, bytes);
            assert_eq!(hop.arrive, hop.start + trip);
            let at_switch = hop.start + port + h.latency[k];
            let up = busy.entry((true, hop.src, k)).or_default();
            up.push((hop.start, hop.start + port));
            let down = busy.entry((false, hop.dst, k)).or_default();
            down.push((at_switch, at_switch + port));
        }
        for (port, mut spans) in busy {
            spans.sort();
            for w in spans.windows(2) {
                assert!(w[0].1 <= w[1].0, "{port:?}: {:?} then {:?}", w[0], w[1]);
            }
        }
    }

    /// The root's quotas send every piece through a dimension it crosses, and the busiest port
    /// finishes within one piece of the fluid split's time (every port busy to the same end).
    #[test]
    fn the_roots_quotas_balance_its_ports() {
        let topology = &small_hierarchies()[1];
        let npus = topology.active_npus();
        let c = Collective::new(CollectiveKind::Scatter, npus, 1 << 20, 1, None).unwrap();
        let h = Hierarchy::of(topology, &[c], &SynthOptions::default()).unwrap();
        let masks = 1 << h.dims();
        let mut counts = vec![0u64; masks];
        for v in 1..h.npus() {
            counts[h.differing(0, v)] += 10;
        }
        let bytes = 1 << 16;
        let quota = root_quotas(&h, &counts, bytes);
        let mut load = vec![0u64; h.dims()];
        for (m, per_port) in quota.iter().enumerate() {
            assert_eq!(per_port.iter().sum::<u64>(), counts[m], "set {m:b}");
            for (k, &q) in per_port.iter().enumerate() {
                assert!(q == 0 || m >> k & 1 == 1, "set {m:b} through dimension {k}");
                load[k] += q;
            }
        }
        let piece = |k: usize| h.port_and_trip(k, bytes).0.as_secs_f64();
        let busiest = (0..h.dims())
            .map(|k| load[k] as f64 * piece(k))
            .fold(0.0, f64::max);
        let total: u64 = counts.iter().sum();
        let rate: f64 = (0..h.dims()).map(|k| 1.0 / piece(k)).sum();
        let fluid = total as f64 / rate;
        let slowest = (0..h.dims()).map(piece).fold(0.0, f64::max);
        assert!(busiest <= fluid + slowest, "{busiest} against {fluid}");
    }
}
