#!/usr/bin/env python3
"""check_links.py [ROOT] - every link in every Markdown file of the repository resolves.

For each *.md file (git's tracked and new files, node_modules/ and build/ left out):

  * relative links -- [text](path), ![alt](path), [label]: path, <a href="path">,
    <img src="path"> -- must name a file or folder inside the repository (a path
    starting with / is taken from the repository's root, as GitHub does);
  * an #anchor must exist in the Markdown file it points into (the file itself for
    a bare #anchor): a heading's GitHub slug (lower case, punctuation dropped,
    spaces as '-', -1, -2 ... for repeats) or an explicit <a id=...> / <a name=...>;
    on another kind of file only a GitHub line anchor (#L12, #L12-L20) within its
    length;
  * [text][label] must have its [label]: definition;
  * http(s) links are checked for syntax only (a host, no spaces; no network);
    mailto: needs an address; any other scheme is an error.

Links inside fenced code blocks and `code spans` are not links and are skipped.

The checker first runs on a tree of its own cases (good and broken links whose
verdicts are known), so a checker that stops finding broken links fails.  Then
one test per Markdown file.  Prints each broken link as FILE:LINE: LINK: why, and
a last line "links: N passed, N failed"; exits 1 on any failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](dest "title") and ![alt](dest); text may hold one level of brackets
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)")
# [text][label]; not after a word character (C[t][r] indexes an array) nor when the
# text is a number or one character ([4][BM]: array dimensions)
REFUSE = re.compile(r"(?<![\]\\\w])\[((?:[^\[\]]|\[[^\[\]]*\])+)\]\[([^\]]*)\]")
AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]*)>")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
HTML_ANCHOR = re.compile(r"<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
LINE_ANCHOR = re.compile(r"L(\d+)(?:-L(\d+))?")
HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$")


def slug(text):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)      # links and images: their text
    t = re.sub(r"<[^>]+>", "", t)                             # HTML tags
    t = t.replace("`", "")
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)                            # punctuation (\w: letters, digits, _)
    return t.replace(" ", "-")


def scan(text):
    """Yields (line number, kind, value) for the links, anchors and definitions of a
    Markdown text, outside code."""
    fence = None
    for no, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        for a in HTML_ANCHOR.findall(line):
            yield no, "anchor", a
        h = HEADING.match(line)
        if h:
            yield no, "heading", h.group(2)
        d = REFDEF.match(line)
        if d:
            yield no, "refdef", d.group(1)
            yield no, "link", d.group(2)
            continue
        bare = CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line)
        for m in INLINE.finditer(bare):
            yield no, "link", m.group(1)
        for m in REFUSE.finditer(bare):
            if not re.fullmatch(r"\d+|.", m.group(1)):
                yield no, "refuse", (m.group(2) or m.group(1))
        for m in AUTOLINK.finditer(bare):
            yield no, "link", m.group(1)
        for m in HTML_LINK.finditer(bare):
            yield no, "link", m.group(1)


class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.anchor_cache = {}

    def anchors(self, path):
        if path not in self.anchor_cache:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            found, seen = set(), {}
            for _, kind, v in scan(text):
                if kind == "anchor":
                    found.add(v)
                elif kind == "heading":
                    s = slug(v)
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    found.add(s if n == 0 else "%s-%d" % (s, n))
            self.anchor_cache[path] = found
        return self.anchor_cache[path]

    def check_link(self, src, dest):
        """None when dest, written in file src, resolves; else why not."""
        if dest.startswith("<") and dest.endswith(">"):
            dest = dest[1:-1]
        if not dest:
            return "empty link"
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", dest):
            u = urllib.parse.urlsplit(dest)
            scheme = u.scheme.lower()
            if scheme in ("http", "https"):
                if not u.netloc or not HOST.match(u.netloc.rsplit("@", 1)[-1]):
                    return "malformed URL (host %r)" % u.netloc
                if re.search(r"\s", dest):
                    return "malformed URL (whitespace)"
                return None
            if scheme == "mailto":
                return None if re.fullmatch(r"[^@\s]+@[^@\s]+", u.path) else "malformed mailto"
            return "unknown scheme %r" % scheme
        path, _, frag = dest.partition("#")
        path = urllib.parse.unquote(path.split("?", 1)[0])
        if path:
            base = self.root if path.startswith("/") else os.path.dirname(src)
            target = os.path.realpath(os.path.join(base, path.lstrip("/")))
            if target != self.root and not target.startswith(self.root + os.sep):
                return "outside the repository"
            if not os.path.exists(target):
                return "no such file"
        else:
            target = src
        if not frag:
            return None
        frag = urllib.parse.unquote(frag)
        if os.path.isdir(target):
            return "anchor on a folder"
        if target.endswith(".md"):
            return None if frag in self.anchors(target) else "no anchor #%s in %s" % (
                frag, os.path.relpath(target, self.root))
        m = LINE_ANCHOR.fullmatch(frag)
        if not m:
            return "anchor #%s on a file that is not Markdown" % frag
        with open(target, "rb") as f:
            lines = f.read().count(b"\n") + 1
        last = int(m.group(2) or m.group(1))
        return None if 1 <= int(m.group(1)) <= last <= lines else "line anchor #%s past the end (%d lines)" % (frag, lines)

    def check_file(self, path):
        """The broken links of one Markdown file: [(line, link, why)]."""
        with open(path, encoding="utf-8") as f:
            items = list(scan(f.read()))
        defs = {v.lower() for _, kind, v in items if kind == "refdef"}
        bad = []
        for no, kind, v in items:
            if kind == "link":
                why = self.check_link(path, v)
                if why:
                    bad.append((no, v, why))
            elif kind == "refuse" and v.lower() not in defs:
                bad.append((no, "[%s]" % v, "no [%s]: definition" % v))
        return bad


def markdown_files(root):
    try:
        r = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "*.md"],
                           capture_output=True, text=True, check=True)
        files = [p for p in r.stdout.split("\n") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "node_modules", "build")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".md")]
    skip = ("node_modules/", "build/")
    return sorted(p for p in set(files)
                  if not any(p.startswith(s) or "/" + s in p for s in skip) and os.path.isfile(os.path.join(root, p)))


# The checker's own cases: a tree whose broken links are known.
SELF_TREE = {
    "README.md": """# Top title

## `make run` — in detail
## Repeated
## Repeated
<a id="explicit"></a>

[ok file](docs/guide.md) [ok anchor](docs/guide.md#second-part) [ok self](#make-run--in-detail)
[ok repeat](#repeated-1) [ok explicit](#explicit) [ok dir](docs/) [ok root](/docs/guide.md)
![ok image](docs/pic.png) [ok line](src/code.c#L2) [ok web](https://example.com/a_b?x=1#y)
<https://example.org> [ok mail](mailto:someone@example.com) [ok ref][r1] [ok ref2]
[ok spaced](<docs/a file.md>) [ok escaped](docs/a%20file.md) <a href="docs/guide.md#first">ok</a>
`[not a link](missing.md)` C[t][r] = W[r] and [4][BM] are not links

```sh
[not a link either](missing.md)
```

[r1]: docs/guide.md
[ok ref2]: #top-title
""",
    "docs/guide.md": """# First
## Second part
[bad up](../nothing.md) [bad anchor](../README.md#no-such-heading) [bad self](#third)
[bad repeat](../README.md#repeated-2) [bad line](../src/code.c#L9) [bad code anchor](../src/code.c#main)
[bad web](https://-bad-.example.com/) [bad host](http:///path) [bad scheme](ftp://example.com/x)
[bad ref][nowhere] [bad outside](../../outside.md) [bad dir anchor](../docs/#first)
<img src="missing.png">
""",
    "docs/a file.md": "# A file\n",
    "docs/pic.png": "",
    "src/code.c": "int main(void)\n{ return 0; }\n",
}
SELF_BAD = {  # file -> the links it must report, in order
    "README.md": [],
    "docs/guide.md": ["../nothing.md", "../README.md#no-such-heading", "#third", "../README.md#repeated-2",
                      "../src/code.c#L9", "../src/code.c#main", "https://-bad-.example.com/", "http:///path",
                      "ftp://example.com/x", "../../outside.md", "../docs/#first", "[nowhere]", "missing.png"],
    "docs/a file.md": [],
}


def self_test():
    """[(name, error or None)]: the checker on its own cases."""
    tmp = tempfile.mkdtemp(prefix="check-links-")
    out = []
    try:
        repo = os.path.join(tmp, "repo")
        for rel, text in SELF_TREE.items():
            p = os.path.join(repo, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(tmp, "outside.md"), "w") as f:
            f.write("# Outside\n")
        c = Checker(repo)
        for rel, want in SELF_BAD.items():
            got = [link for _, link, _ in c.check_file(os.path.join(repo, rel))]
            err = None if got == want else "reported %s, expected %s" % (got, want)
            out.append(("self-test " + rel, err))
        found = markdown_files(repo)
        want = sorted(r for r in SELF_TREE if r.endswith(".md"))
        out.append(("self-test file list", None if found == want else "found %s, expected %s" % (found, want)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    root = os.path.realpath(root)
    passed = failed = 0
    for name, err in self_test():
        if err:
            failed += 1
            print("FAIL: %s: %s" % (name, err))
        else:
            passed += 1
    c = Checker(root)
    files = markdown_files(root)
    if not files:
        failed += 1
        print("FAIL: no Markdown file found under %s" % root)
    nlinks = 0
    for rel in files:
        path = os.path.join(root, rel)
        try:
            bad = c.check_file(path)
        except (OSError, UnicodeDecodeError) as e:
            bad = [(0, "", "cannot read: %s" % e)]
        nlinks += sum(1 for _, kind, _ in scan(open(path, encoding="utf-8", errors="replace").read()) if kind == "link")
        if bad:
            failed += 1
            for no, link, why in bad:
                print("FAIL: %s:%d: %s: %s" % (rel, no, link, why))
        else:
            passed += 1
    print("%d Markdown files, %d links checked" % (len(files), nlinks))
    print("links: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
