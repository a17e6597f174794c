//! The HTML report: one self-contained page comparing runs from several result files.
//!
//! Owns: grouping runs into series and workloads, the page layout (summary table, one section
//! per workload with its charts, store notes), and [`write_report`]. Must not touch: how results
//! were measured; charts are drawn by [`svg`].
//!
//! Per workload the page shows:
//! - **throughput vs threads**: one line per series (store · durability · medium · emulation);
//! - **latency percentiles** per operation type: p50, p90, p99, p99.9 and max for each series
//!   at its highest thread count, on a log scale;
//! - **throughput over time**: the 1 s timeline of every run (series × thread count).
//!
//! The same store measured in two files with the same workload and thread count becomes two
//! series, told apart by the file name.
//!
//! Result files of other kinds join the page through [`ExtraResults`]: the device profiler
//! (`tierbase-profile`) adds its sections that way, so `tierbase report` renders benchmark and
//! profile results together without this crate knowing the profiler's format.

pub mod svg;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::error::{BenchError, Result};
use crate::measure::OpKind;
use crate::results::{ResultFile, RunResult};
use crate::workload::CoreWorkload;
use svg::{BarChart, BarSeries, LineChart, LineSeries, ValueFormat, escape, spans_decades};

/// A result file and the name it is shown under.
#[derive(Clone, Debug)]
pub struct ReportInput {
    /// Shown in the page (usually the file name).
    pub source: String,
    /// The parsed file.
    pub file: ResultFile,
}

/// What [`write_report`] produced.
#[derive(Clone, Debug)]
pub struct ReportSummary {
    /// The HTML file written.
    pub path: PathBuf,
    /// Runs shown.
    pub runs: usize,
    /// Workload sections.
    pub workloads: usize,
    /// Charts drawn.
    pub charts: usize,
}

/// Result files of another kind, shown on the same page as benchmark results: the crate that
/// writes them recognises its files and renders their sections (the device profiler's
/// `tierbase_profile::report::ProfileResults` does, for `tierbase profile` results).
pub trait ExtraResults {
    /// Takes the file at `path` (its `text`, shown in the page as `source`) if it is of this
    /// kind, returning `Ok(true)`; `Ok(false)` leaves it to the benchmark-result reader. A file
    /// of this kind that cannot be read is an error naming the file.
    fn add(&mut self, source: &str, text: &str, path: &Path) -> Result<bool>;
    /// Whether no file was taken.
    fn is_empty(&self) -> bool;
    /// Appends the sections for the files taken to `html`; returns what they show.
    fn render(&self, html: &mut String) -> SectionCounts;
    /// The footer text (HTML) of a page that shows only these files.
    fn footer(&self) -> &str;
}

/// What an [`ExtraResults`]' sections added to a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectionCounts {
    /// Runs shown.
    pub runs: usize,
    /// Charts drawn.
    pub charts: usize,
}

/// Several kinds of other result files on one page: each file goes to the first kind that
/// takes it; sections render kind by kind, and a page of these alone gets the footers of the
/// kinds that took files.
pub struct ExtraKinds {
    kinds: Vec<Box<dyn ExtraResults>>,
    footer: String,
}

impl std::fmt::Debug for ExtraKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraKinds")
            .field("kinds", &self.kinds.len())
            .finish()
    }
}

impl ExtraKinds {
    /// The kinds, tried in this order.
    pub fn new(kinds: Vec<Box<dyn ExtraResults>>) -> Self {
        ExtraKinds {
            kinds,
            footer: String::new(),
        }
    }
}

impl ExtraResults for ExtraKinds {
    fn add(&mut self, source: &str, text: &str, path: &Path) -> Result<bool> {
        for kind in &mut self.kinds {
            if kind.add(source, text, path)? {
                self.footer = self
                    .kinds
                    .iter()
                    .filter(|k| !k.is_empty())
                    .map(|k| k.footer())
                    .collect::<Vec<_>>()
                    .join("<br>");
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn is_empty(&self) -> bool {
        self.kinds.iter().all(|k| k.is_empty())
    }

    fn render(&self, html: &mut String) -> SectionCounts {
        let mut counts = SectionCounts::default();
        for kind in &self.kinds {
            let c = kind.render(html);
            counts.runs += c.runs;
            counts.charts += c.charts;
        }
        counts
    }

    fn footer(&self) -> &str {
        &self.footer
    }
}

/// No other kinds of result file: every input must be a benchmark result file.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExtraResults;

impl ExtraResults for NoExtraResults {
    fn add(&mut self, _source: &str, _text: &str, _path: &Path) -> Result<bool> {
        Ok(false)
    }

    fn is_empty(&self) -> bool {
        true
    }

    fn render(&self, _html: &mut String) -> SectionCounts {
        SectionCounts::default()
    }

    fn footer(&self) -> &str {
        ""
    }
}

/// Reads every file in `inputs` (all must be valid benchmark result files) and writes the HTML
/// report to `out`. The first invalid file stops it with an error naming that file.
pub fn write_report(inputs: &[PathBuf], out: &Path, title: &str) -> Result<ReportSummary> {
    write_report_with(inputs, out, title, &mut NoExtraResults)
}

/// [`write_report`] for benchmark result files and the files `extra` takes, on one page.
pub fn write_report_with(
    inputs: &[PathBuf],
    out: &Path,
    title: &str,
    extra: &mut dyn ExtraResults,
) -> Result<ReportSummary> {
    if inputs.is_empty() {
        return Err(BenchError::invalid("no result files given"));
    }
    let mut parsed = Vec::with_capacity(inputs.len());
    for p in inputs {
        let source = p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let text = std::fs::read_to_string(p).map_err(|e| BenchError::io("read", p, e))?;
        if extra.add(&source, &text, p)? {
            continue;
        }
        let file = ResultFile::parse(&text, p)?;
        parsed.push(ReportInput { source, file });
    }
    let page = render_with(&parsed, &*extra, title);
    crate::results::check_writable(out)?;
    std::fs::write(out, &page.html).map_err(|e| BenchError::io("write", out, e))?;
    Ok(ReportSummary {
        path: out.to_path_buf(),
        runs: page.runs,
        workloads: page.workloads,
        charts: page.charts,
    })
}

/// A rendered page.
#[derive(Clone, Debug)]
pub struct RenderedReport {
    /// The HTML text.
    pub html: String,
    /// Runs shown.
    pub runs: usize,
    /// Workload sections.
    pub workloads: usize,
    /// Charts drawn.
    pub charts: usize,
}

/// A run with the series name it is drawn under.
struct Entry<'a> {
    series: String,
    source: &'a str,
    run: &'a RunResult,
}

/// Series names: the store label, plus the source file where the same label, workload and
/// thread count come from more than one file.
fn entries(inputs: &[ReportInput]) -> Vec<Entry<'_>> {
    let mut files_per_key: BTreeMap<(&str, &str, usize), BTreeSet<usize>> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        for run in &input.file.runs {
            files_per_key
                .entry((run.store_label.as_str(), run.workload.as_str(), run.threads))
                .or_default()
                .insert(i);
        }
    }
    let ambiguous: BTreeSet<&str> = files_per_key
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|((label, _, _), _)| *label)
        .collect();
    let mut out = Vec::new();
    for input in inputs {
        for run in &input.file.runs {
            let series = if ambiguous.contains(run.store_label.as_str()) {
                format!("{} [{}]", run.store_label, input.source)
            } else {
                run.store_label.clone()
            };
            out.push(Entry {
                series,
                source: &input.source,
                run,
            });
        }
    }
    out
}

/// Sort key of a workload name: core workloads in YCSB order, then others by name.
fn workload_order(name: &str) -> (usize, String) {
    let pos = CoreWorkload::ALL
        .iter()
        .position(|w| w.name() == name)
        .unwrap_or(CoreWorkload::ALL.len());
    (pos, name.to_string())
}

fn workload_title(name: &str) -> String {
    match CoreWorkload::parse(name) {
        Ok(w) if w.name() == name => format!("Workload {}", w.description()),
        _ => format!("Workload {name}"),
    }
}

const PERCENTILES: [&str; 5] = ["p50", "p90", "p99", "p99.9", "max"];

/// Renders the report page for `inputs`.
pub fn render_html(inputs: &[ReportInput], title: &str) -> RenderedReport {
    let all = entries(inputs);
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    sources_section(&mut html, inputs);
    summary_table(&mut html, &all);

    let mut by_workload: BTreeMap<(usize, String), Vec<&Entry<'_>>> = BTreeMap::new();
    for e in &all {
        by_workload
            .entry(workload_order(&e.run.workload))
            .or_default()
            .push(e);
    }
    let mut charts = 0;
    for ((_, name), entries) in &by_workload {
        let _ = write!(
            html,
            "<section class=\"workload\" id=\"workload-{id}\"><h2>{}</h2><div class=\"charts\">",
            escape(&workload_title(name)),
            id = escape(name)
        );
        charts += workload_charts(&mut html, name, entries);
        html.push_str("</div></section>\n");
    }
    stores_section(&mut html, &all);
    html.push_str(
        "<footer>Generated by <code>tierbase report</code>. Throughput is the median \
         repetition; latencies are HdrHistogram percentiles (3 significant digits) of the \
         measured window, warm-up excluded. See docs/BENCHMARKS.md.</footer>\n</body></html>\n",
    );
    RenderedReport {
        html,
        runs: all.len(),
        workloads: by_workload.len(),
        charts,
    }
}

/// Renders a page for benchmark results and the results `extra` took together: the benchmark
/// page of [`render_html`] with `extra`'s sections before its footer, or a page of those
/// sections alone (with `extra`'s footer) when there are no benchmark results.
pub fn render_with(
    inputs: &[ReportInput],
    extra: &dyn ExtraResults,
    title: &str,
) -> RenderedReport {
    if extra.is_empty() {
        return render_html(inputs, title);
    }
    let mut sections = String::new();
    let counts = extra.render(&mut sections);
    if inputs.is_empty() {
        let mut html = String::new();
        let _ = write!(
            html,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{t}</title><style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n",
            t = escape(title)
        );
        html.push_str(&sections);
        let _ = write!(
            html,
            "<footer>{}</footer>\n</body></html>\n",
            extra.footer()
        );
        return RenderedReport {
            html,
            runs: counts.runs,
            workloads: 0,
            charts: counts.charts,
        };
    }
    let mut page = render_html(inputs, title);
    let at = page.html.rfind("<footer>").unwrap_or(page.html.len());
    page.html.insert_str(at, &sections);
    page.runs += counts.runs;
    page.charts += counts.charts;
    page
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}\
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;font-size:12px;margin:8px 0}tr.run td{border-top:2px solid #bbb}\
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}td{white-space:nowrap}td.w{white-space:normal;min-width:320px}\
th{background:#f4f4f4}td.l,th.l{text-align:left}\
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart{border:1px solid #eee}\
.warn{color:#b00}footer{margin-top:32px;font-size:12px;color:#666}code{font-size:12px}";

fn sources_section(html: &mut String, inputs: &[ReportInput]) {
    html.push_str("<h2>Result files</h2><table><tr><th class=\"l\">file</th><th>runs</th>\
                   <th class=\"l\">generator</th><th class=\"l\">host</th><th>written (unix s)</th></tr>");
    for i in inputs {
        let h = &i.file.host;
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{} ({} CPUs), Linux {}</td><td>{}</td></tr>",
            escape(&i.source),
            i.file.runs.len(),
            escape(&i.file.generator),
            escape(&h.cpu_model),
            h.cpus,
            escape(&h.kernel),
            i.file.created_unix_s
        );
    }
    html.push_str("</table>\n");
}

fn summary_table(html: &mut String, all: &[Entry<'_>]) {
    html.push_str(
        "<h2>Runs</h2><table><tr><th class=\"l\">store</th><th class=\"l\">durability</th>\
         <th class=\"l\">medium</th><th class=\"l\">flush</th><th class=\"l\">emulated</th>\
         <th class=\"l\">workload</th>\
         <th class=\"l\">distribution</th><th>threads</th><th>records</th><th>key B</th>\
         <th>value B</th><th>throughput ops/s</th><th>load ops/s</th><th class=\"l\">operation</th>\
         <th>count</th><th>not found</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th>\
         <th>max</th><th class=\"l\">file</th></tr>",
    );
    for e in all {
        let r = e.run;
        let kinds: Vec<OpKind> = OpKind::ALL
            .into_iter()
            .filter(|k| r.operations.contains_key(k))
            .collect();
        let rows = kinds.len().max(1);
        let mut flags = String::new();
        if r.repetitions > 1 {
            let samples: Vec<String> = r
                .throughput_samples
                .iter()
                .map(|t| ValueFormat::Count.format(*t))
                .collect();
            let _ = write!(
                flags,
                "<br><small>median of {}: {}</small>",
                r.repetitions,
                escape(&samples.join(", "))
            );
        }
        if r.stopped_early {
            flags.push_str("<br><span class=\"warn\">time limit reached</span>");
        }
        if r.verify_failures > 0 {
            let _ = write!(
                flags,
                "<br><span class=\"warn\">{} verify failures</span>",
                r.verify_failures
            );
        }
        let _ = write!(
            html,
            "<tr class=\"run\"><td class=\"l\" rowspan=\"{rows}\">{}</td>\
             <td class=\"l\" rowspan=\"{rows}\">{}</td><td class=\"l\" rowspan=\"{rows}\">{}</td>\
             <td class=\"l\" rowspan=\"{rows}\">{}</td><td class=\"l\" rowspan=\"{rows}\">{}</td>\
             <td class=\"l\" rowspan=\"{rows}\">{}</td>\
             <td class=\"l\" rowspan=\"{rows}\">{}</td><td rowspan=\"{rows}\">{}</td>\
             <td rowspan=\"{rows}\">{}</td><td rowspan=\"{rows}\">{}</td>\
             <td rowspan=\"{rows}\">{}</td><td rowspan=\"{rows}\"><b>{}</b>{flags}</td>\
             <td rowspan=\"{rows}\">{}</td>",
            escape(&r.store),
            escape(&r.durability),
            escape(&r.medium),
            escape(&flush_cell(r)),
            escape(r.emulated.as_deref().unwrap_or("no")),
            escape(&r.workload),
            escape(&r.request_distribution),
            r.threads,
            r.record_count,
            r.key_size,
            escape(&r.value_size.to_string()),
            ValueFormat::Count.format(r.throughput),
            r.load.as_ref().map_or_else(
                || "-".to_string(),
                |l| ValueFormat::Count.format(l.throughput)
            ),
        );
        if kinds.is_empty() {
            let _ = write!(
                html,
                "<td class=\"l\" colspan=\"8\">no operations measured</td>\
                 <td class=\"l\">{}</td></tr>",
                escape(e.source)
            );
        }
        for (i, kind) in kinds.iter().enumerate() {
            let Some(s) = r.operations.get(kind) else {
                continue;
            };
            let l = s.latency_ns;
            if i > 0 {
                html.push_str("<tr>");
            }
            let ns = |v: u64| ValueFormat::Nanos.format(v as f64);
            let _ = write!(
                html,
                "<td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td>",
                kind.name(),
                s.count,
                s.not_found,
                ns(l.p50),
                ns(l.p90),
                ns(l.p99),
                ns(l.p999),
                ns(l.max)
            );
            if i == 0 {
                let _ = write!(
                    html,
                    "<td class=\"l\" rowspan=\"{rows}\">{}</td>",
                    escape(e.source)
                );
            }
            html.push_str("</tr>");
        }
    }
    html.push_str("</table>\n");
}

/// Series names in first-seen order (so colours stay stable across a workload's charts).
fn series_order<'a>(entries: &[&'a Entry<'a>]) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for e in entries {
        if !seen.contains(&e.series.as_str()) {
            seen.push(e.series.as_str());
        }
    }
    seen
}

fn workload_charts(html: &mut String, name: &str, entries: &[&Entry<'_>]) -> usize {
    let mut charts = 0;
    let order = series_order(entries);

    // Throughput vs threads.
    let lines: Vec<LineSeries> = order
        .iter()
        .enumerate()
        .map(|(colour, s)| {
            let mut points: Vec<(f64, f64)> = entries
                .iter()
                .filter(|e| e.series == *s)
                .map(|e| (e.run.threads as f64, e.run.throughput))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            LineSeries {
                name: (*s).to_string(),
                points,
                colour,
                dash: 0,
            }
        })
        .collect();
    let title = format!("Throughput vs threads — workload {name}");
    let log_y = spans_decades(
        lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)),
        30.0,
    );
    html.push_str(&svg::line_chart(&LineChart {
        title: &title,
        x_label: "threads",
        y_label: if log_y {
            "throughput (ops/s, log scale)"
        } else {
            "throughput (ops/s)"
        },
        x_format: ValueFormat::Count,
        y_format: ValueFormat::Count,
        integer_x: true,
        log_y,
        series: &lines,
    }));
    charts += 1;

    // Latency percentiles per operation, each series at its highest thread count.
    let top: Vec<&Entry<'_>> = order
        .iter()
        .filter_map(|s| {
            entries
                .iter()
                .filter(|e| e.series == *s)
                .max_by_key(|e| e.run.threads)
                .copied()
        })
        .collect();
    let kinds: Vec<OpKind> = OpKind::ALL
        .into_iter()
        .filter(|k| top.iter().any(|e| e.run.operations.contains_key(k)))
        .collect();
    let categories: Vec<String> = PERCENTILES.iter().map(|p| (*p).to_string()).collect();
    for kind in kinds {
        let bars: Vec<BarSeries> = top
            .iter()
            .map(|e| {
                let l = e.run.operations.get(&kind).map(|s| s.latency_ns);
                let values = match l {
                    Some(l) => [l.p50, l.p90, l.p99, l.p999, l.max]
                        .into_iter()
                        .map(|v| Some(v as f64))
                        .collect(),
                    None => vec![None; PERCENTILES.len()],
                };
                BarSeries {
                    name: format!("{} · {} threads", e.series, e.run.threads),
                    values,
                }
            })
            .collect();
        let title = format!("{} latency percentiles — workload {name}", kind.name());
        html.push_str(&svg::bar_chart(&BarChart {
            title: &title,
            y_label: "latency (log scale)",
            y_format: ValueFormat::Nanos,
            log_y: true,
            categories: &categories,
            series: &bars,
        }));
        charts += 1;
    }

    // Throughput over time.
    let mut timeline: Vec<LineSeries> = Vec::new();
    for (colour, s) in order.iter().enumerate() {
        let mut runs: Vec<&&Entry<'_>> = entries.iter().filter(|e| e.series == *s).collect();
        runs.sort_by_key(|e| e.run.threads);
        for (dash, e) in runs.into_iter().enumerate() {
            timeline.push(LineSeries {
                colour,
                dash,
                name: format!("{} · {} threads", e.series, e.run.threads),
                points: e
                    .run
                    .timeline
                    .iter()
                    .map(|b| (b.start_s + b.duration_s / 2.0, b.ops_per_s))
                    .collect(),
            });
        }
    }
    let title = format!("Throughput over time (1 s buckets) — workload {name}");
    let log_y = spans_decades(
        timeline.iter().flat_map(|l| l.points.iter().map(|p| p.1)),
        30.0,
    );
    html.push_str(&svg::line_chart(&LineChart {
        title: &title,
        x_label: "seconds into the measured window",
        y_label: if log_y {
            "throughput (ops/s, log scale)"
        } else {
            "throughput (ops/s)"
        },
        x_format: ValueFormat::Seconds,
        y_format: ValueFormat::Count,
        integer_x: false,
        log_y,
        series: &timeline,
    }));
    charts + 1
}

/// The flush instruction a run's persists used, as its table cell ("none": the store flushed
/// no cache lines, as block I/O and DRAM stores do, or the file predates the field).
fn flush_cell(r: &RunResult) -> String {
    r.flush.clone().unwrap_or_else(|| "none".into())
}

fn stores_section(html: &mut String, all: &[Entry<'_>]) {
    html.push_str("<h2>Stores</h2><table><tr><th class=\"l\">series</th><th class=\"l\">durability</th>\
                   <th class=\"l\">medium</th><th class=\"l\">flush</th><th class=\"l\">emulated</th>\
                   <th class=\"l\">ordered scans</th>\
                   <th class=\"l\">notes</th></tr>");
    let mut seen = BTreeSet::new();
    for e in all {
        if !seen.insert(e.series.as_str()) {
            continue;
        }
        let r = e.run;
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l w\">{}</td></tr>",
            escape(&e.series),
            escape(&r.durability),
            escape(&r.medium),
            escape(&flush_cell(r)),
            escape(r.emulated.as_deref().unwrap_or("no")),
            if r.capabilities.ordered_scan {
                "yes"
            } else {
                "no"
            },
            escape(&r.store_notes.join("; "))
        );
    }
    html.push_str("</table>\n");
}
