//! Space management shared by every store: which blocks of a region are free for reuse.
//!
//! Owns: the free-extent bookkeeping (single blocks and multi-block runs, coalesced, best fit).
//! Must not touch: media — a store decides when a block is free (its records are invalid on
//! media) and what "fresh" blocks beyond its high-water mark are.

mod extents;

pub use extents::FreeExtents;
