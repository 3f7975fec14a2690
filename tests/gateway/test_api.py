#!/usr/bin/env python3
"""The OpenAI API surface of smollm3-gateway, driven by the clients users have.

* Every field of the installed `openai` SDK's ChatCompletionCreateParams is
  classified here as honoured, metadata or refused, and sent through the SDK:
  honoured and metadata fields answer 200, refused ones a 400 naming the
  field.  A field the SDK gains that this table does not know fails the test.
* Honoured fields change the answer end to end (gateway -> protobuf ->
  engine): seed, top_k, top_p, min_p, logit_bias, penalties, stop,
  max_tokens, reasoning_effort, tool_choice "none", include_usage.
* tool_choice "required" and a named function: the answer is tool calls
  whose arguments validate against the tool's parameters (jsonschema),
  finish_reason "tool_calls", streamed = non-streamed.
* logprobs / top_logprobs (chat and completions, streaming and not) equal the
  log-softmax of `smollm3 logits` for the same ids within 1e-4.
* /v1/completions, /tokenize, /detokenize, /v1/models/{id}; unknown fields
  refused, and accepted with --ignore-unknown-fields.
* An error about one field names it in "param", the daemon's own refusals
  too (tools on SmolLM2's template, tool_choice on a vocabulary without
  <tool_call>, a logit_bias token outside the vocabulary).
* curl, and langchain-openai (a second, independent client) doing a
  streamed chat and a tool call.

Reuses the process helpers of test_gateway.py.  Prints "ok NAME" /
"FAIL NAME: why" / "SKIPPED NAME: why" and "N passed, N failed" last.
"""
import array
import json
import re
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import Skip, check, run_test  # noqa: E402

MODEL = tg.MODEL
TOL = 1e-4          # logprobs vs log-softmax of `smollm3 logits` (the goal)


def smollm3(*args, stdin=None):
    r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3")] + list(args), input=stdin,
                       capture_output=True, timeout=120)
    check(r.returncode == 0, "smollm3 %s: %s" % (args[0], r.stderr.decode()))
    return r.stdout


client = tg.openai_client


def msgs(text="Hello!"):
    return [{"role": "user", "content": text}]


post = tg.post_json


# ---- the field table ---------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather",
                                         "parameters": {"type": "object",
                                                        "properties": {"city": {"type": "string"}}}}}

# field -> a value the service honours (the request answers 200)
HONOURED = {
    "messages": None, "model": "any-name", "stream": True, "stream_options": {"include_usage": True},
    "max_tokens": 3, "max_completion_tokens": 3, "temperature": 0.7, "top_p": 0.9,
    "presence_penalty": 0.5, "frequency_penalty": 0.5, "seed": 7, "stop": ["\n\n"],
    "logit_bias": {"100": 5}, "logprobs": True, "top_logprobs": 2, "n": 2, "tools": [TOOL],
    "tool_choice": "none", "parallel_tool_calls": True, "reasoning_effort": "low",
    "response_format": {"type": "text"}, "modalities": ["text"], "service_tier": "auto",
    "prediction": {"type": "content", "content": "x"},
}
# field -> value: accepted, changes nothing (documented as metadata)
METADATA = {
    "user": "user-1", "metadata": {"k": "v"}, "store": True, "safety_identifier": "sid-1",
    "prompt_cache_key": "k1", "prompt_cache_retention": "24h", "prompt_cache_options": {"ttl": "30m"},
}
# field -> a value: 400 naming the field
REFUSED = {
    "audio": {"voice": "alloy", "format": "wav"},
    "functions": [{"name": "f", "parameters": {}}], "function_call": "auto",
    "web_search_options": {},
    "verbosity": "low", "moderation": {"model": "omni-moderation-latest"},
}
# honoured fields with a value the service does not do: 400 naming the field
REFUSED_VALUES = [
    ("n", 17), ("response_format", {"type": "xml"}),
    ("response_format", {"type": "json_schema", "json_schema": {"schema": {}}}),
    # (tool_choice "required" / named without tools, and a malformed name; with tools: t_tool_choice_forced)
    ("tool_choice", "required"), ("tool_choice", {"type": "function", "function": {"name": "get_weather"}}),
    ("tool_choice", {"type": "function", "function": {"name": "not a name!"}}), ("tool_choice", "always"),
    ("parallel_tool_calls", False), ("service_tier", "gold"), ("modalities", ["text", "audio"]),
    ("top_logprobs", 21), ("logit_bias", {"100": 101}), ("logit_bias", {"x": 1}),
    ("prediction", {"type": "text", "content": "x"}), ("prediction", {"type": "content", "content": 5}),
    ("prediction", {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}),
]
# the gateway's extensions, honoured (not SDK fields: sent with extra_body)
EXTENSIONS = {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
              "chat_template_kwargs": {"enable_thinking": False}, "session_id": "api-test-s1"}


def sdk_fields():
    from openai.types.chat import completion_create_params as ccp
    return tg.sdk_type_fields(ccp.CompletionCreateParamsNonStreaming, ccp.CompletionCreateParamsStreaming)


expect_400 = tg.expect_openai_400


def t_field_walk(gw, d):
    try:
        import openai  # noqa: F401
    except ImportError:
        raise Skip("openai SDK missing (tests/requirements-api.txt)")
    fields = sdk_fields()
    check(len(fields) >= 30, "only %d SDK fields found: %r" % (len(fields), sorted(fields)))
    table = set(HONOURED) | set(METADATA) | set(REFUSED)
    unknown = fields - table
    check(not unknown, "SDK fields the test (and the gateway) do not classify: %s" % sorted(unknown))
    cl = client(gw)
    base = dict(model="x", messages=msgs(), max_tokens=2, temperature=0)
    for f in sorted(fields):
        if f in ("messages", "model"):
            continue
        kw = dict(base)
        if f in HONOURED or f in METADATA:
            kw[f] = HONOURED[f] if f in HONOURED else METADATA[f]
            if f == "top_logprobs":
                kw["logprobs"] = True
            if f == "stream_options":
                kw["stream"] = True
            r = cl.chat.completions.create(**kw)
            if kw.get("stream"):
                r = list(r)
                check(r, "%s: empty stream" % f)
            else:
                check(r.choices[0].finish_reason in ("length", "stop"), "%s: %r" % (f, r))
        else:
            kw[f] = REFUSED[f]
            expect_400(lambda: cl.chat.completions.create(**kw), f)
    for f, v in REFUSED_VALUES:
        kw = dict(base)
        kw[f] = v
        if f == "top_logprobs":
            kw["logprobs"] = True
        expect_400(lambda: cl.chat.completions.create(**kw), f)
    r = cl.chat.completions.create(extra_body=EXTENSIONS, **base)
    check(r.choices[0].message.content is not None, "extensions")
    # unknown fields: refused by name; grammar (honoured: test_gateway.py) must be a GBNF string,
    # and it cannot be combined with a response_format other than text
    expect_400(lambda: cl.chat.completions.create(extra_body={"frobnicate": 1}, **base), "frobnicate")
    expect_400(lambda: cl.chat.completions.create(extra_body={"grammar": 42}, **base), "grammar")
    expect_400(lambda: cl.chat.completions.create(extra_body={"grammar": "root ::= \"a\""},
                                                  response_format={"type": "json_object"}, **base), "grammar")
    # conflicting thinking settings
    expect_400(lambda: cl.chat.completions.create(
        reasoning_effort="none", extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **base),
        "reasoning_effort")


def t_ignore_unknown(d, tmp):
    gw = tg.Gateway(d.endpoint, tmp, ["--ignore-unknown-fields"])
    try:
        st, j = post(gw, "/v1/chat/completions", {"messages": msgs(), "max_tokens": 2, "frobnicate": 1})
        check(st == 200, "unknown field not ignored: %d %r" % (st, j))
        st, j = post(gw, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "frobnicate": 1})
        check(st == 200, "completions: unknown field not ignored: %d %r" % (st, j))
        # ignoring unknown fields never turns a refused one into silence
        st, j = post(gw, "/v1/chat/completions", {"messages": msgs(), "max_tokens": 2, "audio": {}})
        check(st == 400 and j["error"]["param"] == "audio", "audio: %d %r" % (st, j))
    finally:
        gw.stop()


# ---- honoured fields change the answer ------------------------------------------

def gen(cl, **kw):
    base = dict(model="x", messages=msgs("Tell me a story"), max_tokens=8)
    base.update(kw)
    return cl.chat.completions.create(**base)


def ids_of(r):
    return [e.model_extra["id"] for e in r.choices[0].logprobs.content]


def t_sampling_effects(gw, d):
    cl = client(gw)
    ne = {"chat_template_kwargs": {"enable_thinking": False}}
    greedy = gen(cl, temperature=0, logprobs=True, extra_body=ne)
    g_ids = ids_of(greedy)
    check(len(g_ids) == 8, "greedy ids %r" % g_ids)
    # seed: the same seed draws the same tokens at temperature 1; seeds differ
    a = ids_of(gen(cl, temperature=1.0, seed=11, logprobs=True, extra_body=ne))
    b = ids_of(gen(cl, temperature=1.0, seed=11, logprobs=True, extra_body=ne))
    check(a == b, "same seed, different tokens: %r %r" % (a, b))
    draws = {tuple(ids_of(gen(cl, temperature=1.0, seed=s, logprobs=True, extra_body=ne))) for s in range(4)}
    check(len(draws) > 1, "4 seeds drew the same tokens")
    check(any(list(x) != g_ids for x in draws), "temperature 1 draws are all the greedy ones")
    # top_k 1, min_p 1 and a tiny top_p leave only the best token: greedy again at T=1.5
    for extra, name in (({"top_k": 1}, "top_k"), ({"min_p": 1.0}, "min_p"), ({}, "top_p")):
        kw = dict(temperature=1.5, seed=3, logprobs=True, extra_body=dict(ne, **extra))
        if name == "top_p":
            kw["top_p"] = 1e-6
        check(ids_of(gen(cl, **kw)) == g_ids, "%s did not reduce sampling to greedy" % name)
    # logit_bias +100 forces a token, -100 bans the greedy first one
    forced = 1000
    r = gen(cl, temperature=0, logprobs=True, logit_bias={str(forced): 100}, extra_body=ne)
    check(ids_of(r) == [forced] * 8, "logit_bias +100: %r" % ids_of(r))
    r = gen(cl, temperature=0, logprobs=True, logit_bias={str(g_ids[0]): -100}, extra_body=ne)
    check(ids_of(r)[0] != g_ids[0], "logit_bias -100 did not ban %d" % g_ids[0])
    st, j = post(gw, "/v1/chat/completions", {"messages": msgs(), "logit_bias": {"99999999": 1}})
    check(st == 400 and "vocabulary" in j["error"]["message"], "out-of-vocabulary bias: %d %r" % (st, j))
    # penalties change greedy decoding of this repetitive model
    for extra in ({"repetition_penalty": 3.0}, {"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        kw = dict(temperature=0, logprobs=True, extra_body=dict(ne, **{k: v for k, v in extra.items()
                                                                        if k == "repetition_penalty"}))
        for k, v in extra.items():
            if k != "repetition_penalty":
                kw[k] = v
        check(ids_of(gen(cl, **kw)) != g_ids, "%s did not change greedy output" % extra)
    # stop: cut at a string the greedy answer holds, never emitted
    text = greedy.choices[0].message.content
    cut = text[len(text) // 2:len(text) // 2 + 3]
    if cut.strip():
        r = gen(cl, temperature=0, stop=[cut], extra_body=ne)
        check(r.choices[0].finish_reason == "stop" and cut not in r.choices[0].message.content and
              text.startswith(r.choices[0].message.content), "stop %r: %r" % (cut, r.choices[0].message.content))
    # max_tokens
    r = gen(cl, temperature=0, max_tokens=3, extra_body=ne)
    check(r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", "max_tokens")
    # reasoning_effort maps to thinking: the template differs, so do the prompt tokens
    on = gen(cl, temperature=0, max_tokens=1, reasoning_effort="high").usage.prompt_tokens
    off = gen(cl, temperature=0, max_tokens=1, reasoning_effort="minimal").usage.prompt_tokens
    off2 = gen(cl, temperature=0, max_tokens=1, extra_body=ne).usage.prompt_tokens
    check(on != off and off == off2, "reasoning_effort: high %d, minimal %d, no-think %d" % (on, off, off2))
    # reasoning_effort "low" caps the thinking at 512 tokens: the daemon forces </think> after them,
    # so the reasoning counts at most 512 + 1 (exactly that when the model would think on)
    r = gen(cl, temperature=0, max_tokens=530, reasoning_effort="low")
    rt = r.usage.completion_tokens_details.reasoning_tokens
    check(rt <= 513 and (r.usage.completion_tokens < 530 or rt == 513 or rt < 512),
          "reasoning_effort low: %d reasoning of %d tokens" % (rt, r.usage.completion_tokens))
    expect_400(lambda: gen(cl, max_tokens=1, reasoning_effort="extreme"), "reasoning_effort")
    # tool_choice "none": the tools are not rendered at all
    plain = gen(cl, temperature=0, max_tokens=1).usage.prompt_tokens
    auto = gen(cl, temperature=0, max_tokens=1, tools=[TOOL], tool_choice="auto").usage.prompt_tokens
    none = gen(cl, temperature=0, max_tokens=1, tools=[TOOL], tool_choice="none").usage.prompt_tokens
    check(auto > plain and none == plain, "tool_choice: plain %d auto %d none %d" % (plain, auto, none))
    # model: any name is served by the one model, and the answer says which
    check(greedy.model == cl.models.list().data[0].id, "model %r" % greedy.model)


# ---- logprobs against the engine's own logits ----------------------------------------

def log_softmax_rows(ids, rows_wanted):
    """log-softmax (float64) of `smollm3 logits --all` rows for ids."""
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        smollm3("logits", "-m", MODEL, "--ids", ",".join(map(str, ids)), "--all", "-o", f.name,
                "--threads", "1")
        data = array.array("f")
        data.frombytes(open(f.name, "rb").read())
    V = len(data) // len(ids)
    out = []
    for r in rows_wanted:
        row = data[r * V:(r + 1) * V]
        m = max(row)
        lse = m + math.log(math.fsum(math.exp(x - m) for x in row))
        out.append([x - lse for x in row])
    return out


def compare_steps(prompt_ids, steps, what):
    """steps: [(id, logprob, [(top_id, top_logprob)])] in generation order."""
    ids = list(prompt_ids) + [s[0] for s in steps[:-1]]
    ref = log_softmax_rows(ids, range(len(prompt_ids) - 1, len(ids)))
    worst = 0.0
    for k, (tid, lp, top) in enumerate(steps):
        row = ref[k]
        worst = max(worst, abs(lp - row[tid]))
        best = sorted(range(len(row)), key=lambda i: (-row[i], i))[:len(top)]
        check([t for t, _ in top] == best, "%s step %d: top ids %r, reference %r" % (what, k, [t for t, _ in top], best))
        for t, l in top:
            worst = max(worst, abs(l - row[t]))
    check(worst <= TOL, "%s: logprobs differ from log-softmax(smollm3 logits) by %.3g > %g" % (what, worst, TOL))
    return worst


def t_logprobs(gw, d):
    prompt = json.loads(smollm3("tokenize", "-m", MODEL, "--json", "Once upon a time"))["ids"]
    # completions, non-streaming, logprobs as an integer (top alternatives)
    st, j = post(gw, "/v1/completions", {"prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 5})
    check(st == 200, "completions: %d %r" % (st, j))
    lp = j["choices"][0]["logprobs"]
    toks = lp["tokens"]
    check(len(toks) == 5 and len(lp["token_logprobs"]) == 5 and len(lp["top_logprobs"]) == 5 and
          len(lp["text_offset"]) == 5, "completions logprobs shape %r" % lp)
    check(lp["text_offset"][0] == 0 and "".join(toks) == j["choices"][0]["text"], "text_offset / tokens")
    # the greedy token is the top alternative of its step; its logprob is the top one
    for k in range(5):
        top = lp["top_logprobs"][k]
        check(abs(max(top.values()) - lp["token_logprobs"][k]) < 1e-9, "greedy step %d not the top" % k)
    # exact check with ids: the same prompt streamed as completions, then against smollm3 logits
    cl = client(gw)
    steps = []
    stream = cl.completions.create(model="x", prompt=prompt, max_tokens=5, temperature=0, logprobs=3,
                                   stream=True)
    texts = []
    for ch in stream:
        for c in ch.choices:
            if c.logprobs and c.logprobs.tokens:
                texts.append((c.logprobs.tokens[0], c.logprobs.token_logprobs[0]))
    check(len(texts) == 5 and [t for t, _ in texts] == toks, "streamed completions tokens %r vs %r" % (texts, toks))
    for (t, l), l2 in zip(texts, lp["token_logprobs"]):
        check(abs(l - l2) < 1e-6, "stream vs non-stream logprob %g %g" % (l, l2))
    # chat (ids in the 'id' extension), non-streaming and streaming, at temperature 0.8 with a seed:
    # logprobs do not depend on temperature
    req = {"messages": msgs("Once upon a time"), "chat_template_kwargs": {"enable_thinking": False}}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(req, f)
        f.flush()
        rendered = smollm3("template", "-m", MODEL, "--request", f.name)
    chat_prompt = json.loads(smollm3("tokenize", "-m", MODEL, "--special", "--json", "-", stdin=rendered))["ids"]
    r = cl.chat.completions.create(model="x", max_tokens=6, temperature=0.8, seed=5, logprobs=True,
                                   top_logprobs=4, **{"messages": req["messages"]},
                                   extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    check(r.usage.prompt_tokens == len(chat_prompt), "prompt %d tokens, rendered %d (date?)"
          % (r.usage.prompt_tokens, len(chat_prompt)))
    content = r.choices[0].logprobs.content
    steps = [(e.model_extra["id"], e.logprob, [(t.model_extra["id"], t.logprob) for t in e.top_logprobs])
             for e in content]
    check(len(steps) == 6 and all(len(s[2]) == 4 for s in steps), "chat logprobs shape")
    check(all(bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token for e in content),
          "bytes vs token")
    w1 = compare_steps(chat_prompt, steps, "chat")
    stream = cl.chat.completions.create(model="x", max_tokens=6, temperature=0.8, seed=5, logprobs=True,
                                        top_logprobs=4, stream=True, messages=req["messages"],
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    ssteps = []
    for ch in stream:
        for c in ch.choices:
            for e in (c.logprobs.content if c.logprobs and c.logprobs.content else []):
                ssteps.append((e.model_extra["id"], e.logprob, [(t.model_extra["id"], t.logprob)
                                                                 for t in e.top_logprobs]))
    check(ssteps == steps, "streamed chat logprobs differ from non-streamed")
    # completions by ids: chat prompt as token ids, greedy
    st, j = post(gw, "/v1/completions", {"prompt": chat_prompt, "max_tokens": 4, "temperature": 0, "logprobs": 2})
    check(st == 200, "completions by ids: %r" % j)
    print("   logprobs vs log-softmax(smollm3 logits): max |diff| %.2g (tolerance %g)" % (w1, TOL), flush=True)


# ---- completions, tokenize, models ----------------------------------------------------

def t_completions(gw, d):
    cl = client(gw)
    r = cl.completions.create(model="x", prompt="The capital of France is", max_tokens=4, temperature=0)
    check(r.object == "text_completion" and r.id.startswith("cmpl-") and r.choices[0].text and
          r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length", "sdk completion %r" % r)
    # raw text: no template, so the prompt is just its tokens
    n = len(json.loads(smollm3("tokenize", "-m", MODEL, "--json", "The capital of France is"))["ids"])
    check(r.usage.prompt_tokens == n, "prompt tokens %d, tokenizer %d" % (r.usage.prompt_tokens, n))
    # streaming with usage
    text, usage = "", None
    for ch in cl.completions.create(model="x", prompt="The capital of France is", max_tokens=4, temperature=0,
                                    stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            text += c.text
    check(text == r.choices[0].text and usage and usage.completion_tokens == 4, "stream %r %r" % (text, usage))
    # token-id prompt = the same prompt as text
    ids = json.loads(smollm3("tokenize", "-m", MODEL, "--json", "The capital of France is"))["ids"]
    r2 = cl.completions.create(model="x", prompt=ids, max_tokens=4, temperature=0)
    check(r2.choices[0].text == r.choices[0].text, "ids prompt %r vs %r" % (r2.choices[0].text, r.choices[0].text))
    # stop
    cut = r.choices[0].text[1:3]
    if cut.strip():
        r3 = cl.completions.create(model="x", prompt="The capital of France is", max_tokens=4, temperature=0,
                                   stop=cut)
        check(cut not in r3.choices[0].text and r3.choices[0].finish_reason == "stop", "stop %r" % r3)
    # refused
    for f, v in (("echo", True), ("suffix", "end"), ("best_of", 2), ("n", 17), ("frobnicate", 1),
                 ("prompt", ["a", "b"]), ("logprobs", 21), ("prompt", [])):
        expect_400(lambda: cl.completions.create(model="x", max_tokens=2, **({"prompt": "Hi"} if f != "prompt" else {}),
                                                 **({f: v} if f not in ("frobnicate",) else {}),
                                                 extra_body={f: v} if f == "frobnicate" else None), f)
    st, j = post(gw, "/v1/completions", {"prompt": [0, 99999999], "max_tokens": 2})
    check(st == 400, "out-of-vocabulary prompt id: %d" % st)


def t_tokenize(gw, d):
    text = "Hello world, héllo <|im_start|>"
    st, j = post(gw, "/tokenize", {"content": text})
    ref_special = json.loads(smollm3("tokenize", "-m", MODEL, "--special", "--json", text))["ids"]
    ref_plain = json.loads(smollm3("tokenize", "-m", MODEL, "--json", text))["ids"]
    check(st == 200 and j["tokens"] == ref_special, "tokenize %r vs %r" % (j, ref_special))
    st, j = post(gw, "/tokenize", {"content": text, "parse_special": False})
    check(j["tokens"] == ref_plain, "parse_special false")
    st, j = post(gw, "/tokenize", {"content": text, "with_pieces": True, "add_special": True})
    check(all(set(t) == {"id", "piece"} for t in j["tokens"]) and "".join(
        t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode() for t in j["tokens"]) == text,
        "with_pieces %r" % j)
    st, j = post(gw, "/detokenize", {"tokens": ref_special})
    check(st == 200 and j["content"] == text, "detokenize %r" % j)
    st, j = post(gw, "/detokenize", {"tokens": [99999999]})
    check(st == 400, "detokenize out of vocabulary: %d" % st)
    st, j = post(gw, "/tokenize", {"content": "x", "frob": 1})
    check(st == 400 and j["error"]["param"] == "frob", "tokenize unknown field: %r" % j)
    st, j = post(gw, "/tokenize", {"text": "x"})
    check(st == 400, "tokenize without content")


def t_prediction(gw, d):
    # Predicted Outputs: the prediction drafts the speculative steps; greedy output unchanged.
    # A prediction equal to the completion (its text tokenizes back to as many tokens) is
    # drafted and accepted: rejected = 0, accepted = completion - decode steps.
    c = client(gw)
    gen, exact = 40, 0
    kw = dict(model="m", max_tokens=gen, temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    for i, prompt in enumerate(["Write a poem about the sea.", "List the planets.", "Say hello.", "Count to ten."]):
        base = c.chat.completions.create(messages=msgs(prompt), logprobs=True, **kw)
        text = base.choices[0].message.content or ""
        gen_pieces = [bytes(t.bytes) for t in (base.choices[0].logprobs.content or [])]
        bu = base.usage.completion_tokens_details
        check(bu.accepted_prediction_tokens == 0 and bu.rejected_prediction_tokens == 0,
              "no prediction: OpenAI's prediction counts are 0: %r" % bu)
        x = (base.usage.model_extra or {}).get("x_smollm3")
        check(isinstance(x, dict) and x["accepted_draft_tokens"] <= x["drafted_tokens"], "x_smollm3 %r" % x)
        if not text:
            continue
        parts = [{"type": "text", "text": text[:len(text) // 2]}, {"type": "text", "text": text[len(text) // 2:]}]
        for pred in (text, parts):
            r = c.chat.completions.create(messages=msgs(prompt), prediction={"type": "content", "content": pred}, **kw)
            check(r.choices[0].message.content == text, "output differs with a prediction: %r vs %r" %
                  (r.choices[0].message.content, text))
            u = r.usage.completion_tokens_details
            x = r.usage.model_extra["x_smollm3"]
            check(u.accepted_prediction_tokens + u.rejected_prediction_tokens <= x["drafted_tokens"] and
                  u.accepted_prediction_tokens <= x["accepted_draft_tokens"], "counts %r %r" % (u, x))
            # exact counts only where the text tokenizes back to the very tokens generated (the same
            # count is not enough: another split of the same text drafts tokens the model refuses)
            st, tk = post(gw, "/tokenize", {"content": text, "parse_special": False, "with_pieces": True})
            pieces = [p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                      for p in tk["tokens"]] if st == 200 else None
            if (base.choices[0].finish_reason == "length" and pieces == gen_pieces and len(pieces) == gen and
                    r.usage.completion_tokens == gen):
                # every draft from the prediction, all accepted: each step gave its drafts + 1
                check(u.rejected_prediction_tokens == 0 and u.accepted_prediction_tokens == x["drafted_tokens"] and
                      u.accepted_prediction_tokens + x["decode_steps"] == gen and
                      u.accepted_prediction_tokens >= gen // 2, "whole prediction: %r %r" % (u, x))
                exact += 1
        # unrelated text: the first token is not its first, nothing of it recurs: nothing drafted from it
        r = c.chat.completions.create(messages=msgs(prompt), prediction={
            "type": "content", "content": "\u2200 zebra quantum \u2200 zebra quantum"}, **kw)
        check(r.choices[0].message.content == text, "output differs with an unrelated prediction")
        u = r.usage.completion_tokens_details
        check(u.accepted_prediction_tokens == 0 and u.rejected_prediction_tokens == 0, "unrelated: %r" % u)
    check(exact > 0, "no completion's text tokenized back to its tokens: exact counts unchecked")
    # streamed: the usage chunk carries the same counts
    base = c.chat.completions.create(messages=msgs("Say hello."), **kw)
    text = base.choices[0].message.content
    got, usage = "", None
    for ch in c.chat.completions.create(messages=msgs("Say hello."), prediction={"type": "content", "content": text},
                                        stream=True, stream_options={"include_usage": True}, **kw):
        if ch.choices and ch.choices[0].delta.content:
            got += ch.choices[0].delta.content
        if ch.usage:
            usage = ch.usage
    check(got == text and usage and usage.completion_tokens_details.accepted_prediction_tokens > 0,
          "stream: %r %r" % (got, usage))


def t_models(gw, d):
    st, h, b = gw.request("GET", "/v1/models")
    mid = json.loads(b)["data"][0]["id"]
    check(mid == os.path.basename(MODEL)[:-len(".gguf")], "model id %r is not the file's slug" % mid)
    st, h, b = gw.request("GET", "/v1/models/" + mid)
    check(st == 200 and json.loads(b)["id"] == mid, "models/{id}: %d %s" % (st, b))
    st, h, b = gw.request("GET", "/v1/models/gpt-4")
    check(st == 404 and json.loads(b)["error"]["code"] == "model_not_found", "unknown model: %d %s" % (st, b))
    check(client(gw).models.retrieve(mid).id == mid, "sdk models.retrieve")


def t_curl(gw, d):
    if not shutil.which("curl"):
        raise Skip("curl not installed")
    out = subprocess.run(["curl", "-sS", "-N", gw.url("/v1/completions"), "-H", "Content-Type: application/json",
                          "-d", json.dumps({"prompt": "Hi", "max_tokens": 3, "stream": True, "logprobs": 1})],
                         capture_output=True, timeout=60).stdout
    chunks = tg.openai_chunks(out)
    check(len(chunks) >= 2 and all(c["object"] == "text_completion" for c in chunks), "curl stream %r" % out[:300])
    check(any(c["choices"] and c["choices"][0]["logprobs"] for c in chunks), "curl stream: no logprobs")
    out = subprocess.run(["curl", "-sS", gw.url("/tokenize"), "-d", '{"content":"Hi there"}'],
                         capture_output=True, timeout=60).stdout
    check(json.loads(out)["tokens"], "curl tokenize %r" % out)
    out = subprocess.run(["curl", "-sS", gw.url("/v1/chat/completions"), "-d",
                          json.dumps({"messages": msgs(), "max_tokens": 2, "verbosity": "low"})],
                         capture_output=True, timeout=60).stdout
    check(json.loads(out)["error"]["param"] == "verbosity", "curl refused field %r" % out)


# ---- a second client: langchain-openai --------------------------------------------------

def t_langchain_stream(gw, d):
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as e:
        raise Skip("langchain-openai missing (tests/requirements-api.txt): %s" % e)
    llm = ChatOpenAI(base_url=gw.url("/v1"), api_key="none", model="smollm3", max_tokens=6, temperature=0,
                     max_retries=0, timeout=60)
    parts = [c.content for c in llm.stream("Hello")]
    check(len(parts) >= 2 and "".join(parts), "langchain stream %r" % parts)
    full = llm.invoke("Hello").content
    check(full == "".join(parts), "langchain invoke %r vs stream %r" % (full, "".join(parts)))


def t_langchain_tools(gw, fd):
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as e:
        raise Skip("langchain-openai missing: %s" % e)
    llm = ChatOpenAI(base_url=gw.url("/v1"), api_key="none", model="fake", max_retries=0, timeout=30)
    bound = llm.bind_tools([TOOL])
    m = bound.invoke("TOOLS please")
    check(m.tool_calls and m.tool_calls[0]["name"] == "get_weather" and
          m.tool_calls[0]["args"] == {"city": "Paris"}, "langchain tool call %r" % m)
    chunks = list(bound.stream("TOOLS please"))
    acc = chunks[0]
    for c in chunks[1:]:
        acc = acc + c
    check(acc.tool_calls and acc.tool_calls[0]["name"] == "get_weather", "langchain streamed tool call %r" % acc)



# ---- API keys -------------------------------------------------------------------------------

def t_api_keys(d, tmp):
    import openai
    path = os.path.join(tmp, "keys")
    with open(path, "w") as f:
        f.write("# API keys\n\nsk-alice-0123456789 alice tenant=alice\n  sk-bob-abcdef  bob tenant=bob # the other one\n"
                "sk-anon\n")
    gw = tg.Gateway(d.endpoint, tmp, ["--api-key-file", path])
    try:
        st, h, b = gw.request("GET", "/v1/models")
        j = json.loads(b)
        check(st == 401 and j["error"]["code"] == "missing_api_key" and j["error"]["type"] == "invalid_request_error"
              and "param" in j["error"] and h.get("www-authenticate", "").startswith("Bearer"),
              "no key: %d %s %r" % (st, b, h))
        st, h, b = gw.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-alice-012345678"})
        check(st == 401 and json.loads(b)["error"]["code"] == "invalid_api_key", "a key's prefix: %d" % st)
        st, h, b = gw.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-alice-01234567890"})
        check(st == 401, "a key with a byte more: %d" % st)
        for path_, method in (("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/tokenize", "POST"),
                              ("/detokenize", "POST"), ("/ui/config", "GET"), ("/ui/chat", "POST"),
                              ("/v1/nowhere", "GET")):
            st, h, b = gw.request(method, path_, b"{}")
            check(st == 401, "%s without a key: %d" % (path_, st))
        st, h, b = gw.request("GET", "/health")
        check(st == 200, "/health must stay open: %d" % st)
        try:
            client(gw, api_key="wrong").models.list()
            raise AssertionError("wrong key accepted")
        except openai.AuthenticationError:
            pass
        cl = client(gw, api_key="sk-alice-0123456789")
        r = cl.chat.completions.create(model="x", messages=msgs(), max_tokens=3, temperature=0)
        check(r.usage.completion_tokens == 3, "alice's chat")
        r = cl.completions.create(model="x", prompt="Hi", max_tokens=2)
        check(r.usage.completion_tokens == 2, "alice's completion")
        bob = client(gw, api_key="sk-bob-abcdef")
        list(bob.chat.completions.create(model="x", messages=msgs(), max_tokens=4, stream=True))
        st, j = post(gw, "/tokenize", {"content": "Hi"}, headers={"Authorization": "Bearer sk-anon"})
        check(st == 200 and j["tokens"], "anon key tokenize: %d" % st)
        # the UI: config and chat need the key; the stream its SID only
        auth = {"Authorization": "Bearer sk-bob-abcdef"}
        st, h, b = gw.request("GET", "/ui/config", headers=auth)
        check(st == 200, "/ui/config with a key: %d" % st)
        form = "conversation=k1&history=%5B%5D&message=Hi&think=0&temperature=0"
        st, h, b = gw.request("POST", "/ui/chat", form, headers=dict(auth, **{
            "Content-Type": "application/x-www-form-urlencoded"}))
        check(st == 200, "/ui/chat with a key: %d %s" % (st, b[:200]))
        sid = tg.sid_of(b.decode())
        st, h, chunks = tg.read_stream(gw, None, path="/ui/stream/" + sid, method="GET")
        evs = tg.sse_events(b"".join(c for _, c in chunks))
        check(st == 200 and evs[-1][0] == "done", "UI stream by its SID: %d %r" % (st, evs[-2:]))
        # per-tenant counters, labelled by the tenant (tenant=, else the id derived under the secret),
        # never by a key or a key's name
        st, h, b = gw.request("GET", "/metrics")
        text = b.decode()
        check(st == 200 and "sk-" not in text and "key=" not in text, "metrics must not show keys")
        def val(name, tenant):
            for line in text.splitlines():
                if line.startswith('%s{tenant="%s"}' % (name, tenant)):
                    return float(line.split()[-1])
            raise AssertionError("%s{tenant=%s} missing:\n%s" % (name, tenant, text[-1500:]))
        check(val("smollm3_gateway_tenant_requests_total", "alice") == 2, "alice requests")
        check(val("smollm3_gateway_tenant_completion_tokens_total", "alice") == 5, "alice completion tokens")
        check(val("smollm3_gateway_tenant_prompt_tokens_total", "alice") > 0, "alice prompt tokens")
        check(val("smollm3_gateway_tenant_completion_tokens_total", "bob") >= 4, "bob completion tokens")
        anon = re.findall(r'smollm3_gateway_tenant_requests_total\{tenant="([0-9a-f]{32})"\} 1\n', text)
        check(len(anon) == 1, "a key without tenant=: its derived id (32 hex digits): %r" % anon)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=b, capture_output=True)
            check(r.returncode == 0, "promtool: %s" % (r.stdout + r.stderr).decode()[-500:])
    finally:
        gw.stop()
    # bad key files stop the gateway with a message
    secret = ["--tenant-secret-file", tg.tenant_secret(tmp)]
    for content, why in (("", "no key"), ("k1 a\nk1 b\n", "the same key"), ("k1 bad/name\n", "names are"),
                         ("k1 a extra\n", "expected"), ("k1 a limit=3\n", "unknown field 'limit='"),
                         ("k1 a tenant=bad/t\n", "tenant= takes"), ("k1 a tenant=\n", "tenant= takes")):
        with open(path, "w") as f:
            f.write(content)
        r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:0",
                            "--daemon", d.endpoint, "--api-key-file", path] + secret, capture_output=True, timeout=20)
        check(r.returncode == 1 and why in r.stderr.decode(), "key file %r: %d %s" % (content, r.returncode, r.stderr))
    r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:0",
                        "--daemon", d.endpoint, "--api-key-file", path + ".missing"] + secret,
                       capture_output=True, timeout=20)
    check(r.returncode == 1, "missing key file accepted")


def t_config_file(d, tmp):
    """--config FILE: the flags as key = value under [gateway] (api_key_file
    among them); the command line overrides the file; a bad file names its line."""
    keys = os.path.join(tmp, "conf-keys")
    with open(keys, "w") as f:
        f.write("sk-conf-1 conf tenant=conf\n")
    os.chmod(keys, 0o600)
    secret = tg.tenant_secret(tmp, "conf-secret")
    conf = os.path.join(tmp, "gateway.conf")
    with open(conf, "w") as f:
        f.write("# test\n[gateway]\napi_key_file = %s\ntenant_secret_file = %s\nmodel-name = from-conf\n"
                "max_inflight = 7\nignore_unknown_fields = true\n" % (keys, secret))
    # tenant_secret_file from the file
    gw = tg.Gateway(d.endpoint, tmp, ["--config", conf, "--model-name", "from-flag"], secret=False)
    try:
        st, h, b = gw.request("GET", "/v1/models")
        check(st == 401, "api_key_file from the config: no key -> %d" % st)
        auth = {"Authorization": "Bearer sk-conf-1"}
        st, h, b = gw.request("GET", "/v1/models", headers=auth)
        check(st == 200 and json.loads(b)["data"][0]["id"] == "from-flag",
              "--model-name on the command line overrides the file: %d %s" % (st, b[:200]))
        st, j = post(gw, "/v1/chat/completions", {"messages": msgs(), "max_tokens": 1, "frobnicate": 1}, headers=auth)
        check(st == 200, "ignore_unknown_fields = true from the file: %d %s" % (st, j))
        st, h, b = gw.request("GET", "/metrics")
        check(b'smollm3_gateway_tenant_requests_total{tenant="conf"}' in b, "per-tenant counter of the file's key")
    finally:
        gw.stop()
    for text, why in (("[gateway]\nmax_inflight = many\n", "bad value 'many' for --max-inflight in"),
                      ("[gateway]\nfrobnicate = 1\n", ":2: unknown key 'frobnicate'"),
                      ("max_inflight = 3\n", ":1: key 'max_inflight' outside section [gateway]"),
                      ("[gateway]\nignore_unknown_fields = yes\n", "expected true or false"),
                      ("[gateway]\napi_key_file = %s.missing\ntenant_secret_file = %s\n" % (keys, secret),
                       "No such file"),
                      ("[gateway]\napi_key_file = %s\n" % keys, "needs --tenant-secret-file")):
        with open(conf, "w") as f:
            f.write(text)
        r = subprocess.run([os.path.join(tg.ARGS.build, "bin/smollm3-gateway"), "--config", conf, "--listen",
                            "127.0.0.1:0", "--daemon", d.endpoint], capture_output=True, timeout=20)
        check(r.returncode != 0 and why in r.stderr.decode(), "config %r: exit %d, %s" % (text, r.returncode, r.stderr))


# ---- n > 1 ----------------------------------------------------------------------------------

def t_n_choices(gw, d):
    cl = client(gw)
    ne = {"chat_template_kwargs": {"enable_thinking": False}}
    prompt = msgs("Write a short poem about the sea, number %d" % os.getpid())    # not cached yet
    before = d.stats()
    r = cl.chat.completions.create(model="x", messages=prompt, n=4, max_tokens=6, temperature=1.0, seed=42,
                                   logprobs=True, extra_body=ne)
    after = d.stats()
    check([c.index for c in r.choices] == [0, 1, 2, 3], "choice indexes %r" % [c.index for c in r.choices])
    outs = [ids_of_choice(c) for c in r.choices]
    check(all(len(o) == 6 for o in outs) and r.usage.completion_tokens == 24, "4 x 6 tokens: %r %r" % (outs, r.usage))
    check(len({tuple(o) for o in outs}) > 1, "4 choices at temperature 1 all equal: %r" % outs)
    # prefilled once: the prompt ran through the model once, the other 3 choices shared its KV
    P = r.usage.prompt_tokens
    pre = after["prefill_tokens_total"] - before["prefill_tokens_total"]
    check(after["prompt_tokens_total"] - before["prompt_tokens_total"] == P, "prompt tokens counted %d times"
          % ((after["prompt_tokens_total"] - before["prompt_tokens_total"]) // max(P, 1)))
    check(pre == P - (after["cached_tokens_total"] - before["cached_tokens_total"]) and pre <= P,
          "prefill ran %d positions for a %d-token prompt" % (pre, P))
    check(after["shared_choices_total"] - before["shared_choices_total"] == 3, "shared choices %d"
          % (after["shared_choices_total"] - before["shared_choices_total"]))
    check(after["requests_total"] - before["requests_total"] == 1, "one request")
    print("   n=4: prompt of %d tokens, %d positions prefilled, 3 choices on shared KV" % (P, pre), flush=True)
    # choice i samples with seed + i: the same tokens as n=1 with that seed
    for i in range(4):
        one = cl.chat.completions.create(model="x", messages=prompt, max_tokens=6, temperature=1.0, seed=42 + i,
                                         logprobs=True, extra_body=ne)
        check(ids_of_choice(one.choices[0]) == outs[i], "choice %d != seed %d alone: %r vs %r"
              % (i, 42 + i, outs[i], ids_of_choice(one.choices[0])))
    # streaming: chunks of every index, a finish per choice, one usage, one [DONE]
    st, h, chunks = tg.read_stream(gw, {"messages": prompt, "n": 3, "max_tokens": 4, "temperature": 1.0,
                                        "seed": 1, "stream": True, "stream_options": {"include_usage": True}})
    cs = tg.openai_chunks(b"".join(c for _, c in chunks))
    text = {0: "", 1: "", 2: ""}
    fins = {}
    for c in cs:
        for ch in c["choices"]:
            text[ch["index"]] += ch["delta"].get("content") or ""
            if ch["finish_reason"]:
                fins[ch["index"]] = ch["finish_reason"]
    check(sorted(fins) == [0, 1, 2] and cs[-1]["usage"]["completion_tokens"] == 12, "stream n=3: %r %r"
          % (fins, cs[-1].get("usage")))
    # completions: n choices too
    rc = cl.completions.create(model="x", prompt="Once upon a time", n=2, max_tokens=3, temperature=1.0, seed=9)
    check([c.index for c in rc.choices] == [0, 1] and rc.usage.completion_tokens == 6, "completions n=2 %r" % rc)
    # refused: n with a session, n above the limit
    expect_400(lambda: cl.chat.completions.create(model="x", messages=prompt, n=2, max_tokens=2,
                                                  extra_body={"session_id": "n-sess"}), "n")
    expect_400(lambda: cl.chat.completions.create(model="x", messages=prompt, n=17, max_tokens=2), "n")


# A GBNF grammar that makes even the fixture model answer with a tool call in
# SmolLM3's text form (the engine's parser turns it into a ToolCall), with a
# city each choice samples, or a plain answer.
CALL_GBNF = ('root ::= call | "No tool needed."\n'
             'call ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" city '
             '"\\"}}\\n</tool_call>"\n'
             'city ::= "Paris" | "Rome" | "Oslo" | "Lima"')


def t_n_tool_calls(gw, d):
    """n > 1 with tool calls: each choice its own calls (ids unique), its own
    finish_reason, streamed under its index; choice i = seed + i alone."""
    cl = client(gw)
    kw = dict(model="x", messages=msgs("What is the weather?"), tools=[TOOL], max_tokens=60, temperature=1.0,
              extra_body={"grammar": CALL_GBNF, "chat_template_kwargs": {"enable_thinking": False}})

    def outcome(c):         # (finish, [(name, arguments)], content) of one choice
        m = c.message
        calls = [(t.function.name, json.loads(t.function.arguments)) for t in (m.tool_calls or [])]
        return c.finish_reason, calls, m.content or ""

    # a seed whose 4 choices mix calls and a plain answer (seeds are deterministic)
    for seed in range(1, 40):
        r = cl.chat.completions.create(n=4, seed=seed, **kw)
        outs = [outcome(c) for c in r.choices]
        if len({o[0] for o in outs}) == 2:
            break
    check(len({o[0] for o in outs}) == 2, "no seed in 1..39 mixed tool calls and text: %r" % outs)
    for i, (fin, calls, content) in enumerate(outs):
        if fin == "tool_calls":
            check(len(calls) == 1 and calls[0][0] == "get_weather" and
                  calls[0][1]["city"] in ("Paris", "Rome", "Oslo", "Lima") and content == "",
                  "choice %d: %r" % (i, outs[i]))
        else:
            check(fin == "stop" and not calls and content == "No tool needed.", "choice %d: %r" % (i, outs[i]))
    ids = [t.id for c in r.choices for t in (c.message.tool_calls or [])]
    check(len(ids) == len(set(ids)) and all(ids), "tool call ids not unique: %r" % ids)
    # choice i samples with seed + i
    for i in range(4):
        one = cl.chat.completions.create(n=1, seed=seed + i, **kw)
        check(outcome(one.choices[0]) == outs[i], "choice %d != seed %d alone: %r vs %r"
              % (i, seed + i, outs[i], outcome(one.choices[0])))
    # streamed: every index gets its own tool-call deltas and finish
    calls, fins, text = {}, {}, {}
    for ch in cl.chat.completions.create(n=4, seed=seed, stream=True, **kw):
        for c in ch.choices:
            for t in c.delta.tool_calls or []:
                calls.setdefault(c.index, []).append((t.function.name, json.loads(t.function.arguments)))
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                fins[c.index] = c.finish_reason
    got = [(fins.get(i), calls.get(i, []), text.get(i, "")) for i in range(4)]
    check(got == outs, "streamed n=4 %r != non-streamed %r" % (got, outs))
    print("   n=4 seed %d: %s" % (seed, ["%s %s" % (f, c[0][1]["city"] if c else t) for f, c, t in outs]), flush=True)


FORCED_TOOLS = [
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


def t_tool_choice_forced(gw, d):
    """tool_choice "required" (any tools, one or more calls) and
    {"type": "function", "function": {"name": "add"}} (exactly one call to
    it): on random weights at T=1.5 the answer is always tool calls whose
    arguments validate against the tool's parameters, finish_reason
    "tool_calls", and the streamed calls equal the non-streamed ones."""
    import jsonschema
    cl = client(gw)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in FORCED_TOOLS}
    base = dict(model="x", messages=msgs("What is the weather in Paris, and 2 + 3?"), tools=FORCED_TOOLS,
                max_tokens=300, temperature=1.5, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    for choice, named in (("required", None), ({"type": "function", "function": {"name": "add"}}, "add")):
        for seed in (1, 2, 3, 4):
            r = cl.chat.completions.create(seed=seed, tool_choice=choice, **base)
            c = r.choices[0]
            calls = [(t.function.name, json.loads(t.function.arguments)) for t in (c.message.tool_calls or [])]
            check(c.finish_reason == "tool_calls" and calls and not (c.message.content or "").strip(),
                  "%r seed %d: finish %s, calls %r, content %r" % (choice, seed, c.finish_reason, calls,
                                                                   c.message.content))
            check(named is None or (len(calls) == 1 and calls[0][0] == named), "named %s: %r" % (named, calls))
            for name, args in calls:
                check(name in params, "unknown tool %r" % name)
                jsonschema.validate(args, params[name])
            streamed, fin = [], None
            for ch in cl.chat.completions.create(seed=seed, tool_choice=choice, stream=True, **base):
                for sc in ch.choices:
                    for t in sc.delta.tool_calls or []:
                        streamed.append((t.function.name, json.loads(t.function.arguments)))
                    fin = sc.finish_reason or fin
            check(streamed == calls and fin == "tool_calls", "streamed %r %s != %r" % (streamed, fin, calls))
    print("   last calls: %r" % calls, flush=True)


SMOLLM2 = os.path.join(tg.ROOT, "build/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def daemon_error(endpoint, gen):
    """Sends one GenerateRequest (a dict of its fields) straight to the daemon: its Error event."""
    import zmq
    sys.path.insert(0, tg.ARGS.pb2_dir or "")
    import smollm3_pb2 as pb2
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    try:
        req = pb2.Request(protocol_version=1, request_id=77)
        g = req.generate
        g.max_tokens = 2
        if gen.pop("chat", True):
            g.chat.messages.add(role="user", content="Hi")
        for k, v in gen.items():
            if k == "tools_json":
                g.chat.tools_json = v
            else:
                setattr(g, k, v)
        s.send(req.SerializeToString())
        check(s.poll(30000), "no answer from the daemon")
        ev = pb2.Event()
        ev.ParseFromString(s.recv())
        check(ev.WhichOneof("kind") == "error", "the daemon accepted %r: %s" % (gen, ev))
        return ev.error
    finally:
        s.close()
        ctx.term()


def t_param_named(gw, d):
    """An error about one field names it in "param" (OpenAI's error shape), the daemon's refusals
    too (Error.param): tools on a model whose template has none (SmolLM2-135M, `make run`'s
    default) -> param "tools", with the way to try tools (SmolLM3-3B, make model / MODEL=);
    tool_choice on a vocabulary without <tool_call> -> "tool_choice"; a logit_bias token outside
    the vocabulary (the fixture) -> "logit_bias"."""
    if not os.path.exists(SMOLLM2):
        raise Skip("%s missing (tests/get_smollm2.sh; make test fetches it)" % SMOLLM2)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    # the fixture's daemon (SmolLM3's template): a field only the daemon can judge
    st, j = post(gw, "/v1/chat/completions", dict(messages=msgs(), max_tokens=2, logit_bias={"999999": 1}))
    check(st == 400 and j["error"]["param"] == "logit_bias" and "vocabulary" in j["error"]["message"],
          "logit_bias outside the vocabulary: %d %r" % (st, j))
    e = daemon_error(d.endpoint, {"chat": False})
    check(e.param == "" and "no input" in e.message, "a refusal about no one field names none: %r" % e)
    tmp = tempfile.mkdtemp(prefix="smollm3-param-")
    d2 = g2 = None
    try:
        d2 = tg.Daemon(os.path.join(tmp, "d2.sock"), model=SMOLLM2)
        g2 = tg.Gateway(d2.endpoint, tmp)
        hint = "serve SmolLM3-3B: `make model` then `make run`, or MODEL=path to a SmolLM3 GGUF"
        for choice in ("auto", None):
            body = dict(messages=msgs(), max_tokens=2, tools=[tool])
            if choice:
                body["tool_choice"] = choice
            st, j = post(g2, "/v1/chat/completions", body)
            check(st == 400 and j["error"]["param"] == "tools" and hint in j["error"]["message"] and
                  j["error"]["message"].startswith("tools: the smollm2 chat template does not support tools"),
                  "tools on SmolLM2 (tool_choice %s): %d %r" % (choice, st, j))
        # the Responses API: the same refusal, the same field
        st, j = post(g2, "/v1/responses", dict(input="Hi", max_output_tokens=16,
                                               tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}]))
        check(st == 400 and j["error"]["param"] == "tools" and hint in j["error"]["message"],
              "responses tools on SmolLM2: %d %r" % (st, j))
        # tool_choice "none": the tools are left out, the request is served
        st, j = post(g2, "/v1/chat/completions", dict(messages=msgs(), max_tokens=2, tools=[tool], tool_choice="none"))
        check(st == 200, "tool_choice none on SmolLM2: %d %r" % (st, j))
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            st, j = post(g2, "/v1/chat/completions", dict(messages=msgs(), max_tokens=2, tools=[tool], tool_choice=choice))
            check(st == 400 and j["error"]["param"] == "tool_choice" and "SmolLM3-3B" in j["error"]["message"],
                  "tool_choice %r on SmolLM2: %d %r" % (choice, st, j))
        # straight to the daemon (ZeroMQ): Error.param carries the field
        e = daemon_error(d2.endpoint, {"tools_json": json.dumps([tool])})
        check(e.param == "tools" and hint in e.message, "daemon: %r" % e)
        e = daemon_error(d2.endpoint, {"tools_json": json.dumps([tool]), "tool_choice": "required"})
        check(e.param == "tool_choice", "daemon tool_choice: %r" % e)
    finally:
        if g2:
            g2.stop()
        if d2:
            d2.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def ids_of_choice(c):
    return [e.model_extra["id"] for e in c.logprobs.content]


# ---- main ------------------------------------------------------------------------------

def main():
    want = tg.suite_args()
    with tg.Suite("smollm3-api-test-") as st:
        # the verify step's cost assumed, not measured at start: measured on a loaded machine it
        # can make drafting look unprofitable, and t_prediction's exact counts need the drafts
        st.d = tg.Daemon(os.path.join(st.tmp, "d.sock"), extra=["--speculative-calibrate=false"])
        st.gw = tg.Gateway(st.d.endpoint, st.tmp)
        for name, fn in (("field_walk", t_field_walk), ("sampling_effects", t_sampling_effects),
                         ("logprobs", t_logprobs), ("completions", t_completions), ("tokenize", t_tokenize),
                         ("models", t_models), ("n_choices", t_n_choices), ("n_tool_calls", t_n_tool_calls),
                         ("tool_choice_forced", t_tool_choice_forced), ("prediction", t_prediction), ("curl", t_curl),
                         ("langchain_stream", t_langchain_stream), ("param_named", t_param_named)):
            if want(name):
                run_test(name, fn, st.gw, st.d)
        for name, fn in (("ignore_unknown", t_ignore_unknown), ("api_keys", t_api_keys),
                         ("config_file", t_config_file)):
            if want(name):
                run_test(name, fn, st.d, st.tmp)
        st.gw.stop()
        st.gw = None
        st.d.stop()
        st.d = None
        if want("langchain_tools"):
            try:
                import zmq  # noqa: F401
                sys.path.insert(0, tg.ARGS.pb2_dir or "")
                import smollm3_pb2 as pb2
            except ImportError as e:
                print("SKIPPED langchain_tools: %s" % e, flush=True)
                pb2 = None
            if pb2:
                fd = tg.FakeDaemon(os.path.join(st.tmp, "fake.sock"), pb2)
                st.gw = tg.Gateway(fd.endpoint, st.tmp)
                run_test("langchain_tools", t_langchain_tools, st.gw, fd)
                st.gw.stop()
                st.gw = None
                fd.close()
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
