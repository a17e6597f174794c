//! A quick single-process look at Plush's hot paths (for profiling; the benchmark of record is
//! `tierbase bench`): N inserts (blind upserts) and N lookups of 8/8-byte records, on 1 and 2
//! threads, then the store's counters (media blocks per insert, migrations, DRAM bytes).
//!
//! Run: `cargo run --release -p tierbase --example plush_quick -- <dir> [records] [dram_bits]`

use std::time::Instant;

use tierbase::hash::{PlushLayout, PlushOptions, PlushStore};

fn main() -> tierbase::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(4_000_000);
    let bits: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(14);
    let layout = match std::env::var("LAYOUT").as_deref() {
        Ok("variable") => PlushLayout::Variable,
        _ => PlushLayout::Fixed8,
    };
    for threads in [1u64, 2] {
        let path = dir.join(format!(
            "plush-quick-{}-{threads}.plush",
            std::process::id()
        ));
        let opts = PlushOptions::default()
            .layout(layout)
            .dram_bits(bits)
            .migrators(
                std::env::var("MIGRATORS")
                    .ok()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(1),
            )
            .region(tierbase::device::RegionOptions {
                flush: std::env::var("FLUSH")
                    .ok()
                    .and_then(|f| tierbase::device::FlushInstruction::parse(&f)),
                ..Default::default()
            });
        let store = PlushStore::create(&path, &opts)?;
        let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes();
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..threads {
                let store = &store;
                s.spawn(move || {
                    for i in (th..n).step_by(threads as usize) {
                        store.upsert(&key(i), &(i + 1).to_le_bytes()).unwrap();
                    }
                });
            }
        });
        let ins = t.elapsed();
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..threads {
                let store = &store;
                s.spawn(move || {
                    for i in (th..n).step_by(threads as usize) {
                        let v = store.get(&key(i)).unwrap();
                        assert_eq!(v.as_deref(), Some(&(i + 1).to_le_bytes()[..]));
                    }
                });
            }
        });
        let get = t.elapsed();
        let st = store.stats();
        let c = |name: &str| st.counters.iter().find(|c| c.0 == name).map_or(0, |c| c.1);
        println!(
            "{threads} thread(s), {n} records ({layout}): insert {:.2} Mops/s, get {:.2} Mops/s; \
             media bytes written per insert {:.0} (log write-combined; {:.2} blocks persisted), \
             blocks read per get {:.2}; levels {}, migrations {}, back-pressure {}, DRAM {} MiB; \
             search {}, flush {}",
            n as f64 / ins.as_secs_f64() / 1e6,
            n as f64 / get.as_secs_f64() / 1e6,
            (32 * c("log_entries") + c("migration_media_bytes") + c("payload_bytes_written"))
                as f64
                / n as f64,
            c("media_blocks_written") as f64 / n as f64,
            c("media_blocks_read") as f64 / n as f64,
            st.levels,
            c("migrations") + c("half_migrations"),
            c("back_pressure"),
            st.dram_bytes >> 20,
            st.key_search,
            st.flush
        );
        store.close()?;
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}
