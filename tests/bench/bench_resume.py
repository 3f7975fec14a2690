#!/usr/bin/env python3
"""bench-resume: what a client sees of a daemon's death, and what the pool costs (issue 48 item 6).

Two daemons (BUILD/bin/smollm3d, the fixture model unless --model) behind one gateway:
  * the pause at a kill -9: N concurrent streams, one daemon killed once every stream has
    streamed about H tokens; each stream's longest silence, p50 / p99 over --reps runs, for each
    history length H (a resumed stream's tokens are prefilled again on the other daemon, so the
    pause grows with H: the answer's own tokens are never in the spill); all streams, and apart
    the ones on the daemon stopped (each prompt's daemon found by a one-token probe: the
    rendezvous is fixed), the ones that were resumed;
  * the pause at a SIGTERM (systemctl stop/restart) of one of the two daemons: the same N streams and
    history lengths (--sigterm-history); the streams are handed over make-before-break (the daemon
    sends Event.handover and generates on while the gateway warms the other daemon up with the
    tokens so far, in rounds until few came during one, then cancels the old run at its next token
    and resumes the stream there: gateway/daemon.c); each stream's longest silence as above, how
    many streams were handed over (moved while the old daemon still generated / taken over when it
    stopped first), the warm-up rounds, and how
    long the daemon took to exit; --sigterm-n 2 makes them n = 2 streams (H tokens each choice,
    greedy: the choices are alike), warmed up choice by choice; --sigterm-cold gives each run
    prompts of its own (the other daemon's prefix cache then holds nothing of their answers);
  * restore from spill vs recompute, by conversation history (--spill-history): N conversations
    of about C tokens (one earlier turn), their next turn streaming on one daemon when it is
    killed, all resumed on the other; with a session_id on a shared spill directory
    (kv_spill_shared: the turn's history written through) the other daemon restores the
    conversation's KV from the spill; without one (the history sent as messages) it recomputes it.
    Each resumed stream's pause, p50 / max, and the tokens the other daemon restored;
  * the steady-state cost of the pool machinery (--pool-runs): the same daemon A serving the same
    N streams, behind a gateway with `--daemon A` alone and behind one with the pool
    `--daemon A --daemon B`, B up and idle (connected: ZeroMQ heartbeats, health every 10 s,
    stats every 2 s, a candidate in every rendezvous) and the N prompts picked (one-token
    probes) so that the rendezvous sends each of them to A; a fresh gateway per run, the two
    kinds interleaved (single, pool, pool, single, ...) so drift and order cancel; inter-token
    latency p50 / p99 of all runs of each kind, pool / single, and the median of the per-pair
    ratios;
  * for reference, the streams split over a pool of two daemons (the same two CPU cores): ITL
    p50 / p99 through a gateway over one daemon and over two (not the pool's own cost).
Prints one table; nothing is checked.
"""
import argparse
import json
import os
import re
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


def bench_prompt(i):
    return "bench %d %s" % (i, "y" * (i % 16))


def run(gw, n, max_tokens, during=None, prompts=None, choices=1):
    out, prog = [None] * n, [0] * n
    prompts = prompts or [bench_prompt(i) for i in range(n)]
    th = [threading.Thread(target=one_stream, args=(gw, {
        "messages": [{"role": "user", "content": prompts[i]}], "max_tokens": max_tokens, "n": choices,
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


def wait_pool(gw, n_up, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, _, b = gw.request("GET", "/health")
        if sum(d["state"] == "up" for d in json.loads(b).get("daemons", [])) == n_up:
            return
        time.sleep(0.05)
    raise RuntimeError("the pool never had %d daemons up" % n_up)


def metric(gw, name):
    _, _, b = gw.request("GET", "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), b.decode(), re.M)
    return float(m.group(1)) if m else 0.0


def handovers(gw):
    """smollm3_gateway_handovers_total by result."""
    _, _, b = gw.request("GET", "/metrics")
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^smollm3_gateway_handovers_total\{result="(\w+)"\} (\S+)$', b.decode(), re.M)}


def daemon_of(gw, ds, p):
    """The index in ds of the daemon the pool gateway gw routes prompt p to: a one-token probe."""
    before = [d.stats()["requests_total"] for d in ds]
    st, _ = tg.post_json(gw, "/v1/chat/completions", {"messages": [{"role": "user", "content": p}],
                                                      "max_tokens": 1, "temperature": 0})
    if st != 200:
        raise RuntimeError("probe status %d" % st)
    delta = [d.stats()["requests_total"] - x for d, x in zip(ds, before)]
    return delta.index(max(delta))


def prompts_on(gw, ds, want, n, limit=400):
    """n prompts the pool gateway gw routes to ds[want] (its rendezvous)."""
    got = []
    for i in range(limit):
        if daemon_of(gw, ds, bench_prompt(i)) == want:
            got.append(bench_prompt(i))
            if len(got) == n:
                return got
    raise RuntimeError("only %d of %d prompts route to daemon %d" % (len(got), n, want))


def steady(tmp, endpoint, extra, n, prompts):
    """One run: a fresh gateway over endpoint (+ extra), warmed, then n streams x 256 tokens; their gaps."""
    gw = tg.Gateway(endpoint, tmp, extra=extra)
    try:
        wait_pool(gw, 1 + extra.count("--daemon"))      # every daemon up, then the same settling time
        time.sleep(0.5)
        run(gw, n, 32, prompts=prompts)                  # warm
        return [g for t in run(gw, n, 256, prompts=prompts) for g in gaps(t)]
    finally:
        gw.stop()


def spill_run(gw, ds, n, hist, mode, tag):
    """N conversations of about hist tokens on ds[0] alone; their next turn streams, ds[1] comes up,
    ds[0] is killed: every stream resumes on ds[1].  (pauses, tokens ds[1] restored from the spill,
    the history's prompt tokens)."""
    ds[1].kill()
    wait_pool(gw, 1)
    convs, prompt = [], 0
    w0 = ds[0].stats().get("spill_sessions_written", 0)
    for i in range(n):
        first = [{"role": "user", "content": "%s %d %d: %s" % (tag, hist, i, " ".join(
            "w%d" % ((i * 7919 + k) % 997) for k in range(hist // 2)))}]
        b = {"messages": first, "max_tokens": 1, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}
        if mode == "restore":
            b["session_id"] = "%s-%d-%d" % (tag, hist, i)
        st, r = tg.post_json(gw, "/v1/chat/completions", b)
        if st != 200:
            raise RuntimeError("turn 1: %d %r" % (st, r))
        prompt = max(prompt, r["usage"]["prompt_tokens"])
        b["messages"] = first + [{"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""},
                                 {"role": "user", "content": "Now tell me a long story about it."}]
        convs.append(b)
    if mode == "restore":       # the first turns written through before the next ones run
        deadline = time.monotonic() + 60
        while ds[0].stats().get("spill_sessions_written", 0) - w0 < n and time.monotonic() < deadline:
            time.sleep(0.05)
    out, prog = [None] * n, [0] * n
    for b in convs:
        b.update(max_tokens=256, stream=True)
    th = [threading.Thread(target=one_stream, args=(gw, convs[i], out, i, prog)) for i in range(n)]
    for t in th:
        t.start()
    ds[1].start()
    wait_pool(gw, 2)
    r0 = ds[1].stats().get("spill_tokens_restored", 0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and min(prog) < 8:
        time.sleep(0.002)
    ds[0].kill()
    for t in th:
        t.join(600)
    restored = ds[1].stats().get("spill_tokens_restored", 0) - r0
    ds[0].start()
    wait_pool(gw, 2)
    return [max(gaps(t)) for t in out if len(t) > 1], restored, prompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=None)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--history", default="32,256,1024", help="history lengths for the kill -9 pause")
    ap.add_argument("--sigterm-history", default="32,256,1024", help="history lengths for the SIGTERM pause "
                    "('' = not measured)")
    ap.add_argument("--sigterm-tail", type=int, default=128, help="tokens each stream still has to generate at "
                    "the SIGTERM (make-before-break: with few, the streams end on the draining daemon before "
                    "the other one has caught up, and none is handed over)")
    ap.add_argument("--sigterm-n", type=int, default=1, help="choices of each stream in the SIGTERM runs (n; "
                    "the history is each choice's)")
    ap.add_argument("--sigterm-cold", action="store_true", help="each SIGTERM run with prompts of its own, so "
                    "that the other daemon's prefix cache holds none of its answers (greedy answers repeat: "
                    "without it the later runs' warm-ups find the first run's KV)")
    ap.add_argument("--daemon-arg", action="append", default=[], help="an argument for both daemons (repeat it: "
                    "--daemon-arg=--step-budget-ms --daemon-arg=100)")
    ap.add_argument("--pool-runs", type=int, default=10, help="runs of each kind (single, pool) for the pool's "
                    "own cost, interleaved (0 = not measured)")
    ap.add_argument("--spill-history", default="256,1024", help="conversation lengths for restore vs recompute "
                    "('' = not measured)")
    a = ap.parse_args()
    tg.ARGS = argparse.Namespace(build=os.path.abspath(a.build))
    tmp = tempfile.mkdtemp(prefix="bench-resume-")
    spill = os.path.join(tmp, "spill")
    os.makedirs(spill)
    ds = [tg.Daemon(os.path.join(tmp, "d%d.sock" % i), model=a.model,
                    extra=["--kv-spill-dir", spill, "--kv-spill-shared"] + a.daemon_arg) for i in range(2)]
    rows = []
    try:
        if a.pool_runs:
            # the pool's own cost: daemon A alone vs A in a pool with B up and idle, every prompt routed to A
            gw = tg.Gateway(ds[0].endpoint, tmp, extra=["--daemon", ds[1].endpoint])
            wait_pool(gw, 2)
            on_a = prompts_on(gw, ds, 0, a.streams)
            gw.stop()
            itl = {"single": [], "pool": []}
            pair = []                                   # per single/pool pair: (p50 ratio, p99 ratio)
            b0 = ds[1].stats()["requests_total"]
            for r in range(a.pool_runs):
                g = {}
                kinds = (("single", []), ("pool", ["--daemon", ds[1].endpoint]))
                for kind, extra in kinds[::1 if r % 2 == 0 else -1]:     # single, pool, pool, single, ...
                    g[kind] = steady(tmp, ds[0].endpoint, extra, a.streams, on_a)
                    itl[kind] += g[kind]
                pair.append(tuple(pct(g["pool"], q) / pct(g["single"], q) for q in (50, 99)))
            if ds[1].stats()["requests_total"] != b0:
                raise RuntimeError("daemon B served requests in the pool-cost runs")
            p = {k: (pct(v, 50), pct(v, 99)) for k, v in itl.items()}
            for kind, label in (("single", "gateway --daemon A"),
                                ("pool", "gateway --daemon A --daemon B (B up, idle)")):
                rows.append("ITL, all streams on A, %-42s p50 %6.2f ms  p99 %6.2f ms  "
                            "(%d streams x 256 tokens x %d runs)"
                            % (label + ":", 1e3 * p[kind][0], 1e3 * p[kind][1], a.streams, a.pool_runs))
            rows.append("ITL pool / single: p50 %.3fx  p99 %.3fx  (all runs' gaps together); per pair of runs, "
                        "median p50 %.3fx  p99 %.3fx  (p99 range %.2f-%.2fx)"
                        % (p["pool"][0] / p["single"][0], p["pool"][1] / p["single"][1],
                           statistics.median(x[0] for x in pair), statistics.median(x[1] for x in pair),
                           min(x[1] for x in pair), max(x[1] for x in pair)))
        # for reference: the streams split over two daemons on the same cores (not the pool's own cost)
        for label, extra in (("1 daemon", []), ("2 daemons, streams split", ["--daemon", ds[1].endpoint])):
            gw = tg.Gateway(ds[0].endpoint, tmp, extra=extra)
            if extra:
                wait_pool(gw, 2)
            run(gw, a.streams, 32)                      # warm
            itl = [g for t in run(gw, a.streams, 256) for g in gaps(t)]
            rows.append("ITL %-25s  p50 %6.2f ms  p99 %6.2f ms  (%d streams x 256 tokens, one run)"
                        % (label, 1e3 * pct(itl, 50), 1e3 * pct(itl, 99), a.streams))
            gw.stop()
        gw = tg.Gateway(ds[0].endpoint, tmp, extra=["--daemon", ds[1].endpoint])
        wait_pool(gw, 2)
        on = [daemon_of(gw, ds, bench_prompt(i)) for i in range(a.streams)]    # each stream's daemon
        for how, hist in (("kill -9", a.history), ("SIGTERM", a.sigterm_history)):
            for h in [int(x) for x in hist.split(",") if x]:
                pauses, moved, exits, resumed = [], [], [], 0
                n_ch = a.sigterm_n if how == "SIGTERM" else 1
                ho0 = handovers(gw)
                rounds0 = metric(gw, "smollm3_gateway_handover_rounds_total")
                for rep in range(a.reps):
                    stopped = []
                    prompts, on_rep = None, on
                    if how == "SIGTERM" and a.sigterm_cold:
                        prompts = ["%s cold %d %d" % (bench_prompt(i), h, rep) for i in range(a.streams)]
                        on_rep = [daemon_of(gw, ds, p) for p in prompts]
                    wait_pool(gw, 2)
                    r0 = metric(gw, "smollm3_gateway_streams_resumed_total")

                    def stop(prog):
                        deadline = time.monotonic() + 120
                        while time.monotonic() < deadline and min(prog) < h * n_ch:
                            time.sleep(0.002)
                        act = [d.stats()["requests_active"] for d in ds]
                        v = 0 if act[0] >= act[1] else 1
                        t = time.monotonic()
                        if how == "kill -9":
                            ds[v].kill()
                        else:
                            ds[v].stop()                # SIGTERM, and wait for its exit
                        exits.append(time.monotonic() - t)
                        stopped.append(v)
                    out = run(gw, a.streams, h + (a.sigterm_tail if how == "SIGTERM" else 128), stop, prompts=prompts,
                              choices=n_ch)
                    pauses += [max(gaps(t)) for t in out if len(t) > 1]
                    moved += [max(gaps(t)) for i, t in enumerate(out) if len(t) > 1 and on_rep[i] == stopped[0]]
                    resumed += metric(gw, "smollm3_gateway_streams_resumed_total") - r0
                    ds[stopped[0]].start()
                    wait_pool(gw, 2)
                ho = {k: int(v - ho0.get(k, 0)) for k, v in handovers(gw).items()}
                rounds = int(metric(gw, "smollm3_gateway_handover_rounds_total") - rounds0)
                rows.append("pause at %-7s, history %5d tokens%s: all streams p50 %7.1f ms  p99 %7.1f ms;  the %2d on "
                            "the stopped daemon p50 %7.1f ms  max %7.1f ms  (%d streams x %d runs; %d resumed%s)"
                            % (how, h, (" (n = %d)" % n_ch if n_ch > 1 else "") + (", cold" if how == "SIGTERM" and a.sigterm_cold else ""), 1e3 * statistics.median(pauses), 1e3 * pct(pauses, 99), len(moved),
                               1e3 * statistics.median(moved) if moved else float("nan"),
                               1e3 * max(moved) if moved else float("nan"), a.streams, a.reps, resumed,
                               "" if how == "kill -9" else
                               "; %d tokens left at the signal; make-before-break: %d moved, %d taken over, %d "
                               "warm-up rounds; the daemon exited %.2f s after SIGTERM, median"
                               % (a.sigterm_tail, ho.get("moved", 0), ho.get("taken_over", 0),
                                  rounds, statistics.median(exits))))
        for h in [int(x) for x in a.spill_history.split(",") if x]:
            for mode in ("recompute", "restore"):
                pauses, restored, prompt = [], 0, 0
                for rep in range(a.reps):
                    p, r, pt = spill_run(gw, ds, a.streams, h, mode, "%s%d" % (mode, rep))
                    pauses += p
                    restored += r
                    prompt = max(prompt, pt)
                rows.append("resumed turn, conversation %5d tokens, %-9s: pause p50 %7.1f ms  max %7.1f ms  "
                            "(%d streams x %d runs; %d tokens restored from the spill)"
                            % (prompt, mode, 1e3 * statistics.median(pauses), 1e3 * max(pauses), a.streams, a.reps,
                               restored))
        gw.stop()
    finally:
        for d in ds:
            d.stop()
    print("bench-resume (%s, CPU, %s)" % (os.path.basename(a.model or tg.MODEL), time.strftime("%Y-%m-%d")))
    for r in rows:
        print("  " + r)


if __name__ == "__main__":
    main()
