//! The per-thread operation stream of a workload (YCSB `CoreWorkload.doTransaction`).
//!
//! Owns: [`KeySpace`] (the insert counters shared by the threads of a phase),
//! [`WorkloadGenerators`] (the generators built once per phase, zeta included) and
//! [`OperationStream`] (one per worker thread, with its own seeded [`Rng`]). Must not touch:
//! stores or timing.
//!
//! Determinism: each stream draws from three generators derived from (seed, phase, thread): one
//! for operation types and scan lengths, one for keys, one for value sizes and bytes. With one
//! thread the whole sequence, keys included, is a function of the seed. With several threads,
//! each thread's operation types, scan lengths and values still are; its keys are too unless
//! the workload inserts: insert key numbers come from a counter shared as in YCSB, and readers
//! redraw keys beyond the newest acknowledged insert, so which keys are chosen then depends on
//! the interleaving.

use crate::error::Result;
use crate::generator::{
    AcknowledgedCounter, CounterGenerator, DiscreteGenerator, ScrambledZipfianGenerator,
    SkewedLatestGenerator, UniformGenerator, ZipfianGenerator,
};
use crate::measure::OpKind;
use crate::rng::Rng;
use crate::workload::keys::{VALUE_HEADER_LEN, build_value_with_fingerprint, key_fingerprint};
use crate::workload::{RequestDistribution, ScanLengthDistribution, SizeSpec, WorkloadSpec};

/// RNG stream ids, so phases and purposes never share random numbers.
pub(crate) const LOAD_STREAM: u64 = 1;
/// RNG stream of the run phase.
pub(crate) const RUN_STREAM: u64 = 2;
const FILLER_STREAM: u64 = 3;

/// Bytes of random filler each stream keeps to cut values from.
const FILLER_EXTRA: usize = 4096;

/// One operation to perform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Read one record.
    Read {
        /// Key number (before hashing).
        keynum: u64,
    },
    /// Replace the value of an existing record.
    Update {
        /// Key number.
        keynum: u64,
    },
    /// Insert a new record.
    Insert {
        /// Key number (from the insert counter).
        keynum: u64,
    },
    /// Read `length` records in key order starting at the key.
    Scan {
        /// Key number of the start key.
        keynum: u64,
        /// Records to read.
        length: usize,
    },
    /// Read a record, then update it.
    ReadModifyWrite {
        /// Key number.
        keynum: u64,
    },
    /// Delete a record (micro benchmarks).
    Delete {
        /// Key number.
        keynum: u64,
    },
}

impl Operation {
    /// The operation's type.
    pub fn kind(&self) -> OpKind {
        match self {
            Operation::Read { .. } => OpKind::Read,
            Operation::Update { .. } => OpKind::Update,
            Operation::Insert { .. } => OpKind::Insert,
            Operation::Scan { .. } => OpKind::Scan,
            Operation::ReadModifyWrite { .. } => OpKind::ReadModifyWrite,
            Operation::Delete { .. } => OpKind::Delete,
        }
    }

    /// The key number the operation addresses.
    pub fn keynum(&self) -> u64 {
        match *self {
            Operation::Read { keynum }
            | Operation::Update { keynum }
            | Operation::Insert { keynum }
            | Operation::Scan { keynum, .. }
            | Operation::ReadModifyWrite { keynum }
            | Operation::Delete { keynum } => keynum,
        }
    }
}

/// Key numbers shared by the worker threads of one store: the load counter and the
/// acknowledged insert counter of the run phase.
#[derive(Debug)]
pub struct KeySpace {
    record_count: u64,
    load: CounterGenerator,
    inserts: AcknowledgedCounter,
    inserts_only: bool,
}

/// Key numbers a run-phase worker takes at once when the run only inserts.
const INSERT_BATCH: u64 = 64;

impl KeySpace {
    /// Key space for `record_count` loaded records (key numbers `0..record_count`).
    pub fn new(record_count: u64) -> Self {
        KeySpace {
            record_count,
            load: CounterGenerator::new(0),
            inserts: AcknowledgedCounter::new(record_count),
            inserts_only: false,
        }
    }

    /// A run phase that only inserts (no operation chooses an existing key): workers then take
    /// insert key numbers in batches and do not acknowledge them, as nothing reads the newest
    /// key — so the writers share no counter line on every insert (as in Viper's driver, whose
    /// threads insert disjoint key ranges). Each key is still inserted at most once; a worker
    /// may end the run holding numbers it did not use.
    pub fn inserts_only(mut self, yes: bool) -> Self {
        self.inserts_only = yes;
        self
    }

    /// Whether this run phase only inserts (see [`KeySpace::inserts_only`]).
    pub fn is_inserts_only(&self) -> bool {
        self.inserts_only
    }

    /// The next key number of the load phase, or `None` when all records are handed out.
    pub fn next_load_keynum(&self) -> Option<u64> {
        let k = self.load.next_value();
        (k < self.record_count).then_some(k)
    }

    /// The next (up to) `n` consecutive key numbers of the load phase for one thread; empty
    /// when all records are handed out. Load threads take their keys in batches so that they
    /// do not update one shared counter on every insert: each key is still loaded exactly once,
    /// but a thread inserts runs of consecutive key numbers rather than every other one. (Keys
    /// are hashed, so the store sees no order either way; nothing reads during the load.)
    pub fn next_load_batch(&self, n: u64) -> std::ops::Range<u64> {
        let r = self.load.next_values(n.max(1));
        r.start.min(self.record_count)..r.end.min(self.record_count)
    }

    /// The next key number for an insert in the run phase.
    pub fn next_insert_keynum(&self) -> u64 {
        self.inserts.next_value()
    }

    /// The next batch of insert key numbers for one worker of an insert-only run.
    fn next_insert_batch(&self) -> std::ops::Range<u64> {
        self.inserts.next_values(INSERT_BATCH)
    }

    /// Marks an insert as done, so readers may choose it (nothing to do in an insert-only
    /// run, where no reader exists).
    pub fn acknowledge_insert(&self, keynum: u64) {
        if !self.inserts_only {
            self.inserts.acknowledge(keynum);
        }
    }

    /// The newest key number readers may choose.
    pub fn last_keynum(&self) -> u64 {
        self.inserts.last_value()
    }
}

#[derive(Clone, Debug)]
enum KeyChooser {
    Uniform(UniformGenerator),
    Zipfian(ScrambledZipfianGenerator),
    Latest(SkewedLatestGenerator),
}

#[derive(Clone, Debug)]
enum LengthChooser {
    Fixed(u64),
    Uniform(UniformGenerator),
    Zipfian { min: u64, zipfian: ZipfianGenerator },
}

impl LengthChooser {
    fn for_size(size: &SizeSpec, theta: f64) -> Result<Self> {
        Ok(match *size {
            SizeSpec::Fixed(n) => LengthChooser::Fixed(n),
            SizeSpec::Uniform { min, max } => {
                LengthChooser::Uniform(UniformGenerator::new(min, max)?)
            }
            SizeSpec::Zipfian { min, max } => LengthChooser::Zipfian {
                min,
                zipfian: ZipfianGenerator::new(0, max - min, theta)?,
            },
        })
    }

    #[inline]
    fn next(&mut self, rng: &mut Rng) -> u64 {
        match self {
            LengthChooser::Fixed(n) => *n,
            LengthChooser::Uniform(u) => u.next_value(rng),
            LengthChooser::Zipfian { min, zipfian } => *min + zipfian.next_value(rng),
        }
    }
}

/// The generators of one phase, built once (zeta sums included) and cloned into each thread.
#[derive(Clone, Debug)]
pub struct WorkloadGenerators {
    key_size: usize,
    max_value: usize,
    operations: DiscreteGenerator<OpKind>,
    keys: KeyChooser,
    scan_lengths: LengthChooser,
    value_sizes: LengthChooser,
}

impl WorkloadGenerators {
    /// Generators for `spec`, sized for `total_ops` operations (warm-up included; YCSB sizes
    /// the zipfian key space for the inserts it expects).
    pub fn new(spec: &WorkloadSpec, total_ops: u64) -> Result<Self> {
        spec.validate()?;
        let mix = spec.mix();
        let share_sum: f64 = mix.iter().map(|(_, p)| p).sum();
        let insert_share = if spec.load_only {
            0.0
        } else {
            spec.insert_proportion / share_sum
        };
        let records = spec.record_count;
        let theta = spec.zipfian_theta;
        let keys = match spec.request_distribution {
            RequestDistribution::Uniform => {
                KeyChooser::Uniform(UniformGenerator::new(0, records - 1)?)
            }
            RequestDistribution::Zipfian => {
                let expected_new_keys = (total_ops as f64 * insert_share * 2.0) as u64;
                KeyChooser::Zipfian(ScrambledZipfianGenerator::new(
                    0,
                    records.saturating_add(expected_new_keys),
                    theta,
                )?)
            }
            RequestDistribution::Latest => KeyChooser::Latest(
                SkewedLatestGenerator::new(records - 1, theta)?.with_eta_mode(spec.zipfian_eta),
            ),
        };
        let scan_lengths = match spec.scan_length_distribution {
            ScanLengthDistribution::Uniform => {
                LengthChooser::Uniform(UniformGenerator::new(1, spec.max_scan_length.max(1))?)
            }
            ScanLengthDistribution::Zipfian => LengthChooser::Zipfian {
                min: 1,
                zipfian: ZipfianGenerator::new(0, spec.max_scan_length.max(1) - 1, theta)?,
            },
        };
        Ok(WorkloadGenerators {
            key_size: spec.key_size,
            max_value: usize::try_from(spec.value_size.max()).unwrap_or(usize::MAX),
            operations: DiscreteGenerator::new(mix.iter().map(|&(k, p)| (p, k)))?,
            keys,
            scan_lengths,
            value_sizes: LengthChooser::for_size(&spec.value_size, theta)?,
        })
    }

    /// The operation stream of worker `thread` in `stream` (run or load) for `seed`.
    pub fn stream<'a>(
        &self,
        seed: u64,
        stream: u64,
        thread: u64,
        keyspace: &'a KeySpace,
    ) -> OperationStream<'a> {
        let mut filler_rng = Rng::derive(seed, FILLER_STREAM, thread);
        let mut filler = vec![0u8; VALUE_HEADER_LEN + self.max_value + FILLER_EXTRA];
        filler_rng.fill_bytes(filler.get_mut(VALUE_HEADER_LEN..).unwrap_or(&mut []));
        OperationStream {
            gens: self.clone(),
            op_rng: Rng::derive(seed, stream << 8, thread),
            key_rng: Rng::derive(seed, (stream << 8) | 1, thread),
            value_rng: Rng::derive(seed, (stream << 8) | 2, thread),
            keyspace,
            filler,
            insert_batch: 0..0,
        }
    }
}

/// One worker thread's sequence of operations.
#[derive(Debug)]
pub struct OperationStream<'a> {
    gens: WorkloadGenerators,
    /// Operation types and scan lengths.
    op_rng: Rng,
    /// Key choice (may redraw a data-dependent number of times; kept apart so that the
    /// operation types do not depend on it).
    key_rng: Rng,
    /// Value sizes and filler offsets.
    value_rng: Rng,
    keyspace: &'a KeySpace,
    /// Room for a value header, then the random filler values are cut from.
    filler: Vec<u8>,
    /// Insert key numbers taken but not used yet (insert-only runs).
    insert_batch: std::ops::Range<u64>,
}

impl OperationStream<'_> {
    /// Key size in bytes.
    pub fn key_size(&self) -> usize {
        self.gens.key_size
    }

    /// The next operation of the run phase. Inserts take a fresh key number; the caller must
    /// [`KeySpace::acknowledge_insert`] it once the insert is done.
    pub fn next_operation(&mut self) -> Operation {
        match self.gens.operations.next_value(&mut self.op_rng) {
            OpKind::Read => Operation::Read {
                keynum: self.next_keynum(),
            },
            OpKind::Update => Operation::Update {
                keynum: self.next_keynum(),
            },
            OpKind::Insert => Operation::Insert {
                keynum: self.next_insert_keynum(),
            },
            OpKind::Scan => {
                let keynum = self.next_keynum();
                let length = self.gens.scan_lengths.next(&mut self.op_rng);
                Operation::Scan {
                    keynum,
                    length: usize::try_from(length).unwrap_or(usize::MAX),
                }
            }
            OpKind::ReadModifyWrite => Operation::ReadModifyWrite {
                keynum: self.next_keynum(),
            },
            OpKind::Delete => Operation::Delete {
                keynum: self.next_keynum(),
            },
        }
    }

    /// A fresh key number for an insert: from this worker's batch in an insert-only run,
    /// else from the shared acknowledged counter.
    fn next_insert_keynum(&mut self) -> u64 {
        if !self.keyspace.is_inserts_only() {
            return self.keyspace.next_insert_keynum();
        }
        if self.insert_batch.is_empty() {
            self.insert_batch = self.keyspace.next_insert_batch();
        }
        let k = self.insert_batch.start;
        self.insert_batch.start += 1;
        k
    }

    /// YCSB `nextKeynum`: draw until the key number has been inserted.
    fn next_keynum(&mut self) -> u64 {
        let last = self.keyspace.last_keynum();
        let mut k = 0;
        for _ in 0..1_000 {
            k = match &mut self.gens.keys {
                KeyChooser::Uniform(g) => g.next_value(&mut self.key_rng),
                KeyChooser::Zipfian(g) => g.next_value(&mut self.key_rng),
                KeyChooser::Latest(g) => g.next_value(last, &mut self.key_rng),
            };
            if k <= last {
                return k;
            }
        }
        // Only reachable with a key space far larger than the records: fold instead of
        // spinning forever.
        k % (last + 1)
    }

    /// Writes a value for `key` into `out`: size from the workload's value size distribution,
    /// the key's fingerprint, then random filler cut from this stream's buffer.
    pub fn build_value(&mut self, key: &[u8], out: &mut Vec<u8>) {
        self.build_value_with(key_fingerprint(key), out);
    }

    /// [`build_value`](Self::build_value) for a key whose fingerprint is `fingerprint` (from
    /// [`KeyBuilder::fingerprint`](crate::workload::keys::KeyBuilder::fingerprint)): the same
    /// value.
    pub fn build_value_with(&mut self, fingerprint: [u8; VALUE_HEADER_LEN], out: &mut Vec<u8>) {
        let (len, offset) = self.next_value_cut();
        let filler = self.filler_bytes().get(offset..).unwrap_or(&[]);
        build_value_with_fingerprint(fingerprint, len, filler, out);
    }

    /// Draws the next value exactly as [`build_value_with`](Self::build_value_with) does and
    /// passes it to `f`, without copying it: the value is the fingerprint followed by a cut of
    /// the filler, so the fingerprint is written over the bytes just before the cut (the
    /// buffer keeps room for it before the filler), the value is lent from the buffer, and
    /// those bytes are put back when `f` returns.
    #[inline]
    pub fn with_value<R>(
        &mut self,
        fingerprint: [u8; VALUE_HEADER_LEN],
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        let (len, offset) = self.next_value_cut();
        // The value is filler[offset..offset + len]: the fingerprint written over the filler's
        // bytes there, then the filler from `offset` on (after the header room).
        let end = offset + len;
        let saved = match self.filler.get_mut(offset..end) {
            Some(value) if len >= VALUE_HEADER_LEN => {
                let (under, _) = value.split_at_mut(VALUE_HEADER_LEN);
                let saved: [u8; VALUE_HEADER_LEN] = (&*under).try_into().unwrap_or_default();
                under.copy_from_slice(&fingerprint);
                saved
            }
            _ => {
                // Values shorter than a fingerprint (which workloads refuse), or longer than
                // the filler (which the stream never draws): built apart.
                let mut value = Vec::with_capacity(len);
                let filler = self.filler_bytes().get(offset..).unwrap_or(&[]);
                build_value_with_fingerprint(fingerprint, len, filler, &mut value);
                return f(&value);
            }
        };
        let r = f(self.filler.get(offset..end).unwrap_or(&[]));
        if let Some(under) = self.filler.get_mut(offset..offset + VALUE_HEADER_LEN) {
            under.copy_from_slice(&saved);
        }
        r
    }

    /// The random filler (after the header room).
    fn filler_bytes(&self) -> &[u8] {
        self.filler.get(VALUE_HEADER_LEN..).unwrap_or(&[])
    }

    /// The next value's length and where in the filler its body is cut.
    #[inline]
    fn next_value_cut(&mut self) -> (usize, usize) {
        let len = usize::try_from(self.gens.value_sizes.next(&mut self.value_rng)).unwrap_or(0);
        let spare = self.filler_bytes().len().saturating_sub(len);
        let offset = usize::try_from(self.value_rng.below(spare as u64 + 1)).unwrap_or(0);
        (len, offset)
    }
}
