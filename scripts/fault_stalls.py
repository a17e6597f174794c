#!/usr/bin/env python3
"""How long can one first touch of fresh memory stall on this machine?

Touches every 4 KiB page of a fresh mapping once (a tmpfs file under --dir, and anonymous
memory) and reports the slowest single touch, alone and with every other CPU kept busy by a
spinning process. No tierbase code runs: this measures the platform a latency figure was taken
on. On the 2-vCPU KVM guest of docs/BENCHMARKS.md Figure 25, one touch took at most 0.6-2.4 ms
alone and up to 20-37 ms while the other vCPU was busy, which is why a store that grows while
two writers keep both vCPUs busy cannot keep every operation under 10 ms there.

    python3 scripts/fault_stalls.py --dir /dev/shm --size-mib 3072 --reps 3
"""

import argparse
import mmap
import multiprocessing as mp
import os
import time


def spin(stop):
    while not stop.is_set():
        pass


def touch(size, path):
    """Slowest single first touch (ms), pages slower than 5 ms, and seconds for all."""
    if path:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
    else:
        fd, m = None, mmap.mmap(-1, size)
    worst, slow, start = 0.0, 0, time.monotonic()
    try:
        for off in range(0, size, 4096):
            t0 = time.monotonic()
            m[off] = 1
            d = time.monotonic() - t0
            worst = max(worst, d)
            slow += d > 0.005
    finally:
        m.close()
        if fd is not None:
            os.close(fd)
            os.unlink(path)
    return worst * 1000, slow, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/dev/shm", help="tmpfs directory for the file case")
    ap.add_argument("--size-mib", type=int, default=3072, help="bytes touched per run (MiB)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    size = a.size_mib << 20
    busy = max(os.cpu_count() - 1, 1)
    path = os.path.join(a.dir, f"fault_stalls.{os.getpid()}")
    print(f"{os.cpu_count()} CPUs; {a.size_mib} MiB touched per run, one 4 KiB page at a time")
    print(f"{'memory':<10} {'other CPUs':<12} {'run':>3} {'slowest touch':>14} {'>5 ms':>6} {'total':>7}")
    for rep in range(1, a.reps + 1):
        for kind, p in (("tmpfs", path), ("anonymous", None)):
            for load in ("idle", f"{busy} busy"):
                stop = mp.Event()
                spinners = []
                if load != "idle":
                    spinners = [mp.Process(target=spin, args=(stop,)) for _ in range(busy)]
                    for s in spinners:
                        s.start()
                    time.sleep(0.2)
                try:
                    worst, slow, secs = touch(size, p)
                finally:
                    stop.set()
                    for s in spinners:
                        s.join()
                print(f"{kind:<10} {load:<12} {rep:>3} {worst:>11.2f} ms {slow:>6} {secs:>6.2f}s")


if __name__ == "__main__":
    main()
