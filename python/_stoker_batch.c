/*
 * _stoker_batch.c — stoker.Batch, one batch lent by a _Loader, and
 * stoker._FieldView, the values of one of its fields. output='dlpack'
 * yields Batch objects themselves; output='torch'/'numpy' convert them
 * (_stoker_iter.c), and the tensors or arrays made keep them alive.
 *
 * Ownership: a Batch owns the lent stk_batch and a strong reference to its
 * _Loader; every export of its memory (buffer protocol, DLPack capsule,
 * _FieldView) holds a reference to the Batch. So the pooled buffer goes
 * back to the loader (stk_loader_release, in dealloc) only when the last
 * Python reference dies, and is never overwritten before; the loader
 * outlives its batches, and a closed loader is destroyed by the dealloc of
 * its last batch. Labels and indices are copied out (an _Array), never
 * viewed. In a forked child the batch is leaked, not released (the loader's
 * mutex may be held by a thread that does not exist there).
 *
 * Threads: methods run with the GIL held. dealloc may run on any thread
 * that drops the last reference with the GIL (a DLPack deleter takes it);
 * stk_loader_release takes a short lock and never waits on Python.
 */
#include "_stoker.h"

static void batch_dealloc(BatchObject *self)
{
    LoaderObject *L = self->loader;
    if (self->fork_gen == stk_py_fork_generation && L->l)
        stk_loader_release(L->l, &self->b); /* short lock; never waits on Python */
    L->lent--;
    if (L->closed && L->lent == 0)
        stk_py_loader_destroy_c(L);
    PyObject_Free(self);
    Py_DECREF(L);
}

static int batch_getbuffer(BatchObject *self, Py_buffer *b, int flags)
{
    return stk_py_view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *batch_dlpack(BatchObject *self, PyObject *args, PyObject *kwargs)
{
    return stk_py_view_dlpack((PyObject *)self, &self->v, (PyObject *)self, args, kwargs);
}

static PyObject *batch_dlpack_device(BatchObject *self, PyObject *unused)
{
    return stk_py_view_dlpack_device(&self->v);
}

int stk_py_batch_wait_stream(PyObject *batch, uint64_t stream)
{
    BatchObject *self = (BatchObject *)batch;
    LoaderObject *L = self->loader;
    if (self->fork_gen != stk_py_fork_generation || !L->l) {
        PyErr_SetString(PyExc_RuntimeError, "this batch's loader is closed");
        return -1;
    }
    int rc = stk_loader_batch_wait(L->l, &self->b, stream); /* queues a wait; does not block */
    if (rc < 0) {
        stk_py_raise_last(rc);
        return -1;
    }
    return 0;
}

/* A lent batch as its view: host memory, or the device's (STK_DEVICE_CUDA). */
void stk_py_batch_view_init(BatchObject *bo, int kind)
{
    stk_py_view_init(&bo->v, bo->b.data, kind, 4, bo->b.shape);
    if (bo->b.device_type == STK_DEVICE_CUDA) {
        bo->v.dev_type = DL_CUDA;
        bo->v.dev_id = bo->b.device_id;
    }
}

static PyObject *batch_data_ptr(BatchObject *self, PyObject *u) { return PyLong_FromVoidPtr(self->b.data); }
static PyObject *batch_shape(BatchObject *self, void *c) { return stk_py_view_shape_tuple(&self->v); }
static PyObject *batch_dtype(BatchObject *self, void *c) { return PyUnicode_FromString(stk_py_kinds[self->v.kind].name); }
static PyObject *batch_layout(BatchObject *self, void *c) { return PyUnicode_FromString(self->b.layout == STK_CHW ? "NCHW" : "NHWC"); }
static PyObject *batch_labels(BatchObject *self, void *c) { return (PyObject *)stk_py_copy_i64(self->b.labels, self->b.size); }
static PyObject *batch_indices(BatchObject *self, void *c) { return (PyObject *)stk_py_copy_i64(self->b.indices, self->b.size); }
static PyObject *batch_epoch(BatchObject *self, void *c) { return PyLong_FromUnsignedLongLong(self->b.epoch); }
static PyObject *batch_position(BatchObject *self, void *c) { return PyLong_FromUnsignedLongLong(self->b.position); }
static PyObject *batch_skipped(BatchObject *self, void *c) { return PyLong_FromUnsignedLong(self->b.skipped); }
static PyObject *batch_nbytes(BatchObject *self, void *c) { return PyLong_FromSsize_t(stk_py_view_nbytes(&self->v)); }
static Py_ssize_t batch_len(BatchObject *self) { return (Py_ssize_t)self->b.size; }

static PyObject *batch_device(BatchObject *self, void *c)
{
    if (self->v.dev_type == DL_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)self->v.dev_id);
    return PyUnicode_FromString("cpu");
}

static PyObject *batch_repr(BatchObject *self)
{
    PyObject *shape = stk_py_view_shape_tuple(&self->v);
    if (!shape)
        return NULL;
    PyObject *r;
    if (self->v.dev_type == DL_CUDA)
        r = PyUnicode_FromFormat(
            "<stoker.Batch epoch=%llu position=%llu shape=%R %s %s device=cuda:%d data_ptr=%p>",
            (unsigned long long)self->b.epoch, (unsigned long long)self->b.position, shape,
            stk_py_kinds[self->v.kind].name, self->b.layout == STK_CHW ? "NCHW" : "NHWC",
            (int)self->v.dev_id, self->b.data);
    else
        r = PyUnicode_FromFormat(
            "<stoker.Batch epoch=%llu position=%llu shape=%R %s %s data_ptr=%p>",
            (unsigned long long)self->b.epoch, (unsigned long long)self->b.position, shape,
            stk_py_kinds[self->v.kind].name, self->b.layout == STK_CHW ? "NCHW" : "NHWC",
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

static void fieldview_dealloc(FieldViewObject *self)
{
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static int fieldview_getbuffer(FieldViewObject *self, Py_buffer *b, int flags)
{
    return stk_py_view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *fieldview_dlpack(FieldViewObject *self, PyObject *args, PyObject *kwargs)
{
    return stk_py_view_dlpack((PyObject *)self, &self->v, self->owner, args, kwargs);
}

static PyObject *fieldview_dlpack_device(FieldViewObject *self, PyObject *unused)
{
    return stk_py_view_dlpack_device(&self->v);
}

static PyObject *fieldview_shape(FieldViewObject *self, void *c) { return stk_py_view_shape_tuple(&self->v); }
static PyObject *fieldview_dtype(FieldViewObject *self, void *c) { return PyUnicode_FromString(stk_py_kinds[self->v.kind].name); }

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

PyTypeObject stk_py_fieldview_type = {
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

/* A _FieldView over field f of batch bo (f->ndim <= 4, checked by the
 * callers); an empty field views a static word. */
PyObject *stk_py_fieldview_new(BatchObject *bo, const stk_batch_field *f)
{
    FieldViewObject *fv = PyObject_New(FieldViewObject, &stk_py_fieldview_type);
    if (!fv)
        return NULL;
    fv->owner = Py_NewRef((PyObject *)bo);
    int64_t shape[4];
    int nd = (int)f->ndim;
    for (int d = 0; d < nd; d++)
        shape[d] = f->shape[d];
    static uint64_t empty;
    stk_py_view_init(&fv->v, f->data ? (void *)f->data : (void *)&empty,
                     stk_py_kind_of_elem(f->elem), nd, shape);
    if (f->role == STK_ROLE_IMAGE && bo->v.dev_type != DL_CPU) { /* the batch's device image */
        fv->v.dev_type = bo->v.dev_type;
        fv->v.dev_id = bo->v.dev_id;
    }
    return (PyObject *)fv;
}

const char *const stk_py_role_name[] = {"image", "label",   "index", "path",    "mask",
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
    if (self->fork_gen != stk_py_fork_generation || !L->l) {
        PyErr_SetString(PyExc_RuntimeError, "this batch's loader is closed");
        return NULL;
    }
    stk_batch_field f;
    if (i < 0 || stk_loader_field(L->l, &self->b, (uint32_t)i, &f) < 0) {
        if (i < 0)
            PyErr_SetString(PyExc_IndexError, "field index out of range");
        else
            stk_py_raise_last(STK_EINVAL);
        return NULL;
    }
    int kind = stk_py_kind_of_elem(f.elem);
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
        values = (PyObject *)stk_py_copy_i64(f.data, self->b.size);
        if (!values)
            goto fail;
    } else if (f.data || f.shape[0] == 0) {
        PyObject *fv = stk_py_fieldview_new(self, &f);
        if (!fv)
            goto fail;
        Py_DECREF(values);
        values = fv;
    }
    if (f.offsets) {
        Py_DECREF(offsets);
        offsets = (PyObject *)stk_py_copy_i64(f.offsets, self->b.size + 1);
        if (!offsets)
            goto fail;
    }
    return Py_BuildValue("(ssspNN)", f.name, stk_py_role_name[f.role], stk_py_kinds[kind].name,
                         f.text, values, offsets);
fail:
    Py_DECREF(values);
    Py_DECREF(offsets);
    return NULL;
}

static PyBufferProcs batch_as_buffer = {(getbufferproc)batch_getbuffer, NULL};
static PySequenceMethods batch_as_sequence = {.sq_length = (lenfunc)batch_len};

PyTypeObject stk_py_batch_type = {
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
