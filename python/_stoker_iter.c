/*
 * _stoker_iter.c — stoker._Iterator, one pass over one epoch of a _Loader
 * (made by _Loader.iter(), _stoker_loader.c); its __next__ is the
 * per-batch path.
 *
 * The per-batch path (iter_next): wait for the next batch with the GIL
 * released, in slices of 100 ms (stk_loader_next_timeout), re-taking the
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
 * Ownership: an iterator holds a strong reference to its _Loader, and the
 * batch an interrupted next() kept (`stash`: its Batch, or the finished
 * item) until the next call or its own death. It is valid while its `gen`
 * equals the loader's: a new iter(), set_epoch, load_state_dict or close
 * makes it stale (it raises).
 *
 * Threads: the GIL is held throughout except during the wait, when the
 * loader's `busy` flag makes any other thread's call into the same loader
 * raise (stk_py_loader_check) instead of racing the one consumer the C
 * loader allows.
 */
#include "_stoker.h"

/* The next batch, waiting with the GIL released in 100 ms slices. Returns 1
 * with *b lent, 0 at the end of the epoch, -1 with an exception set. */
static int loader_wait_next(LoaderObject *L, IterObject *it, stk_batch *b)
{
    int collected = 0;
    for (;;) {
        if (stk_py_loader_check(L) < 0)
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
                PyObject *r = PyObject_CallMethod(stk_py_gc_module, "collect", NULL);
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
            stk_py_raise_code(STK_EEXHAUSTED, msg);
            return -1;
        }
        stk_py_raise_last(rc);
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
        PyObject *cap = stk_py_view_capsule(obj, v, 0);
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
    FieldViewObject *fv = (FieldViewObject *)stk_py_fieldview_new(bo, f);
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
            stk_py_raise_last(STK_EINVAL);
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
            ArrayObject *a = stk_py_copy_i64(f.data, bo->b.size);
            o = a ? convert_out(L, (PyObject *)a, &a->v) : NULL;
        } else if (f.offsets && (f.text || (f.elem == STK_ELEM_U8 && f.ndim == 1))) {
            o = text_list(&f, bo->b.size);
        } else if (f.offsets) {
            ArrayObject *off = stk_py_copy_i64(f.offsets, bo->b.size + 1);
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
        ArrayObject *a = stk_py_copy_i64(bo->b.indices, bo->b.size);
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
    ArrayObject *labels = stk_py_copy_i64(bo->b.labels, bo->b.size);
    ArrayObject *indices = it->with_indices ? stk_py_copy_i64(bo->b.indices, bo->b.size) : NULL;
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
            stk_py_raise_last(rc);
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
        if (stk_py_loader_check(L) < 0)
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
        bo = PyObject_New(BatchObject, &stk_py_batch_type);
        if (!bo) {
            stk_loader_release(L->l, &b);
            return NULL;
        }
        bo->loader = (LoaderObject *)Py_NewRef((PyObject *)L);
        bo->b = b;
        bo->fork_gen = L->fork_gen;
        L->lent++;
        stk_py_batch_view_init(bo, L->kind);
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

PyTypeObject stk_py_iter_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stoker._Iterator",
    .tp_doc = "One pass over one epoch of a Loader; yields (images, labels[, indices]).",
    .tp_basicsize = sizeof(IterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_iter = iter_self,
    .tp_iternext = (iternextfunc)iter_next,
};
