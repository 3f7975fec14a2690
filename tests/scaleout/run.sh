#!/bin/sh
# run.sh [BUILD] - the scale-out suite (tests/scaleout/test_scaleout.py):
# three nodes (smollm3d + gateway each, the fixture model) sharing one spill
# directory (kv_spill_shared) behind deploy/nginx/scale-out.conf; 30
# conversations of 4 turns, kill -9 of a node after turn 2, a rolling restart
# of the other two; daemon-kept conversations moving node; two nodes racing
# for one session; a 4K-token session restored vs recomputed; the Grafana
# dashboard's series in a live /metrics.  Network namespaces (ip netns) when
# this runs as root and the kernel allows them, loopback addresses
# 127.0.0.2-4 otherwise (SCALEOUT_NET=netns|loopback forces one).
# Prints "N passed, N failed" and exits 1 on a failure; a missing
# prerequisite is a failure ("FAIL - cannot run: reason"; `make deps`).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}

skip() { echo "FAIL - cannot run: $*"; echo "0 passed, 1 failed"; exit 1; }

for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || skip "$f not built (make BUILD=$BUILD)"
done
PY=python3
[ -x build/venv/bin/python3 ] && PY=build/venv/bin/python3
command -v nginx >/dev/null 2>&1 || skip "nginx not found (make deps)"
command -v protoc >/dev/null 2>&1 || skip "protoc not found (apt-get install protobuf-compiler)"
$PY -c "import zmq, google.protobuf" 2>/dev/null || skip "python modules missing: pip install pyzmq protobuf"
[ -f tests/fixtures/models/fixture-t.Q8_0.gguf ] || skip "fixture model fixture-t.Q8_0.gguf missing"

export PYTHONDONTWRITEBYTECODE=1
PB2=$(mktemp -d)
trap 'rm -rf "$PB2"' EXIT INT TERM
$PY tests/scaleout/test_scaleout.py --build "$BUILD" --pb2-dir "$PB2" --net "${SCALEOUT_NET:-auto}"
