#!/usr/bin/env python3
"""cu2cpp.py IN.cu OUT.cpp - a .cu file as C++ for the host emulator (tests/cuda_emu): the two
constructs C++ cannot parse, rewritten; nothing else of the source changes (a #line keeps
compiler messages on the original lines).

  kernel<<<grid, block[, smem[, stream]]>>>(args)  ->  emu_launch("kernel", grid, block, smem, stream, kernel, args)
  extern __shared__ [__align__(n)] T name[];        ->  T *name = (T *)emu_dyn_smem();
"""
import re
import sys


def kernel_start(s, i):
    """index where the kernel expression ending just before s[i] begins (name, template args)"""
    j = i
    if s[j - 1] == '>':
        depth = 0
        while j > 0:
            j -= 1
            if s[j] == '>':
                depth += 1
            elif s[j] == '<':
                depth -= 1
                if depth == 0:
                    break
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in '_:'):
        j -= 1
    return j


def split_top(text):
    """text split at top-level commas"""
    parts, depth, cur = [], 0, ''
    for ch in text:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def closing(s, i):
    """index of the ')' matching the '(' at s[i]"""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == '(':
            depth += 1
        elif s[j] == ')':
            depth -= 1
            if depth == 0:
                return j
    raise ValueError('unbalanced parentheses')


def rewrite(src, path):
    out, pos = [], 0
    while True:
        i = src.find('<<<', pos)
        if i < 0:
            out.append(src[pos:])
            break
        k0 = kernel_start(src, i)
        kern = src[k0:i].strip()
        j = src.index('>>>', i)
        cfg = split_top(src[i + 3:j])
        if not kern or not 2 <= len(cfg) <= 4:
            sys.exit('%s:%d: cu2cpp: cannot read the launch %r' % (path, src.count('\n', 0, i) + 1, src[k0:j + 3]))
        cfg += ['0'] * (4 - len(cfg))
        p = j + 3
        while src[p] in ' \t\\\n':
            p += 1
        if src[p] != '(':
            sys.exit('%s:%d: cu2cpp: a launch without arguments' % (path, src.count('\n', 0, i) + 1))
        q = closing(src, p)
        args = src[p + 1:q]
        name = re.sub(r'\s+', ' ', kern)
        out.append(src[pos:k0])
        out.append('emu_launch("%s", %s, %s, %s, %s, %s%s%s)' % (
            name.replace('"', ''), cfg[0], cfg[1], cfg[2], cfg[3], kern, ', ' if args.strip() else '', args))
        pos = q + 1
    s = ''.join(out)
    s = re.sub(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([A-Za-z_][\w ]*?)\s+(\w+)\s*\[\s*\]\s*;',
               lambda m: '%s *%s = (%s *)emu_dyn_smem();' % (m.group(1), m.group(2), m.group(1)), s)
    return '#line 1 "%s"\n' % path + s


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: cu2cpp.py IN.cu OUT.cpp')
    src = open(sys.argv[1]).read()
    open(sys.argv[2], 'w').write(rewrite(src, sys.argv[1]))


if __name__ == '__main__':
    main()
