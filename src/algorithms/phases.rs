//! The phase machinery of multi-dimensional collectives, shared by the hierarchical baseline and
//! Themis: the dimensions as a phase sees them (size, basic algorithm, bandwidth, fixed cost), the
//! offline fluid model that decides when each chunk's phase runs on its dimension (a limit of
//! active chunks and an intra-dimension policy), and the emission of phases into a schedule, in
//! the model's start order, a phase waiting for the one that held its dimension's slot.

use super::builder::{part, Builder};
use super::collectives::{
    direct_exchange, direct_exchange_parts, rhd_all_gather, rhd_reduce_scatter, ring_exchange,
    ring_exchange_parts,
};
use super::MultiDimOptions;
use crate::collective::Collective;
use crate::schedule::{Op, TransferIndex};
use crate::topology::{DimKind, Topology};
use crate::Error;

/// Which waiting chunk a dimension serves next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntraDimension {
    /// In the order the chunks became ready.
    Fifo,
    /// Smallest chunk first (SCF, the Themis paper's policy): chunks that have been
    /// reduce-scattered on other dimensions are small and finish soon.
    SmallestFirst,
    /// The chunk with the fewest phases left first.
    LessRemainingPhaseFirst,
}

impl IntraDimension {
    /// Parses ASTRA-sim's names: `FIFO`, `SCF`/`smallestFirst`, `lessRemainingPhaseFirst`.
    pub fn parse(name: &str) -> Option<IntraDimension> {
        match name {
            "FIFO" | "fifo" => Some(IntraDimension::Fifo),
            "SCF" | "scf" | "smallestFirst" => Some(IntraDimension::SmallestFirst),
            "lessRemainingPhaseFirst" | "LRPF" => Some(IntraDimension::LessRemainingPhaseFirst),
            _ => None,
        }
    }

    /// [`IntraDimension::parse`], with the error a flag or file field reports.
    pub fn named(name: &str) -> Result<IntraDimension, String> {
        IntraDimension::parse(name).ok_or_else(|| {
            format!("'{name}' is not FIFO, SCF, smallestFirst or lessRemainingPhaseFirst")
        })
    }
}

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
    pub stride: u32,
    pub algorithm: DimAlgorithm,
    /// The topology's links in this dimension go both ways.
    pub bidirectional: bool,
    /// Bytes per second one NPU can push into this dimension (all its links in it).
    pub bandwidth: f64,
    /// Latency a phase on this dimension pays at least (its steps' link latencies), in seconds.
    pub fixed_cost: f64,
}

impl Dimension {
    /// Segments per part: two-way rings split each part in two, one per direction.
    pub fn directions(&self) -> u32 {
        match self.algorithm {
            DimAlgorithm::Ring if self.bidirectional => 2,
            _ => 1,
        }
    }
}

const MULTI_DIM: &str = "needs a multi-dimensional topology (mesh, torus, hypercube, dims:..., \
                         ASTRA-sim file) without faults, over all of its NPUs";

/// The dimensions of `topology` with more than one NPU, with their basic algorithms for `c`.
pub(crate) fn dimensions(
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

/// The phases of a reduce-scatter (or, `gather`, an all-gather) across `order` as the offline
/// model costs them: a rank enters each phase holding `size` bytes (reduce-scatter starts with the
/// chunk and divides by each dimension's size, all-gather starts with one rank's share and
/// multiplies), and the phase needs `size (n-1)/n / BW` (all-gather: `size (n-1) / BW`).
pub(crate) fn one_way_jobs(
    dims: &[Dimension],
    order: impl IntoIterator<Item = usize>,
    mut size: f64,
    gather: bool,
) -> Vec<PhaseJob> {
    order
        .into_iter()
        .map(|dim| {
            let n = dims[dim].size as f64;
            let moved = if gather {
                size * (n - 1.0)
            } else {
                size * (n - 1.0) / n
            };
            let job = PhaseJob {
                dim,
                work: moved / dims[dim].bandwidth,
                latency: dims[dim].fixed_cost,
                size,
            };
            size = if gather { size * n } else { size / n };
            job
        })
        .collect()
}

/// Stage `s` of chunk `slice`: (dimension, how many dimensions came before it, operation).
/// Stage s < D reduce-scatters on order[s]; stage D + j all-gathers on order[D - 1 - j].
pub(crate) fn stage(orders: &[Vec<usize>], slice: usize, s: usize) -> (usize, usize, Op) {
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
pub(crate) fn phase_jobs(
    dims: &[Dimension],
    orders: &[Vec<usize>],
    slice_bytes: f64,
) -> Vec<Vec<PhaseJob>> {
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

/// Emits phases in the order `plan` starts them; a phase that waits for a dimension's earlier
/// phase gets that phase's last arrivals at each rank as gates.
pub(crate) fn run_plan(
    phases: &mut Phases,
    plan: &PhasePlan,
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

/// Emits the phases of one collective.
pub(crate) struct Phases<'a, 'c> {
    pub dims: &'a [Dimension],
    pub n: u32,
    /// Pieces of one chunk slice of the buffer.
    pub slice_len: u32,
    pub pipeline: u32,
    pub b: Builder<'c>,
}

impl Phases<'_, '_> {
    /// One dimension's phase of one slice in every group of that dimension: reduce-scatter
    /// (`Op::Reduce`) or all-gather (`Op::Copy`), on the range a rank holds after the phases on
    /// `before` narrowed it.
    pub fn emit(&mut self, slice: u32, dim: usize, before: &[usize], op: Op) {
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
    pub fn emit_chunk(&mut self, chunk: u32, dim: usize, free: &[usize], op: Op) {
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

/// One phase of one chunk, as the offline model sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PhaseJob {
    pub dim: usize,
    /// Seconds of the dimension's full bandwidth the phase needs.
    pub work: f64,
    /// Seconds of latency after the data is through (it holds the slot, not the bandwidth).
    pub latency: f64,
    /// Bytes of the chunk on entry (for smallest-chunk-first).
    pub size: f64,
}

/// The order phases start in, and which earlier phase (index into `order`) each waits for.
pub(crate) struct PhasePlan {
    /// (chunk, stage) in start order.
    pub order: Vec<(usize, usize)>,
    pub waits_for: Vec<Option<usize>>,
    /// When the model finishes the last phase, in seconds.
    pub makespan: f64,
}

/// Active-chunk limits Themis weighs when none is given (None: no limit), loosest first.
const CANDIDATE_LIMITS: [Option<u32>; 7] =
    [None, Some(32), Some(16), Some(8), Some(4), Some(2), Some(1)];

/// The plan of the active-chunk limit under which the model finishes first: latency-bound
/// collectives want many chunks in flight, bandwidth-bound ones few. On a tie the looser limit
/// wins: a limit becomes dependencies that the fluid model does not charge but the simulated
/// links do (one chunk on a 2-D switch under a limit of 1: 4% slower).
pub(crate) fn best_plan(jobs: &[Vec<PhaseJob>], dims: usize, policy: IntraDimension) -> PhasePlan {
    CANDIDATE_LIMITS
        .iter()
        .map(|&limit| schedule_phases(jobs, dims, policy, limit))
        .reduce(|best, plan| {
            if plan.makespan < best.makespan * (1.0 - 1e-9) {
                plan
            } else {
                best
            }
        })
        .expect("candidates")
}

struct Running {
    job: (usize, usize),
    /// Seconds of full-bandwidth work left.
    work: f64,
    /// When its latency ends, once the work is done.
    done_at: Option<f64>,
}

/// Runs the chunks' phases (each chunk's stages in order) on a fluid model of the dimensions:
/// a dimension shares its bandwidth equally among the phases moving data on it, serves at most
/// `active` phases at once (None: no limit), and picks the next waiting phase by `policy`.
pub(crate) fn schedule_phases(
    jobs: &[Vec<PhaseJob>],
    dims: usize,
    policy: IntraDimension,
    active: Option<u32>,
) -> PhasePlan {
    const EPS: f64 = 1e-15;
    let limit = active.map_or(usize::MAX, |a| a.max(1) as usize);
    // Waiting phases per dimension: (ready time, chunk, stage).
    let mut waiting: Vec<Vec<(f64, usize, usize)>> = vec![Vec::new(); dims];
    let mut running: Vec<Vec<Running>> = (0..dims).map(|_| Vec::new()).collect();
    let mut started_on: Vec<Vec<usize>> = vec![Vec::new(); dims];
    let mut plan = PhasePlan {
        order: Vec::new(),
        waits_for: Vec::new(),
        makespan: 0.0,
    };
    for (chunk, stages) in jobs.iter().enumerate() {
        if let Some(first) = stages.first() {
            waiting[first.dim].push((0.0, chunk, 0));
        }
    }
    let mut now = 0.0f64;
    loop {
        for d in 0..dims {
            while running[d].len() < limit && !waiting[d].is_empty() {
                let pick = pick_next(&waiting[d], jobs, policy);
                let (_, chunk, stage) = waiting[d].remove(pick);
                let job = jobs[chunk][stage];
                let index = plan.order.len();
                let slot_of = started_on[d]
                    .len()
                    .checked_sub(limit)
                    .map(|k| started_on[d][k]);
                plan.order.push((chunk, stage));
                plan.waits_for.push(slot_of);
                started_on[d].push(index);
                running[d].push(Running {
                    job: (chunk, stage),
                    work: job.work,
                    done_at: (job.work <= EPS).then_some(now + job.latency),
                });
            }
        }
        // The next moment a phase's data is through or its latency ends.
        let mut next = f64::INFINITY;
        for phases in &running {
            let moving = phases.iter().filter(|r| r.done_at.is_none()).count() as f64;
            for r in phases {
                next = next.min(match r.done_at {
                    Some(t) => t,
                    None => now + r.work * moving,
                });
            }
        }
        if !next.is_finite() {
            plan.makespan = now;
            break;
        }
        let elapsed = (next - now).max(0.0);
        now = next;
        for phases in running.iter_mut() {
            let moving = phases.iter().filter(|r| r.done_at.is_none()).count() as f64;
            for r in phases.iter_mut().filter(|r| r.done_at.is_none()) {
                r.work -= elapsed / moving;
                if r.work <= EPS * (1.0 + now) {
                    r.done_at = Some(now + jobs[r.job.0][r.job.1].latency);
                }
            }
            let mut k = 0;
            while k < phases.len() {
                if phases[k].done_at.is_some_and(|t| t <= now + EPS) {
                    let (chunk, stage) = phases.remove(k).job;
                    if let Some(next_job) = jobs[chunk].get(stage + 1) {
                        waiting[next_job.dim].push((now, chunk, stage + 1));
                    }
                } else {
                    k += 1;
                }
            }
        }
    }
    plan
}

/// The waiting phase a dimension serves next; ties go to the earlier-ready, then lower chunk.
fn pick_next(
    waiting: &[(f64, usize, usize)],
    jobs: &[Vec<PhaseJob>],
    policy: IntraDimension,
) -> usize {
    let key = |&(ready, chunk, stage): &(f64, usize, usize)| {
        let primary = match policy {
            IntraDimension::Fifo => 0.0,
            IntraDimension::SmallestFirst => jobs[chunk][stage].size,
            IntraDimension::LessRemainingPhaseFirst => (jobs[chunk].len() - stage) as f64,
        };
        (primary, ready, chunk)
    };
    (0..waiting.len())
        .min_by(|&a, &b| {
            let (ka, kb) = (key(&waiting[a]), key(&waiting[b]));
            ka.0.total_cmp(&kb.0)
                .then(ka.1.total_cmp(&kb.1))
                .then(ka.2.cmp(&kb.2))
        })
        .expect("a waiting phase")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(dim: usize, work: f64, size: f64) -> PhaseJob {
        PhaseJob {
            dim,
            work,
            latency: 0.0,
            size,
        }
    }

    #[test]
    fn one_active_chunk_runs_phases_one_after_another_on_each_dimension() {
        // Two chunks, each a phase on dim 0 then on dim 1.
        let jobs = vec![
            vec![job(0, 1.0, 8.0), job(1, 1.0, 4.0)],
            vec![job(0, 1.0, 8.0), job(1, 1.0, 4.0)],
        ];
        let plan = schedule_phases(&jobs, 2, IntraDimension::Fifo, Some(1));
        assert_eq!(plan.order, vec![(0, 0), (1, 0), (0, 1), (1, 1)]);
        // Chunk 1 waits for chunk 0 on dim 0; chunk 1's dim-1 phase for chunk 0's.
        assert_eq!(plan.waits_for, vec![None, Some(0), None, Some(2)]);
        let free = schedule_phases(&jobs, 2, IntraDimension::Fifo, None);
        assert!(free.waits_for.iter().all(Option::is_none));
    }

    #[test]
    fn smallest_chunk_first_serves_the_reduced_chunk_before_a_fresh_one() {
        // Chunk 0 is reduced on dim 1 first, then needs dim 0 with a small size; chunks 1 and 2
        // start on dim 0 with full size. With one slot, SCF lets chunk 0 jump the queue.
        let jobs = vec![
            vec![job(1, 0.5, 8.0), job(0, 0.5, 1.0)],
            vec![job(0, 1.0, 8.0)],
            vec![job(0, 1.0, 8.0)],
        ];
        let order = |policy| schedule_phases(&jobs, 2, policy, Some(1)).order;
        // At t = 0 dimension 0 starts chunk 1 and dimension 1 chunk 0; at t = 1 dimension 0 is free.
        assert_eq!(
            order(IntraDimension::SmallestFirst),
            vec![(1, 0), (0, 0), (0, 1), (2, 0)]
        );
        assert_eq!(
            order(IntraDimension::Fifo),
            vec![(1, 0), (0, 0), (2, 0), (0, 1)]
        );
    }

    #[test]
    fn policies_parse_astra_sim_names() {
        assert_eq!(
            IntraDimension::parse("SCF"),
            Some(IntraDimension::SmallestFirst)
        );
        assert_eq!(
            IntraDimension::parse("smallestFirst"),
            Some(IntraDimension::SmallestFirst)
        );
        assert_eq!(IntraDimension::parse("FIFO"), Some(IntraDimension::Fifo));
        assert_eq!(IntraDimension::parse("LIFO"), None);
    }
}
