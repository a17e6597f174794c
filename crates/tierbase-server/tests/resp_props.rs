//! Property tests for the RESP request parser (`tierbase_server::resp`): no panics on any
//! input, exact round trips, truncation, pipelining, hostile lengths, inline requests.
//!
//! A tracking global allocator records the largest single allocation made by the current
//! thread, so the hostile-length tests can check that nothing is reserved in proportion to a
//! length the client merely claims.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use tierbase_server::resp::*;

/// Forwards to [`System`], recording the largest allocation size per thread.
struct TrackingAlloc;

thread_local! {
    static LARGEST_ALLOC: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    // `try_with` instead of `with`: allocations can happen while the thread is torn down.
    let _ = LARGEST_ALLOC.try_with(|largest| {
        if size > largest.get() {
            largest.set(size);
        }
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which implements
// `GlobalAlloc` correctly; the only extra work is updating a const-initialised thread-local
// `Cell`, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract, passed on unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (via this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc(new_size);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: TrackingAlloc = TrackingAlloc;

/// Runs `f`, returning its result and the largest single allocation it made on this thread.
fn largest_alloc_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST_ALLOC.with(|largest| largest.set(0));
    let result = f();
    (result, LARGEST_ALLOC.with(Cell::get))
}

/// Generous bound on what parsing may allocate before the claimed bytes arrive: the capped
/// argument vector (1024 slots of `Vec<u8>`) plus slack, far below any claimed length here.
const SMALL_ALLOC: usize = 64 * 1024;

fn encode_request(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    Reply::Array(args.iter().cloned().map(Reply::Bulk).collect()).encode(Protocol::Resp2, &mut out);
    out
}

fn parse(buf: &[u8]) -> Result<Option<Request>, ProtocolError> {
    parse_request(buf, &Limits::default())
}

fn protocol_error(msg: &str) -> Result<Option<Request>, ProtocolError> {
    Err(ProtocolError(msg.to_owned()))
}

/// Asserts the parse `f` finds its input an incomplete request, without allocating
/// [`SMALL_ALLOC`] or more on the way.
fn assert_incomplete_and_cheap(f: impl FnOnce() -> Result<Option<Request>, ProtocolError>) {
    let (result, largest) = largest_alloc_during(f);
    assert_eq!(result, Ok(None));
    assert!(largest < SMALL_ALLOC, "allocated {largest} bytes");
}

/// Arguments for round trips: 0..8 arguments of 0..300 arbitrary bytes.
fn args_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8)
}

/// Byte strings built from protocol fragments, to reach deeper parser states than uniform
/// random bytes do.
fn protocol_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let fragment = prop_oneof![
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"-".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\\x".to_vec()),
        Just(b" ".to_vec()),
        (0u64..20).prop_map(|n| n.to_string().into_bytes()),
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(fragment, 0..40).prop_map(|parts| parts.concat())
}

/// Checks the universal contract of one `parse_request` call.
fn check_contract(buf: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    if let Ok(Some(req)) = parse_request(buf, limits) {
        prop_assert!(req.consumed > 0, "consumed 0 bytes on {buf:?}");
        prop_assert!(
            req.consumed <= buf.len(),
            "consumed {} of {} bytes",
            req.consumed,
            buf.len()
        );
        // Parsing only the consumed bytes gives the same request.
        let again = parse_request(buf.get(..req.consumed).unwrap_or(&[]), limits);
        prop_assert_eq!(again, Ok(Some(req)));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        check_contract(&buf, &Limits::default())?;
    }

    #[test]
    fn protocol_like_bytes_never_panic(buf in protocol_like_bytes()) {
        check_contract(&buf, &Limits::default())?;
        // Tight limits exercise the size checks on the same inputs.
        let tight = Limits { max_bulk_len: 8, max_args: 3, max_inline_len: 16 };
        check_contract(&buf, &tight)?;
    }

    #[test]
    fn multibulk_round_trip(args in args_strategy()) {
        let buf = encode_request(&args);
        let req = parse(&buf).expect("valid request").expect("complete request");
        prop_assert_eq!(req.consumed, buf.len());
        prop_assert_eq!(req.args, args);
    }

    #[test]
    fn pipelined_round_trip(requests in prop::collection::vec(args_strategy(), 1..6), tail in 0usize..64) {
        let encoded: Vec<Vec<u8>> = requests.iter().map(|args| encode_request(args)).collect();
        let mut buf = encoded.concat();
        // A partial next request after the complete ones must not disturb them.
        let next = encode_request(&[b"PARTIAL".to_vec(), vec![b'x'; 100]]);
        let tail = tail.min(next.len() - 1);
        buf.extend_from_slice(&next[..tail]);

        let mut pos = 0;
        for (args, bytes) in requests.iter().zip(&encoded) {
            let req = parse(&buf[pos..]).expect("valid request").expect("complete request");
            prop_assert_eq!(req.consumed, bytes.len());
            prop_assert_eq!(&req.args, args);
            pos += req.consumed;
        }
        prop_assert_eq!(parse(&buf[pos..]), Ok(None));
    }

    #[test]
    fn strict_prefixes_are_incomplete(args in args_strategy()) {
        let buf = encode_request(&args);
        for cut in 0..buf.len() {
            prop_assert_eq!(parse(&buf[..cut]), Ok(None), "prefix of {} bytes", cut);
        }
    }

    #[test]
    fn claimed_arg_counts_allocate_nothing_proportional(n in any::<u64>()) {
        let buf = format!("*{n}\r\n");
        let (result, largest) = largest_alloc_during(|| parse(buf.as_bytes()));
        prop_assert!(largest < SMALL_ALLOC, "allocated {} bytes for {:?}", largest, buf);
        if n == 0 {
            prop_assert_eq!(result.map(|r| r.map(|r| (r.args.len(), r.consumed))), Ok(Some((0, buf.len()))));
        } else if n <= Limits::default().max_args as u64 {
            prop_assert_eq!(result, Ok(None));
        } else {
            prop_assert_eq!(result, protocol_error("invalid multibulk length"));
        }

        // With no argument limit, a huge claim is merely incomplete, and still cheap.
        let unlimited = Limits { max_args: usize::MAX, ..Limits::default() };
        let (result, largest) = largest_alloc_during(|| parse_request(buf.as_bytes(), &unlimited));
        prop_assert!(largest < SMALL_ALLOC, "allocated {} bytes for {:?}", largest, buf);
        if n == 0 {
            prop_assert!(matches!(result, Ok(Some(ref r)) if r.args.is_empty()));
        } else if n <= i64::MAX as u64 {
            prop_assert_eq!(result, Ok(None));
        } else {
            prop_assert_eq!(result, protocol_error("invalid multibulk length"));
        }
    }

    #[test]
    fn claimed_bulk_lengths_allocate_nothing_proportional(len in 0u64..(1 << 40), body in 0usize..64) {
        let mut buf = format!("*1\r\n${len}\r\n").into_bytes();
        let body = body.min(usize::try_from(len).unwrap_or(usize::MAX));
        buf.resize(buf.len() + body, b'z');
        let (result, largest) = largest_alloc_during(|| parse(&buf));
        prop_assert!(largest < SMALL_ALLOC, "allocated {} bytes for {:?}", largest, buf);
        if len > Limits::default().max_bulk_len as u64 {
            prop_assert_eq!(result, protocol_error("invalid bulk length"));
        } else {
            // At most `len` payload bytes and no trailing CRLF: never complete.
            prop_assert_eq!(result, Ok(None));
        }
    }

    #[test]
    fn inline_round_trip(args in prop::collection::vec("[a-zA-Z0-9]{1,10}", 1..8)) {
        let line = format!("{}\r\n", args.join(" "));
        let req = parse(line.as_bytes()).expect("valid request").expect("complete request");
        prop_assert_eq!(req.consumed, line.len());
        let want: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        prop_assert_eq!(req.args, want);
    }

    #[test]
    fn inline_quoted_round_trip(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)) {
        // Double-quote every argument, escaping everything that is not plain printable ASCII.
        let mut line = Vec::new();
        for arg in &args {
            line.push(b'"');
            for &b in arg {
                match b {
                    b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                    0x20..=0x7e => line.push(b),
                    _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                }
            }
            line.extend_from_slice(b"\" ");
        }
        line.extend_from_slice(b"\n");
        let req = parse(&line).expect("valid request").expect("complete request");
        prop_assert_eq!(req.consumed, line.len());
        prop_assert_eq!(req.args, args);
    }
}

#[test]
fn huge_arg_count_is_incomplete_and_cheap() {
    // Redis's own limit is INT_MAX; with the default `max_args` (1024*1024) the same claim
    // is rejected outright.
    assert_eq!(
        parse(b"*2147483647\r\n"),
        protocol_error("invalid multibulk length")
    );
    let unlimited = Limits {
        max_args: usize::MAX,
        ..Limits::default()
    };
    for buf in [
        &b"*2147483647\r\n"[..],
        b"*2147483647\r\n$1\r\na\r\n$3\r\nab",
    ] {
        assert_incomplete_and_cheap(|| parse_request(buf, &unlimited));
    }
}

#[test]
fn huge_bulk_length_is_rejected_or_cheap() {
    assert_eq!(
        parse(b"*1\r\n$999999999999\r\n"),
        protocol_error("invalid bulk length")
    );
    // Just under the 512 MiB limit: incomplete, and nothing reserved for it.
    assert_incomplete_and_cheap(|| parse(b"*1\r\n$536870000\r\nabc"));
}

#[test]
fn nested_arrays_are_rejected() {
    assert_eq!(
        parse(b"*1\r\n*1\r\n$1\r\na\r\n"),
        protocol_error("expected '$', got '*'")
    );
    let err = parse(b"*1\r\n*1\r\n$1\r\na\r\n").unwrap_err();
    assert_eq!(err.to_string(), "Protocol error: expected '$', got '*'");
}
