#!/bin/sh
# tests/load/run.sh [BUILD] - the load generator's own test (tests/load/test_load.py):
# its plan, its figures against a scripted SSE server with known timings and failures,
# and a few seconds against the real smollm3d (fixture model, CPU) + gateway + nginx
# (tests/soak/soak.py's Stack) and straight to the daemon (--mode ctl), its counts
# checked against usage and the gateway's /metrics.  LOAD_SECONDS (4) bounds the run.
# Last line: "load: N passed, N failed"; a missing prerequisite is a failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
[ -x build/venv/bin/python3 ] && PATH=$ROOT/build/venv/bin:$PATH && export PATH
fail() { echo "FAIL: cannot run: $*"; echo "load: 0 passed, 1 failed"; exit 1; }
for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3ctl" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || fail "$f not built (make)"
done
command -v python3 >/dev/null 2>&1 || fail "python3 not found"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || fail "nginx not installed (make deps)"
[ -f tests/fixtures/models/fixture-t.Q8_0.gguf ] || fail "fixture model missing"
export PYTHONDONTWRITEBYTECODE=1
exec python3 tests/load/test_load.py --build "$BUILD" --seconds "${LOAD_SECONDS:-4}"
