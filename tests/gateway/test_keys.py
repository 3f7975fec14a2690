#!/usr/bin/env python3
"""API keys, tenant ids and key reload of smollm3-gateway (issue 47, items 4, 6, 7).

Against the scripted fake daemon (test_gateway.FakeDaemon), recording the
tenant of every Generate:

* two_secrets: the same key under two deployment secrets
  (--tenant-secret-file) is two tenants; under one secret it is the same
  tenant after a restart; neither id shows the key or the secret;
* tenant_field: a key line's `tenant=NAME` is the tenant the daemon gets, and
  two keys naming one tenant (a key rotated) are that one tenant;
* secret_required: keys without a secret, a secret that is not 64 hex digits,
  or one every user may read stop the gateway with a message naming the fix;
* nothing_leaks: no API key and no secret in the gateway's log (at its most
  verbose) or in /metrics, whose per-tenant series are labelled by tenant id;
  with no key file the gateway says at start that every client is one tenant;
* sighup_reload: SIGHUP reads the key file again while a stream of the key
  being revoked runs: the added key is served within 1 s, the revoked key's
  next request is a 401 at once, its running stream ends normally; a bad file
  then changes nothing (logged) and the gateway keeps serving.

Prints "ok NAME" / "FAIL NAME: why" and "N passed, N failed" last.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import check, run_test  # noqa: E402

KEY_A, KEY_B, KEY_C = "sk-keys-a-0123456789abcdef", "sk-keys-b-fedcba9876543210", "sk-keys-c-5555aaaa"


class RecordingDaemon(tg.FakeDaemon):
    """The fake daemon, recording the tenant of every Generate."""

    def __init__(self, *a):
        self.tenants = []
        super().__init__(*a)

    def script(self, ident, rid, g):
        self.tenants.append(g.tenant)
        super().script(ident, rid, g)


def bearer(k):
    return {"Authorization": "Bearer " + k}


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def tenant_of(gw, fd, key):
    """The tenant the daemon is told for a chat with key."""
    fd.tenants.clear()
    st, _, b = gw.request("POST", "/v1/chat/completions", tg.chat("hi", max_tokens=2), bearer(key))
    check(st == 200, "chat with %s: %d %s" % (key[:9], st, b[:200]))
    check(len(fd.tenants) == 1, "generates seen: %r" % fd.tenants)
    return fd.tenants[0]


def gateway_run(fd, *args):
    """The gateway with args until it exits (a start that must fail): (exit status, stderr)."""
    r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:0",
                        "--daemon", fd.endpoint] + list(args), capture_output=True, timeout=20)
    return r.returncode, r.stderr.decode(errors="replace")


def t_two_secrets(tmp, fd):
    keys = write(os.path.join(tmp, "keys2"), "%s a\n" % KEY_A)
    s1, s2 = tg.tenant_secret(tmp, "s1"), tg.tenant_secret(tmp, "s2")
    got = []
    for s in (s1, s2, s1):
        gw = tg.Gateway(fd.endpoint, tmp, ["--api-key-file", keys, "--tenant-secret-file", s])
        try:
            got.append(tenant_of(gw, fd, KEY_A))
        finally:
            gw.stop()
    for t in got:
        check(re.fullmatch(r"[0-9a-f]{32}", t), "tenant %r is not 32 hex digits" % t)
        check(t not in KEY_A and KEY_A not in t, "tenant %r shows the key" % t)
    check(got[0] != got[1], "one key under two secrets, one tenant %r" % got[0])
    check(got[0] == got[2], "the same secret after a restart, another tenant: %r" % got)
    for s in (s1, s2):
        sec = open(s).read().strip()
        check(all(t not in sec and sec[:16] not in t for t in got), "a tenant shows the secret")


def t_tenant_field(tmp, fd):
    keys = write(os.path.join(tmp, "keys3"), "%s a tenant=acme\n%s b-rotated tenant=acme # same tenant\n%s c\n" %
                 (KEY_A, KEY_B, KEY_C))
    gw = tg.Gateway(fd.endpoint, tmp, ["--api-key-file", keys])
    try:
        ta, tb, tc = tenant_of(gw, fd, KEY_A), tenant_of(gw, fd, KEY_B), tenant_of(gw, fd, KEY_C)
        check(ta == tb == "acme", "tenant= not honoured: %r %r" % (ta, tb))
        check(re.fullmatch(r"[0-9a-f]{32}", tc), "a key without tenant=: %r" % tc)
        # what one key of a tenant stores, the other key of that tenant finds (a rotated key's)
        st, r = tg.post_json(gw, "/v1/responses", {"model": "x", "input": "hi", "max_output_tokens": 2},
                             bearer(KEY_A))
        check(st == 200, "response %d %r" % (st, r))
        st, _, b = gw.request("GET", "/v1/responses/" + r["id"], headers=bearer(KEY_B))
        check(st == 200, "the tenant's other key does not find its response: %d" % st)
        st, _, b = gw.request("GET", "/v1/responses/" + r["id"], headers=bearer(KEY_C))
        check(st == 404, "another tenant finds it: %d" % st)
    finally:
        gw.stop()


def t_secret_required(tmp, fd):
    keys = write(os.path.join(tmp, "keys4"), "%s a\n" % KEY_A)
    rc, err = gateway_run(fd, "--api-key-file", keys)
    check(rc == 1 and "needs --tenant-secret-file" in err and "od -An -tx1 -N32 /dev/urandom" in err,
          "keys without a secret: %d %s" % (rc, err))
    for text, mode, why in (("abcd\n", 0o600, "expected 64 hex digits"),
                            ("zz" * 32 + "\n", 0o600, "expected 64 hex digits"),
                            (os.urandom(32).hex() + "\n", 0o644, "readable or writable by every user")):
        s = write(os.path.join(tmp, "bad-secret"), text, mode)
        rc, err = gateway_run(fd, "--api-key-file", keys, "--tenant-secret-file", s)
        check(rc == 1 and why in err, "secret %r mode %o: %d %s" % (text[:10], mode, rc, err))
        check(text.strip() not in err or len(text.strip()) < 8, "the secret in the message")
    rc, err = gateway_run(fd, "--api-key-file", keys, "--tenant-secret-file", os.path.join(tmp, "none"))
    check(rc == 1 and "No such file" in err, "a missing secret file: %d %s" % (rc, err))


def t_nothing_leaks(tmp, fd):
    keys = write(os.path.join(tmp, "keys5"), "%s a\n%s b tenant=bee\n" % (KEY_A, KEY_B))
    sec = tg.tenant_secret(tmp, "s5")
    gw = tg.Gateway(fd.endpoint, tmp, ["--api-key-file", keys, "--tenant-secret-file", sec, "--max-inflight", "1"])
    try:
        ta = tenant_of(gw, fd, KEY_A)
        tenant_of(gw, fd, KEY_B)
        gw.request("GET", "/v1/models", headers=bearer(KEY_A + "x"))       # a wrong key: 401
        # a refusal (logged at debug level), with the one slot taken by a slow stream
        c = gw.conn()
        c.request("POST", "/v1/chat/completions", json.dumps(tg.chat("SLOW", stream=True)),
                  dict(bearer(KEY_A), **{"Content-Type": "application/json"}))
        slow = c.getresponse()
        st, _, _ = gw.request("POST", "/v1/chat/completions", tg.chat("hi"), bearer(KEY_B))
        check(st == 429, "the second request with --max-inflight 1: %d" % st)
        slow.read()
        c.close()
        st, _, m = gw.request("GET", "/metrics")
        m = m.decode()
        check('smollm3_gateway_tenant_requests_total{tenant="%s"}' % ta in m and
              'smollm3_gateway_tenant_requests_total{tenant="bee"}' in m, "per-tenant series:\n%s" % m[-800:])
        labels = set(re.findall(r'\{([^}]*)\}', m))
        check(not any("key" in lab.split("=")[0] for lab in labels), "a key label: %r" % labels)
        os.kill(gw.proc.pid, signal.SIGHUP)         # the reload's log lines too
        t0 = time.monotonic()
        while "reloaded" not in gw.log_tail(1 << 20) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
    finally:
        gw.stop()
    log = gw.log_tail(1 << 20)
    secret = open(sec).read().strip()
    for s, what in ((KEY_A, "key A"), (KEY_B, "key B"), (KEY_A[:12], "a key's head"), (secret, "the secret"),
                    (secret[:16], "the secret's head"), (secret[32:48], "a SipHash key")):
        check(s not in log and s not in m, "%s in the log or /metrics" % what)
    check("reloaded" in log, "no reload line: %s" % log[-500:])
    gw = tg.Gateway(fd.endpoint, tmp)
    gw.stop()
    check("no API keys (--api-key-file): every client is one tenant" in gw.log_tail(),
          "no warning without keys: %s" % gw.log_tail())


def t_sighup_reload(tmp, fd):
    path = write(os.path.join(tmp, "keys6"), "%s a\n" % KEY_A)
    gw = tg.Gateway(fd.endpoint, tmp, ["--api-key-file", path])
    try:
        st, _, _ = gw.request("GET", "/v1/models", headers=bearer(KEY_B))
        check(st == 401, "B before it is added: %d" % st)
        ta = tenant_of(gw, fd, KEY_A)
        # A's stream runs (~1 s: the fake daemon's SLOW pacing) while A is revoked and B added
        c = gw.conn()
        c.request("POST", "/v1/chat/completions", json.dumps(tg.chat("SLOW", stream=True)),
                  dict(bearer(KEY_A), **{"Content-Type": "application/json"}))
        stream = c.getresponse()
        buf = stream.read1(4096)
        check(stream.status == 200 and buf.startswith(b"data: "), "A's stream %d %r" % (stream.status, buf))
        write(path, "# A revoked, B added\n%s b\n" % KEY_B)
        t0 = time.monotonic()
        os.kill(gw.proc.pid, signal.SIGHUP)
        while True:
            st, _, _ = gw.request("GET", "/v1/models", headers=bearer(KEY_B))
            if st == 200 or time.monotonic() - t0 > 5.0:
                break
            time.sleep(0.02)
        took = time.monotonic() - t0
        print("stats: a key added by SIGHUP served after %.3f s" % took)
        # (the goal is 1 s; 2 s leaves a loaded machine room to run the handler)
        check(st == 200 and took < 2.0, "B not served %.2f s after SIGHUP: %d" % (took, st))
        st, _, b = gw.request("GET", "/v1/models", headers=bearer(KEY_A))
        check(st == 401 and json.loads(b)["error"]["code"] == "invalid_api_key", "revoked A: %d %s" % (st, b))
        check(gw.proc.poll() is None, "SIGHUP ended the gateway")
        rest = b""
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                break
            rest += chunk
        c.close()
        check(stream.status == 200 and rest.rstrip().endswith(b"data: [DONE]") and b'"error"' not in rest,
              "A's running stream was cut: %r" % (buf + rest)[-300:])
        tb = tenant_of(gw, fd, KEY_B)
        check(tb != ta and re.fullmatch(r"[0-9a-f]{32}", tb), "B's tenant %r (A's %r)" % (tb, ta))
        # a bad file: nothing changes, logged
        write(path, "%s b\n%s b-again\n" % (KEY_B, KEY_B))
        os.kill(gw.proc.pid, signal.SIGHUP)
        t0 = time.monotonic()   # (a loaded machine may take a while to run the handler)
        while "not reloaded" not in gw.log_tail() and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        check(gw.proc.poll() is None, "a bad file on SIGHUP ended the gateway")
        check(tenant_of(gw, fd, KEY_B) == tb, "B after a bad reload")
        check("not reloaded" in gw.log_tail(), "the bad reload is not logged: %s" % gw.log_tail()[-400:])
        # A comes back: served again (a new slot), its tenant the same id as before
        write(path, "%s a\n%s b\n" % (KEY_A, KEY_B))
        os.kill(gw.proc.pid, signal.SIGHUP)
        t0 = time.monotonic()
        while gw.request("GET", "/v1/models", headers=bearer(KEY_A))[0] != 200 and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        print("stats: a key re-added by SIGHUP served after %.3f s" % (time.monotonic() - t0))
        check(tenant_of(gw, fd, KEY_A) == ta, "A re-added: another tenant")
        st, _, m = gw.request("GET", "/metrics")
        check(st == 200 and b'tenant="%s"' % ta.encode() in m, "A's tenant's counters after reloads")
        if tg.shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=m, capture_output=True)
            check(r.returncode == 0, "promtool: %s" % (r.stdout + r.stderr).decode()[-500:])
    finally:
        rc = gw.stop()
    check(rc == 0, "gateway exit status %s" % rc)


def main():
    want = tg.suite_args()
    with tg.Suite("smollm3-keys-") as st:
        try:
            sys.path.insert(0, tg.ARGS.pb2_dir or "")
            import smollm3_pb2 as pb2
        except ImportError as e:
            raise tg.Skip("protobuf module: %s" % e)
        fd = RecordingDaemon(os.path.join(st.tmp, "fake.sock"), pb2)
        try:
            for name, fn in (("two_secrets", t_two_secrets), ("tenant_field", t_tenant_field),
                             ("secret_required", t_secret_required), ("nothing_leaks", t_nothing_leaks),
                             ("sighup_reload", t_sighup_reload)):
                if want(name):
                    run_test(name, fn, st.tmp, fd)
        finally:
            fd.close()
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
