#!/usr/bin/env python3
"""The code an HTTP server runs per request, measured as a cache sees it.

    python3 bench/code_footprint.py 'COMMAND' [--conns 50] [--secs 5] [--top 30] [--script LUA]

    e.g. 'target/release/examples/hello' or 'target/release/http_server may'

Runs COMMAND (the address `127.0.0.1:PORT` appended, as `ab_http.py` does) under
`valgrind --tool=callgrind --dump-instr=yes --cache-sim=yes` on CPU 0,
loads it with `wrk -t1` for a few seconds (with `-s LUA` if given: e.g.
`bench/pipeline.lua`, `bench/browser_headers.lua`), and reports per request:

* instructions, and the simulated L1 misses (instruction, data read, data
  write) for the host's cache geometry (callgrind reads it from `cpuid`);
* the *hot lines*: the 64-byte lines of code holding an instruction run
  at least once per two requests, how many bytes that is, and how many of
  the L1i's sets hold more hot lines than the cache has ways. A set that
  is over-full (the count assumes a 32 KiB, 8-way L1i of 64-byte lines,
  as this machine has) misses on every request whatever else happens (a cyclic
  walk over more lines than an LRU set holds), which is how a path that
  fits the cache by size can still miss ~100 lines a request;
* the functions holding the most hot lines;
* the *locked instructions* run in the program's own code (`lock`-prefixed
  read-modify-writes, `xchg` with memory — which is locked without the
  prefix — and `mfence`), each a full barrier that callgrind counts as one
  instruction but a core pays tens of cycles for, and where they are.

Deterministic where CPU time on a shared VM is not; it counts the
simulated cache only (a real core's op cache and prefetchers hide part of
these misses), so it tells where a path's footprint is, not its cost.
"""
import argparse
import collections
import os
import re
import shlex
import subprocess
import tempfile
import time

LINE = 64


def run(command, conns, secs, out, script=None):
    port = 19000 + os.getpid() % 500
    addr = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        ["taskset", "-c", "0", "valgrind", "--tool=callgrind", "--dump-instr=yes",
         "--cache-sim=yes", f"--callgrind-out-file={out}"] + shlex.split(command) + [addr],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://{addr}/"]).returncode == 0:
            break
        time.sleep(0.3)
    extra = ["-s", script] if script else []
    load = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{secs}s"]
                          + extra + [f"http://{addr}/"], capture_output=True, text=True).stdout
    server.terminate()
    server.wait()
    return int(re.search(r"(\d+) requests in", load).group(1))


def parse(path):
    """Self cost per instruction address, the function of each, and the totals."""
    events, totals = [], None
    cost, owner, names = collections.Counter(), {}, {}
    fn, addr, after_calls = None, 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
                continue
            if line.startswith("totals:") or line.startswith("summary:"):
                totals = [int(x) for x in line.split()[1:]]
                continue
            if line.startswith(("fn=", "cfn=")):
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    if line.startswith("fn="):
                        fn = names.get(m.group(1))
                continue
            if line.startswith("calls="):
                after_calls = True  # the next cost line is the call's, not the caller's
                continue
            if not line or line[0] not in "0123456789+-*":
                continue
            fields = line.split()
            pos = fields[0]
            if pos == "*":
                pass
            elif pos[0] in "+-":
                step = int(pos[1:], 0)
                addr = addr + step if pos[0] == "+" else addr - step
            else:
                addr = int(pos, 0)
            if after_calls:
                after_calls = False
                continue
            if len(fields) >= 3:
                cost[addr] += int(fields[2])  # positions: instr line; then Ir
                owner[addr] = fn
    return events, totals, cost, owner


def locked(binary, cost, owner, requests):
    """Locked instructions per request in `binary`'s own code, and by site.

    Callgrind's addresses for the binary are its link-time ones plus a load
    offset, found by lining up the functions it names with `nm`'s."""
    syms = {}
    for line in subprocess.run(["nm", binary], capture_output=True, text=True).stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] and parts[1] in "tT":
            syms.setdefault(parts[2], int(parts[0], 16))
    demangled = {}
    names = list(syms)
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    for raw, nice in zip(names, out.splitlines()):
        demangled.setdefault(nice, syms[raw])
    lowest = {}
    for addr, fn in owner.items():
        if fn and (fn not in lowest or addr < lowest[fn]):
            lowest[fn] = addr
    offsets = collections.Counter(a - demangled[f] for f, a in lowest.items() if f in demangled)
    if not offsets:
        return None, []
    offset = offsets.most_common(1)[0][0]
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                         capture_output=True, text=True).stdout
    total, sites = 0, collections.Counter()
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(lock \S+|xchg\S*\s+\S*\(|mfence)", line)
        if m:
            n = cost.get(int(m.group(1), 16) + offset, 0)
            if n:
                total += n
                sites[(owner.get(int(m.group(1), 16) + offset) or "?")[:90]] += n
    return total / requests, [(n / requests, f) for f, n in sites.most_common() if n * 20 >= requests]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--script", help="a wrk Lua script (-s) shaping the requests")
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile(prefix="footprint.", dir="/tmp") as out:
        requests = run(args.command, args.conns, args.secs, out.name, args.script)
        events, totals, cost, owner = parse(out.name)
    per = dict(zip(events, (t / requests for t in totals)))
    print(f"{args.command}: {requests} requests under wrk -c{args.conns}; per request:")
    print("  instructions %.0f, L1i misses %.1f, L1d read misses %.1f, write misses %.1f" % (
        per.get("Ir", 0), per.get("I1mr", 0), per.get("D1mr", 0), per.get("D1mw", 0)))
    hot = [a for a, c in cost.items() if c * 2 >= requests]
    lines = {a // LINE for a in hot}
    sets = collections.Counter(line % 64 for line in lines)  # 32 KiB, 8 ways: 64 sets
    print(f"  hot lines {len(lines)} ({len(lines) * LINE} bytes); L1i sets over 8 ways: "
          f"{sum(1 for n in sets.values() if n > 8)} of 64, fullest {max(sets.values())}")
    by_fn = collections.defaultdict(set)
    for a in hot:
        by_fn[owner.get(a) or "?"].add(a // LINE)
    for name, ls in sorted(by_fn.items(), key=lambda kv: -len(kv[1]))[:args.top]:
        print(f"  {len(ls):4d}  {name[:110]}")
    per_request, sites = locked(shlex.split(args.command)[0], cost, owner, requests)
    if per_request is not None:
        print(f"  locked instructions {per_request:.2f} (in the program's own code), by function:")
        for n, fn in sites:
            print(f"  {n:6.2f}  {fn}")


if __name__ == "__main__":
    main()
