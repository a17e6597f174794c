//! The measurement behind the KV store's hand-written index (docs/INDEX.md): tierbase's
//! CCEH-style `OffsetIndex` against `dashmap` (the usual well-kept concurrent map), on the
//! operations the store performs — insert, get (hit), get (miss), replace — with 1 and 2
//! threads, and the heap each one holds per entry, counted by a tracking allocator.
//!
//! Run: `cargo run --release -p tierbase --example index_compare -- [entries] [repetitions]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use dashmap::DashMap;
use tierbase::kv::OffsetIndex;

struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

trait Map: Sync {
    fn name(&self) -> &'static str;
    fn upsert(&self, k: u64, v: u64) -> Option<u64>;
    fn get(&self, k: u64) -> Option<u64>;
}

// Values are `i << 1 | version` for the key `key(i)`; the CCEH index keeps only a tag of the
// key, so (like the store, which reads the key from the record) it confirms candidates.
fn owner(v: u64) -> u64 {
    key(v >> 1)
}

impl Map for OffsetIndex {
    fn name(&self) -> &'static str {
        "tierbase CCEH"
    }
    fn upsert(&self, k: u64, v: u64) -> Option<u64> {
        OffsetIndex::upsert(self, k, v, &mut |o| owner(o) == k)
    }
    fn get(&self, k: u64) -> Option<u64> {
        OffsetIndex::get(self, k, &mut |o| owner(o) == k)
    }
}

struct Dash(DashMap<u64, u64>);

impl Map for Dash {
    fn name(&self) -> &'static str {
        "dashmap 6"
    }
    fn upsert(&self, k: u64, v: u64) -> Option<u64> {
        self.0.insert(k, v)
    }
    fn get(&self, k: u64) -> Option<u64> {
        self.0.get(&k).map(|r| *r)
    }
}

/// Fingerprint-like keys: well mixed, as the store's 64-bit key hashes are.
fn key(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn timed(threads: u64, n: u64, f: impl Fn(u64) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                let mut i = t;
                while i < n {
                    f(i);
                    i += threads;
                }
            });
        }
    });
    n as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Row {
    insert: f64,
    get_hit: f64,
    get_miss: f64,
    replace: f64,
    bytes_per_entry: f64,
}

fn run(make: &dyn Fn() -> Box<dyn Map>, n: u64, threads: u64) -> Row {
    let before = HEAP.load(Ordering::Relaxed);
    let m = make();
    let insert = timed(threads, n, |i| {
        m.upsert(key(i), i << 1);
    });
    let bytes_per_entry = (HEAP.load(Ordering::Relaxed) - before) as f64 / n as f64;
    let get_hit = timed(threads, n, |i| {
        assert_eq!(m.get(key(i)), Some(i << 1));
    });
    let get_miss = timed(threads, n, |i| {
        assert_eq!(m.get(key(i + n)), None);
    });
    let replace = timed(threads, n, |i| {
        m.upsert(key(i), (i << 1) | 1);
    });
    Row {
        insert,
        get_hit,
        get_miss,
        replace,
        bytes_per_entry,
    }
}

/// Heap bytes per entry while growing to `n` entries, sampled at ten sizes: extendible hashing
/// and hashbrown both grow in steps, so one size alone says little.
fn memory_sweep(n: u64) {
    println!("heap bytes per entry while growing (single thread)");
    print!("{:<15}", "entries");
    for step in 1..=10 {
        print!(" {:>6}", format!("{}M", n * step / 10 / 1_000_000));
    }
    println!();
    let maps: [Box<dyn Map>; 2] = [Box::new(OffsetIndex::new()), Box::new(Dash(DashMap::new()))];
    for m in maps {
        let before = HEAP.load(Ordering::Relaxed);
        print!("{:<15}", m.name());
        let mut i = 0;
        for step in 1..=10 {
            while i < n * step / 10 {
                m.upsert(key(i), i << 1);
                i += 1;
            }
            print!(
                " {:>6.1}",
                (HEAP.load(Ordering::Relaxed) - before) as f64 / i as f64
            );
        }
        println!();
    }
}

type MakeMap = (&'static str, Box<dyn Fn() -> Box<dyn Map>>);

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(10_000_000);
    let reps = args.get(1).copied().unwrap_or(3).max(1);
    memory_sweep(n);
    println!("entries {n}, repetitions {reps} (median), Mops/s and heap bytes per entry");
    println!(
        "{:<15} {:>7} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "map", "threads", "insert", "get-hit", "get-miss", "replace", "bytes/entry"
    );
    let makers: [MakeMap; 2] = [
        (
            "cceh",
            Box::new(|| Box::new(OffsetIndex::new()) as Box<dyn Map>),
        ),
        (
            "dash",
            Box::new(|| Box::new(Dash(DashMap::new())) as Box<dyn Map>),
        ),
    ];
    for threads in [1, 2] {
        // Interleave the two maps repetition by repetition so machine noise hits both alike.
        let mut rows: Vec<Vec<Row>> = vec![Vec::new(), Vec::new()];
        for _ in 0..reps {
            for (i, (_, make)) in makers.iter().enumerate() {
                rows[i].push(run(make.as_ref(), n, threads));
            }
        }
        for (i, (_, make)) in makers.iter().enumerate() {
            let r = &rows[i];
            let pick = |f: fn(&Row) -> f64| median(r.iter().map(f).collect());
            println!(
                "{:<15} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11.1}",
                make().name(),
                threads,
                pick(|x| x.insert),
                pick(|x| x.get_hit),
                pick(|x| x.get_miss),
                pick(|x| x.replace),
                pick(|x| x.bytes_per_entry)
            );
        }
    }
}
