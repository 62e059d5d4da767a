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

/// A language model and its parallel layout (`train --model`).
#[derive(Args, Debug, Default)]
pub struct LlmArgs {
    /// Language model file (YAML: layers, hidden, heads, kv_heads, ffn, seq, vocab, experts,
    /// top_k, gated_mlp; workloads/llm/ has GPT-3, Megatron's Table 1 models, Llama 3, an MoE),
    /// or a Hugging Face config.json
    #[arg(long, conflicts_with_all = ["workload", "ranks_map", "system"])]
    pub model: Option<std::path::PathBuf>,
    /// Tokens a sequence trains on, replacing the model file's `seq` (Megatron's --seq-length;
    /// a Hugging Face config.json gives only its context length)
    #[arg(long, requires = "model")]
    pub seq: Option<u64>,
    /// GPU of every rank: a100, a800, h100, h800, h200, b200, mi300x [default: the GPU system's own
    /// (dgx-a100:N: a100, hgx-h100:N: h100, ...), else a100]
    #[arg(long, requires = "model")]
    pub gpu: Option<String>,
    /// Tensor-parallel size; a comma-separated list searches them all, `auto` every size that
    /// divides a box's GPUs and the model's heads
    #[arg(long, default_value = "1", requires = "model")]
    pub tp: String,
    /// Pipeline-parallel size; a comma-separated list searches them all, `auto` every size up to
    /// the model's layers that divides the GPUs
    #[arg(long, default_value = "1", requires = "model")]
    pub pp: String,
    /// Data-parallel size [default: GPUs / (tp x pp)]
    #[arg(long, requires = "model")]
    pub dp: Option<u64>,
    /// Expert-parallel size (within the data-parallel group)
    #[arg(long, default_value_t = 1, requires = "model")]
    pub ep: u64,
    /// Context-parallel size: each sequence split over this many GPUs (Megatron's rank order
    /// tp-cp-dp-pp; keys and values all-gathered in the group every layer)
    #[arg(long, default_value_t = 1, requires = "model")]
    pub cp: u64,
    /// Model chunks per pipeline stage (the interleaved schedule); a comma-separated list
    /// searches them all [default: the fastest of 1, 2, 4]
    #[arg(long, requires = "model")]
    pub virtual_stages: Option<String>,
    /// Layers of the first pipeline stage, the rest split evenly over the others (Megatron's
    /// --decoder-first-pipeline-num-layers), for models whose layers do not split evenly
    #[arg(long, requires = "model")]
    pub first_stage_layers: Option<u64>,
    /// Layers of the last pipeline stage (--decoder-last-pipeline-num-layers)
    #[arg(long, requires = "model")]
    pub last_stage_layers: Option<u64>,
    /// Count the embedding as a layer when splitting the layers over the pipeline's chunks: the
    /// first chunk holds one layer fewer (Megatron-core's flag of that name)
    #[arg(long, requires = "model")]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Count the loss as a layer: the last chunk holds one layer fewer (Megatron-core's flag)
    #[arg(long, requires = "model")]
    pub account_for_loss_in_pipeline_split: bool,
    /// ZeRO stage: 0, 1 (optimizer state sharded), 2 (gradients too), 3 (weights too, gathered
    /// per layer: ZeRO-3/FSDP, without pipeline parallelism)
    #[arg(long, default_value_t = 0, requires = "model")]
    pub zero: u8,
    /// Activation recomputation: full, selective, none
    #[arg(long, default_value = "full", requires = "model")]
    pub recompute: String,
    /// Sequences per micro-batch; a comma-separated list searches them all [default: the
    /// fastest of 1, 2, 4, 8]
    #[arg(long, requires = "model")]
    pub micro_batch: Option<String>,
    /// Sequences per iteration
    #[arg(long, requires = "model")]
    pub global_batch: Option<u64>,
    /// Sequence parallelism in the tensor group (all-gathers and reduce-scatters)
    #[arg(long, requires = "model")]
    pub sequence_parallel: bool,
    /// The tensor group's collectives overlapped with the products that make or use their
    /// tensors, as Megatron-core's --tp-comm-overlap runs them (Transformer Engine's
    /// userbuffers); needs --sequence-parallel
    #[arg(long, requires = "sequence_parallel")]
    pub tp_comm_overlap: bool,
    /// Without --sequence-parallel, the backward's tensor all-reduces of input gradients run
    /// beside the weight-gradient products, as Megatron-core always runs them (Megatron-LM's
    /// --async-tensor-model-parallel-allreduce of 2021-22) [default: after the layer's compute,
    /// as Megatron-LM 2021 ran them]
    #[arg(long, requires = "model", conflicts_with = "sequence_parallel")]
    pub async_tensor_model_parallel_allreduce: bool,
    /// The interleaved schedule's sends overlapped with the next step's compute, as
    /// Megatron-core runs it by default (its --no-overlap-p2p-communication turns it off; earlier
    /// versions' --overlap-p2p-communication on); without --virtual-stages above 1 sends are
    /// waited for, as Megatron does
    #[arg(long, requires = "model")]
    pub overlap_p2p_communication: bool,
    /// Every tensor rank sends its stage's activations whole to the next stage, without
    /// Megatron's scatter/gather (its --no-scatter-gather-tensors-in-pipeline)
    #[arg(long, requires = "model")]
    pub no_scatter_gather: bool,
    /// Attention kernel: standard (scores in memory, Megatron 2021) or flash
    #[arg(long, default_value = "flash", requires = "model")]
    pub attention: String,
    /// When gradients are reduced over the data-parallel group: overlapped (bucket by bucket
    /// during the last backward pass: Megatron-core, PyTorch DDP) or after (one call once the
    /// backward passes end: Megatron-LM 2021's own DDP)
    #[arg(long, default_value = "overlapped", requires = "model")]
    pub grad_reduce: String,
    /// How each micro-batch's weight gradients join the step's: fused (summed inside the
    /// weight-gradient product, Megatron-core's gradient_accumulation_fusion) or separate (a
    /// kernel of its own, PyTorch autograd: Megatron-LM 2021, DDP, FSDP)
    #[arg(long, default_value = "fused", requires = "model")]
    pub grad_accumulation: String,
    /// Training precision: bf16, fp16 with loss scaling (the optimizer also unscales the
    /// gradients and checks them for overflow: Megatron-LM's --fp16), or fp8 (BF16 training
    /// whose transformer layers' linear products run in FP8, Transformer Engine's recipe:
    /// Megatron-core's --fp8-format hybrid; H100, H200 and B200)
    #[arg(long, default_value = "bf16", requires = "model")]
    pub precision: String,
    /// BF16 training accumulates and reduces its gradients in BF16 (Megatron's
    /// --grad-reduce-in-bf16), not FP32 as Megatron does by default
    #[arg(long, requires = "model")]
    pub grad_reduce_in_bf16: bool,
    /// Collectives inside one box that run alone on its links (the tensor-parallel group's):
    /// nccl (the NCCL model's time for the call, on GPU systems such as dgx-a100:N) or engine
    /// (the --algorithm's schedule on the network)
    #[arg(long, default_value = "nccl", requires = "model")]
    pub box_collectives: String,
    /// Measured layer times replacing the GPU's compute model: CSV with columns
    /// tp,micro_batch,forward_ms,backward_ms (one layer, one micro-batch; backward with what it
    /// recomputes)
    #[arg(long, requires = "model")]
    pub layer_times: Option<std::path::PathBuf>,
    /// Which parallel dimension fills the GPUs first, then second, then third (Megatron's
    /// default tp,dp,pp keeps a tensor group in a box)
    #[arg(long, default_value = "tp,dp,pp", requires = "model")]
    pub placement: String,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["workload", "model"])))]
pub struct TrainArgs {
    /// Workload: collsim YAML (.yaml), an ASTRA-sim text workload, or Chakra execution traces
    /// (a folder of NAME.RANK.et[.gz] files, or its DIR/NAME prefix)
    #[arg(long, short = 'w')]
    pub workload: Option<PathBuf>,
    #[command(flatten)]
    pub llm: LlmArgs,
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

/// `train --workload` on a topology (a language model is `llm`'s, a `--system` file
/// `system`'s).
pub(super) fn train(args: TrainArgs) -> Result<(), Error> {
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
