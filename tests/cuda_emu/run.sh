#!/bin/sh
# tests/cuda_emu/run.sh [BUILD] - runs kernels/cuda/fattn.cu's kernels on the host (fattn_emu.cpp:
# a block as fibers, the warp collectives emulated; no GPU, no CUDA toolkit needed) against a
# float64 attention.  Prints one line per batch; exit status 1 on any failure.  ~15 s.
set -e
BUILD=${1:-build}
cd "$(dirname "$0")/../.."
D=$BUILD/cuda_emu
mkdir -p "$D"
# the kernel source as the device compiles it, less the inline-asm helpers (shim.h has their
# emulation) and the launcher
python3 - kernels/cuda/fattn.cu "$D/fattn_emu.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
marks = ['#include "common.cuh"\n#include "fattn.cuh"\n', '/* d[0..3] += A (16x16, row)', '/* Rows j < FATTN_KEYS of dst',
         'cudaError_t smol_fattn_cuda(']
for m in marks:
    if m not in s:
        sys.exit("cuda_emu: marker %r not found in %s: update tests/cuda_emu/run.sh" % (m, sys.argv[1]))
s = s.replace(marks[0], '#include "shim.h"\n')
# dynamic shared memory: a static array of the launch's size (one block runs at a time)
dyn = 'extern __shared__ __align__(16) __half fa_sm[];'
if dyn not in s:
    sys.exit("cuda_emu: %r not found in %s: update tests/cuda_emu/run.sh" % (dyn, sys.argv[1]))
s = s.replace(dyn, 'static __half fa_sm[FA_SMEM / 2] __attribute__((aligned(16)));')
s = s[:s.index(marks[1])] + s[s.index(marks[2]):]
open(sys.argv[2], "w").write(s[:s.index(marks[3])])
PY
CXX=${CXX:-g++}
CC=${CC:-cc}
$CC -O2 -I. -c kernels/quant_ref.c -o "$D/quant_ref.o"
$CXX -O2 -std=c++17 -I. -Itests/cuda_emu -I"$D" -Wall -Wno-unknown-pragmas -Wno-strict-aliasing -Wno-unused-function \
    tests/cuda_emu/fattn_emu.cpp "$D/quant_ref.o" -o "$D/fattn_emu" -lm
exec "$D/fattn_emu"
