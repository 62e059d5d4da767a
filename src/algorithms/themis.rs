//! Themis (Rashidi et al., ISCA'22; ASTRA-sim's OfflineGreedy): load-balanced chunk scheduling
//! across the dimensions of a multi-dimensional network.
//!
//! Two decisions, both made offline so that the simulator stays ignorant of algorithms:
//! * the dimension order of each chunk, from a load tracker ([`dimension_orders`]);
//! * when each chunk's phase runs on its dimension, from the fluid model of the dimensions with a
//!   limit of active chunks each and an intra-dimension policy ([`super::phases`]), the phases
//!   emitted in that order, a phase waiting for the one that held its dimension's slot, so the
//!   limit becomes schedule dependencies.
//!
//! Reduce-scatter and all-gather on their own get per-chunk orders too ([`one_way_themis`]).

use super::builder::Builder;
use super::phases::{
    best_plan, one_way_jobs, run_plan, Dimension, IntraDimension, PhaseJob, Phases,
};
use super::MultiDimOptions;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::Error;

/// Per chunk, the dimensions in the order its reduce-scatter visits them (all-gather reverses
/// it), as the Themis paper's Algorithm 1 chooses: the load tracker starts from each dimension's
/// fixed cost and adds each phase's time under a bandwidth model (reduce-scatter: `size (n-1)/n
/// / BW` and `size /= n`; all-gather: `size (n-1) / BW` and `size *= n`). While the gap between
/// the most and least loaded dimension is below the chunk's own runtime on the least loaded one
/// (its reduce-scatter there, fixed cost included), the chunk takes the baseline ascending order:
/// so the first chunk does, and balanced dimensions are never oversubscribed for a slight
/// difference. Otherwise the dimensions are sorted by load, least loaded first (ties ascending),
/// so that the emptiest dimension takes the phase with the most data.
pub(crate) fn dimension_orders(
    dims: &[Dimension],
    slices: u32,
    slice_bytes: f64,
) -> Vec<Vec<usize>> {
    let mut load: Vec<f64> = dims.iter().map(|d| d.fixed_cost).collect();
    (0..slices)
        .map(|_| {
            let mut order: Vec<usize> = (0..dims.len()).collect();
            if balancing_pays(dims, &load, slice_bytes) {
                order.sort_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
            }
            let held = order
                .iter()
                .fold(slice_bytes, |bytes, &d| bytes / dims[d].size as f64);
            charge(
                &mut load,
                &one_way_jobs(dims, order.iter().copied(), slice_bytes, false),
            );
            charge(
                &mut load,
                &one_way_jobs(dims, order.iter().rev().copied(), held, true),
            );
            order
        })
        .collect()
}

/// Per chunk of a reduce-scatter or all-gather on its own (`gather`), the dimensions in the order
/// it visits them, by the load tracker of [`dimension_orders`] charging only that collective's
/// phases. While balancing does not pay the chunk takes the ascending order (as ASTRA-sim's
/// offline greedy falls back to). Otherwise reduce-scatter, whose first phase carries the most
/// data, visits the least loaded dimension first, and all-gather, whose last phase carries the
/// most, visits it last (ASTRA-sim's offline greedy reverses its sort for all-gather likewise);
/// ties in ascending dimension order.
pub(crate) fn one_way_orders(
    dims: &[Dimension],
    slices: u32,
    slice_bytes: f64,
    gather: bool,
) -> Vec<Vec<usize>> {
    let ranks: f64 = dims.iter().map(|d| d.size as f64).product();
    let mut load: Vec<f64> = dims.iter().map(|d| d.fixed_cost).collect();
    (0..slices)
        .map(|_| {
            let mut order: Vec<usize> = (0..dims.len()).collect();
            if balancing_pays(dims, &load, slice_bytes) {
                order.sort_by(|&a, &b| {
                    let by_load = load[a].total_cmp(&load[b]);
                    (if gather { by_load.reverse() } else { by_load }).then(a.cmp(&b))
                });
            }
            let start = if gather {
                slice_bytes / ranks
            } else {
                slice_bytes
            };
            charge(
                &mut load,
                &one_way_jobs(dims, order.iter().copied(), start, gather),
            );
            order
        })
        .collect()
}

/// Themis's threshold: balancing pays once the gap between the most and least loaded dimension
/// reaches a chunk's own runtime on the least loaded one (its reduce-scatter of `slice_bytes`
/// there, fixed cost included), so the first chunk takes the baseline and balanced dimensions are
/// never oversubscribed for a slight difference.
fn balancing_pays(dims: &[Dimension], load: &[f64], slice_bytes: f64) -> bool {
    let most = load.iter().copied().fold(0.0, f64::max);
    let least = (0..dims.len())
        .min_by(|&a, &b| load[a].total_cmp(&load[b]))
        .expect("at least one dimension");
    let n = dims[least].size as f64;
    let runtime = slice_bytes * (n - 1.0) / n / dims[least].bandwidth + dims[least].fixed_cost;
    most - load[least] >= runtime
}

/// Adds the phases' bandwidth time to the load tracker.
fn charge(load: &mut [f64], jobs: &[PhaseJob]) {
    for job in jobs {
        load[job.dim] += job.work;
    }
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
pub(crate) fn one_way_themis(
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
        one_way_orders(dims, c.chunks, slice_bytes, gather)
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
        .map(|order| one_way_jobs(dims, order.iter().copied(), start, gather))
        .collect();
    let intra = options
        .intra_dimension
        .unwrap_or(IntraDimension::SmallestFirst);
    let plan = best_plan(&jobs, d, intra);
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
