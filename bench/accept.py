#!/usr/bin/env python3
"""Per-core accept: spindle-http's three accept modes on 2 workers against
tokio multi_thread(2) + hyper, may_minihttp (2 workers) and Go net/http
(GOMAXPROCS=2), `wrk -t1 -c500` for `Hello, World!`.

The machine this runs on in CI has two CPUs, so the server (both workers)
runs on CPUs 0-1 and wrk shares CPU 0 with it: the numbers compare servers
under the same squeeze, not absolute capacity. Reported per server, as the
median over interleaved rounds:

  requests/s, server CPU µs per request, p99 latency, and the spread: the
  busier of the two busiest threads' share of their CPU time (50 % is an
  even split; 100 % means one thread did everything).

    python3 bench/accept.py [--rounds 5] [--secs 5]
"""

import argparse
import os
import re
import statistics
import subprocess


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")

RUST = os.path.join(T, "http_server")
SERVERS = {
    "spindle-http, shared accept": ([RUST, "spindle"], {"BENCH_ACCEPT": "shared"}),
    "spindle-http, per-worker (SO_REUSEPORT)": ([RUST, "spindle"], {"BENCH_ACCEPT": "per-worker"}),
    "spindle-http, round-robin": ([RUST, "spindle"], {"BENCH_ACCEPT": "round-robin"}),
    "tokio multi_thread(2) + hyper": ([RUST, "hyper"], {}),
    "may_minihttp (2 workers)": ([RUST, "may"], {}),
    "go net/http (GOMAXPROCS=2)": ([os.path.join(T, "http_go")], {}),
}
ENV = {"BENCH_WORKERS": "2", "GOMAXPROCS": "2"}


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "http_server"],
                   cwd=HERE, env=env, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "http_go"), "http.go"],
                   cwd=os.path.join(HERE, "go", "http"), check=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ticks(path):
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def thread_ticks(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = ticks(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            pass
    return out


def to_ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def one(cmd, extra_env, secs):
    env = dict(os.environ, **ENV, **extra_env)
    p = subprocess.Popen(["taskset", "-c", "0,1"] + cmd + [f"127.0.0.1:{free_port()}"],
                         stdout=subprocess.PIPE, text=True, env=env)
    addr = p.stdout.readline().split()[1]
    url = f"http://{addr}/"
    wrk = ["taskset", "-c", "0", "wrk", "-t1", "-c500"]
    subprocess.run(wrk + ["-d1s", url], capture_output=True)
    c0, t0 = ticks(f"/proc/{p.pid}/stat"), thread_ticks(p.pid)
    out = subprocess.run(wrk + [f"-d{secs}s", "--latency", url],
                         capture_output=True, text=True).stdout
    c1, t1 = ticks(f"/proc/{p.pid}/stat"), thread_ticks(p.pid)
    p.kill()
    p.wait()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    m99 = re.search(r"99%\s+(\S+)", out)
    p99 = to_ms(m99.group(1)) if m99 else float("nan")
    busy = sorted((t1[t] - t0.get(t, 0) for t in t1), reverse=True)[:2]
    spread = 100.0 * busy[0] / max(sum(busy), 1)
    cpu_us = (c1 - c0) / TICK / max(total, 1) * 1e6
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return rps, cpu_us, p99, spread, errors.group(0) if errors else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=int, default=5)
    args = ap.parse_args()
    build()
    results = {name: [] for name in SERVERS}
    for r in range(args.rounds):
        for name, (cmd, extra) in SERVERS.items():
            results[name].append(one(cmd, extra, args.secs))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{args.rounds} interleaved rounds of {args.secs} s, wrk -t1 -c500; "
          "server on CPUs 0-1 (2 workers), wrk on CPU 0; medians.\n")
    print("| server | requests/s | CPU µs/request | p99 ms | busier thread's share | errors |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        med = [statistics.median(x[i] for x in rows) for i in range(4)]
        errors = "; ".join(sorted({x[4] for x in rows if x[4]})) or "none"
        print(f"| {name} | {med[0]:.0f} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.0f} % | {errors} |")


if __name__ == "__main__":
    main()
