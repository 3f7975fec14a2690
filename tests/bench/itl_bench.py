#!/usr/bin/env python3
"""itl_bench.py - `make bench-itl`: issue 47's measurement.  smollm3d + smollm3-gateway against
llama.cpp's server on the same GGUF, the same CPU, the same prompts through HTTP
(tests/load/loadgen.py --mix chat --no-think, closed loop for --duration seconds: requests
arrive while others stream), and our side with --step-budget-ms at its default (auto), off (0)
and smaller values: what a stream's inter-token gap and a request's first token cost each other.

    python3 tests/bench/itl_bench.py --build build [--model M] [--streams 4] [--duration 90]
        [--budgets auto,0,200] [--peer auto|llama-server|llama-cpp-python|none]
        [--small-model M2 --small-streams 8,32 --small-duration 45]

The peer (--peer auto): llama-server built from the vendored llama.cpp of the llama-cpp-python
sdist that `make bench` builds its wheel from (tests/bench/llama_peer.sh pins the version; the
binary is cached beside the wheel, build/wheels/<cpu key>-native/llama-server, by
tests/bench/itl_peer.sh), started with -np STREAMS slots of --peer-ctx tokens each, --jinja
(chat_template_kwargs honoured: the same no-think prompt as ours); else llama-cpp-python's own
server (`python -m llama_cpp.server` from build/venv-llama, its [server] extras installed), which
serves one request at a time (no batching: its ITL is a lone stream's, its TTFT the queue's).

Printed: per configuration tokens/s, TTFT p50/p99, ITL p50/p99, requests, the 1-minute load
average sampled through the run (the machine may be shared: both sides see the same noise), and
our daemon's step estimates (smollm3ctl stats: step_row_ms, step_prompt_token_ms, mixed steps);
then each of ours against the peer (ratios); then --small-model's tokens/s at --small-streams.
--from-json FILE prints the table from a saved results file again (no servers).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LOADGEN = os.path.join(ROOT, "tests", "load", "loadgen.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "gateway"))
from test_gateway import free_port  # noqa: E402


def wait_http(url, timeout, proc=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


class LoadSampler:
    """The 1-minute load average every few seconds while a run lasts."""

    def __init__(self, every=5.0):
        self.every, self.vals, self.stop_ev = every, [], threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop_ev.is_set():
            try:
                with open("/proc/loadavg") as f:
                    self.vals.append(float(f.read().split()[0]))
            except OSError:
                pass
            self.stop_ev.wait(self.every)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop_ev.set()
        self.t.join()

    def summary(self):
        if not self.vals:
            return None
        return {"mean": round(sum(self.vals) / len(self.vals), 2), "max": max(self.vals)}


def loadgen(url, a, streams, duration, log, extra=()):
    cmd = [sys.executable, LOADGEN, "--url", url, "--streams", str(streams)] + \
        (["--duration", str(duration), "--max-tokens", a.max_tokens] if duration else []) + \
        ["--mix", "chat", "--no-think", "--seed", str(a.seed), "--timeout", str(a.timeout), "--json"] + list(extra)
    with LoadSampler() as ls:
        r = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ %s\n%s\n%s\n" % (" ".join(cmd), r.stdout, r.stderr))
    s = None
    for line in r.stdout.splitlines():
        if line.startswith('{"load"'):
            s = json.loads(line)["load"]
    if s is None:
        raise RuntimeError("loadgen gave no summary (rc %d): %s" % (r.returncode, (r.stderr or r.stdout)[-300:]))
    s["loadavg"] = ls.summary()
    return s


def stop(proc, sig=signal.SIGTERM, wait=20):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Ours:
    """smollm3d (--step-budget-ms BUDGET, otherwise its defaults) behind smollm3-gateway."""

    def __init__(self, a, model, budget, tmp, tag):
        self.a, self.tmp, self.tag = a, tmp, tag
        self.ep = "ipc://%s/d-%s.sock" % (tmp, tag)
        self.log = open(os.path.join(a.out, "ours-%s.log" % tag), "w")
        cmd = [os.path.join(a.build, "bin/smollm3d"), "--model", model, "--listen", self.ep,
               "--threads", str(a.threads), "--max-queued", "1024", "--log-level", "notice"]
        if budget != "auto":
            cmd += ["--step-budget-ms", str(budget)]
        self.log.write("$ %s\n" % " ".join(cmd))
        self.log.flush()
        self.d = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        self.gw = None
        end = time.monotonic() + a.start_timeout
        while time.monotonic() < end and self.d.poll() is None and not self.stats():
            time.sleep(0.5)
        if self.d.poll() is not None or not self.stats():
            self.close()
            raise RuntimeError("smollm3d (%s) not up: see %s" % (tag, self.log.name))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.gw = subprocess.Popen([os.path.join(a.build, "bin/smollm3-gateway"), "--listen",
                                    "127.0.0.1:%d" % self.port, "--daemon", self.ep, "--max-inflight", "1024",
                                    "--request-timeout", "300"],
                                   stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        if not wait_http(self.url + "/health", 30, self.gw):
            self.close()
            raise RuntimeError("smollm3-gateway (%s) not ready: see %s" % (tag, self.log.name))

    def stats(self):
        try:
            r = subprocess.run([os.path.join(self.a.build, "bin/smollm3ctl"), "--connect", self.ep, "--timeout", "3",
                                "stats", "--json"], capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None
        except Exception:
            return None

    def close(self):
        stop(self.gw)
        stop(self.d)
        self.log.close()


def peer_llama_server(a):
    """The llama-server binary (--peer-bin, else build/wheels/<cpu key>-native/llama-server)."""
    if a.peer_bin:
        return a.peer_bin if os.access(a.peer_bin, os.X_OK) else None
    try:
        key = subprocess.run(["sh", "-c", ". tests/bench/llama_peer.sh && peer_cpu_key"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    for d in (os.path.join(ROOT, "build/wheels"), "/tmp/wheels"):
        p = os.path.join(d, key + "-native", "llama-server")
        if key and os.access(p, os.X_OK):
            return p
    return None


class Peer:
    def __init__(self, a, model, kind, streams):
        self.kind, self.port = kind, free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(a.out, "peer-%s.log" % kind), "w")
        if kind == "llama-server":
            cmd = [a.server_bin, "-m", model, "-t", str(a.threads), "-np", str(streams),
                   "-c", str(streams * a.peer_ctx), "--jinja", "--host", "127.0.0.1", "--port", str(self.port)]
        else:
            cmd = [a.peer_py, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(a.peer_ctx),
                   "--n_threads", str(a.threads), "--n_threads_batch", str(a.threads),
                   "--host", "127.0.0.1", "--port", str(self.port)]
        self.log.write("$ %s\n" % " ".join(cmd))
        self.log.flush()
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        probe = "/health" if kind == "llama-server" else "/v1/models"
        if not wait_http(self.url + probe, a.start_timeout, self.p):
            self.close()
            raise RuntimeError("%s not ready: see %s" % (kind, self.log.name))

    def close(self):
        stop(self.p)
        self.log.close()


def pick_peer(a):
    if a.peer in ("auto", "llama-server"):
        a.server_bin = peer_llama_server(a)
        if a.server_bin:
            return "llama-server"
        if a.peer == "llama-server":
            return None
    if a.peer in ("auto", "llama-cpp-python"):
        py = a.peer_py or os.path.join(ROOT, "build/venv-llama/bin/python")
        if os.access(py, os.X_OK) and subprocess.run([py, "-c", "import llama_cpp.server.app"],
                                                      capture_output=True).returncode == 0:
            a.peer_py = py
            return "llama-cpp-python"
    return None


STAT_KEYS = ("step_budget_ms", "step_row_ms", "step_prompt_token_ms", "prefill_steps", "mixed_steps", "steps")


def run_ours(a, model, budget, streams, duration, tmp, tag, log):
    o = Ours(a, model, budget, tmp, tag)
    try:
        loadgen(o.url, a, 1, None, log, ["--max-tokens", "4", "--requests", "1"])  # warm (not counted)
        s = loadgen(o.url, a, streams, duration, log)
        st = o.stats() or {}
        s["daemon"] = {k: st.get(k) for k in STAT_KEYS if k in st}
        return s
    finally:
        o.close()


def fmt(x, scale=1.0, p=2):
    return "-" if x is None else ("%.*f" % (p, x * scale))


def table(res, out=sys.stdout):
    w = out.write
    m = res.get("meta", {})
    w("\nbench-itl: %s, %s streams, loadgen --mix chat --no-think --duration %s --max-tokens %s (seed %s), "
      "%s threads, %s\n" % (m.get("model"), m.get("streams"), m.get("duration"), m.get("max_tokens"),
                            m.get("seed"), m.get("threads"), m.get("date")))
    w("cpu: %s; peer: %s\n\n" % (m.get("cpu"), m.get("peer_line")))
    hdr = "%-31s %8s %9s %9s %9s %9s %6s %9s %s\n"
    w(hdr % ("", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "reqs", "load avg", "daemon step estimates"))
    rows = res.get("rows", [])
    for r in rows:
        s = r.get("load")
        if not s:
            w("%-31s %s\n" % (r["label"], r.get("error", "no result")))
            continue
        la = s.get("loadavg") or {}
        d = s.get("daemon") or {}
        est = ""
        if d:
            est = "budget %s ms, row %s ms, prompt token %s ms, mixed/prefill steps %s/%s" % (
                fmt(d.get("step_budget_ms"), p=0), fmt(d.get("step_row_ms"), p=1),
                fmt(d.get("step_prompt_token_ms"), p=1), d.get("mixed_steps", "-"), d.get("prefill_steps", "-"))
        w(hdr % (r["label"], fmt(s["tokens_per_s"]), fmt(s["ttft_ms_p50"], 1e-3) + " s",
                 fmt(s["ttft_ms_p99"], 1e-3) + " s", fmt(s["itl_ms_p50"], 1e-3, 3) + " s",
                 fmt(s["itl_ms_p99"], 1e-3, 3) + " s", "%d%s" % (s["ok"], "!" if s["errors"] else ""),
                 fmt(la.get("mean"), p=1), est))
    peer = next((r["load"] for r in rows if r.get("peer") and r.get("load")), None)
    if peer:
        w("\nratios to the peer (ours / peer; tok/s: higher is better, the latencies: lower is better)\n")
        for r in rows:
            s = r.get("load")
            if r.get("peer") or not s:
                continue
            rat = lambda k: "-" if not peer.get(k) or s.get(k) is None else "%.2fx" % (s[k] / peer[k])  # noqa: E731
            w("  %-31s tok/s %s  TTFT p50 %s p99 %s  ITL p50 %s p99 %s\n"
              % (r["label"], rat("tokens_per_s"), rat("ttft_ms_p50"), rat("ttft_ms_p99"), rat("itl_ms_p50"),
                 rat("itl_ms_p99")))
    small = res.get("small", [])
    if small:
        w("\n%s (ours, default budget), tokens/s by streams:\n" % res.get("meta", {}).get("small_model"))
        for r in small:
            s = r.get("load")
            if s:
                w("  %3d streams: %7.2f tok/s  TTFT p50 %s s  ITL p99 %s s  (%d requests, load avg %s)\n"
                  % (r["streams"], s["tokens_per_s"], fmt(s["ttft_ms_p50"], 1e-3), fmt(s["itl_ms_p99"], 1e-3, 3),
                     s["ok"], fmt((s.get("loadavg") or {}).get("mean"), p=1)))
            else:
                w("  %3d streams: %s\n" % (r["streams"], r.get("error", "no result")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="build/models/smollm3-3b-synth.Q4_K_M.gguf")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--duration", type=float, default=90)
    ap.add_argument("--max-tokens", default="16:128", help="loadgen's answer lengths (N or LO:HI)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300, help="loadgen: seconds without progress")
    ap.add_argument("--budgets", default="auto,0,200", help="our --step-budget-ms values (auto: the default)")
    ap.add_argument("--peer", choices=["auto", "llama-server", "llama-cpp-python", "none"], default="auto")
    ap.add_argument("--peer-bin", default=None, help="the llama-server binary")
    ap.add_argument("--peer-py", default=None, help="python with llama_cpp.server (build/venv-llama)")
    ap.add_argument("--peer-ctx", type=int, default=4096, help="peer context per slot")
    ap.add_argument("--peer-first", action="store_true", help="run the peer before ours")
    ap.add_argument("--small-model", default="build/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--small-streams", default="8,32", help="'' for none")
    ap.add_argument("--small-duration", type=float, default=45)
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--out", default=None, help="logs and results.json (default BUILD/bench-out/itl)")
    ap.add_argument("--from-json", default=None, help="print the table of a saved results.json and exit")
    a = ap.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            table(json.load(f))
        return 0
    a.build = os.path.abspath(a.build)
    a.out = os.path.abspath(a.out or os.path.join(a.build, "bench-out", "itl"))
    os.makedirs(a.out, exist_ok=True)
    for b in ("smollm3d", "smollm3-gateway", "smollm3ctl"):
        if not os.access(os.path.join(a.build, "bin", b), os.X_OK):
            print("bench-itl: %s/bin/%s not built (make)" % (a.build, b), file=sys.stderr)
            return 2
    if not os.path.exists(a.model):
        print("bench-itl: no %s (make bench-itl writes it with smollm3 synth)" % a.model, file=sys.stderr)
        return 2
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    kind = None if a.peer == "none" else pick_peer(a)
    peer_line = {"llama-server": "llama-server (%s; -np %d -c %d --jinja)" % (getattr(a, "server_bin", ""), a.streams,
                                                                            a.streams * a.peer_ctx),
                 "llama-cpp-python": "llama-cpp-python's server (%s -m llama_cpp.server; one request at a time)"
                                     % a.peer_py,
                 None: "none (%s)" % ("--peer none" if a.peer == "none" else "no llama-server binary nor "
                                      "build/venv-llama with llama_cpp.server: tests/bench/itl_peer.sh")}[kind]
    res = {"meta": {"model": os.path.basename(a.model), "streams": a.streams, "duration": a.duration,
                    "max_tokens": a.max_tokens, "seed": a.seed, "threads": a.threads, "cpu": cpu,
                    "peer_line": peer_line, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "small_model": os.path.basename(a.small_model)},
           "rows": [], "small": []}
    log = os.path.join(a.out, "loadgen.log")
    tmp = tempfile.mkdtemp(prefix="bench-itl-")
    rj = os.path.join(a.out, "results.json")

    def save():
        with open(rj, "w") as f:
            json.dump(res, f, indent=1)

    def peer_run():
        if not kind:
            return
        row = {"label": kind, "peer": True}
        print("bench-itl: %s, %d streams, %g s" % (kind, a.streams, a.duration), flush=True)
        try:
            p = Peer(a, a.model, kind, a.streams)
            try:
                loadgen(p.url, a, 1, None, log, ["--max-tokens", "4", "--requests", "1"])
                row["load"] = loadgen(p.url, a, a.streams, a.duration, log)
            finally:
                p.close()
        except Exception as e:  # noqa: BLE001 - the table says why
            row["error"] = "failed: %s" % e
        res["rows"].append(row)
        save()

    try:
        if a.peer_first:
            peer_run()
        for i, b in enumerate([x.strip() for x in a.budgets.split(",") if x.strip()]):
            label = "smollm3d budget %s" % ("auto (default)" if b == "auto" else "off (0)" if b == "0" else b + " ms")
            print("bench-itl: %s, %d streams, %g s" % (label, a.streams, a.duration), flush=True)
            row = {"label": label, "budget": b}
            try:
                row["load"] = run_ours(a, a.model, b, a.streams, a.duration, tmp, "b%s" % b, log)
            except Exception as e:  # noqa: BLE001
                row["error"] = "failed: %s" % e
            res["rows"].append(row)
            save()
            if i == 0 and not a.peer_first:
                peer_run()      # right after our default: the pair closest in time
        if a.small_streams and os.path.exists(a.small_model):
            for n in [int(x) for x in a.small_streams.split(",") if x.strip()]:
                print("bench-itl: %s, %d streams, %g s" % (os.path.basename(a.small_model), n, a.small_duration),
                      flush=True)
                row = {"streams": n}
                try:
                    row["load"] = run_ours(a, a.small_model, "auto", n, a.small_duration, tmp, "small%d" % n, log)
                except Exception as e:  # noqa: BLE001
                    row["error"] = "failed: %s" % e
                res["small"].append(row)
                save()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table(res)
    print("\nbench-itl: results in %s, logs in %s" % (rj, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
