//! NCCL's mechanisms as the model runs them: its choices, protocols, posts and network paths,
//! each checked against NCCL's source or its maintainers' figures.

use super::*;

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

/// A call smaller than one byte a piece is simulated at that size, and its slices' posts are
/// priced for what its pieces then carry: forced to NVLS in one box and NVLSTree across four,
/// 4 B took 37.6 and 154.2 us where 32 B took 33.8 and 127.4 (the slice had been priced for
/// the call's own bytes, the pieces carrying more).
#[test]
fn calls_of_a_few_bytes_take_no_longer_than_larger_ones() {
    for (system, algo) in [("hgx-h100:1", "NVLS"), ("hgx-h100:4", "NVLSTree")] {
        let table = growing_sweep(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            system,
            "--nccl-algo",
            algo,
            "-b",
            "4",
            "-e",
            "1K",
        ]);
        assert!(table.column("algorithm").iter().all(|&a| a == algo));
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
    // Within 6% of NVLink's bound (1.053 with every loop of NCCL's chunks simulated; merged
    // into larger chunks, as calls past 2^19 transfers once were, they came within 3%).
    let bound_us = (1u64 << 30) as f64 * 2.0 * 7.0 / 8.0 / 240e9 * 1e6;
    assert!(
        t >= bound_us && t < 1.06 * bound_us,
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

/// `--gpus` across boxes takes the same GPUs from each: one GPU a box runs over its own NIC
/// (its 50 GB/s bounds the two-box ring's bus rate), and NVLS, which needs two GPUs of a box
/// (`ncclNvlsInit`), is neither chosen nor allowed there; with two a box it may run.
#[test]
fn gpus_across_boxes_take_each_boxes_first() {
    let one = all_reduce_csv(
        "hgx-h100:2",
        &["--gpus", "2", "-b", "8", "-e", "4G", "-f", "8"],
    );
    let table = Table::parse(&one);
    assert!(table
        .column("algorithm")
        .iter()
        .all(|a| !a.starts_with("NVLS")));
    let busbw = table.numbers("busbw");
    let last = *busbw.last().unwrap();
    assert!(last > 40.0 && last < 50.0, "{busbw:?}");
    let err = refused(&collsim(&[
        "nccl-tests",
        "all_reduce",
        "--topology",
        "hgx-h100:4",
        "--gpus",
        "4",
        "--nccl-algo",
        "NVLSTree",
    ]));
    assert!(err.contains("(1 of 8 GPUs a box)"), "{err}");
    let two = all_reduce_csv(
        "hgx-h100:4",
        &[
            "--gpus",
            "8",
            "-b",
            "1G",
            "-e",
            "1G",
            "--nccl-algo",
            "NVLSTree",
        ],
    );
    assert_eq!(Table::parse(&two).cell(0, "algorithm"), "NVLSTree");
}

/// Where NCCL's cost model ranks first an algorithm collsim does not run (NVLS's all-gather
/// across boxes, on a SHARP network of four H100 boxes at small sizes), the table says so rather
/// than pass NCCL's next choice off as NCCL's; without SHARP there is nothing to say.
#[test]
fn calls_nccl_would_run_unmodelled_are_named() {
    let run = |sharp: bool| {
        let mut args = vec![
            "nccl-tests",
            "all_gather",
            "--topology",
            "hgx-h100:4",
            "-b",
            "4K",
            "-e",
            "1M",
            "-f",
            "4",
        ];
        if sharp {
            args.push("--sharp");
        }
        let out = collsim(&args);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let note = run(true);
    assert!(
        note.contains("note: NCCL's cost model would run NVLS at ") && note.contains("from 16KiB"),
        "{note}"
    );
    assert!(!run(false).contains("note:"));
}

/// CollNet Direct's all-gather and reduce-scatter move each part along its owner's rail: on
/// four DGX A100 boxes with the NICs slowed until they bind, an all-gather's NIC carries the
/// other three boxes' parts down (3 S / 32) where a ring's carries 31 S / 256, so it is 31/24
/// times faster; a reduce-scatter's carries all four boxes' sums up (4 S / 32), 32/31 times the
/// ring's.
#[test]
fn collnet_all_gather_and_reduce_scatter_go_along_the_rails() {
    let time = |op: &str, algo: &str| {
        let slowed = ["--sharp", "--nic", "8x50Gb", "-b", "1G", "-e", "1G"];
        let out = op_csv(
            op,
            "dgx-a100:4",
            &[&slowed[..], &["--nccl-algo", algo]].concat(),
        );
        Table::parse(&out).number(0, "time_us")
    };
    let gather = time("all_gather", "Ring") / time("all_gather", "CollNetDirect");
    assert!((gather / (31.0 / 24.0) - 1.0).abs() < 0.03, "{gather}");
    let scatter = time("reduce_scatter", "CollNetDirect") / time("reduce_scatter", "Ring");
    assert!((scatter / (32.0 / 31.0) - 1.0).abs() < 0.03, "{scatter}");
}

/// PAT, NCCL's all-gather and reduce-scatter for one GPU a box, runs where NCCL's model picks
/// it: small calls from four boxes. Its latency is NCCL's (a base, 2.8 us a rank, a level of
/// its trees a doubling of the boxes at the network latency over 3.5), so 16 more boxes add
/// 16 x 2.8 us and one level; forced on a large call it moves at three quarters of the ring's
/// bus bandwidth, as NCCL's model rates it.
#[test]
fn pat_runs_one_gpu_a_box_at_nccls_cost() {
    let small = |op: &str, boxes: u32| {
        let n = boxes.to_string();
        let out = stdout_of(&[
            "nccl-tests",
            op,
            "--topology",
            &format!("hgx-h100:{boxes}"),
            "--gpus",
            &n,
            "-b",
            "8K",
            "-e",
            "8K",
            "--format",
            "csv",
        ]);
        let table = Table::parse(&out);
        assert_eq!(table.cell(0, "algorithm"), "PAT", "{op} on {boxes} boxes");
        table.number(0, "time_us")
    };
    for op in ["all_gather", "reduce_scatter"] {
        let more = small(op, 32) - small(op, 16);
        // One more level: NCCL's 14 us network latency over 3.5, and the proxies' 1 us each
        // way for its message.
        let level = 14.0 / 3.5 + 2.0;
        assert!(
            more >= 16.0 * 2.8 && more <= 16.0 * 2.8 + 2.0 * level,
            "{op}: 16 to 32 boxes adds {more} us"
        );
    }
    let busbw = |algo: &str| {
        let out = stdout_of(&[
            "nccl-tests",
            "reduce_scatter",
            "--topology",
            "dgx-a100:5",
            "--gpus",
            "5",
            "-b",
            "1G",
            "-e",
            "1G",
            "--nccl-algo",
            algo,
            "--nccl-proto",
            "Simple",
            "--format",
            "csv",
        ]);
        Table::parse(&out).number(0, "busbw")
    };
    let ratio = busbw("PAT") / busbw("Ring");
    assert!(
        (ratio - 0.75).abs() < 0.02,
        "PAT / ring bus bandwidth {ratio}"
    );
}

/// With SHARP, NCCL runs NVLS across boxes (its NVLS kernel with CollNet): each box's GPUs sum
/// into their NVSwitch, each GPU sends its share of the box's sum up its rail, whose leaf switch
/// sums the boxes and sends the total back down. Each NIC then carries a share once each way,
/// so four H100 boxes move a large all-reduce at about one box's NVLS rate (its algbw), where
/// without SHARP NCCL's NVLSTree is held to the NICs' rate.
#[test]
fn nvls_with_sharp_sums_the_boxes_in_the_network() {
    let run = |system: &str, sharp: bool| {
        let args: &[&str] = if sharp {
            &["-b", "1G", "-e", "1G", "--sharp"]
        } else {
            &["-b", "1G", "-e", "1G"]
        };
        let table = Table::parse(&all_reduce_csv(system, args));
        (
            table.cell(0, "algorithm").to_string(),
            table.number(0, "algbw"),
        )
    };
    let (one_box, box_rate) = run("hgx-h100:1", false);
    assert_eq!(one_box, "NVLS");
    let (algo, sharp_rate) = run("hgx-h100:4", true);
    assert_eq!(algo, "NVLS");
    assert!(
        sharp_rate >= 0.9 * box_rate && sharp_rate <= box_rate * 1.001,
        "NVLS with SHARP {sharp_rate} GB/s against one box's {box_rate}"
    );
    let (tree, tree_rate) = run("hgx-h100:4", false);
    assert_eq!(tree, "NVLSTree");
    assert!(tree_rate < 0.8 * sharp_rate, "NVLSTree {tree_rate} GB/s");
}
