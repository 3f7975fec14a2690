#!/usr/bin/env python3
"""loadgen.py - a load generator for smollm3d: N concurrent streaming clients.

  http mode (default): OpenAI streaming clients, POST URL/v1/chat/completions with
      "stream": true and stream_options.include_usage, through nginx + the gateway (or
      any OpenAI-compatible server: llama.cpp's llama-server); SSE parsed as it arrives.
  ctl mode (--mode ctl): each request is one `smollm3ctl --connect EP generate --json`
      process talking ZeroMQ straight to the daemon; its JSON lines (started / token /
      done) are read as they arrive.  Needs no nginx and no Python package.

Python's standard library only (asyncio; the HTTP/1.1 client is the few lines below:
one connection per request, chunked transfer decoding), so it runs with any python3.
Time stamps are time.perf_counter() when a line is read off the socket / pipe.

Requests come from a seeded plan (--seed, --mix, --max-tokens): see tests/load/README.md.
Reported: generated tokens/s in all (tokens / wall time), requests/s, TTFT p50/p99,
inter-token latency p50/p99, errors by kind, and last a JSON line ("load": {...}).
Exit status: 0 when every request succeeded, 1 when any failed, 2 usage error.
"""
import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
import urllib.parse

CHAT_TURNS = [
    "What is the capital of France?", "Tell me a short joke about programmers.",
    "Name three primary colors.", "Write a haiku about the sea.", "What is 17 times 23?",
    "How do I say good morning in Spanish?", "Give me a fun fact about octopuses.",
    "What does CPU stand for?", "Suggest a name for a grey cat.",
    "Explain recursion in one sentence.", "Which planet is the largest in our solar system?",
    "What should I cook tonight with rice, eggs and spinach?",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Is a tomato a fruit or a vegetable? Answer briefly.",
    "Translate 'the weather is nice today' into French.",
    "What are the first five prime numbers?",
]
WORDS = ("the lighthouse keeper watched storm waves break over rocks while ships passed far "
         "beyond harbour lights and gulls circled above quiet village streets where fishermen "
         "mended nets each morning before dawn when tides turned and winds carried salt across "
         "fields of barley towards distant hills covered in heather and old stone walls").split()
LONG_TASKS = ["Summarize the following report in five bullet points.",
              "Read this text and list every place it mentions.",
              "Rewrite the following notes as a formal letter.",
              "Answer questions about this document: what happens at dawn?"]


def long_text(rng, n_words):
    out, sent = [], []
    for _ in range(n_words):
        sent.append(rng.choice(WORDS))
        if len(sent) >= rng.randint(8, 20):
            out.append(" ".join(sent).capitalize() + ".")
            sent = []
    if sent:
        out.append(" ".join(sent).capitalize() + ".")
    return " ".join(out)


def parse_range(s):
    if ":" in s:
        a, b = s.split(":", 1)
        a, b = int(a), int(b)
    else:
        a = b = int(s)
    if a < 1 or b < a:
        raise ValueError(s)
    return a, b


def plan(args, n):
    """The first n requests of the seeded plan: (kind, messages, max_tokens, seed)."""
    rng = random.Random(args.seed)
    lo, hi = args.max_tokens
    long_share = {"chat": 0.0, "long": 1.0, "mixed": 0.2}[args.mix]
    out = []
    for i in range(n):
        if rng.random() < long_share:
            kind = "long"
            # ~1.3 tokens a word: 150..1200 words is ~200..1600 prompt tokens, log-uniform
            nw = int(math.exp(rng.uniform(math.log(150), math.log(1200))))
            msgs = [{"role": "user", "content": rng.choice(LONG_TASKS) + "\n\n" + long_text(rng, nw)}]
        else:
            kind = "chat"
            msgs = []
            if rng.random() < 0.3:    # a second turn: the history comes back
                msgs += [{"role": "user", "content": rng.choice(CHAT_TURNS)},
                         {"role": "assistant", "content": long_text(rng, rng.randint(10, 40))}]
            msgs.append({"role": "user", "content": rng.choice(CHAT_TURNS)})
        # answer lengths: log-uniform in [lo, hi] (many short answers, some long ones)
        mt = lo if lo == hi else int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        out.append((kind, msgs, max(lo, min(hi, mt)), rng.randrange(1 << 31)))
    return out


def pct(xs, p):
    """The p-th percentile, linear between closest ranks (numpy's default); None if empty."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f = int(math.floor(k))
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


class Rec:
    __slots__ = ("i", "kind", "max_tokens", "t0", "t_first", "t_end", "times", "tokens_usage",
                 "prompt_tokens", "finish", "error", "server_ttft_ms")

    def __init__(self, i, kind, max_tokens):
        self.i, self.kind, self.max_tokens = i, kind, max_tokens
        self.t0 = self.t_first = self.t_end = None
        self.times = []                  # arrival of each token event
        self.tokens_usage = self.prompt_tokens = self.finish = self.error = self.server_ttft_ms = None

    def tokens(self):
        return self.tokens_usage if self.tokens_usage is not None else len(self.times)

    def as_dict(self, base):
        return {"i": self.i, "kind": self.kind, "max_tokens": self.max_tokens,
                "start_s": self.t0 - base, "latency_s": self.t_end - self.t0,
                "ttft_s": (self.times[0] - self.t0) if self.times else None,
                "token_events": len(self.times), "completion_tokens": self.tokens_usage,
                "prompt_tokens": self.prompt_tokens, "finish_reason": self.finish,
                "server_ttft_ms": self.server_ttft_ms, "error": self.error}


# ------------------------------------------------------------------ http mode
async def http_post_stream(url, body, headers, timeout):
    """POST body; yields (t, line) per SSE line as it arrives. Raises on a non-200 status
    (the message starts with 'http NNN')."""
    u = urllib.parse.urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    r, w = await asyncio.wait_for(asyncio.open_connection(u.hostname, port, ssl=(u.scheme == "https") or None),
                                  timeout)
    try:
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        hdr = "".join("%s: %s\r\n" % kv for kv in headers.items())
        w.write(("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 "Accept: text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
                 % (path, u.netloc, len(body), hdr)).encode() + body)
        await w.drain()
        status = await asyncio.wait_for(r.readline(), timeout)
        parts = status.split()
        code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        chunked, length = False, None
        while True:
            h = await asyncio.wait_for(r.readline(), timeout)
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            k, v = k.strip().lower(), v.strip().lower()
            if k == "transfer-encoding" and "chunked" in v:
                chunked = True
            elif k == "content-length":
                length = int(v)

        async def pieces():
            if chunked:
                while True:
                    sz = await asyncio.wait_for(r.readline(), timeout)
                    if not sz:
                        raise ConnectionError("connection closed inside a chunked body")
                    n = int(sz.split(b";")[0].strip() or b"0", 16)
                    if n == 0:
                        return
                    data = await asyncio.wait_for(r.readexactly(n + 2), timeout)
                    yield data[:-2]
            elif length is not None:
                left = length
                while left > 0:
                    d = await asyncio.wait_for(r.read(min(left, 65536)), timeout)
                    if not d:
                        raise ConnectionError("connection closed before Content-Length")
                    left -= len(d)
                    yield d
            else:
                while True:
                    d = await asyncio.wait_for(r.read(65536), timeout)
                    if not d:
                        return
                    yield d

        if code != 200:
            body = b""
            async for p in pieces():
                body += p
                if len(body) > 4096:
                    break
            raise RuntimeError("http %d: %s" % (code, body[:200].decode("utf-8", "replace").strip()))
        buf = b""
        async for p in pieces():
            t = time.perf_counter()
            buf += p
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield t, line.rstrip(b"\r").decode("utf-8", "replace")
        if buf:
            yield time.perf_counter(), buf.decode("utf-8", "replace")
    finally:
        w.close()


async def one_http(args, rec, msgs, seed):
    body = {"model": args.model, "messages": msgs, "stream": True, "max_tokens": rec.max_tokens,
            "temperature": args.temperature, "seed": seed, "stream_options": {"include_usage": True}}
    if args.logprobs:
        body["logprobs"] = True
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.no_think:
        # the chat template's no-think branch (SmolLM3: the short persona and an empty think
        # block): smollm3-gateway and llama-server both read it, so both render the same prompt
        body["chat_template_kwargs"] = {"enable_thinking": False}
    headers = {"Authorization": "Bearer " + args.api_key} if args.api_key else {}
    done = False
    rec.t0 = time.perf_counter()
    try:
        async for t, line in http_post_stream(args.url.rstrip("/") + "/v1/chat/completions",
                                              json.dumps(body).encode(), headers, args.timeout):
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                rec.error = "stream error: %s" % (ev["error"].get("code") or ev["error"].get("message"))
                continue
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                lp = (ch.get("logprobs") or {}).get("content")
                if args.logprobs:        # one entry per token: exact counts
                    rec.times.extend([t] * len(lp or ()))
                elif d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
                    rec.times.append(t)  # a chunk of text: one token or more, or a part of one
                if ch.get("finish_reason"):
                    rec.finish = ch["finish_reason"]
            u = ev.get("usage")
            if u:
                rec.tokens_usage = u.get("completion_tokens")
                rec.prompt_tokens = u.get("prompt_tokens")
        if not done and not rec.error:
            rec.error = "stream ended without [DONE]"
    except asyncio.TimeoutError:
        rec.error = "timeout"
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        rec.error = "stream cut: %s" % (e or type(e).__name__)
    except Exception as e:  # noqa: BLE001 - every failure is a counted error
        rec.error = str(e) if str(e).startswith("http ") else "%s: %s" % (type(e).__name__, e)
    rec.t_end = time.perf_counter()


# ------------------------------------------------------------------ ctl mode
def flatten(msgs):
    """smollm3ctl generate takes one user turn (and --system); earlier turns go into its text."""
    if len(msgs) == 1:
        return msgs[0]["content"]
    hist = "\n".join("%s: %s" % (m["role"], m["content"]) for m in msgs[:-1])
    return "Earlier in this conversation:\n%s\n\n%s" % (hist, msgs[-1]["content"])


async def one_ctl(args, rec, msgs, seed):
    cmd = [args.ctl, "--connect", args.connect, "--timeout", str(int(args.timeout)), "generate", "--json",
           "-n", str(rec.max_tokens), "--temp", str(args.temperature), "--seed", str(seed)]
    cmd += (["--no-think"] if args.no_think and "--no-think" not in args.ctl_arg else []) + args.ctl_arg
    cmd += ["--", flatten(msgs)]
    done = False
    env = None
    if os.environ.get("LOADGEN_CTL_LD_LIBRARY_PATH") is not None:   # tests/gpu/check.sh: the kit's libraries
        env = dict(os.environ, LD_LIBRARY_PATH=os.environ["LOADGEN_CTL_LD_LIBRARY_PATH"])
    rec.t0 = time.perf_counter()
    try:
        p = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.DEVNULL, env=env,
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                 limit=1 << 22)
        try:
            while True:
                line = await asyncio.wait_for(p.stdout.readline(), args.timeout + 5)
                if not line:
                    break
                t = time.perf_counter()
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                k = ev.get("event")
                if k == "token":
                    # a token's text may come in several events (a channel switch): the
                    # first has its id, the others -1
                    if ev.get("token_id", 0) >= 0:
                        rec.times.append(t)
                elif k == "started":
                    rec.prompt_tokens = ev.get("prompt_tokens")
                elif k == "done":
                    done = True
                    rec.finish = ev.get("finish_reason")
                    rec.tokens_usage = (ev.get("usage") or {}).get("completion_tokens")
                    rec.server_ttft_ms = (ev.get("timings") or {}).get("ttft_ms")
                elif k == "error":
                    rec.error = "error: %s" % ev.get("code")
            rc = await asyncio.wait_for(p.wait(), 10)
        except asyncio.TimeoutError:
            p.kill()
            await p.wait()
            raise
        if not done and not rec.error:
            err = (await p.stderr.read()).decode("utf-8", "replace").strip()
            rec.error = "smollm3ctl exit %d without a done event%s" % (rc, (": " + err[:120]) if err else "")
    except asyncio.TimeoutError:
        rec.error = "timeout"
    except OSError as e:
        rec.error = "cannot run %s: %s" % (args.ctl, e)
    rec.t_end = time.perf_counter()


# ------------------------------------------------------------------ the run
async def run(args):
    n_plan = args.requests if args.requests else 100000
    reqs = plan(args, n_plan)
    recs = []
    nxt = [0]
    one = one_http if args.mode == "http" else one_ctl
    t_start = time.perf_counter()
    deadline = t_start + args.duration if not args.requests else None

    async def worker():
        while True:
            if deadline is not None and time.perf_counter() >= deadline:
                return
            i = nxt[0]
            if i >= len(reqs):
                return
            nxt[0] += 1
            kind, msgs, mt, seed = reqs[i]
            rec = Rec(i, kind, mt)
            recs.append(rec)
            await one(args, rec, msgs, seed)

    await asyncio.gather(*(worker() for _ in range(args.streams)))
    t_stop = time.perf_counter()
    return recs, t_start, t_stop


def summarize(args, recs, t_start, t_stop):
    wall = t_stop - t_start
    ok = [r for r in recs if not r.error]
    errs = {}
    for r in recs:
        if r.error:
            k = r.error.split(":")[0]
            errs[k] = errs.get(k, 0) + 1
    tokens = sum(r.tokens() for r in ok)
    ttft = [r.times[0] - r.t0 for r in ok if r.times]
    lat = [r.t_end - r.t0 for r in ok]
    itl = [b - a for r in ok for a, b in zip(r.times, r.times[1:])]
    # per request: (latency - ttft) / (tokens - 1), the mean time per output token
    tpot = [(r.times[-1] - r.times[0]) / (len(r.times) - 1) for r in ok if len(r.times) > 1]
    ms = lambda x: None if x is None else round(x * 1e3, 3)  # noqa: E731
    return {
        "mode": args.mode, "target": args.url if args.mode == "http" else args.connect,
        "streams": args.streams, "mix": args.mix, "seed": args.seed,
        "max_tokens": "%d:%d" % args.max_tokens, "requests": len(recs), "ok": len(ok),
        "errors": len(recs) - len(ok), "errors_by_kind": errs, "wall_s": round(wall, 4),
        "completion_tokens": tokens, "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "token_events": sum(len(r.times) for r in ok),
        "tokens_per_s": round(tokens / wall, 3) if wall > 0 else 0.0,
        "requests_per_s": round(len(ok) / wall, 4) if wall > 0 else 0.0,
        "ttft_ms_p50": ms(pct(ttft, 50)), "ttft_ms_p99": ms(pct(ttft, 99)),
        "itl_ms_p50": ms(pct(itl, 50)), "itl_ms_p99": ms(pct(itl, 99)),
        "tpot_ms_p50": ms(pct(tpot, 50)), "latency_ms_p50": ms(pct(lat, 50)), "latency_ms_p99": ms(pct(lat, 99)),
        "finish": {f: sum(1 for r in ok if r.finish == f) for f in sorted({str(r.finish) for r in ok})},
    }


def report(s, out):
    f = lambda x: "-" if x is None else "%.1f" % x  # noqa: E731
    out.write("load: %s %s, %d streams, mix %s (seed %d), max_tokens %s\n"
              % (s["mode"], s["target"], s["streams"], s["mix"], s["seed"], s["max_tokens"]))
    out.write("  requests %d (ok %d, errors %d%s) in %.2f s: %.2f requests/s\n"
              % (s["requests"], s["ok"], s["errors"],
                 "".join(", %s %d" % kv for kv in sorted(s["errors_by_kind"].items())), s["wall_s"],
                 s["requests_per_s"]))
    out.write("  generated %d tokens (%d prompt tokens): %.1f tokens/s in all\n"
              % (s["completion_tokens"], s["prompt_tokens"], s["tokens_per_s"]))
    out.write("  TTFT ms p50 %s p99 %s | inter-token ms p50 %s p99 %s | latency ms p50 %s p99 %s\n"
              % (f(s["ttft_ms_p50"]), f(s["ttft_ms_p99"]), f(s["itl_ms_p50"]), f(s["itl_ms_p99"]),
                 f(s["latency_ms_p50"]), f(s["latency_ms_p99"])))


def main():
    ap = argparse.ArgumentParser(description="N concurrent streaming clients against smollm3d (see tests/load/README.md)")
    ap.add_argument("--mode", choices=["http", "ctl"], default="http")
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="http mode: the server's base URL (nginx)")
    ap.add_argument("--connect", default="", help="ctl mode: the daemon's endpoint (ipc://...)")
    ap.add_argument("--ctl", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build/bin/smollm3ctl"),
                    help="ctl mode: the smollm3ctl binary")
    ap.add_argument("--ctl-arg", action="append", default=[], help="ctl mode: an extra generate argument (repeatable)")
    ap.add_argument("--streams", type=int, default=8, help="concurrent clients (default 8)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--requests", type=int, default=0, help="send this many requests in all")
    g.add_argument("--duration", type=float, default=10.0, help="start requests for this many seconds (default 10)")
    ap.add_argument("--mix", choices=["chat", "long", "mixed"], default="mixed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", default="16:256", help="N, or LO:HI drawn log-uniformly (default 16:256)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--model", default="smollm3")
    ap.add_argument("--api-key", default=os.environ.get("LOADGEN_API_KEY", ""))
    ap.add_argument("--logprobs", action="store_true", help="http: ask for logprobs (one SSE entry per token)")
    ap.add_argument("--ignore-eos", action="store_true", help="http: send ignore_eos (llama-server, vLLM)")
    ap.add_argument("--no-think", action="store_true",
                    help="thinking off: http sends chat_template_kwargs.enable_thinking = false (smollm3-gateway and "
                         "llama-server render the same no-think prompt); ctl passes --no-think")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds without progress before a request fails")
    ap.add_argument("--json", action="store_true", help="print only the JSON summary line")
    ap.add_argument("--records", default="", help="write one JSON line per request to this file")
    ap.add_argument("--plan", type=int, default=0, help="print the first N planned requests and exit")
    args = ap.parse_args()
    try:
        args.max_tokens = parse_range(args.max_tokens)
    except ValueError:
        ap.error("--max-tokens: N or LO:HI with 1 <= LO <= HI")
    if args.streams < 1:
        ap.error("--streams must be >= 1")
    if args.plan:
        for kind, msgs, mt, seed in plan(args, args.plan):
            print(json.dumps({"kind": kind, "max_tokens": mt, "seed": seed, "messages": msgs}))
        return 0
    if args.mode == "ctl" and not args.connect:
        ap.error("--mode ctl needs --connect ENDPOINT")
    recs, t0, t1 = asyncio.run(run(args))
    s = summarize(args, recs, t0, t1)
    if args.records:
        with open(args.records, "w") as f:
            for r in sorted(recs, key=lambda r: r.i):
                f.write(json.dumps(r.as_dict(t0)) + "\n")
    if not args.json:
        report(s, sys.stdout)
        for r in recs:
            if r.error:
                print("  error (request %d): %s" % (r.i, r.error))
                break
    print(json.dumps({"load": s}))
    return 0 if s["errors"] == 0 and s["requests"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
