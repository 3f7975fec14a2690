#!/usr/bin/env python3
"""client.py - a Python example client of smollm3d (pyzmq + protobuf).

Streams one chat turn and prints the tokens, the reasoning apart:

    python3 proto/examples/client.py --connect ipc:///run/smollm3d/smollm3d.sock \\
        [--new-session ID | --session ID] [--tenant T] [--no-think] [--temp T] [--seed S] [-n N] "Hello!"

A conversation with history kept by the daemon (as smollm3ctl's): the first
turn with --new-session ID (ChatInput.create_session), each later one with
--session ID; both send only the new message, appended to the session's
history (ChatInput.append_to_session).  A session the daemon no longer
holds (deleted, or evicted without a record on disk) is then reported as
ERROR_UNKNOWN_SESSION, not silently started over.  --tenant names the
sessions' namespace (GenerateRequest.tenant; default: the default one).

Needs pyzmq, protobuf and `protoc`: on Debian `apt-get install python3-zmq
python3-protobuf protobuf-compiler` (its python3 refuses pip outside a venv,
PEP 668), elsewhere `pip install pyzmq protobuf` in a virtual environment.
The smollm3_pb2 module is generated from proto/smollm3.proto at run time
into a temporary directory (or $SMOLLM3_PB2_DIR when set): generated code is
never committed.

Also a small library (the tests in tests/daemon/ use it):

    pb2 = load_pb2()
    with Client("ipc:///tmp/x/smollm3d.sock", pb2) as c:
        for ev in c.chat("Hello", temperature=0, max_tokens=16):
            ...               # Event messages: started, token..., done | error
        print(c.stats())

The wire contract (see proto/smollm3.proto): a DEALER sends one frame, a
packed Request; the daemon answers with one frame per Event carrying the
request's id.  A generate is answered by started, token/tool_call events and
exactly one terminal event (done or error); every other request by one event.
"""
import argparse
import atexit
import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import zmq

_HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(os.path.dirname(_HERE), "smollm3.proto")


def load_pb2(out_dir=None, proto=PROTO):
    """Generates smollm3_pb2 with protoc and imports it.

    out_dir: where to generate (default $SMOLLM3_PB2_DIR or a temporary
    directory removed at exit).  Raises RuntimeError when protoc is missing
    or fails."""
    out_dir = out_dir or os.environ.get("SMOLLM3_PB2_DIR")
    if not out_dir:
        out_dir = tempfile.mkdtemp(prefix="smollm3-pb2-")
        atexit.register(shutil.rmtree, out_dir, True)
    os.makedirs(out_dir, exist_ok=True)
    protoc = shutil.which("protoc")
    if not protoc:
        raise RuntimeError("protoc not found (Debian package protobuf-compiler)")
    r = subprocess.run([protoc, "--python_out=" + out_dir, "-I" + os.path.dirname(proto), proto],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("protoc failed: " + r.stderr.strip())
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    import smollm3_pb2  # noqa: E402  (generated just above)
    return smollm3_pb2


def default_endpoint():
    """The daemon's default: $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR, /run/smollm3d."""
    rd = os.environ.get("RUNTIME_DIRECTORY")
    if rd:
        return "ipc://%s/smollm3d.sock" % rd.split(":")[0]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return "ipc://%s/smollm3d.sock" % xdg
    return "ipc:///run/smollm3d/smollm3d.sock"


class DaemonError(Exception):
    """An error event: .code is the ErrorCode name ("ERROR_BUSY"), .message."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


TERMINAL_KINDS = {"done", "error", "health", "stats", "session", "sessions", "ack"}


class Client:
    """One DEALER socket to the daemon.  Not thread-safe: one per thread."""

    def __init__(self, endpoint, pb2=None, heartbeat_ms=1000, send_timeout_ms=5000,
                 context=None):
        self.pb = pb2 or load_pb2()
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        self.sock.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
        if heartbeat_ms:
            self.sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
            self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, heartbeat_ms * 5)
            self.sock.setsockopt(zmq.HEARTBEAT_TTL, heartbeat_ms * 5)
        self.sock.connect(endpoint)
        self._ids = itertools.count(random.getrandbits(62) | 1)
        self._parked = []           # events of other requests, in arrival order
        self._ignore = set()        # ids whose reply is not wanted (our cancels)

    def close(self):
        self.sock.close(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- sending
    def next_id(self):
        return next(self._ids)

    def send(self, req):
        """Sends a Request (id and protocol version filled in); returns its id."""
        req.protocol_version = self.pb.PROTOCOL_VERSION_CURRENT
        if not req.request_id:
            req.request_id = self.next_id()
        self.sock.send(req.SerializeToString())
        return req.request_id

    def send_raw(self, data):
        self.sock.send(data)

    def generate_request(self, messages=None, text=None, token_ids=None, session=None,
                         thinking=None, temperature=None, top_p=None, top_k=None, seed=None,
                         max_tokens=0, stop=(), logprobs=False, append_to_session=False,
                         create_session=False, tenant=None, **sampling):
        """Builds a Request(generate=...).  messages: [(role, content)] or a str
        (one user message).  With session: messages are the whole conversation
        (the daemon reuses its KV), or with append_to_session the new turn(s) of
        the history the daemon keeps, create_session on the turn that starts it.
        tenant: the sessions' namespace (None = the default)."""
        req = self.pb.Request()
        g = req.generate
        if text is not None:
            g.text = text
        elif token_ids is not None:
            g.tokens.ids.extend(token_ids)
        else:
            if isinstance(messages, str):
                messages = [("user", messages)]
            for role, content in messages:
                g.chat.messages.add(role=role, content=content)
        if session:
            g.session_id = session
            if append_to_session:
                g.chat.append_to_session = True
                g.chat.create_session = bool(create_session)
        if tenant:
            g.tenant = tenant
        if thinking is not None:
            g.enable_thinking = bool(thinking)
        for name, v in dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                            **sampling).items():
            if v is not None:
                setattr(g.sampling, name, v)
        g.max_tokens = max_tokens
        g.stop.extend(stop)
        g.logprobs = logprobs
        return req

    def cancel(self, target_id, want_reply=False):
        req = self.pb.Request()
        req.cancel.target_request_id = target_id
        rid = self.send(req)
        if not want_reply:
            self._ignore.add(rid)
        return rid

    # ---- receiving
    def _wire(self, timeout_ms):
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart()
        data = next((f for f in reversed(frames) if f), b"")
        ev = self.pb.Event()
        ev.ParseFromString(data)
        return ev

    def recv(self, timeout_ms=None, request_id=None):
        """The next event (of request_id when given), or None on timeout."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        for i, ev in enumerate(self._parked):
            if request_id is None or ev.request_id == request_id:
                return self._parked.pop(i)
        while True:
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ev = self._wire(left)
            if ev is None:
                return None
            if ev.request_id in self._ignore:
                self._ignore.discard(ev.request_id)
                continue
            if request_id is None or ev.request_id == request_id:
                return ev
            self._parked.append(ev)

    def stream(self, req, idle_timeout_ms=60000):
        """Sends a generate Request and yields its events through the terminal one.
        Raises TimeoutError if no event comes for idle_timeout_ms."""
        rid = self.send(req)
        while True:
            ev = self.recv(idle_timeout_ms, rid)
            if ev is None:
                raise TimeoutError("no event for request %d in %d ms" % (rid, idle_timeout_ms))
            yield ev
            if ev.WhichOneof("kind") in TERMINAL_KINDS:
                return

    def chat(self, messages, **kw):
        """Streams one chat turn: yields Event messages (see generate_request)."""
        idle = kw.pop("idle_timeout_ms", 60000)
        return self.stream(self.generate_request(messages, **kw), idle)

    def call(self, req, timeout_ms=30000):
        """Sends a one-shot Request and returns its reply event; DaemonError on
        an error event, TimeoutError on no reply."""
        rid = self.send(req)
        ev = self.recv(timeout_ms, rid)
        if ev is None:
            raise TimeoutError("no reply to request %d in %d ms" % (rid, timeout_ms))
        if ev.WhichOneof("kind") == "error":
            raise DaemonError(self.pb.ErrorCode.Name(ev.error.code), ev.error.message)
        return ev

    def health(self, timeout_ms=30000):
        req = self.pb.Request()
        req.health.SetInParent()
        return self.call(req, timeout_ms).health

    def stats(self, timeout_ms=30000):
        req = self.pb.Request()
        req.stats.SetInParent()
        return self.call(req, timeout_ms).stats

    def sessions(self, timeout_ms=30000, tenant=None):
        req = self.pb.Request()
        req.session_list.SetInParent()
        if tenant:
            req.session_list.tenant = tenant
        return list(self.call(req, timeout_ms).sessions.sessions)

    def session_get(self, session_id, timeout_ms=30000, tenant=None):
        req = self.pb.Request()
        req.session_get.session_id = session_id
        if tenant:
            req.session_get.tenant = tenant
        return self.call(req, timeout_ms).session

    def session_delete(self, session_id, timeout_ms=30000, tenant=None):
        req = self.pb.Request()
        req.session_delete.session_id = session_id
        if tenant:
            req.session_delete.tenant = tenant
        return self.call(req, timeout_ms)


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Stream one chat turn from smollm3d.",
        epilog="History: --new-session ID on a conversation's first turn, --session ID on each later "
               "one; the daemon keeps the history and appends each turn to it.  A session it no longer "
               "holds is reported (ERROR_UNKNOWN_SESSION), not silently started over.")
    ap.add_argument("--connect", default=default_endpoint())
    sess = ap.add_mutually_exclusive_group()
    sess.add_argument("--session", metavar="ID", help="continue the conversation ID the daemon keeps")
    sess.add_argument("--new-session", metavar="ID", help="start the conversation ID (its first turn)")
    ap.add_argument("--tenant", metavar="ID", help="the sessions' namespace (default: the default one)")
    ap.add_argument("--system")
    ap.add_argument("--no-think", action="store_true")
    ap.add_argument("--temp", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("-n", "--max-tokens", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60, help="seconds between events")
    ap.add_argument("message", nargs="+")
    a = ap.parse_args(argv)

    msgs = ([("system", a.system)] if a.system else []) + [("user", " ".join(a.message))]
    out = sys.stdout
    with Client(a.connect) as c:
        channel = None
        try:
            session = a.session or a.new_session
            for ev in c.chat(msgs, session=session, append_to_session=bool(session),
                             create_session=bool(a.new_session), tenant=a.tenant,
                             thinking=False if a.no_think else None,
                             temperature=a.temp, seed=a.seed, max_tokens=a.max_tokens,
                             idle_timeout_ms=int(a.timeout * 1000)):
                kind = ev.WhichOneof("kind")
                if kind == "token":
                    if ev.token.channel != channel:
                        if channel == c.pb.CHANNEL_REASONING:
                            out.write("\n[/thinking]\n")
                        if ev.token.channel == c.pb.CHANNEL_REASONING:
                            out.write("[thinking] ")
                        channel = ev.token.channel
                    out.write(ev.token.text)
                    out.flush()
                elif kind == "tool_call":
                    out.write("\n[tool_call %s(%s)]\n" % (ev.tool_call.name,
                                                         ev.tool_call.arguments_json))
                elif kind == "done":
                    u = ev.done.usage
                    out.write("\n")
                    print("[%s: %d prompt tokens (%d cached), %d generated]" % (
                        c.pb.FinishReason.Name(ev.done.finish_reason), u.prompt_tokens,
                        u.cached_tokens, u.completion_tokens), file=sys.stderr)
                elif kind == "error":
                    print("\nerror %s: %s" % (c.pb.ErrorCode.Name(ev.error.code),
                                              ev.error.message), file=sys.stderr)
                    if ev.error.code == c.pb.ERROR_UNKNOWN_SESSION and a.session:
                        print("session %r is not held by the daemon (never started, deleted, or evicted): "
                              "its history is gone; --new-session %s starts it anew" % (a.session, a.session),
                              file=sys.stderr)
                    return 1
        except TimeoutError as e:
            print("error: %s" % e, file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            # closing the socket is enough: the daemon cancels the requests of a
            # client that goes away within one engine step
            print("\ninterrupted", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
