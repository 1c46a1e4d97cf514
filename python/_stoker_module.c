/*
 * _stoker_module.c — the module stoker._stoker itself: its init
 * (PyInit__stoker: the types made ready and added, the exception classes),
 * the state every file shares (the fork generation, the error table, the
 * gc module), the error conversion and argument converters, and the
 * module-level functions: strerror, spec_check/spec_validate, op_table,
 * pack, doctor, cli_main, the remote cache (remote_configure, cache_info,
 * cache_trim, prefetch), io_stats and jpeg_index_stats. Each type lives in
 * its own file (_stoker.h lists them).
 *
 * Errors: a C call fails with a negative code and a thread-local message
 * (stk_errmsg); stk_py_raise_last reads the message at once and raises the
 * class mapped to the code (stoker.InvalidArgument, SpecError, ...; all
 * derive from StokerError and carry `code`). A call that releases the GIL
 * copies the message before re-taking it (pack, doctor).
 *
 * Ownership: the exception classes and the gc module are created once by
 * the init and kept in statics for the process; nothing here frees them.
 *
 * Threads: everything runs with the GIL held, except the blocking library
 * calls (pack, doctor, the remote cache, cli_main), which release it.
 * stk_py_fork_generation is bumped by the pthread_atfork child handler,
 * which runs in the child's only thread.
 *
 * The command-line tool: with STK_HAVE_CLI (setup.py, and CMake when it
 * builds the CLI) the sources of cli/ are compiled into this module without
 * their main(), and cli_main(argv) runs the tool (stoker/__main__.py: the
 * `stoker` console script and `python -m stoker`).
 */
#include "_stoker.h"

PyMODINIT_FUNC PyInit__stoker(void);

/* ------------------------------------------------------------------------ */
/* Module state                                                              */
/* ------------------------------------------------------------------------ */

/* Bumped in every child process after fork() (pthread_atfork); objects that
 * own threads remember the generation they were made in. */
volatile unsigned long stk_py_fork_generation;

static void on_fork_child(void) { stk_py_fork_generation++; }

/* Exception classes, by -code (see docs/python.md). */
PyObject *stk_py_stoker_error, *stk_py_fork_error;
PyObject *stk_py_gc_module; /* the gc module, for gc.collect() */
PyObject *stk_py_code_exc[STK_PY_N_CODES];

int stk_py_interpreter_alive(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

/* A C message as str: UTF-8, bytes that are not (a file name's) kept as
 * lone surrogates, as os.fsdecode does, never a UnicodeDecodeError. */
PyObject *stk_py_message_str(const char *msg)
{
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "surrogateescape");
}

/* Raise the exception class mapped to `code` with `msg` (the C detail; the
 * code's description when empty). The exception gets a `code` attribute. */
PyObject *stk_py_raise_code(int code, const char *msg)
{
    PyObject *type = (code < 0 && -code < STK_PY_N_CODES && stk_py_code_exc[-code])
                         ? stk_py_code_exc[-code]
                         : stk_py_stoker_error;
    if (!msg || !*msg)
        msg = stk_strerror(code);
    PyObject *m = stk_py_message_str(msg);
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
PyObject *stk_py_raise_last(int code) { return stk_py_raise_code(code, stk_errmsg()); }

/* O& converters with range checks (the 'I'/'K' formats do not check). */
int stk_py_conv_u64(PyObject *o, void *out)
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

int stk_py_conv_u32(PyObject *o, void *out)
{
    uint64_t v;
    if (!stk_py_conv_u64(o, &v))
        return 0;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%R is not an integer in [0, 2**32)", o);
        return 0;
    }
    *(uint32_t *)out = (uint32_t)v;
    return 1;
}

/* _dlpack_stream(stream) -> the CUstream __dlpack__ makes wait, or None
 * for -1 (no synchronisation): the argument handling alone, for tests. */
static PyObject *mod_dlpack_stream(PyObject *m, PyObject *arg)
{
    uint64_t s;
    int sync;
    if (stk_py_dlpack_stream(arg, &s, &sync) < 0)
        return NULL;
    if (!sync)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(s);
}

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
    if (!PyArg_ParseTuple(args, "sO&O&O&:spec_check", &spec, stk_py_conv_u32, &h,
                          stk_py_conv_u32, &w, stk_py_conv_u32, &c))
        return NULL;
    int64_t shape[3];
    stk_dtype dtype;
    stk_layout layout;
    int rc = stk_spec_check(spec, h, w, c, shape, &dtype, &layout);
    if (rc < 0)
        return stk_py_raise_last(rc);
    return Py_BuildValue("((LLL)ss)", (long long)shape[0], (long long)shape[1], (long long)shape[2],
                         stk_py_kinds[stk_py_kind_of_dtype(dtype)].name,
                         layout == STK_CHW ? "CHW" : "HWC");
}

static PyObject *mod_spec_validate(PyObject *m, PyObject *arg)
{
    const char *spec = PyUnicode_AsUTF8(arg);
    if (!spec)
        return NULL;
    int rc = stk_spec_validate(spec);
    if (rc < 0)
        return stk_py_raise_last(rc);
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
        stk_py_raise_code(rc, msg);
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
        PyObject *why = stk_py_message_str(k.reasons[i]);
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
        stk_py_raise_code(rc, msg);
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
        return stk_py_raise_last(rc);
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
        return stk_py_raise_last(rc);
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
        return stk_py_raise_last(rc);
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
        return stk_py_raise_last(rc);
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

/* One exception class: stoker.NAME deriving from stk_py_stoker_error (and `extra`). */
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
    if (PyType_Ready(&stk_py_array_type) < 0 || PyType_Ready(&stk_py_dataset_type) < 0 ||
        PyType_Ready(&stk_py_loader_type) < 0 || PyType_Ready(&stk_py_batch_type) < 0 ||
        PyType_Ready(&stk_py_fieldview_type) < 0 || PyType_Ready(&stk_py_iter_type) < 0 ||
        PyType_Ready(&stk_py_shard_writer_type) < 0)
        return NULL;
    if (!stk_py_gc_module && !(stk_py_gc_module = PyImport_ImportModule("gc")))
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    /* User-defined ops: _register_op, load_plugin (_stoker_ops.c). */
    if (stk_py_ops_add(m) < 0)
        return NULL;

    stk_py_stoker_error = PyErr_NewExceptionWithDoc(
        "stoker.StokerError",
        "Base class of every error stoker raises. `code` is the C error code (STK_E*).",
        PyExc_Exception, NULL);
    if (!stk_py_stoker_error || PyModule_AddObjectRef(m, "StokerError", stk_py_stoker_error) < 0)
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
        PyObject *e = add_exc(m, table[i].name, stk_py_stoker_error, table[i].extra, table[i].doc);
        if (!e)
            goto fail;
        stk_py_code_exc[-table[i].code] = e;
    }
    /* NotFound derives from StokerIOError and FileNotFoundError. */
    PyObject *nf = add_exc(m, "NotFound", stk_py_code_exc[-STK_EIO], PyExc_FileNotFoundError,
                           "A file or directory does not exist (STK_ENOENT).");
    if (!nf)
        goto fail;
    stk_py_code_exc[-STK_ENOENT] = nf;
    stk_py_fork_error = add_exc(m, "ForkError", stk_py_stoker_error, PyExc_RuntimeError,
                        "A Loader was used in a process forked from the one that created it.");
    if (!stk_py_fork_error)
        goto fail;

    if (PyModule_AddObjectRef(m, "Dataset", (PyObject *)&stk_py_dataset_type) < 0 ||
        PyModule_AddObjectRef(m, "_Loader", (PyObject *)&stk_py_loader_type) < 0 ||
        PyModule_AddObjectRef(m, "Batch", (PyObject *)&stk_py_batch_type) < 0 ||
        PyModule_AddObjectRef(m, "_Array", (PyObject *)&stk_py_array_type) < 0 ||
        PyModule_AddObjectRef(m, "_Iterator", (PyObject *)&stk_py_iter_type) < 0 ||
        PyModule_AddObjectRef(m, "_ShardWriter", (PyObject *)&stk_py_shard_writer_type) < 0 ||
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
