//! The persist API of a region: flush, fence, persist and non-temporal writes in the
//! durability mode of the medium, group commit of file syncs, emulated latencies, and injected
//! faults of crash-simulated regions.

use super::*;

/// Deferred persists of a region: how many were issued, and how many of the first ones a
/// completed sync covers. A caller whose count is covered needs no sync of its own.
#[derive(Debug, Default)]
pub(super) struct Deferred {
    written: AtomicU64,
    synced: AtomicU64,
}

impl PmemRegion {
    /// Writes back (without fence) every cache line overlapping `[off, off+len)`. In `Msync`
    /// mode this is the `msync` itself (which is synchronous, so it also orders).
    pub fn flush(&self, off: u64, len: usize) -> Result<()> {
        let (lines, media) = self.flush_lines(off, len, true)?;
        self.counters.record_flush(lines, media);
        Ok(())
    }

    /// Makes every range durable with one fence — one file sync in `Msync` mode — so a caller
    /// whose ranges may reach media in any order among themselves pays for one persist.
    pub fn persist_all(&self, ranges: &[(u64, usize)]) -> Result<()> {
        // Counted once for all ranges (one look-up of the thread's counter shard).
        let (mut lines, mut media) = (0, 0);
        for &(off, len) in ranges {
            let (l, m) = self.flush_lines(off, len, false)?;
            lines += l;
            media += m;
        }
        self.counters.record_flush(lines, media);
        if self.mode == DurabilityMode::Msync {
            self.group_sync()?;
        }
        self.drain();
        Ok(())
    }

    /// [`PmemRegion::flush`]; `sync`: whether `Msync` mode syncs here (else the caller syncs
    /// once for several ranges). Returns the lines flushed and the media lines written, for
    /// the caller to count.
    #[inline]
    fn flush_lines(&self, off: u64, len: usize, sync: bool) -> Result<(u64, u64)> {
        let o = self.check(off, len)?;
        if len == 0 {
            return Ok((0, 0));
        }
        self.injected_fault()?;
        let issued = self.emulation_start();
        let lines = match self.mode {
            // SAFETY: bounds checked; the instruction was checked at open.
            DurabilityMode::Dax | DurabilityMode::ProcessCrash => unsafe {
                cpu::flush_range(self.flush, self.base_ptr().add(o), len)
            },
            DurabilityMode::Msync if sync => {
                self.group_sync()?;
                0
            }
            DurabilityMode::Msync | DurabilityMode::None => 0,
        };
        let media = if self.mode != DurabilityMode::None {
            media_lines(self.header_len + o, len)
        } else {
            0
        };
        if let Some(sim) = &self.sim {
            sim.flush(|| self.capture_lines(o, len));
        }
        self.emulation_finish(issued, Direction::Write, len);
        Ok((lines, media))
    }

    /// Crash-simulated regions: the configured I/O error (see
    /// [`CrashSimConfig::fail_flushes_after`]).
    #[inline(always)]
    pub(super) fn injected_fault(&self) -> Result<()> {
        match &self.sim {
            Some(sim) if sim.flush_fails() => Err(self.injected_error()),
            _ => Ok(()),
        }
    }

    /// [`Self::injected_fault`]'s error (out of line: only crash tests reach it).
    #[cold]
    #[inline(never)]
    fn injected_error(&self) -> Error {
        self.counters.errors.incr();
        Error::io(
            "persist",
            self.path.as_deref(),
            std::io::Error::other("injected I/O error (simulated)"),
        )
    }

    /// Emulation: the virtual issue time of an operation about to run natively.
    #[inline]
    pub(super) fn emulation_start(&self) -> u64 {
        if self.emulator.is_some() { now_ns() } else { 0 }
    }

    /// Emulation: schedules the operation as issued at `issued` and waits for its emulated end,
    /// so that its latency is max(native, profile) — the same rule as for block devices.
    #[inline]
    pub(super) fn emulation_finish(&self, issued: u64, dir: Direction, bytes: usize) {
        if let Some(e) = &self.emulator {
            let t = e.schedule_at(dir, bytes as u64, issued);
            e.wait(&t);
        }
    }

    /// Emulation: charges one read of `bytes` (an access made in place, outside this API:
    /// NVM direct's page reads). Nothing without an emulated profile.
    pub(super) fn charge_read(&self, bytes: usize) {
        let issued = self.emulation_start();
        self.emulation_finish(issued, Direction::Read, bytes);
    }

    /// Store fence: every earlier flush is durable once this returns.
    pub fn drain(&self) {
        if matches!(
            self.mode,
            DurabilityMode::Dax | DurabilityMode::ProcessCrash
        ) {
            cpu::sfence();
            self.counters.fences.incr();
        }
        if let Some(sim) = &self.sim
            && sim.fence()
            && sim.wants_unflushed()
        {
            sim.merge_unflushed(&self.copy_working());
        }
    }

    /// Makes `[off, off+len)` durable: flush, then fence.
    #[inline]
    pub fn persist(&self, off: u64, len: usize) -> Result<()> {
        self.flush(off, len)?;
        self.drain();
        Ok(())
    }

    /// Copies `data` to `off` with non-temporal stores (bypassing the cache; best for large
    /// sequential writes) and makes it durable (fence, or `msync` in `Msync` mode).
    pub fn write_nt_persist(&self, off: u64, data: &[u8]) -> Result<()> {
        let o = self.check(off, data.len())?;
        if data.is_empty() {
            // Nothing to write or flush; still a persist point, like `persist(off, 0)`.
            self.drain();
            return Ok(());
        }
        self.injected_fault()?;
        match self.mode {
            DurabilityMode::Dax | DurabilityMode::ProcessCrash => {
                let issued = self.emulation_start();
                // SAFETY: bounds checked; `data` is a distinct allocation; instruction checked.
                let lines = unsafe { cpu::nt_copy(self.base_ptr().add(o), data, self.flush) };
                self.counters.flushes.add(lines);
                self.counters.writes.incr();
                self.counters.bytes_written.add(data.len() as u64);
                self.counters
                    .media_lines_written
                    .add(media_lines(self.header_len + o, data.len()));
                if let Some(sim) = &self.sim {
                    sim.flush(|| self.capture_lines(o, data.len()));
                }
                self.emulation_finish(issued, Direction::Write, data.len());
                self.drain();
                Ok(())
            }
            DurabilityMode::Msync | DurabilityMode::None => {
                self.write(off, data)?;
                self.persist(off, data.len())
            }
        }
    }

    /// Whether this region defers the persists marked deferrable (see
    /// [`RegionOptions::commit`]).
    pub fn defers_persists(&self) -> bool {
        self.deferred.is_some()
    }

    /// The persist that acknowledges a write which nothing else is ordered after: done now
    /// ([`PmemRegion::persist_all`]) unless this region defers persists, in which case the ranges
    /// become durable at the next [`PmemRegion::sync_deferred`]. A write that must reach media
    /// before another one (a record before the invalidation of the record it replaces) calls
    /// `sync_deferred` in between.
    #[inline]
    pub fn persist_deferred(&self, ranges: &[(u64, usize)]) -> Result<()> {
        let Some(d) = &self.deferred else {
            return self.persist_all(ranges);
        };
        for &(off, len) in ranges {
            self.check(off, len)?;
        }
        d.written.fetch_add(1, Ordering::AcqRel);
        self.counters.deferred_persists.incr();
        Ok(())
    }

    /// Makes every deferred persist issued before this call durable: one group-committed file
    /// sync (on a crash-simulated region, every written line). Free when nothing is pending,
    /// and when the region defers nothing.
    pub fn sync_deferred(&self) -> Result<()> {
        let Some(d) = &self.deferred else {
            return Ok(());
        };
        let target = d.written.load(Ordering::Acquire);
        if d.synced.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        if self.mode == DurabilityMode::Msync {
            self.group_sync()?;
        } else {
            // The simulated page cache: everything written so far becomes durable.
            let (lines, media) = self.flush_lines(0, self.len() as usize, false)?;
            self.counters.record_flush(lines, media);
            self.drain();
        }
        d.synced.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    /// `Msync` mode's persist: one `fdatasync` of the file, shared by every writer waiting at
    /// the same time (group commit). The kernel writes back exactly the pages dirtied through
    /// the mapping, as `msync` of each range would, but concurrent persists cost one sync.
    pub(super) fn group_sync(&self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        match self.group.sync(|| file.sync_data()) {
            Ok(ran) => {
                self.counters.syncs.add(ran);
                Ok(())
            }
            Err(e) => {
                self.counters.errors.incr();
                Err(Error::io(
                    "fdatasync",
                    self.path.as_deref(),
                    std::io::Error::other(e),
                ))
            }
        }
    }

    pub(super) fn msync_abs(&self, abs_off: usize, len: usize) -> Result<()> {
        let start = abs_off & !(PAGE - 1);
        let end = round_up(abs_off + len, PAGE);
        // SAFETY: [start, end) lies inside the mapped part of our reservation (abs_off + len is
        // within header + data, rounded to whole mapped pages).
        let rc = unsafe {
            libc::msync(
                self.reservation.as_ptr().add(start).cast(),
                end - start,
                libc::MS_SYNC,
            )
        };
        self.counters.syncs.incr();
        if rc != 0 {
            return Err(os_err("msync", self.path.as_deref()));
        }
        Ok(())
    }
}

/// Number of distinct 256-byte media lines overlapping `[abs_off, abs_off + len)`.
pub(super) fn media_lines(abs_off: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    ((abs_off + len - 1) / MEDIA_LINE - abs_off / MEDIA_LINE + 1) as u64
}
