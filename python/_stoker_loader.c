/*
 * _stoker_loader.c — stoker._stoker._Loader, the native loader behind
 * stoker.Loader (python/stoker/loader.py turns its arguments into the ones
 * here): creation from the keyword arguments, epochs and iteration passes,
 * the resumable state, statistics, the data-stall profile, the autotuner's
 * knobs and decisions, and close. The per-batch path is _stoker_iter.c.
 *
 * Keyword arguments: they come from the library's loader parameter table
 * (src/pipeline/loader_params.c), read once through
 * stk_loader_param_describe. Only what is not a row is parsed by name (the
 * dataset, the spec, output/convert/device_convert, the sampling buffers
 * loader.py packs); every other keyword is looked up in the table, its value
 * converted by the row's type (uint/int: an int within the row's bounds,
 * else ValueError "NAME V is out of bounds [MIN, MAX]"; bool: truth; enum:
 * its number or a value name, else "NAME must be 0 (a), 1 (b) or 2 (c)";
 * string: str) and None taken as the row's default. The rows that
 * stk_loader_options (version 1, frozen) has a field for fill it, and the
 * loader is created once from it, as before; a row given that has no field
 * (decode_budget, and every row added later) is set with stk_loader_set
 * after the create, in the table's order, and eager then starts the loader.
 * So a new row is a keyword here with no change to this file. Pointer rows
 * (sampling, device_options) have no Python form: their content comes from
 * the keywords above. _Loader.params() hands the table to loader.py, which
 * passes the rows it has no argument of its own for through as they are.
 *
 * Epochs: each iter() starts the loader's current epoch at position 0,
 * except right after load_state_dict (it continues from the restored
 * position). Finishing a pass moves the loader to the next epoch (as the C
 * loader does); abandoning a pass (break, exception, Ctrl-C) leaves it on the
 * same epoch, which the next iter() restarts from position 0. set_epoch(e)
 * moves it explicitly. A new iter(), set_epoch or load_state_dict
 * invalidates the iterators made before it (`gen`).
 *
 * Ownership: a _Loader owns its stk_loader and a strong reference to its
 * Dataset (which must outlive the C loader), and the converters the Python
 * layer gave. close() stops it at once if no Batch is alive, else the dealloc
 * of the last Batch destroys it (`lent` counts them); dealloc runs only when
 * no Batch and no iterator holds it.
 *
 * Threads: the C loader allows one consumer at a time. Every method runs
 * with the GIL held; the iterator's wait releases it and sets `busy`, and
 * a call that moves the loader (iter, set_epoch, set_state, warmup) checks
 * `busy` (stk_py_loader_check) and raises instead of racing. Stats, state
 * and profile reads are safe from any thread in the C API and check only
 * that the loader is alive. After fork() a loader made in the parent
 * refuses every call with ForkError and is leaked, never destroyed, in the
 * child (its threads and mutex state are the parent's).
 */
#include "_stoker.h"

#include <inttypes.h>

void stk_py_loader_destroy_c(LoaderObject *self)
{
    stk_loader *l = self->l;
    self->l = NULL;
    if (!l)
        return;
    if (self->fork_gen != stk_py_fork_generation)
        return; /* forked child: no threads to join, the mutex may be held; leak */
    Py_BEGIN_ALLOW_THREADS
    stk_loader_destroy(l);
    Py_END_ALLOW_THREADS
}

/* The loader exists in this process and is open. Enough for the calls the
 * C API makes safe from any thread (stats, state). */
static int loader_alive(LoaderObject *self)
{
    if (self->fork_gen != stk_py_fork_generation) {
        PyErr_Format(stk_py_fork_error,
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
int stk_py_loader_check(LoaderObject *self)
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

/* ------------------------------------------------------------------------ */
/* The keyword arguments of the library's parameter table                    */
/* ------------------------------------------------------------------------ */

/* The table's rows, read once through stk_loader_param_describe (static
 * data in the library; the GIL guards the lazy fill). */
#define MAX_PARAMS 128
static stk_loader_param_info param_rows[MAX_PARAMS];
static int param_count = -1;

static int params_load(void)
{
    if (param_count >= 0)
        return param_count;
    int n = 0;
    while (n < MAX_PARAMS && stk_loader_param_describe(n, &param_rows[n]) == 0)
        n++;
    return param_count = n;
}

static int param_find(const char *name)
{
    int n = params_load();
    for (int i = 0; i < n; i++)
        if (!strcmp(param_rows[i].name, name))
            return i;
    return -1;
}

/* The value names of an enum row as "0 (raise), 1 (skip) or 2 (replace)". */
static void enum_list(const stk_loader_param_info *r, char *buf, size_t size)
{
    size_t used = 0;
    const char *v = r->values ? r->values : "";
    buf[0] = 0;
    for (int64_t i = r->min; i <= r->max && used < size; i++) {
        size_t len = strcspn(v, ",");
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64 " (%.*s)",
                                 i == r->min ? "" : i == r->max ? " or " : ", ", i, (int)len, v);
        v += len + (v[len] == ',');
    }
}

/* The value of row r from a Python object: a number (int; bool: truth;
 * enum: its number or its name) in *num, or a string in *str (borrowed
 * from o). Bounds are the row's. 0, or -1 with the exception set. */
static int param_value_of(const stk_loader_param_info *r, PyObject *o, int64_t *num,
                          const char **str)
{
    switch (r->type) {
    case STK_PARAM_BOOL: {
        int t = PyObject_IsTrue(o);
        if (t < 0)
            return -1;
        *num = t;
        return 0;
    }
    case STK_PARAM_STRING:
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s must be a str or None, got %s", r->name,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        return (*str = PyUnicode_AsUTF8(o)) ? 0 : -1;
    case STK_PARAM_ENUM: {
        char names[256];
        enum_list(r, names, sizeof names);
        if (PyUnicode_Check(o)) { /* a value's name */
            const char *s = PyUnicode_AsUTF8(o), *v = r->values ? r->values : "";
            if (!s)
                return -1;
            for (int64_t i = r->min; i <= r->max; i++) {
                size_t len = strcspn(v, ",");
                if (strlen(s) == len && !strncmp(s, v, len)) {
                    *num = i;
                    return 0;
                }
                v += len + (v[len] == ',');
            }
            PyErr_Format(PyExc_ValueError, "%s must be %s", r->name, names);
            return -1;
        }
        long long x = PyLong_Check(o) ? PyLong_AsLongLong(o) : -1;
        if (x == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (!PyLong_Check(o) || x < r->min || x > r->max) {
            PyErr_Format(PyExc_ValueError, "%s must be %s", r->name, names);
            return -1;
        }
        *num = x;
        return 0;
    }
    case STK_PARAM_INT: {
        long long x = PyLong_Check(o) ? PyLong_AsLongLong(o) : 0;
        if (!PyLong_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s: expected an int, got %s", r->name,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        if ((x == -1 && PyErr_Occurred()) || x < r->min || x > r->max) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s %R is out of bounds [%" PRId64 ", %" PRId64 "]",
                         r->name, o, r->min, r->max);
            return -1;
        }
        *num = x;
        return 0;
    }
    case STK_PARAM_UINT: {
        if (!PyLong_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s: expected an int, got %s", r->name,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        unsigned long long x = PyLong_AsUnsignedLongLong(o);
        int bad = x == (unsigned long long)-1 && PyErr_Occurred();
        if (bad)
            PyErr_Clear();
        if (bad || x < (uint64_t)r->min || x > (uint64_t)r->max) {
            PyErr_Format(PyExc_ValueError, "%s %R is out of bounds [%" PRIu64 ", %" PRIu64 "]",
                         r->name, o, (uint64_t)r->min, (uint64_t)r->max);
            return -1;
        }
        *num = (int64_t)x;
        return 0;
    }
    default: /* POINTER, FLOAT: no Python form (sampling has its own keywords) */
        PyErr_Format(PyExc_TypeError,
                     "%s cannot be given from Python (the sampling keywords are indices=, "
                     "weights=, num_samples=, balance_classes=, mix_sizes=, mix_weights=; the "
                     "device ones device=, placement=, decoder=)",
                     r->name);
        return -1;
    }
}

/* The table's keywords as given: row i's value in num[i] / str[i] when
 * given[i] (None counts as not given: the row's default). */
typedef struct table_args {
    int n;
    char given[MAX_PARAMS];
    int64_t num[MAX_PARAMS];
    const char *str[MAX_PARAMS];
} table_args;

/* Split kwargs: the table's keywords into *t, the others (the Python-side
 * ones: output, converters, sampling buffers) into a new dict *rest. */
static int split_kwargs(PyObject *kwargs, table_args *t, PyObject **rest)
{
    t->n = params_load();
    memset(t->given, 0, sizeof t->given);
    *rest = PyDict_New();
    if (!*rest)
        return -1;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        int i = name ? param_find(name) : -1;
        if (i < 0) {
            if (PyDict_SetItem(*rest, key, value) < 0)
                goto fail;
            continue;
        }
        if (value == Py_None)
            continue;
        if (param_value_of(&param_rows[i], value, &t->num[i], &t->str[i]) < 0)
            goto fail;
        t->given[i] = 1;
    }
    return 0;
fail:
    Py_CLEAR(*rest);
    return -1;
}

/* _Loader.params() -> a tuple of (name, type, min, max, default, doc,
 * values) for each row of the table; type is "int", "uint", "float",
 * "bool", "enum", "string" or "pointer", values the enum's names (or
 * None). loader.py takes its extra keywords from it. */
static PyObject *loader_params(PyObject *cls, PyObject *u)
{
    static const char *types[] = {"?", "int", "uint", "float", "bool", "enum", "string", "pointer"};
    int n = params_load();
    PyObject *out = PyTuple_New(n);
    for (int i = 0; out && i < n; i++) {
        const stk_loader_param_info *r = &param_rows[i];
        unsigned t = (unsigned)r->type < 8 ? (unsigned)r->type : 0;
        PyObject *row = r->type == STK_PARAM_UINT
                            ? Py_BuildValue("(ssKKKsz)", r->name, types[t],
                                            (unsigned long long)r->min, (unsigned long long)r->max,
                                            (unsigned long long)r->def, r->doc, r->values)
                            : Py_BuildValue("(ssLLLsz)", r->name, types[t], (long long)r->min,
                                            (long long)r->max, (long long)r->def, r->doc,
                                            r->values);
        if (!row)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, row);
    }
    return out;
}

static PyObject *loader_make(PyTypeObject *type, PyObject *dataset, const char *spec,
                             stk_loader_options *op, stk_sampling *sg, Py_buffer *indices,
                             Py_buffer *weights, int balance, int eager, int shuffle, int block,
                             int mode, PyObject *convert, PyObject *convert_device,
                             const table_args *t, const int *post, int npost);

static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* The keywords that are not rows of the table: the Python side's. */
    static char *kwlist[] = {"dataset", "spec", "output", "convert", "device_convert", "indices",
                             "weights", "num_samples", "balance_classes", "mix_sizes",
                             "mix_weights", NULL};
    PyObject *dataset, *convert = Py_None, *convert_device = Py_None, *rest;
    const char *spec;
    stk_loader_options o = {0};
    stk_sampling sg = {0};
    /* indices: native uint64, weights: native float64 (loader.py packs them) */
    Py_buffer indices = {0}, weights = {0}, mix_sizes = {0}, mix_weights = {0};
    int mode = OUT_OBJECTS, balance = 0;
    table_args t;
    if (split_kwargs(kwargs, &t, &rest) < 0)
        return NULL;
    int ok = PyArg_ParseTupleAndKeywords(
        args, rest, "O!s|$iOOz*z*O&pz*z*:_Loader", kwlist, &stk_py_dataset_type, &dataset, &spec,
        &mode, &convert, &convert_device, &indices, &weights, stk_py_conv_u64, &sg.num_samples,
        &balance, &mix_sizes, &mix_weights);
    Py_DECREF(rest);
    if (!ok)
        return NULL;
    /* The rows stk_loader_options (version 1, frozen) has a field for go
     * into it, given or at the row's default; any other row given is set
     * with stk_loader_set after create (loader_make), in the table's order. */
    int shuffle = 1, block = 0, eager = 0, post[MAX_PARAMS], npost = 0;
    const char *device = NULL;
    stk_device_options dev = {0};
    for (int i = 0; i < t.n; i++) {
        const stk_loader_param_info *r = &param_rows[i];
        int64_t v = t.given[i] ? t.num[i] : r->def;
        switch (r->key) {
        case STK_LOADER_BATCH_SIZE: o.batch_size = (uint32_t)v; break;
        case STK_LOADER_THREADS: o.threads = (uint32_t)v; break;
        case STK_LOADER_PREFETCH: o.prefetch = (uint32_t)v; break;
        case STK_LOADER_MAX_BATCHES: o.max_batches = (uint32_t)v; break;
        case STK_LOADER_SEED: o.seed = (uint64_t)v; break;
        case STK_LOADER_SHUFFLE: shuffle = (int)v; break;
        case STK_LOADER_DROP_LAST: o.drop_last = (int)v; break;
        case STK_LOADER_WORLD_SIZE: o.world_size = (uint32_t)v; break;
        case STK_LOADER_RANK: o.rank = (uint32_t)v; break;
        case STK_LOADER_ON_ERROR: o.on_error = (stk_error_policy)v; break;
        case STK_LOADER_BLOCK: block = (int)v; break;
        case STK_LOADER_BLOCK_SIZE: o.block_size = (uint64_t)v; break;
        case STK_LOADER_SHUFFLE_WINDOW: o.shuffle_window = (uint32_t)v; break;
        case STK_LOADER_AUGMENT_SEED:
            if (t.given[i]) {
                o.aug_seed = (uint64_t)v;
                o.flags |= STK_LOADER_AUG_SEED;
            }
            break;
        case STK_LOADER_VIEWS: o.views = (uint32_t)v; break;
        case STK_LOADER_EAGER_START: eager = (int)v; break;
        case STK_LOADER_MEMORY_LIMIT: o.memory_limit = (uint64_t)v; break;
        case STK_LOADER_FIELDS: o.fields = t.given[i] ? t.str[i] : NULL; break;
        case STK_LOADER_DEVICE: device = t.given[i] ? t.str[i] : NULL; break;
        case STK_LOADER_PLACEMENT: dev.placement = (stk_placement)v; break;
        case STK_LOADER_DECODER: dev.decoder = (stk_decoder)v; break;
        default:
            if (t.given[i])
                post[npost++] = i;
        }
    }
    /* The device options: borrowed by stk_loader_create, which copies them
     * (and the device string) before returning. */
    if (device && *device) {
        dev.device = device;
        o.device = &dev;
    }
    if (mix_sizes.obj) {
        sg.mix_sizes = mix_sizes.buf;
        sg.num_mix = (uint64_t)mix_sizes.len / sizeof(uint64_t);
    }
    PyObject *made = NULL;
    if (mix_weights.obj) {
        sg.mix_weights = mix_weights.buf;
        if ((uint64_t)mix_weights.len / sizeof(double) != sg.num_mix) {
            PyErr_SetString(PyExc_ValueError, "mix_weights: one per dataset");
            goto done;
        }
    }
    made = loader_make(type, dataset, spec, &o, &sg, &indices, &weights, balance, eager, shuffle,
                       block, mode, convert, convert_device, &t, post, npost);
done:
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
                             Py_buffer *weights, int balance, int eager, int shuffle, int block,
                             int mode, PyObject *convert, PyObject *convert_device,
                             const table_args *t, const int *post, int npost)
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
    if (eager && !npost) /* else started once the sets are made */
        o.flags |= STK_LOADER_EAGER;
    if (mode < OUT_OBJECTS || mode > OUT_CALL || (mode != OUT_OBJECTS && !PyCallable_Check(convert))) {
        PyErr_SetString(PyExc_ValueError, "output mode needs a callable converter");
        return NULL;
    }
    if (convert_device != Py_None && !PyCallable_Check(convert_device)) {
        PyErr_SetString(PyExc_ValueError, "device_convert must be callable (or None)");
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

    LoaderObject *self = (LoaderObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->dataset = Py_NewRef(dataset);
    self->convert = mode == OUT_OBJECTS ? NULL : Py_NewRef(convert);
    self->convert_device = convert_device == Py_None ? NULL : Py_NewRef(convert_device);
    self->mode = mode;
    self->fork_gen = stk_py_fork_generation;
    self->pid = (long)getpid();

    stk_loader *l = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_create(((DatasetObject *)dataset)->ds, spec, &o, &l);
    /* The rows stk_loader_options has no field for, then the start. */
    for (int k = 0; rc >= 0 && k < npost; k++) {
        const stk_loader_param_info *r = &param_rows[post[k]];
        rc = r->type == STK_PARAM_STRING ? stk_loader_set_string(l, r->key, t->str[post[k]])
                                         : stk_loader_set(l, r->key, t->num[post[k]]);
    }
    if (rc >= 0 && npost && eager)
        rc = stk_loader_start(l);
    Py_END_ALLOW_THREADS
    if (rc >= 0) { /* as the loader resolved it (defaults, memory_limit) */
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        self->max_batches = st.max_batches;
    }
    if (rc < 0) {
        stk_py_raise_last(rc);
        if (l) { /* a set or the start failed */
            Py_BEGIN_ALLOW_THREADS
            stk_loader_destroy(l);
            Py_END_ALLOW_THREADS
        }
        Py_DECREF(self);
        return NULL;
    }
    self->l = l;
    self->length = stk_loader_length(l);
    stk_dtype dtype;
    stk_layout layout;
    stk_loader_sample_shape(l, self->sample_shape, &dtype, &layout, NULL);
    self->kind = stk_py_kind_of_dtype(dtype);
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
    stk_py_loader_destroy_c(self);
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
    if (self->l && !self->closed && self->fork_gen == stk_py_fork_generation)
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

static PyObject *loader_get_skipped(LoaderObject *self, void *c)
{
    if (!self->skipped && !(self->skipped = PyList_New(0)))
        return NULL;
    return Py_NewRef(self->skipped);
}

static int set_epoch_c(LoaderObject *self, uint64_t epoch)
{
    int rc = stk_loader_set_epoch(self->l, epoch);
    if (rc < 0) {
        stk_py_raise_last(rc);
        return -1;
    }
    return 0;
}

/* Start a pass (see "Epochs" at the top). */
static PyObject *loader_make_iter(LoaderObject *self, int with_indices, PyObject *wrap)
{
    if (stk_py_loader_check(self) < 0)
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
    IterObject *it = PyObject_New(IterObject, &stk_py_iter_type);
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
    if (!stk_py_conv_u64(arg, &epoch) || stk_py_loader_check(self) < 0)
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
    return !v || stk_py_conv_u64(v, out) ? 0 : -1;
}

static int dict_u64(PyObject *d, const char *key, uint64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_KeyError, "state_dict has no '%s'", key);
        return -1;
    }
    return stk_py_conv_u64(v, out) ? 0 : -1;
}

static PyObject *loader_set_state(LoaderObject *self, PyObject *d)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "load_state_dict expects a dict from state_dict()");
        return NULL;
    }
    if (stk_py_loader_check(self) < 0)
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
        return stk_py_raise_last(rc);
    self->resume_pending = 1;
    self->resume_epoch = epoch;
    self->gen++;
    Py_RETURN_NONE;
}

static PyObject *loader_warmup(LoaderObject *self, PyObject *u)
{
    (void)u;
    if (stk_py_loader_check(self) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_start(self->l);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise_last(rc);
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
        return stk_py_raise_last(rc);
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
    if (self->fork_gen == stk_py_fork_generation && self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "cannot close a Loader another thread is waiting on");
        return NULL;
    }
    self->closed = 1;
    self->gen++;
    if (self->lent == 0)
        stk_py_loader_destroy_c(self);
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

static PyObject *loader_get_dtype(LoaderObject *self, void *c) { return PyUnicode_FromString(stk_py_kinds[self->kind].name); }
static PyObject *loader_get_layout(LoaderObject *self, void *c) { return PyUnicode_FromString(self->layout == STK_CHW ? "NCHW" : "NHWC"); }
static PyObject *loader_get_closed(LoaderObject *self, void *c) { return PyBool_FromLong(self->closed); }
static PyObject *loader_get_dataset(LoaderObject *self, void *c) { return Py_NewRef(self->dataset); }
static PyObject *loader_get_max_batches(LoaderObject *self, void *c) { return PyLong_FromUnsignedLong(self->max_batches); }

/* fields() -> [(name, role, dtype, variable, text, shape)]: what each
 * item of an iteration holds (shape: per row, or per value row of a
 * variable field). */
static PyObject *loader_fields(LoaderObject *self, PyObject *unused)
{
    if (stk_py_loader_check(self) < 0)
        return NULL;
    uint32_t n = stk_loader_field_count(self->l);
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        stk_batch_field f;
        if (stk_loader_field(self->l, NULL, i, &f) < 0) {
            Py_DECREF(list);
            return stk_py_raise_last(STK_EINVAL);
        }
        int kind = f.role == STK_ROLE_IMAGE ? self->kind : stk_py_kind_of_elem(f.elem);
        PyObject *shape = PyTuple_New(f.ndim > 0 ? f.ndim - 1 : 0);
        if (!shape) {
            Py_DECREF(list);
            return NULL;
        }
        for (uint32_t d = 1; d < f.ndim; d++)
            PyTuple_SET_ITEM(shape, d - 1, PyLong_FromLongLong(f.shape[d]));
        PyObject *e = Py_BuildValue("(sssiiN)", f.name, stk_py_role_name[f.role],
                                    stk_py_kinds[kind].name,
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
    {"params", (PyCFunction)loader_params, METH_NOARGS | METH_STATIC,
     "params() -> ((name, type, min, max, default, doc, values), ...): the library's loader "
     "parameter table (stk_loader_param_describe), whose rows are keywords of _Loader."},
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

PyTypeObject stk_py_loader_type = {
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
