//! Space management shared by every store: which blocks of a region are free for reuse.
//!
//! Owns: the free-extent bookkeeping (single blocks and multi-block runs, coalesced, best fit),
//! and the bump allocator of stores that only add structures ([`RegionBump`]).
//! Must not touch: what the space holds — a store decides when a block is free (its records
//! are invalid on media); the bump allocator only persists its own high-water mark.

mod bump;
mod extents;

pub use bump::RegionBump;
pub use extents::FreeExtents;
