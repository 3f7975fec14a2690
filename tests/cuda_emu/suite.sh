#!/bin/sh
# tests/cuda_emu/suite.sh [BUILD] - the cuda-emu suite of tests/run_all.sh: CUDA kernels run on the
# host emulator (tests/cuda_emu/include, emu_runtime.cpp; no GPU, no CUDA toolkit) through their
# host launchers, against their references: kernels/cuda/fattn.cu's attention (fattn_emu.cpp, <1 s)
# and mmq_tc.cu's int8 GEMM (imma_emu.cpp, ~1.5 s).  The programs are `make all`'s
# ($BUILD/cuda_emu/fattn_emu, imma_emu).  Each case line of theirs counts: one ending "  ok" or
# with ": ok (" passed, " FAIL" or ": FAIL (" failed; a program that exits non-zero with no FAIL
# line, or is missing, counts one failure.  Last line: "cuda-emu: N passed, N failed".
BUILD=${1:-build}
cd "$(dirname "$0")/../.." || exit 1
pass=0 fail=0
for t in fattn_emu imma_emu; do
    bin=$BUILD/cuda_emu/$t
    if [ ! -x "$bin" ]; then
        echo "cuda-emu: $bin missing (make all builds it)"
        fail=$((fail + 1))
        continue
    fi
    out=$("$bin" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | grep -E -c '(  ok$|: ok \()')
    f=$(printf '%s\n' "$out" | grep -E -c '( FAIL$|: FAIL \()')
    [ "$rc" != 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $t exited $rc"; f=1; }
    [ "$p" = 0 ] && [ "$f" = 0 ] && { echo "cuda-emu: $t ran no case"; f=1; }
    pass=$((pass + p)) fail=$((fail + f))
done
echo "cuda-emu: $pass passed, $fail failed"
[ "$fail" = 0 ]
