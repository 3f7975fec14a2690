#!/bin/sh
# tests/cuda_emu/suite.sh [BUILD] - the cuda-emu suite of tests/run_all.sh: the CUDA kernels that
# have a host emulator run against their references without a GPU or the CUDA toolkit:
# kernels/cuda/fattn.cu (run.sh, ~17 s on 2 busy cores) and mmq_tc.cu's int8 GEMM (run_imma.sh,
# ~10 s).  Each case line of theirs counts: "... ok" passed, "FAIL" failed; a script that exits
# non-zero with no FAIL line counts one failure.  Last line: "cuda-emu: N passed, N failed".
BUILD=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
pass=0 fail=0
for s in run.sh run_imma.sh; do
    out=$(sh "tests/cuda_emu/$s" "$BUILD" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | grep -E -c '(  ok$|: ok \()')
    f=$(printf '%s\n' "$out" | grep -E -c '( FAIL$|: FAIL \()')
    [ "$rc" != 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $s exited $rc"; f=1; }
    [ "$p" = 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $s ran no case"; f=1; }
    pass=$((pass + p)) fail=$((fail + f))
done
echo "cuda-emu: $pass passed, $fail failed"
[ "$fail" = 0 ]
