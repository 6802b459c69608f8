#!/bin/bash
# How a WASI 0.3 server meets its load, per request: its CPU time, how often
# it polls epoll, and how often the load generator is woken.
#
#   bench/serve_wakes.sh spindle [BINARY]   # default target/release/spindle
#   bench/serve_wakes.sh wasmtime           # target/wasmtime-cli (bench/wasm.py builds it)
#
# The server runs on CPU 1 with one worker, `wrk -t1 -c50` on CPU 0 against
# guests/wasm/hello-p3.wasm (override with APP=...). After a 2 s warm-up,
# 5 s of load: the server's CPU from /proc/PID/stat, wrk's voluntary
# context switches from /proc (a switch is a sleep the next response ends),
# and the server's epoll_wait/sendto/recvfrom from tracepoints (perf stat,
# needs perf and tracefs). One run; interleave runs of both servers and
# compare medians, as the VM's speed drifts.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:?spindle or wasmtime}
APP=${APP:-guests/wasm/hello-p3.wasm}
PORT=$((20000 + RANDOM % 5000))
if [ "$which" = wasmtime ]; then
  taskset -c 1 target/wasmtime-cli/bin/wasmtime serve -Scli -Opooling-allocator=y \
    -Opooling-total-component-instances=1100 -Opooling-total-core-instances=8800 \
    -Opooling-total-memories=2200 -Opooling-total-tables=8800 -Opooling-total-stacks=1100 \
    -Opooling-max-memory-size=134217728 --addr 127.0.0.1:$PORT "$APP" >/dev/null 2>&1 &
else
  taskset -c 1 "${2:-target/release/spindle}" serve "$APP" --listen 127.0.0.1:$PORT \
    --workers 1 >/dev/null 2>&1 &
fi
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
sleep 2
taskset -c 0 wrk -t1 -c50 -d2s http://127.0.0.1:$PORT/ >/dev/null
OUT=$(mktemp -d)
cpu() { awk '{print $14 + $15}' /proc/$PID/stat; }
c0=$(cpu)
taskset -c 0 wrk -t1 -c50 -d5s http://127.0.0.1:$PORT/ >"$OUT/wrk" &
WRK=$!
sleep 0.3
perf stat -x, -o "$OUT/perf" -p $PID \
  -e syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom \
  -- sleep 4 &
PERF=$!
switches() { cat /proc/$(pgrep -n -x wrk)/task/*/status | awk '/^voluntary_ctxt/ {s += $2} END {print s}'; }
v0=$(switches)
sleep 4
v1=$(switches)
wait $PERF || true
wait $WRK
c1=$(cpu)
requests=$(awk '/requests in/ {print $1}' "$OUT/wrk")
rate=$(awk '/Requests\/sec/ {print $2}' "$OUT/wrk")
python3 - "$which" "$requests" "$rate" "$c0" "$c1" "$v0" "$v1" "$(getconf CLK_TCK)" "$OUT/perf" <<'EOF'
import sys
which, n, rate, c0, c1, v0, v1, tick, perf = sys.argv[1:]
n, rate = int(n), float(rate)
counts = {}
for line in open(perf):
    f = line.split(",")
    if len(f) > 2 and f[2].startswith("syscalls:"):
        counts[f[2].split("sys_enter_")[1]] = float(f[0]) if f[0][0].isdigit() else 0
# perf and the wake count cover 4 s of the run: per request at the run's rate.
in_window = rate * 4
print(f"{which}: {rate:.0f} requests/s, "
      f"CPU {(float(c1) - float(c0)) / int(tick) / n * 1e6:.1f} µs/request, "
      f"wrk woken {(int(v1) - int(v0)) / in_window:.3f} times/response, "
      f"{counts.get('sendto', 0) / max(counts.get('epoll_wait', 1), 1):.1f} responses per epoll_wait "
      f"({counts.get('epoll_wait', 0) / in_window:.3f} epoll_wait, "
      f"{counts.get('sendto', 0) / in_window:.2f} sendto, "
      f"{counts.get('recvfrom', 0) / in_window:.2f} recvfrom per request)")
EOF
rm -rf "$OUT"
