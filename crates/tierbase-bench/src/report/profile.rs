//! Report sections for `tierbase profile` results (device profiles).
//!
//! Owns: the tables and charts of profile result files — per block sweep, IOPS and MB/s
//! against queue depth (log-2 axis) with the derived α, k_r, k_w; for memory benchmarks, a
//! table of every run, bandwidth against access size and against threads, and access-chain
//! rates against threads. Must not touch: measurement, the benchmark sections (see the parent
//! module). Every series and table row names its medium and, when emulated, `emulated
//! <profile>`.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::svg::{self, LineChart, LineSeries, ValueFormat, escape, spans_decades};
use crate::profile::block::BlockRun;
use crate::profile::memory::{MemoryRun, Operation};
use crate::profile::packages::ExecMode;
use crate::profile::results::ProfileResultFile;
use crate::profile::{LatencySummary, format_bytes};

/// A profile result file and the name it is shown under.
#[derive(Clone, Debug)]
pub struct ProfileInput {
    /// Shown in the page (usually the file name).
    pub source: String,
    /// The parsed file.
    pub file: ProfileResultFile,
}

/// What the profile sections added to a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileCounts {
    /// Memory runs plus block sweeps shown.
    pub runs: usize,
    /// Charts drawn.
    pub charts: usize,
}

/// Appends the profile sections for `inputs` to `html`.
pub fn profile_sections(html: &mut String, inputs: &[ProfileInput]) -> ProfileCounts {
    let mut counts = ProfileCounts::default();
    if inputs.is_empty() {
        return counts;
    }
    html.push_str(
        "<h2>Device profile files</h2><table><tr><th class=\"l\">file</th>\
         <th>memory runs</th><th>block sweeps</th><th class=\"l\">saved profile</th>\
         <th class=\"l\">host</th><th class=\"l\">written</th></tr>",
    );
    for i in inputs {
        let f = &i.file;
        let saved = f.saved_profile.as_ref().map_or_else(
            || "-".to_string(),
            |s| {
                format!(
                    "{} (α {:.2}, k_r {}, k_w {}) in {}",
                    s.name,
                    s.profile.alpha,
                    s.profile.k_r,
                    s.profile.k_w,
                    s.catalogue.display()
                )
            },
        );
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{} ({} CPUs), Linux {}</td><td class=\"l\">{}</td></tr>",
            escape(&i.source),
            f.memory.len(),
            f.block.len(),
            escape(&saved),
            escape(&f.host.cpu_model),
            f.host.cpus,
            escape(&f.host.kernel),
            escape(&f.created_utc)
        );
    }
    html.push_str("</table>\n");
    let block: Vec<(&str, &BlockRun)> = inputs
        .iter()
        .flat_map(|i| i.file.block.iter().map(move |b| (i.source.as_str(), b)))
        .collect();
    for (source, run) in &block {
        counts.charts += block_section(html, source, run);
        counts.runs += 1;
    }
    let memory: Vec<(&str, &MemoryRun)> = inputs
        .iter()
        .flat_map(|i| i.file.memory.iter().map(move |m| (i.source.as_str(), m)))
        .collect();
    if !memory.is_empty() {
        counts.charts += memory_section(html, &memory, inputs);
        counts.runs += memory.len();
    }
    counts
}

fn block_section(html: &mut String, source: &str, run: &BlockRun) -> usize {
    let label = run.label();
    let _ = write!(
        html,
        "<section class=\"profile\"><h2>Block device: {} — {}</h2>\
         <p>{} mode, test range {}, {} I/Os per point, {} repetition(s), estimator {}, \
         {} preconditioning pass(es), engine {}{}. File: {}.</p>",
        escape(&run.path.display().to_string()),
        escape(&label),
        run.mode.name(),
        escape(&format_bytes(run.size)),
        run.ops_per_point,
        run.repetitions,
        run.estimator.name(),
        run.precondition_passes,
        escape(&run.engine),
        run.emulation.as_ref().map_or_else(String::new, |e| format!(
            "; emulated profile: α {}, k_r {}, k_w {}; {} of {} batches ended after their emulated end",
            e.alpha, e.k_r, e.k_w, e.native_slower, e.batches
        )),
        escape(source)
    );
    html.push_str(
        "<table><tr><th>access size</th><th>k_r</th><th>k_w</th><th>α (plateaus)</th>\
         <th>depth-1 ratio</th><th>read plateau IOPS</th><th>write plateau IOPS</th>\
         <th>read depth 1</th><th>write depth 1</th><th>read MB/s</th><th>write MB/s</th></tr>",
    );
    for d in &run.derived {
        let f = &d.figures;
        let ge = |s: bool| if s { "" } else { "≥ " };
        let ns = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| ValueFormat::Nanos.format(v));
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}{} <small>(peak at {})</small></td><td>{}{} <small>(peak at {})</small></td>\
             <td><b>{:.2}</b></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.0}</td><td>{:.0}</td></tr>",
            escape(&format_bytes(d.access_size)),
            ge(f.read.saturated),
            f.k_r,
            f.read.peak_depth,
            ge(f.write.saturated),
            f.k_w,
            f.write.peak_depth,
            f.alpha,
            f.alpha_qd1
                .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
            ValueFormat::Count.format(f.read.plateau),
            ValueFormat::Count.format(f.write.plateau),
            ns(d.read_qd1_latency_ns),
            ns(d.write_qd1_latency_ns),
            d.read_mb_s,
            d.write_mb_s
        );
    }
    html.push_str("</table><div class=\"charts\">");
    let mut charts = 0;
    for (what, y_format, value) in [
        (
            "IOPS",
            ValueFormat::Count,
            (|p: &crate::profile::block::BlockPoint| p.iops) as fn(&_) -> f64,
        ),
        ("MB/s", ValueFormat::Count, |p| p.mb_s),
    ] {
        let mut sizes: Vec<u64> = run.curves.iter().map(|c| c.access_size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let series: Vec<LineSeries> = run
            .curves
            .iter()
            .map(|c| LineSeries {
                name: format!(
                    "{} {} · {}",
                    c.direction,
                    format_bytes(c.access_size),
                    label
                ),
                points: c
                    .points
                    .iter()
                    .map(|p| (f64::from(p.depth).log2(), value(p)))
                    .collect(),
                colour: sizes.iter().position(|s| *s == c.access_size).unwrap_or(0),
                dash: usize::from(c.direction == "write"),
            })
            .collect();
        let title = format!("{what} vs queue depth — {}", run.path.display());
        html.push_str(&svg::line_chart(&LineChart {
            title: &title,
            x_label: "queue depth (log scale)",
            y_label: what,
            x_format: ValueFormat::Exp2,
            y_format,
            integer_x: true,
            log_y: false,
            series: &series,
        }));
        charts += 1;
    }
    html.push_str("</div></section>\n");
    charts
}

/// What a memory run's series is called on a chart (everything but the x parameter).
fn series_name(r: &MemoryRun, source: &str, x: &str, multi_file: bool) -> String {
    let c = &r.config;
    let mut parts = Vec::new();
    match &c.custom_operations {
        Some(ch) if c.exec_mode == ExecMode::Custom => parts.push(format!("chain {ch}")),
        _ => {
            parts.push(format!("{} {}", c.exec_mode.name(), c.operation.name()));
            if x != "access_size" {
                parts.push(format_bytes(c.access_size));
            }
            if c.operation == Operation::Write {
                parts.push(format!("persist {}", c.persist_instruction));
            }
        }
    }
    if x != "threads" {
        parts.push(format!("{} thr", c.number_threads));
    }
    parts.push(r.medium.clone());
    if let Some(e) = &r.emulated {
        parts.push(e.clone());
    }
    if multi_file {
        parts.push(format!("[{source}]"));
    }
    parts.join(" · ")
}

fn memory_section(
    html: &mut String,
    runs: &[(&str, &MemoryRun)],
    inputs: &[ProfileInput],
) -> usize {
    let multi = inputs.iter().filter(|i| !i.file.memory.is_empty()).count() > 1;
    html.push_str(
        "<section class=\"profile\"><h2>Memory benchmarks</h2><table><tr>\
         <th class=\"l\">benchmark</th><th class=\"l\">run</th><th class=\"l\">medium</th>\
         <th class=\"l\">emulated</th><th>threads</th><th>GB/s</th><th>ops/s</th>\
         <th>p50</th><th>p99</th><th>max</th><th>samples</th><th class=\"l\">file</th></tr>",
    );
    for (source, r) in runs {
        let l: Option<LatencySummary> = r.latency_ns;
        let ns = |f: fn(&LatencySummary) -> u64| {
            l.as_ref()
                .map_or_else(|| "-".into(), |l| ValueFormat::Nanos.format(f(l) as f64))
        };
        let c = &r.config;
        let what = match &c.custom_operations {
            Some(ch) if c.exec_mode == ExecMode::Custom => format!("chain {ch}"),
            _ if c.operation == Operation::Write => format!(
                "{} write {} persist {}",
                c.exec_mode.name(),
                format_bytes(c.access_size),
                c.persist_instruction
            ),
            _ => format!(
                "{} read {}",
                c.exec_mode.name(),
                format_bytes(c.access_size)
            ),
        };
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td>{}</td><td><b>{:.2}</b></td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            escape(&r.benchmark),
            escape(&what),
            escape(&r.medium),
            escape(r.emulated.as_deref().unwrap_or("no")),
            r.config.number_threads,
            r.bandwidth_gb_s,
            ValueFormat::Count.format(r.ops_per_s),
            ns(|l| l.p50),
            ns(|l| l.p99),
            ns(|l| l.max),
            l.map_or(0, |l| l.samples),
            escape(source)
        );
    }
    html.push_str("</table><div class=\"charts\">");
    let mut charts = 0;
    // Bandwidth vs access size (raw runs), and vs threads (all runs).
    for x in ["access_size", "threads"] {
        let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for (source, r) in runs {
            let custom = r.config.exec_mode == ExecMode::Custom;
            if x == "access_size" && custom {
                continue;
            }
            let name = series_name(r, source, x, multi);
            let xv = match x {
                "access_size" => (r.config.access_size as f64).log2(),
                _ => r.config.number_threads as f64,
            };
            if !groups.contains_key(&name) {
                order.push(name.clone());
            }
            groups.entry(name).or_default().push((xv, r.bandwidth_gb_s));
        }
        // A chart only when some series has two or more x values.
        if !groups.values().any(|v| v.len() > 1) {
            continue;
        }
        let series: Vec<LineSeries> = order
            .iter()
            .enumerate()
            .filter_map(|(i, name)| {
                let mut points = groups.get(name)?.clone();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Some(LineSeries {
                    name: name.clone(),
                    points,
                    colour: i,
                    dash: i / 10,
                })
            })
            .collect();
        let log_y = spans_decades(
            series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
            30.0,
        );
        let (title, x_label, x_format) = match x {
            "access_size" => (
                "Memory bandwidth vs access size",
                "access size (log scale)",
                ValueFormat::Exp2Bytes,
            ),
            _ => ("Memory bandwidth vs threads", "threads", ValueFormat::Count),
        };
        html.push_str(&svg::line_chart(&LineChart {
            title,
            x_label,
            y_label: if log_y { "GB/s (log scale)" } else { "GB/s" },
            x_format,
            y_format: ValueFormat::Count,
            integer_x: true,
            log_y,
            series: &series,
        }));
        charts += 1;
    }
    html.push_str("</div></section>\n");
    charts
}
