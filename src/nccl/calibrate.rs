//! Fitting the NCCL model's free figures to measured nccl-tests results: the effective bandwidth
//! of each link class (into the box fabric, one NIC), the call's fixed cost, and per protocol a
//! factor on NCCL's per-hop latencies and on its share of the links' bandwidth. Least squares on
//! time, in relative terms (the logarithm of predicted over measured, so a 10 us call and a
//! 10 ms call weigh the same), by Nelder-Mead over the logarithms of the figures. NCCL's own
//! choice of algorithm and protocol per size is held fixed: NCCL chooses from what it detects,
//! and calibration corrects how the choice runs, not what is chosen.

use std::sync::atomic::{AtomicUsize, Ordering};

use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;
use rayon::prelude::*;

use super::algo::{Algo, Proto};
use super::constants::FIXED_OVERHEAD_US;
use super::{log, Launch, Model, Plan, Setting};
use crate::collective::CollectiveKind;
use crate::topology::{Calibration, Intra};
use crate::Error;

/// One measured size of one operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// nccl-tests' name of the operation.
    pub op: &'static str,
    pub kind: CollectiveKind,
    /// nccl-tests' size, bytes.
    pub size: u64,
    pub time_us: f64,
    /// Where it was read (`file:line`).
    pub source: String,
    /// How the call was run, where not on the whole system at NCCL's own choice.
    pub setting: Setting,
}

/// One row of a measured-calls table (see [`read_calls`]).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CallRow {
    op: String,
    gpus: Option<u32>,
    nccl_algo: Option<String>,
    nccl_proto: Option<String>,
    size: u64,
    time_us: f64,
}

/// The columns a table of measured calls may have (see [`read_calls`]).
const CALL_COLUMNS: [&str; 6] = ["op", "gpus", "nccl_algo", "nccl_proto", "size", "time_us"];

/// Reads a table of measured calls (CSV columns `op,gpus,nccl_algo,nccl_proto,size,time_us`;
/// `gpus`, `nccl_algo` and `nccl_proto` may be empty for the whole system at NCCL's choice; lines
/// starting with `#` are comments): the measurements nccl-tests logs cannot hold together, such
/// as one protocol's latency over GPU counts. `None` where `path` is no such table: not a `.csv`
/// file, or one whose header has columns the calls table has not (an nccl-tests table saved as
/// CSV: algbw, busbw, count, type). Errors name the file and line.
pub fn read_calls(path: &std::path::Path) -> Result<Option<Vec<Measurement>>, Error> {
    if !path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        return Ok(None);
    }
    let file = path.display().to_string();
    let text = crate::read_text(path, "cannot read measured calls")?;
    // Lines the CSV reader reads: not blank, not comments.
    let record = |l: &&str| !l.trim().is_empty() && !l.starts_with('#');
    let header = text.lines().find(record).unwrap_or("");
    if !header
        .split(',')
        .all(|c| CALL_COLUMNS.contains(&c.trim().trim_matches('"')))
    {
        return Ok(None);
    }
    // The file's line of each record (the reader's own count skips comment lines).
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| record(l))
        .map(|(i, _)| i + 1)
        .collect();
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| Error::input(format!("{file}: cannot read measured calls: {e}")))?
        .clone();
    let mut measured = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = lines.get(i + 1).copied().unwrap_or(0);
        let record = record.map_err(|e| Error::input(format!("{file}:{line}: {e}")))?;
        let at = |why: String| Error::input(format!("{file}:{line}: {why}"));
        let row: CallRow = record
            .deserialize(Some(&headers))
            .map_err(|e| at(e.to_string()))?;
        let op = log::OPS.iter().find(|o| **o == row.op).ok_or_else(|| {
            at(format!(
                "op '{}': expected one of {}",
                row.op,
                log::OPS.join(", ")
            ))
        })?;
        if !(row.time_us.is_finite() && row.time_us > 0.0) || row.size == 0 {
            return Err(at("size and time_us must be positive".into()));
        }
        let setting = Setting {
            gpus: row.gpus,
            nccl_algo: row.nccl_algo.filter(|s| !s.is_empty()),
            nccl_proto: row.nccl_proto.filter(|s| !s.is_empty()),
        };
        measured.push(Measurement {
            op,
            kind: log::kind(op)?,
            size: row.size,
            time_us: row.time_us,
            source: format!("{file}:{line}"),
            setting,
        });
    }
    if measured.is_empty() {
        return Err(Error::input(format!("{file}: no measured calls")));
    }
    Ok(Some(measured))
}

/// A figure calibration may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    IntraGbps,
    NicGbps,
    FixedUs,
    LatencyFactor(Proto),
    RateFactor(Proto),
}

/// The kinds of figure, as `calibrate --only` names them.
pub const KINDS: [&str; 5] = [
    "intra_gbps",
    "nic_gbps",
    "fixed_us",
    "latency_factor",
    "rate_factor",
];

impl Figure {
    /// Its kind, one of [`KINDS`].
    pub fn kind(self) -> &'static str {
        match self {
            Figure::IntraGbps => KINDS[0],
            Figure::NicGbps => KINDS[1],
            Figure::FixedUs => KINDS[2],
            Figure::LatencyFactor(_) => KINDS[3],
            Figure::RateFactor(_) => KINDS[4],
        }
    }

    /// The name it has in a system file's `calibrated` section.
    pub fn name(self) -> String {
        match self {
            Figure::IntraGbps => "intra_gbps".into(),
            Figure::NicGbps => "nic_gbps".into(),
            Figure::FixedUs => "fixed_us".into(),
            Figure::LatencyFactor(p) => format!("latency_factor.{}", p.name()),
            Figure::RateFactor(p) => format!("rate_factor.{}", p.name()),
        }
    }

    fn get(self, c: &Calibration) -> Option<f64> {
        match self {
            Figure::IntraGbps => c.intra_gbps,
            Figure::NicGbps => c.nic_gbps,
            Figure::FixedUs => c.fixed_us,
            Figure::LatencyFactor(p) => c.latency_factor.get(p as usize),
            Figure::RateFactor(p) => c.rate_factor.get(p as usize),
        }
    }

    fn set(self, c: &mut Calibration, value: f64) {
        match self {
            Figure::IntraGbps => c.intra_gbps = Some(value),
            Figure::NicGbps => c.nic_gbps = Some(value),
            Figure::FixedUs => c.fixed_us = Some(value),
            Figure::LatencyFactor(p) => c.latency_factor.set(p as usize, Some(value)),
            Figure::RateFactor(p) => c.rate_factor.set(p as usize, Some(value)),
        }
    }

    /// The value the model runs with before calibration.
    fn start(self, model: &Model) -> f64 {
        self.get(&model.system.calibration)
            .unwrap_or_else(|| match self {
                Figure::IntraGbps => model.system.nccl_intra_gbps(),
                Figure::NicGbps => model.booked_nic_gbps(Algo::Ring),
                Figure::FixedUs => FIXED_OVERHEAD_US,
                Figure::LatencyFactor(_) | Figure::RateFactor(_) => 1.0,
            })
    }

    /// How far (as a natural logarithm of the ratio to its start) the figure may move: a link
    /// class's bandwidth down to a twelfth and up to its line rate (no faster than the wire), a
    /// protocol's rate down to a twelfth and up 1.6 times, the others a twelfth to three times.
    fn reach(self, model: &Model, start: f64) -> (f64, f64) {
        let s = &model.system;
        let line = |gbps: f64| (gbps / start).ln().clamp(0.0, 1.1);
        match self {
            Figure::IntraGbps => (
                -2.5,
                line(s.links_per_gpu as f64 * s.link_line_rate.as_bytes_per_sec() / 1e9),
            ),
            Figure::NicGbps => (-2.5, line(s.nic_gbps())),
            Figure::RateFactor(_) => (-2.5, 0.5),
            _ => (-2.5, 1.1),
        }
    }
}

/// One measured size before and after calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct Residual {
    pub measurement: Measurement,
    pub algo: Algo,
    pub proto: Proto,
    pub before_us: f64,
    pub after_us: f64,
}

/// The outcome of a calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The calibration to write (the system's own, with the fitted figures replaced).
    pub calibration: Calibration,
    /// Each fitted figure: its value before and after.
    pub figures: Vec<(Figure, f64, f64)>,
    pub residuals: Vec<Residual>,
    /// Times the measured sizes were simulated.
    pub evaluations: usize,
}

/// The figures the measurements can tell apart: the fabric's bandwidth and the fixed cost
/// always, the NIC's when the system has more than one box, each protocol's latency when NCCL
/// chose it somewhere, and the LL / LL128 rates when NCCL chose them on Ring or Tree for a call
/// of 256 KiB or more (below, their bandwidth hardly shows).
fn free_figures(model: &Model, choices: &[(Algo, Proto, u64)]) -> Vec<Figure> {
    let mut figures = vec![Figure::IntraGbps, Figure::FixedUs];
    let s = &model.system;
    if s.boxes > 1 && s.nics_per_box > 0 && s.intra != Intra::Pcie {
        figures.push(Figure::NicGbps);
    }
    // NVLS's steps keep Simple's latency (see `Model::network`).
    let hop = |a: Algo, p: Proto| match a {
        Algo::Nvls | Algo::NvlsTree => Proto::Simple,
        _ => p,
    };
    for proto in Proto::ALL {
        if choices.iter().any(|&(a, p, _)| hop(a, p) == proto) {
            figures.push(Figure::LatencyFactor(proto));
        }
        let bandwidth_shows = choices.iter().any(|&(a, p, size)| {
            p == proto && matches!(a, Algo::Ring | Algo::Tree) && size >= 256 << 10
        });
        if proto != Proto::Simple && bandwidth_shows {
            figures.push(Figure::RateFactor(proto));
        }
    }
    figures
}

/// The problem Nelder-Mead solves: mean squared log error over the measurements, as a function
/// of the figures' log-ratios to their starts.
#[derive(Clone)]
struct Problem<'a> {
    model: &'a Model,
    /// The model of each way the calls were run, and the one of each measurement.
    models: &'a [Model],
    model_of: &'a [usize],
    /// Each measurement's call as planned once (the plan does not depend on the figures).
    plans: &'a [Plan],
    launch: Launch,
    measured: &'a [Measurement],
    figures: &'a [Figure],
    starts: Vec<f64>,
    /// Each figure's reach (see [`Figure::reach`]).
    reaches: Vec<(f64, f64)>,
    evaluations: &'a AtomicUsize,
    progress: &'a (dyn Fn(usize) + Sync),
}

impl Problem<'_> {
    fn calibration(&self, x: &[f64]) -> Calibration {
        let mut c = self.model.system.calibration.clone();
        for ((f, start), xi) in self.figures.iter().zip(&self.starts).zip(x) {
            f.set(&mut c, start * xi.exp());
        }
        c
    }

    /// Predicted times (us) of every measurement under `calibration`.
    fn predict(&self, calibration: &Calibration) -> Result<Vec<f64>, Error> {
        let models: Vec<Model> = self
            .models
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m.system.calibration = calibration.clone();
                m
            })
            .collect();
        let done = self.evaluations.fetch_add(1, Ordering::Relaxed) + 1;
        (self.progress)(done);
        self.plans
            .par_iter()
            .zip(self.model_of)
            .map(|(plan, &i)| {
                models[i]
                    .time(plan, self.launch)
                    .map(|p| p.time.as_ns_f64() / 1e3)
            })
            .collect()
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        // Outside a figure's reach the cost climbs with the distance, steering the simplex back.
        let mut outside = 0.0;
        let mut inside = x.clone();
        for ((xi, &(lo, hi)), clamped) in x.iter().zip(&self.reaches).zip(inside.iter_mut()) {
            *clamped = xi.clamp(lo, hi);
            outside += (xi - *clamped).abs();
        }
        let times = self.predict(&self.calibration(&inside))?;
        Ok(mean_square_log_error(&times, self.measured) + outside)
    }
}

fn mean_square_log_error(predicted: &[f64], measured: &[Measurement]) -> f64 {
    let sum: f64 = predicted
        .iter()
        .zip(measured)
        .map(|(p, m)| (p / m.time_us).ln().powi(2))
        .sum();
    sum / measured.len().max(1) as f64
}

/// Fits those of `model`'s free figures whose kind `kinds` names to `measured` (launched as
/// `launch`); `progress` hears the count of evaluations so far.
pub fn fit(
    model: &Model,
    launch: Launch,
    measured: &[Measurement],
    kinds: &[&str],
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Fit, Error> {
    if measured.is_empty() {
        return Err(Error::input("calibrate: no measured sizes to fit"));
    }
    let mut settings: Vec<&Setting> = Vec::new();
    let mut models = Vec::new();
    let mut model_of = Vec::with_capacity(measured.len());
    let mut choices = Vec::with_capacity(measured.len());
    for m in measured {
        let i = match settings.iter().position(|s| **s == m.setting) {
            Some(i) => i,
            None => {
                let run = m
                    .setting
                    .model(model)
                    .map_err(|e| Error::input(format!("{}: {e}", m.source)))?;
                settings.push(&m.setting);
                models.push(run);
                models.len() - 1
            }
        };
        model_of.push(i);
        let c = models[i]
            .choose(m.kind, m.size)
            .map_err(|e| Error::input(format!("{}: {e}", m.source)))?;
        choices.push((c.algo, c.proto, m.size));
    }
    let mut figures = free_figures(model, &choices);
    figures.retain(|f| kinds.contains(&f.kind()));
    if figures.is_empty() {
        return Err(Error::input(
            "calibrate: none of the --figures named can be told from these logs",
        ));
    }
    let plans = measured
        .par_iter()
        .zip(&model_of)
        .map(|(m, &i)| {
            models[i]
                .plan(m.kind, m.size, 0, launch)
                .map_err(|e| Error::input(format!("{}: {e}", m.source)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let evaluations = AtomicUsize::new(0);
    let starts: Vec<f64> = figures.iter().map(|f| f.start(model)).collect();
    let problem = Problem {
        model,
        models: &models,
        model_of: &model_of,
        plans: &plans,
        launch,
        measured,
        figures: &figures,
        reaches: figures
            .iter()
            .zip(&starts)
            .map(|(f, &start)| f.reach(model, start))
            .collect(),
        starts,
        evaluations: &evaluations,
        progress,
    };
    let before = problem.predict(&model.system.calibration)?;
    let n = figures.len();
    let mut simplex = vec![vec![0.0; n]];
    for i in 0..n {
        let mut v = vec![0.0; n];
        v[i] = -0.3;
        simplex.push(v);
    }
    let solver = NelderMead::new(simplex)
        .with_sd_tolerance(1e-7)
        .map_err(|e| Error::input(format!("calibrate: {e}")))?;
    let run = Executor::new(problem.clone(), solver)
        .configure(|state| state.max_iters(60 * n as u64))
        .run()
        .map_err(|e| match e.downcast::<Error>() {
            Ok(e) => e,
            Err(e) => Error::input(format!("calibrate: {e}")),
        })?;
    let best = run
        .state()
        .get_best_param()
        .cloned()
        .unwrap_or_else(|| vec![0.0; n]);
    let clamped: Vec<f64> = best
        .iter()
        .zip(&problem.reaches)
        .map(|(x, &(lo, hi))| x.clamp(lo, hi))
        .collect();
    let mut calibration = problem.calibration(&clamped);
    // Written to four decimals; the residuals are those of the figures as written.
    for f in &figures {
        if let Some(v) = f.get(&calibration) {
            f.set(&mut calibration, (v * 1e4).round().max(1.0) / 1e4);
        }
    }
    let after = problem.predict(&calibration)?;
    let residuals = measured
        .iter()
        .zip(&choices)
        .zip(before.iter().zip(&after))
        .map(|((m, &(algo, proto, _)), (&b, &a))| Residual {
            measurement: m.clone(),
            algo,
            proto,
            before_us: b,
            after_us: a,
        })
        .collect();
    let figures = figures
        .iter()
        .zip(&problem.starts)
        .map(|(&f, &start)| (f, start, f.get(&calibration).unwrap_or(start)))
        .collect();
    Ok(Fit {
        calibration,
        figures,
        residuals,
        evaluations: evaluations.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{GpuSystem, PerProtocol};

    /// Measurements the model itself predicts for a system whose figures are known recover those
    /// figures: a fabric at 80% of NCCL's figure, LL128 at 60% of its share and 1.5x its hop
    /// latency, all from the defaults.
    #[test]
    fn figures_the_model_was_run_with_are_recovered() {
        let mut system = GpuSystem::parse("dgx-a100:1").unwrap().unwrap();
        system.use_first_gpus(4).unwrap();
        let truth = Calibration {
            intra_gbps: Some(0.8 * system.nccl_intra_gbps()),
            fixed_us: Some(7.0),
            latency_factor: PerProtocol {
                ll: Some(1.0),
                ll128: Some(1.5),
                simple: Some(1.2),
            },
            rate_factor: PerProtocol {
                ll: Some(1.0),
                ll128: Some(0.6),
                simple: None,
            },
            ..Calibration::default()
        };
        let mut measuring = Model::new(&system);
        measuring.system.calibration = truth.clone();
        let launch = Launch::default();
        let measured: Vec<Measurement> = (13..=28)
            .step_by(1)
            .map(|log2| {
                let size = 1u64 << log2;
                let t = measuring
                    .predict(CollectiveKind::AllReduce, size, 0, launch)
                    .unwrap();
                Measurement {
                    op: "all_reduce",
                    kind: CollectiveKind::AllReduce,
                    size,
                    time_us: t.time.as_ns_f64() / 1e3,
                    source: format!("synthetic:{log2}"),
                    setting: Setting::default(),
                }
            })
            .collect();
        let model = Model::new(&system);
        let fit = fit(&model, launch, &measured, &KINDS, &|_| {}).unwrap();
        let worst_before = fit
            .residuals
            .iter()
            .map(|r| (r.before_us / r.measurement.time_us - 1.0).abs())
            .fold(0.0, f64::max);
        let worst_after = fit
            .residuals
            .iter()
            .map(|r| (r.after_us / r.measurement.time_us - 1.0).abs())
            .fold(0.0, f64::max);
        assert!(worst_before > 0.15, "the defaults are off: {worst_before}");
        assert!(
            worst_after < 0.02,
            "fitted to {worst_after}: {:?}",
            fit.figures
        );
        let intra = fit.calibration.intra_gbps.unwrap();
        assert!(
            (intra / truth.intra_gbps.unwrap() - 1.0).abs() < 0.03,
            "{intra}"
        );
        let ll128 = fit.calibration.rate_factor.ll128.unwrap();
        assert!((ll128 / 0.6 - 1.0).abs() < 0.05, "{ll128}");
        // One box: no NIC figure is fitted.
        assert!(fit.figures.iter().all(|(f, _, _)| *f != Figure::NicGbps));
    }
}
