#!/usr/bin/env python3
"""test_chaos.py - smollm3d killed and restarted under a spill directory
(kv_spill_dir).  Run by tests/chaos/run.sh.

Five sessions hold token-id conversations (so a recomputed turn sees exactly
the tokens a cached one does).  A reference daemon without a spill directory
runs every turn with the sessions in memory; the daemon under test runs the
same turns across crashes and restarts, and its greedy tokens must equal the
reference's each turn, whether the session came back from disk or was
recomputed.

  phase 1  --kv-spill-when-idle false --max-sessions 2: turn 1 of s1..s5;
           eviction writes s1, s2, s3; a stream through the gateway is
           SIGKILLed mid-way (the gateway reports the error, /health 503)
  garbage  s2's file truncated, s3's file from an older version, s4's file
           written by a daemon on another model, random bytes under a session
           file name, an unfinished write, a file of another name
  phase 2  restart: the daemon starts, counts and logs each bad file; the
           gateway is back; turn 2: s1 restored from disk (Started.cached_tokens
           and restored_tokens), s2..s5 recomputed; SIGTERM (drain) writes all
           (and the gateway's session-less request, as a cached prefix)
  phase 3  restart (write-behind on): turn 3: all five restored (a clean
           restart loses no session); the idle engine writes each changed
           session; SIGKILL
  phase 4  restart: turn 4: all five restored (written behind before the crash)

    python3 tests/chaos/test_chaos.py --build BUILD --pb2-dir DIR
Prints "ok NAME" / "FAIL NAME: why" / "SKIPPED NAME: why" and "N passed, N failed".
"""
import argparse
import glob
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
import time
import http.client

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "proto", "examples"))
import client as pyclient  # noqa: E402

FIXTURE_T = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
FIXTURE_A = os.path.join(ROOT, "tests/fixtures/models/fixture-a.Q4_K_M.gguf")
SESSIONS = ["s1", "s2", "s3", "s4", "s5"]
GEN = 8

ARGS = None
PB = None
RESULTS = {"pass": 0, "fail": 0}


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def step(name, fn, *a):
    t0 = time.monotonic()
    try:
        r = fn(*a)
    except Exception as e:  # noqa: BLE001 - a failure of any kind
        RESULTS["fail"] += 1
        print("FAIL %s: %s" % (name, e), flush=True)
        raise
    RESULTS["pass"] += 1
    print("ok %s (%.1fs)" % (name, time.monotonic() - t0), flush=True)
    return r


class Daemon:
    def __init__(self, tmp, name, model=FIXTURE_T, extra=()):
        self.sock_path = os.path.join(tmp, name + ".sock")
        self.endpoint = "ipc://" + self.sock_path
        self.log_path = os.path.join(tmp, name + ".log")
        self.model = model
        self.extra = list(extra)
        self.proc = None

    def start(self, extra=()):
        self.log = open(self.log_path, "ab")
        cmd = [os.path.join(ARGS.build, "bin/smollm3d"), "--model", self.model, "--listen",
               self.endpoint, "--threads", "1", "--kv-budget-mb", "16"] + self.extra + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "smollm3d exited during start:\n%s" % self.log_text()[-1500:])
            if os.path.exists(self.sock_path) and self.ctl("health").returncode == 0:
                return self
            time.sleep(0.1)
        raise RuntimeError("smollm3d not ready")

    def ctl(self, *args):
        cmd = [os.path.join(ARGS.build, "bin/smollm3ctl"), "--connect", self.endpoint,
               "--timeout", "10"] + list(args)
        return subprocess.run(cmd, capture_output=True, timeout=30)

    def stats(self):
        r = self.ctl("stats", "--json")
        check(r.returncode == 0, "stats: %s" % r.stderr.decode())
        return json.loads(r.stdout)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def term(self):
        self.proc.terminate()
        rc = self.proc.wait(60)
        self.log.close()
        return rc


class Gateway:
    def __init__(self, tmp, endpoint):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.log = open(os.path.join(tmp, "gateway.log"), "wb")
        self.proc = subprocess.Popen([os.path.join(ARGS.build, "bin/smollm3-gateway"), "--listen",
                                      "127.0.0.1:%d" % self.port, "--daemon", endpoint],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/health")
            st = c.getresponse().status
            c.close()
            return st
        except OSError:
            return None

    def wait_health(self, want, timeout=20):
        deadline = time.monotonic() + timeout
        st = None
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "gateway exited")
            st = self.health()
            if st == want:
                return
            time.sleep(0.1)
        raise AssertionError("gateway /health %s, wanted %d" % (st, want))

    def chat(self, content):
        body = json.dumps({"model": "smollm3", "max_tokens": 4, "temperature": 0,
                           "messages": [{"role": "user", "content": content}]})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.log.close()


def turn_ids(session, k):
    rnd = random.Random("%s-%d" % (session, k))
    n = 40 if k == 1 else 12
    return [rnd.randrange(1000, 30000) for _ in range(n)]


def run_turn(d, history, session):
    """One greedy turn on d: prompt = history; returns (started, generated ids)."""
    with pyclient.Client(d.endpoint, PB) as c:
        evs = list(c.stream(c.generate_request(token_ids=history, session=session, temperature=0,
                                               max_tokens=GEN), 60000))
    kinds = [e.WhichOneof("kind") for e in evs]
    check(kinds[0] == "started" and kinds[-1] == "done", "%s: events %s %s" % (session, kinds, evs[-1]))
    ids = [e.token.token_id for e in evs if e.WhichOneof("kind") == "token" and e.token.token_id >= 0]
    return evs[0].started, ids


class Conversations:
    """Each session's token history, grown turn by turn."""

    def __init__(self):
        self.hist = {s: [] for s in SESSIONS}

    def prompt(self, s, k):
        return self.hist[s] + turn_ids(s, k)

    def commit(self, s, k, gen):
        self.hist[s] = self.prompt(s, k) + gen


def reference(tmp):
    """Every turn on a daemon whose sessions never leave memory."""
    d = Daemon(tmp, "ref", extra=["--max-sessions", "16"]).start()
    conv, out = Conversations(), {}
    try:
        for k in range(1, 5):
            for s in SESSIONS:
                st, gen = run_turn(d, conv.prompt(s, k), s)
                check(k == 1 or st.cached_tokens > 0, "reference turn %d of %s not cached" % (k, s))
                out[(s, k)] = gen
                conv.commit(s, k, gen)
    finally:
        d.term()
    return out


def file_of(d, session):
    m = re.findall(r"session '%s' written to ([0-9a-f]{32}\.kv)" % re.escape(session), d.log_text())
    check(m, "no spill write of %s in the log" % session)
    return m[-1]


def main():
    global ARGS, PB
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pb2-dir")
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    PB = pyclient.load_pb2(ARGS.pb2_dir or tempfile.mkdtemp(prefix="smollm3-pb2-"))
    tmp = tempfile.mkdtemp(prefix="smollm3-chaos-")
    spill = os.path.join(tmp, "kv")
    gw = None
    d = None
    try:
        ref = step("reference_turns", reference, tmp)
        conv = Conversations()
        d = Daemon(tmp, "d", extra=["--kv-spill-dir", spill, "--max-sessions", "2"])

        def phase1():
            nonlocal gw
            d.start(["--kv-spill-when-idle=false"])
            gw = Gateway(tmp, d.endpoint)
            gw.wait_health(200)
            for s in SESSIONS:
                st, gen = run_turn(d, conv.prompt(s, 1), s)
                check(gen == ref[(s, 1)], "turn 1 of %s: %s != reference %s" % (s, gen, ref[(s, 1)]))
                conv.commit(s, 1, gen)
            # the writer thread writes what the evictions queued (the files count at once)
            deadline = time.monotonic() + 30
            while d.stats()["spill_sessions_written"] < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            st = d.stats()
            check(st["spill_sessions_written"] == 3 and st["spill_files"] == 3,
                  "eviction wrote s1..s3: %s" % st)
            # a stream through the gateway, SIGKILLed mid-way
            body = json.dumps({"model": "smollm3", "stream": True, "max_tokens": 3000,
                               "messages": [{"role": "user", "content": "Write a long story."}]})
            so = socket.create_connection(("127.0.0.1", gw.port))
            so.settimeout(20)
            so.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
            buf = b""
            while buf.count(b"data: ") < 3:
                b = so.recv(65536)
                check(b, "stream ended early: %r" % buf[-300:])
                buf += b
            d.kill()
            while b"data: [DONE]" not in buf:
                b = so.recv(65536)
                if not b:
                    break
                buf += b
            so.close()
            check(b'"error"' in buf and b"data: [DONE]" in buf, "the stream ends with an error: %r" % buf[-300:])
            gw.wait_health(503)
        step("phase1_turns_evictions_sigkill_mid_stream", phase1)

        names = {}

        def garbage():
            for s in ("s1", "s2", "s3"):
                names[s] = file_of(d, s)
                check(os.path.exists(os.path.join(spill, names[s])), "%s's file exists" % s)
            p2 = os.path.join(spill, names["s2"])
            with open(p2, "r+b") as f:
                f.truncate(os.path.getsize(p2) // 2)
            p3 = os.path.join(spill, names["s3"])
            with open(p3, "r+b") as f:
                f.seek(8)
                f.write((0).to_bytes(4, "little"))          # format version 0
            # s4 (not spilled here: it was in memory at the kill) gets a file
            # written by a daemon on another model
            other = Daemon(tmp, "other", model=FIXTURE_A,
                           extra=["--kv-spill-dir", os.path.join(tmp, "kv-other")]).start()
            run_turn(other, turn_ids("s4", 1), "s4")
            check(other.term() == 0, "other daemon drained")
            names["s4"] = file_of(other, "s4")
            shutil.copy(os.path.join(tmp, "kv-other", names["s4"]), os.path.join(spill, names["s4"]))
            names["random"] = "%032x.kv" % random.getrandbits(128)
            with open(os.path.join(spill, names["random"]), "wb") as f:
                f.write(os.urandom(300000))
            with open(os.path.join(spill, ".tmp-%s-1" % names["s1"][:32]), "wb") as f:
                f.write(b"unfinished")
            with open(os.path.join(spill, "notes.txt"), "wb") as f:
                f.write(b"not a session file")
        step("garbage_in_spill_dir", garbage)

        def phase2():
            d.start(["--kv-spill-when-idle=false"])
            st = d.stats()
            check(st["spill_files_rejected"] == 4 and st["spill_files"] == 1,
                  "4 bad files refused, s1 kept: %s" % st)
            log = d.log_text().split("loading model")[-1]
            for key, why in (("s2", "truncated"), ("s3", "version"), ("s4", "another model"),
                             ("random", "")):
                check(re.search(re.escape(names[key]) + ": [^\n]*" + why + "[^\n]*ignored", log),
                      "log names %s (%s): %s" % (names[key], key, log[-2000:]))
            check("notes.txt: not a session file name; ignored" in log, "foreign name logged")
            check(os.path.exists(os.path.join(spill, "notes.txt")), "foreign name left alone")
            check(not glob.glob(os.path.join(spill, ".tmp-*")), "unfinished write removed")
            gw.wait_health(200)
            check(gw.chat("Hello")[0] == 200, "gateway serves after the restart")
            for s in SESSIONS:
                prompt = conv.prompt(s, 2)
                st, gen = run_turn(d, prompt, s)
                turn1 = len(conv.hist[s]) - 1      # the last generated token has no KV yet
                if s == "s1":
                    check(st.restored_tokens > 0 and st.cached_tokens == st.restored_tokens and
                          st.cached_tokens >= turn1 - GEN,
                          "s1 restored from disk: %s (turn 1 %d tokens)" % (st, turn1))
                else:
                    check(st.cached_tokens == 0 and st.restored_tokens == 0, "%s recomputed: %s" % (s, st))
                check(gen == ref[(s, 2)], "turn 2 of %s: %s != reference %s" % (s, gen, ref[(s, 2)]))
                conv.commit(s, 2, gen)
            st = d.stats()
            check(st["spill_sessions_restored"] == 1 and st["spill_files_rejected"] == 4, "%s" % st)
            check(d.term() == 0, "drain exit 0")
            # the five sessions, and the gateway's "Hello" (no session) as a cached prefix
            check(len(glob.glob(os.path.join(spill, "*.kv"))) == 6 and "cached prefix '#prefix-" in d.log_text(),
                  "drain + eviction: 5 session files and a prefix: %s" % os.listdir(spill))
        step("phase2_restart_garbage_ignored_restore_and_recompute", phase2)

        def phase3():
            d.start(["--max-sessions", "16"])
            for s in SESSIONS:
                st, gen = run_turn(d, conv.prompt(s, 3), s)
                check(st.restored_tokens > 0 and st.cached_tokens == st.restored_tokens,
                      "%s restored after a clean restart: %s" % (s, st))
                check(gen == ref[(s, 3)], "turn 3 of %s: %s != reference %s" % (s, gen, ref[(s, 3)]))
                conv.commit(s, 3, gen)
            deadline = time.monotonic() + 30
            while d.stats()["spill_sessions_written"] < 5 and time.monotonic() < deadline:
                time.sleep(0.1)
            st = d.stats()
            check(st["spill_sessions_written"] >= 5, "written behind when idle: %s" % st)
            d.kill()
        step("phase3_clean_restart_loses_nothing_write_behind", phase3)

        def phase4():
            d.start(["--max-sessions", "16"])
            for s in SESSIONS:
                st, gen = run_turn(d, conv.prompt(s, 4), s)
                check(st.restored_tokens > 0, "%s restored after SIGKILL (written behind): %s" % (s, st))
                check(gen == ref[(s, 4)], "turn 4 of %s: %s != reference %s" % (s, gen, ref[(s, 4)]))
                conv.commit(s, 4, gen)
            check(d.term() == 0, "drain exit 0")
        step("phase4_sigkill_after_write_behind", phase4)
    except Exception:  # noqa: BLE001 - reported by step()
        if d is not None:
            try:
                print(d.log_text()[-3000:], flush=True)
            except OSError:
                pass
    finally:
        if d is not None and d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
        if gw is not None:
            gw.stop()
        if os.environ.get("SMOLLM3D_TEST_KEEP"):
            print("  (kept %s)" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (RESULTS["pass"], RESULTS["fail"]), flush=True)
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
