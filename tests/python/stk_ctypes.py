"""A minimal ctypes binding of libstoker's public C API, for tests only
(the real Python module is a C extension). Mirrors include/stoker/stoker.h."""
import ctypes as C
import os

import numpy as np

from conftest import BUILD

lib = C.CDLL(os.path.join(BUILD, "libstoker.so"))


class Batch(C.Structure):
    _fields_ = [("data", C.c_void_p), ("labels", C.POINTER(C.c_int64)),
                ("indices", C.POINTER(C.c_uint64)), ("size", C.c_uint32), ("ndim", C.c_uint32),
                ("shape", C.c_int64 * 4), ("dtype", C.c_int), ("layout", C.c_int),
                ("sample_bytes", C.c_size_t), ("epoch", C.c_uint64), ("position", C.c_uint64),
                ("skipped", C.c_uint32), ("handle", C.c_uint64), ("reserved_", C.c_uint64 * 4)]


class LoaderOptions(C.Structure):
    _fields_ = [("batch_size", C.c_uint32), ("threads", C.c_uint32), ("prefetch", C.c_uint32),
                ("max_batches", C.c_uint32), ("seed", C.c_uint64), ("no_shuffle", C.c_int),
                ("drop_last", C.c_int), ("rank", C.c_uint32), ("world_size", C.c_uint32),
                ("on_error", C.c_int), ("block_size", C.c_uint64), ("shuffle", C.c_int),
                ("shuffle_window", C.c_uint32), ("sampling", C.c_void_p),
                ("aug_seed", C.c_uint64), ("views", C.c_uint32), ("flags", C.c_uint32),
                ("reserved_", C.c_uint64 * 3)]


lib.stk_errmsg.restype = C.c_char_p
lib.stk_dataset_from_memory.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64, C.c_uint32,
                                        C.c_uint32, C.c_uint32, C.c_int, C.POINTER(C.c_void_p)]
lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_loader_create.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(LoaderOptions),
                                  C.POINTER(C.c_void_p)]
lib.stk_loader_destroy.argtypes = [C.c_void_p]
lib.stk_loader_next.argtypes = [C.c_void_p, C.POINTER(Batch)]
lib.stk_loader_release.argtypes = [C.c_void_p, C.POINTER(Batch)]
lib.stk_loader_set_epoch.argtypes = [C.c_void_p, C.c_uint64]

DTYPES = {0: np.uint8, 1: np.float16, 2: np.float32, 3: np.uint16}  # 3: bfloat16 bits


# --- datasets (the reader tests) -------------------------------------------

class Info(C.Structure):
    """stk_dataset_info, whole: the library writes its reserved words too."""
    _fields_ = [("uri", C.c_char_p), ("format", C.c_char_p), ("count", C.c_uint64),
                ("height", C.c_uint32), ("width", C.c_uint32), ("channels", C.c_uint32),
                ("num_classes", C.c_uint32), ("reserved_", C.c_uint64 * 4)]


lib.stk_dataset_open.argtypes = [C.c_char_p, C.c_void_p, C.POINTER(C.c_void_p)]
lib.stk_dataset_read.argtypes = [C.c_void_p, C.c_uint64, C.c_void_p, C.c_size_t,
                                 C.POINTER(C.c_int64)]
lib.stk_dataset_read.restype = C.c_int64
lib.stk_dataset_read_field.argtypes = [C.c_void_p, C.c_uint64, C.c_char_p,
                                       C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.c_void_p]
lib.stk_dataset_label.argtypes = [C.c_void_p, C.c_uint64, C.POINTER(C.c_int64)]
lib.stk_free.argtypes = [C.c_void_p]
lib.stk_dataset_skipped_count.argtypes = [C.c_void_p]
lib.stk_dataset_skipped_count.restype = C.c_uint64
lib.stk_dataset_skipped.argtypes = [C.c_void_p, C.c_uint64]
lib.stk_dataset_skipped.restype = C.c_char_p
lib.stk_dataset_info_get.argtypes = [C.c_void_p, C.POINTER(Info)]


def open_ds(uri):
    """(code, handle) of stk_dataset_open(uri)."""
    ds = C.c_void_p()
    rc = lib.stk_dataset_open(str(uri).encode(), None, C.byref(ds))
    return rc, ds

class Error(Exception):
    pass


def run_epoch(images_hwc, labels, spec, **opts):
    """Run one epoch over an in-memory N,H,W,C uint8 array; returns
    (outputs stacked, labels, indices) in delivery order."""
    images_hwc = np.ascontiguousarray(images_hwc, dtype=np.uint8)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    n, h, w, c = images_hwc.shape
    ds = C.c_void_p()
    rc = lib.stk_dataset_from_memory(images_hwc.ctypes.data, labels.ctypes.data, n, h, w, c, 1,
                                     C.byref(ds))
    if rc < 0:
        raise Error(lib.stk_errmsg().decode())
    o = LoaderOptions(**opts)
    loader = C.c_void_p()
    rc = lib.stk_loader_create(ds, spec.encode(), C.byref(o), C.byref(loader))
    if rc < 0:
        msg = lib.stk_errmsg().decode()
        lib.stk_dataset_close(ds)
        raise Error(msg)
    outs, labs, idx = [], [], []
    try:
        b = Batch()
        while True:
            rc = lib.stk_loader_next(loader, C.byref(b))
            if rc < 0:
                raise Error(lib.stk_errmsg().decode())
            if rc == 0:
                break
            shape = tuple(b.shape[:4])
            nbytes = b.size * b.sample_bytes
            raw = C.string_at(b.data, nbytes)
            outs.append(np.frombuffer(raw, dtype=DTYPES[b.dtype]).reshape(shape).copy())
            labs.append(np.ctypeslib.as_array(b.labels, (b.size,)).copy())
            idx.append(np.ctypeslib.as_array(b.indices, (b.size,)).copy())
            lib.stk_loader_release(loader, C.byref(b))
    finally:
        lib.stk_loader_destroy(loader)
        lib.stk_dataset_close(ds)
    return np.concatenate(outs), np.concatenate(labs), np.concatenate(idx)
