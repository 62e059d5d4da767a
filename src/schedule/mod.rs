//! The schedule IR: a list of point-to-point transfers with dependencies.
//!
//! Every algorithm and the synthesizer produce a [`Schedule`]; the simulator consumes only this. The
//! layout is compact because schedules reach hundreds of millions of transfers (an all-to-all on
//! 8192 NPUs, an all-gather synthesized on a 160x160 mesh): a transfer's ends are 8 bytes, its size
//! a byte while the schedule has few sizes, dependencies one index each until some transfer has
//! several, and the optional piece ranges, operations and file ids are stored only when some
//! transfer has them.

mod assembly;
mod check;
mod in_order;
mod io;
mod msccl;
mod parquet;
mod paths;
mod sizes;
mod validate;

pub use in_order::{InOrderCheck, RecentTransfers};
pub use io::{load_schedule_file, write_schedule_csv, write_schedule_json};
pub use msccl::{load_msccl, msccl_xml, parse_msccl, read_msccl_claim, write_msccl, Claim};
pub(crate) use parquet::{schedule_column, Column, EncodedColumn, ParquetFile};
pub use parquet::{
    schedule_rows, write_schedule_parquet, CopyRows, ScheduleFile, ScheduleRows, ROW_GROUP,
};
pub use paths::{pin_paths, PinnedPaths};
pub use sizes::TransferSizes;
pub use validate::{validate, validate_with_relays};

use std::ops::Range;

use rayon::prelude::*;

use crate::collective::Collective;
use crate::topology::NodeId;
use crate::units::Time;

/// The duration slot of a transfer that is not a wait (no wait lasts 2^64 ps).
const NOT_A_WAIT: Time = Time(u64::MAX);

/// Position of a transfer in its schedule's list.
pub type TransferIndex = u32;

/// What a transfer does to the destination's copy of its pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The destination's copy is overwritten.
    Copy,
    /// The source's value is added to the destination's.
    Reduce,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Copy => "copy",
            Op::Reduce => "reduce",
        }
    }
}

/// Piece ranges `lo..hi` of a schedule's transfers, stored as `lo` alone while every range holds
/// exactly one piece, as most generated schedules' do: 4 bytes a transfer instead of 8 (64 MiB
/// less for a 4096-NPU all-to-all). Transfers past the stored ones carry no pieces (`0..0`), so
/// appending a transfer costs nothing here until its range is set.
#[derive(Clone, Debug, Default)]
struct PieceRanges {
    lo: Vec<u32>,
    /// Per transfer `hi`, once some range holds other than one piece.
    hi: Option<Vec<u32>>,
}

impl PieceRanges {
    fn with_capacity(transfers: usize) -> PieceRanges {
        PieceRanges {
            lo: Vec::with_capacity(transfers),
            hi: None,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> (u32, u32) {
        match (self.lo.get(i), &self.hi) {
            (None, _) => (0, 0),
            (Some(&lo), Some(hi)) => (lo, hi[i]),
            // Without `hi`, no stored `lo` is u32::MAX.
            (Some(&lo), None) => (lo, lo + 1),
        }
    }

    fn set(&mut self, i: usize, (lo, hi): (u32, u32)) {
        if self.hi.is_none() && (lo == u32::MAX || hi != lo + 1 || i > self.lo.len()) {
            self.hi = Some(self.lo.iter().map(|&lo| lo + 1).collect());
        }
        if i >= self.lo.len() {
            self.lo.resize(i + 1, 0);
            if let Some(his) = &mut self.hi {
                his.resize(i + 1, 0);
            }
        }
        self.lo[i] = lo;
        if let Some(his) = &mut self.hi {
            his[i] = hi;
        }
    }

    #[inline(always)]
    fn prefetch(&self, i: usize) {
        if let Some(lo) = self.lo.get(i) {
            crate::memory::prefetch(lo);
        }
        if let Some(hi) = self.hi.as_ref().and_then(|h| h.get(i)) {
            crate::memory::prefetch(hi);
        }
    }
}

/// One point-to-point message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub src: NodeId,
    pub dst: NodeId,
    pub bytes: u64,
}

/// A schedule: transfers in issue order, their dependencies, and what collective (if any) it claims.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// Per transfer, its source and destination.
    ends: Vec<(NodeId, NodeId)>,
    sizes: TransferSizes,
    deps: Deps,
    /// Piece ranges `lo..hi`, present once any transfer names one.
    pieces: Option<PieceRanges>,
    /// Operations, present once any transfer is a reduction.
    ops: Option<Vec<Op>>,
    /// File ids when they differ from list positions.
    ids: Option<Vec<u64>>,
    /// Local waits (compute between collectives in a training iteration): a transfer from an NPU
    /// to itself that carries nothing and completes this long after it is issued. Present once
    /// any transfer is a wait.
    /// Stored as [`NOT_A_WAIT`] for real transfers: 8 bytes a transfer instead of an Option's 16.
    waits: Option<Vec<Time>>,
    /// Explicit routes (CSR offsets per transfer, node lists from src to dst); a transfer with an
    /// empty route follows the topology's routing. Present once any transfer has a route.
    routes: Option<(Vec<u32>, Vec<NodeId>)>,
    /// The collective this schedule claims to implement, if any.
    pub collective: Option<Collective>,
}

/// Stands for no dependency in [`Deps::One`].
const NO_DEP: TransferIndex = TransferIndex::MAX;

/// Every transfer's dependencies. Most schedules (synthesized ones, rings, trees, pipelines) give
/// each transfer at most one: those are kept as one index a transfer (4 bytes), and the offsets
/// of the general form (4 bytes more) only appear once some transfer waits for several. On the
/// largest synthesized meshes, memory per transfer is what limits the size.
#[derive(Clone, Debug, Default)]
enum Deps {
    /// No transfer has a dependency.
    #[default]
    None,
    /// Per transfer, its one dependency or [`NO_DEP`]; how many are not [`NO_DEP`].
    One {
        each: Vec<TransferIndex>,
        count: usize,
    },
    /// CSR offsets per transfer into the list.
    Many {
        start: Vec<u32>,
        list: Vec<TransferIndex>,
    },
}

impl Deps {
    /// Records transfer `index`'s dependencies (`index` is the number recorded so far).
    fn push(&mut self, index: usize, deps: &[TransferIndex]) {
        let fits_one = deps.len() <= 1 && deps.first() != Some(&NO_DEP);
        if !fits_one {
            self.make_many(index);
        }
        match self {
            Deps::None if deps.is_empty() => {}
            Deps::None => {
                let mut each = vec![NO_DEP; index];
                each.push(deps[0]);
                *self = Deps::One { each, count: 1 };
            }
            Deps::One { each, count } => {
                each.push(deps.first().copied().unwrap_or(NO_DEP));
                *count += deps.len();
            }
            Deps::Many { start, list } => {
                list.extend_from_slice(deps);
                assert!(list.len() < u32::MAX as usize, "too many dependencies");
                start.push(list.len() as u32);
            }
        }
    }

    /// Turns the first `transfers` entries into the general form.
    #[cold]
    fn make_many(&mut self, transfers: usize) {
        let (start, list) = match self {
            Deps::Many { .. } => return,
            Deps::None => (vec![0; transfers + 1], Vec::new()),
            Deps::One { each, count } => {
                let mut start = Vec::with_capacity(transfers + 1);
                let mut list = Vec::with_capacity(*count);
                start.push(0);
                for &d in each.iter() {
                    if d != NO_DEP {
                        list.push(d);
                    }
                    start.push(list.len() as u32);
                }
                (start, list)
            }
        };
        *self = Deps::Many { start, list };
    }

    fn get(&self, index: usize) -> &[TransferIndex] {
        match self {
            Deps::None => &[],
            Deps::One { each, .. } => match &each[index] {
                &NO_DEP => &[],
                d => std::slice::from_ref(d),
            },
            Deps::Many { start, list } => &list[start[index] as usize..start[index + 1] as usize],
        }
    }

    /// The place `get(index)` reads first.
    fn prefetch(&self, index: usize) {
        match self {
            Deps::None => {}
            Deps::One { each, .. } => crate::memory::prefetch(&each[index]),
            Deps::Many { start, .. } => crate::memory::prefetch(&start[index]),
        }
    }

    /// Dependencies in all (each transfer's counted).
    fn total(&self) -> usize {
        match self {
            Deps::None => 0,
            Deps::One { count, .. } => *count,
            Deps::Many { list, .. } => list.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// True when no transfer has more than one dependency.
    fn at_most_one_each(&self) -> bool {
        match self {
            Deps::None | Deps::One { .. } => true,
            Deps::Many { start, .. } => start.windows(2).all(|w| w[1] - w[0] <= 1),
        }
    }

    /// The entries of transfers `rows`, as their own [`Deps`].
    fn rows(&self, rows: &Range<usize>) -> Deps {
        match self {
            Deps::None => Deps::None,
            Deps::One { each, .. } => {
                let each = each[rows.clone()].to_vec();
                let count = each.iter().filter(|&&d| d != NO_DEP).count();
                Deps::One { each, count }
            }
            Deps::Many { start, list } => {
                let (start, list) = csr_rows(start, list, rows);
                Deps::Many { start, list }
            }
        }
    }
}

/// Rows `rows` of a CSR list (per-row offsets `start` into `values`), offsets rebased to zero.
fn csr_rows<T: Copy>(start: &[u32], values: &[T], rows: &Range<usize>) -> (Vec<u32>, Vec<T>) {
    let starts = &start[rows.start..=rows.end];
    let (first, end) = (starts[0], starts[starts.len() - 1]);
    (
        starts.iter().map(|&s| s - first).collect(),
        values[first as usize..end as usize].to_vec(),
    )
}

/// `n` copies of `value` in a vector with room for `room` (a column that appears late takes the
/// room the schedule was made with, rather than growing by doubling to millions of entries).
fn filled<T: Clone>(n: usize, room: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(room.max(n));
    v.resize(n, value);
    v
}

impl Schedule {
    pub fn new() -> Schedule {
        Schedule::default()
    }

    pub fn with_capacity(transfers: usize) -> Schedule {
        Schedule {
            ends: Vec::with_capacity(transfers),
            ..Schedule::default()
        }
    }

    /// Room for `transfers` transfers with at most one dependency each and piece ranges,
    /// allocated once: for schedules of hundreds of millions of transfers, growing by doubling
    /// would briefly hold old and new arrays together.
    pub fn with_capacity_for_data(transfers: usize) -> Schedule {
        Schedule {
            ends: Vec::with_capacity(transfers),
            sizes: TransferSizes::with_capacity(transfers),
            deps: Deps::One {
                each: Vec::with_capacity(transfers),
                count: 0,
            },
            pieces: Some(PieceRanges::with_capacity(transfers)),
            ..Schedule::default()
        }
    }

    /// Independent copies of one piece each: transfer `i` goes from `ends[i].0` to `ends[i].1`,
    /// carries piece `pieces[i]` and has size `sizes`' `i`th, with no dependencies (bulk-built
    /// schedules of tens of millions of transfers, e.g. all-to-all).
    pub fn single_piece_copies(
        ends: Vec<(NodeId, NodeId)>,
        sizes: TransferSizes,
        pieces: Vec<u32>,
    ) -> Schedule {
        assert_eq!(ends.len(), pieces.len(), "one piece per transfer");
        assert!(
            ends.len() < TransferIndex::MAX as usize,
            "schedule too large"
        );
        let mut ranges = PieceRanges {
            lo: pieces,
            hi: None,
        };
        // `lo` alone stands for `lo..lo + 1` only below u32::MAX.
        if ranges.lo.contains(&u32::MAX) {
            ranges.hi = Some(ranges.lo.iter().map(|&lo| lo.wrapping_add(1)).collect());
        }
        Schedule {
            ends,
            sizes,
            pieces: Some(ranges),
            ..Schedule::default()
        }
    }

    /// Appends a transfer and returns its index. `deps` must name earlier or later indices of this
    /// schedule; [`Schedule::check`] verifies them.
    pub fn push(&mut self, transfer: Transfer, deps: &[TransferIndex]) -> TransferIndex {
        let index = self.ends.len();
        assert!(index < TransferIndex::MAX as usize, "schedule too large");
        self.ends.push((transfer.src, transfer.dst));
        self.sizes.push(index, transfer.bytes);
        self.deps.push(index, deps);
        if let Some(o) = &mut self.ops {
            o.push(Op::Copy);
        }
        if let Some(ids) = &mut self.ids {
            ids.push(index as u64);
        }
        if let Some(w) = &mut self.waits {
            w.push(NOT_A_WAIT);
        }
        if let Some((start, nodes)) = &mut self.routes {
            start.push(nodes.len() as u32);
        }
        index as TransferIndex
    }

    /// Gives the last transfer pushed an explicit route: the nodes it passes, from its src to its
    /// dst (checked against the topology by [`Schedule::check`]).
    pub fn set_route(&mut self, index: TransferIndex, route: &[NodeId]) {
        let n = self.ends.len();
        assert_eq!(
            index as usize + 1,
            n,
            "routes are set on the last transfer pushed"
        );
        let (start, nodes) = self
            .routes
            .get_or_insert_with(|| (vec![0; n + 1], Vec::new()));
        nodes.extend_from_slice(route);
        assert!(nodes.len() < u32::MAX as usize, "routes too long");
        start[n] = nodes.len() as u32;
    }

    /// The explicit route of a transfer, if it has one.
    pub fn route(&self, index: TransferIndex) -> Option<&[NodeId]> {
        let (start, nodes) = self.routes.as_ref()?;
        let i = index as usize;
        let route = &nodes[start[i] as usize..start[i + 1] as usize];
        (!route.is_empty()).then_some(route)
    }

    pub fn has_routes(&self) -> bool {
        self.routes.is_some()
    }

    /// Gives the transfers in `routes` (ascending indices, each without a route so far) their
    /// routes, keeping the routes others have.
    pub fn add_routes(&mut self, routes: &[(TransferIndex, Vec<NodeId>)]) {
        if routes.is_empty() {
            return;
        }
        let n = self.ends.len();
        let (old_start, old_nodes) = self.routes.take().unwrap_or((vec![0; n + 1], Vec::new()));
        let added: usize = routes.iter().map(|(_, r)| r.len()).sum();
        let mut start = Vec::with_capacity(n + 1);
        let mut nodes = Vec::with_capacity(old_nodes.len() + added);
        let mut next = routes.iter().peekable();
        start.push(0);
        for i in 0..n {
            let own = &old_nodes[old_start[i] as usize..old_start[i + 1] as usize];
            match next.peek() {
                Some((t, route)) if *t as usize == i => {
                    debug_assert!(own.is_empty(), "transfer {i} already has a route");
                    nodes.extend_from_slice(route);
                    next.next();
                }
                _ => nodes.extend_from_slice(own),
            }
            assert!(nodes.len() < u32::MAX as usize, "routes too long");
            start.push(nodes.len() as u32);
        }
        self.routes = Some((start, nodes));
    }

    /// Appends a wait of `duration` on `npu` (no network traffic) and returns its index.
    pub fn push_wait(
        &mut self,
        npu: NodeId,
        duration: Time,
        deps: &[TransferIndex],
    ) -> TransferIndex {
        let duration = duration.min(Time(NOT_A_WAIT.0 - 1));
        let index = self.push(
            Transfer {
                src: npu,
                dst: npu,
                bytes: 0,
            },
            deps,
        );
        let (n, room) = (self.ends.len(), self.ends.capacity());
        self.waits
            .get_or_insert_with(|| filled(n, room, NOT_A_WAIT))[index as usize] = duration;
        index
    }

    /// The duration of a wait, None for a real transfer.
    pub fn wait(&self, index: TransferIndex) -> Option<Time> {
        self.waits
            .as_ref()
            .map(|w| w[index as usize])
            .filter(|&d| d != NOT_A_WAIT)
    }

    pub fn has_waits(&self) -> bool {
        self.waits.is_some()
    }

    /// Appends a transfer that carries pieces `lo..hi` with `op`.
    pub fn push_data(
        &mut self,
        transfer: Transfer,
        deps: &[TransferIndex],
        pieces: (u32, u32),
        op: Op,
    ) -> TransferIndex {
        let index = self.push(transfer, deps);
        self.set_pieces(index, pieces);
        self.set_op(index, op);
        index
    }

    pub fn set_pieces(&mut self, index: TransferIndex, pieces: (u32, u32)) {
        self.pieces
            .get_or_insert_with(PieceRanges::default)
            .set(index as usize, pieces);
    }

    pub fn set_op(&mut self, index: TransferIndex, op: Op) {
        if op == Op::Copy && self.ops.is_none() {
            return;
        }
        let (n, room) = (self.ends.len(), self.ends.capacity());
        self.ops.get_or_insert_with(|| filled(n, room, Op::Copy))[index as usize] = op;
    }

    /// Sets the id that files and reports use for a transfer.
    pub fn set_id(&mut self, index: TransferIndex, id: u64) {
        if self.ids.is_none() && id == index as u64 {
            return;
        }
        let n = self.ends.len();
        self.ids.get_or_insert_with(|| (0..n as u64).collect())[index as usize] = id;
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Every transfer, in list order.
    pub fn transfers(&self) -> impl ExactSizeIterator<Item = Transfer> + '_ {
        (0..self.len() as TransferIndex).map(|i| self.transfer(i))
    }

    #[inline(always)]
    pub fn transfer(&self, index: TransferIndex) -> Transfer {
        let (src, dst) = self.ends[index as usize];
        Transfer {
            src,
            dst,
            bytes: self.sizes.get(index as usize),
        }
    }

    /// Every transfer's source and destination, in list order.
    pub fn all_ends(&self) -> &[(NodeId, NodeId)] {
        &self.ends
    }

    /// A transfer's source and destination, without its size.
    #[inline(always)]
    pub fn ends(&self, index: TransferIndex) -> (NodeId, NodeId) {
        self.ends[index as usize]
    }

    /// Hints the CPU to fetch what [`Schedule::transfer`] reads for `index`.
    #[inline(always)]
    pub fn prefetch_transfer(&self, index: TransferIndex) {
        crate::memory::prefetch(&self.ends[index as usize]);
        self.sizes.prefetch(index as usize);
    }

    /// Hints the CPU to fetch what the accessors read for `index` (transfer, dependency offsets,
    /// pieces, operation): for passes that visit scattered transfers in an order known ahead.
    #[inline(always)]
    pub fn prefetch(&self, index: TransferIndex) {
        let i = index as usize;
        self.prefetch_transfer(index);
        self.deps.prefetch(i);
        if let Some(pieces) = &self.pieces {
            pieces.prefetch(i);
        }
        if let Some(ops) = &self.ops {
            crate::memory::prefetch(&ops[i]);
        }
    }

    pub fn deps(&self, index: TransferIndex) -> &[TransferIndex] {
        self.deps.get(index as usize)
    }

    /// True when no transfer waits for more than one other: completing a transfer then makes
    /// each of its dependents ready.
    pub fn deps_at_most_one_each(&self) -> bool {
        self.deps.at_most_one_each()
    }

    /// True when every dependency names an earlier transfer: then the schedule is acyclic and list
    /// order is the order in which ready transfers are taken (generated schedules are like this).
    pub fn deps_point_backwards(&self) -> bool {
        (0..self.len() as TransferIndex).all(|t| self.deps(t).iter().all(|&d| d < t))
    }

    pub fn has_deps(&self) -> bool {
        !self.deps.is_empty()
    }

    /// True when some transfer may be a reduction (false: every one is a copy).
    pub fn has_reductions(&self) -> bool {
        self.ops.is_some()
    }

    /// True when some transfer's piece range may hold other than one piece (it may then be
    /// reversed or empty).
    pub fn has_piece_spans(&self) -> bool {
        self.pieces.as_ref().is_some_and(|p| p.hi.is_some())
    }

    /// Pieces carried, if the schedule names them.
    pub fn pieces(&self, index: TransferIndex) -> Option<(u32, u32)> {
        self.pieces.as_ref().map(|p| p.get(index as usize))
    }

    pub fn has_pieces(&self) -> bool {
        self.pieces.is_some()
    }

    /// Forgets which pieces the transfers carry: once a schedule is validated, the simulator
    /// needs only bytes (a training iteration appends its collectives many times over).
    pub fn drop_pieces(&mut self) {
        self.pieces = None;
    }

    pub fn op(&self, index: TransferIndex) -> Op {
        self.ops.as_ref().map_or(Op::Copy, |o| o[index as usize])
    }

    /// The id used in files and reports.
    pub fn id(&self, index: TransferIndex) -> u64 {
        self.ids
            .as_ref()
            .map_or(index as u64, |ids| ids[index as usize])
    }

    /// Total bytes over all transfers.
    pub fn total_bytes(&self) -> u64 {
        self.sizes.total(self.len())
    }

    /// The transfers `rows` as a schedule of their own, copied slice by slice; dependencies keep
    /// their indices in `self` (so they may point before the excerpt), and file ids are dropped
    /// (callers use it only for schedules without them). What a results file needs of a
    /// schedule still being built, at the cost of a copy.
    pub(crate) fn excerpt(&self, rows: Range<usize>) -> Schedule {
        let clip = |len: usize| rows.start.min(len)..rows.end.min(len);
        Schedule {
            ends: self.ends[rows.clone()].to_vec(),
            sizes: self.sizes.rows(&rows),
            deps: self.deps.rows(&rows),
            pieces: self.pieces.as_ref().map(|p| PieceRanges {
                lo: p.lo[clip(p.lo.len())].to_vec(),
                hi: p.hi.as_ref().map(|hi| hi[clip(hi.len())].to_vec()),
            }),
            ops: self.ops.as_ref().map(|o| o[rows.clone()].to_vec()),
            ids: None,
            waits: self.waits.as_ref().map(|w| w[rows.clone()].to_vec()),
            routes: self
                .routes
                .as_ref()
                .map(|(start, nodes)| csr_rows(start, nodes, &rows)),
            collective: None,
        }
    }

    /// Destination NPUs that appear in the schedule, in increasing order. Read on every core:
    /// the simulator waits for it, and it reads the whole transfer list (268 MB for a
    /// 4096-NPU all-to-all).
    pub fn destinations(&self) -> Vec<NodeId> {
        let seen = self
            .ends
            .par_chunks(1 << 16)
            .map(|piece| {
                let mut seen: Vec<bool> = Vec::new();
                for &(_, d) in piece {
                    let d = d as usize;
                    if d >= seen.len() {
                        seen.resize(d + 1, false);
                    }
                    seen[d] = true;
                }
                seen
            })
            .reduce(Vec::new, |a, b| {
                let (mut long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
                long.iter_mut().zip(&short).for_each(|(l, s)| *l |= *s);
                long
            });
        (0..seen.len() as NodeId)
            .filter(|&d| seen[d as usize])
            .collect()
    }

    /// Several schedules run together as one: transfers in order, dependencies shifted, pieces and
    /// operations kept. The result claims no collective (each part claims its own).
    pub fn concat(parts: &[Schedule]) -> Schedule {
        let mut all = Schedule::with_capacity(parts.iter().map(Schedule::len).sum());
        for part in parts {
            all.append(part, &[]);
        }
        all
    }

    /// Appends every transfer of `part` with its dependencies shifted, pieces, operation, wait
    /// and route kept; transfers of `part` that depend on nothing wait for `after` instead.
    /// Returns the index `part`'s first transfer got.
    pub fn append(&mut self, part: &Schedule, after: &[TransferIndex]) -> TransferIndex {
        let base = self.len() as TransferIndex;
        let mut deps = Vec::new();
        for t in 0..part.len() as TransferIndex {
            deps.clear();
            deps.extend(part.deps(t).iter().map(|&d| d + base));
            if deps.is_empty() {
                deps.extend_from_slice(after);
            }
            let index = match part.wait(t) {
                Some(duration) => self.push_wait(part.transfer(t).src, duration, &deps),
                None => self.push(part.transfer(t), &deps),
            };
            if let Some(pieces) = part.pieces(t) {
                self.set_pieces(index, pieces);
            }
            self.set_op(index, part.op(t));
            if let Some(route) = part.route(t) {
                self.set_route(index, route);
            }
        }
        base
    }

    /// Renames every NPU `v` to `map[v]`, in the transfers and in the claimed collective: a
    /// schedule made on a sub-network, moved onto the NPUs it stands for. Explicit routes name
    /// the sub-network's switches, so a routed schedule cannot be moved.
    pub fn relabel(&mut self, map: &[NodeId]) {
        assert!(
            self.routes.is_none(),
            "routed schedules stay on their network"
        );
        for (src, dst) in &mut self.ends {
            *src = map[*src as usize];
            *dst = map[*dst as usize];
        }
        if let Some(c) = &mut self.collective {
            for v in &mut c.npus {
                *v = map[*v as usize];
            }
        }
    }

    /// For each transfer, the transfers that depend on it (CSR: offsets, list).
    pub fn dependents(&self) -> (Vec<u32>, Vec<TransferIndex>) {
        let n = self.len();
        // Counts, then each transfer's first place; filling moves it to the next one's first
        // place, and a shift restores the offsets (no second array of n offsets at the peak).
        let mut start = vec![0u32; n + 1];
        for t in 0..n {
            for &d in self.deps.get(t) {
                start[d as usize + 1] += 1;
            }
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut list = vec![0; self.deps.total()];
        for t in 0..n as TransferIndex {
            for &d in self.deps(t) {
                list[start[d as usize] as usize] = t;
                start[d as usize] += 1;
            }
        }
        start.copy_within(0..n, 1);
        start[0] = 0;
        (start, list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_keep_one_index_each_until_a_transfer_has_several() {
        let t = Transfer {
            src: 0,
            dst: 1,
            bytes: 1,
        };
        let expected: [&[TransferIndex]; 6] = [&[], &[0], &[], &[1], &[2, 3], &[4]];
        let forms = ["none", "one", "one", "one", "many", "many"];
        let mut s = Schedule::new();
        for (i, deps) in expected.iter().enumerate() {
            s.push(t, deps);
            let form = match s.deps {
                Deps::None => "none",
                Deps::One { .. } => "one",
                Deps::Many { .. } => "many",
            };
            assert_eq!(form, forms[i], "after {i}");
            assert_eq!(s.deps_at_most_one_each(), i < 4);
            for (j, deps) in expected.iter().enumerate().take(i + 1) {
                assert_eq!(s.deps(j as TransferIndex), *deps, "transfer {j} after {i}");
            }
        }
        let (start, list) = s.dependents();
        let of = |d: usize| &list[start[d] as usize..start[d + 1] as usize];
        let dependents: Vec<&[TransferIndex]> = (0..6).map(of).collect();
        assert_eq!(dependents, [&[1][..], &[3], &[4], &[4], &[5], &[]]);
        let part = s.excerpt(1..4);
        assert_eq!(
            (part.deps(0), part.deps(1), part.deps(2)),
            (&[0][..], &[][..], &[1][..])
        );
    }

    #[test]
    fn a_dependency_on_the_largest_index_is_kept_for_the_check_to_refuse() {
        let mut s = Schedule::new();
        let t = Transfer {
            src: 0,
            dst: 1,
            bytes: 1,
        };
        s.push(t, &[]);
        s.push(t, &[TransferIndex::MAX]);
        assert_eq!(s.deps(1), &[TransferIndex::MAX]);
        assert!(s.has_deps());
    }

    #[test]
    fn piece_ranges_store_single_pieces_compactly_and_any_range_exactly() {
        let mut p = PieceRanges::default();
        p.set(0, (3, 4));
        p.set(1, (7, 8));
        assert!(p.hi.is_none(), "one piece each: lo alone");
        assert_eq!((p.get(0), p.get(1), p.get(2)), ((3, 4), (7, 8), (0, 0)));
        p.set(4, (1, 2));
        assert_eq!(p.get(3), (0, 0), "a gap carries no pieces");
        assert_eq!((p.get(0), p.get(4)), ((3, 4), (1, 2)));
        let mut q = PieceRanges::default();
        q.set(0, (5, 6));
        q.set(1, (u32::MAX, u32::MAX));
        q.set(2, (9, 4));
        assert_eq!(
            (q.get(0), q.get(1), q.get(2)),
            ((5, 6), (u32::MAX, u32::MAX), (9, 4))
        );
        let mut r = PieceRanges::default();
        r.set(0, (u32::MAX, 0));
        assert_eq!(r.get(0), (u32::MAX, 0), "no overflow at the top");
    }

    fn t(src: NodeId, dst: NodeId) -> Transfer {
        Transfer { src, dst, bytes: 8 }
    }

    #[test]
    fn deps_are_stored_compactly_and_lazily() {
        let mut s = Schedule::new();
        s.push(t(0, 1), &[]);
        s.push(t(1, 2), &[]);
        assert!(!s.has_deps());
        s.push(t(2, 3), &[0, 1]);
        assert_eq!(s.deps(0), &[] as &[u32]);
        assert_eq!(s.deps(2), &[0, 1]);
        let (start, list) = s.dependents();
        assert_eq!(&list[start[0] as usize..start[1] as usize], &[2]);
    }

    #[test]
    fn concatenation_shifts_dependencies_and_keeps_operations() {
        let mut a = Schedule::new();
        a.push(t(0, 1), &[]);
        a.push_data(t(1, 2), &[0], (0, 1), Op::Reduce);
        let both = Schedule::concat(&[a.clone(), a]);
        assert_eq!(both.len(), 4);
        assert_eq!(both.deps(3), &[2]);
        assert_eq!(both.op(3), Op::Reduce);
        assert_eq!(both.pieces(3), Some((0, 1)));
        assert!(both.collective.is_none());
    }

    #[test]
    fn waits_are_kept_apart_from_transfers() {
        let mut s = Schedule::new();
        s.push(t(0, 1), &[]);
        let w = s.push_wait(1, Time::from_ns(5), &[0]);
        s.push(t(1, 2), &[w]);
        assert_eq!(s.wait(0), None);
        assert_eq!(s.wait(1), Some(Time::from_ns(5)));
        assert_eq!(s.wait(2), None);
        let both = Schedule::concat(&[s.clone(), s]);
        assert_eq!(both.wait(4), Some(Time::from_ns(5)));
        assert_eq!(both.deps(4), &[3]);
    }

    #[test]
    fn routes_are_kept_per_transfer_and_through_concatenation() {
        let mut s = Schedule::new();
        s.push(t(0, 1), &[]);
        assert!(!s.has_routes());
        let i = s.push(t(0, 2), &[]);
        s.set_route(i, &[0, 7, 2]);
        s.push(t(2, 3), &[1]);
        assert_eq!(s.route(0), None);
        assert_eq!(s.route(1), Some(&[0, 7, 2][..]));
        assert_eq!(s.route(2), None);
        let both = Schedule::concat(&[s.clone(), s]);
        assert_eq!(both.route(4), Some(&[0, 7, 2][..]));
        assert_eq!(both.route(5), None);
    }

    #[test]
    fn optional_columns_appear_when_first_used() {
        let mut s = Schedule::new();
        s.push(t(0, 1), &[]);
        assert!(!s.has_pieces());
        s.push_data(t(1, 0), &[0], (2, 3), Op::Reduce);
        assert_eq!(s.pieces(0), Some((0, 0)));
        assert_eq!(s.pieces(1), Some((2, 3)));
        assert_eq!(s.op(0), Op::Copy);
        assert_eq!(s.op(1), Op::Reduce);
        s.set_id(1, 77);
        assert_eq!(s.id(0), 0);
        assert_eq!(s.id(1), 77);
    }
}
