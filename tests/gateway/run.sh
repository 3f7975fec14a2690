#!/bin/sh
# run.sh [BUILD] [FILTER...] - process-level tests of smollm3-gateway: starts
# the real BUILD/bin/smollm3d (--threads 1) on the fixture model and the
# gateway on loopback ports in temp dirs, drives them with curl, raw sockets,
# the openai SDK and a scripted fake daemon (tests/gateway/test_gateway.py),
# the OpenAI API surface with the openai SDK, curl and langchain-openai
# (tests/gateway/test_api.py), the Responses API (tests/gateway/test_responses.py:
# the openai SDK and openai-agents; tests/gateway/test_responses_fleet.py: stored
# responses on two nodes and after restarts), Anthropic's Messages API with the
# anthropic SDK and langchain-anthropic (tests/gateway/test_anthropic.py), and
# the one set of input rules: the same good and bad inputs through the gateway
# (HTTP) and straight to the daemon (ZeroMQ), the same verdicts required
# (tests/gateway/test_rules.py), faults injected into the gateway (tests/gateway/test_fault.py), and
# tenancy and bounded memory with two API keys and hostile clients (tests/gateway/test_tenancy.py),
# API keys: tenant ids under the deployment's secret, tenant=, SIGHUP reload (tests/gateway/test_keys.py),
# fair sharing between keys and service tiers (tests/gateway/test_sched.py), and a gateway over a
# pool of two daemons whose streams survive a kill -9 (tests/gateway/test_resume.py).
# Prints "N passed, N failed" and exits non-zero on failure; a missing
# prerequisite is a failure ("FAIL: cannot run: why"; `make deps` installs
# them all: promtool from Debian's prometheus, the Python packages in build/venv).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
[ $# -gt 0 ] && shift
[ -x build/venv/bin/python3 ] && PATH=$(pwd)/build/venv/bin:$PATH && export PATH

skip() { echo "FAIL: cannot run: $*"; echo "0 passed, 1 failed"; exit 1; }

for f in "$BUILD/bin/smollm3d" "$BUILD/bin/smollm3ctl" "$BUILD/bin/smollm3-gateway"; do
    [ -x "$f" ] || skip "$f not built (make BUILD=$BUILD)"
done
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
[ -f tests/fixtures/models/fixture-t.Q8_0.gguf ] || skip "fixture model missing"
command -v promtool >/dev/null 2>&1 || skip "promtool not found (make deps: Debian's prometheus)"
command -v protoc >/dev/null 2>&1 || skip "protoc not found (make deps: protobuf-compiler)"
python3 -c "import openai, zmq, google.protobuf, prometheus_client" 2>/dev/null ||
    skip "python packages missing: openai, pyzmq, protobuf, prometheus_client (make deps: build/venv)"
# the API tests' clients, pinned (tests/requirements-api.txt), into the same venv
python3 -c "import langchain_openai, agents, anthropic, langchain_anthropic" 2>/dev/null ||
    python3 -m pip install -q -r tests/requirements-api.txt ||
    skip "pip install -r tests/requirements-api.txt failed"

export PYTHONDONTWRITEBYTECODE=1
PB2=$(mktemp -d)
trap 'rm -rf "$PB2"' EXIT INT TERM
# the fake daemon speaks the protocol through the Python protobuf module
protoc --python_out="$PB2" -Iproto proto/smollm3.proto || skip "protoc --python_out failed"
rc=0
{ python3 tests/gateway/test_gateway.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/gateway.rc"; } 2>&1 |
    tee "$PB2/gateway.out"
[ "$(cat "$PB2/gateway.rc")" = 0 ] || rc=1
# the OpenAI API surface field by field (test_api.py)
{ python3 tests/gateway/test_api.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/api.rc"; } 2>&1 |
    tee "$PB2/api.out"
[ "$(cat "$PB2/api.rc")" = 0 ] || rc=1
# tenancy and bounded memory: two keys over every id a client can name, hostile clients (test_tenancy.py;
# SMOL_HOSTILE_N=10000 for the full flood of stored responses)
{ python3 tests/gateway/test_tenancy.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/tenancy.rc"; } 2>&1 |
    tee "$PB2/tenancy.out"
[ "$(cat "$PB2/tenancy.rc")" = 0 ] || rc=1
# API keys: tenant ids under the deployment secret, tenant=, nothing leaked, SIGHUP reload (test_keys.py)
{ python3 tests/gateway/test_keys.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/keys.rc"; } 2>&1 |
    tee "$PB2/keys.out"
[ "$(cat "$PB2/keys.rc")" = 0 ] || rc=1
# fair sharing and priority: per-key in-flight limits, service_tier, per-tenant metrics (test_sched.py)
{ python3 tests/gateway/test_sched.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/sched.rc"; } 2>&1 |
    tee "$PB2/sched.out"
[ "$(cat "$PB2/sched.rc")" = 0 ] || rc=1
# the Responses API with the openai SDK and openai-agents (test_responses.py)
{ python3 tests/gateway/test_responses.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/responses.rc"; } 2>&1 |
    tee "$PB2/responses.out"
[ "$(cat "$PB2/responses.rc")" = 0 ] || rc=1
# stored Responses are the daemons': two gateways over two daemons on one shared spill directory,
# restarts, per-tenant bounds and TTL (test_responses_fleet.py)
{ python3 tests/gateway/test_responses_fleet.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/fleet.rc"; } 2>&1 |
    tee "$PB2/fleet.out"
[ "$(cat "$PB2/fleet.rc")" = 0 ] || rc=1
# Anthropic's Messages API (test_anthropic.py)
{ python3 tests/gateway/test_anthropic.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/anthropic.rc"; } 2>&1 |
    tee "$PB2/anthropic.out"
[ "$(cat "$PB2/anthropic.rc")" = 0 ] || rc=1
# one set of rules: the same inputs through the gateway and straight to the daemon (test_rules.py)
{ python3 tests/gateway/test_rules.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/rules.rc"; } 2>&1 |
    tee "$PB2/rules.out"
[ "$(cat "$PB2/rules.rc")" = 0 ] || rc=1
# a gateway over two daemons: rendezvous, health, streams resumed after a kill -9 and a restart (test_resume.py)
{ python3 tests/gateway/test_resume.py --build "$BUILD" --pb2-dir "$PB2" "$@"; echo $? > "$PB2/resume.rc"; } 2>&1 |
    tee "$PB2/resume.out"
[ "$(cat "$PB2/resume.rc")" = 0 ] || rc=1
# faults injected into the gateway (tests/gateway/test_fault.py: its allocations, the daemon link,
# libmicrohttpd's responses; a sample of the N, SMOL_FAULT_FULL=1 for all)
{ python3 tests/gateway/test_fault.py --build "$BUILD"; echo $? > "$PB2/fault.rc"; } 2>&1 | tee "$PB2/fault.out"
[ "$(cat "$PB2/fault.rc")" = 0 ] || rc=1
# one result line for all eleven (tests/run_all.sh reads the last one)
sum() { sed -n "s/^\([0-9]*\) passed, \([0-9]*\) failed$/\\$1/p" "$PB2/gateway.out" "$PB2/api.out" "$PB2/responses.out" "$PB2/fleet.out" \
        "$PB2/anthropic.out" "$PB2/rules.out" "$PB2/fault.out" "$PB2/tenancy.out" "$PB2/keys.out" "$PB2/sched.out" "$PB2/resume.out" |
        awk '{ n += $1 } END { print n + 0 }'; }
p=$(sum 1) f=$(sum 2)
[ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
echo "gateway: $p passed, $f failed"
exit $rc
