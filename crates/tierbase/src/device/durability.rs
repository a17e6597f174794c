//! Durability modes: what "persisted" means on a given medium.
//!
//! Owns: the [`DurabilityMode`] vocabulary shared by every store and the detection of which mode
//! a path can offer. Must not touch: mappings or flushing (see `region`).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What a successful `persist` guarantees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DurabilityMode {
    /// DAX mapping (`MAP_SYNC`): flush + fence reaches the persistence domain; survives power
    /// loss.
    Dax,
    /// Page-cache mapping of a file on a disk: `persist` calls `msync` on the touched pages;
    /// survives power loss, at the cost of a disk write per persist.
    Msync,
    /// Page-cache mapping of a file in memory (tmpfs): data survives a process crash
    /// (`kill -9`) but **not** a reboot or power loss.
    ProcessCrash,
    /// Anonymous memory, or durability switched off: nothing survives the process.
    None,
}

impl DurabilityMode {
    /// Short name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DurabilityMode::Dax => "dax",
            DurabilityMode::Msync => "msync",
            DurabilityMode::ProcessCrash => "process-crash",
            DurabilityMode::None => "none",
        }
    }

    /// One sentence a user can rely on.
    pub fn guarantee(self) -> &'static str {
        match self {
            DurabilityMode::Dax => "survives power loss (flush + fence on a DAX mapping)",
            DurabilityMode::Msync => "survives power loss (msync of touched pages on persist)",
            DurabilityMode::ProcessCrash => {
                "survives a process crash (kill -9), NOT a reboot or power loss (memory-backed file)"
            }
            DurabilityMode::None => "nothing survives the process (no durability)",
        }
    }

    /// What a region in this mode lives on, for a store's description ("tmpfs-backed file").
    pub fn medium(self) -> &'static str {
        match self {
            DurabilityMode::Dax => "DAX file",
            DurabilityMode::Msync => "disk file (msync)",
            DurabilityMode::ProcessCrash => "tmpfs-backed file",
            DurabilityMode::None => "volatile memory",
        }
    }

    /// What an acknowledged write survives, in two words: `power loss`, `process crash` or
    /// `nothing` (a store's description, the server's `INFO`).
    pub fn survives(self) -> &'static str {
        if self.survives_power_loss() {
            "power loss"
        } else if self.survives_process_crash() {
            "process crash"
        } else {
            "nothing"
        }
    }

    /// Whether acknowledged data survives a power loss.
    pub fn survives_power_loss(self) -> bool {
        matches!(self, DurabilityMode::Dax | DurabilityMode::Msync)
    }

    /// Whether acknowledged data survives the process being killed.
    pub fn survives_process_crash(self) -> bool {
        !matches!(self, DurabilityMode::None)
    }

    /// Strength rank: higher is stronger. `Dax` and `Msync` give the same guarantee.
    fn rank(self) -> u8 {
        match self {
            DurabilityMode::Dax | DurabilityMode::Msync => 2,
            DurabilityMode::ProcessCrash => 1,
            DurabilityMode::None => 0,
        }
    }

    /// Whether a medium offering `available` can run in mode `self`.
    ///
    /// Any weaker mode can be chosen deliberately (for example `None` on a DAX file for a
    /// volatile benchmark). `Dax` needs a DAX mapping; `Msync` works on any file.
    pub fn can_run_on(self, available: DurabilityMode) -> bool {
        match self {
            DurabilityMode::Dax => available == DurabilityMode::Dax,
            // msync on a memory-backed file would claim a power-loss guarantee it cannot give.
            DurabilityMode::Msync => available.rank() == 2,
            _ => self.rank() <= available.rank(),
        }
    }

    /// Parses [`DurabilityMode::name`].
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "dax" => Some(DurabilityMode::Dax),
            "msync" => Some(DurabilityMode::Msync),
            "process-crash" | "processcrash" => Some(DurabilityMode::ProcessCrash),
            "none" => Some(DurabilityMode::None),
            _ => None,
        }
    }
}

impl fmt::Display for DurabilityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When an acknowledged write becomes durable (as redb's `Durability` and fjall's
/// `PersistMode`). Orthogonal to [`DurabilityMode`], which says what "durable" means on the
/// medium.
///
/// Only media whose persist is a file sync (`msync` mode: a file on a disk) defer anything: there
/// a sync costs a disk write, and deferring it is what makes small writes fast. On DAX and
/// memory-backed files a persist is a flush and a fence, already cheap, and every level behaves
/// as `Immediate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Durable when the call returns (the default).
    #[default]
    Immediate,
    /// Acknowledged before it is durable; a background flush makes every write durable within
    /// the interval (and `sync` at once). A power loss may lose the writes of the last
    /// interval: each key then holds a value it had at, or after, the last completed flush.
    /// A process crash loses nothing (the page cache keeps the writes).
    Eventual(std::time::Duration),
    /// As `Eventual` without the background flush: writes become durable at an explicit
    /// `sync` or a clean close. For bulk loads that can be redone.
    None,
}

impl Durability {
    /// Short name used in reports (`immediate`, `eventual:100ms`, `none`).
    pub fn name(self) -> String {
        match self {
            Durability::Immediate => "immediate".into(),
            Durability::Eventual(d) => format!("eventual:{}ms", d.as_millis()),
            Durability::None => "none".into(),
        }
    }

    /// Parses `immediate`, `eventual` (100 ms), `eventual:<ms>` or `none`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "immediate" => Some(Durability::Immediate),
            "eventual" => Some(Durability::Eventual(std::time::Duration::from_millis(100))),
            "none" => Some(Durability::None),
            _ => {
                let ms = s.strip_prefix("eventual:")?;
                let ms = ms.strip_suffix("ms").unwrap_or(ms).parse::<u64>().ok()?;
                (ms > 0).then(|| Durability::Eventual(std::time::Duration::from_millis(ms)))
            }
        }
    }

    /// Whether acknowledged writes may wait for a later sync.
    pub fn defers(self) -> bool {
        self != Durability::Immediate
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The kind of file system a path lives on, as far as durability is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsKind {
    /// tmpfs / ramfs: memory-backed.
    Memory,
    /// Anything else (ext4, xfs, ...): assumed disk-backed.
    Disk,
}

/// Looks at the file system holding `path` (or its nearest existing ancestor).
pub fn fs_kind(path: &Path) -> FsKind {
    let mut probe = path;
    loop {
        if probe.exists() {
            break;
        }
        match probe.parent() {
            Some(p) if !p.as_os_str().is_empty() => probe = p,
            _ => {
                probe = Path::new(".");
                break;
            }
        }
    }
    let Ok(cpath) = std::ffi::CString::new(probe.as_os_str().as_encoded_bytes()) else {
        return FsKind::Disk;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `cpath` is a valid NUL-terminated string and `st` points to writable storage of
    // the right type; statfs writes only into it.
    let rc = unsafe { libc::statfs(cpath.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return FsKind::Disk;
    }
    // SAFETY: statfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    kind_of(&st)
}

/// The file system of `file` when it is a regular file (`None` for a device node and the
/// like), asked of the open file itself (`fstatfs`), not of a path: a device node such as
/// `/dev/nvme0n1` lives on devtmpfs, which reports tmpfs's magic, but its `fdatasync` flushes
/// the device's write cache. `Disk` when the file system cannot be asked, as [`fs_kind`].
pub fn regular_file_fs(file: &std::fs::File) -> Option<FsKind> {
    use std::os::fd::AsRawFd;
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return None;
    }
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: the descriptor is open for the borrow of `file`, and `st` points to writable
    // storage of the right type; fstatfs writes only into it.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Some(FsKind::Disk);
    }
    // SAFETY: fstatfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    Some(kind_of(&st))
}

fn kind_of(st: &libc::statfs) -> FsKind {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    if magic == TMPFS_MAGIC || magic == RAMFS_MAGIC {
        FsKind::Memory
    } else {
        FsKind::Disk
    }
}

/// Whether files at `path` live on a tmpfs mounted to back them with 2 MiB pages
/// (`huge=always` or `huge=within_size`): a region there is mapped with 2 MiB entries, as on
/// DAX persistent memory, instead of 4 KiB ones. Read from `/proc/self/mountinfo` (the mount
/// holding the path's nearest existing ancestor); false where that cannot be read.
pub fn on_huge_page_tmpfs(path: &Path) -> bool {
    let probe = path
        .ancestors()
        .chain(std::iter::once(Path::new(".")))
        .find_map(|p| std::fs::canonicalize(p).ok());
    let Some(probe) = probe else {
        return false;
    };
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    huge_tmpfs_in(&mountinfo, &probe)
}

/// [`on_huge_page_tmpfs`] for a mountinfo text and a canonical path: the last-mounted entry
/// with the longest mount point that holds the path decides.
fn huge_tmpfs_in(mountinfo: &str, path: &Path) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for line in mountinfo.lines() {
        // "id parent major:minor root mount-point options ... - fstype source super-options"
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype), Some(options)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 3))
        else {
            continue;
        };
        let mount = Path::new(mount);
        if !path.starts_with(mount) {
            continue;
        }
        let depth = mount.components().count();
        let huge = *fstype == "tmpfs"
            && options
                .split(',')
                .any(|o| o == "huge=always" || o == "huge=within_size");
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, huge));
        }
    }
    best.is_some_and(|(_, huge)| huge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_page_tmpfs_is_read_from_the_innermost_mount() {
        let info = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 22 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683656k
31 22 0:28 / /mnt/huge rw,relatime - tmpfs tmpfs rw,size=20971520k,huge=always
32 31 0:29 / /mnt/huge/inner rw,relatime - tmpfs tmpfs rw,size=1024k
33 22 0:30 / /mnt/ws rw,relatime - tmpfs tmpfs rw,huge=within_size
34 22 0:31 / /mnt/ext rw,relatime - ext4 /dev/sdb1 rw,huge=always
";
        let on = |p: &str| huge_tmpfs_in(info, Path::new(p));
        assert!(on("/mnt/huge/pb/plush.tb"));
        assert!(on("/mnt/huge"));
        assert!(on("/mnt/ws/x"));
        assert!(
            !on("/mnt/huge/inner/x"),
            "an inner mount without huge= decides"
        );
        assert!(!on("/mnt/hugeish/x"), "a path prefix that is not a parent");
        assert!(!on("/dev/shm/x"));
        assert!(!on("/work/x"));
        assert!(!on("/mnt/ext/x"), "only tmpfs");
    }

    #[test]
    fn mode_ordering() {
        use DurabilityMode::*;
        assert!(Dax.can_run_on(Dax));
        assert!(!Dax.can_run_on(Msync));
        assert!(Msync.can_run_on(Dax));
        assert!(Msync.can_run_on(Msync));
        assert!(!Msync.can_run_on(ProcessCrash)); // tmpfs cannot survive power loss
        assert!(!Msync.can_run_on(None));
        assert!(ProcessCrash.can_run_on(Msync));
        assert!(!ProcessCrash.can_run_on(None));
        assert!(None.can_run_on(ProcessCrash));
        for m in [Dax, Msync, ProcessCrash, None] {
            assert_eq!(DurabilityMode::parse(m.name()), Some(m));
        }
        assert!(!ProcessCrash.survives_power_loss());
        assert!(ProcessCrash.survives_process_crash());
    }

    #[test]
    fn durability_levels_parse_and_name() {
        use std::time::Duration;
        for d in [
            Durability::Immediate,
            Durability::Eventual(Duration::from_millis(250)),
            Durability::None,
        ] {
            assert_eq!(Durability::parse(&d.name()), Some(d));
        }
        assert_eq!(
            Durability::parse("eventual"),
            Some(Durability::Eventual(Duration::from_millis(100)))
        );
        assert_eq!(
            Durability::parse("eventual:7"),
            Some(Durability::Eventual(Duration::from_millis(7)))
        );
        for bad in ["eventual:0", "eventual:x", "later", ""] {
            assert_eq!(Durability::parse(bad), None, "{bad}");
        }
        assert!(!Durability::Immediate.defers());
        assert!(Durability::None.defers());
    }

    #[test]
    fn shm_is_memory_when_present() {
        if Path::new("/dev/shm").exists() {
            assert_eq!(
                fs_kind(Path::new("/dev/shm/does/not/exist")),
                FsKind::Memory
            );
        }
    }
}
