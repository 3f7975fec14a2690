#!/usr/bin/env python3
"""test_load.py - checks that tests/load/loadgen.py measures correctly.

1. plan: the same --seed gives the same requests, another seed others; the mix and the
   max_tokens range are honoured.
2. paced: a scripted SSE server (in this process, asyncio) answers every request after a
   known TTFT with a known number of tokens at a known inter-token gap, and fails a known
   subset (an HTTP 500, an error chunk, a stream cut before [DONE]); loadgen's TTFT / ITL
   percentiles, token counts, requests and errors must match what was scripted, and
   tokens/s must be tokens / wall time.  --no-think / --ignore-eos put
   chat_template_kwargs.enable_thinking = false / ignore_eos in the body, and only with the flags.
3. stack: the real smollm3d (fixture model, CPU) + smollm3-gateway + nginx (the shipped
   site, tests/soak/soak.py's Stack, rate limits left out): a few seconds of --mix mixed
   streams with --logprobs.  Per request: the SSE token entries == usage.completion_tokens
   <= max_tokens (== when finish is "length"), TTFT <= latency; in all: the gateway's
   /metrics completion and prompt token counters grew by exactly the summed usage, the
   request counter by the number of requests, tokens/s == tokens / wall.
4. ctl: loadgen --mode ctl against the same daemon: token events == the done event's usage,
   the daemon's own TTFT <= the client's, every request ok.
Prints "load: N passed, N failed"; exits 1 on any failure.
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
LOADGEN = os.path.join(HERE, "loadgen.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "soak"))

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, (": " + detail) if detail else ""))


def loadgen(*a, timeout=60):
    p = subprocess.run([sys.executable, LOADGEN] + [str(x) for x in a], capture_output=True, text=True,
                       timeout=timeout)
    sys.stdout.write(p.stdout)
    if p.stderr.strip():
        sys.stdout.write(p.stderr)
    js = [l for l in p.stdout.splitlines() if l.startswith('{"load"')]
    return p.returncode, (json.loads(js[-1])["load"] if js else None)


def records(path):
    return [json.loads(l) for l in open(path)]


def near(a, b, rel=0.01, abs_=0.0):
    return a is not None and abs(a - b) <= max(abs_, rel * abs(b))


# ------------------------------------------------------------------ 1: the plan
def t_plan():
    def plan(*a):
        out = subprocess.run([sys.executable, LOADGEN, "--plan", "200"] + list(a), capture_output=True,
                             text=True, check=True).stdout
        return [json.loads(l) for l in out.splitlines()]
    p1, p1b, p2 = plan("--seed", "7"), plan("--seed", "7"), plan("--seed", "8")
    check("plan: same seed, same requests", p1 == p1b)
    check("plan: another seed, other requests", p1 != p2)
    kinds = [r["kind"] for r in p1]
    check("plan: mixed is ~20%% long prompts (%d of 200)" % kinds.count("long"), 20 <= kinds.count("long") <= 60)
    mts = [r["max_tokens"] for r in plan("--seed", "7", "--max-tokens", "16:256")]
    check("plan: max_tokens within 16:256, spread (min %d max %d)" % (min(mts), max(mts)),
          min(mts) >= 16 and max(mts) <= 256 and max(mts) > 128 and min(mts) < 32)
    check("plan: --mix chat has no long prompts", all(r["kind"] == "chat" for r in plan("--mix", "chat")))


# ------------------------------------------------------------------ 2: a paced fake server
TTFT, GAP, NTOK = 0.12, 0.025, 8


class Paced:
    """HTTP/1.1 SSE server: request k (in arrival order) gets NTOK tokens, the first after
    TTFT, then one every GAP; k % 10 == 3: HTTP 500; == 6: an error chunk after 2 tokens;
    == 8: the connection closed after 2 tokens (no [DONE])."""

    def __init__(self):
        self.port = None
        self.n = 0
        self.bodies = []                 # every request's JSON body, in arrival order
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        srv = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.port = srv.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def handle(self, r, w):
        k = self.n
        self.n += 1
        length = 0
        while True:
            h = await r.readline()
            if h in (b"\r\n", b""):
                break
            if h.lower().startswith(b"content-length:"):
                length = int(h.split(b":")[1])
        body = json.loads(await r.readexactly(length))
        self.bodies.append(body)
        mt = body.get("max_tokens", NTOK)
        if k % 10 == 3:
            w.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            await w.drain()
            w.close()
            return
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def sse(obj):
            d = ("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode()
            w.write(b"%x\r\n%s\r\n" % (len(d), d))
            await w.drain()
        await sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        n = min(mt, NTOK)
        await asyncio.sleep(TTFT)
        for i in range(n):
            if i:
                await asyncio.sleep(GAP)
            await sse({"choices": [{"index": 0, "delta": {"content": "t%d " % i}}]})
            if i == 1 and k % 10 == 6:
                await sse({"error": {"message": "scripted", "code": "internal"}})
                await sse("[DONE]")
                w.write(b"0\r\n\r\n")
                w.close()
                return
            if i == 1 and k % 10 == 8:
                w.close()
                return
        await sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        await sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": n + 5}})
        await sse("[DONE]")
        w.write(b"0\r\n\r\n")
        await w.drain()
        w.close()


def t_paced(tmp):
    srv = Paced()
    rec = os.path.join(tmp, "paced.jsonl")
    rc, s = loadgen("--url", "http://127.0.0.1:%d" % srv.port, "--streams", 4, "--requests", 20,
                    "--max-tokens", 100, "--records", rec)
    if not s:
        check("paced: loadgen ran", False, "no JSON line (rc %s)" % rc)
        return
    check("paced: exit 1 when requests failed", rc == 1)
    check("paced: 20 requests, 6 errors (%s)" % s["errors_by_kind"],
          s["requests"] == 20 and s["errors"] == 6 and s["errors_by_kind"] == {
              "http 500": 2, "stream error": 2, "stream cut": 2})
    check("paced: 14 ok x %d tokens = %d" % (NTOK, s["completion_tokens"]),
          s["ok"] == 14 and s["completion_tokens"] == 14 * NTOK and s["token_events"] == 14 * NTOK)
    check("paced: TTFT p50 %.1f ms ~ %.0f ms" % (s["ttft_ms_p50"], TTFT * 1e3),
          TTFT * 1e3 <= s["ttft_ms_p50"] <= TTFT * 1e3 + 40)
    check("paced: TTFT p99 %.1f ms < %.0f ms" % (s["ttft_ms_p99"], TTFT * 1e3 + 80),
          TTFT * 1e3 <= s["ttft_ms_p99"] <= TTFT * 1e3 + 80)
    check("paced: inter-token p50 %.1f ms ~ %.0f ms" % (s["itl_ms_p50"], GAP * 1e3),
          GAP * 1e3 - 1 <= s["itl_ms_p50"] <= GAP * 1e3 + 15)
    check("paced: inter-token p99 %.1f ms >= p50" % s["itl_ms_p99"], s["itl_ms_p99"] >= s["itl_ms_p50"])
    check("paced: tokens/s %.2f == tokens / wall" % s["tokens_per_s"],
          near(s["tokens_per_s"], s["completion_tokens"] / s["wall_s"], 0.002))
    check("paced: requests/s %.3f == ok / wall" % s["requests_per_s"],
          near(s["requests_per_s"], s["ok"] / s["wall_s"], 0.002))
    # 20 requests on 4 streams are 5 rounds; a successful request is TTFT + 7 gaps
    one = TTFT + (NTOK - 1) * GAP
    check("paced: wall %.2f s within [%.2f, %.2f]" % (s["wall_s"], 2 * one, 5 * one + 1.0),
          2 * one <= s["wall_s"] <= 5 * one + 1.0)
    rs = records(rec)
    bad = [r["i"] for r in rs if r["ttft_s"] is not None and r["ttft_s"] > r["latency_s"]]
    check("paced: records: TTFT <= latency for each", len(rs) == 20 and not bad, str(bad))


def t_no_think():
    """--no-think sends chat_template_kwargs.enable_thinking = false (and --ignore-eos its field):
    the bodies tests/gpu/check.sh --quick sends to smollm3-gateway and to llama-server alike."""
    srv = Paced()
    loadgen("--url", "http://127.0.0.1:%d" % srv.port, "--streams", 2, "--requests", 2, "--max-tokens", 4,
            "--no-think", "--ignore-eos", "--mix", "chat", "--seed", 64)
    loadgen("--url", "http://127.0.0.1:%d" % srv.port, "--streams", 1, "--requests", 1, "--max-tokens", 4)
    b = srv.bodies
    check("no-think: 3 bodies received", len(b) == 3, str(len(b)))
    if len(b) == 3:
        check("no-think: chat_template_kwargs {enable_thinking: false} and ignore_eos with --no-think --ignore-eos",
              all(x.get("chat_template_kwargs") == {"enable_thinking": False} and x.get("ignore_eos") is True
                  for x in b[:2]), json.dumps(b[:2])[:300])
        check("no-think: neither field without the flags",
              "chat_template_kwargs" not in b[2] and "ignore_eos" not in b[2], json.dumps(b[2])[:300])


# ------------------------------------------------------------------ 3 + 4: the real stack
def metrics(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for l in text.splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            out[k] = float(v)
    return out


def chat_requests(m):
    return sum(v for k, v in m.items()
               if k.startswith("smollm3_gateway_requests_total{") and 'endpoint="/v1/chat/completions"' in k)


def t_stack(args, tmp):
    from soak import Stack
    a = argparse.Namespace(build=args.build, model=args.model, threads=2, workers=1, no_rate_limit=True)
    st = Stack(a, tmp)
    try:
        st.start()
    except Exception as e:  # noqa: BLE001
        check("stack: daemon + gateway + nginx start", False, str(e)[-2000:])
        st.stop()
        return
    try:
        m0 = metrics(st.port)
        rec = os.path.join(tmp, "stack.jsonl")
        rc, s = loadgen("--url", "http://127.0.0.1:%d" % st.port, "--api-key", st.keys[0], "--streams", 4,
                        "--duration", args.seconds, "--mix", "mixed", "--max-tokens", "4:24", "--seed", 3,
                        "--logprobs", "--records", rec)
        time.sleep(0.3)    # the gateway counts a request when it finished answering it
        m1 = metrics(st.port)
        if not s:
            check("stack: loadgen ran", False, "rc %s" % rc)
            return
        check("stack: every request ok (%d requests, %s)" % (s["requests"], s["errors_by_kind"]),
              rc == 0 and s["errors"] == 0 and s["requests"] >= 8)
        rs = records(rec)
        mism = [r["i"] for r in rs if r["token_events"] != r["completion_tokens"]]
        check("stack: SSE token entries == usage.completion_tokens per request", not mism, str(mism[:5]))
        over = [r["i"] for r in rs if r["completion_tokens"] > r["max_tokens"] or
                (r["finish_reason"] == "length" and r["completion_tokens"] != r["max_tokens"])]
        check("stack: tokens <= max_tokens, == when finish is length", not over, str(over[:5]))
        nlen = sum(1 for r in rs if r["finish_reason"] == "length")
        check("stack: most requests end at max_tokens (%d of %d)" % (nlen, len(rs)), nlen >= len(rs) // 2)
        bad = [r["i"] for r in rs if r["ttft_s"] is None or not 0 < r["ttft_s"] <= r["latency_s"]]
        check("stack: 0 < TTFT <= latency per request", not bad, str(bad[:5]))
        check("stack: long prompts in the mix (%d)" % sum(r["kind"] == "long" for r in rs),
              any(r["kind"] == "long" for r in rs) and any(r["kind"] == "chat" for r in rs))
        dct = m1.get("smollm3_gateway_completion_tokens_total", 0) - m0.get("smollm3_gateway_completion_tokens_total", 0)
        dpt = m1.get("smollm3_gateway_prompt_tokens_total", 0) - m0.get("smollm3_gateway_prompt_tokens_total", 0)
        dreq = chat_requests(m1) - chat_requests(m0)
        check("stack: /metrics completion tokens +%d == loadgen's %d" % (dct, s["completion_tokens"]),
              dct == s["completion_tokens"] and s["completion_tokens"] == sum(r["completion_tokens"] for r in rs))
        check("stack: /metrics prompt tokens +%d == loadgen's %d" % (dpt, s["prompt_tokens"]),
              dpt == s["prompt_tokens"] > 0)
        check("stack: /metrics chat requests +%d == %d" % (dreq, s["requests"]), dreq == s["requests"])
        check("stack: tokens/s %.2f == tokens / wall" % s["tokens_per_s"],
              near(s["tokens_per_s"], s["completion_tokens"] / s["wall_s"], 0.002))
        check("stack: wall %.2f s >= --duration %s and every request inside it" % (s["wall_s"], args.seconds),
              s["wall_s"] >= args.seconds and all(r["start_s"] >= 0 and r["start_s"] + r["latency_s"] <= s["wall_s"] + 1e-3
                                                 for r in rs))
        check("stack: percentiles ordered", s["ttft_ms_p50"] <= s["ttft_ms_p99"] and s["itl_ms_p50"] <= s["itl_ms_p99"])

        # 4: ctl mode, straight to the daemon
        rec = os.path.join(tmp, "ctl.jsonl")
        rc, s = loadgen("--mode", "ctl", "--connect", "ipc://" + st.dsock, "--ctl",
                        os.path.join(args.build, "bin/smollm3ctl"), "--streams", 4, "--requests", 12,
                        "--max-tokens", 6, "--seed", 5, "--records", rec)
        if not s:
            check("ctl: loadgen ran", False, "rc %s" % rc)
            return
        rs = records(rec)
        check("ctl: 12 requests, all ok (%s)" % s["errors_by_kind"], rc == 0 and s["ok"] == 12)
        mism = [r["i"] for r in rs if r["token_events"] != r["completion_tokens"] or r["completion_tokens"] > 6]
        check("ctl: token events == done usage <= max_tokens", not mism, str(mism[:5]))
        bad = [r["i"] for r in rs if r["server_ttft_ms"] is None or r["ttft_s"] is None
               or r["server_ttft_ms"] > r["ttft_s"] * 1e3 + 1 or r["ttft_s"] > r["latency_s"]]
        check("ctl: daemon's TTFT <= client's TTFT <= latency", not bad, str(bad[:5]))
        check("ctl: tokens/s == tokens / wall", near(s["tokens_per_s"], s["completion_tokens"] / s["wall_s"], 0.002))
    finally:
        st.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf"))
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    with tempfile.TemporaryDirectory(prefix="smol-load-") as tmp:
        t_plan()
        t_paced(tmp)
        t_no_think()
        t_stack(args, tmp)
    print("load: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
