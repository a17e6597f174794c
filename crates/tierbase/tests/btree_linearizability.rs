//! Linearizability of the B+-tree store under concurrency: worker threads hammer a handful of
//! shared hot keys with puts, deletes, gets, `update`, `Store::modify` (update-if-present, put, and
//! delete-if-present decisions) and two-key write batches, every call is recorded with its
//! invocation and response times, and the history is checked against the sequential model of
//! a key (`tierbase::testing::linearizability`). Every written value is unique (thread and op
//! counter, repeated through the value), so a torn or stale value is a violation too.
//!
//! The hot keys sit between a few thousand pre-loaded "stable" keys that nobody writes; a
//! scanner thread runs range scans (forward and backward, random bounds) during the whole
//! round and checks that keys come in strict order, that every stable key inside the bounds is
//! returned with its value, and that nothing outside the bounds is.
//!
//! Variants: a 16-frame pool (constant eviction under the workers and the scanner), filler
//! keys right next to each hot key written with values near `max_inline` (some in overflow pages) and deleted again (so
//! leaves around the hot keys split and merge all the time, and the root grows and shrinks),
//! and a thread taking checkpoints in a loop. Each round ends with `verify()`.
//!
//! Rounds: `TIERBASE_LIN_ROUNDS=n` (default per variant below).

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use common::{scratch_dir, stat};
use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::buffer::nvm::Admission;
use tierbase::buffer::{BufferPool, PoolOptions, WalRule};
use tierbase::device::{BlockCrashConfig, BlockDevice, Durability, SimPower};
use tierbase::testing::TestRng as Rng;
use tierbase::testing::linearizability::{
    self, Clock, Decision, Op, Operation, Outcome, check, delete_op, get_op, modify_op, put_op,
};

/// Worker threads (the checkpointer and the scanner come on top). More than the cores of a
/// small machine on purpose: a worker preempted inside a store call leaves its race window
/// open while the others run.
const THREADS: usize = 4;
/// Shared hot keys.
const KEYS: usize = 4;
/// Filler keys next to each hot key.
const FILLERS: usize = 6;

#[derive(Clone, Copy, Debug)]
struct Variant {
    page_size: usize,
    /// Frames of the buffer pool.
    frames: u64,
    /// Pre-loaded keys that no one writes (the scanner checks them).
    stable: usize,
    /// Share (per cent) of worker calls that put or delete a filler key.
    filler_percent: u64,
    /// Values of filler (and a share of hot) writes near `max_inline`, some beyond it.
    large_values: bool,
    /// A thread checkpointing in a loop.
    checkpointer: bool,
    /// Bytes of prefix every key shares: long separators, so inner pages hold few and split
    /// and merge too.
    prefix: usize,
    ops_per_thread: usize,
    /// ACE write-back batch of the pool (1: plain Clock).
    write_back_batch: usize,
    /// Slots of an NVM tier that admits every page (0: no NVM tier).
    nvm_slots: u64,
    /// The NVM-direct design (pages changed in place in NVM; `frames` unused).
    direct: bool,
    /// Point reads pass the inner pages without latches (`BTreeOptions::optimistic_reads`).
    optimistic: bool,
    /// Inner pages' references to children in DRAM are swizzled (`BTreeOptions::swizzle`).
    swizzle: bool,
    rounds: u64,
}

/// A pool that holds the whole tree (no eviction): the 16-frame pool runs into two bugs (see
/// `small_pool_evicts_constantly`).
const BASE: Variant = Variant {
    page_size: 4096,
    frames: 4096,
    stable: 1500,
    filler_percent: 0,
    large_values: false,
    checkpointer: false,
    prefix: 0,
    ops_per_thread: 2500,
    write_back_batch: 1,
    nvm_slots: 0,
    direct: false,
    optimistic: false,
    swizzle: true,
    rounds: 16,
};

/// The key space, in byte order: stable keys `k<prefix><5 digits>` every 10, hot keys
/// `k<prefix><n>h` and their fillers `k<prefix><n>f<m>` right after a stable key in four places
/// spread over the range.
struct Keys {
    stable: Vec<Vec<u8>>,
    hot: Vec<Vec<u8>>,
    /// Fillers of hot key `i` at `fillers[i]`.
    fillers: Vec<Vec<Vec<u8>>>,
}

fn keys(v: &Variant) -> Keys {
    let p = "p".repeat(v.prefix);
    let stable = (0..v.stable)
        .map(|i| format!("k{p}{:05}", i * 10).into_bytes())
        .collect();
    let base = |j: usize| (j * v.stable / KEYS + v.stable / (2 * KEYS)) * 10;
    let hot = (0..KEYS)
        .map(|j| format!("k{p}{:05}h", base(j)).into_bytes())
        .collect();
    let fillers = (0..KEYS)
        .map(|j| {
            (0..FILLERS)
                .map(|m| format!("k{p}{:05}f{m}", base(j) + m % 2).into_bytes())
                .collect()
        })
        .collect();
    Keys {
        stable,
        hot,
        fillers,
    }
}

fn stable_value(i: usize) -> Vec<u8> {
    let unit = format!("stable-{i}|").into_bytes();
    unit.iter().copied().cycle().take(40 + i % 200).collect()
}

/// A unique value: "<thread>.<counter>|" repeated to a length from a few bytes to near
/// `max_inline` (the longest value kept in a leaf), and sometimes past it (overflow pages).
fn value(
    v: &Variant,
    max_inline: usize,
    rng: &mut Rng,
    thread: usize,
    n: usize,
    big: bool,
) -> Vec<u8> {
    let unit = format!("{thread}.{n:06}|").into_bytes();
    let len = if big && v.large_values {
        if rng.below(8) == 0 {
            // Past the leaf: a chain of one to three overflow pages.
            max_inline + 1 + rng.below(3 * v.page_size as u64) as usize
        } else {
            max_inline - rng.below(64) as usize
        }
    } else {
        unit.len() + rng.below(100) as usize
    };
    unit.iter().copied().cycle().take(len).collect()
}

#[allow(clippy::too_many_arguments)]
fn worker(
    v: &Variant,
    store: &BTreeStore,
    clock: &Clock,
    start: &Barrier,
    keys: &Keys,
    thread: usize,
    seed: u64,
) -> Vec<Operation> {
    let max_inline = store.limits().max_inline;
    let mut rec = clock.recorder(thread);
    let mut rng = Rng(seed ^ ((thread as u64 + 1) << 48));
    start.wait();
    for n in 0..v.ops_per_thread {
        let j = rng.below(KEYS as u64) as usize;
        if rng.below(100) < v.filler_percent {
            let f = &keys.fillers[j][rng.below(FILLERS as u64) as usize];
            if rng.below(100) < 55 {
                let val = value(v, max_inline, &mut rng, thread, n, true);
                rec.record(f, || put_op(store, f, val));
            } else {
                rec.record(f, || delete_op(store, f));
            }
            continue;
        }
        let k = &keys.hot[j];
        let big = rng.below(4) == 0;
        let val = value(v, max_inline, &mut rng, thread, n, big);
        match rng.below(100) {
            0..25 => rec.record(k, || put_op(store, k, val)),
            25..37 => rec.record(k, || delete_op(store, k)),
            37..62 => rec.record(k, || get_op(store, k)),
            // Update-if-present (SET XX), through `modify` and through `update` (a leaf
            // writer's, beside other writers, when the value fits the leaf).
            62..67 => rec.record(k, || modify_op(store, k, Decision::SetIfPresent(val))),
            67..72 => rec.record(k, || {
                let existed = store
                    .update(k, &val)
                    .unwrap_or_else(|e| panic!("update: {e}"));
                Op::Update {
                    value: val,
                    existed,
                }
            }),
            72..80 => rec.record(k, || modify_op(store, k, Decision::Put(val))),
            80..86 => rec.record(k, || modify_op(store, k, Decision::DeleteIfPresent)),
            _ => {
                // A batch: the hot key and one of its fillers (each key's call is recorded
                // with the batch's interval).
                let f = &keys.fillers[j][rng.below(FILLERS as u64) as usize];
                let fval = value(v, max_inline, &mut rng, thread, n + 1_000_000, true);
                let hot_put = rng.below(3) != 0;
                let filler_put = rng.below(2) == 0;
                let ck = rec.invoke(k);
                let cf = rec.invoke(f);
                let existed = store
                    .write_batch(&[
                        (k.as_slice(), hot_put.then_some(val.as_slice())),
                        (f.as_slice(), filler_put.then_some(fval.as_slice())),
                    ])
                    .unwrap_or_else(|e| panic!("write_batch: {e}"));
                let op = |put: bool, value: Vec<u8>, existed: bool| {
                    if put {
                        Op::Put {
                            value,
                            was_new: !existed,
                        }
                    } else {
                        Op::Delete { existed }
                    }
                };
                rec.respond(ck, op(hot_put, val, existed[0]));
                rec.respond(cf, op(filler_put, fval, existed[1]));
            }
        }
    }
    rec.into_operations()
}

/// Range scans until `done`: strict order, every stable key in the bounds with its value,
/// nothing outside the bounds. Returns the number of scans.
fn scanner(store: &BTreeStore, keys: &Keys, start: &Barrier, done: &AtomicBool, seed: u64) -> u64 {
    let mut rng = Rng(seed ^ 0x5ca7);
    let stable: BTreeMap<&[u8], Vec<u8>> = keys
        .stable
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_slice(), stable_value(i)))
        .collect();
    let n = keys.stable.len() as u64;
    let mut scans = 0;
    start.wait();
    loop {
        let a = rng.below(n) as usize;
        let b = (a + 1 + rng.below(n / 3) as usize).min(keys.stable.len() - 1);
        let pick = |rng: &mut Rng, k: &[u8]| match rng.below(3) {
            0 => Bound::Included(k.to_vec()),
            1 => Bound::Excluded(k.to_vec()),
            _ => Bound::Unbounded,
        };
        let from = pick(&mut rng, &keys.stable[a]);
        let to = pick(&mut rng, &keys.stable[b]);
        let reverse = rng.below(2) == 0;
        // Every other scan says how many keys it expects (often wrong: it takes them all).
        let hint = (rng.below(2) == 0).then(|| rng.below(40) as usize);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut bad_value = None;
        let visit = |k: &[u8], v: &[u8]| {
            if let Some(want) = stable.get(k)
                && want.as_slice() != v
            {
                bad_value = Some(k.to_vec());
            }
            got.push(k.to_vec());
            true
        };
        match hint {
            Some(h) => store.range_expecting(rb(&from), rb(&to), reverse, h, visit),
            None => store.range(rb(&from), rb(&to), reverse, visit),
        }
        .unwrap_or_else(|e| panic!("range: {e}"));
        let ctx = format!(
            "scan {from:?}..{to:?} reverse {reverse} hint {hint:?}",
            from = from
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            to = to.as_ref().map(|k| String::from_utf8_lossy(k).into_owned())
        );
        assert!(
            bad_value.is_none(),
            "{ctx}: stable key {bad_value:?} with a wrong value"
        );
        if reverse {
            got.reverse();
        }
        if let Some(w) = got.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "{ctx}: keys out of order or repeated: {:?} then {:?}",
                String::from_utf8_lossy(&w[0]),
                String::from_utf8_lossy(&w[1])
            );
        }
        let inside = |k: &[u8]| {
            (match &from {
                Bound::Included(s) => k >= s.as_slice(),
                Bound::Excluded(s) => k > s.as_slice(),
                Bound::Unbounded => true,
            }) && (match &to {
                Bound::Included(e) => k <= e.as_slice(),
                Bound::Excluded(e) => k < e.as_slice(),
                Bound::Unbounded => true,
            })
        };
        if let Some(k) = got.iter().find(|k| !inside(k)) {
            panic!(
                "{ctx}: key {:?} outside the bounds",
                String::from_utf8_lossy(k)
            );
        }
        let mut at = 0;
        for k in stable.keys().filter(|k| inside(k)) {
            while at < got.len() && got[at].as_slice() < *k {
                at += 1;
            }
            assert!(
                at < got.len() && got[at].as_slice() == *k,
                "{ctx}: stable key {:?} missing ({} keys returned)",
                String::from_utf8_lossy(k),
                got.len()
            );
        }
        scans += 1;
        if done.load(Ordering::Acquire) {
            return scans;
        }
    }
}

fn rb(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What a round saw besides the history.
#[derive(Debug, Default)]
struct Figures {
    scans: u64,
    checkpoints: u64,
    evictions: u64,
    /// Descents writers made before taking the writer mutex.
    warmed: u64,
    height: u64,
    nvm_hits: u64,
    nvm_spills: u64,
    nvm_line_loads: u64,
    mini_loads: u64,
    /// Point reads that reached their leaf without latching the inner pages.
    optimistic: u64,
    /// Fixes that followed a swizzled reference.
    swizzled_fixes: u64,
    /// Swizzled references given back their page id (evictions, changes of the parent).
    unswizzles: u64,
}

/// One round on a fresh store: the workers' history plus a final read of every key.
fn round(v: &Variant, seed: u64) -> (Outcome, Figures) {
    let dir = scratch_dir();
    let opts = BTreeOptions::default()
        .page_size(v.page_size)
        .dram_bytes(v.frames * v.page_size as u64)
        .durability(Durability::Immediate)
        .write_back_batch(v.write_back_batch)
        .optimistic_reads(v.optimistic)
        .swizzle(v.swizzle);
    let opts = if v.nvm_slots > 0 {
        opts.nvm_bytes(8192 + v.nvm_slots * (v.page_size as u64 + 8))
            .nvm_admission(Admission::All)
            .poison_lines(true)
            // Leaves read back from NVM go to full frames by lines in odd rounds, to mini
            // pages first in even ones.
            .mini_page_percent(if seed.is_multiple_of(2) { 25 } else { 0 })
    } else if v.direct {
        opts.nvm_bytes(32 << 20).nvm_direct(true)
    } else {
        opts
    };
    let store = BTreeStore::create(dir.path().join("lin"), &opts).unwrap();
    let keys = keys(v);
    for (i, k) in keys.stable.iter().enumerate() {
        store.put(k, &stable_value(i)).unwrap();
    }
    let clock = Clock::new();
    let start = Barrier::new(THREADS + 1 + usize::from(v.checkpointer));
    let done = AtomicBool::new(false);
    let checkpoints = AtomicU64::new(0);
    let mut figures = Figures::default();
    let mut history: Vec<Operation> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, clock, start, keys) = (&store, &clock, &start, &keys);
                s.spawn(move || worker(v, store, clock, start, keys, t, seed))
            })
            .collect();
        let scan = {
            let (store, keys, start, done) = (&store, &keys, &start, &done);
            s.spawn(move || scanner(store, keys, start, done, seed))
        };
        if v.checkpointer {
            let (store, start, done, checkpoints) = (&store, &start, &done, &checkpoints);
            s.spawn(move || {
                start.wait();
                loop {
                    store
                        .checkpoint()
                        .unwrap_or_else(|e| panic!("checkpoint: {e}"));
                    checkpoints.fetch_add(1, Ordering::Relaxed);
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                }
            });
        }
        // Set `done` however the workers end (a panic too), so the scanner and the
        // checkpointer stop and the panic reaches the test.
        let stop = StopOnDrop(&done);
        let history = workers
            .into_iter()
            .flat_map(linearizability::join)
            .collect();
        drop(stop);
        figures.scans = linearizability::join(scan);
        history
    });
    figures.checkpoints = checkpoints.load(Ordering::Relaxed);
    let mut rec = clock.recorder(THREADS);
    let finals = keys.hot.iter().chain(keys.fillers.iter().flatten());
    rec.record_gets(finals.map(Vec::as_slice), |k| store.get(k).unwrap());
    history.extend(rec.into_operations());
    let (_, n) = store
        .verify()
        .unwrap_or_else(|e| panic!("verify after the round: {e}"));
    assert_eq!(n, store.len());
    for (i, k) in keys.stable.iter().enumerate() {
        assert_eq!(store.get(k).unwrap(), Some(stable_value(i)), "stable key");
    }
    figures.evictions = stat(&store, "evictions");
    figures.warmed = stat(&store, "writer_early_descents");
    figures.height = stat(&store, "height");
    figures.optimistic = stat(&store, "optimistic_descents");
    figures.swizzled_fixes = stat(&store, "swizzled_fixes");
    figures.unswizzles = stat(&store, "unswizzles");
    if v.nvm_slots > 0 {
        figures.nvm_hits = stat(&store, "nvm_hits");
        figures.nvm_spills = stat(&store, "nvm_spills");
        figures.nvm_line_loads = stat(&store, "nvm_line_loads");
        figures.mini_loads = stat(&store, "mini_loads");
    }
    store.close().unwrap();
    (check(&history), figures)
}

/// Runs `v`'s rounds, one variant at a time (the races need the threads to really run side by
/// side, not against another variant's).
fn run(name: &str, v: Variant) -> Vec<Figures> {
    let mut out = Vec::new();
    linearizability::run_rounds(v.rounds, 0xb7ee_0000, |r, seed| {
        let (outcome, figures) = round(&v, seed);
        assert!(
            outcome.is_linearizable(),
            "{name}, round {r} (seed {seed:#x}, {v:?}):\n{outcome}"
        );
        assert!(
            figures.scans > 0,
            "{name}: the scanner never finished a scan"
        );
        assert_eq!(
            figures.optimistic > 0,
            v.optimistic && !v.direct,
            "{name}: optimistic descents {figures:?}"
        );
        assert_eq!(
            figures.swizzled_fixes > 0,
            v.swizzle && !v.direct,
            "{name}: swizzled fixes {figures:?}"
        );
        if std::env::var("DBG").is_ok() {
            eprintln!("DBG {name} {figures:?}");
        }
        out.push(figures);
    });
    out
}

#[test]
fn hot_keys_are_linearizable() {
    run("hot keys among stable keys", BASE);
}

/// A 16-frame pool (the smallest the store allows) under four workers, the scanner and the
/// checkpointer: pages are evicted and re-read all the time, with splits and merges.
///
/// Fails today in one of two ways within a few rounds:
/// - a worker's `put`, `delete` or `get` (or the scanner's `range`) returns
///   `Error::StoreFull` ("buffer pool: every frame is fixed or holds changes of an unfinished
///   batch") although each call holds at most a few pages: `BufferPool::victim` gives up after
///   one Clock sweep of `4 × frames` tries while other threads hold frames only for a moment
///   (latch coupling, loads in flight). A writer that gets it marks the store failed
///   (`Tree::fail`), so every later write and checkpoint is `Error::ReadOnly` until a reopen,
///   although nothing was half-applied;
/// - a hang: a frame mapped under two page ids (`buffer_pool_never_maps_more_pages_than_frames`)
///   makes a reader spin in `BufferPool::fix_shared` while holding a parent's shared latch,
///   and the writer, waiting for that latch under the writer mutex, blocks every other writer.
///
/// Run: `cargo test -p tierbase --release --test btree_linearizability -- --ignored
/// small_pool` (the workers' panics name the error; a hang shows as a test running for over
/// 60 s).
#[test]
fn nvm_direct_hot_keys_are_linearizable() {
    // Readers search pages in NVM while the writer changes them in place (under its undo log)
    // and the checkpointer runs; long shared prefixes make inner pages split and merge.
    let v = Variant {
        filler_percent: 20,
        large_values: true,
        checkpointer: true,
        prefix: 100,
        direct: true,
        optimistic: true, // ignored: NVM direct couples latches
        rounds: 8,
        ..BASE
    };
    for f in run("NVM direct", v) {
        assert!(f.height >= 3, "inner pages never split: {f:?}");
    }
}

#[test]
fn small_pool_evicts_constantly() {
    let v = Variant {
        frames: 64,          // two-key batches of a 3-level tree must fit half the pool
        write_back_batch: 4, // evictions write neighbours ahead while checkpoints copy
        filler_percent: 20,
        large_values: true,
        checkpointer: true,
        prefix: 100,
        optimistic: true, // reads of inner pages race their eviction and reloading
        ..BASE
    };
    for f in run("16-frame pool", v) {
        assert!(f.evictions > 0, "no eviction: {f:?}");
        // Swizzled children were evicted (their parents' references given back first), or
        // their parents changed, racing the readers that follow them.
        assert!(f.unswizzles > 0, "nothing unswizzled: {f:?}");
        // Writers read their leaves in before the writer mutex (contended, and the data
        // outgrew the pool), racing the other writers, the scanner and the checkpointer.
        assert!(f.warmed > 0, "no writer read its leaves in first: {f:?}");
        assert!(f.height >= 3, "inner pages never split: {f:?}");
    }
}

/// The same small pool over an NVM tier of 48 slots that admits every page: misses are served
/// from NVM while other threads write pages back into it, and NVM Clock spills to the page
/// file, all under the workers, the scanner and the checkpointer.
#[test]
fn small_pool_over_an_nvm_tier() {
    let v = Variant {
        frames: 64,
        write_back_batch: 4,
        filler_percent: 20,
        large_values: true,
        checkpointer: true,
        prefix: 100,
        nvm_slots: 48,
        optimistic: true,
        rounds: 8,
        ..BASE
    };
    let figures = run("64-frame pool over 48 NVM slots", v);
    assert!(
        figures.iter().any(|f| f.nvm_hits > 0),
        "no NVM hit: {figures:?}"
    );
    assert!(
        figures.iter().any(|f| f.nvm_spills > 0),
        "no NVM spill: {figures:?}"
    );
    // Leaves came back from NVM a cache line at a time (poisoned until loaded), racing the
    // writers that make them whole.
    assert!(
        figures.iter().any(|f| f.nvm_line_loads > 0),
        "no leaf was loaded by lines: {figures:?}"
    );
    assert!(
        figures.iter().any(|f| f.mini_loads > 0),
        "no leaf went to a mini page: {figures:?}"
    );
}

#[test]
fn splits_and_merges_around_the_hot_keys() {
    // Gets pass the inner pages optimistically, racing the splits and merges.
    let v = Variant {
        filler_percent: 35,
        large_values: true,
        stable: 600,
        prefix: 200,
        optimistic: true,
        ..BASE
    };
    for f in run("fillers with values near max_inline", v) {
        assert!(f.height >= 3, "inner pages never split: {f:?}");
    }
    // Larger pages: longer leaves, fewer of them; values near 3 KiB. Latch coupling through
    // page ids only (no swizzling).
    let v = Variant {
        page_size: 16384,
        frames: 1024,
        ops_per_thread: 1500,
        prefix: 800,
        swizzle: false,
        ..v
    };
    run("fillers, 16 KiB pages", v);
}

#[test]
fn concurrent_checkpoints() {
    let v = Variant {
        checkpointer: true,
        filler_percent: 20,
        large_values: true,
        stable: 800,
        prefix: 100,
        ..BASE
    };
    let figures = run("checkpoints in a loop", v);
    for f in &figures {
        assert!(f.checkpoints > 0, "{f:?}");
    }
}

// ----- the buffer pool under the same load ----------------------------------------------------

/// The log as a pool that never holds unlogged changes sees it.
struct NoLog;

impl WalRule for NoLog {
    fn committed_lsn(&self) -> u64 {
        u64::MAX
    }
    fn flush_to(&self, _lsn: u64) -> tierbase::Result<()> {
        Ok(())
    }
}

/// Threads fixing pages of a file four times larger than a 16-frame pool, started together
/// on a fresh pool (many times), so that they drain the free list at once and then evict, and
/// often load the same page at once. A frame holds one page, so the page table can never map
/// more pages than there are frames; when it does, a page id is mapped to a frame that holds
/// another page, and every later fix of that page spins forever in `fix_shared`'s retry loop
/// (the hang the small-pool variants above run into: the scanner spins there holding a shared
/// latch the writer waits for). The check is that invariant, so the test fails rather than
/// hangs.
///
/// Cause: `victim` pops a frame from the free list and only then latches it; meanwhile another
/// thread that found the list empty sweeps Clock and takes the same frame (unlatched, page id
/// `NO_PAGE`). The same holds for a frame `load` pushes back on the free list (after losing
/// the race to map a page, or a failed read). The thread that latches it second overwrites its
/// page id without removing the first thread's mapping.
#[test]
fn buffer_pool_never_maps_more_pages_than_frames() {
    const PAGE: usize = 4096;
    const PAGES: u64 = 64;
    const WORKERS: usize = 4;
    const ROUNDS: u64 = 10_000;
    const FIXES: u64 = 64;
    let power = SimPower::new(BlockCrashConfig::default());
    for round in 0..ROUNDS {
        let device =
            BlockDevice::simulated(&format!("pool-{round}"), PAGES * PAGE as u64, 4096, &power)
                .unwrap();
        let pool = Arc::new(
            BufferPool::new(
                device,
                PoolOptions {
                    page_size: PAGE,
                    dram_bytes: 16 * PAGE as u64,
                    check: |_, _| Ok(()),
                },
                Arc::new(NoLog),
            )
            .unwrap(),
        );
        let frames = pool.frames();
        assert_eq!(frames, 16);
        let finished = Arc::new(AtomicU64::new(0));
        let progress = Arc::new(AtomicU64::new(0));
        let errors: Arc<Mutex<Option<String>>> = Arc::default();
        let start = Arc::new(Barrier::new(WORKERS));
        for t in 0..WORKERS {
            // Detached: a worker caught in the spin never returns, and the test must end.
            let (pool, finished, progress, errors, start) = (
                pool.clone(),
                finished.clone(),
                progress.clone(),
                errors.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(round << 8 | t as u64);
                start.wait();
                for _ in 0..FIXES {
                    // Latch coupling as in the tree's descents: an "inner" page (0..8) held
                    // while a "leaf" (8..PAGES) under it is fixed; a hot quarter of the leaves
                    // half of the time, so that threads often miss on the same page.
                    let leaf = 8 + if rng.below(2) == 0 {
                        rng.below((PAGES - 8) / 4)
                    } else {
                        rng.below(PAGES - 8)
                    };
                    let fixed = pool
                        .fix_shared(leaf % 8)
                        .and_then(|parent| pool.fix_shared(leaf).map(|child| (parent, child)));
                    if let Err(e) = fixed {
                        *errors.lock().unwrap() = Some(e.to_string());
                        break;
                    }
                    progress.fetch_add(1, Ordering::AcqRel);
                }
                finished.fetch_add(1, Ordering::AcqRel);
            });
        }
        // `resident_pages` counts shard by shard, so an entry moved by an eviction during the
        // count may be counted twice; a frame mapped twice stays so for good (and the workers
        // that fix its lost page stop moving anything). Hence many over-counts in a row.
        // A stale mapping may also sit next to a frame that is momentarily unmapped (the count
        // is then not over): a worker spinning on its page makes no progress while the others
        // finish, which 50 million looks at the counter without a change also tell.
        let mut over_in_a_row = 0;
        let (mut last, mut still) = (0, 0u64);
        while finished.load(Ordering::Acquire) < WORKERS as u64 {
            let now = progress.load(Ordering::Acquire);
            if now == last {
                still += 1;
                assert!(
                    still < 50_000_000,
                    "round {round}: {} of {WORKERS} workers are stuck in a fix (a frame mapped \
                     twice: its lost page can never be fixed again)",
                    WORKERS as u64 - finished.load(Ordering::Acquire)
                );
            } else {
                (last, still) = (now, 0);
            }
            let mapped = pool.resident_pages();
            if mapped > frames {
                over_in_a_row += 1;
                assert!(
                    over_in_a_row < 10_000,
                    "round {round}: the page table maps {mapped} pages to {frames} frames: a \
                     frame is mapped twice"
                );
            } else {
                over_in_a_row = 0;
            }
            std::thread::yield_now();
        }
        if let Some(e) = errors.lock().unwrap().take() {
            panic!("round {round}: a fix failed: {e}");
        }
        // Quiescent: the count is exact.
        let mapped = pool.resident_pages();
        assert!(
            mapped <= frames,
            "round {round}: the page table maps {mapped} pages to {frames} frames: a frame is \
             mapped twice"
        );
    }
}
