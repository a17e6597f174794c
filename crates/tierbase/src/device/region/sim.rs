//! Hooks of crash-simulated regions: capturing flushed lines for the simulator, power loss,
//! and snapshots of the working image.

use super::*;

impl PmemRegion {
    pub(super) fn capture_lines(&self, o: usize, len: usize) -> Vec<(usize, [u8; CACHE_LINE])> {
        let size = self.len.load(Ordering::Acquire);
        let first = o / CACHE_LINE;
        let last = (o + len.max(1) - 1) / CACHE_LINE;
        (first..=last)
            .map(|line| {
                let start = line * CACHE_LINE;
                let n = CACHE_LINE.min(size.saturating_sub(start));
                let mut buf = [0u8; CACHE_LINE];
                // SAFETY: [start, start+n) is inside the mapped data area (n <= CACHE_LINE).
                unsafe { shared_mem::load(self.base_ptr().add(start), &mut buf[..n]) };
                (start, buf)
            })
            .collect()
    }

    pub(super) fn copy_working(&self) -> Vec<u8> {
        let n = self.len.load(Ordering::Acquire);
        let mut v = vec![0u8; n];
        // SAFETY: the data area is mapped for n bytes.
        unsafe { shared_mem::load(self.base_ptr(), &mut v) };
        v
    }

    /// Crash-simulated regions: loses power now (if the configured persist point has not done
    /// so already) and returns the image media holds. `None` for real regions.
    pub fn power_loss(&self) -> Option<Vec<u8>> {
        let sim = self.sim.as_ref()?;
        if sim.lose_power() && sim.wants_unflushed() {
            sim.merge_unflushed(&self.copy_working());
        }
        sim.image()
    }

    /// Crash-simulated regions: shares the power source of simulated block devices, so one
    /// power loss hits both at the same instant (a loss on `power` freezes this region at its
    /// next fence; this region's configured loss cuts `power`). Refused on real regions and
    /// when a source is linked already.
    pub fn share_power(&self, power: &std::sync::Arc<crate::device::SimPower>) -> Result<()> {
        match &self.sim {
            Some(sim) if sim.link_power(power.clone()) => Ok(()),
            Some(_) => Err(Error::InvalidArgument(
                "the region shares a power source already".into(),
            )),
            None => Err(Error::InvalidArgument(
                "only a crash-simulated region can share a simulated power source".into(),
            )),
        }
    }

    /// Crash-simulated regions: whether the configured power loss has happened.
    pub fn crashed(&self) -> bool {
        self.sim.as_ref().is_some_and(CrashSim::crashed)
    }

    /// Crash-simulated regions: fences that took effect so far (persist points passed).
    pub fn persist_points(&self) -> u64 {
        self.sim.as_ref().map_or(0, CrashSim::fences)
    }

    /// Copies the whole data area out (for tests, inspection and `verify`).
    pub fn snapshot(&self) -> Vec<u8> {
        self.copy_working()
    }
}
