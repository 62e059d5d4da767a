//! Training iterations: the acceptance closed form, the breakdown's invariants on every shipped
//! workload, both workload formats agreeing, and the command's outputs and errors.

mod common;

use std::path::Path;

use collsim::algorithms::{generate, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::sim::{simulate, SimOptions};
use collsim::topology::{Topology, TopologyOptions};
use collsim::units::Time;
use collsim::workload::{load_workload, simulate_iteration, Breakdown, TrainOptions, Workload};
use common::{collsim, Table};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("collsim-train", name)
}

fn workload(name: &str) -> Workload {
    load_workload(Path::new(&format!(
        "{}/workloads/{name}",
        env!("CARGO_MANIFEST_DIR")
    )))
    .unwrap()
}

fn options(algorithm: Algorithm, chunks: u32) -> TrainOptions {
    TrainOptions {
        chunks: Some(chunks),
        ..TrainOptions::new(algorithm)
    }
}

fn check_invariants(b: &Breakdown) {
    assert_eq!(
        b.forward_compute + b.backward_compute + b.exposed_comm,
        b.total,
        "{b:?}"
    );
    assert_eq!(
        b.exposed_data_parallel + b.exposed_model_parallel,
        b.exposed_comm,
        "{b:?}"
    );
}

/// The case: one DATA layer (forward 1000, input-gradient 2000, weight-gradient 3000
/// cycles, a 1 GiB ALLREDUCE) on ring:4 at 50 GiB/s and 0.5 us with Ring: the iteration is
/// 6000 ns plus the bidirectional ring all-reduce, exactly.
#[test]
fn one_data_layer_is_its_compute_plus_one_all_reduce() {
    let dir = scratch("one");
    let file = dir.join("one.txt");
    std::fs::write(
        &file,
        "DATA\n1\nl0 -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 1073741824 0\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = collsim(&[
        "train",
        "--workload",
        file.to_str().unwrap(),
        "--topology",
        "ring:4",
        "--bandwidth",
        "50GiB/s",
        "--latency",
        "0.5us",
        "--algorithm",
        "ring",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(out.join("breakdown.csv")).unwrap();
    let table = Table::parse(&csv);
    assert_eq!(
        table.header.join(","),
        "workload,algorithm,forward_compute_ns,backward_compute_ns,exposed_comm_ns,total_ns,\
         exposed_data_parallel_ns,exposed_model_parallel_ns"
    );
    let t = TopologyOptions::new("ring:4")
        .with_links("50GiB/s", "0.5us")
        .build()
        .unwrap();
    let c = Collective::new(
        CollectiveKind::AllReduce,
        vec![0, 1, 2, 3],
        1 << 30,
        1,
        None,
    )
    .unwrap();
    let s = generate(Algorithm::Ring, &t, &c).unwrap();
    let ring = simulate(&t, &s, &SimOptions::default(), &mut ())
        .unwrap()
        .finish;
    assert_eq!(
        table.cell(0, "total_ns"),
        (Time::from_ns(6000) + ring).ns_string()
    );
    assert_eq!(table.cell(0, "forward_compute_ns"), "1000");
    assert_eq!(table.cell(0, "backward_compute_ns"), "5000");
    assert!(std::fs::read(out.join("breakdown.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
    assert!(out.join("breakdown.svg").exists());
}

/// forward + backward + exposed = total and the kinds add up, for every shipped workload on a
/// hierarchical network, with several algorithms; overlapped weight-gradient communication is
/// counted once (the exposed time never exceeds the communication's own time).
#[test]
fn every_breakdown_adds_up() {
    let hier = TopologyOptions::new("dims:switch4,switch2,switch2")
        .with_links("200GB/s,100GB/s,50GB/s", "700ns,700ns,1700ns")
        .build()
        .unwrap();
    let mut cases: Vec<(Workload, Topology)> = vec![
        (workload("resnet50.yaml"), hier.clone()),
        (workload("gnmt.yaml"), hier.clone()),
        (workload("dlrm.yaml"), hier.clone()),
    ];
    // Turing-NLG's model-parallel groups of 16 need a network whose first dimensions hold 16.
    let mut turing = workload("turing_nlg.yaml");
    turing.layers.truncate(6);
    let wide = TopologyOptions::new("dims:switch16,switch2")
        .with_links("200GB/s,50GB/s", "700ns,1700ns")
        .build()
        .unwrap();
    cases.push((turing, wide));
    for (w, t) in &cases {
        for algorithm in [Algorithm::Ring, Algorithm::Hierarchical, Algorithm::Themis] {
            let b = simulate_iteration(t, w, &options(algorithm, 4), &mut ()).unwrap();
            check_invariants(&b);
            let compute: Time = w.layers.iter().fold(Time::ZERO, |acc, l| {
                acc + l.forward.compute + l.input_grad.compute + l.weight_grad.compute + l.update
            });
            assert_eq!(
                b.forward_compute + b.backward_compute,
                compute,
                "{}",
                w.name
            );
        }
    }
}

/// The transformer's blocking activation all-reduces run in the model-parallel groups and its
/// gradients in the data-parallel ones: both kinds show up, each charged where it belongs.
#[test]
fn hybrid_parallelism_charges_each_group_kind() {
    let mut w = workload("turing_nlg.yaml");
    w.layers.truncate(4);
    w.model_parallel_npus = Some(4);
    let t = TopologyOptions::new("dims:ring4,switch4")
        .with_links("100GB/s,12.5GB/s", "500ns,1us")
        .build()
        .unwrap();
    let b = simulate_iteration(&t, &w, &options(Algorithm::Ring, 1), &mut ()).unwrap();
    check_invariants(&b);
    assert!(b.exposed_model_parallel > Time::ZERO, "{b:?}");
    assert!(b.exposed_data_parallel > Time::ZERO, "{b:?}");
}

/// The ASTRA-sim text file and the YAML file of ResNet-50 hold the same numbers and give the same
/// iteration.
#[test]
fn both_workload_formats_give_the_same_iteration() {
    let (yaml, text) = (workload("resnet50.yaml"), workload("resnet50_astra.txt"));
    assert_eq!(yaml.layers.len(), text.layers.len());
    let t = TopologyOptions::new("ring:8").build().unwrap();
    let a = simulate_iteration(&t, &yaml, &options(Algorithm::Ring, 1), &mut ()).unwrap();
    let b = simulate_iteration(&t, &text, &options(Algorithm::Ring, 1), &mut ()).unwrap();
    assert_eq!((a.total, a.exposed_comm), (b.total, b.exposed_comm));
}

#[test]
fn bad_workloads_are_errors_naming_the_file() {
    let dir = scratch("bad");
    for (name, text, needle) in [
        ("short.txt", "DATA\n1\nl0 -1 10\n", "line 3"),
        ("kind.txt", "PIPE\n0\n", "PIPE"),
        (
            "unit.yaml",
            "parallelism: data\nlayers:\n - {name: a, forward: {compute: 3}}\n",
            "unit",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let o = collsim(&[
            "train",
            "--workload",
            path.to_str().unwrap(),
            "--topology",
            "ring:4",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(name) && err.contains(needle), "{err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1);
    }
}

/// In a log (stderr captured, no terminal) each compared algorithm reports when it is done, with
/// the count, so a long comparison shows which algorithm it is still waiting for.
#[test]
fn a_logged_comparison_reports_each_algorithm_done() {
    let file = format!("{}/workloads/resnet50.yaml", env!("CARGO_MANIFEST_DIR"));
    let out = collsim(&[
        "train",
        "--workload",
        &file,
        "--topology",
        "ring:8",
        "--algorithm",
        "ring,direct",
    ]);
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" done (")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    for algorithm in ["ring", "direct"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("progress: resnet50: {algorithm} done ("))),
            "{log}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("(2/2)")), "{log}");
}

/// A training run that cannot fit in memory is refused before it is built, with the estimate
/// and the flag to change (here ResNet-50's 277.6M transfers at 100000 chunks against a 4 GB
/// address-space limit), in well under the seconds building it would take.
#[cfg(unix)]
#[test]
fn a_training_run_past_the_memory_is_refused_up_front() {
    let workload = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/resnet50.yaml");
    let started = std::time::Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 4000000 && exec '{}' train --workload '{workload}' --topology ring:8 \
             --chunks 100000",
            env!("CARGO_BIN_EXE_collsim")
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error:") && last.contains("transfers") && last.contains("--chunks"),
        "{err}"
    );
    assert!(started.elapsed().as_secs() < 20);
}

/// A long `train --workload` says how far it is: every task of every rank is counted once as it
/// is laid out (the log's `k/n tasks laid out` lines), and the count ends with the layout.
#[test]
fn laying_out_a_workload_counts_every_task() {
    let t = TopologyOptions::new("ring:8").build().unwrap();
    let w = workload("resnet50.yaml");
    let program = w.program(&t).unwrap();
    let tasks: u64 = program.ranks.iter().map(|r| r.len() as u64).sum();
    assert!(tasks > 100);
    let steps = std::sync::Arc::new(collsim::report::Steps::default());
    let options = TrainOptions {
        progress: Some(steps.clone()),
        ..options(Algorithm::Ring, 1)
    };
    let npus = t.active_npus();
    collsim::workload::execute(&t, &program, &npus, &options, &mut ()).unwrap();
    assert_eq!(steps.done(), tasks);
}
