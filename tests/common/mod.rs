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
    let table = Table::parse(text);
    let row = table.rows.first().expect("a row under the header");
    table
        .header
        .iter()
        .cloned()
        .zip(row.iter().cloned())
        .collect()
}

/// A CSV text as collsim prints it: a header, then rows, read by the csv crate (so a quoted
/// cell such as `"tp,dp,pp"` stays one cell).
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn parse(text: &str) -> Table {
        let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
        let header = reader
            .headers()
            .unwrap_or_else(|e| panic!("no CSV header ({e}) in:\n{text}"))
            .iter()
            .map(String::from)
            .collect();
        let rows = reader
            .records()
            .map(|r| {
                r.unwrap_or_else(|e| panic!("{e} in:\n{text}"))
                    .iter()
                    .map(String::from)
                    .collect()
            })
            .collect();
        Table { header, rows }
    }

    /// The position of column `name`.
    pub fn at(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name} in {:?}", self.header))
    }

    /// Every row's cell of column `name`.
    pub fn column(&self, name: &str) -> Vec<&str> {
        let at = self.at(name);
        self.rows.iter().map(|r| r[at].as_str()).collect()
    }

    /// Every row's cell of column `name`, as a number.
    pub fn numbers(&self, name: &str) -> Vec<f64> {
        self.column(name)
            .iter()
            .map(|c| {
                c.parse()
                    .unwrap_or_else(|_| panic!("{name}: '{c}' is not a number"))
            })
            .collect()
    }

    /// The cell of column `name` in row `row`.
    pub fn cell(&self, row: usize, name: &str) -> &str {
        &self.rows[row][self.at(name)]
    }

    /// The cell of column `name` in row `row`, as a number.
    pub fn number(&self, row: usize, name: &str) -> f64 {
        let c = self.cell(row, name);
        c.parse()
            .unwrap_or_else(|_| panic!("{name}: '{c}' is not a number"))
    }
}

/// The path of a model file shipped in `workloads/llm/`.
pub fn llm_model(name: &str) -> String {
    format!("{}/workloads/llm/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The value of `name` in the first row of a CSV summary.
pub fn column(csv: &str, name: &str) -> f64 {
    Table::parse(csv).number(0, name)
}
