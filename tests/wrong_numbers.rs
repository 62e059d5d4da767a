//! Never a wrong number: every input past what collsim can represent or hold ends with exit
//! status 2 and one `error:` line, before anything runs or is written (issue "never a wrong
//! number"); outputs are never half-written or written over without `--force`.

mod common;
use common::{collsim, Table};
use std::process::Command;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("collsim-wrong", name)
}

/// A command line's words (the fixed parts of the tests' commands hold no spaces).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `line`'s words followed by `paths` (which may hold anything).
fn with_paths<'a>(line: &'a str, paths: &[&'a str]) -> Vec<&'a str> {
    words(line)
        .into_iter()
        .chain(paths.iter().copied())
        .collect()
}

/// A refusal comes before anything runs: a command still going after this long ran instead.
const REFUSED_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `args` and asserts exit 2 within [`REFUSED_WITHIN`] with exactly one line on stderr, an
/// `error:` line holding every one of `words`; returns that line.
fn refused(args: &[&str], words: &[&str]) -> String {
    let out = refused_in_time(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
    assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
    for w in words {
        assert!(lines[0].contains(w), "{args:?}: '{w}' not in {stderr}");
    }
    assert!(out.stdout.is_empty(), "{args:?} printed a result");
    lines[0].to_string()
}

/// Runs `args`, killing the command if it has not ended within [`REFUSED_WITHIN`].
fn refused_in_time(args: &[&str]) -> std::process::Output {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("collsim runs");
    let started = std::time::Instant::now();
    while child
        .try_wait()
        .expect("collsim can be waited for")
        .is_none()
    {
        if started.elapsed() > REFUSED_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} was still running after {REFUSED_WITHIN:?} instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
        .wait_with_output()
        .expect("collsim's output can be read")
}

#[test]
fn sizes_bandwidths_and_latencies_past_their_range_are_refused() {
    let ring = "simulate -t ring:8 -c all-reduce -a ring";
    for (extra, expected) in [
        // The table's rows: each printed a plausible time with exit 0.
        ("--size 18446744073709551615", &["2^64 ps"][..]),
        ("--size 100GB --bandwidth 1B/s", &["2^64 ps"]),
        ("--size 1GB --latency 1e30s", &["too large", "--latency"]),
        ("--size 1GB --latency 1e7s", &["2^64 ps"]),
        // Each type's limits.
        ("--size 18446744073709551616", &["too large", "--size"]),
        ("--size 1GB --bandwidth 1e-300GB/s", &["too small"]),
        ("--size 1GB --bandwidth 1e400GB/s", &["too large"]),
        ("--size 1GB --latency 18446745s", &["too large"]),
    ] {
        refused(&words(&format!("{ring} {extra}")), expected);
    }
    refused(
        &words("bound -t ring:8 -c all-reduce --size 1TB --bandwidth 1B/s"),
        &["lower bound", "2^64 ps"],
    );
}

#[test]
fn counts_past_what_collsim_numbers_are_refused_with_the_real_product() {
    let ring = "simulate -t ring:8 -c all-reduce --size 1GB -a ring";
    refused(
        &words(&format!("{ring} --chunks 1000000000")),
        &["8000000000 pieces"],
    );
    refused(&words(&format!("{ring} --chunks -1")), &["too small"]);
    // Pieces of 0 bytes.
    refused(
        &words("simulate -t ring:8 -c all-gather --size 16 --chunks 4 -a ring"),
        &["32 pieces"],
    );
    refused(
        &words("simulate -t switch:99999999999 -c all-reduce --size 1GB -a ring"),
        &["too large"],
    );
    // Synthesis numbers its sends in 32 bits: a 256x256 mesh's all-gather makes 65536 x 65535
    // sends and is the largest that fits, 257x257 would wrap past it.
    refused(
        &words("synthesize -t mesh:257x257 -c all-gather --size 1GB"),
        &["4362404352 sends", "32 bits"],
    );
}

#[test]
fn runs_that_cannot_fit_in_memory_are_refused_before_they_start() {
    for (line, expected) in [
        (
            "simulate -t switch:100000 -c all-to-all -a direct --size 1TB",
            &["pieces"][..],
        ),
        (
            "simulate -t switch:65000 -c all-to-all -a direct --size 1TB",
            &["needs about", "available"],
        ),
        (
            "synthesize -t mesh:200x200 -c all-gather --size 1GB --routing pinned",
            &["1599960000 transfers", "needs about", "available"],
        ),
        (
            "simulate -t dragonfly:1000x1000 -c all-reduce --size 1GB -a ring",
            &["needs about"],
        ),
        (
            "simulate -t ring:4096 -c all-reduce --size 1TB -a ring --chunks 100000",
            &["needs about"],
        ),
        (
            "trees -t configs/hier_256.yml --trees 100000",
            &["--trees 100000", "at most 4096", "optimal rate needs 7"],
        ),
    ] {
        let started = std::time::Instant::now();
        refused(&words(line), expected);
        assert!(
            started.elapsed().as_secs() < 20,
            "{line} ran before refusing"
        );
    }
}

/// A 200 KB YAML file of nested brackets took half a minute to fail in the parser; it is
/// refused where the nesting passes the limit, at once.
#[test]
fn deeply_nested_yaml_is_refused_at_once() {
    let dir = scratch("nesting");
    let file = dir.join("deep.yml");
    std::fs::write(
        &file,
        format!("dims: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let topology = file.to_str().unwrap();
    refused(
        &[
            "simulate",
            "-t",
            topology,
            "-c",
            "all-reduce",
            "--size",
            "1MB",
            "-a",
            "ring",
        ],
        &[topology, "line 1 column 71", "nested deeper than 64"],
    );
    assert!(started.elapsed().as_secs() < 5);
}

#[test]
fn schedule_files_whose_bytes_pass_u64_are_refused() {
    let dir = scratch("bytes");
    let file = dir.join("big.csv");
    std::fs::write(
        &file,
        "id,src,dst,bytes,deps\n0,0,1,18446744073709551615,\n1,0,1,18446744073709551615,0\n",
    )
    .unwrap();
    refused(
        &with_paths(
            "simulate -t ring:8 --bandwidth 1000000TB/s --schedule",
            &[file.to_str().unwrap()],
        ),
        &["2^64"],
    );
    let empty = dir.join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    refused(
        &with_paths("simulate -t ring:8 --schedule", &[empty.to_str().unwrap()]),
        &["empty"],
    );
}

#[test]
fn outputs_are_checked_before_the_run_and_never_written_over() {
    let dir = scratch("out");
    let command = "simulate -t ring:4 -c all-gather --size 1MB -a ring --out";
    let run = |out: &str, force: bool| {
        let mut args = with_paths(command, &[out]);
        if force {
            args.push("--force");
        }
        collsim(&args)
    };
    let refused_out =
        |out: &str, expected: &[&str]| refused(&with_paths(command, &[out]), expected);
    // A file where the folder should be, and a folder that cannot be made.
    let file = dir.join("file");
    std::fs::write(&file, "keep").unwrap();
    let file_name = file.to_str().unwrap();
    refused_out(file_name, &["is a file", file_name]);
    refused_out(file.join("sub").to_str().unwrap(), &["file"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    // A used folder needs --force; --force keeps what collsim did not write.
    let results = dir.join("results");
    let r = results.to_str().unwrap();
    assert!(run(r, false).status.success());
    std::fs::write(results.join("mine.txt"), "mine").unwrap();
    let out = run(r, false);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert!(run(r, true).status.success());
    assert!(results.join("mine.txt").exists() && results.join("summary.csv").exists());
    let hidden: Vec<_> = std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".partial"))
        .collect();
    assert!(hidden.is_empty(), "partial files left: {hidden:?}");
    // merge never writes into one of its inputs.
    refused(&["merge", r, "--out", r, "--force"], &["one of the shards"]);
}

#[test]
fn experiment_entries_shown_under_one_name_are_an_error_naming_both() {
    let dir = scratch("names");
    let file = dir.join("exp.yaml");
    std::fs::write(
        &file,
        "topologies: [ring:8, {spec: 'ring:8', bandwidth: 10GB/s}]\ncollectives: [all-reduce]\n\
         sizes: [1MB]\nalgorithms: [ring]\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (file, out) = (file.to_str().unwrap(), out.to_str().unwrap());
    refused(
        &["run", file, "--out", out],
        &["topologies[0]", "topologies[1]", "ring:8"],
    );
}

#[test]
fn runs_are_byte_identical_across_thread_counts() {
    let dir = scratch("threads");
    let run = |threads: &str| {
        let out = dir.join(format!("t{threads}"));
        let status = Command::new(env!("CARGO_BIN_EXE_collsim"))
            .env("RAYON_NUM_THREADS", threads)
            .args(words(
                "synthesize -t mesh:4x4 -c all-gather --size 4MB --trials 4 --seed 7 --out",
            ))
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        ["summary.csv", "transfers.csv", "links.csv", "schedule.json"]
            .map(|f| std::fs::read(out.join(f)).unwrap())
    };
    // Everything but the synthesis wall time (summary.csv's synthesis_ms, DESIGN.md's column).
    let without_wall_time = |csv: &[u8]| -> Vec<Vec<String>> {
        let mut table = Table::parse(std::str::from_utf8(csv).unwrap());
        let col = table.at("synthesis_ms");
        std::iter::once(&mut table.header)
            .chain(&mut table.rows)
            .map(|row| {
                row.remove(col);
                row.clone()
            })
            .collect()
    };
    let (one, two) = (run("1"), run("2"));
    assert_eq!(without_wall_time(&one[0]), without_wall_time(&two[0]));
    for (a, b) in one.iter().zip(&two).skip(1) {
        assert!(a == b, "outputs differ between 1 and 2 threads");
    }
}

/// `bound` on a large mesh ran for hours saying only the time: its progress lines now count the
/// cut bound's max-flows (one per class of NPUs the mesh's symmetries leave, per phase), so the
/// first lines give the time left. The counted bounds are the bounds.
#[test]
fn the_cut_bound_counts_its_max_flows() {
    let t = collsim::topology::TopologyOptions::new("mesh:6x6")
        .build()
        .unwrap();
    let c = collsim::collective::Collective::new(
        collsim::collective::CollectiveKind::AllReduce,
        t.active_npus(),
        1 << 30,
        1,
        None,
    )
    .unwrap();
    let steps = collsim::report::Steps::default();
    let counted = collsim::bound::bounds_counted(&t, &c, None, Some(&steps));
    assert_eq!(counted.cut, collsim::bound::bounds(&t, &c, None).cut);
    // The square's eight symmetries leave 6 classes of the 36 NPUs; two phases.
    assert!(steps.done() >= 12, "{} max-flows", steps.done());
}
