#!/usr/bin/env bash
# Print the directory of the small photos set the tests use, making it first
# if needed: $STOKER_PHOTOS when set; else build/photos-small, made with the
# repository's own generator, scripts/make_photos.py (10 classes x (20 train
# + 2 val) JPEGs cut from photographs of Debian packages, and 20 hostile files
# in corrupt/; about 24 MB, 5-10 s on 2 cores). The set is remade when its
# DONE stamp (the generator's hash and arguments) differs from what this
# generator would write, so a changed generator never leaves a stale set.
# Used by scripts/test.sh and tests/gpu/run.sh; fails (never skips) when the
# set cannot be made: make_photos.py names the Debian packages that are
# missing (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${STOKER_PHOTOS:-}" ]; then
  echo "$STOKER_PHOTOS"
  exit 0
fi
photos=$PWD/build/photos-small
args=(--classes 10 --train-per-class 20 --val-per-class 2 --corrupt 20 --seed 0 --profile imagenet)
want=$(/usr/bin/python3 scripts/make_photos.py --stamp "${args[@]}")
if [ "$(cat "$photos/DONE" 2>/dev/null || true)" != "$want" ]; then
  mkdir -p build
  # made beside, then renamed: an interrupted run never leaves a half set in place
  rm -rf "$photos.tmp"
  if ! nice -n 10 /usr/bin/python3 scripts/make_photos.py --out "$photos.tmp" "${args[@]}" \
      > build/photos-small.log 2>&1; then
    cat build/photos-small.log >&2
    rm -rf "$photos.tmp"
    echo "photos-small.sh: could not make the photos set (log above; STOKER_PHOTOS=DIR uses another)" >&2
    exit 1
  fi
  rm -rf "$photos"
  mv "$photos.tmp" "$photos"
fi
echo "$photos"
