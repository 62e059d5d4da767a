//! Whole-command behaviour of `collsim simulate`: closed forms in the exact time model, output files,
//! determinism, and bad input (exit status 2, one `error:` line, nothing left behind).

mod common;
use common::{collsim, first_row, summary, Table};
use std::path::Path;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("collsim-cli", name)
}

fn time_ns(args: &[&str]) -> f64 {
    summary(args)["collective_time_ns"].parse().unwrap()
}

/// t = a + n/B in ns for `a` ns, `n` bytes, `gib` GiB/s.
fn hop_ns(latency_ns: f64, bytes: f64, gib: f64) -> f64 {
    latency_ns + bytes / (gib * (1u64 << 30) as f64) * 1e9
}

fn write_ring_allgather(path: &Path, n: u32, shard: u64) {
    // Shard i travels i -> i+1 -> ... for N-1 hops, each hop waiting for the previous one.
    let mut text = String::from("id,src,dst,bytes,deps\n");
    let mut id = 0;
    for k in 1..n {
        for i in 0..n {
            let deps = if k == 1 {
                String::new()
            } else {
                (id - n).to_string()
            };
            text += &format!("{id},{},{},{shard},{deps}\n", (i + k - 1) % n, (i + k) % n);
            id += 1;
        }
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn ring_allgather_on_a_unidirectional_ring_takes_n_minus_1_hops() {
    let dir = scratch("ring-ag");
    for n in [4u32, 8, 13] {
        let shard = 1u64 << 24;
        let file = dir.join(format!("ag{n}.csv"));
        write_ring_allgather(&file, n, shard);
        let spec = format!("uring:{n}");
        let got = time_ns(&[
            "--topology",
            &spec,
            "--bandwidth",
            "50GiB/s",
            "--latency",
            "500ns",
            "--schedule",
            file.to_str().unwrap(),
        ]);
        let want = (n - 1) as f64 * hop_ns(500.0, shard as f64, 50.0);
        assert!(
            (got - want).abs() < 0.001 * n as f64,
            "N={n}: {got} vs {want}"
        );
    }
}

#[test]
fn direct_all_to_all_on_fully_connected_takes_one_hop() {
    for n in [4u32, 8, 31] {
        let chunk = 1u64 << 20;
        let spec = format!("fc:{n}");
        let size = (chunk * n as u64).to_string();
        let got = time_ns(&[
            "--topology",
            &spec,
            "--bandwidth",
            "50GiB/s",
            "--latency",
            "500ns",
            "--collective",
            "all-to-all",
            "--algorithm",
            "direct",
            "--size",
            &size,
        ]);
        assert!(
            (got - hop_ns(500.0, chunk as f64, 50.0)).abs() < 0.001,
            "N={n}: {got}"
        );
    }
}

#[test]
fn a_message_through_a_switch_takes_two_hops() {
    let dir = scratch("switch-hop");
    let file = dir.join("one.csv");
    let bytes = 3_000_000u64;
    std::fs::write(&file, format!("id,src,dst,bytes,deps\n0,2,5,{bytes},\n")).unwrap();
    let got = time_ns(&[
        "--topology",
        "switch:8",
        "--bandwidth",
        "25GB/s",
        "--latency",
        "1us",
        "--schedule",
        file.to_str().unwrap(),
    ]);
    let want = 2.0 * (1000.0 + bytes as f64 / 25e9 * 1e9);
    assert!((got - want).abs() < 0.002, "{got} vs {want}");
}

#[test]
fn out_folder_holds_consistent_csvs_and_two_runs_are_identical() {
    let dir = scratch("out");
    let run = |sub: &str| {
        let out = dir.join(sub);
        let o = collsim(&[
            "simulate",
            "--topology",
            "ring:6",
            "--collective",
            "all-to-all",
            "--algorithm",
            "direct",
            "--size",
            "6MiB",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let (a, b) = (run("a"), run("b"));
    for file in ["summary.csv", "transfers.csv", "links.csv"] {
        let (x, y) = (
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
        );
        assert_eq!(x, y, "{file} differs between identical runs");
    }
    let summary = std::fs::read_to_string(a.join("summary.csv")).unwrap();
    assert!(summary.starts_with(
        "topology,npus,collective,algorithm,size_bytes,chunks_per_npu,collective_time_ns,algbw_GBps,\
         busbw_GBps,bound_ns,efficiency,transfers,synthesis_ms,seed"
    ));
    let time = Table::parse(&summary).number(0, "collective_time_ns");
    // The last transfer ends at the collective time; link bytes are transfer bytes times hops.
    let transfers = std::fs::read_to_string(a.join("transfers.csv")).unwrap();
    assert!(transfers.starts_with("id,src,dst,bytes,start_ns,end_ns\n"));
    let mut last_end = 0.0f64;
    let mut hop_bytes = 0u64;
    for line in transfers.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (src, dst, bytes): (i64, i64, u64) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        let d = (dst - src).rem_euclid(6);
        hop_bytes += bytes * d.min(6 - d) as u64;
        last_end = last_end.max(f[5].parse().unwrap());
    }
    assert_eq!(last_end, time);
    let links = std::fs::read_to_string(a.join("links.csv")).unwrap();
    assert!(links.starts_with("src,dst,bytes,busy_ns,utilization,max_queue,queued_ns\n"));
    let mut link_bytes = 0u64;
    for line in links.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        link_bytes += f[2].parse::<u64>().unwrap();
        let busy: f64 = f[3].parse().unwrap();
        let util: f64 = f[4].parse().unwrap();
        assert!(busy <= time && (0.0..=1.0).contains(&util), "{line}");
    }
    assert_eq!(link_bytes, hop_bytes);
}

/// Bad input: exit status 2, exactly one `error:` line mentioning `needle`, no panic, and no
/// summary.csv in the results folder.
fn assert_bad_input(args: &[&str], needle: &str) {
    let dir = scratch(&format!(
        "bad-{}",
        needle.replace(|c: char| !c.is_alphanumeric(), "")
    ));
    let out_dir = dir.join("results");
    let mut all: Vec<&str> = args.to_vec();
    let out_str = out_dir.to_str().unwrap().to_string();
    if args[0] == "simulate" {
        all.extend_from_slice(&["--out", &out_str]);
    }
    let out = collsim(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
    assert!(
        errors[0].contains(needle),
        "{args:?}: expected '{needle}' in {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
    assert!(
        !out_dir.join("summary.csv").exists(),
        "{args:?} left a summary.csv behind"
    );
    assert!(out.stdout.is_empty(), "{args:?} printed a summary");
}

/// A file holding `contents`, kept (with its scratch folder) while the value lives; reads as
/// its path.
struct InputFile {
    path: String,
    _dir: common::Scratch,
}

impl std::ops::Deref for InputFile {
    type Target = str;

    fn deref(&self) -> &str {
        &self.path
    }
}

fn file_with(name: &str, contents: &str) -> InputFile {
    let dir = scratch(&format!("input-{}", name.replace('.', "-")));
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    InputFile {
        path: path.to_str().unwrap().to_string(),
        _dir: dir,
    }
}

#[test]
fn unknown_names_are_errors() {
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "blob:8",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "blob:8",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:8",
            "--collective",
            "all-scatter",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "all-scatter",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:8",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "magic",
        ],
        "magic",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:8",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
            "--time-model",
            "fast",
        ],
        "fast",
    );
}

#[test]
fn malformed_files_are_errors_naming_file_and_field() {
    let csv = file_with("bad.csv", "id,src,dst,bytes,deps\n0,0,1,12x,\n");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &csv],
        "bytes",
    );
    let csv = file_with("cols.csv", "id,source,dst,bytes,deps\n0,0,1,12,\n");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &csv],
        "source",
    );
    let json = file_with("bad.json", "{\"transfers\": [{\"id\": 0, \"src\": 0}]}");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &json],
        "bad.json",
    );
    let yaml = file_with("net.yml", "topology: [Ring\nnpus_count: [4]\n");
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &yaml,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "net.yml",
    );
    let missing = "/nonexistent/schedule.csv";
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", missing],
        missing,
    );
}

#[test]
fn contradictory_files_are_errors() {
    let yaml = file_with(
        "astra.yml",
        "topology: [Ring, Switch]\nnpus_count: [4]\nbandwidth: [50, 50]\nlatency: [500, 500]\n",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &yaml,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "npus_count",
    );
    let dup = file_with("dup.csv", "id,src,dst,bytes,deps\n0,0,1,8,\n0,1,2,8,\n");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &dup],
        "appears twice",
    );
    let graph = file_with(
        "units.yml",
        "npus: 2\nlinks:\n  - {src: 0, dst: 1, bandwidth: 50, latency: 1us}\n",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &graph,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "links[0].bandwidth",
    );
}

#[test]
fn disconnected_and_empty_topologies_are_errors() {
    let graph = file_with("split.yml", "npus: 4\nlinks:\n  - {src: 0, dst: 1, bandwidth: 50GB/s, latency: 1us}\n  - {src: 2, dst: 3, bandwidth: 50GB/s, latency: 1us}\n");
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &graph,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "disconnected",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "mesh:4x4",
            "--remove-links",
            "0-1,0-4",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "disconnected",
    );
    let empty = file_with("empty.yml", "npus: 0\nlinks: []\n");
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &empty,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "no NPUs",
    );
}

#[test]
fn zero_or_negative_bandwidth_is_an_error() {
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:4",
            "--bandwidth",
            "0GB/s",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "--bandwidth",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:4",
            "--bandwidth",
            "-5GB/s",
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "--bandwidth",
    );
    let yaml = file_with(
        "zero.yml",
        "topology: [Ring]\nnpus_count: [4]\nbandwidth: [0]\nlatency: [500]\n",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            &yaml,
            "--collective",
            "all-to-all",
            "--size",
            "1MiB",
            "--algorithm",
            "direct",
        ],
        "bandwidth[0]",
    );
}

#[test]
fn sizes_that_cannot_be_split_are_errors() {
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:8",
            "--collective",
            "all-to-all",
            "--size",
            "7",
            "--algorithm",
            "direct",
        ],
        "cannot be split",
    );
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:8",
            "--collective",
            "all-to-all",
            "--size",
            "1.5",
            "--algorithm",
            "direct",
        ],
        "--size",
    );
}

#[test]
fn schedule_structure_errors_name_the_transfer() {
    let cyc = file_with(
        "cycle.csv",
        "id,src,dst,bytes,deps\n10,0,1,8,12\n11,1,2,8,10\n12,2,3,8,11\n",
    );
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &cyc],
        "cycle",
    );
    let unknown = file_with(
        "unknown.csv",
        "id,src,dst,bytes,deps\n0,0,1,8,\n1,1,2,8,7\n",
    );
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &unknown],
        "unknown transfer id 7",
    );
    let selfsend = file_with("self.csv", "id,src,dst,bytes,deps\n0,0,1,8,\n5,2,2,8,\n");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &selfsend],
        "transfer 5",
    );
    let range = file_with("range.csv", "id,src,dst,bytes,deps\n0,0,9,8,\n");
    assert_bad_input(
        &["simulate", "--topology", "ring:4", "--schedule", &range],
        "dst 9",
    );
    let failed = file_with("failed.csv", "id,src,dst,bytes,deps\n0,0,1,8,\n");
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "ring:4",
            "--remove-npus",
            "1",
            "--schedule",
            &failed,
        ],
        "failed NPU",
    );
}

#[test]
fn a_schedule_file_claiming_a_collective_is_validated() {
    // All-gather on 3 NPUs, 3 bytes: piece p starts at NPU p. NPU 2 never receives piece 0.
    let rows =
        "id,src,dst,bytes,deps,chunk,op\n0,0,1,1,,0,copy\n1,1,0,1,,1,copy\n2,2,0,1,,2,copy\n\
                3,2,1,1,,2,copy\n4,1,2,1,,1,copy\n";
    let file = file_with("ag3.csv", rows);
    assert_bad_input(
        &[
            "simulate",
            "--topology",
            "fc:3",
            "--schedule",
            &file,
            "--collective",
            "all-gather",
            "--size",
            "3",
        ],
        "NPU 2 never receives piece 0",
    );
    let complete = file_with("ag3ok.csv", &format!("{rows}5,0,2,1,,0,copy\n"));
    let ok = collsim(&[
        "simulate",
        "--topology",
        "fc:3",
        "--schedule",
        &complete,
        "--collective",
        "all-gather",
        "--size",
        "3",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn no_transfers_leaves_the_per_transfer_table_out() {
    let dir = scratch("no-transfers");
    let out = dir.join("r");
    let run = collsim(&[
        "simulate",
        "-t",
        "ring:8",
        "-c",
        "all-gather",
        "--size",
        "1MB",
        "-a",
        "ring",
        "--no-transfers",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.join("summary.csv").exists() && out.join("links.csv").exists());
    assert!(!out.join("transfers.csv").exists());
}

/// In a log (stderr captured, no terminal) a command that runs long says it is alive, counting
/// its work: the exact cut bound of a 1024-NPU mesh, with the lines paced at 10 ms (by default the
/// first comes at 2 s, which a test run may not reach).
#[test]
fn a_long_bound_writes_progress_lines_to_a_log() {
    let out = common::collsim_paced(
        &[
            "bound",
            "-t",
            "mesh:32x32",
            "-c",
            "all-gather",
            "-s",
            "1GiB",
        ],
        "0.01",
    );
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(String::from_utf8_lossy(&out.stdout).contains("cut bound"));
    assert!(
        log.lines()
            .any(|l| l.starts_with("progress: cut bound: ") && l.contains(" max-flows (")),
        "{log}"
    );
}

/// A progress pace that is no positive number of seconds is refused before any work, naming
/// the variable.
#[test]
fn a_bad_progress_pace_is_refused_by_name() {
    let out = common::collsim_paced(&["bound", "-t", "ring:4", "-c", "all-gather"], "soon");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: COLLSIM_PROGRESS_SECONDS: ") && err.lines().count() == 1,
        "{err}"
    );
}

/// `transfers.parquet` holds the rows of `transfers.csv`, typed: the same ids, endpoints, bytes
/// and times (to the picosecond the CSV prints).
#[test]
fn the_parquet_transfer_table_matches_the_csv() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let dir = scratch("parquet");
    let run = |format: &str| {
        let out = dir.join(format);
        let o = collsim(&[
            "simulate",
            "--topology",
            "mesh:3x3",
            "--collective",
            "all-reduce",
            "--size",
            "1MB",
            "--chunks",
            "2",
            "--algorithm",
            "ring",
            "--out",
            out.to_str().unwrap(),
            "--table-format",
            format,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let csv = std::fs::read_to_string(run("csv").join("transfers.csv")).unwrap();
    let file = std::fs::File::open(run("parquet").join("transfers.parquet")).unwrap();
    let reader = SerializedFileReader::new(file).unwrap();
    let mut rows = 0;
    for (line, row) in csv.lines().skip(1).zip(reader.get_row_iter(None).unwrap()) {
        let row = row.unwrap();
        let cells: Vec<&str> = line.split(',').collect();
        let fields: Vec<String> = row
            .get_column_iter()
            .map(|(_, f)| match f {
                Field::ULong(v) => v.to_string(),
                Field::UInt(v) => v.to_string(),
                Field::Double(v) => format!("{v}"),
                other => panic!("unexpected field {other:?}"),
            })
            .collect();
        assert_eq!(&fields[..4], &cells[..4], "{line}");
        for k in 4..6 {
            let (a, b): (f64, f64) = (fields[k].parse().unwrap(), cells[k].parse().unwrap());
            assert!((a - b).abs() < 1e-3, "{line}: {a} against {b}");
        }
        rows += 1;
    }
    assert_eq!(rows, csv.lines().count() - 1);
    assert_eq!(reader.metadata().file_metadata().num_rows() as usize, rows);
}

/// `collsim synthesize` of a 9 MB all-gather on `topology` into the results folder `out`, with
/// `extra` arguments; it must succeed.
fn synthesize_all_gather(topology: &str, out: &std::path::Path, extra: &[&str]) {
    let mut args = vec![
        "synthesize",
        "--topology",
        topology,
        "--collective",
        "all-gather",
        "--size",
        "9MB",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = collsim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A synthesized schedule written as `schedule.parquet` simulates again to the same time: on a
/// mesh (written as the synthesizer makes it) and behind a switch (several unwindings tried, each
/// streamed, one kept).
#[test]
fn a_parquet_schedule_simulates_again_to_the_same_time() {
    let dir = scratch("parquet-schedule");
    for topology in ["mesh:3x3", "switch:6"] {
        let out = dir.join(topology.replace(':', "-"));
        synthesize_all_gather(topology, &out, &["--table-format", "parquet"]);
        assert!(!out.join("schedule.json").exists());
        let synthesized = first_row(&std::fs::read_to_string(out.join("summary.csv")).unwrap());
        let again = summary(&[
            "--topology",
            topology,
            "--schedule",
            out.join("schedule.parquet").to_str().unwrap(),
        ]);
        assert_eq!(
            again["collective_time_ns"], synthesized["collective_time_ns"],
            "{topology}"
        );
        assert_eq!(again["collective"], "all-gather");
        assert_eq!(again["transfers"], synthesized["transfers"], "{topology}");
    }
}

/// A synthesized schedule too small for Parquet is written as JSON, and the folder holds nothing
/// of the Parquet file the synthesizer's stream would have written: every file on disk is in
/// the manifest and every manifest line is on disk.
#[test]
fn a_small_synthesized_schedule_leaves_only_its_json() {
    let dir = scratch("small-synthesized");
    let out = dir.join("run");
    synthesize_all_gather("mesh:3x3", &out, &[]);
    assert!(out.join("schedule.json").exists());
    let mut on_disk: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".collsim-manifest")
        .collect();
    on_disk.sort();
    let manifest = std::fs::read_to_string(out.join(".collsim-manifest")).unwrap();
    let mut listed: Vec<String> = manifest.lines().map(str::to_string).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
    assert!(
        !listed.iter().any(|name| name.contains("parquet")),
        "{listed:?}"
    );
}

/// A time below collsim's resolution is refused rather than printed as 0.000 ns with no
/// efficiency: a latency that rounds to 0 ps, and a run that takes less than one.
#[test]
fn times_below_a_picosecond_are_refused() {
    let run = |latency: &str| {
        collsim(&[
            "simulate",
            "--topology",
            "ring:8",
            "--latency",
            latency,
            "--bandwidth",
            "1e18B/s",
            "--collective",
            "all-reduce",
            "--size",
            "8B",
            "--algorithm",
            "ring",
        ])
    };
    for (latency, words) in [("0.4ps", "--latency"), ("0ps", "less than a picosecond")] {
        let out = run(latency);
        assert_eq!(out.status.code(), Some(2), "{latency}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:") && err.contains(words), "{err}");
    }
    assert!(run("1ps").status.success());
}

/// Messages that name what the user wrote: two tenants count 32 NPUs, `--root=-1` keeps its
/// value, 16 EiB is read and refused as too large, a YAML number without unit is shown as
/// written.
#[test]
fn messages_name_what_was_written() {
    let tenants = summary(&[
        "--topology",
        "ring:32",
        "--collective",
        "all-reduce,all-reduce",
        "--size",
        "1MB,1MB",
        "--npus",
        "0-15;16-31",
        "--algorithm",
        "ring",
    ]);
    assert_eq!(tenants["npus"], "32");
    let err = |args: &[&str]| {
        let out = collsim(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let base = ["simulate", "--topology", "ring:8", "--algorithm", "ring"];
    let root = err(&[
        &base[..],
        &["--collective", "broadcast", "--size", "1MB", "--root=-1"],
    ]
    .concat());
    assert!(root.contains("'-1'"), "{root}");
    let huge = err(&[
        &base[..],
        &["--collective", "all-reduce", "--size", "16EiB"],
    ]
    .concat());
    assert!(huge.contains("too large"), "{huge}");
    let dir = scratch("yaml-number");
    let file = dir.join("t.yml");
    std::fs::write(
        &file,
        "npus: 2\nswitches: 0\nlinks:\n  - {src: 0, dst: 1, bandwidth: 50, latency: 1us}\n",
    )
    .unwrap();
    let number = err(&[
        "simulate",
        "--topology",
        file.to_str().unwrap(),
        "--collective",
        "all-gather",
        "--size",
        "1MB",
        "--algorithm",
        "ring",
    ]);
    assert!(
        number.contains(": 50 needs a unit") && !number.contains("Number("),
        "{number}"
    );
}
