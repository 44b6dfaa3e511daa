#!/usr/bin/env python3
"""Compile-fail test runner: the file must compile with -DSTRATA_CONTROL (the
valid twin of the bad line) and must fail without it, with a diagnostic that
matches the file's `// expect: <regex>` line."""
import re
import subprocess
import sys


def main() -> int:
    source = sys.argv[1]
    compiler = sys.argv[2:]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^// expect: (.+)$", text, re.M)
    if not m:
        print(f"{source}: no '// expect: <regex>' line")
        return 1
    expect = m.group(1).strip()
    base = compiler + ["-std=c++20", "-fsyntax-only", "-x", "c++", source]
    ok = subprocess.run(base + ["-DSTRATA_CONTROL"], capture_output=True, text=True)
    if ok.returncode != 0:
        print(f"{source}: the control variant must compile but failed:\n{ok.stderr}")
        return 1
    bad = subprocess.run(base, capture_output=True, text=True)
    if bad.returncode == 0:
        print(f"{source}: compiled, but it must be rejected with /{expect}/")
        return 1
    if not re.search(expect, bad.stderr):
        print(f"{source}: rejected, but without /{expect}/ in the diagnostics:\n{bad.stderr[:4000]}")
        return 1
    print(f"{source}: rejected as expected: /{expect}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
