#!/usr/bin/env bash
# Configure and build one variant of stoker.
#   scripts/build.sh            release build in build/ (the default compiler, gcc)
#   scripts/build.sh asan       AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh tsan       ThreadSanitizer build in build-tsan/
#   scripts/build.sh clang      release build with clang in build-clang/, without the
#                               CUDA kernels (-DSTK_CUDA=OFF): the CPU-only build stays covered
#   scripts/build.sh coverage   gcc --coverage build (-O1: the tests run 3x faster
#                               than at -O0) in build-coverage/
#                               (scripts/coverage.sh summarises it after ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-release}
cc=()
case "$variant" in
  release)  dir=build;          flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan)     dir=build-asan;     flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_SANITIZE=address) ;;
  tsan)     dir=build-tsan;     flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTK_SANITIZE=thread) ;;
  clang)    dir=build-clang;    flags=(-DCMAKE_BUILD_TYPE=Release -DSTK_BUILD_PYTHON=OFF)
            cc=(-DCMAKE_C_COMPILER=clang) ;;
  coverage) dir=build-coverage; flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -g" -DSTK_COVERAGE=ON
                                   -DSTK_BUILD_PYTHON=OFF) ;;
  *) echo "usage: scripts/build.sh [release|asan|tsan|clang|coverage]" >&2; exit 2 ;;
esac
werror=OFF
if [ "${CI:-}" = true ]; then werror=ON; fi
# The CUDA kernels (docs/gpu.md): the clang build is the CPU-only one; the
# others build them when nvcc is found (STK_CUDA=AUTO), and under CI, where
# nvcc is installed, they must (ON: configuring fails without nvcc).
cuda=()
if [ "$variant" = clang ]; then
  cuda=(-DSTK_CUDA=OFF)
elif [ "${CI:-}" = true ] && { [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null \
                               || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  cuda=(-DSTK_CUDA=ON)
else
  cuda=(-DSTK_CUDA=AUTO)
fi
cmake -S . -B "$dir" -G "Unix Makefiles" "${cc[@]}" -DSTK_WERROR="$werror" "${cuda[@]}" "${flags[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
