#!/usr/bin/env bash
# Browser test of the chat UI through the real stack:
#   daemon (fixture model) <- gateway <- nginx (serves web/, proxies /ui/ and /v1/) <- headless Chromium
# and the same with a second gateway that needs an API key (--api-key-file):
# the UI asks for it once on the 401, keeps it and chats.
#
#   tests/web/run.sh [BUILD]        (BUILD defaults to build)
#
# Needs node, nginx, /usr/bin/chromium, web/node_modules and
# tests/web/node_modules (`make deps` installs all of them: Debian packages,
# then npm ci) and the built binaries BUILD/bin/smollm3d and
# BUILD/bin/smollm3-gateway; a missing one is a failure ("FAIL: cannot run").
# Runs ui.test.mjs and features.test.mjs (WEB_TESTS="ui features" picks).
# Saves build/web-screenshot.png, build/web-screenshot-390.png (the phone
# width) and -390-menu.png (its sidebar open); override with SCREENSHOT=path.
# Prints "N passed, N failed"; exits 1 on failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
MODEL=${MODEL:-$ROOT/tests/fixtures/models/fixture-t.Q8_0.gguf}
SCREENSHOT=${SCREENSHOT:-$ROOT/build/web-screenshot.png}

skip() { echo "FAIL: cannot run: $*"; echo "0 passed, 1 failed"; exit 1; }
command -v node >/dev/null 2>&1 || skip "node not installed (make deps)"
[ -x "$ROOT/build/venv/bin/python3" ] && PATH=$ROOT/build/venv/bin:$PATH && export PATH
NGINX=$(command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; })
[ -n "$NGINX" ] || skip "nginx not installed"
[ -x "$CHROMIUM" ] || skip "$CHROMIUM missing (make deps: Debian's chromium)"
[ -x "$BUILD/bin/smollm3d" ] || skip "$BUILD/bin/smollm3d not built"
[ -x "$BUILD/bin/smollm3-gateway" ] || skip "$BUILD/bin/smollm3-gateway not built yet"
[ -f "$MODEL" ] || skip "model $MODEL missing"

# npm packages: `make deps` (tests/setup-env.sh) runs npm ci from the lock files
[ -d "$ROOT/web/node_modules/htmx.org" ] || skip "web/node_modules missing (make deps: npm ci in web/)"
[ -d "$ROOT/tests/web/node_modules/playwright-core" ] || skip "tests/web/node_modules missing (make deps: npm ci in tests/web/)"

TMP=$(mktemp -d /tmp/smollm3-webtest.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 20000))
}
dump_logs() {
    local f
    for f in "$TMP"/*.log; do [ -f "$f" ] && { echo "--- $(basename "$f") (tail)"; tail -n 20 "$f"; }; done
}
fail() { echo "setup failed: $*"; dump_logs; echo "0 passed, 1 failed"; exit 1; }

# 1. daemon
"$BUILD/bin/smollm3d" --threads 1 --model "$MODEL" --listen "ipc://$TMP/d.sock" >"$TMP/daemon.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [ -S "$TMP/d.sock" ] && break; kill -0 "${PIDS[0]}" 2>/dev/null || break; sleep 0.1; done
[ -S "$TMP/d.sock" ] || fail "daemon did not create $TMP/d.sock"

# 2. gateway on a loopback port
GW_PORT=$(free_port)
"$BUILD/bin/smollm3-gateway" --listen "127.0.0.1:$GW_PORT" --daemon "ipc://$TMP/d.sock" >"$TMP/gateway.log" 2>&1 &
PIDS+=($!)
ok=
for _ in $(seq 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW_PORT/health" 2>/dev/null)
    [ "$code" = 200 ] && { ok=1; break; }
    kill -0 "${PIDS[1]}" 2>/dev/null || break
    sleep 0.1
done
[ -n "$ok" ] || fail "gateway /health never returned 200"

# 2b. a second gateway with API keys (--api-key-file): the UI must ask for the key
API_KEY="sk-webtest-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
printf '# the browser test\n%s webtest\n' "$API_KEY" >"$TMP/api-keys"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TMP/tenant-secret"; chmod 0600 "$TMP/tenant-secret"
GW2_PORT=$(free_port)
"$BUILD/bin/smollm3-gateway" --listen "127.0.0.1:$GW2_PORT" --daemon "ipc://$TMP/d.sock" \
    --api-key-file "$TMP/api-keys" --tenant-secret-file "$TMP/tenant-secret" >"$TMP/gateway-keys.log" 2>&1 &
PIDS+=($!)
ok=
for _ in $(seq 300); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW2_PORT/health" 2>/dev/null)
    [ "$code" = 200 ] && { ok=1; break; }
    kill -0 "${PIDS[2]}" 2>/dev/null || break
    sleep 0.1
done
[ -n "$ok" ] || fail "gateway with --api-key-file: /health never returned 200"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$GW2_PORT/ui/config")
[ "$code" = 401 ] || fail "gateway with --api-key-file answers /ui/config without a key with $code, not 401"

# 3. nginx in the foreground: web/ as the root, /ui/ and /v1/ proxied unbuffered
# (NG_PORT: the open gateway; NG2_PORT: the one with API keys)
NG_PORT=$(free_port)
NG2_PORT=$(free_port)
mkdir -p "$TMP/nginx/logs" "$TMP/nginx/tmp"
# the installed site's Content-Security-Policy (deploy/nginx/smollm3.conf), so the UI is tested under it
CSP=$(grep -m1 'add_header Content-Security-Policy' "$ROOT/deploy/nginx/smollm3.conf" | sed 's/^[[:space:]]*//')
USER_LINE=
[ "$(id -u)" = 0 ] && USER_LINE="user $(id -un) $(id -gn);"
cat >"$TMP/nginx/nginx.conf" <<EOF
$USER_LINE
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx.log warn;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path $TMP/nginx/tmp/body;
    proxy_temp_path $TMP/nginx/tmp/proxy;
    fastcgi_temp_path $TMP/nginx/tmp/fastcgi;
    uwsgi_temp_path $TMP/nginx/tmp/uwsgi;
    scgi_temp_path $TMP/nginx/tmp/scgi;
    upstream gateway { server 127.0.0.1:$GW_PORT; keepalive 8; }
    upstream gateway_keys { server 127.0.0.1:$GW2_PORT; keepalive 8; }
    server {
        listen 127.0.0.1:$NG_PORT;
        $CSP
        root $ROOT/web;
        index index.html;
        client_max_body_size 1m;
        client_body_buffer_size 256k;
        location /node_modules/ { try_files \$uri =404; }
        location ~ ^/(ui|v1)/ {
            proxy_pass http://gateway;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }
        location = /health { proxy_pass http://gateway; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
    server {
        listen 127.0.0.1:$NG2_PORT;
        $CSP
        root $ROOT/web;
        index index.html;
        client_max_body_size 1m;
        client_body_buffer_size 256k;
        location /node_modules/ { try_files \$uri =404; }
        location ~ ^/(ui|v1)/ {
            proxy_pass http://gateway_keys;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }
        location = /health { proxy_pass http://gateway_keys; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
EOF
"$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx.log" >"$TMP/nginx-stdout.log" 2>&1 &
PIDS+=($!)
ok=
for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NG_PORT/" 2>/dev/null)
    [ "$code" = 200 ] && { ok=1; break; }
    kill -0 "${PIDS[3]}" 2>/dev/null || break
    sleep 0.1
done
[ -n "$ok" ] || fail "nginx did not serve web/index.html"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$NG_PORT/node_modules/htmx.org/dist/htmx.min.js")
[ "$code" = 200 ] || fail "nginx does not serve web/node_modules (got $code)"
curl -sI "http://127.0.0.1:$NG_PORT/" | grep -qi '^content-security-policy: default-src' ||
    fail "the test site does not send the installed site's Content-Security-Policy"

# 4. the browser tests: the basics (ui.test.mjs), then the features (features.test.mjs);
# WEB_TESTS names a subset (e.g. WEB_TESTS=features)
mkdir -p "$(dirname "$SCREENSHOT")"
rc=0 np=0 nf=0
for t in ${WEB_TESTS:-ui features}; do
    case $t in
    ui) CHROMIUM="$CHROMIUM" UI_KEY_URL="http://127.0.0.1:$NG2_PORT" UI_API_KEY="$API_KEY" \
            timeout 300 node "$ROOT/tests/web/ui.test.mjs" "http://127.0.0.1:$NG_PORT" "$SCREENSHOT" ;;
    *) CHROMIUM="$CHROMIUM" UI_KEY_URL="http://127.0.0.1:$NG2_PORT" UI_API_KEY="$API_KEY" \
            timeout 180 node "$ROOT/tests/web/$t.test.mjs" "http://127.0.0.1:$NG_PORT" "$(dirname "$SCREENSHOT")" ;;
    esac 2>&1 | tee "$TMP/$t.out"
    r=${PIPESTATUS[0]}
    [ $r -eq 124 ] && echo "0 passed, 1 failed ($t: browser test timed out)" | tee -a "$TMP/$t.out"
    [ $r -ne 0 ] && rc=1
    # this file's "N passed, N failed", added to the total printed last
    read -r p f < <(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' "$TMP/$t.out" | tail -n 1)
    np=$((np + ${p:-0})) nf=$((nf + ${f:-1}))
done
if [ $rc -ne 0 ]; then
    dump_logs
    echo "$np passed, $nf failed"
    exit 1
fi
echo "screenshots: $SCREENSHOT ${SCREENSHOT%.png}-390.png ${SCREENSHOT%.png}-390-menu.png"
echo "$np passed, $nf failed"
exit 0
