//! Validation of a copy collective (all-gather, broadcast) handed over one transfer at a time, in
//! the order a synthesizer plans it, for schedules too large to hold (see
//! [`crate::sim::InOrder`], which simulates them the same way).
//!
//! Copies move a piece's one value, so holding it is the whole state: a bit per rank and piece.
//! A transfer may send a piece its source held from the start, or one that the transfer it
//! depends on delivered there; each (rank, piece) is written once, so that write is the one it
//! reads. At the end every rank must hold every piece. This is what [`super::validate`] checks on
//! such schedules, with one more demand: a piece delivered twice to one rank is refused here (the
//! symbolic validator allows it when the writes are ordered), so that plan must be validated
//! whole.

use crate::collective::{Collective, CollectiveKind};
use crate::topology::NodeId;
use crate::Error;

/// Transfers back that a dependency may reach, as a power of two: 2^26. A synthesized
/// all-gather's sends depend on sends a few rounds of the whole network back (about 8M on a
/// 200x200 mesh).
const WINDOW_BITS: u32 = 26;

/// What the in-order passes keep of the last transfers of a stream (completion times,
/// deliveries) for the transfers that depend on them: the last `min(expected, 2^26)` rounded up
/// to a power of two, so that memory stays bounded however long the schedule.
pub struct RecentTransfers<T> {
    values: Vec<T>,
    mask: u64,
}

impl<T: Copy> RecentTransfers<T> {
    fn window(expected: u64) -> u64 {
        expected.max(1).next_power_of_two().min(1 << WINDOW_BITS)
    }

    /// Bytes kept for a stream of `expected` transfers.
    pub fn bytes_for(expected: u64) -> u64 {
        Self::window(expected) * std::mem::size_of::<T>() as u64
    }

    /// Room for a stream of `expected` transfers, every slot `fill`.
    pub fn new(expected: u64, fill: T) -> RecentTransfers<T> {
        let window = Self::window(expected);
        RecentTransfers {
            values: vec![fill; window as usize],
            mask: window - 1,
        }
    }

    /// How many transfers back the values reach.
    pub fn reach(&self) -> u64 {
        self.mask + 1
    }

    /// Transfer `d`'s value as transfer `t` sees it: None unless `d` is among the `reach`
    /// transfers before `t`.
    pub fn get(&self, t: u64, d: u64) -> Option<T> {
        (d < t && t - d <= self.mask).then(|| self.values[(d & self.mask) as usize])
    }

    /// Fetches transfer `d`'s slot into the cache ahead of its [`RecentTransfers::get`].
    pub fn prefetch(&self, d: u64) {
        crate::memory::prefetch(&self.values[(d & self.mask) as usize]);
    }

    /// Keeps transfer `t`'s value.
    pub fn set(&mut self, t: u64, value: T) {
        self.values[(t & self.mask) as usize] = value;
    }
}

const NOT_A_RANK: u32 = u32::MAX;

/// A copy collective's validation, fed one transfer at a time (see the module's documentation).
pub struct InOrderCheck {
    claim: Collective,
    /// Rank of each node id (`NOT_A_RANK` for others).
    rank_of: Vec<u32>,
    pieces: u32,
    words: usize,
    /// Per rank, a bit per piece: held.
    held: Vec<u64>,
    /// (destination rank, piece) of the last transfers.
    delivered: RecentTransfers<(u32, u32)>,
    count: u64,
}

impl InOrderCheck {
    /// Bytes the validation of `claim` in `expected` transfers holds.
    pub fn bytes_for(claim: &Collective, expected: u64) -> u64 {
        let words = claim.piece_count().div_ceil(64) as u64;
        RecentTransfers::<(u32, u32)>::bytes_for(expected) + claim.ranks() as u64 * words * 8
    }

    /// Whether `claim` can be validated in order: copy collectives (all-gather, broadcast).
    pub fn takes(claim: &Collective) -> bool {
        matches!(
            claim.kind,
            CollectiveKind::AllGather | CollectiveKind::Broadcast
        )
    }

    /// A validation that `claim` is implemented by at most `expected` transfers to come.
    pub fn new(claim: &Collective, expected: u64) -> Result<InOrderCheck, Error> {
        if !InOrderCheck::takes(claim) {
            return Err(Error::Internal(format!(
                "in-order validation takes copy collectives, not {}",
                claim.kind
            )));
        }
        let nodes = claim
            .npus
            .iter()
            .map(|&v| v as usize + 1)
            .max()
            .unwrap_or(0);
        let mut rank_of = vec![NOT_A_RANK; nodes];
        for (r, &v) in claim.npus.iter().enumerate() {
            rank_of[v as usize] = r as u32;
        }
        let pieces = claim.piece_count();
        let words = pieces.div_ceil(64) as usize;
        let mut check = InOrderCheck {
            claim: claim.clone(),
            rank_of,
            pieces,
            words,
            held: vec![0; claim.ranks() as usize * words],
            delivered: RecentTransfers::new(expected, (NOT_A_RANK, 0)),
            count: 0,
        };
        for p in 0..pieces {
            let first = check.first_holder(p);
            check.set(first, p);
        }
        Ok(check)
    }

    /// The rank holding piece `p` from the start.
    fn first_holder(&self, p: u32) -> u32 {
        match self.claim.kind {
            CollectiveKind::Broadcast => self.claim.root_rank,
            _ => p / self.claim.chunks,
        }
    }

    fn bit(&self, rank: u32, piece: u32) -> (usize, u64) {
        (
            rank as usize * self.words + piece as usize / 64,
            1 << (piece % 64),
        )
    }

    fn has(&self, rank: u32, piece: u32) -> bool {
        let (word, bit) = self.bit(rank, piece);
        self.held[word] & bit != 0
    }

    fn set(&mut self, rank: u32, piece: u32) {
        let (word, bit) = self.bit(rank, piece);
        self.held[word] |= bit;
    }

    fn rank(&self, t: u64, role: &str, npu: NodeId) -> Result<u32, Error> {
        match self.rank_of.get(npu as usize) {
            Some(&r) if r != NOT_A_RANK => Ok(r),
            _ => Err(Error::input(format!(
                "transfer {t}: {role} NPU {npu} is not a participant of the collective"
            ))),
        }
    }

    /// Fetches what [`InOrderCheck::push`] of the same transfer will read into the cache: the
    /// transfers are handed over in blocks, so this runs a few transfers ahead of the checks,
    /// whose reads are scattered over the ranks' pieces and the window (most of their time).
    pub fn prefetch(&self, src: NodeId, dst: NodeId, piece: u32, dep: Option<u64>) {
        if let Some(d) = dep {
            self.delivered.prefetch(d);
        }
        for npu in [src, dst] {
            if let Some(&rank) = self.rank_of.get(npu as usize).filter(|&&r| r != NOT_A_RANK) {
                if let Some(word) = self.held.get(self.bit(rank, piece).0) {
                    crate::memory::prefetch(word);
                }
            }
        }
    }

    /// Checks the next transfer: a copy of `piece` (`bytes`) from `src` to `dst` after transfer
    /// `dep` (an index among those pushed before), or with no dependency.
    pub fn push(
        &mut self,
        src: NodeId,
        dst: NodeId,
        piece: u32,
        bytes: u64,
        dep: Option<u64>,
    ) -> Result<(), Error> {
        let t = self.count;
        let (from, to) = (
            self.rank(t, "source", src)?,
            self.rank(t, "destination", dst)?,
        );
        if piece >= self.pieces {
            return Err(Error::input(format!(
                "transfer {t}: chunk range {piece}..{} is outside the collective's {} pieces",
                piece + 1,
                self.pieces
            )));
        }
        let want = self.claim.piece_bytes(piece, piece + 1);
        if bytes != want {
            return Err(Error::input(format!(
                "transfer {t}: carries {bytes} bytes but pieces {piece}..{} are {want} bytes",
                piece + 1
            )));
        }
        let brought = match dep {
            None => self.first_holder(piece) == from,
            Some(d) => match self.delivered.get(t, d) {
                Some(delivery) => delivery == (from, piece),
                None => {
                    return Err(Error::input(format!(
                        "transfer {t} depends on transfer {d}: the in-order validation needs \
                         every dependency among the {} transfers before it",
                        self.delivered.reach()
                    )))
                }
            },
        };
        if !brought || !self.has(from, piece) {
            return Err(Error::input(format!(
                "transfer {t}: NPU {src} sends piece {piece} before it holds it (no transfer it \
                 depends on delivers that piece)"
            )));
        }
        if self.has(to, piece) {
            return Err(Error::input(format!(
                "transfer {t}: delivers piece {piece} to NPU {dst} a second time; the in-order \
                 validation takes schedules that write each piece once"
            )));
        }
        self.set(to, piece);
        self.delivered.set(t, (to, piece));
        self.count += 1;
        Ok(())
    }

    /// Checks that every rank ends holding every piece.
    pub fn finish(&self) -> Result<(), Error> {
        let full = |p: u32| {
            if p + 64 <= self.pieces {
                u64::MAX
            } else {
                (1 << (self.pieces - p)) - 1
            }
        };
        for rank in 0..self.claim.ranks() {
            for w in 0..self.words {
                let want = full(w as u32 * 64);
                let missing = !self.held[rank as usize * self.words + w] & want;
                if missing != 0 {
                    let piece = w as u32 * 64 + missing.trailing_zeros();
                    return Err(Error::input(format!(
                        "the schedule does not implement {}: NPU {} never receives piece {piece}; \
                         no transfer delivers it (a dropped transfer?)",
                        self.claim.kind, self.claim.npus[rank as usize]
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// All-gather over NPUs 0, 1, 2 of a line, one piece each, 3 B a piece.
    fn line() -> Collective {
        Collective::new(CollectiveKind::AllGather, vec![0, 1, 2], 9, 1, None).unwrap()
    }

    /// Pieces spread along the line 0 - 1 - 2 and back.
    fn spread(check: &mut InOrderCheck) -> Result<(), Error> {
        check.push(0, 1, 0, 3, None)?; // 0
        check.push(2, 1, 2, 3, None)?; // 1
        check.push(1, 0, 1, 3, None)?; // 2
        check.push(1, 2, 1, 3, None)?; // 3
        check.push(1, 2, 0, 3, Some(0))?; // 4
        check.push(1, 0, 2, 3, Some(1)) // 5
    }

    #[test]
    fn a_complete_all_gather_passes() {
        let mut check = InOrderCheck::new(&line(), 6).unwrap();
        spread(&mut check).unwrap();
        check.finish().unwrap();
    }

    #[test]
    fn each_fault_is_named_at_its_transfer() {
        let mut check = InOrderCheck::new(&line(), 8).unwrap();
        spread(&mut check).unwrap();
        // NPU 0 never got piece 2 from transfer 4 (which brought piece 0 to NPU 2).
        let err = check.push(0, 1, 2, 3, Some(4)).unwrap_err().to_string();
        assert!(
            err.contains("transfer 6: NPU 0 sends piece 2 before"),
            "{err}"
        );
        let err = check.push(0, 1, 0, 3, None).unwrap_err().to_string();
        assert!(err.contains("a second time"), "{err}");
        let err = check.push(0, 1, 0, 4, None).unwrap_err().to_string();
        assert!(err.contains("carries 4 bytes"), "{err}");
        let err = check.push(0, 7, 0, 3, None).unwrap_err().to_string();
        assert!(err.contains("NPU 7 is not a participant"), "{err}");

        let mut short = InOrderCheck::new(&line(), 6).unwrap();
        short.push(0, 1, 0, 3, None).unwrap();
        let err = short.finish().unwrap_err().to_string();
        assert!(err.contains("NPU 0 never receives piece 1"), "{err}");
    }
}
