#!/usr/bin/env python3
"""tests/layers/check.py on small trees made here: each rule it enforces
fails a tree that breaks it, and a tree that keeps them all passes.
    python3 tests/layers/check_test.py
"""
import contextlib
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def header(includes=(), body_lines=1, comment_lines=2):
    head = "#pragma once\n" + "//! what it holds\n" * comment_lines
    return head + "".join(f"#include <strata/{i}>\n" for i in includes) + "int x;\n" * body_lines


def good_tree(root):
    for folder in list(check.ALLOWED) + ["nn"]:
        write(root, f"{folder}/README.md", "# here\n")
    write(root, "core/error.hpp", header())
    write(root, "comm/mpi/communicator.hpp", header(["core/error.hpp", "comm/work.hpp"]))  # a subfolder is its parent's
    write(root, "comm/work.hpp", header(["core/error.hpp"]))
    write(root, "parallel/dispatch.hpp", header(["parallel/data/mirrored.hpp", "execution/executor.hpp"]))
    write(root, "parallel/data/mirrored.hpp", header(["parallel/zero/sharded.hpp", "gradient/buckets.hpp"]))
    write(root, "parallel/zero/sharded.hpp", header(["execution/executor.hpp"]))
    write(root, "execution/executor.hpp", header(["gradient/buckets.hpp", "device/device.hpp"]))
    write(root, "gradient/buckets.hpp", header(["device/device.hpp", "comm/work.hpp"]))
    write(root, "device/device.hpp", header(["kernels/compute.hpp"]))
    write(root, "kernels/compute.hpp", header(["core/error.hpp"]))
    write(root, "nn/fit/fit_loop.hpp", header(["nn/callbacks/callbacks.hpp", "strategy/strategy.hpp"]))
    write(root, "nn/callbacks/callbacks.hpp", header(["nn/program/program.hpp"]))
    write(root, "nn/program/program.hpp", header(["nn/layers/layer.hpp", "execution/executor.hpp"]))
    write(root, "nn/layers/layer.hpp", header(["device/device.hpp"]))
    write(root, "strategy/strategy.hpp", header(["parallel/dispatch.hpp"]))
    write(root, "strata.hpp", header(["strategy/strategy.hpp", "cuda/compute.hpp"]))  # an umbrella may include cuda/
    write(root, "cuda/compute.hpp", header(["device/device.hpp"]))


def run(root):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = check.main(root)
    return rc, out.getvalue()


CASES = [
    # (name, change to the good tree, expected rc, words the output must hold)
    ("the good tree", lambda r: None, 0, "the layers hold"),
    ("a folder including one above it", lambda r: write(r, "gradient/buckets.hpp", header(["execution/executor.hpp"])),
     1, "gradient/buckets.hpp:4 includes <strata/execution/executor.hpp>: gradient/ may include only"),
    ("zero/ including data/", lambda r: write(r, "parallel/zero/sharded.hpp", header(["parallel/data/mirrored.hpp"])),
     1, "parallel/zero/ may include only"),
    ("the device seam including strategy/",
     lambda r: write(r, "device/device.hpp", header(["strategy/strategy.hpp"])), 1, "device/ may include only"),
    ("a layer including the fit loop", lambda r: write(r, "nn/layers/layer.hpp", header(["nn/fit/fit_loop.hpp"])),
     1, "nn/layers/ may include only"),
    ("a library header including cuda/", lambda r: write(r, "nn/fit/fit_loop.hpp", header(["cuda/compute.hpp"])),
     1, "nn/fit/ may include only"),
    ("a folder with no place", lambda r: write(r, "misc/thing.hpp", header()), 1, "folder misc/ has no place"),
    ("a header of 401 lines: a warning", lambda r: write(r, "core/big.hpp", header(body_lines=398)), 0,
     "warning: core/big.hpp: 401 lines"),
    ("a header of 601 lines", lambda r: write(r, "core/big.hpp", header(body_lines=598)), 1,
     "core/big.hpp: 601 lines, over 600"),
    ("19 headers in a folder",
     lambda r: [write(r, f"gradient/h{i}.hpp", header()) for i in range(18)], 1, "gradient/: 19 headers, over 18"),
    ("a folder without a README", lambda r: os.remove(os.path.join(r, "parallel/zero/README.md")), 1,
     "parallel/zero/: no README.md"),
    ("a README of 27 lines", lambda r: write(r, "nn/README.md", "line\n" * 27), 1, "nn/README.md: 27 lines, over 26"),
    ("an opening comment of 17 lines: a warning", lambda r: write(r, "core/error.hpp", header(comment_lines=17)), 0,
     "warning: core/error.hpp: its opening comment is 17 lines"),
]


def main():
    failed = 0
    for name, change, want_rc, words in CASES:
        with tempfile.TemporaryDirectory() as root:
            good_tree(root)
            change(root)
            rc, out = run(root)
        ok = rc == want_rc and words in out
        failed += not ok
        print(f"{'ok' if ok else 'FAILED'}: {name}" + ("" if ok else f" (exit {rc}, wanted {want_rc}; output:\n{out})"))
    print(f"{len(CASES) - failed} of {len(CASES)} cases hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
