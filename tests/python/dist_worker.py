"""One rank of test_module_distributed.py, started by torchrun (gloo).

argv: RESULT_FILE CIFAR_DIR. Each rank loads with rank/world_size taken
from torch.distributed, gathers the dataset indices it saw with
all_gather_object, and rank 0 checks the docs/sampler.md contract and
writes a JSON result for the test to read."""
import json
import os
import sys

import numpy as np
import torch.distributed as dist

import stoker

result_file, data = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
# Lie in the environment: the loader must take rank/world_size from the
# initialised process group, not from RANK/WORLD_SIZE.
os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"

report = {"world_size": world, "errors": []}
N, B = 185, 8
for drop_last in (False, True):
    loader = stoker.Loader("cifar10:" + data, batch_size=B, shuffle=True, seed=5,
                           drop_last=drop_last, output="numpy",
                           transforms=[stoker.RandomCrop(32, padding=4),
                                       stoker.RandomHorizontalFlip()])
    assert (loader.rank, loader.world_size) == (rank, world)
    per_epoch = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        idx = []
        for images, labels, indices in loader.iter_with_indices():
            idx.extend(int(i) for i in indices)
        per_epoch.append(idx)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "epochs": per_epoch,
                                      "batches": len(loader)})
    if rank != 0:
        continue
    err = report["errors"]
    gathered.sort(key=lambda g: g["rank"])
    if len({g["batches"] for g in gathered}) != 1:
        err.append("ranks have different batch counts")
    orders = []
    for epoch in range(2):
        seqs = [g["epochs"][epoch] for g in gathered]
        lens = {len(s) for s in seqs}
        if len(lens) != 1:
            err.append("epoch %d: ranks saw different counts %s" % (epoch, lens))
            continue
        per = lens.pop()
        # Global slot s = rank + W * k (docs/sampler.md): interleave the ranks.
        glob = [seqs[s % world][s // world] for s in range(per * world)]
        orders.append(glob)
        if not drop_last:
            if per != -(-N // world):
                err.append("pad: %d per rank, expected ceil(N/W)" % per)
            if sorted(glob[:N]) != list(range(N)):
                err.append("pad: the first N slots are not a permutation")
            if glob[N:] != glob[:len(glob) - N]:
                err.append("pad: the padded slots do not wrap to the start")
            counts = np.bincount(glob, minlength=N)
            if counts.min() != 1 or (counts == 2).sum() != per * world - N:
                err.append("pad: not exactly-once plus padding")
        else:
            if per != (N // world) // B * B:
                err.append("drop_last: %d per rank" % per)
            if len(set(glob)) != len(glob):
                err.append("drop_last: a sample seen twice")
    if len(orders) == 2 and orders[0] == orders[1]:
        err.append("epochs 0 and 1 have the same order")
    report["drop_last=%s" % drop_last] = {"per_rank": len(gathered[0]["epochs"][0]),
                                          "batches": gathered[0]["batches"]}

if rank == 0:
    with open(result_file + ".tmp", "w") as f:
        json.dump(report, f)
    os.rename(result_file + ".tmp", result_file)
dist.barrier()
dist.destroy_process_group()
