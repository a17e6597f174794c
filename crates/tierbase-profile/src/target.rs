//! Where a profiler may write.
//!
//! Owns: the safety rules of issue 4 — never write to a path that exists unless `--force`;
//! refuse block devices that hold a file system or a partition table unless `--force`, and
//! mounted ones always; a temporary file's name when no path is given (removed afterwards,
//! also on Ctrl-C and a closed output pipe, by `tierbase_bench::cleanup`) — and the detection
//! behind them. Must not touch: what is done with the target, or its removal.
//!
//! File systems are recognised by **reading the superblock magic numbers** at their documented
//! offsets (ext2/3/4, XFS, Btrfs, F2FS, swap, FAT, NTFS, LUKS, LVM2, squashfs, ISO 9660) and
//! partition tables (GPT, MBR); `blkid` is not required.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tierbase_bench::{BenchError, Result};

/// What the profiler will write to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A file the profiler creates (temporary or at a given path) and removes afterwards
    /// unless asked to keep it.
    New,
    /// An existing regular file (`--force` given).
    ExistingFile,
    /// A block device (`--force` given; no file system found, not mounted).
    BlockDevice,
}

/// A checked target path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The path.
    pub path: PathBuf,
    /// What it is.
    pub kind: TargetKind,
    /// Whether the path was chosen by the profiler (no path, or a directory, given).
    pub temporary: bool,
}

/// Decides where to write. `path`: what the user gave (`None`: a temporary file in
/// `default_dir`; a directory: a temporary file inside it). `block_devices_allowed`: whether a
/// block device is an acceptable target (block profiling) or not (memory regions).
pub fn resolve(
    path: Option<&Path>,
    default_dir: &Path,
    force: bool,
    block_devices_allowed: bool,
) -> Result<Target> {
    let temp_in = |dir: &Path| -> Result<Target> {
        if !dir.is_dir() {
            return Err(BenchError::invalid(format!(
                "directory {} does not exist",
                dir.display()
            )));
        }
        Ok(Target {
            path: temp_name(dir),
            kind: TargetKind::New,
            temporary: true,
        })
    };
    let Some(path) = path else {
        return temp_in(default_dir);
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(BenchError::invalid(format!(
                    "cannot create {}: directory {} does not exist",
                    path.display(),
                    parent.display()
                )));
            }
            return Ok(Target {
                path: path.to_path_buf(),
                kind: TargetKind::New,
                temporary: false,
            });
        }
        Err(e) => return Err(BenchError::io("stat", path, e)),
    };
    let ft = meta.file_type();
    if ft.is_dir() {
        return temp_in(path);
    }
    if ft.is_file() {
        if !force {
            return Err(BenchError::invalid(format!(
                "refusing to write to existing file {} (its contents would be overwritten); \
                 pass --force to allow it, or give a new path or a directory",
                path.display()
            )));
        }
        return Ok(Target {
            path: path.to_path_buf(),
            kind: TargetKind::ExistingFile,
            temporary: false,
        });
    }
    if ft.is_block_device() {
        if !block_devices_allowed {
            return Err(BenchError::invalid(format!(
                "{} is a block device; memory benchmarks need a file (or a DAX file system's file)",
                path.display()
            )));
        }
        if let Some(m) = mounted(path) {
            return Err(BenchError::invalid(format!(
                "refusing to write to {}: {m} is mounted",
                path.display()
            )));
        }
        let signature = filesystem_signature(path)?;
        if !force {
            let what = signature.map_or_else(
                || "all data on it would be overwritten".to_string(),
                |s| format!("it holds {s} (found by its superblock magic)"),
            );
            return Err(BenchError::invalid(format!(
                "refusing to write to block device {}: {what}; pass --force to allow it",
                path.display()
            )));
        }
        return Ok(Target {
            path: path.to_path_buf(),
            kind: TargetKind::BlockDevice,
            temporary: false,
        });
    }
    Err(BenchError::invalid(format!(
        "{} is neither a regular file, a directory nor a block device",
        path.display()
    )))
}

fn temp_name(dir: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    dir.join(format!(
        "tierbase-profile-{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The mount source that makes `dev` busy: the device itself or one of its partitions.
fn mounted(dev: &Path) -> Option<String> {
    let dev = std::fs::canonicalize(dev).ok()?;
    let dev = dev.to_string_lossy().into_owned();
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let src = l.split_whitespace().next()?;
        let src_c = std::fs::canonicalize(src)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| src.to_string());
        (src_c == dev || (src_c.starts_with(&dev) && src_c.len() > dev.len()))
            .then(|| src.to_string())
    })
}

/// The file system or partition table found at the start of `path`, by magic number; `None` if
/// nothing is recognised (also for devices shorter than a superblock).
pub fn filesystem_signature(path: &Path) -> Result<Option<&'static str>> {
    let mut f = File::open(path).map_err(|e| BenchError::io("open", path, e))?;
    let mut buf = vec![0u8; 70 * 1024];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(BenchError::io("read", path, e)),
        }
    }
    buf.truncate(n);
    Ok(signature_of(&buf))
}

/// [`filesystem_signature`] on the first bytes of a device.
pub fn signature_of(b: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| b.get(off..off + magic.len()) == Some(magic);
    if at(1080, &[0x53, 0xEF]) {
        return Some("an ext2/3/4 file system");
    }
    if at(0, b"XFSB") {
        return Some("an XFS file system");
    }
    if at(0x10040, b"_BHRfS_M") {
        return Some("a Btrfs file system");
    }
    if at(1024, &[0x10, 0x20, 0xF5, 0xF2]) {
        return Some("an F2FS file system");
    }
    if at(4086, b"SWAPSPACE2") || at(4086, b"SWAP-SPACE") {
        return Some("swap space");
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if at(512, b"LABELONE") {
        return Some("an LVM2 physical volume");
    }
    if at(0, b"hsqs") {
        return Some("a squashfs file system");
    }
    if at(32769, b"CD001") {
        return Some("an ISO 9660 file system");
    }
    if at(3, b"NTFS    ") {
        return Some("an NTFS file system");
    }
    if at(54, b"FAT") || at(82, b"FAT32") {
        return Some("a FAT file system");
    }
    if at(512, b"EFI PART") {
        return Some("a GPT partition table");
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("an MBR partition table or boot sector");
    }
    None
}
