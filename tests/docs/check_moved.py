#!/usr/bin/env python3
"""check_moved.py [REV [AT]] - nothing of the old README was lost when it was split (issue 39).

One-off check of the move of README.md's reference material into the READMEs beside
the code: every unit of README.md as it stood at REV (default cfc9053, the last
commit before the split) -- a paragraph, a list item, a table row, a line of a code
block, a heading -- must appear in one of the repository's Markdown files now,
compared with whitespace collapsed, list markers dropped and links reduced to their
text (so a moved paragraph may wrap differently and its links may point to the new
files).  The units deliberately corrected or rewritten are listed in CHANGED below
with why; each must be missing (else it is not a change, and the list is stale).

Prints every unit that is missing without a reason, then
"N units: N found, N changed on purpose, N missing"; exits 1 on any missing.
Not part of `make test`: the docs keep changing after the move, so the new docs are
read as they stood at AT (default d9f8953, the move's last commit; "." = the working
tree).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# unit prefix (normalized) -> why it is not in the new docs verbatim
CHANGED = {
    "A production inference service for **SmolLM3-3B**, written in C:":
        "the front page's introduction, rewritten",
    "make test # installs what it needs":
        "the two commands, shown on the front page with their new behaviour",
    "make run # builds, gets a model":
        "the two commands, shown on the front page with their new behaviour",
    "Everything builds into `build/` (binaries in `build/bin/`). `make asan` builds":
        "tests/README.md#sanitizers: `make asan` also runs tests/gateway/test_fault.py (issue 38)",
    "**SmolLM3-3B** (the product's model): download a GGUF":
        "deploy/README.md#getting-a-model: `make model` first, then the same text",
    "`make run [MODEL=path] [PORT=8080]` installs what is missing, builds, picks a":
        "deploy/README.md: `make run` builds the CUDA plugin only where a GPU is usable, no test venv, progress",
    "It prints the URL once `/health` answers.":
        "deploy/README.md: rewritten with the progress `make run` prints",
    "build/bin/smollm3ctl --connect ipc://build/run/smollm3d.sock generate":
        "the front page's examples (tested by tests/docs/test_readme_examples.py)",
    "-d '{\"model\":\"smollm3\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'":
        "the front page's examples (tested by tests/docs/test_readme_examples.py)",
    "## The gateway (HTTP, OpenAI API, web UI)": "gateway/README.md's title",
    "The model decides two of these: on SmolLM2-135M-Instruct":
        "SmolLM2 has no tools in its template: tools need SmolLM3 (gateway/README.md)",
    "`input`: a string (one user message) or a list of items:":
        "gateway/README.md: 'see the chat template above' now links daemon/text/README.md",
    "The code edit's answer is drafted almost whole:":
        "daemon/text/README.md: 'steps (below)' now links kernels/README.md",
    "Benchmarks are not part of `make test`: `make bench` (see `tests/bench.sh`).":
        "tests/README.md: with a link to the figures",
    "Includes only point down:":
        "daemon/README.md#layers: no include cycle is left; check-headers covers kernels/*.h and daemon/*/*.h (issue 38)",
}


def old_readme(rev):
    return subprocess.run(["git", "-C", ROOT, "show", rev + ":README.md"], check=True,
                          capture_output=True, text=True).stdout


LINK = re.compile(r"!?\[([^\]]*)\]\([^)\s]*\)")
ANCHOR = re.compile(r'<a (?:id|name)="[^"]*"></a>')


def norm(s):
    s = ANCHOR.sub("", s)
    s = LINK.sub(r"\1", s)
    s = re.sub(r"(?m)^\s*(?:[*-]|\d+\.)\s+", "", s)
    return " ".join(s.split())


def units(text):
    out, block, fence = [], [], False

    def flush():
        if not block:
            return
        if all(l.lstrip().startswith("|") for l in block):
            out.extend(l for l in block if not re.fullmatch(r"\s*\|[\s|:-]*\|\s*", l))
        elif re.match(r"\s*[*-] ", block[0]):
            item = []
            for l in block:
                if re.match(r"[*-] ", l) and item:
                    out.append("\n".join(item))
                    item = []
                item.append(l)
            out.append("\n".join(item))
        else:
            out.append("\n".join(block))
        block.clear()

    for line in text.split("\n"):
        if line.startswith("```"):
            flush()
            fence = not fence
            continue
        if fence:
            if line.strip():
                out.append(line)
        elif not line.strip():
            flush()
        elif line.startswith("#"):
            flush()
            out.append(line)
        else:
            block.append(line)
    flush()
    return out


HEADING = re.compile(r"#+ (.*)")


def markdown_files(at):
    cmd = ["ls-files", "-co", "--exclude-standard", "*.md"] if at == "." else ["ls-tree", "-r", "--name-only", at]
    r = subprocess.run(["git", "-C", ROOT] + cmd, capture_output=True, text=True, check=True)
    return [p for p in r.stdout.split("\n") if p.endswith(".md") and "node_modules/" not in p]


def read_doc(at, p):
    if at == ".":
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            return f.read()
    return subprocess.run(["git", "-C", ROOT, "show", at + ":" + p], check=True, capture_output=True,
                          text=True).stdout


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "cfc9053"
    at = sys.argv[2] if len(sys.argv) > 2 else "d9f8953"
    docs = {}
    for p in markdown_files(at):
        text = read_doc(at, p)
        # each heading on a line of its own, the rest normalized
        docs[p] = "\n".join(norm(l) if l.startswith("#") else l for l in text.split("\n"))
        docs[p] = "\n".join(norm(part) for part in re.split(r"(?m)^(#+ .*)$", docs[p]) if part.strip())
    found = changed = missing = 0
    used = set()
    headings = [h.lower() for d in docs.values() for h in HEADING.findall(d)]
    for u in units(old_readme(rev)):
        n = norm(u)
        if not n:
            continue
        h = HEADING.fullmatch(n)
        if h and any(h.group(1).lower() in t for t in headings):
            found += 1
            continue
        if not h and any(n in d for d in docs.values()):
            found += 1
            continue
        why = next((k for k in CHANGED if n.startswith(norm(k))), None)
        if why is not None:
            changed += 1
            used.add(why)
            continue
        missing += 1
        print("MISSING: " + n[:200])
    for k in CHANGED:
        if k not in used:
            missing += 1
            print("STALE CHANGED entry (found verbatim or no such unit): " + k)
    print("%d units: %d found, %d changed on purpose, %d missing" % (found + changed + missing, found, changed, missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
