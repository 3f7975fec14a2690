#!/bin/sh
# setup-env.sh - the tests' own packages (`make deps`, after the Debian
# packages of deploy/install-deps.sh):
#
#   build/venv               python3 -m venv + pip install -r tests/requirements*.txt
#                            (tests/requirements.txt and one file per area, e.g. -api)
#                            (pinned; the system Python is never touched)
#   web/node_modules         npm ci (web/package-lock.json): the UI's assets
#   tests/web/node_modules   npm ci (tests/web/package-lock.json): playwright-core
#
# Each step is skipped when its stamp matches: the sha256 of the file it was
# installed from (plus the Python version for the venv), written after a
# successful install.  A second run only hashes three files.
# Environment: VENV (default build/venv), PYTHON (the base interpreter,
# default the first python3 in PATH outside the venv).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VENV=${VENV:-$ROOT/build/venv}
case $VENV in /*) ;; *) VENV=$ROOT/$VENV ;; esac
say() { echo "setup-env: $*"; }
die() { echo "setup-env: $*" >&2; exit 1; }
sha() { sha256sum "$@" | cut -d' ' -f1 | tr '\n' ' '; }

# ---- Python virtual environment
# the base interpreter: never the venv itself (it may be first in PATH)
if [ -z "${PYTHON:-}" ]; then
    P=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -x -F "$VENV/bin" | paste -sd: -)
    PYTHON=$(PATH=$P command -v python3) || die "python3 not found (make deps, as root)"
fi
REQS=$(ls tests/requirements*.txt)
want="$(sha $REQS)$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
stamp=$VENV/.smollm3-requirements
if [ -x "$VENV/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    : # up to date
else
    say "creating $VENV from" $REQS "($PYTHON)"
    mkdir -p "$(dirname "$VENV")"
    # a venv of another Python (or a broken one) is made anew
    if [ -x "$VENV/bin/python3" ] && ! "$VENV/bin/python3" -c 'import sys' >/dev/null 2>&1; then rm -rf "$VENV"; fi
    if [ ! -x "$VENV/bin/python3" ] || [ "$(awk '{print $NF}' "$stamp" 2>/dev/null)" != "$(echo "$want" | awk '{print $NF}')" ]; then
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
    fi
    log=$VENV/pip.log
    "$VENV/bin/python3" -m pip install --disable-pip-version-check --no-input -q \
        $(for r in $REQS; do printf -- "-r %s " "$r"; done) >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "pip install failed (log $log)"; }
    "$VENV/bin/python3" -c 'import zmq, google.protobuf, openai, prometheus_client' ||
        die "the venv lacks a package of tests/requirements.txt"
    printf '%s\n' "$want" >"$stamp"
    say "venv ready: $("$VENV/bin/python3" -m pip freeze --disable-pip-version-check | wc -l) packages"
fi

# ---- npm packages (exact versions from the lock files)
command -v npm >/dev/null 2>&1 || die "npm not found (make deps, as root)"
for d in web tests/web; do
    want=$(sha "$d/package-lock.json")
    stamp=$d/node_modules/.smollm3-lock
    if [ -d "$d/node_modules" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then continue; fi
    say "npm ci in $d/"
    (cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci failed in $d/"
    printf '%s\n' "$want" >"$stamp"
done
exit 0
