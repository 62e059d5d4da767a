//! Helpers the whole-command tests share: running the binary, and scratch folders.
// Each test crate uses part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs the collsim binary with `args`.
pub fn collsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .output()
        .expect("collsim runs")
}

/// Runs the collsim binary with `args`, its progress lines (in a log: stderr is captured) due
/// first after `seconds` and then every `seconds`, so a run of a second shows them.
pub fn collsim_paced(args: &[&str], seconds: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .env("COLLSIM_PROGRESS_SECONDS", seconds)
        .output()
        .expect("collsim runs")
}

/// An empty folder named after `prefix` and `name`, removed with everything in it when the
/// value is dropped (at the end of the test that made it, passed or failed).
pub fn scratch(prefix: &str, name: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("{prefix}-{name}-"))
        .tempdir()
        .expect("a scratch folder");
    Scratch(dir)
}

/// A test's scratch folder (see [`scratch`]); reads as the folder's path.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// Asserts that a run was refused as bad input: exit 2 and exactly one line on stderr, an
/// `error:` line; returns it.
pub fn refused(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// Runs the collsim binary with `args`, asserts it succeeded (showing its stderr if not) and
/// returns what it printed.
pub fn stdout_of(args: &[&str]) -> String {
    let out = collsim(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `simulate --format csv` with `args` and returns the summary row by column.
pub fn summary(args: &[&str]) -> std::collections::HashMap<String, String> {
    let mut all = vec!["simulate", "--format", "csv"];
    all.extend_from_slice(args);
    first_row(&stdout_of(&all))
}

/// The first row of a CSV text (a header and rows, as summary.csv), by column.
pub fn first_row(text: &str) -> std::collections::HashMap<String, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    header
        .iter()
        .map(|h| h.to_string())
        .zip(row.iter().map(|v| v.to_string()))
        .collect()
}
