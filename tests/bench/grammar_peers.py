#!/usr/bin/env python3
"""grammar_peers.py - the same masks as bench_grammar.c with xgrammar and llguidance, in one run.

For each schema in tests/grammar/schemas/ and tests/bench/grammar/ (and its .instance.json), on the SmolLM3 vocabulary read
from the fixture GGUF: compile time, then the instance's tokens walked one by one with a timed mask
per step.  Prints one table: ours (runs build/bench/bench_grammar) vs xgrammar vs llguidance,
medians and p99, and the ratios.  Run: make bench-grammar (it makes build/venv-peers from
tests/bench/requirements-grammar-peers.txt).  A peer that fails is an error (exit 1), never a
silently shorter table.

The vocabulary is given to each engine the way its authors mean it to be:
  - a Hugging Face `tokenizers` tokenizer rebuilt from the GGUF (tokens, merges, the smaug-bpe
    pre-tokenizer regex, control tokens as special added tokens): the instances are tokenized
    by it (canonical BPE, the ids our tokenizer gives), and llguidance gets its JSON
    (LLTokenizer(json), as llguidance.hf.from_tokenizer does: the Rust tokenizer, special
    tokens kept out of the text, the default slices);
  - xgrammar gets the raw byte strings (VocabType.RAW) and the stop tokens.
Compile times are not alike: ours and xgrammar's include the per-state token index; llguidance
computes masks lazily (its compile is the grammar and lexer construction; the first mask in each
lexer state pays).  A server keeps one matcher per request: "cold" is a fresh matcher's first
walk (what a new request with a new schema sees), "warm" the walks after it on a matcher reset
to the start (llguidance keeps its lexer's DFA across reset; xgrammar's cache is built at compile).
The median and p99 columns are the warm ones; the cold first walk is printed beside them.
All times are CPU time (ours: the thread's; the peers: the process's).
"""
import json, os, re, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GGUF = os.path.join(ROOT, "tests/fixtures/models/fixture-t.Q8_0.gguf")
# the tests' real-world schemas, and the bench's own (long bounded strings)
SCHEMA_DIRS = [os.path.join(ROOT, "tests/grammar/schemas"), os.path.join(ROOT, "tests/bench/grammar")]
# CPU time of the process, as bench_grammar.c takes its thread's: the machine may be shared, and
# wall time would charge the peers for other processes (their masks run on the calling thread)
clock = time.process_time


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


SMAUG_BPE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def hf_tokenizer():
    """The GGUF's tokenizer as a Hugging Face `tokenizers` BPE (byte-level, smaug-bpe split)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    r = GGUFReader(GGUF)
    f = r.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = r.fields["tokenizer.ggml.merges"]
    merges = [tuple(bytes(f.parts[i]).decode("utf-8").split(" ", 1)) for i in f.data]
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    vocab = {}
    for i, t in enumerate(toks):
        vocab.setdefault(t, i)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SMAUG_BPE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(toks, types) if ty == 3])
    return tk, len(toks)


def tokenize(tk, text):
    return tk.encode(text, add_special_tokens=False).ids


def ours():
    exe = os.path.join(ROOT, "build/bench/bench_grammar")
    out = "".join(subprocess.run([exe, GGUF, d, "5"], capture_output=True, text=True, check=True).stdout
                  for d in SCHEMA_DIRS)
    res = {}
    for line in out.splitlines():
        m = re.match(r"(\S+)\s+(\d+)\s+([\d.]+)ms\s+([\d.]+)ms\s+[\d.]+\s+\d+\s+([\d.]+)us\s+([\d.]+)us", line)
        if m:
            res[m.group(1)] = dict(compile_ms=float(m.group(3)) + float(m.group(4)), med=float(m.group(5)), p99=float(m.group(6)))
    return res


def walk(fill, accept, ids, nm, engine):
    """Timed masks along ids (then the end); a rejected token is an error."""
    ts = []
    for tid in ids + [None]:
        t0 = clock()
        fill()
        ts.append((clock() - t0) * 1e6)
        if tid is not None and not accept(tid):
            raise SystemExit(f"{engine} rejected token {tid} of {nm}")
    return ts


def main():
    reps = int(os.environ.get("REPS", "5"))
    vocab, types = load_vocab()
    n = len(vocab)
    eos = [i for i, t in enumerate(vocab) if t in (b"<|im_end|>", b"<|end_of_text|>")]
    t0 = clock()
    tk, n_hf = hf_tokenizer()
    tk_ms = (clock() - t0) * 1e3
    if n_hf != n:
        raise SystemExit("tokenizer size mismatch")
    where = {f[:-5]: d for d in SCHEMA_DIRS for f in os.listdir(d) if f.endswith(".json") and ".instance." not in f}
    names = sorted(where)
    res = {"ours": ours()}
    cold = {}
    failed = []
    try:
        import xgrammar as xgr
        import torch  # noqa: F401  (xgrammar's bitmask helpers)
        info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW,
                                 vocab_size=n, stop_token_ids=eos)
        comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        r, c = {}, {}
        for nm in names:
            sch = open(os.path.join(where[nm], nm + ".json")).read()
            ids = tokenize(tk, open(os.path.join(where[nm], nm + ".instance.json")).read())
            t0 = clock()
            cg = comp.compile_json_schema(sch, any_whitespace=False, strict_mode=True, separators=(",", ":"))
            c_ms = (clock() - t0) * 1e3
            bm = xgr.allocate_token_bitmask(1, n)
            m = xgr.GrammarMatcher(cg)
            ts = []
            for k in range(reps + 1):
                m.reset()
                w = walk(lambda: m.fill_next_token_bitmask(bm), m.accept_token, ids, nm, "xgrammar")
                if k == 0:
                    c[nm] = dict(med=pct(w, 0.5), p99=pct(w, 0.99))
                else:
                    ts += w
            r[nm] = dict(compile_ms=c_ms, med=pct(ts, 0.5), p99=pct(ts, 0.99))
        res["xgrammar"], cold["xgrammar"] = r, c
    except Exception as e:  # noqa: BLE001
        print("xgrammar failed: %r" % e, file=sys.stderr)
        failed.append("xgrammar")
    try:
        import llguidance as llg
        import llguidance.numpy as llgnp
        t0 = clock()
        tokz = llg.LLTokenizer(tk.to_str(), n_vocab=n, eos_token=eos)
        llt_ms = (clock() - t0) * 1e3
        print(f"llguidance: LLTokenizer from the tokenizer JSON in {llt_ms:.0f} ms (once per model; "
              f"the HF tokenizer itself {tk_ms:.0f} ms)")
        r, c = {}, {}
        for nm in names:
            sch = open(os.path.join(where[nm], nm + ".json")).read()
            ids = tokenize(tk, open(os.path.join(where[nm], nm + ".instance.json")).read())
            t0 = clock()
            grm = llg.LLMatcher.grammar_from_json_schema(
                sch, defaults={"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"})
            m = llg.LLMatcher(tokz, grm)
            c_ms = (clock() - t0) * 1e3
            if m.is_error():
                raise SystemExit(f"llguidance: {nm}: {m.get_error()}")
            bm = llgnp.allocate_token_bitmask(1, tokz.vocab_size)
            ts = []
            for k in range(reps + 1):
                m.reset()
                w = walk(lambda: llgnp.fill_next_token_bitmask(m, bm, 0), m.consume_token, ids, nm, "llguidance")
                if m.is_error():
                    raise SystemExit(f"llguidance: {nm}: {m.get_error()}")
                if k == 0:
                    c[nm] = dict(med=pct(w, 0.5), p99=pct(w, 0.99))
                else:
                    ts += w
            r[nm] = dict(compile_ms=c_ms, med=pct(ts, 0.5), p99=pct(ts, 0.99))
        res["llguidance"], cold["llguidance"] = r, c
    except Exception as e:  # noqa: BLE001
        print("llguidance failed: %r" % e, file=sys.stderr)
        failed.append("llguidance")
    engines = [e for e in ("ours", "xgrammar", "llguidance") if e in res]
    print("compile ms; mask us per token, warm median / p99 (cold: a fresh matcher's first walk)")
    hdr = f"{'schema':12s}" + "".join(f" {e + ' cmp ms':>16s} {e + ' med':>14s} {e + ' p99':>14s}" for e in engines)
    print(hdr)
    for nm in names:
        row = f"{nm:12s}"
        for e in engines:
            x = res[e].get(nm)
            row += f" {x['compile_ms']:16.1f} {x['med']:14.1f} {x['p99']:14.1f}" if x else " " * 46
        print(row)
    for e in engines[1:]:
        print(f"{e} cold first walk (med/p99 us): " +
              ", ".join(f"{nm} {cold[e][nm]['med']:.1f}/{cold[e][nm]['p99']:.1f}" for nm in names if nm in cold[e]))
    for e in engines[1:]:
        meds = [res[e][nm]["med"] / res["ours"][nm]["med"] for nm in names if nm in res[e] and nm in res["ours"]]
        p99s = [res[e][nm]["p99"] / res["ours"][nm]["p99"] for nm in names if nm in res[e] and nm in res["ours"]]
        cmps = [res[e][nm]["compile_ms"] / res["ours"][nm]["compile_ms"] for nm in names if nm in res[e] and nm in res["ours"]]
        if meds:
            print(f"{e}/ours: median ratio {sorted(meds)[len(meds) // 2]:.1f}x, p99 ratio {sorted(p99s)[len(p99s) // 2]:.1f}x, "
                  f"compile ratio {sorted(cmps)[len(cmps) // 2]:.1f}x (median over schemas)")
    if failed:
        raise SystemExit("grammar_peers: %s failed (see above)" % ", ".join(failed))


if __name__ == "__main__":
    main()
