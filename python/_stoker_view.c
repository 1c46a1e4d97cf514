/*
 * _stoker_view.c — how the extension hands memory to NumPy and torch without
 * copying: the element kinds (struct format, DLPack type, name), and `view`,
 * a typed C-contiguous N-d description of memory that an owner object
 * exports through the buffer protocol (numpy.asarray, memoryview) and
 * DLPack (__dlpack__, torch.from_dlpack, numpy.from_dlpack). Batch,
 * _FieldView and _Array each hold a view and call these functions.
 *
 * Ownership: a view never owns its memory; every export holds a strong
 * reference to the owner object (Py_buffer.obj, a capsule's manager_ctx),
 * so the memory lives until the last NumPy array, tensor or capsule over it
 * dies. For a Batch, that is when its pooled buffer goes back to the loader.
 *
 * Threads: everything runs with the GIL held, except the DLPack deleters: a
 * consumer may free its tensor on any thread, with or without the GIL, so
 * the deleter takes the GIL itself (PyGILState_Ensure) to drop the owner,
 * frees the block with the raw allocator, and during interpreter shutdown
 * leaks the reference instead of taking the GIL.
 *
 * The DLPack ABI (v0.8 and the v1.0 versioned struct) is declared here, so
 * the build does not need dlpack.h; the layouts are fixed by the standard.
 */
#include "_stoker.h"

/* ------------------------------------------------------------------------ */
/* DLPack ABI (v0.8 and the v1.0 versioned struct), declared here so the     */
/* build does not need dlpack.h. Layouts are fixed by the DLPack standard.   */
/* ------------------------------------------------------------------------ */

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
/* Element kinds                                                             */
/* ------------------------------------------------------------------------ */

const struct stk_py_kind stk_py_kinds[] = {
    [K_U8] = {"B", "uint8", 1, DL_UINT, 8},
    [K_F16] = {"e", "float16", 2, DL_FLOAT, 16},
    [K_F32] = {"f", "float32", 4, DL_FLOAT, 32},
    [K_I64] = {"q", "int64", 8, DL_INT, 64},
    [K_BF16] = {"H", "bfloat16", 2, DL_BFLOAT, 16},
    [K_F64] = {"d", "float64", 8, DL_FLOAT, 64},
};

int stk_py_kind_of_dtype(stk_dtype d)
{
    return d == STK_U8 ? K_U8 : d == STK_F16 ? K_F16 : d == STK_BF16 ? K_BF16 : K_F32;
}

int stk_py_kind_of_elem(stk_elem_type e)
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

/* ------------------------------------------------------------------------ */
/* Array description shared by Batch and _Array; buffer and DLPack export    */
/* ------------------------------------------------------------------------ */

void stk_py_view_init(view *v, void *data, int kind, int ndim, const int64_t *shape)
{
    v->data = data;
    v->kind = kind;
    v->ndim = ndim;
    v->dev_type = DL_CPU;
    v->dev_id = 0;
    Py_ssize_t stride = stk_py_kinds[kind].size;
    for (int i = ndim - 1; i >= 0; i--) {
        v->shape[i] = (Py_ssize_t)shape[i];
        v->strides[i] = stride;
        stride *= v->shape[i];
    }
}

Py_ssize_t stk_py_view_nbytes(const view *v)
{
    Py_ssize_t n = stk_py_kinds[v->kind].size;
    for (int i = 0; i < v->ndim; i++)
        n *= v->shape[i];
    return n;
}

PyObject *stk_py_view_shape_tuple(const view *v)
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
int stk_py_view_getbuffer(PyObject *owner, const view *v, Py_buffer *b, int flags)
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
    b->len = stk_py_view_nbytes(v);
    b->readonly = 0;
    b->itemsize = stk_py_kinds[v->kind].size;
    b->format = (flags & PyBUF_FORMAT) ? (char *)stk_py_kinds[v->kind].fmt : NULL;
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

/* Drop the owner reference a capsule's tensor held. May run on any thread,
 * with or without the GIL (consumers free tensors where they like). During
 * interpreter shutdown the reference is leaked: taking the GIL then could
 * hang, and the process is exiting. */
static void drop_owner(PyObject *owner)
{
    if (!owner || !stk_py_interpreter_alive())
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
    Py_ssize_t size = stk_py_kinds[v->kind].size;
    for (int i = 0; i < v->ndim; i++) {
        shape[i] = v->shape[i];
        strides[i] = v->strides[i] / size;
    }
    t->data = v->data;
    t->device.device_type = v->dev_type;
    t->device.device_id = v->dev_id;
    t->ndim = v->ndim;
    t->dtype.code = stk_py_kinds[v->kind].dl_code;
    t->dtype.bits = stk_py_kinds[v->kind].dl_bits;
    t->dtype.lanes = 1;
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
}

/* A "dltensor" (or "dltensor_versioned") capsule over v that keeps owner
 * alive until the consumer's tensor (or the unconsumed capsule) dies. */
PyObject *stk_py_view_capsule(PyObject *owner, const view *v, int versioned)
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
int stk_py_dlpack_stream(PyObject *obj, uint64_t *stream, int *sync)
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


/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
 * of a view over `owner`'s memory. `batch` is the Batch whose buffer the
 * view shares (NULL for an _Array): a CUDA view makes the consumer's stream
 * wait for it before handing out the capsule. A host view ignores stream
 * (host memory is complete when delivered). */
PyObject *stk_py_view_dlpack(PyObject *owner, const view *v, PyObject *batch, PyObject *args,
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
        if (stk_py_dlpack_stream(stream, &s, &sync) < 0)
            return NULL;
        if (sync && batch && stk_py_batch_wait_stream(batch, s) < 0)
            return NULL;
    }
    return stk_py_view_capsule(owner, v, versioned);
}

/* __dlpack_device__ of a view: (1, 0) for host memory, (2, N) on cuda:N. */
PyObject *stk_py_view_dlpack_device(const view *v)
{
    return Py_BuildValue("(ii)", (int)v->dev_type, (int)v->dev_id);
}

PyObject *stk_py_dlpack_device(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", DL_CPU, 0);
}
