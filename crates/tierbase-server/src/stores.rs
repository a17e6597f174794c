//! The stores the server can serve, by name, and the reply policy each gets.
//!
//! Owns: opening a store for serving ([`open_store`]) and deciding when a write's reply may
//! go out ([`ReplyPolicy`]). Must not touch: the protocol or commands. Adding a store is one
//! arm here: open it, and say whether the server syncs before replying.

use std::io::Read;
use std::path::Path;

use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::device::{Durability, FsKind, REGION_HEADER_LEN, REGION_MAGIC, fs_kind};
use tierbase::hash::{PlushOptions, PlushStore};
use tierbase::kv::{KvOptions, KvStore};
use tierbase::store::Store;

use crate::error::{Result, ServerError};

/// Store names `--store` accepts.
pub const STORES: &[&str] = &["kv", "btree", "plush"];

/// The store to serve at `path` when none is named ([`resolve_store`]).
pub const AUTO: &str = "auto";

/// The store `kind` names, or for [`AUTO`] the one `path` holds or suits: an existing
/// directory is a `btree` store; an existing file is the `kv` or `plush` store its header
/// names; a new path on tmpfs or ramfs gets `kv` (records in the mapped file, no log), and on
/// any other file system `btree` (a sequential log and page writes a disk takes well: the KV
/// store's in-place invalidations are random page writes there, docs/BENCHMARKS.md Figure 6).
pub fn resolve_store(kind: &str, path: &Path) -> Result<&'static str> {
    if kind != AUTO {
        let named = STORES
            .iter()
            .copied()
            .find(|s| *s == kind)
            .ok_or_else(|| unknown_store(kind))?;
        // Another store's files under the name: say so, rather than what opening them as this
        // store fails with ("create directory: File exists" for a kv file named as a btree).
        if named != "btree" && path.is_dir() {
            return Err(ServerError::Config(format!(
                "{} is a directory: a {named} store is a file (a directory holds a btree store)",
                path.display()
            )));
        }
        return match held_store(path) {
            Ok(Some(held)) if held != named => Err(ServerError::Config(format!(
                "{} holds a {held} store, not a {named} store: serve it with --store {held} \
                 (or without --store)",
                path.display()
            ))),
            _ => Ok(named),
        };
    }
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(match fs_kind(path) {
                FsKind::Memory => "kv",
                FsKind::Disk => "btree",
            });
        }
        Err(e) => return Err(which_store(path, &e.to_string())),
    };
    if meta.is_dir() {
        // A B+-tree store's directory, or an empty one to make it in; never files of a store
        // dropped into a directory that holds other things.
        let holds_store = path.join(tierbase::btree::PAGES_FILE).exists();
        let empty = std::fs::read_dir(path)
            .map_err(|e| which_store(path, &e.to_string()))?
            .next()
            .is_none();
        return if holds_store || empty {
            Ok("btree")
        } else {
            Err(which_store(
                path,
                "a directory without a B+-tree store in it, and not empty",
            ))
        };
    }
    if !meta.is_file() {
        return Err(which_store(path, "neither a file nor a directory"));
    }
    match held_store(path) {
        Ok(Some(held)) => Ok(held),
        Ok(None) => Err(which_store(path, "neither a kv nor a plush store file")),
        Err(e) => Err(which_store(path, &e.to_string())),
    }
}

/// The store whose files are at `path`, if any: a directory with a B+-tree's page file, or
/// a file with a region's header and then a kv or plush store's magic at its data's start.
fn held_store(path: &Path) -> std::io::Result<Option<&'static str>> {
    if path.is_dir() {
        let pages = path.join(tierbase::btree::PAGES_FILE).exists();
        return Ok(pages.then_some("btree"));
    }
    let mut head = vec![0u8; REGION_HEADER_LEN + 8];
    match std::fs::File::open(path)?.read_exact(&mut head) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        read => read?,
    }
    let magic = &head[REGION_HEADER_LEN..];
    Ok(if &head[..8] != REGION_MAGIC {
        None
    } else if magic == tierbase::kv::layout::MAGIC {
        Some("kv")
    } else if magic == tierbase::hash::layout::MAGIC {
        Some("plush")
    } else {
        None
    })
}

fn unknown_store(kind: &str) -> ServerError {
    ServerError::Config(format!(
        "unknown store '{kind}' (stores: {}, {AUTO})",
        STORES.join(", ")
    ))
}

fn which_store(path: &Path, why: &str) -> ServerError {
    ServerError::Config(format!(
        "cannot tell which store {} holds ({why}): name it with --store ({})",
        path.display(),
        STORES.join(", ")
    ))
}

/// When a write's reply is sent, and what the reply then promises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyPolicy {
    /// The commit level asked for (`immediate`, `eventual:<ms>ms`, `none`).
    pub commit: String,
    /// Sync the store before replying to a batch that wrote (the store defers its syncs,
    /// and the level asked for is `immediate`): one sync serves every connection waiting.
    pub sync_before_reply: bool,
    /// What an acknowledged write survives, in words (`INFO persistence`).
    pub guarantee: String,
    /// The same, as one of `power-loss`, `process-crash`, `none`.
    pub guarantee_class: &'static str,
}

/// Opens (or creates) the store `kind` at `path` for serving at commit level `level`; `kind`
/// may be [`AUTO`] ([`resolve_store`] chooses).
///
/// At `immediate` a store that can defer its syncs is opened deferring, and the server syncs
/// once per batch of writes before replying: concurrent connections share each sync (group
/// commit) and every reply still means durable.
pub fn open_store(
    kind: &str,
    path: &Path,
    level: Durability,
) -> Result<(Box<dyn Store>, ReplyPolicy)> {
    open_store_with(kind, path, level, None)
}

/// [`open_store`] with a DRAM budget (`None`: the store's default): the buffer pool of
/// `btree`; for `plush`, the DRAM level of a store this call creates (about 9 KiB per entry;
/// an existing store keeps its own). `kv` ignores it.
///
/// `plush` makes every write durable before it returns and has no deferred levels: it is
/// served at `immediate` only, and another level is refused rather than reported falsely.
pub fn open_store_with(
    kind: &str,
    path: &Path,
    level: Durability,
    dram_budget: Option<u64>,
) -> Result<(Box<dyn Store>, ReplyPolicy)> {
    match resolve_store(kind, path)? {
        "kv" => {
            let store_level = match level {
                Durability::Immediate => Durability::None,
                other => other,
            };
            let opts = KvOptions::default().durability(store_level);
            let store = KvStore::open_or_create(path, &opts)?;
            let policy = reply_policy(&store, level);
            Ok((Box::new(store), policy))
        }
        "btree" => {
            // As the file stores refuse it: a store directory is made, its parents are not.
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                && !parent.is_dir()
            {
                return Err(ServerError::Config(format!(
                    "{}: the directory {} does not exist",
                    path.display(),
                    parent.display()
                )));
            }
            let store_level = match level {
                Durability::Immediate => Durability::None,
                other => other,
            };
            let mut opts = BTreeOptions::default().durability(store_level);
            if let Some(b) = dram_budget {
                opts = opts.dram_bytes(b);
            }
            let store = BTreeStore::open_or_create(path, &opts)?;
            let policy = reply_policy(&store, level);
            Ok((Box::new(store), policy))
        }
        "plush" => {
            if level != Durability::Immediate {
                return Err(ServerError::Config(format!(
                    "the plush store makes every write durable before it returns and has no \
                     deferred levels: --durability {} is not available for it (use immediate)",
                    level.name()
                )));
            }
            let mut opts = PlushOptions::default();
            // Only a new store is sized by it (an existing one keeps its own DRAM level).
            if let Some(b) = dram_budget.filter(|_| !path.exists()) {
                opts = opts.dram_bits(tierbase::hash::dram_bits_for_budget(b)?);
            }
            let store = PlushStore::open_or_create(path, &opts)?;
            let policy = reply_policy(&store, level);
            Ok((Box::new(store), policy))
        }
        other => Err(unknown_store(other)),
    }
}

/// An existing store opened for reading only (`tierbase serve --read-only`: a snapshot, a
/// read-only mount, an inspection beside other read-only opens): reads are served, every
/// write gets `-READONLY` and nothing changes the store's files. `dram_budget` as for
/// [`open_store_with`] (the B+-tree's pool, which must hold the pages its restart redoes).
pub fn open_store_read_only(
    kind: &str,
    path: &Path,
    dram_budget: Option<u64>,
) -> Result<(Box<dyn Store>, ReplyPolicy)> {
    if !path.exists() {
        return Err(ServerError::Config(format!(
            "{}: no store to serve read-only",
            path.display()
        )));
    }
    let store: Box<dyn Store> = match resolve_store(kind, path)? {
        "kv" => {
            let mut opts = KvOptions::default();
            opts.region.read_only = true;
            Box::new(KvStore::open(path, &opts)?)
        }
        "btree" => {
            let mut opts = BTreeOptions::default();
            opts.read_only = true;
            if let Some(b) = dram_budget {
                opts = opts.dram_bytes(b);
            }
            Box::new(BTreeStore::open(path, &opts)?)
        }
        "plush" => {
            let mut opts = PlushOptions::default();
            opts.region.read_only = true;
            Box::new(PlushStore::open(path, &opts)?)
        }
        other => return Err(unknown_store(other)),
    };
    let policy = reply_policy(store.as_ref(), Durability::Immediate);
    Ok((store, policy))
}

/// The reply policy for `store` opened for serving at `level`.
pub fn reply_policy(store: &dyn Store, level: Durability) -> ReplyPolicy {
    let medium = store.describe().guarantee;
    let defers = store.defers_sync();
    let in_process = !store.applied_survives_process_crash();
    let (guarantee, class) = match (medium.as_str(), level) {
        ("read-only", _) => (
            "read-only: every write is refused, nothing changes the store".to_string(),
            "read-only",
        ),
        ("nothing", _) => ("nothing survives the process".to_string(), "none"),
        // Applied writes may wait in the process's memory until the store's next sync.
        ("power loss", Durability::Eventual(d)) if in_process => (
            format!(
                "a crash of the process or a power loss may take the last {} ms of \
                 acknowledged writes",
                d.as_millis()
            ),
            "none",
        ),
        ("power loss", Durability::None) if in_process => (
            "a crash of the process or a power loss may take every acknowledged write since \
             the last sync (a checkpoint or a clean close)"
                .to_string(),
            "none",
        ),
        (_, Durability::Eventual(d)) if in_process => (
            format!(
                "a crash of the process may take the last {} ms of acknowledged writes, and a \
                 power loss all of them",
                d.as_millis()
            ),
            "none",
        ),
        (_, Durability::None) if in_process => (
            "a crash of the process may take every acknowledged write since the last sync (a \
             checkpoint or a clean close), and a power loss all of them"
                .to_string(),
            "none",
        ),
        ("power loss", Durability::Immediate) => (
            "every acknowledged write survives power loss".to_string(),
            "power-loss",
        ),
        ("power loss", Durability::Eventual(d)) => (
            format!(
                "acknowledged writes survive a process crash; a power loss may take the last {} ms",
                d.as_millis()
            ),
            "process-crash",
        ),
        ("power loss", Durability::None) => (
            "acknowledged writes survive a process crash; a power loss may take everything \
             since the last sync or clean close"
                .to_string(),
            "process-crash",
        ),
        _ => (
            "acknowledged writes survive a process crash (kill -9), not a power loss".to_string(),
            "process-crash",
        ),
    };
    ReplyPolicy {
        commit: level.name(),
        sync_before_reply: defers && level == Durability::Immediate,
        guarantee,
        guarantee_class: class,
    }
}

#[cfg(test)]
mod tests {
    use tierbase::device::Durability;

    #[test]
    fn a_served_plush_store_keeps_within_its_dram_budget() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        // Budgets above the store's fixed part (`tierbase::hash::DRAM_BYTES_FIXED`, about 1 MiB);
        // one below its smallest store (2^4 entries) is refused.
        let tiny = dir.path().join("tiny.plush");
        let refused = super::open_store_with("plush", &tiny, Durability::Immediate, Some(64 << 10));
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("below Plush's smallest DRAM level")),
            "{refused:?}"
        );
        for budget in [2u64 << 20, 8 << 20] {
            let path = dir.path().join(format!("{budget}.plush"));
            let (store, _) =
                super::open_store_with("plush", &path, Durability::Immediate, Some(budget))
                    .unwrap();
            let dram: u64 = store
                .metrics()
                .into_iter()
                .find(|(k, _)| k == "plush_dram_bytes")
                .unwrap()
                .1
                .parse()
                .unwrap();
            assert!(dram <= budget && dram > budget / 2, "{dram} of {budget}");
            store.close().unwrap();
        }
    }

    /// The guarantee each store states at each level on each medium there is here: an
    /// applied write is in the mapped file (KV) or, but at `none`, written to the log file
    /// (B+-tree), so a process crash keeps it; at `none` the B+-tree's may wait in its log
    /// tail in the process until a sync; memory keeps nothing through a power loss.
    #[test]
    fn the_reply_policy_says_what_each_store_keeps() {
        use std::time::Duration;
        use tierbase::device::{FsKind, fs_kind};
        let shm = tempfile::tempdir_in("/dev/shm").ok();
        let disk = tempfile::tempdir().unwrap();
        let eventual = Durability::Eventual(Duration::from_millis(50));
        for dir in shm.iter().chain([&disk]).map(|d| d.path()) {
            let memory = fs_kind(dir) == FsKind::Memory;
            for kind in ["kv", "btree"] {
                for level in [Durability::Immediate, eventual, Durability::None] {
                    let path = dir.join(format!("{kind}-{}", level.name()));
                    let (store, policy) =
                        super::open_store_with(kind, &path, level, Some(4 << 20)).unwrap();
                    let ctx = format!("{kind} at {} (memory: {memory}): {policy:?}", level.name());
                    let (class, says) = match (kind, level, memory) {
                        (_, Durability::Immediate, false) => ("power-loss", "survives power loss"),
                        (_, Durability::Immediate, true) => ("process-crash", "not a power loss"),
                        ("btree", Durability::None, true) => (
                            "none",
                            "since the last sync (a checkpoint or a clean close), and a power loss all",
                        ),
                        ("btree", Durability::None, false) => (
                            "none",
                            "process or a power loss may take every acknowledged write since",
                        ),
                        (_, _, true) => ("process-crash", "not a power loss"),
                        (_, Durability::None, false) => (
                            "process-crash",
                            "a power loss may take everything since the last sync or clean close",
                        ),
                        (_, _, false) => ("process-crash", "a power loss may take the last 50 ms"),
                    };
                    assert_eq!(policy.guarantee_class, class, "{ctx}");
                    assert!(policy.guarantee.contains(says), "{ctx}");
                    store.close().unwrap();
                }
            }
        }
    }

    /// `auto` serves what a path holds (a B+-tree directory, a KV or Plush file, told apart
    /// by their headers), refuses a file it cannot tell, and for a new path picks by the file
    /// system; a named store is taken as named.
    #[test]
    fn auto_serves_the_store_a_path_holds_or_suits() {
        use super::{AUTO, resolve_store};
        use tierbase::device::{FsKind, fs_kind};
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        for kind in ["kv", "btree", "plush"] {
            let path = dir.path().join(format!("made.{kind}"));
            let (store, _) =
                super::open_store_with(kind, &path, Durability::Immediate, Some(2 << 20)).unwrap();
            store.close().unwrap();
            assert_eq!(resolve_store(AUTO, &path).unwrap(), kind);
            assert_eq!(resolve_store(kind, &path).unwrap(), kind);
        }
        let junk = dir.path().join("junk");
        std::fs::write(&junk, vec![7u8; 8192]).unwrap();
        let e = resolve_store(AUTO, &junk).unwrap_err().to_string();
        assert!(e.contains("cannot tell") && e.contains("--store"), "{e}");
        std::fs::write(&junk, b"short").unwrap();
        assert!(resolve_store(AUTO, &junk).is_err());
        let e = resolve_store("nope", &junk).unwrap_err().to_string();
        assert_eq!(e, "unknown store 'nope' (stores: kv, btree, plush, auto)");
        let e = super::open_store("nope", &junk, Durability::Immediate)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, "unknown store 'nope' (stores: kv, btree, plush, auto)");
        // Opening with `auto` opens what `resolve_store` chose.
        let (store, _) =
            super::open_store(AUTO, &dir.path().join("made.plush"), Durability::Immediate).unwrap();
        assert_eq!(store.describe().store, "plush");
        store.close().unwrap();
        // A directory: a B+-tree's, or an empty one; never one that holds other things.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(resolve_store(AUTO, &empty).unwrap(), "btree");
        std::fs::write(empty.join("notes.txt"), b"mine").unwrap();
        let e = resolve_store(AUTO, &empty).unwrap_err().to_string();
        assert!(e.contains("without a B+-tree store"), "{e}");
        let fresh = dir.path().join("fresh.tb");
        let expect = match fs_kind(dir.path()) {
            FsKind::Memory => "kv",
            FsKind::Disk => "btree",
        };
        assert_eq!(resolve_store(AUTO, &fresh).unwrap(), expect);
        // A file system of the other kind where there is one.
        let other = tempfile::tempdir().unwrap();
        if fs_kind(other.path()) != fs_kind(dir.path()) {
            let expect = match fs_kind(other.path()) {
                FsKind::Memory => "kv",
                FsKind::Disk => "btree",
            };
            assert_eq!(
                resolve_store(AUTO, &other.path().join("x")).unwrap(),
                expect
            );
        }
    }
}
