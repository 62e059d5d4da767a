//! Double binary tree (NCCL): two complementary balanced binary trees, each carrying half of the
//! data, pipelined over chunks. Tree A is the in-order tree over the ranks; tree B is the same tree
//! over the ranks shifted by one, so that A's leaves are mostly B's inner nodes.

use super::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::Error;

/// A tree over `order`: the root and, per position, its children (positions into `order`).
pub(crate) struct Tree {
    pub root: usize,
    pub children: Vec<Vec<usize>>,
}

fn build(lo: usize, hi: usize, children: &mut Vec<Vec<usize>>) -> Option<usize> {
    if lo >= hi {
        return None;
    }
    let mid = (lo + hi) / 2;
    for child in [build(lo, mid, children), build(mid + 1, hi, children)]
        .into_iter()
        .flatten()
    {
        children[mid].push(child);
    }
    Some(mid)
}

/// The balanced binary tree over positions `0..len` (in-order: the middle is the root).
pub(crate) fn tree(len: usize) -> Tree {
    let mut children = vec![Vec::new(); len];
    let root = build(0, len, &mut children).expect("trees have at least one rank");
    Tree { root, children }
}

/// Every position of `t` in post-order (children before parents).
pub(crate) fn post_ordered(t: &Tree) -> Vec<usize> {
    let mut order = Vec::with_capacity(t.children.len());
    post_order(t, t.root, &mut order);
    order
}

/// Positions in post-order (children before parents).
fn post_order(t: &Tree, at: usize, out: &mut Vec<usize>) {
    for &c in &t.children[at] {
        post_order(t, c, out);
    }
    out.push(at);
}

/// Reduce `pieces` up the tree over `ranks` to its root.
pub(crate) fn reduce_up(b: &mut Builder, t: &Tree, ranks: &[u32], pieces: (u32, u32)) {
    for &at in &post_ordered(t) {
        for &c in &t.children[at] {
            b.send(ranks[c], ranks[at], pieces, Op::Reduce);
        }
    }
}

/// Broadcast `pieces` from the tree's root down to every rank.
pub(crate) fn broadcast_down(b: &mut Builder, t: &Tree, ranks: &[u32], pieces: (u32, u32)) {
    for &at in post_ordered(t).iter().rev() {
        for &c in &t.children[at] {
            b.send(ranks[at], ranks[c], pieces, Op::Copy);
        }
    }
}

pub fn generate(c: &Collective) -> Result<Schedule, Error> {
    let refined = Collective {
        chunks: c.chunks * 2,
        ..c.clone()
    };
    let n = c.ranks();
    let root = c.root_rank;
    let mut b = Builder::new(&refined)?;
    let total = refined.piece_count();
    let segments = c.chunks;
    let half = total / 2;
    let segment = |tree: u32, s: u32| {
        let len = half / segments;
        let lo = tree * half + s * len;
        (lo, lo + len)
    };
    match c.kind {
        CollectiveKind::AllReduce => {
            let a: Vec<u32> = (0..n).collect();
            let shifted: Vec<u32> = (0..n).map(|r| (r + 1) % n).collect();
            let (ta, tb) = (tree(n as usize), tree(n as usize));
            for s in 0..segments {
                reduce_up(&mut b, &ta, &a, segment(0, s));
                reduce_up(&mut b, &tb, &shifted, segment(1, s));
            }
            for s in 0..segments {
                broadcast_down(&mut b, &ta, &a, segment(0, s));
                broadcast_down(&mut b, &tb, &shifted, segment(1, s));
            }
        }
        CollectiveKind::Broadcast | CollectiveKind::Reduce => {
            // Both trees span the other ranks; the root feeds (or drains) both tree roots.
            let others: Vec<u32> = (1..n).map(|k| (root + k) % n).collect();
            let shifted: Vec<u32> = (0..others.len())
                .map(|i| others[(i + 1) % others.len()])
                .collect();
            let t = tree(others.len());
            let trees = [(&others, &t), (&shifted, &t)];
            for s in 0..segments {
                for (which, (ranks, tr)) in trees.iter().enumerate() {
                    let pieces = segment(which as u32, s);
                    if c.kind == CollectiveKind::Broadcast {
                        b.send(root, ranks[tr.root], pieces, Op::Copy);
                        broadcast_down(&mut b, tr, ranks, pieces);
                    } else {
                        reduce_up(&mut b, tr, ranks, pieces);
                        b.send(ranks[tr.root], root, pieces, Op::Reduce);
                    }
                }
            }
        }
        other => return Err(super::Algorithm::Dbt.refusal(other)),
    }
    Ok(b.finish())
}
