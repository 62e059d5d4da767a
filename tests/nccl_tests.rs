//! `collsim nccl-tests`: the NCCL model held against public nccl-tests measurements
//! (tests/data/nccl_tests/, copied from shared/reference/nccl_tests/ with their sources).

mod common;
use common::{collsim, refused, scratch, stdout_of, Table};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl_tests");

/// One predicted row beside its measurement.
struct Row {
    size: u64,
    predicted: f64,
    measured: Option<f64>,
    algorithm: String,
    protocol: String,
}

/// Runs `nccl-tests OP` on `system` from 8 KiB to 16 GiB against the measured `log`.
fn compare(op: &str, system: &str, log: &str, extra: &[&str]) -> Vec<Row> {
    let log = format!("{DATA}/{log}");
    let mut args = vec![
        "nccl-tests",
        op,
        "--topology",
        system,
        "-b",
        "8K",
        "-e",
        "16G",
        "-f",
        "2",
        "--format",
        "csv",
        "--compare",
        &log,
    ];
    args.extend_from_slice(extra);
    let table = Table::parse(&stdout_of(&args));
    assert_eq!(
        &table.header[..10],
        [
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time_us",
            "algbw",
            "busbw",
            "algorithm",
            "protocol"
        ]
    );
    (0..table.rows.len())
        .map(|i| Row {
            size: table.number(i, "size") as u64,
            predicted: table.number(i, "time_us"),
            measured: table.cell(i, "measured_time_us").parse().ok(),
            algorithm: table.cell(i, "algorithm").to_string(),
            protocol: table.cell(i, "protocol").to_string(),
        })
        .collect()
}

/// Sizes from `from` bytes up whose prediction is within `tolerance` of the measurement, and
/// how many were measured.
fn within(rows: &[Row], from: u64, tolerance: f64) -> (usize, usize) {
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.size >= from && r.measured.is_some())
        .collect();
    let good = measured
        .iter()
        .filter(|r| (r.predicted / r.measured.unwrap() - 1.0).abs() <= tolerance)
        .count();
    (good, measured.len())
}

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

/// NVLSTree across 4 and 8 H100 boxes runs at the NICs' rate, as the rings do: each GPU heads
/// its share of every channel over its own NIC, which carries two units of that share each way
/// (inner in one of the double binary tree's trees, a leaf in the other) where a ring's carries
/// 2(N-1)/N. With one head a channel (collsim before) the trees' pipeline held it to 0.83 and
/// 0.68 of the rings.
#[test]
fn nvls_tree_across_boxes_runs_at_the_nic_rate() {
    let busbw = |system: &str, algo: &str| {
        let out = all_reduce_csv(system, &["-b", "4G", "-e", "4G", "--nccl-algo", algo]);
        let table = Table::parse(&out);
        assert_eq!(table.cell(0, "algorithm"), algo);
        table.number(0, "busbw")
    };
    for system in ["hgx-h100:4", "hgx-h100:8"] {
        let (tree, ring) = (busbw(system, "NVLSTree"), busbw(system, "Ring"));
        assert!(
            tree >= 0.9 * ring,
            "{system}: NVLSTree {tree} against rings {ring} GB/s"
        );
    }
}

/// `nccl-tests all_reduce` on `system` with `args` (sizes, forced algorithms), as CSV.
fn all_reduce_csv(system: &str, args: &[&str]) -> String {
    let mut all = vec!["nccl-tests", "all_reduce", "--topology", system];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "csv"]);
    stdout_of(&all)
}

/// `nccl-tests all_reduce` of one size with NCCL_ALGO and NCCL_PROTO forced, as CSV.
fn forced_all_reduce(system: &str, size: &str, algo: &str, proto: &str) -> String {
    all_reduce_csv(
        system,
        &[
            "-b",
            size,
            "-e",
            size,
            "--nccl-algo",
            algo,
            "--nccl-proto",
            proto,
        ],
    )
}

/// nccl-tests' `-f 1 -i BYTES` (or `-i` alone) steps sizes by an increment; `-o` names the
/// reduction, which NCCL's choice and time do not depend on (its cost model has no term for it);
/// a step that would make more sizes than a table holds, `-f 0` and an unknown reduction are
/// refused in one line.
#[test]
fn sizes_step_by_an_increment_and_the_reduction_is_named() {
    let column = |csv: &str, name: &str| -> Vec<String> {
        let table = Table::parse(csv);
        table.column(name).into_iter().map(String::from).collect()
    };
    let sizes = ["1048576", "2097152", "3145728", "4194304"];
    for step in [&["-f", "1", "-i", "1M"][..], &["-i", "1M"]] {
        let mut args = vec!["-b", "1M", "-e", "4M"];
        args.extend_from_slice(step);
        assert_eq!(column(&all_reduce_csv("dgx-a100:1", &args), "size"), sizes);
    }
    // A factor above 1 wins over -i, as in nccl-tests.
    let both = all_reduce_csv(
        "dgx-a100:1",
        &["-b", "1M", "-e", "4M", "-f", "2", "-i", "1M"],
    );
    assert_eq!(column(&both, "size"), ["1048576", "2097152", "4194304"]);
    let sum = all_reduce_csv("dgx-a100:1", &["-b", "1M", "-e", "4M"]);
    let max = all_reduce_csv("dgx-a100:1", &["-b", "1M", "-e", "4M", "-o", "max"]);
    assert!(column(&max, "redop").iter().all(|r| r == "max"));
    assert_eq!(column(&sum, "time_us"), column(&max, "time_us"));
    let gather = stdout_of(&[
        "nccl-tests",
        "all_gather",
        "--topology",
        "dgx-a100:1",
        "-o",
        "max",
        "--format",
        "csv",
    ]);
    assert!(column(&gather, "redop").iter().all(|r| r == "none"));
    for (bad, names) in [
        (&["-b", "8", "-e", "8G", "-i", "1"][..], "-i 1"),
        (&["-f", "0"], "-f 0"),
        (&["-o", "all"], "-o 'all'"),
        (&["-i", "0"], "-i 0"),
    ] {
        let mut args = vec!["nccl-tests", "all_reduce", "--topology", "dgx-a100:1"];
        args.extend_from_slice(bad);
        let err = refused(&collsim(&args));
        assert!(err.contains(names), "{err}");
    }
}

/// LL's lines go on down a chain as they arrive (a trip of the channel's threads at a time), so
/// a rooted call's time grows with its size: with each GPU storing and forwarding a whole step,
/// a 32 KiB broadcast over two MI300X boxes took 126.7 us against 103.0 for 512 KiB.
#[test]
fn rooted_calls_take_longer_as_they_grow() {
    for system in ["mi300x:2", "hgx-h200:2"] {
        for op in ["broadcast", "reduce"] {
            growing_sweep(&[
                "nccl-tests",
                op,
                "--topology",
                system,
                "-b",
                "8",
                "-e",
                "1G",
                "-f",
                "16",
            ]);
        }
    }
}

/// The CSV table of an `nccl-tests` sweep (`args` without `--format`), asserting that its times
/// never fall as the sizes grow.
fn growing_sweep(args: &[&str]) -> Table {
    let mut args = args.to_vec();
    args.extend(["--format", "csv"]);
    let table = Table::parse(&stdout_of(&args));
    let times = table.numbers("time_us");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "{}: {times:?}",
        args.join(" ")
    );
    table
}

/// Simple's channels post each slice after copying it over their link, and a small call runs
/// few channels: on a full mesh each of them has one of the GPU's seven links to itself (a
/// ring takes one link a GPU), so a one-channel call copies at one link's rate, not at the
/// seven links' (which made an 8 KiB all-gather on one MI300X box take 228 us against 60 us at
/// 512 KiB). Forced to Simple, calls take no less time as they grow, on the mesh and the switch.
#[test]
fn simple_calls_take_longer_as_they_grow() {
    for system in ["mi300x:1", "dgx-a100:1"] {
        for op in ["all_gather", "all_reduce"] {
            let table = growing_sweep(&[
                "nccl-tests",
                op,
                "--topology",
                system,
                "--nccl-proto",
                "Simple",
                "-b",
                "8",
                "-e",
                "64M",
                "-f",
                "4",
            ]);
            assert!(table.column("protocol").iter().all(|&p| p == "Simple"));
        }
    }
}

/// The count column is the count nccl-tests hands each call (its `paramcount`,
/// src/*.cu `GetCollByteCount`): per rank where the ranks split the buffer (all-gather sends,
/// reduce-scatter receives, all-to-all sends each peer that many), the whole buffer otherwise.
#[test]
fn the_count_column_is_the_count_each_call_is_given() {
    let count = |op: &str, datatype: &str| {
        let csv = stdout_of(&[
            "nccl-tests",
            op,
            "--topology",
            "dgx-a100:1",
            "-b",
            "8M",
            "-e",
            "8M",
            "-d",
            datatype,
            "--format",
            "csv",
        ]);
        Table::parse(&csv).number(0, "count") as u64
    };
    for op in ["all_reduce", "broadcast", "reduce"] {
        assert_eq!(count(op, "float"), (8 << 20) / 4, "{op}");
    }
    for op in ["all_gather", "reduce_scatter", "alltoall"] {
        assert_eq!(count(op, "float"), (8 << 20) / 4 / 8, "{op}");
        assert_eq!(count(op, "half"), (8 << 20) / 2 / 8, "{op}");
    }
    // 24 ranks: 8 MiB of floats is 87381.3 a rank, trimmed to 87380 (16 bytes a rank).
    let csv = stdout_of(&[
        "nccl-tests",
        "all_gather",
        "--topology",
        "dgx-a100:3",
        "-b",
        "8M",
        "-e",
        "8M",
        "--format",
        "csv",
    ]);
    let table = Table::parse(&csv);
    assert_eq!(table.number(0, "count") as u64, 87380);
    assert_eq!(table.number(0, "size") as u64, 87380 * 24 * 4);
}

/// A measured run's command line works as written: nccl-tests' options that change no call's
/// time (-t -n -w -c -a -p -N -T, and -m -z -G -C at their defaults) leave every row as it was;
/// those that change what nccl-tests times are refused naming the option.
#[test]
fn nccl_tests_measurement_options_are_taken_or_refused() {
    let plain = all_reduce_csv("dgx-a100:1", &["-b", "8", "-e", "128M", "-g", "8"]);
    let as_run = all_reduce_csv(
        "dgx-a100:1",
        &[
            "-b", "8", "-e", "128M", "-g", "8", "-t", "1", "-n", "20", "-w", "5", "-c", "1", "-a",
            "1", "-p", "0", "-N", "1", "-T", "600", "-m", "1", "-z", "0", "-G", "0", "-C", "0",
        ],
    );
    assert_eq!(plain, as_run);
    for (bad, names) in [
        (&["-m", "4"][..], "-m 4"),
        (&["-m", "0"], "-m 0"),
        (&["-z", "1"], "-z 1"),
        (&["-G", "10"], "-G 10"),
        (&["-C", "1"], "-C 1"),
        (&["-a", "4"], "-a 4"),
        (&["-t", "0"], "-t 0"),
        (&["-t", "2", "-g", "8"], "-t 2"),
    ] {
        let mut args = vec!["nccl-tests", "all_reduce", "--topology", "dgx-a100:1"];
        args.extend_from_slice(bad);
        let err = refused(&collsim(&args));
        assert!(err.contains(names), "{err}");
    }
    // One GPU: nothing to communicate, refused naming the system whatever the operation.
    for op in ["all_reduce", "all_gather", "alltoall", "broadcast"] {
        let err = refused(&collsim(&["nccl-tests", op, "--topology", "pcie:1"]));
        assert!(
            err.contains("'pcie:1'") && err.contains("at least 2 GPUs"),
            "{err}"
        );
    }
}

/// NVLS runs Simple's primitives: each loop a GPU's scatter posts one chunk of every head and
/// waits NCCL's step latency (L = 3.4 us) before the next, so its link moves a loop of c us in
/// c + L. On a B200 box (24 NVLS channels, 18 x 40.1 GB/s x 0.74 a GPU) the chunk is 64 KiB at
/// 1 GiB and 128 KiB at 2 GiB: c = 8 x chunk at 22.3 GB/s a channel, 23.6 and 47.1 us, so the
/// bus rate at 1 GiB is 0.874 / 0.933 = 0.937 of that at 2 GiB (measured: 722 against 816 GB/s,
/// 0.885; without the posts both run at the link rate, 0.99).
#[test]
fn nvls_posts_a_loop_of_chunks_at_a_time() {
    let out = all_reduce_csv(
        "hgx-b200:1",
        &["-b", "1G", "-e", "2G", "-f", "2", "--nccl-algo", "NVLS"],
    );
    let busbw = Table::parse(&out).numbers("busbw");
    let ratio = busbw[0] / busbw[1];
    let per_channel = 18.0 * 40.1 * 0.74 / 24.0;
    let share = |chunk: f64| {
        let c = 8.0 * chunk / (per_channel * 1e3);
        c / (c + 3.4)
    };
    let expected = share(65536.0) / share(131072.0);
    assert!(
        (ratio / expected - 1.0).abs() < 0.01,
        "{ratio} against {expected}"
    );
}

/// NCCL enables LL128 by default only on NVIDIA GPUs that meet over NVLink, RCCL only on the
/// MI250's gfx90a: a box of PCIe A100s and an MI300X box never pick it unless NCCL_PROTO names it
/// (`--nccl-proto`), while the DGX A100 does at 8 MiB.
#[test]
fn ll128_only_where_nccl_enables_it() {
    let protocols = |system: &str| -> Vec<String> {
        let out = all_reduce_csv(system, &["-b", "256K", "-e", "64M", "-f", "2"]);
        let table = Table::parse(&out);
        table
            .column("protocol")
            .into_iter()
            .map(String::from)
            .collect()
    };
    for system in ["pcie:8", "mi300x:1", "mi300x:2"] {
        let used = protocols(system);
        assert!(!used.iter().any(|p| p == "LL128"), "{system}: {used:?}");
    }
    assert!(protocols("dgx-a100:1").iter().any(|p| p == "LL128"));
    let forced = forced_all_reduce("pcie:8", "4M", "Ring", "LL128");
    assert!(forced.lines().nth(1).unwrap().contains(",Ring,LL128,"));
}

/// Tree LL128 on eight H100 boxes at 4 and 16 MiB: NCCL cuts it in chunks that shrink with the
/// call against the tree's depth (`computeCollChunkInfo`), so the pipeline fills in a few
/// chunks; the simulated time stays within 1.5 times NCCL's own cost model (with LL128's whole
/// step a chunk it took 2.2 and 2.1 times: 276 and 507 us against 128 and 243).
#[test]
fn tree_ll128_across_boxes_near_nccls_estimate() {
    for (size, estimate) in [("4M", 128.0), ("16M", 243.0)] {
        let out = forced_all_reduce("hgx-h100:8", size, "Tree", "LL128");
        let time = Table::parse(&out).number(0, "time_us");
        assert!(
            time < 1.5 * estimate,
            "{size}: {time} us against {estimate}"
        );
    }
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
/// today's count (97 of 139), so that a change that loses accuracy fails here. (93 before the
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

/// Forcing an algorithm and protocol runs them, as NCCL_ALGO / NCCL_PROTO do; a forced
/// combination that cannot run is refused.
#[test]
fn forced_algorithm_and_protocol_are_run() {
    let out = forced_all_reduce("hgx-h100:1", "1M", "Tree", "LL128");
    assert!(
        out.lines().nth(1).unwrap().contains(",Tree,LL128,"),
        "{out}"
    );
    let out = collsim(&[
        "nccl-tests",
        "all_gather",
        "--topology",
        "dgx-a100:1",
        "--nccl-algo",
        "NVLS",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no NCCL algorithm"), "{err}");
}

/// Bad logs end with exit 2 and one error line naming the file (and the line where there is
/// one): truncated rows, no rows, an operation the log does not hold, units that change.
#[test]
fn bad_logs_are_refused_naming_file_and_line() {
    let dir = scratch("collsim-nccl", "logs");
    let good = std::fs::read_to_string(format!("{DATA}/a100_2node_roce_all_reduce.md")).unwrap();
    let cases = [
        (
            "truncated.md",
            good.replace("| 1048576 | 85.58 | 12.25 | 22.97 |", "| 1048576 | 85.58 |"),
            "truncated.md:",
        ),
        (
            "empty.md",
            "# nothing measured\n".to_string(),
            "no nccl-tests rows",
        ),
        (
            "mixed.md",
            format!("{good}\n| size | time_ms | a | b |\n| 16 | 1 | 0 | 0 |\n"),
            "mixed units",
        ),
    ];
    for (name, text, expect) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = collsim(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            "dgx-a100:2",
            "--compare",
            path.to_str().unwrap(),
        ]);
        let err = refused(&out);
        assert!(err.contains(name) && err.contains(expect), "{name}: {err}");
    }
    let out = collsim(&[
        "nccl-tests",
        "alltoall",
        "--topology",
        "hgx-b200:2",
        "--compare",
        &format!("{DATA}/b200_2node_all_gather_reduce_scatter.md"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not alltoall"), "{err}");
    // A log of 16 ranks held against one box of 8.
    let log = format!("{DATA}/b200_2node_all_reduce.md");
    let wrong_system = ["nccl-tests", "all_reduce", "--topology", "hgx-b200:1"];
    let err = refused(&collsim(
        &[&wrong_system[..], &["--compare", &log]].concat(),
    ));
    assert!(
        err.contains("b200_2node_all_reduce.md") && err.contains("16 ranks"),
        "{err}"
    );
}

/// With `--compare` and no -b / -e, every size the log holds is predicted beside it.
#[test]
fn a_compared_log_gives_the_sizes() {
    let out = stdout_of(&[
        "nccl-tests",
        "all_reduce",
        "--topology",
        "dgx-a100:2",
        "--nic",
        "16x100Gb",
        "--nic-kind",
        "roce",
        "--compare",
        &format!("{DATA}/a100_2node_roce_all_reduce.md"),
        "--format",
        "csv",
    ]);
    let rows: Vec<&str> = out.lines().skip(1).collect();
    // 8 B to 8 GiB by twos.
    assert_eq!(rows.len(), 31, "{out}");
    assert!(
        rows.iter().all(|r| !r.ends_with(',')),
        "every row measured: {out}"
    );
}

/// A results folder holding files of the user's is refused without --force, and --force keeps
/// them (it replaces only what collsim wrote there).
#[test]
fn out_folder_keeps_the_users_files() {
    let dir = scratch("collsim-nccl", "theirs");
    let theirs = dir.join("notes.txt");
    std::fs::write(&theirs, "mine").unwrap();
    let args = [
        "nccl-tests",
        "all_reduce",
        "--topology",
        "dgx-a100:1",
        "-b",
        "1M",
        "-e",
        "1M",
        "--out",
        dir.to_str().unwrap(),
    ];
    let out = collsim(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.join("nccl_tests.csv").exists());
    let mut forced = args.to_vec();
    forced.push("--force");
    stdout_of(&forced);
    stdout_of(&forced);
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "mine");
    assert!(dir.join("nccl_tests.csv").exists());
}

/// With --out and --compare, the CSV and the bus-bandwidth figure are written.
#[test]
fn out_folder_gets_the_table_and_the_figure() {
    let dir = scratch("collsim-nccl", "out");
    stdout_of(&[
        "nccl-tests",
        "all_gather",
        "--topology",
        "hgx-b200:1",
        "-b",
        "1M",
        "-e",
        "64M",
        "--compare",
        &format!("{DATA}/b200_1node.md"),
        "--out",
        dir.to_str().unwrap(),
    ]);
    for f in ["nccl_tests.csv", "busbw.png", "busbw.svg"] {
        assert!(dir.join(f).metadata().unwrap().len() > 0, "{f}");
    }
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
    // A subset is taken from one box only, and is at least two GPUs.
    for (topology, gpus) in [
        ("dgx-a100:2", "4"),
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

/// CollNet Direct on a SHARP network: NCCL's model chooses it, the rails' leaf switches sum the
/// boxes, and the closed forms hold. With fast NICs the boxes' NVLink bounds it (each GPU moves
/// 2(G-1)/G of the buffer over its 240 GB/s); with slow NICs it halves the ring's network
/// traffic (ring over SHARP: 2(n-1)/n, here 1.94). Without --sharp it is refused by name.
#[test]
fn collnet_sums_in_the_network_switches() {
    let time = |extra: &[&str]| -> (f64, String) {
        let mut args = vec![
            "nccl-tests",
            "all_reduce",
            "--topology",
            "dgx-a100:4",
            "-b",
            "1G",
            "-e",
            "1G",
            "--format",
            "csv",
        ];
        args.extend_from_slice(extra);
        let table = Table::parse(&stdout_of(&args));
        (
            table.number(0, "time_us"),
            table.cell(0, "algorithm").to_string(),
        )
    };
    let (t, algo) = time(&["--sharp"]);
    assert_eq!(algo, "CollNetDirect");
    let bound_us = (1u64 << 30) as f64 * 2.0 * 7.0 / 8.0 / 240e9 * 1e6;
    assert!(
        t >= bound_us && t < 1.03 * bound_us,
        "{t} against {bound_us}"
    );
    let slow = ["--sharp", "--nic", "8x50Gb"];
    let (ring, _) = time(&[&slow[..], &["--nccl-algo", "Ring"]].concat());
    let (collnet, _) = time(&[&slow[..], &["--nccl-algo", "CollNetDirect"]].concat());
    let ratio = ring / collnet;
    assert!((ratio / (2.0 * 31.0 / 32.0) - 1.0).abs() < 0.05, "{ratio}");
    let refused = collsim(&[
        "nccl-tests",
        "all_reduce",
        "--topology",
        "dgx-a100:4",
        "--nccl-algo",
        "CollNetDirect",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--sharp"));
}

/// On an xGMI full mesh (MI300X: 7 links of 48 GB/s as RCCL books them per GPU) the channels'
/// rings spread over the links, three edge-disjoint Hamiltonian rings run both ways using 6 of
/// each GPU's 7 links, as NCCL's search spreads channels by deducting their bandwidth from the
/// links: a 4 GiB all-gather within 15% of moving 7/8 of the buffer at 6 x 48 GB/s (Simple's
/// post per 1 MiB slice, RCCL's 2.1 us step, takes a few percent of that; all rings in GPU
/// order, as before, shared two links a GPU: 3.4x slower).
#[test]
fn rings_spread_over_a_full_mesh() {
    let time_us = ring_simple_time_us("all_gather", "mi300x:1", "4G");
    let bound_us = (4u64 << 30) as f64 * 7.0 / 8.0 / (6.0 * 48e9) * 1e6;
    assert!(
        time_us >= bound_us && time_us <= 1.15 * bound_us,
        "{time_us} us against {bound_us} us"
    );
}

/// Simple's post per slice: on one DGX A100 box a 32 MiB Ring/Simple all-reduce runs in one loop
/// of 24 channels, each moving 2 x 7 steps of 2 slices (87,381 B, 8.74 us at a channel's tenth
/// of 240 GB/s) and posting each after NCCL's 3.4 us step latency: 28 x (8.74 + 3.4) us plus
/// the call's 13.4 us fixed cost, 353 us (within 10%); without the posts it would be 258 us.
#[test]
fn simple_slices_each_pay_the_step_latency() {
    let time_us = ring_simple_time_us("all_reduce", "dgx-a100:1", "32M");
    let slice_us = (32u64 << 20) as f64 / (8.0 * 24.0 * 2.0) / 10e9 * 1e6;
    let expected = 28.0 * (slice_us + 3.4) + 13.4;
    assert!(
        (time_us / expected - 1.0).abs() <= 0.10,
        "{time_us} us against {expected} us"
    );
}

/// The predicted time of one `op` call of `size` on `system`, forced to Ring/Simple, us.
fn ring_simple_time_us(op: &str, system: &str, size: &str) -> f64 {
    let out = stdout_of(&[
        "nccl-tests",
        "--topology",
        system,
        op,
        "-b",
        size,
        "-e",
        size,
        "--nccl-algo",
        "Ring",
        "--nccl-proto",
        "Simple",
        "--format",
        "csv",
    ]);
    Table::parse(&out).number(0, "time_us")
}

/// One box of eight MI300X runs RCCL's shipped MSCCL algorithms where they match the call (src/nccl/msccl.rs):
/// an 8 MiB all-reduce is the all-pairs file's Simple on 8 channels a peer, its time the
/// closed form of two phases each moving an eighth of the buffer over every xGMI link (48 GB/s
/// as RCCL books it) at Simple's posting share (a 128 KiB piece a channel, 8 channels a link:
/// 21.85 us of copy against RCCL's 2.1 us step), plus the 5 us fixed cost; 32 MiB, an average,
/// or a forced algorithm run RCCL's rings; a 1 MiB all-to-all is the 32-channel file.
#[test]
fn mi300x_runs_rccls_msccl_algorithms_where_rccl_does() {
    let row = |args: &[&str]| {
        let table = Table::parse(&all_reduce_csv("mi300x:1", args));
        (
            table.number(0, "time_us"),
            table.cell(0, "algorithm").to_string(),
            table.cell(0, "protocol").to_string(),
            table.cell(0, "channels").to_string(),
        )
    };
    let (time_us, algo, proto, channels) = row(&["-b", "8M", "-e", "8M"]);
    assert_eq!(
        (algo.as_str(), proto.as_str(), channels.as_str()),
        ("MSCCL", "Simple", "8")
    );
    let copy_us = 131_072.0 / (48e9 / 8.0) * 1e6;
    let link = 48e9 * copy_us / (copy_us + 2.1);
    let expected = 5.0 + 2.0 * (1u64 << 20) as f64 / link * 1e6;
    assert!(
        (time_us / expected - 1.0).abs() < 0.01,
        "{time_us} us against {expected} us"
    );
    assert_eq!(row(&["-b", "32M", "-e", "32M"]).1, "Ring");
    assert_eq!(row(&["-b", "8M", "-e", "8M", "-o", "avg"]).1, "Ring");
    assert_eq!(
        row(&["-b", "8M", "-e", "8M", "--nccl-algo", "Ring,Tree"]).1,
        "Ring"
    );
    assert_eq!(row(&["-b", "64K", "-e", "64K"]).2, "LL");
    let all_to_all = Table::parse(&stdout_of(&[
        "nccl-tests",
        "alltoall",
        "--topology",
        "mi300x:1",
        "-b",
        "1M",
        "-e",
        "1M",
        "--format",
        "csv",
    ]));
    assert_eq!(all_to_all.cell(0, "algorithm"), "MSCCL");
    assert_eq!(all_to_all.cell(0, "channels"), "32");
}

/// NCCL runs no LL128 across boxes whose GPUs reach their NICs beyond PXN (`--nic-path phb`): two
/// B200 boxes' all-gather then runs LL and Simple at every size, one box still LL128. The
/// two-box B200 log reads so (results/README.md): its 4 and 8 MiB rows, which the boards' own
/// path (LL128) runs at less than half their measured time, come within 10% on Simple.
#[test]
fn ll128_across_boxes_follows_the_nic_path() {
    let protocols = |system: &str, path: &str| -> Vec<String> {
        let out = stdout_of(&[
            "nccl-tests",
            "all_gather",
            "--topology",
            system,
            "--nic-path",
            path,
            "-b",
            "256K",
            "-e",
            "64M",
            "-f",
            "4",
            "--format",
            "csv",
        ]);
        Table::parse(&out)
            .column("protocol")
            .into_iter()
            .map(String::from)
            .collect()
    };
    assert!(!protocols("hgx-b200:2", "phb").iter().any(|p| p == "LL128"));
    assert!(protocols("hgx-b200:2", "pxb").iter().any(|p| p == "LL128"));
    assert!(protocols("hgx-b200:1", "phb").iter().any(|p| p == "LL128"));
    let log = "b200_2node_all_gather_reduce_scatter.md";
    let error_at = |args: &[&str], size: u64| {
        let rows = compare("all_gather", "hgx-b200:2", log, args);
        let row = rows.iter().find(|r| r.size == size).unwrap();
        row.predicted / row.measured.unwrap() - 1.0
    };
    for size in [4 << 20, 8 << 20] {
        assert!(error_at(&[], size) < -0.5);
        let error = error_at(&["--nic-path", "phb"], size);
        assert!(error.abs() < 0.10, "{size} B: {error}");
    }
}

/// LL across boxes: each GPU writes its lines at the rate NCCL's model books LL (its llMaxBw
/// cap, the GPU's), the NIC carries them at LL's wire share, so a small Tree/LL all-reduce pays
/// the capped rate once a network hop. On the two RoCE DGX A100 boxes the log's 8-32 KiB calls
/// come within 10% (+4.8 to +8.1%; charging the capped rate at the NIC and again at the far leaf
/// gave +12.5 to +16.0%).
#[test]
fn ll_lines_pay_their_capped_rate_once_a_network_hop() {
    let rows = compare(
        "all_reduce",
        "dgx-a100:2",
        "a100_2node_roce_all_reduce.md",
        &["--nic", "16x100Gb", "--nic-kind", "roce"],
    );
    for size in [8 << 10, 16 << 10, 32 << 10] {
        let row = rows.iter().find(|r| r.size == size).unwrap();
        assert_eq!(
            (row.algorithm.as_str(), row.protocol.as_str()),
            ("Tree", "LL")
        );
        let error = row.predicted / row.measured.unwrap() - 1.0;
        assert!(error.abs() < 0.10, "{size} B: {error}");
    }
}

/// RCCL, not NCCL, picks the MI300X's algorithm and protocol (`tuning_model_5`, src/nccl/rccl.rs).
/// One box, all-gather: at 512 KiB RCCL's model prices Ring/LL at 12 + 7 x 0.8 us plus the
/// bytes at 0.08 of 336 GB/s x 8/7 (34.7 us) and Ring/Simple at 17 + 7 x 2.1 plus the bytes at
/// 336 x 8/7 (33.1 us): Simple, where NCCL's figures (LL at half the channels) kept LL to 2 MiB;
/// at 64 KiB LL. Two boxes, all-reduce: RCCL's per-size ring correction (0.1 of the rings'
/// bandwidth at 32 MiB, 0.8 at 512 MiB) keeps the trees to 128 MiB, where NCCL's figures ran
/// rings from 32 MiB.
#[test]
fn mi300x_calls_are_chosen_by_rccls_model() {
    let choice = |op: &str, system: &str, size: &str| {
        let out = stdout_of(&[
            "nccl-tests",
            op,
            "--topology",
            system,
            "-b",
            size,
            "-e",
            size,
            "--format",
            "csv",
        ]);
        let table = Table::parse(&out);
        format!(
            "{} {}",
            table.cell(0, "algorithm"),
            table.cell(0, "protocol")
        )
    };
    assert_eq!(choice("all_gather", "mi300x:1", "64K"), "Ring LL");
    assert_eq!(choice("all_gather", "mi300x:1", "512K"), "Ring Simple");
    assert_eq!(choice("reduce_scatter", "mi300x:1", "2M"), "Ring Simple");
    assert_eq!(choice("all_reduce", "mi300x:2", "32M"), "Tree Simple");
    assert_eq!(choice("all_reduce", "mi300x:2", "512M"), "Ring Simple");
    // NVIDIA boxes keep NCCL's choice (LL at 512 KiB on eight A100s).
    assert_eq!(choice("all_gather", "dgx-a100:1", "512K"), "Ring LL");
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
