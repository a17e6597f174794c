//! The region file header: encoding and validation of its fields (byte by byte in
//! docs/FORMAT-region.md).

use crate::error::{Error, Result};
use std::path::Path;

use super::{DATA_LEN_OFFSET, FORMAT_VERSION, MAGIC, PAGE, REGION_HEADER_LEN};

/// The 8-byte length word at [`DATA_LEN_OFFSET`]: data length in 4 KiB pages (low 32 bits)
/// and the CRC32C of those 4 little-endian bytes (high 32 bits). One aligned 8-byte store
/// replaces both halves at once, so the length is checksummed and still updated atomically.
pub(super) fn encode_len_word(data_len: u64) -> u64 {
    let pages = (data_len / PAGE as u64) as u32;
    let crc = crc32c::crc32c(&pages.to_le_bytes());
    u64::from(pages) | (u64::from(crc) << 32)
}

/// Inverse of [`encode_len_word`]: the data length in bytes, or `None` if the checksum fails.
pub(super) fn decode_len_word(word: u64) -> Option<u64> {
    let pages = word as u32;
    let crc = (word >> 32) as u32;
    (crc32c::crc32c(&pages.to_le_bytes()) == crc).then(|| u64::from(pages) * PAGE as u64)
}

pub(super) fn write_header_fields(header: &mut [u8; REGION_HEADER_LEN], data_len: u64) {
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(REGION_HEADER_LEN as u32).to_le_bytes());
    let crc = crc32c::crc32c(&header[0..16]);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
    header[DATA_LEN_OFFSET..DATA_LEN_OFFSET + 8]
        .copy_from_slice(&encode_len_word(data_len).to_le_bytes());
}

pub(super) fn parse_header(header: &[u8; REGION_HEADER_LEN], path: &Path) -> Result<u64> {
    let field = |a: usize, b: usize| header.get(a..b).unwrap_or_default();
    if field(0, 8) != MAGIC {
        return Err(Error::BadMagic {
            path: Some(path.to_path_buf()),
            expected: "tierbase region",
        });
    }
    let u32_at = |a: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(field(a, a + 4));
        u32::from_le_bytes(b)
    };
    let stored_crc = u32_at(16);
    if crc32c::crc32c(field(0, 16)) != stored_crc {
        return Err(Error::corrupt(
            Some(path),
            "region header checksum mismatch",
        ));
    }
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            path: Some(path.to_path_buf()),
            what: "region",
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if u32_at(12) as usize != REGION_HEADER_LEN {
        return Err(Error::corrupt(
            Some(path),
            "region header length is not 4096",
        ));
    }
    // Reserved bytes must be zero: with them checked, a change to any header byte is detected.
    let reserved_zero = field(20, DATA_LEN_OFFSET)
        .iter()
        .chain(field(DATA_LEN_OFFSET + 8, REGION_HEADER_LEN))
        .all(|&b| b == 0);
    if !reserved_zero {
        return Err(Error::corrupt(
            Some(path),
            "reserved region header bytes are not zero",
        ));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(field(DATA_LEN_OFFSET, DATA_LEN_OFFSET + 8));
    decode_len_word(u64::from_le_bytes(b))
        .ok_or_else(|| Error::corrupt(Some(path), "region data length checksum mismatch"))
}
