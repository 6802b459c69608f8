#!/usr/bin/env python3
"""A/B of two HTTP servers run at the same time: both on CPU 1, each
loaded by its own wrk on CPU 0, for the same seconds; CPU time per request
of each, and their ratio per round.

    python3 bench/ab_together.py 'A_CMD' 'B_CMD' [--rounds 10] [--secs 3] [--conns 50] [--pipeline]

A command gets the server's address `127.0.0.1:PORT` appended and must
print a line when it listens (as for bench/ab_http.py).

Why: this VM's CPU cost per request drifts between rounds by 20-50 % (the
host's state, not the program), so rounds taken one after the other need
many repetitions to show a 1 % difference. Two servers sharing one CPU in
the same seconds see the same host: the ratio of their costs moved by
±1 % from round to round where ab_http.py's paired ratios moved by ±15 %
(2026-12-07). The price: each server's caches are shared with the other's,
so the absolute numbers are above a lone server's, and a change that
shrinks the working set can look better here than alone. For an A/B of
two builds of one server; the rows against other servers stay
ab_http.py's.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def start(cmd, port):
    p = subprocess.Popen(["taskset", "-c", "1"] + shlex.split(cmd) + [f"127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    p.stdout.readline()
    return p


def cpu(p):
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) / TICK, int(f[12]) / TICK


def wrk(port, conns, secs, extra):
    return ["taskset", "-c", "0", "wrk", "-t1", f"-c{conns}", f"-d{secs}s"] + extra + [
        f"http://127.0.0.1:{port}/"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--pipeline", action="store_true", help="16 requests per write (pipeline.lua)")
    args = ap.parse_args()
    extra = ["-s", os.path.join(HERE, "pipeline.lua")] if args.pipeline else []
    ports = (19700 + os.getpid() % 100 * 2, 19701 + os.getpid() % 100 * 2)
    cost = {"a": [], "b": []}
    user = {"a": [], "b": []}
    ratios = []
    for r in range(args.rounds):
        # Alternate which server starts first.
        order = [("a", args.a), ("b", args.b)] if r % 2 == 0 else [("b", args.b), ("a", args.a)]
        procs = {k: start(cmd, port) for (k, cmd), port in zip(order, ports)}
        port_of = {k: port for (k, _), port in zip(order, ports)}
        for k in procs:  # warm up
            subprocess.run(wrk(port_of[k], args.conns, 1, extra), capture_output=True)
        before = {k: cpu(p) for k, p in procs.items()}
        loads = {k: subprocess.Popen(wrk(port_of[k], args.conns, args.secs, extra),
                                     stdout=subprocess.PIPE, text=True) for k in procs}
        outs = {k: w.communicate()[0] for k, w in loads.items()}
        after = {k: cpu(p) for k, p in procs.items()}
        for p in procs.values():
            p.kill()
            p.wait()
        row = {}
        for k in procs:
            n = int(re.search(r"(\d+) requests in", outs[k]).group(1))
            (u0, s0), (u1, s1) = before[k], after[k]
            row[k] = ((u1 - u0) + (s1 - s0)) / n * 1e6
            cost[k].append(row[k])
            user[k].append((u1 - u0) / n * 1e6)
        ratios.append(row["b"] / row["a"])
        print(f"round {r}: A {row['a']:.3f}  B {row['b']:.3f}  B/A {ratios[-1]:.3f}", flush=True)
    med = statistics.median
    print(f"CPU µs per request, median of {args.rounds}: A {med(cost['a']):.3f} (user {med(user['a']):.3f})"
          f"  B {med(cost['b']):.3f} (user {med(user['b']):.3f})")
    print(f"B/A: median of the rounds' ratios {med(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
