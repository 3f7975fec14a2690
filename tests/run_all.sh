#!/usr/bin/env bash
# run_all.sh [BUILD] - every test suite of `make test`, in order, then a
# summary: passed / failed / skipped per suite and in total, the last line
# a plain "N passed, N failed, N skipped".  Exits 1 if any suite failed.
#
# Each suite prints its own "N passed, N failed[, N skipped]" last line; its
# output is also kept in BUILD/test-logs/NAME.log.  A suite that exits
# non-zero without counting a failure counts one; a suite with no count line
# counts one failure ("no result").  A SKIPPED line is allowed only for
# absent hardware (no CUDA device, a CPU without AVX-512: see run_unit.sh)
# or, for cuda-static, an absent CUDA toolkit (no nvcc, or CUDA=0); any other
# one is counted as a failure: a check that cannot run where it should is a
# failure.
# SUITES="unit cli" runs a subset.  SOAK_SECONDS (default 60) bounds the soak.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-build}
LOGS=$BUILD/test-logs
mkdir -p "$LOGS"
# the tests' Python: the project's venv (make deps)
[ -x build/venv/bin/python3 ] && PATH=$(pwd)/build/venv/bin:$PATH && export PATH
export SOAK_SECONDS=${SOAK_SECONDS:-60}

ALL="links unit cuda-emu cuda-static cli chat-cli daemon chaos gateway web deploy scaleout examples load soak"
SUITES=${SUITES:-$ALL}
HW_SKIP='SKIPPED: (no CUDA device|no nvcc \(|cpu variant [a-z0-9]+ \(not built for or not supported by this CPU\))'

cmd_of() {
    case $1 in
        links)    echo "python3 tests/docs/check_links.py" ;;
        unit)     echo "sh tests/run_unit.sh $BUILD" ;;
        cuda-emu) echo "sh tests/cuda_emu/suite.sh $BUILD" ;;
        cuda-static) echo "bash tests/gpu/check_spills.sh $BUILD" ;;
        cli)      echo "sh tests/run_cli.sh $BUILD" ;;
        chat-cli) echo "sh tests/test_chat_cli.sh $BUILD" ;;
        daemon)   echo "sh tests/daemon/run.sh $BUILD" ;;
        chaos)    echo "sh tests/chaos/run.sh $BUILD" ;;
        gateway)  echo "sh tests/gateway/run.sh $BUILD" ;;
        web)      echo "bash tests/web/run.sh $BUILD" ;;
        deploy)   echo "sh tests/deploy/run.sh $BUILD" ;;
        scaleout) echo "sh tests/scaleout/run.sh $BUILD" ;;
        examples) echo "python3 tests/docs/test_readme_examples.py --build $BUILD" ;;
        load)     echo "sh tests/load/run.sh $BUILD" ;;
        soak)     echo "bash tests/soak/run.sh $BUILD" ;;
        *)        return 1 ;;
    esac
}

declare -A P F S T NOTE
tp=0 tf=0 ts=0 anyfail=0
for s in $SUITES; do
    cmd=$(cmd_of "$s") || { echo "run_all: unknown suite '$s' (known: $ALL)"; exit 2; }
    echo "==== $s: $cmd"
    t0=$(date +%s)
    $cmd 2>&1 | tee "$LOGS/$s.log"
    rc=${PIPESTATUS[0]}
    T[$s]=$(( $(date +%s) - t0 ))
    line=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?' "$LOGS/$s.log" | tail -n 1)
    p=0 f=0 k=0 note=
    if [ -n "$line" ]; then
        p=$(sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed.*/\2/' <<<"$line")
        f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
        grep -q ' skipped' <<<"$line" && k=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")
    else
        f=1; note="no result line"
    fi
    # SKIPPED lines: only absent hardware may skip; the unit runner counts its own
    bad=$(grep 'SKIPPED' "$LOGS/$s.log" | grep -E -v -c "$HW_SKIP")
    if [ "$s" != unit ]; then
        hw=$(grep -E -c "$HW_SKIP" "$LOGS/$s.log")
        k=$((k + hw))
    fi
    if [ "$bad" -gt 0 ] && [ "$s" != unit ]; then
        f=$((f + bad)); note="${note:+$note; }$bad SKIPPED line(s) counted as failures"
    fi
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; note="${note:+$note; }exit $rc"; fi
    P[$s]=$p F[$s]=$f S[$s]=$k NOTE[$s]=$note
    tp=$((tp + p)) tf=$((tf + f)) ts=$((ts + k))
    [ "$f" -gt 0 ] && anyfail=1
done

echo
echo "==== summary (logs in $LOGS/)"
printf '%-11s %8s %8s %8s %7s  %s\n' suite passed failed skipped time note
for s in $SUITES; do
    printf '%-11s %8d %8d %8d %6ss  %s\n' "$s" "${P[$s]}" "${F[$s]}" "${S[$s]}" "${T[$s]}" "${NOTE[$s]}"
done
printf '%-11s %8d %8d %8d\n' total "$tp" "$tf" "$ts"
[ "$ts" -gt 0 ] && echo "(skipped: absent hardware only -- no CUDA device, CPU kernel variants this CPU cannot run; or no nvcc for cuda-static)"
echo "$tp passed, $tf failed, $ts skipped"
exit $anyfail
