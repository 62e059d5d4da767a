//! ASTRA-sim's system layer (`train --system`): its regression test and every case of
//! tests/data/astra_system/references.csv (ASTRA-sim's own output) reproduced to the nanosecond.

mod common;

use common::collsim;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use collsim::astra::{run, Settings};
use collsim::topology::load_topology_file;
use collsim::workload::chakra::{find_traces, load_traces, trace_name, Durations};

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/astra_system")
        .join(path)
}

fn text(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// ASTRA-sim's tests/rt_template, run as a user would with its three files.
#[test]
fn the_regression_test_finishes_at_117780_ns_all_exposed() {
    let workload = data("workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce");
    let args = [
        "train",
        "--workload",
        &text(&workload),
        "--topology",
        &text(&data("network/ring8.yml")),
        "--system",
        &text(&data("system/rt_base.json")),
    ];
    let out = collsim(&[&args[..], &["--format", "csv"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("rank,finish_ns,compute_ns,exposed_comm_ns")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 8);
    for (rank, row) in rows.iter().enumerate() {
        assert_eq!(*row, format!("{rank},117780,0,117780"));
    }
    // Nothing is accepted without effect: the only warning names boost-mode, which ASTRA-sim
    // does not read either.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("without effect"), "{stderr}");
    assert!(stderr.contains("boost-mode"), "{stderr}");
    let text_out = collsim(&args);
    assert!(String::from_utf8_lossy(&text_out.stdout)
        .contains("sys[7] finished, 117780 ns, exposed communication 117780 ns"));
}

#[test]
fn every_reference_case_matches_astra_sim() {
    matches_every_case("references.csv", 600);
}

/// Two-dimensional networks, against ASTRA-sim's congestion-unaware backend where no two messages
/// share a link (its congestion-aware backend refuses them): the phases across dimensions.
#[test]
fn every_multi_dimensional_case_matches_astra_sim() {
    matches_every_case("references_multidim.csv", 20);
}

/// Every case of `file` (ASTRA-sim's output) run by the system layer: every rank's finish and
/// exposed time equal; at least `least` cases.
fn matches_every_case(file: &str, least: usize) {
    let csv = std::fs::read_to_string(data(file)).unwrap();
    type Case = (String, String, String);
    type Ranks = Vec<(u32, u64, u64)>;
    let mut cases: BTreeMap<Case, Ranks> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        cases
            .entry((f[0].into(), f[1].into(), f[2].into()))
            .or_default()
            .push((
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
                f[5].parse().unwrap(),
            ));
    }
    assert!(cases.len() >= least, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for ((network, system, workload), expected) in &cases {
        let topology = load_topology_file(&data(&format!("network/{network}.yml"))).unwrap();
        let settings = Settings::load(&data(&format!("system/{system}.json"))).unwrap();
        let files = find_traces(&data(&format!("workload/{workload}")))
            .unwrap()
            .unwrap();
        let program = load_traces(
            &files,
            &trace_name(&files[0]),
            Durations::Recorded,
            &mut |_| {},
        )
        .unwrap();
        let npus: Vec<u32> = (0..program.ranks.len() as u32).collect();
        let got: Vec<(u32, u64, u64)> = run(&topology, &program, &npus, &settings)
            .unwrap()
            .ranks
            .iter()
            .map(|r| (r.rank, r.finish.ps() / 1000, r.exposed.ps() / 1000))
            .collect();
        if &got != expected {
            wrong.push(format!(
                "{network} {system} {workload}: {got:?} != {expected:?}"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {}:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn keys_and_flags_that_would_not_take_effect_are_refused() {
    let dir = common::scratch("collsim-astra-system", "files");
    let workload = text(&data(
        "workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce",
    ));
    let network = text(&data("network/ring8.yml"));
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("system/rt_base.json")).unwrap())
            .unwrap();
    for (key, value) in [
        ("all-reduce-implementation", serde_json::json!(["quadTree"])),
        ("inter-dimension-scheduling", serde_json::json!("themis")),
        ("model-shared-bus", serde_json::json!(1)),
    ] {
        let mut system = base.clone();
        system[key] = value;
        let file = dir.join(format!("{key}.json"));
        std::fs::write(&file, system.to_string()).unwrap();
        let out = collsim(&[
            "train",
            "--workload",
            &workload,
            "--topology",
            &network,
            "--system",
            &text(&file),
        ]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:") && err.contains(key), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let out = collsim(&[
        "train",
        "--workload",
        &workload,
        "--topology",
        &network,
        "--system",
        &text(&data("system/rt_base.json")),
        "--algorithm",
        "ring",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--algorithm"));
}
