//! One module per subcommand. Each exposes `XArgs` (clap) and `run(args, ctx)`.

use std::path::PathBuf;

use tierbase::device::Catalogue;

pub mod bench;
pub mod btree;
pub mod devices;
pub mod kv;
pub mod plush;
pub mod profile;
pub mod report;
pub mod serve;
pub mod store_ops;

/// What every command may need from the global options.
#[derive(Debug)]
pub struct Ctx {
    /// `--profiles` files given on the command line.
    pub profile_files: Vec<PathBuf>,
}

impl Ctx {
    /// The device catalogue: built-in, the user's file, then `--profiles` files.
    pub fn catalogue(&self) -> tierbase::Result<Catalogue> {
        Catalogue::load(&self.profile_files)
    }
}
