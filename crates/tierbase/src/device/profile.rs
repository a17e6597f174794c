//! Device profiles and the catalogue that holds them.
//!
//! Owns: the [`DeviceProfile`] description of a device (latency, bandwidth, granularity, PIO
//! asymmetry α and concurrency k_r/k_w, price, capacity), the built-in catalogue
//! (`profiles/catalogue.toml`, embedded at build time) and user catalogue files in the same
//! format. Must not touch: devices (the emulator and the profiler consume profiles).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, one_line_toml_error};

const BUILTIN: &str = include_str!("../../profiles/catalogue.toml");

/// Whether a device is byte-addressable memory or a block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// Byte-addressable (DRAM, persistent memory, CXL memory).
    Memory,
    /// Block-addressed (SSD, HDD).
    Block,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Memory => "memory",
            DeviceKind::Block => "block",
        })
    }
}

/// What a device does, as measured or as cited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Unique name (case-insensitive).
    pub name: String,
    /// Memory or block.
    pub kind: DeviceKind,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Latency of one random read at queue depth 1, in ns.
    pub read_latency_ns: f64,
    /// Latency of one random write at queue depth 1, in ns (informational; the emulator derives
    /// write service time from α, see the module docs of `emulate`).
    pub write_latency_ns: f64,
    /// Read bandwidth in MB/s (10^6 bytes per second).
    pub read_bandwidth_mb_s: f64,
    /// Write bandwidth in MB/s.
    pub write_bandwidth_mb_s: f64,
    /// Smallest unit the medium reads or writes internally, in bytes.
    pub access_granularity: u64,
    /// Asymmetry α. Block devices (PIO, ACE): the cost of one write in reads — a lone write
    /// takes α read times, and a batch of up to `k_w` writes costs α reads as a batch of up to
    /// `k_r` reads costs one; measured as the depth-1 write ÷ read latency. Memory devices
    /// (PerMA-Bench): saturated read throughput ÷ saturated write throughput. docs/EMULATION.md
    /// says why the two kinds read α differently.
    pub alpha: f64,
    /// Concurrency k_r: outstanding reads needed to saturate the device.
    pub k_r: u32,
    /// Concurrency k_w: outstanding writes needed to saturate the device.
    pub k_w: u32,
    /// Price per GB (US$ unless the catalogue says otherwise).
    pub price_per_gb: f64,
    /// Capacity in GB.
    pub capacity_gb: f64,
    /// Memory devices: DIMMs in one interleave set (the stripe is this many 4 KiB pages), so
    /// stores can lay blocks out one page per DIMM. `None` when unknown or not interleaved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interleave_ways: Option<u32>,
    /// Where the figures come from when not the built-in catalogue, e.g. "measured by
    /// tierbase profile on 2026-11-22, /dev/nvme0n1, native".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl DeviceProfile {
    /// Checks that every figure is usable (positive, finite, k ≥ 1, granularity a power of two).
    pub fn validate(&self) -> Result<()> {
        let bad = |detail: String| Error::InvalidProfile {
            path: None,
            detail: format!("profile '{}': {detail}", self.name),
        };
        if self.name.trim().is_empty() {
            return Err(bad("empty name".into()));
        }
        for (field, v) in [
            ("read_latency_ns", self.read_latency_ns),
            ("write_latency_ns", self.write_latency_ns),
            ("read_bandwidth_mb_s", self.read_bandwidth_mb_s),
            ("write_bandwidth_mb_s", self.write_bandwidth_mb_s),
            ("alpha", self.alpha),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(format!("{field} must be a positive number, got {v}")));
            }
        }
        for (field, v) in [
            ("price_per_gb", self.price_per_gb),
            ("capacity_gb", self.capacity_gb),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(format!("{field} must be zero or positive, got {v}")));
            }
        }
        if self.interleave_ways == Some(0) {
            return Err(bad("interleave_ways must be at least 1".into()));
        }
        if self.k_r == 0 || self.k_w == 0 {
            return Err(bad("k_r and k_w must be at least 1".into()));
        }
        if !self.access_granularity.is_power_of_two() {
            return Err(bad(format!(
                "access_granularity must be a power of two, got {}",
                self.access_granularity
            )));
        }
        Ok(())
    }

    /// Service time of one write slot. Block devices: α · t_r, so a lone write costs α reads
    /// and a batch of up to k_w writes costs the same (the PIO cost view; the saturated write
    /// throughput is then α · k_r / k_w times below the read throughput). Memory devices:
    /// α · t_r · k_w / k_r, which makes the saturated write throughput the saturated read
    /// throughput divided by α.
    pub fn write_service_ns(&self) -> f64 {
        match self.kind {
            DeviceKind::Block => self.alpha * self.read_latency_ns,
            DeviceKind::Memory => {
                self.alpha * self.read_latency_ns * f64::from(self.k_w) / f64::from(self.k_r)
            }
        }
    }

    /// Saturated write operations per second in the slot model (before bandwidth caps).
    pub fn write_plateau_ops(&self) -> f64 {
        f64::from(self.k_w) * 1e9 / self.write_service_ns()
    }

    /// Saturated read operations per second in the PIO model (before bandwidth caps).
    pub fn read_plateau_ops(&self) -> f64 {
        f64::from(self.k_r) * 1e9 / self.read_latency_ns
    }
}

/// A set of device profiles: the built-in catalogue plus any user files.
#[derive(Clone, Debug, Default)]
pub struct Catalogue {
    profiles: Vec<DeviceProfile>,
}

#[derive(Serialize, Deserialize)]
struct CatalogueFile {
    #[serde(default)]
    profile: Vec<DeviceProfile>,
}

impl Catalogue {
    /// The catalogue shipped with tierbase.
    pub fn builtin() -> Self {
        // The embedded file is checked by a unit test; an error here is a build defect.
        Self::parse(BUILTIN, None).unwrap_or_default()
    }

    /// The built-in catalogue, overlaid with the user's default file (if it exists) and then
    /// with each of `extra` (which must exist). Later entries replace earlier ones of the same name.
    pub fn load(extra: &[PathBuf]) -> Result<Self> {
        let mut cat = Self::builtin();
        if let Some(user) = Self::user_file()
            && user.exists()
        {
            cat.merge(Self::load_file(&user)?);
        }
        for path in extra {
            cat.merge(Self::load_file(path)?);
        }
        Ok(cat)
    }

    /// The user's catalogue file: `$TIERBASE_PROFILES`, else
    /// `$XDG_CONFIG_HOME/tierbase/profiles.toml`, else `~/.config/tierbase/profiles.toml`.
    pub fn user_file() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("TIERBASE_PROFILES") {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("tierbase").join("profiles.toml"))
    }

    /// Reads one catalogue file.
    pub fn load_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", Some(path), e))?;
        Self::parse(&text, Some(path))
    }

    /// Parses catalogue text (TOML with `[[profile]]` entries).
    pub fn parse(text: &str, path: Option<&Path>) -> Result<Self> {
        let invalid = |detail: String| Error::InvalidProfile {
            path: path.map(Path::to_path_buf),
            detail,
        };
        let file: CatalogueFile =
            toml::from_str(text).map_err(|e| invalid(one_line_toml_error(&e, text)))?;
        let mut cat = Catalogue::default();
        for p in file.profile {
            p.validate().map_err(|e| match e {
                Error::InvalidProfile { detail, .. } => invalid(detail),
                other => other,
            })?;
            if cat.get(&p.name).is_some() {
                return Err(invalid(format!("profile '{}' defined twice", p.name)));
            }
            cat.profiles.push(p);
        }
        Ok(cat)
    }

    /// Adds or replaces profiles from `other`.
    pub fn merge(&mut self, other: Catalogue) {
        for p in other.profiles {
            self.insert(p);
        }
    }

    /// Adds `profile`, replacing any of the same name.
    pub fn insert(&mut self, profile: DeviceProfile) {
        match self
            .profiles
            .iter_mut()
            .find(|q| q.name.eq_ignore_ascii_case(&profile.name))
        {
            Some(slot) => *slot = profile,
            None => self.profiles.push(profile),
        }
    }

    /// Looks a profile up by name (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&DeviceProfile> {
        self.profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Looks a profile up, or says which names exist.
    pub fn require(&self, name: &str) -> Result<&DeviceProfile> {
        self.get(name).ok_or_else(|| Error::UnknownProfile {
            name: name.to_string(),
            known: self.names().join(", "),
        })
    }

    /// All names, in catalogue order.
    pub fn names(&self) -> Vec<String> {
        self.profiles.iter().map(|p| p.name.clone()).collect()
    }

    /// All profiles, in catalogue order.
    pub fn profiles(&self) -> &[DeviceProfile] {
        &self.profiles
    }

    /// Writes `profile` into the catalogue file at `path` (creating it, or replacing an entry of
    /// the same name), atomically via a temporary file and rename.
    pub fn save_profile(path: &Path, profile: &DeviceProfile) -> Result<()> {
        profile.validate()?;
        let mut cat = if path.exists() {
            Self::load_file(path)?
        } else {
            Catalogue::default()
        };
        cat.insert(profile.clone());
        let text = toml::to_string_pretty(&CatalogueFile {
            profile: cat.profiles,
        })
        .map_err(|e| Error::InvalidProfile {
            path: Some(path.to_path_buf()),
            detail: e.to_string(),
        })?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("create directory", Some(dir), e))?;
        }
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(|e| Error::io("write", Some(&tmp), e))?;
        std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", Some(path), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalogue_parses_and_has_the_issue_devices() {
        let cat = Catalogue::parse(BUILTIN, None).expect("built-in catalogue must parse");
        for name in [
            "dram",
            "optane-pmem-100",
            "optane-pmem-200",
            "cxl-memory",
            "optane-ssd",
            "pcie-ssd-p4510",
            "sata-ssd",
            "cloud-ssd",
            "hdd",
        ] {
            assert!(cat.get(name).is_some(), "missing {name}");
        }
        let pcie = cat.require("PCIE-SSD-P4510").unwrap();
        assert_eq!((pcie.alpha, pcie.k_r, pcie.k_w), (2.8, 80, 8));
        let sata = cat.require("sata-ssd").unwrap();
        assert_eq!((sata.alpha, sata.k_r, sata.k_w), (1.5, 25, 9));
        let cloud = cat.require("cloud-ssd").unwrap();
        assert_eq!((cloud.alpha, cloud.k_r, cloud.k_w), (2.0, 11, 19));
        let optane = cat.require("optane-ssd").unwrap();
        assert_eq!((optane.alpha, optane.k_r, optane.k_w), (1.1, 6, 5));
    }

    #[test]
    fn block_profiles_bandwidth_does_not_hide_k() {
        // At the access granularity the PIO slot plateau must not exceed the bandwidth cap by
        // much, or the profiler could not measure k back from an emulated device.
        for p in Catalogue::builtin().profiles() {
            for (dir, ops, cap) in [
                ("read", p.read_plateau_ops(), p.read_bandwidth_mb_s),
                ("write", p.write_plateau_ops(), p.write_bandwidth_mb_s),
            ] {
                let plateau_mb_s = ops * p.access_granularity as f64 / 1e6;
                assert!(
                    plateau_mb_s <= cap * 1.3,
                    "{}: {dir} slot plateau {plateau_mb_s:.0} MB/s vs cap {cap}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn unknown_and_invalid_profiles_are_errors() {
        let cat = Catalogue::builtin();
        let err = cat.require("nvme9000").unwrap_err();
        assert!(matches!(err, Error::UnknownProfile { .. }));
        assert!(err.to_string().contains("dram"));
        let bad = BUILTIN.replacen("k_r = 64", "k_r = 0", 1);
        assert!(matches!(
            Catalogue::parse(&bad, None),
            Err(Error::InvalidProfile { .. })
        ));
        assert!(matches!(
            Catalogue::parse("[[profile]]\nname = 3", None),
            Err(Error::InvalidProfile { .. })
        ));
        // Syntax errors are one line with a position (the CLI prints them as they are).
        let err = Catalogue::parse("[[profile]]\nname = \n", Some(Path::new("p.toml")))
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "one line: {err}");
        assert!(
            err.contains("p.toml") && err.contains("line 2, column 8"),
            "{err}"
        );
        let dup = format!(
            "{BUILTIN}\n{}",
            &BUILTIN[BUILTIN.find("[[profile]]").unwrap()..]
        );
        assert!(Catalogue::parse(&dup, None).is_err());
    }

    #[test]
    fn save_and_reload_a_profile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("profiles.toml");
        let mut p = Catalogue::builtin().require("sata-ssd").unwrap().clone();
        p.name = "my-disk".into();
        p.k_r = 31;
        Catalogue::save_profile(&path, &p).unwrap();
        p.k_w = 17;
        Catalogue::save_profile(&path, &p).unwrap(); // replaces, not duplicates
        let cat = Catalogue::load_file(&path).unwrap();
        assert_eq!(cat.profiles().len(), 1);
        assert_eq!(cat.require("my-disk").unwrap(), &p);
    }

    #[test]
    fn a_block_write_costs_alpha_reads_and_a_memory_write_alpha_at_the_plateau() {
        let cat = Catalogue::builtin();
        let ssd = cat.require("pcie-ssd-p4510").unwrap();
        assert!((ssd.write_service_ns() / ssd.read_latency_ns - ssd.alpha).abs() < 1e-9);
        let plateaus = ssd.read_plateau_ops() / ssd.write_plateau_ops();
        assert!(
            (plateaus - ssd.alpha * 80.0 / 8.0).abs() < 1e-9,
            "{plateaus}"
        );
        let pmem = cat.require("optane-pmem-100").unwrap();
        let plateaus = pmem.read_plateau_ops() / pmem.write_plateau_ops();
        assert!((plateaus - pmem.alpha).abs() < 1e-9, "{plateaus}");
    }
}
