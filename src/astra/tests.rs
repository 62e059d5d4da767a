//! Closed forms of ASTRA-sim's system layer on small programs.

use super::*;
use crate::collective::CollectiveKind;
use crate::units::{Bandwidth, Time};
use crate::workload::program::{Node, Task};

fn ring8() -> Topology {
    crate::topology::parse_inline(
        "ring:8",
        &[Bandwidth::gib_per_sec(50.0)],
        &[Time::from_ns(500)],
    )
    .unwrap()
}

fn settings(extra: serde_json::Value) -> Settings {
    let mut json = serde_json::json!({
        "scheduling-policy": "LIFO", "endpoint-delay": 10,
        "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
        "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
        "collective-optimization": "localBWAware", "local-mem-bw": 50
    });
    for (k, v) in extra.as_object().unwrap() {
        json[k] = v.clone();
    }
    Settings::parse(json.as_object().unwrap(), "test.json").unwrap()
}

fn one_collective(ranks: usize, kind: CollectiveKind, bytes: u64) -> Program {
    let node = Node {
        id: 0,
        name: "coll".into(),
        task: Task::Collective {
            kind,
            bytes,
            communicator: String::new(),
            group: crate::workload::CommGroup::Data,
            times: 1,
        },
        deps: Vec::new(),
    };
    Program {
        name: "one".into(),
        ranks: vec![vec![node]; ranks],
        ..Program::default()
    }
}

fn finish(program: &Program, settings: &Settings) -> Vec<u64> {
    let topology = ring8();
    let npus: Vec<NodeId> = (0..8).collect();
    run(&topology, program, &npus, settings)
        .unwrap()
        .ranks
        .iter()
        .map(|r| r.finish.ps() / 1000)
        .collect()
}

/// One chunk of a 1 MiB all-reduce cut 4 ways on a ring of 8 (32 KiB messages): the first
/// packet waits the endpoint delay (10 ns); each of the 7 reduce-scatter steps moves 32 KiB in
/// trunc(500 + 32768 / (50 * 2^30 / 10^9)) = 1110 ns, then the endpoint (10) and the reduction's
/// three passes over local memory at 50 GB/s (3 * 655); the eighth message's arrival starts the
/// all-gather with a bare packet (1110 + 10) and 5 more steps of 1110 + 10 follow; the last
/// message's arrival plus the endpoint ends it.
const RT_TEMPLATE_CHUNK: u64 = 10 + 7 * (1110 + 10 + 3 * 655) + 6 * (1110 + 10) + 1110 + 10;

#[test]
fn the_regression_test_is_four_chunks_one_after_another() {
    assert_eq!(RT_TEMPLATE_CHUNK, 29_445);
    let program = one_collective(8, CollectiveKind::AllReduce, 1 << 20);
    let times = finish(&program, &settings(serde_json::json!({})));
    assert_eq!(times, vec![4 * RT_TEMPLATE_CHUNK; 8]);
    // Without local memory bandwidth the reduction is free.
    let free = settings(serde_json::json!({"local-mem-bw": 0}));
    let chunk = 10 + 7 * (1110 + 10) + 6 * (1110 + 10) + 1110 + 10;
    assert_eq!(finish(&program, &free), vec![4 * chunk; 8]);
}

#[test]
fn compute_is_not_exposed_and_communication_after_it_is() {
    let mut program = one_collective(8, CollectiveKind::AllReduce, 1 << 20);
    for nodes in &mut program.ranks {
        nodes[0].id = 1;
        nodes[0].deps = vec![1];
        nodes.push(Node {
            id: 0,
            name: "gemm".into(),
            task: Task::Compute {
                duration: Time::from_ns(5000),
                forward: true,
            },
            deps: Vec::new(),
        });
    }
    let topology = ring8();
    let npus: Vec<NodeId> = (0..8).collect();
    let results = run(&topology, &program, &npus, &settings(serde_json::json!({}))).unwrap();
    for r in results.ranks {
        assert_eq!(r.finish, Time::from_ns(5000 + 4 * RT_TEMPLATE_CHUNK));
        assert_eq!(r.compute, Time::from_ns(5000));
        assert_eq!(r.exposed, Time::from_ns(4 * RT_TEMPLATE_CHUNK));
    }
}

#[test]
fn a_send_waits_for_its_receive_and_both_finish() {
    let program = Program {
        name: "p2p".into(),
        ranks: (0..8u32)
            .map(|r| {
                let task = match r {
                    0 => Task::Send {
                        peer: 1,
                        bytes: 32768,
                        tag: 7,
                    },
                    1 => Task::Recv {
                        peer: 0,
                        bytes: 32768,
                        tag: 7,
                    },
                    _ => Task::Nop,
                };
                vec![Node {
                    id: 0,
                    name: "p2p".into(),
                    task,
                    deps: Vec::new(),
                }]
            })
            .collect(),
        ..Program::default()
    };
    let times = finish(&program, &settings(serde_json::json!({})));
    assert_eq!(times[..2], [1110, 1110]);
    assert_eq!(times[2..], [0; 6]);
}

#[test]
fn links_serve_one_message_at_a_time_and_carry_every_message() {
    let program = one_collective(8, CollectiveKind::AllReduce, 1 << 20);
    let topology = ring8();
    let npus: Vec<NodeId> = (0..8).collect();
    let outcome = run(&topology, &program, &npus, &settings(serde_json::json!({}))).unwrap();
    // 4 chunks x 8 ranks x 14 ring steps, each one 32 KiB message to a neighbour: one hop of
    // trunc(32768 / 53.687) = 610 ns of serialisation.
    assert_eq!(outcome.messages, 4 * 8 * 14);
    let busy: u64 = outcome.links.iter().map(|l| l.busy.ps() / 1000).sum();
    assert_eq!(busy, outcome.messages * 610);
    // One chunk at a time, each rank sending clockwise: no message ever waits.
    assert!(outcome
        .links
        .iter()
        .all(|l| l.max_queue <= 1 && l.queued == Time::ZERO));
    // Two active chunks on a switch: messages meet at the switch's links and wait.
    let switch = crate::topology::parse_inline(
        "switch:8",
        &[Bandwidth::gib_per_sec(50.0)],
        &[Time::from_ns(500)],
    )
    .unwrap();
    let two = settings(serde_json::json!({"active-chunks-per-dimension": 2}));
    let outcome = run(&switch, &program, &npus, &two).unwrap();
    assert!(outcome
        .links
        .iter()
        .any(|l| l.max_queue >= 2 && l.queued > Time::ZERO));
    let busy: u64 = outcome.links.iter().map(|l| l.busy.ps() / 1000).sum();
    assert_eq!(busy, outcome.messages * 2 * 610);
}

#[test]
fn a_collective_on_part_of_the_ranks_is_refused() {
    let mut program = one_collective(8, CollectiveKind::AllReduce, 1 << 20);
    for nodes in &mut program.ranks[..4] {
        if let Task::Collective { communicator, .. } = &mut nodes[0].task {
            *communicator = "half".into();
        }
    }
    let topology = ring8();
    let npus: Vec<NodeId> = (0..8).collect();
    let err = run(&topology, &program, &npus, &settings(serde_json::json!({})))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'half'") && err.contains("4 of the 8"),
        "{err}"
    );
}
