"""stoker: a training data loader with native threads and zero-copy batches.

    import stoker
    loader = stoker.Loader("cifar10:data/", batch_size=256, shuffle=True,
                           transforms=[stoker.RandomCrop(32, padding=4),
                                       stoker.RandomHorizontalFlip(),
                                       stoker.Normalize(MEAN, STD)])
    for epoch in range(10):
        loader.set_epoch(epoch)
        for images, labels in loader:
            ...

The native half is the C extension ``stoker._stoker`` (built on libstoker's
public API); this package adds argument handling and the transform classes.
See docs/python.md.
"""
from . import _stoker
from ._stoker import (Batch, DataError, ForkError, FormatError, Interrupted, InvalidArgument,
                      LimitError, NetworkError, AccessDenied, NotFound, OutOfMemory, PoolExhausted, SpecError, StateError,
                      StokerError, StokerIOError, StoppedError, ThreadError, Timeout,
                      UnsupportedError, spec_check, strerror)
from .loader import (Dataset, Loader, build_spec, cache_info, cache_trim, concat, from_numpy,
                     io_stats, jpeg_index_stats, open, pack, prefetch, set_cache)
from .mixup import Mixup
from .fields import Ragged
from .writer import ShardWriter
from .batchops import BatchOp
from .external import ExternalSource
from .doctor import doctor
from .user_ops import NumbaOp, PythonOp, UserOp, load_plugin
from . import transforms as _transforms
from .transforms import *  # noqa: F401,F403 -- every transform class (one per op of the op table)

__version__ = _stoker.version

__all__ = [
    "Loader", "Dataset", "Batch", "Mixup", "Ragged", "ShardWriter", "BatchOp", "ExternalSource",
    "doctor", "open", "concat", "set_cache", "cache_info", "cache_trim", "prefetch", "io_stats",
    "jpeg_index_stats", "from_numpy", "pack", "build_spec", "spec_check", "strerror",
    "StokerError", "InvalidArgument", "OutOfMemory", "StokerIOError", "NotFound", "FormatError",
    "SpecError", "StateError", "StoppedError", "LimitError", "UnsupportedError", "DataError",
    "ThreadError", "PoolExhausted", "Interrupted", "Timeout", "ForkError",
    "NetworkError", "AccessDenied",
    "NumbaOp", "PythonOp", "UserOp", "load_plugin",
] + [n for n in _transforms.__all__ if n != "to_spec"]
