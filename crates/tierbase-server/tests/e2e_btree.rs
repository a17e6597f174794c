//! End-to-end tests of `tierbase serve --store btree`: the B+-tree store behind the Redis
//! protocol, driven with the `redis` crate: point commands, atomic INCR from several
//! connections, SCAN in key order with cursors and MATCH, values above the store's limit, and
//! a restart that keeps every acknowledged write.

mod common;

use common::{BTREE, StoreDir};
use redis::cmd;

#[test]
fn btree_store_serves_redis_commands_in_key_order_and_keeps_them_across_a_restart() {
    let dir = StoreDir::new(BTREE);
    let mut served = dir.serve();
    let mut con = served.client();
    // INCR from four connections at once: every increment counted exactly once.
    common::write_common_keys(&served, &mut con, 500);
    // SCAN walks the keys in byte order, across cursors; MATCH filters.
    let all: Vec<String> = common::scan_all(&mut con, &["COUNT", "37"]);
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        all, sorted,
        "SCAN on an ordered store returns keys in order, once"
    );
    assert_eq!(all.len(), 504);
    assert_eq!(
        common::scan_match_once(&mut con, "key:00*", 10_000).len(),
        100
    );
    // A value beyond a page goes to overflow pages; one beyond the store's limit (a quarter
    // of the default 64 MiB pool) is an error reply, and the key is unchanged.
    common::set_big_value(&mut con);
    let _: () = cmd("DEL").arg("big").query(&mut con).unwrap();
    common::assert_value_too_large(&mut con, "a", (16 << 20) + 1, "1");
    let _: () = cmd("DEL").arg("b").query(&mut con).unwrap();
    drop(con);
    served.stop();

    let mut served = dir.serve();
    let mut con = served.client();
    common::assert_common_keys_kept(&mut con, 500);
    drop(con);
    served.stop();
}
