//! The adapter contract suite: what every [`Store`] must do, checked against a `BTreeMap` model.
//!
//! Owns: [`run_contract_suite`], public (not test-only) so that any store, here or in another
//! crate, runs it from its own tests:
//!
//! ```
//! use tierbase_bench::adapter::{StoreOptions, open_store};
//! let store = open_store("memory-btree", &StoreOptions::new(std::env::temp_dir())).unwrap();
//! tierbase_bench::contract::run_contract_suite(store.as_ref()).unwrap();
//! ```
//!
//! Must not touch: anything but the store under test. The store must be empty when the suite
//! starts; the suite leaves its records in it.
//!
//! What is checked, in order:
//! 1. `info()` is filled in (name, medium, durability);
//! 2. edge cases on one client: missing keys (get, update and delete return `false` and change
//!    nothing), insert, overwrite, update of a present key, delete twice, empty values (and that
//!    `get` replaces the caller's buffer), binary keys with 0x00/0xFF bytes, a 1000-byte key, a
//!    100 KiB value, and scans (exact results, `count` 0, start past the end) — or, for a store
//!    without ordered scans, the typed [`BenchError::Unsupported`](crate::BenchError) error;
//! 3. visibility across clients: what one client writes the others read;
//! 4. mixed random operations from four threads at once, each on its own key range, every
//!    result compared with that thread's model as it goes;
//! 5. the final contents equal the model, by `get` of every key and deleted key and, with
//!    ordered scans, by a full scan.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::adapter::{Client, Store};
use crate::rng::Rng;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Threads of the concurrent phase.
const MIXED_THREADS: usize = 4;
/// Operations per thread in the concurrent phase.
const MIXED_OPS: usize = 2_000;
/// Distinct keys per thread in the concurrent phase (small, so hits and misses both happen).
const MIXED_KEYS: u64 = 150;

/// Runs the whole suite on an empty `store`. Returns the first violation, described.
pub fn run_contract_suite(store: &dyn Store) -> Result<(), String> {
    let info = store.info();
    if info.name.trim().is_empty() || info.medium.trim().is_empty() {
        return Err(format!(
            "info() must name the store and its medium: {info:?}"
        ));
    }
    if info.durability.trim().is_empty() {
        return Err(format!("info() must state the durability: {info:?}"));
    }
    let ordered = info.capabilities.ordered_scan;
    let mut model = Model::new();
    let mut deleted: Vec<Vec<u8>> = Vec::new();
    let mut client = store.client().map_err(|e| format!("client(): {e}"))?;
    if ordered {
        let mut n = 0;
        client
            .scan(b"", 10, &mut |_, _| n += 1)
            .map_err(|e| format!("scan of the empty store: {e}"))?;
        if n != 0 {
            return Err(format!(
                "the contract suite needs an empty store; a scan found {n} record(s)"
            ));
        }
    }
    edge_cases(client.as_mut(), ordered, &mut model, &mut deleted)?;
    cross_client(store, &mut model)?;
    drop(client);
    concurrent_mixed(store, ordered, &mut model, &mut deleted)?;
    final_contents(store, ordered, &model, &deleted)
}

fn ctx<T>(what: &str, key: &[u8], r: crate::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what} of key {}: {e}", show(key)))
}

fn show(key: &[u8]) -> String {
    if key.len() > 40 {
        return format!(
            "<{} bytes starting {}>",
            key.len(),
            show(key.get(..16).unwrap_or(key))
        );
    }
    key.escape_ascii().to_string()
}

fn expect_get(c: &mut dyn Client, key: &[u8], want: Option<&[u8]>) -> Result<(), String> {
    let mut out = b"stale bytes the store must replace".to_vec();
    let found = ctx("get", key, c.get(key, &mut out))?;
    match (want, found) {
        (None, false) => Ok(()),
        (Some(w), true) if out == w => Ok(()),
        (Some(w), true) => Err(format!(
            "get of key {} returned {} bytes, expected {} bytes{}",
            show(key),
            out.len(),
            w.len(),
            if out.len() == w.len() {
                " (contents differ)"
            } else {
                ""
            }
        )),
        (None, true) => Err(format!(
            "get of key {} found a value; expected none",
            show(key)
        )),
        (Some(_), false) => Err(format!(
            "get of key {} found nothing; expected a value",
            show(key)
        )),
    }
}

fn expect_bool(what: &str, key: &[u8], got: bool, want: bool) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what} of key {} returned {got}, expected {want}",
            show(key)
        ))
    }
}

fn scan_vec(c: &mut dyn Client, start: &[u8], count: usize) -> Result<Records, String> {
    let mut got = Vec::new();
    let n = ctx(
        "scan",
        start,
        c.scan(start, count, &mut |k, v| got.push((k.to_vec(), v.to_vec()))),
    )?;
    if n != got.len() {
        return Err(format!(
            "scan from {} returned {n} but visited {} records",
            show(start),
            got.len()
        ));
    }
    Ok(got)
}

fn expect_scan(
    c: &mut dyn Client,
    model: &Model,
    start: &[u8],
    count: usize,
) -> Result<(), String> {
    let got = scan_vec(c, start, count)?;
    let want: Records = model
        .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
        .take(count)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if got != want {
        let keys = |v: &[(Vec<u8>, Vec<u8>)]| {
            v.iter()
                .map(|(k, _)| show(k))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "scan from {} count {count} returned [{}], expected [{}]{}",
            show(start),
            keys(&got),
            keys(&want),
            if keys(&got) == keys(&want) {
                " (values differ)"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

fn put(c: &mut dyn Client, model: &mut Model, key: &[u8], value: &[u8]) -> Result<(), String> {
    ctx("put", key, c.put(key, value))?;
    model.insert(key.to_vec(), value.to_vec());
    Ok(())
}

fn edge_cases(
    c: &mut dyn Client,
    ordered: bool,
    model: &mut Model,
    deleted: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    let k: &[u8] = b"edge/key";
    // Missing key: every operation says so and changes nothing.
    expect_get(c, k, None)?;
    expect_bool(
        "update of a missing key",
        k,
        ctx("update", k, c.update(k, b"v0"))?,
        false,
    )?;
    expect_get(c, k, None)?;
    expect_bool(
        "delete of a missing key",
        k,
        ctx("delete", k, c.delete(k))?,
        false,
    )?;
    // Insert, overwrite, update.
    put(c, model, k, b"value one")?;
    expect_get(c, k, Some(b"value one"))?;
    put(c, model, k, b"value two, longer than the first")?;
    expect_get(c, k, Some(b"value two, longer than the first"))?;
    expect_bool(
        "update of a present key",
        k,
        ctx("update", k, c.update(k, b"v3"))?,
        true,
    )?;
    model.insert(k.to_vec(), b"v3".to_vec());
    expect_get(c, k, Some(b"v3"))?;
    // Delete twice.
    expect_bool(
        "delete of a present key",
        k,
        ctx("delete", k, c.delete(k))?,
        true,
    )?;
    model.remove(k);
    expect_bool("second delete", k, ctx("delete", k, c.delete(k))?, false)?;
    expect_get(c, k, None)?;
    expect_bool(
        "update after delete",
        k,
        ctx("update", k, c.update(k, b"x"))?,
        false,
    )?;
    expect_get(c, k, None)?;
    deleted.push(k.to_vec());
    // Empty value, binary keys, long key, large value.
    put(c, model, b"edge/empty", b"")?;
    expect_get(c, b"edge/empty", Some(b""))?;
    let big_value: Vec<u8> = (0..100 * 1024u32).map(|i| (i * 31 % 251) as u8).collect();
    let long_key: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let cases: [(&[u8], &[u8]); 5] = [
        (b"\x00", b"zero byte key"),
        (b"edge/\x00mid\x00", b"embedded zeros"),
        (b"\xff\xff\xff", b"high bytes"),
        (&long_key, b"long key"),
        (b"edge/big", &big_value),
    ];
    for (key, value) in cases {
        put(c, model, key, value)?;
    }
    for (key, value) in cases {
        expect_get(c, key, Some(value))?;
    }
    expect_bool(
        "update with an empty value",
        b"edge/big",
        ctx("update", b"edge/big", c.update(b"edge/big", b""))?,
        true,
    )?;
    model.insert(b"edge/big".to_vec(), Vec::new());
    expect_get(c, b"edge/big", Some(b""))?;
    // Scans.
    for i in 0..50u32 {
        put(
            c,
            model,
            format!("scan/{i:03}").as_bytes(),
            format!("value {i}").as_bytes(),
        )?;
    }
    if ordered {
        expect_scan(c, model, b"scan/010", 5)?;
        expect_scan(c, model, b"scan/0105", 3)?; // start between keys
        expect_scan(c, model, b"scan/045", 100)?; // runs past the prefix into later keys
        expect_scan(c, model, b"", 3)?; // from the very first key
        expect_scan(c, model, b"\xff\xff\xff\xff", 10)?; // past the end
        let mut calls = 0;
        let n = ctx(
            "scan",
            b"scan/",
            c.scan(b"scan/", 0, &mut |_, _| calls += 1),
        )?;
        if n != 0 || calls != 0 {
            return Err(format!(
                "scan with count 0 returned {n} and visited {calls}"
            ));
        }
    } else {
        match c.scan(b"scan/", 5, &mut |_, _| {}) {
            Err(e) if e.is_unsupported() => {}
            Err(e) => {
                return Err(format!(
                    "a store without ordered scans must fail scan with BenchError::Unsupported, \
                     got: {e}"
                ));
            }
            Ok(n) => {
                return Err(format!(
                    "info() says no ordered scans, but scan succeeded ({n} records)"
                ));
            }
        }
    }
    Ok(())
}

fn cross_client(store: &dyn Store, model: &mut Model) -> Result<(), String> {
    let mut a = store.client().map_err(|e| format!("client(): {e}"))?;
    let mut b = store.client().map_err(|e| format!("client(): {e}"))?;
    let mut c = store.client().map_err(|e| format!("client(): {e}"))?;
    for i in 0..20u32 {
        let key = format!("xc/{i:02}").into_bytes();
        put(a.as_mut(), model, &key, b"from a")?;
        expect_get(b.as_mut(), &key, Some(b"from a"))?;
        expect_bool(
            "update from another client",
            &key,
            ctx("update", &key, c.update(&key, b"from c"))?,
            true,
        )?;
        model.insert(key.clone(), b"from c".to_vec());
        expect_get(a.as_mut(), &key, Some(b"from c"))?;
        if i % 2 == 0 {
            expect_bool(
                "delete from another client",
                &key,
                ctx("delete", &key, b.delete(&key))?,
                true,
            )?;
            model.remove(&key);
            expect_get(c.as_mut(), &key, None)?;
        }
    }
    Ok(())
}

fn mixed_key(thread: usize, k: u64) -> Vec<u8> {
    format!("mix/{thread}/{k:04}").into_bytes()
}

fn mixed_thread(store: &dyn Store, thread: usize, ordered: bool) -> Result<Model, String> {
    let mut c = store.client().map_err(|e| format!("client(): {e}"))?;
    let c = c.as_mut();
    let mut rng = Rng::derive(0x00C0_FFEE, 77, thread as u64);
    let mut model = Model::new();
    let prefix_end = format!("mix/{thread}0").into_bytes(); // '/' + 1 == '0'
    for _ in 0..MIXED_OPS {
        let key = mixed_key(thread, rng.below(MIXED_KEYS));
        let len = rng.below(257) as usize;
        let mut value = vec![0u8; len];
        rng.fill_bytes(&mut value);
        match rng.below(if ordered { 10 } else { 9 }) {
            0..=2 => put(c, &mut model, &key, &value)?,
            3..=4 => expect_get(c, &key, model.get(&key).map(Vec::as_slice))?,
            5..=6 => {
                let got = ctx("update", &key, c.update(&key, &value))?;
                let present = model.contains_key(&key);
                expect_bool("update", &key, got, present)?;
                if present {
                    model.insert(key, value);
                }
            }
            7..=8 => {
                let got = ctx("delete", &key, c.delete(&key))?;
                expect_bool("delete", &key, got, model.remove(&key).is_some())?;
            }
            _ => {
                let count = rng.below(20) as usize;
                let got = scan_vec(c, &key, count)?;
                let own: Vec<_> = got.into_iter().filter(|(k, _)| *k < prefix_end).collect();
                let want: Vec<_> = model
                    .range::<[u8], _>((
                        Bound::Included(key.as_slice()),
                        Bound::Excluded(prefix_end.as_slice()),
                    ))
                    .take(count)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if own != want {
                    return Err(format!(
                        "thread {thread}: scan from {} count {count} returned {} own records, \
                         expected {}",
                        show(&key),
                        own.len(),
                        want.len()
                    ));
                }
            }
        }
    }
    Ok(model)
}

fn concurrent_mixed(
    store: &dyn Store,
    ordered: bool,
    model: &mut Model,
    deleted: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    let results: Vec<Result<Model, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..MIXED_THREADS)
            .map(|t| s.spawn(move || mixed_thread(store, t, ordered)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a contract thread panicked".into()))
            })
            .collect()
    });
    for (t, r) in results.into_iter().enumerate() {
        let m = r?;
        for k in 0..MIXED_KEYS {
            let key = mixed_key(t, k);
            if !m.contains_key(&key) {
                deleted.push(key);
            }
        }
        model.extend(m);
    }
    Ok(())
}

fn final_contents(
    store: &dyn Store,
    ordered: bool,
    model: &Model,
    deleted: &[Vec<u8>],
) -> Result<(), String> {
    let mut c = store.client().map_err(|e| format!("client(): {e}"))?;
    for (k, v) in model {
        expect_get(c.as_mut(), k, Some(v)).map_err(|e| format!("final check: {e}"))?;
    }
    for k in deleted {
        expect_get(c.as_mut(), k, None).map_err(|e| format!("final check: {e}"))?;
    }
    if ordered {
        let all = scan_vec(c.as_mut(), b"", model.len() + 10)?;
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if all != want {
            return Err(format!(
                "final full scan returned {} records, the model has {}{}",
                all.len(),
                want.len(),
                if all.len() == want.len() {
                    " (contents differ)"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(())
}
