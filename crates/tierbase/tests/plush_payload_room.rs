//! A payload whose chunks are fragmented must still take an entry nearly a chunk long: a
//! helper's random command stream through `serve` (1 MiB payload chunks, two payload logs, a
//! 256-entry DRAM level) left the server spinning for good in the payload's rotation — each
//! collection's copies made a partial chunk too small for the entry, the writer took it,
//! sealed it, collected it again, and so on. Replayed here with the stream's key and value
//! sizes (value bytes seeded), each command as `serve` maps it to the store.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use tierbase::hash::{PlushLayout, PlushOptions, PlushStore};
use tierbase::store::Change;

#[derive(Clone, Copy, Debug)]
enum Op {
    Set,
    Mset,
    Getset,
    Setnx,
    Append,
}

#[derive(Clone, Copy, Debug)]
enum Arg {
    /// Literal bytes.
    Bytes(&'static [u8]),
    /// A key of this many bytes (the stream's long keys).
    Key(usize),
    /// A value of this many (random) bytes.
    Len(usize),
}

#[rustfmt::skip]
const STREAM: &[(Op, &[Arg])] = &[
    (Op::Set, &[Arg::Bytes(b"\x6b\x31\x35"), Arg::Bytes(b"")]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x37\x37"), Arg::Len(199930)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x31\x30"), Arg::Bytes(b"\x61\x62")]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x32\x34"), Arg::Len(61), Arg::Bytes(b"\x6b\x32\x35\x33"), Arg::Len(196), Arg::Bytes(b"\x6b\x32\x38\x33"), Arg::Len(76)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x31"), Arg::Bytes(b"\x61\x62")]),
    (Op::Setnx, &[Arg::Key(16384), Arg::Len(131690)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x31\x32\x34"), Arg::Len(14576)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x32\x38\x30"), Arg::Len(13278)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x32\x35\x30"), Arg::Bytes(b"")]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x36"), Arg::Len(243743), Arg::Bytes(b"\x6b\x31\x30\x32"), Arg::Len(133), Arg::Bytes(b"\x6b\x32\x37\x36"), Arg::Len(149)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x32"), Arg::Bytes(b"\x61\x62")]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x32\x36\x32"), Arg::Bytes(b"\x19")]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x31\x38"), Arg::Len(249421), Arg::Bytes(b"\x6b\x32\x38"), Arg::Len(131), Arg::Bytes(b"\x6b\x32\x34\x36"), Arg::Len(93)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x31\x34"), Arg::Len(47)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x31\x32\x39"), Arg::Len(55)]),
    (Op::Append, &[Arg::Bytes(b"\x11\x6f\x8a\xc3\xb6\xbc\xe8\x4c\x27\xb0\x0d\xca\xe3\xa1\x8c\xe0\x5f\x31\xf2\xd2"), Arg::Bytes(b"\x61\x62")]),
    (Op::Mset, &[Arg::Key(16384), Arg::Len(168), Arg::Bytes(b"\x6b\x32\x36\x34"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x32\x33\x30"), Arg::Len(84)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x31\x38"), Arg::Len(5118)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x31\x39\x33"), Arg::Len(1038538)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x31\x36\x32"), Arg::Bytes(b"")]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x31\x35\x31"), Arg::Len(117)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x38\x34"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x34\x31"), Arg::Len(3965), Arg::Bytes(b"\x6b\x31\x34\x33"), Arg::Len(166)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x39\x39"), Arg::Len(83), Arg::Bytes(b"\x6b\x31\x35\x37"), Arg::Len(19972), Arg::Bytes(b"\x6b\x32\x31"), Arg::Len(179379)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x33\x39"), Arg::Len(15627), Arg::Bytes(b"\x6b\x31\x35\x39"), Arg::Len(6504), Arg::Bytes(b"\x6b\x32\x39\x39"), Arg::Len(127)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x34\x35"), Arg::Bytes(b"\xe8"), Arg::Bytes(b"\x6b\x35\x35"), Arg::Len(18867), Arg::Bytes(b"\x6b\x31\x32"), Arg::Len(174)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x32\x39\x33"), Arg::Len(130)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x31\x38\x32"), Arg::Bytes(b"\x10\x25")]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x39\x33"), Arg::Bytes(b"")]),
    (Op::Setnx, &[Arg::Bytes(b"\x07"), Arg::Len(290940)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x33\x36"), Arg::Len(192), Arg::Bytes(b"\x08"), Arg::Len(11005), Arg::Bytes(b"\x6b\x32\x36\x34"), Arg::Len(15725)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x38\x34"), Arg::Len(150), Arg::Bytes(b"\x6b\x32\x36\x39"), Arg::Len(105), Arg::Bytes(b"\x6b\x31"), Arg::Len(161)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x32\x39\x39"), Arg::Len(193)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x30"), Arg::Bytes(b"\x61\x62")]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x32\x30\x33"), Arg::Len(47)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x33\x37"), Arg::Len(91)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x31\x33\x35"), Arg::Len(18833)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x32\x36"), Arg::Bytes(b"\x15")]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x38\x32"), Arg::Bytes(b"")]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x37\x30"), Arg::Len(170534), Arg::Bytes(b"\x6b\x31\x30\x36"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x31\x32\x31"), Arg::Len(135)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x32\x38\x37"), Arg::Len(11801)]),
    (Op::Getset, &[Arg::Bytes(b"\x6b\x32\x32\x31"), Arg::Len(70)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x30\x33"), Arg::Len(148958), Arg::Bytes(b"\x6b\x31\x36\x34"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x32\x35\x32"), Arg::Len(1762)]),
    (Op::Setnx, &[Arg::Bytes(b"\x19\x65\x04\xc7\x97\x2a\xb6\x98\x48\xa6\xfb\x95\xb9\xdc\xcb\x5c\xa3\xc3\xda\x3c"), Arg::Bytes(b"\x29")]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x31\x33"), Arg::Len(194)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x31\x32\x30"), Arg::Len(101), Arg::Bytes(b"\x6b\x31\x34\x35"), Arg::Len(185), Arg::Bytes(b"\x6b\x32\x33\x36"), Arg::Len(129)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x33"), Arg::Len(16741)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x31\x36\x33"), Arg::Bytes(b"\x61\x62")]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x30\x34"), Arg::Len(1998), Arg::Bytes(b"\x6b\x38\x31"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x37\x37"), Arg::Bytes(b"\x7b")]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x37\x37"), Arg::Len(67)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x31\x35\x35"), Arg::Bytes(b"")]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x36\x36"), Arg::Len(130785)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x39\x37"), Arg::Len(35)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x32\x32\x39"), Arg::Len(68)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x33\x30"), Arg::Bytes(b"\x15"), Arg::Bytes(b"\x02"), Arg::Len(180), Arg::Bytes(b"\x03"), Arg::Len(135)]),
    (Op::Append, &[Arg::Bytes(b"\x6b\x32\x38\x30"), Arg::Bytes(b"\x61\x62")]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x32\x38"), Arg::Len(9847)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x31\x39\x36"), Arg::Len(11263)]),
    (Op::Setnx, &[Arg::Bytes(b"\x6b\x32\x38\x36"), Arg::Len(18041)]),
    (Op::Set, &[Arg::Bytes(b"\x6b\x32\x37\x34"), Arg::Len(176369)]),
    (Op::Mset, &[Arg::Bytes(b"\x6b\x32\x35\x31"), Arg::Bytes(b""), Arg::Bytes(b"\x6b\x32\x30\x35"), Arg::Bytes(b"\x8b"), Arg::Bytes(b"\x6b\x32\x31\x37"), Arg::Len(1030045)]),
];

fn bytes(arg: Arg, rng: &mut u64) -> Vec<u8> {
    match arg {
        Arg::Bytes(b) => b.to_vec(),
        Arg::Key(100) => vec![0xff; 100],
        Arg::Key(n) => vec![if n % 2 == 0 { b'y' } else { b'x' }; n],
        Arg::Len(n) => (0..n)
            .map(|_| {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                *rng as u8
            })
            .collect(),
    }
}

fn replay(store: &PlushStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut model = BTreeMap::new();
    for (i, (op, args)) in STREAM.iter().enumerate() {
        let args: Vec<Vec<u8>> = args.iter().map(|&a| bytes(a, &mut rng)).collect();
        let sizes: Vec<usize> = args.iter().map(Vec::len).collect();
        let what = format!("command {i} ({op:?}, sizes {sizes:?})");
        match op {
            Op::Set | Op::Getset | Op::Mset => {
                for pair in args.chunks(2) {
                    store
                        .put(&pair[0], &pair[1])
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    model.insert(pair[0].clone(), pair[1].clone());
                }
            }
            Op::Setnx => {
                let v = args[1].clone();
                store
                    .modify(&args[0], &mut |cur| match cur {
                        Some(_) => Change::Keep,
                        None => Change::Put(v.clone()),
                    })
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                model
                    .entry(args[0].clone())
                    .or_insert_with(|| args[1].clone());
            }
            Op::Append => {
                let tail = args[1].clone();
                store
                    .modify(&args[0], &mut |cur| {
                        let mut v = cur.map(<[u8]>::to_vec).unwrap_or_default();
                        v.extend_from_slice(&tail);
                        Change::Put(v)
                    })
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                model
                    .entry(args[0].clone())
                    .or_default()
                    .extend_from_slice(&args[1]);
            }
        }
    }
    model
}

#[test]
fn an_entry_nearly_a_chunk_long_finds_room_in_a_fragmented_payload() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("room.plush");
    let mut opts = PlushOptions::default()
        .layout(PlushLayout::Variable)
        .dram_bits(8);
    opts.payload_chunk_bytes = 1 << 20;
    opts.payload_logs = 2;
    let store = PlushStore::create(&path, &opts).unwrap();
    // On its own thread: before the fix the last command never returned, and a hang should
    // fail this test, not stall the suite (the replay takes well under a second).
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let model = replay(&store);
        done.send(()).unwrap();
        (store, model)
    });
    finished
        .recv_timeout(Duration::from_secs(300))
        .expect("a write never returned: the payload's rotation did not end");
    let (store, model) = worker.join().unwrap();
    for (k, v) in &model {
        assert_eq!(
            store.get(k).unwrap().as_deref(),
            Some(&v[..]),
            "key {:?}",
            &k[..k.len().min(8)]
        );
    }
    let r = store.verify().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    store.close().unwrap();
    let store = PlushStore::open(&path, &opts).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_deref(), Some(&v[..]));
    }
}
