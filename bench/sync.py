#!/usr/bin/env python3
"""Channel and mutex benchmarks: Spindle against Go, tokio,
crossbeam-channel and parking_lot, interleaved rounds, medians, ratios.

    python3 bench/sync.py [--rounds 5]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "sync_go"), "sync.go"],
                   cwd=os.path.join(HERE, "go", "sync"), check=True)


def run(cmd, pin, env=None):
    full = (["taskset", "-c", "1"] if pin else []) + cmd
    out = subprocess.run(full, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **(env or {})))
    m = re.search(r"RESULT ([0-9.]+)", out.stdout)
    if not m:
        sys.exit(f"no result from {full}: {out.stdout} {out.stderr}")
    return float(m.group(1))


def rows():
    sb = lambda w, b, n: [os.path.join(T, "sync_bench"), w, b, str(n)]
    go = lambda b, n: [os.path.join(T, "sync_go"), b, str(n)]
    return [
        ("channel round trip, one worker (pinned to one CPU)", True, [
            ("spindle", sb("spindle", "pingpong1", 300000), None),
            ("tokio mpsc, current_thread", sb("tokio", "pingpong1", 300000), None),
            ("go chan, GOMAXPROCS=1", go("pingpong", 300000), {"GOMAXPROCS": "1"}),
        ]),
        ("channel round trip, across two threads (2 CPUs)", False, [
            ("spindle (ends on two workers)", sb("spindle", "pingpong2", 100000), None),
            ("crossbeam-channel, two threads", sb("crossbeam", "pingpong2", 100000), None),
            ("tokio mpsc, multi_thread(2)", sb("tokio", "pingpong2", 100000), None),
            ("go chan, GOMAXPROCS=2", go("pingpong", 100000), {"GOMAXPROCS": "2"}),
            # The two rows above rarely cross threads: the woken task or
            # goroutine runs next on the thread that woke it. These two
            # keep each end on its own thread, as Spindle's two workers do.
            ("tokio mpsc, each end on its own current_thread runtime and thread",
             sb("tokio", "pingpong2-threads", 50000), None),
            ("go chan, GOMAXPROCS=2, each goroutine LockOSThread'd",
             go("pingpong-locked", 20000), {"GOMAXPROCS": "2"}),
        ]),
        ("uncontended lock+unlock", True, [
            ("spindle Mutex (fiber)", sb("spindle", "mutex", 20000000), None),
            ("parking_lot (thread)", sb("parking_lot", "mutex", 20000000), None),
            ("tokio Mutex (task)", sb("tokio", "mutex", 20000000), None),
            ("go sync.Mutex", go("mutex", 20000000), {"GOMAXPROCS": "1"}),
        ]),
        ("contended: 4 parties incrementing under one lock, 2 CPUs", False, [
            ("spindle Mutex, 4 fibers / 2 workers", sb("spindle", "contended", 2000000), None),
            ("parking_lot, 4 threads", sb("parking_lot", "contended", 2000000), None),
            ("tokio Mutex, 4 tasks / multi_thread(2)", sb("tokio", "contended", 2000000), None),
            ("go sync.Mutex, 4 goroutines, GOMAXPROCS=2", go("contended", 2000000), {"GOMAXPROCS": "2"}),
        ]),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    build()
    table = rows()
    res = {(t, n): [] for t, _, cs in table for n, _, _ in cs}
    for r in range(args.rounds):
        for title, pin, cs in table:
            order = cs[r % len(cs):] + cs[:r % len(cs)]
            for name, cmd, env in order:
                res[(title, name)].append(run(cmd, pin, env))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.rounds} interleaved rounds; medians; ns per operation (lower is better).\n")
    for title, _, cs in table:
        base = statistics.median(res[(title, cs[0][0])])
        print(f"**{title}**\n\n| contender | median | ratio to spindle |\n|---|---|---|")
        for name, _, _ in cs:
            m = statistics.median(res[(title, name)])
            print(f"| {name} | {m:.1f} ns | {m / base:.2f}× |")
        print()


if __name__ == "__main__":
    main()
