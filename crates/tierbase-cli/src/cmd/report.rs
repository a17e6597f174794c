//! `tierbase report`: benchmark JSON results to one self-contained HTML page with SVG charts.

use std::path::PathBuf;

use tierbase_profile::report::write_report;

use super::Ctx;

/// Arguments of `tierbase report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Result files written by `tierbase bench ycsb|micro|ace --out` or `tierbase profile
    /// --out` (`bench recovery` prints its figures only; `bench ramp --out` writes samples in
    /// a shape of their own).
    #[arg(required = true, value_name = "JSON")]
    inputs: Vec<PathBuf>,
    /// HTML file to write.
    #[arg(
        long,
        short,
        default_value = "tierbase-report.html",
        value_name = "FILE"
    )]
    out: PathBuf,
    /// Title of the page.
    #[arg(long, default_value = "tierbase benchmark report")]
    title: String,
}

/// Runs the command.
pub fn run(args: ReportArgs, _ctx: &Ctx) -> anyhow::Result<()> {
    let inputs: Vec<&std::path::Path> = args.inputs.iter().map(PathBuf::as_path).collect();
    tierbase_bench::results::check_distinct(&[("--out", &args.out)], &inputs)?;
    let s = write_report(&args.inputs, &args.out, &args.title)?;
    if s.runs == 0 && s.charts == 0 {
        // A page with nothing on it is no report: say so rather than succeed.
        let _ = std::fs::remove_file(&s.path);
        anyhow::bail!(
            "nothing to report: {} hold{} no runs",
            args.inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if args.inputs.len() == 1 { "s" } else { "" }
        );
    }
    println!(
        "wrote {}: {} runs, {} workloads, {} charts",
        s.path.display(),
        s.runs,
        s.workloads,
        s.charts
    );
    Ok(())
}
