//! Themis (Rashidi et al., ISCA'22; ASTRA-sim's OfflineGreedy): load-balanced chunk scheduling
//! across the dimensions of a multi-dimensional network.
//!
//! Two decisions, both made offline so that the simulator stays ignorant of algorithms:
//! * the dimension order of each chunk, from a load tracker ([`dimension_orders`]);
//! * when each chunk's phase runs on its dimension, from a fluid model of the dimensions with a
//!   limit of active chunks each and an intra-dimension policy ([`schedule_phases`]). The
//!   hierarchical generator emits the phases in that order and makes a phase wait for the phase
//!   that held its dimension's slot, so the limit becomes schedule dependencies.

use super::hierarchical::Dimension;

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

/// Adds the phases' bandwidth time to the load tracker.
fn charge(load: &mut [f64], jobs: &[PhaseJob]) {
    for job in jobs {
        load[job.dim] += job.work;
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
