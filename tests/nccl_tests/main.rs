//! `collsim nccl-tests`: the NCCL model held against public nccl-tests measurements
//! (tests/data/nccl_tests/, copied from shared/reference/nccl_tests/ with their sources): the
//! measured cases (`measured`), NCCL's mechanisms as the model runs them (`model`) and the
//! command line (`command`), with the helpers they share here.

mod command;
#[path = "../common/mod.rs"]
mod common;
mod measured;
mod model;

use common::{collsim, column, refused, scratch, stdout_of, Table};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/nccl_tests");

/// One predicted row beside its measurement.
struct Row {
    size: u64,
    predicted: f64,
    measured: Option<f64>,
    algorithm: String,
    protocol: String,
}

/// Runs `nccl-tests OP` on `system` from 8 KiB to 16 GiB against the measured `log`.
fn compare(op: &str, system: &str, log: &str, extra: &[&str]) -> Vec<Row> {
    let log = format!("{DATA}/{log}");
    let mut args = vec![
        "nccl-tests",
        op,
        "--topology",
        system,
        "-b",
        "8K",
        "-e",
        "16G",
        "-f",
        "2",
        "--format",
        "csv",
        "--compare",
        &log,
    ];
    args.extend_from_slice(extra);
    let table = Table::parse(&stdout_of(&args));
    assert_eq!(
        &table.header[..10],
        [
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time_us",
            "algbw",
            "busbw",
            "algorithm",
            "protocol"
        ]
    );
    (0..table.rows.len())
        .map(|i| Row {
            size: table.number(i, "size") as u64,
            predicted: table.number(i, "time_us"),
            measured: table.cell(i, "measured_time_us").parse().ok(),
            algorithm: table.cell(i, "algorithm").to_string(),
            protocol: table.cell(i, "protocol").to_string(),
        })
        .collect()
}

/// Sizes from `from` bytes up whose prediction is within `tolerance` of the measurement, and
/// how many were measured.
fn within(rows: &[Row], from: u64, tolerance: f64) -> (usize, usize) {
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.size >= from && r.measured.is_some())
        .collect();
    let good = measured
        .iter()
        .filter(|r| (r.predicted / r.measured.unwrap() - 1.0).abs() <= tolerance)
        .count();
    (good, measured.len())
}

/// `nccl-tests all_reduce` on `system` with `args` (sizes, forced algorithms), as CSV.
fn all_reduce_csv(system: &str, args: &[&str]) -> String {
    op_csv("all_reduce", system, args)
}

/// `nccl-tests OP --topology SYSTEM ARGS --format csv`.
fn op_csv(op: &str, system: &str, args: &[&str]) -> String {
    let mut all = vec!["nccl-tests", op, "--topology", system];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "csv"]);
    stdout_of(&all)
}

/// `nccl-tests all_reduce` of one size with NCCL_ALGO and NCCL_PROTO forced, as CSV.
fn forced_all_reduce(system: &str, size: &str, algo: &str, proto: &str) -> String {
    all_reduce_csv(
        system,
        &[
            "-b",
            size,
            "-e",
            size,
            "--nccl-algo",
            algo,
            "--nccl-proto",
            proto,
        ],
    )
}

/// The CSV table of an `nccl-tests` sweep (`args` without `--format`), asserting that its times
/// never fall as the sizes grow.
fn growing_sweep(args: &[&str]) -> Table {
    let mut args = args.to_vec();
    args.extend(["--format", "csv"]);
    let table = Table::parse(&stdout_of(&args));
    let times = table.numbers("time_us");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "{}: {times:?}",
        args.join(" ")
    );
    table
}

/// The predicted time of one `op` call of `size` on `system`, forced to Ring/Simple, us.
fn ring_simple_time_us(op: &str, system: &str, size: &str) -> f64 {
    let out = stdout_of(&[
        "nccl-tests",
        "--topology",
        system,
        op,
        "-b",
        size,
        "-e",
        size,
        "--nccl-algo",
        "Ring",
        "--nccl-proto",
        "Simple",
        "--format",
        "csv",
    ]);
    Table::parse(&out).number(0, "time_us")
}
