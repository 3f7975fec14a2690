#!/usr/bin/env python3
"""fairness.py - key B's time to first token while key A floods the service, with the
daemon's fair shares on and off (issue 47).

Starts smollm3d (the fixture model unless --model) and smollm3-gateway with two API keys.
Key A keeps --flood long streaming completions open (each re-issued when it ends); once
they run, key B asks --b-requests short questions, one every --b-interval seconds (or as
soon as the one before ended), and times each one's first token.  Run twice: `fair_share = true` (the default: B's tenant is admitted before
A's backlog, A preempted down to its share) and `false` (first come first served, as
before issue 47).  A's key has max_inflight=--flood so the gateway's own per-key share
does not cut the flood: what is measured is the daemon's queue.

Prints per mode: B's TTFT p50 / p99 / max, A's streams completed and failed, tokens/s;
last a JSON line.  Standard library only.

  python3 tests/load/fairness.py --build build [--model M.gguf] [--flood 32] [--max-running 16]
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY_A, KEY_B = "sk-flood-aaaaaaaaaaaaaaaa", "sk-quiet-bbbbbbbbbbbbbbbb"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else float("nan")


def stream(port, key, prompt, max_tokens, stop=None):
    """One streaming completion: (seconds to the first token or None, tokens, error or None)."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", "/v1/completions", json.dumps({
            "model": "x", "prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0}),
            {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return None, 0, "HTTP %d" % r.status
        first, n = None, 0
        for line in r:
            if stop is not None and stop.is_set():
                break
            if not line.startswith(b"data: {"):
                continue
            d = json.loads(line[6:])
            if "error" in d:
                return first, n, "error: %s" % d["error"].get("message", "")
            if d.get("choices"):
                n += 1
                if first is None:
                    first = time.perf_counter() - t0
        return first, n, None
    except OSError as e:
        return None, 0, str(e)
    finally:
        c.close()


def run(args, fair, tmp):
    sock = os.path.join(tmp, "d-%d.sock" % fair)
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("%s flood max_inflight=%d\n%s quiet\n" % (KEY_A, args.flood, KEY_B))
    os.chmod(keys, 0o600)
    dlog = open(os.path.join(tmp, "d-%d.log" % fair), "wb")
    d = subprocess.Popen([os.path.join(args.build, "bin/smollm3d"), "--model", args.model, "--listen",
                          "ipc://" + sock, "--threads", str(args.threads), "--max-running", str(args.max_running),
                          "--max-queued", "256", "--kv-budget-mb", "256", "--fair-share=" + ("true" if fair else "false")],
                         stdout=dlog, stderr=subprocess.STDOUT, cwd=ROOT)
    port = free_port()
    g = None
    try:
        deadline = time.time() + 60
        while not os.path.exists(sock):
            if d.poll() is not None or time.time() > deadline:
                raise RuntimeError("smollm3d did not start")
            time.sleep(0.1)
        g = subprocess.Popen([os.path.join(args.build, "bin/smollm3-gateway"), "--listen", "127.0.0.1:%d" % port,
                              "--daemon", "ipc://" + sock, "--api-key-file", keys, "--max-inflight", "256"],
                             stdout=open(os.path.join(tmp, "g-%d.log" % fair), "wb"), stderr=subprocess.STDOUT)
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("gateway not ready")
            time.sleep(0.1)
        stop = threading.Event()
        a = {"done": 0, "failed": 0, "tokens": 0}
        lock = threading.Lock()

        def flood(i):
            while not stop.is_set():
                _, n, err = stream(port, KEY_A, "Story %d: the lighthouse keeper" % i, args.flood_tokens, stop)
                with lock:
                    a["tokens"] += n
                    if err:
                        a["failed"] += 1
                    elif not stop.is_set():
                        a["done"] += 1

        threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(args.flood)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(args.warm)
        ttft, errs = [], 0
        t_b = time.perf_counter()
        for i in range(args.b_requests):
            time.sleep(max(0.0, t_b + i * args.b_interval - time.perf_counter()))  # a fixed pace, both modes
            first, n, err = stream(port, KEY_B, "Question %d: what is the capital of France?" % i, 4)
            if err or first is None:
                errs += 1
            else:
                ttft.append(first)
        stop.set()
        for t in threads:
            t.join(30)
        wall = time.perf_counter() - t0
        return {"fair_share": bool(fair), "b_ttft_p50_s": pct(ttft, 50), "b_ttft_p99_s": pct(ttft, 99),
                "b_ttft_max_s": max(ttft) if ttft else float("nan"), "b_errors": errs,
                "a_completed": a["done"], "a_failed": a["failed"], "tokens_per_s": a["tokens"] / wall}
    finally:
        for p in (g, d):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=None)
    ap.add_argument("--flood", type=int, default=32)
    ap.add_argument("--flood-tokens", type=int, default=256)
    ap.add_argument("--b-requests", type=int, default=20)
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--b-interval", type=float, default=0.5, help="seconds between B's requests (at most)")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds the flood runs before B asks")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if not args.model:
        for root in (os.environ.get("SMOL_FIXTURES", ""), os.path.join(ROOT, "tests/fixtures")):
            p = os.path.join(root, "models/fixture-t.Q8_0.gguf")
            if root and os.path.exists(p):
                args.model = p
                break
    if not args.model:
        print("no model: --model or SMOL_FIXTURES", file=sys.stderr)
        return 2
    out = []
    with tempfile.TemporaryDirectory(prefix="smollm3-fair-") as tmp:
        for fair in (1, 0):
            r = run(args, fair, tmp)
            out.append(r)
            print("fair_share=%-5s  B's TTFT p50 %.3f s  p99 %.3f s  max %.3f s  (B errors %d)  "
                  "A: %d streams completed, %d failed  %.1f tokens/s" %
                  ("true" if fair else "false", r["b_ttft_p50_s"], r["b_ttft_p99_s"], r["b_ttft_max_s"],
                   r["b_errors"], r["a_completed"], r["a_failed"], r["tokens_per_s"]), flush=True)
    print(json.dumps({"fairness": {"model": os.path.basename(args.model), "flood": args.flood,
                                   "max_running": args.max_running, "runs": out}}))
    return 0 if all(r["a_failed"] == 0 and r["b_errors"] == 0 for r in out) else 1


if __name__ == "__main__":
    sys.exit(main())
