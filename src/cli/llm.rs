//! `train --model`: one iteration of a language model in a Megatron-style layout.

use std::io::Write;

use super::train::TrainArgs;
use super::{Format, TimeModelArg};
use crate::algorithms::Algorithm;
use crate::llm::{self, Attention, Gpu, Layout, LlmModel, Outcome, Plan, Recompute, ZeroStage};
use crate::report::{write_ranks_csv, write_timeline_json};
use crate::synth::SynthOptions;
use crate::workload::TrainOptions;
use crate::Error;

/// A flag that takes one of two words: true for `yes`, false for `no`.
fn either(flag: &str, value: &str, yes: &str, no: &str) -> Result<bool, Error> {
    match value {
        v if v == yes => Ok(true),
        v if v == no => Ok(false),
        other => Err(Error::input(format!(
            "--{flag} '{other}': expected {yes} or {no}"
        ))),
    }
}

/// The divisors of `n`, smallest first.
fn divisors(n: u64) -> impl Iterator<Item = u64> {
    (1..=n).filter(move |d| n.is_multiple_of(*d))
}

/// A flag's comma-separated list of positive sizes.
fn sizes(flag: &str, text: &str) -> Result<Vec<u64>, Error> {
    let mut list = Vec::new();
    for item in text.split(',').map(str::trim) {
        let value = item.parse::<u64>().map_err(|_| {
            Error::input(format!("--{flag} '{text}': '{item}' is not a whole number"))
        })?;
        list.push(positive(flag, value)?);
    }
    list.dedup();
    Ok(list)
}

fn positive(flag: &str, value: u64) -> Result<u64, Error> {
    if value == 0 {
        return Err(Error::input(format!("--{flag}: must be at least 1")));
    }
    Ok(value)
}

pub(super) fn train(args: TrainArgs) -> Result<(), Error> {
    let a = &args.llm;
    let path = a.model.as_deref().expect("train --model");
    let (model, notes) = LlmModel::load_with_seq(path, a.seq)?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let system = args.topology.options().gpu_system()?;
    let gpu = match &a.gpu {
        Some(name) => Gpu::parse(name)?,
        None => Gpu::of_system(system.as_ref()),
    };
    let topology = args.topology.build()?;
    let gpus = topology.active_npus().len() as u64;
    if let Some(d) = a.dp {
        positive("dp", d)?;
    }
    let box_gpus = system.as_ref().map_or(gpus, |s| u64::from(s.gpus_per_box));
    let tps = match a.tp.as_str() {
        "auto" => divisors(box_gpus.min(gpus))
            .filter(|t| model.heads % t == 0 && model.kv_heads % t == 0)
            .collect(),
        text => sizes("tp", text)?,
    };
    // GPUs a data- and context-parallel replica spans, which the pipeline's stages divide.
    let replica = gpus / (a.dp.unwrap_or(1).max(1) * a.cp.max(1));
    // Sizes up to the layers; whether the layers split over them (evenly, or as
    // --first/last-stage-layers say) is the layout check's to say, as for a listed size.
    let pps = match a.pp.as_str() {
        "auto" => divisors(replica)
            .take_while(|&p| p <= model.layers)
            .collect(),
        text => sizes("pp", text)?,
    };
    let global_batch = positive(
        "global-batch",
        a.global_batch.ok_or_else(|| {
            Error::input("train --model needs --global-batch (sequences per iteration)")
        })?,
    )?;
    if a.grad_reduce_in_bf16 && a.precision == "fp16" {
        return Err(Error::input(
            "--grad-reduce-in-bf16: FP16 training reduces its gradients in FP16 already; it \
             goes with --precision bf16",
        ));
    }
    let layer_times = match &a.layer_times {
        Some(path) => Some(llm::compute::LayerTimes::load(path)?),
        None => None,
    };
    let plan = Plan {
        model,
        gpu,
        layer_times,
        layout: Layout {
            tp: 1,
            pp: 1,
            dp: 1,
            ep: positive("ep", a.ep)?,
            cp: positive("cp", a.cp)?,
            virtual_stages: 1,
            micro_batch: 1,
            global_batch,
            zero: ZeroStage::parse(a.zero)?,
            recompute: Recompute::parse(&a.recompute)?,
            sequence_parallel: a.sequence_parallel,
            tp_comm_overlap: a.tp_comm_overlap,
            async_tp_allreduce: a.async_tensor_model_parallel_allreduce,
            overlap_p2p: a.overlap_p2p_communication,
            attention: Attention::parse(&a.attention)?,
            placement: llm::Placement::parse(&a.placement)?,
            first_stage_layers: a.first_stage_layers,
            last_stage_layers: a.last_stage_layers,
            embedding_in_split: a.account_for_embedding_in_pipeline_split,
            loss_in_split: a.account_for_loss_in_pipeline_split,
            overlap_grad_reduce: either("grad-reduce", &a.grad_reduce, "overlapped", "after")?,
            fused_grad_accumulation: either(
                "grad-accumulation",
                &a.grad_accumulation,
                "fused",
                "separate",
            )?,
            precision: llm::Precision::parse(&a.precision)?,
            grad_reduce_in_bf16: a.grad_reduce_in_bf16,
            scatter_gather: !a.no_scatter_gather,
        },
    };
    let search = llm::Search {
        tp: tps,
        pp: pps,
        dp: a.dp,
        micro_batch: match &a.micro_batch {
            Some(text) => sizes("micro-batch", text)?,
            None => vec![1, 2, 4, 8],
        },
        virtual_stages: match &a.virtual_stages {
            Some(text) => sizes("virtual-stages", text)?,
            None => vec![1, 2, 4],
        },
    };
    let layouts = llm::candidates(&plan, gpus, &search)?;
    let algorithm = match args.algorithm.as_deref() {
        None => Algorithm::Ring,
        Some(name) => Algorithm::parse(name)?,
    };
    let options = TrainOptions {
        algorithm,
        sim: crate::sim::SimOptions {
            time_model: args.time_model.unwrap_or(TimeModelArg::Exact).into(),
            ..Default::default()
        },
        multi_dim: crate::algorithms::MultiDimOptions::default(),
        synth: SynthOptions::default(),
        validate: !args.no_validate,
        seed: args.seed,
        chunks: args.chunks,
        trees: args.forest.trees,
        solo_timer: match a.box_collectives.as_str() {
            "nccl" => system.map(|s| {
                std::sync::Arc::new(llm::NcclTimer::for_system(s))
                    as std::sync::Arc<dyn crate::workload::SoloTimer>
            }),
            "engine" => None,
            other => {
                return Err(Error::input(format!(
                    "--box-collectives '{other}': expected nccl or engine"
                )))
            }
        },
        timeline_ranks: None,
        progress: None,
    };
    let out = args.output.prepare_reading(&[(path, "--model")])?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for (i, layout) in layouts.iter().enumerate() {
        if layouts.len() > 1 {
            eprintln!("[{}/{}] {}", i + 1, layouts.len(), layout.describe());
        }
        let candidate = Plan {
            layout: layout.clone(),
            ..plan.clone()
        };
        // The timeline keeps one pipeline: the ranks of tensor and data index 0, every stage.
        let options = TrainOptions {
            timeline_ranks: Some(
                (0..layout.pp)
                    .map(|s| (layout.tp * layout.replicas() * s) as u32)
                    .collect(),
            ),
            ..options.clone()
        };
        let heartbeat = crate::report::Heartbeat::start("training iteration");
        let options = TrainOptions {
            progress: Some(heartbeat.steps()),
            ..options
        };
        let mut progress = super::Progress::new();
        outcomes.push(llm::simulate(
            &candidate,
            &topology,
            &options,
            &mut progress,
        )?);
        drop(heartbeat);
    }
    let best = (0..outcomes.len())
        .min_by_key(|&i| outcomes[i].step_time)
        .expect("at least one layout");
    if outcomes.len() > 1 {
        eprintln!(
            "note: fastest of {} layouts: {}",
            outcomes.len(),
            outcomes[best].layout.describe()
        );
    }
    let chosen = &outcomes[best];
    if let Some(mut out) = out {
        let path = out.file("summary.csv");
        let io = |e| Error::io(path.display(), e);
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        writeln!(w, "{}", summary_header()).map_err(io)?;
        for o in &outcomes {
            writeln!(w, "{}", summary_row(&plan, topology.name(), algorithm, o)).map_err(io)?;
        }
        w.flush().map_err(io)?;
        let title = format!(
            "{} on {}: one iteration per layout (slowest rank)",
            plan.model.name,
            topology.name()
        );
        crate::report::save_figure(&breakdown_chart(&outcomes, &title), &mut out, "breakdown")?;
        let e = &chosen.execution;
        let load = crate::report::LinkLoad {
            bytes: &e.link_bytes,
            busy: &e.link_busy,
            max_queue: &e.link_max_queue,
            queued: &e.link_queued,
        };
        crate::report::write_link_load_csv(
            &topology,
            &load,
            chosen.step_time,
            &out.file("links.csv"),
        )?;
        let name = algorithm.name().to_string();
        write_ranks_csv(
            &[(name.clone(), chosen.execution.ranks.clone())],
            &out.file("ranks.csv"),
        )?;
        write_timeline_json(
            &[(name, chosen.execution.timeline.clone())],
            chosen.layout.gpus() as u32,
            &out.file("timeline.json"),
        )?;
        out.commit()?;
    }
    match args.format {
        Format::Csv => {
            println!("{}", summary_header());
            println!("{}", summary_row(&plan, topology.name(), algorithm, chosen));
        }
        Format::Text => {
            if outcomes.len() > 1 {
                println!("{} layouts tried:", outcomes.len());
                let labels: Vec<String> = outcomes.iter().map(|o| o.layout.describe()).collect();
                let width = labels.iter().map(String::len).max().unwrap_or(0);
                for (o, label) in outcomes.iter().zip(&labels) {
                    println!(
                        "  {label:<width$} {:>10.3} s {:>8.1} TFLOP/s",
                        o.step_time.as_secs_f64(),
                        o.tflops_per_gpu
                    );
                }
                println!("fastest:");
            }
            print_text(&plan, topology.name(), chosen)
        }
    }
    Ok(())
}

/// Stacked bars per layout: compute, bubble and exposed communication per dimension, seconds.
fn breakdown_chart(outcomes: &[Outcome], title: &str) -> crate::report::BarChart {
    let mut series = vec![
        (
            "compute".to_string(),
            outcomes
                .iter()
                .map(|o| {
                    let b = &o.slowest_rank().breakdown;
                    (b.forward_compute + b.backward_compute).as_secs_f64()
                })
                .collect(),
        ),
        (
            "pipeline bubble".to_string(),
            outcomes
                .iter()
                .map(|o| o.slowest_rank().bubble.as_secs_f64())
                .collect(),
        ),
    ];
    for (d, (_, group)) in llm::DIMENSIONS.iter().enumerate() {
        let values: Vec<f64> = outcomes
            .iter()
            .map(|o| o.exposed[d].1.as_secs_f64())
            .collect();
        if values.iter().any(|&v| v > 0.0) {
            series.push((format!("exposed {group}"), values));
        }
    }
    crate::report::BarChart {
        title: title.to_string(),
        y_label: "step time (s)".into(),
        groups: outcomes.iter().map(|o| o.layout.short()).collect(),
        series,
        stacked: true,
        references: 0,
    }
}

fn summary_header() -> String {
    let mut h = String::from(
        "model,gpu,topology,algorithm,gpus,tp,pp,dp,ep,cp,virtual_stages,micro_batch,\
         global_batch,zero,recompute,step_time_s,tflops_per_gpu,mfu,mfu_no_recompute,\
         bubble_fraction",
    );
    for (short, _) in llm::DIMENSIONS {
        h += &format!(",exposed_{short}_s");
    }
    h += ",memory_gb,placement";
    h
}

fn summary_row(plan: &Plan, topology: &str, algorithm: Algorithm, o: &Outcome) -> String {
    let l = &o.layout;
    let mut row = format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.3},{:.4},{:.4},{:.4}",
        crate::report::csv_field(&plan.model.name),
        plan.gpu.name,
        crate::report::csv_field(topology),
        algorithm.name(),
        l.gpus(),
        l.tp,
        l.pp,
        l.dp,
        l.ep,
        l.cp,
        l.virtual_stages,
        l.micro_batch,
        l.global_batch,
        l.zero.level(),
        match l.recompute {
            Recompute::Full => "full",
            Recompute::Selective => "selective",
            Recompute::None => "none",
        },
        o.step_time.as_secs_f64(),
        o.tflops_per_gpu,
        o.mfu,
        o.mfu_no_recompute,
        o.bubble_fraction
    );
    for (_, t) in o.exposed {
        row += &format!(",{:.6}", t.as_secs_f64());
    }
    row += &format!(",{:.2},\"{}\"", o.memory_bytes / 1e9, l.placement.name());
    row
}

fn print_text(plan: &Plan, topology: &str, o: &Outcome) {
    println!(
        "{} on {topology} ({} GPUs, {}): {}",
        plan.model.name,
        o.layout.gpus(),
        plan.gpu.name,
        o.layout.describe()
    );
    // The fraction without recomputed FLOPs only where something is recomputed.
    let model_only = if o.layout.recompute == Recompute::None {
        String::new()
    } else {
        format!(
            "; {:.1}% without recomputed FLOPs",
            100.0 * o.mfu_no_recompute
        )
    };
    println!(
        "  step time {:.3} s, {:.1} TFLOP/s per GPU ({:.1}% of peak{model_only}), bubble {:.1}%",
        o.step_time.as_secs_f64(),
        o.tflops_per_gpu,
        100.0 * o.mfu,
        100.0 * o.bubble_fraction
    );
    let exposed: Vec<String> = o
        .exposed
        .iter()
        .filter(|(_, t)| *t > crate::units::Time::ZERO)
        .map(|(g, t)| format!("{g} {:.3} s", t.as_secs_f64()))
        .collect();
    println!(
        "  exposed communication: {}",
        if exposed.is_empty() {
            "none".to_string()
        } else {
            exposed.join(", ")
        }
    );
    if let Some(per_layer) = o.exposed_per_expert_layer(plan) {
        println!(
            "  expert all-to-alls: {:.3} ms exposed per expert layer and micro-batch (forward \
             and backward, {} all-to-alls; the stage where it is longest)",
            per_layer * 1e3,
            if o.layout.recompute == Recompute::Full {
                6
            } else {
                4
            }
        );
    }
    println!(
        "  memory per GPU: about {:.1} GB of {:.0} GB",
        o.memory_bytes / 1e9,
        plan.gpu.memory_bytes / 1e9
    );
}
