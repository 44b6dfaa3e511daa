#!/usr/bin/env python3
"""Plots training throughput against the replica count: samples/s per
strategy (min-max range as error bars when given), the ideal linear scaling
from the one-replica figure dotted.

    build/bench/train_bench --replicas 1,2,4 > train.txt
    /usr/bin/python3 bench/plot_scaling.py train.txt -o docs/figures/scaling.png
    /usr/bin/python3 bench/plot_scaling.py docs/figures/scaling-mlp-2cores.csv -o docs/figures/scaling-mlp-2cores.png

Input: train_bench's printed table (columns model strategy replicas
median/s min/s max/s ...), or a CSV with the columns model, strategy,
replicas, samples_per_s and optionally min, max ('#' lines are comments:
say there where the figures come from). One panel per model.
"""
import argparse
import math
import sys

from plot_common import COLORS, InputError, fail, number, open_text, pyplot, read_rows, save, thousands


def parse_table(path, lines):
    """train_bench's table: 'model strategy replicas median/s min/s max/s speedup efficiency' rows."""
    out, header = [], None
    for n, line in enumerate(lines, start=1):
        t = line.split()
        if not t or t[0].startswith("#"):
            continue
        if t[:3] == ["model", "strategy", "replicas"]:
            header = t
            continue
        if header is None:
            continue
        try:
            lo, hi = (float(t[4]), float(t[5])) if "min/s" in header else (math.nan, math.nan)
            out.append((t[0], t[1], int(t[2]), float(t[3]), lo, hi))
        except (ValueError, IndexError):
            raise InputError(f"{path}:{n}: not a train_bench row: {line.strip()!r}") from None
    return out


def load(path):
    with open_text(path) as f:
        lines = f.readlines()
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    if "," in first or ";" in first:
        rows = read_rows(path, ["model", "strategy", "replicas", "samples_per_s"])
        out = []
        for r in rows:
            try:
                p = int(r["replicas"])
            except ValueError:
                raise InputError(f"{path}: replicas = {r['replicas']!r} is not an integer") from None
            out.append((r["model"].strip(), r["strategy"].strip(), p, number(path, r, "samples_per_s"),
                        number(path, r, "min") if "min" in r else math.nan,
                        number(path, r, "max") if "max" in r else math.nan))
        return out
    out = parse_table(path, lines)
    if not out:
        raise InputError(f"{path}: no column 'model strategy replicas median/s' table and no CSV header "
                         "with model,strategy,replicas,samples_per_s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("input", help="train_bench output or a CSV")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--no-ideal", action="store_true", help="no ideal-scaling line")
    ap.add_argument("--cores", type=int, default=0, help="the machine's cores: replicas beyond them shaded as "
                    "oversubscribed, the ideal line flat there")
    ap.add_argument("--width", type=int, default=1400, help="PNG width in pixels (default 1400)")
    a = ap.parse_args()
    try:
        rows = load(a.input)
    except InputError as e:
        fail(str(e))
    models = list(dict.fromkeys(r[0] for r in rows))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(14 if len(models) > 1 else 11, 6), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r[0] == model]
        strategies = list(dict.fromkeys(r[1] for r in mine))
        ps = sorted({r[2] for r in mine})
        base = next((r[3] for r in mine if r[2] == 1), None)
        for i, st in enumerate(strategies):
            pts = sorted((r[2], r[3], r[4], r[5]) for r in mine if r[1] == st)
            c = COLORS[i % len(COLORS)]
            x = [p[0] for p in pts]
            y = [p[1] for p in pts]
            if all(not math.isnan(p[2]) for p in pts):
                err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
                ax.errorbar(x, y, yerr=err, fmt="o-", color=c, lw=2, capsize=5, label=st)
            else:
                ax.plot(x, y, "o-", color=c, lw=2, label=st)
        cap = (lambda p: min(p, a.cores)) if a.cores > 0 else (lambda p: p)
        if base and not a.no_ideal and len(ps) > 1:
            ax.plot(ps, [base * cap(p) for p in ps], ":", color="black", lw=1.5,
                    label="ideal: one replica x " + ("min(replicas, cores)" if a.cores > 0 else "replicas"))
            ax.set_ylim(0, max(max(r[5] if not math.isnan(r[5]) else r[3] for r in mine), base * cap(max(ps))) * 1.08)
        else:
            ax.set_ylim(bottom=0)
        if a.cores > 0 and max(ps) > a.cores:
            ax.axvspan(a.cores, max(ps) * 1.2, color="#999999", alpha=0.12, lw=0)
            ax.text(a.cores * 1.03, ax.get_ylim()[1] * 0.03, f"more replicas than the {a.cores} cores", fontsize=10,
                    color="#555555")
        ax.set_xlim(min(ps) / 1.15, max(ps) * 1.15)
        thousands(ax.yaxis)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ps)
        ax.set_xticklabels([str(p) for p in ps])
        ax.set_xlabel("replicas")
        ax.set_ylabel("samples/s")
        ax.set_title(model)
        ax.legend(loc="upper left")
    fig.suptitle(a.title or "training throughput against replicas", fontsize=14)
    fig.tight_layout()
    save(fig, a.output, a.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
