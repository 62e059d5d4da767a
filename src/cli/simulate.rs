//! `simulate` and `synthesize`: one run on the command line's topology, reported.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{
    CollectiveArgs, ForestArgs, Format, MultiDimArgs, OutArgs, Progress, SynthArgs, TimeModelArg,
    TopologyArgs,
};
use crate::algorithms::Algorithm;
use crate::experiment::{self, CollectiveRequest, RunSpec, ScheduleSource};
use crate::report::{HeatMetric, SUMMARY_HEADER};
use crate::schedule::write_msccl;
use crate::sim::SimOptions;
use crate::system::SystemConfig;
use crate::topology::Routing;
use crate::units::{parse_bandwidth, parse_time};
use crate::Error;

/// How a run is simulated, checked and reported: shared by simulate and synthesize.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Seed for randomised algorithms (tacos: default 1) and validation
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip the symbolic validation of schedules that claim a collective (for huge runs)
    #[arg(long)]
    pub no_validate: bool,
    /// dor: one fixed shortest path per pair; ecmp: a hash of (transfer, destination, node),
    /// seeded by --seed, picks among the shortest paths at every node, as switches hash flows;
    /// pinned: paths planned before the run so that messages of one step share no link where
    /// the network allows (ACCL's path control; the routes are kept in the schedule)
    #[arg(long, value_enum, default_value = "dor")]
    pub routing: RoutingArg,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation [default: exact; with
    /// --system always astra]
    #[arg(long, value_enum)]
    pub time_model: Option<TimeModelArg>,
    /// Delay added at the destination of every message (e.g. 10ns)
    #[arg(long)]
    pub endpoint_delay: Option<String>,
    /// Reduction throughput at the destination (e.g. 100GB/s); reductions cost bytes / this
    #[arg(long)]
    pub reduce_bandwidth: Option<String>,
    // Results folder: summary.csv, transfers.csv or .parquet, links.csv (and schedule.json or
    // .parquet when collsim made the schedule)
    #[command(flatten)]
    pub output: OutArgs,
    /// stdout: a human summary (text) or the summary.csv header and row (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Also write the schedule as an MSCCL XML algorithm (runs on GPUs via the MSCCL executor)
    #[arg(long)]
    pub msccl: Option<PathBuf>,
    /// What the heat map of --out shows per link: bytes carried, busy fraction, fraction of time
    /// with a message waiting (queued), or the most messages held at once (max-queue)
    #[arg(long, value_enum, default_value = "bytes")]
    pub heatmap: HeatmapArg,
    /// Leave the per-transfer table (one row per transfer) out of --out
    #[arg(long, requires = "out")]
    pub no_transfers: bool,
    /// Format of the per-transfer tables: transfers.csv and schedule.json, or transfers.parquet
    /// and schedule.parquet (zstd) [default: parquet past a million transfers]
    #[arg(long, value_enum, requires = "out")]
    pub table_format: Option<TableFormatArg>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormatArg {
    Csv,
    Parquet,
}

/// How `synthesize` plans: each is one of the synthesized algorithms.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MethodArg {
    Greedy,
    Ilp,
    TacclLike,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingArg {
    Dor,
    Ecmp,
    Pinned,
}

impl From<RoutingArg> for Routing {
    /// The routing of the flag; ECMP seeded with 1 until [`Routing::seeded`] gives the run's.
    fn from(arg: RoutingArg) -> Routing {
        match arg {
            RoutingArg::Dor => Routing::Dor,
            RoutingArg::Ecmp => Routing::Ecmp { seed: 1 },
            RoutingArg::Pinned => Routing::Pinned,
        }
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeatmapArg {
    Bytes,
    Busy,
    Queued,
    MaxQueue,
}

#[derive(Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Schedule file to simulate instead of a built-in algorithm: .csv or .json (collsim IR), or
    /// .xml (an MSCCL algorithm; give --collective, --size and --chunks)
    #[arg(long, conflicts_with = "algorithm")]
    pub schedule: Option<PathBuf>,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    /// ring, direct, direct-staggered, rhd, dbt, hierarchical, themis, tacos, tacos-ilp,
    /// taccl-like, forestcoll, hdrm, accl-hybrid, nccl-ring, nccl-tree, two-step-tree
    /// [with --system and no algorithm: ASTRA-sim's system layer runs the collective]
    #[arg(long, short = 'a')]
    pub algorithm: Option<String>,
    #[command(flatten)]
    pub multi_dim: MultiDimArgs,
    #[command(flatten)]
    pub synth: SynthArgs,
    #[command(flatten)]
    pub forest: ForestArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct SynthesizeArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    /// How to plan: `greedy` (TACOS-Greedy), `ilp` (TACOS-ILP: optimal on small networks,
    /// see --time-limit and --cluster), `taccl-like` (the ILP ignoring congestion)
    #[arg(long, value_enum, default_value_t = MethodArg::Greedy)]
    pub method: MethodArg,
    #[command(flatten)]
    pub synth: SynthArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

fn sim_options(args: &RunArgs, system: &SystemConfig) -> Result<SimOptions, Error> {
    Ok(SimOptions {
        endpoint_delay: args
            .endpoint_delay
            .as_deref()
            .map(|s| parse_time(s).map_err(|e| Error::input(format!("--endpoint-delay: {e}"))))
            .transpose()?
            .unwrap_or(system.endpoint_delay),
        reduce_bandwidth: args
            .reduce_bandwidth
            .as_deref()
            .map(|s| {
                parse_bandwidth(s).map_err(|e| Error::input(format!("--reduce-bandwidth: {e}")))
            })
            .transpose()?,
        record_transfers: args.output.out.is_some() && !args.no_transfers,
        record_busy_intervals: args.output.out.is_some(),
        routing: Routing::from(args.routing).seeded(args.seed.unwrap_or(1)),
        ..system.sim_options(args.time_model.unwrap_or(TimeModelArg::Exact).into())
    })
}

/// Runs one spec on the command line's topology and reports it.
fn run_and_report(
    topology: &TopologyArgs,
    source: ScheduleSource,
    collectives: Vec<CollectiveRequest>,
    synth: &SynthArgs,
    forest: &ForestArgs,
    args: &RunArgs,
    system: &SystemConfig,
) -> Result<(), Error> {
    // Schedules collsim made itself, or gave planned paths, are worth keeping: they can be
    // simulated again.
    let synthesized = matches!(&source, ScheduleSource::Algorithm(a) if a.synthesis().is_some());
    if synth.sketch.is_some() && !synthesized {
        return Err(Error::input(
            "--sketch guides the synthesizers: give --algorithm tacos, tacos-ilp or taccl-like",
        ));
    }
    let produced = match source {
        ScheduleSource::Algorithm(a) => a.synthesis().is_some() || a == Algorithm::ForestColl,
        ScheduleSource::File(_) => false,
    } || args.routing == RoutingArg::Pinned;
    let schedule_file = match &source {
        ScheduleSource::File(path) => Some(path.clone()),
        ScheduleSource::Algorithm(_) => None,
    };
    let mut spec = RunSpec {
        source,
        collectives,
        options: sim_options(args, system)?,
        seed: args.seed,
        validate: !args.no_validate,
        synth: synth.options()?,
        multi_dim: system.multi_dim.clone(),
        trees: forest.trees,
    };
    // A sketch's chunks apply where the command line gives none.
    if let Some(k) = spec.synth.sketch.as_ref().and_then(|s| s.chunks) {
        for request in &mut spec.collectives {
            request.chunks.get_or_insert(k);
        }
    }
    let topology = topology.build()?;
    let inputs: Vec<(&std::path::Path, &str)> = schedule_file
        .iter()
        .map(|p| (p.as_path(), "--schedule"))
        .collect();
    let out = args.output.prepare_reading(&inputs)?;
    if let Some(path) = &args.msccl {
        crate::check_output_file(path, "--msccl", &inputs, args.output.force)?;
    }
    let tables = experiment::Tables {
        transfers: !args.no_transfers,
        format: args.table_format.map(|f| match f {
            TableFormatArg::Csv => experiment::TableFormat::Csv,
            TableFormatArg::Parquet => experiment::TableFormat::Parquet,
        }),
    };
    let writes_out = out.is_some();
    let mut out = out;
    // A large synthesized schedule is written as the synthesizer makes it (and its transfers'
    // table too, where it is simulated as it is made); otherwise while it simulates (the largest
    // file of the folder: after the run it took longer than the simulation).
    let streamed = match &mut out {
        Some(folder) if synthesized => {
            let path = folder.file(experiment::SCHEDULE_PARQUET);
            let transfers = tables
                .transfers
                .then(|| folder.file(experiment::TRANSFERS_PARQUET));
            spec.synth.tap = Some(std::sync::Arc::new(experiment::ScheduleStream::new(
                path, transfers, tables,
            )));
            true
        }
        _ => false,
    };
    let folder = std::sync::Mutex::new(out);
    let lock_folder = || folder.lock().expect("the folder is not poisoned");
    let transfers_begun = std::sync::Mutex::new(None);
    // Beside the validation and simulation: the schedule's file where collsim made the schedule
    // (unless the synthesizer's stream wrote it), and the part of a Parquet transfers table that
    // needs no times.
    let beside = |schedule: &crate::schedule::Schedule, schedule_written: bool| {
        if produced && !schedule_written {
            if let Some(out) = &mut *lock_folder() {
                if streamed {
                    // Not the synthesizer's stream (it wrote none, or another schedule's).
                    out.discard(experiment::SCHEDULE_PARQUET);
                }
                experiment::write_schedule_file(schedule, out, tables)?;
            }
        }
        if tables.transfers && tables.parquet(schedule.len()) {
            let path = lock_folder()
                .as_mut()
                .map(|out| out.file(experiment::TRANSFERS_PARQUET));
            if let Some(path) = path {
                // Behind the simulation and the validation, on what they leave of the cores.
                crate::priority::run_behind();
                let begun = crate::report::TransfersBegun::new(schedule, &path, false)?;
                *transfers_begun.lock().expect("not poisoned") = Some(begun);
            }
        }
        Ok(())
    };
    // A synthesized schedule that nothing else needs whole (its files are streamed) is simulated
    // and validated as it is planned, never held.
    // MSCCL has no step for the symmetric plan's timers: an export gets the matching's schedule.
    if args.msccl.is_some() {
        spec.synth.symmetry = false;
    }
    if synthesized && args.msccl.is_none() && args.routing != RoutingArg::Pinned {
        spec.synth.simulate_in_order = Some(crate::synth::InOrderRun {
            sim: spec.options.clone(),
            validate: spec.validate,
        });
    }
    let heartbeat = crate::report::Heartbeat::start("running");
    spec.synth.progress = Some(heartbeat.steps());
    let outcome = experiment::execute_with(
        &topology,
        &spec,
        &mut Progress::new(),
        writes_out.then_some(&beside as experiment::Beside),
    )?;
    drop(heartbeat);
    let out = folder.into_inner().expect("the folder is not poisoned");
    if let Some(path) = &args.msccl {
        let claim = outcome.schedule.collective.as_ref().ok_or_else(|| {
            Error::input("--msccl: the schedule must implement one collective (give --collective)")
        })?;
        let name = format!("collsim-{}-{}", outcome.summary.algorithm, claim.kind);
        write_msccl(&outcome.schedule, claim, &name, path)?;
    }
    let begun = transfers_begun.into_inner().expect("not poisoned");
    if let Some(mut out) = out {
        // Written as it was simulated; or begun beside the simulation; or else (the tap may have
        // begun it) written below.
        let tables = match outcome.in_order {
            true => experiment::Tables {
                transfers: false,
                ..tables
            },
            false => {
                if begun.is_none() {
                    out.discard(experiment::TRANSFERS_PARQUET);
                }
                tables
            }
        };
        let metric = match args.heatmap {
            HeatmapArg::Bytes => HeatMetric::Bytes,
            HeatmapArg::Busy => HeatMetric::Busy,
            HeatmapArg::Queued => HeatMetric::Queued,
            HeatmapArg::MaxQueue => HeatMetric::MaxQueue,
        };
        experiment::write_outputs(&topology, &outcome, out, metric, tables, begun)?;
    }
    match args.format {
        Format::Csv => println!("{SUMMARY_HEADER}\n{}", outcome.summary.csv_row()),
        Format::Text => {
            print!("{}", outcome.summary.human());
            if let Some(estimate) = outcome.estimate {
                println!("  synthesizer estimate  {estimate}");
            }
            let choice = outcome.choice.as_ref().map(ToString::to_string);
            if let Some(choice) = choice.filter(|c| !c.is_empty()) {
                println!("  synthesizer chose     {choice}");
            }
            for report in &outcome.ilp {
                println!("  integer program {}", report.describe());
            }
            println!("  engine          {}", outcome.engine_speed());
        }
    }
    Ok(())
}

/// `simulate` of an algorithm or a schedule file (a `--system` file alone is `system`'s).
pub(super) fn simulate(args: SimulateArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let collectives = msccl_stated(&args)?.requests_with(system.chunks)?;
    let source = match (&args.schedule, &args.algorithm) {
        (Some(path), None) => ScheduleSource::File(path.clone()),
        (None, Some(name)) => ScheduleSource::Algorithm(Algorithm::parse(name)?),
        (None, None) => return Err(Error::input("give --schedule FILE or --algorithm NAME")),
        (Some(_), Some(_)) => unreachable!("clap rejects --schedule with --algorithm"),
    };
    run_and_report(
        &args.topology,
        source,
        collectives,
        &args.synth,
        &args.forest,
        &args.run,
        &system,
    )
}

/// The collective flags, completed from an MSCCL algorithm given as `--schedule` where no
/// `--collective` is: the file states its collective and chunks (`--chunks` still overrides,
/// as a coarser chunking the file may refine); only the bytes come from `--size`.
fn msccl_stated(args: &SimulateArgs) -> Result<super::CollectiveArgs, Error> {
    let mut flags = args.collective.clone();
    let xml = args
        .schedule
        .as_ref()
        .filter(|p| p.extension().is_some_and(|e| e == "xml"));
    if let (Some(path), None) = (xml, &flags.collective) {
        let claim = crate::schedule::read_msccl_claim(path)?;
        if flags.size.is_none() {
            return Err(Error::input(format!(
                "{}: an MSCCL algorithm counts chunks, not bytes: give --size",
                path.display()
            )));
        }
        flags.collective = Some(claim.kind.to_string());
        if flags.chunks.is_none() {
            flags.chunks = Some(claim.chunks(&path.display().to_string())?);
        }
    }
    Ok(flags)
}

pub(super) fn synthesize(args: SynthesizeArgs) -> Result<(), Error> {
    let collectives = args.collective.requests()?;
    if collectives.is_empty() {
        return Err(Error::input("synthesize needs --collective and --size"));
    }
    let algorithm = match args.method {
        MethodArg::Greedy => Algorithm::Tacos,
        MethodArg::Ilp => Algorithm::TacosIlp,
        MethodArg::TacclLike => Algorithm::TacclLike,
    };
    run_and_report(
        &args.topology,
        ScheduleSource::Algorithm(algorithm),
        collectives,
        &args.synth,
        &ForestArgs::default(),
        &args.run,
        &SystemConfig::default(),
    )
}
