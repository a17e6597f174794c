//! Test harnesses shared by every store's tests: the linearizability checker over recorded
//! concurrent histories, the crash harness (scripted power loss at every persist point,
//! injected I/O errors), the `kill -9` harness (a child process killed mid-write) and the
//! full-device harness (a child process whose files cannot grow). Public
//! so that integration tests and future stores use one copy; not part of the storage API.
//!
//! Owns: checking recorded behaviour against a sequential model, and the machinery every
//! store's tests share to produce it — the crash and kill loops, the linearizability rounds,
//! and the tests' random generator ([`TestRng`]); a second store's tests use these rather
//! than a copy. Must not touch: any store's internals — harnesses drive stores through their
//! public APIs.

pub mod crash;
pub mod full;
pub mod kill;
pub mod linearizability;

use crash::splitmix;

/// splitmix64, seeded: the small deterministic generator of every store's tests (the kill
/// loops' choices replay from `TIERBASE_KILL_SEED`, a linearizability round's from its seed).
#[derive(Clone, Debug)]
pub struct TestRng(pub u64);

impl TestRng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// The generator of writer thread `thread` of a child seeded with `seed` (each thread its
    /// own stream).
    pub fn for_writer(seed: u64, thread: u64) -> TestRng {
        TestRng(seed ^ (thread + 1).wrapping_mul(0xa076_1d64_78bd_642f))
    }

    /// `len` random bytes, from a generator seeded by the next number of this one.
    pub fn bytes(&mut self, len: u64) -> Vec<u8> {
        let mut fill = TestRng(self.next_u64());
        (0..len).map(|_| fill.next_u64() as u8).collect()
    }
}
