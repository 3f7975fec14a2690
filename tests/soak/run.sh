#!/usr/bin/env bash
# tests/soak/run.sh [BUILD] - the soak (`make soak`: SOAK_SECONDS, default
# 1200; `make test` runs it with SOAK_SECONDS=60): daemon + gateway + nginx
# (the shipped site) on the real SmolLM2-135M, mixed traffic to 127.0.0.1
# with a daemon restart halfway, no unexpected errors, every stream
# terminated, RSS and fds flat (tests/soak/soak.py says how).
# Needs the built binaries, nginx, build/models/SmolLM2-135M-Instruct.Q4_1.gguf
# (tests/get_smollm2.sh) and the tests' Python (build/venv, `make deps`);
# a missing one is a failure.  SOAK_WORKERS (5), SOAK_THREADS (daemon compute
# threads, 2).  Last line: "soak: N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
[ -x build/venv/bin/python3 ] && PATH=$ROOT/build/venv/bin:$PATH && export PATH
MODEL=${SOAK_MODEL:-$ROOT/build/models/SmolLM2-135M-Instruct.Q4_1.gguf}
fail() { echo "FAIL: cannot run: $*"; echo "soak: 0 passed, 1 failed"; exit 1; }
for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || fail "$f not built (make)"
done
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || fail "nginx not installed (make deps)"
[ -f "$MODEL" ] || fail "$MODEL missing (sh tests/get_smollm2.sh)"
export PYTHONDONTWRITEBYTECODE=1
exec python3 tests/soak/soak.py --build "$BUILD" --model "$MODEL" --seconds "${SOAK_SECONDS:-1200}"
