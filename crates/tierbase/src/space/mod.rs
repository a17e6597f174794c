//! Space management shared by every store: which blocks of a region are free for reuse.
//!
//! Owns: the free-extent bookkeeping (single blocks and multi-block runs, coalesced, best fit),
//! and the bump allocator of stores that only add structures ([`RegionBump`]).
//! Must not touch: media — a store decides when a block is free (its records are invalid on
//! media) and what "fresh" blocks beyond its high-water mark are.

mod bump;
mod extents;

pub use bump::RegionBump;
pub use extents::FreeExtents;
