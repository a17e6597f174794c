//! Power-loss and fault simulator for block devices.
//!
//! Owns: the in-memory media behind [`crate::device::BlockDevice::simulated`] — per device a
//! working image (what the program reads back) and a durable image (what media holds) — the
//! list of writes issued since each device's last `sync`, the shared power source
//! ([`SimPower`]) that counts syncs over every device on it and loses power for all of them at
//! one instant, the seeded per-sector tearing of unsynced writes at that instant, and injected
//! I/O errors of a dying device. Must not touch: real files, the I/O engines, or what the
//! blocks mean (pages, logs and their formats belong to stores).
//!
//! Model (a disk with a volatile write cache, as LazyFS models one): a write is durable once a
//! later `sync` of its device completed. At a power loss, every write issued since its device's
//! last completed sync reaches media only sector by sector (512 bytes, the smallest unit a
//! disk writes atomically), each sector independently with probability
//! [`BlockCrashConfig::torn_survival`] from a seeded generator; writes are considered in the
//! order they were issued, so an older version of a sector written twice may be the one that
//! survives. Power is lost *at* the configured sync call, which does not take effect.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::block::Io;
use crate::error::{Error, Result};

/// The unit a power loss tears writes at: a disk writes 512-byte sectors atomically.
pub const SECTOR: u64 = 512;

/// How a simulated power source ([`SimPower`]) behaves. The default never fails.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockCrashConfig {
    /// `Some(n)`: power is lost once `n` syncs (counted over every device on the power source)
    /// have completed — at the next sync call, which does not take effect (`Some(0)`: at the
    /// first sync call). Writes issued since their device's last completed sync then survive
    /// per sector with probability [`BlockCrashConfig::torn_survival`]. After the loss the
    /// process runs on: reads return what the program wrote, writes and syncs return `Ok` but
    /// never reach media. `None`: never on its own; call [`SimPower::cut`].
    pub crash_after_syncs: Option<u64>,
    /// Probability that one 512-byte sector of an unsynced write reaches media anyway at the
    /// power loss (0 = only synced data survives, 1 = every issued write survives).
    pub torn_survival: f64,
    /// Seed of the survival choices, so that every failure replays exactly.
    pub seed: u64,
    /// Fault injection: once this many syncs have completed (over every device on the power
    /// source), every later write and sync fails with an I/O error (`EIO`), as a dying device
    /// would. Reads still succeed. `None`: never.
    pub fail_syncs_after: Option<u64>,
}

/// One simulated device's media.
#[derive(Debug)]
struct Disk {
    path: PathBuf,
    /// What the program reads back: every write that returned `Ok` before the power loss, and
    /// after it too (the process runs on).
    working: Vec<u8>,
    /// What media holds: the synced writes, and after the power loss the frozen image with the
    /// surviving sectors of the torn writes.
    durable: Vec<u8>,
    /// Writes issued since the last completed sync: (offset, bytes as written).
    pending: Vec<(u64, Vec<u8>)>,
}

#[derive(Debug, Default)]
struct PowerState {
    syncs: u64,
    crashed: bool,
    /// Power was lost at the configured sync point (not by [`SimPower::cut`]).
    at_sync: bool,
    /// One slot per device created on this power source; `None` once the device is dropped.
    disks: Vec<Option<Disk>>,
    /// [`SimPower::limit_space`]: bytes the devices' lengths may add up to.
    space: Option<u64>,
}

/// A power source shared by simulated block devices (see the module docs): one power loss
/// hits a store's page file and its logs at the same instant.
///
/// Every device created with [`crate::device::BlockDevice::simulated`] on it counts its
/// completed syncs here; all of them go through one lock, so the order of writes, syncs and
/// the power loss is one total order even with several threads.
#[derive(Debug)]
pub struct SimPower {
    config: BlockCrashConfig,
    state: Mutex<PowerState>,
}

impl SimPower {
    /// A power source that behaves as `config` says.
    pub fn new(config: BlockCrashConfig) -> Arc<SimPower> {
        Arc::new(SimPower {
            config,
            state: Mutex::new(PowerState::default()),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &BlockCrashConfig {
        &self.config
    }

    /// Whether power has been lost.
    pub fn crashed(&self) -> bool {
        self.state.lock().crashed
    }

    /// Whether power was lost at the configured sync point
    /// ([`BlockCrashConfig::crash_after_syncs`]) rather than by [`SimPower::cut`] (or not at
    /// all).
    pub fn crashed_at_sync(&self) -> bool {
        self.state.lock().at_sync
    }

    /// Makes the devices on this power source share a file system of `bytes` (`None`: no
    /// limit): a growth that would take their lengths together beyond it fails with
    /// [`Error::DeviceFull`], as `fallocate` fails with `ENOSPC`, and changes nothing. Raising
    /// the limit later is freeing space on that file system.
    pub fn limit_space(&self, bytes: Option<u64>) {
        self.state.lock().space = bytes;
    }

    /// Syncs that have completed (taken effect) on all devices of this power source.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Loses power now, if it has not been lost yet: every device's unsynced writes survive
    /// per sector with the configured probability, and media is frozen. Returns `true` if this
    /// call cut the power.
    pub fn cut(&self) -> bool {
        let mut st = self.state.lock();
        if st.crashed {
            return false;
        }
        self.lose_power(&mut st);
        true
    }

    /// Tears and freezes every device's media. The caller holds the lock.
    fn lose_power(&self, st: &mut PowerState) {
        st.crashed = true;
        let p = self.config.torn_survival.clamp(0.0, 1.0);
        let syncs = st.syncs;
        for disk in st.disks.iter_mut().flatten() {
            let pending = std::mem::take(&mut disk.pending);
            if p <= 0.0 {
                continue;
            }
            let mut rng = StdRng::seed_from_u64(
                self.config.seed
                    ^ xxhash_rust::xxh3::xxh3_64(disk.path.as_os_str().as_encoded_bytes())
                    ^ syncs.rotate_left(23),
            );
            for (offset, bytes) in pending {
                apply_torn(&mut disk.durable, offset, &bytes, p, &mut rng);
            }
        }
    }

    fn injected(&self, st: &PowerState) -> bool {
        self.config.fail_syncs_after.is_some_and(|n| st.syncs >= n)
    }
}

/// Copies each sector-aligned piece of `bytes` (written at `offset`) into `image` with
/// probability `p`.
fn apply_torn(image: &mut [u8], offset: u64, bytes: &[u8], p: f64, rng: &mut StdRng) {
    let mut at = 0usize;
    while at < bytes.len() {
        let pos = offset + at as u64;
        let sector_end = (pos / SECTOR + 1) * SECTOR;
        let n = ((sector_end - pos) as usize).min(bytes.len() - at);
        if rng.random_bool(p) {
            let start = pos as usize;
            if let (Some(dst), Some(src)) = (image.get_mut(start..start + n), bytes.get(at..at + n))
            {
                dst.copy_from_slice(src);
            }
        }
        at += n;
    }
}

/// An injected `EIO` for `op` on the device at `path`.
fn eio(op: &'static str, path: &Path) -> Error {
    Error::io(op, Some(path), std::io::Error::from_raw_os_error(libc::EIO))
}

/// One simulated device's handle on its power source; dropping it discards its media.
#[derive(Debug)]
pub(crate) struct SimDisk {
    power: Arc<SimPower>,
    slot: usize,
    path: PathBuf,
}

impl SimDisk {
    /// A device named `path` whose working and durable images both start as `image`.
    pub(crate) fn new(power: &Arc<SimPower>, path: &Path, image: Vec<u8>) -> SimDisk {
        let mut st = power.state.lock();
        let slot = st.disks.len();
        st.disks.push(Some(Disk {
            path: path.to_path_buf(),
            durable: image.clone(),
            working: image,
            pending: Vec::new(),
        }));
        SimDisk {
            power: Arc::clone(power),
            slot,
            path: path.to_path_buf(),
        }
    }

    fn missing(&self) -> Error {
        Error::InvalidArgument(format!(
            "simulated device {} is not registered with its power source",
            self.path.display()
        ))
    }

    /// Runs a validated batch in order (memcpy); stops at the first error. The whole batch is
    /// one instant with respect to syncs and the power loss.
    pub(crate) fn submit(&self, ios: &mut [Io<'_>]) -> Result<()> {
        let mut st = self.power.state.lock();
        let injected = self.power.injected(&st);
        let crashed = st.crashed;
        let Some(Some(disk)) = st.disks.get_mut(self.slot) else {
            return Err(self.missing());
        };
        for io in ios.iter_mut() {
            match io {
                Io::Read { offset, buf } => {
                    let start = *offset as usize;
                    let src = disk
                        .working
                        .get(start..start + buf.len())
                        .ok_or_else(|| out_of_range(*offset, buf.len(), disk.working.len()))?;
                    buf.copy_from_slice(src);
                }
                Io::Write { offset, buf } => {
                    if injected {
                        return Err(eio("block write (injected fault)", &self.path));
                    }
                    let start = *offset as usize;
                    let size = disk.working.len();
                    let dst = disk
                        .working
                        .get_mut(start..start + buf.len())
                        .ok_or_else(|| out_of_range(*offset, buf.len(), size))?;
                    dst.copy_from_slice(buf);
                    if !crashed {
                        disk.pending.push((*offset, buf.to_vec()));
                    }
                }
            }
        }
        Ok(())
    }

    /// `fdatasync`: the device's pending writes become durable, unless this is where power is
    /// lost (or was lost before) or the device is failing.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut st = self.power.state.lock();
        if self.power.injected(&st) {
            return Err(eio("fdatasync (injected fault)", &self.path));
        }
        if st.crashed {
            return Ok(());
        }
        if self.power.config.crash_after_syncs == Some(st.syncs) {
            st.at_sync = true;
            self.power.lose_power(&mut st);
            return Ok(());
        }
        let Some(Some(disk)) = st.disks.get_mut(self.slot) else {
            return Err(self.missing());
        };
        for (offset, bytes) in std::mem::take(&mut disk.pending) {
            let start = offset as usize;
            if let Some(dst) = disk.durable.get_mut(start..start + bytes.len()) {
                dst.copy_from_slice(&bytes);
            }
        }
        st.syncs += 1;
        Ok(())
    }

    /// Grows both images to `new_len` bytes of zeros (durable at once, unless power was lost:
    /// then media stays as it was). The caller checked that this is growth.
    pub(crate) fn grow(&self, new_len: u64) -> Result<()> {
        let mut st = self.power.state.lock();
        if self.power.injected(&st) {
            return Err(eio("fallocate (injected fault)", &self.path));
        }
        let crashed = st.crashed;
        let n = usize::try_from(new_len)
            .map_err(|_| Error::InvalidArgument(format!("size {new_len} too large")))?;
        if let Some(space) = st.space {
            let (mut own, mut others) = (0, 0);
            for (slot, d) in st.disks.iter().enumerate() {
                let len = d.as_ref().map_or(0, |d| d.working.len() as u64);
                if slot == self.slot {
                    own = len
                } else {
                    others += len
                }
            }
            if new_len > own && others + new_len > space {
                return Err(Error::DeviceFull {
                    path: Some(self.path.clone()),
                    requested: new_len - own,
                });
            }
        }
        let Some(Some(disk)) = st.disks.get_mut(self.slot) else {
            return Err(self.missing());
        };
        if disk.working.len() < n {
            disk.working.resize(n, 0);
        }
        if !crashed && disk.durable.len() < n {
            disk.durable.resize(n, 0);
        }
        Ok(())
    }

    /// What media holds (see [`crate::device::BlockDevice::durable_image`]).
    pub(crate) fn durable_image(&self) -> Option<Vec<u8>> {
        let st = self.power.state.lock();
        st.disks
            .get(self.slot)
            .and_then(Option::as_ref)
            .map(|d| d.durable.clone())
    }

    /// What the program reads back (see [`crate::device::BlockDevice::working_image`]).
    pub(crate) fn working_image(&self) -> Option<Vec<u8>> {
        let st = self.power.state.lock();
        st.disks
            .get(self.slot)
            .and_then(Option::as_ref)
            .map(|d| d.working.clone())
    }
}

impl Drop for SimDisk {
    fn drop(&mut self) {
        if let Some(slot) = self.power.state.lock().disks.get_mut(self.slot) {
            *slot = None;
        }
    }
}

/// Plain in-memory media (a RAM disk): what [`crate::device::BlockDevice::in_memory`] reads
/// and writes. No power source, no tearing: a write is durable when it returns. With an
/// emulated profile it is the PIO device model with real data and no real I/O, so the
/// emulated timing is all there is (the medium under it never runs late, only the CPU can).
#[derive(Debug)]
pub(crate) struct MemDisk {
    image: parking_lot::RwLock<Vec<u8>>,
}

impl MemDisk {
    pub(crate) fn new(len: usize) -> MemDisk {
        MemDisk {
            image: parking_lot::RwLock::new(vec![0; len]),
        }
    }

    /// Runs a validated batch in order (memcpy).
    pub(crate) fn submit(&self, ios: &mut [Io<'_>]) -> Result<()> {
        if ios.iter().all(|io| matches!(io, Io::Read { .. })) {
            let image = self.image.read();
            for io in ios.iter_mut() {
                if let Io::Read { offset, buf } = io {
                    let start = *offset as usize;
                    let src = image
                        .get(start..start + buf.len())
                        .ok_or_else(|| out_of_range(*offset, buf.len(), image.len()))?;
                    buf.copy_from_slice(src);
                }
            }
            return Ok(());
        }
        let mut image = self.image.write();
        let size = image.len();
        for io in ios.iter_mut() {
            match io {
                Io::Read { offset, buf } => {
                    let start = *offset as usize;
                    let src = image
                        .get(start..start + buf.len())
                        .ok_or_else(|| out_of_range(*offset, buf.len(), size))?;
                    buf.copy_from_slice(src);
                }
                Io::Write { offset, buf } => {
                    let start = *offset as usize;
                    let dst = image
                        .get_mut(start..start + buf.len())
                        .ok_or_else(|| out_of_range(*offset, buf.len(), size))?;
                    dst.copy_from_slice(buf);
                }
            }
        }
        Ok(())
    }

    /// Grows the image to `new_len` bytes of zeros.
    pub(crate) fn grow(&self, new_len: u64) -> Result<()> {
        let n = usize::try_from(new_len)
            .map_err(|_| Error::InvalidArgument(format!("size {new_len} too large")))?;
        let mut image = self.image.write();
        if image.len() < n {
            image.resize(n, 0);
        }
        Ok(())
    }
}

fn out_of_range(offset: u64, len: usize, size: usize) -> Error {
    Error::OutOfRange {
        offset,
        len: len as u64,
        size: size as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_pieces_follow_sector_boundaries() {
        let mut img = vec![0u8; 2048];
        let mut rng = StdRng::seed_from_u64(1);
        // A write of 1024 bytes at 256 covers parts of three sectors: 256..512, 512..1024,
        // 1024..1280. With p = 1 all land, with p = 0 none.
        apply_torn(&mut img, 256, &[7; 1024], 1.0, &mut rng);
        assert!(img[256..1280].iter().all(|&b| b == 7));
        assert!(img[..256].iter().chain(&img[1280..]).all(|&b| b == 0));
        let mut img = vec![0u8; 2048];
        apply_torn(&mut img, 256, &[7; 1024], 0.0, &mut rng);
        assert!(img.iter().all(|&b| b == 0));
    }

    #[test]
    fn sync_at_the_crash_point_does_not_take_effect() {
        let power = SimPower::new(BlockCrashConfig {
            crash_after_syncs: Some(1),
            ..BlockCrashConfig::default()
        });
        let disk = SimDisk::new(&power, Path::new("d"), vec![0; 1024]);
        assert_eq!(disk.durable_image().map(|i| i.len()), Some(1024));
        disk.sync().unwrap();
        assert!(!power.crashed());
        assert_eq!(power.syncs(), 1);
        disk.sync().unwrap();
        assert!(power.crashed() && power.crashed_at_sync());
        assert!(!power.cut(), "already cut");
        assert_eq!(power.syncs(), 1);
        let slots = power.state.lock().disks.len();
        drop(disk);
        assert_eq!(power.state.lock().disks.len(), slots);
        assert!(power.state.lock().disks.iter().all(Option::is_none));
    }
}
