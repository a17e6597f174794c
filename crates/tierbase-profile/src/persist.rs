//! Persist instructions of the memory benchmarks (PerMA-Bench section 1.4).
//!
//! | name | aliases | after each write | then |
//! |---|---|---|---|
//! | `none` | | nothing (eADR or volatile use) | no fence |
//! | `cache` | `write-back`, `clwb` | `clwb` every line (only where the CPU has it) | `sfence` |
//! | `cacheinv` | `flush-invalidate`, `clflushopt` | `clflushopt` every line | `sfence` |
//! | `nocache` | `non-temporal`, `nt` | the write itself uses non-temporal stores | `sfence` |

use std::fmt;

use serde::{Deserialize, Serialize};
use tierbase::device::FlushInstruction;

use tierbase_bench::{BenchError, Result};

/// How a write is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Persist {
    /// No flush, no fence.
    None,
    /// `clwb` + `sfence` (write back, keep the line cached).
    Cache,
    /// `clflushopt` + `sfence` (write back and invalidate).
    CacheInv,
    /// Non-temporal stores + `sfence`.
    NoCache,
}

impl Persist {
    /// All four, in table order.
    pub const ALL: [Persist; 4] = [
        Persist::None,
        Persist::Cache,
        Persist::CacheInv,
        Persist::NoCache,
    ];

    /// PerMA-Bench's name, as used in access chains and results.
    pub fn chain_name(self) -> &'static str {
        match self {
            Persist::None => "none",
            Persist::Cache => "cache",
            Persist::CacheInv => "cacheinv",
            Persist::NoCache => "nocache",
        }
    }

    /// A longer label for reports: `cache (clwb)`.
    pub fn label(self) -> &'static str {
        match self {
            Persist::None => "none",
            Persist::Cache => "cache (clwb)",
            Persist::CacheInv => "cacheinv (clflushopt)",
            Persist::NoCache => "nocache (non-temporal)",
        }
    }

    /// Parses only the grammar's names (access chains).
    pub fn parse_chain(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.chain_name() == s)
    }

    /// Parses a name or alias (config files and the command line), case-insensitively.
    pub fn parse(s: &str) -> Result<Self> {
        let l = s.trim().to_ascii_lowercase();
        let p = match l.as_str() {
            "none" => Persist::None,
            "cache" | "write-back" | "writeback" | "clwb" => Persist::Cache,
            "cacheinv" | "cache-invalidate" | "flush-invalidate" | "clflushopt" => {
                Persist::CacheInv
            }
            "nocache" | "non-temporal" | "nontemporal" | "nt" => Persist::NoCache,
            _ => {
                return Err(BenchError::invalid(format!(
                    "unknown persist instruction '{s}': expected none, cache (write-back, clwb), \
                     cacheinv (flush-invalidate, clflushopt) or nocache (non-temporal)"
                )));
            }
        };
        Ok(p)
    }

    /// The flush instruction this persist executes per line (`None` for `none` and `nocache`).
    pub fn flush_instruction(self) -> FlushInstruction {
        match self {
            Persist::Cache => FlushInstruction::Clwb,
            Persist::CacheInv => FlushInstruction::Clflushopt,
            Persist::None | Persist::NoCache => FlushInstruction::None,
        }
    }

    /// Whether this CPU can execute it; if not, why.
    pub fn check_supported(self) -> std::result::Result<(), String> {
        let f = self.flush_instruction();
        if f.is_supported() {
            Ok(())
        } else {
            Err(format!(
                "persist instruction {} needs {}, which this CPU does not have",
                self.chain_name(),
                f.name()
            ))
        }
    }

    /// Whether writes with this persist are followed by a fence.
    pub fn fences(self) -> bool {
        self != Persist::None
    }
}

impl fmt::Display for Persist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.chain_name())
    }
}
