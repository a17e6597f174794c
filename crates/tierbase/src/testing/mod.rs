//! Test harnesses shared by every store's tests: the linearizability checker over recorded
//! concurrent histories, the crash harness (scripted power loss at every persist point,
//! injected I/O errors) and the `kill -9` harness (a child process killed mid-write). Public
//! so that integration tests and future stores use one copy; not part of the storage API.
//!
//! Owns: checking recorded behaviour against a sequential model. Must not touch: any store's
//! internals — harnesses drive stores through their public APIs.

pub mod crash;
pub mod kill;
pub mod linearizability;
