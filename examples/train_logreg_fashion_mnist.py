#!/usr/bin/python3
"""Multinomial logistic regression (784 -> 10) on Fashion-MNIST, fed by stoker.

Reads Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist)
with stoker.Loader: shuffled mini-batches of 256 normalised float32 images
for SGD, and the t10k split for evaluation. Prints each epoch's mean training
loss and the test accuracy (about 0.84 after 5 epochs).

    PYTHONPATH=build/python /usr/bin/python3 examples/train_logreg_fashion_mnist.py [--epochs 5]
"""
import argparse
import time

import torch

import stoker

MEAN, STD = (0.2860,), (0.3530,)  # Fashion-MNIST pixel mean and std


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.02)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the loader's threads do the data work

    train = stoker.Loader("fashion-mnist:" + args.data, batch_size=args.batch, shuffle=True,
                          seed=0, transforms=[stoker.Normalize(MEAN, STD)],
                          num_threads=args.threads, output="torch")
    test = stoker.Loader("fashion-mnist:%s?split=test" % args.data, batch_size=1000,
                         transforms=[stoker.Normalize(MEAN, STD)], num_threads=args.threads,
                         output="torch")
    print("train: %d images, %d batches/epoch; test: %d images"
          % (len(train.dataset), len(train), len(test.dataset)))

    model = torch.nn.Linear(28 * 28, 10)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # Cosine decay to 0 over the run: SGD's noise dies down at the end.
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        train.set_epoch(epoch)
        total, n = 0.0, 0
        for images, labels in train:  # images: (B, 1, 28, 28) float32, shared with the pool
            logits = model(images.flatten(1))
            loss = loss_fn(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(labels)
            n += len(labels)
        correct = 0
        with torch.no_grad():
            for images, labels in test:
                correct += (model(images.flatten(1)).argmax(1) == labels).sum().item()
        print("epoch %d: train loss %.4f, test accuracy %.4f (%.1f s)"
              % (epoch, total / n, correct / len(test.dataset), time.perf_counter() - t0),
              flush=True)
    st = train.stats()
    print("loader: %d batches, consumer waited %.2f s in total, pool %d buffers (%.1f MB)"
          % (st["batches"], st["consumer_wait_s"], st["batches_allocated"],
             st["pool_bytes"] / 1e6))


if __name__ == "__main__":
    main()
