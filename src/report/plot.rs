//! Figures for papers: every figure is drawn once through a backend-generic [`Figure`] and saved as
//! PNG and SVG. Text uses an embedded OFL font (Liberation Sans), so plots render on machines with
//! no system fonts at all.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::Error;

static FONT: &[u8] = include_bytes!("../../assets/fonts/LiberationSans-Regular.ttf");
/// The family name the embedded font is registered under.
pub(crate) const FONT_FAMILY: &str = "sans-serif";

fn ensure_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font is compiled in; failing to parse it is a build defect, caught by the tests.
        let _ = plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT);
    });
}

/// Okabe-Ito colours (distinguishable with colour-vision deficiencies), black first.
pub(crate) const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 0, 0),
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
];

pub(crate) fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Cells without a link: a neutral grey that no value of the heat scale takes.
pub(crate) const NO_LINK: RGBColor = RGBColor(215, 215, 222);

/// Heat scale from pale yellow (idle) through orange to dark red (the busiest).
pub(crate) fn heat(fraction: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 5] = [
        (255.0, 255.0, 204.0),
        (254.0, 217.0, 118.0),
        (253.0, 141.0, 60.0),
        (227.0, 26.0, 28.0),
        (128.0, 0.0, 38.0),
    ];
    let x = fraction.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

pub(crate) type DrawResult<DB> =
    Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A figure that can be drawn on any plotters backend.
pub(crate) trait Figure {
    /// Width and height in pixels (SVG units).
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
}

fn drawing_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::io(
        path.display(),
        std::io::Error::other(format!("cannot draw the figure: {e}")),
    )
}

/// Saves the figure as a PNG at `path`.
pub(crate) fn save_png(figure: &impl Figure, path: &Path) -> Result<(), Error> {
    ensure_font();
    let root = BitMapBackend::new(path, figure.size()).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing_error(path, e))?;
    figure.draw(&root).map_err(|e| drawing_error(path, e))?;
    root.present().map_err(|e| drawing_error(path, e))
}

/// Saves the figure as an SVG at `path`.
pub(crate) fn save_svg(figure: &impl Figure, path: &Path) -> Result<(), Error> {
    ensure_font();
    let root = SVGBackend::new(path, figure.size()).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing_error(path, e))?;
    figure.draw(&root).map_err(|e| drawing_error(path, e))?;
    root.present().map_err(|e| drawing_error(path, e))
}

pub(crate) fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT_FAMILY, size as f64).into_font())
}

/// How one legend entry is drawn: a line sample (its colour, dashes and marker) or a bar swatch.
#[derive(Clone, Copy)]
enum Swatch {
    Line(LineStyle),
    Bar(RGBColor),
}

/// Legend entries in a column of their own beside the plot, so they never cover data.
fn draw_legend_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, Swatch)],
) -> DrawResult<DB> {
    let top = 70;
    for (i, (name, swatch)) in entries.iter().enumerate() {
        let y = top + 26 * i as i32;
        match swatch {
            Swatch::Line(style) => {
                let samples = [(4, y), (22, y), (40, y)];
                if let Some((dash, gap)) = style.dashes {
                    let mut x = 4;
                    while x < 40 {
                        let end = (x + dash).min(40);
                        area.draw(&PathElement::new(
                            [(x, y), (end, y)],
                            style.color.stroke_width(2),
                        ))?;
                        x = end + gap;
                    }
                } else {
                    area.draw(&PathElement::new(samples, style.color.stroke_width(2)))?;
                }
                draw_marker(area, style, (22, y))?;
            }
            Swatch::Bar(color) => {
                area.draw(&Rectangle::new([(12, y - 7), (30, y + 7)], color.filled()))?;
            }
        }
        area.draw(&Text::new(
            name.clone(),
            (48, y),
            font(14).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// Pixel width of a legend column for these names.
fn legend_width<'a>(names: impl Iterator<Item = &'a String>) -> u32 {
    let longest = names.map(|n| n.chars().count()).max().unwrap_or(0) as u32;
    (56 + 8 * longest).clamp(110, 320)
}

/// Colour, dashes and marker of series `i`: each differs from its neighbours in all three, so
/// lines stay apart in greyscale and for readers who cannot tell the colours apart.
#[derive(Clone, Copy)]
struct LineStyle {
    color: RGBColor,
    /// (dash, gap) in pixels; None for a solid line.
    dashes: Option<(i32, i32)>,
    marker: Marker,
}

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Diamond,
    Cross,
    None,
}

impl LineStyle {
    fn of(i: usize, reference: bool) -> LineStyle {
        if reference {
            // Bounds and other references: grey, dashed, no marker.
            return LineStyle {
                color: RGBColor(110, 110, 110),
                dashes: Some((8, 5)),
                marker: Marker::None,
            };
        }
        const DASHES: [Option<(i32, i32)>; 4] = [None, Some((12, 5)), Some((3, 4)), Some((18, 4))];
        const MARKERS: [Marker; 5] = [
            Marker::Circle,
            Marker::Triangle,
            Marker::Square,
            Marker::Diamond,
            Marker::Cross,
        ];
        LineStyle {
            color: palette(i),
            dashes: DASHES[i % DASHES.len()],
            marker: MARKERS[i % MARKERS.len()],
        }
    }
}

/// Draws `style`'s marker centred on pixel `at` of `area`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    style: &LineStyle,
    at: (i32, i32),
) -> DrawResult<DB> {
    let fill = style.color.filled();
    match style.marker {
        Marker::Circle => area.draw(&Circle::new(at, 4, fill)),
        Marker::Triangle => area.draw(&TriangleMarker::new(at, 5, fill)),
        Marker::Square => area.draw(&Rectangle::new(
            [(at.0 - 4, at.1 - 4), (at.0 + 4, at.1 + 4)],
            fill,
        )),
        Marker::Diamond => area.draw(&Polygon::new(
            vec![
                (at.0, at.1 - 5),
                (at.0 + 5, at.1),
                (at.0, at.1 + 5),
                (at.0 - 5, at.1),
            ],
            fill,
        )),
        Marker::Cross => area.draw(&Cross::new(at, 4, style.color.stroke_width(2))),
        Marker::None => Ok(()),
    }
}

/// One named line of a [`LinePlot`].
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed, for bounds and other references.
    pub dashed: bool,
}

/// Lines against a (possibly logarithmic) x axis: size sweeps, utilisation over time.
#[derive(Clone, Debug)]
pub struct LinePlot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    /// Formats x tick values (sizes as bytes, times as ns).
    pub x_format: fn(f64) -> String,
    pub y_max: Option<f64>,
    pub series: Vec<Series>,
}

impl LinePlot {
    fn x_range(&self) -> (f64, f64) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        if !lo.is_finite() {
            return (1.0, 2.0);
        }
        if hi > lo {
            (lo, hi)
        } else if self.log_x {
            (lo / 2.0, hi * 2.0)
        } else {
            (lo - 1.0, hi + 1.0)
        }
    }

    fn y_top(&self) -> f64 {
        self.y_max.unwrap_or_else(|| {
            let top = self
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .fold(0.0f64, f64::max);
            if top > 0.0 {
                top * 1.1
            } else {
                1.0
            }
        })
    }

    /// Smallest and largest positive y: lines spanning orders of magnitude get a log axis.
    fn y_positive_range(&self) -> Option<(f64, f64)> {
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|&y| y > 0.0);
        let (lo, hi) = ys.fold((f64::INFINITY, 0.0f64), |(lo, hi), y| {
            (lo.min(y), hi.max(y))
        });
        (lo.is_finite() && hi / lo > 100.0).then_some((lo, hi))
    }

    fn draw_on<'a, DB, X, Y>(
        &self,
        mut chart: ChartContext<'a, DB, Cartesian2d<X, Y>>,
        log_y: bool,
    ) -> DrawResult<DB>
    where
        DB: DrawingBackend + 'a,
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let x_format = self.x_format;
        let y_label = if log_y {
            format!("{} (log scale)", self.y_label)
        } else {
            self.y_label.clone()
        };
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(y_label)
            .label_style(font(14))
            .axis_desc_style(font(16))
            .x_label_formatter(&|v| x_format(*v))
            .light_line_style(BLACK.mix(0.05))
            .draw()?;
        for (s, style) in self.series.iter().zip(self.styles()) {
            let stroke = style.color.stroke_width(2);
            let points = s.points.iter().copied();
            match style.dashes {
                Some((dash, gap)) => {
                    chart.draw_series(DashedLineSeries::new(
                        points,
                        dash as u32,
                        gap as u32,
                        stroke,
                    ))?;
                }
                None => {
                    chart.draw_series(LineSeries::new(points, stroke))?;
                }
            }
            // Every point of a short series, a dozen spread over a long one.
            let every = if s.points.len() <= 40 {
                1
            } else {
                s.points.len() / 12
            };
            let marked: Vec<(f64, f64)> = s.points.iter().copied().step_by(every).collect();
            let fill = style.color.filled();
            match style.marker {
                Marker::Circle => {
                    chart.draw_series(
                        marked
                            .iter()
                            .map(|&p| EmptyElement::at(p) + Circle::new((0, 0), 4, fill)),
                    )?;
                }
                Marker::Triangle => {
                    chart.draw_series(
                        marked
                            .iter()
                            .map(|&p| EmptyElement::at(p) + TriangleMarker::new((0, 0), 5, fill)),
                    )?;
                }
                Marker::Square => {
                    chart.draw_series(marked.iter().map(|&p| {
                        EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], fill)
                    }))?;
                }
                Marker::Diamond => {
                    chart.draw_series(marked.iter().map(|&p| {
                        EmptyElement::at(p)
                            + Polygon::new(vec![(0, -5), (5, 0), (0, 5), (-5, 0)], fill)
                    }))?;
                }
                Marker::Cross => {
                    chart.draw_series(
                        marked
                            .iter()
                            .map(|&p| EmptyElement::at(p) + Cross::new((0, 0), 4, stroke)),
                    )?;
                }
                Marker::None => {}
            }
        }
        Ok(())
    }

    /// Each series' look: references grey and dashed, the others by their position among the rest.
    fn styles(&self) -> Vec<LineStyle> {
        let mut k = 0;
        self.series
            .iter()
            .map(|s| {
                let style = LineStyle::of(k, s.dashed);
                k += usize::from(!s.dashed);
                style
            })
            .collect()
    }
}

impl Figure for LinePlot {
    fn size(&self) -> (u32, u32) {
        (960 + legend_width(self.series.iter().map(|s| &s.name)), 600)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (lo, hi) = self.x_range();
        let entries: Vec<(String, Swatch)> = self
            .series
            .iter()
            .zip(self.styles())
            .map(|(s, style)| (s.name.clone(), Swatch::Line(style)))
            .collect();
        let (width, _) = root.dim_in_pixel();
        let (root, legend) =
            root.split_horizontally(width - legend_width(self.series.iter().map(|s| &s.name)));
        draw_legend_panel(&legend, &entries)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&self.title, font(20))
            .margin(16)
            .margin_right(40)
            .x_label_area_size(50)
            .y_label_area_size(80);
        let log_y = self.y_positive_range().filter(|_| self.y_max.is_none());
        match (self.log_x, log_y) {
            (true, Some((ylo, yhi))) => self.draw_on(
                builder
                    .build_cartesian_2d((lo..hi).log_scale(), (ylo / 2.0..yhi * 2.0).log_scale())?,
                true,
            ),
            (false, Some((ylo, yhi))) => self.draw_on(
                builder.build_cartesian_2d(lo..hi, (ylo / 2.0..yhi * 2.0).log_scale())?,
                true,
            ),
            (true, None) => self.draw_on(
                builder.build_cartesian_2d((lo..hi).log_scale(), 0.0..self.y_top())?,
                false,
            ),
            (false, None) => self.draw_on(
                builder.build_cartesian_2d(lo..hi, 0.0..self.y_top())?,
                false,
            ),
        }
    }
}

/// Bars per group, side by side (`stacked: false`, one bar per series) or stacked (one bar per
/// group made of the series' segments).
#[derive(Clone, Debug)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    /// (name, one value per group).
    pub series: Vec<(String, Vec<f64>)>,
    pub stacked: bool,
    /// How many of the last series are references (a lower bound): drawn grey, so that no
    /// algorithm's colour is mistaken for the bound.
    pub references: usize,
}

impl Figure for BarChart {
    fn size(&self) -> (u32, u32) {
        let width = (160 + 130 * self.groups.len() as u32).clamp(800, 1600);
        (width + legend_width(self.series.iter().map(|s| &s.0)), 600)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let entries: Vec<(String, Swatch)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), Swatch::Bar(self.colour(i))))
            .collect();
        let (width, _) = root.dim_in_pixel();
        let (root, legend) =
            root.split_horizontally(width - legend_width(self.series.iter().map(|s| &s.0)));
        draw_legend_panel(&legend, &entries)?;
        let root = &root;
        let groups = self.groups.len().max(1);
        let totals: Vec<f64> = (0..groups)
            .map(|g| {
                let values = self
                    .series
                    .iter()
                    .map(|(_, v)| v.get(g).copied().unwrap_or(0.0));
                if self.stacked {
                    values.sum::<f64>()
                } else {
                    values.fold(0.0, f64::max)
                }
            })
            .collect();
        let top = totals.iter().copied().fold(0.0f64, f64::max);
        let smallest = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|&v| v > 0.0)
            .fold(f64::INFINITY, f64::min);
        // Side-by-side bars that span orders of magnitude get a logarithmic axis.
        let log_y = !self.stacked && smallest.is_finite() && top / smallest > 100.0;
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(&self.title, font(20))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(90);
        let names = self.groups.clone();
        let group_label = move |x: &f64| {
            let g = (*x - 0.5).round();
            if (x - 0.5 - g).abs() < 1e-6 && g >= 0.0 && (g as usize) < names.len() {
                names[g as usize].clone()
            } else {
                String::new()
            }
        };
        if log_y {
            let floor = smallest / 2.0;
            let mut chart =
                builder.build_cartesian_2d(0.0..groups as f64, (floor..top * 1.5).log_scale())?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(groups * 2 + 1)
                .x_label_formatter(&group_label)
                .y_desc(format!("{} (log scale)", self.y_label))
                .label_style(font(14))
                .axis_desc_style(font(16))
                .light_line_style(BLACK.mix(0.05))
                .draw()?;
            self.draw_bars(&mut chart, floor)
        } else {
            let top = if top > 0.0 { top * 1.1 } else { 1.0 };
            let mut chart = builder.build_cartesian_2d(0.0..groups as f64, 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(groups * 2 + 1)
                .x_label_formatter(&group_label)
                .y_desc(&self.y_label)
                .label_style(font(14))
                .axis_desc_style(font(16))
                .light_line_style(BLACK.mix(0.05))
                .draw()?;
            self.draw_bars(&mut chart, 0.0)
        }
    }
}

impl BarChart {
    fn colour(&self, i: usize) -> RGBColor {
        if i + self.references >= self.series.len() {
            LineStyle::of(i, true).color
        } else {
            palette(i + 1)
        }
    }

    fn draw_bars<'a, DB: DrawingBackend + 'a, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
        floor: f64,
    ) -> DrawResult<DB> {
        let k = self.series.len().max(1) as f64;
        for (i, (_, values)) in self.series.iter().enumerate() {
            let color = self.colour(i);
            let bars = values.iter().enumerate().map(|(g, &v)| {
                let (x0, x1, y0) = if self.stacked {
                    let below: f64 = self.series[..i]
                        .iter()
                        .map(|(_, v)| v.get(g).copied().unwrap_or(0.0))
                        .sum();
                    (g as f64 + 0.2, g as f64 + 0.8, below)
                } else {
                    let w = 0.8 / k;
                    let x0 = g as f64 + 0.1 + w * i as f64;
                    (x0, x0 + w * 0.92, floor)
                };
                Rectangle::new([(x0, y0), (x1, (y0 + v).max(floor))], color.filled())
            });
            chart.draw_series(bars)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_font_parses() {
        assert!(plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT).is_ok());
    }

    #[test]
    fn the_heat_scale_runs_from_pale_to_dark() {
        let lightness = |c: RGBColor| c.0 as u32 + c.1 as u32 + c.2 as u32;
        assert!(lightness(heat(0.0)) > lightness(heat(0.5)));
        assert!(lightness(heat(0.5)) > lightness(heat(1.0)));
        assert_ne!(heat(0.0), NO_LINK);
    }
}

/// One rank's spans per lane: compute on the upper half of its row, communication on the lower.
#[derive(Clone, Debug)]
pub struct Gantt {
    pub title: String,
    pub ranks: u32,
    /// (rank, compute?, start ms, end ms).
    pub spans: Vec<(u32, bool, f64, f64)>,
}

impl Figure for Gantt {
    fn size(&self) -> (u32, u32) {
        let legend = legend_width(["communication".to_string()].iter());
        (1200 + legend, (160 + 22 * self.ranks).clamp(400, 1600))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let names = ["compute".to_string(), "communication".to_string()];
        let colours = [palette(1), palette(2)];
        let entries: Vec<(String, Swatch)> = names
            .iter()
            .zip(colours)
            .map(|(n, c)| (n.clone(), Swatch::Bar(c)))
            .collect();
        let (width, _) = root.dim_in_pixel();
        let (root, legend) = root.split_horizontally(width - legend_width(names.iter()));
        draw_legend_panel(&legend, &entries)?;
        let end = self
            .spans
            .iter()
            .map(|s| s.3)
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let ranks = self.ranks.max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, font(20))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end * 1.02, (ranks - 0.5)..-0.5)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("time (ms)")
            .y_desc("rank")
            .y_labels((self.ranks as usize + 1).min(33))
            .y_label_formatter(&|y: &f64| {
                let r = y.round();
                if (y - r).abs() < 0.01 {
                    format!("{r}")
                } else {
                    String::new()
                }
            })
            .label_style(font(14))
            .axis_desc_style(font(16))
            .light_line_style(BLACK.mix(0.05))
            .draw()?;
        chart.draw_series(self.spans.iter().map(|&(rank, compute, start, stop)| {
            let top = rank as f64 + if compute { -0.4 } else { 0.0 };
            let colour = colours[usize::from(!compute)];
            Rectangle::new(
                [(start, top), (stop.max(start), top + 0.4)],
                colour.filled(),
            )
        }))?;
        Ok(())
    }
}
