//! Fuzzing every parser with random and mutated inputs: none may panic, and each either accepts
//! its input or refuses it with a one-line error. Mutations start from real files (the configs,
//! workloads, system files, and schedules collsim writes) so they reach deep into each parser.
//! The cases are bounded to keep `cargo test` short; `PROPTEST_CASES=20000 cargo test --release
//! --test fuzz_parsers` runs more, and `fuzz/` holds cargo-fuzz targets for open-ended runs.

mod common;

use std::path::{Path, PathBuf};

use collsim::algorithms::{generate, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::experiment::Experiment;
use collsim::schedule::{
    load_schedule_file, msccl_xml, parse_msccl, write_schedule_csv, write_schedule_json,
};
use collsim::topology::TopologyOptions;
use collsim::units::{parse_bandwidth, parse_bytes, parse_size_list, parse_time};
use collsim::Error;
use proptest::prelude::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// Text with a few mutations: a character deleted, a character or token inserted, a span
/// repeated. Tokens are the values parsers meet at their limits.
fn mutated(seed: String) -> impl Strategy<Value = String> {
    const TOKENS: [&str; 16] = [
        "-1",
        "0",
        "18446744073709551616",
        "1e400",
        "NaN",
        "-",
        ":",
        ",",
        "\n",
        "{",
        "]",
        "\"",
        "99999999999",
        "1e-300",
        "x",
        "..",
    ];
    let len = seed.len().max(1);
    prop::collection::vec((0..len, 0..4u8, 0..TOKENS.len(), any::<char>()), 1..6).prop_map(
        move |edits| {
            let mut text = seed.clone();
            for (at, kind, token, ch) in edits {
                let mut at = at.min(text.len());
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                match kind {
                    0 => {
                        if let Some(c) = text[at..].chars().next() {
                            text.replace_range(at..at + c.len_utf8(), "");
                        }
                    }
                    1 => text.insert_str(at, TOKENS[token]),
                    2 => text.insert(at, ch),
                    _ => {
                        let end = (at + 40).min(text.len());
                        let mut end = end;
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        let span = text[at..end].to_string();
                        text.insert_str(at, &span);
                    }
                }
            }
            text
        },
    )
}

/// The contract: Ok, or an error of one line.
fn one_line<T>(result: Result<T, Error>) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        let message = e.to_string();
        prop_assert!(!message.trim().is_empty(), "an empty error");
        prop_assert!(!message.contains('\n'), "a multi-line error: {message}");
    }
    Ok(())
}

fn scratch(name: &str) -> common::Scratch {
    common::scratch("collsim-fuzz", name)
}

/// Writes `text` to a file named `name` in the fuzz folder of this test and returns its path.
fn file_with(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn small_all_gather() -> (Collective, collsim::schedule::Schedule) {
    let t = TopologyOptions::new("ring:4").build().unwrap();
    let c = Collective::new(CollectiveKind::AllGather, t.active_npus(), 1 << 20, 2, None).unwrap();
    let s = generate(Algorithm::Ring, &t, &c).unwrap();
    (c, s)
}

/// 96 cases per parser in `cargo test`; PROPTEST_CASES sets more.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

/// A schedule collsim writes, as the text of `name` (.csv or .json).
fn schedule_text(name: &str) -> String {
    let (_, s) = small_all_gather();
    let dir = scratch("seed");
    let path = dir.join(name);
    if name.ends_with(".csv") {
        write_schedule_csv(&s, &path).unwrap();
    } else {
        write_schedule_json(&s, &path).unwrap();
    }
    std::fs::read_to_string(&path).unwrap()
}

fn msccl_text() -> String {
    let (c, s) = small_all_gather();
    msccl_xml(&s, &c, "fuzz").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn unit_parsers_never_panic(text in "\\PC{0,24}", number in "[-+0-9.eE]{1,24}(B|KB|GiB|s|ns|us|ps|GB/s|Gbps|)") {
        for t in [&text, &number] {
            let _ = parse_bytes(t);
            let _ = parse_time(t);
            let _ = parse_bandwidth(t);
            let _ = parse_size_list(t);
        }
        // What parses must be in range and round-trip its order of magnitude.
        if let Ok(t) = parse_time(&number) {
            prop_assert!(t.fits());
        }
        if let Ok(b) = parse_bandwidth(&number) {
            let bps = b.as_bytes_per_sec();
            prop_assert!((1.0..=1e18).contains(&bps), "{number} -> {bps}");
        }
    }

    #[test]
    fn inline_topology_specs_never_panic(
        kind in prop::sample::select(vec!["ring", "uring", "fc", "switch", "mesh", "torus", "hypercube", "dims", "dragonfly", "dgx1", "star"]),
        arg in "[0-9x,a-z:]{0,16}",
        bandwidth in prop::option::of("[-0-9.eE]{1,8}(GB/s|B/s|)"),
    ) {
        let spec = format!("{kind}:{arg}");
        let mut options = TopologyOptions::new(&spec);
        if let Some(b) = &bandwidth {
            options = options.with_links(b, "1us");
        }
        one_line(options.build())?;
    }

    #[test]
    fn topology_files_never_panic(
        text in prop::sample::select(vec![
            "configs/a100_2x8.yml", "configs/astra_2d_ring.yml", "configs/astra_ring_fc_switch.yml",
            "configs/two_nvswitch_boxes.yml", "configs/themis/3d_fc_ring_sw.yml",
        ]).prop_flat_map(|p| mutated(read(p)))
    ) {
        let dir = scratch("topology");
        one_line(TopologyOptions::new(file_with(&dir, "t.yml", &text).to_str().unwrap()).build())?;
    }

    #[test]
    fn schedule_files_never_panic(
        (name, text) in prop::sample::select(vec!["s.csv", "s.json"])
            .prop_flat_map(|name| (Just(name), mutated(schedule_text(name))))
    ) {
        let dir = scratch("schedule");
        one_line(load_schedule_file(&file_with(&dir, name, &text)))?;
    }

    #[test]
    fn msccl_files_never_panic(text in mutated(msccl_text())) {
        let (c, _) = small_all_gather();
        one_line(parse_msccl("f.xml", &text, &c))?;
    }

    #[test]
    fn system_and_workload_files_never_panic(
        (name, text) in prop::sample::select(vec![
            ("s.json", "configs/astra_system/ring_ring.json"),
            ("s.json", "configs/astra_system/themis_3d.json"),
            ("s.txt", "configs/astra_system/ring_fc_switch_v1.txt"),
            ("w.yaml", "workloads/resnet50.yaml"),
            ("w.txt", "workloads/resnet50_astra.txt"),
        ]).prop_flat_map(|(name, p)| (Just(name), mutated(read(p))))
    ) {
        let dir = scratch("system");
        let path = file_with(&dir, name, &text);
        if name.starts_with('s') {
            one_line(collsim::system::load_system(&path))?;
        } else {
            one_line(collsim::workload::load_workload(&path))?;
        }
    }

    #[test]
    fn experiment_files_never_panic(
        text in prop::sample::select(vec![
            "configs/experiments/tacos_fig2a.yaml", "configs/experiments/themis_table2.yaml",
            "configs/experiments/forestcoll_fabrics.yaml",
        ]).prop_flat_map(|p| mutated(read(p)))
    ) {
        one_line(Experiment::parse_in(&text, "e.yaml", &root().join("configs/experiments")))?;
    }
}

/// Byte-mutated Parquet schedules, through the whole command: a corrupt file ends with exit 2
/// and one `error:` line naming it, never a panic of the Parquet reader (exit 70).
#[test]
fn corrupt_parquet_schedules_are_input_errors() {
    let dir = scratch("parquet");
    let out = dir.join("o");
    let made = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args([
            "synthesize",
            "--topology",
            "mesh:3x3",
            "--collective",
            "all-gather",
        ])
        .args(["--size", "1MB", "--table-format", "parquet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let data = std::fs::read(out.join("schedule.parquet")).unwrap();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let target = dir.join("fuzzed.parquet");
    for _ in 0..(cases() / 4).max(16) {
        let mut bytes = data.clone();
        for _ in 0..1 + next() % 8 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        std::fs::write(&target, &bytes).unwrap();
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
            .args(["simulate", "--topology", "mesh:3x3", "--schedule"])
            .arg(&target)
            .output()
            .unwrap();
        let code = run.status.code();
        assert!(matches!(code, Some(0) | Some(2)), "{code:?}: {run:?}");
        if code == Some(2) {
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(
                err.starts_with("error:") && err.lines().count() == 1,
                "{err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
