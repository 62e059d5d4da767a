//! A schedule builder that derives dependencies from data flow: a send of pieces from a rank
//! depends on the transfers that last wrote those pieces there, and a copy into a rank also waits
//! for earlier writes of its pieces (so writes never race). Concurrent reductions into one piece
//! stay concurrent: they commute. Generators only say what moves where, in issue order.

use std::collections::HashMap;

use crate::collective::Collective;
use crate::schedule::{Op, Schedule, Transfer, TransferIndex};
use crate::topology::NodeId;
use crate::units::Time;
use crate::Error;

const NONE: u32 = u32::MAX;
/// Marks a writer entry that names a group of concurrent reductions instead of one transfer.
const GROUP: u32 = 1 << 31;

pub(crate) struct Builder<'c> {
    pub c: &'c Collective,
    /// The participants' NPUs by rank, then the relays' (NPUs that hold no data of their own but
    /// may reduce and forward it: a switch that reduces in the network).
    npus: Vec<NodeId>,
    schedule: Schedule,
    /// Pieces every send carries whole runs of (see [`Builder::with_grain`]), and the runs a
    /// rank has.
    grain: u32,
    runs: u64,
    /// Per (rank, run of `grain` pieces): NONE, the last transfer that wrote it, or `GROUP | g`
    /// when several reductions into it run concurrently (listed in `groups[g]`).
    writer: Vec<u32>,
    groups: Vec<Vec<u32>>,
    /// Groups no writer entry names any more, for reuse.
    free_groups: Vec<u32>,
    deps: Vec<TransferIndex>,
    /// While set: per rank, transfers every send from that rank also waits for.
    gates: Vec<Vec<TransferIndex>>,
}

impl<'c> Builder<'c> {
    /// A builder for `c`, refused when its (rank, piece) table cannot fit in memory.
    pub fn new(c: &'c Collective) -> Result<Builder<'c>, Error> {
        Builder::with_relays(c, &[])
    }

    /// A builder whose ranks `c.ranks()..` are the NPUs `relays` (see [`Builder::relay_rank`]).
    pub fn with_relays(c: &'c Collective, relays: &[NodeId]) -> Result<Builder<'c>, Error> {
        Builder::with_grain(c, relays, 1)
    }

    /// A builder whose every send carries whole runs of `grain` neighbouring pieces, from a
    /// multiple of `grain` (a tree's unit: every rank's share of a chunk): it tracks a writer a
    /// run where the others track one a piece, so that a tree over a thousand ranks keeps a
    /// thousandth of their table.
    pub fn with_grain(
        c: &'c Collective,
        relays: &[NodeId],
        grain: u32,
    ) -> Result<Builder<'c>, Error> {
        let pieces = c.piece_count() as u64;
        let grain = grain.max(1);
        if !pieces.is_multiple_of(grain as u64) {
            return Err(Error::Internal(format!(
                "{pieces} pieces do not split into runs of {grain}"
            )));
        }
        let runs = pieces / grain as u64;
        let mut npus = c.npus.clone();
        npus.extend_from_slice(relays);
        let cells = npus.len() as u64 * runs;
        crate::memory::ensure(
            crate::memory::bytes(cells, 4),
            &format!("tracking {} pieces on {} NPUs", pieces, c.ranks()),
            "try fewer NPUs or a smaller --chunks",
        )?;
        Ok(Builder {
            c,
            npus,
            schedule: Schedule::new(),
            grain,
            runs,
            writer: vec![NONE; cells as usize],
            groups: Vec::new(),
            free_groups: Vec::new(),
            deps: Vec::new(),
            gates: Vec::new(),
        })
    }

    /// Room for `transfers` more transfers, allocated at once (before the first: millions of
    /// transfers grown by doubling are copied and touched twice).
    pub fn reserve(&mut self, transfers: usize) {
        if self.schedule.is_empty() {
            self.schedule = Schedule::with_capacity_for_data(transfers);
        }
    }

    /// The rank under which relay `i` (of those given to [`Builder::with_relays`]) sends.
    pub fn relay_rank(&self, i: u32) -> u32 {
        self.c.ranks() + i
    }

    /// Transfers emitted so far.
    pub fn len(&self) -> usize {
        self.schedule.len()
    }

    /// From now until [`Builder::clear_gates`], every send from rank `r` also waits for
    /// `gates[r]` (a scheduler holding a rank back until earlier work has finished).
    pub fn set_gates(&mut self, gates: Vec<Vec<TransferIndex>>) {
        self.gates = gates;
    }

    pub fn clear_gates(&mut self) {
        self.gates.clear();
    }

    /// Per rank, the last transfer into it from each source among the transfers emitted since
    /// `start`: when they have arrived, that work has reached the rank.
    pub fn last_arrivals(&self, start: usize, ranks: u32) -> Vec<Vec<TransferIndex>> {
        let rank_of = |npu: u32| {
            self.c
                .npus
                .binary_search(&npu)
                .expect("transfers run between participants")
        };
        let mut last: HashMap<(usize, usize), TransferIndex> = HashMap::new();
        for t in start..self.schedule.len() {
            let transfer = self.schedule.transfer(t as TransferIndex);
            last.insert(
                (rank_of(transfer.dst), rank_of(transfer.src)),
                t as TransferIndex,
            );
        }
        let mut out = vec![Vec::new(); ranks as usize];
        for ((dst, _), t) in last {
            out[dst].push(t);
        }
        for list in &mut out {
            list.sort_unstable();
        }
        out
    }

    fn key(&self, rank: u32, piece: u32) -> u64 {
        rank as u64 * self.runs + (piece / self.grain) as u64
    }

    /// The first piece of each run of `lo..hi`.
    fn runs_of(&self, (lo, hi): (u32, u32)) -> std::iter::StepBy<std::ops::Range<u32>> {
        debug_assert!(
            lo.is_multiple_of(self.grain) && hi.is_multiple_of(self.grain),
            "pieces {lo}..{hi} are not whole runs of {}",
            self.grain
        );
        (lo..hi).step_by(self.grain as usize)
    }

    /// Adds the writers of `key` to the dependencies, unless `key`'s writer entry is `*last` (the
    /// entry collected before from the same rank: neighbouring pieces mostly share their writer,
    /// or their group of concurrent reductions, which would otherwise be added once a piece).
    fn collect_writers(&mut self, key: u64, last: &mut u32) {
        let w = self.writer[key as usize];
        if w == *last {
            return;
        }
        *last = w;
        match w {
            NONE => {}
            w if w & GROUP != 0 => {
                let group = &self.groups[(w & !GROUP) as usize];
                self.deps.extend_from_slice(group);
            }
            w => self.deps.push(w),
        }
    }

    /// Records that transfer `t` (with `op`) wrote (rank, piece) `key`.
    fn record_write(&mut self, key: u64, t: TransferIndex, op: Op) {
        let previous = self.writer[key as usize];
        let concurrent = op == Op::Reduce
            && previous != NONE
            && (previous & GROUP != 0 || self.schedule.op(previous) == Op::Reduce);
        if concurrent {
            if previous & GROUP != 0 {
                self.groups[(previous & !GROUP) as usize].push(t);
            } else {
                let g = match self.free_groups.pop() {
                    Some(g) => {
                        self.groups[g as usize].extend_from_slice(&[previous, t]);
                        g
                    }
                    None => {
                        self.groups.push(vec![previous, t]);
                        (self.groups.len() - 1) as u32
                    }
                };
                self.writer[key as usize] = GROUP | g;
            }
            return;
        }
        if previous != NONE && previous & GROUP != 0 {
            self.groups[(previous & !GROUP) as usize].clear();
            self.free_groups.push(previous & !GROUP);
        }
        self.writer[key as usize] = t;
    }

    /// A timer on rank `rank` that completes at `at` (a local wait from the start): a send that
    /// also waits for it starts no earlier, as a time-triggered plan says.
    pub fn timer(&mut self, rank: u32, at: Time) -> TransferIndex {
        self.schedule.push_wait(self.npus[rank as usize], at, &[])
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
        if let Some(gate) = self.gates.get(src as usize) {
            self.deps.extend_from_slice(gate);
        }
        // Writer entries last collected from the source and the destination.
        let (mut from_last, mut to_last) = (NONE, NONE);
        for p in self.runs_of((lo, hi)) {
            let from = self.key(src, p);
            self.collect_writers(from, &mut from_last);
            let to = self.key(dst, p);
            match op {
                Op::Copy => self.collect_writers(to, &mut to_last),
                // A reduction waits for the last copy into its destination, not for other
                // reductions: those commute.
                Op::Reduce => {
                    let w = self.writer[to as usize];
                    if w != NONE
                        && w & GROUP == 0
                        && self.schedule.op(w) == Op::Copy
                        && self.deps.last() != Some(&w)
                    {
                        self.deps.push(w);
                    }
                }
            }
        }
        self.deps.sort_unstable();
        self.deps.dedup();
        let transfer = Transfer {
            src: self.npus[src as usize],
            dst: self.npus[dst as usize],
            bytes: self.c.piece_bytes(lo, hi),
        };
        let deps = std::mem::take(&mut self.deps);
        let t = self.schedule.push_data(transfer, &deps, (lo, hi), op);
        assert!(t < GROUP, "schedule too large for the builder");
        self.deps = deps;
        for p in self.runs_of((lo, hi)) {
            let to = self.key(dst, p);
            self.record_write(to, t, op);
        }
        t
    }

    /// Like [`Builder::send_after`], travelling exactly `route` (nodes from src to dst).
    pub fn send_routed(
        &mut self,
        src: u32,
        dst: u32,
        pieces: (u32, u32),
        op: Op,
        route: &[u32],
        after: &[TransferIndex],
    ) -> TransferIndex {
        let t = self.send_after(src, dst, pieces, op, after);
        self.schedule.set_route(t, route);
        t
    }

    /// A local wait of `duration` on rank `rank` once `after` have completed (pacing).
    pub fn wait(&mut self, rank: u32, duration: Time, after: &[TransferIndex]) -> TransferIndex {
        self.schedule
            .push_wait(self.npus[rank as usize], duration, after)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::CollectiveKind;
    use rand::{Rng, SeedableRng};

    /// A builder tracking runs of pieces derives every send's dependencies as one tracking
    /// pieces does, when the sends carry whole runs: random copies and reductions of whole
    /// runs among six ranks, built both ways.
    #[test]
    fn runs_give_the_dependencies_pieces_give() {
        let c = Collective::new(
            CollectiveKind::AllReduce,
            (0..6).collect(),
            1 << 20,
            8,
            None,
        )
        .unwrap();
        let grain = 6;
        let runs = c.piece_count() / grain;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut by_piece, mut by_run) = (
            Builder::new(&c).unwrap(),
            Builder::with_grain(&c, &[], grain).unwrap(),
        );
        let mut shared = 0;
        for _ in 0..400 {
            let (src, dst) = (rng.random_range(0..6), rng.random_range(0..6));
            let lo = rng.random_range(0..runs);
            let hi = rng.random_range(lo + 1..=runs.min(lo + 3));
            let op = if rng.random_bool(0.5) {
                Op::Copy
            } else {
                Op::Reduce
            };
            let pieces = (lo * grain, hi * grain);
            let (a, b) = (
                by_piece.send(src, dst, pieces, op),
                by_run.send(src, dst, pieces, op),
            );
            assert_eq!(by_piece.schedule.deps(a), by_run.schedule.deps(b));
            shared += by_piece.schedule.deps(a).len();
        }
        assert!(shared > 400, "{shared} dependencies in all");
    }
}
