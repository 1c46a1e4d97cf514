#!/usr/bin/env python3
"""check_circles.py — no include circle between modules of src/, cli/ and
python/ (issue 27).

A module is a source file and the headers of the same name (plan.c,
plan.h, and the private plan_internal.h or plan_impl.h are the module
`plan`); any other header (a table's declarations, shared hooks) is a
module of its own. Module A uses module B when a
file of A includes B's header. A circle — A uses B and B, through any path,
uses A — means a dispatcher and what it dispatches to know each other, so
neither can change alone: the fix is a third, lower header (the shared
types or hooks) that both include, or a table that includes the
implementations' declarations while they never include the table back.

Usage: check_circles.py [--root DIR]. Prints each circle (the modules and
one include on each edge, file:line) and exits 1 if there is any.
Run by CTest (test "include_circles").
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def unit(rel):
    """The module a file belongs to: its path without extension, a private
    header (X_internal.h, X_impl.h) counting as part of X."""
    stem = os.path.splitext(rel)[0]
    for suffix in ("_internal", "_impl"):
        if stem.endswith(suffix) and rel.endswith(".h"):
            return stem[: -len(suffix)]
    return stem


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    src = os.path.join(root, "src")
    files = []
    for top in ("src", "cli", "python"):  # the library, the tool, the extension
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.join(dirpath, n) for n in sorted(names)
                      if n.endswith((".c", ".h", ".cu"))]
    module = {f: unit(os.path.relpath(f, root)) for f in files}
    edges = {}  # (a, b) -> "file:line"
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                cands = [os.path.normpath(os.path.join(os.path.dirname(f), m.group(1))),
                         os.path.normpath(os.path.join(src, m.group(1)))]
                target = next((c for c in cands if c in module), None)
                if target is None or module[target] == module[f]:
                    continue
                edges.setdefault((module[f], module[target]), "%s:%d" % (os.path.relpath(f, root), n))
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in sccs:
        print("include circle: " + " <-> ".join(comp))
        for a in comp:
            for b in comp:
                if (a, b) in edges:
                    print("  %s uses %s (%s)" % (a, b, edges[(a, b)]))
    if sccs:
        print("%d include circle(s): put what both sides need in a lower header "
              "(docs/layers.md, \"Include circles\")" % len(sccs))
        return 1
    print("no include circle among %d modules" % len(set(module.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
