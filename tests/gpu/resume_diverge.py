#!/usr/bin/env python3
"""resume_diverge.py --ctl SMOLLM3CTL --connect ENDPOINT [-n N] [--tokens T] - how often a resumed
answer diverges (issue 48): N answers (half greedy, half seeded sampling), T tokens each, generated
together (batched); then each again, together, with the first half of its token ids as resume_tokens
(smollm3ctl generate --resume-tokens: the daemon prefills them and continues).  An answer diverges when
its tokens after the cut differ from the first run's.  The CPU backend is batch-invariant (0 of N); on
the GPU the batch's composition and the prefill-vs-decode paths may differ.  Prints
"resumed answers diverged: K of N" (and the first diverging position of each), exits 0 whatever K
is (1 when a run failed).  Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import threading


def gen(a, i, resume=None):
    cmd = [a.ctl, "--connect", a.connect, "--timeout", "60", "--json", "generate", "--no-think", "-n", str(a.tokens)]
    cmd += ["--temp", "0"] if i % 2 == 0 else ["--temp", "0.8", "--top-p", "0.95", "--seed", str(100 + i)]
    if resume:
        cmd += ["--resume-tokens", ",".join(map(str, resume))]
    cmd.append("Answer %d: describe, step by step, how a %s works." % (i, ["clock", "bridge", "kite", "lock"][i % 4]))
    env = None
    if os.environ.get("LOADGEN_CTL_LD_LIBRARY_PATH") is not None:   # tests/gpu/check.sh: the kit's libraries
        env = dict(os.environ, LD_LIBRARY_PATH=os.environ["LOADGEN_CTL_LD_LIBRARY_PATH"])
    r = subprocess.run(cmd, capture_output=True, timeout=120, env=env)
    ids, done = [], False
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        ev = json.loads(line)
        if ev.get("event") == "token" and ev.get("token_id", -1) >= 0:
            ids.append(ev["token_id"])
        done = done or ev.get("event") == "done"
    if not done:
        raise RuntimeError("answer %d: no done event: %s" % (i, r.stdout.decode()[-300:] + r.stderr.decode()[-300:]))
    return ids


def together(fn, n):
    out, errs = [None] * n, []

    def one(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001
            errs.append(str(e))
    th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errs:
        raise RuntimeError("; ".join(errs[:3]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--connect", required=True)
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=96)
    a = ap.parse_args()
    try:
        full = together(lambda i: gen(a, i), a.n)
        cut = [len(f) // 2 for f in full]
        again = together(lambda i: gen(a, i, full[i][:cut[i]]) if cut[i] else full[i], a.n)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
        print("resume_diverge: failed: %s" % e)
        return 1
    diverged = []
    for i in range(a.n):
        want, got = full[i][cut[i]:], again[i] if cut[i] else []
        if cut[i] and want != got:
            at = next((k for k, (x, y) in enumerate(zip(want, got)) if x != y), min(len(want), len(got)))
            diverged.append("#%d at +%d of %d" % (i, at, len(want)))
    print("resumed answers diverged: %d of %d (%d tokens after the cuts compared)%s"
          % (len(diverged), a.n, sum(len(f) - c for f, c in zip(full, cut)),
             (": " + ", ".join(diverged)) if diverged else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
