//! Results and inputs are never lost: `--force` replaces only what collsim wrote and only once the
//! new results are complete, inputs inside the folder are kept, names from input files stay
//! inside the folder, a folder another run is writing is refused, `--msccl` never replaces a
//! file silently, and SIGTERM leaves no partial files. Each test checks the files on disk.

mod common;
use common::{collsim, scratch};

use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn failed_with(out: &std::process::Output, words: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error:") && err.lines().count() == 1,
        "{err}"
    );
    for w in words {
        assert!(err.contains(w), "{err}");
    }
}

/// A ring all-reduce on ring:8 with `--out dir --force`.
fn ring_all_reduce_forced_into(dir: &Path) -> std::process::Output {
    collsim(&[
        "simulate",
        "--topology",
        "ring:8",
        "--collective",
        "all-reduce",
        "--size",
        "1MB",
        "--algorithm",
        "ring",
        "--out",
        s(dir),
        "--force",
    ])
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// No temporary file or lock is left anywhere under `dir`.
fn no_leftovers(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.contains(".partial") && name != ".collsim-lock",
            "{name} left in {}",
            dir.display()
        );
        if entry.path().is_dir() {
            no_leftovers(&entry.path());
        }
    }
}

#[test]
fn force_keeps_the_runs_own_input_and_the_old_results_until_the_new_are_whole() {
    let dir = scratch("lost", "input");
    let rt = dir.join("rt");
    let common = [
        "--topology",
        "mesh:4x4",
        "--collective",
        "all-gather",
        "--size",
        "1MB",
    ];
    let out = collsim(&[&["synthesize"][..], &common, &["--out", s(&rt)]].concat());
    assert!(out.status.success(), "{out:?}");
    let schedule = rt.join("schedule.json");
    let before = read(&schedule);
    let summary = read(&rt.join("summary.csv"));
    // Item 1: the schedule an earlier run wrote is this run's input: refused, nothing removed.
    let out = collsim(&[
        "simulate",
        "--topology",
        "mesh:4x4",
        "--schedule",
        s(&schedule),
        "--out",
        s(&rt),
        "--force",
    ]);
    failed_with(&out, &["--schedule", "--force"]);
    assert_eq!(read(&schedule), before);
    // Item 2: a --force rerun that fails (a size below one element per NPU) keeps the results.
    let out = collsim(&[
        "simulate",
        "--topology",
        "mesh:4x4",
        "--collective",
        "all-gather",
        "--size",
        "1B",
        "--algorithm",
        "ring",
        "--out",
        s(&rt),
        "--force",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(read(&schedule), before);
    assert_eq!(read(&rt.join("summary.csv")), summary);
    no_leftovers(&rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn force_never_replaces_a_file_collsim_did_not_write() {
    let dir = scratch("lost", "mine");
    std::fs::write(dir.join("summary.csv"), "my own table").unwrap();
    let out = ring_all_reduce_forced_into(&dir);
    failed_with(&out, &["summary.csv", "not a file collsim wrote"]);
    assert_eq!(read(&dir.join("summary.csv")), "my own table");
    no_leftovers(&dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn trace_names_stay_inside_the_folder_which_needs_force() {
    let dir = scratch("lost", "trace");
    let victim = dir.join("victim.0.et");
    std::fs::write(&victim, "keep me").unwrap();
    let workload = dir.join("w.yaml");
    let yaml = read(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/workloads/resnet50.yaml"
    )))
    .replacen("name: resnet50", "name: \"../victim\"", 1);
    std::fs::write(&workload, yaml).unwrap();
    let out_dir = dir.join("o");
    let trace = |out: &Path, extra: &[&str]| {
        collsim(
            &[
                &[
                    "trace",
                    "--workload",
                    s(&workload),
                    "--topology",
                    "ring:8",
                    "--out",
                    s(out),
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    failed_with(&trace(&out_dir, &[]), &["../victim", "--out"]);
    assert_eq!(read(&victim), "keep me");
    // A proper name: written with a manifest; a second time needs --force, which keeps the
    // user's own file.
    std::fs::write(
        &workload,
        read(&workload).replacen("\"../victim\"", "rn50", 1),
    )
    .unwrap();
    assert!(trace(&out_dir, &[]).status.success());
    assert!(out_dir.join("rn50.7.et").exists() && out_dir.join(".collsim-manifest").exists());
    std::fs::write(out_dir.join("notes.txt"), "mine").unwrap();
    failed_with(&trace(&out_dir, &[]), &["not empty", "--force"]);
    assert!(trace(&out_dir, &["--force"]).status.success());
    assert_eq!(read(&out_dir.join("notes.txt")), "mine");
    no_leftovers(&out_dir);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_folder_another_run_is_writing_is_refused() {
    let dir = scratch("lost", "lock");
    // This test's own process stands for a run that is writing the folder.
    std::fs::write(dir.join(".collsim-lock"), std::process::id().to_string()).unwrap();
    let out = ring_all_reduce_forced_into(&dir);
    failed_with(&out, &["another collsim run"]);
    assert!(dir.join(".collsim-lock").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn msccl_export_never_replaces_a_file_silently() {
    let dir = scratch("lost", "msccl");
    let xml = dir.join("ring.xml");
    let run = |target: &Path, extra: &[&str]| {
        collsim(
            &[
                &[
                    "simulate",
                    "--topology",
                    "ring:4",
                    "--collective",
                    "all-gather",
                    "--size",
                    "1MB",
                    "--algorithm",
                    "ring",
                    "--msccl",
                    s(target),
                ][..],
                extra,
            ]
            .concat(),
        )
    };
    assert!(run(&xml, &[]).status.success());
    let first = read(&xml);
    std::fs::write(&xml, "edited by hand").unwrap();
    failed_with(&run(&xml, &[]), &["--msccl", "exists", "--force"]);
    assert_eq!(read(&xml), "edited by hand");
    assert!(run(&xml, &["--force"]).status.success());
    assert_eq!(read(&xml), first);
    // The run's own input schedule: refused even with --force.
    let out = collsim(&[
        "simulate",
        "--topology",
        "ring:4",
        "--schedule",
        s(&xml),
        "--collective",
        "all-gather",
        "--size",
        "1MB",
        "--chunks",
        "1",
        "--msccl",
        s(&xml),
        "--force",
    ]);
    failed_with(&out, &["--msccl", "--schedule"]);
    assert_eq!(read(&xml), first);
    std::fs::remove_dir_all(dir).unwrap();
}

/// SIGTERM (what Slurm sends at a time limit) is taken as Ctrl-C: exit 130, no partial files,
/// no lock, and the folder can be used again.
#[cfg(unix)]
#[test]
fn sigterm_leaves_no_partial_files() {
    let dir = scratch("lost", "sigterm");
    let out = dir.join("o");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args([
            "simulate",
            "--topology",
            "ring:256",
            "--collective",
            "all-reduce",
            "--size",
            "1GB",
            "--chunks",
            "64",
            "--algorithm",
            "ring",
            "--out",
            s(&out),
        ])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the run holds the folder, then terminate it.
    let lock = out.join(".collsim-lock");
    let start = std::time::Instant::now();
    while !lock.exists() && start.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    if status.success() {
        // The run finished before the signal: nothing to check here but the results' integrity.
        no_leftovers(&out);
        return;
    }
    assert_eq!(status.code(), Some(130), "{status:?}");
    no_leftovers(&out);
    assert!(!lock.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A run that fails leaves no empty results folder behind (one it did not make stays), and input
/// echoed in an error shows control characters escaped, never raw.
#[test]
fn failed_runs_leave_no_folder_and_errors_no_raw_control_characters() {
    let dir = scratch("lost", "failed");
    let out = dir.join("new");
    let run = collsim(&[
        "simulate",
        "--topology",
        "ring:8",
        "--collective",
        "all-reduce",
        "--size",
        "1B",
        "--algorithm",
        "ring",
        "--out",
        s(&out),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(!out.exists());
    let run = collsim(&[
        "simulate",
        "--topology",
        "ring:\u{1b}[31m8",
        "--algorithm",
        "ring",
    ]);
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!err.contains('\u{1b}') && err.contains("\\u{1b}"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
