#!/usr/bin/env python3
"""test_daemon.py - process-level tests of smollm3d, smollm3ctl, the C client
library and the Python example client.  Run by tests/daemon/run.sh.

Each group starts the REAL daemon (BUILD/bin/smollm3d) on a fixture model
with a socket in a fresh temporary directory, talks to it through
smollm3ctl (the command-line contract), proto/examples/client.py (raw
protobuf, for bad input) and the Check suite test_client, then tears it
down.  Daemons run with --threads 1: the test machine is small and shared.

    python3 tests/daemon/test_daemon.py --build BUILD [--c-test PATH] [NAME_FILTER...]

Prints "ok NAME" / "FAIL NAME: why" per test and "N passed, N failed" last;
exits 1 on any failure.  A test that cannot run (Skip: a missing
prerequisite) is a failure too.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.dont_write_bytecode = True          # no __pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "proto", "examples"))
import client as pyclient  # noqa: E402

FIXTURE_T = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
FIXTURE_A = os.path.join(ROOT, "tests/fixtures/models/fixture-a.Q4_K_M.gguf")  # head size 64: q8_0 KV
SMOLLM2 = os.path.join(ROOT, "build/models/SmolLM2-135M-Instruct.Q4_1.gguf")

ARGS = None
PB = None
RESULTS = {"pass": 0, "fail": 0, "skip": 0}


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_test(name, fn, *a):
    if ARGS.filters and not any(f in name for f in ARGS.filters):
        return
    t0 = time.monotonic()
    try:
        fn(*a)
    except Skip as e:
        RESULTS["fail"] += 1
        print("FAIL %s: cannot run: %s" % (name, e), flush=True)
        return
    except Exception as e:  # noqa: BLE001 - a test failure of any kind
        RESULTS["fail"] += 1
        tb = traceback.format_exc() if not isinstance(e, AssertionError) else ""
        print("FAIL %s: %s\n%s" % (name, e, tb), end="" if tb else "\n", flush=True)
        return
    RESULTS["pass"] += 1
    print("ok %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)


# ---------------------------------------------------------------- harness

class NotifyListener:
    """A NOTIFY_SOCKET stand-in: an AF_UNIX datagram socket; collects lines."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.messages = []          # (monotonic time, "KEY=value")
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while self.running:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            now = time.monotonic()
            with self.lock:
                for line in data.decode("utf-8", "replace").split("\n"):
                    if line:
                        self.messages.append((now, line))

    def seen(self, line):
        with self.lock:
            return [t for t, m in self.messages if m == line]

    def lines(self):
        with self.lock:
            return [m for _, m in self.messages]

    def wait_for(self, line, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.seen(line):
                return True
            time.sleep(0.05)
        return False

    def close(self):
        self.running = False
        self.sock.close()
        self.thread.join(1)


class Daemon:
    def __init__(self, model, name, extra=(), notify=False, watchdog_usec=None):
        self.dir = tempfile.mkdtemp(prefix="smollm3d-test-%s-" % name)
        self.sock_path = os.path.join(self.dir, "smollm3d.sock")
        self.endpoint = "ipc://" + self.sock_path
        self.log_path = os.path.join(self.dir, "daemon.log")
        self.notify = NotifyListener(os.path.join(self.dir, "notify.sock")) if notify else None
        env = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"):
            env.pop(k, None)
        if self.notify:
            env["NOTIFY_SOCKET"] = self.notify.path
        cmd = [os.path.join(ARGS.build, "bin/smollm3d"), "--model", model, "--listen",
               self.endpoint, "--threads", "1"] + list(extra)
        if watchdog_usec:
            # WATCHDOG_PID must be the daemon's own pid: exec from a shell whose $$ it keeps.
            env["WATCHDOG_USEC"] = str(watchdog_usec)
            cmd = ["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"'] + cmd
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=ROOT)
        self.wait_ready(90)

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("smollm3d exited with %s during start:\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            if os.path.exists(self.sock_path):
                r = self.ctl("health", timeout=5, check_rc=None)
                if r.returncode == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError("smollm3d not ready after %ds:\n%s" % (timeout, self.log_tail()))

    def ctl(self, *args, timeout=60, check_rc=0, input=None):
        cmd = [os.path.join(ARGS.build, "bin/smollm3ctl"), "--connect", self.endpoint] + list(args)
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input)
        if check_rc is not None and r.returncode != check_rc:
            raise AssertionError("%s: exit %d, expected %d\nstdout: %s\nstderr: %s" % (
                " ".join(args), r.returncode, check_rc, r.stdout.decode()[-800:],
                r.stderr.decode()[-800:]))
        return r

    def ctl_popen(self, *args):
        cmd = [os.path.join(ARGS.build, "bin/smollm3ctl"), "--connect", self.endpoint] + list(args)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def client(self):
        return pyclient.Client(self.endpoint, PB)

    def stats(self):
        r = self.ctl("stats", "--json", timeout=30)
        return json.loads(r.stdout)

    def wait_idle(self, timeout=3.0):
        """Polls stats until requests_active and requests_queued are 0."""
        deadline = time.monotonic() + timeout
        s = None
        while time.monotonic() < deadline:
            s = self.stats()
            if s["requests_active"] == 0 and s["requests_queued"] == 0:
                return s
            time.sleep(0.1)
        raise AssertionError("requests not freed within %.1fs: %s" % (timeout, s))

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("smollm3d did not exit %ds after signal %d" % (timeout, sig))
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if self.notify:
            self.notify.close()
        if os.environ.get("SMOLLM3D_TEST_KEEP"):
            print("  (kept %s)" % self.dir)
            return
        subprocess.run(["rm", "-rf", self.dir])


def json_lines(out):
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def gen_json(d, *args, timeout=120):
    """smollm3ctl generate --json ARGS; returns the parsed event list."""
    r = d.ctl("generate", "--json", *args, timeout=timeout)
    return json_lines(r.stdout)


def token_ids(events):
    return [e["token_id"] for e in events if e["event"] == "token" and e["token_id"] >= 0]


def check_stream_shape(evs, max_n=None):
    kinds = [e["event"] for e in evs]
    check(kinds and kinds[0] == "started", "first event is not started: %s" % kinds[:3])
    check(kinds[-1] == "done", "last event is not done: %s" % kinds[-3:])
    check(kinds.count("started") == 1 and kinds.count("done") == 1, "one started, one done")
    check(all(k in ("token", "tool_call") for k in kinds[1:-1]), "only tokens in between")
    st, done = evs[0], evs[-1]
    check(st["prompt_tokens"] > 0, "started.prompt_tokens > 0")
    check(0 <= st["cached_tokens"] <= st["prompt_tokens"], "0 <= cached <= prompt")
    u = done["usage"]
    check(u["prompt_tokens"] == st["prompt_tokens"], "usage.prompt_tokens == started's")
    check(u["cached_tokens"] == st["cached_tokens"], "usage.cached_tokens == started's")
    check(done["finish_reason"] in ("stop", "length", "tool_calls"), "finish_reason")
    # the end-of-generation token counts as generated but need not be streamed
    n_ids = len(token_ids(evs))
    check(u["completion_tokens"] == n_ids or
          (done["finish_reason"] != "length" and u["completion_tokens"] == n_ids + 1),
          "completion_tokens %d == tokens streamed %d" % (u["completion_tokens"], n_ids))
    if max_n is not None:
        check(u["completion_tokens"] <= max_n, "completion_tokens <= -n")
        if done["finish_reason"] == "length":
            check(u["completion_tokens"] == max_n, "length => exactly -n tokens")
    for e in evs[1:-1]:
        if e["event"] == "token":
            check(isinstance(e["text"], str) and isinstance(e["token_id"], int), "token fields")
            check(e["channel"] in ("content", "reasoning"), "channel name")


def wait_terminal(c, rid, timeout=20.0, cancel_after_start=False):
    """Reads events of rid until the terminal one; returns (events, kinds)."""
    evs = []
    deadline = time.monotonic() + timeout
    cancelled = False
    while time.monotonic() < deadline:
        ev = c.recv(int(max(1, (deadline - time.monotonic()) * 1000)), rid)
        if ev is None:
            break
        evs.append(ev)
        kind = ev.WhichOneof("kind")
        if kind in pyclient.TERMINAL_KINDS:
            return evs
        if cancel_after_start and not cancelled and kind in ("started", "token"):
            c.cancel(rid)
            cancelled = True
    raise AssertionError("no terminal event for request %d in %.0fs (got %s)" % (
        rid, timeout, [e.WhichOneof("kind") for e in evs]))


# ---------------------------------------------------------------- tests: daemon T

def t_health(d):
    r = d.ctl("health", "--json")
    h = json.loads(r.stdout)
    check(h["ready"] is True and h["protocol_version"] == 1 and h["thinking_supported"] is True,
          "health reply %s (the fixture has SmolLM3's template and <think> tokens)" % h)
    d.ctl("health")
    h2 = d.client().health()
    check(h2.ready, "python health")


def t_stats_json(d):
    s = d.stats()
    for k in ("requests_active", "requests_queued", "sessions", "kv_tokens_used",
              "kv_tokens_total", "requests_total", "uptime_s", "context_length"):
        check(k in s, "stats has %s" % k)
    check(s["kv_tokens_total"] > 0, "kv_tokens_total > 0")
    r = d.ctl("stats")
    check(b"kv_tokens_total" in r.stdout, "stats table")


def t_turn_streamed(d):
    evs = gen_json(d, "--temp", "0", "-n", "8", "Hello, who are you?")
    check_stream_shape(evs, 8)
    # the text output contract: streams to stdout, exit 0
    r = d.ctl("generate", "--temp", "0", "-n", "8", "Hello, who are you?")
    check(len(r.stdout) > 0, "text mode printed something")
    # greedy is deterministic
    evs2 = gen_json(d, "--temp", "0", "-n", "8", "Hello, who are you?")
    check(token_ids(evs) == token_ids(evs2), "same greedy request -> same tokens")
    evs3 = gen_json(d, "--no-think", "--temp", "0.7", "--seed", "7", "-n", "6", "Hi")
    check_stream_shape(evs3, 6)
    check(evs3[0].get("thinking") is False, "--no-think -> started.thinking false")


def t_ctl_contract(d):
    """smollm3ctl's exit codes and formats beyond the streaming ones."""
    ctl = os.path.join(ARGS.build, "bin/smollm3ctl")
    # usage errors exit 2, before any connection is tried
    for args in (["bogus"], ["generate"], ["generate", "--temp", "x", "hi"], ["delete"],
                 ["stats", "extra"], ["--timeout", "-1", "health"], []):
        r = subprocess.run([ctl, "--connect", d.endpoint] + args, capture_output=True, timeout=10)
        check(r.returncode == 2, "%s: exit %d, expected 2" % (args, r.returncode))
    # no daemon: exit 1 quickly (missing socket file, or nothing listening)
    r = subprocess.run([ctl, "--connect", "ipc://" + d.dir + "/none.sock", "health"],
                       capture_output=True, timeout=10)
    check(r.returncode == 1, "health without daemon: exit %d" % r.returncode)
    dead = os.path.join(d.dir, "dead.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(dead)                       # a socket file nobody accepts on
    t0 = time.monotonic()
    r = subprocess.run([ctl, "--connect", "ipc://" + dead, "--timeout", "1", "stats", "--json"],
                       capture_output=True, timeout=20)
    ls.close()
    check(r.returncode == 1, "stats on a dead socket: exit %d" % r.returncode)
    check(time.monotonic() - t0 < 8, "--timeout 1 honoured (%.1fs)" % (time.monotonic() - t0))
    line = json.loads(r.stdout.decode().strip().splitlines()[-1])
    check(line["event"] == "error", "--json failure line: %s" % line)
    r = subprocess.run([ctl, "--connect", "ipc://" + d.dir + "/none.sock", "generate", "--json",
                        "hi"], capture_output=True, timeout=10)
    check(r.returncode == 1 and json.loads(r.stdout)["event"] == "error", "generate --json, no daemon")
    # MESSAGE from stdin; several words are joined
    r = d.ctl("generate", "--json", "--temp", "0", "-n", "2", "-", input=b"Hello from stdin\n")
    check_stream_shape(json_lines(r.stdout), 2)
    a = json_lines(d.ctl("generate", "--json", "--temp", "0", "-n", "3", "two", "words").stdout)
    b = json_lines(d.ctl("generate", "--json", "--temp", "0", "-n", "3", "two words").stdout)
    check(a[0]["prompt_tokens"] == b[0]["prompt_tokens"] and token_ids(a) == token_ids(b),
          "words joined with spaces")
    # session get (--json and table), health/sessions tables
    d.ctl("generate", "--new-session", "ctl-s", "-n", "2", "hi")
    info = json.loads(d.ctl("session", "ctl-s", "--json").stdout)
    check(info["session_id"] == "ctl-s" and info["tokens"] > 0, "session --json: %s" % info)
    check(b"ctl-s" in d.ctl("session", "ctl-s").stdout, "session table")
    d.ctl("session", "no-such", check_rc=1)
    d.ctl("delete", "ctl-s")
    check(b"ready: yes" in d.ctl("health").stdout, "health text")
    # text mode: content on stdout, nothing JSON-ish, exit 0
    r = d.ctl("generate", "--temp", "0", "-n", "4", "Hello")
    check(len(r.stdout) > 0 and not r.stdout.startswith(b"{"), "text mode output: %r" % r.stdout)


def t_cancel_mid_stream(d):
    with d.client() as c:
        req = c.generate_request("Write a very long story.", temperature=0, max_tokens=3000)
        rid = c.send(req)
        n_tok = 0
        t0 = time.monotonic()
        while n_tok < 3:
            ev = c.recv(20000, rid)
            check(ev is not None, "tokens flow")
            k = ev.WhichOneof("kind")
            check(k in ("started", "token"), "unexpected %s before cancel" % k)
            n_tok += k == "token"
        c.cancel(rid)
        t_cancel = time.monotonic()
        evs = wait_terminal(c, rid, 10)
        last = evs[-1]
        k = last.WhichOneof("kind")
        check((k == "done" and last.done.finish_reason == PB.FINISH_REASON_CANCELLED) or
              (k == "error" and last.error.code == PB.ERROR_CANCELLED),
              "terminal after cancel: %s" % last)
        check(time.monotonic() - t_cancel < 5, "cancel took %.1fs" % (time.monotonic() - t_cancel))
        check(n_tok + len(evs) < 2900, "generation stopped early")
        del t0
    d.wait_idle(3)
    # Ctrl-C on smollm3ctl: Cancel sent, terminal event awaited, exit 130
    p = d.ctl_popen("generate", "--json", "--temp", "0", "-n", "3000", "Write a long story.")
    lines = []
    while len(lines) < 3:
        line = p.stdout.readline()
        if not line:
            p.wait(10)
            raise AssertionError("ctl stream ended early: %s" % p.stderr.read()[-500:])
        lines.append(json.loads(line))
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=15)
    lines += json_lines(out)
    check(p.returncode == 130, "ctl exit after Ctrl-C: %d (%s)" % (p.returncode, err[-300:]))
    last = lines[-1]
    check((last["event"] == "done" and last["finish_reason"] == "cancelled") or
          (last["event"] == "error" and last["code"] == "cancelled"), "ctl last line %s" % last)
    s = d.wait_idle(3)
    check(s["requests_cancelled"] >= 2, "requests_cancelled counted: %s" % s)


def t_batched_equals_sequential(d):
    msgs = ["Tell me about topic number %d, please." % i for i in range(8)]
    n = "16"
    alone = []
    for i, m in enumerate(msgs):
        evs = gen_json(d, "--new-session", "seq-%d" % i, "--temp", "0", "-n", n, m)
        check_stream_shape(evs, 16)
        alone.append(token_ids(evs))
    procs = [d.ctl_popen("generate", "--json", "--new-session", "par-%d" % i, "--temp", "0", "-n", n, m)
             for i, m in enumerate(msgs)]
    together = []
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=180)
        check(p.returncode == 0, "concurrent %d exit %d: %s" % (i, p.returncode, err[-300:]))
        evs = json_lines(out)
        check_stream_shape(evs, 16)
        together.append(token_ids(evs))
    for i in range(8):
        check(alone[i] == together[i], "session %d: batched %s != alone %s" % (
            i, together[i], alone[i]))
    for i in range(8):
        d.ctl("delete", "seq-%d" % i)
        d.ctl("delete", "par-%d" % i)
    # seeded sampling (per-request RNG) must not depend on the batch either; the
    # random-weight fixture's greedy output is often one repeated token, this is not
    alone = [token_ids(gen_json(d, "--temp", "1.0", "--seed", str(100 + i), "-n", n, m))
             for i, m in enumerate(msgs)]
    procs = [d.ctl_popen("generate", "--json", "--temp", "1.0", "--seed", str(100 + i), "-n", n, m)
             for i, m in enumerate(msgs)]
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=180)
        check(p.returncode == 0, "concurrent seeded %d exit %d" % (i, p.returncode))
        check(token_ids(json_lines(out)) == alone[i], "seeded %d: batched != alone" % i)


def t_second_turn_cached(d):
    s = "turns-1"
    e1 = gen_json(d, "--new-session", s, "--temp", "0", "-n", "8", "My name is Ada.")
    check_stream_shape(e1, 8)
    u1 = e1[-1]["usage"]
    e2 = gen_json(d, "--session", s, "--temp", "0", "-n", "8", "What is my name?")
    check_stream_shape(e2, 8)
    st2 = e2[0]
    turn1_len = u1["prompt_tokens"] + u1["completion_tokens"]
    check(st2["cached_tokens"] > 0, "second turn cached_tokens > 0: %s" % st2)
    check(st2["cached_tokens"] >= u1["prompt_tokens"],
          "cached %d >= first prompt %d" % (st2["cached_tokens"], u1["prompt_tokens"]))
    check(st2["prompt_tokens"] > turn1_len, "the second prompt contains the first turn")
    new = st2["prompt_tokens"] - st2["cached_tokens"]
    check(new <= 40, "only the new part is processed: %d new tokens (prompt %d, cached %d, turn 1 %d)"
          % (new, st2["prompt_tokens"], st2["cached_tokens"], turn1_len))
    # sessions lists it, with its tokens
    r = d.ctl("sessions", "--json")
    ss = {x["session_id"]: x for x in json.loads(r.stdout)["sessions"]}
    check(s in ss, "sessions lists %s: %s" % (s, list(ss)))
    check(ss[s]["tokens"] >= st2["prompt_tokens"], "session tokens >= history")
    check(ss[s]["busy"] is False, "idle session not busy")
    r = d.ctl("sessions")
    check(s.encode() in r.stdout, "sessions table lists it")
    d.ctl("delete", s)
    d.ctl("delete", s, check_rc=1)
    r = d.ctl("sessions", "--json")
    check(s not in [x["session_id"] for x in json.loads(r.stdout)["sessions"]], "deleted")


def t_tenants(d):
    """Issue 38 at the protocol level: two tenants over one session id and one
    prompt never read or write each other's sessions or cached prefixes;
    another tenant's id is refused in the words of a nonexistent one; an append
    to a session the daemon does not hold is ERROR_UNKNOWN_SESSION unless
    create_session; health says the largest frame the daemon decodes."""
    E = PB
    with d.client() as c:
        check(c.health().max_request_bytes == 4 << 20, "health max_request_bytes: %s" % c.health())

        def turn(tenant, session, text, append=True, create=False):
            req = c.generate_request(text, session=session, temperature=0.0, max_tokens=4)
            req.generate.tenant = tenant
            req.generate.chat.append_to_session = append
            req.generate.chat.create_session = create
            return wait_terminal(c, c.send(req), 60)

        def query(kind, tenant, sid=None):
            req = PB.Request()
            q = getattr(req, kind)
            q.SetInParent()
            q.tenant = tenant
            if sid is not None:
                q.session_id = sid
            return send_expect_reply(c, req)

        first = {}
        for t in ("key-a", "key-b"):
            evs = turn(t, "shared", "My name is Ada.", create=True)
            check(evs[-1].WhichOneof("kind") == "done", "%s first turn: %s" % (t, evs[-1]))
            first[t] = evs[0].started
            check(evs[0].started.cached_tokens == 0,
                  "%s reused %d tokens of another tenant's" % (t, evs[0].started.cached_tokens))
        evs = turn("key-a", "shared", "What is my name?")
        check(evs[-1].WhichOneof("kind") == "done" and evs[0].started.cached_tokens >= first["key-a"].prompt_tokens,
              "key-a's own second turn reuses its session: %s" % evs[0])
        unknown = turn("key-c", "shared", "hi")[-1]
        never = turn("key-c", "never-made", "hi")[-1]
        check(is_error(unknown, E.ERROR_UNKNOWN_SESSION) and is_error(never, E.ERROR_UNKNOWN_SESSION),
              "append to another tenant's / a nonexistent session: %s / %s" % (unknown, never))
        check(unknown.error.message.replace("shared", "ID") == never.error.message.replace("never-made", "ID"),
              "the same words: %r vs %r" % (unknown.error.message, never.error.message))
        evs = turn("key-c", "shared", "hi", create=True)
        check(evs[-1].WhichOneof("kind") == "done", "create_session: %s" % evs[-1])
        for t, want in (("key-a", ["shared"]), ("key-b", ["shared"]), ("key-c", ["shared"]), ("key-d", [])):
            ev = query("session_list", t)
            check([x.session_id for x in ev.sessions.sessions] == want, "%s lists %s" % (t, ev))
        check(is_error(query("session_get", "key-d", "shared"), E.ERROR_UNKNOWN_SESSION), "get of another's")
        check(is_error(query("session_delete", "key-d", "shared"), E.ERROR_UNKNOWN_SESSION), "delete of another's")
        check(query("session_delete", "key-b", "shared").WhichOneof("kind") == "ack", "own delete")
        check(query("session_get", "key-a", "shared").WhichOneof("kind") == "session", "key-b's delete left key-a's")
        check(is_error(turn("key-b", "shared", "again")[-1], E.ERROR_UNKNOWN_SESSION), "append after delete")
        bad = turn("a/b", "shared", "hi")[-1]
        check(is_error(bad, E.ERROR_INVALID_ARGUMENT) and "tenant" in bad.error.message, "bad tenant: %s" % bad)
        st = c.stats()
        check(st.unknown_session_refusals >= 3, "stats unknown_session_refusals: %d" % st.unknown_session_refusals)


def t_second_turn_history_sent_back(d):
    """OpenAI style: the client sends the whole conversation back (without the
    reasoning); the session continues from its own tokens."""
    s = "turns-2"
    with d.client() as c:
        m1 = [("user", "My name is Ada.")]
        evs = list(c.chat(m1, session=s, temperature=0, max_tokens=8))
        check(evs[-1].WhichOneof("kind") == "done", "turn 1 done: %s" % evs[-1])
        u1 = evs[-1].done.usage
        content = "".join(e.token.text for e in evs if e.WhichOneof("kind") == "token"
                          and e.token.channel == PB.CHANNEL_CONTENT)
        m2 = m1 + [("assistant", content), ("user", "What is my name?")]
        evs2 = list(c.chat(m2, session=s, temperature=0, max_tokens=8))
        check(evs2[-1].WhichOneof("kind") == "done", "turn 2 done: %s" % evs2[-1])
        st = evs2[0].started
        new = st.prompt_tokens - st.cached_tokens
        check(st.cached_tokens >= u1.prompt_tokens + u1.completion_tokens - 1,
              "cached %d >= turn 1 (%d + %d)" % (st.cached_tokens, u1.prompt_tokens,
                                                 u1.completion_tokens))
        check(new <= 40, "only the new part is processed: %d new tokens" % new)
        c.session_delete(s, timeout_ms=10000)


def t_example_session_history(d):
    """proto/examples/client.py keeps a conversation as smollm3ctl does: --new-session on the
    first turn, --session on the next, each sending only the new message; the daemon appends
    it to the history it keeps, so the second turn's prompt holds the first turn (cached)."""
    ex = os.path.join(ROOT, "proto/examples/client.py")
    env = dict(os.environ, SMOLLM3_PB2_DIR=ARGS.pb2_dir)

    def turn(*args):
        r = subprocess.run([sys.executable, ex, "--connect", d.endpoint, "--temp", "0", "-n", "8"] + list(args),
                           capture_output=True, timeout=120, env=env)
        check(r.returncode == 0, "client.py %s: exit %d: %s" % (args, r.returncode, r.stderr[-500:]))
        m = re.search(rb"(\d+) prompt tokens \((\d+) cached\), (\d+) generated", r.stderr)
        check(m, "client.py summary: %r" % r.stderr[-300:])
        return [int(x) for x in m.groups()]

    p1, c1, g1 = turn("--new-session", "ex-hist", "My name is Ada.")
    alone, _, _ = turn("What is my name?")          # no session: the question by itself
    p2, c2, _ = turn("--session", "ex-hist", "What is my name?")
    # started over, the prompt would be the question alone (as `alone`)
    check(c2 >= p1 and p2 > p1 + g1 and p2 > alone,
          "second turn appended to the history: prompt %d (cached %d) after %d+%d, alone %d" % (
              p2, c2, p1, g1, alone))
    info = json.loads(d.ctl("session", "ex-hist", "--json").stdout)
    check(info["tokens"] >= p2, "the session holds both turns: %s" % info)
    d.ctl("delete", "ex-hist")


class RecordingDaemon:
    """A ROUTER on ipc:// that records each Request and answers it: a generate with started,
    one token and done (or ERROR_UNKNOWN_SESSION when its text says EVICTED), session
    list/get/delete, health.  What smollm3ctl and client.py put on the wire, seen whole."""

    def __init__(self, path):
        import zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = "ipc://" + path
        self.sock.bind(self.endpoint)
        self.reqs = []
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while self.running:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart()
            req = PB.Request()
            req.ParseFromString(frames[-1])
            self.reqs.append(req)
            kind, rid = req.WhichOneof("kind"), req.request_id
            evs = []
            if kind == "generate":
                if "EVICTED" in req.generate.chat.messages[-1].content:
                    evs.append(PB.Event(request_id=rid, error=PB.Error(
                        code=PB.ERROR_UNKNOWN_SESSION, message="unknown session '%s'" % req.generate.session_id)))
                else:
                    evs.append(PB.Event(request_id=rid, started=PB.Started(prompt_tokens=3)))
                    evs.append(PB.Event(request_id=rid, token=PB.Token(text="ok", token_id=1)))
                    evs.append(PB.Event(request_id=rid, done=PB.Done(
                        finish_reason=PB.FINISH_REASON_STOP, usage=PB.Usage(prompt_tokens=3, completion_tokens=1))))
            elif kind == "session_list":
                evs.append(PB.Event(request_id=rid, sessions=PB.SessionList()))
            elif kind == "session_get":
                evs.append(PB.Event(request_id=rid, session=PB.SessionInfo(session_id=req.session_get.session_id)))
            elif kind == "session_delete":
                evs.append(PB.Event(request_id=rid, ack=PB.Ack()))
            elif kind == "health":
                evs.append(PB.Event(request_id=rid, health=PB.HealthReply(ready=True, model="rec", protocol_version=1)))
            for e in evs:
                self.sock.send_multipart(frames[:-1] + [e.SerializeToString()])

    def close(self):
        self.running = False
        self.thread.join(5)
        self.sock.close()
        self.ctx.term()


def t_session_flags_on_the_wire():
    """smollm3ctl and client.py: the turn that starts a conversation sends create_session (with
    append_to_session), a turn that continues one does not; --tenant fills GenerateRequest.tenant
    and the session requests' tenant; smollm3ctl's global options work before the command as after
    it; a continued session the daemon no longer holds is reported as such (exit 1, the way to start
    it anew), not silently restarted."""
    ctl = os.path.join(ARGS.build, "bin/smollm3ctl")
    ex = os.path.join(ROOT, "proto/examples/client.py")
    tmp = tempfile.mkdtemp(prefix="smollm3-wire-")
    rd = RecordingDaemon(os.path.join(tmp, "rec.sock"))
    try:
        def run(argv, want=0):
            r = subprocess.run(argv, capture_output=True, timeout=30, env=dict(os.environ, SMOLLM3_PB2_DIR=ARGS.pb2_dir))
            check(r.returncode == want, "%s: exit %d, expected %d: %s" % (argv[1:], r.returncode, want, r.stderr[-400:]))
            return r

        def last(kind):
            reqs = [q for q in rd.reqs if q.WhichOneof("kind") == kind]
            check(reqs, "no %s request recorded" % kind)
            return getattr(reqs[-1], kind)

        for tool in ("ctl", "client.py"):
            base = [ctl, "--connect", rd.endpoint] if tool == "ctl" else [sys.executable, ex, "--connect", rd.endpoint]
            gen = ["generate"] if tool == "ctl" else []
            # the first turn creates, the next continues; the tenant on both
            run(base + ["--tenant", "team-a"] + gen + ["--new-session", "s1", "hello"])
            g = last("generate")
            check(g.session_id == "s1" and g.chat.append_to_session and g.chat.create_session and g.tenant == "team-a",
                  "%s first turn: %s" % (tool, g))
            check([m.content for m in g.chat.messages] == ["hello"], "%s: only the new message: %s" % (tool, g))
            run(base + gen + ["--session", "s1", "--tenant", "team-a", "again"])
            g = last("generate")
            check(g.session_id == "s1" and g.chat.append_to_session and not g.chat.create_session and g.tenant == "team-a",
                  "%s next turn: %s" % (tool, g))
            check([m.content for m in g.chat.messages] == ["again"], "%s: only the new message: %s" % (tool, g))
            # no session: neither flag, the default tenant
            run(base + gen + ["plain"])
            g = last("generate")
            check(not g.session_id and not g.chat.append_to_session and not g.chat.create_session and g.tenant == "",
                  "%s no session: %s" % (tool, g))
            # a continued session the daemon does not hold: reported, exit 1
            r = run(base + gen + ["--session", "gone", "EVICTED"], want=1)
            err = r.stderr.decode()
            check("UNKNOWN_SESSION" in err.upper() or "unknown_session" in err, "%s: the daemon's error: %r" % (tool, err))
            check("not held by the daemon" in err and "--new-session gone" in err, "%s: the way on: %r" % (tool, err))
        # smollm3ctl: global options before or after the command, the tenant on session requests
        r = run([ctl, "--json", "--connect", rd.endpoint, "health"])
        check(json.loads(r.stdout)["ready"] is True, "--json before the command: %r" % r.stdout)
        r = run([ctl, "--connect", rd.endpoint, "health", "--json"])
        check(json.loads(r.stdout)["ready"] is True, "--json after the command: %r" % r.stdout)
        r = run([ctl, "--json", "--tenant", "team-b", "--connect", rd.endpoint, "generate", "--session", "s2", "hi"])
        check(json_lines(r.stdout)[0]["event"] == "started" and last("generate").tenant == "team-b",
              "--json and --tenant before generate: %r" % r.stdout)
        run([ctl, "--tenant", "team-b", "--connect", rd.endpoint, "sessions"])
        check(last("session_list").tenant == "team-b", "sessions --tenant")
        run([ctl, "--connect", rd.endpoint, "session", "s2", "--tenant", "team-c"])
        check(last("session_get").tenant == "team-c" and last("session_get").session_id == "s2", "session --tenant")
        run([ctl, "--connect", rd.endpoint, "--tenant", "team-d", "delete", "s2"])
        check(last("session_delete").tenant == "team-d", "delete --tenant")
        run([ctl, "--connect", rd.endpoint, "sessions"])
        check(last("session_list").tenant == "", "no --tenant: the default")
        # after generate's "--" everything is the message, options included
        run([ctl, "--connect", rd.endpoint, "generate", "--", "--tenant", "x", "--json"])
        g = last("generate")
        check(g.chat.messages[-1].content == "--tenant x --json" and g.tenant == "", "after --: %s" % g)
        run([ctl, "--connect", rd.endpoint, "--tenant"], want=2)
        run([ctl, "--connect", rd.endpoint, "generate", "--session", "a", "--new-session", "b", "hi"], want=2)
    finally:
        rd.close()
        shutil.rmtree(tmp, ignore_errors=True)


def t_client_vanishes(d):
    # a Python client closes its socket mid-stream.  The fixture streams ~1500
    # tokens/s, so "freed" is checked by the cancel counter, not only by idleness
    # (a request that simply ran to its end would be idle too).
    cancelled0 = d.stats()["requests_cancelled"]
    c = d.client()
    rid = c.send(c.generate_request("Write a very long story.", temperature=0, max_tokens=3000))
    got = 0
    while got < 3:
        ev = c.recv(20000, rid)
        check(ev is not None, "stream started")
        got += ev.WhichOneof("kind") == "token"
    check(d.stats()["requests_active"] >= 1, "request active while streaming")
    c.close()
    t0 = time.monotonic()
    s1 = d.wait_idle(3)
    check(s1["requests_cancelled"] == cancelled0 + 1,
          "vanished client's request cancelled: %d -> %d" % (cancelled0, s1["requests_cancelled"]))
    print("  freed %.2fs after the client closed" % (time.monotonic() - t0))
    # smollm3ctl killed with SIGKILL mid-stream
    p = d.ctl_popen("generate", "--json", "--temp", "0", "-n", "3000", "Another long story.")
    for _ in range(3):
        check(p.stdout.readline(), "ctl streams")
    p.kill()
    p.wait()
    t0 = time.monotonic()
    s2 = d.wait_idle(3)
    check(s2["requests_cancelled"] == cancelled0 + 2,
          "killed ctl's request cancelled: %s" % s2)
    print("  freed %.2fs after smollm3ctl was killed" % (time.monotonic() - t0))


def send_expect_reply(c, req=None, raw=None, timeout=10.0, allow_silence=False):
    """Sends a request (or raw bytes) and returns the terminal event (or None when
    allow_silence and nothing came).  Streams that start are cancelled."""
    if raw is not None:
        c.send_raw(raw)
        ev = c.recv(int(timeout * 1000))
        if ev is None:
            check(allow_silence, "no reply to raw frame")
            return None
        return ev
    rid = c.send(req)
    try:
        return wait_terminal(c, rid, timeout, cancel_after_start=True)[-1]
    except AssertionError:
        if allow_silence:
            return None
        raise


def is_error(ev, *codes):
    return ev is not None and ev.WhichOneof("kind") == "error" and (
        not codes or ev.error.code in codes)


def t_bad_input(d):
    E = PB
    with d.client() as c:
        # malformed protobuf bytes
        for junk in (b"\xff\xff\xff\xff", b"\x12\xff\xff\xff\xff\x0f", b"\x0a\x05ab", b"\x00"):
            ev = send_expect_reply(c, raw=junk, timeout=3, allow_silence=True)
            check(ev is None or is_error(ev), "junk %r -> error or silence: %s" % (junk, ev))
            if ev is not None:
                check(ev.request_id == 0 or ev.error.code in (E.ERROR_BAD_FORMAT,
                      E.ERROR_INVALID_ARGUMENT), "junk error code: %s" % ev)
        # oversized frame (5 MiB > max_request_bytes 4 MiB by default)
        big = c.generate_request("x" * (5 << 20), max_tokens=1)
        big.request_id = c.next_id()
        ev = send_expect_reply(c, raw=big.SerializeToString(), timeout=10, allow_silence=True)
        check(ev is None or is_error(ev, E.ERROR_TOO_LARGE), "oversized -> too_large: %s" % ev)
        # unknown request kind (field 30) / no kind at all
        req = PB.Request(request_id=c.next_id())
        raw = req.SerializeToString() + b"\xf2\x01\x00"   # field 30, length-delimited, empty
        ev = send_expect_reply(c, raw=raw, timeout=3, allow_silence=True)
        check(ev is None or is_error(ev), "unknown kind -> error: %s" % ev)
        # unknown enum / version values (ProtocolVersion travels as uint32)
        req = PB.Request(protocol_version=99)
        req.health.SetInParent()
        req.request_id = c.next_id()
        ev = send_expect_reply(c, raw=req.SerializeToString(), timeout=3, allow_silence=True)
        check(ev is None or is_error(ev) or ev.WhichOneof("kind") == "health",
              "protocol_version 99: %s" % ev)
        # unknown role
        req = c.generate_request([("wizard", "hi")], max_tokens=2)
        ev = send_expect_reply(c, req)
        check(is_error(ev, E.ERROR_INVALID_ARGUMENT, E.ERROR_TEMPLATE), "unknown role: %s" % ev)
        # invalid UTF-8 in the message: same-length byte patch of a placeholder
        req = c.generate_request("hello QQQQQQ world", max_tokens=2)
        req.request_id = c.next_id()
        raw = req.SerializeToString().replace(b"QQQQQQ", b"\xff\xfe\xc3\x28\xed\xa0")
        ev = send_expect_reply(c, raw=raw, timeout=10)
        check(ev.request_id == req.request_id, "utf8 error names the request")
        check(is_error(ev, E.ERROR_INVALID_UTF8, E.ERROR_INVALID_ARGUMENT), "invalid utf8: %s" % ev)
        # invalid UTF-8 in a session id
        req = c.generate_request("hi", session="sessQQ", max_tokens=2)
        req.request_id = c.next_id()
        raw = req.SerializeToString().replace(b"sessQQ", b"sess\xff\xff")
        ev = send_expect_reply(c, raw=raw, timeout=10)
        check(is_error(ev), "invalid session id bytes: %s" % ev)
        # a session id with forbidden characters
        ev = send_expect_reply(c, c.generate_request("hi", session="bad id/../\n", max_tokens=2))
        check(is_error(ev, E.ERROR_INVALID_ARGUMENT), "bad session id: %s" % ev)
        # absurd sampling values: an error, or a clean (cancelled) stream
        for kw in (dict(temperature=float("nan")), dict(temperature=-5.0), dict(temperature=1e30),
                   dict(top_p=7.0), dict(top_p=-1.0), dict(top_k=-3), dict(min_p=float("inf")),
                   dict(repetition_penalty=-1.0), dict(max_tokens=0xFFFFFFFF),
                   dict(presence_penalty=1e38)):
            ev = send_expect_reply(c, c.generate_request("hi", **kw), timeout=20)
            k = ev.WhichOneof("kind")
            check(k in ("error", "done"), "absurd %s: %s" % (kw, ev))
        # token ids out of range, empty input
        ev = send_expect_reply(c, c.generate_request(token_ids=[1, 2, 999999999], max_tokens=2))
        check(is_error(ev, E.ERROR_INVALID_ARGUMENT), "token id out of range: %s" % ev)
        ev = send_expect_reply(c, c.generate_request(token_ids=[-1], max_tokens=2))
        check(is_error(ev, E.ERROR_INVALID_ARGUMENT), "negative token id: %s" % ev)
        req = PB.Request()
        req.generate.max_tokens = 2
        ev = send_expect_reply(c, req)
        check(is_error(ev), "generate without input: %s" % ev)
        ev = send_expect_reply(c, c.generate_request([], max_tokens=2))
        check(is_error(ev), "chat without messages: %s" % ev)
        # unknown session: delete / get
        try:
            c.session_delete("never-created-session")
            raise AssertionError("delete of an unknown session succeeded")
        except pyclient.DaemonError as e:
            check(e.code == "ERROR_UNKNOWN_SESSION", "delete unknown: %s" % e)
        try:
            c.session_get("never-created-session")
            raise AssertionError("get of an unknown session succeeded")
        except pyclient.DaemonError as e:
            check(e.code == "ERROR_UNKNOWN_SESSION", "get unknown: %s" % e)
        d.ctl("delete", "never-created-session", check_rc=1)
        # cancel for an unknown id: ack, error, or nothing
        rid = c.cancel(0x123456789, want_reply=True)
        ev = c.recv(1000, rid)
        check(ev is None or ev.WhichOneof("kind") in ("ack", "error"), "cancel unknown: %s" % ev)
        # duplicate request id while the first is running: the second is refused or served
        req = c.generate_request("Write a long story.", temperature=0, max_tokens=200)
        rid = c.send(req)
        req2 = c.generate_request("Again", max_tokens=2)
        req2.request_id = rid
        c.send(req2)
        deadline = time.monotonic() + 30
        terminal = 0
        while terminal < 2 and time.monotonic() < deadline:
            ev = c.recv(2000, rid)
            if ev is None:
                break
            if ev.WhichOneof("kind") == "token":
                c.cancel(rid)
            terminal += ev.WhichOneof("kind") in pyclient.TERMINAL_KINDS
        check(terminal >= 1, "duplicate ids: at least one terminal event")
    check(d.alive(), "daemon still running after bad input:\n%s" % d.log_tail())
    # a normal request afterwards still works
    evs = gen_json(d, "--temp", "0", "-n", "4", "Still there?")
    check_stream_shape(evs, 4)
    d.wait_idle(5)


def t_python_example(d):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "proto/examples/client.py"),
                        "--connect", d.endpoint, "--temp", "0", "-n", "8", "Hello there"],
                       capture_output=True, timeout=120,
                       env=dict(os.environ, SMOLLM3_PB2_DIR=ARGS.pb2_dir))
    check(r.returncode == 0, "client.py exit %d: %s" % (r.returncode, r.stderr[-500:]))
    check(b"prompt tokens" in r.stderr, "client.py summary: %s" % r.stderr[-300:])
    check(len(r.stdout.strip()) > 0, "client.py printed tokens")


def t_c_client(d):
    if not ARGS.c_test:
        raise Skip("C client suite not built (Check missing?)")
    r = subprocess.run([ARGS.c_test], capture_output=True, timeout=300,
                       env=dict(os.environ, SMOLLM3D_TEST_ENDPOINT=d.endpoint))
    out = (r.stdout + r.stderr).decode(errors="replace")
    check(r.returncode == 0 and "Checks:" in out, "test_client failed:\n%s" % out[-2000:])
    check("SKIPPED" not in out, "test_client skipped daemon tests:\n%s" % out[-500:])


def t_notify_ready_watchdog(d):
    n = d.notify
    check(n.wait_for("READY=1", 5), "READY=1 seen: %s" % n.lines())
    check(any(m.startswith("STATUS=") for m in n.lines()), "STATUS= lines")
    # WatchdogSec: WATCHDOG_USEC=1s -> pings at least every 0.5-1s
    count0 = len(n.seen("WATCHDOG=1"))
    time.sleep(1.6)
    check(len(n.seen("WATCHDOG=1")) > count0, "WATCHDOG=1 keeps coming: %s" % n.lines()[-5:])


def t_sigterm_drain(d):
    n = d.notify
    with d.client() as c:
        rid = c.send(c.generate_request("Write a long story.", temperature=0, max_tokens=3000))
        ev = c.recv(20000, rid)
        check(ev is not None and ev.WhichOneof("kind") == "started", "stream started")
        d.proc.send_signal(signal.SIGTERM)
        check(n.wait_for("STOPPING=1", 5), "STOPPING=1 seen: %s" % n.lines()[-5:])
        # a new request during the drain is refused (or the daemon is already gone)
        c2 = d.client()
        rid2 = c2.send(c2.generate_request("late", max_tokens=2))
        ev2 = c2.recv(3000, rid2)
        check(ev2 is None or is_error(ev2, PB.ERROR_SHUTTING_DOWN), "request while draining: %s" % ev2)
        c2.close()
        # the in-flight stream ends with a terminal event (finished or cancelled at grace)
        evs = wait_terminal(c, rid, 20)
        k = evs[-1].WhichOneof("kind")
        check(k in ("done", "error"), "in-flight stream terminal: %s" % evs[-1])
    try:
        rc = d.proc.wait(20)
    except subprocess.TimeoutExpired:
        raise AssertionError("daemon did not exit after SIGTERM drain")
    check(rc == 0, "exit status after SIGTERM: %d\n%s" % (rc, d.log_tail()))
    check(not os.path.exists(d.sock_path) or True, "socket removed (not required)")


# ---------------------------------------------------------------- tests: KV budget

def t_kv_budget(d):
    s = d.stats()
    total = s["kv_tokens_total"]
    ctx = s["context_length"] or 4096
    check(total > 0, "kv_tokens_total > 0")
    with d.client() as c:
        # A: a long stream that takes a good part of the budget
        n_a = max(16, min(total // 2, 1500))
        ra = c.send(c.generate_request("Write a long story.", temperature=0, max_tokens=n_a))
        ev = c.recv(30000, ra)
        check(ev is not None and ev.WhichOneof("kind") == "started", "A started: %s" % ev)
        # B: can never fit -> a clean busy / context_too_long error
        n_b = min(total + 64, ctx - 64) if total + 64 < ctx - 64 else ctx + 1000
        rb = c.send(c.generate_request("Too big for the budget.", temperature=0, max_tokens=n_b))
        evb = wait_terminal(c, rb, 20, cancel_after_start=True)[-1]
        check(is_error(evb, PB.ERROR_BUSY, PB.ERROR_CONTEXT_TOO_LONG),
              "B refused with busy/context_too_long: %s" % evb)
        # C: small, served while A runs
        rc_ = c.send(c.generate_request("Short one.", temperature=0, max_tokens=4))
        evc = wait_terminal(c, rc_, 60)
        check(evc[-1].WhichOneof("kind") == "done", "C served: %s" % evc[-1])
        # A goes on to its end
        eva = wait_terminal(c, ra, 120)
        check(eva[-1].WhichOneof("kind") == "done", "A finished: %s" % eva[-1])
    s = d.wait_idle(3)
    check(s["requests_rejected"] >= 1, "requests_rejected counted: %s" % s)
    # via smollm3ctl: error event as JSON, exit 1
    r = d.ctl("generate", "--json", "-n", str(n_b), "Too big again", check_rc=1, timeout=60)
    last = json_lines(r.stdout)[-1]
    check(last["event"] == "error" and last["code"] in ("busy", "context_too_long"),
          "ctl error line: %s" % last)
    check(d.alive(), "daemon alive")


# ---------------------------------------------------------------- tests: SmolLM2 (real)

def t_real_turn(d):
    # the reference chat prompt of tests/fixtures/smollm2: greedy ids == transformers'
    ref = json.load(open(os.path.join(ROOT, "tests/fixtures/smollm2/smollm2.refs.json")))
    ref = ref["prompts"]["chat"]
    evs = gen_json(d, "--temp", "0", "-n", "24", "What is the capital of France? Answer in one sentence.")
    check_stream_shape(evs, 24)
    check(evs[0]["prompt_tokens"] == ref["n_tokens"], "prompt tokens %d == reference %d" % (
        evs[0]["prompt_tokens"], ref["n_tokens"]))
    text = "".join(e["text"] for e in evs if e["event"] == "token")
    ids = token_ids(evs)
    check(ids[:6] == ref["gen_ids"][:6], "greedy ids %s == transformers %s (text %r)" % (
        ids[:8], ref["gen_ids"][:8], text))
    check("Paris" in text and evs[-1]["finish_reason"] == "stop", "answer: %r" % text)
    s = "real-1"
    e1 = gen_json(d, "--new-session", s, "--temp", "0", "-n", "32", "Hi! My name is Ada.")
    check_stream_shape(e1, 32)
    e2 = gen_json(d, "--session", s, "--temp", "0", "-n", "16", "What is my name?")
    check_stream_shape(e2, 16)
    u1 = e1[-1]["usage"]
    new = e2[0]["prompt_tokens"] - e2[0]["cached_tokens"]
    check(e2[0]["cached_tokens"] >= u1["prompt_tokens"] + u1["completion_tokens"] - 1 or
          e1[-1]["finish_reason"] == "length",
          "real second turn reuses the whole first turn: %s vs %s" % (e2[0], u1))
    check(new <= 30, "real second turn: %d new tokens" % new)
    d.ctl("delete", s)
    t_python_example(d)


# ---------------------------------------------------------------- tests: structured output

SCHEMAS = os.path.join(ROOT, "tests/grammar/schemas")


def constrained(d, setup, messages="Reply with JSON.", temperature=1.5, seed=7, max_tokens=400, **kw):
    """One constrained chat request; setup(generate) sets its constraint.
    Returns (content text, terminal event)."""
    with d.client() as c:
        req = c.generate_request(messages, temperature=temperature, seed=seed, max_tokens=max_tokens,
                                 thinking=False, **kw)
        setup(req.generate)
        evs = wait_terminal(c, c.send(req), timeout=180)
    text = "".join(e.token.text for e in evs if e.WhichOneof("kind") == "token"
                   and e.token.channel == PB.CHANNEL_CONTENT)
    return text, evs[-1]


def check_valid(d, schema_text, length_ok=False, **kw):
    """The output validates; it ended by the grammar (or, length_ok, at
    max_tokens: the length limit closes it, and it still validates)."""
    import jsonschema
    schema = json.loads(schema_text)

    def setup(g):
        g.json_schema = schema_text
    text, last = constrained(d, setup, **kw)
    check(last.WhichOneof("kind") == "done", "terminal: %s" % last)
    ends = (PB.FINISH_REASON_STOP, PB.FINISH_REASON_LENGTH) if length_ok else (PB.FINISH_REASON_STOP,)
    check(last.done.finish_reason in ends,
          "finish_reason %s (the grammar ends the output): %r" % (last.done.finish_reason, text[-200:]))
    try:
        jsonschema.validate(json.loads(text), schema)
    except Exception as e:  # noqa: BLE001
        raise AssertionError("output does not validate: %s\n%r" % (str(e)[:300], text[:400]))
    return text


def schema_files():
    return sorted(f for f in os.listdir(SCHEMAS) if f.endswith(".json") and ".instance." not in f)


# Random weights at temperature 1.5 almost never close an unbounded string
# (one token of 128K), so the fixture's schemas bound every string and array;
# the real model gets tests/grammar/schemas/ (t_real_structured).
FIXTURE_SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "status": {"enum": ["pending", "active", 3, None]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3}},
     "required": ["name", "age", "status", "ok", "tags"]},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5},
                                          {"const": "x"}]}, "minItems": 1, "maxItems": 4},
    {"type": "string", "pattern": "^[a-z]{2,5}@[a-z]{2,4}\\.(com|org)$"},
]


# Unbounded strings, arrays and recursion: random weights never close them
# by themselves, so each output is ended by max_tokens, and the engine keeps
# it complete (the shortest completion fits in what is left).
UNBOUNDED_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"},
                                      "tags": {"type": "array", "items": {"type": "string"}}},
     "required": ["name", "note", "tags"]},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "string"},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                        "required": ["v", "kids"]}}, "$ref": "#/$defs/node"},
]


def t_structured(d):
    for sch in FIXTURE_SCHEMAS:
        for seed in (1, 2, 3):
            check_valid(d, json.dumps(sch), seed=seed)
    forced0 = d.stats()["grammar_forced_tokens"]
    for sch in UNBOUNDED_SCHEMAS:
        for seed, n in ((1, 30), (2, 64), (3, 200)):
            check_valid(d, json.dumps(sch), length_ok=True, seed=seed, max_tokens=n)
    check(d.stats()["grammar_forced_tokens"] > forced0, "the length limit closed the outputs: %s" % d.stats())
    # gbnf; regex
    for seed in (1, 2):
        text, last = constrained(d, lambda g: setattr(g, "gbnf", 'root ::= ("yes" | "no") " " [0-9]{2,3}'),
                                 seed=seed)
        import re
        check(re.fullmatch(r"(yes|no) [0-9]{2,3}", text), "gbnf output %r" % text)
        text, last = constrained(d, lambda g: setattr(g, "regex", r"^[a-c]{2}-\d{3}$"), seed=seed)
        check(re.fullmatch(r"[a-c]{2}-\d{3}", text), "regex output %r" % text)
    # the same text, sampled without the constraint, is not JSON: the mask is what makes it valid
    with d.client() as c:
        req = c.generate_request("Reply with JSON.", temperature=1.5, seed=1, max_tokens=64, thinking=False)
        evs = wait_terminal(c, c.send(req), timeout=120)
    raw = "".join(e.token.text for e in evs if e.WhichOneof("kind") == "token")
    try:
        json.loads(raw)
        raise AssertionError("unconstrained output parses as JSON: %r" % raw)
    except ValueError:
        pass
    # refused at once, naming the keyword
    with d.client() as c:
        for bad, word in (('{"type": "number", "multipleOf": 3}', "multipleOf"),
                          ('{"type": "string", "format": "hostname-ish"}', "hostname-ish"),
                          ('{"type": ', "")):
            req = c.generate_request("x", max_tokens=4)
            req.generate.json_schema = bad
            ev = send_expect_reply(c, req)
            check(is_error(ev, PB.ERROR_INVALID_ARGUMENT) and word in ev.error.message,
                  "schema %s -> INVALID_ARGUMENT naming %r: %s" % (bad, word, ev))
        req = c.generate_request("x", max_tokens=4)
        req.generate.gbnf = "root ::= undefined-rule"
        ev = send_expect_reply(c, req)
        check(is_error(ev, PB.ERROR_INVALID_ARGUMENT), "bad gbnf -> INVALID_ARGUMENT: %s" % ev)
        st = c.stats()
        check(st.grammar_cache_hits > 0 and st.grammar_compiles > 0, "grammar stats %s" % st)


def t_structured_compile_off_thread(d):
    """A schema whose token index takes seconds to build (32 strings
    with distinct maxLength: one string rule each, none shared) stalls nobody: the RPC thread parks the request while the grammar cache's
    worker builds the index.  Shown by order, not by time: another client's
    whole stream runs while the slow request has not even started; a parked
    request can be cancelled; the slow one then completes, valid."""
    import random
    import jsonschema
    n = random.randint(110, 140)   # a schema no earlier test compiled: not in the cache

    def slow_schema(k):
        return json.dumps({"type": "object", "properties": {"s%d" % i: {"type": "string", "maxLength": k + i}
                                                            for i in range(32)}, "required": ["s0"]})
    with d.client() as cb, d.client() as cc:
        req = cb.generate_request("Reply with JSON.", temperature=1.5, seed=3, max_tokens=400, thinking=False)
        req.generate.json_schema = slow_schema(n)
        rb = cb.send(req)
        time.sleep(0.2)            # let the daemon take it first (the check below holds either way)
        rc = cc.send(cc.generate_request("Hello", temperature=0, max_tokens=24))
        evs_c = wait_terminal(cc, rc, 120)
        check(evs_c[-1].WhichOneof("kind") == "done", "the other stream ends: %s" % evs_c[-1])
        check(sum(e.WhichOneof("kind") == "token" for e in evs_c) > 0, "the other stream streamed tokens")
        ev = cb.recv(1, rb)
        check(ev is None, "the slow request had an event before the other stream ended: %s" % ev)
        # parked and cancelled: the terminal event comes without waiting for the index
        req = cb.generate_request("Reply with JSON.", max_tokens=8, thinking=False)
        req.generate.json_schema = slow_schema(n + 1)
        rd = cb.send(req)
        cb.cancel(rd)
        last = wait_terminal(cb, rd, 60)[-1]
        check((last.WhichOneof("kind") == "done" and last.done.finish_reason == PB.FINISH_REASON_CANCELLED) or
              (last.WhichOneof("kind") == "error" and last.error.code == PB.ERROR_CANCELLED),
              "a parked request cancelled: %s" % last)
        evs_b = wait_terminal(cb, rb, 600)
    text = "".join(e.token.text for e in evs_b if e.WhichOneof("kind") == "token")
    check(evs_b[-1].WhichOneof("kind") == "done", "the slow request completes: %s" % evs_b[-1])
    jsonschema.validate(json.loads(text), json.loads(slow_schema(n)))


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
            "b": {"type": "integer", "minimum": -1000, "maximum": 1000}}, "required": ["a", "b"]}}},
]


def tool_request(d, choice, seed, temperature=1.5, thinking=False, max_tokens=300,
                 messages="What is the weather in Paris? And what is 2 + 3?"):
    """A chat request with TOOLS and tool_choice; returns (tool_call events, content, terminal)."""
    with d.client() as c:
        req = c.generate_request(messages, temperature=temperature, seed=seed, max_tokens=max_tokens,
                                 thinking=thinking)
        req.generate.chat.tools_json = json.dumps(TOOLS)
        req.generate.tool_choice = choice
        evs = wait_terminal(c, c.send(req), timeout=240)
    calls = [e.tool_call for e in evs if e.WhichOneof("kind") == "tool_call"]
    content = "".join(e.token.text for e in evs if e.WhichOneof("kind") == "token"
                      and e.token.channel == PB.CHANNEL_CONTENT)
    return calls, content, evs[-1]


def check_calls(calls, last, named=None):
    import jsonschema
    check(last.WhichOneof("kind") == "done" and last.done.finish_reason == PB.FINISH_REASON_TOOL_CALLS,
          "finish_reason tool_calls: %s" % last)
    check(len(calls) >= 1 and (named is None or len(calls) == 1), "calls %s" % calls)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in calls:
        check(call.name in params and (named is None or call.name == named), "call of %r" % call.name)
        jsonschema.validate(json.loads(call.arguments_json), params[call.name])


def t_tool_choice(d):
    """tool_choice "required" / a name constrain the output to SmolLM3's
    <tool_call>{"name": .., "arguments": {..}}</tool_call> blocks, arguments
    valid against the tool's parameters (Python jsonschema), on random
    weights at T=1.5, many seeds; with thinking the call comes after </think>."""
    for seed in range(1, 9):
        calls, content, last = tool_request(d, "required", seed)
        check_calls(calls, last)
        check(content.strip() == "", "content besides the calls: %r" % content)
    for seed in range(1, 5):
        calls, content, last = tool_request(d, "add", seed)
        check_calls(calls, last, named="add")
    calls, content, last = tool_request(d, "get_weather", 3, thinking=True, max_tokens=600)
    if last.WhichOneof("kind") == "done" and last.done.finish_reason == PB.FINISH_REASON_LENGTH:
        pass    # random weights may think for the whole budget: the constraint never started
    else:
        check_calls(calls, last, named="get_weather")
    # refused at once, naming the problem
    with d.client() as c:
        for choice, tools, word in (("nope", TOOLS, "not among"), ("required", [], "tools"),
                                    ("bad name!", TOOLS, "function name"),
                                    ("f", [{"type": "function", "function": {
                                        "name": "f", "parameters": {"type": "number", "multipleOf": 2}}}],
                                     "multipleOf")):
            req = c.generate_request("x", max_tokens=4)
            if tools:
                req.generate.chat.tools_json = json.dumps(tools)
            req.generate.tool_choice = choice
            ev = send_expect_reply(c, req)
            check(is_error(ev, PB.ERROR_INVALID_ARGUMENT) and word in ev.error.message,
                  "tool_choice %r -> INVALID_ARGUMENT naming %r: %s" % (choice, word, ev))
        req = c.generate_request("x", max_tokens=4)
        req.generate.chat.tools_json = json.dumps(TOOLS)
        req.generate.tool_choice = "required"
        req.generate.json_schema = '{"type": "object"}'
        ev = send_expect_reply(c, req)
        check(is_error(ev, PB.ERROR_INVALID_ARGUMENT), "tool_choice + json_schema refused: %s" % ev)


def t_real_structured(d):
    text, last = constrained(d, lambda g: setattr(g, "json_object", True), temperature=0.0,
                             messages="Describe a cat as a JSON object.")
    check(isinstance(json.loads(text), dict), "json_object output %r" % text[:200])
    for f in schema_files():
        st = open(os.path.join(SCHEMAS, f)).read()
        prompt = "Write a short example JSON instance of this JSON schema:\n%s" % st
        check_valid(d, st, length_ok=True, messages=prompt, temperature=0.0, max_tokens=600,
                    repetition_penalty=1.3)

# ---------------------------------------------------------------- tests: KV types

def t_kv_types():
    """--kv-type: memory per token in stats, the budget in tokens follows the type, a
    session's KV memory in sessions; a spill file of another KV type is refused and the
    session recomputed; a q8_0 session spilled at the drain comes back from disk; bad
    values and the kv_f32 conflict are refused with a message."""
    spill = tempfile.mkdtemp(prefix="smollm3d-kvtype-")
    flags = ["--kv-budget-mb", "16", "--kv-spill-dir", spill, "--kv-spill-when-idle=false"]
    # fixture-a: 8 layers x K,V x 2 KV heads x 64: f16 2 bytes, q8_0 34 per 32, f32 4
    want = {"f16": 8 * 2 * 2 * 64 * 2, "q8_0": 8 * 2 * 2 * 2 * 34, "f32": 8 * 2 * 2 * 64 * 4}
    budget = 16 << 20
    try:
        for run, kv_type in enumerate(("f16", "q8_0", "q8_0")):
            d = Daemon(FIXTURE_A, "kv-" + kv_type, ["--kv-type", kv_type] + flags)
            try:
                st = d.stats()
                bpt = want[kv_type]
                check(st["kv_type"] == kv_type and st["kv_bytes_per_token"] == bpt, "stats: %s" % st)
                page = 32 * bpt
                check(st["kv_tokens_total"] == budget // page * 32 and
                      st["kv_bytes_total"] == st["kv_tokens_total"] * bpt, "budget in tokens: %s" % st)
                r = d.ctl("stats")
                check(re.search(rb"(?m)^kv_bytes_per_token +%d$" % bpt, r.stdout) and
                      re.search(rb"(?m)^kv_type +%s$" % kv_type.encode(), r.stdout), "stats table: %s" % r.stdout)
                evs = gen_json(d, "--new-session", "kvt", "--temp", "0", "-n", "6", "My name is Ada. Remember it.")
                check_stream_shape(evs, 6)
                started = evs[0]
                if run == 1:  # the f16 daemon's file, refused at start; the turn recomputed
                    check(st["spill_files_rejected"] == 1, "f16 file refused: %s" % st)
                    check("another KV type" in d.log_tail(100000), "refusal logged: %s" % d.log_tail())
                    check(started["restored_tokens"] == 0 and started["cached_tokens"] == 0,
                          "recomputed after the f16 file was refused: %s" % started)
                if run == 2:
                    check(st["spill_files_rejected"] == 0, "q8_0 file accepted: %s" % st)
                    check(started["restored_tokens"] > 0 and started["cached_tokens"] == started["restored_tokens"],
                          "q8_0 session restored from disk: %s" % started)
                s = {x["session_id"]: x for x in json.loads(d.ctl("sessions", "--json").stdout)["sessions"]}
                tok = s["kvt"]["tokens"]
                check(s["kvt"]["kv_bytes"] == -(-tok // 32) * page, "session kv_bytes: %s (page %d)" % (s, page))
                check(b"KV_BYTES" in d.ctl("sessions").stdout, "sessions table has KV_BYTES")
                check(d.stop() == 0, "drain exit 0\n%s" % d.log_tail())
            finally:
                d.close()
    finally:
        subprocess.run(["rm", "-rf", spill])
    bin_ = os.path.join(ARGS.build, "bin/smollm3d")
    for args, msg in ((["--kv-type", "q4_0"], b"f32, f16 or q8_0"),
                      (["--kv-type", "q8_0", "--kv-f32"], b"conflicts with kv_type = q8_0")):
        r = subprocess.run([bin_, "--model", FIXTURE_A, "--listen", "ipc:///nonexistent/x.sock"] + args,
                           capture_output=True, timeout=30)
        check(r.returncode != 0 and msg in r.stderr, "%s: exit %d: %s" % (args, r.returncode, r.stderr[-300:]))
    # a head size that is not whole q8_0 blocks (fixture-t: 16): refused at load, by name
    r = subprocess.run([bin_, "--model", FIXTURE_T, "--listen", "ipc:///nonexistent/x.sock", "--kv-type", "q8_0"],
                       capture_output=True, timeout=60)
    check(r.returncode != 0 and b"head size 16" in r.stderr, "fixture-t q8_0: exit %d: %s" % (
        r.returncode, r.stderr[-300:]))



def t_prefix_persist():
    """Cached prefixes persist like sessions: a request without a session leaves its KV
    as a cached prefix, which the drain writes to kv_spill_dir; a restarted daemon's
    first request that shares its long system prompt reads it back (Started.restored_tokens,
    stats spill_prefixes_restored) and answers with the greedy tokens a cold daemon
    gives; a corrupt prefix file is refused (counted, removed) and the prompt recomputed."""
    spill = tempfile.mkdtemp(prefix="smollm3d-prefix-")
    system = " ".join("Rule %d: answer briefly, politely and in plain words." % i for i in range(24))
    flags = ["--kv-spill-dir", spill, "--kv-spill-when-idle=false"]

    def ask(d, k):
        evs = gen_json(d, "--system", system, "--temp", "0", "-n", "6", "Question %d: what is %d + %d?" % (k, k, k))
        check_stream_shape(evs, 6)
        return evs

    try:
        cold = Daemon(FIXTURE_T, "prefix-cold", [])
        try:
            want = {k: token_ids(ask(cold, k)) for k in (2, 3)}
        finally:
            cold.close()
        d = Daemon(FIXTURE_T, "prefix-1", flags)
        try:
            first = ask(d, 1)[0]
            check(first["cached_tokens"] == 0, "cold start: %s" % first)
            check(d.stop() == 0, "drain exit 0\n%s" % d.log_tail())
            check(re.search(r"cached prefix '#prefix-[0-9a-f]{32}' written", d.log_tail(100000)),
                  "the drain wrote the cached prefix: %s" % d.log_tail())
        finally:
            d.close()
        files = glob.glob(os.path.join(spill, "*.kv"))
        check(len(files) == 1, "one prefix file: %s" % os.listdir(spill))
        d = Daemon(FIXTURE_T, "prefix-2", flags)
        try:
            evs = ask(d, 2)
            st = d.stats()
            started = evs[0]
            check(started["restored_tokens"] >= 200 and started["cached_tokens"] == started["restored_tokens"],
                  "the shared system prompt read back from disk: %s" % started)
            check(token_ids(evs) == want[2], "greedy tokens as a cold daemon's: %s vs %s" % (token_ids(evs), want[2]))
            check(st["spill_prefixes_restored"] == 1 and st["spill_sessions_restored"] == 0 and
                  st["spill_tokens_restored"] >= started["restored_tokens"], "stats: %s" % st)
        finally:
            d.close()   # killed: the second request's prefix is not written
        check(glob.glob(os.path.join(spill, "*.kv")) == files, "still the one file: %s" % os.listdir(spill))
        with open(files[0], "r+b") as f:   # a KV byte near the end
            f.seek(-5, os.SEEK_END)
            b = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x20]))
        d = Daemon(FIXTURE_T, "prefix-3", flags)
        try:
            evs = ask(d, 3)
            st = d.stats()
            check(evs[0]["restored_tokens"] == 0 and evs[0]["cached_tokens"] == 0,
                  "corrupt prefix file not used: %s" % evs[0])
            check(token_ids(evs) == want[3], "recomputed: %s vs %s" % (token_ids(evs), want[3]))
            check(st["spill_files_rejected"] == 1 and st["spill_prefixes_restored"] == 0, "stats: %s" % st)
            check("checksum mismatch" in d.log_tail(100000), "refusal logged: %s" % d.log_tail())
            check(not os.path.exists(files[0]), "corrupt file removed")
        finally:
            d.close()
    finally:
        subprocess.run(["rm", "-rf", spill])


# ---------------------------------------------------------------- tests: speculative decoding

def spec_run(d, messages, spec, top=0, **kw):
    """One chat request with speculative decoding on (spec=None: the daemon's
    default) or off; returns (token ids, logprobs, text, done event)."""
    with d.client() as c:
        req = c.generate_request(messages, thinking=False, **kw)
        req.generate.top_logprobs = top
        if spec is not None:
            req.generate.speculative = spec
        evs = wait_terminal(c, c.send(req), timeout=300)
    check(evs[-1].WhichOneof("kind") == "done", "terminal: %s" % evs[-1])
    toks = [e.token for e in evs if e.WhichOneof("kind") == "token"]
    ids = [t.token_id for t in toks if t.token_id >= 0]
    lps = [(t.logprob, [x.token_id for x in t.top_logprobs]) for t in toks if t.token_id >= 0 and t.HasField("logprob")]
    return ids, lps, "".join(t.text for t in toks), evs[-1].done


def spec_same(d, messages, **kw):
    """The request with and without speculation: the same tokens, text,
    finish and logprobs.  Returns the speculative run's usage."""
    a = spec_run(d, messages, None, **kw)
    b = spec_run(d, messages, False, **kw)
    check(a[0] == b[0], "%r %s: speculative %s (usage %s) != plain %s" % (messages, kw, a[0], a[3].usage, b[0]))
    check(a[2] == b[2] and a[3].finish_reason == b[3].finish_reason and a[3].stop_string == b[3].stop_string,
          "text/finish %r %s vs %r %s" % (a[2][-80:], a[3].finish_reason, b[2][-80:], b[3].finish_reason))
    check(a[3].usage.completion_tokens == b[3].usage.completion_tokens, "completion_tokens")
    check(len(a[1]) == len(b[1]) and all(abs(x[0] - y[0]) < 1e-3 and x[1] == y[1] for x, y in zip(a[1], b[1])),
          "logprobs %s vs %s" % (a[1][:4], b[1][:4]))
    check(b[3].usage.drafted_tokens == 0 and b[3].usage.accepted_tokens == 0, "off: nothing drafted %s" % b[3].usage)
    u = a[3].usage
    check(u.accepted_tokens <= u.drafted_tokens, "accepted <= drafted: %s" % u)
    check(u.decode_steps <= u.completion_tokens and b[3].usage.decode_steps == b[3].usage.completion_tokens,
          "decode steps %s / %s" % (u, b[3].usage))
    return u


def t_speculative(d):
    # random weights: greedy output loops, so drafts of its own repeats are accepted
    with d.client() as c:
        before = c.stats()
    prompts = ["Tell me about topic number %d, please." % i for i in range(4)]
    drafted = accepted = 0
    for p in prompts:
        u = spec_same(d, p, temperature=0.0, max_tokens=64, logprobs=True, top=3)
        drafted += u.drafted_tokens
        accepted += u.accepted_tokens
    check(accepted > 0, "drafts accepted on looping output: drafted %d, accepted %d" % (drafted, accepted))
    # seeded sampling: the acceptance is plain sampling's own draw, so the same tokens
    for seed in (1, 2, 3):
        spec_same(d, prompts[0], temperature=1.0, seed=seed, max_tokens=48)
    # max_tokens and stop strings exact (the stop taken from the plain output's middle)
    spec_same(d, prompts[1], temperature=0.0, max_tokens=5)
    ids, _, text, _ = spec_run(d, prompts[2], False, temperature=0.0, max_tokens=64)
    stop = text[len(text) // 2:len(text) // 2 + 3]
    if stop.strip():
        spec_same(d, prompts[2], temperature=0.0, max_tokens=64, stop=[stop])
    # several requests at once: each stream's drafts verified in the shared step
    msgs = ["Say something about the number %d." % i for i in range(6)]
    alone = [spec_run(d, m, False, temperature=0.0, max_tokens=40)[0] for m in msgs]
    procs = [d.ctl_popen("generate", "--json", "--no-think", "--temp", "0", "-n", "40", m) for m in msgs]
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0, "concurrent %d exit %d: %s" % (i, p.returncode, err[-300:]))
        evs = json_lines(out)
        check_stream_shape(evs, 40)
        check(token_ids(evs) == alone[i], "batched speculative %d != plain alone" % i)
    # a constrained request drafts only what its grammar allows: same output
    req_schema = json.dumps(FIXTURE_SCHEMAS[0])
    with d.client() as c:
        outs = []
        for spec in (None, False):
            req = c.generate_request("Reply with JSON.", temperature=1.5, seed=3, max_tokens=400, thinking=False)
            req.generate.json_schema = req_schema
            if spec is not None:
                req.generate.speculative = spec
            evs = wait_terminal(c, c.send(req), timeout=180)
            outs.append(([e.token.token_id for e in evs if e.WhichOneof("kind") == "token"], evs[-1]))
        check(outs[0][0] == outs[1][0], "constrained: speculative != plain")
        json.loads("".join(e.token.text for e in evs if e.WhichOneof("kind") == "token"))
    after = d.wait_idle(5)
    check(after["spec_drafted_tokens"] - before.spec_drafted_tokens >= drafted and
          after["spec_accepted_tokens"] - before.spec_accepted_tokens >= accepted and
          after["spec_verify_steps"] > before.spec_verify_steps and after["decode_steps"] > 0,
          "stats counters %s" % {k: v for k, v in after.items() if "spec" in k or "steps" in k})


def t_speculative_off_by_config(d):
    # speculative = 0: off unless the request asks
    u = spec_run(d, "Tell me about topic number 1, please.", None, temperature=0.0, max_tokens=64)[3].usage
    check(u.drafted_tokens == 0, "config off: drafted %s" % u)
    ids_on, _, _, done = spec_run(d, "Tell me about topic number 1, please.", True, temperature=0.0, max_tokens=64)
    check(done.usage.drafted_tokens > 0, "asked for: drafted %s" % done.usage)


def t_real_speculative(d):
    # SmolLM2 copying its context: greedy identical, several tokens per step
    text = ("The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the warm afternoon sun "
            "while the quick brown fox runs across the green field towards the old wooden barn.")
    u = spec_same(d, "Repeat the following text exactly, word for word:\n\n" + text, temperature=0.0,
                  max_tokens=80, logprobs=True)
    check(u.accepted_tokens >= 5 and u.decode_steps < u.completion_tokens,
          "copying: %d accepted in %d steps for %d tokens" % (u.accepted_tokens, u.decode_steps,
                                                              u.completion_tokens))
    code = "\n".join("def f%d(x):\n    return x * %d + total_count" % (i, i) for i in range(8))
    u = spec_same(d, "Rename the variable total_count to n_total in this code and return the whole code:\n\n"
                  + code, temperature=0.0, max_tokens=120)
    check(u.accepted_tokens > 0, "code edit: nothing accepted %s" % u)
    spec_same(d, "Write a haiku about autumn.", temperature=0.7, seed=11, max_tokens=40)

# ---------------------------------------------------------------- main

def group(name, model, tests, extra=(), notify=False, watchdog_usec=None):
    if ARGS.filters and not any(f in tn for tn, _ in tests for f in ARGS.filters):
        return
    try:
        d = Daemon(model, name, extra, notify=notify, watchdog_usec=watchdog_usec)
    except Exception as e:  # noqa: BLE001
        RESULTS["fail"] += 1
        print("FAIL %s: daemon start: %s" % (name, e), flush=True)
        return
    try:
        prev = None
        for tn, fn in tests:
            if ARGS.filters and not any(f in tn for f in ARGS.filters):
                continue
            if not d.alive() and tn != "sigterm_drain":
                # a crash is one failure (of the test that caused it); the
                # remaining tests get a fresh daemon so they still say something
                RESULTS["fail"] += 1
                print("FAIL %s: smollm3d died (exit %s) during or after %s:\n%s" % (
                    name, d.proc.returncode, prev, d.log_tail(1200)), flush=True)
                d.close()
                try:
                    d = Daemon(model, name, extra, notify=notify, watchdog_usec=watchdog_usec)
                except Exception as e:  # noqa: BLE001
                    RESULTS["fail"] += 1
                    print("FAIL %s: daemon restart: %s" % (name, e), flush=True)
                    return
            run_test(tn, fn, d)
            prev = tn
        if not d.alive() and prev != "sigterm_drain":
            RESULTS["fail"] += 1
            print("FAIL %s: smollm3d died during %s:\n%s" % (name, prev, d.log_tail(1200)))
    finally:
        d.close()


def main():
    global ARGS, PB
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--c-test")
    ap.add_argument("--pb2-dir")
    ap.add_argument("filters", nargs="*")
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    if not ARGS.pb2_dir:
        ARGS.pb2_dir = tempfile.mkdtemp(prefix="smollm3-pb2-")
    PB = pyclient.load_pb2(ARGS.pb2_dir)

    group("fixture-t", FIXTURE_T, [
        ("notify_ready_watchdog", t_notify_ready_watchdog),
        ("health", t_health),
        ("stats_json", t_stats_json),
        ("turn_streamed", t_turn_streamed),
        ("ctl_contract", t_ctl_contract),
        ("cancel_mid_stream", t_cancel_mid_stream),
        ("batched_equals_sequential", t_batched_equals_sequential),
        ("second_turn_cached", t_second_turn_cached),
        ("second_turn_history_sent_back", t_second_turn_history_sent_back),
        ("tenants", t_tenants),
        ("client_vanishes", t_client_vanishes),
        ("bad_input", t_bad_input),
        ("python_example_client", t_python_example),
        ("example_session_history", t_example_session_history),
        ("c_client_suite", t_c_client),
        ("sigterm_drain", t_sigterm_drain),
    ], extra=["--drain-grace-ms", "3000"], notify=True, watchdog_usec=1000000)

    group("structured", FIXTURE_T, [("structured_output", t_structured),
                                    ("structured_compile_off_thread", t_structured_compile_off_thread),
                                    ("tool_choice", t_tool_choice)])

    # the fixture's verify steps cost what they verify (its 128K-row output
    # layer dominates): measured costs would never let it draft
    group("speculative", FIXTURE_T, [("speculative_exact", t_speculative)],
          extra=["--speculative-calibrate=false"])
    group("speculative-off", FIXTURE_T, [("speculative_off_by_config", t_speculative_off_by_config)],
          extra=["--speculative", "0"])

    group("kv-budget", FIXTURE_T, [("kv_budget_exhausted", t_kv_budget)],
          extra=["--kv-budget-mb", "1"])

    run_test("session_flags_on_the_wire", t_session_flags_on_the_wire)
    run_test("kv_types", t_kv_types)
    run_test("prefix_persist", t_prefix_persist)

    if not ARGS.filters or any(f in "real_smollm2" for f in ARGS.filters):
        r = subprocess.run(["sh", os.path.join(ROOT, "tests/get_smollm2.sh")],
                           capture_output=True, cwd=ROOT)
        if r.returncode != 0 or not os.path.exists(SMOLLM2):
            RESULTS["fail"] += 1
            print("FAIL real_smollm2: get_smollm2.sh exit %d: %s" % (r.returncode, r.stderr[-300:]))
        else:
            group("smollm2", SMOLLM2, [("real_smollm2", t_real_turn),
                                        ("real_smollm2_structured", t_real_structured),
                                        ("real_smollm2_speculative", t_real_speculative)])

    print("%d passed, %d failed" % (RESULTS["pass"], RESULTS["fail"]), flush=True)
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
