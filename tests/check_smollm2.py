#!/usr/bin/env python3
"""check_smollm2.py SMOLLM3 MODEL REFS.json - the real SmolLM2-135M-Instruct
end to end through the CLI: `smollm3 generate --temp 0` continues four real
prompts (ids from its own tokenizer) with the same greedy tokens as
transformers and llama.cpp, compared while both references' top1-top2
margins are clear, up to and including the first end-of-turn token; and
`smollm3 logits` at the last prompt position is close to both references.
Exit 0 on success."""
import array, json, os, subprocess, sys, tempfile

CLEAR = 0.25  # margin below which greedy choices are not robust to rounding

def main():
    exe, model, refs_path = sys.argv[1:4]
    refs = json.load(open(refs_path))
    base = os.path.dirname(refs_path)
    lc = refs.get("llama_cpp", {}).get("prompts", {})
    bad = 0
    for name, p in refs["prompts"].items():
        ids = p["ids"]
        hf_m = p["gen_margins"]
        lc_m = lc.get(name, {}).get("gen_margins", hf_m)
        n = 0
        while n < len(p["gen_ids"]) and min(hf_m[n], lc_m[n]) >= CLEAR:
            n += 1
            if p["gen_ids"][n - 1] == refs["settings"]["eos_token_id"]:
                break
        out = subprocess.run([exe, "generate", "-m", model, "--ids", ",".join(map(str, ids)), "-n", str(max(n, 1)),
                              "--temp", "0", "--json", "--threads", "2"], capture_output=True, text=True)
        if out.returncode != 0:
            print("FAIL %s: generate exited %d: %s" % (name, out.returncode, out.stderr[-300:]))
            bad += 1
            continue
        got = json.loads(out.stdout)["ids"]
        same = got[:n] == p["gen_ids"][:n]
        print("smollm2 %-5s greedy: %d clear-margin tokens %s (ours %s)" % (name, n, "equal" if same else "DIFFER",
                                                                          got[:n]))
        bad += not same
        # last-position logits, with an f32 KV cache and the default f16 one.
        # This 135M model is sensitive to rounding: llama.cpp itself is at
        # mean |d| 0.12 (f16 KV) / 0.26 (f32 KV) from transformers on the chat
        # prompt; we measured 0.10-0.27 (f32 KV) and 0.16-0.38 (f16 KV)
        # depending on the kernel variant.  Bound: mean 0.5, max 1.5, same argmax.
        if "last_logits_file" not in p:
            continue
        for kvflag, tol in ((["--kv-f32"], 0.5), ([], 0.5)):
            with tempfile.NamedTemporaryFile(suffix=".f32") as f:
                r = subprocess.run([exe, "logits", "-m", model, "--ids", ",".join(map(str, ids)), "-o", f.name]
                                   + kvflag, capture_output=True, text=True)
                if r.returncode != 0:
                    print("FAIL %s: logits exited %d" % (name, r.returncode))
                    bad += 1
                    continue
                ours = array.array("f")
                ours.frombytes(open(f.name, "rb").read())
            for label, fn in (("transformers", p["last_logits_file"]),
                              ("llama.cpp", lc.get(name, {}).get("last_logits_file"))):
                if not fn:
                    continue
                ref = array.array("f")
                ref.frombytes(open(os.path.join(base, fn), "rb").read())
                d = [abs(a - b) for a, b in zip(ours, ref)]
                mean, mx = sum(d) / len(d), max(d)
                am_o = max(range(len(ours)), key=ours.__getitem__)
                am_r = max(range(len(ref)), key=ref.__getitem__)
                ok = mean <= tol and mx <= 1.5 and am_o == am_r
                print("smollm2 %-5s last logits (kv %s) vs %s: mean |d| %.3e max %.3e argmax %s" %
                      (name, "f32" if kvflag else "f16", label, mean, mx, "equal" if am_o == am_r else "DIFFER"))
                bad += not ok
    sys.exit(1 if bad else 0)

main()
