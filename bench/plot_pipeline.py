#!/usr/bin/env python3
"""Plots pipeline_bench's CSV: throughput and idle fraction against the
micro-batch count, per stage count and schedule.

    build/bench/pipeline_bench --csv > docs/figures/pipeline-bubble.csv
    /usr/bin/python3 bench/plot_pipeline.py docs/figures/pipeline-bubble.csv \\
        docs/figures/pipeline-bubble.png [--title TEXT]

One row of two panels per stage count S: samples/s against the micro-batch
count M (log2 axis), one line per schedule; and the measured idle fraction
(mean over the stages, the per-stage range shaded) against M, the
theoretical bubble (S - 1)/(M + S - 1) dashed (naive: (S - 1)/S).
The CSV's columns: S,schedule,M,samples_per_s,idle_mean,idle_stages,theory
(idle_stages: the stages' fractions joined by ';').
"""
import argparse
import sys

from plot_common import COLORS, InputError, fail, number, pyplot, read_rows, save, thousands

COLUMNS = ["S", "schedule", "M", "samples_per_s", "idle_mean", "idle_stages", "theory"]
ORDER = ["naive", "gpipe", "1f1b"]


def load(path):
    """{S: {schedule: [(M, samples/s, idle mean, idle min, idle max, theory)]}} sorted by M."""
    out = {}
    for row in read_rows(path, COLUMNS):
        try:
            s, m = int(row["S"]), int(row["M"])
        except ValueError:
            raise InputError(f"{path}: S = {row['S']!r}, M = {row['M']!r}: both must be integers") from None
        per = [number(path, {"idle_stages": v}, "idle_stages") for v in row["idle_stages"].split(";") if v.strip()]
        mean = number(path, row, "idle_mean")
        out.setdefault(s, {}).setdefault(row["schedule"].strip(), []).append(
            (m, number(path, row, "samples_per_s"), mean, min(per, default=mean), max(per, default=mean),
             number(path, row, "theory")))
    for by_sched in out.values():
        for pts in by_sched.values():
            pts.sort()
    return out


def color(sched, scheds):
    return COLORS[ORDER.index(sched) if sched in ORDER else len(ORDER) + scheds.index(sched)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("csv", help="pipeline_bench --csv output")
    ap.add_argument("png", help="the PNG to write")
    ap.add_argument("--title", default="", help="figure title (default: says what is plotted)")
    ap.add_argument("--width", type=int, default=1400, help="PNG width in pixels (default 1400)")
    a = ap.parse_args()
    try:
        data = load(a.csv)
    except InputError as e:
        fail(str(e))
    plt = pyplot()
    stages = sorted(data)
    fig, axes = plt.subplots(len(stages), 2, figsize=(14, 4.2 * len(stages) + 1), squeeze=False)
    for row, s in enumerate(stages):
        scheds = sorted(data[s], key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
        sps_ax, idle_ax = axes[row]
        ms = sorted({p[0] for pts in data[s].values() for p in pts})
        theories = {}  # equal theory curves (gpipe and 1f1b share one) drawn once
        for sched in scheds:
            pts = data[s][sched]
            c = color(sched, scheds)
            m = [p[0] for p in pts]
            sps_ax.plot(m, [p[1] for p in pts], "o-", color=c, lw=2, label=sched)
            idle_ax.plot(m, [p[2] for p in pts], "o-", color=c, lw=2, label=f"{sched}: measured (stage mean)")
            idle_ax.fill_between(m, [p[3] for p in pts], [p[4] for p in pts], color=c, alpha=0.08, lw=0)
            theories.setdefault(tuple((p[0], round(p[5], 4)) for p in pts), []).append(sched)
        for curve, names in theories.items():
            c = color(names[0], scheds) if len(names) == 1 else "#444444"
            idle_ax.plot([p[0] for p in curve], [p[1] for p in curve], "--", color=c, lw=1.5,
                         label="theory: " + " = ".join(names))
        for ax in (sps_ax, idle_ax):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ms)
            ax.set_xticklabels([str(v) for v in ms])
            ax.set_xlabel("micro-batches per batch (M)")
        sps_ax.set_ylim(bottom=0)
        thousands(sps_ax.yaxis)
        sps_ax.set_ylabel("samples/s")
        sps_ax.set_title(f"S = {s} stages: training throughput")
        sps_ax.legend(loc="lower left")
        idle_ax.set_ylim(0, 1)
        idle_ax.set_ylabel("idle fraction of a step")
        idle_ax.set_title(f"S = {s} stages: idle (bubble) fraction; band: stages' range")
        idle_ax.legend(loc="upper right", ncol=2, fontsize=9)
    fig.suptitle(a.title or "pipeline_bench: throughput and idle fraction against the micro-batch count", fontsize=14)
    fig.tight_layout()
    save(fig, a.png, a.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
