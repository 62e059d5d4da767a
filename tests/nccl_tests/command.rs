//! The `nccl-tests` command line: nccl-tests' own options, the table's columns, `--compare`'s
//! logs and the `--out` folder.

use super::*;

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
    // NVLinks only on an NVSwitch box, and as COUNTxSPEED.
    for (system, links, names) in [
        ("mi300x:1", "8x25GB/s", "xGMI full mesh"),
        ("hgx-h100:1", "8", "expected COUNTxSPEED"),
        ("hgx-h100:1", "40x25GB/s", "the count must be 1 to 36"),
    ] {
        let err = refused(&collsim(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            system,
            "--nvlink",
            links,
        ]));
        assert!(
            err.contains(&format!("--nvlink '{links}'")) && err.contains(names),
            "{err}"
        );
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

/// A raw log that lists its devices and ran on GPUs the topology does not hold gets a note
/// naming the system that holds them (the prediction is still made); on that system, none.
#[test]
fn a_log_of_other_gpus_is_noted() {
    let dir = scratch("collsim-nccl", "devices");
    let log = dir.join("h800.log");
    let devices: String = (0..8)
        .map(|r| {
            format!("#  Rank  {r} Group  0 Pid {r} on host device  {r} [0x0{r}] NVIDIA H800\n")
        })
        .collect();
    std::fs::write(
        &log,
        format!(
            "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824\n# Using devices\n\
             {devices}#       size         count      type   redop    root     time   algbw   \
             busbw #wrong\n  1073741824     268435456     float     sum      -1   8900.0  120.64  \
             211.12      0\n"
        ),
    )
    .unwrap();
    let run = |system: &str| {
        let out = collsim(&[
            "nccl-tests",
            "all_reduce",
            "--topology",
            system,
            "--compare",
            log.to_str().unwrap(),
        ]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("hgx-h100:1");
    assert!(
        err.starts_with("note: ")
            && err.contains("NVIDIA H800, which hgx-h800 models; hgx-h100:1 holds H100s"),
        "{err}"
    );
    assert_eq!(run("hgx-h800:1"), "");
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
