#!/usr/bin/env bash
# Print the directory of the small photos set the tests use, making it first
# if needed: $STOKER_PHOTOS when set; else build/photos-small, made once with
# shared/datasets/make_photos.sh (found beside the checkout or any folder
# above it, or named by $STOKER_MAKE_PHOTOS). Used by scripts/test.sh and
# tests/gpu/run.sh; fails (never skips) when the set cannot be made.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${STOKER_PHOTOS:-}" ]; then
  echo "$STOKER_PHOTOS"
  exit 0
fi
photos=$PWD/build/photos-small
if [ ! -f "$photos/DONE" ]; then
  make_photos=${STOKER_MAKE_PHOTOS:-}
  dir=$PWD
  while [ -z "$make_photos" ] && [ "$dir" != / ]; do
    dir=$(dirname "$dir")
    if [ -x "$dir/shared/datasets/make_photos.sh" ]; then
      make_photos=$dir/shared/datasets/make_photos.sh
    fi
  done
  if [ -z "$make_photos" ]; then
    echo "photos-small.sh: no shared/datasets/make_photos.sh next to the checkout: set" \
         "STOKER_MAKE_PHOTOS=PATH/make_photos.sh or STOKER_PHOTOS=DIR" >&2
    exit 1
  fi
  mkdir -p build
  rm -rf "$photos"
  "$make_photos" --out "$photos" --classes 10 --train-per-class 20 --val-per-class 2 \
    --corrupt 20 > build/photos-small.log
fi
echo "$photos"
