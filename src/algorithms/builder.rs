//! A schedule builder that derives dependencies from data flow: a send of pieces from a rank
//! depends on the transfers that last wrote those pieces there, and a copy into a rank also waits
//! for earlier writes of its pieces (so writes never race). Concurrent reductions into one piece
//! stay concurrent: they commute. Generators only say what moves where, in issue order.

use std::collections::HashMap;

use crate::collective::Collective;
use crate::schedule::{Op, Schedule, Transfer, TransferIndex};

const NONE: u32 = u32::MAX;

pub(crate) struct Builder<'c> {
    pub c: &'c Collective,
    schedule: Schedule,
    pieces: u64,
    /// Last copy or first reduction that wrote (rank, piece).
    writer: Vec<u32>,
    /// Further concurrent reductions into (rank, piece).
    more: HashMap<u64, Vec<u32>>,
    deps: Vec<TransferIndex>,
}

impl<'c> Builder<'c> {
    pub fn new(c: &'c Collective) -> Builder<'c> {
        let pieces = c.piece_count() as u64;
        Builder {
            c,
            schedule: Schedule::new(),
            pieces,
            writer: vec![NONE; (c.ranks() as u64 * pieces) as usize],
            more: HashMap::new(),
            deps: Vec::new(),
        }
    }

    fn key(&self, rank: u32, piece: u32) -> u64 {
        rank as u64 * self.pieces + piece as u64
    }

    fn collect_writers(&mut self, key: u64) {
        let w = self.writer[key as usize];
        if w != NONE {
            self.deps.push(w);
        }
        if let Some(more) = self.more.get(&key) {
            self.deps.extend_from_slice(more);
        }
    }

    /// Sends pieces `lo..hi` from rank `src` to rank `dst` and returns the transfer.
    pub fn send(&mut self, src: u32, dst: u32, pieces: (u32, u32), op: Op) -> TransferIndex {
        self.send_after(src, dst, pieces, op, &[])
    }

    /// Like [`Builder::send`], also waiting for the transfers `after` (pacing the issue order).
    pub fn send_after(
        &mut self,
        src: u32,
        dst: u32,
        (lo, hi): (u32, u32),
        op: Op,
        after: &[TransferIndex],
    ) -> TransferIndex {
        self.deps.clear();
        self.deps.extend_from_slice(after);
        for p in lo..hi {
            let from = self.key(src, p);
            self.collect_writers(from);
            let to = self.key(dst, p);
            match op {
                Op::Copy => self.collect_writers(to),
                // A reduction waits for the last copy into its destination, not for other
                // reductions: those commute.
                Op::Reduce => {
                    let w = self.writer[to as usize];
                    if w != NONE && self.schedule.op(w) == Op::Copy {
                        self.deps.push(w);
                    }
                }
            }
        }
        self.deps.sort_unstable();
        self.deps.dedup();
        let transfer = Transfer {
            src: self.c.npus[src as usize],
            dst: self.c.npus[dst as usize],
            bytes: self.c.piece_bytes(lo, hi),
        };
        let deps = std::mem::take(&mut self.deps);
        let t = self.schedule.push_data(transfer, &deps, (lo, hi), op);
        self.deps = deps;
        for p in lo..hi {
            let to = self.key(dst, p);
            let previous = self.writer[to as usize];
            let concurrent =
                op == Op::Reduce && previous != NONE && self.schedule.op(previous) == Op::Reduce;
            if concurrent {
                self.more.entry(to).or_default().push(t);
            } else {
                self.writer[to as usize] = t;
                self.more.remove(&to);
            }
        }
        t
    }

    /// The finished schedule, claiming the builder's collective.
    pub fn finish(self) -> Schedule {
        let mut s = self.schedule;
        s.collective = Some(self.c.clone());
        s
    }
}

/// Pieces of part `i` of `g` equal parts of `lo..hi`, then segment `s` of `segments` of that part.
pub(crate) fn part(lo: u32, hi: u32, g: u32, i: u32, segments: u32, s: u32) -> (u32, u32) {
    let len = hi - lo;
    debug_assert!(
        len.is_multiple_of(g * segments),
        "{len} pieces do not split into {g}x{segments}"
    );
    let part_len = len / g;
    let seg_len = part_len / segments;
    let start = lo + i * part_len + s * seg_len;
    (start, start + seg_len)
}
