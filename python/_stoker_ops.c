/*
 * _stoker_ops.c — user-defined ops from Python (part of the extension
 * stoker._stoker; python/stoker/user_ops.py is the Python half):
 * stoker.NumbaOp and stoker.PythonOp become ops of stoker/op.h,
 * registered with stk_op_register, and stoker.load_plugin is
 * stk_plugin_load. Built on the public API only.
 *
 * Each registration is a `pyop`, allocated once and never freed (stoker's
 * registrations are permanent): its kind, what to call, how many uniform
 * numbers to draw per sample, and an optional shape callable. The Python
 * side registers a function once and reuses the name (user_ops.py).
 *
 *   numba   run calls the @numba.cfunc's address directly from the worker
 *           thread, without the GIL:
 *             int32 f(uint8 *src, int64 h, int64 w, int64 c,
 *                     uint8 *dst, int64 oh, int64 ow, int64 oc,
 *                     float64 *args, float64 *random)
 *           0 is success; STK_EDATA (-11) marks a bad sample; any other
 *           value fails the loader.
 *   python  run takes the GIL (PyGILState_Ensure) and calls the trampoline
 *           user_ops._run(fn, src_bytes, h, w, c, oh, ow, oc, random), which
 *           calls fn(image, random) and returns the C-contiguous uint8
 *           result, or a str (the error message, with the traceback) on an
 *           exception. The input is a copy (bytes), so an array the
 *           function keeps stays valid. On a free-threaded CPython
 *           (Py_GIL_DISABLED) the calls run in parallel; otherwise they
 *           serialise on the GIL (docs/ops.md measures the cost).
 *
 * The arguments of the spec stage (numbers, at most 16) are parsed here
 * into the state, and handed to a numba function as `args`. Errors are
 * raised through the module's error table (stk_py_raise_last, _stoker.h),
 * and stk_py_ops_add puts _register_op and load_plugin into the module.
 */
#include "_stoker.h"

#include <stoker/op.h>

#include <math.h>

#define MAX_ARGS 16

enum { PYOP_NUMBA = 1, PYOP_PYTHON = 2 };

typedef int32_t (*numba_fn)(const uint8_t *src, int64_t h, int64_t w, int64_t c, uint8_t *dst,
                            int64_t oh, int64_t ow, int64_t oc, const double *args,
                            const double *random);

typedef struct pyop {
    int kind;
    numba_fn fn;        /* numba: the cfunc's address */
    PyObject *call;     /* python: the callable fn (strong, kept for the process) */
    PyObject *tramp;    /* python: user_ops._run (strong) */
    PyObject *shape;    /* (h, w, c) -> (h, w, c), or NULL: unchanged (strong) */
    uint32_t nrandom;   /* uniform draws per sample, <= STK_OP_MAX_DRAWS */
    char name[STK_OP_NAME_MAX + 1];
} pyop;

typedef struct pystate {
    const pyop *op;
    int nargs;
    double args[MAX_ARGS];
} pystate;

/* --- hooks ----------------------------------------------------------------- */

static int op_parse(void *user, int argc, const char *const *argv, void **state, char *err,
                    size_t errsize)
{
    const pyop *op = user;
    if (argc > MAX_ARGS) {
        snprintf(err, errsize, "at most %d arguments, got %d", MAX_ARGS, argc);
        return -1;
    }
    pystate *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    s->op = op;
    s->nargs = argc;
    for (int k = 0; k < argc; k++) {
        char *end;
        double v = strtod(argv[k], &end);
        if (end == argv[k] || *end || !isfinite(v)) {
            snprintf(err, errsize, "argument %d must be a number, got '%s'", k + 1, argv[k]);
            free(s);
            return -1;
        }
        s->args[k] = v;
    }
    if (op->kind == PYOP_PYTHON && argc) {
        snprintf(err, errsize, "a PythonOp takes no spec arguments (bind them in the function)");
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

/* The Python shape callable, under the GIL: (h, w, c) -> (h, w, c). */
static int op_shape(void *state, const uint32_t in[3], uint32_t out[3], char *err,
                    size_t errsize)
{
    const pystate *s = state;
    if (!s->op->shape)
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    PyObject *r = PyObject_CallFunction(s->op->shape, "III", in[0], in[1], in[2]);
    unsigned long v[3];
    if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 3) {
        rc = 0;
        for (int k = 0; k < 3 && rc == 0; k++) {
            v[k] = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(r, k));
            if (PyErr_Occurred() || v[k] > UINT32_MAX)
                rc = -1;
        }
    }
    if (rc == 0) {
        for (int k = 0; k < 3; k++)
            out[k] = (uint32_t)v[k];
    } else if (PyErr_Occurred()) {
        PyObject *t, *val, *tb;
        PyErr_Fetch(&t, &val, &tb);
        PyObject *str = val ? PyObject_Str(val) : NULL;
        const char *m = str ? PyUnicode_AsUTF8(str) : NULL;
        snprintf(err, errsize, "shape(%u, %u, %u) raised %s: %s", in[0], in[1], in[2],
                 t ? ((PyTypeObject *)t)->tp_name : "?", m ? m : "");
        PyErr_Clear();
        Py_XDECREF(str);
        Py_XDECREF(t);
        Py_XDECREF(val);
        Py_XDECREF(tb);
    } else {
        snprintf(err, errsize, "shape(%u, %u, %u) must return (height, width, channels)", in[0],
                 in[1], in[2]);
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

static void op_draw(void *state, stk_op_rng *rng, double *params)
{
    const pystate *s = state;
    for (uint32_t k = 0; k < s->op->nrandom; k++)
        params[k] = stk_op_rng_uniform(rng);
}

static int run_python(const pystate *s, const double *params, const stk_op_image *in,
                      stk_op_image *out, char *err, size_t errsize)
{
    if (!stk_py_interpreter_alive()) {
        snprintf(err, errsize, "the Python interpreter is shutting down");
        return STK_ESTOPPED;
    }
    const pyop *op = s->op;
    size_t in_bytes = (size_t)in->height * in->stride, out_bytes = (size_t)out->height * out->stride;
    int rc = STK_EINVAL;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *src = PyBytes_FromStringAndSize((const char *)in->pixels, (Py_ssize_t)in_bytes);
    PyObject *rnd = PyTuple_New(op->nrandom);
    PyObject *r = NULL;
    if (src && rnd) {
        int ok = 1;
        for (uint32_t k = 0; k < op->nrandom && ok; k++) {
            PyObject *f = PyFloat_FromDouble(params[k]);
            if (!f)
                ok = 0;
            else
                PyTuple_SET_ITEM(rnd, k, f);
        }
        if (ok)
            r = PyObject_CallFunction(op->tramp, "OOIIIIIIO", op->call, src, in->height,
                                      in->width, in->channels, out->height, out->width,
                                      out->channels, rnd);
    }
    if (r && PyUnicode_Check(r)) { /* the trampoline caught an exception */
        const char *m = PyUnicode_AsUTF8(r);
        snprintf(err, errsize, "%s", m ? m : "the function raised an exception");
        /* "stoker.DataError: ..." marks a bad sample */
        rc = m && strncmp(m, "DataError", 9) == 0 ? STK_EDATA : STK_EINVAL;
    } else if (r) {
        Py_buffer got;
        if (PyObject_GetBuffer(r, &got, PyBUF_C_CONTIGUOUS) == 0) {
            if ((size_t)got.len == out_bytes) {
                memcpy(out->pixels, got.buf, out_bytes);
                rc = 0;
            } else {
                snprintf(err, errsize, "the result has %zd bytes, expected %zu", got.len,
                         out_bytes);
            }
            PyBuffer_Release(&got);
        }
    }
    if (rc != 0 && !err[0]) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyObject *str = v ? PyObject_Str(v) : NULL;
        const char *m = str ? PyUnicode_AsUTF8(str) : NULL;
        snprintf(err, errsize, "%s: %s", t ? ((PyTypeObject *)t)->tp_name : "error",
                 m ? m : "");
        Py_XDECREF(str);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    }
    PyErr_Clear();
    Py_XDECREF(r);
    Py_XDECREF(src);
    Py_XDECREF(rnd);
    PyGILState_Release(g);
    return rc;
}

static int op_run(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                  char *err, size_t errsize)
{
    const pystate *s = state;
    if (s->op->kind == PYOP_PYTHON)
        return run_python(s, params, in, out, err, errsize);
    int32_t r = s->op->fn(in->pixels, in->height, in->width, in->channels, out->pixels,
                          out->height, out->width, out->channels, s->args, params);
    if (r == 0)
        return 0;
    snprintf(err, errsize, "the numba function returned %d", (int)r);
    return r < 0 ? r : STK_EINVAL;
}

/* --- module functions ------------------------------------------------------ */

/* _register_op(kind, name, address_or_fn, nrandom, shape, trampoline) */
static PyObject *mod_register_op(PyObject *self, PyObject *args)
{
    int kind;
    const char *name;
    PyObject *target, *shape, *tramp;
    unsigned int nrandom;
    if (!PyArg_ParseTuple(args, "isOIOO", &kind, &name, &target, &nrandom, &shape, &tramp))
        return NULL;
    if (kind != PYOP_NUMBA && kind != PYOP_PYTHON) {
        PyErr_SetString(PyExc_ValueError, "unknown op kind");
        return NULL;
    }
    if (nrandom > STK_OP_MAX_DRAWS) {
        PyErr_Format(PyExc_ValueError, "random must be 0 to %d, got %u", STK_OP_MAX_DRAWS,
                     nrandom);
        return NULL;
    }
    if (strlen(name) > STK_OP_NAME_MAX) {
        PyErr_SetString(PyExc_ValueError, "op name too long");
        return NULL;
    }
    pyop *op = calloc(1, sizeof *op);
    if (!op)
        return PyErr_NoMemory();
    op->kind = kind;
    op->nrandom = nrandom;
    snprintf(op->name, sizeof op->name, "%s", name);
    if (kind == PYOP_NUMBA) {
        void *addr = PyLong_AsVoidPtr(target);
        if (!addr) {
            free(op);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "the numba function's address is NULL");
            return NULL;
        }
        memcpy(&op->fn, &addr, sizeof addr);
    } else {
        op->call = Py_NewRef(target);
        op->tramp = Py_NewRef(tramp);
    }
    op->shape = shape == Py_None ? NULL : Py_NewRef(shape);
    stk_user_op u = {.abi_version = STK_OP_ABI_VERSION, .struct_size = sizeof(stk_user_op),
                     .name = op->name, .usage = kind == PYOP_NUMBA ? "[ARGS...]" : "",
                     .parse = op_parse, .output_shape = op_shape, .draw = op_draw,
                     .run = op_run, .free = free, .user = op};
    int rc = stk_op_register(&u);
    if (rc < 0) {
        Py_XDECREF(op->call);
        Py_XDECREF(op->tramp);
        Py_XDECREF(op->shape);
        free(op);
        return stk_py_raise_last(rc);
    }
    Py_RETURN_NONE;
}

static PyObject *mod_load_plugin(PyObject *self, PyObject *arg)
{
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    int rc;
    const char *path = PyBytes_AS_STRING(bytes);
    Py_BEGIN_ALLOW_THREADS
    rc = stk_plugin_load(path);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(bytes);
        return stk_py_raise_last(rc);
    }
    Py_DECREF(bytes);
    Py_RETURN_NONE;
}

static PyMethodDef ops_methods[] = {
    {"_register_op", mod_register_op, METH_VARARGS,
     "_register_op(kind, name, target, nrandom, shape, trampoline)\n--\n\n"
     "Register a NumbaOp (kind 1, target = the cfunc's address) or a PythonOp (kind 2, "
     "target = the function) as the user-defined op `name` (stoker/op.h). Internal: "
     "use stoker.NumbaOp / stoker.PythonOp."},
    {"load_plugin", mod_load_plugin, METH_O,
     "load_plugin(path)\n--\n\nLoad a plugin of user-defined ops (a shared library "
     "exporting stk_plugin_init, see docs/ops.md). Loading it again does nothing."},
    {NULL, NULL, 0, NULL},
};

int stk_py_ops_add(PyObject *module) { return PyModule_AddFunctions(module, ops_methods); }
