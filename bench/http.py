#!/usr/bin/env python3
"""HTTP plaintext benchmark (issue 5, first cut): wrk against spindle-http,
tokio + hyper and Go net/http, each server on one worker pinned to CPU 1,
wrk (1 thread) pinned to CPU 0, interleaved rounds, medians.

On 2 cores wrk saturates its own CPU long before the servers do, so
requests/s alone cannot rank them: the table reports each server's CPU
time per request (from /proc/PID/stat over the run) next to requests/s
and p99.

    python3 bench/http.py [--rounds 3] [--secs 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")

SERVERS = {
    "spindle-http": ([os.path.join(T, "http_server"), "spindle"], {}),
    "tokio + hyper (1 worker)": ([os.path.join(T, "http_server"), "hyper"], {}),
    "go net/http (GOMAXPROCS=1)": ([os.path.join(T, "http_go")], {"GOMAXPROCS": "1"}),
}


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "http_go"), "http.go"],
                   cwd=os.path.join(HERE, "go", "http"), check=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def to_ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s)", text)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def one(name, conns, secs):
    cmd, env = SERVERS[name]
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd + ["127.0.0.1:0"], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, **env))
    addr = p.stdout.readline().split()[1]
    subprocess.run(["wrk", "-t1", "-c", str(conns), "-d1s", f"http://{addr}/"], capture_output=True)
    c0 = cpu_seconds(p.pid)
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c", str(conns), f"-d{secs}s", "--latency",
                          f"http://{addr}/"], capture_output=True, text=True).stdout
    c1 = cpu_seconds(p.pid)
    p.kill()
    p.wait()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p99 = to_ms(re.search(r"99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return rps, (c1 - c0) / total * 1e6, p99, errors.group(0) if errors else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    args = ap.parse_args()
    build()
    names = list(SERVERS)
    res = {(n, c): [] for n in names for c in (1, 50, 500)}
    for r in range(args.rounds):
        for c in (1, 50, 500):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                res[(n, c)].append(one(n, c, args.secs))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.rounds} interleaved rounds of {args.secs} s; server on CPU 1, wrk on CPU 0; medians.\n")
    for c in (1, 50, 500):
        print(f"**{c} connection{'s' if c > 1 else ''}**\n")
        print("| server | requests/s | CPU µs/request | p99 ms | errors |")
        print("|---|---|---|---|---|")
        for n in names:
            rows = res[(n, c)]
            med = lambda i: statistics.median(x[i] for x in rows)
            errs = ";".join(sorted({x[3] for x in rows if x[3]})) or "none"
            print(f"| {n} | {med(0):.0f} | {med(1):.2f} | {med(2):.2f} | {errs} |")
        print()


if __name__ == "__main__":
    main()
