#!/usr/bin/env python3
"""kv_quant_llama.py - the error a q8_0 KV cache adds, ours against llama.cpp's.

For each model (the fixture-a SmolLM3 fixture, SmolLM2-135M-Instruct) and the
prompt tests/fixtures/kvquant/prompt.txt (tokenized by llama.cpp, first N ids):

  * llama.cpp (llama-cpp-python, flash attention on: it requires it for a
    quantized V cache) computes the logits of every position with an F16 KV
    cache and with a Q8_0 KV cache (type_k = type_v = GGML_TYPE_Q8_0; it
    rotates quantized K and V by a Hadamard matrix, attn_rot_k / attn_rot_v,
    as smollm3 does: daemon/model/kv.h);
  * smollm3 (`smollm3 logits --all --kv-type f16|q8_0`) does the same;

and the q8_0-vs-f16 difference of each engine is summarised over all
positions x vocabulary: mean |dlogit|, RMS, max |dlogit|, mean KL(f16 || q8_0)
of the softmaxes, and top-1 agreement.  llama.cpp's own figures are the
yardstick ("the spread llama.cpp's q8_0 KV shows against F16"); ours should be
within it.  Our f16 against llama.cpp's f16 is printed too (the cross-engine
baseline the spread sits on), and llama.cpp's q4_0 KV against its f16 (what a
q4_0 cache would cost; smollm3 does not offer one).

Writes tests/fixtures/kvquant/<model>.ids (the prompt ids, read by
tests/test_kvquant.c) and tests/fixtures/kvquant/figures.json, and prints a
table (copied into daemon/README.md, "KV cache types").  Run from the repository root:

    build/venv-llama/bin/python tests/kv_quant_llama.py [--n 512]

build/venv-llama: `make bench` makes it (the llama-cpp-python wheel in
build/wheels); tests/bench/requirements-kvquant.txt lists what it needs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp

MODELS = [
    ("fixture-a", "tests/fixtures/models/fixture-a.Q4_K_M.gguf"),
    ("SmolLM2-135M", "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
]
OUT_DIR = "tests/fixtures/kvquant"


def llama_logits(path, ids, kv_type, threads):
    llm = llama_cpp.Llama(model_path=path, n_ctx=len(ids) + 16, n_batch=len(ids), n_ubatch=len(ids),
                          logits_all=True, flash_attn=True, type_k=kv_type, type_v=kv_type, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    llm.eval(ids)
    out = np.array(llm.scores[: len(ids)], dtype=np.float64)
    llm.close()
    return out


def our_logits(smollm3, path, ids, kv_type, threads, vocab):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([smollm3, "logits", "-m", path, "--ids", ",".join(map(str, ids)), "--all", "-o", f.name,
                        "--threads", str(threads), "--kv-type", kv_type], check=True)
        return np.fromfile(f.name, dtype="<f4").astype(np.float64).reshape(len(ids), vocab)


def diff(a, b):
    """a: the f16 logits, b: the q8_0 ones, [n_pos][vocab]"""
    d = np.abs(a - b)
    pa = np.exp(a - a.max(1, keepdims=True)); pa /= pa.sum(1, keepdims=True)
    lb = b - b.max(1, keepdims=True); lb -= np.log(np.exp(lb).sum(1, keepdims=True))
    la = np.log(pa)
    kl = (pa * (la - lb)).sum(1)
    return {
        "mean_abs": float(d.mean()),
        "rms": float(np.sqrt((d * d).mean())),
        "max_abs": float(d.max()),
        "mean_kl": float(kl.mean()),
        "top1_agree": float((a.argmax(1) == b.argmax(1)).mean()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=512, help="prompt tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smollm3", default="build/bin/smollm3")
    a = ap.parse_args()
    text = open(os.path.join(OUT_DIR, "prompt.txt"), encoding="utf-8").read()
    figures = {"prompt": "tests/fixtures/kvquant/prompt.txt", "n_tokens": a.n,
               "llama_cpp_python": llama_cpp.__version__, "models": {}}
    for name, path in MODELS:
        if not os.path.exists(path):
            sys.exit(f"missing {path} (SmolLM2: sh tests/get_smollm2.sh)")
        tok = llama_cpp.Llama(model_path=path, n_ctx=64, vocab_only=True, verbose=False)
        ids = tok.tokenize(text.encode(), add_bos=False, special=False)
        vocab = tok.n_vocab()
        tok.close()
        if len(ids) < a.n:
            sys.exit(f"{name}: the prompt has only {len(ids)} tokens")
        ids = ids[: a.n]
        with open(os.path.join(OUT_DIR, f"{name}.ids"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        ll16 = llama_logits(path, ids, llama_cpp.GGML_TYPE_F16, a.threads)
        ll8 = llama_logits(path, ids, llama_cpp.GGML_TYPE_Q8_0, a.threads)
        ll4 = llama_logits(path, ids, llama_cpp.GGML_TYPE_Q4_0, a.threads)
        us16 = our_logits(a.smollm3, path, ids, "f16", a.threads, vocab)
        us8 = our_logits(a.smollm3, path, ids, "q8_0", a.threads, vocab)
        figures["models"][name] = {
            "gguf": os.path.basename(path),
            "llama_cpp_q8_0_vs_f16": diff(ll16, ll8),
            "ours_q8_0_vs_f16": diff(us16, us8),
            "ours_f16_vs_llama_cpp_f16": diff(ll16, us16),
            "llama_cpp_q4_0_vs_f16": diff(ll16, ll4),
        }
    with open(os.path.join(OUT_DIR, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
        f.write("\n")
    print(f"q8_0 KV vs f16 KV, logits of all {a.n} positions (llama-cpp-python {llama_cpp.__version__}, flash attention)")
    print("| model | engine | mean abs | RMS | max abs | mean KL | top-1 agree |")
    print("|---|---|---|---|---|---|---|")
    for name, m in figures["models"].items():
        for key, label in (("llama_cpp_q8_0_vs_f16", "llama.cpp q8_0 vs f16"), ("ours_q8_0_vs_f16", "smollm3 q8_0 vs f16"),
                           ("ours_f16_vs_llama_cpp_f16", "smollm3 f16 vs llama.cpp f16"),
                           ("llama_cpp_q4_0_vs_f16", "llama.cpp q4_0 vs f16")):
            d = m[key]
            print(f"| {name} | {label} | {d['mean_abs']:.4f} | {d['rms']:.4f} | {d['max_abs']:.3f} | "
                  f"{d['mean_kl']:.2e} | {100 * d['top1_agree']:.1f}% |")


if __name__ == "__main__":
    main()
