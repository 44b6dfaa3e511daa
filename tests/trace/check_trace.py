#!/usr/bin/env python3
"""Reads a trace-event JSON file as a trace viewer would, checks its shape,
and prints what it holds in lines a test can read.

    python3 tests/trace/check_trace.py TRACE [--truncated-ok]

Checks (exit 1 with the reason if one fails): the file parses as JSON (with
--truncated-ok, a file cut short by a killed run is read up to its last
complete event, as Perfetto does); it is a list of events, each with ph,
pid and (but metadata) name, cat, ts; complete events ('X') have dur >= 0;
on each track (pid, tid) complete events nest: any two are disjoint or one
holds the other (a span never straddles another's end).

Prints, one per line:
    track PID TID NAME                     (each named thread)
    process PID NAME
    count PID TID CAT NAME N               (complete events per track, category and name)
    order PID TID CAT NAME,NAME,...        (each track's events of a category, by start time)
    flow PID TID NAME,NAME,...             (each track's forward and backward events, by start time)
    span PID TID NAME TS DUR               (each collective's span, by start time, in microseconds)
    lost PID TID N                         (events a full ring lost)
    args PID TID NAME KEY=VALUE,...        (the first event of each name per track)
"""
import json
import sys
from collections import defaultdict


def load(path, truncated_ok):
    text = open(path, encoding="utf-8").read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if not truncated_ok:
            raise
    # a killed run: keep the complete events (one per line), close the array
    lines = text.split("\n")
    while lines:
        body = "\n".join(lines).rstrip().rstrip(",")
        try:
            return json.loads(body + "\n]")
        except json.JSONDecodeError:
            lines.pop()
    raise ValueError("no complete event in the file")


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) < 2:
        fail("usage: check_trace.py TRACE [--truncated-ok]")
    events = load(sys.argv[1], "--truncated-ok" in sys.argv[2:])
    if not isinstance(events, list):
        fail("the trace is not a JSON array")
    tracks = defaultdict(list)
    for e in events:
        if not isinstance(e, dict) or "ph" not in e or "pid" not in e:
            fail("an event without ph or pid: %r" % (e,))
        ph = e["ph"]
        if ph == "M":
            if e["name"] == "thread_name":
                print("track %d %d %s" % (e["pid"], e["tid"], e["args"]["name"]))
            elif e["name"] == "process_name":
                print("process %d %s" % (e["pid"], e["args"]["name"]))
            continue
        for k in ("name", "cat", "ts", "tid"):
            if k not in e:
                fail("an event without %s: %r" % (k, e))
        if ph == "X":
            if e["dur"] < 0:
                fail("negative duration: %r" % (e,))
            tracks[(e["pid"], e["tid"])].append(e)
        elif ph == "i":
            if "lost" in e.get("args", {}):
                print("lost %d %d %d" % (e["pid"], e["tid"], e["args"]["lost"]))
        else:
            fail("an event of phase %r" % ph)
    for (pid, tid), evs in sorted(tracks.items()):
        # outer spans first at equal starts
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        eps = 0.0015  # the timestamps' rounding (1 ns, written in microseconds with 3 decimals)
        for e in evs:
            begin, end = e["ts"], e["ts"] + e["dur"]
            while open_ends and open_ends[-1][0] <= begin + eps:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0] + eps:
                fail("on track %d/%d, %s [%.3f, %.3f] straddles the end of %s at %.3f" %
                     (pid, tid, e["name"], begin, end, open_ends[-1][1], open_ends[-1][0]))
            open_ends.append((end, e["name"]))
        counts = defaultdict(int)
        order = defaultdict(list)
        seen = set()
        for e in evs:
            counts[(e["cat"], e["name"])] += 1
            order[e["cat"]].append(e["name"])
            if e["name"] not in seen:
                seen.add(e["name"])
                a = ",".join("%s=%s" % (k, v) for k, v in sorted(e.get("args", {}).items()))
                print("args %d %d %s %s" % (pid, tid, e["name"].replace(" ", "_"), a))
        for (cat, name), n in sorted(counts.items()):
            print("count %d %d %s %s %d" % (pid, tid, cat, name.replace(" ", "_"), n))
        for cat, names in sorted(order.items()):
            print("order %d %d %s %s" % (pid, tid, cat, ",".join(n.replace(" ", "_") for n in names)))
        for e in evs:
            if e["cat"] == "collective":
                print("span %d %d %s %.3f %.3f" % (pid, tid, e["name"].replace(" ", "_"), e["ts"], e["dur"]))
        flow = [e["name"].replace(" ", "_") for e in evs if e["cat"] in ("forward", "backward")]
        if flow:
            print("flow %d %d %s" % (pid, tid, ",".join(flow)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
