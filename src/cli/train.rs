//! `train`: one training iteration per algorithm; `trace`: a workload as Chakra traces.

use std::path::PathBuf;

use clap::Args;

use super::{chunk_count, ForestArgs, Format, MultiDimArgs, OutArgs, TimeModelArg, TopologyArgs};
use crate::algorithms::Algorithm;
use crate::report::{
    breakdown_chart, timeline_chart, write_breakdown_csv, write_ranks_csv, write_timeline_json,
    BREAKDOWN_HEADER,
};
use crate::synth::SynthOptions;
use crate::topology::{NodeId, Topology};
use crate::units::parse_list;
use crate::workload::{chakra, compare_with, load_workload, Breakdown, TrainOptions};
use crate::Error;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["workload", "model"])))]
pub struct TrainArgs {
    /// Workload: collsim YAML (.yaml), an ASTRA-sim text workload, or Chakra execution traces
    /// (a folder of NAME.RANK.et[.gz] files, or its DIR/NAME prefix)
    #[arg(long, short = 'w')]
    pub workload: Option<PathBuf>,
    #[command(flatten)]
    pub llm: super::llm::LlmArgs,
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Chakra traces: the NPU each rank runs on, comma-separated NPU ids or half-open ranges
    /// (0..16,32..48) [default: rank r on the r-th NPU, when the counts agree]
    #[arg(long)]
    pub ranks_map: Option<String>,
    /// Algorithms for the collectives, comma-separated (one iteration each) [default: ring;
    /// with --system the collectives run as the system file's implementations]
    #[arg(long, short = 'a')]
    pub algorithm: Option<String>,
    #[command(flatten)]
    pub multi_dim: MultiDimArgs,
    /// Seed of the synthesizer and of validation
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Chunks each collective is cut into [default: 1 (forestcoll: its own pieces per tree), or
    /// the system file's preferred-dataset-splits]
    #[arg(long, allow_negative_numbers = true, value_parser = chunk_count)]
    pub chunks: Option<u32>,
    #[command(flatten)]
    pub forest: ForestArgs,
    /// Skip the symbolic validation of the collective schedules
    #[arg(long)]
    pub no_validate: bool,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation [default: exact; with
    /// --system always astra]
    #[arg(long, value_enum)]
    pub time_model: Option<TimeModelArg>,
    // Results folder: breakdown.csv, breakdown.png/.svg, ranks.csv, timeline.json and, up to 64
    // ranks, timeline.png/.svg
    #[command(flatten)]
    pub output: OutArgs,
    /// stdout: a table (text) or breakdown.csv (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// `collsim trace`: a workload written as Chakra execution traces.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Workload file: collsim YAML (.yaml) or an ASTRA-sim text workload
    #[arg(long, short = 'w')]
    pub workload: PathBuf,
    /// The network whose NPUs are the ranks (and whose dimensions give hybrid parallelism's groups)
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Folder for NAME.RANK.et (made if missing; must be empty unless --force)
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Write into a non-empty --out folder, replacing what collsim wrote there before
    #[arg(long)]
    pub force: bool,
    /// Write gzip-compressed NAME.RANK.et.gz files
    #[arg(long)]
    pub gzip: bool,
}

/// Ranks beyond which no Gantt chart is drawn (its rows would be too thin to read).
const GANTT_RANKS: usize = 64;

pub(super) fn trace(args: TraceArgs) -> Result<(), Error> {
    let topology = args.topology.build()?;
    let workload = load_workload(&args.workload)?;
    let program = workload.program(&topology)?;
    let mut out = crate::report::OutputDir::prepare(&args.out, args.force)?;
    out.keep_input(&args.workload, "--workload")?;
    let files = chakra::write_traces(&program, &mut |name| out.file(name), args.gzip)?;
    out.commit()?;
    let nodes: usize = program.ranks.iter().map(Vec::len).sum();
    println!(
        "{}: {} ranks, {nodes} nodes, written to {}",
        program.name,
        files.len(),
        args.out.join(format!("{}.RANK.et", program.name)).display()
    );
    Ok(())
}

/// The NPUs of `--ranks-map` for `ranks` ranks.
fn ranks_map(text: &str, ranks: usize, topology: &Topology) -> Result<Vec<NodeId>, Error> {
    let bad = |why: String| Error::input(format!("--ranks-map: {why}"));
    let mut npus = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let number = |s: &str| {
            s.parse::<NodeId>()
                .map_err(|_| bad(format!("'{item}' is not an NPU id or a range A..B")))
        };
        match item.split_once("..") {
            Some((a, b)) => npus.extend(number(a)?..number(b)?),
            None => npus.push(number(item)?),
        }
    }
    if npus.len() != ranks {
        return Err(bad(format!("names {} NPUs for {ranks} ranks", npus.len())));
    }
    let active = topology.active_npus();
    let mut seen = std::collections::HashSet::new();
    for &v in &npus {
        if active.binary_search(&v).is_err() {
            return Err(bad(format!("{v} is not an NPU of {}", topology.name())));
        }
        if !seen.insert(v) {
            return Err(bad(format!("NPU {v} is named twice")));
        }
    }
    Ok(npus)
}

/// The workload as a program, and its layer count when it came from a layer file.
pub(super) fn load_program(
    workload: &std::path::Path,
    topology: &Topology,
    durations: chakra::Durations,
) -> Result<(crate::workload::program::Program, Option<usize>), Error> {
    Ok(match chakra::find_traces(workload)? {
        Some(files) => {
            let name = chakra::trace_name(&files[0]);
            let program =
                chakra::load_traces(&files, &name, durations, &mut |w| eprintln!("warning: {w}"))?;
            (program, None)
        }
        None => {
            let workload = load_workload(workload)?;
            (workload.program(topology)?, Some(workload.layers.len()))
        }
    })
}

/// The NPU each rank runs on: `--ranks-map`, or rank r on the r-th NPU.
pub(super) fn placement(
    args: &TrainArgs,
    program: &crate::workload::program::Program,
    topology: &Topology,
) -> Result<Vec<NodeId>, Error> {
    Ok(match &args.ranks_map {
        Some(text) => ranks_map(text, program.ranks.len(), topology)?,
        None => {
            let npus = topology.active_npus();
            if npus.len() != program.ranks.len() {
                return Err(Error::input(format!(
                    "{}: {} ranks, but {} has {} NPUs: give --ranks-map to place them",
                    args.workload_path().display(),
                    program.ranks.len(),
                    topology.name(),
                    npus.len()
                )));
            }
            npus
        }
    })
}

impl TrainArgs {
    /// The `--workload` path (clap demands it unless `--model` is given).
    pub(super) fn workload_path(&self) -> &std::path::Path {
        self.workload
            .as_deref()
            .expect("clap requires --workload without --model")
    }
}

pub(super) fn train(args: TrainArgs) -> Result<(), Error> {
    if args.llm.model.is_some() {
        return super::llm::train(args);
    }
    if let Some(path) = args.multi_dim.system.clone() {
        return super::system::train(args, &path);
    }
    let system = args.multi_dim.resolve()?;
    let topology = args.topology.build()?;
    let (program, layers) =
        load_program(args.workload_path(), &topology, chakra::Durations::Exact)?;
    let npus = placement(&args, &program, &topology)?;
    let algorithms = parse_list(
        "--algorithm",
        args.algorithm.as_deref().unwrap_or("ring"),
        Algorithm::parse,
    )?;
    let out = args
        .output
        .prepare_reading(&[(args.workload_path(), "--workload")])?;
    let options = TrainOptions {
        algorithm: algorithms[0],
        sim: system.sim_options(args.time_model.unwrap_or(TimeModelArg::Exact).into()),
        multi_dim: system.multi_dim,
        synth: SynthOptions::default(),
        validate: !args.no_validate,
        seed: args.seed,
        chunks: args.chunks.or(system.chunks),
        trees: args.forest.trees,
        solo_timer: None,
        timeline_ranks: None,
        progress: None,
    };
    let heartbeat = crate::report::Heartbeat::start("training iteration");
    // One algorithm's iteration counts its tasks and its transfers for the log; several run at
    // once and say each when it is done.
    let options = TrainOptions {
        progress: (algorithms.len() == 1).then(|| heartbeat.steps()),
        ..options
    };
    let runs = compare_with(&program.name, &algorithms, &options, |o| match o.progress {
        Some(_) => {
            crate::workload::execute(&topology, &program, &npus, o, &mut super::Progress::new())
        }
        None => crate::workload::execute(&topology, &program, &npus, o, &mut ()),
    })?;
    drop(heartbeat);
    let rows: Vec<Breakdown> = runs.iter().map(|r| r.breakdown.clone()).collect();
    for row in &rows {
        for note in &row.notes {
            eprintln!("note: {note}");
        }
    }
    if let Some(mut out) = out {
        write_breakdown_csv(&rows, &out.file("breakdown.csv"))?;
        let title = format!(
            "{} on {}: one training iteration",
            program.name,
            topology.name()
        );
        crate::report::save_figure(&breakdown_chart(&rows, &title), &mut out, "breakdown")?;
        let ranks: Vec<(String, Vec<_>)> = runs
            .iter()
            .map(|r| (r.breakdown.algorithm.clone(), r.ranks.clone()))
            .collect();
        write_ranks_csv(&ranks, &out.file("ranks.csv"))?;
        let spans: Vec<(String, Vec<_>)> = runs
            .iter()
            .map(|r| (r.breakdown.algorithm.clone(), r.timeline.clone()))
            .collect();
        let count = program.ranks.len() as u32;
        write_timeline_json(&spans, count, &out.file("timeline.json"))?;
        if program.ranks.len() <= GANTT_RANKS {
            let title = format!(
                "{} on {} with {}: timeline per rank",
                program.name,
                topology.name(),
                runs[0].breakdown.algorithm
            );
            let chart = timeline_chart(&runs[0].timeline, count, &title);
            crate::report::save_figure(&chart, &mut out, "timeline")?;
        }
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
            let what = layers.map_or_else(
                || format!("{} ranks", program.ranks.len()),
                |l| format!("{l} layers"),
            );
            println!(
                "{} on {} ({what}), one training iteration (the slowest rank)",
                program.name,
                topology.name(),
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
