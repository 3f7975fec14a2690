#!/bin/sh
# install.sh BUILD DESTDIR PREFIX - `make install`.
#
#   PREFIX/bin/                      smollm3 smollm3d smollm3ctl smollm3-gateway
#   PREFIX/lib/libsmollm3_cuda.so    the CUDA backend plugin, when built for a GPU
#                                    (INSTALL_CUDA, set by make install)
#   PREFIX/lib/systemd/system/       smollm3d.service smollm3-gateway.service
#   PREFIX/lib/sysusers.d/           smollm3d.conf   (users smollm3d, smollm3-gateway)
#   PREFIX/lib/tmpfiles.d/           smollm3d.conf   (/var/lib/smollm3d/models)
#   PREFIX/share/smollm3d/web/       the chat UI (+ its npm runtime packages when
#                                    web/node_modules exists: run `npm ci` in web/;
#                                    what the browser loads: no sources, .ts, maps)
#   PREFIX/share/doc/smollm3d/       README.md and the READMEs it links, proto, nginx scale-out example,
#                                    deploy/scale-out/ and the Grafana dashboard
#   /etc/smollm3d/gateway.conf       the gateway's settings (API keys; kept if present)
#   /etc/smollm3d/tenant-secret      the deployment's tenant secret (64 random hex digits,
#                                    0600, owner smollm3-gateway when root): made when absent
#   /etc/smollm3d/smollm3d.conf      default config (model = /var/lib/smollm3d/
#                                    models/SmolLM3-3B-Q4_K_M.gguf); an existing
#                                    file is kept, the new one goes to .dist
#   /etc/nginx/sites-available/smollm3   the nginx site (and Debian's stock default
#                                    site disabled: below)
# Paths inside the units and the nginx site follow PREFIX.  Everything goes
# under DESTDIR when set (packaging); without DESTDIR, as root, the users and
# directories are created (systemd-sysusers, systemd-tmpfiles) and systemd is
# reloaded when it is running.  Last it prints what it installed and the
# commands that start the service (enable the units, the nginx site).
set -eu
BUILD=${1:-build}
DESTDIR=${2:-}
PREFIX=${3:-/usr/local}
SYSCONFDIR=${SYSCONFDIR:-/etc}
D=$DESTDIR
BIN=$D$PREFIX/bin
UNITDIR=$D$PREFIX/lib/systemd/system
SHARE=$PREFIX/share/smollm3d
say() { echo "install: $*"; }
CUDA_PLUGIN=no WEB_ASSETS=no

install -d "$BIN" "$UNITDIR" "$D$PREFIX/lib/sysusers.d" "$D$PREFIX/lib/tmpfiles.d" \
    "$D$SHARE/web" "$D$PREFIX/share/doc/smollm3d" "$D$SYSCONFDIR/smollm3d" "$D$SYSCONFDIR/nginx/sites-available"

for p in smollm3 smollm3d smollm3ctl smollm3-gateway; do
    if [ -x "$BUILD/bin/$p" ]; then
        install -m 0755 "$BUILD/bin/$p" "$BIN/$p"
    elif [ "$p" = smollm3-gateway ]; then
        say "WARNING: $BUILD/bin/$p is not built; smollm3-gateway.service will not start" >&2
    else
        echo "install: $BUILD/bin/$p missing (run make first)" >&2; exit 1
    fi
done

# The CUDA backend plugin, when built and meant for a GPU: smollm3d dlopens
# BIN/../lib/libsmollm3_cuda.so.  INSTALL_CUDA (make install: 1 where a GPU is
# usable or with CUDA=1) says so; a plugin `make all` built beside nvcc on a
# machine without a GPU stays out.
if [ -f "$BUILD/lib/libsmollm3_cuda.so" ] && [ -n "${INSTALL_CUDA:-}" ]; then
    install -d "$D$PREFIX/lib"
    install -m 0755 "$BUILD/lib/libsmollm3_cuda.so" "$D$PREFIX/lib/libsmollm3_cuda.so"
    CUDA_PLUGIN=yes
elif [ -f "$BUILD/lib/libsmollm3_cuda.so" ]; then
    say "the CUDA plugin ($BUILD/lib/libsmollm3_cuda.so) is not installed: no usable GPU here (make install CUDA=1 installs it)"
fi

# Units, with ExecStart following PREFIX.
for u in smollm3d.service smollm3-gateway.service; do
    sed "s|/usr/local/bin/|$PREFIX/bin/|g; s|/usr/share/doc/smollm3d/|$PREFIX/share/doc/smollm3d/|g" \
        "deploy/$u" > "$UNITDIR/$u.tmp"
    chmod 0644 "$UNITDIR/$u.tmp" && mv "$UNITDIR/$u.tmp" "$UNITDIR/$u"
done
install -m 0644 deploy/sysusers.d/smollm3d.conf "$D$PREFIX/lib/sysusers.d/smollm3d.conf"
install -m 0644 deploy/tmpfiles.d/smollm3d.conf "$D$PREFIX/lib/tmpfiles.d/smollm3d.conf"

# Config: the generated option table, with the model path and the sessions'
# spill directory (under the unit's StateDirectory) filled in.
CONF=$D$SYSCONFDIR/smollm3d/smollm3d.conf
sed 's|^#model =$|model = /var/lib/smollm3d/models/SmolLM3-3B-Q4_K_M.gguf|; s|^#kv_spill_dir =$|kv_spill_dir = /var/lib/smollm3d/kv|' \
    deploy/smollm3d.conf > "$CONF.dist"
chmod 0644 "$CONF.dist"
if [ -e "$CONF" ]; then
    say "keeping existing $CONF (new default in $CONF.dist)"
else
    mv "$CONF.dist" "$CONF"
fi

# The gateway's settings (API keys, limits): kept if present, as the daemon's.
GCONF=$D$SYSCONFDIR/smollm3d/gateway.conf
install -m 0644 deploy/smollm3-gateway.conf "$GCONF.dist"
if [ -e "$GCONF" ]; then
    say "keeping existing $GCONF (new default in $GCONF.dist)"
else
    mv "$GCONF.dist" "$GCONF"
fi

# The deployment's tenant secret (gateway.conf tenant_secret_file): made once, never
# replaced (a new one changes every key's tenant id).  A package build (DESTDIR) gets one too:
# a package must not ship it (the note below).
SECRET=$D$SYSCONFDIR/smollm3d/tenant-secret
SECRET_MADE=no
if [ ! -s "$SECRET" ]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$SECRET.tmp" && mv "$SECRET.tmp" "$SECRET")
    SECRET_MADE=yes
fi
SECRET_LINE=yes
grep -q '^ *tenant_secret_file *=' "$GCONF" || SECRET_LINE=no

# nginx site, web root following PREFIX.
sed "s|/usr/share/smollm3d/web|$SHARE/web|g" deploy/nginx/smollm3.conf > "$D$SYSCONFDIR/nginx/sites-available/smollm3"
chmod 0644 "$D$SYSCONFDIR/nginx/sites-available/smollm3"

# Debian's nginx enables a default site (sites-enabled/default -> sites-available/default,
# `listen 80 default_server`, the "Welcome to nginx!" page) that takes every request on port
# 80 whose Host names no other site: beside it ours (server_name _) is never reached at
# http://localhost/.  When it is still that page (a link to a site serving /var/www/html and
# proxying nothing), the link is removed (sites-available/default stays) and said so;
# NGINX_KEEP_DEFAULT=1 keeps it.  Another default site is left alone, with a warning.
NGX_DEF=$D$SYSCONFDIR/nginx/sites-enabled/default
DEFAULT_SITE=none
if [ -L "$NGX_DEF" ] || [ -e "$NGX_DEF" ]; then
    live=$(grep -v '^[[:space:]]*#' "$NGX_DEF" 2>/dev/null || true)
    if [ -L "$NGX_DEF" ] && [ -z "${NGINX_KEEP_DEFAULT:-}" ] && printf '%s\n' "$live" | grep -q 'root /var/www/html' &&
       ! printf '%s\n' "$live" | grep -Eq '(proxy|fastcgi|uwsgi|scgi|grpc)_pass|server_name[[:space:]]+[^_[:space:]]'; then
        rm -f "$NGX_DEF"
        DEFAULT_SITE=disabled
        say "disabled Debian's default nginx site (the link $SYSCONFDIR/nginx/sites-enabled/default; sites-available/default is kept): it answered port 80 before smollm3's.  Undo: ln -s ../sites-available/default $SYSCONFDIR/nginx/sites-enabled/default"
    else
        DEFAULT_SITE=kept
        say "WARNING: $SYSCONFDIR/nginx/sites-enabled/default is enabled and answers port 80 first (default_server): remove it, or give smollm3's site 'listen 80 default_server;' or a server_name" >&2
    fi
fi

# Web UI: everything in web/ but node_modules, npm metadata and tests; then
# the npm runtime dependencies (package.json "dependencies", not dev ones).
if [ -d web ]; then
    (cd web && find . -type f ! -path './node_modules/*' ! -path './test*/*' ! -path './tests/*' \
        ! -name 'package*.json' ! -name '*.md' ! -name '.*' -print) | while IFS= read -r f; do
        install -D -m 0644 "web/$f" "$D$SHARE/web/$f"
    done
    if [ -d web/node_modules ] && [ -f web/package.json ]; then
        deps=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1])).get("dependencies", {})))' \
               web/package.json 2>/dev/null || true)
        for m in $deps; do
            if [ -d "web/node_modules/$m" ]; then
                install -d "$D$SHARE/web/node_modules/$m"
                # what a browser loads: no sources, type declarations, source maps, CLIs or man pages
                (cd web/node_modules && tar cf - --exclude='*.map' --exclude='*.ts' --exclude='*.mts' \
                    --exclude='*.cts' --exclude="$m/src" --exclude="$m/bin" --exclude="$m/man" \
                    --exclude="$m/editors" --exclude="$m/test" --exclude="$m/tests" --exclude="$m/types" "$m") |
                    (cd "$D$SHARE/web/node_modules" && tar xf - --no-same-owner)
                WEB_ASSETS=yes
            else
                say "WARNING: web/node_modules/$m missing (npm ci in web/)" >&2
            fi
        done
    elif [ -f web/package.json ]; then
        say "WARNING: web/node_modules missing: the UI's assets are not installed (run 'npm ci' in web/)" >&2
    fi
fi

install -m 0644 README.md "$D$PREFIX/share/doc/smollm3d/README.md"
# the front page's onward READMEs, at the same relative paths so its links resolve
for f in daemon/README.md daemon/*/README.md gateway/README.md gateway/UI_API.md kernels/README.md \
         kernels/cuda/README.md kernels/cuda/NOTES.md proto/README.md deploy/README.md web/README.md \
         tests/README.md tests/*/README.md; do
    if [ -f "$f" ]; then install -D -m 0644 "$f" "$D$PREFIX/share/doc/smollm3d/$f"; fi
done
install -m 0644 deploy/nginx/scale-out.conf deploy/nginx/smollm3-nodes.conf.example "$D$PREFIX/share/doc/smollm3d/"
# a fleet on a shared spill directory (deploy/README.md, Scale-out), beside the README that names them
for f in deploy/scale-out/nodes.conf deploy/scale-out/smollm3d-node.conf deploy/scale-out/smollm3d-node.service.conf \
         deploy/scale-out/nginx-real-ip.conf deploy/scale-out/prometheus.yml \
         deploy/grafana/smollm3-fleet.json; do
    install -D -m 0644 "$f" "$D$PREFIX/share/doc/smollm3d/$f"
done
[ -f proto/smollm3.proto ] && install -m 0644 proto/smollm3.proto "$D$PREFIX/share/doc/smollm3d/"

USERS_MADE=no
if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ]; then
    command -v systemd-sysusers >/dev/null && systemd-sysusers "$PREFIX/lib/sysusers.d/smollm3d.conf" && USERS_MADE=yes || true
    command -v systemd-tmpfiles >/dev/null && systemd-tmpfiles --create "$PREFIX/lib/tmpfiles.d/smollm3d.conf" || true
    [ -d /run/systemd/system ] && systemctl daemon-reload || true
    # the gateway reads it (ProtectSystem=strict: read-only for it), nobody else
    id smollm3-gateway > /dev/null 2>&1 && chown smollm3-gateway "$SECRET" || true
fi

# What went where, and the way on.
echo "install: installed${DESTDIR:+ under $DESTDIR}:"
echo "  $PREFIX/bin/            smollm3 smollm3d smollm3ctl$([ -x "$BIN/smollm3-gateway" ] && echo ' smollm3-gateway')"
[ "$CUDA_PLUGIN" = yes ] && echo "  $PREFIX/lib/libsmollm3_cuda.so   the CUDA backend plugin"
echo "  $PREFIX/lib/systemd/system/   smollm3d.service smollm3-gateway.service"
echo "  $PREFIX/lib/sysusers.d/smollm3d.conf, $PREFIX/lib/tmpfiles.d/smollm3d.conf   users smollm3d, smollm3-gateway (group www-data if missing), /var/lib/smollm3d"
echo "  $SYSCONFDIR/smollm3d/smollm3d.conf, $SYSCONFDIR/smollm3d/gateway.conf   the settings (kept when present)"
echo "  $SYSCONFDIR/smollm3d/tenant-secret   the tenant secret ($([ "$SECRET_MADE" = yes ] && echo 'made now' || echo 'kept'), 0600)"
echo "  $SYSCONFDIR/nginx/sites-available/smollm3   the nginx site (not enabled; loopback only until API keys are on)"
echo "  $SHARE/web/   the web UI$([ "$WEB_ASSETS" = yes ] && echo ' and its npm assets')"
echo "  $PREFIX/share/doc/smollm3d/   README.md, smollm3.proto, the nginx scale-out example"
echo "install: next, as root${DESTDIR:+ on the target machine}:"
if [ "$USERS_MADE" != yes ]; then
    echo "  systemd-sysusers $PREFIX/lib/sysusers.d/smollm3d.conf && systemd-tmpfiles --create $PREFIX/lib/tmpfiles.d/smollm3d.conf"
fi
echo "  put the model at /var/lib/smollm3d/models/SmolLM3-3B-Q4_K_M.gguf (make model; or edit model = in $SYSCONFDIR/smollm3d/smollm3d.conf)"
echo "  systemctl daemon-reload"
echo "  systemctl enable --now smollm3d smollm3-gateway"
echo "  ln -s ../sites-available/smollm3 $SYSCONFDIR/nginx/sites-enabled/smollm3 && nginx -t && systemctl reload nginx"
[ "$DEFAULT_SITE" = kept ] && echo "  rm $SYSCONFDIR/nginx/sites-enabled/default   (or: listen 80 default_server; in the smollm3 site)"
echo "  then: smollm3ctl health; curl http://localhost/health"
echo "  the site listens on 127.0.0.1 and ::1 only: add API keys (api_key_file in $SYSCONFDIR/smollm3d/gateway.conf,"
echo "  systemctl reload smollm3-gateway), then open it (listen 80; in the site) -- deploy/README.md"
[ -n "$DESTDIR" ] && [ "$SECRET_MADE" = yes ] &&
    echo "  a package must not ship $SYSCONFDIR/smollm3d/tenant-secret: remove it from the package and make it on the target (deploy/README.md)"
[ "$SECRET_LINE" = no ] &&
    echo "  $SYSCONFDIR/smollm3d/gateway.conf (kept) has no tenant_secret_file: with API keys the gateway needs it (tenant_secret_file = $SYSCONFDIR/smollm3d/tenant-secret; tenant ids change: deploy/README.md, Upgrading)"
echo "install: the service, once started: http://localhost/ (the chat UI; the OpenAI API under http://localhost/v1/)"
true
