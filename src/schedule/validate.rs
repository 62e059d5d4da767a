//! Symbolic validation: does a schedule implement the collective it claims?
//!
//! Every rank's contribution to every piece is a seeded pseudo-random 64-bit value; a copy
//! overwrites the destination's value, a reduction adds (wrapping) the source's value to it.
//! Transfers execute in a topological order of their dependencies (list order among the ready
//! ones). A transfer may only send pieces its source holds, and every write it reads must be one
//! of its ancestors (otherwise the value it sends depends on timing); concurrent reductions into one
//! piece are allowed because they commute. At the end every required (rank, piece) must hold
//! exactly the expected value. Errors name the first bad transfer by its id.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::{Op, Schedule, TransferIndex};
use crate::collective::{Collective, CollectiveKind};
use crate::Error;

const NONE: u32 = u32::MAX;

/// Transfers an ancestor search between two reductions into one piece may visit before it treats
/// them as concurrent (which is always correct for commuting reductions, only less compact).
const REDUCTION_ORDER_BUDGET: usize = 256;

/// splitmix64: a portable, seedable mix for the symbolic contributions.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn contribution(seed: u64, rank: u32, piece: u32) -> u64 {
    mix(seed ^ mix(((rank as u64) << 32) | piece as u64))
}

#[derive(Clone, Copy)]
struct Cell {
    value: u64,
    /// Ranks' contributions summed into the value (duplicated reductions overshoot).
    count: u32,
    /// Bit `rank % 64` of every contributing rank: an overlap when reducing is a duplicated
    /// contribution, caught at the transfer that makes it (exact up to 64 ranks).
    contributors: u64,
    /// Last copy (or first reduction) that wrote the cell; NONE for initial data.
    writer: u32,
    /// Index into `extra` of further concurrent reductions, NONE if there are none.
    more: u32,
    held: bool,
}

const EMPTY: Cell = Cell {
    value: 0,
    count: 0,
    contributors: 0,
    writer: NONE,
    more: NONE,
    held: false,
};

/// Cells indexed by rank * pieces + piece; dense when that is small, sparse otherwise
/// (all-to-all has ranks^2 * chunks pieces but each rank only ever holds ranks * chunks of them).
enum Store {
    Dense(Vec<Cell>),
    Sparse(HashMap<u64, Cell>),
}

impl Store {
    fn get(&self, key: u64) -> Cell {
        match self {
            Store::Dense(v) => v[key as usize],
            Store::Sparse(m) => m.get(&key).copied().unwrap_or(EMPTY),
        }
    }

    fn set(&mut self, key: u64, cell: Cell) {
        match self {
            Store::Dense(v) => v[key as usize] = cell,
            Store::Sparse(m) => {
                m.insert(key, cell);
            }
        }
    }
}

struct Validator<'a> {
    schedule: &'a Schedule,
    c: &'a Collective,
    seed: u64,
    pieces: u64,
    store: Store,
    /// Concurrent reductions beyond the first, per cell (rare: direct algorithms).
    extra: Vec<Vec<u32>>,
    /// Position of each transfer in the execution order, for pruned ancestor searches.
    position: Vec<u32>,
    visit_mark: Vec<u32>,
    visit_epoch: u32,
    stack: Vec<TransferIndex>,
    scratch: Vec<u32>,
}

/// Checks that `schedule` implements `collective`; the error names the first bad transfer.
pub fn validate(schedule: &Schedule, collective: &Collective, seed: u64) -> Result<(), Error> {
    if !schedule.has_pieces() {
        return Err(Error::input(format!(
            "the schedule claims {} but names no chunks (the 'chunk' column), so it cannot be validated; \
             add chunk and op columns or pass --no-validate",
            collective.kind
        )));
    }
    if collective.kind == CollectiveKind::AllToAll && !schedule.has_deps() {
        return validate_one_round_all_to_all(schedule, collective);
    }
    let ranks = collective.ranks() as u64;
    let pieces = collective.piece_count() as u64;
    let store = if ranks * pieces <= 1 << 26 {
        Store::Dense(vec![EMPTY; (ranks * pieces) as usize])
    } else {
        Store::Sparse(HashMap::new())
    };
    let mut v = Validator {
        schedule,
        c: collective,
        seed,
        pieces,
        store,
        extra: Vec::new(),
        position: vec![NONE; schedule.len()],
        visit_mark: vec![0; schedule.len()],
        visit_epoch: 0,
        stack: Vec::new(),
        scratch: Vec::new(),
    };
    v.initialise();
    v.execute()?;
    v.check_final()
}

/// An all-to-all without dependencies issues everything at once, so nothing can be relayed: it is
/// correct exactly when every transfer copies pieces its source originated and every piece reaches
/// its destination. One bit per piece instead of a cell per (rank, piece): at 8192 NPUs that is
/// 8 MiB instead of gigabytes.
fn validate_one_round_all_to_all(schedule: &Schedule, c: &Collective) -> Result<(), Error> {
    let (n, k) = (c.ranks(), c.chunks);
    let pieces = c.piece_count();
    let mut rank_of = vec![u32::MAX; c.npus.iter().max().map_or(0, |&m| m as usize + 1)];
    for (r, &npu) in c.npus.iter().enumerate() {
        rank_of[npu as usize] = r as u32;
    }
    let mut delivered = vec![0u64; (pieces as usize).div_ceil(64)];
    // A rank's data for itself is in place from the start.
    for r in 0..n {
        let (lo, hi) = c.a2a_block(r, r);
        (lo..hi).for_each(|p| delivered[p as usize / 64] |= 1 << (p % 64));
    }
    for t in 0..schedule.len() as TransferIndex {
        let id = schedule.id(t);
        let transfer = schedule.transfer(t);
        let rank = |npu: u32, role: &str| match rank_of.get(npu as usize) {
            Some(&r) if r != u32::MAX => Ok(r),
            _ => Err(Error::input(format!(
                "transfer {id}: {role} NPU {npu} is not a participant of the collective"
            ))),
        };
        let (src, dst) = (
            rank(transfer.src, "source")?,
            rank(transfer.dst, "destination")?,
        );
        let (lo, hi) = schedule.pieces(t).unwrap_or((0, 0));
        if hi > pieces || lo >= hi {
            return Err(Error::input(format!(
                "transfer {id}: chunk range {lo}..{hi} is empty or outside the collective's {pieces} pieces"
            )));
        }
        if transfer.bytes != c.piece_bytes(lo, hi) {
            return Err(Error::input(format!(
                "transfer {id}: carries {} bytes but pieces {lo}..{hi} are {} bytes",
                transfer.bytes,
                c.piece_bytes(lo, hi)
            )));
        }
        if schedule.op(t) != Op::Copy {
            return Err(Error::input(format!(
                "transfer {id}: all-to-all moves data; a reduction has no place in it"
            )));
        }
        for p in lo..hi {
            if p / (n * k) != src {
                return Err(Error::input(format!(
                    "transfer {id}: NPU {} sends piece {p} before it holds it (no transfer it depends on \
                     delivers that piece)",
                    transfer.src
                )));
            }
            if (p / k) % n == dst {
                delivered[p as usize / 64] |= 1 << (p % 64);
            }
        }
    }
    if let Some(p) = (0..pieces).find(|&p| delivered[p as usize / 64] & (1 << (p % 64)) == 0) {
        return Err(Error::input(format!(
            "the schedule does not implement all-to-all: NPU {} never receives piece {p}; no transfer \
             delivers it (a dropped transfer?)",
            c.npus[((p / k) % n) as usize]
        )));
    }
    Ok(())
}

impl Validator<'_> {
    fn key(&self, rank: u32, piece: u32) -> u64 {
        rank as u64 * self.pieces + piece as u64
    }

    fn give(&mut self, rank: u32, piece: u32, owner: u32) {
        let cell = Cell {
            value: contribution(self.seed, owner, piece),
            count: 1,
            contributors: 1 << (owner % 64),
            held: true,
            ..EMPTY
        };
        self.store.set(self.key(rank, piece), cell);
    }

    fn initialise(&mut self) {
        let c = self.c;
        let (n, root) = (c.ranks(), c.root_rank);
        match c.kind {
            CollectiveKind::AllGather | CollectiveKind::Gather => {
                for r in 0..n {
                    let (lo, hi) = c.rank_block(r);
                    (lo..hi).for_each(|p| self.give(r, p, r));
                }
            }
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce => {
                for r in 0..n {
                    (0..self.pieces as u32).for_each(|p| self.give(r, p, r));
                }
            }
            CollectiveKind::AllToAll => {
                for r in 0..n {
                    for q in 0..n {
                        let (lo, hi) = c.a2a_block(r, q);
                        (lo..hi).for_each(|p| self.give(r, p, r));
                    }
                }
            }
            CollectiveKind::Broadcast | CollectiveKind::Scatter => {
                (0..self.pieces as u32).for_each(|p| self.give(root, p, root));
            }
        }
    }

    fn execute(&mut self) -> Result<(), Error> {
        let s = self.schedule;
        let n = s.len();
        let mut rank_of: HashMap<u32, u32> = HashMap::with_capacity(self.c.npus.len());
        for (r, &npu) in self.c.npus.iter().enumerate() {
            rank_of.insert(npu, r as u32);
        }
        if s.deps_point_backwards() {
            // List order is then exactly "the smallest ready transfer first".
            for t in 0..n as TransferIndex {
                self.position[t as usize] = t;
                self.apply(t, &rank_of)?;
            }
            return Ok(());
        }
        let (start, dependents) = s.dependents();
        let mut waiting: Vec<u32> = (0..n as TransferIndex)
            .map(|t| s.deps(t).len() as u32)
            .collect();
        let mut ready: BinaryHeap<Reverse<TransferIndex>> = (0..n as TransferIndex)
            .filter(|&t| waiting[t as usize] == 0)
            .map(Reverse)
            .collect();
        let mut order = 0u32;
        while let Some(Reverse(t)) = ready.pop() {
            self.position[t as usize] = order;
            order += 1;
            self.apply(t, &rank_of)?;
            if !start.is_empty() {
                for &d in &dependents[start[t as usize] as usize..start[t as usize + 1] as usize] {
                    waiting[d as usize] -= 1;
                    if waiting[d as usize] == 0 {
                        ready.push(Reverse(d));
                    }
                }
            }
        }
        if order as usize != n {
            return Err(Error::input("the schedule's dependencies form a cycle"));
        }
        Ok(())
    }

    /// The writers of a cell, into `out` (cleared first).
    fn writers_into(&self, cell: &Cell, out: &mut Vec<u32>) {
        out.clear();
        if cell.writer != NONE {
            out.push(cell.writer);
        }
        if cell.more != NONE {
            out.extend_from_slice(&self.extra[cell.more as usize]);
        }
    }

    fn writers(&self, cell: &Cell) -> Vec<u32> {
        let mut out = Vec::new();
        self.writers_into(cell, &mut out);
        out
    }

    /// Is `w` an ancestor of `t` in the dependency graph? Searches back from `t`, pruned to
    /// transfers executed after `w`.
    fn is_ancestor(&mut self, w: TransferIndex, t: TransferIndex) -> bool {
        self.is_ancestor_within(w, t, usize::MAX).unwrap_or(false)
    }

    /// Like [`Validator::is_ancestor`], giving up (None) after visiting `budget` transfers.
    fn is_ancestor_within(
        &mut self,
        w: TransferIndex,
        t: TransferIndex,
        mut budget: usize,
    ) -> Option<bool> {
        let deps = self.schedule.deps(t);
        if deps.contains(&w) {
            return Some(true);
        }
        let floor = self.position[w as usize];
        self.visit_epoch += 1;
        self.stack.clear();
        self.stack.extend_from_slice(deps);
        while let Some(x) = self.stack.pop() {
            if x == w {
                return Some(true);
            }
            if self.visit_mark[x as usize] == self.visit_epoch || self.position[x as usize] <= floor
            {
                continue;
            }
            if budget == 0 {
                return None;
            }
            budget -= 1;
            self.visit_mark[x as usize] = self.visit_epoch;
            self.stack.extend_from_slice(self.schedule.deps(x));
        }
        Some(false)
    }

    fn apply(&mut self, t: TransferIndex, rank_of: &HashMap<u32, u32>) -> Result<(), Error> {
        let s = self.schedule;
        let id = s.id(t);
        let transfer = s.transfer(t);
        let rank = |npu: u32, role: &str| {
            rank_of.get(&npu).copied().ok_or_else(|| {
                Error::input(format!(
                    "transfer {id}: {role} NPU {npu} is not a participant of the collective"
                ))
            })
        };
        let (src, dst) = (
            rank(transfer.src, "source")?,
            rank(transfer.dst, "destination")?,
        );
        let (lo, hi) = s.pieces(t).unwrap_or((0, 0));
        if hi > self.pieces as u32 || lo >= hi {
            return Err(Error::input(format!(
                "transfer {id}: chunk range {lo}..{hi} is empty or outside the collective's {} pieces",
                self.pieces
            )));
        }
        let expected_bytes = self.c.piece_bytes(lo, hi);
        if transfer.bytes != expected_bytes {
            return Err(Error::input(format!(
                "transfer {id}: carries {} bytes but pieces {lo}..{hi} are {expected_bytes} bytes",
                transfer.bytes
            )));
        }
        let op = s.op(t);
        for p in lo..hi {
            let from = self.store.get(self.key(src, p));
            if !from.held {
                return Err(Error::input(format!(
                    "transfer {id}: NPU {} sends piece {p} before it holds it (no transfer it depends on \
                     delivers that piece)",
                    transfer.src
                )));
            }
            let mut writers = std::mem::take(&mut self.scratch);
            self.writers_into(&from, &mut writers);
            for &w in &writers {
                if !self.is_ancestor(w, t) {
                    return Err(Error::input(format!(
                        "transfer {id}: sends piece {p} from NPU {} which transfer {} wrote, but does not \
                         depend on it (a send before its data arrived)",
                        transfer.src,
                        s.id(w)
                    )));
                }
            }
            let key = self.key(dst, p);
            let mut to = self.store.get(key);
            self.writers_into(&to, &mut writers);
            let previous = writers;
            // A copy must follow every earlier write, and so must a reduction every earlier copy.
            // Between reductions order does not matter (they commute): a short search decides
            // only whether the cell's writer list can shrink to `t`, else `t` joins the list.
            let ordered = previous.iter().all(|&w| {
                if op == Op::Reduce && s.op(w) == Op::Reduce {
                    self.is_ancestor_within(w, t, REDUCTION_ORDER_BUDGET)
                        .unwrap_or(false)
                } else {
                    self.is_ancestor(w, t)
                }
            });
            match op {
                Op::Copy => {
                    if !ordered {
                        return Err(Error::input(format!(
                            "transfer {id}: copies piece {p} to NPU {} concurrently with another write to it",
                            transfer.dst
                        )));
                    }
                    to = Cell {
                        value: from.value,
                        count: from.count,
                        contributors: from.contributors,
                        writer: t,
                        more: NONE,
                        held: true,
                    };
                }
                Op::Reduce => {
                    if !to.held {
                        return Err(Error::input(format!(
                            "transfer {id}: reduces piece {p} into NPU {} which holds no value for it",
                            transfer.dst
                        )));
                    }
                    if !ordered && previous.iter().any(|&w| s.op(w) != Op::Reduce) {
                        return Err(Error::input(format!(
                            "transfer {id}: reduces piece {p} into NPU {} concurrently with a copy to it",
                            transfer.dst
                        )));
                    }
                    let overlap = self.c.ranks() <= 64 && to.contributors & from.contributors != 0;
                    to.value = to.value.wrapping_add(from.value);
                    to.count += from.count;
                    to.contributors |= from.contributors;
                    if overlap || to.count > self.c.ranks() {
                        return Err(Error::input(format!(
                            "transfer {id}: reduces into piece {p} at NPU {} a contribution it already \
                             holds (a duplicated reduction)",
                            transfer.dst
                        )));
                    }
                    if ordered || to.writer == NONE {
                        to.writer = t;
                        to.more = NONE;
                    } else if to.more == NONE {
                        to.more = self.extra.len() as u32;
                        self.extra.push(vec![t]);
                    } else {
                        self.extra[to.more as usize].push(t);
                    }
                }
            }
            self.store.set(key, to);
            self.scratch = previous;
        }
        Ok(())
    }

    fn require(&self, rank: u32, piece: u32, value: u64, count: u32) -> Result<(), Error> {
        let cell = self.store.get(self.key(rank, piece));
        if cell.held && cell.value == value && cell.count == count {
            return Ok(());
        }
        let npu = self.c.npus[rank as usize];
        let what = if !cell.held {
            "never receives".to_string()
        } else if cell.count != count {
            format!("ends with {} of {count} contributions to", cell.count)
        } else {
            "ends with a wrong value for".to_string()
        };
        let blame = match self.writers(&cell).last() {
            Some(&w) => format!("; last written by transfer {}", self.schedule.id(w)),
            None => "; no transfer delivers it (a dropped transfer?)".to_string(),
        };
        Err(Error::input(format!(
            "the schedule does not implement {}: NPU {npu} {what} piece {piece}{blame}",
            self.c.kind
        )))
    }

    fn check_final(&self) -> Result<(), Error> {
        let c = self.c;
        let (n, root) = (c.ranks(), c.root_rank);
        let sum = |p: u32| {
            (0..n).fold(0u64, |acc, r| {
                acc.wrapping_add(contribution(self.seed, r, p))
            })
        };
        let k = c.chunks;
        match c.kind {
            CollectiveKind::AllGather => {
                for r in 0..n {
                    for p in 0..self.pieces as u32 {
                        self.require(r, p, contribution(self.seed, p / k, p), 1)?;
                    }
                }
            }
            CollectiveKind::Gather => {
                for p in 0..self.pieces as u32 {
                    self.require(root, p, contribution(self.seed, p / k, p), 1)?;
                }
            }
            CollectiveKind::AllReduce => {
                for p in 0..self.pieces as u32 {
                    let total = sum(p);
                    for r in 0..n {
                        self.require(r, p, total, n)?;
                    }
                }
            }
            CollectiveKind::ReduceScatter => {
                for p in 0..self.pieces as u32 {
                    self.require(p / k, p, sum(p), n)?;
                }
            }
            CollectiveKind::Reduce => {
                for p in 0..self.pieces as u32 {
                    self.require(root, p, sum(p), n)?;
                }
            }
            CollectiveKind::AllToAll => {
                for r in 0..n {
                    for q in 0..n {
                        let (lo, hi) = c.a2a_block(r, q);
                        for p in lo..hi {
                            self.require(q, p, contribution(self.seed, r, p), 1)?;
                        }
                    }
                }
            }
            CollectiveKind::Broadcast => {
                for r in 0..n {
                    for p in 0..self.pieces as u32 {
                        self.require(r, p, contribution(self.seed, root, p), 1)?;
                    }
                }
            }
            CollectiveKind::Scatter => {
                for p in 0..self.pieces as u32 {
                    self.require(p / k, p, contribution(self.seed, root, p), 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Transfer;

    fn a2a(n: u32) -> (Schedule, Collective) {
        let c = Collective::new(
            CollectiveKind::AllToAll,
            (0..n).collect(),
            8 * n as u64,
            1,
            None,
        )
        .unwrap();
        let mut s = Schedule::new();
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src) {
                let (lo, hi) = c.a2a_block(src, dst);
                s.push_data(
                    Transfer {
                        src,
                        dst,
                        bytes: c.piece_bytes(lo, hi),
                    },
                    &[],
                    (lo, hi),
                    Op::Copy,
                );
            }
        }
        (s, c)
    }

    #[test]
    fn one_round_all_to_all_accepts_the_direct_pattern_and_rejects_gaps() {
        let (s, c) = a2a(4);
        validate(&s, &c, 1).unwrap();
        // Drop the last transfer: its piece never arrives.
        let mut short = Schedule::new();
        for t in 0..s.len() as u32 - 1 {
            short.push_data(s.transfer(t), &[], s.pieces(t).unwrap(), Op::Copy);
        }
        assert!(validate(&short, &c, 1)
            .unwrap_err()
            .to_string()
            .contains("never receives"));
        // A piece sent by a rank that does not hold it.
        let mut wrong = Schedule::new();
        wrong.push_data(
            Transfer {
                src: 1,
                dst: 2,
                bytes: 8,
            },
            &[],
            c.a2a_block(0, 2),
            Op::Copy,
        );
        assert!(validate(&wrong, &c, 1)
            .unwrap_err()
            .to_string()
            .contains("before it holds it"));
    }

    #[test]
    fn the_general_path_agrees_on_a_relayed_all_to_all() {
        // 0 -> 2 relayed through 1: needs the general executor (dependencies present).
        let c = Collective::new(CollectiveKind::AllToAll, vec![0, 1, 2], 24, 1, None).unwrap();
        let mut s = Schedule::new();
        for src in 0..3u32 {
            for dst in (0..3u32).filter(|&d| d != src && !(src == 0 && d == 2)) {
                let (lo, hi) = c.a2a_block(src, dst);
                s.push_data(Transfer { src, dst, bytes: 8 }, &[], (lo, hi), Op::Copy);
            }
        }
        let hop = s.push_data(
            Transfer {
                src: 0,
                dst: 1,
                bytes: 8,
            },
            &[],
            c.a2a_block(0, 2),
            Op::Copy,
        );
        s.push_data(
            Transfer {
                src: 1,
                dst: 2,
                bytes: 8,
            },
            &[hop],
            c.a2a_block(0, 2),
            Op::Copy,
        );
        validate(&s, &c, 1).unwrap();
    }
}
