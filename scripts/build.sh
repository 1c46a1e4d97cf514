#!/usr/bin/env bash
# Configure and build one variant of stoker.
#   scripts/build.sh            release build in build/
#   scripts/build.sh asan       AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh tsan       ThreadSanitizer build in build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-release}
case "$variant" in
  release) dir=build;      flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_SANITIZE=address) ;;
  tsan)    dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_SANITIZE=thread) ;;
  *) echo "usage: scripts/build.sh [release|asan|tsan]" >&2; exit 2 ;;
esac
werror=OFF
if [ "${CI:-}" = true ]; then werror=ON; fi
cmake -S . -B "$dir" -G "Unix Makefiles" -DSTK_WERROR="$werror" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
