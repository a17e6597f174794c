//! Small parsing helpers shared by commands.

use std::path::Path;

use anyhow::{Context, bail};

/// Parses a size such as `4096`, `64K`, `256M`, `10G`, `1T`, `512KiB`, `2GB` (binary
/// multiples: K = 1024); the message says what is wrong (for clap value parsers).
pub fn parse_size(s: &str) -> Result<u64, String> {
    tierbase_bench::units::parse_size(s).map_err(|e| e.to_string())
}

/// [`parse_size`] for an option held in a `usize`.
pub fn parse_size_usize(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("invalid size '{s}': too large"))
}

/// A scan's `--limit`: at least 1 (`--limit 0` printed nothing but "... more").
pub fn parse_limit(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("'{s}' is not a count: {e}")),
    }
}

/// Formats a byte count with a binary unit, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    tierbase_bench::units::format_bytes(bytes)
}

/// `println!` that returns the write's error (a closed pipe, a full device) instead of
/// panicking: a command holding a store then stops and closes it cleanly (a process killed by
/// SIGPIPE mid-scan left a KV store looking crashed, and the next open dropped records it
/// could not check).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::util::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// One line to standard output (see [`outln`]).
pub fn write_line(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .context("cannot write the output")
}

/// A key or value from the command line: UTF-8 text, or hex with `--hex`.
pub fn decode(hex: bool, s: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    let s = s.trim_start_matches("0x");
    if let Some(c) = s.chars().find(|c| !c.is_ascii_hexdigit()) {
        bail!("{what} '{s}' is not hex: '{c}' is not a hex digit");
    }
    if !s.len().is_multiple_of(2) {
        bail!("{what} '{s}' is not hex: odd number of digits");
    }
    // Only ASCII hex digits from here on, one byte each.
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).with_context(|| format!("{what} '{s}' is not hex"))
        })
        .collect()
}

/// Refuses a range whose start sorts after its end (it would select nothing, silently).
pub fn check_range(from: Option<&[u8]>, to: Option<&[u8]>) -> anyhow::Result<()> {
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        bail!(
            "--from sorts after --to, so the range is empty (--from is its low end, also with --reverse)"
        );
    }
    Ok(())
}

/// A key or value for output: hex with `--hex`; else as is when it is printable UTF-8 that
/// does not start with `"`, and otherwise in double quotes with escapes (`\"`, `\\`, `\n`,
/// `\r`, `\t`, `\xNN` for other bytes), as redis-cli prints: so that bytes that are not text
/// can never be taken for text (before 2026-12-03 they were printed as bare hex, which looked
/// like a text value of hex digits).
pub fn encode(hex: bool, b: &[u8]) -> String {
    if hex {
        return b.iter().map(|x| format!("{x:02x}")).collect();
    }
    match std::str::from_utf8(b) {
        Ok(s) if !s.starts_with('"') && !s.chars().any(char::is_control) => s.to_string(),
        _ => {
            let mut out = String::from("\"");
            for chunk in b.utf8_chunks() {
                for c in chunk.valid().chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        '\r' => out.push_str("\\r"),
                        '\t' => out.push_str("\\t"),
                        c if c.is_control() => {
                            for byte in c.encode_utf8(&mut [0u8; 4]).bytes() {
                                out.push_str(&format!("\\x{byte:02x}"));
                            }
                        }
                        c => out.push(c),
                    }
                }
                for byte in chunk.invalid() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            }
            out.push('"');
            out
        }
    }
}

/// The library's error, with "`verb` `path`" in front only when it does not name the path
/// itself (so a message never names the file twice).
pub fn naming_path<T, E>(r: Result<T, E>, verb: &str, path: &Path) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    r.map_err(|e| {
        let shown = path.display().to_string();
        if e.to_string().contains(&shown) {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(format!("{verb} {shown}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("10Q").unwrap_err().contains("unknown unit 'Q'"));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").is_err());
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(10), "10 B");
    }

    #[test]
    fn hex_keys_are_checked_before_they_are_cut() {
        assert_eq!(decode(true, "0x00ff", "key").unwrap(), vec![0, 0xff]);
        // Non-ASCII input: a clear error, not a cut through a character.
        for bad in ["ＡＢ", "é0", "0g"] {
            let e = decode(true, bad, "key").unwrap_err().to_string();
            assert!(e.contains("is not a hex digit"), "{bad}: {e}");
        }
        assert!(
            decode(true, "abc", "key")
                .unwrap_err()
                .to_string()
                .contains("odd number")
        );
        assert_eq!(decode(false, "ＡＢ", "key").unwrap(), "ＡＢ".as_bytes());
    }

    #[test]
    fn bytes_that_are_not_text_are_printed_quoted() {
        assert_eq!(encode(false, b"plain text"), "plain text");
        assert_eq!(encode(false, "ＡＢ".as_bytes()), "ＡＢ");
        assert_eq!(encode(false, b"a\x00b\n"), r#""a\x00b\n""#);
        assert_eq!(encode(false, b"\xff\xfeok"), r#""\xff\xfeok""#);
        assert_eq!(encode(false, b"\"quoted\" \\"), r#""\"quoted\" \\""#);
        assert_eq!(encode(false, b"ab\"c"), "ab\"c");
        assert_eq!(encode(true, b"\x00\xff"), "00ff");
    }
}
