#!/usr/bin/env bash
# Line coverage of the library (src/) and the CLI (cli/) after the tests ran
# in the coverage build (scripts/build.sh coverage; ctest --test-dir
# build-coverage), measured with gcc's own gcov (no gcovr needed): one line
# per directory, the total, and the least covered files.
#   scripts/coverage.sh [BUILD_DIR]     (default build-coverage)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-coverage}
root=$PWD
objs=("$dir"/CMakeFiles/stoker_objects.dir "$dir"/CMakeFiles/stoker_cli.dir)
mapfile -t gcda < <(find "${objs[@]}" -name '*.gcda' 2>/dev/null | sort)
if ((${#gcda[@]} == 0)); then
  echo "coverage: no .gcda files under $dir (build with scripts/build.sh coverage, then run ctest)" >&2
  exit 1
fi
# gcov -n prints, per source it saw: File 'PATH' / Lines executed:P% of N.
# Each .c file is counted from its own object only (headers are left out:
# their inline functions show up once per including object).
summary='
import collections, os, re, sys
root = sys.argv[1] + "/"
lines, hits, seen, f = collections.Counter(), collections.Counter(), {}, None
for line in sys.stdin:
    m = re.match(r"File \x27(.*)\x27", line)
    if m:
        f = m.group(1).replace(root, "", 1)
        continue
    m = re.match(r"Lines executed:([0-9.]+)% of ([0-9]+)", line)
    if m and f and re.match(r"(src|cli)/.*\.c$", f) and f not in seen:
        n = int(m.group(2))
        seen[f] = (n, round(float(m.group(1)) * n / 100))
for f, (n, h) in seen.items():
    for d in (os.path.dirname(f), "total"):
        lines[d] += n
        hits[d] += h
print("%-16s %8s %8s %7s" % ("directory", "lines", "covered", "cover"))
for d in sorted(lines, key=lambda d: (d == "total", d)):
    print("%-16s %8d %8d %6.1f%%" % (d, lines[d], hits[d], 100.0 * hits[d] / lines[d]))
low = sorted((h / n, f) for f, (n, h) in seen.items() if n >= 50)[:5]
print("least covered files (>= 50 lines): " + ", ".join("%s %.1f%%" % (f, 100 * r) for r, f in low))
'
(cd "$dir" && gcov -n "${gcda[@]/#/$root/}" 2>/dev/null) | /usr/bin/python3 -c "$summary" "$root"
