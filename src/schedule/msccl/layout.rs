//! What export and import share: the executor's limits, its buffers and names, and where a
//! collective's pieces sit in a GPU's buffers.

use crate::collective::{Collective, CollectiveKind};

/// The executor's limits (msccl.h): steps per thread block, chunks per step.
pub(super) const MAX_STEPS: usize = 256;
pub(super) const MAX_COUNT: u32 = 72;

/// A buffer of a GPU: input, output or scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Buffer {
    Input,
    Output,
    Scratch,
}

impl Buffer {
    pub(super) fn name(self) -> &'static str {
        match self {
            Buffer::Input => "i",
            Buffer::Output => "o",
            Buffer::Scratch => "s",
        }
    }

    pub(super) fn parse(text: &str) -> Option<Buffer> {
        match text {
            "i" | "input" => Some(Buffer::Input),
            "o" | "output" => Some(Buffer::Output),
            "s" | "scratch" => Some(Buffer::Scratch),
            _ => None,
        }
    }
}

/// MSCCL's name of a collective.
pub(super) fn coll_name(kind: CollectiveKind) -> Option<&'static str> {
    Some(match kind {
        CollectiveKind::AllGather => "allgather",
        CollectiveKind::ReduceScatter => "reducescatter",
        CollectiveKind::AllReduce => "allreduce",
        CollectiveKind::Broadcast => "broadcast",
        CollectiveKind::Reduce => "reduce",
        CollectiveKind::AllToAll => "alltoall",
        _ => return None,
    })
}

/// A place in a GPU's buffers: buffer and chunk offset.
pub(super) type Slot = (Buffer, u32);

/// A local copy that places a rank's data: from, to, the pieces it carries, and whether it waits
/// for the transfers (true) or runs first (false).
pub(super) struct LocalCopy {
    pub(super) from: Slot,
    pub(super) to: Slot,
    pub(super) pieces: (u32, u32),
    pub(super) after: bool,
}

/// A step's position: thread block and step index.
pub(super) type StepRef = (usize, usize);

/// How a collective's pieces sit in a GPU's buffers.
pub(super) struct Layout<'c> {
    pub(super) c: &'c Collective,
}

impl Layout<'_> {
    /// Chunks of (input, output) buffers per GPU.
    pub(super) fn chunks(&self) -> (u32, u32) {
        let (k, all) = (self.c.chunks, self.c.piece_count());
        match self.c.kind {
            CollectiveKind::AllGather => (k, all),
            CollectiveKind::ReduceScatter => (all, k),
            // A block for each peer in, one from each peer out.
            CollectiveKind::AllToAll => {
                let per_buffer = self.c.ranks() * k;
                (per_buffer, per_buffer)
            }
            _ => (all, all),
        }
    }

    pub(super) fn in_place(&self) -> bool {
        self.c.kind == CollectiveKind::AllReduce
    }

    /// Where a rank keeps piece `p` while the collective runs.
    pub(super) fn working(&self, p: u32) -> (Buffer, u32) {
        match self.c.kind {
            CollectiveKind::AllGather | CollectiveKind::Broadcast => (Buffer::Output, p),
            _ => (Buffer::Input, p),
        }
    }

    /// Local copies that finish the collective on `rank`: (from, to, pieces); for the ones after
    /// the transfers, the pieces whose receives they wait for.
    pub(super) fn copies(&self, rank: u32) -> Vec<LocalCopy> {
        let c = self.c;
        let root = rank == c.root_rank;
        let copy = |from, to, pieces, after| LocalCopy {
            from,
            to,
            pieces,
            after,
        };
        match c.kind {
            CollectiveKind::AllGather => {
                let (lo, hi) = c.rank_block(rank);
                vec![copy(
                    (Buffer::Input, 0),
                    (Buffer::Output, lo),
                    (lo, hi),
                    false,
                )]
            }
            CollectiveKind::Broadcast if root => vec![copy(
                (Buffer::Input, 0),
                (Buffer::Output, 0),
                (0, c.chunks),
                false,
            )],
            CollectiveKind::ReduceScatter => {
                let (lo, hi) = c.rank_block(rank);
                vec![copy(
                    (Buffer::Input, lo),
                    (Buffer::Output, 0),
                    (lo, hi),
                    true,
                )]
            }
            CollectiveKind::Reduce if root => vec![copy(
                (Buffer::Input, 0),
                (Buffer::Output, 0),
                (0, c.chunks),
                true,
            )],
            _ => Vec::new(),
        }
    }

    /// The piece that (rank, buffer, offset) holds, for import.
    pub(super) fn piece(&self, rank: u32, buffer: Buffer, offset: u32) -> Option<u32> {
        let c = self.c;
        match (c.kind, buffer) {
            (_, Buffer::Scratch) => None,
            (CollectiveKind::AllGather, Buffer::Input) => Some(c.rank_block(rank).0 + offset),
            (CollectiveKind::ReduceScatter, Buffer::Output) => Some(c.rank_block(rank).0 + offset),
            // All-to-all: input block `j` goes to rank `j`, output block `j` came from it.
            (CollectiveKind::AllToAll, Buffer::Input) => {
                Some(c.a2a_block(rank, offset / c.chunks).0 + offset % c.chunks)
            }
            (CollectiveKind::AllToAll, Buffer::Output) => {
                Some(c.a2a_block(offset / c.chunks, rank).0 + offset % c.chunks)
            }
            _ => Some(offset),
        }
    }
}

/// Extra attribute on send steps keeping the schedule's issue order, which decides FIFO order
/// among transfers that become ready together and share a first link. The executor ignores it;
/// import uses it when every send has it, so a round trip simulates identically.
pub(super) const ORDER_ATTRIBUTE: &str = "collsim_order";
