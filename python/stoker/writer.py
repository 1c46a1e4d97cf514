"""stoker.ShardWriter: write .stk shards from Python, record by record.

A dataset that exists only as Python code — a Hugging Face dataset, a
database query, a simulator — becomes shards that ``stoker.open``,
``stoker.Loader`` and ``stoker inspect/verify`` read like any other::

    fields = {"image": "image", "label": "int64", "boxes": ("float32", (None, 4))}
    with stoker.ShardWriter("out/", fields=fields, class_names=names) as w:
        for row in rows:
            w.write({"image": row["jpeg"], "label": row["label"], "boxes": row["boxes"]})

The C library (``stk_shard_writer``, include/stoker/stoker.h) does the
writing and checks every value against the schema; this module turns
Python values (bytes, str, int, float, NumPy arrays, lists) into the
buffers it takes, and names the record and field in every TypeError and
ValueError. See docs/python.md, "ShardWriter".
"""
import os

from . import _stoker

__all__ = ["ShardWriter"]

# stk_field_type codes (include/stoker/stoker.h; pinned).
_TYPES = {"bytes": 1, "image": 2, "raw_image": 3, "int64": 4, "float32": 5, "string": 6}


class _Field:
    __slots__ = ("name", "type", "code", "shape", "varies", "row", "zstd_level")

    def __init__(self, name, spec):
        if not isinstance(name, str):
            raise TypeError("field names must be str, not %s" % type(name).__name__)
        shape, zstd_level = None, 0
        if isinstance(spec, str):
            ftype = spec
        elif isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
            ftype, shape = spec
        elif isinstance(spec, dict):
            unknown = set(spec) - {"type", "shape", "zstd_level"}
            if unknown or "type" not in spec:
                raise ValueError("field %r: a dict spec has 'type' and optionally 'shape' and "
                                 "'zstd_level' (got %s)" % (name, sorted(spec)))
            ftype, shape, zstd_level = spec["type"], spec.get("shape"), spec.get("zstd_level", 0)
        else:
            raise TypeError("field %r: give a type name (%s), (type, shape) or a dict, not %r"
                            % (name, ", ".join(_TYPES), spec))
        if ftype not in _TYPES:
            raise ValueError("field %r: unknown type %r (one of %s)"
                             % (name, ftype, ", ".join(_TYPES)))
        self.name, self.type, self.code = name, ftype, _TYPES[ftype]
        self.zstd_level = int(zstd_level or 0)
        if shape is None:
            dims = ()
        elif isinstance(shape, int):
            dims = (shape,)
        else:
            dims = tuple(shape)
        if ftype in ("image", "bytes", "string") and dims:
            raise ValueError("field %r: %s fields have no shape" % (name, ftype))
        if ftype == "raw_image" and dims and len(dims) != 3:
            raise ValueError("field %r: a raw_image shape is (height, width, channels), or None "
                             "for any shape" % name)
        out = []
        for k, d in enumerate(dims):
            if d is None or d == 0:
                if k != 0 or ftype not in ("int64", "float32"):
                    raise ValueError("field %r: only the first dimension of an int64/float32 "
                                     "shape may be None (it then varies per record)" % name)
                out.append(0)
            elif isinstance(d, int) and d > 0:
                out.append(d)
            else:
                raise ValueError("field %r: dimension %r is not a positive int or None"
                                 % (name, d))
        self.shape = tuple(out)
        self.varies = bool(out) and out[0] == 0
        row = 1
        for d in out[1:]:
            row *= d
        self.row = row


class ShardWriter:
    """Write records into .stk shards ``dest/shard-00000.stk``, ...

    ``fields``: a dict ``name -> type`` (in field order), the type being
    one of

    - ``"image"``: an encoded image (JPEG, PNG, WebP, BMP, TIFF, GIF) as
      ``bytes`` (or any bytes-like object), stored byte for byte;
    - ``"raw_image"``: pixels, a ``uint8`` NumPy array ``H x W x C`` (or
      ``H x W``, one channel); ``("raw_image", (H, W, C))`` requires that
      shape of every record; ``{"type": "raw_image", "zstd_level": 3}``
      compresses;
    - ``"int64"`` / ``"float32"``: a scalar (``int``/``float``) or, with
      ``(type, shape)``, an array of that shape; ``None`` (or 0) as the
      first dimension means it varies per record: ``("float32", (None,
      4))`` is k boxes of 4 values, ``("int64", (None,))`` k labels;
    - ``"bytes"``: any bytes; ``"string"``: a ``str`` (stored as UTF-8).

    ``records_per_shard`` / ``shard_size`` (bytes, default 1 GiB) start a
    new shard; ``class_names`` (label -> name) is stored as the label map
    (``ds.classes``); ``metadata`` a dict of further str keys and values
    (``source``, ``created_by``, anything of your own).

    ``write(record)`` takes a dict (every field, no other key) or a
    tuple/list in field order; ``write_many(iterable)`` each of an
    iterable (a generator, a ``datasets.Dataset``). A value of the wrong
    kind is a ``TypeError``, one of the wrong shape or size a
    ``ValueError``, each naming the record (its number, from 0) and the
    field; the record is then not written and the writer stays usable.

    Nothing appears under a shard name before ``close()`` (or the end of
    a ``with`` block), which puts all shards in place at once as one shard
    set; an exception inside ``with``, or ``abort()``, removes everything
    written. ``close()`` returns ``{"records", "shards", "bytes"}``;
    calling it again returns the same. ``dest`` must not hold shards yet.
    One thread at a time; the GIL is released while each record is
    written.
    """

    def __init__(self, dest, fields, *, records_per_shard=None, shard_size=None,
                 class_names=None, metadata=None):
        if not isinstance(fields, dict) or not fields:
            raise TypeError("fields must be a non-empty dict name -> type")
        self._fields = [_Field(n, s) for n, s in fields.items()]
        self._names = [f.name for f in self._fields]
        self._index = {n: i for i, n in enumerate(self._names)}
        self._dest = os.fspath(dest)
        self._result = None
        self._numpy = None
        if class_names is not None:
            class_names = [str(c) if not isinstance(c, str) else c for c in class_names]
        meta = None
        if metadata is not None:
            meta = []
            for k, v in dict(metadata).items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError("metadata keys and values must be str (got %r: %r)" % (k, v))
                meta.append((k, v))
            if not any(k == "created_by" for k, _ in meta):
                meta.append(("created_by", "stoker.ShardWriter " + _stoker.version))
        else:
            meta = [("created_by", "stoker.ShardWriter " + _stoker.version)]
        for name, arg in (("records_per_shard", records_per_shard), ("shard_size", shard_size)):
            if arg is not None and (not isinstance(arg, int) or arg < 1):
                raise ValueError("%s must be a positive int, not %r" % (name, arg))
        spec = [(f.name, f.code, f.shape, f.zstd_level) for f in self._fields]
        self._w = _stoker._ShardWriter(self._dest, spec, int(records_per_shard or 0),
                                       int(shard_size or 0), class_names, meta)

    # -- values ------------------------------------------------------------

    def _np(self):
        if self._numpy is None:
            import numpy
            self._numpy = numpy
        return self._numpy

    def _bad(self, exc, field, msg):
        return exc("record %d, field %r (%s): %s" % (self._w.records, field.name, field.type, msg))

    def _convert(self, field, value):
        t = field.type
        if t == "string":
            if not isinstance(value, str):
                raise self._bad(TypeError, field, "expected str, got %s" % type(value).__name__)
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise self._bad(ValueError, field, "not encodable as UTF-8 (%s)" % e) from None
        if t in ("image", "bytes"):
            if isinstance(value, (bytes, bytearray)):
                return value
            if isinstance(value, str):
                raise self._bad(TypeError, field, "expected bytes, got str")
            try:
                m = memoryview(value)
            except TypeError:
                raise self._bad(TypeError, field, "expected bytes (or a bytes-like object), got "
                                "%s" % type(value).__name__) from None
            if not m.c_contiguous:
                raise self._bad(ValueError, field, "the buffer is not contiguous")
            return m.cast("B") if m.ndim != 1 or m.format != "B" else m
        np = self._np()
        if t == "raw_image":
            if not isinstance(value, np.ndarray):
                raise self._bad(TypeError, field, "expected a uint8 numpy array (H, W, C), got "
                                "%s" % type(value).__name__)
            if value.dtype != np.uint8:
                raise self._bad(TypeError, field, "expected dtype uint8, got %s" % value.dtype)
            if value.ndim == 2:
                value = value[:, :, None]
            if value.ndim != 3:
                raise self._bad(ValueError, field, "expected shape (H, W, C) or (H, W), got %s"
                                % (value.shape,))
            if field.shape and value.shape != field.shape:
                raise self._bad(ValueError, field, "shape %s, the field's is %s"
                                % (value.shape, field.shape))
            if not 1 <= value.shape[2] <= 4 or value.shape[0] == 0 or value.shape[1] == 0:
                raise self._bad(ValueError, field, "shape %s: height and width > 0 and 1 to 4 "
                                "channels" % (value.shape,))
            return np.ascontiguousarray(value)
        # int64 / float32
        arr = np.asarray(value)
        kind = arr.dtype.kind if arr.size else "i"  # [] is float64 to NumPy: any empty value
        if kind == "O" and t == "int64" and all(isinstance(x, int) for x in arr.flat):
            raise self._bad(ValueError, field, "a value does not fit in int64")
        if t == "int64":
            if kind not in "iub":
                raise self._bad(TypeError, field, "expected integers, got %s"
                                % (type(value).__name__ if arr.ndim == 0 else arr.dtype))
            if kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
                raise self._bad(ValueError, field, "a value does not fit in int64")
            dtype = np.int64
        else:
            if kind not in "fiub":
                raise self._bad(TypeError, field, "expected numbers, got %s"
                                % (type(value).__name__ if arr.ndim == 0 else arr.dtype))
            dtype = np.float32
        if field.varies:
            want_tail = field.shape[1:]
            if arr.size == 0:
                arr = arr.reshape((0,) + want_tail)
            if arr.ndim != len(field.shape) or arr.shape[1:] != want_tail:
                raise self._bad(ValueError, field, "shape %s, the field's is (None%s)"
                                % (arr.shape, "".join(", %d" % d for d in want_tail)))
        elif arr.shape != field.shape:
            raise self._bad(ValueError, field, "shape %s, the field's is %s"
                            % (arr.shape, field.shape or "() (a scalar)"))
        return np.ascontiguousarray(arr, dtype=dtype).reshape(-1)

    # -- records -----------------------------------------------------------

    def write(self, record):
        """Write one record: a dict with every field (and no other key), or a
        tuple/list of the values in field order."""
        if self._w.closed:
            raise _stoker.StateError("the ShardWriter is closed")
        if isinstance(record, dict):
            missing = [n for n in self._names if n not in record]
            extra = [k for k in record if k not in self._index]
            if missing or extra:
                raise ValueError("record %d: %s%s%s" % (
                    self._w.records,
                    "missing field%s %s" % ("s" if len(missing) > 1 else "",
                                            ", ".join(map(repr, missing))) if missing else "",
                    "; " if missing and extra else "",
                    "unknown key%s %s (fields: %s)" % ("s" if len(extra) > 1 else "",
                                                       ", ".join(map(repr, extra)),
                                                       ", ".join(self._names)) if extra else ""))
            values = [record[n] for n in self._names]
        elif isinstance(record, (tuple, list)):
            if len(record) != len(self._fields):
                raise ValueError("record %d: %d values for %d fields (%s)"
                                 % (self._w.records, len(record), len(self._fields),
                                    ", ".join(self._names)))
            values = record
        else:
            raise TypeError("record %d: a dict or a tuple in field order, not %s"
                            % (self._w.records, type(record).__name__))
        self._w.add(tuple(self._convert(f, v) for f, v in zip(self._fields, values)))

    def write_many(self, records):
        """``write`` each record of an iterable; returns how many were written."""
        n = 0
        for r in records:
            self.write(r)
            n += 1
        return n

    # -- end ---------------------------------------------------------------

    def close(self):
        """Put the shards in place (all at once, as one shard set); returns
        ``{"records", "shards", "bytes"}``. A second call returns the same.
        Writing no record at all is an ``InvalidArgument`` (a ValueError),
        and leaves nothing behind."""
        if self._result is None:
            if self._w.closed:
                raise _stoker.StateError("the ShardWriter was aborted")
            self._result = self._w.finish()
        return dict(self._result)

    def abort(self):
        """Remove everything written; the writer is closed."""
        self._w.abort()

    @property
    def records(self):
        """Records written so far (the total once closed)."""
        return self._result["records"] if self._result else self._w.records

    @property
    def closed(self):
        return self._w.closed

    @property
    def fields(self):
        """The schema: a dict name -> (type, shape), None for a varying first dimension."""
        return {f.name: (f.type, tuple(None if d == 0 else d for d in f.shape))
                for f in self._fields}

    @property
    def dest(self):
        return self._dest

    def __enter__(self):
        return self

    def __del__(self):
        # Dropped without close(): like an exception, nothing is kept — and
        # said, since records were discarded.
        w = getattr(self, "_w", None)
        if w is not None and not w.closed:
            import warnings
            warnings.warn("stoker.ShardWriter(%r) was never closed: its %d records were discarded"
                          % (self._dest, w.records), ResourceWarning, stacklevel=2)
            w.abort()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
            return False
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return "<stoker.ShardWriter %r, %d records, %s>" % (self._dest, self.records, state)
