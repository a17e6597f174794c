//! Small parsing helpers shared by commands.

/// Parses a size such as `4096`, `64K`, `256M`, `10G`, `1T`, `512KiB`, `2GB` (binary
/// multiples: K = 1024); the message says what is wrong (for clap value parsers).
pub fn parse_size(s: &str) -> Result<u64, String> {
    tierbase_bench::units::parse_size(s).map_err(|e| e.to_string())
}

/// Formats a byte count with a binary unit, e.g. `1.5 GiB`.
pub fn format_size(bytes: u64) -> String {
    tierbase_bench::units::format_bytes(bytes)
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
}
