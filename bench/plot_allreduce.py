#!/usr/bin/env python3
"""Plots allreduce_bench's table (nccl-tests columns): bus bandwidth
against message size, one line per algorithm, the memory-traffic bound
dashed; one panel per replica count.

    build/bench/allreduce_bench --replicas 2 --algo direct,ring,auto > docs/figures/allreduce-2replicas.txt
    /usr/bin/python3 bench/plot_allreduce.py docs/figures/allreduce-2replicas.txt \\
        -o docs/figures/allreduce-2replicas.png

The table is read by its header line ("#  size(B) count type p algo ...
busbw bound ..."), so the GPU table (--device gpu) and mpi_allreduce_bench's
(no bound column: no bound line) are read as well; '#' lines that are not a
header and tables without a busbw column (NCCL's one-rank table) are
skipped. Several files (or one holding several runs) are joined; --label
names each file's lines when there are several.
"""
import argparse
import math
import os
import statistics
import sys

from plot_common import COLORS, InputError, fail, open_text, pyplot, save

NEEDED = ["size(B)", "p", "algo", "busbw"]


def parse(path):
    """[(p, algo, bytes, busbw, bound or NaN)] from every table in the file."""
    rows, header = [], None
    with open_text(path) as f:
        for n, line in enumerate(f, start=1):
            t = line.split()
            if not t:
                continue
            if t[0] == "#":
                if "size(B)" in t:
                    cols = t[1:]
                    header = {c: cols.index(c) for c in cols} if all(c in cols for c in NEEDED) else None
                continue
            if t[0].startswith("#") or header is None:
                continue
            need = max(header[c] for c in NEEDED + (["bound"] if "bound" in header else []))
            if len(t) <= need:
                raise InputError(f"{path}:{n}: {len(t)} fields, the table's header needs {need + 1}: {line.strip()!r}")
            try:
                bound = float(t[header["bound"]]) if "bound" in header else math.nan
                rows.append((int(t[header["p"]]), t[header["algo"]], int(t[header["size(B)"]]),
                             float(t[header["busbw"]]), bound))
            except ValueError:
                raise InputError(f"{path}:{n}: size, p, busbw or bound is not a number: {line.strip()!r}") from None
    if not rows:
        raise InputError(f"{path}: no table with the columns {' '.join(NEEDED)} (is it allreduce_bench's output?)")
    return rows


def size_label(b):
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k}{unit}"
    return str(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("table", nargs="+", help="allreduce_bench output (text)")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--label", action="append", default=[], help="a file's name in the legend, in file order")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--width", type=int, default=1400, help="PNG width in pixels (default 1400)")
    a = ap.parse_args()
    if len(a.label) > len(a.table):
        fail(f"{len(a.label)} --label for {len(a.table)} file(s)")
    labels = a.label + [os.path.splitext(os.path.basename(p))[0] for p in a.table[len(a.label):]]
    try:
        data = [(label, parse(p)) for p, label in zip(a.table, labels)]
    except InputError as e:
        fail(str(e))
    ps = sorted({r[0] for _, rows in data for r in rows})
    plt = pyplot()
    cols = min(len(ps), 2)
    nrows = math.ceil(len(ps) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(14 if cols > 1 else 12, 5.5 * nrows), squeeze=False)
    for k, p in enumerate(ps):
        ax = axes[k // cols][k % cols]
        colour = 0
        sizes = set()
        for label, rows in data:
            mine = [r for r in rows if r[0] == p]
            for algo in dict.fromkeys(r[1] for r in mine):  # in table order
                pts = sorted((r[2], r[3]) for r in mine if r[1] == algo)
                sizes |= {s for s, _ in pts}
                name = algo if len(data) == 1 else f"{label}: {algo}"
                ax.plot([s for s, _ in pts], [v for _, v in pts], "o-", lw=2, color=COLORS[colour % len(COLORS)],
                        label=name)
                colour += 1
            bounds = {}
            for r in mine:
                if not math.isnan(r[4]):
                    bounds.setdefault(r[2], []).append(r[4])
            if bounds:  # every algorithm's row measures the same bound: their median
                xs = sorted(bounds)
                ax.plot(xs, [statistics.median(bounds[x]) for x in xs], "--", color="black", lw=1.5,
                        label="bound" + ("" if len(data) == 1 else f" ({label})") +
                        ": each buffer read and written once at the measured DRAM speed")
        ax.set_xscale("log", base=2)
        xs = sorted(sizes)
        ax.set_xticks(xs)
        ax.set_xticklabels([size_label(s) for s in xs], rotation=0 if len(xs) <= 12 else 45)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"p = {p}")
        if len(ax.get_lines()) > 5:  # many lines: the legend beside the panel, not over the curves
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
        else:
            ax.legend(loc="best", fontsize=10)
    for k in range(len(ps), nrows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.suptitle(a.title or "all-reduce bus bandwidth against message size", fontsize=14)
    fig.tight_layout()
    save(fig, a.output, a.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
