//! The stores the server can serve, by name, and the reply policy each gets.
//!
//! Owns: opening a store for serving ([`open_store`]) and deciding when a write's reply may
//! go out ([`ReplyPolicy`]). Must not touch: the protocol or commands. Adding a store is one
//! arm here: open it, and say whether the server syncs before replying.

use std::path::Path;

use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::device::Durability;
use tierbase::hash::{PlushOptions, PlushStore};
use tierbase::kv::{KvOptions, KvStore};
use tierbase::store::Store;

use crate::error::{Result, ServerError};

/// Store names `--store` accepts.
pub const STORES: &[&str] = &["kv", "btree", "plush"];

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

/// Opens (or creates) the store `kind` at `path` for serving at commit level `level`.
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
    match kind {
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
            if let Some(b) = dram_budget {
                opts = opts.dram_bits(tierbase::hash::dram_bits_for_budget(b));
            }
            let store = PlushStore::open_or_create(path, &opts)?;
            let policy = reply_policy(&store, level);
            Ok((Box::new(store), policy))
        }
        other => Err(ServerError::Config(format!(
            "unknown store '{other}' (stores: {})",
            STORES.join(", ")
        ))),
    }
}

/// The reply policy for `store` opened for serving at `level`.
pub fn reply_policy(store: &dyn Store, level: Durability) -> ReplyPolicy {
    let medium = store.describe().guarantee;
    let defers = store.defers_sync();
    let (guarantee, class) = match (medium.as_str(), level) {
        ("nothing", _) => ("nothing survives the process".to_string(), "none"),
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
             since the last clean close"
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
        for budget in [1u64 << 20, 8 << 20] {
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
}
