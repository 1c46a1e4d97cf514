"""stoker.Loader, stoker.open, stoker.from_numpy: the Python face of the C
loader. Argument handling lives here; every per-batch step is in the C
extension (``_stoker._Iterator.__next__``). See docs/python.md."""
import operator
import os
import sys

from . import _stoker, _torchvision, batchops
from .transforms import ToTensor, to_spec

__all__ = ["Loader", "Dataset", "open", "from_numpy", "pack", "concat"]

_builtin_open = open

_DTYPES = {"uint8": "u8", "u8": "u8", "float16": "f16", "half": "f16", "f16": "f16",
           "float32": "f32", "float": "f32", "f32": "f32", "bfloat16": "bf16", "bf16": "bf16"}
_LAYOUTS = {"nchw": "chw", "chw": "chw", "nhwc": "hwc", "hwc": "hwc"}
_OUTPUTS = ("torch", "numpy", "dlpack")
_ON_ERROR = {"raise": 0, "skip": 1, "replace": 2}
_PLACEMENTS = {"auto": 0, "cpu": 1, "gpu": 2}  # stk_placement
_DECODERS = {"cpu": 0, "nvjpeg": 1}  # stk_decoder


class Dataset(_stoker.Dataset):
    """A dataset opened by :func:`stoker.open` (or made by :func:`stoker.from_numpy`).

    ``len(ds)`` samples; ``ds[i]`` is ``(pixels, label)`` with ``pixels`` a
    new ``H x W x C`` uint8 NumPy array and ``label`` an int (encoded
    images — JPEG/PNG of an image folder or of ``keep`` shards — are
    decoded whole to RGB, each at its own size). ``ds.shape`` is
    ``(H, W, C)`` when every sample has that shape, ``None`` when samples
    differ in size (encoded images: look at ``ds[i][0].shape``).
    ``ds.num_classes`` is the class count (0 if unknown), ``ds.classes``
    the class names (label -> name, ``None`` without a label map),
    ``ds.class_to_idx`` the dict name -> label (as torchvision's
    ImageFolder), ``ds.path(i)`` the sample's source name (its file path;
    ``None`` for formats without names: CIFAR, IDX, NumPy, memory) and
    ``ds.paths(indices)`` those of several (a batch's ``indices``),
    ``ds.skipped_inputs`` the messages for inputs the open left out (an
    image folder's unreadable directories and symlink loops), ``ds.format``
    and ``ds.uri`` say what was opened. Immutable: safe from any thread,
    and usable in a forked child.
    """

    def __getitem__(self, index):
        import numpy
        n = len(self)
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("dataset index %d out of range (%d samples)" % (index, n))
        arr, label = self.read(i)
        return numpy.asarray(arr), label

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    _FIELD_TYPES = {1: "bytes", 2: "image", 3: "raw_image", 4: "int64", 5: "float32",
                    6: "string"}

    @property
    def fields(self):
        """The fields each record holds (docs/fields.md): a dict ``name ->
        (type, shape)``, type one of ``"image"`` (encoded), ``"raw_image"``,
        ``"int64"``, ``"float32"``, ``"bytes"``, ``"string"``; shape a tuple
        whose first entry is ``None`` when it varies per record (boxes:
        ``(None, 4)``), ``()`` for a scalar or an image of any size."""
        return {name: (self._FIELD_TYPES.get(code, str(code)),
                       tuple(None if (d == 0 and k == 0) else d for k, d in enumerate(dims)))
                for name, code, dims in self._field_infos()}

    def read_field(self, index, name):
        """Field ``name`` of sample ``index``, as stored: a NumPy array for
        ``int64``/``float32`` (in the field's shape, the varying dimension
        as read) and ``raw_image`` (H x W x C uint8), ``bytes`` for encoded
        images and bytes, ``str`` for strings. A copy; thread-safe."""
        import numpy
        n = len(self)
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("dataset index %d out of range (%d samples)" % (index, n))
        kind, shape = self.fields[name] if name in self.fields else (None, None)
        if kind is None:
            raise KeyError("%s has no field %r (its fields: %s)"
                           % (self.uri, name, ", ".join(self.fields)))
        data, hwc = self._read_field(i, name)
        if kind == "raw_image":
            return numpy.frombuffer(data, numpy.uint8).reshape(hwc).copy()
        if kind in ("int64", "float32"):
            a = numpy.frombuffer(data, numpy.int64 if kind == "int64" else numpy.float32).copy()
            if not shape:
                return a[0] if a.size == 1 else a
            rest = shape[1:]
            return a.reshape((-1,) + tuple(rest)) if shape[0] is None else a.reshape(shape)
        if kind == "string":
            return data.decode("utf-8", "surrogateescape")
        return data

    def path(self, index):
        """The source name of sample ``index`` (negative counts from the end):
        its file path for an image folder, a list, or shards packed from them;
        the reader's name for it for tar, LMDB, TFRecord, RecordIO, HDF5, Zarr;
        ``None`` for formats whose samples have no name (CIFAR, IDX, NumPy,
        memory). See docs/python.md."""
        n = len(self)
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("dataset index %d out of range (%d samples)" % (index, n))
        return super().path(i)

    @property
    def class_to_idx(self):
        """``{class name: label}`` like torchvision's ``ImageFolder.class_to_idx``
        (``None`` when the dataset has no label map)."""
        names = self.classes
        return None if names is None else {name: i for i, name in enumerate(names)}

    def paths(self, indices):
        """``[self.path(i) for i in indices]``: the source names of a batch's
        dataset indices (``Loader.iter_with_indices``), any int sequence or
        int64 array."""
        if hasattr(indices, "tolist"):
            indices = indices.tolist()
        return [self.path(operator.index(i)) for i in indices]

    def __repr__(self):
        shape = self.shape
        s = "<stoker.Dataset %s %r: %d samples of %s" % (
            self.format, self.uri, len(self),
            "x".join(map(str, shape)) if shape is not None else "varying size")
        names = self.classes
        if names is not None:
            shown = ", ".join(repr(n) for n in names[:5])
            s += ", %d classes [%s%s]" % (len(names), shown, ", ..." if len(names) > 5 else "")
        elif self.num_classes:
            s += ", %d classes" % self.num_classes
        return s + ">"

    def __reduce__(self):
        # Re-opened by URI in the unpickling process (files are read again).
        if self.format == "concat":
            return (concat, (list(self._parts),), None)
        if self.format == "memory":
            raise TypeError("an in-memory stoker Dataset (from_numpy) cannot be pickled; "
                            "pickle the arrays and call stoker.from_numpy again")
        return (open, (self.uri,), None)


def concat(datasets):
    """Several datasets as one: the samples of ``datasets[0]``, then those of
    ``datasets[1]``, ... (URIs are opened). Labels are each dataset's own;
    ``shape`` is theirs when they agree (else ``None``: any size). What
    ``Loader([a, b], proportions=...)`` reads."""
    parts = tuple(d if isinstance(d, _stoker.Dataset) else open(d) for d in datasets)
    if not parts:
        raise ValueError("concat needs at least one dataset")
    ds = Dataset._concat(parts)
    ds._parts = parts
    return ds


def set_cache(cache_dir=None, limit=None):
    """Where remote datasets (``http(s)://``, ``s3://`` URIs: docs/remote.md) keep
    their local cache, and its size limit in bytes (``0``: no limit). Process-wide;
    ``None`` keeps the current value (the defaults come from ``STOKER_CACHE_DIR``
    and ``STOKER_CACHE_LIMIT``). Datasets already open keep the cache they opened."""
    _stoker.remote_configure(None if cache_dir is None else os.fspath(cache_dir),
                             -1 if limit is None else operator.index(limit))


def io_stats(reset=False):
    """The remote layer's counters since the process started (or the last
    ``reset``), all datasets together: ``bytes_fetched`` (object bytes
    downloaded into the cache), ``bytes_received`` (every HTTP body byte, retries
    included), ``requests``, ``retries``, ``failures``, ``cache_hit_bytes``,
    ``reads`` and ``reads_waited`` (reads of remote objects, and those that
    waited for the network), ``wait_s`` (seconds they waited), ``prefetch_bytes``."""
    return _stoker.io_stats(reset=bool(reset))


def cache_info():
    """The local cache of remote datasets (:func:`set_cache`, docs/remote.md) as it is
    now, counted from its directory, so what other processes cached counts too:
    ``dir``, ``limit`` (bytes; 0: none), ``objects`` and ``bytes`` (on disk)."""
    return _stoker.cache_info()


def cache_trim(keep_bytes=0):
    """Remove least-recently-used objects from the cache until at most ``keep_bytes``
    remain (``0``: empty it). Objects open in this process stay; one that another
    process is reading leaves the directory while that process keeps reading it.
    Returns ``{"removed_objects", "removed_bytes", "left": cache_info()}``."""
    ro, rb, left = _stoker.cache_trim(operator.index(keep_bytes))
    return {"removed_objects": ro, "removed_bytes": rb, "left": left}


def prefetch(uri):
    """Download every object of a remote dataset into the cache now (``uri`` as for
    :func:`open`: ``stk:s3://bucket/train/``, ``stk:https://host/train-{000..127}.stk``),
    with parallel range requests, so that training starts from a warm cache; chunks
    already cached are not fetched again. Returns ``{"objects", "bytes", "fetched"}``.
    The same as ``stoker cache fetch URI``."""
    objects, total, fetched = _stoker.prefetch(os.fspath(uri))
    return {"objects": objects, "bytes": total, "fetched": fetched}


def jpeg_index_stats():
    """The JPEG sync index of this process (docs/codec.md, "Sync windows"):
    ``files`` indexed, ``windows`` (crops decoded from a synthesised window),
    ``declined`` (files whose walk found the data unusable), ``bytes`` held and
    the ``budget`` bounding them (``STOKER_JPEG_INDEX_MB``; 0: off)."""
    return _stoker.jpeg_index_stats()


def open(uri, *, max_bytes=None, max_samples=None, max_pixels=None, cache_dir=None):
    """Open a dataset for random access (``len(ds)``, ``ds[i] -> (HWC uint8 array, label)``).

    ``uri`` is anything ``stk_dataset_open`` accepts: ``cifar10:DIR``,
    ``cifar100:DIR``, ``mnist:DIR``, ``fashion-mnist:DIR`` (each with
    ``?split=train|test``), ``idx:IMAGES,LABELS``, or a path whose format is
    detected (see docs/datasets.md). The limits guard against hostile files
    (defaults: 16 GiB per file, 2**40 samples, 2**28 pixels per sample).
    Shard-based formats also read from object stores:
    ``stk:https://host/train-{000..127}.stk``, ``stk:s3://bucket/prefix/``
    (docs/remote.md); ``cache_dir`` sets where their bytes are cached
    (:func:`set_cache`).

    Raises :class:`stoker.NotFound` (a ``FileNotFoundError``) for a missing
    path, :class:`stoker.FormatError` for a malformed file, and so on; the
    message names the file and the reason. Inputs the open leaves out
    without failing (an image folder's unreadable directories, symlink
    loops: ``ds.skipped_inputs``) are also announced with a
    ``RuntimeWarning``; ``imagefolder:DIR?strict=1`` fails on them instead.
    """
    kw = {}
    for name, v in (("max_bytes", max_bytes), ("max_samples", max_samples),
                    ("max_pixels", max_pixels)):
        if v is not None:
            kw[name] = operator.index(v)
    if cache_dir is not None:
        set_cache(cache_dir)
    ds = Dataset(os.fspath(uri), **kw)
    skipped = ds.skipped_inputs
    if skipped:
        import warnings
        warnings.warn("stoker.open(%r): %d input%s left out: %s" % (
            ds.uri, len(skipped), "" if len(skipped) == 1 else "s", "; ".join(skipped)),
            RuntimeWarning, stacklevel=2)
    return ds


def pack(src, dest, *, shard_size=None, jobs=2, mode="keep", zstd_level=0, strict=False,
         validate=True, max_side=0, quality=0, restart=0):
    """Pack dataset ``src`` (any URI: an image folder, ``list:FILE``, CIFAR,
    IDX...) into .stk shards ``dest/shard-NNNNN.stk`` (docs/format.md), like
    ``stoker pack``.

    ``mode``: ``"keep"`` (encoded images byte for byte, validated by
    decoding unless ``validate=False``), ``"raw"`` (decoded pixels,
    ``zstd_level`` 1-19 to compress) or ``"reencode"`` (shrink to
    ``max_side`` with Pillow's bilinear, store JPEGs of ``quality``).
    ``restart`` N > 0 (keep/reencode): rewrite JPEGs losslessly with a
    restart marker every <= N MCUs (same pixels, checked), so random crops
    decode only the part they cover; 4 is a good N.
    ``shard_size`` in bytes (default 1 GiB); ``jobs`` threads; output is
    identical for any ``jobs``. Unreadable inputs are skipped and returned
    in ``result["skipped_inputs"]`` as (index, reason) pairs, or raise
    ``DataError`` with ``strict=True``. Returns a dict: records, skipped,
    shards, bytes, restarted (JPEGs rewritten), skipped_inputs. The GIL is released while packing.
    """
    return _stoker.pack(os.fspath(src), os.fspath(dest), int(shard_size or 0), int(jobs), mode,
                        int(zstd_level), bool(strict), bool(validate), int(max_side), int(quality),
                        int(restart))


def from_numpy(images, labels=None):
    """An in-memory dataset copied from NumPy-compatible arrays.

    ``images``: uint8, shape ``(N, H, W, C)`` or ``(N, H, W)`` (one channel).
    ``labels``: ``N`` integers or None (all 0), stored as int64 class
    labels. Float labels are accepted only when every value is an exact
    integer (``[0.0, 2.0]``); any other value (``0.9``, NaN, out of int64
    range) is a ``ValueError`` naming it — never truncated.
    """
    import numpy
    images = numpy.asarray(images)
    if images.dtype != numpy.uint8:
        raise TypeError("images must be uint8, got %s" % images.dtype)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError("images must have shape (N, H, W, C) or (N, H, W), got %s"
                         % (images.shape,))
    images = numpy.ascontiguousarray(images)
    n, h, w, c = images.shape
    if labels is not None:
        labels = _int64_labels(numpy, labels)
        if labels.shape != (n,):
            raise ValueError("labels must have shape (%d,), got %s" % (n, labels.shape))
    return Dataset._from_buffers(images, labels, n, h, w, c)


def _int64_labels(numpy, labels):
    """labels as a C-contiguous int64 array, refusing any value that would
    change on the way (fractions, NaN/inf, out of int64 range)."""
    a = numpy.asarray(labels)
    if a.dtype == numpy.bool_ or numpy.issubdtype(a.dtype, numpy.signedinteger):
        return numpy.ascontiguousarray(a, dtype=numpy.int64)
    if numpy.issubdtype(a.dtype, numpy.unsignedinteger):
        big = numpy.flatnonzero(a > numpy.iinfo(numpy.int64).max) if a.size else []
        if len(big):
            raise ValueError("labels must fit int64: labels[%d] = %d does not"
                             % (big[0], a.flat[big[0]]))
        return numpy.ascontiguousarray(a, dtype=numpy.int64)
    if numpy.issubdtype(a.dtype, numpy.floating):
        f = a.astype(numpy.float64)  # exact for float16/32/64
        # 2**63 is the first float past int64's range.
        ok = numpy.isfinite(f) & (f == numpy.floor(f)) & (f >= -2.0 ** 63) & (f < 2.0 ** 63)
        bad = numpy.flatnonzero(~ok)
        if len(bad):
            raise ValueError(
                "labels must be integers (stoker stores int64 class labels and will not "
                "truncate): labels[%d] = %r is not (%d non-integer value%s)"
                % (bad[0], a.flat[bad[0]].item(), len(bad), "" if len(bad) == 1 else "s"))
        return numpy.ascontiguousarray(f.astype(numpy.int64))
    if a.dtype == object:  # e.g. Python ints beyond int64, mixed types
        out = numpy.empty(a.shape, dtype=numpy.int64)
        for i, v in enumerate(a.flat):
            try:
                iv = operator.index(v)
            except TypeError:
                if isinstance(v, float) and v.is_integer():
                    iv = int(v)
                else:
                    raise ValueError("labels must be integers (stoker will not truncate): "
                                     "labels[%d] = %r is not" % (i, v))
            if not -2 ** 63 <= iv < 2 ** 63:
                raise ValueError("labels must fit int64: labels[%d] = %d does not" % (i, iv))
            out.flat[i] = iv
        return out
    raise TypeError("labels must be integers, got an array of %s" % a.dtype)


def _norm_dtype(dtype):
    if isinstance(dtype, str):
        name = dtype
    else:  # numpy dtype or scalar type, torch dtype
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)
    name = name.lower()
    if name.startswith("torch."):
        name = name[6:]
    if name not in _DTYPES:
        raise ValueError("dtype must be 'uint8', 'float16', 'bfloat16' or 'float32', got %r"
                         % (dtype,))
    return _DTYPES[name]


def _norm_layout(layout):
    if not isinstance(layout, str) or layout.lower() not in _LAYOUTS:
        raise ValueError("layout must be 'NCHW' or 'NHWC', got %r" % (layout,))
    return _LAYOUTS[layout.lower()]


def _ends_with_to(spec):
    last = spec.split("|")[-1].split()
    return bool(last) and last[0].lower() == "to"


def build_spec(transforms=None, pipeline=None, dtype=None, layout=None):
    """The pipeline spec a Loader runs for these arguments (see Loader)."""
    if transforms is not None and pipeline is not None:
        raise ValueError("give transforms= or pipeline=, not both")
    if pipeline is not None:
        if not isinstance(pipeline, str):
            raise TypeError("pipeline must be a str (the spec text), got %r" % (pipeline,))
        if dtype is None and layout is None:
            return pipeline
        if _ends_with_to(pipeline):
            raise ValueError("the pipeline already ends with a 'to' stage; leave dtype= and "
                             "layout= unset or drop that stage")
        stages = pipeline.strip()
    else:
        if isinstance(transforms, (str, bytes)):
            raise TypeError("transforms must be a list; pass spec text as pipeline=")
        # A torchvision Compose or torchvision objects: their stoker transforms.
        transforms = list(_torchvision.translate(transforms) if transforms is not None else [])
        stages = to_spec(transforms)
        if any(isinstance(t, ToTensor) for t in transforms) and dtype is not None \
                and _norm_dtype(dtype) == "u8":
            raise ValueError("ToTensor() gives float output; it cannot be combined with "
                             "dtype='uint8'")
        # torchvision's PILToTensor / ConvertImageDtype choose the output type
        # (the last conversion wins, as in torchvision).
        chosen = [t for t in transforms if isinstance(t, (ToTensor, _torchvision.OutputDtype))]
        if chosen and isinstance(chosen[-1], _torchvision.OutputDtype):
            want = chosen[-1]
            if dtype is None:
                dtype = want.dtype
            elif _norm_dtype(dtype) != _norm_dtype(want.dtype):
                raise ValueError("%s gives %s output; it cannot be combined with dtype=%r"
                                 % (want.source, want.dtype, dtype))
    d = _norm_dtype(dtype if dtype is not None else "float32")
    l = _norm_layout(layout if layout is not None else "NCHW")
    to = "to %s %s" % (d, l)
    return stages + " | " + to if stages else to


def _distributed(rank, world_size):
    """rank/world_size: given, else torch.distributed's when initialised,
    else the RANK/WORLD_SIZE environment variables, else 0/1."""
    r = w = None
    dist = sys.modules.get("torch.distributed")  # never import torch for this
    if dist is not None and dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
    elif os.environ.get("WORLD_SIZE"):
        w = int(os.environ["WORLD_SIZE"])
        r = int(os.environ.get("RANK", "0"))
    rank = operator.index(rank) if rank is not None else (r if r is not None else 0)
    world_size = operator.index(world_size) if world_size is not None else (w or 1)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("need 0 <= rank < world_size, got rank=%d world_size=%d"
                         % (rank, world_size))
    return rank, world_size


def _count_or_auto(name, v):
    """A knob: ``"auto"``/``None`` -> 0 (the autotuner), else an int >= 1."""
    if v is None or (isinstance(v, str) and v == "auto"):
        return 0
    if isinstance(v, str):
        raise ValueError("%s must be 'auto' or a number >= 1, got %r" % (name, v))
    v = operator.index(v)
    if v < 1:
        raise ValueError("%s must be >= 1 or 'auto', got %d" % (name, v))
    return v


def _profile_text(p):
    """One report line of a profile dict."""
    st = p["stages_s"]
    work = sum(st.values())
    split = ", ".join("%s %.0f%%" % (k, 100 * v / work) for k, v in st.items() if v > 0) \
        if work > 0 else "no worker time"
    return ("stoker: %d batches, %.0f img/s, data share %.1f%% (wait p50 %.1f ms, p90 %.1f ms; "
            "step p50 %.1f ms); workers %s; threads %d, prefetch %d; %s"
            % (p["batches"], p["images_per_s"], 100 * p["data_share"], 1e3 * p["wait_p50_s"],
               1e3 * p["wait_p90_s"], 1e3 * p["step_p50_s"], split, p["threads"],
               p["prefetch"], p["verdict"]))


def _shuffle_mode(shuffle):
    """shuffle argument -> (shuffle, block)."""
    if isinstance(shuffle, str):
        if shuffle not in ("global", "block", "none"):
            raise ValueError("shuffle must be True, False, 'global', 'block' or 'none', got %r"
                             % (shuffle,))
        return shuffle != "none", shuffle == "block"
    return bool(shuffle), False


def _optional_count(name, v):
    """None -> 0 (the library default), else an int >= 1."""
    if v is None:
        return 0
    v = operator.index(v)
    if v < 1:
        raise ValueError("%s must be >= 1, got %d" % (name, v))
    return v


def _pack_array(name, values, code):
    """indices ('Q') or weights ('d') as native bytes for the C loader;
    None stays None. Accepts sequences, numpy arrays and torch tensors."""
    if values is None:
        return None
    import array
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    if type(values).__module__ == "numpy" and hasattr(values, "dtype"):
        import numpy  # fast path: no per-element Python objects
        kind = values.dtype.kind
        if code == "Q" and kind == "b":
            _refuse_mask(name)
        if code == "Q" and kind in "iu":
            if kind == "i" and values.size and values.min() < 0:
                raise ValueError("%s must not be negative" % name)
            out = numpy.ascontiguousarray(values, dtype=numpy.uint64).reshape(-1)
        elif code == "d" and kind in "iuf":
            out = numpy.ascontiguousarray(values, dtype=numpy.float64).reshape(-1)
        else:
            out = None
        if out is not None:
            if out.size == 0:
                raise ValueError("%s is empty" % name)
            return out.tobytes()
        values = values.tolist()
    try:
        if code == "Q":
            values = list(values)
            if any(isinstance(v, bool) or type(v).__name__ == "bool_" for v in values):
                _refuse_mask(name)
            values = [operator.index(v) for v in values]
            if any(v < 0 for v in values):
                raise ValueError("%s must not be negative" % name)
        else:
            values = [float(v) for v in values]
        packed = array.array(code, values)
    except OverflowError:
        raise ValueError("%s: a value is out of range" % name) from None
    except TypeError as e:
        raise TypeError("%s must be a sequence of %s: %s"
                        % (name, "ints" if code == "Q" else "numbers", e)) from None
    if len(packed) == 0:
        raise ValueError("%s is empty" % name)
    return packed.tobytes()


def _refuse_mask(name):
    # operator.index(True) is 1: a mask would silently select samples 0 and
    # 1 over and over. Refused rather than taken as a mask, so that a list of
    # indices and a list of flags can never be confused.
    raise TypeError("%s is a boolean mask; it takes dataset indices. Pass the indices the mask "
                    "selects: %s=numpy.flatnonzero(mask) (a torch mask: "
                    "torch.nonzero(mask).flatten())" % (name, name))


def _fields_text(fields):
    """``fields=``: None, a comma-separated string, or a list of names
    (``"name:role"`` allowed)."""
    if fields is None:
        return None
    if isinstance(fields, str):
        return fields
    names = list(fields)
    for n in names:
        if not isinstance(n, str) or not n or "," in n:
            raise ValueError("fields: each entry is a field name (optionally name:role), got %r"
                             % (n,))
    return ",".join(names)


def _device_text(device):
    """``device=``: None or "cpu" (host memory: None), or "cuda" / "cuda:N"
    as given (the C loader checks the form: InvalidArgument, a ValueError).
    A torch.device (or anything whose str() is such a name) is accepted
    without importing torch."""
    if device is None:
        return None
    if not isinstance(device, str):
        if type(device).__name__ != "device":
            raise TypeError("device must be None, 'cpu', 'cuda' or 'cuda:N' (or a torch.device), "
                            "got %r" % (device,))
        device = str(device)  # torch.device("cuda", 1) -> "cuda:1"
    return None if device in ("", "cpu") else device


def _device_converter(output, device):
    """What turns a batch in CUDA memory into the output: torch's
    from_dlpack on the Batch itself, which calls ``__dlpack__`` with
    torch's current stream on that device (DLPack's stream protocol), so
    the stream the training step runs on waits for the batch. None for
    numpy (the iterator then raises a ValueError on a device batch) and for
    dlpack (the Batch objects themselves)."""
    if device is None or output != "torch":
        return None
    import torch
    fn = getattr(torch, "from_dlpack", None)
    if fn is None:
        from torch.utils.dlpack import from_dlpack as fn
    return fn


def _converter(output):
    if output == "torch":
        try:
            import torch
        except ImportError as e:
            raise ImportError("output='torch' needs PyTorch; install it or pass "
                              "output='numpy' or output='dlpack'") from e
        fn = getattr(torch._C, "_from_dlpack", None)
        if fn is None:  # takes a capsule too
            from torch.utils.dlpack import from_dlpack as fn
        return _stoker.OUT_CAPSULE, fn
    if output == "numpy":
        import numpy
        return _stoker.OUT_CALL, numpy.asarray  # buffer protocol, no copy
    if output == "dlpack":
        return _stoker.OUT_OBJECTS, None
    raise ValueError("output must be one of %s, got %r" % (", ".join(_OUTPUTS), output))


def _check_batch_transform(bt, output, dtype):
    """batch_transform: None, a stoker.Mixup usable with this output/dtype, or
    any callable (batchops.py)."""
    if bt is None:
        return None
    from .mixup import Mixup
    if not isinstance(bt, Mixup):
        if not callable(bt):
            raise TypeError("batch_transform must be a callable or a stoker.Mixup (or None), "
                            "got %r" % (bt,))
        return bt
    if output == "dlpack":
        raise ValueError("batch_transform (Mixup) needs output='torch' or 'numpy', not 'dlpack'")
    if dtype == "uint8":
        raise ValueError("batch_transform (Mixup) needs float output: mixed pixels and soft "
                         "labels do not fit uint8; pass dtype='float32' (or 'float16', "
                         "'bfloat16') and normalise in the pipeline")
    return bt


# What torch.utils.data.DataLoader's arguments become here: the names users
# carry over are answered with the stoker spelling (or why none is needed),
# not a bare "unexpected keyword argument".
_DATALOADER_ARGS = {
    "num_workers": "use num_threads= (native worker threads in this process; default 'auto' "
                   "tunes them while running); there are no worker processes",
    "prefetch_factor": "use prefetch= (batches filled ahead in total, not per worker; "
                       "default 'auto')",
    "persistent_workers": "not needed: a Loader's threads live as long as the Loader, "
                          "across epochs",
    "pin_memory": "not needed: batches are host memory shared with zero copy; call "
                  "images.pin_memory() or .cuda(non_blocking=True) as usual, or pass "
                  "device='cuda' to have them delivered in GPU memory",
    "pin_memory_device": "use device='cuda:N' (batches delivered in that GPU's memory)",
    "collate_fn": "not needed: the native workers collate the batch; use batch_transform= "
                  "for a Python step on each finished batch, fields= for more fields",
    "sampler": "use shuffle=, indices= (SubsetRandomSampler), weights= (WeightedRandomSampler) "
               "or rank=/world_size= (DistributedSampler)",
    "batch_sampler": "not supported: use batch_size=, drop_last= and the sampling options "
                     "(indices=, weights=)",
    "worker_init_fn": "not needed: there are no worker processes; every random draw is a "
                      "function of (seed, aug_seed, epoch, sample)",
    "generator": "use seed= (the order) and aug_seed= (the augmentations)",
    "timeout": "not supported: next() waits for the batch (Ctrl-C interrupts it)",
    "multiprocessing_context": "not needed: there are no worker processes",
    "transform": "use transforms= (a list, or a torchvision Compose)",
    "in_order": "not needed: batches always come in order",
}


def _table_keywords():
    """The library's loader parameters (stk_loader_param_describe) that Loader
    has no argument of its own for, by name: passed through to the native
    loader as they are (a new row of src/pipeline/loader_params.c, such as
    decode_budget, needs no change here). Pointer rows have no Python form."""
    import inspect
    own = set(inspect.signature(Loader.__init__).parameters) | {
        "threads", "shuffle_mode", "block", "sampling", "device_options"}
    return {row[0]: row for row in _stoker._Loader.params()
            if row[0] not in own and row[1] != "pointer"}


def _unknown_arguments(unknown):
    """The TypeError text for keyword arguments Loader does not take."""
    import difflib
    import inspect
    known = [p for p in inspect.signature(Loader.__init__).parameters
             if p not in ("self", "dataset", "unknown")]
    known += [name for name in _table_keywords() if name not in known]
    lines = []
    for name in unknown:
        if name in _DATALOADER_ARGS:
            lines.append("%s= is a DataLoader argument: %s" % (name, _DATALOADER_ARGS[name]))
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        lines.append("unexpected keyword argument %r%s" % (
            name, ": did you mean %s=?" % close[0] if close else
            " (the arguments are in help(stoker.Loader) and docs/python.md)"))
    if len(lines) == 1:
        return "Loader(): " + lines[0]
    return "Loader(): %d keyword arguments it does not take:%s" % (
        len(lines), "".join("\n  " + line for line in lines))


class Loader:
    """Batches of a dataset, augmented by native threads, shared with zero copy.

    ::

        loader = stoker.Loader("cifar10:data/", batch_size=256, shuffle=True, seed=0,
                               transforms=[stoker.RandomCrop(32, padding=4),
                                           stoker.RandomHorizontalFlip(),
                                           stoker.Normalize(MEAN, STD)],
                               num_threads=2, dtype="float16", output="torch")
        for epoch in range(E):
            loader.set_epoch(epoch)
            for images, labels in loader:
                ...

    Arguments:
      dataset: a dataset URI or path (see :func:`stoker.open`) or a Dataset;
        or a list of them to mix (see ``proportions``).
      batch_size: samples per batch (the last batch of an epoch may be short
        unless ``drop_last``).
      shuffle, seed: a seeded permutation per epoch; every random
        augmentation is a pure function of (seed, epoch, sample), so the
        batches are identical for any ``num_threads``/``prefetch``.
        ``shuffle`` is False (dataset order; also ``"none"``), True (a
        uniform permutation; also ``"global"``) or ``"block"``: for storage
        slow at random access, blocks of ``block_size`` consecutive records
        (default 64) in a random order, their samples mixed within windows
        of ``shuffle_window`` blocks (default 16), so each block is read once
        per epoch (docs/sampler.md).
      transforms: stoker transforms (RandomCrop, Normalize, ...) or raw
        stage strings, joined with ' | ', then ``to DTYPE LAYOUT`` appended.
        A torchvision ``Compose`` or torchvision transform objects are
        accepted too: each is translated into the stoker transform of the
        same name (the same spec and batches), or refused with a ValueError
        naming it and the argument stoker cannot honour; ``PILToTensor`` /
        ``ConvertImageDtype`` set the output dtype (docs/python.md).
      pipeline: the spec text instead of ``transforms`` (docs/pipeline.md);
        used as given unless dtype/layout are set (then ``to`` is appended).
      num_threads, prefetch: worker threads; batches filled ahead. Both
        default to ``"auto"``: the autotuner starts from the CPU this
        process may use (affinity mask and cgroup quota) and moves them
        while running, from the measured wait of the training loop, the
        workers' load and the delivered rate (docs/engine.md, "Autotune").
        A number fixes the knob. Batches are the same either way.
      memory_limit: bytes the batch pool and the workers' scratch may use
        together (``None``: no limit beyond ``max_batches``); the tuner
        stays within it. It bounds each image's decode too: a worker thread
        may use at most (memory_limit - (prefetch + 1) x batch bytes) /
        threads bytes for one image (the starting pool taken out; threads
        is ``num_threads``, or 8 when it is "auto", whatever the cores, so
        the same options refuse the same images on every machine). An image
        needing more is a corrupt sample whose message names the bytes
        needed and the budget (DataError under on_error='raise';
        on_error='skip' or 'replace' drops it like any other; docs/engine.md,
        "Decode budget").
      max_batches: cap on batch buffers, lent ones included (default
        prefetch + 4, or 20 with prefetch="auto"; fewer if memory_limit
        holds fewer). Holding more batches than that raises PoolExhausted.
      report_every: every N batches, report the data-stall profile of those
        N batches (``profile(reset=True)``) to ``report``: a callable taking
        the profile dict (log it to TensorBoard/W&B), ``"log"`` (logger
        ``stoker`` at INFO) or ``None`` (one line on stderr). The
        autotuner's decisions go to logger ``stoker`` at DEBUG.
      drop_last: drop each rank's last incomplete batch.
      dtype: 'float32' (default), 'float16', 'bfloat16' or 'uint8' (also
        numpy/torch dtypes). bfloat16 comes out as torch.bfloat16 with
        output='torch'; numpy has no bfloat16, so output='numpy' gives the
        bit patterns as uint16 (``torch.from_numpy(a).view(torch.bfloat16)``).
      layout: 'NCHW' (default) or 'NHWC'.
      output: 'torch' (torch.Tensor, default), 'numpy' (numpy.ndarray) or
        'dlpack' (stoker.Batch objects and int64 arrays that implement
        __dlpack__ and the buffer protocol). Images are always zero-copy
        views of the pooled batch buffer; labels are a copy (see docs).
      rank, world_size: this process's shard. Default: torch.distributed's
        when it is initialised, else the RANK/WORLD_SIZE environment, else 0/1.
        A state_dict taken with another world size (or batch size) is
        accepted: the epoch continues where the old ranks together stopped.
      on_error: 'raise' (default), 'skip' corrupt samples (their batch is
        shorter) or 'replace' them (every batch stays full: another sample of
        the epoch, drawn deterministically, takes the corrupt one's place;
        docs/pipeline.md). Both count them in stats() and list them in
        ``loader.skipped``.
      indices: a subset, a sequence of dataset indices (duplicates allowed):
        each epoch permutes this list (as SubsetRandomSampler) and reads
        nothing else.
      weights: one weight per sample (of ``indices`` when given): each
        epoch draws ``num_samples`` samples with replacement, sample i with
        probability weights[i] / sum (as WeightedRandomSampler). Draws at
        random whatever ``shuffle`` says.
      balance_classes: True: weights 1 / (samples of the sample's class),
        from the dataset's labels, so every class is drawn equally often.
      num_samples: samples per epoch (default: the dataset's or the
        subset's size). Without weights: fewer is a different subset of the
        epoch's permutation each epoch, more adds further independent
        permutations.
      aug_seed: the seed of the random augmentations (default: ``seed``), so
        the order and the augmentations can be varied separately.
      views: K > 1 gives K independently augmented views of every sample;
        a batch then has K * batch_size rows, sample-major (rows i*K ..
        i*K+K-1 are sample i's views, its label repeated): ``images.view(B,
        K, ...)`` is the (B, K, C, H, W) layout.
      proportions: with a list of datasets, the share of each in every
        epoch (default: their sizes, i.e. a shuffled concatenation). Each
        epoch holds exactly round(num_samples * p_i / sum p) samples of
        dataset i (largest remainder), randomly interleaved; each dataset
        walks its own permutation, starting a new one when its share
        exceeds its size (docs/sampler.md, "Mixing datasets"). The indices
        of ``iter_with_indices`` count through the datasets in order.
      batch_transform: a callable applied to every finished batch in the
        loop's thread (with the GIL; it may use torch or the GPU): it gets
        the tuple ``iter()`` would yield, ``(images, labels)``, and what it
        returns is yielded (``iter_with_indices`` appends the indices); its
        time counts as the loop's wait in ``profile()`` (docs/python.md,
        "batch_transform"). Or a :class:`stoker.Mixup` (Mixup/CutMix as
        timm's): batches are then ``(mixed images, soft labels)``, soft
        labels float32 (B, num_classes); needs a float dtype and output
        'torch' or 'numpy'. Its draws are a pure function of (aug_seed,
        epoch, batch position, rank), so resume is exact (docs/python.md,
        "Mixup and CutMix"). ``stoker.BatchOp(fn)`` at the end of
        ``transforms`` runs ``fn(images)`` on each batch before it.
      eager: start the worker threads and the batch pool at creation. By
        default a Loader is lazy: nothing runs or is allocated until the
        first iteration (or ``warmup()``).
      device: where batches are delivered: None or ``'cpu'`` (host memory,
        the default), ``'cuda'`` / ``'cuda:N'`` (CUDA device N; a
        torch.device is accepted too). Images then arrive in device memory
        (labels and indices stay host arrays) as torch CUDA tensors with
        output='torch' (made through DLPack, so torch's current stream
        waits for the batch) or Batch objects with output='dlpack';
        output='numpy' cannot hold device memory and raises ValueError on
        the first device batch. A machine without a CUDA driver, or a
        library built without CUDA kernels, raises UnsupportedError (a
        ValueError) here; a malformed name raises InvalidArgument.
        Batches equal the host ones (docs/gpu.md).
      placement: with a CUDA device, what the GPU does: ``'gpu'`` (the CPU
        reads and decodes, the GPU resamples, flips, jitters, normalizes
        and casts; a spec with an op the GPU path lacks raises
        InvalidArgument naming it), ``'cpu'`` (the CPU runs the spec, the
        GPU only the final normalize/cast when the CPU's last stage is
        uint8) or ``'auto'`` (default: gpu when the spec allows it, else
        cpu). Ignored without a device.
      decoder: with a CUDA device and the augmentation on the GPU, who
        decodes JPEGs: ``'cpu'`` (default: libjpeg-turbo in the workers;
        batches equal the host loader's) or ``'nvjpeg'`` (nvJPEG on the GPU:
        its JPEG engine where the GPU has one; the workers only read and
        draw; pixels differ from libjpeg-turbo's by decoder rounding, see
        docs/gpu.md; images nvJPEG does not take are decoded on the CPU and
        counted in ``stats()['gpu_decode_cpu_rows']``). Without nvJPEG
        (libnvjpeg) raises UnsupportedError; without GPU augmentation,
        InvalidArgument.

    Iteration: ``iter(loader)`` yields ``(images, labels)`` for one epoch.
    Each pass starts the loader's current epoch at position 0; finishing a
    pass moves it to the next epoch (so iterating again without set_epoch
    gives a fresh order, like DataLoader(shuffle=True)); a pass abandoned
    midway (break, exception, Ctrl-C) is restarted from its beginning by
    the next iter(). ``set_epoch(e)`` selects the epoch explicitly (as with
    DistributedSampler); ``load_state_dict`` makes the next pass continue
    mid-epoch. See docs/python.md.

    Not picklable (TypeError); unusable in a fork()ed child (ForkError:
    create the Loader in the child). One consumer thread at a time.
    """

    def __init__(self, dataset, batch_size=256, shuffle=False, seed=0, transforms=None,
                 pipeline=None, num_threads="auto", prefetch="auto", max_batches=None,
                 drop_last=False,
                 dtype=None, layout=None, output="torch", rank=None, world_size=None,
                 on_error="raise", block_size=None, shuffle_window=None, indices=None,
                 weights=None, balance_classes=False, num_samples=None, aug_seed=None,
                 views=1, eager=False, proportions=None, batch_transform=None,
                 memory_limit=None, report_every=None, report=None, fields=None,
                 as_dict=False, device=None, placement="auto", decoder="cpu", **unknown):
        table = _table_keywords()
        extra = {k: v for k, v in unknown.items() if k in table}
        unknown = {k: v for k, v in unknown.items() if k not in table}
        if unknown:
            raise TypeError(_unknown_arguments(unknown))
        mix_sizes = mix_weights = None
        if isinstance(dataset, (list, tuple)):
            dataset = concat(dataset)
            mix_sizes = _pack_array("dataset sizes", [len(p) for p in dataset._parts], "Q")
            if proportions is not None:
                if len(proportions) != len(dataset._parts):
                    raise ValueError("proportions: %d for %d datasets"
                                     % (len(proportions), len(dataset._parts)))
                mix_weights = _pack_array("proportions", proportions, "d")
        elif proportions is not None:
            raise ValueError("proportions need a list of datasets")
        if not isinstance(dataset, _stoker.Dataset):
            dataset = open(dataset)
        transforms, batch_ops = batchops.split(transforms)
        spec = build_spec(transforms, pipeline, dtype, layout)
        rank, world_size = _distributed(rank, world_size)
        mode, convert = _converter(output)
        device = _device_text(device)
        if placement not in _PLACEMENTS:
            raise ValueError("placement must be 'auto', 'cpu' or 'gpu', got %r" % (placement,))
        if decoder not in _DECODERS:
            raise ValueError("decoder must be 'cpu' or 'nvjpeg', got %r" % (decoder,))
        if decoder != "cpu" and device is None:
            raise ValueError("decoder=%r needs device='cuda:N' (it decodes on the GPU)"
                             % (decoder,))
        device_convert = _device_converter(output, device)
        if on_error not in _ON_ERROR:
            raise ValueError("on_error must be 'raise', 'skip' or 'replace', got %r"
                             % (on_error,))
        shuffle, block = _shuffle_mode(shuffle)
        if not block and (block_size is not None or shuffle_window is not None):
            raise ValueError("block_size and shuffle_window need shuffle='block'")
        block_size = _optional_count("block_size", block_size)
        shuffle_window = _optional_count("shuffle_window", shuffle_window)
        batch_size = operator.index(batch_size)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1, got %d" % batch_size)
        num_threads = _count_or_auto("num_threads", num_threads)
        prefetch = _count_or_auto("prefetch", prefetch)
        if max_batches is None:
            max_batches = 0  # the loader's default (prefetch + 4, 20 with prefetch auto)
        else:
            max_batches = operator.index(max_batches)
            if max_batches < (prefetch or 1) + 1:
                raise ValueError("max_batches (%d) must be at least prefetch + 1 (%d)"
                                 % (max_batches, (prefetch or 1) + 1))
        memory_limit = _optional_count("memory_limit", memory_limit)
        if report_every is not None:
            report_every = operator.index(report_every)
            if report_every < 1:
                raise ValueError("report_every must be >= 1, got %d" % report_every)
        if not (report is None or report == "log" or callable(report)):
            raise ValueError("report must be a callable, 'log' or None, got %r" % (report,))
        packed_indices = _pack_array("indices", indices, "Q")
        packed_weights = _pack_array("weights", weights, "d")
        num_samples = _optional_count("num_samples", num_samples)
        views = operator.index(views)
        if views < 1:
            raise ValueError("views must be >= 1, got %d" % views)
        if aug_seed is not None:
            aug_seed = operator.index(aug_seed)
        for part in getattr(dataset, "_parts", None) or (dataset,):
            check = getattr(part, "_loader_check", None)  # stoker.ExternalSource
            if check is not None:
                check(self, shuffle=shuffle, world_size=world_size, batch_size=batch_size,
                      max_batches=max_batches, sampling=next((n for n, v in (
                          ("indices", indices), ("weights", weights),
                          ("num_samples", num_samples), ("balance_classes", balance_classes),
                          ("a list of datasets", mix_sizes)) if v), None))
        self._core = _stoker._Loader(
            dataset, spec, batch_size=batch_size, threads=num_threads, prefetch=prefetch,
            max_batches=max_batches, seed=operator.index(seed), shuffle=shuffle,
            drop_last=bool(drop_last), rank=rank, world_size=world_size,
            on_error=_ON_ERROR[on_error], output=mode, convert=convert, block=block,
            block_size=block_size, shuffle_window=shuffle_window, indices=packed_indices,
            weights=packed_weights, num_samples=num_samples,
            balance_classes=bool(balance_classes), aug_seed=aug_seed, views=views,
            eager=bool(eager), mix_sizes=mix_sizes, mix_weights=mix_weights,
            memory_limit=memory_limit, fields=_fields_text(fields), device=device,
            placement=_PLACEMENTS[placement], device_convert=device_convert,
            decoder=_DECODERS[decoder], **extra)
        self._fields = self._core.fields()
        self._as_dict = bool(as_dict)
        self._wrap = self._as_dict or any(f[3] and not f[4] and f[2] != "uint8"
                                          for f in self._fields)
        self._dataset = dataset
        self._pipeline = spec
        self._output = output
        self._report_every = report_every
        self._report = report
        self._decisions_seen = 0
        self._batch_ops = batch_ops
        try:
            self._batch_transform = _check_batch_transform(batch_transform, output,
                                                           self._core.dtype)
        except BaseException:
            self._core.close()
            raise
        self._options = dict(batch_size=batch_size,
                             shuffle="block" if block else shuffle,
                             block_size=block_size or None, shuffle_window=shuffle_window or None,
                             seed=operator.index(seed), num_threads=num_threads or "auto",
                             prefetch=prefetch or "auto", max_batches=self._core.max_batches,
                             memory_limit=memory_limit or None, report_every=report_every,
                             drop_last=bool(drop_last), rank=rank, world_size=world_size,
                             on_error=on_error, num_samples=num_samples or None,
                             balance_classes=bool(balance_classes), aug_seed=aug_seed,
                             views=views, eager=bool(eager),
                             proportions=list(proportions) if proportions is not None else None,
                             batch_transform=batch_transform,
                             fields=[f[0] for f in self._fields], as_dict=self._as_dict,
                             device=device or "cpu", placement=placement, decoder=decoder)

    # -- iteration ---------------------------------------------------------

    def __iter__(self):
        """A pass over the current epoch yielding ``(images, labels)`` — or,
        with ``fields=``, one item per field in that order (a dict with
        ``as_dict=True``); variable-length fields are :class:`Ragged`."""
        return self._watched(self._core.iter(wrap=self._post(False)))

    @property
    def fields(self):
        """The names of the fields each batch holds, in order."""
        return [f[0] for f in self._fields]

    def _post(self, with_indices):
        """What the native iterator calls on each item before yielding it
        (``fn(item, epoch, position)``), or None: Ragged variable fields or
        dicts (as_dict), then the BatchOps and the batch transform. The
        iterator calls it itself, rather than a generator wrapping the
        iterator, so that Ctrl-C never loses a batch (docs/python.md,
        "Ctrl-C"): a generator dies with the exception, and an item taken
        but not yet yielded would be gone."""
        steps = []
        if self._wrap:
            steps.append(self._wrapper(with_indices))
        if self._batch_transform is not None or self._batch_ops:
            steps.append(self._transformer(with_indices))
        if not steps:
            return None
        if len(steps) == 1:
            return steps[0]
        first, second = steps
        return lambda item, epoch, position: second(first(item, epoch, position), epoch,
                                                    position)

    def _wrapper(self, with_indices):
        """Items with Ragged variable fields, or dicts (as_dict)."""
        from .fields import Ragged
        fields = self._fields
        ragged = [f[3] and not f[4] and f[2] != "uint8" for f in fields]
        names = [f[0] for f in fields] + (["indices"] if with_indices else [])
        as_dict = self._as_dict

        def wrap(item, epoch, position):
            item = tuple(Ragged(*x) if i < len(ragged) and ragged[i] else x
                         for i, x in enumerate(item))
            return dict(zip(names, item)) if as_dict else item
        return wrap

    def iter_with_indices(self):
        """Like ``iter(loader)`` but yields ``(images, labels, indices)``:
        the dataset index of every row, an int64 array (a copy). With a
        batch_transform: what it returns, then the indices."""
        return self._watched(self._core.iter(with_indices=True, wrap=self._post(True)))

    def _watched(self, it):
        """``it`` as is, or with the periodic report and the autotuner's
        decisions logged (only when asked: the plain path adds nothing)."""
        import logging
        log = logging.getLogger("stoker")
        if self._report_every is None and not log.isEnabledFor(logging.DEBUG):
            return it
        return self._reporting(it, log)

    def _reporting(self, it, log):
        import logging
        debug = log.isEnabledFor(logging.DEBUG)
        every, n = self._report_every, 0
        for item in it:
            yield item
            n += 1
            if debug:
                self._log_decisions(log)
            if every and n % every == 0:
                self._emit(self.profile(reset=True))

    def _log_decisions(self, log):
        made = self._core.stats()["decisions"]
        if made > self._decisions_seen:
            for text in self._core.decisions(self._decisions_seen):
                log.debug("autotune: %s", text)
            self._decisions_seen = made

    def _emit(self, prof):
        if callable(self._report):
            self._report(prof)
        elif self._report == "log":
            import logging
            logging.getLogger("stoker").info("%s", prof["text"])
        else:
            print(prof["text"], file=sys.stderr, flush=True)

    def profile(self, reset=False):
        """The data-stall profile since creation or the last ``reset=True``
        (docs/engine.md, "Profile"), measured without touching the loop: for
        every batch, how long the loop waited for it in ``next()`` and how
        long it spent on its step before asking. A dict:

        ``data_share`` (wait / loop time, 0..1), ``wait_s``, ``step_s``,
        ``wall_s``, ``batches``, ``samples``, ``images_per_s``, percentiles
        ``wait_p50_s`` ``wait_p90_s`` ``wait_p99_s`` ``wait_max_s``
        ``step_p50_s`` ``step_p90_s`` ``step_p99_s``, ``stages_s`` (worker
        seconds in ``read``, ``decode``, ``augment``, ``collate``),
        ``workers_busy`` (0..1), ``queue_mean`` (batches ready when asked),
        ``threads`` and ``prefetch`` (now), ``cpus`` (the CPU budget),
        ``bound`` (``'data'``, ``'step'`` or ``'unknown'``), ``stage`` (what
        limits), ``verdict`` (one line) and ``text`` (a report line).
        ``reset=True`` starts a new window after reading this one."""
        p = self._core.profile(reset=bool(reset))
        p["text"] = _profile_text(p)
        return p

    def profile_events(self):
        """Per delivered batch of the window (the last 4096): a list of
        ``(t, wait_s, step_s, ready, threads, prefetch)``: seconds since the
        loader was created, the wait for it, the step before it, batches
        ready when it was asked for, and the knobs then (queue depth and
        tuning over time)."""
        return self._core.profile_events()

    def set_threads(self, n):
        """Fix the active worker count now (ends its autotuning); batches
        are unchanged."""
        self._core._set_knob("threads", operator.index(n))

    def set_prefetch(self, n):
        """Fix the prefetch depth now (ends its autotuning)."""
        self._core._set_knob("prefetch", operator.index(n))

    def _transformer(self, with_indices):
        """The BatchOps and the batch transform as one step (batchops.step).
        A stoker.Mixup draws with its batch's (aug seed, epoch, position,
        rank)."""
        from .mixup import Mixup
        mixup = None
        if isinstance(self._batch_transform, Mixup):
            seed = self._options["aug_seed"]
            mixup = dict(seed=self._options["seed"] if seed is None else seed,
                         rank=self._options["rank"], layout=self._core.layout)
        return batchops.step(self._batch_ops, self._batch_transform, mixup, with_indices)

    def _transform_id(self):
        """What state_dict records of the batch transform: a Mixup's settings
        (its draws are part of what a resume reproduces), else None."""
        from .mixup import Mixup
        bt = self._batch_transform
        return repr(bt) if isinstance(bt, Mixup) else None

    def iter_with_paths(self):
        """Like ``iter(loader)`` but yields ``(images, labels, paths)``: the
        source name of every row (``dataset.path(i)``: the file path of an
        image folder's sample, ``None`` for formats without names)."""
        ds = self._dataset
        post = self._post(True)

        def with_paths(item, epoch, position):
            images, labels, indices = post(item, epoch, position) if post else item
            return images, labels, ds.paths(indices)
        return self._watched(self._core.iter(with_indices=True, wrap=with_paths))

    def __len__(self):
        """Batches per epoch for this rank (of the epoch the loader is in: after
        :meth:`load_state_dict` from another world size, what is left of the
        resumed epoch, until it ends)."""
        return len(self._core)

    def set_epoch(self, epoch):
        """Select the epoch the next pass delivers (its order and augmentations).

        Cheap when the loader is already at the start of that epoch
        (prefetched batches are kept). After :meth:`load_state_dict`,
        ``set_epoch`` with the restored epoch keeps the restored position.
        """
        self._core.set_epoch(operator.index(epoch))

    @property
    def epoch(self):
        """The epoch the next ``iter()`` delivers."""
        return self._core.epoch

    # -- resume -------------------------------------------------------------

    def state_dict(self):
        """Where the consumer is: (seed, epoch, position of the next batch) and
        a fingerprint. A Loader created with the same arguments and given it by
        :meth:`load_state_dict` delivers exactly the batches this one would
        deliver next (num_threads and prefetch may differ)."""
        st = self._core.state()
        st["version"] = 1
        st["pipeline"] = self._pipeline
        if self._transform_id() is not None:
            st["batch_transform"] = self._transform_id()
        return st

    def load_state_dict(self, state):
        """Restore :meth:`state_dict`: the next ``iter()`` continues from there.

        A state taken with another world size, rank or batch size is
        accepted: the epoch continues from where all the old ranks together
        stopped, strided over this Loader's ranks (no sample of the epoch
        repeated or skipped, apart from the pad/drop rule on the rest), and
        ``len()`` is the number of batches left of that epoch until it ends.

        Raises InvalidArgument if the state belongs to another dataset size,
        seed or shuffle/block/drop_last setting, and
        ValueError if it was taken with another pipeline (delete
        ``state['pipeline']`` and ``state['spec_hash']`` to resume anyway)."""
        state = dict(state)
        if state.pop("version", 1) != 1:
            raise ValueError("unknown state_dict version")
        pipeline = state.pop("pipeline", None)
        if pipeline is not None and pipeline != self._pipeline:
            raise ValueError("state_dict was taken with pipeline %r but this Loader runs %r "
                             "(delete state['pipeline'] and state['spec_hash'] to resume anyway)"
                             % (pipeline, self._pipeline))
        bt = state.pop("batch_transform", None)
        mine = self._transform_id()
        if bt is not None and bt != mine:
            raise ValueError("state_dict was taken with batch_transform %s but this Loader has "
                             "%s (delete state['batch_transform'] to resume anyway)" % (bt, mine))
        self._core.set_state(state)

    # -- introspection --------------------------------------------------------

    def warmup(self):
        """Start the worker threads and the batch pool now, so the first
        batches are being made before the first iteration. A no-op when
        started (iteration starts a lazy Loader by itself)."""
        self._core.warmup()

    @property
    def skipped(self):
        """The samples that failed to read in the batches delivered so far
        (``on_error='skip'`` or ``'replace'``), in order: a list of
        ``(index, path, reason)`` (path None where the format names no
        file; under 'replace' a failed substitute is listed too). The same
        list object each time: clear it to start afresh."""
        return self._core.skipped

    def stats(self):
        """Counters and times since creation, a dict:

        ``samples`` (written into batches by the workers: prefetched batches
        not yet handed over included), ``delivered`` (rows of the batches
        ``next()`` handed to the loop), ``batches`` (delivered),
        ``skipped`` (corrupt samples
        skipped), ``read_s``, ``decode_s``, ``augment_s`` (without the
        decoder), ``collate_s``, ``worker_idle_s`` (worker seconds summed
        over threads), ``consumer_wait_s`` (time the consumer waited for
        batches), ``consumer_step_s`` (its time between batches),
        ``threads`` and ``prefetch`` (now), ``decisions`` (autotuner moves
        made), ``memory_bytes`` (pool + scratch now),
        ``batches_allocated`` and ``pool_bytes`` (the buffer
        pool now), ``pool_exhausted`` (next() calls that found every buffer
        held), ``batches_alive`` (batches Python still references),
        ``gc_collects`` (gc.collect() runs made to recover buffers),
        ``gpu_head_rows`` (device=, placement 'gpu': rows whose decoded
        region did not fit the staging memory and were resampled on the
        CPU; docs/gpu.md), ``gpu_decode_cpu_rows`` (decoder 'nvjpeg': rows
        decoded on the CPU instead: images nvJPEG does not take, batches
        it failed, non-JPEG inputs)."""
        return self._core.stats()

    @property
    def dataset(self):
        """The Dataset this loader reads."""
        return self._dataset

    @property
    def pipeline(self):
        """The pipeline spec text the loader runs."""
        return self._pipeline

    @property
    def output(self):
        """'torch', 'numpy' or 'dlpack'."""
        return self._output

    @property
    def device(self):
        """Where batches are delivered: 'cpu', or the CUDA device as given
        ('cuda', 'cuda:N')."""
        return self._options["device"]

    @property
    def device_info(self):
        """With a CUDA device, what runs where, in words: the mode ('gpu',
        'format' or 'copy'), why, and which JPEG decoder (e.g. "gpu: ...;
        JPEGs: nvJPEG hardware decoder (regions, DCT scaling)"); '' without
        a device."""
        return self._core.device_info()

    @property
    def device_timing(self):
        """With a CUDA device whose GPU runs kernels (mode 'gpu' or
        'format'): the device time of the loader's GPU work so far, a dict:
        ``batches`` timed, their kernel ``launches``, ``fused_batches`` (run
        with the fused vertical pass + output kernel), ``kernel_s`` (device
        seconds from each batch's first launch to its last one's end), and
        with decoder 'nvjpeg' ``decode_batches`` and ``decode_s`` (the
        decode's stream time). A batch is counted once a later batch has
        reused its slot: divide by ``batches``. None without a device or in
        'copy' mode."""
        return self._core.device_timing()

    @property
    def decoder(self):
        """Who decodes JPEGs with a device: 'cpu' or 'nvjpeg'."""
        return self._options["decoder"]

    @property
    def placement(self):
        """'auto', 'cpu' or 'gpu' (what the GPU does; see the class doc)."""
        return self._options["placement"]

    @property
    def batch_size(self):
        """Samples per batch."""
        return self._options["batch_size"]

    @property
    def rank(self):
        """This process's rank."""
        return self._options["rank"]

    @property
    def world_size(self):
        """Number of ranks sharing the dataset."""
        return self._options["world_size"]

    @property
    def max_batches(self):
        """Cap on batch buffers (prefetched + held by Python)."""
        return self._options["max_batches"]

    @property
    def sample_shape(self):
        """Per-sample output shape, (C, H, W) or (H, W, C)."""
        return self._core.sample_shape

    @property
    def dtype(self):
        """Output element type name: 'uint8', 'float16', 'bfloat16' or 'float32'."""
        return self._core.dtype

    @property
    def layout(self):
        """'NCHW' or 'NHWC'."""
        return self._core.layout

    @property
    def options(self):
        """The options it was created with (a copy)."""
        return dict(self._options)

    def close(self):
        """Stop the worker threads now. Batches still referenced stay valid;
        the buffers are freed when the last one dies. Idempotent."""
        self._core.close()

    @property
    def closed(self):
        """Whether close() was called."""
        return self._core.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        try:
            epoch = self.epoch
        except (ValueError, _stoker.StokerError):  # closed, or a forked child
            epoch = "?"
        device = ""
        if self.device != "cpu":
            device = " device=%s placement=%s" % (self.device, self.placement)
        return ("<stoker.Loader %r pipeline=%r batch_size=%d epoch=%s rank=%d/%d output=%s%s>"
                % (self._dataset.uri, self._pipeline, self.batch_size, epoch, self.rank,
                   self.world_size, self._output, device))

    def __reduce_ex__(self, protocol):
        raise TypeError("a stoker Loader cannot be pickled or copied: it owns native threads "
                        "and batch buffers. Create the Loader in each process from its "
                        "arguments (they are in loader.options, loader.pipeline and "
                        "loader.dataset.uri).")
