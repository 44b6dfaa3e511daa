#!/usr/bin/env python3
"""The layers of include/strata (docs/architecture.md, "Layers"): which
folder may include which. A folder includes only the folders below it, so
there is no include cycle between folders; the CUDA backend (cuda/) is the
one folder that knows CUDA, and nothing but the umbrella headers
(<strata/cuda.hpp>, <strata/nccl.hpp>, <strata/nccl_mpi.hpp>) includes it.
And no library header is over MAX_LINES lines (a sign to split along a seam).
Prints every include that breaks the order and every header too long, and
exits 1 if there is one.
    python3 tests/layers/check.py include/strata
"""
import os
import re
import sys

# folder -> the folders it may include (config.hpp, generated, is open to all)
ALLOWED = {
    "core": set(),
    "tensor": {"core"},
    "io": {"core", "tensor"},
    "data": {"core", "tensor"},
    "kernels": {"core", "tensor"},
    "comm": {"core", "tensor"},
    "policy": {"core", "comm"},
    "ps": {"core", "tensor", "comm", "policy"},
    "strategy": {"core", "tensor", "kernels", "comm", "policy", "ps", "data"},
    "nn": {"core", "tensor", "io", "data", "kernels", "comm", "policy", "strategy"},
    "cuda": {"core", "tensor", "kernels", "comm", "policy", "strategy"},
}
MAX_LINES = 400
UMBRELLA = "(umbrella)"  # strata.hpp, nn.hpp, cuda.hpp, nccl.hpp, nccl_mpi.hpp: may include anything
INCLUDE = re.compile(r'^\s*#\s*include\s*<strata/([^>]+)>')


def folder_of(rel):
    return rel.split("/", 1)[0] if "/" in rel else UMBRELLA


def main(root):
    bad = []
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".hpp", ".cuh", ".cu")):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root)
            src = folder_of(rel)
            if src != UMBRELLA and src not in ALLOWED:
                bad.append(f"{rel}: folder {src}/ has no place in the layers (tests/layers/check.py)")
                continue
            with open(path, encoding="utf-8") as fh:
                lines = fh.readlines()
            if len(lines) > MAX_LINES and not f.endswith(".cu"):
                bad.append(f"{rel}: {len(lines)} lines, over {MAX_LINES}: split it along a seam")
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == "config.hpp":
                    continue
                dst = folder_of(m.group(1))
                if src == UMBRELLA or dst == src:
                    continue
                if dst == UMBRELLA or dst not in ALLOWED[src]:
                    may = ", ".join(sorted(x + "/" for x in ALLOWED[src])) or "no other folder"
                    bad.append(f"{rel}:{n} includes <strata/{m.group(1)}>: {src}/ may include only {may}")
    for b in bad:
        print(b)
    print(f"{len(bad)} finding(s)" if bad else
          f"the layers hold: no folder includes one above it, no header over {MAX_LINES} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "include/strata"))
