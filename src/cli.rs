//! Command-line definitions and dispatch. Flags are parsed and validated here, in one place; the
//! work happens in the library modules.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::algorithms::Algorithm;
use crate::bound;
use crate::collective::CollectiveKind;
use crate::experiment::{
    self, merge, run_batch, write_batch, AlgorithmEntry, CollectiveRequest, Experiment, RunSpec,
    ScheduleSource, Shard, Source, TopologyEntry,
};
use crate::report::{
    breakdown_chart, write_breakdown_csv, HeatMetric, BREAKDOWN_HEADER, SUMMARY_HEADER,
};
use crate::schedule::{write_msccl, write_schedule_json};
use crate::sim::{Observer, SimOptions, TimeModel};
use crate::synth::SynthOptions;
use crate::system::{load_system, SystemConfig};
use crate::topology::{Topology, TopologyOptions};
use crate::units::{parse_bandwidth, parse_bytes, parse_list, parse_size_list, parse_time};
use crate::workload::{compare, load_workload, TrainOptions};
use crate::Error;

#[derive(Parser, Debug)]
#[command(
    name = "collsim",
    version,
    about = "Simulate and synthesize collective-communication algorithms"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Simulate a schedule file or a built-in algorithm on a topology.
    Simulate(SimulateArgs),
    /// Synthesize a topology-aware schedule (TACOS greedy link-chunk matching) and simulate it.
    Synthesize(SynthesizeArgs),
    /// Print the lower bounds of a collective on a topology.
    Bound(BoundArgs),
    /// Run sizes x algorithms (x chunk counts) on one network: a CSV row each and a plot of
    /// bandwidth against size.
    Sweep(SweepArgs),
    /// Run an experiment file: every combination it lists, with CSVs and figures.
    Run(RunFileArgs),
    /// Join the results folders of an experiment's shards (`--shard I/N`) into one.
    Merge(MergeArgs),
    /// Simulate a training iteration (compute and communication) per algorithm.
    Train(TrainArgs),
}

/// The network, shared by every command that takes `--topology`.
#[derive(Args, Debug, Clone)]
pub struct TopologyArgs {
    /// YAML file (collsim or ASTRA-sim form) or inline spec: ring:8, uring:8, fc:8, switch:16,
    /// mesh:8x8, torus:4x4x4, hypercube:6, dims:ring4,fc8, dgx1, dragonfly:GxA
    #[arg(long, short = 't')]
    pub topology: String,
    /// Link bandwidth per direction, one value or one per dimension (e.g. 50GB/s, 50GiB/s, 400Gbps)
    /// [default: 50GB/s]
    #[arg(long, allow_hyphen_values = true)]
    pub bandwidth: Option<String>,
    /// Link latency, one value or one per dimension (e.g. 500ns, 0.5us) [default: 500ns]
    #[arg(long, allow_hyphen_values = true)]
    pub latency: Option<String>,
    /// Failed NPUs to remove, e.g. 7,9
    #[arg(long)]
    pub remove_npus: Option<String>,
    /// Failed links to remove: a-b (both directions) or a>b, comma-separated
    #[arg(long)]
    pub remove_links: Option<String>,
}

impl TopologyArgs {
    pub fn options(&self) -> TopologyOptions {
        TopologyOptions {
            spec: self.topology.clone(),
            bandwidth: self.bandwidth.clone(),
            latency: self.latency.clone(),
            remove_npus: self.remove_npus.clone(),
            remove_links: self.remove_links.clone(),
        }
    }

    pub fn build(&self) -> Result<Topology, Error> {
        self.options().build()
    }
}

/// The collective, shared by simulate, synthesize, sweep and bound.
#[derive(Args, Debug, Clone)]
pub struct CollectiveArgs {
    /// all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce, gather, scatter
    #[arg(long, short = 'c')]
    pub collective: Option<String>,
    /// Per-NPU buffer (all-gather: output; reduce-scatter: input), e.g. 1GiB, 64MB
    #[arg(long, short = 's')]
    pub size: Option<String>,
    /// Pieces each NPU's data is split into for pipelining [default: 1, or the system file's
    /// preferred-dataset-splits]
    #[arg(long)]
    pub chunks: Option<u32>,
    /// Participating NPUs (a communicator), e.g. 0,2,4,6 [default: all]
    #[arg(long)]
    pub npus: Option<String>,
    /// Root NPU of broadcast, reduce, gather and scatter [default: the first participant]; with
    /// several rooted collectives, one root each in order (e.g. 2,17)
    #[arg(long)]
    pub root: Option<String>,
}

fn parse_ids(flag: &str, list: &str) -> Result<Vec<u32>, Error> {
    list.split(',')
        .map(|v| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| Error::input(format!("{flag}: '{v}' is not an NPU id")))
        })
        .collect()
}

impl CollectiveArgs {
    /// The collectives to run together (`--collective a,b,c`); none when no `--collective`.
    /// `default_chunks` applies when `--chunks` is not given.
    pub fn requests_with(&self, default_chunks: u32) -> Result<Vec<CollectiveRequest>, Error> {
        let Some(names) = &self.collective else {
            if self.size.is_some() {
                return Err(Error::input("--size needs --collective"));
            }
            return Ok(Vec::new());
        };
        let kinds = names
            .split(',')
            .map(|name| CollectiveKind::parse(name.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let size = self
            .size
            .as_deref()
            .ok_or_else(|| Error::input("--collective needs --size"))
            .and_then(|s| parse_bytes(s).map_err(|e| Error::input(format!("--size: {e}"))))?;
        let npus = self
            .npus
            .as_deref()
            .map(|list| parse_ids("--npus", list))
            .transpose()?;
        let roots = self
            .root
            .as_deref()
            .map(|list| parse_ids("--root", list))
            .transpose()?
            .unwrap_or_default();
        let rooted = kinds.iter().filter(|k| k.is_rooted()).count();
        if roots.len() > 1 && roots.len() != rooted {
            return Err(Error::input(format!(
                "--root: {} roots for {rooted} rooted collective(s); give one root, or one per \
                 rooted collective in order",
                roots.len()
            )));
        }
        let mut next_root = roots.iter().copied().cycle();
        Ok(kinds
            .into_iter()
            .map(|kind| CollectiveRequest {
                kind,
                size,
                chunks: self.chunks.unwrap_or(default_chunks),
                npus: npus.clone(),
                root: if kind.is_rooted() || rooted == 0 {
                    next_root.next()
                } else {
                    None
                },
            })
            .collect())
    }

    /// The collectives, with one chunk each unless `--chunks` says otherwise.
    pub fn requests(&self) -> Result<Vec<CollectiveRequest>, Error> {
        self.requests_with(1)
    }

    /// Exactly one collective (for commands that take one).
    pub fn request(&self) -> Result<CollectiveRequest, Error> {
        let mut all = self.requests()?;
        match all.len() {
            0 => Err(Error::input("give --collective and --size")),
            1 => Ok(all.remove(0)),
            n => Err(Error::input(format!(
                "--collective: this command takes one collective, got {n}"
            ))),
        }
    }
}

/// Synthesizer settings, shared by synthesize and by `--algorithm tacos` elsewhere.
#[derive(Args, Debug, Clone)]
pub struct SynthArgs {
    /// Independent seeded synthesis trials, run in parallel; the fastest schedule is kept
    /// [default: 4, or 1 when the schedule has over 4M transfers]
    #[arg(long)]
    pub trials: Option<u32>,
    /// Logical links per NPU when a switch is unwound for synthesis [default: the best of 1, 2
    /// and 4 by simulated time]
    #[arg(long)]
    pub unwind_degree: Option<u32>,
}

impl SynthArgs {
    fn options(&self) -> SynthOptions {
        SynthOptions {
            trials: self.trials,
            unwind_degree: self.unwind_degree,
            ..SynthOptions::default()
        }
    }
}

/// How hierarchical and Themis run the dimensions: an ASTRA-sim system file and/or flags (the
/// flags win).
#[derive(Args, Debug, Clone, Default)]
pub struct MultiDimArgs {
    /// ASTRA-sim system configuration (JSON, or the 1.x text form): per-dimension
    /// implementations, inter/intra-dimension scheduling, active chunks, dataset splits, delays
    #[arg(long)]
    pub system: Option<PathBuf>,
    /// Chunks a dimension works on at once (hierarchical and Themis)
    #[arg(long)]
    pub active_chunks: Option<u32>,
    /// Which waiting chunk a dimension serves next: FIFO, SCF (smallest chunk first),
    /// lessRemainingPhaseFirst
    #[arg(long)]
    pub intra_dimension: Option<String>,
}

impl MultiDimArgs {
    /// The system file's settings with the flags applied; warnings go to stderr.
    pub fn resolve(&self) -> Result<SystemConfig, Error> {
        let mut config = match &self.system {
            Some(path) => load_system(path)?,
            None => SystemConfig::default(),
        };
        for warning in &config.warnings {
            eprintln!("warning: {warning}");
        }
        config
            .multi_dim
            .apply(self.active_chunks, self.intra_dimension.as_deref())
            .map_err(|(setting, e)| {
                Error::input(format!("--{}: {e}", setting.replace('_', "-")))
            })?;
        Ok(config)
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeModelArg {
    Exact,
    Astra,
}

impl From<TimeModelArg> for TimeModel {
    fn from(arg: TimeModelArg) -> TimeModel {
        match arg {
            TimeModelArg::Exact => TimeModel::Exact,
            TimeModelArg::Astra => TimeModel::Astra,
        }
    }
}

/// How a run is simulated, checked and reported: shared by simulate and synthesize.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Seed for randomised algorithms (tacos: default 1) and validation
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip the symbolic validation of schedules that claim a collective (for huge runs)
    #[arg(long)]
    pub no_validate: bool,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation
    #[arg(long, value_enum, default_value = "exact")]
    pub time_model: TimeModelArg,
    /// Delay added at the destination of every message (e.g. 10ns)
    #[arg(long)]
    pub endpoint_delay: Option<String>,
    /// Reduction throughput at the destination (e.g. 100GB/s); reductions cost bytes / this
    #[arg(long)]
    pub reduce_bandwidth: Option<String>,
    /// Results folder: summary.csv, transfers.csv, links.csv (and schedule.json when synthesized)
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// stdout: a human summary (text) or the summary.csv header and row (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Also write the schedule as an MSCCL XML algorithm (runs on GPUs via the MSCCL executor)
    #[arg(long)]
    pub msccl: Option<PathBuf>,
    /// What the heat map of --out shows per link: bytes carried, or busy fraction
    #[arg(long, value_enum, default_value = "bytes")]
    pub heatmap: HeatmapArg,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeatmapArg {
    Bytes,
    Busy,
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
    /// ring, direct, rhd, dbt, hierarchical, themis, tacos [default with --system: themis or
    /// hierarchical, as its inter-dimension-scheduling says]
    #[arg(long, short = 'a')]
    pub algorithm: Option<String>,
    #[command(flatten)]
    pub multi_dim: MultiDimArgs,
    #[command(flatten)]
    pub synth: SynthArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct SynthesizeArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    #[command(flatten)]
    pub synth: SynthArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct BoundArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub collective: CollectiveArgs,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce, gather, scatter
    #[arg(long, short = 'c')]
    pub collective: String,
    /// Sizes per NPU: a list (1KB,1MB,1GB) or a range (1KiB..1GiB doubles; 1KB..1GB:x10)
    #[arg(long)]
    pub sizes: String,
    /// Algorithms, comma-separated: ring, direct, rhd, dbt, hierarchical, themis, tacos
    #[arg(long)]
    pub algorithms: String,
    /// Chunk counts per NPU, comma-separated [default: 1, or the system file's
    /// preferred-dataset-splits]
    #[arg(long)]
    pub chunks: Option<String>,
    /// Seeds, comma-separated (each run once per seed) [default: each algorithm's own]
    #[arg(long)]
    pub seeds: Option<String>,
    /// Root NPU of rooted collectives [default: NPU 0]
    #[arg(long)]
    pub root: Option<u32>,
    #[command(flatten)]
    pub multi_dim: MultiDimArgs,
    #[command(flatten)]
    pub batch: BatchArgs,
}

/// Settings shared by the batch commands (sweep, run).
#[derive(Args, Debug)]
pub struct BatchArgs {
    /// Results folder: summary.csv and figures
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Run only share I of N (0 <= I < N) of the runs, for job arrays; join with `collsim merge`
    #[arg(long)]
    pub shard: Option<String>,
    /// stdout: a table (text) or the summary CSV (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation
    #[arg(long, value_enum)]
    pub time_model: Option<TimeModelArg>,
    /// Skip the symbolic validation of schedules
    #[arg(long)]
    pub no_validate: bool,
    /// Synthesizer trials per tacos run
    #[arg(long)]
    pub trials: Option<u32>,
}

#[derive(Args, Debug)]
pub struct RunFileArgs {
    /// The experiment file (YAML; see configs/experiments/)
    pub experiment: PathBuf,
    /// Draw a heat map per run (as `heatmaps: true` in the file)
    #[arg(long)]
    pub heatmaps: bool,
    #[command(flatten)]
    pub batch: BatchArgs,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// Workload file: collsim YAML (.yaml) or an ASTRA-sim text workload
    #[arg(long, short = 'w')]
    pub workload: PathBuf,
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Algorithms for the collectives, comma-separated (one iteration each)
    #[arg(long, short = 'a', default_value = "ring")]
    pub algorithm: String,
    #[command(flatten)]
    pub multi_dim: MultiDimArgs,
    /// Seed of the synthesizer and of validation
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Chunks each collective is cut into [default: 1, or the system file's
    /// preferred-dataset-splits]
    #[arg(long)]
    pub chunks: Option<u32>,
    /// Skip the symbolic validation of the collective schedules
    #[arg(long)]
    pub no_validate: bool,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation
    #[arg(long, value_enum, default_value = "exact")]
    pub time_model: TimeModelArg,
    /// Results folder: breakdown.csv and breakdown.png/.svg
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// stdout: a table (text) or breakdown.csv (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' results folders
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Where the merged results go
    #[arg(long, short = 'o')]
    pub out: PathBuf,
}

/// Shows a progress line on stderr for long simulations when stderr is a terminal.
struct Progress {
    shown: bool,
}

impl Observer for Progress {
    fn progress(&mut self, completed: u64, total: u64) {
        use std::io::IsTerminal;
        if std::io::stderr().is_terminal() && total > 0 {
            eprint!(
                "\r  simulating: {completed}/{total} transfers ({:.0}%)",
                100.0 * completed as f64 / total as f64
            );
            self.shown = true;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.shown {
            eprintln!();
        }
    }
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
        record_transfers: args.out.is_some(),
        record_busy_intervals: args.out.is_some(),
        ..system.sim_options(args.time_model.into())
    })
}

/// Runs one spec on the command line's topology and reports it.
fn run_and_report(
    topology: &TopologyArgs,
    source: ScheduleSource,
    collectives: Vec<CollectiveRequest>,
    synth: &SynthArgs,
    args: &RunArgs,
    system: &SystemConfig,
) -> Result<(), Error> {
    let synthesized = matches!(source, ScheduleSource::Algorithm(Algorithm::Tacos));
    let spec = RunSpec {
        source,
        collectives,
        options: sim_options(args, system)?,
        seed: args.seed,
        validate: !args.no_validate,
        synth: synth.options(),
        multi_dim: system.multi_dim.clone(),
    };
    let topology = topology.build()?;
    let outcome = experiment::execute(&topology, &spec, &mut Progress { shown: false })?;
    if let Some(path) = &args.msccl {
        let claim = outcome.schedule.collective.as_ref().ok_or_else(|| {
            Error::input("--msccl: the schedule must implement one collective (give --collective)")
        })?;
        let name = format!("collsim-{}-{}", outcome.summary.algorithm, claim.kind);
        write_msccl(&outcome.schedule, claim, &name, path)?;
    }
    if let Some(dir) = &args.out {
        let extra = |out: &mut crate::report::OutputDir| -> Result<(), Error> {
            if synthesized {
                write_schedule_json(&outcome.schedule, &out.file("schedule.json"))?;
            }
            Ok(())
        };
        let metric = match args.heatmap {
            HeatmapArg::Bytes => HeatMetric::Bytes,
            HeatmapArg::Busy => HeatMetric::Busy,
        };
        experiment::write_outputs(&topology, &outcome, dir, metric, &extra)?;
    }
    match args.format {
        Format::Csv => println!("{SUMMARY_HEADER}\n{}", outcome.summary.csv_row()),
        Format::Text => {
            print!("{}", outcome.summary.human());
            if let Some(estimate) = outcome.estimate {
                println!("  synthesizer estimate  {estimate}");
            }
        }
    }
    Ok(())
}

fn simulate(args: SimulateArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let collectives = args.collective.requests_with(system.chunks.unwrap_or(1))?;
    let source = match (&args.schedule, &args.algorithm) {
        (Some(path), None) => ScheduleSource::File(path.clone()),
        (None, Some(name)) => ScheduleSource::Algorithm(Algorithm::parse(name)?),
        (None, None) if args.multi_dim.system.is_some() => {
            // As ASTRA-sim runs a system file: its scheduling for the multi-dimensional
            // collectives, direct all-to-all otherwise.
            let multi_dimensional = collectives.iter().all(|c| {
                matches!(
                    c.kind,
                    CollectiveKind::AllReduce
                        | CollectiveKind::AllGather
                        | CollectiveKind::ReduceScatter
                )
            });
            ScheduleSource::Algorithm(match system.algorithm {
                _ if !multi_dimensional => Algorithm::Direct,
                Some(a) => a,
                None => Algorithm::Hierarchical,
            })
        }
        (None, None) => return Err(Error::input("give --schedule FILE or --algorithm NAME")),
        (Some(_), Some(_)) => unreachable!("clap rejects --schedule with --algorithm"),
    };
    run_and_report(
        &args.topology,
        source,
        collectives,
        &args.synth,
        &args.run,
        &system,
    )
}

fn synthesize(args: SynthesizeArgs) -> Result<(), Error> {
    let collectives = args.collective.requests()?;
    if collectives.is_empty() {
        return Err(Error::input("synthesize needs --collective and --size"));
    }
    run_and_report(
        &args.topology,
        ScheduleSource::Algorithm(Algorithm::Tacos),
        collectives,
        &args.synth,
        &args.run,
        &SystemConfig::default(),
    )
}

fn bound(args: BoundArgs) -> Result<(), Error> {
    let topology = args.topology.build()?;
    let request = args.collective.request()?;
    let c = request.resolve(&topology)?;
    let b = bound::bounds(&topology, &c, None);
    let cut = b.cut.map(|t| t.ns_string()).unwrap_or_default();
    match args.format {
        Format::Csv => {
            println!("collective,size_bytes,npu_bound_ns,cut_bound_ns,latency_bound_ns,bound_ns");
            println!(
                "{},{},{},{cut},{},{}",
                c.kind,
                c.size,
                b.npu.ns_string(),
                b.latency.ns_string(),
                b.total().ns_string()
            );
        }
        Format::Text => {
            println!("{} on {}", c.describe(), topology.name());
            println!("  per-NPU bound   {}", b.npu);
            if let Some(cut) = b.cut {
                println!("  cut bound       {cut}");
            }
            println!("  latency bound   {}", b.latency);
            println!("  lower bound     {}", b.total());
        }
    }
    Ok(())
}

fn sweep(args: SweepArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let sizes = parse_size_list(&args.sizes).map_err(|e| Error::input(format!("--sizes: {e}")))?;
    let default_chunks = system.chunks.unwrap_or(1).to_string();
    let chunks = parse_list(
        "--chunks",
        args.chunks.as_deref().unwrap_or(&default_chunks),
        |c| {
            c.parse::<u32>()
                .ok()
                .filter(|&c| c >= 1)
                .ok_or_else(|| Error::input(format!("'{c}' is not a chunk count of 1 or more")))
        },
    )?;
    let seeds = match &args.seeds {
        Some(list) => parse_list("--seeds", list, |s| {
            s.parse::<u64>()
                .map(Some)
                .map_err(|_| Error::input(format!("'{s}' is not a seed")))
        })?,
        None => vec![None],
    };
    let experiment = Experiment {
        name: format!("sweep of {} on {}", args.collective, args.topology.topology),
        description: None,
        topologies: vec![TopologyEntry {
            options: args.topology.options(),
            name: None,
        }],
        collectives: vec![CollectiveKind::parse(&args.collective)?],
        sizes,
        algorithms: parse_list("--algorithms", &args.algorithms, |a| {
            Algorithm::parse(a).map(AlgorithmEntry::plain)
        })?,
        chunks,
        seeds,
        root: args.root,
        options: system.sim_options(TimeModel::Exact),
        validate: true,
        synth: SynthOptions::default(),
        multi_dim: system.multi_dim,
        heatmaps: false,
    };
    run_experiment(experiment, None, &args.batch)
}

fn run_file(mut args: RunFileArgs) -> Result<(), Error> {
    let (mut experiment, text) = Experiment::load(&args.experiment)?;
    experiment.heatmaps |= args.heatmaps;
    if args.batch.out.is_none() {
        let stem = args.experiment.file_stem().unwrap_or("experiment".as_ref());
        args.batch.out = Some(PathBuf::from("results").join(stem));
    }
    let base = args
        .experiment
        .parent()
        .unwrap_or(std::path::Path::new("."));
    run_experiment(experiment, Some(Source { text: &text, base }), &args.batch)
}

fn run_experiment(
    mut experiment: Experiment,
    source: Option<Source>,
    args: &BatchArgs,
) -> Result<(), Error> {
    if let Some(model) = args.time_model {
        experiment.options.time_model = model.into();
    }
    experiment.validate &= !args.no_validate;
    if args.trials.is_some() {
        experiment.synth.trials = args.trials;
    }
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let result = run_batch(&experiment, shard)?;
    if result.rows.is_empty() {
        let why = result
            .skipped
            .first()
            .map(|s| format!(": {}", s.reason))
            .unwrap_or_default();
        return Err(Error::input(format!(
            "none of the {} run(s) applies{why}",
            result.skipped.len()
        )));
    }
    for s in &result.skipped {
        eprintln!(
            "skipped run {} ({} {} with {}): {}",
            s.plan.index,
            s.plan.collective,
            crate::units::format_bytes(s.plan.size),
            s.plan.algorithm.label(),
            s.reason
        );
    }
    if let Some(dir) = &args.out {
        write_batch(dir, &experiment, source, &result, shard)?;
    }
    match args.format {
        Format::Csv => {
            println!("{SUMMARY_HEADER},run");
            for (run, s) in &result.rows {
                println!("{},{run}", s.csv_row());
            }
        }
        Format::Text => print_table(&result.rows),
    }
    if let Some(dir) = &args.out {
        eprintln!(
            "wrote {} run(s) to {}{}",
            result.rows.len(),
            dir.display(),
            if shard.is_some() {
                " (one shard: join the shards with `collsim merge`)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// A compact table of runs for the terminal.
fn print_table(rows: &[(usize, crate::report::Summary)]) {
    const SHOWN: usize = 60;
    println!(
        "{:>5}  {:<18} {:<15} {:>9} {:<13} {:>6} {:>14} {:>11} {:>6}",
        "run", "topology", "collective", "size", "algorithm", "chunks", "time", "algbw GB/s", "eff"
    );
    for (run, s) in rows.iter().take(SHOWN) {
        println!(
            "{run:>5}  {:<18} {:<15} {:>9} {:<13} {:>6} {:>14} {:>11} {:>6}",
            s.topology,
            s.collective,
            s.size_bytes
                .map(crate::units::format_bytes)
                .unwrap_or_default(),
            s.algorithm,
            s.chunks_per_npu.map(|c| c.to_string()).unwrap_or_default(),
            s.collective_time.to_string(),
            s.algbw_gbps()
                .map(|b| format!("{b:.3}"))
                .unwrap_or_default(),
            s.efficiency()
                .map(|e| format!("{e:.3}"))
                .unwrap_or_default(),
        );
    }
    if rows.len() > SHOWN {
        println!(
            "  ... {} more rows (use --format csv or --out)",
            rows.len() - SHOWN
        );
    }
}

fn merge_shards(args: MergeArgs) -> Result<(), Error> {
    let runs = merge(&args.shards, &args.out)?;
    eprintln!(
        "merged {} shard(s), {runs} run(s), into {}",
        args.shards.len(),
        args.out.display()
    );
    Ok(())
}

fn train(args: TrainArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let topology = args.topology.build()?;
    let workload = load_workload(&args.workload)?;
    let algorithms = parse_list("--algorithm", &args.algorithm, Algorithm::parse)?;
    let options = TrainOptions {
        algorithm: algorithms[0],
        sim: system.sim_options(args.time_model.into()),
        multi_dim: system.multi_dim,
        synth: SynthOptions::default(),
        validate: !args.no_validate,
        seed: args.seed,
        chunks: args.chunks.or(system.chunks).unwrap_or(1),
    };
    let rows = compare(&topology, &workload, &algorithms, &options)?;
    for row in &rows {
        for note in &row.notes {
            eprintln!("note: {note}");
        }
    }
    if let Some(dir) = &args.out {
        let mut out = crate::report::OutputDir::create(dir)?;
        write_breakdown_csv(&rows, &out.file("breakdown.csv"))?;
        let title = format!(
            "{} on {}: one training iteration",
            workload.name,
            topology.name()
        );
        crate::report::save_figure(&breakdown_chart(&rows, &title), &mut out, "breakdown")?;
        out.commit()?;
    }
    match args.format {
        Format::Csv => {
            println!("{BREAKDOWN_HEADER}");
            for row in &rows {
                println!("{}", row.csv_row());
            }
        }
        Format::Text => {
            println!(
                "{} on {} ({} layers), one training iteration",
                workload.name,
                topology.name(),
                workload.layers.len()
            );
            println!(
                "  {:<13} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
                "algorithm", "forward", "backward", "exposed", "exposed DP", "exposed MP", "total"
            );
            for r in &rows {
                println!(
                    "  {:<13} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
                    r.algorithm,
                    r.forward_compute.to_string(),
                    r.backward_compute.to_string(),
                    r.exposed_comm.to_string(),
                    r.exposed_data_parallel.to_string(),
                    r.exposed_model_parallel.to_string(),
                    r.total.to_string()
                );
            }
        }
    }
    Ok(())
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Simulate(args) => simulate(args),
        Command::Synthesize(args) => synthesize(args),
        Command::Bound(args) => bound(args),
        Command::Sweep(args) => sweep(args),
        Command::Run(args) => run_file(args),
        Command::Merge(args) => merge_shards(args),
        Command::Train(args) => train(args),
    }
}
