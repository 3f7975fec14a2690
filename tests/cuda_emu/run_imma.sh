#!/bin/sh
# tests/cuda_emu/run_imma.sh [BUILD] - runs the int8 GEMM kernel of kernels/cuda/mmq_tc.cu (cuda_gemm =
# imma) on the host (imma_emu.cpp: a block as 256 fibers, ldmatrix and the s8 mma.sync emulated; no GPU,
# no CUDA toolkit needed) against its twin smol_imma_row_ref.  One line per case; exit status 1 on any
# failure.
set -e
BUILD=${1:-build}
cd "$(dirname "$0")/../.."
D=$BUILD/cuda_emu
mkdir -p "$D"
# the kernel's section of mmq_tc.cu as the device compiles it, less the mma inline-asm helpers
# (imma_emu.cpp has their emulation) and the launchers
python3 - kernels/cuda/mmq_tc.cu "$D/imma_kernel.inc" <<'PY'
import sys
s = open(sys.argv[1]).read()
marks = ['struct imma_args {', 'template <int T, int BM>\nstatic cudaError_t launch_imma(']
for m in marks:
    if m not in s:
        sys.exit("cuda_emu: marker %r not found in %s: update tests/cuda_emu/run_imma.sh" % (m, sys.argv[1]))
s = s[s.index(marks[0]):s.index(marks[1])]
dyn = 'extern __shared__ __align__(16) uint8_t smem[];'
if dyn not in s:
    sys.exit("cuda_emu: %r not found in %s: update tests/cuda_emu/run_imma.sh" % (dyn, sys.argv[1]))
open(sys.argv[2], "w").write(s.replace(dyn, 'uint8_t *smem = imma_smem;'))
PY
cat > "$D/imma_emu.inc" <<'INC'
#include "shim.h"
#include "kernels/cuda/mmq_imma.h"
#define TC_THREADS 256
#define TC_BN 64
enum { SMOL_MV_STORE = 0, SMOL_MV_ADD = 1 };
/* cp.async: the copy done at once, of its size (the waits then have nothing to wait for) */
template <int B> static inline void cp_async(void *dst, const void *src) { memcpy(dst, src, B); }
static inline void cp_commit() {}
template <int N> static inline void cp_wait() {}
/* the largest instance's dynamic shared memory (q8_0, BM 128) */
static uint8_t imma_smem[128 * 144 + 4 * 128 * 8 + 2 * 64 * 144 + 2 * 4 * 64 * 16 + 2 * 128 * 144] __attribute__((aligned(16)));
INC
CXX=${CXX:-g++}
CC=${CC:-cc}
$CC -O2 -I. -c kernels/quant_ref.c -o "$D/quant_ref.o"
$CC -O2 -I. -c kernels/quantize_k_ref.c -o "$D/quantize_k_ref.o"
$CC -O2 -I. -c kernels/types.c -o "$D/types.o"
$CXX -O2 -std=c++17 -I. -Itests/cuda_emu -I"$D" -Wall -Wno-unknown-pragmas -Wno-strict-aliasing -Wno-unused-function \
    tests/cuda_emu/imma_emu.cpp "$D/quant_ref.o" "$D/quantize_k_ref.o" "$D/types.o" -o "$D/imma_emu" -lm
exec "$D/imma_emu"
