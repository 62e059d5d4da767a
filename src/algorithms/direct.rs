//! Direct: every NPU exchanges with every other NPU at once, addressing them in ascending order
//! (ASTRA-sim's; on a switch every NPU's first transfer then queues on NPU 0's downlink, which
//! holds all-to-all to half the bound) or staggered (NPU `i` to `i+1`, `i+2`, ...).

use super::builder::Builder;
use rayon::prelude::*;

use super::collectives::{destination, direct_exchange};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, TransferSizes};
use crate::topology::NodeId;
use crate::Error;

/// Direct schedule for `collective`. All-to-all issues, for each source rank, for each destination
/// rank (ascending, or from the next rank round when `staggered`), for each chunk, one transfer.
pub fn generate(c: &Collective, staggered: bool) -> Result<Schedule, Error> {
    let n = c.ranks();
    let k = c.chunks;
    if c.kind == CollectiveKind::AllToAll {
        // Built without the data-flow builder: 67M transfers at 8192 NPUs, and no dependencies.
        let per_source = (n as u64 - 1) * k as u64;
        let transfers = n as u64 * per_source;
        crate::memory::ensure(
            crate::memory::bytes(transfers, crate::memory::BYTES_PER_TRANSFER),
            &format!("a direct all-to-all of {transfers} transfers"),
            "try fewer NPUs or a smaller --chunks",
        )?;
        // A piece's size depends only on its place in its source's buffer (destination, chunk):
        // a transfer stores its size's class among the buffer's few distinct sizes.
        let buffer = n * k;
        let sizes: Vec<u64> = (0..buffer).map(|j| c.piece_bytes(j, j + 1)).collect();
        let mut table = sizes.clone();
        table.sort_unstable();
        table.dedup();
        let (ends, pieces, stored) = if table.len() <= TransferSizes::MAX_CLASSES {
            let class: Vec<u8> = sizes
                .iter()
                .map(|b| table.binary_search(b).expect("a listed size") as u8)
                .collect();
            let (ends, pieces, classes) =
                all_to_all(c, staggered, transfers as usize, |j| class[j as usize]);
            (ends, pieces, TransferSizes::from_classes(table, classes))
        } else {
            let (ends, pieces, each) =
                all_to_all(c, staggered, transfers as usize, |j| sizes[j as usize]);
            (ends, pieces, TransferSizes::from_each(each))
        };
        let mut s = Schedule::single_piece_copies(ends, stored, pieces);
        s.collective = Some(c.clone());
        return Ok(s);
    }
    let mut b = Builder::new(c)?;
    let all: Vec<u32> = (0..n).collect();
    let whole = (0, c.piece_count());
    let root = c.root_rank;
    match c.kind {
        CollectiveKind::AllReduce => {
            direct_exchange(&mut b, &all, whole, k, Op::Reduce, staggered);
            direct_exchange(&mut b, &all, whole, k, Op::Copy, staggered);
        }
        CollectiveKind::ReduceScatter => {
            direct_exchange(&mut b, &all, whole, k, Op::Reduce, staggered)
        }
        CollectiveKind::AllGather => direct_exchange(&mut b, &all, whole, k, Op::Copy, staggered),
        CollectiveKind::Broadcast | CollectiveKind::Reduce => {
            for p in 0..c.piece_count() {
                for r in (0..n).filter(|&r| r != root) {
                    if c.kind == CollectiveKind::Broadcast {
                        b.send(root, r, (p, p + 1), Op::Copy);
                    } else {
                        b.send(r, root, (p, p + 1), Op::Reduce);
                    }
                }
            }
        }
        CollectiveKind::Gather | CollectiveKind::Scatter => {
            for chunk in 0..k {
                for r in (0..n).filter(|&r| r != root) {
                    let p = r * k + chunk;
                    if c.kind == CollectiveKind::Gather {
                        b.send(r, root, (p, p + 1), Op::Copy);
                    } else {
                        b.send(root, r, (p, p + 1), Op::Copy);
                    }
                }
            }
        }
        CollectiveKind::AllToAll => unreachable!("handled above"),
    }
    Ok(b.finish())
}

/// A direct all-to-all's transfers: each one's ends, piece, and `size` of its place in its
/// source's buffer (a size or its class), in list order. Transfer `i` is worked out from its
/// place alone, so both cores fill the arrays; rayon hands each thread runs of consecutive
/// indices, and a thread steps from the last place it built instead of dividing (a dozen 64-bit
/// divisions a transfer, here and in `piece_bytes`, were most of the generation's time).
fn all_to_all<S: Copy + Default + Send>(
    c: &Collective,
    staggered: bool,
    transfers: usize,
    size: impl Fn(u32) -> S + Sync,
) -> (Vec<(NodeId, NodeId)>, Vec<u32>, Vec<S>) {
    let (n, k) = (c.ranks(), c.chunks);
    let buffer = n * k;
    let mut ends = vec![(0, 0); transfers];
    let mut pieces = vec![0; transfers];
    let mut sizes = vec![S::default(); transfers];
    const RUN: usize = 1 << 14;
    ends.par_chunks_mut(RUN)
        .zip(pieces.par_chunks_mut(RUN))
        .zip(sizes.par_chunks_mut(RUN))
        .enumerate()
        .for_each(|(run, ((ends, pieces), sizes))| {
            let mut at = Place::at((run * RUN) as u64, n, k);
            for i in 0..ends.len() {
                if i > 0 {
                    at = at.next(n, k);
                }
                let dst = destination(at.src, n, staggered, at.ordinal);
                let j = dst * k + at.chunk;
                ends[i] = (c.npus[at.src as usize], c.npus[dst as usize]);
                pieces[i] = at.src * buffer + j;
                sizes[i] = size(j);
            }
        });
    (ends, pieces, sizes)
}

/// Where transfer `index` of a direct all-to-all is in list order: its source, its destination's
/// ordinal (from 1, see [`destination`]) and its chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    index: u64,
    src: u32,
    ordinal: u32,
    chunk: u32,
}

impl Place {
    /// Transfer `index`'s place among `n` ranks with `k` chunks per pair.
    fn at(index: u64, n: u32, k: u32) -> Place {
        let per_source = (n as u64 - 1) * k as u64;
        let rest = index % per_source;
        Place {
            index,
            src: (index / per_source) as u32,
            ordinal: (rest / k as u64) as u32 + 1,
            chunk: (rest % k as u64) as u32,
        }
    }

    /// The next transfer's place among `n` ranks with `k` chunks per pair.
    fn next(self, n: u32, k: u32) -> Place {
        let mut at = Place {
            index: self.index + 1,
            chunk: self.chunk + 1,
            ..self
        };
        if at.chunk == k {
            at.chunk = 0;
            at.ordinal += 1;
            if at.ordinal == n {
                at.ordinal = 1;
                at.src += 1;
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::collectives::destinations;
    use crate::schedule::TransferIndex;

    #[test]
    fn stepping_through_places_matches_computing_each() {
        for (n, k) in [(2, 1), (3, 1), (5, 3), (7, 2), (16, 1)] {
            let mut at = Place::at(0, n, k);
            let total = n as u64 * (n as u64 - 1) * k as u64;
            for i in 1..total {
                at = at.next(n, k);
                assert_eq!(at, Place::at(i, n, k), "n {n}, k {k}, transfer {i}");
            }
        }
    }

    #[test]
    fn all_to_all_lists_sources_then_destinations_then_chunks() {
        // Uneven piece sizes (1000 B over 5 x 5 x 2 pieces) and NPU ids that are not ranks.
        let npus = vec![3, 7, 8, 10, 12];
        for staggered in [false, true] {
            let c = Collective::new(CollectiveKind::AllToAll, npus.clone(), 1000, 2, None).unwrap();
            let s = generate(&c, staggered).unwrap();
            let mut expected = Vec::new();
            for src in 0..5 {
                for dst in destinations(src, 5, staggered) {
                    let (lo, hi) = c.a2a_block(src, dst);
                    for p in lo..hi {
                        let bytes = c.piece_bytes(p, p + 1);
                        expected.push((npus[src as usize], npus[dst as usize], bytes, p));
                    }
                }
            }
            let got: Vec<_> = (0..s.len() as TransferIndex)
                .map(|i| {
                    let t = s.transfer(i);
                    let (lo, hi) = s.pieces(i).unwrap();
                    assert_eq!(hi, lo + 1);
                    assert!(s.deps(i).is_empty());
                    (t.src, t.dst, t.bytes, lo)
                })
                .collect();
            assert_eq!(got, expected, "staggered: {staggered}");
        }
    }
}
