#!/usr/bin/env python3
"""The hook (`spindle-hook`): code Spindle did not write, from fibers.

Rows, each side by side in one run, interleaved rounds, medians:
  * fan-out: N fibers (1 000, 10 000) each in one request that waits 200 ms
    at the server, through ureq and through plain std::net, against Go's
    net/http client with N goroutines; wall time / 200 ms (1.0: every wait
    overlapped). Client on CPU 1, the Go delay server on CPU 0.
  * the hook's cost on a call that does not wait: recv of a ready byte,
    hooked and libc's own, on a fiber and on a thread (ns per call).
  * echo, 100 connections ping-ponging 64 bytes, one worker on CPU 1, the
    load on CPU 0: blocking std::net parked by the hook against
    spindle::net (both with the hook installed): server CPU per message.
  * spindle-http's hello (the shipped example's code) with the hook
    installed, linked but not installed, and the shipped example itself
    (no hook linked): server CPU per request under wrk -c50.

    python3 bench/hook.py [--rounds 3] [--quick]
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
sys.path.insert(0, HERE)
from net import cpu_seconds  # noqa: E402  (the same /proc reading as net.py's rows)


def build():
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "spindle-http", "--example", "hello"],
                   cwd=ROOT, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "fanout_go"), "fanout.go"],
                   cwd=os.path.join(HERE, "go", "fanout"), check=True)


def value(out, key):
    m = re.search(key + r" ([0-9.]+)", out)
    if not m:
        raise SystemExit(f"no {key} in {out!r}")
    return float(m.group(1))


def fanout(rounds, sizes):
    server = subprocess.Popen(["taskset", "-c", "0", os.path.join(T, "fanout_go"), "server",
                               "127.0.0.1:18431", "200"], stdout=subprocess.PIPE, text=True)
    server.stdout.readline()
    time.sleep(0.3)
    url = "http://127.0.0.1:18431/"
    clients = {
        "spindle + hook, ureq": [os.path.join(T, "hook_fanout"), "ureq", url],
        "spindle + hook, std::net": [os.path.join(T, "hook_fanout"), "std", url],
        "go net/http, goroutines": [os.path.join(T, "fanout_go"), "client", url],
    }
    res = {}
    for r in range(rounds):
        for n in sizes:
            names = list(clients)
            names = names[r % len(names):] + names[:r % len(names)]
            for name in names:
                out = subprocess.run(["taskset", "-c", "1"] + clients[name] + [str(n)],
                                     capture_output=True, text=True, timeout=300).stdout
                failed = value(out, "FAILED")
                res.setdefault((n, name), []).append((value(out, "WALL") / 0.2, failed))
                time.sleep(1.0)  # let TIME_WAIT sockets and the server settle
    server.kill()
    print("\n## fan-out: wall time / one 200 ms wait (median; failed requests)\n")
    print("| fibers / goroutines | " + " | ".join(clients) + " |")
    print("|---|" + "---|" * len(clients))
    for n in sizes:
        cells = []
        for name in clients:
            runs = res[(n, name)]
            med = statistics.median(w for w, _ in runs)
            cells.append(f"{med:.2f} ({int(max(f for _, f in runs))})")
        print(f"| {n} | " + " | ".join(cells) + " |")


def cost(rounds):
    out = subprocess.run(["taskset", "-c", "1", os.path.join(T, "hook_cost"), str(rounds * 3)],
                         capture_output=True, text=True, check=True).stdout
    print("\n## recv of a ready byte: ns per call (median)\n")
    for line in out.splitlines():
        print("    " + line)


def echo(rounds, quick):
    res = {}
    for r in range(rounds):
        for which in (["std", "spindle"] if r % 2 == 0 else ["spindle", "std"]):
            p = subprocess.Popen(["taskset", "-c", "1", os.path.join(T, "hook_echo_server"), which,
                                  "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
            addr = p.stdout.readline().split()[1]
            c0 = cpu_seconds(p.pid)
            out = subprocess.run(["taskset", "-c", "0", os.path.join(T, "echo_client"), "tput", addr,
                                  "100", "2" if quick else "5"], capture_output=True, text=True).stdout
            c1 = cpu_seconds(p.pid)
            res.setdefault(which, []).append(((c1 - c0) / value(out, "TOTAL") * 1e6,
                                              value(out, "RESULT")))
            p.kill()
            p.wait()
    print("\n## echo, 100 connections: server CPU per message (median)\n")
    s = statistics.median(c for c, _ in res["spindle"])
    for which, label in (("spindle", "spindle::net"), ("std", "std::net, parked by the hook")):
        c = statistics.median(c for c, _ in res[which])
        t = statistics.median(t for _, t in res[which])
        print(f"    {label}: {c:.3f} us/msg, {t:,.0f} msg/s, ratio {c / s:.3f}")


def hello(rounds, secs):
    binaries = {
        "hello, hook installed": ([os.path.join(T, "hook_hello"), "spindle"], {"SPINDLE_HOOK": "1"}),
        "hello, hook linked, off": ([os.path.join(T, "hook_hello"), "spindle"], {"SPINDLE_HOOK": "0"}),
        "examples/hello.rs (no hook)": ([os.path.join(T, "examples", "hello"), "--"], {}),
    }
    res = {}
    port = 18600
    for r in range(rounds):
        names = list(binaries)
        names = names[r % 3:] + names[:r % 3]
        for name in names:
            cmd, env = binaries[name]
            port += 1
            args = cmd + [f"127.0.0.1:{port}"]
            if cmd[-1] == "--":
                args = cmd[:-1] + [f"127.0.0.1:{port}"]
            p = subprocess.Popen(["taskset", "-c", "1"] + args, stdout=subprocess.PIPE,
                                 text=True, env=dict(os.environ, **env))
            p.stdout.readline()
            url = f"http://127.0.0.1:{port}/"
            subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c50", "-d1s", url], capture_output=True)
            c0 = cpu_seconds(p.pid)
            out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c50", f"-d{secs}s", url],
                                 capture_output=True, text=True).stdout
            c1 = cpu_seconds(p.pid)
            reqs = int(re.search(r"(\d+) requests in", out).group(1))
            res.setdefault(name, []).append((c1 - c0) / reqs * 1e6)
            p.kill()
            p.wait()
    print("\n## spindle-http hello, wrk -c50: server CPU per request (median)\n")
    base = statistics.median(res["examples/hello.rs (no hook)"])
    for name in binaries:
        m = statistics.median(res[name])
        print(f"    {name}: {m:.3f} us, ratio {m / base:.3f}  runs={['%.2f' % x for x in res[name]]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="fanout,cost,echo,hello")
    a = ap.parse_args()
    build()
    only = a.only.split(",")
    if "fanout" in only:
        fanout(a.rounds, [1000] if a.quick else [1000, 10000])
    if "cost" in only:
        cost(a.rounds)
    if "echo" in only:
        echo(a.rounds, a.quick)
    if "hello" in only:
        hello(a.rounds, 3 if a.quick else 5)


if __name__ == "__main__":
    main()
