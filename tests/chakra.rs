//! Chakra execution traces: written from collsim's workloads and read back to the same iteration,
//! hand-built traces against closed forms, and bad traces refused by name.

mod common;

use std::path::{Path, PathBuf};

use collsim::workload::chakra::{AttributeProto, ChakraNode, GlobalMetadata, Value};
use common::{collsim, scratch, stdout_of, Table};
use prost::Message;

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// `collsim train ... --format csv`: the breakdown rows (without the header).
fn train(workload: &str, topology: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "train",
        "--workload",
        workload,
        "--topology",
        topology,
        "--format",
        "csv",
    ];
    args.extend_from_slice(extra);
    stdout_of(&args).lines().skip(1).map(String::from).collect()
}

/// Every shipped workload, written as traces and trained from them, gives the breakdown of the
/// workload file to the picosecond (rows compared but for the workload name, the same), plain
/// and gzip-compressed, with two algorithms.
#[test]
fn traces_of_every_shipped_workload_train_to_the_same_breakdown() {
    let dir = scratch("collsim-chakra", "roundtrip");
    let topology = "dims:ring4,switch4,switch2";
    for (i, file) in [
        "resnet50.yaml",
        "resnet50_astra.txt",
        "gnmt.yaml",
        "dlrm.yaml",
        "turing_nlg.yaml",
    ]
    .iter()
    .enumerate()
    {
        let workload = repo(&format!("workloads/{file}"));
        let traces = dir.join(format!("t{i}"));
        let mut args = vec![
            "trace",
            "--workload",
            &workload,
            "--topology",
            topology,
            "--out",
            traces.to_str().unwrap(),
        ];
        if i % 2 == 1 {
            args.push("--gzip");
        }
        let out = collsim(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let algorithms = ["--algorithm", "ring,themis"];
        let direct = train(&workload, topology, &algorithms);
        let traced = train(traces.to_str().unwrap(), topology, &algorithms);
        assert_eq!(direct.len(), 2);
        assert_eq!(direct, traced, "{file}");
    }
}

fn attr(name: &str, value: Value) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        value: Some(value),
    }
}

fn compute(id: u64, micros: u64, deps: &[u64]) -> ChakraNode {
    ChakraNode {
        id,
        name: format!("compute{id}"),
        node_type: 4,
        data_deps: deps.to_vec(),
        duration_micros: micros,
        ..ChakraNode::default()
    }
}

fn communication(id: u64, node_type: i32, deps: &[u64], attrs: Vec<AttributeProto>) -> ChakraNode {
    ChakraNode {
        id,
        name: format!("comm{id}"),
        node_type,
        ctrl_deps: deps.to_vec(),
        attr: attrs,
        ..ChakraNode::default()
    }
}

/// Writes one rank's trace: the metadata record, then the nodes, each length-delimited.
fn write_trace(path: &Path, nodes: &[ChakraNode]) {
    let mut bytes = Vec::new();
    GlobalMetadata {
        version: "0.0.4".into(),
        attr: Vec::new(),
    }
    .encode_length_delimited(&mut bytes)
    .unwrap();
    for n in nodes {
        n.encode_length_delimited(&mut bytes).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// Two ranks: compute 10 us, an all-reduce of 1 MiB (comm_size as uint64 on one rank and int64
/// on the other), compute 5 us, then rank 0 sends 1 MiB to rank 1, which computes 1 us after
/// receiving it. On ring:2 at 50 GB/s and 500 ns the all-reduce is two exchanges of half the
/// buffer (2 x (500 ns + 524288 B / 50 GB/s)) and the message one hop (500 ns + 1 MiB / 50 GB/s).
fn two_rank_traces(dir: &Path) -> PathBuf {
    let ar = |size: Value| vec![attr("comm_type", Value::Int64(0)), attr("comm_size", size)];
    let p2p = |peer: &str| {
        vec![
            attr(peer, Value::Int32(if peer == "comm_dst" { 1 } else { 0 })),
            attr("comm_size", Value::Uint64(1 << 20)),
            attr("comm_tag", Value::Int64(7)),
        ]
    };
    write_trace(
        &dir.join("pair.0.et"),
        &[
            compute(1, 10, &[]),
            communication(2, 7, &[1], ar(Value::Uint64(1 << 20))),
            compute(3, 5, &[2]),
            communication(4, 5, &[3], p2p("comm_dst")),
        ],
    );
    write_trace(
        &dir.join("pair.1.et"),
        &[
            compute(10, 10, &[]),
            communication(11, 7, &[10], ar(Value::Int64(1 << 20))),
            compute(12, 5, &[11]),
            communication(13, 6, &[12], p2p("comm_src")),
            compute(14, 1, &[13]),
        ],
    );
    dir.join("pair")
}

#[test]
fn a_hand_built_two_rank_trace_takes_its_closed_form() {
    let dir = scratch("collsim-chakra", "pair");
    let prefix = two_rank_traces(&dir);
    let rows = train(
        prefix.to_str().unwrap(),
        "ring:2",
        &[
            "--bandwidth",
            "50GB/s",
            "--latency",
            "500ns",
            "--algorithm",
            "direct",
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
    );
    let all_reduce = 2.0 * (500.0 + 524_288.0 / 50.0);
    let message = 500.0 + 1_048_576.0 / 50.0;
    let total = 10_000.0 + all_reduce + 5_000.0 + message + 1_000.0;
    assert_eq!(rows.len(), 1);
    for row in &rows {
        let cells: Vec<&str> = row.split(',').collect();
        // The slowest rank is rank 1: compute 16 us, exposed = all-reduce + message.
        let ns = |i: usize| cells[i].parse::<f64>().unwrap();
        assert!((ns(5) - total).abs() < 1e-3, "{row}: total {total}");
        assert!((ns(4) - all_reduce - message).abs() < 1e-3, "{row}");
        assert_eq!(ns(2) + ns(3), 16_000.0, "{row}");
    }
    let ranks = std::fs::read_to_string(dir.join("out/ranks.csv")).unwrap();
    let send_recv = Table::parse(&ranks).number(1, "exposed_send_recv_ns");
    assert!((send_recv - message).abs() < 1e-3);
    let timeline = std::fs::read_to_string(dir.join("out/timeline.json")).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&timeline).unwrap();
    let events = parsed["traceEvents"].as_array().unwrap();
    assert!(events
        .iter()
        .any(|e| e["name"] == "comm13" && e["ph"] == "X"));
    assert!(dir.join("out/timeline.png").exists());
}

/// Bad traces end with exit status 2 and one error line naming the file or rank and the node.
#[test]
fn bad_traces_are_refused_naming_the_node() {
    let dir = scratch("collsim-chakra", "bad");
    let run = |prefix: &Path, topology: &str| {
        let out = collsim(&[
            "train",
            "--workload",
            prefix.to_str().unwrap(),
            "--topology",
            topology,
        ]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{err}"
        );
        err
    };
    // A dependency on a node the trace does not have.
    let missing = dir.join("missing");
    std::fs::create_dir_all(&missing).unwrap();
    write_trace(
        &missing.join("w.0.et"),
        &[compute(1, 1, &[]), compute(2, 1, &[9])],
    );
    write_trace(&missing.join("w.1.et"), &[compute(1, 1, &[])]);
    let err = run(&missing.join("w"), "ring:2");
    assert!(err.contains("w.0.et") && err.contains("node 9"), "{err}");
    // A cycle.
    let cycle = dir.join("cycle");
    std::fs::create_dir_all(&cycle).unwrap();
    write_trace(
        &cycle.join("w.0.et"),
        &[compute(1, 1, &[2]), compute(2, 1, &[1])],
    );
    write_trace(&cycle.join("w.1.et"), &[compute(1, 1, &[])]);
    let err = run(&cycle.join("w"), "ring:2");
    assert!(
        err.contains("rank 0 node 1") && err.contains("cycle"),
        "{err}"
    );
    // A truncated record.
    let cut = dir.join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    write_trace(
        &cut.join("w.0.et"),
        &[compute(1, 1, &[]), compute(2, 1, &[1])],
    );
    let whole = std::fs::read(cut.join("w.0.et")).unwrap();
    std::fs::write(cut.join("w.0.et"), &whole[..whole.len() - 3]).unwrap();
    write_trace(&cut.join("w.1.et"), &[compute(1, 1, &[])]);
    let err = run(&cut.join("w"), "ring:2");
    assert!(
        err.contains("w.0.et") && err.contains("truncated") && err.contains("node 1"),
        "{err}"
    );
    // A node type collsim does not model is a warning naming it, and takes no time.
    let unknown = dir.join("unknown");
    std::fs::create_dir_all(&unknown).unwrap();
    let storage = ChakraNode {
        id: 5,
        name: "checkpoint-write".into(),
        node_type: 8,
        ..ChakraNode::default()
    };
    write_trace(&unknown.join("w.0.et"), &[compute(1, 3, &[]), storage]);
    write_trace(&unknown.join("w.1.et"), &[compute(1, 3, &[])]);
    let out = collsim(&[
        "train",
        "--workload",
        unknown.join("w").to_str().unwrap(),
        "--topology",
        "ring:2",
        "--format",
        "csv",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("checkpoint-write"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(",3000,"));
    // Traces of 2 ranks on 4 NPUs, unless placed with --ranks-map.
    let pair = two_rank_traces(&dir);
    let err = run(&pair, "ring:4");
    assert!(
        err.contains("2 ranks") && err.contains("--ranks-map"),
        "{err}"
    );
    let placed = train(pair.to_str().unwrap(), "ring:4", &["--ranks-map", "1,2"]);
    assert_eq!(placed.len(), 1);
}

/// Speed (ignored; `cargo test --release --test chakra -- --ignored`): a 1024-rank trace of about
/// 1000 nodes per rank (240 layers, ten 1 MB all-reduces) loads and runs within 10 s with
/// hierarchical all-reduces on a 3-dimensional network (results/README.md has the figures).
#[test]
#[ignore]
fn a_thousand_ranks_of_a_thousand_nodes_run_within_ten_seconds() {
    let dir = scratch("collsim-chakra", "speed");
    let mut yaml = String::from("name: speed1024\nparallelism: data\nlayers:\n");
    for l in 0..240 {
        let comm = if l % 24 == 0 {
            ", comm: {collective: all-reduce, size: 1MB}"
        } else {
            ""
        };
        yaml += &format!(
            "  - {{name: l{l}, forward: {{compute: 10us}}, input_grad: {{compute: 10us}}, \
             weight_grad: {{compute: 10us{comm}}}, update: 1us}}\n"
        );
    }
    let workload = dir.join("speed1024.yaml");
    std::fs::write(&workload, yaml).unwrap();
    let topology = "dims:ring8,switch8,switch16";
    let traces = dir.join("traces");
    let out = collsim(&[
        "trace",
        "--workload",
        workload.to_str().unwrap(),
        "--topology",
        topology,
        "--out",
        traces.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let started = std::time::Instant::now();
    let rows = train(
        traces.to_str().unwrap(),
        topology,
        &["--algorithm", "hierarchical"],
    );
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("1024 ranks x 993 nodes: {seconds:.2} s");
    assert_eq!(rows.len(), 1);
    assert!(seconds <= 10.0, "{seconds} s");
}
