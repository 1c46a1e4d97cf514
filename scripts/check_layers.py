#!/usr/bin/env python3
"""check_layers.py — check the layer order of the library (docs/layers.md).

src/ is a stack of directories; each may use only itself and the ones its
row of LAYERS names (all below it). Checked:

  1. includes: every #include of a project header in src/DIR (quoted or
     angled, "DIR2/x.h" or a relative "../DIR2/x.h") names DIR itself, a
     directory DIR may use, or the public header (stoker/...);
  2. the public headers (include/stoker/) include no header of src/;
  3. cli/ and python/ (the C extension) use the public API only: no header
     of src/;
  4. with --objects (the library's object files, as CTest passes them): the
     symbols each object uses are defined in its own directory or one it
     may use. Every layer includes the public header, which declares the
     whole API, so a call upwards through it passes check 1: this one
     catches it.
  5. the readers of src/format/ get their bytes through src/io (src/io/
     source.h): no call of open, openat, pread, read, mmap, munmap, madvise,
     posix_fadvise, readahead or fopen in their source (comments and strings
     left out). Exempt: open/openat of a directory (O_DIRECTORY in the
     call: walking directories stays with the image folder) and the .stk
     writer (IO_EXEMPT), which creates files rather than reading them.

Usage: check_layers.py [--root DIR] [--objects OBJ...] [--nm NM]
Prints one line per violation (file:line, what, why) and exits 1 if there
is any, 0 otherwise. Run by CTest (test "layers") and tests/python/test_layers.py.
"""
import argparse
import os
import re
import subprocess
import sys

# Directory -> the directories below it that it may use (docs/layers.md).
LAYERS = {
    "core": [],
    "io": ["core"],
    "codec": ["core"],
    "format": ["core", "io", "codec"],
    "ops": ["core", "codec"],
    "gpu": ["core", "codec", "ops"],
    "pipeline": ["core", "io", "codec", "format", "ops", "gpu"],
    "tools": ["core", "io", "codec", "format", "ops", "gpu", "pipeline"],
}
PUBLIC = "stoker"  # include/stoker/: the public API, usable everywhere

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def includes(path):
    """(line number, header) for every #include in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(2)


def target_dir(src_root, from_dir, header):
    """The src/ directory `header` (as included from src/from_dir) lies in,
    PUBLIC for the public header, or None (a system or same-directory file)."""
    if header.startswith(PUBLIC + "/"):
        return PUBLIC
    if header.startswith(".."):
        real = os.path.normpath(os.path.join(src_root, from_dir, header))
        rel = os.path.relpath(real, src_root)
        return rel.split(os.sep)[0] if not rel.startswith("..") else None
    first = header.split("/")[0]
    if "/" in header and (first in LAYERS or os.path.isdir(os.path.join(src_root, first))):
        return first
    return None


def source_files(top):
    for dirpath, _, names in os.walk(top):
        for name in sorted(names):
            if name.endswith((".c", ".h")):
                yield os.path.join(dirpath, name)


def check_includes(root):
    problems = []
    src = os.path.join(root, "src")
    for path in sorted(source_files(src)):
        rel = os.path.relpath(path, root)
        layer = os.path.relpath(path, src).split(os.sep)[0]
        if layer not in LAYERS:
            problems.append("%s: directory src/%s is not in the layer table (docs/layers.md, "
                            "scripts/check_layers.py)" % (rel, layer))
            continue
        for n, header in includes(path):
            t = target_dir(src, layer, header)
            if t is None or t == layer or t == PUBLIC or t in LAYERS[layer]:
                continue
            why = ("%s is above %s" % (t, layer) if t in LAYERS and layer in LAYERS[t]
                   else "%s may use only %s" % (layer, ", ".join(LAYERS[layer]) or "itself"))
            problems.append("%s:%d: includes \"%s\": %s (docs/layers.md)" % (rel, n, header, why))
    # The public headers and the clients of the public API: no src/ header.
    for top in ("include", "cli", "python"):
        for path in sorted(source_files(os.path.join(root, top))):
            rel = os.path.relpath(path, root)
            for n, header in includes(path):
                t = target_dir(src, "", header)
                if t is not None and t != PUBLIC:
                    problems.append("%s:%d: includes \"%s\": %s/ may use only the public API "
                                    "(include/stoker) (docs/layers.md)" % (rel, n, header, top))
    return problems


# Check 5: system calls a reader of src/format/ leaves to src/io.
IO_CALLS = ("open", "openat", "pread", "pread64", "read", "mmap", "mmap64", "munmap",
            "madvise", "posix_madvise", "posix_fadvise", "readahead", "fopen")
IO_CALL = re.compile(r"(?<![\w>.])(%s)\s*\(" % "|".join(IO_CALLS))
IO_EXEMPT = {"src/format/stk/stk_writer.c"}
C_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip_c(text):
    """`text` with comments and string/character literals blanked (newlines kept)."""
    return C_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_io_calls(root):
    problems = []
    top = os.path.join(root, "src", "format")
    if not os.path.isdir(top):
        return problems
    for path in sorted(source_files(top)):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel in IO_EXEMPT:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            code = strip_c(f.read())
        for m in IO_CALL.finditer(code):
            name = m.group(1)
            end = code.find(";", m.end())
            if name in ("open", "openat") and "O_DIRECTORY" in code[m.end():end]:
                continue  # a directory, for walking
            line = code.count("\n", 0, m.start()) + 1
            problems.append("%s:%d: calls %s(): the readers of src/format get their bytes "
                            "through src/io (src/io/source.h)" % (rel, line, name))
    return problems


def object_layer(path):
    """The src/ directory an object file was compiled from (.../src/DIR/x.c.o)."""
    parts = os.path.normpath(path).split(os.sep)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "src":
            name = "/".join(parts[i:])
            return parts[i + 1], name[:-2] if name.endswith(".o") else name
    return None, path


def check_symbols(objects, nm="nm"):
    defined, used = {}, []
    for obj in objects:
        layer, name = object_layer(obj)
        if layer is None:
            continue
        out = subprocess.run([nm, "-P", obj], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) < 2:
                continue
            if f[1] == "U":
                used.append((layer, name, f[0]))
            elif f[1] in "TDBRVWGS":
                defined[f[0]] = (layer, name)
    problems = []
    for layer, name, sym in sorted(used):
        if sym not in defined:
            continue  # a system library's
        t, where = defined[sym]
        if t == layer or t in LAYERS.get(layer, []):
            continue
        why = ("%s is above %s" % (t, layer) if t in LAYERS and layer in LAYERS[t]
               else "%s may use only %s" % (layer, ", ".join(LAYERS.get(layer, [])) or "itself"))
        problems.append("%s: uses %s, defined in %s: %s (docs/layers.md)" % (name, sym, where, why))
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--objects", nargs="*", default=[])
    ap.add_argument("--nm", default="nm")
    args = ap.parse_args(argv)
    problems = check_includes(args.root) + check_io_calls(args.root)
    if args.objects:
        problems += check_symbols(args.objects, args.nm)
    for p in problems:
        print(p)
    if problems:
        print("%d layer violation%s" % (len(problems), "" if len(problems) == 1 else "s"))
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
