//! Utilisation over time (TACOS Figs. 16b and 18 style): the fraction of link capacity that is
//! busy, in time bins over the collective, for all links and per dimension.

use std::io::Write;
use std::path::Path;

use super::plot::{LinePlot, Series};
use super::writer;
use crate::sim::SimResult;
use crate::topology::Topology;
use crate::Error;

/// Busy fraction per time bin, overall and per dimension.
#[derive(Clone, Debug)]
pub struct Utilization {
    /// Bin width in ns.
    pub bin_ns: f64,
    /// (name, busy fraction per bin): `all` first, then `dim 1 (Ring)`, ... on multi-dimensional
    /// networks.
    pub series: Vec<(String, Vec<f64>)>,
}

/// Bins a run is cut into.
pub const BINS: usize = 200;

impl Utilization {
    /// Needs the busy intervals the simulator records with `record_busy_intervals`.
    pub fn new(topology: &Topology, result: &SimResult, bins: usize) -> Utilization {
        let finish = result.finish.ps() as f64;
        let bins = bins.max(1);
        let width = if finish > 0.0 {
            finish / bins as f64
        } else {
            1.0
        };
        let dims = topology.dims();
        let dimensional = dims.len() > 1 && topology.links().iter().all(|l| l.dim.is_some());
        let groups = 1 + if dimensional { dims.len() } else { 0 };
        let mut busy = vec![vec![0.0f64; bins]; groups];
        let mut links = vec![0usize; groups];
        for (l, link) in topology.links().iter().enumerate() {
            let group = match link.dim {
                Some(d) if dimensional => 1 + d as usize,
                _ => 0,
            };
            links[0] += 1;
            if group > 0 {
                links[group] += 1;
            }
            let Some(intervals) = result.busy_intervals.get(l) else {
                continue;
            };
            for &(start, end) in intervals {
                let (s, e) = (start.ps() as f64, end.ps() as f64);
                let mut bin = ((s / width) as usize).min(bins - 1);
                while bin < bins && (bin as f64) * width < e {
                    let lo = (bin as f64 * width).max(s);
                    let hi = ((bin + 1) as f64 * width).min(e);
                    if hi > lo {
                        busy[0][bin] += hi - lo;
                        if group > 0 {
                            busy[group][bin] += hi - lo;
                        }
                    }
                    bin += 1;
                }
            }
        }
        let series = busy
            .into_iter()
            .zip(&links)
            .enumerate()
            .map(|(g, (sums, &count))| {
                let name = if g == 0 {
                    "all links".to_string()
                } else {
                    format!("dim {g} ({})", dims[g - 1].kind.name())
                };
                let capacity = count.max(1) as f64 * width;
                (name, sums.into_iter().map(|b| b / capacity).collect())
            })
            .collect();
        Utilization {
            bin_ns: width / 1e3,
            series,
        }
    }

    fn bins(&self) -> usize {
        self.series.first().map_or(0, |s| s.1.len())
    }

    /// `utilization.csv`: `start_ns,end_ns` and one busy-fraction column per series.
    pub fn write_csv(&self, path: &Path) -> Result<(), Error> {
        let io = |e| Error::io(path.display(), e);
        let mut w = writer(path)?;
        let names: Vec<String> = self
            .series
            .iter()
            .map(|(n, _)| {
                if n == "all links" {
                    "all".to_string()
                } else {
                    n.split(' ').take(2).collect::<Vec<_>>().join("")
                }
            })
            .collect();
        writeln!(w, "start_ns,end_ns,{}", names.join(",")).map_err(io)?;
        for b in 0..self.bins() {
            write!(
                w,
                "{:.3},{:.3}",
                b as f64 * self.bin_ns,
                (b + 1) as f64 * self.bin_ns
            )
            .map_err(io)?;
            for (_, values) in &self.series {
                write!(w, ",{:.6}", values[b]).map_err(io)?;
            }
            writeln!(w).map_err(io)?;
        }
        w.flush().map_err(io)
    }

    /// The figure: busy fraction against time (in us, or ms for long runs), one line per series.
    pub fn plot(&self, title: &str) -> LinePlot {
        let total_ns = self.bin_ns * self.bins() as f64;
        let (unit, ns_per_unit) = if total_ns >= 1e7 {
            ("ms", 1e6)
        } else {
            ("us", 1e3)
        };
        LinePlot {
            title: title.to_string(),
            x_label: format!("time ({unit})"),
            y_label: "fraction of link capacity busy".into(),
            log_x: false,
            x_format: |v| format!("{v}"),
            y_max: Some(1.05),
            series: self
                .series
                .iter()
                .map(|(name, values)| Series {
                    name: name.clone(),
                    points: values
                        .iter()
                        .enumerate()
                        .map(|(b, &v)| ((b as f64 + 0.5) * self.bin_ns / ns_per_unit, v))
                        .collect(),
                    dashed: false,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;
    use crate::units::Time;

    #[test]
    fn busy_time_is_spread_over_the_bins_it_covers() {
        let t = TopologyOptions::new("dims:ring4,switch2").build().unwrap();
        let mut intervals = vec![Vec::new(); t.links().len()];
        // One link busy for the first half of the run, nothing else.
        intervals[0] = vec![(Time::ZERO, Time::from_ns(50))];
        let result = SimResult {
            finish: Time::from_ns(100),
            busy_intervals: intervals,
            ..SimResult::default()
        };
        let u = Utilization::new(&t, &result, 4);
        assert_eq!(u.series.len(), 3, "all links and two dimensions");
        let links = t.links().len() as f64;
        assert_eq!(u.series[0].1, vec![1.0 / links, 1.0 / links, 0.0, 0.0]);
        let busy_total: f64 = u.series[0].1.iter().sum::<f64>() * 25.0 * links;
        assert_eq!(busy_total, 50.0);
        let dim = t.links()[0].dim.unwrap() as usize + 1;
        assert!(u.series[dim].1[0] > u.series[0].1[0]);
    }
}
