//! Reports: the summary row, per-transfer and per-link CSVs, heat maps, utilisation over time and
//! the figures of sweeps, experiments and training runs, all in a results folder that is either
//! complete or absent.

mod heatmap;
mod output_dir;
mod parquet;
mod plot;
mod progress;
mod training;
mod utilization;

pub use heatmap::{HeatMetric, Heatmap, HeatmapGrid};
pub use output_dir::{
    remove_partial_outputs_on_interrupt, remove_pending_outputs, OutputDir, LOCK, MANIFEST,
};
pub use parquet::{
    write_transfers_parquet, TransfersBegun, TransfersFile, LEADING_TRANSFER_COLUMNS,
};
pub use plot::{BarChart, LinePlot, Series};
pub(crate) use progress::progress_bar;
pub use progress::{
    check_progress_pace, Heartbeat, Milestones, Pace, ProgressLines, Steps,
    PROGRESS_SECONDS_VARIABLE,
};
pub use training::{
    breakdown_chart, timeline_chart, write_breakdown_csv, write_ranks_csv, write_timeline_json,
    BREAKDOWN_HEADER,
};
pub use utilization::{Utilization, BINS as UTILIZATION_BINS};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::schedule::{Schedule, TransferIndex};
use crate::sim::SimResult;
use crate::topology::Topology;
use crate::units::Time;
use crate::Error;

/// Columns of `summary.csv`, in DESIGN.md order, then collsim's extras.
pub const SUMMARY_HEADER: &str = "topology,npus,collective,algorithm,size_bytes,chunks_per_npu,\
collective_time_ns,algbw_GBps,busbw_GBps,bound_ns,efficiency,transfers,synthesis_ms,seed,time_model,\
link_utilization,dim_utilization,max_queue,queued_fraction";

/// One simulated run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub topology: String,
    pub npus: u32,
    /// Collective name, or `schedule` for an unclaimed schedule file.
    pub collective: String,
    pub algorithm: String,
    pub size_bytes: Option<u64>,
    pub chunks_per_npu: Option<u32>,
    pub collective_time: Time,
    /// nccl-tests bus-bandwidth factor of the collective.
    pub busbw_factor: Option<f64>,
    pub bound: Option<Time>,
    pub transfers: usize,
    pub synthesis_ms: Option<f64>,
    pub seed: Option<u64>,
    pub time_model: String,
    /// Mean over links of busy time / collective time.
    pub link_utilization: f64,
    /// The same per dimension of a multi-dimensional network (empty otherwise).
    pub dim_utilization: Vec<f64>,
    /// The most messages any link held at once (1: no message ever waited for a link).
    pub max_queue: u32,
    /// Mean over links of the time a message waited for the link / collective time.
    pub queued_fraction: f64,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

impl Summary {
    /// Size over time, in 1e9 bytes per second.
    pub fn algbw_gbps(&self) -> Option<f64> {
        let secs = self.collective_time.as_secs_f64();
        self.size_bytes
            .filter(|_| secs > 0.0)
            .map(|s| s as f64 / secs / 1e9)
    }

    pub fn busbw_gbps(&self) -> Option<f64> {
        Some(self.algbw_gbps()? * self.busbw_factor?)
    }

    /// Bound over time, at most 1: the simulator rounds each hop's delay to the picosecond, so a
    /// schedule may meet its bound to within a few picoseconds of it, which is 1
    /// ([`Summary::check`] refuses anything beyond that).
    pub fn efficiency(&self) -> Option<f64> {
        let t = self.collective_time.ps();
        self.bound
            .filter(|_| t > 0)
            .map(|b| (b.ps() as f64 / t as f64).min(1.0))
    }

    /// The invariants every reported summary keeps: its times are in range, and neither its
    /// efficiency nor its utilisation passes 1 (beyond the picoseconds of rounding).
    pub fn check(&self) -> Result<(), Error> {
        if self.collective_time == Time::ZERO && self.transfers > 0 {
            return Err(Error::input(
                "the collective takes less than a picosecond, collsim's time resolution: give \
                 a larger size, slower links or longer latencies",
            ));
        }
        if let Some(bound) = self.bound.filter(|b| !b.fits()) {
            return Err(Error::input(format!(
                "the lower bound ({bound}) passes the largest time collsim represents (2^64 ps, \
                 about 213 days): give a smaller size or faster links"
            )));
        }
        let t = self.collective_time.ps() as f64;
        if let Some(bound) = self.bound {
            let slack = 1e3 * self.transfers.max(1) as f64;
            if bound.ps() as f64 > t + slack {
                return Err(Error::Internal(format!(
                    "the lower bound {bound} exceeds the simulated time {}",
                    self.collective_time
                )));
            }
        }
        let utilizations =
            std::iter::once(self.link_utilization).chain(self.dim_utilization.iter().copied());
        for u in utilizations {
            if !(0.0..=1.0 + 1e-9).contains(&u) {
                return Err(Error::Internal(format!(
                    "a link utilisation of {u} is not a fraction"
                )));
            }
        }
        Ok(())
    }

    /// The CSV row matching [`SUMMARY_HEADER`].
    pub fn csv_row(&self) -> String {
        let f =
            |v: Option<f64>, digits: usize| v.map(|x| format!("{x:.digits$}")).unwrap_or_default();
        let quote = csv_field;
        [
            quote(&self.topology),
            self.npus.to_string(),
            quote(&self.collective),
            quote(&self.algorithm),
            opt(self.size_bytes),
            opt(self.chunks_per_npu),
            self.collective_time.ns_string(),
            f(self.algbw_gbps(), 6),
            f(self.busbw_gbps(), 6),
            self.bound.map(Time::ns_string).unwrap_or_default(),
            f(self.efficiency(), 6),
            self.transfers.to_string(),
            f(self.synthesis_ms, 3),
            opt(self.seed),
            self.time_model.clone(),
            format!("{:.6}", self.link_utilization),
            self.dim_utilization
                .iter()
                .map(|u| format!("{u:.6}"))
                .collect::<Vec<_>>()
                .join(";"),
            self.max_queue.to_string(),
            format!("{:.6}", self.queued_fraction),
        ]
        .join(",")
    }

    /// One line naming the run, for figure titles.
    pub fn title(&self) -> String {
        let size = self
            .size_bytes
            .map(|s| format!(" of {}", crate::units::format_bytes(s)))
            .unwrap_or_default();
        format!(
            "{}{size} on {}, {}",
            self.collective, self.topology, self.algorithm
        )
    }

    /// A few human-readable lines for the terminal.
    pub fn human(&self) -> String {
        let mut out = format!(
            "{} on {} ({} NPUs), algorithm {}\n",
            self.collective, self.topology, self.npus, self.algorithm
        );
        if let Some(size) = self.size_bytes {
            out += &format!(
                "  size            {} ({size} B)\n",
                crate::units::format_bytes(size)
            );
        }
        if let Some(chunks) = self.chunks_per_npu {
            out += &format!("  chunks          {chunks} per NPU\n");
        }
        out += &format!("  transfers       {}\n", self.transfers);
        out += &format!("  collective time {}\n", self.collective_time);
        if let (Some(a), Some(b)) = (self.algbw_gbps(), self.busbw_gbps()) {
            out += &format!("  algbw / busbw   {a:.3} / {b:.3} GB/s\n");
        }
        if let (Some(bound), Some(e)) = (self.bound, self.efficiency()) {
            out += &format!("  lower bound     {bound} (efficiency {e:.3})\n");
        }
        out += &format!(
            "  link busy       {:.1}% of the time on average",
            self.link_utilization * 100.0
        );
        if !self.dim_utilization.is_empty() {
            let dims: Vec<String> = self
                .dim_utilization
                .iter()
                .enumerate()
                .map(|(d, u)| format!("dim {} {:.1}%", d + 1, u * 100.0))
                .collect();
            out += &format!(" ({})", dims.join(", "));
        }
        out += "\n";
        out += &format!(
            "  link queues     at most {} message(s) at a link; one waiting {:.1}% of the time on \
             average\n",
            self.max_queue,
            self.queued_fraction * 100.0
        );
        if let Some(ms) = self.synthesis_ms {
            out += &format!("  synthesis       {ms:.1} ms\n");
        }
        out
    }
}

pub(crate) fn writer(path: &Path) -> Result<BufWriter<File>, Error> {
    Ok(BufWriter::with_capacity(
        1 << 20,
        File::create(path).map_err(|e| Error::io(path.display(), e))?,
    ))
}

/// Writes `summary.csv`: the header and one row per summary.
pub fn write_summary_csv(rows: &[Summary], path: &Path) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "{SUMMARY_HEADER}").map_err(io)?;
    for row in rows {
        writeln!(w, "{}", row.csv_row()).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Writes `transfers.csv` (`id,src,dst,bytes,start_ns,end_ns`), streaming from the recorded times;
/// start is when the transfer was issued, end when it completed at its destination.
pub fn write_transfers_csv(
    schedule: &Schedule,
    result: &SimResult,
    path: &Path,
) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "id,src,dst,bytes,start_ns,end_ns").map_err(io)?;
    for i in 0..schedule.len() {
        let t = schedule.transfer(i as TransferIndex);
        writeln!(
            w,
            "{},{},{},{},{},{}",
            schedule.id(i as TransferIndex),
            t.src,
            t.dst,
            t.bytes,
            result.issued(schedule, i as TransferIndex).ns_string(),
            result.completed[i].ns_string()
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Writes `links.csv` (`src,dst,bytes,busy_ns,utilization,max_queue,queued_ns`): utilisation is
/// busy time over the collective time; `max_queue` the most messages the link held at once, and
/// `queued_ns` the time a message waited for it.
pub fn write_links_csv(topology: &Topology, result: &SimResult, path: &Path) -> Result<(), Error> {
    let load = LinkLoad {
        bytes: &result.link_bytes,
        busy: &result.link_busy,
        max_queue: &result.link_max_queue,
        queued: &result.link_queued,
    };
    write_link_load_csv(topology, &load, result.finish, path)
}

/// What each link of a topology carried (one entry per link, in the topology's order).
pub struct LinkLoad<'a> {
    pub bytes: &'a [u64],
    pub busy: &'a [Time],
    pub max_queue: &'a [u32],
    pub queued: &'a [Time],
}

/// Writes `links.csv` from per-link loads, utilisation over `total`.
pub fn write_link_load_csv(
    topology: &Topology,
    load: &LinkLoad,
    total: Time,
    path: &Path,
) -> Result<(), Error> {
    let io = |e| Error::io(path.display(), e);
    let mut w = writer(path)?;
    writeln!(w, "src,dst,bytes,busy_ns,utilization,max_queue,queued_ns").map_err(io)?;
    let total = total.ps() as f64;
    for (l, link) in topology.links().iter().enumerate() {
        let busy = load.busy[l];
        let utilization = if total > 0.0 {
            busy.ps() as f64 / total
        } else {
            0.0
        };
        writeln!(
            w,
            "{},{},{},{},{:.6},{},{}",
            link.src,
            link.dst,
            load.bytes[l],
            busy.ns_string(),
            utilization,
            load.max_queue[l],
            load.queued[l].ns_string()
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Saves a figure as `stem.png` and `stem.svg` into the results folder.
pub(crate) fn save_figure(
    figure: &impl plot::Figure,
    out: &mut OutputDir,
    stem: &str,
) -> Result<(), Error> {
    plot::save_png(figure, &out.file(&format!("{stem}.png")))?;
    plot::save_svg(figure, &out.file(&format!("{stem}.svg")))
}

/// A CSV field: quoted when it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_and_efficiency_follow_their_definitions() {
        let s = Summary {
            size_bytes: Some(2_000_000_000),
            collective_time: Time::from_ns(1_000_000_000),
            busbw_factor: Some(1.5),
            bound: Some(Time::from_ns(500_000_000)),
            ..Summary::default()
        };
        assert_eq!(s.algbw_gbps(), Some(2.0));
        assert_eq!(s.busbw_gbps(), Some(3.0));
        assert_eq!(s.efficiency(), Some(0.5));
        assert_eq!(
            s.csv_row().split(',').count(),
            SUMMARY_HEADER.split(',').count()
        );
    }
}
