#!/usr/bin/env python3
"""test_readme_examples.py [--build BUILD] [--model GGUF] - the front page's examples work.

Takes the examples from README.md itself: its fenced code blocks whose info string
holds the word `example` (```sh example, ```python example).  A block with a
language but neither `example` nor `not-run` is a failure (an example that would
silently go untested), and so is a README without a curl command, an openai SDK
snippet and a smollm3ctl command among its examples.

Starts the stack as `make run` does (deploy/run.sh: smollm3d, smollm3-gateway and
nginx) with RUN_DIR in a temporary directory, on SmolLM2-135M-Instruct
(build/models/SmolLM2-135M-Instruct.Q4_1.gguf) and a free port.  Runs each command
of each sh block and each python block as written, with make run's defaults
substituted: the port comes from the one variable PORT (set to the stack's; an
example naming 127.0.0.1:8080 itself is a failure), build/run/ -> RUN_DIR,
build/bin/ -> BUILD/bin/.  Shell examples run with Debian's python3 first on
PATH (the README's `apt-get install python3-zmq python3-protobuf`), the python
examples with the tests' venv (the README's venv with openai).  Each must exit 0
and print an answer: a chat completion JSON with a message (no error object), an
SSE stream of chunks ending in `data: [DONE]`, or (smollm3ctl, Python) non-empty
text; and the answer (the message content, the streamed deltas, or the output)
must hold what the README shows on the `# -> ANSWER` line after the command
(whitespace folded).  An example without that line is a failure.  Then proto/examples/client.py in its simple
form.  Two cases check that the checks fail: the curl example sent to an unknown
path, and the SDK example sent to a closed port.

A missing prerequisite (a binary, nginx, curl, the model, a Python package) is a
failure.  Prints "examples: N passed, N failed"; exits 1 on any failure.
"""
import argparse
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LANGS = {"sh", "bash", "shell", "console", "python", "py"}

passed = failed = 0


def ok(name):
    global passed
    passed += 1
    print("ok: " + name)


def bad(name, why):
    global failed
    failed += 1
    print("FAIL: %s: %s" % (name, why))


def readme_blocks(path):
    """[(line, info words, text)] of the fenced code blocks of a Markdown file."""
    out, fence, start, info, body = [], None, 0, [], []
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f.read().split("\n"), 1):
            m = re.match(r"^ {0,3}(`{3,}|~{3,})(.*)$", line)
            if fence is None:
                if m:
                    fence, start, info, body = m.group(1), no, m.group(2).split(), []
            elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                out.append((start, info, "\n".join(body)))
                fence = None
            else:
                body.append(line)
    return out


def commands(sh_text):
    """[(line offset, command, expected answer or None)] of a shell block: lines joined at
    trailing backslashes; a `# -> TEXT` line after a command is its answer, other comments
    are dropped."""
    cmds, cur, first = [], "", 0
    for i, line in enumerate(sh_text.split("\n")):
        m = re.match(r"^\s*# -> (.*)$", line)
        if m and not cur and cmds and cmds[-1][2] is None:
            cmds[-1] = (cmds[-1][0], cmds[-1][1], m.group(1).strip())
            continue
        if cur:
            cur += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            cur, first = line, i
        else:
            continue
        if not cur.rstrip().endswith("\\"):
            cmds.append((first, cur, None))
            cur = ""
    if cur:
        cmds.append((first, cur, None))
    return cmds


def expected_of(py_text):
    """The `# -> TEXT` line of a python example (its answer), or None."""
    m = re.findall(r"(?m)^# -> (.*)$", py_text)
    return m[-1].strip() if m else None


def fold(text):
    return " ".join(text.split())


def answer_of(out):
    """The text a reader reads in out: a chat completion's message content, an SSE stream's
    deltas, else the output itself."""
    text = out.strip()
    if re.search(r"(?m)^data: ", text):
        content = ""
        for d in re.findall(r"(?m)^data: (.*)$", text):
            try:
                j = json.loads(d)
            except ValueError:
                continue
            for c in j.get("choices", []) if isinstance(j, dict) else []:
                content += (c.get("delta") or {}).get("content") or ""
        return content
    if text.startswith("{"):
        try:
            j = json.loads(text)
            return ((j.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
        except (ValueError, AttributeError):
            return text
    return text


def substitute(text, port, run_dir, build):
    text = text.replace("build/run/", run_dir.rstrip("/") + "/")
    if os.path.normpath(build) != "build":
        text = text.replace("build/bin/", os.path.join(build, "bin") + "/")
    return text


def verdict(out):
    """None when out is an answer; else why not."""
    text = out.strip()
    if not text:
        return "no output"
    if re.search(r"(?m)^data: ", text):
        datas = re.findall(r"(?m)^data: (.*)$", text)
        if datas[-1].strip() != "[DONE]":
            return "the stream does not end with data: [DONE]"
        content = ""
        for d in datas[:-1]:
            try:
                j = json.loads(d)
            except ValueError:
                return "a data line is not JSON: %r" % d[:200]
            if "error" in j:
                return "an error chunk: %r" % d[:300]
            for c in j.get("choices", []):
                content += (c.get("delta") or {}).get("content") or ""
        return None if content.strip() else "the stream carries no content"
    if text.startswith("{"):
        try:
            j = json.loads(text)
        except ValueError:
            return "not JSON: %r" % text[:300]
        if "error" in j:
            return "an error: %r" % text[:300]
        if "choices" in j:
            msg = (j["choices"] or [{}])[0].get("message") or {}
            if not (msg.get("content") or "").strip():
                return "no message content: %r" % text[:300]
        return None
    return None


def run(cmd, name, env, shell=True, timeout=180):
    """Runs one example; returns (rc, stdout, stderr)."""
    try:
        p = subprocess.run(cmd, shell=shell, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % timeout


def check(name, rc, out, err, expect_fail=False, want=None):
    why = "exit status %s (%s)" % (rc, err.strip()[-300:]) if rc != 0 else verdict(out)
    if not why and want is not None and fold(want) not in fold(answer_of(out)):
        why = "the answer %r does not hold what the README shows: %r" % (fold(answer_of(out))[:200], want)
    if expect_fail:
        if why:
            ok(name + " (fails as it must: %s)" % why[:80])
        else:
            bad(name, "an answer where a failure was expected: %r" % out[:200])
    elif why:
        bad(name, why)
    else:
        ok(name + "\n    -> " + " ".join(out.split())[:100])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="build/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    a = ap.parse_args()
    os.chdir(ROOT)
    build = a.build

    # ---- the examples, from README.md
    blocks = readme_blocks(os.path.join(ROOT, "README.md"))
    examples = []
    for line, info, text in blocks:
        lang = info[0].lower() if info else ""
        if "example" in info[1:]:
            examples.append((line, lang, text))
        elif lang in LANGS and "not-run" not in info[1:]:
            bad("README.md:%d" % line, "a ```%s block tagged neither `example` nor `not-run`" % lang)
    sh = [(l + 1 + i, c, w) for l, lang, t in examples if lang in ("sh", "bash", "shell") for i, c, w in commands(t)]
    py = [(l, t) for l, lang, t in examples if lang in ("python", "py")]
    for l, c, w in sh:
        if w is None:
            bad("README.md:%d" % l, "no `# -> ANSWER` line after the command (what a reader should see)")
    for l, t in py:
        if expected_of(t) is None:
            bad("README.md:%d" % l, "no `# -> ANSWER` line in the python example (what a reader should see)")
    fixed = [l for l, c, _ in sh if ":8080" in c] + [l for l, t in py if ":8080" in t]
    if fixed:
        bad("README.md:%s" % ",".join(map(str, fixed)), "an example names port 8080 itself, not $PORT (the one variable)")
    else:
        ok("every example takes the port from PORT")
    others = [(l, lang) for l, lang, t in examples if lang not in ("sh", "bash", "shell", "python", "py")]
    for l, lang in others:
        bad("README.md:%d" % l, "an example in %r, which this test cannot run" % lang)
    for what, present in (("a curl command", any(c.lstrip().startswith("curl ") for _, c, _ in sh)),
                          ("an openai SDK snippet", any("from openai import" in t for _, t in py)),
                          ("a smollm3ctl command", any("smollm3ctl" in c for _, c, _ in sh))):
        if present:
            ok("README.md has " + what + " among its examples")
        else:
            bad("README.md", "no %s among its examples (```sh example / ```python example)" % what)

    # ---- prerequisites
    missing = [p for p in (os.path.join(build, "bin", n) for n in ("smollm3d", "smollm3-gateway", "smollm3ctl"))
               if not os.access(p, os.X_OK)]
    if missing:
        bad("prerequisites", "not built: %s (make BUILD=%s)" % (", ".join(missing), build))
    if not os.path.isfile(a.model):
        bad("prerequisites", "%s absent (tests/get_smollm2.sh fetches it)" % a.model)
    for tool in ("curl", "protoc"):
        if not subprocess.run(["sh", "-c", "command -v " + tool], capture_output=True).stdout:
            bad("prerequisites", tool + " not found (make deps)")
    if not (subprocess.run(["sh", "-c", "command -v nginx"], capture_output=True).stdout or
            os.access("/usr/sbin/nginx", os.X_OK)):
        bad("prerequisites", "nginx not found (make deps)")
    try:
        import openai  # noqa: F401
        import zmq  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        bad("prerequisites", "python package missing: %s (make deps: build/venv)" % e)
    # the README's protobuf client runs on Debian's python3 (python3-zmq, python3-protobuf)
    if subprocess.run(["/usr/bin/python3", "-c", "import zmq, google.protobuf"], capture_output=True).returncode:
        bad("prerequisites", "Debian's python3 lacks python3-zmq or python3-protobuf (make deps)")
    if failed and not (sh or py):
        print("examples: %d passed, %d failed" % (passed, failed))
        return 1
    if missing or not os.path.isfile(a.model):
        print("examples: %d passed, %d failed" % (passed, failed))
        return 1

    # ---- the stack, as make run starts it
    tmp = tempfile.mkdtemp(prefix="readme-ex-")
    run_dir = os.path.join(tmp, "run")
    port = free_port()
    env = dict(os.environ, RUN_DIR=run_dir, THREADS="2", KV_BUDGET_MB="256", PORT=str(port))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    # shell examples as a reader on Debian runs them: python3 is the system's
    sh_env = dict(env, PATH="/usr/bin:/bin:" + env["PATH"])
    log = open(os.path.join(tmp, "run.log"), "w")
    stack = subprocess.Popen(["sh", "deploy/run.sh", build, os.path.abspath(a.model), str(port)],
                             cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.time()
        while http_status("http://127.0.0.1:%d/health" % port) != 200:
            if stack.poll() is not None or time.time() - t0 > 180:
                log.flush()
                bad("the stack (deploy/run.sh)", "/health never answered 200 (%s): %s" % (
                    "exited %s" % stack.returncode if stack.returncode is not None else "180 s",
                    open(log.name).read()[-800:]))
                print("examples: %d passed, %d failed" % (passed, failed))
                return 1
            time.sleep(0.5)
        ok("the stack answers /health on 127.0.0.1:%d (deploy/run.sh, RUN_DIR)" % port)

        first = None
        for line, cmd, want in sh:
            c = substitute(cmd, port, run_dir, build)
            name = "README.md:%d: %s" % (line, " ".join(cmd.split())[:90])
            rc, out, err = run(c, name, sh_env)
            check(name, rc, out, err, want=want)
            if first is None and rc == 0 and want:
                first = (out, want)
        for line, text in py:
            line += 1
            path = os.path.join(tmp, "example_%d.py" % line)
            with open(path, "w") as f:
                f.write(substitute(text, port, run_dir, build))
            name = "README.md:%d: the python example" % line
            rc, out, err = run([sys.executable, path], name, env, shell=False)
            check(name, rc, out, err, want=expected_of(text))
        if first:
            check("self-check: an answer that does not hold the README's", 0, first[0], "", expect_fail=True,
                  want=first[1] + " (not said)")

        # proto/examples/client.py as its docstring shows it, in its simple form
        name = "proto/examples/client.py --connect ipc://RUN_DIR/smollm3d.sock \"Hello!\""
        rc, out, err = run([sys.executable, "proto/examples/client.py", "--connect",
                            "ipc://%s/smollm3d.sock" % run_dir, "Hello!"], name, env, shell=False)
        check(name, rc, out, err)

        # the checks can fail: an unknown path, a closed port
        curl = next((c for _, c, _ in sh if c.lstrip().startswith("curl ") and "completions" in c), None)
        if curl:
            c = substitute(curl, port, run_dir, build).replace("/v1/chat/completions", "/v1/chat/nowhere")
            rc, out, err = run(c, "self-check", sh_env)
            check("self-check: the curl example sent to /v1/chat/nowhere", rc, out, err, expect_fail=True)
        if py:
            path = os.path.join(tmp, "closed.py")
            with open(path, "w") as f:
                f.write(substitute(py[0][1], port, run_dir, build).replace(
                    "OpenAI(", "OpenAI(max_retries=0, timeout=10, ", 1))
            rc, out, err = run([sys.executable, path], "self-check", dict(env, PORT=str(free_port())),
                               shell=False, timeout=60)
            check("self-check: the python example against a closed port", rc, out, err, expect_fail=True)
    finally:
        if stack.poll() is None:
            stack.send_signal(signal.SIGTERM)
            try:
                stack.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(stack.pid, signal.SIGKILL)
                stack.wait()
        if stack.returncode not in (0, None):
            bad("the stack stops on SIGTERM", "deploy/run.sh exit status %s" % stack.returncode)
        log.close()
        subprocess.run(["rm", "-rf", tmp])
    print("examples: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
