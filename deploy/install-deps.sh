#!/bin/sh
# install-deps.sh - install the Debian packages smollm3d builds and tests with.
# Runs apt-get only when root and something is missing; otherwise says what to do.
set -e
PKGS="build-essential pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler \
libmicrohttpd-dev libjansson-dev libpcre2-dev libsystemd-dev libinih-dev libxxhash-dev uuid-dev \
check libsubunit-dev nginx curl clang libclang-rt-14-dev python3 python3-pip systemd protobuf-compiler"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages:$missing (run 'make deps' as root)" >&2
    exit 0
fi
echo "install-deps: installing$missing"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
