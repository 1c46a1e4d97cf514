"""User-defined ops from Python: ``NumbaOp``, ``PythonOp`` and ``load_plugin``.

Each is a transform (a stage of the pipeline spec) that runs on the uint8
HWC image of one sample in the loader's worker threads, after the crops and
resize and before Normalize and the float transforms (docs/ops.md):

- ``NumbaOp(cfunc, args=(), random=0, shape=None)``: a ``@numba.cfunc`` with
  the signature ``NumbaOp.SIGNATURE``; stoker calls its address from the
  worker threads with no GIL, so it runs in parallel at compiled speed.
- ``PythonOp(fn, random=0, shape=None)``: any callable ``fn(image, random)
  -> array``, called under the GIL (one sample at a time across all
  threads, unless the interpreter is free-threaded): for prototyping.
- ``load_plugin(path)``: a C plugin (stoker/op.h), after which its ops can be
  named in a spec or through ``UserOp(name, *args)``.

``random=K`` draws K uniform numbers in [0, 1) per sample from the sample's
own random stream (the one stoker's ops draw from), so a random user op is
deterministic for any number of threads. ``shape``, when given, maps the
input ``(height, width, channels)`` to the output's (called once, when the
loader is created); channels must stay 1 or 3.

Every op is registered once per process under a generated name
(``numba_<function name>``, ``python_<function name>``, with a number added
when two functions share a name); registrations are permanent, so the
function (and its compiled code) is kept alive for the life of the process.
"""
import ctypes
import numbers
import re
import threading
import traceback

from . import _stoker
from .transforms import Transform, _num, _validate

__all__ = ["NumbaOp", "PythonOp", "UserOp", "load_plugin"]

_NUMBA, _PYTHON = 1, 2
_lock = threading.Lock()
_registered = {}  # key -> op name
_names = set()


def load_plugin(path):
    """Load a C plugin of user-defined ops (a shared library exporting
    ``stk_plugin_init``; docs/ops.md). Loading it again does nothing.
    Raises stoker.NotFound for a missing file, InvalidArgument for a file
    that is not a plugin, UnsupportedError for a plugin built for another
    op ABI version."""
    _stoker.load_plugin(path)


def _name(prefix, fn):
    """A free op name from the function's name: lower case, [a-z0-9_]."""
    base = getattr(fn, "__name__", None) or getattr(getattr(fn, "_pyfunc", None), "__name__",
                                                     None) or "op"
    base = re.sub(r"[^a-z0-9_]", "_", base.lower())[:40] or "op"
    if not base.startswith(prefix + "_"):  # numba_brightness stays numba_brightness
        base = "%s_%s" % (prefix, base)
    name, n = base, 1
    while name in _names:
        n += 1
        name = "%s_%d" % (base, n)
    return name


def _register(kind, prefix, fn, key, target, random, shape):
    with _lock:
        name = _registered.get(key)
        if name is None:
            name = _name(prefix, fn)
            _stoker._register_op(kind, name, target, random, shape, _run)
            _registered[key] = name
            _names.add(name)
        return name


def _count(random):
    if isinstance(random, bool) or not isinstance(random, numbers.Integral):
        raise TypeError("random must be an int (uniform draws per sample), got %r" % (random,))
    if not 0 <= random <= 16:
        raise ValueError("random must be 0 to 16, got %d" % random)
    return int(random)


def _shape_fn(shape):
    if shape is not None and not callable(shape):
        raise TypeError("shape must be a callable (h, w, c) -> (h, w, c), got %r" % (shape,))
    return shape


class UserOp(Transform):
    """A user-defined op registered by a plugin (``load_plugin``) or by C
    code, by name: ``UserOp("brightness", 1.5)`` writes the stage
    ``brightness 1.5``. Arguments are numbers or words ([A-Za-z0-9_.:,-])."""

    op = None

    def __init__(self, name, *args):
        if not isinstance(name, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError("UserOp: %r is not an op name" % (name,))
        for a in args:
            if not isinstance(a, numbers.Real) and not (
                    isinstance(a, str) and re.fullmatch(r"[A-Za-z0-9_.:,+-]+", a)):
                raise TypeError("UserOp arguments are numbers or words, got %r" % (a,))
        self.name = name
        self.args = tuple(args)
        _validate(self.spec())

    def spec(self):
        return " ".join([self.name] + [a if isinstance(a, str) else _num(a, "argument")
                                       for a in self.args])


class NumbaOp(Transform):
    """A ``@numba.cfunc`` run on each sample's uint8 HWC image in the worker
    threads, without the GIL.

    The function has the signature ``NumbaOp.SIGNATURE``::

        int32(src: uint8*, h, w, c: int64, dst: uint8*, oh, ow, oc: int64,
              args: float64*, random: float64*)

    ``src`` is the image (h x w x c, contiguous), ``dst`` the output to fill
    (oh x ow x oc: the input's shape unless ``shape`` is given); use
    ``numba.carray(src, (h, w, c))`` for arrays. ``args`` are the numbers of
    ``args=`` (written into the spec stage), ``random`` the ``random=K``
    uniform draws of this sample. Return 0, or a negative stoker code:
    -11 (STK_EDATA) marks the sample as bad (skipped with
    ``on_error='skip'``), anything else fails the loader, naming the sample
    and the op.
    """

    op = None
    SIGNATURE = ("int32(CPointer(uint8), int64, int64, int64, CPointer(uint8), int64, int64, "
                 "int64, CPointer(float64), CPointer(float64))")

    def __init__(self, cfunc, args=(), random=0, shape=None):
        random = _count(random)
        shape = _shape_fn(shape)
        address = getattr(cfunc, "address", None)
        proto = getattr(cfunc, "ctypes", None)
        if not isinstance(address, int) or proto is None:
            raise TypeError("NumbaOp takes a @numba.cfunc(stoker.NumbaOp.SIGNATURE) function, "
                            "got %r" % (cfunc,))
        _check_signature(cfunc, proto)
        args = tuple(args)
        for a in args:
            _num(a, "NumbaOp args")
        if len(args) > 16:
            raise ValueError("NumbaOp takes at most 16 args, got %d" % len(args))
        self.cfunc = cfunc
        self.args = args
        self.random = random
        self.shape = shape
        self.name = _register(_NUMBA, "numba", cfunc, ("numba", address, random, shape),
                              address, random, shape)
        _validate(self.spec())

    def spec(self):
        return " ".join([self.name] + [_num(a, "NumbaOp args") for a in self.args])

    def __repr__(self):
        return "NumbaOp(%s, args=%r, random=%d)" % (
            getattr(self.cfunc, "__name__", "cfunc"), self.args, self.random)

    def __eq__(self, other):
        return type(self) is type(other) and self.spec() == other.spec()

    def __hash__(self):
        return hash(("NumbaOp", self.spec()))


def _check_signature(cfunc, proto):
    c = ctypes
    want = [(c.POINTER, c.c_uint8), c.c_int64, c.c_int64, c.c_int64, (c.POINTER, c.c_uint8),
            c.c_int64, c.c_int64, c.c_int64, (c.POINTER, c.c_double), (c.POINTER, c.c_double)]
    got = list(getattr(proto, "argtypes", None) or [])

    def same(g, w):
        if isinstance(w, tuple):
            return hasattr(g, "_type_") and issubclass(g, c._Pointer) and g._type_ is w[1]
        return g is w or (isinstance(g, type) and issubclass(g, c._SimpleCData)
                          and c.sizeof(g) == c.sizeof(w) and g._type_ == w._type_)

    ok = (len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
          and getattr(proto, "restype", None) is not None
          and c.sizeof(proto.restype) == 4 and proto.restype._type_ in "il")
    if not ok:
        sig = getattr(cfunc, "_sig", None)
        raise TypeError("NumbaOp: %s has the signature %s; stoker calls it as %s "
                        "(@numba.cfunc(stoker.NumbaOp.SIGNATURE))"
                        % (getattr(cfunc, "__name__", "the function"),
                           sig if sig is not None else "(unknown)", NumbaOp.SIGNATURE))


class PythonOp(Transform):
    """A Python function run on each sample: ``fn(image, random) -> array``.

    ``image`` is a read-only uint8 numpy array (h, w, c) (a copy: keeping it
    is safe), ``random`` a float64 array of the ``random=K`` uniform draws of
    this sample (empty for K = 0). Return a uint8 array of the output shape
    (the input's, unless ``shape`` maps (h, w, c) to another). An exception
    fails the loader with a message naming the sample and the op and ending
    with the traceback; raise ``stoker.DataError`` to mark just this sample
    as bad (skipped with ``on_error='skip'``).

    The function runs in the loader's worker threads under the GIL: calls
    are serialised (one sample at a time, whatever num_threads says) and
    contend with the training loop for the interpreter. Use it to
    prototype; write a NumbaOp or a C plugin for speed. On a free-threaded
    CPython (3.13t, ``Py_GIL_DISABLED``) the calls run in parallel.
    """

    op = None

    def __init__(self, fn, random=0, shape=None):
        if not callable(fn):
            raise TypeError("PythonOp takes a callable fn(image, random), got %r" % (fn,))
        random = _count(random)
        shape = _shape_fn(shape)
        self.fn = fn
        self.random = random
        self.shape = shape
        self.name = _register(_PYTHON, "python", fn, ("python", id(fn), random, shape), fn,
                              random, shape)
        _keep.append(fn)  # registrations are permanent: the id must stay unique
        _validate(self.spec())

    def spec(self):
        return self.name

    def __repr__(self):
        return "PythonOp(%s, random=%d)" % (getattr(self.fn, "__name__", "fn"), self.random)

    def __eq__(self, other):
        return type(self) is type(other) and self.spec() == other.spec()

    def __hash__(self):
        return hash(("PythonOp", self.spec()))


_keep = []
_np = None


def _run(fn, src, h, w, c, oh, ow, oc, random):
    """Called by the extension under the GIL for each sample of a PythonOp:
    the output as a C-contiguous uint8 array, or a str describing the
    exception (the last lines of its traceback)."""
    global _np
    try:
        if _np is None:
            import numpy
            _np = numpy
        img = _np.frombuffer(src, _np.uint8).reshape(h, w, c)
        out = fn(img, _np.array(random, dtype=_np.float64))
        out = _np.asarray(out)
        if out.dtype != _np.uint8:
            raise TypeError("the function returned an array of %s, expected uint8" % out.dtype)
        if out.shape != (oh, ow, oc) and not (oc == 1 and out.shape == (oh, ow)):
            raise ValueError("the function returned an array of shape %r, expected %r"
                             % (out.shape, (oh, ow, oc)))
        return _np.ascontiguousarray(out)
    except Exception as e:  # reported by the loader, naming the sample and the op
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        text = "".join(tb[-3:]).strip() if len(tb) > 1 else "".join(tb).strip()
        head = "%s: %s" % (type(e).__name__, e)
        return head + "\n" + text if text != head else head
