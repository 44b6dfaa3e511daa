#!/usr/bin/env python3
"""Runs one section of docs/building.md as written: writes the section's
programs (the ```cpp blocks whose first line is `// NAME.cpp`) into OUT_DIR,
beside links to the source tree's include/ and examples/, and runs each
line of its ```sh blocks there with bash, as a user in a fresh clone would.
Usage: run.py BUILDING_MD SOURCE_ROOT OUT_DIR "SECTION TITLE START" [--compile-only] [--readme README.md]
--compile-only: the lines that run a program (`./x`, `mpirun ...`) are
shown, not run (CUDA on a machine without a GPU). --readme: also check that
the README's build-by-hand commands are building.md's.
Exit 0: every line exited 0; 1: one did not (its output printed)."""
import os
import re
import subprocess
import sys
import time


def main():
    md, src, out, title = sys.argv[1:5]
    compile_only = "--compile-only" in sys.argv[5:]
    text = open(md, encoding="utf-8").read()
    sections = re.split(r"^## ", text, flags=re.M)
    part = next((s for s in sections if s.startswith(title)), None)
    if part is None:
        print(f"{md}: no section starting '## {title}'")
        return 1
    os.makedirs(out, exist_ok=True)
    for name in ("include", "examples"):
        link = os.path.join(out, name)
        if os.path.islink(link):
            os.unlink(link)
        os.symlink(os.path.join(os.path.abspath(src), name), link)
    for m in re.finditer(r"^```cpp\n(.*?)^```", part, re.S | re.M):
        first = m.group(1).split("\n", 1)[0]
        f = re.fullmatch(r"//\s*(\w+\.cpp)\s*", first)
        if f:
            with open(os.path.join(out, f.group(1)), "w", encoding="utf-8") as fh:
                fh.write(m.group(1))
    lines = [l.strip() for m in re.finditer(r"^```sh\n(.*?)^```", part, re.S | re.M)
             for l in m.group(1).splitlines() if l.strip() and not l.strip().startswith("#")]
    if not lines:
        print(f"{md}: no commands in '## {title}'")
        return 1
    if "--readme" in sys.argv[5:]:  # README's build-by-hand lines are building.md's commands
        readme = open(sys.argv[sys.argv.index("--readme") + 1], encoding="utf-8").read()
        part = readme[readme.index("## Building a program by hand"):]
        block = re.search(r"^```sh\n(.*?)^```", part, re.S | re.M).group(1)
        for l in block.splitlines():
            for cmd in l.split("#", 1)[0].split("&&"):
                if cmd.strip() and cmd.strip() not in text:
                    print(f"README's build-by-hand command `{cmd.strip()}` is not one of docs/building.md's")
                    return 1
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for line in lines:
        runs = line.startswith("./") or line.startswith("mpirun")
        if runs and compile_only:
            print(f"$ {line}   (not run: compile only)")
            continue
        start = time.monotonic()
        r = subprocess.run(["bash", "-c", line], cwd=out, env=env, capture_output=True, text=True, timeout=280)
        print(f"$ {line}   ({time.monotonic() - start:.1f} s, exit {r.returncode})\n{r.stdout}{r.stderr}")
        if r.returncode != 0:
            print(f"FAILED: docs/building.md '{title}': `{line}` exited {r.returncode}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
