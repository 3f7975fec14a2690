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
                return r.get("avg_ts")
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
    print("  llama.cpp: llama-bench -fa 1 (tg, pp rows), llama-batched-bench 128+128 S_TG (b and daemon rows);"
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
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
