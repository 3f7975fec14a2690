#!/usr/bin/env bash
# tests/gpu/check.sh - the device check: one command on the lent GPU, at most 6 minutes
# (--quick: at most 8, everything the next device run must measure; below).
#
#   bash .gpu/run tests/gpu/check.sh     on the device, in a tree packed by ../shared/hooks/gpu-kit
#                                        (and tests/gpu/prepare.sh for the llama.cpp peer)
#   bash .gpu/run tests/gpu/check.sh --quick
#                                        the quick mode (device run: timeout_s 560)
#   GPU_CHECK_DRY=1 bash tests/gpu/check.sh --quick
#                                        its CPU dry run, here: the same steps on --backend auto (the
#                                        CPU), the fixture model, tiny sizes; the GPU-only steps skipped
#   make gpu-check                       on a machine with a GPU: builds, then OUT=build/gpu-check
#
# ---- the quick mode (--quick; tests/gpu/quick.sh, sourced): at most GPU_CHECK_HARD = 480 s in all,
# every command under `timeout`, an optional part dropped (and the drop listed in the summary)
# when the time left is short.  In order (typical seconds on an H200; the cap in brackets):
#   llama    llama.cpp's CUDA build (llama-bench, llama-batched-bench, llama-server in one ninja
#            run, -k 0, -j LLAMA_JOBS = 16, nice 19) started in the background (~240-300 s)
#   device   nvidia-smi, copy bandwidth BW (PyTorch)                          ~10 s  [90]
#   synth    the full-size SmolLM3-3B Q4_K_M (random weights) in /dev/shm     ~3 s   [120]
#   correct  together, correctness only (nothing timed): test_cuda (SMOL_TEST_QUICK=1, CK_RUN_CASE
#            honoured) [150]; compute-sanitizer memcheck + racecheck on test_cuda's ops case and on
#            its fattn case (SMOL_CUDA_ATTN=tiled SMOL_TEST_QUICK=1), four processes [100 each; a run
#            cut there reports what it saw]; meanwhile each row's logits of a short step (s8: 8
#            tokens, the decode path; s40: 40, the GEMM / prefill attention) against the default's:
#            a value the build refuses ("... must be ...") makes the row "not in this build"  ~100-150 s
#   pass1    smollm3 bench per accepted row: -p 512 -n 128 (pp512, tg128); for the default also
#            -p 512 -n 128 -d 4096 and -p 8192 -n 128 -d 16384 (tg at depth, pp8192)  ~5 s a row [40]
#   serve    the default: smollm3d (max_running / step_tokens / kv_budget_mb auto) behind
#            smollm3-gateway; tests/load/loadgen.py --mode http --no-think --ignore-eos --mix chat
#            --max-tokens 128 at 16 / 64 / 256 streams (one request a stream, seed = streams):
#            tokens/s, ITL p99, prompt tokens; the engine's stats per level; TTFT of three ~4K-token
#            prompts (smollm3ctl, the done event's ttft_ms)                        ~30 s
#   ncu      kernels (and their time) of one decode step of the best row         ~40 s  [75]
#   serve_best  the same for the best row (fastest tg128 whose logits agree, >= 1% over the
#            default; GPU_CHECK_BEST=ROW picks it) when it is not the default        ~30 s
#            (ncu and serve_best keep GPU_CHECK_PEER_S (130) for llama.cpp while it builds, else they
#            wait until after the peer)
#   depth    the other rows' tg at depth 4096 / 16384 and pp8192 (best first, then the table's
#            order) while llama.cpp builds, keeping GPU_CHECK_PEER_S (130) for the peer
#   peer     when built: llama-bench -fa 1 (pp512, pp8192, tg128; tg128 at -d 4096,16384; -r 4,
#            figures = the median of the warm samples, the first being cold), llama-server (-np 64,
#            --jinja) under the same loadgen plans as the gateway (both sides' prompt tokens
#            printed, they must agree within 10%), llama-batched-bench 16 / 64 / 256 x (128+128)
#   depth2   the depth runs left, as time allows; then serve_best / ncu if the peer's reserve put
#            them off
#   summary  one table (row, tg128, % of copy BW, ratio to llama.cpp, d4096, d16384, pp512, pp8192,
#            TTFT 4K, 16 / 64 / 256 streams tokens/s and ITL p99, logits), the targets of
#            kernels/cuda/NOTES.md ("Next device run"), steps and drops; $OUT/results.json,
#            $OUT/summary.txt, $OUT/quick.svg (and quick.png where matplotlib imports)
# The rows: QUICK_ROWS below (GPU_CHECK_ROWS replaces it), each A/B'd against the default (every
# SMOL_CUDA_* knob unset).  A row is "not in this build" when the binary refuses its value, or when
# no binary holds the variable's name and the knob line does not show it; "= default" when its
# knob line equals the default's; either is skipped, not a failure.
#
# Steps, each timed, each command under `timeout`; a step's pass / fail / skip is recorded and
# the next step runs regardless:
#    1 llama   .gpu/llama.cpp.tar.xz unpacked to /tmp, llama.cpp's CUDA build (llama-bench,
#              llama-batched-bench, then llama-server unless GPU_CHECK_LLAMA_SERVER=OFF) started
#              in the background (nice, -j LLAMA_JOBS = 12)
#    2 device  nvidia-smi facts; device-to-device copy bandwidth (PyTorch, 2 GiB, events,
#              median of 10, bytes read + written) = BW
#    3 test    build/tests/test_cuda (CK_RUN_CASE honoured): its "stats:" lines and summary
#    4 sanit   compute-sanitizer memcheck and racecheck on test_cuda's kernel cases (CK_RUN_CASE=ops)
#   4b sanitfa compute-sanitizer memcheck and racecheck on test_cuda's tiled attention
#              (CK_RUN_CASE=fattn SMOL_CUDA_ATTN=tiled SMOL_TEST_QUICK=1: its shorter batches)
#    5 synth   smollm3 synth -> /dev/shm/3b.gguf (full-size SmolLM3-3B Q4_K_M, random weights)
#    6 matvec  build/bench/bench_cuda --bw BW: mat-vec per type / shape / n, f32 vs q8, checked
#    7 bench   smollm3 bench -p 512 -n 128 on cuda per knob combination (SMOL_CUDA_MATVEC /
#              _FUSE / _GRAPHS: f32/0/0 q8/0/0 q8/1/0 q8/1/1); each combination's logits of an
#              8-token step against f32/0/0's; the best combination (fastest tg128 that agrees)
#              and the baseline at -d 4096, -p 2048 -b 4, -b 16; the CPU backend once
#              (-t 16 -p 128 -n 32, the llama.cpp build paused meanwhile)
#   7b attn    knob cuda_attn, paged vs tiled vs prefill: bench_cuda --attn (be->attention alone: prefill 512 /
#              2048 / 8192, decode at 4096 / 16384, tiled checked against paged), then smollm3 bench
#              (best combination) pp512 + tg64 at d4096, pp2048, pp8192 per value, and the logits of an
#              8-token step tiled vs paged
#   7c gemm    cuda_gemm A/B/C (SMOL_CUDA_GEMM=tiled|mma|imma on the best combination), in turn:
#              smollm3 bench -p 512 -n 16 -b 4, -p 2048 -n 16 -b 16, -p 128 -n 32 -b 64,
#              -p 8192 -n 8 (each <= 45 s; ~100 s in all on an H100 at today's tiled speed), and the
#              logits of a 40-token step (the GEMM's path) mma vs tiled, imma vs mma and lt (cuBLASLt,
#              logits only: its speed is the quick mode's gemm-lt row) vs mma; bench_cuda
#              --gemm on gate_up and down (q4_K, q6_K; n 16 64 512 2048; tiled, mma, imma; <= 60 s);
#              GPU_CHECK_GEMM=0 skips it
#    8 daemon  smollm3d on cuda (best combination): 1, 16, 64 concurrent `smollm3ctl generate
#              -n 128`: tokens/s in all, TTFT (the Done event's timings); then how often a resumed
#              answer diverges (tests/gpu/resume_diverge.py: 16 answers of 96 tokens, batched, sent
#              again with their first half as resume_tokens; "resumed answers diverged: K of N", ~10 s)
#   8b load    tests/load/loadgen.py --mode ctl (smollm3ctl clients, python3's standard library) on a
#              daemon with max_running 256: 1 / 16 / 64 / 256 streams (GPU_CHECK_LOAD_STREAMS), each
#              level `streams` requests (>= 4) of GPU_CHECK_LOAD_ARGS ("--mix chat --max-tokens 128"),
#              at most GPU_CHECK_LOAD_S (60) s each: tokens/s, requests/s, TTFT and ITL p50/p99
#    9 ncu     per-kernel time and DRAM bytes of one decode step (best combination), then of one
#              step of GPU_CHECK_NCU_BATCH (64) sequences decoding together (to the log)
#   10 peer    llama-bench -fa 1 (pp512, pp2048, tg128, tg128 at depth 4096) and
#              llama-batched-bench (1/4/16/64 sequences of 128+128), if built in time; then
#              llama-server (-np 64) under tests/load/loadgen.py --mode http at the load step's
#              stream counts and plans, printed beside the daemon's in the load table
#   11 summary the tables, printed last, and $OUT/results.json
#
# Knobs of the run (environment): GPU_CHECK_SKIP (step ids not to run), GPU_CHECK_COMBOS (the
# matvec-fuse-graphs combinations of step 7), GPU_CHECK_BEST_RUNS ("best base", "" for none),
# GPU_CHECK_BENCH_CPU (0: no CPU run), GPU_CHECK_SANITIZE_TOOLS, GPU_CHECK_ATTN_KERNELS (0: no
# bench_cuda --attn), GPU_CHECK_LLAMA_REPS, GPU_CHECK_DAEMON_KNOBS (m-f-g-gemm-attn for the daemon's
# steps; by default the best combination, cuda_gemm and cuda_attn at their defaults).  The peer
# (10) runs before the daemon's steps.
# $OUT (default build/gpu-check) gets at most 7 files: check.log (every step's full output),
# results.json, summary.txt, bench_cuda.jsonl, ncu.csv, daemon.log, llama_build.log.
# Time: the optional steps (4, 8, 8b, 9, 10 and the extra runs of 7) are skipped once
# GPU_CHECK_BUDGET (330) seconds have passed, and no command's timeout reaches past
# GPU_CHECK_HARD (350).  Without a GPU each GPU step fails or skips at once and the summary
# is still printed.  Work files live in a temporary folder, removed at the end.
set -u
# ---- the quick mode's knob rows: ROW  SETTINGS (VAR=VALUE, comma-separated)  CHECK (logits step:
# s8 = 8 tokens through the decode path, s40 = 40 tokens through the GEMM / prefill attention).
# In priority order: when time runs short the depth runs of the last rows are the ones dropped.
QUICK_ROWS=${GPU_CHECK_ROWS:-"
graphs-bucket   SMOL_CUDA_GRAPHS=bucket     s8
fuse-layer      SMOL_CUDA_FUSE=layer        s8
matvec-q8k      SMOL_CUDA_MATVEC=q8k        s8
persistent-on   SMOL_CUDA_PERSISTENT=on     s8
gemm-imma       SMOL_CUDA_GEMM=imma         s40
gemm-lt         SMOL_CUDA_GEMM=lt           s40
gemm-fuse       SMOL_CUDA_GEMM_FUSE=on      s40
gemm-imma-fuse  SMOL_CUDA_GEMM=imma,SMOL_CUDA_GEMM_FUSE=on  s40
graphs-off      SMOL_CUDA_GRAPHS=off        s8
fuse-off        SMOL_CUDA_FUSE=off          s8
attn-tiled      SMOL_CUDA_ATTN=tiled        s40
attn-paged      SMOL_CUDA_ATTN=paged        s40
gemm-tiled      SMOL_CUDA_GEMM=tiled        s40
persistent-off  SMOL_CUDA_PERSISTENT=off    s8
matvec-f32      SMOL_CUDA_MATVEC=f32        s8
"}
QUICK=0
for a in "$@"; do
    case $a in
        --quick) QUICK=1 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "check.sh: unknown argument '$a' (--quick, --help)" >&2; exit 2 ;;
    esac
done
DRY=${GPU_CHECK_DRY:-0}
[ "$DRY" = 1 ] && [ "$QUICK" = 0 ] && { echo "check.sh: GPU_CHECK_DRY=1 is the quick mode's dry run: add --quick" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
rm -f "$OUT"/check.log "$OUT"/results.json "$OUT"/summary.txt "$OUT"/bench_cuda.jsonl "$OUT"/ncu.csv \
      "$OUT"/daemon.log "$OUT"/llama_build.log "$OUT"/quick.svg "$OUT"/quick.png
W=$(mktemp -d /tmp/gpu-check.XXXXXX) || exit 1
mkdir -p "$W/sb" "$W/agree" "$W/daemon" "$W/llama"
LOG=$OUT/check.log
: > "$LOG"
: > "$W/kv"
if [ "$QUICK" = 1 ]; then
    HARD=${GPU_CHECK_HARD:-480}
    BUDGET=${GPU_CHECK_BUDGET:-$((HARD - 15))}   # the quick mode guards its parts itself (quick.sh)
else
    BUDGET=${GPU_CHECK_BUDGET:-330}
    HARD=${GPU_CHECK_HARD:-350}
fi
if [ "$DRY" = 1 ]; then             # the fixture model is the repository's: never removed
    MODEL=${GPU_CHECK_MODEL:-tests/fixtures/models/fixture-a.Q4_K_M.gguf}
    GPU_CHECK_KEEP_MODEL=1
else
    MODEL=${GPU_CHECK_MODEL:-/dev/shm/3b.gguf}
fi
PRESET=${GPU_CHECK_PRESET:-smollm3-3b}  # "tiny": a dry run of the script where there is no GPU
LLAMA_DIR=/tmp/llama.cpp
LLAMA_JOBS=${LLAMA_JOBS:-$([ "$QUICK" = 1 ] && echo 16 || echo 12)}
LLAMA_SERVER=${GPU_CHECK_LLAMA_SERVER:-ON}   # OFF: no llama-server build, no load against it
B=${GPU_CHECK_BUILD:-build}              # where the binaries are (make gpu-check passes $(BUILD))
SM=$B/bin/smollm3
CTL=$B/bin/smollm3ctl
DAEMON=$B/bin/smollm3d
COMBOS=${GPU_CHECK_COMBOS:-f32-0-0 q8-0-0 q8-1-0 q8-1-1}   # matvec-fuse-graphs; the first is the baseline
export GPU_CHECK_COMBOS=$COMBOS           # report.py reads the same list
SKIP=" ${GPU_CHECK_SKIP:-} "              # step ids not to run, e.g. "matvec daemon ncu"
BASE=f32-0-0
BEST=$BASE
BW=""
L2MB=50
LLAMA_PID=""
DAEMON_PID=""
NODEV=""                                 # set when test_cuda or bench_cuda found no CUDA device
BACKEND_ARGS=(--backend cuda)
CPU_ARGS=(--backend cpu)

# .gpu/run puts the kit's Debian libraries (.gpu/solib) first on LD_LIBRARY_PATH for our
# binaries; the machine's own programs (python3 with torch, cmake and the compilers, tar, xz,
# nvidia-smi, ps, llama.cpp's binaries) run without them: sys CMD...
SYS_LD=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v '/\.gpu/solib/*$' | paste -sd: -)
sys() { LD_LIBRARY_PATH=$SYS_LD "$@"; }
report() { sys python3 tests/gpu/report.py "$@"; }

exec 3>&1                                # the console; step output goes to $LOG
say() { printf '%s\n' "$*" >&3; printf '%s\n' "$*" >> "$LOG"; }
show() { tee -a "$LOG" >&3; }            # cmd | show: to the console and the log
put() { printf '%s\t%s\n' "$1" "$2" >> "$W/kv"; }
over() { [ "$SECONDS" -ge "$BUDGET" ]; }
# tmo SECONDS CMD...: CMD under timeout, never past the hard end
tmo() {
    local s=$1 l=$((HARD - SECONDS))
    shift
    [ "$l" -lt "$s" ] && s=$l
    [ "$s" -lt 5 ] && s=5
    timeout -k 5 "$s" "$@"
}
have() { command -v "$1" >/dev/null 2>&1; }
# combo_env m-f-g[-gemm[-attn]]: the environment of a knob combination (nothing for "cpu");
# an empty field leaves that knob at its default (m-f-g--tiled: cuda_attn only)
combo_env() {
    [ "$1" = cpu ] && return
    local m f g G a
    IFS=- read -r m f g G a <<< "$1"
    echo "SMOL_CUDA_MATVEC=$m SMOL_CUDA_FUSE=$f SMOL_CUDA_GRAPHS=$g${G:+ SMOL_CUDA_GEMM=$G}${a:+ SMOL_CUDA_ATTN=$a}"
}
# tree_pids PID: PID and its descendants (ninja puts its jobs in their own process groups)
tree_pids() {
    have ps || { echo "$1"; return; }
    sys ps -e -o pid=,ppid= | awk -v root="$1" '{ kids[$2] = kids[$2] " " $1 }
        END { q[1] = root; h = 1; t = 1
              while (h <= t) { x = q[h++]; print x; n = split(kids[x], a, " "); for (i = 1; i <= n; i++) q[++t] = a[i] } }'
}
llama_signal() {   # SIG: to the background build and everything it started
    [ -n "$LLAMA_PID" ] || return 0
    local p
    for p in $(tree_pids "$LLAMA_PID"); do kill "-$1" "$p" 2>/dev/null; done
    return 0
}
cleanup() {
    [ -n "$DAEMON_PID" ] && kill -KILL "$DAEMON_PID" 2>/dev/null
    llama_signal CONT
    llama_signal TERM
    [ "${GPU_CHECK_KEEP_MODEL:-0}" = 1 ] || rm -f "$MODEL"
    [ "${GPU_CHECK_KEEP_WORK:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

# step ID OPTIONAL TITLE FUNCTION: runs FUNCTION (stdout/stderr to the log); status from its exit:
# 0 pass, 77 skipped, else fail; FUNCTION may set NOTE
step() {
    local id=$1 opt=$2 title=$3 fn=$4 t0=$SECONDS rc st
    if [ "${SKIP#* $id }" != "$SKIP" ]; then
        say "$(printf '[%3ds] %-7s skipped: GPU_CHECK_SKIP' "$SECONDS" "$id")"
        put "step.$id" "skipped	0	GPU_CHECK_SKIP"
        return
    fi
    if [ "$opt" = 1 ] && over; then
        say "$(printf '[%3ds] %-7s skipped: past the %ss budget' "$SECONDS" "$id" "$BUDGET")"
        put "step.$id" "skipped	0	past the ${BUDGET}s budget"
        return
    fi
    say "$(printf '[%3ds] %-7s %s' "$SECONDS" "$id" "$title")"
    printf '\n===== step %s: %s (t=%ds)\n' "$id" "$title" "$SECONDS" >> "$LOG"
    NOTE=""
    "$fn" >> "$LOG" 2>&1
    rc=$?
    case $rc in 0) st=pass ;; 77) st=skipped ;; *) st=fail ;; esac
    put "step.$id" "$st	$((SECONDS - t0))	$NOTE"
    say "$(printf '[%3ds] %-7s %s (%ds)%s' "$SECONDS" "$id" "$st" $((SECONDS - t0)) "${NOTE:+: $NOTE}")"
}

# ---------------------------------------------------------------- 1: the peer's build
s_llama() {
    local tarball=.gpu/llama.cpp.tar.xz
    [ -f "$tarball" ] || { NOTE="no $tarball (tests/gpu/prepare.sh)"; return 77; }
    have cmake || { NOTE="no cmake"; return 1; }
    rm -rf "$LLAMA_DIR" && mkdir -p "$(dirname "$LLAMA_DIR")" || return 1
    sys tar xJf "$tarball" -C "$(dirname "$LLAMA_DIR")" || { NOTE="cannot unpack $tarball"; return 1; }
    local gen=() nvcc
    have ninja && gen=(-G Ninja)
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    set -m    # its own process group
    (
        export LD_LIBRARY_PATH=$SYS_LD
        t0=$(date +%s)
        cd "$LLAMA_DIR" &&
        nice -n 19 cmake -S . -B b "${gen[@]}" -DCMAKE_CUDA_COMPILER="$nvcc" \
            -DGGML_CUDA=ON -DGGML_CUDA_NO_VMM=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_CUDA_FA_ALL_QUANTS=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER="$LLAMA_SERVER" \
            -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release ||
            { echo "llama build: exit 1 (configure failed) after $(($(date +%s) - t0)) s"; exit 0; }
        if [ "$QUICK" = 1 ]; then
            # one build of the three (the server's large units compile beside ggml-cuda's
            # instead of after them); -k: a failure in one leaves the others built
            keep=(-k); [ ${#gen[@]} -gt 0 ] && keep=(-k 0)
            nice -n 19 cmake --build b -j "$LLAMA_JOBS" --target llama-bench llama-batched-bench \
                $([ "$LLAMA_SERVER" = ON ] && echo llama-server) -- "${keep[@]}"
            echo "llama build: exit $? after $(($(date +%s) - t0)) s"
            exit 0
        fi
        nice -n 19 cmake --build b -j "$LLAMA_JOBS" --target llama-bench llama-batched-bench
        echo "llama build: exit $? after $(($(date +%s) - t0)) s"
        # then the server (its own command: a failure there leaves the benches built)
        if [ "$LLAMA_SERVER" = ON ]; then
            nice -n 19 cmake --build b -j "$LLAMA_JOBS" --target llama-server
            echo "llama-server build: exit $? after $(($(date +%s) - t0)) s"
        fi
    ) > "$OUT/llama_build.log" 2>&1 < /dev/null &
    LLAMA_PID=$!
    set +m
    NOTE="building in the background (pid $LLAMA_PID, -j $LLAMA_JOBS)"
    return 0
}

# ---------------------------------------------------------------- 2: device facts, copy bandwidth
s_device() {
    have nvidia-smi || { NOTE="no nvidia-smi"; return 1; }
    local smi
    smi=$(sys tmo 20 nvidia-smi -L 2>&1) || { echo "$smi"; NOTE="nvidia-smi -L failed: $(echo "$smi" | head -n 1 | cut -c1-120)"; return 1; }
    echo "$smi" | show
    sys tmo 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv | show
    put fact.device "$(sys tmo 10 nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
    put fact.driver "$(sys tmo 10 nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    sys tmo 90 python3 - > "$W/bw.json" <<'EOF'
import json, statistics, torch
p = torch.cuda.get_device_properties(0)
n = 2 << 30                                   # 2 GiB each way
a = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
torch.cuda.synchronize()
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize()
    ts.append(s.elapsed_time(e) / 1e3)
t = statistics.median(ts)
print(json.dumps({"device": p.name, "sms": p.multi_processor_count, "l2_mb": getattr(p, "L2_cache_size", 0) / 1e6,
                  "mem_gib": p.total_memory / 2**30, "bw_gbps": 2 * n / t / 1e9, "copy_ms_median": t * 1e3,
                  "copy_ms_min": min(ts) * 1e3, "torch": torch.__version__}))
EOF
    local rc=$?
    cat "$W/bw.json"
    [ $rc -eq 0 ] || { NOTE="copy bandwidth: python3/torch failed (rc $rc)"; return 1; }
    BW=$(sys python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["bw_gbps"])' "$W/bw.json")
    local l2
    l2=$(sys python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["l2_mb"])' "$W/bw.json")
    [ "${l2:-0}" -gt 0 ] 2>/dev/null && L2MB=$l2
    put fact.bw_gbps "$BW"
    put fact.l2_mb "$L2MB"
    NOTE="copy $BW GB/s (read + written), L2 $L2MB MB"
}

# ---------------------------------------------------------------- 3: test_cuda
s_test() {
    [ -x "$B/tests/test_cuda" ] || { NOTE="no $B/tests/test_cuda"; return 1; }
    tmo 180 "$B/tests/test_cuda" > "$W/test_cuda.out" 2>&1   # 90 before fattn, t_model_long, t_gemm_mma
    local rc=$?
    cat "$W/test_cuda.out"
    grep '^stats:' "$W/test_cuda.out" | head -n 24 | show
    [ "$(grep -c '^stats:' "$W/test_cuda.out")" -le 24 ] || say "  ... $(grep -c '^stats:' "$W/test_cuda.out") stats lines in all (check.log)"
    local sum
    sum=$(grep -E '^[0-9]+%: Checks:' "$W/test_cuda.out" | tail -n 1)
    say "  ${sum:-no Check summary}${CK_RUN_CASE:+ (CK_RUN_CASE=$CK_RUN_CASE)}"
    put fact.test_cuda "${sum:-none} rc=$rc"
    if grep -q 'SKIPPED: no CUDA device' "$W/test_cuda.out"; then
        NODEV=$(grep -m1 -o 'SKIPPED: no CUDA device.*' "$W/test_cuda.out" | cut -c10-160)
        NOTE=$NODEV
        return 77
    fi
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && { NOTE="timed out"; return 1; }
    NOTE="${sum:-no summary} (rc $rc)"
    return $rc
}

# ---------------------------------------------------------------- 4: compute-sanitizer
# sanit_errors FILE TOOL: the errors (memcheck) / hazards (racecheck) its summary gives; empty when
# it printed none (a run cut by its timeout): sanit_seen then counts the reports printed before the cut
sanit_errors() {
    local e=""
    if [ "$2" = racecheck ]; then
        e=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?' "$1" |
            tail -n 1 | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+')
    fi
    [ -n "$e" ] || e=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$1" | tail -n 1 | grep -oE '[0-9]+$')
    echo "$e"
}
sanit_seen() { grep -cE '^========= +(Invalid|Error|Race reported|Program hit|Out-of-range|Barrier error)' "$1"; }

s_sanit() {
    local cs case=${GPU_CHECK_SANITIZE_CASE:-ops} tool rc bad=0 errs t=${GPU_CHECK_SANITIZE_S:-75}
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    [ -x "$cs" ] || { NOTE="no compute-sanitizer"; return 77; }
    [ -x "$B/tests/test_cuda" ] || { NOTE="no $B/tests/test_cuda"; return 1; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    NOTE=""
    for tool in ${GPU_CHECK_SANITIZE_TOOLS:-memcheck racecheck}; do
        over && { NOTE="$NOTE $tool: skipped (budget);"; continue; }
        CK_RUN_CASE=$case tmo "$t" "$cs" --tool "$tool" "$B/tests/test_cuda" > "$W/$tool.out" 2>&1
        rc=$?
        if grep -qE 'Checks: 0,' "$W/$tool.out"; then
            say "  $tool: no tcase '$case' in test_cuda: the whole suite"
            tmo "$t" "$cs" --tool "$tool" "$B/tests/test_cuda" > "$W/$tool.out" 2>&1
            rc=$?
        fi
        cat "$W/$tool.out"
        errs=$(sanit_errors "$W/$tool.out" "$tool")
        local sum
        sum=$(grep -E '^[0-9]+%: Checks:' "$W/$tool.out" | tail -n 1)
        say "  $tool: ${errs:-?} errors; test ${sum:-gave no summary} (rc $rc)"
        put "fact.$tool" "errors=${errs:-?} rc=$rc ${sum}"
        NOTE="$NOTE $tool ${errs:-?} errors$( { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo " (timed out after ${t}s)");"
        if grep -q 'SKIPPED: no CUDA device' "$W/$tool.out"; then bad=77
        elif [ "${errs:-x}" != 0 ] || [ $rc -ne 0 ]; then bad=1; fi
    done
    NOTE=${NOTE# }
    [ "$bad" = 1 ] && NOTE="$NOTE test_cuda under the sanitizer: rc $rc"
    return $bad
}

# ---------------------------------------------------------------- 4b: memcheck of the tiled attention
s_sanit_fattn() {
    local cs rc errs tool bad=0 t=${GPU_CHECK_SANITIZE_FATTN_S:-60}
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    [ -x "$cs" ] || { NOTE="no compute-sanitizer"; return 77; }
    [ -x "$B/tests/test_cuda" ] || { NOTE="no $B/tests/test_cuda"; return 1; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    NOTE=""
    for tool in memcheck racecheck; do
        over && { NOTE="$NOTE $tool: skipped (budget);"; continue; }
        CK_RUN_CASE=fattn SMOL_CUDA_ATTN=tiled SMOL_TEST_QUICK=1 tmo "$t" "$cs" --tool "$tool" "$B/tests/test_cuda" \
            > "$W/${tool}_fattn.out" 2>&1
        rc=$?
        cat "$W/${tool}_fattn.out"
        errs=$(sanit_errors "$W/${tool}_fattn.out" "$tool")
        local sum
        sum=$(grep -E '^[0-9]+%: Checks:' "$W/${tool}_fattn.out" | tail -n 1)
        say "  $tool (fattn): ${errs:-?} errors; test ${sum:-gave no summary} (rc $rc)"
        put "fact.${tool}_fattn" "errors=${errs:-?} rc=$rc ${sum}"
        NOTE="$NOTE $tool ${errs:-?} errors (rc $rc);"
        grep -qE 'Checks: 0,' "$W/${tool}_fattn.out" && { NOTE="$NOTE no tcase 'fattn' in test_cuda;"; bad=1; }
        { [ "${errs:-x}" = 0 ] && [ $rc -eq 0 ]; } || bad=1
    done
    NOTE=${NOTE# }
    return $bad
}

# ---------------------------------------------------------------- 5: the full-size model
s_synth() {
    [ -x "$SM" ] || { NOTE="no $SM"; return 1; }
    mkdir -p "$(dirname "$MODEL")"
    tmo 120 "$SM" synth -o "$MODEL" --preset "$PRESET" > "$W/synth.out" 2>&1
    local rc=$?
    cat "$W/synth.out"
    [ $rc -eq 0 ] || { NOTE="synth failed (rc $rc): $(tail -n 1 "$W/synth.out" | cut -c1-150)"; return 1; }
    local gb
    gb=$(grep -oE '[0-9.]+ GB of tensor data' "$W/synth.out" | grep -oE '^[0-9.]+')
    put fact.model_gb "$gb"
    put fact.model "$MODEL"
    NOTE="$MODEL: ${gb:-?} GB of tensor data"
}

# ---------------------------------------------------------------- 6: mat-vec microbenchmark
s_matvec() {
    [ -x "$B/bench/bench_cuda" ] || { NOTE="no $B/bench/bench_cuda"; return 1; }
    # shellcheck disable=SC2086  # GPU_CHECK_MATVEC_ARGS: extra words, e.g. "--types q4_K --shapes kv"
    tmo 90 "$B/bench/bench_cuda" --json --l2-mb "$L2MB" ${BW:+--bw "$BW"} ${GPU_CHECK_MATVEC_ARGS:-} \
        > "$W/bench_cuda.jsonl" 2> "$W/bench_cuda.err"
    local rc=$?
    cat "$W/bench_cuda.jsonl" "$W/bench_cuda.err"
    cp "$W/bench_cuda.jsonl" "$OUT/bench_cuda.jsonl"
    if grep -q '^SKIPPED' "$W/bench_cuda.jsonl"; then
        NODEV=$(grep -m1 '^SKIPPED' "$W/bench_cuda.jsonl" | cut -c10-160)
        NOTE=$NODEV
        return 77
    fi
    report bench-cuda "$W/bench_cuda.jsonl" | show
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && { NOTE="timed out"; return 1; }
    [ $rc -eq 0 ] || NOTE="rc $rc: a check failed or a case could not run (see check.log)"
    return $rc
}

# ---------------------------------------------------------------- 7: smollm3 bench
# sbench LABEL COMBO TIMEOUT ARGS...: one `smollm3 bench --json` run -> $W/sb/LABEL.out
sbench() {
    local label=$1 combo=$2 t=$3 rc
    shift 3
    local args=("${BACKEND_ARGS[@]}")
    [ "$combo" = cpu ] && args=("${CPU_ARGS[@]}")
    # shellcheck disable=SC2046  # combo_env is words of VAR=value
    tmo "$t" env $(combo_env "$combo") "$SM" bench -m "$MODEL" "${args[@]}" --json "$@" > "$W/sb/$label.out" 2>&1
    rc=$?
    echo "--- $label ($combo): smollm3 bench ${args[*]} $* -> rc $rc"
    cat "$W/sb/$label.out"
    say "$(printf '  %-14s %s%s' "$label" "$(report bench-brief "$W/sb/$label.out")" "$([ $rc -ne 0 ] && echo " (rc $rc)")")"
    return $rc
}

s_bench() {
    [ -x "$SM" ] || { NOTE="no $SM"; return 1; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    # the CLI's --backend flag (being added): without it, try SMOL_BACKEND and check what ran
    if "$SM" bench --backend cuda 2>&1 | grep -q "unknown argument '--backend'"; then
        BACKEND_ARGS=()
        CPU_ARGS=()
        export SMOL_BACKEND=cuda
        put fact.backend_flag "absent: SMOL_BACKEND=cuda tried"
        say "  smollm3 has no --backend flag: SMOL_BACKEND=cuda in the environment instead"
    fi
    local c fails=0 ids=791,3301,1200,5512,100,2048,64000,17
    if [ -n "$NODEV" ]; then   # the CPU backend alone
        llama_signal STOP
        sbench cpu cpu 60 -t 16 -p 128 -n 32
        llama_signal CONT
        NOTE="cuda runs skipped: $NODEV"
        return 77
    fi
    for c in $COMBOS; do
        sbench "$c" "$c" 60 -p 512 -n 128 || fails=$((fails + 1))
    done
    # each combination's logits (one 8-token step: the decode mat-vec path) against the baseline's
    for c in $COMBOS; do
        over && break
        # shellcheck disable=SC2046
        tmo 40 env $(combo_env "$c") "$SM" logits -m "$MODEL" ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} \
            --ids "$ids" --all -o "$W/agree/$c.bin" || { echo "logits $c failed"; continue; }
        if [ "$c" != "$BASE" ] && [ -s "$W/agree/$BASE.bin" ]; then
            report agree "$W/agree/$c.bin" "$W/agree/$BASE.bin" > "$W/agree/$c.txt"
            say "  logits $c vs $BASE: rel L2 $(cat "$W/agree/$c.txt")"
        fi
    done
    BEST=$(report best "$W")
    put fact.best "$BEST"
    say "  best combination: $BEST"
    local lab
    for lab in ${GPU_CHECK_BEST_RUNS-best base}; do
        c=$BEST
        [ "$lab" = base ] && c=$BASE
        [ "$lab" = base ] && [ "$BEST" = "$BASE" ] && { for x in d4096 p2048b4 b16; do cp "$W/sb/best-$x.out" "$W/sb/base-$x.out" 2>/dev/null; done; break; }
        over && { say "  $lab runs: skipped (budget)"; break; }
        sbench "$lab-d4096" "$c" 60 -p 512 -n 128 -d 4096 || fails=$((fails + 1))
        sbench "$lab-p2048b4" "$c" 60 -p 2048 -n 128 -b 4 || fails=$((fails + 1))
        sbench "$lab-b16" "$c" 60 -p 512 -n 128 -b 16 || fails=$((fails + 1))
    done
    # the CPU backend, alone on the CPUs: the background build paused
    if [ "${GPU_CHECK_BENCH_CPU:-1}" = 1 ]; then
        llama_signal STOP
        sbench cpu cpu 60 -t 16 -p 128 -n 32 || fails=$((fails + 1))
        llama_signal CONT
    fi
    NOTE="$fails of the runs failed; best $BEST"
    [ $fails -eq 0 ]
}

# ---------------------------------------------------------------- 7b: cuda_attn paged vs tiled
s_attn() {
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    local fails=0 rc a
    if [ "${GPU_CHECK_ATTN_KERNELS:-1}" = 0 ]; then
        say "  bench_cuda --attn: skipped (GPU_CHECK_ATTN_KERNELS=0)"
    elif [ -x "$B/bench/bench_cuda" ]; then
        tmo 60 "$B/bench/bench_cuda" --attn --json --reps 3 > "$W/attn.jsonl" 2> "$W/attn.err"
        rc=$?
        cat "$W/attn.jsonl" "$W/attn.err"
        report attn "$W/attn.jsonl" | show
        [ "${PIPESTATUS[0]}" -eq 0 ] && [ $rc -eq 0 ] || fails=$((fails + 1))
    else
        say "  no $B/bench/bench_cuda"
        fails=$((fails + 1))
    fi
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    local m f g
    IFS=- read -r m f g _ <<< "$BEST"
    [ "$BEST" = cpu ] && { m=q8; f=1; g=1; }
    put fact.attn_combo "$m/$f/$g"
    for a in paged tiled prefill; do
        over && { say "  cuda_attn=$a: skipped (budget)"; continue; }
        sbench "attn-$a-p512d4096" "$m-$f-$g--$a" 60 -p 512 -n 64 -d 4096 || fails=$((fails + 1))
        sbench "attn-$a-p2048" "$m-$f-$g--$a" 60 -p 2048 -n 1 || fails=$((fails + 1))
        sbench "attn-$a-p8192" "$m-$f-$g--$a" 90 -p 8192 -n 1 || fails=$((fails + 1))
        # shellcheck disable=SC2046
        tmo 40 env $(combo_env "$m-$f-$g--$a") "$SM" logits -m "$MODEL" ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} \
            --ids "$(seq 11 97 3890 | paste -sd, -)" --all -o "$W/agree/attn-$a.bin" || echo "logits attn $a failed"
    done
    for a in tiled prefill; do   # a 40-token step: the prefill path (> 8 tokens of one sequence)
        if [ -s "$W/agree/attn-paged.bin" ] && [ -s "$W/agree/attn-$a.bin" ]; then
            report agree "$W/agree/attn-$a.bin" "$W/agree/attn-paged.bin" > "$W/agree/attn-$a.txt"
            say "  logits of a 40-token step, cuda_attn $a vs paged: rel L2 $(cat "$W/agree/attn-$a.txt")"
        fi
    done
    NOTE="$fails failed (bench_cuda --attn and smollm3 bench runs)"
    [ $fails -eq 0 ]
}

# ---------------------------------------------------------------- 7c: cuda_gemm tiled vs mma vs imma
s_gemm() {
    [ "${GPU_CHECK_GEMM:-1}" = 0 ] && { NOTE="GPU_CHECK_GEMM=0"; return 77; }
    [ -x "$SM" ] || { NOTE="no $SM"; return 1; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    local g run fails=0 done=0 ids
    ids=$(seq 11 97 3890 | paste -sd, -)   # 40 tokens: one step through the GEMM (> 8 tokens)
    for g in tiled mma imma lt; do   # lt: refused ("must be built with cuBLASLt") where the toolkit has no cuBLAS
        # shellcheck disable=SC2046
        tmo 40 env $(combo_env "$BEST-$g") "$SM" logits -m "$MODEL" ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} \
            --ids "$ids" --all -o "$W/agree/gemm-$g.bin" || echo "logits gemm=$g failed"
    done
    if [ -s "$W/agree/gemm-mma.bin" ] && [ -s "$W/agree/gemm-tiled.bin" ]; then
        report agree "$W/agree/gemm-mma.bin" "$W/agree/gemm-tiled.bin" > "$W/agree/gemm.txt"
        say "  logits of a 40-token step, gemm mma vs tiled: rel L2 $(cat "$W/agree/gemm.txt")"
    fi
    if [ -s "$W/agree/gemm-imma.bin" ] && [ -s "$W/agree/gemm-mma.bin" ]; then
        report agree "$W/agree/gemm-imma.bin" "$W/agree/gemm-mma.bin" > "$W/agree/gemm_imma.txt"
        say "  logits of a 40-token step, gemm imma vs mma: rel L2 $(cat "$W/agree/gemm_imma.txt")"
    fi
    if [ -s "$W/agree/gemm-lt.bin" ] && [ -s "$W/agree/gemm-mma.bin" ]; then
        report agree "$W/agree/gemm-lt.bin" "$W/agree/gemm-mma.bin" > "$W/agree/gemm_lt.txt"
        say "  logits of a 40-token step, gemm lt (cuBLASLt, bf16) vs mma: rel L2 $(cat "$W/agree/gemm_lt.txt")"
    fi
    if [ -x "$B/bench/bench_cuda" ]; then   # the kernels alone: TFLOP/s and the cuBLAS dense rate
        tmo 60 "$B/bench/bench_cuda" --gemm --types q4_K,q6_K --shapes gate_up,down --n-gemm 16,64,512,2048 --reps 3 \
            > "$W/bench_gemm.txt" 2>&1 || fails=$((fails + 1))
        grep -E '^gemm|^bench_cuda' "$W/bench_gemm.txt" | show
    fi
    for run in "p512b4:-p 512 -n 16 -b 4" "p2048b16:-p 2048 -n 16 -b 16" "p128b64:-p 128 -n 32 -b 64" \
               "p8192:-p 8192 -n 8"; do
        for g in tiled mma imma; do
            over && { say "  gemm ${run%%:*}: skipped (budget)"; break 2; }
            # shellcheck disable=SC2086  # the run's arguments are words
            sbench "gemm-$g-${run%%:*}" "$BEST-$g" 45 ${run#*:} || fails=$((fails + 1))
            done=$((done + 1))
        done
    done
    NOTE="$done runs, $fails failed; logits rel L2 mma vs tiled $(cat "$W/agree/gemm.txt" 2>/dev/null || echo '?'), imma vs mma $(cat "$W/agree/gemm_imma.txt" 2>/dev/null || echo '?'), lt vs mma $(cat "$W/agree/gemm_lt.txt" 2>/dev/null || echo '?')"
    [ $fails -eq 0 ]
}

# ---------------------------------------------------------------- 8: the daemon
clients() {   # N: N concurrent generates of 128 tokens
    local n=$1 i pids=()
    mkdir -p "$W/daemon/$n"
    local t0 t1
    t0=$(date +%s.%N)
    for i in $(seq 1 "$n"); do
        tmo 120 "$CTL" --connect "$EP" --timeout 60 generate -n 128 --json --no-think --no-speculative --temp 0.7 \
            --seed "$i" \
            "Client $i of $n: write a long story about a lighthouse keeper and the sea." \
            > "$W/daemon/$n/$i.jsonl" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$W/daemon/$n.wall"
    local toks
    toks=$(cat "$W/daemon/$n"/*.jsonl | grep -o '"completion_tokens":[0-9]*' | awk -F: '{s += $2} END {print s + 0}')
    say "  $(sys python3 -c "import sys; n, k, a, b = sys.argv[1:]; d = float(b) - float(a)
print(f'{int(n):2d} streams: {k} tokens in {d:.2f} s = {int(k) / d:.1f} tokens/s in all')" "$n" "$toks" "$t0" "$t1")"
}

# daemon_up CONF: starts smollm3d (best combination) on $EP, waits until it is ready; 1 with NOTE set
daemon_up() {
    local knobs=$BEST
    [ -n "${GPU_CHECK_DAEMON_KNOBS:-}" ] && knobs=$GPU_CHECK_DAEMON_KNOBS   # m-f-g-gemm-attn
    [ "$BEST" = cpu ] && knobs=cpu
    # shellcheck disable=SC2046
    daemon_start "$1" "$knobs" $(combo_env "$knobs")
}

# daemon_start CONF LABEL [VAR=VALUE...]: smollm3d with that environment on $EP, ready; 1 with NOTE set
daemon_start() {
    local conf=$1 knobs=$2
    shift 2
    env "$@" "$DAEMON" --config "$conf" >> "$OUT/daemon.log" 2>&1 < /dev/null &
    DAEMON_PID=$!
    local t0=$SECONDS
    until "$CTL" --connect "$EP" --timeout 2 health > /dev/null 2>&1; do
        if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
            wait "$DAEMON_PID"
            NOTE="the daemon exited at start (rc $?): $(grep -v '^$' "$OUT/daemon.log" | tail -n 1 | cut -c1-150)"
            DAEMON_PID=""
            return 1
        fi
        if [ $((SECONDS - t0)) -gt 90 ] || [ $((HARD - SECONDS)) -lt 10 ]; then
            NOTE="not ready after $((SECONDS - t0)) s"
            kill -KILL "$DAEMON_PID" 2>/dev/null
            DAEMON_PID=""
            return 1
        fi
        sleep 0.5
    done
    say "  ready after $((SECONDS - t0)) s ($knobs)"
}

# daemon_down: SIGTERM, at most 30 s for the drain; its exit status (1 with NOTE if it hung)
daemon_down() {
    kill -TERM "$DAEMON_PID"
    local i=0
    while kill -0 "$DAEMON_PID" 2>/dev/null && [ $i -lt 60 ]; do sleep 0.5; i=$((i + 1)); done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -KILL "$DAEMON_PID"
        DAEMON_PID=""
        NOTE="did not stop within 30 s of SIGTERM"
        return 1
    fi
    wait "$DAEMON_PID"
    local rc=$?
    DAEMON_PID=""
    return $rc
}

s_daemon() {
    if [ ! -x "$DAEMON" ] || [ ! -x "$CTL" ]; then NOTE="no $DAEMON or $CTL"; return 1; fi
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    local sock=/tmp/smollm3d-check-$$.sock conf=$W/smollm3d.conf
    EP=ipc://$sock
    cat > "$conf" <<EOF
[smollm3d]
model = $MODEL
listen = $EP
backend = cuda
max_running = 64
max_queued = 256
step_tokens = 512
ctx = 8192
kv_budget_mb = 4096
speculative = 0
speculative_calibrate = false
default_max_tokens = 128
log_level = info
EOF
    cat "$conf"
    daemon_up "$conf" || return 1
    local n
    for n in 1 16 64; do
        [ $((HARD - SECONDS)) -lt 25 ] && { say "  $n streams: skipped (time)"; continue; }
        clients "$n"
    done
    if [ $((HARD - SECONDS)) -ge 40 ]; then     # issue 48: a resumed answer vs its first run, on cuda
        LOADGEN_CTL_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} sys tmo 30 python3 tests/gpu/resume_diverge.py \
            --ctl "$CTL" --connect "$EP" -n 16 --tokens 96 > "$W/resume_diverge.out" 2>&1
        local line
        line=$(grep '^resumed answers diverged' "$W/resume_diverge.out" || tail -n 1 "$W/resume_diverge.out")
        say "  ${line:-resume_diverge: no output}"
        put fact.resume_diverged "${line:-none}"
    else
        say "  resumed answers: skipped (time)"
    fi
    daemon_down
    local rc=$?
    [ -n "$NOTE" ] && return 1
    local failed
    failed=$(grep -L '"event":"done"' "$W"/daemon/*/*.jsonl 2>/dev/null | wc -l)
    NOTE="stopped with rc $rc; $failed clients without a done event"
    [ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
}

# ttft_4k EP [DIR]: a ~4,096-token prompt's time to first token on the idle daemon (the Done event's
# ttft_ms), three different prompts (no prefix reuse), one token each: DIR/ttft4k.json (DIR: $W/load);
# GPU_CHECK_TTFT_WORDS (4000) words a prompt
ttft_4k() {
    local i out d=${2:-$W/load}
    [ $((HARD - SECONDS)) -lt 40 ] && { say "  4K-token TTFT: skipped (time)"; return 0; }
    mkdir -p "$d"
    for i in 1 2 3; do
        sys python3 -c 'import random, sys
r = random.Random(int(sys.argv[1]))
w = "the of and a to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part".split()
print(str(r.random()), " ".join(r.choice(w) for _ in range(int(sys.argv[2]))))' "$i" "${GPU_CHECK_TTFT_WORDS:-4000}" |
            tmo 30 "$CTL" --connect "$1" generate --json --no-think --no-speculative -n 1 - \
            > "$d/ttft4k.$i.out" 2>&1
    done
    sys python3 - "$d" <<'EOF' | tee "$d/ttft4k.json" | show
import glob, json, statistics, sys
ttft, toks = [], []
for f in sorted(glob.glob(sys.argv[1] + "/ttft4k.*.out")):
    for l in open(f, errors="replace"):
        try:
            j = json.loads(l)
        except ValueError:
            continue
        if j.get("event") == "done" and j.get("timings"):
            ttft.append(j["timings"]["ttft_ms"]); toks.append(j["usage"]["prompt_tokens"])
print(json.dumps({"ttft4k": {"prompt_tokens": toks, "ttft_ms": ttft,
                             "ttft_ms_median": statistics.median(ttft) if ttft else None}}))
EOF
}

# ---------------------------------------------------------------- 8b: the load generator
# tests/load/loadgen.py --mode ctl (python3's standard library and smollm3ctl: the device has no
# nginx and not the venv) against a daemon with max_running 256, at 1 / 16 / 64 / 256 streams
# (GPU_CHECK_LOAD_STREAMS), each level `streams` requests (at least 4) of GPU_CHECK_LOAD_ARGS
# (--mix chat --max-tokens 128) under at most GPU_CHECK_LOAD_S (60) seconds; then
# GPU_CHECK_LOAD_HOST_STREAMS (64) again with backend_sampling = false, the host sampler (empty: not)
s_load() {
    if [ ! -x "$DAEMON" ] || [ ! -x "$CTL" ]; then NOTE="no $DAEMON or $CTL"; return 1; fi
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    [ -f tests/load/loadgen.py ] || { NOTE="no tests/load/loadgen.py"; return 1; }
    sys python3 -c 'import asyncio, json' 2>/dev/null || { NOTE="SKIPPED: no python3 with asyncio here"; return 77; }
    local sock=/tmp/smollm3d-load-$$.sock conf=$W/smollm3d-load.conf
    local n req t fails=0 ran=0 rc bs levels tag drc=0
    mkdir -p "$W/load"
    # the levels on the daemon's default (backend_sampling = auto: rows sampled on the device),
    # then GPU_CHECK_LOAD_HOST_STREAMS (64) again with the host sampler: its A/B
    for bs in auto false; do
        if [ $bs = auto ]; then levels=${GPU_CHECK_LOAD_STREAMS:-1 16 64 256}; tag=""
        else levels=${GPU_CHECK_LOAD_HOST_STREAMS-64}; tag="host"; fi
        [ -n "$levels" ] || continue
        if over || [ $((HARD - SECONDS)) -lt 45 ]; then say "  backend_sampling = $bs: skipped (time)"; continue; fi
        EP=ipc://$sock
        cat > "$conf" <<EOF
[smollm3d]
model = $MODEL
listen = $EP
backend = cuda
max_running = 256
max_queued = 1024
step_tokens = 512
ctx = 8192
kv_budget_mb = 8192
speculative = 0
speculative_calibrate = false
default_max_tokens = 128
backend_sampling = $bs
log_level = notice
EOF
        cat "$conf"
        daemon_up "$conf" || return 1
        for n in $levels; do
            if over || [ $((HARD - SECONDS)) -lt 30 ]; then say "  $n$tag streams: skipped (time)"; continue; fi
            req=$n
            [ "$req" -lt 4 ] && req=4
            t=${GPU_CHECK_LOAD_S:-60}
            "$CTL" --connect "$EP" --timeout 5 stats --json > "$W/load/$n$tag.st0" 2>/dev/null
            # shellcheck disable=SC2086  # GPU_CHECK_LOAD_ARGS: words
            LOADGEN_CTL_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} sys tmo "$t" python3 tests/load/loadgen.py --mode ctl \
                --connect "$EP" --ctl "$CTL" --ctl-arg=--no-think --ctl-arg=--no-speculative --streams "$n" \
                --requests "$req" --timeout "$t" --seed "$n" ${GPU_CHECK_LOAD_ARGS:---mix chat --max-tokens 128} \
                > "$W/load/$n$tag.out" 2>&1
            rc=$?
            cat "$W/load/$n$tag.out"
            grep '^{"load"' "$W/load/$n$tag.out" | tail -n 1 > "$W/load/$n$tag.json"
            ran=$((ran + 1))
            if [ -s "$W/load/$n$tag.json" ]; then
                grep -A3 '^load:' "$W/load/$n$tag.out" | sed -n '2,4p' |
                    sed "s/^ */  $n streams${tag:+ (host sampler)}: /" | show
            else
                say "  $n$tag streams: no result (rc $rc$( { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo ", timed out after ${t}s"))"
                rm -f "$W/load/$n$tag.json"
            fi
            [ $rc -eq 0 ] || fails=$((fails + 1))
            # the engine's steps during the level: mean batch, ms a step, the model's part, the host's
            "$CTL" --connect "$EP" --timeout 5 stats --json > "$W/load/$n$tag.st1" 2>/dev/null &&
                sys python3 - "$W/load/$n$tag.st0" "$W/load/$n$tag.st1" <<'EOF' | sed "s/^/  $n$tag streams: /" | show
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
d = {k: b.get(k, 0) - a.get(k, 0) for k in ("engine_steps", "step_tokens_total", "step_ms_total", "forward_ms_total")}
n = d["engine_steps"]
if n:
    print(f"engine {n} steps, mean batch {d['step_tokens_total'] / n:.1f} tokens, {d['step_ms_total'] / n:.2f} ms a step "
          f"(model {d['forward_ms_total'] / n:.2f}, host {(d['step_ms_total'] - d['forward_ms_total']) / n:.2f})")
EOF
        done
        [ $bs = auto ] && ttft_4k "$EP"
        daemon_down || drc=$?
    done
    [ -n "$NOTE" ] && return 1
    NOTE="$ran levels, $fails with failed requests or no result; daemon stopped with rc $drc"
    [ $fails -eq 0 ] && [ $drc -eq 0 ] && [ $ran -gt 0 ]
}

# ---------------------------------------------------------------- 9: ncu over decode steps
s_ncu() {
    local ncu
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    [ -x "$ncu" ] || { NOTE="no ncu"; return 77; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    # from the process's first launch: the weights' upload, the warm-up step, the 16-token
    # prefill, then decode steps (~600 launches each unfused); report.py finds the steps by
    # their first kernel (the embedding's get_rows) and sums the last complete one
    local count=${GPU_CHECK_NCU_LAUNCHES:-3600}
    # shellcheck disable=SC2046
    tmo 120 env $(combo_env "$BEST") "$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        --csv --print-units base --launch-skip 0 --launch-count "$count" --log-file "$W/ncu.csv" \
        "$SM" bench -m "$MODEL" ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} -p 16 -n 8 > "$W/ncu.out" 2>&1
    local rc=$?
    cat "$W/ncu.out"
    grep -q '^"ID"' "$W/ncu.csv" 2>/dev/null || grep '^"' "$W/ncu.out" > "$W/ncu.csv"
    cp "$W/ncu.csv" "$OUT/ncu.csv" 2>/dev/null
    report ncu "$W/ncu.csv" --top 12 --json "$W/ncu_summary.json" | show
    local prc=${PIPESTATUS[0]}
    [ "$prc" -eq 0 ] || { NOTE="no kernel results (ncu rc $rc): $(grep -m1 -iE 'error|==ERROR==' "$W/ncu.out" | cut -c1-150)"; return 1; }
    NOTE="$(grep -c '' "$W/ncu.csv") csv lines (ncu rc $rc, --clock-control none)"
    # then one step of GPU_CHECK_NCU_BATCH (64) sequences decoding together (the GEMM path, no
    # graph): where the batched step's time goes; its table goes to the log only
    local nb=${GPU_CHECK_NCU_BATCH:-64}
    if [ "$nb" -gt 0 ] 2>/dev/null && ! over; then
        # shellcheck disable=SC2046
        tmo 150 env $(combo_env "$BEST") "$ncu" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
            --csv --print-units base --launch-skip 0 --launch-count "${GPU_CHECK_NCU_BATCH_LAUNCHES:-6000}" \
            --log-file "$W/ncu_b.csv" "$SM" bench -m "$MODEL" ${BACKEND_ARGS[@]+"${BACKEND_ARGS[@]}"} -p 16 -n 4 -b "$nb" \
            > "$W/ncu_b.out" 2>&1
        rc=$?
        say "  one step of $nb sequences decoding together (ncu rc $rc):"
        report ncu "$W/ncu_b.csv" --top 16 | show
        NOTE="$NOTE; batch $nb: ncu rc $rc"
    fi
    return 0
}

# ---------------------------------------------------------------- 10: llama.cpp
s_peer() {
    [ -n "$LLAMA_PID" ] || { NOTE="not built (no .gpu/llama.cpp.tar.xz: tests/gpu/prepare.sh)"; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    local waited=$SECONDS
    while kill -0 "$LLAMA_PID" 2>/dev/null && ! grep -q '^llama build:' "$OUT/llama_build.log" &&
        [ $((HARD - SECONDS)) -gt 35 ]; do sleep 2; done
    if ! grep -q '^llama build:' "$OUT/llama_build.log"; then
        llama_signal TERM
        NOTE="build not finished in time: $(grep -oE '^\[[0-9]+/[0-9]+\]' "$OUT/llama_build.log" | tail -n 1)"
        return 1
    fi
    say "  build: $(grep 'llama build:' "$OUT/llama_build.log" | tail -n 1) (waited $((SECONDS - waited)) s)"
    local lb=$LLAMA_DIR/b/bin/llama-bench lbb=$LLAMA_DIR/b/bin/llama-batched-bench
    [ -x "$lb" ] || { NOTE="build failed (llama_build.log): $(grep -m1 -iE 'error' "$OUT/llama_build.log" | cut -c1-120)"; return 1; }
    sys tmo 60 "$lb" -m "$MODEL" -ngl 99 -fa 1 -p 512,2048 -n 128 -r "${GPU_CHECK_LLAMA_REPS:-4}" -o jsonl > "$W/llama/bench.jsonl" 2> "$W/llama/bench.err"
    local rc=$?
    cat "$W/llama/bench.jsonl" "$W/llama/bench.err"
    if grep -q -- '--n-depth' "$LLAMA_DIR/tools/llama-bench/llama-bench.cpp"; then
        sys tmo 60 "$lb" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 128 -d 4096 -r "${GPU_CHECK_LLAMA_REPS:-4}" -o jsonl > "$W/llama/d4096.jsonl" 2> "$W/llama/d4096.err"
        cat "$W/llama/d4096.jsonl" "$W/llama/d4096.err"
    else
        say "  this llama-bench has no --n-depth: no tg at depth 4096"
    fi
    if [ -x "$lbb" ] && ! over; then
        sys tmo 60 "$lbb" -m "$MODEL" -ngl 99 -fa 1 -c 17408 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,4,16,64 \
            --output-format jsonl > "$W/llama/batched.jsonl" 2>&1
        cat "$W/llama/batched.jsonl"
    fi
    sys python3 - "$W/llama" <<'EOF' | show
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for l in open(f, errors="replace"):
        if l.startswith("{"):
            try:
                r = json.loads(l)
            except ValueError:
                continue
            if "avg_ts" in r:   # the median of the warm samples (the first is cold)
                ts = r.get("samples_ts") or []
                w = sorted(ts[1:]) if len(ts) > 1 else [r["avg_ts"]]
                m = (w[(len(w) - 1) // 2] + w[len(w) // 2]) / 2
                print(f"  llama-bench pp{r['n_prompt']} tg{r['n_gen']} d{r.get('n_depth', 0)}: {m:.1f} tokens/s "
                      f"(warm median of {len(w)}; all: {', '.join(f'{x:.0f}' for x in ts)})")
            elif "speed_tg" in r:
                print(f"  batched-bench {r['pl']} x (128+128): tg {r['speed_tg']:.1f} tokens/s in all, pp {r['speed_pp']:.1f}")
EOF
    NOTE="llama-bench rc $rc"
    peer_server
    [ -n "$SERVER_NOTE" ] && NOTE="$NOTE; llama-server: $SERVER_NOTE"
    return $rc
}

# The same load generator against llama.cpp's llama-server (built after the benches, -np
# GPU_CHECK_SERVER_SLOTS (64), -fa on, the same model), in http mode with the same plans
# (--seed N, --mix chat --max-tokens 128; --ignore-eos, so each request generates its 128 as
# ours do on random weights): $W/llama/load-N.json, beside the daemon's in the load table.
peer_server() {
    SERVER_NOTE=""
    [ "$LLAMA_SERVER" = ON ] || { SERVER_NOTE="not built (GPU_CHECK_LLAMA_SERVER=OFF)"; return 0; }
    while kill -0 "$LLAMA_PID" 2>/dev/null && [ $((HARD - SECONDS)) -gt 60 ]; do sleep 2; done
    local ls=$LLAMA_DIR/b/bin/llama-server port=18091 slots=${GPU_CHECK_SERVER_SLOTS:-64} n rc t
    [ -x "$ls" ] || { SERVER_NOTE="no binary ($(grep 'llama-server build:' "$OUT/llama_build.log" | tail -n 1))"; return 0; }
    LD_LIBRARY_PATH=$SYS_LD "$ls" -m "$MODEL" -ngl 99 -fa on -np "$slots" -c $((slots * 1024)) --jinja \
        --host 127.0.0.1 --port $port > "$W/llama/server.log" 2>&1 &
    local spid=$!
    sys tmo 90 python3 - "$port" <<'EOF' || { SERVER_NOTE="not ready in 90 s: $(tail -n 3 "$W/llama/server.log" | tr '\n' ' ' | cut -c1-200)"; kill "$spid" 2>/dev/null; return 0; }
import sys, time, urllib.request
while True:
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200:
            break
    except Exception:
        pass
    time.sleep(0.5)
EOF
    for n in ${GPU_CHECK_LOAD_STREAMS:-1 16 64 256}; do
        if over || [ $((HARD - SECONDS)) -lt 30 ]; then say "  llama-server $n streams: skipped (time)"; continue; fi
        t=${GPU_CHECK_LOAD_S:-60}
        # shellcheck disable=SC2086  # GPU_CHECK_LOAD_ARGS: words
        sys tmo "$t" python3 tests/load/loadgen.py --mode http --url "http://127.0.0.1:$port" --ignore-eos --no-think \
            --streams "$n" --requests "$([ "$n" -lt 4 ] && echo 4 || echo "$n")" --timeout "$t" --seed "$n" \
            ${GPU_CHECK_LOAD_ARGS:---mix chat --max-tokens 128} > "$W/llama/load-$n.out" 2>&1
        rc=$?
        grep '^{"load"' "$W/llama/load-$n.out" | tail -n 1 > "$W/llama/load-$n.json"
        if [ -s "$W/llama/load-$n.json" ]; then
            grep -A3 '^load:' "$W/llama/load-$n.out" | sed -n '2,4p' | sed "s/^ */  llama-server $n streams: /" | show
        else
            say "  llama-server $n streams: no result (rc $rc): $(tail -n 2 "$W/llama/load-$n.out" | tr '\n' ' ' | cut -c1-160)"
            rm -f "$W/llama/load-$n.json"
        fi
    done
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return 0
}

# ---------------------------------------------------------------- run
if [ "$QUICK" = 1 ]; then
    # shellcheck source=tests/gpu/quick.sh
    . tests/gpu/quick.sh
    quick_main
    exit 0
fi
say "gpu check: $(git rev-parse --short HEAD 2>/dev/null || echo '?') + $(git status --porcelain 2>/dev/null | grep -vc '^??') changed files; OUT=$OUT; budget ${BUDGET}s (hard ${HARD}s)"
step llama 0 "llama.cpp CUDA build in the background" s_llama
step device 0 "device facts, copy bandwidth" s_device
step test 0 "$B/tests/test_cuda" s_test
step sanit 1 "compute-sanitizer memcheck + racecheck (CK_RUN_CASE=${GPU_CHECK_SANITIZE_CASE:-ops})" s_sanit
step sanitfa 1 "compute-sanitizer memcheck + racecheck, tiled attention (CK_RUN_CASE=fattn)" s_sanit_fattn
step synth 0 "smollm3 synth --preset $PRESET -> $MODEL" s_synth
step matvec 0 "bench_cuda --bw ${BW:-?}" s_matvec
step bench 0 "smollm3 bench: knob combinations, best, baseline, cpu" s_bench
step attn 1 "cuda_attn paged vs tiled: bench_cuda --attn, smollm3 bench pp512/2048/8192, tg d4096" s_attn
step gemm 1 "cuda_gemm A/B/C: tiled vs mma vs imma (pp512/2048/8192, b4/16/64)" s_gemm
step peer 1 "llama.cpp: llama-bench, llama-batched-bench" s_peer
step daemon 1 "smollm3d on cuda: 1 / 16 / 64 streams" s_daemon
step load 1 "tests/load/loadgen.py --mode ctl on cuda: ${GPU_CHECK_LOAD_STREAMS:-1 16 64 256} streams" s_load
step ncu 1 "ncu: one decode step per kernel" s_ncu
llama_signal CONT
llama_signal TERM
put step.summary "pass	0	"
report final "$W" "$OUT" > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt" >> "$LOG"
cat "$OUT/summary.txt" >&3
