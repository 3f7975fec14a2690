#!/bin/sh
# tests/cuda_emu/suite.sh [BUILD] - the cuda-emu suite of tests/run_all.sh: the CUDA backend's own
# source run on the host emulator (build/lib/libsmollm3_cuda_emu.so, tests/cuda_emu/README.md), no
# GPU and no CUDA toolkit needed:
#   kernels  the kernel tests of this folder (fattn_emu: the tiled attention against float64;
#            imma_emu: the int8 GEMM against its twin; lt_emu: the emulated cublasLtMatmul against
#            float64, the bf16 operands of cuda_gemm = lt bit for bit, its row slabs), each case
#            line counts;
#   backend  build/tests/test_cuda's emu cases (SMOL_TEST_CUDA_EMU=1, CK_RUN_CASE=emu, emu_synth,
#            emu_batch; run side by side with count.sh): the backend
#            through its interface end to end on the fixture models against the CPU backend and the
#            exact references, the defaults and cuda_fuse = layer with their graph twins, batched
#            decode of mixed lengths on scattered pages (f16 and q8_0 caches), paged attention,
#            device sampling against the host sampler's draws; each Check test counts;
#   count    count.sh: kernels a decoded token and graph replays a step, counted by the emulator,
#            against the goal (4 a layer + 6 with cuda_fuse = layer); each check counts.
# Last line: "cuda-emu: N passed, N failed".
BUILD=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
# the emulated device's memory (host memory): the KV pool fits itself to it beside 1 GiB to spare;
# 1.5 GiB keeps each model's pool (and its fill) small on this suite's fixtures
export SMOL_CUDA_EMU_MEM_MB=${SMOL_CUDA_EMU_MEM_MB:-1536}
pass=0 fail=0
count_lines() {  # name, output, rc
    p=$(printf '%s\n' "$2" | grep -E -c '(  ok$|: ok \()')
    f=$(printf '%s\n' "$2" | grep -E -c '( FAIL$|: FAIL \()')
    [ "$3" != 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $1 exited $3"; f=1; }
    [ "$p" = 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $1 ran no case"; f=1; }
    pass=$((pass + p)) fail=$((fail + f))
}
for t in fattn_emu imma_emu lt_emu; do
    if [ ! -x "$BUILD/cuda_emu/$t" ]; then
        echo "cuda-emu: $BUILD/cuda_emu/$t not built (make all)"; fail=$((fail + 1)); continue
    fi
    out=$("$BUILD/cuda_emu/$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    count_lines "$t" "$out" $rc
done
# test_cuda's three emu cases and count.sh side by side: each runs on one core (the emulator is one
# thread), so on two cores the suite takes about half the time of one after the other
t0=$(date +%s)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
for c in emu emu_synth emu_batch; do
    (SMOL_TEST_CUDA_EMU=1 CK_RUN_CASE=$c SMOL_TEST_QUICK=1 CK_DEFAULT_TIMEOUT=3600 "$BUILD/tests/test_cuda" \
        >"$tmp/$c.out" 2>&1; echo $? >"$tmp/$c.rc") &
done
(sh tests/cuda_emu/count.sh "$BUILD" >"$tmp/count.out" 2>&1; echo $? >"$tmp/count.rc") &
wait
for c in emu emu_synth emu_batch; do
    out=$(cat "$tmp/$c.out"); rc=$(cat "$tmp/$c.rc" 2>/dev/null || echo 1)
    printf '%s\n' "$out" | grep -v '^<6>'
    summary=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks: ' | tail -1)
    if [ -n "$summary" ]; then
        n=$(printf '%s' "$summary" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
        nf=$(printf '%s' "$summary" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
        ne=$(printf '%s' "$summary" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
        pass=$((pass + n - nf - ne)) fail=$((fail + nf + ne))
        [ "$n" = 0 ] && { echo "cuda-emu: test_cuda ($c case) ran no check"; fail=$((fail + 1)); }
    else
        echo "cuda-emu: test_cuda ($c case) gave no summary (status $rc)"; fail=$((fail + 1))
    fi
done
out=$(cat "$tmp/count.out"); rc=$(cat "$tmp/count.rc" 2>/dev/null || echo 1)
printf '%s\n' "$out"
count_lines count "$out" "$rc"
echo "cuda-emu: backend on the emulator and the counts, side by side: $(( $(date +%s) - t0 )) s"
echo "cuda-emu: $pass passed, $fail failed"
[ "$fail" = 0 ]
