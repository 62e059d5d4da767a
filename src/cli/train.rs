//! `train`: one training iteration per algorithm.

use std::path::PathBuf;

use clap::Args;

use super::{chunk_count, ForestArgs, Format, MultiDimArgs, OutArgs, TimeModelArg, TopologyArgs};
use crate::algorithms::Algorithm;
use crate::report::{breakdown_chart, write_breakdown_csv, BREAKDOWN_HEADER};
use crate::synth::SynthOptions;
use crate::units::parse_list;
use crate::workload::{compare, load_workload, TrainOptions};
use crate::Error;

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
    /// Chunks each collective is cut into [default: 1 (forestcoll: its own pieces per tree), or
    /// the system file's preferred-dataset-splits]
    #[arg(long, allow_negative_numbers = true, value_parser = chunk_count)]
    pub chunks: Option<u32>,
    #[command(flatten)]
    pub forest: ForestArgs,
    /// Skip the symbolic validation of the collective schedules
    #[arg(long)]
    pub no_validate: bool,
    /// exact: picoseconds; astra: ASTRA-sim's whole-ns truncation
    #[arg(long, value_enum, default_value = "exact")]
    pub time_model: TimeModelArg,
    // Results folder: breakdown.csv and breakdown.png/.svg
    #[command(flatten)]
    pub output: OutArgs,
    /// stdout: a table (text) or breakdown.csv (csv)
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub(super) fn train(args: TrainArgs) -> Result<(), Error> {
    let system = args.multi_dim.resolve()?;
    let topology = args.topology.build()?;
    let workload = load_workload(&args.workload)?;
    let algorithms = parse_list("--algorithm", &args.algorithm, Algorithm::parse)?;
    let out = args.output.prepare()?;
    let options = TrainOptions {
        algorithm: algorithms[0],
        sim: system.sim_options(args.time_model.into()),
        multi_dim: system.multi_dim,
        synth: SynthOptions::default(),
        validate: !args.no_validate,
        seed: args.seed,
        chunks: args.chunks.or(system.chunks),
        trees: args.forest.trees,
    };
    let heartbeat = crate::report::Heartbeat::start("training iteration");
    let rows = compare(&topology, &workload, &algorithms, &options)?;
    drop(heartbeat);
    for row in &rows {
        for note in &row.notes {
            eprintln!("note: {note}");
        }
    }
    if let Some(mut out) = out {
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
