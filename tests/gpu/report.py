#!/usr/bin/env python3
"""report.py - the parsing and the tables of tests/gpu/check.sh (standard library only).

  report.py bench-cuda FILE.jsonl          bench_cuda --json lines -> a compact table; exit 1 on a failed check
  report.py ncu FILE.csv [--top N] [--json OUT]
                                           ncu --csv (details page, base units) of a window of launches
                                           -> one decode step (between two get_rows_kernel launches, the
                                           embedding lookup that opens each step), per kernel: share, us, GB/s
  report.py agree A.bin B.bin              relative L2 error of two float32 files (A against B)
  report.py bench-brief FILE               one line from a `smollm3 bench --json` output
  report.py attn FILE.jsonl                bench_cuda --attn --json lines -> cuda_attn paged vs tiled per case; exit 1 on a failed check
  report.py best W                         the fastest knob combination (tg128) that ran on cuda and agreed
  report.py final W OUT                    the final tables (printed last by check.sh) and OUT/results.json
  report.py stats-delta A.json B.json      the engine's counters between two `smollm3ctl stats --json`
  report.py llama-brief DIR                llama.cpp's figures of the quick mode (warm medians)
  report.py quick-best W                   the quick mode's best row (fastest tg128 whose logits agree)
  report.py quick W OUT                    the quick mode's table, OUT/results.json, OUT/quick.svg (+ .png)

llama-bench figures are the median of the warm samples (samples_ts without the first, which is
cold: device run 2026-11-27 saw 9,671 then 15,555 / 15,583 tokens/s for pp512).

W is check.sh's work folder; its layout is described at the top of check.sh.
"""
import csv
import glob
import json
import math
import os
import re
import statistics
import struct
import sys

COMBOS = (os.environ.get("GPU_CHECK_COMBOS") or "f32-0-0 q8-0-0 q8-1-0 q8-1-1").split()  # matvec-fuse-graphs; first: baseline
AGREE_MAX = 0.1     # logits of an 8-token step vs the baseline combination, relative L2


def fnum(x, fmt="{:.1f}"):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def jsonl(path):
    out = []
    for line in read(path).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def table(headers, rows, out=sys.stdout, left=(0,)):
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for k, r in enumerate(cells):
        print("  ".join(c.ljust(w[i]) if i in left else c.rjust(w[i]) for i, c in enumerate(r)).rstrip(), file=out)
        if k == 0:
            print("  ".join("-" * x for x in w), file=out)


# ---------------------------------------------------------------- bench_cuda

def bench_cuda(path):
    recs = jsonl(path)
    if not recs:
        print("bench_cuda: no results")
        return 1
    ns = sorted({r["n"] for r in recs})
    show = [n for n in (1, 8) if n in ns] or ns[:2]
    keys = []
    for r in recs:
        k = (r["type"], r["shape"], r["rows"], r["cols"])
        if k not in keys:
            keys.append(k)
    by = {(r["type"], r["shape"], r["n"], r["matvec"]): r for r in recs}
    headers = ["type shape"] + [f"n={n} {m} GB/s" for n in show for m in ("f32", "q8")] + ["us n=1 f32/q8", "q8/f32 err", "ok"]
    rows = []
    bad = 0
    for (t, s, rr, cc) in keys:
        row = [f"{t} {s} {rr}x{cc}"]
        for n in show:
            for m in ("f32", "q8"):
                r = by.get((t, s, n, m))
                g = r and r["gbps"]
                frac = r and r.get("bw_frac")
                row.append(fnum(g) + (f" ({100 * frac:.0f}%)" if frac else "") if r else "—")
        r1, r2 = by.get((t, s, ns[0], "f32")), by.get((t, s, ns[0], "q8"))
        row.append(f"{fnum(r1 and r1['us'], '{:.1f}')}/{fnum(r2 and r2['us'], '{:.1f}')}")
        errs = [r["rel_err_q8_vs_f32"] for r in recs if (r["type"], r["shape"]) == (t, s)]
        row.append(f"{max(errs):.1e}" if errs else "—")
        ok = all(r["ok"] for r in recs if (r["type"], r["shape"]) == (t, s))
        bad += not ok
        row.append("ok" if ok else "FAIL")
        rows.append(row)
    table(headers, rows)
    return 1 if bad else 0


# ---------------------------------------------------------------- bench_cuda --attn (knob cuda_attn)

def attn_kernels(path):
    recs = [r for r in jsonl(path) if "attn" in r]
    if not recs:
        print("bench_cuda --attn: no results")
        return 1
    rows = []
    for r in recs:
        p, t = r.get("paged_us"), r.get("tiled_us")
        case = f"{r['attn']} n={r['n']}" + (f" d={r['depth']}" if r.get("depth") else "")
        rate = r.get("kv_gbps") if r.get("depth") else r.get("tflops")
        rows.append([case, r.get("kv", "?"), fnum(p), fnum(t), fnum(p / t if p and t else None, "{:.2f}x"),
                     " / ".join(fnum(x, "{:.1f}") for x in rate) + (" GB/s" if r.get("depth") else " TFLOP/s") if rate else "—",
                     f"{r['rel_err_tiled_vs_paged']:.1e}", "ok" if r.get("ok") else "FAIL"])
    table(["attention (be->attention)", "kv", "paged us", "tiled us", "paged/tiled", "paged / tiled rate", "err", "ok"], rows)
    return 0 if all(r.get("ok") for r in recs) else 1


ATTN_RUNS = [("pp512", "p512d4096", "pp_tps"), ("pp2048", "p2048", "pp_tps"), ("pp8192", "p8192", "pp_tps"),
             ("tg64 d4096", "p512d4096", "tg_tps")]


def attn_ab(W, runs):
    """cuda_attn paged vs tiled vs prefill: smollm3 bench runs attn-{paged,tiled,prefill}-LABEL of check.sh's step attn."""
    rows, out = [], []
    for name, label, key in ATTN_RUNS:
        v = {}
        for a in ("paged", "tiled", "prefill"):
            j = runs.get(f"attn-{a}-{label}")
            v[a] = j.get(key) if j and j.get("ok") else None
        out.append({"row": name, **v,
                    "ratio": v["tiled"] / v["paged"] if v["paged"] and v["tiled"] else None,
                    "ratio_prefill": v["prefill"] / v["paged"] if v["paged"] and v["prefill"] else None})
        rows.append([name, fnum(v["paged"]), fnum(v["tiled"]), fnum(v["prefill"]), fnum(out[-1]["ratio"], "{:.2f}x"),
                     fnum(out[-1]["ratio_prefill"], "{:.2f}x")])
    return rows, out


# ---------------------------------------------------------------- ncu

def ncu_rows(path):
    """(launch id, kernel name, metric, value) from ncu --csv details output (other lines ignored)."""
    lines = [l for l in read(path).splitlines() if l.startswith('"')]
    if not lines:
        return []
    out = []
    header = None
    for rec in csv.reader(lines):
        if header is None or rec[:1] == ["ID"]:
            header = {k: i for i, k in enumerate(rec)}
            continue
        try:
            kid = int(rec[header["ID"]])
            name = rec[header["Kernel Name"]]
            metric = rec[header["Metric Name"]]
            val = float(rec[header["Metric Value"]].replace(",", ""))
        except (KeyError, ValueError, IndexError):
            continue
        out.append((kid, name, metric, val))
    return out


def short_name(name):
    name = re.sub(r"^void ", "", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):    # drop the parameter list, keep template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    return name[:cut][:70]


def ncu(path, top=12, json_out=None):
    rows = ncu_rows(path)
    if not rows:
        print("ncu: no kernel results parsed")
        return 1
    k = {}
    for kid, name, metric, val in rows:
        d = k.setdefault(kid, {"name": name})
        d[metric] = val
    ids = sorted(k)
    marks = [i for i in ids if "get_rows_kernel" in k[i]["name"]]
    # a decode step: the last complete interval between two step openings, past the warm-up
    # step and the prefill (the 3rd opening on); else the whole window
    if len(marks) >= 4:
        a, b = marks[-2], marks[-1]
        how = f"launches [{a}, {b}): one decode step (step openings seen: {len(marks)})"
    elif len(marks) >= 2:
        a, b = marks[-2], marks[-1]
        how = f"launches [{a}, {b}): the last complete step in the window (only {len(marks)} step openings: may be the prefill)"
    else:
        a, b = ids[0], ids[-1] + 1
        how = f"launches [{a}, {b}): the whole window (no step boundary found)"
    step = [i for i in ids if a <= i < b]
    agg = {}
    for i in step:
        d = k[i]
        n = short_name(d["name"])
        g = agg.setdefault(n, {"calls": 0, "ns": 0.0, "bytes": 0.0})
        g["calls"] += 1
        g["ns"] += d.get("gpu__time_duration.sum", 0.0)
        g["bytes"] += d.get("dram__bytes_read.sum", 0.0)
    total = sum(g["ns"] for g in agg.values()) or 1.0
    tb = sum(g["bytes"] for g in agg.values())
    order = sorted(agg.items(), key=lambda kv: -kv[1]["ns"])
    print(f"ncu: {how}; {len(step)} kernels, {total / 1e3:.0f} us of kernel time, {tb / 1e9:.3f} GB read from DRAM")
    hdr = ["kernel", "calls", "share", "us", "us/call", "GB/s"]
    table(hdr, [[n, g["calls"], f"{100 * g['ns'] / total:.1f}%", f"{g['ns'] / 1e3:.1f}",
                 f"{g['ns'] / 1e3 / g['calls']:.2f}", fnum(g["bytes"] / g["ns"] if g["ns"] else None)]
                for n, g in order[:top]])
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"window": how, "first": a, "end": b, "kernels": len(step), "kernel_us": total / 1e3,
                       "dram_gb": tb / 1e9, "per_kernel": [{"kernel": n, **g, "share": g["ns"] / total,
                                                            "gbps": g["bytes"] / g["ns"] if g["ns"] else None}
                                                           for n, g in order]}, f, indent=1)
    return 0


# ---------------------------------------------------------------- small helpers

def agree(a, b):
    da, db = open(a, "rb").read(), open(b, "rb").read()
    if not da or len(da) != len(db):
        print("inf")
        return 1
    try:
        import numpy as np
        x, y = np.frombuffer(da, "<f4").astype(np.float64), np.frombuffer(db, "<f4").astype(np.float64)
        ok = np.isfinite(x).all() and np.isfinite(y).all() and (y * y).sum() > 0
        print(f"{np.sqrt(((x - y) ** 2).sum() / (y * y).sum()):.3e}" if ok else "inf")
        return 0 if ok else 1
    except ImportError:
        pass
    n = len(da) // 4
    x, y = struct.unpack(f"<{n}f", da), struct.unpack(f"<{n}f", db)
    num = den = 0.0
    for p, q in zip(x, y):
        if not (math.isfinite(p) and math.isfinite(q)):
            print("inf")
            return 1
        num += (p - q) ** 2
        den += q * q
    print(f"{math.sqrt(num / den) if den else float('inf'):.3e}")
    return 0


def bench_of(W, label):
    """smollm3 bench --json result of run `label`, with ok = ran on cuda (or cpu for 'cpu')."""
    text = read(os.path.join(W, "sb", label + ".out"))
    j = last_json(text)
    if not j:
        return None
    m = re.search(r"^backend: (\w+)", text, re.M)
    name = str(j.get("backend") or (m.group(1) if m else "?"))
    j["ran_on"] = name
    j["ok"] = name.startswith("cpu" if label == "cpu" else "cuda")
    return j


def agreement(W, combo):
    t = read(os.path.join(W, "agree", combo + ".txt")).strip()
    try:
        return float(t)
    except ValueError:
        return None


def best(W):
    cand = []
    for c in COMBOS:
        j = bench_of(W, c)
        if not j or not j["ok"] or not j.get("tg_tps"):
            continue
        e = agreement(W, c)
        if c != COMBOS[0] and (e is None or not e < AGREE_MAX):
            continue        # unverified or disagreeing paths are not "best"
        cand.append((j["tg_tps"], c))
    print(max(cand)[1] if cand else COMBOS[0])
    return 0


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return (xs[(n - 1) // 2] + xs[n // 2]) / 2


def warm_ts(r):
    """A llama-bench record's tokens/s: the median of its warm samples (all but the first)."""
    ts = r.get("samples_ts") or []
    if len(ts) > 1:
        return median(ts[1:])
    return r.get("avg_ts")


def kv(W):
    out = {}
    for line in read(os.path.join(W, "kv")).splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
            out[k] = v
    return out


# ---------------------------------------------------------------- final

def final(W, OUT):
    facts = kv(W)
    res = {"facts": {k[5:]: v for k, v in facts.items() if k.startswith("fact.")}}
    bw = float(facts.get("fact.bw_gbps") or 0) or None
    model_gb = float(facts.get("fact.model_gb") or 0) or None
    bestc = facts.get("fact.best", COMBOS[0])
    res["best_combo"] = bestc

    runs = {os.path.basename(p)[:-4]: bench_of(W, os.path.basename(p)[:-4])
            for p in glob.glob(os.path.join(W, "sb", "*.out"))}
    res["smollm3_bench"] = runs
    res["agreement_vs_baseline"] = {c: agreement(W, c) for c in COMBOS[1:]}
    attn_rows, res["attn_ab"] = attn_ab(W, runs)
    res["attn_agreement_tiled_vs_paged"] = agreement(W, "attn-tiled")
    res["attn_agreement_prefill_vs_paged"] = agreement(W, "attn-prefill")
    res["bench_cuda_attn"] = jsonl(os.path.join(W, "attn.jsonl"))

    # llama.cpp
    lb = jsonl(os.path.join(W, "llama", "bench.jsonl")) + jsonl(os.path.join(W, "llama", "d4096.jsonl"))
    lbb = jsonl(os.path.join(W, "llama", "batched.jsonl"))

    def llama(n_prompt=0, n_gen=0, n_depth=0):
        for r in lb:
            if r.get("n_prompt") == n_prompt and r.get("n_gen") == n_gen and r.get("n_depth", 0) == n_depth:
                return warm_ts(r)
        return None

    def llama_b(pl):
        for r in lbb:
            if r.get("pl") == pl:
                return r.get("speed_tg")
        return None

    res["llama"] = {"bench": lb, "batched": lbb}

    # daemon
    dm = {}
    for wall in sorted(glob.glob(os.path.join(W, "daemon", "*.wall"))):
        n = int(os.path.basename(wall)[:-5])
        try:
            t0, t1 = map(float, read(wall).split()[:2])
        except ValueError:
            continue
        toks, ttft, errs = 0, [], 0
        for f in glob.glob(os.path.join(W, "daemon", str(n), "*.jsonl")):
            done = [e for e in jsonl(f) if e.get("event") == "done"]
            if not done:
                errs += 1
                continue
            toks += done[-1].get("usage", {}).get("completion_tokens", 0)
            t = done[-1].get("timings", {}).get("ttft_ms")
            if t is not None:
                ttft.append(t)
        dm[n] = {"streams": n, "tokens": toks, "wall_s": t1 - t0, "tps": toks / (t1 - t0) if t1 > t0 else None,
                 "ttft_ms_median": statistics.median(ttft) if ttft else None, "ttft_ms_max": max(ttft) if ttft else None,
                 "failed_clients": errs}
    res["daemon"] = dm
    # the load generator (step load): one {"load": {...}} line per stream count
    ld = {}
    for f in glob.glob(os.path.join(W, "load", "*.json")):
        j = last_json(read(f))
        if j and "load" in j:  # N.json: the daemon's default (backend_sampling = auto: on for cuda);
            host = os.path.basename(f).endswith("host.json")   # Nhost.json: backend_sampling = false
            ld[f'{j["load"]["streams"]}{" host" if host else ""}'] = dict(j["load"], backend_sampling=not host)
    res["load"] = ld
    # the same plans against llama-server (step peer): llama/load-N.json
    sv = {}
    for f in glob.glob(os.path.join(W, "llama", "load-*.json")):
        j = last_json(read(f))
        if j and "load" in j:
            sv[j["load"]["streams"]] = j["load"]
    res["llama_server_load"] = sv
    j = last_json(read(os.path.join(W, "load", "ttft4k.json")))
    res["ttft4k"] = j.get("ttft4k") if j else None

    def g(label, key):
        j = runs.get(label)
        return j.get(key) if j and j.get("ok") else None

    base = COMBOS[0]
    rows = [
        ("tg128 d0", g(bestc, "tg_tps"), g(base, "tg_tps"), llama(0, 128, 0), True, 1),
        ("tg128 d4096", g("best-d4096", "tg_tps"), g("base-d4096", "tg_tps"), llama(0, 128, 4096), True, 1),
        ("pp512", g(bestc, "pp_tps"), g(base, "pp_tps"), llama(512, 0, 0), False, 0),
        ("pp2048", g("best-p2048b4", "pp_tps"), g("base-p2048b4", "pp_tps"), llama(2048, 0, 0), False, 0),
        ("b4 (tok/s in all)", g("best-p2048b4", "tg_batch_tps"), g("base-p2048b4", "tg_batch_tps"), llama_b(4), True, 4),
        ("b16 (tok/s in all)", g("best-b16", "tg_batch_tps"), g("base-b16", "tg_batch_tps"), llama_b(16), True, 16),
    ]
    for n in (1, 16, 64):
        d = dm.get(n, {})
        rows.append((f"daemon {n} stream{'s' if n > 1 else ''}", d.get("tps"), None, llama_b(n), True, n))
    trows, jrows = [], []
    for name, ours, basev, ll, is_tg, B in rows:
        ratio = ours / ll if ours and ll else None
        wgbs = model_gb * ours / B if is_tg and ours and model_gb else None
        jrows.append({"row": name, "ours_best": ours, "ours_baseline": basev, "llama_cpp": ll, "ratio": ratio,
                      "weight_gbps": wgbs, "bw_frac": wgbs / bw if wgbs and bw else None})
        trows.append([name, fnum(ours), fnum(basev), fnum(ll), fnum(ratio, "{:.2f}x"), fnum(wgbs),
                      fnum(wgbs / bw * 100 if wgbs and bw else None, "{:.1f}%")])
    res["table"] = jrows

    ab = []
    b0 = g(base, "tg_tps")
    for c in COMBOS:
        j = runs.get(c)
        e = agreement(W, c) if c != base else 0.0
        ab.append([c.replace("-", "/"), fnum(j and j.get("pp_tps")), fnum(j and j.get("tg_tps")),
                   fnum(j["tg_tps"] / b0 if j and j.get("tg_tps") and b0 else None, "{:.2f}x"),
                   "ref" if c == base else fnum(e, "{:.1e}"),
                   "ok" if j and j.get("ok") else ("not cuda" if j else "failed")])
    cpu = runs.get("cpu")
    ab.append(["cpu -t 16 (pp128/tg32)", fnum(cpu and cpu.get("pp_tps")), fnum(cpu and cpu.get("tg_tps")), "", "",
               "ok" if cpu and cpu.get("ok") else "failed"])

    # cuda_gemm A/B/C (step gemm): runs gemm-<tiled|mma|imma>-<run>
    gab, gj = [], {}
    for run, what in (("p512b4", "pp512 / b4"), ("p2048b16", "pp2048 / b16"), ("p128b64", "b64"), ("p8192", "pp8192")):
        t, m, i8 = runs.get(f"gemm-tiled-{run}"), runs.get(f"gemm-mma-{run}"), runs.get(f"gemm-imma-{run}")
        if not t and not m and not i8:
            continue
        def v(j, k):
            return j.get(k) if j and j.get("ok") else None
        for k, lab in (("pp_tps", "pp"), ("tg_batch_tps", "tg batch (in all)")):
            a, b, c = v(t, k), v(m, k), v(i8, k)
            if a is None and b is None and c is None:
                continue
            gj[f"{run}.{k}"] = {"tiled": a, "mma": b, "imma": c}
            gab.append([f"{what}: {lab}", fnum(a), fnum(b), fnum(c), fnum(b / a if a and b else None, "{:.2f}x"),
                        fnum(c / b if b and c else None, "{:.2f}x")])
    gagree = read(os.path.join(W, "agree", "gemm.txt")).strip()
    gagree8 = read(os.path.join(W, "agree", "gemm_imma.txt")).strip()
    res["gemm_ab"] = {"runs": gj, "logits_mma_vs_tiled": gagree or None, "logits_imma_vs_mma": gagree8 or None}

    steps = []
    for k, v in facts.items():
        if k.startswith("step."):
            p = v.split("\t")
            steps.append([k[5:], p[0], (p[1] + " s") if len(p) > 1 and p[1] else "", p[2] if len(p) > 2 else ""])
    res["steps"] = {s[0]: {"status": s[1], "time": s[2], "note": s[3]} for s in steps}
    for name in ("ncu_summary.json",):
        p = os.path.join(W, name)
        if os.path.exists(p):
            try:
                res["ncu"] = json.load(open(p))
            except ValueError:
                pass
    res["bench_cuda"] = jsonl(os.path.join(W, "bench_cuda.jsonl"))
    res["test_cuda"] = {"stats": [l for l in read(os.path.join(W, "test_cuda.out")).splitlines() if l.startswith("stats:")]}
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)

    hdr = facts.get("fact.device", "?")
    print(f"\n===== SUMMARY  {hdr}; copy BW {fnum(bw, '{:.0f}')} GB/s; model {fnum(model_gb, '{:.3f}')} GB of tensors; "
          f"best combo {bestc.replace('-', '/')} (matvec/fuse/graphs)")
    table(["row (tokens/s)", "ours best", "ours f32/0/0", "llama.cpp", "ours/llama", "weight GB/s", "of BW"], trows)
    print("  llama.cpp: llama-bench -fa 1 (tg, pp rows; the median of the warm samples), llama-batched-bench 128+128 S_TG (b and daemon rows);"
          " daemon: generated tokens / wall time of the batch;\n  weight GB/s = model tensor bytes x steps/s"
          " (tokens/s / streams), of BW = of the measured copy bandwidth")
    if dm:
        print("  daemon TTFT ms (median / max): " + ", ".join(
            f"{n} streams {fnum(v.get('ttft_ms_median'), '{:.0f}')} / {fnum(v.get('ttft_ms_max'), '{:.0f}')}"
            for n, v in sorted(dm.items())))
    if ld or "step.load" in facts:
        print("\nload (tests/load/loadgen.py --mode ctl: smollm3ctl clients straight to the daemon on cuda)")
        def srv(n, key):
            v = sv.get(n)
            return v.get(key) if v and not v.get("errors") else None
        table(["streams", "requests", "errors", "tokens/s in all", "requests/s", "TTFT p50 ms", "TTFT p99 ms",
               "ITL p50 ms", "ITL p99 ms", "llama.cpp b", "llama-server", "ratio", "server ITL p99"],
              [[str(v["streams"]) + ("" if v.get("backend_sampling") else " (host sampler)"), str(v["requests"]), str(v["errors"]), fnum(v.get("tokens_per_s")), fnum(v.get("requests_per_s"), "{:.2f}"),
                fnum(v.get("ttft_ms_p50")), fnum(v.get("ttft_ms_p99")), fnum(v.get("itl_ms_p50")), fnum(v.get("itl_ms_p99")),
                fnum(llama_b(v["streams"])), fnum(srv(v["streams"], "tokens_per_s")),
                (f'{v["tokens_per_s"] / srv(v["streams"], "tokens_per_s"):.2f}x'
                 if v.get("tokens_per_s") and srv(v["streams"], "tokens_per_s") else "-"),
                fnum(srv(v["streams"], "itl_ms_p99"))]
               for n, v in sorted(ld.items(), key=lambda kv: (kv[1]["streams"], not kv[1]["backend_sampling"]))]
              or [["-", "no result"] + [""] * 11])
    if res.get("ttft4k"):
        t4 = res["ttft4k"]
        print(f"  TTFT of a ~4K-token prompt on the idle daemon: {fnum(t4.get('ttft_ms_median'))} ms median "
              f"(prompts of {t4.get('prompt_tokens')} tokens: {t4.get('ttft_ms')} ms)")
    print("\nknob A/B (pp512 / tg128, tokens/s; agreement: logits of an 8-token step vs f32/0/0, rel L2)")
    table(["matvec/fuse/graphs", "pp512", "tg128", "tg vs base", "agreement", "status"], ab)
    if any(r["paged"] or r["tiled"] for r in res["attn_ab"]) or res["bench_cuda_attn"]:
        e = res["attn_agreement_tiled_vs_paged"]
        print(f"\ncuda_attn A/B (smollm3 bench, tokens/s, combination {facts.get('fact.attn_combo', '?')}; logits of a "
              f"40-token step vs paged, rel L2: tiled {fnum(e, '{:.1e}')}, prefill "
              f"{fnum(res['attn_agreement_prefill_vs_paged'], '{:.1e}')})")
        table(["row", "paged", "tiled", "prefill", "tiled/paged", "prefill/paged"], attn_rows)
        if res["bench_cuda_attn"]:
            print()
            attn_kernels(os.path.join(W, "attn.jsonl"))
    if gab or gagree or gagree8:
        print(f"\ncuda_gemm A/B/C (tokens/s, best combination; logits of a 40-token step, rel L2: mma vs tiled "
              f"{gagree or '?'}, imma vs mma {gagree8 or '?'})")
        table(["run", "tiled", "mma", "imma", "mma/tiled", "imma/mma"], gab or [["-", "no result", "", "", "", ""]])
    print("\nsteps")
    table(["step", "status", "time", "note"], steps, left=(0, 1, 3))
    nfail = sum(1 for s in steps if s[1] == "fail")
    print(f"\n{len(steps)} steps: {sum(1 for s in steps if s[1] == 'pass')} passed, {nfail} failed, "
          f"{sum(1 for s in steps if s[1] == 'skipped')} skipped; results: {os.path.join(OUT, 'results.json')}")
    return 0


# ---------------------------------------------------------------- the quick mode (check.sh --quick)

def stats_delta(a, b):
    """The engine's counters between two `smollm3ctl stats --json` snapshots: one line."""
    try:
        x, y = json.load(open(a)), json.load(open(b))
    except (OSError, ValueError):
        return None
    d = {k: y[k] - x.get(k, 0) for k in y if isinstance(y[k], (int, float)) and not isinstance(y[k], bool)
         and isinstance(x.get(k, 0), (int, float))}
    n = d.get("engine_steps") or 0
    out = {"delta": d}
    if n:
        out["steps"] = n
        out["mean_batch"] = d.get("step_tokens_total", 0) / n
        out["ms_per_step"] = d.get("step_ms_total", 0) / n
        out["model_ms_per_step"] = d.get("forward_ms_total", 0) / n
    # counters a newer daemon may have (graph replays, launches, kernels): per step
    out["per_step"] = {k: v / n for k, v in d.items() if n and re.search(r"graph|replay|launch|kernel", k)}
    return out


def stats_line(s):
    if not s or not s.get("steps"):
        return "engine: no steps counted"
    t = (f"engine {s['steps']} steps, mean batch {s['mean_batch']:.1f} tokens, {s['ms_per_step']:.2f} ms a step "
         f"(model {s['model_ms_per_step']:.2f}, host {s['ms_per_step'] - s['model_ms_per_step']:.2f})")
    if s["per_step"]:
        t += "; per step: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(s["per_step"].items()))
    return t


def llama_quick(W):
    """llama.cpp's figures of the quick mode: {(n_prompt, n_gen, n_depth): warm median}, batched, server."""
    d = os.path.join(W, "q", "llama")
    lb = {}
    for name in ("bench.jsonl", "depth.jsonl"):
        for r in jsonl(os.path.join(d, name)):
            if "avg_ts" in r:
                lb[(r.get("n_prompt", 0), r.get("n_gen", 0), r.get("n_depth", 0))] = {
                    "warm_median": warm_ts(r), "samples": r.get("samples_ts"), "avg": r.get("avg_ts")}
    bb = {r["pl"]: r for r in jsonl(os.path.join(d, "batched.jsonl")) if "pl" in r}
    sv = {}
    for f in glob.glob(os.path.join(d, "server-*.json")):
        j = last_json(read(f))
        if j and "load" in j:
            sv[j["load"]["streams"]] = j["load"]
    render = None
    try:
        render = json.load(open(os.path.join(d, "render.json")))
    except (OSError, ValueError):
        pass
    return lb, bb, sv, render


def llama_brief(d):
    W = os.path.dirname(os.path.dirname(d.rstrip("/")))
    lb, bb, sv, _ = llama_quick(W)
    for (p, n, dep), v in sorted(lb.items()):
        what = f"pp{p}" if p else f"tg{n}"
        print(f"  llama-bench {what}{f' @ d{dep}' if dep else ''}: {fnum(v['warm_median'])} tokens/s "
              f"(warm median; samples {', '.join(f'{x:.0f}' for x in v['samples'] or [])})")
    for pl, r in sorted(bb.items()):
        print(f"  llama-batched-bench {pl} x ({r.get('pp')}+{r.get('tg')}): tg {fnum(r.get('speed_tg'))} tokens/s in all")
    return 0


def q_rows(W):
    out = []
    for line in read(os.path.join(W, "q", "rows.tsv")).splitlines():
        p = line.split("\t")
        if len(p) >= 3:
            out.append((p[0], "" if p[1] == "-" else p[1], p[2].split()))
    return out


def q_bench(W, row, lab, dry):
    """The row's run LAB (A, B, C) with ok = it ran on cuda (anywhere in a dry run or on another backend)."""
    text = read(os.path.join(W, "q", "sb", f"{row}.{lab}.out"))
    j = last_json(text)
    if not j or "tg_tps" not in j:
        return None
    m = re.search(r"^backend: (.*)$", text, re.M)
    j["backend_line"] = m.group(1) if m else None
    # the runs must have run where they were sent: cuda (--backend auto, the dry run: anywhere)
    j["ok"] = str(j.get("backend", "")).startswith("cuda") or dry
    return j


def q_agree(W, row, step):
    t = read(os.path.join(W, "q", "lg", f"{row}.{step}.txt")).strip()
    try:
        return float(t)
    except ValueError:
        return None


def q_state(facts, row):
    v = facts.get(f"row.{row}", "ok\t")
    st, _, note = v.partition("\t")
    return st, note


def q_eligible(W, facts, row, checks, dry):
    st, _ = q_state(facts, row)
    a = q_bench(W, row, "A", dry)
    if st != "ok" or not a or not a["ok"]:
        return None
    if row != "default":
        for c in checks:
            e = q_agree(W, row, c)
            if e is None or not e < AGREE_MAX:
                return None
    return a["tg_tps"]


def quick_best(W):
    facts = kv(W)
    dry = "dry run" in facts.get("fact.mode", "") or facts.get("fact.q_backend", "cuda") != "cuda"
    want = os.environ.get("GPU_CHECK_BEST")
    rows = q_rows(W)
    if want and any(r[0] == want for r in rows):
        print(want)
        return 0
    base = q_eligible(W, facts, "default", [], dry)
    best, bt = "default", base
    for row, _, checks in rows[1:]:
        t = q_eligible(W, facts, row, checks, dry)
        if t and (bt is None or t > bt):
            best, bt = row, t
    if best != "default" and base and bt < 1.01 * base:
        best = "default"      # within 1%: not worth a second daemon run
    print(best)
    return 0


STATE_TEXT = {"ok": "ok", "refused": "not in this build", "absent": "not in this build", "same": "= default",
              "failed": "FAILED", "dropped": "dropped (time)"}


def quick(W, OUT):
    facts = kv(W)
    dry = "dry run" in facts.get("fact.mode", "")
    anyb = dry or facts.get("fact.q_backend", "cuda") != "cuda"   # runs count wherever they ran
    P, N, D1, D2, PL, MAXT = (int(x) for x in (facts.get("fact.q_sizes") or "512 128 4096 16384 8192 128").split())
    streams = [int(x) for x in (facts.get("fact.q_streams") or "16 64 256").split()]
    bw = float(facts.get("fact.bw_gbps") or 0) or None
    model_gb = float(facts.get("fact.model_gb") or 0) or None
    best = facts.get("fact.best_row", "default")
    lb, bb, sv, render = llama_quick(W)
    ll_tg, ll_pp, ll_ppl = (lb.get((0, N, 0)) or {}).get("warm_median"), (lb.get((P, 0, 0)) or {}).get("warm_median"), \
        (lb.get((PL, 0, 0)) or {}).get("warm_median")
    ll_d1, ll_d2 = (lb.get((0, N, D1)) or {}).get("warm_median"), (lb.get((0, N, D2)) or {}).get("warm_median")

    res = {"mode": facts.get("fact.mode"), "facts": {k[5:]: v for k, v in facts.items() if k.startswith("fact.")},
           "sizes": {"p": P, "n": N, "d1": D1, "d2": D2, "pl": PL, "max_tokens": MAXT, "streams": streams},
           "best_row": best, "rows": [],
           "llama": {"bench": {f"p{k[0]}-n{k[1]}-d{k[2]}": v for k, v in lb.items()},
                     "batched": bb, "server": sv, "render_check": render}}

    def served(row):
        d = os.path.join(W, "q", "serve", row)
        out = {}
        for n in streams:
            j = last_json(read(os.path.join(d, f"{n}.json")))
            st = stats_delta(os.path.join(d, f"{n}.st0"), os.path.join(d, f"{n}.st1"))
            if j and "load" in j:
                out[n] = dict(j["load"], engine=st)
        t = last_json(read(os.path.join(d, "ttft4k.json")))
        return out, (t or {}).get("ttft4k")

    trows, plot_rows = [], []
    for row, setting, checks in q_rows(W):
        st, note = q_state(facts, row)
        a, b, c = (q_bench(W, row, x, anyb) for x in "ABC")
        # a row that is not "ok" ran with the defaults (an unread variable) or not at all: no figures
        g = lambda j, k: j.get(k) if j and j.get("ok") and st == "ok" else None  # noqa: E731
        tg, pp = g(a, "tg_tps"), g(a, "pp_tps")
        pps = [x for x in (pp, g(b, "pp_tps")) if x]          # two pp512 samples (A and B)
        pp = median(pps) if pps else None
        d1, d2, ppl = g(b, "tg_tps"), g(c, "tg_tps"), g(c, "pp_tps")
        wgbs = model_gb * tg if tg and model_gb else None
        agree = {s_: (0.0 if row == "default" else q_agree(W, row, s_)) for s_ in checks}
        load, ttft = served(row)
        rj = {"row": row, "settings": setting, "state": st, "note": note, "pp": pp, "tg": tg, "tg_d1": d1,
              "tg_d2": d2, "pp_long": ppl, "weight_gbps": wgbs, "bw_frac": wgbs / bw if wgbs and bw else None,
              "vs_llama_tg": tg / ll_tg if tg and ll_tg else None, "logits_rel_l2": agree,
              "knob_line": (a or {}).get("backend_line"), "load": load, "ttft4k": ttft,
              "runs": {"A": a, "B": b, "C": c}}
        res["rows"].append(rj)
        if row == "default":
            lg = "ref"
        elif st != "ok":
            lg = "—"
        else:
            parts = []
            for s_, e in agree.items():
                parts.append(f"{s_} {fnum(e, '{:.1e}')}{'' if e is not None and e < AGREE_MAX else ' BAD' if e is not None else ''}")
            lg = ", ".join(parts)
        cells = [row + (" *" if row == best and row != "default" else ""), STATE_TEXT.get(st, st), fnum(tg),
                 fnum(wgbs / bw * 100 if wgbs and bw else None, "{:.1f}%"),
                 fnum(tg / ll_tg if tg and ll_tg else None, "{:.2f}x"), fnum(d1), fnum(d2), fnum(pp), fnum(ppl),
                 fnum((ttft or {}).get("ttft_ms_median"), "{:.0f}")]
        for n in streams:
            v = load.get(n)
            cells.append(f"{fnum(v.get('tokens_per_s'), '{:.0f}')} / {fnum(v.get('itl_ms_p99'))}" if v else "—")
        cells.append(lg)
        trows.append(cells)
        if st == "ok" and tg:
            plot_rows.append((row, tg))
    # llama.cpp's rows
    if lb or sv:
        cells = ["llama.cpp", "peer", fnum(ll_tg), fnum(model_gb * ll_tg / bw * 100 if ll_tg and model_gb and bw else None,
                 "{:.1f}%"), "1.00x" if ll_tg else "—", fnum(ll_d1), fnum(ll_d2), fnum(ll_pp), fnum(ll_ppl), "—"]
        for n in streams:
            v = sv.get(n)
            cells.append(f"{fnum(v.get('tokens_per_s'), '{:.0f}')} / {fnum(v.get('itl_ms_p99'))}" if v else "—")
        trows.append(cells + ["—"])
    if bb:
        trows.append(["llama-batched-bench", "peer"] + ["—"] * 8 +
                     [f"{fnum((bb.get(n) or {}).get('speed_tg'), '{:.0f}')} / —" if bb.get(n) else "—" for n in streams]
                     + ["—"])

    # the targets of kernels/cuda/NOTES.md ("Next device run: what to look at")
    def row_j(r):
        return next((x for x in res["rows"] if x["row"] == r), None)
    ncu = None
    try:
        ncu = json.load(open(os.path.join(W, "q", "ncu_summary.json")))
    except (OSError, ValueError):
        pass
    res["ncu"] = ncu
    mid = 64 if 64 in streams else streams[len(streams) // 2]
    targets = []
    for r in dict.fromkeys(["default", best]):
        j = row_j(r)
        if not j:
            continue
        l64 = j["load"].get(mid) or {}
        bbt = (bb.get(mid) or {}).get("speed_tg")
        ttft = (j["ttft4k"] or {}).get("ttft_ms_median")
        for name, val, goal, ok in (
                ("one stream >= 60% of copy BW", j["bw_frac"], "60%", j["bw_frac"] is not None and j["bw_frac"] >= 0.6),
                (f"{mid} streams >= 2x llama-batched-bench", l64.get("tokens_per_s") / bbt if l64.get("tokens_per_s") and bbt else None,
                 "2x", bool(l64.get("tokens_per_s") and bbt and l64["tokens_per_s"] >= 2 * bbt)),
                (f"ITL p99 at {mid} streams <= 25 ms", l64.get("itl_ms_p99"), "25 ms",
                 l64.get("itl_ms_p99") is not None and l64["itl_ms_p99"] <= 25),
                (f"pp{P} >= 2x llama-bench (warm median)", j["pp"] / ll_pp if j["pp"] and ll_pp else None, "2x",
                 bool(j["pp"] and ll_pp and j["pp"] >= 2 * ll_pp)),
                ("TTFT of a 4K prompt <= 150 ms", ttft, "150 ms", ttft is not None and ttft <= 150)):
            targets.append({"row": r, "target": name, "value": val, "met": ok if val is not None else None})
    if ncu:   # a step is cut at the embedding's launches: without them, no per-step count
        k = ncu.get("kernels") if "step" in str(ncu.get("window")) else None
        targets.append({"row": best, "target": "kernels per decode step <= 150", "value": k,
                        "met": None if k is None else k <= 150})
    graph = {}
    for r in dict.fromkeys(["default", best]):
        j = row_j(r)
        for n, v in ((j or {}).get("load") or {}).items():
            ps = (v.get("engine") or {}).get("per_step") or {}
            if ps:
                graph[f"{r} {n}"] = ps
    targets.append({"row": best, "target": "one graph replay per step (the daemon's counters)",
                    "value": graph or None,
                    "met": None if not graph else all(abs(x - 1) < 0.05 for g_ in graph.values()
                                                      for k, x in g_.items() if "replay" in k) or None})
    res["targets"] = targets

    # prompt tokens: ours (the gateway) against llama-server, per level: within 10%
    ptoks = []
    dl = (row_j("default") or {}).get("load") or {}
    for n in streams:
        o, s_ = dl.get(n), sv.get(n)
        po = o["prompt_tokens"] / o["ok"] if o and o.get("ok") else None
        ps = s_["prompt_tokens"] / s_["ok"] if s_ and s_.get("ok") else None
        ptoks.append({"streams": n, "ours": o and o.get("prompt_tokens"), "ours_ok": o and o.get("ok"),
                      "server": s_ and s_.get("prompt_tokens"), "server_ok": s_ and s_.get("ok"),
                      "ratio": ps / po if po and ps else None,
                      "within_10pct": abs(ps / po - 1) <= 0.1 if po and ps else None})
    res["prompt_tokens"] = ptoks

    steps, drops = [], []
    for k, v in facts.items():
        if k.startswith("step."):
            p = v.split("\t")
            steps.append([k[5:], p[0], (p[1] + " s") if len(p) > 1 and p[1] else "", p[2] if len(p) > 2 else ""])
        elif k.startswith("drop."):
            drops.append(v.replace("\t", ": "))
    res["steps"] = {x[0]: {"status": x[1], "time": x[2], "note": x[3]} for x in steps}
    res["drops"] = drops
    res["test_cuda"] = {"stats": [l for l in read(os.path.join(W, "test_cuda.out")).splitlines() if l.startswith("stats:")]}
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    plots = plot_quick(OUT, plot_rows, ll_tg, res, streams, sv, bb, N, dry)

    # ---- the text
    dev = facts.get("fact.device", "CPU (dry run)" if dry else "?")
    print(f"\n===== QUICK SUMMARY{' (DRY RUN: the CPU, fixture model, tiny sizes)' if dry else ''}  {dev}; "
          f"copy BW {fnum(bw, '{:.0f}')} GB/s; model {fnum(model_gb, '{:.3f}')} GB of weights; best row {best}")
    hdr = ["row", "state", f"tg{N}", "% BW", "vs llama", f"d{D1}", f"d{D2}", f"pp{P}", f"pp{PL}", "TTFT ms"] + \
          [f"{n} str tok/s / ITL p99" for n in streams] + ["logits rel L2"]
    table(hdr, trows)
    print(f"  tokens/s; tg{N} one stream (% BW: weight bytes x steps/s of the copy bandwidth; vs llama: llama-bench "
          f"tg{N}, warm median); d{D1} / d{D2}: tg{N} at that depth; pp{P}: median of two runs; TTFT: a prompt of "
          f"{facts.get('fact.ttft_words', '4000')} words, ~1 token each (median of 3, idle daemon); streams: the daemon behind smollm3-gateway (loadgen --no-think, {MAXT} tokens a "
          f"request), llama.cpp's: llama-server -np 64 / llama-batched-bench {MAXT}+{MAXT}; logits: rel L2 vs the "
          f"default's (s8: an 8-token step, s40: 40 tokens), BAD >= {AGREE_MAX}; * the best row (served)")
    notes = [(x["row"], STATE_TEXT.get(x["state"], x["state"]), x["note"]) for x in res["rows"]
             if x["state"] != "ok" and x["note"]]
    for r, st, nt in notes:
        print(f"  {r}: {st}: {nt}")
    print("\nprompt tokens, the same plans (ours: smollm3-gateway; llama-server): within 10%?")
    for p in ptoks:
        print(f"  {p['streams']} streams: ours {p['ours'] if p['ours'] is not None else '—'} ({p['ours_ok'] or 0} requests), "
              f"llama-server {p['server'] if p['server'] is not None else '—'} ({p['server_ok'] or 0}): "
              f"ratio {fnum(p['ratio'], '{:.3f}')} {'' if p['within_10pct'] is None else 'ok' if p['within_10pct'] else 'MISMATCH'}")
    if render:
        print(f"  render check: llama-server's /apply-template {'==' if render.get('same_text') else '!='} smollm3 template "
              f"(tokens: server {render.get('server_tokens')}, ours {render.get('ours_tokens')})")
    print("\nengine per level (the daemon's stats between the level's start and end)")
    for r in dict.fromkeys(["default", best]):
        for n, v in sorted(((row_j(r) or {}).get("load") or {}).items()):
            print(f"  {r} {n} streams: {stats_line(v.get('engine'))}")
    print("\ntargets (kernels/cuda/NOTES.md, 'Next device run: what to look at')")
    for t in targets:
        v = t["value"]
        vs = fnum(v * 100, "{:.1f}%") if "BW" in t["target"] and isinstance(v, float) else \
            fnum(v, "{:.2f}x") if "x " in t["target"] and isinstance(v, float) else \
            json.dumps(v) if isinstance(v, dict) else fnum(v) if isinstance(v, float) else str(v if v is not None else "—")
        print(f"  {t['row']:<16} {t['target']:<44} {vs:<12} {'met' if t['met'] else '—' if t['met'] is None else 'NOT met'}")
    print("\ncorrectness")
    for k in ("test_cuda", "memcheck_ops", "racecheck_ops", "memcheck_fattn", "racecheck_fattn"):
        if f"fact.{k}" in facts:
            print(f"  {k}: {facts[f'fact.{k}']}")
    if ncu:
        print(f"  ncu ({best}): {ncu.get('window')}; {ncu.get('kernels')} kernels, {fnum(ncu.get('kernel_us'), '{:.0f}')} us")
    print("\nsteps")
    table(["step", "status", "time", "note"], steps, left=(0, 1, 3))
    print(f"\ndropped ({len(drops)}):" + ("" if drops else " none"))
    for d_ in drops:
        print("  " + d_)
    nfail = sum(1 for x in steps if x[1] == "fail")
    print(f"\n{len(steps)} steps: {sum(1 for x in steps if x[1] == 'pass')} passed, {nfail} failed, "
          f"{sum(1 for x in steps if x[1] == 'skipped')} skipped; files: {os.path.join(OUT, 'results.json')}, "
          + ", ".join(plots))
    return 0


def svg_bars(x0, y0, w, h, title, groups, series, colors, ylabel):
    """A grouped bar chart as SVG elements: groups = [(label, [value per series])]."""
    out = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" font-size="14">{title}</text>']
    vals = [v for _, vs in groups for v in vs if v]
    top = max(vals) * 1.1 if vals else 1.0
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    for i in range(5):
        v = top * i / 4
        y = y0 + h - h * i / 4
        out.append(f'<text x="{x0 - 4}" y="{y + 4}" text-anchor="end" font-size="10">{v:.0f}</text>')
        out.append(f'<line x1="{x0}" y1="{y}" x2="{x0 + w}" y2="{y}" stroke="#ddd"/>')
    out.append(f'<text x="{x0 - 40}" y="{y0 + h / 2}" font-size="11" transform="rotate(-90 {x0 - 40} {y0 + h / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    ng, ns = max(len(groups), 1), max(len(series), 1)
    gw = w / ng
    bw_ = gw * 0.8 / ns
    for gi, (lab, vs) in enumerate(groups):
        gx = x0 + gi * gw + gw * 0.1
        for si, v in enumerate(vs):
            if not v:
                continue
            bh = h * v / top
            out.append(f'<rect x="{gx + si * bw_:.1f}" y="{y0 + h - bh:.1f}" width="{bw_ * 0.95:.1f}" height="{bh:.1f}" '
                       f'fill="{colors[si % len(colors)]}"><title>{series[si]}: {v:.1f}</title></rect>')
        out.append(f'<text x="{gx + gw * 0.4:.1f}" y="{y0 + h + 12}" font-size="10" text-anchor="end" '
                   f'transform="rotate(-35 {gx + gw * 0.4:.1f} {y0 + h + 12})">{lab}</text>')
    for si, name in enumerate(series):   # the legend, right of the plot
        out.append(f'<rect x="{x0 + w + 12}" y="{y0 + 4 + 14 * si}" width="10" height="10" fill="{colors[si % len(colors)]}"/>')
        out.append(f'<text x="{x0 + w + 26}" y="{y0 + 13 + 14 * si}" font-size="10">{name}</text>')
    return out


def plot_quick(OUT, rows, ll_tg, res, streams, sv, bb, N, dry):
    """quick.svg (standard library) and, where matplotlib imports, quick.png: tokens/s per row (tg, one
    stream) against llama-bench, and per stream count: the default and the best row against llama.cpp."""
    colors = ["#4878d0", "#ee854a", "#6acc64", "#d65f5f"]
    best = res["best_row"]
    load = {r["row"]: r["load"] for r in res["rows"]}
    sgroups = [(f"{n} streams", [(load.get("default") or {}).get(n, {}).get("tokens_per_s"),
                                  (load.get(best) or {}).get(n, {}).get("tokens_per_s") if best != "default" else None,
                                  (sv.get(n) or {}).get("tokens_per_s"), (bb.get(n) or {}).get("speed_tg")])
               for n in streams]
    sseries = ["ours: default", f"ours: {best}", "llama-server", "llama-batched-bench"]
    rgroups = [(r, [t, None]) for r, t in rows] + ([("llama.cpp", [None, ll_tg])] if ll_tg else [])
    W_, H_ = 980, 760
    e = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W_}" height="{H_}" font-family="sans-serif">',
         f'<rect width="{W_}" height="{H_}" fill="white"/>',
         f'<text x="{W_ / 2}" y="20" text-anchor="middle" font-size="15">check.sh --quick'
         f'{" (DRY RUN, CPU)" if dry else ""}: {res["facts"].get("device", "")}</text>']
    e += svg_bars(90, 60, W_ - 290, 240, f"tg{N}, one stream, per row (tokens/s)", rgroups, ["ours", "llama-bench"],
                  colors, "tokens/s")
    e += svg_bars(90, 440, W_ - 290, 240, "streams through the server (tokens/s in all)", sgroups, sseries, colors,
                  "tokens/s")
    e.append("</svg>")
    out = []
    with open(os.path.join(OUT, "quick.svg"), "w") as f:
        f.write("\n".join(e) + "\n")
    out.append(os.path.join(OUT, "quick.svg"))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:   # noqa: BLE001 - no matplotlib: the SVG alone
        return out
    try:
        png_quick(OUT, plt, rows, ll_tg, sgroups, sseries, streams, colors, N)
        out.append(os.path.join(OUT, "quick.png"))
    except Exception as e:   # noqa: BLE001 - the summary matters more than the picture
        print(f"quick.png: matplotlib failed: {e}", file=sys.stderr)
    return out


def png_quick(OUT, plt, rows, ll_tg, sgroups, sseries, streams, colors, N):
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(11, 9))
    names = [r for r, _ in rows]
    a1.bar(names, [t for _, t in rows], color=colors[0], label="ours")
    if ll_tg:
        a1.axhline(ll_tg, color=colors[1], ls="--", label=f"llama-bench tg{N} {ll_tg:.0f}")
    a1.set_ylabel("tokens/s")
    a1.set_title(f"tg{N}, one stream, per row")
    a1.tick_params(axis="x", rotation=35)
    a1.legend()
    x = list(range(len(streams)))
    for si, name in enumerate(sseries):
        ys = [g[1][si] or 0 for g in sgroups]
        if any(ys):
            a2.bar([i + si * 0.2 - 0.3 for i in x], ys, 0.2, label=name, color=colors[si])
    a2.set_xticks(x)
    a2.set_xticklabels([f"{n} streams" for n in streams])
    a2.set_ylabel("tokens/s in all")
    a2.set_title("streams through the server")
    a2.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "quick.png"), dpi=90)
    plt.close(fig)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "bench-cuda":
        return bench_cuda(args[0])
    if cmd == "ncu":
        top = int(args[args.index("--top") + 1]) if "--top" in args else 12
        jo = args[args.index("--json") + 1] if "--json" in args else None
        return ncu(args[0], top, jo)
    if cmd == "agree":
        return agree(args[0], args[1])
    if cmd == "bench-brief":
        text = read(args[0])
        j = last_json(text)
        m = re.search(r"^backend: (.*)$", text, re.M)
        if not j:
            err = [l for l in text.splitlines() if l.strip()]
            print("no result" + (": " + err[-1][:160] if err else ""))
            return 1
        print(" ".join(f"{k[:-4]} {j[k]:.1f}" for k in ("pp_tps", "tg_tps", "tg_batch_tps") if k in j)
              + f"  [{m.group(1) if m else j.get('backend', '?')}]")
        return 0
    if cmd == "attn":
        return attn_kernels(args[0])
    if cmd == "best":
        return best(args[0])
    if cmd == "final":
        return final(args[0], args[1])
    if cmd == "stats-delta":
        st = stats_delta(args[0], args[1])
        print(stats_line(st))
        return 0 if st else 1
    if cmd == "llama-brief":
        return llama_brief(args[0])
    if cmd == "quick-best":
        return quick_best(args[0])
    if cmd == "quick":
        return quick(args[0], args[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
