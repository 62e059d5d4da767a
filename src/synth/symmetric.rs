//! Synthesis by symmetry on switch hierarchies: TACOS's greedy matching for one rank's chunk,
//! translated to every rank.
//!
//! In a hierarchy of switch dimensions (NPU ids row-major, each group of a dimension on a
//! switch of its own) translating every NPU's coordinates by the same offset maps the network
//! onto itself, and only the identity fixes an NPU. A plan for the chunk of NPU 0 therefore gives
//! the plan for the chunk of NPU `c` by adding `c`'s coordinates to every end of every send. When
//! the chunk of NPU 0 crosses dimension `k` at time `t`, every translate does too, so every NPU
//! sends one message into its dimension-`k` switch and receives one out of it at that moment:
//! each dimension's ports act as one server for the plan of one chunk. The greedy keeps each
//! server busy with the send that arrives first (the rarest piece first among those ready), so a
//! chunk of `N` ranks is planned in `N - 1` decisions a piece instead of the `N (N - 1)` the
//! whole matching takes. Reduce-scatter is the same trees run backwards with reductions, and
//! all-reduce is reduce-scatter then all-gather of each piece once it is reduced. All-to-all,
//! whose pieces each have one destination, sends them straight there, every rank at the same
//! offset at once.

use super::hierarchy::{emit, keep_while_faster, refined, x_ways, Emit, Hierarchy, Hop, Plan};
use super::{Choice, Method, SynthOptions, Synthesis};
use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Op;
use crate::topology::Topology;
use crate::units::Time;
use crate::Error;

/// NPUs up to which the search over unwindings also runs beside the plan and the faster is
/// kept (on 16 NPUs the search's schedules are a few percent faster at times, and take
/// milliseconds; on 256 the plan is faster at every size tried and the search takes seconds).
pub(crate) const SEARCHED_UP_TO: u32 = 64;

/// Whether the synthesizer also runs its other method beside the plan and keeps the faster
/// schedule: up to [`SEARCHED_UP_TO`] NPUs, and always for the integer program, which must
/// never lose to the greedy plan.
pub(crate) fn also_search(topology: &Topology, options: &SynthOptions) -> bool {
    topology.npus() <= SEARCHED_UP_TO || options.method == Method::Ilp
}

/// The most sub-chunks a chunk is cut in when the user gives no `--x-way`.
const MOST_X_WAY: u32 = 16;

impl Hierarchy {
    /// The greedy plan of NPU 0's chunk cut in `x` pieces of at most `bytes` each.
    fn plan(&self, x: u32, bytes: u64) -> Plan {
        let n = self.npus() as usize;
        let dims = self.sizes.len();
        // A piece crosses a dimension up to its switch and down again, store-and-forward.
        let (port, trip): (Vec<Time>, Vec<Time>) =
            (0..dims).map(|k| self.port_and_trip(k, bytes)).unzip();
        let mut arrival: Vec<Vec<Option<Time>>> = vec![vec![None; n]; x as usize];
        for a in &mut arrival {
            a[0] = Some(Time::ZERO);
        }
        let mut holders = vec![1usize; x as usize];
        // Per dimension and piece, the holders whose group in that dimension may still lack
        // the piece (a group once complete stays so).
        let mut active: Vec<Vec<Vec<u32>>> = vec![vec![vec![0]; x as usize]; dims];
        let mut free = vec![Time::ZERO; dims];
        let mut hops = Vec::with_capacity(x as usize * (n - 1));
        for _ in 0..x as usize * (n - 1) {
            // Per dimension, the send its server would start next: at the server's free time
            // the rarest piece some holder can pass on, else the first to arrive anywhere.
            let mut best: Option<((Time, Time, usize), Hop)> = None;
            for k in 0..dims {
                let mut pick: Option<((Time, usize, u32), Hop)> = None;
                for p in 0..x as usize {
                    let mut i = 0;
                    while i < active[k][p].len() {
                        let u = active[k][p][i];
                        let ready = arrival[p][u as usize].expect("a holder");
                        let at = free[k].max(ready);
                        let rank = (at, holders[p], p as u32);
                        if pick.as_ref().is_some_and(|(r, _)| *r <= rank) {
                            i += 1;
                            continue;
                        }
                        match self.group(u, k).find(|&v| arrival[p][v as usize].is_none()) {
                            Some(v) => {
                                let hop = Hop {
                                    start: at,
                                    ready,
                                    arrive: at + trip[k],
                                    piece: p as u32,
                                    src: u,
                                    dst: v,
                                };
                                pick = Some((rank, hop));
                                i += 1;
                            }
                            None => {
                                active[k][p].swap_remove(i);
                            }
                        }
                    }
                }
                if let Some(((at, _, _), hop)) = pick {
                    let key = (at + trip[k], at, k);
                    if best.as_ref().is_none_or(|(b, _)| key < *b) {
                        best = Some((key, hop));
                    }
                }
            }
            let ((_, start, k), hop) = best.expect("a piece is still missing somewhere");
            free[k] = start + port[k];
            let p = hop.piece as usize;
            arrival[p][hop.dst as usize] = Some(hop.arrive);
            holders[p] += 1;
            for holding in active.iter_mut() {
                holding[p].push(hop.dst);
            }
            hops.push(hop);
        }
        let finish = arrival
            .iter()
            .flatten()
            .map(|a| a.expect("every piece everywhere"))
            .max()
            .unwrap_or(Time::ZERO);
        hops.sort_by_key(|h| h.start);
        Plan { hops, finish }
    }
}

/// The plan's schedule for `c` (chunks already cut into sub-chunks): every hop for every rank's
/// chunk, in the plan's order, reduce-scatter first (the same trees mirrored in time, with
/// reductions) where the collective reduces.
fn build(h: &Hierarchy, c: &Collective, plan: &Plan) -> Result<crate::schedule::Schedule, Error> {
    let x = c.chunks;
    let mut b = Builder::new(c)?;
    let ranks: Vec<u32> = (0..h.npus()).collect();
    // Each hop for every rank, and most with a timer, in each phase.
    let phases = c.kind.has_reduce_scatter() as usize + c.kind.has_all_gather() as usize;
    b.reserve(2 * phases * plan.hops.len() * ranks.len());
    let piece_of = |r: u32, piece: u32| r * x + piece;
    let mut offset = Time::ZERO;
    if c.kind.has_reduce_scatter() {
        let how = Emit::Mirrored { op: Op::Reduce };
        emit(h, &mut b, plan, &ranks, piece_of, how, false);
        offset = plan.finish;
    }
    if c.kind.has_all_gather() {
        emit(
            h,
            &mut b,
            plan,
            &ranks,
            piece_of,
            Emit::Forward { offset },
            false,
        );
    }
    Ok(b.finish())
}

/// The symmetric plan of `c` on `h`: at the user's X-way chunking, else X up to
/// [`MOST_X_WAY`] doubled while the plan finishes at least 1% sooner (as the matching's own search does),
/// within the matching's budget of sends.
pub(crate) fn synthesize(
    h: &Hierarchy,
    c: &Collective,
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    if c.kind == CollectiveKind::AllToAll {
        return all_to_all(h, c);
    }
    let n = h.npus() as u64;
    let ways = x_ways(c, options, MOST_X_WAY, |x| {
        refined(c, x).piece_count() as u64 * n
    })?;
    let (x, plan) = keep_while_faster(
        &ways,
        |x| {
            let r = refined(c, x);
            h.plan(r.chunks, r.piece_bytes(0, 1))
        },
        |p| p.finish,
    );
    let claim = refined(c, x);
    let schedule = build(h, &claim, &plan)?;
    let phases = if c.kind == CollectiveKind::AllReduce {
        2
    } else {
        1
    };
    Ok(Synthesis {
        schedules: vec![schedule],
        estimate: Time::from_ps(plan.finish.ps() * phases),
        ilp: Vec::new(),
        streamed: None,
        simulated: None,
        choice: Choice {
            symmetric: true,
            x_way: Some(x),
            ..Choice::default()
        },
    })
}

/// All-to-all by symmetry: rank 0's pieces go straight to their destinations (the switches give
/// every pair a path) in order of the destination's offset, and every rank does the same from
/// its own place, so at each step the ranks aim at distinct receivers: the staggered direct
/// exchange (`direct-staggered`). Its estimate: what crosses the busiest dimension's ports
/// (every piece crosses each dimension its ends differ in), plus the longest route's latency.
fn all_to_all(h: &Hierarchy, c: &Collective) -> Result<Synthesis, Error> {
    let schedule = crate::algorithms::direct::generate(c, true)?;
    // By symmetry each NPU's dimension-k port carries what rank 0 sends across dimension k.
    let mut bytes = vec![0u64; h.sizes.len()];
    for d in 1..h.npus() {
        let (lo, hi) = c.a2a_block(0, d);
        for (k, load) in bytes.iter_mut().enumerate() {
            if h.coordinate(d, k) != 0 {
                *load += c.piece_bytes(lo, hi);
            }
        }
    }
    let busiest = (0..bytes.len())
        .map(|k| h.bandwidth[k].transmit_time(bytes[k]))
        .max()
        .unwrap_or(Time::ZERO);
    let route = h.latency.iter().fold(Time::ZERO, |sum, &l| sum + l + l);
    Ok(Synthesis {
        schedules: vec![schedule],
        estimate: busiest + route,
        ilp: Vec::new(),
        streamed: None,
        simulated: None,
        choice: Choice {
            symmetric: true,
            ..Choice::default()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::hierarchy::tests::{
        assert_followed_exactly, assert_the_faster_is_kept, small_hierarchies,
    };
    use super::super::judged;
    use super::*;
    use crate::topology::parse_inline;
    use crate::units::Bandwidth;

    /// On the two small hierarchies, for all-gather, reduce-scatter and all-reduce from 1 KB to 64
    /// MB: the plan's schedule validates, the simulation follows the plan to the picosecond (so
    /// no two translates ever met in a port: they would have queued), and on these small
    /// networks the synthesizer keeps the faster of the plan and the search over unwindings.
    #[test]
    fn the_symmetric_plan_is_followed_exactly() {
        for topology in small_hierarchies() {
            let npus = topology.active_npus();
            for kind in [
                CollectiveKind::AllGather,
                CollectiveKind::ReduceScatter,
                CollectiveKind::AllReduce,
            ] {
                for size in [1_000, 1_000_000, 64_000_000] {
                    let c = Collective::new(kind, npus.clone(), size, 1, None).unwrap();
                    let plan = assert_followed_exactly(&topology, c, super::synthesize);
                    assert!(plan.choice.symmetric, "{} {kind} {size}", topology.name());
                }
            }
        }
    }

    /// All-to-all on a switch hierarchy: the staggered direct exchange, valid, and the kept
    /// schedule the faster of it and the matching's forwarding on a small hierarchy.
    #[test]
    fn all_to_all_goes_straight_to_its_destinations() {
        let gb = Bandwidth::gb_per_sec;
        let lat = [Time::from_ns(500), Time::from_ns(1000)];
        let topology = parse_inline("dims:switch4,switch4", &[gb(100.0), gb(25.0)], &lat).unwrap();
        let c = Collective::new(
            CollectiveKind::AllToAll,
            topology.active_npus(),
            1 << 24,
            1,
            None,
        )
        .unwrap();
        let options = SynthOptions::default();
        let h = Hierarchy::of(&topology, std::slice::from_ref(&c), &options).unwrap();
        let plan = super::synthesize(&h, &c, &options).unwrap();
        let schedule = &plan.schedules[0];
        assert_eq!(schedule.len(), 16 * 15);
        crate::schedule::validate(schedule, &c, 5).unwrap();
        let time = judged(&topology, &plan).unwrap();
        assert_the_faster_is_kept(&topology, c, time);
    }
}
