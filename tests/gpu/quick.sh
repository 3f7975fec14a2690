# tests/gpu/quick.sh - the quick mode of tests/gpu/check.sh (`check.sh --quick`), sourced by it.
# Its helpers (step, tmo, sys, say, show, put, report, daemon_start, daemon_down, ttft_4k, s_llama,
# s_device, s_synth, sanit_errors, sanit_seen) and variables (W, OUT, B, SM, CTL, DAEMON, MODEL,
# HARD, DRY, QUICK_ROWS, LLAMA_PID, NODEV, ...) are check.sh's; the order, the budget and the rows
# table are described at its top.
#
# Work folder Q = $W/q:
#   rows.tsv                    ROW <tab> SETTINGS <tab> CHECK, default first, then the table's order
#   sb/ROW.{A,B,C}.out          smollm3 bench: A -p P -n N; B -p P -n N -d D1; C -p PL -n N -d D2
#   lg/ROW.STEP.{out,bin,txt}   smollm3 logits of the s8 / s40 step; rel L2 against the default's
#   correct/*.out, *.rc         test_cuda and the four sanitizer runs
#   serve/ROW/N.{out,json,st0,st1}, serve/ROW/ttft4k.json, serve/ROW/warm.out
#   llama/{bench,depth,batched}.jsonl, llama/server-N.{out,json}, llama/render.*
#   ncu.csv, ncu_summary.json
# Row states (kv "row.ROW"): ok, refused ("not in this build": the value is refused), absent ("not
# in this build": the variable is read by no binary), same ("= default"), failed, dropped (time).

Q=$W/q
QRESERVE=${GPU_CHECK_RESERVE:-15}       # seconds kept for the summary
PEER_NEED=${GPU_CHECK_PEER_S:-130}      # seconds kept for llama.cpp while it builds
QDROPS=0
PEER_DONE=0
SERVED=" "
declare -A ROW_SET ROW_CHECK ROW_ST ROW_NOTE
ROWS=(default)
ROW_SET[default]=""
ROW_CHECK[default]="s8 s40"
ROW_ST[default]=ok
IDS8=791,3301,1200,5512,100,2048,64000,17   # the 8-token step: the decode mat-vec path
IDS40=$(seq 11 97 3890 | paste -sd, -)      # 40 tokens of one sequence: the GEMM, prefill attention

if [ "$DRY" = 1 ]; then
    QB=(--backend auto)                   # auto: the knobs are parsed (a refused value fails), then the CPU
    QBT=(-t 2)
    QLT=(--threads 2)
    QP=16 QN=8 QD1=64 QD2=128 QPL=64
    QSTREAMS=${GPU_CHECK_STREAMS:-2 4 8}
    QMAXT=8
    export GPU_CHECK_TTFT_WORDS=${GPU_CHECK_TTFT_WORDS:-150}
    EST_A=3 EST_B=3 EST_C=4 EST_SERVE=20
else
    QB=(--backend "${GPU_CHECK_BACKEND:-cuda}")   # another value: the plumbing on another backend
    QBT=()
    QLT=()
    QP=512 QN=128 QD1=4096 QD2=16384 QPL=8192
    QSTREAMS=${GPU_CHECK_STREAMS:-16 64 256}
    QMAXT=128
    EST_A=6 EST_B=8 EST_C=12 EST_SERVE=35
fi
GWPORT=${GPU_CHECK_GATEWAY_PORT:-18090}
SVPORT=${GPU_CHECK_SERVER_PORT:-18091}

# ---------------------------------------------------------------- helpers
q_time() { [ $((HARD - QRESERVE - SECONDS - ${2:-0})) -ge "$1" ]; }   # EST [KEEP]: EST seconds fit, KEEP kept
q_drop() {                                                            # WHAT WHY
    QDROPS=$((QDROPS + 1))
    put "drop.$QDROPS" "$1	$2"
    say "  dropped: $1 ($2)"
}
q_row() { ROW_ST[$1]=$2; ROW_NOTE[$1]=${3:-}; put "row.$1" "$2	${3:-}"; }
q_env() { local s=${ROW_SET[$1]:-}; [ -n "$s" ] && printf '%s\n' ${s//,/ }; }   # ROW: its VAR=VALUE words
llama_built() { grep -q '^llama build:' "$OUT/llama_build.log" 2>/dev/null; }
peer_pending() { [ -n "$LLAMA_PID" ] && [ "$PEER_DONE" = 0 ]; }
peer_keep() { peer_pending && echo "$PEER_NEED" || echo 0; }
# q_in_binaries VAR: some binary or plugin holds the variable's name (it is read somewhere)
q_in_binaries() {
    local f
    for f in "$SM" "$DAEMON" "$B"/lib/*.so; do
        [ -f "$f" ] && grep -aqs -- "$1" "$f" && return 0
    done
    return 1
}
q_knobs() { sed -n 's/^backend: .*threads: [0-9]*, //p' "$1" 2>/dev/null | head -n 1; }   # FILE: the knob line

q_parse_rows() {
    local id set chk rest
    printf 'default\t-\ts8 s40\n' > "$Q/rows.tsv"
    while read -r id set chk rest; do
        [ -z "$id" ] && continue
        [ "${id#\#}" != "$id" ] && continue
        [ -n "${ROW_SET[$id]+x}" ] && { say "  row $id: listed twice (the first is kept)"; continue; }
        ROWS+=("$id")
        ROW_SET[$id]=$set
        ROW_CHECK[$id]=${chk:-s8}
        ROW_ST[$id]=ok
        printf '%s\t%s\t%s\n' "$id" "$set" "${chk:-s8}" >> "$Q/rows.tsv"
    done <<< "$QUICK_ROWS"
}

# q_bench ROW LABEL TIMEOUT ARGS...: smollm3 bench --json with the row's environment -> sb/ROW.LABEL.out
q_bench() {
    local row=$1 lab=$2 t=$3 rc
    shift 3
    # shellcheck disable=SC2046  # q_env: words of VAR=value
    tmo "$t" env $(q_env "$row") "$SM" bench -m "$MODEL" "${QB[@]}" ${QBT[@]+"${QBT[@]}"} --json "$@" \
        > "$Q/sb/$row.$lab.out" 2>&1
    rc=$?
    echo "--- $row $lab (${ROW_SET[$row]:-defaults}): smollm3 bench ${QB[*]} $* -> rc $rc"
    cat "$Q/sb/$row.$lab.out"
    say "$(printf '  %-15s %-2s %s%s' "$row" "$lab" "$(report bench-brief "$Q/sb/$row.$lab.out")" "$([ $rc -ne 0 ] && echo " (rc $rc)")")"
    return $rc
}

# q_logits ROW STEP: the logits of STEP (s8 / s40) with the row's environment; for a row, its rel
# L2 against the default's (lg/ROW.STEP.txt); a refused value marks the row
q_logits() {
    local row=$1 st=$2 ids=$IDS8 rc
    [ "$st" = s40 ] && ids=$IDS40
    # shellcheck disable=SC2046
    tmo 40 env $(q_env "$row") "$SM" logits -m "$MODEL" "${QB[@]}" ${QLT[@]+"${QLT[@]}"} --ids "$ids" --all \
        -o "$Q/lg/$row.$st.bin" > "$Q/lg/$row.$st.out" 2>&1
    rc=$?
    echo "--- logits $row $st (${ROW_SET[$row]:-defaults}) -> rc $rc"
    cat "$Q/lg/$row.$st.out"
    if grep -q 'must be' "$Q/lg/$row.$st.out"; then
        q_row "$row" refused "$(grep -m1 'must be' "$Q/lg/$row.$st.out" | sed 's/^smollm3 [a-z]*: //' | cut -c1-150)"
        say "  $row: not in this build: ${ROW_NOTE[$row]}"
        return 1
    fi
    [ $rc -eq 0 ] || { say "  logits $row $st: failed (rc $rc): $(tail -n 1 "$Q/lg/$row.$st.out" | cut -c1-150)"; return 1; }
    if [ "$row" != default ]; then
        if [ -s "$Q/lg/default.$st.bin" ]; then
            report agree "$Q/lg/$row.$st.bin" "$Q/lg/default.$st.bin" > "$Q/lg/$row.$st.txt"
            say "  logits $row ($st) vs default: rel L2 $(cat "$Q/lg/$row.$st.txt")"
        else
            say "  logits $row ($st): no default logits to compare with"
        fi
    fi
    return 0
}

# ---------------------------------------------------------------- correct: nothing timed, together
q_correct() {
    mkdir -p "$Q/correct" "$Q/lg"
    local t0=$SECONDS cs="" case tool n pids=() f rc errs sum seen note bad=0
    local tt=${GPU_CHECK_TEST_S:-150} ts=${GPU_CHECK_SANITIZE_S:-100}
    if [ "$DRY" = 1 ]; then
        put step.test "skipped	0	dry run: no GPU"
        put step.sanit "skipped	0	dry run: no GPU"
        say "  test_cuda, compute-sanitizer: skipped (dry run: no GPU)"
    elif [ ! -x "$B/tests/test_cuda" ]; then
        put step.test "fail	0	no $B/tests/test_cuda"
        say "  no $B/tests/test_cuda"
    else
        (
            SMOL_TEST_QUICK=${GPU_CHECK_TEST_QUICK-1}
            [ -n "$SMOL_TEST_QUICK" ] && export SMOL_TEST_QUICK || unset SMOL_TEST_QUICK
            tmo "$tt" "$B/tests/test_cuda" > "$Q/correct/test_cuda.out" 2>&1
            echo $? > "$Q/correct/test_cuda.rc"
        ) &
        pids+=($!)
        cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        if [ -x "$cs" ]; then
            for case in ops fattn; do
                for tool in ${GPU_CHECK_SANITIZE_TOOLS:-memcheck racecheck}; do
                    (
                        extra=()
                        # shellcheck disable=SC2206  # GPU_CHECK_RACECHECK_ARGS: words (e.g. a kernel filter)
                        [ "$tool" = racecheck ] && extra=(${GPU_CHECK_RACECHECK_ARGS:-})
                        if [ "$case" = fattn ]; then export SMOL_CUDA_ATTN=tiled SMOL_TEST_QUICK=1; fi
                        CK_RUN_CASE=$case tmo "$ts" "$cs" --tool "$tool" ${extra[@]+"${extra[@]}"} "$B/tests/test_cuda" \
                            > "$Q/correct/$tool.$case.out" 2>&1
                        echo $? > "$Q/correct/$tool.$case.rc"
                    ) &
                    pids+=($!)
                done
            done
        else
            put step.sanit "skipped	0	no compute-sanitizer"
        fi
    fi
    # meanwhile the rows' logits (one process at a time: they load the 3B)
    q_logits default s8
    q_logits default s40
    local row st
    for row in "${ROWS[@]:1}"; do
        for st in ${ROW_CHECK[$row]}; do
            q_logits "$row" "$st" || break
        done
    done
    local nref=0
    for row in "${ROWS[@]:1}"; do [ "${ROW_ST[$row]}" = refused ] && nref=$((nref + 1)); done
    put step.logits "pass	$((SECONDS - t0))	$((${#ROWS[@]} - 1)) rows: $nref not in this build"
    [ ${#pids[@]} -gt 0 ] && { say "  logits done at $((SECONDS - t0)) s; waiting for test_cuda and the sanitizers"; wait "${pids[@]}"; }
    [ "$DRY" = 1 ] && { NOTE="dry run: logits only ($nref rows not in this build)"; return 0; }
    # test_cuda
    if [ -f "$Q/correct/test_cuda.rc" ]; then
        rc=$(cat "$Q/correct/test_cuda.rc")
        cat "$Q/correct/test_cuda.out"
        cp "$Q/correct/test_cuda.out" "$W/test_cuda.out"
        grep '^stats:' "$Q/correct/test_cuda.out" | head -n 24 | show
        sum=$(grep -E '^[0-9]+%: Checks:' "$Q/correct/test_cuda.out" | tail -n 1)
        put fact.test_cuda "${sum:-none} rc=$rc"
        note="${sum:-no summary} (rc $rc$( { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo ", timed out after ${tt}s"))${CK_RUN_CASE:+ CK_RUN_CASE=$CK_RUN_CASE}"
        say "  test_cuda: $note"
        if grep -q 'SKIPPED: no CUDA device' "$Q/correct/test_cuda.out"; then
            NODEV=$(grep -m1 -o 'SKIPPED: no CUDA device.*' "$Q/correct/test_cuda.out" | cut -c10-160)
            put step.test "skipped	$((SECONDS - t0))	$NODEV"
        else
            put step.test "$([ "$rc" = 0 ] && echo pass || echo fail)	$((SECONDS - t0))	$note"
            [ "$rc" = 0 ] || bad=1
        fi
    fi
    # the sanitizers
    n=0
    note=""
    for f in "$Q"/correct/*.*.rc; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        tool=$(basename "$f" .rc)
        case=${tool#*.}
        tool=${tool%%.*}
        rc=$(cat "$f")
        cat "${f%.rc}.out"
        errs=$(sanit_errors "${f%.rc}.out" "$tool")
        seen=$(sanit_seen "${f%.rc}.out")
        sum=$(grep -E '^[0-9]+%: Checks:' "${f%.rc}.out" | tail -n 1)
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            st="timed out after ${ts}s, ${seen} reports before the cut"
        else
            st="${errs:-?} errors, test ${sum:-gave no summary} (rc $rc)"
        fi
        say "  $tool ($case): $st"
        put "fact.${tool}_$case" "$st"
        note="$note $tool/$case: $([ -n "$errs" ] && echo "$errs" || echo "cut, $seen seen");"
        grep -q 'SKIPPED: no CUDA device' "${f%.rc}.out" && continue
        grep -qE 'Checks: 0,' "${f%.rc}.out" && { note="$note no tcase '$case';"; bad=1; }
        if [ -n "$errs" ] && [ "$errs" != 0 ]; then bad=1
        elif [ -z "$errs" ] && [ "$seen" != 0 ]; then bad=1
        elif [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; then bad=1; fi
    done
    [ $n -gt 0 ] && put step.sanit "$([ "$bad" = 1 ] && echo fail || echo pass)	$((SECONDS - t0))	${note# }"
    NOTE="test_cuda $(grep -oE 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$Q/correct/test_cuda.out" 2>/dev/null | head -n 1 || echo '?');${note}"
    [ -n "$NODEV" ] && return 77
    return $bad
}

# ---------------------------------------------------------------- pass1: pp and tg128 per row
# q_after_a ROW RC: the row's state from its A run (refused / absent / same / failed / ok)
q_after_a() {
    local row=$1 rc=$2 f=$Q/sb/$1.A.out knobs dk v key in_line all_in=1 absent=0
    if grep -q 'must be' "$f"; then
        q_row "$row" refused "$(grep -m1 'must be' "$f" | sed 's/^smollm3 [a-z]*: //' | cut -c1-150)"
        return
    fi
    if [ "$rc" != 0 ]; then
        q_row "$row" failed "rc $rc: $(grep -v '^$' "$f" | tail -n 1 | cut -c1-150)"
        return
    fi
    [ "$row" = default ] && return
    knobs=$(q_knobs "$f")
    dk=$(q_knobs "$Q/sb/default.A.out")
    for v in $(q_env "$row"); do
        v=${v%%=*}
        key=$(printf '%s' "${v#SMOL_CUDA_}" | tr 'A-Z' 'a-z')
        in_line=0
        [ -n "$knobs" ] && printf '%s' " $knobs" | grep -q " $key=" && in_line=1
        [ $in_line = 1 ] || all_in=0
        if [ $in_line = 0 ] && ! q_in_binaries "$v"; then
            absent=1
            q_row "$row" absent "$v is read by no binary$([ -n "$knobs" ] && echo " and not in the knob line '$knobs'")"
        fi
    done
    [ $absent = 1 ] && return
    if [ -n "$knobs" ] && [ "$knobs" = "$dk" ] && [ $all_in = 1 ]; then
        q_row "$row" same "knob line as the default's: $knobs"
        return
    fi
    q_row "$row" ok "${knobs:-}"
}

q_pass1() {
    [ -x "$SM" ] || { NOTE="no $SM"; return 1; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    mkdir -p "$Q/sb"
    local row rc n=0 fails=0
    for row in "${ROWS[@]}"; do
        case ${ROW_ST[$row]} in refused|absent|same) continue ;; esac
        if ! q_time "$EST_A"; then
            q_drop "$row: pp$QP / tg$QN" "time"
            q_row "$row" dropped "time"
            continue
        fi
        q_bench "$row" A 40 -p "$QP" -n "$QN"
        rc=$?
        q_after_a "$row" "$rc"
        n=$((n + 1))
        case ${ROW_ST[$row]} in
            refused|absent) say "  $row: not in this build: ${ROW_NOTE[$row]}" ;;
            same) say "  $row: = default (${ROW_NOTE[$row]})" ;;
            failed) fails=$((fails + 1)) ;;
        esac
        if [ "$row" = default ] && [ "${ROW_ST[default]}" = ok ]; then
            q_depth_item default B
            q_depth_item default C
        fi
    done
    BESTROW=$(report quick-best "$W")
    put fact.best_row "$BESTROW"
    say "  best row: $BESTROW"
    NOTE="$n rows benched, $fails failed; best $BESTROW"
    [ "${ROW_ST[default]}" = ok ] && [ $fails -eq 0 ]
}

# q_depth_item ROW B|C: tg at depth D1 (B), pp PL + tg at depth D2 (C)
q_depth_item() {
    case $2 in
        B) q_bench "$1" B 45 -p "$QP" -n "$QN" -d "$QD1" ;;
        C) q_bench "$1" C 60 -p "$QPL" -n "$QN" -d "$QD2" ;;
    esac
    touch "$Q/sb/$1.$2.done"
}

# q_depth: the depth runs not yet made (the best row first, then the table's order), while llama.cpp
# builds (keeping PEER_NEED for it) or, once it has run, while time is left
q_depth() {
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    local row lab est n=0 left=0 order=("$BESTROW")
    for row in "${ROWS[@]:1}"; do [ "$row" != "$BESTROW" ] && order+=("$row"); done
    for row in "${order[@]}"; do
        [ "${ROW_ST[$row]}" = ok ] || continue
        for lab in B C; do
            [ -e "$Q/sb/$row.$lab.done" ] && continue
            if peer_pending && llama_built; then left=$((left + 1)); continue; fi   # the peer first
            est=$EST_B; [ $lab = C ] && est=$EST_C
            if ! q_time "$est" "$(peer_keep)"; then left=$((left + 1)); continue; fi
            q_depth_item "$row" "$lab"
            n=$((n + 1))
        done
    done
    NOTE="$n runs; $left left$(peer_pending && echo " (llama.cpp: $(llama_built && echo built || echo building))")"
    return 0
}

# q_depth_drops: the depth runs never made, each recorded as a drop
q_depth_drops() {
    local row lab
    for row in "${ROWS[@]}"; do
        [ "${ROW_ST[$row]}" = ok ] || continue
        for lab in B C; do
            [ -e "$Q/sb/$row.$lab.done" ] && continue
            q_drop "$row: $([ $lab = B ] && echo "tg$QN at d$QD1" || echo "pp$QPL + tg$QN at d$QD2")" "time"
        done
    done
}

# ---------------------------------------------------------------- serve: daemon + gateway + loadgen
# q_loadgen TAG URL N OUTDIR [extra loadgen args]: one level of the plan (N streams, N requests,
# seed N): OUTDIR/TAG.{out,json}
q_loadgen() {
    local tag=$1 url=$2 n=$3 dir=$4 t=${GPU_CHECK_LOAD_S:-60} rc
    shift 4
    sys tmo "$t" python3 tests/load/loadgen.py --mode http --url "$url" --no-think --ignore-eos --mix chat \
        --max-tokens "$QMAXT" --streams "$n" --requests "$n" --seed "$n" --timeout "$t" "$@" \
        > "$dir/$tag.out" 2>&1
    rc=$?
    cat "$dir/$tag.out"
    grep '^{"load"' "$dir/$tag.out" | tail -n 1 > "$dir/$tag.json"
    [ -s "$dir/$tag.json" ] || rm -f "$dir/$tag.json"
    return $rc
}

# q_http_ready URL SECONDS: GET URL/health answers 200
q_http_ready() {
    sys tmo "$2" python3 - "$1" <<'EOF'
import sys, time, urllib.request
while True:
    try:
        if urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status == 200:
            break
    except Exception:
        pass
    time.sleep(0.3)
EOF
}

q_serve() {
    local row=$1 dir=$Q/serve/$1 conf=$Q/serve/$1/smollm3d.conf n rc fails=0 gw gwpid drc=0
    [ -x "$DAEMON" ] && [ -x "$CTL" ] && [ -x "$B/bin/smollm3-gateway" ] ||
        { NOTE="no $DAEMON, $CTL or $B/bin/smollm3-gateway"; return 1; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; return 1; }
    mkdir -p "$dir"
    EP=ipc:///tmp/smollm3d-quick-$$-$row.sock
    {
        echo "[smollm3d]"
        echo "model = $MODEL"
        echo "listen = $EP"
        if [ "$DRY" = 1 ]; then echo "backend = auto"; echo "threads = 2"; echo "kv_budget_mb = 256"
        else echo "backend = ${QB[1]}"; fi
        echo "max_queued = 1024"
        echo "speculative = 0"
        echo "speculative_calibrate = false"
        echo "default_max_tokens = $QMAXT"
        echo "log_level = notice"
    } > "$conf"
    cat "$conf"
    echo "=== smollm3d $row (${ROW_SET[$row]:-defaults})" >> "$OUT/daemon.log"
    # shellcheck disable=SC2046
    daemon_start "$conf" "$row: ${ROW_SET[$row]:-defaults}" $(q_env "$row") || return 1
    gw=http://127.0.0.1:$GWPORT
    echo "=== smollm3-gateway $row" >> "$OUT/daemon.log"
    "$B/bin/smollm3-gateway" --listen "127.0.0.1:$GWPORT" --daemon "$EP" --ignore-unknown-fields --max-inflight 1024 \
        --max-connections 1024 --request-timeout 120 >> "$OUT/daemon.log" 2>&1 < /dev/null &
    gwpid=$!
    if ! q_http_ready "$gw" 30; then
        NOTE="the gateway did not answer /health in 30 s: $(grep -v '^$' "$OUT/daemon.log" | tail -n 1 | cut -c1-150)"
        kill "$gwpid" 2>/dev/null
        daemon_down
        return 1
    fi
    # one short request first (not counted): the first of a process's steps are not the figures
    q_loadgen warm "$gw" 1 "$dir" --max-tokens 4 > /dev/null 2>&1
    for n in $QSTREAMS; do
        if ! q_time 15; then q_drop "$row: $n streams through the gateway" "time"; continue; fi
        "$CTL" --connect "$EP" --timeout 5 stats --json > "$dir/$n.st0" 2>/dev/null
        q_loadgen "$n" "$gw" "$n" "$dir"
        rc=$?
        "$CTL" --connect "$EP" --timeout 5 stats --json > "$dir/$n.st1" 2>/dev/null
        if [ -s "$dir/$n.json" ]; then
            grep -A3 '^load:' "$dir/$n.out" | sed -n '2,4p' | sed "s/^ */  $row $n streams: /" | show
            report stats-delta "$dir/$n.st0" "$dir/$n.st1" | sed "s/^/  $row $n streams: /" | show
        else
            say "  $row $n streams: no result (rc $rc): $(tail -n 2 "$dir/$n.out" | tr '\n' ' ' | cut -c1-160)"
        fi
        [ $rc -eq 0 ] || fails=$((fails + 1))
    done
    if q_time 30; then ttft_4k "$EP" "$dir"; else q_drop "$row: TTFT of a 4K prompt" "time"; fi
    kill -TERM "$gwpid" 2>/dev/null
    local i=0
    while kill -0 "$gwpid" 2>/dev/null && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
    kill -KILL "$gwpid" 2>/dev/null
    wait "$gwpid" 2>/dev/null
    daemon_down || drc=$?
    SERVED="$SERVED$row "
    NOTE="${NOTE:+$NOTE; }$fails levels with failed requests or no result; daemon stopped with rc $drc"
    [ $fails -eq 0 ] && [ $drc -eq 0 ]
}

q_serve_default() { q_serve default; }
q_serve_best() {
    [ "$BESTROW" = default ] && { NOTE="the best row is the default"; return 77; }
    [ "${SERVED#* $BESTROW }" != "$SERVED" ] && { NOTE="done"; return 0; }
    if ! q_time "$EST_SERVE" "$(peer_keep)"; then NOTE="deferred: llama.cpp's time kept"; return 77; fi
    q_serve "$BESTROW"
}

# ---------------------------------------------------------------- ncu: one decode step's kernels
q_ncu() {
    [ "$DRY" = 1 ] && { NOTE="dry run: no GPU"; return 77; }
    [ -z "$NODEV" ] || { NOTE=$NODEV; return 77; }
    [ -s "$Q/ncu_summary.json" ] && { NOTE="done"; return 0; }
    local ncu rc
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    [ -x "$ncu" ] || { NOTE="no ncu"; return 77; }
    if ! q_time 50 "$(peer_keep)"; then NOTE="deferred: llama.cpp's time kept"; return 77; fi
    # past the upload, the warm-up and the prompt (skipped launches run at full speed), a window of
    # decode steps: report.py cuts one step out of it at the embedding's get_rows_kernel launches
    # shellcheck disable=SC2046
    tmo "${GPU_CHECK_NCU_S:-75}" env $(q_env "$BESTROW") "$ncu" --clock-control none --metrics gpu__time_duration.sum \
        --csv --print-units base --launch-skip "${GPU_CHECK_NCU_SKIP:-600}" --launch-count "${GPU_CHECK_NCU_LAUNCHES:-1200}" \
        --log-file "$Q/ncu.csv" "$SM" bench -m "$MODEL" "${QB[@]}" -p 8 -n 64 > "$Q/ncu.out" 2>&1
    rc=$?
    cat "$Q/ncu.out"
    grep -q '^"ID"' "$Q/ncu.csv" 2>/dev/null || grep '^"' "$Q/ncu.out" > "$Q/ncu.csv"
    cp "$Q/ncu.csv" "$OUT/ncu.csv" 2>/dev/null
    report ncu "$Q/ncu.csv" --top 12 --json "$Q/ncu_summary.json" | show
    [ "${PIPESTATUS[0]}" -eq 0 ] || { NOTE="no kernel results (ncu rc $rc): $(grep -m1 -iE 'error' "$Q/ncu.out" | cut -c1-150)"; return 1; }
    NOTE="row $BESTROW, ncu rc $rc"
}

# ---------------------------------------------------------------- peer: llama.cpp, built meanwhile
q_peer() {
    [ -n "$LLAMA_PID" ] || { NOTE="not built (no .gpu/llama.cpp.tar.xz: tests/gpu/prepare.sh)"; return 77; }
    [ -s "$MODEL" ] || { NOTE="no model (step synth)"; PEER_DONE=1; return 1; }
    local waited=$SECONDS d=$Q/llama rc=0 lb lbb ls spid n notes=""
    mkdir -p "$d"
    while ! llama_built && kill -0 "$LLAMA_PID" 2>/dev/null && q_time 60; do sleep 2; done
    PEER_DONE=1
    if ! llama_built; then
        llama_signal TERM
        NOTE="build not finished in time: $(grep -oE '^\[[0-9]+/[0-9]+\]' "$OUT/llama_build.log" | tail -n 1)"
        q_drop "llama.cpp (every peer figure)" "its build did not finish in time"
        return 1
    fi
    say "  build: $(grep '^llama build:' "$OUT/llama_build.log" | tail -n 1) (waited $((SECONDS - waited)) s)"
    lb=$LLAMA_DIR/b/bin/llama-bench lbb=$LLAMA_DIR/b/bin/llama-batched-bench ls=$LLAMA_DIR/b/bin/llama-server
    local reps=${GPU_CHECK_LLAMA_REPS:-4}
    if [ -x "$lb" ] && q_time 25; then
        sys tmo 45 "$lb" -m "$MODEL" -ngl 99 -fa 1 -p "$QP,$QPL" -n "$QN" -r "$reps" -o jsonl > "$d/bench.jsonl" 2> "$d/bench.err"
        rc=$?
        cat "$d/bench.jsonl" "$d/bench.err"
        notes="llama-bench rc $rc"
    else
        q_drop "llama-bench pp$QP / pp$QPL / tg$QN" "$([ -x "$lb" ] && echo time || echo 'not built')"
    fi
    # llama-server under the gateway's plans: the same prompts (--no-think), the same counts
    if [ "$LLAMA_SERVER" = ON ] && [ -x "$ls" ] && q_time 40; then
        local slots=${GPU_CHECK_SERVER_SLOTS:-64}
        LD_LIBRARY_PATH=$SYS_LD "$ls" -m "$MODEL" -ngl 99 -fa on -np "$slots" -c $((slots * 1024)) --jinja \
            --host 127.0.0.1 --port "$SVPORT" > "$d/server.log" 2>&1 < /dev/null &
        spid=$!
        if q_http_ready "http://127.0.0.1:$SVPORT" 60; then
            q_loadgen warm "http://127.0.0.1:$SVPORT" 1 "$d" --max-tokens 4 > /dev/null 2>&1
            for n in $QSTREAMS; do
                if ! q_time $((n >= 256 ? 55 : 20)); then q_drop "llama-server $n streams" "time"; continue; fi
                q_loadgen "server-$n" "http://127.0.0.1:$SVPORT" "$n" "$d"
                if [ -s "$d/server-$n.json" ]; then
                    grep -A3 '^load:' "$d/server-$n.out" | sed -n '2,4p' | sed "s/^ */  llama-server $n streams: /" | show
                else
                    say "  llama-server $n streams: no result: $(tail -n 2 "$d/server-$n.out" | tr '\n' ' ' | cut -c1-160)"
                fi
            done
            q_render_check "http://127.0.0.1:$SVPORT"
        else
            say "  llama-server: not ready in 60 s: $(tail -n 3 "$d/server.log" | tr '\n' ' ' | cut -c1-200)"
            notes="$notes; llama-server not ready"
        fi
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
    else
        q_drop "llama-server at $QSTREAMS streams" "$([ -x "$ls" ] && echo time || echo 'not built')"
    fi
    if [ -x "$lbb" ] && q_time 25; then
        local npl mx=1
        npl=$(echo $QSTREAMS | tr ' ' ',')
        for n in $QSTREAMS; do [ "$n" -gt $mx ] && mx=$n; done
        sys tmo 45 "$lbb" -m "$MODEL" -ngl 99 -fa 1 -c $((mx * (2 * QMAXT) + 1024)) -b 2048 -ub 512 -npp "$QMAXT" \
            -ntg "$QMAXT" -npl "$npl" --output-format jsonl > "$d/batched.jsonl" 2>&1
        cat "$d/batched.jsonl"
    else
        q_drop "llama-batched-bench $QSTREAMS" "$([ -x "$lbb" ] && echo time || echo 'not built')"
    fi
    if [ -x "$lb" ] && q_time 30; then
        sys tmo 50 "$lb" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n "$QN" -d "$QD1,$QD2" -r "$reps" -o jsonl \
            > "$d/depth.jsonl" 2> "$d/depth.err"
        cat "$d/depth.jsonl" "$d/depth.err"
    else
        q_drop "llama-bench tg$QN at d$QD1 / d$QD2" "$([ -x "$lb" ] && echo time || echo 'not built')"
    fi
    report llama-brief "$d" | show
    NOTE=$notes
    return $rc
}

# q_render_check URL: the first request of the 64-stream plan (or the level nearest) rendered by
# llama-server (/apply-template) and by our template (smollm3 template), token counts of both
# (llama-server's /tokenize, ours: smollm3 tokenize --special): to the log; the counts to kv
q_render_check() {
    local d=$Q/llama n=64 date
    echo " $QSTREAMS " | grep -q ' 64 ' || n=$(echo $QSTREAMS | awk '{print $NF}')
    date=$(LC_ALL=C date '+%d %B %Y')
    sys python3 tests/load/loadgen.py --plan 1 --seed "$n" --mix chat --max-tokens "$QMAXT" |
        sys python3 -c 'import json, sys
m = json.loads(sys.stdin.readline())["messages"]
print(json.dumps({"messages": m, "chat_template_kwargs": {"enable_thinking": False}}))' > "$d/render.req.json" || return 0
    "$SM" template -m "$MODEL" --request "$d/render.req.json" --date "$date" > "$d/render.ours.txt" 2>&1
    sys tmo 20 python3 - "$1" "$d" <<'EOF' | show
import json, sys, urllib.request
url, d = sys.argv[1], sys.argv[2]
def post(path, body):
    r = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(r, timeout=10).read())
req = json.load(open(d + "/render.req.json"))
try:
    srv = post("/apply-template", req)["prompt"]
except Exception as e:
    print(f"  render check: /apply-template failed: {e}")
    sys.exit(0)
open(d + "/render.server.txt", "w").write(srv)
ours = open(d + "/render.ours.txt").read()
try:
    ns = len(post("/tokenize", {"content": srv, "add_special": False, "parse_special": True})["tokens"])
    no = len(post("/tokenize", {"content": ours, "add_special": False, "parse_special": True})["tokens"])
except Exception as e:
    ns = no = None
same = srv == ours
print(f"  render check (first request of the plan, no-think): llama-server's /apply-template "
      f"{'==' if same else '!='} smollm3 template; tokens (llama-server /tokenize): server {ns}, ours {no}")
if not same:
    a, b = srv.splitlines(), ours.splitlines()
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else "<end>"), (b[i] if i < len(b) else "<end>")
        if x != y:
            print(f"  first differing line {i + 1}: server {x[:100]!r} / ours {y[:100]!r}")
            break
json.dump({"same_text": same, "server_tokens": ns, "ours_tokens": no}, open(d + "/render.json", "w"))
EOF
}

# ---------------------------------------------------------------- the run
q_deferred() { [ "$(grep "^step.$1	" "$W/kv" | tail -n 1 | cut -f2,4 | cut -c1-16)" = "skipped	deferred" ]; }

quick_main() {
    mkdir -p "$Q/sb" "$Q/lg" "$Q/serve" "$Q/llama"
    # the default is every knob unset: drop what the caller's environment set
    local v
    for v in SMOL_CUDA_MATVEC SMOL_CUDA_FUSE SMOL_CUDA_GRAPHS SMOL_CUDA_GEMM SMOL_CUDA_ATTN SMOL_CUDA_PERSISTENT \
             $(printf '%s\n' "$QUICK_ROWS" | grep -oE 'SMOL_CUDA_[A-Z0-9_]+' | sort -u); do
        unset "$v"
    done
    q_parse_rows
    BESTROW=default
    put fact.mode "quick$([ "$DRY" = 1 ] && echo ' (CPU dry run)')"
    put fact.q_sizes "$QP $QN $QD1 $QD2 $QPL $QMAXT"
    put fact.q_streams "$QSTREAMS"
    put fact.q_backend "${QB[1]}"
    put fact.model "$MODEL"
    put fact.ttft_words "${GPU_CHECK_TTFT_WORDS:-4000}"
    say "gpu check --quick$([ "$DRY" = 1 ] && echo ' (DRY RUN on the CPU)'): $(git rev-parse --short HEAD 2>/dev/null || echo '?') + $(git status --porcelain 2>/dev/null | grep -vc '^??') changed files; OUT=$OUT; hard ${HARD}s; ${#ROWS[@]} rows"
    if [ "$DRY" = 1 ]; then
        put step.llama "skipped	0	dry run"
        put step.device "skipped	0	dry run: no GPU"
        put step.synth "skipped	0	dry run: $MODEL"
        put fact.model_gb "$(stat -c %s "$MODEL" | awk '{printf "%.4f", $1 / 1e9}')"
        say "  dry run: llama.cpp, device, synth skipped; model $MODEL"
    else
        step llama 0 "llama.cpp CUDA build in the background (-j $LLAMA_JOBS)" s_llama
        step device 0 "device facts, copy bandwidth" s_device
        step synth 0 "smollm3 synth --preset $PRESET -> $MODEL" s_synth
    fi
    step correct 0 "together: test_cuda, memcheck + racecheck (ops, fattn), each row's logits" q_correct
    step pass1 0 "smollm3 bench per row: pp$QP + tg$QN (the default also d$QD1, pp$QPL + d$QD2)" q_pass1
    step serve 0 "the default behind smollm3-gateway: $QSTREAMS streams, TTFT of a long prompt" q_serve_default
    step ncu 1 "ncu: one decode step of $BESTROW" q_ncu
    step serve_best 1 "the best row ($BESTROW) behind the gateway" q_serve_best
    step depth 1 "depth runs per row while llama.cpp builds" q_depth
    step peer 1 "llama.cpp: llama-bench, llama-server (same prompts), llama-batched-bench" q_peer
    step depth2 1 "the depth runs left" q_depth
    # what llama.cpp's reserve put off, in the same order, if time is left
    q_deferred ncu && step ncu 1 "ncu: one decode step of $BESTROW" q_ncu
    q_deferred serve_best && step serve_best 1 "the best row ($BESTROW) behind the gateway" q_serve_best
    q_deferred ncu && q_drop "ncu of a decode step" "time"
    q_deferred serve_best && q_drop "the best row ($BESTROW) behind the gateway" "time"
    q_depth_drops
    llama_signal CONT
    llama_signal TERM
    put step.summary "pass	0	"
    report quick "$W" "$OUT" > "$OUT/summary.txt" 2>&1
    cat "$OUT/summary.txt" >> "$LOG"
    cat "$OUT/summary.txt" >&3
}
