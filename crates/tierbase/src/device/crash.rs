//! Power-loss simulator for persistent regions.
//!
//! Owns: a shadow "persisted" image that receives a cache line only when it has been flushed
//! and a fence has followed, and the freezing of that image at a chosen persist point. Must not
//! touch: real files or CPU flush instructions (the region calls in here in addition).
//!
//! Model (x86 persistence with ADR): a store sits in the volatile cache until its line is
//! flushed (`clwb`/`clflushopt`/`clflush`) or written with a non-temporal store; it is durable
//! once a following `sfence` completes. At a power loss, everything not yet durable is lost —
//! except that the cache may have evicted some dirty lines on its own, so any 8-byte word that
//! differs from the durable image may also have reached media. The simulator models that with a
//! seeded per-word survival probability; 8 bytes is the hardware's failure-atomic unit, so words
//! are never torn.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::block_sim::SimPower;
use super::cpu::CACHE_LINE;

/// How the simulated power loss behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct CrashSimConfig {
    /// Lose power at this fence (`Some(0)`: before the first). With `unflushed_survival` 0,
    /// power is lost right after the fence took effect; above 0, power is lost *while it
    /// drains*: the lines flushed since the previous fence reach media only word by word, with
    /// that probability, like unflushed stores — the case a write persisted with a single fence
    /// (record and validity marker together) must survive. `None`: never on its own; call
    /// [`crate::device::PmemRegion::power_loss`].
    pub crash_after_fences: Option<u64>,
    /// Probability that an 8-byte word which is written but not yet durable reaches media
    /// anyway (cache eviction). 0 = only flushed-and-fenced data survives.
    pub unflushed_survival: f64,
    /// Seed for the survival choice, so that every failure replays exactly.
    pub seed: u64,
    /// Fault injection: once this many fences have taken effect, every flush (and so every
    /// persist) fails with an I/O error, as a dying device would. `None`: never.
    pub fail_flushes_after: Option<u64>,
}

impl Default for CrashSimConfig {
    fn default() -> Self {
        CrashSimConfig {
            crash_after_fences: None,
            unflushed_survival: 0.0,
            seed: 0,
            fail_flushes_after: None,
        }
    }
}

#[derive(Debug)]
struct SimState {
    durable: Vec<u8>,
    pending: Vec<(usize, [u8; CACHE_LINE])>,
    fences: u64,
    frozen: Option<Vec<u8>>,
}

/// Shadow-image bookkeeping for one simulated region.
///
/// The region copies line contents out of its (shared, concurrently written) memory with raw
/// reads and hands the copies in here, so the simulator never holds references into it.
#[derive(Debug)]
pub(crate) struct CrashSim {
    config: CrashSimConfig,
    state: Mutex<SimState>,
    /// The block devices' power source, when the region shares one with them (a store with
    /// a page file and a persistent-memory tier): its loss freezes this image at the next
    /// fence, and this image's configured loss cuts it, so both lose power at one instant.
    power: OnceLock<Arc<SimPower>>,
}

impl CrashSim {
    /// A simulator whose durable image starts as `initial` (all of it durable).
    pub(crate) fn new(config: CrashSimConfig, initial: Vec<u8>) -> Self {
        let frozen = (config.crash_after_fences == Some(0)).then(|| initial.clone());
        CrashSim {
            config,
            state: Mutex::new(SimState {
                durable: initial,
                pending: Vec::new(),
                fences: 0,
                frozen,
            }),
            power: OnceLock::new(),
        }
    }

    /// Shares `power` with block devices (see [`CrashSim::power`]). Once only.
    pub(crate) fn link_power(&self, power: Arc<SimPower>) -> bool {
        self.power.set(power).is_ok()
    }

    /// The region grew: new bytes are zero both in the cache and on media.
    pub(crate) fn grow(&self, new_len: usize) {
        let mut st = self.state.lock();
        if st.durable.len() < new_len {
            st.durable.resize(new_len, 0);
        }
    }

    /// A flush (or non-temporal store): the lines `capture` returns, with the contents they
    /// have now, are in flight to media. The capture runs under the simulator's lock, so two
    /// threads flushing one line queue their copies in the order of their contents, as the
    /// hardware's write-backs of one line reach media in order. Each entry is (line start
    /// offset, line bytes).
    pub(crate) fn flush(&self, capture: impl FnOnce() -> Vec<(usize, [u8; CACHE_LINE])>) {
        let mut st = self.state.lock();
        if st.frozen.is_none() {
            let lines = capture();
            st.pending.extend(lines);
        }
    }

    /// Whether flushes fail now (see [`CrashSimConfig::fail_flushes_after`]).
    pub(crate) fn flush_fails(&self) -> bool {
        self.config
            .fail_flushes_after
            .is_some_and(|n| self.state.lock().fences >= n)
    }

    /// A fence: every flushed line becomes durable. Returns `true` when this fence is the
    /// configured power-loss point; the caller must then call [`CrashSim::merge_unflushed`] with
    /// a copy of the working image if [`CrashSim::wants_unflushed`] says so.
    pub(crate) fn fence(&self) -> bool {
        let mut st = self.state.lock();
        if st.frozen.is_some() {
            return false;
        }
        if self.power.get().is_some_and(|p| p.crashed()) {
            // The shared power source failed before this fence: nothing since the last one
            // reached media.
            st.pending.clear();
            st.frozen = Some(st.durable.clone());
            return false;
        }
        let crashes = self.fence_locked(&mut st);
        // Cut the shared power under this simulator's lock: no fence of this region can
        // take effect between its loss and the block devices' (a sync that completes in
        // between depends only on fences before the loss).
        if crashes && let Some(p) = self.power.get() {
            p.cut();
        }
        drop(st);
        crashes
    }

    fn fence_locked(&self, st: &mut SimState) -> bool {
        let pending = std::mem::take(&mut st.pending);
        if self.config.unflushed_survival > 0.0
            && self.config.crash_after_fences == Some(st.fences + 1)
        {
            // Power fails while this fence drains: its lines are left to the caller's merge of
            // the working image (word by word), not made durable.
            st.fences += 1;
            st.frozen = Some(st.durable.clone());
            return true;
        }
        for (start, line) in pending {
            let end = (start + CACHE_LINE).min(st.durable.len());
            let n = end.saturating_sub(start);
            if let (Some(dst), Some(src)) = (st.durable.get_mut(start..end), line.get(..n)) {
                dst.copy_from_slice(src);
            }
        }
        st.fences += 1;
        if self.config.crash_after_fences == Some(st.fences) {
            st.frozen = Some(st.durable.clone());
            return true;
        }
        false
    }

    /// Loses power now if it has not been lost yet. Returns `true` if this call did it.
    pub(crate) fn lose_power(&self) -> bool {
        let mut st = self.state.lock();
        if st.frozen.is_some() {
            return false;
        }
        st.frozen = Some(st.durable.clone());
        true
    }

    /// Whether a power loss must also consider unflushed data (survival probability > 0).
    pub(crate) fn wants_unflushed(&self) -> bool {
        self.config.unflushed_survival > 0.0
    }

    /// Lets each 8-byte word of `working` that differs from the frozen image survive with the
    /// configured probability (cache evictions before the power loss). Words are never torn.
    pub(crate) fn merge_unflushed(&self, working: &[u8]) {
        let p = self.config.unflushed_survival.clamp(0.0, 1.0);
        let mut st = self.state.lock();
        let mut rng = StdRng::seed_from_u64(self.config.seed ^ st.fences.rotate_left(17));
        let Some(img) = st.frozen.as_mut() else {
            return;
        };
        for (dst, src) in img.chunks_mut(8).zip(working.chunks(8)) {
            if dst != src && rng.random_bool(p) {
                let n = dst.len().min(src.len());
                if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
                    d.copy_from_slice(s);
                }
            }
        }
    }

    /// The image on media after the power loss, if power has been lost.
    pub(crate) fn image(&self) -> Option<Vec<u8>> {
        self.state.lock().frozen.clone()
    }

    /// Whether power has been lost.
    pub(crate) fn crashed(&self) -> bool {
        self.state.lock().frozen.is_some()
    }

    /// Fences that have taken effect so far (the number of persist points passed).
    pub(crate) fn fences(&self) -> u64 {
        self.state.lock().fences
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(work: &[u8], start: usize) -> (usize, [u8; CACHE_LINE]) {
        let mut l = [0u8; CACHE_LINE];
        l.copy_from_slice(&work[start..start + CACHE_LINE]);
        (start, l)
    }

    fn crash(sim: &CrashSim, work: &[u8]) -> Vec<u8> {
        sim.lose_power();
        if sim.wants_unflushed() {
            sim.merge_unflushed(work);
        }
        sim.image().unwrap()
    }

    #[test]
    fn only_flushed_and_fenced_lines_survive() {
        let sim = CrashSim::new(CrashSimConfig::default(), vec![0; 256]);
        let mut work = vec![0u8; 256];
        work[0] = 1; // flushed and fenced
        work[64] = 2; // flushed, no fence
        work[128] = 3; // never flushed
        sim.flush(|| vec![line(&work, 0)]);
        sim.fence();
        sim.flush(|| vec![line(&work, 64)]);
        let img = crash(&sim, &work);
        assert_eq!((img[0], img[64], img[128]), (1, 0, 0));
        assert!(sim.crashed());
    }

    #[test]
    fn flush_captures_contents_at_flush_time() {
        let sim = CrashSim::new(CrashSimConfig::default(), vec![0; 64]);
        let mut work = vec![0u8; 64];
        work[3] = 7;
        sim.flush(|| vec![line(&work, 0)]);
        work[3] = 9; // store after the flush, before the fence: not covered
        sim.fence();
        assert_eq!(crash(&sim, &work)[3], 7);
    }

    #[test]
    fn crash_after_fences_freezes_the_image() {
        let cfg = CrashSimConfig {
            crash_after_fences: Some(1),
            ..CrashSimConfig::default()
        };
        let sim = CrashSim::new(cfg, vec![0; 128]);
        let mut work = vec![0u8; 128];
        work[0] = 1;
        sim.flush(|| vec![line(&work, 0)]);
        assert!(sim.fence());
        work[64] = 2;
        sim.flush(|| vec![line(&work, 64)]);
        assert!(!sim.fence()); // after the power loss: no effect
        let img = crash(&sim, &work);
        assert_eq!((img[0], img[64]), (1, 0));
        assert_eq!(sim.fences(), 1);
    }

    #[test]
    fn crash_at_zero_keeps_the_initial_image() {
        let cfg = CrashSimConfig {
            crash_after_fences: Some(0),
            ..CrashSimConfig::default()
        };
        let sim = CrashSim::new(cfg, vec![5; 64]);
        assert!(sim.crashed());
        let work = vec![6u8; 64];
        sim.flush(|| vec![line(&work, 0)]);
        sim.fence();
        assert_eq!(sim.image().unwrap(), vec![5; 64]);
    }

    #[test]
    fn survival_is_word_atomic_and_seeded() {
        let cfg = CrashSimConfig {
            unflushed_survival: 0.5,
            seed: 42,
            ..CrashSimConfig::default()
        };
        let work: Vec<u8> = (0..4096).map(|i| (i % 251 + 1) as u8).collect();
        let a = crash(&CrashSim::new(cfg.clone(), vec![0; 4096]), &work);
        let b = crash(&CrashSim::new(cfg, vec![0; 4096]), &work);
        assert_eq!(a, b, "same seed, same image");
        let mut survived = 0;
        for (w, img) in work.chunks(8).zip(a.chunks(8)) {
            assert!(img == w || img.iter().all(|&x| x == 0), "torn word");
            if img == w {
                survived += 1;
            }
        }
        assert!(
            survived > 100 && survived < 412,
            "about half of 512 words: {survived}"
        );
    }
}
