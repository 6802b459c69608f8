#!/usr/bin/env python3
"""WebAssembly host benchmark: `spindle serve` against
`wasmtime serve` 48.0.8 on the same components from guests/wasm, each
server pinned to CPU 1 (spindle with one worker), the load on CPU 0,
interleaved rounds, medians. Both instantiate a fresh instance per request
with the pooling allocator.

Rows:
  hello     wrk -c50 on hello.wasm: requests/s, p99, server CPU per request;
            also with the admin listener on (metrics), and with it and an
            access line per request written to a log file (SPINDLE_LOG=info)
  sleep     RSS of the server while 1000 requests each sleep 2 s in the
            guest (WASI monotonic-clock pollable)
  outbound  RSS while 1000 requests each wait on an outgoing request to a
            slow local server (it answers after 2 s)
  burn      a computing guest's neighbours: latency of a tiny request every 20 ms,
            alone and while 4 clients keep long burn requests running

    python3 bench/wasm.py [--rounds 3] [--secs 5] [--only hello]

With --suite p3, WASI 0.3 against WASI 0.2 (instances reused, several
requests at once in one instance, both servers at their defaults):
  hello     wrk -c50: hello-p3.wasm on spindle and on wasmtime serve,
            hello.wasm (WASI 0.2) on spindle, fresh per request and reused
            (--max-instance-reuse 128), and plain spindle-http
            (bench/src/bin/http_server.rs) as the floor
  parked    RSS and CPU while 1000 and 10000 requests each sleep 2 s in the
            guest, and while 1000 and 9500 each wait on an outgoing request
            to a local server that answers after 2 s (9500: what fits in
            the 20 000 descriptors a process may hold here): spindle p3,
            wasmtime p3, spindle p2

    python3 bench/wasm.py --suite p3 [--rounds 3] [--secs 5] [--only hello|parked] [--before OLD/spindle]

With --suite kv, wasi:keyvalue: kv.wasm's /getinc (open the store, one
get, one increment) under wrk -c50, each server at its defaults but for
the store: spindle serve on the embedded file (redb), on Redis
(redis-server 7, no persistence, pinned to CPU 1 beside the server: its
CPU is reported apart) and in memory; wasmtime serve -Skeyvalue (in
memory, its only store: each open copies its initial data, so its counter
never grows). Spin's SQLite store is not measured: Spin is not on any
registry this machine reaches.

    python3 bench/wasm.py --suite kv [--rounds 3] [--secs 5]

wasmtime-cli is built once into target/wasmtime-cli (cargo install).
"""
import argparse
import asyncio
import multiprocessing
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SPINDLE = os.path.join(ROOT, "target", "release", "spindle")
WASMTIME = os.path.join(ROOT, "target", "wasmtime-cli", "bin", "wasmtime")
GUESTS = os.path.join(ROOT, "guests", "wasm")
TICK = os.sysconf("SC_CLK_TCK")


PLAIN = os.path.join(ROOT, "target", "release", "http_server")
# `--before BIN`: a `spindle` built from an earlier commit, for a
# no-regression row beside today's.
OLD_SPINDLE = None


def build():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "spindle-cli"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "--bin", "http_server"], cwd=HERE, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target")))
    if not os.path.exists(WASMTIME):
        subprocess.run(["cargo", "install", "-q", "wasmtime-cli", "--version", "48.0.8", "--locked",
                        "--root", os.path.dirname(os.path.dirname(WASMTIME))], check=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(server, wasm, port, extra_allow=None, max_concurrent=1100):
    """Starts a server on CPU 1 and waits until it answers TCP. A `-p3`
    server runs the WASI 0.3 build of `wasm`."""
    if server.endswith("-p3"):
        wasm = wasm.replace(".wasm", "-p3.wasm")
    app = os.path.join(GUESTS, wasm)
    env, stderr = None, subprocess.DEVNULL
    if server == "plain":
        cmd = [PLAIN, "spindle", f"127.0.0.1:{port}"]
    elif server.startswith("spindle"):
        binary = OLD_SPINDLE if server == "spindle-before" else SPINDLE
        cmd = [binary, "serve", app, "--listen", f"127.0.0.1:{port}", "--workers", "1",
               "--max-concurrent", str(max_concurrent), "--timeout", "60",
               "--fuel-limit", "100000000000000"]
        if extra_allow:
            cmd += ["--allow-outbound", extra_allow]
        if server == "spindle-reuse":
            cmd += ["--max-instance-reuse", "128"]
        if server in ("spindle-admin", "spindle-ops"):
            cmd += ["--admin", f"127.0.0.1:{free_port()}"]
        if server == "spindle-ops":
            env = dict(os.environ, SPINDLE_LOG="info")
            stderr = open(os.path.join("/tmp", f"spindle-access-{port}.log"), "w")
    else:
        # The same pool sizing spindle-wasm derives from --max-concurrent
        # 1100 (wasmtime's defaults hold only 1000 core instances: 333 of
        # these three-module components).
        pool = ["pooling-allocator=y", "pooling-total-component-instances=1100",
                "pooling-total-core-instances=8800", "pooling-total-memories=2200",
                "pooling-total-tables=8800", "pooling-total-stacks=1100",
                f"pooling-max-memory-size={128 << 20}"]
        cmd = [WASMTIME, "serve", "-Scli"] + [f"-O{o}" for o in pool] + ["--addr", f"127.0.0.1:{port}", app]
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=stderr, env=env)
    return listening(p, port, server)


def listening(p, port, server):
    """`p` once it answers TCP on `port` (killed if it never does)."""
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{server} did not start")


def stop(p):
    p.kill()
    p.wait()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid):
    """(all threads', tokio threads') CPU seconds so far."""
    total = tokio = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        t = (int(fields[11]) + int(fields[12])) / TICK
        total += t
        if name.startswith("tokio"):
            tokio += t
    return total, tokio


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def to_ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s)", text)
    if not m:
        return float("nan")  # wrk prints -nan when it has no latency sample
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def hello(server, secs, wasm="hello.wasm", path="/", p=None):
    port = free_port()
    p = p or start(server, wasm, port)
    port = getattr(p, "port", port)
    time.sleep(0.2)
    url = f"http://127.0.0.1:{port}{path}"
    subprocess.run(["wrk", "-t1", "-c50", "-d1s", url], capture_output=True)
    c0 = cpu_seconds(p.pid)
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c50", f"-d{secs}s", "--latency", url],
                         capture_output=True, text=True).stdout
    c1 = cpu_seconds(p.pid)
    stop(p)
    if "Requests/sec" not in out:
        print(f"{server}: wrk printed no result:\n{out}", file=sys.stderr)
        return {"rps": 0.0, "p99": float("nan"), "cpu_us": float("nan"), "errors": 0}
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    m99 = re.search(r"99%\s+(\S+)", out)
    p99 = to_ms(m99.group(1)) if m99 else float("nan")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p99": p99, "cpu_us": (c1 - c0) / max(total, 1) * 1e6,
            "errors": int(bad.group(1)) if bad else 0}


async def _concurrent(port, path, headers, n, pid):
    """n concurrent requests: (peak RSS while they were in flight, sampled
    every 20 ms, how many were answered 200, and the median and longest
    time from a request's send to its answer). The latencies tell whether
    the server held all n at once (about the upstream's 2 s each) or
    served them in waves."""
    async def one():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n".encode())
            await w.drain()
            sent = time.perf_counter()
            data = await asyncio.wait_for(r.read(), 60)
            took = time.perf_counter() - sent
            w.close()
        except (OSError, asyncio.TimeoutError):
            return b"error", 0.0
        return (data.split(b" ", 2)[1] if data else b"none"), took

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    peak = 0.0
    while not all(t.done() for t in tasks):
        peak = max(peak, rss_mib(pid))
        await asyncio.sleep(0.02)
    done = await asyncio.gather(*tasks)
    took = sorted(t for s, t in done if s == b"200") or [float("nan")]
    return peak, len(took) if took[0] == took[0] else 0, statistics.median(took), took[-1]


def slow_upstream(port, delay):
    """A local server answering every request after `delay` seconds."""
    async def handle(r, w):
        await r.readuntil(b"\r\n\r\n")
        await asyncio.sleep(delay)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nslow")
        await w.drain()
        w.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    # A process of its own: with 10 000 requests its sockets and the
    # client's would not fit under one descriptor limit.
    multiprocessing.Process(target=lambda: asyncio.run(main()), daemon=True).start()


def parked(server, kind, upstream_port, n=1000):
    port = free_port()
    # Every request admitted at once (WASI 0.2 needs a slot per request;
    # 11 000 slots would not fit in the address space).
    cap = max(1100, n)
    if kind == "sleep":
        p = start(server, "sleep.wasm", port, max_concurrent=cap)
        path, headers = "/?ms=2000", ""
    else:
        p = start(server, "fetch.wasm", port, extra_allow=f"127.0.0.1:{upstream_port}",
                  max_concurrent=cap)
        path, headers = "/", f"x-fetch-url: http://127.0.0.1:{upstream_port}/\r\n"
    idle = rss_mib(p.pid)
    c0, t0 = thread_cpu(p.pid)
    rss, ok, p50, slowest = asyncio.run(_concurrent(port, path, headers, n, p.pid))
    c1, t1 = thread_cpu(p.pid)
    stop(p)
    return {"idle_mib": idle, "rss_mib": rss, "ok": ok, "p50_s": p50, "max_s": slowest,
            "cpu_ms": (c1 - c0) * 1000,
            "tokio_ms": (t1 - t0) * 1000}


def probe(port, secs):
    """Latency (ms) of a tiny request every 20 ms for `secs`."""
    lat = []
    end = time.time() + secs
    while time.time() < end:
        t = time.perf_counter()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /?n=10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while s.recv(65536):
            pass
        s.close()
        lat.append((time.perf_counter() - t) * 1000)
        time.sleep(0.02)
    return lat


def burn(server, secs):
    port = free_port()
    p = start(server, "burn.wasm", port)
    alone = probe(port, secs / 2)
    stop_flag = threading.Event()

    def burner():
        while not stop_flag.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET /?n=200000000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                while s.recv(65536):
                    pass
                s.close()
            except OSError:
                return  # the server was stopped

    threads = [threading.Thread(target=burner, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    loaded = probe(port, secs)
    stop_flag.set()
    stop(p)
    q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(len(xs) * f))]
    return {"alone_p50": q(alone, 0.5), "alone_p99": q(alone, 0.99),
            "loaded_p50": q(loaded, 0.5), "loaded_p99": q(loaded, 0.99)}


def p3_suite(args, upstream_port):
    hello_servers = ["spindle-p3", "wasmtime-p3", "spindle", "spindle-reuse", "plain"]
    if OLD_SPINDLE:
        hello_servers.insert(3, "spindle-before")
    parked_servers = ["spindle-p3", "wasmtime-p3", "spindle"]
    # The server may hold 20 000 descriptors here (the hard limit): 9 500
    # requests with an outgoing connection each is the most that fits.
    loads = [("sleep", 1000), ("outbound", 1000), ("sleep", 10000), ("outbound", 9500)]
    res = {}
    for r in range(args.rounds):
        for s in (hello_servers if r % 2 == 0 else hello_servers[::-1]):
            if args.only in ("", "hello"):
                res.setdefault((s, "hello"), []).append(hello(s, args.secs))
        for kind, n in loads if args.only in ("", "parked") else []:
            for s in (parked_servers if r % 2 == 0 else parked_servers[::-1]):
                res.setdefault((s, kind, n), []).append(parked(s, kind, upstream_port, n))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(key, f):
        return statistics.median(x[f] for x in res[key])

    print(f"\n{args.rounds} interleaved rounds; server on CPU 1, load on CPU 0; medians.\n")
    if args.only in ("", "hello"):
        p3_hello_table(args, res, hello_servers, med)
    if args.only in ("", "parked"):
        p3_parked_table(res, loads, parked_servers, med)


def p3_hello_table(args, res, hello_servers, med):
    names = {"spindle-p3": "spindle serve, hello-p3 (WASI 0.3)",
             "wasmtime-p3": "wasmtime serve 48.0.8, hello-p3 (WASI 0.3)",
             "spindle": "spindle serve, hello (WASI 0.2)",
             "spindle-before": "spindle serve before WASI 0.3 support, hello (WASI 0.2)",
             "spindle-reuse": "spindle serve, hello (WASI 0.2), --max-instance-reuse 128",
             "plain": "plain spindle-http (no guest)"}
    print("**hello, wrk -c50**\n")
    print("| server | requests/s | p99 ms | CPU µs/request | non-2xx |")
    print("|---|---|---|---|---|")
    for s in hello_servers:
        k = (s, "hello")
        print(f"| {names[s]} | {med(k, 'rps'):.0f} | {med(k, 'p99'):.2f} | {med(k, 'cpu_us'):.1f} | "
              f"{med(k, 'errors'):.0f} |")
    base = med(("spindle-p3", "hello"), "cpu_us")
    print(f"\nCPU per request: wasmtime p3 / spindle p3 {med(('wasmtime-p3', 'hello'), 'cpu_us') / base:.2f}×, "
          f"spindle p2 / spindle p3 {med(('spindle', 'hello'), 'cpu_us') / base:.2f}×, "
          f"spindle p3 / plain spindle-http {base / med(('plain', 'hello'), 'cpu_us'):.2f}×, "
          f"spindle p2 reused / plain spindle-http "
          f"{med(('spindle-reuse', 'hello'), 'cpu_us') / med(('plain', 'hello'), 'cpu_us'):.2f}×")
    if OLD_SPINDLE:
        print(f"WASI 0.2 CPU per request, today / before: "
              f"{med(('spindle', 'hello'), 'cpu_us') / med(('spindle-before', 'hello'), 'cpu_us'):.3f}×")


def p3_parked_table(res, loads, parked_servers, med):
    pnames = {"spindle-p3": "spindle p3", "wasmtime-p3": "wasmtime serve p3", "spindle": "spindle p2"}
    print("\n**Parked requests** (peak RSS in MiB while they are in flight, idle = before; KiB per "
          "request = (peak − idle) / n; answer = seconds from a request's send to its answer, median "
          "and longest: about 2 s when all n are held at once; CPU ms for the whole burst, tokio = "
          "threads named tokio-*)\n")
    print("| load | server | idle | RSS | KiB/request | answered | answer p50 s | answer max s | CPU ms | tokio ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, n in loads:
        what = f"{n} × {'sleep 2 s' if kind == 'sleep' else 'outgoing to a 2 s server'}"
        for s in parked_servers:
            k = (s, kind, n)
            per = (med(k, 'rss_mib') - med(k, 'idle_mib')) * 1024 / n
            print(f"| {what} | {pnames[s]} | {med(k, 'idle_mib'):.1f} | {med(k, 'rss_mib'):.1f} | "
                  f"{per:.1f} | {med(k, 'ok'):.0f} | {med(k, 'p50_s'):.2f} | {med(k, 'max_s'):.2f} | "
                  f"{med(k, 'cpu_ms'):.0f} | {med(k, 'tokio_ms'):.0f} |")


def start_kv(server, redis_port):
    """A kv.wasm server for the kv suite, on CPU 1; `.port` is its port."""
    port = free_port()
    app = os.path.join(GUESTS, "kv.wasm")
    store = {"spindle-file": f"file:/tmp/spindle-bench-kv-{port}.redb",
             "spindle-redis": f"redis://127.0.0.1:{redis_port}/0",
             "spindle-memory": "memory:"}
    if server in store:
        cmd = [SPINDLE, "serve", app, "--listen", f"127.0.0.1:{port}", "--workers", "1",
               "--keyvalue", f"default={store[server]}"]
    else:
        cmd = [WASMTIME, "serve", "-Scli", "-Skeyvalue", "--addr", f"127.0.0.1:{port}", app]
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    p.port = port
    return listening(p, port, server)


def kv_suite(args):
    redis_port = free_port()
    redis = subprocess.Popen(["taskset", "-c", "1", "redis-server", "--port", str(redis_port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    servers = ["spindle-file", "spindle-redis", "spindle-memory", "wasmtime"]
    res = {s: [] for s in servers}
    for r in range(args.rounds):
        for s in (servers if r % 2 == 0 else servers[::-1]):
            p = start_kv(s, redis_port)
            r0 = cpu_seconds(redis.pid)
            row = hello(s, args.secs, path="/getinc", p=p)
            row["redis_us"] = (cpu_seconds(redis.pid) - r0) / max(row["rps"] * args.secs, 1) * 1e6
            res[s].append(row)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    redis.kill()
    med = lambda s, f: statistics.median(x[f] for x in res[s])
    names = {"spindle-file": "spindle serve, embedded file (redb)",
             "spindle-redis": "spindle serve, Redis", "spindle-memory": "spindle serve, memory",
             "wasmtime": "wasmtime serve 48.0.8 -Skeyvalue (memory)"}
    print(f"\n{args.rounds} interleaved rounds, {args.secs} s each; server (and Redis) on CPU 1, "
          "wrk -t1 -c50 on CPU 0; medians.\n")
    print("| server | requests/s | p99 ms | server CPU µs/request | Redis CPU µs/request | non-2xx |")
    print("|---|---|---|---|---|---|")
    for s in servers:
        redis_col = f"{med(s, 'redis_us'):.1f}" if s == "spindle-redis" else "–"
        print(f"| {names[s]} | {med(s, 'rps'):.0f} | {med(s, 'p99'):.2f} | {med(s, 'cpu_us'):.1f} | "
              f"{redis_col} | {med(s, 'errors'):.0f} |")
    base = med("wasmtime", "cpu_us")
    for s in servers[:3]:
        print(f"\n{names[s]} / wasmtime serve, CPU per request: {med(s, 'cpu_us') / base:.2f}×")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--only", default="", help="hello: the hello rows alone (with --suite p3: hello or parked)")
    ap.add_argument("--suite", default="p2", choices=["p2", "p3", "kv"])
    ap.add_argument("--before", default=None, help="an earlier spindle binary (p3 suite: a WASI 0.2 row)")
    args = ap.parse_args()
    global OLD_SPINDLE
    OLD_SPINDLE = args.before
    # 10 000 parked requests with an outgoing request each hold 20 000
    # sockets in the server: raise the limit (root may pass the hard one).
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    build()
    if args.suite == "kv":
        kv_suite(args)
        return
    if args.suite == "p3":
        upstream_port = free_port()
        slow_upstream(upstream_port, 2.0)
        p3_suite(args, upstream_port)
        return
    upstream_port = free_port()
    slow_upstream(upstream_port, 2.0)
    servers = ["spindle", "wasmtime"]
    hello_servers = ["spindle", "spindle-admin", "spindle-ops", "wasmtime"]
    res = {(s, k): [] for s in hello_servers for k in ("hello", "sleep", "outbound", "burn")}
    for r in range(args.rounds):
        order = servers if r % 2 == 0 else servers[::-1]
        for s in (hello_servers if r % 2 == 0 else hello_servers[::-1]):
            res[(s, "hello")].append(hello(s, args.secs))
        if args.only == "hello":
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
            continue
        for s in order:
            res[(s, "sleep")].append(parked(s, "sleep", upstream_port))
        for s in order:
            res[(s, "outbound")].append(parked(s, "outbound", upstream_port))
        for s in order:
            res[(s, "burn")].append(burn(s, args.secs))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(s, k, f):
        return statistics.median(x[f] for x in res[(s, k)])

    names = {"spindle": "spindle serve (1 worker)", "wasmtime": "wasmtime serve 48.0.8",
             "spindle-admin": "spindle serve + --admin (metrics on, no access log)",
             "spindle-ops": "spindle serve + ops (--admin, access log to a file)"}
    print(f"\n{args.rounds} interleaved rounds; server on CPU 1, load on CPU 0; medians.\n")
    print("**hello.wasm, wrk -c50**\n")
    print("| server | requests/s | p99 ms | CPU µs/request | non-2xx |")
    print("|---|---|---|---|---|")
    for s in hello_servers:
        print(f"| {names[s]} | {med(s, 'hello', 'rps'):.0f} | {med(s, 'hello', 'p99'):.2f} | "
              f"{med(s, 'hello', 'cpu_us'):.1f} | {med(s, 'hello', 'errors'):.0f} |")
    base = med("spindle", "hello", "cpu_us")
    for s in ("spindle-admin", "spindle-ops"):
        print(f"\n{names[s]} / spindle serve, CPU per request: {med(s, 'hello', 'cpu_us') / base:.3f}×")
    if args.only == "hello":
        return
    print("\n**RSS with 1000 requests in flight** (MiB; idle = before the load)\n")
    print("| server | idle | 1000 × sleep 2 s | answered | 1000 × outgoing to a 2 s server | answered |")
    print("|---|---|---|---|---|---|")
    for s in servers:
        print(f"| {names[s]} | {med(s, 'sleep', 'idle_mib'):.1f} | {med(s, 'sleep', 'rss_mib'):.1f} | "
              f"{med(s, 'sleep', 'ok'):.0f} | {med(s, 'outbound', 'rss_mib'):.1f} | "
              f"{med(s, 'outbound', 'ok'):.0f} |")
    print("\n**CPU for the 1000 parked requests** (ms, whole run; tokio = threads named tokio-*)\n")
    print("| server | sleep: all threads | sleep: tokio | outgoing: all threads | outgoing: tokio |")
    print("|---|---|---|---|---|")
    for s in servers:
        print(f"| {names[s]} | {med(s, 'sleep', 'cpu_ms'):.0f} | {med(s, 'sleep', 'tokio_ms'):.0f} | "
              f"{med(s, 'outbound', 'cpu_ms'):.0f} | {med(s, 'outbound', 'tokio_ms'):.0f} |")
    print("\n**Tiny request every 20 ms, alone and beside 4 looping burn requests** (ms)\n")
    print("| server | alone p50 | alone p99 | with burns p50 | with burns p99 |")
    print("|---|---|---|---|---|")
    for s in servers:
        print(f"| {names[s]} | {med(s, 'burn', 'alone_p50'):.2f} | {med(s, 'burn', 'alone_p99'):.2f} | "
              f"{med(s, 'burn', 'loaded_p50'):.2f} | {med(s, 'burn', 'loaded_p99'):.2f} |")


if __name__ == "__main__":
    main()
