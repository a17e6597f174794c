//! Concurrency primitives shared by every store: version latches (optimistic readers,
//! exclusive writers) and their striped form for per-key write serialisation, the sequence
//! clock, polite spinning, and the background-thread runner.
//!
//! Owns: these mechanisms, once for the whole engine. Must not touch: media or any store's
//! format — stores decide what a latch protects and what a sequence number means.

mod background;
mod clock;
mod latch;

pub use background::{Background, Ticker};
pub use clock::SequenceClock;
pub use latch::{
    HybridLatch, HybridWriteGuard, KeyLocks, LatchGuard, LatchRun, VersionLatch, backoff,
    spin_then_park,
};
