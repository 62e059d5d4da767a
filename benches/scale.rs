//! The simulator-core performance targets, measured on whole `collsim simulate` commands:
//! direct all-to-all on `switch:N` (1 MiB per pair, 50 GiB/s, 500 ns) and the jittered N=1024
//! all-to-all read from a CSV schedule in the astra model, then a ring all-reduce on `ring:1024`
//! (4 chunks) and Themis on the 3D networks of `configs/themis` (16 chunks), the engine on
//! dependency-driven schedules. Prints the median wall time of several runs, the peak RSS (GNU
//! time) and the engine's events per second and nanoseconds per hop in the run of median engine
//! time. Run: `cargo bench --bench scale [-- N...]`, e.g.
//! `cargo bench --bench scale -- 2048 4096 8192`.
//!
//! `cargo bench --bench scale -- synth [64x64]` measures the synthesizer's targets instead: whole
//! `collsim synthesize` all-gathers of 1 GiB at 50 GiB/s, 0.5 us (synthesis, validation,
//! simulation), against the TACOS C++ reference times in `tests/data/tacos/`.

use std::io::Write;
use std::path::Path;
use std::process::Command;

const RUNS: usize = 5;

/// What `RUNS` runs of one command measured.
struct Measured {
    /// Median wall time, seconds.
    secs: f64,
    /// Peak RSS over the runs, MiB.
    mib: f64,
    /// The last line of the last run's output (a CSV row with `--format csv`).
    last: String,
    /// The engine line (events, hops, seconds, events/s) of the run with the median engine time.
    engine: String,
}

/// Runs the command `RUNS` times under GNU time.
fn measure(args: &[String]) -> Measured {
    let mut times = Vec::new();
    let mut engines = Vec::new();
    let mut peak = 0.0f64;
    let mut last = String::new();
    for _ in 0..RUNS {
        let out = Command::new("/usr/bin/time")
            .args(["-f", "%e %M"])
            .arg(env!("CARGO_BIN_EXE_collsim"))
            .args(args)
            .output()
            .expect("GNU time (/usr/bin/time) and the collsim binary");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().last().unwrap();
        let mut f = line.split_whitespace();
        times.push(f.next().unwrap().parse::<f64>().unwrap());
        peak = peak.max(f.next().unwrap().parse::<f64>().unwrap() / 1024.0);
        let stdout = String::from_utf8_lossy(&out.stdout);
        last = stdout.lines().last().unwrap_or("").to_string();
        if let Some(engine) = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("engine"))
        {
            let engine = engine
                .trim()
                .trim_start_matches("engine")
                .trim()
                .to_string();
            engines.push((engine_seconds(&engine), engine));
        }
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    engines.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    Measured {
        secs: times[RUNS / 2],
        mib: peak,
        last,
        engine: engines
            .get(engines.len() / 2)
            .map_or_else(String::new, |e| e.1.clone()),
    }
}

/// The seconds in an engine line ("50.3M events, 33.5M hops in 1.12 s: ...").
fn engine_seconds(line: &str) -> f64 {
    line.split(" in ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(f64::NAN)
}

fn write_jittered(path: &Path, n: u64) {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(w, "id,src,dst,bytes,deps").unwrap();
    let mut id = 0;
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let bytes = (1 << 20) + ((7919 * i + 104729 * j) % 65536);
            writeln!(w, "{id},{i},{j},{bytes},").unwrap();
            id += 1;
        }
    }
}

fn synth(extra: &[String]) {
    let mut cases = vec![
        ("mesh:32x32", 1, "83-98 s", "1 s"),
        ("torus:8x8x8", 1, "5.5 s", "0.3 s"),
        ("mesh:8x8x8", 1, "7.2 s", "0.4 s"),
        ("mesh:8x8", 64, "69 s", "2 s"),
    ];
    if extra.iter().any(|a| a == "64x64") {
        cases.push(("mesh:64x64", 1, "> 300 s", "10 s"));
    }
    println!("collsim synthesize, all-gather 1 GiB, median of {RUNS} runs, peak RSS over the runs");
    for (topology, chunks, reference, target) in cases {
        let args: Vec<String> = format!(
            "synthesize --topology {topology} --bandwidth 50GiB/s --latency 0.5us \
             --collective all-gather --size 1GiB --chunks {chunks} --format csv"
        )
        .split_whitespace()
        .map(String::from)
        .collect();
        let Measured {
            secs,
            mib,
            last: row,
            ..
        } = measure(&args);
        let time_ns = row.split(',').nth(6).unwrap_or("?");
        println!(
            "{topology} x{chunks} chunks: {secs:.2} s (target {target}, TACOS {reference}), \
             {mib:.0} MiB peak, collective {time_ns} ns"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "synth") {
        synth(&args);
        return;
    }
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![2048, 4096]
    } else {
        sizes
    };
    println!("whole command, median of {RUNS} runs, peak RSS over the runs");
    for n in sizes {
        let args: Vec<String> = format!(
            "simulate --topology switch:{n} --bandwidth 50GiB/s --latency 500ns --collective all-to-all \
             --algorithm direct --size {n}MiB --time-model astra"
        )
        .split_whitespace()
        .map(String::from)
        .collect();
        let Measured {
            secs, mib, engine, ..
        } = measure(&args);
        println!("switch:{n} all-to-all: {secs:.2} s, {mib:.0} MiB peak; median engine: {engine}");
    }
    let dir = std::env::temp_dir().join("collsim-bench-jitter");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a2a_jitter_1024.csv");
    if !file.exists() {
        write_jittered(&file, 1024);
    }
    let args: Vec<String> = [
        "simulate",
        "--topology",
        "switch:1024",
        "--bandwidth",
        "50GiB/s",
        "--latency",
        "500ns",
        "--time-model",
        "astra",
        "--format",
        "csv",
        "--schedule",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([file.to_string_lossy().into_owned()])
    .collect();
    let Measured {
        secs,
        mib,
        last: row,
        ..
    } = measure(&args);
    let time_ns = row.split(',').nth(6).unwrap_or("?");
    println!("switch:1024 jittered all-to-all from CSV (astra): {secs:.2} s, {mib:.0} MiB peak, collective {time_ns} ns");
    // The engine's speed on dependency-driven schedules: a ring all-reduce and Themis on the
    // three-dimensional networks of configs/themis.
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/themis");
    let mut engines = vec![(
        "ring all-reduce, ring:1024, 4 chunks".to_string(),
        "simulate --topology ring:1024 --collective all-reduce --algorithm ring --size 1GiB --chunks 4"
            .to_string(),
    )];
    for network in ["3d_fc_ring_sw", "3d_sw_sw_sw_homo", "3d_sw_sw_sw_hetero"] {
        engines.push((
            format!("Themis all-reduce, {network}, 16 chunks"),
            format!(
                "simulate --topology {} --collective all-reduce --algorithm themis --size 1GiB \
                 --chunks 16",
                configs.join(format!("{network}.yml")).display()
            ),
        ));
    }
    for (name, command) in engines {
        let args: Vec<String> = command.split_whitespace().map(String::from).collect();
        let Measured {
            secs, mib, engine, ..
        } = measure(&args);
        println!("{name}: {secs:.2} s, {mib:.0} MiB peak; median engine: {engine}");
    }
}
