//! The `astra` time model reproduces ASTRA-sim's analytical congestion-aware backend exactly:
//! every case of `tests/data/astra/congestion_aware_reference.csv` (finish time) and every arrival
//! of the per-chunk and per-hop files.

mod common;

use std::collections::HashMap;

use collsim::algorithms::{self, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::schedule::{Schedule, Transfer};
use collsim::sim::{simulate, SimOptions, SimResult, TimeModel};
use collsim::topology::{Topology, TopologyOptions};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/astra");

struct Case {
    name: String,
    topology: String,
    npus: u32,
    bandwidth: String,
    latency: String,
    chunk: u64,
    pattern: String,
    finish_ns: u64,
}

fn cases() -> Vec<Case> {
    let mut reader =
        csv::Reader::from_path(format!("{DATA}/congestion_aware_reference.csv")).unwrap();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            Case {
                name: r[0].to_string(),
                topology: r[1].to_string(),
                npus: r[2].parse().unwrap(),
                bandwidth: r[3].to_string(),
                latency: r[4].to_string(),
                chunk: r[5].parse().unwrap(),
                pattern: r[6].to_string(),
                finish_ns: r[7].parse().unwrap(),
            }
        })
        .collect()
}

/// Writes the case as an ASTRA-sim network YAML, so the test also exercises that reader. Each
/// call writes a folder of its own: tests running at once may build the same case.
fn astra_topology(case: &Case) -> Topology {
    let dir = common::scratch("collsim-astra", &case.name);
    let path = dir.join(format!("{}.yml", case.name));
    std::fs::write(
        &path,
        format!(
            "topology: [ {} ]\nnpus_count: [ {} ]\nbandwidth: [ {} ]  # GB/s\nlatency: [ {} ]  # ns\n",
            case.topology, case.npus, case.bandwidth, case.latency
        ),
    )
    .unwrap();
    TopologyOptions::new(path.to_str().unwrap())
        .build()
        .unwrap()
}

/// Ring all-gather as ASTRA-sim's reference runs it: NPU i sends its shard to i+1 at t = 0, each
/// arrival is forwarded clockwise until the shard has made N-1 hops. Returns the schedule and, per
/// transfer, (origin, NPU reached).
fn ring_allgather(n: u32, shard: u64) -> (Schedule, Vec<(u32, u32)>) {
    let mut s = Schedule::new();
    let mut hops = Vec::new();
    let mut last = Vec::new();
    for i in 0..n {
        last.push(s.push(
            Transfer {
                src: i,
                dst: (i + 1) % n,
                bytes: shard,
            },
            &[],
        ));
        hops.push((i, (i + 1) % n));
    }
    for k in 2..n {
        for i in 0..n {
            let prev = last[i as usize];
            last[i as usize] = s.push(
                Transfer {
                    src: (i + k - 1) % n,
                    dst: (i + k) % n,
                    bytes: shard,
                },
                &[prev],
            );
            hops.push((i, (i + k) % n));
        }
    }
    (s, hops)
}

fn run(case: &Case, record: bool) -> (Schedule, SimResult, Vec<(u32, u32)>) {
    let topology = astra_topology(case);
    let options = SimOptions {
        time_model: TimeModel::Astra,
        record_transfers: record,
        ..SimOptions::default()
    };
    let (schedule, pairs) = match case.pattern.as_str() {
        "all-to-all" => {
            let c = Collective::new(
                CollectiveKind::AllToAll,
                (0..case.npus).collect(),
                case.chunk * case.npus as u64,
                1,
                None,
            )
            .unwrap();
            let s = algorithms::generate(Algorithm::Direct, &topology, &c).unwrap();
            let pairs = s.all_ends().to_vec();
            (s, pairs)
        }
        "ring-allgather" => ring_allgather(case.npus, case.chunk),
        other => panic!("unknown pattern {other}"),
    };
    let result = simulate(&topology, &schedule, &options, &mut ()).unwrap();
    (schedule, result, pairs)
}

#[test]
fn every_reference_case_up_to_1024_npus_finishes_at_astra_sims_time() {
    let mut failures = Vec::new();
    for case in cases().iter().filter(|c| c.npus <= 1024) {
        let (_, result, _) = run(case, false);
        assert_eq!(result.finish.ps() % 1000, 0, "astra times are whole ns");
        let got = result.finish.ps() / 1000;
        if got != case.finish_ns {
            failures.push(format!(
                "{}: want {} ns, got {got} ns",
                case.name, case.finish_ns
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
#[ignore = "16.8M transfers; run with --release -- --ignored"]
fn ring_allgather_on_4096_npus_matches() {
    let case = cases()
        .into_iter()
        .find(|c| c.name == "ag_ring_4096")
        .unwrap();
    let (_, result, _) = run(&case, false);
    assert_eq!(result.finish.ps() / 1000, case.finish_ns);
}

fn arrivals_file(name: &str) -> Vec<(u32, u32, u64)> {
    let mut reader = csv::Reader::from_path(format!("{DATA}/{name}")).unwrap();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (
                r[0].parse().unwrap(),
                r[1].parse().unwrap(),
                r[2].parse().unwrap(),
            )
        })
        .collect()
}

fn check_every_arrival(case_name: &str, file: &str) {
    let case = cases().into_iter().find(|c| c.name == case_name).unwrap();
    let (_, result, pairs) = run(&case, true);
    let ours: HashMap<(u32, u32), u64> = pairs
        .iter()
        .zip(&result.completed)
        .map(|(&pair, t)| (pair, t.ps() / 1000))
        .collect();
    let theirs = arrivals_file(file);
    assert_eq!(theirs.len(), ours.len(), "{case_name}: number of arrivals");
    for (src, dst, arrival) in theirs {
        assert_eq!(ours[&(src, dst)], arrival, "{case_name}: {src} -> {dst}");
    }
}

#[test]
fn ring_all_to_all_arrivals_match_per_chunk() {
    check_every_arrival("a2a_ring_8", "perchunk_a2a_ring_8.csv");
}

#[test]
fn zero_latency_odd_ring_arrivals_match_per_chunk() {
    check_every_arrival("a2a_ring_7_lat0", "perchunk_a2a_ring_7_lat0.csv");
}

#[test]
fn switch_all_to_all_arrivals_match_per_chunk() {
    check_every_arrival("a2a_switch_8", "perchunk_a2a_switch_8.csv");
}

#[test]
fn ring_allgather_hops_match() {
    check_every_arrival("ag_ring_8", "perhop_ag_ring_8.csv");
}
