//! Datacenter fabrics and congestion: the shapes' routes, the per-link queue measures, and
//! EFLOPS's claim that halving-doubling with rank mapping never queues on a BiGraph.

mod common;
use common::{collsim, summary};

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
    let mut rows = links
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>());
    let into_2 = rows.find(|r| r[0] == "3" && r[1] == "2").unwrap();
    assert_eq!((into_2[5], into_2[6]), ("2", "20000"), "{links}");
    for r in links
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
    {
        if r[1] == "3" {
            assert!(r[5] == "1" || r[5] == "0", "{r:?}");
            assert_eq!(r[6], "0");
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
