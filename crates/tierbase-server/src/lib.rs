//! `tierbase serve`: tierbase's stores behind the Redis protocol (RESP2, and RESP3 through
//! `HELLO 3`), so redis-cli, redis-benchmark and every Redis client library can use them.
//!
//! Owns: the wire protocol ([`resp`]), the command set (`command`), the network loop
//! ([`Server`]), and which stores can be served ([`open_store`]). Must not touch: any store's
//! internals — a store is served through the engine's [`tierbase::store::Store`] interface,
//! so adding one is one arm in [`open_store`].
//!
//! Durability: a write's reply leaves only once the write is durable at the commit level the
//! server was started with (see [`ReplyPolicy`] and docs/SERVER.md).
//!
//! ```no_run
//! use tierbase::device::Durability;
//! use tierbase_server::{Server, ServerConfig, open_store};
//! # fn main() -> Result<(), tierbase_server::ServerError> {
//! let (store, policy) = open_store("kv", "/dev/shm/served.tb".as_ref(), Durability::Immediate)?;
//! let server = Server::bind(store, policy, ServerConfig::default())?;
//! println!("listening on {}", server.ready()?.addr);
//! server.serve()?; // until SHUTDOWN
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod command;
mod command_docs;
mod commit;
mod error;
mod glob;
mod lead;
pub mod resp;
mod server;
mod stores;

pub use error::{Result, ServerError};
pub use glob::glob_match;
pub use server::{Ready, Server, ServerConfig, ShutdownHandle, Summary};
pub use stores::{
    AUTO, ReplyPolicy, STORES, open_store, open_store_read_only, open_store_with, reply_policy,
    resolve_store,
};
