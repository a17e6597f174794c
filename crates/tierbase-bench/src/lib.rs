//! Benchmark harness for tierbase: YCSB core workloads against any store, measured with
//! HdrHistogram, written as JSON and rendered as an HTML report with SVG charts.
//!
//! Layers, each in its own module:
//! - [`adapter`]: the [`Store`](adapter::Store) / [`Client`](adapter::Client) traits every
//!   store implements, the registry [`open_store`](adapter::open_store), and the adapters
//!   written here (the in-memory references and, behind the `rocksdb` feature, RocksDB);
//! - [`contract`]: the conformance suite any adapter runs from its own tests;
//! - [`generator`]: YCSB's random generators (zipfian, scrambled zipfian, skewed latest,
//!   counters), reproduced faithfully and seeded deterministically;
//! - [`workload`]: YCSB core workloads (load, A–F), TOML workload files, key and value encoding,
//!   and the per-thread operation stream;
//! - [`measure`], [`runner`], [`progress`]: the measured phases (latency histograms per
//!   operation, 1 s throughput timeline, warm-up, progress display);
//! - [`plan`]: a whole benchmark (workloads × thread counts × repetitions) and its medians;
//! - [`results`]: the JSON result file; [`report`]: the HTML/SVG report;
//! - [`ace`]: the trace-driven ACE benchmark (`tierbase bench ace`): traces, baseline against
//!   ACE per replacement policy, its result file and report.
//!
//! The device profiler (`tierbase profile`) is its own crate, `tierbase-profile`, built on this
//! one's random generators, histograms, result files and charts; it adds its sections to the
//! report through [`report::ExtraResults`].
//!
//! The crate never touches a device itself: stores do, through the `tierbase` device layer or
//! their own I/O. See `docs/BENCHMARKS.md` for the method and how to reproduce each figure.
//!
//! ```
//! use tierbase_bench::adapter::{StoreOptions, open_store};
//! use tierbase_bench::plan::{BenchPlan, run_plan};
//! use tierbase_bench::progress::SilentProgress;
//! use tierbase_bench::workload::CoreWorkload;
//! # fn main() -> tierbase_bench::Result<()> {
//! let mut plan = BenchPlan::new("memory");
//! plan.workloads = vec![CoreWorkload::A.spec(1_000, 2_000)];
//! plan.threads = vec![1];
//! let runs = run_plan(&plan, &SilentProgress)?;
//! assert_eq!(runs.len(), 1);
//! assert!(runs[0].throughput > 0.0);
//! # let _ = (StoreOptions::new("."), open_store);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod ace;
pub mod adapter;
pub mod cleanup;
pub mod contract;
mod error;
pub mod generator;
pub mod measure;
pub mod micro;
pub mod plan;
pub mod progress;
pub mod ramp;
pub mod report;
pub mod results;
pub mod rng;
pub mod runner;
pub mod units;
pub mod workload;

pub use error::{BenchError, Result};
