"""Per-batch Python steps on the consumer side: ``stoker.BatchOp(fn)`` at the
end of a transform list, and ``Loader(..., batch_transform=fn)``.

Where they run. The native pipeline makes each sample on the worker threads
and writes it into a pooled batch; these steps run afterwards, on the
finished batch, in the thread that iterates the Loader (the training loop's
thread), holding the GIL, one batch at a time. So they may use torch, the
GPU, any Python library; their cost is paid by the training loop's thread
and is not spread over the worker threads (a per-sample op belongs in the
native pipeline).

Order: the BatchOps of the transform list in list order, each on the
images (``fn(images) -> images``), then ``batch_transform`` on the whole
batch (``fn(batch) -> anything``: the tuple ``iter(loader)`` would yield,
``(images, labels)``; what it returns is what the loop gets). A
``stoker.Mixup`` as batch_transform keeps its own call (its draws are keyed
by the batch's epoch and position). ``iter_with_indices`` passes the same
batch to the steps and appends the indices to what they return.

Accounting. The data-stall profile counts a batch's wait as the time the
loop spent inside ``next()`` (docs/engine.md, "Profile"); these steps are
data work done inside that ``next()`` (the native iterator calls them,
``step``), so their time is the batch's wait, not the step's.
"""

__all__ = ["BatchOp"]


class BatchOp:
    """``fn(images) -> images``, applied to every finished batch's images
    after the native pipeline, in the consumer thread (with the GIL). Put
    BatchOps at the end of ``transforms=``; they run in list order::

        transforms=[stoker.RandomResizedCrop(224), stoker.Normalize(MEAN, STD),
                    stoker.BatchOp(lambda x: x.cuda(non_blocking=True))]

    ``images`` is what the Loader's output gives (a torch tensor, a NumPy
    array, a stoker Batch); fn returns the new images (the labels are
    untouched: use ``batch_transform=`` for a step that needs them)."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError("BatchOp needs a callable, got %r" % (fn,))
        self.fn = fn

    def __call__(self, images):
        return self.fn(images)

    def __repr__(self):
        return "BatchOp(%s)" % getattr(self.fn, "__qualname__", None) or repr(self.fn)


def split(transforms):
    """``transforms`` -> (the native transforms, the trailing BatchOps).
    BatchOps must come after every native transform: they run on the
    finished batch."""
    if not isinstance(transforms, (list, tuple)):
        return transforms, ()
    items = list(transforms)
    at = [i for i, t in enumerate(items) if isinstance(t, BatchOp)]
    if not at:
        return transforms, ()
    for i in range(at[0], len(items)):
        if not isinstance(items[i], BatchOp):
            raise ValueError("transforms[%d] (%r) comes after a BatchOp (transforms[%d]): a "
                             "BatchOp runs on the finished batch, after every native "
                             "transform, so it must come last" % (i, items[i], at[0]))
    return items[:at[0]], tuple(items[at[0]:])


def _with_images(batch, images):
    if isinstance(batch, dict):
        out = dict(batch)
        out["image"] = images
        return out
    return (images,) + tuple(batch[1:])


def step(ops, bt, mixup, with_indices):
    """The function the native iterator calls on every item before yielding
    it (``_Loader.iter(wrap=)``): ``fn(item, epoch, position)`` runs
    ``ops`` (BatchOps) and ``bt`` on it; ``mixup`` is a dict (seed, rank,
    layout) when bt is a stoker.Mixup, which draws with the batch's epoch
    and position. Called by the iterator, not by a generator around it, so
    that Ctrl-C while a step runs leaves the batch to the next ``next()``
    (the step runs again on it) instead of losing it (docs/python.md,
    "Ctrl-C"). Its time is inside that ``next()``, so the profile counts it
    as the batch's wait."""

    def fn(item, epoch, position):
        batch, rest = (item[:-1], item[-1:]) if with_indices else (item, ())
        if ops:
            images = batch["image"] if isinstance(batch, dict) else batch[0]
            for op in ops:
                images = op(images)
            batch = _with_images(batch, images)
        if mixup:
            images, soft = bt(batch[0], batch[1], seed=mixup["seed"], epoch=epoch,
                              position=position, rank=mixup["rank"], layout=mixup["layout"])
            out = (images, soft) + tuple(batch[2:])
        elif bt is not None:
            out = bt(batch)
        else:
            out = batch
        if rest:
            out = out + rest if isinstance(out, tuple) else (out,) + rest
        return out

    return fn
