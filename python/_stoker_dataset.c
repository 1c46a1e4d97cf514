/*
 * _stoker_dataset.c — stoker._stoker.Dataset: an opened stk_dataset
 * (stk_dataset_open, an in-memory copy of NumPy buffers, a concatenation;
 * the callback dataset over Python objects is made in _stoker_source.c),
 * its samples read one at a time, and what it knows about them (shape,
 * classes, source names, fields). stoker.open() and the Loader build on it.
 *
 * Ownership: the object owns its stk_dataset and closes it in dealloc. A
 * concatenation borrows its parts' datasets, so it keeps a strong
 * reference to the tuple of parts, released after its own close. A Loader
 * keeps a strong reference to its Dataset, which so outlives it.
 *
 * Threads: a dataset is immutable once open, so reads need no lock here:
 * read(), path() and _read_field() release the GIL around the library call,
 * and any number of threads (the loader's workers included) may read at
 * once. Datasets own no threads, so they keep working in a forked child.
 */
#include "_stoker.h"

DatasetObject *stk_py_dataset_wrap(PyTypeObject *type, stk_dataset *ds)
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
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|$O&O&O&:Dataset", kwlist, &uri,
                                     stk_py_conv_u64, &o.max_bytes, stk_py_conv_u64,
                                     &o.max_samples, stk_py_conv_u64, &o.max_pixels))
        return NULL;
    stk_dataset *ds = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_open(uri, &o, &ds);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise_last(rc);
    return (PyObject *)stk_py_dataset_wrap(type, ds);
}

/* _from_buffers(pixels, labels, count, height, width, channels): an
 * in-memory dataset copied from C-contiguous buffers (uint8 HWC pixels,
 * int64 labels or None). */
static PyObject *dataset_from_buffers(PyObject *cls, PyObject *args)
{
    PyObject *pix_obj, *lab_obj;
    uint64_t count;
    uint32_t h, w, c;
    if (!PyArg_ParseTuple(args, "OOO&O&O&O&:_from_buffers", &pix_obj, &lab_obj, stk_py_conv_u64,
                          &count, stk_py_conv_u32, &h, stk_py_conv_u32, &w, stk_py_conv_u32, &c))
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
        stk_py_raise_last(rc);
    else
        res = (PyObject *)stk_py_dataset_wrap((PyTypeObject *)cls, ds);
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
        if (!PyObject_TypeCheck(p, &stk_py_dataset_type)) {
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
        return stk_py_raise_last(rc);
    DatasetObject *self = stk_py_dataset_wrap((PyTypeObject *)cls, out);
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
    if (!stk_py_conv_u64(arg, &index))
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
            return stk_py_raise_last((int)rc);
        int64_t shape[3] = {dims[0], dims[1], dims[2]};
        a = stk_py_array_new(K_U8, 3, shape);
        if (a)
            memcpy(a->data, px, (size_t)rc);
        stk_free(px);
        if (!a)
            return NULL;
    } else {
        int64_t shape[3] = {self->info.height, self->info.width, self->info.channels};
        a = stk_py_array_new(K_U8, 3, shape);
        if (!a)
            return NULL;
        Py_BEGIN_ALLOW_THREADS
        rc = stk_dataset_read(self->ds, index, a->data, self->sample_bytes, &label);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            Py_DECREF(a);
            return stk_py_raise_last((int)rc);
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
    return stk_py_message_str(stk_dataset_skipped(self->ds, i));
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
    if (!stk_py_conv_u64(arg, &index))
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
        return stk_py_raise_last(rc);
    if (!path)
        Py_RETURN_NONE;
    PyObject *u = PyUnicode_DecodeFSDefault(path);
    stk_free(path);
    return u;
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
            return stk_py_raise_last(rc);
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
    if (!PyArg_ParseTuple(args, "O&z:_read_field", stk_py_conv_u64, &index, &name))
        return NULL;
    void *data = NULL;
    size_t size = 0;
    uint32_t shape[3] = {0, 0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_read_field(self->ds, index, name, &data, &size, shape);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise_last(rc);
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
    {"_from_source", stk_py_dataset_from_source, METH_VARARGS | METH_CLASS,
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

PyTypeObject stk_py_dataset_type = {
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
