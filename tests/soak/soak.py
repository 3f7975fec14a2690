#!/usr/bin/env python3
"""soak.py - a bounded soak of the whole stack on the real SmolLM2-135M.

Starts smollm3d (MODEL), smollm3-gateway (loopback TCP) and nginx with the
shipped site (deploy/nginx/smollm3.conf, local paths: what `make run` does),
all in a fresh temporary directory, then sends SECONDS of mixed traffic to
127.0.0.1 through nginx from WORKERS threads:

  stream     POST /v1/chat/completions stream=true: every data: line is a
             chunk, the stream ends with [DONE] (after an error chunk at most)
  json       the same, stream=false: one chat.completion
  session    a 3-turn conversation under one session_id (history sent back)
  cancel     a stream dropped by the client after its first token
  ui         POST /ui/chat (the HTMX fragment) then GET /ui/stream/SID to `done`
  abandon    POST /ui/chat, then the client goes away without its stream
             (a closed tab): the gateway holds the unclaimed stream 30 s.
             Sent by one more client (key "tabcloser") for all workers: when
             it holds --ui-unclaimed-per-key unclaimed streams its next POST
             is a 429 naming them (the bound working, counted in /metrics);
             the workers' own UI chats are never refused for its streams
  malformed  bad JSON / fields / methods / routes / sizes / ids, no or a
             wrong API key: must be 4xx (a 429 is not: see below)
  probe      GET /health, /v1/models

Each worker is one client with its own API key (the gateway runs with
--api-key-file), as users of a deployment are: the shipped site's limits
(10 requests/s per key, bursts of 40; 50/s per address) apply unchanged, and
no worker may meet them: a 429 is an unexpected error.  At the end each
key's request counter in /metrics must equal what its worker sent.

Halfway through, smollm3d is restarted (SIGTERM: it drains and exits; a new
one starts).  From the SIGTERM until /health is 200 again (+ a grace) a
valid request may fail with a 503 or end its stream with an error chunk;
anywhere else any failure is unexpected.  Every stream must be terminated.

RSS (VmRSS) and open fds of the gateway and of each daemon instance are
read from /proc at quiet points (traffic paused, in-flight requests done,
idle upstream connections timed out): after a warm-up and at the end of
each daemon's life.  Growth must stay under 2 %.

Prints a table of requests by kind, the RSS/fd figures, and
"soak: N passed, N failed" (one per check); exits 1 on any failure.
Traffic goes only to 127.0.0.1, bounded by SECONDS.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KINDS = ["stream", "json", "session", "cancel", "ui", "abandon", "malformed", "probe"]
WEIGHTS = [30, 15, 12, 10, 10, 3, 15, 8]
PACE = 8    # requests a second a worker sends at most, and 40 from all together (send)
PROMPTS = ["What is the capital of France?", "Tell me a short joke.", "Name three colors.",
           "Write a haiku about the sea.", "What is 2 + 2?", "Say hello in Spanish.",
           "Give me a fun fact about cats.", "What does CPU stand for?"]
GROWTH_LIMIT = 0.02


def now():
    return time.monotonic()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_stats(pid):
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid))


class Stack:
    def __init__(self, args, tmp):
        self.a, self.tmp = args, tmp
        self.dsock = os.path.join(tmp, "d.sock")
        self.gw_port, self.port = free_port(), free_port()
        self.daemon = self.gateway = self.nginx = None
        self.daemon_n = 0
        # one API key per worker (a client of the deployment), named workerN
        self.keys = ["soak-%d-%s" % (i, os.urandom(8).hex()) for i in range(args.workers)]
        self.keyfile = os.path.join(tmp, "api-keys")
        # the client that closes its tabs (abandon): unclaimed streams bounded per key, not the workers'
        self.tab_key = "soak-tabs-%s" % os.urandom(8).hex()
        with open(self.keyfile, "w") as f:
            f.write("# soak clients\n" + "".join("%s worker%d tenant=worker%d\n" % (k, i, i)
                                                  for i, k in enumerate(self.keys)) +
                    "%s tabcloser tenant=tabcloser\n" % self.tab_key)
        self.secretfile = os.path.join(tmp, "tenant-secret")
        with open(self.secretfile, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secretfile, 0o600)

    def start_daemon(self):
        self.daemon_n += 1
        log = open(os.path.join(self.tmp, "daemon%d.log" % self.daemon_n), "wb")
        self.daemon = subprocess.Popen(
            [os.path.join(self.a.build, "bin/smollm3d"), "--model", self.a.model,
             "--listen", "ipc://" + self.dsock, "--threads", str(self.a.threads),
             "--kv-budget-mb", "256", "--ctx", "2048", "--max-queued", "256",
             "--drain-grace-ms", "1500", "--default-max-tokens", "64", "--log-level", "notice"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    def start(self):
        self.start_daemon()
        glog = open(os.path.join(self.tmp, "gateway.log"), "wb")
        # idle connections close after 2 s (the quiet points wait for that);
        # streams get a ping every 1 s, so a waiting stream is never idle
        self.gateway = subprocess.Popen(
            [os.path.join(self.a.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:%d" % self.gw_port,
             "--daemon", "ipc://" + self.dsock, "--request-timeout", "2", "--ping-interval", "1",
             "--api-key-file", self.keyfile, "--tenant-secret-file", self.secretfile],
            stdout=glog, stderr=subprocess.STDOUT, cwd=ROOT)
        self.start_nginx()
        if not self.wait_healthy(120):
            raise RuntimeError("the stack never became healthy:\n" + self.logs())

    def start_nginx(self):
        n = os.path.join(self.tmp, "nginx")
        os.makedirs(os.path.join(n, "logs"))
        os.makedirs(os.path.join(n, "tmp"))
        # the shipped site with local paths, as deploy/run.sh writes it (here
        # the gateway listens on loopback TCP rather than a Unix socket)
        site = open(os.path.join(ROOT, "deploy/nginx/smollm3.conf")).read()
        site = re.sub(r"(?m)^( *)listen (127\.0\.0\.1:)?80\b", r"\g<1>listen 127.0.0.1:%d" % self.port, site)
        site = (re.sub(r"(?m)^ *listen \[::1?\]:80\b[^;]*;\n", "", site)
                .replace("/usr/share/smollm3d/web", os.path.join(ROOT, "web"))
                .replace("unix:/run/smollm3-gateway/gateway.sock", "127.0.0.1:%d" % self.gw_port))
        if getattr(self.a, "no_rate_limit", False):   # tests/load: the server's pace, not the limiter's
            site = "\n".join(l for l in site.split("\n") if "limit_req zone=" not in l)
        open(os.path.join(n, "site.conf"), "w").write(site)
        user = "user root root;" if os.getuid() == 0 else ""
        open(os.path.join(n, "nginx.conf"), "w").write("""%s
worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/logs/error.log warn;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path %s/tmp/body;
    proxy_temp_path %s/tmp/proxy;
    fastcgi_temp_path %s/tmp/fastcgi;
    uwsgi_temp_path %s/tmp/uwsgi;
    scgi_temp_path %s/tmp/scgi;
    include %s/site.conf;
}
""" % ((user,) + (n,) * 8))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.nginx = subprocess.Popen([nginx, "-p", n, "-c", n + "/nginx.conf", "-e", n + "/logs/error.log"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/health")
            st = c.getresponse().status
            c.close()
            return st
        except OSError:
            return 0

    def wait_healthy(self, secs):
        end = now() + secs
        while now() < end:
            if self.health() == 200:
                return True
            for p in (self.daemon, self.gateway, self.nginx):
                if p and p.poll() is not None:
                    return False
            time.sleep(0.2)
        return False

    def restart_daemon(self):
        self.daemon.send_signal(signal.SIGTERM)
        try:
            rc = self.daemon.wait(60)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            rc = self.daemon.wait()
        self.start_daemon()
        return rc

    def stop(self):
        for p in (self.nginx, self.gateway, self.daemon):
            if p and p.poll() is None:
                p.terminate()
        for p in (self.nginx, self.gateway, self.daemon):
            if p:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs(self):
        out = []
        for f in sorted(os.listdir(self.tmp)):
            if f.endswith(".log"):
                out.append("--- %s\n%s" % (f, open(os.path.join(self.tmp, f), errors="replace").read()[-2000:]))
        return "\n".join(out)


class Soak:
    def __init__(self, stack, args):
        self.s, self.a = stack, args
        self.lock = threading.Lock()
        self.stats = {k: {"n": 0, "ok": 0, "restart": 0, "bad": 0, "t": 0.0} for k in KINDS}
        self.unexpected = []
        self.unterminated = 0
        self.window = None            # (start, end or None): the restart window
        self.run = threading.Event()  # set: traffic flows
        self.stop = threading.Event()
        self.inflight = 0
        # a session / UI conversation is used by one client at a time (as a
        # chat UI does): taken from its pool for a request, then given back
        self.session_pool = ["soak-%d" % i for i in range(16)]
        self.conv_pool = ["soak%d" % i for i in range(8)]
        self.me = threading.local()   # the worker: .key (its API key), .i (its index)
        self.key_sent = [0] * args.workers  # requests each worker sent with its key
        self.tabs_refused = 0         # abandon POSTs refused: tabcloser at its unclaimed streams' bound

    def take(self, pool):
        with self.lock:
            return pool.pop(random.randrange(len(pool)))

    def give(self, pool, x):
        with self.lock:
            pool.append(x)

    # ---- bookkeeping
    def in_window(self, t0, t1):
        w = self.window
        return w is not None and t1 >= w[0] and (w[1] is None or t0 <= w[1])

    def record(self, kind, t0, ok, why=""):
        t1 = now()
        with self.lock:
            st = self.stats[kind]
            st["n"] += 1
            st["t"] += t1 - t0
            if ok:
                st["ok"] += 1
            elif self.in_window(t0, t1):
                st["restart"] += 1
            else:
                st["bad"] += 1
                if len(self.unexpected) < 30:
                    self.unexpected.append("%s at %.1fs: %s" % (kind, t1 - self.t_start, why[:300]))

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=timeout)

    def send(self, c, method, path, body=None, headers=None, auth=True):
        """c.request with the worker's API key (auth=False: none; a string: that header), at most
        PACE requests a second from each worker and 40 from all: clients within the shipped site's
        limits (10/s a key, 50/s an address), however fast the machine answers."""
        t, nxt = now(), getattr(self.me, "next_send", 0.0)
        if t < nxt:
            time.sleep(nxt - t)
        self.me.next_send = max(t, nxt) + 1.0 / min(PACE, 40.0 / self.a.workers)
        h = dict(headers or {})
        if auth is True:
            h["Authorization"] = "Bearer " + self.me.key
            with self.lock:
                self.key_sent[self.me.i] += 1
        elif auth:
            h["Authorization"] = auth
        c.request(method, path, body, h)

    def post_json(self, c, path, body):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        self.send(c, "POST", path, data, {"Content-Type": "application/json"})
        return c.getresponse()

    # ---- SSE reading
    def read_openai_sse(self, r, stop_after_first=False):
        """Returns (terminated, error_chunk, text, n_chunks); raises on a malformed line."""
        text, n, err = [], 0, None
        while True:
            line = r.readline()
            if not line:
                return False, err, "".join(text), n
            line = line.rstrip(b"\r\n")
            if not line or line.startswith(b":"):
                continue
            if not line.startswith(b"data: "):
                raise ValueError("not an SSE data line: %r" % line[:100])
            payload = line[6:]
            if payload == b"[DONE]":
                return True, err, "".join(text), n
            j = json.loads(payload)
            if "error" in j:
                err = j["error"]
                continue
            if err is not None:
                raise ValueError("a chunk after the error chunk")
            n += 1
            ch = j["choices"][0] if j.get("choices") else {}
            d = ch.get("delta") or {}
            text.append(d.get("content") or "")
            if stop_after_first and (d.get("content") or d.get("reasoning_content")):
                return None, None, "".join(text), n

    def chat_body(self, msgs, stream, **kw):
        b = {"model": "smollm2", "messages": msgs, "stream": stream,
             "max_tokens": random.randint(8, 40), "temperature": random.choice([0, 0.7, 1.0])}
        b.update(kw)
        return b

    # ---- traffic kinds: each returns (ok, why)
    def k_stream(self):
        c = self.conn()
        try:
            r = self.post_json(c, "/v1/chat/completions",
                               self.chat_body([{"role": "user", "content": random.choice(PROMPTS)}], True,
                                              stream_options={"include_usage": True}))
            if r.status != 200:
                return False, "status %d %s" % (r.status, r.read()[:200])
            term, err, _, n = self.read_openai_sse(r)
            if not term:
                with self.lock:
                    self.unterminated += 1
                return False, "stream not terminated ([DONE] missing) after %d chunks" % n
            if err is not None:
                return False, "error chunk: %s" % err
            return (n > 0), "no chunks"
        finally:
            c.close()

    def k_json(self):
        c = self.conn()
        try:
            r = self.post_json(c, "/v1/chat/completions",
                               self.chat_body([{"role": "user", "content": random.choice(PROMPTS)}], False))
            b = r.read()
            if r.status != 200:
                return False, "status %d %s" % (r.status, b[:200])
            j = json.loads(b)
            ok = j["object"] == "chat.completion" and j["choices"][0]["message"]["role"] == "assistant"
            return ok, "bad completion %s" % b[:200]
        finally:
            c.close()

    def k_session(self):
        sid = self.take(self.session_pool)
        try:
            return self.session_turns(sid)
        finally:
            self.give(self.session_pool, sid)

    def session_turns(self, sid):
        msgs = [{"role": "system", "content": "You are brief."}]
        c = self.conn()
        try:
            for turn in range(3):
                msgs.append({"role": "user", "content": random.choice(PROMPTS)})
                stream = turn == 1
                r = self.post_json(c, "/v1/chat/completions",
                                   self.chat_body(msgs, stream, session_id=sid, max_tokens=16))
                if r.status != 200:
                    return False, "turn %d: status %d %s" % (turn, r.status, r.read()[:200])
                if stream:
                    term, err, text, _ = self.read_openai_sse(r)
                    r.read()               # the chunked end, so the connection can be reused
                    if not term:
                        with self.lock:
                            self.unterminated += 1
                        return False, "turn %d: stream not terminated" % turn
                    if err is not None:
                        return False, "turn %d: error chunk %s" % (turn, err)
                else:
                    text = json.loads(r.read())["choices"][0]["message"]["content"] or ""
                msgs.append({"role": "assistant", "content": text})
            return True, ""
        finally:
            c.close()

    def k_cancel(self):
        c = self.conn()
        try:
            r = self.post_json(c, "/v1/chat/completions",
                               self.chat_body([{"role": "user", "content": "Write a long story about a dragon."}],
                                              True, max_tokens=400))
            if r.status != 200:
                return False, "status %d %s" % (r.status, r.read()[:200])
            term, err, _, n = self.read_openai_sse(r, stop_after_first=True)
            if term is False:
                with self.lock:
                    self.unterminated += 1
                return False, "stream ended before its first token, unterminated"
            if err is not None:
                return False, "error chunk %s" % err
            # the client goes away mid-stream
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True, ""
        finally:
            c.close()

    def k_ui(self):
        conv = self.take(self.conv_pool)
        try:
            return self.ui_turn(conv)
        finally:
            self.give(self.conv_pool, conv)

    def ui_post(self, c, form, auth=True):
        """POST /ui/chat: (the stream's SID, "") or (None, why)."""
        self.send(c, "POST", "/ui/chat", form, {"Content-Type": "application/x-www-form-urlencoded"}, auth)
        r = c.getresponse()
        b = r.read().decode(errors="replace")
        if r.status != 200:
            return None, "POST /ui/chat %d %s" % (r.status, b[:200])
        i = b.find('sse-connect="/ui/stream/')
        if i < 0:
            return None, "no stream in the fragment"
        return b[i + len('sse-connect="/ui/stream/'):].split('"')[0], ""

    def k_abandon(self):
        conv = self.take(self.conv_pool)
        form = urllib.parse.urlencode({"conversation": conv, "history": "[]", "message": random.choice(PROMPTS),
                                       "think": "0", "temperature": "0.6"})
        c = self.conn()
        try:
            sid, why = self.ui_post(c, form, "Bearer " + self.s.tab_key)
            if sid is None and why.startswith("POST /ui/chat 429") and "chats are waiting to be read" in why:
                with self.lock:
                    self.tabs_refused += 1
                return True, ""
            return sid is not None, why
        finally:
            c.close()
            self.give(self.conv_pool, conv)

    def ui_turn(self, conv):
        form = urllib.parse.urlencode({"conversation": conv, "history": "[]", "message": random.choice(PROMPTS),
                                       "think": "0", "temperature": "0.6"})
        c = self.conn()
        try:
            sid, why = self.ui_post(c, form)
            if sid is None:
                return False, why
            # as a browser's EventSource: no Authorization header, the SID authorises it
            self.send(c, "GET", "/ui/stream/" + sid, headers={"Accept": "text/event-stream"}, auth=False)
            r = c.getresponse()
            if r.status != 200:
                return False, "GET /ui/stream %d" % r.status
            event, error = None, None
            while True:
                line = r.readline()
                if not line:
                    with self.lock:
                        self.unterminated += 1
                    return False, "UI stream not terminated (no done event)"
                line = line.rstrip(b"\r\n")
                if line.startswith(b"event: "):
                    event = line[7:].decode()
                    if event == "done":
                        break
                elif line.startswith(b"data: ") and event == "error":
                    error = (error or "") + line[6:].decode(errors="replace")
            return error is None, "UI stream error event: %s" % error
        finally:
            c.close()

    def k_malformed(self):
        big = b'{"messages":[{"role":"user","content":"' + b"x" * (1 << 20) + b'"}]}'
        ok_body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
        cases = [
            ("POST", "/v1/chat/completions", ok_body, "application/json", False),
            ("POST", "/v1/chat/completions", ok_body, "application/json", "Bearer not-a-soak-key"),
            ("GET", "/v1/models", None, None, "Basic c29hazpzb2Fr"),
            ("POST", "/v1/chat/completions", b'{"messages": [', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages": []}', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"hi"}],"temperature":5}', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages":[{"role":"robot","content":"hi"}]}', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":42}]}', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"hi"}],"n":17}', "application/json"),
            ("POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"hi"}],"session_id":"a b"}', "application/json"),
            ("POST", "/v1/chat/completions", b'\xff\xfe{}', "application/json"),
            ("GET", "/v1/chat/completions", None, None),
            ("POST", "/v1/nothing-here", b"{}", "application/json"),
            ("POST", "/ui/chat", b"conversation=bad%20id&message=hi", "application/x-www-form-urlencoded"),
            ("POST", "/ui/chat", b"conversation=c1&message=", "application/x-www-form-urlencoded"),
            ("GET", "/ui/stream/nosuchstream", None, None),
            ("POST", "/v1/chat/completions", big, "application/json"),
        ]
        weights = [1] * (len(cases) - 1) + [0.2]
        case = random.choices(cases, weights)[0]
        method, path, body, ctype = case[:4]
        auth = case[4] if len(case) > 4 else True
        c = self.conn()
        try:
            self.send(c, method, path, body, {"Content-Type": ctype} if ctype else {}, auth)
            r = c.getresponse()
            r.read()
            if auth is not True:
                return r.status == 401, "%s %s with Authorization %r -> %d (want 401)" % (method, path, auth, r.status)
            return 400 <= r.status < 500 and r.status != 429, "%s %s -> %d (want 4xx, not 429)" % (
                method, path, r.status)
        finally:
            c.close()

    def k_probe(self):
        c = self.conn(10)
        try:
            path = random.choice(["/health", "/v1/models"])
            self.send(c, "GET", path, auth=path != "/health")
            r = c.getresponse()
            b = r.read()
            return r.status == 200, "GET %s -> %d %s" % (path, r.status, b[:100])
        finally:
            c.close()

    def key_counters(self):
        """({worker index: smollm3_gateway_tenant_requests_total}, {refusal reason: count}) from /metrics
        (through nginx, loopback)."""
        c = self.conn(10)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            text = r.read().decode(errors="replace")
        finally:
            c.close()
        got, refused = {}, {}
        for line in text.splitlines():
            if line.startswith('smollm3_gateway_tenant_requests_total{tenant="worker'):
                name, _, v = line.partition("} ")
                got[int(name.split('"worker')[1].rstrip('"'))] = int(float(v))
            elif line.startswith('smollm3_gateway_refusals_total{reason="'):
                name, _, v = line.partition("} ")
                refused[name.split('"')[1]] = int(float(v))
        return got, refused

    # ---- workers
    def worker(self, seed):
        rnd = random.Random(seed)
        self.me.i, self.me.key = seed, self.s.keys[seed]
        while not self.stop.is_set():
            if not self.run.wait(0.2):
                continue
            kind = rnd.choices(KINDS, WEIGHTS)[0]
            with self.lock:
                self.inflight += 1
            t0 = now()
            try:
                ok, why = getattr(self, "k_" + kind)()
            except Exception as e:  # noqa: BLE001 - any failure of a request is recorded
                ok, why = False, "%s: %s" % (type(e).__name__, e)
            self.record(kind, t0, ok, why)
            with self.lock:
                self.inflight -= 1
            if not ok:
                time.sleep(0.25)           # a client backs off before it tries again

    def quiet_point(self):
        """Pauses traffic, waits for in-flight requests and idle connections to close."""
        self.run.clear()
        end = now() + 120
        while self.inflight and now() < end:
            time.sleep(0.1)
        time.sleep(3.5)                # the gateway closes idle keep-alive connections after 2 s
        g = proc_stats(self.s.gateway.pid)
        d = proc_stats(self.s.daemon.pid)
        return g, d

    def main(self):
        a = self.a
        self.t_start = now()
        deadline = self.t_start + a.seconds
        warm = max(12.0, a.seconds * 0.1)  # the heap settles in the first seconds of traffic
        threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(a.workers)]
        for t in threads:
            t.start()
        # warm-up, then a quiet point: the gateway's and daemon 1's baselines
        self.run.set()
        time.sleep(warm)
        g0, d0 = self.quiet_point()
        self.run.set()
        time.sleep(max(0, self.t_start + a.seconds * 0.45 - now()))
        # daemon 1's end of life (a quiet point), then the restart under traffic
        g_mid, d1_end = self.quiet_point()
        self.run.set()
        time.sleep(2.0)
        with self.lock:
            self.window = (now(), None)
        rc = self.s.restart_daemon()
        healthy = self.s.wait_healthy(120)
        t_healthy = now()
        time.sleep(2.0)                # the gateway's view settles (health poll, reconnect)
        with self.lock:
            self.window = (self.window[0], now())
        restart_s = t_healthy - self.window[0]
        # daemon 2's warm-up and baseline, traffic to the end, the last quiet point
        time.sleep(max(0, min(warm, deadline - now() - 10)))
        _, d2_0 = self.quiet_point()
        self.run.set()
        time.sleep(max(0, deadline - now()))
        self.stop.set()
        for t in threads:
            t.join(timeout=180)
        g1, d2_1 = self.quiet_point()
        return dict(g0=g0, g_mid=g_mid, g1=g1, d0=d0, d1_end=d1_end, d2_0=d2_0, d2_1=d2_1,
                    restart_rc=rc, healthy=healthy, restart_s=restart_s, elapsed=now() - self.t_start)


def growth(a, b):
    return (b - a) / a if a else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=os.path.join(ROOT, "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SOAK_SECONDS", "1200")))
    ap.add_argument("--workers", type=int, default=int(os.environ.get("SOAK_WORKERS", "5")))
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SOAK_THREADS", "2")))
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if a.seconds < 30:
        print("soak: SOAK_SECONDS must be >= 30")
        print("soak: 0 passed, 1 failed")
        return 1
    random.seed(1)
    tmp = tempfile.mkdtemp(prefix="smollm3-soak-")
    stack = Stack(a, tmp)
    checks = []

    def check(ok, name):
        checks.append((bool(ok), name))
        print("%s %s" % ("ok  " if ok else "FAIL", name), flush=True)

    try:
        stack.start()
        print("soak: %d s of traffic, %d workers, model %s, daemon --threads %d, nginx on 127.0.0.1:%d"
              % (a.seconds, a.workers, os.path.basename(a.model), a.threads, stack.port), flush=True)
        sk = Soak(stack, a)
        r = sk.main()
        counted, refused = sk.key_counters()
        st = sk.stats
        # ---- the table
        print()
        print("%-10s %7s %7s %9s %10s %8s" % ("kind", "sent", "ok", "restart*", "unexpected", "avg s"))
        tot = {"n": 0, "ok": 0, "restart": 0, "bad": 0}
        for k in KINDS:
            s = st[k]
            print("%-10s %7d %7d %9d %10d %8.2f" % (k, s["n"], s["ok"], s["restart"], s["bad"],
                                                    s["t"] / s["n"] if s["n"] else 0))
            for f in tot:
                tot[f] += s[f]
        print("%-10s %7d %7d %9d %10d" % ("total", tot["n"], tot["ok"], tot["restart"], tot["bad"]))
        print("* failed inside the daemon restart window (%.1f s from SIGTERM to /health 200, + 2 s)"
              % r["restart_s"])
        print()
        print("%-18s %12s %12s %8s %8s %8s" % ("process", "RSS KiB at", "RSS KiB end", "growth", "fds at", "fds end"))
        rows = [("gateway", r["g0"], r["g1"]), ("daemon 1", r["d0"], r["d1_end"]),
                ("daemon 2", r["d2_0"], r["d2_1"])]
        for name, b, e in rows:
            print("%-18s %12d %12d %7.2f%% %8d %8d" % (name, b[0], e[0], 100 * growth(b[0], e[0]), b[1], e[1]))
        print("(measured at quiet points: after the warm-up and at the end of each daemon's life;"
              " gateway mid-run: RSS %d KiB, %d fds)" % r["g_mid"])
        print()
        # ---- the checks
        for k in KINDS:
            check(st[k]["n"] > 0 and st[k]["ok"] > 0, "traffic: %s requests succeeded (%d of %d)"
                  % (k, st[k]["ok"], st[k]["n"]))
        check(tot["bad"] == 0, "no unexpected errors (%d)" % tot["bad"])
        for u in sk.unexpected:
            print("    " + u)
        check(sk.unterminated == 0, "every stream terminated ([DONE] / done event): %d unterminated"
              % sk.unterminated)
        check(r["restart_rc"] == 0, "daemon 1 drained and exited 0 on SIGTERM (exit %s)" % r["restart_rc"])
        check(r["healthy"], "the stack recovered after the daemon restart (%.1f s)" % r["restart_s"])
        for name, b, e in rows:
            check(growth(b[0], e[0]) < GROWTH_LIMIT, "%s RSS flat: %d -> %d KiB (%+.2f%%, limit %d%%)"
                  % (name, b[0], e[0], 100 * growth(b[0], e[0]), 100 * GROWTH_LIMIT))
            check(e[1] <= b[1] * (1 + GROWTH_LIMIT), "%s open fds flat: %d -> %d" % (name, b[1], e[1]))
        check(all(counted.get(i) == n for i, n in enumerate(sk.key_sent)),
              "/metrics counts each worker's API key requests: sent %s, counted %s"
              % (sk.key_sent, [counted.get(i) for i in range(len(sk.key_sent))]))
        check(refused.get("ui_unclaimed_per_key") == sk.tabs_refused and refused.get("ui_unclaimed") == 0,
              "/metrics counts the unclaimed-stream refusals: tabcloser's %d at its bound (counted %s), none "
              "in all (counted %s)" % (sk.tabs_refused, refused.get("ui_unclaimed_per_key"),
                                       refused.get("ui_unclaimed")))
        for p, n in ((stack.gateway, "gateway"), (stack.nginx, "nginx"), (stack.daemon, "daemon 2")):
            check(p.poll() is None, "%s still running at the end" % n)
    except Exception as e:  # noqa: BLE001
        check(False, "soak setup/run: %s: %s" % (type(e).__name__, e))
    finally:
        stack.stop()
        failed = sum(1 for ok, _ in checks if not ok)
        if failed:
            print(stack.logs())
        shutil.rmtree(tmp, ignore_errors=True)
    print("soak: %d passed, %d failed" % (len(checks) - failed, failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
