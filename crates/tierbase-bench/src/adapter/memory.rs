//! The in-memory reference stores: `memory` (sharded concurrent hash map, the upper bound) and
//! `memory-btree` (ordered map, for scans).
//!
//! Owns: two simple, obviously correct stores in anonymous DRAM with no durability. Must not
//! touch: files or devices. With `--emulate <profile>` each operation is additionally charged to
//! a [`tierbase::device::Emulator`] as one device access of the bytes it moves (reads for
//! get/scan, writes for put/update/delete), which turns the upper bound into "DRAM speed capped
//! by the profile".

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::ops::Bound;

use parking_lot::RwLock;
use tierbase::device::{Direction, Emulator};

use super::{Capabilities, Client, Store, StoreInfo, StoreOptions};
use crate::error::{BenchError, Result};

/// Shards of the hash store (a power of two): enough that a few dozen threads rarely meet.
const SHARDS: usize = 64;

const MEDIUM: &str = "DRAM (anonymous)";

fn emulator_for(opts: &StoreOptions) -> Result<Option<Emulator>> {
    opts.emulate
        .as_ref()
        .map(Emulator::new)
        .transpose()
        .map_err(BenchError::from)
}

fn info_for(name: &str, ordered: bool, emulator: Option<&Emulator>, note: &str) -> StoreInfo {
    let mut info = StoreInfo::new(name, MEDIUM, "none");
    info.capabilities = Capabilities {
        ordered_scan: ordered,
        atomic_update: true,
    };
    info.notes.push(note.to_string());
    if let Some(e) = emulator {
        info.emulated = Some(e.profile().name.clone());
        info.notes.push(format!(
            "{}: each operation charged as one device access of its bytes",
            e.label()
        ));
    }
    info
}

#[inline]
fn charge(emulator: Option<&Emulator>, dir: Direction, bytes: usize) {
    if let Some(e) = emulator {
        e.charge(dir, bytes as u64);
    }
}

type Value = Box<[u8]>;
type Shard = RwLock<HashMap<Box<[u8]>, Value, foldhash::fast::RandomState>>;
type OrderedMap = RwLock<BTreeMap<Box<[u8]>, Value>>;

/// The point operations both reference stores need from their map, so one client serves both.
trait PointMap {
    fn put(&mut self, key: &[u8], value: &[u8]);
    fn value(&self, key: &[u8]) -> Option<&Value>;
    fn value_mut(&mut self, key: &[u8]) -> Option<&mut Value>;
    fn remove(&mut self, key: &[u8]) -> bool;
}

/// Implements [`PointMap`] for a std map: `HashMap` and `BTreeMap` have the same methods, but
/// no common trait for them.
macro_rules! point_map {
    ($map:ty) => {
        impl PointMap for $map {
            fn put(&mut self, key: &[u8], value: &[u8]) {
                self.insert(key.into(), value.into());
            }
            fn value(&self, key: &[u8]) -> Option<&Value> {
                self.get(key)
            }
            fn value_mut(&mut self, key: &[u8]) -> Option<&mut Value> {
                self.get_mut(key)
            }
            fn remove(&mut self, key: &[u8]) -> bool {
                <$map>::remove(self, key).is_some()
            }
        }
    };
}

point_map!(HashMap<Box<[u8]>, Value, foldhash::fast::RandomState>);
point_map!(BTreeMap<Box<[u8]>, Value>);

/// A reference store: its name and description, and as its client sees it, which locked map
/// holds a key, the emulator to charge, and scans where the store supports them. One [`Store`]
/// implementation (below) serves both.
trait MapStore: Send + Sync {
    /// Registry name.
    const NAME: &'static str;
    /// Whether [`MapStore::scan`] works.
    const ORDERED: bool;
    /// What the map is, for the notes.
    const NOTE: &'static str;
    type Map: PointMap;
    fn map_for(&self, key: &[u8]) -> &RwLock<Self::Map>;
    fn emulator(&self) -> Option<&Emulator>;
    /// Visits up to `count` records from `start` on; returns (records, bytes) visited.
    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(usize, usize)>;
}

/// `memory`: a sharded concurrent hash map (64 shards, each a `HashMap` behind a read-write
/// lock). Point operations only: [`Client::scan`] is unsupported.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Shard; SHARDS]>,
    shard_hasher: foldhash::fast::FixedState,
    emulator: Option<Emulator>,
}

impl MemoryStore {
    /// Opens an empty store (`opts.records` pre-sizes the shards).
    pub fn open(opts: &StoreOptions) -> Result<Self> {
        let per_shard = usize::try_from(opts.records / SHARDS as u64).unwrap_or(0);
        let shards = std::array::from_fn(|_| {
            RwLock::new(HashMap::with_capacity_and_hasher(
                per_shard,
                foldhash::fast::RandomState::default(),
            ))
        });
        Ok(MemoryStore {
            shards: Box::new(shards),
            shard_hasher: foldhash::fast::FixedState::with_seed(0x7469_6572_6261_7365),
            emulator: emulator_for(opts)?,
        })
    }
}

impl MapStore for MemoryStore {
    const NAME: &'static str = "memory";
    const ORDERED: bool = false;
    const NOTE: &'static str = "64-shard hash map with read-write locks; no ordered scans";
    type Map = HashMap<Box<[u8]>, Value, foldhash::fast::RandomState>;

    #[inline]
    fn map_for(&self, key: &[u8]) -> &Shard {
        let h = self.shard_hasher.hash_one(key);
        &self.shards[(h >> 32) as usize & (SHARDS - 1)]
    }

    fn emulator(&self) -> Option<&Emulator> {
        self.emulator.as_ref()
    }

    fn scan(&self, _: &[u8], _: usize, _: &mut dyn FnMut(&[u8], &[u8])) -> Result<(usize, usize)> {
        Err(BenchError::unsupported(
            "memory",
            "ordered scans (it is a hash map; use memory-btree)",
        ))
    }
}

/// `memory-btree`: one `BTreeMap` behind a read-write lock. Supports ordered scans.
#[derive(Debug)]
pub struct MemoryBTreeStore {
    map: OrderedMap,
    emulator: Option<Emulator>,
}

impl MemoryBTreeStore {
    /// Opens an empty store.
    pub fn open(opts: &StoreOptions) -> Result<Self> {
        Ok(MemoryBTreeStore {
            map: RwLock::new(BTreeMap::new()),
            emulator: emulator_for(opts)?,
        })
    }
}

impl MapStore for MemoryBTreeStore {
    const NAME: &'static str = "memory-btree";
    const ORDERED: bool = true;
    const NOTE: &'static str = "BTreeMap behind one read-write lock";
    type Map = BTreeMap<Box<[u8]>, Value>;

    fn map_for(&self, _: &[u8]) -> &OrderedMap {
        &self.map
    }

    fn emulator(&self) -> Option<&Emulator> {
        self.emulator.as_ref()
    }

    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(usize, usize)> {
        let (mut visited, mut bytes) = (0, 0);
        let map = self.map.read();
        let range = map.range::<[u8], _>((Bound::Included(start), Bound::Unbounded));
        for (k, v) in range.take(count) {
            visit(k, v);
            visited += 1;
            bytes += k.len() + v.len();
        }
        Ok((visited, bytes))
    }
}

impl<S: MapStore> Store for S {
    fn info(&self) -> StoreInfo {
        info_for(S::NAME, S::ORDERED, self.emulator(), S::NOTE)
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(MapClient { store: self }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// The client of either reference store.
struct MapClient<'a, S> {
    store: &'a S,
}

impl<S: MapStore> Client for MapClient<'_, S> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store.map_for(key).write().put(key, value);
        charge(
            self.store.emulator(),
            Direction::Write,
            key.len() + value.len(),
        );
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        let found = match self.store.map_for(key).read().value(key) {
            Some(v) => {
                out.extend_from_slice(v);
                true
            }
            None => false,
        };
        charge(
            self.store.emulator(),
            Direction::Read,
            key.len() + out.len(),
        );
        Ok(found)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let found = match self.store.map_for(key).write().value_mut(key) {
            Some(v) => {
                *v = value.into();
                true
            }
            None => false,
        };
        charge(
            self.store.emulator(),
            Direction::Write,
            key.len() + value.len(),
        );
        Ok(found)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let found = self.store.map_for(key).write().remove(key);
        charge(self.store.emulator(), Direction::Write, key.len());
        Ok(found)
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let (visited, bytes) = self.store.scan(start, count, visit)?;
        charge(self.store.emulator(), Direction::Read, bytes);
        Ok(visited)
    }
}
