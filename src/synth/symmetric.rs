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

use super::{Choice, Method, SynthOptions, Synthesis, KEEP_PLANS_UP_TO};
use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Op;
use crate::topology::{DimKind, Topology};
use crate::units::{Bandwidth, Time};
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

/// Sub-chunk counts tried when the user gives no `--x-way`.
const X_WAYS: [u32; 5] = [1, 2, 4, 8, 16];

/// A hierarchy of switch dimensions, as the plan sees it.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    sizes: Vec<u32>,
    strides: Vec<u32>,
    bandwidth: Vec<Bandwidth>,
    /// One NPU-switch link's latency, per dimension.
    latency: Vec<Time>,
}

/// One send of the chunk of NPU 0: piece `piece` from `src` to `dst`, starting at `start` by
/// the plan, which its data reached at `ready` and which reaches `dst` at `arrive`.
#[derive(Clone, Copy, Debug)]
struct Hop {
    start: Time,
    ready: Time,
    arrive: Time,
    piece: u32,
    src: u32,
    dst: u32,
}

/// The plan of one rank's chunk and when its last piece arrives.
struct Plan {
    hops: Vec<Hop>,
    finish: Time,
}

impl Hierarchy {
    /// The hierarchy `collectives` run on, when the plan applies: one all-gather,
    /// reduce-scatter, all-reduce or all-to-all over every NPU in order, on a fault-free shape whose
    /// dimensions are all switches, with no unwinding or sketch asked, symmetry not turned off,
    /// and not the TACCL-like baseline (a proxy for another tool).
    pub(crate) fn of(
        topology: &Topology,
        collectives: &[Collective],
        options: &SynthOptions,
    ) -> Option<Hierarchy> {
        if !options.symmetry
            || options.unwinding.is_some()
            || options.method == Method::TacclLike
            || options.sketch.is_some()
            || collectives.len() != 1
        {
            return None;
        }
        let c = &collectives[0];
        let kinds = [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
            CollectiveKind::AllToAll,
        ];
        let dims = topology.dims();
        let whole = c.npus.len() == topology.npus() as usize
            && c.npus.iter().enumerate().all(|(i, &v)| v == i as u32);
        if !kinds.contains(&c.kind)
            || dims.is_empty()
            || dims.iter().any(|d| d.kind != DimKind::Switch || d.size < 2)
            || !topology.uses_dimension_routing()
            || !whole
        {
            return None;
        }
        let mut strides = Vec::with_capacity(dims.len());
        let mut stride = 1;
        for d in dims {
            strides.push(stride);
            stride *= d.size;
        }
        Some(Hierarchy {
            sizes: dims.iter().map(|d| d.size).collect(),
            strides,
            bandwidth: dims.iter().map(|d| d.bandwidth).collect(),
            latency: dims.iter().map(|d| d.latency).collect(),
        })
    }

    fn npus(&self) -> u32 {
        self.sizes.iter().product()
    }

    fn coordinate(&self, npu: u32, dim: usize) -> u32 {
        npu / self.strides[dim] % self.sizes[dim]
    }

    /// `npu` moved by the offset whose coordinates are those of `by`.
    fn translate(&self, npu: u32, by: u32) -> u32 {
        (0..self.sizes.len())
            .map(|k| {
                let sum = self.coordinate(npu, k) + self.coordinate(by, k);
                sum % self.sizes[k] * self.strides[k]
            })
            .sum()
    }

    /// The members of `npu`'s group in dimension `dim`, in coordinate order.
    fn group(&self, npu: u32, dim: usize) -> impl Iterator<Item = u32> + '_ {
        let base = npu - self.coordinate(npu, dim) * self.strides[dim];
        (0..self.sizes[dim]).map(move |x| base + x * self.strides[dim])
    }

    /// The greedy plan of NPU 0's chunk cut in `x` pieces of at most `bytes` each.
    fn plan(&self, x: u32, bytes: u64) -> Plan {
        let n = self.npus() as usize;
        let dims = self.sizes.len();
        // A piece crosses a dimension up to its switch and down again, store-and-forward.
        let port: Vec<Time> = self
            .bandwidth
            .iter()
            .map(|b| b.transmit_time(bytes))
            .collect();
        let trip: Vec<Time> = (0..dims)
            .map(|k| port[k] + port[k] + self.latency[k] + self.latency[k])
            .collect();
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
/// reductions) where the collective reduces. A hop the plan holds back after its data is there
/// (its dimension's ports busy) waits for a timer at its planned start: run as soon as its data
/// arrives it could take a port ahead of a hop the plan put first, and the translates of one
/// plan would then meet in the ports.
fn build(h: &Hierarchy, c: &Collective, plan: &Plan) -> Result<crate::schedule::Schedule, Error> {
    let n = h.npus();
    let x = c.chunks;
    let mut b = Builder::new(c)?;
    let mirror = |t: Time| Time::from_ps(plan.finish.ps() - t.ps());
    let send = |b: &mut Builder, hop: &Hop, at: Time, ready: Time, reverse: bool| {
        for r in 0..n {
            let piece = r * x + hop.piece;
            let (from, to, op) = match reverse {
                true => (hop.dst, hop.src, Op::Reduce),
                false => (hop.src, hop.dst, Op::Copy),
            };
            let (src, dst) = (h.translate(from, r), h.translate(to, r));
            let timer = (at > ready).then(|| b.timer(src, at));
            let after: &[_] = match &timer {
                Some(t) => std::slice::from_ref(t),
                None => &[],
            };
            b.send_after(src, dst, (piece, piece + 1), op, after);
        }
    };
    let mut offset = Time::ZERO;
    if c.kind.has_reduce_scatter() {
        // A node's partial sum leaves once its children's have come in: mirrored, the latest
        // of them arrives when the earliest of its children's sends started.
        let mut first_child: std::collections::HashMap<(u32, u32), Time> = Default::default();
        for hop in &plan.hops {
            let e = first_child.entry((hop.piece, hop.src)).or_insert(hop.start);
            *e = (*e).min(hop.start);
        }
        for hop in plan.hops.iter().rev() {
            let ready = first_child
                .get(&(hop.piece, hop.dst))
                .map_or(Time::ZERO, |&t| mirror(t));
            send(&mut b, hop, mirror(hop.arrive), ready, true);
        }
        offset = plan.finish;
    }
    if c.kind.has_all_gather() {
        for hop in &plan.hops {
            send(&mut b, hop, offset + hop.start, offset + hop.ready, false);
        }
    }
    Ok(b.finish())
}

/// The symmetric plan of `c` on `h`: at the user's X-way chunking, else X of [`X_WAYS`]
/// doubled while the plan finishes at least 1% sooner (as the matching's own search does),
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
    let refined = |x: u32| Collective {
        chunks: c.chunks * x,
        ..c.clone()
    };
    let fits = |x: u32| {
        let r = refined(x);
        r.piece_count() as u64 <= c.size && r.piece_count() as u64 * n <= KEEP_PLANS_UP_TO
    };
    let ways: Vec<u32> = match options.x_way {
        Some(x) if fits(x) => vec![x],
        Some(x) => {
            return Err(Error::input(format!(
                "--x-way {x}: the chunks cannot be cut that finely"
            )))
        }
        None => X_WAYS.into_iter().filter(|&x| x == 1 || fits(x)).collect(),
    };
    let mut kept: Option<(u32, Plan)> = None;
    for x in ways {
        let r = refined(x);
        let plan = h.plan(r.chunks, r.piece_bytes(0, 1));
        match &kept {
            // Doubling X doubles the schedule: kept only where the plan gets 1% faster.
            Some((_, best)) if plan.finish.ps() as f64 > 0.99 * best.finish.ps() as f64 => break,
            _ => kept = Some((x, plan)),
        }
    }
    let (x, plan) = kept.expect("one X at least");
    let claim = refined(x);
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
    use super::super::{judged, synthesize, synthesize_unwound, Unwound};
    use super::*;
    use crate::topology::parse_inline;

    /// On two switch hierarchies, for all-gather, reduce-scatter and all-reduce from 1 KB to 64
    /// MB: the plan's schedule validates, the simulation follows the plan to the picosecond (so
    /// no two translates ever met in a port: they would have queued), and on these small
    /// networks the synthesizer keeps the faster of the plan and the search over unwindings.
    #[test]
    fn the_symmetric_plan_is_followed_exactly() {
        let gb = Bandwidth::gb_per_sec;
        for (spec, bw, lat) in [
            (
                "dims:switch4,switch4",
                vec![gb(200.0), gb(50.0)],
                vec![700, 1700],
            ),
            (
                "dims:switch4,switch2,switch2",
                vec![gb(100.0), gb(50.0), gb(25.0)],
                vec![500, 500, 1000],
            ),
        ] {
            let lat: Vec<Time> = lat.into_iter().map(Time::from_ns).collect();
            let topology = parse_inline(spec, &bw, &lat).unwrap();
            let npus = topology.active_npus();
            for kind in [
                CollectiveKind::AllGather,
                CollectiveKind::ReduceScatter,
                CollectiveKind::AllReduce,
            ] {
                for size in [1_000, 1_000_000, 64_000_000] {
                    let c = Collective::new(kind, npus.clone(), size, 1, None).unwrap();
                    let options = SynthOptions::default();
                    let h = Hierarchy::of(&topology, std::slice::from_ref(&c), &options).unwrap();
                    let plan = super::synthesize(&h, &c, &options).unwrap();
                    assert!(plan.choice.symmetric, "{spec} {kind} {size}");
                    let schedule = &plan.schedules[0];
                    let claim = schedule.collective.as_ref().unwrap();
                    crate::schedule::validate(schedule, claim, 7).unwrap();
                    let time = judged(&topology, &plan).unwrap();
                    assert_eq!(time, plan.estimate, "{spec} {kind} {size}");
                    assert_the_faster_is_kept(&topology, c, time);
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

    /// On a small hierarchy the synthesizer keeps the faster of the plan (simulated at
    /// `planned`) and the search over unwindings.
    fn assert_the_faster_is_kept(topology: &Topology, c: Collective, planned: Time) {
        let options = SynthOptions::default();
        let collectives = [c];
        let search =
            synthesize_unwound(topology, &mut Unwound::default(), &collectives, &options).unwrap();
        let searched = judged(topology, &search).unwrap();
        let kept = synthesize(topology, &collectives, &options).unwrap();
        let kept = judged(topology, &kept).unwrap();
        assert_eq!(kept, planned.min(searched), "{}", collectives[0].kind);
    }

    /// Anything but one whole-network all-gather, reduce-scatter, all-reduce or all-to-all on
    /// switches alone, or a forced unwinding, keeps the matching over unwound switches.
    #[test]
    fn the_plan_applies_to_switch_hierarchies_only() {
        let gb = Bandwidth::gb_per_sec(50.0);
        let ns = Time::from_ns(500);
        let switches = parse_inline("dims:switch4,switch2", &[gb, gb], &[ns, ns]).unwrap();
        let mixed = parse_inline("dims:ring4,switch2", &[gb, gb], &[ns, ns]).unwrap();
        let all = switches.active_npus();
        let options = SynthOptions::default();
        let forced = SynthOptions {
            unwinding: Some(super::super::Unwinding::Degree(1)),
            ..SynthOptions::default()
        };
        use CollectiveKind::*;
        let cases = [
            (&switches, AllReduce, all.clone(), &options, true),
            (&mixed, AllReduce, all.clone(), &options, false),
            (&switches, AllToAll, all.clone(), &options, true),
            (&switches, Broadcast, all.clone(), &options, false),
            (&switches, AllGather, all[..4].to_vec(), &options, false),
            (&switches, AllGather, all, &forced, false),
        ];
        for (topology, kind, npus, o, applies) in cases {
            let c = Collective::new(kind, npus, 1 << 20, 1, None).unwrap();
            let planned = Hierarchy::of(topology, &[c], o).is_some();
            assert_eq!(planned, applies, "{} {kind}", topology.name());
        }
    }
}
