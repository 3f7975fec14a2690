#!/bin/sh
# get_test_suite.sh [SRC] - puts the official JSON-Schema-Test-Suite's draft2020-12 cases in
# tests/fixtures/jsts/draft2020-12/ (committed) for tests/test_grammar.c.  Pinned: @json-schema-org/tests 2.0.0 on npm,
# whose payload is the git dependency json-schema-org/JSON-Schema-Test-Suite (npm fetches it from
# GitHub).  Without GitHub access, pass SRC: a clone of JSON-Schema-Test-Suite (its tests/ folder
# is read; the figures in the commit log were taken at 44401e0c).
set -e
DST=tests/fixtures/jsts/draft2020-12
mkdir -p "$DST"
if [ -n "$1" ]; then
    if [ -d "$1/.git" ] || [ -f "$1/HEAD" ]; then
        for f in $(git --git-dir="$( [ -d "$1/.git" ] && echo "$1/.git" || echo "$1")" ls-tree --name-only HEAD:tests/draft2020-12 | grep 'json$'); do
            git --git-dir="$( [ -d "$1/.git" ] && echo "$1/.git" || echo "$1")" show "HEAD:tests/draft2020-12/$f" > "$DST/$f"
        done
    else
        cp "$1"/tests/draft2020-12/*.json "$DST/"
    fi
else
    npm install --prefix build/npm @json-schema-org/tests@2.0.0
    cp build/npm/node_modules/json-schema-test-suite/tests/draft2020-12/*.json "$DST/"
fi
echo "$(ls "$DST" | wc -l) files in $DST"
