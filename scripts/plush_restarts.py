#!/usr/bin/env python3
"""Payload space of a Plush store behind `tierbase serve` across kill -9 restarts
(docs/BENCHMARKS.md, Figure 44 (c)).

Each round starts the server, overwrites and deletes 150 keys (values of 0 B-300 KB, 10 % of
0.5-1.5 MB) for --seconds, kills the server with SIGKILL in the middle of the stream, and
prints the file's size and `plush stats`' payload line. At the end every acknowledged write is
checked (the one in flight at a kill may have landed or not). Needs only python3.

  python3 scripts/plush_restarts.py --bin target/release/tierbase --dir /dev/shm/reo
"""

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time


class Resp:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        i = self.buf.index(b"\r\n")
        line, self.buf = self.buf[:i], self.buf[i + 2:]
        return line

    def _read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        raise ValueError(line)

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += [b"$%d\r\n" % len(a), a, b"\r\n"]
        self.sock.sendall(b"".join(out))
        return self._read()


def value(seq, length):
    return random.Random(seq).randbytes(length)


def start_server(args, path):
    server = subprocess.Popen(
        [args.bin, "serve", "--store", "plush", "--path", path, "--listen", f"127.0.0.1:{args.port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(100):
        try:
            return server, Resp(args.port)
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the server did not start")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/tierbase")
    p.add_argument("--dir", default="/dev/shm/plush-restarts")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--port", type=int, default=6442)
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    path = os.path.join(args.dir, "s.pl")
    subprocess.run([args.bin, "plush", "create", "--path", path, "--layout", "variable"],
                   check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(1)
    state, seq, acked, pending = {}, 0, 0, None
    for round_ in range(1, args.rounds + 1):
        server, conn = start_server(args, path)
        threading.Timer(args.seconds, lambda s=server: os.killpg(s.pid, signal.SIGKILL)).start()
        try:
            while True:
                seq += 1
                key = "c%d" % rng.randrange(150)
                c = rng.random()
                if c < 0.15:
                    pending = (key, None)
                    conn.cmd("DEL", key)
                else:
                    length = (rng.choice([0, 1, 50, 3000, rng.randint(1, 300000)]) if c < 0.9
                              else rng.randint(500000, 1500000))
                    pending = (key, (seq, length))
                    conn.cmd("SET", key, value(seq, length))
                state[pending[0]] = pending[1]
                acked += 1
                pending = None
        except (EOFError, OSError):
            pass
        server.wait()
        stats = subprocess.run([args.bin, "plush", "--path", path, "stats"],
                               capture_output=True, text=True).stdout
        payload = next((l for l in stats.splitlines() if l.startswith("payload")), "")
        print(f"round {round_}: file {os.path.getsize(path) >> 20} MiB | {payload}", flush=True)
    server, conn = start_server(args, path)
    bad = 0
    for key in sorted(set(state) | ({pending[0]} if pending else set())):
        got = conn.cmd("GET", key)
        want = state.get(key)
        ok = got == (None if want is None else value(*want))
        if not ok and pending and pending[0] == key:
            ok = got == (None if pending[1] is None else value(*pending[1]))
        bad += not ok
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    print(f"acknowledged writes {acked}, keys wrong or lost {bad}")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
