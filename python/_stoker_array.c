/*
 * _stoker_array.c — stoker._Array: a small array that owns its bytes, in
 * the same allocation as the object (labels and indices copied out of a
 * batch, one sample read from a Dataset). Labels are copied rather than
 * viewed in the batch (8 bytes a sample), so keeping them never pins a
 * whole pooled batch buffer.
 *
 * Exported without copying through the buffer protocol and DLPack
 * (_stoker_view.c); each export holds a reference to the _Array. Immutable
 * in shape once made; its bytes are writable through an export. Made and
 * used with the GIL held; the DLPack deleter may drop the last reference
 * from any thread (it takes the GIL).
 */
#include "_stoker.h"

ArrayObject *stk_py_array_new(int kind, int ndim, const int64_t *shape)
{
    Py_ssize_t n = stk_py_kinds[kind].size;
    for (int i = 0; i < ndim; i++)
        n *= (Py_ssize_t)shape[i];
    ArrayObject *a = PyObject_NewVar(ArrayObject, &stk_py_array_type, n);
    if (!a)
        return NULL;
    stk_py_view_init(&a->v, a->data, kind, ndim, shape);
    return a;
}

static void array_dealloc(ArrayObject *self) { PyObject_Free(self); }

static int array_getbuffer(ArrayObject *self, Py_buffer *b, int flags)
{
    return stk_py_view_getbuffer((PyObject *)self, &self->v, b, flags);
}

static PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kwargs)
{
    return stk_py_view_dlpack((PyObject *)self, &self->v, NULL, args, kwargs);
}

static PyObject *array_shape(ArrayObject *self, void *c) { return stk_py_view_shape_tuple(&self->v); }
static PyObject *array_dtype(ArrayObject *self, void *c) { return PyUnicode_FromString(stk_py_kinds[self->v.kind].name); }
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
    PyObject *shape = stk_py_view_shape_tuple(&self->v);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<stoker._Array shape=%R dtype=%s>", shape,
                                       stk_py_kinds[self->v.kind].name);
    Py_DECREF(shape);
    return r;
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule sharing this array's memory (\"dltensor\", or \"dltensor_versioned\" "
     "when max_version >= (1, 0))."},
    {"__dlpack_device__", stk_py_dlpack_device, METH_NOARGS, "(1, 0): CPU memory."},
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

PyTypeObject stk_py_array_type = {
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

ArrayObject *stk_py_copy_i64(const void *src, uint32_t n)
{
    int64_t shape[1] = {n};
    ArrayObject *a = stk_py_array_new(K_I64, 1, shape);
    if (a && n)
        memcpy(a->data, src, (size_t)n * 8);
    return a;
}
