#!/bin/sh
# tests/deploy/scaleout_units.sh [ROOT_TREE] - a fleet node's units and nginx
# (issue 46; run by tests/deploy/run.sh, alone in about a second):
#
#   drop-in    deploy/scale-out/smollm3d-node.service.conf grants
#              ReadWritePaths= to the kv_spill_dir that smollm3d-node.conf
#              sets (smollm3d.service has ProtectSystem=strict: without it
#              the daemon cannot write the shared directory and exits), and
#              RequiresMountsFor= it; with ROOT_TREE (an installed DESTDIR
#              tree that tests/deploy/run.sh prepared for systemd-analyze),
#              `systemd-analyze verify` on smollm3d.service with the drop-in
#              in /etc/systemd/system/smollm3d.service.d/: exit 0, no stderr
#   real-ip    deploy/scale-out/nginx-real-ip.conf in front of a server that
#              answers $remote_addr: X-Forwarded-For is taken from a listed
#              balancer (127.0.0.2 here), ignored from any other address
#
# Prints ok / FAIL lines and "N passed, N failed"; exits 1 on any failure.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TREE=${1:-}
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }
TMP=$(mktemp -d /tmp/smol-units-XXXXXX)
NGX_PID=
trap '[ -n "$NGX_PID" ] && kill "$NGX_PID" 2>/dev/null; rm -rf "$TMP"' EXIT

DROPIN=deploy/scale-out/smollm3d-node.service.conf
NODE=deploy/scale-out/smollm3d-node.conf
spill=$(sed -n 's/^kv_spill_dir *= *//p' "$NODE")
check '[ -n "$spill" ] && [ -f "$DROPIN" ]' "a drop-in for the node config's kv_spill_dir (${spill:-none})"
rw=$(sed -n 's/^ReadWritePaths=//p' "$DROPIN" 2>/dev/null | tr ' ' '\n')
covered=0
for p in $rw; do
    case "$spill/" in "${p%/}"/*) covered=1 ;; esac
done
check '[ $covered = 1 ]' "ReadWritePaths= ($(echo $rw)) covers kv_spill_dir $spill"
check 'grep -q "^RequiresMountsFor=$spill\$" "$DROPIN" 2>/dev/null' "RequiresMountsFor=$spill"
if [ -n "$TREE" ] && command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$TREE/etc/systemd/system/smollm3d.service.d"
    cp "$DROPIN" "$TREE/etc/systemd/system/smollm3d.service.d/scale-out.conf"
    U=/usr/local/lib/systemd/system
    systemd-analyze verify --root="$TREE" "$U/smollm3d.service" > "$TMP/v.out" 2> "$TMP/v.err"
    rc=$?
    check '[ $rc = 0 ] && [ ! -s "$TMP/v.err" ]' "systemd-analyze verify smollm3d.service + the drop-in: exit $rc, no stderr"
    [ -s "$TMP/v.err" ] && sed 's/^/    /' "$TMP/v.err"
    rm -rf "$TREE/etc/systemd/system/smollm3d.service.d"
elif [ -n "$TREE" ]; then
    bad "cannot run: systemd-analyze not installed"
fi

if ! command -v nginx >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    bad "cannot run: nginx or curl not installed (real-ip)"
else
    N=$TMP/ngx
    mkdir -p "$N/logs" "$N/tmp"
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    sed 's/^set_real_ip_from .*/set_real_ip_from 127.0.0.2;/' deploy/scale-out/nginx-real-ip.conf > "$N/real-ip.conf"
    cat > "$N/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $N/nginx.pid;
error_log $N/logs/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $N/tmp/body;
    proxy_temp_path $N/tmp/proxy;
    fastcgi_temp_path $N/tmp/fastcgi;
    uwsgi_temp_path $N/tmp/uwsgi;
    scgi_temp_path $N/tmp/scgi;
    include $N/real-ip.conf;
    server { listen 127.0.0.1:$port; location / { return 200 "\$remote_addr"; } }
}
NGX
    nginx -p "$N" -c "$N/nginx.conf" -e "$N/logs/error.log" > "$N/logs/out" 2>&1 &
    NGX_PID=$!
    for i in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
    via=$(curl -s --interface 127.0.0.2 -H 'X-Forwarded-For: 198.51.100.7' "http://127.0.0.1:$port/")
    chain=$(curl -s --interface 127.0.0.2 -H 'X-Forwarded-For: 203.0.113.9, 198.51.100.7' "http://127.0.0.1:$port/")
    direct=$(curl -s --interface 127.0.0.1 -H 'X-Forwarded-For: 198.51.100.7' "http://127.0.0.1:$port/")
    check '[ "$via" = 198.51.100.7 ]' "from the balancer: the client's address from X-Forwarded-For ($via)"
    check '[ "$chain" = 198.51.100.7 ]' "from the balancer: the last address it added, not one the client sent ($chain)"
    check '[ "$direct" = 127.0.0.1 ]' "from elsewhere: X-Forwarded-For ignored ($direct)"
fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
