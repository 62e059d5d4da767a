//! MultiTree (Huang et al., ISCA'21), the spanning-tree synthesizer the TACOS paper compares
//! against (Fig. 17(a)): one height-balanced spanning tree from every NPU, built together in time
//! steps. At each step the trees take turns, each adding one edge `u -> v` per turn (`u` joined
//! at an earlier step, `v` not yet in the tree, the link free in this step), until no tree can
//! grow in the step; a link carries at most one tree's data per step, and each tree grows
//! breadth-first, so its height is the step count. All-gather sends each NPU's whole block down
//! its tree, edge by edge in step order; reduce-scatter runs the trees of the transposed network
//! backwards with reductions; all-reduce is the two in turn. MultiTree schedules whole blocks, not
//! chunks that overlap (the TACOS paper's point against it), so `--chunks` does not pipeline
//! here: every transfer carries a rank's whole block.
//!
//! Where the papers are short we chose: trees take turns in a rotating order (the tree that went
//! first in one step goes last-but-one in the next), a tree's candidate edges are tried from its
//! earliest-joined nodes and each node's neighbours in id order, and sends start when their data
//! has arrived rather than on a global step clock (on links of one speed the two agree).

use super::builder::Builder;
use super::Algorithm;
use crate::collective::Collective;
use crate::schedule::{Op, Schedule};
use crate::topology::Topology;
use crate::Error;

/// One tree edge: tree `root` reaches `child` from `parent` at step `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Edge {
    root: u32,
    parent: u32,
    child: u32,
    step: u32,
}

/// The MultiTree schedule of `c` on `topology`'s NPU-to-NPU links.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if !Algorithm::MultiTree.supports(c.kind) {
        return Err(Algorithm::MultiTree.refusal(c.kind));
    }
    let n = c.ranks() as usize;
    let rank_of = c.ranks_by_npu();
    // Neighbours by rank over links between participants, both ways.
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut into: Vec<Vec<u32>> = vec![Vec::new(); n];
    for link in topology.links() {
        if let (Some(&a), Some(&b)) = (rank_of.get(&link.src), rank_of.get(&link.dst)) {
            out[a as usize].push(b);
            into[b as usize].push(a);
        }
    }
    for list in out.iter_mut().chain(into.iter_mut()) {
        list.sort_unstable();
        list.dedup();
    }
    let unreachable = || {
        Error::input(format!(
            "multitree builds its trees over links between the participating NPUs, and on {} \
             they do not connect them all (switches or failed links in the way)",
            topology.name()
        ))
    };
    let mut b = Builder::new(c)?;
    let block = |r: u32| c.rank_block(r);
    if c.kind.has_reduce_scatter() {
        // Trees spreading on the transposed network, run backwards: a child reduces its copy of
        // the root's block into its parent's, the last step first.
        let mut edges = grow_trees(&into, n).ok_or_else(unreachable)?;
        edges.sort_by_key(|e| std::cmp::Reverse(e.step));
        for e in &edges {
            b.send(e.child, e.parent, block(e.root), Op::Reduce);
        }
    }
    if c.kind.has_all_gather() {
        let edges = grow_trees(&out, n).ok_or_else(unreachable)?;
        for e in &edges {
            b.send(e.parent, e.child, block(e.root), Op::Copy);
        }
    }
    Ok(b.finish())
}

/// Grows a spanning tree from every node over `out` (node -> neighbours), all at once in time
/// steps; the edges in step order. None when some tree cannot span.
fn grow_trees(out: &[Vec<u32>], n: usize) -> Option<Vec<Edge>> {
    // Per tree: the step each node joined (u32::MAX: not yet) and its nodes in joining order.
    let mut joined = vec![vec![u32::MAX; n]; n];
    let mut members: Vec<Vec<u32>> = (0..n as u32).map(|r| vec![r]).collect();
    for (r, j) in joined.iter_mut().enumerate() {
        j[r] = 0;
    }
    // Per node, the step its out-link to each neighbour was last used (index as in `out`).
    let mut used: Vec<Vec<u32>> = out.iter().map(|l| vec![0; l.len()]).collect();
    let mut edges = Vec::with_capacity(n * n.saturating_sub(1));
    let mut step = 0;
    while members.iter().any(|m| m.len() < n) {
        step += 1;
        let before = edges.len();
        let first = (step as usize - 1) % n;
        loop {
            let mut grew = false;
            for k in 0..n {
                let root = (first + k) % n;
                if members[root].len() == n {
                    continue;
                }
                if let Some(edge) = next_edge(out, &mut used, &joined[root], &members[root], step) {
                    joined[root][edge.1 as usize] = step;
                    members[root].push(edge.1);
                    edges.push(Edge {
                        root: root as u32,
                        parent: edge.0,
                        child: edge.1,
                        step,
                    });
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        if edges.len() == before {
            return None;
        }
    }
    Some(edges)
}

/// The first free edge of a tree in step `step`: from a node that joined before it, in joining
/// order, to its first neighbour outside the tree whose link is unused in this step; marks the
/// link used.
fn next_edge(
    out: &[Vec<u32>],
    used: &mut [Vec<u32>],
    joined: &[u32],
    members: &[u32],
    step: u32,
) -> Option<(u32, u32)> {
    for &u in members {
        if joined[u as usize] >= step {
            break;
        }
        for (i, &v) in out[u as usize].iter().enumerate() {
            if joined[v as usize] == u32::MAX && used[u as usize][i] != step {
                used[u as usize][i] = step;
                return Some((u, v));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::CollectiveKind;
    use crate::schedule::validate;
    use crate::sim::{simulate, SimOptions};
    use crate::topology::TopologyOptions;

    fn ring_out(n: u32) -> Vec<Vec<u32>> {
        (0..n).map(|i| vec![(i + n - 1) % n, (i + 1) % n]).collect()
    }

    /// On a bidirectional ring every tree is two paths out of its root, one step per hop: n/2
    /// steps, every link busy in every step but the last.
    #[test]
    fn ring_trees_are_two_paths_in_half_the_ring() {
        let n = 8;
        let edges = grow_trees(&ring_out(n), n as usize).unwrap();
        assert_eq!(edges.len(), (n * (n - 1)) as usize);
        assert_eq!(edges.iter().map(|e| e.step).max(), Some(n / 2));
        for step in 1..=n / 2 {
            let mut links: Vec<(u32, u32)> = edges
                .iter()
                .filter(|e| e.step == step)
                .map(|e| (e.parent, e.child))
                .collect();
            let all = links.len();
            links.sort_unstable();
            links.dedup();
            assert_eq!(links.len(), all, "a link used twice in step {step}");
        }
    }

    /// Each tree spans once, each node joins from a node already in it at an earlier step.
    #[test]
    fn trees_span_and_grow_from_earlier_steps() {
        let t = TopologyOptions::new("mesh:4x4").build().unwrap();
        let c =
            Collective::new(CollectiveKind::AllGather, t.active_npus(), 1 << 20, 1, None).unwrap();
        let rank_of = c.ranks_by_npu();
        let mut out = vec![Vec::new(); 16];
        for l in t.links() {
            out[rank_of[&l.src] as usize].push(rank_of[&l.dst]);
        }
        let edges = grow_trees(&out, 16).unwrap();
        for root in 0..16 {
            let mut when = [u32::MAX; 16];
            when[root as usize] = 0;
            for e in edges.iter().filter(|e| e.root == root) {
                assert!(when[e.parent as usize] < e.step);
                assert_eq!(when[e.child as usize], u32::MAX);
                when[e.child as usize] = e.step;
            }
            assert!(when.iter().all(|&w| w != u32::MAX));
        }
    }

    /// All-gather on a bidirectional ring of equal links: n/2 steps of one block each.
    #[test]
    fn ring_all_gather_takes_half_the_ring_in_block_steps() {
        let t = TopologyOptions::new("ring:8")
            .with_links("10GB/s", "1us")
            .build()
            .unwrap();
        let c = Collective::new(
            CollectiveKind::AllGather,
            t.active_npus(),
            80_000_000,
            1,
            None,
        )
        .unwrap();
        let s = generate(&t, &c).unwrap();
        validate(&s, &c, 1).unwrap();
        let finish = simulate(&t, &s, &SimOptions::default(), &mut ())
            .unwrap()
            .finish;
        // 10 MB a block at 10 GB/s: 1 ms and 1 us a step, 4 steps.
        assert_eq!(finish.ps(), 4 * (1_000_000_000 + 1_000_000));
    }

    #[test]
    fn all_reduce_and_reduce_scatter_validate_on_tori_and_meshes() {
        for spec in ["torus:4x4", "mesh:3x5", "hypercube:4"] {
            let t = TopologyOptions::new(spec).build().unwrap();
            for kind in [CollectiveKind::AllReduce, CollectiveKind::ReduceScatter] {
                let c = Collective::new(kind, t.active_npus(), 1 << 24, 1, None).unwrap();
                validate(&generate(&t, &c).unwrap(), &c, 1).unwrap();
            }
        }
    }

    #[test]
    fn switches_in_the_way_are_refused() {
        let t = TopologyOptions::new("switch:8").build().unwrap();
        let c =
            Collective::new(CollectiveKind::AllGather, t.active_npus(), 1 << 20, 1, None).unwrap();
        let err = generate(&t, &c).unwrap_err().to_string();
        assert!(
            err.contains("multitree") && err.contains("switch:8"),
            "{err}"
        );
    }
}
