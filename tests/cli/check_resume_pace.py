#!/usr/bin/env python3
"""A resumed run's throughput counts only what it trained (issue 48).

    check_resume_pace.py TOTAL UNIT -- PROGRAM [ARGS...]

Runs PROGRAM ARGS --checkpoint-dir D (a fresh directory), stops it with
SIGTERM once a checkpoint is in D (exit 75: preempted, saved), runs the
same command again and passes when that run exits 0 and says "resumed: N
UNIT trained here" with 0 < N < TOTAL (the whole run's count). A program
that skips (exit 77, "SKIP") is reported as skipped.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    total, unit, cmd = int(argv[0]), argv[1], argv[3:]
    with tempfile.TemporaryDirectory(prefix="strata-cli-resume-") as d:
        ckpt = os.path.join(d, "ckpt")
        cmd = cmd + ["--checkpoint-dir", ckpt]
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline and first.poll() is None:
            if os.path.isdir(ckpt) and any(f.startswith("ckpt-") and f.endswith(".strata") for f in os.listdir(ckpt)):
                break
            time.sleep(0.02)
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
        try:
            out, _ = first.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            first.kill()
            print("FAIL: the first run did not end within 60 s of SIGTERM")
            return 1
        print(f"$ {' '.join(cmd)}  (SIGTERM after its first checkpoint)\n{out}(exit status {first.returncode})")
        if first.returncode == 77 and "SKIP" in out:
            return 77
        if first.returncode != 75:
            print(f"FAIL: the first run exited {first.returncode}, expected 75 (preempted; it ended before SIGTERM?)")
            return 1
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        print(f"$ {' '.join(cmd)}\n{out}(exit status {r.returncode})")
        if r.returncode != 0:
            print(f"FAIL: the resumed run exited {r.returncode}")
            return 1
        m = re.search(r"resumed: (\d+) " + re.escape(unit) + " trained here", out)
        if not m:
            print(f"FAIL: the resumed run does not say 'resumed: N {unit} trained here'")
            return 1
        n = int(m.group(1))
        if not 0 < n < total:
            print(f"FAIL: it counts {n} {unit} trained here; expected more than 0 and fewer than the run's {total}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
