//! Hierarchical multi-dimensional collectives (BlueConnect, ASTRA-sim's baseline) and the phase
//! machinery Themis shares: all-reduce is a reduce-scatter across dimensions 1..D, then an
//! all-gather across D..1, each dimension running its own basic algorithm on the groups of NPUs
//! that differ only in that dimension's coordinate (by default ring on Ring, Switch and mesh
//! dimensions, direct on FullyConnected ones, one-way on unidirectional rings; an ASTRA-sim system
//! file may choose per dimension). Standalone all-gather runs dimensions 1..D and reduce-scatter
//! D..1, so that rank r's block stays the contiguous pieces the collective assigns it. Themis
//! gives each chunk of a standalone all-gather or reduce-scatter its own order, paying a transfer
//! per rank where a chunk's pieces are not neighbours ([`one_way_themis`]).
//!
//! All-reduce cuts the buffer into independent chunks (slices). Their phases are emitted slice by
//! slice, or, when chunks are scheduled (Themis, or a limit of active chunks per dimension), in
//! the order an offline model of the dimensions starts them ([`super::themis`]); a phase that
//! must wait for a dimension's earlier phase to finish gets that as a dependency.

use super::builder::{part, Builder};
use super::collectives::{
    direct_exchange, direct_exchange_parts, rhd_all_gather, rhd_reduce_scatter, ring_exchange,
    ring_exchange_parts,
};
use super::themis::{self, IntraDimension, PhaseJob};
use super::{dbt, MultiDimOptions};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, TransferIndex};
use crate::sim::{self, SimOptions};
use crate::topology::{DimKind, Topology};
use crate::Error;

/// A dimension's basic algorithm, by ASTRA-sim's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimAlgorithm {
    /// `ring`: both ways round where the links allow, half of the data each way.
    Ring,
    /// `oneRing`: one way round.
    OneRing,
    /// `direct`, `oneDirect`, `directN`: every member to every other at once.
    Direct,
    /// `halvingDoubling`, `oneHalvingDoubling`: recursive halving-doubling (power-of-two groups).
    HalvingDoubling,
    /// `doubleBinaryTree`: the whole all-reduce as NCCL's double binary tree (one dimension).
    DoubleBinaryTree,
}

impl DimAlgorithm {
    /// Parses ASTRA-sim's implementation names.
    pub fn parse(name: &str) -> Option<DimAlgorithm> {
        match name {
            "ring" => Some(DimAlgorithm::Ring),
            "oneRing" => Some(DimAlgorithm::OneRing),
            "direct" | "oneDirect" | "directN" => Some(DimAlgorithm::Direct),
            "halvingDoubling" | "oneHalvingDoubling" => Some(DimAlgorithm::HalvingDoubling),
            "doubleBinaryTree" => Some(DimAlgorithm::DoubleBinaryTree),
            _ => None,
        }
    }
}

/// One dimension as the phases see it.
pub(crate) struct Dimension {
    pub size: u32,
    stride: u32,
    algorithm: DimAlgorithm,
    /// The topology's links in this dimension go both ways.
    bidirectional: bool,
    /// Bytes per second one NPU can push into this dimension (all its links in it).
    pub bandwidth: f64,
    /// Latency a phase on this dimension pays at least (its steps' link latencies), in seconds.
    pub fixed_cost: f64,
}

impl Dimension {
    /// Segments per part: two-way rings split each part in two, one per direction.
    fn directions(&self) -> u32 {
        match self.algorithm {
            DimAlgorithm::Ring if self.bidirectional => 2,
            _ => 1,
        }
    }
}

const MULTI_DIM: &str = "needs a multi-dimensional topology (mesh, torus, hypercube, dims:..., \
                         ASTRA-sim file) without faults, over all of its NPUs";

/// The dimensions of `topology` with more than one NPU, with their basic algorithms for `c`.
fn dimensions(
    topology: &Topology,
    c: &Collective,
    options: &MultiDimOptions,
    name: &str,
) -> Result<Vec<Dimension>, Error> {
    let dims = topology.dims();
    let all_npus: Vec<u32> = (0..topology.npus()).collect();
    if dims.is_empty() || c.npus != all_npus || !topology.uses_dimension_routing() {
        return Err(Error::input(format!("{name} {MULTI_DIM}")));
    }
    let chosen = options.implementation(c.kind);
    if let Some(list) = chosen {
        if list.len() != dims.len() {
            return Err(Error::input(format!(
                "{name}: {} per-dimension {} implementation(s) for a {}-dimensional topology",
                list.len(),
                c.kind,
                dims.len()
            )));
        }
    }
    let mut stride = 1;
    let mut out = Vec::new();
    for (d, dim) in dims.iter().enumerate() {
        let algorithm = match chosen {
            Some(list) => list[d],
            None => match dim.kind {
                DimKind::FullyConnected => DimAlgorithm::Direct,
                DimKind::UniRing => DimAlgorithm::OneRing,
                _ => DimAlgorithm::Ring,
            },
        };
        let n = dim.size;
        if algorithm == DimAlgorithm::HalvingDoubling && !n.is_power_of_two() {
            return Err(Error::input(format!(
                "{name}: dimension {} has {n} NPUs; halvingDoubling needs a power of two",
                d + 1
            )));
        }
        let links = match dim.kind {
            DimKind::Ring | DimKind::Line if n > 2 => 2.0,
            DimKind::FullyConnected => (n.max(2) - 1) as f64,
            _ => 1.0,
        };
        let steps = match algorithm {
            DimAlgorithm::Direct => 1.0,
            DimAlgorithm::HalvingDoubling => n.max(2).ilog2() as f64,
            _ => (n.max(2) - 1) as f64,
        };
        let hops = if dim.kind == DimKind::Switch {
            2.0
        } else {
            1.0
        };
        let dimension = Dimension {
            size: n,
            stride,
            algorithm,
            bidirectional: dim.kind != DimKind::UniRing,
            bandwidth: dim.bandwidth.as_bytes_per_sec() * links,
            fixed_cost: dim.latency.as_secs_f64() * steps * hops,
        };
        stride *= n;
        if n > 1 {
            out.push(dimension);
        }
    }
    if out.is_empty() {
        return Err(Error::input(format!(
            "{name}: every dimension of {} has a single NPU",
            topology.name()
        )));
    }
    if out.len() > 1 {
        if let Some(d) = out
            .iter()
            .position(|d| d.algorithm == DimAlgorithm::DoubleBinaryTree)
        {
            return Err(Error::input(format!(
                "{name}: doubleBinaryTree runs a whole all-reduce and cannot be one phase of \
                 several dimensions (dimension {})",
                d + 1
            )));
        }
    }
    Ok(out)
}

/// Generates hierarchical (`themis: false`) or Themis (`themis: true`) schedules.
pub(crate) fn generate(
    topology: &Topology,
    c: &Collective,
    options: &MultiDimOptions,
    themis: bool,
) -> Result<Schedule, Error> {
    let name = if themis { "themis" } else { "hierarchical" };
    let algorithm = if themis {
        super::Algorithm::Themis
    } else {
        super::Algorithm::Hierarchical
    };
    if !algorithm.supports(c.kind) {
        return Err(algorithm.refusal(c.kind));
    }
    let dims = dimensions(topology, c, options, name)?;
    if dims[0].algorithm == DimAlgorithm::DoubleBinaryTree {
        return match c.kind {
            CollectiveKind::AllReduce => dbt::generate(c),
            other => Err(Error::input(format!(
                "{name}: doubleBinaryTree has no {other} form"
            ))),
        };
    }
    // All-reduce pipelines chunks as independent slices of the buffer. All-gather and
    // reduce-scatter must keep rank r's pieces together, so they pipeline by segments instead.
    let (slices, pipeline) = match c.kind {
        CollectiveKind::AllReduce => (c.chunks, 1),
        _ => (1, c.chunks),
    };
    if pipeline > 1
        && dims
            .iter()
            .any(|d| d.algorithm == DimAlgorithm::HalvingDoubling)
    {
        return Err(Error::input(format!(
            "{name}: halvingDoubling dimensions pipeline all-reduce chunks only; give {} with --chunks 1",
            c.kind
        )));
    }
    // Pieces per chunk slice must split by every dimension size and each ring's two directions.
    let refined = Collective {
        chunks: c.chunks * 2,
        ..c.clone()
    };
    let build = |plan: Plan| {
        let mut phases = Phases {
            dims: &dims,
            n: c.ranks(),
            slice_len: refined.piece_count() / slices,
            pipeline,
            b: Builder::new(&refined)?,
        };
        let ascending: Vec<usize> = (0..dims.len()).collect();
        match c.kind {
            CollectiveKind::AllGather => {
                // Gathering dimension 1 first: before the phase on dim d a rank holds the block
                // of its coordinates in dims >= d, i.e. the range narrowed by those dims, highest
                // first.
                for i in 0..dims.len() {
                    let narrowing: Vec<usize> = ascending[i..].iter().rev().copied().collect();
                    phases.emit(0, i, &narrowing[..narrowing.len() - 1], Op::Copy);
                }
            }
            CollectiveKind::ReduceScatter => {
                let order: Vec<usize> = ascending.iter().rev().copied().collect();
                for i in 0..order.len() {
                    phases.emit(0, order[i], &order[..i], Op::Reduce);
                }
            }
            _ => all_reduce(&mut phases, c, options, plan),
        }
        Ok::<Schedule, Error>(phases.b.finish())
    };
    let one_way = matches!(
        c.kind,
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter
    );
    if themis && one_way && options.active_chunks.is_none() && c.chunks > 1 {
        let baseline = build(Plan::Baseline)?;
        let Some(balanced) = one_way_themis(&dims, c, &refined, options)? else {
            return Ok(baseline);
        };
        return faster(topology, balanced, baseline);
    }
    if !themis || c.kind != CollectiveKind::AllReduce || options.active_chunks.is_some() {
        return build(if themis { Plan::Themis } else { Plan::Baseline });
    }
    // Themis reverts to the baseline when balancing does not pay. Its per-chunk fallback cannot
    // see everything (a few large chunks on heterogeneous dimensions: up to 28% slower), and its
    // offline fluid model shares a dimension fairly where the simulated links are FIFO queues
    // (it takes the baseline of 4 chunks on a ring of 2 for twice its real time), so the
    // simulator judges: the hierarchical schedule is kept unless Themis's is faster.
    let baseline = build(Plan::Baseline)?;
    let balanced = build(Plan::Themis)?;
    faster(topology, balanced, baseline)
}

/// Themis's schedule when it simulates faster than the baseline's, else the baseline's.
fn faster(topology: &Topology, balanced: Schedule, baseline: Schedule) -> Result<Schedule, Error> {
    let time = |s: &Schedule| {
        sim::simulate(topology, s, &SimOptions::default(), &mut ()).map(|r| r.finish)
    };
    Ok(if time(&balanced)? < time(&baseline)? {
        balanced
    } else {
        baseline
    })
}

/// The most transfers a Themis reduce-scatter or all-gather on its own may take (1.5 GB of
/// schedule); past it the baseline is kept. A chunk that visits the dimensions out of the
/// baseline order holds pieces of ranks that are not neighbours in the buffer, one transfer per
/// rank, so the schedule can grow to about 2 N^2 transfers per chunk.
const ONE_WAY_MAX_TRANSFERS: u64 = 32 << 20;

/// Themis reduce-scatter or all-gather on its own: chunk `k` is the `k`-th of every rank's
/// `chunks` pieces, gathered (or reduce-scattered) across the dimensions in its own order
/// ([`themis::one_way_orders`]), its phases started in the order the offline model starts them.
/// None when the schedule would pass [`ONE_WAY_MAX_TRANSFERS`].
fn one_way_themis(
    dims: &[Dimension],
    c: &Collective,
    refined: &Collective,
    options: &MultiDimOptions,
) -> Result<Option<Schedule>, Error> {
    let gather = c.kind == CollectiveKind::AllGather;
    let d = dims.len();
    let n = c.ranks();
    let slice_bytes = c.size as f64 / c.chunks as f64;
    let orders = if options.themis_order.unwrap_or(true) {
        themis::one_way_orders(dims, c.chunks, slice_bytes, gather)
    } else {
        vec![(0..d).collect(); c.chunks as usize]
    };
    // Dimensions a stage's ranks range over: those gathered before it, or still to scatter.
    let free = |order: &[usize], s: usize| -> Vec<usize> {
        if gather {
            order[..s].to_vec()
        } else {
            order[s + 1..].to_vec()
        }
    };
    let transfers: u64 = orders
        .iter()
        .flat_map(|order| (0..d).map(move |s| (order, s)))
        .map(|(order, s)| {
            let dim = &dims[order[s]];
            let spread: u64 = free(order, s)
                .iter()
                .map(|&f| dims[f].size as u64)
                .product();
            n as u64 * spread * (dim.size as u64 - 1) * dim.directions() as u64
        })
        .sum();
    if transfers > ONE_WAY_MAX_TRANSFERS {
        return Ok(None);
    }
    let start = if gather {
        slice_bytes / n as f64
    } else {
        slice_bytes
    };
    let jobs: Vec<Vec<PhaseJob>> = orders
        .iter()
        .map(|order| themis::one_way_jobs(dims, order.iter().copied(), start, gather))
        .collect();
    let intra = options
        .intra_dimension
        .unwrap_or(IntraDimension::SmallestFirst);
    let plan = themis::best_plan(&jobs, d, intra);
    let mut phases = Phases {
        dims,
        n,
        slice_len: refined.piece_count(),
        pipeline: 1,
        b: Builder::new(refined)?,
    };
    let op = if gather { Op::Copy } else { Op::Reduce };
    run_plan(&mut phases, &plan, n, |phases, chunk, s| {
        let order = &orders[chunk];
        phases.emit_chunk(chunk as u32, order[s], &free(order, s), op);
    });
    Ok(Some(phases.b.finish()))
}

/// Emits phases in the order `plan` starts them; a phase that waits for a dimension's earlier
/// phase gets that phase's last arrivals at each rank as gates.
fn run_plan(
    phases: &mut Phases,
    plan: &themis::PhasePlan,
    ranks: u32,
    mut emit: impl FnMut(&mut Phases, usize, usize),
) {
    let mut ends: Vec<Vec<Vec<TransferIndex>>> = Vec::with_capacity(plan.order.len());
    for (k, &(chunk, s)) in plan.order.iter().enumerate() {
        if let Some(waits_for) = plan.waits_for[k] {
            phases.b.set_gates(std::mem::take(&mut ends[waits_for]));
        }
        let start = phases.b.len();
        emit(phases, chunk, s);
        phases.b.clear_gates();
        ends.push(phases.b.last_arrivals(start, ranks));
    }
}

/// Which schedule of the phases to emit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Ascending dimension order, slice by slice (or by the offline model under a limit).
    Baseline,
    /// Themis's per-chunk orders in the order its offline model starts the phases.
    Themis,
}

/// All-reduce: per chunk, reduce-scatter along its dimension order, then all-gather back.
fn all_reduce(phases: &mut Phases, c: &Collective, options: &MultiDimOptions, plan_kind: Plan) {
    let themis = plan_kind == Plan::Themis;
    let dims = phases.dims;
    let d = dims.len();
    let slices = c.chunks;
    let slice_bytes = c.size as f64 / slices as f64;
    let orders: Vec<Vec<usize>> = if options.themis_order.unwrap_or(themis) {
        themis::dimension_orders(dims, slices, slice_bytes)
    } else {
        vec![(0..d).collect(); slices as usize]
    };
    let active = options.active_chunks;
    let intra = options.intra_dimension.unwrap_or(if themis {
        IntraDimension::SmallestFirst
    } else {
        IntraDimension::Fifo
    });
    // Hierarchical without a limit: phases slice by slice, data dependencies only.
    let in_order = |phases: &mut Phases, orders: &[Vec<usize>]| {
        for (slice, order) in orders.iter().enumerate() {
            for s in 0..2 * d {
                let (dim, depth, op) = stage(orders, slice, s);
                phases.emit(slice as u32, dim, &order[..depth], op);
            }
        }
    };
    if !themis && active.is_none() {
        in_order(phases, &orders);
        return;
    }
    // Model the dimensions offline, then emit phases in the order they start there.
    let jobs = phase_jobs(dims, &orders, slice_bytes);
    let plan = match active {
        Some(limit) => themis::schedule_phases(&jobs, d, intra, Some(limit)),
        None => themis::best_plan(&jobs, d, intra),
    };
    run_plan(phases, &plan, c.ranks(), |phases, slice, s| {
        let (dim, depth, op) = stage(&orders, slice, s);
        phases.emit(slice as u32, dim, &orders[slice][..depth], op);
    });
}

/// Stage `s` of chunk `slice`: (dimension, how many dimensions came before it, operation).
/// Stage s < D reduce-scatters on order[s]; stage D + j all-gathers on order[D - 1 - j].
fn stage(orders: &[Vec<usize>], slice: usize, s: usize) -> (usize, usize, Op) {
    let order = &orders[slice];
    let d = order.len();
    if s < d {
        (order[s], s, Op::Reduce)
    } else {
        let i = 2 * d - 1 - s;
        (order[i], i, Op::Copy)
    }
}

/// The phases of every chunk as the offline model sees them.
fn phase_jobs(dims: &[Dimension], orders: &[Vec<usize>], slice_bytes: f64) -> Vec<Vec<PhaseJob>> {
    let d = dims.len();
    (0..orders.len())
        .map(|slice| {
            (0..2 * d)
                .map(|s| {
                    let (dim, depth, _) = stage(orders, slice, s);
                    let held = orders[slice][..depth]
                        .iter()
                        .fold(slice_bytes, |bytes, &k| bytes / dims[k].size as f64);
                    let n = dims[dim].size as f64;
                    PhaseJob {
                        dim,
                        work: held * (n - 1.0) / n / dims[dim].bandwidth,
                        latency: dims[dim].fixed_cost,
                        size: held,
                    }
                })
                .collect()
        })
        .collect()
}

/// Emits the phases of one collective.
struct Phases<'a, 'c> {
    dims: &'a [Dimension],
    n: u32,
    /// Pieces of one chunk slice of the buffer.
    slice_len: u32,
    pipeline: u32,
    b: Builder<'c>,
}

impl Phases<'_, '_> {
    /// One dimension's phase of one slice in every group of that dimension: reduce-scatter
    /// (`Op::Reduce`) or all-gather (`Op::Copy`), on the range a rank holds after the phases on
    /// `before` narrowed it.
    fn emit(&mut self, slice: u32, dim: usize, before: &[usize], op: Op) {
        let base = (slice * self.slice_len, (slice + 1) * self.slice_len);
        let dims = self.dims;
        let range_before = |rank: u32| {
            before.iter().fold(base, |r, &d| {
                let dim = &dims[d];
                let coord = (rank / dim.stride) % dim.size;
                part(r.0, r.1, dim.size, coord, 1, 0)
            })
        };
        let dimension = &dims[dim];
        for first in (0..self.n).filter(|r| (r / dimension.stride).is_multiple_of(dimension.size)) {
            let members: Vec<u32> = (0..dimension.size)
                .map(|k| first + k * dimension.stride)
                .collect();
            let range = range_before(first);
            let b = &mut self.b;
            match (dimension.algorithm, op) {
                (DimAlgorithm::Direct, _) => {
                    direct_exchange(b, &members, range, self.pipeline, op, false)
                }
                (DimAlgorithm::HalvingDoubling, Op::Reduce) => {
                    rhd_reduce_scatter(b, &members, range)
                }
                (DimAlgorithm::HalvingDoubling, Op::Copy) => rhd_all_gather(b, &members, range),
                _ => {
                    let directions = dimension.directions();
                    ring_exchange(
                        b,
                        &members,
                        range,
                        directions * self.pipeline,
                        directions == 2,
                        op,
                    )
                }
            }
        }
    }

    /// Chunk `chunk`'s phase on dimension `dim` of a reduce-scatter or all-gather on its own
    /// (`op`), where each rank holds the chunk's pieces of every rank that differs from it only
    /// in the `free` dimensions: per group of the dimension, one exchange per coordinate
    /// assignment of those dimensions, member `m` owning the pieces of the rank at that
    /// assignment in its own position. Chunk `k` of rank `r` is pieces `r K' + 2k ..+2` of the
    /// doubly refined buffer (`K'` pieces per rank), one per direction of a two-way ring.
    fn emit_chunk(&mut self, chunk: u32, dim: usize, free: &[usize], op: Op) {
        let dims = self.dims;
        let dimension = &dims[dim];
        let per_rank = self.b.c.chunks;
        let segments = dimension.directions();
        // Offsets of every assignment of the free dimensions' coordinates.
        let mut offsets = vec![0u32];
        for &f in free {
            let d = &dims[f];
            offsets = offsets
                .iter()
                .flat_map(|&o| (0..d.size).map(move |k| o + k * d.stride))
                .collect();
        }
        let n = self.n;
        for first in (0..n).filter(|r| (r / dimension.stride).is_multiple_of(dimension.size)) {
            let members: Vec<u32> = (0..dimension.size)
                .map(|k| first + k * dimension.stride)
                .collect();
            // `first` with its free coordinates zeroed.
            let base = free.iter().fold(first, |r, &f| {
                let d = &dims[f];
                r - (r / d.stride) % d.size * d.stride
            });
            for &offset in &offsets {
                let pieces = |m: u32, s: u32| {
                    let rank = base + offset + m * dimension.stride;
                    let lo = rank * per_rank + 2 * chunk;
                    if segments == 2 {
                        (lo + s, lo + s + 1)
                    } else {
                        (lo, lo + 2)
                    }
                };
                let b = &mut self.b;
                match dimension.algorithm {
                    DimAlgorithm::Direct => {
                        direct_exchange_parts(b, &members, 1, op, false, &pieces)
                    }
                    _ => ring_exchange_parts(b, &members, segments, segments == 2, op, &pieces),
                }
            }
        }
    }
}
