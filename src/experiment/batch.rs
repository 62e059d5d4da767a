//! Many runs at once: experiments and sweeps, run in parallel, optionally one share of them
//! (`--shard I/N`, for Slurm job arrays), and the merging of shards. Every batch writes
//! `summary.csv` (one row per run, with its run index), `skipped.csv` when some combinations do
//! not apply, and its figures: bandwidth against size per topology and collective when several
//! sizes were run, grouped bars per collective when one size was, and heat maps on request.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::file::{Experiment, RunPlan};
use super::{execute, CollectiveRequest, RunSpec, ScheduleSource};
use crate::report::{
    self, BarChart, HeatMetric, Heatmap, HeatmapGrid, LinePlot, OutputDir, Series, Summary,
    SUMMARY_HEADER,
};
use crate::sim::SimOptions;
use crate::topology::Topology;
use crate::units::{format_bytes, format_bytes_approx};
use crate::Error;

/// One share of a batch: runs whose index is `index` modulo `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `I/N` with `0 <= I < N` (Slurm: `--shard $SLURM_ARRAY_TASK_ID/N` with `--array=0-(N-1)`).
    pub fn parse(text: &str) -> Result<Shard, Error> {
        let bad = || Error::input(format!("--shard: '{text}' should be I/N with 0 <= I < N"));
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<u32>().map_err(|_| bad())?,
            n.trim().parse::<u32>().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    fn takes(&self, run: usize) -> bool {
        run as u64 % self.count as u64 == self.index as u64
    }
}

/// A run that did not apply (an algorithm without a form for a collective, a size that does not
/// split, ...), with the reason.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub plan: RunPlan,
    pub reason: String,
}

/// What a batch (or one share of it) produced.
pub struct BatchResult {
    /// Finished runs in run order, with their index.
    pub rows: Vec<(usize, Summary)>,
    pub skipped: Vec<Skipped>,
    /// Per run with heat maps: bytes each link carried, in the topology's link order.
    pub link_bytes: HashMap<usize, Vec<u64>>,
    /// Per run with utilisation figures: the busy fraction of all links in each of
    /// [`report::UTILIZATION_BINS`] equal bins of the run, and the run's time.
    pub utilization: HashMap<usize, (Vec<f64>, f64)>,
    /// Runs in the whole batch (not only this share).
    pub total_runs: usize,
}

/// Runs the experiment's runs (those of `shard`, or all), in parallel, with a progress bar on
/// stderr when it is a terminal and progress lines every 5 s otherwise. Topologies that fail to
/// build are errors; runs that do not apply are skipped with their reason.
pub fn run_batch(exp: &Experiment, shard: Option<Shard>) -> Result<BatchResult, Error> {
    let topologies = exp
        .topologies
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.build()
                .map_err(|e| Error::input(format!("topologies[{i}] ({}): {e}", t.options.spec)))
        })
        .collect::<Result<Vec<Topology>, Error>>()?;
    let plans = exp.plans();
    let total_runs = plans.len();
    let mine: Vec<RunPlan> = plans
        .into_iter()
        .filter(|p| shard.is_none_or(|s| s.takes(p.index)))
        .collect();
    let bar = report::progress_bar(mine.len() as u64, &exp.name, "runs");
    let heartbeat = report::Heartbeat::counting(&exp.name, "runs", mine.len() as u64);
    if mine.len() < 2 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let outcomes: Vec<Result<RunDone, String>> = mine
        .par_iter()
        .map(|plan| {
            let outcome = run_one(exp, &topologies[plan.topology], plan);
            bar.inc(1);
            heartbeat.step();
            outcome.map_err(|e| e.to_string())
        })
        .collect();
    bar.finish_and_clear();
    drop(heartbeat);
    let mut result = BatchResult {
        rows: Vec::new(),
        skipped: Vec::new(),
        link_bytes: HashMap::new(),
        utilization: HashMap::new(),
        total_runs,
    };
    for (plan, outcome) in mine.into_iter().zip(outcomes) {
        match outcome {
            Ok((summary, bytes, busy)) => {
                if let Some(busy) = busy {
                    let time = summary.collective_time.ps() as f64 / 1e3;
                    result.utilization.insert(plan.index, (busy, time));
                }
                result.rows.push((plan.index, summary));
                if let Some(bytes) = bytes {
                    result.link_bytes.insert(plan.index, bytes);
                }
            }
            Err(reason) => result.skipped.push(Skipped { plan, reason }),
        }
    }
    Ok(result)
}

/// A finished run: its summary, the bytes per link when heat maps are wanted, and the busy
/// fraction of all links over time when utilisation figures are.
type RunDone = (Summary, Option<Vec<u64>>, Option<Vec<f64>>);

fn run_one(exp: &Experiment, topology: &Topology, plan: &RunPlan) -> Result<RunDone, Error> {
    let spec = RunSpec {
        source: ScheduleSource::Algorithm(plan.algorithm.algorithm),
        collectives: vec![CollectiveRequest {
            kind: plan.collective,
            size: plan.size,
            chunks: plan.chunks,
            npus: None,
            root: exp.root.filter(|_| plan.collective.is_rooted()),
        }],
        options: SimOptions {
            routing: exp.options.routing.seeded(plan.seed.unwrap_or(1)),
            record_busy_intervals: exp.options.record_busy_intervals || exp.utilization,
            ..exp.options.clone()
        },
        seed: plan.seed,
        validate: exp.validate,
        synth: exp.synth.clone(),
        multi_dim: plan.algorithm.multi_dim(&exp.multi_dim),
        trees: plan.algorithm.trees,
    };
    let mut outcome = execute(topology, &spec, &mut ())?;
    outcome.summary.algorithm = plan.algorithm.label();
    let bytes = exp.heatmaps.then(|| outcome.result.link_bytes.clone());
    let busy = exp.utilization.then(|| {
        let u = report::Utilization::new(topology, &outcome.result, report::UTILIZATION_BINS);
        u.series.into_iter().next().map(|s| s.1).unwrap_or_default()
    });
    Ok((outcome.summary, bytes, busy))
}

/// What a results folder records about its batch, so shards can be merged and checked.
#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct BatchInfo {
    experiment: String,
    runs: usize,
    shard: Option<Shard>,
    /// Folder the experiment file's relative paths start from.
    base: Option<PathBuf>,
}

/// An experiment file's text and the folder its relative paths start from.
pub struct Source<'a> {
    pub text: &'a str,
    pub base: &'a Path,
}

/// Writes a batch's results into `out`: `summary.csv`, `skipped.csv`, `batch.json`, the
/// experiment file when there is one, per-run link loads for heat maps, and (for a whole batch,
/// not a shard) the figures.
pub fn write_batch(
    mut out: OutputDir,
    exp: &Experiment,
    source: Option<Source>,
    result: &BatchResult,
    shard: Option<Shard>,
) -> Result<(), Error> {
    let rows: Vec<RunRow> = result
        .rows
        .iter()
        .map(|(run, s)| RunRow::from_summary(*run, s))
        .collect();
    write_summary(&out.file("summary.csv"), &result.rows)?;
    if !result.skipped.is_empty() {
        write_skipped(&out.file("skipped.csv"), exp, &result.skipped)?;
    }
    if let Some(source) = &source {
        write_text(&out.file("experiment.yaml"), source.text)?;
    }
    if exp.heatmaps {
        for (run, bytes) in &result.link_bytes {
            let path = out.file(&format!("runs/{run}/link_bytes.csv"));
            write_link_bytes(&path, bytes)?;
        }
    }
    let info = BatchInfo {
        experiment: exp.name.clone(),
        runs: result.total_runs,
        shard,
        base: source.map(|s| std::path::absolute(s.base).unwrap_or(s.base.to_path_buf())),
    };
    write_text(
        &out.file("batch.json"),
        &serde_json::to_string_pretty(&info).expect("serialisable"),
    )?;
    if shard.is_none() {
        if exp.utilization {
            draw_utilization(&mut out, exp, &rows, &result.utilization)?;
        }
        let loads = |run: usize| result.link_bytes.get(&run).cloned();
        let skipped = result
            .skipped
            .iter()
            .map(|s| (s.plan.index, s.reason.clone()))
            .collect();
        draw_figures(&mut out, exp, &rows, &loads, &skipped)?;
    }
    out.commit()
}

/// Joins the results folders of a batch's shards into `out`, checks that every run is there
/// exactly once, and draws the batch's figures.
pub fn merge(dirs: &[PathBuf], out_dir: &Path, force: bool) -> Result<usize, Error> {
    if dirs.is_empty() {
        return Err(Error::input("merge: give the shards' results folders"));
    }
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if let Some(input) = dirs.iter().find(|d| same(d, out_dir)) {
        return Err(Error::input(format!(
            "merge: --out {} is one of the shards ({}); give a new folder",
            out_dir.display(),
            input.display()
        )));
    }
    let mut info: Option<BatchInfo> = None;
    let mut source: Option<String> = None;
    let mut rows: BTreeMap<usize, (RunRow, csv::StringRecord)> = BTreeMap::new();
    let mut skipped: BTreeMap<usize, String> = BTreeMap::new();
    let mut bytes_of: HashMap<usize, PathBuf> = HashMap::new();
    for dir in dirs {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| {
                Error::input(format!(
                    "{}: {} (is {} a results folder of `collsim run --shard`?)",
                    path.display(),
                    crate::io_words(&e),
                    dir.display()
                ))
            })
        };
        let this: BatchInfo = serde_json::from_str(&read("batch.json")?)
            .map_err(|e| Error::input(format!("{}: {e}", dir.join("batch.json").display())))?;
        match &info {
            Some(first) if first.experiment != this.experiment || first.runs != this.runs => {
                return Err(Error::input(format!(
                    "{}: shard of experiment '{}' ({} runs), not of '{}' ({} runs)",
                    dir.display(),
                    this.experiment,
                    this.runs,
                    first.experiment,
                    first.runs
                )))
            }
            Some(_) => {}
            None => info = Some(this),
        }
        if let Ok(text) = read("experiment.yaml") {
            if source.as_ref().is_some_and(|s| *s != text) {
                return Err(Error::input(format!(
                    "{}: experiment.yaml differs from the other shards'",
                    dir.display()
                )));
            }
            source = Some(text);
        }
        let summary = dir.join("summary.csv");
        let mut reader = csv::Reader::from_path(&summary)
            .map_err(|e| Error::input(format!("{}: {e}", summary.display())))?;
        let records: Vec<csv::StringRecord> = reader
            .records()
            .collect::<Result<_, _>>()
            .map_err(|e| Error::input(format!("{}: {e}", summary.display())))?;
        let headers = reader
            .headers()
            .map_err(|e| Error::input(format!("{}: {e}", summary.display())))?
            .clone();
        for record in records {
            let row: RunRow = record
                .deserialize(Some(&headers))
                .map_err(|e| Error::input(format!("{}: {e}", summary.display())))?;
            let run = row.run;
            if rows.insert(run, (row, record)).is_some() {
                return Err(Error::input(format!(
                    "{}: run {run} appears in more than one shard",
                    summary.display(),
                )));
            }
        }
        if let Ok(text) = read("skipped.csv") {
            for line in text.lines().skip(1) {
                let run = line.split(',').next().and_then(|r| r.parse().ok());
                if let Some(run) = run {
                    skipped.insert(run, line.to_string());
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(dir.join("runs")) {
            for entry in entries.flatten() {
                if let Some(run) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                    bytes_of.insert(run, entry.path().join("link_bytes.csv"));
                }
            }
        }
    }
    let info = info.expect("at least one shard");
    let missing: Vec<usize> = (0..info.runs)
        .filter(|r| !rows.contains_key(r) && !skipped.contains_key(r))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().take(8).map(|r| r.to_string()).collect();
        return Err(Error::input(format!(
            "merge: {} of {} runs are missing (runs {}{}); is a shard's folder missing?",
            missing.len(),
            info.runs,
            shown.join(", "),
            if missing.len() > 8 { ", ..." } else { "" }
        )));
    }
    let mut out = OutputDir::prepare(out_dir, force)?;
    // Rows are written back as CSV records, quoted as they were (topology names hold commas).
    let path = out.file("summary.csv");
    let csv_error = |e: csv::Error| Error::io(path.display(), std::io::Error::other(e.to_string()));
    let mut w = csv::Writer::from_path(&path).map_err(csv_error)?;
    w.write_record(SUMMARY_HEADER.split(',').chain(["run"]))
        .map_err(csv_error)?;
    for (_, record) in rows.values() {
        w.write_record(record).map_err(csv_error)?;
    }
    w.flush().map_err(|e| Error::io(path.display(), e))?;
    if !skipped.is_empty() {
        let path = out.file("skipped.csv");
        let mut text = format!("{SKIPPED_HEADER}\n");
        for line in skipped.values() {
            text += line;
            text.push('\n');
        }
        write_text(&path, &text)?;
    }
    let exp = match &source {
        Some(text) => {
            write_text(&out.file("experiment.yaml"), text)?;
            let base = info.base.clone().unwrap_or_else(|| PathBuf::from("."));
            Some(Experiment::parse_in(text, "experiment.yaml", &base)?)
        }
        None => None,
    };
    write_text(
        &out.file("batch.json"),
        &serde_json::to_string_pretty(&BatchInfo {
            shard: None,
            ..info
        })
        .expect("serialisable"),
    )?;
    if let Some(exp) = exp {
        let row_list: Vec<RunRow> = rows.into_values().map(|(r, _)| r).collect();
        let mut link_bytes: HashMap<usize, Vec<u64>> = HashMap::new();
        if exp.heatmaps {
            for (&run, path) in &bytes_of {
                let bytes = read_link_bytes(path)?;
                write_link_bytes(&out.file(&format!("runs/{run}/link_bytes.csv")), &bytes)?;
                link_bytes.insert(run, bytes);
            }
        }
        let loads = |run: usize| link_bytes.get(&run).cloned();
        // skipped.csv's last field is the reason.
        let reasons: BTreeMap<usize, String> = skipped
            .iter()
            .filter_map(|(&run, line)| {
                let mut reader = csv::ReaderBuilder::new()
                    .has_headers(false)
                    .from_reader(line.as_bytes());
                let record = reader.records().next()?.ok()?;
                Some((run, record.get(record.len().checked_sub(1)?)?.to_string()))
            })
            .collect();
        draw_figures(&mut out, &exp, &row_list, &loads, &reasons)?;
    }
    let runs = info.runs;
    out.commit()?;
    Ok(runs)
}

/// The fields of a summary row that figures and merging need.
#[derive(Clone, Debug, Deserialize)]
pub struct RunRow {
    pub topology: String,
    pub collective: String,
    pub algorithm: String,
    pub size_bytes: Option<u64>,
    pub chunks_per_npu: Option<u32>,
    pub collective_time_ns: f64,
    #[serde(rename = "algbw_GBps")]
    pub algbw_gbps: Option<f64>,
    pub bound_ns: Option<f64>,
    pub seed: Option<u64>,
    pub run: usize,
}

impl RunRow {
    fn from_summary(run: usize, s: &Summary) -> RunRow {
        RunRow {
            topology: s.topology.clone(),
            collective: s.collective.clone(),
            algorithm: s.algorithm.clone(),
            size_bytes: s.size_bytes,
            chunks_per_npu: s.chunks_per_npu,
            collective_time_ns: s.collective_time.as_ns_f64(),
            algbw_gbps: s.algbw_gbps(),
            bound_ns: s.bound.map(|b| b.as_ns_f64()),
            seed: s.seed,
            run,
        }
    }
}

const SKIPPED_HEADER: &str = "run,topology,collective,size_bytes,algorithm,chunks,seed,reason";

fn write_text(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| Error::io(path.display(), e))
}

fn write_summary(path: &Path, rows: &[(usize, Summary)]) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = report::writer(path)?;
    writeln!(w, "{SUMMARY_HEADER},run").map_err(io)?;
    for (run, s) in rows {
        writeln!(w, "{},{run}", s.csv_row()).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn write_skipped(path: &Path, exp: &Experiment, skipped: &[Skipped]) -> Result<(), Error> {
    let mut w = csv::Writer::from_path(path).map_err(|e| Error::io(path.display(), e.into()))?;
    let header: Vec<&str> = SKIPPED_HEADER.split(',').collect();
    let result = (|| -> Result<(), csv::Error> {
        w.write_record(&header)?;
        for s in skipped {
            let p = &s.plan;
            let topology = &exp.topologies[p.topology];
            w.write_record([
                p.index.to_string(),
                topology
                    .name
                    .clone()
                    .unwrap_or(topology.options.spec.clone()),
                p.collective.name().to_string(),
                p.size.to_string(),
                p.algorithm.label(),
                p.chunks.map(|c| c.to_string()).unwrap_or_default(),
                p.seed.map(|s| s.to_string()).unwrap_or_default(),
                s.reason.clone(),
            ])?;
        }
        w.flush()?;
        Ok(())
    })();
    result.map_err(|e| Error::io(path.display(), std::io::Error::other(e.to_string())))
}

fn write_link_bytes(path: &Path, bytes: &[u64]) -> Result<(), Error> {
    let mut text = String::from("link,bytes\n");
    for (l, b) in bytes.iter().enumerate() {
        text += &format!("{l},{b}\n");
    }
    write_text(path, &text)
}

fn read_link_bytes(path: &Path) -> Result<Vec<u64>, Error> {
    let text = crate::read_text(path, "cannot read the links' bytes")?;
    text.lines()
        .skip(1)
        .map(|line| {
            line.split(',')
                .nth(1)
                .and_then(|b| b.parse().ok())
                .ok_or_else(|| Error::input(format!("{}: bad line '{line}'", path.display())))
        })
        .collect()
}

/// File-name form of a label: lower case, runs of other characters as one `_`.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

/// The series a row belongs to in a figure: its algorithm, and its chunk count or seed when the
/// batch varies them.
fn series_name(exp: &Experiment, row: &RunRow) -> String {
    series_label(exp, &row.algorithm, row.chunks_per_npu, row.seed)
}

fn series_label(
    exp: &Experiment,
    algorithm: &str,
    chunks: Option<u32>,
    seed: Option<u64>,
) -> String {
    let mut name = algorithm.to_string();
    if exp.chunks.len() > 1 {
        name += &format!(", {} chunks/NPU", chunks.unwrap_or(1));
    }
    if exp.seeds.len() > 1 {
        name += &format!(" seed {}", seed.unwrap_or(0));
    }
    name
}

/// Draws the batch's figures. `skipped` gives the reason of each run that did not apply, which
/// the heat-map grid writes in that run's cell.
fn draw_figures(
    out: &mut OutputDir,
    exp: &Experiment,
    rows: &[RunRow],
    loads: &dyn Fn(usize) -> Option<Vec<u64>>,
    skipped: &BTreeMap<usize, String>,
) -> Result<(), Error> {
    // Curves against size for sweeps; bars comparing networks for a few sizes.
    if exp.sizes.len() >= 4 || (exp.sizes.len() > 1 && exp.topologies.len() == 1) {
        draw_size_curves(out, exp, rows)?;
    } else {
        draw_bars(out, exp, rows)?;
    }
    if exp.heatmaps {
        draw_heatmaps(out, exp, rows, loads, skipped)?;
    }
    Ok(())
}

/// Algorithm bandwidth against size (log x), one line per series, the lower bound dashed: one
/// figure per (topology, collective).
fn draw_size_curves(out: &mut OutputDir, exp: &Experiment, rows: &[RunRow]) -> Result<(), Error> {
    let mut groups: BTreeMap<(String, String), Vec<&RunRow>> = BTreeMap::new();
    for row in rows {
        groups
            .entry((row.topology.clone(), row.collective.clone()))
            .or_default()
            .push(row);
    }
    let single = groups.len() == 1;
    for ((topology, collective), members) in groups {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut bound: BTreeMap<u64, f64> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for row in &members {
            let (Some(size), Some(bw)) = (row.size_bytes, row.algbw_gbps) else {
                continue;
            };
            let name = series_name(exp, row);
            if !order.contains(&name) {
                order.push(name.clone());
            }
            series.entry(name).or_default().push((size as f64, bw));
            if let Some(b) = row.bound_ns.filter(|&b| b > 0.0) {
                bound.insert(size, size as f64 / b);
            }
        }
        let mut lines: Vec<Series> = order
            .iter()
            .map(|name| Series {
                name: name.clone(),
                points: series[name].clone(),
                dashed: false,
            })
            .collect();
        if !bound.is_empty() {
            lines.push(Series {
                name: "lower bound".into(),
                points: bound.iter().map(|(&s, &bw)| (s as f64, bw)).collect(),
                dashed: true,
            });
        }
        let plot = LinePlot {
            title: format!("{collective} on {topology}"),
            x_label: "size per NPU".into(),
            y_label: "algorithm bandwidth (GB/s)".into(),
            log_x: true,
            x_format: |v| format_bytes_approx(v),
            y_max: None,
            series: lines,
        };
        let stem = if single {
            "sweep".to_string()
        } else {
            format!("sweep_{}_{}", slug(&topology), slug(&collective))
        };
        report::save_figure(&plot, out, &stem)?;
    }
    Ok(())
}

/// Grouped bars of algorithm bandwidth: one figure per collective and size, a group per
/// topology, a bar per series and one for the lower bound (the "ideal" of the papers' tables).
fn draw_bars(out: &mut OutputDir, exp: &Experiment, rows: &[RunRow]) -> Result<(), Error> {
    let mut by_collective: BTreeMap<(String, u64), Vec<&RunRow>> = BTreeMap::new();
    for row in rows {
        by_collective
            .entry((row.collective.clone(), row.size_bytes.unwrap_or(0)))
            .or_default()
            .push(row);
    }
    let single = by_collective.len() == 1;
    for ((collective, size), members) in by_collective {
        let mut groups: Vec<String> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for row in &members {
            if !groups.contains(&row.topology) {
                groups.push(row.topology.clone());
            }
            let name = series_name(exp, row);
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let mut series: Vec<(String, Vec<f64>)> = names
            .iter()
            .map(|n| (n.clone(), vec![0.0; groups.len()]))
            .collect();
        let mut bound = vec![0.0; groups.len()];
        for row in &members {
            let g = groups
                .iter()
                .position(|t| *t == row.topology)
                .expect("listed");
            let s = names
                .iter()
                .position(|n| *n == series_name(exp, row))
                .expect("listed");
            series[s].1[g] = row.algbw_gbps.unwrap_or(0.0);
            if let (Some(size), Some(b)) = (row.size_bytes, row.bound_ns.filter(|&b| b > 0.0)) {
                bound[g] = size as f64 / b;
            }
        }
        let references = usize::from(bound.iter().any(|&b| b > 0.0));
        if references == 1 {
            series.push(("lower bound".into(), bound));
        }
        let chart = BarChart {
            title: format!("{collective} of {}", format_bytes(size)),
            y_label: "algorithm bandwidth (GB/s)".into(),
            groups,
            series,
            stacked: false,
            references,
        };
        let stem = if single {
            "bars".to_string()
        } else {
            format!("bars_{}_{}", slug(&collective), slug(&format_bytes(size)))
        };
        report::save_figure(&chart, out, &stem)?;
    }
    Ok(())
}

/// Link utilisation over time, one figure per (topology, collective, size): a line per run, time
/// as a fraction of the fastest run's, as TACOS's Fig. 18 draws it; `utilization.csv` has each
/// run's mean busy fraction.
fn draw_utilization(
    out: &mut OutputDir,
    exp: &Experiment,
    rows: &[RunRow],
    busy: &HashMap<usize, (Vec<f64>, f64)>,
) -> Result<(), Error> {
    let mut groups: BTreeMap<(String, String, u64), Vec<&RunRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| busy.contains_key(&r.run)) {
        let key = (
            row.topology.clone(),
            row.collective.clone(),
            row.size_bytes.unwrap_or(0),
        );
        groups.entry(key).or_default().push(row);
    }
    let mut table =
        String::from("run,topology,collective,size_bytes,algorithm,mean_busy_fraction\n");
    for ((topology, collective, size), members) in groups {
        let fastest = members
            .iter()
            .map(|r| busy[&r.run].1)
            .fold(f64::INFINITY, f64::min)
            .max(1e-9);
        let mut series = Vec::new();
        for row in members {
            let (values, time) = &busy[&row.run];
            let bins = values.len().max(1) as f64;
            let mean = values.iter().sum::<f64>() / bins;
            table += &format!(
                "{},{topology},{collective},{size},{},{mean:.6}\n",
                row.run,
                series_name(exp, row)
            );
            series.push(report::Series {
                name: format!("{} (mean {:.1}%)", series_name(exp, row), 100.0 * mean),
                points: values
                    .iter()
                    .enumerate()
                    .map(|(b, &v)| ((b as f64 + 0.5) / bins * time / fastest, v))
                    .collect(),
                dashed: false,
            });
        }
        let plot = report::LinePlot {
            title: format!("{collective} of {} on {topology}", format_bytes(size)),
            x_label: "time / the fastest run's time".into(),
            y_label: "fraction of link capacity busy".into(),
            log_x: false,
            x_format: |v| format!("{v:.1}"),
            y_max: Some(1.05),
            series,
        };
        let stem = format!(
            "utilization_{}_{}_{}",
            slug(&topology),
            slug(&collective),
            slug(&format_bytes(size))
        );
        report::save_figure(&plot, out, &stem)?;
    }
    write_text(&out.file("utilization.csv"), &table)
}

/// A heat map per run, on one colour scale for the runs that share topology, collective, size,
/// chunks and seed, so that algorithms compare at a glance.
fn draw_heatmaps(
    out: &mut OutputDir,
    exp: &Experiment,
    rows: &[RunRow],
    loads: &dyn Fn(usize) -> Option<Vec<u64>>,
    skipped: &BTreeMap<usize, String>,
) -> Result<(), Error> {
    let plans = exp.plans();
    let mut stats: Vec<LinkStats> = Vec::new();
    let mut topologies: HashMap<usize, Topology> = HashMap::new();
    // Runs that share a colour scale: same topology, collective, size, chunks and seed.
    type Comparable = (usize, String, u64, Option<u32>, Option<u64>);
    let mut groups: BTreeMap<Comparable, Vec<(&RunRow, Heatmap)>> = BTreeMap::new();
    for row in rows {
        let Some(bytes) = loads(row.run) else {
            continue;
        };
        let plan = plans.get(row.run).ok_or_else(|| {
            Error::input(format!("run {} is not a run of this experiment", row.run))
        })?;
        if let std::collections::hash_map::Entry::Vacant(slot) = topologies.entry(plan.topology) {
            slot.insert(exp.topologies[plan.topology].build()?);
        }
        let topology = &topologies[&plan.topology];
        if bytes.len() != topology.links().len() {
            return Err(Error::input(format!(
                "run {}: {} link loads for a topology of {} links",
                row.run,
                bytes.len(),
                topology.links().len()
            )));
        }
        let values: Vec<f64> = bytes.iter().map(|&b| b as f64).collect();
        stats.push(LinkStats::new(row, &values));
        let title = format!(
            "{} of {} on {}, {}",
            row.collective,
            format_bytes(plan.size),
            row.topology,
            series_name(exp, row)
        );
        let map = Heatmap::from_loads(topology, &values, HeatMetric::Bytes, &title);
        groups
            .entry((
                plan.topology,
                row.collective.clone(),
                plan.size,
                plan.chunks,
                plan.seed,
            ))
            .or_default()
            .push((row, map));
    }
    let mut grid = HeatmapGrid {
        title: format!("{}: link loads", exp.name),
        row_names: Vec::new(),
        column_names: Vec::new(),
        maps: Vec::new(),
        blanks: Vec::new(),
    };
    let mut placed: Vec<(usize, usize, Heatmap)> = Vec::new();
    for members in groups.into_values() {
        let max = members
            .iter()
            .map(|(_, m)| m.max_cell())
            .fold(0.0, f64::max);
        let row_name = members[0].0.topology.clone();
        for (row, map) in members {
            let column = series_name(exp, row);
            let r = position_or_push(&mut grid.row_names, &row_name);
            let c = position_or_push(&mut grid.column_names, &column);
            placed.push((r, c, map.clone().with_scale(max)));
            let stem = format!(
                "heatmaps/{}_{}_{}_{}",
                slug(&row.topology),
                slug(&row.collective),
                slug(&format_bytes(row.size_bytes.unwrap_or(0))),
                slug(&series_name(exp, row))
            );
            report::save_figure(&map.with_scale(max), out, &stem)?;
        }
    }
    let path = out.file("heatmaps.csv");
    let mut text = String::from(
        "run,topology,collective,size_bytes,algorithm,max_link_bytes,mean_link_bytes,link_load_cv\n",
    );
    for s in &stats {
        text += &format!(
            "{},{},{},{},{},{:.0},{:.1},{:.6}\n",
            s.run, s.topology, s.collective, s.size, s.series, s.max, s.mean, s.cv
        );
    }
    write_text(&path, &text)?;
    // Runs that did not apply, in the cells of the networks and series drawn.
    let mut reasons: Vec<(usize, usize, String)> = Vec::new();
    for plan in plans.iter().filter(|p| skipped.contains_key(&p.index)) {
        let Some(topology) = topologies.get(&plan.topology) else {
            continue;
        };
        let column = series_label(exp, &plan.algorithm.label(), plan.chunks, plan.seed);
        if let Some(r) = grid.row_names.iter().position(|x| x == topology.name()) {
            let c = position_or_push(&mut grid.column_names, &column);
            reasons.push((r, c, skipped[&plan.index].clone()));
        }
    }
    let cols = grid.column_names.len();
    grid.maps = vec![None; grid.row_names.len() * cols];
    grid.blanks = vec![None; grid.row_names.len() * cols];
    for (r, c, map) in placed {
        grid.maps[r * cols + c] = Some(map);
    }
    for (r, c, reason) in reasons {
        if grid.maps[r * cols + c].is_none() {
            grid.blanks[r * cols + c] = Some(reason);
        }
    }
    if grid.maps.len() > 1 && grid.maps.len() <= 64 {
        report::save_figure(&grid, out, "heatmaps")?;
    }
    Ok(())
}

/// How hot and how even a run's link loads are: the busiest link, the mean over links, and the
/// coefficient of variation (0 = every link carries the same).
struct LinkStats {
    run: usize,
    topology: String,
    collective: String,
    size: u64,
    series: String,
    max: f64,
    mean: f64,
    cv: f64,
}

impl LinkStats {
    fn new(row: &RunRow, values: &[f64]) -> LinkStats {
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        LinkStats {
            run: row.run,
            topology: row.topology.clone(),
            collective: row.collective.clone(),
            size: row.size_bytes.unwrap_or(0),
            series: row.algorithm.clone(),
            max: values.iter().copied().fold(0.0, f64::max),
            mean,
            cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        }
    }
}

fn position_or_push(list: &mut Vec<String>, item: &str) -> usize {
    match list.iter().position(|x| x == item) {
        Some(i) => i,
        None => {
            list.push(item.to_string());
            list.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_runs_without_overlap() {
        let shards: Vec<Shard> = (0..3)
            .map(|i| Shard::parse(&format!("{i}/3")).unwrap())
            .collect();
        for run in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.takes(run)).count(), 1);
        }
        for bad in ["3/3", "1", "a/2", "0/0"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("mesh:8x8"), "mesh_8x8");
        assert_eq!(slug("2D Mesh (64)"), "2d_mesh_64");
    }
}
