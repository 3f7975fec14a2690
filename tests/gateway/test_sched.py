#!/usr/bin/env python3
"""Fair sharing and priority at the gateway (issue 47 items 1 and 3), against the fake daemon.

* inflight_per_key: a key's streams in flight are capped by its key-file
  `max_inflight=N`, else by its share of --max-inflight (max_inflight / keys):
  past it the key gets 429 "for this API key" while the other key is still
  served; /metrics counts refusals{reason="max_inflight_per_key"};
* service_tier: OpenAI's service_tier (auto, default, flex, priority) and
  Anthropic's (auto, standard_only) reach the daemon as GenerateRequest.service_tier,
  capped by the key's `max_tier=` (default: default), and come back as the
  APIs echo them (chat completion and its chunks, Responses, Anthropic's usage);
  an unknown tier is a 400 naming service_tier;
* tenant_metrics: the daemon's per-tenant stats in /metrics, labelled by tenant id only;
* real_daemon_fair: the real daemon on the fixture model with 4 slots: while key A keeps 8
  long completions open, key B's question is answered before any of A's ends (one of A's
  preempted), and all of A's complete.

Prints "ok NAME" / "FAIL NAME: why" and "N passed, N failed" last.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import check, run_test  # noqa: E402

KEY_A, KEY_B = "sk-sched-alpha-0123456789", "sk-sched-beta-9876543210"
HA = {"Authorization": "Bearer " + KEY_A}
HB = {"Authorization": "Bearer " + KEY_B}


def key_file(tmp, a_inflight=2):
    p = os.path.join(tmp, "keys")
    with open(p, "w") as f:
        f.write("%s alpha max_inflight=%d max_tier=priority\n%s beta\n" % (KEY_A, a_inflight, KEY_B))
    os.chmod(p, 0o600)
    return p


class RecordingDaemon(tg.FakeDaemon):
    """The fake daemon, recording (tenant, service_tier) of every Generate."""

    def __init__(self, *a):
        self.seen = []
        super().__init__(*a)

    def script(self, ident, rid, g):
        self.seen.append((g.tenant, g.service_tier))
        super().script(ident, rid, g)


def metrics(gw):
    st, _, b = gw.request("GET", "/metrics")
    check(st == 200, "metrics %d" % st)
    return b.decode()


def open_slow(gw, h):
    """A SLOW streaming chat held open (its headers read): the connection and response."""
    c = gw.conn()
    c.request("POST", "/v1/chat/completions", json.dumps(tg.chat("SLOW", stream=True)),
              dict(h, **{"Content-Type": "application/json"}))
    return c, c.getresponse()


def t_inflight_per_key(gw, fd):
    held = []
    try:
        for _ in range(2):
            held.append(open_slow(gw, HA))
            check(held[-1][1].status == 200, "A's stream: %d" % held[-1][1].status)
        st, b = tg.post_json(gw, "/v1/chat/completions", tg.chat("hi"), HA)
        check(st == 429 and "for this API key" in b["error"]["message"], "A's third: %d %s" % (st, b))
        st, b = tg.post_json(gw, "/v1/chat/completions", tg.chat("hi"), HB)
        check(st == 200, "B while A is at its limit: %d %s" % (st, b))
        # B's default share: --max-inflight 8 / 2 keys = 4
        for _ in range(4):
            held.append(open_slow(gw, HB))
            check(held[-1][1].status == 200, "B's stream: %d" % held[-1][1].status)
        st, b = tg.post_json(gw, "/v1/chat/completions", tg.chat("hi"), HB)
        check(st == 429 and "limit 4" in b["error"]["message"], "B's fifth: %d %s" % (st, b))
    finally:
        for c, r in held:
            r.read()
            c.close()
    m = metrics(gw)
    check('smollm3_gateway_refusals_total{reason="max_inflight_per_key"} 2' in m, "refusals not counted")
    st, b = tg.post_json(gw, "/v1/chat/completions", tg.chat("hi"), HA)
    check(st == 200, "A once its streams ended: %d" % st)


def t_service_tier(gw, fd):
    pb = fd.pb
    P, D, F = pb.SERVICE_TIER_PRIORITY, pb.SERVICE_TIER_DEFAULT, pb.SERVICE_TIER_FLEX
    cases = [  # (path, key, asked, what the daemon gets, the echo)
        ("/v1/chat/completions", HA, "priority", P, "priority"),
        ("/v1/chat/completions", HB, "priority", D, "default"),    # capped by B's max_tier
        ("/v1/chat/completions", HB, "flex", F, "flex"),
        ("/v1/chat/completions", HB, "auto", D, "default"),
        ("/v1/chat/completions", HA, None, D, "default"),
        ("/v1/responses", HA, "priority", P, "priority"),
        ("/v1/messages", HA, "auto", P, "priority"),               # A may have priority
        ("/v1/messages", HB, "auto", D, "standard"),
        ("/v1/messages", HA, "standard_only", D, "standard"),
    ]
    for path, h, asked, want, echo in cases:
        if path == "/v1/responses":
            body = {"model": "x", "input": "hi", "max_output_tokens": 8}
        elif path == "/v1/messages":
            body = {"model": "x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        else:
            body = tg.chat("hi")
        if asked:
            body["service_tier"] = asked
        n = len(fd.seen)
        st, b = tg.post_json(gw, path, body, h)
        check(st == 200, "%s %s: %d %s" % (path, asked, st, b))
        check(len(fd.seen) == n + 1 and fd.seen[-1][1] == want,
              "%s %s: the daemon got tier %r, want %r" % (path, asked, fd.seen[-1][1:], want))
        got = b["usage"]["service_tier"] if path == "/v1/messages" else b.get("service_tier")
        check(got == echo, "%s %s: echoed %r, want %r" % (path, asked, got, echo))
    # streaming: every chunk says it
    st, _, raw = gw.request("POST", "/v1/chat/completions", dict(tg.chat("hi", stream=True), service_tier="flex"),
                            headers=HB)
    chunks = [json.loads(x[6:]) for x in raw.decode().split("\n") if x.startswith("data: {")]
    check(st == 200 and chunks and all(c.get("service_tier") == "flex" for c in chunks), "chunks: %r" % chunks[:2])
    for path, body in (("/v1/chat/completions", dict(tg.chat("hi"), service_tier="gold")),
                       ("/v1/messages", {"model": "x", "max_tokens": 8, "service_tier": "priority",
                                         "messages": [{"role": "user", "content": "hi"}]})):
        st, b = tg.post_json(gw, path, body, HA)
        check(st == 400 and "service_tier" in json.dumps(b), "%s bad tier: %d %s" % (path, st, b))


def t_tenant_metrics(gw, fd):
    pb = fd.pb
    fd.stats_reply = pb.StatsReply(requests_queued=1, preemptions_total=3, tenants=[
        pb.TenantStats(tenant="0123456789abcdef0123456789abcdef", queued=1, running=2, preempted=1,
                       preemptions_total=3, kv_bytes=4096, tokens_served=77)])
    deadline = time.time() + 6      # the gateway asks for stats every 2 s
    m = ""
    while time.time() < deadline:
        m = metrics(gw)
        if "smollm3_daemon_tenant_" in m:
            break
        time.sleep(0.2)
    for line in ('smollm3_daemon_tenant_running_slots{tenant="0123456789abcdef0123456789abcdef"} 2',
                 'smollm3_daemon_tenant_queue_depth{tenant="0123456789abcdef0123456789abcdef"} 1',
                 'smollm3_daemon_tenant_preemptions_total{tenant="0123456789abcdef0123456789abcdef"} 3',
                 'smollm3_daemon_tenant_kv_bytes{tenant="0123456789abcdef0123456789abcdef"} 4096',
                 "smollm3_daemon_preemptions_total 3"):
        check(line in m, "missing %r" % line)
    check(KEY_A not in m and KEY_B not in m, "a key in /metrics")


def t_real_daemon_fair(tmp):
    """The real daemon (fixture model, 4 slots) behind the gateway: key A keeps 8 long streams
    open, key B's short question is answered before any of A's ends, and A's all complete."""
    import threading
    d = tg.Daemon(os.path.join(tmp, "d.sock"), ["--max-running", "4"])
    gw = tg.Gateway(d.endpoint, tmp, ["--api-key-file", key_file(tmp, a_inflight=8), "--max-inflight", "64"])
    try:
        ends, errors = [], []

        def a_stream(i):
            st, _, b = gw.request("POST", "/v1/completions", {"model": "x", "prompt": "Story %d:" % i,
                                                             "max_tokens": 200, "temperature": 0}, HA, timeout=300)
            ends.append(time.monotonic())
            if st != 200 or json.loads(b)["choices"][0]["finish_reason"] not in ("length", "stop"):
                errors.append((st, b[:200]))

        threads = [threading.Thread(target=a_stream, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while d.stats()["requests_active"] < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        st, b = tg.post_json(gw, "/v1/completions", {"model": "x", "prompt": "Q:", "max_tokens": 2}, HB)
        t_b = time.monotonic()
        check(st == 200, "B: %d %s" % (st, b))
        for t in threads:
            t.join(300)
        check(not errors and len(ends) == 8, "A's streams: %d ended, errors %r" % (len(ends), errors))
        check(t_b < min(ends), "B answered %.2f s after asking, after one of A's ended" % (t_b - t0))
        check(d.stats()["preemptions_total"] >= 1, "nothing preempted")
    finally:
        gw.stop()
        d.stop()


def main():
    want = tg.suite_args()
    with tg.Suite("smollm3-sched-") as st:
        try:
            sys.path.insert(0, tg.ARGS.pb2_dir or "")
            import smollm3_pb2 as pb2
        except ImportError as e:
            raise tg.Skip("protobuf module: %s" % e)
        fd = RecordingDaemon(os.path.join(st.tmp, "fake.sock"), pb2)
        try:
            st.gw = tg.Gateway(fd.endpoint, st.tmp, ["--api-key-file", key_file(st.tmp), "--max-inflight", "8"])
            for name, fn in (("inflight_per_key", t_inflight_per_key), ("service_tier", t_service_tier),
                             ("tenant_metrics", t_tenant_metrics)):
                if want(name):
                    run_test(name, fn, st.gw, fd)
        finally:
            fd.close()
        st.gw.stop()
        st.gw = None
        if want("real_daemon_fair"):
            run_test("real_daemon_fair", t_real_daemon_fair, st.tmp)
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
