//! `tierbase profile` (not yet implemented).

use super::Ctx;

/// Arguments of `tierbase profile`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {}

/// Runs the command.
pub fn run(_args: ProfileArgs, _ctx: &Ctx) -> anyhow::Result<()> {
    anyhow::bail!("'tierbase profile' is not implemented yet")
}
