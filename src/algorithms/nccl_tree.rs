//! NCCL's tree all-reduce for boxes of GPUs: a double binary tree across the boxes and a chain
//! inside each box. Channel `c` (one per local index) chains the box's GPUs from GPU `c`, its
//! head, which joins the tree across boxes on its own NIC; even channels use the in-order binary
//! tree over the boxes, odd ones the same tree over the boxes shifted by one, so a box that is a
//! leaf in one tree is mostly an inner node in the other. Each channel reduces its part of the
//! buffer up its chains and tree to the root box's head, then broadcasts it back down, pipelined
//! over `--chunks` segments: few steps (2 (log2 boxes + box size)) where the ring needs 2 (n - 1),
//! so it wins on small messages and loses on large ones, whose bytes cross the tree's inner NICs
//! twice.

use super::boxes::equal_boxes;
use super::builder::{part, Builder};
use super::dbt::{broadcast_down, reduce_up, tree, Tree};
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
    let refined = Collective {
        chunks: c.chunks * g,
        ..c.clone()
    };
    let mut b = Builder::new(&refined)?;
    let total = refined.piece_count();
    let ranks: Vec<u32> = (0..c.ranks()).collect();
    let trees: Vec<Tree> = (0..g)
        .map(|ch| {
            channel_tree(
                &boxes,
                &rotation(ch as usize, g as usize),
                ch % 2 == 1,
                c.ranks(),
            )
        })
        .collect();
    for s in 0..c.chunks {
        for (ch, t) in trees.iter().enumerate() {
            reduce_up(&mut b, t, &ranks, part(0, total, g, ch as u32, c.chunks, s));
        }
    }
    for s in 0..c.chunks {
        for (ch, t) in trees.iter().enumerate() {
            broadcast_down(&mut b, t, &ranks, part(0, total, g, ch as u32, c.chunks, s));
        }
    }
    Ok(b.finish())
}

/// A binary tree over `boxes` boxes, as box indices: the in-order tree, or (`flipped`) the same
/// tree over the boxes shifted by one, NCCL's second tree of its double binary tree.
pub(crate) fn boxes_tree(boxes: usize, flipped: bool) -> Tree {
    let across = tree(boxes);
    let box_at = |p: usize| (p + flipped as usize) % boxes;
    let mut children = vec![Vec::new(); boxes];
    for (p, kids) in across.children.iter().enumerate() {
        children[box_at(p)].extend(kids.iter().map(|&k| box_at(k)));
    }
    Tree {
        root: box_at(across.root),
        children,
    }
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
