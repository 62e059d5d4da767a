//! The batch commands: `sweep`, `run` (experiment files) and `merge` (shards).

use std::path::PathBuf;

use clap::Args;

use super::simulate::RoutingArg;
use super::{Format, MultiDimArgs, OutArgs, TimeModelArg, TopologyArgs};
use crate::algorithms::Algorithm;
use crate::collective::CollectiveKind;
use crate::experiment::{
    merge, run_batch, write_batch, AlgorithmEntry, Experiment, Shard, Source, TopologyEntry,
};
use crate::report::SUMMARY_HEADER;
use crate::sim::TimeModel;
use crate::synth::SynthOptions;
use crate::units::{parse_list, parse_size_list};
use crate::Error;

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
    /// Algorithms, comma-separated: ring, direct, direct-staggered, rhd, dbt, hierarchical, themis,
    /// tacos, tacos-ilp, taccl-like, forestcoll, hdrm, accl-hybrid, nccl-ring, nccl-tree,
    /// two-step-tree
    #[arg(long)]
    pub algorithms: String,
    /// Chunk counts per NPU, comma-separated [default: each algorithm's own (1, or forestcoll's
    /// choice), or the system file's preferred-dataset-splits]
    #[arg(long, allow_negative_numbers = true)]
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
    // Results folder: summary.csv and figures
    #[command(flatten)]
    pub output: OutArgs,
    /// Run only share I of N (0 <= I < N) of the runs, for job arrays; join with `collsim merge`
    #[arg(long)]
    pub shard: Option<String>,
    /// stdout: a table (text) or the summary CSV (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation
    #[arg(long, value_enum)]
    pub time_model: Option<TimeModelArg>,
    /// dor, ecmp (hashed by each run's seed) or pinned, as `simulate --routing` [default: the
    /// experiment file's, or dor]
    #[arg(long, value_enum)]
    pub routing: Option<RoutingArg>,
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
pub struct MergeArgs {
    /// The shards' results folders
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Where the merged results go (never one of the shards)
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Write into a non-empty --out folder, first removing what collsim wrote there before
    #[arg(long)]
    pub force: bool,
}

pub(super) fn sweep(args: SweepArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let sizes = parse_size_list(&args.sizes).map_err(|e| Error::input(format!("--sizes: {e}")))?;
    let chunks = match &args.chunks {
        Some(list) => parse_list("--chunks", list, |c| {
            super::chunk_count(c)
                .map(Some)
                .map_err(|e| Error::input(format!("'{c}': {e}")))
        })?,
        None => vec![system.chunks],
    };
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
        utilization: false,
    };
    run_experiment(experiment, None, &args.batch)
}

pub(super) fn run_file(mut args: RunFileArgs) -> Result<(), Error> {
    let (mut experiment, text) = Experiment::load(&args.experiment)?;
    experiment.heatmaps |= args.heatmaps;
    if args.batch.output.out.is_none() {
        let stem = args.experiment.file_stem().unwrap_or("experiment".as_ref());
        args.batch.output.out = Some(PathBuf::from("results").join(stem));
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
    if let Some(routing) = args.routing {
        experiment.options.routing = routing.into();
    }
    experiment.validate &= !args.no_validate;
    if args.trials.is_some() {
        experiment.synth.trials = args.trials;
    }
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let out = args.output.prepare()?;
    let result = run_batch(&experiment, shard)?;
    if let Some(s) = shard.filter(|_| result.rows.is_empty() && result.skipped.is_empty()) {
        // A Slurm array larger than the experiment: this task has nothing to do, which is fine.
        eprintln!(
            "note: shard {} holds none of the experiment's runs (the array is larger than the \
             runs); nothing to do",
            args.shard.as_deref().unwrap_or_default()
        );
        if let Some(out) = out {
            write_batch(out, &experiment, source, &result, Some(s))?;
        }
        return Ok(());
    }
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
    if let Some(out) = out {
        write_batch(out, &experiment, source, &result, shard)?;
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
    if let Some(dir) = &args.output.out {
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

pub(super) fn merge_shards(args: MergeArgs) -> Result<(), Error> {
    let runs = merge(&args.shards, &args.out, args.force)?;
    eprintln!(
        "merged {} shard(s), {runs} run(s), into {}",
        args.shards.len(),
        args.out.display()
    );
    Ok(())
}
