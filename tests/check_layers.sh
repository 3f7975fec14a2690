#!/bin/sh
# check_layers.sh - the dependency direction of the source tree, enforced:
#
#   kernels <- daemon/model <- daemon/text <- daemon/server <- daemon/client, daemon/cli <- gateway
#
# A file may include headers of its own folder freely.  From another folder it
# may include only a LOWER layer, and there only that layer's public face:
# daemon/model/model.h, daemon/text/text.h, daemon/client/client.h (the
# server is a program: nothing includes it but its own main, except its log
# convention daemon/server/log.h); daemon/model/error.h (the one error enum),
# daemon/model/rules.h (the one set of input rules, and the clock)
# and kernels/*.h (pure functions) are open to all layers above them.  Tests are white-box and exempt.
# C, CUDA (.cu, .cuh) and included bodies (.inc) alike.  Prints each violation;
# exit 1 if any, else "layers ok".
cd "$(dirname "$0")/.." || exit 2
rank() {
    case $1 in
        kernels) echo 0 ;; model) echo 1 ;; text) echo 2 ;; server) echo 3 ;;
        client|cli) echo 4 ;; gateway) echo 5 ;; *) echo 99 ;;
    esac
}
face_ok() {  # folder header
    case "$1/$2" in
        model/model.h|model/error.h|model/rules.h|text/text.h|client/client.h) return 0 ;;
        server/log.h) return 0 ;;   # the logging convention, shared with the gateway
    esac
    return 1
}
out=$(mktemp)
for f in $(find kernels daemon gateway \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) | sort); do
    case $f in
        kernels/*) me=kernels ;;
        daemon/*) me=$(echo "$f" | cut -d/ -f2) ;;
        gateway/*) me=gateway ;;
    esac
    r=$(rank "$me")
    grep -o '^#include "[^"]*"' "$f" | sed 's/#include "\(.*\)"/\1/' | while read -r inc; do
        case $inc in
            kernels/*) g=kernels; h=${inc#kernels/} ;;
            daemon/*/*) g=$(echo "$inc" | cut -d/ -f2); h=$(echo "$inc" | cut -d/ -f3) ;;
            *) continue ;;
        esac
        [ "$g" = "$me" ] && continue
        gr=$(rank "$g")
        if [ "$gr" -ge "$r" ]; then
            echo "layers: $f includes $inc (a layer above or beside $me)"; echo x
        elif [ "$g" != kernels ] && ! face_ok "$g" "$h"; then
            echo "layers: $f includes $inc (use the face of daemon/$g)"; echo x
        fi
    done
done > "$out" 2>&1
if grep -q '^x$' "$out"; then grep -v '^x$' "$out"; rm -f "$out"; exit 1; fi
rm -f "$out"
echo "layers ok"
