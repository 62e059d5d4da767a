//! Atoms: the runs of neighbouring pieces that every transfer treats alike.
//!
//! A transfer carries a range of pieces, and the collective gives and requires data by blocks of
//! pieces (a rank's block, a pair's all-to-all block). Cut the pieces at every range's and every
//! block's ends: inside one run no transfer and no block boundary separates two pieces, so every
//! piece of the run starts alike, is sent, received and reduced by the same transfers in the same
//! order, and must end alike. The symbolic check of the run's first piece therefore decides the
//! whole run, and reports the same first bad piece a check of every piece would. A tree or NVLS
//! schedule whose transfers carry every rank's share of a chunk at once is checked in one cell a
//! rank and chunk instead of one a rank and piece; a ring's single-piece transfers leave every
//! piece its own atom.

use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Schedule, TransferIndex};

/// The atoms of a schedule's pieces, as the set of pieces that start one.
pub(super) struct Atoms {
    /// Bit `p % 64` of word `p / 64`: piece `p` starts an atom.
    starts: Vec<u64>,
    /// Atoms starting in the words before each word.
    before: Vec<u32>,
    pieces: u32,
}

impl Atoms {
    /// The atoms of `pieces` pieces cut by `schedule`'s transfers (ranges outside the pieces are
    /// left to the validator to refuse) and by `c`'s blocks where its data depends on them.
    pub(super) fn new(schedule: &Schedule, c: &Collective, pieces: u32) -> Atoms {
        let ranges = (0..schedule.len() as TransferIndex)
            .filter_map(|t| schedule.pieces(t))
            .filter(|&(lo, hi)| lo < hi && hi <= pieces)
            .flat_map(|(lo, hi)| [lo, hi]);
        // Who holds a piece at the start, or must at the end, depends on its rank's block (or
        // all-to-all's pair block): blocks of `chunks` pieces; else the pieces are one block.
        let by_blocks = !matches!(
            c.kind,
            CollectiveKind::AllReduce | CollectiveKind::Reduce | CollectiveKind::Broadcast
        );
        let block = if by_blocks { c.chunks } else { pieces };
        let blocks = (0..pieces).step_by(block.max(1) as usize);
        Atoms::from_cuts(pieces, blocks.chain(ranges))
    }

    /// Every piece its own atom: validation piece by piece, the plain form the atoms are
    /// held to.
    #[cfg(test)]
    pub(super) fn every_piece(pieces: u32) -> Atoms {
        Atoms::from_cuts(pieces, 0..pieces)
    }

    /// The atoms of `pieces` pieces starting at each of `cuts` (the end of the pieces starts
    /// none).
    fn from_cuts(pieces: u32, cuts: impl IntoIterator<Item = u32>) -> Atoms {
        let mut starts = vec![0u64; (pieces as usize).div_ceil(64)];
        for p in cuts.into_iter().filter(|&p| p < pieces) {
            starts[p as usize / 64] |= 1 << (p % 64);
        }
        let mut count = 0;
        let before = starts
            .iter()
            .map(|w| {
                let here = count;
                count += w.count_ones();
                here
            })
            .collect();
        Atoms {
            starts,
            before,
            pieces,
        }
    }

    /// Atoms in all.
    #[cfg(test)]
    pub(super) fn count(&self) -> u32 {
        self.starts.iter().map(|w| w.count_ones()).sum()
    }

    /// The atom holding piece `p`, counted from the first.
    pub(super) fn index(&self, p: u32) -> u32 {
        let (word, bit) = (p as usize / 64, p % 64);
        self.before[word] + (self.starts[word] & (u64::MAX >> (63 - bit))).count_ones() - 1
    }

    /// The first atom start at or after piece `p`, or `end` if there is none before it.
    pub(super) fn next_start(&self, p: u32, end: u32) -> u32 {
        let end = end.min(self.pieces);
        if p >= end {
            return end;
        }
        let mut word = p as usize / 64;
        let mut bits = self.starts[word] & (u64::MAX << (p % 64));
        loop {
            if bits != 0 {
                let found = (word * 64) as u32 + bits.trailing_zeros();
                return found.min(end);
            }
            word += 1;
            if word * 64 >= end as usize {
                return end;
            }
            bits = self.starts[word];
        }
    }

    /// The first piece of each atom that starts in `lo..hi` (`lo` itself first, as a range or
    /// a block always starts an atom).
    pub(super) fn firsts(&self, lo: u32, hi: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut p = lo;
        while p < hi {
            out.push(p);
            p = self.next_start(p + 1, hi);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Op, Transfer};

    fn schedule(ranges: &[(u32, u32)]) -> Schedule {
        let mut s = Schedule::default();
        for &range in ranges {
            let transfer = Transfer {
                src: 0,
                dst: 1,
                bytes: 1,
            };
            s.push_data(transfer, &[], range, Op::Copy);
        }
        s
    }

    /// Ranges cut the pieces at their ends; an all-reduce has no blocks, an all-gather cuts at
    /// every rank's block; the index and the next start agree with the cuts, across words.
    #[test]
    fn ranges_and_blocks_cut_the_pieces() {
        let all_reduce =
            Collective::new(CollectiveKind::AllReduce, vec![0, 1], 1 << 20, 100, None).unwrap();
        let s = schedule(&[(0, 100), (100, 200), (70, 130)]);
        let atoms = Atoms::new(&s, &all_reduce, 200);
        assert_eq!(atoms.firsts(0, 200), [0, 70, 100, 130]);
        assert_eq!(
            [0, 69, 70, 99, 100, 129, 130, 199].map(|p| atoms.index(p)),
            [0, 0, 1, 1, 2, 2, 3, 3]
        );
        assert_eq!(atoms.next_start(131, 200), 200);
        assert_eq!(atoms.next_start(71, 90), 90);
        let all_gather =
            Collective::new(CollectiveKind::AllGather, vec![0, 1], 1 << 20, 100, None).unwrap();
        let whole = Atoms::new(&schedule(&[(0, 200)]), &all_gather, 200);
        assert_eq!(whole.firsts(0, 200), [0, 100]);
    }
}
