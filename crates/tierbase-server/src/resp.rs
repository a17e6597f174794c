//! The RESP wire format: parsing requests and encoding replies, in RESP2 and RESP3.
//!
//! This module owns the bytes on the wire and nothing else:
//! - [`parse_request`] turns the start of a connection's read buffer into one [`Request`]
//!   (a multibulk `*<n>\r\n$<len>\r\n...` request or an inline `cmd arg "quoted arg"\r\n`
//!   line; [`parse_request_into`] does the same but lends a multibulk request's arguments
//!   from the buffer instead of copying them), following Redis's server rules
//!   (`networking.c`: `processMultibulkBuffer`, `processInlineBuffer`, and `sdssplitargs`
//!   for inline quoting), including its error messages and its size limits ([`Limits`]);
//! - [`Reply::encode`] appends a reply value in the connection's [`Protocol`], mapping
//!   RESP3-only types (maps, sets, doubles, booleans, verbatim strings, null) onto their
//!   RESP2 equivalents the way Redis does.
//!
//! It must not touch sockets, buffering or connection state (callers own the read buffer
//! and drop `consumed` bytes themselves), command names or semantics, or the store. Every
//! function is pure (`parse_request_into` writes only into the argument list it is lent),
//! allocation-bounded by the bytes actually received (never by a length a client merely
//! claims) and panic-free on arbitrary input.

use std::borrow::Cow;
use std::io::Write as _;

/// Largest number of argument slots reserved up front for a multibulk request, whatever
/// count the client claims; the vector grows as arguments actually arrive.
const MAX_PREALLOC_ARGS: usize = 1024;

/// Longest textual integer Redis's `string2ll` accepts (`LONG_STR_SIZE - 1`).
const MAX_INT_TEXT_LEN: usize = 20;

/// Request-size limits (Redis: `proto-max-bulk-len` 512 MiB, at most 1024*1024 multibulk
/// arguments, inline requests and header lines up to 64 KiB).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest accepted bulk-string argument, in bytes (`$<len>` above it is an error).
    pub max_bulk_len: usize,
    /// Largest accepted multibulk argument count (`*<n>` above it is an error).
    pub max_args: usize,
    /// Longest inline request line, and longest `*`/`$` header line, without its line end.
    pub max_inline_len: usize,
}

impl Default for Limits {
    /// Redis's defaults: 512 MiB bulk strings, 1,048,576 arguments, 64 KiB inline lines.
    fn default() -> Self {
        Self {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// A protocol error: the connection gets `-ERR Protocol error: <msg>` and is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The arguments, command name first. Empty for an empty request (`*0\r\n`, `*-1\r\n`,
    /// or a blank inline line), which the caller skips.
    pub args: Vec<Vec<u8>>,
    /// How many bytes at the start of the buffer this request used (always at least 1).
    pub consumed: usize,
}

/// Parses the first request at the start of `buf`: `Ok(Some(req))` when a whole request is
/// there (`req.consumed` = bytes it used), `Ok(None)` when more bytes are needed, `Err` on
/// malformed or oversized input.
///
/// A buffer starting with `*` is a multibulk request; anything else is an inline request
/// (one line ending in `\n`, optionally `\r\n`, split into arguments like Redis's
/// `sdssplitargs`). The function keeps no state: after `Ok(None)` the caller appends more
/// bytes and calls it again on the whole buffer. Nothing is allocated in proportion to a
/// claimed count or length before the corresponding bytes have arrived.
///
/// Deliberate differences from Redis, none of which a well-formed request can observe:
/// a bulk string must be followed by exactly `\r\n` (Redis skips any two bytes); a `\r` in
/// a header line must be followed by `\n`; and an over-long inline or header line is
/// reported as too big even when its line end arrived in the same read.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    let mut args = Vec::new();
    Ok(match parse_request_into(buf, limits, &mut args)? {
        None => None,
        Some(Parsed::Borrowed { consumed }) => Some(Request {
            args: args.iter().map(|a| a.to_vec()).collect(),
            consumed,
        }),
        Some(Parsed::Owned(req)) => Some(req),
    })
}

/// A request parsed by [`parse_request_into`].
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A multibulk request, its arguments in the caller's list, borrowed from the buffer.
    Borrowed {
        /// Bytes at the start of the buffer it used.
        consumed: usize,
    },
    /// An inline request: its arguments are unescaped, so they are owned (people type these;
    /// clients send multibulk).
    Owned(Request),
}

/// [`parse_request`] without copying a multibulk request's arguments: they are put in `args`
/// (emptied first) as slices of `buf`, so a server reading a pipeline allocates nothing per
/// request. `args` is left empty unless the result is `Ok(Some(Parsed::Borrowed { .. }))`.
pub fn parse_request_into<'a>(
    buf: &'a [u8],
    limits: &Limits,
    args: &mut Vec<&'a [u8]>,
) -> Result<Option<Parsed>, ProtocolError> {
    args.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => match parse_multibulk(buf, limits, args) {
            Ok(Some(consumed)) => Ok(Some(Parsed::Borrowed { consumed })),
            incomplete_or_bad => {
                // Not a request: nothing of it stays in the list.
                args.clear();
                incomplete_or_bad.map(|_| None)
            }
        },
        Some(_) => Ok(parse_inline(buf, limits)?.map(Parsed::Owned)),
    }
}

/// Parses a request starting with `*` into `args`; the bytes it used.
fn parse_multibulk<'a>(
    buf: &'a [u8],
    limits: &Limits,
    args: &mut Vec<&'a [u8]>,
) -> Result<Option<usize>, ProtocolError> {
    const INVALID: &str = "invalid multibulk length";
    let Some(cr) = find_header_end(buf, 0, limits, "too big mbulk count string")? else {
        return Ok(None);
    };
    let count =
        parse_i64(buf.get(1..cr).unwrap_or(&[])).ok_or_else(|| ProtocolError::new(INVALID))?;
    let Some(mut pos) = after_line_end(buf, cr, INVALID)? else {
        return Ok(None);
    };
    if count <= 0 {
        return Ok(Some(pos));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&n| n <= limits.max_args)
        .ok_or_else(|| ProtocolError::new(INVALID))?;

    args.reserve(count.min(MAX_PREALLOC_ARGS));
    for _ in 0..count {
        let Some((arg, next)) = parse_bulk(buf, pos, limits)? else {
            return Ok(None);
        };
        args.push(arg);
        pos = next;
    }
    Ok(Some(pos))
}

/// Parses one `$<len>\r\n<payload>\r\n` element at `pos`: the payload and the position just
/// past it, `None` when incomplete.
fn parse_bulk<'a>(
    buf: &'a [u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, ProtocolError> {
    const INVALID: &str = "invalid bulk length";
    // Redis looks for the header's line end before checking the type byte.
    let Some(cr) = find_header_end(buf, pos, limits, "too big bulk count string")? else {
        return Ok(None);
    };
    match buf.get(pos) {
        Some(b'$') => {}
        Some(&c) => {
            return Err(ProtocolError(format!("expected '$', got '{}'", c as char)));
        }
        None => return Ok(None),
    }
    let len = pos
        .checked_add(1)
        .and_then(|start| buf.get(start..cr))
        .and_then(parse_i64)
        .and_then(|len| usize::try_from(len).ok())
        .filter(|&len| len <= limits.max_bulk_len)
        .ok_or_else(|| ProtocolError::new(INVALID))?;
    let Some(start) = after_line_end(buf, cr, INVALID)? else {
        return Ok(None);
    };
    let end = start
        .checked_add(len)
        .ok_or_else(|| ProtocolError::new(INVALID))?;
    let next = end
        .checked_add(2)
        .ok_or_else(|| ProtocolError::new(INVALID))?;
    if buf.len() < next {
        return Ok(None);
    }
    if buf.get(end..next) != Some(b"\r\n".as_slice()) {
        return Err(ProtocolError::new("expected CRLF after bulk string"));
    }
    match buf.get(start..end) {
        Some(payload) => Ok(Some((payload, next))),
        None => Ok(None),
    }
}

/// Finds the `\r` ending the header line whose type byte is at `pos`. `Ok(None)` when it has
/// not arrived yet; `too_big` when more than `limits.max_inline_len` bytes follow without
/// one (only that many bytes are ever scanned).
fn find_header_end(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
    too_big: &str,
) -> Result<Option<usize>, ProtocolError> {
    let rest = buf.get(pos..).unwrap_or(&[]);
    let window = rest
        .get(..limits.max_inline_len.saturating_add(1))
        .unwrap_or(rest);
    match window.iter().position(|&b| b == b'\r') {
        Some(cr) => Ok(pos.checked_add(cr)),
        None if rest.len() > limits.max_inline_len => Err(ProtocolError::new(too_big)),
        None => Ok(None),
    }
}

/// Checks that the `\r` at `cr` is followed by `\n`, returning the position after both.
fn after_line_end(buf: &[u8], cr: usize, invalid: &str) -> Result<Option<usize>, ProtocolError> {
    let Some(lf) = cr.checked_add(1) else {
        return Err(ProtocolError::new(invalid));
    };
    match buf.get(lf) {
        None => Ok(None),
        Some(b'\n') => Ok(lf.checked_add(1)),
        Some(_) => Err(ProtocolError::new(invalid)),
    }
}

/// Parses a decimal `i64` exactly like Redis's `string2ll`: optional `-`, then digits with
/// no leading zero (except `0` itself), no `+`, no spaces, at most 20 characters, no overflow.
fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > MAX_INT_TEXT_LEN {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut value: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(d.wrapping_sub(b'0')))?;
    }
    if negative {
        0i64.checked_sub_unsigned(value)
    } else {
        i64::try_from(value).ok()
    }
}

/// Parses an inline request: one line ending in `\n` (an optional `\r` before it is dropped).
fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Option<Request>, ProtocolError> {
    let window = buf
        .get(..limits.max_inline_len.saturating_add(1))
        .unwrap_or(buf);
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::new("too big inline request"));
        }
        return Ok(None);
    };
    let mut line = buf.get(..nl).unwrap_or(&[]);
    if let Some((b'\r', head)) = line.split_last() {
        line = head;
    }
    let args =
        split_args(line).ok_or_else(|| ProtocolError::new("unbalanced quotes in request"))?;
    Ok(Some(Request {
        args,
        consumed: nl.saturating_add(1),
    }))
}

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The value of an ASCII hex digit.
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline line into arguments like Redis's `sdssplitargs`: arguments are separated
/// by whitespace; `"..."` strings understand `\n \r \t \b \a \xHH` and `\<any>` (that
/// character); `'...'` strings understand only `\'`; a closing quote must be followed by
/// whitespace or the end of the line. `None` on unbalanced or badly closed quotes.
///
/// Unlike C, a NUL byte is ordinary data here (the end of the slice ends the line).
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mode {
        Plain,
        Double,
        Single,
    }

    let mut args = Vec::new();
    let mut i = 0usize;
    loop {
        while line.get(i).copied().is_some_and(is_c_space) {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut mode = Mode::Plain;
        loop {
            let c = line.get(i).copied();
            let next = line.get(i + 1).copied();
            match mode {
                Mode::Double => match c {
                    None => return None,
                    Some(b'\\') if next == Some(b'x') => {
                        let hi = line.get(i + 2).copied().and_then(hex_value);
                        let lo = line.get(i + 3).copied().and_then(hex_value);
                        if let (Some(hi), Some(lo)) = (hi, lo) {
                            current.push(hi * 16 + lo);
                            i += 4;
                        } else {
                            current.push(b'x');
                            i += 2;
                        }
                    }
                    Some(b'\\') if next.is_some() => {
                        current.push(match next {
                            Some(b'n') => b'\n',
                            Some(b'r') => b'\r',
                            Some(b't') => b'\t',
                            Some(b'b') => 0x08,
                            Some(b'a') => 0x07,
                            Some(other) => other,
                            None => b'\\',
                        });
                        i += 2;
                    }
                    Some(b'"') => {
                        if next.is_some_and(|n| !is_c_space(n)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        current.push(other);
                        i += 1;
                    }
                },
                Mode::Single => match c {
                    None => return None,
                    Some(b'\\') if next == Some(b'\'') => {
                        current.push(b'\'');
                        i += 2;
                    }
                    Some(b'\'') => {
                        if next.is_some_and(|n| !is_c_space(n)) {
                            return None;
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        current.push(other);
                        i += 1;
                    }
                },
                Mode::Plain => match c {
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t') => {
                        i += 1;
                        break;
                    }
                    Some(b'"') => {
                        mode = Mode::Double;
                        i += 1;
                    }
                    Some(b'\'') => {
                        mode = Mode::Single;
                        i += 1;
                    }
                    Some(other) => {
                        current.push(other);
                        i += 1;
                    }
                },
            }
        }
        args.push(current);
    }
}

/// Which protocol a connection speaks (HELLO switches it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, the default for new connections.
    Resp2,
    /// RESP3, selected with `HELLO 3`.
    Resp3,
}

/// A reply value.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A simple string, `+OK`. Any `\r` or `\n` inside is sent as a space.
    Simple(Cow<'static, str>),
    /// An error, `-ERR ...`: the string already includes the prefix word, e.g.
    /// `"ERR unknown command"` or `"WRONGTYPE ..."`. Any `\r` or `\n` inside is sent as a space.
    Error(String),
    /// An integer, `:n`.
    Integer(i64),
    /// A bulk string, `$len`.
    Bulk(Vec<u8>),
    /// A missing value: RESP2 `$-1`, RESP3 `_`.
    Nil,
    /// A missing array: RESP2 `*-1`, RESP3 `_`.
    NilArray,
    /// An array, `*n`.
    Array(Vec<Reply>),
    /// A map: RESP3 `%n`; RESP2 a flat array of 2n elements (key, value, key, value, ...).
    Map(Vec<(Reply, Reply)>),
    /// A set: RESP3 `~n`; RESP2 an array.
    Set(Vec<Reply>),
    /// A double: RESP3 `,<x>` (`inf`, `-inf`, `nan` for the special values); RESP2 a bulk
    /// string of the same text. Finite values use the shortest text that reads back exactly.
    Double(f64),
    /// A boolean: RESP3 `#t` / `#f`; RESP2 the integer 1 / 0.
    Boolean(bool),
    /// A verbatim text string: RESP3 `=<len>\r\ntxt:<text>` (`len` counts `txt:`); RESP2 a
    /// bulk string of the text.
    Verbatim(String),
}

impl Reply {
    /// Appends the encoding of `self` in `proto` to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut Vec<u8>) {
        let resp3 = proto == Protocol::Resp3;
        match self {
            Reply::Simple(s) => {
                out.push(b'+');
                push_line_text(out, s);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Error(s) => {
                out.push(b'-');
                push_line_text(out, s);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Integer(n) => {
                out.push(b':');
                push_i64(out, *n);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Bulk(b) => push_bulk(out, b),
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                push_header(out, b'*', items.len());
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    push_header(out, b'%', pairs.len());
                } else {
                    push_header(out, b'*', pairs.len().saturating_mul(2));
                }
                for (key, value) in pairs {
                    key.encode(proto, out);
                    value.encode(proto, out);
                }
            }
            Reply::Set(items) => {
                push_header(out, if resp3 { b'~' } else { b'*' }, items.len());
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Double(d) if resp3 => {
                out.push(b',');
                push_double(out, *d);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Double(d) => {
                let mut text = Vec::with_capacity(32);
                push_double(&mut text, *d);
                push_bulk(out, &text);
            }
            Reply::Boolean(b) if resp3 => {
                out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" });
            }
            Reply::Boolean(b) => out.extend_from_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            Reply::Verbatim(text) if resp3 => {
                push_header(out, b'=', text.len().saturating_add(4));
                out.extend_from_slice(b"txt:");
                out.extend_from_slice(text.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Reply::Verbatim(text) => push_bulk(out, text.as_bytes()),
        }
    }

    /// The simple-string reply `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple(Cow::Borrowed("OK"))
    }

    /// An error reply; `msg` starts with the error code word, e.g. `"ERR syntax error"`.
    pub fn error(msg: impl Into<String>) -> Reply {
        Reply::Error(msg.into())
    }

    /// A bulk-string reply.
    pub fn bulk(b: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(b.into())
    }
}

/// Appends `s` with every `\r` and `\n` replaced by a space, so it stays on one line.
fn push_line_text(out: &mut Vec<u8>, s: &str) {
    out.extend(
        s.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
}

/// Appends `$<len>\r\n<bytes>\r\n`.
fn push_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    // Room for all of it at once: appended in pieces, a large value's trailing CRLF would
    // double the buffer (an 8 MB GET took 16 MB).
    out.reserve(bytes.len() + 24);
    push_header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends `<prefix><n>\r\n`.
fn push_header(out: &mut Vec<u8>, prefix: u8, n: usize) {
    out.push(prefix);
    push_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal text of `n` without allocating.
fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

/// Appends the decimal text of `n` without allocating.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let start = out.len();
    loop {
        // `n % 10 < 10`, so the narrowing cast is exact.
        out.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if let Some(digits) = out.get_mut(start..) {
        digits.reverse();
    }
}

/// Appends the RESP3 text of a double: `inf`, `-inf`, `nan`, or the shortest decimal that
/// reads back to the same value (exponent notation outside `1e-5 <= |d| < 1e17`).
fn push_double(out: &mut Vec<u8>, d: f64) {
    if d.is_nan() {
        out.extend_from_slice(b"nan");
    } else if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 { b"inf" } else { b"-inf" });
    } else {
        let magnitude = d.abs();
        // Writing into a `Vec` cannot fail.
        let _ = if magnitude == 0.0 || (1e-5..1e17).contains(&magnitude) {
            write!(out, "{d}")
        } else {
            write!(out, "{d:e}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(buf: &[u8]) -> Result<Option<Request>, ProtocolError> {
        parse_request(buf, &Limits::default())
    }

    fn args(list: &[&[u8]]) -> Vec<Vec<u8>> {
        list.iter().map(|a| a.to_vec()).collect()
    }

    fn err(msg: &str) -> Result<Option<Request>, ProtocolError> {
        Err(ProtocolError(msg.to_owned()))
    }

    fn enc(reply: &Reply, proto: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        reply.encode(proto, &mut out);
        out
    }

    fn both(reply: Reply, resp2: &[u8], resp3: &[u8]) {
        assert_eq!(
            enc(&reply, Protocol::Resp2),
            resp2,
            "RESP2 encoding of {reply:?}"
        );
        assert_eq!(
            enc(&reply, Protocol::Resp3),
            resp3,
            "RESP3 encoding of {reply:?}"
        );
    }

    #[test]
    fn multibulk_basic() {
        let req = parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"GET", b"k"]));
        assert_eq!(req.consumed, 20);
        // Empty and binary payloads.
        let req = parse(b"*2\r\n$0\r\n\r\n$3\r\n\r\n\0\r\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"", b"\r\n\0"]));
    }

    /// A multibulk request's arguments come back as slices of the buffer itself (nothing
    /// copied), equal to what `parse_request` copies; an inline request's are owned; the
    /// list is emptied on every call.
    #[test]
    fn parse_into_borrows_multibulk_arguments() {
        let buf: &[u8] = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
        let limits = Limits::default();
        let mut into = vec![&b"stale"[..]];
        let parsed = parse_request_into(buf, &limits, &mut into)
            .unwrap()
            .unwrap();
        assert_eq!(parsed, Parsed::Borrowed { consumed: 26 });
        let copied = parse(buf).unwrap().unwrap();
        assert_eq!(copied.consumed, 26);
        assert_eq!(
            into.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
            copied.args
        );
        let range = buf.as_ptr_range();
        for arg in &into {
            assert!(
                range.contains(&arg.as_ptr()) || arg.is_empty(),
                "{arg:?} not borrowed"
            );
        }
        assert_eq!(into[1].as_ptr(), buf[17..].as_ptr());
        // The next request, from where the first ended.
        let parsed = parse_request_into(&buf[26..], &limits, &mut into)
            .unwrap()
            .unwrap();
        assert_eq!(parsed, Parsed::Borrowed { consumed: 14 });
        assert_eq!(into, vec![&b"PING"[..]]);
        // Incomplete: nothing left in the list.
        assert_eq!(parse_request_into(&buf[..20], &limits, &mut into), Ok(None));
        assert!(into.is_empty());
        let parsed = parse_request_into(b"get 'a b'\r\n", &limits, &mut into)
            .unwrap()
            .unwrap();
        assert_eq!(
            parsed,
            Parsed::Owned(Request {
                args: args(&[b"get", b"a b"]),
                consumed: 11
            })
        );
        assert!(into.is_empty());
    }

    #[test]
    fn multibulk_empty_requests() {
        for (buf, consumed) in [(&b"*0\r\n"[..], 4), (b"*-1\r\n", 5), (b"*-7\r\nPING", 5)] {
            let req = parse(buf).unwrap().unwrap();
            assert!(req.args.is_empty());
            assert_eq!(req.consumed, consumed);
        }
    }

    #[test]
    fn multibulk_incomplete() {
        let full: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "prefix of {cut} bytes");
        }
    }

    #[test]
    fn multibulk_invalid_count() {
        for buf in [
            &b"*x\r\n"[..],
            b"*\r\n",
            b"*+1\r\n",
            b"* 1\r\n",
            b"*1 \r\n",
            b"*01\r\n",
            b"*-0\r\n",
            b"*-\r\n",
            b"*1048577\r\n",
            b"*99999999999999999999\r\n",
            b"*18446744073709551615\r\n",
            b"*1\rX",
        ] {
            assert_eq!(parse(buf), err("invalid multibulk length"), "{buf:?}");
        }
        // The largest allowed count is not an error, just incomplete.
        assert_eq!(parse(b"*1048576\r\n"), Ok(None));
    }

    #[test]
    fn multibulk_expected_dollar() {
        assert_eq!(
            parse(b"*1\r\n*1\r\n$1\r\na\r\n"),
            err("expected '$', got '*'")
        );
        assert_eq!(parse(b"*1\r\n:1\r\n"), err("expected '$', got ':'"));
        assert_eq!(parse(b"*1\r\n\r\n"), err("expected '$', got '\r'"));
        // Like Redis, the type byte is judged once the header line's CR is there.
        assert_eq!(parse(b"*1\r\n*1"), Ok(None));
    }

    #[test]
    fn multibulk_invalid_bulk_length() {
        for buf in [
            &b"*1\r\n$-1\r\n"[..],
            b"*1\r\n$x\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$+3\r\n",
            b"*1\r\n$03\r\n",
            b"*1\r\n$ 3\r\n",
            b"*1\r\n$536870913\r\n",
            b"*1\r\n$999999999999\r\n",
            b"*1\r\n$99999999999999999999999\r\n",
            b"*1\r\n$3\rX",
        ] {
            assert_eq!(parse(buf), err("invalid bulk length"), "{buf:?}");
        }
        // The largest allowed length is incomplete, and nothing was reserved for it.
        assert_eq!(parse(b"*1\r\n$536870912\r\n"), Ok(None));
    }

    #[test]
    fn multibulk_missing_crlf_after_payload() {
        assert_eq!(
            parse(b"*1\r\n$3\r\nGETxx"),
            err("expected CRLF after bulk string")
        );
        assert_eq!(
            parse(b"*1\r\n$3\r\nGET\rx"),
            err("expected CRLF after bulk string")
        );
        assert_eq!(parse(b"*1\r\n$3\r\nGET\r"), Ok(None));
    }

    #[test]
    fn multibulk_header_too_long() {
        let limits = Limits::default();
        let mut buf = b"*".to_vec();
        buf.resize(limits.max_inline_len, b'1');
        assert_eq!(parse(&buf), Ok(None));
        buf.push(b'1');
        assert_eq!(parse(&buf), err("too big mbulk count string"));

        let mut buf = b"*1\r\n$".to_vec();
        buf.resize(4 + limits.max_inline_len, b'1');
        assert_eq!(parse(&buf), Ok(None));
        buf.push(b'1');
        assert_eq!(parse(&buf), err("too big bulk count string"));
    }

    #[test]
    fn custom_limits() {
        let limits = Limits {
            max_bulk_len: 3,
            max_args: 2,
            max_inline_len: 8,
        };
        let p = |b: &[u8]| parse_request(b, &limits);
        assert_eq!(
            p(b"*2\r\n$3\r\nabc\r\n$0\r\n\r\n").unwrap().unwrap().args,
            args(&[b"abc", b""])
        );
        assert_eq!(p(b"*3\r\n"), err("invalid multibulk length"));
        assert_eq!(p(b"*1\r\n$4\r\n"), err("invalid bulk length"));
        assert_eq!(p(b"12345678"), Ok(None));
        assert_eq!(p(b"123456789"), err("too big inline request"));
        assert_eq!(p(b"1234567\r\n").unwrap().unwrap().consumed, 9);
    }

    #[test]
    fn pipelined_requests() {
        let buf: &[u8] =
            b"*1\r\n$4\r\nPING\r\nset k \"v v\"\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n";
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some(req) = parse(&buf[pos..]).unwrap() {
            assert!(req.consumed > 0);
            pos += req.consumed;
            got.push(req.args);
        }
        assert_eq!(pos, buf.len());
        assert_eq!(
            got,
            vec![
                args(&[b"PING"]),
                args(&[b"set", b"k", b"v v"]),
                args(&[b"SET", b"a", b"b"]),
            ]
        );
    }

    #[test]
    fn inline_basic() {
        let req = parse(b"PING\r\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"PING"]));
        assert_eq!(req.consumed, 6);
        let req = parse(b"  set\tk   v \nrest").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"set", b"k", b"v"]));
        assert_eq!(req.consumed, 13);
        assert_eq!(parse(b"PING"), Ok(None));
        assert_eq!(parse(b"PING\r"), Ok(None));
    }

    #[test]
    fn inline_empty_lines() {
        for (buf, consumed) in [(&b"\r\n"[..], 2), (b"\n", 1), (b"   \t \r\n", 7)] {
            let req = parse(buf).unwrap().unwrap();
            assert!(req.args.is_empty());
            assert_eq!(req.consumed, consumed);
        }
    }

    #[test]
    fn inline_quoting() {
        let req = parse(b"set \"a b\" 'c\\'d' \"\\x41\"\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(req.args, args(&[b"set", b"a b", b"c'd", b"A"]));

        let req = parse(b"x \"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(req.args, args(&[b"x", b"\n\r\t\x08\x07\\\"q"]));
        // \x needs two hex digits, otherwise it is just 'x'.
        let req = parse(b"\"\\xZZ\\x4\" \"\\xfF\"\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"xZZx4", b"\xff"]));
        // Single quotes only know \'.
        let req = parse(b"'a\\nb\\\"' ''\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"a\\nb\\\"", b""]));
        // Quotes may start mid-argument and end at the line end.
        let req = parse(b"ab\"c d\"\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"abc d"]));
        // Vertical tab and form feed separate arguments only between them.
        let req = parse(b"a\x0bb \x0c c\n").unwrap().unwrap();
        assert_eq!(req.args, args(&[b"a\x0bb", b"c"]));
    }

    #[test]
    fn inline_unbalanced_quotes() {
        for buf in [
            &b"set \"a b\r\n"[..],
            b"set 'a b\r\n",
            b"set \"a\"b\r\n",
            b"set 'a'b\r\n",
            b"set \"a\\\"\r\n",
            b"set 'a\\'\r\n",
            b"\"\n",
        ] {
            assert_eq!(parse(buf), err("unbalanced quotes in request"), "{buf:?}");
        }
    }

    #[test]
    fn inline_too_big() {
        let limits = Limits::default();
        let mut buf = vec![b'a'; limits.max_inline_len];
        assert_eq!(parse(&buf), Ok(None));
        buf.push(b'a');
        assert_eq!(parse(&buf), err("too big inline request"));
        // A line of exactly the limit is fine.
        let mut buf = vec![b'a'; limits.max_inline_len];
        buf.push(b'\n');
        assert_eq!(parse(&buf).unwrap().unwrap().args.len(), 1);
    }

    #[test]
    fn protocol_error_display() {
        assert_eq!(
            ProtocolError("invalid bulk length".into()).to_string(),
            "Protocol error: invalid bulk length"
        );
    }

    #[test]
    fn integers_parse_like_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"00",
            b"-0",
            b"01",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn encode_scalars() {
        both(Reply::ok(), b"+OK\r\n", b"+OK\r\n");
        both(Reply::Simple("a\r\nb".into()), b"+a  b\r\n", b"+a  b\r\n");
        both(
            Reply::error("ERR unknown command"),
            b"-ERR unknown command\r\n",
            b"-ERR unknown command\r\n",
        );
        both(
            Reply::error("WRONGTYPE bad\r\nline"),
            b"-WRONGTYPE bad  line\r\n",
            b"-WRONGTYPE bad  line\r\n",
        );
        both(Reply::Integer(0), b":0\r\n", b":0\r\n");
        both(Reply::Integer(42), b":42\r\n", b":42\r\n");
        both(Reply::Integer(-7), b":-7\r\n", b":-7\r\n");
        both(
            Reply::Integer(i64::MAX),
            b":9223372036854775807\r\n",
            b":9223372036854775807\r\n",
        );
        both(
            Reply::Integer(i64::MIN),
            b":-9223372036854775808\r\n",
            b":-9223372036854775808\r\n",
        );
        both(Reply::bulk("hi"), b"$2\r\nhi\r\n", b"$2\r\nhi\r\n");
        both(Reply::bulk(Vec::new()), b"$0\r\n\r\n", b"$0\r\n\r\n");
        both(
            Reply::bulk(&b"a\r\nb"[..]),
            b"$4\r\na\r\nb\r\n",
            b"$4\r\na\r\nb\r\n",
        );
        both(Reply::Nil, b"$-1\r\n", b"_\r\n");
        both(Reply::NilArray, b"*-1\r\n", b"_\r\n");
        both(Reply::Boolean(true), b":1\r\n", b"#t\r\n");
        both(Reply::Boolean(false), b":0\r\n", b"#f\r\n");
        both(
            Reply::Verbatim("Some string".into()),
            b"$11\r\nSome string\r\n",
            b"=15\r\ntxt:Some string\r\n",
        );
        both(
            Reply::Verbatim(String::new()),
            b"$0\r\n\r\n",
            b"=4\r\ntxt:\r\n",
        );
    }

    #[test]
    fn encode_doubles() {
        both(Reply::Double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n");
        both(Reply::Double(3.0), b"$1\r\n3\r\n", b",3\r\n");
        both(Reply::Double(-0.1), b"$4\r\n-0.1\r\n", b",-0.1\r\n");
        both(Reply::Double(0.0), b"$1\r\n0\r\n", b",0\r\n");
        both(Reply::Double(1e300), b"$5\r\n1e300\r\n", b",1e300\r\n");
        both(Reply::Double(1.5e-7), b"$6\r\n1.5e-7\r\n", b",1.5e-7\r\n");
        both(Reply::Double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n");
        both(
            Reply::Double(f64::NEG_INFINITY),
            b"$4\r\n-inf\r\n",
            b",-inf\r\n",
        );
        both(Reply::Double(f64::NAN), b"$3\r\nnan\r\n", b",nan\r\n");
        // Finite doubles read back exactly.
        for d in [
            0.1,
            1.0 / 3.0,
            123456.789,
            1e16,
            1e17,
            2.5e-5,
            9.9e-6,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let out = enc(&Reply::Double(d), Protocol::Resp3);
            let text = std::str::from_utf8(&out[1..out.len() - 2]).unwrap();
            assert_eq!(text.parse::<f64>().unwrap(), d, "{text}");
        }
    }

    #[test]
    fn encode_aggregates() {
        both(Reply::Array(Vec::new()), b"*0\r\n", b"*0\r\n");
        both(
            Reply::Array(vec![
                Reply::bulk("a"),
                Reply::Integer(1),
                Reply::Nil,
                Reply::Array(vec![Reply::ok()]),
            ]),
            b"*4\r\n$1\r\na\r\n:1\r\n$-1\r\n*1\r\n+OK\r\n",
            b"*4\r\n$1\r\na\r\n:1\r\n_\r\n*1\r\n+OK\r\n",
        );
        both(
            Reply::Map(vec![
                (Reply::bulk("k"), Reply::Integer(1)),
                (Reply::Simple("b".into()), Reply::Boolean(true)),
            ]),
            b"*4\r\n$1\r\nk\r\n:1\r\n+b\r\n:1\r\n",
            b"%2\r\n$1\r\nk\r\n:1\r\n+b\r\n#t\r\n",
        );
        both(Reply::Map(Vec::new()), b"*0\r\n", b"%0\r\n");
        both(
            Reply::Set(vec![Reply::bulk("x"), Reply::Double(2.5)]),
            b"*2\r\n$1\r\nx\r\n$3\r\n2.5\r\n",
            b"~2\r\n$1\r\nx\r\n,2.5\r\n",
        );
        both(Reply::Set(Vec::new()), b"*0\r\n", b"~0\r\n");
    }

    #[test]
    fn encode_appends() {
        let mut out = b"prefix".to_vec();
        Reply::Integer(5).encode(Protocol::Resp2, &mut out);
        Reply::ok().encode(Protocol::Resp3, &mut out);
        assert_eq!(out, b"prefix:5\r\n+OK\r\n");
    }

    #[test]
    fn encoded_request_round_trips() {
        let want = args(&[b"SET", b"key", b"\r\n\0\xff"]);
        let reply = Reply::Array(want.iter().cloned().map(Reply::Bulk).collect());
        let buf = enc(&reply, Protocol::Resp2);
        let req = parse(&buf).unwrap().unwrap();
        assert_eq!(req.args, want);
        assert_eq!(req.consumed, buf.len());
    }
}
