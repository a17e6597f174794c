//! Benchmark harness for tierbase (placeholder; see issue 3).
