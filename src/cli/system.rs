//! `--system FILE` without `--algorithm`: `train` and `simulate` run ASTRA-sim's system layer
//! ([`crate::astra`]), the file's keys meaning what they mean to ASTRA-sim. Flags that would
//! change collsim's own algorithms are refused here rather than silently ignored.

use std::path::Path;

use super::simulate::SimulateArgs;
use super::train::{load_program, placement, TrainArgs};
use super::{Format, MultiDimArgs, TimeModelArg};
use crate::astra::{run, Outcome, RankResult, Settings};
use crate::collective::{Collective, CollectiveKind};
use crate::report::{Summary, SUMMARY_HEADER};
use crate::units::Time;
use crate::workload::chakra::Durations;
use crate::workload::program::{Node, Program, Task};
use crate::workload::CommGroup;
use crate::Error;

/// The error for a flag that has no meaning under ASTRA-sim's system layer.
fn refuse(flag: &str, why: &str) -> Error {
    Error::input(format!(
        "{flag}: with --system, ASTRA-sim's system layer runs the collectives {why}"
    ))
}

/// The system file with `--active-chunks` and `--chunks` applied (the flags win).
fn settings(
    path: &Path,
    multi_dim: &MultiDimArgs,
    chunks: Option<u32>,
    time_model: Option<TimeModelArg>,
) -> Result<Settings, Error> {
    if multi_dim.intra_dimension.is_some() {
        return Err(refuse(
            "--intra-dimension",
            "and serves a queue's chunks first come first served",
        ));
    }
    if time_model == Some(TimeModelArg::Exact) {
        return Err(refuse("--time-model exact", "in whole nanoseconds"));
    }
    let mut settings = Settings::load(path)?;
    if !settings.ignored.is_empty() {
        eprintln!(
            "warning: {}: key(s) ASTRA-sim does not read, ignored as it ignores them: {}",
            path.display(),
            settings.ignored.join(", ")
        );
    }
    if let Some(n) = multi_dim.active_chunks {
        if n == 0 {
            return Err(Error::input("--active-chunks: 0 is too small: at least 1"));
        }
        settings.active_chunks = n;
    }
    if let Some(n) = chunks {
        settings.splits = n;
    }
    Ok(settings)
}

/// `train --system FILE`: the program run by ASTRA-sim's system layer and Chakra runtime.
pub(super) fn train(args: TrainArgs, path: &Path) -> Result<(), Error> {
    if args.algorithm.is_some() {
        return Err(refuse(
            "--algorithm",
            "as the system file's *-implementation lists name them; drop --system to run \
             collsim's algorithms",
        ));
    }
    let settings = settings(path, &args.multi_dim, args.chunks, args.time_model)?;
    let topology = args.topology.build()?;
    let (program, _) = load_program(args.workload_path(), &topology, Durations::Recorded)?;
    let npus = placement(&args, &program, &topology)?;
    let out = args
        .output
        .prepare_reading(&[(args.workload_path(), "--workload"), (path, "--system")])?;
    let heartbeat = crate::report::Heartbeat::start("training iteration");
    let ranks = run(&topology, &program, &npus, &settings)?.ranks;
    drop(heartbeat);
    const HEADER: &str = "rank,finish_ns,compute_ns,exposed_comm_ns";
    let row = |r: &RankResult| {
        format!(
            "{},{},{},{}",
            r.rank,
            r.finish.ns_string(),
            r.compute.ns_string(),
            r.exposed.ns_string()
        )
    };
    if let Some(mut out) = out {
        let file = out.file("ranks.csv");
        let mut text = format!("{HEADER}\n");
        for r in &ranks {
            text.push_str(&row(r));
            text.push('\n');
        }
        std::fs::write(&file, text).map_err(|e| Error::io(file.display(), e))?;
        out.commit()?;
    }
    match args.format {
        Format::Csv => {
            println!("{HEADER}");
            for r in &ranks {
                println!("{}", row(r));
            }
        }
        Format::Text => {
            println!(
                "{} on {} ({} ranks), ASTRA-sim's system layer with {}",
                program.name,
                topology.name(),
                ranks.len(),
                path.display()
            );
            const SHOWN: usize = 16;
            for r in ranks.iter().take(SHOWN) {
                println!(
                    "  sys[{}] finished, {} ns, exposed communication {} ns",
                    r.rank,
                    r.finish.ns_string(),
                    r.exposed.ns_string()
                );
            }
            if ranks.len() > SHOWN {
                let last = ranks.iter().map(|r| r.finish).max().unwrap_or_default();
                println!(
                    "  ... {} more ranks (--format csv lists them); the last finishes at {} ns",
                    ranks.len() - SHOWN,
                    last.ns_string()
                );
            }
        }
    }
    Ok(())
}

/// `simulate --system FILE`: one collective on every NPU, as ASTRA-sim runs a trace holding
/// only that collective; the summary's time is when the last rank finishes it.
pub(super) fn simulate(args: SimulateArgs, path: &Path) -> Result<(), Error> {
    let run_args = &args.run;
    for (given, flag) in [
        (args.collective.npus.is_some(), "--npus"),
        (args.collective.root.is_some(), "--root"),
        (run_args.msccl.is_some(), "--msccl"),
        (run_args.endpoint_delay.is_some(), "--endpoint-delay"),
        (run_args.reduce_bandwidth.is_some(), "--reduce-bandwidth"),
        (
            run_args.routing != super::simulate::RoutingArg::Dor,
            "--routing",
        ),
    ] {
        if given {
            return Err(refuse(
                flag,
                "on every NPU, over fixed shortest routes, with the file's endpoint delay and \
                 local-mem-bw; drop --system, or give --algorithm to run collsim's own \
                 algorithm",
            ));
        }
    }
    let settings = settings(
        path,
        &args.multi_dim,
        args.collective.chunks,
        run_args.time_model,
    )?;
    let requests = args.collective.requests()?;
    let [request] = requests.as_slice() else {
        return Err(Error::input(
            "--collective: with --system, one collective and one size (ASTRA-sim runs one \
             collective at a time per NPU)",
        ));
    };
    let kind = request.kind;
    if !crate::astra::runs(kind) {
        return Err(Error::input(format!(
            "--collective: ASTRA-sim's system layer runs all-reduce, all-gather, reduce-scatter \
             and all-to-all, not {kind}"
        )));
    }
    let topology = args.topology.build()?;
    let npus = topology.active_npus();
    let n = npus.len() as u64;
    // collsim names an all-gather by its output; an ASTRA-sim trace by each rank's input.
    let bytes = match kind {
        CollectiveKind::AllGather => request.size / n,
        _ => request.size,
    };
    let program = one_collective(kind, bytes, npus.len());
    let out = args.run.output.prepare()?;
    let outcome = run(&topology, &program, &npus, &settings)?;
    let claim = Collective::new(kind, npus, request.size, settings.splits, None)?;
    let summary = summary(&topology, &claim, &outcome)?;
    if let Some(mut out) = out {
        let file = out.file("summary.csv");
        std::fs::write(&file, format!("{SUMMARY_HEADER}\n{}\n", summary.csv_row()))
            .map_err(|e| Error::io(file.display(), e))?;
        out.commit()?;
    }
    match args.run.format {
        Format::Csv => println!("{SUMMARY_HEADER}\n{}", summary.csv_row()),
        Format::Text => print!("{}", summary.human()),
    }
    Ok(())
}

/// A program in which every rank runs one collective of `bytes` (per rank, as Chakra counts).
fn one_collective(kind: CollectiveKind, bytes: u64, ranks: usize) -> Program {
    let node = Node {
        id: 0,
        name: kind.name().to_string(),
        task: Task::Collective {
            kind,
            bytes,
            communicator: String::new(),
            group: CommGroup::Data,
            times: 1,
        },
        deps: Vec::new(),
    };
    Program {
        name: kind.name().to_string(),
        ranks: vec![vec![node]; ranks],
        ..Program::default()
    }
}

fn summary(
    topology: &crate::topology::Topology,
    claim: &Collective,
    outcome: &Outcome,
) -> Result<Summary, Error> {
    let time = outcome
        .ranks
        .iter()
        .map(|r| r.finish)
        .max()
        .unwrap_or(Time::ZERO);
    let links = outcome.links.len().max(1) as f64;
    let share = |t: Time| {
        if time == Time::ZERO {
            0.0
        } else {
            t.ps() as f64 / time.ps() as f64
        }
    };
    let summary = Summary {
        topology: topology.name().to_string(),
        npus: claim.ranks(),
        collective: claim.kind.name().to_string(),
        algorithm: "astra-system".into(),
        size_bytes: Some(claim.size),
        chunks_per_npu: Some(claim.chunks),
        collective_time: time,
        busbw_factor: Some(claim.kind.busbw_factor(claim.ranks())),
        bound: Some(
            crate::bound::bounds(topology, claim, Some(crate::bound::CUT_BOUND_BUDGET)).total(),
        ),
        transfers: outcome.messages as usize,
        synthesis_ms: None,
        seed: None,
        time_model: "astra".into(),
        link_utilization: outcome.links.iter().map(|l| share(l.busy)).sum::<f64>() / links,
        dim_utilization: Vec::new(),
        max_queue: outcome.links.iter().map(|l| l.max_queue).max().unwrap_or(0),
        queued_fraction: outcome.links.iter().map(|l| share(l.queued)).sum::<f64>() / links,
    };
    summary.check()?;
    Ok(summary)
}
