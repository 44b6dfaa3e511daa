"""Figures of docs/gpu-coverage.md from gcov's JSON of gpu_step's runs.
  python3 measure.py ROOT standin.gcov.json.gz [host.gcov.json.gz [mirrored.gcov.json.gz]]   (ROOT: the repository)
Figure 1: of the lines a GPU step executes, the share CI executes.
Figure 2: of the numeric lines a GPU step runs on the device, the share CI executes.
The GPU step's lines: the shared lines the stand-in run executes (it takes a
GPU's branches) + the bodies a GPU reaches (gpu_lines.BODIES) + the GPU-only
lines (gpu_lines.GPU_ONLY, by reading; never executed by CI).
The several-replica step (mirrored.gcov.json.gz: gpu_step mirrored), the
same way from its own run: GPU_ONLY less NOT_IN_MLP, plus MIRRORED_ONLY;
BODIES plus MIRRORED_BODIES."""
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


def gpu_only(entries):
    """[(rel, function, side, line number)] of `entries` (GPU_ONLY's form)."""
    out = []
    for rel, fn, side, texts in entries:
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


def bodies(standin, entries):
    """[(rel, function, side, line number)]: the bodies' (`entries`, BODIES' form) executable lines a GPU step reaches."""
    out = []
    for rel, fn, side, anchors, single in entries:
        src = source(rel)
        at = 0
        for a in anchors:
            at = find(src, a, at, rel)
        executed = standin.get(rel, {})
        out += [(rel, fn, side, n) for n in body_range(src, at, single) if executed.get(n, 0) > 0]
    return out


def shared(standin, body_lines=()):
    """The executed lines outside NOT_SHARED_PREFIXES, less NOT_ON_GPU and `body_lines` (bodies outside bodies/)."""
    drop = set(body_lines)
    for rel, text in G.NOT_ON_GPU:
        drop.add((rel, find(source(rel), text, 0, rel) + 1))
    return {(rel, n) for rel, lines in standin.items() if not rel.startswith(G.NOT_SHARED_PREFIXES)
            for n, c in lines.items() if c > 0 and (rel, n) not in drop}


def step_lines(run, gpu_entries, body_entries):
    """(S, B, X, step, numeric) of a GPU step from its stand-in run."""
    B = bodies(run, body_entries)
    S = shared(run, {(r, n) for r, _, _, n in B})
    X = gpu_only(gpu_entries)
    executed = {(r, n) for r, lines in run.items() for n, c in lines.items() if c > 0}
    for r, fn, _, n in X:
        if (r, n) in executed:
            sys.exit(f"measure.py: {r}:{n} ({fn}) is listed as GPU-only but the stand-in run executes it: update gpu_lines.py")
    step = S | {(r, n) for r, _, _, n in B} | {(r, n) for r, _, _, n in X}
    numeric = {(r, n) for r, _, s, n in B if s == "device"} | {(r, n) for r, _, s, n in X if s == "device"}
    assert len(step) == len(S) + len(B) + len(X), "a line counted twice"
    return S, B, X, step, numeric


def report(label, run, S, B, X, step, numeric):
    ci = {(r, n) for r, lines in run.items() for n, c in lines.items() if c > 0}
    f1 = len(step & ci) / len(step)
    f2 = len(numeric & ci) / len(numeric)
    print(f"\nCI = {label}:")
    print(f"  figure 1: {len(step & ci)}/{len(step)} = {100 * f1:.1f}% of the lines a GPU step executes are executed by CI"
          f"  (shared {len(S & ci)}/{len(S)}, bodies {len({(r, n) for r, _, _, n in B} & ci)}/{len(B)}, "
          f"GPU-only {len({(r, n) for r, _, _, n in X} & ci)}/{len(X)})")
    print(f"  figure 2: {len(numeric & ci)}/{len(numeric)} = {100 * f2:.1f}% of the numeric GPU code is executed by CI")


def listing(B, X):
    for title, rows in (("GPU-only lines (by reading)", X), ("body lines a GPU step reaches", B)):
        by = defaultdict(int)
        for rel, fn, side, _ in rows:
            by[(rel, fn, side)] += 1
        print(f"\n{title}:")
        for (rel, fn, side), k in by.items():
            print(f"  {rel:30s} {fn:40s} {side:6s} {k:3d}")


def summary(title, S, B, X, step, numeric):
    dirs = defaultdict(int)
    for rel, _ in S:
        dirs[rel.split("/")[0]] += 1
    print(f"{title}: {len(step)} lines = {len(S)} shared (stand-in run, outside bodies/host/cuda) + {len(B)} of bodies "
          f"({sum(1 for b in B if b[2] == 'device')} on the device) + {len(X)} GPU-only "
          f"({sum(1 for x in X if x[2] == 'device')} on the device)")
    print("  shared by directory: " + ", ".join(f"{d} {k}" for d, k in sorted(dirs.items(), key=lambda x: -x[1])))
    print(f"numeric GPU code: {len(numeric)} lines")


standin = load(sys.argv[2])
S, B, X, step, numeric = step_lines(standin, G.GPU_ONLY, G.BODIES)
summary("GPU step", S, B, X, step, numeric)
listing(B, X)
for label, path in zip(("stand-in (DeviceStandIn, Where::StandIn)", "host compute (HostCompute, Where::Host)"),
                       sys.argv[2:4]):
    report(label, load(path), S, B, X, step, numeric)

if len(sys.argv) > 4:
    mirrored = load(sys.argv[4])
    entries = [e for e in G.GPU_ONLY if e[1] not in G.NOT_IN_MLP] + G.MIRRORED_ONLY
    S, B, X, step, numeric = step_lines(mirrored, entries, G.BODIES + G.MIRRORED_BODIES)
    print("\n\n=== the several-replica step: the MLP under MirroredStrategy{virtual_gpus(0, 2)}, one sum and by buckets ===")
    summary("GPU step", S, B, X, step, numeric)
    listing(B, [x for x in X if any(x[0] == e[0] and x[1] == e[1] for e in G.MIRRORED_ONLY)])
    report("stand-in, device team over the host runtime (mirrored)", mirrored, S, B, X, step, numeric)
