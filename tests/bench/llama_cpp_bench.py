#!/usr/bin/env python3
"""llama_cpp_bench.py MODEL [-p 512] [-n 128] [-d 0] [-b 1] [-t 2] [--reps N]

llama.cpp's pp/tg figures on a GGUF through llama-cpp-python's low-level
API, measured as llama-bench does: pp = one batch of P tokens (logits of the
last only), tg = N single-token decodes after D tokens of context (-d, as
llama-bench's; 0: an empty one).  -b B > 1 adds B sequences generating
together (one batch per step, a token and its logits per sequence):
"tg_batch_tps", all tokens per second.  Token ids
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


def system_info():
    """The ISA features this llama.cpp build uses: "AVX2 AVX512 AVX512_VNNI AMX_INT8 ..." (those = 1
    in llama_print_system_info)."""
    try:
        text = L.llama_print_system_info().decode(errors="replace")
    except Exception:  # an older binding
        return "?"
    on = []
    for part in text.replace("\n", "|").split("|"):
        k, _, v = part.partition("=")
        k = k.split(":")[-1].strip()
        if v.strip() == "1" and k and k not in on:
            on.append(k)
    return " ".join(on)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-d", type=int, default=0)
    ap.add_argument("-b", type=int, default=1)
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
    if a.b > 1:
        cp.n_ctx *= a.b + 1
        cp.n_seq_max = a.b + 1
        if hasattr(cp, "kv_unified"):
            cp.kv_unified = True
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
    tgb = 0.0
    if a.b > 1:
        clear(ctx)
        batch = L.llama_batch_init(a.b, 0, 1)
        for s in range(a.b):  # each sequence after -d tokens of context
            for i in range(0, a.d, a.p):
                chunk = ids[i:min(a.d, i + a.p)]
                bb = L.llama_batch_init(len(chunk), 0, 1)
                for k, t in enumerate(chunk):
                    bb.token[k] = t; bb.pos[k] = i + k; bb.n_seq_id[k] = 1; bb.seq_id[k][0] = s + 1; bb.logits[k] = 0
                bb.n_tokens = len(chunk)
                if L.llama_decode(ctx, bb) != 0:
                    sys.exit("llama_decode (batch prefill) failed")
                L.llama_batch_free(bb)
        t0 = time.perf_counter()
        for step in range(a.n):
            for s in range(a.b):
                batch.token[s] = ids[(step * a.b + s) % len(ids)]
                batch.pos[s] = a.d + step
                batch.n_seq_id[s] = 1
                batch.seq_id[s][0] = s + 1
                batch.logits[s] = 1
            batch.n_tokens = a.b
            if L.llama_decode(ctx, batch) != 0:
                sys.exit("llama_decode (batch) failed")
            L.llama_synchronize(ctx)
        tgb = a.n * a.b / (time.perf_counter() - t0)
        L.llama_batch_free(batch)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    at = f" @ d{a.d}" if a.d else ""
    print(f"llama.cpp {getattr(L, '__version__', '?')}: pp{a.p} {pp:.2f} tokens/s, tg{a.n}{at} {tg:.2f} tokens/s")
    out = {"pp_tps": round(pp, 3), "tg_tps": round(tg, 3), "maxrss_kb": rss, "system": system_info()}
    if a.b > 1:
        print(f"tg{a.n} x b{a.b}: {tgb:.2f} tokens/s in all")
        out["tg_batch_tps"] = round(tgb, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
