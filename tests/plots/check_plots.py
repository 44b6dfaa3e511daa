#!/usr/bin/env python3
"""Each bench/plot_*.py script runs on a small input and writes a PNG; a
malformed input is a one-line error (exit status 2), not a traceback.
Skipped (exit status 77, meson's skip) when matplotlib is not installed for
this interpreter: the plots are not a dependency of the library.

    /usr/bin/python3 tests/plots/check_plots.py [--keep DIR]

The inputs are written here: a pipeline_bench CSV, two CSVLogger
histories, an allreduce_bench table, a samples/s CSV, and trace-event JSON
of a 1F1B and a GPipe schedule simulated for 3 stages and 4 micro-batches
(one of them cut off as a killed run leaves it). The scripts run in this
process, one after the other (matplotlib imported once: about 3 s of CPU).
--keep DIR leaves the inputs and PNGs there to look at.
"""
import contextlib
import io
import json
import os
import runpy
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")

PIPELINE_CSV = """S,schedule,M,samples_per_s,idle_mean,idle_stages,theory
2,naive,1,15000.0,0.50,0.55;0.45,0.5000
2,naive,4,14000.0,0.52,0.55;0.49,0.5000
2,gpipe,1,15000.0,0.50,0.55;0.45,0.5000
2,gpipe,4,19000.0,0.25,0.30;0.20,0.2000
2,1f1b,1,15000.0,0.50,0.55;0.45,0.5000
2,1f1b,4,19500.0,0.24,0.28;0.20,0.2000
"""

HISTORY_A = """epoch,accuracy,loss,val_accuracy,val_loss
0,0.91,0.30,0.94,0.20
1,0.95,0.16,0.96,0.13
2,0.96,0.11,0.97,0.10
"""
HISTORY_B = """epoch;accuracy;loss
0;0.90;0.33
1;0.94;NA
2;0.96;0.12
"""

ALLREDUCE_TABLE = """# strata all-reduce over CPU replicas (in place, sum)
# replicas 2: DRAM bandwidth, 2 threads each reading and writing its own 256 MiB: 50.9 GB/s
#  size(B)        count   type   p algo      time(us)    algbw    busbw    bound   %bound  wrong
      1024          256  float   2 direct         0.3     3.61     3.61    29.90      12%      0
      4096         1024  float   2 direct         0.3    12.18    12.18    41.50      29%      0
     16384         4096  float   2 direct         0.5    30.61    30.61    56.56      54%      0
      1024          256  float   2 ring           0.5     2.20     2.20    35.66       6%      0
      4096         1024  float   2 ring           0.6     6.54     6.54    42.65      15%      0
     16384         4096  float   2 ring           1.0    16.28    16.28    54.99      30%      0
"""

SCALING_CSV = """# made up for the test
model,strategy,replicas,samples_per_s,min,max
mlp,one_device,1,100000,95000,105000
mlp,mirrored,1,100000,95000,105000
mlp,mirrored,2,170000,160000,180000
mlp,mirrored,4,250000,230000,260000
"""


TRAIN_BENCH = """# training throughput as examples/mnist_mlp measures it: fit() of 5 epoch(s) of 60000 examples, MNIST
 model         strategy  replicas       median/s      min/s      max/s   speedup  efficiency
   mlp       one_device         1         167615     146852     171673     1.00x        100%
   mlp         mirrored         2         235185     224820     242435     1.40x         70%
"""


def simulate(schedule, stages=3, micro=4, f=100.0, b=200.0, steps=2):
    """Trace events of a pipeline: each stage a track, F<m> then B<m> boxes at
    the times a schedule with these forward/backward durations would give."""
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "worker 0"}},
              {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "caller"}}]
    for s in range(stages):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": s + 1, "args": {"name": f"stage {s}"}})
    t0 = 0.0
    for step in range(steps):
        # The order each stage runs its work in: GPipe all forwards then all backwards,
        # 1F1B (stages - s - 1) warm-up forwards, then one forward one backward.
        orders = []
        for s in range(stages):
            if schedule == "gpipe":
                orders.append([("F", m) for m in range(micro)] + [("B", m) for m in range(micro)])
            else:
                warm = min(stages - s - 1, micro)
                o = [("F", m) for m in range(warm)]
                fi, bi = warm, 0
                while bi < micro:
                    if fi < micro:
                        o.append(("F", fi))
                        fi += 1
                    o.append(("B", bi))
                    bi += 1
                orders.append(o)
        done, free = {}, [t0] * stages
        pending = [list(o) for o in orders]
        while any(pending):
            before = sum(map(len, pending))
            for s in range(stages):
                if not pending[s]:
                    continue
                kind, m = pending[s][0]
                dep = (kind, s - 1, m) if kind == "F" and s > 0 else ("B", s + 1, m) if kind == "B" and s + 1 < stages \
                    else ("F", s, m) if kind == "B" else None
                if dep is not None and dep not in done:
                    continue
                start = max(free[s], done.get(dep, t0))
                end = start + (f if kind == "F" else b)
                done[(kind, s, m)] = end
                free[s] = end
                pending[s].pop(0)
                events.append({"ph": "X", "name": f"{kind}{m}", "cat": "forward" if kind == "F" else "backward",
                               "ts": start, "dur": end - start, "pid": 0, "tid": s + 1,
                               "args": {"stage": s, "micro_batch": m}})
            if sum(map(len, pending)) == before:
                raise RuntimeError(f"the {schedule} order deadlocks")
        end = max(free)
        events.append({"ph": "X", "name": "update", "cat": "update", "ts": end, "dur": 50.0, "pid": 0, "tid": 0,
                       "args": {}})
        events.append({"ph": "X", "name": "step", "cat": "step", "ts": t0, "dur": end + 60.0 - t0, "pid": 0, "tid": 0,
                       "args": {"epoch": 0, "step": step}})
        events.append({"ph": "i", "name": "marker", "cat": "callback", "ts": end + 55.0, "pid": 0, "tid": 0, "s": "t"})
        t0 = end + 80.0
    return events


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def main(argv):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"check_plots.py: skipped: matplotlib is not installed for {sys.executable} "
              "(Debian: apt-get install python3-matplotlib)")
        return 77
    keep = argv[argv.index("--keep") + 1] if "--keep" in argv else None
    d = keep or tempfile.mkdtemp(prefix="strata-plots-")
    os.makedirs(d, exist_ok=True)
    p = lambda name: os.path.join(d, name)
    inputs = {"pipeline.csv": PIPELINE_CSV, "mirrored.csv": HISTORY_A, "central.csv": HISTORY_B,
              "allreduce.txt": ALLREDUCE_TABLE, "scaling.csv": SCALING_CSV, "train_bench.txt": TRAIN_BENCH,
              "bad.csv": "S,schedule,M\n2,gpipe,x\n", "empty.txt": "",
              "no_ts.json": '[{"ph":"X","name":"F0","cat":"forward","dur":5,"pid":0,"tid":1}]'}
    for name, text in inputs.items():
        with open(p(name), "w", encoding="utf-8") as f:
            f.write(text)
    with open(p("1f1b.json"), "w", encoding="utf-8") as f:
        json.dump(simulate("1f1b"), f)
    cut = json.dumps(simulate("gpipe"), indent=0)
    with open(p("gpipe.json"), "w", encoding="utf-8") as f:  # as a killed run leaves it: no ']', half an event
        f.write(cut[:cut.rindex("{") + 20])
    sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
    sys.path.insert(0, BENCH)  # the scripts import plot_common
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def run(script, *args):
        """Runs a script in this process (matplotlib is imported once): its exit status, stdout, stderr."""
        path = os.path.join(BENCH, script)
        sys.argv = [path, *args]
        out, err = io.StringIO(), io.StringIO()
        status = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            except Exception:  # noqa: BLE001 - a traceback is the failure this test looks for
                status = 1
                err.write(traceback.format_exc())
        plt.close("all")
        return subprocess.CompletedProcess(sys.argv, status, out.getvalue(), err.getvalue())

    good = [
        ("plot_pipeline.py", [p("pipeline.csv"), p("pipeline.png")], "pipeline.png"),
        ("plot_history.py", [p("mirrored.csv"), p("central.csv"), "--label", "mirrored", "-o", p("history.png")],
         "history.png"),
        ("plot_allreduce.py", [p("allreduce.txt"), "-o", p("allreduce.png")], "allreduce.png"),
        ("plot_scaling.py", [p("scaling.csv"), "-o", p("scaling.png")], "scaling.png"),
        ("plot_scaling.py", [p("train_bench.txt"), "--cores", "1", "-o", p("table.png")], "table.png"),
        ("plot_trace.py", [p("1f1b.json"), "-o", p("trace.png")], "trace.png"),
        ("plot_trace.py", [p("1f1b.json"), "--compare", p("gpipe.json"), "--pipeline", "--steps", "1:1",
                           "-o", p("schedules.png")], "schedules.png"),
        ("plot_trace.py", [p("gpipe.json"), "--window", "0.1:0.9", "-o", p("window.png")], "window.png"),
    ]
    bad = [
        ("plot_pipeline.py", [p("bad.csv"), p("x.png")], "no column"),
        ("plot_history.py", [p("empty.txt"), "-o", p("x.png")], "no header"),
        ("plot_allreduce.py", [p("empty.txt"), "-o", p("x.png")], "no table"),
        ("plot_scaling.py", [p("pipeline.csv"), "-o", p("x.png")], "no column"),
        ("plot_trace.py", [p("pipeline.csv"), "-o", p("x.png")], "not a JSON array"),
        ("plot_trace.py", [p("no_ts.json"), "-o", p("x.png")], "event 0 ('X') lacks or mangles a field"),
        ("plot_trace.py", [p("1f1b.json"), "--steps", "5:9", "-o", p("x.png")], "outside the 2 step(s)"),
        ("plot_trace.py", [p("pipeline.csv"), "--steps", "x", "-o", p("x.png")], "--steps is A:B"),
    ]
    failures = []
    for script, args, out in good:
        r = run(script, *args)
        size = png_size(p(out)) if os.path.exists(p(out)) else None
        if r.returncode != 0 or size is None or not 1000 <= size[0] <= 2000:
            failures.append(f"{script} {' '.join(args)}: status {r.returncode}, PNG {size}\n{r.stdout}{r.stderr}")
        else:
            print(f"ok: {script} -> {out} {size[0]} x {size[1]}")
    for script, args, want in bad:
        r = run(script, *args)
        if r.returncode != 2 or want not in r.stderr or "Traceback" in r.stderr:
            failures.append(f"{script} {' '.join(args)}: want status 2 and '{want}', got {r.returncode}: {r.stderr}")
        else:
            print(f"ok: {script} refuses: {r.stderr.strip()}")
    if not keep:
        shutil.rmtree(d)
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
