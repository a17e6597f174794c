#!/usr/bin/env python3
"""What a log's group commit costs on a file system, by how its space was made.

Times N rounds of one O_DIRECT write of SIZE bytes and one fdatasync, appending through space
that is (a) only allocated with fallocate (ext4/XFS mark it "unwritten", and the fdatasync
after the first write into each extent also commits the extent's conversion), (b) filled
with written zeros beforehand (what the WAL now does, `BlockDevice::grow_written`), and
(c) plain appends past the end of the file. Prints the median microseconds per round of each.

    python3 scripts/sync_into_unwritten.py --dir /var/tmp --size 16384 --rounds 400 --reps 3

The directory must be on the file system to measure (not tmpfs: it has no extents).
"""

import argparse
import mmap
import os
import statistics
import tempfile
import time


def rounds(path, size, n, prepare):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        span = size * n
        if prepare == "fallocate":
            os.posix_fallocate(fd, 0, span)
        elif prepare == "zero-filled":
            zeros = mmap.mmap(-1, 1 << 20)
            for _ in range(0, span, 1 << 20):
                os.write(fd, zeros)
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
        buf.write(b"x" * size)
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, buf)
            os.fdatasync(fd)
        return (time.perf_counter() - start) / n * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--size", type=int, default=16384, help="bytes per write (multiple of 4096)")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    modes = ["fallocate", "zero-filled", "append"]
    results = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for _ in range(args.reps):
            for m in modes:  # alternating, so drift hits every mode alike
                results[m].append(rounds(os.path.join(d, "log"), args.size, args.rounds, m))
    for m in modes:
        print(f"{m:12} {statistics.median(results[m]):8.0f} us per write+fdatasync "
              f"({args.size} B, O_DIRECT, median of {args.reps})")


if __name__ == "__main__":
    main()
