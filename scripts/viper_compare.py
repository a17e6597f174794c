#!/usr/bin/env python3
"""Side by side: the original Viper (../shared/anchors/viper-bench) against a tierbase store
(`--store kv`, the default, or `plush`), the same shapes on the same medium, back to back, the
order alternating by repetition; medians and ratios by pairs reported.

Usage (from the repository root, after `cargo build --release -p tierbase-cli`):

    python3 scripts/viper_compare.py --reps 3 --threads 1,2 \
        --rows insert,get,update,ycsba,recover --out viper-compare.json

Each row runs Viper and tierbase back to back, `--reps` times, deleting both pools between
runs: Viper first in even repetitions (the first is 0), tierbase first in odd ones, so use an
even `--reps` for a balanced order. The `load` row is read from the prefill phase of every run (Viper) and from the load phase of every
YCSB run (tierbase), so it has more samples than the other rows. Prints a Markdown table
with the ratio of the medians and the median (and range) of the ratios of each repetition's
two runs, which drifts least on a machine whose speed changes between repetitions.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ANCHORS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "anchors")
TIERBASE = os.path.join(os.path.dirname(__file__), "..", "target", "release", "tierbase")
ARGS = None


def run(cmd, env=None, attempts=2):
    """Runs `cmd`; a failing run is reported and retried once (then the script stops)."""
    for attempt in range(attempts):
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode == 0:
            return p.stdout + p.stderr, time.time() - t0
        print(f"failed ({p.returncode}), attempt {attempt + 1}: {' '.join(cmd)}\n"
              f"{p.stdout[-1000:]}\n{p.stderr[-1000:]}", flush=True)
        for d in ("vp", "tb"):
            shutil.rmtree(os.path.join(ARGS.dir, d), ignore_errors=True)
    sys.exit(f"giving up on: {' '.join(cmd)}")


def viper(mode, threads, args):
    pool = os.path.join(args.dir, "vp")
    shutil.rmtree(pool, ignore_errors=True)
    # Inserts and replacements need room for the new records (Viper reclaims slowly; a full
    # pool crashes it): 4 GiB for those, 3 GiB (the README's) for reads.
    gib = "3" if mode == "get" else "4"
    cmd = [os.path.join(ANCHORS, "viper-bench"), mode, "--records", str(args.records),
           "--threads", str(threads), "--pool", pool, "--pool-gib", gib]
    if mode == "insert":
        cmd += ["--inserts", str(args.inserts)]
    elif mode != "recover":
        cmd += ["--ops", str(args.ops)]
    out, _ = run(cmd)
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT"):
            kv = dict(re.findall(r"(\w+)=(\S+)", line))
            res[kv["phase"]] = kv
    shutil.rmtree(pool, ignore_errors=True)
    return res


def viper_recover(threads, args):
    pool = os.path.join(args.dir, "vp")
    shutil.rmtree(pool, ignore_errors=True)
    run([os.path.join(ANCHORS, "viper-bench"), "prefill", "--records", str(args.records),
         "--threads", "2", "--pool", pool, "--pool-gib", "3", "--keep"])
    out, _ = run([os.path.join(ANCHORS, "viper-bench"), "recover", "--records", str(args.records),
                  "--rthreads", str(threads), "--pool", pool, "--pool-gib", "3"])
    shutil.rmtree(pool, ignore_errors=True)
    for line in out.splitlines():
        if line.startswith("RESULT") and "phase=recover" in line:
            return dict(re.findall(r"(\w+)=(\S+)", line))
    sys.exit("viper recover printed no RESULT line:\n" + out)


TB_WORKLOAD = {
    "insert": ["--workload-file", os.path.join(ANCHORS, "tb_insert.toml")],
    "get": ["--workload", "c", "--distribution", "uniform"],
    "update": ["--workload-file", os.path.join(ANCHORS, "tb_update.toml")],
    "ycsba": ["--workload", "a", "--distribution", "uniform"],
}


def tierbase(mode, threads, args, extra=()):
    d = os.path.join(args.dir, "tb")
    shutil.rmtree(d, ignore_errors=True)
    out_json = os.path.join(args.dir, "tb-result.json")
    ops = args.inserts if mode == "insert" else args.ops
    cmd = [TIERBASE, "bench", "ycsb", "--store", args.store, "--key-size", "16", "--value-size", "200",
           "--records", str(args.records), "--threads", str(threads), "--warmup", "0",
           "--max-time", "0", "--flush", args.flush, "--dir", d, "--ops", str(ops), "-q",
           "--out", out_json] + TB_WORKLOAD[mode] + list(extra)
    run(cmd)
    with open(out_json) as f:
        r = json.load(f)["runs"][0]
    shutil.rmtree(d, ignore_errors=True)
    os.remove(out_json)
    op = next(iter(r["operations"].values()))
    return {"load": r["load"]["throughput"], "run": r["throughput"],
            "max_ns": max(o["latency_ns"]["max"] for o in r["operations"].values()),
            "p999_ns": op["latency_ns"]["p999"], "notes": r["store_notes"]}


def tierbase_recover(threads, args):
    cmd = [TIERBASE, "bench", "recovery", "--store", args.store, "--records", str(args.records), "--threads",
           str(threads), "--repeat", "1", "--dir", args.dir]
    if args.after_crash:
        # Time recovery from the image a crash leaves (every record checked), as Viper's
        # recovery always scans; without it, recovery after a clean close is timed.
        cmd.append("--after-crash")
    out, _ = run(cmd)
    m = re.search(rf"recovery with {threads} thread\(s\): median ([\d.]+) s", out)
    if not m:
        sys.exit("tierbase bench recovery printed no median:\n" + out)
    return {"secs": float(m.group(1)), "raw": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--inserts", type=int, default=5_000_000)
    ap.add_argument("--ops", type=int, default=10_000_000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", default="insert,get,update,ycsba")
    ap.add_argument("--flush", default="clwb")
    ap.add_argument("--store", default="kv", help="tierbase store: kv or plush")
    ap.add_argument("--dir", default="/dev/shm/viper-compare")
    ap.add_argument("--out", default="viper-compare.json")
    ap.add_argument("--tb-variant", action="append", default=None, metavar="ARGS",
                    help="extra `tierbase bench ycsb` arguments, e.g. '--read-batch 16'; "
                         "repeat for several variants (each runs beside Viper in every rep; "
                         "'' is the plain one) [default: '']")
    ap.add_argument("--after-crash", action="store_true",
                    help="time tierbase's recovery from a crash image, not after a clean close")
    args = ap.parse_args()
    global ARGS
    ARGS = args
    os.makedirs(args.dir, exist_ok=True)
    threads = [int(t) for t in args.threads.split(",")]
    variants = args.tb_variant or [""]
    rows = args.rows.split(",")
    samples = {}  # (row, threads) -> {"viper": [...], "tierbase": [...], "tb_max_ns": [...]}

    def add(row, t, system, value):
        samples.setdefault(f"{row}/{t}", {}).setdefault(system, []).append(value)

    for rep in range(args.reps):
        for row in rows:
            for t in threads:
                # The order alternates by repetition: on a shared machine whichever runs
                # second may inherit the first one's leftovers (freed tmpfs pages, a warm or
                # cold CPU), and a fixed order would bias every pair the same way.
                if row == "recover":
                    tb = tierbase_recover(t, args) if rep % 2 == 1 else None
                    v = viper_recover(t, args)
                    add(row, t, "viper", float(v["secs"]))
                    tb = tb or tierbase_recover(t, args)
                    add(row, t, "tierbase", tb["secs"])
                    print(f"rep {rep} {row} t={t}: viper {v['secs']} s, tierbase {tb['secs']} s",
                          flush=True)
                    continue
                tb_runs = {}
                if rep % 2 == 1:
                    for variant in variants:
                        tb_runs[variant] = tierbase(row, t, args, variant.split())
                v = viper(row, t, args)
                add(row, t, "viper", float(v[row]["ops_per_s"]))
                add("load", t, "viper", float(v["prefill"]["ops_per_s"]))
                for variant in variants:
                    tb = tb_runs.get(variant) or tierbase(row, t, args, variant.split())
                    name = f"tierbase {variant}".strip()
                    add(row, t, name, tb["run"])
                    add(row, t, f"{name} max_ns", tb["max_ns"])
                    add("load", t, name, tb["load"])
                    print(f"rep {rep} {row} t={t}: viper {float(v[row]['ops_per_s']):,.0f}/s "
                          f"(prefill {float(v['prefill']['ops_per_s']):,.0f}), {name} "
                          f"{tb['run']:,.0f}/s (load {tb['load']:,.0f}), max "
                          f"{tb['max_ns'] / 1e6:.1f} ms", flush=True)

    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "samples": samples}, f, indent=1)
    print("\n| row | threads | Viper (median) | tierbase (median) | ratio of medians | "
          "ratio by pairs: median (range) | samples | tb max latency |")
    print("|---|---|---|---|---|---|---|---|")
    for key, s in samples.items():
        row, t = key.split("/")
        vm = statistics.median(s["viper"])
        for name in [n for n in s if n.startswith("tierbase") and not n.endswith("max_ns")]:
            tm = statistics.median(s[name])
            # Each repetition's two runs ran back to back: their ratio is what drifts least
            # on a machine whose speed changes between repetitions. Samples are appended in
            # the same order for Viper and for each variant, so the i-th ones pair up.
            pairs = sorted(b / a for a, b in zip(s["viper"], s[name]))
            pr = f"{statistics.median(pairs):.2f} ({pairs[0]:.2f}–{pairs[-1]:.2f})"
            if row == "recover":
                pr += " (time)"
            if row == "recover":
                ratio = f"{tm / vm:.2f} (time)"
                vs, ts = f"{vm:.2f} s", f"{tm:.2f} s"
            else:
                ratio = f"{tm / vm:.2f}"
                vs, ts = f"{vm / 1e6:.2f} M/s", f"{tm / 1e6:.2f} M/s"
            mx = s.get(f"{name} max_ns")
            mxs = f"{max(mx) / 1e6:.1f} ms" if mx else ""
            label = row if name == "tierbase" else f"{row} ({name[len('tierbase '):]})"
            print(f"| {label} | {t} | {vs} | {ts} | {ratio} | {pr} | {len(s['viper'])} | {mxs} |")


if __name__ == "__main__":
    main()
