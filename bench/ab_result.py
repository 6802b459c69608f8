#!/usr/bin/env python3
"""Two or more builds of one benchmark binary, A/B: the same arguments,
interleaved rounds (the order rotated each round), medians, best, and the
paired ratio (the median of each round's ratio to the first binary).

    python3 bench/ab_result.py ROUNDS "ARGS" BIN_A BIN_B [BIN…]
    e.g. python3 bench/ab_result.py 20 "spindle pingpong2 100000" /tmp/old target/release/sync_bench

Each binary must print `RESULT <number>` (as `bench/src/bin/*` do).
Prefix the arguments with `taskset -c N` yourself by passing a wrapper
binary if the benchmark needs pinning.
"""
import re
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    rounds, args, bins = int(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
    res = {b: [] for b in bins}
    for r in range(rounds):
        for b in bins[r % len(bins):] + bins[:r % len(bins)]:
            out = subprocess.run([b] + args, capture_output=True, text=True, timeout=600).stdout
            m = re.search(r"RESULT ([0-9.]+)", out)
            if not m:
                sys.exit(f"no RESULT from {b}: {out}")
            res[b].append(float(m.group(1)))
    base = res[bins[0]]
    for b in bins:
        paired = statistics.median(x / y for x, y in zip(res[b], base))
        print(f"{statistics.median(res[b]):10.1f}  best {min(res[b]):10.1f}  "
              f"paired {paired:.3f}x  {b}")


if __name__ == "__main__":
    main()
