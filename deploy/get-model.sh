#!/bin/sh
# get-model.sh [DIR] - `make model`: download SmolLM3-3B Q4_K_M (GGUF) from
# Hugging Face into DIR/SmolLM3-3B-Q4_K_M.gguf (DIR defaults to build/models).
#
# Source: ggml-org/SmolLM3-3B-GGUF, file SmolLM3-Q4_K_M.gguf at a pinned
# revision, 1,915,305,312 bytes, sha256 8334b850...61863e (the LFS object id).
# The download resumes (curl -C -) into DIR/SmolLM3-3B-Q4_K_M.gguf.part and is
# moved into place only after the checksum matches.  HF_ENDPOINT overrides
# the host (a mirror); HF_TOKEN is sent when set.
# Exit status: 0 in place and verified; 3 network unavailable (a message says
# so, nothing is left behind but the resumable .part); 1 checksum mismatch or
# another error.
set -eu
DIR=${1:-build/models}
REPO=ggml-org/SmolLM3-3B-GGUF
REV=4965cb60b150737b68a0408c36aeefb65078f894
FILE=SmolLM3-Q4_K_M.gguf
SIZE=1915305312
SHA256=8334b850b7bd46238c16b0c550df2138f0889bf433809008cc17a8b05761863e
OUT=$DIR/SmolLM3-3B-Q4_K_M.gguf
URL=${HF_ENDPOINT:-https://huggingface.co}/$REPO/resolve/$REV/$FILE

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

mkdir -p "$DIR"
if [ -f "$OUT" ]; then
    if [ "$(sha256_of "$OUT")" = "$SHA256" ]; then echo "OK: $OUT"; exit 0; fi
    echo "model: $OUT exists but its sha256 is wrong; downloading again" >&2
    mv "$OUT" "$OUT.bad"
fi
command -v curl >/dev/null || { echo "model: curl is needed (make deps)" >&2; exit 1; }

echo "model: downloading $REPO/$FILE (1.9 GB) -> $OUT" >&2
set -- -fL --retry 2 --connect-timeout 15 -C - -o "$OUT.part"
[ -n "${HF_TOKEN:-}" ] && set -- "$@" -H "Authorization: Bearer $HF_TOKEN"
rc=0
curl "$@" "$URL" || rc=$?
if [ "$rc" != 0 ]; then
    [ -s "$OUT.part" ] || rm -f "$OUT.part"
    case $rc in
    5|6|7|28|35|56)
        echo "model: cannot reach ${HF_ENDPOINT:-https://huggingface.co} (curl exit $rc): no network here?" >&2
        echo "model: download $URL elsewhere and pass MODEL=path, or copy it to $OUT" >&2
        exit 3;;
    *)
        echo "model: download failed (curl exit $rc); rerun to resume" >&2
        exit 1;;
    esac
fi
got=$(stat -c %s "$OUT.part")
if [ "$got" != "$SIZE" ]; then
    echo "model: size $got != $SIZE; rerun to resume" >&2
    exit 1
fi
got=$(sha256_of "$OUT.part")
if [ "$got" != "$SHA256" ]; then
    echo "model: sha256 $got != $SHA256: removed" >&2
    rm -f "$OUT.part"
    exit 1
fi
mv "$OUT.part" "$OUT"
echo "OK: $OUT"
