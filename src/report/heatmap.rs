//! Per-link heat maps (TACOS Fig. 1 style): a source x destination matrix of what each link
//! carried, pale where idle and dark red where busiest, with cells that have no link in a neutral
//! grey. Networks of more than [`Heatmap::MAX_SIDE`] nodes are drawn by blocks of consecutive
//! nodes (whole rows, planes, ... on multi-dimensional shapes), so the picture stays readable; a
//! cell is then the mean over the links between its two blocks, so every cell, switch blocks
//! included, is on the one per-link scale.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::plot::{font, heat, DrawResult, Figure, NO_LINK};
use crate::sim::SimResult;
use crate::topology::{NodeId, Topology};
use crate::units::{nice_ticks, significant, ByteUnit};

/// What a heat map shows per link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeatMetric {
    /// Bytes carried.
    Bytes,
    /// Busy time over the collective time.
    Busy,
    /// Time during which a message waited for the link, over the collective time.
    Queued,
    /// The most messages the link held at once (1: none ever waited).
    MaxQueue,
}

impl HeatMetric {
    fn describe(self) -> &'static str {
        match self {
            HeatMetric::Bytes => "bytes carried",
            HeatMetric::Busy => "busy fraction",
            HeatMetric::Queued => "fraction of time with a queue",
            HeatMetric::MaxQueue => "most messages at once",
        }
    }

    /// `value` in the unit a scale up to `max` is labelled in.
    fn format(self, value: f64, max: f64) -> String {
        match self {
            HeatMetric::Bytes => ByteUnit::for_max(max).format(value),
            HeatMetric::Busy | HeatMetric::Queued => {
                format!("{}%", significant(value * 100.0, 3))
            }
            HeatMetric::MaxQueue => significant(value, 3).to_string(),
        }
    }

    /// Round tick values from 0 up to `max`, in the metric's own units.
    fn ticks(self, max: f64) -> Vec<f64> {
        match self {
            HeatMetric::Bytes => {
                let unit = ByteUnit::for_max(max).bytes;
                nice_ticks(max / unit).iter().map(|t| t * unit).collect()
            }
            HeatMetric::Busy | HeatMetric::Queued => {
                nice_ticks(max * 100.0).iter().map(|t| t / 100.0).collect()
            }
            HeatMetric::MaxQueue => nice_ticks(max),
        }
    }
}

/// A link-load matrix ready to draw.
#[derive(Clone, Debug)]
pub struct Heatmap {
    pub title: String,
    pub metric: HeatMetric,
    /// First node of each block; the last block runs to `nodes`.
    starts: Vec<NodeId>,
    nodes: NodeId,
    npus: NodeId,
    /// What each switch is ([`Topology::switch_names`]), for the axes.
    switch_names: Vec<String>,
    /// Row-major (source block, destination block): the mean over the links from one block to
    /// the other; None where no link joins them.
    cells: Vec<Option<f64>>,
    /// The value drawn darkest: the largest cell, or a maximum shared with other maps.
    scale_max: f64,
}

impl Heatmap {
    /// The largest matrix drawn node by node.
    pub const MAX_SIDE: usize = 64;

    /// Aggregates one simulation's per-link loads.
    pub fn new(
        topology: &Topology,
        result: &SimResult,
        metric: HeatMetric,
        title: &str,
    ) -> Heatmap {
        let finish = result.finish.ps().max(1) as f64;
        let values: Vec<f64> = match metric {
            HeatMetric::Bytes => result.link_bytes.iter().map(|&b| b as f64).collect(),
            HeatMetric::Busy => result
                .link_busy
                .iter()
                .map(|b| b.ps() as f64 / finish)
                .collect(),
            HeatMetric::Queued => result
                .link_queued
                .iter()
                .map(|b| b.ps() as f64 / finish)
                .collect(),
            HeatMetric::MaxQueue => result.link_max_queue.iter().map(|&q| q as f64).collect(),
        };
        Heatmap::from_loads(topology, &values, metric, title)
    }

    /// Aggregates per-link values, one per link of `topology` in its order.
    pub fn from_loads(
        topology: &Topology,
        values: &[f64],
        metric: HeatMetric,
        title: &str,
    ) -> Heatmap {
        let starts = block_starts(topology);
        let side = starts.len();
        let block_of = |v: NodeId| starts.partition_point(|&s| s <= v) - 1;
        let mut sums = vec![0.0f64; side * side];
        let mut counts = vec![0u32; side * side];
        for (link, value) in topology.links().iter().zip(values) {
            let cell = block_of(link.src) * side + block_of(link.dst);
            sums[cell] += value;
            counts[cell] += 1;
        }
        let cells: Vec<Option<f64>> = sums
            .iter()
            .zip(&counts)
            .map(|(&sum, &count)| (count > 0).then(|| sum / count as f64))
            .collect();
        let mut map = Heatmap {
            title: title.to_string(),
            metric,
            starts,
            nodes: topology.nodes(),
            npus: topology.npus(),
            switch_names: topology.switch_names(),
            cells,
            scale_max: 0.0,
        };
        map.scale_max = map.max_cell();
        map
    }

    /// The largest cell value.
    pub fn max_cell(&self) -> f64 {
        self.cells.iter().flatten().copied().fold(0.0, f64::max)
    }

    /// Draws against a maximum shared with other maps (so their colours compare).
    pub fn with_scale(mut self, max: f64) -> Heatmap {
        self.scale_max = max.max(self.max_cell());
        self
    }

    /// Matrix side: nodes, or blocks of nodes.
    pub fn side(&self) -> usize {
        self.starts.len()
    }

    /// Whether cells stand for blocks of several nodes.
    fn blocked(&self) -> bool {
        self.side() < self.nodes as usize
    }

    /// What a cell is and the value drawn darkest, as the figure states it.
    pub fn subtitle(&self) -> String {
        let what = if self.blocked() {
            format!(
                "mean {} per link between node blocks",
                self.metric.describe()
            )
        } else {
            format!("{} per link", self.metric.describe())
        };
        format!("{what} (darkest = {})", self.format(self.scale_max))
    }

    /// A value in the unit of this map's scale.
    fn format(&self, value: f64) -> String {
        self.metric.format(value, self.scale())
    }

    /// The colour bar's labels: (fraction of the scale, text), round values in one unit.
    fn bar_labels(&self) -> Vec<(f64, String)> {
        let scale = self.scale();
        self.metric
            .ticks(scale)
            .into_iter()
            .map(|t| (t / scale, self.format(t)))
            .collect()
    }

    /// The value drawn darkest (1 when every cell is zero).
    fn scale(&self) -> f64 {
        if self.scale_max > 0.0 {
            self.scale_max
        } else {
            1.0
        }
    }

    /// One filled square per cell, row 0 at the top.
    fn rectangles(&self) -> impl Iterator<Item = Rectangle<(i32, i32)>> + '_ {
        let side = self.side();
        let scale = self.scale();
        self.cells.iter().enumerate().map(move |(i, cell)| {
            let (row, col) = ((i / side) as i32, (i % side) as i32);
            let color = match cell {
                None => NO_LINK,
                Some(v) => heat(v / scale),
            };
            Rectangle::new([(col, row), (col + 1, row + 1)], color.filled())
        })
    }

    /// A vertical colour bar filling `area`, labelled with round values of this map's scale.
    fn draw_colour_bar<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let mut chart = ChartBuilder::on(area)
            .y_label_area_size(0)
            .x_label_area_size(0)
            .build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
        chart.draw_series((0..100).map(|k| {
            let lo = k as f64 / 100.0;
            Rectangle::new([(0.0, lo), (0.35, lo + 0.01)], heat(lo + 0.005).filled())
        }))?;
        for (f, text) in self.bar_labels() {
            chart.draw_series(std::iter::once(PathElement::new(
                [(0.35, f), (0.42, f)],
                BLACK.stroke_width(1),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                text,
                (0.46, f),
                font(12).pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Left,
                    plotters::style::text_anchor::VPos::Center,
                )),
            )))?;
        }
        Ok(())
    }

    fn label(&self, block: usize) -> String {
        let start = self.starts[block];
        let end = self.starts.get(block + 1).copied().unwrap_or(self.nodes);
        let name = |v: NodeId| match v.checked_sub(self.npus) {
            Some(s) => self.switch_names[s as usize].clone(),
            None => v.to_string(),
        };
        if end - start <= 1 {
            name(start)
        } else {
            format!("{}-{}", name(start), name(end - 1))
        }
    }
}

/// Block boundaries: one node per block on small networks; otherwise NPUs grouped by whole leading
/// dimensions where the shape has them (else evenly), and switches in blocks of their own.
fn block_starts(topology: &Topology) -> Vec<NodeId> {
    let (npus, nodes) = (topology.npus(), topology.nodes());
    if nodes as usize <= Heatmap::MAX_SIDE {
        return (0..nodes).collect();
    }
    let switches = nodes - npus;
    let switch_blocks = switches.min(16);
    let npu_blocks = Heatmap::MAX_SIDE as u32 - switch_blocks;
    let mut block = npus.div_ceil(npu_blocks);
    // Whole leading dimensions, unless that leaves too few blocks to show anything (one ring).
    let mut leading = 1u32;
    for dim in topology.dims() {
        leading *= dim.size;
        if leading >= block {
            let blocks = npus.div_ceil(leading);
            if blocks <= npu_blocks && blocks >= npu_blocks / 4 {
                block = leading;
            }
            break;
        }
    }
    let mut starts: Vec<NodeId> = (0..npus).step_by(block as usize).collect();
    if switches > 0 {
        let per = switches.div_ceil(switch_blocks);
        starts.extend((npus..nodes).step_by(per as usize));
    }
    starts
}

impl Figure for Heatmap {
    fn size(&self) -> (u32, u32) {
        (940, 820)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let side = self.side() as i32;
        let (main, bar) = root.split_horizontally(800);
        let (head, body) = main.split_vertically(64);
        head.draw(&Text::new(self.title.clone(), (70, 10), font(20)))?;
        head.draw(&Text::new(self.subtitle(), (70, 38), font(15)))?;
        let mut chart = ChartBuilder::on(&body)
            .margin(10)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0..side, side..0)?;
        let ticks = (side as usize).min(16);
        let step = (side as usize).div_ceil(ticks).max(1) as i32;
        let labels = |v: &i32| {
            if *v >= 0 && *v < side && v % step == 0 {
                self.label(*v as usize)
            } else {
                String::new()
            }
        };
        let (width, height) = chart.plotting_area().dim_in_pixel();
        let (cell_w, cell_h) = (width as i32 / side.max(1), height as i32 / side.max(1));
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_y_mesh()
            .x_labels(side as usize + 1)
            .y_labels(side as usize + 1)
            .x_label_formatter(&labels)
            .y_label_formatter(&labels)
            .x_label_offset(cell_w / 2)
            .y_label_offset(cell_h / 2)
            .x_desc("destination")
            .y_desc("source")
            .label_style(font(12))
            .axis_desc_style(font(15))
            .draw()?;
        chart.draw_series(self.rectangles())?;
        // Colour bar with the no-link swatch beneath it.
        let (bar_area, swatch) = bar.split_vertically(700);
        self.draw_colour_bar(&bar_area.margin(84, 20, 0, 8))?;
        swatch.draw(&Rectangle::new([(4, 10), (40, 34)], NO_LINK.filled()))?;
        swatch.draw(&Text::new("no link", (46, 14), font(13)))?;
        Ok(())
    }
}

/// Small multiples (TACOS Fig. 1): a row of heat maps per network, a column per algorithm. Each
/// map is drawn against the maximum of its row, so a row compares algorithms on one network.
pub struct HeatmapGrid {
    pub title: String,
    pub row_names: Vec<String>,
    pub column_names: Vec<String>,
    /// Row-major; None where a run is missing.
    pub maps: Vec<Option<Heatmap>>,
    /// Row-major, for cells without a map: why the run did not apply (written in the cell;
    /// an empty cell without one says there was no run).
    pub blanks: Vec<Option<String>>,
}

impl HeatmapGrid {
    const CELL: u32 = 260;
    /// Width of the colour-bar column at the right.
    const BAR: u32 = 130;
}

impl Figure for HeatmapGrid {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = (self.row_names.len() as u32, self.column_names.len() as u32);
        (
            150 + cols * Self::CELL + Self::BAR,
            110 + rows * (Self::CELL + 10),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let cols = self.column_names.len().max(1);
        let (head, body) = root.split_vertically(70);
        head.draw(&Text::new(self.title.clone(), (20, 10), font(20)))?;
        let blocked = self.maps.iter().flatten().any(Heatmap::blocked);
        let what = if blocked {
            "mean bytes per link between node blocks"
        } else {
            "bytes per link"
        };
        head.draw(&Text::new(
            format!("{what}; one colour scale per row (right), darkest = the row's busiest cell; grey: no link"),
            (20, 40),
            font(14),
        ))?;
        let (labels, rest) = body.split_horizontally(150);
        let (width, _) = rest.dim_in_pixel();
        let (grid, bars) = rest.split_horizontally(width.saturating_sub(Self::BAR));
        let rows = self.row_names.len().max(1);
        for (r, bar) in bars.split_evenly((rows, 1)).iter().enumerate() {
            let row = &self.maps[r * cols..((r + 1) * cols).min(self.maps.len())];
            if let Some(map) = row.iter().flatten().next() {
                map.draw_colour_bar(&bar.margin(32, 12, 6, 6))?;
            }
        }
        for (r, name) in self.row_names.iter().enumerate() {
            let y = r as i32 * (Self::CELL as i32 + 10) + Self::CELL as i32 / 2 + 30;
            labels.draw(&Text::new(name.clone(), (10, y), font(16)))?;
        }
        let cells = grid.split_evenly((rows, cols));
        for (i, area) in cells.iter().enumerate() {
            let (r, c) = (i / cols, i % cols);
            if r == 0 {
                area.draw(&Text::new(self.column_names[c].clone(), (8, 4), font(16)))?;
            }
            let Some(map) = self.maps.get(i).and_then(|m| m.as_ref()) else {
                let why = self.blanks.get(i).cloned().flatten();
                let lines = match &why {
                    Some(reason) => {
                        std::iter::once("does not apply:".to_string()).chain(wrap(reason, 34))
                    }
                    None => std::iter::once("no run".to_string()).chain(wrap("", 34)),
                };
                for (k, line) in lines.take(9).enumerate() {
                    area.draw(&Text::new(line, (12, 40 + 18 * k as i32), font(13)))?;
                }
                continue;
            };
            let side = map.side() as i32;
            let mut chart = ChartBuilder::on(area)
                .margin(6)
                .margin_top(26)
                .build_cartesian_2d(0..side, side..0)?;
            chart.draw_series(map.rectangles())?;
        }
        Ok(())
    }
}

/// `text` in lines of at most `width` characters, broken at spaces (a longer word on its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.len() + 1 + word.len() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;
    use crate::units::Time;

    fn result_for(t: &Topology, bytes: impl Fn(usize) -> u64) -> SimResult {
        SimResult {
            finish: Time::from_ns(100),
            link_bytes: (0..t.links().len()).map(bytes).collect(),
            link_busy: (0..t.links().len()).map(|_| Time::from_ns(50)).collect(),
            ..SimResult::default()
        }
    }

    #[test]
    fn small_networks_map_node_by_node_and_mark_missing_links() {
        let t = TopologyOptions::new("ring:4").build().unwrap();
        let map = Heatmap::new(
            &t,
            &result_for(&t, |l| l as u64 + 1),
            HeatMetric::Bytes,
            "x",
        );
        assert_eq!(map.side(), 4);
        let cell = |a: usize, b: usize| map.cells[a * 4 + b];
        let link = t.link_between(0, 1).unwrap() as f64;
        assert_eq!(cell(0, 1), Some(link + 1.0));
        assert_eq!(
            cell(0, 2),
            None,
            "0 and 2 are not neighbours on a ring of 4"
        );
        assert_eq!(cell(0, 0), None);
        assert_eq!(map.max_cell(), t.links().len() as f64);
        let busy = Heatmap::new(&t, &result_for(&t, |_| 1), HeatMetric::Busy, "x");
        assert_eq!(busy.max_cell(), 0.5);
        assert!(
            busy.cells.iter().flatten().all(|&c| c == 0.5),
            "every link equally busy"
        );
    }

    #[test]
    fn large_networks_are_drawn_by_blocks_of_mean_link_loads() {
        let t = TopologyOptions::new("mesh:32x32").build().unwrap();
        let map = Heatmap::new(&t, &result_for(&t, |_| 3), HeatMetric::Bytes, "x");
        assert_eq!(map.side(), 32, "one block per mesh row");
        assert!(
            map.cells.iter().flatten().all(|&c| c == 3.0),
            "a cell is the mean of its links, on the per-link scale"
        );
        assert!(map.subtitle().starts_with("mean bytes carried per link"));
        // One ring is not one block: 128 nodes by pairs.
        let ring = TopologyOptions::new("ring:128").build().unwrap();
        let map = Heatmap::new(
            &ring,
            &result_for(&ring, |l| l as u64),
            HeatMetric::Bytes,
            "x",
        );
        assert_eq!(map.side(), 64);
        assert!(map
            .subtitle()
            .ends_with(&format!("(darkest = {})", map.format(map.max_cell()))));
        let s = TopologyOptions::new("switch:512").build().unwrap();
        let map = Heatmap::new(&s, &result_for(&s, |_| 1), HeatMetric::Bytes, "x");
        assert!(map.side() <= Heatmap::MAX_SIDE);
        assert_eq!(map.label(map.side() - 1), "switch0");
    }
}
