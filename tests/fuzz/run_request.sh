#!/bin/sh
# run_request.sh [SECONDS] - builds the libFuzzer harness for smollm3d's
# request decoder + validator (tests/fuzz/fuzz_request.c) and runs it for
# SECONDS (default 60), one worker, niced.  Seeds are generated here from
# the contract with the Python protobuf module when available (valid
# requests of every kind), so no binary seeds live in git.
#
# Build: the sources under test (rpc.c, chat_template.c, sampler.c, error.c,
# log.c, the generated protobuf-c code) with clang -fsanitize=fuzzer,address,
# undefined; the rest of the library (linked, never called) from a plain
# `make BUILD=build/fuzz/lib` (clang 14 cannot compile the kernels'
# __builtin_cpu_supports("f16c")), or FUZZ_LIB_BUILD's library (`make fuzz`:
# BUILD's, which `make all` builds anyway: in CI, after `make test`, nothing
# to build).  Outputs in build/fuzz/.
# Working corpus: build/fuzz/corpus-request/ (kept between runs); crashes land in
# build/fuzz/ as crash-*.
set -eu
SECONDS_TO_RUN=${1:-60}
case $SECONDS_TO_RUN in *[!0-9]*|'') echo "usage: $0 [SECONDS]"; exit 2;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/build/fuzz
CORPUS=$OUT/corpus-request
SEEDS=$OUT/seeds-request
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT/gen" "$CORPUS" "$SEEDS"
cd "$ROOT"
command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }

protoc-c --c_out="$OUT/gen" -Iproto proto/smollm3.proto
PKG="libzmq libprotobuf-c libsystemd libpcre2-8 jansson inih libxxhash"
CFLAGS="-std=gnu11 -D_GNU_SOURCE -g -O1 -I. -I$OUT/gen -fno-omit-frame-pointer -pthread \
 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(pkg-config --cflags $PKG)"
LIB_BUILD=${FUZZ_LIB_BUILD:-$OUT/lib}
nice -n 10 make -s BUILD="$LIB_BUILD" -j2 "$LIB_BUILD/lib/libsmollm3.a"
SRCS="daemon/server/request.c daemon/text/chat_template.c daemon/text/chat_buf.c daemon/text/sampler.c daemon/model/error.c daemon/server/log.c"
# shellcheck disable=SC2086
nice -n 10 $CC $CFLAGS tests/fuzz/fuzz_request.c $SRCS "$OUT/gen/smollm3.pb-c.c" "$LIB_BUILD/lib/libsmollm3.a" \
    $(pkg-config --libs $PKG) -lm -o "$OUT/fuzz_request"

if command -v protoc >/dev/null && python3 -c 'import google.protobuf' 2>/dev/null; then
    protoc --python_out="$OUT" -Iproto proto/smollm3.proto
    PYTHONPATH=$OUT python3 - "$SEEDS" <<'PY'
import sys, smollm3_pb2 as pb
d = sys.argv[1]
def w(name, rq): open(f"{d}/{name}", "wb").write(rq.SerializeToString())
r = pb.Request(request_id=1); r.health.SetInParent(); w("health", r)
r = pb.Request(request_id=2); r.stats.SetInParent(); w("stats", r)
r = pb.Request(request_id=3); r.session_get.session_id = "s-1"; w("session_get", r)
r = pb.Request(request_id=4); r.session_delete.session_id = "s-1"; w("session_delete", r)
r = pb.Request(request_id=5); r.cancel.target_request_id = 9; w("cancel", r)
r = pb.Request(protocol_version=1, request_id=6); g = r.generate
g.session_id = "chat:1"; g.max_tokens = 64; g.stop.extend(["END", "\n\n"]); g.logprobs = True
g.enable_thinking = False; g.date = "09 July 2025"
for role, text in [("system", "Be brief /no_think"), ("user", "héllo"), ("assistant", "hi"), ("tool", "{}")]:
    m = g.chat.messages.add(); m.role = role; m.content = text
g.chat.messages[2].tool_calls_json = '[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]'
g.chat.messages[3].tool_call_id = "c1"
g.chat.tools_json = '[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]'
g.chat.add_generation_prompt = True
s = g.sampling; s.temperature = 0.7; s.top_p = 0.9; s.top_k = 40; s.min_p = 0.05
s.repetition_penalty = 1.1; s.presence_penalty = 0.5; s.frequency_penalty = 0.5; s.seed = 42
w("generate_chat", r)
r = pb.Request(request_id=7); r.generate.text = "Once upon a time"; w("generate_text", r)
r = pb.Request(request_id=8); r.generate.tokens.ids.extend([1, 2, 3, 49151]); w("generate_tokens", r)
PY
fi

echo "fuzz: running fuzz_request for ${SECONDS_TO_RUN}s (corpus $CORPUS, seeds $SEEDS)"
LOG=$OUT/fuzz_request.log
set +e
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
nice -n 10 "$OUT/fuzz_request" -max_len=70000 -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$OUT/" "$CORPUS" "$SEEDS" >"$LOG" 2>&1
rc=$?
set -e
grep -E 'cov:' "$LOG" | tail -n 1
grep -E 'stat::|ERROR|SUMMARY|crash-|Done' "$LOG" | tail -n 12
execs=$(grep -E 'stat::number_of_executed_units' "$LOG" | awk '{print $2}')
echo "fuzz: executions: ${execs:-unknown}; corpus files: $(ls "$CORPUS" | wc -l); exit $rc; log $LOG"
exit $rc
