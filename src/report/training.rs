//! Training-iteration reports: `breakdown.csv` and the stacked bars comparing algorithms.

use std::io::Write;
use std::path::Path;

use super::plot::BarChart;
use super::writer;
use crate::workload::Breakdown;
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
