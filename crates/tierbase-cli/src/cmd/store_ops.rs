//! The operator commands every store has — put, get, delete — defined and run once, over the
//! engine's store interface ([`tierbase::store::Store`]). Each store's command (`kv`, `btree`,
//! `plush`) flattens [`PointCommand`] into its own subcommands and keeps only what is its own
//! (create, scan, stats, verify, checkpoint).

use clap::Subcommand;
use tierbase::store::Store;

use crate::util::outln;
use crate::util::{decode, encode};

/// Point operations on one key, shared by every store's command.
#[derive(Subcommand, Debug)]
pub enum PointCommand {
    /// Insert or replace a key.
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Print a key's value (exit code 1 if absent).
    Get {
        /// Key.
        key: String,
    },
    /// Delete a key (exit code 1 if absent).
    Delete {
        /// Key.
        key: String,
    },
}

impl PointCommand {
    /// Whether the command only reads (its store is then opened read-only).
    pub fn reads_only(&self) -> bool {
        matches!(self, PointCommand::Get { .. })
    }

    /// Runs the command on `store`, keys and values in hex when `hex`. Returns `Ok(false)` for
    /// "not found" (exit code 1, no error text).
    pub fn run(self, store: &dyn Store, hex: bool) -> anyhow::Result<bool> {
        Ok(match self {
            PointCommand::Put { key, value } => {
                let (k, v) = (decode(hex, &key, "key")?, decode(hex, &value, "value")?);
                let new = store.put(&k, &v)?;
                outln!("{}", if new { "inserted" } else { "replaced" })?;
                true
            }
            PointCommand::Get { key } => match store.get(&decode(hex, &key, "key")?)? {
                Some(v) => {
                    outln!("{}", encode(hex, &v))?;
                    true
                }
                None => {
                    eprintln!("not found");
                    false
                }
            },
            PointCommand::Delete { key } => {
                let found = store.delete(&decode(hex, &key, "key")?)?;
                outln!("{}", if found { "deleted" } else { "not found" })?;
                found
            }
        })
    }
}
