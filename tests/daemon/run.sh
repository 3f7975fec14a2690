#!/bin/sh
# run.sh [BUILD] [FILTER...] - process-level tests of the daemon: starts the
# real BUILD/bin/smollm3d on fixture models (and the real SmolLM2 when
# tests/get_smollm2.sh can provide it) with temporary sockets, and drives it
# with smollm3ctl, the C client library (Check suite tests/daemon/test_client.c)
# and the Python example client (proto/examples/client.py).
# Prints "N passed, N failed" and exits non-zero on failure; a missing
# prerequisite is a failure ("FAIL: <reason>", `make deps` installs them all).
# Python: build/venv's (tests/requirements.txt, `make deps`).
# Run from anywhere; paths are relative to the repository root.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
[ $# -gt 0 ] && shift
[ -x build/venv/bin/python3 ] && PATH=$(pwd)/build/venv/bin:$PATH && export PATH

skip() { echo "FAIL: cannot run: $*"; echo "0 passed, 1 failed"; exit 1; }

for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3ctl"; do
    [ -x "$f" ] || skip "$f not built (make BUILD=$BUILD)"
done
[ -f "$BUILD/lib/libsmollm3.a" ] || skip "$BUILD/lib/libsmollm3.a not built"
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
command -v protoc >/dev/null 2>&1 || skip "protoc not found (apt-get install protobuf-compiler)"
python3 -c "import zmq, google.protobuf" 2>/dev/null || \
    skip "python modules missing: pyzmq, protobuf (make deps: build/venv)"
[ -f tests/fixtures/models/fixture-t.Q8_0.gguf ] || skip "fixture model missing"

# The C client suite (Check), linked with the library like any service would.
CTEST=""
PKGS="libzmq libprotobuf-c libsystemd libpcre2-8 jansson inih libxxhash"
pkg-config --exists check 2>/dev/null || skip "Check (libcheck) missing: make deps"
mkdir -p "$BUILD/tests/daemon"
CTEST=$BUILD/tests/daemon/test_client
if [ ! -x "$CTEST" ] || [ tests/daemon/test_client.c -nt "$CTEST" ] || [ tests/check_main.c -nt "$CTEST" ] || \
   [ "$BUILD/lib/libsmollm3.a" -nt "$CTEST" ]; then
    # shellcheck disable=SC2046
    ${CC:-cc} -std=gnu11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wno-unused-parameter \
        -Wno-sign-compare -pthread -I. -I"$BUILD/gen" $(pkg-config --cflags $PKGS check) \
        tests/daemon/test_client.c tests/check_main.c "$BUILD/lib/libsmollm3.a" \
        $(pkg-config --libs check $PKGS) -lm -lpthread -ldl -o "$CTEST" || {
        echo "FAIL: tests/daemon/test_client.c does not build"
        echo "0 passed, 1 failed"
        exit 1
    }
fi

export PYTHONDONTWRITEBYTECODE=1
PB2=$(mktemp -d)
trap 'rm -rf "$PB2"' EXIT INT TERM
exec_args="--build $BUILD --pb2-dir $PB2"
[ -n "$CTEST" ] && exec_args="$exec_args --c-test $CTEST"
# shellcheck disable=SC2086
python3 tests/daemon/test_daemon.py $exec_args "$@"
