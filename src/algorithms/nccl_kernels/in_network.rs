//! NCCL's kernels that reduce in switches: NVLS in each box's NVSwitch (and across boxes on
//! trees of head GPUs, or in the rails' leaf switches with SHARP), and CollNet Direct in the
//! rails' leaf switches (IB SHARP).

use super::{Cut, Program};
use crate::algorithms::builder::Builder;
use crate::algorithms::dbt::post_ordered;
use crate::algorithms::nccl_tree::boxes_tree;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::topology::NodeId;
use crate::Error;

/// How NVLS's box sums meet across boxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Across {
    /// NVLSTree: on a binary tree of each share's head GPUs.
    Tree,
    /// NVLS with CollNet (IB SHARP): in the head's rail leaf switch, which sends the total back.
    Network,
}

/// NVLS all-reduce, all-gather or reduce-scatter inside boxes whose NVSwitches are the relays
/// `switches` (one per box, then with [`Across::Network`] the rails' leaf switches); across
/// boxes (all-reduce only) the box sums meet as `across` says. Each unit of the cut carries one
/// shard per rank.
pub fn nvls(
    c: &Collective,
    gpus_per_box: u32,
    switches: &[NodeId],
    cut: Cut,
    across: Across,
) -> Result<Schedule, Error> {
    let n = c.ranks();
    let g = gpus_per_box;
    let boxes = n / g;
    // Across boxes every send carries whole shares of a head: `boxes` pieces (in one box, one).
    let mut b = Builder::with_grain(c, switches, boxes)?;
    let relay = |b: &Builder, bx: u32| b.relay_rank(bx);
    // Groups: 0 reduces into the switch, 1 stores into it, 2 up the tree across boxes, 3 down.
    let mut program = Program::new(n, cut.channels, 4, cut.window);
    let reduce = c.kind.has_reduce_scatter();
    let spread = c.kind.has_all_gather();
    for l in 0..cut.loops {
        for ch in 0..cut.channels {
            for s in 0..cut.slices {
                if boxes > 1 {
                    // All-reduce: any pieces may travel together; a unit's are contiguous.
                    let unit = HeadedUnit {
                        g,
                        boxes,
                        first: ((l * cut.channels + ch) * cut.slices + s) * n,
                        ch,
                    };
                    unit.reduce_into_heads(&mut b, &mut program);
                    match across {
                        Across::Tree => unit.sum_on_trees(&mut b, &mut program),
                        Across::Network => {
                            let rails = switches.len() as u32 - boxes;
                            unit.sum_in_the_network(&mut b, &mut program, rails);
                        }
                    }
                    unit.spread_from_heads(&mut b, &mut program);
                    continue;
                }
                for owner in 0..n {
                    let pieces = cut.piece(c, owner, l, ch, s);
                    let sw = relay(&b, 0);
                    if reduce {
                        for r in 0..n {
                            program.send(&mut b, (r, sw), pieces, Op::Reduce, (ch, 0));
                        }
                        b.send(sw, owner, pieces, Op::Copy);
                    }
                    if spread {
                        program.send(&mut b, (owner, sw), pieces, Op::Copy, (ch, 1));
                        for r in (0..n).filter(|&r| r != owner) {
                            b.send(sw, r, pieces, Op::Copy);
                        }
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// CollNet Direct (NCCL's in-network collectives, IB SHARP) of `c`, GPU `h` of every box on rail
/// `h`, whose leaf switch is `leaves[h % leaves.len()]`.
///
/// All-reduce: each unit of the cut (pieces `unit n .. (unit + 1) n`) has a head in every box for
/// each GPU's share of it (GPU `h` of each box heads share `h`, `boxes` pieces); the box's other
/// GPUs reduce their copies of the share into its head over NVLink, the heads send the box sums
/// up to their rail's leaf, which sums the boxes in the network and sends the total back down,
/// and each head copies it to the rest of its box. A head's share of a unit is one network
/// message, as NCCL's collnet step is.
///
/// All-gather (src/device/all_gather.h, `NCCL_ALGO_COLLNET_DIRECT`): each GPU sends its part up
/// its rail, the leaf sends it down to the GPU on that rail in every other box, and each GPU
/// copies its rail's parts (its own and the other boxes') to the rest of its box over NVLink.
/// Reduce-scatter is that run backwards: each GPU sums its box's copies of its rail's parts, sends
/// each box sum up the rail, and the leaf sends each part's total down to the part's owner.
pub fn collnet_direct(
    c: &Collective,
    gpus_per_box: u32,
    leaves: &[NodeId],
    cut: Cut,
) -> Result<Schedule, Error> {
    match c.kind {
        CollectiveKind::AllReduce => {}
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter => {
            return collnet_direct_rails(c, gpus_per_box, leaves, cut)
        }
        other => return Err(Error::Internal(format!("CollNet kernel for {other}"))),
    }
    let n = c.ranks();
    let g = gpus_per_box;
    let boxes = n / g;
    // All-reduce: any pieces may travel together; a unit's are contiguous.
    let mut b = Builder::with_grain(c, leaves, boxes)?;
    // Groups: 0 reduces into the heads, 1 goes up to the network, 2 spreads from the heads.
    let mut program = Program::new(n, cut.channels, 3, cut.window);
    for l in 0..cut.loops {
        for ch in 0..cut.channels {
            for s in 0..cut.slices {
                let first = ((l * cut.channels + ch) * cut.slices + s) * n;
                for h in 0..g {
                    let share = (first + h * boxes, first + (h + 1) * boxes);
                    // With fewer NICs than GPUs a box, GPU `h` is on leaf `h % leaves`.
                    let leaf = b.relay_rank(h % leaves.len() as u32);
                    let head = |bx: u32| bx * g + h;
                    for bx in 0..boxes {
                        for r in (bx * g..(bx + 1) * g).filter(|&r| r != head(bx)) {
                            program.send(&mut b, (r, head(bx)), share, Op::Reduce, (ch, 0));
                        }
                        program.send(&mut b, (head(bx), leaf), share, Op::Reduce, (ch, 1));
                    }
                    for bx in 0..boxes {
                        b.send(leaf, head(bx), share, Op::Copy);
                    }
                    for bx in 0..boxes {
                        for r in (bx * g..(bx + 1) * g).filter(|&r| r != head(bx)) {
                            program.send(&mut b, (head(bx), r), share, Op::Copy, (ch, 2));
                        }
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// CollNet Direct's all-gather or reduce-scatter ([`collnet_direct`]): every part travels
/// along its owner's rail, a piece a transfer.
fn collnet_direct_rails(
    c: &Collective,
    g: u32,
    leaves: &[NodeId],
    cut: Cut,
) -> Result<Schedule, Error> {
    let n = c.ranks();
    let boxes = n / g;
    let gather = c.kind == CollectiveKind::AllGather;
    let mut b = Builder::with_relays(c, leaves)?;
    // Groups: 0 reduces into the heads, 1 goes up to the network, 2 spreads from the heads.
    let mut program = Program::new(n, cut.channels, 3, cut.window);
    for l in 0..cut.loops {
        for ch in 0..cut.channels {
            for s in 0..cut.slices {
                for h in 0..g {
                    let leaf = b.relay_rank(h % leaves.len() as u32);
                    let rail = |bx: u32| bx * g + h;
                    let piece = |owner: u32| cut.piece(c, owner, l, ch, s);
                    let box_of = |bx: u32| bx * g..(bx + 1) * g;
                    if gather {
                        for owner in (0..boxes).map(rail) {
                            program.send(&mut b, (owner, leaf), piece(owner), Op::Copy, (ch, 1));
                            for to in (0..boxes).map(rail).filter(|&to| to != owner) {
                                b.send(leaf, to, piece(owner), Op::Copy);
                            }
                        }
                        for bx in 0..boxes {
                            for owner in (0..boxes).map(rail) {
                                for r in box_of(bx).filter(|&r| r != rail(bx)) {
                                    let p = piece(owner);
                                    program.send(&mut b, (rail(bx), r), p, Op::Copy, (ch, 2));
                                }
                            }
                        }
                    } else {
                        for bx in 0..boxes {
                            for owner in (0..boxes).map(rail) {
                                for r in box_of(bx).filter(|&r| r != rail(bx)) {
                                    let p = piece(owner);
                                    program.send(&mut b, (r, rail(bx)), p, Op::Reduce, (ch, 0));
                                }
                            }
                        }
                        for bx in 0..boxes {
                            for owner in (0..boxes).map(rail) {
                                let p = piece(owner);
                                program.send(&mut b, (rail(bx), leaf), p, Op::Reduce, (ch, 1));
                            }
                        }
                        for owner in (0..boxes).map(rail) {
                            b.send(leaf, owner, piece(owner), Op::Copy);
                        }
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// One unit of NVLS all-reduce across boxes: pieces `first .. first + G boxes` on channel
/// `ch`, every GPU of a box the head of an equal share of them (its NIC's): head `h` of every
/// box carries share `h`, `boxes` pieces.
#[derive(Clone, Copy)]
struct HeadedUnit {
    g: u32,
    boxes: u32,
    first: u32,
    ch: u32,
}

impl HeadedUnit {
    fn pieces(self) -> (u32, u32) {
        (self.first, self.first + self.g * self.boxes)
    }

    fn share(self, h: u32) -> (u32, u32) {
        (
            self.first + h * self.boxes,
            self.first + (h + 1) * self.boxes,
        )
    }

    fn head(self, bx: u32, h: u32) -> u32 {
        bx * self.g + h
    }

    /// NVLS's first half: each box's GPUs reduce the unit into their switch and each head reads
    /// the sum of its share.
    fn reduce_into_heads(self, b: &mut Builder, program: &mut Program) {
        for bx in 0..self.boxes {
            let sw = b.relay_rank(bx);
            for h in 0..self.g {
                let r = self.head(bx, h);
                program.send(b, (r, sw), self.pieces(), Op::Reduce, (self.ch, 0));
            }
            for h in 0..self.g {
                b.send(sw, self.head(bx, h), self.share(h), Op::Copy);
            }
        }
    }

    /// NVLS's last half: each head stores its share's total into its box's switch, which brings
    /// every GPU the shares it does not head.
    fn spread_from_heads(self, b: &mut Builder, program: &mut Program) {
        let (first, end) = self.pieces();
        for bx in 0..self.boxes {
            let sw = b.relay_rank(bx);
            for h in 0..self.g {
                let head = self.head(bx, h);
                program.send(b, (head, sw), self.share(h), Op::Copy, (self.ch, 1));
            }
            // Every GPU holds its own share; the switch brings it the others'.
            for h in 0..self.g {
                let (lo, hi) = self.share(h);
                for part in [(first, lo), (hi, end)] {
                    if part.0 < part.1 {
                        b.send(sw, self.head(bx, h), part, Op::Copy);
                    }
                }
            }
        }
    }

    /// NVLS with CollNet (IB SHARP; NCCL's NVLS kernel with `nvls.out`): each head sends its
    /// share's box sum up to its rail's leaf switch (relay `boxes + rail` of `rails`), which
    /// sums the boxes and sends the total back down to every box's head.
    fn sum_in_the_network(self, b: &mut Builder, program: &mut Program, rails: u32) {
        for h in 0..self.g {
            let leaf = b.relay_rank(self.boxes + h % rails.max(1));
            for bx in 0..self.boxes {
                let head = self.head(bx, h);
                program.send(b, (head, leaf), self.share(h), Op::Reduce, (self.ch, 2));
            }
            for bx in 0..self.boxes {
                b.send(leaf, self.head(bx, h), self.share(h), Op::Copy);
            }
        }
    }

    /// NVLSTree (`connectNvls`'s trees): each head sends its share's box sum up its share's tree
    /// across boxes (NCCL's binary tree on even channels, its mirror on odd ones) and, in a
    /// thread group of its own, passes the total down.
    fn sum_on_trees(self, b: &mut Builder, program: &mut Program) {
        let mut across = boxes_tree(self.boxes as usize, self.ch % 2 == 1);
        across
            .children
            .iter_mut()
            .for_each(|kids| kids.sort_unstable());
        let order = post_ordered(&across);
        for h in 0..self.g {
            let head = |bx: usize| self.head(bx as u32, h);
            let share = self.share(h);
            for &at in &order {
                for &kid in &across.children[at] {
                    program.send(b, (head(kid), head(at)), share, Op::Reduce, (self.ch, 2));
                }
            }
            for &at in order.iter().rev() {
                for &kid in &across.children[at] {
                    program.send(b, (head(at), head(kid)), share, Op::Copy, (self.ch, 3));
                }
            }
        }
    }
}
