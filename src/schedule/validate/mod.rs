//! Symbolic validation: does a schedule implement the collective it claims?
//!
//! Every rank's contribution to every piece is a seeded pseudo-random 64-bit value; a copy
//! overwrites the destination's value, a reduction adds (wrapping) the source's value to it.
//! Transfers execute in a topological order of their dependencies (list order among the ready
//! ones). A transfer may only send pieces its source holds, and every write it reads must be one
//! of its ancestors (otherwise the value it sends depends on timing); concurrent reductions into one
//! piece are allowed because they commute. At the end every required (rank, piece) must hold
//! exactly the expected value. Errors name the first bad transfer by its id. Neighbouring pieces
//! that every transfer treats alike are checked together by their first ([`atoms`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::{Op, Schedule, TransferIndex};
use crate::collective::{Collective, CollectiveKind};
use crate::Error;
use atoms::Atoms;

mod atoms;

const NONE: u32 = u32::MAX;

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
    ranks: Ranks,
    /// Participants and relays (ranks `c.ranks()..`: NPUs that start holding the zero of every
    /// piece and need nothing at the end, such as a switch that reduces in the network).
    total_ranks: u32,
    seed: u64,
    /// All pieces of the collective.
    pieces: u64,
    /// Runs of pieces every transfer treats alike: each is checked by its first piece.
    atoms: Atoms,
    /// The window's first atom and its atoms (the store's cells a rank), set by `run`.
    first_atom: u32,
    span: u32,
    /// The pieces this pass covers (`window.0..window.1`), and the transfers that carry them.
    window: (u32, u32),
    members: Option<Vec<TransferIndex>>,
    store: Store,
    /// Concurrent reductions beyond the first, per cell (rare: direct algorithms).
    extra: Vec<Vec<u32>>,
    /// Position of each transfer in the execution order, for pruned ancestor searches.
    position: Vec<u32>,
    /// The execution order when it is not list order (dependencies pointing forwards).
    order: Option<Vec<TransferIndex>>,
    visit_mark: Vec<u32>,
    visit_epoch: u32,
    stack: Vec<TransferIndex>,
    scratch: Vec<u32>,
}

/// Checks that `schedule` implements `collective`; the error names the first bad transfer.
pub fn validate(schedule: &Schedule, collective: &Collective, seed: u64) -> Result<(), Error> {
    validate_with_relays(schedule, collective, &[], seed)
}

/// [`validate`] for a schedule that may also reduce into and forward from `relays`: NPUs outside
/// the collective that start holding nothing (the zero of every piece) and need nothing at the
/// end, as a switch reducing in the network (NVLink SHARP) does.
pub fn validate_with_relays(
    schedule: &Schedule,
    collective: &Collective,
    relays: &[crate::topology::NodeId],
    seed: u64,
) -> Result<(), Error> {
    if !schedule.has_pieces() {
        return Err(Error::input(format!(
            "the schedule claims {} but names no chunks (the 'chunk' column), so it cannot be validated; \
             add chunk and op columns or pass --no-validate",
            collective.kind
        )));
    }
    if collective.kind == CollectiveKind::AllToAll && !schedule.has_deps() && relays.is_empty() {
        return validate_one_round_all_to_all(schedule, collective);
    }
    check(Validator::new(schedule, collective, relays, seed))
}

/// Runs `v` over the whole schedule: in one pass when its cells fit, else a group of pieces at
/// a time.
fn check(mut v: Validator) -> Result<(), Error> {
    v.order_transfers()?;
    if v.total_ranks as u64 * v.pieces <= WINDOW_CELLS {
        return v.run();
    }
    by_windows(v)
}

/// Too many (rank, piece) cells to hold at once: pieces that no transfer carries together are
/// independent (a chunk of an all-reduce and the next), so check one group at a time.
fn by_windows(mut v: Validator) -> Result<(), Error> {
    let (schedule, pieces) = (v.schedule, v.pieces as u32);
    let ranks = v.total_ranks as u64;
    let (windows, window_at) = piece_windows(schedule, pieces);
    // Neighbouring groups share a pass while their cells fit the dense store.
    let mut passes: Vec<(u32, u32)> = Vec::new();
    let mut pass_of_window = vec![0u32; windows.len()];
    let mut i = 0;
    while i < windows.len() {
        let mut j = i + 1;
        while j < windows.len() && (windows[j].1 - windows[i].0) as u64 * ranks <= WINDOW_CELLS {
            j += 1;
        }
        pass_of_window[i..j].fill(passes.len() as u32);
        passes.push((windows[i].0, windows[j - 1].1));
        i = j;
    }
    // Each pass's transfers in list order (offsets, then the list filled in index order); bad
    // ranges, reported by the pass over everything, go with the first.
    let pass_of = |t: TransferIndex| match schedule.pieces(t) {
        Some((lo, hi)) if lo < hi && hi <= pieces => {
            pass_of_window[window_at[lo as usize] as usize] as usize
        }
        _ => 0,
    };
    let n = schedule.len() as TransferIndex;
    let mut start = vec![0u32; passes.len() + 1];
    for t in 0..n {
        start[pass_of(t) + 1] += 1;
    }
    for p in 0..passes.len() {
        start[p + 1] += start[p];
    }
    let mut fill = start.clone();
    let mut list = vec![0; n as usize];
    for t in 0..n {
        let p = pass_of(t);
        list[fill[p] as usize] = t;
        fill[p] += 1;
    }
    for (p, &window) in passes.iter().enumerate() {
        v.window = window;
        v.members = Some(list[start[p] as usize..start[p + 1] as usize].to_vec());
        v.extra.clear();
        v.run()?;
    }
    Ok(())
}

/// Cells a validation pass keeps in a dense array; more go to a map.
const DENSE_CELLS: u64 = 1 << 26;
/// Cells of one pass; more are split by piece groups. 16 MiB of cells stays in cache, where a
/// store sized by all cells (512 MiB for a 4096-NPU all-gather) pays a memory miss per access
/// and took a quarter of the whole command.
const WINDOW_CELLS: u64 = 1 << 19;

/// Groups of pieces that transfers carry together (connected through overlapping piece ranges),
/// as windows `lo..hi` that cover every piece in order, and the window of every piece. Linear in
/// transfers and pieces: the furthest end of the ranges starting at each piece, swept in piece
/// order, merges them as sorting the ranges would (the sort took a third of a ring all-reduce's
/// validation).
fn piece_windows(schedule: &Schedule, pieces: u32) -> (Vec<(u32, u32)>, Vec<u32>) {
    // 0: no range starts at the piece (every range ends past its start).
    let mut reach = vec![0u32; pieces as usize];
    for t in 0..schedule.len() as TransferIndex {
        if let Some((lo, hi)) = schedule.pieces(t) {
            if lo < hi && hi <= pieces {
                let r = &mut reach[lo as usize];
                *r = (*r).max(hi);
            }
        }
    }
    let mut windows: Vec<(u32, u32)> = Vec::new();
    let mut next = 0;
    for lo in 0..pieces {
        let hi = reach[lo as usize];
        if hi == 0 {
            continue;
        }
        match windows.last_mut() {
            Some(w) if lo < w.1 => w.1 = w.1.max(hi),
            _ => {
                // Pieces no transfer carries form windows too, so that the final check covers
                // them.
                if lo > next {
                    windows.push((next, lo));
                }
                windows.push((lo, hi));
            }
        }
        next = windows.last().map_or(0, |w| w.1);
    }
    if next < pieces {
        windows.push((next, pieces));
    }
    let mut window_at = reach;
    for (i, &(lo, hi)) in windows.iter().enumerate() {
        window_at[lo as usize..hi as usize].fill(i as u32);
    }
    (windows, window_at)
}

/// The rank of every NPU of a collective, by NPU id (a table: looked up twice per transfer).
struct Ranks(Vec<u32>);

impl Ranks {
    /// Participants by rank, then `relays`.
    fn new(c: &Collective, relays: &[u32]) -> Ranks {
        let all = || c.npus.iter().chain(relays);
        let mut table = vec![NONE; all().max().map_or(0, |&m| m as usize + 1)];
        for (r, &npu) in all().enumerate() {
            table[npu as usize] = r as u32;
        }
        Ranks(table)
    }

    fn get(&self, npu: u32) -> Option<u32> {
        self.0.get(npu as usize).copied().filter(|&r| r != NONE)
    }

    /// The rank of transfer `id`'s `role` (source or destination) NPU, or the error naming it.
    fn of(&self, npu: u32, id: u64, role: &str) -> Result<u32, Error> {
        self.get(npu).ok_or_else(|| {
            Error::input(format!(
                "transfer {id}: {role} NPU {npu} is not a participant of the collective"
            ))
        })
    }
}

/// An all-to-all without dependencies issues everything at once, so nothing can be relayed: it is
/// correct exactly when every transfer copies pieces its source originated and every piece reaches
/// its destination. One bit per piece instead of a cell per (rank, piece): at 8192 NPUs that is
/// 8 MiB instead of gigabytes.
fn validate_one_round_all_to_all(schedule: &Schedule, c: &Collective) -> Result<(), Error> {
    let (n, k) = (c.ranks(), c.chunks);
    let pieces = c.piece_count();
    let ranks = Ranks::new(c, &[]);
    let mut delivered = vec![0u64; (pieces as usize).div_ceil(64)];
    // A rank's data for itself is in place from the start.
    for r in 0..n {
        let (lo, hi) = c.a2a_block(r, r);
        (lo..hi).for_each(|p| delivered[p as usize / 64] |= 1 << (p % 64));
    }
    for t in 0..schedule.len() as TransferIndex {
        let id = schedule.id(t);
        let transfer = schedule.transfer(t);
        let (src, dst) = (
            ranks.of(transfer.src, id, "source")?,
            ranks.of(transfer.dst, id, "destination")?,
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

impl<'a> Validator<'a> {
    fn new(schedule: &'a Schedule, c: &'a Collective, relays: &[u32], seed: u64) -> Validator<'a> {
        let pieces = c.piece_count() as u64;
        Validator {
            schedule,
            c,
            ranks: Ranks::new(c, relays),
            total_ranks: c.ranks() + relays.len() as u32,
            seed,
            pieces,
            atoms: Atoms::new(schedule, c, pieces as u32),
            first_atom: 0,
            span: 0,
            window: (0, pieces as u32),
            members: None,
            store: Store::Dense(Vec::new()),
            extra: Vec::new(),
            position: vec![NONE; schedule.len()],
            order: None,
            visit_mark: vec![0; schedule.len()],
            visit_epoch: 0,
            stack: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// One pass over the current window: initial data, every member transfer, the final state.
    fn run(&mut self) -> Result<(), Error> {
        self.span = self.window_atoms();
        self.first_atom = match self.span {
            0 => 0,
            _ => self.atoms.index(self.window.0),
        };
        let cells = self.total_ranks as u64 * self.span as u64;
        match &mut self.store {
            // Passes over piece windows reuse one allocation.
            Store::Dense(v) if cells <= DENSE_CELLS => {
                v.clear();
                v.resize(cells as usize, EMPTY);
            }
            _ if cells <= DENSE_CELLS => self.store = Store::Dense(vec![EMPTY; cells as usize]),
            _ => self.store = Store::Sparse(HashMap::new()),
        }
        self.initialise();
        self.execute()?;
        self.check_final()
    }

    /// Atoms in the window (a cell a rank each).
    fn window_atoms(&self) -> u32 {
        let (lo, hi) = self.window;
        if lo >= hi {
            return 0;
        }
        self.atoms.index(hi - 1) - self.atoms.index(lo) + 1
    }

    /// The first pieces of the atoms of `lo..hi` inside the window.
    fn within(&self, lo: u32, hi: u32) -> Vec<u32> {
        self.atoms
            .firsts(lo.max(self.window.0), hi.min(self.window.1))
    }

    /// The first pieces of the window's atoms.
    fn all_pieces(&self) -> Vec<u32> {
        self.within(self.window.0, self.window.1)
    }

    fn key(&self, rank: u32, piece: u32) -> u64 {
        let atom = self.atoms.index(piece) - self.first_atom;
        rank as u64 * self.span as u64 + atom as u64
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
        for relay in n..self.total_ranks {
            for p in self.all_pieces() {
                let zero = Cell {
                    held: true,
                    ..EMPTY
                };
                self.store.set(self.key(relay, p), zero);
            }
        }
        match c.kind {
            CollectiveKind::AllGather | CollectiveKind::Gather => {
                for r in 0..n {
                    let (lo, hi) = c.rank_block(r);
                    for p in self.within(lo, hi) {
                        self.give(r, p, r);
                    }
                }
            }
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce => {
                let firsts = self.all_pieces();
                for r in 0..n {
                    firsts.iter().for_each(|&p| self.give(r, p, r));
                }
            }
            CollectiveKind::AllToAll => {
                for r in 0..n {
                    for q in 0..n {
                        let (lo, hi) = c.a2a_block(r, q);
                        for p in self.within(lo, hi) {
                            self.give(r, p, r);
                        }
                    }
                }
            }
            CollectiveKind::Broadcast | CollectiveKind::Scatter => {
                for p in self.all_pieces() {
                    self.give(root, p, root);
                }
            }
        }
    }

    fn execute(&mut self) -> Result<(), Error> {
        // Ancestor searches run over the whole schedule (every path is a real ordering); only
        // the transfers of the current piece window change the state.
        let members = self.members.take();
        let result = self.execute_members(members.as_deref());
        self.members = members;
        result
    }

    fn execute_members(&mut self, members: Option<&[TransferIndex]>) -> Result<(), Error> {
        let n = self.schedule.len() as TransferIndex;
        match (members, self.order.take()) {
            (None, None) => (0..n).try_for_each(|t| self.apply(t))?,
            (Some(list), None) => self.apply_scattered(list)?,
            (None, Some(order)) => {
                let result = order.iter().try_for_each(|&t| self.apply(t));
                self.order = Some(order);
                result?
            }
            (Some(list), Some(order)) => {
                let mut list = list.to_vec();
                list.sort_unstable_by_key(|&t| self.position[t as usize]);
                self.order = Some(order);
                self.apply_scattered(&list)?
            }
        }
        Ok(())
    }

    /// Applies a window's transfers, which lie scattered over the schedule (a window's pieces
    /// are a small share of every step): each transfer's entries, then its source and destination
    /// cells, are fetched into cache a few transfers ahead, so that the misses overlap.
    fn apply_scattered(&mut self, list: &[TransferIndex]) -> Result<(), Error> {
        const AHEAD: usize = 8;
        for (i, &t) in list.iter().enumerate() {
            if let Some(&far) = list.get(i + 2 * AHEAD) {
                self.schedule.prefetch(far);
            }
            if let Some(&near) = list.get(i + AHEAD) {
                self.prefetch_cells(near);
            }
            self.apply(t)?;
        }
        Ok(())
    }

    /// Hints the cells transfer `t` reads and writes (its first piece at both ends).
    fn prefetch_cells(&self, t: TransferIndex) {
        let Store::Dense(cells) = &self.store else {
            return;
        };
        let transfer = self.schedule.transfer(t);
        let lo = self.schedule.pieces(t).map_or(0, |p| p.0);
        if lo < self.window.0 || lo >= self.window.1 {
            return;
        }
        for npu in [transfer.src, transfer.dst] {
            if let Some(rank) = self.ranks.get(npu) {
                if let Some(cell) = cells.get(self.key(rank, lo) as usize) {
                    crate::memory::prefetch(cell);
                }
            }
        }
    }

    /// Fixes the execution order once (list order when dependencies point backwards, else the
    /// smallest ready transfer first) and each transfer's position in it.
    fn order_transfers(&mut self) -> Result<(), Error> {
        let s = self.schedule;
        let n = s.len();
        if s.deps_point_backwards() {
            for t in 0..n as TransferIndex {
                self.position[t as usize] = t;
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
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(t)) = ready.pop() {
            self.position[t as usize] = order.len() as u32;
            order.push(t);
            if !start.is_empty() {
                for &d in &dependents[start[t as usize] as usize..start[t as usize + 1] as usize] {
                    waiting[d as usize] -= 1;
                    if waiting[d as usize] == 0 {
                        ready.push(Reverse(d));
                    }
                }
            }
        }
        if order.len() != n {
            return Err(Error::input("the schedule's dependencies form a cycle"));
        }
        self.order = Some(order);
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
        let deps = self.schedule.deps(t);
        if deps.contains(&w) {
            return true;
        }
        let floor = self.position[w as usize];
        self.visit_epoch += 1;
        self.stack.clear();
        self.stack.extend_from_slice(deps);
        while let Some(x) = self.stack.pop() {
            if x == w {
                return true;
            }
            if self.visit_mark[x as usize] == self.visit_epoch || self.position[x as usize] <= floor
            {
                continue;
            }
            self.visit_mark[x as usize] = self.visit_epoch;
            self.stack.extend_from_slice(self.schedule.deps(x));
        }
        false
    }

    fn apply(&mut self, t: TransferIndex) -> Result<(), Error> {
        let s = self.schedule;
        if s.wait(t).is_some() {
            // A local wait (pacing, compute) moves no data.
            return Ok(());
        }
        let id = s.id(t);
        let transfer = s.transfer(t);
        let (src, dst) = (
            self.ranks.of(transfer.src, id, "source")?,
            self.ranks.of(transfer.dst, id, "destination")?,
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
        let mut next = lo;
        while next < hi {
            let p = next;
            next = self.atoms.next_start(p + 1, hi);
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
            // Between reductions order does not matter (they commute): a direct dependency only
            // lets the cell's writer list shrink to `t`, else `t` joins the list.
            let ordered = previous.iter().all(|&w| {
                if op == Op::Reduce && s.op(w) == Op::Reduce {
                    s.deps(t).contains(&w)
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
        let firsts = self.all_pieces();
        match c.kind {
            CollectiveKind::AllGather => {
                for r in 0..n {
                    for &p in &firsts {
                        self.require(r, p, contribution(self.seed, p / k, p), 1)?;
                    }
                }
            }
            CollectiveKind::Gather => {
                for &p in &firsts {
                    self.require(root, p, contribution(self.seed, p / k, p), 1)?;
                }
            }
            CollectiveKind::AllReduce => {
                for &p in &firsts {
                    let total = sum(p);
                    for r in 0..n {
                        self.require(r, p, total, n)?;
                    }
                }
            }
            CollectiveKind::ReduceScatter => {
                for &p in &firsts {
                    self.require(p / k, p, sum(p), n)?;
                }
            }
            CollectiveKind::Reduce => {
                for &p in &firsts {
                    self.require(root, p, sum(p), n)?;
                }
            }
            CollectiveKind::AllToAll => {
                for r in 0..n {
                    for q in 0..n {
                        let (lo, hi) = c.a2a_block(r, q);
                        for p in self.within(lo, hi) {
                            self.require(q, p, contribution(self.seed, r, p), 1)?;
                        }
                    }
                }
            }
            CollectiveKind::Broadcast => {
                for r in 0..n {
                    for &p in &firsts {
                        self.require(r, p, contribution(self.seed, root, p), 1)?;
                    }
                }
            }
            CollectiveKind::Scatter => {
                for &p in &firsts {
                    self.require(p / k, p, contribution(self.seed, root, p), 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
