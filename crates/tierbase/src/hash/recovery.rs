//! Opening a Plush store: every header field and table entry is checked before it sizes or
//! locates anything; then the DRAM filters of the first levels are copied from their
//! entries, each DRAM entry's stamp is read from its level-0 entry, and the recovery logs are
//! replayed in parallel — every live entry (epoch above its DRAM entry's stamp) goes back to
//! its slot. Replay writes nothing to media, so a crash during recovery just means recovering
//! again (idempotent); its time depends on the logs' size, not on the data's.
//!
//! Owns: the open sequence and its report. Must not touch: anything after the store is open.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use serde::Serialize;

use super::dram::DramLevel;
use super::layout::{
    ENTRY_BYTES, ENTRY_FILTER, ENTRY_RECORDS, Geometry, HEADER_LEN, MAX_LEVELS, RESERVE_STEP,
    header, log_chunk, payload_chunk, split_size_epoch,
};
use super::log::Log;
use super::payload::Payload;
use super::{Counters, Inner, PlushOptions};
use crate::device::{PmemRegion, ZeroedWords};
use crate::error::{Error, Result};
use crate::space::RegionBump;
use crate::store::WriteFailure;

/// What an open found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// PMem levels the store has.
    pub levels: u32,
    /// Recovery-log chunks read.
    pub log_chunks: u64,
    /// Valid log entries found.
    pub log_entries: u64,
    /// Of those, records put back into DRAM (not migrated before the crash).
    pub replayed: u64,
    /// DRAM halves found full and handed to migration.
    pub frozen_halves: u64,
    /// DRAM filters copied from PMem entries.
    pub filters: u64,
    /// Log entries whose payload entry fails its check after a clean close: damaged on
    /// media (a crash cannot cut short an entry then). Their records are kept, and reading
    /// their keys fails with the damage (no older version comes back) until they are written
    /// again; reported by `stats`, `plush verify` and `serve`.
    pub damaged_payloads: u64,
    /// Recovery-log entries that fail their check after a clean close, in a chunk no crash cut
    /// writes short in, before the chunk's last valid entry: damaged on media (variable
    /// layout). Their writes are lost (the key's older record is what reads find); reported by
    /// `stats`, `plush verify` and `serve`, at every open until the chunk is reused.
    pub damaged_log_entries: u64,
    /// Time to check the header and tables and read the level-0 stamps.
    pub scan: Duration,
    /// Time to copy the DRAM filters.
    pub filter_time: Duration,
    /// Time to replay the logs.
    pub replay: Duration,
    /// Whole open.
    pub total: Duration,
}

fn word(region: &PmemRegion, off: u64) -> Result<u64> {
    Ok(region.atomic_u64(off)?.load(Ordering::Acquire))
}

/// Checks that `[off, off + len)` is a 4 KiB-aligned range of handed-out space.
fn check_range(
    geo: &Geometry,
    reserved: u64,
    path: Option<&Path>,
    what: &str,
    off: u64,
    len: u64,
) -> Result<()> {
    if !off.is_multiple_of(4096)
        || off < geo.space_offset()
        || off.checked_add(len).is_none_or(|end| end > reserved)
    {
        return Err(Error::corrupt(
            path,
            format!(
                "{what} at offset {off} (+{len} bytes) lies outside the store's space \
                 ({}..{reserved})",
                geo.space_offset()
            ),
        ));
    }
    Ok(())
}

/// Opens the store in `region`; also returns the DRAM entries to migrate before the store
/// takes writes.
pub(super) fn open(
    region: PmemRegion,
    opts: &PlushOptions,
) -> Result<(Inner, RecoveryReport, Vec<usize>)> {
    let started = Instant::now();
    let path: Option<PathBuf> = region.path().map(Path::to_path_buf);
    let p = path.as_deref();
    if region.len() < HEADER_LEN {
        return Err(Error::corrupt(
            p,
            format!(
                "region of {} bytes cannot hold a Plush header",
                region.len()
            ),
        ));
    }
    let mut hdr = vec![0u8; HEADER_LEN as usize];
    region.read(0, &mut hdr)?;
    let geo = Geometry::decode(&hdr, p)?;
    let reserved = word(&region, header::RESERVED_END as u64)?;
    if reserved < geo.space_offset() || reserved > region.len() {
        return Err(Error::corrupt(
            p,
            format!(
                "store header says {reserved} bytes are handed out; the region holds {} and \
                 the space starts at {}",
                region.len(),
                geo.space_offset()
            ),
        ));
    }
    let mut report = RecoveryReport::default();
    // Level directories.
    let dirs: [AtomicU64; MAX_LEVELS as usize] = Default::default();
    for level in 0..MAX_LEVELS {
        let d = word(&region, (header::LEVELS + 8 * level as usize) as u64)?;
        if d == 0 {
            continue;
        }
        if level >= geo.max_levels {
            return Err(Error::corrupt(
                p,
                format!(
                    "level {level} exists but the store allows {}",
                    geo.max_levels
                ),
            ));
        }
        check_range(
            &geo,
            reserved,
            p,
            &format!("level {level}'s directory"),
            d,
            geo.level_bytes(level),
        )?;
        dirs[level as usize].store(d, Ordering::Relaxed);
        report.levels += 1;
    }
    // Recovery-log chunk tables and headers.
    let mut logs = Vec::with_capacity(geo.logs as usize);
    let mut log_chunks: Vec<Vec<(u32, u64, u64, u64)>> = Vec::new(); // (chunk, off, generation, seq)
    for l in 0..geo.logs {
        let log = Log::new(l, geo.log_chunks, geo.entries_per_log());
        let mut found = Vec::new();
        {
            let mut st = log.state.write();
            for c in 0..geo.log_chunks {
                let off = word(&region, geo.log_table_word(l, c))?;
                if off == 0 {
                    continue;
                }
                check_range(
                    &geo,
                    reserved,
                    p,
                    &format!("log {l} chunk {c}"),
                    off,
                    geo.log_chunk_bytes,
                )?;
                let mut magic = [0u8; 8];
                region.read(off, &mut magic)?;
                if &magic != log_chunk::MAGIC {
                    return Err(Error::corrupt(
                        p,
                        format!("log {l} chunk {c} at offset {off} has no chunk header"),
                    ));
                }
                let generation = word(&region, off + log_chunk::GEN)?;
                let seq = word(&region, off + log_chunk::SEQ)?;
                st.offsets[c as usize] = off;
                st.gens[c as usize] = generation;
                found.push((c, off, generation, seq));
            }
        }
        logs.push(log);
        log_chunks.push(found);
    }
    // Payload chunk table and headers; whether the last close was clean (variable layout:
    // the payload's resume words say so; the fixed layout cannot tell).
    let mut closed_cleanly = false;
    let payload = match geo.layout {
        super::layout::PlushLayout::Fixed8 => None,
        super::layout::PlushLayout::Variable => {
            let pl = Payload::new(
                geo.payload_logs,
                geo.payload_chunks,
                geo.payload_chunk_bytes,
            );
            let mut free = Vec::new();
            let mut resumed = Vec::new();
            // Chunks in use not marked as held through a crash ([`payload_chunk::CRASHED`]).
            let mut unmarked = Vec::new();
            for c in 0..geo.payload_chunks {
                let off = word(&region, geo.payload_table_word(c))?;
                if off == 0 {
                    continue;
                }
                check_range(
                    &geo,
                    reserved,
                    p,
                    &format!("payload chunk {c}"),
                    off,
                    geo.payload_chunk_bytes,
                )?;
                let mut magic = [0u8; 8];
                region.read(off, &mut magic)?;
                if &magic != payload_chunk::MAGIC {
                    return Err(Error::corrupt(
                        p,
                        format!("payload chunk {c} at offset {off} has no chunk header"),
                    ));
                }
                let ch = &pl.chunks[c as usize];
                ch.claimed.store(true, Ordering::Release);
                ch.off.store(off, Ordering::Release);
                ch.epoch.store(
                    word(&region, off + payload_chunk::EPOCH)?,
                    Ordering::Release,
                );
                let state = word(&region, off + payload_chunk::STATE)?;
                if state & payload_chunk::IN_USE != 0 {
                    ch.in_use.store(true, Ordering::Release);
                    if state & payload_chunk::CRASHED == 0 {
                        unmarked.push((c, off));
                    }
                    // Where a clean close left its next entry: appends go on there. Cleared
                    // first (persisted), so that a crash after them is not mistaken for a
                    // clean close. Without it the write position is not known: the chunk
                    // is full.
                    let resume = super::take_resume(&region, off + payload_chunk::RESUME)?;
                    if (super::layout::PAYLOAD_CHUNK_HEADER..geo.payload_chunk_bytes)
                        .contains(&resume)
                        && resume.is_multiple_of(8)
                    {
                        resumed.push((c, resume));
                    }
                } else {
                    free.push(c);
                }
            }
            // A clean close records a resume word in the chunk each payload log appends to,
            // and the open clears them all before anything is appended: none found means the
            // last close was a crash, and every chunk in use then is marked (persisted) as
            // one a crash may have cut an entry short in. An entry that fails its check is
            // media damage only in a chunk so marked never, after a clean close.
            let clean_close = !resumed.is_empty();
            closed_cleanly = clean_close;
            if !clean_close {
                // Likewise every started recovery-log chunk, for its current generation.
                for &(_, off, generation, _) in log_chunks.iter().flatten() {
                    if generation != 0 {
                        region
                            .atomic_u64(off + log_chunk::CRASHED_GEN)?
                            .store(generation, Ordering::Release);
                        region.persist(off + log_chunk::CRASHED_GEN, 8)?;
                    }
                }
            }
            for (c, off) in unmarked {
                if clean_close {
                    pl.chunks[c as usize]
                        .closed_cleanly
                        .store(true, Ordering::Release);
                } else {
                    region
                        .atomic_u64(off + payload_chunk::STATE)?
                        .fetch_or(payload_chunk::CRASHED, Ordering::AcqRel);
                    region.persist(off + payload_chunk::STATE, 8)?;
                }
            }
            pl.restore(free, resumed);
            Some(pl)
        }
    };
    let dram = DramLevel::new(geo.dram_entries())?;
    let filter_levels = opts.dram_filter_levels.min(geo.max_levels);
    let dram_filters = (0..filter_levels)
        .map(|l| ZeroedWords::new(geo.level_entries(l) as usize * 32))
        .collect::<Result<Vec<_>>>()?;
    let inner = Inner {
        space: RegionBump::new(
            header::RESERVED_END as u64,
            reserved,
            geo.space_offset(),
            RESERVE_STEP,
        ),
        region,
        geo,
        path: path.clone(),
        failure: WriteFailure::default(),
        dram,
        dirs,
        level_create: Mutex::new(()),
        prealloc_levels: opts.prealloc_levels.min(geo.max_levels),
        dram_filters,
        logs,
        payload,
        counters: Counters::default(),
        queue: SegQueue::new(),
        migrators: Mutex::new(Vec::new()),
        sync_migration: opts.migrators == 0,
        count: AtomicI64::new(0),
        count_known: AtomicBool::new(false),
    };
    // Level 0 entries: stamps (their epochs) and sizes checked.
    if let Some(d0) = inner.level_dir(0) {
        for i in 0..geo.dram_entries() {
            let (size, epoch) = split_size_epoch(word(&inner.region, d0 + i as u64 * ENTRY_BYTES)?);
            if size as usize > ENTRY_RECORDS {
                return Err(Error::corrupt(
                    p,
                    format!("level 0 entry {i} claims {size} records (at most {ENTRY_RECORDS})"),
                ));
            }
            inner.dram.entries[i].stamp.store(epoch, Ordering::Release);
        }
    }
    report.scan = started.elapsed();
    // DRAM filters: copied from the entries that hold records.
    let t = Instant::now();
    for (level, f) in inner.dram_filters.iter().enumerate() {
        let Some(dir) = inner.level_dir(level as u32) else {
            continue;
        };
        let mut raw = [0u8; 256];
        for i in 0..geo.level_entries(level as u32) {
            let entry = dir + i * ENTRY_BYTES;
            let (size, _) = split_size_epoch(word(&inner.region, entry)?);
            if size == 0 {
                continue;
            }
            if size as usize > ENTRY_RECORDS {
                return Err(Error::corrupt(
                    p,
                    format!(
                        "level {level} entry {i} claims {size} records (at most {ENTRY_RECORDS})"
                    ),
                ));
            }
            inner.region.read(entry + ENTRY_FILTER, &mut raw)?;
            for (w, bytes) in raw.chunks_exact(8).enumerate() {
                f[i as usize * 32 + w].store(
                    u64::from_le_bytes(bytes.try_into().expect("8")),
                    Ordering::Release,
                );
            }
            report.filters += 1;
        }
    }
    report.filter_time = t.elapsed();
    // Replay, one log per task.
    let t = Instant::now();
    let threads = opts.recovery_threads.clamp(1, geo.logs as usize);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<(Replayed, Vec<usize>)>> = Mutex::new(Vec::new());
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let l = next.fetch_add(1, Ordering::AcqRel);
                    if l >= geo.logs as usize || failed.lock().is_some() {
                        break;
                    }
                    match replay_log(&inner, l, &log_chunks[l], closed_cleanly) {
                        Ok(r) => results.lock().push(r),
                        Err(e) => {
                            failed.lock().get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner() {
        return Err(e);
    }
    let mut reseal = Vec::new();
    for ((chunks, entries, replayed, frozen, damaged, damaged_log), r) in results.into_inner() {
        report.log_chunks += chunks;
        report.log_entries += entries;
        report.replayed += replayed;
        report.frozen_halves += frozen;
        report.damaged_payloads += damaged;
        report.damaged_log_entries += damaged_log;
        reseal.extend(r);
    }
    if let Some(d) = report.damage() {
        tracing::warn!("Plush store {:?}: {d}", inner.path);
    }
    report.replay = t.elapsed();
    let opens = inner.region.atomic_u64(header::OPENS as u64)?;
    opens.fetch_add(1, Ordering::AcqRel);
    inner.region.persist(header::OPENS as u64, 8)?;
    Ok((inner, report, reseal))
}

impl RecoveryReport {
    /// What recovery found damaged ([`RecoveryReport::damaged_payloads`]), if anything, in a
    /// sentence.
    pub fn damage(&self) -> Option<String> {
        let n = self.damaged_payloads;
        let payloads = (n > 0).then(|| {
            format!(
                "{n} record{} the recovery logs hold had a payload entry that fails its check \
                 after a clean close (media damage): reading their keys reports the damage \
                 until they are written again",
                if n == 1 { "" } else { "s" }
            )
        });
        let n = self.damaged_log_entries;
        let log = (n > 0).then(|| {
            format!(
                "{n} recovery-log entr{} fail{} their check after a clean close (media \
                 damage): the writes they logged are lost, and their keys read as they were \
                 before those writes (an older value, or absent)",
                if n == 1 { "y" } else { "ies" },
                if n == 1 { "s" } else { "" }
            )
        });
        match (payloads, log) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }
}

/// A DRAM entry's live log entries: (epoch, slot) → (key word, value word).
type LiveSlots = BTreeMap<(u32, u8), (u64, u64)>;

/// Replays log `l`: puts every live entry back at its DRAM slot and rebuilds the log's chunk
/// order and per-chunk epochs. Returns what it found, and the DRAM entries to migrate before
/// they take writes.
fn replay_log(
    inner: &Inner,
    l: usize,
    chunks: &[(u32, u64, u64, u64)],
    closed_cleanly: bool,
) -> Result<(Replayed, Vec<usize>)> {
    let geo = &inner.geo;
    let log = &inner.logs[l];
    let per = geo.entries_per_log();
    let mut live: BTreeMap<usize, LiveSlots> = BTreeMap::new();
    let mut entries = 0u64;
    let mut damaged = 0u64;
    let mut valid = vec![0u64; geo.log_chunks as usize];
    // Per chunk, one past its last valid entry's slot.
    let mut valid_end = vec![0u64; geo.log_chunks as usize];
    let mut damaged_log = 0u64;
    let scans = chunks
        .iter()
        .map(|&(_, off, generation, _)| inner.scan_chunk(off, generation, l as u32))
        .collect::<Result<Vec<_>>>()?;
    // The chunk the log appended to last: the newest (by sequence) holding entries.
    let newest = chunks
        .iter()
        .zip(&scans)
        .filter(|(_, found)| !found.is_empty())
        .max_by_key(|(c, _)| c.3)
        .map(|(c, _)| c.0);
    for (&(c, off, generation, _), found) in chunks.iter().zip(scans) {
        // After a clean close, a chunk holding entries that no crash held in its generation
        // had every slot before its end written: entries fill a chunk from slot 0 in order.
        // The newest one ends where the close recorded its next entry; the others (and the
        // newest without that record) are taken to end after their last valid entry, which
        // leaves out damage to their last slots but never takes a tail the generation did not
        // write (a chunk restarted twice still holds the entries of two generations ago,
        // with the same flag bits, past its end) for damage.
        if closed_cleanly
            && !found.is_empty()
            && word(&inner.region, off + log_chunk::CRASHED_GEN)? != generation
        {
            let n = geo.log_chunk_entries();
            let resume = word(&inner.region, off + log_chunk::RESUME)?;
            let last = found.iter().map(|f| f.0 + 1).max().unwrap_or(0);
            let end = if Some(c) == newest && resume > 0 && resume < n {
                resume.max(last)
            } else {
                last
            };
            damaged_log += inner.damaged_log_slots(off, generation, &found, end)?;
        }
        for (slot, entry, r) in found {
            entries += 1;
            valid[c as usize] += 1;
            valid_end[c as usize] = valid_end[c as usize].max(slot + 1);
            log.max_epoch[c as usize * per + entry / geo.logs as usize]
                .fetch_max(r.epoch, Ordering::AcqRel);
            if r.epoch > inner.dram.entries[entry].stamp.load(Ordering::Acquire) {
                // Variable layout: a record whose payload entry is not whole was cut short by
                // the crash (the two were persisted under one fence) and never acknowledged:
                // dropped. In a chunk a clean close left, no entry was cut short: it was
                // damaged on media, and the record is kept — dropped, an older version of its
                // key would come back — in a chunk marked suspect, whose entries reads check,
                // so that reading the key reports the damage (a write of the key replaces it).
                if let Some(p) = &inner.payload
                    && !p.is_whole(&inner.region, r.value)?
                {
                    if !p.damaged_in_clean_chunk(r.value) {
                        continue;
                    }
                    damaged += 1;
                    p.mark_suspect(r.value);
                }
                live.entry(entry)
                    .or_default()
                    .insert((r.epoch, r.slot), (r.key, r.value));
            }
        }
    }
    let mut replayed = 0u64;
    let mut frozen = 0u64;
    let mut reseal = Vec::new();
    for (entry, recs) in live {
        let mut epochs: Vec<u32> = recs.keys().map(|k| k.0).collect();
        epochs.dedup();
        if epochs.len() > 2 || (epochs.len() == 2 && epochs[1] != epochs[0] + 1) {
            return Err(Error::corrupt(
                inner.path.as_deref(),
                format!("DRAM entry {entry} has unmigrated log entries of epochs {epochs:?}"),
            ));
        }
        let e = &inner.dram.entries[entry];
        let mut holes = false;
        for (half, &epoch) in epochs.iter().enumerate() {
            let slots: Vec<(u8, (u64, u64))> = recs
                .range((epoch, 0)..=(epoch, u8::MAX))
                .map(|(k, v)| (k.1, *v))
                .collect();
            // Records written without a log entry (bulk load) are lost in a crash and leave
            // their slots out; the rest keep their order, packed.
            holes |= slots.iter().enumerate().any(|(i, s)| usize::from(s.0) != i);
            for (i, (_, (k, v))) in slots.iter().enumerate() {
                inner.dram.write(entry, half, i, *k, *v, inner.hash_of(*k));
            }
            let h = &e.halves[half];
            h.epoch.store(epoch, Ordering::Release);
            h.size.store(slots.len() as u32, Ordering::Release);
            replayed += slots.len() as u64;
        }
        if epochs.len() == 2 {
            e.halves[0].frozen.store(true, Ordering::Release);
            e.active.store(1, Ordering::Release);
            e.queued.store(true, Ordering::Release);
            inner.queue.push(entry as u32);
            frozen += 1;
        }
        if holes {
            // New records must not reuse a slot number a surviving log entry still names: the
            // entry's halves are migrated before it takes writes (a fresh half follows).
            reseal.push(entry);
        }
    }
    // Entries with nothing live start a fresh half above their stamp.
    for local in 0..per {
        let entry = local * geo.logs as usize + l;
        let e = &inner.dram.entries[entry];
        let (a, _) = super::dram::halves(e);
        if e.halves[a].size.load(Ordering::Acquire) == 0 {
            e.halves[a]
                .epoch
                .store(e.stamp.load(Ordering::Acquire) + 1, Ordering::Release);
        }
    }
    // The chunk order, and where the next entry goes: a fresh chunk (the last one's write
    // position is not recorded).
    let mut st = log.state.write();
    // Chunks holding valid entries, oldest first; the others (never started, or retired —
    // the spare among them) are free, and one of them is the spare again.
    let mut started: Vec<&(u32, u64, u64, u64)> =
        chunks.iter().filter(|c| valid[c.0 as usize] > 0).collect();
    started.sort_by_key(|c| c.3);
    st.ring = started.iter().map(|c| c.0).collect::<VecDeque<u32>>();
    st.free = chunks
        .iter()
        .filter(|c| valid[c.0 as usize] == 0)
        .map(|c| c.0)
        .collect();
    st.spare = st.free.pop();
    st.next_seq = match chunks.iter().map(|c| c.3).max() {
        None => 1,
        Some(m) => m.checked_add(1).ok_or_else(|| {
            Error::corrupt(
                inner.path.as_deref(),
                format!("log {l} has a chunk with sequence number {m}, the largest there is"),
            )
        })?,
    };
    // Where the next entry goes in the newest chunk: where a clean close left it (cleared
    // first, persisted, so that a crash after more appends is not mistaken for a clean
    // close); after a crash, past its last valid entry. Slots before that which hold no valid
    // entry (writes the crash cut short: concurrent appenders take slots in one order and
    // persist them in another) stay holes; slots after it hold nothing valid, and an append
    // there writes every word of its entry, whose check word rejects any mix with the words
    // a torn write left (docs/FORMAT-plush.md). Before 2026-12-03 each crash abandoned every
    // log's newest chunk, and a store killed often held hundreds of them.
    let mut pos = geo.log_chunk_entries();
    if let Some(&&(c, off, _, _)) = started.last() {
        let resume = super::take_resume(&inner.region, off + log_chunk::RESUME)?;
        // Entries fill a chunk in order, and a clean close leaves no gap.
        if resume != 0 && resume < geo.log_chunk_entries() && valid[c as usize] <= resume {
            pos = resume;
        } else if resume == 0 {
            pos = valid_end[c as usize];
        }
    }
    log.pos.store(pos, Ordering::Release);
    Ok((
        (
            chunks.len() as u64,
            entries,
            replayed,
            frozen,
            damaged,
            damaged_log,
        ),
        reseal,
    ))
}

/// (chunks read, entries found, records replayed, frozen halves, damaged payload entries,
/// damaged log entries) of one log.
type Replayed = (u64, u64, u64, u64, u64, u64);
