#!/bin/sh
# bench_kv.sh BUILD - `make bench-kv`: time to first token of a long
# session's next turn after a restart, its KV read back from kv_spill_dir
# vs recomputed (tests/bench/bench_kv.py), on the real SmolLM2-135M and, with
# BENCH_KV_3B=1, on the synthetic full-size SmolLM3-3B (written with
# `smollm3 synth` if absent, as `make bench` does; two 4K-token prefills of
# the 3B per repetition: the better part of an hour on two shared cores).
# Not part of `make test`: speed is measured, not asserted.
# Environment: BENCH_KV_DEPTH (4096), BENCH_THREADS (2), BENCH_KV_REPS (3),
# BENCH_KV_3B (0), BENCH_KV_REPS_3B (1).
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-build}
DEPTH=${BENCH_KV_DEPTH:-4096}
T=${BENCH_THREADS:-2}
REPS=${BENCH_KV_REPS:-3}
REPS3=${BENCH_KV_REPS_3B:-1}
SYNTH=build/models/smollm3-3b-synth.Q4_K_M.gguf
PY=python3
[ -x build/venv/bin/python3 ] && PY=build/venv/bin/python3
$PY -c "import zmq, google.protobuf" 2>/dev/null || { echo "bench-kv: SKIPPED: python modules zmq, protobuf missing"; exit 0; }
export PYTHONDONTWRITEBYTECODE=1
sh tests/get_smollm2.sh >/dev/null 2>&1
echo "bench-kv: TTFT of turn 2 of a ${DEPTH}-token session after a restart, ${T} threads, median of the runs"
if [ -f build/models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    $PY tests/bench/bench_kv.py --build "$BUILD" --model build/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --depth "$DEPTH" --threads "$T" --reps "$REPS" || exit 1
else
    echo "bench-kv: SmolLM2-135M not available (tests/get_smollm2.sh): skipped"
fi
[ "${BENCH_KV_3B:-0}" = 1 ] || { echo "bench-kv: synthetic 3B left out (BENCH_KV_3B=1 adds it)"; exit 0; }
if [ ! -f "$SYNTH" ]; then
    echo "bench-kv: writing $SYNTH"
    nice "$BUILD/bin/smollm3" synth -o "$SYNTH" --preset smollm3-3b || exit 1
fi
$PY tests/bench/bench_kv.py --build "$BUILD" --model "$SYNTH" --depth "$DEPTH" --threads "$T" --reps "$REPS3" || exit 1
