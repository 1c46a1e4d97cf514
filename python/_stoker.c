/*
 * _stoker.c — the CPython extension: libstoker's public API (stoker.h, and
 * nothing else) as Python objects. The pure-Python package python/stoker/
 * builds on it (argument handling, transforms, rank discovery); everything
 * on the per-batch path is here, in C.
 *
 * Objects
 * -------
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
 *   _Iterator one pass over one epoch (see "Epochs" below); its __next__ is
 *             the per-batch path.
 *
 * The per-batch path (_Iterator.__next__): wait for the next batch with the
 * GIL released, in slices of 100 ms (stk_loader_next_timeout), re-taking the
 * GIL between slices to run PyErr_CheckSignals() so Ctrl-C raises
 * KeyboardInterrupt promptly and leaves the loader unchanged. Wrap the batch
 * in a Batch, copy its labels into an _Array (labels are 8 bytes a sample,
 * and a copy means keeping labels never pins a whole batch buffer), and
 * convert both with the converter the Python layer chose: torch's
 * _from_dlpack on a DLPack capsule, numpy.asarray on the object (buffer
 * protocol), or nothing (output="dlpack": the objects themselves); then the
 * iterator's wrap, if the Python layer gave one (fields, BatchOps, the batch
 * transform). A batch taken from the C loader is never dropped by an
 * exception on the way out: it is kept for the next call (iter_next).
 *
 * Pool exhaustion: when every buffer is held by Python objects the C loader
 * answers STK_EEXHAUSTED. The iterator runs the cyclic GC once (a batch may
 * only be kept alive by a reference cycle) and retries, then raises
 * PoolExhausted telling the user how to fix it.
 *
 * Epochs: each iter() starts the loader's current epoch at position 0,
 * except right after load_state_dict (it continues from the restored
 * position). Finishing a pass moves the loader to the next epoch (as the C
 * loader does); abandoning a pass (break, exception, Ctrl-C) leaves it on the
 * same epoch, which the next iter() restarts from position 0. set_epoch(e)
 * moves it explicitly. A new iter(), set_epoch or load_state_dict
 * invalidates the iterators made before it.
 *
 * Threads: the C loader allows one consumer at a time. The GIL serialises
 * every call here except the wait, during which `busy` is set: a second
 * thread calling into the same loader then gets a RuntimeError instead of
 * racing. Batches may die on any thread (stk_loader_release is thread-safe);
 * the DLPack deleter takes the GIL itself, so a consumer (torch) may free a
 * tensor from a thread that does not hold it.
 *
 * The command-line tool: with STK_HAVE_CLI (setup.py, and CMake when it
 * builds the CLI) the sources of cli/ are compiled into this module without
 * their main(), and cli_main(argv) runs the tool (stoker/__main__.py: the
 * `stoker` console script and `python -m stoker`).
 *
 * fork(): the worker threads do not exist in a child process, and the
 * loader's mutex may have been held by one of them. A pthread_atfork child
 * handler bumps `fork_generation`; a _Loader made in another generation
 * refuses every call with ForkError, and its Batch objects and the loader
 * itself are leaked, not released/destroyed, when they die in the child.
 * The parent is unaffected. Datasets have no threads and keep working.
 */
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

PyMODINIT_FUNC PyInit__stoker(void);
int stk_py_ops_add(PyObject *module, PyObject *(*raise)(int code, const char *msg));

/* ------------------------------------------------------------------------ */
/* DLPack ABI (v0.8 and the v1.0 versioned struct), declared here so the     */
/* build does not need dlpack.h. Layouts are fixed by the DLPack standard.   */
/* ------------------------------------------------------------------------ */

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 };
enum { DL_CPU = 1, DL_CUDA = 2 }; /* DLDeviceType: kDLCPU, kDLCUDA */

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ------------------------------------------------------------------------ */
/* Module state                                                              */
/* ------------------------------------------------------------------------ */

/* Bumped in every child process after fork() (pthread_atfork); objects that
 * own threads remember the generation they were made in. */
static volatile unsigned long fork_generation;

static void on_fork_child(void) { fork_generation++; }

/* Exception classes, by -code (see docs/python.md). */
#define N_CODES 18
static PyObject *StokerError, *ForkError;
static PyObject *gc_module; /* the gc module, for gc.collect() */
static PyObject *code_exc[N_CODES];

/* Element kinds: struct format, DLPack type, name. */
/* bfloat16 has no struct format and no numpy dtype: its buffer is uint16
 * ("H", the bit patterns; docs/python.md), its DLPack type kDLBfloat. */
enum { K_U8, K_F16, K_F32, K_I64, K_BF16, K_F64 };
static const struct kind {
    const char *fmt;
    const char *name;
    Py_ssize_t size;
    uint8_t dl_code, dl_bits;
} kinds[] = {
    [K_U8] = {"B", "uint8", 1, DL_UINT, 8},
    [K_F16] = {"e", "float16", 2, DL_FLOAT, 16},
    [K_F32] = {"f", "float32", 4, DL_FLOAT, 32},
    [K_I64] = {"q", "int64", 8, DL_INT, 64},
    [K_BF16] = {"H", "bfloat16", 2, DL_BFLOAT, 16},
    [K_F64] = {"d", "float64", 8, DL_FLOAT, 64},
};

static int kind_of_dtype(stk_dtype d)
{
    return d == STK_U8 ? K_U8 : d == STK_F16 ? K_F16 : d == STK_BF16 ? K_BF16 : K_F32;
}

/* A C message as str: UTF-8, bytes that are not (a file name's) kept as
 * lone surrogates, as os.fsdecode does, never a UnicodeDecodeError. */
static PyObject *message_str(const char *msg)
{
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "surrogateescape");
}

/* Raise the exception class mapped to `code` with `msg` (the C detail; the
 * code's description when empty). The exception gets a `code` attribute. */
static PyObject *raise_code(int code, const char *msg)
{
    PyObject *type = (code < 0 && -code < N_CODES && code_exc[-code]) ? code_exc[-code] : StokerError;
    if (!msg || !*msg)
        msg = stk_strerror(code);
    PyObject *m = message_str(msg);
    if (!m)
        return NULL;
    PyObject *exc = PyObject_CallFunctionObjArgs(type, m, NULL);
    Py_DECREF(m);
    if (!exc)
        return NULL;
    PyObject *c = PyLong_FromLong(code);
    if (!c || PyObject_SetAttrString(exc, "code", c) < 0) {
        Py_XDECREF(c);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(c);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* The failing call's thread-local message, read at once (the next stoker
 * call on this thread may overwrite it). */
static PyObject *raise_last(int code) { return raise_code(code, stk_errmsg()); }

/* O& converters with range checks (the 'I'/'K' formats do not check). */
static int conv_u64(PyObject *o, void *out)
{
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "expected an int, got %s", Py_TYPE(o)->tp_name);
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%R is not an integer in [0, 2**64)", o);
        return 0;
    }
    *(uint64_t *)out = (uint64_t)v;
    return 1;
}

static int conv_u32(PyObject *o, void *out)
{
    uint64_t v;
    if (!conv_u64(o, &v))
        return 0;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%R is not an integer in [0, 2**32)", o);
        return 0;
    }
    *(uint32_t *)out = (uint32_t)v;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Array description shared by Batch and _Array; buffer and DLPack export    */
/* ------------------------------------------------------------------------ */

typedef struct view {
    void *data; /* host memory, or a CUdeviceptr when dev_type is DL_CUDA */
    int ndim; /* 1..4 */
    int kind;
    Py_ssize_t shape[4];
    Py_ssize_t strides[4]; /* bytes, C-contiguous */
    int32_t dev_type;      /* DL_CPU (view_init), or DL_CUDA for a device batch */
    int32_t dev_id;        /* the CUDA ordinal of a DL_CUDA view */
} view;

static void view_init(view *v, void *data, int kind, int ndim, const int64_t *shape)
{
    v->data = data;
    v->kind = kind;
    v->ndim = ndim;
    v->dev_type = DL_CPU;
    v->dev_id = 0;
    Py_ssize_t stride = kinds[kind].size;
    for (int i = ndim - 1; i >= 0; i--) {
        v->shape[i] = (Py_ssize_t)shape[i];
        v->strides[i] = stride;
        stride *= v->shape[i];
    }
}

static Py_ssize_t view_nbytes(const view *v)
{
    Py_ssize_t n = kinds[v->kind].size;
    for (int i = 0; i < v->ndim; i++)
        n *= v->shape[i];
    return n;
}

static PyObject *view_shape_tuple(const view *v)
{
    PyObject *t = PyTuple_New(v->ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < v->ndim; i++) {
        PyObject *d = PyLong_FromSsize_t(v->shape[i]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, d);
    }
    return t;
}

/* bf_getbuffer: a writable, C-contiguous, N-d view that references owner.
 * The memory belongs to whoever holds the owner, so writing is allowed. */
static int view_getbuffer(PyObject *owner, const view *v, Py_buffer *b, int flags)
{
    if (v->dev_type != DL_CPU) {
        b->obj = NULL;
        PyErr_Format(PyExc_BufferError,
                     "this batch is in CUDA memory (cuda:%d): the buffer protocol (numpy, "
                     "memoryview) reads host memory only; use DLPack (torch.from_dlpack)",
                     (int)v->dev_id);
        return -1;
    }
    int multi = 0; /* dimensions longer than 1 */
    for (int i = 0; i < v->ndim; i++)
        multi += v->shape[i] > 1;
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && multi > 1) {
        b->obj = NULL;
        PyErr_SetString(PyExc_BufferError, "stoker arrays are C-contiguous, not Fortran");
        return -1;
    }
    b->buf = v->data;
    b->obj = Py_NewRef(owner);
    b->len = view_nbytes(v);
    b->readonly = 0;
    b->itemsize = kinds[v->kind].size;
    b->format = (flags & PyBUF_FORMAT) ? (char *)kinds[v->kind].fmt : NULL;
    if (flags & PyBUF_ND) {
        b->ndim = v->ndim;
        b->shape = (Py_ssize_t *)v->shape;
        b->strides = ((flags & PyBUF_STRIDES) == PyBUF_STRIDES) ? (Py_ssize_t *)v->strides : NULL;
    } else {
        b->ndim = 1;
        b->shape = NULL;
        b->strides = NULL;
    }
    b->suboffsets = NULL;
    b->internal = NULL;
    return 0;
}

/* One allocation per export: the managed tensor and its shape/strides. */
typedef struct {
    DLManagedTensor mt;
    int64_t shape[4], strides[4];
} dl_block;

typedef struct {
    DLManagedTensorVersioned mt;
    int64_t shape[4], strides[4];
} dl_block_v;

static int interpreter_alive(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

/* Drop the owner reference a capsule's tensor held. May run on any thread,
 * with or without the GIL (consumers free tensors where they like). During
 * interpreter shutdown the reference is leaked: taking the GIL then could
 * hang, and the process is exiting. */
static void drop_owner(PyObject *owner)
{
    if (!owner || !interpreter_alive())
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(owner);
    PyGILState_Release(g);
}

static void dl_deleter(DLManagedTensor *self)
{
    drop_owner((PyObject *)self->manager_ctx);
    PyMem_RawFree(self); /* the raw allocator needs no GIL */
}

static void dl_deleter_v(DLManagedTensorVersioned *self)
{
    drop_owner((PyObject *)self->manager_ctx);
    PyMem_RawFree(self);
}

/* Capsule destructors: call the tensor's deleter only if no consumer took
 * it (a consumer renames the capsule "used_dltensor[_versioned]"). */
static void capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
        if (mt && mt->deleter)
            mt->deleter(mt);
    }
}

static void capsule_destructor_v(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *mt = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (mt && mt->deleter)
            mt->deleter(mt);
    }
}

static void dl_fill(DLTensor *t, const view *v, int64_t *shape, int64_t *strides)
{
    Py_ssize_t size = kinds[v->kind].size;
    for (int i = 0; i < v->ndim; i++) {
        shape[i] = v->shape[i];
        strides[i] = v->strides[i] / size;
    }
    t->data = v->data;
    t->device.device_type = v->dev_type;
    t->device.device_id = v->dev_id;
    t->ndim = v->ndim;
    t->dtype.code = kinds[v->kind].dl_code;
    t->dtype.bits = kinds[v->kind].dl_bits;
    t->dtype.lanes = 1;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
}

/* A "dltensor" (or "dltensor_versioned") capsule over v that keeps owner
 * alive until the consumer's tensor (or the unconsumed capsule) dies. */
static PyObject *view_capsule(PyObject *owner, const view *v, int versioned)
{
    PyObject *cap;
    if (versioned) {
        dl_block_v *blk = PyMem_RawMalloc(sizeof *blk);
        if (!blk)
            return PyErr_NoMemory();
        memset(blk, 0, sizeof *blk);
        dl_fill(&blk->mt.dl_tensor, v, blk->shape, blk->strides);
        blk->mt.version.major = 1;
        blk->mt.version.minor = 0;
        blk->mt.flags = 0; /* writable, not a copy */
        blk->mt.manager_ctx = Py_NewRef(owner);
        blk->mt.deleter = dl_deleter_v;
        cap = PyCapsule_New(&blk->mt, "dltensor_versioned", capsule_destructor_v);
        if (!cap) {
            Py_DECREF(owner);
            PyMem_RawFree(blk);
        }
    } else {
        dl_block *blk = PyMem_RawMalloc(sizeof *blk);
        if (!blk)
            return PyErr_NoMemory();
        memset(blk, 0, sizeof *blk);
        dl_fill(&blk->mt.dl_tensor, v, blk->shape, blk->strides);
        blk->mt.manager_ctx = Py_NewRef(owner);
        blk->mt.deleter = dl_deleter;
        cap = PyCapsule_New(&blk->mt, "dltensor", capsule_destructor);
        if (!cap) {
            Py_DECREF(owner);
            PyMem_RawFree(blk);
        }
    }
    return cap;
}

/* DLPack's stream protocol (the array API standard's __dlpack__): the
 * consumer passes the stream it will read the tensor on, and a producer
 * whose data is being written asynchronously makes that stream wait first.
 * For CUDA the values are: None, the legacy default stream (the default);
 * 1, the legacy default stream (CU_STREAM_LEGACY); 2, the per-thread
 * default stream (CU_STREAM_PER_THREAD); > 2, a CUstream; -1, "do not
 * synchronise" (the consumer orders the work itself). 0 is ambiguous and
 * refused, as are other negative values. Sets *stream to the CUstream to
 * pass to stk_loader_batch_wait (None: 0, the C API's legacy default
 * stream) and *sync to 0 for -1. Returns 0, or -1 with an exception. */
static int dlpack_stream(PyObject *obj, uint64_t *stream, int *sync)
{
    *stream = 0;
    *sync = 1;
    if (obj == Py_None)
        return 0;
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be None or an int, not %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow > 0) { /* a CUstream above 2**63 (a pointer) */
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "__dlpack__: stream %R is not a CUDA stream", obj);
            return -1;
        }
        *stream = (uint64_t)u;
        return 0;
    }
    if (v == -1 && !overflow && PyErr_Occurred())
        return -1;
    if (v == -1 && !overflow) {
        *sync = 0;
        return 0;
    }
    if (v == 0 || v < -1 || overflow) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__: stream %R is not valid for a CUDA array (None or 1: the legacy "
                     "default stream, 2: the per-thread default stream, a CUstream, or -1: no "
                     "synchronisation; 0 is ambiguous and refused by the DLPack standard)",
                     obj);
        return -1;
    }
    *stream = (uint64_t)v;
    return 0;
}

/* Make `stream` wait for the device batch that `batch` (a Batch) holds
 * (stk_loader_batch_wait); defined with Batch below. */
static int batch_wait_stream(PyObject *batch, uint64_t stream);

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
 * of a view over `owner`'s memory. `batch` is the Batch whose buffer the
 * view shares (NULL for an _Array): a CUDA view makes the consumer's stream
 * wait for it before handing out the capsule. A host view ignores stream
 * (host memory is complete when delivered). */
static PyObject *view_dlpack(PyObject *owner, const view *v, PyObject *batch, PyObject *args,
                             PyObject *kwargs)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &stream,
                                     &max_version, &dl_device, &copy))
        return NULL;
    if (copy != Py_None && PyObject_IsTrue(copy)) {
        PyErr_SetString(PyExc_BufferError,
                        "stoker arrays are exported without copying (copy=True is not supported)");
        return NULL;
    }
    if (dl_device != Py_None) {
        int type = -1, id = -1;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id))
            return NULL;
        if (v->dev_type == DL_CPU && type != DL_CPU) {
            PyErr_SetString(PyExc_BufferError, "stoker arrays live in CPU memory (device (1, 0))");
            return NULL;
        }
        if (v->dev_type != DL_CPU && (type != v->dev_type || id != v->dev_id)) {
            PyErr_Format(PyExc_BufferError,
                         "this batch lives on cuda:%d (device (%d, %d)) and is exported without "
                         "copying",
                         (int)v->dev_id, (int)v->dev_type, (int)v->dev_id);
            return NULL;
        }
    }
    int versioned = 0;
    if (max_version != Py_None) {
        unsigned major = 0, minor = 0;
        if (!PyArg_ParseTuple(max_version, "II", &major, &minor))
            return NULL;
        versioned = major >= 1;
    }
    if (v->dev_type != DL_CPU) {
        uint64_t s;
        int sync;
        if (dlpack_stream(stream, &s, &sync) < 0)
            return NULL;
        if (sync && batch && batch_wait_stream(batch, s) < 0)
            return NULL;
    }
    return view_capsule(owner, v, versioned);
}

/* __dlpack_device__ of a view: (1, 0) for host memory, (2, N) on cuda:N. */
static PyObject *view_dlpack_device(const view *v)
{
    return Py_BuildValue("(ii)", (int)v->dev_type, (int)v->dev_id);
}

static PyObject *dlpack_device(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", DL_CPU, 0);
}

/* _dlpack_stream(stream) -> the CUstream __dlpack__ makes wait, or None
 * for -1 (no synchronisation): the argument handling alone, for tests. */
static PyObject *mod_dlpack_stream(PyObject *m, PyObject *arg)
{
    uint64_t s;
    int sync;
    if (dlpack_stream(arg, &s, &sync) < 0)
        return NULL;
    if (!sync)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(s);
}

/* ------------------------------------------------------------------------ */
/* _Array: a small array owning its bytes                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_VAR_HEAD
    view v;
    _Alignas(16) unsigned char data[];
} ArrayObject;

static PyTypeObject ArrayType;

static ArrayObject *array_new(int kind, int ndim, const int64_t *shape)
{
    Py_ssize_t n = kinds[kind].size;
    for (int i = 0; i < ndim; i++)
        n *= (Py_ssize_t)shape[i];
    ArrayObject *a = PyObject_NewVar(ArrayObject, &ArrayType, n);
    if (!a)
        return NULL;
    view_init(&a->v, a->data, kind, ndim, shape);
    return a;
}

static void array_dealloc(ArrayObject *self) { PyObject_Free(self); }

static int array_getbuffer(ArrayObject *self, Py_buffer *b, int flags)
{
    return view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kwargs)
{
    return view_dlpack((PyObject *)self, &self->v, NULL, args, kwargs);
}

static PyObject *array_shape(ArrayObject *self, void *c) { return view_shape_tuple(&self->v); }
static PyObject *array_dtype(ArrayObject *self, void *c) { return PyUnicode_FromString(kinds[self->v.kind].name); }
static PyObject *array_data_ptr(ArrayObject *self, PyObject *u) { return PyLong_FromVoidPtr(self->v.data); }
static Py_ssize_t array_len(ArrayObject *self) { return self->v.shape[0]; }

static PyObject *array_tolist(ArrayObject *self, PyObject *u)
{
    if (self->v.ndim != 1 || self->v.kind != K_I64) {
        PyErr_SetString(PyExc_TypeError, "tolist() is only for 1-d int64 arrays");
        return NULL;
    }
    const int64_t *p = (const int64_t *)self->v.data;
    PyObject *l = PyList_New(self->v.shape[0]);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < self->v.shape[0]; i++) {
        PyObject *x = PyLong_FromLongLong(p[i]);
        if (!x) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *array_repr(ArrayObject *self)
{
    PyObject *shape = view_shape_tuple(&self->v);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<stoker._Array shape=%R dtype=%s>", shape,
                                       kinds[self->v.kind].name);
    Py_DECREF(shape);
    return r;
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule sharing this array's memory (\"dltensor\", or \"dltensor_versioned\" "
     "when max_version >= (1, 0))."},
    {"__dlpack_device__", dlpack_device, METH_NOARGS, "(1, 0): CPU memory."},
    {"data_ptr", (PyCFunction)array_data_ptr, METH_NOARGS, "Address of the first element."},
    {"tolist", (PyCFunction)array_tolist, METH_NOARGS, "The values of a 1-d int64 array as a list."},
    {0},
};

static PyGetSetDef array_getset[] = {
    {"shape", (getter)array_shape, NULL, "Shape, a tuple.", NULL},
    {"dtype", (getter)array_dtype, NULL, "Element type name ('uint8', 'int64'...).", NULL},
    {0},
};

static PyBufferProcs array_as_buffer = {(getbufferproc)array_getbuffer, NULL};
static PySequenceMethods array_as_sequence = {.sq_length = (lenfunc)array_len};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._Array",
    .tp_doc = "A small array that owns its memory (labels, indices, a dataset sample).\n\n"
              "Exported without copying through the buffer protocol (numpy.asarray, "
              "memoryview) and DLPack (__dlpack__, torch.from_dlpack, numpy.from_dlpack).",
    .tp_basicsize = offsetof(ArrayObject, data),
    .tp_itemsize = 1,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_as_buffer = &array_as_buffer,
    .tp_as_sequence = &array_as_sequence,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
};

/* ------------------------------------------------------------------------ */
/* Dataset                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    stk_dataset *ds; /* owned */
    stk_dataset_info info;
    size_t sample_bytes;
    PyObject *parts; /* a concatenation's datasets (a tuple it borrows from), or NULL */
} DatasetObject;

static PyTypeObject DatasetType;

static DatasetObject *dataset_wrap(PyTypeObject *type, stk_dataset *ds)
{
    DatasetObject *self = (DatasetObject *)type->tp_alloc(type, 0);
    if (!self) {
        stk_dataset_close(ds);
        return NULL;
    }
    self->ds = ds;
    stk_dataset_info_get(ds, &self->info);
    self->sample_bytes = (size_t)self->info.height * self->info.width * self->info.channels;
    return self;
}

static PyObject *dataset_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"uri", "max_bytes", "max_samples", "max_pixels", NULL};
    const char *uri;
    stk_dataset_options o = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|$O&O&O&:Dataset", kwlist, &uri, conv_u64,
                                     &o.max_bytes, conv_u64, &o.max_samples, conv_u64,
                                     &o.max_pixels))
        return NULL;
    stk_dataset *ds = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_open(uri, &o, &ds);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    return (PyObject *)dataset_wrap(type, ds);
}

/* _from_buffers(pixels, labels, count, height, width, channels): an
 * in-memory dataset copied from C-contiguous buffers (uint8 HWC pixels,
 * int64 labels or None). */
static PyObject *dataset_from_buffers(PyObject *cls, PyObject *args)
{
    PyObject *pix_obj, *lab_obj;
    uint64_t count;
    uint32_t h, w, c;
    if (!PyArg_ParseTuple(args, "OOO&O&O&O&:_from_buffers", &pix_obj, &lab_obj, conv_u64, &count,
                          conv_u32, &h, conv_u32, &w, conv_u32, &c))
        return NULL;
    Py_buffer pix = {0}, lab = {0};
    PyObject *res = NULL;
    if (PyObject_GetBuffer(pix_obj, &pix, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (lab_obj != Py_None && PyObject_GetBuffer(lab_obj, &lab, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    if (count == 0 || h == 0 || w == 0 || c == 0 ||
        (uint64_t)pix.len / count / h / w / c != 1 || (uint64_t)pix.len != count * h * w * c) {
        PyErr_Format(PyExc_ValueError,
                     "pixel buffer of %zd bytes does not hold %llu images of %ux%ux%u", pix.len,
                     (unsigned long long)count, h, w, c);
        goto done;
    }
    if (lab.obj && (uint64_t)lab.len != count * 8) {
        PyErr_Format(PyExc_ValueError, "label buffer of %zd bytes does not hold %llu int64 labels",
                     lab.len, (unsigned long long)count);
        goto done;
    }
    stk_dataset *ds = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_from_memory(pix.buf, lab.obj ? lab.buf : NULL, count, h, w, c, 1, &ds);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        raise_last(rc);
    else
        res = (PyObject *)dataset_wrap((PyTypeObject *)cls, ds);
done:
    PyBuffer_Release(&pix);
    if (lab.obj)
        PyBuffer_Release(&lab);
    return res;
}

/* _concat(parts): the datasets of the tuple `parts` as one
 * (stk_dataset_concat); the result keeps the tuple, whose datasets it
 * borrows. */
static PyObject *dataset_concat(PyObject *cls, PyObject *args)
{
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "O!:_concat", &PyTuple_Type, &parts))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    if (n < 1 || n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "concatenate at least one dataset");
        return NULL;
    }
    stk_dataset **ds = PyMem_Malloc((size_t)n * sizeof *ds);
    if (!ds)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyTuple_GET_ITEM(parts, i);
        if (!PyObject_TypeCheck(p, &DatasetType)) {
            PyMem_Free(ds);
            PyErr_Format(PyExc_TypeError, "dataset %zd is a %s, not a stoker Dataset", i,
                         Py_TYPE(p)->tp_name);
            return NULL;
        }
        ds[i] = ((DatasetObject *)p)->ds;
    }
    stk_dataset *out = NULL;
    int rc = stk_dataset_concat(ds, (uint32_t)n, &out);
    PyMem_Free(ds);
    if (rc < 0)
        return raise_last(rc);
    DatasetObject *self = dataset_wrap((PyTypeObject *)cls, out);
    if (self)
        self->parts = Py_NewRef(parts);
    return (PyObject *)self;
}

static void dataset_dealloc(DatasetObject *self)
{
    stk_dataset_close(self->ds); /* before the parts it borrows */
    Py_XDECREF(self->parts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t dataset_len(DatasetObject *self) { return (Py_ssize_t)self->info.count; }

/* read(index) -> (_Array uint8 H,W,C, label). Datasets of one fixed shape
 * read straight into the array; others (encoded images of any size) are
 * decoded into a buffer of their own size first (stk_dataset_read_alloc). */
static PyObject *dataset_read(DatasetObject *self, PyObject *arg)
{
    uint64_t index;
    if (!conv_u64(arg, &index))
        return NULL;
    if (index >= self->info.count) {
        PyErr_Format(PyExc_IndexError, "dataset index %llu out of range (%llu samples)",
                     (unsigned long long)index, (unsigned long long)self->info.count);
        return NULL;
    }
    int64_t label = 0, rc;
    ArrayObject *a;
    if (self->sample_bytes == 0) {
        uint8_t *px = NULL;
        uint32_t dims[3] = {0, 0, 0};
        Py_BEGIN_ALLOW_THREADS
        rc = stk_dataset_read_alloc(self->ds, index, &px, dims, &label);
        Py_END_ALLOW_THREADS
        if (rc < 0)
            return raise_last((int)rc);
        int64_t shape[3] = {dims[0], dims[1], dims[2]};
        a = array_new(K_U8, 3, shape);
        if (a)
            memcpy(a->data, px, (size_t)rc);
        stk_free(px);
        if (!a)
            return NULL;
    } else {
        int64_t shape[3] = {self->info.height, self->info.width, self->info.channels};
        a = array_new(K_U8, 3, shape);
        if (!a)
            return NULL;
        Py_BEGIN_ALLOW_THREADS
        rc = stk_dataset_read(self->ds, index, a->data, self->sample_bytes, &label);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_DECREF(a);
            return raise_last((int)rc);
        }
    }
    return Py_BuildValue("(NL)", (PyObject *)a, (long long)label);
}

static PyObject *dataset_get_uri(DatasetObject *self, void *c) { return PyUnicode_FromString(self->info.uri ? self->info.uri : ""); }
static PyObject *dataset_get_format(DatasetObject *self, void *c) { return PyUnicode_FromString(self->info.format ? self->info.format : ""); }
/* (H, W, C), or None when samples differ in size (encoded images). */
static PyObject *dataset_get_shape(DatasetObject *self, void *c)
{
    if (self->sample_bytes == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(III)", self->info.height, self->info.width, self->info.channels);
}
static PyObject *dataset_get_num_classes(DatasetObject *self, void *c) { return PyLong_FromUnsignedLong(self->info.num_classes); }

/* Class names (label -> name) decoded as os.fsdecode does, so that a
 * folder name that is not UTF-8 comes back as os.listdir gives it; None
 * when the dataset has no label map. */
/* A list of n items, item(self, i) each (a new reference, NULL on error). */
static PyObject *dataset_list(DatasetObject *self, uint64_t n,
                              PyObject *(*item)(DatasetObject *, uint64_t))
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        PyObject *u = item(self, i);
        if (!u) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, u);
    }
    return list;
}

static PyObject *class_name_item(DatasetObject *self, uint64_t i)
{
    const char *name = stk_dataset_class_name(self->ds, (uint32_t)i);
    return PyUnicode_DecodeFSDefault(name ? name : "");
}

static PyObject *dataset_get_classes(DatasetObject *self, void *c)
{
    if (self->info.num_classes == 0 || !stk_dataset_class_name(self->ds, 0))
        Py_RETURN_NONE;
    return dataset_list(self, self->info.num_classes, class_name_item);
}

static PyObject *skipped_item(DatasetObject *self, uint64_t i)
{
    return message_str(stk_dataset_skipped(self->ds, i));
}

/* The messages of what the open left out (stk_dataset_skipped). */
static PyObject *dataset_get_skipped(DatasetObject *self, void *c)
{
    return dataset_list(self, stk_dataset_skipped_count(self->ds), skipped_item);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* source_root: the directory `stoker pack` ran in (metadata source_root,
 * docs/format.md), which path(i) joins relative source names to; decoded as
 * os.fsdecode does. The value is escaped as one line of the label map, and
 * this module sees only stoker.h, so it is unescaped here by that spec
 * ("The label map": \\, \n and \xHH with HH not 00; any other backslash
 * kept). None when the dataset has none, or has one that
 * stk_dataset_sample_path does not use either (more than one line, or not
 * an absolute directory): the property names the root path(i) resolves
 * against, never another. */
static PyObject *dataset_get_source_root(DatasetObject *self, void *c)
{
    const char *v = stk_dataset_metadata(self->ds, "source_root");
    if (!v || v[0] != '/' || strchr(v, '\n'))
        Py_RETURN_NONE;
    size_t n = strlen(v), o = 0;
    char *out = PyMem_Malloc(n + 1); /* unescaping never grows */
    if (!out)
        return PyErr_NoMemory();
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\' && (v[i + 1] == '\\' || v[i + 1] == 'n')) {
            out[o++] = v[++i] == 'n' ? '\n' : '\\';
            continue;
        }
        if (v[i] == '\\' && v[i + 1] == 'x' && i + 3 < n) {
            int h = hex_digit(v[i + 2]), l = hex_digit(v[i + 3]);
            if (h >= 0 && l >= 0 && (h | l)) {
                out[o++] = (char)(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out[o++] = v[i];
    }
    PyObject *u = PyUnicode_DecodeFSDefaultAndSize(out, (Py_ssize_t)o);
    PyMem_Free(out);
    return u;
}

/* path(index): the sample's source name (stk_dataset_sample_path), decoded
 * as os.fsdecode does (a file name that is not UTF-8 comes back as
 * os.listdir gives it), or None when the format does not name samples. */
static PyObject *dataset_path(DatasetObject *self, PyObject *arg)
{
    uint64_t index;
    if (!conv_u64(arg, &index))
        return NULL;
    if (index >= self->info.count) {
        PyErr_Format(PyExc_IndexError, "dataset index %llu out of range (%llu samples)",
                     (unsigned long long)index, (unsigned long long)self->info.count);
        return NULL;
    }
    char *path = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_sample_path(self->ds, index, &path);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    if (!path)
        Py_RETURN_NONE;
    PyObject *u = PyUnicode_DecodeFSDefault(path);
    stk_free(path);
    return u;
}

/* ------------------------------------------------------------------------ */
/* ExternalSource: a callback dataset over a Python object                   */
/* ------------------------------------------------------------------------ */

/*
 * Dataset._from_source(...) makes a stk_dataset_from_callbacks dataset whose
 * callbacks run Python: stoker.ExternalSource (python/stoker/external.py)
 * builds on it. The library calls them on its worker threads, so each one
 * takes the GIL (PyGILState_Ensure) for the Python part only:
 *
 *   read        item = source[index] (an indexable) or get(index) (the
 *               in-order feed of an iterable, external.py); split it into
 *               image, label and extra fields; export the image's memory
 *               (bytes, a NumPy array, a CPU torch tensor read as CHW, a
 *               PIL image through numpy.asarray) as a Py_buffer the library
 *               copies from once the GIL is released again.
 *   release     the library has copied: the buffer goes on `released`
 *               (a mutex, no GIL), released for real by the next callback
 *               that holds the GIL, or at close. One GIL round trip per
 *               sample instead of two.
 *   read_field  extra field k: the value from the item, through the
 *               Python converter (a contiguous array or bytes). The item
 *               comes from this thread's slot when the same thread read the
 *               same index last (the loader reads a sample's image and then
 *               its fields on one worker): __getitem__ runs once per sample.
 *   close       with the Dataset (dealloc holds the GIL): everything freed.
 *
 * A Python exception becomes the read's error, "TYPE: MESSAGE (FILE:LINE in
 * FUNCTION)" under the library's "NAME: sample INDEX" prefix: STK_EDATA
 * (a loader's on_error='skip' skips the sample), STK_ENOMEM for a
 * MemoryError, or the code of a stoker error raised on purpose (the feed's
 * FormatError for an iterable shorter than its length stops the loader).
 * While the interpreter shuts down nothing touches Python: STK_ESTOPPED.
 */
typedef struct held {
    Py_buffer view; /* a buffer the library reads until it calls release */
    struct held *next;
} held;

typedef struct pysrc {
    PyObject *seq;         /* the indexable, strong; or NULL */
    PyObject *get;         /* the feed's get(index) for an iterable, strong; or NULL */
    PyObject *names;       /* tuple of the extra fields' names, strong */
    PyObject *convert;     /* convert(k, value) -> a buffer object, strong (or None) */
    PyObject *slots;       /* {thread ident: (index, item)} when nextra, strong (GIL) */
    PyObject *numpy;       /* the numpy module once needed, strong (GIL) */
    uint32_t nextra;
    pthread_mutex_t mu;    /* guards `released` */
    held *released;        /* buffers the library is done with */
} pysrc;

/* Worker threads and the GIL. PyGILState_Ensure on a thread Python does not
 * know makes a thread state, and the matching PyGILState_Release deletes it
 * again: per sample that costs more than a small __getitem__ (a new frame
 * stack each time; measured 15 us against 2 us per sample). So a library
 * worker thread gets one thread state the first time it calls into Python,
 * kept until the thread exits: a pthread key's destructor deletes it then
 * (the loader's destroy joins its workers with the GIL released). While
 * the interpreter shuts down it is left to the process's exit. */
static pthread_key_t worker_tstate_key;
static pthread_once_t worker_tstate_once = PTHREAD_ONCE_INIT;
static int worker_tstate_ok;

static void worker_tstate_free(void *ts)
{
    if (!ts || !interpreter_alive())
        return;
    /* Python's own thread key may already be cleared (the C library clears
     * every key of an exiting thread, in key order), so not through
     * PyGILState_Release: take the GIL with the state, clear and delete it. */
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent(); /* drops the GIL */
}

static void worker_tstate_init(void)
{
    worker_tstate_ok = pthread_key_create(&worker_tstate_key, worker_tstate_free) == 0;
}

static PyGILState_STATE gil_take(void)
{
    if (!PyGILState_GetThisThreadState()) {
        pthread_once(&worker_tstate_once, worker_tstate_init);
        if (worker_tstate_ok) {
            PyGILState_Ensure(); /* this thread's state, held from now on */
            pthread_setspecific(worker_tstate_key, PyEval_SaveThread());
        }
    }
    return PyGILState_Ensure();
}

/* Release the buffers the library gave back. GIL held. */
static void pysrc_drain(pysrc *s)
{
    pthread_mutex_lock(&s->mu);
    held *h = s->released;
    s->released = NULL;
    pthread_mutex_unlock(&s->mu);
    while (h) {
        held *next = h->next;
        PyBuffer_Release(&h->view);
        PyMem_RawFree(h);
        h = next;
    }
}

static void pysrc_release(void *user, void *token)
{
    pysrc *s = user;
    held *h = token;
    if (!h)
        return;
    pthread_mutex_lock(&s->mu);
    h->next = s->released;
    s->released = h;
    pthread_mutex_unlock(&s->mu);
}

/* The pending Python exception as the callback's error (cleared). GIL held. */
static int pysrc_fail(void)
{
    PyObject *type, *value, *tb;
#if PY_VERSION_HEX >= 0x030C0000
    value = PyErr_GetRaisedException();
    type = value ? Py_NewRef((PyObject *)Py_TYPE(value)) : NULL;
    tb = value ? PyException_GetTraceback(value) : NULL;
#else
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
#endif
    int code = STK_EDATA, own = 0;
    if (type && PyErr_GivenExceptionMatches(type, PyExc_MemoryError)) {
        code = STK_ENOMEM;
    } else if (type && StokerError && PyErr_GivenExceptionMatches(type, StokerError)) {
        PyObject *c = value ? PyObject_GetAttrString(value, "code") : NULL;
        long v = c && PyLong_Check(c) ? PyLong_AsLong(c) : 0;
        if (v < 0 && v > -N_CODES) {
            code = (int)v;
            own = 1;
        }
        Py_XDECREF(c);
        PyErr_Clear();
    }
    const char *tname = type ? ((PyTypeObject *)type)->tp_name : "exception";
    const char *dot = strrchr(tname, '.');
    char where[512] = "";
    PyObject *t = tb ? Py_NewRef(tb) : NULL; /* the innermost frame */
    while (t) {
        PyObject *next = PyObject_GetAttrString(t, "tb_next");
        if (!next || next == Py_None) {
            Py_XDECREF(next);
            break;
        }
        Py_DECREF(t);
        t = next;
    }
    PyErr_Clear();
    if (t) {
        PyObject *frame = PyObject_GetAttrString(t, "tb_frame");
        PyObject *line = PyObject_GetAttrString(t, "tb_lineno");
        PyObject *fcode = frame ? PyObject_GetAttrString(frame, "f_code") : NULL;
        PyObject *file = fcode ? PyObject_GetAttrString(fcode, "co_filename") : NULL;
        PyObject *fn = fcode ? PyObject_GetAttrString(fcode, "co_name") : NULL;
        if (file && fn && line && PyUnicode_Check(file) && PyUnicode_Check(fn))
            snprintf(where, sizeof where, " (%s:%ld in %s)", PyUnicode_AsUTF8(file),
                     PyLong_AsLong(line), PyUnicode_AsUTF8(fn));
        Py_XDECREF(frame);
        Py_XDECREF(line);
        Py_XDECREF(fcode);
        Py_XDECREF(file);
        Py_XDECREF(fn);
        Py_DECREF(t);
        PyErr_Clear();
    }
    PyObject *str = value ? PyObject_Str(value) : NULL;
    const char *text = str ? PyUnicode_AsUTF8(str) : NULL;
    PyErr_Clear();
    char msg[1024];
    if (own) /* stoker's own error (the feed's): its message says it all */
        snprintf(msg, sizeof msg, "%s", text ? text : stk_strerror(code));
    else
        snprintf(msg, sizeof msg, "%s: %s%s", dot ? dot + 1 : tname,
                 text ? text : "(its message could not be read)", where);
    Py_XDECREF(str);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return stk_callback_fail(code, msg);
}

/* Item `index` (a new reference), from this thread's slot when it holds that
 * index, else from the source (kept in the slot when fields are declared).
 * GIL held; NULL with an exception. */
static PyObject *pysrc_item(pysrc *s, uint64_t index)
{
    PyObject *key = NULL, *item = NULL;
    if (s->slots) {
        key = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
        if (!key)
            return NULL;
        PyObject *slot = PyDict_GetItemWithError(s->slots, key); /* borrowed */
        if (slot && PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(slot, 0)) == index) {
            Py_DECREF(key);
            return Py_NewRef(PyTuple_GET_ITEM(slot, 1));
        }
        if (PyErr_Occurred())
            goto done;
    }
    PyObject *i = PyLong_FromUnsignedLongLong(index);
    if (!i)
        goto done;
    item = s->get ? PyObject_CallOneArg(s->get, i) : PyObject_GetItem(s->seq, i);
    if (item && key) {
        PyObject *slot = PyTuple_Pack(2, i, item);
        if (!slot || PyDict_SetItem(s->slots, key, slot) < 0)
            Py_CLEAR(item);
        Py_XDECREF(slot);
    }
    Py_DECREF(i);
done:
    Py_XDECREF(key);
    return item;
}

/* Split an item into its image, label (or NULL) and extra field k's value
 * (k < 0: none wanted; *value NULL when the item has none). Borrowed
 * references. 0, or -1 with a TypeError naming what is wrong. */
static int pysrc_split(pysrc *s, PyObject *item, PyObject **image, PyObject **label, int k,
                       PyObject **value)
{
    *image = *label = NULL;
    if (value)
        *value = NULL;
    if (PyDict_Check(item)) {
        if (!(*image = PyDict_GetItemString(item, "image"))) {
            PyObject *keys = PyDict_Keys(item);
            if (keys)
                PyErr_Format(PyExc_TypeError, "a dict item needs an 'image' key; this one has %R",
                             keys);
            Py_XDECREF(keys);
            return -1;
        }
        *label = PyDict_GetItemString(item, "label");
        if (k >= 0)
            *value = PyDict_GetItemWithError(item, PyTuple_GET_ITEM(s->names, k));
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyTuple_Check(item) || PyList_Check(item)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(item);
        PyObject **v = PySequence_Fast_ITEMS(item);
        if (n < 1 || n > 2 + (Py_ssize_t)s->nextra || (s->nextra && n < 2 + (Py_ssize_t)s->nextra)) {
            PyErr_Format(PyExc_TypeError,
                         "a %s of %zd values; an item is an image, (image, label)%s%s%s",
                         Py_TYPE(item)->tp_name, n,
                         s->nextra ? " or (image, label, " : "",
                         s->nextra ? "<one value per field of fields=>" : "",
                         s->nextra ? ")" : " (declare more values with fields=)");
            return -1;
        }
        *image = v[0];
        *label = n > 1 ? v[1] : NULL;
        if (k >= 0)
            *value = v[2 + k];
        return 0;
    }
    if (s->nextra) {
        PyErr_Format(PyExc_TypeError,
                     "a bare %s, but fields= declares extra fields: an item must be (image, "
                     "label, <values>) or a dict",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    *image = item;
    return 0;
}

/* The module `name` when it is already imported (new reference), else NULL
 * without an exception: never import torch or PIL for a check. */
static PyObject *imported(const char *name)
{
    PyObject *n = PyUnicode_FromString(name);
    if (!n)
        return NULL;
    PyObject *m = PyImport_GetModule(n);
    Py_DECREF(n);
    if (!m)
        PyErr_Clear();
    return m;
}

/* Whether obj is an instance of module.cls (a module already imported). */
static int instance_of(PyObject *obj, const char *module, const char *cls)
{
    PyObject *m = imported(module);
    if (!m)
        return 0;
    PyObject *c = PyObject_GetAttrString(m, cls);
    Py_DECREF(m);
    if (!c) {
        PyErr_Clear();
        return 0;
    }
    int r = PyObject_IsInstance(obj, c);
    Py_DECREF(c);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

static PyObject *pysrc_numpy(pysrc *s)
{
    if (!s->numpy)
        s->numpy = PyImport_ImportModule("numpy");
    return s->numpy;
}

/* A buffer-exporting object for an image (a new reference) and whether it
 * is CHW (a torch tensor): bytes and arrays as they are, a CPU tensor
 * through .numpy(), a PIL image through numpy.asarray (modes other than L,
 * RGB, RGBA converted to RGB first). */
static PyObject *image_exporter(pysrc *s, PyObject *img, int *chw)
{
    *chw = 0;
    if (PyBytes_Check(img) || PyByteArray_Check(img) || PyMemoryView_Check(img))
        return Py_NewRef(img);
    if (instance_of(img, "torch", "Tensor")) {
        PyObject *dev = PyObject_GetAttrString(img, "device");
        PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
        Py_XDECREF(dev);
        if (!type)
            return NULL;
        int cpu = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cpu") == 0;
        if (!cpu) {
            PyErr_Format(PyExc_TypeError,
                         "a torch tensor on device %S: ExternalSource reads CPU tensors "
                         "(.cpu() it, or run GPU work in batch_transform=)",
                         type);
            Py_DECREF(type);
            return NULL;
        }
        Py_DECREF(type);
        *chw = 1;
        return PyObject_CallMethod(img, "numpy", NULL);
    }
    if (instance_of(img, "PIL.Image", "Image")) {
        PyObject *np = pysrc_numpy(s);
        PyObject *mode = PyObject_GetAttrString(img, "mode");
        if (!np || !mode) {
            Py_XDECREF(mode);
            return NULL;
        }
        int keep = PyUnicode_Check(mode) && (!PyUnicode_CompareWithASCIIString(mode, "L") ||
                                             !PyUnicode_CompareWithASCIIString(mode, "RGB") ||
                                             !PyUnicode_CompareWithASCIIString(mode, "RGBA"));
        Py_DECREF(mode);
        PyObject *rgb = keep ? Py_NewRef(img) : PyObject_CallMethod(img, "convert", "s", "RGB");
        if (!rgb)
            return NULL;
        PyObject *a = PyObject_CallMethod(np, "asarray", "O", rgb);
        Py_DECREF(rgb);
        return a;
    }
    if (PyObject_CheckBuffer(img))
        return Py_NewRef(img);
    PyErr_Format(PyExc_TypeError,
                 "the image is a %s; ExternalSource reads encoded bytes (JPEG, PNG...), a "
                 "NumPy uint8 array (H, W[, C]), a CPU torch uint8 tensor (C, H, W), a PIL "
                 "image, or a tuple/dict of (image, label[, fields])",
                 Py_TYPE(img)->tp_name);
    return NULL;
}

/* The dtype of an array-like for a message ("float32"), or its buffer format. */
static void dtype_name(PyObject *obj, const Py_buffer *v, char *buf, size_t n)
{
    PyObject *d = PyObject_GetAttrString(obj, "dtype");
    PyObject *str = d ? PyObject_Str(d) : NULL;
    const char *t = str ? PyUnicode_AsUTF8(str) : NULL;
    if (t)
        snprintf(buf, n, "%s", t);
    else
        snprintf(buf, n, "format '%s', %zd-byte items", v->format ? v->format : "B",
                 v->itemsize);
    Py_XDECREF(str);
    Py_XDECREF(d);
    PyErr_Clear();
}

/* Fill *out with the image's memory; *token the held buffer. GIL held;
 * -1 with an exception. */
static int pysrc_image(pysrc *s, PyObject *img, stk_callback_sample *out)
{
    int chw;
    PyObject *exp = image_exporter(s, img, &chw);
    if (!exp)
        return -1;
    held *h = PyMem_RawCalloc(1, sizeof *h);
    if (!h) {
        Py_DECREF(exp);
        PyErr_NoMemory();
        return -1;
    }
    for (int attempt = 0;; attempt++) {
        if (PyObject_GetBuffer(exp, &h->view, PyBUF_RECORDS_RO) < 0)
            goto fail;
        Py_buffer *v = &h->view;
        int negative = 0;
        for (int d = 0; d < v->ndim; d++)
            negative |= v->strides && v->strides[d] < 0;
        if (!negative || attempt)
            break;
        /* a flipped view (a[:, ::-1]): a contiguous copy */
        PyBuffer_Release(v);
        PyObject *np = pysrc_numpy(s);
        PyObject *c = np ? PyObject_CallMethod(np, "ascontiguousarray", "O", exp) : NULL;
        if (!c)
            goto fail;
        Py_SETREF(exp, c);
    }
    Py_buffer *v = &h->view;
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '>' || *f == '=' || *f == '|' || *f == '@')
        f++;
    if (v->itemsize != 1 || (strcmp(f, "B") != 0 && strcmp(f, "c") != 0)) {
        char dt[64];
        dtype_name(exp, v, dt, sizeof dt);
        PyErr_Format(PyExc_TypeError,
                     "an image array of %s; ExternalSource reads uint8 pixels or encoded bytes "
                     "(convert with .astype(numpy.uint8) or .to(torch.uint8))",
                     dt);
        goto fail_view;
    }
    if (v->ndim < 1 || v->ndim > 3) {
        PyErr_Format(PyExc_TypeError,
                     "an image array of %d dimensions; ExternalSource reads 1-D encoded bytes, "
                     "(H, W) or (H, W, C) arrays and (C, H, W) torch tensors",
                     v->ndim);
        goto fail_view;
    }
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] > (Py_ssize_t)UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "an image dimension over 2**32");
            goto fail_view;
        }
    out->data = v->buf;
    if (v->ndim == 1) {
        if (v->strides && v->strides[0] != 1) {
            PyErr_SetString(PyExc_TypeError,
                            "a 1-D array of encoded bytes must be contiguous (a strided view "
                            "of it is not)");
            goto fail_view;
        }
        out->size = (size_t)v->shape[0];
    } else {
        Py_ssize_t sh[3] = {v->shape[0], v->shape[1], v->ndim == 3 ? v->shape[2] : 1};
        Py_ssize_t st[3] = {v->strides ? v->strides[0] : sh[1] * sh[2],
                            v->strides ? v->strides[1] : sh[2],
                            v->ndim == 3 && v->strides ? v->strides[2] : 1};
        int hd = chw ? 1 : 0, wd = chw ? 2 : 1, cd = chw ? 0 : 2;
        if (v->ndim == 2) /* gray: H, W for tensors too */
            hd = 0, wd = 1, cd = 2;
        out->height = (uint32_t)sh[hd];
        out->width = (uint32_t)sh[wd];
        out->channels = (uint32_t)sh[cd];
        out->row_stride = st[hd];
        out->col_stride = st[wd];
        out->chan_stride = st[cd];
        size_t span = 1;
        for (int d = 0; d < 3; d++)
            span += sh[d] ? (size_t)(sh[d] - 1) * (size_t)st[d] : 0;
        out->size = sh[0] && sh[1] && sh[2] ? span : 0;
    }
    out->token = h;
    Py_DECREF(exp);
    return 0;
fail_view:
    PyBuffer_Release(&h->view);
fail:
    PyMem_RawFree(h);
    Py_DECREF(exp);
    return -1;
}

static int pysrc_label(PyObject *label, int64_t *out)
{
    if (!label || label == Py_None) {
        *out = -1;
        return 0;
    }
    PyObject *i = PyNumber_Index(label);
    if (!i) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "the label is a %s (%R), not an integer",
                     Py_TYPE(label)->tp_name, label);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "the label %R does not fit int64", label);
        return -1;
    }
    *out = v;
    return 0;
}

static int pysrc_read(void *user, uint64_t index, stk_callback_sample *out)
{
    pysrc *s = user;
    if (!interpreter_alive())
        return stk_callback_fail(STK_ESTOPPED, "the Python interpreter is shutting down");
    PyGILState_STATE g = gil_take();
    pysrc_drain(s);
    int rc = 0;
    PyObject *image = NULL, *label = NULL;
    PyObject *item = pysrc_item(s, index);
    if (item && pysrc_split(s, item, &image, &label, -1, NULL) == 0) {
        /* our own references: converting runs Python code (numpy, PIL,
         * torch) that could change a list or dict item meanwhile */
        Py_INCREF(image);
        Py_XINCREF(label);
        if (pysrc_label(label, &out->label) < 0 || pysrc_image(s, image, out) < 0)
            rc = pysrc_fail();
        Py_DECREF(image);
        Py_XDECREF(label);
    } else {
        rc = pysrc_fail();
    }
    Py_XDECREF(item);
    PyGILState_Release(g);
    return rc;
}

static int pysrc_read_field(void *user, uint64_t index, uint32_t field, stk_callback_field *out)
{
    pysrc *s = user;
    if (!interpreter_alive())
        return stk_callback_fail(STK_ESTOPPED, "the Python interpreter is shutting down");
    PyGILState_STATE g = gil_take();
    pysrc_drain(s);
    int rc = 0;
    PyObject *image, *label, *value = NULL, *conv = NULL;
    held *h = NULL;
    PyObject *item = pysrc_item(s, index);
    if (!item || pysrc_split(s, item, &image, &label, (int)field, &value) < 0)
        goto fail;
    if (!value) {
        PyErr_Format(PyExc_KeyError, "the item has no value for field %R",
                     PyTuple_GET_ITEM(s->names, field));
        goto fail;
    }
    PyObject *k = PyLong_FromUnsignedLong(field);
    Py_INCREF(value); /* ours while the converter runs Python code */
    conv = k ? PyObject_CallFunctionObjArgs(s->convert, k, value, NULL) : NULL;
    Py_DECREF(value);
    Py_XDECREF(k);
    if (!conv)
        goto fail;
    if (!(h = PyMem_RawCalloc(1, sizeof *h))) {
        PyErr_NoMemory();
        goto fail;
    }
    if (PyObject_GetBuffer(conv, &h->view, PyBUF_ND | PyBUF_C_CONTIGUOUS) < 0) {
        PyMem_RawFree(h);
        goto fail;
    }
    out->data = h->view.buf;
    out->size = (size_t)h->view.len;
    if (h->view.ndim == 3 && h->view.shape)
        for (int d = 0; d < 3; d++)
            out->shape[d] = (uint32_t)h->view.shape[d];
    out->token = h;
    goto done;
fail:
    rc = pysrc_fail();
done:
    Py_XDECREF(conv);
    Py_XDECREF(item);
    PyGILState_Release(g);
    return rc;
}

static void pysrc_free(pysrc *s)
{
    pysrc_drain(s);
    Py_XDECREF(s->seq);
    Py_XDECREF(s->get);
    Py_XDECREF(s->names);
    Py_XDECREF(s->convert);
    Py_XDECREF(s->slots);
    Py_XDECREF(s->numpy);
    pthread_mutex_destroy(&s->mu);
    PyMem_RawFree(s);
}

static void pysrc_close(void *user)
{
    if (!interpreter_alive())
        return; /* exiting: the objects go with the process */
    PyGILState_STATE g = PyGILState_Ensure();
    pysrc_free(user);
    PyGILState_Release(g);
}

static const stk_dataset_callbacks pysrc_callbacks = {
    .read = pysrc_read,
    .read_field = pysrc_read_field,
    .release = pysrc_release,
    .close = pysrc_close,
};

/* _from_source(seq, get, count, name, shape, num_classes, classes, fields,
 * convert): see external.py. seq (an indexable) or get (a callable) is
 * None; shape None or (H, W, C); classes None or a sequence of str; fields
 * a sequence of (name, type code, dims tuple) with dims[0] == 0 for a
 * varying leading dimension. */
static PyObject *dataset_from_source(PyObject *cls, PyObject *args)
{
    PyObject *seq, *get, *shape, *classes, *fields, *convert;
    const char *name;
    uint64_t count;
    uint32_t num_classes;
    if (!PyArg_ParseTuple(args, "OOO&sOO&OOO:_from_source", &seq, &get, conv_u64, &count, &name,
                          &shape, conv_u32, &num_classes, &classes, &fields, &convert))
        return NULL;
    stk_callback_options o = {.count = count, .name = name, .num_classes = num_classes};
    if (shape != Py_None &&
        !PyArg_ParseTuple(shape, "III;shape must be (height, width, channels)", &o.height,
                          &o.width, &o.channels))
        return NULL;
    PyObject *fseq = PySequence_Fast(fields, "fields must be a sequence");
    PyObject *cseq = classes == Py_None ? NULL : PySequence_Fast(classes, "classes must be a sequence");
    if (!fseq || (classes != Py_None && !cseq)) {
        Py_XDECREF(fseq);
        return NULL;
    }
    Py_ssize_t nf = PySequence_Fast_GET_SIZE(fseq), nc = cseq ? PySequence_Fast_GET_SIZE(cseq) : 0;
    stk_field_info *decl = PyMem_Calloc((size_t)nf + 1, sizeof *decl);
    const char **cnames = PyMem_Calloc((size_t)nc + 1, sizeof *cnames);
    PyObject *names = PyTuple_New(nf);
    pysrc *s = PyMem_RawCalloc(1, sizeof *s);
    PyObject *res = NULL;
    if (!decl || !cnames || !names || !s) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nf; k++) {
        PyObject *fname, *dims;
        int type;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fseq, k), "UiO!;a field is (name, type, dims)",
                              &fname, &type, &PyTuple_Type, &dims))
            goto done;
        decl[k].name = PyUnicode_AsUTF8(fname);
        decl[k].type = (stk_field_type)type;
        Py_ssize_t nd = PyTuple_GET_SIZE(dims);
        if (!decl[k].name || nd > 4) {
            if (decl[k].name)
                PyErr_Format(PyExc_ValueError, "field %R: at most 4 dimensions", fname);
            goto done;
        }
        decl[k].ndim = (uint32_t)nd;
        for (Py_ssize_t d = 0; d < nd; d++)
            if (!conv_u32(PyTuple_GET_ITEM(dims, d), &decl[k].dims[d]))
                goto done;
        PyTuple_SET_ITEM(names, k, Py_NewRef(fname));
    }
    if (num_classes && cseq) {
        if (nc != (Py_ssize_t)num_classes) {
            PyErr_Format(PyExc_ValueError, "%zd class names for %u classes", nc, num_classes);
            goto done;
        }
        for (Py_ssize_t k = 0; k < nc; k++) {
            PyObject *c = PySequence_Fast_GET_ITEM(cseq, k);
            if (!PyUnicode_Check(c) || !(cnames[k] = PyUnicode_AsUTF8(c))) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "class name %zd is a %s, not a str", k,
                                 Py_TYPE(c)->tp_name);
                goto done;
            }
        }
        o.class_names = cnames;
    }
    o.fields = decl;
    o.nfields = (uint32_t)nf;
    pthread_mutex_init(&s->mu, NULL);
    s->seq = seq == Py_None ? NULL : Py_NewRef(seq);
    s->get = get == Py_None ? NULL : Py_NewRef(get);
    s->names = Py_NewRef(names);
    s->convert = Py_NewRef(convert);
    s->nextra = (uint32_t)nf;
    if ((!s->seq) == (!s->get)) {
        PyErr_SetString(PyExc_ValueError, "_from_source: give one of seq and get");
        pysrc_free(s);
        s = NULL;
        goto done;
    }
    if (nf && !(s->slots = PyDict_New())) {
        pysrc_free(s);
        s = NULL;
        goto done;
    }
    stk_dataset *ds = NULL;
    int rc = stk_dataset_from_callbacks(&pysrc_callbacks, s, &o, &ds);
    if (rc < 0) {
        pysrc_free(s); /* close is not called on failure */
        s = NULL;
        raise_last(rc);
        goto done;
    }
    s = NULL; /* the dataset's now: freed by its close */
    res = (PyObject *)dataset_wrap((PyTypeObject *)cls, ds);
done:
    if (s)
        PyMem_RawFree(s); /* never initialised */
    PyMem_Free(decl);
    PyMem_Free(cnames);
    Py_XDECREF(names);
    Py_DECREF(fseq);
    Py_XDECREF(cseq);
    return res;
}

/* _field_infos() -> [(name, type code, dims tuple)]: the dataset's fields
 * (stk_dataset_field_info). */
static PyObject *dataset_field_infos(DatasetObject *self, PyObject *unused)
{
    uint32_t n = stk_dataset_field_count(self->ds);
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        stk_field_info fi;
        int rc = stk_dataset_field_info(self->ds, i, &fi);
        if (rc < 0) {
            Py_DECREF(list);
            return raise_last(rc);
        }
        PyObject *dims = PyTuple_New(fi.ndim);
        for (uint32_t d = 0; dims && d < fi.ndim; d++)
            PyTuple_SET_ITEM(dims, d, PyLong_FromUnsignedLong(fi.dims[d]));
        PyObject *t = dims ? Py_BuildValue("(siN)", fi.name, (int)fi.type, dims) : NULL;
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);
    }
    return list;
}

/* _read_field(index, name) -> (bytes, shape): stk_dataset_read_field, the
 * GIL released while reading; shape the raw image's (h, w, c) or None. */
static PyObject *dataset_read_field_raw(DatasetObject *self, PyObject *args)
{
    uint64_t index;
    const char *name;
    if (!PyArg_ParseTuple(args, "O&z:_read_field", conv_u64, &index, &name))
        return NULL;
    void *data = NULL;
    size_t size = 0;
    uint32_t shape[3] = {0, 0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_read_field(self->ds, index, name, &data, &size, shape);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)size);
    stk_free(data);
    if (!b)
        return NULL;
    if (!shape[0])
        return Py_BuildValue("(NO)", b, Py_None);
    return Py_BuildValue("(N(III))", b, shape[0], shape[1], shape[2]);
}

static PyMethodDef dataset_methods[] = {
    {"path", (PyCFunction)dataset_path, METH_O,
     "path(index)\n--\n\nThe source name of sample `index`: its file path (image folder, list, "
     "shards packed from them), the reader's name for it (a TFRecord record, a tar member...), "
     "or None for formats whose samples have no name (CIFAR, IDX, NumPy, memory)."},
    {"read", (PyCFunction)dataset_read, METH_O,
     "read(index)\n--\n\nSample `index` as (an H x W x C uint8 _Array, its label). Thread-safe; "
     "the GIL is released while reading."},
    {"_concat", dataset_concat, METH_VARARGS | METH_CLASS,
     "_concat(parts)\n--\n\nThe datasets of the tuple `parts` as one (their samples in "
     "order). Use stoker.Loader([ds, ...]) or stoker.concat()."},
    {"_from_source", dataset_from_source, METH_VARARGS | METH_CLASS,
     "_from_source(seq, get, count, name, shape, num_classes, classes, fields, convert)\n--\n\n"
     "A dataset whose samples come from Python (stk_dataset_from_callbacks). Use "
     "stoker.ExternalSource()."},
    {"_field_infos", (PyCFunction)dataset_field_infos, METH_NOARGS,
     "_field_infos()\n--\n\nThe dataset's fields: a list of (name, type code, dims)."},
    {"_read_field", (PyCFunction)dataset_read_field_raw, METH_VARARGS,
     "_read_field(index, name)\n--\n\nField `name` (None: the image) of sample `index` as "
     "(bytes, shape): shape (h, w, c) for raw images, else None."},
    {"_from_buffers", dataset_from_buffers, METH_VARARGS | METH_CLASS,
     "_from_buffers(pixels, labels, count, height, width, channels)\n--\n\n"
     "An in-memory dataset copied from C-contiguous buffers: uint8 N,H,W,C pixels and int64 "
     "labels (or None). Use stoker.from_numpy()."},
    {0},
};

static PyGetSetDef dataset_getset[] = {
    {"uri", (getter)dataset_get_uri, NULL, "The URI the dataset was opened with.", NULL},
    {"format", (getter)dataset_get_format, NULL, "'cifar10', 'cifar100', 'idx' or 'memory'.", NULL},
    {"shape", (getter)dataset_get_shape, NULL, "(height, width, channels) of every sample, or None when samples differ in size (encoded images).", NULL},
    {"num_classes", (getter)dataset_get_num_classes, NULL, "Number of classes, 0 when unknown.", NULL},
    {"classes", (getter)dataset_get_classes, NULL, "Class names, label -> name (os.fsdecode'd), or None.", NULL},
    {"skipped_inputs", (getter)dataset_get_skipped, NULL, "Messages for the inputs the open left out (an image folder's unreadable directories, symlink loops).", NULL},
    {"source_root", (getter)dataset_get_source_root, NULL, "The directory `stoker pack` ran in, which path(i) joins relative source names to (os.fsdecode'd), or None: shards of an absolute input, of an older pack, or not packed.", NULL},
    {0},
};

static PySequenceMethods dataset_as_sequence = {.sq_length = (lenfunc)dataset_len};

static PyTypeObject DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._stoker.Dataset",
    .tp_doc = "Dataset(uri, *, max_bytes=0, max_samples=0, max_pixels=0)\n--\n\n"
              "An opened dataset (stk_dataset_open): CIFAR-10/100 binaries, IDX (MNIST, "
              "Fashion-MNIST)... Immutable; safe to read from any thread and after fork(). "
              "Use stoker.open().",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = dataset_new,
    .tp_dealloc = (destructor)dataset_dealloc,
    .tp_as_sequence = &dataset_as_sequence,
    .tp_methods = dataset_methods,
    .tp_getset = dataset_getset,
};

/* ------------------------------------------------------------------------ */
/* _Loader, Batch, _Iterator                                                 */
/* ------------------------------------------------------------------------ */

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
    unsigned long fork_gen; /* fork_generation at creation */
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

static PyTypeObject LoaderType, BatchType, IterType;

static void loader_destroy_c(LoaderObject *self)
{
    stk_loader *l = self->l;
    self->l = NULL;
    if (!l)
        return;
    if (self->fork_gen != fork_generation)
        return; /* forked child: no threads to join, the mutex may be held; leak */
    Py_BEGIN_ALLOW_THREADS
    stk_loader_destroy(l);
    Py_END_ALLOW_THREADS
}

/* The loader exists in this process and is open. Enough for the calls the
 * C API makes safe from any thread (stats, state). */
static int loader_alive(LoaderObject *self)
{
    if (self->fork_gen != fork_generation) {
        PyErr_Format(ForkError,
                     "this stoker Loader was created in process %ld and cannot be used in a "
                     "forked child (process %ld): its worker threads do not exist here. Create "
                     "the Loader in the child process (the parent's keeps working).",
                     self->pid, (long)getpid());
        return -1;
    }
    if (self->closed || !self->l) {
        PyErr_SetString(PyExc_ValueError, "the Loader is closed");
        return -1;
    }
    return 0;
}

/* Alive, and no other thread is waiting in next(): for every call that
 * moves the loader (next, iter, set_epoch, set_state). */
static int loader_check(LoaderObject *self)
{
    if (loader_alive(self) < 0)
        return -1;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the Loader is in use by another thread (waiting for a batch); a Loader "
                        "has one consumer at a time");
        return -1;
    }
    return 0;
}

static PyObject *loader_make(PyTypeObject *type, PyObject *dataset, const char *spec,
                             stk_loader_options *op, stk_sampling *sg, Py_buffer *indices,
                             Py_buffer *weights, int balance, PyObject *aug_seed, int eager,
                             int shuffle, int drop_last, int on_error, int mode,
                             PyObject *convert, PyObject *convert_device, int block);

static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"dataset", "spec", "batch_size", "threads", "prefetch",
                             "max_batches", "seed", "shuffle", "drop_last", "rank",
                             "world_size", "on_error", "output", "convert", "block",
                             "block_size", "shuffle_window", "indices", "weights",
                             "num_samples", "balance_classes", "aug_seed", "views", "eager",
                             "mix_sizes", "mix_weights", "memory_limit", "fields", "device",
                             "placement", "device_convert", "decoder", NULL};
    PyObject *dataset, *convert = Py_None, *aug_seed = Py_None, *convert_device = Py_None;
    const char *device = NULL;
    int placement = STK_PLACE_AUTO, decoder = STK_DECODER_CPU;
    const char *spec;
    stk_loader_options o = {0};
    stk_sampling sg = {0};
    /* indices: native uint64, weights: native float64 (loader.py packs them) */
    Py_buffer indices = {0}, weights = {0}, mix_sizes = {0}, mix_weights = {0};
    int shuffle = 0, drop_last = 0, on_error = 0, mode = OUT_OBJECTS, block = 0;
    int balance = 0, eager = 0;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "O!s|$O&O&O&O&O&ppO&O&iiOpO&O&z*z*O&pOO&pz*z*O&zziOi:_Loader", kwlist,
            &DatasetType, &dataset, &spec, conv_u32, &o.batch_size, conv_u32, &o.threads,
            conv_u32, &o.prefetch, conv_u32, &o.max_batches, conv_u64, &o.seed, &shuffle,
            &drop_last, conv_u32, &o.rank, conv_u32, &o.world_size, &on_error, &mode, &convert,
            &block, conv_u64, &o.block_size, conv_u32, &o.shuffle_window, &indices, &weights,
            conv_u64, &sg.num_samples, &balance, &aug_seed, conv_u32, &o.views, &eager,
            &mix_sizes, &mix_weights, conv_u64, &o.memory_limit, &o.fields, &device,
            &placement, &convert_device, &decoder))
        return NULL;
    /* The device options: borrowed by stk_loader_create, which copies them
     * (and the device string) before returning. */
    stk_device_options dev = {0};
    if (device && *device) { /* placement is checked in loader_make */
        dev.device = device;
        dev.placement = (stk_placement)placement;
        dev.decoder = (stk_decoder)decoder; /* checked by stk_loader_create */
        o.device = &dev;
    }
    if (mix_sizes.obj) {
        sg.mix_sizes = mix_sizes.buf;
        sg.num_mix = (uint64_t)mix_sizes.len / sizeof(uint64_t);
    }
    if (mix_weights.obj) {
        sg.mix_weights = mix_weights.buf;
        if ((uint64_t)mix_weights.len / sizeof(double) != sg.num_mix) {
            PyErr_SetString(PyExc_ValueError, "mix_weights: one per dataset");
            PyBuffer_Release(&mix_weights);
            if (mix_sizes.obj)
                PyBuffer_Release(&mix_sizes);
            if (indices.obj)
                PyBuffer_Release(&indices);
            if (weights.obj)
                PyBuffer_Release(&weights);
            return NULL;
        }
    }
    PyObject *made = loader_make(type, dataset, spec, &o, &sg, &indices, &weights, balance,
                                 aug_seed, eager, shuffle, drop_last, on_error, mode, convert,
                                 convert_device, block);
    if (indices.obj)
        PyBuffer_Release(&indices);
    if (weights.obj)
        PyBuffer_Release(&weights);
    if (mix_sizes.obj)
        PyBuffer_Release(&mix_sizes);
    if (mix_weights.obj)
        PyBuffer_Release(&mix_weights);
    return made;
}

static PyObject *loader_make(PyTypeObject *type, PyObject *dataset, const char *spec,
                             stk_loader_options *op, stk_sampling *sg, Py_buffer *indices,
                             Py_buffer *weights, int balance, PyObject *aug_seed, int eager,
                             int shuffle, int drop_last, int on_error, int mode,
                             PyObject *convert, PyObject *convert_device, int block)
{
    stk_loader_options o = *op;
    if (indices->obj) {
        sg->indices = indices->buf;
        sg->num_indices = (uint64_t)indices->len / sizeof(uint64_t);
    }
    if (weights->obj) {
        sg->weights = weights->buf;
        sg->num_weights = (uint64_t)weights->len / sizeof(double);
    }
    sg->balance_classes = balance;
    if (sg->indices || sg->weights || sg->num_samples || sg->balance_classes || sg->num_mix)
        o.sampling = sg;
    if (aug_seed != Py_None) {
        if (conv_u64(aug_seed, &o.aug_seed) == 0)
            return NULL;
        o.flags |= STK_LOADER_AUG_SEED;
    }
    if (eager)
        o.flags |= STK_LOADER_EAGER;
    if (mode < OUT_OBJECTS || mode > OUT_CALL || (mode != OUT_OBJECTS && !PyCallable_Check(convert))) {
        PyErr_SetString(PyExc_ValueError, "output mode needs a callable converter");
        return NULL;
    }
    if (o.device && (o.device->placement < STK_PLACE_AUTO || o.device->placement > STK_PLACE_GPU)) {
        PyErr_SetString(PyExc_ValueError, "placement must be 0 (auto), 1 (cpu) or 2 (gpu)");
        return NULL;
    }
    if (convert_device != Py_None && !PyCallable_Check(convert_device)) {
        PyErr_SetString(PyExc_ValueError, "device_convert must be callable (or None)");
        return NULL;
    }
    if (on_error < 0 || on_error > 2) {
        PyErr_SetString(PyExc_ValueError, "on_error must be 0 (raise), 1 (skip) or 2 (replace)");
        return NULL;
    }
    if (block && !shuffle) {
        PyErr_SetString(PyExc_ValueError, "block shuffle needs shuffle");
        return NULL;
    }
    /* Weights and class balance draw at random whatever `shuffle` says
     * (as torch's WeightedRandomSampler, used with shuffle=False). */
    if (!shuffle && (sg->weights || sg->balance_classes))
        shuffle = 1;
    o.no_shuffle = !shuffle;
    o.shuffle = block ? STK_SHUFFLE_BLOCK : STK_SHUFFLE_GLOBAL;
    o.drop_last = drop_last;
    o.on_error = (stk_error_policy)on_error;

    LoaderObject *self = (LoaderObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->dataset = Py_NewRef(dataset);
    self->convert = mode == OUT_OBJECTS ? NULL : Py_NewRef(convert);
    self->convert_device = convert_device == Py_None ? NULL : Py_NewRef(convert_device);
    self->mode = mode;
    self->fork_gen = fork_generation;
    self->pid = (long)getpid();

    stk_loader *l = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_create(((DatasetObject *)dataset)->ds, spec, &o, &l);
    Py_END_ALLOW_THREADS
    if (rc >= 0) { /* as the loader resolved it (defaults, memory_limit) */
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        self->max_batches = st.max_batches;
    }
    if (rc < 0) {
        raise_last(rc);
        Py_DECREF(self);
        return NULL;
    }
    self->l = l;
    self->length = stk_loader_length(l);
    stk_dtype dtype;
    stk_layout layout;
    stk_loader_sample_shape(l, self->sample_shape, &dtype, &layout, NULL);
    self->kind = kind_of_dtype(dtype);
    self->layout = layout;
    {
        uint32_t nf = stk_loader_field_count(self->l);
        stk_batch_field f0, f1;
        self->fields = nf != 2 || stk_loader_field(self->l, NULL, 0, &f0) < 0 ||
                       stk_loader_field(self->l, NULL, 1, &f1) < 0 ||
                       f0.role != STK_ROLE_IMAGE || f1.role != STK_ROLE_LABEL;
    }
    return (PyObject *)self;
}

static void loader_dealloc(LoaderObject *self)
{
    /* No Batch and no iterator is alive (they hold references). */
    loader_destroy_c(self);
    Py_XDECREF(self->convert);
    Py_XDECREF(self->convert_device);
    Py_XDECREF(self->dataset);
    Py_XDECREF(self->skipped);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Batches of the epoch the loader is in (the C loader's answer while it
 * exists here; the full count otherwise). */
static uint64_t loader_batches(LoaderObject *self)
{
    if (self->l && !self->closed && self->fork_gen == fork_generation)
        return stk_loader_length(self->l);
    return self->length;
}

static Py_ssize_t loader_len(LoaderObject *self) { return (Py_ssize_t)loader_batches(self); }

/* The consumer's place as the user sees it: a batch the C loader lent but an
 * interrupted next() kept back (iter_next) is not delivered yet, so the
 * position is one less (that batch comes next). */
static void loader_state_c(LoaderObject *self, stk_loader_state *st)
{
    stk_loader_state_get(self->l, st);
    if (self->stash_gen && self->stash_gen == self->gen && st->position > 0)
        st->position--;
}

/* --- Batch --------------------------------------------------------------- */

static void batch_dealloc(BatchObject *self)
{
    LoaderObject *L = self->loader;
    if (self->fork_gen == fork_generation && L->l)
        stk_loader_release(L->l, &self->b); /* short lock; never waits on Python */
    L->lent--;
    if (L->closed && L->lent == 0)
        loader_destroy_c(L);
    PyObject_Free(self);
    Py_DECREF(L);
}

static int batch_getbuffer(BatchObject *self, Py_buffer *b, int flags)
{
    return view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *batch_dlpack(BatchObject *self, PyObject *args, PyObject *kwargs)
{
    return view_dlpack((PyObject *)self, &self->v, (PyObject *)self, args, kwargs);
}

static PyObject *batch_dlpack_device(BatchObject *self, PyObject *unused)
{
    return view_dlpack_device(&self->v);
}

static int batch_wait_stream(PyObject *batch, uint64_t stream)
{
    BatchObject *self = (BatchObject *)batch;
    LoaderObject *L = self->loader;
    if (self->fork_gen != fork_generation || !L->l) {
        PyErr_SetString(PyExc_RuntimeError, "this batch's loader is closed");
        return -1;
    }
    int rc = stk_loader_batch_wait(L->l, &self->b, stream); /* queues a wait; does not block */
    if (rc < 0) {
        raise_last(rc);
        return -1;
    }
    return 0;
}

/* A lent batch as its view: host memory, or the device's (STK_DEVICE_CUDA). */
static void batch_view_init(BatchObject *bo, int kind)
{
    view_init(&bo->v, bo->b.data, kind, 4, bo->b.shape);
    if (bo->b.device_type == STK_DEVICE_CUDA) {
        bo->v.dev_type = DL_CUDA;
        bo->v.dev_id = bo->b.device_id;
    }
}

static ArrayObject *copy_i64(const void *src, uint32_t n)
{
    int64_t shape[1] = {n};
    ArrayObject *a = array_new(K_I64, 1, shape);
    if (a && n)
        memcpy(a->data, src, (size_t)n * 8);
    return a;
}

static PyObject *batch_data_ptr(BatchObject *self, PyObject *u) { return PyLong_FromVoidPtr(self->b.data); }
static PyObject *batch_shape(BatchObject *self, void *c) { return view_shape_tuple(&self->v); }
static PyObject *batch_dtype(BatchObject *self, void *c) { return PyUnicode_FromString(kinds[self->v.kind].name); }
static PyObject *batch_layout(BatchObject *self, void *c) { return PyUnicode_FromString(self->b.layout == STK_CHW ? "NCHW" : "NHWC"); }
static PyObject *batch_labels(BatchObject *self, void *c) { return (PyObject *)copy_i64(self->b.labels, self->b.size); }
static PyObject *batch_indices(BatchObject *self, void *c) { return (PyObject *)copy_i64(self->b.indices, self->b.size); }
static PyObject *batch_epoch(BatchObject *self, void *c) { return PyLong_FromUnsignedLongLong(self->b.epoch); }
static PyObject *batch_position(BatchObject *self, void *c) { return PyLong_FromUnsignedLongLong(self->b.position); }
static PyObject *batch_skipped(BatchObject *self, void *c) { return PyLong_FromUnsignedLong(self->b.skipped); }
static PyObject *batch_nbytes(BatchObject *self, void *c) { return PyLong_FromSsize_t(view_nbytes(&self->v)); }
static Py_ssize_t batch_len(BatchObject *self) { return (Py_ssize_t)self->b.size; }

static PyObject *batch_device(BatchObject *self, void *c)
{
    if (self->v.dev_type == DL_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)self->v.dev_id);
    return PyUnicode_FromString("cpu");
}

static PyObject *batch_repr(BatchObject *self)
{
    PyObject *shape = view_shape_tuple(&self->v);
    if (!shape)
        return NULL;
    PyObject *r;
    if (self->v.dev_type == DL_CUDA)
        r = PyUnicode_FromFormat(
            "<stoker.Batch epoch=%llu position=%llu shape=%R %s %s device=cuda:%d data_ptr=%p>",
            (unsigned long long)self->b.epoch, (unsigned long long)self->b.position, shape,
            kinds[self->v.kind].name, self->b.layout == STK_CHW ? "NCHW" : "NHWC",
            (int)self->v.dev_id, self->b.data);
    else
        r = PyUnicode_FromFormat(
            "<stoker.Batch epoch=%llu position=%llu shape=%R %s %s data_ptr=%p>",
            (unsigned long long)self->b.epoch, (unsigned long long)self->b.position, shape,
            kinds[self->v.kind].name, self->b.layout == STK_CHW ? "NCHW" : "NHWC",
            self->b.data);
    Py_DECREF(shape);
    return r;
}

static PyObject *batch_field(BatchObject *self, PyObject *arg);

static PyMethodDef batch_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))batch_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule sharing the batch buffer (\"dltensor\", or \"dltensor_versioned\" when "
     "max_version >= (1, 0)). The tensor made from it keeps this Batch, and so the buffer, "
     "alive. A batch in CUDA memory makes `stream` (DLPack's stream protocol: None or 1 the "
     "legacy default stream, 2 the per-thread default stream, an int CUstream, -1 no "
     "synchronisation) wait for it first."},
    {"__dlpack_device__", (PyCFunction)batch_dlpack_device, METH_NOARGS,
     "(1, 0) for CPU memory, (2, N) for a batch on cuda:N."},
    {"data_ptr", (PyCFunction)batch_data_ptr, METH_NOARGS,
     "Address of the pooled batch buffer (the C stk_batch.data)."},
    {"field", (PyCFunction)batch_field, METH_O,
     "field(i) -> (name, role, dtype, text, values, offsets): field i of the batch "
     "(Loader(fields=...)); values shares the batch's memory."},
    {0},
};

static PyGetSetDef batch_getset[] = {
    {"shape", (getter)batch_shape, NULL, "(N, C, H, W) or (N, H, W, C).", NULL},
    {"dtype", (getter)batch_dtype, NULL, "'uint8', 'float16' or 'float32'.", NULL},
    {"layout", (getter)batch_layout, NULL, "'NCHW' or 'NHWC'.", NULL},
    {"labels", (getter)batch_labels, NULL, "A copy of the labels: an int64 _Array.", NULL},
    {"indices", (getter)batch_indices, NULL, "A copy of the dataset indices: an int64 _Array.", NULL},
    {"epoch", (getter)batch_epoch, NULL, "The epoch this batch belongs to.", NULL},
    {"position", (getter)batch_position, NULL, "Its batch index within the epoch.", NULL},
    {"skipped", (getter)batch_skipped, NULL, "Samples left out of it (on_error='skip').", NULL},
    {"nbytes", (getter)batch_nbytes, NULL, "Bytes of pixel data.", NULL},
    {"device", (getter)batch_device, NULL, "Where the pixels are: 'cpu' or 'cuda:N'.", NULL},
    {0},
};

/* --- a field of a batch: a view over the batch's memory ------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *owner; /* strong: the Batch whose buffers this views */
    view v;
} FieldViewObject;

static PyTypeObject FieldViewType;

static void fieldview_dealloc(FieldViewObject *self)
{
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static int fieldview_getbuffer(FieldViewObject *self, Py_buffer *b, int flags)
{
    return view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *fieldview_dlpack(FieldViewObject *self, PyObject *args, PyObject *kwargs)
{
    return view_dlpack((PyObject *)self, &self->v, self->owner, args, kwargs);
}

static PyObject *fieldview_dlpack_device(FieldViewObject *self, PyObject *unused)
{
    return view_dlpack_device(&self->v);
}

static PyObject *fieldview_shape(FieldViewObject *self, void *c) { return view_shape_tuple(&self->v); }
static PyObject *fieldview_dtype(FieldViewObject *self, void *c) { return PyUnicode_FromString(kinds[self->v.kind].name); }

static PyMethodDef fieldview_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))fieldview_dlpack, METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule sharing the field's values (keeps the batch alive)."},
    {"__dlpack_device__", (PyCFunction)fieldview_dlpack_device, METH_NOARGS,
     "(1, 0) for CPU memory, (2, N) for the image of a batch on cuda:N."},
    {0},
};

static PyGetSetDef fieldview_getset[] = {
    {"shape", (getter)fieldview_shape, NULL, "Shape, a tuple.", NULL},
    {"dtype", (getter)fieldview_dtype, NULL, "Element type name.", NULL},
    {0},
};

static PyBufferProcs fieldview_as_buffer = {(getbufferproc)fieldview_getbuffer, NULL};

static PyTypeObject FieldViewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._FieldView",
    .tp_doc = "The values of one field of a Batch, exported without copying (buffer protocol, "
              "DLPack); keeps the Batch alive.",
    .tp_basicsize = sizeof(FieldViewObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)fieldview_dealloc,
    .tp_as_buffer = &fieldview_as_buffer,
    .tp_methods = fieldview_methods,
    .tp_getset = fieldview_getset,
};

static int kind_of_elem(stk_elem_type e)
{
    switch (e) {
    case STK_ELEM_U8: return K_U8;
    case STK_ELEM_F16: return K_F16;
    case STK_ELEM_BF16: return K_BF16;
    case STK_ELEM_I64: return K_I64;
    case STK_ELEM_U64: return K_I64; /* indices: exported as int64 (below 2^63) */
    case STK_ELEM_F64: return K_F64;
    default: return K_F32;
    }
}

/* A _FieldView over field f of batch bo (f->ndim <= 4, checked by the
 * callers); an empty field views a static word. */
static PyObject *fieldview_new(BatchObject *bo, const stk_batch_field *f)
{
    FieldViewObject *fv = PyObject_New(FieldViewObject, &FieldViewType);
    if (!fv)
        return NULL;
    fv->owner = Py_NewRef((PyObject *)bo);
    int64_t shape[4];
    int nd = (int)f->ndim;
    for (int d = 0; d < nd; d++)
        shape[d] = f->shape[d];
    static uint64_t empty;
    view_init(&fv->v, f->data ? (void *)f->data : (void *)&empty, kind_of_elem(f->elem), nd,
              shape);
    if (f->role == STK_ROLE_IMAGE && bo->v.dev_type != DL_CPU) { /* the batch's device image */
        fv->v.dev_type = bo->v.dev_type;
        fv->v.dev_id = bo->v.dev_id;
    }
    return (PyObject *)fv;
}

static const char *const role_name[] = {"image", "label",   "index", "path",    "mask",
                                        "boxes", "per_box", "data",  "geometry"};

/* Batch.field(i) -> (name, role, dtype, text, values, offsets): values a
 * _FieldView (zero copy; None when empty), offsets an int64 _Array of
 * size + 1 for variable fields, else None. */
static PyObject *batch_field(BatchObject *self, PyObject *arg)
{
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    LoaderObject *L = self->loader;
    if (self->fork_gen != fork_generation || !L->l) {
        PyErr_SetString(PyExc_RuntimeError, "this batch's loader is closed");
        return NULL;
    }
    stk_batch_field f;
    if (i < 0 || stk_loader_field(L->l, &self->b, (uint32_t)i, &f) < 0) {
        if (i < 0)
            PyErr_SetString(PyExc_IndexError, "field index out of range");
        else
            raise_last(STK_EINVAL);
        return NULL;
    }
    int kind = kind_of_elem(f.elem);
    PyObject *values = Py_None, *offsets = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (f.ndim > 4) {
        PyErr_Format(PyExc_ValueError, "field '%s' has %u dimensions (at most 4 are exported)",
                     f.name, f.ndim);
        goto fail;
    }
    if (f.role == STK_ROLE_LABEL || f.role == STK_ROLE_INDEX) {
        Py_DECREF(values);
        values = (PyObject *)copy_i64(f.data, self->b.size);
        if (!values)
            goto fail;
    } else if (f.data || f.shape[0] == 0) {
        PyObject *fv = fieldview_new(self, &f);
        if (!fv)
            goto fail;
        Py_DECREF(values);
        values = fv;
    }
    if (f.offsets) {
        Py_DECREF(offsets);
        offsets = (PyObject *)copy_i64(f.offsets, self->b.size + 1);
        if (!offsets)
            goto fail;
    }
    return Py_BuildValue("(ssspNN)", f.name, role_name[f.role], kinds[kind].name, f.text, values,
                         offsets);
fail:
    Py_DECREF(values);
    Py_DECREF(offsets);
    return NULL;
}

static PyBufferProcs batch_as_buffer = {(getbufferproc)batch_getbuffer, NULL};
static PySequenceMethods batch_as_sequence = {.sq_length = (lenfunc)batch_len};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker.Batch",
    .tp_doc = "One batch lent by a Loader (output='dlpack' yields these).\n\n"
              "Its pixels are exported without copying through the buffer protocol "
              "(numpy.asarray, memoryview) and DLPack (torch.from_dlpack, numpy.from_dlpack). "
              "Every export keeps the Batch alive; the pooled buffer returns to the loader "
              "when the last reference dies, and is never overwritten before.",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_repr = (reprfunc)batch_repr,
    .tp_as_buffer = &batch_as_buffer,
    .tp_as_sequence = &batch_as_sequence,
    .tp_methods = batch_methods,
    .tp_getset = batch_getset,
};

/* --- iteration ------------------------------------------------------------ */

/* The next batch, waiting with the GIL released in 100 ms slices. Returns 1
 * with *b lent, 0 at the end of the epoch, -1 with an exception set. */
static int loader_wait_next(LoaderObject *L, IterObject *it, stk_batch *b)
{
    int collected = 0;
    for (;;) {
        if (loader_check(L) < 0)
            return -1;
        if (it && it->gen != L->gen) {
            PyErr_SetString(PyExc_RuntimeError,
                            "this iterator is stale: the Loader was restarted since it was made "
                            "(a new iter(), set_epoch(), load_state_dict() or close())");
            return -1;
        }
        int rc;
        stk_loader *l = L->l;
        L->busy = 1;
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_next_timeout(l, b, 100);
        Py_END_ALLOW_THREADS
        L->busy = 0;
        if (rc == 1 || rc == 0)
            return rc;
        if (rc == STK_ETIMEDOUT) {
            if (PyErr_CheckSignals() < 0)
                return -1; /* KeyboardInterrupt; the loader is unchanged */
            continue;
        }
        if (rc == STK_EEXHAUSTED) {
            if (!collected) {
                /* A batch may be kept alive only by a reference cycle. */
                collected = 1;
                L->gc_collects++;
                /* gc.collect(), not PyGC_Collect(): the latter does nothing
                 * while the user has disabled automatic collection. */
                PyObject *r = PyObject_CallMethod(gc_module, "collect", NULL);
                if (!r)
                    return -1;
                Py_DECREF(r);
                continue;
            }
            char msg[512];
            snprintf(msg, sizeof msg,
                     "all %u batch buffers of this Loader are held by Python objects (%zd "
                     "batches alive: tensors/arrays/Batch objects it returned, or views of "
                     "them). Drop references to old batches (copy what you keep, e.g. "
                     "images.clone() or np.array(images)), or create the Loader with a larger "
                     "max_batches= (now %u).",
                     L->max_batches, L->lent, L->max_batches);
            raise_code(STK_EEXHAUSTED, msg);
            return -1;
        }
        raise_last(rc);
        return -1;
    }
}

/* Convert an exporter (Batch or _Array) for output; steals `obj`. */
static PyObject *convert_out(LoaderObject *L, PyObject *obj, const view *v)
{
    if (!obj || L->mode == OUT_OBJECTS)
        return obj;
    PyObject *res;
    if (v->dev_type != DL_CPU) {
        /* A batch in device memory: numpy cannot hold it; torch gets it
         * through from_dlpack(obj), which passes its current stream to
         * __dlpack__ so that the stream waits for the batch. */
        if (L->mode != OUT_CAPSULE || !L->convert_device) {
            PyErr_Format(PyExc_ValueError,
                         "output='numpy' cannot hold a batch in CUDA memory (cuda:%d): use "
                         "output='torch' or output='dlpack' with device=, or device=None for "
                         "host batches",
                         (int)v->dev_id);
            Py_DECREF(obj);
            return NULL;
        }
        res = PyObject_CallOneArg(L->convert_device, obj);
        Py_DECREF(obj);
        return res;
    }
    if (L->mode == OUT_CAPSULE) {
        PyObject *cap = view_capsule(obj, v, 0);
        Py_DECREF(obj);
        if (!cap)
            return NULL;
        res = PyObject_CallOneArg(L->convert, cap);
        Py_DECREF(cap);
    } else {
        res = PyObject_CallOneArg(L->convert, obj);
        Py_DECREF(obj);
    }
    return res;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A variable text or bytes field as a list of str (surrogateescape, like
 * file names) or bytes, one per row. */
static PyObject *text_list(const stk_batch_field *f, uint32_t rows)
{
    PyObject *list = PyList_New(rows);
    if (!list)
        return NULL;
    const char *base = f->data;
    for (uint32_t r = 0; r < rows; r++) {
        size_t a = f->offsets[r], n = f->offsets[r + 1] - a;
        PyObject *o = f->text ? PyUnicode_DecodeUTF8(base ? base + a : "", (Py_ssize_t)n,
                                                    "surrogateescape")
                              : PyBytes_FromStringAndSize(base ? base + a : "", (Py_ssize_t)n);
        if (!o) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, r, o);
    }
    return list;
}

/* A zero-copy view of field f of batch bo, converted for output. */
static PyObject *field_values(LoaderObject *L, BatchObject *bo, const stk_batch_field *f)
{
    FieldViewObject *fv = (FieldViewObject *)fieldview_new(bo, f);
    return fv ? convert_out(L, (PyObject *)fv, &fv->v) : NULL;
}

/* The item of a loader with fields=: one entry per field in order (and the
 * indices last with iter(with_indices=True)); a variable array field is a
 * (values, offsets) pair (loader.py wraps it in stoker.Ragged). Takes bo. */
static PyObject *fields_tuple(LoaderObject *L, IterObject *it, BatchObject *bo)
{
    uint32_t n = stk_loader_field_count(L->l);
    PyObject *t = PyTuple_New((Py_ssize_t)n + (it->with_indices ? 1 : 0));
    if (!t) {
        Py_DECREF(bo);
        return NULL;
    }
    int image_at = -1;
    for (uint32_t i = 0; i < n; i++) {
        stk_batch_field f;
        if (stk_loader_field(L->l, &bo->b, i, &f) < 0) {
            raise_last(STK_EINVAL);
            goto fail;
        }
        PyObject *o = NULL;
        if (f.ndim > 4) {
            PyErr_Format(PyExc_ValueError,
                         "field '%s' has %u dimensions (at most 4 are exported)", f.name, f.ndim);
            goto fail;
        }
        if (f.role == STK_ROLE_IMAGE) {
            image_at = (int)i;
            continue;
        } else if (f.role == STK_ROLE_LABEL || f.role == STK_ROLE_INDEX) {
            ArrayObject *a = copy_i64(f.data, bo->b.size);
            o = a ? convert_out(L, (PyObject *)a, &a->v) : NULL;
        } else if (f.offsets && (f.text || (f.elem == STK_ELEM_U8 && f.ndim == 1))) {
            o = text_list(&f, bo->b.size);
        } else if (f.offsets) {
            ArrayObject *off = copy_i64(f.offsets, bo->b.size + 1);
            PyObject *vals = off ? field_values(L, bo, &f) : NULL;
            PyObject *offs = NULL;
            if (vals) /* not after a failure: its exception is pending */
                offs = convert_out(L, (PyObject *)off, &off->v);
            else
                Py_XDECREF(off);
            if (vals && offs)
                o = PyTuple_Pack(2, vals, offs);
            Py_XDECREF(vals);
            Py_XDECREF(offs);
        } else {
            o = field_values(L, bo, &f);
        }
        if (!o)
            goto fail;
        PyTuple_SET_ITEM(t, i, o);
    }
    if (it->with_indices) {
        ArrayObject *a = copy_i64(bo->b.indices, bo->b.size);
        PyObject *o = a ? convert_out(L, (PyObject *)a, &a->v) : NULL;
        if (!o)
            goto fail;
        PyTuple_SET_ITEM(t, n, o);
    }
    /* The image last: converting it gives bo away. */
    PyObject *images = convert_out(L, (PyObject *)bo, &bo->v);
    bo = NULL;
    if (!images) {
        Py_DECREF(t);
        return NULL;
    }
    PyTuple_SET_ITEM(t, image_at, images);
    return t;
fail:
    Py_DECREF(t);
    Py_XDECREF(bo);
    return NULL;
}

/* The (images, labels[, indices]) item of a loader without fields=. Takes bo. */
static PyObject *plain_tuple(LoaderObject *L, IterObject *it, BatchObject *bo)
{
    ArrayObject *labels = copy_i64(bo->b.labels, bo->b.size);
    ArrayObject *indices = it->with_indices ? copy_i64(bo->b.indices, bo->b.size) : NULL;
    if (!labels || (it->with_indices && !indices)) {
        Py_XDECREF(labels);
        Py_XDECREF(indices);
        Py_DECREF(bo);
        return NULL;
    }
    /* convert_out steals each object; its view is read before the object
     * can die (the capsule holds a reference first). A failed conversion
     * leaves an exception set: nothing may call into Python after it (the
     * next converter would see it pending, a SystemError), so the objects
     * not yet converted are only released. */
    PyObject *images = convert_out(L, (PyObject *)bo, &bo->v);
    PyObject *lab = NULL, *idx = NULL;
    if (!images) {
        Py_DECREF(labels);
        Py_XDECREF(indices);
        return NULL;
    }
    lab = convert_out(L, (PyObject *)labels, &labels->v);
    if (!lab) {
        Py_XDECREF(indices);
    } else if (indices) {
        idx = convert_out(L, (PyObject *)indices, &indices->v);
    }
    if (!images || !lab || (it->with_indices && !idx)) {
        Py_XDECREF(images);
        Py_XDECREF(lab);
        Py_XDECREF(idx);
        return NULL;
    }
    PyObject *t = PyTuple_New(it->with_indices ? 3 : 2);
    if (!t) {
        Py_DECREF(images);
        Py_DECREF(lab);
        Py_XDECREF(idx);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, images);
    PyTuple_SET_ITEM(t, 1, lab);
    if (idx)
        PyTuple_SET_ITEM(t, 2, idx);
    return t;
}

/* What next() yields for the batch bo: the tuple, through the iterator's
 * wrap when it has one. Takes bo. */
static PyObject *build_item(LoaderObject *L, IterObject *it, BatchObject *bo)
{
    uint64_t epoch = bo->b.epoch, position = bo->b.position;
    PyObject *t = L->fields ? fields_tuple(L, it, bo) : plain_tuple(L, it, bo);
    if (!t || !it->wrap)
        return t;
    PyObject *r = PyObject_CallFunction(it->wrap, "OKK", t, (unsigned long long)epoch,
                                        (unsigned long long)position);
    Py_DECREF(t);
    return r;
}

static void iter_stash(IterObject *it, PyObject *obj, int built)
{
    it->stash = obj;
    it->stash_built = built;
    it->loader->stash_gen = it->gen;
}

static PyObject *iter_unstash(IterObject *it)
{
    PyObject *obj = it->stash;
    it->stash = NULL;
    if (it->loader->stash_gen == it->gen)
        it->loader->stash_gen = 0;
    return obj;
}

/* next(). Once the C loader has lent a batch it counts as delivered
 * (state_dict's position moved past it), so from there to the return the
 * batch must reach the caller or stay for the next call. Two things can stop
 * it: the Python code run while building the item (torch's converter, a
 * wrap) can fail, and a signal handler can raise there — Ctrl-C's
 * KeyboardInterrupt — so a failed build keeps the Batch for a rebuild; and a
 * signal that arrived during the build has not run its handler yet (handlers
 * run only at the interpreter's check points), so PyErr_CheckSignals() runs
 * it here, and if it raises, the finished item is kept instead. The item is
 * then returned with no handler pending: a `for` loop stores it before the
 * interpreter checks for signals again. (A bare next(it) call checks right
 * after the call returns, so a signal in the few instructions between our
 * check and that one can still drop the item: CPython's window, not ours.)
 * The kept batch is handed over by the next next() on this iterator;
 * state_dict() does not count it (loader_state_c); a new pass drops it. */
/* Append lent batch b's failed samples (stk_loader_skipped) to L->skipped
 * as (index, path or None, reason). -1 with an exception set. */
static int note_skipped(LoaderObject *L, const stk_batch *b)
{
    if (!b->skipped)
        return 0;
    if (!L->skipped && !(L->skipped = PyList_New(0)))
        return -1;
    stk_dataset *ds = ((DatasetObject *)L->dataset)->ds;
    for (uint32_t i = 0; i < b->skipped; i++) {
        uint64_t index;
        const char *reason;
        char *path = NULL;
        int rc = stk_loader_skipped(L->l, b, i, &index, &reason);
        if (rc < 0) {
            raise_last(rc);
            return -1;
        }
        if (stk_dataset_sample_path(ds, index, &path) < 0)
            path = NULL; /* (a name that cannot be read: None) */
        PyObject *t = Py_BuildValue("(KNN)", (unsigned long long)index,
                                    path ? PyUnicode_DecodeFSDefault(path) : Py_NewRef(Py_None),
                                    PyUnicode_DecodeUTF8(reason, (Py_ssize_t)strlen(reason),
                                                         "replace"));
        stk_free(path);
        if (!t || PyList_Append(L->skipped, t) < 0) {
            Py_XDECREF(t);
            return -1;
        }
        Py_DECREF(t);
    }
    return 0;
}

static PyObject *loader_get_skipped(LoaderObject *self, void *c)
{
    if (!self->skipped && !(self->skipped = PyList_New(0)))
        return NULL;
    return Py_NewRef(self->skipped);
}

static PyObject *iter_next(IterObject *it)
{
    LoaderObject *L = it->loader;
    if (it->done)
        return NULL;
    double asked = monotonic_s(); /* the profile's wait is this whole call */
    BatchObject *bo;
    if (it->stash && it->gen != L->gen)
        Py_DECREF(iter_unstash(it)); /* a stale pass (raises below): back to the pool */
    if (it->stash) {
        if (loader_check(L) < 0)
            return NULL;
        if (it->stash_built) {
            PyObject *item = iter_unstash(it);
            L->delivered += it->stash_rows;
            stk_loader_profile_note(L->l, asked, monotonic_s());
            return item;
        }
        bo = (BatchObject *)iter_unstash(it);
    } else {
        stk_batch b;
        int rc = loader_wait_next(L, it, &b);
        if (rc <= 0) {
            if (rc == 0)
                it->done = 1; /* the C loader moved on to the next epoch */
            return NULL;
        }
        bo = PyObject_New(BatchObject, &BatchType);
        if (!bo) {
            stk_loader_release(L->l, &b);
            return NULL;
        }
        bo->loader = (LoaderObject *)Py_NewRef((PyObject *)L);
        bo->b = b;
        bo->fork_gen = L->fork_gen;
        L->lent++;
        batch_view_init(bo, L->kind);
        if (note_skipped(L, &b) < 0) {
            Py_DECREF(bo);
            return NULL;
        }
    }
    uint32_t rows = bo->b.size;
    PyObject *item = build_item(L, it, (BatchObject *)Py_NewRef((PyObject *)bo));
    if (!item) {
        iter_stash(it, (PyObject *)bo, 0);
        return NULL;
    }
    Py_DECREF(bo);
    if (PyErr_CheckSignals() < 0) {
        iter_stash(it, item, 1);
        it->stash_rows = rows;
        return NULL;
    }
    L->delivered += rows;
    stk_loader_profile_note(L->l, asked, monotonic_s());
    return item;
}

static void iter_dealloc(IterObject *self)
{
    if (self->stash)
        Py_DECREF(iter_unstash(self));
    Py_XDECREF(self->wrap);
    Py_DECREF(self->loader);
    PyObject_Free(self);
}

static PyObject *iter_self(PyObject *self) { return Py_NewRef(self); }

static PyTypeObject IterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._Iterator",
    .tp_doc = "One pass over one epoch of a Loader; yields (images, labels[, indices]).",
    .tp_basicsize = sizeof(IterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_iter = iter_self,
    .tp_iternext = (iternextfunc)iter_next,
};

static int set_epoch_c(LoaderObject *self, uint64_t epoch)
{
    int rc = stk_loader_set_epoch(self->l, epoch);
    if (rc < 0) {
        raise_last(rc);
        return -1;
    }
    return 0;
}

/* Start a pass (see "Epochs" at the top). */
static PyObject *loader_make_iter(LoaderObject *self, int with_indices, PyObject *wrap)
{
    if (loader_check(self) < 0)
        return NULL;
    if (self->resume_pending) {
        self->resume_pending = 0; /* continue where load_state_dict put us */
    } else {
        stk_loader_state st;
        loader_state_c(self, &st);
        if (st.position >= loader_batches(self)) {
            /* Every batch taken but the end not seen: the pass was complete. */
            if (set_epoch_c(self, st.epoch + 1) < 0)
                return NULL;
        } else if (set_epoch_c(self, st.epoch) < 0) {
            /* no-op at position 0 (prefetch kept); restarts an abandoned pass,
             * and clears a failure */
            return NULL;
        }
    }
    IterObject *it = PyObject_New(IterObject, &IterType);
    if (!it)
        return NULL;
    it->loader = (LoaderObject *)Py_NewRef((PyObject *)self);
    it->gen = ++self->gen;
    it->done = 0;
    it->with_indices = with_indices;
    it->wrap = wrap == Py_None ? NULL : Py_XNewRef(wrap);
    it->stash = NULL;
    it->stash_built = 0;
    it->stash_rows = 0;
    return (PyObject *)it;
}

static PyObject *loader_iter(LoaderObject *self) { return loader_make_iter(self, 0, NULL); }

static PyObject *loader_iter_method(LoaderObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"with_indices", "wrap", NULL};
    int with_indices = 0;
    PyObject *wrap = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pO:iter", kwlist, &with_indices, &wrap))
        return NULL;
    if (wrap != Py_None && !PyCallable_Check(wrap)) {
        PyErr_SetString(PyExc_TypeError, "iter(wrap=) must be callable or None");
        return NULL;
    }
    return loader_make_iter(self, with_indices, wrap);
}

static PyObject *loader_set_epoch(LoaderObject *self, PyObject *arg)
{
    uint64_t epoch;
    if (!conv_u64(arg, &epoch) || loader_check(self) < 0)
        return NULL;
    if (self->resume_pending && epoch == self->resume_epoch)
        Py_RETURN_NONE; /* keep the restored mid-epoch position */
    self->resume_pending = 0;
    if (set_epoch_c(self, epoch) < 0)
        return NULL;
    self->gen++;
    Py_RETURN_NONE;
}

static PyObject *loader_state(LoaderObject *self, PyObject *u)
{
    if (loader_alive(self) < 0)
        return NULL;
    stk_loader_state st;
    loader_state_c(self, &st);
    return Py_BuildValue("{sKsKsKsKsIsIsIsisKsKsKsK}", "seed", (unsigned long long)st.seed,
                         "epoch", (unsigned long long)st.epoch, "position",
                         (unsigned long long)st.position, "dataset_size",
                         (unsigned long long)st.dataset_size, "batch_size", st.batch_size,
                         "rank", st.rank, "world_size", st.world_size, "flags", (int)st.flags,
                         "spec_hash", (unsigned long long)st.spec_hash, "start_slot",
                         (unsigned long long)st.start_slot, "block_size",
                         (unsigned long long)st.block_size, "shuffle_window",
                         (unsigned long long)st.shuffle_window);
}

/* A key older states lack: 0 when absent. */
static int dict_u64_or_zero(PyObject *d, const char *key, uint64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    *out = 0;
    return !v || conv_u64(v, out) ? 0 : -1;
}

static int dict_u64(PyObject *d, const char *key, uint64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_KeyError, "state_dict has no '%s'", key);
        return -1;
    }
    return conv_u64(v, out) ? 0 : -1;
}

static PyObject *loader_set_state(LoaderObject *self, PyObject *d)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "load_state_dict expects a dict from state_dict()");
        return NULL;
    }
    if (loader_check(self) < 0)
        return NULL;
    uint64_t seed, epoch, position, size, batch, rank, world, flags, spec_hash;
    uint64_t start_slot, block_size, window;
    if (dict_u64(d, "seed", &seed) < 0 || dict_u64(d, "epoch", &epoch) < 0 ||
        dict_u64(d, "position", &position) < 0 || dict_u64(d, "dataset_size", &size) < 0 ||
        dict_u64(d, "batch_size", &batch) < 0 || dict_u64(d, "rank", &rank) < 0 ||
        dict_u64(d, "world_size", &world) < 0 || dict_u64(d, "flags", &flags) < 0 ||
        dict_u64_or_zero(d, "start_slot", &start_slot) < 0 ||
        dict_u64_or_zero(d, "block_size", &block_size) < 0 ||
        dict_u64_or_zero(d, "shuffle_window", &window) < 0)
        return NULL;
    /* Without a spec hash (deleted on purpose, to resume under another
     * pipeline), take this loader's own. */
    if (PyDict_GetItemString(d, "spec_hash")) {
        if (dict_u64(d, "spec_hash", &spec_hash) < 0)
            return NULL;
    } else {
        stk_loader_state mine;
        stk_loader_state_get(self->l, &mine);
        spec_hash = mine.spec_hash;
    }
    if (batch > UINT32_MAX || rank > UINT32_MAX || world > UINT32_MAX || flags > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "state_dict has out-of-range fields");
        return NULL;
    }
    stk_loader_state st = {.seed = seed, .epoch = epoch, .position = position,
                           .dataset_size = size, .batch_size = (uint32_t)batch,
                           .rank = (uint32_t)rank, .world_size = (uint32_t)world,
                           .flags = (int32_t)flags, .spec_hash = spec_hash,
                           .start_slot = start_slot, .block_size = block_size,
                           .shuffle_window = window};
    int rc = stk_loader_state_set(self->l, &st);
    if (rc < 0)
        return raise_last(rc);
    self->resume_pending = 1;
    self->resume_epoch = epoch;
    self->gen++;
    Py_RETURN_NONE;
}

static PyObject *loader_warmup(LoaderObject *self, PyObject *u)
{
    (void)u;
    if (loader_check(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_start(self->l);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    Py_RETURN_NONE;
}

static PyObject *loader_stats(LoaderObject *self, PyObject *u)
{
    if (loader_alive(self) < 0)
        return NULL;
    stk_loader_stats s;
    stk_loader_stats_get(self->l, &s);
    PyObject *d = Py_BuildValue(
        "{sKsKsKsdsdsdsdsIsKsKsnsKsdsdsdsKsIsIsKsKsI}", "samples", (unsigned long long)s.samples,
        "batches", (unsigned long long)s.batches, "skipped", (unsigned long long)s.skipped,
        "read_s", s.read_s, "augment_s", s.augment_s, "worker_idle_s", s.idle_s,
        "consumer_wait_s", s.wait_s, "batches_allocated", s.batches_allocated, "pool_bytes",
        (unsigned long long)s.pool_bytes, "pool_exhausted", (unsigned long long)s.pool_exhausted,
        "batches_alive", self->lent, "gc_collects", (unsigned long long)self->gc_collects,
        "decode_s", s.decode_s, "collate_s", s.collate_s, "consumer_step_s", s.step_s,
        "memory_bytes", (unsigned long long)s.memory_bytes, "threads", s.threads, "prefetch",
        s.prefetch, "decisions", (unsigned long long)s.decisions, "gpu_head_rows",
        (unsigned long long)s.gpu_head_rows, "gpu_decode_cpu_rows", s.gpu_decode_cpu_rows);
    /* "samples" counts what the workers wrote, prefetched batches included;
     * "delivered" only the rows next() handed over. */
    PyObject *n = d ? PyLong_FromUnsignedLongLong(self->delivered) : NULL;
    if (!n || PyDict_SetItemString(d, "delivered", n) < 0)
        Py_CLEAR(d);
    Py_XDECREF(n);
    return d;
}

static PyObject *loader_device_info(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (loader_alive(self) < 0)
        return NULL;
    return PyUnicode_FromString(stk_loader_device_info(self->l));
}

static PyObject *loader_device_timing(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (loader_alive(self) < 0)
        return NULL;
    stk_device_timing t;
    if (stk_loader_device_timing(self->l, &t) < 0)
        Py_RETURN_NONE; /* no device, or no kernels to time (copy mode) */
    return Py_BuildValue("{sKsKsKsdsKsd}", "batches", (unsigned long long)t.batches, "launches",
                         (unsigned long long)t.launches, "fused_batches",
                         (unsigned long long)t.fused_batches, "kernel_s", t.kernel_s,
                         "decode_batches", (unsigned long long)t.decode_batches, "decode_s",
                         t.decode_s);
}

static PyObject *loader_profile(LoaderObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"reset", NULL};
    int reset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:profile", kwlist, &reset))
        return NULL;
    if (loader_alive(self) < 0)
        return NULL;
    stk_loader_profile p;
    stk_loader_profile_get(self->l, &p);
    if (reset)
        stk_loader_profile_reset(self->l);
    const char *bound = stk_bound_name(p.bound), *stage = stk_stage_name(p.stage);
    return Py_BuildValue(
        "{sKsK" "sdsdsdsd" "sdsdsdsd" "sdsdsd" "s{sdsdsdsd}" "sdsdsdsd" "sIsI" "ssssss}", "batches",
        (unsigned long long)p.batches, "samples", (unsigned long long)p.samples, "wall_s",
        p.wall_s, "wait_s", p.wait_s, "step_s", p.step_s, "data_share", p.data_share,
        "wait_p50_s", p.wait_p50_s, "wait_p90_s", p.wait_p90_s, "wait_p99_s", p.wait_p99_s,
        "wait_max_s", p.wait_max_s, "step_p50_s", p.step_p50_s, "step_p90_s", p.step_p90_s,
        "step_p99_s", p.step_p99_s, "stages_s", "read", p.read_s, "decode", p.decode_s,
        "augment", p.augment_s, "collate", p.collate_s, "workers_busy", p.busy, "queue_mean",
        p.queue_mean, "images_per_s", p.images_per_s, "cpus", p.cpus, "threads", p.threads,
        "prefetch", p.prefetch, "bound", bound, "stage", stage, "verdict", p.verdict);
}

/* _profile_note(asked, handed): the consumer's own span for the batch it
 * took last, in time.monotonic() seconds (CLOCK_MONOTONIC, the clock the
 * library times with): the Python layer's per-batch steps (batch_transform,
 * BatchOp) count as the wait of that batch, as if inside next(). Repeated
 * calls for one batch extend it (stk_loader_profile_note). */
static PyObject *loader_profile_note(LoaderObject *self, PyObject *args)
{
    double asked, handed;
    if (!PyArg_ParseTuple(args, "dd:_profile_note", &asked, &handed))
        return NULL;
    if (loader_alive(self) < 0)
        return NULL;
    stk_loader_profile_note(self->l, asked, handed);
    Py_RETURN_NONE;
}

static PyObject *loader_profile_events(LoaderObject *self, PyObject *u)
{
    if (loader_alive(self) < 0)
        return NULL;
    stk_loader_event *ev = PyMem_Malloc(4096 * sizeof *ev);
    if (!ev)
        return PyErr_NoMemory();
    size_t n = stk_loader_profile_events(self->l, ev, 4096);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(dddIII)", ev[i].t, (double)ev[i].wait_s,
                                    (double)ev[i].step_s, (unsigned)ev[i].ready,
                                    (unsigned)ev[i].threads, (unsigned)ev[i].prefetch);
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    PyMem_Free(ev);
    return list;
}

static PyObject *loader_set_knob(LoaderObject *self, PyObject *args)
{
    const char *knob;
    unsigned long v;
    if (!PyArg_ParseTuple(args, "sk:_set_knob", &knob, &v))
        return NULL;
    if (loader_alive(self) < 0)
        return NULL;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %lu is too large", knob, v);
        return NULL;
    }
    int rc = !strcmp(knob, "threads") ? stk_loader_set_threads(self->l, (uint32_t)v)
                                      : stk_loader_set_prefetch(self->l, (uint32_t)v);
    if (rc < 0)
        return raise_last(rc);
    Py_RETURN_NONE;
}

static PyObject *loader_decisions(LoaderObject *self, PyObject *arg)
{
    unsigned long long since = PyLong_AsUnsignedLongLong(arg);
    if (since == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (loader_alive(self) < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    char buf[256];
    for (uint64_t n = since; list; n++) {
        int rc = stk_loader_decision(self->l, n, buf, sizeof buf);
        if (rc == 0)
            break;
        if (rc < 0)
            continue; /* older than the ring: skipped */
        PyObject *str = PyUnicode_FromString(buf);
        if (!str || PyList_Append(list, str) < 0)
            Py_CLEAR(list);
        Py_XDECREF(str);
    }
    return list;
}

static PyObject *loader_close(LoaderObject *self, PyObject *u)
{
    if (self->closed)
        Py_RETURN_NONE;
    if (self->fork_gen == fork_generation && self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "cannot close a Loader another thread is waiting on");
        return NULL;
    }
    self->closed = 1;
    self->gen++;
    if (self->lent == 0)
        loader_destroy_c(self);
    Py_RETURN_NONE;
}

static PyObject *loader_reduce(LoaderObject *self, PyObject *args)
{
    PyErr_SetString(PyExc_TypeError,
                    "a stoker Loader cannot be pickled or copied: it owns native threads and "
                    "buffers. Create one Loader per process from its arguments instead.");
    return NULL;
}

static PyObject *loader_get_epoch(LoaderObject *self, void *c)
{
    if (loader_alive(self) < 0)
        return NULL;
    if (self->resume_pending)
        return PyLong_FromUnsignedLongLong(self->resume_epoch);
    stk_loader_state st;
    loader_state_c(self, &st);
    uint64_t e = st.position >= loader_batches(self) ? st.epoch + 1 : st.epoch;
    return PyLong_FromUnsignedLongLong(e);
}

static PyObject *loader_get_sample_shape(LoaderObject *self, void *c)
{
    return Py_BuildValue("(LLL)", (long long)self->sample_shape[0],
                         (long long)self->sample_shape[1], (long long)self->sample_shape[2]);
}

static PyObject *loader_get_dtype(LoaderObject *self, void *c) { return PyUnicode_FromString(kinds[self->kind].name); }
static PyObject *loader_get_layout(LoaderObject *self, void *c) { return PyUnicode_FromString(self->layout == STK_CHW ? "NCHW" : "NHWC"); }
static PyObject *loader_get_closed(LoaderObject *self, void *c) { return PyBool_FromLong(self->closed); }
static PyObject *loader_get_dataset(LoaderObject *self, void *c) { return Py_NewRef(self->dataset); }
static PyObject *loader_get_max_batches(LoaderObject *self, void *c) { return PyLong_FromUnsignedLong(self->max_batches); }

/* fields() -> [(name, role, dtype, variable, text, shape)]: what each
 * item of an iteration holds (shape: per row, or per value row of a
 * variable field). */
static PyObject *loader_fields(LoaderObject *self, PyObject *unused)
{
    if (loader_check(self) < 0)
        return NULL;
    uint32_t n = stk_loader_field_count(self->l);
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        stk_batch_field f;
        if (stk_loader_field(self->l, NULL, i, &f) < 0) {
            Py_DECREF(list);
            return raise_last(STK_EINVAL);
        }
        int kind = f.role == STK_ROLE_IMAGE ? self->kind : kind_of_elem(f.elem);
        PyObject *shape = PyTuple_New(f.ndim > 0 ? f.ndim - 1 : 0);
        if (!shape) {
            Py_DECREF(list);
            return NULL;
        }
        for (uint32_t d = 1; d < f.ndim; d++)
            PyTuple_SET_ITEM(shape, d - 1, PyLong_FromLongLong(f.shape[d]));
        PyObject *e = Py_BuildValue("(sssiiN)", f.name, role_name[f.role], kinds[kind].name,
                                    f.shape[0] == -1,
                                    f.text, shape);
        if (!e) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, e);
    }
    return list;
}

static PyMethodDef loader_methods[] = {
    {"fields", (PyCFunction)loader_fields, METH_NOARGS,
     "fields() -> [(name, role, dtype, variable, text, shape)]: the fields of each batch."},
    {"iter", (PyCFunction)(void (*)(void))loader_iter_method, METH_VARARGS | METH_KEYWORDS,
     "iter(with_indices=False, wrap=None)\n--\n\nStart a pass over the current epoch; yields "
     "(images, labels) or (images, labels, indices), or wrap(that, epoch, position)."},
    {"set_epoch", (PyCFunction)loader_set_epoch, METH_O,
     "set_epoch(epoch)\n--\n\nMove to the start of `epoch` (keeps a position restored by "
     "set_state for that same epoch)."},
    {"state", (PyCFunction)loader_state, METH_NOARGS, "The resumable state, a dict."},
    {"set_state", (PyCFunction)loader_set_state, METH_O,
     "set_state(dict)\n--\n\nRestore a state(); the next iter() continues from it."},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "Counters and per-stage times, a dict."},
    {"device_info", (PyCFunction)loader_device_info, METH_NOARGS,
     "With a CUDA device: what runs where (mode, reason, JPEG decoder); '' without."},
    {"device_timing", (PyCFunction)loader_device_timing, METH_NOARGS,
     "Device time of the GPU work of the batches timed so far, a dict; None without."},
    {"profile", (PyCFunction)(void (*)(void))loader_profile, METH_VARARGS | METH_KEYWORDS,
     "profile(reset=False)\n--\n\nThe data-stall profile of the window, a dict."},
    {"profile_events", (PyCFunction)loader_profile_events, METH_NOARGS,
     "The window's last batches: (t, wait_s, step_s, ready, threads, prefetch) tuples."},
    {"_profile_note", (PyCFunction)loader_profile_note, METH_VARARGS,
     "_profile_note(asked, handed)\n--\n\nCount [asked, handed] (time.monotonic()) as the wait "
     "of the batch taken last (the Python layer's per-batch steps)."},
    {"_set_knob", (PyCFunction)loader_set_knob, METH_VARARGS, "_set_knob('threads'|'prefetch', n)"},
    {"decisions", (PyCFunction)loader_decisions, METH_O,
     "decisions(since)\n--\n\nThe autotuner's decisions numbered since.. (texts)."},
    {"warmup", (PyCFunction)loader_warmup, METH_NOARGS,
     "warmup()\n--\n\nStart the workers and the batch pool now (a Loader is lazy: it "
     "starts them at the first iteration otherwise)."},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "Stop the workers; the buffers are freed when the last batch dies."},
    {"__reduce_ex__", (PyCFunction)loader_reduce, METH_VARARGS, "Loaders cannot be pickled."},
    {0},
};

static PyGetSetDef loader_getset[] = {
    {"epoch", (getter)loader_get_epoch, NULL, "The epoch the next iter() delivers.", NULL},
    {"sample_shape", (getter)loader_get_sample_shape, NULL, "Per-sample output shape.", NULL},
    {"dtype", (getter)loader_get_dtype, NULL, "Output element type name.", NULL},
    {"layout", (getter)loader_get_layout, NULL, "'NCHW' or 'NHWC'.", NULL},
    {"closed", (getter)loader_get_closed, NULL, "Whether close() was called.", NULL},
    {"dataset", (getter)loader_get_dataset, NULL, "The Dataset it reads.", NULL},
    {"max_batches", (getter)loader_get_max_batches, NULL, "Cap on batch buffers.", NULL},
    {"skipped", (getter)loader_get_skipped, NULL,
     "(index, path, reason) of every sample that failed to read in the batches taken "
     "(on_error='skip' or 'replace'), in order; a list you may clear.", NULL},
    {0},
};

static PySequenceMethods loader_as_sequence = {.sq_length = (lenfunc)loader_len};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._stoker._Loader",
    .tp_doc = "_Loader(dataset, spec, *, batch_size, threads, prefetch, max_batches, seed, "
              "shuffle, drop_last, rank, world_size, on_error, output, convert, block, "
              "block_size, shuffle_window)\n--\n\n"
              "The native loader behind stoker.Loader (use that).",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = loader_new,
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_as_sequence = &loader_as_sequence,
    .tp_iter = (getiterfunc)loader_iter,
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
};

/* ------------------------------------------------------------------------ */
/* Module                                                                    */
/* ------------------------------------------------------------------------ */

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(stk_strerror(code < INT_MIN || code > INT_MAX ? 1 : (int)code));
}

static PyObject *mod_spec_check(PyObject *m, PyObject *args)
{
    const char *spec;
    uint32_t h, w, c;
    if (!PyArg_ParseTuple(args, "sO&O&O&:spec_check", &spec, conv_u32, &h, conv_u32, &w,
                          conv_u32, &c))
        return NULL;
    int64_t shape[3];
    stk_dtype dtype;
    stk_layout layout;
    int rc = stk_spec_check(spec, h, w, c, shape, &dtype, &layout);
    if (rc < 0)
        return raise_last(rc);
    return Py_BuildValue("((LLL)ss)", (long long)shape[0], (long long)shape[1], (long long)shape[2],
                         kinds[kind_of_dtype(dtype)].name, layout == STK_CHW ? "CHW" : "HWC");
}

static PyObject *mod_spec_validate(PyObject *m, PyObject *arg)
{
    const char *spec = PyUnicode_AsUTF8(arg);
    if (!spec)
        return NULL;
    int rc = stk_spec_validate(spec);
    if (rc < 0)
        return raise_last(rc);
    Py_RETURN_NONE;
}

/* op_table(): the op table as stk_op_describe gives it, one tuple per op:
 * (name, aliases, usage, torchvision, params): aliases '|'-separated or
 * None, torchvision the class name or None, params None (the op parses its own
 * arguments) or a tuple of (name, whole, required, lo, hi, default). The
 * transform classes of python/stoker/transforms.py are generated from it. */
static PyObject *mod_op_table(PyObject *m, PyObject *unused)
{
    int n = stk_op_describe(-1, NULL);
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (int i = 0; i < n; i++) {
        stk_op_info info = {0};
        stk_op_describe(i, &info);
        PyObject *params = Py_None;
        Py_INCREF(params);
        if (info.nparams >= 0) {
            Py_DECREF(params);
            params = PyTuple_New(info.nparams);
            for (int k = 0; params && k < info.nparams; k++) {
                const stk_op_param *p = &info.params[k];
                PyObject *t = Py_BuildValue("(sOOddd)", p->name, p->whole ? Py_True : Py_False,
                                            p->required ? Py_True : Py_False, p->lo, p->hi,
                                            p->def);
                if (!t) {
                    Py_CLEAR(params);
                    break;
                }
                PyTuple_SET_ITEM(params, k, t);
            }
        }
        PyObject *row = params ? Py_BuildValue("(szszN)", info.name, info.aliases,
                                               info.usage ? info.usage : "", info.torchvision,
                                               params)
                               : NULL;
        if (!row || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

/* pack: stk_pack with the GIL released; skipped inputs are collected in C
 * (the callback runs without the GIL) and returned as a list. */
typedef struct pack_skips {
    char **reasons;
    uint64_t *indices;
    size_t n, cap;
    int oom;
} pack_skips;

static void pack_on_skip(void *ctx, uint64_t index, const char *reason)
{
    pack_skips *k = ctx;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 16;
        char **r = realloc(k->reasons, cap * sizeof *r);
        if (r)
            k->reasons = r;
        uint64_t *ix = realloc(k->indices, cap * sizeof *ix);
        if (ix)
            k->indices = ix;
        if (!r || !ix) {
            k->oom = 1;
            return;
        }
        k->cap = cap;
    }
    k->reasons[k->n] = strdup(reason);
    k->indices[k->n] = index;
    if (!k->reasons[k->n]) {
        k->oom = 1;
        return;
    }
    k->n++;
}

static PyObject *mod_pack(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"src", "dest", "shard_bytes", "jobs", "mode", "zstd_level",
                             "strict", "validate", "max_side", "quality", "restart", NULL};
    const char *src, *dest, *mode = "keep";
    unsigned long long shard_bytes = 0;
    unsigned int jobs = 0, max_side = 0, restart = 0;
    int zstd_level = 0, strict = 0, validate = 1, quality = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|KIsippIiI:pack", kwlist, &src, &dest,
                                     &shard_bytes, &jobs, &mode, &zstd_level, &strict, &validate,
                                     &max_side, &quality, &restart))
        return NULL;
    stk_pack_options o = {.shard_bytes = shard_bytes, .jobs = jobs, .zstd_level = zstd_level,
                          .strict = strict, .no_validate = !validate, .max_side = max_side,
                          .quality = quality, .restart_interval = restart};
    if (!strcmp(mode, "keep"))
        o.mode = STK_PACK_KEEP;
    else if (!strcmp(mode, "raw"))
        o.mode = STK_PACK_RAW;
    else if (!strcmp(mode, "reencode"))
        o.mode = STK_PACK_REENCODE;
    else {
        PyErr_Format(PyExc_ValueError, "pack: mode must be 'keep', 'raw' or 'reencode', got '%s'",
                     mode);
        return NULL;
    }
    pack_skips k = {0};
    o.on_skip = pack_on_skip;
    o.ctx = &k;
    stk_pack_result r = {0};
    int rc;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_pack(src, dest, &o, &r);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_errmsg());
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *list = NULL;
    if (rc < 0) {
        raise_code(rc, msg);
        goto done;
    }
    if (k.oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(list = PyList_New((Py_ssize_t)k.n)))
        goto done;
    for (size_t i = 0; i < k.n; i++) {
        /* UINT64_MAX: an input that is not one sample (a directory). */
        PyObject *why = message_str(k.reasons[i]);
        PyObject *t = !why ? NULL
                      : k.indices[i] == UINT64_MAX
                          ? Py_BuildValue("(ON)", Py_None, why)
                          : Py_BuildValue("(KN)", (unsigned long long)k.indices[i], why);
        if (!t)
            goto done;
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    result = Py_BuildValue("{sKsKsIsKsKsO}", "records", (unsigned long long)r.records, "skipped",
                           (unsigned long long)r.skipped, "shards", r.shards, "bytes",
                           (unsigned long long)r.bytes, "restarted",
                           (unsigned long long)r.restarted, "skipped_inputs", list);
done:
    Py_XDECREF(list);
    for (size_t i = 0; i < k.n; i++)
        free(k.reasons[i]);
    free(k.reasons);
    free(k.indices);
    return result;
}

/* ------------------------------------------------------------------------ */
/* _ShardWriter: stk_shard_writer (python/stoker/writer.py adds the rest)   */
/* ------------------------------------------------------------------------ */

/*
 * _ShardWriter(dest, fields, records_per_shard, shard_bytes, class_names,
 * metadata): fields is a list of (name, type code, dims tuple, zstd level);
 * class_names a list of str (or None); metadata a list of (key, value) str
 * pairs. add(values) takes one object per field, each with the buffer
 * protocol: the bytes of an image, bytes or string field (UTF-8), a
 * C-contiguous 3-d uint8 buffer (H, W, C) for a raw image, a C-contiguous
 * buffer of int64 or float32 values for an array (the Python layer
 * converts and checks types first; the library checks the rest, naming
 * record and field). The GIL is released while a record is written; a
 * writer used from two threads at once raises StateError. finish() returns
 * {records, shards, bytes}; abort() removes what was written. Both leave
 * the object closed; the finalizer aborts a writer never finished.
 */
typedef struct ShardWriterObject {
    PyObject_HEAD
    stk_shard_writer *w; /* owned; NULL once finished or aborted */
    uint32_t nfields;
    stk_field_type types[64];
    int busy;            /* a call holds w with the GIL released (read and set under the GIL) */
} ShardWriterObject;

static PyTypeObject ShardWriterType;

static int writer_usable(ShardWriterObject *self)
{
    if (!self->w) {
        PyErr_SetString(code_exc[-STK_ESTATE], "the ShardWriter is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(code_exc[-STK_ESTATE], "the ShardWriter is in use by another thread");
        return 0;
    }
    return 1;
}

/* utf-8 of a str item, or NULL with an exception set. */
static const char *utf8_of(PyObject *o, const char *what)
{
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8(o);
}

static PyObject *shard_writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"dest", "fields", "records_per_shard", "shard_bytes", "class_names",
                             "metadata", NULL};
    const char *dest;
    PyObject *fields, *classes = Py_None, *meta = Py_None;
    unsigned long long per_shard = 0, shard_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO!|KKOO:_ShardWriter", kwlist, &dest,
                                     &PyList_Type, &fields, &per_shard, &shard_bytes, &classes,
                                     &meta))
        return NULL;
    Py_ssize_t nf = PyList_GET_SIZE(fields);
    if (nf < 1 || nf > 64) {
        PyErr_Format(PyExc_ValueError, "a shard has 1 to 64 fields, got %zd", nf);
        return NULL;
    }
    stk_shard_field f[64];
    memset(f, 0, sizeof f);
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *dims;
        int t, level;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, i), "siO!i;a field is (name, type, dims, "
                              "zstd_level)", &f[i].name, &t, &PyTuple_Type, &dims, &level))
            return NULL;
        f[i].type = (stk_field_type)t;
        f[i].zstd_level = level;
        Py_ssize_t nd = PyTuple_GET_SIZE(dims);
        if (nd > 4) {
            PyErr_Format(PyExc_ValueError, "field '%s': %zd dimensions (at most 4)", f[i].name, nd);
            return NULL;
        }
        f[i].ndim = (uint32_t)nd;
        for (Py_ssize_t d = 0; d < nd; d++)
            if (!conv_u32(PyTuple_GET_ITEM(dims, d), &f[i].dims[d]))
                return NULL;
    }
    /* Class names and metadata as C strings: borrowed from the list items,
     * which live until create returns (it copies them). */
    PyObject *cl = NULL, *ml = NULL, *result = NULL;
    const char **names = NULL, **kv = NULL;
    stk_shard_writer_options o = {.records_per_shard = per_shard, .shard_bytes = shard_bytes};
    if (classes != Py_None) {
        if (!(cl = PySequence_Fast(classes, "class_names must be a sequence of str")))
            goto done;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(cl);
        if (!(names = PyMem_Calloc((size_t)n + 1, sizeof *names))) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (!(names[i] = utf8_of(PySequence_Fast_GET_ITEM(cl, i), "a class name")))
                goto done;
        o.class_names = names;
        o.num_classes = (uint32_t)n;
    }
    if (meta != Py_None) {
        if (!(ml = PySequence_Fast(meta, "metadata must be a sequence of (key, value) pairs")))
            goto done;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(ml);
        if (!(kv = PyMem_Calloc(2 * (size_t)n + 1, sizeof *kv))) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(ml, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "metadata must be (key, value) pairs of str");
                goto done;
            }
            if (!(kv[2 * i] = utf8_of(PyTuple_GET_ITEM(pair, 0), "a metadata key")) ||
                !(kv[2 * i + 1] = utf8_of(PyTuple_GET_ITEM(pair, 1), "a metadata value")))
                goto done;
        }
        o.metadata = kv;
        o.nmetadata = (uint32_t)n;
    }
    stk_shard_writer *w = NULL;
    int rc;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_shard_writer_create(dest, f, (uint32_t)nf, &o, &w);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        raise_code(rc, msg);
        goto done;
    }
    ShardWriterObject *self = (ShardWriterObject *)type->tp_alloc(type, 0);
    if (!self) {
        stk_shard_writer_abort(w);
        goto done;
    }
    self->w = w;
    self->nfields = (uint32_t)nf;
    for (Py_ssize_t i = 0; i < nf; i++)
        self->types[i] = f[i].type;
    result = (PyObject *)self;
done:
    PyMem_Free(names);
    PyMem_Free(kv);
    Py_XDECREF(cl);
    Py_XDECREF(ml);
    return result;
}

static PyObject *shard_writer_add(ShardWriterObject *self, PyObject *values)
{
    if (!writer_usable(self))
        return NULL;
    if (!PyTuple_Check(values) || PyTuple_GET_SIZE(values) != (Py_ssize_t)self->nfields) {
        PyErr_Format(PyExc_ValueError, "add takes a tuple of %u values", self->nfields);
        return NULL;
    }
    Py_buffer views[64];
    stk_field_value v[64];
    uint32_t taken = 0;
    PyObject *result = NULL;
    memset(v, 0, sizeof v);
    for (; taken < self->nfields; taken++) {
        uint32_t i = taken;
        stk_field_type t = self->types[i];
        int flags = t == STK_FIELD_RAW_IMAGE ? PyBUF_ND | PyBUF_FORMAT : PyBUF_C_CONTIGUOUS;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(values, i), &views[i], flags) < 0)
            goto done;
        v[i].data = views[i].buf;
        v[i].size = (size_t)views[i].len;
        if (t == STK_FIELD_RAW_IMAGE) {
            Py_buffer *b = &views[i];
            if (b->ndim != 3 || b->itemsize != 1) {
                PyBuffer_Release(b);
                PyErr_Format(PyExc_ValueError, "value %u: a raw image is a 3-d uint8 buffer", i);
                goto done;
            }
            for (int d = 0; d < 3; d++)
                v[i].shape[d] = b->shape[d] > UINT32_MAX ? 0 : (uint32_t)b->shape[d];
        }
    }
    int rc;
    char msg[1024] = "";
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_shard_writer_add(self->w, v);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_errmsg());
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0)
        raise_code(rc, msg);
    else
        result = Py_NewRef(Py_None);
done:
    for (uint32_t i = 0; i < taken; i++)
        PyBuffer_Release(&views[i]);
    return result;
}

static PyObject *shard_writer_finish(ShardWriterObject *self, PyObject *unused)
{
    if (!writer_usable(self))
        return NULL;
    stk_shard_writer *w = self->w;
    self->w = NULL; /* finish frees it, success or not */
    stk_pack_result r = {0};
    int rc;
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_shard_writer_finish(w, &r);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_code(rc, msg);
    return Py_BuildValue("{sKsIsK}", "records", (unsigned long long)r.records, "shards", r.shards,
                         "bytes", (unsigned long long)r.bytes);
}

static PyObject *shard_writer_abort(ShardWriterObject *self, PyObject *unused)
{
    if (self->busy) {
        PyErr_SetString(code_exc[-STK_ESTATE], "the ShardWriter is in use by another thread");
        return NULL;
    }
    stk_shard_writer *w = self->w;
    self->w = NULL;
    Py_BEGIN_ALLOW_THREADS
    stk_shard_writer_abort(w);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *shard_writer_records(ShardWriterObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(stk_shard_writer_records(self->w));
}

static PyObject *shard_writer_closed(ShardWriterObject *self, void *c)
{
    return PyBool_FromLong(self->w == NULL);
}

static void shard_writer_dealloc(ShardWriterObject *self)
{
    stk_shard_writer_abort(self->w); /* never finished: nothing is left */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef shard_writer_methods[] = {
    {"add", (PyCFunction)shard_writer_add, METH_O,
     "add(values): one record, a tuple of one buffer per field (the GIL is released)."},
    {"finish", (PyCFunction)shard_writer_finish, METH_NOARGS,
     "finish(): put the shards in place; returns {records, shards, bytes}."},
    {"abort", (PyCFunction)shard_writer_abort, METH_NOARGS,
     "abort(): remove everything written; the writer is closed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef shard_writer_getset[] = {
    {"records", (getter)shard_writer_records, NULL, "Records added so far (0 once closed).", NULL},
    {"closed", (getter)shard_writer_closed, NULL, "True once finished or aborted.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ShardWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._stoker._ShardWriter",
    .tp_basicsize = sizeof(ShardWriterObject),
    .tp_dealloc = (destructor)shard_writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C half of stoker.ShardWriter (stk_shard_writer).",
    .tp_methods = shard_writer_methods,
    .tp_getset = shard_writer_getset,
    .tp_new = shard_writer_new,
};

/* doctor(uri, pipeline, step_ms, batch_size, samples, time_budget, readers,
 * cores, seed): stk_doctor_run, its report returned as the JSON text of
 * stk_doctor_render (stoker.doctor parses it: one source for the CLI's
 * --json and Python's dict). The GIL is released while measuring. */
static PyObject *mod_doctor(PyObject *m, PyObject *args)
{
    const char *uri, *spec;
    double step_ms = 0, budget = 0;
    unsigned int batch = 0, samples = 0, readers = 0, cores = 0;
    unsigned long long seed = 0;
    if (!PyArg_ParseTuple(args, "ssdIIdIIK:doctor", &uri, &spec, &step_ms, &batch, &samples,
                          &budget, &readers, &cores, &seed))
        return NULL;
    stk_doctor_options o = {.samples = samples, .batch_size = batch, .step_ms = step_ms,
                            .time_budget_s = budget, .readers = readers, .max_cores = cores,
                            .seed = seed};
    stk_doctor_report *r = PyMem_RawCalloc(1, sizeof *r);
    if (!r)
        return PyErr_NoMemory();
    char *text = NULL;
    char msg[1024] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_doctor_run(uri, spec, &o, r);
    if (rc == 0)
        rc = stk_doctor_render(r, uri, spec, 1, &text);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_errmsg());
    Py_END_ALLOW_THREADS
    PyMem_RawFree(r);
    if (rc < 0) {
        raise_code(rc, msg);
        return NULL;
    }
    PyObject *result = PyUnicode_FromString(text);
    stk_free(text);
    return result;
}

#ifdef STK_HAVE_CLI
/* The `stoker` tool (cli/main.c), compiled into this module without its
 * main() (STK_CLI_NO_MAIN): the console script and `python -m stoker` run
 * the same C code as the CMake-built tool. */
int stk_cli_main(int argc, char **argv);

/* cli_main(argv): argv as a list of str (or bytes/path-like), argv[0] the
 * program name; returns the exit status. Each argument is encoded as the
 * file system encoding does (os.fsencode: undecodable file names survive
 * through surrogateescape). The tool writes to the process's stdout/stderr
 * with C stdio, flushed before returning; the GIL is released meanwhile. */
static PyObject *mod_cli_main(PyObject *m, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "cli_main: expected a list of str (argv)");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n >= INT_MAX) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError,
                        "cli_main: argv must hold the program name and at most INT_MAX-2 arguments");
        return NULL;
    }
    PyObject **bytes = PyMem_Calloc((size_t)n, sizeof *bytes);
    char **argv = PyMem_Calloc((size_t)n + 1, sizeof *argv);
    PyObject *result = NULL;
    if (!bytes || !argv) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes[i]))
            goto done; /* TypeError, or ValueError for an embedded NUL */
        argv[i] = PyBytes_AS_STRING(bytes[i]);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_cli_main((int)n, argv);
    fflush(stdout);
    fflush(stderr);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(rc);
done:
    if (bytes)
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(bytes[i]);
    PyMem_Free(bytes);
    PyMem_Free(argv);
    Py_DECREF(seq);
    return result;
}
#endif

/* remote_configure(cache_dir=None, cache_limit=-1): stk_remote_configure. */
static PyObject *mod_remote_configure(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"cache_dir", "cache_limit", NULL};
    PyObject *dir = Py_None;
    long long limit = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OL", names, &dir, &limit))
        return NULL;
    PyObject *bytes = NULL;
    if (dir != Py_None && !PyUnicode_FSConverter(dir, &bytes))
        return NULL;
    int rc = stk_remote_configure(bytes ? PyBytes_AS_STRING(bytes) : NULL,
                                  limit < 0 ? UINT64_MAX : (uint64_t)limit);
    Py_XDECREF(bytes);
    if (rc < 0)
        return raise_last(rc);
    Py_RETURN_NONE;
}

/* io_stats(reset=False): stk_io_stats as a dict. */
static PyObject *mod_io_stats(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"reset", NULL};
    int reset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", names, &reset))
        return NULL;
    stk_io_stats s;
    stk_io_stats_get(&s);
    if (reset)
        stk_io_stats_reset();
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K}",
                         "bytes_fetched", (unsigned long long)s.bytes_fetched,
                         "bytes_received", (unsigned long long)s.bytes_received,
                         "bytes_sent", (unsigned long long)s.bytes_sent,
                         "requests", (unsigned long long)s.requests,
                         "retries", (unsigned long long)s.retries,
                         "failures", (unsigned long long)s.failures,
                         "cache_hit_bytes", (unsigned long long)s.cache_hit_bytes,
                         "cache_evicted_bytes", (unsigned long long)s.cache_evicted_bytes,
                         "reads", (unsigned long long)s.reads,
                         "reads_waited", (unsigned long long)s.reads_waited,
                         "wait_s", s.wait_s,
                         "prefetch_bytes", (unsigned long long)s.prefetch_bytes);
}

static PyObject *cache_info_dict(const stk_remote_cache_info *i)
{
    return Py_BuildValue("{s:O&,s:K,s:K,s:K}", "dir", PyUnicode_DecodeFSDefault, i->dir, "limit",
                         (unsigned long long)i->limit, "objects", (unsigned long long)i->objects,
                         "bytes", (unsigned long long)i->bytes);
}

/* cache_info(): stk_remote_cache_info_get as a dict. */
static PyObject *mod_cache_info(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    stk_remote_cache_info info;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_remote_cache_info_get(&info);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    return cache_info_dict(&info);
}

/* cache_trim(keep_bytes): (removed_objects, removed_bytes, info dict left). */
static PyObject *mod_cache_trim(PyObject *self, PyObject *arg)
{
    (void)self;
    unsigned long long keep = PyLong_AsUnsignedLongLong(arg);
    if (keep == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    stk_remote_cache_info left;
    uint64_t ro = 0, rb = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_remote_cache_trim((uint64_t)keep, &ro, &rb, &left);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_last(rc);
    return Py_BuildValue("(KKN)", (unsigned long long)ro, (unsigned long long)rb,
                         cache_info_dict(&left));
}

/* prefetch(uri): (objects, bytes, fetched). The GIL is released while it
 * downloads; Ctrl-C is seen when it returns. */
static PyObject *mod_prefetch(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    uint64_t objects = 0, total = 0, fetched = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_remote_prefetch(PyBytes_AS_STRING(bytes), NULL, NULL, &objects, &total, &fetched);
    Py_END_ALLOW_THREADS
    Py_DECREF(bytes);
    if (rc < 0)
        return raise_last(rc);
    return Py_BuildValue("(KKK)", (unsigned long long)objects, (unsigned long long)total,
                         (unsigned long long)fetched);
}

/* jpeg_index_stats(): stk_jpeg_index_stats as a dict. */
static PyObject *mod_jpeg_index_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    stk_jpeg_index_stats s;
    stk_jpeg_index_stats_get(&s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "files", (unsigned long long)s.files,
                         "windows", (unsigned long long)s.windows, "declined",
                         (unsigned long long)s.declined, "bytes", (unsigned long long)s.bytes,
                         "budget", (unsigned long long)s.budget);
}

static PyMethodDef module_methods[] = {
    {"_dlpack_stream", mod_dlpack_stream, METH_O,
     "_dlpack_stream(stream) -> the CUstream a CUDA batch's __dlpack__(stream=...) makes wait "
     "(None: 0, the legacy default stream), or None for -1 (no synchronisation); raises as "
     "__dlpack__ does for a value DLPack refuses (tests)."},
    {"strerror", mod_strerror, METH_O,
     "strerror(code)\n--\n\nName and description of a stoker error code."},
    {"remote_configure", (PyCFunction)(void (*)(void))mod_remote_configure,
     METH_VARARGS | METH_KEYWORDS,
     "remote_configure(cache_dir=None, cache_limit=-1)\n--\n\nThe local cache of remote "
     "datasets (stk_remote_configure): None / -1 keep the current value."},
    {"io_stats", (PyCFunction)(void (*)(void))mod_io_stats, METH_VARARGS | METH_KEYWORDS,
     "io_stats(reset=False)\n--\n\nThe remote layer's counters (stk_io_stats) as a dict."},
    {"cache_info", mod_cache_info, METH_NOARGS,
     "cache_info()\n--\n\nThe remote cache's directory, limit, objects and bytes "
     "(stk_remote_cache_info_get) as a dict."},
    {"cache_trim", mod_cache_trim, METH_O,
     "cache_trim(keep_bytes)\n--\n\nRemove least-recently-used cached objects down to "
     "keep_bytes (stk_remote_cache_trim): (removed_objects, removed_bytes, info left)."},
    {"prefetch", mod_prefetch, METH_O,
     "prefetch(uri)\n--\n\nDownload a remote dataset into the cache (stk_remote_prefetch): "
     "(objects, bytes, bytes fetched)."},
    {"jpeg_index_stats", mod_jpeg_index_stats, METH_NOARGS,
     "jpeg_index_stats()\n--\n\nThe JPEG sync index's counters (stk_jpeg_index_stats) as a "
     "dict."},
    {"spec_check", mod_spec_check, METH_VARARGS,
     "spec_check(spec, height, width, channels)\n--\n\nCheck a pipeline spec against an input "
     "shape: returns ((d0, d1, d2), dtype, layout) or raises SpecError."},
    {"spec_validate", mod_spec_validate, METH_O,
     "spec_validate(spec)\n--\n\nCheck the text of a pipeline spec alone (names, arguments, "
     "order), without an input shape; raises SpecError with the C parser's message."},
    {"op_table", mod_op_table, METH_NOARGS,
     "op_table()\n--\n\nThe ops of the pipeline spec language (the C op table): a list of "
     "(name, aliases, usage, torchvision, params); params is None or a tuple of (name, whole, "
     "required, lo, hi, default)."},
    {"pack", (PyCFunction)(void (*)(void))mod_pack, METH_VARARGS | METH_KEYWORDS,
     "pack(src, dest, shard_bytes=0, jobs=0, mode='keep', zstd_level=0, strict=False, "
     "validate=True, max_side=0, quality=0, restart=0)\n--\n\nPack a dataset into .stk shards "
     "(stk_pack); returns a dict with records, skipped, shards, bytes, restarted, "
     "skipped_inputs."},
    {"doctor", mod_doctor, METH_VARARGS,
     "doctor(uri, pipeline, step_ms, batch_size, samples, time_budget, readers, cores, seed)\n--"
     "\n\nstk_doctor_run: the report as JSON text (stoker.doctor returns it as a dict)."},
#ifdef STK_HAVE_CLI
    {"cli_main", mod_cli_main, METH_O,
     "cli_main(argv)\n--\n\nRun the `stoker` command-line tool (the C code of cli/) with argv, "
     "a list of str whose first item is the program name; returns the exit status (0 success, "
     "1 runtime failure, 2 usage error). stoker.__main__ calls it."},
#endif
    {0},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stoker._stoker",
    .m_doc = "The native half of the stoker package (see stoker.Loader, stoker.open).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* One exception class: stoker.NAME deriving from StokerError (and `extra`). */
static PyObject *add_exc(PyObject *m, const char *name, PyObject *base, PyObject *extra,
                         const char *doc)
{
    char qual[64];
    snprintf(qual, sizeof qual, "stoker.%s", name);
    PyObject *bases = extra ? PyTuple_Pack(2, base, extra) : PyTuple_Pack(1, base);
    if (!bases)
        return NULL;
    PyObject *e = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
    Py_DECREF(bases);
    if (!e)
        return NULL;
    if (PyModule_AddObjectRef(m, name, e) < 0) {
        Py_DECREF(e);
        return NULL;
    }
    return e; /* one reference kept in a static */
}

PyMODINIT_FUNC PyInit__stoker(void)
{
    static int atfork_done;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
            PyErr_SetString(PyExc_ImportError, "stoker: pthread_atfork failed");
            return NULL;
        }
        atfork_done = 1;
    }
    if (PyType_Ready(&ArrayType) < 0 || PyType_Ready(&DatasetType) < 0 ||
        PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 ||
        PyType_Ready(&FieldViewType) < 0 || PyType_Ready(&IterType) < 0 ||
        PyType_Ready(&ShardWriterType) < 0)
        return NULL;
    if (!gc_module && !(gc_module = PyImport_ImportModule("gc")))
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    /* User-defined ops: _register_op, load_plugin (_stoker_ops.c). */
    if (stk_py_ops_add(m, raise_code) < 0)
        return NULL;

    StokerError = PyErr_NewExceptionWithDoc(
        "stoker.StokerError",
        "Base class of every error stoker raises. `code` is the C error code (STK_E*).",
        PyExc_Exception, NULL);
    if (!StokerError || PyModule_AddObjectRef(m, "StokerError", StokerError) < 0)
        goto fail;
    struct {
        int code;
        const char *name;
        PyObject *extra;
        const char *doc;
    } table[] = {
        {STK_EINVAL, "InvalidArgument", PyExc_ValueError, "An argument or option is invalid (STK_EINVAL)."},
        {STK_ENOMEM, "OutOfMemory", PyExc_MemoryError, "Out of memory (STK_ENOMEM)."},
        {STK_EIO, "StokerIOError", PyExc_OSError, "The operating system failed a read/open/mmap (STK_EIO)."},
        {STK_EFORMAT, "FormatError", PyExc_ValueError, "A data file is malformed (STK_EFORMAT)."},
        {STK_ESPEC, "SpecError", PyExc_ValueError, "The pipeline spec does not parse or compile (STK_ESPEC); the message shows the column with a caret."},
        {STK_ESTATE, "StateError", PyExc_RuntimeError, "The call is not valid in this state (STK_ESTATE)."},
        {STK_ESTOPPED, "StoppedError", PyExc_RuntimeError, "The loader was stopped while waiting (STK_ESTOPPED)."},
        {STK_ELIMIT, "LimitError", PyExc_ValueError, "Input exceeds a safety limit (STK_ELIMIT)."},
        {STK_EUNSUPPORTED, "UnsupportedError", PyExc_ValueError, "Valid input stoker does not handle yet (STK_EUNSUPPORTED)."},
        {STK_EDATA, "DataError", PyExc_ValueError, "A sample is corrupt (STK_EDATA); on_error='skip' skips and counts such samples."},
        {STK_ETHREAD, "ThreadError", PyExc_RuntimeError, "A worker thread could not be created (STK_ETHREAD)."},
        {STK_EEXHAUSTED, "PoolExhausted", PyExc_RuntimeError, "Every batch buffer is held by Python objects (STK_EEXHAUSTED): drop old batches or raise max_batches."},
        {STK_EINTR, "Interrupted", NULL, "A wait was interrupted (STK_EINTR)."},
        {STK_ETIMEDOUT, "Timeout", PyExc_TimeoutError, "A wait timed out (STK_ETIMEDOUT)."},
        {STK_ENETWORK, "NetworkError", PyExc_ConnectionError,
         "A remote store failed after its retries (STK_ENETWORK)."},
        {STK_EACCESS, "AccessDenied", PyExc_PermissionError,
         "A remote store refused the credentials (STK_EACCESS)."},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        PyObject *e = add_exc(m, table[i].name, StokerError, table[i].extra, table[i].doc);
        if (!e)
            goto fail;
        code_exc[-table[i].code] = e;
    }
    /* NotFound derives from StokerIOError and FileNotFoundError. */
    PyObject *nf = add_exc(m, "NotFound", code_exc[-STK_EIO], PyExc_FileNotFoundError,
                           "A file or directory does not exist (STK_ENOENT).");
    if (!nf)
        goto fail;
    code_exc[-STK_ENOENT] = nf;
    ForkError = add_exc(m, "ForkError", StokerError, PyExc_RuntimeError,
                        "A Loader was used in a process forked from the one that created it.");
    if (!ForkError)
        goto fail;

    if (PyModule_AddObjectRef(m, "Dataset", (PyObject *)&DatasetType) < 0 ||
        PyModule_AddObjectRef(m, "_Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObjectRef(m, "Batch", (PyObject *)&BatchType) < 0 ||
        PyModule_AddObjectRef(m, "_Array", (PyObject *)&ArrayType) < 0 ||
        PyModule_AddObjectRef(m, "_Iterator", (PyObject *)&IterType) < 0 ||
        PyModule_AddObjectRef(m, "_ShardWriter", (PyObject *)&ShardWriterType) < 0 ||
        PyModule_AddStringConstant(m, "version", stk_version_string()) < 0 ||
        PyModule_AddIntConstant(m, "version_number", (long)stk_version_number()) < 0 ||
        PyModule_AddIntConstant(m, "OUT_OBJECTS", OUT_OBJECTS) < 0 ||
        PyModule_AddIntConstant(m, "OUT_CAPSULE", OUT_CAPSULE) < 0 ||
        PyModule_AddIntConstant(m, "OUT_CALL", OUT_CALL) < 0)
        goto fail;
    return m;

fail:
    Py_DECREF(m);
    return NULL;
}
