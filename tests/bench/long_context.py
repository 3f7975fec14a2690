#!/usr/bin/env python3
"""long_context.py - the daemon serves a 64K-token conversation within its KV
budget.  Run by `make bench-long` (not part of `make test`: minutes of prefill).

    long_context.py --build BUILD [--threads 2] [--turn1 61440] [--turn2 4088] [--kv-type f16|q8_0]
                    [--no-recompute]

The model is tests/fixtures/hf/hf-long.F32.gguf: the real SmolLM3-3B's rope
(head_dim 128, theta 5e6, trained 65536) on 2 layers of 2 query heads over
1 KV head, so that 64K positions of prefill take minutes on two cores, not
hours (test_yarn checks it against transformers at 16K positions, and the
rotation against transformers' YaRN up to position 131071).  With --yarn
(131072 positions) and a KV budget of --kv-budget-mb:

  1. turn 1 of session "long": TURN1 ids (the fixture's LCG prompt), 8 tokens;
  2. turn 2: turn 1 + its tokens + TURN2 new ids (65536 prompt tokens by
     default: past the trained window), 8 tokens, on the session's KV;
  3. the same turn-2 prompt on a fresh daemon without a session, computed from
     scratch: its 8 greedy tokens must equal turn 2's (pages, positions and
     session reuse at 64K agree with a plain prefill);
  4. SIGTERM with a spill directory, a new daemon answers turn 3 with the KV
     read back from disk (restored_tokens), i.e. a 64K session survives a
     restart.
Prints TTFTs, the daemon's peak RSS, the KV in use (smollm3ctl stats
figures), and what the real SmolLM3-3B's KV needs for the same context.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_kv  # noqa: E402  (the Daemon wrapper and turn())
from bench_kv import pyclient  # noqa: E402

MODEL = os.path.join(ROOT, "tests/fixtures/hf/hf-long.F32.gguf")
# the real SmolLM3-3B: 36 layers, 4 KV heads of 128, K and V
REAL_3B_KV_F16 = 36 * 4 * 128 * 2 * 2


def long_ids(n, x=19):
    """tests/fixtures/make_yarn_fixture.py long_ids: x = 1103515245 x + 12345 mod 2^31, id = (x >> 16) % 504."""
    out = []
    for _ in range(n):
        x = (1103515245 * x + 12345) % (1 << 31)
        out.append((x >> 16) % 504)
    return out


def peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--turn1", type=int, default=61440)
    ap.add_argument("--turn2", type=int, default=4088)
    ap.add_argument("--kv-budget-mb", type=int, default=72)
    ap.add_argument("--kv-type", default="f16", help="the daemons' --kv-type (f16, q8_0, f32)")
    ap.add_argument("--no-recompute", action="store_true", help="leave out step 3 (a second full prefill)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.model = MODEL
    bench_kv.ARGS = args
    tmp = tempfile.mkdtemp(prefix="smollm3-long-")
    bench_kv.PB = pyclient.load_pb2(os.path.join(tmp, "pb2"))
    t1 = long_ids(args.turn1)
    new = long_ids(args.turn2, x=7)
    spill = os.path.join(tmp, "kv")
    out = {}
    try:
        kvt = ["--kv-type", args.kv_type]
        a = bench_kv.Daemon(tmp, "a", ["--yarn", "--kv-spill-dir", spill] + kvt)
        t0 = time.monotonic()
        st1, ttft1, gen1 = turn_n(a, t1, 8)
        wall1 = time.monotonic() - t0
        p2 = t1 + gen1 + new
        st2, ttft2, gen2 = turn_n(a, p2, 8)
        with pyclient.Client(a.endpoint, bench_kv.PB) as c:
            s = c.stats()
        out["stats"] = s
        out["rss_a"] = peak_rss_mib(a.proc.pid)
        if a.term() != 0:
            raise RuntimeError("drain failed")
        print("turn 1: %d prompt tokens, TTFT %.0f ms (%.0f s wall); turn 2: %d prompt tokens, %d cached, TTFT %.0f "
              "ms; greedy %s" % (len(t1), ttft1, wall1, len(p2), st2.cached_tokens, ttft2, gen2), flush=True)
        if st2.cached_tokens < len(t1):
            raise RuntimeError("turn 2 did not reuse the session: %s" % st2)
        print("KV: %d of %d tokens in use after turn 2, %d bytes per token (%s), context %d; daemon peak RSS %.0f MiB"
              % (s.kv_tokens_used, s.kv_tokens_total, s.kv_bytes_per_token, s.kv_type, s.context_length,
                 out["rss_a"]), flush=True)
        if s.kv_tokens_used < len(p2) + 7:
            raise RuntimeError("the session holds %d tokens, expected %d" % (s.kv_tokens_used, len(p2) + 7))
        # 4. the 64K session read back after a restart
        b = bench_kv.Daemon(tmp, "b", ["--yarn", "--kv-spill-dir", spill] + kvt)
        p3 = p2 + gen2 + long_ids(8, x=3)
        st3, ttft3, gen3 = turn_n(b, p3, 4)
        b.term()
        print("restart: turn 3 (%d prompt tokens) restored %d tokens from disk, TTFT %.0f ms" %
              (len(p3), st3.restored_tokens, ttft3), flush=True)
        if st3.restored_tokens < len(p2):
            raise RuntimeError("turn 3 was not restored: %s" % st3)
        # 3. the turn-2 prompt from scratch
        if not args.no_recompute:
            c = bench_kv.Daemon(tmp, "c", ["--yarn"] + kvt)
            stc, ttftc, genc = turn_n(c, p2, 8)
            c.term()
            print("turn 2 recomputed without a session: TTFT %.0f ms, greedy %s" % (ttftc, genc), flush=True)
            if stc.cached_tokens != 0 or genc != gen2:
                raise RuntimeError("the session's turn 2 differs from a plain prefill: %s vs %s" % (gen2, genc))
        print("long-context: OK: %d-token conversation served in %.1f MiB of KV (budget %d MiB); the real "
              "SmolLM3-3B (36 layers x 4 KV heads x 128, F16) needs %d bytes per token: %.2f GiB for 65536 tokens"
              % (len(p2) + 8, s.kv_tokens_used * s.kv_bytes_per_token / 1048576.0, args.kv_budget_mb,
                 REAL_3B_KV_F16, REAL_3B_KV_F16 * 65536 / 2.0 ** 30))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def turn_n(d, ids, n):
    with pyclient.Client(d.endpoint, bench_kv.PB) as c:
        evs = list(c.stream(c.generate_request(token_ids=ids, session="long" if d.sock.endswith(("a.sock", "b.sock"))
                                               else None, temperature=0, max_tokens=n), 3600000))
    if evs[-1].WhichOneof("kind") != "done":
        raise RuntimeError("turn failed: %s" % evs[-1])
    gen = [e.token.token_id for e in evs if e.WhichOneof("kind") == "token" and e.token.token_id >= 0]
    return evs[0].started, evs[-1].done.timings.ttft_ms, gen


if __name__ == "__main__":
    sys.exit(main())
