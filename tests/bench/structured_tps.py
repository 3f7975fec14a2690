#!/usr/bin/env python3
"""structured_tps.py [ROUNDS] - decode tokens/s with a JSON Schema constraint
vs unconstrained, on the real daemon (build/bin/smollm3d) with SmolLM2-135M
(build/models, tests/get_smollm2.sh), greedy, the same prompt, 128 tokens,
alternating the two modes ROUNDS times (default 6; the first round is
warm-up).  Prints the median generation tokens/s (Done.timings) of each and
their ratio.  Run from the repository root with build/venv's Python."""
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
    for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        for mode in res:
            req = c.generate_request(prompt, temperature=0.0, max_tokens=128, thinking=False,
                                     repetition_penalty=1.3)
            if mode == "json_schema":
                req.generate.json_schema = schema
            rid = c.send(req)
            while True:
                ev = c.recv(120000, rid)
                if ev.WhichOneof("kind") in pyclient.TERMINAL_KINDS:
                    break
            if ev.WhichOneof("kind") == "done" and rnd > 0:
                res[mode].append((ev.done.timings.generation_tokens_per_s, ev.done.usage.completion_tokens))
finally:
    d.terminate()
    d.wait()
    subprocess.run(["rm", "-rf", tmp])
med = {}
for m, v in res.items():
    med[m] = statistics.median(x for x, _ in v)
    print("%-14s median %.1f tokens/s  (runs: %s; tokens: %s)" % (
        m, med[m], " ".join("%.1f" % x for x, _ in v), " ".join(str(n) for _, n in v)))
print("json_schema / unconstrained: %.3f" % (med["json_schema"] / med["unconstrained"]))
