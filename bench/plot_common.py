"""What the bench/plot_*.py scripts share: matplotlib (headless), one way to
fail on a bad input, CSV rows with '#' comment lines, and saving a figure
at a fixed width.

    from plot_common import pyplot, fail, read_rows, save

matplotlib is not a dependency of the library or its tests: Debian's
package is enough (apt-get install python3-matplotlib; run the scripts with
/usr/bin/python3 when another python3 comes first on PATH).
"""
import csv
import os
import sys

def script():
    """The running script's name, for messages (read at each call: a test runs several in one process)."""
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "plot"


# One palette for every figure: a strategy or a schedule keeps its colour.
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
          "#bcbd22"]


class InputError(Exception):
    """A malformed or missing input: the message names the file and what is wrong."""


def fail(message, status=2):
    """Prints 'script: message' on stderr and exits (2: bad input)."""
    print(f"{script()}: {message}", file=sys.stderr)
    sys.exit(status)


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display needed), or a clear exit."""
    try:
        import matplotlib
    except ImportError:
        fail("matplotlib is not installed for " + sys.executable +
             " (Debian: apt-get install python3-matplotlib, then run with /usr/bin/python3)", 3)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 10,
                         "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 100})
    return plt


def thousands(axis):
    """Tick labels as 250k, 1.5M: an axis of samples/s reads at a glance."""
    from matplotlib import ticker
    axis.set_major_formatter(ticker.FuncFormatter(
        lambda v, _: f"{v / 1e6:g}M" if abs(v) >= 1e6 else f"{v / 1e3:g}k" if abs(v) >= 1e3 else f"{v:g}"))


def open_text(path):
    try:
        return open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None


def read_rows(path, required, delimiter=None):
    """The rows of a CSV file as dicts, '#' lines skipped; every name in
    `required` must be a column. delimiter None: ',' or ';', whichever the
    header line uses."""
    with open_text(path) as f:
        lines = [ln for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{path} holds no header line (is it empty?)")
    if delimiter is None:
        delimiter = ";" if lines[0].count(";") > lines[0].count(",") else ","
    reader = csv.DictReader(lines, delimiter=delimiter)
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path}: no column {', '.join(repr(c) for c in missing)} in the header "
                         f"{lines[0].strip()!r}")
    rows = []
    for n, row in enumerate(reader, start=2):
        if None in row or any(v is None for v in row.values()):
            raise InputError(f"{path}: data line {n} has {len(lines[n - 1].split(delimiter))} fields, "
                             f"the header {len(reader.fieldnames)}")
        rows.append(row)
    if not rows:
        raise InputError(f"{path} has a header but no rows")
    return rows


def number(path, row, column):
    """float(row[column]), 'NA' and '' as NaN, else an InputError naming the file and column."""
    v = row[column].strip()
    if v in ("", "NA", "nan", "NaN"):
        return float("nan")
    try:
        return float(v)
    except ValueError:
        raise InputError(f"{path}: {column} = {v!r} is not a number") from None


def save(fig, path, width_px=1400):
    """Writes fig as a PNG width_px wide and says so."""
    w, h = fig.get_size_inches()
    dpi = width_px / w
    try:
        fig.savefig(path, dpi=dpi, bbox_inches=None)
    except OSError as e:
        fail(f"cannot write {path}: {e.strerror}", 1)
    print(f"{script()}: wrote {path} ({round(w * dpi)} x {round(h * dpi)} px)")
