#!/usr/bin/env python3
"""Runs an example with a command line and checks how it ends.

    check_cli.py STATUS WORDS -- PROGRAM [ARGS...]

Passes when PROGRAM exits with STATUS and every '|'-separated part of WORDS
occurs in what it printed (stdout and stderr together; any run of spaces and
line breaks matches one space). MNIST is pointed at
a directory that does not exist (STRATA_MNIST_DIR), so a run that got past
the command line to loading data fails with status 1 instead of the
expected one: a bad-argument test also proves the program stopped first.
With --mnist the real data set is used, and a run that says it skipped
(exit 77, "SKIP") is reported to Meson as skipped. With --gz-mnist, MNIST is
pointed at a fresh directory that holds only the four files' names with .gz
(empty: what a download of the published files leaves before gunzip).
Each run has 60 s.
"""
import os
import subprocess
import sys
import tempfile

MNIST_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"]


def main(argv):
    mnist = gz = False
    if argv and argv[0] == "--mnist":
        mnist = True
        argv = argv[1:]
    elif argv and argv[0] == "--gz-mnist":
        gz = True
        argv = argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    status, words, cmd = int(argv[0]), argv[1].split("|"), argv[3:]
    env = dict(os.environ)
    if not mnist:
        env["STRATA_MNIST_DIR"] = "/nonexistent/strata-cli-test-no-mnist"
    with tempfile.TemporaryDirectory(prefix="strata-cli-gz-") as gz_dir:
        if gz:
            for f in MNIST_FILES:
                open(os.path.join(gz_dir, f + ".gz"), "wb").close()
            env["STRATA_MNIST_DIR"] = gz_dir
        return check(status, words, cmd, env, mnist)


def check(status, words, cmd, env, mnist):
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"FAIL: {cmd} ran for more than 60 s")
        return 1
    out = r.stdout + r.stderr
    print(f"$ {' '.join(cmd)}\n{out}(exit status {r.returncode})")
    if mnist and r.returncode == 77 and "SKIP" in out:
        return 77
    if r.returncode != status:
        print(f"FAIL: expected exit status {status}, got {r.returncode}")
        return 1
    flat = " ".join(out.split())  # --help wraps its lines: words are matched across line breaks
    missing = [w for w in words if " ".join(w.split()) not in flat]
    if missing:
        print(f"FAIL: the output does not contain {missing}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
