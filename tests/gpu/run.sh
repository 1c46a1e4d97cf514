#!/usr/bin/env bash
# tests/gpu/run.sh — the CUDA backend's checks that need a real GPU (docs/gpu.md).
# CI has no GPU; run this on a machine with one and an NVIDIA driver:
#
#   tests/gpu/run.sh                 # everything; results in build/gpu-results/
#
# 1. builds (scripts/build.sh release: nvcc must be on PATH or in /usr/local/cuda/bin,
#    so the library embeds its kernels) and checks the driver (nvidia-smi);
# 2. the emulation tests (tests/python/test_gpu_emulated.py, STOKER_CUDA_EMULATE=1), as CI
#    runs them;
# 3. the same comparisons against the real device (STOKER_GPU_REAL=1): every preset and
#    the other specs in placements gpu, cpu and auto, the skip policy, the refused ops, the
#    DLPack stream protocol. Device batches are fetched with torch.from_dlpack when the
#    Python's torch has CUDA (else with the driver through ctypes; the torch-only tests
#    then skip) and compared with the host loader's: uint8 outputs, labels and indices
#    exactly, float outputs within 1e-6 (float32) or one unit in the last place
#    (float16, bfloat16); the largest difference of each comparison goes to
#    max-diff.jsonl;
# 4. decoder nvjpeg: which nvJPEG backend passes its self-test (each one asked for in turn,
#    STOKER_NVJPEG_BACKEND), then `stoker bench --device` in placements cpu and gpu and
#    with decoder nvjpeg (JSON);
# 5. bench/gpu.py on the photos set: placement cpu vs gpu vs gpu + decoder nvjpeg at 2 and
#    16 threads, and the simulated training loop's data share, device vs host delivery.
#
# Environment: STOKER_GPU_DEVICE (cuda:0), STOKER_GPU_OUT (build/gpu-results),
# STOKER_GPU_PYTHON (/usr/bin/python3: the Python the module is built for; point it at
# a Python of the same version with a CUDA torch for the torch checks), STOKER_PHOTOS
# (default: the small set scripts/photos-small.sh makes, with scripts/make_photos.py,
# as scripts/test.sh does), STOKER_GPU_BENCH_DATA (bench/gpu.py's data set; default
# $STOKER_PHOTOS/train) and STOKER_GPU_BENCH_BATCH (its batch size, 64: the small photos set has 200 images).
# STOKER_GPU_PREBUILT=1 skips the build, for a GPU machine without the -dev packages:
# the module must then be importable by that Python (a wheel from scripts/wheels.sh
# installed, or PYTHONPATH) and $STOKER_BUILD/stoker must be the CLI (the build's, or a
# two-line script running `python3 -m stoker "$@"`). STOKER_GPU_SKIP_EMULATION=1 leaves
# out step 2 (CI runs it).
# Exit status: 0 when every step passed; the steps all run either way.
set -euo pipefail
cd "$(dirname "$0")/../.."

device=${STOKER_GPU_DEVICE:-cuda:0}
out=${STOKER_GPU_OUT:-$PWD/build/gpu-results}
python=${STOKER_GPU_PYTHON:-/usr/bin/python3}
export PATH=$PATH:/usr/local/cuda/bin
failed=()
step() { printf '== %s\n' "$1"; }

step "driver"
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L; then
  echo "run.sh: nvidia-smi finds no GPU: this script needs a machine with one" >&2
  exit 1
fi

if [ "${STOKER_GPU_PREBUILT:-}" = 1 ]; then
  step "prebuilt: ${STOKER_BUILD:?STOKER_GPU_PREBUILT=1 needs STOKER_BUILD}"
  "$python" -c 'import stoker; print("stoker module:", stoker.__file__)'
else
  step "build"
  scripts/build.sh release
  export STOKER_BUILD=$PWD/build PYTHONPATH=$PWD/build/python
fi
mkdir -p "$out"
rm -f "$out/max-diff.jsonl" "$out/nvjpeg-backends.txt"
nvidia-smi > "$out/nvidia-smi.txt"
git log -1 --format='%H %s' > "$out/commit.txt" 2> /dev/null || true

step "photos set"
STOKER_PHOTOS=$(scripts/photos-small.sh)
export STOKER_PHOTOS
echo "photos: $STOKER_PHOTOS"

step "the device opens and delivers CUDA memory"
if ! "$python" - "$STOKER_PHOTOS/val" "$device" > "$out/preflight.txt" 2>&1 << 'EOF'
import sys
import stoker
loader = stoker.Loader(sys.argv[1], batch_size=4, pipeline="imagenet-val", output="dlpack",
                       device=sys.argv[2], placement="gpu")
images, labels = next(iter(loader))
print(repr(images))
assert images.device == sys.argv[2], "batches arrive in %s memory" % images.device
try:
    import torch
    print("torch", torch.__version__, "cuda" if torch.cuda.is_available() else "without CUDA")
except ImportError:
    print("no torch")
EOF
then
  failed+=("preflight")
fi
cat "$out/preflight.txt"

step "emulation tests"
if [ "${STOKER_GPU_SKIP_EMULATION:-}" = 1 ]; then
  echo "skipped (STOKER_GPU_SKIP_EMULATION=1)"
elif ! STOKER_CUDA_EMULATE=1 "$python" -m pytest -q tests/python/test_gpu_emulated.py \
    2>&1 | tee "$out/pytest-emulated.txt"; then
  failed+=("emulation tests")
fi

step "real-device tests ($device)"
if ! env -u STOKER_CUDA_EMULATE STOKER_GPU_REAL=1 STOKER_GPU_DEVICE="$device" \
    STOKER_GPU_REPORT="$out/max-diff.jsonl" \
    "$python" -m pytest -q -rs tests/python/test_gpu_emulated.py 2>&1 | tee "$out/pytest-real.txt"; then
  failed+=("real-device tests")
fi

step "decoder nvjpeg: the backend its self-test chose"
for backend in "" hardware gpu_hybrid hybrid; do
  if ! STOKER_NVJPEG_BACKEND=$backend "$python" - "$STOKER_PHOTOS/val" "$device" \
      >> "$out/nvjpeg-backends.txt" 2>&1 << 'EOF'
import os, sys
import stoker
want = os.environ.get("STOKER_NVJPEG_BACKEND") or "auto"
try:
    loader = stoker.Loader(sys.argv[1], batch_size=4, pipeline="imagenet-val", output="dlpack",
                           device=sys.argv[2], placement="gpu", decoder="nvjpeg")
    print("%s: %s" % (want, loader.device_info))
except stoker.UnsupportedError as e:
    print("%s: unsupported: %s" % (want, e))
    if want == "auto":
        raise
EOF
  then
    failed+=("nvjpeg backend ${backend:-auto}")
  fi
done
cat "$out/nvjpeg-backends.txt"

step "stoker bench --device"
for run in cpu gpu nvjpeg; do
  case $run in
    nvjpeg) args=(--placement gpu --decoder nvjpeg) ;;
    *) args=(--placement "$run") ;;
  esac
  if ! "$STOKER_BUILD/stoker" bench "$STOKER_PHOTOS/train" --pipeline imagenet-train-extensive \
      --threads 2 --batch 64 --device "$device" "${args[@]}" --json \
      > "$out/cli-bench-$run.json"; then
    failed+=("stoker bench ${args[*]}")
  fi
  cat "$out/cli-bench-$run.json"
done

step "bench/gpu.py"
bench_data=${STOKER_GPU_BENCH_DATA:-$STOKER_PHOTOS/train}
if ! "$python" bench/gpu.py "$bench_data" --device "$device" --threads16 \
    --batch "${STOKER_GPU_BENCH_BATCH:-64}" --out "$out/bench-gpu.json" 2>&1 | tee "$out/bench-gpu.txt"; then
  failed+=("bench/gpu.py")
fi

step "summary"
echo "results in $out"
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}" | tee "$out/summary.txt"
  exit 1
fi
echo "all passed" | tee "$out/summary.txt"
