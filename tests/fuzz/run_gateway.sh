#!/bin/sh
# run_gateway.sh [SECONDS] - builds the libFuzzer harness for the gateway's
# request parsing (tests/fuzz/fuzz_gateway.c: the OpenAI chat body, the
# Anthropic Messages body and the UI's /ui/chat form -> the protobuf
# GenerateRequest, the HTML escaping of echoed text and the UI stream's SSE framing of it) and runs it for SECONDS (default 60), one worker, niced.
# FUZZ_RUNS=N stops after N executions instead (whichever comes first);
# FUZZ_MAX_LEN (default 4096) bounds the input size.
#
# Build: gateway/core.c, openai.c, anthropic.c, params.c, structured.c, ui.c, util.c, responses.c,
# fields.c, error.c
# (with the daemon's chat_template.c, pyrepr.c, error.c: json.dumps of tool
# inputs) and the generated
# protobuf-c code with clang -fsanitize=fuzzer,address,undefined; the rest of
# the gateway (HTTP, daemon link) is stubbed in the harness and traps if
# called.  Seeds (requests of every shape, with the target byte in front) are
# written here into build/fuzz/seeds-gateway/; the working corpus grows in
# build/fuzz/corpus-gateway/ (kept between runs); crashes land in build/fuzz/
# as crash-*.
set -eu
SECONDS_TO_RUN=${1:-60}
case $SECONDS_TO_RUN in *[!0-9]*|'') echo "usage: $0 [SECONDS]"; exit 2;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/build/fuzz
CORPUS=$OUT/corpus-gateway
SEEDS=$OUT/seeds-gateway
CC=${FUZZ_CC:-clang}
mkdir -p "$OUT/gen" "$CORPUS" "$SEEDS"
cd "$ROOT"
command -v "$CC" >/dev/null || { echo "fuzz: $CC not found (make deps: clang libclang-rt-14-dev)"; exit 1; }

protoc-c --c_out="$OUT/gen" -Iproto proto/smollm3.proto
PKG="libmicrohttpd jansson libprotobuf-c libzmq"
CFLAGS="-std=gnu11 -D_GNU_SOURCE -g -O1 -I. -I$OUT/gen -fno-omit-frame-pointer \
 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(pkg-config --cflags $PKG)"
# shellcheck disable=SC2086
nice -n 10 $CC $CFLAGS tests/fuzz/fuzz_gateway.c gateway/core.c gateway/openai.c gateway/anthropic.c gateway/params.c \
    gateway/structured.c gateway/ui.c gateway/util.c gateway/responses.c gateway/items.c gateway/fields.c gateway/error.c \
    daemon/text/chat_template.c daemon/text/chat_buf.c daemon/text/pyrepr.c daemon/model/rules.c daemon/model/error.c \
    "$OUT/gen/smollm3.pb-c.c" -ljansson -lprotobuf-c -lm -o "$OUT/fuzz_gateway"

# seeds: one byte for the target (0 OpenAI, 1 UI form, 2 HTML, 3 Anthropic, 4 count_tokens, 5 Responses),
# then the body
seed() { printf "$1" >"$SEEDS/$2.tmp"; printf '%s' "$3" >>"$SEEDS/$2.tmp"; mv "$SEEDS/$2.tmp" "$SEEDS/$2"; }
seed '\000' openai-min '{"messages":[{"role":"user","content":"Hi"}]}'
seed '\000' openai-full '{"model":"smollm3","messages":[{"role":"system","content":"Be brief"},{"role":"developer","content":null},{"role":"user","content":[{"type":"text","text":"h\u00e9llo "},{"type":"text","text":"world"}]},{"role":"assistant","content":"","reasoning_content":"hmm","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","name":"f","content":"{\"ok\":true}"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"stream":true,"stream_options":{"include_usage":true},"n":1,"max_tokens":64,"max_completion_tokens":32,"temperature":0.7,"top_p":0.9,"presence_penalty":0.5,"frequency_penalty":-0.5,"seed":42,"stop":["END","\n\n"],"chat_template_kwargs":{"enable_thinking":false},"session_id":"chat:1_a-b.c"}'
seed '\000' openai-bad '{"messages":[{"role":"robot","content":1}],"temperature":3,"stop":[""],"n":2}'
seed '\000' openai-api '{"messages":[{"role":"user","content":"Hi"}],"n":3,"logprobs":true,"top_logprobs":5,"logit_bias":{"42":-100,"7":2.5},"top_k":40,"min_p":0.05,"repetition_penalty":1.1,"reasoning_effort":"low","tool_choice":"none","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}},"user":"u","metadata":{"a":"b"}}'
seed '\000' openai-grammar '{"messages":[{"role":"user","content":"Hi"}],"grammar":"root ::= [0-9]+","response_format":{"type":"text"}}'
seed '\000' openai-dup '{"messages":[],"messages":[]}'
seed '\001' ui-min 'conversation=conv-1&message=hi'
seed '\001' ui-full 'conversation=conv_1-a&history=%5B%7B%22role%22%3A%22user%22%2C%22content%22%3A%22hi%22%7D%2C%7B%22role%22%3A%22assistant%22%2C%22content%22%3A%22hello%22%7D%5D&message=Tell+me+%3Cb%3Emore%3C%2Fb%3E+%26+%22quote%22&think=0&temperature=0.25&system=You+are+%C3%A9l%C3%A8ve'
seed '\001' ui-bad 'conversation=&message=%FF%FE&think=2&temperature=abc&history=%7B%7D'
seed '\005' responses-min '{"input":"Hi"}'
seed '\005' responses-full '{"model":"m","instructions":"Be brief","input":[{"role":"user","content":[{"type":"input_text","text":"Weather?"}]},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"c1","output":"21 C"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Warm."}]}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}],"tool_choice":{"type":"function","name":"get_weather"},"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}},"reasoning":{"effort":"none"},"max_output_tokens":64,"temperature":0.5,"top_p":0.9,"metadata":{"k":"v"},"store":false,"stream":true,"include":[],"truncation":"disabled"}'
seed '\005' responses-prev '{"previous_response_id":"resp_0a1b2c","instructions":"Be brief","input":[{"type":"function_call_output","call_id":"c1","output":"21 C"},{"role":"user","content":"and?"}],"store":true}'
seed '\005' responses-bad '{"input":[{"type":"input_image"}],"tools":[{"type":"web_search"}],"previous_response_id":"resp_x","background":true}'
seed '\002' html '<script>alert("x&y")</script> it'"'"'s'
seed '\002' html-cr "$(printf 'x\r\revent: done\rdata: {}\r\r<b>a\r\nb</b>\nc')"
seed '\003' anthropic-min '{"model":"x","max_tokens":8,"messages":[{"role":"user","content":"Hi"}]}'
seed '\003' anthropic-full '{"model":"claude","max_tokens":64,"system":[{"type":"text","text":"Be brief","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"h\u00e9llo"},{"type":"text","text":"world"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"f","input":{"a":[1,2.5,"x",null,true]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"}],"is_error":true},{"type":"text","text":"and?"}]},{"role":"system","content":"/think"}],"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"array"}}},"strict":true}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},"stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"top_k":40,"stream":true,"metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":16,"display":"omitted"},"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}},"service_tier":"auto","speed":"standard"}'
seed '\003' anthropic-bad '{"max_tokens":0,"messages":[{"role":"assistant","content":[{"type":"image"}]}],"tool_choice":{"type":"any"},"thinking":{"type":"enabled","budget_tokens":99}}'
seed '\004' anthropic-count '{"model":"x","messages":[{"role":"user","content":"Hi"}],"tools":[{"name":"g","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"system":"s"}'

echo "fuzz: running fuzz_gateway for ${SECONDS_TO_RUN}s${FUZZ_RUNS:+ or $FUZZ_RUNS runs} (corpus $CORPUS, seeds $SEEDS)"
LOG=$OUT/fuzz_gateway.log
set +e
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
nice -n 10 "$OUT/fuzz_gateway" -max_len=${FUZZ_MAX_LEN:-4096} -max_total_time="$SECONDS_TO_RUN" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} \
    -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$OUT/" "$CORPUS" "$SEEDS" >"$LOG" 2>&1
rc=$?
set -e
grep -E 'cov:' "$LOG" | tail -n 1
grep -E 'stat::|ERROR|SUMMARY|crash-|Done' "$LOG" | tail -n 12
execs=$(grep -E 'stat::number_of_executed_units' "$LOG" | awk '{print $2}')
echo "fuzz: executions: ${execs:-unknown}; corpus files: $(ls "$CORPUS" | wc -l); exit $rc; log $LOG"
exit $rc
