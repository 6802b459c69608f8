#!/usr/bin/env python3
"""A/B of two builds of bench's `http_server` (spindle): CPU per request
under wrk, old and new in interleaved rounds (order alternating), server
on CPU 1 and wrk on CPU 0, medians.

    python3 bench/ab_http.py OLD_BIN NEW_BIN [--rounds 5] [--loads 50,500,50:p]

A load is a connection count; `:p` adds pipeline.lua (16 requests per
write). Build the old binary from a worktree of the old commit with its own
CARGO_TARGET_DIR.
"""
import argparse, subprocess, os, statistics, re
TICK = os.sysconf("SC_CLK_TCK")
def one(binary, conns, secs, extra, port):
    p = subprocess.Popen(["taskset","-c","1",binary,"spindle",f"127.0.0.1:{port}"],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
    p.stdout.readline()
    def cpu():
        f=open(f"/proc/{p.pid}/stat").read().rsplit(")",1)[1].split()
        return (int(f[11])+int(f[12]))/TICK
    subprocess.run(["taskset","-c","0","wrk","-t1",f"-c{conns}","-d1s"]+extra+[f"http://127.0.0.1:{port}/"],capture_output=True)
    c0=cpu()
    out=subprocess.run(["taskset","-c","0","wrk","-t1",f"-c{conns}",f"-d{secs}s"]+extra+[f"http://127.0.0.1:{port}/"],capture_output=True,text=True).stdout
    c1=cpu(); p.kill(); p.wait()
    reqs=int(re.search(r"(\d+) requests in",out).group(1))
    return (c1-c0)/reqs*1e6
ap=argparse.ArgumentParser()
ap.add_argument("old"); ap.add_argument("new")
ap.add_argument("--rounds",type=int,default=5); ap.add_argument("--loads",default="50,500,50:p")
a=ap.parse_args()
rounds=a.rounds; loads=a.loads.split(",")
HERE=os.path.dirname(os.path.abspath(__file__))
res={}
port=19000
for r in range(rounds):
    for load in loads:
        conns=int(load.split(":")[0]); extra=["-s",os.path.join(HERE,"pipeline.lua")] if load.endswith("p") else []
        for b in ([a.old,a.new] if r%2==0 else [a.new,a.old]):
            port+=1
            res.setdefault((load,b),[]).append(one(b,conns,3,extra,port))
for load in loads:
    o=statistics.median(res[(load,a.old)]); n=statistics.median(res[(load,a.new)])
    print(f"{load}: old {o:.3f} new {n:.3f} new/old {n/o:.3f}  old={['%.2f'%x for x in res[(load,a.old)]]} new={['%.2f'%x for x in res[(load,a.new)]]}")
