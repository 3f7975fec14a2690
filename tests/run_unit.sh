#!/bin/sh
# run_unit.sh BUILD - runs every Check suite in BUILD/tests; fails if any fails
# or if a suite ran no test.
BUILD=${1:-build}
fail=0; total=0
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E '^[0-9]+%:|SKIPPED|:[EF]:' | sed "s|^|$(basename "$t"): |"
    if [ $rc -ne 0 ]; then echo "FAILED: $t (exit $rc)"; printf '%s\n' "$out" | tail -30; fail=1; fi
    if printf '%s\n' "$out" | grep -q 'Checks: 0'; then echo "FAILED: $t ran no test"; fail=1; fi
    total=$((total + 1))
done
[ $total -gt 0 ] || { echo "no unit test suites found"; exit 1; }
exit $fail
