//! All-reduce by reduce-then-broadcast over spanning trees, on networks whose every node takes
//! part (no switches, no bystanders).
//!
//! Reduce-scatter then all-gather makes every NPU take in `2(n-1)/n` of the buffer, so the NPU
//! with the fewest links sets the pace (a mesh corner: half the links of the middle). Reducing
//! each part of the buffer up a spanning tree to its root and broadcasting it back down the same
//! tree makes every NPU take in and give out each part once, and loads every tree edge once each
//! way. So with `h(a, b) = min(c(a, b), c(b, a))` per neighbour pair, `K` trees on capacities
//! `h m` (every edge in at most `m h` of them) all-reduce in `m size / K` per capacity unit.
//!
//! `K` edge-disjoint spanning trees exist iff every partition `P` of the nodes has at least
//! `K (|P| - 1)` capacity across it (Nash-Williams, Tutte), so the best `K / m` is at most
//! `sum h / (n - 1)`, tried first; on symmetric capacities that is exactly the all-reduce bound
//! `2(n-1) size / sum c` (every piece needs `2(n-1)` transfers). They are found as arborescences
//! from a root `r` on an orientation of the edges in which every node set without `r` has `K`
//! coming in (Nash-Williams' orientation theorem; Edmonds then packs them, [`pack`]). The
//! orientation comes from its in-degrees `d`: it exists iff `d(X)` is at least `i(X) + K` for
//! node sets `X` without `r` and at least `i(X)` for the rest (`i`: capacity inside `X`), with
//! `d(V)` the whole capacity. Starting from large `d`, each node's `d(v)` is lowered by its slack
//! (a min cut of a flow network of edges and nodes); the `d` meeting these constraints are an
//! upper set of a contra-polymatroid, so the minimal one has the least sum, and the partition
//! condition holds iff that sum is the whole capacity.

use std::collections::HashMap;

use super::{pack, rate::gcd, tree_of, Forest, Network, Ratio, MAX_TREES};
use crate::flow::{ArcId, Cap, FlowNetwork, INFINITE};
use crate::topology::{NodeId, Topology};
use crate::Error;

/// The optimal reduce-then-broadcast trees of `participants` on `topology` (a [`Forest`] with
/// `reduce_broadcast` set, `U = m`), or None when some node of the network does not take part
/// (switches, bystanders), no tree spans them, or their all-reduce would take at least the
/// seconds per byte `beats` gives (asked only once the trees' rate is known; nothing is packed
/// then).
pub fn plan(
    topology: &Topology,
    participants: &[NodeId],
    beats: impl FnOnce() -> Result<Option<f64>, Error>,
) -> Result<Option<Forest>, Error> {
    let n = participants.len();
    if n < 2 || n != topology.nodes() as usize {
        return Ok(None);
    }
    let index: HashMap<NodeId, u32> = participants
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, i as u32))
        .collect();
    let net = Network::new(topology, false);
    let mut capacity: HashMap<(u32, u32), u64> = HashMap::new();
    for &(a, b, c) in &net.arcs {
        *capacity.entry((index[&a], index[&b])).or_default() += c;
    }
    let mut edges: Vec<Edge> = capacity
        .iter()
        .filter(|(&(a, b), _)| a < b)
        .filter_map(|(&(a, b), &c)| {
            let h = c.min(capacity.get(&(b, a)).copied().unwrap_or(0));
            (h > 0).then_some((a, b, h))
        })
        .collect();
    edges.sort_unstable();
    // The root: the node with the most capacity, where trees are shallowest to grow from.
    let mut degree = vec![0u64; n];
    for &(a, b, h) in &edges {
        degree[a as usize] += h;
        degree[b as usize] += h;
    }
    let root = (0..n)
        .max_by_key(|&v| (degree[v], std::cmp::Reverse(v)))
        .unwrap_or(0) as u32;
    let Some((k, multiplier, in_degrees)) = best_rate(n, &edges, root) else {
        return Ok(None);
    };
    let per_byte = multiplier as f64 / (k as f64 * net.unit_bps);
    if beats()?.is_some_and(|limit| per_byte >= limit) {
        return Ok(None);
    }
    let arcs = orient(n, &edges, multiplier, &in_degrees);
    let classes = pack::pack(n, &arcs, &[(root, k)])?;
    debug_assert_eq!(pack::verify(n, &arcs, &classes), Ok(()));
    let trees = classes
        .into_iter()
        .map(|class| {
            tree_of(class, participants, |x, y, weight| {
                vec![(
                    vec![participants[x as usize], participants[y as usize]],
                    weight,
                )]
            })
        })
        .collect();
    Ok(Some(Forest {
        participants: participants.to_vec(),
        roots: vec![participants[root as usize]],
        k,
        multiplier: Ratio::new(multiplier, 1),
        optimal_rate: Ratio::new(k, multiplier),
        unit_bps: net.unit_bps,
        reversed: false,
        rounded: net.rounded,
        reduce_broadcast: true,
        trees,
    }))
}

/// An undirected edge `(a, b, h)`, `a < b`, with `h` capacity units each way.
type Edge = (u32, u32, u64);

/// The largest `K / m` (at most [`MAX_TREES`] trees) for which `K` spanning trees fit `m` times
/// the capacities, with in-degrees of an orientation that carries them from `root`.
fn best_rate(n: usize, edges: &[Edge], root: u32) -> Option<(u64, u64, Vec<u64>)> {
    let reduced = |k: u64, m: u64| {
        let g = gcd(k, m).max(1);
        (k / g, m / g)
    };
    let total: u64 = edges.iter().map(|e| e.2).sum();
    let parts = n as u64 - 1;
    let (k, m) = reduced(total, parts);
    if k <= MAX_TREES {
        if let Some(degrees) = in_degrees(n, edges, root, k, m) {
            return Some((k, m, degrees));
        }
    }
    // Below the singleton ratio (or too many trees there): search K at a fine fixed m
    // (feasibility only grows as K falls). Resolution: one part in about 4096 of the ratio.
    let m = parts * 4096u64.div_ceil(total.max(1));
    let (mut lo, mut hi) = (0u64, total * m / parts);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if in_degrees(n, edges, root, mid, m).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let (mut k, mut m) = reduced(lo, m);
    if k > MAX_TREES {
        let fewer = (m * MAX_TREES / k).max(1);
        (k, m) = reduced(k * fewer / m, fewer);
    }
    if k == 0 {
        return None;
    }
    let degrees = in_degrees(n, edges, root, k, m)?;
    Some((k, m, degrees))
}

/// In-degrees of an orientation of the edges (capacities `h m`) in which every node set without
/// `root` has at least `k` coming in, or None when there is none.
fn in_degrees(n: usize, edges: &[Edge], root: u32, k: u64, m: u64) -> Option<Vec<u64>> {
    // Min cuts of: source -> edge (its capacity), edge -> both ends (uncuttable), node -> sink
    // (its in-degree). A cut with node set X on the source side costs d(X) + total - i(X).
    let e = edges.len() as u32;
    let mut net = FlowNetwork::new(edges.len() + n + 2);
    let (source, sink) = (e + n as u32, e + n as u32 + 1);
    let mut total = 0u64;
    let mut touching = vec![0u64; n];
    for (i, &(a, b, h)) in edges.iter().enumerate() {
        let c = h * m;
        net.add_arc(source, i as u32, c as Cap);
        net.add_arc(i as u32, e + a, INFINITE);
        net.add_arc(i as u32, e + b, INFINITE);
        total += c;
        touching[a as usize] += c;
        touching[b as usize] += c;
    }
    let mut degrees: Vec<u64> = touching.iter().map(|&t| t + k).collect();
    let outs: Vec<ArcId> = (0..n as u32)
        .map(|v| net.add_arc(e + v, sink, degrees[v as usize] as Cap))
        .collect();
    for v in 0..n as u32 {
        let d = degrees[v as usize];
        // Sets holding v and the root: d(X) - i(X) >= 0.
        let with_root = if v == root {
            vec![source, e + v]
        } else {
            vec![source, e + v, e + root]
        };
        let mut slack = (net.max_flow(&with_root, &[sink], (total + d) as Cap) as u64)
            .saturating_sub(total)
            .min(d);
        // Sets holding v but not the root: d(X) - i(X) >= k.
        if v != root && slack > 0 {
            let cut = net.max_flow(&[source, e + v], &[sink, e + root], (total + k + d) as Cap);
            slack = slack.min((cut as u64).saturating_sub(total + k));
        }
        degrees[v as usize] = d - slack;
        net.set_capacity(outs[v as usize], degrees[v as usize] as Cap);
    }
    let least: u64 = degrees.iter().sum();
    if least > total {
        return None;
    }
    // Raising in-degrees keeps every constraint; the whole capacity must come in somewhere.
    degrees[root as usize] += total - least;
    Some(degrees)
}

/// Orients the edges (capacities `h m`, split between the two ways) so that every node takes in
/// exactly `degrees`; returns the arcs `(tail, head, capacity)`.
fn orient(n: usize, edges: &[Edge], m: u64, degrees: &[u64]) -> Vec<(u32, u32, u64)> {
    let e = edges.len() as u32;
    let mut net = FlowNetwork::new(edges.len() + n + 2);
    let (source, sink) = (e + n as u32, e + n as u32 + 1);
    let mut ends = Vec::with_capacity(edges.len());
    let mut total = 0;
    for (i, &(a, b, h)) in edges.iter().enumerate() {
        let c = (h * m) as Cap;
        net.add_arc(source, i as u32, c);
        ends.push((
            net.add_arc(i as u32, e + a, c),
            net.add_arc(i as u32, e + b, c),
        ));
        total += c;
    }
    for (v, &d) in degrees.iter().enumerate() {
        net.add_arc(e + v as u32, sink, d as Cap);
    }
    let carried = net.max_flow(&[source], &[sink], INFINITE);
    assert_eq!(
        carried, total,
        "in-degrees that pass the cut test are orientable"
    );
    let mut arcs = Vec::new();
    for (&(a, b, _), &(into_a, into_b)) in edges.iter().zip(&ends) {
        let (to_a, to_b) = (net.flow(into_a) as u64, net.flow(into_b) as u64);
        if to_a > 0 {
            arcs.push((b, a, to_a));
        }
        if to_b > 0 {
            arcs.push((a, b, to_b));
        }
    }
    arcs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(spec: &str) -> Topology {
        crate::topology::parse_inline(
            spec,
            &[crate::units::Bandwidth::gb_per_sec(50.0)],
            &[crate::units::Time::from_ns(500)],
        )
        .unwrap()
    }

    /// Checks that every class spans the nodes from its root and that no edge, either way, is in
    /// more than `m` times its capacity of trees; returns the most loaded edge's trees.
    fn check(t: &Topology, plan: &Forest) -> u64 {
        let mut load: HashMap<(NodeId, NodeId), u64> = HashMap::new();
        for tree in &plan.trees {
            let mut reached = vec![false; t.nodes() as usize];
            reached[tree.root as usize] = true;
            for e in &tree.edges {
                assert!(reached[e.src as usize] && !reached[e.dst as usize]);
                reached[e.dst as usize] = true;
                *load
                    .entry((e.src.min(e.dst), e.src.max(e.dst)))
                    .or_default() += tree.weight;
            }
            assert!(reached.iter().all(|&r| r), "a tree misses a node");
        }
        assert_eq!(plan.trees.iter().map(|t| t.weight).sum::<u64>(), plan.k);
        let net = Network::new(t, false);
        for (&(a, b), &l) in &load {
            let cap = |x, y| {
                net.arcs
                    .iter()
                    .filter(|arc| arc.0 == x && arc.1 == y)
                    .map(|arc| arc.2)
                    .sum::<u64>()
            };
            let m = plan.multiplier.num / plan.multiplier.den;
            assert!(l <= cap(a, b).min(cap(b, a)) * m, "{a}-{b} carries {l}");
        }
        load.values().copied().max().unwrap_or(0)
    }

    /// On a mesh the corners have half the links of the middle, and the trees reach the bound
    /// `2(n-1) size / sum c`: 8x8 at 50 GB/s, 2 x 63 / (224 x 50 GB/s) per byte.
    #[test]
    fn a_mesh_all_reduces_at_the_transfer_count_bound() {
        let t = topology("mesh:8x8");
        let plan = plan(&t, &t.active_npus(), || Ok(None)).unwrap().unwrap();
        let expected = 2.0 * 63.0 / (224.0 * 50e9);
        assert!((plan.seconds_for(1.0) - expected).abs() < 1e-9 * expected);
        check(&t, &plan);
    }

    /// Two 4-cliques joined by one edge: every tree must cross the bridge, so one tree per bridge
    /// capacity, below the singleton ratio `13 / 7` (found by the search).
    #[test]
    fn a_bridge_limits_the_trees_to_its_capacity() {
        let mut text = String::from("npus: 8\nlinks:\n");
        let mut link = |a: u32, b: u32| {
            text.push_str(&format!(
                "  - {{src: {a}, dst: {b}, bandwidth: 50GB/s, latency: 500ns}}\n"
            ))
        };
        for base in [0, 4] {
            for a in 0..4 {
                for b in a + 1..4 {
                    link(base + a, base + b);
                }
            }
        }
        link(3, 4);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bridge.yml");
        std::fs::write(&path, text).unwrap();
        let t = crate::topology::load_topology_file(&path).unwrap();
        let plan = plan(&t, &t.active_npus(), || Ok(None)).unwrap().unwrap();
        assert!((plan.seconds_for(1.0) - 1.0 / 50e9).abs() < 1e-3 / 50e9);
        assert_eq!(check(&t, &plan), plan.multiplier.num / plan.multiplier.den);
    }

    /// Switches cannot reduce, so networks with them are left to reduce-scatter + all-gather.
    #[test]
    fn a_switch_is_refused() {
        let t = topology("switch:8");
        assert!(plan(&t, &t.active_npus(), || Ok(None)).unwrap().is_none());
    }
}
