#!/usr/bin/env python3
"""grammar_peers.py - the same masks as bench_grammar.c with xgrammar and llguidance, in one run.

For each schema in tests/grammar/schemas/ (and its .instance.json), on the SmolLM3 vocabulary read
from the fixture GGUF (tokenizer.ggml.tokens, byte-level BPE strings decoded to bytes): compile time,
then the instance's tokens (from our own tokenizer's ids, printed by bench_grammar's companion run, or
re-tokenized by greedy longest-match when not given) walked one by one with a timed mask per step.
Prints one table: ours (runs build/bench/bench_grammar) vs xgrammar vs llguidance, medians and p99,
and the ratios.  Run: make bench-grammar (it makes build/venv-peers from
tests/bench/requirements-grammar-peers.txt).  A peer that fails is an error (exit 1), never a
silently shorter table.  Compile times are not alike: xgrammar builds its token-mask cache at
compile, llguidance computes masks lazily (its compile is the parse; the first masks pay).
"""
import json, os, re, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GGUF = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
SCHEMAS = os.path.join(ROOT, "tests/grammar/schemas")


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def load_vocab():
    from gguf import GGUFReader
    r = GGUFReader(GGUF)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tf = r.fields["tokenizer.ggml.token_type"]
    types = [int(tf.parts[i][0]) for i in tf.data]
    dec = byte_decoder()
    out = []
    for t, ty in zip(toks, types):
        if ty in (3, 4):
            out.append(t.encode())  # special: its text
        else:
            out.append(bytes(dec[c] for c in t))
    return out, types


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def tokenize(text, by_bytes):
    """Greedy longest match over the vocabulary (the walk only needs some valid token path)."""
    b = text.encode()
    ids, i = [], 0
    maxlen = max(len(k) for k in by_bytes)
    while i < len(b):
        for l in range(min(maxlen, len(b) - i), 0, -1):
            t = by_bytes.get(b[i:i + l])
            if t is not None:
                ids.append(t)
                i += l
                break
        else:
            raise SystemExit("untokenizable")
    return ids


def ours():
    exe = os.path.join(ROOT, "build/bench/bench_grammar")
    out = subprocess.run([exe, GGUF, SCHEMAS, "5"], capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"(\S+)\s+(\d+)\s+([\d.]+)ms\s+([\d.]+)ms\s+[\d.]+\s+\d+\s+([\d.]+)us\s+([\d.]+)us", line)
        if m:
            res[m.group(1)] = dict(compile_ms=float(m.group(3)) + float(m.group(4)), med=float(m.group(5)), p99=float(m.group(6)))
    return res


def main():
    vocab, types = load_vocab()
    n = len(vocab)
    eos = [i for i, t in enumerate(vocab) if t in (b"<|im_end|>", b"<|end_of_text|>")]
    by_bytes = {}
    for i, (t, ty) in enumerate(zip(vocab, types)):
        if ty not in (3, 4) and t not in by_bytes:
            by_bytes[t] = i
    names = sorted(f[:-5] for f in os.listdir(SCHEMAS) if f.endswith(".json") and ".instance." not in f)
    res = {"ours": ours()}
    failed = []
    try:
        import xgrammar as xgr
        import torch  # noqa: F401  (xgrammar's bitmask helpers)
        info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW,
                                 vocab_size=n, stop_token_ids=eos)
        comp = xgr.GrammarCompiler(info, max_threads=1)
        r = {}
        for nm in names:
            sch = open(os.path.join(SCHEMAS, nm + ".json")).read()
            inst = open(os.path.join(SCHEMAS, nm + ".instance.json")).read()
            t0 = time.perf_counter()
            cg = comp.compile_json_schema(sch, any_whitespace=False, strict_mode=True, separators=(",", ":"))
            c_ms = (time.perf_counter() - t0) * 1e3
            ts = []
            bm = xgr.allocate_token_bitmask(1, n)
            for _ in range(5):
                m = xgr.GrammarMatcher(cg)
                for tid in tokenize(inst, by_bytes) + [None]:
                    t0 = time.perf_counter()
                    m.fill_next_token_bitmask(bm)
                    ts.append((time.perf_counter() - t0) * 1e6)
                    if tid is not None and not m.accept_token(tid):
                        raise SystemExit(f"xgrammar rejected a token of {nm}")
            r[nm] = dict(compile_ms=c_ms, med=pct(ts, 0.5), p99=pct(ts, 0.99))
        res["xgrammar"] = r
    except Exception as e:  # noqa: BLE001
        print("xgrammar failed: %r" % e, file=sys.stderr)
        failed.append("xgrammar")
    try:
        import llguidance as llg
        import llguidance.numpy as llgnp
        tokz = llg.LLTokenizer(llg.TokenizerWrapper(_Wrap(vocab, eos[0], by_bytes)))
        r = {}
        for nm in names:
            sch = open(os.path.join(SCHEMAS, nm + ".json")).read()
            inst = open(os.path.join(SCHEMAS, nm + ".instance.json")).read()
            t0 = time.perf_counter()
            grm = llg.LLMatcher.grammar_from_json_schema(sch, defaults={"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"})
            m0 = llg.LLMatcher(tokz, grm)
            c_ms = (time.perf_counter() - t0) * 1e3
            bm = llgnp.allocate_token_bitmask(1, tokz.vocab_size)
            ts = []
            for _ in range(5):
                m = llg.LLMatcher(tokz, grm)
                for tid in tokenize(inst, by_bytes) + [None]:
                    t0 = time.perf_counter()
                    llgnp.fill_next_token_bitmask(m, bm, 0)
                    ts.append((time.perf_counter() - t0) * 1e6)
                    if tid is not None and not m.consume_token(tid):
                        raise SystemExit(f"llguidance rejected token {tid} {vocab[tid]!r} of {nm}: stopped={m.is_stopped()} err={m.get_error()}")
            r[nm] = dict(compile_ms=c_ms, med=pct(ts, 0.5), p99=pct(ts, 0.99))
            del m0
        res["llguidance"] = r
    except Exception as e:  # noqa: BLE001
        print("llguidance failed: %r" % e, file=sys.stderr)
        failed.append("llguidance")
    engines = [e for e in ("ours", "xgrammar", "llguidance") if e in res]
    hdr = f"{'schema':12s}" + "".join(f" {e + ' cmp ms':>16s} {e + ' med us':>15s} {e + ' p99 us':>15s}" for e in engines)
    print(hdr)
    for nm in names:
        row = f"{nm:12s}"
        for e in engines:
            x = res[e].get(nm)
            row += f" {x['compile_ms']:16.1f} {x['med']:15.1f} {x['p99']:15.1f}" if x else " " * 48
        print(row)
    for e in engines[1:]:
        meds = [res[e][nm]["med"] / res["ours"][nm]["med"] for nm in names if nm in res[e] and nm in res["ours"]]
        p99s = [res[e][nm]["p99"] / res["ours"][nm]["p99"] for nm in names if nm in res[e] and nm in res["ours"]]
        if meds:
            print(f"{e}/ours: median ratio {sorted(meds)[len(meds) // 2]:.1f}x, p99 ratio {sorted(p99s)[len(p99s) // 2]:.1f}x (median over schemas)")
    if failed:
        raise SystemExit("grammar_peers: %s failed (see above)" % ", ".join(failed))


class _Wrap:
    """The minimal tokenizer object llguidance.TokenizerWrapper wants."""

    def __init__(self, vocab, eos, by_bytes=None):
        self.by_bytes = by_bytes
        self.eos_token_id = eos
        self.bos_token_id = None
        self.tokens = vocab
        self.special_token_ids = []

    def __call__(self, s):
        return tokenize(s if isinstance(s, str) else s.decode("utf-8", "replace"), self.by_bytes)


if __name__ == "__main__":
    main()
