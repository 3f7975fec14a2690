#!/usr/bin/env python3
"""One set of input rules, seen from both doors (issue 28).

The gateway and the daemon check a request with the same functions
(daemon/model/rules.h).  This test proves it from the outside: a table of
inputs -- every numeric rule at, just inside and just outside its bounds,
bad UTF-8 of every kind, session ids, tool names, stop strings, counts,
an oversized prompt -- each sent twice to the real processes on the
fixture model:

  * as an OpenAI body, POST /v1/chat/completions through the gateway (HTTP);
  * as the equivalent GenerateRequest straight to the daemon over ZeroMQ
    (a DEALER speaking proto/smollm3.proto, no gateway in between).

(and, for a raw prompt, POST /v1/completions against the daemon's text
input).  Both must give the same verdict (accepted, or refused with the same error
code), and the verdict must be the one the table expects, so the two sides
cannot agree on a wrong answer.  Each error code must also come with one
HTTP status and type through the gateway (the one map, smol_rule_http).

Inputs JSON cannot carry (NaN, a proto3 zero that means "unset") are left
out; raw invalid UTF-8 is sent as raw bytes in both (in the HTTP body and
patched into the protobuf frame).  Prints "ok NAME" / "FAIL NAME: why" and
"N passed, N failed" last.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402  (Daemon, Gateway, check)

RESULTS = tg.RESULTS  # the harness counts (tg.Suite)
check = tg.check

# a marker in the JSON text / the protobuf frame that becomes raw bytes
MARK = "QQRAWBYTESQQ"

TOOL = {"type": "function", "function": {"name": "get-weather_1",
                                        "parameters": {"type": "object",
                                                       "properties": {"city": {"type": "string"}}}}}


def tool(name):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def msgs(content="Hi"):
    return [{"role": "user", "content": content}]


OK = "ok"
INV = "invalid_argument"
UTF8 = "invalid_utf8"
BIG = "too_large"
CTX = "context_too_long"

KIB = 1024
PROMPT_MAX = 512 * KIB          # SMOL_RULE_MAX_PROMPT_BYTES

# (name, fields over the base body, raw bytes for MARK or None, expected verdict)
# The base body: {"messages": [user "Hi"], "max_tokens": 1, "temperature": 0}.
CASES = [
    # temperature [0, 2]
    ("temperature 0", {"temperature": 0}, None, OK),
    ("temperature 2", {"temperature": 2}, None, OK),
    ("temperature 1.5", {"temperature": 1.5}, None, OK),
    ("temperature -0.01", {"temperature": -0.01}, None, INV),
    ("temperature 2.01", {"temperature": 2.01}, None, INV),
    ("temperature 100", {"temperature": 100}, None, INV),
    # top_p (0, 1]
    ("top_p 1", {"top_p": 1}, None, OK),
    ("top_p 0.001", {"top_p": 0.001}, None, OK),
    ("top_p 0", {"top_p": 0}, None, INV),
    ("top_p 1.01", {"top_p": 1.01}, None, INV),
    ("top_p -1", {"top_p": -1}, None, INV),
    # top_k [-1, 2^20], -1 and 0 off
    ("top_k -1", {"top_k": -1}, None, OK),
    ("top_k 0", {"top_k": 0}, None, OK),
    ("top_k 40", {"top_k": 40}, None, OK),
    ("top_k 2^20", {"top_k": 1 << 20}, None, OK),
    ("top_k -2", {"top_k": -2}, None, INV),
    ("top_k 2^20+1", {"top_k": (1 << 20) + 1}, None, INV),
    # min_p [0, 1]
    ("min_p 0", {"min_p": 0}, None, OK),
    ("min_p 1", {"min_p": 1}, None, OK),
    ("min_p -0.01", {"min_p": -0.01}, None, INV),
    ("min_p 1.01", {"min_p": 1.01}, None, INV),
    # repetition_penalty (0, 10]
    ("repetition_penalty 0.01", {"repetition_penalty": 0.01}, None, OK),
    ("repetition_penalty 10", {"repetition_penalty": 10}, None, OK),
    ("repetition_penalty 0", {"repetition_penalty": 0}, None, INV),
    ("repetition_penalty 10.01", {"repetition_penalty": 10.01}, None, INV),
    # presence / frequency penalties [-2, 2]
    ("presence_penalty -2", {"presence_penalty": -2}, None, OK),
    ("presence_penalty 2", {"presence_penalty": 2}, None, OK),
    ("presence_penalty -2.01", {"presence_penalty": -2.01}, None, INV),
    ("presence_penalty 2.01", {"presence_penalty": 2.01}, None, INV),
    ("frequency_penalty -2", {"frequency_penalty": -2}, None, OK),
    ("frequency_penalty 2", {"frequency_penalty": 2}, None, OK),
    ("frequency_penalty -2.01", {"frequency_penalty": -2.01}, None, INV),
    ("frequency_penalty 2.01", {"frequency_penalty": 2.01}, None, INV),
    # seed: any
    ("seed 0", {"seed": 0}, None, OK),
    ("seed 2^63-1", {"seed": (1 << 63) - 1}, None, OK),
    # max_tokens [1, 1e6] (0 is "unset" on the wire: not in the table)
    ("max_tokens 1", {"max_tokens": 1}, None, OK),
    ("max_tokens 1000000", {"max_tokens": 1000000, "stop": ["a", "b", "c", "d", "e", "f", "g", "h"]},
     None, "any"),   # capped to the context; any ending, but the same one
    ("max_tokens 1000001", {"max_tokens": 1000001}, None, INV),
    # n [1, 16]
    ("n 1", {"n": 1}, None, OK),
    ("n 2", {"n": 2}, None, OK),
    ("n 17", {"n": 17}, None, INV),
    ("n 2 with a session", {"n": 2, "session_id": "rules-n"}, None, INV),
    # logprobs / top_logprobs [0, 20], > 0 needs logprobs
    ("top_logprobs 0", {"top_logprobs": 0}, None, OK),
    ("top_logprobs 20", {"logprobs": True, "top_logprobs": 20}, None, OK),
    ("top_logprobs 21", {"logprobs": True, "top_logprobs": 21}, None, INV),
    ("top_logprobs without logprobs", {"top_logprobs": 3}, None, INV),
    # logit_bias: <= 1024 entries, [-100, 100]
    ("logit_bias -100 100", {"logit_bias": {"1": -100, "2": 100}}, None, OK),
    ("logit_bias 100.5", {"logit_bias": {"1": 100.5}}, None, INV),
    ("logit_bias -101", {"logit_bias": {"1": -101}}, None, INV),
    ("logit_bias 1025 entries", {"logit_bias": {str(i): 1 for i in range(1025)}}, None, INV),
    ("logit_bias id outside the vocabulary", {"logit_bias": {"2000000000": 1}}, None, INV),
    # stop: <= 8 strings of 1..256 bytes
    ("stop 8", {"stop": ["s%d" % i for i in range(8)]}, None, OK),
    ("stop 9", {"stop": ["s%d" % i for i in range(9)]}, None, INV),
    ("stop empty", {"stop": [""]}, None, INV),
    ("stop 256 bytes", {"stop": ["x" * 256]}, None, OK),
    ("stop 257 bytes", {"stop": ["x" * 257]}, None, INV),
    ("stop 128 two-byte chars", {"stop": ["\u00e9" * 128]}, None, OK),
    ("stop 129 two-byte chars", {"stop": ["\u00e9" * 129]}, None, INV),
    ("stop bad UTF-8", {"stop": [MARK]}, b"ab\xff\xfecdefghij", UTF8),
    # session ids: 1..128 of [A-Za-z0-9._:-]
    ("session_id 128", {"session_id": "s" * 128}, None, OK),
    ("session_id charset", {"session_id": "a.B_9:z-"}, None, OK),
    ("session_id 129", {"session_id": "s" * 129}, None, INV),
    ("session_id 1000", {"session_id": "s" * 1000}, None, INV),
    ("session_id slash", {"session_id": "../etc"}, None, INV),
    ("session_id space", {"session_id": "a b"}, None, INV),
    ("session_id non-ASCII", {"session_id": "\u00e9t\u00e9"}, None, INV),
    ("session_id bad UTF-8", {"session_id": MARK}, b"ab\xc3(cdefghij", UTF8),
    # tool names: 1..64 of [A-Za-z0-9_-]
    ("tool_choice named", {"tools": [TOOL], "tool_choice": {"type": "function",
                                                           "function": {"name": "get-weather_1"}}}, None, OK),
    ("tool_choice required", {"tools": [TOOL], "tool_choice": "required"}, None, OK),
    ("tool_choice name 64", {"tools": [tool("f" * 64)], "tool_choice": {"type": "function",
                                                                        "function": {"name": "f" * 64}}},
     None, OK),
    ("tool_choice name 65", {"tools": [tool("f" * 65)], "tool_choice": {"type": "function",
                                                                        "function": {"name": "f" * 65}}},
     None, INV),
    ("tool_choice name with a space", {"tools": [tool("a b")], "tool_choice": {"type": "function",
                                                                              "function": {"name": "a b"}}},
     None, INV),
    ("tool_choice name with a dot", {"tools": [tool("a.b")], "tool_choice": {"type": "function",
                                                                            "function": {"name": "a.b"}}},
     None, INV),
    ("tool_choice name not among the tools", {"tools": [TOOL], "tool_choice": {"type": "function",
                                                                               "function": {"name": "other"}}},
     None, INV),
    ("tools 128", {"tools": [tool("t%d" % i) for i in range(128)]}, None, OK),
    ("tools with a bad name, auto", {"tools": [tool("a b")]}, None, "any"),
    ("tools with a 65-byte name, auto", {"tools": [tool("f" * 65)]}, None, "any"),
    ("tools 129", {"tools": [tool("t%d" % i) for i in range(129)]}, None, INV),
    ("tools 129, tool_choice none (not sent)", {"tools": [tool("t%d" % i) for i in range(129)],
                                               "tool_choice": "none"}, None, OK),
    # messages: 1..4096, roles
    ("messages empty", {"messages": []}, None, INV),
    ("messages 4096", {"messages": [{"role": "user", "content": "m"}] * 4096}, None, "any"),
    ("messages 4097", {"messages": [{"role": "user", "content": "m"}] * 4097}, None, INV),
    ("role unknown", {"messages": [{"role": "robot", "content": "x"}]}, None, INV),
    # UTF-8 of the text: every kind of bad byte sequence
    ("content 4-byte character", {"messages": msgs("\U0001F600 ok")}, None, OK),
    ("content bad lead byte", {"messages": msgs(MARK)}, b"abc\xffdefghijk", UTF8),
    ("content overlong", {"messages": msgs(MARK)}, b"abc\xc0\xafdefghij", UTF8),
    ("content surrogate", {"messages": msgs(MARK)}, b"ab\xed\xa0\x80cdefghi", UTF8),
    ("content above U+10FFFF", {"messages": msgs(MARK)}, b"a\xf4\x90\x80\x80bcdefgh", UTF8),
    ("content truncated", {"messages": msgs(MARK)}, b"abcdefghij\xe2\x82", UTF8),
    ("content lone continuation", {"messages": msgs(MARK)}, b"abcde\x80fghijk", UTF8),
    # the prompt: at most 512 KiB of text
    ("prompt 512 KiB + 1", {"messages": msgs("x" * (PROMPT_MAX + 1))}, None, BIG),
    ("prompt 2 x 256 KiB + 1", {"messages": [{"role": "user", "content": "x" * (256 * KIB)},
                                             {"role": "assistant", "content": "y" * (256 * KIB + 1)}]},
     None, BIG),
    ("prompt 512 KiB", {"messages": msgs("x " * (PROMPT_MAX // 2))}, None, CTX),
    # /v1/completions: a raw prompt (the daemon's text input)
    ("completion prompt", {"prompt": "Once upon a time"}, None, OK),
    ("completion prompt empty", {"prompt": ""}, None, INV),
    ("completion prompt bad UTF-8", {"prompt": MARK}, b"abc\xfedefghijk", UTF8),
    ("completion prompt 512 KiB + 1", {"prompt": "x" * (PROMPT_MAX + 1)}, None, BIG),
    ("completion temperature 2.01", {"prompt": "Hi", "temperature": 2.01}, None, INV),
    ("completion stop 9", {"prompt": "Hi", "stop": ["s%d" % i for i in range(9)]}, None, INV),
    # structured output
    ("grammar ok", {"grammar": 'root ::= "a"'}, None, OK),
    ("grammar bad", {"grammar": "root ::= ("}, None, INV),
    ("json_schema ok", {"response_format": {"type": "json_schema",
                                            "json_schema": {"name": "x", "schema": {"type": "object"}}}}, None, OK),
    ("json_schema bad keyword", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "format": "no-such-format"}}}}, None, INV),
]


# ---- the two doors ---------------------------------------------------------------

def body_of(fields):
    b = {"max_tokens": 1, "temperature": 0}
    if "prompt" not in fields:
        b["messages"] = msgs()
    b.update(fields)
    return b


def http_bytes(body, raw):
    text = json.dumps(body).encode()
    if raw is not None:
        check(text.count(MARK.encode()) == 1, "marker not once in the body")
        text = text.replace(MARK.encode(), raw)
    return text


def via_http(gw, body, raw):
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    st, _, data = gw.request("POST", path, http_bytes(body, raw),
                             {"Content-Type": "application/json"}, timeout=120)
    if st == 200:
        return OK, st, None, data
    e = json.loads(data)["error"]
    return e["code"], st, e["type"], e["message"]


def generate_of(pb, body):
    """The GenerateRequest the same body asks the daemon for (proto/smollm3.proto)."""
    g = pb.GenerateRequest()
    if "prompt" in body:
        g.text = body["prompt"]
    for m in body.get("messages", ()):
        g.chat.messages.add(role=m["role"], content=m["content"])
    if "messages" in body and not body["messages"]:
        g.chat.SetInParent()
    if "tools" in body and body.get("tool_choice") != "none":
        g.chat.tools_json = json.dumps(body["tools"], separators=(",", ":"))
    s = g.sampling
    for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
              "frequency_penalty", "seed"):
        if k in body:
            setattr(s, k, body[k])
    g.max_tokens = body.get("max_tokens", 0)
    g.stop.extend(body.get("stop", []))
    g.logprobs = bool(body.get("logprobs", False))
    g.top_logprobs = body.get("top_logprobs", 0)
    g.n = body.get("n", 0)
    for k, v in body.get("logit_bias", {}).items():
        g.logit_bias.add(token_id=int(k), bias=v)
    if "session_id" in body:
        g.session_id = body["session_id"]
    tc = body.get("tool_choice")
    if isinstance(tc, dict):
        g.tool_choice = tc["function"]["name"]
    elif tc == "required":
        g.tool_choice = "required"
    if "grammar" in body:
        g.gbnf = body["grammar"]
    rf = body.get("response_format")
    if rf and rf["type"] == "json_schema":
        g.json_schema = json.dumps(rf["json_schema"]["schema"], separators=(",", ":"))
    return g


class Zmq:
    def __init__(self, endpoint, pb):
        import zmq
        self.zmq, self.pb = zmq, pb
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.rid = 1000

    def close(self):
        self.sock.close()
        self.ctx.term()

    def generate(self, body, raw, timeout=120):
        pb = self.pb
        self.rid += 1
        req = pb.Request(protocol_version=1, request_id=self.rid)
        req.generate.CopyFrom(generate_of(pb, body))
        frame = req.SerializeToString()
        if raw is not None:
            check(len(raw) == len(MARK) and frame.count(MARK.encode()) == 1, "marker not patchable")
            frame = frame.replace(MARK.encode(), raw)
        self.sock.send(frame)
        want = max(1, body.get("n", 1))
        done = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.sock.poll(1000):
                continue
            ev = pb.Event()
            ev.ParseFromString(self.sock.recv())
            if ev.request_id != self.rid:
                continue
            kind = ev.WhichOneof("kind")
            if kind == "error":
                name = pb.ErrorCode.Name(ev.error.code)
                return name[len("ERROR_"):].lower(), ev.error.message
            if kind == "done":
                done += 1
                if done >= want:
                    return OK, None
        raise AssertionError("no terminal event from the daemon in %d s" % timeout)


# ---- the test ------------------------------------------------------------------

def run_case(gw, z, seen, name, fields, raw, want):
    body = body_of(fields)
    hc, hst, htype, hmsg = via_http(gw, body, raw)
    zc, zmsg = z.generate(body, raw)
    check(hc == zc, "gateway %s (%s %s: %s) vs daemon %s (%s)" % (hc, hst, htype, str(hmsg)[:160], zc,
                                                                  str(zmsg)[:160]))
    if want != "any":
        check(hc == want, "both say %s, the rules say %s (%s)" % (hc, want, str(hmsg)[:160]))
    if hc != OK:
        prev = seen.setdefault(hc, (hst, htype))
        check(prev == (hst, htype), "code %s came as %s %s and as %s %s" % (hc, prev[0], prev[1], hst, htype))


def main():
    want_name = tg.suite_args()
    with tg.Suite("smollm3-rules-test-") as st:
        import zmq  # noqa: F401
        sys.path.insert(0, tg.ARGS.pb2_dir or "")
        import smollm3_pb2 as pb
        st.d = tg.Daemon(os.path.join(st.tmp, "d.sock"))
        st.gw = tg.Gateway(st.d.endpoint, st.tmp)
        z = Zmq(st.d.endpoint, pb)
        try:
            seen = {}
            n = 0
            for name, fields, raw, want in CASES:
                if not want_name(name):
                    continue
                n += 1
                try:
                    run_case(st.gw, z, seen, name, fields, raw, want)
                    RESULTS["pass"] += 1
                    print("ok %s" % name, flush=True)
                except Exception as e:  # noqa: BLE001 - report every case
                    RESULTS["fail"] += 1
                    print("FAIL %s: %s" % (name, e), flush=True)
            print("verdicts: %d inputs through both doors; codes seen: %s" %
                  (n, ", ".join("%s=%d %s" % (c, s, t) for c, (s, t) in sorted(seen.items()))), flush=True)
        finally:
            z.close()
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
