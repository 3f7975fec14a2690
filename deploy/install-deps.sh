#!/bin/sh
# install-deps.sh - install the Debian packages smollm3d builds and tests with
# (`make deps`, also run by `make test`).
#
# Build: compiler, pkg-config and the -dev libraries.  Tests: nginx, curl,
# clang + its runtime (libFuzzer), python3 + venv (the tests' own packages go
# into build/venv, see tests/setup-env.sh), protoc (Python stubs for the
# clients), python3-zmq + python3-protobuf (the README's protobuf client runs
# on Debian's python3), systemd (systemd-analyze), chromium (the browser test),
# prometheus (its promtool checks /metrics), nodejs + npm (the UI's assets and
# the browser test driver), unzip, libsimde-dev (header-only: tests/test_amx_sim
# runs the AMX kernels on any x86-64 with their AVX-512 intrinsics emulated).
#
# `install-deps.sh MODE` checks only what one make target needs:
#   run    (make run) building and serving: the compiler and -dev
#          libraries, nginx, curl, python3 + pip and unzip (tests/get_smollm2.sh),
#          node + npm (the UI's assets); the tests' packages (clang, chromium,
#          prometheus, ...) are `make deps`'
#   check  (make unit, tsan, gpu-check: the Check suites) building, Check
#          (check, libsubunit-dev), libsimde-dev (test_amx_sim), python3 (the
#          cuda-emu sources are made by tests/cuda_emu/cu2cpp.py)
#   fuzz   (make fuzz) building, clang + libFuzzer's runtime, protoc and
#          python3 (the request harness's seeds)
#   bench  (make bench, bench-grammar) run's, GNU time (/usr/bin/time: peak RSS
#          of both engines) and python3-venv (the llama.cpp peer's venv,
#          build/venv-llama; the grammar peers' build/venv-peers)
#
# Runs apt-get only when something is missing: a second run is a dpkg query.
# Missing packages and not root: says what to run and fails (a test that
# cannot run must not pass silently).
set -e
BUILD_PKGS="build-essential pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler \
libmicrohttpd-dev libjansson-dev libpcre2-dev libsystemd-dev libinih-dev libxxhash-dev uuid-dev"
RUN_PKGS="$BUILD_PKGS nginx curl python3 python3-pip unzip"
NODE=1          # node + npm wanted
case ${1:-} in
'') PKGS="$BUILD_PKGS check libsubunit-dev nginx curl clang libclang-rt-14-dev python3 python3-venv python3-pip systemd \
protobuf-compiler python3-zmq python3-protobuf chromium prometheus unzip libsimde-dev" ;;
run) PKGS=$RUN_PKGS ;;
check) PKGS="$BUILD_PKGS check libsubunit-dev libsimde-dev python3"; NODE= ;;
fuzz) PKGS="$BUILD_PKGS clang libclang-rt-14-dev protobuf-compiler python3"; NODE= ;;
bench) PKGS="$RUN_PKGS time python3-venv" ;;
*) echo "usage: install-deps.sh [run | check | fuzz | bench]" >&2; exit 2 ;;
esac
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# node + npm: any install that provides both commands will do (Debian's nodejs
# and npm, or a nodejs that bundles npm); Debian's npm is only added when absent.
if [ -n "$NODE" ] && ! command -v node >/dev/null 2>&1; then missing="$missing nodejs"; fi
if [ -n "$NODE" ] && ! command -v npm >/dev/null 2>&1; then missing="$missing npm"; fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages:$missing" >&2
    if [ "${1:-}" = run ]; then
        echo "install-deps: run 'make run' as root once (or: apt-get install$missing)" >&2
    elif [ -n "${1:-}" ]; then
        echo "install-deps: run 'sh deploy/install-deps.sh ${1}' as root once (or: apt-get install$missing)" >&2
    else
        echo "install-deps: run 'make deps' as root (or: apt-get install$missing)" >&2
    fi
    exit 1
fi
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# prometheus is wanted for promtool only: keep its service from starting
# where a service manager would start it (policy-rc.d exit 101 = "not now").
PRC=/usr/sbin/policy-rc.d
own_prc=
if [ ! -e $PRC ]; then printf '#!/bin/sh\nexit 101\n' >$PRC && chmod 755 $PRC && own_prc=1; fi
rc=0
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing || rc=$?
[ -n "$own_prc" ] && rm -f $PRC
exit $rc
