#!/usr/bin/env bash
# Regenerate the fuzzers' seed corpora, fuzz/corpus/shard/ and
# fuzz/corpus/datasets/ (docs/fuzzing.md). Deterministic for a given
# libjpeg/libpng/zstd/zlib; the generated files are committed.
#
#   fuzz/make_corpus.sh            # uses the release build in build/
#   BUILD=build-bench fuzz/make_corpus.sh
#
# Seeds: shards written by the library's writer (fuzz/make_corpus.c: raw,
# raw+zstd, JPEG, PNG, eight-field, detection (format 1.2: varying boxes),
# bytes-only, fixed-only, 0..3 records,
# damaged copies), two shards made by `stoker pack` from a 2-record CIFAR-10
# file (raw and --raw --zstd), and CIFAR/IDX files. Inputs found by fuzzing
# (found-*, crash-* ...) are kept: only the generated names are replaced.
# fuzz/repro/ gets reproducers of findings not fixed yet: CTest does not
# replay them; move each into fuzz/corpus/shard/ once its fix lands.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
cmake --build "$build" --target stoker_static stoker_cli >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Tiny encoded images (Pillow, Debian's python3-pil).
/usr/bin/python3 - "$tmp" <<'PY'
import sys
from PIL import Image
out = sys.argv[1]
im = Image.new("RGB", (16, 12))
im.putdata([(x * 16, y * 20, (x + y) * 8) for y in range(12) for x in range(16)])
im.save(out + "/tiny.jpg", quality=75)
pa = Image.new("RGBA", (8, 8))
pa.putdata([(x * 32, y * 32, 100, 255 - x * y) for y in range(8) for x in range(8)])
pa.save(out + "/tiny.png")
PY

cc -std=c11 -D_GNU_SOURCE -O1 -Iinclude -Isrc fuzz/make_corpus.c "$build/libstoker.a" \
  $(pkg-config --libs libzstd spng blosc) -ljpeg -lz -lm -lpthread -o "$tmp/make_corpus"

mkdir -p fuzz/corpus/shard fuzz/corpus/datasets fuzz/repro
rm -f fuzz/corpus/shard/*.stk fuzz/corpus/datasets/cifar* fuzz/corpus/datasets/idx-*
"$tmp/make_corpus" fuzz/corpus/shard fuzz/corpus/datasets fuzz/repro "$tmp/tiny.jpg" "$tmp/tiny.png"

# The real packer's output (its metadata, its layout choices).
# (Relative paths: the packed `source` metadata must not name the temp dir.)
cp fuzz/corpus/datasets/cifar10-2.bin "$tmp/c10.bin"
stoker=$(realpath "$build/stoker")
(cd "$tmp" && "$stoker" pack -q cifar10:c10.bin pack-raw >/dev/null &&
  "$stoker" pack -q --raw --zstd 3 cifar10:c10.bin pack-zstd >/dev/null)
cp "$tmp/pack-raw/shard-00000.stk" fuzz/corpus/shard/pack-cifar-raw.stk
cp "$tmp/pack-zstd/shard-00000.stk" fuzz/corpus/shard/pack-cifar-zstd.stk

echo "shard corpus:    $(ls fuzz/corpus/shard | wc -l) files, $(du -sh fuzz/corpus/shard | cut -f1)"
echo "datasets corpus: $(ls fuzz/corpus/datasets | wc -l) files, $(du -sh fuzz/corpus/datasets | cut -f1)"
