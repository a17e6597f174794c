//! Access-chain grammar: round trips, errors with positions, and address plans that stay in
//! bounds.

use tierbase_bench::rng::Rng;
use tierbase_profile::chain::{AccessChain, ChainOpKind, MemoryKind, parse_chain};
use tierbase_profile::persist::Persist;

#[test]
fn examples_parse_to_what_they_say_and_round_trip() {
    let c = AccessChain::parse("r_256,w_64_cache_128,w_64_cache_-128").unwrap();
    assert_eq!(c.ops().len(), 3);
    assert_eq!(c.ops()[0].kind, ChainOpKind::Read);
    assert_eq!(c.ops()[0].size, 256);
    assert_eq!(
        c.ops()[1].kind,
        ChainOpKind::Write {
            persist: Persist::Cache,
            offset: Some(128)
        }
    );
    assert_eq!(c.ops()[2].offset(), Some(-128));
    assert_eq!(c.to_string(), "r_256,w_64_cache_128,w_64_cache_-128");
    assert_eq!(c.bytes(), 384);
    // Spellings that mean the same thing print canonically and compare equal.
    for (text, canonical) in [
        ("rp_512, rp_512 ,rp_512", "r_512,r_512,r_512"),
        ("rd_2048,rd_2048,r_1024", "rd_2048,rd_2048,r_1024"),
        ("wp_64_nocache_+64", "w_64_nocache_64"),
        (
            "r_64,wd_8_none,w_128_cacheinv",
            "r_64,wd_8_none,w_128_cacheinv",
        ),
    ] {
        let c = AccessChain::parse(text).unwrap();
        assert_eq!(c.to_string(), canonical, "{text}");
        assert_eq!(AccessChain::parse(canonical).unwrap(), c, "{text}");
    }
}

#[test]
fn random_chains_round_trip_through_their_text() {
    let mut rng = Rng::from_seed(42);
    for _ in 0..2000 {
        let n = 1 + rng.below(6) as usize;
        let mut text = Vec::new();
        for _ in 0..n {
            let size = 1u64 << (3 + rng.below(14));
            let mem = ["", "p", "d"][rng.below(3) as usize];
            if rng.below(2) == 0 {
                text.push(format!("r{mem}_{size}"));
            } else {
                let persist = Persist::ALL[rng.below(4) as usize].chain_name();
                let offset = match rng.below(3) {
                    0 => String::new(),
                    1 => format!("_{}", rng.below(4096)),
                    _ => format!("_-{}", rng.below(4096)),
                };
                text.push(format!("w{mem}_{size}_{persist}{offset}"));
            }
        }
        let text = text.join(",");
        let c = AccessChain::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let again = AccessChain::parse(&c.to_string()).unwrap();
        assert_eq!(again, c, "{text}");
        assert_eq!(again.to_string(), c.to_string());
    }
}

#[test]
fn bad_chains_are_rejected_at_the_offending_token() {
    // (chain, 1-based column, token, part of the message)
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "r_256,w_64_cach_128",
            12,
            "cach",
            "unknown persist instruction",
        ),
        ("x_256", 1, "x", "unknown operation"),
        ("r_256,,w_64_none", 7, "", "empty operation"),
        ("r_256,", 7, "", "empty operation"),
        ("", 1, "", "empty access chain"),
        ("r_100", 3, "100", "power of two"),
        ("r_4", 3, "4", "power of two"),
        ("r_abc", 3, "abc", "number of bytes"),
        ("r", 2, "r", "missing size"),
        ("w_64", 5, "w_64", "persist instruction"),
        ("r_64_128", 6, "128", "a read takes only a size"),
        ("w_64_none_12x", 11, "12x", "offset must be"),
        ("w_64_none_-", 11, "-", "offset must be"),
        ("w_64_none_64_1", 14, "1", "unexpected text"),
        ("r_64, q_64", 7, "q", "unknown operation"),
        (
            "r_99999999999999999999999",
            3,
            "99999999999999999999999",
            "too large",
        ),
        ("rd_64,w_64_none_8,wd_64_cache_-8", 0, "", ""), // valid grammar (checked by plan)
    ];
    for &(text, column, token, msg) in cases {
        match AccessChain::parse(text) {
            Ok(c) => assert_eq!(column, 0, "{text} parsed as {c}"),
            Err(e) => {
                assert_eq!(e.column, column, "{text}: {e}");
                assert_eq!(e.token, token, "{text}: {e}");
                assert!(e.message.contains(msg), "{text}: {e}");
                let line = e.to_string();
                assert!(!line.contains('\n'));
                assert!(line.contains(&format!("column {column}")), "{line}");
            }
        }
    }
    // The bench error names the chain, the column and the token, on one line.
    let e = parse_chain("r_256,w_64_cach_128").unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid access chain 'r_256,w_64_cach_128': column 12 ('cach'): unknown persist \
         instruction: expected none, cache, cacheinv or nocache"
    );
}

#[test]
fn plans_reject_chains_that_cannot_fit_and_mixed_memories() {
    let c = AccessChain::parse("r_256,w_64_cache_128,w_64_cache_-128").unwrap();
    assert!(c.plan(256, 0).is_ok());
    let e = c.plan(128, 0).unwrap_err().to_string();
    assert!(
        e.contains("column 1") && e.contains("span 256 bytes"),
        "{e}"
    );
    let d = AccessChain::parse("r_64,rd_64").unwrap();
    let e = d.plan(1 << 20, 0).unwrap_err().to_string();
    assert!(e.contains("column 6") && e.contains("DRAM range"), "{e}");
    let m = AccessChain::parse("r_64,wd_64_none_64").unwrap();
    let e = m.plan(1 << 20, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("column 6") && e.contains("same memory"), "{e}");
}

#[test]
fn planned_addresses_follow_the_offsets_and_stay_in_bounds() {
    let pmem = 1 << 16;
    let dram = 1 << 12;
    let texts = [
        "r_256,w_64_cache_128,w_64_cache_-128",
        "r_512,r_512,r_512",
        "rd_2048,rd_2048,r_1024,w_64_none",
        "w_64_none_-4096,w_64_none_8192",
        "r_64,w_64_nocache_-64,w_64_nocache_-64,w_64_nocache_-64",
        "w_8_cacheinv_3,r_8",
    ];
    for text in texts {
        let c = AccessChain::parse(text).unwrap();
        let plan = c.plan(pmem, dram).unwrap();
        let mut rng = Rng::from_seed(7);
        for _ in 0..5000 {
            let seed = rng.next_u64();
            let mut data = Rng::from_seed(seed);
            let addrs = plan.addresses(seed, |_, _, _| data.next_u64());
            assert_eq!(addrs.len(), c.ops().len());
            for (i, ((mem, addr), op)) in addrs.iter().zip(c.ops()).enumerate() {
                assert_eq!(*mem, op.memory);
                let len = match mem {
                    MemoryKind::Pmem => pmem,
                    MemoryKind::Dram => dram,
                };
                assert!(
                    addr + op.size <= len,
                    "{text} op {i}: {addr}+{} > {len}",
                    op.size
                );
                match op.offset() {
                    Some(o) if i > 0 => {
                        assert_eq!(*addr as i64, addrs[i - 1].1 as i64 + o, "{text} op {i}")
                    }
                    None => assert_eq!(addr % op.size, 0, "{text} op {i} aligned"),
                    _ => {}
                }
            }
        }
    }
    // The hash-bucket example: write at a + 128, then at a.
    let c = AccessChain::parse("r_256,w_64_cache_128,w_64_cache_-128").unwrap();
    let plan = c.plan(pmem, 0).unwrap();
    let a = plan.addresses(99, |_, _, _| 5);
    assert_eq!(a[1].1, a[0].1 + 128);
    assert_eq!(a[2].1, a[0].1);
}

#[test]
fn addresses_depend_on_the_data_read() {
    let c = AccessChain::parse("r_64,r_64,r_64").unwrap();
    let plan = c.plan(1 << 30, 0).unwrap();
    let a = plan.addresses(1, |_, _, _| 111);
    let b = plan.addresses(1, |_, _, _| 222);
    assert_eq!(a[0], b[0], "the first address comes from the start value");
    assert_ne!(
        a[1], b[1],
        "the second depends on what the first read returned"
    );
}
