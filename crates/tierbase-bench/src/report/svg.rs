//! Hand-written SVG charts: line charts and grouped bar charts with axes, ticks and legends.
//!
//! Owns: chart geometry, tick choice, number formatting for axes, and XML escaping. Must not
//! touch: results or HTML layout (see `report`). Every series is drawn inside
//! `<g class="series" data-series="NAME">` and named again in the legend, so tests (and
//! people) can find each series in the markup.

use std::fmt::Write;

/// Colours of series, in order (Tableau 10).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const WIDTH: f64 = 680.0;
const PLOT_HEIGHT: f64 = 260.0;
const MARGIN_LEFT: f64 = 78.0;
const MARGIN_RIGHT: f64 = 24.0;
const MARGIN_TOP: f64 = 40.0;
const AXIS_SPACE: f64 = 48.0;
const LEGEND_ROW: f64 = 18.0;

/// The colour of series `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// How axis and tooltip values are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    /// Counts and rates: `950`, `12.5k`, `1.2M`.
    Count,
    /// Nanoseconds shown as `850 ns`, `12 µs`, `3.4 ms`, `1.2 s`.
    Nanos,
    /// Seconds: `0`, `2.5`, `10`.
    Seconds,
    /// The value is log2 of a count, written as the count: 6 → `64` (log-scale depth axes).
    Exp2,
    /// The value is log2 of a byte size, written as the size: 12 → `4 KiB`.
    Exp2Bytes,
}

impl ValueFormat {
    /// Formats `v`.
    pub fn format(self, v: f64) -> String {
        match self {
            ValueFormat::Count => {
                let a = v.abs();
                if a >= 1e9 {
                    trim(format!("{:.2}", v / 1e9)) + "G"
                } else if a >= 1e6 {
                    trim(format!("{:.2}", v / 1e6)) + "M"
                } else if a >= 1e3 {
                    trim(format!("{:.1}", v / 1e3)) + "k"
                } else {
                    trim(format!("{v:.1}"))
                }
            }
            ValueFormat::Nanos => {
                let a = v.abs();
                if a >= 1e9 {
                    trim(format!("{:.2}", v / 1e9)) + " s"
                } else if a >= 1e6 {
                    trim(format!("{:.2}", v / 1e6)) + " ms"
                } else if a >= 1e3 {
                    trim(format!("{:.1}", v / 1e3)) + " µs"
                } else {
                    trim(format!("{v:.0}")) + " ns"
                }
            }
            ValueFormat::Seconds => trim(format!("{v:.3}")),
            ValueFormat::Exp2 => {
                let x = v.exp2();
                if (x - x.round()).abs() < 1e-6 * x.max(1.0) {
                    ValueFormat::Count.format(x.round())
                } else {
                    ValueFormat::Count.format(x)
                }
            }
            ValueFormat::Exp2Bytes => {
                let x = v.exp2();
                let units = ["B", "KiB", "MiB", "GiB", "TiB"];
                let mut u = 0;
                let mut y = x;
                while y >= 1024.0 && u + 1 < units.len() {
                    y /= 1024.0;
                    u += 1;
                }
                format!("{} {}", trim(format!("{y:.1}")), units[u])
            }
        }
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Escapes text for XML/HTML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// "Nice" linear ticks from 0 (or below) to at least `max`: steps of 1, 2 or 5 × 10^k.
fn linear_ticks(min: f64, max: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = if max > min {
        (min, max)
    } else {
        (min, min + 1.0)
    };
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut i = 0.0;
    // Up to and including the first tick at or above `hi`, so every value is on the plot.
    while ticks.len() < 50 {
        let t = start + i * step;
        ticks.push(t);
        if t >= hi - step * 1e-9 {
            break;
        }
        i += 1.0;
    }
    ticks
}

/// Powers of ten covering `[min, max]` (both positive).
fn log_ticks(min: f64, max: f64) -> Vec<f64> {
    let lo = min.max(1e-9).log10().floor() as i32;
    let hi = (max.max(min * 10.0)).log10().ceil() as i32;
    (lo..=hi.max(lo + 1)).map(|e| 10f64.powi(e)).collect()
}

/// Maps data values to pixels.
#[derive(Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Axis {
    fn px(&self, v: f64) -> f64 {
        let (lo, hi, v) = if self.log {
            (self.lo.log10(), self.hi.log10(), v.max(self.lo).log10())
        } else {
            (self.lo, self.hi, v)
        };
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.px_lo + f * (self.px_hi - self.px_lo)
    }
}

fn open_svg(out: &mut String, title: &str, height: f64) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{WIDTH}\" \
         height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" \
         aria-label=\"{t}\" font-family=\"system-ui, sans-serif\" font-size=\"12\">\
         <title>{t}</title>\
         <rect width=\"{WIDTH}\" height=\"{height}\" fill=\"#fff\"/>\
         <text class=\"chart-title\" x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" \
         font-weight=\"600\">{t}</text>",
        WIDTH / 2.0,
        t = escape(title)
    );
}

fn y_axis(out: &mut String, y: &Axis, ticks: &[f64], fmt: ValueFormat, label: &str) {
    let x0 = MARGIN_LEFT;
    let x1 = WIDTH - MARGIN_RIGHT;
    for &t in ticks {
        let py = y.px(t);
        let _ = write!(
            out,
            "<line x1=\"{x0}\" x2=\"{x1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#444\">{}</text>",
            x0 - 6.0,
            py + 4.0,
            escape(&fmt.format(t))
        );
    }
    let mid = (y.px_lo + y.px_hi) / 2.0;
    let _ = write!(
        out,
        "<line x1=\"{x0}\" x2=\"{x0}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\
         <text class=\"axis-label\" transform=\"translate(16 {mid:.1}) rotate(-90)\" \
         text-anchor=\"middle\" fill=\"#222\">{}</text>",
        y.px_lo,
        y.px_hi,
        escape(label)
    );
}

/// Dash patterns for lines, by [`LineSeries::dash`].
const DASHES: [&str; 4] = ["", "7 4", "2 3", "10 3 2 3"];

fn dash_attr(dash: usize) -> String {
    match DASHES[dash % DASHES.len()] {
        "" => String::new(),
        d => format!(" stroke-dasharray=\"{d}\""),
    }
}

/// A legend entry: name, colour index, and for lines the dash pattern (`None` = a swatch).
struct LegendEntry<'a> {
    name: &'a str,
    colour: usize,
    dash: Option<usize>,
}

fn legend(out: &mut String, entries: &[LegendEntry<'_>], top: f64) {
    out.push_str("<g class=\"legend\">");
    for (i, e) in entries.iter().enumerate() {
        let y = top + i as f64 * LEGEND_ROW;
        let col = colour(e.colour);
        match e.dash {
            None => {
                let _ = write!(
                    out,
                    "<rect x=\"{MARGIN_LEFT}\" y=\"{y:.1}\" width=\"12\" height=\"12\" fill=\"{col}\"/>"
                );
            }
            Some(d) => {
                let _ = write!(
                    out,
                    "<line x1=\"{MARGIN_LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
                     stroke=\"{col}\" stroke-width=\"2.5\"{}/>",
                    MARGIN_LEFT + 26.0,
                    y + 6.0,
                    y + 6.0,
                    dash_attr(d)
                );
            }
        }
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text>",
            MARGIN_LEFT + if e.dash.is_some() { 32.0 } else { 18.0 },
            y + 10.5,
            escape(e.name)
        );
    }
    out.push_str("</g>");
}

/// One line of a line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct LineSeries {
    /// Legend name.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Colour index into the palette (series of one store share a colour).
    pub colour: usize,
    /// Dash pattern index: 0 solid, then dashed, dotted, dash-dot.
    pub dash: usize,
}

/// A line chart with markers.
#[derive(Clone, Debug)]
pub struct LineChart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// X tick format.
    pub x_format: ValueFormat,
    /// Y tick format.
    pub y_format: ValueFormat,
    /// Only integer x ticks (thread counts).
    pub integer_x: bool,
    /// Logarithmic y axis (for series that differ by orders of magnitude).
    pub log_y: bool,
    /// The lines.
    pub series: &'a [LineSeries],
}

/// Whether positive values spread over more than `ratio` (max ÷ min), i.e. a linear axis would
/// flatten the smaller ones to zero.
pub fn spans_decades(values: impl IntoIterator<Item = f64>, ratio: f64) -> bool {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    hi > 0.0 && lo.is_finite() && hi / lo > ratio
}

/// Renders a line chart as an SVG element.
pub fn line_chart(c: &LineChart<'_>) -> String {
    let height = MARGIN_TOP + PLOT_HEIGHT + AXIS_SPACE + LEGEND_ROW * c.series.len() as f64 + 8.0;
    let mut out = String::new();
    open_svg(&mut out, c.title, height);
    let pts = || c.series.iter().flat_map(|s| s.points.iter().copied());
    let finite = |v: &f64| v.is_finite();
    let xmin = pts()
        .map(|p| p.0)
        .filter(finite)
        .fold(f64::INFINITY, f64::min);
    let xmax = pts()
        .map(|p| p.0)
        .filter(finite)
        .fold(f64::NEG_INFINITY, f64::max);
    let ymax = pts().map(|p| p.1).filter(finite).fold(0.0, f64::max);
    let ymin_pos = pts()
        .map(|p| p.1)
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let (xmin, xmax) = if xmin.is_finite() && xmax.is_finite() {
        if xmax > xmin {
            (xmin, xmax)
        } else {
            (xmin - 1.0, xmax + 1.0)
        }
    } else {
        (0.0, 1.0)
    };
    let log = c.log_y && ymax > 0.0 && ymin_pos.is_finite();
    let yticks = if log {
        log_ticks(ymin_pos, ymax)
    } else {
        linear_ticks(0.0, if ymax > 0.0 { ymax } else { 1.0 }, 5)
    };
    let y = Axis {
        lo: yticks.first().copied().unwrap_or(0.0),
        hi: yticks.last().copied().unwrap_or(1.0),
        log,
        px_lo: MARGIN_TOP + PLOT_HEIGHT,
        px_hi: MARGIN_TOP,
    };
    let pad = (xmax - xmin) * 0.04;
    let x = Axis {
        lo: xmin - pad,
        hi: xmax + pad,
        log: false,
        px_lo: MARGIN_LEFT,
        px_hi: WIDTH - MARGIN_RIGHT,
    };
    y_axis(&mut out, &y, &yticks, c.y_format, c.y_label);
    let mut xticks = linear_ticks(xmin, xmax, 8);
    if c.integer_x {
        let mut ints: Vec<f64> = pts().map(|p| p.0).filter(finite).collect();
        ints.sort_by(f64::total_cmp);
        ints.dedup();
        if ints.len() <= 12 {
            xticks = ints;
        } else {
            xticks.retain(|t| t.fract() == 0.0);
        }
    }
    xticks.retain(|t| *t >= x.lo && *t <= x.hi);
    let base = MARGIN_TOP + PLOT_HEIGHT;
    let _ = write!(
        out,
        "<line x1=\"{MARGIN_LEFT}\" x2=\"{:.1}\" y1=\"{base}\" y2=\"{base}\" stroke=\"#333\"/>",
        WIDTH - MARGIN_RIGHT
    );
    for t in &xticks {
        let px = x.px(*t);
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{base}\" y2=\"{:.1}\" stroke=\"#333\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
            base + 5.0,
            base + 18.0,
            escape(&c.x_format.format(*t))
        );
    }
    let _ = write!(
        out,
        "<text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#222\">{}</text>",
        (MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2.0,
        base + 36.0,
        escape(c.x_label)
    );
    for s in c.series {
        let col = colour(s.colour);
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\">",
            escape(&s.name)
        );
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(px, py)| format!("{:.1},{:.1}", x.px(px), y.px(py)))
            .collect();
        if path.len() > 1 {
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{col}\" stroke-width=\"2\"{} points=\"{}\"/>",
                dash_attr(s.dash),
                path.join(" ")
            );
        }
        let marker_r = if s.points.len() > 60 { 1.5 } else { 3.5 };
        for &(px, py) in s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
        {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{marker_r}\" fill=\"{col}\">\
                 <title>{}: {} = {}</title></circle>",
                x.px(px),
                y.px(py),
                escape(&s.name),
                escape(&c.x_format.format(px)),
                escape(&c.y_format.format(py))
            );
        }
        out.push_str("</g>");
    }
    let entries: Vec<LegendEntry<'_>> = c
        .series
        .iter()
        .map(|s| LegendEntry {
            name: &s.name,
            colour: s.colour,
            dash: Some(s.dash),
        })
        .collect();
    legend(&mut out, &entries, base + AXIS_SPACE);
    out.push_str("</svg>");
    out
}

/// One series of a grouped bar chart: a value (or none) per category.
#[derive(Clone, Debug, PartialEq)]
pub struct BarSeries {
    /// Legend name.
    pub name: String,
    /// One value per category; `None` draws nothing.
    pub values: Vec<Option<f64>>,
}

/// A grouped bar chart (one group per category, one bar per series), optionally log-scaled.
#[derive(Clone, Debug)]
pub struct BarChart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Y tick format.
    pub y_format: ValueFormat,
    /// Logarithmic y axis (for latencies spanning decades).
    pub log_y: bool,
    /// Category names along x.
    pub categories: &'a [String],
    /// The bars.
    pub series: &'a [BarSeries],
}

/// Renders a grouped bar chart as an SVG element.
pub fn bar_chart(c: &BarChart<'_>) -> String {
    let height = MARGIN_TOP + PLOT_HEIGHT + AXIS_SPACE + LEGEND_ROW * c.series.len() as f64 + 8.0;
    let mut out = String::new();
    open_svg(&mut out, c.title, height);
    let vals = || {
        c.series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied())
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let vmax = vals().fold(0.0, f64::max);
    let vmin = vals().fold(f64::INFINITY, f64::min);
    let (ticks, lo, hi) = if c.log_y && vmax > 0.0 {
        let t = log_ticks(vmin, vmax);
        let lo = t.first().copied().unwrap_or(1.0);
        let hi = t.last().copied().unwrap_or(10.0);
        (t, lo, hi)
    } else {
        let t = linear_ticks(0.0, if vmax > 0.0 { vmax } else { 1.0 }, 5);
        let lo = t.first().copied().unwrap_or(0.0);
        let hi = t.last().copied().unwrap_or(1.0);
        (t, lo, hi)
    };
    let y = Axis {
        lo,
        hi,
        log: c.log_y && vmax > 0.0,
        px_lo: MARGIN_TOP + PLOT_HEIGHT,
        px_hi: MARGIN_TOP,
    };
    y_axis(&mut out, &y, &ticks, c.y_format, c.y_label);
    let base = MARGIN_TOP + PLOT_HEIGHT;
    let plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
    let groups = c.categories.len().max(1) as f64;
    let group_w = plot_w / groups;
    let bar_w = (group_w * 0.8) / c.series.len().max(1) as f64;
    let _ = write!(
        out,
        "<line x1=\"{MARGIN_LEFT}\" x2=\"{:.1}\" y1=\"{base}\" y2=\"{base}\" stroke=\"#333\"/>",
        WIDTH - MARGIN_RIGHT
    );
    for (g, cat) in c.categories.iter().enumerate() {
        let cx = MARGIN_LEFT + group_w * (g as f64 + 0.5);
        let _ = write!(
            out,
            "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
            base + 18.0,
            escape(cat)
        );
    }
    for (i, s) in c.series.iter().enumerate() {
        let col = colour(i);
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\">",
            escape(&s.name)
        );
        for (g, v) in s.values.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) else {
                continue;
            };
            let x0 = MARGIN_LEFT + group_w * g as f64 + group_w * 0.1 + bar_w * i as f64;
            let top = y.px(v.min(hi)).min(base);
            let cat = c.categories.get(g).map_or("", String::as_str);
            let _ = write!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{col}\">\
                 <title>{}: {} = {}</title></rect>",
                (bar_w - 1.0).max(1.0),
                (base - top).max(0.5),
                escape(&s.name),
                escape(cat),
                escape(&c.y_format.format(v))
            );
        }
        out.push_str("</g>");
    }
    let entries: Vec<LegendEntry<'_>> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| LegendEntry {
            name: &s.name,
            colour: i,
            dash: None,
        })
        .collect();
    legend(&mut out, &entries, base + AXIS_SPACE);
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(ValueFormat::Count.format(1_250_000.0), "1.25M");
        assert_eq!(ValueFormat::Count.format(12_000.0), "12k");
        assert_eq!(ValueFormat::Count.format(0.0), "0");
        assert_eq!(ValueFormat::Nanos.format(850.0), "850 ns");
        assert_eq!(ValueFormat::Nanos.format(12_500.0), "12.5 µs");
        assert_eq!(ValueFormat::Nanos.format(3_400_000.0), "3.4 ms");
        assert_eq!(ValueFormat::Seconds.format(0.05), "0.05");
        assert_eq!(ValueFormat::Seconds.format(12.0), "12");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn ticks_are_nice() {
        assert_eq!(
            linear_ticks(0.0, 95.0, 5),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        let t = linear_ticks(0.0, 1.72e6, 5);
        assert!(*t.last().unwrap() >= 1.72e6, "{t:?}");
        assert!(spans_decades([10.0, 2000.0], 30.0));
        assert!(!spans_decades([10.0, 200.0, 0.0], 30.0));
        assert_eq!(log_ticks(300.0, 42_000.0), vec![100.0, 1e3, 1e4, 1e5]);
    }

    #[test]
    fn charts_name_their_series() {
        let s = [LineSeries {
            name: "x & y".into(),
            points: vec![(1.0, 5.0), (2.0, 9.0)],
            colour: 0,
            dash: 1,
        }];
        let svg = line_chart(&LineChart {
            title: "T",
            x_label: "threads",
            y_label: "ops/s",
            x_format: ValueFormat::Count,
            y_format: ValueFormat::Count,
            integer_x: true,
            log_y: false,
            series: &s,
        });
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("data-series=\"x &amp; y\""));
        assert!(svg.contains("<polyline"));
        assert!(svg.contains("stroke-dasharray=\"7 4\""));
        let b = [BarSeries {
            name: "s1".into(),
            values: vec![Some(100.0), None, Some(1e6)],
        }];
        let cats = ["p50".to_string(), "p90".into(), "max".into()];
        let svg = bar_chart(&BarChart {
            title: "L",
            y_label: "latency",
            y_format: ValueFormat::Nanos,
            log_y: true,
            categories: &cats,
            series: &b,
        });
        assert_eq!(
            svg.matches("<rect x=").count(),
            2 + 1,
            "two bars and one legend swatch"
        );
    }
}
