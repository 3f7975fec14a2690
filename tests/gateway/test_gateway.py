#!/usr/bin/env python3
"""Process-level tests of smollm3-gateway.

Starts the real daemon (BUILD/bin/smollm3d --threads 1) on the tiny random
fixture model and the gateway on a loopback port, in temp dirs, and drives
them with curl, raw sockets, http.client and the official `openai` SDK.  A
scripted fake daemon (pyzmq ROUTER speaking proto/smollm3.proto) drives the
paths a random model cannot reach on demand: reasoning / content split,
tool calls, an error after streaming began, a refusal before it, pacing.

Prints "ok NAME" / "FAIL NAME: why" per test and "N passed, N failed" last;
exits 1 on any failure.  A test that cannot run (Skip: a missing
prerequisite) is a failure too.
"""
import argparse
import http.client
import json
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
RESULTS = {"pass": 0, "fail": 0}
ARGS = None


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_test(name, fn, *a):
    try:
        fn(*a)
        RESULTS["pass"] += 1
        print("ok %s" % name, flush=True)
    except Skip as e:
        RESULTS["fail"] += 1
        print("FAIL %s: cannot run: %s" % (name, e), flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        RESULTS["fail"] += 1
        print("FAIL %s: %s" % (name, e), flush=True)
        traceback.print_exc(limit=3, file=sys.stdout)


# ---- the harness the API suites share (test_api, test_responses, test_anthropic, test_rules) ----

def suite_args():
    """Parses the suites' command line (--build, --pb2-dir, test-name filters) into ARGS; returns the
    filter as a predicate on test names."""
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pb2-dir", default=None)
    ap.add_argument("filter", nargs="*")
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    return lambda n: not ARGS.filter or any(f in n for f in ARGS.filter)


class Suite:
    """One suite's temp dir and processes (st.gw, st.d: a Gateway, a Daemon or FakeDaemon).  Leaving
    the with block stops whatever still runs (the gateway's log shown when a test failed), counts an
    exception as a failed setup, and removes the temp dir; result() prints the summary line."""

    def __init__(self, prefix):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.gw = self.d = None

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if isinstance(e, Exception):
            RESULTS["fail"] += 1
            print("FAIL setup: %s" % e, flush=True)
            traceback.print_exception(et, e, tb)
        if self.gw:
            if RESULTS["fail"]:
                print("--- gateway log ---\n" + self.gw.log_tail(), flush=True)
            self.gw.stop()
        if self.d:
            self.d.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return isinstance(e, Exception)

    def result(self):
        print("%d passed, %d failed" % (RESULTS["pass"], RESULTS["fail"]), flush=True)
        return 1 if RESULTS["fail"] else 0


def post_json(gw, path, body, headers=None):
    """POSTs body (JSON) to path: (status, the parsed reply or None)."""
    st, h, b = gw.request("POST", path, body, headers=headers)
    return st, json.loads(b) if b else None


def openai_client(gw, timeout=60, **kw):
    import openai
    return openai.OpenAI(base_url=gw.url("/v1"), api_key=kw.pop("api_key", "none"), max_retries=0,
                         timeout=timeout, **kw)


def expect_openai_400(fn, field):
    """fn must fail with the openai SDK's BadRequestError naming field (param or message)."""
    import openai
    try:
        fn()
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        check(err.get("param") == field or field in str(err.get("message", "")),
              "400 for %s does not name it: %r" % (field, e.body))
        return
    raise AssertionError("%s was accepted" % field)


def sdk_type_fields(*classes):
    """Every field name of the SDK's request TypedDicts."""
    import typing
    names = set()
    for cls in classes:
        names |= set(typing.get_type_hints(cls))
    return names


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---- processes -------------------------------------------------------------

class Daemon:
    def __init__(self, sock_path, extra=(), model=None):
        self.model = model or MODEL
        self.sock_path = sock_path
        self.endpoint = "ipc://" + sock_path
        self.log_path = sock_path + ".log"
        self.extra = list(extra)
        self.start()

    def start(self):
        self.log = open(self.log_path, "ab")
        cmd = [os.path.join(ARGS.build, "bin/smollm3d"), "--model", self.model, "--listen",
               self.endpoint, "--threads", "1", "--kv-budget-mb", "64",
               "--max-queued", "256"] + self.extra
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "smollm3d exited during start")
            if os.path.exists(self.sock_path) and self.ctl("health").returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("smollm3d not ready")

    def ctl(self, *args):
        cmd = [os.path.join(ARGS.build, "bin/smollm3ctl"), "--connect", self.endpoint,
               "--timeout", "5"] + list(args)
        return subprocess.run(cmd, capture_output=True, timeout=20)

    def stats(self):
        r = self.ctl("stats", "--json")
        check(r.returncode == 0, "smollm3ctl stats failed: %s" % r.stderr.decode())
        return json.loads(r.stdout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tenant_secret(tmp, name="tenant-secret"):
    """A deployment's tenant secret (--tenant-secret-file): 64 random hex digits, mode 0600."""
    p = os.path.join(tmp, name)
    if not os.path.exists(p):
        with open(p, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(p, 0o600)
    return p


class Gateway:
    """smollm3-gateway on a free loopback port; as deployed, with a tenant secret (tmp/tenant-secret)
    unless extra names one or secret is False."""

    def __init__(self, endpoint, tmp, extra=(), listen=None, secret=True):
        self.port = free_port()
        self.listen = listen or "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(tmp, "gateway-%d.log" % self.port)
        self.log = open(self.log_path, "wb")
        extra = list(extra)
        if secret and "--tenant-secret-file" not in extra:
            extra += ["--tenant-secret-file", tenant_secret(tmp)]
        cmd = [os.path.join(ARGS.build, "bin/smollm3-gateway"), "--listen", self.listen,
               "--daemon", endpoint] + extra
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready(30)

    def wait_ready(self, timeout, want=200):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "gateway exited: %s" % self.log_tail())
            try:
                last = self.request("GET", "/health")[0]
                if last == want:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("gateway /health not %d (last %s): %s" % (want, last, self.log_tail()))

    def log_tail(self, n=1500):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]

    def conn(self, timeout=30):
        if self.listen.startswith("unix:"):
            raise RuntimeError("use curl for unix sockets")
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30):
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = dict((k.lower(), v) for k, v in r.getheaders())
        c.close()
        return r.status, hdrs, data

    def url(self, path=""):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        log = self.log_tail(1 << 20)
        if "Sanitizer" in log or "runtime error:" in log:
            RESULTS["fail"] += 1
            print("FAIL sanitizer report in the gateway log:\n%s" % log[-3000:], flush=True)
        return self.proc.returncode


def chat(content="Hello!", **kw):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8,
            "temperature": 0}
    body.update(kw)
    return body


def sse_events(raw):
    """Splits an SSE body into a list of (kind, payload) with framing checks."""
    text = raw.decode("utf-8")
    check(text.endswith("\n\n"), "SSE body does not end with a blank line")
    out = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        if all(line.startswith(":") for line in lines):
            out.append(("comment", block))
            continue
        ev, data = "message", []
        for line in lines:
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line.startswith(":"):
                continue
            else:
                raise AssertionError("bad SSE line %r" % line)
        out.append((ev, "\n".join(data)))
    return out


def read_stream(gw, body, timeout=30, path="/v1/chat/completions", method="POST"):
    """Streams a request; returns (status, headers, [(t, chunk_bytes)])."""
    c = gw.conn(timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    hdrs = dict((k.lower(), v) for k, v in r.getheaders())
    chunks = []
    t0 = time.monotonic()
    while True:
        b = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not b:
            break
        chunks.append((time.monotonic() - t0, b))
    c.close()
    return r.status, hdrs, chunks


def openai_chunks(raw):
    evs = sse_events(raw)
    check(evs and evs[-1] == ("message", "[DONE]"), "stream does not end with [DONE]: %r"
          % (evs[-1:],))
    return [json.loads(d) for k, d in evs[:-1] if k == "message"]


# ---- tests against the real daemon ----------------------------------------

def t_health_models(gw, d):
    st, h, b = gw.request("GET", "/health")
    check(st == 200 and json.loads(b)["ready"] is True, "health: %d %s" % (st, b))
    st, h, b = gw.request("GET", "/v1/models")
    j = json.loads(b)
    check(st == 200 and j["object"] == "list" and j["data"][0]["id"], "models: %s" % b)


def t_sse_framing(gw, d):
    st, h, chunks = read_stream(gw, chat(stream=True, stream_options={"include_usage": True},
                                         chat_template_kwargs={"enable_thinking": False}))
    check(st == 200, "status %d" % st)
    check(h.get("content-type", "").startswith("text/event-stream"), "content-type %s" % h)
    check(h.get("cache-control") == "no-cache", "cache-control %s" % h.get("cache-control"))
    check(h.get("x-accel-buffering") == "no", "x-accel-buffering missing")
    cs = openai_chunks(b"".join(c for _, c in chunks))
    ids = {c["id"] for c in cs}
    check(len(ids) == 1 and ids.pop().startswith("chatcmpl-"), "ids not one chatcmpl id")
    check(len({c["created"] for c in cs}) == 1, "created differs")
    check(all(c["object"] == "chat.completion.chunk" for c in cs), "object")
    first = cs[0]["choices"][0]
    check(first["delta"] == {"role": "assistant", "content": ""} and
          first["finish_reason"] is None, "first delta %r" % first)
    usage = cs[-1]
    check(usage["choices"] == [] and "usage" in usage, "last chunk is not usage: %r" % usage)
    u = usage["usage"]
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        check(isinstance(u.get(k), int), "usage.%s" % k)
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "total")
    check("cached_tokens" in u["prompt_tokens_details"], "cached_tokens")
    check("reasoning_tokens" in u["completion_tokens_details"], "reasoning_tokens")
    fin = cs[-2]["choices"][0]
    check(fin["delta"] == {} and fin["finish_reason"] == "length", "final chunk %r" % fin)
    mids = cs[1:-2]
    check(all("content" in c["choices"][0]["delta"] for c in mids) and len(mids) >= 1,
          "content deltas")
    check(u["completion_tokens"] == 8, "completion_tokens %d" % u["completion_tokens"])
    # without include_usage: no usage chunk
    st, h, chunks = read_stream(gw, chat(stream=True))
    cs = openai_chunks(b"".join(c for _, c in chunks))
    check(cs[-1]["choices"][0]["finish_reason"] in ("length", "stop"), "no usage: last chunk")
    check(all("usage" not in c for c in cs), "usage without include_usage")


def t_curl_sse(gw, d):
    if not shutil.which("curl"):
        raise Skip("curl not found")
    r = subprocess.run(["curl", "-sN", "-D", "-", gw.url("/v1/chat/completions"), "-d",
                        json.dumps(chat(stream=True, max_tokens=5))],
                       capture_output=True, timeout=30)
    out = r.stdout.decode()
    check(r.returncode == 0, "curl rc %d" % r.returncode)
    head, _, body = out.partition("\r\n\r\n")
    check("text/event-stream" in head, "curl headers: %s" % head)
    check(body.endswith("data: [DONE]\n\n"), "curl body end: %r" % body[-60:])
    for block in body.split("\n\n")[:-1]:
        check(block.startswith("data: ") and "\n" not in block, "bad block %r" % block[:80])


def t_incremental(gw, d):
    st, h, chunks = read_stream(gw, chat(stream=True, max_tokens=400))
    check(st == 200, "status")
    times = [t for t, _ in chunks]
    check(len(chunks) >= 5, "only %d reads: events were batched" % len(chunks))
    spread = times[-1] - times[0]
    check(spread > 0.01, "all chunks within %.4f s" % spread)
    # the first content arrives well before the end
    check(times[1] < times[-1] * 0.6 + 0.001, "first bytes at %.3f of %.3f" % (times[1], times[-1]))


def t_non_streaming(gw, d):
    st, h, b = gw.request("POST", "/v1/chat/completions", chat(max_tokens=6))
    check(st == 200 and h["content-type"].startswith("application/json"), "status %d" % st)
    j = json.loads(b)
    check(j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-"), "object")
    m = j["choices"][0]["message"]
    check(m["role"] == "assistant" and isinstance(m["content"], str) and m["content"], "message")
    check(j["choices"][0]["finish_reason"] == "length", "finish")
    check(j["usage"]["completion_tokens"] == 6, "usage %r" % j["usage"])


def t_speculative(gw, d):
    # the extension field: false turns speculative decoding off; the output is the same either way
    outs = []
    for spec in (None, False, True):
        body = chat("Tell me a story about a cat and a cat.", max_tokens=32)
        if spec is not None:
            body["speculative"] = spec
        st, h, b = gw.request("POST", "/v1/chat/completions", body)
        check(st == 200, "speculative=%r: status %d %s" % (spec, st, b[:200]))
        j = json.loads(b)
        u = j["usage"]["completion_tokens_details"]
        check(isinstance(u.get("accepted_prediction_tokens"), int) and
              isinstance(u.get("rejected_prediction_tokens"), int), "usage %r" % u)
        # without a prediction OpenAI's counts are 0; the daemon's own drafting is in x_smollm3
        check(u["accepted_prediction_tokens"] == 0 and u["rejected_prediction_tokens"] == 0,
              "no prediction: %r" % u)
        x = j["usage"].get("x_smollm3")
        check(isinstance(x, dict) and isinstance(x.get("drafted_tokens"), int) and
              0 <= x.get("accepted_draft_tokens", -1) <= x["drafted_tokens"], "x_smollm3 %r" % x)
        if spec is False:
            check(x["drafted_tokens"] == 0, "off: nothing drafted %r" % x)
        outs.append(j["choices"][0]["message"]["content"])
    check(outs[0] == outs[1] == outs[2], "outputs differ with speculation: %r" % outs)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat(speculative="no"))
    check(st == 400 and json.loads(b)["error"]["param"] == "speculative", "bad speculative: %d %s" % (st, b[:200]))


def t_params_accepted(gw, d):
    body = chat(max_completion_tokens=4, top_p=0.9, seed=7, stop=["zz", "yy"],
                tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                chat_template_kwargs={"enable_thinking": True}, session_id="gw-test-sess-1")
    body["messages"].insert(0, {"role": "system", "content": "be brief"})
    body["messages"] += [{"role": "assistant", "content": "hi", "reasoning": "think"},
                         {"role": "user", "content": [{"type": "text", "text": "again"}]}]
    st, h, b = gw.request("POST", "/v1/chat/completions", body)
    check(st == 200, "status %d %s" % (st, b))
    check(json.loads(b)["usage"]["completion_tokens"] <= 4, "max_completion_tokens")
    st, h, b = gw.request("POST", "/v1/chat/completions", chat(stop="x", seed=1))
    check(st == 200, "stop string: %d %s" % (st, b))
    # the second turn of a session reuses the KV
    body["messages"].append({"role": "assistant", "content": "ok"})
    body["messages"].append({"role": "user", "content": "third"})
    st, h, b = gw.request("POST", "/v1/chat/completions", body)
    j = json.loads(b)
    check(st == 200 and j["usage"]["prompt_tokens_details"]["cached_tokens"] > 0,
          "session: no cached tokens %s" % b)


def t_openai_sdk(gw, d):
    try:
        import openai
    except ImportError:
        raise Skip("openai python package not installed (pip install openai)")
    cl = openai.OpenAI(base_url=gw.url("/v1"), api_key="none", max_retries=0, timeout=30)
    r = cl.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                   max_tokens=5, temperature=0)
    check(r.choices[0].message.role == "assistant" and r.choices[0].message.content, "sdk msg")
    check(r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length", "sdk usage")
    st = cl.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                    max_tokens=5, temperature=0, stream=True,
                                    stream_options={"include_usage": True})
    text, usage, fin = "", None, None
    for ch in st:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            text += c.delta.content or ""
            fin = c.finish_reason or fin
    check(text and fin == "length" and usage and usage.completion_tokens == 5,
          "sdk stream: %r %r %r" % (text, fin, usage))
    models = cl.models.list()
    check(len(models.data) == 1, "sdk models")
    try:
        cl.chat.completions.create(model="x", messages=[], max_tokens=5)
        raise AssertionError("empty messages accepted")
    except openai.BadRequestError:
        pass


def t_structured(gw, d):
    """response_format json_schema / json_object and the grammar extension
    through the openai SDK: every output validates (random weights at
    temperature 1.5: never valid unconstrained), bad schemas are a 400
    naming the keyword."""
    import openai
    import jsonschema
    cl = openai.OpenAI(base_url=gw.url("/v1"), api_key="none", max_retries=0, timeout=120)
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "kind": {"enum": ["a", "b", None]}}, "required": ["name", "n", "kind"]}
    msgs = [{"role": "user", "content": "JSON please"}]
    # thinking off: with it on, the constraint starts after </think>, which
    # random weights never sample
    nothink = {"chat_template_kwargs": {"enable_thinking": False}}
    for seed in (1, 2):
        rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}
        r = cl.chat.completions.create(model="x", messages=msgs, temperature=1.5, seed=seed,
                                       max_tokens=200, response_format=rf, extra_body=nothink)
        text = r.choices[0].message.content
        check(r.choices[0].finish_reason == "stop", "json_schema finish %s: %r" % (
            r.choices[0].finish_reason, text))
        jsonschema.validate(json.loads(text), schema)
        st = cl.chat.completions.create(model="x", messages=msgs, temperature=1.5, seed=seed,
                                        max_tokens=200, response_format=rf, stream=True,
                                        extra_body=nothink)
        streamed = "".join(c.delta.content or "" for ch in st for c in ch.choices)
        check(streamed == text, "streamed %r == non-streamed %r" % (streamed, text))
        r = cl.chat.completions.create(model="x", messages=msgs, temperature=1.5, seed=seed,
                                       max_tokens=100, extra_body=dict(nothink, grammar='root ::= "n=" [0-9]{1,3}'))
        check(re.fullmatch(r"n=[0-9]{1,3}", r.choices[0].message.content or ""),
              "grammar output %r" % r.choices[0].message.content)
    r = cl.chat.completions.create(model="x", messages=msgs, temperature=1.5, seed=3, max_tokens=8,
                                   response_format={"type": "text"})
    check(r.choices[0].message.content, "response_format text")
    for rf, word in (({"type": "json_schema", "json_schema": {"name": "t", "schema": {
                        "type": "number", "multipleOf": 3}}}, "multipleOf"),
                     ({"type": "xml"}, "response_format"),
                     ({"type": "json_schema", "json_schema": {"schema": {}}}, "name")):
        try:
            cl.chat.completions.create(model="x", messages=msgs, max_tokens=5, response_format=rf)
            raise AssertionError("accepted %s" % rf)
        except openai.BadRequestError as e:
            check(word in str(e), "400 names %r: %s" % (word, e))


def t_disconnect_cancels(gw, d):
    s = socket.create_connection(("127.0.0.1", gw.port))
    body = json.dumps(chat(stream=True, max_tokens=3000))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
               "\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    got = s.recv(4096)
    check(b"200 OK" in got, "stream did not start")
    time.sleep(0.2)
    check(d.stats()["requests_active"] >= 1, "not running")
    cancelled0 = d.stats()["requests_cancelled"]
    s.close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2:
        st = d.stats()
        if st["requests_active"] == 0:
            break
        time.sleep(0.02)
    dt = time.monotonic() - t0
    check(st["requests_active"] == 0, "request still active 2 s after disconnect")
    check(st["requests_cancelled"] > cancelled0, "daemon did not count a cancel")
    print("   disconnect -> daemon idle in %.0f ms" % (dt * 1000), flush=True)


def t_bad_input(gw, d):
    def err(st, b, want, what):
        check(st == want, "%s: status %d, want %d (%s)" % (what, st, want, b[:200]))
        j = json.loads(b)
        check(set(j["error"]) >= {"message", "type", "code"}, "%s: error shape %s" % (what, b))

    cases = [
        (b"{bad json", 400, "malformed json"),
        (b'{"messages": [1]}', 400, "message not object"),
        (b'{"messages": "hi"}', 400, "messages string"),
        (b'{"messages": []}', 400, "empty messages"),
        (b'[1,2]', 400, "array body"),
        (json.dumps(chat(temperature="hot")).encode(), 400, "temperature string"),
        (json.dumps(chat(temperature=5)).encode(), 400, "temperature range"),
        (json.dumps(chat(max_tokens=-1)).encode(), 400, "max_tokens negative"),
        (json.dumps(chat(max_tokens=1.5)).encode(), 400, "max_tokens float"),
        (json.dumps(chat(stop=7)).encode(), 400, "stop number"),
        (json.dumps(chat(stream="yes")).encode(), 400, "stream string"),
        (json.dumps(chat(session_id="bad id!")).encode(), 400, "session id chars"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "role"),
        (b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400, "invalid utf-8"),
        (b'{"messages":[{"role":"user","content":"\\ud800"}]}', 400, "lone surrogate"),
        (b'{"a":1,"a":2}', 400, "duplicate keys"),
        (b'{"messages":[{"role":"user","content":"x"}]} trailing', 400, "trailing garbage"),
        (b"", 400, "empty body"),
    ]
    for body, want, what in cases:
        st, h, b = gw.request("POST", "/v1/chat/completions", body)
        err(st, b, want, what)
    st, h, b = gw.request("POST", "/v1/chat/completions", b"x" * (2 << 20))
    err(st, b, 413, "huge body")
    # huge body sent chunked (no Content-Length)
    c = gw.conn()
    c.putrequest("POST", "/v1/chat/completions")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    try:
        for _ in range(40):
            blk = b"y" * 65536
            c.send(b"%x\r\n%s\r\n" % (len(blk), blk))
        c.send(b"0\r\n\r\n")
        r = c.getresponse()
        err(r.status, r.read(), 413, "huge chunked body")
    except (BrokenPipeError, ConnectionResetError):
        pass
    c.close()
    st, h, b = gw.request("GET", "/nope")
    err(st, b, 404, "unknown route")
    st, h, b = gw.request("GET", "/v1/chat/completions")
    err(st, b, 405, "wrong method")
    st, h, b = gw.request("DELETE", "/v1/models")
    err(st, b, 405, "wrong method on models")
    st, h, b = gw.request("POST", "/v1/chat/completions", chat(session_id="never-seen-before-42"))
    check(st == 200, "unknown session id: %d %s" % (st, b))
    # header flood: MHD refuses with 431 and the gateway goes on
    st, h, b = gw.request("GET", "/health", headers={"X-Big": "a" * 100000})
    check(st in (413, 431), "huge header: %d" % st)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat())
    check(st == 200, "gateway stopped serving after bad input")


def t_too_many_connections(d, tmp):
    gw = Gateway(d.endpoint, tmp, ["--max-connections", "4"])
    try:
        idle = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(6)]
        time.sleep(0.2)
        s = socket.create_connection(("127.0.0.1", gw.port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(10)
        resp = b""
        while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
            b = s.recv(4096)
            if not b:
                break
            resp += b
        s.close()
        check(resp.startswith(b"HTTP/1.1 503"), "over the limit: %r" % resp[:80])
        body = resp.split(b"\r\n\r\n", 1)[1]
        check(json.loads(body)["error"]["code"] == "too_many_connections", "body %r" % body)
        for x in idle:
            x.close()
        time.sleep(0.3)
        st, h, b = gw.request("GET", "/v1/models")
        check(st == 200, "not serving after the flood: %d" % st)
        st, h, b = gw.request("POST", "/v1/chat/completions", chat())
        check(st == 200, "chat after the flood: %d" % st)
    finally:
        gw.stop()


def t_max_inflight(d, tmp):
    gw = Gateway(d.endpoint, tmp, ["--max-inflight", "1"])
    try:
        s = socket.create_connection(("127.0.0.1", gw.port))
        body = json.dumps(chat(stream=True, max_tokens=3000))
        s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(body), body)).encode())
        check(b"200 OK" in s.recv(4096), "first stream")
        st, h, b = gw.request("POST", "/v1/chat/completions", chat())
        check(st == 429 and json.loads(b)["error"]["type"] == "rate_limit_error",
              "second: %d %s" % (st, b))
        s.close()
        time.sleep(0.3)
        st, h, b = gw.request("POST", "/v1/chat/completions", chat())
        check(st == 200, "after the first ended: %d" % st)
    finally:
        gw.stop()


def t_metrics(gw, d):
    time.sleep(2.2)         # one stats poll
    st, h, b = gw.request("GET", "/metrics")
    check(st == 200 and h["content-type"].startswith("text/plain"), "metrics status")
    text = b.decode()
    for name in ("smollm3_gateway_requests_total{", "smollm3_gateway_prompt_tokens_total",
                 "smollm3_gateway_completion_tokens_total", "smollm3_gateway_cached_tokens_total",
                 "smollm3_gateway_time_to_first_token_seconds_bucket",
                 "smollm3_gateway_time_per_output_token_seconds_bucket",
                 "smollm3_gateway_inflight_streams", "smollm3_daemon_queue_depth",
                 "smollm3_daemon_kv_tokens_used", "smollm3_daemon_prefix_cache_hits_total",
                 "smollm3_gateway_spec_drafted_tokens_total", "smollm3_gateway_spec_accepted_tokens_total",
                 "smollm3_gateway_prediction_accepted_tokens_total",
                 "smollm3_gateway_prediction_rejected_tokens_total",
                 "smollm3_daemon_spec_drafted_tokens_total", "smollm3_daemon_spec_accepted_tokens_total",
                 "smollm3_daemon_spec_verify_steps_total", "smollm3_daemon_decode_steps_total",
                 "smollm3_daemon_engine_steps_total", "smollm3_daemon_step_seconds_total",
                 "smollm3_daemon_forward_seconds_total", "smollm3_daemon_sessions_evicted_total",
                 "smollm3_daemon_sessions_evicted_per_key_total",
                 "smollm3_daemon_unknown_session_refusals_total"):
        check(name in text, "metric %s missing" % name)
    check('endpoint="/v1/chat/completions",status="200"' in text, "request counter by status")
    check('status="400"' in text, "400s not counted")
    # both the Prometheus project's linter and the reference client's parser
    if not shutil.which("promtool"):
        raise Skip("promtool not found (make deps: Debian's prometheus)")
    r = subprocess.run(["promtool", "check", "metrics"], input=b, capture_output=True)
    check(r.returncode == 0, "promtool: %s %s" % (r.stdout.decode(), r.stderr.decode()))
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise Skip("prometheus_client missing (make deps: build/venv)")
    fams = list(text_string_to_metric_families(text))
    check(len(fams) > 10, "parser found %d families" % len(fams))


def ui_post(gw, **form):
    import urllib.parse
    f = {"conversation": "conv-1", "history": "[]", "message": "hi", "think": "0"}
    f.update(form)
    return gw.request("POST", "/ui/chat", urllib.parse.urlencode(f),
                      {"Content-Type": "application/x-www-form-urlencoded"})


def sid_of(html):
    import re
    m = re.search(r'data-stream="([A-Za-z0-9]{16,32})"', html)
    check(m, "no stream id in %r" % html[:300])
    return m.group(1)


def t_ui(gw, d):
    st, h, b = gw.request("GET", "/ui/config")
    j = json.loads(b)
    check(st == 200 and j["model"] and j["default_temperature"] == 0.6 and
          j["thinking_supported"] is True, "config %s (the fixture has SmolLM3's template)" % b)
    for _ in range(50):     # the context comes with the daemon's stats (polled every 2 s)
        if j["context_length"]:
            break
        time.sleep(0.1)
        j = json.loads(gw.request("GET", "/ui/config")[2])
    check(j["context_length"] == 4096, "config context_length %r (the fixture's context is 4096)" % j)
    st, h, b = ui_post(gw, message="<script>alert('x')</script> & \"q\"",
                       history=json.dumps([{"role": "user", "content": "a"},
                                           {"role": "assistant", "content": "b"}]),
                       temperature="0.3", system="sys <b>")
    html = b.decode()
    check(st == 200 and h["content-type"].startswith("text/html"), "ui chat %d" % st)
    check("<script>" not in html and "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
          in html, "message not escaped: %s" % html[:200])
    sid = sid_of(html)
    for frag in ('sse-connect="/ui/stream/%s"' % sid, 'sse-close="done"', 'sse-swap="reasoning"',
                 'sse-swap="content"', 'sse-swap="error"', 'hx-post="/ui/stop/%s"' % sid):
        check(frag in html, "fragment lacks %s" % frag)
    st, h, chunks = read_stream(gw, None, path="/ui/stream/" + sid, method="GET")
    check(st == 200 and h["content-type"].startswith("text/event-stream"), "ui stream %d" % st)
    evs = sse_events(b"".join(c for _, c in chunks))
    names = [k for k, _ in evs if k != "comment"]
    check(names and names[-1] == "done", "last event %r" % names[-1:])
    check(set(names) <= {"reasoning", "content", "done", "error"}, "event names %r" % names)
    check("content" in names, "no content events")
    done = json.loads(evs[-1][1])
    check(done["finish_reason"] in ("stop", "length") and "usage" in done, "done %r" % done)
    for k, v in evs:
        if k in ("content", "reasoning"):
            check("<" not in v and ">" not in v, "unescaped text in %r" % v)
    st, h, b = gw.request("GET", "/ui/stream/" + sid)
    check(st == 404, "second GET: %d" % st)
    st, h, b = gw.request("GET", "/ui/stream/doesnotexist0000")
    check(st == 404, "unknown stream: %d" % st)
    # a message over the UI's limit: refused, naming the limit
    st, h, b = ui_post(gw, conversation="conv-big", message="x" * (64 * 1024 + 1))
    check(st == 413 and b"65537 bytes" in b and b"the limit is 65536 bytes (64 KiB" in b,
          "message too long: %d %r" % (st, b[:300]))
    # stop mid-generation
    st, h, b = ui_post(gw, conversation="conv-2", think="1")
    sid = sid_of(b.decode())
    c = gw.conn()
    c.request("GET", "/ui/stream/" + sid)
    r = c.getresponse()
    check(r.status == 200, "stream 2")
    first = r.read1(4096)
    check(first, "no first event")
    st2, _, _ = gw.request("POST", "/ui/stop/" + sid)
    check(st2 == 204, "stop: %d" % st2)
    rest = first
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        b = r.read1(65536)
        if not b:
            break
        rest += b
    c.close()
    evs = sse_events(rest)
    check(evs[-1][0] == "done" and json.loads(evs[-1][1])["finish_reason"] == "cancelled",
          "after stop: %r" % (evs[-1:],))
    # per-conversation settings: top_p and max_tokens reach the daemon (a 3-token cap ends at 3)
    st, h, b = ui_post(gw, conversation="conv-mt", max_tokens="3", top_p="0.5", temperature="0")
    check(st == 200, "ui chat with top_p/max_tokens: %d %s" % (st, b[:200]))
    st, h, chunks = read_stream(gw, None, path="/ui/stream/" + sid_of(b.decode()), method="GET")
    evs = sse_events(b"".join(c for _, c in chunks))
    done = json.loads(evs[-1][1])
    check(done["finish_reason"] == "length" and 0 < done["usage"]["completion_tokens"] <= 3,
          "max_tokens=3: %r" % done)
    st, h, b = gw.request("POST", "/ui/stop/nosuchstream0000")
    check(st == 404, "stop unknown: %d" % st)
    # bad forms
    for form, want in (({"conversation": "bad id!"}, 400), ({"message": ""}, 400),
                       ({"think": "2"}, 400), ({"temperature": "9"}, 400),
                       ({"history": "{"}, 400), ({"message": "x" * 70000}, 413),
                       ({"top_p": "0"}, 400), ({"top_p": "1.5"}, 400), ({"top_p": "x"}, 400),
                       ({"max_tokens": "0"}, 400), ({"max_tokens": "2.5"}, 400),
                       ({"max_tokens": "9999999"}, 400)):
        st, h, b = ui_post(gw, **form)
        check(st == want and b'class="msg error"' in b, "ui form %r: %d %s" % (form, st, b[:100]))
    # unclaimed stream can be stopped (dropped) before anyone connects
    st, h, b = ui_post(gw, conversation="conv-3")
    sid = sid_of(b.decode())
    check(gw.request("POST", "/ui/stop/" + sid)[0] == 204, "stop unclaimed")
    check(gw.request("GET", "/ui/stream/" + sid)[0] == 404, "stream after stop")


def t_load(gw, d, n=120):
    errors = []
    done = []
    lock = threading.Lock()

    def one(i):
        try:
            st, h, chunks = read_stream(gw, chat("load %d" % i, stream=True, max_tokens=32,
                                                 stream_options={"include_usage": True}),
                                        timeout=120)
            if st != 200:
                raise AssertionError("status %d" % st)
            cs = openai_chunks(b"".join(c for _, c in chunks))
            if cs[-1]["usage"]["completion_tokens"] != 32:
                raise AssertionError("usage %r" % cs[-1]["usage"])
            with lock:
                done.append(i)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append("%d: %s" % (i, e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    dt = time.monotonic() - t0
    check(not errors, "%d errors, e.g. %s" % (len(errors), errors[:3]))
    check(len(done) == n, "%d of %d finished" % (len(done), n))
    print("   %d simultaneous streams in %.1f s" % (n, dt), flush=True)


def t_daemon_killed(gw, d):
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.settimeout(10)
    body = json.dumps(chat(stream=True, max_tokens=3000))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body)).encode())
    buf = s.recv(65536)
    check(b"200 OK" in buf, "stream did not start")
    d.kill()
    t0 = time.monotonic()
    while b"data: [DONE]" not in buf:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    dt = time.monotonic() - t0
    s.close()
    check(b'"error"' in buf and b"data: [DONE]" in buf, "no error + [DONE]: %r" % buf[-300:])
    check(dt < 5, "error took %.1f s" % dt)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat())
    check(st == 503 and json.loads(b)["error"]["code"], "new request: %d %s" % (st, b))
    st, h, b = gw.request("GET", "/health")
    check(st == 503, "health while down: %d" % st)
    d.start()
    gw.wait_ready(15)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat())
    check(st == 200, "after restart: %d %s" % (st, b))
    print("   error reached the client %.0f ms after the kill" % (dt * 1000), flush=True)


def t_unix_socket(d, tmp):
    if not shutil.which("curl"):
        raise Skip("curl not found")
    path = os.path.join(tmp, "gw.sock")
    gw = Gateway.__new__(Gateway)
    gw.log_path = os.path.join(tmp, "gateway-unix.log")
    gw.log = open(gw.log_path, "wb")
    gw.proc = subprocess.Popen([os.path.join(ARGS.build, "bin/smollm3-gateway"), "--listen",
                                "unix:" + path, "--daemon", d.endpoint],
                               stdout=gw.log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        out = b""
        while time.monotonic() < deadline:
            r = subprocess.run(["curl", "-s", "--unix-socket", path, "http://x/health"],
                               capture_output=True)
            out = r.stdout
            if b'"ready":true' in out:
                break
            time.sleep(0.1)
        check(b'"ready":true' in out, "unix socket health: %r" % out)
        mode = os.stat(path).st_mode & 0o777
        check(mode == 0o660, "socket mode %o" % mode)
        r = subprocess.run(["curl", "-sN", "--unix-socket", path, "http://x/v1/chat/completions",
                            "-d", json.dumps(chat(stream=True))], capture_output=True)
        check(r.stdout.endswith(b"data: [DONE]\n\n"), "unix stream: %r" % r.stdout[-80:])
    finally:
        rc = gw.stop()
    check(rc == 0, "exit %s" % rc)
    check(not os.path.exists(path), "socket file left behind")


def t_sigterm(d, tmp):
    gw = Gateway(d.endpoint, tmp)
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.settimeout(10)
    body = json.dumps(chat(stream=True, max_tokens=3000))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body)).encode())
    buf = s.recv(65536)
    check(b"200 OK" in buf, "stream did not start")
    gw.proc.send_signal(signal.SIGTERM)
    while True:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    s.close()
    rc = gw.proc.wait(10)
    check(rc == 0, "exit status %s" % rc)
    check(b"data: [DONE]" in buf and b"shutting_down" in buf, "stream end: %r" % buf[-200:])
    time.sleep(0.3)
    check(d.stats()["requests_active"] == 0, "daemon request left running")


def t_idle_trim(d, tmp):
    """With no connection open the gateway hands freed heap back (malloc_trim),
    even while a UI stream nobody claimed waits its 30 s: a 1 MiB body must not
    stay resident (the api gateway's soak grew 12 % when refused stream GETs
    left such streams behind and the trim waited for them)."""
    gw = Gateway(d.endpoint, tmp, ["--request-timeout", "1"])
    try:
        big = b'{"messages":[{"role":"user","content":"' + b"x" * (1 << 20) + b'"}]}'

        def rss():
            with open("/proc/%d/status" % gw.proc.pid) as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

        def settle():           # idle connections close after 1 s; the trim runs once a second
            time.sleep(3.0)
            return rss()

        for _ in range(2):      # warm: the allocator's thresholds follow the first big body
            check(gw.request("POST", "/v1/chat/completions", big)[0] == 413, "big body not 413")
            check(gw.request("POST", "/v1/chat/completions", chat())[0] == 200, "chat failed")
        base = settle()
        st, _, b = ui_post(gw, conversation="abandoned")
        check(st == 200 and sid_of(b.decode()), "UI POST %d" % st)   # never claimed
        for _ in range(3):
            check(gw.request("POST", "/v1/chat/completions", big)[0] == 413, "big body not 413")
        after = settle()
        check(after - base < 512, "RSS %d KiB -> %d KiB (+%d) with an unclaimed UI stream after three"
              " 1 MiB bodies: freed memory not given back" % (base, after, after - base))
    finally:
        gw.stop()


def asan_build():
    with open(os.path.join(ARGS.build, "bin/smollm3-gateway"), "rb") as f:
        return b"__asan_init" in f.read()


def t_bad_flags():
    gwb = os.path.join(ARGS.build, "bin/smollm3-gateway")
    for args in ([], ["--listen", "127.0.0.1:1"], ["--listen", "nope", "--daemon", "ipc:///x"],
                 ["--listen", "127.0.0.1:0", "--daemon", "ipc:///x", "--max-body-bytes", "-5"],
                 ["--bogus"]):
        r = subprocess.run([gwb] + args, capture_output=True, timeout=10)
        check(r.returncode != 0, "accepted %r" % args)
    r = subprocess.run([gwb, "--help"], capture_output=True, timeout=10)
    check(r.returncode == 0 and b"--listen" in r.stdout, "--help")


# ---- the scripted fake daemon ---------------------------------------------

# Model text with carriage returns (the fake daemon's CRTEXT script): CRLF, lone CR, a CR ending
# one token and LF starting the next, and a token that, split only at LF, reads to an SSE parser as
# a blank line (the event ends), then `event: done` with data: the stream's end, early.
CR_TOKENS = (("r", "think\r\nhard\r"), ("r", "\n"),
             ("c", "a\r\nb"), ("c", "\r"), ("c", "c\rd"), ("c", "\r\r"), ("c", "x\r\revent: done\rdata: {}\r\r"),
             ("c", "e\r"), ("c", "\nf & <g>\r\n"), ("c", "tail"))


def sse_spec_events(raw):
    """An event stream read as a browser's EventSource reads it (WHATWG HTML, "Interpreting an
    event stream"): lines end at CRLF, LF or a lone CR; a blank line dispatches the event when its
    data is not empty; a field's value loses one leading space; data lines are joined with LF;
    an unterminated last event is dropped.  Returns [(type, data)]."""
    out, etype, data = [], "", []
    for line in re.split(r"\r\n|\r|\n", raw.decode("utf-8"))[:-1]:
        if line == "":
            if data:
                out.append((etype or "message", "\n".join(data)))
            etype, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            etype = value
        elif field == "data":
            data.append(value)
    return out

class FakeDaemon:
    """ROUTER on ipc:// answering health/stats/cancel and scripted Generates."""

    def __init__(self, path, pb2):
        import zmq
        self.zmq, self.pb = zmq, pb2
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = "ipc://" + path
        self.sock.bind(self.endpoint)
        self.running = True
        self.max_request_bytes = 0  # HealthReply.max_request_bytes (0: unknown)
        self.thinking = False       # HealthReply.thinking_supported (SmolLM2's daemon: no thinking mode)
        self.cancels = []
        self.out = []               # (when, ident, Event) to send
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def ev(self, rid, **kw):
        e = self.pb.Event(request_id=rid)
        for k, v in kw.items():
            getattr(e, k).CopyFrom(v)
        return e

    def script(self, ident, rid, g):
        pb = self.pb
        text = g.chat.messages[-1].content if g.WhichOneof("input") == "chat" and g.chat.messages else ""
        now = time.monotonic()
        evs = []
        usage = pb.Usage(prompt_tokens=10, cached_tokens=4, completion_tokens=5,
                         reasoning_tokens=3)
        if "BUSY" in text:
            evs.append(self.ev(rid, error=pb.Error(code=pb.ERROR_QUEUE_FULL, message="queue full")))
        else:
            evs.append(self.ev(rid, started=pb.Started(prompt_tokens=10, cached_tokens=4,
                                                       thinking=True)))
            if "TOOLS" in text:
                evs.append(self.ev(rid, tool_call=pb.ToolCall(
                    index=0, id="call_1_0", name="get_weather", arguments_json='{"city":"Paris"}')))
                evs.append(self.ev(rid, done=pb.Done(finish_reason=pb.FINISH_REASON_TOOL_CALLS,
                                                     usage=usage)))
            elif "CRTEXT" in text:
                for ch, t in CR_TOKENS:
                    evs.append(self.ev(rid, token=pb.Token(
                        text=t, token_id=3,
                        channel=pb.CHANNEL_REASONING if ch == "r" else pb.CHANNEL_CONTENT)))
                evs.append(self.ev(rid, done=pb.Done(finish_reason=pb.FINISH_REASON_STOP,
                                                     usage=usage)))
            elif "MIDERROR" in text:
                evs.append(self.ev(rid, token=pb.Token(text="partial", token_id=5)))
                evs.append(self.ev(rid, error=pb.Error(code=pb.ERROR_INTERNAL, message="boom")))
            else:
                for t in ("Let", " me", " think"):
                    evs.append(self.ev(rid, token=pb.Token(text=t, token_id=1,
                                                           channel=pb.CHANNEL_REASONING)))
                for t in ("<b>Hi", "</b>", "\nthere"):
                    evs.append(self.ev(rid, token=pb.Token(text=t, token_id=2,
                                                           channel=pb.CHANNEL_CONTENT)))
                evs.append(self.ev(rid, done=pb.Done(finish_reason=pb.FINISH_REASON_STOP,
                                                     usage=usage, service_tier=g.service_tier)))
        gap = 0.15 if "SLOW" in text else 0.0
        with self.lock:
            for i, e in enumerate(evs):
                when = now + i * gap
                if "STALL" in text and i > 0:
                    when = now + 2.5      # silent after `started`: pings
                self.out.append((when, ident, e))

    def stored_response(self, req, kind):
        """The daemon's stored Responses (proto StoredResponse), in a dict
        keyed by (tenant, id), at most 64 per tenant: store, get with its
        chain, delete, list."""
        pb, rid = self.pb, req.request_id
        store = self.__dict__.setdefault("responses", {})
        q = getattr(req, kind)
        unknown = self.ev(rid, error=pb.Error(code=pb.ERROR_UNKNOWN_SESSION, message="no stored response"))
        if kind == "response_store":
            r = pb.StoredResponse()
            r.CopyFrom(q.response)
            r.created_at = int(time.time())
            store.pop((q.tenant, r.id), None)
            store[(q.tenant, r.id)] = r
            mine = [k for k in store if k[0] == q.tenant]
            for k in mine[:max(0, len(mine) - 64)]:     # bounded per tenant, the oldest dropped
                del store[k]
            return self.ev(rid, ack=pb.Ack())
        if kind == "response_delete":
            return self.ev(rid, ack=pb.Ack()) if store.pop((q.tenant, q.id), None) else unknown
        if kind == "response_list":
            return self.ev(rid, responses=pb.StoredResponses(responses=[
                pb.StoredResponse(id=i) for (t, i) in store if t == q.tenant]))
        out, i = [], q.id
        while i and (q.tenant, i) in store and len(out) <= q.chain:
            out.append(store[(q.tenant, i)])
            i = out[-1].previous_response_id
        return self.ev(rid, responses=pb.StoredResponses(responses=out)) if out else unknown

    def loop(self):
        zmq, pb = self.zmq, self.pb
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while self.running:
            for _ in dict(poller.poll(10)):
                frames = self.sock.recv_multipart()
                ident, data = frames[0], frames[-1]
                req = pb.Request()
                req.ParseFromString(data)
                kind = req.WhichOneof("kind")
                if kind == "health":
                    r = self.ev(req.request_id, health=pb.HealthReply(
                        ready=True, model="fake", protocol_version=1, max_request_bytes=self.max_request_bytes,
                        thinking_supported=self.thinking))
                    self.sock.send_multipart([ident, r.SerializeToString()])
                elif kind == "stats":
                    r = self.ev(req.request_id, stats=getattr(self, "stats_reply", None) or
                                pb.StatsReply(requests_queued=2))
                    self.sock.send_multipart([ident, r.SerializeToString()])
                elif kind == "cancel":
                    self.cancels.append(req.cancel.target_request_id)
                    r = self.ev(req.request_id, ack=pb.Ack())
                    self.sock.send_multipart([ident, r.SerializeToString()])
                elif kind == "generate":
                    self.script(ident, req.request_id, req.generate)
                elif kind == "response_store" and getattr(self, "store_silent", False):
                    pass                # a daemon that never answers (test_responses: the gateway gives up)
                elif kind.startswith("response_"):
                    r = self.stored_response(req, kind)
                    self.sock.send_multipart([ident, r.SerializeToString()])
            now = time.monotonic()
            with self.lock:
                due = [x for x in self.out if x[0] <= now]
                self.out = [x for x in self.out if x[0] > now]
            for _, ident, e in due:
                self.sock.send_multipart([ident, e.SerializeToString()])

    def close(self):
        self.running = False
        self.thread.join(2)
        self.sock.close()
        self.ctx.term()


def t_fake_reasoning(gw, fd):
    st, h, chunks = read_stream(gw, chat("go", stream=True, stream_options={"include_usage": True}))
    cs = openai_chunks(b"".join(c for _, c in chunks))
    deltas = [c["choices"][0]["delta"] for c in cs if c["choices"]]
    check(deltas[0] == {"role": "assistant", "content": ""}, "first %r" % deltas[0])
    reasoning = "".join(x.get("reasoning_content", "") for x in deltas)
    content = "".join(x.get("content", "") for x in deltas)
    check(reasoning == "Let me think", "reasoning %r" % reasoning)
    check(content == "<b>Hi</b>\nthere", "content %r" % content)
    order = [("r" if "reasoning_content" in x else "c") for x in deltas[1:] if x]
    check(order == ["r"] * 3 + ["c"] * 3, "order %r" % order)
    u = cs[-1]["usage"]
    check(u["completion_tokens_details"]["reasoning_tokens"] == 3 and
          u["prompt_tokens_details"]["cached_tokens"] == 4 and u["total_tokens"] == 15, "usage %r" % u)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat("go"))
    m = json.loads(b)["choices"][0]["message"]
    check(m["reasoning_content"] == "Let me think" and m["content"] == "<b>Hi</b>\nthere",
          "non-streaming split %r" % m)
    try:
        import openai
        cl = openai.OpenAI(base_url=gw.url("/v1"), api_key="none", max_retries=0)
        r = cl.chat.completions.create(model="fake", messages=[{"role": "user", "content": "go"}])
        check(r.choices[0].message.model_extra.get("reasoning_content") == "Let me think",
              "sdk reasoning_content")
    except ImportError:
        pass


def t_fake_tools(gw, fd):
    st, h, chunks = read_stream(gw, chat("TOOLS", stream=True))
    cs = openai_chunks(b"".join(c for _, c in chunks))
    tc = [c["choices"][0]["delta"]["tool_calls"] for c in cs
          if "tool_calls" in c["choices"][0]["delta"]]
    check(len(tc) == 1, "tool call deltas %r" % tc)
    check(tc[0][0] == {"index": 0, "id": "call_1_0", "type": "function",
                       "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
          "tool call %r" % tc[0])
    check(cs[-1]["choices"][0]["finish_reason"] == "tool_calls", "finish")
    st, h, b = gw.request("POST", "/v1/chat/completions", chat("TOOLS"))
    j = json.loads(b)
    check(j["choices"][0]["finish_reason"] == "tool_calls" and
          j["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather",
          "non-streaming tools %s" % b)


def t_fake_errors(gw, fd):
    st, h, b = gw.request("POST", "/v1/chat/completions", chat("BUSY", stream=True))
    check(st == 429 and json.loads(b)["error"]["code"] == "queue_full", "queue full: %d %s"
          % (st, b))
    st, h, b = gw.request("POST", "/v1/chat/completions", chat("BUSY"))
    check(st == 429, "queue full non-streaming: %d" % st)
    st, h, chunks = read_stream(gw, chat("MIDERROR", stream=True))
    raw = b"".join(c for _, c in chunks)
    evs = sse_events(raw)
    check(evs[-1] == ("message", "[DONE]"), "no [DONE] after error")
    e = json.loads(evs[-2][1])
    check(e["error"]["message"] == "boom" and e["error"]["type"] == "server_error", "error %r" % e)
    st, h, b = gw.request("POST", "/v1/chat/completions", chat("MIDERROR"))
    check(st == 500, "error non-streaming: %d %s" % (st, b))


def t_fake_pacing(gw, fd):
    st, h, chunks = read_stream(gw, chat("SLOW", stream=True))
    times = [t for t, c in chunks if b"content" in c or b"reasoning" in c]
    check(len(times) >= 5, "token chunks arrived together (%d reads)" % len(times))
    check(times[-1] - times[0] > 0.5, "spread only %.2f s" % (times[-1] - times[0]))


def t_fake_ping(gw, fd):
    st, h, chunks = read_stream(gw, chat("STALL", stream=True))
    evs = sse_events(b"".join(c for _, c in chunks))
    pings = [v for k, v in evs if k == "comment"]
    check(len(pings) >= 1 and pings[0] == ": ping", "no ': ping' during 2.5 s idle: %r" % evs[:4])
    check(evs[-1] == ("message", "[DONE]"), "stream did not finish after pings")


def t_fake_ui(gw, fd):
    # the fake daemon's health reply says no thinking mode (as SmolLM2's daemon does): the UI
    # config says so, so the page hides its Think switch
    st, h, b = gw.request("GET", "/ui/config")
    check(st == 200 and json.loads(b)["thinking_supported"] is False and json.loads(b)["model"] == "fake",
          "config from a daemon without thinking: %s" % b)
    st, h, b = ui_post(gw, message="go")
    sid = sid_of(b.decode())
    st, h, chunks = read_stream(gw, None, path="/ui/stream/" + sid, method="GET")
    evs = sse_events(b"".join(c for _, c in chunks))
    rs = "".join(v for k, v in evs if k == "reasoning")
    cs = "\n".join(v for k, v in evs if k == "content")
    check(rs == "Let me think", "ui reasoning %r" % rs)
    check("&lt;b&gt;Hi" in cs and "<b>" not in cs, "ui content not escaped %r" % cs)
    raw = b"".join(c for _, c in chunks).decode()
    check("event: content\ndata: \ndata: there\n\n" in raw, "multi-line data: %r" % raw)
    check(evs[-1][0] == "done" and json.loads(evs[-1][1])["finish_reason"] == "stop", "done")
    st, h, b = ui_post(gw, message="MIDERROR")
    sid = sid_of(b.decode())
    st, h, chunks = read_stream(gw, None, path="/ui/stream/" + sid, method="GET")
    evs = sse_events(b"".join(c for _, c in chunks))
    check([k for k, _ in evs][-2:] == ["error", "done"] and evs[-2][1] == "boom", "ui error %r"
          % evs[-2:])


def t_fake_ui_cr(gw, fd):
    # model text with CRs through the UI stream: each CR an entity (&#13;), every line of a data
    # field its own `data:` line, so the events read as a browser reads them carry the text back,
    # CRs included, byte for byte (the UI appends each event's HTML: the text is the
    # concatenation, html.unescape reads &#13; as CR as an HTML parser does); one `done`, last
    import html
    st, h, b = ui_post(gw, message="CRTEXT")
    sid = sid_of(b.decode())
    st, h, chunks = read_stream(gw, None, path="/ui/stream/" + sid, method="GET")
    raw = b"".join(c for _, c in chunks)
    check(st == 200 and raw.endswith(b"\n\n"), "ui stream %d %r" % (st, raw[-40:]))
    evs = sse_spec_events(raw)
    names = [k for k, _ in evs]
    check(names.count("done") == 1 and names[-1] == "done", "events %r" % evs)
    check(json.loads(evs[-1][1])["finish_reason"] == "stop", "done %r" % evs[-1:])
    for ch, name in (("r", "reasoning"), ("c", "content")):
        want = "".join(t for c, t in CR_TOKENS if c == ch)
        got = "".join(html.unescape(v) for k, v in evs if k == name)
        check(got == want, "%s read back %r, sent %r" % (name, got, want))
    check(all(k in ("reasoning", "content", "done") for k in names), "event names %r" % names)
    check(b"\r" not in raw, "a raw CR in the event stream: %r" % raw)
    # the bytes themselves (tests/web/ui.test.mjs serves these to the browser for the same text)
    esc = lambda t: html.escape(t).replace("&#x27;", "&#39;").replace("\r", "&#13;")  # noqa: E731
    want = "".join("event: %s\n%s\n" % ("reasoning" if ch == "r" else "content",
                                         "".join("data: %s\n" % ln for ln in esc(t).split("\n")))
                   for ch, t in CR_TOKENS)
    check(raw.decode().startswith(want + "event: done\n"), "stream %r, not %r" % (raw, want))


# ---- main ------------------------------------------------------------------

def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pb2-dir", default=None)
    ap.add_argument("filter", nargs="*")
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    want = lambda n: not ARGS.filter or any(f in n for f in ARGS.filter)  # noqa: E731
    tmp = tempfile.mkdtemp(prefix="smollm3-gw-test-")
    d = gw = None
    try:
        d = Daemon(os.path.join(tmp, "d.sock"))
        # resume off: daemon_killed checks the error a stream ends with when its daemon is gone
        # and nothing resumes it (resume: test_resume.py)
        gw = Gateway(d.endpoint, tmp, ["--resume-timeout", "0"])
        for name, fn in (("health_models", t_health_models), ("sse_framing", t_sse_framing),
                         ("curl_sse", t_curl_sse), ("incremental", t_incremental),
                         ("non_streaming", t_non_streaming), ("speculative", t_speculative),
                         ("params", t_params_accepted),
                         ("openai_sdk", t_openai_sdk), ("structured", t_structured), ("disconnect_cancels", t_disconnect_cancels),
                         ("bad_input", t_bad_input), ("ui", t_ui), ("load", t_load),
                         ("metrics", t_metrics), ("daemon_killed", t_daemon_killed)):
            if want(name):
                run_test(name, fn, gw, d)
        for name, fn in (("too_many_connections", t_too_many_connections),
                         ("max_inflight", t_max_inflight), ("unix_socket", t_unix_socket),
                         ("sigterm", t_sigterm), ("idle_trim", t_idle_trim)):
            if name == "idle_trim" and want(name) and asan_build():
                print("SKIPPED idle_trim: an ASan build's allocator (quarantine, no malloc_trim) keeps freed"
                      " memory, so RSS does not show what is live", flush=True)
                continue
            if want(name):
                run_test(name, fn, d, tmp)
        if want("bad_flags"):
            run_test("bad_flags", t_bad_flags)
        rc = gw.stop()
        if want("clean_exit"):
            run_test("clean_exit", lambda: check(rc == 0, "gateway exit status %s" % rc))
        gw = None
        d.stop()
        d = None
        fake_tests = [(n, f) for n, f in (("fake_reasoning", t_fake_reasoning),
                                          ("fake_tools", t_fake_tools),
                                          ("fake_errors", t_fake_errors),
                                          ("fake_pacing", t_fake_pacing),
                                          ("fake_ping", t_fake_ping),
                                          ("fake_ui", t_fake_ui),
                                          ("fake_ui_cr", t_fake_ui_cr)) if want(n)]
        if fake_tests:
            pb2 = None
            try:
                import zmq  # noqa: F401
                sys.path.insert(0, ARGS.pb2_dir or "")
                import smollm3_pb2 as pb2
            except ImportError as e:
                for n, _ in fake_tests:
                    RESULTS["fail"] += 1
                    print("FAIL %s: cannot run: %s" % (n, e), flush=True)
            if pb2:
                fd = FakeDaemon(os.path.join(tmp, "fake.sock"), pb2)
                gw = Gateway(fd.endpoint, tmp, ["--ping-interval", "1"])
                for n, f in fake_tests:
                    run_test(n, f, gw, fd)
                gw.stop()
                gw = None
                fd.close()
    except Exception as e:  # noqa: BLE001
        RESULTS["fail"] += 1
        print("FAIL setup: %s" % e, flush=True)
        traceback.print_exc()
    finally:
        if gw:
            if RESULTS["fail"]:
                print("--- gateway log ---\n" + gw.log_tail(), flush=True)
            gw.stop()
        if d:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (RESULTS["pass"], RESULTS["fail"]), flush=True)
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
