//! NCCL's tree all-reduce for boxes of GPUs: a double binary tree across the boxes and a chain
//! inside each box. Channels `c` and `c + G` (two per local index, as NCCL duplicates its tree
//! channels) chain the box's G GPUs from GPU `c`, their head, which joins the trees across boxes
//! on its own NIC: the first channel NCCL's binary tree over the boxes, the second its mirror (or
//! shift), NCCL's double binary tree, so a head's NIC is an inner node in one tree and a leaf in
//! the other. Each channel reduces its part of the
//! buffer up its chains and tree to the root box's head, then broadcasts it back down, pipelined
//! over `--chunks` segments: few steps (2 (log2 boxes + box size)) where the ring needs 2 (n - 1),
//! so it wins on small messages and loses on large ones, whose bytes cross the tree's inner NICs
//! twice.

use super::boxes::equal_boxes;
use super::builder::{part, Builder};
use super::dbt::{broadcast_down, reduce_up, Tree};
use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Schedule;
use crate::topology::Topology;
use crate::Error;

/// NCCL's tree all-reduce of `c`.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(Algorithm::NcclTree.refusal(c.kind));
    }
    let boxes = equal_boxes(topology, c, Algorithm::NcclTree)?;
    let g = boxes[0].len() as u32;
    // NCCL duplicates its tree channels: channel `ch` and `ch + g` share head `ch`, the first on
    // one tree, the second on the other, so every head's NIC runs both.
    let channels = 2 * g;
    let refined = Collective {
        chunks: c.chunks * channels,
        ..c.clone()
    };
    let mut b = Builder::new(&refined)?;
    let total = refined.piece_count();
    let ranks: Vec<u32> = (0..c.ranks()).collect();
    let trees: Vec<Tree> = (0..channels)
        .map(|ch| {
            channel_tree(
                &boxes,
                &rotation((ch % g) as usize, g as usize),
                ch >= g,
                c.ranks(),
            )
        })
        .collect();
    for s in 0..c.chunks {
        for (ch, t) in trees.iter().enumerate() {
            reduce_up(
                &mut b,
                t,
                &ranks,
                part(0, total, channels, ch as u32, c.chunks, s),
            );
        }
    }
    for s in 0..c.chunks {
        for (ch, t) in trees.iter().enumerate() {
            broadcast_down(
                &mut b,
                t,
                &ranks,
                part(0, total, channels, ch as u32, c.chunks, s),
            );
        }
    }
    Ok(b.finish())
}

/// One of NCCL's double binary tree's two trees over `boxes` boxes (`ncclGetDtree`,
/// src/graph/trees.cc), as box indices: the first ([`btree`]), or (`flipped`) the second, the
/// first mirrored (an even count) or shifted by one box (odd), so that a box inner in one is a
/// leaf in the other.
pub(crate) fn boxes_tree(boxes: usize, flipped: bool) -> Tree {
    let across = btree(boxes);
    let box_at = |p: usize| match (flipped, boxes % 2) {
        (false, _) => p,
        (true, 0) => boxes - 1 - p,
        (true, _) => (p + 1) % boxes,
    };
    let mut children = vec![Vec::new(); boxes];
    for (p, kids) in across.children.iter().enumerate() {
        children[box_at(p)].extend(kids.iter().map(|&k| box_at(k)));
    }
    Tree {
        root: box_at(across.root),
        children,
    }
}

/// NCCL's binary tree over positions `0..len` (`ncclGetBtree`): position 0 is the root, with
/// one child; every other position's parent clears its lowest set bit and sets the next one up
/// (or only clears it, past the end). The odd positions are the leaves.
fn btree(len: usize) -> Tree {
    let mut children = vec![Vec::new(); len];
    for r in 1..len {
        let bit = r & r.wrapping_neg();
        let up = match (r ^ bit) | (bit << 1) {
            up if up < len => up,
            _ => r ^ bit,
        };
        children[up].push(r);
    }
    Tree { root: 0, children }
}

/// The chain of a box's `g` GPUs (local indices) from GPU `head` in rotation: head, head + 1, ...
pub(crate) fn rotation(head: usize, g: usize) -> Vec<usize> {
    (0..g).map(|k| (head + k) % g).collect()
}

/// A channel's tree over all `n` ranks: each box a chain in the local order `chain` (its head
/// first), the chains' heads joined by a binary tree over the boxes ([`boxes_tree`], `flipped`
/// or not).
pub(crate) fn channel_tree(boxes: &[Vec<u32>], chain: &[usize], flipped: bool, n: u32) -> Tree {
    let mut children = vec![Vec::new(); n as usize];
    let head = |b: usize| boxes[b][chain[0]] as usize;
    for gpus in boxes {
        for pair in chain.windows(2) {
            children[gpus[pair[0]] as usize].push(gpus[pair[1]] as usize);
        }
    }
    let across = boxes_tree(boxes.len(), flipped);
    for (p, kids) in across.children.iter().enumerate() {
        for &k in kids {
            children[head(p)].push(head(k));
        }
    }
    Tree {
        root: head(across.root),
        children,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL's own picture of its double binary tree over 12 ranks (src/graph/trees.cc): 0 -> 8,
    /// 8 -> 4 and 10, 4 -> 2 and 6, 10 -> 9 and 11, the odd ranks leaves; the second tree is its
    /// mirror (position p at box 11 - p), rooted at 11 with child 3. No box has two children in
    /// both trees.
    #[test]
    fn boxes_trees_are_nccls_double_binary_tree() {
        let t = boxes_tree(12, false);
        assert_eq!(t.root, 0);
        assert_eq!(t.children[0], vec![8]);
        assert_eq!(t.children[8], vec![4, 10]);
        assert_eq!(t.children[4], vec![2, 6]);
        assert_eq!(t.children[10], vec![9, 11]);
        assert!((1..12).step_by(2).all(|p| t.children[p].is_empty()));
        let m = boxes_tree(12, true);
        assert_eq!((m.root, m.children[11].clone()), (11, vec![3]));
        for boxes in [3, 4, 5, 8, 12] {
            let (a, b) = (boxes_tree(boxes, false), boxes_tree(boxes, true));
            let inner = |t: &Tree, x: usize| t.children[x].len() == 2;
            assert!(
                (0..boxes).all(|x| !(inner(&a, x) && inner(&b, x))),
                "{boxes}"
            );
        }
    }

    /// Every rank hangs in every channel's tree exactly once, and the heads of the two kinds of
    /// channel are inner tree nodes in different boxes where the trees allow.
    #[test]
    fn channel_trees_span_every_rank() {
        let boxes: Vec<Vec<u32>> = (0..4).map(|b| (b * 4..(b + 1) * 4).collect()).collect();
        for ch in 0..4 {
            let t = channel_tree(&boxes, &rotation(ch as usize, 4), ch % 2 == 1, 16);
            let mut parent = vec![None; 16];
            for (p, kids) in t.children.iter().enumerate() {
                for &k in kids {
                    assert!(parent[k].replace(p).is_none(), "{k} has two parents");
                }
            }
            assert!(parent[t.root].is_none());
            assert_eq!(parent.iter().filter(|p| p.is_none()).count(), 1);
            assert_eq!(t.root % 4, ch as usize, "the root is a head");
        }
        assert_ne!(
            channel_tree(&boxes, &rotation(0, 4), false, 16).root / 4,
            channel_tree(&boxes, &rotation(1, 4), true, 16).root / 4
        );
    }
}
