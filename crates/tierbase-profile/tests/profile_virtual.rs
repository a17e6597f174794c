//! The emulator measured back in virtual time: a PIO sweep of rounds of exactly `d` I/Os, each
//! round issued at the previous round's emulated end (no real I/O, no clock), derived with the
//! profiler's own rule and refinement. Every catalogue SSD profile must come back within 10 %
//! for α, k_r and k_w — a check of the device model itself, independent of this machine's
//! load. (The real-time side, whether the machine keeps up with the model, is what the
//! profiler's late-batch count and `--save` refusal check.)

use tierbase::device::{Catalogue, DeviceKind, DeviceProfile, Direction, Emulator};
use tierbase_profile::derive::{DEFAULT_THRESHOLD, derive_alpha_k, refine_depths};

const OPS_PER_POINT: u64 = 4096;
const MAX_DEPTH: u32 = 256;

/// IOPS at depth `depth` in virtual time on a fresh emulator.
fn point(profile: &DeviceProfile, dir: Direction, depth: u32) -> f64 {
    let e = Emulator::new(profile).unwrap();
    let rounds = OPS_PER_POINT.div_ceil(u64::from(depth));
    let mut now = 0;
    for _ in 0..rounds {
        now = e.schedule_batch_at(dir, profile.access_granularity, u64::from(depth), now);
    }
    (rounds * u64::from(depth)) as f64 * 1e9 / now as f64
}

fn curve(profile: &DeviceProfile, dir: Direction) -> Vec<(u32, f64)> {
    let mut pts: Vec<(u32, f64)> = (0..=8)
        .map(|i| 1u32 << i)
        .map(|d| (d, point(profile, dir, d)))
        .collect();
    for _ in 0..4 {
        let more = refine_depths(&pts, DEFAULT_THRESHOLD, MAX_DEPTH);
        if more.is_empty() {
            break;
        }
        pts.extend(more.into_iter().map(|d| (d, point(profile, dir, d))));
    }
    pts
}

fn within(measured: f64, expected: f64) -> bool {
    (measured - expected).abs() <= 0.10 * expected
}

#[test]
fn every_catalogue_ssd_profile_measures_back_within_ten_percent() {
    let cat = Catalogue::builtin();
    let ssds: Vec<&DeviceProfile> = cat
        .profiles()
        .iter()
        .filter(|p| p.kind == DeviceKind::Block && p.name.contains("ssd"))
        .collect();
    assert!(ssds.len() >= 4, "the catalogue lost its SSDs: {ssds:?}");
    let mut failures = Vec::new();
    for p in ssds {
        let f = derive_alpha_k(
            &curve(p, Direction::Read),
            &curve(p, Direction::Write),
            DEFAULT_THRESHOLD,
        )
        .unwrap();
        let line = format!(
            "{}: alpha {:.2} (profile {}), k_r {} ({}), k_w {} ({})",
            p.name, f.alpha, p.alpha, f.k_r, p.k_r, f.k_w, p.k_w
        );
        eprintln!("{line}");
        if !(within(f.alpha, p.alpha)
            && within(f64::from(f.k_r), f64::from(p.k_r))
            && within(f64::from(f.k_w), f64::from(p.k_w)))
        {
            failures.push(line.clone());
        }
        assert!(
            f.read.saturated && f.write.saturated,
            "{line}: not saturated"
        );
    }
    assert!(failures.is_empty(), "off by more than 10 %: {failures:#?}");
}

#[test]
fn a_model_with_the_wrong_write_cost_is_caught() {
    // The check can fail: a profile whose writes cost what reads cost measures α ≈ 1.
    let mut p = Catalogue::builtin()
        .require("pcie-ssd-p4510")
        .unwrap()
        .clone();
    let wanted = p.alpha;
    p.alpha = 1.0;
    let f = derive_alpha_k(
        &curve(&p, Direction::Read),
        &curve(&p, Direction::Write),
        DEFAULT_THRESHOLD,
    )
    .unwrap();
    assert!(
        !within(f.alpha, wanted),
        "alpha {} passed for {wanted}",
        f.alpha
    );
}

/// The emulated persistent and CXL memories the buffer manager's NVM tier runs on: a sweep of
/// threads in virtual time (each thread one load or persist at a time, at the profile's access
/// granularity) gives back the profile's load latency, α and saturated bandwidth within 10 %,
/// and k_r, k_w too where the profile's bandwidth does not cap the throughput first (PMem
/// 200's k_r = 32 and k_w = 16 are thread-scaling figures from the Viper paper that its cited
/// 16.24 / 6.32 GB/s reach at about 25 and 12 threads of 256-byte loads: the model keeps the
/// bandwidth). DRAM is never emulated for a slower tier.
#[test]
fn emulated_memories_measure_back_within_ten_percent() {
    let cat = Catalogue::builtin();
    let memories: Vec<&DeviceProfile> = cat
        .profiles()
        .iter()
        .filter(|p| p.kind == DeviceKind::Memory && p.name != "dram")
        .collect();
    assert!(memories.len() >= 3, "{memories:?}");
    let mut failures = Vec::new();
    for p in memories {
        let read = curve(p, Direction::Read);
        let write = curve(p, Direction::Write);
        let latency = 1e9 / read[0].1; // depth 1: one load at a time
        let f = derive_alpha_k(&read, &write, DEFAULT_THRESHOLD).unwrap();
        let gran = p.access_granularity as f64;
        // Saturated bandwidth in MB/s, and the model's: slots or bandwidth, whichever binds.
        let read_mb_s = f.read.plateau * gran / 1e6;
        let slots_mb_s = f64::from(p.k_r) * gran * 1e3 / p.read_latency_ns;
        let expected_mb_s = slots_mb_s.min(p.read_bandwidth_mb_s);
        let line = format!(
            "{}: load latency {latency:.0} ns (profile {}), alpha {:.2} ({}), read plateau \
             {read_mb_s:.0} MB/s ({expected_mb_s:.0}), k_r {} ({}), k_w {} ({})",
            p.name, p.read_latency_ns, f.throughput_ratio, p.alpha, f.k_r, p.k_r, f.k_w, p.k_w
        );
        eprintln!("{line}");
        // A memory's α is the plateau ratio (PerMA-Bench's reading, docs/EMULATION.md).
        let mut ok = within(latency, p.read_latency_ns)
            && within(f.throughput_ratio, p.alpha)
            && within(read_mb_s, expected_mb_s);
        if slots_mb_s <= p.read_bandwidth_mb_s {
            ok &= within(f64::from(f.k_r), f64::from(p.k_r));
        }
        let write_slots_mb_s = f64::from(p.k_w) * gran * 1e3 / p.write_service_ns();
        if write_slots_mb_s <= p.write_bandwidth_mb_s {
            ok &= within(f64::from(f.k_w), f64::from(p.k_w));
        }
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "off by more than 10 %: {failures:#?}");
}
