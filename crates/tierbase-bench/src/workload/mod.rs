//! YCSB core workloads and their description.
//!
//! Owns: [`CoreWorkload`] (load, A–F with YCSB's proportions and distributions),
//! [`WorkloadSpec`] (everything that defines a workload; also readable from a small TOML file),
//! [`RequestDistribution`], [`SizeSpec`] (fixed or distributed value sizes), key and value
//! encoding ([`keys`]) and the per-thread operation stream ([`ops`]). Must not touch: stores,
//! timing or output.

pub mod keys;
pub mod ops;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::generator::YCSB_ZIPFIAN_CONSTANT;
pub use crate::generator::ZipfianEta;
pub use keys::{MIN_KEY_SIZE, TEXT_KEY_MIN_SIZE, VALUE_HEADER_LEN};
use tierbase::one_line_toml_error;

/// Largest key accepted, in bytes.
pub const MAX_KEY_SIZE: usize = 4096;
/// Largest value accepted, in bytes.
pub const MAX_VALUE_SIZE: u64 = 16 << 20;

/// The YCSB core workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreWorkload {
    /// The load phase alone: insert `record_count` records.
    Load,
    /// A: update heavy, 50% reads / 50% updates, zipfian.
    A,
    /// B: read mostly, 95% reads / 5% updates, zipfian.
    B,
    /// C: read only, zipfian.
    C,
    /// D: read latest, 95% reads / 5% inserts, latest.
    D,
    /// E: short ranges, 95% scans (1–100 records) / 5% inserts, zipfian.
    E,
    /// F: read-modify-write, 50% reads / 50% read-modify-writes, zipfian.
    F,
}

impl CoreWorkload {
    /// All core workloads, in YCSB's order.
    pub const ALL: [CoreWorkload; 7] = [
        CoreWorkload::Load,
        CoreWorkload::A,
        CoreWorkload::B,
        CoreWorkload::C,
        CoreWorkload::D,
        CoreWorkload::E,
        CoreWorkload::F,
    ];

    /// Short name: `load`, `a` … `f`.
    pub fn name(self) -> &'static str {
        match self {
            CoreWorkload::Load => "load",
            CoreWorkload::A => "a",
            CoreWorkload::B => "b",
            CoreWorkload::C => "c",
            CoreWorkload::D => "d",
            CoreWorkload::E => "e",
            CoreWorkload::F => "f",
        }
    }

    /// One line for tables and reports.
    pub fn description(self) -> &'static str {
        match self {
            CoreWorkload::Load => "load: insert all records",
            CoreWorkload::A => "A: 50% read, 50% update (zipfian)",
            CoreWorkload::B => "B: 95% read, 5% update (zipfian)",
            CoreWorkload::C => "C: 100% read (zipfian)",
            CoreWorkload::D => "D: 95% read latest, 5% insert (latest)",
            CoreWorkload::E => "E: 95% scan of 1-100 records, 5% insert (zipfian)",
            CoreWorkload::F => "F: 50% read, 50% read-modify-write (zipfian)",
        }
    }

    /// Parses a name (`a`, `A`, `workloada`, `load`).
    pub fn parse(name: &str) -> Result<Self> {
        let lower = name.trim().to_ascii_lowercase();
        let short = lower.strip_prefix("workload").unwrap_or(&lower);
        CoreWorkload::ALL
            .into_iter()
            .find(|w| w.name() == short)
            .ok_or_else(|| BenchError::UnknownWorkload {
                name: name.to_string(),
                known: CoreWorkload::ALL.map(CoreWorkload::name).join(", "),
            })
    }

    /// The workload as YCSB's `workloads/workload<x>` file defines it, with the given sizes.
    pub fn spec(self, record_count: u64, operation_count: u64) -> WorkloadSpec {
        let mut s = WorkloadSpec {
            name: self.name().to_string(),
            load_only: false,
            record_count,
            operation_count,
            read_proportion: 0.0,
            update_proportion: 0.0,
            insert_proportion: 0.0,
            scan_proportion: 0.0,
            read_modify_write_proportion: 0.0,
            delete_proportion: 0.0,
            request_distribution: RequestDistribution::Zipfian,
            zipfian_theta: YCSB_ZIPFIAN_CONSTANT,
            zipfian_eta: ZipfianEta::Ycsb,
            max_scan_length: 100,
            scan_length_distribution: ScanLengthDistribution::Uniform,
            key_size: 24,
            value_size: SizeSpec::Fixed(100),
        };
        match self {
            CoreWorkload::Load => {
                s.load_only = true;
                s.insert_proportion = 1.0;
            }
            CoreWorkload::A => {
                s.read_proportion = 0.5;
                s.update_proportion = 0.5;
            }
            CoreWorkload::B => {
                s.read_proportion = 0.95;
                s.update_proportion = 0.05;
            }
            CoreWorkload::C => s.read_proportion = 1.0,
            CoreWorkload::D => {
                s.read_proportion = 0.95;
                s.insert_proportion = 0.05;
                s.request_distribution = RequestDistribution::Latest;
            }
            CoreWorkload::E => {
                s.scan_proportion = 0.95;
                s.insert_proportion = 0.05;
            }
            CoreWorkload::F => {
                s.read_proportion = 0.5;
                s.read_modify_write_proportion = 0.5;
            }
        }
        s
    }
}

impl fmt::Display for CoreWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How keys are chosen for reads, updates, scans and read-modify-writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestDistribution {
    /// Every loaded key equally likely (YCSB `UniformLongGenerator` over the loaded records).
    Uniform,
    /// YCSB's scrambled zipfian over the loaded records plus the expected inserts.
    Zipfian,
    /// YCSB's skewed-latest: the newest inserts are the most popular.
    Latest,
}

impl RequestDistribution {
    /// Name as used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            RequestDistribution::Uniform => "uniform",
            RequestDistribution::Zipfian => "zipfian",
            RequestDistribution::Latest => "latest",
        }
    }

    /// Parses [`RequestDistribution::name`].
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(RequestDistribution::Uniform),
            "zipfian" => Ok(RequestDistribution::Zipfian),
            "latest" => Ok(RequestDistribution::Latest),
            _ => Err(BenchError::invalid(format!(
                "unknown request distribution '{s}' (known: uniform, zipfian, latest)"
            ))),
        }
    }
}

impl fmt::Display for RequestDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How scan lengths are drawn from `[1, max_scan_length]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanLengthDistribution {
    /// Uniform (YCSB's default).
    Uniform,
    /// Zipfian: short scans most likely.
    Zipfian,
}

/// A size in bytes: fixed, or drawn per operation from a distribution (YCSB
/// `fieldlengthdistribution`). Written as `100`, `uniform:16-1024` or `zipfian:16-1024`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeSpec {
    /// Always this many bytes.
    Fixed(u64),
    /// Uniform in `[min, max]`.
    Uniform {
        /// Smallest size.
        min: u64,
        /// Largest size.
        max: u64,
    },
    /// Zipfian in `[min, max]`: `min` most likely.
    Zipfian {
        /// Smallest (most likely) size.
        min: u64,
        /// Largest size.
        max: u64,
    },
}

impl SizeSpec {
    /// Smallest possible size.
    pub fn min(&self) -> u64 {
        match *self {
            SizeSpec::Fixed(n) => n,
            SizeSpec::Uniform { min, .. } | SizeSpec::Zipfian { min, .. } => min,
        }
    }

    /// Largest possible size.
    pub fn max(&self) -> u64 {
        match *self {
            SizeSpec::Fixed(n) => n,
            SizeSpec::Uniform { max, .. } | SizeSpec::Zipfian { max, .. } => max,
        }
    }
}

impl fmt::Display for SizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SizeSpec::Fixed(n) => write!(f, "{n}"),
            SizeSpec::Uniform { min, max } => write!(f, "uniform:{min}-{max}"),
            SizeSpec::Zipfian { min, max } => write!(f, "zipfian:{min}-{max}"),
        }
    }
}

fn parse_bytes(s: &str, whole: &str) -> Result<u64> {
    // One size syntax for every option (K/M/G/T); the message adds the distributions.
    crate::units::parse_size(s).map_err(|e| {
        let within = if s.trim() == whole.trim() {
            String::new()
        } else {
            format!(" (in '{whole}')")
        };
        BenchError::invalid(format!(
            "{e}{within}; a value size is written as bytes (100, 4K, 1M), uniform:MIN-MAX or \
             zipfian:MIN-MAX"
        ))
    })
}

impl FromStr for SizeSpec {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        let Some((kind, range)) = t.split_once(':') else {
            return Ok(SizeSpec::Fixed(parse_bytes(t, s)?));
        };
        let (lo, hi) = range.split_once('-').ok_or_else(|| {
            BenchError::invalid(format!(
                "invalid size '{s}': a distributed size is written {kind}:MIN-MAX"
            ))
        })?;
        let (min, max) = (parse_bytes(lo, s)?, parse_bytes(hi, s)?);
        if min > max {
            return Err(BenchError::invalid(format!(
                "invalid size '{s}': minimum {min} exceeds maximum {max}"
            )));
        }
        match kind.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(SizeSpec::Uniform { min, max }),
            "zipfian" => Ok(SizeSpec::Zipfian { min, max }),
            other => Err(BenchError::invalid(format!(
                "invalid size '{s}': unknown distribution '{other}' (use uniform or zipfian)"
            ))),
        }
    }
}

impl Serialize for SizeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            SizeSpec::Fixed(n) => s.serialize_u64(n),
            _ => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(SizeSpec::Fixed(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Everything that defines a workload: YCSB `CoreWorkload` properties, one value per record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Name shown in results (`a` … `f`, `load`, or a custom name).
    pub name: String,
    /// Only the load phase is run and measured (workload `load`).
    pub load_only: bool,
    /// Records inserted by the load phase (YCSB `recordcount`).
    pub record_count: u64,
    /// Measured operations of the run phase (YCSB `operationcount`; warm-up is extra).
    pub operation_count: u64,
    /// Share of reads.
    pub read_proportion: f64,
    /// Share of updates (replace the value of an existing key).
    pub update_proportion: f64,
    /// Share of inserts of new keys.
    pub insert_proportion: f64,
    /// Share of scans.
    pub scan_proportion: f64,
    /// Share of read-modify-writes (read, then update the same key; timed as one operation).
    pub read_modify_write_proportion: f64,
    /// Share of deletes of existing keys (tierbase micro benchmarks; not a YCSB property).
    #[serde(default)]
    pub delete_proportion: f64,
    /// Key chooser for reads, updates, scans, read-modify-writes.
    pub request_distribution: RequestDistribution,
    /// Zipfian constant θ (YCSB `zipfian.constant`, 0.99).
    pub zipfian_theta: f64,
    /// How a zipfian whose item count grows (the "latest" chooser of workload D) recomputes
    /// its `eta`: `ycsb` (default) from the initial count, exactly as YCSB 0.17, so results
    /// compare with published ones; `grown` from the current count, as Gray et al.'s formula
    /// intends. Other choosers never grow and are the same either way. A result file without
    /// the field predates the option, when the port always used the grown count: it reads
    /// back as `grown`.
    #[serde(default = "eta_of_older_results")]
    pub zipfian_eta: ZipfianEta,
    /// Longest scan (YCSB `maxscanlength`; 100 in workload E).
    pub max_scan_length: u64,
    /// Scan length distribution (YCSB `scanlengthdistribution`).
    pub scan_length_distribution: ScanLengthDistribution,
    /// Key size in bytes (see [`keys`] for the encoding).
    pub key_size: usize,
    /// Value size in bytes, fixed or distributed.
    pub value_size: SizeSpec,
}

/// [`WorkloadSpec::zipfian_eta`] of result files written before the field existed.
fn eta_of_older_results() -> ZipfianEta {
    ZipfianEta::Grown
}

/// A workload TOML file: every field optional, on top of a core workload (`base`, default `a`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadFile {
    base: Option<String>,
    name: Option<String>,
    record_count: Option<u64>,
    operation_count: Option<u64>,
    read_proportion: Option<f64>,
    update_proportion: Option<f64>,
    insert_proportion: Option<f64>,
    scan_proportion: Option<f64>,
    read_modify_write_proportion: Option<f64>,
    delete_proportion: Option<f64>,
    request_distribution: Option<RequestDistribution>,
    zipfian_theta: Option<f64>,
    zipfian_eta: Option<ZipfianEta>,
    max_scan_length: Option<u64>,
    scan_length_distribution: Option<ScanLengthDistribution>,
    key_size: Option<usize>,
    value_size: Option<SizeSpec>,
}

/// Default record count of the command line and of workload files.
pub const DEFAULT_RECORD_COUNT: u64 = 100_000;
/// Default measured operation count.
pub const DEFAULT_OPERATION_COUNT: u64 = 1_000_000;

impl WorkloadSpec {
    /// Reads a workload TOML file (see [`WorkloadSpec::from_toml`]).
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        Self::parse_toml(&text, stem.as_deref()).map_err(|e| match e {
            BenchError::InvalidArgument(detail) => BenchError::BadWorkloadFile {
                path: path.to_path_buf(),
                detail,
            },
            other => other,
        })
    }

    /// Parses workload TOML: every field of [`WorkloadSpec`] is optional and overrides the
    /// core workload named by `base` (default `a`), for example
    ///
    /// ```toml
    /// base = "b"
    /// name = "read-heavy-uniform"
    /// request_distribution = "uniform"
    /// value_size = "uniform:64-4096"
    /// ```
    ///
    /// and `zipfian_eta = "grown"` for Gray et al.'s η in a growing "latest" chooser (the
    /// default, `"ycsb"`, is YCSB's own).
    ///
    /// Proportions are weights, divided by their sum as YCSB does. A file that changes the
    /// base workload without a `name` is named `<base>-custom` (a file read by
    /// [`WorkloadSpec::from_toml_file`]: its file name), so that its results are never shown
    /// as the core workload's.
    pub fn from_toml(text: &str) -> Result<Self> {
        Self::parse_toml(text, None)
    }

    fn parse_toml(text: &str, file_stem: Option<&str>) -> Result<Self> {
        let f: WorkloadFile =
            toml::from_str(text).map_err(|e| BenchError::invalid(one_line_toml_error(&e, text)))?;
        let base = match f.base.as_deref() {
            Some(b) => CoreWorkload::parse(b)?,
            None => CoreWorkload::A,
        };
        let mut s = base.spec(DEFAULT_RECORD_COUNT, DEFAULT_OPERATION_COUNT);
        let named = f.name.is_some();
        if let Some(v) = f.name {
            s.name = v;
        }
        let core = s.clone();
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = f.$field { s.$field = v; } )* };
        }
        set!(
            record_count,
            operation_count,
            read_proportion,
            update_proportion,
            insert_proportion,
            scan_proportion,
            read_modify_write_proportion,
            delete_proportion,
            request_distribution,
            zipfian_theta,
            zipfian_eta,
            max_scan_length,
            scan_length_distribution,
            key_size,
            value_size
        );
        // Counts and sizes are the run's scale, not the workload's mix.
        let mut scaled = core.clone();
        scaled.record_count = s.record_count;
        scaled.operation_count = s.operation_count;
        scaled.key_size = s.key_size;
        scaled.value_size = s.value_size;
        if !named && s != scaled {
            s.name = match file_stem {
                Some(stem) => stem.to_string(),
                None => format!("{}-custom", core.name),
            };
        }
        s.validate()?;
        Ok(s)
    }

    /// Whether the run phase issues scans.
    pub fn has_scans(&self) -> bool {
        !self.load_only && self.scan_proportion > 0.0
    }

    /// Checks every parameter; the message names the parameter and the limit.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| {
            Err(BenchError::invalid(format!(
                "workload '{}': {m}",
                self.name
            )))
        };
        if self.name.trim().is_empty() {
            return Err(BenchError::invalid("workload name must not be empty"));
        }
        if self.record_count == 0 {
            return bad("record count must be at least 1".into());
        }
        if !self.load_only && self.operation_count == 0 {
            return bad("operation count must be at least 1".into());
        }
        if self.key_size < MIN_KEY_SIZE || self.key_size > MAX_KEY_SIZE {
            return bad(format!(
                "key size {} is out of range: keys need {MIN_KEY_SIZE} to {MAX_KEY_SIZE} bytes",
                self.key_size
            ));
        }
        let (vmin, vmax) = (self.value_size.min(), self.value_size.max());
        if vmin < VALUE_HEADER_LEN as u64 {
            return bad(format!(
                "value size {vmin} is too small: values carry an {VALUE_HEADER_LEN}-byte key \
                 fingerprint for verification, so at least {VALUE_HEADER_LEN} bytes are needed"
            ));
        }
        if vmax > MAX_VALUE_SIZE {
            return bad(format!(
                "value size {vmax} is too large (at most {MAX_VALUE_SIZE} bytes)"
            ));
        }
        if !self.load_only {
            let props = [
                ("read_proportion", self.read_proportion),
                ("update_proportion", self.update_proportion),
                ("insert_proportion", self.insert_proportion),
                ("scan_proportion", self.scan_proportion),
                (
                    "read_modify_write_proportion",
                    self.read_modify_write_proportion,
                ),
                ("delete_proportion", self.delete_proportion),
            ];
            for (field, v) in props {
                if !v.is_finite() || v < 0.0 {
                    return bad(format!("{field} must be zero or positive, got {v}"));
                }
            }
            if props.iter().map(|(_, v)| v).sum::<f64>() <= 0.0 {
                return bad("at least one operation proportion must be positive".into());
            }
            if self.scan_proportion > 0.0 && self.max_scan_length == 0 {
                return bad("max scan length must be at least 1".into());
            }
        }
        crate::generator::ZipfianGenerator::new(0, 1, self.zipfian_theta)
            .map(|_| ())
            .or_else(|e| bad(e.to_string()))
    }

    /// The operation mix as `(operation, proportion)` with zero shares left out.
    pub fn mix(&self) -> Vec<(crate::measure::OpKind, f64)> {
        use crate::measure::OpKind;
        if self.load_only {
            return vec![(OpKind::Insert, 1.0)];
        }
        [
            (OpKind::Read, self.read_proportion),
            (OpKind::Update, self.update_proportion),
            (OpKind::Insert, self.insert_proportion),
            (OpKind::Scan, self.scan_proportion),
            (OpKind::ReadModifyWrite, self.read_modify_write_proportion),
            (OpKind::Delete, self.delete_proportion),
        ]
        .into_iter()
        .filter(|(_, p)| *p > 0.0)
        .collect()
    }
}

/// Parses a comma-separated list of workload names (`a,b,load`).
pub fn parse_workload_list(list: &str) -> Result<Vec<CoreWorkload>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        out.push(CoreWorkload::parse(part)?);
    }
    if out.is_empty() {
        return Err(BenchError::invalid("no workload given"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!(CoreWorkload::parse("A").unwrap(), CoreWorkload::A);
        assert_eq!(CoreWorkload::parse("workloadf").unwrap(), CoreWorkload::F);
        assert_eq!(CoreWorkload::parse("load").unwrap(), CoreWorkload::Load);
        let e = CoreWorkload::parse("z").unwrap_err().to_string();
        assert_eq!(
            e, "unknown workload 'z' (known: load, a, b, c, d, e, f)",
            "{e}"
        );
        assert_eq!(
            parse_workload_list("a, c").unwrap(),
            vec![CoreWorkload::A, CoreWorkload::C]
        );
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!("100".parse::<SizeSpec>().unwrap(), SizeSpec::Fixed(100));
        assert_eq!("4K".parse::<SizeSpec>().unwrap(), SizeSpec::Fixed(4096));
        let u: SizeSpec = "uniform:16-1K".parse().unwrap();
        assert_eq!(u, SizeSpec::Uniform { min: 16, max: 1024 });
        assert_eq!(u.to_string(), "uniform:16-1024");
        assert!("zipfian:10-5".parse::<SizeSpec>().is_err());
        assert!("normal:1-5".parse::<SizeSpec>().is_err());
        assert!("x".parse::<SizeSpec>().is_err());
        assert!("-3".parse::<SizeSpec>().is_err());
    }

    #[test]
    fn validation_names_the_problem() {
        let mut s = CoreWorkload::A.spec(10, 10);
        s.validate().unwrap();
        s.value_size = SizeSpec::Fixed(4);
        assert!(s.validate().unwrap_err().to_string().contains("too small"));
        s.value_size = SizeSpec::Fixed(100);
        s.key_size = 3;
        assert!(s.validate().unwrap_err().to_string().contains("key size 3"));
        s.key_size = 24;
        s.zipfian_theta = 1.5;
        assert!(s.validate().unwrap_err().to_string().contains("zipfian"));
        s.zipfian_theta = 0.99;
        s.read_proportion = 0.0;
        s.update_proportion = 0.0;
        assert!(s.validate().is_err());
    }

    #[test]
    fn shipped_example_file_parses() {
        let s = WorkloadSpec::from_toml(include_str!("../../workloads/example.toml")).unwrap();
        assert_eq!(s.name, "b-uniform-mixed-values");
        assert_eq!(s.read_modify_write_proportion, 0.05);
        assert_eq!(s.value_size, SizeSpec::Uniform { min: 64, max: 1024 });
    }

    #[test]
    fn toml_overrides_a_base() {
        let s = WorkloadSpec::from_toml(
            "base = \"b\"\nname = \"mine\"\nrequest_distribution = \"uniform\"\n\
             value_size = \"uniform:64-128\"\nrecord_count = 500\n",
        )
        .unwrap();
        assert_eq!(s.name, "mine");
        assert_eq!(s.read_proportion, 0.95);
        assert_eq!(s.request_distribution, RequestDistribution::Uniform);
        assert_eq!(s.value_size, SizeSpec::Uniform { min: 64, max: 128 });
        assert_eq!(s.record_count, 500);
        assert_eq!(s.zipfian_eta, ZipfianEta::Ycsb, "YCSB's eta unless asked");
        let d = WorkloadSpec::from_toml("base = \"d\"\nzipfian_eta = \"grown\"\n").unwrap();
        assert_eq!(d.zipfian_eta, ZipfianEta::Grown);
        assert_eq!(d.request_distribution, RequestDistribution::Latest);
        // A file that changes the mix without a name is not shown as its base workload.
        let custom = WorkloadSpec::from_toml("base = \"a\"\nread_proportion = 2.0\n").unwrap();
        assert_eq!(custom.name, "a-custom");
        let scaled = WorkloadSpec::from_toml("base = \"c\"\nrecord_count = 7\n").unwrap();
        assert_eq!(scaled.name, "c", "only the scale changed");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hot-reads.toml");
        std::fs::write(&file, "request_distribution = \"uniform\"\n").unwrap();
        assert_eq!(
            WorkloadSpec::from_toml_file(&file).unwrap().name,
            "hot-reads"
        );
        assert!(WorkloadSpec::from_toml("zipfian_eta = \"gray\"").is_err());
        assert!(WorkloadSpec::from_toml("colour = 3").is_err());
        assert!(WorkloadSpec::from_toml("value_size = 2").is_err());
        assert!(WorkloadSpec::from_toml("base = \"q\"").is_err());
    }
}
