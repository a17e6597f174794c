//! `tierbase report` (not yet implemented).

use super::Ctx;

/// Arguments of `tierbase report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {}

/// Runs the command.
pub fn run(_args: ReportArgs, _ctx: &Ctx) -> anyhow::Result<()> {
    anyhow::bail!("'tierbase report' is not implemented yet")
}
