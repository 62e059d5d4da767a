//! Datacenter fabrics and congestion: the shapes' routes, the per-link queue measures, and
//! EFLOPS's claim that halving-doubling with rank mapping never queues on a BiGraph.

mod common;
use common::{collsim, summary, Table};

/// A 64 MiB all-reduce by `algorithm` on `topology` at 50 GB/s and 500 ns, then `extra` flags.
fn all_reduce(
    topology: &str,
    algorithm: &str,
    extra: &[&str],
) -> std::collections::HashMap<String, String> {
    let mut args = vec![
        "--topology",
        topology,
        "--bandwidth",
        "50GB/s",
        "--latency",
        "500ns",
        "--collective",
        "all-reduce",
        "--size",
        "64MiB",
        "--algorithm",
        algorithm,
    ];
    args.extend_from_slice(extra);
    summary(&args)
}

/// Two NPUs send 1 MB to a third through one switch at once: the switch's link to the third
/// holds both (max queue 2) and one waits for the other's whole serialisation (20 us at 50 GB/s);
/// the links in have no queue.
#[test]
fn a_shared_link_reports_its_queue_and_waiting_time() {
    let dir = common::scratch("collsim-fabrics", "queue");
    let schedule = dir.join("incast.csv");
    std::fs::write(
        &schedule,
        "id,src,dst,bytes,deps\n0,0,2,1000000,\n1,1,2,1000000,\n",
    )
    .unwrap();
    let out = dir.join("out");
    let run = collsim(&[
        "simulate",
        "--topology",
        "switch:3",
        "--bandwidth",
        "50GB/s",
        "--latency",
        "1us",
        "--schedule",
        schedule.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let links = std::fs::read_to_string(out.join("links.csv")).unwrap();
    let table = Table::parse(&links);
    let (src, dst) = (table.at("src"), table.at("dst"));
    let (queue, queued) = (table.at("max_queue"), table.at("queued_ns"));
    let into_2 = table
        .rows
        .iter()
        .find(|r| r[src] == "3" && r[dst] == "2")
        .unwrap();
    assert_eq!(
        (into_2[queue].as_str(), into_2[queued].as_str()),
        ("2", "20000"),
        "{links}"
    );
    for r in &table.rows {
        if r[dst] == "3" {
            assert!(r[queue] == "1" || r[queue] == "0", "{r:?}");
            assert_eq!(r[queued], "0");
        }
    }
}

/// EFLOPS: on a BiGraph, HDRM's every message has its links to itself (max queue 1) and the
/// all-reduce takes the contention-free closed form: 2 log2(P) steps of three store-and-forward
/// hops, `3 (a + s/B)` each for messages of `s = size/2, size/4, ...`. Plain RHD in rank order
/// routes same-half pairs through one lower switch, queues, and is slower.
#[test]
fn hdrm_never_queues_on_a_bigraph_and_meets_the_closed_form() {
    for (spec, npus) in [
        ("bigraph:4x8", 32u32),
        ("bigraph:2x8", 16),
        ("bigraph:8x16", 128),
    ] {
        let args = |algorithm: &str| all_reduce(spec, algorithm, &[]);
        let hdrm = args("hdrm");
        assert_eq!(hdrm["max_queue"], "1", "{spec}");
        let size = (64u64 << 20) as f64;
        let mut expected_ns = 0.0;
        let mut s = size;
        while s > size / npus as f64 + 0.5 {
            s /= 2.0;
            expected_ns += 2.0 * 3.0 * (500.0 + s / 50.0);
        }
        let time: f64 = hdrm["collective_time_ns"].parse().unwrap();
        assert!(
            (time - expected_ns).abs() < 1.0,
            "{spec}: {time} against {expected_ns}"
        );
        let rhd = args("rhd");
        assert!(rhd["max_queue"].parse::<u32>().unwrap() > 1, "{spec}");
        let slower: f64 = rhd["collective_time_ns"].parse().unwrap();
        assert!(
            slower > 1.2 * time,
            "{spec}: rhd {slower} against hdrm {time}"
        );
    }
}

/// The fabrics route by shortest path: on a leaf/spine, NPUs on one leaf talk through the leaf
/// alone (two hops), NPUs on different leaves through a spine (four hops).
#[test]
fn leaf_spine_routes_through_the_spines_only_between_leaves() {
    let time = |dst: &str| -> f64 {
        let dir = common::scratch("collsim-fabrics", &format!("route{dst}"));
        let schedule = dir.join("one.csv");
        std::fs::write(
            &schedule,
            format!("id,src,dst,bytes,deps\n0,0,{dst},1000,\n"),
        )
        .unwrap();
        summary(&[
            "--topology",
            "spineleaf:2x2x4",
            "--bandwidth",
            "50GB/s",
            "--latency",
            "1us",
            "--schedule",
            schedule.to_str().unwrap(),
        ])["collective_time_ns"]
            .parse()
            .unwrap()
    };
    assert_eq!(time("1"), 2.0 * (1000.0 + 20.0));
    assert_eq!(time("5"), 4.0 * (1000.0 + 20.0));
}

/// ECMP runs are reproducible with `--seed` and differ between seeds; on a non-oversubscribed
/// leaf/spine they never beat the contention-free halving-doubling time (9.903 ms, see
/// results/README.md) and fixed paths are no faster than the best seed.
#[test]
fn ecmp_is_reproducible_with_its_seed() {
    let run = |routing: &str, seed: &str| -> (f64, u32) {
        let row = all_reduce(
            "spineleaf:8x4x4",
            "rhd",
            &["--routing", routing, "--seed", seed],
        );
        (
            row["collective_time_ns"].parse().unwrap(),
            row["max_queue"].parse().unwrap(),
        )
    };
    let times: Vec<f64> = ["1", "2", "3", "4", "5"]
        .iter()
        .map(|s| run("ecmp", s).0)
        .collect();
    assert_eq!(run("ecmp", "3").0, times[2]);
    assert!(times.iter().any(|&t| t != times[0]), "{times:?}");
    let contention_free = 9_902_557.44;
    assert!(
        times.iter().all(|&t| t >= contention_free - 1.0),
        "{times:?}"
    );
    let (fixed, queue) = run("dor", "1");
    assert!(queue > 1 && fixed >= times.iter().copied().fold(f64::MAX, f64::min));
}

/// ACCL: on boxes of 8 GPUs behind NVSwitch (300 GB/s) with a 25 GB/s NIC per GPU on rail
/// switches, the hybrid all-reduce (ring inside boxes, halving-doubling across them on every NIC
/// at once, two halves a phase apart) beats one ring over all GPUs and plain halving-doubling at
/// 1 GB (validated on the way, as every run is).
#[test]
fn accl_hybrid_beats_ring_and_rhd_on_rail_boxes() {
    let time = |algorithm: &str| -> f64 {
        summary(&[
            "--topology",
            "rail:4x8",
            "--bandwidth",
            "300GB/s,25GB/s",
            "--latency",
            "1us",
            "--collective",
            "all-reduce",
            "--size",
            "1GB",
            "--chunks",
            "4",
            "--algorithm",
            algorithm,
        ])["collective_time_ns"]
            .parse()
            .unwrap()
    };
    let hybrid = time("accl-hybrid");
    let (ring, rhd) = (time("ring"), time("rhd"));
    assert!(
        hybrid * 1.5 < ring && hybrid * 1.5 < rhd,
        "{hybrid} {ring} {rhd}"
    );
}

/// The collective time (ns) of a summary row.
fn time_of(row: &std::collections::HashMap<String, String>) -> f64 {
    row["collective_time_ns"].parse().unwrap()
}

/// NCCL's rings on the A100 graphs: every ring crosses each box boundary on a NIC, so all rings
/// together carry at most a box's NIC bandwidth (8 x 25 GB/s) and an all-gather takes at least
/// (n-1)/n size / 200 GB/s. nccl-ring reaches that ceiling within 3% (its channels keep every
/// NIC busy both ways), where one ring over all GPUs is 4x slower. The ceiling is 0.615 (2 boxes)
/// and 0.774 (4 boxes) of the cut bound, which no ring schedule can pass.
#[test]
fn nccl_rings_saturate_every_nic_of_the_a100_boxes() {
    for (file, n, bound_rate_gbps, ceiling) in [
        ("a100_2x8.yml", 16.0, 346.667, 0.615),
        ("a100_4x8.yml", 32.0, 266.667, 0.774),
    ] {
        let path = format!("{}/configs/{file}", env!("CARGO_MANIFEST_DIR"));
        let run = |algorithm: &str| {
            summary(&[
                "--topology",
                &path,
                "--collective",
                "all-gather",
                "--size",
                "1GB",
                "--chunks",
                "16",
                "--algorithm",
                algorithm,
            ])
        };
        let nccl = run("nccl-ring");
        let ring_limit_ns = (n - 1.0) / n * 1e9 / 200.0;
        let time = time_of(&nccl);
        assert!(
            time >= ring_limit_ns && time <= ring_limit_ns / 0.97,
            "{file}: {time} ns against the ring limit {ring_limit_ns}"
        );
        let efficiency: f64 = nccl["efficiency"].parse().unwrap();
        let limit_efficiency = 1e9 / bound_rate_gbps / ring_limit_ns;
        assert!(
            (limit_efficiency - ceiling).abs() < 0.001,
            "{limit_efficiency}"
        );
        assert!(efficiency <= limit_efficiency + 1e-6 && efficiency > 0.97 * ceiling);
        assert!(time_of(&run("ring")) > 3.5 * time, "{file}");
    }
}

/// NCCL's tree against its rings on 16 boxes of 8 GPUs: 2 (log2 16 + 8) steps instead of
/// 2 (128 - 1) win on small messages, the tree's inner NICs carrying every byte twice lose on
/// large ones.
#[test]
fn nccl_tree_wins_small_and_loses_large_against_nccl_ring() {
    let time = |algorithm: &str, size: &str| {
        time_of(&summary(&[
            "--topology",
            "rail:16x8",
            "--bandwidth",
            "300GB/s,25GB/s",
            "--latency",
            "0.35us,1us",
            "--collective",
            "all-reduce",
            "--size",
            size,
            "--algorithm",
            algorithm,
            "--chunks",
            "1",
        ]))
    };
    let (tree, ring) = (time("nccl-tree", "64KB"), time("nccl-ring", "64KB"));
    assert!(tree * 3.0 < ring, "64 KB: tree {tree} ring {ring}");
    let (tree, ring) = (time("nccl-tree", "1GB"), time("nccl-ring", "1GB"));
    assert!(tree > 3.0 * ring, "1 GB: tree {tree} ring {ring}");
}

/// The NCCL note's PCIe tree: the two-step tree sends its first copy across the root complex
/// (GPU 0 -> GPU 2), so the second step's copies (0 -> 1, 2 -> 3) stay under their own PCIe
/// switches and no upper link ever holds two messages. Copying to the neighbour first makes both
/// second-step copies climb switch 4's uplink at once: 2 queued there, 4 ms lost at 64 MB.
#[test]
fn two_step_tree_keeps_the_upper_pcie_links_free() {
    let dir = common::scratch("collsim-fabrics", "pcie");
    let topology = format!("{}/configs/pcie_tree_4.yml", env!("CARGO_MANIFEST_DIR"));
    let run = |source: &[&str], name: &str| {
        let out = dir.join(name);
        let mut args = vec![
            "--topology",
            &topology,
            "--collective",
            "broadcast",
            "--size",
            "64MB",
            "--chunks",
            "1",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(source);
        let time = time_of(&summary(&args));
        let links = std::fs::read_to_string(out.join("links.csv")).unwrap();
        let table = Table::parse(&links);
        let (src, dst, queue) = (table.at("src"), table.at("dst"), table.at("max_queue"));
        let uplink_queue: u32 = table
            .rows
            .iter()
            .find(|r| r[src] == "4" && r[dst] == "6")
            .map(|r| r[queue].parse().unwrap())
            .unwrap();
        (time, uplink_queue)
    };
    let (two_step, queue) = run(&["--algorithm", "two-step-tree"], "two-step");
    assert_eq!(queue, 1);
    // 64 MB at 16 GB/s is 4 ms a hop: 0 -> 2 over four hops, then 2 -> 3 over two (0 -> 1 runs
    // meanwhile): 24 ms and 6 us of latency.
    assert!((two_step - 24.006e6).abs() < 1.0, "{two_step}");
    let naive = dir.join("naive.csv");
    std::fs::write(
        &naive,
        "id,src,dst,bytes,deps,chunk,op\n0,0,1,64000000,,0,copy\n1,0,2,64000000,0,0,copy\n\
         2,1,3,64000000,0,0,copy\n",
    )
    .unwrap();
    let (neighbour_first, queue) = run(&["--schedule", naive.to_str().unwrap()], "naive");
    assert_eq!(queue, 2);
    assert!(neighbour_first >= two_step + 4e6 - 1.0, "{neighbour_first}");
}

/// ACCL's path control on a leaf/spine of 8-GPU boxes (4 leaves, 2 boxes each, 16 spines, a
/// 25 GB/s NIC per GPU): with planned paths the hybrid all-reduce never queues a second message
/// anywhere; hashed paths (ECMP) collide on every seed tried and fixed shortest paths pile onto
/// one spine. Ring and plain halving-doubling, given the same planned paths and segments, are far
/// slower.
#[test]
fn pinned_paths_take_the_collisions_out_of_the_hybrid_all_reduce() {
    let run = |algorithm: &str, extra: &[&str]| {
        let mut args = vec![
            "--topology",
            "spineleaf:4x16x2x8",
            "--bandwidth",
            "300GB/s,25GB/s,25GB/s",
            "--latency",
            "0.35us,1us,1us",
            "--collective",
            "all-reduce",
            "--size",
            "1GB",
            "--algorithm",
            algorithm,
        ];
        args.extend_from_slice(extra);
        if !extra.contains(&"--chunks") {
            args.extend_from_slice(&["--chunks", "1"]);
        }
        let row = summary(&args);
        (time_of(&row), row["max_queue"].parse::<u32>().unwrap())
    };
    let (pinned, queue) = run("accl-hybrid", &["--routing", "pinned"]);
    assert_eq!(queue, 1);
    for seed in ["1", "2", "3", "4"] {
        let (hashed, queue) = run("accl-hybrid", &["--routing", "ecmp", "--seed", seed]);
        assert!(queue > 1 && hashed > 1.05 * pinned, "seed {seed}: {hashed}");
    }
    let (fixed, _) = run("accl-hybrid", &[]);
    assert!(fixed > 3.0 * pinned);
    // Pipelined over 8 segments, against ring and halving-doubling given the same.
    let eight = ["--routing", "pinned", "--chunks", "8"];
    let (hybrid, _) = run("accl-hybrid", &eight);
    let (ring, _) = run("ring", &eight);
    let (rhd, _) = run("rhd", &eight);
    assert!(
        ring > 3.0 * hybrid && rhd > 10.0 * hybrid,
        "{hybrid} {ring} {rhd}"
    );
}

/// The fabric algorithms on random sizes of the shapes they are built for: every schedule
/// validates, and none beats the lower bound.
#[test]
fn fabric_algorithms_validate_on_their_shapes() {
    use collsim::algorithms::{generate, Algorithm};
    use collsim::collective::{Collective, CollectiveKind};
    use collsim::schedule::validate;
    use collsim::sim::{simulate, SimOptions};
    use collsim::topology::TopologyOptions;
    use collsim::units::Time;
    use rand::{Rng, SeedableRng};

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
    let mut checked = 0;
    for case in 0..160u64 {
        let (spec, bandwidth) = match case % 4 {
            0 => (
                format!(
                    "rail:{}x{}",
                    rng.random_range(1..=6),
                    rng.random_range(1..=6)
                ),
                "300GB/s,25GB/s",
            ),
            1 => (
                format!(
                    "spineleaf:{}x{}x{}x{}",
                    rng.random_range(1..=3),
                    rng.random_range(1..=4),
                    rng.random_range(1..=2),
                    rng.random_range(1..=4)
                ),
                "300GB/s,25GB/s,25GB/s",
            ),
            2 => (
                format!(
                    "bigraph:{}x{}",
                    rng.random_range(1..=4),
                    2 * rng.random_range(1..=3)
                ),
                "50GB/s",
            ),
            _ => (format!("ring:{}", rng.random_range(2..=9)), "50GB/s"),
        };
        let t = TopologyOptions::new(&spec)
            .with_links(bandwidth, "1us")
            .build()
            .unwrap();
        let (algorithm, kinds): (Algorithm, &[CollectiveKind]) = match rng.random_range(0..5) {
            0 => (
                Algorithm::NcclRing,
                &[
                    CollectiveKind::AllGather,
                    CollectiveKind::ReduceScatter,
                    CollectiveKind::AllReduce,
                ],
            ),
            1 => (Algorithm::NcclTree, &[CollectiveKind::AllReduce]),
            2 => (Algorithm::TwoStepTree, &[CollectiveKind::Broadcast]),
            3 => (Algorithm::AcclHybrid, &[CollectiveKind::AllReduce]),
            _ => (Algorithm::Hdrm, &[CollectiveKind::AllReduce]),
        };
        let kind = kinds[rng.random_range(0..kinds.len())];
        let npus = t.active_npus();
        if npus.len() < 2 {
            continue;
        }
        let root = kind
            .is_rooted()
            .then(|| npus[rng.random_range(0..npus.len())]);
        let chunks = rng.random_range(1..=3);
        let c = Collective::new(kind, npus, 1 << 20, chunks, root).unwrap();
        let schedule = match generate(algorithm, &t, &c) {
            Ok(s) => s,
            Err(e) => {
                // Shapes an algorithm is not built for are refused by name, never mis-scheduled.
                let msg = e.to_string();
                assert!(
                    msg.contains("boxes") || msg.contains("BiGraph") || msg.contains("power"),
                    "{} on {spec}: {msg}",
                    algorithm.name()
                );
                continue;
            }
        };
        let claim = schedule.collective.clone().unwrap();
        validate(&schedule, &claim, case)
            .unwrap_or_else(|e| panic!("{} {kind} on {spec} x{chunks}: {e}", algorithm.name()));
        let result = simulate(&t, &schedule, &SimOptions::default(), &mut ()).unwrap();
        let bound = collsim::bound::bounds(&t, &c, None).total();
        assert!(
            bound <= result.finish + Time::from_ns(1),
            "{} {kind} on {spec}: bound {bound:?} > {:?}",
            algorithm.name(),
            result.finish
        );
        checked += 1;
    }
    assert!(checked > 80, "only {checked} cases exercised");
}

/// Without --chunks, the algorithms whose stages pipeline cut each NPU's data into pieces of at
/// least NCCL's 512 KiB pipeline step, up to 16, and say so; the others keep one chunk.
#[test]
fn pipelined_algorithms_default_to_pipeline_sized_chunks() {
    let topology = format!("{}/configs/a100_2x8.yml", env!("CARGO_MANIFEST_DIR"));
    let run = |algorithm: &str, size: &str, extra: &[&str]| {
        let mut args = vec![
            "--topology",
            &topology,
            "--collective",
            "all-reduce",
            "--size",
            size,
            "--algorithm",
            algorithm,
        ];
        args.extend_from_slice(extra);
        summary(&args)
    };
    // 1 GB over 16 NPUs: 62.5 MB each, past 16 steps of 512 KiB; 64 MB: 4 MB each, 7 steps -> 4.
    for (size, chunks) in [("1GB", "16"), ("64MB", "4"), ("1MB", "1")] {
        for algorithm in ["nccl-tree", "accl-hybrid", "nccl-ring"] {
            let row = run(algorithm, size, &[]);
            assert_eq!(row["chunks_per_npu"], chunks, "{algorithm} {size}");
        }
        assert_eq!(run("ring", size, &[])["chunks_per_npu"], "1", "ring {size}");
    }
    for algorithm in ["nccl-tree", "accl-hybrid"] {
        let default = time_of(&run(algorithm, "1GB", &[]));
        let one = time_of(&run(algorithm, "1GB", &["--chunks", "1"]));
        assert!(default * 2.0 < one, "{algorithm}: {default} against {one}");
    }
    let text = common::stdout_of(&[
        "simulate",
        "--topology",
        &topology,
        "--collective",
        "all-reduce",
        "--size",
        "1GB",
        "--algorithm",
        "nccl-tree",
    ]);
    assert!(text.contains("chunks          16 per NPU"), "{text}");
}
