#!/bin/sh
# run.sh [SECONDS] - builds the libFuzzer harness for the GGUF reader and runs
# it from tests/fuzz/seeds for SECONDS (default 60), one worker, niced.
# run.sh --coverage - replays seeds + working corpus once through a
# source-coverage build and prints llvm-cov's report for daemon/model/gguf.c.
#
# Build: clang -fsanitize=fuzzer,address,undefined over the few sources the
# reader needs, into build/fuzz/.  kernels/types.c refers to the scalar
# reference kernels of kernels/quant_ref.c and kernels/quantize_k_ref.c; if
# one is missing or does not compile, a stub defining those symbols
# (generated from quant_ref.h) is compiled into the fuzz build only - the
# reader never calls them.
#
# The working corpus grows in tests/fuzz/corpus-run/ (gitignored); the
# seeds stay read-only.  Crashes land in build/fuzz/ as crash-*.
# Environment: FUZZ_JOBS is not supported on purpose (shared machine).
set -eu
SECONDS_TO_RUN=${1:-60}
MODE=fuzz
if [ "$SECONDS_TO_RUN" = "--coverage" ]; then MODE=coverage; SECONDS_TO_RUN=0; fi
case $SECONDS_TO_RUN in *[!0-9]*|'') echo "usage: $0 [SECONDS | --coverage]"; exit 2;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/build/fuzz
CORPUS=$ROOT/tests/fuzz/corpus-run
SEEDS=$ROOT/tests/fuzz/seeds
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT" "$CORPUS"
cd "$ROOT"

command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }
CFLAGS="-std=gnu11 -g -O1 -I. -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"

# the scalar reference kernels types.c's table points at: quant_ref.c (dequantize, dot products) and
# quantize_k_ref.c (the K-quant quantizers)
REF_OBJS="$OUT/quant_ref.o $OUT/quantize_k_ref.o"
if ! { [ -f kernels/quant_ref.c ] && [ -f kernels/quantize_k_ref.c ] &&
       $CC $CFLAGS -c kernels/quant_ref.c -o "$OUT/quant_ref.o" 2>"$OUT/quant_ref.log" &&
       $CC $CFLAGS -c kernels/quantize_k_ref.c -o "$OUT/quantize_k_ref.o" 2>>"$OUT/quant_ref.log"; }; then
    echo "fuzz: kernels/quant_ref.c or quantize_k_ref.c missing or not compiling: using a stub for the reference kernels"
    {
        echo '#include "kernels/quant_ref.h"'
        grep -E '^(void|float) +smol_[a-z0-9_A-Z]+_ref *\(' kernels/quant_ref.h |
            sed -E -e 's|;.*$||' -e 's|^float(.*)$|float\1 { return 0; }|' -e 's|^void(.*)$|void\1 { }|'
    } >"$OUT/quant_ref_stub.c"
    $CC $CFLAGS -c "$OUT/quant_ref_stub.c" -o "$OUT/quant_ref.o"
    REF_OBJS="$OUT/quant_ref.o"
fi
# shellcheck disable=SC2086
$CC $CFLAGS tests/fuzz/fuzz_gguf.c daemon/model/gguf.c daemon/model/error.c kernels/types.c $REF_OBJS \
    -lm -o "$OUT/fuzz_gguf"

if [ $MODE = coverage ]; then
    COV="-fprofile-instr-generate -fcoverage-mapping"
    # shellcheck disable=SC2086
    $CC $CFLAGS $COV tests/fuzz/fuzz_gguf.c daemon/model/gguf.c daemon/model/error.c kernels/types.c $REF_OBJS \
        -lm -o "$OUT/fuzz_gguf_cov"
    rm -f "$OUT"/cov-*.profraw
    LLVM_PROFILE_FILE="$OUT/cov-%p.profraw" nice -n 10 "$OUT/fuzz_gguf_cov" -runs=0 "$CORPUS" "$SEEDS" \
        >"$OUT/cov.log" 2>&1
    PROFDATA=$(command -v llvm-profdata || command -v llvm-profdata-14)
    LLVMCOV=$(command -v llvm-cov || command -v llvm-cov-14)
    "$PROFDATA" merge -sparse "$OUT"/cov-*.profraw -o "$OUT/cov.profdata"
    echo "fuzz: coverage of daemon/model/gguf.c over $(ls "$CORPUS" "$SEEDS" | wc -l) inputs:"
    "$LLVMCOV" report "$OUT/fuzz_gguf_cov" -instr-profile="$OUT/cov.profdata" daemon/model/gguf.c
    "$LLVMCOV" show "$OUT/fuzz_gguf_cov" -instr-profile="$OUT/cov.profdata" daemon/model/gguf.c \
        -show-line-counts-or-regions >"$OUT/gguf.c.cov.txt"
    echo "fuzz: annotated source in $OUT/gguf.c.cov.txt"
    exit 0
fi

echo "fuzz: running fuzz_gguf for ${SECONDS_TO_RUN}s (corpus $CORPUS, seeds $SEEDS)"
LOG=$OUT/fuzz_gguf.log
set +e
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
nice -n 10 "$OUT/fuzz_gguf" -max_len=65536 -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$OUT/" "$CORPUS" "$SEEDS" >"$LOG" 2>&1
rc=$?
set -e
grep -E 'cov:' "$LOG" | tail -n 1
grep -E 'stat::|ERROR|SUMMARY|crash-|Done' "$LOG" | tail -n 12
execs=$(grep -E 'stat::number_of_executed_units' "$LOG" | awk '{print $2}')
echo "fuzz: executions: ${execs:-unknown}; corpus files: $(ls "$CORPUS" | wc -l); exit $rc; log $LOG"
exit $rc
