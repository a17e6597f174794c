//! End-to-end tests of `tierbase serve --store plush`: the Plush store behind the Redis
//! protocol, driven with the `redis` crate: point commands, atomic INCR from several
//! connections, the unordered SCAN cursor walk (every key exactly once) with MATCH, values
//! above the payload chunk's limit, a restart that keeps every acknowledged write (replayed
//! from the recovery logs), and the refusal of deferred durability levels.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{PLUSH, Store, StoreDir};
use redis::cmd;
use tierbase::device::Durability;
use tierbase_server::open_store;

/// Plush with its smallest DRAM budget: a new store gets 2^4 DRAM entries of 256 slots (an
/// existing one keeps its own), so a few thousand keys fill DRAM halves and migrate to PMem.
const SMALL_PLUSH: Store = PLUSH.dram_budget(tierbase::hash::MIN_DRAM_BUDGET);

/// A numeric field of an INFO reply.
fn info_number(info: &str, field: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn plush_store_serves_redis_commands_and_keeps_them_across_a_restart() {
    let dir = StoreDir::new(SMALL_PLUSH);
    let mut served = dir.serve();
    let mut con = served.client();
    // INCR from four connections at once: `modify` under the key's DRAM entry lock counts
    // every increment exactly once. Enough keys that DRAM halves (128 slots) fill and
    // migrate to PMem.
    common::write_common_keys(&served, &mut con, 3000);
    // SCAN: no order, but every key present throughout exactly once, across cursors.
    let all: Vec<String> = common::scan_all(&mut con, &["COUNT", "37"]);
    let set: BTreeSet<&String> = all.iter().collect();
    assert_eq!(set.len(), all.len(), "a key returned twice");
    assert_eq!(all.len(), 3004);
    assert!(set.contains(&"counter".to_string()));
    assert_eq!(
        common::scan_match_once(&mut con, "key:00*", 100_000).len(),
        100
    );
    // A value goes to a payload log (up to a payload chunk, 4 MiB, with its key).
    common::set_big_value(&mut con);
    assert_eq!(cmd("DEL").arg("big").query::<u64>(&mut con).unwrap(), 1);
    assert_eq!(cmd("DEL").arg("big").query::<u64>(&mut con).unwrap(), 0);
    assert_eq!(cmd("DEL").arg("b").query::<u64>(&mut con).unwrap(), 1);
    let info: String = cmd("INFO").query(&mut con).unwrap();
    assert!(info.contains("tierbase_commit:immediate"), "{info}");
    assert!(info.contains("store:plush"), "{info}");
    assert!(info_number(&info, "plush_half_migrations") > 0, "{info}");
    assert!(info_number(&info, "plush_levels") >= 1, "{info}");
    drop(con);
    served.stop();

    // Restart: the recovery logs replay what was still in DRAM.
    let mut served = dir.serve();
    let mut con = served.client();
    common::assert_common_keys_kept(&mut con, 3000);
    assert_eq!(
        common::scan_all::<String>(&mut con, &["COUNT", "500"]).len(),
        3003
    );
    drop(con);
    served.stop();
}

#[test]
fn plush_refuses_deferred_durability_levels() {
    let dir = StoreDir::new(PLUSH);
    let path = &dir.path;
    for level in [
        Durability::Eventual(Duration::from_millis(50)),
        Durability::None,
    ] {
        let Err(err) = open_store("plush", path, level) else {
            panic!("plush opened at {}", level.name());
        };
        let msg = err.to_string();
        assert!(msg.contains("no deferred levels"), "{msg}");
        assert!(msg.contains("use immediate"), "{msg}");
        assert!(!path.exists(), "no store file is created");
    }
}

/// A record whose key + value exceed a payload chunk is an error reply; the key keeps its
/// value and the store keeps taking writes (as `kv` and `btree` do). An MSET holding such a
/// record, or an empty key, writes none of its pairs.
#[test]
fn oversized_value_is_an_error_reply_and_the_store_stays_writable() {
    let dir = StoreDir::new(SMALL_PLUSH);
    let mut served = dir.serve();
    let mut con = served.client();
    let _: () = cmd("SET").arg("a").arg("1").query(&mut con).unwrap();
    common::assert_value_too_large(&mut con, "a", 4 << 20, "1");
    common::assert_refused_mset_writes_nothing(
        &mut con,
        b"big",
        &[b'x'; 4 << 20],
        "value too large",
    );
    common::assert_refused_mset_writes_nothing(&mut con, b"", b"v", "empty key");
    let _: () = cmd("SET").arg("b").arg("2").query(&mut con).unwrap();
    assert_eq!(cmd("GET").arg("b").query::<String>(&mut con).unwrap(), "2");
    drop(con);
    served.stop();
}
