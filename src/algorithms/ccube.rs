//! C-Cube (Cho et al.), the baseline of the TACOS paper's Fig. 17(b): all-reduce on a DGX-1's
//! hybrid cube-mesh as two binary trees laid out by hand on its NVLinks, sharing no link, each
//! reducing half of the data to its root and broadcasting it back, the two run concurrently and
//! each pipelined over the chunks (a chunk's broadcast follows its reduction while the next chunk
//! is reduced: C-Cube's chaining). Two links of the cube-mesh stay unused, as the TACOS paper
//! describes C-Cube disabling links so that the two tree routes never contend.
//!
//! The C-Cube paper's own layout (its Fig. 10(c)) is not in our sources; we chose two
//! edge-disjoint spanning binary trees of height 3, rooted at GPUs 0 and 3:
//! 0 -> {1, 4}, 1 -> {2, 3}, 4 -> {5, 6}, 6 -> 7 and 3 -> {0, 7}, 0 -> 2, 7 -> {4, 5}, 2 -> 6,
//! 5 -> 1; links 2-3 and 5-6 carry nothing.

use super::builder::Builder;
use super::dbt::{broadcast_down, reduce_up, Tree};
use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Schedule;
use crate::topology::Topology;
use crate::Error;

/// A tree over GPU ranks 0..8: its root and, per inner node, its children.
type Layout = (usize, [(usize, &'static [usize]); 5]);

/// The two trees.
const TREES: [Layout; 2] = [
    (
        0,
        [
            (0, &[1, 4]),
            (1, &[2, 3]),
            (4, &[5, 6]),
            (6, &[7]),
            (2, &[]),
        ],
    ),
    (
        3,
        [(3, &[0, 7]), (0, &[2]), (7, &[4, 5]), (2, &[6]), (5, &[1])],
    ),
];

/// C-Cube's all-reduce of `c` over the eight GPUs of a DGX-1 (`dgx1`).
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(Algorithm::CCube.refusal(c.kind));
    }
    let trees: Vec<Tree> = TREES
        .iter()
        .map(|(root, edges)| {
            let mut children = vec![Vec::new(); 8];
            for (parent, kids) in edges {
                children[*parent].extend_from_slice(kids);
            }
            Tree {
                root: *root,
                children,
            }
        })
        .collect();
    let refuse = |why: String| {
        Error::input(format!(
            "c-cube lays its two trees on the links of a DGX-1's hybrid cube-mesh (`dgx1`, \
             eight GPUs): {why}"
        ))
    };
    if c.ranks() != 8 {
        return Err(refuse(format!("the collective has {} NPUs", c.ranks())));
    }
    for tree in &trees {
        for (parent, kids) in tree.children.iter().enumerate() {
            for &kid in kids {
                let (a, b) = (c.npus[parent], c.npus[kid]);
                if topology.link_between(a, b).is_none() || topology.link_between(b, a).is_none() {
                    return Err(refuse(format!(
                        "{} has no link between NPUs {a} and {b}",
                        topology.name()
                    )));
                }
            }
        }
    }
    // Each tree carries half of every chunk.
    let refined = Collective {
        chunks: c.chunks * 2,
        ..c.clone()
    };
    let mut b = Builder::new(&refined)?;
    let ranks: Vec<u32> = (0..8).collect();
    let half = refined.piece_count() / 2;
    let len = half / c.chunks;
    for s in 0..c.chunks {
        for (which, tree) in trees.iter().enumerate() {
            let lo = which as u32 * half + s * len;
            reduce_up(&mut b, tree, &ranks, (lo, lo + len));
            broadcast_down(&mut b, tree, &ranks, (lo, lo + len));
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    /// Both trees span the eight GPUs with at most two children each and share no link; two
    /// links of the cube-mesh are left over.
    #[test]
    fn two_binary_trees_share_no_link() {
        let mut used = std::collections::HashSet::new();
        for (root, edges) in TREES {
            let mut reached = vec![root];
            for (parent, kids) in edges {
                assert!(kids.len() <= 2);
                for &kid in kids {
                    assert!(used.insert((parent.min(kid), parent.max(kid))));
                    reached.push(kid);
                }
            }
            reached.sort_unstable();
            assert_eq!(reached, (0..8).collect::<Vec<_>>());
        }
        let t = TopologyOptions::new("dgx1").build().unwrap();
        assert_eq!(t.links().len() / 2 - used.len(), 2);
    }

    /// With links of one speed, each tree edge carries half of the data up and half down, in
    /// opposite directions: at many chunks the all-reduce approaches size / (2 x link speed)
    /// (64 chunks through 6 hops of fill: (64 + 5) / 64 of it).
    #[test]
    fn validates_and_approaches_half_the_data_over_one_link() {
        let (t, c) = crate::algorithms::testing::dgx1_all_reduce(64);
        let finish = crate::algorithms::testing::validated_ps(&t, &generate(&t, &c).unwrap());
        let ideal = (1u64 << 30) as f64 / 2.0 / 25e9 * 1e12;
        let ratio = finish / ideal;
        assert!((1.0..1.1).contains(&ratio), "{ratio}");
        let ring = TopologyOptions::new("ring:8").build().unwrap();
        let c8 = Collective::new(
            CollectiveKind::AllReduce,
            ring.active_npus(),
            1 << 20,
            1,
            None,
        )
        .unwrap();
        assert!(generate(&ring, &c8)
            .unwrap_err()
            .to_string()
            .contains("no link"));
    }
}
