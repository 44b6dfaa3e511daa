#!/usr/bin/env python3
"""Plots training histories (the CSV nn::CSVLogger writes) as loss and
accuracy curves, one line per file.

    build/examples/mnist_mlp --strategy mirrored --epochs 5 --csv mirrored.csv   (one per strategy)
    /usr/bin/python3 bench/plot_history.py mirrored.csv central.csv \\
        --label mirrored --label central_storage -o docs/figures/mnist-mlp-history.png

Each file: a header line "epoch,<log names in name order>" (',' or ';'
separated, as CSVLoggerOptions::separator), one row per epoch, epoch
0-based, "NA" for a value an epoch lacked. One panel per metric (default:
loss and accuracy); training curves solid, the validation curve (val_<name>,
when the file has it) dashed in the same colour. A line's label is its
--label (in the order of the files) or the file's name without .csv.
"""
import argparse
import math
import os
import sys

from plot_common import COLORS, InputError, fail, number, pyplot, read_rows, save


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def load(path, metrics):
    rows = read_rows(path, ["epoch"])
    names = set(rows[0])
    if not any(m in names or "val_" + m in names for m in metrics):
        raise InputError(f"{path}: none of the columns {', '.join(metrics)} (or val_ ones); "
                         f"it has {', '.join(sorted(names))}")
    epochs = [number(path, r, "epoch") for r in rows]
    if any(math.isnan(e) for e in epochs):
        raise InputError(f"{path}: an epoch cell is not a number")
    series = {}
    for col in names - {"epoch"}:
        series[col] = [number(path, r, col) for r in rows]
    return [e + 1 for e in epochs], series  # plotted as epochs trained (CSVLogger's epoch is 0-based)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("csv", nargs="+", help="history CSV files (one line each)")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--label", action="append", default=[], help="a file's label, in the order of the files")
    ap.add_argument("--metrics", default="loss,accuracy", help="comma-separated log names, one panel each "
                    "(default loss,accuracy)")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--width", type=int, default=1400, help="PNG width in pixels (default 1400)")
    a = ap.parse_args()
    if len(a.label) > len(a.csv):
        fail(f"{len(a.label)} --label for {len(a.csv)} file(s)")
    metrics = [m.strip() for m in a.metrics.split(",") if m.strip()]
    if not metrics:
        fail("--metrics names no metric")
    try:
        runs = [load(p, metrics) for p in a.csv]
    except InputError as e:
        fail(str(e))
    labels = a.label + [os.path.splitext(os.path.basename(p))[0] for p in a.csv[len(a.label):]]
    plt = pyplot()
    from matplotlib.lines import Line2D
    fig, axes = plt.subplots(1, len(metrics), figsize=(7 * len(metrics), 6), squeeze=False)
    any_val = False
    handles = []
    for i, ((epochs, series), label) in enumerate(zip(runs, labels)):
        c = COLORS[i % len(COLORS)]
        # Runs that agree draw on top of each other: each its own marker, the later ones thinner and smaller.
        mk, lw, size = MARKERS[i % len(MARKERS)], max(3.0 - 0.6 * i, 1.0), max(10 - 2 * i, 4)
        handles.append(Line2D([], [], color=c, marker=mk, ms=size, lw=lw, label=label))
        for ax, m in zip(axes[0], metrics):
            if m in series:
                ax.plot(epochs, series[m], "-", marker=mk, ms=size, color=c, lw=lw)
            if "val_" + m in series:
                any_val = True
                ax.plot(epochs, series["val_" + m], "--", marker=mk, ms=size, mfc="none", color=c, lw=lw * 0.8)
    for ax, m in zip(axes[0], metrics):
        ax.set_xlabel("epochs trained")
        ax.set_ylabel(m)
        ax.set_title(m + (": training solid, validation dashed" if any_val else ""))
        ax.xaxis.get_major_locator().set_params(integer=True)
    if any_val:
        handles += [Line2D([], [], color="black", lw=2, label="training"),
                    Line2D([], [], color="black", lw=1.5, ls="--", label="validation (val_*)")]
    fig.suptitle(a.title or "training history: " + ", ".join(labels), fontsize=14)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), frameon=False)
    rows = math.ceil(len(handles) / min(len(handles), 3))
    fig.tight_layout(rect=(0, 0.02 + 0.045 * rows, 1, 1))
    save(fig, a.output, a.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
