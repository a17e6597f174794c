//! Progress display while a phase runs.
//!
//! Owns: the [`ProgressSink`] trait the runner reports to, and its three displays: an indicatif
//! bar with the current throughput when stderr is a terminal ([`TerminalProgress`]), plain
//! lines at most once a second otherwise ([`LineProgress`]), and nothing ([`SilentProgress`],
//! for tests). Must not touch: measurement; the figures shown here are live estimates, the
//! result file has the measured ones. Everything goes to stderr so stdout stays clean.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;

/// Receives progress from the runner (called from one monitoring thread).
pub trait ProgressSink: Sync {
    /// A phase starts: `label` names it, `total` is the number of operations expected.
    fn start(&self, label: &str, total: u64);
    /// `done` operations so far, at `ops_per_s` over the last interval.
    fn update(&self, done: u64, ops_per_s: f64);
    /// The phase ended; `summary` is one line with the outcome.
    fn finish(&self, summary: &str);
    /// A free-form line (for example "opening store").
    fn message(&self, line: &str);
}

/// The right display for this process: a bar on a terminal, plain lines otherwise.
pub fn auto() -> Box<dyn ProgressSink> {
    if std::io::stderr().is_terminal() {
        Box::new(TerminalProgress::default())
    } else {
        Box::new(LineProgress::new(Duration::from_secs(1)))
    }
}

/// Human-friendly operations per second: `812`, `45.2k`, `1.31M`.
pub fn format_rate(ops_per_s: f64) -> String {
    if ops_per_s >= 1e6 {
        format!("{:.2}M", ops_per_s / 1e6)
    } else if ops_per_s >= 1e3 {
        format!("{:.1}k", ops_per_s / 1e3)
    } else {
        format!("{ops_per_s:.0}")
    }
}

/// Shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct SilentProgress;

impl ProgressSink for SilentProgress {
    fn start(&self, _: &str, _: u64) {}
    fn update(&self, _: u64, _: f64) {}
    fn finish(&self, _: &str) {}
    fn message(&self, _: &str) {}
}

/// An indicatif progress bar on stderr.
#[derive(Debug, Default)]
pub struct TerminalProgress {
    bar: Mutex<Option<ProgressBar>>,
}

impl ProgressSink for TerminalProgress {
    fn start(&self, label: &str, total: u64) {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} ops {msg} ({elapsed})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        *self.bar.lock() = Some(bar);
    }

    fn update(&self, done: u64, ops_per_s: f64) {
        if let Some(bar) = self.bar.lock().as_ref() {
            bar.set_position(done);
            bar.set_message(format!("{} ops/s", format_rate(ops_per_s)));
        }
    }

    fn finish(&self, summary: &str) {
        if let Some(bar) = self.bar.lock().take() {
            bar.finish_and_clear();
        }
        eprintln!("{summary}");
    }

    fn message(&self, line: &str) {
        match self.bar.lock().as_ref() {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Plain lines on stderr, at most one per `interval`.
#[derive(Debug)]
pub struct LineProgress {
    interval: Duration,
    state: Mutex<LineState>,
}

#[derive(Debug)]
struct LineState {
    label: String,
    total: u64,
    last_print: Instant,
}

impl LineProgress {
    /// Lines at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        LineProgress {
            interval,
            state: Mutex::new(LineState {
                label: String::new(),
                total: 0,
                last_print: Instant::now(),
            }),
        }
    }
}

impl ProgressSink for LineProgress {
    fn start(&self, label: &str, total: u64) {
        let mut st = self.state.lock();
        st.label = label.to_string();
        st.total = total;
        st.last_print = Instant::now();
        eprintln!("{label}: started, {total} ops");
    }

    fn update(&self, done: u64, ops_per_s: f64) {
        let mut st = self.state.lock();
        if st.last_print.elapsed() < self.interval {
            return;
        }
        st.last_print = Instant::now();
        let pct = if st.total > 0 {
            done as f64 * 100.0 / st.total as f64
        } else {
            0.0
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "{}: {done}/{} ops ({pct:.0}%), {} ops/s",
            st.label,
            st.total,
            format_rate(ops_per_s)
        );
    }

    fn finish(&self, summary: &str) {
        eprintln!("{summary}");
    }

    fn message(&self, line: &str) {
        eprintln!("{line}");
    }
}
