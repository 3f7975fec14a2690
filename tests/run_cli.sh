#!/bin/sh
# run_cli.sh BUILD - process-level tests of build/bin/smollm3: the
# command-line contract (names, flags, output formats, exit codes) that
# outside checks rely on, and the real SmolLM2-135M-Instruct end to end.
# Prints "N passed, N failed" and exits non-zero on any failure.
BUILD=${1:-build}
S=$BUILD/bin/smollm3
[ -x build/venv/bin/python3 ] && PATH=$(pwd)/build/venv/bin:$PATH && export PATH   # the tests' Python
FX=tests/fixtures
A=$FX/models/fixture-a.Q4_K_M.gguf
T=$FX/models/fixture-t.F32.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0; fail=0
ok()   { pass=$((pass + 1)); }
bad()  { fail=$((fail + 1)); echo "FAIL: $*"; }
# expect CODE DESC CMD... : runs CMD, checks its exit status
expect() {
    code=$1; desc=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    if [ "$rc" = "$code" ]; then ok; else bad "$desc: exit $rc, expected $code ($(head -c 300 "$TMP/err"))"; fi
}
size() { wc -c <"$1" | tr -d ' '; }

# ---- inspect
expect 0 "inspect" $S inspect $A
grep -q "token_embd.weight" "$TMP/out" && ok || bad "inspect lists tensors"
expect 0 "inspect --json" $S inspect $A --json
python3 -m json.tool "$TMP/out" >/dev/null 2>&1 && ok || bad "inspect --json is valid JSON"
python3 -c "import json,sys; d=json.load(open('$TMP/out')); assert len(d['tensors'])==74" && ok || bad "inspect --json has 74 tensors"

# ---- logits: shapes and values
V=128256
expect 0 "logits last" $S logits -m $T --ids 791,4062,14198 -o "$TMP/l1"
[ "$(size "$TMP/l1")" = $((V * 4)) ] && ok || bad "logits [1, n_vocab] size"
expect 0 "logits --all" $S logits -m $T --ids 791,4062,14198 --all -o "$TMP/l3" --threads 1
[ "$(size "$TMP/l3")" = $((3 * V * 4)) ] && ok || bad "logits --all [3, n_vocab] size"
# the last row of --all equals the last-position output
tail -c $((V * 4)) "$TMP/l3" | cmp -s - "$TMP/l1" && ok || bad "--all last row == last-position logits"
# p1 of fixture-a vs llama.cpp's full last logits
IDS=$(python3 -c "import json; print(','.join(map(str, json.load(open('$FX/refs/fixture-a.Q4_K_M.refs.json'))['prompts'][0]['prompt_file_tokens'])))")
expect 0 "logits fixture-a p1" $S logits -m $A --ids "$IDS" -o "$TMP/la"
python3 - "$TMP/la" "$FX/refs/fixture-a.Q4_K_M.p1.last_logits.f32" <<'PY' && ok || bad "logits file matches llama.cpp (mean |d| <= 0.05)"
import sys, array
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
b = array.array('f'); b.frombytes(open(sys.argv[2], 'rb').read())
assert len(a) == len(b) == 128256
d = [abs(x - y) for x, y in zip(a, b)]
print("logits CLI vs llama.cpp: mean |d| %.3e max %.3e" % (sum(d) / len(d), max(d)))
sys.exit(0 if sum(d) / len(d) <= 0.05 and max(d) <= 0.3 else 1)
PY
# --kv-type q8_0: other logits than f16 (the cache is quantized), still near llama.cpp's
# (measured mean |d| 0.046, max 0.25 on this 8-token prompt; the q8_0 error over 512
# positions is test_kvquant's)
expect 0 "logits fixture-a p1 --kv-type q8_0" $S logits -m $A --ids "$IDS" -o "$TMP/la8" --kv-type q8_0
cmp -s "$TMP/la" "$TMP/la8" && bad "--kv-type q8_0 logits equal f16's" || ok
python3 - "$TMP/la8" "$FX/refs/fixture-a.Q4_K_M.p1.last_logits.f32" <<'PY' && ok || bad "q8_0 KV logits near llama.cpp (mean |d| <= 0.08)"
import sys, array
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
b = array.array('f'); b.frombytes(open(sys.argv[2], 'rb').read())
d = [abs(x - y) for x, y in zip(a, b)]
print("logits CLI (q8_0 KV) vs llama.cpp (f16 KV): mean |d| %.3e max %.3e" % (sum(d) / len(d), max(d)))
sys.exit(0 if sum(d) / len(d) <= 0.08 and max(d) <= 0.5 else 1)
PY
expect 0 "logits --kv-type f16 = default" $S logits -m $A --ids "$IDS" -o "$TMP/la16" --kv-type f16
cmp -s "$TMP/la" "$TMP/la16" && ok || bad "--kv-type f16 differs from the default"
expect 0 "generate --kv-type q8_0" $S generate -m $A --ids "$IDS" -n 3 --temp 0 --json --kv-type q8_0
expect 2 "bad --kv-type" $S logits -m $A --ids 1 -o "$TMP/x" --kv-type q4_0
grep -q "f32, f16 or q8_0" "$TMP/err" && ok || bad "--kv-type message: $(cat "$TMP/err")"
expect 2 "--kv-f32 with --kv-type q8_0" $S generate -m $A --ids 1 -n 1 --kv-f32 --kv-type q8_0
expect 1 "q8_0 KV on head size 16" $S logits -m $T --ids 1 -o "$TMP/x" --kv-type q8_0
grep -q "head size 16" "$TMP/err" && ok || bad "head size message: $(cat "$TMP/err")"

# ---- generate
expect 0 "generate --json" $S generate -m $A --ids "$IDS" -n 5 --temp 0 --json
grep -Eq '^\{"ids":\[[0-9]+(,[0-9]+){4}\]\}$' "$TMP/out" && ok || bad "generate --json format: $(cat "$TMP/out")"
# greedy: the first tokens equal llama.cpp's greedy continuation (clear margins)
python3 -c "
import json,sys
ref=json.load(open('$FX/refs/fixture-a.Q4_K_M.refs.json'))['prompts'][0]['llamacpp']['greedy_32']
got=json.load(open('$TMP/out'))['ids']
sys.exit(0 if got[:4]==ref[:4] else 1)" && ok || bad "greedy ids == llama.cpp's first 4"
cp "$TMP/out" "$TMP/g1"
expect 0 "generate seeded" $S generate -m $A --ids "$IDS" -n 6 --temp 0.8 --seed 42 --json
cp "$TMP/out" "$TMP/s1"
expect 0 "generate seeded again" $S generate -m $A --ids "$IDS" -n 6 --temp 0.8 --seed 42 --json
cmp -s "$TMP/out" "$TMP/s1" && ok || bad "same seed -> same tokens"

# ---- generate --force-output: the file's tokens are the output, with and without drafts
python3 -c "
body=''.join('def f%d(x):\\n    return x + %d\\n\\n' % (i, i) for i in range(12))
open('$TMP/src.txt','w').write(body)
open('$TMP/ans.txt','w').write(body.replace('return x', 'return y'))"
expect 0 "tokenize the answer" $S tokenize -m $A --special --json - <"$TMP/ans.txt"
cp "$TMP/out" "$TMP/ans_ids"
expect 0 "generate --force-output" $S generate -m $A --prompt "$(cat "$TMP/src.txt")" -n 1000 --temp 0 --json --stats \
    --force-output "$TMP/ans.txt"
python3 -c "
import json,re,sys
want=json.load(open('$TMP/ans_ids'))['ids']; got=json.load(open('$TMP/out'))['ids']
m=re.search(r'generate: (\d+) tokens in (\d+) steps \(drafted (\d+), accepted (\d+)\)', open('$TMP/err').read())
# the answer copies the prompt with an edit: most of it comes from accepted drafts
sys.exit(0 if got==want and m and int(m.group(1))==len(want) and int(m.group(4)) > len(want)//2 else 1)" \
    && ok || bad "--force-output: ids == the answer's tokens, most from drafts ($(tail -2 "$TMP/err"))"
expect 0 "generate --force-output --no-speculative" $S generate -m $A --prompt "$(cat "$TMP/src.txt")" -n 1000 --temp 0 \
    --json --force-output "$TMP/ans.txt" --no-speculative
python3 -c "
import json,sys
sys.exit(0 if json.load(open('$TMP/out'))['ids']==json.load(open('$TMP/ans_ids'))['ids'] else 1)" \
    && ok || bad "--force-output without drafts: the same ids"
expect 0 "generate --force-output -n 7" $S generate -m $A --prompt "x" -n 7 --temp 0 --json --force-output "$TMP/ans.txt"
python3 -c "
import json,sys
sys.exit(0 if json.load(open('$TMP/out'))['ids']==json.load(open('$TMP/ans_ids'))['ids'][:7] else 1)" \
    && ok || bad "--force-output -n 7: the answer's first 7 tokens"
expect 1 "--force-output missing file" $S generate -m $A --prompt "x" -n 7 --force-output "$TMP/none.txt"
grep -q "none.txt" "$TMP/err" && ok || bad "--force-output names the missing file"
expect 1 "--force-output with a schema" $S generate -m $A --prompt "x" -n 7 --force-output "$TMP/ans.txt" \
    --json-schema tests/grammar/schemas/person.json

# ---- bench
expect 0 "bench --json" $S bench -m $T -p 16 -n 4 -t 2 --json
tail -n 1 "$TMP/out" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); assert d['pp_tps']>0 and d['tg_tps']>0" \
    && ok || bad "bench --json last line"
tail -n 1 "$TMP/out" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); assert d['backend'].startswith('cpu') and d['cuda'] is None" \
    && ok || bad "bench --json has backend and cuda: $(tail -n 1 "$TMP/out")"
expect 0 "bench -d -b" $S bench -m $T -p 16 -n 4 -d 40 -b 3 -t 2 --json
grep -q "^tg4 @ d40: " "$TMP/out" && grep -q "^tg4 x b3: .* tokens/s in all" "$TMP/out" && ok || bad "bench -d -b lines"
tail -n 1 "$TMP/out" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); assert d['tg_batch_tps']>0" \
    && ok || bad "bench -b --json has tg_batch_tps"
expect 2 "bench -b 0" $S bench -m $T -b 0
expect 2 "bench -b 65" $S bench -m $T -b 65
# --backend: cpu works and says so; cuda with no device (hidden by CUDA_VISIBLE_DEVICES, so
# also on a GPU machine) is an error naming cuda, from the loader or the plugin; auto falls back
expect 0 "bench --backend cpu" $S bench -m $T -p 16 -n 4 -t 2 --backend cpu --json
grep -q "^backend: cpu.*, threads: 2$" "$TMP/out" && ok || bad "bench --backend cpu line: $(grep backend "$TMP/out")"
expect 1 "bench --backend cuda without a device" env CUDA_VISIBLE_DEVICES= $S bench -m $T -p 16 -n 4 --backend cuda \
    --cuda-matvec q8 --cuda-fuse on --cuda-graphs off
grep -q "^smollm3 bench: cuda: " "$TMP/err" && ok || bad "bench --backend cuda message names cuda: $(cat "$TMP/err")"
expect 0 "bench --backend auto without a device" env CUDA_VISIBLE_DEVICES= $S bench -m $T -p 16 -n 4 -t 2 --backend auto --json
grep -q "using the CPU backend" "$TMP/err" && grep -q "^backend: cpu" "$TMP/out" && ok \
    || bad "bench --backend auto falls back to the CPU: $(cat "$TMP/err")"
# where the plugin is built, no device (none visible) is said plainly, not in CUDA's words
if [ -f "$BUILD/lib/libsmollm3_cuda.so" ]; then
    grep -qx "<5>no NVIDIA GPU/driver found: using the CPU backend" "$TMP/err" && ok \
        || bad "no device is said plainly: $(cat "$TMP/err")"
fi
expect 1 "bad SMOL_CUDA_MATVEC" env SMOL_CUDA_MATVEC=q4 $S bench -m $T -p 16 -n 4 --backend auto
grep -q "SMOL_CUDA_MATVEC" "$TMP/err" && ok || bad "bad SMOL_CUDA_MATVEC message: $(cat "$TMP/err")"
expect 2 "bench --backend bogus" $S bench -m $T --backend bogus
grep -q "cpu, cuda, cuda-emu or auto" "$TMP/err" && ok || bad "--backend message: $(cat "$TMP/err")"
expect 2 "bench --cuda-matvec bogus" $S bench -m $T --cuda-matvec bogus
grep -q "f32, q8 or q8k" "$TMP/err" && ok || bad "--cuda-matvec message: $(cat "$TMP/err")"
# --backend cuda-emu: the CUDA backend on the host emulator (built by make all), its launch counts
# in bench's JSON (the contract of issue 45: kernels_per_token, graph_replays_per_step)
if [ -f "$BUILD/lib/libsmollm3_cuda_emu.so" ]; then
    expect 0 "bench --backend cuda-emu" env SMOL_CUDA_EMU_MEM_MB=1536 $S bench -m $T -p 4 -n 2 --backend cuda-emu --json
    grep -q "^backend: cuda-emu" "$TMP/out" && tail -1 "$TMP/out" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["backend"] == "cuda-emu" and d["kernels_per_token"] > 0 and d["graph_replays_per_step"] == 1, d
' && ok || bad "bench --backend cuda-emu: $(tail -3 "$TMP/out") $(tail -3 "$TMP/err")"
else
    bad "no $BUILD/lib/libsmollm3_cuda_emu.so (make all builds it)"
fi
expect 2 "generate --cuda-fuse bogus" $S generate -m $T --ids 1 -n 1 --cuda-fuse bogus
expect 2 "bench --cuda-gemm bogus" $S bench -m $T --cuda-gemm wgmma
grep -q "tiled, mma, imma or lt" "$TMP/err" && ok || bad "--cuda-gemm message: $(cat "$TMP/err")"
expect 1 "bad SMOL_CUDA_GEMM" env SMOL_CUDA_GEMM=fast $S bench -m $T -p 16 -n 4 --backend auto --cuda-gemm mma
grep -q "SMOL_CUDA_GEMM" "$TMP/err" && ok || bad "bad SMOL_CUDA_GEMM message: $(cat "$TMP/err")"
expect 2 "logits --cuda-graphs bogus" $S logits -m $T --ids 1 -o "$TMP/x" --cuda-graphs bogus
expect 2 "bench --cuda-attn bogus" $S bench -m $T --cuda-attn bogus
grep -q "paged, tiled or prefill" "$TMP/err" && ok || bad "--cuda-attn message: $(cat "$TMP/err")"
expect 0 "bench --cuda-attn tiled on the CPU" $S bench -m $T -p 16 -n 4 -t 2 --cuda-attn tiled --json
expect 1 "bad SMOL_CUDA_ATTN" env SMOL_CUDA_ATTN=flash $S bench -m $T -p 16 -n 4 --backend auto
grep -q "SMOL_CUDA_ATTN" "$TMP/err" && ok || bad "bad SMOL_CUDA_ATTN message: $(cat "$TMP/err")"
expect 2 "bench --cuda-device -1" $S bench -m $T --cuda-device -1

# ---- make bench (tests/bench.sh): the table names the CPU and each engine's ISA; a peer that
# dies by a signal is reported, its native build replaced by the portable one and the crash
# remembered per CPU; one that fails otherwise gives n/a with the reason.  The peer is a stand-in
# (BENCH_LLAMA_PY) that dies by SIGILL as the native build and exits 3 when FAIL is set.
cat > "$TMP/peer" <<'PEER'
#!/bin/sh
ulimit -c 0
[ "$BENCH_PEER_BUILD" = native ] && kill -ILL $$
[ -n "$PEER_FAIL" ] && exit 3
echo '{"pp_tps": 123.5, "tg_tps": 4.5, "maxrss_kb": 2048, "system": "AVX2 AVX512 AVX512_VNNI"}'
PEER
chmod +x "$TMP/peer"
benchsh() { env LLAMA_WHEELS="$TMP/wheels" BENCH_LLAMA_PY="$TMP/peer" BENCH_MODEL=$T BENCH_REPS=1 BENCH_P=16 \
    BENCH_N=4 BENCH_B=1 "$@" sh tests/bench.sh "$BUILD" > "$TMP/bench.out" 2>&1; }
benchsh; rc=$?
[ $rc = 0 ] && ok || bad "bench.sh with a crashing peer exits $rc: $(tail -5 "$TMP/bench.out")"
grep -q "^cpu: .*; SIMD flags: " "$TMP/bench.out" && grep -q "^smollm3d: cpu-[a-z0-9]* kernels: automatic: the best this CPU runs ([a-z0-9 ]*)$" "$TMP/bench.out" \
    && ok || bad "bench.sh names the CPU and our ISA: $(grep -E '^(cpu|smollm3d):' "$TMP/bench.out")"
grep -q "native build died by SIGILL; building the portable one" "$TMP/bench.out" &&
    grep -q "^llama.cpp: llama-cpp-python portable build (AVX2 AVX512 AVX512_VNNI); the native build died by SIGILL$" "$TMP/bench.out" \
    && ok || bad "bench.sh reports the peer's SIGILL and the build that ran: $(grep -i 'llama.cpp' "$TMP/bench.out")"
grep -Eq "^pp16 tokens/s +[0-9.]+ +123.50 +[0-9.]+x$" "$TMP/bench.out" && ok || bad "bench.sh measures the portable peer: $(grep '^pp16' "$TMP/bench.out")"
ls "$TMP"/wheels/*-native/CRASHED >/dev/null 2>&1 && [ "$(cat "$TMP"/wheels/*-native/CRASHED)" = SIGILL ] \
    && ok || bad "bench.sh remembers the native build's crash for this CPU"
benchsh PEER_FAIL=1
grep -q "^llama.cpp: n/a: the native build died by SIGILL in an earlier run on this CPU; the portable build failed (exit 3)$" "$TMP/bench.out" \
    && ! grep -q "building the portable" "$TMP/bench.out" && grep -Eq "^pp16 tokens/s +[0-9.]+ +n/a +n/a$" "$TMP/bench.out" \
    && ok || bad "bench.sh starts with the portable build and says n/a with the reason: $(grep -E 'llama.cpp|^pp16' "$TMP/bench.out")"

# ---- synth: small models of every weight type (tiny preset: 4 layers, dim 256), quantized with the
# reference quantizers; each opens, has the planned types and file_type, and gives finite logits
# on the CPU backend.  The fixture preset's q4_K_m has fixture A's mix.  Written in parallel (the
# K-quants' reference quantizers take seconds each).
SYNTH_TYPES="f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_K q5_K q6_K q4_K_m"
for ty in $SYNTH_TYPES; do
    $S synth --preset tiny --type $ty -o "$TMP/syn-$ty.gguf" >"$TMP/syn-$ty.out" 2>&1 &
done
$S synth --preset fixture -o "$TMP/syn-fixture.gguf" >"$TMP/syn-fixture.out" 2>&1 &
wait
for ty in $SYNTH_TYPES; do
    [ -f "$TMP/syn-$ty.gguf" ] && ok || { bad "synth --type $ty: $(cat "$TMP/syn-$ty.out")"; continue; }
    expect 0 "inspect synth $ty" $S inspect "$TMP/syn-$ty.gguf" --json
    python3 - "$TMP/out" $ty <<'PY' && ok || bad "synth --type $ty: tensor types / file_type"
import json, sys
d = json.load(open(sys.argv[1])); ty = sys.argv[2]
ftype = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9,
         "q4_K": 14, "q5_K": 16, "q6_K": 18, "q4_K_m": 15}[ty]
# 1 + 4 x 7 matrices, 2 x 4 + 1 norms; the Q4_K_M mix gives token_embd and 2 of the 4 layers'
# attn_v / ffn_down q6_K (use_more_bits: layers 2 and 3)
want = {"f32": {"f32": 38}, "q4_K_m": {"q4_K": 24, "q6_K": 5, "f32": 9}}.get(ty, {ty: 29, "f32": 9})
ok = d["type_counts"] == want and d["metadata"]["general.file_type"] == ftype
print("synth %s: %s, file_type %s" % (ty, d["type_counts"], d["metadata"]["general.file_type"]))
sys.exit(0 if ok else 1)
PY
    expect 0 "logits synth $ty" $S logits -m "$TMP/syn-$ty.gguf" --ids 791,4062,14198,7,30000 --all -o "$TMP/syn-l" --threads 2
    python3 - "$TMP/syn-l" <<'PY' && ok || bad "synth --type $ty: logits [5, n_vocab], finite, spread"
import array, math, sys
a = array.array('f'); a.frombytes(open(sys.argv[1], 'rb').read())
V = 128256
assert len(a) == 5 * V and all(math.isfinite(x) for x in a)
m = sum(a) / len(a); sd = math.sqrt(sum((x - m) ** 2 for x in a) / len(a))
assert 0.5 < sd < 5, sd      # fixture A's scales give logits of std ~1.6
PY
done
expect 0 "inspect synth fixture" $S inspect "$TMP/syn-fixture.gguf" --json
python3 -c "
import json,sys
d=json.load(open('$TMP/out'))
sys.exit(0 if d['type_counts']=={'q4_K': 48, 'q6_K': 9, 'f32': 17} and d['metadata']['general.file_type']==15 else 1)" \
    && ok || bad "synth --preset fixture: fixture A's Q4_K_M mix ($(head -c 300 "$TMP/out"))"
expect 2 "synth --type q8_0 on the 3B" $S synth --preset smollm3-3b --type q8_0 -o "$TMP/x.gguf"
grep -q "q4_K_m only" "$TMP/err" && [ ! -e "$TMP/x.gguf" ] && ok || bad "synth 3B --type message: $(cat "$TMP/err")"
expect 2 "synth unknown --type" $S synth --preset tiny --type q3_K -o "$TMP/x.gguf"
expect 2 "synth unknown preset" $S synth --preset huge -o "$TMP/x.gguf"

# ---- bad input: clear error, non-zero exit, no crash
expect 1 "missing model" $S logits -m /nonexistent.gguf --ids 1 -o "$TMP/x"
grep -q "nonexistent.gguf" "$TMP/err" && ok || bad "missing model message names the file"
printf 'GGUF\003\000\000\000garbage' >"$TMP/corrupt.gguf"
expect 1 "corrupt model" $S logits -m "$TMP/corrupt.gguf" --ids 1 -o "$TMP/x"
head -c 1000 $A >"$TMP/trunc.gguf"
expect 1 "truncated model" $S inspect "$TMP/trunc.gguf"
expect 1 "not a gguf" $S generate -m README.md --ids 1 -n 1
expect 1 "id >= n_vocab" $S logits -m $T --ids 1,128256 -o "$TMP/x"
grep -q "out of range" "$TMP/err" && ok || bad "id out of range message"
LONG=$(python3 -c "print(','.join(['5']*4100))")
expect 1 "prompt longer than context" $S logits -m $T --ids "$LONG" -o "$TMP/x"
grep -q "context" "$TMP/err" && ok || bad "context message"
expect 2 "bad --threads" $S logits -m $T --ids 1 -o "$TMP/x" --threads 0
expect 2 "bad -n" $S generate -m $T --ids 1 -n -5
expect 2 "bad --temp" $S generate -m $T --ids 1 -n 1 --temp abc
expect 2 "bad --ids" $S logits -m $T --ids 1,,2 -o "$TMP/x"
expect 2 "unknown flag" $S logits -m $T --ids 1 -o "$TMP/x" --frobnicate
expect 2 "unknown command" $S frobnicate
expect 2 "no model" $S generate --ids 1 -n 1
expect 1 "unwritable output" $S logits -m $T --ids 1 -o /nonexistent-dir/x

# ---- structured output: --json-schema / --grammar outputs validate (jsonschema)
python3 tests/check_structured_cli.py "$S" "$T" fixture && ok || bad "structured output on the fixture"

# ---- the real SmolLM2-135M-Instruct: greedy tokens equal the transformers reference
sh tests/get_smollm2.sh >"$TMP/get" 2>&1; grc=$?
M2=build/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ $grc != 0 ]; then
    bad "get_smollm2.sh failed: $(tail -3 "$TMP/get")"
elif [ -f $FX/smollm2/smollm2.refs.json ]; then
    python3 tests/check_smollm2.py "$S" "$M2" "$FX/smollm2/smollm2.refs.json" && ok || bad "SmolLM2 greedy vs reference"
    python3 tests/check_structured_cli.py "$S" "$M2" real && ok || bad "structured output on SmolLM2"
else
    bad "tests/fixtures/smollm2/smollm2.refs.json missing"
fi

echo "cli: $pass passed, $fail failed"
[ $fail = 0 ]
