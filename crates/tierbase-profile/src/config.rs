//! Benchmark configuration files (PerMA-Bench style): every benchmark is a `matrix` of lists,
//! whose cross product gives one run per combination, plus fixed `args`.
//!
//! Owns: parsing the TOML file, the parameter names (PerMA-Bench's, with the thesis's
//! spellings as aliases), value conversion with one-line errors, and expanding matrices.
//! Must not touch: running benchmarks.
//!
//! ```toml
//! # one table per benchmark; benchmarks run in name order
//! [hash_index_update]
//! matrix = { number_threads = [1, 2] }
//! args = { custom_operations = "r_256,w_64_cache_128,w_64_cache_-128", memory_range = "1G", number_operations = 1000000 }
//!
//! [random_reads]
//! matrix = { access_size = [64, 256, 4096], number_threads = [1, 2] }
//! args = { exec_mode = "random", operation = "read" }
//! ```
//!
//! Sizes are integers (bytes) or strings with a binary suffix (`"64K"`, `"10G"`). Matrix
//! dimensions are expanded in key order, the last key varying fastest. A key may not be in both
//! `matrix` and `args`. YAML is not supported (the workspace already reads TOML everywhere).

use std::path::{Path, PathBuf};

use tierbase::one_line_toml_error;
use tierbase_bench::{BenchError, Result};
use toml::Value;

use crate::memory::{MemoryConfig, NamedConfig, Operation, RandomDistribution};
use crate::packages::ExecMode;
use crate::persist::Persist;
use crate::{parse_count, parse_size};

/// Every parameter name, with its aliases and meaning (for `--help` texts and errors).
pub const PARAMETERS: [(&str, &[&str], &str); 20] = [
    ("access_size", &[], "bytes per access, power of two (256)"),
    (
        "memory_range",
        &["total_memory_range"],
        "bytes of the region (1G)",
    ),
    (
        "dram_memory_range",
        &[],
        "bytes of DRAM for rd/wd chain ops (0)",
    ),
    (
        "number_operations",
        &["ops"],
        "random ops or chain executions; 0 = auto",
    ),
    ("number_threads", &["threads"], "threads (1)"),
    (
        "run_time",
        &[],
        "seconds; > 0 cycles packages until then (0)",
    ),
    ("operation", &[], "read | write (read)"),
    (
        "exec_mode",
        &[],
        "sequential | sequential_desc | random | custom (sequential)",
    ),
    (
        "persist_instruction",
        &["persist"],
        "none | cache | cacheinv | nocache (none)",
    ),
    (
        "number_partitions",
        &["partitions"],
        "partitions, 0 = one per thread (1)",
    ),
    (
        "random_distribution",
        &["distribution"],
        "uniform | zipf (uniform)",
    ),
    ("zipf_alpha", &[], "zipf skew, 0 < α < 1 (0.9)"),
    (
        "custom_operations",
        &["custom_ops", "chain"],
        "access chain; implies exec_mode custom",
    ),
    (
        "latency_sample_frequency",
        &["latency_every"],
        "time every k-th op; 0 = off (1000)",
    ),
    (
        "prefault_file",
        &["prefault"],
        "fill and pre-fault before the run (true)",
    ),
    (
        "dram_huge_pages",
        &["huge_pages"],
        "ask for transparent huge pages (true)",
    ),
    (
        "min_io_chunk_size",
        &["package_size"],
        "bytes of work per package (64M)",
    ),
    (
        "memory_path",
        &["path"],
        "region file or directory; \"dram\" = anonymous DRAM (dram)",
    ),
    ("emulate", &[], "memory profile to emulate (none)"),
    ("seed", &[], "seed of packages and data"),
];

fn canonical(key: &str) -> Option<&'static str> {
    PARAMETERS
        .iter()
        .find(|(name, aliases, _)| *name == key || aliases.contains(&key))
        .map(|(name, _, _)| *name)
}

fn known_keys() -> String {
    PARAMETERS
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// One benchmark of a configuration file.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchmarkDef {
    /// Table name.
    pub name: String,
    /// Dimensions: canonical key and its values.
    pub matrix: Vec<(String, Vec<Value>)>,
    /// Fixed parameters: canonical key and value.
    pub args: Vec<(String, Value)>,
}

impl BenchmarkDef {
    /// A benchmark with no parameters (all defaults).
    pub fn new(name: impl Into<String>) -> Self {
        BenchmarkDef {
            name: name.into(),
            matrix: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds a parameter from text as the command line gives it: a comma-separated list becomes
    /// a matrix dimension, a single value an arg. An access chain is never split (it contains
    /// commas); give several chains to [`BenchmarkDef::add_values`] instead.
    pub fn add_text(&mut self, key: &str, text: &str) -> Result<()> {
        let key = canonical(key).ok_or_else(|| {
            BenchError::invalid(format!(
                "unknown parameter '{key}' (known: {})",
                known_keys()
            ))
        })?;
        if key == "custom_operations" {
            return self.add_values(key, vec![text.to_string()]);
        }
        let values: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return Err(BenchError::invalid(format!(
                "invalid {key} list '{text}': empty item"
            )));
        }
        self.add_values(key, values)
    }

    /// Adds one parameter with one or more values (more than one: a matrix dimension).
    pub fn add_values(&mut self, key: &str, values: Vec<String>) -> Result<()> {
        let key = canonical(key)
            .ok_or_else(|| BenchError::invalid(format!("unknown parameter '{key}'")))?
            .to_string();
        self.matrix.retain(|(k, _)| *k != key);
        self.args.retain(|(k, _)| *k != key);
        let mut vals: Vec<Value> = values.into_iter().map(Value::String).collect();
        if vals.len() == 1 {
            if let Some(v) = vals.pop() {
                self.args.push((key, v));
            }
        } else if !vals.is_empty() {
            self.matrix.push((key, vals));
        }
        Ok(())
    }

    /// Expands the matrix on top of `base`: one configuration per combination.
    pub fn expand(&self, base: &MemoryConfig) -> Result<Vec<NamedConfig>> {
        let ctx = |key: &str| format!("benchmark '{}': {key}", self.name);
        let mut fixed = base.clone();
        let mut explicit_mode = false;
        for (k, v) in &self.args {
            apply(&mut fixed, k, v).map_err(|e| BenchError::invalid(format!("{}: {e}", ctx(k))))?;
            explicit_mode |= k == "exec_mode";
        }
        explicit_mode |= self.matrix.iter().any(|(k, _)| k == "exec_mode");
        let mut out = Vec::new();
        let dims: Vec<&(String, Vec<Value>)> = self.matrix.iter().collect();
        let total: usize = dims.iter().map(|(_, v)| v.len()).product();
        for mut idx in 0..total {
            let mut cfg = fixed.clone();
            let mut chosen = vec![(String::new(), String::new()); dims.len()];
            // Last dimension varies fastest.
            for (d, (k, vals)) in dims.iter().enumerate().rev() {
                let n = vals.len().max(1);
                let Some(v) = vals.get(idx % n) else { continue };
                idx /= n;
                apply(&mut cfg, k, v)
                    .map_err(|e| BenchError::invalid(format!("{}: {e}", ctx(k))))?;
                if let Some(slot) = chosen.get_mut(d) {
                    *slot = (k.clone(), display(v));
                }
            }
            if !explicit_mode && cfg.custom_operations.is_some() {
                cfg.exec_mode = ExecMode::Custom;
            }
            out.push(normalize(NamedConfig {
                name: self.name.clone(),
                matrix: chosen,
                config: cfg,
            }));
        }
        // Combinations that differ only in a parameter the run ignores are run once.
        let mut unique: Vec<NamedConfig> = Vec::with_capacity(out.len());
        for nc in out {
            if !unique.iter().any(|u| u.config == nc.config) {
                unique.push(nc);
            }
        }
        Ok(unique)
    }
}

/// Resets parameters a run ignores to their defaults and drops them from its matrix label:
/// the persist instruction of reads, the distribution of non-random modes, the zipf skew of
/// uniform runs, and access size / operation / persist of access chains.
fn normalize(mut nc: NamedConfig) -> NamedConfig {
    let d = MemoryConfig::default();
    let c = &mut nc.config;
    let mut ignored: Vec<&str> = Vec::new();
    if c.exec_mode == ExecMode::Custom {
        c.operation = d.operation;
        c.access_size = if c.memory_range >= d.access_size {
            d.access_size
        } else {
            8
        };
        c.persist_instruction = d.persist_instruction;
        ignored.extend(["operation", "access_size", "persist_instruction"]);
    } else if c.operation == Operation::Read {
        c.persist_instruction = d.persist_instruction;
        ignored.push("persist_instruction");
    }
    if c.exec_mode != ExecMode::Random {
        c.random_distribution = d.random_distribution;
        ignored.push("random_distribution");
    }
    if c.random_distribution != RandomDistribution::Zipf {
        c.zipf_alpha = d.zipf_alpha;
        ignored.push("zipf_alpha");
    }
    nc.matrix.retain(|(k, _)| !ignored.contains(&k.as_str()));
    nc
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses a configuration file's text. `path` is only used in messages.
pub fn parse_config(text: &str, path: &Path) -> Result<Vec<BenchmarkDef>> {
    let bad = |detail: String| BenchError::invalid(format!("{}: {detail}", path.display()));
    let table: toml::Table =
        toml::from_str(text).map_err(|e| bad(one_line_toml_error(&e, text)))?;
    if table.is_empty() {
        return Err(bad(
            "no benchmarks (expected one [name] table per benchmark)".into(),
        ));
    }
    let mut defs = Vec::new();
    for (name, body) in &table {
        let Value::Table(body) = body else {
            return Err(bad(format!(
                "'{name}' must be a table with matrix and/or args (e.g. [{name}] args = {{ .. }})"
            )));
        };
        let mut def = BenchmarkDef::new(name.clone());
        for (section, content) in body {
            if section != "matrix" && section != "args" {
                return Err(bad(format!(
                    "benchmark '{name}': unknown section '{section}' (expected matrix or args)"
                )));
            }
            let Value::Table(entries) = content else {
                return Err(bad(format!(
                    "benchmark '{name}': '{section}' must be a table"
                )));
            };
            for (key, value) in entries {
                let canon = canonical(key).ok_or_else(|| {
                    bad(format!(
                        "benchmark '{name}': unknown parameter '{key}' (known: {})",
                        known_keys()
                    ))
                })?;
                let dup = def.matrix.iter().any(|(k, _)| k == canon)
                    || def.args.iter().any(|(k, _)| k == canon);
                if dup {
                    return Err(bad(format!(
                        "benchmark '{name}': parameter '{canon}' is given twice (in matrix and \
                         args, or under two names)"
                    )));
                }
                match section.as_str() {
                    "matrix" => {
                        let Value::Array(values) = value else {
                            return Err(bad(format!(
                                "benchmark '{name}': matrix.{key} must be a list, e.g. [1, 2]"
                            )));
                        };
                        if values.is_empty() {
                            return Err(bad(format!(
                                "benchmark '{name}': matrix.{key} is an empty list"
                            )));
                        }
                        def.matrix.push((canon.to_string(), values.clone()));
                    }
                    "args" => def.args.push((canon.to_string(), value.clone())),
                    other => {
                        return Err(bad(format!(
                            "benchmark '{name}': unknown section '{other}' (expected matrix or args)"
                        )));
                    }
                }
            }
        }
        defs.push(def);
    }
    Ok(defs)
}

/// Reads and parses a configuration file.
pub fn load_config(path: &Path) -> Result<Vec<BenchmarkDef>> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
    parse_config(&text, path)
}

/// Expands every benchmark of a file.
pub fn expand_all(defs: &[BenchmarkDef], base: &MemoryConfig) -> Result<Vec<NamedConfig>> {
    let mut out = Vec::new();
    for d in defs {
        out.extend(d.expand(base)?);
    }
    Ok(out)
}

/// Sets one parameter (canonical or alias name) from a TOML value.
pub fn apply(c: &mut MemoryConfig, key: &str, v: &Value) -> Result<()> {
    let key = canonical(key).ok_or_else(|| {
        BenchError::invalid(format!(
            "unknown parameter '{key}' (known: {})",
            known_keys()
        ))
    })?;
    match key {
        "access_size" => c.access_size = size(v)?,
        "memory_range" => c.memory_range = size(v)?,
        "dram_memory_range" => c.dram_memory_range = size(v)?,
        "number_operations" => c.number_operations = int(v)?,
        "number_threads" => c.number_threads = count(v, "thread count", 1024)? as usize,
        "run_time" => c.run_time = float(v)?,
        "operation" => c.operation = Operation::parse(&text(v)?)?,
        "exec_mode" => c.exec_mode = ExecMode::parse(&text(v)?)?,
        "persist_instruction" => c.persist_instruction = Persist::parse(&text(v)?)?,
        "number_partitions" => c.number_partitions = int(v)? as usize,
        "random_distribution" => c.random_distribution = RandomDistribution::parse(&text(v)?)?,
        "zipf_alpha" => c.zipf_alpha = float(v)?,
        "custom_operations" => c.custom_operations = Some(text(v)?),
        "latency_sample_frequency" => c.latency_sample_frequency = int(v)?,
        "prefault_file" => c.prefault = boolean(v)?,
        "dram_huge_pages" => c.huge_pages = boolean(v)?,
        "min_io_chunk_size" => c.package_size = size(v)?,
        "memory_path" => {
            let t = text(v)?;
            c.memory_path = if t.eq_ignore_ascii_case("dram") || t.is_empty() {
                None
            } else {
                Some(PathBuf::from(t))
            };
        }
        "emulate" => {
            let t = text(v)?;
            c.emulate = if t.is_empty() || t.eq_ignore_ascii_case("none") {
                None
            } else {
                Some(t)
            };
        }
        "seed" => c.seed = int(v)?,
        _ => return Err(BenchError::invalid(format!("unknown parameter '{key}'"))),
    }
    Ok(())
}

fn text(v: &Value) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Integer(i) => Ok(i.to_string()),
        Value::Float(f) => Ok(f.to_string()),
        Value::Boolean(b) => Ok(b.to_string()),
        other => Err(BenchError::invalid(format!(
            "expected a string, got {}",
            other.type_str()
        ))),
    }
}

fn size(v: &Value) -> Result<u64> {
    match v {
        Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        Value::String(s) => parse_size(s),
        other => Err(BenchError::invalid(format!(
            "expected a size (bytes, or a string like \"64K\"), got {other}"
        ))),
    }
}

fn int(v: &Value) -> Result<u64> {
    match v {
        Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        Value::String(s) => s
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| BenchError::invalid(format!("expected a whole number, got '{s}'"))),
        other => Err(BenchError::invalid(format!(
            "expected a whole number, got {other}"
        ))),
    }
}

fn count(v: &Value, what: &str, max: u64) -> Result<u64> {
    match v {
        Value::Integer(i) => parse_count(&i.to_string(), what, max),
        Value::String(s) => parse_count(s, what, max),
        other => Err(BenchError::invalid(format!(
            "invalid {what} {other}: expected a whole number"
        ))),
    }
}

fn float(v: &Value) -> Result<f64> {
    let f = match v {
        Value::Float(f) => *f,
        Value::Integer(i) => *i as f64,
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| BenchError::invalid(format!("expected a number, got '{s}'")))?,
        other => {
            return Err(BenchError::invalid(format!(
                "expected a number, got {other}"
            )));
        }
    };
    if !f.is_finite() {
        return Err(BenchError::invalid(format!(
            "expected a finite number, got {f}"
        )));
    }
    Ok(f)
}

fn boolean(v: &Value) -> Result<bool> {
    match v {
        Value::Boolean(b) => Ok(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(true),
            "false" | "no" | "off" | "0" => Ok(false),
            _ => Err(BenchError::invalid(format!(
                "expected true or false, got '{s}'"
            ))),
        },
        other => Err(BenchError::invalid(format!(
            "expected true or false, got {other}"
        ))),
    }
}
