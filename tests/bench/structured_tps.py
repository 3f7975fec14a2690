#!/usr/bin/env python3
"""structured_tps.py [ROUNDS] - decode tokens/s with a JSON Schema constraint
vs unconstrained, on the real daemon (build/bin/smollm3d) with SmolLM2-135M
(build/models, tests/get_smollm2.sh), greedy, the same prompt, 128 tokens,
speculative decoding off (the two texts would draft differently).
The two modes run interleaved (ABBA order each round, ROUNDS rounds,
default 10, after one warm-up round), so load drifts hit both alike.
Prints for each mode the median generation tokens/s (Done.timings) with
its quartiles and range, the median of the per-round paired ratios with
their quartiles, and the engine's own account (StatsReply
grammar_mask_ms / grammar_tokens): the time a constrained token spends in
the mask and the grammar advance, as a fraction of a token's decode time.
Run from the repository root with build/venv's Python."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "proto/examples"))
import client as pyclient  # noqa: E402

tmp = tempfile.mkdtemp(prefix="smollm3-structured-tps-")
PB = pyclient.load_pb2(tmp)
sock = os.path.join(tmp, "d.sock")
d = subprocess.Popen([os.path.join(ROOT, "build/bin/smollm3d"), "--model",
                      os.path.join(ROOT, "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                      "--listen", "ipc://" + sock, "--threads", "1"],
                     stdout=open(os.path.join(tmp, "d.log"), "w"), stderr=subprocess.STDOUT)
schema = open(os.path.join(ROOT, "tests/grammar/schemas/order.json")).read()
prompt = "Write a short example JSON instance of this JSON schema:\n" + schema
res = {"unconstrained": [], "json_schema": []}
try:
    c = pyclient.Client("ipc://" + sock, PB)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if c.health(2000).ready:
                break
        except Exception:  # noqa: BLE001
            time.sleep(0.5)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    for rnd in range(rounds + 1):
        for mode in (("unconstrained", "json_schema") if rnd % 2 else ("json_schema", "unconstrained")):
            req = c.generate_request(prompt, temperature=0.0, max_tokens=128, thinking=False,
                                     repetition_penalty=1.3)
            # no drafts: the two texts differ, and so would what prompt lookup
            # accepts in them; this measures what the constraint costs per token
            req.generate.speculative = False
            if mode == "json_schema":
                req.generate.json_schema = schema
            rid = c.send(req)
            while True:
                ev = c.recv(120000, rid)
                if ev.WhichOneof("kind") in pyclient.TERMINAL_KINDS:
                    break
            if ev.WhichOneof("kind") == "done" and rnd > 0:
                res[mode].append((ev.done.timings.generation_tokens_per_s, ev.done.usage.completion_tokens))
    st = c.stats()
finally:
    d.terminate()
    d.wait()
    subprocess.run(["rm", "-rf", tmp])


def quart(v):
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
    return q[0], q[2]


med = {}
for m, v in res.items():
    xs = [x for x, _ in v]
    med[m] = statistics.median(xs)
    lo, hi = quart(xs)
    print("%-14s median %.1f tokens/s, quartiles %.1f-%.1f, range %.1f-%.1f  (tokens: %s)" % (
        m, med[m], lo, hi, min(xs), max(xs), " ".join(str(n) for _, n in v)))
ratios = [a[0] / b[0] for a, b in zip(res["json_schema"], res["unconstrained"])]
lo, hi = quart(ratios)
print("json_schema / unconstrained: median of %d paired rounds %.3f (quartiles %.3f-%.3f); ratio of medians %.3f" % (
    len(ratios), statistics.median(ratios), lo, hi, med["json_schema"] / med["unconstrained"]))
if st.grammar_tokens:
    per = st.grammar_mask_ms * 1e3 / st.grammar_tokens
    print("engine: %.1f us per constrained token in mask + advance (%d tokens) = %.2f%% of a %.1f ms decode step" % (
        per, st.grammar_tokens, 100 * per / (1e6 / med["json_schema"]), 1e3 / med["json_schema"]))
