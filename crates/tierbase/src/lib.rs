//! tierbase: a storage engine for the modern storage hierarchy.
//!
//! Layers (see `docs/ARCHITECTURE.md`):
//! - [`device`]: persistent regions, block devices, durability modes, device profiles,
//!   emulation and counters — the only code that touches hardware;
//! - stores built on it ([`kv`], [`btree`], [`hash`]), each implementing the engine's [`store::Store`] interface;
//! - front ends (the `tierbase` CLI, benchmarks) live in their own crates.
//!
//! ```
//! use tierbase::device::{PmemRegion, RegionOptions};
//! # fn main() -> tierbase::Result<()> {
//! let dir = std::env::temp_dir().join(format!("tierbase-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("example.region");
//! # let _ = std::fs::remove_file(&path);
//! let region = PmemRegion::create(&path, 1 << 20, &RegionOptions::default())?;
//! region.write(0, b"hello")?;
//! region.persist(0, 5)?; // durable in the medium's mode (DAX, msync, or process-crash on tmpfs)
//! println!("durability: {}", region.durability().guarantee());
//! # drop(region); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod btree;
pub mod buffer;
pub mod device;
mod error;
pub mod hash;
pub mod kv;
pub mod space;
pub mod store;
pub mod sync;
pub mod testing;
pub mod wal;

pub use error::{Error, Result, one_line_toml_error};
