#!/bin/sh
# bench.sh BUILD - `make bench`: our CPU engine against llama.cpp on a
# synthetic full-size SmolLM3-3B Q4_K_M (random weights, the real file's
# shapes and tensor types), same machine, same run, same threads.
#
#   1. builds (make bench built the programs and benchmarks, after deploy/install-deps.sh bench:
#      GNU time, python3-venv), writes build/models/smollm3-3b-synth.Q4_K_M.gguf
#      with `smollm3 synth` if absent;
#   2. measures read bandwidth with the same threads (bench_membw), before
#      every repetition: the machine is shared and its bandwidth drifts, so
#      each run's decode is held against the bandwidth of its own minute
#      (the table gives the median of those fractions, and of the bandwidths);
#   3. runs `smollm3 bench -p 512 -n 128` and llama.cpp (llama-cpp-python's
#      low-level API, tests/bench/llama_cpp_bench.py; its wheel is built
#      from PyPI source once per CPU feature set, niced, and cached in
#      build/wheels/<cpu key>-<build> and /tmp/wheels: tests/bench/llama_peer.sh;
#      a native build that dies by a signal is replaced by the portable one,
#      AMX off) under /usr/bin/time for peak RSS, best of BENCH_REPS;
#      With BENCH_B > 1 (default 4) both also generate with that many
#      sequences at once (one batch per step, as the daemon's continuous
#      batching does): all tokens per second;
#   4. with BENCH_D set, generation after that many tokens of context too
#      (both engines, -d as llama-bench's: attention over a long cache);
#   5. prints one table, headed by the CPU, the kernel variant ours ran and
#      why (the automatic choice and what the CPU runs, or SMOL_CPU: e.g.
#      SMOL_CPU=avx2 measures the AVX2 path on an AVX-512 machine), and the
#      peer's build and ISA (llama_print_system_info).
# Environment: BENCH_THREADS (2), BENCH_REPS (3), BENCH_P (512), BENCH_N (128),
# BENCH_B (4; 1: no batch row), BENCH_D (0: no depth row), BENCH_MODEL (path),
# BENCH_NO_LLAMA=1 to skip llama.cpp; SMOL_CPU (ref, avx2, avxvnni, avx512,
# amx) picks our kernel variant as it does for the daemon.
set -u
BUILD=${1:-build}
T=${BENCH_THREADS:-2}
REPS=${BENCH_REPS:-3}
P=${BENCH_P:-512}
N=${BENCH_N:-128}
D=${BENCH_D:-0}
B=${BENCH_B:-4}
MODEL=${BENCH_MODEL:-build/models/smollm3-3b-synth.Q4_K_M.gguf}
WHEELS=build/wheels
VENV=build/venv-llama
OUT=$BUILD/bench-out
mkdir -p "$OUT" "$(dirname "$MODEL")" "$WHEELS"

if [ ! -f "$MODEL" ]; then
    echo "bench: writing $MODEL"
    nice "$BUILD/bin/smollm3" synth -o "$MODEL" --preset smollm3-3b || exit 1
fi
MODEL_BYTES=$(stat -c %s "$MODEL")
echo "bench: smollm3d kernels: $("$BUILD/bench/bench_kernels" --which)"

# ---- llama.cpp (optional: the table says n/a when it cannot be had).  The peer's wheel is
# built for this CPU (tests/bench/llama_peer.sh); one that dies by a signal is replaced, once, by
# the portable build (AMX off), and the table says which build ran and why.
PY=""; PEER_BUILD=""; PEER_NOTE=""; LL_ISA=""
if [ "${BENCH_NO_LLAMA:-0}" != 1 ]; then
    . tests/bench/llama_peer.sh
    PEER_BUILD=$(peer_first_build)
    [ "$PEER_BUILD" = portable ] && PEER_NOTE="the native build died by $(peer_crash_note) in an earlier run on this CPU"
    PY=$(peer_python "$PEER_BUILD" "$OUT/llama-$PEER_BUILD.log") || PY=""
    [ -z "$PY" ] && PEER_NOTE="no $PEER_BUILD build (see $OUT/llama-$PEER_BUILD.log)"
fi

# llama OUT ARGS...: the peer's tests/bench/llama_cpp_bench.py ARGS into OUT (OUT.time: /usr/bin/time
# -v).  A native build that dies by a signal is replaced by the portable one and the run repeated;
# any other failure drops the peer (PY="") with the reason in PEER_NOTE.
llama() {
    lo=$1; shift
    export BENCH_PEER_BUILD=$PEER_BUILD
    nice /usr/bin/time -v "$PY" tests/bench/llama_cpp_bench.py "$MODEL" "$@" > "$lo" 2> "$lo.time"
    rc=$?
    [ $rc = 0 ] && return 0
    sig=$(peer_signal_name $rc)
    tail -3 "$lo.time"
    if [ -n "$sig" ] && [ "$PEER_BUILD" = native ]; then
        echo "bench: llama.cpp's native build died by $sig; building the portable one (AMX off) and rerunning"
        peer_mark_crashed native "$sig"
        PEER_NOTE="the native build died by $sig"
        PEER_BUILD=portable
        PY=$(peer_python portable "$OUT/llama-portable.log") || PY=""
        if [ -n "$PY" ]; then
            export BENCH_PEER_BUILD=$PEER_BUILD
            nice /usr/bin/time -v "$PY" tests/bench/llama_cpp_bench.py "$MODEL" "$@" > "$lo" 2> "$lo.time"
            rc=$?
            [ $rc = 0 ] && return 0
            sig=$(peer_signal_name $rc)
            tail -3 "$lo.time"
        else
            PEER_NOTE="$PEER_NOTE; no portable build (see $OUT/llama-portable.log)"
            return 1
        fi
    fi
    if [ -n "$sig" ]; then why="died by $sig"; else why="failed (exit $rc)"; fi
    PEER_NOTE="${PEER_NOTE:+$PEER_NOTE; }the $PEER_BUILD build $why"
    PY=""
    return 1
}

# ---- runs
json_field() { sed -n 's/.*"'"$2"'": *\([0-9.]*\).*/\1/p' "$1" | tail -1; }
rss_kb() { sed -n 's/.*Maximum resident set size (kbytes): *//p' "$1" | tail -1; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "" || a + 0 > b + 0) print a; else print b }'; }

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
frac() { awk -v tg="$1" -v bw="$2" -v mb="$MODEL_BYTES" 'BEGIN { if (tg > 0 && bw > 0) print tg * mb / (bw * 1e9) }'; }
BWS=""; OUR_FR=""; LL_FR=""

OUR_PP=""; OUR_TG=""; OUR_RSS=""; LL_PP=""; LL_TG=""; LL_RSS=""; OUR_TGB=""; LL_TGB=""
i=0
while [ $i -lt "$REPS" ]; do
    i=$((i + 1))
    nice "$BUILD/bench/bench_membw" -t "$T" --json > "$OUT/membw.$i.txt" || exit 1
    BW_I=$(json_field "$OUT/membw.$i.txt" read_gbs)
    BWS="$BWS $BW_I"
    echo "bench: run $i/$REPS: read bandwidth $BW_I GB/s; smollm3 bench -p $P -n $N -t $T"
    nice /usr/bin/time -v "$BUILD/bin/smollm3" bench -m "$MODEL" -p "$P" -n "$N" -t "$T" --json \
        > "$OUT/ours.$i.txt" 2> "$OUT/ours.$i.time" || { cat "$OUT/ours.$i.time"; exit 1; }
    OUR_PP=$(best "$(json_field "$OUT/ours.$i.txt" pp_tps)" "$OUR_PP")
    OUR_TG=$(best "$(json_field "$OUT/ours.$i.txt" tg_tps)" "$OUR_TG")
    OUR_RSS=$(best "$(rss_kb "$OUT/ours.$i.time")" "$OUR_RSS")
    OUR_FR="$OUR_FR $(frac "$(json_field "$OUT/ours.$i.txt" tg_tps)" "$BW_I")"
    if [ -n "$PY" ]; then
        echo "bench: run $i/$REPS: llama.cpp pp$P tg$N -t $T"
        if llama "$OUT/llama.$i.txt" -p "$P" -n "$N" -t "$T"; then
            LL_PP=$(best "$(json_field "$OUT/llama.$i.txt" pp_tps)" "$LL_PP")
            LL_TG=$(best "$(json_field "$OUT/llama.$i.txt" tg_tps)" "$LL_TG")
            LL_RSS=$(best "$(rss_kb "$OUT/llama.$i.txt.time")" "$LL_RSS")
            LL_FR="$LL_FR $(frac "$(json_field "$OUT/llama.$i.txt" tg_tps)" "$BW_I")"
            LL_ISA=$(sed -n 's/.*"system": *"\([^"]*\)".*/\1/p' "$OUT/llama.$i.txt" | tail -1)
        fi
    fi
done

# batched generation: a separate run (its KV pool for B sequences would count in the RSS above)
if [ "$B" -gt 1 ]; then
    i=0
    while [ $i -lt "$REPS" ]; do
        i=$((i + 1))
        echo "bench: run $i/$REPS: smollm3 bench -p 64 -n $N -b $B -t $T"
        nice "$BUILD/bin/smollm3" bench -m "$MODEL" -p 64 -n "$N" -b "$B" -t "$T" --json > "$OUT/ours-b.$i.txt" ||
            { cat "$OUT/ours-b.$i.txt"; exit 1; }
        OUR_TGB=$(best "$(json_field "$OUT/ours-b.$i.txt" tg_batch_tps)" "$OUR_TGB")
        if [ -n "$PY" ]; then
            echo "bench: run $i/$REPS: llama.cpp tg$N x b$B -t $T"
            llama "$OUT/llama-b.$i.txt" -p 64 -n "$N" -b "$B" -t "$T" &&
                LL_TGB=$(best "$(json_field "$OUT/llama-b.$i.txt" tg_batch_tps)" "$LL_TGB")
        fi
    done
fi

OUR_TGD=""; LL_TGD=""
if [ "$D" -gt 0 ]; then
    i=0
    while [ $i -lt "$REPS" ]; do
        i=$((i + 1))
        echo "bench: run $i/$REPS: smollm3 bench -p $P -n $N -d $D -t $T"
        nice "$BUILD/bin/smollm3" bench -m "$MODEL" -p "$P" -n "$N" -d "$D" -t "$T" --json > "$OUT/ours-d.$i.txt" ||
            { cat "$OUT/ours-d.$i.txt"; exit 1; }
        OUR_TGD=$(best "$(json_field "$OUT/ours-d.$i.txt" tg_tps)" "$OUR_TGD")
        if [ -n "$PY" ]; then
            echo "bench: run $i/$REPS: llama.cpp tg$N @ d$D -t $T"
            llama "$OUT/llama-d.$i.txt" -p "$P" -n "$N" -d "$D" -t "$T" &&
                LL_TGD=$(best "$(json_field "$OUT/llama-d.$i.txt" tg_tps)" "$LL_TGD")
        fi
    done
fi

BW=$(echo "$BWS" | median)
OUR_ISA=$(sed -n 's/.*"backend": *"\([^"]*\)".*/\1/p' "$OUT/ours.1.txt" | tail -1)
if [ "${BENCH_NO_LLAMA:-0}" = 1 ]; then PEER_LINE="not run (BENCH_NO_LLAMA=1)"
elif [ -n "$PY" ]; then PEER_LINE="llama-cpp-python $PEER_BUILD build ($LL_ISA)${PEER_NOTE:+; $PEER_NOTE}"
else PEER_LINE="n/a: ${PEER_NOTE:-no peer}"
fi
printf '\ncpu: %s; SIMD flags: %s\n' "$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)" \
    "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx_vnni|avx512(f|bw|vl|_vnni|_bf16|vbmi)|amx_[a-z0-9]*)$' | tr '\n' ' ')"
# which kernel variant ran and why (bench_kernels --which: the same selection, SMOL_CPU included)
WHY=$("$BUILD/bench/bench_kernels" --which 2>/dev/null | sed 's/^[^:]*: //')
printf 'smollm3d: %s kernels: %s\n' "$OUR_ISA" "${WHY:-SMOL_CPU=${SMOL_CPU:-auto}}"
printf 'llama.cpp: %s\n' "$PEER_LINE"
awk -v bw="$BW" -v ofr="$(echo "$OUR_FR" | median)" -v lfr="$(echo "$LL_FR" | median)" -v mb="$MODEL_BYTES" -v t="$T" -v p="$P" -v n="$N" -v reps="$REPS" \
    -v opp="$OUR_PP" -v otg="$OUR_TG" -v orss="$OUR_RSS" -v lpp="$LL_PP" -v ltg="$LL_TG" -v lrss="$LL_RSS" \
    -v d="$D" -v otgd="$OUR_TGD" -v ltgd="$LL_TGD" -v b="$B" -v otgb="$OUR_TGB" -v ltgb="$LL_TGB" \
    -v load="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
    lim = bw * 1e9 / mb
    printf "\nsynthetic SmolLM3-3B Q4_K_M (%.3f GB), %d threads, best of %d, load average %s\n", mb / 1e9, t, reps, load
    printf "read bandwidth %.2f GB/s (median of the runs) -> decode limit %.2f tokens/s\n\n", bw, lim
    printf "%-22s %12s %12s %14s\n", "", "smollm3d", "llama.cpp", "ratio"
    r = (lpp > 0) ? sprintf("%.2fx", opp / lpp) : "n/a"
    printf "%-22s %12.2f %12s %14s\n", "pp" p " tokens/s", opp, (lpp > 0 ? sprintf("%.2f", lpp) : "n/a"), r
    r = (ltg > 0) ? sprintf("%.2fx", otg / ltg) : "n/a"
    printf "%-22s %12.2f %12s %14s\n", "tg" n " tokens/s", otg, (ltg > 0 ? sprintf("%.2f", ltg) : "n/a"), r
    if (b > 1) {
        r = (ltgb > 0) ? sprintf("%.2fx", otgb / ltgb) : "n/a"
        printf "%-22s %12.2f %12s %14s\n", "tg" n " x b" b " tok/s", otgb, (ltgb > 0 ? sprintf("%.2f", ltgb) : "n/a"), r
    }
    if (d > 0) {
        r = (ltgd > 0) ? sprintf("%.2fx", otgd / ltgd) : "n/a"
        printf "%-22s %12.2f %12s %14s\n", "tg" n " @ d" d " tok/s", otgd, (ltgd > 0 ? sprintf("%.2f", ltgd) : "n/a"), r
    }
    printf "%-22s %12.0f %12s %14s\n", "peak RSS MiB", orss / 1024, (lrss > 0 ? sprintf("%.0f", lrss / 1024) : "n/a"),
           (lrss > 0 ? sprintf("%.2fx", orss / lrss) : "n/a")
    printf "%-22s %11.0f%% %11s %14s\n", "tg / bandwidth limit", 100 * ofr,
           (lfr > 0 ? sprintf("%.0f%%", 100 * lfr) : "n/a"), "(median of runs)"
}'
