#!/bin/sh
# run.sh [BUILD] - the chaos test of smollm3d with a spill directory
# (tests/chaos/test_chaos.py): SIGKILL mid-stream and restarts, sessions
# restored from disk or recomputed with the same greedy tokens as a daemon
# that never stopped, a spill directory full of bad files, the gateway
# recovering.  Prints "N passed, N failed" and exits non-zero on failure;
# "SKIPPED: <reason>" and exit 0 when a prerequisite is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}

skip() { echo "SKIPPED: $*"; exit 0; }

for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3ctl" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || skip "$f not built (make BUILD=$BUILD)"
done
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
command -v protoc >/dev/null 2>&1 || skip "protoc not found (apt-get install protobuf-compiler)"
python3 -c "import zmq, google.protobuf" 2>/dev/null || skip "python modules missing: pip install pyzmq protobuf"
for m in fixture-t.Q8_0.gguf fixture-a.Q4_K_M.gguf; do
    [ -f tests/fixtures/models/$m ] || skip "fixture model $m missing"
done

export PYTHONDONTWRITEBYTECODE=1
PB2=$(mktemp -d)
trap 'rm -rf "$PB2"' EXIT INT TERM
python3 tests/chaos/test_chaos.py --build "$BUILD" --pb2-dir "$PB2"
