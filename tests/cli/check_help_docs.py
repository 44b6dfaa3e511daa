#!/usr/bin/env python3
"""Holds the examples' --help and the docs' table of their options to each other.

    check_help_docs.py DOC [COLUMN PROGRAM]...

DOC holds a table whose header row starts "| option |" and names COLUMNs;
each row is "| `--flag` | yes or nothing per column | what |". Passes when,
for every COLUMN and its PROGRAM, the options PROGRAM --help lists are
exactly the rows marked "yes" in that column (a row whose description says
"MPI builds" may be missing from a program built without MPI).
"""
import re
import subprocess
import sys


def table(doc):
    lines = open(doc, encoding="utf-8").read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| option |"):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = {}
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                rows[cells[0].strip("`")] = dict(zip(head, cells))
            return head, rows
    return None, None


def main(argv):
    if len(argv) < 3 or len(argv) % 2 != 1:
        print(__doc__)
        return 2
    head, rows = table(argv[0])
    if not rows:
        print(f"FAIL: {argv[0]} holds no table starting '| option |'")
        return 1
    failed = False
    for column, program in zip(argv[1::2], argv[2::2]):
        if column not in head:
            print(f"FAIL: the table has no column {column!r} (it has {head})")
            return 1
        out = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60).stdout
        listed = set(re.findall(r"^  (--[a-z][a-z-]*)", out, re.M))
        documented = {flag for flag, cells in rows.items() if cells.get(column) == "yes"}
        optional = {flag for flag in documented if "MPI builds" in rows[flag].get("what", "")}
        undocumented = sorted(listed - documented)
        missing = sorted(documented - listed - optional)
        print(f"{column}: {len(listed)} options in --help, {len(documented)} in the table")
        if undocumented:
            print(f"FAIL: {program} --help lists {undocumented}, which {argv[0]}'s table does not give {column}")
            failed = True
        if missing:
            print(f"FAIL: {argv[0]}'s table gives {column} {missing}, which {program} --help does not list")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
