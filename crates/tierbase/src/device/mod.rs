//! The device layer: the only code in tierbase that touches hardware.
//!
//! Owns: mapping files as persistent regions ([`PmemRegion`]), block I/O with `O_DIRECT` and
//! io_uring ([`BlockDevice`]), flush/fence/`msync` and the durability vocabulary
//! ([`DurabilityMode`]), device profiles and their catalogue ([`DeviceProfile`],
//! [`Catalogue`]), emulation of devices this machine does not have ([`Emulator`]), the
//! power-loss simulator for tests, always-on counters, DRAM arenas backed by huge pages for
//! large in-memory structures ([`dram`]), the machine probe behind
//! `tierbase devices`, and raw access for measuring memory itself ([`RawAccess`], used by the
//! memory profiler). Must not touch: records, pages, indexes or any store's format.

mod aligned;
mod block;
mod block_sim;
mod counters;
pub mod cpu;
mod crash;
pub mod dram;
mod durability;
mod emulate;
mod group_sync;
mod growth;
pub mod probe;
mod profile;
pub mod raw;
mod region;
mod shared_mem;

pub use aligned::{AlignedBuf, IO_ALIGN};
pub use block::{BlockDevice, BlockInfo, BlockOptions, DirectIo, Io, IoEngineKind};
pub use block_sim::{BlockCrashConfig, SECTOR, SimPower};
pub use counters::{Counter, CounterSnapshot, DeviceCounters, thread_slot};
pub use cpu::{
    CpuFeatures, FlushInstruction, KeySearch, lanes_containing, match_16, match_bytes_128,
};
pub use crash::CrashSimConfig;
pub use dram::{DramArena, DramSlice, ZeroedWords};
pub use durability::{
    Durability, DurabilityMode, FsKind, fs_kind, on_huge_page_tmpfs, regular_file_fs,
};
pub use emulate::{
    Direction, Emulator, EmulatorStats, Ticket, exit_overhead_ns, now_ns, spin_until,
};
pub(crate) use group_sync::GroupSync;
pub(crate) use growth::grow_toward;
pub use growth::report_file_size_limit_as_full;
pub use profile::{Catalogue, DeviceKind, DeviceProfile};
pub use raw::RawAccess;
pub use region::{
    MEDIA_LINE, MappingKind, PagedRegion, PmemRegion, REGION_HEADER_LEN, REGION_MAGIC, RegionInfo,
    RegionOptions,
};
pub use shared_mem::RacyView;
