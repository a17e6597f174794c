//! `tierbase serve --read-only` on each store: reads served, every write answered with
//! `-READONLY` (as a read-only Redis replica answers, so client libraries raise their
//! read-only error), two read-only servers side by side, and the store's files unchanged.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{BTREE, KV, PLUSH, Store, StoreDir};
use redis::cmd;

/// Every file at `path` (a store file, or a store directory's files), by name.
fn files(path: &Path) -> BTreeMap<String, Vec<u8>> {
    if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).unwrap())
            })
            .collect()
    } else {
        BTreeMap::from([(String::new(), std::fs::read(path).unwrap())])
    }
}

fn read_only_serving(store: Store) {
    let dir = StoreDir::new(store);
    let mut writer = dir.serve();
    let mut con = writer.client();
    for i in 0..300 {
        let _: () = cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .query(&mut con)
            .unwrap();
    }
    drop(con);
    writer.stop();
    let before = files(&dir.path);
    let mut a = dir.serve_read_only();
    let mut b = dir.serve_read_only();
    for server in [&a, &b] {
        let mut c = server.client();
        assert_eq!(cmd("GET").arg("k7").query::<String>(&mut c).unwrap(), "v7");
        assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 300);
        for write in [
            cmd("SET").arg("k7").arg("x").clone(),
            cmd("DEL").arg("k8").clone(),
            cmd("INCR").arg("n").clone(),
            cmd("MSET").arg("a").arg("1").clone(),
        ] {
            let e = write.query::<redis::Value>(&mut c).unwrap_err();
            assert_eq!(e.code(), Some("READONLY"), "{store:?}: {e}");
        }
        assert_eq!(cmd("GET").arg("k7").query::<String>(&mut c).unwrap(), "v7");
        assert_eq!(cmd("EXISTS").arg("k8").query::<u64>(&mut c).unwrap(), 1);
    }
    a.stop();
    b.stop();
    assert!(
        files(&dir.path) == before,
        "{store:?}: a read-only server changed the store"
    );
}

#[test]
fn a_read_only_kv_server_reads_and_refuses_writes() {
    read_only_serving(KV);
}

#[test]
fn a_read_only_btree_server_reads_and_refuses_writes() {
    read_only_serving(BTREE);
}

#[test]
fn a_read_only_plush_server_reads_and_refuses_writes() {
    read_only_serving(PLUSH);
}
