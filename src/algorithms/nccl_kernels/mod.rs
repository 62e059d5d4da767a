//! NCCL's algorithms as its kernels run them, for the NCCL model (`crate::nccl`): each channel is
//! one CUDA block that moves its share of the buffer one step at a time, so every send of a rank
//! on a channel waits for its previous one (program order) as well as for its data; data moves in
//! NCCL's chunks (loops of channels x ranks x chunk bytes) cut into slices that pipeline across
//! the ranks.
//!
//! - Ring: reduce-scatter then all-gather around each channel's ring (all-reduce), or one of them.
//! - Tree: all-reduce up each channel's tree (a chain in each box, a binary tree across boxes) and
//!   back down, the two directions on separate thread groups (NCCL's split tree kernel).
//! - NVLS: every GPU reduces its copy of each shard into the box's NVSwitch (a relay NPU) and the
//!   shard's owner reads the sum (`multimem.ld_reduce`), then stores it into the switch, which
//!   writes it to every GPU (`multimem.st`); across boxes (NVLSTree) the sum of each box travels a
//!   binary tree of the channel's head GPUs before the switch spreads it.
//! - PAT (one GPU a box): Bruck's rounds, a rank sending what it has gathered 1, 2, 4, ... ranks
//!   away (reduce-scatter: its sums, the rounds reversed), so a part crosses at most log2(n) hops.
//! - Point-to-point (all-to-all): every pair's data in p2p chunks, the pairs concurrently.
//! - All-pairs (RCCL's MSCCL all-reduce on the MI300X): each rank's part summed at its owner
//!   straight from every peer and sent back to every peer.
//!
//! Ranks are GPUs in box order: box `b` holds ranks `b G .. (b + 1) G`.

mod in_network;

pub use in_network::{collnet_direct, nvls, Across};

use super::builder::Builder;
use super::collectives::ring_exchange_sending;
use super::dbt::{post_ordered, Tree};
use super::hamiltonian::walecki_path;
use super::nccl_tree::{channel_tree, rotation};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, TransferIndex};
use crate::Error;

/// The kernel that runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Ring,
    /// Broadcast and reduce along a ring.
    Chain,
    Tree,
    /// NVLS in one box, NVLSTree across boxes.
    Nvls,
    /// CollNet Direct: the sum across boxes made in the rails' switches (SHARP).
    CollNet,
    /// PAT: all-gather down, reduce-scatter up, binomial trees of every rank (one GPU a box).
    Pat,
    AllToAll,
}

impl Kernel {
    /// Sends one unit of a [`Cut`] (one slice of one loop of one channel) issues on `n` ranks in
    /// `boxes` boxes: what sizes a call's schedule.
    pub fn sends_per_unit(self, kind: CollectiveKind, n: u64, boxes: u64) -> u64 {
        match self {
            Kernel::Ring if kind == CollectiveKind::AllReduce => 2 * (n - 1) * n,
            Kernel::Ring => (n - 1) * n,
            Kernel::Chain => n - 1,
            Kernel::Tree => 2 * (n - 1),
            // Into the switches, to the heads, up and down each head's tree, back into the
            // switches, out to the GPUs (the shares before and after each GPU's own).
            Kernel::Nvls if boxes > 1 => {
                let g = n / boxes;
                5 * n + 2 * g * (boxes - 1) - 2 * boxes
            }
            Kernel::Nvls => {
                let reduce = match kind {
                    CollectiveKind::AllGather => 0,
                    _ => n * (n + 1),
                };
                let spread = match kind {
                    CollectiveKind::ReduceScatter => 0,
                    _ => n * n,
                };
                reduce + spread
            }
            // Per head's share: into its head in each box, up to the rail, back down, out to
            // the box.
            Kernel::CollNet if kind == CollectiveKind::AllReduce => 2 * n * (n / boxes.max(1)),
            // A part up its rail, down to the rail's other boxes, out to each box; or back.
            Kernel::CollNet => n * n + n * boxes,
            Kernel::Pat | Kernel::AllToAll => n * (n - 1),
        }
    }
}

/// How one call is cut: `units` (loops x channels) of `slices` slices each, per rank part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    pub channels: u32,
    /// Loops each channel runs.
    pub loops: u32,
    /// Slices per step (pipelined across ranks).
    pub slices: u32,
    /// Sends a block may have in flight (NCCL_STEPS slots over the steps a send fills).
    pub window: u32,
    /// Consecutive loops that make one chunk of NCCL's: LL's and LL128's chains and trees
    /// forward each loop's lines inside a box, but cross boxes a chunk at a time (one slice a
    /// step only).
    pub loops_per_chunk: u32,
    /// Parts one send carries where the kernel packs a round's parts into one step (PAT's, with
    /// one piece a part); 1 elsewhere.
    pub pack: u32,
}

impl Cut {
    /// Pieces per rank part: one per (loop, channel, slice).
    pub fn chunks(&self) -> u32 {
        self.loops * self.channels * self.slices
    }

    /// The piece of rank part `part` for (loop, channel, slice).
    fn piece(&self, c: &Collective, part: u32, loop_: u32, ch: u32, slice: u32) -> (u32, u32) {
        let first = part * c.chunks + self.unit(loop_, ch, slice);
        (first, first + 1)
    }

    /// The unit (loop, channel, slice) in a part: a channel's loops are consecutive, so that a
    /// chunk of them is one range of pieces.
    fn unit(&self, loop_: u32, ch: u32, slice: u32) -> u32 {
        (ch * self.loops + loop_) * self.slices + slice
    }

    /// The loops of each chunk, first and end, with their channel's sends across boxes made
    /// once a chunk (a whole step) and inside a box once a loop.
    fn chunk_loops(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let per_chunk = if self.slices == 1 {
            self.loops_per_chunk.max(1)
        } else {
            1
        };
        (0..self.loops)
            .step_by(per_chunk as usize)
            .map(move |first| (first, (first + per_chunk).min(self.loops)))
    }
}

/// Each block's sends in program order, at most `window` in flight: a send waits for the one
/// `window` sends before it on the same (rank, channel, thread group) to have arrived, as NCCL's
/// senders wait for a free slot of the receiver's `NCCL_STEPS` buffer slots.
struct Program {
    sent: Vec<std::collections::VecDeque<TransferIndex>>,
    channels: u32,
    groups: u32,
    window: usize,
}

impl Program {
    fn new(ranks: u32, channels: u32, groups: u32, window: u32) -> Program {
        Program {
            sent: vec![Default::default(); (ranks * channels * groups) as usize],
            channels,
            groups,
            window: window.max(1) as usize,
        }
    }

    /// Sends once a slot is free and records it.
    fn send(
        &mut self,
        b: &mut Builder,
        (src, dst): (u32, u32),
        pieces: (u32, u32),
        op: Op,
        (ch, group): (u32, u32),
    ) -> TransferIndex {
        let slot = ((src * self.channels + ch) * self.groups + group) as usize;
        let queue = &mut self.sent[slot];
        let after: Vec<TransferIndex> = if queue.len() == self.window {
            queue.pop_front().into_iter().collect()
        } else {
            Vec::new()
        };
        let t = b.send_after(src, dst, pieces, op, &after);
        self.sent[slot].push_back(t);
        t
    }
}

/// Ring all-reduce, all-gather or reduce-scatter of `c` (whose chunks are `cut.chunks()`), one
/// ring of ranks per channel.
pub fn ring(c: &Collective, rings: &[Vec<u32>], cut: Cut) -> Result<Schedule, Error> {
    let phases: &[Op] = match c.kind {
        CollectiveKind::AllReduce => &[Op::Reduce, Op::Copy],
        CollectiveKind::ReduceScatter => &[Op::Reduce],
        CollectiveKind::AllGather => &[Op::Copy],
        other => return Err(Error::Internal(format!("NCCL ring kernel for {other}"))),
    };
    let mut b = Builder::new(c)?;
    let n = c.ranks();
    let mut program = Program::new(n, cut.channels, 1, cut.window);
    for l in 0..cut.loops {
        for ch in 0..cut.channels {
            let ring = &rings[ch as usize % rings.len()];
            let pieces = |p: u32, s: u32| cut.piece(c, ring[p as usize], l, ch, s);
            let mut send = |b: &mut Builder, src, dst, range, op| {
                program.send(b, (src, dst), range, op, (ch, 0));
            };
            for &op in phases {
                ring_exchange_sending(&mut b, ring, cut.slices, false, op, &pieces, &mut send);
            }
        }
    }
    Ok(b.finish())
}

/// Rooted ring (broadcast, reduce): a chain from the root (broadcast) or to it (reduce) along
/// each channel's ring.
pub fn chain(
    c: &Collective,
    rings: &[Vec<u32>],
    cut: Cut,
    gpus_per_box: u32,
) -> Result<Schedule, Error> {
    let op = match c.kind {
        CollectiveKind::Broadcast => Op::Copy,
        CollectiveKind::Reduce => Op::Reduce,
        other => return Err(Error::Internal(format!("NCCL chain kernel for {other}"))),
    };
    let mut b = Builder::new(c)?;
    let n = c.ranks();
    let g = gpus_per_box.max(1);
    let mut program = Program::new(n, cut.channels, 1, cut.window);
    for (first, end) in cut.chunk_loops() {
        for ch in 0..cut.channels {
            let ring = &rings[ch as usize % rings.len()];
            let at = ring.iter().position(|&r| r == c.root_rank).unwrap_or(0) as u32;
            for s in 0..cut.slices {
                for hop in 0..n - 1 {
                    // Broadcast leaves the root; reduce arrives at it.
                    let (from, to) = match op {
                        Op::Copy => (at + hop, at + hop + 1),
                        Op::Reduce => (at + hop + 1, at + hop + 2),
                    };
                    let (src, dst) = (ring[(from % n) as usize], ring[(to % n) as usize]);
                    if src / g != dst / g {
                        let pieces = (cut.unit(first, ch, s), cut.unit(end - 1, ch, s) + 1);
                        program.send(&mut b, (src, dst), pieces, op, (ch, 0));
                        continue;
                    }
                    for l in first..end {
                        let u = cut.unit(l, ch, s);
                        program.send(&mut b, (src, dst), (u, u + 1), op, (ch, 0));
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// Tree all-reduce: per channel, a chain in each box from the channel's head GPU, and a binary
/// tree over the boxes' heads (`channel_tree`). As NCCL duplicates its tree channels, the
/// communicator's `comm_channels` come in two halves over the same heads (channel `ch` heads
/// from local GPU `(ch mod half) mod G`): the first half runs NCCL's binary tree across boxes,
/// the second its mirror, so a head's NIC is an inner node in one and a leaf in the other.
///
/// Each box is a chain from the channel's head GPU: in rotation behind NVSwitches, where every
/// order crosses the same links; on a full mesh (`mesh`) along Walecki's path from the head, so
/// that the channels' chains spread over the links as NCCL's search spreads its channels.
pub fn tree_all_reduce(
    c: &Collective,
    gpus_per_box: u32,
    cut: Cut,
    comm_channels: u32,
    mesh: bool,
) -> Result<Schedule, Error> {
    let n = c.ranks();
    let g = gpus_per_box;
    let boxes: Vec<Vec<u32>> = (0..n / g).map(|b| (b * g..(b + 1) * g).collect()).collect();
    // Every send carries whole units: all `n` ranks' shares of a chunk.
    let mut b = Builder::with_grain(c, &[], n)?;
    // Two thread groups per block: reduce up, broadcast down.
    let mut program = Program::new(n, cut.channels, 2, cut.window);
    let trees: Vec<(Tree, Vec<usize>)> = (0..cut.channels)
        .map(|ch| {
            let half = (comm_channels / 2).max(1);
            let head = ((ch % half) % g) as usize;
            let chain = if mesh && g.is_multiple_of(2) {
                walecki_path(head, g as usize)
            } else {
                rotation(head, g as usize)
            };
            let mut t = channel_tree(&boxes, &chain, (ch / half) % 2 == 1, n);
            // NCCL sends to all of a node's children in one step; they go in rank order.
            t.children.iter_mut().for_each(|kids| kids.sort_unstable());
            let order = post_ordered(&t);
            (t, order)
        })
        .collect();
    for (first, end) in cut.chunk_loops() {
        for ch in 0..cut.channels {
            let (t, order) = &trees[ch as usize];
            for s in 0..cut.slices {
                // A unit's pieces are every rank's share of it.
                let unit = |l: u32| cut.unit(l, ch, s) * n;
                let mut send = |b: &mut Builder, (src, dst): (u32, u32), op, group| {
                    if src / g != dst / g {
                        let pieces = (unit(first), unit(end - 1) + n);
                        program.send(b, (src, dst), pieces, op, (ch, group));
                        return;
                    }
                    for l in first..end {
                        program.send(b, (src, dst), (unit(l), unit(l) + n), op, (ch, group));
                    }
                };
                for &at in order {
                    for &kid in &t.children[at] {
                        send(&mut b, (kid as u32, at as u32), Op::Reduce, 0);
                    }
                }
                for &at in order.iter().rev() {
                    for &kid in &t.children[at] {
                        send(&mut b, (at as u32, kid as u32), Op::Copy, 1);
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// Point-to-point all-to-all: every pair's block striped over `channels` channels, each
/// channel's pieces sent one after another, the pairs and channels concurrently.
pub fn all_to_all(c: &Collective, channels: u32) -> Result<Schedule, Error> {
    let n = c.ranks();
    let mut b = Builder::new(c)?;
    for step in 1..n {
        for src in 0..n {
            let dst = (src + step) % n;
            let (lo, hi) = c.a2a_block(src, dst);
            let chains = channels.clamp(1, hi - lo);
            let per_chain = (hi - lo).div_ceil(chains);
            for start in (lo..hi).step_by(per_chain as usize) {
                let mut last: Option<TransferIndex> = None;
                for p in start..(start + per_chain).min(hi) {
                    let after: Vec<TransferIndex> = last.into_iter().collect();
                    last = Some(b.send_after(src, dst, (p, p + 1), Op::Copy, &after));
                }
            }
        }
    }
    Ok(b.finish())
}

/// NCCL's PAT ("parallel aggregated trees", src/include/collectives.h, `PatAGAlgorithm` and
/// `PatRSAlgorithm`) all-gather or reduce-scatter of `c`, one GPU a box: ceil(log2 n) rounds
/// over distances 1, 2, 4, ..., a rank sending in each the 2^k parts (fewer in the last round
/// when n is not a power of two) it has gathered to the rank 2^k before it (all-gather), or,
/// the rounds reversed, its sums of the parts 2^k after it to that rank (reduce-scatter). Each
/// rank sends n - 1 parts a unit, as a ring does, over log2(n) levels where the ring has n - 1.
/// A round's parts go one a message (`cut.pack` 1), or, where NCCL packs small parts into one
/// network step, `cut.pack` consecutive parts a message; that needs one piece a part (a cut of
/// one unit). NCCL runs Bruck's rounds with the dimensions reversed, the farthest first, so that
/// the largest round goes to the nearest ranks (Jeaugey, "PAT: a new algorithm for all-gather
/// and reduce-scatter operations at scale", arXiv 2506.20252); on collsim's rail-optimised
/// fabric every two boxes are equally far apart, so the rounds run nearest first, where a
/// round's parts are consecutive and pack into one message as NCCL's packed ones do.
pub fn pat(c: &Collective, cut: Cut) -> Result<Schedule, Error> {
    let down = match c.kind {
        CollectiveKind::AllGather => true,
        CollectiveKind::ReduceScatter => false,
        other => return Err(Error::Internal(format!("NCCL PAT kernel for {other}"))),
    };
    let pack = cut.pack.max(1);
    if pack > 1 && cut.chunks() != 1 {
        return Err(Error::Internal(format!(
            "PAT packs {pack} parts a message only with one piece a part"
        )));
    }
    let n = c.ranks();
    let dims = u32::BITS - (n - 1).leading_zeros();
    let mut b = Builder::new(c)?;
    let mut program = Program::new(n, cut.channels, 1, cut.window);
    for l in 0..cut.loops {
        for ch in 0..cut.channels {
            for i in 0..dims {
                let k = if down { i } else { dims - 1 - i };
                let step = 1 << k;
                let parts = step.min(n - step);
                for r in 0..n {
                    let (first, dst, op) = if down {
                        (r, (r + n - step) % n, Op::Copy)
                    } else {
                        ((r + step) % n, (r + step) % n, Op::Reduce)
                    };
                    for start in (0..parts).step_by(pack as usize) {
                        // Parts lo..hi, split where they wrap past the last rank (a packed
                        // range is one piece range: one piece a part).
                        let lo = (first + start) % n;
                        let hi = lo + pack.min(parts - start);
                        for (from, to) in [(lo, hi.min(n)), (0, hi.saturating_sub(n))] {
                            if from < to {
                                let pieces = (
                                    cut.piece(c, from, l, ch, 0).0,
                                    cut.piece(c, to - 1, l, ch, 0).1,
                                );
                                program.send(&mut b, (r, dst), pieces, op, (ch, 0));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(b.finish())
}

/// RCCL's MSCCL all-pairs all-reduce: every rank sends each peer that peer's part of its
/// buffer, the peer sums the parts it receives, and sends the sum to every rank; each part in
/// `c.chunks` pieces (the algorithm's channels), every pair and piece concurrently, a piece's
/// sum leaving as soon as it is complete.
pub fn all_pairs_all_reduce(c: &Collective) -> Result<Schedule, Error> {
    super::direct::generate(c, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::validate_with_relays;
    use crate::topology::NodeId;

    /// A cut of `channels` x `loops` units of `slices` slices, `window` sends in flight, a chunk
    /// a loop, nothing packed.
    fn cut_of(channels: u32, loops: u32, slices: u32, window: u32) -> Cut {
        Cut {
            channels,
            loops,
            slices,
            window,
            loops_per_chunk: 1,
            pack: 1,
        }
    }

    fn collective(kind: CollectiveKind, n: u32, chunks: u32) -> Collective {
        Collective::new(kind, (0..n).collect(), 1 << 20, chunks, None).unwrap()
    }

    /// NCCL's duplicated tree channels: the second half of the communicator's channels runs the
    /// other tree across boxes over the same heads, so the schedule uses both trees' edges
    /// (when every channel is in the first half, one tree's).
    #[test]
    fn tree_channel_halves_run_both_trees() {
        let cut = cut_of(8, 1, 1, 8);
        let c = collective(CollectiveKind::AllReduce, 16, cut.chunks());
        let edges_across = |comm_channels: u32| {
            let s = tree_all_reduce(&c, 4, cut, comm_channels, false).unwrap();
            crate::schedule::validate(&s, &c, 7).unwrap();
            let mut edges: Vec<(u32, u32)> = s
                .transfers()
                .filter(|t| t.src / 4 != t.dst / 4)
                .map(|t| (t.src, t.dst))
                .collect();
            edges.sort_unstable();
            edges.dedup();
            edges.len()
        };
        // Each tree over 4 boxes has 3 edges each way, per head (4 heads).
        assert_eq!(edges_across(16), 4 * 3 * 2);
        assert!(edges_across(8) > edges_across(16));
    }

    /// Every kernel implements its collective (symbolic validation), relays included.
    #[test]
    fn kernels_implement_their_collectives() {
        let cut = cut_of(2, 2, 2, 4);
        let rings: Vec<Vec<u32>> = vec![(0..8).collect(), (0..8).rev().collect()];
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
            let c = collective(kind, 8, cut.chunks());
            let s = ring(&c, &rings, cut).unwrap();
            crate::schedule::validate(&s, &c, 7).unwrap();
            let s = nvls(&c, 8, &[8], cut, Across::Tree).unwrap();
            validate_with_relays(&s, &c, &[8], 7).unwrap();
        }
        let c = collective(CollectiveKind::AllReduce, 16, cut.chunks());
        let s = tree_all_reduce(&c, 4, cut, 2 * cut.channels, false).unwrap();
        crate::schedule::validate(&s, &c, 7).unwrap();
        let s = nvls(&c, 8, &[16, 17], cut, Across::Tree).unwrap();
        validate_with_relays(&s, &c, &[16, 17], 7).unwrap();
        // Two boxes' switches, then eight rails' leaves summing the boxes (SHARP).
        let relays: Vec<NodeId> = (16..26).collect();
        let s = nvls(&c, 8, &relays, cut, Across::Network).unwrap();
        validate_with_relays(&s, &c, &relays, 7).unwrap();
        // Four boxes of four, the rails' leaves 20..24 summing in the network.
        let s = collnet_direct(&c, 4, &[20, 21, 22, 23], cut).unwrap();
        validate_with_relays(&s, &c, &[20, 21, 22, 23], 7).unwrap();
        for kind in [CollectiveKind::AllGather, CollectiveKind::ReduceScatter] {
            let c = collective(kind, 16, cut.chunks());
            let s = collnet_direct(&c, 4, &[20, 21, 22, 23], cut).unwrap();
            validate_with_relays(&s, &c, &[20, 21, 22, 23], 7).unwrap();
            // Two rails' leaves for four GPUs a box.
            let s = collnet_direct(&c, 4, &[20, 21], cut).unwrap();
            validate_with_relays(&s, &c, &[20, 21], 7).unwrap();
        }
        for kind in [CollectiveKind::Broadcast, CollectiveKind::Reduce] {
            let c =
                Collective::new(kind, (0..8).collect(), 1 << 20, cut.chunks(), Some(3)).unwrap();
            let s = chain(&c, &rings, cut, 4).unwrap();
            crate::schedule::validate(&s, &c, 7).unwrap();
        }
        let c = collective(CollectiveKind::AllToAll, 4, 6);
        for channels in [1, 2, 4, 9] {
            crate::schedule::validate(&all_to_all(&c, channels).unwrap(), &c, 7).unwrap();
        }
        let cut = Cut { slices: 1, ..cut };
        for n in [2, 3, 5, 8, 13] {
            for kind in [CollectiveKind::AllGather, CollectiveKind::ReduceScatter] {
                let c = collective(kind, n, cut.chunks());
                crate::schedule::validate(&pat(&c, cut).unwrap(), &c, 7).unwrap();
                let one = collective(kind, n, 1);
                let whole = Cut {
                    channels: 1,
                    loops: 1,
                    ..cut
                };
                for pack in [2, 4] {
                    let s = pat(&one, Cut { pack, ..whole }).unwrap();
                    crate::schedule::validate(&s, &one, 7).unwrap();
                }
            }
        }
    }

    /// PAT's rounds: a rank's sends go 1, 2, 4, ... ranks away (all-gather back, reduce-scatter
    /// forward), n - 1 a unit, and a part crosses at most ceil(log2 n) of them (the schedule's
    /// longest chain of sends, one unit and enough slots that only data orders them); packed,
    /// a round is one message a rank (two where its parts wrap past the last rank).
    #[test]
    fn pat_sends_along_its_trees_dimensions() {
        let cut = cut_of(1, 1, 1, 64);
        for (n, depth) in [(8, 3), (12, 4), (16, 4)] {
            for (kind, sign) in [
                (CollectiveKind::AllGather, -1),
                (CollectiveKind::ReduceScatter, 1),
            ] {
                let c = collective(kind, n, 1);
                let packed = pat(&c, Cut { pack: n, ..cut }).unwrap();
                assert!(packed.len() as u32 >= n * depth && packed.len() as u32 <= 2 * n * depth);
                let s = pat(&c, cut).unwrap();
                assert_eq!(s.len() as u32, n * (n - 1));
                for t in s.transfers() {
                    let away = (t.dst as i64 - t.src as i64) * sign;
                    let away = away.rem_euclid(n as i64);
                    assert!(away.count_ones() == 1, "{kind} {n}: {} -> {}", t.src, t.dst);
                }
                let mut chain = vec![0u32; s.len()];
                for i in 0..s.len() {
                    let after = s
                        .deps(i as TransferIndex)
                        .iter()
                        .map(|&d| chain[d as usize]);
                    chain[i] = 1 + after.max().unwrap_or(0);
                }
                let longest = *chain.iter().max().unwrap();
                assert!(longest <= depth, "{kind} {n}: {longest}");
                assert!(
                    !n.is_power_of_two() || longest == depth,
                    "{kind} {n}: {longest}"
                );
            }
        }
    }

    /// A switch relay's sum is checked like any other: spreading it before every GPU's
    /// reduction arrived is refused, and so is a relay the validation is not told of.
    #[test]
    fn relays_are_validated() {
        let c = collective(CollectiveKind::AllReduce, 4, 1);
        let mut b = Builder::with_relays(&c, &[4]).unwrap();
        let sw = b.relay_rank(0);
        for owner in 0..4 {
            let pieces = (owner, owner + 1);
            // Rank 3's contribution never reaches the switch.
            for r in 0..3 {
                b.send(r, sw, pieces, Op::Reduce);
            }
            for r in 0..4 {
                b.send(sw, r, pieces, Op::Copy);
            }
        }
        let s = b.finish();
        let e = validate_with_relays(&s, &c, &[4], 7)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ends with 3 of 4 contributions"), "{e}");
        let e = crate::schedule::validate(&s, &c, 7)
            .unwrap_err()
            .to_string();
        assert!(e.contains("NPU 4 is not a participant"), "{e}");
    }

    /// NVLSTree over eight boxes of two: on every channel each GPU heads its share over its own
    /// NIC, on the double binary tree's first tree on even channels and its second on odd ones.
    /// An inner node of a tree sends 3 times across boxes a channel (one up, two down), the
    /// root (one child) and a leaf once; a box inner in one tree is a leaf in the other, so
    /// over four channels every GPU sends 4 to 8 times (with one tree only, inner GPUs send 12).
    #[test]
    fn nvls_tree_heads_run_both_trees() {
        let cut = cut_of(4, 1, 1, 8);
        let c = collective(CollectiveKind::AllReduce, 16, cut.chunks());
        let switches: Vec<NodeId> = (16..24).collect();
        let s = nvls(&c, 2, &switches, cut, Across::Tree).unwrap();
        validate_with_relays(&s, &c, &switches, 7).unwrap();
        let mut across = [0u32; 16];
        for t in s.transfers() {
            if t.src < 16 && t.dst < 16 && t.src / 2 != t.dst / 2 {
                across[t.src as usize] += 1;
            }
        }
        assert_eq!(
            across.iter().sum::<u32>(),
            4 * 2 * 7 * 2,
            "two heads a box, 7 tree edges each way a head and channel"
        );
        assert!(across.iter().all(|&k| (4..=8).contains(&k)), "{across:?}");
    }

    /// The send count that sizes a call is the kernels' own: every kernel's schedule has
    /// `units x sends_per_unit` transfers.
    #[test]
    fn sends_per_unit_counts_the_kernels_sends() {
        let cut = cut_of(3, 2, 2, 4);
        let units = cut.chunks() as usize;
        let rings: Vec<Vec<u32>> = vec![(0..8).collect()];
        let count = |k: Kernel, c: &Collective, boxes: u64| {
            units * k.sends_per_unit(c.kind, c.ranks() as u64, boxes) as usize
        };
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
            let c = collective(kind, 8, cut.chunks());
            assert_eq!(
                ring(&c, &rings, cut).unwrap().len(),
                count(Kernel::Ring, &c, 1)
            );
            let s = nvls(&c, 8, &[8], cut, Across::Tree).unwrap();
            assert_eq!(s.len(), count(Kernel::Nvls, &c, 1), "{kind}");
        }
        let c = collective(CollectiveKind::AllReduce, 16, cut.chunks());
        let s = tree_all_reduce(&c, 4, cut, 2 * cut.channels, false).unwrap();
        assert_eq!(s.len(), count(Kernel::Tree, &c, 4));
        let s = nvls(&c, 4, &[16, 17, 18, 19], cut, Across::Tree).unwrap();
        assert_eq!(s.len(), count(Kernel::Nvls, &c, 4));
        let s = collnet_direct(&c, 4, &[20, 21, 22, 23], cut).unwrap();
        assert_eq!(s.len(), count(Kernel::CollNet, &c, 4));
        let c = collective(CollectiveKind::Broadcast, 8, cut.chunks());
        assert_eq!(
            chain(&c, &rings, cut, 8).unwrap().len(),
            count(Kernel::Chain, &c, 1)
        );
    }

    /// LL's chains and trees pass each loop's lines on inside a box but cross boxes a chunk
    /// (here two loops) at a time: over two boxes of four, a broadcast sends each of its four
    /// loops on its own along the six hops inside boxes and two chunks over the one across; a
    /// tree all-reduce's sends across boxes carry twice the bytes of those inside. Both still
    /// do what they claim.
    #[test]
    fn lines_cross_boxes_a_chunk_at_a_time() {
        let cut = Cut {
            loops_per_chunk: 2,
            ..cut_of(1, 4, 1, 16)
        };
        let rings = vec![(0..8).collect::<Vec<u32>>()];
        let c = collective(CollectiveKind::Broadcast, 8, cut.chunks());
        let s = chain(&c, &rings, cut, 4).unwrap();
        crate::schedule::validate(&s, &c, 7).unwrap();
        assert_eq!(s.len(), 6 * 4 + 2);
        let loop_bytes = (1 << 20) / 4;
        for t in s.transfers() {
            let across = t.src / 4 != t.dst / 4;
            assert_eq!(t.bytes, if across { 2 } else { 1 } * loop_bytes, "{t:?}");
        }
        let c = Collective::new(
            CollectiveKind::Reduce,
            (0..8).collect(),
            1 << 20,
            cut.chunks(),
            Some(5),
        )
        .unwrap();
        crate::schedule::validate(&chain(&c, &rings, cut, 4).unwrap(), &c, 7).unwrap();
        let c = collective(CollectiveKind::AllReduce, 8, cut.chunks());
        let s = tree_all_reduce(&c, 4, cut, 2, false).unwrap();
        crate::schedule::validate(&s, &c, 7).unwrap();
        let mut across = 0;
        for t in s.transfers() {
            if t.src / 4 != t.dst / 4 {
                across += 1;
                assert_eq!(t.bytes, 2 * loop_bytes, "{t:?}");
            } else {
                assert_eq!(t.bytes, loop_bytes, "{t:?}");
            }
        }
        assert_eq!(across, 2 * 2, "one edge across, up and down, two chunks");
    }

    /// A block's sends wait for its previous send: on a 4-rank ring of one channel, rank 0's
    /// second send depends on its first.
    #[test]
    fn a_channel_sends_in_program_order() {
        let cut = cut_of(1, 2, 1, 1);
        let c = collective(CollectiveKind::AllGather, 4, cut.chunks());
        let s = ring(&c, &[(0..4).collect()], cut).unwrap();
        let from_zero: Vec<TransferIndex> = (0..s.len() as TransferIndex)
            .filter(|&t| s.transfer(t).src == 0)
            .collect();
        assert!(s.deps(from_zero[1]).contains(&from_zero[0]));
    }
}
