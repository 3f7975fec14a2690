#!/usr/bin/env bash
# tests/gpu/prepare.sh - the peer's source for the device check, made here (PyPI reachable).
#
# Run from the project root AFTER `../shared/hooks/gpu-kit pack` (pack empties .gpu/):
#
#   ../shared/hooks/gpu-kit pack && bash tests/gpu/prepare.sh
#
# It downloads the llama-cpp-python 0.3.36 sdist once (cached in build/cache/), takes
# its vendor/llama.cpp, drops what a CUDA build of llama-bench does not read
# (models/, docs/, examples/, tests/, the web UI's sources, the other backends'
# ggml-* folders, media, Python converters), checks that the trimmed tree still
# configures with cmake (CPU only, as a quick guard against a missing folder:
# LLAMA_BUILD_SERVER off and on), and writes .gpu/llama.cpp.tar.xz (~5 MB), which
# tests/gpu/check.sh unpacks and builds on the device (docs: ../shared/docs/GPU.md).
set -euo pipefail
top=$(git rev-parse --show-toplevel) && cd "$top"
VER=0.3.36
CACHE=build/cache
SDIST=$CACHE/llama_cpp_python-$VER.tar.gz
OUTTAR=.gpu/llama.cpp.tar.xz

[ -d .gpu ] || { echo "prepare: no .gpu/ (run ../shared/hooks/gpu-kit pack first)"; exit 1; }
mkdir -p "$CACHE"
if [ ! -s "$SDIST" ]; then
    echo "prepare: downloading the llama-cpp-python $VER sdist (pip; a few minutes)"
    dl=$(mktemp -d)
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$dl"
    mv "$dl"/llama_cpp_python-$VER.tar.gz "$SDIST"
    rm -rf "$dl"
fi

W=$(mktemp -d /tmp/llama-prep.XXXXXX)
trap 'rm -rf "$W"' EXIT
tar xzf "$SDIST" -C "$W" "llama_cpp_python-$VER/vendor/llama.cpp"
mv "$W/llama_cpp_python-$VER/vendor/llama.cpp" "$W/llama.cpp"
rm -rf "$W/llama_cpp_python-$VER"
L=${W:?}/llama.cpp

# --- trim: what neither configure nor the llama-bench / llama-batched-bench / llama-server
# builds read.  Folders that CMakeLists.txt adds unconditionally stay (tools/*, vendor/*).
rm -rf "${L:?}"/models "$L"/docs "$L"/examples "$L"/pocs "$L"/tests "${L:?}"/media "$L"/benches \
       "$L"/gguf-py "$L"/conversion "$L"/requirements "$L"/skills "$L"/ci "$L"/.devops "$L"/.github \
       "$L"/grammars "$L"/prompts
rm -f "$L"/convert_*.py "$L"/requirements.txt "$L"/flake.nix "$L"/build-xcframework.sh
rm -rf "$L"/.git   # a submodule's pointer file (../../.git/modules/...): cmake's git lookups would follow it
# the web UI: its npm sources and tests (no npm on the device; the server then embeds no UI)
rm -rf "$L"/tools/ui/src "$L"/tools/ui/tests "$L"/tools/ui/static "$L"/tools/ui/package-lock.json
# the server's own web tests and public assets, if any
rm -rf "$L"/tools/server/tests "$L"/tools/server/webui "$L"/tools/server/public_legacy
# ggml backends other than cpu and cuda (each is added only when its GGML_<NAME> is on)
for d in "$L"/ggml/src/ggml-*/; do
    case "$(basename "$d")" in ggml-cpu|ggml-cuda) ;; *) rm -rf "$d" ;; esac
done
# the CPU backend's sources for other architectures than x86 are small; kept (GGML_NATIVE=OFF)
find "$L" \( -name '*.png' -o -name '*.jpg' -o -name '*.gif' -o -name '*.mp4' -o -name '*.webp' \) -delete

# --- guard: the trimmed tree configures (CPU only; CUDA needs cuBLAS, which is on the device)
conf() {
    local b=$1; shift
    cmake -S "$L" -B "$b" -G Ninja -DGGML_CUDA=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DCMAKE_BUILD_TYPE=Release "$@" > "$b.log" 2>&1 || { echo "prepare: cmake configure FAILED ($*):"; tail -30 "$b.log"; exit 1; }
    grep -q "Build files have been written" "$b.log"
}
conf "$W/b-noserver" -DLLAMA_BUILD_SERVER=OFF
ninja -C "$W/b-noserver" -t targets all 2>/dev/null | grep -q '^llama-bench:' || { echo "prepare: no llama-bench target"; exit 1; }
ninja -C "$W/b-noserver" -t targets all 2>/dev/null | grep -q '^llama-batched-bench:' || { echo "prepare: no llama-batched-bench target"; exit 1; }
conf "$W/b-server" -DLLAMA_BUILD_SERVER=ON
ninja -C "$W/b-server" -t targets all 2>/dev/null | grep -q '^llama-server:' || { echo "prepare: no llama-server target"; exit 1; }
grep -q -- '--n-depth' "$L/tools/llama-bench/llama-bench.cpp" || echo "prepare: warning: this llama-bench has no --n-depth"
rm -rf "$W"/b-noserver* "$W"/b-server*
echo "prepare: trimmed tree configures (llama-bench, llama-batched-bench, llama-server targets present)"

tar -C "$W" -cf - llama.cpp | xz -T0 -9 > "$OUTTAR"
size=$(stat -c %s "$OUTTAR")
echo "prepare: wrote $OUTTAR: $((size / 1024)) KiB ($(find "$L" -type f | wc -l) files)"
[ "$size" -lt $((12 * 1048576)) ] || echo "prepare: warning: $OUTTAR is larger than expected"
# what travels to the device: the tree (tracked + untracked-not-ignored) and .gpu, at most 64 MiB
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -n 1 | cut -f1)
# the check runs test_cuda and bench_cuda only: the other suites' binaries stay behind (device
# run 2 needed the room: with them the tree was 64 of 64 MiB)
find .gpu/tests -type f ! -name test_cuda -delete 2>/dev/null
find .gpu/bench -type f ! -name bench_cuda -delete 2>/dev/null
kit=$(du -sb .gpu | cut -f1)
echo "prepare: .gpu is $((kit / 1048576)) MiB, the rest of the tree $((tree / 1048576)) MiB: $(((kit + tree) / 1048576)) of 64 MiB"
[ $((kit + tree)) -lt $((64 * 1048576)) ] || echo "prepare: TOO LARGE for the device: leave something out of .gpu"
