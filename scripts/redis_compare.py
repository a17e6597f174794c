#!/usr/bin/env python3
"""tierbase serve against redis-server, side by side, with redis-benchmark.

Runs `redis-benchmark -t set`, then `-t get` (16 B keys `key:<12 digits>`, 200 B values,
50 clients, without pipelining and with -P 16) against `tierbase serve` and `redis-server` at
matching durability, on the same medium, alternating the servers in every repetition, and
prints the medians (throughput, p50, p99, the server's CPU seconds per 100k requests of that
test) as a Markdown table.
The ratios are medians of each repetition's pair (tierbase ÷ redis, the two runs back to back),
with the lowest and highest pair: on a shared machine whose speed drifts between repetitions,
a ratio of the two servers' separate medians follows whichever repetitions hold them.

  scripts/redis_compare.py --reps 3 --media tmpfs,disk [--store btree]

Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools) and a release
build of tierbase (`cargo build --release -p tierbase-cli`). Nothing here is a test.
"""

import argparse
import csv
import io
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIERBASE = os.path.join(ROOT, "target", "release", "tierbase")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, deadline_s=30):
    end = time.time() + deadline_s
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


STORE = "kv"
DRAM = "1G"
THREADS = None


def start(kind, durability, directory):
    port = free_port()
    if kind == "tierbase":
        path = os.path.join(directory, "served.tb")
        level = {"always": "immediate", "everysec": "eventual:1000", "none": "none"}[durability]
        cmd = [TIERBASE, "serve", "--store", STORE, "--path", path, "--listen",
               f"127.0.0.1:{port}", "--durability", level]
        if STORE == "btree":
            cmd += ["--dram", DRAM]
        if THREADS:
            cmd += ["--threads", str(THREADS)]
    else:
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory,
               "--save", "", "--protected-mode", "no"]
        if durability == "none":
            cmd += ["--appendonly", "no"]
        else:
            cmd += ["--appendonly", "yes", "--appendfsync", durability]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    return proc, port


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench(port, test, pipeline, requests):
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests), "-c", "50",
         "-d", "200", "-r", "1000000", "-P", str(pipeline), "--csv"],
        check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    if len(rows) != 1:
        raise RuntimeError(f"redis-benchmark -t {test}: expected one row, got {out!r}")
    return rows[0]


def run_one(kind, durability, medium_dir, pipeline, requests):
    """SET, then GET, against one fresh server; each test's server CPU is measured alone."""
    directory = tempfile.mkdtemp(dir=medium_dir, prefix=f"cmp-{kind}-")
    try:
        proc, port = start(kind, durability, directory)
        results = {}
        try:
            for test in ("set", "get"):
                before = cpu_seconds(proc.pid)
                r = bench(port, test, pipeline, requests)
                cpu = cpu_seconds(proc.pid) - before
                results[r["test"]] = {"rps": float(r["rps"]), "p50": float(r["p50_latency_ms"]),
                                      "p99": float(r["p99_latency_ms"]),
                                      "cpu_per_100k": cpu * 100_000 / requests}
        finally:
            stop(proc)
        return results
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--media", default="tmpfs,disk",
                    help="tmpfs (/dev/shm) and/or disk (a directory on a disk file system)")
    ap.add_argument("--disk-dir", default=os.path.join(ROOT, "target", "redis-compare"))
    ap.add_argument("--durability", default="always,everysec,none")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--requests", type=int, default=200_000,
                    help="requests per test without pipelining (x5 with pipelining)")
    ap.add_argument("--store", default="kv", help="tierbase store to serve (kv, btree)")
    ap.add_argument("--dram", default="1G", help="DRAM budget of the btree store")
    ap.add_argument("--threads", type=int, default=None,
                    help="tierbase serve --threads (default: the server's, one per CPU)")
    args = ap.parse_args()
    global STORE, DRAM, THREADS
    STORE = args.store
    DRAM = args.dram
    THREADS = args.threads
    if not os.path.exists(TIERBASE):
        sys.exit(f"build first: cargo build --release -p tierbase-cli ({TIERBASE} missing)")
    os.makedirs(args.disk_dir, exist_ok=True)
    media = {"tmpfs": "/dev/shm", "disk": args.disk_dir}
    results = {}
    for rep in range(args.reps):
        for medium in args.media.split(","):
            for durability in args.durability.split(","):
                for pipeline in map(int, args.pipelines.split(",")):
                    n = args.requests * (5 if pipeline > 1 else 1)
                    for kind in ("tierbase", "redis") if rep % 2 == 0 else ("redis", "tierbase"):
                        r = run_one(kind, durability, media[medium], pipeline, n)
                        for test, v in r.items():
                            results.setdefault((medium, durability, pipeline, test, kind), {})[rep] = v
                        print(f"rep {rep} {medium} {durability} P{pipeline} {kind}: "
                              + ", ".join(f"{t} {v['rps']:.0f}/s p99 {v['p99']:.2f} ms"
                                          for t, v in r.items()), file=sys.stderr)
    print("| medium | durability (redis / tierbase) | pipeline | test | redis-server ops/s | "
          "tierbase ops/s | ratio (pairs) | p50 ms (r / t) | p99 ms (r / t) | p99 ratio (pairs) | "
          "server CPU s per 100k (r / t) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    level = {"always": "appendfsync always / immediate", "everysec":
             "appendfsync everysec / eventual:1000", "none": "no persistence / none"}
    for (medium, durability, pipeline, test, kind), runs in sorted(results.items()):
        if kind != "redis":
            continue
        t = results.get((medium, durability, pipeline, test, "tierbase"))
        if not t:
            continue
        med = lambda rs, k: statistics.median(x[k] for x in rs.values())

        def paired(k):
            # A repetition's two runs ran back to back; pairs only repetitions with both.
            ratios = [t[rep][k] / runs[rep][k] for rep in runs if rep in t]
            return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"

        print(f"| {medium} | {level[durability]} | {pipeline} | {test} | {med(runs, 'rps'):,.0f} | "
              f"{med(t, 'rps'):,.0f} | {paired('rps')} | "
              f"{med(runs, 'p50'):.3f} / {med(t, 'p50'):.3f} | "
              f"{med(runs, 'p99'):.3f} / {med(t, 'p99'):.3f} | {paired('p99')} | "
              f"{med(runs, 'cpu_per_100k'):.2f} / {med(t, 'cpu_per_100k'):.2f} |")


if __name__ == "__main__":
    main()
