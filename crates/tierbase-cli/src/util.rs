//! Small parsing helpers shared by commands.

use std::path::Path;

use anyhow::{Context, bail};

/// Parses a size such as `4096`, `64K`, `256M`, `10G`, `1T`, `512KiB`, `2GB` (binary
/// multiples: K = 1024); the message says what is wrong (for clap value parsers).
pub fn parse_size(s: &str) -> Result<u64, String> {
    tierbase_bench::units::parse_size(s).map_err(|e| e.to_string())
}

/// Formats a byte count with a binary unit, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    tierbase_bench::units::format_bytes(bytes)
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

/// A key or value for output: text when printable (and not `--hex`), else hex.
pub fn encode(hex: bool, b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !hex && !s.chars().any(char::is_control) => s.to_string(),
        _ => b.iter().map(|x| format!("{x:02x}")).collect(),
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
}
