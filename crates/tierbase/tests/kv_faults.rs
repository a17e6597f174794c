//! Injected I/O errors (a dying device) at every persist point of a script of puts, replacing
//! puts, updates (in place for fixed 8-byte values), deletes, large values over 64 KiB and
//! compaction, driven by the shared harness (`tierbase::testing::crash::FaultInjection`).
//!
//! At each point every flush fails from then on. Checked:
//! - the failing call returns the I/O error, and the store says why it is read-only
//!   (`read_only_reason`, `stats().read_only`);
//! - every later write (put, update, delete, compact) returns `Error::ReadOnly` naming the
//!   original failure (the harness checks the variant and the text);
//! - reads go on and return every acknowledged write (the failed one old or new);
//! - reopening from the durable image (power lost too) and from the working bytes (process
//!   restarted) verifies clean and recovers every acknowledged write, the failed one fully or
//!   not at all, nothing deleted or unknown; and the reopened store accepts writes.
//!
//! Replay one point with `TIERBASE_CRASH_POINT=n`.

use tierbase::Error;
use tierbase::device::PmemRegion;
use tierbase::kv::{KvOptions, KvStore, RecordLayout};
use tierbase::testing::crash::{FaultInjection, FaultLog, Faulted, Media, Schedule};

mod kv_common;
use kv_common::{Model, Step, apply, crash_opts};

fn key(layout: RecordLayout, i: u32) -> Vec<u8> {
    match layout {
        RecordLayout::Fixed { key_size, .. } => {
            let mut k = vec![0u8; key_size as usize];
            k[..4].copy_from_slice(&i.to_le_bytes());
            k
        }
        RecordLayout::Variable => format!("key-{i}").into_bytes(),
    }
}

fn val(layout: RecordLayout, i: u32, len: usize) -> Vec<u8> {
    let len = match layout {
        RecordLayout::Fixed { value_size, .. } => value_size as usize,
        RecordLayout::Variable => len,
    };
    (0..len).map(|j| (i as usize * 7 + j) as u8 | 1).collect()
}

fn script(layout: RecordLayout) -> Vec<Step> {
    let variable = layout == RecordLayout::Variable;
    let mut s = Vec::new();
    for i in 0..30 {
        s.push(Step::Put(
            key(layout, i),
            val(layout, i, 10 + (i as usize * 37) % 300),
        ));
    }
    for i in (0..30).step_by(4) {
        s.push(Step::Put(key(layout, i), val(layout, i + 100, 50)));
    }
    for i in (1..30).step_by(6) {
        s.push(Step::Update(key(layout, i), val(layout, i + 200, 8)));
    }
    s.push(Step::Update(key(layout, 999), val(layout, 7, 8))); // missing key: no effect
    for i in (2..30).step_by(3) {
        s.push(Step::Delete(key(layout, i)));
    }
    if variable {
        s.push(Step::Put(b"large".to_vec(), val(layout, 1, 70_000)));
        // An inline record replaced by a large one, a large one by a large one.
        s.push(Step::Put(key(layout, 5), val(layout, 2, 100_000)));
        s.push(Step::Put(b"large".to_vec(), val(layout, 3, 66_000)));
    }
    s.push(Step::Compact);
    for i in 30..36 {
        s.push(Step::Put(key(layout, i), val(layout, i, 120)));
    }
    if variable {
        s.push(Step::Put(b"large".to_vec(), val(layout, 4, 20))); // large replaced by inline
        s.push(Step::Delete(key(layout, 5))); // a large record deleted
    }
    s.push(Step::Update(key(layout, 7), val(layout, 300, 8)));
    s.push(Step::Delete(key(layout, 0)));
    s
}

fn opts(layout: RecordLayout) -> KvOptions {
    // No reclaimer: the script's persist points are its own, so every point fails a call.
    crash_opts(layout)
}

fn run_step(store: &KvStore, step: &Step) -> tierbase::Result<()> {
    match step {
        Step::Put(k, v) => store.client().put(k, v).map(drop),
        Step::Update(k, v) => store.client().update(k, v).map(drop),
        Step::Delete(k) => store.delete(k).map(drop),
        Step::Compact => store.compact(0.0).map(drop),
    }
}

/// What a run acknowledged: the model of the steps that returned Ok, and the step that failed.
#[derive(Debug, Default)]
struct Acked {
    model: Model,
    failed_step: Option<Step>,
}

/// Whether `got` is what the model allows for `k`: the acknowledged value, or — for the key
/// of the failed step — the value it would have written.
fn allowed(acked: &Acked, k: &[u8], got: Option<&Vec<u8>>) -> bool {
    let before = acked.model.get(k);
    if got == before {
        return true;
    }
    match &acked.failed_step {
        Some(step) if step.key() == Some(k) => {
            let mut after = acked.model.clone();
            apply(&mut after, step);
            got == after.get(k)
        }
        _ => false,
    }
}

fn probes(layout: RecordLayout) -> Vec<Step> {
    vec![
        Step::Put(key(layout, 500), val(layout, 500, 30)),
        Step::Put(key(layout, 1), val(layout, 501, 30)),
        Step::Update(key(layout, 3), val(layout, 502, 8)),
        Step::Delete(key(layout, 4)),
        Step::Compact,
    ]
}

fn run_script(layout: RecordLayout, region: PmemRegion, log: &mut FaultLog) -> Acked {
    let mut acked = Acked::default();
    let Some(store) = log.open(KvStore::create_in(region, &opts(layout))) else {
        return acked;
    };
    for step in script(layout) {
        if log.write(run_step(&store, &step)).is_none() {
            acked.failed_step = Some(step);
            break;
        }
        apply(&mut acked.model, &step);
    }
    if let Some(failure) = log.failure() {
        // The failing call returned the device's error, and the store says it is read-only.
        assert!(
            matches!(failure, Error::Io { .. }),
            "the failing call returned {failure:?}, not the I/O error"
        );
        let reason = store.read_only_reason().expect("read-only after a failure");
        assert_eq!(reason, failure.to_string());
        assert_eq!(store.stats().read_only.as_deref(), Some(reason.as_str()));
        // Every later write is refused (the harness checks the variant and the reason).
        for step in probes(layout) {
            let r = run_step(&store, &step);
            if let Err(e) = &r {
                let text = e.to_string();
                assert!(
                    text.contains("read-only") && text.contains(&reason),
                    "refusal does not say why: {text}"
                );
            }
            log.write(r);
        }
        // Reads go on, and return acknowledged data.
        let mut keys: Vec<&Vec<u8>> = acked.model.keys().collect();
        let failed_key = acked
            .failed_step
            .as_ref()
            .and_then(Step::key)
            .map(<[u8]>::to_vec);
        keys.extend(failed_key.as_ref());
        for k in keys {
            let got = store
                .get(k)
                .unwrap_or_else(|e| panic!("get while read-only: {e}"));
            assert!(
                allowed(&acked, k, got.as_ref()),
                "read-only store returns {:?} for key {k:?}",
                got.map(|v| v.len())
            );
        }
        assert!(
            store.get(&key(layout, 500)).unwrap().is_none(),
            "a refused put is visible"
        );
    } else {
        assert!(store.read_only_reason().is_none());
    }
    log.capture(store.region());
    acked
}

fn check(layout: RecordLayout, run: &Faulted<'_, Acked>) {
    let ctx = format!("{} ({:?} bytes)", run.point, run.media);
    let o = opts(layout);
    let region = run.reboot(&o.region).unwrap();
    let report = tierbase::kv::verify_region(&region).unwrap();
    assert!(report.is_ok(), "{ctx}: {:?}", report.problems);
    let store = KvStore::open_in(region, &o).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    assert!(
        store.read_only_reason().is_none(),
        "{ctx}: reopened read-only"
    );
    let mut seen = 0;
    store
        .for_each(|k, v| {
            assert!(
                allowed(run.acked, k, Some(&v.to_vec())),
                "{ctx}: key {k:?} holds {} bytes, not an acknowledged value",
                v.len()
            );
            seen += 1;
        })
        .unwrap();
    for k in run.acked.model.keys() {
        let got = store.get(k).unwrap();
        assert!(
            allowed(run.acked, k, got.as_ref()),
            "{ctx}: acknowledged key {k:?} lost or wrong ({:?} bytes)",
            got.map(|v| v.len())
        );
    }
    assert_eq!(seen, store.len(), "{ctx}");
    // A healthy device again: the store takes writes.
    let (k, v) = (key(layout, 777), val(layout, 777, 40));
    store
        .put(&k, &v)
        .unwrap_or_else(|e| panic!("{ctx}: put after reopen: {e}"));
    assert_eq!(store.get(&k).unwrap(), Some(v));
    if run.media == Media::Durable && run.point.fail_after_fences.is_none() {
        assert!(run.acked.failed_step.is_none());
    }
}

fn every_persist_point(layout: RecordLayout) {
    let report = FaultInjection::new(opts(layout).region)
        .every_point_fails(true)
        .run(
            |region, log| run_script(layout, region, log),
            |run| check(layout, run),
        );
    eprintln!(
        "{layout}: flushes failing at each of {} persist points ({} runs, {} failed a call)",
        report.total_points, report.runs, report.failed_runs
    );
    assert!(report.total_points > 100, "{report:?}");
    assert_eq!(report.failed_runs as u64, report.total_points, "{report:?}");
}

#[test]
fn variable_layout_goes_read_only_and_recovers_at_every_persist_point() {
    every_persist_point(RecordLayout::Variable);
}

#[test]
fn fixed_layout_goes_read_only_and_recovers_at_every_persist_point() {
    every_persist_point(RecordLayout::Fixed {
        key_size: 16,
        value_size: 64,
    });
}

#[test]
fn fixed_in_place_layout_goes_read_only_and_recovers_at_every_persist_point() {
    every_persist_point(RecordLayout::Fixed {
        key_size: 8,
        value_size: 8,
    });
}
