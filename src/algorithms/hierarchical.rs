//! Hierarchical multi-dimensional collectives (BlueConnect, ASTRA-sim's baseline), on the phase
//! machinery it shares with Themis ([`super::phases`]): all-reduce is a reduce-scatter across dimensions 1..D, then an
//! all-gather across D..1, each dimension running its own basic algorithm on the groups of NPUs
//! that differ only in that dimension's coordinate (by default ring on Ring, Switch and mesh
//! dimensions, direct on FullyConnected ones, one-way on unidirectional rings; an ASTRA-sim system
//! file may choose per dimension). Standalone all-gather runs dimensions 1..D and reduce-scatter
//! D..1, so that rank r's block stays the contiguous pieces the collective assigns it. Themis
//! gives each chunk of a standalone all-gather or reduce-scatter its own order, paying a transfer
//! per rank where a chunk's pieces are not neighbours ([`themis::one_way_themis`]).
//!
//! All-reduce cuts the buffer into independent chunks (slices). Their phases are emitted slice by
//! slice, or, when chunks are scheduled (Themis, or a limit of active chunks per dimension), in
//! the order an offline model of the dimensions starts them ([`super::phases`]); a phase that
//! must wait for a dimension's earlier phase to finish gets that as a dependency.

use super::builder::Builder;
use super::phases::{
    best_plan, dimensions, phase_jobs, run_plan, schedule_phases, stage, DimAlgorithm,
    IntraDimension, Phases,
};
use super::themis::{self, one_way_themis};
use super::{dbt, MultiDimOptions};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::sim::{self, SimOptions};
use crate::topology::Topology;
use crate::Error;

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
        Some(limit) => schedule_phases(&jobs, d, intra, Some(limit)),
        None => best_plan(&jobs, d, intra),
    };
    run_plan(phases, &plan, c.ranks(), |phases, slice, s| {
        let (dim, depth, op) = stage(&orders, slice, s);
        phases.emit(slice as u32, dim, &orders[slice][..depth], op);
    });
}
