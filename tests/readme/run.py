#!/usr/bin/env python3
"""Compiles and runs the first C++ block of a README section, so that the
README never shows code that does not build.
Usage: run.py README.md OUT_DIR "SECTION TITLE" EXPECT COMPILER...
A block that includes <strata/nn.hpp> is linked with OpenBLAS (pkg-config)."""
import os
import re
import shlex
import subprocess
import sys


def main() -> int:
    readme, out_dir, section, expect, compiler = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    text = open(readme, encoding="utf-8").read()
    if "## " + section not in text:
        print(f"README: no section '## {section}'")
        return 1
    part = text[text.index("## " + section):]
    m = re.search(r"```cpp\n(.*?)```", part, re.S)
    if not m:
        print(f"README: no ```cpp block in '{section}'")
        return 1
    if "load_mnist" in m.group(1):
        d = os.environ.get("STRATA_MNIST_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "/"), ".cache"), "strata", "mnist")
        if not os.path.exists(os.path.join(d, "t10k-labels-idx1-ubyte")):
            print(f"SKIP: the README's '{section}' trains on MNIST, which is not in {d} (bash scripts/fetch-mnist.sh)")
            return 77
    os.makedirs(out_dir, exist_ok=True)
    name = re.sub(r"\W+", "_", section.lower()).strip("_")
    src = os.path.join(out_dir, name + ".cpp")
    exe = os.path.join(out_dir, name)
    with open(src, "w", encoding="utf-8") as f:
        f.write(m.group(1))
    libs = []
    if "<strata/nn.hpp>" in m.group(1):
        pc = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], capture_output=True, text=True)
        libs = shlex.split(pc.stdout)
    cc = subprocess.run(compiler + ["-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", src, "-o", exe] + libs,
                        capture_output=True, text=True)
    if cc.returncode != 0:
        print(f"the README's '{section}' does not compile:\n{cc.stderr[:4000]}")
        return 1
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    print(run.stdout)
    if run.returncode != 0 or expect not in run.stdout:
        print(f"the README's '{section}' ran with exit {run.returncode}; expected output containing {expect!r}\n{run.stderr}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
