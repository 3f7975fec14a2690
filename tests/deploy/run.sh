#!/bin/sh
# tests/deploy/run.sh BUILD - deployment tests (part of `make test`):
#
#   install    `make install DESTDIR=tmp` lays out the expected tree (PREFIX
#              /usr/local and /usr), paths in units/site follow PREFIX, an
#              existing /etc/smollm3d/smollm3d.conf is kept
#              and prints what it installed and the next commands; it builds
#              the programs only (no tests, no benchmarks: make -n); every group
#              the units name is one sysusers.d creates (on an empty root too)
#   verify     `systemd-analyze verify` on both installed units (--root at the
#              DESTDIR tree): exit 0 and nothing on stderr; a broken copy must
#              produce stderr (the check is live)
#   security   `systemd-analyze security --offline=yes`: exposure <= 3.0 each
#   fleet node tests/deploy/scaleout_units.sh: the scale-out drop-in grants
#              ReadWritePaths= to the node config's kv_spill_dir (verify with
#              it), nginx-real-ip.conf trusts X-Forwarded-For from a listed
#              balancer only
#   debian     `make install` into a stock Debian nginx layout (sites-enabled/default): the
#              default disabled with a message, http://localhost/ then smollm3's UI (a
#              self-check first: beside the default it is not); a customised default kept
#              with a warning; installed npm packages without src/, .ts, .map; the CUDA
#              plugin only with INSTALL_CUDA (a GPU, or CUDA=1); the URL printed
#   nginx      `nginx -t` clean (no warnings) on the site and on scale-out.conf
#   ratelimit  the installed site in front of a stub gateway: a burst beyond
#              its limit_req gets 429 in OpenAI's shape, per key, per address
#              without one, a per-address ceiling (tests/deploy/ratelimit.py)
#   affinity   scale-out.conf in front of two stub HTTP nodes: one session key
#              (header, ?session=, cookie) -> one node; many keys -> both nodes;
#              /ui/ without a key sticks per client; /v1/ without one spreads
#   two-nodes  two smollm3d (fixture-t.Q8_0, --threads 1) + two gateways on
#              loopback ports behind scale-out.conf: every request of a session
#              lands on one node (nginx log + the daemons' session lists via
#              smollm3ctl), sessions spread over both; the UI's POST + stream
#              GET meet on one node (cookie, or client address); a node
#              stopped -> its sessions are served by the other [needs gateway]
#   run-plan   what `make run` would do from nothing (make -n): the programs on
#              every core, never the tests' venv or tests/web's npm packages;
#              without a usable GPU no nvcc and a line saying how (CUDA=1), with
#              CUDA=1 (and nvcc) the plugin; each stage announced
#   targets    every make target a README names, planned (make -n) in a fresh BUILD: each
#              installs what it needs (install-deps.sh MODE, make deps) before building; bench
#              builds the programs and benchmarks, no Check suite; make without Check
#              (HAVE_CHECK=) builds all but the Check suites and says so
#   make-run   `make run MODEL=fixture PORT=free` in the background: /health 200
#              through nginx, the UI page, one chat completion, one streamed
#              (SSE, data: [DONE]); SIGTERM to deploy/run.sh -> all
#              three processes gone, exit status 0; sessions on disk (kv_spill_dir
#              under RUN_DIR, said); started again with SIGINT not ignored, the
#              session continues from disk (cached tokens) and kill -INT of
#              make's pid stops all three                       [needs gateway]
#
# Prints "N passed, N failed" and exits 1 on any failure; a part whose
# prerequisites are missing is a failure ("FAIL - cannot run: reason"; `make
# deps` installs them all).
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
[ -x build/venv/bin/python3 ] && PATH=$ROOT/build/venv/bin:$PATH && export PATH
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
FIXTURE=$ROOT/tests/fixtures/models/fixture-t.Q8_0.gguf
GATEWAY=$BUILD/bin/smollm3-gateway
TMP=$(mktemp -d /tmp/smollm3-deploy.XXXXXX)
PASS=0 FAIL=0 PIDS=

ok()   { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad()  { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
skip() { FAIL=$((FAIL + 1)); echo "FAIL - cannot run: $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }   # check 'shell test' 'name'

cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" 2>/dev/null; }
wait_http_200() {   # wait_http_200 URL SECONDS
    n=0
    while [ $n -lt $(($2 * 5)) ]; do
        [ "$(http_code "$1")" = 200 ] && return 0
        sleep 0.2; n=$((n + 1))
    done
    return 1
}
# A minimal nginx main config around an http{}-context file, in prefix $1.
nginx_main() {   # nginx_main DIR INCLUDE_FILE
    mkdir -p "$1/logs" "$1/tmp"
    cat > "$1/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log;
events { worker_connections 256; }
http {
    include /etc/nginx/mime.types;
    access_log $1/logs/access.log;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
    include $2;
}
EOF
}
# scale-out.conf with a node list, a log file and a loopback port.
lb_conf() {   # lb_conf OUT NODES_FILE LOG PORT
    sed -e "s|/etc/nginx/smollm3-nodes.conf|$2|" -e "s|/var/log/nginx/smollm3-lb.access.log|$3|" \
        -e "s|^\( *\)listen 80;|\1listen 127.0.0.1:$4;|" -e '/listen \[::\]:80;/d' \
        deploy/nginx/scale-out.conf > "$1"
}

have_gateway=0
if [ -x "$GATEWAY" ]; then have_gateway=1; fi

# ---------------------------------------------------------------- install
echo "# make install DESTDIR"
D=$TMP/dest
if make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D" > "$TMP/install.log" 2>&1; then
    ok "make install DESTDIR=... (PREFIX=/usr/local)"
else
    bad "make install DESTDIR=... (PREFIX=/usr/local)"; sed 's/^/    /' "$TMP/install.log"
fi
missing=
for f in usr/local/bin/smollm3 usr/local/bin/smollm3d usr/local/bin/smollm3ctl \
         usr/local/lib/systemd/system/smollm3d.service usr/local/lib/systemd/system/smollm3-gateway.service \
         usr/local/lib/sysusers.d/smollm3d.conf usr/local/lib/tmpfiles.d/smollm3d.conf \
         etc/smollm3d/smollm3d.conf etc/smollm3d/gateway.conf etc/nginx/sites-available/smollm3 \
         usr/local/share/smollm3d/web/index.html usr/local/share/doc/smollm3d/README.md \
         usr/local/share/doc/smollm3d/scale-out.conf usr/local/share/doc/smollm3d/deploy/scale-out/nodes.conf \
         usr/local/share/doc/smollm3d/deploy/grafana/smollm3-fleet.json; do
    [ -f "$D/$f" ] || missing="$missing $f"
done
[ "$have_gateway" = 1 ] && { [ -x "$D/usr/local/bin/smollm3-gateway" ] || missing="$missing usr/local/bin/smollm3-gateway"; }
check '[ -z "$missing" ]' "installed tree complete${missing:+ (missing:$missing)}"
check 'grep -q "^install: installed under $D:" "$TMP/install.log" &&
       grep -q "^  /usr/local/bin/ .*smollm3d" "$TMP/install.log" &&
       grep -q "^  systemctl daemon-reload$" "$TMP/install.log" &&
       grep -q "^  systemctl enable --now smollm3d smollm3-gateway$" "$TMP/install.log" &&
       grep -q "ln -s ../sites-available/smollm3 /etc/nginx/sites-enabled/smollm3 && nginx -t" "$TMP/install.log"' \
      "make install prints what it installed and the next commands (daemon-reload, enable --now, the nginx site)"
# what make install would build from nothing: the programs, no tests, no benchmarks
make -n --no-print-directory install BUILD="$TMP/nobuild" DESTDIR="$TMP/nodest" CUDA=0 > "$TMP/install-n.log" 2>&1
check 'grep -q "$TMP/nobuild/bin/smollm3d" "$TMP/install-n.log" && grep -q "$TMP/nobuild/bin/smollm3-gateway" "$TMP/install-n.log" &&
       ! grep -q "$TMP/nobuild/tests/\|$TMP/nobuild/bench/\|gateway-fault" "$TMP/install-n.log"' \
      "make install builds the programs it installs and no tests or benchmarks"
# every group the units run as is one sysusers.d makes (User=/Group=/SupplementaryGroups=; a
# `u NAME` line makes group NAME too), and systemd-sysusers makes them on an empty root
SU=$D/usr/local/lib/sysusers.d/smollm3d.conf
groups=$(sed -n 's/^\(User\|Group\|SupplementaryGroups\)=//p' "$D"/usr/local/lib/systemd/system/smollm3d.service \
         "$D"/usr/local/lib/systemd/system/smollm3-gateway.service | tr ' ' '\n' | sort -u)
undeclared=
for g in $groups; do
    awk -v g="$g" '($1 == "u" || $1 == "g") && $2 == g { f = 1 } END { exit !f }' "$SU" || undeclared="$undeclared $g"
done
check '[ -n "$groups" ] && [ -z "$undeclared" ]' "the units' users and groups ($(echo $groups)) are all made by sysusers.d${undeclared:+ (not:$undeclared)}"
if command -v systemd-sysusers > /dev/null 2>&1; then
    mkdir -p "$TMP/sysroot/etc"
    systemd-sysusers --root="$TMP/sysroot" "$SU" > /dev/null 2>&1
    made=
    for g in $groups; do grep -q "^$g:" "$TMP/sysroot/etc/group" || made="$made $g"; done
    check '[ -z "$made" ]' "systemd-sysusers on an empty root makes every group the units use${made:+ (missing:$made)}"
else
    skip "systemd-sysusers not found (make deps: systemd)"
fi
if [ -d web/node_modules/htmx.org ]; then
    check '[ -f "$D/usr/local/share/smollm3d/web/node_modules/htmx.org/package.json" ] &&
           [ ! -e "$D/usr/local/share/smollm3d/web/node_modules/@types" ] &&
           [ ! -e "$D/usr/local/share/smollm3d/web/package.json" ]' \
          "web: runtime npm packages installed, dev packages and package.json not"
else
    skip "web/node_modules absent (make deps: npm ci in web/): npm assets not checked"
fi
check 'grep -q "^ExecStart=/usr/local/bin/smollm3d --config /etc/smollm3d/smollm3d.conf" "$D/usr/local/lib/systemd/system/smollm3d.service" &&
       grep -q "root /usr/local/share/smollm3d/web;" "$D/etc/nginx/sites-available/smollm3" &&
       grep -q "^model = /var/lib/smollm3d/models/" "$D/etc/smollm3d/smollm3d.conf" &&
       grep -q "^kv_spill_dir = /var/lib/smollm3d/kv$" "$D/etc/smollm3d/smollm3d.conf"' \
      "units, site and config carry the PREFIX paths, a model path and the spill directory"
grep -v '^#\{0,1\}\(model\|kv_spill_dir\) =' deploy/smollm3d.conf > "$TMP/conf.want"
grep -v '^#\{0,1\}\(model\|kv_spill_dir\) =' "$D/etc/smollm3d/smollm3d.conf" > "$TMP/conf.got" 2>/dev/null
check 'cmp -s "$TMP/conf.want" "$TMP/conf.got"' "installed config = deploy/smollm3d.conf but for the model and kv_spill_dir lines"
check 'grep -q "^ExecStart=/usr/local/bin/smollm3-gateway --config /etc/smollm3d/gateway.conf " "$D/usr/local/lib/systemd/system/smollm3-gateway.service" &&
       cmp -s deploy/smollm3-gateway.conf "$D/etc/smollm3d/gateway.conf"' \
      "the gateway unit reads /etc/smollm3d/gateway.conf (installed as shipped)"
if [ "$have_gateway" = 1 ]; then
    # the shipped file parses (--help exits 0 after reading it); with its
    # api_key_file line turned on, the gateway asks for the key
    check '"$GATEWAY" --config "$D/etc/smollm3d/gateway.conf" --help > /dev/null 2>&1' "the shipped gateway.conf parses"
    printf 'sk-deploy-test deploytest\n' > "$TMP/api-keys"; chmod 0600 "$TMP/api-keys"
    sed -e "s|^#api_key_file = .*|api_key_file = $TMP/api-keys|" \
        -e "s|^tenant_secret_file = .*|tenant_secret_file = $D/etc/smollm3d/tenant-secret|" \
        "$D/etc/smollm3d/gateway.conf" > "$TMP/gateway.conf"
    GP=$(free_port)
    "$GATEWAY" --config "$TMP/gateway.conf" --listen "127.0.0.1:$GP" --daemon "ipc://$TMP/no-daemon.sock" \
        > "$TMP/gw-conf.log" 2>&1 & GPID=$!; PIDS="$PIDS $GPID"
    n=0; while [ "$(http_code "http://127.0.0.1:$GP/v1/models")" = 000 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    c1=$(http_code "http://127.0.0.1:$GP/v1/models"); c2=$(http_code -H 'Authorization: Bearer sk-deploy-test' "http://127.0.0.1:$GP/v1/models")
    check '[ "$c1" = 401 ] && [ "$c2" = 200 ]' "gateway.conf api_key_file on: /v1/models $c1 without the key, $c2 with it"
    kill -TERM $GPID 2>/dev/null
fi
sec1=$(cat "$D/etc/smollm3d/tenant-secret" 2>/dev/null)
check 'echo "$sec1" | grep -qE "^[0-9a-f]{64}\$" && [ "$(stat -c %a "$D/etc/smollm3d/tenant-secret")" = 600 ] &&
       grep -q "^tenant_secret_file = /etc/smollm3d/tenant-secret\$" "$D/etc/smollm3d/gateway.conf" &&
       grep -q "the tenant secret (made now, 0600)" "$TMP/install.log"' \
      "make install made the tenant secret (64 hex digits, 0600) that gateway.conf names"
echo "# local edit" >> "$D/etc/smollm3d/smollm3d.conf"
echo "# local edit" >> "$D/etc/smollm3d/gateway.conf"
make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D" > "$TMP/install2.log" 2>&1
check 'tail -n1 "$D/etc/smollm3d/smollm3d.conf" | grep -q "local edit" && [ -f "$D/etc/smollm3d/smollm3d.conf.dist" ] &&
       tail -n1 "$D/etc/smollm3d/gateway.conf" | grep -q "local edit" && [ -f "$D/etc/smollm3d/gateway.conf.dist" ]' \
      "reinstall keeps an existing smollm3d.conf and gateway.conf (new ones as .dist)"
check '[ "$(cat "$D/etc/smollm3d/tenant-secret")" = "$sec1" ] && grep -q "the tenant secret (kept, 0600)" "$TMP/install2.log"' \
      "reinstall keeps the tenant secret (a new one would change every tenant id)"
D2=$TMP/dest-usr
make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D2" PREFIX=/usr > "$TMP/install3.log" 2>&1
check 'grep -q "^ExecStart=/usr/bin/smollm3d " "$D2/usr/lib/systemd/system/smollm3d.service" &&
       [ -x "$D2/usr/bin/smollm3d" ] && grep -q "root /usr/share/smollm3d/web;" "$D2/etc/nginx/sites-available/smollm3"' \
      "PREFIX=/usr: binaries, units and site follow"

# ---------------------------------------------------------------- stock Debian nginx
# make install into a root laid out as Debian's nginx package leaves it: sites-enabled/default
# a link to the stock default site (`listen 80 default_server`, the "Welcome to nginx!" page).
# Before the install our site beside it is never reached (the self-check); after it, with our
# site enabled as install prints, http://localhost/ is smollm3's UI and the default is kept
# in sites-available.  Then the web assets (what the browser loads only), the CUDA plugin
# (only where built for a GPU: INSTALL_CUDA) and the URL printed.
echo "# make install on a stock Debian nginx layout"
DEB_DEFAULT=/etc/nginx/sites-available/default
if ! command -v nginx > /dev/null 2>&1 || [ ! -f "$DEB_DEFAULT" ] || [ ! -f /etc/nginx/mime.types ]; then
    skip "Debian's nginx package (nginx, $DEB_DEFAULT) not installed (make deps): stock layout not tested"
else
    DD=$TMP/dest-debian
    mkdir -p "$DD/etc/nginx/sites-available" "$DD/etc/nginx/sites-enabled" "$DD/etc/nginx/conf.d"
    cp "$DEB_DEFAULT" "$DD/etc/nginx/sites-available/default"
    ln -s ../sites-available/default "$DD/etc/nginx/sites-enabled/default"
    # Debian's main config, its paths moved under DD and TMP; each enabled site on a loopback port,
    # the installed web root under DD
    deb_nginx() {   # deb_nginx DIR PORT: nginx.conf in DIR over DD's sites-enabled, started; its pid in NGXPID
        mkdir -p "$1/logs" "$1/tmp" "$1/sites"
        for f in "$DD"/etc/nginx/sites-enabled/*; do
            [ -e "$f" ] || continue
            sed -e "s/^\([[:space:]]*\)listen \(127\.0\.0\.1:\)\{0,1\}80\( default_server\)\{0,1\};/\1listen 127.0.0.1:$2\3;/" \
                -e '/listen \[::\]:80/d' -e "s|root /usr/local/share/smollm3d/web;|root $DD/usr/local/share/smollm3d/web;|" \
                "$f" > "$1/sites/$(basename "$f")"
        done
        cat > "$1/nginx.conf" <<NGX
$([ "$(id -u)" = 0 ] && echo "user root root;")
worker_processes 1;
daemon off;
pid $1/nginx.pid;
error_log $1/logs/error.log;
events { worker_connections 64; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log $1/logs/access.log;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
    include $DD/etc/nginx/conf.d/*.conf;
    include $1/sites/*;
}
NGX
        nginx -p "$1" -c "$1/nginx.conf" -e "$1/logs/error.log" > "$1/logs/stderr" 2>&1 & NGXPID=$!; PIDS="$PIDS $NGXPID"
        n=0; while [ "$(http_code "http://127.0.0.1:$2/")" = 000 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    }
    # self-check: the stock default beside our site (as shipped) takes http://localhost/
    sed "s|/usr/share/smollm3d/web|$ROOT/web|g" deploy/nginx/smollm3.conf > "$DD/etc/nginx/sites-enabled/smollm3"
    P=$(free_port)
    deb_nginx "$TMP/ngx-deb0" "$P"
    curl -s -m 5 -H 'Host: localhost' "http://127.0.0.1:$P/" > "$TMP/deb0.html" 2>/dev/null
    kill -TERM "$NGXPID" 2>/dev/null; wait "$NGXPID" 2>/dev/null
    rm -f "$DD/etc/nginx/sites-enabled/smollm3"
    check 'grep -q "Welcome to nginx" "$TMP/deb0.html"' \
          "self-check: with Debian's default site enabled, http://localhost/ is its page, not smollm3's"
    make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$DD" CUDA=0 > "$TMP/install-deb.log" 2>&1
    check '[ ! -e "$DD/etc/nginx/sites-enabled/default" ] && [ -f "$DD/etc/nginx/sites-available/default" ] &&
           grep -q "^install: disabled Debian.s default nginx site" "$TMP/install-deb.log"' \
          "make install disables Debian's default site (the link; sites-available/default kept) and says so"
    ln -s ../sites-available/smollm3 "$DD/etc/nginx/sites-enabled/smollm3"   # as install prints
    P=$(free_port)
    deb_nginx "$TMP/ngx-deb1" "$P"
    curl -s -m 5 -H 'Host: localhost' "http://127.0.0.1:$P/" > "$TMP/deb1.html" 2>/dev/null
    code=$(http_code -H 'Host: localhost' "http://127.0.0.1:$P/node_modules/dompurify/dist/purify.min.js")
    kill -TERM "$NGXPID" 2>/dev/null; wait "$NGXPID" 2>/dev/null
    check 'cmp -s "$TMP/deb1.html" web/index.html' \
          "after make install on stock Debian: http://localhost/ is smollm3's UI (index.html)"
    [ -d web/node_modules/dompurify ] &&
        check '[ "$code" = 200 ]' "the UI's assets are served from the installed tree (purify.min.js: HTTP $code)"
    check 'grep -q "^install: the service, once started: http://localhost/" "$TMP/install-deb.log"' "make install prints the URL"
    # a customised default site (it proxies) is left alone, with a warning
    DC=$TMP/dest-custom
    mkdir -p "$DC/etc/nginx/sites-available" "$DC/etc/nginx/sites-enabled"
    printf 'server {\n    listen 80 default_server;\n    root /var/www/html;\n    location /app/ { proxy_pass http://127.0.0.1:9; }\n}\n' \
        > "$DC/etc/nginx/sites-available/default"
    ln -s ../sites-available/default "$DC/etc/nginx/sites-enabled/default"
    make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$DC" CUDA=0 > "$TMP/install-custom.log" 2>&1
    check '[ -L "$DC/etc/nginx/sites-enabled/default" ] && grep -q "WARNING: .*sites-enabled/default is enabled" "$TMP/install-custom.log"' \
          "a default site that is not Debian's stock page is kept, with a warning and the way out"
fi
# the UI's npm packages: what the browser loads, no sources, type declarations or source maps
if [ -d web/node_modules/dompurify ]; then
    W=$D/usr/local/share/smollm3d/web/node_modules
    extra=$(cd "$W" 2>/dev/null && find . \( -name '*.map' -o -name '*.ts' -o -name '*.mts' -o -path '*/src/*' \) -print | head -n 5 | tr '\n' ' ')
    check '[ -f "$W/dompurify/dist/purify.min.js" ] && [ -f "$W/marked/lib/marked.umd.js" ] && [ -z "$extra" ]' \
          "web: the installed npm packages hold what the UI loads, no src/, .ts or .map${extra:+ (found: $extra)}"
fi
# the CUDA plugin: installed only where make install was told it is for a GPU (INSTALL_CUDA)
FB=$TMP/fakebuild
mkdir -p "$FB/bin" "$FB/lib"
for p in smollm3 smollm3d smollm3ctl smollm3-gateway; do [ -x "$BUILD/bin/$p" ] && ln -s "$BUILD/bin/$p" "$FB/bin/$p"; done
[ -e "$FB/bin/smollm3" ] || printf '#!/bin/sh\n' > "$FB/bin/smollm3" && chmod +x "$FB/bin/smollm3"
printf 'not a real plugin\n' > "$FB/lib/libsmollm3_cuda.so"
INSTALL_CUDA= sh deploy/install.sh "$FB" "$TMP/dest-nogpu" /usr/local > "$TMP/install-nogpu.log" 2>&1
INSTALL_CUDA=1 sh deploy/install.sh "$FB" "$TMP/dest-gpu" /usr/local > "$TMP/install-gpu.log" 2>&1
check '[ ! -e "$TMP/dest-nogpu/usr/local/lib/libsmollm3_cuda.so" ] && grep -q "CUDA plugin .* not installed: no usable GPU" "$TMP/install-nogpu.log" &&
       [ -f "$TMP/dest-gpu/usr/local/lib/libsmollm3_cuda.so" ]' \
      "a built CUDA plugin is installed only for a GPU (INSTALL_CUDA), else install says why not"
make -n --no-print-directory install BUILD="$TMP/nobuild" DESTDIR="$TMP/nodest" CUDA=0 > "$TMP/inst-c0.log" 2>&1
make -n --no-print-directory install BUILD="$TMP/nobuild" DESTDIR="$TMP/nodest" CUDA=1 > "$TMP/inst-c1.log" 2>&1
check 'grep -q "^INSTALL_CUDA= sh deploy/install.sh" "$TMP/inst-c0.log" && grep -q "^INSTALL_CUDA=1 sh deploy/install.sh" "$TMP/inst-c1.log"' \
      "make install tells install.sh: CUDA=0 no plugin, CUDA=1 the plugin"

# ---------------------------------------------------------------- systemd
echo "# systemd units"
if ! command -v systemd-analyze >/dev/null 2>&1; then
    skip "systemd-analyze not installed: unit verify/security not run"
elif [ ! -f "$D/usr/local/lib/systemd/system/smollm3d.service" ]; then
    bad "no installed units to verify"
else
    # The DESTDIR tree as a root: the host's unit files (sysinit.target & co.)
    # and /bin/kill (ExecReload) are needed; binaries are the installed ones.
    mkdir -p "$D/usr/lib/systemd" "$D/usr/bin"
    cp -a /lib/systemd/system "$D/usr/lib/systemd/" 2>/dev/null || cp -a /usr/lib/systemd/system "$D/usr/lib/systemd/"
    ln -sfn usr/bin "$D/bin"; ln -sfn usr/lib "$D/lib"
    for k in /usr/bin/kill /bin/kill; do [ -x "$k" ] && { cp "$k" "$D/usr/bin/kill"; break; }; done
    if [ ! -x "$D/usr/local/bin/smollm3-gateway" ]; then
        printf '#!/bin/sh\nexit 0\n' > "$D/usr/local/bin/smollm3-gateway"; chmod 0755 "$D/usr/local/bin/smollm3-gateway"
        echo "  (smollm3-gateway not built: a stub stands in for its ExecStart)"
    fi
    U=/usr/local/lib/systemd/system
    systemd-analyze verify --root="$D" "$U/smollm3d.service" "$U/smollm3-gateway.service" > "$TMP/verify.out" 2> "$TMP/verify.err"
    rc=$?
    check '[ $rc = 0 ] && [ ! -s "$TMP/verify.err" ]' "systemd-analyze verify: exit $rc, no stderr"
    [ -s "$TMP/verify.err" ] && sed 's/^/    /' "$TMP/verify.err"
    sed -e 's/^WatchdogSec=30/WatchdogSec=30\nNoSuchKey=1/' "$D$U/smollm3d.service" > "$D$U/smollm3d-broken.service"
    systemd-analyze verify --root="$D" "$U/smollm3d-broken.service" > /dev/null 2> "$TMP/verify-bad.err"
    check '[ -s "$TMP/verify-bad.err" ]' "systemd-analyze verify reports an unknown key in a broken copy (control)"
    rm -f "$D$U/smollm3d-broken.service"
    for u in smollm3d smollm3-gateway; do
        systemd-analyze security --offline=yes --root="$D" "$U/$u.service" > "$TMP/sec.out" 2>&1
        line=$(grep 'Overall exposure level' "$TMP/sec.out")
        score=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) .*/\1/p')
        echo "  $line"
        grep '✗' "$TMP/sec.out" | sed 's/  */ /g; s/^/    /'
        check '[ -n "$score" ] && awk "BEGIN{exit !($score <= 3.0)}"' "$u.service exposure ${score:-?} <= 3.0"
    done
fi

# ---------------------------------------------------------------- hardened build and unit limits
# Each installed program: PIE, full RELRO (GNU_RELRO + BIND_NOW), the stack protector
# (__stack_chk_fail) and FORTIFY (__*_chk) imported (Makefile HARDEN_CFLAGS/HARDEN_LDFLAGS).
echo "# hardened build (readelf)"
if ! command -v readelf >/dev/null 2>&1; then
    skip "readelf not installed (binutils): hardening not checked"
else
    for p in smollm3d smollm3-gateway smollm3ctl smollm3; do
        f=$D/usr/local/bin/$p
        if [ ! -f "$f" ] || ! head -c 4 "$f" | grep -q ELF; then bad "$p: no installed ELF program"; continue; fi
        h=$(readelf -hW "$f" | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p')
        relro=$(readelf -lW "$f" | grep -c GNU_RELRO)
        now=$(readelf -dW "$f" | grep -cE '\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW')
        pie=$(readelf -dW "$f" | grep -c '(FLAGS_1).*PIE')
        ssp=$(readelf -sW --dyn-syms "$f" | grep -c ' __stack_chk_fail')
        chk=$(readelf -sW --dyn-syms "$f" | grep -oE ' __[a-z0-9_]+_chk(@|$)' | sort -u | wc -l)
        check '[ "$h" = DYN ] && [ "$pie" -ge 1 ] && [ "$relro" -ge 1 ] && [ "$now" -ge 1 ] && [ "$ssp" -ge 1 ] && [ "$chk" -ge 1 ]' \
              "$p: PIE ($h, FLAGS_1 PIE $pie), RELRO $relro, BIND_NOW $now, __stack_chk_fail $ssp, $chk FORTIFY __*_chk"
    done
fi
UD=$D/usr/local/lib/systemd/system
check 'grep -q "^MemoryMax=32G$" "$UD/smollm3d.service" && grep -q "^TasksMax=4096$" "$UD/smollm3d.service" &&
       grep -q "^LimitNOFILE=16384$" "$UD/smollm3d.service" && grep -q "^MemoryMax=2G$" "$UD/smollm3-gateway.service" &&
       grep -q "^TasksMax=64$" "$UD/smollm3-gateway.service" && grep -q "^LimitNOFILE=65536$" "$UD/smollm3-gateway.service"' \
      "units: MemoryMax=, TasksMax=, LimitNOFILE= (smollm3d 32G/4096/16384, gateway 2G/64/65536)"
check 'grep -q "^ExecReload=/bin/kill -HUP \$MAINPID$" "$UD/smollm3-gateway.service"' \
      "systemctl reload smollm3-gateway sends SIGHUP (the key file read again)"
# the daemon's socket is its trust boundary: group smollm3d, 0660 (socket_mode), directory 0750
check 'grep -q "^Group=smollm3d$" "$UD/smollm3d.service" && grep -q "^UMask=0007$" "$UD/smollm3d.service" &&
       grep -q "^RuntimeDirectoryMode=0750$" "$UD/smollm3d.service" && grep -q "^SupplementaryGroups=smollm3d$" "$UD/smollm3-gateway.service" &&
       "$D/usr/local/bin/smollm3d" --help 2>&1 | grep -q "socket.mode.*0660"' \
      "the daemon socket: group smollm3d, mode 0660, directory 0750; the gateway joins the group"

# ---------------------------------------------------------------- a fleet node
echo "# a fleet node: the spill directory's drop-in, nginx behind a balancer"
if sh tests/deploy/scaleout_units.sh "$D" > "$TMP/units.out" 2>&1; then
    ok "tests/deploy/scaleout_units.sh: $(tail -1 "$TMP/units.out")"
else
    bad "tests/deploy/scaleout_units.sh: $(tail -1 "$TMP/units.out")"
fi
sed 's/^/    /' "$TMP/units.out"

# ---------------------------------------------------------------- nginx -t
echo "# nginx"
if ! command -v nginx >/dev/null 2>&1; then
    skip "nginx not installed: nginx tests not run"
    have_nginx=0
else
    have_nginx=1
    N=$TMP/ngx-site
    nginx_main "$N" "$D/etc/nginx/sites-available/smollm3"
    nginx -t -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" > "$TMP/ngt.out" 2>&1
    rc=$?
    check '[ $rc = 0 ] && [ "$(grep -cv "syntax is ok\|test is successful" "$TMP/ngt.out")" = 0 ]' \
          "nginx -t on the installed site: clean (exit $rc)"
    [ $rc = 0 ] || sed 's/^/    /' "$TMP/ngt.out"
    N=$TMP/ngx-lb
    mkdir -p "$N"
    lb_conf "$N/lb.conf" "$ROOT/deploy/nginx/smollm3-nodes.conf.example" "$N/logs/lb.log" 80
    nginx_main "$N" "$N/lb.conf"
    nginx -t -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" > "$TMP/ngt.out" 2>&1
    rc=$?
    check '[ $rc = 0 ] && [ "$(grep -cv "syntax is ok\|test is successful" "$TMP/ngt.out")" = 0 ]' \
          "nginx -t on scale-out.conf (+ smollm3-nodes.conf.example): clean (exit $rc)"
    [ $rc = 0 ] || sed 's/^/    /' "$TMP/ngt.out"
fi

# ---------------------------------------------------------------- safe defaults of the site
# As shipped the site listens on loopback only, and /metrics and /health answer only the
# $smollm3_monitor allow list: with 127.0.0.1 taken off the list, they are 403 while the API
# still reaches the (here absent: 502) gateway.
echo "# the site's safe defaults"
SITE=$D/etc/nginx/sites-available/smollm3
lst=$(grep -E '^[[:space:]]*listen ' "$SITE" | sed 's/^ *//')
check '[ -n "$lst" ] && ! echo "$lst" | grep -vqE "^listen (127\.0\.0\.1|\[::1\]):80[ ;]"' \
      "the site listens on loopback only as shipped: $(echo $lst)"
if [ "$have_nginx" = 1 ]; then
    N=$TMP/ngx-mon
    MP=$(free_port)
    sed -e "s|^\( *\)listen \(127\.0\.0\.1:\)\{0,1\}80\([ ;]\)|\1listen 127.0.0.1:$MP\3|" -e '/^ *listen \[::1\{0,1\}\]:80[ ;]/d' \
        -e 's|^\( *127\.0\.0\.1 *\) 1;|\1 0;|' -e "s|unix:/run/smollm3-gateway/gateway.sock|unix:$N/none.sock|" \
        "$SITE" > "$TMP/mon-site.conf"
    nginx_main "$N" "$TMP/mon-site.conf"
    nginx -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" & NGM=$!; PIDS="$PIDS $NGM"
    n=0; while [ "$(http_code "http://127.0.0.1:$MP/v1/models")" = 000 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    cm=$(http_code "http://127.0.0.1:$MP/metrics"); ch=$(http_code "http://127.0.0.1:$MP/health")
    cv=$(http_code "http://127.0.0.1:$MP/v1/models")
    check '[ "$cm" = 403 ] && [ "$ch" = 403 ] && [ "$cv" = 502 ]' \
          "a client off the monitoring allow list: /metrics $cm, /health $ch (403), /v1/models $cv (proxied: 502)"
    kill -TERM $NGM 2>/dev/null
fi

# ---------------------------------------------------------------- rate limits
echo "# rate limits of the shipped site (stub gateway)"
if [ "$have_nginx" = 0 ] || ! command -v python3 >/dev/null 2>&1; then
    skip "nginx or python3 missing: rate-limit test not run"
elif [ ! -f "$D/etc/nginx/sites-available/smollm3" ]; then
    bad "no installed site to rate-limit"
else
    python3 tests/deploy/ratelimit.py "$D/etc/nginx/sites-available/smollm3" > "$TMP/ratelimit.out" 2>&1
    sed 's/^/  /' "$TMP/ratelimit.out"
    PASS=$((PASS + $(grep -c '^ok   - ' "$TMP/ratelimit.out")))
    FAIL=$((FAIL + $(grep -c '^FAIL - ' "$TMP/ratelimit.out")))
    grep -q '^ok   - ' "$TMP/ratelimit.out" || bad "tests/deploy/ratelimit.py ran no check"
fi

# ---------------------------------------------------------------- affinity (stub nodes)
# Send requests through the balancer, print the node of each (from the log).
lb_nodes() {   # lb_nodes LOG -> node of each logged request, in order
    sed -n 's/.* node=\([^ ]*\) .*/\1/p' "$1"
}
echo "# session affinity, stub nodes"
if [ "$have_nginx" = 0 ] || ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    skip "nginx, python3 or curl missing: affinity test not run"
else
    N=$TMP/lb-stub
    mkdir -p "$N"
    SP1=$(free_port); SP2=$(free_port)
    for p in $SP1 $SP2; do
        python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self):
        n = int(self.headers.get("Content-Length") or 0); self.rfile.read(n)
        b = b"node %d\n" % self.server.server_port
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    do_GET = do_POST = reply
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$p" &
        PIDS="$PIDS $!"
    done
    printf 'server 127.0.0.1:%s;\nserver 127.0.0.1:%s;\n' "$SP1" "$SP2" > "$N/nodes.conf"
    LP=$(free_port)
    lb_conf "$N/lb.conf" "$N/nodes.conf" "$N/lb.log" "$LP"
    nginx_main "$N" "$N/lb.conf"
    LB=http://127.0.0.1:$LP
    # The nodes first: nginx would mark a node that refuses as failed for 10 s.
    if ! wait_http_200 "http://127.0.0.1:$SP1/" 10 || ! wait_http_200 "http://127.0.0.1:$SP2/" 10; then
        bad "stub nodes did not come up"
    elif ! { nginx -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" & PIDS="$PIDS $!"; wait_http_200 "$LB/health" 10; }; then
        bad "balancer did not come up"; tail -n 5 "$N/logs/error.log" | sed 's/^/    /'
    else
        : > "$N/lb.log"; kill -USR1 "$(cat "$N/nginx.pid")"; sleep 0.3   # reopen: count from here
        seen_all=
        for s in alpha beta gamma; do
            : > "$N/got"
            for i in 1 2 3 4 5 6; do
                curl -s -m 5 -H "X-Session-Id: $s" -d '{}' "$LB/v1/chat/completions" >> "$N/got"
            done
            curl -s -m 5 "$LB/v1/models?session=$s" >> "$N/got"
            curl -s -m 5 -b "smollm3_session=$s" "$LB/ui/stream/x" >> "$N/got"
            curl -s -m 5 -b "smollm3_session=other" -H "X-Session-Id: $s" -d '{}' "$LB/ui/chat" >> "$N/got"
            n=$(sort -u "$N/got" | wc -l); c=$(wc -l < "$N/got")
            check '[ "$n" = 1 ] && [ "$c" = 9 ]' "session '$s': $c requests (header, ?session=, cookie, header over cookie) on one node: $(sort -u "$N/got" | tr '\n' ' ')"
        done
        : > "$N/got"
        for i in $(seq 1 24); do curl -s -m 5 -H "X-Session-Id: conv-$i" -d '{}' "$LB/v1/chat/completions" >> "$N/got"; done
        n=$(sort -u "$N/got" | wc -l)
        check '[ "$n" = 2 ]' "24 sessions spread over both nodes: $(sort "$N/got" | uniq -c | tr -s ' \n' ' ')"
        : > "$N/got"
        for i in 1 2 3 4 5 6; do curl -s -m 5 -d 'x' "$LB/ui/chat" >> "$N/got"; curl -s -m 5 "$LB/ui/stream/abc" >> "$N/got"; done
        check '[ "$(sort -u "$N/got" | wc -l)" = 1 ]' "/ui/ without a session key sticks to one node per client"
        : > "$N/got"
        for i in 1 2 3 4 5 6; do curl -s -m 5 "$LB/v1/models" >> "$N/got"; done
        check '[ "$(sort -u "$N/got" | wc -l)" = 2 ]' "/v1/ without a session key spreads round-robin"
        check 'grep -q "key=\"alpha\" node=127.0.0.1:" "$N/lb.log"' "balancer log records key and node"
    fi
fi

# ---------------------------------------------------------------- two real nodes
echo "# two nodes: smollm3d + gateway x2 behind scale-out.conf"
chat_body() {   # chat_body SESSION
    printf '{"model":"smollm3","messages":[{"role":"user","content":"Hello %s"}],"max_tokens":4,"temperature":0,"session_id":"%s"}' "$1" "$1"
}
if [ "$have_gateway" = 0 ]; then
    skip "$GATEWAY not built: two-node test not run"
elif [ "$have_nginx" = 0 ] || [ ! -f "$FIXTURE" ]; then
    skip "nginx or $FIXTURE missing: two-node test not run"
else
    N=$TMP/two
    mkdir -p "$N"
    GP1=$(free_port); GP2=$(free_port)
    for i in 1 2; do
        "$BUILD/bin/smollm3d" --model "$FIXTURE" --threads 1 --kv-budget-mb 64 \
            --listen "ipc://$N/d$i.sock" > "$N/d$i.log" 2>&1 & PIDS="$PIDS $!"
    done
    "$GATEWAY" --listen "127.0.0.1:$GP1" --daemon "ipc://$N/d1.sock" > "$N/g1.log" 2>&1 & PIDS="$PIDS $!"
    "$GATEWAY" --listen "127.0.0.1:$GP2" --daemon "ipc://$N/d2.sock" > "$N/g2.log" 2>&1 & G2PID=$!; PIDS="$PIDS $!"
    printf 'server 127.0.0.1:%s max_fails=3 fail_timeout=10s;\nserver 127.0.0.1:%s max_fails=3 fail_timeout=10s;\n' \
        "$GP1" "$GP2" > "$N/nodes.conf"
    LP=$(free_port)
    lb_conf "$N/lb.conf" "$N/nodes.conf" "$N/lb.log" "$LP"
    nginx_main "$N" "$N/lb.conf"
    nginx -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" & PIDS="$PIDS $!"
    LB=http://127.0.0.1:$LP
    r=
    if ! wait_http_200 "http://127.0.0.1:$GP1/health" 60 || ! wait_http_200 "http://127.0.0.1:$GP2/health" 60 ||
       ! wait_http_200 "$LB/health" 10; then
        bad "two nodes did not become healthy"
        tail -n 5 "$N/d1.log" "$N/g1.log" "$N/d2.log" "$N/g2.log" "$N/logs/error.log" 2>/dev/null | sed 's/^/    /'
    else
        : > "$N/lb.log"; kill -USR1 "$(cat "$N/nginx.pid")"; sleep 0.3
        errs=0
        for s in s1 s2 s3 s4 s5 s6 s7 s8; do
            for t in 1 2 3; do
                code=$(curl -s -o "$N/resp" -m 60 -w '%{http_code}' -H 'Content-Type: application/json' \
                       -H "X-Session-Id: $s" -d "$(chat_body "$s")" "$LB/v1/chat/completions")
                if [ "$code" != 200 ] || ! grep -q '"choices"' "$N/resp"; then
                    errs=$((errs + 1)); echo "    $s turn $t: HTTP $code $(head -c 200 "$N/resp")"
                fi
            done
        done
        check '[ $errs = 0 ]' "24 chat completions (8 sessions x 3 turns) through the balancer: $errs errors"
        sticky=1
        for s in s1 s2 s3 s4 s5 s6 s7 s8; do
            k=$(grep "key=\"$s\" " "$N/lb.log" | sed -n 's/.* node=\([^ ]*\) .*/\1/p' | sort -u | wc -l)
            [ "$k" = 1 ] || { sticky=0; echo "    $s on $k nodes"; }
        done
        check '[ $sticky = 1 ]' "each session's 3 turns hit one node (balancer log)"
        for i in 1 2; do
            "$BUILD/bin/smollm3ctl" --connect "ipc://$N/d$i.sock" sessions --json > "$N/sess$i.json" 2>&1
            "$BUILD/bin/smollm3ctl" --connect "ipc://$N/d$i.sock" stats --json > "$N/stats$i.json" 2>&1
        done
        for s in s1 s2 s3 s4 s5 s6 s7 s8; do
            echo "$s $(grep "key=\"$s\" " "$N/lb.log" | sed -n 's/.* node=\([^ ]*\) .*/\1/p' | head -n 1)"
        done > "$N/lbplace"
        python3 - "$N" "$GP1" "$GP2" > "$N/verdict" 2>&1 <<'EOF'
import json, sys
d = sys.argv[1]
ports = sys.argv[2:4]
sess = [[s["session_id"] for s in json.load(open(f"{d}/sess{i}.json"))["sessions"]] for i in (1, 2)]
stats = [json.load(open(f"{d}/stats{i}.json")) for i in (1, 2)]
place = {}
for s in ["s%d" % k for k in range(1, 9)]:
    on = [i for i in (0, 1) if any(x == s or x.endswith(s) or s in x for x in sess[i])]
    place[s] = on
ok_one = all(len(v) == 1 for v in place.values())
# where the balancer sent each session (its log): the daemon that holds it
# must be that node's.  Which node a key hashes to depends on the nodes'
# (random) ports, so "both used" is not required of 8 keys: the 24-key stub
# check above shows the spread.
lb = {}
for line in open(f"{d}/lbplace"):
    k, _, node = line.strip().partition(" ")
    lb[k] = [i for i in (0, 1) if node.endswith(":" + ports[i])]
both = all(place[s] == lb.get(s) for s in place)
req = [st["requests_total"] for st in stats]
print("placement", {k: [i + 1 for i in v] for k, v in place.items()}, "balancer", {k: [i + 1 for i in v] for k, v in lb.items()}, "requests_total", req)
# each node's request count = 3 x its sessions
ok_req = all(req[i] == 3 * sum(1 for v in place.values() if v == [i]) for i in (0, 1))
print("RESULT", int(ok_one), int(both), int(ok_req))
EOF
        sed 's/^/    /' "$N/verdict"
        r=$(sed -n 's/^RESULT //p' "$N/verdict")
        check '[ "${r%% *}" = 1 ]' "every session lives in exactly one daemon (smollm3ctl sessions)"
        check '[ "$(echo "$r" | cut -d" " -f2)" = 1 ]' "each session lives in the daemon of the node the balancer chose"
        check '[ "${r##* }" = 1 ]' "each daemon's requests_total = 3 x its sessions (no turn went astray)"
    fi
    if [ -n "${r:-}" ]; then
        # The web UI: POST /ui/chat, then the EventSource GET of the stream it
        # names must reach the same gateway (a stream id lives on one node).
        ui_ok=0
        for c in c1 c2 c3 c4; do
            frag=$(curl -s -m 30 -b "smollm3_session=ui-$c" --data-urlencode "conversation=$c" \
                   --data-urlencode 'history=[]' --data-urlencode "message=Hi $c" -d think=0 "$LB/ui/chat")
            sid=$(printf '%s' "$frag" | sed -n 's|.*sse-connect="/ui/stream/\([A-Za-z0-9]*\)".*|\1|p' | head -n1)
            if [ -n "$sid" ] && curl -sN -m 60 -b "smollm3_session=ui-$c" "$LB/ui/stream/$sid" | grep -q '^event: done'; then
                ui_ok=$((ui_ok + 1))
            else
                echo "    ui conversation $c: sid '$sid' $(printf '%s' "$frag" | head -c 200)"
            fi
        done
        check '[ $ui_ok = 4 ]' "UI: POST /ui/chat + GET /ui/stream/SID with the session cookie: $ui_ok/4 streams done"
        ui_ok=0
        for c in c5 c6 c7; do
            frag=$(curl -s -m 30 --data-urlencode "conversation=$c" --data-urlencode 'history=[]' \
                   --data-urlencode "message=Hi" -d think=0 "$LB/ui/chat")
            sid=$(printf '%s' "$frag" | sed -n 's|.*sse-connect="/ui/stream/\([A-Za-z0-9]*\)".*|\1|p' | head -n1)
            [ -n "$sid" ] && curl -sN -m 60 "$LB/ui/stream/$sid" | grep -q '^event: done' && ui_ok=$((ui_ok + 1))
        done
        check '[ $ui_ok = 3 ]' "UI without cookie (client-address fallback): $ui_ok/3 streams done"
        # A node goes down: its sessions move to the other node, nothing fails.
        kill -TERM $G2PID 2>/dev/null; sleep 0.5
        errs=0
        for s in s1 s2 s3 s4 s5 s6 s7 s8; do
            code=$(curl -s -o "$N/resp" -m 60 -w '%{http_code}' -H 'Content-Type: application/json' \
                   -H "X-Session-Id: $s" -d "$(chat_body "$s")" "$LB/v1/chat/completions")
            [ "$code" = 200 ] || { errs=$((errs + 1)); echo "    $s: HTTP $code $(head -c 160 "$N/resp")"; }
        done
        check '[ $errs = 0 ]' "gateway 2 stopped: all 8 sessions still served (moved to node 1): $errs errors"
    fi
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.5
fi

# ---------------------------------------------------------------- make run: the plan
echo "# make run: what it builds (make -n)"
make -n --no-print-directory run BUILD="$TMP/runplan" PORT=1 > "$TMP/run-n.log" 2>&1
check 'grep -q "^make -j$(nproc) .*$TMP/runplan/bin/smollm3d .*$TMP/runplan/bin/smollm3-gateway" "$TMP/run-n.log" ||
       grep -q "make\(\[[0-9]*\]\)\{0,1\}.* -j$(nproc) .*$TMP/runplan/bin/smollm3-gateway" "$TMP/run-n.log"' \
      "make run builds the programs with -j$(nproc)"
check '! grep -q "setup-env\|venv\|tests/web\|$TMP/runplan/tests/\|$TMP/runplan/bench/" "$TMP/run-n.log"' \
      "make run sets up no test venv, no tests/web npm packages, builds no tests or benchmarks"
check 'grep -q "run: \[1/4\]" "$TMP/run-n.log" && grep -q "run: \[2/4\]" "$TMP/run-n.log" && grep -q "run: \[3/4\]" "$TMP/run-n.log"' \
      "make run announces its stages"
if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    check '! grep -q "nvcc -\|libsmollm3_cuda" "$TMP/run-n.log" && grep -q "no usable GPU.*make run CUDA=1" "$TMP/run-n.log"' \
          "no GPU here: make run builds no CUDA plugin and says how to get one (CUDA=1)"
fi
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc > /dev/null 2>&1; then
    make -n --no-print-directory run BUILD="$TMP/runplan" PORT=1 CUDA=1 > "$TMP/run-n1.log" 2>&1
    check 'grep -q "nvcc .*backend_cuda.cu" "$TMP/run-n1.log" && grep -q "$TMP/runplan/lib/libsmollm3_cuda.so" "$TMP/run-n1.log"' \
          "make run CUDA=1 builds the CUDA plugin (nvcc found)"
    make -n --no-print-directory all BUILD="$TMP/runplan" > "$TMP/all-n.log" 2>&1
    check 'grep -q "$TMP/runplan/lib/libsmollm3_cuda.so" "$TMP/all-n.log"' "make all still builds the CUDA plugin where nvcc is (CI, tests/gpu)"
fi

# ---------------------------------------------------------------- make targets after make run alone
# Every make target a README names must work on a fresh clone after `make run` alone, which
# installs only what building and serving need (no Check, clang, GNU time, python3-venv, build/venv):
# planned with make -n in a fresh BUILD, each installs what it needs before it builds anything
# (deploy/install-deps.sh MODE, or make deps), and bench builds no Check suite (check.h).
echo "# make targets after make run alone (make -n)"
TP=$TMP/tplan
make -n --no-print-directory bench BUILD="$TP" > "$TMP/bench-n.log" 2>&1
check 'grep -q "^sh deploy/install-deps.sh bench" "$TMP/bench-n.log" &&
       ! grep -q "$TP/tests/\|tests/test_[a-z0-9_]*\.c\|check_main" "$TMP/bench-n.log" &&
       grep -q "$TP/bin/smollm3 " "$TMP/bench-n.log" && grep -q "$TP/bench/bench_kernels" "$TMP/bench-n.log" &&
       grep -q "$TP/bench/bench_membw" "$TMP/bench-n.log"' \
      "make bench installs what it needs (install-deps.sh bench) and builds the programs and benchmarks, no Check suite"
if [ ! -e /dev/nvidia0 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    # nvcc may well be here (CI): the plugin is still not bench's to build without a GPU
    check '! grep -q "nvcc \|libsmollm3_cuda" "$TMP/bench-n.log"' "no GPU here: make bench builds no CUDA plugin"
fi
make -n --no-print-directory all BUILD="$TP" HAVE_CHECK= > "$TMP/all-nocheck-n.log" 2>&1
check '! grep -q "$TP/tests/test_[a-z0-9_]* \|tests/test_[a-z0-9_]*\.c" "$TMP/all-nocheck-n.log" &&
       grep -q "$TP/bin/smollm3d" "$TMP/all-nocheck-n.log" && grep -q "Check suites.*not built" "$TMP/all-nocheck-n.log"' \
      "make (all) without Check builds everything but the Check suites and says so"
for t in unit tsan asan fuzz gpu-check test soak bench-kv bench-long bench-spec; do
    make -n --no-print-directory $t BUILD="$TP" > "$TMP/$t-n.log" 2>&1
    inst=$(grep -n "install-deps.sh" "$TMP/$t-n.log" | head -n 1 | cut -d: -f1)
    comp=$(grep -n "^cc \|^g++ \|^c++ \|clang \|^sh tests/fuzz/run" "$TMP/$t-n.log" | head -n 1 | cut -d: -f1)
    check '[ -n "$inst" ] && { [ -z "$comp" ] || [ "$inst" -lt "$comp" ]; }' \
          "make $t installs what it needs before it builds or runs anything"
done

# ---------------------------------------------------------------- make run
echo "# make run"
if [ "$have_gateway" = 0 ]; then
    skip "$GATEWAY not built: make run test not run"
elif [ "$have_nginx" = 0 ] || [ ! -f "$FIXTURE" ]; then
    skip "nginx or $FIXTURE missing: make run test not run"
else
    P=$(free_port)
    R=$TMP/run
    RUN_DIR=$R THREADS=1 KV_BUDGET_MB=64 make -s --no-print-directory run BUILD="$BUILD" MODEL="$FIXTURE" PORT="$P" \
        > "$TMP/make-run.log" 2>&1 &
    MP=$!; PIDS="$PIDS $MP"
    U=http://127.0.0.1:$P
    if wait_http_200 "$U/health" 120; then
        ok "make run: /health 200 through nginx on 127.0.0.1:$P"
        check '[ "$(http_code "$U/")" = 200 ]' "make run: the UI page (/) is served"
        code=$(curl -s -o "$TMP/resp" -m 60 -w '%{http_code}' -H 'Content-Type: application/json' \
               -d '{"model":"x","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}' "$U/v1/chat/completions")
        check '[ "$code" = 200 ] && grep -q "\"choices\"" "$TMP/resp"' "make run: one chat completion (HTTP $code)"
        # a conversation on a session, to be continued after a restart (kv_spill_dir)
        curl -s -o "$TMP/sess1" -m 60 -H 'Content-Type: application/json' \
            -d '{"model":"x","session_id":"deploy-s1","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0}' \
            "$U/v1/chat/completions"
        curl -sN -o "$TMP/sse" -m 60 -H 'Content-Type: application/json' \
            -d '{"model":"x","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}' "$U/v1/chat/completions"
        check 'grep -q "^data: {" "$TMP/sse" && tail -n 2 "$TMP/sse" | grep -q "^data: \[DONE\]"' \
              "make run: a streamed chat completion through nginx ends with data: [DONE]"
        n=0; while ! grep -q "ready: http://127.0.0.1:$P/" "$TMP/make-run.log" && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
        check 'grep -q "ready: http://127.0.0.1:$P/" "$TMP/make-run.log"' "make run printed the URL"
        check 'grep -q "no API key: listening on 127.0.0.1:$P only" "$TMP/make-run.log" &&
               grep -qE "^[0-9a-f]{64}\$" "$R/tenant-secret" && [ "$(stat -c %a "$R/tenant-secret")" = 600 ]' \
              "make run without a key says it listens on 127.0.0.1 only; its tenant secret is 64 hex digits, 0600"
        three=$(cat "$R/pids" 2>/dev/null)
        SH=$(pgrep -f "^sh deploy/run.sh .* $P\$" | head -n1)   # the script, under make (and maybe sh -c)
        kill -TERM "${SH:-$MP}"
        n=0; while kill -0 "$MP" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
        wait "$MP"; rc=$?
        left=
        for p in $three; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
        check '[ -n "$three" ] && [ -z "$left" ] && [ $rc = 0 ]' \
              "SIGTERM: daemon, gateway and nginx gone (pids $three${left:+; left:$left}), exit status $rc"
        check '[ ! -e "$R/smollm3d.sock" ]' "make run: sockets removed"
        check 'grep -q "^kv_spill_dir = $R/kv$" "$R/smollm3d.conf" && grep -q "sessions kept on disk in $R/kv" "$TMP/make-run.log" &&
               [ -n "$(ls "$R/kv" 2>/dev/null)" ]' "make run keeps sessions on disk (kv_spill_dir = RUN_DIR/kv, written) and says so"
        # again, as a terminal's make would be (SIGINT not ignored): the session continues from
        # disk, and kill -INT of make's own pid stops all three as Ctrl-C does
        RUN_DIR=$R THREADS=1 KV_BUDGET_MB=64 env --default-signal=INT make -s --no-print-directory run BUILD="$BUILD" \
            MODEL="$FIXTURE" PORT="$P" > "$TMP/make-run2.log" 2>&1 &
        MP=$!; PIDS="$PIDS $MP"
        if wait_http_200 "$U/health" 120; then
            body=$(python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["choices"][0]["message"]["content"]
print(json.dumps({"model":"x","session_id":"deploy-s1","max_tokens":2,"temperature":0,"messages":[
    {"role":"user","content":"Hi"},{"role":"assistant","content":a},{"role":"user","content":"Again"}]}))' "$TMP/sess1" 2>/dev/null)
            cached=$(curl -s -m 60 -H 'Content-Type: application/json' -d "$body" "$U/v1/chat/completions" |
                     python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null)
            check '[ "${cached:-0}" -gt 0 ]' "after a restart of make run the session continues from disk (cached_tokens ${cached:-none})"
            three=$(cat "$R/pids" 2>/dev/null)
            kill -INT "$MP"
            n=0; while kill -0 "$MP" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
            left=
            for p in $three; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
            check '[ -n "$three" ] && [ -z "$left" ] && ! kill -0 "$MP" 2>/dev/null' \
                  "kill -INT of make run's pid: make, daemon, gateway and nginx gone (pids $three${left:+; left:$left})"
        else
            bad "make run (again): /health never 200 on 127.0.0.1:$P"
            tail -n 20 "$TMP/make-run2.log" | sed 's/^/    /'
        fi
    else
        bad "make run: /health never 200 on 127.0.0.1:$P"
        tail -n 20 "$TMP/make-run.log" | sed 's/^/    /'
    fi
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
