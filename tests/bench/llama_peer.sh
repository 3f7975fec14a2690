# llama_peer.sh - sourced by tests/bench.sh: the llama.cpp peer (llama-cpp-python's wheel, built from
# PyPI source) for the CPU this run is on, and what to do when it dies.
#
# A wheel built with GGML_NATIVE=ON carries the ISA of the machine that built it, so wheels are
# cached per CPU feature set: build/wheels/<cpu key>-<build>/ (and /tmp/wheels/... across clones),
# the key a hash of the x86 SIMD flags in /proc/cpuinfo that ggml's native build can use.  Two
# builds:
#   native    - what `pip install llama-cpp-python` gives a user of this machine (AMX included
#               where the CPU has it);
#   portable  - GGML_NATIVE=OFF with the AVX/AVX2/AVX-512/VNNI/BF16 flags this CPU has named
#               explicitly and AMX off: the build a crashing native one is replaced by.
# A native peer that dies by a signal (llama.cpp's AMX path dies with SIGILL on some Xeons) is
# reported, the fact cached beside its wheel (CRASHED: the signal), and the portable build made
# once and measured instead; the table names the build that ran.
#
# The venv is build/venv-llama (other scripts use it), reinstalled when the wanted build changes
# (build/venv-llama/.peer holds "<cpu key>-<build>").
#
# Environment: BENCH_LLAMA_WHEEL_CMD - the command that builds a wheel into "$1" with CMAKE_ARGS
# set (default: pip wheel of llama-cpp-python $LLAMA_PEER_VERSION); BENCH_LLAMA_PY - run the
# peer with this interpreter instead of a venv's (the tests' stand-in peer, which reads
# BENCH_PEER_BUILD: the build it stands for).

LLAMA_VENV=${LLAMA_VENV:-build/venv-llama}
LLAMA_WHEELS=${LLAMA_WHEELS:-build/wheels}

# The SIMD flags of this CPU that a native ggml build can use, sorted, one line.
peer_cpu_flags() {
    grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
        grep -E '^(sse4_2|avx|avx2|fma|f16c|avx_vnni|avx512[a-z0-9_]*|amx_[a-z0-9]*)$' | sort -u | tr '\n' ' ' |
        sed 's/ $//'
}
peer_cpu_model() { sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1; }
peer_cpu_key() { peer_cpu_flags | sha1sum | cut -c1-12; }

# CMAKE_ARGS of a build ("native" | "portable") on this CPU.
peer_cmake_args() {
    if [ "$1" = native ]; then echo "-DGGML_NATIVE=ON"; return; fi
    f=" $(peer_cpu_flags) "
    a="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    has() { case "$f" in *" $1 "*) return 0 ;; esac; return 1; }
    if has avx; then a="$a -DGGML_AVX=ON"; fi
    if has avx2; then a="$a -DGGML_AVX2=ON"; fi
    if has fma; then a="$a -DGGML_FMA=ON"; fi
    if has f16c; then a="$a -DGGML_F16C=ON"; fi
    if has avx_vnni; then a="$a -DGGML_AVX_VNNI=ON"; fi
    if has avx512f; then a="$a -DGGML_AVX512=ON"; fi
    if has avx512vbmi; then a="$a -DGGML_AVX512_VBMI=ON"; fi
    if has avx512_vnni; then a="$a -DGGML_AVX512_VNNI=ON"; fi
    if has avx512_bf16; then a="$a -DGGML_AVX512_BF16=ON"; fi
    echo "$a"
}

LLAMA_PEER_VERSION=0.3.36 # the GPU check's peer too (tests/gpu/prepare.sh)
peer_build_wheel() { # DIR: builds the wheel into DIR with $CMAKE_ARGS
    src=build/cache/llama_cpp_python-$LLAMA_PEER_VERSION.tar.gz
    [ -f "$src" ] || src=llama-cpp-python==$LLAMA_PEER_VERSION
    py=build/venv/bin/python; [ -x "$py" ] || py=python3
    CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 15 "$py" -m pip wheel --no-deps --no-binary llama-cpp-python -w "$1" "$src"
}

# peer_python BUILD LOG: prints the interpreter of the peer of that build for this CPU, building
# and caching its wheel first if need be; nothing (and a line on stderr) when it cannot be had.
peer_python() {
    b=$1; log=$2
    if [ -n "${BENCH_LLAMA_PY:-}" ]; then
        echo "$BENCH_LLAMA_PY"; return 0
    fi
    tag="$(peer_cpu_key)-$b"
    dir="$LLAMA_WHEELS/$tag"
    if [ -x "$LLAMA_VENV/bin/python" ] && [ "$(cat "$LLAMA_VENV/.peer" 2>/dev/null)" = "$tag" ] &&
        "$LLAMA_VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
        echo "$LLAMA_VENV/bin/python"; return 0
    fi
    mkdir -p "$dir"
    whl=$(ls "$dir"/llama_cpp_python-*.whl /tmp/wheels/"$tag"/llama_cpp_python-*.whl 2>/dev/null | head -1)
    if [ -z "$whl" ]; then
        echo "bench: building llama-cpp-python ($b build for this CPU: $(peer_cmake_args "$b"); once, niced," \
            "2 jobs; cached in $dir)" >&2
        CMAKE_ARGS=$(peer_cmake_args "$b") ${BENCH_LLAMA_WHEEL_CMD:-peer_build_wheel} "$dir" > "$log" 2>&1 ||
            echo "bench: llama-cpp-python ($b) build failed (see $log)" >&2
        whl=$(ls "$dir"/llama_cpp_python-*.whl 2>/dev/null | head -1)
        [ -n "$whl" ] && mkdir -p /tmp/wheels/"$tag" && cp "$whl" /tmp/wheels/"$tag"/ 2>/dev/null
    fi
    [ -z "$whl" ] && return 1
    [ -f "$dir/$(basename "$whl")" ] || cp "$whl" "$dir/"
    [ -x "$LLAMA_VENV/bin/python" ] || python3 -m venv "$LLAMA_VENV" || return 1
    "$LLAMA_VENV/bin/pip" install -q --force-reinstall --no-deps "$whl" >> "$log" 2>&1 || return 1
    "$LLAMA_VENV/bin/pip" install -q "$whl" >> "$log" 2>&1 || return 1 # its dependencies
    echo "$tag" > "$LLAMA_VENV/.peer"
    echo "$LLAMA_VENV/bin/python"
}

# The build to start with: native, unless this CPU's native build is known to crash.
peer_first_build() {
    if [ -f "$LLAMA_WHEELS/$(peer_cpu_key)-native/CRASHED" ]; then
        echo portable
    else
        echo native
    fi
}

# peer_signal_name RC: "SIGILL" for an exit status that is a death by a signal (128 + n), else nothing.
peer_signal_name() {
    [ "$1" -gt 128 ] 2>/dev/null && [ "$1" -lt 160 ] || return 0
    n=$(kill -l $(($1 - 128)) 2>/dev/null) && echo "SIG$n"
}

peer_mark_crashed() { # BUILD SIGNAL
    mkdir -p "$LLAMA_WHEELS/$(peer_cpu_key)-$1" && echo "$2" > "$LLAMA_WHEELS/$(peer_cpu_key)-$1/CRASHED"
}
peer_crash_note() { # the signal a native build of this CPU died by in an earlier run, if any
    cat "$LLAMA_WHEELS/$(peer_cpu_key)-native/CRASHED" 2>/dev/null
}
