#!/usr/bin/env python3
"""spec_bench.py [--build build] [-n 256] [--reps 2] - `make bench-spec`:
speculative decoding by prompt lookup on the three tasks of
tests/bench/spec/tasks.json (editing a 300-line code file, summarising a
report with quotes, open chat).

1. SmolLM2-135M-Instruct end to end, through the daemon (build/bin/smollm3d,
   its chat template, greedy, N tokens): decode tokens/s (Done.timings) with
   and without speculation (the request's speculative field), best of REPS
   alternating runs, tokens per decode step (Usage), and whether the greedy
   tokens are identical (they must be: a difference fails the bench).
2. The synthetic SmolLM3-3B (build/models/smollm3-3b-synth.Q4_K_M.gguf):
   the cost of a verify step of k + 1 positions relative to a 1-token step
   (`smollm3 bench --verify 7`).  Its random weights accept nothing, so the
   3B's acceptance is SmolLM2's on the same task: `smollm3 generate` on
   SmolLM2 drafting as on the 3B (--spec-costs: the 3B's costs choose the
   draft lengths), and the projected 3B speedup is its tokens per verify
   step divided by the verify steps' mean cost relative to a 1-token step
   (steps without a draft cost 1).
3. llama.cpp's prompt-lookup decoding (llama-cpp-python's
   LlamaPromptLookupDecoding, in build/venv-llama) on the same SmolLM2
   prompts, same machine, same run: its decode tokens/s with and without.
4. The task's answer, for a task that has one (code_edit: the file with the
   rename done, made here by str.replace, in a code fence; summary_quotes:
   report.answer.md, a paragraph per section quoting its key sentence, as
   the prompt asks, written for the bench): SmolLM2-135M does neither task
   (it answers the file with prose about it, and the report with a
   paragraph that quotes nothing, often a repetition loop whose acceptance
   swings with the kernels' rounding), so its own acceptance is not that of
   the task.  The answer is decoded with teacher forcing (`smollm3
   generate --force-output`: every step's forward pass runs, the answer's
   token is taken instead of a sample), which is what speculative decoding
   does for a model that gives that answer: (a) on the synthetic 3B itself,
   with the prompt in SmolLM3's own chat template, decode tokens/s with and
   without speculation, measured (no cost model; best of REPS alternating
   runs, as the machine's speed drifts by 20% between minutes); (b)
   SmolLM2 end to end, the same; (c) SmolLM2 drafting with the 3B's costs,
   projected as in 2.

Run from the repository root with build/venv's Python.  Figures on a shared
machine are noisy; the bench reports, it asserts nothing but exactness.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "proto/examples"))
import client as pyclient  # noqa: E402

SMOLLM2 = os.path.join(ROOT, "build/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SYNTH3B = os.path.join(ROOT, "build/models/smollm3-3b-synth.Q4_K_M.gguf")
TASKS = os.path.join(ROOT, "tests/bench/spec")
# SmolLM2's chat template (its default system prompt), for the CLI and llama.cpp
CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n")


def load_tasks():
    tasks = json.load(open(os.path.join(TASKS, "tasks.json")))
    for t in tasks:
        body = open(os.path.join(TASKS, t["file"])).read() if "file" in t else ""
        t["text"] = t["prompt"].replace("{file}", body)
        t["body"] = body
        if "answer" in t:  # the edit done by a script, not by a model
            old, new = t["rename"]
            t["answer_text"] = t["answer"].replace("{edited}", body.replace(old, new))
        if "answer_file" in t:  # an answer written for the bench
            t["answer_text"] = open(os.path.join(TASKS, t["answer_file"])).read()
    return tasks


def generate(a, model, prompt, n, extra):
    """smollm3 generate, greedy; returns (ids, stats: tokens, steps, tps, by_k)."""
    out = subprocess.run([os.path.join(a.build, "bin/smollm3"), "generate", "-m", model, "--prompt", prompt, "-n",
                          str(n), "--temp", "0", "-t", str(a.threads), "--json", "--stats"] + extra,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("spec_bench: smollm3 generate: %s" % out.stderr[-500:])
    m = re.search(r"generate: (\d+) tokens in (\d+) steps .*?, ([0-9.]+) tokens/s", out.stderr)
    by_k = [int(x) for x in re.search(r"steps by draft length 0\.\.7:((?: \d+)+)", out.stderr).group(1).split()]
    return json.loads(out.stdout)["ids"], {"tokens": int(m.group(1)), "steps": int(m.group(2)),
                                           "tps": float(m.group(3)), "by_k": by_k}


def forced(a, t, costs, tmp):
    """Section 4: the task's answer under teacher forcing, on the 3B and on SmolLM2."""
    ans = os.path.join(tmp, "answer-%s.txt" % t["name"])
    open(ans, "w").write(t["answer_text"])
    req = os.path.join(tmp, "request-%s.json" % t["name"])
    json.dump({"messages": [{"role": "user", "content": t["text"]}],
               "chat_template_kwargs": {"enable_thinking": False}}, open(req, "w"))
    out = subprocess.run([os.path.join(a.build, "bin/smollm3"), "template", "-m", SYNTH3B, "--request", req,
                          "--date", "25 November 2026"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("spec_bench: smollm3 template: %s" % out.stderr[-500:])
    p3, p2, force = out.stdout, CHATML % t["text"], ["--force-output", ans]
    res = {}
    for name, model, prompt, n in (("3b", SYNTH3B, p3, a.n_3b), ("smollm2", SMOLLM2, p2, a.n)):
        r = {"spec": {"tps": 0.0}, "plain": {"tps": 0.0}}
        for rep in range(a.reps):
            for mode in (("spec", "plain") if rep % 2 == 0 else ("plain", "spec")):
                ids, st = generate(a, model, prompt, n, force + ([] if mode == "spec" else ["--no-speculative"]))
                if r[mode].get("ids", ids) != ids:
                    sys.exit("spec_bench: %s forced: %s run %d differs" % (t["name"], mode, rep))
                st["ids"] = ids
                st["tps"] = max(st["tps"], r[mode]["tps"])
                r[mode] = st
        r["identical"] = r["spec"]["ids"] == r["plain"]["ids"]
        r["ratio"] = r["spec"]["tps"] / r["plain"]["tps"] if r["plain"]["tps"] else 0.0
        s = r["spec"]
        s["mean_cost"] = sum(c * k for c, k in zip(costs, s["by_k"])) / s["steps"] if name == "3b" else None
        res[name] = r
    res["projected"] = projected(a, t, costs, force)
    return res


def daemon_runs(a, tasks, tmp):
    PB = pyclient.load_pb2(tmp)
    sock = os.path.join(tmp, "d.sock")
    log = open(os.path.join(tmp, "d.log"), "w")
    d = subprocess.Popen([os.path.join(a.build, "bin/smollm3d"), "--model", SMOLLM2, "--listen", "ipc://" + sock,
                          "--threads", str(a.threads)], stdout=log, stderr=subprocess.STDOUT)
    res = {}
    try:
        c = pyclient.Client("ipc://" + sock, PB)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if c.health(2000).ready:
                    break
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
        for t in tasks:
            r = {"spec": {"tps": 0.0}, "plain": {"tps": 0.0}}
            # Predicted Outputs: the task's file (the one being edited) as the prediction
            modes = ("spec", "plain") + (("pred",) if t["body"] and t["name"] == "code_edit" else ())
            if modes[-1] == "pred":
                r["pred"] = {"tps": 0.0}
            if a.prediction_only:
                modes = ("pred", "plain") if "pred" in r else ()
            for rep in range(a.reps):
                for mode in (modes if rep % 2 == 0 else modes[::-1]):
                    req = c.generate_request(t["text"], temperature=0.0, max_tokens=a.n)
                    if mode == "pred":
                        req.generate.prediction = t["body"]
                    else:
                        req.generate.speculative = mode == "spec"
                    rid = c.send(req)
                    ids, done = [], None
                    while done is None:
                        ev = c.recv(600000, rid)
                        if ev is None:
                            sys.exit("spec_bench: no event from the daemon for 600 s")
                        k = ev.WhichOneof("kind")
                        if k == "token" and ev.token.token_id >= 0:
                            ids.append(ev.token.token_id)
                        elif k == "done":
                            done = ev.done
                        elif k == "error":
                            sys.exit("spec_bench: %s: %s" % (t["name"], ev.error.message))
                    m = r[mode]
                    if "ids" in m and m["ids"] != ids:
                        sys.exit("spec_bench: %s: %s run %d differs from run 0" % (t["name"], mode, rep))
                    m["ids"] = ids
                    m["tps"] = max(m["tps"], done.timings.generation_tokens_per_s)
                    m["tokens"] = done.usage.completion_tokens
                    m["steps"] = done.usage.decode_steps
                    m["drafted"] = done.usage.drafted_tokens
                    m["accepted"] = done.usage.accepted_tokens
                    m["pred_accepted"] = done.usage.prediction_accepted_tokens
                    m["pred_rejected"] = done.usage.prediction_rejected_tokens
            if not modes:
                continue
            r["identical"] = r["spec"].get("ids") == r["plain"]["ids"]
            if "pred" in r:
                r["pred_identical"] = r["pred"]["ids"] == r["plain"]["ids"]
            res[t["name"]] = r
    finally:
        d.terminate()
        d.wait(30)
    return res


def verify_costs(a):
    out = subprocess.run([os.path.join(a.build, "bin/smollm3"), "bench", "-m", SYNTH3B, "-p", "64", "-n",
                          str(a.verify_n), "-t", str(a.threads), "--verify", "7", "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("spec_bench: smollm3 bench --verify: %s" % out.stderr[-500:])
    last = json.loads(out.stdout.strip().splitlines()[-1])
    ms = re.search(r"\(([0-9.]+) ms\)", out.stdout)
    # a step of more positions never costs less (a measurement below is noise)
    costs = [1.0]
    for c in last["verify_cost"]:
        costs.append(max(costs[-1], c))
    return costs, float(ms.group(1)) if ms else 0.0


def projected(a, t, costs, extra=()):
    """SmolLM2 drafting with the 3B's costs: tokens per verify step, the
    steps' mean cost, projected speedup."""
    _, st = generate(a, SMOLLM2, CHATML % t["text"], a.n,
                     list(extra) + ["--spec-costs", ",".join("%.4f" % c for c in costs[1:])])
    n, by_k = st["tokens"], st["by_k"]
    steps = sum(by_k)
    cost = sum(c * s for c, s in zip(costs, by_k))
    return {"tokens": n, "steps": steps, "tokens_per_step": n / steps, "mean_cost": cost / steps,
            "speedup": n / cost, "by_k": by_k}


def llama_runs(a, t, tmp):
    py = os.path.join(ROOT, "build/venv-llama/bin/python")
    if not os.path.exists(py):
        return None
    pf = os.path.join(tmp, "prompt-%s.txt" % t["name"])
    open(pf, "w").write(CHATML % t["text"])
    out = subprocess.run([py, os.path.join(ROOT, "tests/bench/spec_llama.py"), SMOLLM2, pf, "-n", str(a.n),
                          "-t", str(a.threads), "--reps", str(a.reps)], capture_output=True, text=True)
    if out.returncode != 0:
        print("spec_bench: llama.cpp run failed: %s" % out.stderr[-300:])
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--verify-n", type=int, default=15)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--n-3b", type=int, default=256, help="tokens of the 3B's forced runs")
    ap.add_argument("--prediction-only", action="store_true",
                    help="only code_edit through the daemon with its file as the prediction, and without")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    for f in (SMOLLM2,) if a.prediction_only else (SMOLLM2, SYNTH3B):
        if not os.path.exists(f):
            sys.exit("spec_bench: %s missing (tests/get_smollm2.sh; smollm3 synth --preset smollm3-3b)" % f)
    tasks = load_tasks()
    tmp = tempfile.mkdtemp(prefix="smollm3-spec-bench-")
    print("spec_bench: SmolLM2-135M through the daemon, greedy, %d tokens, best of %d" % (a.n, a.reps), flush=True)
    e2e = daemon_runs(a, tasks, tmp)
    for n, r in e2e.items():
        if "pred" in r:
            p, o = r["pred"], r["plain"]
            print("%s: Predicted Outputs (the file as the prediction): %.1f t/s vs %.1f t/s without speculation "
                  "(%.2fx), %d tokens in %d steps, prediction tokens accepted %d / rejected %d, same output: %s" % (
                      n, p["tps"], o["tps"], p["tps"] / o["tps"] if o["tps"] else 0.0, p["tokens"], p["steps"],
                      p["pred_accepted"], p["pred_rejected"], "yes" if r["pred_identical"] else "NO"), flush=True)
    if a.prediction_only:
        sys.exit(0 if all(r.get("pred_identical", True) for r in e2e.values()) else 1)
    print("spec_bench: synthetic 3B verify costs", flush=True)
    costs, ms1 = verify_costs(a)
    proj = {}
    for t in tasks:
        print("spec_bench: %s: SmolLM2 drafting with the 3B's costs" % t["name"], flush=True)
        proj[t["name"]] = projected(a, t, costs)
    forc = {}
    for t in tasks:
        if "answer_text" in t:
            print("spec_bench: %s: the task's answer, teacher-forced, on the 3B and SmolLM2" % t["name"], flush=True)
            forc[t["name"]] = forced(a, t, costs, tmp)
    peer = {}
    if not a.no_llama:
        for t in tasks:
            print("spec_bench: %s: llama.cpp prompt lookup" % t["name"], flush=True)
            peer[t["name"]] = llama_runs(a, t, tmp)

    print()
    print("3B (synthetic, %d threads): verify step of k+1 positions / a 1-token step (%.1f ms):" % (a.threads, ms1))
    print("  " + "  ".join("%d: %.2fx" % (k + 1, c) for k, c in enumerate(costs)))
    print()
    print("%-15s %8s %8s %6s %9s %6s | %7s %6s %6s | %9s %9s %6s %5s" % (
        "task", "spec t/s", "off t/s", "ratio", "tok/step", "same", "3B t/st", "cost", "3B x",
        "llama lk", "llama off", "ratio", "same"))
    summary = {"verify_cost": costs, "tasks": {}}
    ok = True
    for t in tasks:
        n = t["name"]
        r, p, q = e2e[n], proj[n], peer.get(n)
        s, o = r["spec"], r["plain"]
        ratio = s["tps"] / o["tps"] if o["tps"] else 0.0
        tps_step = s["tokens"] / s["steps"] if s["steps"] else 0.0
        ok &= r["identical"]
        lk = "%9.1f %9.1f %6.2f %5s" % (q["lookup_tps"], q["plain_tps"], q["lookup_tps"] / q["plain_tps"],
                                         "yes" if q["identical"] else "no") if q else "%9s %9s %6s %5s" % (
                                             "n/a", "n/a", "", "")
        print("%-15s %8.1f %8.1f %6.2f %9.2f %6s | %7.2f %6.2f %5.2fx | %s" % (
            n, s["tps"], o["tps"], ratio, tps_step, "yes" if r["identical"] else "NO", p["tokens_per_step"],
            p["mean_cost"], p["speedup"], lk))
        summary["tasks"][n] = {"smollm2_spec_tps": round(s["tps"], 2), "smollm2_plain_tps": round(o["tps"], 2),
                               "smollm2_ratio": round(ratio, 3), "smollm2_tokens_per_step": round(tps_step, 3),
                               "tokens": s["tokens"], "drafted": s["drafted"], "accepted": s["accepted"],
                               "identical": r["identical"], "3b_tokens_per_step": round(p["tokens_per_step"], 3),
                               "3b_mean_verify_cost": round(p["mean_cost"], 3),
                               "3b_projected_speedup": round(p["speedup"], 3), "3b_steps_by_k": p["by_k"],
                               "llama_cpp": q}
    print()
    print("columns: spec/off t/s = SmolLM2 decode tokens/s through the daemon; tok/step = tokens per decode step;")
    print("3B t/st = tokens per verify step drafting with the 3B's costs; cost = those steps' mean cost relative")
    print("to a 1-token step on the 3B; 3B x = projected 3B decode speedup (t/st / cost); llama lk/off = llama.cpp")
    print("decode tokens/s with LlamaPromptLookupDecoding and without, on the same SmolLM2 prompts")
    if forc:
        print()
        print("The task's answer (teacher forcing: a model that does the task), greedy, speculation on / off:")
        print("%-15s | %-40s | %-40s | %s" % ("task", "3B (synthetic, measured): t/s, ratio", "SmolLM2: t/s, ratio",
                                             "3B projected"))
        for n, f in forc.items():
            b, s2, pj = f["3b"], f["smollm2"], f["projected"]
            print("%-15s | %6.2f / %6.2f %5.2fx %5.2f t/st %4s | %6.1f / %6.1f %5.2fx %5.2f t/st %4s | "
                  "%5.2f t/st %5.2f cost %5.2fx" % (
                      n, b["spec"]["tps"], b["plain"]["tps"], b["ratio"], b["spec"]["tokens"] / b["spec"]["steps"],
                      "same" if b["identical"] else "DIFF", s2["spec"]["tps"], s2["plain"]["tps"], s2["ratio"],
                      s2["spec"]["tokens"] / s2["spec"]["steps"], "same" if s2["identical"] else "DIFF",
                      pj["tokens_per_step"], pj["mean_cost"], pj["speedup"]))
            ok &= b["identical"] and s2["identical"]
            summary["tasks"][n]["answer_forced"] = {
                "3b_spec_tps": round(b["spec"]["tps"], 2), "3b_plain_tps": round(b["plain"]["tps"], 2),
                "3b_ratio": round(b["ratio"], 3), "3b_tokens": b["spec"]["tokens"],
                "3b_tokens_per_step": round(b["spec"]["tokens"] / b["spec"]["steps"], 3),
                "3b_mean_verify_cost": round(b["spec"]["mean_cost"], 3), "3b_steps_by_k": b["spec"]["by_k"],
                "smollm2_spec_tps": round(s2["spec"]["tps"], 2), "smollm2_plain_tps": round(s2["plain"]["tps"], 2),
                "smollm2_ratio": round(s2["ratio"], 3),
                "smollm2_tokens_per_step": round(s2["spec"]["tokens"] / s2["spec"]["steps"], 3),
                "3b_projected_tokens_per_step": round(pj["tokens_per_step"], 3),
                "3b_projected_mean_cost": round(pj["mean_cost"], 3), "3b_projected_speedup": round(pj["speedup"], 3)}
        print("3B measured: the synthetic 3B decoding the answer (its prompt in SmolLM3's template), decode tokens/s;")
        print("SmolLM2: the same through smollm3 generate; 3B projected: SmolLM2 drafting the answer with the 3B's")
        print("costs, tokens per verify step / their mean cost (as the table above)")
    print(json.dumps(summary))
    if not ok:
        print("spec_bench: FAIL: greedy outputs differ with and without speculation")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
