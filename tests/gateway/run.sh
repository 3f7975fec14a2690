#!/bin/sh
# run.sh [BUILD] [FILTER...] - process-level tests of smollm3-gateway: starts
# the real BUILD/bin/smollm3d (--threads 1) on the fixture model and the
# gateway on loopback ports in temp dirs, drives them with curl, raw sockets,
# the openai SDK, langchain-openai and a scripted fake daemon
# (tests/gateway/test_gateway.py: transport, SSE, limits, UI, metrics;
# tests/gateway/test_api.py: the OpenAI API surface field by field).
# Python packages come from tests/requirements-api.txt, installed into
# build/venv when missing.
# Prints "N passed, N failed" and exits non-zero on failure; "SKIPPED: why"
# and exit 0 when a prerequisite is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
[ $# -gt 0 ] && shift

skip() { echo "SKIPPED: $*"; exit 0; }

for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3ctl" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || skip "$f not built (make BUILD=$BUILD)"
done
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
[ -f tests/fixtures/models/fixture-t.Q8_0.gguf ] || skip "fixture model missing"
command -v promtool >/dev/null 2>&1 || echo "SKIPPED: promtool not found (apt-get install prometheus); metrics checked with prometheus_client if present"

# the clients under test, pinned, in the project's venv
VENV=build/venv
PY=$VENV/bin/python
if ! "$PY" -c "import openai, langchain_openai, zmq, google.protobuf" 2>/dev/null; then
    [ -x "$PY" ] || python3 -m venv "$VENV" || skip "cannot create $VENV (apt-get install python3-venv)"
    "$VENV/bin/pip" install -q -r tests/requirements-api.txt || {
        echo "FAILED: pip install -r tests/requirements-api.txt into $VENV"; exit 1; }
fi

export PYTHONDONTWRITEBYTECODE=1
PB2=$(mktemp -d)
trap 'rm -rf "$PB2"' EXIT INT TERM
# the fake daemon needs the Python protobuf module
if command -v protoc >/dev/null 2>&1; then
    protoc --python_out="$PB2" -Iproto proto/smollm3.proto 2>/dev/null || true
fi
rc=0
"$PY" tests/gateway/test_gateway.py --build "$BUILD" --pb2-dir "$PB2" "$@" || rc=1
"$PY" tests/gateway/test_api.py --build "$BUILD" --pb2-dir "$PB2" "$@" || rc=1
exit $rc
