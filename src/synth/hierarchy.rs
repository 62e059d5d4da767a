//! Hierarchies of switch dimensions, as the planners that exploit their structure see them
//! (the symmetric plan of the all-to-all family, `symmetric`, and the port-by-port plan of the
//! rooted collectives, `rooted`), and the hops those plans are made of.
//!
//! NPU ids are row-major over the dimensions and each group of a dimension hangs off a switch
//! of its own, so an NPU has one link up to each dimension's switch and one down from it. A hop
//! between two members of a group crosses that switch store-and-forward: it holds the sender's
//! up-link for one serialization, and the receiver's down-link for one more once it has reached
//! the switch.

use super::{Method, SynthOptions};
use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, TransferIndex};
use crate::topology::{DimKind, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// A hierarchy of switch dimensions.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    pub(super) sizes: Vec<u32>,
    pub(super) strides: Vec<u32>,
    pub(super) bandwidth: Vec<Bandwidth>,
    /// One NPU-switch link's latency, per dimension.
    pub(super) latency: Vec<Time>,
}

/// One send of a plan: piece `piece` from `src` to `dst`, starting at `start` by the plan,
/// which its data reached at `ready` and which reaches `dst` at `arrive`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hop {
    pub start: Time,
    pub ready: Time,
    pub arrive: Time,
    pub piece: u32,
    pub src: u32,
    pub dst: u32,
}

/// A plan's hops, in start order, and when its last piece arrives.
pub(super) struct Plan {
    pub hops: Vec<Hop>,
    pub finish: Time,
}

impl Hierarchy {
    /// The hierarchy `collectives` run on, when a plan applies: one collective over every NPU
    /// in order (any kind but the point-to-point ones), on a fault-free shape whose dimensions
    /// are all switches, with no unwinding or sketch asked, symmetry not turned off, and not the
    /// TACCL-like baseline (a proxy for another tool).
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
        use CollectiveKind::*;
        let kinds = [
            AllGather,
            ReduceScatter,
            AllReduce,
            AllToAll,
            Broadcast,
            Reduce,
            Scatter,
            Gather,
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

    pub(super) fn npus(&self) -> u32 {
        self.sizes.iter().product()
    }

    pub(super) fn dims(&self) -> usize {
        self.sizes.len()
    }

    pub(super) fn coordinate(&self, npu: u32, dim: usize) -> u32 {
        npu / self.strides[dim] % self.sizes[dim]
    }

    /// `npu` with its coordinate in dimension `dim` set to `x`.
    pub(super) fn with_coordinate(&self, npu: u32, dim: usize, x: u32) -> u32 {
        npu - self.coordinate(npu, dim) * self.strides[dim] + x * self.strides[dim]
    }

    /// The members of `npu`'s group in dimension `dim`, in coordinate order.
    pub(super) fn group(&self, npu: u32, dim: usize) -> impl Iterator<Item = u32> + '_ {
        let base = self.with_coordinate(npu, dim, 0);
        (0..self.sizes[dim]).map(move |x| base + x * self.strides[dim])
    }

    /// Groups of dimension `dim`: `npus / size`.
    pub(super) fn groups(&self, dim: usize) -> usize {
        (self.npus() / self.sizes[dim]) as usize
    }

    /// Which of dimension `dim`'s groups `npu` is in, `0..groups(dim)`.
    pub(super) fn group_index(&self, npu: u32, dim: usize) -> usize {
        let (stride, size) = (self.strides[dim], self.sizes[dim]);
        (npu / (stride * size) * stride + npu % stride) as usize
    }

    /// The dimensions in which `a` and `b` differ, as bits.
    pub(super) fn differing(&self, a: u32, b: u32) -> usize {
        (0..self.dims())
            .filter(|&k| self.coordinate(a, k) != self.coordinate(b, k))
            .fold(0, |m, k| m | 1 << k)
    }

    /// One serialization of `bytes` on a port of dimension `dim`, and a whole hop across its
    /// switch (up, store, down).
    pub(super) fn port_and_trip(&self, dim: usize, bytes: u64) -> (Time, Time) {
        let port = self.bandwidth[dim].transmit_time(bytes);
        (port, port + port + self.latency[dim] + self.latency[dim])
    }
}

/// Which way [`emit`] lays a plan's hops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Emit {
    /// As planned, each piece copied from `src` to `dst`, from `offset` on.
    Forward { offset: Time },
    /// Mirrored in time from the plan's finish, each hop from `dst` back to `src` with `op`: a
    /// node's data leaves once what its children send it has come in (for a reduction, their
    /// partial sums).
    Mirrored { op: Op },
}

/// Adds `plan`'s hops to `b`, once for each offset of `translates` (the plan moved by that
/// offset: every NPU's coordinates plus the offset's, modulo each dimension's size; `piece_of`
/// names the piece a hop carries in that translate). A hop the plan holds back after its data is
/// there (its ports busy) waits for a timer at its planned start: run as soon as its data arrives
/// it could take a port ahead of a hop the plan put first, and the plan's ports would then meet
/// and queue. Where the plan's hops are timed at their transfers' own sizes (`exact_sizes`) and
/// one NPU's ports carry the hops of no other translate, a held hop that the plan starts the
/// moment its port's previous hop ends, and whose port took every earlier hop before its data
/// arrived, needs no timer: the link's first-in first-out queue starts it exactly then
/// ([`timers`]).
pub(super) fn emit(
    h: &Hierarchy,
    b: &mut Builder,
    plan: &Plan,
    translates: &[u32],
    piece_of: impl Fn(u32, u32) -> u32,
    how: Emit,
    exact_sizes: bool,
) {
    // Coordinates of every offset, computed once: the hops are millions on 1024 NPUs.
    let dims = h.dims();
    let offsets: Vec<u32> = translates
        .iter()
        .flat_map(|&r| (0..dims).map(move |k| h.coordinate(r, k)))
        .collect();
    let coordinates = |npu: u32| -> Vec<u32> { (0..dims).map(|k| h.coordinate(npu, k)).collect() };
    let moved = |at: &[u32], by: &[u32]| -> u32 {
        (0..dims)
            .map(|k| {
                let sum = at[k] + by[k];
                let wrapped = if sum >= h.sizes[k] {
                    sum - h.sizes[k]
                } else {
                    sum
                };
                wrapped * h.strides[k]
            })
            .sum()
    };
    // The phase's sends in the order they are laid: the hop, its planned start, when its data
    // is there, and its ends.
    let sends: Vec<(&Hop, Time, Time, u32, u32)> = match how {
        Emit::Forward { offset } => plan
            .hops
            .iter()
            .map(|hop| {
                (
                    hop,
                    offset + hop.start,
                    offset + hop.ready,
                    hop.src,
                    hop.dst,
                )
            })
            .collect(),
        Emit::Mirrored { .. } => {
            let mirror = |t: Time| Time::from_ps(plan.finish.ps() - t.ps());
            // Mirrored, the last of a node's children's sends arrives when the earliest of
            // them started.
            let mut first_child: std::collections::HashMap<(u32, u32), Time> = Default::default();
            for hop in &plan.hops {
                let e = first_child.entry((hop.piece, hop.src)).or_insert(hop.start);
                *e = (*e).min(hop.start);
            }
            plan.hops
                .iter()
                .rev()
                .map(|hop| {
                    let ready = first_child
                        .get(&(hop.piece, hop.dst))
                        .map_or(Time::ZERO, |&t| mirror(t));
                    (hop, mirror(hop.arrive), ready, hop.dst, hop.src)
                })
                .collect()
        }
    };
    let op = match how {
        Emit::Forward { .. } => Op::Copy,
        Emit::Mirrored { op } => op,
    };
    let timed = match exact_sizes && translates.len() == 1 {
        true => {
            let c = b.c;
            let spans: Vec<Span> = sends
                .iter()
                .map(|&(hop, at, ready, from, to)| {
                    let piece = piece_of(translates[0], hop.piece);
                    let dim = h.differing(from, to).trailing_zeros() as usize;
                    let busy = h.port_and_trip(dim, c.piece_bytes(piece, piece + 1)).0;
                    Span {
                        at,
                        ready,
                        port: from as u64 * dims as u64 + dim as u64,
                        busy,
                    }
                })
                .collect();
            timers(&spans)
        }
        false => sends
            .iter()
            .map(|&(_, at, ready, _, _)| at > ready)
            .collect(),
    };
    // Per NPU, its latest timer and when it fires: the next one waits for it, so that the
    // engine holds one pending timer an NPU instead of every timer from the start (about 6%
    // of the 4 KB all-reduce on 1024 NPUs, in interleaved runs).
    let mut last_timer: Vec<Option<(TransferIndex, Time)>> = vec![None; h.npus() as usize];
    for (&(hop, at, _, from, to), timed) in sends.iter().zip(timed) {
        let (from, to) = (coordinates(from), coordinates(to));
        for (&r, by) in translates.iter().zip(offsets.chunks_exact(dims)) {
            let piece = piece_of(r, hop.piece);
            let (src, dst) = (moved(&from, by), moved(&to, by));
            let timer = timed.then(|| {
                let t = match last_timer[src as usize] {
                    Some((before, fires)) if fires <= at => b.wait(src, at - fires, &[before]),
                    _ => b.timer(src, at),
                };
                last_timer[src as usize] = Some((t, at));
                t
            });
            let after: &[_] = match &timer {
                Some(t) => std::slice::from_ref(t),
                None => &[],
            };
            b.send_after(src, dst, (piece, piece + 1), op, after);
        }
    }
}

/// One send on one port, as [`timers`] sees it: its planned start, when its data is there, its
/// port (an NPU's up-link into one dimension), and how long it holds the port.
struct Span {
    at: Time,
    ready: Time,
    port: u64,
    busy: Time,
}

/// Which sends need a timer at their planned start. Walking each port's sends in planned order: a
/// send held after its data is there needs none when the plan starts it the moment the port's
/// previous send ends and every earlier send was issued strictly before its data arrived (a timed
/// send at its timer, another at its data): then it queues behind them, the link takes it next,
/// and no later send is issued ahead of it (each is issued after every earlier one, by this same
/// rule). Ties are never trusted to the event order.
fn timers(spans: &[Span]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].port, spans[i].at));
    let mut timed = vec![false; spans.len()];
    // (port, when its last send ends, the latest issue among its sends so far)
    let mut last: Option<(u64, Time, Time)> = None;
    for i in order {
        let s = &spans[i];
        let (end, issued) = match last {
            Some((port, end, issued)) if port == s.port => (Some(end), Some(issued)),
            _ => (None, None),
        };
        let queued = end == Some(s.at) && issued.is_some_and(|t| t < s.ready);
        timed[i] = s.at > s.ready && !queued;
        let issue = if timed[i] { s.at } else { s.ready };
        last = Some((
            s.port,
            s.at + s.busy,
            issued.map_or(issue, |t| t.max(issue)),
        ));
    }
    timed
}

/// The collective `c` with every chunk cut in `x` sub-chunks.
pub(super) fn refined(c: &Collective, x: u32) -> Collective {
    Collective {
        chunks: c.chunks * x,
        ..c.clone()
    }
}

/// The X-way chunkings a plan tries: the user's (refused if the buffer cannot be cut so
/// finely), else `1, 2, 4, ...` up to `most` while the pieces stay whole bytes and the plan's
/// sends, `sends(x)`, stay within the synthesizer's budget.
pub(super) fn x_ways(
    c: &Collective,
    options: &SynthOptions,
    most: u32,
    sends: impl Fn(u32) -> u64,
) -> Result<Vec<u32>, Error> {
    let fits = |x: u32| {
        refined(c, x).piece_count() as u64 <= c.size && sends(x) <= super::KEEP_PLANS_UP_TO
    };
    match options.x_way {
        Some(x) if fits(x) => Ok(vec![x]),
        Some(x) => Err(Error::input(format!(
            "--x-way {x}: the chunks cannot be cut that finely"
        ))),
        None => Ok(std::iter::successors(Some(1u32), |x| x.checked_mul(2))
            .take_while(|&x| x <= most)
            .filter(|&x| x == 1 || fits(x))
            .collect()),
    }
}

/// Keeps the first of `plans` (made in order of X) unless a later one finishes at least 1%
/// sooner than the best so far; stops at the first that does not (doubling X doubles the
/// schedule, so it must pay).
pub(super) fn keep_while_faster<P>(
    ways: &[u32],
    mut plan: impl FnMut(u32) -> P,
    finish: impl Fn(&P) -> Time,
) -> (u32, P) {
    let mut kept: Option<(u32, P)> = None;
    for &x in ways {
        let p = plan(x);
        match &kept {
            Some((_, best)) if finish(&p).ps() as f64 > 0.99 * finish(best).ps() as f64 => break,
            _ => kept = Some((x, p)),
        }
    }
    kept.expect("one X at least")
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::{judged, synthesize, synthesize_unwound, Synthesis, Unwound};
    use super::*;
    use crate::topology::parse_inline;

    /// Two small hierarchies the planners' tests run on: two levels with a slow, far upper one; three with unequal sizes.
    pub(in crate::synth) fn small_hierarchies() -> Vec<Topology> {
        let gb = Bandwidth::gb_per_sec;
        [
            (
                "dims:switch4,switch4",
                vec![gb(200.0), gb(50.0)],
                vec![700, 1700],
            ),
            (
                "dims:switch4,switch2,switch3",
                vec![gb(100.0), gb(50.0), gb(25.0)],
                vec![500, 500, 1000],
            ),
        ]
        .into_iter()
        .map(|(spec, bw, lat)| {
            let lat: Vec<Time> = lat.into_iter().map(Time::from_ns).collect();
            parse_inline(spec, &bw, &lat).unwrap()
        })
        .collect()
    }

    /// The plan `planner` makes of `c` on a small hierarchy, checked: it validates, the
    /// simulation follows it to the picosecond, and the synthesizer keeps the faster of it and
    /// the search over unwindings.
    pub(in crate::synth) fn assert_followed_exactly(
        topology: &Topology,
        c: Collective,
        planner: fn(&Hierarchy, &Collective, &SynthOptions) -> Result<Synthesis, Error>,
    ) -> Synthesis {
        let options = SynthOptions::default();
        let h = Hierarchy::of(topology, std::slice::from_ref(&c), &options).unwrap();
        let plan = planner(&h, &c, &options).unwrap();
        let schedule = &plan.schedules[0];
        let claim = schedule.collective.as_ref().unwrap();
        crate::schedule::validate(schedule, claim, 7).unwrap();
        let time = judged(topology, &plan).unwrap();
        let what = format!("{} {} {}", topology.name(), c.kind, c.size);
        assert_eq!(time, plan.estimate, "{what}");
        assert_the_faster_is_kept(topology, c, time);
        plan
    }

    /// On a small hierarchy the synthesizer keeps the faster of the plan (simulated at
    /// `planned`) and the search over unwindings.
    pub(in crate::synth) fn assert_the_faster_is_kept(
        topology: &Topology,
        c: Collective,
        planned: Time,
    ) {
        let options = SynthOptions::default();
        let collectives = [c];
        let search =
            synthesize_unwound(topology, &mut Unwound::default(), &collectives, &options).unwrap();
        let searched = judged(topology, &search).unwrap();
        let kept = synthesize(topology, &collectives, &options).unwrap();
        let kept = judged(topology, &kept).unwrap();
        assert_eq!(kept, planned.min(searched), "{}", collectives[0].kind);
    }

    /// A held send goes without a timer only when its port's queue starts it exactly as
    /// planned: right after the port's previous send, with every earlier send issued before
    /// its data arrived.
    #[test]
    fn a_held_send_needs_no_timer_only_when_its_queue_starts_it_as_planned() {
        let ns = Time::from_ns;
        let span = |at, ready, port| Span {
            at: ns(at),
            ready: ns(ready),
            port,
            busy: ns(10),
        };
        let spans = [
            span(0, 0, 1),   // not held
            span(10, 5, 1),  // right after the first, which was issued at 0
            span(20, 12, 1), // right after the second, issued at 5
            span(35, 15, 1), // the plan leaves the port idle from 30: timed
            span(45, 3, 1),  // right after, but the one before is issued (timer) at 35
            span(5, 1, 2),   // held, first on its port: timed
        ];
        assert_eq!(timers(&spans), [false, false, false, true, true, true]);
    }

    /// Anything but one whole-network collective on switches alone, or a forced unwinding, keeps
    /// the matching over unwound switches.
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
            (&switches, Broadcast, all.clone(), &options, true),
            (&switches, AllGather, all[..4].to_vec(), &options, false),
            (&switches, Scatter, all[..4].to_vec(), &options, false),
            (&switches, AllGather, all, &forced, false),
        ];
        for (topology, kind, npus, o, applies) in cases {
            let c = Collective::new(kind, npus, 1 << 20, 1, None).unwrap();
            let planned = Hierarchy::of(topology, &[c], o).is_some();
            assert_eq!(planned, applies, "{} {kind}", topology.name());
        }
    }
}
