//! A quick single-process look at the KV store's hot paths (for profiling with callgrind; the
//! benchmark of record is `tierbase bench`). Inserts, gets and updates N 16/200-byte records.
//!
//! Run: `cargo run --release -p tierbase --example kv_quick -- <dir> [records]`
//! (`NO_MORE=1`: hold n records, not 2n; `TIMED=1`: time every get between fenced clock
//! readings, as `tierbase bench` does; `BATCH=n`: read n keys a call with `get_many`;
//! `INITIAL=bytes`: pre-size the store, as the benchmark adapter does.)

use std::time::Instant;

use tierbase::kv::{KvOptions, KvStore, RecordLayout};

fn main() -> tierbase::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let path = dir.join(format!("kv-quick-{}.tb", std::process::id()));
    let initial: u64 = std::env::var("INITIAL")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0);
    let opts = KvOptions::default()
        .initial_size(initial)
        .layout(RecordLayout::Fixed {
            key_size: 16,
            value_size: 200,
        })
        .region(tierbase::device::RegionOptions {
            prefault: std::env::var_os("PREFAULT").is_some(),
            flush: std::env::var("FLUSH")
                .ok()
                .and_then(|f| tierbase::device::FlushInstruction::parse(&f)),
            ..Default::default()
        });
    let store = KvStore::create(&path, &opts)?;
    println!("durability: {}", store.durability().guarantee());
    let key = |i: u64| {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        k
    };
    let value = [7u8; 200];
    let mut c = store.client();
    // The store starts at a few blocks and grows: the slowest insert shows whether growth
    // ever stalls a writer. Each phase is its own function, so that a profile (callgrind)
    // attributes inserts, gets and replacements separately.
    let t = Instant::now();
    let slowest = insert_phase(&mut c, 0..n, &key, &value)?;
    let put = t.elapsed();
    // Inserts into a store that already holds n records (its index sized by the first n):
    // the steady state, as in a benchmark's insert-after-load.
    // (`NO_MORE=1` skips it: n records, as the side-by-side with Viper holds.)
    if std::env::var_os("NO_MORE").is_none() {
        insert_more_phase(&mut c, n..2 * n, &key, &value)?;
    }
    let t = Instant::now();
    get_phase(&mut c, n, &key)?;
    let get = t.elapsed();
    let t = Instant::now();
    replace_phase(&mut c, n, &key, &value)?;
    let upd = t.elapsed();
    drop(c);
    let rate = |d: std::time::Duration| n as f64 / d.as_secs_f64() / 1e6;
    println!(
        "{n} records: insert {:.2} Mops/s (slowest {:.2} ms, growing from empty), get {:.2} Mops/s, replace {:.2} Mops/s",
        rate(put),
        slowest.as_secs_f64() * 1e3,
        rate(get),
        rate(upd)
    );
    let s = store.stats();
    println!(
        "DRAM {:.1} B/record (index {:.1})",
        s.dram_bytes as f64 / n as f64,
        s.index_bytes as f64 / n as f64
    );
    drop(store);
    let t = Instant::now();
    let store = KvStore::open(&path, &opts)?;
    println!(
        "recovery {:.3} s with {} threads ({} records)",
        t.elapsed().as_secs_f64(),
        store.recovery().threads,
        store.len()
    );
    drop(store);
    std::fs::remove_file(&path).map_err(|e| tierbase::Error::io("remove", Some(&path), e))?;
    Ok(())
}

#[inline(never)]
fn insert_phase(
    c: &mut tierbase::kv::Client,
    keys: std::ops::Range<u64>,
    key: &dyn Fn(u64) -> [u8; 16],
    value: &[u8],
) -> tierbase::Result<std::time::Duration> {
    let mut slowest = std::time::Duration::ZERO;
    for i in keys {
        let op = Instant::now();
        c.put(&key(i), value)?;
        let e = op.elapsed();
        if e.as_millis() >= 3 {
            eprintln!("slow insert {i}: {:?}", e);
        }
        slowest = slowest.max(e);
    }
    Ok(slowest)
}

#[inline(never)]
fn insert_more_phase(
    c: &mut tierbase::kv::Client,
    keys: std::ops::Range<u64>,
    key: &dyn Fn(u64) -> [u8; 16],
    value: &[u8],
) -> tierbase::Result<()> {
    for i in keys {
        c.put(&key(i), value)?;
    }
    Ok(())
}

#[inline(never)]
fn get_phase(
    c: &mut tierbase::kv::Client,
    n: u64,
    key: &dyn Fn(u64) -> [u8; 16],
) -> tierbase::Result<()> {
    let mut v = Vec::new();
    // Uniformly random keys (a hash of the operation number; the hash would otherwise be the
    // record order) as in the benchmarks' uniform gets: every get misses the caches and the
    // TLB. A strided order hits a few of them and runs about 20 % faster here.
    let timed = std::env::var_os("TIMED").is_some();
    let batch: usize = std::env::var("BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(1);
    if batch > 1 {
        let mut values = vec![Vec::new(); batch];
        let mut found = vec![false; batch];
        let mut keys = vec![[0u8; 16]; batch];
        let mut i = 0;
        while i < n {
            let m = batch.min((n - i) as usize);
            for (j, k) in keys.iter_mut().take(m).enumerate() {
                *k = key(scattered(i + j as u64, n));
            }
            let refs: Vec<&[u8]> = keys[..m].iter().map(|k| &k[..]).collect();
            c.get_many(&refs, &mut values[..m], &mut found[..m])?;
            assert!(found[..m].iter().all(|&f| f), "a loaded key was not found");
            i += m as u64;
        }
        return Ok(());
    }
    for i in 0..n {
        let k = key(scattered(i, n));
        if timed {
            // Each get between two ordered clock readings, as `tierbase bench` times every
            // operation: the next get can no longer overlap this one's misses.
            tierbase::device::cpu::lfence();
            let t0 = Instant::now();
            c.get_into(&k, &mut v)?;
            tierbase::device::cpu::lfence();
            std::hint::black_box(t0.elapsed());
        } else {
            c.get_into(&k, &mut v)?;
        }
    }
    Ok(())
}

#[inline(never)]
fn replace_phase(
    c: &mut tierbase::kv::Client,
    n: u64,
    key: &dyn Fn(u64) -> [u8; 16],
    value: &[u8],
) -> tierbase::Result<()> {
    for i in 0..n {
        c.put(&key(i), value)?;
    }
    Ok(())
}

/// The `i`-th of a sequence of key numbers below `n` in no order the records have (a
/// splitmix64 finaliser of `i`).
fn scattered(i: u64, n: u64) -> u64 {
    let mut r = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    r = (r ^ (r >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    r = (r ^ (r >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (r ^ (r >> 31)) % n
}
