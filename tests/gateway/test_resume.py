#!/usr/bin/env python3
"""A gateway over a pool of daemons, and streams that survive their daemon (issue 48).

Two real daemons (BUILD/bin/smollm3d on the fixture model) behind one gateway
(--daemon twice): /health and /metrics show each daemon's state; a request's
daemon is the rendezvous choice of its prompt (the same prompt, the same
daemon); then 24 concurrent streams (greedy and seeded; json_schema, a forced
tool call, thinking with a budget, n = 2 among them) are generated once as
twins, and again while one daemon is killed with SIGKILL mid-answer: every
stream completes, byte for byte its twin (and the same usage); /metrics
shows the dead daemon down.  The same kill again with the streams through
nginx running the shipped site (deploy/nginx/smollm3.conf, as tests/soak
starts it).  Last, a
gateway over one daemon that is killed and started again on the same socket,
as systemd's Restart= would: its streams pause and then resume there.  And a
conversation (session_id) on two daemons sharing a spill directory: its turn,
killed mid-answer, resumes on the other daemon, which reads the history's KV
back from the spill (not recomputed), byte for byte its twin.

Before them, the daemon's half alone (GenerateRequest.resume_tokens, over
ZeroMQ): a request sent again with the first k tokens of its answer streams
exactly the events its first run streamed after them, for greedy and seeded
sampling with penalties, json_schema, a forced tool call, thinking with a
budget, logprobs, and n = 2 (resume_counts: each choice cut elsewhere, one
at its end).

Prints "ok NAME" / "FAIL NAME: why" per test and "N passed, N failed" last.
"""
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import check, run_test  # noqa: E402

N_STREAMS = 12                  # the SIGTERM and restart mixes
N_KILL = 24                     # the kill -9 mix (issue 48): the 12 above and 12 more, n = 2 among them
GAPS = {}                       # stream index -> the longest silence its client saw, s
MAX_TOKENS = 160


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def body(i):
    b = {"messages": [{"role": "user", "content": "Story %d: tell me about the sea, the ships and %s." % (i, "x" * i)}],
         "max_tokens": MAX_TOKENS, "stream": True, "stream_options": {"include_usage": True}}
    if i % 2:
        b.update(temperature=0.9, top_p=0.95, seed=1000 + i)       # seeded sampling
    else:
        b.update(temperature=0)                                     # greedy
    if i >= 12 and i % 3 == 0:  # n = 2 (12: thinking, 15: seeded, 18: json_schema, 21: seeded thinking)
        b["n"] = 2
    if i % 8 == 2:      # structured output
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "thing", "schema": {
            "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name", "n"]}}}
    elif i % 8 == 3:    # a forced tool call
        b.update(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    elif i % 8 in (4, 5):   # thinking, with a budget
        b["reasoning_effort"] = "low"
    else:
        b["chat_template_kwargs"] = {"enable_thinking": False}
    return b


def stream(gw, b, progress=None, idx=0):
    """The raw SSE bytes of one stream; progress[idx] counts the bytes as they come."""
    c = gw.conn(120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(b), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200, "status %d" % r.status)
    out = b""
    last, gap = None, 0.0
    while True:
        x = r.read1(65536)
        if not x:
            break
        now = time.monotonic()
        if last is not None:
            gap = max(gap, now - last)
        last = now
        out += x
        if progress is not None:
            progress[idx] = len(out)
    c.close()
    GAPS[idx] = gap
    return out


def answer(raw):
    """(text, finish_reason, usage) of an OpenAI stream; fails on an error event."""
    chunks = tg.openai_chunks(raw)
    texts, fins, finish, usage = {}, {}, None, None     # n > 1: each choice's own (their chunks interleave)
    for ch in chunks:
        check("error" not in ch, "error event: %r" % ch)
        for c in ch.get("choices", []):
            d = c.get("delta", {})
            i = c.get("index", 0)
            text = texts.get(i, "")
            text += d.get("content") or ""
            text += "<r>%s</r>" % d["reasoning_content"] if d.get("reasoning_content") else ""
            for tc in d.get("tool_calls") or []:       # ids name their request: left out
                f = tc.get("function", {})
                text += "<call %s>%s%s" % (tc.get("index"), f.get("name") or "", f.get("arguments") or "")
            if c.get("finish_reason"):
                fins[i] = c["finish_reason"]
            texts[i] = text
            finish = c.get("finish_reason") or finish
        if ch.get("usage"):
            usage = ch["usage"]
    if len(texts) > 1:
        return "".join("<choice %d>%s<finish %s>" % (i, texts[i], fins.get(i)) for i in sorted(texts)), finish, usage
    return texts.get(0, ""), finish, usage


def run_all(gw, n, during=None, which=None, max_tokens=None):
    """n concurrent streams (body(i) for i in which, default range(n); max_tokens instead of
    MAX_TOKENS); during(progress) runs while they do.  Their answers."""
    which = list(which) if which is not None else list(range(n))
    n = len(which)
    res, prog, errs = [None] * n, [0] * n, []

    def one(i):
        try:
            b = body(which[i])
            if max_tokens:
                b["max_tokens"] = max_tokens
            res[i] = stream(gw, b, prog, i)
        except Exception as e:  # noqa: BLE001
            errs.append("%d: %s" % (which[i], e))
    th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    if during:
        during(prog)
    for t in th:
        t.join(180)
    check(not errs, "streams failed: %s" % errs)
    return [answer(r) for r in res]


def metric(gw, name):
    st, _, b = gw.request("GET", "/metrics")
    m = re.search(r"^%s (\S+)$" % re.escape(name), b.decode(), re.M)
    return float(m.group(1)) if m else None


def daemon_of(st, b):
    """The pool daemon (index in st.ds) the gateway routes b's prompt to: a one-token probe with it."""
    before = [d.stats()["requests_total"] for d in st.ds]
    s, _ = tg.post_json(st.gw, "/v1/chat/completions", {"messages": b["messages"], "max_tokens": 1})
    check(s == 200, "probe status %d" % s)
    delta = [d.stats()["requests_total"] - x for d, x in zip(st.ds, before)]
    return delta.index(max(delta))


def n2_victim(st):
    """The daemon to kill: the one most n = 2 streams of the kill mix go to (so that one is resumed)."""
    on = [0, 0]
    for i in range(N_KILL):
        if body(i).get("n", 1) > 1:
            on[daemon_of(st, body(i))] += 1
    return st.ds[0] if on[0] >= on[1] else st.ds[1], on


def n2_resumed(gw):
    """The token counts of the n = 2 streams the gateway resumed (its log)."""
    with open(gw.log_path, "rb") as f:
        return [int(m.group(1)) for m in re.finditer(rb"resumed on \S+ after (\d+) tokens \(n = 2\)", f.read())]


def wait_some_bytes(prog, at_least=1500, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sum(1 for p in prog if p >= at_least) < len(prog) // 2:
        time.sleep(0.005)


# ---- the daemon: resume_tokens -------------------------------------------------------

TOOLS = json.dumps([{"type": "function", "function": {
    "name": "get_weather", "description": "weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
                     "required": ["name", "n"]})

# name -> (GenerateRequest fields, sampling fields, chat fields)
DAEMON_CASES = {
    "greedy": ({"enable_thinking": False}, {"temperature": 0.0}, {}),
    "seeded_penalties": ({"enable_thinking": False, "stop": ["zq#"]},
                         {"temperature": 0.9, "top_p": 0.9, "top_k": 40, "seed": 7, "repetition_penalty": 1.1,
                          "presence_penalty": 0.4, "frequency_penalty": 0.2}, {}),
    "json_schema": ({"enable_thinking": False, "json_schema": SCHEMA}, {"temperature": 0.8, "seed": 11}, {}),
    "tool_call": ({"enable_thinking": False, "tool_choice": "get_weather"}, {"temperature": 0.7, "seed": 5},
                  {"tools_json": TOOLS}),
    "thinking_budget": ({"enable_thinking": True, "thinking_budget": 12}, {"temperature": 0.8, "seed": 3}, {}),
    "logprobs": ({"enable_thinking": False, "logprobs": True, "top_logprobs": 2}, {"temperature": 0.6, "seed": 9}, {}),
    # n = 2: resume_counts (field 52) says which of resume_tokens are each choice's
    "n2_seeded": ({"enable_thinking": False, "n": 2}, {"temperature": 0.9, "seed": 21}, {}),
    "n2_thinking_schema": ({"enable_thinking": True, "thinking_budget": 10, "n": 2, "json_schema": SCHEMA},
                           {"temperature": 0.8, "seed": 4}, {}),
}


class DaemonLink:
    def __init__(self, endpoint, pb):
        import zmq
        self.pb, self.ctx = pb, zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.rid = 5000

    def close(self):
        self.sock.close()
        self.ctx.term()

    def run(self, case, resume=(), counts=()):
        """The events of one request of DAEMON_CASES[case] (resume_tokens: resume, resume_counts: counts),
        Started left out; n > 1: each event's choice last."""
        pb = self.pb
        gen_f, samp_f, chat_f = DAEMON_CASES[case]
        self.rid += 1
        req = pb.Request(protocol_version=1, request_id=self.rid)
        g = req.generate
        g.max_tokens = 48
        for k, v in gen_f.items():
            if k == "stop":
                g.stop.extend(v)
            else:
                setattr(g, k, v)
        for k, v in samp_f.items():
            setattr(g.sampling, k, v)
        m = g.chat.messages.add()
        m.role, m.content = "user", "Case %s: what is the weather like in Paris?" % case
        for k, v in chat_f.items():
            setattr(g.chat, k, v)
        g.resume_tokens.extend(resume)
        g.resume_counts.extend(counts)
        n = max(1, gen_f.get("n", 1))
        self.sock.send(req.SerializeToString())
        evs, dones = [], 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.sock.poll(1000):
                continue
            ev = pb.Event()
            ev.ParseFromString(self.sock.recv())
            if ev.request_id != self.rid:
                continue
            kind = ev.WhichOneof("kind")
            check(kind != "error", "%s: error %s" % (case, ev.error.message))
            if kind == "token":
                t = ev.token
                evs.append(("t", t.text, t.token_id, t.channel,
                            round(t.logprob, 5) if t.HasField("logprob") else None,
                            tuple(x.token_id for x in t.top_logprobs)) + ((t.choice,) if n > 1 else ()))
            elif kind == "tool_call":
                evs.append(("c", ev.tool_call.index, ev.tool_call.name, ev.tool_call.arguments_json))
            elif kind == "done":
                u = ev.done.usage
                evs.append(("d", ev.done.finish_reason, u.completion_tokens, u.reasoning_tokens) +
                           ((u.choice,) if n > 1 else ()))
                dones += 1
                if dones == n:
                    return evs
        raise AssertionError("%s: no Done" % case)


def daemon_resume_n(z, case):
    """n = 2: the choices cut after k0 and k1 of their tokens (one of them cut at its end: ended already)
    and sent again with them: each choice's own events after its cut, the same."""
    full = z.run(case)
    per = {c: [e for e in full if e[-1] == c and e[0] in "td"] for c in (0, 1)}
    toks = {c: [e[2] for e in per[c] if e[0] == "t" and e[2] >= 0] for c in (0, 1)}
    check(all(toks[c] for c in (0, 1)), "%s: a choice streamed no tokens: %r" % (case, full[-4:]))
    if "thinking" in case:
        check(all(e[3] > 0 for e in full if e[0] == "d"), "%s: no reasoning" % case)
    n0, n1 = len(toks[0]), len(toks[1])
    for k0, k1 in ((n0 // 2, n1 // 3), (1, n1 - 1), (n0, n1 // 2), (0, n1 // 2)):
        got = z.run(case, toks[0][:k0] + toks[1][:k1], [k0, k1])
        for c, k in ((0, k0), (1, k1)):
            starts = [i for i, e in enumerate(per[c]) if e[0] == "t" and e[2] >= 0]
            want = per[c][starts[k]:] if k < len(starts) else per[c][-1:]
            mine = [e for e in got if e[-1] == c and e[0] in "td"]
            check(mine == want, "%s choice %d resumed after %d of %d tokens (the other after %d):\n want %r\n got  %r"
                  % (case, c, k, len(starts), k1 if c == 0 else k0, want[:6], mine[:6]))


def t_daemon_resume_tokens(st):
    """Each case, cut after k tokens and sent again with them: the same events after the cut."""
    import smollm3_pb2 as pb
    z = DaemonLink(st.ds[0].endpoint, pb)
    try:
        for case in DAEMON_CASES:
            if DAEMON_CASES[case][0].get("n", 1) > 1:
                daemon_resume_n(z, case)
                continue
            full = z.run(case)
            starts = [i for i, e in enumerate(full) if e[0] == "t" and e[2] >= 0]
            toks = [full[i][2] for i in starts]
            if case == "tool_call":
                check(any(e[0] == "c" for e in full), "tool_call: no call: %r" % full[-3:])
            if case == "thinking_budget":
                check(full[-1][3] > 0, "thinking_budget: no reasoning")
            check(len(toks) == full[-1][2] or full[-1][1] != 1, "%s: %d token ids for %d tokens" %
                  (case, len(toks), full[-1][2]))
            for k in sorted({1, len(toks) // 3, len(toks) // 2, len(toks) - 1}):
                if k <= 0 or k >= len(toks):
                    continue
                got = z.run(case, toks[:k])
                want = full[starts[k]:]
                check(got == want, "%s resumed after %d of %d tokens:\n want %r\n got  %r" %
                      (case, k, len(toks), want[:6], got[:6]))
    finally:
        z.close()


def t_pool_health(st):
    # each daemon is "up" once its own Health reply came (the gateway is ready with the first)
    deadline = time.monotonic() + 15
    while True:
        s, _, b = st.gw.request("GET", "/health")
        h = json.loads(b)
        if [d["state"] for d in h.get("daemons", [])] == ["up", "up"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(s == 200 and [d["state"] for d in h["daemons"]] == ["up", "up"], "health: %r" % h)
    check([d["endpoint"] for d in h["daemons"]] == [d.endpoint for d in st.ds], "endpoints: %r" % h)
    _, _, m = st.gw.request("GET", "/metrics")
    for d in st.ds:
        check('smollm3_gateway_daemon_state{daemon="%s",state="up"} 1' % d.endpoint in m.decode(),
              "no up state for %s in /metrics" % d.endpoint)


def t_rendezvous(st):
    """The same prompt goes to the same daemon every time; different prompts spread over both."""
    def totals():
        return [d.stats()["requests_total"] for d in st.ds]
    before = totals()
    for _ in range(3):
        s, r = tg.post_json(st.gw, "/v1/chat/completions", tg.chat("always the same prompt", max_tokens=2))
        check(s == 200, "status %d" % s)
    delta = [a - b for a, b in zip(totals(), before)]
    check(sorted(delta) == [0, 3], "one prompt went to several daemons: %r" % delta)
    before = totals()
    for i in range(16):
        s, r = tg.post_json(st.gw, "/v1/chat/completions", tg.chat("prompt number %d" % i, max_tokens=2))
        check(s == 200, "status %d" % s)
    delta = [a - b for a, b in zip(totals(), before)]
    check(min(delta) >= 2, "16 prompts not spread over both daemons: %r" % delta)


def t_kill_resumes(st):
    """SIGKILL of one daemon mid-answer: every stream completes as its twin did without a kill."""
    t0 = time.monotonic()
    twins = run_all(st.gw, N_KILL)
    t_twins = time.monotonic() - t0
    check(sum(f == "length" for _, f, _ in twins) >= N_KILL // 2, "twins ended early: %r" % [f for _, f, _ in twins])
    check(any("<call" in t for t, _, _ in twins) and any("<r>" in t for t, _, _ in twins),
          "no tool call or no reasoning among the twins")
    resumed0 = metric(st.gw, "smollm3_gateway_streams_resumed_total")
    victim, on = n2_victim(st)
    n2_before = len(n2_resumed(st.gw))
    active = []

    def kill(prog):
        wait_some_bytes(prog)
        active.append([d.stats()["requests_active"] for d in st.ds])
        victim.kill()
        st.killed = victim
    got = run_all(st.gw, N_KILL, kill)
    resumed = metric(st.gw, "smollm3_gateway_streams_resumed_total") - resumed0
    check(resumed >= 1, "nothing was resumed (active per daemon at the kill: %r)" % active)
    n2 = n2_resumed(st.gw)[n2_before:]
    check(any(n > 0 for n in n2), "no n = 2 stream was resumed mid-answer (n = 2 streams per daemon %r; "
          "resumed after %r tokens)" % (on, n2))
    st.twins = twins
    for i, (a, b) in enumerate(zip(twins, got)):
        check(a[0] == b[0], "stream %d differs from its twin:\n twin %r\n got  %r" % (i, a[0], b[0]))
        check(a[1] == b[1], "stream %d finish %r, twin %r" % (i, b[1], a[1]))
        check(a[2]["completion_tokens"] == b[2]["completion_tokens"], "stream %d usage %r, twin %r" % (i, b[2], a[2]))
    s, _, b = st.gw.request("GET", "/health")
    states = sorted(d["state"] for d in json.loads(b)["daemons"])
    check(states == ["down", "up"], "health after the kill: %r" % states)
    _, _, m = st.gw.request("GET", "/metrics")
    for d in st.ds:
        want = "down" if d is victim else "up"
        for state in ("up", "draining", "down"):
            line = 'smollm3_gateway_daemon_state{daemon="%s",state="%s"} %d' % (d.endpoint, state, state == want)
            check(line in m.decode(), "/metrics after the kill has no %r" % line)
    g = sorted(GAPS[i] for i in range(N_KILL))
    print("  n = 2 streams resumed after %r tokens (both choices together)" % n2, flush=True)
    print("  %d streams, %d resumed; twins took %.2f s; the longest pause a client saw: median %.0f ms, max %.0f ms"
          % (N_KILL, resumed, t_twins, 1000 * g[len(g) // 2], 1000 * g[-1]), flush=True)


class Front:
    """nginx with the shipped site (deploy/nginx/smollm3.conf, as tests/soak starts it) in front of a gateway."""

    def __init__(self, st, gw):
        import argparse
        import types
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "soak"))
        import soak
        self.ns = types.SimpleNamespace(tmp=st.tmp, port=tg.free_port(), gw_port=gw.port, nginx=None,
                                        a=argparse.Namespace(no_rate_limit=True))  # 24 streams at once
        soak.Stack.start_nginx(self.ns)
        st.procs.append(self.ns.nginx)
        self.port = self.ns.port
        deadline = time.monotonic() + 20
        while True:
            check(self.ns.nginx.poll() is None, "nginx exited")
            try:
                c = self.conn(5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            check(time.monotonic() < deadline, "nginx never answered /health with 200")
            time.sleep(0.1)

    def conn(self, timeout=30):
        import http.client
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)


def t_nginx_kill(st):
    """The kill -9 again, the 24 streams through nginx (buffering off, as shipped): each its twin."""
    if getattr(st, "killed", None) and st.killed.proc.poll() is not None:
        st.killed.start()                       # the pool of two again
    deadline = time.monotonic() + 30
    while True:
        _, _, b = st.gw.request("GET", "/health")
        if [d["state"] for d in json.loads(b)["daemons"]] == ["up", "up"]:
            break
        check(time.monotonic() < deadline, "the pool is not up again: %r" % b)
        time.sleep(0.1)
    front = Front(st, st.gw)
    twins = getattr(st, "twins", None) or run_all(st.gw, N_KILL)
    resumed0 = metric(st.gw, "smollm3_gateway_streams_resumed_total")
    victim, on = n2_victim(st)
    n2_before = len(n2_resumed(st.gw))

    def kill(prog):
        wait_some_bytes(prog)
        victim.kill()
        st.killed = victim
    got = run_all(front, N_KILL, kill)
    resumed = metric(st.gw, "smollm3_gateway_streams_resumed_total") - resumed0
    check(resumed >= 1, "nothing was resumed behind nginx")
    check(any(n > 0 for n in n2_resumed(st.gw)[n2_before:]), "no n = 2 stream was resumed mid-answer behind nginx")
    for i, (a, b) in enumerate(zip(twins, got)):
        check(a[0] == b[0], "stream %d through nginx differs from its twin:\n twin %r\n got  %r" % (i, a[0], b[0]))
        check(a[1] == b[1] and a[2]["completion_tokens"] == b[2]["completion_tokens"],
              "stream %d through nginx: finish %r usage %r, twin %r %r" % (i, b[1], b[2], a[1], a[2]))
    g = sorted(GAPS[i] for i in range(N_KILL))
    print("  %d streams through nginx, %d resumed; the longest pause a client saw: median %.0f ms, max %.0f ms"
          % (N_KILL, resumed, 1000 * g[len(g) // 2], 1000 * g[-1]), flush=True)


def handovers(gw):
    """smollm3_gateway_handovers_total by result (make-before-break)."""
    _, _, b = gw.request("GET", "/metrics")
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^smollm3_gateway_handovers_total\{result="(\w+)"\} (\S+)$', b.decode(), re.M)}


SIGTERM_MIX = list(range(N_STREAMS)) + [12, 15]     # the 12 and two n = 2 (thinking; seeded)
SIGTERM_TOKENS = 400    # hundreds left at the signal: the streams outlast the hand-over, not racing it


def t_sigterm_handover(st):
    """SIGTERM to one daemon of the pool (systemctl stop/restart): its streams are handed over
    make-before-break (it generates on while the gateway warms the other daemon up with their tokens so
    far, in rounds, then moves each at one of its tokens: an n = 2 stream among them), each its twin byte
    for byte with its usage, and the daemon exits once they have moved, without waiting for them to end."""
    twins = run_all(st.gw, 0, which=SIGTERM_MIX, max_tokens=SIGTERM_TOKENS)
    resumed0 = metric(st.gw, "smollm3_gateway_streams_resumed_total")
    ho0 = handovers(st.gw)
    on = [0, 0]                     # the victim: the daemon of the n = 2 streams (the rendezvous is fixed)
    for i in SIGTERM_MIX:
        if body(i).get("n", 1) > 1:
            on[daemon_of(st, body(i))] += 1
    victim = st.ds[0] if on[0] >= on[1] else st.ds[1]
    log0 = os.path.getsize(st.gw.log_path)
    took = []

    def term(prog):
        wait_some_bytes(prog)
        a = [d.stats()["requests_active"] for d in st.ds]
        t = time.monotonic()
        victim.stop()               # SIGTERM and wait for its exit (drain_grace_ms, handover_grace: 10 s)
        took.append((time.monotonic() - t, a, victim))
    got = run_all(st.gw, 0, term, which=SIGTERM_MIX, max_tokens=SIGTERM_TOKENS)
    resumed = metric(st.gw, "smollm3_gateway_streams_resumed_total") - resumed0
    ho = {k: v - ho0.get(k, 0) for k, v in handovers(st.gw).items()}
    check(resumed >= 1, "nothing was handed over (active per daemon at the SIGTERM: %r)" % (took[0][1],))
    check(took[0][0] < 5, "the daemon took %.1f s to exit: it waited for its streams" % took[0][0])
    for i, (a, b) in enumerate(zip(twins, got)):
        check(a[0] == b[0], "stream %d differs from its twin:\n twin %r\n got  %r" % (SIGTERM_MIX[i], a[0], b[0]))
        check(a[1] == b[1], "stream %d finish %r, twin %r" % (SIGTERM_MIX[i], b[1], a[1]))
        check(all(a[2][k] == b[2][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")),
              "stream %d usage %r, twin %r" % (SIGTERM_MIX[i], b[2], a[2]))
    # make-before-break: each stream was moved at one of the old daemon's tokens once the other one was
    # warmed up (or, its grace over first, taken over)
    check(ho.get("started", 0) >= 1 and ho.get("moved", 0) >= 1,
          "no make-before-break move: %r (resumed %d)" % (ho, resumed))
    check(ho.get("moved", 0) + ho.get("taken_over", 0) == resumed,
          "streams resumed %d, of them make-before-break %r" % (resumed, ho))
    with open(st.gw.log_path, "rb") as f:
        f.seek(log0)
        log = f.read()
    moves = {int(r): (int(n), int(k)) for r, n, k in
             re.findall(rb"request (\d+) resumed on \S+ after (\d+) tokens \(n = 2\), make-before-break: moved "
                        rb"after \d+ warm-up rounds?, (\d+) tokens? streamed during the last", log)}
    check(any(n > 0 for n, _ in moves.values()), "no n = 2 stream was moved mid-answer make-before-break (%r)" % moves)
    # each n = 2 stream was warmed up there choice by choice, in rounds (each an n = 1 run of the prompt and
    # that choice's tokens so far): the moved run found each choice's tokens in the cache
    # (Usage.resume_cached_tokens, which the gateway logs at each choice's end) but for the few (k a
    # choice at most) streamed during the last round, and the last one, which is prefilled for its logits
    cached = {}
    for r, c, k in re.findall(rb"request (\d+) choice (\d+): the resumed run found (\d+) of its replayed tokens "
                              rb"cached \(n = 2\)", log):
        cached.setdefault(int(r), {})[int(c)] = int(k)
    for r, (n, k) in moves.items():
        got = cached.get(r, {})
        check(len(got) == 2 and sum(got.values()) >= n - 2 * (k + 1),
              "n = 2 stream %d, moved after %d tokens (%d a choice streamed during the last round): its choices' "
              "replayed tokens cached %r" % (r, n, k, got))
    took[0][2].start()
    st.gw.wait_ready(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        _, _, b = st.gw.request("GET", "/health")
        if [d["state"] for d in json.loads(b)["daemons"]] == ["up", "up"]:
            break
        time.sleep(0.1)
    g = sorted(GAPS[i] for i in range(len(SIGTERM_MIX)))
    print("  %d streams, %d handed over (%r); the daemon exited %.2f s after SIGTERM; the longest pause a client "
          "saw: median %.0f ms, max %.0f ms; n = 2 moved after tokens, replayed tokens cached %r"
          % (len(SIGTERM_MIX), resumed, ho, took[0][0], 1000 * g[len(g) // 2], 1000 * g[-1],
             [(n, cached.get(r)) for r, (n, _) in moves.items()]), flush=True)


def t_restart_resumes(st):
    """One daemon, killed and started again on its socket: the streams pause, then resume there."""
    d = st.solo
    twins = run_all(st.gw1, N_STREAMS)
    resumed0 = metric(st.gw1, "smollm3_gateway_streams_resumed_total")
    pause = []

    def restart(prog):
        wait_some_bytes(prog)
        d.kill()
        t = time.monotonic()
        time.sleep(0.5)
        before = list(prog)
        d.start()
        pause.append((time.monotonic() - t, before))
    got = run_all(st.gw1, N_STREAMS, restart)
    resumed = metric(st.gw1, "smollm3_gateway_streams_resumed_total") - resumed0
    check(resumed >= 1, "nothing was resumed")
    for i, (a, b) in enumerate(zip(twins, got)):
        check(a[0] == b[0], "stream %d differs from its twin:\n twin %r\n got  %r" % (i, a[0], b[0]))
        check(a[2]["completion_tokens"] == b[2]["completion_tokens"], "stream %d usage %r, twin %r" % (i, b[2], a[2]))
    print("  %d streams, %d resumed after a restart of %.2f s" % (N_STREAMS, resumed, pause[0][0]), flush=True)
    # the same with SIGTERM (systemctl restart): handed back at once, held, resumed on the new process
    resumed0 = metric(st.gw1, "smollm3_gateway_streams_resumed_total")

    def sigterm_restart(prog):
        wait_some_bytes(prog)
        t = time.monotonic()
        d.stop()
        d.start()
        pause.append(time.monotonic() - t)
    got = run_all(st.gw1, N_STREAMS, sigterm_restart)
    resumed = metric(st.gw1, "smollm3_gateway_streams_resumed_total") - resumed0
    check(resumed >= 1, "nothing was resumed after SIGTERM + start")
    check(pause[1] < 8, "stop + start took %.1f s: the daemon waited for its streams" % pause[1])
    for i, (a, b) in enumerate(zip(twins, got)):
        check(a[0] == b[0], "stream %d differs from its twin after SIGTERM:\n twin %r\n got  %r" % (i, a[0], b[0]))
    print("  %d streams, %d resumed after SIGTERM + start (%.2f s)" % (N_STREAMS, resumed, pause[1]), flush=True)


def t_config_list(st):
    """config: daemon = A, B is the pool of two."""
    conf = os.path.join(st.tmp, "gw.conf")
    with open(conf, "w") as f:
        f.write("[gateway]\ndaemon = %s, %s\nresume_timeout = 5\n" % (st.ds[0].endpoint, st.ds[1].endpoint))
    port = tg.free_port()
    import subprocess
    p = subprocess.Popen([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:%d" % port,
                          "--config", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        h = None
        while time.monotonic() < deadline:
            try:
                import http.client
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                h = json.loads(c.getresponse().read())
                c.close()
                if len(h.get("daemons", [])) == 2:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        check(h and [d["endpoint"] for d in h["daemons"]] == [st.ds[0].endpoint, st.ds[1].endpoint],
              "config list not the pool: %r" % h)
    finally:
        p.terminate()
        p.wait(10)


class Router:
    """A scripted daemon (pyzmq ROUTER): answers Health, records each Generate and streams the given
    tokens for it; stop() closes the socket as a dying daemon's would."""

    def __init__(self, endpoint, pb, tokens, done=False):
        import zmq
        self.pb, self.tokens, self.done, self.gens = pb, tokens, done, []
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.running = True
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def send(self, ident, ev):
        self.sock.send_multipart([ident, ev.SerializeToString()])

    def loop(self):
        pb = self.pb
        while self.running:
            if not self.sock.poll(50):
                continue
            ident, frame = self.sock.recv_multipart()
            req = pb.Request()
            req.ParseFromString(frame)
            kind = req.WhichOneof("kind")
            if kind == "health":
                self.send(ident, pb.Event(request_id=req.request_id, health=pb.HealthReply(
                    ready=True, model="fake", status="serving")))
            elif kind == "generate":
                self.gens.append(req)
                self.send(ident, pb.Event(request_id=req.request_id, started=pb.Started(prompt_tokens=7)))
                for tid, text in self.tokens:
                    self.send(ident, pb.Event(request_id=req.request_id, token=pb.Token(text=text, token_id=tid)))
                if self.done:
                    self.send(ident, pb.Event(request_id=req.request_id, done=pb.Done(
                        finish_reason=pb.FINISH_REASON_LENGTH, usage=pb.Usage(prompt_tokens=9, completion_tokens=5))))

    def stop(self):
        self.running = False
        self.th.join(5)
        self.sock.close()
        self.ctx.term()


def t_resend(st):
    """What the gateway sends again: the same request id and seed (one it chose: the request had none),
    resume_tokens = the ids it streamed, handover set; the client gets each byte once, the first
    daemon's prompt numbers and the last one's completion count."""
    import smollm3_pb2 as pb
    sock = os.path.join(st.tmp, "fake.sock")
    ep = "ipc://" + sock
    first = Router(ep, pb, [(11, "a"), (12, "b"), (-1, "+"), (13, "")])
    gw = tg.Gateway.__new__(tg.Gateway)
    st.extra_gws.append(gw)
    gw.__init__(ep, st.tmp)
    res = {}

    def client():
        res["raw"] = stream(gw, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True,
                                 "temperature": 0.8, "stream_options": {"include_usage": True}})
    th = threading.Thread(target=client)
    th.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not first.gens:
        time.sleep(0.05)
    time.sleep(0.5)                 # its tokens reached the gateway
    first.stop()
    os.unlink(sock)
    time.sleep(0.3)
    second = Router(ep, pb, [(14, "c"), (15, "d")], done=True)
    th.join(30)
    second.stop()
    check(len(first.gens) == 1 and len(second.gens) == 1, "generates: %d then %d" % (len(first.gens), len(second.gens)))
    a, b = first.gens[0], second.gens[0]
    check(a.generate.sampling.HasField("seed"), "the gateway sent no seed for a request without one")
    check(b.request_id == a.request_id and b.generate.sampling.seed == a.generate.sampling.seed,
          "sent again under another id or seed")
    check(list(b.generate.resume_tokens) == [11, 12, 13] and not a.generate.resume_tokens,
          "resume_tokens %r" % list(b.generate.resume_tokens))
    check(a.generate.handover and b.generate.handover, "handover not set")
    text, finish, usage = answer(res["raw"])
    check(text == "ab+cd" and finish == "length", "the client got %r (%s)" % (text, finish))
    check(usage["prompt_tokens"] == 7 and usage["completion_tokens"] == 5, "usage %r" % usage)


class Scripted:
    """A daemon the test drives (pyzmq ROUTER): answers Health, records each Generate and Cancel, and
    sends what emit() is given to the client of the last Generate (of an id: the warm-up's or the
    run's)."""

    def __init__(self, endpoint, pb):
        import queue
        import zmq
        self.pb, self.gens, self.cancels, self.ident = pb, [], [], None
        self.out = queue.Queue()
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.running = True
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def emit(self, rid, **kind):
        self.out.put(self.pb.Event(request_id=rid, **kind))

    def loop(self):
        pb = self.pb
        while self.running:
            while not self.out.empty():
                self.sock.send_multipart([self.ident, self.out.get().SerializeToString()])
            if not self.sock.poll(10):
                continue
            ident, frame = self.sock.recv_multipart()
            req = pb.Request()
            req.ParseFromString(frame)
            kind = req.WhichOneof("kind")
            if kind == "health":
                self.sock.send_multipart([ident, pb.Event(request_id=req.request_id, health=pb.HealthReply(
                    ready=True, model="fake", status="serving")).SerializeToString()])
            elif kind == "generate":
                self.ident = ident
                self.gens.append(req)
            elif kind == "cancel":
                self.cancels.append(req.cancel.target_request_id)

    def stop(self):
        self.running = False
        self.th.join(5)
        self.sock.close()
        self.ctx.term()


def wait_for(cond, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        check(time.monotonic() < deadline, "timed out waiting for %s" % what)
        time.sleep(0.01)


def scripted_pair(st, tag, max_tokens):
    """Two scripted daemons behind a pool gateway, both up, and a client streaming one greedy chat
    completion of max_tokens through it (its bytes in res["raw"], its thread res["th"]) once the
    first Generate reached one of them; got(piece) waits for a content piece at the client."""
    import smollm3_pb2 as pb
    eps = ["ipc://" + os.path.join(st.tmp, "%s%d.sock" % (tag, i)) for i in range(2)]
    ds = [Scripted(ep, pb) for ep in eps]
    gw = tg.Gateway.__new__(tg.Gateway)
    st.extra_gws.append(gw)
    gw.__init__(eps[0], st.tmp, extra=["--daemon", eps[1]])
    res = {"raw": b""}
    try:
        wait_for(lambda: [d["state"] for d in json.loads(gw.request("GET", "/health")[2])["daemons"]] == ["up"] * 2,
                 "both daemons up")

        def client():
            c = gw.conn(60)
            c.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"}, body=json.dumps(
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
                 "temperature": 0, "stream_options": {"include_usage": True}}))
            r = c.getresponse()
            while True:
                x = r.read1(65536)
                if not x:
                    break
                res["raw"] += x
            c.close()
        res["th"] = threading.Thread(target=client)
        res["th"].start()
        wait_for(lambda: ds[0].gens or ds[1].gens, "the first generate")
    except BaseException:
        for d in ds:
            d.stop()
        raise

    def got(piece):             # the client has it
        return lambda: ('"content":"%s"' % piece).encode() in res["raw"]
    return ds, gw, res, got


def finish_run(pb, d, rid, text, at):
    """Scripted daemon d runs request rid on from its at-th token to the end: Started, a token a letter
    of text (token i's id is i), Done of the length with usage counting them all."""
    d.emit(rid, started=pb.Started(prompt_tokens=7))
    for t in range(at + 1, len(text) + 1):
        d.emit(rid, token=pb.Token(text=text[t - 1], token_id=t))
    d.emit(rid, done=pb.Done(finish_reason=pb.FINISH_REASON_LENGTH, usage=pb.Usage(
        prompt_tokens=7, completion_tokens=len(text))))


def t_handover_rounds(st):
    """Make-before-break, scripted: warm-up rounds, then the move.  A warm-up is background work
    (GenerateRequest.background: small prompt chunks there), the move is not.  While the first warm-up prefills (a cold
    cache: the whole answer), the old run streams more than a few tokens (GW_HO_LAG, 4) and the round takes
    longer than GW_HO_ROUND_S (0.1 s); so the next round is another warm-up with every token sent by then
    (the other daemon prefills only what came since), and so on, each cancelled at its first token and
    ended at its Done; once a round's lag is small, the old run is cancelled at its next token (not sent)
    and the stream moves: the plain resume, its request id, every token the client had.  The client gets each byte once, the first daemon's prompt numbers and the new run's usage."""
    import smollm3_pb2 as pb
    ds, gw, res, got = scripted_pair(st, "hr", 24)
    letters = "abcdefghijklmnopqrstuvwx"
    try:
        old, new = (ds[0], ds[1]) if ds[0].gens else (ds[1], ds[0])
        rid = old.gens[0].request_id
        check(old.gens[0].generate.handover and old.gens[0].generate.handover_overlap, "no make-before-break asked")
        sent = [0]

        def old_tokens(k):          # the old run streams k more tokens
            for _ in range(k):
                sent[0] += 1
                old.emit(rid, token=pb.Token(text=letters[sent[0] - 1], token_id=sent[0]))
            wait_for(got(letters[sent[0] - 1]), letters[sent[0] - 1])
        old.emit(rid, started=pb.Started(prompt_tokens=7))
        old_tokens(3)
        old.emit(rid, handover=pb.Handover(grace_ms=10000))
        # (tokens streamed while the round prefills): 9 and 6 > 4, another round; 2, done
        for rnd, lag in enumerate((9, 6, 2)):
            wait_for(lambda: len(new.gens) == rnd + 1, "warm-up round %d" % (rnd + 1))
            warm = new.gens[rnd]
            check(warm.request_id != rid and list(warm.generate.resume_tokens) == list(range(1, sent[0] + 1)) and
                  not warm.generate.handover and warm.generate.background, "round %d: id %d, resume %r (sent %d)"
                  % (rnd + 1, warm.request_id, list(warm.generate.resume_tokens), sent[0]))
            old_tokens(lag)
            if lag > 4:
                time.sleep(0.15)    # a round that took longer than GW_HO_ROUND_S (0.1 s): the move would cost as much
            new.emit(warm.request_id, token=pb.Token(text="?", token_id=999))   # its first token: prefilled
            wait_for(lambda: warm.request_id in new.cancels, "round %d's warm-up cancelled at its first token" % (rnd + 1))
            new.emit(warm.request_id, done=pb.Done(finish_reason=pb.FINISH_REASON_CANCELLED))
            if lag > 4:
                wait_for(lambda: len(new.gens) == rnd + 2, "round %d after %d tokens" % (rnd + 2, lag))
        time.sleep(0.2)
        check(len(new.gens) == 3 and not old.cancels, "after a round of 2 tokens: %d requests there, old cancelled %r"
              % (len(new.gens), old.cancels))
        at = sent[0]
        old.emit(rid, token=pb.Token(text=letters[at], token_id=at + 1))    # the move, at this token: not sent
        wait_for(lambda: rid in old.cancels, "the old run's cancel")
        wait_for(lambda: len(new.gens) == 4, "the stream moved")
        run = new.gens[3]
        check(run.request_id == rid and list(run.generate.resume_tokens) == list(range(1, at + 1)) and
              not run.generate.background,
              "moved: id %d (%d), resume %r (the client had %d)" % (run.request_id, rid,
                                                                   list(run.generate.resume_tokens), at))
        old.emit(rid, token=pb.Token(text="!", token_id=99))        # sent before the cancel: dropped
        old.emit(rid, done=pb.Done(finish_reason=pb.FINISH_REASON_CANCELLED))
        finish_run(pb, new, rid, letters, at)
        res["th"].join(20)
    finally:
        for d in ds:
            d.stop()
    text, finish, usage = answer(res["raw"])
    check(text == letters and finish == "length", "the client got %r (%s)" % (text, finish))
    check(usage["prompt_tokens"] == 7 and usage["completion_tokens"] == 24, "usage %r" % usage)
    ho = handovers(gw)
    check(ho == {"started": 1, "moved": 1, "taken_over": 0}, "hand-overs %r" % ho)
    check(metric(gw, "smollm3_gateway_handover_rounds_total") == 3,
          "rounds %r" % metric(gw, "smollm3_gateway_handover_rounds_total"))
    gw.stop()


def t_handover_fallbacks(st):
    """Make-before-break, scripted, when it does not go to plan: (1) the warm-up is refused (that daemon
    has no room): the old run goes on, the hand-over starts again (its second try), and that one moves the
    stream; (2) the old run's grace ends (ERROR_SHUTTING_DOWN) during the rounds: the warm-up is cancelled
    and the stream resumed there at once with every token the client had; (3) the rounds done, the old
    run's grace ends before its next token: the stream is taken over the same way (a warm-up has ended
    at its Done, not its first token: before, the daemon would not offer its KV).  Each client gets each
    byte once."""
    import smollm3_pb2 as pb
    for case in ("refused", "stopped", "taken"):
        ds, gw, res, got = scripted_pair(st, "hf" + case[0], 9)
        try:
            old, new = (ds[0], ds[1]) if ds[0].gens else (ds[1], ds[0])
            rid = old.gens[0].request_id
            old.emit(rid, started=pb.Started(prompt_tokens=7))
            for tid, text in ((1, "a"), (2, "b"), (3, "c")):
                old.emit(rid, token=pb.Token(text=text, token_id=tid))
            old.emit(rid, handover=pb.Handover(grace_ms=10000))
            wait_for(lambda: len(new.gens) == 1, "the warm-up")
            warm = new.gens[0]
            if case == "refused":
                new.emit(warm.request_id, error=pb.Error(code=pb.ERROR_BUSY, message="no room"))
                old.emit(rid, token=pb.Token(text="d", token_id=4))
                wait_for(got("d"), "d")
                wait_for(lambda: len(new.gens) == 2, "the hand-over again")
                warm = new.gens[1]
                check(warm.request_id != rid and list(warm.generate.resume_tokens) in ([1, 2, 3], [1, 2, 3, 4]),
                      "second warm-up: resume %r" % list(warm.generate.resume_tokens))
                new.emit(warm.request_id, token=pb.Token(text="?", token_id=999))
                wait_for(lambda: warm.request_id in new.cancels, "the second warm-up's cancel")
                new.emit(warm.request_id, done=pb.Done(finish_reason=pb.FINISH_REASON_CANCELLED))
                time.sleep(0.1)
                old.emit(rid, token=pb.Token(text="e", token_id=5))     # the move, at this token: not sent
                resume = [1, 2, 3, 4]
            elif case == "stopped":
                old.emit(rid, token=pb.Token(text="d", token_id=4))
                wait_for(got("d"), "d")
                old.emit(rid, error=pb.Error(code=pb.ERROR_SHUTTING_DOWN, message="handed over"))
                wait_for(lambda: warm.request_id in new.cancels, "the warm-up's cancel")
                resume = [1, 2, 3, 4]
            else:
                new.emit(warm.request_id, token=pb.Token(text="?", token_id=999))
                wait_for(lambda: warm.request_id in new.cancels, "the warm-up's cancel")
                old.emit(rid, token=pb.Token(text="d", token_id=4))     # (its Done not yet come: no move)
                wait_for(got("d"), "d")
                new.emit(warm.request_id, done=pb.Done(finish_reason=pb.FINISH_REASON_CANCELLED))
                time.sleep(0.1)
                old.emit(rid, error=pb.Error(code=pb.ERROR_SHUTTING_DOWN, message="handed over"))
                resume = [1, 2, 3, 4]
            wait_for(lambda: any(g.request_id == rid for g in new.gens), "the stream on the other daemon")
            run = [g for g in new.gens if g.request_id == rid][0]
            check(list(run.generate.resume_tokens) == resume, "%s: resumed with %r" % (case, list(run.generate.resume_tokens)))
            check((rid in old.cancels) == (case == "refused"), "%s: old run cancelled %r" % (case, old.cancels))
            finish_run(pb, new, rid, "abcdefghi", len(resume))
            res["th"].join(20)
        finally:
            for d in ds:
                d.stop()
        text, finish, usage = answer(res["raw"])
        check(text == "abcdefghi" and finish == "length", "%s: the client got %r (%s)" % (case, text, finish))
        check(usage["completion_tokens"] == 9, "%s: usage %r" % (case, usage))
        ho = handovers(gw)
        want = {"refused": {"started": 2, "moved": 1, "taken_over": 0},
                "stopped": {"started": 1, "moved": 0, "taken_over": 0},
                "taken": {"started": 1, "moved": 0, "taken_over": 1}}[case]
        check(ho == want, "%s: hand-overs %r" % (case, ho))
        check(metric(gw, "smollm3_gateway_streams_resumed_total") == 1, "%s: resumed %r"
              % (case, metric(gw, "smollm3_gateway_streams_resumed_total")))
        gw.stop()


def t_session_spill(st):
    """A conversation (session_id) on two daemons sharing a spill directory (kv_spill_shared): its next
    turn, killed mid-answer, resumes on the other daemon, which reads the conversation's KV back from the
    spill instead of recomputing it; the answer is byte for byte its twin's."""
    spill = os.path.join(st.tmp, "spill")
    os.makedirs(spill, exist_ok=True)
    ds = [tg.Daemon(os.path.join(st.tmp, "sp%d.sock" % i), extra=["--kv-spill-dir", spill, "--kv-spill-shared"])
          for i in range(2)]
    st.ds += ds                                 # stopped at the end
    gw = tg.Gateway(ds[0].endpoint, st.tmp, extra=["--daemon", ds[1].endpoint])
    st.extra_gws.append(gw)
    deadline = time.monotonic() + 15
    while True:
        _, _, b = gw.request("GET", "/health")
        if [d["state"] for d in json.loads(b)["daemons"]] == ["up", "up"]:
            break
        check(time.monotonic() < deadline, "the spill pool is not up: %r" % b)
        time.sleep(0.1)
    first = [{"role": "user", "content": "Remember these words: " + " ".join("w%d" % (k * 37 % 911) for k in range(150))}]
    b1 = {"messages": first, "max_tokens": 8, "temperature": 0, "session_id": "spill-conv",
          "chat_template_kwargs": {"enable_thinking": False}}
    before = [d.stats()["requests_total"] for d in ds]
    s, r = tg.post_json(gw, "/v1/chat/completions", b1)
    check(s == 200, "turn 1: %d %r" % (s, r))
    delta = [d.stats()["requests_total"] - x for d, x in zip(ds, before)]
    home, other = (ds[0], ds[1]) if delta[0] else (ds[1], ds[0])
    b2 = dict(b1, messages=first + [{"role": "assistant", "content": r["choices"][0]["message"]["content"]},
                                    {"role": "user", "content": "Now tell me a long story about them."}],
              max_tokens=MAX_TOKENS, temperature=0.9, seed=5, stream=True, stream_options={"include_usage": True})

    def written(n, timeout=20):             # the turn written through to the spill
        deadline = time.monotonic() + timeout
        while home.stats().get("spill_sessions_written", 0) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    written(1)
    twin = answer(stream(gw, b2))
    written(2)
    r0 = other.stats().get("spill_tokens_restored", 0)
    prog, res = [0], {}

    def client():
        res["raw"] = stream(gw, b2, prog, 0)
    th = threading.Thread(target=client)
    th.start()
    deadline = time.monotonic() + 30
    while prog[0] < 1500 and time.monotonic() < deadline:
        time.sleep(0.005)
    home.kill()
    th.join(60)
    check("raw" in res, "the stream did not end")
    got = answer(res["raw"])
    restored = other.stats().get("spill_tokens_restored", 0) - r0
    check(got[0] == twin[0] and got[1] == twin[1], "the resumed turn differs from its twin:\n twin %r\n got  %r"
          % (twin[0], got[0]))
    check(restored > 0, "the other daemon restored nothing from the spill")
    print("  a session's turn resumed on the other daemon: %d tokens read back from the shared spill, "
          "pause %.0f ms" % (restored, 1000 * GAPS[0]), flush=True)


# ---- the link between nodes: tcp:// with CURVE ---------------------------------------------------

def daemon_tcp(st, port, extra, wait=True):
    import subprocess
    log = open(os.path.join(st.tmp, "tcp-%d.log" % port), "ab")
    p = subprocess.Popen([os.path.join(tg.ARGS.build, "bin/smollm3d"), "--model", tg.MODEL, "--listen",
                          "tcp://127.0.0.1:%d" % port, "--threads", "1", "--kv-budget-mb", "64"] + extra,
                         stdout=log, stderr=subprocess.STDOUT)
    st.procs.append(p)
    return p


def zclient(endpoint, server_pub, pub, sec):
    import zmq
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_pub, pub, sec
    s.connect(endpoint)
    return s


def zcall(s, req, timeout=3.0):
    """One request, its terminal event (or None: no answer in timeout)."""
    import smollm3_pb2 as pb
    s.send(req.SerializeToString())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not s.poll(100):
            continue
        ev = pb.Event()
        ev.ParseFromString(s.recv())
        if ev.request_id == req.request_id and ev.WhichOneof("kind") not in ("started", "token"):
            return ev
    return None


def t_curve(st):
    """tcp:// with CURVE: a listed gateway is served, a wrong key is refused (until SIGHUP lists it),
    plain tcp:// is refused on both sides, a non-gateway client acts for its own tenant only."""
    import signal
    import subprocess
    import zmq
    import smollm3_pb2 as pb
    dkey = os.path.join(st.tmp, "daemon.key")        # the daemon's pair from smollm3ctl curve-keygen
    r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3ctl"), "curve-keygen", dkey], capture_output=True)
    check(r.returncode == 0 and len(r.stdout.strip()) == 40 and os.stat(dkey).st_mode & 0o077 == 0,
          "smollm3ctl curve-keygen: %r" % (r,))
    srv_pub = r.stdout.strip()
    gw_pub, gw_sec = zmq.curve_keypair()
    cl_pub, cl_sec = zmq.curve_keypair()
    bad_pub, bad_sec = zmq.curve_keypair()
    f = lambda name, text: (open(os.path.join(st.tmp, name), "w").write(text), os.path.join(st.tmp, name))[1]  # noqa
    clients = f("clients", "# the gateway\n%s gateway\n%s tenant=t1\n" % (gw_pub.decode(), cl_pub.decode()))
    gkey = f("gw.key", gw_sec.decode() + "\n")
    bkey = f("bad.key", bad_sec.decode() + "\n")
    port, plain = tg.free_port(), tg.free_port()
    ep = "tcp://127.0.0.1:%d" % port
    skeys = f("server-keys", "%s %s\n" % (ep, srv_pub.decode()))
    # plain tcp:// is refused by the daemon ...
    p = daemon_tcp(st, plain, [])
    check(p.wait(60) != 0, "the daemon served plain tcp:// without allow_plain_tcp")
    # ... and by the gateway
    g = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:%d" % tg.free_port(),
                        "--daemon", "tcp://127.0.0.1:%d" % plain], capture_output=True, timeout=20)
    check(g.returncode != 0 and b"CURVE" in g.stderr, "the gateway took a plain tcp:// daemon: %r" % g.stderr[-200:])
    d = daemon_tcp(st, port, ["--curve-secret-key-file", dkey, "--curve-clients-file", clients])
    gw = tg.Gateway.__new__(tg.Gateway)
    st.extra_gws.append(gw)         # stopped at the end even when it never becomes ready
    try:
        gw.__init__(ep, st.tmp, extra=["--curve-key-file", gkey, "--curve-server-keys", skeys])
    except RuntimeError:
        with open(os.path.join(st.tmp, "tcp-%d.log" % port), "rb") as fh:
            raise AssertionError("no gateway over CURVE; the daemon's log:\n%s" % fh.read().decode()[-1500:])
    s, r = tg.post_json(gw, "/v1/chat/completions", tg.chat("over CURVE", max_tokens=4))
    check(s == 200 and r["usage"]["completion_tokens"] == 4, "served over CURVE: %d %r" % (s, r))
    bad = tg.Gateway.__new__(tg.Gateway)
    bad.port = tg.free_port()
    bad.listen = "127.0.0.1:%d" % bad.port
    bad.log_path = os.path.join(st.tmp, "gw-bad.log")
    bad.log = open(bad.log_path, "wb")
    bad.proc = subprocess.Popen([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", bad.listen,
                                 "--daemon", ep, "--curve-key-file", bkey, "--curve-server-keys", skeys],
                                stdout=bad.log, stderr=subprocess.STDOUT)
    st.extra_gws.append(bad)
    time.sleep(2.5)
    check(bad.request("GET", "/health")[0] == 503, "a gateway with an unlisted key was served")
    # a client that is not a gateway: its requests act for tenant t1, whatever they say
    cl = zclient(ep, srv_pub, cl_pub, cl_sec)
    req = pb.Request(protocol_version=1, request_id=77)
    g_ = req.generate
    g_.session_id, g_.tenant, g_.max_tokens = "curve-s1", "someone-else", 2
    m = g_.chat.messages.add()
    m.role, m.content = "user", "hi"
    ev = zcall(cl, req, 30)
    check(ev is not None and ev.WhichOneof("kind") == "done", "the tenant client's request: %r" % ev)
    trusted = zclient(ep, srv_pub, gw_pub, gw_sec)
    lists = {}
    for i, t in enumerate(("t1", "someone-else")):
        req = pb.Request(protocol_version=1, request_id=100 + i)
        req.session_list.tenant = t
        ev = zcall(trusted, req)
        check(ev is not None and ev.WhichOneof("kind") == "sessions", "session list: %r" % ev)
        lists[t] = [x.session_id for x in ev.sessions.sessions]
    check("curve-s1" in lists["t1"] and "curve-s1" not in lists["someone-else"],
          "the session is not its client's tenant's only: %r" % lists)
    # an unlisted key gets nothing; listed and SIGHUP'd, it is served
    b = zclient(ep, srv_pub, bad_pub, bad_sec)
    req = pb.Request(protocol_version=1, request_id=200)
    req.health.SetInParent()
    check(zcall(b, req, 1.5) is None, "an unlisted key got an answer")
    with open(clients, "a") as fh:
        fh.write("%s tenant=t2\n" % bad_pub.decode())
    d.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    b.close()
    b = zclient(ep, srv_pub, bad_pub, bad_sec)
    req.request_id = 201
    ev = zcall(b, req, 5)
    if ev is None or ev.WhichOneof("kind") != "health":
        with open(os.path.join(st.tmp, "tcp-%d.log" % port), "rb") as fh:
            raise AssertionError("a key listed on SIGHUP was refused; the daemon's log:\n%s" % fh.read().decode()[-800:])
    for s_ in (cl, trusted, b):
        s_.close()


def main():
    want = tg.suite_args()
    sys.path.insert(0, tg.ARGS.pb2_dir or "")
    with tg.Suite("smol-resume-") as st:
        # room for every hand-over's warm-up entries beside the streams' own (the default 16 let a burst
        # of other streams' finishing requests evict a choice's warm-up before its move: gateway/README.md)
        st.ds = [tg.Daemon(os.path.join(st.tmp, "d%d.sock" % i), extra=["--max-cached-prefixes", "64"])
                 for i in range(2)]
        st.procs, st.extra_gws = [], []
        try:
            st.gw = tg.Gateway(st.ds[0].endpoint, st.tmp, extra=["--daemon", st.ds[1].endpoint])
            for name, fn in (("daemon_resume_tokens", t_daemon_resume_tokens), ("pool_health", t_pool_health), ("rendezvous", t_rendezvous),
                             ("config_list", t_config_list), ("sigterm_handover", t_sigterm_handover),
                             ("kill_resumes", t_kill_resumes), ("nginx_kill", t_nginx_kill)):
                if want(name):
                    run_test(name, fn, st)
            st.gw.stop()
            st.gw = None
            st.solo = st.ds[1] if st.ds[1].proc.poll() is None else st.ds[0]
            if st.solo.proc.poll() is not None:
                st.solo.start()
            st.gw1 = tg.Gateway(st.solo.endpoint, st.tmp)
            st.gw = st.gw1
            if want("restart_resumes"):
                run_test("restart_resumes", t_restart_resumes, st)
            if want("curve"):
                run_test("curve", t_curve, st)
            if want("resend"):
                run_test("resend", t_resend, st)
            if want("handover_rounds"):
                run_test("handover_rounds", t_handover_rounds, st)
            if want("handover_fallbacks"):
                run_test("handover_fallbacks", t_handover_fallbacks, st)
            if want("session_spill"):
                run_test("session_spill", t_session_spill, st)
        finally:
            for g in st.extra_gws:
                if getattr(g, "proc", None):
                    g.stop()
            for p in st.procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(15)
            for d in st.ds:
                d.stop()
    print("%d passed, %d failed" % (tg.RESULTS["pass"], tg.RESULTS["fail"]), flush=True)
    return 1 if tg.RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
