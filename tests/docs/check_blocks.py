#!/usr/bin/env python3
"""Compiles every ```cpp block of docs/*.md and docs/strategies/*.md, so that
the documentation never shows code that does not build.

Usage: check_blocks.py DOCS_DIR OUT_DIR [--nn] [--mpi] [--cuda FLAG...] [--nccl] -- COMPILER...
  COMPILER: the compiler and its flags (-I include, -I the build's include).
  --nn: the build has a CBLAS (blocks may use strata/nn); --mpi: the MPI
  backend (its flags from `mpicxx --showme:compile`); --cuda: the CUDA
  backend, FLAGs its include folder; --nccl: NCCL beside it.

Each block is one of these (a marker, an HTML comment on the line just
before the fence, says which when its text does not):
  a complete program      it defines `int main(`: compiled as written (its
                          main renamed, inside a namespace of its own);
  statements (default)    the body of a function whose parameters the marker
                          declares:  <!-- cpp-check: given nn::Sequential& model, Rows train -->
  expressions             one expression per line (a list of constructors):
                          <!-- cpp-check: expressions -->
  declarations            at namespace scope (functions, templates):
                          <!-- cpp-check: declarations -->
Markers may also name a backend the block needs beyond what its #include
lines say (`needs mpi`, `needs cuda`, `needs nccl`), separated by `;`:
  <!-- cpp-check: needs mpi; given strata::MultiWorkerMirroredStrategy& strategy -->
A block whose backend this build lacks is skipped (counted, not failed).

Blocks are grouped into few translation units (-fsyntax-only -O0), compiled
in parallel; #line directives make every error name the .md file and line.
Exit 0: all compiled; 1: a block does not (its errors printed)."""
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys
import time

FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*cpp-check:(.*?)-->\s*$", re.S)
INCLUDE = re.compile(r"^\s*#\s*include\s*[<\"]([^>\"]+)[>\"]")

# What every snippet may take for granted: the usual headers and names
# (a complete program must include what it uses: programs come first in
# their translation unit, before this prelude).
PRELUDE = """
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>
#include <strata/strata.hpp>
#include <strata/data/dataset.hpp>
#include <strata/data/split.hpp>
#include <strata/data/mnist.hpp>
#include <strata/strategy/by_name.hpp>
#include <strata/strategy/parameter_server.hpp>
"""
PRELUDE_NN = "#include <strata/nn.hpp>\nnamespace nn = strata::nn;\n"
PRELUDE_MPI = """
#include <strata/strategy/by_name_mpi.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>
#include <strata/ps/mpi.hpp>
"""
PRELUDE_CUDA = "#include <strata/cuda.hpp>\n"
PRELUDE_NCCL = "#include <strata/nccl.hpp>\n"
# Names a marker's `given` may use for the datasets and models of the docs.
PRELUDE_NAMES = """
namespace docs_check {
using Images = strata::Tensor<float>;                 // [N, 28, 28]
using Labels = strata::Tensor<std::int32_t>;          // [N]
using Rows = decltype(strata::data::from_tensor_slices(Images{}, Labels{}));  // (image, label) rows; .batch(n) keeps the type
}  // namespace docs_check
using docs_check::Images;
using docs_check::Labels;
using docs_check::Rows;
"""


def needs_of(code, marker_needs):
    """The backends a block needs: from its #include lines and its marker."""
    needs = set(marker_needs)
    for line in code.splitlines():
        m = INCLUDE.match(line)
        if not m:
            continue
        h = m.group(1)
        if h in ("strata/nccl.hpp", "strata/nccl_mpi.hpp") or h.startswith("strata/comm/nccl"):
            needs.add("nccl")
        if h == "strata/cuda.hpp" or h.startswith("strata/cuda/"):
            needs.add("cuda")
        if h in ("strata/strategy/multi_worker.hpp", "strata/strategy/by_name_mpi.hpp", "strata/ps/mpi.hpp",
                 "strata/strategy/multi_worker_pipeline.hpp", "strata/strategy/mpi.hpp",
                 "strata/nccl_mpi.hpp") or h.startswith("strata/comm/mpi"):
            needs.add("mpi")
        if h == "strata/nn.hpp" or h.startswith("strata/nn/"):
            needs.add("nn")
    if re.search(r"\bnn::", code):  # strata/nn without naming its header (the prelude includes it)
        needs.add("nn")
    if "nccl" in needs:
        needs.add("cuda")
    return needs


def parse_marker(text):
    kind, given, needs = None, "", set()
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        if part.startswith("given "):
            given = part[len("given "):].strip()
        elif part.startswith("needs "):
            needs.update(part[len("needs "):].split())
        elif part in ("expressions", "declarations", "statements"):
            kind = part
        else:
            raise ValueError(f"unknown cpp-check marker part '{part}'")
    return kind, given, needs


def blocks_of(path, root):
    """(rel path, line of the first code line, code, kind, given, needs) for each ```cpp block."""
    text = open(path, encoding="utf-8").read()
    rel = os.path.relpath(path, root)
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) != "cpp":
            continue
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        kind, given, needs = None, "", set()
        mk = MARKER.search(before)
        if mk:
            kind, given, needs = parse_marker(mk.group(1))
        code = m.group(2)
        if kind is None:
            kind = "program" if re.search(r"^\s*int\s+main\s*\(", code, re.M) else "statements"
        line = text[:m.start()].count("\n") + 2
        out.append((rel, line, code, kind, given, needs_of(code + "\n" + given, needs)))
    return out


def split_includes(code, line):
    """The block's #include lines, and the rest as (line number, text) pairs."""
    incs, rest = [], []
    for i, l in enumerate(code.splitlines()):
        (incs if INCLUDE.match(l) else rest).append((line + i, l))
    return incs, rest


def emit_lines(pairs, rel, transform=lambda s: s):
    out = []
    prev = None
    for n, l in pairs:
        if prev is None or n != prev + 1:
            out.append(f'#line {n} "{rel}"')
        out.append(transform(l))
        prev = n
    return out


def expression_line(l):
    """`nn::Dense{128}   // comment` -> `nn::Dense{128};   // comment`."""
    code, sep, comment = l.partition("//")
    if not code.strip():
        return l
    return code.rstrip() + ";" + (" " * (len(code) - len(code.rstrip())) + sep + comment if sep else "")


def translation_unit(blocks, have, backends):
    progs = [b for b in blocks if b[3] == "program"]
    snippets = [b for b in blocks if b[3] != "program"]
    out = []
    for i, (rel, line, code, kind, given, needs) in enumerate(progs):
        incs, rest = split_includes(code, line)
        out += emit_lines(incs, rel)
        out.append(f"namespace docs_program_{i} {{")
        out += emit_lines(rest, rel, lambda s: re.sub(r"^(\s*int\s+)main(\s*\()", r"\1main_\2", s))
        out.append(f"}}  // namespace docs_program_{i}")
    out.append("#line 1 \"(check_blocks.py prelude)\"")
    prelude = PRELUDE + (PRELUDE_NN if have["nn"] else "")
    if backends:
        prelude += (PRELUDE_MPI if have["mpi"] else "") + (PRELUDE_CUDA if have["cuda"] else "")
        prelude += PRELUDE_NCCL if have["nccl"] else ""
    out += (prelude + PRELUDE_NAMES).splitlines()
    for i, (rel, line, code, kind, given, needs) in enumerate(snippets):
        incs, rest = split_includes(code, line)
        out += emit_lines(incs, rel)
        out.append(f"namespace docs_block_{i} {{")
        if kind == "declarations":
            out += emit_lines(rest, rel)
        else:
            out.append(f"[[maybe_unused]] void block({given}) {{")
            out += emit_lines(rest, rel, expression_line if kind == "expressions" else (lambda s: s))
            out.append("}")
        out.append(f"}}  // namespace docs_block_{i}")
    return "\n".join(out) + "\n"


def main():
    args = sys.argv[1:]
    if "--" not in args or len(args) < 3:
        print(__doc__)
        return 2
    sep = args.index("--")
    opts, compiler = args[:sep], args[sep + 1:]
    docs_dir, out_dir = os.path.abspath(opts[0]), os.path.abspath(opts[1])
    have = {"nn": "--nn" in opts, "mpi": "--mpi" in opts, "nccl": "--nccl" in opts}
    cuda_flags = []
    if "--cuda" in opts:
        have["cuda"] = True
        i = opts.index("--cuda") + 1
        while i < len(opts) and not opts[i].startswith("--"):
            cuda_flags.append(opts[i])
            i += 1
    else:
        have["cuda"] = False
    nn_flags = []
    if have["nn"]:  # cblas.h where pkg-config says (Debian has it on the default path too)
        r = subprocess.run(["pkg-config", "--cflags", "openblas"], capture_output=True, text=True)
        nn_flags = shlex.split(r.stdout) if r.returncode == 0 else []
    mpi_flags = []
    if have["mpi"]:
        r = subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True)
        if r.returncode != 0:
            print("--mpi given but `mpicxx --showme:compile` failed: " + r.stderr)
            return 1
        mpi_flags = shlex.split(r.stdout) + ["-DOMPI_SKIP_MPICXX=1"]

    root = os.path.dirname(os.path.abspath(docs_dir))
    files = sorted(glob.glob(os.path.join(docs_dir, "*.md")) + glob.glob(os.path.join(docs_dir, "strategies", "*.md")))
    blocks = [b for f in files for b in blocks_of(f, root)]
    skipped = [b for b in blocks if not all(have.get(n, False) for n in b[5])]
    run = [b for b in blocks if b not in skipped]

    # Translation units: the blocks needing a backend by backend; the others
    # in two halves by file (2 cores: two compilers at once).
    # Two translation units (two cores): the files alternately, and every
    # block that needs a backend in the second, compiled with the backends'
    # flags (the build's config.hpp says which it has).
    groups = {}
    for b in run:
        key = "backends" if b[5] - {"nn"} else ("core", "backends")[files.index(os.path.join(root, b[0])) % 2]
        groups.setdefault(key, []).append(b)

    os.makedirs(out_dir, exist_ok=True)
    jobs = []
    for key, bs in sorted(groups.items()):
        src = os.path.join(out_dir, f"docs_{key}.cpp")
        with open(src, "w", encoding="utf-8") as f:
            f.write(translation_unit(bs, have, key == "backends"))
        flags = list(compiler) + ["-std=c++20", "-O0", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                                  "-Wno-unused", "-Wno-return-type"] + nn_flags
        if key == "backends":
            flags += (cuda_flags if have["cuda"] else []) + mpi_flags
        jobs.append((key, bs, flags + [src]))

    start = time.monotonic()
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("STRATA_DOCS_JOBS", "2"))) as pool:
        futures = {pool.submit(subprocess.run, cmd, capture_output=True, text=True, cwd=root): (key, bs)
                   for key, bs, cmd in jobs}
        for fut in concurrent.futures.as_completed(futures):
            key, bs = futures[fut]
            r = fut.result()
            where = ", ".join(sorted({f"{b[0]}:{b[1] - 1}" for b in bs}))
            if r.returncode != 0:
                failed += 1
                print(f"FAILED: the blocks of translation unit '{key}' ({where}) do not compile:\n{r.stderr[:6000]}")
            else:
                print(f"ok: {len(bs)} block(s) in '{key}'")
    for b in skipped:
        print(f"skipped (this build has no {', '.join(sorted(n for n in b[5] if not have.get(n)))}): {b[0]}:{b[1] - 1}")
    print(f"{len(run)} block(s) of {len(files)} file(s) checked in {len(jobs)} compiler run(s), "
          f"{len(skipped)} skipped, {time.monotonic() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
