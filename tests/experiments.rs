//! Whole-command behaviour of the insight commands: `bound`, the figures of `simulate --out`,
//! `sweep`, `run` with experiment files, sharding and `merge`.

mod common;

use common::{collsim, collsim_paced, first_row, Table};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn ok(args: &[&str]) -> String {
    let out = collsim(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn scratch(name: &str) -> common::Scratch {
    common::scratch("collsim-exp", name)
}

fn is_png(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 1000)
}

fn is_svg(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.contains("<svg") && t.contains("</svg>"))
}

/// Rows of a CSV file as header -> value maps.
fn csv_rows(path: &Path) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    reader
        .records()
        .map(|r| {
            header
                .iter()
                .cloned()
                .zip(r.unwrap().iter().map(String::from))
                .collect()
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `collsim bound --format csv` prints ForestColl's optimum for the cases.
#[test]
fn bound_prints_the_forestcoll_optima() {
    let row = |args: &[&str]| -> HashMap<String, String> {
        let mut all = vec!["bound", "--format", "csv", "--collective", "all-gather"];
        all.extend_from_slice(args);
        let text = ok(&all);
        let table = Table::parse(&text);
        assert_eq!(
            table.header,
            [
                "collective",
                "size_bytes",
                "npu_bound_ns",
                "cut_bound_ns",
                "latency_bound_ns",
                "bound_ns"
            ]
        );
        first_row(&text)
    };
    let cut = |args: &[&str]| row(args)["cut_bound_ns"].parse::<f64>().unwrap();
    let unit = ["--bandwidth", "1GB/s", "--latency", "0ns", "--size", "1GB"];
    fn with<'a>(t: &'a str, unit: &[&'a str]) -> Vec<&'a str> {
        [&["--topology", t][..], unit].concat()
    }
    assert_eq!(cut(&with("ring:8", &unit)), 1e9 * 7.0 / 16.0);
    assert_eq!(cut(&with("uring:8", &unit)), 1e9 * 7.0 / 8.0);
    assert_eq!(cut(&with("torus:4x4", &unit)), 1e9 * 15.0 / 64.0);
    let boxes = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/two_nvswitch_boxes.yml"
    );
    let r = row(&["--topology", boxes, "--size", "1GB"]);
    assert_eq!(r["cut_bound_ns"], "1875000");
    // The latency bound is the diameter: 2 us up to the network switch and 2 us down.
    assert_eq!(r["latency_bound_ns"], "4000");
    // bound = max(max(npu, cut) + the shortest link latency, latency bound).
    assert_eq!(r["bound_ns"], "1875700");
}

/// The figures of `simulate --out` are real images, and the utilisation series agree with
/// links.csv: mean busy fraction over bins = total busy time / (links x collective time).
#[test]
fn simulate_out_draws_heat_map_and_utilisation_that_agree_with_the_csvs() {
    let dir = scratch("figures");
    let out = dir.join("run");
    ok(&[
        "simulate",
        "--topology",
        "dims:ring4,switch4",
        "--collective",
        "all-reduce",
        "--size",
        "64MiB",
        "--algorithm",
        "hierarchical",
        "--out",
        out.to_str().unwrap(),
    ]);
    for png in ["heatmap.png", "utilization.png"] {
        assert!(is_png(&out.join(png)), "{png}");
    }
    for svg in ["heatmap.svg", "utilization.svg"] {
        assert!(is_svg(&out.join(svg)), "{svg}");
    }
    let time: f64 = csv_rows(&out.join("summary.csv"))[0]["collective_time_ns"]
        .parse()
        .unwrap();
    let links = csv_rows(&out.join("links.csv"));
    let busy: f64 = links
        .iter()
        .map(|l| l["busy_ns"].parse::<f64>().unwrap())
        .sum();
    let bins = csv_rows(&out.join("utilization.csv"));
    assert_eq!(bins.len(), 200);
    let mean: f64 = bins
        .iter()
        .map(|b| b["all"].parse::<f64>().unwrap())
        .sum::<f64>()
        / bins.len() as f64;
    let expected = busy / (links.len() as f64 * time);
    assert!((mean - expected).abs() < 1e-4, "{mean} vs {expected}");
    for b in &bins {
        for key in ["all", "dim1", "dim2"] {
            let v: f64 = b[key].parse().unwrap();
            assert!((0.0..=1.0 + 1e-9).contains(&v), "{key} = {v}");
        }
    }
}

/// A sweep writes one row per (size, algorithm, chunks), the log-x plot, and uses the bound.
#[test]
fn sweep_writes_a_row_per_combination_and_its_plot() {
    let dir = scratch("sweep");
    let out = dir.join("sweep");
    let stdout = ok(&[
        "sweep",
        "--topology",
        "ring:8",
        "--collective",
        "all-reduce",
        "--sizes",
        "1KiB..1MiB:x4",
        "--algorithms",
        "ring,direct,rhd",
        "--chunks",
        "1,2",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let rows = csv_rows(&out.join("summary.csv"));
    assert_eq!(rows.len(), 6 * 3 * 2);
    assert_eq!(stdout.lines().count(), rows.len() + 1);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["run"], i.to_string());
        let eff: f64 = r["efficiency"].parse().unwrap();
        assert!(eff > 0.0 && eff <= 1.0 + 1e-9, "{r:?}");
    }
    assert!(is_png(&out.join("sweep.png")) && is_svg(&out.join("sweep.svg")));
}

/// An experiment's routing applies to all its runs, ECMP hashed by each run's seed: on a
/// leaf/spine, halving-doubling over ECMP differs between seeds and reproduces with its seed,
/// and planned paths match or beat every seed.
#[test]
fn experiments_route_by_their_routing_and_seeds() {
    let dir = scratch("routing");
    let run = |routing: &str, seeds: &str| -> Vec<f64> {
        let path = write(
            &dir,
            &format!("{routing}.yaml"),
            &format!(
                "topologies: [spineleaf:8x4x4]\ncollectives: [all-reduce]\nsizes: [64MiB]\n\
                 algorithms: [rhd]\nseeds: [{seeds}]\nrouting: {routing}\n"
            ),
        );
        let out = dir.join(format!("out-{routing}"));
        ok(&["run", &path, "--out", out.to_str().unwrap(), "--force"]);
        csv_rows(&out.join("summary.csv"))
            .iter()
            .map(|r| r["collective_time_ns"].parse().unwrap())
            .collect()
    };
    let hashed = run("ecmp", "1, 2, 3, 1");
    assert_eq!(hashed[0], hashed[3]);
    assert!(hashed[..3].iter().any(|&t| t != hashed[0]), "{hashed:?}");
    let pinned = run("pinned", "1");
    assert!(
        hashed.iter().all(|&t| t >= pinned[0]),
        "{pinned:?} {hashed:?}"
    );
}

/// Experiment files: a shard of the runs plus the other shards merge into exactly the whole
/// run's results; a missing shard is an error naming the runs.
#[test]
fn shards_merge_into_the_whole_experiment() {
    let dir = scratch("shards");
    let exp = write(
        &dir,
        "exp.yaml",
        "name: shard-test\ntopologies: [ring:6, 'dims:ring3,switch2']\ncollectives: [all-gather, all-reduce]\n\
         sizes: [6MiB, 60MiB]\nalgorithms: [ring, direct, dbt]\nheatmaps: true\n",
    );
    let whole = dir.join("whole");
    let run = |extra: &[&str], out: &Path| {
        let mut args = vec!["run", exp.as_str(), "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = collsim(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let o = run(&[], &whole);
    // DBT has no all-gather form: those runs are skipped, said on stderr and in skipped.csv.
    assert!(String::from_utf8_lossy(&o.stderr).contains("skipped run"));
    let skipped = csv_rows(&whole.join("skipped.csv"));
    assert_eq!(skipped.len(), 2 * 2);
    assert!(skipped.iter().all(|s| s["algorithm"] == "dbt"));
    let shards: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("s{i}"))).collect();
    for (i, s) in shards.iter().enumerate() {
        run(&["--shard", &format!("{i}/3")], s);
        assert!(!s.join("bars_all_gather_6mib.png").exists());
    }
    let merged = dir.join("merged");
    let mut args = vec!["merge", "--out", merged.to_str().unwrap()];
    args.extend(shards.iter().map(|s| s.to_str().unwrap()));
    ok(&args);
    for file in ["summary.csv", "skipped.csv", "heatmaps.csv"] {
        assert_eq!(
            std::fs::read_to_string(whole.join(file)).unwrap(),
            std::fs::read_to_string(merged.join(file)).unwrap(),
            "{file}"
        );
    }
    for figure in [
        "bars_all_gather_6mib.png",
        "bars_all_reduce_60mib.svg",
        "heatmaps.png",
        "heatmaps/ring_6_all_reduce_60mib_ring.png",
    ] {
        assert!(merged.join(figure).exists(), "{figure}");
        assert!(whole.join(figure).exists(), "{figure}");
    }
    let incomplete = collsim(&[
        "merge",
        "--out",
        dir.join("bad").to_str().unwrap(),
        shards[0].to_str().unwrap(),
        shards[2].to_str().unwrap(),
    ]);
    assert_eq!(incomplete.status.code(), Some(2));
    let err = String::from_utf8_lossy(&incomplete.stderr);
    assert!(
        err.contains("runs are missing") && err.contains("runs 1"),
        "{err}"
    );
    assert!(!dir.join("bad").join("summary.csv").exists());
}

/// TACOS Fig. 1, the committed experiment: on every network the synthesized all-reduce has the
/// coolest busiest link (within 2%) and the most even load (within 0.02 of the coefficient of
/// variation of the link loads).
#[test]
fn the_topology_aware_schedule_has_the_coolest_most_even_heat_map() {
    let dir = scratch("fig1");
    let exp = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/experiments/tacos_fig1_heatmaps.yaml"
    );
    let out = dir.join("out");
    ok(&["run", exp, "--out", out.to_str().unwrap()]);
    let stats = csv_rows(&out.join("heatmaps.csv"));
    assert_eq!(stats.len(), 16);
    for topology in ["FullyConnected", "Ring", "2D Mesh", "3D Hypercube"] {
        let of = |alg: &str, key: &str| -> f64 {
            stats
                .iter()
                .find(|s| s["topology"] == topology && s["algorithm"] == alg)
                .unwrap()[key]
                .parse()
                .unwrap()
        };
        for other in ["direct", "rhd", "ring"] {
            let (t, o) = (of("tacos", "max_link_bytes"), of(other, "max_link_bytes"));
            assert!(t <= o * 1.02, "{topology}: tacos {t} vs {other} {o}");
            let (t, o) = (of("tacos", "link_load_cv"), of(other, "link_load_cv"));
            assert!(t <= o + 0.02, "{topology}: tacos cv {t} vs {other} {o}");
        }
    }
    assert!(is_png(&out.join("heatmaps.png")));
}

#[test]
fn bad_experiment_files_are_errors_naming_file_and_field() {
    let dir = scratch("bad-exp");
    for (name, text, needle) in [
        (
            "unknown.yaml",
            "topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: [1KB]\nalgorithms: [ring]\nsize: 3\n",
            "size",
        ),
        (
            "algo.yaml",
            "topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: [1KB]\nalgorithms: [magic]\n",
            "algorithms",
        ),
        (
            "topo.yaml",
            "topologies: ['ring:0']\ncollectives: [all-reduce]\nsizes: [1KB]\nalgorithms: [ring]\n",
            "topologies[0]",
        ),
        (
            "routing.yaml",
            "topologies: [ring:4]\ncollectives: [all-reduce]\nsizes: [1KB]\nalgorithms: [ring]\nrouting: hashed\n",
            "routing",
        ),
    ] {
        let path = write(&dir, name, text);
        let out_dir = dir.join(format!("out-{name}"));
        let o = collsim(&["run", &path, "--out", out_dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(needle), "{name}: {stderr}");
        assert!(!out_dir.join("summary.csv").exists());
    }
    let o = collsim(&["run", "/nonexistent/exp.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/exp.yaml"));
}

/// In a log (no terminal) a sweep says it is alive before its one run ends, with its count: the
/// exact cut bound of a 576-NPU mesh, then its ring, with the lines paced at 10 ms (by default
/// the first comes at 2 s, which a test run may not reach).
#[test]
fn a_long_sweep_writes_progress_lines_while_its_runs_are_in_flight() {
    let out = collsim_paced(
        &[
            "sweep",
            "-t",
            "mesh:24x24",
            "-c",
            "all-gather",
            "--sizes",
            "1GiB",
            "--algorithms",
            "ring",
        ],
        "0.01",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("progress: sweep of all-gather on mesh:24x24: 0/1 runs (0%), "),
        "{log}"
    );
}

/// A Slurm array larger than the experiment: the extra tasks succeed with an empty shard, and
/// the shards merge; a folder that is no shard is named as such, in words.
#[test]
fn empty_shards_succeed_and_merge() {
    let dir = scratch("empty-shards");
    let exp = write(
        &dir,
        "tiny.yaml",
        "name: tiny\nbandwidth: 50GB/s\nlatency: 500ns\ntopologies:\n  - {spec: \"ring:8\", name: Ring 8}\n\
         collectives: [all-reduce]\nsizes: \"1MB\"\nalgorithms: [ring, direct]\nseeds: [1]\n",
    );
    let shards: Vec<String> = (0..3)
        .map(|i| {
            let out = dir.join(format!("s{i}"));
            ok(&[
                "run",
                &exp,
                "--shard",
                &format!("{i}/3"),
                "--out",
                out.to_str().unwrap(),
            ]);
            out.to_str().unwrap().to_string()
        })
        .collect();
    let merged = dir.join("m");
    ok(&[
        "merge",
        &shards[0],
        &shards[1],
        &shards[2],
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(csv_rows(&merged.join("summary.csv")).len(), 2);
    let out = collsim(&[
        "merge",
        &shards[0],
        dir.join("nope").to_str().unwrap(),
        "--out",
        dir.join("m2").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no such file") && !err.contains("os error"),
        "{err}"
    );
}

/// The heat-map grid says in a cell why its run did not apply (DBT has no all-gather form)
/// instead of leaving it blank, and the maps name switches by what they are.
#[test]
fn heat_map_grids_label_what_did_not_run() {
    let dir = scratch("grid-blanks");
    let exp = write(
        &dir,
        "exp.yaml",
        "name: blanks\ntopologies: [ring:6, 'dims:ring3,switch2']\ncollectives: [all-gather]\n\
         sizes: [6MiB]\nalgorithms: [ring, dbt]\nheatmaps: true\n",
    );
    let out = dir.join("out");
    ok(&["run", exp.as_str(), "--out", out.to_str().unwrap()]);
    let skipped = csv_rows(&out.join("skipped.csv"));
    assert_eq!(skipped.len(), 2);
    let reason = skipped[0]["reason"].clone();
    let grid = std::fs::read_to_string(out.join("heatmaps.svg")).unwrap();
    assert_eq!(grid.matches("does not apply:").count(), 2, "{grid}");
    let first_words: String = reason
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        grid.contains(&first_words),
        "'{first_words}' not in the grid"
    );
    let map = std::fs::read_dir(out.join("heatmaps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("dims") && p.extension().is_some_and(|e| e == "svg"))
        .expect("a heat map of the switched network");
    assert!(std::fs::read_to_string(map).unwrap().contains("switch0"));
}

/// `utilization: true` draws each network's runs together over time (TACOS Fig. 18) and lists
/// each run's mean busy fraction, which is the run's link utilisation in summary.csv.
#[test]
fn utilization_figures_follow_the_runs() {
    let dir = scratch("utilization");
    let exp = write(
        &dir,
        "exp.yaml",
        "name: busy\ntopologies: [torus:3x3, mesh:3x3]\ncollectives: [all-reduce]\n\
         sizes: [9MiB]\nalgorithms: [ring, tacos]\nutilization: true\n",
    );
    let out = dir.join("out");
    ok(&["run", exp.as_str(), "--out", out.to_str().unwrap()]);
    let summary = csv_rows(&out.join("summary.csv"));
    let busy = csv_rows(&out.join("utilization.csv"));
    assert_eq!(busy.len(), 4);
    for row in &busy {
        let run = summary.iter().find(|s| s["run"] == row["run"]).unwrap();
        let (mean, whole): (f64, f64) = (
            row["mean_busy_fraction"].parse().unwrap(),
            run["link_utilization"].parse().unwrap(),
        );
        assert!(
            (mean - whole).abs() < 1e-4,
            "run {}: {mean} against {whole}",
            row["run"]
        );
    }
    for network in ["torus_3x3", "mesh_3x3"] {
        let stem = format!("utilization_{network}_all_reduce_9mib");
        assert!(out.join(format!("{stem}.png")).exists(), "{stem}");
        let svg = std::fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("time / the fastest run") && svg.contains("tacos (mean"));
    }
}
