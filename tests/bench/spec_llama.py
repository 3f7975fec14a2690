#!/usr/bin/env python3
"""spec_llama.py MODEL PROMPT_FILE -n N [-t THREADS] [--reps R] - llama.cpp's
prompt-lookup decoding (llama-cpp-python's LlamaPromptLookupDecoding as the
draft model) against its plain decoding on one prompt (raw text, special
tokens parsed), greedy, N tokens.  Decode tokens/s from the first streamed
token to the last (the prompt's evaluation excluded), best of R runs.
Prints one JSON line: {"plain_tps", "lookup_tps", "n_plain", "n_lookup",
"identical"}.  Runs in build/venv-llama (tests/bench.sh builds it)."""
import argparse
import json
import time

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


def run(llm, prompt, n):
    t_first = t_last = None
    toks = []
    for chunk in llm.create_completion(prompt, max_tokens=n, temperature=0.0, top_k=1, stream=True):
        t = time.perf_counter()
        if t_first is None:
            t_first = t
        t_last = t
        toks.append(chunk["choices"][0]["text"])
    k = len(toks)
    return (k - 1) / (t_last - t_first) if k > 1 and t_last > t_first else 0.0, "".join(toks), k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompt_file")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    prompt = open(a.prompt_file).read()
    out = {}
    texts = {}
    for mode in ("plain", "lookup"):
        draft = LlamaPromptLookupDecoding(num_pred_tokens=7) if mode == "lookup" else None
        # logits_all: the lookup's verification reads every drafted position's
        # row (llama-cpp-python keeps scores for n_batch rows otherwise).  Plain
        # decoding runs without it: with it, llama-cpp-python 0.3.36 decodes
        # SmolLM2 at under 1 token/s (its n_ctx x n_vocab score array), which
        # is no fair baseline
        llm = Llama(model_path=a.model, n_ctx=8192, n_threads=a.t, n_batch=512, draft_model=draft,
                    logits_all=mode == "lookup", verbose=False, seed=0)
        best = 0.0
        for _ in range(a.reps):
            llm.reset()
            tps, text, k = run(llm, prompt, a.n)
            best = max(best, tps)
        out[mode + "_tps"] = round(best, 2)
        out["n_" + mode] = k
        texts[mode] = text
        del llm
    out["identical"] = texts["plain"] == texts["lookup"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
