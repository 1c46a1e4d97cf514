/*
 * callback.c — a dataset whose samples come from the caller's functions
 * (stk_dataset_from_callbacks). The Python module's stoker.ExternalSource is
 * one: its read takes the GIL and calls the object's __getitem__; a C
 * program may hand over a database cursor or a generator of synthetic
 * images the same way. From the loader's side it is a dataset like any
 * other: random access by index, read concurrently by every worker.
 *
 * Ownership. What the caller's `read` gives is borrowed only until it is
 * copied: every read copies the encoded bytes, or the pixels (a strided
 * view, e.g. a CHW array, becomes dense HWC), into the calling thread's
 * scratch, then calls the caller's `release` with the read's token on the
 * same thread before returning. Views handed to the loader therefore point
 * into the worker's scratch, valid until its next read, as for any reader;
 * the caller never has to guess when the library is done. The copy costs
 * one pass over the bytes, small beside decoding and augmenting them, and
 * it is what makes a Python object safe to drop right away.
 *
 * Invariants. The impl is immutable after create (declarations, names and
 * limits copied in), so every hook here runs concurrently without a lock;
 * the caller's callbacks are thread-safe by contract (stoker.h). Every value
 * a callback hands over is checked before it is copied: dimensions against
 * max_pixels and the declared shape, strides against the size the caller
 * says its buffer spans, field sizes against their declared shape; a bad
 * value is STK_EDATA naming the dataset, the sample and the field, so a
 * loader's on_error=skip skips that sample and nothing reads out of bounds.
 * A callback error keeps the callback's message (stk_callback_fail) under
 * the prefix "NAME: sample INDEX".
 */
#include "core/error.h"
#include "core/image.h"
#include "core/util.h"
#include "format/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cb_impl {
    stk_dataset_callbacks cb; /* copied at create */
    void *user;               /* the caller's: passed to every callback */
    uint64_t max_pixels;
    uint32_t nfields;
    stk_field_info *fields;   /* nfields declarations; names point into names[] */
    char **names;             /* owned copies of the field names */
    bool owns_user;           /* close calls cb.close (set once create succeeded) */
} cb_impl;

enum { F_IMAGE = 0, F_LABEL = 1, F_EXTRA = 2 };

int stk_callback_fail(int code, const char *message)
{
    stk_errmsg_set(message ? message : "");
    return code;
}

/* A failed callback: keep its message under "NAME: sample INDEX[: field
 * 'F']", or say which callback failed when it set none. */
static int callback_failed(const stk_dataset *ds, uint64_t index, const char *field, int rc)
{
    char where[640];
    snprintf(where, sizeof where, "%s: sample %llu%s%s%s", ds->uri, (unsigned long long)index,
             field ? ": field '" : "", field ? field : "", field ? "'" : "");
    const char *what = field ? "read_field" : "read";
    if (rc > 0)
        return stk_fail(STK_EINVAL,
                        "%s: the %s callback returned %d (it must return 0 or a negative STK_E* "
                        "code)",
                        where, what, rc);
    if (!stk_errmsg()[0])
        return stk_fail(rc, "%s: the %s callback failed (%s)", where, what, stk_strerror(rc));
    return stk_fail_prefix(rc, "%s", where);
}

static void release(const cb_impl *c, void *token)
{
    if (c->cb.release)
        c->cb.release(c->user, token);
}

/* Check what read gave and copy it into `scratch`; *out views the copy. */
static int take_sample(const stk_dataset *ds, uint64_t index, const stk_callback_sample *s,
                       stk_sample *out, stk_scratch *scratch)
{
    const cb_impl *c = ds->impl;
    unsigned long long i = (unsigned long long)index;
    bool fixed = ds->height != 0;
    out->label = s->label;
    if (!s->height && !s->width && !s->channels) { /* encoded */
        if (fixed)
            return stk_fail(STK_EDATA,
                            "%s: sample %llu is encoded bytes, but this dataset declares "
                            "samples of %ux%ux%u pixels",
                            ds->uri, i, ds->height, ds->width, ds->channels);
        if (!s->data || !s->size)
            return stk_fail(STK_EDATA, "%s: sample %llu: the read callback gave no bytes (an "
                                       "empty encoded image)",
                            ds->uri, i);
        int rc = stk_scratch_reserve(scratch, s->size);
        if (rc < 0)
            return rc;
        memcpy(scratch->data, s->data, s->size);
        memset(&out->image, 0, sizeof out->image);
        out->encoded = scratch->data;
        out->encoded_size = s->size;
        return 0;
    }
    uint32_t h = s->height, w = s->width, ch = s->channels;
    if (!h || !w || !ch || ch > 4)
        return stk_fail(STK_EDATA,
                        "%s: sample %llu: pixels of %ux%ux%u (height, width and channels must "
                        "all be > 0, channels at most 4; all 0 means encoded bytes)",
                        ds->uri, i, h, w, ch);
    if ((uint64_t)h * w > c->max_pixels)
        return stk_fail(STK_EDATA, "%s: sample %llu: %ux%u pixels exceed the limit of %llu",
                        ds->uri, i, h, w, (unsigned long long)c->max_pixels);
    if (fixed && (h != ds->height || w != ds->width || ch != ds->channels))
        return stk_fail(STK_EDATA,
                        "%s: sample %llu is %ux%ux%u pixels, but this dataset declares "
                        "%ux%ux%u",
                        ds->uri, i, h, w, ch, ds->height, ds->width, ds->channels);
    int64_t rs = s->row_stride, cs = s->col_stride, chs = s->chan_stride;
    if (!rs && !cs && !chs) {
        chs = 1;
        cs = ch;
        rs = (int64_t)w * ch;
    }
    if (ch == 1)
        chs = 1; /* never used: keeps one channel's rows on the memcpy path */
    if (rs < 0 || cs < 0 || chs < 0)
        return stk_fail(STK_EDATA, "%s: sample %llu: negative strides (%lld, %lld, %lld)",
                        ds->uri, i, (long long)rs, (long long)cs, (long long)chs);
    uint64_t a, b, d, span;
    if (!stk_mul_ok(h - 1, (uint64_t)rs, &a) || !stk_mul_ok(w - 1, (uint64_t)cs, &b) ||
        !stk_mul_ok(ch - 1, (uint64_t)chs, &d) || !stk_add_ok(a, b, &span) ||
        !stk_add_ok(span, d, &span) || !stk_add_ok(span, 1, &span) || !s->data ||
        span > s->size)
        return stk_fail(STK_EDATA,
                        "%s: sample %llu: %ux%ux%u pixels with strides (%lld, %lld, %lld) do "
                        "not fit in the %zu bytes given",
                        ds->uri, i, h, w, ch, (long long)rs, (long long)cs, (long long)chs,
                        s->size);
    size_t n = (size_t)h * w * ch;
    int rc = stk_scratch_reserve(scratch, n);
    if (rc < 0)
        return rc;
    stk_image_view v = {.pixels = s->data, .height = h, .width = w, .channels = ch,
                        .row_stride = (ptrdiff_t)rs, .col_stride = (ptrdiff_t)cs,
                        .chan_stride = (ptrdiff_t)chs};
    stk_image_copy_hwc(&v, scratch->data);
    out->image.pixels = scratch->data;
    out->image.height = h;
    out->image.width = w;
    out->image.channels = ch;
    out->image.row_stride = (ptrdiff_t)w * ch;
    out->image.col_stride = ch;
    out->image.chan_stride = 1;
    out->encoded = NULL;
    out->encoded_size = 0;
    return 0;
}

static int cb_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const cb_impl *c = ds->impl;
    memset(out, 0, sizeof *out);
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample %llu is out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    stk_callback_sample s;
    memset(&s, 0, sizeof s);
    stk_errmsg_clear();
    int rc = c->cb.read(c->user, index, &s);
    if (rc != 0)
        return callback_failed(ds, index, NULL, rc);
    rc = take_sample(ds, index, &s, out, scratch);
    release(c, s.token);
    return rc;
}

/* The label alone: read, keep the label, release without copying. */
static int cb_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const cb_impl *c = ds->impl;
    stk_callback_sample s;
    memset(&s, 0, sizeof s);
    stk_errmsg_clear();
    int rc = c->cb.read(c->user, index, &s);
    if (rc != 0)
        return callback_failed(ds, index, NULL, rc);
    *label = s.label;
    release(c, s.token);
    return 0;
}

static uint32_t cb_field_count(const stk_dataset *ds)
{
    const cb_impl *c = ds->impl;
    return F_EXTRA + c->nfields;
}

static int cb_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    const cb_impl *c = ds->impl;
    memset(info, 0, sizeof *info);
    if (i == F_IMAGE) {
        info->name = "image";
        if (ds->height) {
            info->type = STK_FIELD_RAW_IMAGE;
            info->ndim = 3;
            info->dims[0] = ds->height;
            info->dims[1] = ds->width;
            info->dims[2] = ds->channels;
        } else {
            info->type = STK_FIELD_IMAGE;
        }
        return 0;
    }
    if (i == F_LABEL) {
        info->name = "label";
        info->type = STK_FIELD_INT64;
        return 0;
    }
    if (i - F_EXTRA >= c->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i,
                        F_EXTRA + c->nfields);
    *info = c->fields[i - F_EXTRA];
    memset(info->reserved_, 0, sizeof info->reserved_);
    return 0;
}

/* Bytes per row of an int64/float32 field (the values after the leading
 * dimension), or 0 on overflow. */
static uint64_t row_bytes(const stk_field_info *f)
{
    uint64_t n = f->type == STK_FIELD_FLOAT32 ? 4 : 8;
    for (uint32_t d = 1; d < f->ndim; d++)
        if (!stk_mul_ok(n, f->dims[d], &n))
            return 0;
    return n;
}

/* Check an extra field's value against its declaration; *rows / shape for
 * the view. */
static int check_field(const stk_dataset *ds, uint64_t index, const stk_field_info *f,
                       const stk_callback_field *v, uint32_t shape[3])
{
    unsigned long long i = (unsigned long long)index;
    memset(shape, 0, 3 * sizeof *shape);
    if (v->size && !v->data)
        return stk_fail(STK_EDATA, "%s: sample %llu: field '%s': %zu bytes at NULL", ds->uri, i,
                        f->name, v->size);
    switch (f->type) {
    case STK_FIELD_INT64:
    case STK_FIELD_FLOAT32: {
        const char *t = f->type == STK_FIELD_FLOAT32 ? "float32" : "int64";
        uint64_t row = row_bytes(f);
        if (f->ndim == 0) {
            if (v->size != row)
                return stk_fail(STK_EDATA,
                                "%s: sample %llu: field '%s' is a %s scalar, got %zu bytes",
                                ds->uri, i, f->name, t, v->size);
            shape[0] = 1;
            return 0;
        }
        if (f->dims[0] == 0) {
            uint64_t rows = v->size / row;
            if (v->size % row || rows > UINT32_MAX)
                return stk_fail(STK_EDATA,
                                "%s: sample %llu: field '%s' holds rows of %llu %s bytes, got "
                                "%zu bytes",
                                ds->uri, i, f->name, (unsigned long long)row, t, v->size);
            shape[0] = (uint32_t)rows;
            return 0;
        }
        uint64_t want;
        if (!stk_mul_ok(row, f->dims[0], &want) || v->size != want)
            return stk_fail(STK_EDATA,
                            "%s: sample %llu: field '%s' is %llu bytes of %s (its declared "
                            "shape), got %zu",
                            ds->uri, i, f->name, (unsigned long long)want, t, v->size);
        shape[0] = f->dims[0];
        return 0;
    }
    case STK_FIELD_RAW_IMAGE: {
        uint64_t n = (uint64_t)v->shape[0] * v->shape[1];
        if (!v->shape[0] || !v->shape[1] || !v->shape[2] || v->shape[2] > 4 ||
            !stk_mul_ok(n, v->shape[2], &n) || n != v->size)
            return stk_fail(STK_EDATA,
                            "%s: sample %llu: field '%s': a raw image of %ux%ux%u in %zu bytes",
                            ds->uri, i, f->name, v->shape[0], v->shape[1], v->shape[2], v->size);
        if (f->ndim == 3 && (v->shape[0] != f->dims[0] || v->shape[1] != f->dims[1] ||
                             v->shape[2] != f->dims[2]))
            return stk_fail(STK_EDATA,
                            "%s: sample %llu: field '%s' is %ux%ux%u, declared %ux%ux%u",
                            ds->uri, i, f->name, v->shape[0], v->shape[1], v->shape[2],
                            f->dims[0], f->dims[1], f->dims[2]);
        memcpy(shape, v->shape, 3 * sizeof *shape);
        return 0;
    }
    case STK_FIELD_IMAGE:
        if (!v->size)
            return stk_fail(STK_EDATA, "%s: sample %llu: field '%s': an empty encoded image",
                            ds->uri, i, f->name);
        return 0;
    default: /* bytes, string: as they are */
        return 0;
    }
}

/* Extra field k of sample `index` through the caller's read_field, checked;
 * `copy` puts the bytes where they must go (scratch or a new buffer) while
 * the value is still lent. */
typedef int (*copy_fn)(void *dst, const void *src, size_t n);

static int extra_field(const stk_dataset *ds, uint64_t index, uint32_t k, uint32_t shape[3],
                       copy_fn copy, void *dst)
{
    const cb_impl *c = ds->impl;
    stk_callback_field v;
    memset(&v, 0, sizeof v);
    stk_errmsg_clear();
    int rc = c->cb.read_field(c->user, index, k, &v);
    if (rc != 0)
        return callback_failed(ds, index, c->fields[k].name, rc);
    rc = check_field(ds, index, &c->fields[k], &v, shape);
    if (rc == 0)
        rc = copy(dst, v.data, v.size);
    release(c, v.token);
    return rc;
}

typedef struct to_scratch {
    stk_scratch *scratch;
    const void *data;
    size_t size;
} to_scratch;

static int copy_to_scratch(void *dst, const void *src, size_t n)
{
    to_scratch *t = dst;
    int rc = stk_scratch_reserve(t->scratch, n ? n : 1);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(t->scratch->data, src, n);
    t->data = t->scratch->data;
    t->size = n;
    return 0;
}

typedef struct to_heap {
    void *data;
    size_t size;
} to_heap;

static int copy_to_heap(void *dst, const void *src, size_t n)
{
    to_heap *t = dst;
    int rc = stk_memdup(n ? src : "", n, &t->data);
    if (rc == 0)
        t->size = n;
    return rc;
}

static int cb_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                         stk_field_view *out, stk_scratch *scratch)
{
    const cb_impl *c = ds->impl;
    memset(out, 0, sizeof *out);
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample %llu is out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    if (field >= F_EXTRA + c->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, field,
                        F_EXTRA + c->nfields);
    if (field == F_LABEL) {
        int64_t label = 0;
        int rc = cb_label(ds, index, &label);
        if (rc == 0)
            rc = stk_scratch_reserve(scratch, sizeof label);
        if (rc < 0)
            return rc;
        memcpy(scratch->data, &label, sizeof label);
        out->data = scratch->data;
        out->size = sizeof label;
        out->shape[0] = 1;
        return 0;
    }
    if (field == F_IMAGE) {
        stk_sample s;
        int rc = cb_read(ds, index, &s, scratch);
        if (rc < 0)
            return rc;
        if (s.image.pixels) {
            out->data = s.image.pixels;
            out->size = (size_t)s.image.height * s.image.width * s.image.channels;
            out->shape[0] = s.image.height;
            out->shape[1] = s.image.width;
            out->shape[2] = s.image.channels;
        } else {
            out->data = s.encoded;
            out->size = s.encoded_size;
        }
        return 0;
    }
    to_scratch t = {.scratch = scratch};
    int rc = extra_field(ds, index, field - F_EXTRA, out->shape, copy_to_scratch, &t);
    if (rc == 0) {
        out->data = t.data;
        out->size = t.size;
    }
    return rc;
}

static int cb_read_field(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                         size_t *size, uint32_t shape[3])
{
    const cb_impl *c = ds->impl;
    uint32_t sh[3] = {0, 0, 0};
    if (field >= F_EXTRA) {
        if (field - F_EXTRA >= c->nfields)
            return stk_fail(STK_EINVAL, "%s: no field %u", ds->uri, field);
        to_heap t = {0};
        int rc = extra_field(ds, index, field - F_EXTRA, sh, copy_to_heap, &t);
        if (rc < 0)
            return rc;
        *data = t.data;
        *size = t.size;
        if (shape && c->fields[field - F_EXTRA].type == STK_FIELD_RAW_IMAGE)
            memcpy(shape, sh, sizeof sh);
        return 0;
    }
    stk_scratch scratch = {0};
    stk_field_view v;
    int rc = cb_field_view(ds, index, field, &v, &scratch);
    if (rc == 0 && (rc = stk_memdup(v.data, v.size, data)) == 0) {
        *size = v.size;
        if (shape && field == F_IMAGE && v.shape[0])
            memcpy(shape, v.shape, sizeof v.shape);
    }
    stk_scratch_free(&scratch);
    return rc;
}

static void cb_close(stk_dataset *ds)
{
    cb_impl *c = ds->impl;
    if (!c)
        return;
    if (c->owns_user && c->cb.close)
        c->cb.close(c->user);
    for (uint32_t k = 0; k < c->nfields; k++)
        free(c->names ? c->names[k] : NULL);
    free(c->names);
    free(c->fields);
    free(c);
    ds->impl = NULL;
}

static const stk_dataset_vtable cb_vt = {
    .format = "callback",
    .read = cb_read,
    .close = cb_close,
    .field_count = cb_field_count,
    .field_info = cb_field_info,
    .read_field = cb_read_field,
    .label = cb_label,
    .field_view = cb_field_view,
};

/* A declared extra field is one stk_dataset_field_info can describe and
 * check_field can check. */
static int check_decl(const stk_field_info *f, uint32_t k, const stk_field_info *all)
{
    if (!f->name || !f->name[0])
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field %u has no name", k);
    if (!strcmp(f->name, "image") || !strcmp(f->name, "label"))
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_callbacks: field '%s': 'image' and 'label' are the "
                        "dataset's own fields (fields declares the extra ones)",
                        f->name);
    for (uint32_t j = 0; j < k; j++)
        if (!strcmp(all[j].name, f->name))
            return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field '%s' declared twice",
                            f->name);
    if (f->compressed)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field '%s': compressed must "
                                    "be 0",
                        f->name);
    if (f->ndim > 4)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field '%s': ndim %u (at most 4)",
                        f->name, f->ndim);
    switch (f->type) {
    case STK_FIELD_INT64:
    case STK_FIELD_FLOAT32:
        for (uint32_t d = 1; d < f->ndim; d++)
            if (!f->dims[d])
                return stk_fail(STK_EINVAL,
                                "stk_dataset_from_callbacks: field '%s': dims[%u] is 0 (only "
                                "the leading dimension may vary)",
                                f->name, d);
        if (!row_bytes(f) || (f->ndim && f->dims[0] &&
                              (uint64_t)f->dims[0] > UINT64_MAX / row_bytes(f)))
            return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field '%s': its shape "
                                        "overflows",
                            f->name);
        return 0;
    case STK_FIELD_RAW_IMAGE:
        if (f->ndim != 0 && (f->ndim != 3 || !f->dims[0] || !f->dims[1] || !f->dims[2] ||
                             f->dims[2] > 4))
            return stk_fail(STK_EINVAL,
                            "stk_dataset_from_callbacks: field '%s': a raw image has ndim 0 "
                            "(any size) or 3 (height, width, channels 1..4)",
                            f->name);
        return 0;
    case STK_FIELD_IMAGE:
    case STK_FIELD_BYTES:
    case STK_FIELD_STRING:
        return 0;
    default:
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: field '%s': unknown type %d",
                        f->name, (int)f->type);
    }
}

int stk_dataset_from_callbacks(const stk_dataset_callbacks *cb, void *user,
                               const stk_callback_options *opts, stk_dataset **out)
{
    if (!out)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: out is NULL");
    *out = NULL;
    if (!cb || !cb->read || !opts)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: %s is NULL",
                        !cb ? "cb" : !opts ? "opts" : "cb->read");
    int rc = stk_reserved_check(cb->reserved_, sizeof cb->reserved_ / sizeof cb->reserved_[0],
                                "stk_dataset_callbacks");
    if (rc == 0)
        rc = stk_reserved_check(opts->reserved_,
                                sizeof opts->reserved_ / sizeof opts->reserved_[0],
                                "stk_callback_options");
    if (rc < 0)
        return rc;
    if (opts->reserved32_)
        return stk_fail(STK_EINVAL, "stk_callback_options: reserved32_ is not zero");
    if (opts->count == 0)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: count is 0");
    uint32_t h = opts->height, w = opts->width, ch = opts->channels;
    if ((h || w || ch) && (!h || !w || !ch || ch > 4))
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_callbacks: shape %ux%ux%u (all three > 0, channels "
                        "at most 4, or all three 0 for samples of any size)",
                        h, w, ch);
    uint64_t max_pixels = opts->max_pixels ? opts->max_pixels : STK_DEFAULT_MAX_PIXELS;
    if ((uint64_t)h * w > max_pixels)
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: %ux%u pixels exceed max_pixels",
                        h, w);
    if (opts->nfields && (!opts->fields || !cb->read_field))
        return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: %u fields declared without %s",
                        opts->nfields, !opts->fields ? "their declarations" : "read_field");
    for (uint32_t k = 0; k < opts->nfields; k++)
        if ((rc = check_decl(&opts->fields[k], k, opts->fields)) < 0)
            return rc;
    if (opts->class_names)
        for (uint32_t k = 0; k < opts->num_classes; k++)
            if (!opts->class_names[k])
                return stk_fail(STK_EINVAL, "stk_dataset_from_callbacks: class name %u is NULL",
                                k);

    stk_dataset *ds = stk_dataset_alloc(&cb_vt, opts->name && opts->name[0] ? opts->name
                                                                              : "callback");
    if (!ds)
        return STK_ENOMEM;
    cb_impl *c = calloc(1, sizeof *c);
    if (!c) {
        stk_dataset_close(ds);
        return stk_fail(STK_ENOMEM, "stk_dataset_from_callbacks: out of memory");
    }
    ds->impl = c;
    c->cb = *cb;
    c->user = user;
    c->max_pixels = max_pixels;
    ds->count = opts->count;
    ds->height = h;
    ds->width = w;
    ds->channels = ch;
    ds->num_classes = opts->num_classes;
    if (opts->nfields) {
        c->fields = calloc(opts->nfields, sizeof *c->fields);
        c->names = calloc(opts->nfields, sizeof *c->names);
        if (!c->fields || !c->names)
            goto oom;
        c->nfields = opts->nfields;
        for (uint32_t k = 0; k < opts->nfields; k++) {
            c->fields[k] = opts->fields[k];
            if (!(c->names[k] = stk_strdup(opts->fields[k].name)))
                goto oom;
            c->fields[k].name = c->names[k];
        }
    }
    if (opts->class_names && opts->num_classes) {
        ds->class_names = calloc(opts->num_classes, sizeof *ds->class_names);
        if (!ds->class_names)
            goto oom;
        for (uint32_t k = 0; k < opts->num_classes; k++)
            if (!(ds->class_names[k] = stk_strdup(opts->class_names[k])))
                goto oom;
    }
    c->owns_user = true;
    *out = ds;
    return 0;
oom:
    stk_dataset_close(ds);
    return stk_fail(STK_ENOMEM, "stk_dataset_from_callbacks: out of memory");
}
