#!/usr/bin/env python3
"""Compiles and runs the first C++ block of the README's tour, so that the
README never shows code that does not build. Usage: run.py README.md OUT_DIR EXPECT COMPILER..."""
import os
import re
import subprocess
import sys


def main() -> int:
    readme, out_dir, expect, compiler = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    text = open(readme, encoding="utf-8").read()
    tour = text[text.index("## A short tour"):]
    m = re.search(r"```cpp\n(.*?)```", tour, re.S)
    if not m:
        print("README: no ```cpp block in the tour")
        return 1
    os.makedirs(out_dir, exist_ok=True)
    src = os.path.join(out_dir, "readme_tour.cpp")
    exe = os.path.join(out_dir, "readme_tour")
    with open(src, "w", encoding="utf-8") as f:
        f.write(m.group(1))
    cc = subprocess.run(compiler + ["-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", src, "-o", exe],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        print(f"the README tour does not compile:\n{cc.stderr[:4000]}")
        return 1
    run = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    print(run.stdout)
    if run.returncode != 0 or expect not in run.stdout:
        print(f"the README tour ran with exit {run.returncode}; expected output containing {expect!r}\n{run.stderr}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
