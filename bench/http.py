#!/usr/bin/env python3
"""HTTP benchmark: wrk against spindle-http and its peers, each
server on one worker pinned to CPU 1, wrk (1 thread) pinned to CPU 0,
interleaved rounds, medians.

Spindle is the shipped `examples/hello.rs`, unchanged. Peers, all built by
this script: tokio + hyper (multi-thread runtime, one worker, the accept
loop in a spawned task as hyper's examples do), may_minihttp (one may worker), Go net/http (GOMAXPROCS=1), and
a minimal raw-epoll C server (`c/epoll_http.c`, the floor).

Loads:
  plain     wrk `Hello, World!` at 1, 50 and 500 connections
  pipeline  wrk with pipeline.lua: 16 requests per write, 50 connections
            (the server, not wrk, is the bottleneck)
  tls       TLS handshakes: wrk over https with `Connection: close`, so
            every request is a new connection and a full handshake
            (ECDSA P-256 certificate), spindle-http vs tokio-rustls + hyper,
            both rustls 0.23 with the ring provider

On 2 cores wrk saturates its own CPU near the servers' rates, so
requests/s alone cannot rank them: each row also reports the server's CPU
time per request (from /proc/PID/stat over the run).

    python3 bench/http.py [--rounds 3] [--secs 5] [--loads plain,pipeline,tls]

Writes the tables to stdout and a plot to bench/http.png.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")

SERVERS = {
    # The shipped example (`crates/spindle-http/examples/hello.rs`, built
    # as a bin of this workspace): what a user runs from the README. Pinned
    # to one CPU, `spindle::run` starts one worker.
    "spindle-http": [os.path.join(T, "hello")],
    "tokio + hyper": [os.path.join(T, "http_server"), "hyper"],
    "may_minihttp": [os.path.join(T, "http_server"), "may"],
    "go net/http": [os.path.join(T, "http_go")],
    "raw epoll (C)": [os.path.join(T, "epoll_http")],
}
TLS_SERVERS = {
    "spindle-http (rustls)": [os.path.join(T, "http_server"), "spindle-tls"],
    "tokio-rustls + hyper": [os.path.join(T, "http_server"), "hyper-tls"],
}
ENV = {"GOMAXPROCS": "1"}


def build(tls_dir):
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "http_go"), "http.go"],
                   cwd=os.path.join(HERE, "go", "http"), check=True)
    subprocess.run(["gcc", "-O2", "-o", os.path.join(T, "epoll_http"),
                    os.path.join(HERE, "c", "epoll_http.c")], check=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", os.path.join(tls_dir, "key.pem"), "-out",
                    os.path.join(tls_dir, "cert.pem"), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def to_ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s)", text)
    if not m:
        return float("nan")  # wrk prints -nan when it has no latency sample
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def one(cmd, conns, secs, extra, scheme="http"):
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd + [f"127.0.0.1:{free_port()}"],
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, **ENV))
    addr = re.search(r"(127\.0\.0\.1:\d+)", p.stdout.readline()).group(1)
    url = f"{scheme}://{addr}/"
    subprocess.run(["wrk", "-t1", "-c", str(conns), "-d1s"] + extra + [url], capture_output=True)
    c0 = cpu_seconds(p.pid)
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c", str(conns), f"-d{secs}s", "--latency"]
                         + extra + [url], capture_output=True, text=True).stdout
    c1 = cpu_seconds(p.pid)
    p.kill()
    p.wait()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    m99 = re.search(r"99%\s+(\S+)", out)
    p99 = to_ms(m99.group(1)) if m99 else float("nan")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return rps, (c1 - c0) / max(total, 1) * 1e6, p99, errors.group(0) if errors else ""


def table(title, names, rows, unit="request"):
    print(f"**{title}**\n")
    print(f"| server | {unit}s/s | CPU µs/{unit} | p99 ms | errors |")
    print("|---|---|---|---|---|")
    for n in names:
        r = rows[n]
        med = lambda i: statistics.median(x[i] for x in r)
        errs = ";".join(sorted({x[3] for x in r if x[3]})) or "none"
        print(f"| {n} | {med(0):.0f} | {med(1):.2f} | {med(2):.2f} | {errs} |")
    print()


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (pip install matplotlib): no plot", file=sys.stderr)
        return
    loads = [k for k in results if results[k]]
    fig, axes = plt.subplots(3, len(loads), figsize=(4.2 * len(loads), 10), squeeze=False)
    metrics = [("requests/s", 0), ("server CPU µs/request", 1), ("p99 latency ms", 2)]
    for col, load in enumerate(loads):
        names = list(results[load])
        for row, (label, i) in enumerate(metrics):
            ax = axes[row][col]
            vals = [statistics.median(x[i] for x in results[load][n]) for n in names]
            bars = ax.bar(range(len(names)), vals,
                          color=["#d62728" if n.startswith("spindle") else "#7f7f7f" for n in names])
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=35, ha="right", fontsize=7)
            ax.set_title(f"{load}: {label}", fontsize=9)
            for b, v in zip(bars, vals):
                ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--loads", default="plain,pipeline,tls")
    args = ap.parse_args()
    loads = args.loads.split(",")
    tls_dir = tempfile.mkdtemp(prefix="spindle-bench-tls-")
    ENV["BENCH_TLS_DIR"] = tls_dir
    build(tls_dir)
    names = list(SERVERS)
    tls_names = list(TLS_SERVERS)
    plans = []  # (load key, server names, server table, conns, wrk args, scheme)
    if "plain" in loads:
        for c in (1, 50, 500):
            plans.append((f"{c} conn", names, SERVERS, c, [], "http"))
    if "pipeline" in loads:
        plans.append(("pipelined x16, 50 conn", names, SERVERS, 50,
                      ["-s", os.path.join(HERE, "pipeline.lua")], "http"))
    if "tls" in loads:
        plans.append(("TLS handshakes, 50 conn", tls_names, TLS_SERVERS, 50,
                      ["-H", "Connection: close"], "https"))
    results = {p[0]: {n: [] for n in p[1]} for p in plans}
    for r in range(args.rounds):
        for key, ns, table_of, conns, extra, scheme in plans:
            order = ns[r % len(ns):] + ns[:r % len(ns)]
            for n in order:
                results[key][n].append(one(table_of[n], conns, args.secs, extra, scheme))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.rounds} interleaved rounds of {args.secs} s; server on CPU 1, wrk on CPU 0; medians.\n")
    for key, ns, *_ in plans:
        table(key, ns, results[key], "handshake" if key.startswith("TLS") else "request")
    with open(os.path.join(HERE, "http-results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, os.path.join(HERE, "http.png"))


if __name__ == "__main__":
    main()
