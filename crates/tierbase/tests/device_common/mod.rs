//! Helpers shared by the `device_*` integration tests.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use tierbase::device::{DurabilityMode, FsKind, fs_kind};

/// A temporary directory and what its file system is.
#[derive(Debug)]
pub struct TestDir {
    /// Human-readable name for assertion messages.
    pub name: &'static str,
    /// The directory (removed on drop).
    pub dir: TempDir,
}

impl TestDir {
    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The durability mode a region file here must get by default (no DAX on this machine).
    pub fn expected_durability(&self) -> DurabilityMode {
        match fs_kind(self.path()) {
            FsKind::Memory => DurabilityMode::ProcessCrash,
            FsKind::Disk => DurabilityMode::Msync,
        }
    }
}

/// A directory on disk (under the target directory) and, when it exists, one in `/dev/shm`.
pub fn test_dirs() -> Vec<TestDir> {
    let mut v = vec![disk_dir()];
    if let Some(d) = shm_dir() {
        v.push(d);
    }
    v
}

/// A temporary directory under Cargo's target tmp dir (normally a disk file system).
pub fn disk_dir() -> TestDir {
    TestDir {
        name: "disk",
        dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir on disk"),
    }
}

/// A temporary directory in `/dev/shm` (tmpfs), if that exists.
pub fn shm_dir() -> Option<TestDir> {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || fs_kind(shm) != FsKind::Memory {
        return None;
    }
    Some(TestDir {
        name: "shm",
        dir: tempfile::tempdir_in(shm).ok()?,
    })
}

/// A file system mounted for one test (needs root); unmounted (lazily) on drop.
#[derive(Debug)]
pub struct Mount {
    /// The mount point (inside `_holder`).
    pub point: PathBuf,
    _holder: TempDir,
}

impl Mount {
    /// Mounts `fstype` with `options` on a fresh directory. `None` (with a note on stderr) when
    /// this process may not mount, so the calling test can skip cleanly.
    pub fn new(fstype: &str, options: &str) -> Option<Mount> {
        let holder = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).ok()?;
        let point = holder.path().join("mnt");
        std::fs::create_dir(&point).ok()?;
        let src = CString::new(fstype).ok()?;
        let target = CString::new(point.as_os_str().as_bytes()).ok()?;
        let data = CString::new(options).ok()?;
        // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                src.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            eprintln!(
                "note: cannot mount {fstype} ({}); skipping the part of this test that needs it",
                std::io::Error::last_os_error()
            );
            return None;
        }
        Some(Mount {
            point,
            _holder: holder,
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(target) = CString::new(self.point.as_os_str().as_bytes()) {
            // SAFETY: a valid NUL-terminated path; MNT_DETACH unmounts even if still busy.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Deterministic test bytes: a function of `seed` and the position, never zero.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(31))
                .rotate_left(17);
            (x % 255) as u8 + 1
        })
        .collect()
}

/// Number of `unit`-byte lines overlapping `[off, off + len)`.
pub fn lines_touched(off: u64, len: u64, unit: u64) -> u64 {
    if len == 0 {
        0
    } else {
        (off + len - 1) / unit - off / unit + 1
    }
}
