//! Collective operations: what data each participant starts with and must end with.
//!
//! A collective's data is cut into equal *pieces* (sizes differ by at most one byte when the size does
//! not divide). Schedules name the pieces each transfer carries as a half-open range of piece indices,
//! which is what symbolic validation executes. Piece layout per kind, with `n` participants (ranks
//! in the order given) and `K` chunks:
//!
//! * all-gather, reduce-scatter, all-reduce, gather, scatter: `n*K` pieces; piece `p` belongs to rank
//!   `p / K` (its source for gathers, its destination for scatters and reduce-scatter).
//! * all-to-all: `n*n*K` pieces; piece `p` goes from rank `p / (n*K)` to rank `(p / K) % n`.
//! * broadcast, reduce: `K` pieces, all at the root.

use std::fmt;

use crate::topology::NodeId;
use crate::Error;

/// The kinds of collective collsim knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    Gather,
    Scatter,
}

impl CollectiveKind {
    pub const ALL: [CollectiveKind; 8] = [
        CollectiveKind::AllReduce,
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllToAll,
        CollectiveKind::Broadcast,
        CollectiveKind::Reduce,
        CollectiveKind::Gather,
        CollectiveKind::Scatter,
    ];

    /// Accepts `all-reduce`, `allreduce`, `all_reduce`, `ALLREDUCE` and the like.
    pub fn parse(text: &str) -> Result<CollectiveKind, Error> {
        let key: String = text
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        CollectiveKind::ALL
            .into_iter()
            .find(|k| k.name().replace('-', "") == key)
            .ok_or_else(|| {
                Error::input(format!(
                    "unknown collective '{text}': expected one of all-reduce, all-gather, \
                     reduce-scatter, all-to-all, broadcast, reduce, gather, scatter"
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all-reduce",
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::ReduceScatter => "reduce-scatter",
            CollectiveKind::AllToAll => "all-to-all",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Gather => "gather",
            CollectiveKind::Scatter => "scatter",
        }
    }

    /// True for collectives with a root NPU.
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            CollectiveKind::Broadcast
                | CollectiveKind::Reduce
                | CollectiveKind::Gather
                | CollectiveKind::Scatter
        )
    }

    /// Whether it reduces every rank's data into its owner's piece: reduce-scatter, and
    /// all-reduce's first phase.
    pub fn has_reduce_scatter(self) -> bool {
        matches!(
            self,
            CollectiveKind::ReduceScatter | CollectiveKind::AllReduce
        )
    }

    /// Whether it spreads every rank's piece to every rank: all-gather, and all-reduce's
    /// second phase.
    pub fn has_all_gather(self) -> bool {
        matches!(self, CollectiveKind::AllGather | CollectiveKind::AllReduce)
    }

    /// nccl-tests' bus-bandwidth factor: busbw = algbw * factor.
    pub fn busbw_factor(self, n: u32) -> f64 {
        let n = n as f64;
        match self {
            CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveKind::AllGather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::AllToAll
            | CollectiveKind::Gather
            | CollectiveKind::Scatter => (n - 1.0) / n,
            CollectiveKind::Broadcast | CollectiveKind::Reduce => 1.0,
        }
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One collective call: kind, participants, size and pipelining.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    pub kind: CollectiveKind,
    /// Participating NPUs in rank order.
    pub npus: Vec<NodeId>,
    /// The root's rank (index into `npus`) for rooted collectives, 0 otherwise.
    pub root_rank: u32,
    /// The per-NPU buffer the user names (all-gather: output; reduce-scatter: input).
    pub size: u64,
    /// Pieces per rank for pipelining.
    pub chunks: u32,
}

impl Collective {
    /// Checks the combination and returns the collective.
    pub fn new(
        kind: CollectiveKind,
        npus: Vec<NodeId>,
        size: u64,
        chunks: u32,
        root: Option<NodeId>,
    ) -> Result<Collective, Error> {
        if npus.len() < 2 {
            return Err(Error::input(format!(
                "{kind} needs at least 2 participating NPUs, got {}",
                npus.len()
            )));
        }
        if chunks == 0 {
            return Err(Error::input("--chunks must be at least 1"));
        }
        let mut sorted = npus.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::input(format!(
                "NPU {} is listed twice among the participants",
                w[0]
            )));
        }
        let root_rank = match (kind.is_rooted(), root) {
            (_, None) => 0,
            (false, Some(_)) => {
                return Err(Error::input(format!("{kind} has no root; drop --root")))
            }
            (true, Some(r)) => npus.iter().position(|&v| v == r).ok_or_else(|| {
                Error::input(format!("root NPU {r} is not among the participants"))
            })? as u32,
        };
        // Counted in u64: a piece index is a u32, so the product must be checked, not wrapped.
        let ranks = npus.len() as u64;
        let (per_buffer, total, how) = match kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => {
                (chunks as u64, chunks as u64, format!("{chunks} chunks"))
            }
            CollectiveKind::AllToAll => (
                ranks * chunks as u64,
                ranks * ranks * chunks as u64,
                format!("{ranks} x {ranks} ranks x {chunks} chunks"),
            ),
            _ => (
                ranks * chunks as u64,
                ranks * chunks as u64,
                format!("{ranks} ranks x {chunks} chunks"),
            ),
        };
        if total > u32::MAX as u64 {
            return Err(Error::input(format!(
                "{kind} over {ranks} NPUs with {chunks} chunk(s) makes {total} pieces ({how}), \
                 more than collsim numbers ({}); give fewer chunks or NPUs",
                u32::MAX
            )));
        }
        if size < per_buffer {
            return Err(Error::input(format!(
                "size {size} B cannot be split into {per_buffer} pieces of at least 1 B{}; give a \
                 larger size or fewer chunks",
                if kind.is_rooted() && per_buffer == chunks as u64 {
                    String::new()
                } else {
                    format!(" ({ranks} ranks x {chunks} chunks)")
                }
            )));
        }
        Ok(Collective {
            kind,
            npus,
            root_rank,
            size,
            chunks,
        })
    }

    pub fn ranks(&self) -> u32 {
        self.npus.len() as u32
    }

    /// Each participant's rank, by NPU id.
    pub fn ranks_by_npu(&self) -> std::collections::HashMap<NodeId, u32> {
        self.npus
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u32))
            .collect()
    }

    pub fn root(&self) -> NodeId {
        self.npus[self.root_rank as usize]
    }

    /// Pieces the `size` buffer is cut into.
    fn pieces_per_buffer(&self) -> u32 {
        match self.kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => self.chunks,
            _ => self.ranks() * self.chunks,
        }
    }

    /// Total number of pieces.
    pub fn piece_count(&self) -> u32 {
        match self.kind {
            CollectiveKind::AllToAll => self.ranks() * self.ranks() * self.chunks,
            _ => self.pieces_per_buffer(),
        }
    }

    /// Bytes in pieces `0..i` of one buffer.
    fn cumulative(&self, i: u64) -> u64 {
        let m = self.pieces_per_buffer() as u64;
        let (q, r) = (self.size / m, self.size % m);
        let (whole, rest) = (i / m, i % m);
        whole * self.size + rest * q + rest.min(r)
    }

    /// Bytes carried by pieces `lo..hi`.
    pub fn piece_bytes(&self, lo: u32, hi: u32) -> u64 {
        self.cumulative(hi as u64) - self.cumulative(lo as u64)
    }

    /// Pieces of rank `r`'s block: `r*K .. (r+1)*K` for the per-rank layouts.
    pub fn rank_block(&self, rank: u32) -> (u32, u32) {
        (rank * self.chunks, (rank + 1) * self.chunks)
    }

    /// For all-to-all: the pieces rank `src` sends to rank `dst`.
    pub fn a2a_block(&self, src: u32, dst: u32) -> (u32, u32) {
        let base = (src * self.ranks() + dst) * self.chunks;
        (base, base + self.chunks)
    }

    pub fn describe(&self) -> String {
        format!(
            "{} of {} B over {} NPUs, {} chunk(s) per NPU",
            self.kind,
            self.size,
            self.ranks(),
            self.chunks
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_every_spelling() {
        for s in ["all-reduce", "allreduce", "ALL_REDUCE", "AllReduce"] {
            assert_eq!(CollectiveKind::parse(s).unwrap(), CollectiveKind::AllReduce);
        }
        assert!(CollectiveKind::parse("all-scatter").is_err());
    }

    #[test]
    fn uneven_sizes_spread_the_remainder_over_the_first_pieces() {
        let c = Collective::new(CollectiveKind::AllGather, (0..3).collect(), 10, 1, None).unwrap();
        assert_eq!(c.piece_bytes(0, 1), 4);
        assert_eq!(c.piece_bytes(1, 2), 3);
        assert_eq!(c.piece_bytes(0, 3), 10);
    }

    #[test]
    fn all_to_all_pieces_repeat_the_buffer_per_rank() {
        let c =
            Collective::new(CollectiveKind::AllToAll, (0..4).collect(), 1 << 20, 2, None).unwrap();
        assert_eq!(c.piece_count(), 32);
        assert_eq!(c.piece_bytes(0, 32), 4 << 20);
        assert_eq!(
            c.piece_bytes(c.a2a_block(1, 2).0, c.a2a_block(1, 2).1),
            1 << 18
        );
    }

    #[test]
    fn too_small_sizes_and_bad_roots_are_errors() {
        assert!(Collective::new(CollectiveKind::AllReduce, (0..8).collect(), 7, 1, None).is_err());
        assert!(
            Collective::new(CollectiveKind::Broadcast, (0..8).collect(), 64, 1, Some(9)).is_err()
        );
        assert!(Collective::new(CollectiveKind::AllReduce, vec![0, 0], 64, 1, None).is_err());
    }
}
