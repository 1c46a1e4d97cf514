#!/usr/bin/env bash
# Install all dependencies, then build and run every test:
#   1. release build (-Werror under CI): all C tests + CLI smoke test (CTest)
#   2. AddressSanitizer + UBSan build: all C tests
#   3. ThreadSanitizer build: the engine's tests (loader, sampler)
#   4. Python tests (pytest, Debian's /usr/bin/python3): CLI behaviour and
#      op values against torchvision/NumPy references
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== release build + tests"
scripts/build.sh release
ctest --test-dir build --output-on-failure -j2

echo "== AddressSanitizer + UBSan"
scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2

echo "== ThreadSanitizer (engine)"
scripts/build.sh tsan
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -R 'test_loader|test_sampler|test_rng'

echo "== Python tests"
STOKER_BUILD="$PWD/build" PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q tests/python
