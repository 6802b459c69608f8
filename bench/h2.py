#!/usr/bin/env python3
"""HTTP/2 benchmark: h2load against spindle-http and its peers, server CPU
per request; and the HTTP/2 client against hyper's.

Servers, each on CPU 1 (one worker: the runtimes see one CPU), h2load on
CPU 0 (one thread), interleaved rounds, medians:

  h2c     spindle-http's shipped `examples/hello.rs` (`spindle::run`,
          `Server::bind`, defaults) against tokio + hyper-util's auto
          builder (HTTP/1.1 and h2c on one port, the accept loop in a
          spawned task, multi-thread runtime with one worker).
  TLS     h2 chosen by ALPN: spindle-http (`http_server spindle-tls`: the
          hello handler behind `Server::tls`, with the benchmark server's
          one worker) against tokio-rustls + hyper's auto builder and Go's
          net/http (`ServeTLS`, GOMAXPROCS=1). Same ECDSA P-256 certificate.

Loads: `h2load -c 50 -m 16` and `-c 1 -m 100`, for --secs each.

Client: 100 GETs at once over one h2c connection, --client-rounds times,
from spindle-http's client (100 fibers) and hyper-util's legacy client
(100 tasks, HTTP/2 only), client on CPU 0, the upstream (tokio + hyper
auto builder) on CPU 1; client CPU per request.

    python3 bench/h2.py [--rounds 5] [--secs 5] [--client-rounds 300]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
T = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")


def build(tls_dir):
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "http_server",
                    "--bin", "h2_client"], cwd=HERE, env=env, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "spindle-http",
                    "--example", "hello"], cwd=ROOT, check=True)
    subprocess.run(["go", "build", "-o", os.path.join(T, "h2_go"), "h2.go"],
                   cwd=os.path.join(HERE, "go", "h2"), check=True,
                   env=dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off"))
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


def start(cmd, env):
    """Starts a server on CPU 1; its address once it listens."""
    port = free_port()
    p = subprocess.Popen(["taskset", "-c", "1"] + cmd + [f"127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, **env))
    p.stdout.readline()  # "LISTENING addr" or "listening on http://addr"
    return p, f"127.0.0.1:{port}"


def h2load(url, conns, streams, secs):
    out = subprocess.run(["taskset", "-c", "0", "h2load", "-t", "1", "-c", str(conns), "-m",
                          str(streams), "-D", str(secs), "--warm-up-time=1", url],
                         capture_output=True, text=True).stdout
    done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out).group(1))
    ok = int(re.search(r"status codes: (\d+) 2xx", out).group(1))
    rps = float(re.search(r"finished in [0-9.]+\w+, ([0-9.]+) req/s", out).group(1))
    return done, ok, rps


def one_server(cmd, env, scheme, conns, streams, secs):
    p, addr = start(cmd, env)
    url = f"{scheme}://{addr}/"
    try:
        h2load(url, 1, 1, 1)  # connections and caches warm
        c0 = cpu_seconds(p.pid)
        t0 = time.time()
        done, ok, rps = h2load(url, conns, streams, secs)
        c1 = cpu_seconds(p.pid)
        took = time.time() - t0
    finally:
        p.kill()
        p.wait()
    # h2load's -D counts only the measured window; the server's CPU also
    # covers the warm-up second, so scale it to the window by time.
    cpu = (c1 - c0) * (secs / took) if took > secs else (c1 - c0)
    return rps, cpu / max(done, 1) * 1e6, ok == done


def one_client(which, upstream_url, rounds):
    p = subprocess.Popen(["taskset", "-c", "0", os.path.join(T, "h2_client"), which,
                          upstream_url, str(rounds)], stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    p.wait()
    # CPU of the whole client process, from its rusage.
    m = re.search(r"DONE (\d+) ([0-9.]+)", out)
    return int(m.group(1)), float(m.group(2))


def client_cpu(which, upstream_url, rounds):
    """Client CPU µs per request: the child's rusage around its run."""
    before = os.times()
    n, secs = one_client(which, upstream_url, rounds)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return n / secs, cpu / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--client-rounds", type=int, default=300)
    args = ap.parse_args()
    tls_dir = tempfile.mkdtemp(prefix="spindle-bench-h2-")
    build(tls_dir)
    env = {"BENCH_TLS_DIR": tls_dir, "GOMAXPROCS": "1", "BENCH_TLS_CERT": os.path.join(tls_dir, "cert.pem"),
           "BENCH_TLS_KEY": os.path.join(tls_dir, "key.pem")}
    h2c = {
        "spindle-http (examples/hello)": [os.path.join(T, "examples", "hello")],
        "tokio + hyper auto": [os.path.join(T, "http_server"), "hyper-auto"],
    }
    tls = {
        "spindle-http (TLS)": [os.path.join(T, "http_server"), "spindle-tls"],
        "tokio-rustls + hyper auto": [os.path.join(T, "http_server"), "hyper-auto-tls"],
        "go net/http (TLS)": [os.path.join(T, "h2_go")],
    }
    loads = [(50, 16), (1, 100)]
    plans = []
    for conns, streams in loads:
        plans.append((f"h2c, h2load -c {conns} -m {streams}", h2c, "http", conns, streams))
        plans.append((f"h2 over TLS, h2load -c {conns} -m {streams}", tls, "https", conns, streams))
    results = {key: {n: [] for n in servers} for key, servers, *_ in plans}
    clients = {"spindle-http client": "spindle", "hyper-util client": "hyper"}
    client_results = {n: [] for n in clients}
    for r in range(args.rounds):
        for key, servers, scheme, conns, streams in plans:
            names = list(servers)
            for n in names[r % len(names):] + names[:r % len(names)]:
                results[key][n].append(one_server(servers[n], env, scheme, conns, streams, args.secs))
        up, addr = start([os.path.join(T, "http_server"), "hyper-auto"], env)
        try:
            names = list(clients)
            for n in names[r % len(names):] + names[:r % len(names)]:
                client_results[n].append(client_cpu(clients[n], f"http://{addr}/", args.client_rounds))
        finally:
            up.kill()
            up.wait()
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{args.rounds} interleaved rounds of {args.secs} s; server on CPU 1, h2load on CPU 0; medians.\n")
    for key, servers, *_ in plans:
        print(f"**{key}**\n")
        print("| server | requests/s | server CPU µs/request | ratio to spindle | all 2xx |")
        print("|---|---|---|---|---|")
        first = list(servers)[0]
        base = statistics.median(x[1] for x in results[key][first])
        for n in servers:
            rows = results[key][n]
            cpu = statistics.median(x[1] for x in rows)
            print(f"| {n} | {statistics.median(x[0] for x in rows):.0f} | {cpu:.2f} | "
                  f"{cpu / base:.2f} | {all(x[2] for x in rows)} |")
        print()
    print(f"**client: 100 GETs at once over one h2c connection, {args.client_rounds} rounds; "
          "client on CPU 0, upstream (tokio + hyper auto) on CPU 1**\n")
    print("| client | requests/s | client CPU µs/request | ratio to spindle |")
    print("|---|---|---|---|")
    base = statistics.median(x[1] for x in client_results["spindle-http client"])
    for n in clients:
        rows = client_results[n]
        cpu = statistics.median(x[1] for x in rows)
        print(f"| {n} | {statistics.median(x[0] for x in rows):.0f} | {cpu:.2f} | {cpu / base:.2f} |")


if __name__ == "__main__":
    main()
