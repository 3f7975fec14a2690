#!/usr/bin/env python3
"""check_structured_cli.py SMOLLM3 MODEL (fixture|real) - `smollm3 generate
--json-schema FILE` / `--grammar FILE` outputs validate (Python's jsonschema,
an independent validator).  fixture: random weights at temperature 1.5 with
bounded schemas (unconstrained, the same sampling is never JSON), and an
unbounded one cut by -n (the output still complete); real: SmolLM2-135M
greedy on tests/grammar/schemas/ (-n 600: what the model does not close,
the length limit does).  Exit 1 on any failure."""
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN, MODEL, MODE = sys.argv[1:4]
FAILS = []

FIXTURE_SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "status": {"enum": ["pending", "active", 3, None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3}},
     "required": ["name", "age", "status", "tags"]},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 1, "maxItems": 4},
]


def gen(prompt, *args):
    r = subprocess.run([BIN, "generate", "-m", MODEL, "--prompt", prompt, "--threads", "1"] + list(args),
                       capture_output=True, timeout=300)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def validate(name, schema, out):
    try:
        jsonschema.validate(json.loads(out), schema)
    except Exception as e:  # noqa: BLE001
        FAILS.append("%s: %s: %r" % (name, str(e)[:200], out[:300]))


tmp = tempfile.mkdtemp(prefix="smollm3-structured-")
if MODE == "fixture":
    for i, sch in enumerate(FIXTURE_SCHEMAS):
        f = os.path.join(tmp, "s%d.json" % i)
        json.dump(sch, open(f, "w"))
        for seed in ("1", "2", "3"):
            rc, out, err = gen("Reply with JSON.", "-n", "300", "--temp", "1.5", "--seed", seed, "--json-schema", f)
            if rc:
                FAILS.append("schema %d seed %s: exit %d: %s" % (i, seed, rc, err[-300:]))
            else:
                validate("schema %d seed %s" % (i, seed), sch, out.strip("\n"))
    # unbounded strings: random weights never close them; -n ends the output, complete
    unb = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
           "items": {"type": "string"}}}, "required": ["name", "tags"]}
    f = os.path.join(tmp, "unbounded.json")
    json.dump(unb, open(f, "w"))
    for seed, n in (("1", "20"), ("2", "45")):
        rc, out, err = gen("Reply with JSON.", "-n", n, "--temp", "1.5", "--seed", seed, "--json-schema", f)
        if rc:
            FAILS.append("unbounded seed %s: exit %d: %s" % (seed, rc, err[-300:]))
        else:
            validate("unbounded -n %s seed %s" % (n, seed), unb, out.strip("\n"))
    rc, out, err = gen("Reply with JSON.", "-n", "64", "--temp", "1.5", "--seed", "1")
    try:
        json.loads(out)
        FAILS.append("unconstrained output parses as JSON: %r" % out)
    except ValueError:
        pass
    g = os.path.join(tmp, "g.gbnf")
    open(g, "w").write('root ::= ("yes" | "no") " " [0-9]{2,3}\n')
    rc, out, err = gen("Answer:", "-n", "50", "--temp", "1.5", "--seed", "4", "--grammar", g)
    if rc or not re.fullmatch(r"(yes|no) [0-9]{2,3}", out.strip("\n")):
        FAILS.append("--grammar output %r (exit %d %s)" % (out, rc, err[-200:]))
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write('{"type": "number", "multipleOf": 3}')
    rc, out, err = gen("x", "-n", "5", "--json-schema", bad)
    if rc == 0 or "multipleOf" not in err:
        FAILS.append("unsupported keyword: exit %d, stderr %r" % (rc, err))
else:
    d = os.path.join(ROOT, "tests/grammar/schemas")
    for name in sorted(os.listdir(d)):
        if not name.endswith(".json") or ".instance." in name:
            continue
        text = open(os.path.join(d, name)).read()
        prompt = ("<|im_start|>user\nWrite a short example JSON instance of this JSON schema:\n%s<|im_end|>\n"
                  "<|im_start|>assistant\n" % text)
        rc, out, err = gen(prompt, "-n", "600", "--temp", "0", "--repeat-penalty", "1.3",
                           "--json-schema", os.path.join(d, name))
        if rc:
            FAILS.append("%s: exit %d: %s" % (name, rc, err[-300:]))
        else:
            validate(name, json.loads(text), out.strip("\n"))
for f in FAILS:
    print("FAIL: structured %s: %s" % (MODE, f))
sys.exit(1 if FAILS else 0)
