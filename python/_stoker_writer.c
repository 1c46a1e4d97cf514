/*
 * _stoker_writer.c — stoker._stoker._ShardWriter: stk_shard_writer, the C
 * half of stoker.ShardWriter (python/stoker/writer.py adds the rest).
 *
 * _ShardWriter(dest, fields, records_per_shard, shard_bytes, class_names,
 * metadata): fields is a list of (name, type code, dims tuple, zstd level);
 * class_names a list of str (or None); metadata a list of (key, value) str
 * pairs. add(values) takes one object per field, each with the buffer
 * protocol: the bytes of an image, bytes or string field (UTF-8), a
 * C-contiguous 3-d uint8 buffer (H, W, C) for a raw image, a C-contiguous
 * buffer of int64 or float32 values for an array (the Python layer
 * converts and checks types first; the library checks the rest, naming
 * record and field). finish() returns {records, shards, bytes}; abort()
 * removes what was written. Both leave the object closed; the finalizer
 * aborts a writer never finished.
 *
 * Ownership: the object owns its stk_shard_writer until finish() or
 * abort() frees it (w is NULL from then on). The buffers of a record are
 * held only for the duration of add().
 *
 * Threads: the GIL is released while a record is written (and while
 * finishing or aborting); `busy`, read and set under the GIL, makes a
 * writer used from two threads at once raise StateError instead of racing.
 */
#include "_stoker.h"

typedef struct ShardWriterObject {
    PyObject_HEAD
    stk_shard_writer *w; /* owned; NULL once finished or aborted */
    uint32_t nfields;
    stk_field_type types[64];
    int busy;            /* a call holds w with the GIL released (read and set under the GIL) */
} ShardWriterObject;

static int writer_usable(ShardWriterObject *self)
{
    if (!self->w) {
        PyErr_SetString(stk_py_code_exc[-STK_ESTATE], "the ShardWriter is closed");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(stk_py_code_exc[-STK_ESTATE],
                        "the ShardWriter is in use by another thread");
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
            if (!stk_py_conv_u32(PyTuple_GET_ITEM(dims, d), &f[i].dims[d]))
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
        stk_py_raise_code(rc, msg);
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
        stk_py_raise_code(rc, msg);
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
        return stk_py_raise_code(rc, msg);
    return Py_BuildValue("{sKsIsK}", "records", (unsigned long long)r.records, "shards", r.shards,
                         "bytes", (unsigned long long)r.bytes);
}

static PyObject *shard_writer_abort(ShardWriterObject *self, PyObject *unused)
{
    if (self->busy) {
        PyErr_SetString(stk_py_code_exc[-STK_ESTATE],
                        "the ShardWriter is in use by another thread");
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

PyTypeObject stk_py_shard_writer_type = {
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
