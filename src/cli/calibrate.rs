//! `collsim calibrate LOG...`: the NCCL model's free figures fitted to measured nccl-tests logs
//! of one system (`crate::nccl::calibrate`), written as a GPU-system file that every command
//! taking `--topology` accepts.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::nccl_tests::{NcclSystemArgs, TableFormat};
use crate::nccl::calibrate::{fit, read_calls, Fit, Measurement, Residual, KINDS};
use crate::nccl::{log, Launch, Model, Setting};
use crate::topology::system_file;
use crate::Error;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Measured nccl-tests logs of the system (nccl-tests' own output, or Markdown
    /// or CSV tables of size, time, algbw, busbw), or tables of measured calls (FILE.csv with
    /// only the columns op,gpus,nccl_algo,nccl_proto,size,time_us; gpus, nccl_algo and
    /// nccl_proto may be empty) for calls run on part of a box or with NCCL_ALGO / NCCL_PROTO set
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    #[command(flatten)]
    pub system: NcclSystemArgs,
    /// Operations to fit, comma-separated nccl-tests names [default: every one the logs hold]
    #[arg(long)]
    pub op: Option<String>,
    /// Kinds of figure to fit, comma-separated: intra_gbps, nic_gbps, fixed_us, latency_factor,
    /// rate_factor, or `all`. The default (the link classes' bandwidths and the fixed cost)
    /// carries best to other collectives and node counts; the per-protocol factors fit the logs
    /// themselves closer (results/README.md, "Calibrated on one log")
    #[arg(long, default_value = "intra_gbps,nic_gbps,fixed_us")]
    pub figures: String,
    /// The GPU-system file to write (YAML): the system with the fitted figures
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an existing --out file
    #[arg(long)]
    pub force: bool,
    #[arg(long, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,
}

pub fn calibrate(args: CalibrateArgs) -> Result<(), Error> {
    let (system, allowed, launch) = args.system.build(args.logs.first().map(PathBuf::as_path))?;
    let wanted: Option<Vec<&str>> = args.op.as_deref().map(|list| {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    });
    if let Some(ops) = &wanted {
        for op in ops {
            log::kind(op)?;
        }
    }
    let kinds: Vec<&str> = match args.figures.trim() {
        "all" => KINDS.to_vec(),
        list => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect(),
    };
    if let Some(bad) = kinds.iter().find(|k| !KINDS.contains(k)) {
        return Err(Error::input(format!(
            "--figures '{bad}': expected all, or some of {}",
            KINDS.join(", ")
        )));
    }
    let mut measured = Vec::new();
    for path in &args.logs {
        if let Some(calls) = read_calls(path)? {
            measured.extend(
                calls
                    .into_iter()
                    .filter(|m| wanted.as_ref().is_none_or(|w| w.contains(&m.op))),
            );
            continue;
        }
        let named = log::ops(path)?;
        let ops: Vec<&str> = match &wanted {
            Some(w) => w.clone(),
            None if named.is_empty() => {
                return Err(Error::input(format!(
                    "{}: the log names no operation (a line naming all_reduce_perf, ..., or an \
                     op column); say which with --op",
                    path.display()
                )))
            }
            None => named.clone(),
        };
        for op in ops {
            let kind = log::kind(op)?;
            let op = log::OPS
                .iter()
                .find(|o| **o == op)
                .expect("checked by log::kind");
            for row in log::read_for(path, op, "float", system.gpus())? {
                measured.push(Measurement {
                    op,
                    kind,
                    size: row.size,
                    time_us: row.time_us,
                    source: format!("{}:{}", path.display(), row.line),
                    setting: Setting::default(),
                });
            }
        }
    }
    let mut inputs: Vec<(&std::path::Path, &str)> =
        args.logs.iter().map(|l| (l.as_path(), "LOG")).collect();
    let topology_file = std::path::Path::new(system_file::file_of(&args.system.topology));
    inputs.push((topology_file, "--topology"));
    crate::check_output_file(&args.out, "--out", &inputs, args.force)?;

    let model = Model::with_allowed(&system, allowed);
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let progress = move |done: usize| {
        if terminal && done.is_multiple_of(5) {
            eprint!("\rcalibrating: {done} evaluations");
        }
    };
    let fitted = fit(&model, launch, &measured, &kinds, &progress)?;
    if terminal {
        eprintln!();
    }
    let notes = provenance(&args, &fitted, launch);
    let text = system_file::render(&system, &fitted.calibration, &notes);
    crate::write_replacing(&args.out, &text)?;
    let report = match args.format {
        TableFormat::Csv => render_csv(&fitted, system.gpus()),
        TableFormat::Table => render_table(&fitted, &notes, system.gpus()),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(report.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("stdout", e))
}

/// Whether the summary covers calls from 1 MiB up (else every call: latency measurements).
fn from_one_mib(fit: &Fit) -> bool {
    fit.residuals.iter().any(|r| r.measurement.size >= 1 << 20)
}

/// Relative errors from 1 MiB up, or of every call if none is that large: (mean, worst, within
/// 10%, calls).
fn summary(fit: &Fit, after: bool) -> (f64, f64, usize, usize) {
    let floor = if from_one_mib(fit) { 1 << 20 } else { 0 };
    let errors: Vec<f64> = fit
        .residuals
        .iter()
        .filter(|r| r.measurement.size >= floor)
        .map(|r| {
            let t = if after { r.after_us } else { r.before_us };
            (t / r.measurement.time_us - 1.0).abs()
        })
        .collect();
    let n = errors.len();
    let mean = errors.iter().sum::<f64>() / n.max(1) as f64;
    let worst = errors.iter().cloned().fold(0.0, f64::max);
    let within = errors.iter().filter(|e| **e <= 0.10).count();
    (mean, worst, within, n)
}

fn provenance(args: &CalibrateArgs, fit: &Fit, launch: Launch) -> Vec<String> {
    let logs: Vec<String> = args.logs.iter().map(|l| l.display().to_string()).collect();
    let (mean_b, worst_b, _, n) = summary(fit, false);
    let (mean_a, worst_a, within, _) = summary(fit, true);
    let mut notes = vec![
        format!(
            "collsim calibrate on {} ({} calls{}), --topology {} -g {}",
            logs.join(", "),
            fit.residuals.len(),
            args.op
                .as_deref()
                .map(|o| format!(" of {o}"))
                .unwrap_or_default(),
            args.system.topology,
            launch.gpus_per_thread
        ),
        format!(
            "time error {} over {n} calls: before mean {:.1}% worst {:.1}%, after mean \
             {:.1}% worst {:.1}% ({within} within 10%)",
            if from_one_mib(fit) {
                "from 1 MiB up"
            } else {
                "of every call"
            },
            100.0 * mean_b,
            100.0 * worst_b,
            100.0 * mean_a,
            100.0 * worst_a
        ),
    ];
    for (figure, before, after) in &fit.figures {
        notes.push(format!("{}: {before:.4} -> {after:.4}", figure.name()));
    }
    notes
}

/// NCCL's algorithm, or P2P for the point-to-point all-to-all.
fn algorithm(r: &Residual) -> &'static str {
    if r.measurement.kind == crate::collective::CollectiveKind::AllToAll {
        "P2P"
    } else {
        r.algo.name()
    }
}

/// GPUs the call ran on: its own `gpus`, else the system's.
fn gpus(r: &Residual, system_gpus: u32) -> u32 {
    r.measurement.setting.gpus.unwrap_or(system_gpus)
}

fn render_csv(fit: &Fit, system_gpus: u32) -> String {
    let mut s = String::from(
        "op,gpus,size,measured_us,before_us,before_error,after_us,after_error,algorithm,protocol,source\n",
    );
    for r in &fit.residuals {
        let m = &r.measurement;
        s.push_str(&format!(
            "{},{},{},{},{:.3},{:.4},{:.3},{:.4},{},{},{}\n",
            m.op,
            gpus(r, system_gpus),
            m.size,
            m.time_us,
            r.before_us,
            r.before_us / m.time_us - 1.0,
            r.after_us,
            r.after_us / m.time_us - 1.0,
            algorithm(r),
            r.proto.name(),
            crate::report::csv_field(&m.source)
        ));
    }
    s
}

fn render_table(fit: &Fit, notes: &[String], system_gpus: u32) -> String {
    let mut s = String::new();
    for note in notes.iter().take(2) {
        s.push_str(&format!("# {note}\n"));
    }
    s.push_str(&format!("# {} evaluations\n", fit.evaluations));
    s.push_str("#  figure                      before       after\n");
    for (figure, before, after) in &fit.figures {
        s.push_str(&format!(
            "   {:<24} {before:>10.4}  {after:>10.4}\n",
            figure.name()
        ));
    }
    s.push_str(
        "#  op             gpus         size   measured     before   error      after   error  algorithm  protocol\n",
    );
    for r in &fit.residuals {
        let m = &r.measurement;
        s.push_str(&format!(
            "   {:<14} {:>4} {:>12} {:>10.2} {:>10.2} {:>+6.1}% {:>10.2} {:>+6.1}%  {:>9}  {:>8}\n",
            m.op,
            gpus(r, system_gpus),
            m.size,
            m.time_us,
            r.before_us,
            100.0 * (r.before_us / m.time_us - 1.0),
            r.after_us,
            100.0 * (r.after_us / m.time_us - 1.0),
            algorithm(r),
            r.proto.name()
        ));
    }
    s
}
