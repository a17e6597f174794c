//! What this machine can really do, found by trying it.
//!
//! Owns: the probes behind `tierbase devices` — CPU flush instructions, DAX, io_uring, `O_DIRECT`
//! and the durability mode files in a directory would get. Must not touch: user data (probes use
//! a temporary file in the directory and remove it).

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::cpu::{self, CpuFeatures, FlushInstruction};
use super::durability::{DurabilityMode, FsKind, fs_kind};
use crate::error::{Error, Result};

/// The outcome of probing one capability.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    /// Whether it works.
    pub available: bool,
    /// Why not, or how.
    pub detail: String,
}

impl Probe {
    fn yes(detail: impl Into<String>) -> Self {
        Probe {
            available: true,
            detail: detail.into(),
        }
    }
    fn no(detail: impl Into<String>) -> Self {
        Probe {
            available: false,
            detail: detail.into(),
        }
    }
}

/// Everything `tierbase devices` reports about this machine.
#[derive(Clone, Debug, Serialize)]
pub struct MachineReport {
    /// CPU model string.
    pub cpu_model: String,
    /// Whether the CPU reports running under a hypervisor.
    pub virtualized: bool,
    /// Logical CPUs.
    pub cpus: usize,
    /// Persistence-related CPU features.
    pub cpu_features: CpuFeatures,
    /// The best flush instruction this CPU has (what persists run on DAX).
    pub flush_instruction: FlushInstruction,
    /// What a store's persists run by default in the data directory: the best instruction on
    /// DAX; none on a memory-backed file (it survives kill -9 from the page cache; `--flush`
    /// asks for one) or on a disk file (msync).
    pub flush_in_data_dir: FlushInstruction,
    /// Kernel release.
    pub kernel: String,
    /// `/dev/pmem*` and `/dev/dax*` devices found.
    pub pmem_devices: Vec<PathBuf>,
    /// The directory probed.
    pub data_dir: PathBuf,
    /// Memory-backed (tmpfs) or disk-backed file system.
    pub data_dir_fs: FsKind,
    /// `MAP_SYNC` (DAX) mapping of a file in the data directory.
    pub dax: Probe,
    /// Durability mode a region file in the data directory gets.
    pub durability: DurabilityMode,
    /// io_uring usable by this process.
    pub io_uring: Probe,
    /// `O_DIRECT` accepted for files in the data directory.
    pub o_direct: Probe,
}

/// Probes the machine, using `data_dir` (which must exist and be writable) for file probes.
pub fn probe(data_dir: &Path) -> Result<MachineReport> {
    let meta = std::fs::metadata(data_dir).map_err(|e| Error::io("stat", Some(data_dir), e))?;
    if !meta.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{} is not a directory",
            data_dir.display()
        )));
    }
    let features = cpu::features();
    let fs = fs_kind(data_dir);
    let dax = probe_dax(data_dir)?;
    let durability = if dax.available {
        DurabilityMode::Dax
    } else if fs == FsKind::Memory {
        DurabilityMode::ProcessCrash
    } else {
        DurabilityMode::Msync
    };
    Ok(MachineReport {
        cpu_model: cpu_model(),
        virtualized: cpuinfo_has_flag("hypervisor"),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        cpu_features: features,
        flush_instruction: features.best_flush(),
        flush_in_data_dir: if durability == DurabilityMode::Dax {
            features.best_flush()
        } else {
            FlushInstruction::None
        },
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        pmem_devices: pmem_devices(),
        data_dir: data_dir.to_path_buf(),
        data_dir_fs: fs,
        dax,
        durability,
        io_uring: probe_io_uring(),
        o_direct: probe_o_direct(data_dir)?,
    })
}

fn temp_probe_path(dir: &Path, what: &str) -> PathBuf {
    dir.join(format!(".tierbase-probe-{what}-{}", std::process::id()))
}

/// Removes the probe file when dropped, whatever happens in between.
struct TempFile(PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn probe_dax(dir: &Path) -> Result<Probe> {
    let path = temp_probe_path(dir, "dax");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io("create probe file in", Some(dir), e))?;
    let _guard = TempFile(path);
    file.set_len(4096)
        .map_err(|e| Error::io("size probe file in", Some(dir), e))?;
    // SAFETY: a fresh 4 KiB mapping of our own file at a kernel-chosen address, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Ok(Probe::no(format!(
            "MAP_SYNC refused ({e}): not a DAX file system"
        )));
    }
    // SAFETY: unmapping exactly the mapping created above.
    unsafe { libc::munmap(p, 4096) };
    Ok(Probe::yes("MAP_SYNC accepted: DAX file system"))
}

fn probe_o_direct(dir: &Path) -> Result<Probe> {
    let path = temp_probe_path(dir, "direct");
    let r = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path);
    let _guard = TempFile(path);
    Ok(match r {
        Ok(_) => Probe::yes("O_DIRECT accepted"),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Probe::no("O_DIRECT refused by the file system (buffered I/O + fdatasync fallback)")
        }
        Err(e) => return Err(Error::io("create probe file in", Some(dir), e)),
    })
}

fn probe_io_uring() -> Probe {
    match io_uring::IoUring::new(8) {
        Ok(ring) => {
            // A ring can be created yet operations refused (seccomp); try a no-op.
            let nop = io_uring::opcode::Nop::new().build();
            let mut ring = ring;
            // SAFETY: a NOP entry references no memory.
            let pushed = unsafe { ring.submission().push(&nop) }.is_ok();
            match (pushed, ring.submit_and_wait(1)) {
                (true, Ok(_)) => Probe::yes("io_uring ring created and a no-op completed"),
                (_, Err(e)) => {
                    Probe::no(format!("io_uring submit failed: {e}; thread-pool fallback"))
                }
                (false, _) => Probe::no("io_uring queue refused an entry; thread-pool fallback"),
            }
        }
        Err(e) => Probe::no(format!("io_uring unavailable: {e}; thread-pool fallback")),
    }
}

fn pmem_devices() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("pmem") || n.starts_with("dax"))
        })
        .collect();
    v.sort();
    v
}

fn cpuinfo() -> String {
    std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default()
}

fn cpu_model() -> String {
    cpuinfo()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or_else(
            || std::env::consts::ARCH.to_string(),
            |s| s.trim().to_string(),
        )
}

fn cpuinfo_has_flag(flag: &str) -> bool {
    cpuinfo()
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == flag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_a_temp_dir_and_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let r = probe(dir.path()).unwrap();
        assert_eq!(r.flush_instruction, r.cpu_features.best_flush());
        assert!(r.cpus >= 1);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "probe files removed"
        );
        if r.data_dir_fs == FsKind::Memory {
            assert_eq!(r.durability, DurabilityMode::ProcessCrash);
        }
    }

    #[test]
    fn probe_rejects_missing_dir() {
        assert!(probe(Path::new("/definitely/not/here")).is_err());
    }
}
