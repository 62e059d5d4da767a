//! The NCCL model against the measured logs of tests/data/nccl_tests/: per case, together, and
//! the per-protocol latencies.

use super::*;

/// H100 NVLS all-reduce (nccl-tests#290, maintainer-confirmed healthy): NCCL's model picks
/// NVLS and the simulation lands within 20% at every measured size (128 MiB - 4 GiB).
#[test]
fn h100_nvls_all_reduce_within_20_percent() {
    let rows = compare(
        "all_reduce",
        "hgx-h100:1",
        "h100_1node_nvls_all_reduce.md",
        &["-g", "8"],
    );
    let big = rows.iter().find(|r| r.size == 1 << 30).unwrap();
    assert_eq!(
        (big.algorithm.as_str(), big.protocol.as_str()),
        ("NVLS", "Simple")
    );
    assert_eq!(within(&rows, 1 << 20, 0.20), (6, 6));
}

/// Two HGX B200 boxes, all-reduce: NVLSTree at large sizes, within 20% from 128 MiB (10 of the
/// 15 sizes from 1 MiB: the log's 8-64 MiB rows are 22-36% slower than NCCL's NVLSTree pipeline,
/// as its one-box NVLS rows are, and its 1 MiB Tree LL128 row 29% slower than NCCL's chunks run
/// it) and from 8 KiB to 1 MiB within 35%.
#[test]
fn b200_two_box_all_reduce_within_bounds() {
    let rows = compare("all_reduce", "hgx-b200:2", "b200_2node_all_reduce.md", &[]);
    let big = rows.iter().find(|r| r.size == 1 << 30).unwrap();
    assert_eq!(big.algorithm, "NVLSTree");
    let (good, all) = within(&rows, 128 << 20, 0.20);
    assert_eq!(good, all, "{good}/{all} within 20%");
    let (good, all) = within(&rows, 1 << 20, 0.20);
    assert!(good >= 10, "{good}/{all} within 20%");
    let small: Vec<Row> = rows.into_iter().filter(|r| r.size < 1 << 20).collect();
    let (good, all) = within(&small, 8192, 0.35);
    assert_eq!(good, all);
}

/// B200 all-to-all (NCCL's point-to-point plan): small sends run LL on one channel, larger ones
/// Simple striped over more channels as they grow; from 8 MiB up every size within 15%, and the
/// bandwidth keeps rising from 512 MiB to 16 GiB as measured (more channels per peer, each
/// channel's chunk longer against the same post).
#[test]
fn b200_all_to_all_follows_nccl_p2p_channels() {
    let rows = compare("alltoall", "hgx-b200:1", "b200_1node.md", &["-d", "uint8"]);
    let small = rows.iter().find(|r| r.size == 8192).unwrap();
    assert_eq!(small.protocol, "LL");
    let (good, all) = within(&rows, 8 << 20, 0.15);
    assert_eq!((good, all), (12, 12));
    let busbw = |size: u64| {
        let r = rows.iter().find(|r| r.size == size).unwrap();
        size as f64 / r.predicted
    };
    assert!(busbw(16 << 30) > 1.05 * busbw(512 << 20));
}

/// DGX A100 ring all-reduce (Azure, -g 8): small calls run Ring/LL on one channel, large ones
/// Ring/Simple on every channel; the bandwidth-bound sizes (256 MiB up) within 10%, and the
/// latency-bound ones (8 KiB - 1 MiB) within 35%.
#[test]
fn a100_ring_all_reduce_bandwidth_and_latency() {
    let rows = compare(
        "all_reduce",
        "dgx-a100:1",
        "a100_1node_all_reduce.md",
        &["-g", "8"],
    );
    let small = rows.iter().find(|r| r.size == 8192).unwrap();
    assert_eq!(
        (small.algorithm.as_str(), small.protocol.as_str()),
        ("Ring", "LL")
    );
    let (good, all) = within(&rows, 256 << 20, 0.10);
    assert_eq!((good, all), (6, 6));
    let latency: Vec<Row> = rows.into_iter().filter(|r| r.size <= 1 << 20).collect();
    assert_eq!(within(&latency, 8192, 0.35), (8, 8));
}

/// Every measured case together: how many sizes from 1 MiB up are within 20%. A floor under
/// today's count (98 of 139), so that a change that loses accuracy fails here. (93 before the
/// trees ran at NCCL's size correction, `tuning::tree_correction`; 96 before Tree LL128 took
/// NCCL's chunk rule: the coarser chunks' slow pipeline had hidden, on the two-box logs, a Tree
/// that runs faster than measured, and made Tree on three or more boxes up to three times
/// NCCL's own estimate: `tree_ll128_across_boxes_near_nccls_estimate`.)
#[test]
fn sizes_within_20_percent_across_all_cases() {
    let cases: [(&str, &str, &str, &[&str]); 10] = [
        (
            "all_reduce",
            "dgx-a100:1",
            "a100_1node_all_reduce.md",
            &["-g", "8"],
        ),
        (
            "all_reduce",
            "dgx-a100:2",
            "a100_2node_roce_all_reduce.md",
            &["--nic", "16x100Gb", "--nic-kind", "roce"],
        ),
        (
            "all_reduce",
            "hgx-h100:1",
            "h100_1node_nvls_all_reduce.md",
            &["-g", "8"],
        ),
        ("all_reduce", "hgx-b200:1", "b200_1node.md", &[]),
        ("all_gather", "hgx-b200:1", "b200_1node.md", &[]),
        ("reduce_scatter", "hgx-b200:1", "b200_1node.md", &[]),
        ("alltoall", "hgx-b200:1", "b200_1node.md", &["-d", "uint8"]),
        ("all_reduce", "hgx-b200:2", "b200_2node_all_reduce.md", &[]),
        (
            "all_gather",
            "hgx-b200:2",
            "b200_2node_all_gather_reduce_scatter.md",
            &[],
        ),
        (
            "reduce_scatter",
            "hgx-b200:2",
            "b200_2node_all_gather_reduce_scatter.md",
            &[],
        ),
    ];
    let (mut good, mut all) = (0, 0);
    for (op, system, log, extra) in cases {
        let (g, a) = within(&compare(op, system, log, extra), 1 << 20, 0.20);
        good += g;
        all += a;
    }
    assert_eq!(all, 139);
    assert!(good >= 98, "{good} of {all} sizes within 20%");
}

/// The DGX A100 per-protocol latency measurements (`a100_latency_by_protocol.md`, round 2: ring,
/// one channel, 8 B all-reduce on 2..8 GPUs): LL within 20% at every GPU count. LL128 and Simple
/// are not uncalibrated (NCCL's per-hop constants, 1.9 and 3.4 us on NVLink, against measured
/// slopes of about 1.0 and 4.9 us; results/README.md, "Per-protocol latency"); calibrated on two
/// GPU counts they are (`latency_calibrated_on_two_gpu_counts_predicts_the_others`).
#[test]
fn ll_latency_on_two_to_eight_gpus_within_20_percent() {
    let text = std::fs::read_to_string(format!("{DATA}/a100_latency_by_protocol.md")).unwrap();
    let round2 = text.split("## Round 2").nth(1).unwrap();
    let mut checked = 0;
    for line in round2
        .lines()
        .filter(|l| l.starts_with("| ") && !l.contains("GPUs"))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let gpus = cells[1];
        let measured: f64 = cells[2].trim_start_matches('~').parse().unwrap();
        let out = stdout_of(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            "dgx-a100:1",
            "--gpus",
            gpus,
            "-b",
            "8",
            "-e",
            "8",
            "--nccl-algo",
            "Ring",
            "--nccl-proto",
            "LL",
            "--format",
            "csv",
        ]);
        let table = Table::parse(&out);
        let predicted = table.number(table.rows.len() - 1, "time_us");
        let error = predicted / measured - 1.0;
        assert!(
            error.abs() <= 0.20,
            "{gpus} GPUs: {predicted} us against {measured}"
        );
        checked += 1;
    }
    assert_eq!(checked, 7);
    // A subset is at least two GPUs of one box, or the same number from each box.
    for (topology, gpus) in [
        ("dgx-a100:2", "3"),
        ("dgx-a100:2", "18"),
        ("dgx-a100:1", "1"),
        ("dgx-a100:1", "9"),
    ] {
        let out = collsim(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            topology,
            "--gpus",
            gpus,
        ]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--gpus"));
    }
}

/// The one public MI300X measurement at hand (an 8 MiB all-reduce, `-g 8`: 91.1 us) against
/// the all-pairs model: within 35% (-30%; NCCL's rings gave +117%). The 20% of issue 49 is not
/// met: the model moves the eighths at NCCL's xGMI figure, and charges ROCm's launches as
/// CUDA's.
#[test]
fn mi300x_all_reduce_at_8_mib_near_its_measurement() {
    let rows = compare(
        "all_reduce",
        "mi300x:1",
        "mi300x_1node_all_reduce_8mib.log",
        &[],
    );
    let row = rows.iter().find(|r| r.size == 8 << 20).unwrap();
    let measured = row.measured.unwrap();
    let error = row.predicted / measured - 1.0;
    assert_eq!(row.algorithm, "MSCCL");
    assert!(error.abs() < 0.35, "{} against {measured}", row.predicted);
}

/// The H800 boxes against what their users report (NVIDIA/nccl issue 1374: one box of 8 H800s,
/// the all-reduce's peak bus bandwidth "215 GB/s"; nccl-tests issue 153: two H800 boxes with 8
/// ConnectX-6 100 Gb/s NICs each, "as high as 161"): within 15%, and far under an H100 box's, as
/// the H800's 8 NVLinks (not 18) set it.
#[test]
fn h800_boxes_near_their_reported_bus_bandwidth() {
    let busbw = |system: &str, extra: &[&str]| {
        let mut args = vec!["-b", "4G", "-e", "4G"];
        args.extend_from_slice(extra);
        column(&all_reduce_csv(system, &args), "busbw")
    };
    let one = busbw("hgx-h800:1", &[]);
    assert!((one / 215.0 - 1.0).abs() < 0.15, "one box: {one} GB/s");
    assert!(one < 0.6 * busbw("hgx-h100:1", &[]));
    let two = busbw("hgx-h800:2", &["--nic", "8x100Gb"]);
    assert!((two / 161.0 - 1.0).abs() < 0.15, "two boxes: {two} GB/s");
    // `--nvlink` makes an H100 box an H800 one.
    assert_eq!(one, busbw("hgx-h100:1", &["--nvlink", "8x25GB/s"]));
}

/// One H100 a box driving four 400 Gb/s NICs (nccl-tests issue 232, NVIDIA/nccl issue 1357:
/// Tree all-reduce across two boxes, "busbw is 50, theoretical busbw should be 200"): the GPU's
/// PCIe link, which NCCL's search books every network path through (48 GB/s for Gen5 x16),
/// bounds it, not the four NICs' 200.
#[test]
fn a_gpus_nics_share_its_pcie_link() {
    let csv = all_reduce_csv(
        "hgx-h100:2",
        &[
            "--nic",
            "32x400Gb",
            "--gpus",
            "2",
            "--nccl-algo",
            "Tree",
            "-b",
            "1G",
            "-e",
            "1G",
        ],
    );
    let busbw = column(&csv, "busbw");
    assert!(busbw > 35.0 && busbw <= 48.0, "{busbw} GB/s");
}
