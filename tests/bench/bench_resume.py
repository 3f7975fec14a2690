#!/usr/bin/env python3
"""bench-resume: what a client sees of a daemon's death, and what the pool costs (issue 48 item 6).

Two daemons (BUILD/bin/smollm3d, the fixture model unless --model) behind one gateway:
  * the pause at a kill -9: N concurrent streams, one daemon killed once every stream has
    streamed about H tokens; each stream's longest silence, p50 / p99 over --reps runs, for each
    history length H (a resumed stream's tokens are prefilled again on the other daemon, so the
    pause grows with H: this is the recompute path; restoring from the spill is not done);
  * the steady-state cost of the pool: inter-token latency p50 / p99 of N streams through a
    gateway over one daemon and over two (the same daemon first in both).
Prints one table; nothing is checked.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gateway"))
import test_gateway as tg  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def one_stream(gw, body, out, idx, progress):
    c = gw.conn(300)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    while True:
        x = r.read1(65536)
        if not x:
            break
        times.append(time.monotonic())
        progress[idx] += x.count(b"data: {")
    c.close()
    out[idx] = times


def run(gw, n, max_tokens, during=None):
    out, prog = [None] * n, [0] * n
    th = [threading.Thread(target=one_stream, args=(gw, {
        "messages": [{"role": "user", "content": "bench %d %s" % (i, "y" * i)}], "max_tokens": max_tokens,
        "stream": True, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}, out, i, prog))
        for i in range(n)]
    for t in th:
        t.start()
    if during:
        during(prog)
    for t in th:
        t.join(600)
    return out


def gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=None)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--history", default="32,256,1024")
    a = ap.parse_args()
    tg.ARGS = argparse.Namespace(build=os.path.abspath(a.build))
    tmp = tempfile.mkdtemp(prefix="bench-resume-")
    ds = [tg.Daemon(os.path.join(tmp, "d%d.sock" % i), model=a.model) for i in range(2)]
    rows = []
    try:
        # steady state: one daemon vs the pool of two
        for label, extra in (("1 daemon", []), ("2 daemons", ["--daemon", ds[1].endpoint])):
            gw = tg.Gateway(ds[0].endpoint, tmp, extra=extra)
            run(gw, a.streams, 32)                      # warm
            itl = [g for t in run(gw, a.streams, 256) for g in gaps(t)]
            rows.append("ITL %-10s  p50 %6.2f ms  p99 %6.2f ms  (%d streams x 256 tokens)"
                        % (label, 1e3 * pct(itl, 50), 1e3 * pct(itl, 99), a.streams))
            gw.stop()
        gw = tg.Gateway(ds[0].endpoint, tmp, extra=["--daemon", ds[1].endpoint])
        for h in [int(x) for x in a.history.split(",")]:
            pauses = []
            for _ in range(a.reps):
                killed = []

                def kill(prog):
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline and min(prog) < h:
                        time.sleep(0.002)
                    act = [d.stats()["requests_active"] for d in ds]
                    v = ds[0] if act[0] >= act[1] else ds[1]
                    v.kill()
                    killed.append(v)
                out = run(gw, a.streams, h + 128, kill)
                pauses += [max(gaps(t)) for t in out if len(t) > 1]
                killed[0].start()
                gw.wait_ready(30)
                time.sleep(1.5)                         # both up again
            rows.append("pause at kill -9, history %5d tokens: p50 %7.1f ms  p99 %7.1f ms  (%d streams x %d runs)"
                        % (h, 1e3 * statistics.median(pauses), 1e3 * pct(pauses, 99), a.streams, a.reps))
        gw.stop()
    finally:
        for d in ds:
            d.stop()
    print("bench-resume (%s, CPU, %s)" % (os.path.basename(a.model or tg.MODEL), time.strftime("%Y-%m-%d")))
    for r in rows:
        print("  " + r)


if __name__ == "__main__":
    main()
