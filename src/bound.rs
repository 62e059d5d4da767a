//! Lower bounds on collective time (DESIGN.md "Lower bounds"): the per-NPU bandwidth bound, the
//! bandwidth cut bound, and the latency bound (the diameter).
//!
//! They combine as `bound = max(max(npu, cut) + a_min, latency)`, where `a_min` is the shortest
//! link latency.
//!
//! All-reduce departs from DESIGN.md too. Its `2(n-1)/n size` per NPU and its cut bound "reduce-
//! scatter plus all-gather" assume every NPU receives `2(n-1)/n size`; Patarasuk and Yuan prove
//! only that *some* NPU does (a given one needs `size`). Where NPUs differ that is not a lower
//! bound: TACOS all-reduces on a 4x4 mesh 3.4% faster, letting the corner NPUs (half the links)
//! receive less. So all-reduce takes the largest of what is provable: every NPU receives `size`;
//! every byte needs `2(n-1)` transfers (one-way gossip), so the NPUs together take in `2(n-1)
//! size`; for any partition of the participants into `g` groups the groups take in `2(g-1) size`
//! (singletons, and the groups joined by the network's fast links, e.g. boxes behind their
//! NVSwitch); an all-reduce solves an all-gather and a reduce-scatter of the same size, so it
//! takes at least each. DESIGN's sum is kept on fault-free built-in shapes whose NPUs are all
//! alike (rings, tori, hypercubes, switches, fully connected and their hierarchies): there every
//! NPU, and every group of a symmetric partition, is the one the existence argument needs. DESIGN.md writes `max(npu, cut) + latency`, but that is not a lower bound once
//! latency is pipelined: a bidirectional ring all-reduce of 1 MiB on `ring:8` (50 GB/s, 500 ns)
//! takes 18.85 us while `max(npu, cut) + latency` is 20.35 us. Every byte that the bandwidth
//! bound counts is serialised onto some link at least `a_min` before it arrives, so the bandwidth
//! bounds hold with `a_min` added; the diameter latency holds on its own.

use crate::collective::{Collective, CollectiveKind};
use crate::forest::rate::{optimal_rate_counted, Demand, Network};
use crate::topology::{DimKind, NodeId, Topology};
use crate::units::Time;

/// The bounds for one collective on one topology.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub npu: Time,
    /// The cut bound, where it applies and was computed.
    pub cut: Option<Time>,
    /// The largest latency data must cover (the diameter, or from/to the root).
    pub latency: Time,
    /// The shortest link latency: the least any byte spends after its serialisation.
    pub last_hop: Time,
}

impl Bounds {
    /// The combined lower bound, `max(max(npu, cut) + last_hop, latency)`.
    pub fn total(&self) -> Time {
        (self.npu.max(self.cut.unwrap_or(Time::ZERO)) + self.last_hop).max(self.latency)
    }
}

/// Work (max-flow computations x graph size) above which run summaries leave the cut bound out,
/// to keep it under about 0.1 s; the `bound` command computes it regardless. A 16x16 mesh
/// all-reduce is 1.6e5 (44 ms); a 32x32 mesh all-gather is 2.5e6 (0.7 s on 2 cores). Symmetric
/// shapes (rings, tori, switches, hypercubes) need one max-flow per direction.
pub const CUT_BOUND_BUDGET: u64 = 300_000;

/// Computes the bounds of `collective` on `topology`, the cut bound only when its max-flow work
/// stays within `cut_budget` (None: always).
pub fn bounds(topology: &Topology, collective: &Collective, cut_budget: Option<u64>) -> Bounds {
    bounds_counted(topology, collective, cut_budget, None)
}

/// [`bounds`], counting the cut bound's max-flows in `progress` (the `bound` command's progress
/// lines: a large mesh needs one per class of NPUs its symmetries leave).
pub fn bounds_counted(
    topology: &Topology,
    collective: &Collective,
    cut_budget: Option<u64>,
    progress: Option<&crate::report::Steps>,
) -> Bounds {
    Bounds {
        npu: npu_bound(topology, collective),
        cut: cut_bound_counted(topology, collective, cut_budget, progress),
        latency: latency_bound(topology, collective),
        last_hop: topology
            .links()
            .iter()
            .map(|l| l.latency)
            .min()
            .unwrap_or(Time::ZERO),
    }
}

/// ForestColl's bandwidth cut bound: all-gather must push the `|S ∩ NPUs|` shards of every node
/// set `S` that misses a participant through the bandwidth `B+(S)` leaving it, so it takes at least
/// `size/n * max_S |S ∩ NPUs| / B+(S)`; reduce-scatter is the same on the reversed network and
/// all-reduce is both. Broadcast and reduce are limited by the smallest root cut (Edmonds); gather
/// by the cuts around the root (its shards must all get in), scatter the same reversed. The
/// ratio is found exactly ([`crate::forest::rate`]), so it is the very rate ForestColl's trees
/// reach. All-to-all takes the groups the links join (`all_to_all_cut_bound`). None when the
/// work would exceed `budget`.
pub fn cut_bound(topology: &Topology, c: &Collective, budget: Option<u64>) -> Option<Time> {
    cut_bound_counted(topology, c, budget, None)
}

fn cut_bound_counted(
    topology: &Topology,
    c: &Collective,
    budget: Option<u64>,
    progress: Option<&crate::report::Steps>,
) -> Option<Time> {
    let rooted = matches!(c.kind, CollectiveKind::Broadcast | CollectiveKind::Reduce);
    let to_root = matches!(c.kind, CollectiveKind::Gather | CollectiveKind::Scatter);
    let all = c.npus.len() == topology.active_npus().len();
    // Gather is every participant spreading its share to the root alone; scatter the same on
    // the transposed network.
    let sinks = if to_root {
        vec![c.root()]
    } else if all && !rooted {
        symmetry_representatives(topology)
    } else {
        c.npus.clone()
    };
    let phases: &[bool] = match c.kind {
        CollectiveKind::AllGather | CollectiveKind::Broadcast | CollectiveKind::Gather => &[false],
        CollectiveKind::ReduceScatter | CollectiveKind::Reduce | CollectiveKind::Scatter => &[true],
        CollectiveKind::AllReduce => &[true, false],
        CollectiveKind::AllToAll => return all_to_all_cut_bound(topology, c),
    };
    let symmetric = all && symmetry_representatives(topology).len() == 1;
    let work = sinks.len() as u64
        * phases.len() as u64
        * 2
        * (topology.nodes() as u64 + topology.links().len() as u64);
    if budget.is_some_and(|b| work > b) {
        return None;
    }
    let demand = if rooted {
        Demand::rooted(c.root(), &c.npus)
    } else {
        Demand::all(&c.npus)
    };
    let share = if rooted {
        c.size as f64
    } else {
        c.size as f64 / c.ranks() as f64
    };
    if let Some(steps) = progress {
        steps.begin("max-flows", (sinks.len() * phases.len()) as u64);
    }
    let mut times = Vec::new();
    for &reversed in phases {
        let net = Network::new(topology, reversed);
        let rate = optimal_rate_counted(&net, &demand, &sinks, progress).ok()?;
        times.push(share / (rate.as_f64() * net.unit_bps));
    }
    let secs = if c.kind != CollectiveKind::AllReduce || symmetric {
        times.iter().sum()
    } else {
        // Provable for any network (see the module notes): each phase alone, and the groups.
        times
            .iter()
            .copied()
            .fold(group_bound(topology, c), f64::max)
            .max(crossing_bound(topology, c, budget))
    };
    if let Some(steps) = progress {
        steps.end();
    }
    Some(seconds(secs))
}

/// All-to-all: a node set `S` holding `k` of the `n` participants sends `k (n - k) size / n`
/// bytes out of itself and takes as much in, through the links leaving and entering it. Every
/// such set bounds the time; the sets tried are the groups the network's links join at each of
/// its speeds (boxes behind their switch, groups of a dimension, pods), beside the per-NPU bound.
/// None when no group holds some but not all participants.
fn all_to_all_cut_bound(topology: &Topology, c: &Collective) -> Option<Time> {
    let speeds = link_speeds(topology);
    let nodes = topology.nodes() as usize;
    let n = c.npus.len() as f64;
    let per_pair = c.size as f64 / n;
    let mut best: Option<f64> = None;
    for &threshold in speeds.iter().skip(1) {
        let group = topology.groups_joined_at(threshold);
        let mut members = vec![0.0f64; nodes];
        for &v in &c.npus {
            members[group[v as usize] as usize] += 1.0;
        }
        let (mut into, mut out) = (vec![0.0f64; nodes], vec![0.0f64; nodes]);
        for l in topology.links() {
            let (a, b) = (
                group[l.src as usize] as usize,
                group[l.dst as usize] as usize,
            );
            if a != b {
                into[b] += l.bandwidth.as_bytes_per_sec();
                out[a] += l.bandwidth.as_bytes_per_sec();
            }
        }
        for g in 0..nodes {
            let k = members[g];
            if k == 0.0 || k == n {
                continue;
            }
            let traffic = k * (n - k) * per_pair;
            for capacity in [into[g], out[g]] {
                if capacity > 0.0 {
                    let t = traffic / capacity;
                    best = Some(best.map_or(t, |b: f64| b.max(t)));
                }
            }
        }
    }
    best.map(seconds)
}

/// The topology's distinct link bandwidths, in bytes per second, ascending.
fn link_speeds(topology: &Topology) -> Vec<f64> {
    let mut speeds: Vec<f64> = topology
        .links()
        .iter()
        .map(|l| l.bandwidth.as_bytes_per_sec())
        .collect();
    speeds.sort_by(f64::total_cmp);
    speeds.dedup();
    speeds
}

/// All-reduce: every piece must cross every cut that separates participants once each way (a
/// participant on each side needs the other side's contribution), so `size` bytes cross each
/// way: `size / λ`, with λ the least capacity, either way, of such a cut. λ is the least max-flow
/// between the first participant and any other, in either direction (2(n-1) max-flows; 0 when
/// that passes `budget`), on the same integer capacities as the cut bound. Seconds.
fn crossing_bound(topology: &Topology, c: &Collective, budget: Option<u64>) -> f64 {
    let work =
        2 * (c.npus.len() as u64) * (topology.nodes() as u64 + topology.links().len() as u64);
    if budget.is_some_and(|b| work > b) {
        return 0.0;
    }
    let capacities = Network::new(topology, false);
    let (mut net, _) = capacities.flow_network(&[]);
    let first = c.npus[0];
    let mut lambda = crate::flow::INFINITE;
    for &v in &c.npus[1..] {
        lambda = lambda.min(net.max_flow(&[first], &[v], lambda));
        lambda = lambda.min(net.max_flow(&[v], &[first], lambda));
    }
    if lambda <= 0 || lambda >= crate::flow::INFINITE {
        return 0.0;
    }
    c.size as f64 / (lambda as f64 * capacities.unit_bps)
}

/// All-reduce: for a partition of the participants into `g >= 2` groups, the groups together take
/// in (and give out) `2(g-1) size` over the links that cross into (out of) them (every byte
/// needs `2(g-1)` transfers between groups). The partitions are
/// the components of the links of at least `b` bandwidth, for every `b` just above a gap of 2x
/// or more between the link bandwidths (boxes behind a fast switch, the inner dimensions of a
/// hierarchy); singletons are [`npu_bound`]'s. Seconds, 0 where no partition applies.
fn group_bound(topology: &Topology, c: &Collective) -> f64 {
    let speeds = link_speeds(topology);
    let nodes = topology.nodes() as usize;
    let mut best = 0.0f64;
    for w in speeds.windows(2).filter(|w| w[1] / w[0] >= 2.0) {
        let threshold = w[1];
        let group: Vec<usize> = topology
            .groups_joined_at(threshold)
            .into_iter()
            .map(|g| g as usize)
            .collect();
        let mut holds = vec![false; nodes];
        for &v in &c.npus {
            holds[group[v as usize]] = true;
        }
        let g = holds.iter().filter(|&&h| h).count() as f64;
        if g < 2.0 {
            continue;
        }
        let (mut into, mut out) = (vec![0.0f64; nodes], vec![0.0f64; nodes]);
        for l in topology.links() {
            let (a, b) = (group[l.src as usize], group[l.dst as usize]);
            if a != b {
                into[b] += l.bandwidth.as_bytes_per_sec();
                out[a] += l.bandwidth.as_bytes_per_sec();
            }
        }
        let together = |side: &[f64]| {
            (0..nodes)
                .filter(|&r| holds[r])
                .map(|r| side[r])
                .sum::<f64>()
        };
        let need = 2.0 * (g - 1.0) * c.size as f64;
        best = best.max(need / together(&into)).max(need / together(&out));
    }
    best
}

/// NPUs that stand for every NPU up to a symmetry of the network, so that checking cuts against
/// them checks them against all: on a fault-free built-in shape, rotations of rings and
/// permutations inside fully connected and switch groups map any NPU to coordinate 0 there, and a
/// mesh axis is symmetric under reflection. Elsewhere every NPU.
pub(crate) fn symmetry_representatives(topology: &Topology) -> Vec<NodeId> {
    if !topology.uses_dimension_routing() {
        return topology.active_npus();
    }
    let mut reps = vec![0u32];
    let mut stride = 1u32;
    for dim in topology.dims() {
        let coords = match dim.kind {
            DimKind::Line => dim.size.div_ceil(2),
            _ => 1,
        };
        reps = (0..coords)
            .flat_map(|k| reps.iter().map(move |&r| r + k * stride))
            .collect();
        stride *= dim.size;
    }
    reps
}

/// Seconds to picoseconds, rounded down (a bound must not exceed what is achievable), after
/// forgiving the last bits of floating-point error.
fn seconds(s: f64) -> Time {
    Time((s * 1e12 + 1e-3).floor() as u64)
}

/// Bytes each constrained NPU must receive, divided by its ingress bandwidth.
pub fn npu_bound(topology: &Topology, c: &Collective) -> Time {
    let n = c.ranks() as f64;
    let size = c.size as f64;
    let mut ingress = vec![0.0f64; topology.nodes() as usize];
    let mut egress = vec![0.0f64; topology.nodes() as usize];
    for link in topology.links() {
        ingress[link.dst as usize] += link.bandwidth.as_bytes_per_sec();
        egress[link.src as usize] += link.bandwidth.as_bytes_per_sec();
    }
    let min_over = |npus: &mut dyn Iterator<Item = NodeId>| {
        npus.map(|v| ingress[v as usize])
            .fold(f64::INFINITY, f64::min)
    };
    let over = |side: &[f64], f: fn(f64, f64) -> f64, start: f64| {
        c.npus.iter().map(|&v| side[v as usize]).fold(start, f)
    };
    let root = c.root();
    let non_root = || c.npus.iter().copied().filter(move |&v| v != root);
    let secs = match c.kind {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            (n - 1.0) / n * size / min_over(&mut c.npus.iter().copied())
        }
        // Every NPU takes in and gives out `size`; and every byte needs 2(n-1) transfers
        // between participants (one-way gossip), each leaving one NPU and entering another, so
        // together the NPUs take in (give out) 2(n-1) size: on NPUs that all have the same
        // links, 2(n-1)/n size each (Patarasuk and Yuan).
        CollectiveKind::AllReduce => {
            let most = 2.0 * (n - 1.0) * size;
            let every = (size / over(&ingress, f64::min, f64::INFINITY))
                .max(size / over(&egress, f64::min, f64::INFINITY));
            let sum = |side: &[f64]| c.npus.iter().map(|&v| side[v as usize]).sum::<f64>();
            let together = (most / sum(&ingress)).max(most / sum(&egress));
            every.max(together)
        }
        CollectiveKind::Broadcast => size / min_over(&mut non_root()),
        // The root pushes out everything but its own part; every other NPU takes in its part.
        CollectiveKind::Scatter => {
            ((n - 1.0) / n * size / egress[root as usize]).max(size / n / min_over(&mut non_root()))
        }
        CollectiveKind::Reduce => size / ingress[root as usize],
        CollectiveKind::Gather => (n - 1.0) / n * size / ingress[root as usize],
    };
    seconds(secs)
}

/// Minimum latency data must cover: the largest shortest-latency distance that the collective forces
/// (between all participants; from or to the root for rooted collectives).
pub fn latency_bound(topology: &Topology, c: &Collective) -> Time {
    let from_root = matches!(c.kind, CollectiveKind::Broadcast | CollectiveKind::Scatter);
    let to_root = matches!(c.kind, CollectiveKind::Reduce | CollectiveKind::Gather);
    if topology.uses_dimension_routing() && c.npus.len() as u32 == topology.npus() {
        let dims = topology.dims();
        let mut stride = 1u32;
        let mut total = Time::ZERO;
        for dim in dims {
            let coord = (c.root() / stride) % dim.size;
            let hops = match dim.kind {
                _ if dim.size == 1 => 0,
                DimKind::Ring => dim.size / 2,
                DimKind::UniRing => dim.size - 1,
                DimKind::Line if from_root || to_root => coord.max(dim.size - 1 - coord),
                DimKind::Line => dim.size - 1,
                DimKind::FullyConnected => 1,
                DimKind::Switch => 2,
            };
            total = total + Time(dim.latency.ps() * hops as u64);
            stride *= dim.size;
        }
        return total;
    }
    let sources: Vec<NodeId> = if from_root {
        vec![c.root()]
    } else {
        c.npus.clone()
    };
    let mut worst = 0u64;
    for &s in &sources {
        let dist = if to_root {
            latency_distances(topology, c.root(), true)
        } else {
            latency_distances(topology, s, false)
        };
        worst = worst.max(c.npus.iter().map(|&v| dist[v as usize]).max().unwrap_or(0));
        if to_root {
            break;
        }
    }
    Time(worst)
}

/// Shortest latency (ps) from `origin` to every node, or to `origin` from every node if `reverse`.
fn latency_distances(topology: &Topology, origin: NodeId, reverse: bool) -> Vec<u64> {
    use std::cmp::Reverse;
    let mut adjacency: Vec<Vec<(NodeId, u64)>> = vec![Vec::new(); topology.nodes() as usize];
    for link in topology.links() {
        let (from, to) = if reverse {
            (link.dst, link.src)
        } else {
            (link.src, link.dst)
        };
        adjacency[from as usize].push((to, link.latency.ps()));
    }
    let mut dist = vec![u64::MAX; topology.nodes() as usize];
    dist[origin as usize] = 0;
    let mut heap = std::collections::BinaryHeap::from([Reverse((0u64, origin))]);
    while let Some(Reverse((d, v))) = heap.pop() {
        if d > dist[v as usize] {
            continue;
        }
        for &(w, lat) in &adjacency[v as usize] {
            if d + lat < dist[w as usize] {
                dist[w as usize] = d + lat;
                heap.push(Reverse((d + lat, w)));
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    fn collective(kind: CollectiveKind, n: u32) -> Collective {
        Collective::new(kind, (0..n).collect(), 1 << 30, 1, None).unwrap()
    }

    #[test]
    fn all_to_all_pushes_each_box_half_its_data_through_its_uplinks() {
        // Two boxes of 4 NPUs (100 GB/s switch inside), each NPU with one 10 GB/s link to the
        // switch between boxes: a box sends 4 x 4 x size/8 = 2 size out through 4 x 10 GB/s.
        let t = TopologyOptions::new("dims:switch4,switch2")
            .with_links("100GB/s,10GB/s", "0ns")
            .build()
            .unwrap();
        let c = Collective::new(
            CollectiveKind::AllToAll,
            (0..8).collect(),
            1_000_000_000,
            1,
            None,
        )
        .unwrap();
        let b = bounds(&t, &c, None);
        assert_eq!(b.cut, Some(Time::from_ns(50_000_000)));
        assert_eq!(b.total(), Time::from_ns(50_000_000));
        // One switch of 8: no group holds some but not all NPUs; the per-NPU bound stands.
        let t = TopologyOptions::new("switch:8")
            .with_links("10GB/s", "0ns")
            .build()
            .unwrap();
        assert_eq!(bounds(&t, &c, None).cut, None);
    }

    #[test]
    fn all_reduce_pushes_the_whole_buffer_each_way_across_a_thin_bridge() {
        // Two fully connected groups of 4 (100 GB/s links) joined by one 1 GB/s link each way:
        // every piece crosses the bridge both ways, so 1 GiB takes at least 1.074 s.
        use crate::units::Bandwidth;
        let (fast, thin) = (Bandwidth::gb_per_sec(100.0), Bandwidth::gb_per_sec(1.0));
        let mut links = Vec::new();
        let mut link = |src, dst, bandwidth| {
            links.push(crate::topology::Link::one_way(
                src,
                dst,
                (bandwidth, Time::from_ns(1)),
            ))
        };
        for group in [0u32, 4] {
            for a in group..group + 4 {
                for b in (group..group + 4).filter(|&b| b != a) {
                    link(a, b, fast);
                }
            }
        }
        link(3, 4, thin);
        link(4, 3, thin);
        let t = Topology::from_parts("bridge".into(), 8, 0, links, Vec::new(), Vec::new()).unwrap();
        let c = collective(CollectiveKind::AllReduce, 8);
        let want = (1u64 << 30) as f64 / 1e9;
        assert!((crossing_bound(&t, &c, None) - want).abs() < 1e-9 * want);
        let cut = cut_bound(&t, &c, None).unwrap();
        assert!(cut.ps() as f64 >= want * 1e12 * (1.0 - 1e-9), "{cut}");
    }

    #[test]
    fn npu_bound_on_a_bidirectional_ring_is_half_of_the_unidirectional_one() {
        let bi = TopologyOptions::new("ring:8")
            .with_links("50GiB/s", "0ns")
            .build()
            .unwrap();
        let uni = TopologyOptions::new("uring:8")
            .with_links("50GiB/s", "0ns")
            .build()
            .unwrap();
        let c = collective(CollectiveKind::AllGather, 8);
        // 7/8 GiB over 100 GiB/s (two in-links) vs 50 GiB/s.
        assert_eq!(npu_bound(&bi, &c), Time(17_500_000_000 / 2));
        assert_eq!(npu_bound(&uni, &c), Time(17_500_000_000));
    }

    fn ns(t: Option<Time>) -> f64 {
        t.expect("a cut bound").as_ns_f64()
    }

    /// ForestColl's optima, as fractions of size / B with B = 1 GB/s and size 1 GB (1 s).
    #[test]
    fn cut_bound_matches_forestcoll_on_rings_tori_and_switch_boxes() {
        let build = |spec: &str| {
            TopologyOptions::new(spec)
                .with_links("1GB/s", "0ns")
                .build()
                .unwrap()
        };
        let gb = |kind, n| Collective::new(kind, (0..n).collect(), 1_000_000_000, 1, None).unwrap();
        let ag = |spec: &str, n| {
            ns(cut_bound(
                &build(spec),
                &gb(CollectiveKind::AllGather, n),
                None,
            ))
        };
        assert_eq!(ag("ring:8", 8), 1e9 * 7.0 / 16.0);
        assert_eq!(ag("uring:8", 8), 1e9 * 7.0 / 8.0);
        assert_eq!(ag("torus:4x4", 16), 1e9 * 15.0 / 64.0);
        assert_eq!(ag("switch:8", 8), 1e9 * 7.0 / 8.0);
        let boxes = TopologyOptions::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/configs/two_nvswitch_boxes.yml"
        ))
        .build()
        .unwrap();
        // 0.001875 s per GB of all-gather output.
        let t = ns(cut_bound(&boxes, &gb(CollectiveKind::AllGather, 16), None));
        assert!((t - 1_875_000.0).abs() < 1e-6, "{t}");
        // All-reduce on a graph file takes what is provable: the two boxes (400 GB/s into each)
        // must exchange 2(2-1)/2 GB, 2.5 ms, as cut part; every NPU has 500 GB/s and some must
        // take in 2(15/16) GB, 3.75 ms, which is the bound (the sum of the two phases here).
        let c = gb(CollectiveKind::AllReduce, 16);
        let ar = ns(cut_bound(&boxes, &c, None));
        assert!((ar - 2_500_000.0).abs() < 1e-6, "{ar}");
        assert_eq!(npu_bound(&boxes, &c), Time::from_ns(3_750_000));
    }

    /// Two fully connected quads joined by one thin link: the bottleneck is the cut between the
    /// quads (4 shards each way over 1 GB/s), far above what any single NPU's links allow.
    #[test]
    fn cut_bound_finds_a_bottleneck_that_no_single_npu_shows() {
        let mut text = String::from("npus: 8\nlinks:\n");
        for quad in [0u32, 4] {
            for a in quad..quad + 4 {
                for b in a + 1..quad + 4 {
                    text +=
                        &format!("  - {{src: {a}, dst: {b}, bandwidth: 100GB/s, latency: 1us}}\n");
                }
            }
        }
        text += "  - {src: 3, dst: 4, bandwidth: 1GB/s, latency: 1us}\n";
        let path =
            std::env::temp_dir().join(format!("collsim-barbell-{}.yaml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let t = TopologyOptions::new(path.to_str().unwrap())
            .build()
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        let c = Collective::new(
            CollectiveKind::AllGather,
            (0..8).collect(),
            8_000_000_000,
            1,
            None,
        )
        .unwrap();
        // size/n = 1 GB per shard, 4 shards over 1 GB/s.
        assert_eq!(ns(cut_bound(&t, &c, None)), 4e9);
        assert!(npu_bound(&t, &c).as_ns_f64() < 1e9);
        let b = bounds(&t, &c, None);
        assert_eq!(b.total(), Time::from_ns(4_000_000_000) + b.last_hop);
        // Broadcast from 0: everything crosses the thin link.
        let bc = Collective::new(
            CollectiveKind::Broadcast,
            (0..8).collect(),
            1_000_000_000,
            1,
            None,
        )
        .unwrap();
        assert_eq!(ns(cut_bound(&t, &bc, None)), 1e9);
    }

    /// The `bound` command's progress lines count the cut bound's max-flows: at least one per
    /// sink class and phase, and the counted bounds are the bounds.
    #[test]
    fn counting_max_flows_changes_no_bound() {
        let t = TopologyOptions::new("mesh:4x6").build().unwrap();
        let c = collective(CollectiveKind::AllReduce, 24);
        let steps = crate::report::Steps::default();
        let counted = bounds_counted(&t, &c, None, Some(&steps));
        assert_eq!(counted.cut, bounds(&t, &c, None).cut);
        let classes = symmetry_representatives(&t).len() as u64;
        assert!(classes > 1 && classes < 24, "{classes}");
        assert!(
            steps.done() >= 2 * classes,
            "{} < {}",
            steps.done(),
            2 * classes
        );
    }

    #[test]
    fn the_budget_leaves_expensive_cut_bounds_out() {
        let t = TopologyOptions::new("mesh:8x8").build().unwrap();
        let c = collective(CollectiveKind::AllGather, 64);
        assert!(cut_bound(&t, &c, Some(10)).is_none());
        assert!(cut_bound(&t, &c, None).is_some());
        assert!(cut_bound(&t, &collective(CollectiveKind::AllToAll, 64), None).is_none());
    }

    #[test]
    fn latency_bound_is_the_diameter_in_closed_form_and_by_search() {
        let ring = TopologyOptions::new("ring:8")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let c = collective(CollectiveKind::AllGather, 8);
        assert_eq!(latency_bound(&ring, &c), Time::from_ns(4_000));
        let mut faulty = TopologyOptions::new("mesh:3x3")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        assert_eq!(
            latency_bound(&faulty, &collective(CollectiveKind::AllGather, 9)),
            Time::from_ns(4_000)
        );
        faulty.remove(&[], &[(0, 1), (1, 0)]).unwrap();
        // Corner 0 to corner 2 now detours: 0-3-4-1-2 is 4 hops, the diameter is still 4 (0 -> 8).
        let c9 = Collective::new(
            CollectiveKind::AllGather,
            faulty.active_npus(),
            1 << 20,
            1,
            None,
        )
        .unwrap();
        assert_eq!(latency_bound(&faulty, &c9), Time::from_ns(4_000));
    }
}
