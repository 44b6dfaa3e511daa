#!/usr/bin/env python3
"""Plots pipeline_bench's CSV as a PNG, with the standard library alone.

    build/bench/pipeline_bench --csv > pipeline.csv
    python3 bench/plot_pipeline.py pipeline.csv docs/pipeline-bubble.png [--title TEXT]

Two panels per stage count S: samples/s against the micro-batch count M
(log2 axis) for each schedule, and the measured idle fraction (mean over the
stages) against M, with the theoretical bubble (S - 1)/(M + S - 1) dashed
(naive: (S - 1)/S). The project has no plotting library among its
dependencies, so this draws lines into an RGB buffer and writes the PNG with
zlib; text uses a 3x5 pixel font (upper case).
"""
import csv
import math
import struct
import sys
import zlib

# 3x5 glyphs, rows top to bottom, '#' lit.
FONT = {
    "0": ["###", "#.#", "#.#", "#.#", "###"], "1": [".#.", "##.", ".#.", ".#.", "###"],
    "2": ["###", "..#", "###", "#..", "###"], "3": ["###", "..#", ".##", "..#", "###"],
    "4": ["#.#", "#.#", "###", "..#", "..#"], "5": ["###", "#..", "###", "..#", "###"],
    "6": ["###", "#..", "###", "#.#", "###"], "7": ["###", "..#", ".#.", ".#.", ".#."],
    "8": ["###", "#.#", "###", "#.#", "###"], "9": ["###", "#.#", "###", "..#", "###"],
    "A": [".#.", "#.#", "###", "#.#", "#.#"], "B": ["##.", "#.#", "##.", "#.#", "##."],
    "C": [".##", "#..", "#..", "#..", ".##"], "D": ["##.", "#.#", "#.#", "#.#", "##."],
    "E": ["###", "#..", "##.", "#..", "###"], "F": ["###", "#..", "##.", "#..", "#.."],
    "G": [".##", "#..", "#.#", "#.#", ".##"], "H": ["#.#", "#.#", "###", "#.#", "#.#"],
    "I": ["###", ".#.", ".#.", ".#.", "###"], "J": ["..#", "..#", "..#", "#.#", ".#."],
    "K": ["#.#", "#.#", "##.", "#.#", "#.#"], "L": ["#..", "#..", "#..", "#..", "###"],
    "M": ["#.#", "###", "###", "#.#", "#.#"], "N": ["##.", "#.#", "#.#", "#.#", "#.#"],
    "O": [".#.", "#.#", "#.#", "#.#", ".#."], "P": ["##.", "#.#", "##.", "#..", "#.."],
    "Q": [".#.", "#.#", "#.#", "##.", ".##"], "R": ["##.", "#.#", "##.", "#.#", "#.#"],
    "S": [".##", "#..", ".#.", "..#", "##."], "T": ["###", ".#.", ".#.", ".#.", ".#."],
    "U": ["#.#", "#.#", "#.#", "#.#", "###"], "V": ["#.#", "#.#", "#.#", "#.#", ".#."],
    "W": ["#.#", "#.#", "###", "###", "#.#"], "X": ["#.#", "#.#", ".#.", "#.#", "#.#"],
    "Y": ["#.#", "#.#", ".#.", ".#.", ".#."], "Z": ["###", "..#", ".#.", "#..", "###"],
    " ": ["...", "...", "...", "...", "..."], ".": ["...", "...", "...", "...", ".#."],
    ",": ["...", "...", "...", ".#.", "#.."], ":": ["...", ".#.", "...", ".#.", "..."],
    "=": ["...", "###", "...", "###", "..."], "-": ["...", "...", "###", "...", "..."],
    "+": ["...", ".#.", "###", ".#.", "..."], "/": ["..#", "..#", ".#.", "#..", "#.."],
    "(": [".#.", "#..", "#..", "#..", ".#."], ")": [".#.", "..#", "..#", "..#", ".#."],
    "%": ["#.#", "..#", ".#.", "#..", "#.#"], "'": [".#.", ".#.", "...", "...", "..."],
}
COLORS = {"naive": (200, 60, 50), "gpipe": (40, 110, 200), "1f1b": (40, 160, 70)}
WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (0, 0, 0), (120, 120, 120), (225, 225, 225)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(y0, y1):
            for x in range(x0, x1):
                self.dot(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=2, dash=0):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            if dash and (i // dash) % 2:
                continue
            x = round(x0 + (x1 - x0) * i / n)
            y = round(y0 + (y1 - y0) * i / n)
            for dx in range(width):
                for dy in range(width):
                    self.dot(x + dx - width // 2, y + dy - width // 2, c)

    def text(self, x, y, s, c=BLACK, scale=2):
        for ch in s.upper():
            g = FONT.get(ch, FONT[" "])
            for r, row in enumerate(g):
                for k, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + k * scale, y + r * scale, x + (k + 1) * scale, y + (r + 1) * scale, c)
            x += 4 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(s, scale=2):
    return 4 * scale * len(s)


def panel(cv, x0, y0, w, h, title, ms, series, ymax, yfmt, theory=None):
    """One chart: series {label: [(M, y)]} against log2 M, y from 0 to ymax."""
    left, bottom = x0 + 70, y0 + h - 40
    right, top = x0 + w - 20, y0 + 30
    cv.text(x0 + 70, y0 + 6, title)
    cv.line(left, top, left, bottom, BLACK, 1)
    cv.line(left, bottom, right, bottom, BLACK, 1)
    lo, hi = math.log2(min(ms)), math.log2(max(ms))
    px = lambda m: round(left + (math.log2(m) - lo) / ((hi - lo) or 1) * (right - left))
    py = lambda v: round(bottom - min(v, ymax) / ymax * (bottom - top))
    for m in ms:
        cv.line(px(m), bottom, px(m), bottom + 4, BLACK, 1)
        cv.text(px(m) - text_width(str(m)) // 2, bottom + 10, str(m))
    cv.text((left + right) // 2 - text_width("M") // 2, bottom + 26, "M")
    for k in range(5):
        v = ymax * k / 4
        cv.line(left + 1, py(v), right, py(v), LIGHT, 1)
        label = yfmt(v)
        cv.text(left - 8 - text_width(label), py(v) - 5, label)
    if theory:
        for sched, pts in theory.items():
            for (m0, v0), (m1, v1) in zip(pts, pts[1:]):
                cv.line(px(m0), py(v0), px(m1), py(v1), COLORS[sched], 1, dash=5)
    for sched, pts in series.items():
        c = COLORS[sched]
        for (m0, v0), (m1, v1) in zip(pts, pts[1:]):
            cv.line(px(m0), py(v0), px(m1), py(v1), c, 2)
        for m, v in pts:
            cv.rect(px(m) - 3, py(v) - 3, px(m) + 4, py(v) + 4, c)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    title = ""
    if "--title" in argv:
        i = argv.index("--title")
        title = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    rows = list(csv.DictReader(open(argv[0], encoding="utf-8")))
    if not rows:
        print("plot_pipeline.py: no rows in " + argv[0])
        return 1
    stages = sorted({int(r["S"]) for r in rows})
    ms = sorted({int(r["M"]) for r in rows})
    top_sps = max(float(r["samples_per_s"]) for r in rows)
    step = 10 ** math.floor(math.log10(top_sps))
    ymax_sps = math.ceil(top_sps / step) * step
    pw, ph = 520, 300
    cv = Canvas(2 * pw, 40 + len(stages) * ph + 30)
    cv.text(20, 12, title or "PIPELINE_BENCH: THROUGHPUT AND IDLE FRACTION AGAINST M")
    for i, s in enumerate(stages):
        mine = [r for r in rows if int(r["S"]) == s]
        sps, idle, theory = {}, {}, {}
        for sched in ("naive", "gpipe", "1f1b"):
            pts = sorted((int(r["M"]), r) for r in mine if r["schedule"] == sched)
            if not pts:
                continue
            sps[sched] = [(m, float(r["samples_per_s"])) for m, r in pts]
            idle[sched] = [(m, float(r["idle_mean"])) for m, r in pts]
            theory[sched] = [(m, float(r["theory"])) for m, r in pts]
        y = 40 + i * ph
        panel(cv, 0, y, pw, ph, f"S = {s}: SAMPLES/S", ms, sps, ymax_sps,
              lambda v: f"{v / 1000:g}K" if v >= 1000 else f"{v:.0f}")
        panel(cv, pw, y, pw, ph, f"S = {s}: IDLE (DASHED: THEORY)", ms, idle, 1.0, lambda v: f"{v:.2f}", theory)
    # legend
    x, y = 70, cv.h - 22
    for sched, c in COLORS.items():
        cv.rect(x, y, x + 14, y + 10, c)
        cv.text(x + 20, y, sched)
        x += 20 + text_width(sched) + 30
    with open(argv[1], "wb") as f:
        f.write(cv.png())
    print(f"plot_pipeline.py: wrote {argv[1]} ({cv.w} x {cv.h}) from {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
