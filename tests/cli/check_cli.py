#!/usr/bin/env python3
"""Runs an example with a command line and checks how it ends.

    check_cli.py STATUS WORDS -- PROGRAM [ARGS...]

Passes when PROGRAM exits with STATUS and every '|'-separated part of WORDS
occurs in what it printed (stdout and stderr together). MNIST is pointed at
a directory that does not exist (STRATA_MNIST_DIR), so a run that got past
the command line to loading data fails with status 1 instead of the
expected one: a bad-argument test also proves the program stopped first.
With --mnist the real data set is used, and a run that says it skipped
(exit 77, "SKIP") is reported to Meson as skipped. Each run has 60 s.
"""
import os
import subprocess
import sys


def main(argv):
    mnist = False
    if argv and argv[0] == "--mnist":
        mnist = True
        argv = argv[1:]
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    status, words, cmd = int(argv[0]), argv[1].split("|"), argv[3:]
    env = dict(os.environ)
    if not mnist:
        env["STRATA_MNIST_DIR"] = "/nonexistent/strata-cli-test-no-mnist"
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
    missing = [w for w in words if w not in out]
    if missing:
        print(f"FAIL: the output does not contain {missing}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
