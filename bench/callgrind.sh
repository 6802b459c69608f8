#!/usr/bin/env bash
# Instructions per request of an HTTP server under load, by callgrind.
#
#   bench/callgrind.sh CONNS BINARY [LUA]     e.g. bench/callgrind.sh 50 target/release/hello
#
# Runs BINARY (which takes its listen address as its one argument) under
# `valgrind --tool=callgrind`, loads it with `wrk -t1 -cCONNS -d6s` (with
# the wrk script LUA if given: bench/pipeline.lua for 16 pipelined
# requests per write), stops it, and prints the instructions per request
# and the functions that spent the most of them (self cost, per request).
# KEEP=FILE keeps the profile there, for callgrind_annotate. The server
# runs on CPU 1 and wrk on CPU 0, as in the timed benchmarks (so a
# server sizing its workers by the CPUs it may use runs one).
# Deterministic where CPU timings on a shared VM are not; the cost of an
# instruction (a clock read's `rdtsc`, a cache miss) is not in it.
set -euo pipefail
conns=$1 binary=$2 lua=${3:-}
port=$((19600 + RANDOM % 300))
out=$(mktemp /tmp/callgrind.XXXXXX)
taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$out" "$binary" "127.0.0.1:$port" >/dev/null 2>&1 &
vg=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/" && break
  sleep 0.3
done
script=()
[ -n "$lua" ] && script=(-s "$lua")
requests=$(taskset -c 0 wrk -t1 "-c$conns" -d6s "${script[@]}" "http://127.0.0.1:$port/" \
  | awk '/requests in/ {print $1}')
kill -TERM "$vg"
wait "$vg" || true
total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "requests $requests, instructions $total, per request $((total / requests))"
callgrind_annotate --inclusive=no "$out" 2>/dev/null | sed -n '/file:function/,$p' | sed -n '2,31p' \
  | awk -v r="$requests" '{c = $1; gsub(",", "", c); f = substr($0, index($0, "%)") + 4);
      sub(/ \[.*\]$/, "", f); if (c + 0 > 0) printf "%8.1f  %s\n", c / r, f}'
[ -n "${KEEP:-}" ] && cp "$out" "$KEEP"; rm -f "$out"
