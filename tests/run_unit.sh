#!/bin/sh
# run_unit.sh BUILD - runs every Check suite in BUILD/tests; fails if any fails,
# if a suite ran no test, or if a tests/test_*.c has no suite built.
#
# A suite's "SKIPPED: ..." line is allowed only where the hardware is absent:
# no CUDA device, a CPU kernel variant this CPU cannot run (AVX-512), or a
# variant with nothing of that kind to test.  Any other SKIPPED (a missing
# fixture or model, ...) is a failure: the check should have run.
# Last line: "unit: N passed, N failed, N skipped" (a test = one Check test
# or loop iteration; a skipped one is one that printed an allowed SKIPPED).
# UNIT_JOBS=N (default 1) runs N suites at a time (make asan: 2, one per
# core; the sanitized suites are mostly single-threaded); the reports still
# come in suite order, each with its time.
BUILD=${1:-build}
JOBS=${UNIT_JOBS:-1}
ALLOWED='SKIPPED: (no CUDA device|cpu variant [a-z0-9]+ \(not built for or not supported by this CPU\))'
fail=0; total=0; npass=0; nfail=0; nskip=0
OUTS=$(mktemp -d)
trap 'rm -rf "$OUTS"' EXIT
# each suite's output and exit status into OUTS (in parallel when JOBS > 1)
ls "$BUILD"/tests/test_* 2>/dev/null | xargs -r -P "$JOBS" -I{} sh -c \
    't0=$(date +%s); "$1" > "$2/$(basename "$1").out" 2>&1; echo $? $(( $(date +%s) - t0 )) > "$2/$(basename "$1").rc"' \
    sh {} "$OUTS"
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    out=$(cat "$OUTS/$name.out" 2>/dev/null); rc=1; secs=?
    [ -f "$OUTS/$name.rc" ] && read -r rc secs < "$OUTS/$name.rc"
    echo "$name: ${secs}s"
    printf '%s\n' "$out" | grep -E '^[0-9]+%:|SKIPPED|:[EF]:' | sed "s|^|$name: |"
    checks=$(printf '%s\n' "$out" | sed -n 's/^[0-9]*%: Checks: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\)$/\1 \2 \3/p' | tail -n 1)
    set -- $checks 0 0 0
    c=$1; f=$(($2 + $3))
    s=$(printf '%s\n' "$out" | grep -E -c "$ALLOWED")
    bad=$(printf '%s\n' "$out" | grep 'SKIPPED' | grep -E -v -c "$ALLOWED")
    if [ "$bad" -gt 0 ]; then
        echo "FAILED: $name: $bad check(s) skipped for a reason other than absent hardware:"
        printf '%s\n' "$out" | grep 'SKIPPED' | grep -E -v "$ALLOWED" | sed 's/^/    /'
        f=$((f + bad)); fail=1
    fi
    p=$((c - f - s)); [ $p -lt 0 ] && p=0
    if [ $rc -ne 0 ]; then
        echo "FAILED: $t (exit $rc)"; printf '%s\n' "$out" | tail -30; fail=1
        [ $f = 0 ] && f=1
    fi
    if [ -z "$checks" ] || printf '%s\n' "$out" | grep -q 'Checks: 0'; then
        echo "FAILED: $t ran no test"; fail=1; f=$((f + 1))
    fi
    npass=$((npass + p)); nfail=$((nfail + f)); nskip=$((nskip + s))
    total=$((total + 1))
done
[ $total -gt 0 ] || { echo "no unit test suites found"; echo "unit: 0 passed, 1 failed, 0 skipped"; exit 1; }
# every tests/test_NAME.c is a suite: one not built (no Check when `make` ran) is a failure, never
# a suite left out
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for src in "$ROOT"/tests/test_*.c; do
    name=$(basename "$src" .c)
    [ -x "$BUILD/tests/$name" ] && continue
    echo "FAILED: $BUILD/tests/$name not built (make deps: Check; then make)"
    fail=1; nfail=$((nfail + 1))
done
echo "unit: $npass passed, $nfail failed, $nskip skipped"
exit $fail
