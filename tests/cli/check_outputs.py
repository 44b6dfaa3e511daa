#!/usr/bin/env python3
"""Runs an example that writes files (--csv, --tensorboard, --trace) and checks them.

    check_outputs.py [--mnist] STATUS WORDS [CHECK...] -- PROGRAM [ARGS...]

Runs PROGRAM in a fresh temporary directory, every "{dir}" in its ARGS
replaced by that directory, and passes when it ends as check_cli.py checks
(exit STATUS, every '|'-separated part of WORDS printed; --mnist: the real
MNIST, a skip reported as 77) and every CHECK holds (NAME: a path in the
temporary directory):

  --csv NAME ROWS COLUMNS   a CSV whose header is "epoch," then COLUMNS
                            (comma-separated), then ROWS rows, epochs
                            0..ROWS-1, every value a number
  --events NAME EPOCHS TAGS TensorBoard event files under NAME, read by the
                            reader that is not strata's (tests/tensorboard/
                            read_events.py, by /usr/bin/python3 or
                            $STRATA_TENSORBOARD_READER): each of TAGS
                            (comma-separated "folder/tag", e.g.
                            train/epoch_loss) written at steps 0..EPOCHS-1
  --trace NAME TRACKS       a trace-event JSON file that tests/trace/
                            check_trace.py accepts (it parses; spans nest
                            on each track), holding each of TRACKS
                            (comma-separated "PID:thread name", e.g.
                            1:replica 0) with training steps or spans
  --absent NAME             nothing there (a worker that is not the chief
                            wrote nothing)
  --file NAME               a file there that is not empty (e.g. --save's)
"""
import csv
import glob
import math
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_cli  # noqa: E402 (next to this file)

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(why):
    print(f"FAIL: {why}")
    return 1


def system_python():
    """Debian's Python (with its python3-protobuf), else this one."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def check_csv(path, rows, columns):
    if not os.path.isfile(path):
        return fail(f"{path} was not written")
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    want = ["epoch"] + [c for c in columns.split(",") if c]
    print(f"{path}:\n" + "\n".join(",".join(r) for r in table))
    if not table or table[0] != want:
        return fail(f"{path}: header {table[0] if table else None}, expected {want}")
    if len(table) - 1 != rows:
        return fail(f"{path}: {len(table) - 1} rows, expected {rows} (one per epoch)")
    for i, row in enumerate(table[1:]):
        if len(row) != len(want) or row[0] != str(i):
            return fail(f"{path}: row {i + 1} is {row}: expected epoch {i} and {len(want) - 1} values")
        try:
            values = [float(v) for v in row[1:]]
        except ValueError:
            return fail(f"{path}: row {i + 1} holds a value that is not a number: {row}")
        if not all(math.isfinite(v) for v in values):
            return fail(f"{path}: row {i + 1} holds a value that is not finite: {row}")
    return 0


def check_events(path, epochs, tags):
    files = sorted(glob.glob(os.path.join(path, "*", "events.out.tfevents.*")))
    if not files:
        return fail(f"no event files under {path}")
    reader = os.environ.get("STRATA_TENSORBOARD_READER")
    cmd = shlex.split(reader) if reader else [system_python(), os.path.join(HERE, "..", "tensorboard", "read_events.py")]
    r = subprocess.run(cmd + files, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return fail(f"the event reader exited {r.returncode}: {r.stdout}{r.stderr}")
    steps = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if parts[0] == "version":
            continue
        folder, step, tag, value = parts
        float(value)
        steps.setdefault(f"{folder}/{tag}", []).append(int(step))
    print(f"{path}: " + ", ".join(f"{k} at {v}" for k, v in sorted(steps.items())))
    for tag in [t for t in tags.split(",") if t]:
        if steps.get(tag) != list(range(epochs)):
            return fail(f"{path}: {tag} is written at steps {steps.get(tag)}, expected {list(range(epochs))}")
    return 0


def check_trace(path, tracks):
    if not os.path.isfile(path):
        return fail(f"{path} was not written")
    r = subprocess.run([system_python(), os.path.join(HERE, "..", "trace", "check_trace.py"), path],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return fail(f"check_trace.py refused {path}: {r.stdout}{r.stderr}")
    named = {}
    for line in r.stdout.splitlines():
        if line.startswith("track "):
            _, pid, tid, name = line.split(" ", 3)
            named[f"{pid}:{name}"] = (pid, tid)
    print(f"{path}: tracks " + ", ".join(sorted(named)))
    for want in [t for t in tracks.split(",") if t]:
        if want not in named:
            return fail(f"{path}: no track {want!r} (it has {sorted(named)})")
        pid, tid = named[want]
        if not any(l.startswith(f"count {pid} {tid} ") for l in r.stdout.splitlines()):
            return fail(f"{path}: track {want!r} holds no span")
    return 0


def main(argv):
    mnist = bool(argv) and argv[0] == "--mnist"
    if mnist:
        argv = argv[1:]
    if "--" not in argv or argv.index("--") < 2:
        print(__doc__)
        return 2
    at = argv.index("--")
    status, words, checks, cmd = int(argv[0]), argv[1], argv[2:at], argv[at + 1:]
    env = dict(os.environ)
    if not mnist:
        env["STRATA_MNIST_DIR"] = "/nonexistent/strata-cli-test-no-mnist"
    with tempfile.TemporaryDirectory(prefix="strata-cli-out-") as d:
        cmd = [a.replace("{dir}", d) for a in cmd]
        r = check_cli.check(status, [w for w in words.split("|") if w], cmd, env, mnist)
        if r != 0:
            return r
        i = 0
        while i < len(checks):
            kind = checks[i]
            if kind == "--csv" and i + 3 < len(checks):
                r = check_csv(os.path.join(d, checks[i + 1]), int(checks[i + 2]), checks[i + 3])
                i += 4
            elif kind == "--events" and i + 3 < len(checks):
                r = check_events(os.path.join(d, checks[i + 1]), int(checks[i + 2]), checks[i + 3])
                i += 4
            elif kind == "--trace" and i + 2 < len(checks):
                r = check_trace(os.path.join(d, checks[i + 1]), checks[i + 2])
                i += 3
            elif kind == "--file" and i + 1 < len(checks):
                path = os.path.join(d, checks[i + 1])
                r = 0 if os.path.isfile(path) and os.path.getsize(path) > 0 else fail(f"{path} was not written")
                i += 2
            elif kind == "--absent" and i + 1 < len(checks):
                path = os.path.join(d, checks[i + 1])
                r = fail(f"{path} exists: only the chief writes") if os.path.exists(path) else 0
                i += 2
            else:
                print(__doc__)
                return 2
            if r != 0:
                return r
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
