#!/usr/bin/env bash
# tests/gpu/check_spills.sh [BUILD] - the cuda-static suite of tests/run_all.sh (also `make
# check-spills`): a static check that needs nvcc but no GPU.  Every kernels/cuda/*.cu and
# daemon/model/backend_cuda.cu (a glob at run time: a kernel file added later is covered) is
# compiled with the Makefile's NVCCFLAGS (read from the Makefile; its -gencode pairs replaced)
# once per target, sm_80 and sm_90a, as device code only (-cubin, no host compile) with
# -Xptxas -v, and ptxas' report is read per kernel entry: one line each,
#   spills: sm_80 kernels/cuda/F.cu KERNEL regs N stack N spill-stores N spill-loads N  ok
# (KERNEL demangled, without its return type, parameters and spaces), "FAIL" instead of "ok"
# when ptxas spilled registers (spill stores or loads > 0; a stack frame alone is local arrays,
# not spills).  A non-inlined function a kernel calls (callee:NAME) gets a line only when it
# spills: a FAIL.  A file that does not compile is one FAIL line per target, with nvcc's errors.
# Last line: "cuda-static: N passed, N failed" (passed: kernel entries without spills, counted
# per target); exit 1 on any failure.  Without nvcc (CUDA=0, or no /usr/local/cuda/bin/nvcc and
# none on PATH) it prints a SKIPPED line and "cuda-static: 0 passed, 0 failed", exit 0.
# ptxas' full output per file and target: BUILD/cuda_static/*.log.  SPILLS_JOBS (default 2)
# compiles at a time: 73 s on 2 idle cores with nvcc 13.0, 105 s on busy ones (mmvq.cu: half).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build}
JOBS=${SPILLS_JOBS:-2}
ARCHS="80 90a"

NVCC=
if [ "${CUDA:-auto}" = 0 ]; then
    echo "SKIPPED: no nvcc (CUDA=0)"
    echo "cuda-static: 0 passed, 0 failed"
    exit 0
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc
else NVCC=$(command -v nvcc 2>/dev/null) || NVCC=
fi
if [ -z "$NVCC" ]; then
    echo "SKIPPED: no nvcc (the CUDA toolkit is not installed)"
    echo "cuda-static: 0 passed, 0 failed"
    exit 0
fi

# The Makefile's NVCCFLAGS (its continuation lines joined), without the -gencode pairs:
# each compile here names its one target.  The built-in copy only if that read finds nothing.
mkflags=$(awk '/^NVCCFLAGS[ \t]*:?=/ { on = 1; sub(/^NVCCFLAGS[ \t]*:?=[ \t]*/, "") }
               on { cont = sub(/\\[ \t]*$/, ""); printf "%s ", $0; if (!cont) exit }' Makefile)
[ -n "${mkflags// /}" ] || mkflags="-O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function -I."
FLAGS=()
skip=0
set -f
for w in $mkflags; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case $w in
        -gencode) skip=1 ;;
        -gencode=*|-arch|-arch=*|-code=*) ;;
        *) FLAGS+=("$w") ;;
    esac
done
set +f

SRCS=()
for f in kernels/cuda/*.cu daemon/model/backend_cuda.cu; do
    [ -f "$f" ] && SRCS+=("$f")
done

OUT=$BUILD/cuda_static
mkdir -p "$OUT" || exit 1
rm -f "$OUT"/*.log "$OUT"/*.rc "$OUT"/*.cubin
tag() { printf '%s' "${1%.cu}" | tr '/' '_'; }

# compile: JOBS at a time, each file's targets next to each other (mmvq.cu's two are the longest)
# The plugin's own build (the Makefile) keeps ptxas' report beside each object
# ($BUILD/obj/<file>.o.ptxas.log, both targets in one): used as is when it is newer than the file
# and every header of kernels/cuda/, split per target; the other files are compiled here.
newest_hdr=$(ls -t kernels/cuda/*.cuh kernels/cuda/*.h kernels/*.h daemon/model/backend*.h 2>/dev/null | head -1)
from_build() {  # file -> 0 when its build log served (per-target logs written)
    local f=$1 log="$BUILD/obj/${1%.cu}.o.ptxas.log" b
    [ -f "$log" ] && [ "$log" -nt "$f" ] && { [ -z "$newest_hdr" ] || [ "$log" -nt "$newest_hdr" ]; } || return 1
    grep -q "for 'sm_80'" "$log" && grep -q "for 'sm_90a'" "$log" || return 1
    for a in $ARCHS; do
        b="$OUT/$(tag "$f").sm_$a"
        awk -v want="sm_$a" '/Compiling entry function .* for \047sm_/ { t = $0; sub(/.* for \047/, "", t); sub(/\047.*/, "", t); arch = t }
                             /Function properties for|bytes stack frame|Used [0-9]+ registers|Compiling entry/ { if (arch == want) print }' \
            "$log" >"$b.log"
        echo 0 >"$b.rc"
    done
    return 0
}

t0=$(date +%s)
running=0
reused=0
for f in "${SRCS[@]}"; do
    if from_build "$f"; then reused=$((reused + 1)); continue; fi
    for a in $ARCHS; do
        if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
        b="$OUT/$(tag "$f").sm_$a"
        ( "$NVCC" "${FLAGS[@]}" -gencode "arch=compute_$a,code=sm_$a" -Xptxas -v \
              -cubin -o "$b.cubin" "$f" >"$b.log" 2>&1
          echo $? >"$b.rc" ) &
        running=$((running + 1))
    done
done
wait
secs=$(( $(date +%s) - t0 ))

# ptxas -v, per entry: "Compiling entry function 'M' for 'sm_XX'", "Function properties for M",
# "N bytes stack frame, N bytes spill stores, N bytes spill loads", "Used N registers, ...".
# Out: E<TAB>mangled<TAB>regs<TAB>stack<TAB>stores<TAB>loads per entry, in ptxas' order, then
# C<TAB>... for each called (non-entry) function that spills.
parse() {
    awk '
    /Compiling entry function/ { n = $0; sub(/.*Compiling entry function \047/, "", n)
                                 sub(/\047.*/, "", n); cur = n; isent[n] = 1; order[++ne] = n; next }
    /Function properties for / { fp = $NF; next }
    /bytes stack frame,.*bytes spill stores,.*bytes spill loads/ {
        if (fp == "") next
        st[fp] = $1; ss[fp] = $5; sl[fp] = $9; if (!(fp in seen)) { seen[fp] = 1; fo[++nf] = fp }
        fp = ""; next }
    /Used [0-9]+ registers/ { if (cur != "") { r = $0; sub(/.*Used /, "", r); sub(/ .*/, "", r); regs[cur] = r }
                              cur = ""; next }
    END {
        for (i = 1; i <= ne; i++) { n = order[i]
            printf "E\t%s\t%s\t%d\t%d\t%d\n", n, (n in regs) ? regs[n] : "?", st[n], ss[n], sl[n] }
        for (i = 1; i <= nf; i++) { n = fo[i]
            if (!(n in isent) && (ss[n] > 0 || sl[n] > 0))
                printf "C\t%s\t-\t%d\t%d\t%d\n", n, st[n], ss[n], sl[n] }
    }' "$1"
}
demangle() { if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi; }
# "void mmvq_kernel<4, 2, false>(mv_args)" -> "mmvq_kernel<4,2,false>"
shorten() {
    awk -F'\t' 'BEGIN { OFS = "\t" } {
        s = $2; sub(/^void /, "", s); d = 0; out = ""
        for (i = 1; i <= length(s); i++) { c = substr(s, i, 1)
            if (c == "<") d++; else if (c == ">") d--; else if (c == "(" && d == 0) break
            out = out c }
        gsub(/ /, "", out); $2 = out; print }'
}

pass=0 fail=0
for f in "${SRCS[@]}"; do
    for a in $ARCHS; do
        b="$OUT/$(tag "$f").sm_$a"
        rc=$(cat "$b.rc" 2>/dev/null || echo '?')
        if [ "$rc" != 0 ]; then
            echo "spills: sm_$a $f (does not compile: nvcc exit $rc)  FAIL"
            grep -E -i 'error|fatal' "$b.log" | head -n 20 | sed 's/^/    /'
            fail=$((fail + 1))
            continue
        fi
        n=0
        while IFS=$'\t' read -r kind name regs stack ss sl; do
            n=$((n + 1))
            [ "$kind" = C ] && name="callee:$name"
            if [ "$ss" -gt 0 ] || [ "$sl" -gt 0 ]; then res=FAIL fail=$((fail + 1))
            else res=ok pass=$((pass + 1))
            fi
            echo "spills: sm_$a $f $name regs $regs stack $stack spill-stores $ss spill-loads $sl  $res"
        done < <(parse "$b.log" | demangle | shorten)
        [ "$n" = 0 ] && echo "spills: sm_$a $f (no kernels)"
    done
done
echo "cuda-static: ${#SRCS[@]} files x 2 targets: $reused from the plugin's build, the others compiled in ${secs}s ($JOBS at a time, $NVCC); ptxas output in $OUT/"
echo "cuda-static: $pass passed, $fail failed"
[ "$fail" = 0 ]
