#!/usr/bin/env python3
"""A/B of HTTP servers: CPU per request under wrk, each contender in
interleaved rounds (the order rotated), server on CPU 1 and wrk on CPU 0,
medians, and each contender's ratio to the first — for the whole CPU
time and for its user part alone (the server's own code: the kernel's
share, the same work for every server, is most of this VM's noise).

    python3 bench/ab_http.py 'OLD_CMD' 'NEW_CMD' [...] [--rounds 5] [--loads 50,500,50:p]

A contender is a command line; the server's address `127.0.0.1:PORT` is
appended to it (so `target/release/hello`, or
`'/tmp/old-target/release/http_server spindle'`), and it prints a line
naming that address when it listens. A load is a connection count; `:p`
adds pipeline.lua (16 requests per write).

This VM's CPU cost per request is bimodal (rounds near 6.7 µs and near
8.4 µs, for every server alike, switching within seconds), so besides
the median each contender gets its best round and the median of its
per-round ratios to the first contender, measured back to back. Build an old binary from a
worktree of the old commit with its own CARGO_TARGET_DIR.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def one(cmd, conns, secs, extra, port):
    p = subprocess.Popen(["taskset", "-c", "1"] + shlex.split(cmd) + [f"127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    p.stdout.readline()

    def cpu():
        f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) / TICK, int(f[12]) / TICK

    url = f"http://127.0.0.1:{port}/"
    subprocess.run(["taskset", "-c", "0", "wrk", "-t1", f"-c{conns}", "-d1s"] + extra + [url],
                   capture_output=True)
    c0 = cpu()
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", f"-c{conns}", f"-d{secs}s"] + extra + [url],
                         capture_output=True, text=True).stdout
    c1 = cpu()
    p.kill()
    p.wait()
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    user, system = ((b - a) / reqs * 1e6 for a, b in zip(c0, c1))
    return user + system, user


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("contenders", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--loads", default="50,500,50:p")
    a = ap.parse_args()
    loads = a.loads.split(",")
    res = {}
    port = 19000
    cs = a.contenders
    for r in range(a.rounds):
        for load in loads:
            conns = int(load.split(":")[0])
            extra = ["-s", os.path.join(HERE, "pipeline.lua")] if load.endswith("p") else []
            for c in cs[r % len(cs):] + cs[:r % len(cs)]:
                port += 1
                res.setdefault((load, c), []).append(one(c, conns, a.secs, extra, port))
    for load in loads:
        first = [t for t, _ in res[(load, cs[0])]]
        base = statistics.median(first)
        ubase = statistics.median(u for _, u in res[(load, cs[0])])
        print(f"load {load} (CPU µs per request, median of {a.rounds}; user = in the server's own code;"
              f" min = the best round; paired = median of each round's ratio to the first contender"
              f" in the same round):")
        for c in cs:
            xs = [t for t, _ in res[(load, c)]]
            us = [u for _, u in res[(load, c)]]
            m, mu = statistics.median(xs), statistics.median(us)
            paired = statistics.median(x / f for x, f in zip(xs, first))
            print(f"  {m:8.3f}  {m / base:5.3f}x  user {mu:6.3f} {mu / ubase:5.3f}x"
                  f"  min {min(xs):6.3f}  paired {paired:5.3f}x  {c}"
                  f"   rounds: {' '.join('%.2f' % x for x in xs)}")


if __name__ == "__main__":
    main()
