#!/usr/bin/env bash
# Install all dependencies, build, and run the demo: Fashion-MNIST (Debian's
# dataset-fashion-mnist) through a realistic augmentation pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
exec build/stoker demo "$@"
