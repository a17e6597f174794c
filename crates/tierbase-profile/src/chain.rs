//! Access chains: PerMA-Bench's "custom operations", a small grammar for dependent operation
//! chains such as `r_256,w_64_cache_128,w_64_cache_-128`.
//!
//! Owns: parsing (with the column of the offending token in every error), the canonical text
//! form (so a chain round-trips through `Display`), and the address plan that keeps every
//! operation of a chain inside its memory. Must not touch: execution (see `memory`).
//!
//! # Grammar
//!
//! ```text
//! chain   := op ("," op)*                 (spaces around "," are allowed)
//! op      := read | write
//! read    := "r" [mem] "_" size
//! write   := "w" [mem] "_" size "_" persist ["_" offset]
//! mem     := "p" | "d"                    (p = the persistent region, the default; d = DRAM)
//! size    := decimal bytes, a power of two from 8 to 1 GiB
//! persist := "none" | "cache" | "cacheinv" | "nocache"
//! offset  := ["+" | "-"] decimal bytes
//! ```
//!
//! # Meaning (PerMA-Bench's)
//!
//! The operations run one after the other and each one's address depends on data the previous
//! one read, so they cannot overlap (pointer chasing). An operation **without an offset** (every
//! read, and a write without offset) goes to a new random address derived from the last data read
//! (for the first operation: from the chain's random start value), aligned to its size. An
//! operation **with an offset** goes to the previous operation's address plus the offset, in the
//! same memory. So `r_256,w_64_cache_128,w_64_cache_-128` reads a 256 B bucket at a random
//! address `a`, writes 64 B at `a + 128` and flushes it with `clwb`, then writes 64 B at `a` and
//! flushes it: a hash-bucket update.

use std::fmt;

use tierbase_bench::{BenchError, Result};

use crate::persist::Persist;

/// Smallest access size in a chain (one 8-byte word carries the data to the next operation).
pub const MIN_CHAIN_SIZE: u64 = 8;
/// Largest access size in a chain.
pub const MAX_CHAIN_SIZE: u64 = 1 << 30;

/// Which memory an operation touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryKind {
    /// The benchmarked region (persistent memory, a file, or DRAM when no file is given):
    /// `p`, the default.
    Pmem,
    /// The extra DRAM range (`dram_memory_range`): `d`.
    Dram,
}

impl MemoryKind {
    /// Letter used in the grammar.
    pub fn letter(self) -> &'static str {
        match self {
            MemoryKind::Pmem => "p",
            MemoryKind::Dram => "d",
        }
    }
}

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainOpKind {
    /// Read `size` bytes at a random address derived from the previous data.
    Read,
    /// Write `size` bytes and persist them with `persist`.
    Write {
        /// Persist instruction after the write.
        persist: Persist,
        /// Offset from the previous operation's address; `None` = a new random address.
        offset: Option<i64>,
    },
}

/// One operation of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainOp {
    /// Read or write.
    pub kind: ChainOpKind,
    /// Which memory.
    pub memory: MemoryKind,
    /// Bytes accessed.
    pub size: u64,
}

impl ChainOp {
    /// The write offset, if any.
    pub fn offset(&self) -> Option<i64> {
        match self.kind {
            ChainOpKind::Write { offset, .. } => offset,
            ChainOpKind::Read => None,
        }
    }
}

impl fmt::Display for ChainOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mem = match self.memory {
            MemoryKind::Pmem => "",
            MemoryKind::Dram => "d",
        };
        match self.kind {
            ChainOpKind::Read => write!(f, "r{mem}_{}", self.size),
            ChainOpKind::Write { persist, offset } => {
                write!(f, "w{mem}_{}_{}", self.size, persist.chain_name())?;
                if let Some(o) = offset {
                    write!(f, "_{o}")?;
                }
                Ok(())
            }
        }
    }
}

/// A parsed access chain. Equality ignores where the operations stood in the source text.
#[derive(Clone, Debug)]
pub struct AccessChain {
    ops: Vec<ChainOp>,
    /// 1-based column of each operation in the text it was parsed from.
    columns: Vec<usize>,
}

impl PartialEq for AccessChain {
    fn eq(&self, other: &Self) -> bool {
        self.ops == other.ops
    }
}

impl Eq for AccessChain {}

impl fmt::Display for AccessChain {
    /// The canonical form: `r_256,w_64_cache_128` (memory `p` left out, offsets without `+`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{op}")?;
        }
        Ok(())
    }
}

/// A grammar error: where (1-based column into the chain text), which token, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainError {
    /// 1-based column of the offending token.
    pub column: usize,
    /// The offending token (may be empty when something is missing).
    pub token: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.token.is_empty() {
            write!(f, "column {}: {}", self.column, self.message)
        } else {
            write!(
                f,
                "column {} ('{}'): {}",
                self.column, self.token, self.message
            )
        }
    }
}

impl AccessChain {
    /// Parses chain text. Errors name the column and token (see [`ChainError`]).
    pub fn parse(text: &str) -> std::result::Result<Self, ChainError> {
        let mut ops = Vec::new();
        let mut columns = Vec::new();
        let mut start = 0usize;
        // Walk comma-separated operations, keeping byte offsets into `text`.
        loop {
            let end = text[start..].find(',').map_or(text.len(), |i| start + i);
            let raw = &text[start..end];
            let lead = raw.len() - raw.trim_start().len();
            let tok = raw.trim();
            let tok_start = start + lead;
            let column = col(text, tok_start);
            if tok.is_empty() {
                let message = if text.trim().is_empty() {
                    "empty access chain".to_string()
                } else {
                    "empty operation (two commas in a row, or a comma at an end)".to_string()
                };
                return Err(ChainError {
                    column,
                    token: String::new(),
                    message,
                });
            }
            ops.push(parse_op(text, tok, tok_start)?);
            columns.push(column);
            if end >= text.len() {
                break;
            }
            start = end + 1;
        }
        Ok(AccessChain { ops, columns })
    }

    /// The operations in order.
    pub fn ops(&self) -> &[ChainOp] {
        &self.ops
    }

    /// 1-based column of operation `i` in the parsed text (1 for chains built in code).
    pub fn column(&self, i: usize) -> usize {
        self.columns.get(i).copied().unwrap_or(1)
    }

    /// A chain from operations (columns unknown).
    pub fn from_ops(ops: Vec<ChainOp>) -> Result<Self> {
        if ops.is_empty() {
            return Err(BenchError::invalid(
                "an access chain needs at least one operation",
            ));
        }
        let columns = vec![1; ops.len()];
        Ok(AccessChain { ops, columns })
    }

    /// Bytes one execution of the chain accesses.
    pub fn bytes(&self) -> u64 {
        self.ops.iter().map(|o| o.size).sum()
    }

    /// Whether any operation uses the DRAM range.
    pub fn uses_dram(&self) -> bool {
        self.ops.iter().any(|o| o.memory == MemoryKind::Dram)
    }

    /// Persist instructions the chain uses.
    pub fn persists(&self) -> Vec<Persist> {
        let mut out: Vec<Persist> = Vec::new();
        for op in &self.ops {
            if let ChainOpKind::Write { persist, .. } = op.kind
                && !out.contains(&persist)
            {
                out.push(persist);
            }
        }
        out
    }

    /// Plans addresses for memories of `pmem_len` and `dram_len` bytes: every operation, at any
    /// random start, stays inside its memory. Errors name the operation's column.
    pub fn plan(&self, pmem_len: u64, dram_len: u64) -> Result<ChainPlan> {
        let text = self.to_string();
        let err = |i: usize, msg: String| {
            BenchError::invalid(format!(
                "access chain '{text}': column {} ('{}'): {msg}",
                self.column(i),
                self.ops.get(i).map(ToString::to_string).unwrap_or_default()
            ))
        };
        let mut steps: Vec<ChainStep> = Vec::with_capacity(self.ops.len());
        // Groups: an operation without offset starts one; following offset operations belong
        // to it, at cumulative offsets from its address.
        let mut i = 0;
        while i < self.ops.len() {
            let Some(anchor) = self.ops.get(i) else { break };
            let memory = anchor.memory;
            let len = match memory {
                MemoryKind::Pmem => pmem_len,
                MemoryKind::Dram => dram_len,
            };
            if memory == MemoryKind::Dram && dram_len == 0 {
                return Err(err(
                    i,
                    "a DRAM operation needs a DRAM range (dram_memory_range / --dram-range)".into(),
                ));
            }
            // The group's span relative to the anchor address, and each member's position.
            let (mut lo, mut hi) = (0i128, i128::from(anchor.size));
            let mut rel = 0i128;
            let mut members = vec![(i, 0i128)];
            // An offset on the very first operation is relative to the chain's random start.
            if let Some(o) = anchor.offset() {
                rel = i128::from(o);
                lo = lo.min(rel);
                hi = hi.max(rel + i128::from(anchor.size));
                members[0].1 = rel;
            }
            let mut j = i + 1;
            while let Some(op) = self.ops.get(j) {
                let Some(o) = op.offset() else { break };
                if op.memory != memory {
                    return Err(err(
                        j,
                        format!(
                            "an operation with an offset must use the same memory as the one \
                             before it ({})",
                            memory_name(memory)
                        ),
                    ));
                }
                rel += i128::from(o);
                lo = lo.min(rel);
                hi = hi.max(rel + i128::from(op.size));
                members.push((j, rel));
                j += 1;
            }
            let align = anchor.size;
            // Anchor a: a + lo >= 0 and a + hi <= len, a a multiple of align.
            let min_a = (-lo).max(0);
            let min_a = (min_a + i128::from(align) - 1) / i128::from(align) * i128::from(align);
            let max_a = i128::from(len) - hi;
            if max_a < min_a {
                return Err(err(
                    i,
                    format!(
                        "the operations from here on span {} bytes, more than the {} memory of {} bytes",
                        hi - lo,
                        memory_name(memory),
                        len
                    ),
                ));
            }
            let slots = ((max_a - min_a) / i128::from(align) + 1) as u64;
            for (k, (idx, rel)) in members.into_iter().enumerate() {
                let Some(op) = self.ops.get(idx) else { break };
                steps.push(ChainStep {
                    op: *op,
                    address: if k == 0 {
                        AddressRule::Random {
                            min: min_a as u64,
                            slots,
                            align,
                            shift: rel as i64,
                        }
                    } else {
                        AddressRule::Relative {
                            delta: op.offset().unwrap_or(0),
                        }
                    },
                });
            }
            i = j;
        }
        Ok(ChainPlan { steps })
    }
}

fn memory_name(m: MemoryKind) -> &'static str {
    match m {
        MemoryKind::Pmem => "pmem",
        MemoryKind::Dram => "DRAM",
    }
}

/// How one planned operation finds its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressRule {
    /// `min + (h % slots) * align + shift`, `h` derived from the last data read.
    Random {
        /// Lowest anchor address.
        min: u64,
        /// Number of anchor positions.
        slots: u64,
        /// Anchor alignment (the operation's size).
        align: u64,
        /// Offset of this operation from the anchor (non-zero only for an offset on the first
        /// operation of a chain).
        shift: i64,
    },
    /// The previous operation's address plus `delta`.
    Relative {
        /// Byte offset.
        delta: i64,
    },
}

/// One operation with its address rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainStep {
    /// The operation.
    pub op: ChainOp,
    /// Where it goes.
    pub address: AddressRule,
}

/// A chain whose operations provably stay inside their memories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainPlan {
    steps: Vec<ChainStep>,
}

impl ChainPlan {
    /// The steps in order.
    pub fn steps(&self) -> &[ChainStep] {
        &self.steps
    }

    /// Addresses of one execution: `(memory, byte offset)` per step, for start value `seed`
    /// and the data each read returns given by `read_value(memory, offset, size)`. The executor
    /// uses the same rule (see [`next_random`]); tests use this to check bounds.
    pub fn addresses(
        &self,
        seed: u64,
        mut read_value: impl FnMut(MemoryKind, u64, u64) -> u64,
    ) -> Vec<(MemoryKind, u64)> {
        let mut d = seed;
        let mut prev = 0u64;
        let mut out = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let addr = resolve(&s.address, d, prev);
            out.push((s.op.memory, addr));
            d = match s.op.kind {
                ChainOpKind::Read => read_value(s.op.memory, addr, s.op.size) ^ d,
                ChainOpKind::Write { .. } => d,
            };
            d = mix(d);
            prev = addr;
        }
        out
    }
}

/// The address of a step given the current data word `d` and the previous address.
#[inline]
pub fn resolve(rule: &AddressRule, d: u64, prev: u64) -> u64 {
    match *rule {
        AddressRule::Random {
            min,
            slots,
            align,
            shift,
        } => (min + next_random(d, slots) * align).wrapping_add_signed(shift),
        AddressRule::Relative { delta } => prev.wrapping_add_signed(delta),
    }
}

/// Maps a data word to one of `slots` positions (multiply-high of a mixed word: unbiased
/// enough for benchmarking and free of division).
#[inline]
pub fn next_random(d: u64, slots: u64) -> u64 {
    ((u128::from(mix(d)) * u128::from(slots)) >> 64) as u64
}

/// SplitMix64's finaliser: spreads every input bit over the word.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 1-based character column of byte offset `byte` in `text`.
fn col(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(byte, |s| s.chars().count()) + 1
}

fn parse_op(text: &str, tok: &str, tok_start: usize) -> std::result::Result<ChainOp, ChainError> {
    // Parts separated by '_', each with its byte offset in `text`.
    let mut parts: Vec<(&str, usize)> = Vec::new();
    let mut off = 0;
    for p in tok.split('_') {
        parts.push((p, tok_start + off));
        off += p.len() + 1;
    }
    let fail = |part: (&str, usize), message: String| ChainError {
        column: col(text, part.1),
        token: part.0.to_string(),
        message,
    };
    let head = parts.first().copied().unwrap_or((tok, tok_start));
    let (is_read, memory) = match head.0 {
        "r" | "rp" => (true, MemoryKind::Pmem),
        "rd" => (true, MemoryKind::Dram),
        "w" | "wp" => (false, MemoryKind::Pmem),
        "wd" => (false, MemoryKind::Dram),
        _ => {
            return Err(fail(
                head,
                "unknown operation: expected r, rp, rd (read) or w, wp, wd (write), e.g. r_256 \
                 or w_64_cache_128"
                    .into(),
            ));
        }
    };
    let Some(&size_part) = parts.get(1) else {
        return Err(ChainError {
            column: col(text, tok_start + tok.len()),
            token: tok.to_string(),
            message: "missing size: expected e.g. r_256 or w_64_cache".into(),
        });
    };
    let size = parse_size_part(size_part).map_err(|m| fail(size_part, m))?;
    if is_read {
        if let Some(&extra) = parts.get(2) {
            return Err(fail(
                extra,
                "a read takes only a size (r_<size>); offsets and persist instructions are for \
                 writes"
                    .into(),
            ));
        }
        return Ok(ChainOp {
            kind: ChainOpKind::Read,
            memory,
            size,
        });
    }
    let Some(&persist_part) = parts.get(2) else {
        return Err(ChainError {
            column: col(text, tok_start + tok.len()),
            token: tok.to_string(),
            message: "a write needs a persist instruction: w_<size>_<none|cache|cacheinv|nocache>"
                .into(),
        });
    };
    let persist = Persist::parse_chain(persist_part.0).ok_or_else(|| {
        fail(
            persist_part,
            "unknown persist instruction: expected none, cache, cacheinv or nocache".into(),
        )
    })?;
    let offset = match parts.get(3) {
        None => None,
        Some(&p) => Some(parse_offset(p.0).map_err(|m| fail(p, m))?),
    };
    if let Some(&extra) = parts.get(4) {
        return Err(fail(
            extra,
            "unexpected text after the offset: w_<size>_<persist>[_<offset>]".into(),
        ));
    }
    Ok(ChainOp {
        kind: ChainOpKind::Write { persist, offset },
        memory,
        size,
    })
}

fn parse_size_part(part: (&str, usize)) -> std::result::Result<u64, String> {
    let s = part.0;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("size must be a number of bytes, e.g. 64 or 256".into());
    }
    let v: u64 = s.parse().map_err(|_| "size is too large".to_string())?;
    if !v.is_power_of_two() || !(MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE).contains(&v) {
        return Err(format!(
            "size must be a power of two from {MIN_CHAIN_SIZE} to {MAX_CHAIN_SIZE} bytes"
        ));
    }
    Ok(v)
}

fn parse_offset(s: &str) -> std::result::Result<i64, String> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("offset must be a signed number of bytes, e.g. 128 or -128".into());
    }
    let v: i64 = digits
        .parse()
        .map_err(|_| "offset is too large".to_string())?;
    if v > MAX_CHAIN_SIZE as i64 {
        return Err(format!("offset must be at most {MAX_CHAIN_SIZE} bytes"));
    }
    Ok(if neg { -v } else { v })
}

/// Parses chain text into a [`BenchError`] on failure: one line naming the chain, the column
/// and the token.
pub fn parse_chain(text: &str) -> Result<AccessChain> {
    AccessChain::parse(text)
        .map_err(|e| BenchError::invalid(format!("invalid access chain '{text}': {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_count_characters() {
        let e = AccessChain::parse("r_256,w_64_cach_128").unwrap_err();
        assert_eq!(e.column, 12);
        assert_eq!(e.token, "cach");
    }
}
