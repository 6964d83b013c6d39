#!/usr/bin/env python3
"""Count repeated lines across YAML (or any text) files: a line counts as repeated when it lies
in a window of N consecutive lines (default 6, as scripts compare templates in reviews) that
also occurs in another of the files given (or, with --against REF, in REF).

Usage: dup-lines.py [--window N] [--against REF] FILE...
Prints, per file, "<repeated> of <lines>", then the totals. Blank lines count as lines, and
windows are compared exactly (indentation included), so a fragment shared by two templates
counts once it spans N lines.
"""

import sys


def windows(lines, n):
    return {tuple(lines[i:i + n]) for i in range(len(lines) - n + 1)}


def repeated(lines, others, n):
    covered = set()
    for i in range(len(lines) - n + 1):
        if tuple(lines[i:i + n]) in others:
            covered.update(range(i, i + n))
    return len(covered)


def main(argv):
    n, against = 6, None
    if "--window" in argv:
        i = argv.index("--window")
        n = int(argv[i + 1])
        del argv[i:i + 2]
    if "--against" in argv:
        i = argv.index("--against")
        against = argv[i + 1]
        del argv[i:i + 2]
    texts = {}
    for path in argv + ([against] if against else []):
        with open(path) as f:
            texts[path] = f.read().splitlines()
    total_rep = total = 0
    for path in argv:
        if against:
            others = windows(texts[against], n)
        else:
            others = set()
            for other, lines in texts.items():
                if other != path:
                    others |= windows(lines, n)
        rep = repeated(texts[path], others, n)
        total_rep += rep
        total += len(texts[path])
        print(f"{path}: {rep} of {len(texts[path])} lines repeated")
    print(f"total: {total_rep} of {total} lines repeated ({n}-line windows)")


if __name__ == "__main__":
    main(sys.argv[1:])
