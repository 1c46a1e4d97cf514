"""torchvision's cost of the policies, for docs/pipeline.md's table beside
bench/bench_augment: thread CPU time per image of PIL decode +
RandomResizedCrop(224) + RandomHorizontalFlip + [POLICY] + ToTensor +
Normalize, one thread, the variants alternated image by image.

    /usr/bin/python3 bench/augment_torchvision.py [ROUNDS] FILE...   (FILE '-': stdin)
"""
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image

torch.set_num_threads(1)
args = sys.argv[1:]
rounds = 2
if args and args[0].isdigit():
    rounds = int(args.pop(0))
files = [l.strip() for l in sys.stdin] if args == ["-"] else args
head = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
tail = [T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
variants = [("none", T.Compose(head + tail)),
            ("TrivialAugmentWide (PIL)", T.Compose(head + [T.TrivialAugmentWide()] + tail)),
            ("RandAugment (PIL)", T.Compose(head + [T.RandAugment()] + tail)),
            ("AutoAugment (PIL)", T.Compose(head + [T.AutoAugment()] + tail)),
            ("RandAugment (uint8 tensor)",
             T.Compose(head + [T.PILToTensor(), T.RandAugment(), T.ConvertImageDtype(torch.float),
                               tail[1]]))]
cpu = [0.0] * len(variants)
n = 0
for r in range(rounds):
    for i, f in enumerate(files):
        for k in range(len(variants)):
            s = (k + i) % len(variants)
            t0 = time.thread_time()
            variants[s][1](Image.open(f).convert("RGB"))
            cpu[s] += time.thread_time() - t0
        n += 1
print("%d images per variant, 1 thread, CPU time" % n)
for (name, _), c in zip(variants, cpu):
    print("%8.1f us/image %7.0f images/CPU-s  %+7.1f us  %s"
          % (1e6 * c / n, n / c, 1e6 * (c - cpu[0]) / n, name))
