#!/usr/bin/env python3
"""Draws a trace in Chrome's trace-event format (what --trace FILE writes;
chrome://tracing and ui.perfetto.dev read it too) as a timeline PNG.

    build/examples/mnist_mlp --strategy pipeline --schedule 1f1b --trace 1f1b.json ...
    /usr/bin/python3 bench/plot_trace.py 1f1b.json -o timeline.png [--steps 3:5] [--window 10:25]
    /usr/bin/python3 bench/plot_trace.py 1f1b.json --compare gpipe.json --pipeline --steps 3:3 -o schedules.png

One horizontal lane per (pid, tid) track, named by the process_name and
thread_name metadata events; complete events ("ph": "X") drawn as boxes
coloured by category (step, data, forward, backward, loss, collective,
update, wait, checkpoint, callback; others grey), instant events ("ph": "i")
as ticks. Time is in ms from the first event shown.

--pipeline: only the pipeline stages' lanes ("stage ..." tracks, and the
caller's steps as a thin band above them); forward and backward micro-batch
boxes labelled F<m> / B<m>, so the bubbles are the gaps between them.
--steps A:B: the span of the caller's step events A..B (their args.step,
counted from 0 over the whole run when epochs repeat the numbers: the k-th
step event; both ends included). --window START:END: milliseconds from the
trace's first event (either end may be empty). --compare FILE: a second
trace in a panel below, on the same time scale (each panel's time from its
own window's start), e.g. GPipe against 1F1B.

A file that a killed run left without its closing ']' (or with a partial
last event) is read up to its last complete event.
"""
import argparse
import json
import os
import re
import sys

from plot_common import InputError, fail, open_text, pyplot, save

CATEGORY_COLORS = {
    "step": "#d9d9d9", "data": "#8c564b", "forward": "#1f77b4", "backward": "#ff7f0e", "loss": "#9467bd",
    "collective": "#2ca02c", "update": "#d62728", "wait": "#bcbd22", "checkpoint": "#17becf",
    "callback": "#e377c2",
}
OTHER = "#7f7f7f"


def parse_events(text, path):
    """The events of a JSON array or of one cut off (no ']', a partial last
    event); {"traceEvents": [...]} is read too."""
    s = text.strip()
    if not s:
        raise InputError(f"{path} is empty")
    try:
        doc = json.loads(s)
    except json.JSONDecodeError:
        doc = None
    if doc is None:
        if not s.startswith("["):
            raise InputError(f"{path} is not a JSON array of trace events (it does not start with '[')")
        # Cut off: keep everything up to the last complete object, then close the array.
        dec = json.JSONDecoder()
        events, i = [], 1
        while True:
            while i < len(s) and s[i] in " \t\r\n,":
                i += 1
            if i >= len(s) or s[i] == "]":
                break
            try:
                obj, i = dec.raw_decode(s, i)
            except json.JSONDecodeError:
                break  # the partial last event of a killed run
            events.append(obj)
        doc = events
    if isinstance(doc, dict):
        doc = doc.get("traceEvents")
    if not isinstance(doc, list):
        raise InputError(f"{path} is not a JSON array of trace events")
    return doc


class Trace:
    def __init__(self, path):
        with open_text(path) as f:
            events = parse_events(f.read(), path)
        self.path = path
        self.process, self.thread, self.spans, self.instants = {}, {}, [], []
        self.process_sort, self.thread_sort = {}, {}
        for n, e in enumerate(events):
            if not isinstance(e, dict) or "ph" not in e:
                raise InputError(f"{path}: event {n} is not an object with a 'ph' field: {str(e)[:80]}")
            ph = e["ph"]
            try:
                if ph == "M":
                    name = (e.get("args") or {}).get("name")
                    if e.get("name") == "process_name":
                        self.process[e["pid"]] = str(name)
                    elif e.get("name") == "thread_name":
                        self.thread[(e["pid"], e["tid"])] = str(name)
                    elif e.get("name") == "process_sort_index":
                        self.process_sort[e["pid"]] = float((e.get("args") or {}).get("sort_index", 0))
                    elif e.get("name") == "thread_sort_index":
                        self.thread_sort[(e["pid"], e["tid"])] = float((e.get("args") or {}).get("sort_index", 0))
                elif ph == "X":
                    ts, dur = float(e["ts"]), float(e.get("dur", 0))
                    self.spans.append({"track": (e.get("pid", 0), e.get("tid", 0)), "ts": ts, "end": ts + dur,
                                       "name": str(e.get("name", "")), "cat": str(e.get("cat", "")),
                                       "args": e.get("args") or {}})
                elif ph in ("i", "I", "R"):
                    self.instants.append({"track": (e.get("pid", 0), e.get("tid", 0)), "ts": float(e["ts"]),
                                          "name": str(e.get("name", "")), "cat": str(e.get("cat", ""))})
            except (KeyError, TypeError, ValueError) as err:
                raise InputError(f"{path}: event {n} ({ph!r}) lacks or mangles a field ({err}): {str(e)[:120]}") \
                    from None
        if not self.spans:
            raise InputError(f"{path} holds no complete ('ph': 'X') events")
        self.origin = min(s["ts"] for s in self.spans)
        nest(self.spans)

    def order(self, track):
        """Lanes by process (its sort index, then pid), the caller's track (the
        one with steps) first, then by name with numbers compared as numbers
        ("replica 2" before "replica 10"; the recorder's thread sort index
        follows the order the threads first recorded, not their numbers)."""
        pid, tid = track
        if not hasattr(self, "_callers"):
            self._callers = {s["track"] for s in self.spans if s["cat"] == "step"}
        name = self.thread.get(track, "")
        natural = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p)
        return (self.process_sort.get(pid, pid), pid, track not in self._callers, natural,
                self.thread_sort.get(track, tid), tid)

    def name(self, track):
        pid, tid = track
        t = self.thread.get(track, f"thread {tid}")
        if len({k[0] for k in self.tracks()}) > 1:  # several processes (ranks): say whose track it is
            return f"{self.process.get(pid, f'process {pid}')}: {t}"
        return t

    def tracks(self):
        return sorted({s["track"] for s in self.spans} | {i["track"] for i in self.instants})

    def steps(self):
        """The caller's step spans in time order."""
        return sorted((s for s in self.spans if s["cat"] == "step"), key=lambda s: s["ts"])

    def window(self, steps=None, window=None):
        """(start, end) in the trace's microseconds."""
        lo, hi = self.origin, max(s["end"] for s in self.spans)
        if steps is not None:
            st = self.steps()
            if not st:
                raise InputError(f"{self.path}: --steps needs 'step' events, and there are none")
            a, b = steps
            a = 0 if a is None else a
            b = len(st) - 1 if b is None else b
            if not 0 <= a <= b < len(st):
                raise InputError(f"{self.path}: --steps {a}:{b} is outside the {len(st)} step(s) recorded (0:{len(st) - 1})")
            lo, hi = st[a]["ts"], st[b]["end"]
        if window is not None:
            base = self.origin if steps is None else lo
            w0, w1 = window
            lo2 = base + w0 * 1e3 if w0 is not None else lo
            hi2 = base + w1 * 1e3 if w1 is not None else hi
            lo, hi = lo2, hi2
        if hi <= lo:
            raise InputError(f"{self.path}: the window shown is empty")
        return lo, hi


def parse_range(text, what, kind):
    if ":" not in text:
        fail(f"{what} is A:B, got {text!r}")
    a, b = text.split(":", 1)
    try:
        return (kind(a) if a.strip() else None, kind(b) if b.strip() else None)
    except ValueError:
        fail(f"{what} is A:B with {kind.__name__} ends, got {text!r}")


def is_stage(trace, track):
    return trace.thread.get(track, "").startswith("stage")


def micro_label(span):
    """F3 / B3 for a pipeline's micro-batch boxes, else the span's name."""
    mb = span["args"].get("micro_batch") if isinstance(span["args"], dict) else None
    if span["cat"] in ("forward", "backward") and mb is not None:
        return ("F" if span["cat"] == "forward" else "B") + str(mb)
    return span["name"]


HEIGHTS = [0.76, 0.52, 0.32, 0.2]  # a box's height by its nesting depth on its track
COMM = ("collective", "wait")        # --pipeline: a thin strip under the stage's compute


def text_color(hex_color):
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


def nest(spans):
    """Sets each span's 'depth' (spans enclosing it on its track, steps not
    counted: they are drawn as a band behind) and 'leaf' (it encloses none)."""
    by_track = {}
    for s in spans:
        s["depth"], s["leaf"] = 0, True
        if s["cat"] != "step":
            by_track.setdefault(s["track"], []).append(s)
    for mine in by_track.values():
        mine.sort(key=lambda s: (s["ts"], -(s["end"] - s["ts"])))
        stack = []
        for s in mine:
            while stack and stack[-1]["end"] <= s["ts"]:
                stack.pop()
            if stack:
                stack[-1]["leaf"] = False
            s["depth"] = len(stack)
            stack.append(s)


def draw(ax, trace, lo, hi, pipeline, label_boxes):
    tracks = trace.tracks()
    if pipeline:
        stages = [t for t in tracks if is_stage(trace, t)]
        if not stages:
            raise InputError(f"{trace.path}: --pipeline, but no track is named 'stage ...' by thread_name metadata")
        callers = sorted({s["track"] for s in trace.spans if s["cat"] == "step"} - set(stages))
        tracks = callers + sorted(stages, key=trace.order)
    else:
        tracks = sorted(tracks, key=trace.order)
    lane = {t: i for i, t in enumerate(tracks)}
    used = set()
    visible = [s for s in trace.spans if s["end"] >= lo and s["ts"] <= hi and s["track"] in lane]
    if pipeline:  # the caller's steps, and on the stages their compute: what is left are the bubbles
        visible = [s for s in visible if s["cat"] == "step" or s["track"] in stages]
    ms = lambda t: (t - lo) / 1e3
    span_ms = (hi - lo) / 1e3
    for s in visible:
        y = lane[s["track"]]
        c = CATEGORY_COLORS.get(s["cat"], OTHER)
        used.add(s["cat"] if s["cat"] in CATEGORY_COLORS else "other")
        x0, x1 = max(ms(s["ts"]), 0), min(ms(s["end"]), span_ms)
        w = max(x1 - x0, span_ms * 1e-4)
        if s["cat"] == "step":  # the step: a band under the lane's other boxes
            ax.broken_barh([(x0, w)], (y - 0.45, 0.9), facecolors=c, edgecolors="#999999", lw=0.5, zorder=1)
            if label_boxes and (x1 - x0) > span_ms * 0.04:
                a = s["args"] if isinstance(s["args"], dict) else {}
                text = "step " + str(a.get("step", "")) + (f" (epoch {a['epoch']})" if "epoch" in a else "")
                ax.text(x0 + span_ms * 0.002, y - 0.3, text, fontsize=8, va="center", color="#333333", zorder=9,
                        clip_on=True)
            continue
        if pipeline and s["cat"] in COMM:  # a strip along the lane's foot: what the stage waited on
            ax.broken_barh([(x0, w)], (y + 0.3, 0.1), facecolors=c, lw=0, zorder=2)
            continue
        h = HEIGHTS[min(s["depth"], len(HEIGHTS) - 1)]
        ax.broken_barh([(x0, w)], (y - h / 2, h), facecolors=c, edgecolors="white", lw=0.4, zorder=2 + s["depth"])
        if label_boxes and s["leaf"]:
            text = micro_label(s) if pipeline else s["name"]
            width_chars = (x1 - x0) / span_ms * 190  # about 190 characters across the axis at fontsize 8
            if text and len(text) <= width_chars:
                ax.text((x0 + x1) / 2, y, text, ha="center", va="center", fontsize=8, color=text_color(c), zorder=8,
                        clip_on=True, fontweight="bold" if pipeline else "normal")
    for i in trace.instants:
        if lo <= i["ts"] <= hi and i["track"] in lane:
            ax.plot([ms(i["ts"])] * 2, [lane[i["track"]] - 0.45, lane[i["track"]] + 0.45], color="black", lw=1, zorder=7)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([trace.name(t) for t in tracks])
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlim(0, span_ms)
    ax.grid(axis="y", visible=False)
    return used, len(tracks)


def stage_idle(trace, lo, hi):
    """Fraction of [lo, hi] each stage track spends outside its forward/backward boxes."""
    out = {}
    for t in trace.tracks():
        if not is_stage(trace, t):
            continue
        busy = [(max(s["ts"], lo), min(s["end"], hi)) for s in trace.spans
                if s["track"] == t and s["cat"] in ("forward", "backward") and s["end"] > lo and s["ts"] < hi]
        busy.sort()
        total, cur0, cur1 = 0.0, None, None
        for a, b in busy:  # union of the intervals
            if cur1 is None or a > cur1:
                if cur1 is not None:
                    total += cur1 - cur0
                cur0, cur1 = a, b
            else:
                cur1 = max(cur1, b)
        if cur1 is not None:
            total += cur1 - cur0
        out[trace.name(t)] = 1 - total / (hi - lo)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("trace", help="trace-event JSON file")
    ap.add_argument("-o", "--output", help="the PNG to write")
    ap.add_argument("--compare", help="a second trace, drawn below on the same time scale")
    ap.add_argument("--pipeline", action="store_true", help="pipeline stages only, micro-batch boxes F<m>/B<m>")
    ap.add_argument("--steps", help="A:B: from the start of step A to the end of step B (0-based, both included)")
    ap.add_argument("--window", help="START:END in ms (from the trace's start, or from step A's start with --steps)")
    ap.add_argument("--label", action="append", default=[], help="a panel's title (first the trace's, then --compare's)")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--no-labels", action="store_true", help="no text in the boxes")
    ap.add_argument("--list-steps", action="store_true", help="print each step's index, start and duration (ms) "
                    "to choose --steps, and write nothing")
    ap.add_argument("--width", type=int, default=1600, help="PNG width in pixels (default 1600)")
    a = ap.parse_args()
    steps = parse_range(a.steps, "--steps", int) if a.steps else None
    window = parse_range(a.window, "--window", float) if a.window else None
    paths = [a.trace] + ([a.compare] if a.compare else [])
    try:
        traces = [Trace(p) for p in paths]
        windows = [t.window(steps, window) for t in traces]
    except InputError as e:
        fail(str(e))
    if a.list_steps:
        for t in traces:
            print(f"{t.path}: index  step  start(ms)  duration(ms)")
            for k, st in enumerate(t.steps()):
                print(f"{k:6d} {str(st['args'].get('step', '')):>5} {(st['ts'] - t.origin) / 1e3:10.2f} "
                      f"{(st['end'] - st['ts']) / 1e3:13.3f}")
        return 0
    if not a.output:
        fail("-o PNG is needed (or --list-steps)")
    labels = a.label + [os.path.basename(p) for p in paths[len(a.label):]]
    plt = pyplot()
    lanes = [len([k for k in t.tracks() if not a.pipeline or is_stage(t, k)]) + (1 if a.pipeline else 0)
             for t in traces]
    height = 2.0 + sum(0.42 * n + 1.1 for n in lanes)
    fig, axes = plt.subplots(len(traces), 1, figsize=(16, height), squeeze=False,
                             gridspec_kw={"height_ratios": [n + 2 for n in lanes]})
    span = max(hi - lo for lo, hi in windows) / 1e3
    used = set()
    for ax, t, (lo, hi), label in zip(axes[:, 0], traces, windows, labels):
        try:
            u, _ = draw(ax, t, lo, hi, a.pipeline, not a.no_labels)
        except InputError as e:
            fail(str(e))
        used |= u
        ax.set_xlim(0, span)  # one time scale for every panel
        title = f"{label}: {(hi - lo) / 1e3:.2f} ms shown"
        if a.pipeline:
            idle = stage_idle(t, lo, hi)
            if idle:
                title += "; idle " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(idle.items()))
        ax.set_title(title, loc="left")
        ax.set_xlabel("ms")
    order = [c for c in list(CATEGORY_COLORS) + ["other"] if c in used]
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=CATEGORY_COLORS.get(c, OTHER), edgecolor="#999999", label=c) for c in order]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 10), frameon=False)
    fig.suptitle(a.title or ("pipeline schedule" if a.pipeline else "timeline"), x=0.01, ha="left", fontsize=14)
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1))  # the legend's row below the panels
    save(fig, a.output, a.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
