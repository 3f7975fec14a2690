#!/usr/bin/env python3
"""test_fault.py - the gateway under injected faults (SQLite-style), issue 28 item 1.

BUILD/tests/smollm3-gateway-fault is the gateway with tests/gateway/fault_shim.c's fault layer:
the N-th counted call among its allocations (its own and jansson's), its daemon link (ZeroMQ
sends, receives, message allocations) and libmicrohttpd's responses fails, once.  One daemon
(the fixture model, greedy) serves every run.  A clean pass counts the calls of a scripted
workload (health, models, chat and completions, stream and not, Responses and Messages, stream
and not, a bad request, metrics, the UI's config, a web UI turn: its form, then its stream) and records every answer; then for each chosen
N a fresh gateway is armed after start (SIGUSR2), the workload runs, and:
  - every request ends: the clean answer, an HTTP error with a JSON body, a stream that ends
    with an error event, or a closed connection; never a hang (15 s) and never a different
    answer given as a success (a 200 whose text differs, a stream that ends without its
    terminal event),
  - the gateway is still running and the next request gets the clean answer,
  - SIGTERM stops it with exit status 0 (under ASan: no report, LeakSanitizer included).
N: every call when SMOL_FAULT_FULL=1, else 1..24 and an even spread to about 72 runs.
Prints the points visited and their counts, then "N passed, N failed".
  python3 tests/gateway/test_fault.py --build BUILD
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
TIMEOUT = 15.0

PASSED = FAILED = 0


def result(ok, msg):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print("ok   " + msg)
    else:
        FAILED += 1
        print("FAIL " + msg)
    sys.stdout.flush()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---------------------------------------------------------------- the workload
def chat_body(stream):
    return {"model": "m", "messages": [{"role": "user", "content": "Tell me about the sea."}],
            "max_tokens": 6, "temperature": 0, "stream": stream}


WORKLOAD = [
    ("health", "GET", "/health", None, "json"),
    ("models", "GET", "/v1/models", None, "json"),
    ("chat", "POST", "/v1/chat/completions", chat_body(False), "json"),
    ("chat-stream", "POST", "/v1/chat/completions", chat_body(True), "sse"),
    ("completions", "POST", "/v1/completions",
     {"model": "m", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}, "json"),
    ("responses", "POST", "/v1/responses",
     {"model": "m", "input": "Say hello.", "max_output_tokens": 6, "temperature": 0}, "json"),
    ("responses-stream", "POST", "/v1/responses",
     {"model": "m", "input": "Say hello.", "max_output_tokens": 6, "temperature": 0, "stream": True}, "sse"),
    ("messages", "POST", "/v1/messages",
     {"model": "m", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]}, "json"),
    ("messages-stream", "POST", "/v1/messages",
     {"model": "m", "max_tokens": 6, "temperature": 0, "stream": True,
      "messages": [{"role": "user", "content": "Hi"}]}, "sse"),
    ("bad-json", "POST", "/v1/chat/completions", b"{\"model\": ", "json"),
    ("metrics", "GET", "/metrics", None, "text"),
    ("ui-config", "GET", "/ui/config", None, "json"),
    ("ui-chat", "POST", "/ui/chat", "history=%5B%5D&message=Hi&think=0&temperature=0", "ui"),
]


def text_of(name, body):
    """The part of a JSON answer that must not change: the generated text, else the error type."""
    if not isinstance(body, dict):
        return body
    if "error" in body:
        e = body["error"]
        return ("error", e.get("type") if isinstance(e, dict) else e)
    if name == "chat":
        return body["choices"][0]["message"].get("content")
    if name == "completions":
        return body["choices"][0]["text"]
    if name == "responses":
        return "".join(c.get("text", "") for o in body.get("output", []) if o.get("type") == "message"
                       for c in o.get("content", []))
    if name == "messages":
        return "".join(b.get("text", "") for b in body.get("content", []) if b.get("type") == "text")
    if name == "models":
        return [m.get("id") for m in body.get("data", [])]
    if name == "health":
        return body.get("status")
    return sorted(body) if name == "ui-config" else body


def sse_text(raw):
    """(text, terminal, error) of an SSE answer: the streamed text, whether the stream's own end
    marker came, whether an error event came."""
    text, terminal, error = [], False, False
    event = None
    for line in raw.decode("utf-8", "replace").split("\n"):
        if line.startswith("event:"):
            event = line[6:].strip()
            if event in ("error", "response.failed"):
                error = True
            if event in ("message_stop", "response.completed", "response.incomplete"):
                terminal = True
            continue
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            terminal = True
            continue
        try:
            j = json.loads(data)
        except ValueError:
            continue
        t = j.get("type") if isinstance(j, dict) else None
        if isinstance(j, dict) and ("error" in j or t in ("error", "response.failed")):
            error = True
        if t == "response.output_text.delta":
            text.append(j.get("delta", ""))
        elif t == "content_block_delta" and j.get("delta", {}).get("type") == "text_delta":
            text.append(j["delta"].get("text", ""))
        elif t in ("message_stop", "response.completed", "response.incomplete"):
            terminal = True
        elif isinstance(j, dict) and "choices" in j:
            for ch in j["choices"]:
                d = ch.get("delta") or {}
                if d.get("content"):
                    text.append(d["content"])
    return "".join(text), terminal, error


UI_CONV = __import__("itertools").count(1)


def ui_text(raw):
    """(text, terminal, error) of the UI's stream: its content events' data, then done."""
    text, terminal, error, event = [], False, False, None
    for line in raw.decode("utf-8", "replace").split("\n"):
        if line.startswith("event:"):
            event = line[6:].strip()
            terminal |= event == "done"
            error |= event == "error"
        elif line.startswith("data:") and event == "content":
            text.append(line[5:].lstrip(" "))
    return "".join(text), terminal, error


def ask_ui(port, item):
    """The web UI's turn: the form (HTML naming a stream), then that stream (SSE)."""
    import re
    # a new conversation each time (the daemon keeps a conversation's turns in its session)
    form = "conversation=c%d&%s" % (next(UI_CONV), item[3])
    got = ask(port, item[:3] + (form.encode(),) + ("form",))
    if got[0] != "ok" or got[1] != 200:
        return got
    m = re.search(rb'data-stream="([A-Za-z0-9]{16,32})"', got[3])
    if not m:
        return ("ok", got[1], "text/html", b"no stream id: " + got[3][:200])
    return ask(port, ("ui-stream", "GET", "/ui/stream/" + m.group(1).decode(), None, "sse"))


def ask(port, item):
    """One request: ("ok", status, answer) / ("closed", why) / ("hang", why)."""
    name, method, path, body, kind = item
    if kind == "ui":
        return ask_ui(port, item)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else None
        ctype = "application/x-www-form-urlencoded" if kind == "form" else "application/json"
        c.request(method, path, body=data, headers={"Content-Type": ctype} if data else {})
        r = c.getresponse()
        raw = r.read()
        return "ok", r.status, r.getheader("Content-Type") or "", raw
    except (socket.timeout, TimeoutError) as e:
        return "hang", str(e)
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        return "closed", "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()


def verdict(item, got, clean):
    """None when the answer is allowed, else why not."""
    name, _, _, _, kind = item
    if got[0] == "hang":
        return "no answer within %.0f s (%s)" % (TIMEOUT, got[1])
    if got[0] == "closed":
        return None
    _, status, ctype, raw = got
    cstatus = clean[1]
    if kind == "ui":
        if status >= 400:
            return None         # the UI's errors are HTML fragments for the page
        if "text/event-stream" not in ctype:
            return "the UI's turn: %d %s %r" % (status, ctype, raw[:120])
        text, terminal, error = ui_text(raw)
        if error:
            return None
        if not terminal:
            return "a UI stream that ended without done (%d bytes)" % len(raw)
        if text != clean[2]:
            return "a complete UI stream with other text: %r, clean %r" % (text, clean[2])
        return None
    if kind == "sse" and status == 200 and "text/event-stream" in ctype:
        text, terminal, error = sse_text(raw)
        if error:
            return None
        if not terminal:
            return "a stream that ended without its terminal event (%d bytes)" % len(raw)
        if text != clean[2]:
            return "a complete stream with other text: %r, clean %r" % (text, clean[2])
        return None
    if status >= 400:
        if status == cstatus and raw == clean[3]:
            return None
        if kind == "text" and status >= 500:
            return None
        try:
            j = json.loads(raw)
        except ValueError:
            return "HTTP %d without a JSON body: %r" % (status, raw[:120])
        if not isinstance(j, dict) or not ("error" in j or j.get("type") == "error"):
            return "HTTP %d whose body is not an error: %r" % (status, raw[:120])
        return None
    if status != cstatus:
        return "HTTP %d where the clean run had %d" % (status, cstatus)
    if kind == "json":
        try:
            j = json.loads(raw)
        except ValueError:
            return "a %d answer that is not JSON: %r" % (status, raw[:120])
        if text_of(name, j) != clean[2]:
            return "a %d answer with other content: %r, clean %r" % (status, text_of(name, j), clean[2])
    return None


def clean_answer(item, got):
    name, _, _, _, kind = item
    if got[0] != "ok":
        raise RuntimeError("clean run: %s: %s" % (name, got))
    _, status, ctype, raw = got
    if kind == "ui":
        text, terminal, error = ui_text(raw)
        if status != 200 or not terminal or error:
            raise RuntimeError("clean run: the UI's turn: %d %r" % (status, raw[-300:]))
        return (name, status, text, raw)
    if kind == "sse" and status == 200:
        text, terminal, error = sse_text(raw)
        if not terminal or error:
            raise RuntimeError("clean run: %s: stream without its end or with an error: %r" % (name, raw[-300:]))
        return (name, status, text, raw)
    if kind == "json":
        return (name, status, text_of(name, json.loads(raw)), raw)
    return (name, status, None, raw)


# ---------------------------------------------------------------- processes
class Daemon:
    def __init__(self, build, tmp):
        self.endpoint = "ipc://" + os.path.join(tmp, "d.sock")
        self.log = open(os.path.join(tmp, "daemon.log"), "wb")
        self.proc = subprocess.Popen([os.path.join(build, "bin/smollm3d"), "--model", MODEL, "--listen",
                                      self.endpoint, "--threads", "1", "--kv-budget-mb", "64", "--max-queued", "64",
                                      "--default-max-tokens", "6", "--max-sessions", "16"],
                                     stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        ctl = os.path.join(build, "bin/smollm3ctl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("smollm3d exited at start")
            if subprocess.run([ctl, "--connect", self.endpoint, "--timeout", "2", "health"],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("smollm3d not ready")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


class Gateway:
    def __init__(self, build, tmp, endpoint, n, classes):
        self.port = free_port()
        self.report = os.path.join(tmp, "report-%d.txt" % n)
        self.log_path = os.path.join(tmp, "gateway-%d.log" % n)
        env = dict(os.environ, SMOL_FAULT_N=str(n), SMOL_FAULT_REPORT=self.report, SMOL_FAULT_CLASSES=classes)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([os.path.join(build, "tests/smollm3-gateway-fault"), "--listen",
                                          "127.0.0.1:%d" % self.port, "--daemon", endpoint],
                                         stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("gateway exited at start: " + self.log_tail())
            got = ask(self.port, WORKLOAD[0])
            if got[0] == "ok" and got[1] == 200:
                self.proc.send_signal(signal.SIGUSR2)   # counting starts now
                time.sleep(0.05)
                return
            time.sleep(0.05)
        raise RuntimeError("gateway not ready: " + self.log_tail())

    def log_tail(self, n=800):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-n:]

    def stop(self):
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "hung after SIGTERM"

    def read_report(self):
        out = {"visits": {}}
        try:
            for line in open(self.report):
                k, *v = line.split()
                if k == "visit":
                    out["visits"][v[0]] = int(v[1])
                elif k == "calls":
                    out["calls"] = int(v[0])
                elif k == "fired":
                    out["fired"] = v[0]
        except OSError:
            pass
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--classes", default=os.environ.get("SMOL_FAULT_CLASSES", "alloc,zmq,http"))
    args, _ = ap.parse_known_args()
    binary = os.path.join(args.build, "tests/smollm3-gateway-fault")
    if not os.access(binary, os.X_OK):
        result(False, "cannot run: %s not built (make BUILD=%s)" % (binary, args.build))
        print("%d passed, %d failed" % (PASSED, FAILED))
        return 1
    tmp = tempfile.mkdtemp(prefix="gw-fault-")
    d = Daemon(args.build, tmp)
    try:
        # the clean pass: the answers, and the calls the workload makes
        gw = Gateway(args.build, tmp, d.endpoint, 0, args.classes)
        clean = [clean_answer(it, ask(gw.port, it)) for it in WORKLOAD]
        nxt = ask(gw.port, WORKLOAD[2])
        rc = gw.stop()
        rep = gw.read_report()
        total = rep.get("calls", 0)
        result(rc == 0 and total > 0 and verdict(WORKLOAD[2], nxt, clean[2]) is None,
               "clean pass: %d counted calls, exit %s" % (total, rc))
        print("points visited by the workload (%s):" % args.classes)
        for p, v in sorted(rep["visits"].items()):
            print("  %-36s %6d%s" % (p, v, "" if v else "   (the gateway's code does not call it here)"))
        # the points the gateway's serving path does call: every one reached by the workload
        need = [p for p, c in (("malloc", "alloc"), ("calloc", "alloc"), ("realloc", "alloc"), ("zmq_send", "zmq"),
                               ("zmq_msg_recv", "zmq"), ("MHD_create_response_from_buffer", "http"),
                               ("MHD_create_response_from_callback", "http"), ("MHD_queue_response", "http"),
                               ("MHD_add_response_header", "http")) if c in args.classes]
        missed = [p for p in need if not rep["visits"].get(p)]
        result(not missed, "every point of the serving path visited (%d)%s" % (len(need), ": missed " + ", ".join(missed)
                                                                             if missed else ""))
        if os.environ.get("SMOL_FAULT_FULL") == "1":
            ns = list(range(1, total + 1))
        else:
            head = list(range(1, min(total, 24) + 1))
            rest = max(total - 24, 0)
            k = min(rest, 48)
            ns = head + sorted({24 + 1 + (i * rest) // k for i in range(k)} if k else set())
        only = os.environ.get("SMOL_FAULT_N")
        if only:
            ns = [int(x) for x in only.split(",")]
        bad_runs, fired = 0, {}
        t0 = time.monotonic()
        for n in ns:
            gw = Gateway(args.build, tmp, d.endpoint, n, args.classes)
            why = []
            for it, cl in zip(WORKLOAD, clean):
                v = verdict(it, ask(gw.port, it), cl)
                if v:
                    why.append("%s: %s" % (it[0], v))
            if gw.proc.poll() is not None:
                why.append("the gateway died (exit %s): %s" % (gw.proc.returncode, gw.log_tail(400)))
            else:
                v = verdict(WORKLOAD[2], ask(gw.port, WORKLOAD[2]), clean[2])
                if v:
                    why.append("the next request: " + v)
            rc = gw.stop()
            if rc != 0:
                why.append("exit status %s after SIGTERM: %s" % (rc, gw.log_tail(600)))
            rep = gw.read_report()
            fired[rep.get("fired", "?")] = fired.get(rep.get("fired", "?"), 0) + 1
            if why:
                bad_runs += 1
                result(False, "N=%d (failed: %s): %s" % (n, rep.get("fired", "?"), "; ".join(why)))
        result(bad_runs == 0, "%d runs (N of %d counted calls), %d with a lost answer, a hang, a crash or a "
               "leak; %.1f s" % (len(ns), total, bad_runs, time.monotonic() - t0))
        print("failed calls by point: " + ", ".join("%s %d" % kv for kv in sorted(fired.items())))
        result(d.proc.poll() is None and d.stop() == 0, "the daemon served every run and stopped cleanly")
    finally:
        if d.proc.poll() is None:
            d.stop()
        if not FAILED:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("logs kept in " + tmp)
    print("%d passed, %d failed" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
