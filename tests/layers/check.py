#!/usr/bin/env python3
"""The layers of include/strata (docs/architecture.md, "Layers"): which
folder may include which. A folder includes only the folders below it, so
there is no include cycle between folders; the CUDA backend (cuda/) is the
one folder that knows CUDA, and nothing but the umbrella headers
(<strata/cuda.hpp>, <strata/nccl.hpp>, <strata/nccl_mpi.hpp>) includes it.
A subfolder not listed (comm/mpi/, kernels/host/, cuda/comm/) is its
parent's. A header over WARN_LINES lines is reported (split it where a seam
is, not where a count is); over FAIL_LINES, or a folder of more than
MAX_FILES headers, fails. Every listed folder (and nn/) has a README.md of
at most README_LINES lines (what is here, what it may include, where to
start); a header whose opening //! comment runs over COMMENT_LINES lines is
reported (what it holds and one use; the story goes to the README or docs/).
Prints every finding; exits 1 on a failure.
    python3 tests/layers/check.py include/strata
"""
import os
import re
import sys

BASE = {"core", "tensor", "kernels", "comm", "policy"}
# the folders that make the training step, bottom up: device seam, gradient
# path, execution seam and synchronous loop, the ways to split the work
STEP = BASE | {"ps", "data", "device", "gradient", "execution"}
PARALLEL = {"parallel/zero", "parallel/tensor", "parallel/pipeline", "parallel/data", "parallel/ps"}
STRATEGY = STEP | PARALLEL | {"parallel", "strategy"}
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
    "device": BASE,
    "cuda": BASE | {"device"},
    "gradient": BASE | {"device"},
    "execution": STEP - {"execution"},
    "parallel/zero": STEP,
    "parallel/tensor": STEP | {"parallel/zero"},
    "parallel/pipeline": STEP | {"parallel/zero", "parallel/tensor"},
    "parallel/data": STEP | {"parallel/zero", "parallel/tensor"},
    "parallel/ps": STEP,
    "parallel": STEP | PARALLEL,
    "strategy": STRATEGY - {"strategy"},
    "nn/layers": STRATEGY | {"io"},
    "nn/optimizers": STRATEGY | {"io"},
    "nn/program": STRATEGY | {"io", "nn/layers", "nn/optimizers"},
    "nn/checkpoints": STRATEGY | {"io", "nn/layers", "nn/optimizers", "nn/program"},
    "nn/callbacks": STRATEGY | {"io", "nn/layers", "nn/optimizers", "nn/program", "nn/checkpoints"},
    "nn/fit": STRATEGY | {"io", "nn/layers", "nn/optimizers", "nn/program", "nn/checkpoints", "nn/callbacks"},
    "nn/model": STRATEGY | {"io", "nn/layers", "nn/optimizers", "nn/program", "nn/checkpoints", "nn/callbacks",
                            "nn/fit"},
}
WARN_LINES = 400
FAIL_LINES = 600
MAX_FILES = 18
README_LINES = 26
COMMENT_LINES = 16
UMBRELLA = "(umbrella)"  # strata.hpp, nn.hpp, cuda.hpp, nccl.hpp, nccl_mpi.hpp: may include anything
INCLUDE = re.compile(r'^\s*#\s*include\s*<strata/([^>]+)>')


def folder_of(rel):
    """The listed folder a header belongs to: its directory, or the nearest listed one above it."""
    d = os.path.dirname(rel)
    if not d:
        return UMBRELLA
    while d and d not in ALLOWED:
        d = os.path.dirname(d)
    return d or rel.split("/", 1)[0]


def opening_comment_lines(lines):
    """The //! lines right after #pragma once."""
    n = 0
    for line in lines[1:]:
        if not line.startswith("//!"):
            break
        n += 1
    return n


def check_readmes(root, bad):
    for folder in sorted(set(ALLOWED) | {"nn"}):
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        readme = os.path.join(d, "README.md")
        if not os.path.isfile(readme):
            bad.append(f"{folder}/: no README.md (what is here, what it may include, where to start)")
            continue
        with open(readme, encoding="utf-8") as fh:
            n = len(fh.readlines())
        if n > README_LINES:
            bad.append(f"{folder}/README.md: {n} lines, over {README_LINES}: say less, point to docs/")


def main(root):
    bad, warn = [], []
    check_readmes(root, bad)
    for d, _, files in os.walk(root):
        headers = [f for f in files if f.endswith((".hpp", ".cuh"))]
        if len(headers) > MAX_FILES:
            bad.append(f"{os.path.relpath(d, root)}/: {len(headers)} headers, over {MAX_FILES}: split it by concept")
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
            if len(lines) > FAIL_LINES and not f.endswith(".cu"):
                bad.append(f"{rel}: {len(lines)} lines, over {FAIL_LINES}: split it along a seam")
            elif len(lines) > WARN_LINES and not f.endswith(".cu"):
                warn.append(f"{rel}: {len(lines)} lines (over {WARN_LINES}: is there a seam to split at?)")
            comment = opening_comment_lines(lines)
            if comment > COMMENT_LINES:
                warn.append(f"{rel}: its opening comment is {comment} lines (over "
                            f"{COMMENT_LINES}: what it holds and one use; the story to the README or docs/)")
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
    for w in warn:
        print("warning: " + w)
    for b in bad:
        print(b)
    print(f"{len(bad)} finding(s)" if bad else
          f"the layers hold: no folder includes one above it, no header over {FAIL_LINES} lines, "
          f"no folder over {MAX_FILES} headers, a README of at most {README_LINES} lines in each")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "include/strata"))
