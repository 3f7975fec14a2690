#!/usr/bin/env python3
"""llama_cpp_bench.py MODEL [-p 512] [-n 128] [-d 0] [-t 2] [--reps N]

llama.cpp's pp/tg figures on a GGUF through llama-cpp-python's low-level
API, measured as llama-bench does: pp = one batch of P tokens (logits of the
last only), tg = N single-token decodes after D tokens of context (-d, as
llama-bench's; 0: an empty one).  Token ids
are pseudo-random (the numbers must not depend on text).  Best of --reps
runs.  Last line: {"pp_tps": ..., "tg_tps": ..., "maxrss_kb": ...}.
"""
import argparse, ctypes, json, random, resource, sys, time

import llama_cpp as L


def clear(ctx):
    if hasattr(L, "llama_memory_clear") and hasattr(L, "llama_get_memory"):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
    elif hasattr(L, "llama_kv_self_clear"):
        L.llama_kv_self_clear(ctx)
    else:
        L.llama_kv_cache_clear(ctx)


def decode(ctx, ids):
    arr = (L.llama_token * len(ids))(*ids)
    rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids)))
    if rc != 0:
        sys.exit(f"llama_decode failed: {rc}")
    L.llama_synchronize(ctx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-d", type=int, default=0)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    L.llama_backend_init()
    if hasattr(L, "llama_log_set"):
        cb = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(cb, ctypes.c_void_p())
        main.cb = cb
    mp = L.llama_model_default_params()
    load = getattr(L, "llama_model_load_from_file", None) or L.llama_load_model_from_file
    model = load(a.model.encode(), mp)
    if not model:
        sys.exit("cannot load model")
    cp = L.llama_context_default_params()
    cp.n_ctx = max(a.p, a.d) + a.n + 16
    cp.n_batch = a.p
    cp.n_ubatch = a.p
    cp.n_threads = a.t
    cp.n_threads_batch = a.t
    new_ctx = getattr(L, "llama_init_from_model", None) or L.llama_new_context_with_model
    ctx = new_ctx(model, cp)
    vocab = L.llama_n_vocab(L.llama_model_get_vocab(model)) if hasattr(L, "llama_model_get_vocab") else 128256
    rng = random.Random(1)
    ids = [rng.randrange(vocab) for _ in range(max(a.p, a.d))]
    decode(ctx, ids[:1])  # warm-up: page in the weights
    clear(ctx)
    pp = tg = 0.0
    for _ in range(a.reps):
        clear(ctx)
        t0 = time.perf_counter()
        decode(ctx, ids[:a.p])
        pp = max(pp, a.p / (time.perf_counter() - t0))
        clear(ctx)
        for i in range(0, a.d, a.p):
            decode(ctx, ids[i:min(a.d, i + a.p)])
        t0 = time.perf_counter()
        for i in range(a.n):
            decode(ctx, [ids[i % len(ids)]])
        tg = max(tg, a.n / (time.perf_counter() - t0))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    at = f" @ d{a.d}" if a.d else ""
    print(f"llama.cpp {getattr(L, '__version__', '?')}: pp{a.p} {pp:.2f} tokens/s, tg{a.n}{at} {tg:.2f} tokens/s")
    print(json.dumps({"pp_tps": round(pp, 3), "tg_tps": round(tg, 3), "maxrss_kb": rss}))


if __name__ == "__main__":
    main()
