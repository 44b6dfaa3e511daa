"""Figures of docs/gpu-coverage.md from gcov's JSON of gpu_step's runs.
  python3 measure.py ROOT standin.gcov.json.gz [host.gcov.json.gz]   (ROOT: the repository)
Figure 1: of the lines a GPU step executes, the share CI executes.
Figure 2: of the numeric lines a GPU step runs on the device, the share CI executes.
The GPU step's lines: the shared lines the stand-in run executes (it takes a
GPU's branches) + the bodies a GPU reaches (gpu_lines.BODIES) + the GPU-only
lines (gpu_lines.GPU_ONLY, by reading; never executed by CI)."""
import gzip
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_lines as G  # noqa: E402

root = sys.argv[1]
inc = os.path.join(root, "include", "strata") + "/"


def load(path):
    """{file under include/strata: {line: count}} over gcov's executable lines."""
    out = defaultdict(dict)
    for f in json.load(gzip.open(path))["files"]:
        name = os.path.realpath(f["file"])
        if not name.startswith(inc):
            continue
        lines = out[name[len(inc):]]
        for ln in f["lines"]:
            lines[ln["line_number"]] = max(lines.get(ln["line_number"], 0), ln["count"])
    return out


def source(rel):
    with open(inc + rel) as fh:
        return fh.read().split("\n")


def find(src, text, start, rel):
    for i in range(start, len(src)):
        if text in src[i]:
            return i
    sys.exit(f"measure.py: '{text}' not found in {rel} after line {start + 1}: the CUDA code changed, update gpu_lines.py")


def gpu_only():
    """[(rel, function, side, line number)] of GPU_ONLY."""
    out = []
    for rel, fn, side, texts in G.GPU_ONLY:
        src = source(rel)
        at = find(src, texts[0], 0, rel)
        lines = [at]
        for t in texts[1:]:
            at = find(src, t, at + 1 if t != texts[0] else at, rel)
            lines.append(at)
        if len(set(lines)) != len(lines):
            sys.exit(f"measure.py: {rel} {fn}: two texts name one line")
        out += [(rel, fn, side, n + 1) for n in lines]
    return out


def body_range(src, first, single):
    if single:
        return [first + 1]
    depth, seen = 0, False
    for i in range(first, len(src)):
        for ch in src[i]:
            if ch == "{":
                depth += 1
                seen = True
            elif ch == "}":
                depth -= 1
        if seen and depth == 0:
            return list(range(first + 1, i + 2))
    sys.exit("measure.py: unbalanced braces")


def bodies(standin):
    """[(rel, function, side, line number)]: the bodies' executable lines a GPU step reaches."""
    out = []
    for rel, fn, side, anchors, single in G.BODIES:
        src = source(rel)
        at = 0
        for a in anchors:
            at = find(src, a, at, rel)
        executed = standin.get(rel, {})
        out += [(rel, fn, side, n) for n in body_range(src, at, single) if executed.get(n, 0) > 0]
    return out


def shared(standin):
    drop = set()
    for rel, text in G.NOT_ON_GPU:
        drop.add((rel, find(source(rel), text, 0, rel) + 1))
    return {(rel, n) for rel, lines in standin.items() if not rel.startswith(G.NOT_SHARED_PREFIXES)
            for n, c in lines.items() if c > 0 and (rel, n) not in drop}


standin = load(sys.argv[2])
S = shared(standin)
B = bodies(standin)
X = gpu_only()
step = S | {(r, n) for r, _, _, n in B} | {(r, n) for r, _, _, n in X}
numeric = {(r, n) for r, _, s, n in B if s == "device"} | {(r, n) for r, _, s, n in X if s == "device"}
assert len(step) == len(S) + len(B) + len(X), "a line counted twice"

print(f"GPU step: {len(step)} lines = {len(S)} shared (stand-in run, outside bodies/host/cuda) + {len(B)} of bodies "
      f"({sum(1 for b in B if b[2] == 'device')} on the device) + {len(X)} GPU-only "
      f"({sum(1 for x in X if x[2] == 'device')} on the device)")
print(f"numeric GPU code: {len(numeric)} lines")
by = defaultdict(int)
for rel, fn, side, _ in X:
    by[(rel, fn, side)] += 1
print("\nGPU-only lines (by reading):")
for (rel, fn, side), k in by.items():
    print(f"  {rel:30s} {fn:40s} {side:6s} {k:3d}")
byb = defaultdict(int)
for rel, fn, side, _ in B:
    byb[(rel, fn, side)] += 1
print("\nbody lines a GPU step reaches:")
for (rel, fn, side), k in byb.items():
    print(f"  {rel:30s} {fn:40s} {side:6s} {k:3d}")

for label, path in zip(("stand-in (DeviceStandIn, Where::StandIn)", "host compute (HostCompute, Where::Host)"),
                       sys.argv[2:4]):
    run = load(path)
    ci = {(r, n) for r, lines in run.items() for n, c in lines.items() if c > 0}
    f1 = len(step & ci) / len(step)
    f2 = len(numeric & ci) / len(numeric)
    print(f"\nCI = {label}:")
    print(f"  figure 1: {len(step & ci)}/{len(step)} = {100 * f1:.1f}% of the lines a GPU step executes are executed by CI"
          f"  (shared {len(S & ci)}/{len(S)}, bodies {len({(r, n) for r, _, _, n in B} & ci)}/{len(B)}, GPU-only 0/{len(X)})")
    print(f"  figure 2: {len(numeric & ci)}/{len(numeric)} = {100 * f2:.1f}% of the numeric GPU code is executed by CI")
