//! Power loss at every sync point of the B+-tree store on fault-injecting block devices
//! (unsynced writes lost or torn per 512-byte sector), with evictions and checkpoints in the
//! script: after reopening, the store holds exactly the acknowledged state, or that state
//! plus the one batch in flight (all of its keys or none).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use tierbase::btree::{BTreeDevices, BTreeOptions, BTreeStore};
use tierbase::device::{BlockCrashConfig, Durability, SimPower};
use tierbase::testing::crash::{BlockPowerLoss, Schedule};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts() -> BTreeOptions {
    BTreeOptions::default()
        .page_size(4096)
        // 64 frames: three-key batches fit (a batch may take half the pool), and the overflow
        // values (a few hundred pages) keep evictions going throughout.
        .dram_bytes(64 * 4096)
        .durability(Durability::Immediate)
}

fn contents(s: &BTreeStore) -> Model {
    let mut m = Model::new();
    s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        m.insert(k.to_vec(), v.to_vec());
        true
    })
    .unwrap();
    m
}

/// One step of the script: a batch of (key, value or delete).
fn step(i: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let k = |j: u64| format!("k{:04}", (j * 7919) % 397).into_bytes();
    match i % 5 {
        0 | 1 => vec![(
            k(i),
            Some(vec![(i % 256) as u8; 40 + (i % 5) as usize * 60]),
        )],
        2 => vec![(k(i / 2), None)],
        3 => vec![
            (k(i + 1), Some(vec![1; 300])),
            (k(i + 2), Some(vec![2; 10])),
            (k(i / 3), None),
        ],
        // Values beyond a quarter page go to overflow chains (4 KiB pages: 3 pages here).
        _ if i.is_multiple_of(3) => vec![(k(i), Some(vec![(i % 251) as u8; 9000 + i as usize]))],
        _ => vec![(k(i), Some(i.to_le_bytes().to_vec()))],
    }
}

fn apply(model: &mut Model, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in ops {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

#[test]
fn power_loss_at_every_sync_keeps_acknowledged_batches_whole() {
    let steps = 220u64;
    let report = BlockPowerLoss::new().survival(&[0.0, 0.5, 1.0]).run(
        |power: &Arc<SimPower>, _point| {
            let devs = BTreeDevices::simulated(power).unwrap();
            let s = BTreeStore::create_on(devs, &opts()).unwrap();
            let created = !power.crashed();
            let mut acked = Model::new();
            let mut in_flight = None;
            for i in 0..steps {
                if i % 60 == 59 {
                    s.checkpoint().unwrap();
                }
                let ops = step(i);
                let refs: Vec<(&[u8], Option<&[u8]>)> = ops
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_deref()))
                    .collect();
                let crashed_before = power.crashed();
                s.write_batch(&refs).unwrap();
                if !power.crashed() {
                    apply(&mut acked, &ops);
                } else if !crashed_before && in_flight.is_none() {
                    in_flight = Some(ops);
                } else if in_flight.is_none() {
                    in_flight = Some(Vec::new());
                }
            }
            power.cut();
            let images = s.durable_images().unwrap();
            s.abandon();
            (created, acked, in_flight, images)
        },
        |(created, acked, in_flight, images), point| {
            let power = SimPower::new(BlockCrashConfig::default());
            let devs = BTreeDevices::simulated_from(images, &power).unwrap();
            let s = match BTreeStore::open_on(devs, None, &opts()) {
                Ok(s) => s,
                // Power lost while the store was being created: nothing was acknowledged,
                // and the half-made store is refused with a clear error.
                Err(e) if !created => {
                    assert!(e.to_string().contains("superblock"), "{e}");
                    return;
                }
                Err(e) => panic!("reopen at point {point:?}: {e}"),
            };
            s.verify()
                .unwrap_or_else(|e| panic!("verify at point {point:?}: {e}"));
            let got = contents(&s);
            let mut with = acked.clone();
            if let Some(ops) = &in_flight {
                apply(&mut with, ops);
            }
            assert!(
                got == acked || got == with,
                "point {point:?}: store holds {} keys, acknowledged {} (with the batch in flight {})",
                got.len(),
                acked.len(),
                with.len()
            );
            assert_eq!(s.len(), got.len() as u64, "point {point:?}: key count");
            // The reopened store takes writes and survives another restart.
            s.put(b"after", b"crash").unwrap();
            s.close().unwrap();
        },
    );
    assert!(report.total_points > steps / 2, "{report:?}");
}
