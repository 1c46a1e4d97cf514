#!/usr/bin/python3
"""Train torchvision's ResNet-18 on an ImageFolder dataset, fed by stoker or by
PyTorch's DataLoader, and show how much of each epoch waits for data.

The training loop is the usual one: per batch it logs

    Train [epoch][i/N] Time <s per batch> Data <s waiting for the batch> Loss <loss>

where "Data" is the time between the end of the previous step and the moment
the next batch is in hand (the consumer's wait), and "Time" the whole step.
At the end of each epoch it prints the share of epoch time spent waiting for
data. With --loader both, it runs the two loaders one after the other on the
same images, model initialisation and augmentation (imagenet-train-few:
RandomResizedCrop(224) + flip + normalize) and prints both shares.

    PYTHONPATH=build/python /usr/bin/python3 examples/train_resnet.py \\
        --data /work/data/photos/train --loader both --batches 20

With --port the stoker loader is given the torchvision Compose of the
DataLoader unchanged (stoker translates it into the same pipeline, so its
batches equal the native spelling's: tests/python/test_torchvision_port.py).

On a CPU-only machine the model step dominates (ResNet-18 forward+backward on
224x224 is ~5 GFLOP per image) and the loaders share the cores with it, so
--batches limits the epoch to a few batches; --image-size shrinks the crops.
"""
import argparse
import time

import torch
import torchvision

import stoker

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def torchvision_transforms(size):
    """The torchvision pipeline (the DataLoader's)."""
    from torchvision import transforms
    return transforms.Compose([transforms.RandomResizedCrop(size),
                               transforms.RandomHorizontalFlip(),
                               transforms.ToTensor(), transforms.Normalize(MEAN, STD)])


def stoker_loader(args, size):
    # --port: the torchvision Compose itself, translated by stoker into the
    # same pipeline as the native spelling below (same batches).
    if getattr(args, "port", False):
        tf = torchvision_transforms(size)
    else:
        tf = [stoker.RandomResizedCrop(size), stoker.RandomHorizontalFlip(),
              stoker.Normalize(MEAN, STD)]
    return stoker.Loader(args.data, batch_size=args.batch, shuffle=True, seed=0, transforms=tf,
                         num_threads=args.workers, prefetch=4, drop_last=True, output="torch")


def torch_loader(args, size):
    ds = torchvision.datasets.ImageFolder(args.data, torchvision_transforms(size))
    return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                       num_workers=args.workers, drop_last=True,
                                       persistent_workers=args.workers > 0)


def train(name, loader, args, classes):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    shares = []
    for epoch in range(args.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        total = min(len(loader), args.batches) if args.batches else len(loader)
        data_time = step_time = 0.0
        t_epoch = end = time.perf_counter()
        for i, (images, labels) in enumerate(loader):
            if i >= total:
                break
            data = time.perf_counter() - end
            loss = loss_fn(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            step = now - end
            end = now
            data_time += data
            step_time += step
            if i % args.print_freq == 0 or i + 1 == total:
                print("[%s] Train [%d][%d/%d] Time %.3f Data %.3f Loss %.4f"
                      % (name, epoch, i, total, step, data, loss.item()), flush=True)
        epoch_time = time.perf_counter() - t_epoch
        share = data_time / epoch_time
        shares.append(share)
        print("[%s] epoch %d: %.1f s, %.1f%% of it waiting for data (%.2f s of %.2f s), "
              "%.1f images/s" % (name, epoch, epoch_time, 100 * share, data_time, epoch_time,
                                 total * args.batch / epoch_time), flush=True)
    return shares


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/work/data/photos/train")
    ap.add_argument("--loader", choices=["stoker", "torch", "both"], default="both")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batches", type=int, default=20, help="batches per epoch (0 = all)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2,
                    help="stoker threads / DataLoader worker processes")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--print-freq", type=int, default=5)
    ap.add_argument("--port", action="store_true",
                    help="give stoker the torchvision Compose object unchanged")
    args = ap.parse_args()
    classes = len(torchvision.datasets.folder.find_classes(args.data)[0])
    print("ResNet-18, %d classes, batch %d, %d px crops, %d loader workers/threads, "
          "torch threads %d" % (classes, args.batch, args.image_size, args.workers,
                                torch.get_num_threads()))
    results = {}
    for name in (["stoker", "torch"] if args.loader == "both" else [args.loader]):
        make = stoker_loader if name == "stoker" else torch_loader
        results[name] = train(name, make(args, args.image_size), args, classes)
    print()
    for name, shares in results.items():
        print("%-7s data-wait share of epoch time: %s" % (
            name, ", ".join("%.1f%%" % (100 * s) for s in shares)))


if __name__ == "__main__":
    main()
