//! One run end to end: build the topology, produce the schedule, simulate, summarise, write outputs.
//! The command line, sweeps and experiment files all go through [`execute`]; `batch` runs many
//! of them from an [`Experiment`].

mod batch;
mod file;
mod stream;

pub use batch::{merge, run_batch, write_batch, BatchResult, RunRow, Shard, Skipped, Source};
pub use file::{AlgorithmEntry, Experiment, RunPlan, TopologyEntry};
pub use stream::ScheduleStream;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::algorithms::{self, Algorithm, MultiDimOptions};
use crate::bound;
use crate::collective::{Collective, CollectiveKind};
use crate::report::{self, HeatMetric, Heatmap, OutputDir, Summary, Utilization};
use crate::schedule::{self, Schedule};
use crate::sim::{self, Observer, SimOptions, SimResult};
use crate::synth::{self, IlpReport, SynthOptions};
use crate::topology::{NodeId, Routing, Topology};
use crate::units::Time;
use crate::Error;

/// Seed of the symbolic values when the run has none.
const VALIDATION_SEED: u64 = 0x00C0_FFEE;

/// Where the schedule comes from.
#[derive(Clone, Debug)]
pub enum ScheduleSource {
    /// A schedule file, optionally claiming a collective.
    File(PathBuf),
    /// A built-in algorithm.
    Algorithm(Algorithm),
}

/// The collective as the user described it, before it is bound to a topology.
#[derive(Clone, Debug)]
pub struct CollectiveRequest {
    pub kind: CollectiveKind,
    pub size: u64,
    /// Pieces per NPU; `None` for the algorithm's default (1, or ForestColl's own choice).
    pub chunks: Option<u32>,
    /// Participants; all active NPUs when `None`.
    pub npus: Option<Vec<NodeId>>,
    pub root: Option<NodeId>,
}

impl CollectiveRequest {
    pub fn resolve(&self, topology: &Topology) -> Result<Collective, Error> {
        let npus = match &self.npus {
            Some(list) => {
                if let Some(&bad) = list.iter().find(|&&v| !topology.is_active_npu(v)) {
                    return Err(Error::input(format!(
                        "--npus: {bad} is not an active NPU of {}",
                        topology.name()
                    )));
                }
                list.clone()
            }
            None => topology.active_npus(),
        };
        Collective::new(
            self.kind,
            npus,
            self.size,
            self.chunks.unwrap_or(1),
            self.root,
        )
    }
}

/// `c` cut into `algorithm`'s default chunks ([`Algorithm::default_chunks`]), halved while the
/// collective cannot be cut that finely.
fn with_default_chunks(algorithm: Algorithm, c: &Collective) -> Collective {
    let mut chunks = algorithm.default_chunks(c.kind, c.ranks(), c.size);
    let root = c.kind.is_rooted().then(|| c.root());
    while chunks > 1 {
        if let Ok(cut) = Collective::new(c.kind, c.npus.clone(), c.size, chunks, root) {
            return cut;
        }
        chunks /= 2;
    }
    c.clone()
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub source: ScheduleSource,
    /// The collectives to run together; empty for a schedule file that claims nothing.
    pub collectives: Vec<CollectiveRequest>,
    pub options: SimOptions,
    pub seed: Option<u64>,
    /// Symbolically validate schedules that claim a collective before simulating them.
    pub validate: bool,
    /// Trials and switch unwinding for the synthesizer (its seed is `seed`, or 1).
    pub synth: SynthOptions,
    /// Per-dimension algorithms and chunk scheduling of hierarchical and Themis.
    pub multi_dim: MultiDimOptions,
    /// ForestColl's trees per NPU (None: the optimal number).
    pub trees: Option<u64>,
}

impl RunSpec {
    /// A run with the default simulation settings, validation on and no seed.
    pub fn new(source: ScheduleSource, collectives: Vec<CollectiveRequest>) -> RunSpec {
        RunSpec {
            source,
            collectives,
            options: SimOptions::default(),
            seed: None,
            validate: true,
            synth: SynthOptions::default(),
            multi_dim: MultiDimOptions::default(),
            trees: None,
        }
    }
}

/// What one run produced.
pub struct RunOutcome {
    pub summary: Summary,
    pub schedule: Schedule,
    pub result: SimResult,
    /// The synthesizer's own estimate of the collective time, when it made the schedule.
    pub estimate: Option<Time>,
    /// Wall time of the simulation alone (the engine's speed: events and hops per second).
    pub simulation: std::time::Duration,
    /// What the synthesizer's integer programs did (tacos-ilp, taccl-like).
    pub ilp: Vec<IlpReport>,
    /// What the synthesizer's search kept and left out, when it made the schedule.
    pub choice: Option<synth::Choice>,
    /// True where the schedule was simulated as the synthesizer planned it and never held
    /// (`schedule` is empty, `simulation` zero): see [`synth::InOrderRun`].
    pub in_order: bool,
}

/// The schedules of a run: one per collective, or one file.
struct Produced {
    parts: Vec<Schedule>,
    algorithm: String,
    estimate: Option<Time>,
    /// What the synthesizer's integer programs did (tacos-ilp, taccl-like).
    ilp: Vec<IlpReport>,
    /// What the synthesizer's search kept and left out.
    choice: Option<synth::Choice>,
    synthesis_ms: Option<f64>,
    /// Pieces per NPU the producer chose itself (ForestColl's pieces per tree).
    chunks: Option<u32>,
    /// The synthesizer's tap stream that received the one schedule's rows.
    streamed: Option<u64>,
    /// The schedule's simulation, where the synthesizer simulated it as it planned it (`parts`
    /// is then empty).
    simulated: Option<synth::InOrderSimulation>,
}

fn produce(
    topology: &Topology,
    spec: &RunSpec,
    collectives: &[Collective],
) -> Result<Produced, Error> {
    let started = Instant::now();
    let need_collective = || {
        if collectives.is_empty() {
            Err(Error::input(
                "an algorithm needs --collective and --size (or give --schedule FILE)",
            ))
        } else {
            Ok(())
        }
    };
    Ok(match &spec.source {
        ScheduleSource::File(path) if path.extension().is_some_and(|e| e == "xml") => {
            let [c] = collectives else {
                return Err(Error::input(format!(
                    "{}: an MSCCL XML algorithm counts chunks, not bytes: give --size (and one \
                     --collective, if any)",
                    path.display()
                )));
            };
            Produced {
                parts: vec![schedule::load_msccl(path, c)?],
                algorithm: file_label(path),
                estimate: None,
                ilp: Vec::new(),
                choice: None,
                synthesis_ms: None,
                chunks: None,
                streamed: None,
                simulated: None,
            }
        }
        ScheduleSource::File(path) => {
            let mut schedule = schedule::load_schedule_file(path)?;
            match (collectives, &schedule.collective) {
                ([], _) => {}
                ([one], None) => schedule.collective = Some(one.clone()),
                ([one], Some(claim)) => {
                    // The file knows the pieces its transfers name; what the user asks must be
                    // the same collective.
                    if (one.kind, one.size, &one.npus) != (claim.kind, claim.size, &claim.npus) {
                        return Err(Error::input(format!(
                            "{}: the schedule implements {} ({} B over {} NPUs), not the {} of \
                             {} B over {} NPUs asked for",
                            path.display(),
                            claim.kind,
                            claim.size,
                            claim.ranks(),
                            one.kind,
                            one.size,
                            one.ranks()
                        )));
                    }
                }
                _ => {
                    return Err(Error::input(format!(
                        "{}: a schedule file implements one collective; give one --collective",
                        path.display()
                    )))
                }
            }
            Produced {
                parts: vec![schedule],
                algorithm: file_label(path),
                estimate: None,
                ilp: Vec::new(),
                choice: None,
                synthesis_ms: None,
                chunks: None,
                streamed: None,
                simulated: None,
            }
        }
        ScheduleSource::Algorithm(algorithm) if algorithm.synthesis().is_some() => {
            need_collective()?;
            let options = SynthOptions {
                seed: spec.seed.unwrap_or(spec.synth.seed),
                method: algorithm.synthesis().expect("a synthesized algorithm"),
                ..spec.synth.clone()
            };
            let synthesis = synth::synthesize(topology, collectives, &options)?;
            Produced {
                parts: synthesis.schedules,
                algorithm: algorithm.name().to_string(),
                estimate: Some(synthesis.estimate),
                ilp: synthesis.ilp,
                choice: Some(synthesis.choice),
                synthesis_ms: Some(started.elapsed().as_secs_f64() * 1e3),
                chunks: None,
                streamed: synthesis.streamed,
                simulated: synthesis.simulated,
            }
        }
        ScheduleSource::Algorithm(Algorithm::ForestColl) => {
            need_collective()?;
            let mut parts = Vec::new();
            let mut chosen = None;
            for (c, request) in collectives.iter().zip(&spec.collectives) {
                let (schedule, slices) =
                    algorithms::forestcoll::produce(topology, c, spec.trees, request.chunks)?;
                parts.push(schedule);
                chosen = Some(slices);
            }
            Produced {
                parts,
                algorithm: Algorithm::ForestColl.name().to_string(),
                estimate: None,
                ilp: Vec::new(),
                choice: None,
                synthesis_ms: Some(started.elapsed().as_secs_f64() * 1e3),
                chunks: chosen,
                streamed: None,
                simulated: None,
            }
        }
        ScheduleSource::Algorithm(algorithm) => {
            need_collective()?;
            // Without --chunks, the algorithm's own default (more where its stages pipeline).
            let chunked: Vec<Collective> = collectives
                .iter()
                .zip(&spec.collectives)
                .map(|(c, request)| match request.chunks {
                    Some(_) => c.clone(),
                    None => with_default_chunks(*algorithm, c),
                })
                .collect();
            let chosen = chunked.first().map(|c| c.chunks);
            Produced {
                parts: chunked
                    .iter()
                    .map(|c| algorithms::generate_with(*algorithm, topology, c, &spec.multi_dim))
                    .collect::<Result<_, _>>()?,
                algorithm: algorithm.name().to_string(),
                estimate: None,
                ilp: Vec::new(),
                choice: None,
                synthesis_ms: None,
                chunks: chosen.filter(|&k| chunked.iter().all(|c| c.chunks == k)),
                streamed: None,
                simulated: None,
            }
        }
    })
}

/// Produces the schedule, simulates it and summarises the run.
pub fn execute(
    topology: &Topology,
    spec: &RunSpec,
    observer: &mut dyn Observer,
) -> Result<RunOutcome, Error> {
    execute_with(topology, spec, observer, None)
}

/// Work to do with a run's schedule while it is validated and simulated, on a thread of its own:
/// writing it to a results folder, beginning its transfers' table. Told whether the schedule's
/// file is written already (the synthesizer's stream wrote it as it planned).
pub type Beside<'a> = &'a (dyn Fn(&Schedule, bool) -> Result<(), Error> + Sync);

/// [`execute`], running `beside` on the checked schedule alongside its validation and simulation
/// (its error, if any, is the run's).
pub fn execute_with(
    topology: &Topology,
    spec: &RunSpec,
    observer: &mut dyn Observer,
    beside: Option<Beside>,
) -> Result<RunOutcome, Error> {
    let collectives = spec
        .collectives
        .iter()
        .map(|c| c.resolve(topology))
        .collect::<Result<Vec<_>, _>>()?;
    let mut produced = produce(topology, spec, &collectives)?;
    if let Some(simulated) = produced.simulated.take() {
        // The synthesizer handed the tap its rows and their times as it simulated them.
        if let Some(tap) = spec.synth.tap.as_deref() {
            if !tap.finish(produced.streamed)? {
                return Err(Error::Internal(
                    "a schedule simulated in order reached no results file".into(),
                ));
            }
        }
        return summarise(
            topology,
            spec,
            &collectives,
            produced,
            Schedule::default(),
            (simulated.result, std::time::Duration::ZERO),
            Some(simulated.transfers),
        );
    }
    let streamed = produced.streamed;
    // One collective: its schedule is simulated and validated as it is. Several: each part is
    // validated against its own collective and the parts are simulated together.
    let (mut schedule, parts) = if produced.parts.len() == 1 {
        (produced.parts.pop().expect("one part"), Vec::new())
    } else {
        (
            Schedule::concat(&produced.parts),
            std::mem::take(&mut produced.parts),
        )
    };
    schedule.check(topology)?;
    let pinned = spec.options.routing == Routing::Pinned;
    if pinned {
        schedule::pin_paths(&mut schedule, topology);
    }
    // The synthesizer's tap may hold the schedule's file already: it is the file of this
    // schedule when the schedule reached here unchanged.
    let kept = streamed.filter(|_| parts.is_empty() && !pinned);
    let tap = spec.synth.tap.as_deref();
    // Validation and simulation are independent once the structure is checked, so the validator
    // runs on a second thread beside the simulator (2 cores: wall time max(v, s) instead of v + s).
    // Nothing is reported unless both succeed, so an invalid schedule never yields a result.
    let claimed: Vec<&Schedule> = if parts.is_empty() {
        vec![&schedule]
    } else {
        parts.iter().collect()
    };
    let seed = spec.seed.unwrap_or(VALIDATION_SEED);
    let (validation, result) = std::thread::scope(|scope| {
        let side = (beside.is_some() || tap.is_some()).then(|| {
            scope.spawn(|| {
                let written = tap.map_or(Ok(false), |tap| tap.finish(kept))?;
                beside.map_or(Ok(()), |work| work(&schedule, written))
            })
        });
        let validator = spec.validate.then(|| {
            scope.spawn(|| {
                claimed.iter().try_for_each(|s| match &s.collective {
                    Some(claim) => schedule::validate(s, claim, seed),
                    None => Ok(()),
                })
            })
        });
        let started = Instant::now();
        let result = sim::simulate_checked(topology, &schedule, &spec.options, observer);
        let simulation = started.elapsed();
        let validation =
            validator.map_or(Ok(()), |v| v.join().expect("the validator does not panic"));
        let side = side.map_or(Ok(()), |s| {
            s.join().expect("work beside the run does not panic")
        });
        (validation.and(side), result.map(|r| (r, simulation)))
    });
    validation?;
    let result = result?;
    drop(parts);
    summarise(
        topology,
        spec,
        &collectives,
        produced,
        schedule,
        result,
        None,
    )
}

/// The outcome of a run whose schedule simulated to `result` in the wall time beside it; or,
/// where `in_order` counts the transfers simulated as they were synthesized, of a schedule never
/// held (`schedule` is empty).
fn summarise(
    topology: &Topology,
    spec: &RunSpec,
    collectives: &[Collective],
    produced: Produced,
    schedule: Schedule,
    (result, simulation): (SimResult, std::time::Duration),
    in_order: Option<usize>,
) -> Result<RunOutcome, Error> {
    let transfers = in_order.unwrap_or(schedule.len());
    let claims: Vec<Collective> = match &schedule.collective {
        Some(c) => vec![c.clone()],
        None => collectives.to_vec(),
    };
    let bound = claims
        .iter()
        .map(|c| bound::bounds(topology, c, Some(bound::CUT_BOUND_BUDGET)).total())
        .max();
    let single = (claims.len() == 1).then(|| &claims[0]);
    // The user's collectives where there are some: algorithms may claim finer chunks.
    let asked: &[Collective] = if collectives.is_empty() {
        &claims
    } else {
        collectives
    };
    let same = |f: &dyn Fn(&Collective) -> u64| {
        let first = asked.first().map(f)?;
        asked.iter().all(|c| f(c) == first).then_some(first)
    };
    let summary = Summary {
        topology: topology.name().to_string(),
        // Every NPU taking part in any of the collectives (several tenants count once each).
        npus: if claims.is_empty() {
            topology.active_npus().len() as u32
        } else {
            claims
                .iter()
                .flat_map(|c| c.npus.iter().copied())
                .collect::<std::collections::BTreeSet<_>>()
                .len() as u32
        },
        collective: if claims.is_empty() {
            "schedule".to_string()
        } else {
            claims
                .iter()
                .map(|c| c.kind.name())
                .collect::<Vec<_>>()
                .join("+")
        },
        algorithm: produced.algorithm,
        size_bytes: same(&|c| c.size),
        chunks_per_npu: produced
            .chunks
            .or(same(&|c| c.chunks as u64).map(|k| k as u32)),
        collective_time: result.finish,
        busbw_factor: single.map(|c| c.kind.busbw_factor(c.ranks())),
        bound,
        transfers,
        synthesis_ms: produced.synthesis_ms,
        seed: match spec.source {
            // TACOS-ILP starts from the greedy's plan, which the seed fixes.
            ScheduleSource::Algorithm(Algorithm::Tacos | Algorithm::TacosIlp) => {
                Some(spec.seed.unwrap_or(spec.synth.seed))
            }
            _ => spec.seed,
        },
        time_model: spec.options.time_model.name().to_string(),
        link_utilization: busy_fraction(topology, &result, None),
        dim_utilization: (0..topology.dims().len())
            .map(|d| busy_fraction(topology, &result, Some(d as u8)))
            .collect(),
        max_queue: result.link_max_queue.iter().copied().max().unwrap_or(0),
        queued_fraction: queued_fraction(&result),
    };
    summary.check()?;
    Ok(RunOutcome {
        summary,
        schedule,
        result,
        estimate: produced.estimate,
        ilp: produced.ilp,
        choice: produced.choice,
        simulation,
        in_order: in_order.is_some(),
    })
}

impl RunOutcome {
    /// The engine's speed on this run: "67.1M events, 33.5M hops in 2.71 s: 24.8M events/s,
    /// 80.8 ns a hop".
    pub fn engine_speed(&self) -> String {
        if self.in_order {
            return format!(
                "in order as synthesized: {} transfers, never held",
                count(self.summary.transfers as f64)
            );
        }
        let seconds = self.simulation.as_secs_f64().max(1e-9);
        let (events, hops) = (self.result.events as f64, self.result.hops as f64);
        let wall = match seconds {
            s if s < 0.01 => format!("{:.2} ms", s * 1e3),
            s => format!("{s:.2} s"),
        };
        format!(
            "{} events, {} hops in {wall}: {} events/s, {:.1} ns a hop",
            count(events),
            count(hops),
            count(events / seconds),
            seconds * 1e9 / hops.max(1.0)
        )
    }
}

/// A count for people: 950, 12.3k, 67.1M.
fn count(n: f64) -> String {
    match n {
        n if n < 1e4 => format!("{n:.0}"),
        n if n < 1e6 => format!("{:.1}k", n / 1e3),
        n => format!("{:.1}M", n / 1e6),
    }
}

/// Mean over links (of dimension `dim`, or all) of busy time / collective time.
fn busy_fraction(topology: &Topology, result: &SimResult, dim: Option<u8>) -> f64 {
    let finish = result.finish.ps() as f64;
    let busy: Vec<f64> = topology
        .links()
        .iter()
        .zip(&result.link_busy)
        .filter(|(l, _)| dim.is_none() || l.dim == dim)
        .map(|(_, b)| b.ps() as f64)
        .collect();
    if busy.is_empty() || finish == 0.0 {
        return 0.0;
    }
    busy.iter().sum::<f64>() / busy.len() as f64 / finish
}

/// Mean over links of the time a message waited for the link / collective time.
fn queued_fraction(result: &SimResult) -> f64 {
    let finish = result.finish.ps() as f64;
    if result.link_queued.is_empty() || finish == 0.0 {
        return 0.0;
    }
    let total: f64 = result.link_queued.iter().map(|q| q.ps() as f64).sum();
    total / result.link_queued.len() as f64 / finish
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Which of the optional tables a run's results folder holds.
#[derive(Clone, Copy, Debug)]
pub struct Tables {
    /// The per-transfer table: one row per transfer.
    pub transfers: bool,
    /// Its format; None: Parquet past [`PARQUET_FROM`] transfers, CSV below.
    pub format: Option<TableFormat>,
}

/// How a large table is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    Csv,
    Parquet,
}

/// Transfers past which the per-transfer tables are Parquet by default.
pub const PARQUET_FROM: usize = 1_000_000;

impl Tables {
    /// True when a table of `rows` rows is written as Parquet.
    pub fn parquet(&self, rows: usize) -> bool {
        match self.format {
            Some(format) => format == TableFormat::Parquet,
            None => rows > PARQUET_FROM,
        }
    }
}

/// Writes `summary.csv`, `transfers.csv` or `.parquet` (finishing `begun` where the table was
/// begun beside the simulation), `links.csv`, `utilization.csv` and the figures of one run into
/// `out` (the heat map of `metric`), and commits the folder with whatever else was written into
/// it (the schedule, by [`write_schedule_file`] while the run simulated).
pub fn write_outputs(
    topology: &Topology,
    outcome: &RunOutcome,
    mut out: OutputDir,
    metric: HeatMetric,
    tables: Tables,
    begun: Option<report::TransfersBegun>,
) -> Result<(), Error> {
    write_tables_and_figures(topology, outcome, &mut out, metric, tables, begun)?;
    out.commit()
}

/// The name of a large schedule's file in a results folder.
pub const SCHEDULE_PARQUET: &str = "schedule.parquet";
/// The name of a large run's per-transfer table in a results folder.
pub const TRANSFERS_PARQUET: &str = "transfers.parquet";

/// Writes `schedule` into `out` as `schedule.parquet` or `schedule.json`, as `tables` says for
/// its size: a schedule collsim made, so that it can be simulated again. Meant to run beside the
/// simulation ([`execute_with`]): it is the largest file of a synthesized run.
pub fn write_schedule_file(
    schedule: &Schedule,
    out: &mut OutputDir,
    tables: Tables,
) -> Result<(), Error> {
    if tables.parquet(schedule.len()) {
        schedule::write_schedule_parquet(schedule, &out.file(SCHEDULE_PARQUET))
    } else {
        schedule::write_schedule_json(schedule, &out.file("schedule.json"))
    }
}

/// The tables and figures of [`write_outputs`].
fn write_tables_and_figures(
    topology: &Topology,
    outcome: &RunOutcome,
    out: &mut OutputDir,
    metric: HeatMetric,
    tables: Tables,
    begun: Option<report::TransfersBegun>,
) -> Result<(), Error> {
    if tables.transfers {
        if let Some(begun) = begun {
            begun.finish(&outcome.schedule, &outcome.result)?;
        } else if tables.parquet(outcome.schedule.len()) {
            report::write_transfers_parquet(
                &outcome.schedule,
                &outcome.result,
                &out.file(TRANSFERS_PARQUET),
            )?;
        } else {
            report::write_transfers_csv(
                &outcome.schedule,
                &outcome.result,
                &out.file("transfers.csv"),
            )?;
        }
    }
    report::write_links_csv(topology, &outcome.result, &out.file("links.csv"))?;
    let title = outcome.summary.title();
    let heatmap = Heatmap::new(topology, &outcome.result, metric, &title);
    report::save_figure(&heatmap, out, "heatmap")?;
    let utilization = Utilization::new(topology, &outcome.result, report::UTILIZATION_BINS);
    utilization.write_csv(&out.file("utilization.csv"))?;
    report::save_figure(&utilization.plot(&title), out, "utilization")?;
    report::write_summary_csv(
        std::slice::from_ref(&outcome.summary),
        &out.file("summary.csv"),
    )
}
