"""stoker.ExternalSource: a dataset fed by Python code, so that a pipeline
whose first step only Python can do (a torch Dataset, a database query, a
generator of synthetic images) still gets stoker's native augmentation,
batching and prefetch::

    src = stoker.ExternalSource(my_torch_dataset)          # (image, label) items
    loader = stoker.Loader(src, batch_size=256, transforms=[...], num_threads=8)

How it works. ExternalSource is a stoker Dataset made by the C extension
over a *callback dataset* (stk_dataset_from_callbacks, src/format/callback.c):
the loader's worker threads call back into Python for each sample, taking
the GIL for ``source[index]`` and the conversion of its item only; the
library copies the bytes or pixels out, and decodes, augments and batches
them without the GIL. So the Python part of each sample runs one at a time
(the GIL), while everything after it runs on all worker threads.

Indexables (``__len__`` + ``__getitem__``: a list, a NumPy array of images, a
torch map-style Dataset) are read by index, in any order: shuffle, sharding,
resume and the per-sample random draws work as for any dataset, and the same
seed gives the same batches for any thread count. Iterables (a generator, a
torch IterableDataset, any object with ``__iter__`` only) have no random
access: they are read in order, through :class:`_Feed` below, by a loader
without shuffle on one rank; see its docstring for what that implies.
"""
import atexit
import operator
import threading
import weakref

from . import _stoker
from .loader import Dataset

__all__ = ["ExternalSource"]

# stk_field_type codes (stoker.h, pinned)
_FIELD_TYPES = {"bytes": 1, "image": 2, "raw_image": 3, "int64": 4, "float32": 5, "str": 6,
                "string": 6}
_MISSING = object()

# Loaders reading an ExternalSource, closed at exit before the interpreter
# starts to shut down: their workers call into Python, which they must not
# do once it is finalizing (a thread taking the GIL then is ended on the
# spot). atexit handlers run while it is still whole.
_loaders = weakref.WeakSet()


@atexit.register
def _close_loaders():
    for loader in list(_loaders):
        try:
            loader.close()
        except Exception:  # in use by another thread: the process exits anyway
            pass


def _code_error(cls, code, message):
    """A stoker error carrying its C code, so that the callback reports that
    code (FormatError: the loader stops, it is not one bad sample)."""
    e = cls(message)
    e.code = code
    return e


class _Pass:
    """One pass over the iterable: its iterator, the index it yields next,
    and the items pulled ahead of the index asked for."""

    __slots__ = ("it", "next", "buf")

    def __init__(self, it):
        self.it, self.next, self.buf = it, 0, {}

    def has(self, index):
        """Whether this pass can still give item `index` (not given or dropped)."""
        return index >= self.next or index in self.buf


class _Feed:
    """The in-order reader of an iterable: ``get(index)`` returns item
    ``index`` of a pass over it.

    The iterable is pulled under a lock (one thread at a time: a generator
    cannot run in two threads). Items pulled ahead of the index asked for
    wait in a buffer keyed by index until their worker asks for them (the
    loader's workers ask for the indices of an epoch in increasing order, a
    few batches apart); items more than ``window`` behind the index asked
    for are dropped (that is how a resumed epoch skips to its position: by
    reading and dropping).

    Passes. A pass gives each index at most once. An index is served by the
    oldest open pass that can still give it, else by a new pass: a new
    iterator (``iter(source)``, or ``source()`` for a function returning
    one) read from item 0; a pass closes once it has given all ``length``
    items. So a new epoch opens a new pass, and an epoch the loader starts
    before the previous one has been fully read (its read-ahead), or a
    restarted one (an abandoned pass, ``load_state_dict``), is served by the
    passes already open where they can: no item is read twice more than
    needed. This assumes what a dataset's epochs assume: every pass yields
    the same items in the same order. (A one-shot iterator, e.g. a generator
    object, has no second pass, and a loader reads ahead into the next epoch
    before the consumer asks for it: ExternalSource refuses iterators.) An
    iterable that ends before ``length`` items is an error that stops the
    loader (a FormatError naming the count), never a silently short epoch;
    items past ``length`` are not read."""

    def __init__(self, source, length, window=4096):
        self._source = source
        self._length = length
        self.window = window
        self._lock = threading.Lock()
        self._passes = []  # open passes, oldest first

    def _open(self):
        src = self._source
        p = _Pass(iter(src() if callable(src) and not hasattr(src, "__iter__") else src))
        self._passes.append(p)
        return p

    def _pull(self, p):
        try:
            item = next(p.it)
        except StopIteration:
            n = p.next
            self._passes.remove(p)
            raise _code_error(_stoker.FormatError, -5, (
                "the iterable ended after %d items, but the ExternalSource has length %d "
                "(pass length=%d, or make each pass yield %d items)"
                % (n, self._length, n, self._length))) from None
        p.next += 1
        return item

    def get(self, index):
        with self._lock:
            p = next((p for p in self._passes if p.has(index)), None) or self._open()
            item = p.buf.pop(index, _MISSING)
            if item is _MISSING:
                keep_from = index - self.window
                while p.next < index:
                    i = p.next
                    pulled = self._pull(p)
                    if i >= keep_from:
                        p.buf[i] = pulled
                item = self._pull(p)
                if len(p.buf) > self.window:
                    for i in [i for i in p.buf if i < keep_from]:
                        del p.buf[i]
            if p.next >= self._length and not p.buf:
                self._passes.remove(p)  # every item given: closed
            return item


def _parse_fields(fields):
    """fields= -> [(name, kind, shape)], shape a tuple with None for a
    varying leading dimension (or None for bytes/str/image)."""
    if fields is None:
        return []
    if not hasattr(fields, "items"):
        raise TypeError("fields must be a dict {name: type or (type, shape)}, got %r" % (fields,))
    out = []
    for name, decl in fields.items():
        if not isinstance(name, str) or not name:
            raise TypeError("fields: a field name must be a non-empty str, got %r" % (name,))
        if name in ("image", "label"):
            raise ValueError("fields: %r is always there; fields= declares the extra ones" % name)
        kind, shape = (decl, None) if isinstance(decl, str) else tuple(decl) if \
            isinstance(decl, (tuple, list)) and len(decl) == 2 else (None, None)
        if kind not in _FIELD_TYPES:
            raise ValueError("fields[%r]: %r is not a type: one of 'float32', 'int64' (each with "
                             "an optional shape, e.g. ('float32', (None, 4))), 'bytes', 'str', "
                             "'image' (encoded), 'raw_image'" % (name, decl))
        if kind == "string":
            kind = "str"
        if kind in ("int64", "float32"):
            shape = () if shape is None else tuple(shape)
            for d, n in enumerate(shape):
                if n is None and d == 0:
                    continue
                if not isinstance(n, int) or n < 1:
                    raise ValueError("fields[%r]: shape %r: each size must be an int >= 1 (the "
                                     "first may be None: it varies per sample)" % (name, shape))
            if len(shape) > 4:
                raise ValueError("fields[%r]: at most 4 dimensions" % name)
        elif kind == "raw_image":
            if shape is not None and (len(shape) != 3 or not all(
                    isinstance(n, int) and n >= 1 for n in shape) or shape[2] > 4):
                raise ValueError("fields[%r]: a raw_image shape is (height, width, channels)"
                                 % name)
            shape = tuple(shape) if shape is not None else None
        elif shape is not None:
            raise ValueError("fields[%r]: a %s field has no shape" % (name, kind))
        out.append((name, kind, shape))
    return out


def _converter(decls):
    """convert(k, value): extra field k's value as a buffer the C side
    copies: a C-contiguous little-endian array (int64/float32, uint8 HWC
    for raw images) or bytes."""

    def fail(k, what):
        name, kind, shape = decls[k]
        return ValueError("field %r (%s%s): %s" % (name, kind, "" if shape is None else
                                                   " %s" % (shape,), what))

    def convert(k, value):
        import numpy
        name, kind, shape = decls[k]
        if kind in ("int64", "float32"):
            a = numpy.asarray(value)
            if a.dtype.kind not in "biuf":
                raise fail(k, "a value of dtype %s, not numbers" % a.dtype)
            if kind == "int64" and a.dtype.kind == "f":
                if not numpy.all(numpy.isfinite(a) & (a == numpy.floor(a))):
                    raise fail(k, "non-integer values (stoker will not truncate them)")
            if not shape:
                if a.size != 1:
                    raise fail(k, "%d values for a scalar" % a.size)
                a = a.reshape(())
            else:
                if a.size == 0 and shape[0] is None:
                    a = a.reshape((0,) + shape[1:])
                if a.ndim != len(shape) or a.shape[1:] != shape[1:] or \
                        (shape[0] is not None and a.shape[0] != shape[0]):
                    raise fail(k, "a value of shape %s" % (a.shape,))
            return numpy.ascontiguousarray(a, dtype="<i8" if kind == "int64" else "<f4")
        if kind == "str":
            if not isinstance(value, str):
                raise fail(k, "a %s, not a str" % type(value).__name__)
            return value.encode("utf-8")
        if kind == "raw_image":
            a = numpy.asarray(value)
            if a.dtype != numpy.uint8:
                raise fail(k, "an array of %s, not uint8" % a.dtype)
            if a.ndim == 2:
                a = a[:, :, None]
            if a.ndim != 3 or (shape is not None and a.shape != shape):
                raise fail(k, "an array of shape %s" % (a.shape,))
            return numpy.ascontiguousarray(a)
        try:  # bytes, image: any contiguous bytes-like value
            return memoryview(value).cast("B")
        except TypeError:
            raise fail(k, "a %s, not bytes" % type(value).__name__) from None

    return convert


def _is_iterable_dataset(obj):
    import sys
    data = sys.modules.get("torch.utils.data")
    return data is not None and isinstance(obj, data.IterableDataset)


class ExternalSource(Dataset):
    """A dataset whose samples come from a Python object (docs/python.md,
    "ExternalSource").

    ``source``: an indexable (``__len__`` and ``__getitem__``: a list, a
    NumPy array of images, a torch map-style ``Dataset``), read by index in
    any order; or an iterable (a generator function or generator, a torch
    ``IterableDataset``, any object with only ``__iter__``), read in order:
    a Loader over it must not shuffle and runs on one rank, and a new pass
    (epoch) starts a new iterator, so give a generator *function* (or a
    re-iterable object) for more than one epoch.

    Items: an image; ``(image, label)``; ``(image, label, value, ...)`` with
    one value per field of ``fields``; or a dict with keys ``"image"``,
    ``"label"`` (optional) and the field names. The image: encoded bytes
    (JPEG, PNG, ... as ``bytes``, ``bytearray``, ``memoryview`` or a 1-D
    uint8 array or tensor), a NumPy uint8 array ``(H, W)`` or ``(H, W, C)``,
    a PIL image (modes L, RGB, RGBA as they are; others converted to RGB),
    or a CPU torch uint8 tensor ``(C, H, W)`` (torchvision's layout: as
    ``PILToTensor`` and ``decode_image`` give; a 2-D tensor is ``(H, W)``).
    The label: an int (``None`` or no label: -1).

    ``fields``: extra fields, ``{"boxes": ("float32", (None, 4)),
    "image_id": "int64", "caption": "str"}``: types ``float32``/``int64``
    with a shape (``None`` first: it varies per sample; no shape: a
    scalar), ``bytes``, ``str``, ``image`` (encoded), ``raw_image``.
    ``length``: the number of samples (default ``len(source)``; needed for
    an iterable without ``len``). ``shape``: ``(H, W, C)`` when every image
    is pixels of that shape, so a pipeline needs no resize (checked per
    sample); default None: images of any size. ``classes``: class names
    (default ``source.classes`` when it is a list of str, as torchvision's
    datasets have); ``num_classes``. ``name``: what messages call it
    (default the source's type name).

    An exception in ``__getitem__``, or an item of a type it cannot read,
    is a :class:`stoker.DataError` of that sample naming its index, the
    exception type and message, and where it was raised; a Loader's
    ``on_error="skip"`` skips it. An iterable that ends before ``length``
    items stops the loader with a :class:`stoker.FormatError`.

    The GIL: each sample's ``__getitem__`` (and its conversion) runs in a
    worker thread holding the GIL, so Python code of different samples does
    not run at once; decoding and augmentation run without it. Keep the
    Python part small (read bytes, return them) and let stoker decode.
    """

    def __new__(cls, source, fields=None, *, length=None, shape=None, num_classes=None,
                classes=None, name=None):
        if isinstance(source, (str, bytes, bytearray)):
            raise TypeError("ExternalSource reads a Python object (a list, a torch Dataset, a "
                            "generator...); for a path or URI use stoker.open or stoker.Loader")
        decls = _parse_fields(fields)
        t = type(source)
        indexable = (not _is_iterable_dataset(source) and hasattr(t, "__getitem__")
                     and hasattr(t, "__len__"))
        if length is not None:
            length = operator.index(length)
            if length < 1:
                raise ValueError("length must be >= 1, got %d" % length)
        if indexable:
            n = len(source)
            if length is not None and length > n:
                raise ValueError("length=%d but the source has %d items" % (length, n))
            count, seq, feed = length if length is not None else n, source, None
        elif hasattr(t, "__next__"):
            raise TypeError(
                "ExternalSource got a one-shot iterator (%s): it is read once per epoch, and a "
                "loader reads ahead into the next epoch, so it needs a new iterator for each "
                "pass: give the generator function itself (a callable returning a new "
                "iterator, e.g. ExternalSource(gen, length=N) rather than gen()) or a "
                "re-iterable object" % t.__name__)
        elif callable(source) or hasattr(t, "__iter__"):
            if length is None:
                if hasattr(t, "__len__"):
                    length = len(source)
                else:
                    length = operator.length_hint(source, 0) if not callable(source) else 0
                if not length:
                    raise TypeError("ExternalSource over an iterable without len(): give "
                                    "length= (the number of items each pass yields)")
            count, seq, feed = length, None, _Feed(source, length)
        else:
            raise TypeError("ExternalSource needs an indexable (__len__ and __getitem__) or an "
                            "iterable (or a function returning an iterator), got %s"
                            % t.__name__)
        if count < 1:
            raise ValueError("the source is empty")
        if classes is None:
            c = getattr(source, "classes", None)
            if isinstance(c, (list, tuple)) and c and all(isinstance(x, str) for x in c):
                classes = list(c)
        if classes is not None:
            classes = [str(x) for x in classes]
            if num_classes is not None and operator.index(num_classes) != len(classes):
                raise ValueError("num_classes=%d but %d class names" % (num_classes, len(classes)))
            num_classes = len(classes)
        if shape is not None:
            shape = tuple(operator.index(x) for x in shape)
            if len(shape) == 2:
                shape += (1,)
            if len(shape) != 3:
                raise ValueError("shape must be (height, width, channels), got %r" % (shape,))
        if name is None:  # a function's or generator's own name, else the type's
            name = getattr(source, "__name__", None) if callable(source) else None
        label = "external:%s" % (name if isinstance(name, str) and name else t.__name__)
        info = [(n, _FIELD_TYPES[k], tuple(0 if d is None else d for d in (s or ())))
                for n, k, s in decls]
        self = cls._from_source(seq, feed.get if feed is not None else None, count, label,
                                shape, operator.index(num_classes or 0), classes, info,
                                _converter(decls))
        self._source = source
        self._feed = feed
        self._fields = decls
        self._args = dict(fields=fields, length=length, shape=shape, num_classes=num_classes,
                          classes=classes, name=name)
        return self

    def __init__(self, *args, **kwargs):
        pass  # everything is done in __new__ (the C type is immutable once made)

    @property
    def iterable(self):
        """True when the source is read in order (an iterable), False for an
        indexable."""
        return self._feed is not None

    @property
    def source(self):
        """The Python object the samples come from."""
        return self._source

    def _loader_check(self, loader, *, shuffle, world_size, sampling, batch_size, max_batches):
        """Called by Loader: an iterable is read in order, on one rank, every
        index of each epoch (anything else would re-read it from the start
        for every index it skips back to). Sizes the feed's buffer to the
        batches a loader keeps in flight. The loader is closed at exit."""
        _loaders.add(loader)
        if self._feed is None:
            return
        why = ("shuffle=True" if shuffle else "world_size=%d" % world_size if world_size > 1
               else sampling)
        if why:
            raise ValueError("%s reads an iterable, in order: it cannot run with %s (give an "
                             "indexable source for random access, or shard the iterable "
                             "yourself, one ExternalSource per rank)" % (self.uri, why))
        self._feed.window = max(self._feed.window, 2 * (max_batches or 24) * batch_size)

    def __reduce__(self):
        return (_remake, (type(self), self._source, self._args))

    def __repr__(self):
        return "<stoker.ExternalSource %s: %d samples%s%s>" % (
            self.uri, len(self), " (an iterable, read in order)" if self.iterable else "",
            ", fields %s" % [n for n, _, _ in self._fields] if self._fields else "")


def _remake(cls, source, args):
    args = dict(args)
    return cls(source, args.pop("fields"), **args)
