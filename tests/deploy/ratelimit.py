#!/usr/bin/env python3
"""ratelimit.py SITE - the shipped nginx site's rate limits, live.

SITE is the installed deploy/nginx/smollm3.conf.  It runs under a private
nginx on a loopback port in front of a stub gateway (a Python HTTP server
answering 200 to everything and counting what reaches it), and checks what
the site's header says:

  per key     one API key sent as fast as the connection allows: the first
              1 + 40 (burst) pass, then 429 in OpenAI's error shape (JSON,
              type rate_limit_error, code rate_limit_exceeded), never more
              than the burst plus 10/s of elapsed time; the refused ones
              never reach the gateway
  other key   a second key is served at once (the limit is per key)
  variants    "bearer  KEY " and "BEARER KEY" share KEY's bucket
  no key      per client address, the same figures
  /health     not limited
  ceiling     made-up keys (a fresh one per request) from one address: the
              address's ceiling (50/s, burst 100) answers 429

Buckets are left to refill between parts.  Prints "ok   - ..." or
"FAIL - ..." per check (tests/deploy/run.sh counts them); exits 1 on any
failure.  Traffic goes only to 127.0.0.1.
"""
import http.client
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

KEY_RATE, KEY_BURST = 10, 40        # the site's smollm3_api zone
ADDR_RATE, ADDR_BURST = 50, 100     # the site's smollm3_addr zone
FAILS = []


def check(ok, name):
    print("%s %s" % ("ok   -" if ok else "FAIL -", name), flush=True)
    if not ok:
        FAILS.append(name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits = 0
    lock = threading.Lock()

    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        with Stub.lock:
            Stub.hits += 1
        b = b'{"ok":true}'
        # one write: headers and body apart would meet Nagle and delayed ACKs (40 ms a request)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(b), b))

    do_GET = do_POST = reply

    def log_message(self, *a):
        pass


class Client:
    def __init__(self, port):
        self.port = port
        self.c = None

    def get(self, path, auth=None, headers=None):
        """(status, content type, body); one keep-alive connection, reopened if nginx closes it."""
        for _ in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                self.c.request("GET", path, headers=dict({"Authorization": auth} if auth else {}, **(headers or {})))
                r = self.c.getresponse()
                body = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.c.close()
                    self.c = None
                return r.status, r.getheader("Content-Type", ""), body
            except (http.client.HTTPException, OSError):
                self.c.close()
                self.c = None
        raise RuntimeError("no answer from nginx for GET %s" % path)


def until_429(cl, auth_of, limit=1000):
    """Requests until the first 429: (n passed before it, seconds, the 429's (ctype, body), other statuses)."""
    t0 = time.monotonic()
    passed, other = 0, []
    for i in range(limit):
        st, ct, body = cl.get("/v1/models", auth_of(i))
        if st == 429:
            return passed, time.monotonic() - t0, (ct, body), other
        if st == 200:
            passed += 1
        else:
            other.append(st)
    return passed, time.monotonic() - t0, None, other


def burst_ok(passed, secs, rate, burst):
    # nginx lets the first request and the burst through, then one per 1/rate s
    return burst <= passed <= 1 + burst + rate * secs + 1


def openai_429(r):
    if r is None:
        return False
    ct, body = r
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (ct.startswith("application/json") and e.get("type") == "rate_limit_error"
            and e.get("code") == "rate_limit_exceeded" and isinstance(e.get("message"), str)
            and "param" in e)


def main():
    site_src = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="smollm3-ratelimit-")
    sp, port = free_port(), free_port()
    stub = http.server.ThreadingHTTPServer(("127.0.0.1", sp), Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    site = open(site_src).read()
    # the site's loopback listen lines on a free port (IPv4 only)
    site = re.sub(r"(?m)^( *)listen (127\.0\.0\.1:)?80\b", r"\g<1>listen 127.0.0.1:%d" % port, site)
    site = (re.sub(r"(?m)^ *listen \[::1?\]:80\b[^;]*;\n", "", site)
            .replace("unix:/run/smollm3-gateway/gateway.sock", "127.0.0.1:%d" % sp))
    for d in ("logs", "tmp"):
        os.makedirs(os.path.join(tmp, d))
    open(os.path.join(tmp, "site.conf"), "w").write(site)
    user = "user root root;" if os.getuid() == 0 else ""
    open(os.path.join(tmp, "nginx.conf"), "w").write("""%s
worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/logs/error.log;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    access_log off;
    client_body_temp_path %s/tmp/body;
    proxy_temp_path %s/tmp/proxy;
    fastcgi_temp_path %s/tmp/fastcgi;
    uwsgi_temp_path %s/tmp/uwsgi;
    scgi_temp_path %s/tmp/scgi;
    include %s/site.conf;
}
""" % ((user,) + (tmp,) * 8))
    nginx = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-p", tmp, "-c", tmp + "/nginx.conf",
                              "-e", tmp + "/logs/error.log"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        cl = Client(port)
        for _ in range(100):
            try:
                if cl.get("/health")[0] == 200:
                    break
            except RuntimeError:
                pass
            time.sleep(0.1)
        else:
            check(False, "nginx with the shipped site came up on 127.0.0.1:%d" % port)
            return 1
        refill = max(KEY_BURST / KEY_RATE, ADDR_BURST / ADDR_RATE) + 0.5
        time.sleep(refill)

        key_a, key_b = "sk-" + secrets.token_hex(8), "sk-" + secrets.token_hex(8)
        hits0 = Stub.hits
        passed, secs, r429, other = until_429(cl, lambda i: "Bearer " + key_a)
        check(r429 is not None and burst_ok(passed, secs, KEY_RATE, KEY_BURST) and not other,
              "one key: %d requests passed in %.2f s, then 429 (burst %d, %d/s; other statuses %s)"
              % (passed, secs, KEY_BURST, KEY_RATE, other))
        check(openai_429(r429), "the 429 is OpenAI's error shape: %r" % (r429,))
        check(Stub.hits - hits0 == passed, "refused requests never reached the gateway (%d of %d did)"
              % (Stub.hits - hits0, passed + 1))
        st = cl.get("/v1/models", "Bearer " + key_b)[0]
        check(st == 200, "another key is served at once (%d): the limit is per key" % st)
        until_429(cl, lambda i: "Bearer " + key_a)
        variants = ["bearer  %s " % key_a, "BEARER %s" % key_a, "Bearer\t%s" % key_a, "bearer %s" % key_a,
                    "Bearer %s  " % key_a]
        v_ok = sum(cl.get("/v1/models", v)[0] == 200 for v in variants)
        check(v_ok <= 1, "case and whitespace variants of the key share its bucket: %d of %d passed"
              % (v_ok, len(variants)))
        # x-api-key (Anthropic's clients): the same key is the same bucket; another key its own
        x_ok = sum(cl.get("/v1/models", headers={"x-api-key": key_a})[0] == 200 for _ in range(4))
        check(x_ok <= 1, "x-api-key: KEY shares the bucket of Bearer KEY: %d of 4 passed" % x_ok)
        st = cl.get("/v1/models", headers={"x-api-key": "sk-" + secrets.token_hex(8)})[0]
        check(st == 200, "another x-api-key is served at once (%d)" % st)

        time.sleep(refill)
        passed, secs, r429, other = until_429(cl, lambda i: None)
        check(r429 is not None and burst_ok(passed, secs, KEY_RATE, KEY_BURST) and not other,
              "no key (per client address): %d passed in %.2f s, then 429" % (passed, secs))
        st = [cl.get("/v1/models")[0] for _ in range(3)]
        health = [cl.get("/health")[0] for _ in range(150)]
        check(429 in st and health.count(200) == len(health),
              "/health is not limited: %d of %d answered 200 while the API answered %s"
              % (health.count(200), len(health), st))

        time.sleep(refill)
        passed, secs, r429, other = until_429(cl, lambda i: "Bearer made-up-%d-%s" % (i, secrets.token_hex(4)))
        check(r429 is not None and burst_ok(passed, secs, ADDR_RATE, ADDR_BURST) and not other,
              "a fresh made-up key per request: the address's ceiling answers 429 after %d in %.2f s "
              "(burst %d, %d/s)" % (passed, secs, ADDR_BURST, ADDR_RATE))
        check(openai_429(r429), "the ceiling's 429 is OpenAI's error shape")
    finally:
        nginx.terminate()
        try:
            nginx.wait(10)
        except subprocess.TimeoutExpired:
            nginx.kill()
        stub.shutdown()
        if FAILS:
            print("    nginx error log:\n" + open(os.path.join(tmp, "logs/error.log"), errors="replace").read()[-1500:])
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
