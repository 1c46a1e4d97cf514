/*
 * _stoker.h — what the files of the CPython extension stoker._stoker share
 * (private: nothing outside python/_stoker*.c includes it). The extension is
 * libstoker's public API (stoker.h, and nothing else) as Python objects; the
 * pure-Python package python/stoker/ builds on it (argument handling,
 * transforms, rank discovery), and everything on the per-batch path is in C.
 *
 * The files, one per type plus the module:
 *
 *   _stoker_module.c   module init (PyInit__stoker), the exception classes
 *                      and the error table, the converters and module-level
 *                      functions (strerror, spec_check, op_table, pack,
 *                      doctor, cli_main, the remote cache, io_stats)
 *   _stoker_view.c     the DLPack ABI, element kinds, and `view`: a typed
 *                      N-d description of memory, exported through the
 *                      buffer protocol and DLPack (Batch, _FieldView, _Array)
 *   _stoker_array.c    _Array: a small array that owns its bytes
 *   _stoker_dataset.c  Dataset
 *   _stoker_source.c   Dataset._from_source: a callback dataset over Python
 *                      objects (stoker.ExternalSource)
 *   _stoker_loader.c   _Loader: creation, epochs, state, stats, profile
 *   _stoker_batch.c    Batch and _FieldView (a field of a batch)
 *   _stoker_iter.c     _Iterator: the per-batch path
 *   _stoker_writer.c   _ShardWriter
 *   _stoker_ops.c      user-defined ops (NumbaOp, PythonOp, load_plugin)
 *
 * Objects and ownership
 * ---------------------
 *   Dataset   owns an stk_dataset. Immutable, so any thread may read it.
 *   _Loader   owns an stk_loader and a strong reference to its Dataset (the
 *             dataset must outlive the loader).
 *   Batch     one delivered batch: owns the lent stk_batch and a strong
 *             reference to its _Loader. Every export of its pixels (buffer
 *             protocol views, DLPack capsules, the torch tensors and NumPy
 *             arrays made from them) holds a reference to the Batch, so the
 *             buffer goes back to the pool (stk_loader_release) only when the
 *             last Python reference dies, and the loader outlives its batches.
 *   _Array    a small array that owns its bytes (labels, indices, one
 *             dataset sample), exported the same two ways.
 *   _Iterator one pass over one epoch (_stoker_loader.c, "Epochs"); its
 *             __next__ is the per-batch path (_stoker_iter.c).
 *
 * Threads: every function here runs with the GIL held unless it says
 * otherwise; blocking library calls release it (Py_BEGIN_ALLOW_THREADS).
 * The C loader allows one consumer at a time: the GIL serialises every call
 * except the wait for a batch, during which the loader's `busy` is set, so a
 * second thread calling into the same loader gets a RuntimeError instead of
 * racing. Batches may die on any thread (stk_loader_release is
 * thread-safe); the DLPack deleter takes the GIL itself, so a consumer
 * (torch) may free a tensor from a thread that does not hold it.
 *
 * fork(): the worker threads do not exist in a child process, and the
 * loader's mutex may have been held by one of them. A pthread_atfork child
 * handler bumps `stk_py_fork_generation`; a _Loader made in another
 * generation refuses every call with ForkError, and its Batch objects and
 * the loader itself are leaked, not released/destroyed, when they die in
 * the child. The parent is unaffected. Datasets have no threads and keep
 * working.
 *
 * Names shared between the files carry the stk_py_ prefix (the module is
 * built with hidden visibility, so none is exported from the .so); what one
 * file uses alone stays static there.
 */
#ifndef STK_PYTHON_STOKER_H
#define STK_PYTHON_STOKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stoker/stoker.h>

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- module state and errors (_stoker_module.c) --------------------------- */

/* Bumped in every child process after fork() (pthread_atfork); objects that
 * own threads remember the generation they were made in. */
extern volatile unsigned long stk_py_fork_generation;

/* Exception classes, by -code (see docs/python.md); set once by the module's
 * init, never released. */
#define STK_PY_N_CODES 18
extern PyObject *stk_py_stoker_error, *stk_py_fork_error;
extern PyObject *stk_py_code_exc[STK_PY_N_CODES];
extern PyObject *stk_py_gc_module; /* the gc module, for gc.collect() */

/* A C message as str: UTF-8, bytes that are not (a file name's) kept as
 * lone surrogates, as os.fsdecode does, never a UnicodeDecodeError. */
PyObject *stk_py_message_str(const char *msg);

/* Raise the exception class mapped to `code` with `msg` (the C detail; the
 * code's description when empty). The exception gets a `code` attribute.
 * Returns NULL. */
PyObject *stk_py_raise_code(int code, const char *msg);

/* The failing call's thread-local message, read at once (the next stoker
 * call on this thread may overwrite it). Returns NULL. */
PyObject *stk_py_raise_last(int code);

/* O& converters with range checks (the 'I'/'K' formats do not check):
 * *(uint64_t *)out, *(uint32_t *)out. 1, or 0 with an exception. */
int stk_py_conv_u64(PyObject *o, void *out);
int stk_py_conv_u32(PyObject *o, void *out);

/* --- element kinds and views (_stoker_view.c) ----------------------------- */

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 }; /* DLDataTypeCode */
enum { DL_CPU = 1, DL_CUDA = 2 }; /* DLDeviceType: kDLCPU, kDLCUDA */

/* Element kinds: struct format, DLPack type, name (stk_py_kinds[K_*]).
 * bfloat16 has no struct format and no numpy dtype: its buffer is uint16
 * ("H", the bit patterns; docs/python.md), its DLPack type kDLBfloat. */
enum { K_U8, K_F16, K_F32, K_I64, K_BF16, K_F64 };
struct stk_py_kind {
    const char *fmt;
    const char *name;
    Py_ssize_t size;
    uint8_t dl_code, dl_bits;
};
extern const struct stk_py_kind stk_py_kinds[];

int stk_py_kind_of_dtype(stk_dtype d);
int stk_py_kind_of_elem(stk_elem_type e);

/* An N-d array over memory someone else owns (a Batch, an _Array, a field
 * of a batch): what the buffer protocol and DLPack export. */
typedef struct view {
    void *data; /* host memory, or a CUdeviceptr when dev_type is DL_CUDA */
    int ndim; /* 1..4 */
    int kind;
    Py_ssize_t shape[4];
    Py_ssize_t strides[4]; /* bytes, C-contiguous */
    int32_t dev_type;      /* DL_CPU (stk_py_view_init), or DL_CUDA for a device batch */
    int32_t dev_id;        /* the CUDA ordinal of a DL_CUDA view */
} view;

void stk_py_view_init(view *v, void *data, int kind, int ndim, const int64_t *shape);
Py_ssize_t stk_py_view_nbytes(const view *v);
PyObject *stk_py_view_shape_tuple(const view *v);
/* bf_getbuffer: a writable, C-contiguous, N-d view that references owner. */
int stk_py_view_getbuffer(PyObject *owner, const view *v, Py_buffer *b, int flags);
/* A "dltensor" (or "dltensor_versioned") capsule over v that keeps owner
 * alive until the consumer's tensor (or the unconsumed capsule) dies. */
PyObject *stk_py_view_capsule(PyObject *owner, const view *v, int versioned);
/* __dlpack__(*, stream, max_version, dl_device, copy) of a view over
 * owner's memory; `batch` the Batch whose buffer it shares, or NULL. */
PyObject *stk_py_view_dlpack(PyObject *owner, const view *v, PyObject *batch, PyObject *args,
                             PyObject *kwargs);
PyObject *stk_py_view_dlpack_device(const view *v);
/* __dlpack_device__ of host memory: (1, 0). */
PyObject *stk_py_dlpack_device(PyObject *self, PyObject *unused);
/* DLPack's stream argument: *stream the CUstream to wait on, *sync 0 for
 * -1 (no synchronisation). 0, or -1 with an exception. */
int stk_py_dlpack_stream(PyObject *obj, uint64_t *stream, int *sync);

/* --- _Array (_stoker_array.c) --------------------------------------------- */

typedef struct {
    PyObject_VAR_HEAD
    view v;
    _Alignas(16) unsigned char data[];
} ArrayObject;

extern PyTypeObject stk_py_array_type;
/* A new uninitialised array of `kind` and `shape`, or NULL with an exception. */
ArrayObject *stk_py_array_new(int kind, int ndim, const int64_t *shape);
/* A 1-d int64 _Array holding a copy of src[0, n) (8-byte values). */
ArrayObject *stk_py_copy_i64(const void *src, uint32_t n);

/* --- Dataset (_stoker_dataset.c, _stoker_source.c) ------------------------ */

typedef struct {
    PyObject_HEAD
    stk_dataset *ds; /* owned */
    stk_dataset_info info;
    size_t sample_bytes;
    PyObject *parts; /* a concatenation's datasets (a tuple it borrows from), or NULL */
} DatasetObject;

extern PyTypeObject stk_py_dataset_type;
/* A Dataset of `type` owning ds (closed on failure), or NULL. */
DatasetObject *stk_py_dataset_wrap(PyTypeObject *type, stk_dataset *ds);
/* Dataset._from_source (the classmethod; _stoker_source.c). */
PyObject *stk_py_dataset_from_source(PyObject *cls, PyObject *args);

/* --- _Loader, Batch, _FieldView, _Iterator -------------------------------- */

enum { OUT_OBJECTS = 0, OUT_CAPSULE = 1, OUT_CALL = 2 };

typedef struct {
    PyObject_HEAD
    stk_loader *l;        /* owned; NULL once destroyed */
    PyObject *dataset;    /* DatasetObject, strong: outlives l */
    PyObject *convert;    /* output converter (OUT_CAPSULE / OUT_CALL), strong, or NULL */
    PyObject *convert_device; /* OUT_CAPSULE's converter for CUDA batches (torch.from_dlpack,
                                 which passes torch's current stream to __dlpack__), strong,
                                 or NULL */
    int mode;             /* OUT_* */
    unsigned long fork_gen; /* stk_py_fork_generation at creation */
    long pid;             /* for messages */
    uint64_t length;      /* batches per full epoch (len() asks the loader: a resumed
                             epoch may be shorter) */
    uint32_t max_batches; /* resolved, for the PoolExhausted message */
    int64_t sample_shape[3];
    int kind;
    int layout;           /* stk_layout */
    Py_ssize_t lent;      /* Batch objects alive */
    int closed;           /* close() called; l destroyed when lent hits 0 */
    int busy;             /* a thread waits in next() with the GIL released */
    uint64_t gen;         /* bumped by iter(), set_epoch, load_state_dict, close */
    int resume_pending;   /* load_state_dict: next iter() continues */
    uint64_t resume_epoch;
    uint64_t gc_collects; /* gc.collect() runs on pool exhaustion */
    int fields;           /* fields= beyond (image, label): yield one item per field */
    uint64_t stash_gen;   /* gen of the iterator holding a taken but undelivered batch
                             (an interrupted next(); see iter_next), 0 if none */
    uint64_t delivered;   /* rows of the items next() returned (stats()["delivered"]) */
    PyObject *skipped;    /* list of (index, path, reason) of the samples that failed to
                             read in the batches taken (on_error skip/replace), strong,
                             or NULL before the first */
} LoaderObject;

typedef struct {
    PyObject_HEAD
    LoaderObject *loader; /* strong */
    stk_batch b;          /* lent until dealloc */
    unsigned long fork_gen;
    view v;
} BatchObject;

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* strong: the Batch whose buffers this views */
    view v;
} FieldViewObject;

typedef struct {
    PyObject_HEAD
    LoaderObject *loader; /* strong */
    uint64_t gen;
    int done;
    int with_indices;
    PyObject *wrap;       /* strong or NULL: wrap(item, epoch, position) -> what next()
                             yields (loader.py: Ragged fields, dicts, BatchOps, transform) */
    PyObject *stash;      /* strong or NULL: the batch an interrupted next() took, for the
                             next call: its Batch (stash_built 0) or the finished item (1) */
    int stash_built;
    uint32_t stash_rows;  /* the kept batch's rows */
} IterObject;

/* _stoker_loader.c */
extern PyTypeObject stk_py_loader_type;
/* Destroy the C loader (joins its workers, the GIL released); leaked in a
 * forked child. No-op once done. */
void stk_py_loader_destroy_c(LoaderObject *self);
/* Alive in this process, open, and no other thread waiting in next(): for
 * every call that moves the loader. 0, or -1 with an exception. */
int stk_py_loader_check(LoaderObject *self);

/* _stoker_batch.c */
extern PyTypeObject stk_py_batch_type, stk_py_fieldview_type;
extern const char *const stk_py_role_name[]; /* by stk_field_role */
/* A lent batch as its view: host memory, or the device's (STK_DEVICE_CUDA). */
void stk_py_batch_view_init(BatchObject *bo, int kind);
/* Make `stream` wait for the device batch that `batch` (a Batch) holds
 * (stk_loader_batch_wait). 0, or -1 with an exception. */
int stk_py_batch_wait_stream(PyObject *batch, uint64_t stream);
/* A _FieldView over field f of batch bo (f->ndim <= 4). */
PyObject *stk_py_fieldview_new(BatchObject *bo, const stk_batch_field *f);

/* _stoker_iter.c */
extern PyTypeObject stk_py_iter_type;

/* --- the other types and the module's parts -------------------------------- */

extern PyTypeObject stk_py_shard_writer_type; /* _stoker_writer.c */

/* User-defined ops: adds _register_op and load_plugin to the module
 * (_stoker_ops.c). 0, or -1 with an exception. */
int stk_py_ops_add(PyObject *module);

/* Whether Python may still be called: initialised and not finalizing. A
 * callback from a library thread checks it before taking the GIL. */
int stk_py_interpreter_alive(void);

#endif
