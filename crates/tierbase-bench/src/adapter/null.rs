//! `NullStore`: a harness-overhead probe, not a store.
//!
//! Owns: a [`Store`] whose operations do (almost) nothing, so that a phase run on it measures
//! the benchmark harness alone — operation choice, key and value building, timing, histogram
//! recording, verification — which is what a driver adds to every operation of a real store.
//! It is deliberately **not** in [`STORES`](super::STORES): results on it say nothing about
//! storage. Must not touch: anything but its own calls.
//!
//! Its client keeps nothing: `put`, `update` and `delete` report success, `get` reports the
//! key as found and returns a value holding only the key's fingerprint (so that the harness's
//! verification runs as on a real store and passes), `scan` visits nothing.

use super::{Capabilities, Client, Store, StoreInfo};
use crate::error::Result;
use crate::workload::keys::key_fingerprint;

/// The harness-overhead probe (see the module documentation).
#[derive(Debug, Default)]
pub struct NullStore;

impl NullStore {
    /// The probe's registry-style name (it is not registered).
    pub const NAME: &'static str = "null (harness-overhead probe)";
}

impl Store for NullStore {
    fn info(&self) -> StoreInfo {
        let mut info = StoreInfo::new(Self::NAME, "none", "none");
        info.capabilities = Capabilities {
            ordered_scan: true,
            atomic_update: true,
        };
        info.notes
            .push("stores nothing: measures the benchmark harness alone".into());
        info
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(NullClient))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct NullClient;

impl Client for NullClient {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        std::hint::black_box((key, value));
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        out.extend_from_slice(&key_fingerprint(key));
        Ok(true)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        std::hint::black_box((key, value));
        Ok(true)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        std::hint::black_box(key);
        Ok(true)
    }

    fn scan(
        &mut self,
        start: &[u8],
        _count: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        std::hint::black_box(start);
        Ok(0)
    }
}
