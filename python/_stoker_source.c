/*
 * _stoker_source.c — ExternalSource: a callback dataset over a Python object.
 *
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
 *
 * Ownership: the `pysrc` state (the indexable or feed, the fields' names and
 * converter, the per-thread item slots) is the dataset's: handed to
 * stk_dataset_from_callbacks, it is freed by the close callback when the
 * Dataset dies (or here, when the create fails). Its Python references are
 * taken and dropped only with the GIL held.
 */
#include "_stoker.h"

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
    if (!ts || !stk_py_interpreter_alive())
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
    } else if (type && stk_py_stoker_error &&
               PyErr_GivenExceptionMatches(type, stk_py_stoker_error)) {
        PyObject *c = value ? PyObject_GetAttrString(value, "code") : NULL;
        long v = c && PyLong_Check(c) ? PyLong_AsLong(c) : 0;
        if (v < 0 && v > -STK_PY_N_CODES) {
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
    if (!stk_py_interpreter_alive())
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
    if (!stk_py_interpreter_alive())
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
    if (!stk_py_interpreter_alive())
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
PyObject *stk_py_dataset_from_source(PyObject *cls, PyObject *args)
{
    PyObject *seq, *get, *shape, *classes, *fields, *convert;
    const char *name;
    uint64_t count;
    uint32_t num_classes;
    if (!PyArg_ParseTuple(args, "OOO&sOO&OOO:_from_source", &seq, &get, stk_py_conv_u64, &count,
                          &name, &shape, stk_py_conv_u32, &num_classes, &classes, &fields,
                          &convert))
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
            if (!stk_py_conv_u32(PyTuple_GET_ITEM(dims, d), &decl[k].dims[d]))
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
        stk_py_raise_last(rc);
        goto done;
    }
    s = NULL; /* the dataset's now: freed by its close */
    res = (PyObject *)stk_py_dataset_wrap((PyTypeObject *)cls, ds);
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
