#!/usr/bin/env python3
"""How long can one first touch of fresh memory stall on this machine?

Touches every 4 KiB page of a fresh mapping once (a tmpfs file under --dir, and private
anonymous memory) and reports the slowest single touch, alone and with every other CPU kept
busy by a spinning process. As a control, it then touches the same pages again (mapped
already: no page is allocated). No tierbase code runs: this measures the platform a latency
figure was taken on (docs/BENCHMARKS.md Figure 25).

    python3 scripts/fault_stalls.py --dir /dev/shm --size-mib 3072 --reps 3
"""

import argparse
import mmap
import multiprocessing as mp
import os
import sys
import time


def spin(stop, parent):
    # Also ends if the measuring process dies without setting `stop`.
    while not stop.is_set() and os.getppid() == parent:
        pass


def touch_all(m, size):
    """Slowest single touch (ms), touches slower than 5 ms, and seconds for all."""
    worst, slow, start = 0.0, 0, time.monotonic()
    for off in range(0, size, 4096):
        t0 = time.monotonic()
        m[off] = 1
        d = time.monotonic() - t0
        worst = max(worst, d)
        slow += d > 0.005
    return worst * 1000, slow, time.monotonic() - start


def mapping(size, path):
    """A fresh mapping of `size` bytes: a tmpfs file (unlinked at once) or private anonymous."""
    if path is None:
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.unlink(path)
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/dev/shm", help="tmpfs directory for the file case")
    ap.add_argument("--size-mib", type=int, default=3072, help="bytes touched per run (MiB)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    size = a.size_mib << 20
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        sys.exit("fault_stalls: needs at least 2 usable CPUs (one to measure, others to keep busy)")
    st = os.statvfs(a.dir)
    if st.f_bavail * st.f_frsize < 2 * size:
        sys.exit(f"fault_stalls: {a.dir} has less than twice {a.size_mib} MiB free")
    path = os.path.join(a.dir, f"fault_stalls.{os.getpid()}")
    print(f"{cpus} usable CPUs; {a.size_mib} MiB touched per run, one 4 KiB page at a time")
    print(f"{'memory':<10} {'other CPUs':<12} {'run':>3} {'first touch':>12} {'>5 ms':>6}"
          f" {'again':>10} {'>5 ms':>6}")
    for rep in range(1, a.reps + 1):
        for kind, p in (("tmpfs", path), ("anonymous", None)):
            for load in ("idle", f"{cpus - 1} busy"):
                stop = mp.Event()
                spinners = []
                if load != "idle":
                    spinners = [mp.Process(target=spin, args=(stop, os.getpid()))
                                for _ in range(cpus - 1)]
                    for s in spinners:
                        s.start()
                    time.sleep(0.2)
                try:
                    m = mapping(size, p)
                    try:
                        first, first_slow, _ = touch_all(m, size)
                        again, again_slow, _ = touch_all(m, size)
                    finally:
                        m.close()
                finally:
                    stop.set()
                    for s in spinners:
                        s.join()
                print(f"{kind:<10} {load:<12} {rep:>3} {first:>9.2f} ms {first_slow:>6}"
                      f" {again:>7.2f} ms {again_slow:>6}")


if __name__ == "__main__":
    main()
