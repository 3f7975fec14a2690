#!/usr/bin/env python3
"""Anthropic's Messages API on smollm3-gateway (POST /v1/messages,
POST /v1/messages/count_tokens), driven by the official `anthropic` SDK and
langchain-anthropic.

* Every field of the installed SDK's MessageCreateParams and
  MessageCountTokensParams is classified here as honoured, metadata or
  refused and sent through the SDK: honoured and metadata fields answer 200,
  refused ones a 400 in Anthropic's error shape naming the field.  A field
  the SDK gains that this table does not know fails the test.
* messages.create (non-streaming) and messages.stream (text_stream,
  get_final_message) give the same text; the raw SSE has exactly the event
  sequence the SDK parses (message_start, ping, content_block_*,
  message_delta, message_stop); the text equals what /v1/chat/completions
  answers for the same conversation at temperature 0.
* count_tokens equals the prompt the same request runs (usage.input_tokens +
  cache_read_input_tokens) and the chat endpoint's prompt_tokens for the
  equivalent chat conversation, tools and tool round trips included (the
  same internal chat messages, the same template).
* tool_choice any / tool: tool_use blocks whose input validates against
  input_schema (jsonschema), stop_reason tool_use, streamed = non-streamed,
  the same call the chat endpoint's tool_choice "required" gives.
* stop_sequences, thinking (the template's thinking mode; thinking blocks
  and thinking_delta from a scripted daemon), x-api-key and Bearer auth,
  errors (401 authentication_error, 429 rate_limit_error, an error event
  mid-stream), langchain-anthropic (stream, invoke, tools).

Reuses the process helpers of test_gateway.py.  Prints "ok NAME" /
"FAIL NAME: why" and "N passed, N failed" last.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gateway as tg  # noqa: E402
from test_gateway import Skip, check, run_test, RESULTS  # noqa: E402

NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
GREEDY = {"temperature": 0}

WEATHER = {"name": "get_weather", "description": "Current weather in a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12},
               "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}
ADD = {"name": "add", "description": "Adds two integers.",
       "input_schema": {"type": "object", "properties": {
           "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
           "b": {"type": "integer", "minimum": -1000, "maximum": 1000}}, "required": ["a", "b"]}}


def sdk():
    try:
        import anthropic
        return anthropic
    except ImportError as e:
        raise Skip("anthropic SDK missing (tests/requirements-api.txt): %s" % e)


def client(gw, api_key="none", **kw):
    return sdk().Anthropic(base_url=gw.url(), api_key=api_key, max_retries=0, timeout=60, **kw)


def user(text):
    return [{"role": "user", "content": text}]


post = tg.post_json


def as_openai_tool(t):
    """The chat endpoint's form of an Anthropic tool (what the gateway converts it to)."""
    fn = {"name": t["name"]}
    if "description" in t:
        fn["description"] = t["description"]
    fn["parameters"] = t["input_schema"]
    return {"type": "function", "function": fn}


def chat_prompt_tokens(gw, messages, tools=None):
    body = {"messages": messages, "max_tokens": 1, "temperature": 0}
    body.update(NO_THINK)
    if tools:
        body["tools"] = [as_openai_tool(t) for t in tools]
    st, j = post(gw, "/v1/chat/completions", body)
    check(st == 200, "chat: %d %r" % (st, j))
    return j["usage"]["prompt_tokens"]


def anthropic_error(e, status, etype, field=None):
    """e: an APIStatusError; checks the status and Anthropic's error shape."""
    body = e.body if isinstance(e.body, dict) else {}
    check(e.status_code == status and body.get("type") == "error" and
          body.get("error", {}).get("type") == etype and isinstance(body["error"].get("message"), str),
          "expected %d %s, got %d %r" % (status, etype, e.status_code, e.body))
    if field:
        check(field in body["error"]["message"], "the 400 does not name %r: %r" % (field, body))


def expect_400(fn, field):
    anthropic = sdk()
    try:
        fn()
    except anthropic.BadRequestError as e:
        anthropic_error(e, 400, "invalid_request_error", field)
        return
    raise AssertionError("%s was accepted" % field)


# ---- the field table ----------------------------------------------------------------

# field -> a value the service honours (the request answers 200)
HONOURED = {
    "messages": None, "model": "any-name", "max_tokens": 3, "stream": True, "stop_sequences": ["\n\n"],
    "system": [{"type": "text", "text": "Be brief."}], "thinking": {"type": "disabled"},
    "tool_choice": {"type": "auto"}, "tools": [WEATHER], "service_tier": "auto", "speed": "standard",
    "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
}
# field -> value: accepted, changes nothing (documented as metadata)
METADATA = {
    "metadata": {"user_id": "user-1"}, "cache_control": {"type": "ephemeral"}, "inference_geo": "us",
    "user_profile_id": "up_1", "workspace_id": "ws_1",
}
# field -> a value: 400 naming the field
REFUSED = {
    "container": "container_1", "diagnostics": {"previous_message_id": None},
}
# honoured fields with a value the service does not do: 400 naming the field
REFUSED_VALUES = [
    ("tool_choice", {"type": "any"}),                               # without tools
    ("tool_choice", {"type": "tool", "name": "nope"}),
    ("tool_choice", {"type": "sometimes"}),
    ("thinking", {"type": "between_tools"}),
    ("thinking", {"type": "enabled", "budget_tokens": 3}),          # not below max_tokens (3)
    ("thinking", {"type": "enabled", "budget_tokens": 1, "display": "verbose"}),
    ("speed", "fast"), ("service_tier", "priority"),
    ("stop_sequences", ["a", "b", "c", "d", "e", "f", "g", "h", "i"]), ("stop_sequences", [""]),
    ("output_config", {"format": {"type": "xml"}}), ("output_config", {"effort": "extreme"}),
    ("tools", [{"type": "web_search_20250305", "name": "web_search"}]),
    ("tools", [{"name": "not a name!", "input_schema": {"type": "object"}}]),
    ("tools", [{"name": "f"}]),
    ("metadata", {"user_id": "u", "tenant": "t"}),
    ("system", [{"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]),
]


def sdk_fields(cls_names, module):
    names = set()
    for n in cls_names:
        cls = getattr(module, n)
        for c in cls.__mro__:
            names |= set(getattr(c, "__annotations__", {}))
    return names


def t_field_walk(gw, d):
    anthropic = sdk()
    from anthropic.types import message_create_params as mcp, message_count_tokens_params as mctp
    fields = sdk_fields(["MessageCreateParamsNonStreaming", "MessageCreateParamsStreaming"], mcp)
    check(len(fields) >= 15, "only %d SDK fields found: %r" % (len(fields), sorted(fields)))
    table = set(HONOURED) | set(METADATA) | set(REFUSED)
    unknown = fields - table
    check(not unknown, "SDK fields the test (and the gateway) do not classify: %s" % sorted(unknown))
    cl = client(gw)
    base = dict(model="x", messages=user("Hello!"), max_tokens=3)
    for f in sorted(fields):
        if f in ("messages", "model", "max_tokens"):
            continue
        kw = dict(base)
        if f in HONOURED or f in METADATA:
            kw[f] = HONOURED[f] if f in HONOURED else METADATA[f]
            r = cl.messages.create(**kw)
            if kw.get("stream"):
                evs = [e.type for e in r]
                check(evs[0] == "message_start" and evs[-1] == "message_stop", "%s: events %r" % (f, evs))
            else:
                check(r.type == "message" and r.stop_reason in ("max_tokens", "end_turn", "stop_sequence"),
                      "%s: %r" % (f, r))
        else:
            kw[f] = REFUSED[f]
            expect_400(lambda: cl.messages.create(**kw), f)
    for f, v in REFUSED_VALUES:
        kw = dict(base)
        kw[f] = v
        expect_400(lambda: cl.messages.create(**kw), f)
    # count_tokens: its own field list, every one known to the endpoint
    cfields = sdk_fields(["MessageCountTokensParams"], mctp)
    check(not cfields - table, "count_tokens fields not classified: %s" % sorted(cfields - table))
    for f in sorted(cfields - {"messages", "model"}):
        v = HONOURED.get(f, METADATA.get(f))
        n = cl.messages.count_tokens(model="x", messages=user("Hello!"), **{f: v}).input_tokens
        check(n > 0, "count_tokens with %s: %d" % (f, n))
    # fields of the create call only are unknown to count_tokens
    st, j = post(gw, "/v1/messages/count_tokens", {"messages": user("Hi"), "max_tokens": 5})
    check(st == 400 and "max_tokens" in j["error"]["message"], "count_tokens with max_tokens: %d %r" % (st, j))
    # sampling extensions the 2.x SDK no longer types (langchain sends them in extra_body): checked
    for extra, field in (({"temperature": 1.5}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_k": -1}, "top_k"),
                         ({"frobnicate": 1}, "frobnicate")):
        expect_400(lambda: cl.messages.create(extra_body=extra, **base), field)
    # blocks: unknown fields, images, misplaced blocks, prefill, tool results' shape
    bad_messages = [
        ([{"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}], "colour"),
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                     "data": "AAAA"}}]}], "image"),
        ([{"role": "user", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}], "tool_use"),
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}], "prefill"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": ""}]}], "tool_use_id"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}],
         "is_error"),
        ([{"role": "user", "content": "Hi", "name": "bob"}], "name"),
        ([{"role": "robot", "content": "Hi"}], "role"),
        ([{"role": "user", "content": 42}], "content"),
    ]
    for m, field in bad_messages:
        expect_400(lambda: cl.messages.create(model="x", max_tokens=2, messages=m), field)
    # max_tokens is required (the SDK requires it too: raw HTTP)
    st, j = post(gw, "/v1/messages", {"model": "x", "messages": user("Hi")})
    check(st == 400 and j == {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "'max_tokens' is required"}},
          "max_tokens missing: %d %r" % (st, j))
    st, j = post(gw, "/v1/messages", b"{not json")
    check(st == 400 and j["type"] == "error" and j["error"]["type"] == "invalid_request_error", "bad JSON %r" % j)
    # wrong method and not found in Anthropic's shape
    st, h, b = gw.request("GET", "/v1/messages")
    j = json.loads(b)
    check(st == 405 and j["type"] == "error", "GET /v1/messages: %d %s" % (st, b))


def t_ignore_unknown(d, tmp):
    gw = tg.Gateway(d.endpoint, tmp, ["--ignore-unknown-fields"])
    try:
        st, j = post(gw, "/v1/messages", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi", "colour": "red"}], "name": "x"}], "max_tokens": 2, "frobnicate": 1})
        check(st == 200 and j["type"] == "message", "unknown fields not ignored: %d %r" % (st, j))
        st, j = post(gw, "/v1/messages", {"messages": user("hi"), "max_tokens": 2, "container": "c"})
        check(st == 400 and "container" in j["error"]["message"], "refused field ignored: %d %r" % (st, j))
    finally:
        gw.stop()


# ---- create, stream, SSE ---------------------------------------------------------------

def t_create_and_stream(gw, d):
    cl = client(gw)
    kw = dict(model="x", max_tokens=8, messages=user("Tell me a story"), extra_body=GREEDY)
    r = cl.messages.create(**kw)
    check(r.id.startswith("msg_") and len(r.id) == 28 and r.type == "message" and r.role == "assistant",
          "message %r" % r)
    st, h, b = gw.request("GET", "/v1/models")
    check(r.model == json.loads(b)["data"][0]["id"], "model %r" % r.model)
    check(len(r.content) == 1 and r.content[0].type == "text" and r.content[0].text, "content %r" % r.content)
    check(r.stop_reason == "max_tokens" and r.stop_sequence is None and r.usage.output_tokens == 8,
          "stop / usage %r" % r)
    text = r.content[0].text
    # the same conversation through the chat endpoint: the same prompt, the same greedy text
    st, j = post(gw, "/v1/chat/completions", dict(messages=user("Tell me a story"), max_tokens=8, temperature=0,
                                                  **NO_THINK))
    check(j["choices"][0]["message"]["content"] == text, "chat %r vs messages %r"
          % (j["choices"][0]["message"]["content"], text))
    check(r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == j["usage"]["prompt_tokens"],
          "input tokens %r vs chat prompt %d" % (r.usage, j["usage"]["prompt_tokens"]))
    # messages.stream: text_stream and get_final_message
    with cl.messages.stream(**kw) as s:
        parts = list(s.text_stream)
        final = s.get_final_message()
    check(len(parts) >= 2 and "".join(parts) == text, "text_stream %r vs %r" % (parts, text))
    check(final.content[0].text == text and final.stop_reason == "max_tokens" and final.usage.output_tokens == 8 and
          final.id.startswith("msg_"), "final message %r" % final)
    # create(stream=True): the typed events
    evs = list(cl.messages.create(stream=True, **kw))
    types = [e.type for e in evs]
    check(types[0] == "message_start" and types[1] == "content_block_start" and types[-3:] ==
          ["content_block_stop", "message_delta", "message_stop"] and
          set(types[2:-3]) == {"content_block_delta"}, "event types %r" % types)
    check(evs[0].message.usage.output_tokens == 0 and evs[-2].usage.output_tokens == 8 and
          evs[-2].delta.stop_reason == "max_tokens", "usage in events %r %r" % (evs[0], evs[-2]))
    # the raw SSE: framing, event names = data types, a ping after message_start
    st, h, chunks = tg.read_stream(gw, {"model": "x", "max_tokens": 4, "messages": user("Hi"), "stream": True},
                                   path="/v1/messages")
    check(st == 200 and h.get("content-type") == "text/event-stream", "SSE %d %r" % (st, h))
    raw = tg.sse_events(b"".join(c for _, c in chunks))
    names = [k for k, _ in raw]
    check(all(json.loads(v)["type"] == k for k, v in raw), "event name != data type: %r" % raw)
    check(names[:3] == ["message_start", "ping", "content_block_start"] and names[-1] == "message_stop",
          "raw events %r" % names)
    start = json.loads(raw[0][1])["message"]
    check(start["content"] == [] and start["stop_reason"] is None and start["role"] == "assistant",
          "message_start %r" % start)


def t_count_tokens(gw, d):
    cl = client(gw)
    system = "You are terse."
    msgs = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]},
            {"role": "user", "content": [{"type": "text", "text": "Please"}, {"type": "text", "text": "do."}]}]
    for tools in (None, [WEATHER, ADD]):
        extra = {"tools": tools} if tools else {}
        n = cl.messages.count_tokens(model="x", system=system, messages=msgs, **extra).input_tokens
        r = cl.messages.create(model="x", system=system, messages=msgs, max_tokens=1, **extra)
        total = r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
        check(n == total, "count_tokens %d, the request's prompt %d (%r)" % (n, total, r.usage))
        # count_tokens prefilled nothing it keeps... but the create after it may reuse the prefix
        chat = [{"role": "system", "content": system}, {"role": "user", "content": msgs[0]["content"]},
                {"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "Please\n\ndo."}]
        c = chat_prompt_tokens(gw, chat, tools)
        check(n == c, "count_tokens %d, the chat endpoint's prompt for the same conversation %d" % (n, c))
    # tool_choice none: the tools are not rendered
    none = cl.messages.count_tokens(model="x", messages=user("Hi"), tools=[WEATHER],
                                    tool_choice={"type": "none"}).input_tokens
    plain = cl.messages.count_tokens(model="x", messages=user("Hi")).input_tokens
    auto = cl.messages.count_tokens(model="x", messages=user("Hi"), tools=[WEATHER]).input_tokens
    check(none == plain < auto, "tool_choice none: plain %d none %d auto %d" % (plain, none, auto))
    # a system turn in messages joins the system prompt
    a = cl.messages.count_tokens(model="x", system="Be kind.", messages=user("Hi")).input_tokens
    b = cl.messages.count_tokens(model="x", messages=[{"role": "system", "content": "Be kind."}] + user("Hi"))
    check(a == b.input_tokens, "system turn %d vs system %d" % (b.input_tokens, a))
    # the count is not a generation: one token at most (the request is cancelled at `started`)
    before = d.stats()
    cl.messages.count_tokens(model="x", messages=user("Count me %d" % os.getpid()))
    after = d.stats()
    check(after["generated_tokens_total"] - before["generated_tokens_total"] <= 1,
          "count_tokens generated %d tokens" % (after["generated_tokens_total"] - before["generated_tokens_total"]))


def t_sampling(gw, d):
    cl = client(gw)
    kw = dict(model="x", max_tokens=8, messages=user("Once upon a time"))
    g = cl.messages.create(extra_body={"temperature": 0}, **kw).content[0].text
    check(cl.messages.create(extra_body={"temperature": 0}, **kw).content[0].text == g, "greedy not reproducible")
    # top_k 1 and a tiny top_p leave only the best token: greedy again at temperature 1
    check(cl.messages.create(extra_body={"temperature": 1, "top_k": 1}, **kw).content[0].text == g, "top_k 1")
    check(cl.messages.create(extra_body={"temperature": 1, "top_p": 1e-6}, **kw).content[0].text == g, "top_p")
    draws = {cl.messages.create(extra_body={"temperature": 1}, **kw).content[0].text for _ in range(4)}
    check(draws != {g}, "temperature 1 draws are all greedy")


def t_stop_sequences(gw, d):
    cl = client(gw)
    kw = dict(model="x", max_tokens=12, messages=user("Tell me a story"), extra_body=GREEDY)
    text = cl.messages.create(**kw).content[0].text
    # (a stop that starts with a letter: the model's leading whitespace, which the answer drops, cannot hold it)
    cut = next((text[i:i + 3] for i in range(len(text) // 2, len(text) - 3) if not text[i].isspace()), None)
    check(cut, "no stop string in %r" % text)
    r = cl.messages.create(stop_sequences=["\x01never", cut], **kw)
    out = r.content[0].text if r.content else ""
    # cut at its first occurrence, never emitted (the text's trailing whitespace is trimmed)
    check(r.stop_reason == "stop_sequence" and r.stop_sequence == cut and cut not in out and
          out.rstrip() == text[:text.index(cut)].rstrip(), "stop %r in %r: %r %r %r"
          % (cut, text, r.stop_reason, r.stop_sequence, out))
    with cl.messages.stream(stop_sequences=[cut], **kw) as s:
        streamed = "".join(s.text_stream)
        f = s.get_final_message()
    check(streamed == out and f.stop_reason == "stop_sequence" and f.stop_sequence == cut,
          "streamed stop %r %r" % (streamed, f))


def t_tool_use(gw, d):
    import jsonschema
    cl = client(gw)
    tools = [WEATHER, ADD]
    schemas = {t["name"]: t["input_schema"] for t in tools}
    q = user("What is the weather in Paris, and 2 + 3?")
    base = dict(model="x", max_tokens=300, messages=q, tools=tools)
    # greedy: the same call the chat endpoint's tool_choice "required" makes, arguments byte for byte
    r = cl.messages.create(tool_choice={"type": "any"}, extra_body=GREEDY, **base)
    st, j = post(gw, "/v1/chat/completions", dict(messages=q, max_tokens=300, temperature=0, tool_choice="required",
                                                  tools=[as_openai_tool(t) for t in tools], **NO_THINK))
    calls = j["choices"][0]["message"]["tool_calls"]
    uses = [b for b in r.content if b.type == "tool_use"]
    check(r.stop_reason == "tool_use" and uses and not any(b.type == "text" and b.text.strip() for b in r.content),
          "any: %r" % r)
    check([(u.name, u.input, u.id) for u in uses] ==
          [(c["function"]["name"], json.loads(c["function"]["arguments"]), u.id) for c, u in zip(calls, uses)] and
          len(calls) == len(uses), "messages %r vs chat %r" % (uses, calls))
    # (chat's arguments are the model's own bytes, which may be compact JSON; a tool_use block
    # carries only the object, re-serialised in json.dumps form when it comes back in history:
    # daemon/text/README.md, "tool history round-trips")
    # sampled (temperature 1): always valid calls; "tool" -> exactly one call of it; streamed too
    for choice, named in (({"type": "any"}, None), ({"type": "tool", "name": "add"}, "add"),
                          ({"type": "tool", "name": "add", "disable_parallel_tool_use": True}, "add")):
        for _ in range(2):
            r = cl.messages.create(tool_choice=choice, extra_body={"temperature": 1}, **base)
            uses = [b for b in r.content if b.type == "tool_use"]
            check(r.stop_reason == "tool_use" and uses, "%r: %r" % (choice, r))
            check(named is None or (len(uses) == 1 and uses[0].name == named), "named %s: %r" % (named, uses))
            for u in uses:
                jsonschema.validate(u.input, schemas[u.name])
        with cl.messages.stream(tool_choice=choice, extra_body={"temperature": 1}, **base) as s:
            f = s.get_final_message()
        uses = [b for b in f.content if b.type == "tool_use"]
        check(f.stop_reason == "tool_use" and uses and (named is None or [u.name for u in uses] == [named]),
              "streamed %r" % f)
        for u in uses:
            jsonschema.validate(u.input, schemas[u.name])
    # the round trip: the assistant's tool_use blocks and the results go back; the prompt is the chat
    # endpoint's prompt for the same conversation (assistant tool_calls + tool messages)
    r = cl.messages.create(tool_choice={"type": "any"}, extra_body=GREEDY, **base)
    uses = [b for b in r.content if b.type == "tool_use"]
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": "result %d" % i, "is_error": i == 1}
               for i, u in enumerate(uses)]
    convo = q + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                 {"role": "user", "content": results + [{"type": "text", "text": "Thanks. Summarise."}]}]
    r2 = cl.messages.create(model="x", max_tokens=4, messages=convo, tools=tools)
    check(r2.type == "message", "turn 2 %r" % r2)
    n2 = cl.messages.count_tokens(model="x", messages=convo, tools=tools).input_tokens
    chat = q + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": u.id, "type": "function", "function": {"name": u.name,
                                                      "arguments": json.dumps(u.input, ensure_ascii=False)}}
        for u in uses]}]
    chat += [{"role": "tool", "tool_call_id": u.id, "name": u.name,
              "content": ("Error: " if i == 1 else "") + "result %d" % i} for i, u in enumerate(uses)]
    chat += [{"role": "user", "content": "Thanks. Summarise."}]
    c2 = chat_prompt_tokens(gw, chat, tools)
    check(n2 == c2, "round trip: count_tokens %d, chat prompt %d" % (n2, c2))
    print("   %d call(s): %s" % (len(uses), [(u.name, u.input) for u in uses]), flush=True)


def t_thinking(gw, d):
    cl = client(gw)
    on = cl.messages.count_tokens(model="x", messages=user("Hi"),
                                  thinking={"type": "enabled", "budget_tokens": 1024}).input_tokens
    off = cl.messages.count_tokens(model="x", messages=user("Hi")).input_tokens
    off2 = cl.messages.count_tokens(model="x", messages=user("Hi"), thinking={"type": "disabled"}).input_tokens
    check(on != off and off == off2, "thinking: enabled %d, absent %d, disabled %d" % (on, off, off2))
    # the chat endpoint in thinking mode renders the same prompt
    st, j = post(gw, "/v1/chat/completions", {"messages": user("Hi"), "max_tokens": 1, "reasoning_effort": "high"})
    check(j["usage"]["prompt_tokens"] == on, "chat thinking prompt %d vs %d" % (j["usage"]["prompt_tokens"], on))
    r = cl.messages.create(model="x", max_tokens=6, messages=user("Hi"), thinking={"type": "enabled",
                                                                                   "budget_tokens": 4})
    check(r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == on and r.usage.output_tokens == 6,
          "thinking request %r" % r.usage)
    # a thinking block in history is accepted (its signature ignored)
    convo = user("Hi") + [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "redacted_thinking", "data": "x"},
        {"type": "text", "text": "Hello."}]}] + user("Again")
    check(cl.messages.create(model="x", max_tokens=2, messages=convo).type == "message", "thinking history")


# ---- API keys --------------------------------------------------------------------------

def t_api_keys(d, tmp):
    anthropic = sdk()
    path = os.path.join(tmp, "an-keys")
    with open(path, "w") as f:
        f.write("sk-ant-good alice tenant=alice\n")
    os.chmod(path, 0o600)
    gw = tg.Gateway(d.endpoint, tmp, ["--api-key-file", path])
    try:
        r = client(gw, api_key="sk-ant-good").messages.create(model="x", max_tokens=2, messages=user("Hi"))
        check(r.usage.output_tokens == 2, "x-api-key accepted")
        n = client(gw, api_key="sk-ant-good").messages.count_tokens(model="x", messages=user("Hi")).input_tokens
        check(n > 0, "count_tokens with x-api-key")
        for key in ("wrong", "sk-ant-goo"):
            try:
                client(gw, api_key=key).messages.create(model="x", max_tokens=2, messages=user("Hi"))
                raise AssertionError("wrong key %r accepted" % key)
            except anthropic.AuthenticationError as e:
                anthropic_error(e, 401, "authentication_error")
        st, j = post(gw, "/v1/messages", {"max_tokens": 2, "messages": user("Hi")})
        check(st == 401 and j["type"] == "error" and j["error"]["type"] == "authentication_error" and
              "x-api-key" in j["error"]["message"], "no key: %d %r" % (st, j))
        # the same keys as Bearer on /v1/messages, and x-api-key on the OpenAI endpoints
        st, j = post(gw, "/v1/messages", {"max_tokens": 2, "messages": user("Hi")},
                     headers={"Authorization": "Bearer sk-ant-good"})
        check(st == 200, "Bearer on /v1/messages: %d" % st)
        st, h, b = gw.request("GET", "/v1/models", headers={"x-api-key": "sk-ant-good"})
        check(st == 200, "x-api-key on /v1/models: %d" % st)
        st, h, b = gw.request("GET", "/v1/models", headers={"x-api-key": "nope"})
        check(st == 401 and json.loads(b)["error"]["code"] == "invalid_api_key", "wrong x-api-key: %d %s" % (st, b))
        # Authorization wins when both come
        st, h, b = gw.request("GET", "/v1/models", headers={"x-api-key": "sk-ant-good", "Authorization": "Bearer no"})
        check(st == 401, "a wrong Bearer with a right x-api-key: %d" % st)
        st, h, b = gw.request("GET", "/metrics")
        check(b'smollm3_gateway_requests_total{endpoint="/v1/messages",status="401"}' in b and
              b'smollm3_gateway_tenant_requests_total{tenant="alice"}' in b, "metrics per endpoint / tenant")
    finally:
        gw.stop()


# ---- langchain-anthropic -----------------------------------------------------------------

def t_langchain(gw, d):
    try:
        from langchain_anthropic import ChatAnthropic
    except ImportError as e:
        raise Skip("langchain-anthropic missing (tests/requirements-api.txt): %s" % e)
    llm = ChatAnthropic(base_url=gw.url(), api_key="none", model="smollm3", max_tokens=6, temperature=0,
                        max_retries=0, timeout=60)
    parts = [c.content for c in llm.stream("Hello")]
    text = "".join(p if isinstance(p, str) else "".join(x.get("text", "") for x in p) for p in parts)
    check(text, "langchain stream %r" % parts)
    full = llm.invoke("Hello")
    check(full.content == text and full.usage_metadata["output_tokens"] == 6, "langchain invoke %r vs %r"
          % (full.content, text))


def t_langchain_tools(gw, fd):
    try:
        from langchain_anthropic import ChatAnthropic
    except ImportError as e:
        raise Skip("langchain-anthropic missing: %s" % e)
    llm = ChatAnthropic(base_url=gw.url(), api_key="none", model="fake", max_tokens=100, max_retries=0, timeout=30)
    bound = llm.bind_tools([WEATHER])
    m = bound.invoke("TOOLS please")
    check(m.tool_calls and m.tool_calls[0]["name"] == "get_weather" and m.tool_calls[0]["args"] == {"city": "Paris"},
          "langchain tool call %r" % m)
    acc = None
    for c in bound.stream("TOOLS please"):
        acc = c if acc is None else acc + c
    check(acc.tool_calls and acc.tool_calls[0]["args"] == {"city": "Paris"}, "langchain streamed tool call %r" % acc)


# ---- a scripted daemon: thinking blocks, tool calls, errors, pings -----------------------------

def recorder(fd):
    """Records the GenerateRequests the fake daemon receives."""
    seen = []
    orig = fd.script

    def script(ident, rid, g):
        seen.append(g)
        return orig(ident, rid, g)
    fd.script = script
    return seen


def t_fake_thinking(gw, fd):
    cl = client(gw)
    kw = dict(model="fake", max_tokens=50, messages=user("go"), thinking={"type": "enabled", "budget_tokens": 20})
    r = cl.messages.create(**kw)
    check([b.type for b in r.content] == ["thinking", "text"] and r.content[0].thinking == "Let me think" and
          r.content[0].signature == "" and r.content[1].text == "<b>Hi</b>\nthere", "content %r" % r.content)
    u = r.usage
    check(u.input_tokens == 6 and u.cache_read_input_tokens == 4 and u.output_tokens == 5 and
          u.output_tokens_details.thinking_tokens == 3 and r.stop_reason == "end_turn", "usage %r" % u)
    with cl.messages.stream(**kw) as s:
        evs = list(s)
        f = s.get_final_message()
    deltas = [e.delta.type for e in evs if e.type == "content_block_delta"]
    check(deltas == ["thinking_delta"] * 3 + ["text_delta"] * 3, "deltas %r" % deltas)
    blocks = lambda m: [(b.type, getattr(b, "thinking", None), getattr(b, "text", None)) for b in m.content]  # noqa
    check(blocks(f) == blocks(r) and f.usage.output_tokens == 5, "final %r vs %r" % (f.content, r.content))
    # display omitted: the block, not its text
    r = cl.messages.create(**dict(kw, thinking={"type": "enabled", "budget_tokens": 20, "display": "omitted"}))
    check([b.type for b in r.content] == ["thinking", "text"] and r.content[0].thinking == "", "omitted %r" % r)


def t_fake_tools(gw, fd):
    seen = recorder(fd)
    cl = client(gw)
    r = cl.messages.create(model="fake", max_tokens=50, messages=user("TOOLS"), tools=[WEATHER])
    check(r.stop_reason == "tool_use" and len(r.content) == 1 and r.content[0].type == "tool_use" and
          r.content[0].id == "call_1_0" and r.content[0].name == "get_weather" and
          r.content[0].input == {"city": "Paris"}, "tool_use %r" % r)
    st, h, chunks = tg.read_stream(gw, {"max_tokens": 50, "messages": user("TOOLS"), "stream": True},
                                   path="/v1/messages")
    raw = [(k, json.loads(v)) for k, v in tg.sse_events(b"".join(c for _, c in chunks))]
    blk = [v for k, v in raw if k.startswith("content_block")]
    check(blk == [{"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "call_1_0", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                             "partial_json": '{"city":"Paris"}'}},
        {"type": "content_block_stop", "index": 0}], "tool_use events %r" % blk)
    check(raw[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}, "message_delta %r" % (raw[-2],))
    # the history goes to the daemon as the chat endpoint's messages
    seen.clear()
    convo = [{"role": "user", "content": "TOOLS please"},
             {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                               {"type": "text", "text": "Checking."},
                                               r.content[0].model_dump(exclude_none=True)]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1_0",
                                           "content": [{"type": "text", "text": "sunny"}]},
                                          {"type": "text", "text": "and?"}]}]
    r2 = cl.messages.create(model="fake", max_tokens=50, system="Be brief", messages=convo, tools=[WEATHER],
                            tool_choice={"type": "tool", "name": "get_weather"})
    check(r2.type == "message" and len(seen) == 1, "turn 2 %r" % r2)
    g = seen[0]
    m = [(x.role, x.content, x.reasoning_content, x.tool_calls_json, x.tool_call_id, x.name) for x in g.chat.messages]
    want = [("system", "Be brief", "", "", "", ""), ("user", "TOOLS please", "", "", "", ""),
            ("assistant", "Checking.", "t", json.dumps([{"id": "call_1_0", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris"}'}}], separators=(",", ":")), "", ""),
            ("tool", "sunny", "", "", "call_1_0", "get_weather"), ("user", "and?", "", "", "", "")]
    check(m == want, "chat messages %r" % m)
    check(json.loads(g.chat.tools_json) == [as_openai_tool(WEATHER)] and g.tool_choice == "get_weather" and
          g.max_tokens == 50 and not g.enable_thinking and g.WhichOneof("enable_thinking_opt"),
          "request %r" % g)


def t_fake_errors(gw, fd):
    anthropic = sdk()
    cl = client(gw)
    try:
        cl.messages.create(model="fake", max_tokens=5, messages=user("BUSY"))
        raise AssertionError("BUSY accepted")
    except anthropic.RateLimitError as e:
        anthropic_error(e, 429, "rate_limit_error")
    # an error after the stream began: an `error` event, which the SDK raises
    st, h, chunks = tg.read_stream(gw, {"max_tokens": 5, "messages": user("MIDERROR"), "stream": True},
                                   path="/v1/messages")
    raw = tg.sse_events(b"".join(c for _, c in chunks))
    check(raw[-1][0] == "error" and json.loads(raw[-1][1]) == {"type": "error", "error": {
        "type": "api_error", "message": "boom"}}, "error event %r" % raw[-2:])
    try:
        with cl.messages.stream(model="fake", max_tokens=5, messages=user("MIDERROR")) as s:
            list(s.text_stream)
        raise AssertionError("mid-stream error not raised")
    except anthropic.APIStatusError as e:
        check("boom" in str(e), "error %r" % e)


def t_fake_ping(gw, fd):
    st, h, chunks = tg.read_stream(gw, {"max_tokens": 5, "messages": user("STALL"), "stream": True},
                                   path="/v1/messages", timeout=10)
    raw = tg.sse_events(b"".join(c for _, c in chunks))
    check([k for k, _ in raw].count("ping") >= 2 and all(json.loads(v) == {"type": "ping"} for k, v in raw
                                                          if k == "ping"), "pings %r" % raw)


# ---- main -------------------------------------------------------------------------------

def main():
    want = tg.suite_args()
    with tg.Suite("smollm3-anthropic-test-") as st:
        real = [(n, f) for n, f in (("an_field_walk", t_field_walk), ("an_create_and_stream", t_create_and_stream),
                                    ("an_count_tokens", t_count_tokens), ("an_sampling", t_sampling),
                                    ("an_stop_sequences", t_stop_sequences), ("an_tool_use", t_tool_use),
                                    ("an_thinking", t_thinking), ("an_langchain", t_langchain)) if want(n)]
        procs = [(n, f) for n, f in (("an_ignore_unknown", t_ignore_unknown), ("an_api_keys", t_api_keys))
                 if want(n)]
        if real or procs:
            st.d = tg.Daemon(os.path.join(st.tmp, "d.sock"))
            st.gw = tg.Gateway(st.d.endpoint, st.tmp)
            for name, fn in real:
                run_test(name, fn, st.gw, st.d)
            for name, fn in procs:
                run_test(name, fn, st.d, st.tmp)
            st.gw.stop()
            st.gw = None
            st.d.stop()
            st.d = None
        fake = [(n, f) for n, f in (("an_fake_thinking", t_fake_thinking), ("an_fake_tools", t_fake_tools),
                                    ("an_fake_errors", t_fake_errors), ("an_fake_ping", t_fake_ping),
                                    ("an_langchain_tools", t_langchain_tools)) if want(n)]
        if fake:
            try:
                import zmq  # noqa: F401
                sys.path.insert(0, tg.ARGS.pb2_dir or "")
                import smollm3_pb2 as pb2
            except ImportError as e:
                for n, _ in fake:
                    RESULTS["fail"] += 1
                    print("FAIL %s: cannot run: %s" % (n, e), flush=True)
                pb2 = None
            if pb2:
                fd = tg.FakeDaemon(os.path.join(st.tmp, "fake.sock"), pb2)
                fd.thinking = True      # it scripts reasoning: a model with a thinking mode
                st.gw = tg.Gateway(fd.endpoint, st.tmp, ["--ping-interval", "1"])
                for n, f in fake:
                    run_test(n, f, st.gw, fd)
                st.gw.stop()
                st.gw = None
                fd.close()
    return st.result()


if __name__ == "__main__":
    sys.exit(main())
