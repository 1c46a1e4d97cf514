#!/usr/bin/env bash
# Regenerate fuzz/corpus/spec/: seed specs for fuzz/fuzz_spec.c, one spec
# text per file (docs/fuzzing.md). Every op of the table with its keys, the
# presets, whitespace and case variants, and inputs that fail at each stage
# of the parser (lexer, numbers, keys, order rules, shape checks). Inputs
# found by fuzzing (found-*, crash-* ...) are kept: only seed-* is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=fuzz/corpus/spec
mkdir -p "$dir"
rm -f "$dir"/seed-*
n=0
while IFS= read -r spec; do
  printf '%s' "$spec" > "$(printf '%s/seed-%03d' "$dir" "$n")"
  n=$((n + 1))
done <<'SPECS'
pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw
random_crop 32 padding=4 fill=1,2,3 mode=edge | flip 0.5 | to f16
pad 1,2,3,4 fill=5,6,7 mode=symmetric | center_crop 7 | vflip p=0.25
pad 3,8 padding_mode=reflect | hflip 1 | normalize mean=0.1,0.2,0.3 std=0.3,0.2,0.1 | to f32 hwc
decode | random_resized_crop 224 scale=0.08:1 ratio=0.75:1.3333 | flip 0.5 | color_jitter 0.4 0.4 0.4 0.1 | normalize imagenet | to f16 chw
resize 256 | center_crop 224 | normalize imagenet | to f32 chw
resize 20,16 | rotate 30 fill=7 | to u8 hwc
rotate degrees=-10:20 fill=1,2,3 | color_jitter brightness=0.5 contrast=0.5:1.5 saturation=0 hue=-0.1:0.1
random_resized_crop 16,12 | vflip | rotate 45 | vflip | color_jitter 0.2 0.2 0.2 0.2 | normalize 0.5 0.25
posterize 3 p=1 | resize 10,12 | solarize threshold=127.5 p=0.5 | normalize mnist
flip | posterize bits=0 | solarize 255 | to u8
imagenet-train-few
imagenet-train-extensive | to f16
imagenet_val | to u8 chw
normalize fashion-mnist | to half
	PAD	4
|
FLIP
|random_crop 30
pad 4 fill = 1 , 2 , 3 mode = Reflect
normalize 0.5 , 0.5 , 0.5   0.2, 0.2 ,0.2
flip p = .5 | vflip 1.
normalize 5e-1 2.5E-1
pad x | flip
foo 3
filp
posterise 3
pad 4 | | flip
flip |
pad 4 fill=256
pad 1,2,3
random_crop 8 fill=3
center_crop 33
normalize imagenet | pad 2
normalize mnist | normalize mnist
flip | decode
to f32 | flip
normalize mnist | to u8
normalize 0.5 1e-45
normalize mean=1e30 std=1e-10
rotate 10 | posterize 3
posterize 3 | pad 2
posterize 9
solarize 256 p=2
solarize 9 0.5 7
color_jitter hue=0.6
random_resized_crop 8 scale=1:0.5
resize 16777217
pad 16777216 | pad 16777216 | pad 16777216 | pad 16777216 | pad 16777216
imagenet-val | flip
1e400
flip 0.5 0.5
random_resized_crop 24 interpolation=bicubic | flip | random_apply 0.8 | color_jitter 0.4 0.4 0.4 0.1 | grayscale 0.2 | gaussian_blur 5 sigma=0.1:2 | normalize imagenet | random_erasing 0.5 | to bf16
resize 12,10 interpolation=bicubic | random_apply p=0.5 n=2 | gaussian_blur 3,5 2 | rotate 10 | random_erasing p=1 scale=0.1:0.5 ratio=0.5:2 value=1,2,3 | random_erasing 0.3 | to u8
grayscale p=1 | gaussian_blur kernel_size=7 sigma=0.5 | to bfloat16 hwc
gaussian_blur 4
gaussian_blur 99
random_apply 0.5 n=3 | grayscale
random_apply | resize 4
random_erasing | flip
random_erasing value=random | to f16 hwc
resize 8 interpolation=nearest | center_crop 6
resize 8 interpolation=area
trivial_augment_wide 7 fill=9 | to u8
rand_augment 3 5 11 | normalize imagenet
auto_augment imagenet fill=128
affine 30 translate=0.2,0.1 scale=0.7:1.3 shear=1,2,3,4 interpolation=bilinear fill=1,2,3
pad 2 | random_crop 8 | flip | rand_augment 16 | affine 5 | to f16
SPECS
echo "spec corpus: $(ls "$dir" | wc -l) files"
