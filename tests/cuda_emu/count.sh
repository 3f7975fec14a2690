#!/bin/sh
# tests/cuda_emu/count.sh [BUILD] - what a decode step launches, counted by the emulator: `smollm3
# bench --backend cuda-emu --json` on a synthesized SmolLM3-shaped model (preset fixture: 8
# layers, head_dim 128, the Q4_K_M mix) gives kernels_per_token (every kernel run, a replayed
# graph's nodes included) and graph_replays_per_step; the recorded graphs' plans are printed
# (SMOL_CUDA_EMU_PLAN).  Checked: cuda_fuse = layer at <= 4 kernels a layer + 6 (the goal: 150
# for the 3B's 36 layers) with one graph replay per decode step and per batched step (-b 4);
# cuda_graphs = bucket with one replay and one upload per batched step of 3 rows (bucket 4) and
# of 16 (the GEMM path); the default path's count is printed beside them; cuda_gemm_fuse = on gives a
# 40-token prompt's logits bit for bit as its default (mma, imma).  One
# line per check ("... ok" / "... FAIL"); exit 1 on a failure.
BUILD=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
# the emulated device's memory (host memory): the KV pool fits itself to it beside 1 GiB to spare;
# 1.5 GiB keeps each model's pool (and its fill) small on this suite's fixtures
export SMOL_CUDA_EMU_MEM_MB=${SMOL_CUDA_EMU_MEM_MB:-1536}
M=$BUILD/models/emu-fixture.gguf
if [ ! -f "$M" ]; then
    mkdir -p "$BUILD/models"
    "$BUILD/bin/smollm3" synth -o "$M" --preset fixture >/dev/null || { echo "count: synth FAIL"; exit 1; }
fi
L=$("$BUILD/bin/smollm3" inspect "$M" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["smollm3.block_count"])' 2>/dev/null)
[ -n "$L" ] || L=8
GOAL=$((4 * L + 6))
fail=0
run() {  # label, extra args...
    label=$1; shift
    out=$(SMOL_CUDA_EMU_PLAN=1 "$BUILD/bin/smollm3" bench -m "$M" --backend cuda-emu -p 8 -n 2 --json "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -E '^cuda-emu: graph recorded' | sed "s/^/count: $label: /"
    j=$(printf '%s\n' "$out" | grep '^{' | tail -1)
    if [ $rc != 0 ] || [ -z "$j" ]; then
        printf '%s\n' "$out" | tail -5
        echo "count: $label: bench failed  FAIL"; fail=1; return
    fi
    printf '%s' "$j" | python3 -c '
import json, sys
label, goal, check = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = json.load(sys.stdin)
k, g, c = d["kernels_per_token"], d["graph_replays_per_step"], d["copies_per_step"]
unit = "per batched step" if "tg_batch_tps" in d else "per decoded token"
goal_txt = " (goal <= %d)" % goal if check == 1 else ""
note = "" if check else "  (the default path: shown, not checked)"
print("count: %s: %.1f kernels %s%s, %.2f graph replays, copies %.2f to / %.2f from the device%s"
      % (label, k, unit, goal_txt, g, c[0], c[1], note))
if check == 2:  # bucketed graphs: one replay and one upload a step (any kernel count: the GEMM path above 8 rows)
    ok_g, ok_c = abs(g - 1.0) < 1e-9, abs(c[0] - 1.0) < 1e-9
    print("count: %s: one graph replay a step  %s" % (label, "ok" if ok_g else "FAIL"))
    print("count: %s: one upload a step  %s" % (label, "ok" if ok_c else "FAIL"))
    sys.exit(0 if ok_g and ok_c else 1)
if check:
    ok_k = k <= goal
    ok_g = abs(g - 1.0) < 1e-9
    print("count: %s: kernels %s  %s" % (label, "<= goal" if ok_k else "above the goal", "ok" if ok_k else "FAIL"))
    print("count: %s: one graph replay a step  %s" % (label, "ok" if ok_g else "FAIL"))
    sys.exit(0 if ok_k and ok_g else 1)
' "$label" "$GOAL" "$CHECK" || fail=1
}
CHECK=0 run "default"
CHECK=1 run "fuse=layer" --cuda-fuse layer
CHECK=1 run "fuse=layer -b 4" --cuda-fuse layer -b 4
SMOL_CUDA_PERSISTENT=on CHECK=1 run "persistent" --cuda-fuse layer
# bucketed graphs: batched steps of 3 rows (bucket 4) and 16 (the GEMM path) in one replay each
CHECK=2 run "graphs=bucket -b 3" --cuda-graphs bucket -b 3
CHECK=2 run "graphs=bucket -b 16" --cuda-graphs bucket -b 16
# cuda_gemm_fuse: a 40-token prompt (every mat-mul through the GEMM, one launch each) gives the
# default GEMM path's logits bit for bit, for mma and imma (test_cuda t_gemm_fuse counts the launches)
IDS=$(awk 'BEGIN { for (i = 0; i < 40; i++) printf "%s%d", i ? "," : "", (i * 7919) % 5000 + 10 }')
T=$(mktemp -d) || exit 1
for g in mma imma; do
    ok=1
    for f in off on; do
        SMOL_CUDA_GEMM=$g SMOL_CUDA_GEMM_FUSE=$f "$BUILD/bin/smollm3" logits -m "$M" --backend cuda-emu --ids "$IDS" \
            -o "$T/$f.f32" >/dev/null 2>"$T/err" || { tail -3 "$T/err"; ok=0; }
    done
    if [ $ok = 1 ] && cmp -s "$T/off.f32" "$T/on.f32"; then
        echo "count: gemm_fuse $g: 40-token prompt's logits bit-identical to the default GEMM path's  ok"
    else
        echo "count: gemm_fuse $g: 40-token prompt's logits differ from the default GEMM path's (or a run failed)  FAIL"
        fail=1
    fi
done
rm -rf "$T"
exit $fail
