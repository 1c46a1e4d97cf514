#!/usr/bin/env bash
# Run the CIFAR and ImageNet benchmarks for two builds in one run, alternating
# A, B, A, B..., so that both see the same machine: a change's effect on speed
# is the difference between the two columns, not between two days.
#
#   bench/ab_builds.sh BUILD_A BUILD_B [ROUNDS] [PHOTOS]
#
# BUILD_A / BUILD_B: build folders (with stoker, decode_floor) of the two
# commits, e.g. a worktree of the previous commit built with
# scripts/build.sh release, and build/. Each build packs its own shards
# (/tmp/stoker-ab-<name>-*), so a format change between them is fair.
# The DataLoader rows run once per build and round, as the scripts do.
# Output: the benchmarks' own tables, one per build and round, prefixed with
# the build's name; summarise the ratios from those.
set -euo pipefail
cd "$(dirname "$0")/.."
a=${1:?usage: bench/ab_builds.sh BUILD_A BUILD_B [ROUNDS] [PHOTOS]}
b=${2:?usage: bench/ab_builds.sh BUILD_A BUILD_B [ROUNDS] [PHOTOS]}
rounds=${3:-2}
photos=${4:-/work/data/photos}
py=/usr/bin/python3

tag() { basename "$(dirname "$(realpath "$1")")"; }

for r in $(seq 1 "$rounds"); do
  for build in "$a" "$b"; do
    name=$(tag "$build")
    echo "=== round $r, build $name ($build): CIFAR"
    $py bench/cifar_vs_torch.py --stoker "$build/stoker" --threads 2 --workers 2 | sed "s/^/[$name] /"
    echo "=== round $r, build $name ($build): ImageNet presets"
    $py bench/imagenet_vs_torch.py --build "$build" --photos "$photos" --workers 2 \
      --shards "/tmp/stoker-ab-$name-stk" --shards-restart "/tmp/stoker-ab-$name-stk-restart4" |
      sed "s/^/[$name] /"
  done
done
