//! Training-iteration reports: `breakdown.csv` and the stacked bars comparing algorithms.

use std::io::Write;
use std::path::Path;

use super::plot::{BarChart, Gantt};
use super::writer;
use crate::collective::CollectiveKind;
use crate::workload::{Breakdown, RankBreakdown, Span};
use crate::Error;

/// Columns of `breakdown.csv`.
pub const BREAKDOWN_HEADER: &str = "workload,algorithm,forward_compute_ns,backward_compute_ns,\
exposed_comm_ns,total_ns,exposed_data_parallel_ns,exposed_model_parallel_ns";

impl Breakdown {
    /// The CSV row matching [`BREAKDOWN_HEADER`].
    pub fn csv_row(&self) -> String {
        [
            self.workload.clone(),
            self.algorithm.clone(),
            self.forward_compute.ns_string(),
            self.backward_compute.ns_string(),
            self.exposed_comm.ns_string(),
            self.total.ns_string(),
            self.exposed_data_parallel.ns_string(),
            self.exposed_model_parallel.ns_string(),
        ]
        .join(",")
    }
}

/// Writes `breakdown.csv`: the header and one row per algorithm.
pub fn write_breakdown_csv(rows: &[Breakdown], path: &Path) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "{BREAKDOWN_HEADER}").map_err(io)?;
    for row in rows {
        writeln!(w, "{}", row.csv_row()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Stacked bars per algorithm: forward compute, backward compute, exposed data- and
/// model-parallel communication, in ms.
pub fn breakdown_chart(rows: &[Breakdown], title: &str) -> BarChart {
    let ms = |f: &dyn Fn(&Breakdown) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    BarChart {
        title: title.to_string(),
        y_label: "iteration time (ms)".into(),
        groups: rows.iter().map(|r| r.algorithm.clone()).collect(),
        series: vec![
            (
                "forward compute".into(),
                ms(&|r| r.forward_compute.as_secs_f64() * 1e3),
            ),
            (
                "backward compute".into(),
                ms(&|r| r.backward_compute.as_secs_f64() * 1e3),
            ),
            (
                "exposed data-parallel comm".into(),
                ms(&|r| r.exposed_data_parallel.as_secs_f64() * 1e3),
            ),
            (
                "exposed model-parallel comm".into(),
                ms(&|r| r.exposed_model_parallel.as_secs_f64() * 1e3),
            ),
        ],
        stacked: true,
        references: 0,
    }
}

/// The kinds of communication `ranks.csv` charges exposure to, in column order.
fn exposure_kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = CollectiveKind::ALL.iter().map(|k| k.name()).collect();
    kinds.push("send-recv");
    kinds
}

/// Writes `ranks.csv`: per algorithm and rank, compute, exposed communication (in all and per
/// kind), idle time and the rank's total.
pub fn write_ranks_csv(rows: &[(String, Vec<RankBreakdown>)], path: &Path) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    let kinds = exposure_kinds();
    let columns: Vec<String> = kinds
        .iter()
        .map(|k| format!("exposed_{}_ns", k.replace('-', "_")))
        .collect();
    writeln!(
        w,
        "algorithm,rank,compute_ns,exposed_comm_ns,{},idle_ns,total_ns",
        columns.join(",")
    )
    .map_err(io)?;
    for (algorithm, ranks) in rows {
        for r in ranks {
            let per_kind: Vec<String> = kinds
                .iter()
                .map(|k| {
                    r.exposed_by_kind
                        .iter()
                        .find(|(name, _)| name == k)
                        .map_or("0".to_string(), |(_, t)| t.ns_string())
                })
                .collect();
            let b = &r.breakdown;
            writeln!(
                w,
                "{algorithm},{},{},{},{},{},{}",
                r.rank,
                (b.forward_compute + b.backward_compute).ns_string(),
                b.exposed_comm.ns_string(),
                per_kind.join(","),
                r.idle.ns_string(),
                b.total.ns_string()
            )
            .map_err(io)?;
        }
    }
    w.flush().map_err(io)
}

/// Writes `timeline.json` in the Chrome trace event format (Perfetto, chrome://tracing): one
/// process per algorithm and rank, compute and communication on two threads of it.
pub fn write_timeline_json(
    rows: &[(String, Vec<Span>)],
    ranks: u32,
    path: &Path,
) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    write!(w, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[").map_err(io)?;
    let mut first = true;
    let mut event = |w: &mut dyn Write, text: String| -> std::io::Result<()> {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        w.write_all(text.as_bytes())
    };
    for (a, (algorithm, spans)) in rows.iter().enumerate() {
        for r in 0..ranks {
            let pid = a as u64 * ranks as u64 + r as u64;
            let label = serde_json::to_string(&format!("{algorithm}: rank {r}")).expect("a string");
            event(
                &mut w,
                format!("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{label}}}}}"),
            )
            .map_err(io)?;
            for (tid, name) in [(0, "compute"), (1, "communication")] {
                event(
                    &mut w,
                    format!("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"{name}\"}}}}"),
                )
                .map_err(io)?;
            }
        }
        for s in spans {
            let pid = a as u64 * ranks as u64 + s.rank as u64;
            let name = serde_json::to_string(&s.name).expect("a string");
            let us = |t: crate::units::Time| t.ps() as f64 / 1e6;
            event(
                &mut w,
                format!(
                    "{{\"ph\":\"X\",\"name\":{name},\"cat\":\"{}\",\"pid\":{pid},\"tid\":{},\"ts\":{},\"dur\":{}}}",
                    if s.compute { "compute" } else { "communication" },
                    u8::from(!s.compute),
                    us(s.start),
                    us(s.end) - us(s.start)
                ),
            )
            .map_err(io)?;
        }
    }
    writeln!(w, "]}}").map_err(io)?;
    w.flush().map_err(io)
}

/// The Gantt chart of one run's ranks: compute and communication spans over time.
pub fn timeline_chart(spans: &[Span], ranks: u32, title: &str) -> Gantt {
    let ms = |t: crate::units::Time| t.as_secs_f64() * 1e3;
    Gantt {
        title: title.to_string(),
        ranks,
        spans: spans
            .iter()
            .map(|s| (s.rank, s.compute, ms(s.start), ms(s.end)))
            .collect(),
    }
}
