//! How NCCL cuts a call into channels, loops, chunks and slices (src/enqueue.cc
//! `calcCollChunking` and its callers), per algorithm and protocol.

use super::*;

impl Model {
    /// How NCCL cuts the call: channels, loops of `channels x ranks x chunk` bytes, slices.
    /// With a `budget` of transfers, the call's loops are merged to fit it (`plan` then keeps
    /// a tree's or chain's own chunks instead, when it can extrapolate them).
    pub(super) fn cut(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        choice: Choice,
        budget: Option<u64>,
    ) -> Cut {
        let p = choice.proto as usize;
        let n = self.system.gpus() as u64;
        let channels = choice.channels.max(1);
        let step = BUFFER_BYTES[p] / STEPS;
        let heads = self.system.gpus_per_box;
        let ring_like = matches!(
            kind,
            CollectiveKind::AllReduce | CollectiveKind::AllGather | CollectiveKind::ReduceScatter
        ) && choice.algo == Algo::Ring;
        let (chunk, slices) = match (choice.algo, choice.proto) {
            (Algo::Nvls, _) if self.system.boxes > 1 => {
                // Across boxes (with CollNet) NCCL caps the chunk at 32 KiB where its model
                // rates NVLS under 150 GB/s; a piece is a head's chunk over the boxes.
                let f = Func::AllReduce as usize;
                let slow = self.tables.bandwidth[f][Algo::Nvls as usize][p] < 150.0;
                let max = if slow { 32768 } else { u64::MAX };
                let boxes = self.system.boxes as u64;
                let chunk = self.nvls.call_chunk(bytes, channels, heads, max);
                ((chunk / boxes).max(1), 1)
            }
            (Algo::Nvls, _) => (self.nvls.call_chunk(bytes, channels, heads, u64::MAX), 1),
            // A loop moves one chunk a head, each a share of every rank's part: a piece is
            // the chunk over the boxes.
            (Algo::NvlsTree, _) => {
                let boxes = self.system.boxes.max(1) as u64;
                (
                    (self.nvls.tree_call_chunk(bytes, channels, heads) / boxes).max(1),
                    1,
                )
            }
            (Algo::CollNetDirect, _) => (self.collnet_chunk(kind, bytes, channels, step), 1),
            (Algo::Tree, Proto::LL128) => (self.tree_ll128_chunk(bytes, channels), 1),
            (Algo::Pat, _) => (pat_chunk(kind, bytes, channels, step), 1),
            (_, Proto::Simple) if ring_like => (
                step * RING_CHUNK_STEPS,
                (RING_CHUNK_STEPS / RING_SLICE_STEPS) as u32,
            ),
            (_, proto) => (step_data_bytes(proto as usize), 1),
        };
        // LL's and LL128's chains and trees pass each line on as it arrives, a trip of the
        // channel's threads at a time, between GPUs of a box; across boxes the proxy posts a
        // chunk's lines once the GPU has written them all. (A ring's links carry its chunks one
        // after another however they are cut, so its pieces stay chunks.)
        let kernel = kernel_of(kind, choice.algo);
        let lines = matches!(choice.proto, Proto::LL | Proto::LL128)
            && matches!(kernel, Kernel::Chain | Kernel::Tree);
        let trips = if lines {
            chunk.div_ceil(trip_data_bytes(choice.proto, choice.threads))
        } else {
            1
        };
        let piece = chunk.div_ceil(trips);
        // Data a loop of one channel moves per rank part.
        // (A tree unit carries the whole chunk; a ring or NVLS unit one chunk per rank.)
        let per_part = match (kind, choice.algo) {
            (CollectiveKind::Broadcast | CollectiveKind::Reduce, _) | (_, Algo::Tree) => bytes,
            _ => bytes.div_ceil(n),
        };
        let mut loops = per_part.div_ceil(channels as u64 * piece).max(1);
        let g = self.system.gpus_per_box as u64;
        let steps_per_loop = kernel.sends_per_unit(kind, n, n / g);
        let per_loop = channels as u64 * slices as u64 * steps_per_loop;
        if let Some(budget) = budget.filter(|&b| loops * per_loop > b) {
            loops = (budget / per_loop).max(1);
        }
        // At least one of the protocol's grains per piece (NCCL cuts chunks in whole grains,
        // and a slice with nothing to move posts without its fence).
        let grains = per_part.div_ceil(GRAIN_BYTES[p]).max(1);
        let pieces_per_part = |loops: u64| loops * channels as u64 * slices as u64;
        while loops > 1 && pieces_per_part(loops) > grains {
            loops /= 2;
        }
        // A send fills `slice steps` of the receiver's NCCL_STEPS slots.
        let steps_per_send = if slices > 1 { RING_SLICE_STEPS } else { 1 };
        // Loops a chunk spans, sent across boxes together; a slot holds a chunk of them.
        let per_chunk = {
            let piece = per_part.div_ceil(channels as u64 * loops).max(1);
            (chunk / piece).clamp(1, trips.min(loops))
        };
        let mut cut = Cut {
            channels,
            loops: loops as u32,
            slices,
            window: (STEPS * per_chunk / steps_per_send) as u32,
            loops_per_chunk: per_chunk as u32,
            pack: 1,
        };
        while cut.chunks() as u64 > grains.max(1) && cut.slices > 1 {
            cut.slices -= 1;
        }
        while cut.chunks() as u64 > grains.max(1) && cut.channels > 1 {
            cut.channels -= 1;
        }
        // PAT packs a round's parts into one step where they are small: the channels' steps
        // travel together, run here as one.
        if choice.algo == Algo::Pat {
            let pack = pat_aggregate(kind, bytes, n as u32, channels);
            if pack > 1 {
                cut.channels = 1;
                cut.loops = 1;
                cut.pack = pack;
            }
        }
        cut
    }

    /// Tree LL128's chunk (src/enqueue.cc `computeCollChunkInfo`): LL128's step of data, halved
    /// while each channel gets fewer chunks than `64 / ppn` (down to 128 KiB) and `16 / ppn`
    /// (down to 32 KiB) times the tree's steps, `1 + log2(boxes) + ppn / 10`.
    pub(super) fn tree_ll128_chunk(&self, bytes: u64, channels: u32) -> u64 {
        let boxes = self.system.boxes.max(1);
        let ppn = self.system.gpus() as f64 / boxes as f64;
        let nsteps = 1.0 + boxes.ilog2() as f64 + 0.1 * ppn;
        let per_channel = |chunk: u64| (bytes / (channels as u64 * chunk)) as f64;
        let mut chunk = step_data_bytes(Proto::LL128 as usize);
        for (times, floor) in [(64.0, 131072), (16.0, 32768)] {
            while per_channel(chunk) < nsteps * times / ppn && chunk > floor {
                chunk /= 2;
            }
        }
        chunk
    }

    /// CollNet Direct's piece of a rank's part (src/enqueue.cc `calcCollChunking`): Simple's step
    /// per channel and network head, halved (to 128, 64, 32 KiB) while the call gives each fewer
    /// chunks than 64, 8, 8 times the depth (2 across boxes). An all-reduce's head carries one
    /// share of every box in a chunk, so a rank's piece is that chunk over the boxes; an
    /// all-gather's or reduce-scatter's rail step carries one box's part (the rail's buffer holds
    /// the boxes' parts one after another), so a rank's piece is the chunk.
    fn collnet_chunk(&self, kind: CollectiveKind, bytes: u64, channels: u32, step: u64) -> u64 {
        let heads = self.system.gpus_per_box as u64;
        let depth = 2;
        let per_head = |chunk: u64| bytes / (channels as u64 * heads * chunk);
        let mut chunk = step;
        for (times, floor) in [(64, 131072), (8, 65536), (8, 32768)] {
            while per_head(chunk) < depth * times && chunk > floor {
                chunk /= 2;
            }
        }
        if kind == CollectiveKind::AllReduce {
            (chunk / self.system.boxes as u64).max(1)
        } else {
            chunk
        }
    }
}

/// Parts PAT packs into one network step (`aggFactor` as `PatAGAlgorithm` and `PatRSAlgorithm`
/// first set it, their `postFreq`): doubled, up to half the ranks, while a chunk holds at least
/// twice that many of a channel's parts.
fn pat_aggregate(kind: CollectiveKind, bytes: u64, ranks: u32, channels: u32) -> u32 {
    let chunk = pat_chunk(
        kind,
        bytes,
        channels,
        BUFFER_BYTES[Proto::Simple as usize] / STEPS,
    );
    let part = (bytes / ranks.max(1) as u64 / channels.max(1) as u64).max(1);
    let mut aggregate = 1;
    while chunk / (part * aggregate as u64) >= 2 && aggregate < ranks / 2 {
        aggregate *= 2;
    }
    aggregate
}

/// PAT's chunk (src/enqueue.cc `calcCollChunking`): Simple's step, halved down to 64 KiB while
/// the channels' chunks times 32 (all-gather) or 16 (reduce-scatter) exceed the call.
fn pat_chunk(kind: CollectiveKind, bytes: u64, channels: u32, step: u64) -> u64 {
    let times = if kind == CollectiveKind::AllGather {
        32
    } else {
        16
    };
    let mut chunk = step;
    while chunk * channels as u64 * times > bytes && chunk > 65536 {
        chunk /= 2;
    }
    chunk
}
