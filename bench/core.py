#!/usr/bin/env python3
"""Fiber-core benchmarks: Spindle against corosensei, may, tokio and Go.

Builds every contender, then runs interleaved rounds (each round runs every
contender once, in a rotated order), each process pinned to one CPU with
taskset, and prints the median of each row with its ratio to Spindle as a
Markdown table, and the best round with the ratio of bests. This VM's
noise only ever adds, and most of it on the rows that park many fibers:
a run that touches a gigabyte or two of memory pays the host's fault on
every page the host has taken back since it was last used, and the same
binary takes 0.77 s or 2.2 s for the same 438 000 page faults (`clear_page`
76–90 % of the slow runs' samples) depending on what ran before it.

    python3 bench/core.py [--rounds 5] [--cpu 1] [--quick] [--only TEXT]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = os.path.join(ROOT, "target", "release")


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(TARGET, "core_go"), "core.go"],
                   cwd=os.path.join(HERE, "go", "core"), check=True)


def run(cmd, cpu, env=None):
    # A contender's env may name its own CPU set (two-worker rows).
    env = dict(env or {})
    cpu = env.pop("CPUS", cpu)
    full = ["taskset", "-c", str(cpu)] + cmd
    out = subprocess.run(full, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, **(env or {})))
    m = re.search(r"RESULT ([0-9.]+) (\S+)", out.stdout)
    if not m:
        sys.exit(f"no result from {' '.join(full)}:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1)), m.group(2)


def rows(quick):
    n = 200_000 if quick else 2_000_000
    go = {"GOMAXPROCS": "1"}
    sp = lambda b, k: [os.path.join(TARGET, "core_spindle"), b, str(k)]
    pe = lambda p, b, k: [os.path.join(TARGET, "core_peers"), p, b, str(k)]
    gb = lambda b, k: [os.path.join(TARGET, "core_go"), b, str(k)]
    # corosensei and may map each stack with its own guard (2 mappings), so
    # they stop near 32 000 fibers (vm.max_map_count 65 530): stay below it.
    rss_n = 20_000 if quick else 30_000
    big_n = 400_000 if quick else 2_000_000
    return [
        ("switch: suspend+resume pair", [
            ("spindle", sp("switch", 10 * n), None),
            ("corosensei", pe("corosensei", "switch", 10 * n), None),
        ]),
        ("yield_now through the scheduler, 1 worker", [
            ("spindle", sp("yield", n), None),
            ("may", pe("may", "yield", n), None),
            ("go (Gosched)", gb("yield", n), go),
            ("tokio current_thread", pe("tokio-ct", "yield", n), None),
            ("tokio multi_thread(1)", pe("tokio-mt1", "yield", n), None),
        ]),
        ("spawn+run+join of an empty fiber, 1 worker", [
            ("spindle", sp("spawn", n), None),
            ("corosensei, reused stack", pe("corosensei", "spawn", n), None),
            ("corosensei, fresh 256 KiB stack", pe("corosensei", "spawn-fresh", n // 20), None),
            ("tokio current_thread", pe("tokio-ct", "spawn", n), None),
            ("tokio multi_thread(1)", pe("tokio-mt1", "spawn", n), None),
            ("go", gb("spawn", n), go),
            ("may", pe("may", "spawn", n // 10), None),
        ]),
        ("spawn+join, one after another, the closure returns a value; `spindle::run` as a user writes it", [
            ("spindle", sp("spawn-value", n), None),
            ("tokio current_thread (inside a spawned task)", pe("tokio-ct", "spawn-value", n), None),
            ("tokio current_thread, no I/O or time driver", pe("tokio-ct-bare", "spawn-value", n), None),
            ("go (a channel for the result)", gb("spawn-value", n), go),
            ("may", pe("may", "spawn-value", n // 10), None),
        ]),
        ("spawn 1 000, then join them (each returns a value)", [
            ("spindle", sp("spawn-batch", n), None),
            ("tokio current_thread (inside a spawned task)", pe("tokio-ct", "spawn-batch", n), None),
            ("tokio current_thread, no I/O or time driver", pe("tokio-ct-bare", "spawn-batch", n), None),
            ("go (a channel per goroutine)", gb("spawn-batch", n), go),
        ]),
        ("yield_now through the scheduler, 2 workers at once (4 fibers; per yield of one worker); CPUs 0-1", [
            ("spindle", sp("yield2", n), {"CPUS": "0,1"}),
            ("go (Gosched, GOMAXPROCS=2)", gb("yield2", n), {"GOMAXPROCS": "2", "CPUS": "0,1"}),
            ("tokio multi_thread(2)", pe("tokio-mt2", "yield2", n), {"CPUS": "0,1"}),
        ]),
        ("yield_now from the only fiber", [
            ("spindle", sp("yield-lone", n), None),
            ("go (Gosched)", gb("yield-lone", n), go),
            ("may", pe("may", "yield-lone", n), None),
            ("tokio current_thread (inside a spawned task)", pe("tokio-ct", "yield-lone", n), None),
        ]),
        ("the `fibers` example: 100 000 fibers spawned, each yields once, all joined; 2 workers on CPUs 0-1", [
            ("spindle", sp("fibers", 100_000), {"CPUS": "0,1"}),
            ("go (GOMAXPROCS=2)", gb("fibers", 100_000), {"GOMAXPROCS": "2", "CPUS": "0,1"}),
        ]),
        ("spawn and park 200 000 fibers, 1 worker", [
            ("spindle", sp("spawn-park", 200_000), None),
            ("floor: one fresh page per 260 KiB slot, no runtime", sp("page-touch", 200_000), None),
            ("go", gb("spawn-park", 200_000), go),
            ("tokio current_thread (tasks on a oneshot)", pe("tokio-ct", "spawn-park", 200_000), None),
        ]),
        (f"spawn and park {big_n} fibers, 1 worker", [
            ("spindle", sp("spawn-park", big_n), None),
            ("floor: one fresh page per 260 KiB slot, no runtime", sp("page-touch", big_n), None),
            ("go", gb("spawn-park", big_n), go),
            ("tokio current_thread (tasks on a oneshot)", pe("tokio-ct", "spawn-park", big_n), None),
        ]),
        ("shut down with 200 000 parked fibers (each unwound), 1 worker", [
            ("spindle", sp("shutdown-parked", 200_000), None),
            ("tokio current_thread (tasks dropped)", pe("tokio-ct", "shutdown-parked", 200_000), None),
        ]),
        (f"shut down with {big_n} parked fibers (each unwound), 1 worker", [
            ("spindle", sp("shutdown-parked", big_n), None),
            ("tokio current_thread (tasks dropped)", pe("tokio-ct", "shutdown-parked", big_n), None),
        ]),
        (f"RSS per parked fiber, {rss_n} parked", [
            ("spindle", sp("rss", rss_n), None),
            ("tokio (stackless task)", pe("tokio-ct", "rss", rss_n), None),
            ("go", gb("rss", rss_n), go),
            ("corosensei", pe("corosensei", "rss", rss_n), None),
            ("may", pe("may", "rss", rss_n), None),
        ]),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="run only the rows whose title contains this text")
    ap.add_argument("--million", action="store_true", help="also park 1 000 000 spindle fibers")
    args = ap.parse_args()
    build()
    table = rows(args.quick)
    if args.only:
        table = [(t, cs) for t, cs in table if args.only in t]
    results = {(title, name): [] for title, cs in table for name, _, _ in cs}
    units = {}
    for r in range(args.rounds):
        for title, contenders in table:
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            for name, cmd, env in order:
                value, unit = run(cmd, args.cpu, env)
                results[(title, name)].append(value)
                units[(title, name)] = unit
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.rounds} interleaved rounds, each process pinned to CPU {args.cpu}; medians.\n")
    for title, contenders in table:
        base = statistics.median(results[(title, "spindle")])
        print(f"**{title}**\n")
        best_base = min(results[(title, "spindle")])
        print("| contender | median | ratio to spindle | best | ratio of bests |")
        print("|---|---|---|---|---|")
        for name, _, _ in contenders:
            med = statistics.median(results[(title, name)])
            best = min(results[(title, name)])
            unit = units[(title, name)]
            print(f"| {name} | {med:.2f} {unit} | {med / base:.2f}× "
                  f"| {best:.2f} {unit} | {best / best_base:.2f}× |")
        print()
    if args.million:
        value, unit = run([os.path.join(TARGET, "core_spindle"), "rss", "1000000"], args.cpu)
        print(f"**1 000 000 parked spindle fibers**: {value:.2f} {unit} per fiber\n")


if __name__ == "__main__":
    main()
