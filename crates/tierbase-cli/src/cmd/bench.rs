//! `tierbase bench` (not yet implemented).

use super::Ctx;

/// Arguments of `tierbase bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

/// Runs the command.
pub fn run(_args: BenchArgs, _ctx: &Ctx) -> anyhow::Result<()> {
    anyhow::bail!("'tierbase bench' is not implemented yet")
}
