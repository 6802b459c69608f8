#!/usr/bin/env python3
"""Netpoller benchmarks: TCP echo and timers, Spindle against tokio and Go.

Each server runs on one worker thread pinned to one CPU (taskset), the load
generator (a tokio client, the same for every server) on the other CPU.
Rounds are interleaved (every server once per round, order rotated);
medians are reported with the ratio to Spindle.

Rows:
  * echo RTT, 1 connection: median round trip of 64 bytes (lower is better)
  * echo throughput, 100 connections ping-ponging 64 bytes: messages/s and
    the server's CPU time per message (from /proc/PID/stat)
  * 10 000 idle connections (one round trip each, then held): server RSS
    growth per connection
  * 100 000 timers armed and fired (1 000 fibers each sleeping 1 ms 100
    times): CPU per timer and lateness per sleep

    python3 bench/net.py [--rounds 5] [--quick]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "spindle", "--example", "echo"],
                   cwd=ROOT, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "echo_go"), "echo.go"],
                   cwd=os.path.join(HERE, "go", "echo"), check=True)


SERVERS = {
    "spindle": ([os.path.join(T, "echo_server"), "spindle"], {}),
    # What a user runs: the README's example as shipped (default runtime,
    # stall watchdog on, Nagle on), not a server written for this script.
    "spindle examples/echo.rs": ([os.path.join(T, "examples", "echo")], {}),
    "tokio (current_thread)": ([os.path.join(T, "echo_server"), "tokio"], {}),
    "go (GOMAXPROCS=1)": ([os.path.join(T, "echo_go")], {"GOMAXPROCS": "1"}),
}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def client(args, **kw):
    return subprocess.run(["taskset", "-c", "0", os.path.join(T, "echo_client")] + args,
                          capture_output=True, text=True, timeout=300, **kw)


def value(out, key):
    for line in out.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[1])
    sys.exit(f"no {key} in {out}")


def run_server(name, quick):
    cmd, env = SERVERS[name]
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd + ["127.0.0.1:0"], stdout=subprocess.PIPE,
                         text=True, env=dict(os.environ, **env))
    line = p.stdout.readline()
    addr = line.split()[-1]  # `LISTENING ADDR`, or the example's sentence ending in it
    res = {}
    out = client(["rtt", addr, "5000" if quick else "30000"]).stdout
    res["rtt"] = value(out, "RESULT")
    res["rtt_p99"] = value(out, "P99")
    c0 = cpu_seconds(p.pid)
    out = client(["tput", addr, "100", "2" if quick else "5"]).stdout
    c1 = cpu_seconds(p.pid)
    res["tput"] = value(out, "RESULT")
    res["cpu_per_msg"] = (c1 - c0) / value(out, "TOTAL") * 1e6
    time.sleep(0.3)
    r0 = rss_kib(p.pid)
    n = 2000 if quick else 10000
    idle = subprocess.Popen(["taskset", "-c", "0", os.path.join(T, "echo_client"), "idle", addr, str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert idle.stdout.readline().strip() == "READY"
    time.sleep(0.3)
    res["idle_kib"] = (rss_kib(p.pid) - r0) / n
    idle.stdin.close()
    idle.wait(timeout=60)
    p.kill()
    p.wait()
    return res


def timers(which, n):
    out = subprocess.run(["taskset", "-c", "1", os.path.join(T, "timers"), which, str(n)],
                         capture_output=True, text=True, timeout=300).stdout
    return value(out, "RESULT"), value(out, "WALL_OVER")


def table(title, unit, rows, better):
    base = statistics.median(rows["spindle"])
    print(f"**{title}** ({better} is better)\n")
    print(f"| server | median | ratio to spindle |")
    print("|---|---|---|")
    for name, vals in rows.items():
        m = statistics.median(vals)
        print(f"| {name} | {m:.2f} {unit} | {m / base:.2f}× |")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    build()
    names = list(SERVERS)
    results = {n: [] for n in names}
    tm = {"spindle": [], "tokio (current_thread)": []}
    tw = {"spindle": [], "tokio (current_thread)": []}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            results[n].append(run_server(n, args.quick))
        for which, key in (("spindle", "spindle"), ("tokio", "tokio (current_thread)")):
            cpu, over = timers(which, 20000 if args.quick else 100000)
            tm[key].append(cpu)
            tw[key].append(over)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"\n{args.rounds} interleaved rounds; server on CPU 1, client on CPU 0; medians.\n")
    pick = lambda k: {n: [x[k] for x in results[n]] for n in names}
    table("echo round trip, 1 connection, 64 B", "µs", pick("rtt"), "lower")
    table("echo round trip p99, 1 connection", "µs", pick("rtt_p99"), "lower")
    table("echo throughput, 100 connections", "msgs/s", pick("tput"), "higher")
    table("server CPU per echoed message, 100 connections", "µs", pick("cpu_per_msg"), "lower")
    table(f"server RSS per idle connection ({2000 if args.quick else 10000} held)", "KiB",
          pick("idle_kib"), "lower")
    table(f"CPU per timer, {20000 if args.quick else 100000} timers (1 000 fibers × 1 ms sleeps)", "µs", tm,
          "lower")
    table("lateness of a 1 ms sleep (mean, 1 000 sleeping at once)", "µs", tw, "lower")


if __name__ == "__main__":
    main()
