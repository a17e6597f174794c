//! Helpers shared by the `kv_*` crash tests: the script steps and the model they are checked
//! against.
#![allow(dead_code)]

use std::collections::BTreeMap;

use tierbase::device::RegionOptions;
use tierbase::kv::{KvOptions, RecordLayout};

/// Options of a store on a small crash-simulated region: two-page blocks, small growth steps,
/// and no background reclaimer, so that every persist point is the script's own.
pub fn crash_opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(4 * 2 * 4096)
        .recovery_threads(2)
        .region(RegionOptions {
            reserve: 64 << 20,
            ..RegionOptions::default()
        })
}

#[derive(Clone, Debug)]
pub enum Step {
    Put(Vec<u8>, Vec<u8>),
    Update(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Compact,
}

impl Step {
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Step::Put(k, _) | Step::Update(k, _) | Step::Delete(k) => Some(k),
            Step::Compact => None,
        }
    }
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

pub fn apply(model: &mut Model, step: &Step) {
    match step {
        Step::Put(k, v) => {
            model.insert(k.clone(), v.clone());
        }
        Step::Update(k, v) => {
            if let Some(slot) = model.get_mut(k) {
                *slot = v.clone();
            }
        }
        Step::Delete(k) => {
            model.remove(k);
        }
        Step::Compact => {}
    }
}
