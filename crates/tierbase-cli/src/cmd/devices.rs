//! `tierbase devices`: the device catalogue and the truth about this machine.

use std::path::PathBuf;

use anyhow::Context;
use tierbase::device::probe::{MachineReport, probe};
use tierbase::device::{DeviceKind, DeviceProfile};

use super::Ctx;

/// Arguments of `tierbase devices`.
#[derive(clap::Args, Debug)]
pub struct DevicesArgs {
    /// Directory whose file system is probed (DAX, O_DIRECT, durability mode); it must exist.
    #[arg(long, default_value = ".", value_name = "DIR")]
    dir: PathBuf,
    /// Print machine-readable JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: DevicesArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let catalogue = ctx.catalogue()?;
    let report = probe(&args.dir).with_context(|| format!("probing {}", args.dir.display()))?;
    if args.json {
        let v = serde_json::json!({ "machine": report, "profiles": catalogue.profiles() });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_machine(&report);
    println!();
    print_catalogue(catalogue.profiles());
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn print_machine(r: &MachineReport) {
    let f = &r.cpu_features;
    println!("This machine");
    let virt = if r.virtualized { ", virtualized" } else { "" };
    println!(
        "  cpu                {} ({} CPUs{virt})",
        r.cpu_model, r.cpus
    );
    println!(
        "  flush instruction  {}, the best this CPU has (clwb {}, clflushopt {}, clflush {}; AVX2 {}, AVX-512F {})",
        r.flush_instruction,
        yes_no(f.clwb),
        yes_no(f.clflushopt),
        yes_no(f.clflush),
        yes_no(f.avx2),
        yes_no(f.avx512f)
    );
    println!("  kernel             {}", r.kernel);
    if r.pmem_devices.is_empty() {
        println!("  persistent memory  none (no /dev/pmem* or /dev/dax*)");
    } else {
        let devs: Vec<String> = r
            .pmem_devices
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        println!("  persistent memory  {}", devs.join(", "));
    }
    let fs = match r.data_dir_fs {
        tierbase::device::FsKind::Memory => "memory-backed file system (tmpfs)",
        tierbase::device::FsKind::Disk => "disk-backed file system",
    };
    println!("  data dir           {} ({fs})", r.data_dir.display());
    println!(
        "  DAX                {}: {}",
        yes_no(r.dax.available),
        r.dax.detail
    );
    println!(
        "  durability         {} — {}",
        r.durability,
        r.durability.guarantee()
    );
    let why = match r.durability {
        tierbase::device::DurabilityMode::Dax => "",
        tierbase::device::DurabilityMode::ProcessCrash => {
            " (a memory-backed file: nothing to write back; `--flush` asks for one to model \
             persistent memory's cost)"
        }
        _ => " (persists are msync)",
    };
    println!("  stores here flush  {}{why}", r.flush_in_data_dir);
    println!(
        "  io_uring           {}: {}",
        yes_no(r.io_uring.available),
        r.io_uring.detail
    );
    println!(
        "  O_DIRECT           {}: {}",
        yes_no(r.o_direct.available),
        r.o_direct.detail
    );
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn print_catalogue(profiles: &[DeviceProfile]) {
    println!("Device catalogue");
    println!(
        "  {:<16} {:<6} {:>9} {:>9} {:>8} {:>8} {:>5} {:>5} {:>4} {:>4} {:>7} {:>8}  origin",
        "name",
        "kind",
        "read lat",
        "write lat",
        "rd MB/s",
        "wr MB/s",
        "gran",
        "alpha",
        "k_r",
        "k_w",
        "$/GB",
        "GB"
    );
    for p in profiles {
        let kind = match p.kind {
            DeviceKind::Memory => "memory",
            DeviceKind::Block => "block",
        };
        println!(
            "  {:<16} {:<6} {:>9} {:>9} {:>8.0} {:>8.0} {:>5} {:>5.2} {:>4} {:>4} {:>7.2} {:>8.0}  {}",
            p.name,
            kind,
            fmt_ns(p.read_latency_ns),
            fmt_ns(p.write_latency_ns),
            p.read_bandwidth_mb_s,
            p.write_bandwidth_mb_s,
            p.access_granularity,
            p.alpha,
            p.k_r,
            p.k_w,
            p.price_per_gb,
            p.capacity_gb,
            p.source.as_deref().unwrap_or("catalogue (cited/assumed)")
        );
    }
    println!(
        "\nCatalogue figures are cited from the design specs or stated assumptions (see\n\
         crates/tierbase/profiles/catalogue.toml); they were not measured on this machine.\n\
         Measure a device with `tierbase profile`; emulate one with --emulate <name>."
    );
}
