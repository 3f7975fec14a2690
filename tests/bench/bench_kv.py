#!/usr/bin/env python3
"""bench_kv.py - time to first token of a long session's next turn after a
restart: read back from kv_spill_dir vs recomputed.  Run by tests/bench_kv.sh
(`make bench-kv`).

    bench_kv.py --build BUILD --model GGUF --depth 4096 [--threads 2] [--reps 3]

For each repetition:
  1. smollm3d with a spill directory runs turn 1 of session "bench": DEPTH
     token ids, one generated token;
  2. SIGTERM: the drain writes the session (the log gives bytes and ms);
  3. twice, on a copy of that directory, a new smollm3d answers turn 2
     (turn 1 + its token + 16 new ids): TTFT with the KV read back
     ("restored": the file in the page cache, as after a restart; "cold":
     dropped from the cache first with posix_fadvise DONTNEED);
  4. a smollm3d without a spill directory answers the same turn 2:
     TTFT recomputing everything ("recompute").
Prints one line per model: median TTFTs and the ratio recompute / restored.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "proto", "examples"))
import client as pyclient  # noqa: E402

ARGS = None
PB = None


class Daemon:
    def __init__(self, tmp, name, extra=()):
        self.sock = os.path.join(tmp, name + ".sock")
        self.endpoint = "ipc://" + self.sock
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "ab")
        cmd = [os.path.join(ARGS.build, "bin/smollm3d"), "--model", ARGS.model, "--listen", self.endpoint,
               "--threads", str(ARGS.threads), "--kv-budget-mb", str(ARGS.kv_budget_mb),
               "--kv-spill-when-idle=false"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 600
        with pyclient.Client(self.endpoint, PB) as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError("smollm3d exited: %s" % self.log_text()[-1500:])
                try:
                    if os.path.exists(self.sock) and c.health(2000).ready:
                        return
                except Exception:  # noqa: BLE001 - not up yet
                    pass
                time.sleep(0.2)
        raise RuntimeError("smollm3d not ready")

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def term(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(600)
        self.log.close()
        return rc


def turn(d, ids, session):
    with pyclient.Client(d.endpoint, PB) as c:
        evs = list(c.stream(c.generate_request(token_ids=ids, session=session, temperature=0, max_tokens=1),
                            1200000))
    if evs[-1].WhichOneof("kind") != "done":
        raise RuntimeError("turn failed: %s" % evs[-1])
    gen = [e.token.token_id for e in evs if e.WhichOneof("kind") == "token" and e.token.token_id >= 0]
    return evs[0].started, evs[-1].done.timings.ttft_ms, gen


def main():
    global ARGS, PB
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True)
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kv-budget-mb", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    ARGS = ap.parse_args()
    ARGS.build = os.path.abspath(ARGS.build)
    tmp = tempfile.mkdtemp(prefix="smollm3-benchkv-")
    PB = pyclient.load_pb2(os.path.join(tmp, "pb2"))
    rnd = random.Random(1)
    turn1 = [rnd.randrange(1000, 30000) for _ in range(ARGS.depth)]
    new = [rnd.randrange(1000, 30000) for _ in range(16)]
    res = {"restored": [], "cold": [], "recompute": [], "turn1": [], "write_ms": [], "file_mib": 0, "file_bytes": 0,
           "restored_tokens": 0}
    try:
        for rep in range(ARGS.reps):
            # turn 1 once per repetition: its spill file serves both reads
            spill0 = os.path.join(tmp, "kv0")
            shutil.rmtree(spill0, ignore_errors=True)
            a = Daemon(tmp, "a%d" % rep, ["--kv-spill-dir", spill0])
            _, ttft1, gen = turn(a, turn1, "bench")
            if a.term() != 0:
                raise RuntimeError("drain failed")
            res["turn1"].append(ttft1)
            m = re.findall(r"written to (\S+): (\d+) tokens, ([\d.]+) MiB in (\d+) ms", a.log_text())
            if not m:
                raise RuntimeError("no spill write logged")
            res["write_ms"].append(float(m[-1][3]))
            res["file_mib"] = float(m[-1][2])
            res["file_bytes"] = os.path.getsize(os.path.join(spill0, m[-1][0]))
            for mode in ("restored", "cold"):
                spill = os.path.join(tmp, "kv")
                shutil.rmtree(spill, ignore_errors=True)
                shutil.copytree(spill0, spill)
                if mode == "cold":
                    fd = os.open(os.path.join(spill, m[-1][0]), os.O_RDONLY)
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                b = Daemon(tmp, "b%d%s" % (rep, mode), ["--kv-spill-dir", spill])
                st, ttft, _ = turn(b, turn1 + gen + new, "bench")
                if st.restored_tokens < ARGS.depth:
                    raise RuntimeError("turn 2 not restored: %s" % st)
                res["restored_tokens"] = st.restored_tokens
                res[mode].append(ttft)
                b.term()
            c = Daemon(tmp, "c%d" % rep)
            st, ttft, _ = turn(c, turn1 + gen + new, "bench")
            if st.cached_tokens != 0:
                raise RuntimeError("recompute turn was cached: %s" % st)
            res["recompute"].append(ttft)
            c.term()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(res[k]) for k in ("restored", "cold", "recompute", "write_ms")}
    out = {"model": os.path.basename(ARGS.model), "depth": ARGS.depth, "file_mib": res["file_mib"],
           "file_bytes": res["file_bytes"],
           "restored_tokens": res["restored_tokens"], "write_ms": med["write_ms"],
           "ttft_recompute_ms": med["recompute"], "ttft_restored_ms": med["restored"],
           "ttft_restored_cold_ms": med["cold"], "ratio": med["recompute"] / med["restored"],
           "ratio_cold": med["recompute"] / med["cold"], "runs": res}
    if ARGS.json:
        print(json.dumps(out))
    print("%-36s depth %5d  file %11d bytes (%.1f MiB)  write %6.0f ms  TTFT recompute %8.0f ms  restored %6.0f ms "
          "(%5.1fx)  cold %6.0f ms (%5.1fx)" % (out["model"], ARGS.depth, out["file_bytes"], out["file_mib"], out["write_ms"],
                                                 out["ttft_recompute_ms"], out["ttft_restored_ms"], out["ratio"],
                                                 out["ttft_restored_cold_ms"], out["ratio_cold"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
