#!/usr/bin/env python3
"""Where the memory of parked guest requests goes: `spindle serve` with
the WASI 0.3 sleep guest, N requests parked in a guest sleep, and for the
server process

  * the growth of each mapping's RSS between idle and all parked
    (/proc/PID/smaps), per request;
  * for the mapping with the most one- and two-page runs (the fiber
    stacks), a histogram of resident pages per stack (runs of present
    pages in /proc/PID/pagemap: each stack is a run that ends at its top,
    a guard page below) and how deep the stacks were written (the lowest
    non-zero byte of each run: fresh stack pages are zero).

    python3 bench/parked_memory.py [--n 1000] [--binary target/release/spindle] [--outbound]

With --outbound the guest is fetch-p3 instead, each request parked on an
outgoing request to a local server (its own process) that answers after
8 s: the growth then includes the outgoing fiber and client connection.

It prints the growth and the absolute RSS, idle and parked: compare builds
on both (a process whose idle baseline is already large, such as an
allocator's huge pages, grows less for the same cost). Environment:
EXTRA="--flag value" adds `spindle serve` flags; ROWS=N lists N mappings;
BYSIZE=1 sums the growth by mapping size (625 instances show as 625 small
mappings of one size); FRAMES=1 names the functions whose return
addresses are on one stack of each size in the stacks' mapping (live and
stale frames: which calls made a stack that deep).

Needs root (pagemap's present bits, /proc/PID/mem). Server on CPU 1.
The fiber stack of a parked connection is one page when everything it
ran, from the head's parse to the park, stayed within 4 KiB.
"""
import argparse
import asyncio
import collections
import os
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def smaps(pid):
    out, cur = {}, None
    for line in open(f"/proc/{pid}/smaps"):
        first = line.split()[0]
        if "-" in first and ":" not in first:
            parts = line.split()
            cur = (parts[0], parts[5] if len(parts) > 5 else "[anon]")
            out[cur] = 0
        elif line.startswith("Rss:"):
            out[cur] = int(line.split()[1])
    return out


def stack_runs(pid, lo, hi, text=None):
    """(pages per run histogram, write depth per run of ≤ 3 pages, and for
    the first run of each length the words that point into `text`, the
    binary's executable mappings: (bytes from the stack's top, file
    offset) — return addresses of the frames on that stack, live or
    stale, so the deepest calls it made can be named)."""
    n = (hi - lo) // 4096
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        pm.seek(lo // 4096 * 8)
        data = pm.read(n * 8)
    present = [(struct.unpack_from("<Q", data, i * 8)[0] >> 63) & 1 for i in range(n)]
    hist, depths, words = collections.Counter(), [], {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        i = 0
        while i < n:
            if not present[i]:
                i += 1
                continue
            j = i
            while j < n and present[j]:
                j += 1
            hist[j - i] += 1
            if j - i <= 3:
                mem.seek(lo + i * 4096)
                b = mem.read((j - i) * 4096)
                first = next((k for k in range(len(b)) if b[k]), len(b))
                depths.append(len(b) - first)
                if text and j - i not in words:
                    found = []
                    for off in range(0, len(b), 8):
                        w = struct.unpack_from("<Q", b, off)[0]
                        for t_lo, t_hi, t_off in text:
                            if t_lo <= w < t_hi:
                                found.append((len(b) - off, w - t_lo + t_off))
                    words[j - i] = found
            i = j
    return hist, sorted(depths), words


def text_mappings(pid, binary):
    """The executable mappings of `binary` in `pid`: (start, end, offset)."""
    out = []
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) > 5 and parts[5] == binary and "x" in parts[1]:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, int(parts[2], 16)))
    return out


def name_frames(binary, words):
    """Prints each word of `stack_runs` as depth and function (addr2line;
    + 0x1000 is this binary's text vaddr − offset, - 1 lands inside the
    call)."""
    addrs = [hex(off + 0x1000 - 1) for _, off in words]
    if not addrs:
        return
    out = subprocess.run(["addr2line", "-f", "-C", "-e", binary] + addrs,
                         capture_output=True, text=True).stdout.splitlines()
    for (depth, _), name in zip(words, out[0::2]):
        print(f"    {depth:6d}  {name[:120]}")


def slow_upstream(delay):
    """A local server, in a process of its own, that answers every request
    after `delay` seconds (`wasm.py`'s); its port."""
    sys.path.insert(0, HERE)
    import wasm

    port = wasm.free_port()
    wasm.slow_upstream(port, delay)
    return port  # listening well before the server under test is up


async def park(port, n, ms, headers=b""):
    async def one():
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /?ms=%d HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n" % (ms, headers))
        await w.drain()
        d = await r.read()
        w.close()
        return d.split(b" ", 2)[1] if d else b"none"
    return [asyncio.create_task(one()) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "spindle"))
    ap.add_argument("--outbound", action="store_true", help="park on outgoing requests (fetch-p3)")
    args = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    guest, extra, headers = "sleep-p3.wasm", [], b""
    if args.outbound:
        upstream = slow_upstream(8.0)
        guest, extra = "fetch-p3.wasm", ["--allow-outbound", f"127.0.0.1:{upstream}"]
        headers = b"x-fetch-url: http://127.0.0.1:%d/\r\n" % upstream
    wasm = os.path.join(ROOT, "guests", "wasm", guest)
    p = subprocess.Popen(["taskset", "-c", "1", args.binary, "serve", wasm, "--listen",
                          f"127.0.0.1:{port}", "--workers", "1", "--max-concurrent",
                          str(max(1100, args.n)), "--timeout", "60"]
                         + extra + os.environ.get("EXTRA", "").split(),
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.3)
        before = smaps(p.pid)

        async def run():
            tasks = await park(port, args.n, 4000, headers)
            await asyncio.sleep(6.0 if args.outbound else 2.5)
            during = smaps(p.pid)
            binary = os.path.abspath(args.binary)
            text = text_mappings(p.pid, binary) if os.environ.get("FRAMES") else None
            best, best_runs = None, -1
            for (rng, name), _ in during.items():
                if name != "[anon]":
                    continue
                lo, hi = (int(x, 16) for x in rng.split("-"))
                if hi - lo > int(os.environ.get("STACK_MAP_MAX", str(1 << 30))):
                    continue  # address-space reservations, not stacks
                hist, depths, words = stack_runs(p.pid, lo, hi, text)
                small = hist[1] + hist[2]
                if os.environ.get("ALLRUNS"):
                    print(f"  runs in {rng} ({(hi - lo) >> 20} MiB): {sorted(hist.items())}")
                if small > best_runs:
                    best, best_runs = (rng, hist, depths, words), small
            answers = await asyncio.gather(*tasks)
            return during, best, answers
        during, best, answers = asyncio.run(run())
    finally:
        p.terminate()
        p.wait()
    n = args.n
    total = sum(during.values()) - sum(before.values())
    ok = sum(1 for a in answers if a == b"200")
    print(f"{n} parked, {ok} answered 200; RSS growth {total / 1024:.1f} MiB, "
          f"{total / n:.2f} KiB per request; RSS idle {sum(before.values()) / 1024:.1f} MiB, "
          f"parked {sum(during.values()) / 1024:.1f} MiB")
    rows = sorted(((v - before.get(k, 0), k) for k, v in during.items()), reverse=True)
    for d, (rng, name) in rows[:int(os.environ.get("ROWS", "6"))]:
        if d >= 64:
            print(f"  {d:8d} KiB  {d / n:6.2f} KiB/request  {rng} {name}")
    if os.environ.get("BYSIZE"):
        groups = collections.Counter()
        for d, (rng, name) in rows:
            lo, hi = (int(x, 16) for x in rng.split("-"))
            groups[((hi - lo) >> 10, name)] += d
        for (size, name), d in groups.most_common(8):
            print(f"  mappings of {size} KiB {name}: {d} KiB growth, {d / n:.2f} KiB/request")
    if best:
        rng, hist, depths, words = best
        print(f"stacks ({rng}): resident pages per stack {sorted(hist.items())[:8]}")
        if depths:
            q = lambda f: depths[min(len(depths) - 1, int(len(depths) * f))]
            print(f"  written depth, bytes: p50 {q(0.5)}  p90 {q(0.9)}  max {depths[-1]}")
        for pages, found in sorted(words.items()):
            print(f"  frames on a {pages}-page stack (bytes from its top, deepest first):")
            name_frames(os.path.abspath(args.binary), sorted(found, reverse=True))


if __name__ == "__main__":
    main()
