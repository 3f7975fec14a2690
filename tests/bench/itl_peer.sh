#!/bin/sh
# itl_peer.sh - `make bench-itl`'s peer: llama.cpp's llama-server, built from the llama.cpp
# vendored in the llama-cpp-python sdist that `make bench` builds its wheel from
# (tests/bench/llama_peer.sh: LLAMA_PEER_VERSION), natively for this CPU (GGML_NATIVE=ON, as the
# wheel), static, no curl / openssl / web UI download; once per CPU feature set, niced, 2 jobs,
# cached beside the wheels: build/wheels/<cpu key>-native/llama-server (and /tmp/wheels/...).
# Prints the binary's path; nothing (and why, on stderr) when it cannot be built: the bench then
# falls back to llama-cpp-python's own server (python -m llama_cpp.server) from build/venv-llama.
# The sdist is build/cache/llama_cpp_python-VERSION.tar.gz, fetched with pip download if absent.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/bench/llama_peer.sh
key=$(peer_cpu_key)
dir=$LLAMA_WHEELS/$key-native
for p in "$dir/llama-server" "/tmp/wheels/$key-native/llama-server"; do
    [ -x "$p" ] && { echo "$p"; exit 0; }
done
mkdir -p build/cache "$dir"
src=build/cache/llama_cpp_python-$LLAMA_PEER_VERSION.tar.gz
py=build/venv/bin/python; [ -x "$py" ] || py=python3
if [ ! -f "$src" ]; then
    "$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_PEER_VERSION" -d build/cache >&2 ||
        { echo "itl_peer: cannot fetch the llama-cpp-python $LLAMA_PEER_VERSION sdist" >&2; exit 1; }
fi
top=build/cache/llama_cpp_python-$LLAMA_PEER_VERSION
[ -f "$top/vendor/llama.cpp/CMakeLists.txt" ] ||
    tar xzf "$src" -C build/cache "llama_cpp_python-$LLAMA_PEER_VERSION/vendor/llama.cpp" ||
    { echo "itl_peer: no vendor/llama.cpp in $src" >&2; exit 1; }
rm -rf "$top/vendor/llama.cpp/.git"
b=build/llama-server-build
log=build/llama-server-build.log
echo "itl_peer: building llama-server from $top/vendor/llama.cpp (native, niced, 2 jobs; log $log)" >&2
{ nice -n 10 cmake -S "$top/vendor/llama.cpp" -B "$b" -G Ninja -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CCACHE=OFF -DCMAKE_BUILD_TYPE=Release &&
    nice -n 10 ninja -C "$b" -j "${BENCH_JOBS:-2}" llama-server; } > "$log" 2>&1 ||
    { echo "itl_peer: llama-server build failed (see $log)" >&2; exit 1; }
cp "$b/bin/llama-server" "$dir/llama-server" || exit 1
mkdir -p "/tmp/wheels/$key-native" && cp "$b/bin/llama-server" "/tmp/wheels/$key-native/" 2>/dev/null
echo "$dir/llama-server"
