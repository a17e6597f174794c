//! Model tests of the version latch and key locks under shuttle's scheduler, which explores
//! thread interleavings at every atomic access (random and PCT schedules). Run with
//! `cargo test -p tierbase --release --features shuttle --test model_latch`.
//!
//! What they check: exclusive sections never overlap; an optimistic reader that validates
//! never returns a torn pair written under the latch; a reader whose validation fails always
//! overlapped a writer.

#![cfg(feature = "shuttle")]

use shuttle::sync::Arc;
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::thread;
use tierbase::sync::{KeyLocks, VersionLatch};

/// Two words written together under the latch; readers must never validate a mix.
struct Guarded {
    latch: VersionLatch,
    a: AtomicU64,
    b: AtomicU64,
}

fn torn_reads_never_validate() {
    let g = Arc::new(Guarded {
        latch: VersionLatch::new(),
        a: AtomicU64::new(0),
        b: AtomicU64::new(0),
    });
    let writers: Vec<_> = (1..=2u64)
        .map(|w| {
            let g = g.clone();
            thread::spawn(move || {
                for i in 0..2u64 {
                    let _x = g.latch.lock();
                    let v = w * 100 + i;
                    g.a.store(v, Ordering::Relaxed);
                    g.b.store(v, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let reader = {
        let g = g.clone();
        thread::spawn(move || {
            for _ in 0..3 {
                let Some(v) = g.latch.optimistic() else {
                    continue;
                };
                let (a, b) = (g.a.load(Ordering::Relaxed), g.b.load(Ordering::Relaxed));
                if g.latch.validate(v) {
                    assert_eq!(a, b, "a validated read saw a torn pair");
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    // Four exclusive sections, each moving the version by two.
    assert_eq!(g.latch.optimistic(), Some(8));
}

#[test]
fn version_latch_random_schedules() {
    shuttle::check_random(torn_reads_never_validate, 2_000);
}

#[test]
fn version_latch_pct_schedules() {
    shuttle::check_pct(torn_reads_never_validate, 2_000, 3);
}

#[test]
fn key_locks_exclude_writers_of_one_key() {
    shuttle::check_random(
        || {
            let locks = Arc::new(KeyLocks::new(4));
            let counter = Arc::new(AtomicU64::new(0));
            let ts: Vec<_> = (0..3)
                .map(|_| {
                    let (locks, counter) = (locks.clone(), counter.clone());
                    thread::spawn(move || {
                        for _ in 0..2 {
                            let _g = locks.lock(7);
                            // A read-modify-write split in two: only exclusion keeps it exact.
                            let v = counter.load(Ordering::Relaxed);
                            thread::yield_now();
                            counter.store(v + 1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in ts {
                t.join().unwrap();
            }
            assert_eq!(counter.load(Ordering::Relaxed), 6);
        },
        2_000,
    );
}
