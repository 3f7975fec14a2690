#!/usr/bin/env python3
"""Stored Responses belong to the daemons, not to a gateway (issue 46 item
5): two gateways over two daemons on one shared spill directory
(kv_spill_shared), two API keys, the fixture model.

* responses_fleet_any_node: a response stored through node 1 (JSON and
  streamed) is GET on node 2 the moment its answer (or response.completed)
  arrived, its input_items too; another key's GET, DELETE,
  input_items and previous_response_id find nothing,
  with the body, byte for byte, of an id never stored.
* responses_fleet_chain: a conversation of N turns alternating between the
  nodes by previous_response_id: each turn's prompt holds the whole history
  (input_tokens >= the previous turn's input + output), and the records on
  disk stay the size of one turn (a chain stored by reference: O(N) bytes,
  not O(N^2)); DELETE on node 2 of a node-1 response, then 404 on node 1 and
  a follow-up naming it refused.
* responses_fleet_restart: GET after node 1's gateway restarts and after
  node 2's daemon restarts.
* responses_store_too_large: a record over the daemon's max_request_bytes
  is not sent (the answer stands, not stored, counted as daemon_frame).
* responses_store_bounds: straight to a daemon (protobuf over ZeroMQ), in a
  spill directory and in memory: a tenant's records stay within
  responses_store_mb (the oldest dropped, another tenant's untouched), one
  larger alone is ERROR_TOO_LARGE, a record past responses_ttl is unknown.

Prints "ok NAME" / "FAIL NAME: why" and "N passed, N failed" last.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import check, run_test  # noqa: E402

KEY_A, KEY_B = "sk-fleet-alpha-0123456789", "sk-fleet-beta-0123456789"
HA = {"Authorization": "Bearer " + KEY_A}
HB = {"Authorization": "Bearer " + KEY_B}
MIB = 1 << 20


def post(gw, body, h=HA):
    st, _, b = gw.request("POST", "/v1/responses", json.dumps(body).encode(), dict(h, **{"Content-Type":
                                                                                        "application/json"}))
    return st, json.loads(b) if b else None


def turn(gw, text, prev=None, h=HA):
    body = {"model": "x", "input": text, "max_output_tokens": 6, "temperature": 0, "reasoning": {"effort": "none"}}
    if prev:
        body["previous_response_id"] = prev
    st, r = post(gw, body, h)
    check(st == 200 and r["status"] in ("completed", "incomplete"), "turn %r: %d %r" % (text[:40], st, r))
    return r


def unknown_body(gw, rid, h=HA):
    """The 404 body of an id never stored, with rid in its message."""
    st, _, b = gw.request("GET", "/v1/responses/resp_neverstored0", headers=h)
    check(st == 404, "unknown id: %d" % st)
    return b.replace(b"resp_neverstored0", rid.encode())


def t_any_node(st):
    g1, g2 = st.g1, st.g2
    r = turn(g1, "Hi")
    s, _, b = g2.request("GET", "/v1/responses/" + r["id"], headers=HA)
    check(s == 200, "GET on node 2: %d %s" % (s, b))
    got = json.loads(b)
    check(got["id"] == r["id"] and got["output"] == r["output"] and got["usage"] == r["usage"],
          "node 2's copy differs: %r vs %r" % (got, r))
    # its input items, on the other node (the daemon's record)
    s, _, b = g2.request("GET", "/v1/responses/%s/input_items" % r["id"], headers=HA)
    check(s == 200 and [x["content"][0]["text"] for x in json.loads(b)["data"]] == ["Hi"],
          "input_items on node 2: %d %s" % (s, b))
    s, _, b = g2.request("GET", "/v1/responses/%s/input_items" % r["id"], headers=HB)
    check(s == 404, "B's input_items: %d %s" % (s, b))
    # streamed: stored before response.completed is sent
    c = g1.conn(30)
    c.request("POST", "/v1/responses", json.dumps({"model": "x", "input": "Hello", "stream": True,
                                                   "max_output_tokens": 4, "temperature": 0}),
              dict(HA, **{"Content-Type": "application/json"}))
    resp, text = c.getresponse(), ""
    while "response.completed" not in text and "response.incomplete" not in text:
        b = resp.read1(65536)                   # GET the moment the final event is here
        check(b, "stream ended without its final event: %s" % text[-300:])
        text += b.decode()
    rid = json.loads([ln for ln in text.splitlines() if ln.startswith("data:")][0][5:])["response"]["id"]
    s, _, b = g2.request("GET", "/v1/responses/" + rid, headers=HA)
    c.close()
    check(s == 200 and json.loads(b)["status"] in ("completed", "incomplete"), "streamed, GET on node 2: %d %s" % (s, b))
    # another key: the answer of an id never stored, byte for byte
    want = unknown_body(g2, r["id"], HB)
    for method in ("GET", "DELETE"):
        s, _, b = g2.request(method, "/v1/responses/" + r["id"], headers=HB)
        check(s == 404 and b == want, "B's %s: %d %s (want %s)" % (method, s, b, want))
    s, body = post(g2, {"model": "x", "input": "more", "previous_response_id": r["id"]}, HB)
    check(s == 400 and body["error"]["param"] == "previous_response_id", "B's follow-up: %d %r" % (s, body))
    s, _, b = g1.request("GET", "/v1/responses/" + r["id"], headers=HA)
    check(s == 200, "A's GET after B's DELETE: %d" % s)


def tenant_dir(st):
    d = os.path.join(st.spill, "responses")
    dirs = [x for x in os.listdir(d) if x.startswith("t-")]
    return d, dirs


def t_chain(st):
    g = (st.g1, st.g2)
    n = 6
    ids, prev = [], None
    rs = []
    for i in range(n):
        r = turn(g[i % 2], "Turn %d: go on" % i, prev)
        if prev:
            p = rs[-1]["usage"]
            check(r["usage"]["input_tokens"] >= p["input_tokens"] + p["output_tokens"],
                  "turn %d on node %d: input %d < previous input %d + output %d: the history was not sent" %
                  (i, i % 2 + 1, r["usage"]["input_tokens"], p["input_tokens"], p["output_tokens"]))
        rs.append(r)
        ids.append(r["id"])
        prev = r["id"]
    d, dirs = tenant_dir(st)
    sizes = []
    for rid in ids:
        paths = [os.path.join(d, t, rid) for t in dirs if os.path.exists(os.path.join(d, t, rid))]
        check(len(paths) == 1, "%s: %d files" % (rid, len(paths)))
        sizes.append(os.path.getsize(paths[0]))
    # by reference: turn N's record holds its own turn, not the N-1 before it
    check(max(sizes[1:]) < 1.5 * min(sizes[1:]), "record sizes grow with the chain: %r" % sizes)
    print("  chain of %d turns: records %r bytes" % (n, sizes), flush=True)
    # DELETE on node 2 of a node-1 response; node 1 no longer finds it, nor a follow-up
    s, _, b = st.g2.request("DELETE", "/v1/responses/" + ids[0], headers=HA)
    check(s == 200 and json.loads(b) == {"id": ids[0], "object": "response", "deleted": True},
          "DELETE on node 2: %d %s" % (s, b))
    s, _, b = st.g1.request("GET", "/v1/responses/" + ids[0], headers=HA)
    check(s == 404 and b == unknown_body(st.g1, ids[0]), "GET of a deleted response on node 1: %d %s" % (s, b))
    s, body = post(st.g1, {"model": "x", "input": "x", "previous_response_id": ids[0]})
    check(s == 400 and body["error"]["param"] == "previous_response_id", "follow-up of a deleted one: %d %r" %
          (s, body))
    # a chain missing its first turn cannot be continued whole: refused, not answered without it
    s, body = post(st.g2, {"model": "x", "input": "x", "previous_response_id": ids[-1]})
    check(s == 400 and body["error"]["param"] == "previous_response_id", "broken chain: %d %r" % (s, body))
    st.kept = ids[-1]


def t_restart(st):
    r = turn(st.g1, "Remember me")
    st.g1.stop()
    st.g1 = tg.Gateway(st.d1.endpoint, st.tmp, st.gw_args)
    s, _, b = st.g1.request("GET", "/v1/responses/" + r["id"], headers=HA)
    check(s == 200 and json.loads(b)["id"] == r["id"], "GET after a gateway restart: %d %s" % (s, b))
    st.d2.stop()
    st.d2.start()
    st.g2.wait_ready(30)
    s, _, b = st.g2.request("GET", "/v1/responses/" + r["id"], headers=HA)
    check(s == 200 and json.loads(b)["id"] == r["id"], "GET after a daemon restart: %d %s" % (s, b))
    r2 = turn(st.g2, "And now?", r["id"])
    check(r2["previous_response_id"] == r["id"], "follow-up after both restarts: %r" % r2)


def t_too_large(st):
    """A record over the daemon's max_request_bytes (the input is in it twice: as items and as chat
    messages) is not sent: the answer stands, the response is not stored, the refusal is counted,
    and the link every stream shares carries the next request."""
    d = tg.Daemon(os.path.join(st.tmp, "small.sock"), ["--max-request-bytes", "16384"])
    g = tg.Gateway(d.endpoint, st.tmp, st.gw_args + ["--max-body-bytes", "15000"])
    try:
        r = turn(g, "y" * 10000)    # ~2,500 tokens: a 10 KB request, a 20 KB record
        s, _, b = g.request("GET", "/v1/responses/" + r["id"], headers=HA)
        check(s == 404, "a record over max_request_bytes: GET %d" % s)
        s, _, m = g.request("GET", "/metrics")
        check(b'smollm3_gateway_refusals_total{reason="daemon_frame"} 1' in m, "the refusal is not counted")
        r2 = turn(g, "Short")
        s, _, b = g.request("GET", "/v1/responses/" + r2["id"], headers=HA)
        check(s == 200, "the next response after it: GET %d" % s)
    finally:
        g.stop()
        d.stop()


def rpc(endpoint, pb, **kind):
    import zmq
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    rq = pb.Request(protocol_version=1, request_id=7)
    for k, v in kind.items():
        getattr(rq, k).CopyFrom(v)
    s.send(rq.SerializeToString())
    check(s.poll(10000), "no reply to %s" % list(kind))
    ev = pb.Event()
    ev.ParseFromString(s.recv())
    s.close()
    return ev


def bounds(endpoint, pb):
    def store(tenant, rid, n, prev=""):
        return rpc(endpoint, pb, response_store=pb.ResponseStoreRequest(
            tenant=tenant, response=pb.StoredResponse(id=rid, previous_response_id=prev, record=b"x" * n)))

    def get(tenant, rid, chain=0):
        return rpc(endpoint, pb, response_get=pb.ResponseGetRequest(tenant=tenant, id=rid, chain=chain))

    check(store("other", "keep", 1000).WhichOneof("kind") == "ack", "store")
    for i in range(5):          # 5 x 300 KiB in a 1 MiB share: the oldest go
        ev = store("t1", "r%d" % i, 300 << 10, "r%d" % (i - 1) if i else "")
        check(ev.WhichOneof("kind") == "ack", "store r%d: %s" % (i, ev))
    have = [i for i in range(5) if get("t1", "r%d" % i).WhichOneof("kind") == "responses"]
    check(have == [2, 3, 4], "after 5 x 300 KiB in 1 MiB: kept %r, want [2, 3, 4]" % have)
    ev = get("t1", "r4", chain=10)
    check([r.id for r in ev.responses.responses] == ["r4", "r3", "r2"] and
          ev.responses.responses[-1].previous_response_id == "r1", "chain: %s" % ev)
    lst = rpc(endpoint, pb, response_list=pb.ResponseListRequest(tenant="t1"))
    check(sorted(r.id for r in lst.responses.responses) == ["r2", "r3", "r4"], "list: %s" % lst)
    ev = store("t1", "big", 2 * MIB)
    check(ev.WhichOneof("kind") == "error" and ev.error.code == pb.ERROR_TOO_LARGE, "2 MiB: %s" % ev)
    check(get("other", "keep").WhichOneof("kind") == "responses", "another tenant's record dropped")
    ev = get("other", "r4")
    check(ev.WhichOneof("kind") == "error" and ev.error.code == pb.ERROR_UNKNOWN_SESSION, "cross-tenant get: %s" % ev)
    ev = rpc(endpoint, pb, response_delete=pb.ResponseDeleteRequest(tenant="other", id="r4"))
    check(ev.WhichOneof("kind") == "error", "cross-tenant delete: %s" % ev)
    ev = store("t1", "../x", 10)
    check(ev.WhichOneof("kind") == "error" and ev.error.code == pb.ERROR_INVALID_ARGUMENT, "bad id: %s" % ev)
    time.sleep(3.2)             # responses_ttl 2
    ev = get("t1", "r4")
    check(ev.WhichOneof("kind") == "error" and ev.error.code == pb.ERROR_UNKNOWN_SESSION, "past the TTL: %s" % ev)


def t_bounds(st):
    import smollm3_pb2 as pb
    args = ["--responses-store-mb", "1", "--responses-ttl", "2"]
    sp = os.path.join(st.tmp, "spill-bounds")
    os.makedirs(sp)
    for extra in (["--kv-spill-dir", sp], []):
        d = tg.Daemon(os.path.join(st.tmp, "b%d.sock" % len(extra)), args + extra)
        try:
            bounds(d.endpoint, pb)
        finally:
            d.stop()
    left = os.listdir(os.path.join(sp, "responses", "t-t1"))
    check(not [x for x in left if x.startswith(".tmp-")], "temporary files left: %r" % left)


def main():
    want = tg.suite_args()
    sys.path.insert(0, tg.ARGS.pb2_dir or "")
    with tg.Suite("smollm3-responses-fleet-") as st:
        st.spill = os.path.join(st.tmp, "spill")
        os.makedirs(st.spill)
        keys = os.path.join(st.tmp, "keys")
        with open(keys, "w") as f:
            f.write("%s alpha\n%s beta\n" % (KEY_A, KEY_B))
        os.chmod(keys, 0o600)
        dargs = ["--kv-spill-dir", st.spill, "--kv-spill-shared"]
        st.d1 = tg.Daemon(os.path.join(st.tmp, "d1.sock"), dargs)
        st.d2 = tg.Daemon(os.path.join(st.tmp, "d2.sock"), dargs)
        st.gw_args = ["--api-key-file", keys]
        st.g1 = tg.Gateway(st.d1.endpoint, st.tmp, st.gw_args)
        st.g2 = tg.Gateway(st.d2.endpoint, st.tmp, st.gw_args)
        st.gw = st.g1
        try:
            for name, fn in (("responses_fleet_any_node", t_any_node), ("responses_fleet_chain", t_chain),
                             ("responses_fleet_restart", t_restart), ("responses_store_bounds", t_bounds),
                             ("responses_store_too_large", t_too_large)):
                if want(name):
                    run_test(name, fn, st)
        finally:
            for p in (st.g1, st.g2, st.d1, st.d2):
                p.stop()
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
