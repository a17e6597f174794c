//! The recovery logs: a write-ahead log entry per insert (RAWL: one persist barrier), in
//! `logs` logs partitioned by DRAM entry (so one key always goes to one log), each a list of
//! fixed-size chunks. A log entry is dead once the DRAM half it went to has been migrated
//! (its epoch is at most the entry's stamp); a full log reuses its oldest chunk — at once when
//! every entry in it is dead (known from a per-chunk maximum epoch per DRAM entry, without
//! reading the chunk), else after copying its live entries into a spare chunk. Recovery
//! places each live entry back at its DRAM slot, so the order of entries (and of copies) does
//! not matter.
//!
//! Owns: chunk allocation and reuse, appends, compaction and the scan recovery reads. Must not
//! touch: the DRAM level (it reads stamps) or PMem levels.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::RwLock;

use super::Inner;
use super::layout::{
    LOG_CHUNK_HEADER, LOG_ENTRY_BYTES, LogRecord, decode_log, encode_log, log_chunk,
};
use crate::error::{Error, Result};

/// One recovery log's chunk bookkeeping (DRAM).
#[derive(Debug, Default)]
pub(super) struct LogState {
    /// Chunk offsets by chunk number (0 = not allocated).
    pub offsets: Vec<u64>,
    /// Generation of each chunk.
    pub gens: Vec<u64>,
    /// Chunks holding entries, oldest first; the last is the current one.
    pub ring: VecDeque<u32>,
    /// Allocated chunks holding nothing.
    pub free: Vec<u32>,
    /// The chunk live entries are copied into when the oldest chunk is still live.
    pub spare: Option<u32>,
    /// Sequence number the next started chunk gets.
    pub next_seq: u64,
}

/// A recovery log. Its lines are its own (128 bytes: the CPU also fetches a line's neighbour):
/// every append writes its lock word and position.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Log {
    pub id: u32,
    pub state: RwLock<LogState>,
    /// Next entry slot in the current chunk.
    pub pos: AtomicU64,
    /// Per chunk, per DRAM entry served: the highest epoch of an entry written there.
    pub max_epoch: Vec<AtomicU32>,
}

impl Log {
    pub fn new(id: u32, chunks: u32, entries_per_log: usize) -> Self {
        Log {
            id,
            state: RwLock::new(LogState {
                offsets: vec![0; chunks as usize],
                gens: vec![0; chunks as usize],
                ..LogState::default()
            }),
            pos: AtomicU64::new(0),
            max_epoch: (0..chunks as usize * entries_per_log)
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }
}

impl Inner {
    /// A clean close (no writer left): records in each log's current chunk the slot of its
    /// next entry, so that the next open appends there instead of starting another chunk
    /// (each open of a small store took a new chunk in every log it wrote to).
    pub(super) fn record_log_resume(&self) -> Result<()> {
        let entries = self.geo.log_chunk_entries();
        for log in &self.logs {
            let st = log.state.read();
            let Some(&c) = st.ring.back() else {
                continue;
            };
            let pos = log.pos.load(Ordering::Acquire);
            let off = st.offsets.get(c as usize).copied().unwrap_or(0);
            if off == 0 || pos == 0 || pos >= entries {
                continue;
            }
            super::record_resume(&self.region, off + log_chunk::RESUME, pos)?;
        }
        Ok(())
    }

    /// The DRAM entry's position among the entries its log serves.
    #[inline]
    fn local(&self, entry: usize) -> usize {
        entry / self.geo.logs as usize
    }

    /// Writes `rec` (for DRAM entry `entry`) to its log and makes it durable — together with
    /// `with` (a payload entry written but not yet persisted), under one fence: recovery keeps
    /// a log entry only if its payload entry passes its check, so the two need no order.
    pub(super) fn log_append(
        &self,
        entry: usize,
        rec: &LogRecord,
        with: Option<(u64, usize)>,
    ) -> Result<()> {
        let log = &self.logs[entry % self.geo.logs as usize];
        let per_chunk = self.geo.log_chunk_entries();
        loop {
            let st = log.state.read();
            if let Some(&chunk) = st.ring.back() {
                let slot = log.pos.fetch_add(1, Ordering::AcqRel);
                if slot < per_chunk {
                    let c = chunk as usize;
                    log.max_epoch[c * self.geo.entries_per_log() + self.local(entry)]
                        .fetch_max(rec.epoch, Ordering::AcqRel);
                    let off = st.offsets[c] + LOG_CHUNK_HEADER + slot * LOG_ENTRY_BYTES;
                    let words = encode_log(rec, st.gens[c]);
                    let mut raw = [0u8; 32];
                    for (i, w) in words.iter().enumerate() {
                        raw[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                    }
                    self.region.write(off, &raw)?;
                    match with {
                        Some(payload) => self
                            .region
                            .persist_all(&[payload, (off, LOG_ENTRY_BYTES as usize)])?,
                        None => self.region.persist(off, LOG_ENTRY_BYTES as usize)?,
                    }
                    // The log's next entry: in this line or the next one.
                    if slot + 1 < per_chunk {
                        self.region
                            .prefetch(off + LOG_ENTRY_BYTES, LOG_ENTRY_BYTES as usize);
                    }
                    self.counters.log_entries.incr();
                    return Ok(());
                }
            }
            let current = st.ring.back().copied();
            drop(st);
            self.rotate_log(log, current)?;
        }
    }

    /// Starts a new current chunk for `log` unless another thread already did (`seen` is the
    /// current chunk the caller found full, `None` if the log had none).
    fn rotate_log(&self, log: &Log, seen: Option<u32>) -> Result<()> {
        let mut st = log.state.write();
        if st.ring.back().copied() != seen {
            return Ok(()); // rotated meanwhile
        }
        let per_chunk = self.geo.log_chunk_entries();
        // A full log: reuse the oldest chunks until the current one has room.
        loop {
            if let Some(c) = st.free.pop() {
                self.start_chunk(log, &mut st, c)?;
                log.pos.store(0, Ordering::Release);
                return Ok(());
            }
            let allocated = st.offsets.iter().filter(|&&o| o != 0).count() as u32;
            // Keep one chunk for the spare that compaction copies into.
            if allocated + 1 < self.geo.log_chunks {
                let c = self.alloc_log_chunk(log, &mut st)?;
                self.start_chunk(log, &mut st, c)?;
                log.pos.store(0, Ordering::Release);
                return Ok(());
            }
            let copied = self.compact_oldest(log, &mut st)?;
            if copied < per_chunk {
                log.pos.store(copied, Ordering::Release);
                return Ok(());
            }
        }
    }

    fn alloc_log_chunk(&self, log: &Log, st: &mut LogState) -> Result<u32> {
        let c =
            st.offsets.iter().position(|&o| o == 0).ok_or_else(|| {
                Error::corrupt(self.path.as_deref(), "no log chunk left to allocate")
            })? as u32;
        let off = self
            .space
            .alloc(&self.region, self.geo.log_chunk_bytes, 4096)?;
        self.region.write(off, log_chunk::MAGIC)?;
        self.region.persist(off, 8)?;
        let word = self.geo.log_table_word(log.id, c);
        self.region.atomic_u64(word)?.store(off, Ordering::Release);
        self.region.persist(word, 8)?;
        st.offsets[c as usize] = off;
        st.gens[c as usize] = 0;
        Ok(c)
    }

    /// Makes chunk `c` the current one: a new generation (every entry it held is invalid from
    /// now on) and the next sequence number.
    fn start_chunk(&self, log: &Log, st: &mut LogState, c: u32) -> Result<()> {
        self.renew_chunk(log, st, c)?;
        st.ring.push_back(c);
        Ok(())
    }

    /// Raises chunk `c`'s generation and sequence number (persisted), forgetting its epochs.
    fn renew_chunk(&self, log: &Log, st: &mut LogState, c: u32) -> Result<()> {
        let off = st.offsets[c as usize];
        let (Some(generation), Some(next_seq)) = (
            st.gens[c as usize].checked_add(1),
            st.next_seq.checked_add(1),
        ) else {
            return Err(Error::corrupt(
                self.path.as_deref(),
                format!(
                    "log {} chunk {c}: generation or sequence number at its maximum",
                    log.id
                ),
            ));
        };
        let seq = st.next_seq;
        st.next_seq = next_seq;
        self.region
            .atomic_u64(off + log_chunk::SEQ)?
            .store(seq, Ordering::Release);
        self.region
            .atomic_u64(off + log_chunk::GEN)?
            .store(generation, Ordering::Release);
        self.region.persist(off, LOG_CHUNK_HEADER as usize)?;
        st.gens[c as usize] = generation;
        let per = self.geo.entries_per_log();
        for e in &log.max_epoch[c as usize * per..(c as usize + 1) * per] {
            e.store(0, Ordering::Release);
        }
        Ok(())
    }

    /// Reuses the log's oldest chunk: at once if every entry in it is dead, else after copying
    /// its live entries into the spare, which becomes the current chunk (the oldest becomes
    /// the spare). Returns how many entries the new current chunk already holds.
    fn compact_oldest(&self, log: &Log, st: &mut LogState) -> Result<u64> {
        let oldest = *st
            .ring
            .front()
            .ok_or_else(|| Error::corrupt(self.path.as_deref(), "a full log without chunks"))?;
        let per = self.geo.entries_per_log();
        let logs = self.geo.logs as usize;
        let all_dead = (0..per).all(|local| {
            let entry = local * logs + log.id as usize;
            log.max_epoch[oldest as usize * per + local].load(Ordering::Acquire)
                <= super::dram::stamp(&self.dram.entries[entry])
        });
        st.ring.pop_front();
        if all_dead {
            self.counters.log_compactions_skipped.incr();
            self.start_chunk(log, st, oldest)?;
            return Ok(0);
        }
        // Copy the live entries into the spare, then retire the oldest chunk.
        let spare = match st.spare.take() {
            Some(s) => s,
            None => self.alloc_log_chunk(log, st)?,
        };
        self.start_chunk(log, st, spare)?;
        let live: Vec<(usize, LogRecord)> = self
            .scan_chunk(
                st.offsets[oldest as usize],
                st.gens[oldest as usize],
                log.id,
            )?
            .into_iter()
            .filter(|(_, entry, r)| r.epoch > super::dram::stamp(&self.dram.entries[*entry]))
            .map(|(_, entry, r)| (entry, r))
            .collect();
        let off = st.offsets[spare as usize];
        let generation = st.gens[spare as usize];
        for (i, (entry, r)) in live.iter().enumerate() {
            let words = encode_log(r, generation);
            let mut raw = [0u8; 32];
            for (j, w) in words.iter().enumerate() {
                raw[8 * j..8 * j + 8].copy_from_slice(&w.to_le_bytes());
            }
            self.region
                .write(off + LOG_CHUNK_HEADER + i as u64 * LOG_ENTRY_BYTES, &raw)?;
            log.max_epoch[spare as usize * per + self.local(*entry)]
                .fetch_max(r.epoch, Ordering::AcqRel);
        }
        self.region.persist(
            off + LOG_CHUNK_HEADER,
            live.len() * LOG_ENTRY_BYTES as usize,
        )?;
        // The copies are durable: now the originals may go (a crash before leaves both, and
        // recovery puts each at its slot twice).
        self.renew_chunk(log, st, oldest)?;
        st.spare = Some(oldest);
        self.counters.log_compactions.incr();
        self.counters.log_entries_copied.add(live.len() as u64);
        Ok(live.len() as u64)
    }

    /// After an open: a log whose chunks are all allocated and all hold valid entries has no
    /// spare to copy live entries into; migrating the DRAM entries it serves makes all of its
    /// entries dead, and its chunks free. (Single-threaded: before the store is shared.)
    pub(super) fn settle_log(&self, l: usize) -> Result<()> {
        let log = &self.logs[l];
        let needs = {
            let st = log.state.read();
            let allocated = st.offsets.iter().filter(|&&o| o != 0).count() as u32;
            st.spare.is_none() && st.free.is_empty() && allocated >= self.geo.log_chunks
        };
        if !needs {
            return Ok(());
        }
        let logs = self.geo.logs as usize;
        for local in 0..self.geo.entries_per_log() {
            self.checkpoint_entry(local * logs + l)?;
        }
        let mut st = log.state.write();
        let ring: Vec<u32> = st.ring.drain(..).collect();
        for c in ring {
            self.renew_chunk(log, &mut st, c)?;
            st.free.push(c);
        }
        st.spare = st.free.pop();
        Ok(())
    }

    /// Of a chunk whose slots before `end` were all written in its generation (after a clean
    /// close, in a chunk no crash held): the slots there that hold no valid entry of this log
    /// (`found`, from [`Self::scan_chunk`]) yet carry the generation's flag bits — media
    /// damage. (Zeros, or the previous generation's flag bits, are what a file written
    /// before 2026-12-04 can hold in a slot a crash left unwritten; such slots are not
    /// counted. A slot a crash left half written in such a file is counted: a false alarm
    /// those files can give once.)
    pub(super) fn damaged_log_slots(
        &self,
        off: u64,
        generation: u64,
        found: &[(u64, usize, LogRecord)],
        end: u64,
    ) -> Result<u64> {
        let mut valid = vec![false; end as usize];
        for f in found {
            if let Some(v) = valid.get_mut(f.0 as usize) {
                *v = true;
            }
        }
        let b = generation & 1;
        let mut damaged = 0;
        for slot in (0..end).filter(|&s| !valid[s as usize]) {
            let at = off + LOG_CHUNK_HEADER + slot * LOG_ENTRY_BYTES;
            let mut w = [0u64; 3];
            for (i, x) in w.iter_mut().enumerate() {
                *x = self.region.read_u64(at + 8 * i as u64)?;
            }
            if w.iter().all(|x| x & 1 == b) && w.iter().any(|&x| x != 0) {
                damaged += 1;
            }
        }
        Ok(damaged)
    }

    /// The valid entries of the chunk at `off` in generation `generation`: (slot in the chunk,
    /// DRAM entry, record).
    pub(super) fn scan_chunk(
        &self,
        off: u64,
        generation: u64,
        log: u32,
    ) -> Result<Vec<(u64, usize, LogRecord)>> {
        let mut out = Vec::new();
        if generation == 0 {
            return Ok(out);
        }
        let n = self.geo.log_chunk_entries();
        let mut raw = vec![0u8; (n * LOG_ENTRY_BYTES) as usize];
        self.region.read(off + LOG_CHUNK_HEADER, &mut raw)?;
        let mask = self.geo.dram_entries() as u64 - 1;
        for (slot, e) in (0u64..).zip(raw.chunks_exact(LOG_ENTRY_BYTES as usize)) {
            let mut w = [0u64; 4];
            for (i, x) in w.iter_mut().enumerate() {
                *x = u64::from_le_bytes(e[8 * i..8 * i + 8].try_into().expect("8"));
            }
            if let Some(r) = decode_log(&w, generation) {
                let entry = (self.hash_of(r.key) & mask) as usize;
                if entry % self.geo.logs as usize != log as usize {
                    continue; // not this log's: a stray entry cannot be trusted
                }
                out.push((slot, entry, r));
            }
        }
        Ok(out)
    }
}
