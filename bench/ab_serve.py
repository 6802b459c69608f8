#!/usr/bin/env python3
"""A/B of two builds of `spindle serve`: CPU per request under wrk, old and
new in interleaved rounds (order alternating), server on CPU 1 with one
worker and wrk on CPU 0, medians; and, with --parked N, the RSS growth of
N requests parked in the WASI 0.3 sleep guest (via parked_memory.py).

    python3 bench/ab_serve.py OLD_BIN NEW_BIN [--rounds 5] [--secs 3]
        [--guests hello-p3,hello] [--conns 50] [--parked 10000]

A guest is a name in guests/wasm/ without `.wasm`. Build the old binary
from a worktree of the old commit with its own CARGO_TARGET_DIR.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def one(binary, guest, conns, secs):
    port = free_port()
    wasm = os.path.join(ROOT, "guests", "wasm", guest + ".wasm")
    p = subprocess.Popen(["taskset", "-c", "1", binary, "serve", wasm, "--listen",
                          f"127.0.0.1:{port}", "--workers", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/"
        wrk = ["taskset", "-c", "0", "wrk", "-t1", f"-c{conns}"]
        subprocess.run(wrk + ["-d1s", url], capture_output=True)
        c0 = cpu_seconds(p.pid)
        out = subprocess.run(wrk + [f"-d{secs}s", url], capture_output=True, text=True).stdout
        c1 = cpu_seconds(p.pid)
    finally:
        p.kill()
        p.wait()
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise SystemExit(f"{binary} {guest}: {non2xx.group(1)} non-2xx answers")
    return (c1 - c0) / reqs * 1e6


def parked(binary, n):
    out = subprocess.run(["python3", os.path.join(HERE, "parked_memory.py"), "--n", str(n),
                          "--binary", binary], capture_output=True, text=True).stdout
    m = re.search(r"RSS growth ([\d.]+) MiB, ([\d.]+) KiB per request", out)
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--guests", default="hello-p3,hello")
    ap.add_argument("--parked", type=int, default=0)
    a = ap.parse_args()
    guests = a.guests.split(",") if a.guests else []
    cpu, mem = {}, {}
    for r in range(a.rounds):
        order = [a.old, a.new] if r % 2 == 0 else [a.new, a.old]
        for guest in guests:
            for b in order:
                cpu.setdefault((guest, b), []).append(one(b, guest, a.conns, a.secs))
        if a.parked:
            for b in order:
                mem.setdefault(b, []).append(parked(b, a.parked))
    for guest in guests:
        old = statistics.median(cpu[(guest, a.old)])
        new = statistics.median(cpu[(guest, a.new)])
        olds, news = cpu[(guest, a.old)], cpu[(guest, a.new)]
        paired = statistics.median(n / o for n, o in zip(news, olds))
        print(f"{guest:10s} CPU µs/request (c{a.conns}): old {old:.2f}  new {new:.2f}  "
              f"new/old {new / old:.3f}  (best rounds {min(olds):.2f} {min(news):.2f}, "
              f"median of per-round new/old {paired:.3f})")
        print(f"{'':10s} rounds old: {' '.join('%.2f' % x for x in olds)}")
        print(f"{'':10s} rounds new: {' '.join('%.2f' % x for x in news)}")
    for b, label in ((a.old, "old"), (a.new, "new")):
        if b in mem:
            mib = statistics.median(m[0] for m in mem[b])
            kib = statistics.median(m[1] for m in mem[b])
            print(f"{a.parked} parked, {label}: RSS growth {mib:.1f} MiB, {kib:.2f} KiB/request "
                  f"(runs: {', '.join(f'{m[0]:.1f}' for m in mem[b])})")


if __name__ == "__main__":
    main()
