/*
 * shard_writer.c — stk_shard_writer: the public way to write .stk shards
 * with any fields, record by record, from any program (the Python
 * ShardWriter is a thin layer over it). A tool on top of the library, like
 * pack.c: it builds on the internal one-file writer (format/stk/stk_writer.c).
 *
 * How it works: the schema (stk_shard_field) becomes the shard's field
 * table (stk_field_def) once, at create. Each add checks every value
 * against its field — type, fixed shape, raw image shape, whole rows of a
 * varying array, UTF-8 of strings, that an encoded image looks like one —
 * before anything is written, so a value that does not fit is STK_EINVAL
 * naming the record (its number among the records added, from 0) and the
 * field, and leaves the writer as it was. Raw images are stored as the
 * format's 12-byte shape prefix + pixels (or + one zstd frame) built in a
 * per-field buffer; every other value is written as given. A shard is
 * sealed (index and footer into its temporary file) when it reaches
 * records_per_shard records or shard_bytes bytes, and a new one begun.
 *
 * Invariant: nothing is under a shard name (DEST/shard-NNNNN.stk) before
 * finish, which commits every sealed temporary with the shard-set keys in
 * the same two steps as stk_pack (stk_shard_set_commit): a crash leaves
 * temporaries only (removed by the next pack or writer into DEST), an
 * abort or a failed finish removes everything this writer wrote.
 *
 * Ownership: the writer owns copies of the schema names and metadata; the
 * values of an add are read during the call only. An I/O failure marks the
 * writer failed (its open shard is in an unknown state): every later call
 * is STK_ESTATE and only abort (or finish, which fails and cleans up)
 * remains.
 *
 * Thread safety: one thread at a time per writer; no global state.
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/class_names.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#define DEFAULT_SHARD_BYTES (1ull << 30)
#define MAX_USER_METADATA 4096

struct stk_shard_writer {
    char *dest;                          /* owned */
    stk_field_def defs[STK_MAX_FIELDS];  /* the field table */
    int zstd_level[STK_MAX_FIELDS];      /* raw_image fields: 0 or 1..19 */
    uint32_t nfields;
    /* Metadata, owned: the first nmeta_owned keys and values are malloc'd
     * strings; then the two set keys, static placeholders that
     * stk_shard_set_commit replaces with its own values at finish. */
    stk_kv *meta;
    uint32_t nmeta, nmeta_owned;
    uint64_t records_per_shard, shard_bytes;
    stk_shard_file *cur;                 /* owned: the open shard, or NULL */
    stk_shard_file **staged;             /* owned: sealed shards, nstaged */
    char **paths;                        /* owned: the final path of each shard begun */
    uint32_t nstaged, npaths;
    uint64_t records, bytes;             /* records added; bytes of sealed shards */
    bool failed;                         /* an I/O failure: only abort remains */
    stk_value_bytes values[STK_MAX_FIELDS];
    stk_scratch payload[STK_MAX_FIELDS]; /* owned: raw image records */
    ZSTD_CCtx *zstd;                     /* owned, when a field compresses */
};

static const char *type_word(uint8_t type)
{
    switch (type) {
    case STK_FIELD_BYTES: return "bytes";
    case STK_FIELD_IMAGE: return "image";
    case STK_FIELD_RAW_IMAGE: return "raw_image";
    case STK_FIELD_INT64: return "int64";
    case STK_FIELD_FLOAT32: return "float32";
    case STK_FIELD_STRING: return "string";
    default: return "unknown";
    }
}

/* The writer's schema from the caller's, checked. */
static int take_schema(stk_shard_writer *w, const stk_shard_field *fields, uint32_t nfields)
{
    const char *d = w->dest;
    if (!fields || nfields == 0 || nfields > STK_MAX_FIELDS)
        return stk_fail(STK_EINVAL, "%s: a shard needs 1 to %d fields, got %u", d, STK_MAX_FIELDS,
                        fields ? nfields : 0);
    bool compress = false;
    for (uint32_t i = 0; i < nfields; i++) {
        const stk_shard_field *f = &fields[i];
        stk_field_def *def = &w->defs[i];
        char what[64];
        snprintf(what, sizeof what, "stk_shard_field %u", i);
        int rc = stk_reserved_check(f->reserved_, sizeof f->reserved_ / sizeof f->reserved_[0],
                                    what);
        if (rc < 0)
            return rc;
        size_t len = f->name ? strlen(f->name) : 0;
        if (len == 0 || len >= STK_FIELD_NAME_MAX)
            return stk_fail(STK_EINVAL, "%s: field %u needs a name of 1 to 31 bytes", d, i);
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(w->defs[j].name, f->name))
                return stk_fail(STK_EINVAL, "%s: field name '%s' is used twice", d, f->name);
        memcpy(def->name, f->name, len);
        if (f->type < STK_FIELD_BYTES || f->type > STK_FIELD_STRING)
            return stk_fail(STK_EINVAL, "%s: field '%s': unknown type %d", d, f->name,
                            (int)f->type);
        def->type = (uint8_t)f->type;
        bool array = f->type == STK_FIELD_INT64 || f->type == STK_FIELD_FLOAT32;
        if (f->ndim > 4 || (f->type == STK_FIELD_RAW_IMAGE && f->ndim != 0 && f->ndim != 3) ||
            (!array && f->type != STK_FIELD_RAW_IMAGE && f->ndim != 0))
            return stk_fail(STK_EINVAL, "%s: field '%s': %u dimensions: %s", d, f->name, f->ndim,
                            f->type == STK_FIELD_RAW_IMAGE ? "a raw_image has 0 (any shape) or 3 (H, W, C)"
                            : array ? "an array has 0 (a scalar) to 4"
                                    : "image, bytes and string fields have no shape");
        def->ndim = (uint8_t)f->ndim;
        for (uint32_t k = 0; k < f->ndim; k++) {
            def->dims[k] = f->dims[k];
            if (!f->dims[k] && !(array && k == 0))
                return stk_fail(STK_EINVAL, "%s: field '%s': dimension %u is 0 (only the first "
                                            "dimension of an int64/float32 field may be 0: it "
                                            "then varies per record)",
                                d, f->name, k);
        }
        if (f->type == STK_FIELD_RAW_IMAGE && f->ndim == 3 && (f->dims[2] > 4))
            return stk_fail(STK_EINVAL, "%s: field '%s': %u channels (1 to 4)", d, f->name,
                            f->dims[2]);
        if (f->zstd_level < 0 || f->zstd_level > 19 ||
            (f->zstd_level && f->type != STK_FIELD_RAW_IMAGE))
            return stk_fail(STK_EINVAL, "%s: field '%s': zstd level %d: use 1..19, for raw_image "
                                        "fields only", d, f->name, f->zstd_level);
        w->zstd_level[i] = f->zstd_level;
        def->compression = f->zstd_level ? 1 : 0;
        compress |= f->zstd_level != 0;
        uint8_t storage;
        uint32_t elem;
        uint64_t fixed;
        const char *why = "";
        if (stk_field_layout(def, &storage, &elem, &fixed, &why) < 0)
            return stk_fail(STK_EINVAL, "%s: field '%s': %s", d, f->name, why);
    }
    w->nfields = nfields;
    if (compress && !(w->zstd = ZSTD_createCCtx()))
        return stk_fail(STK_ENOMEM, "out of memory");
    return 0;
}

static int add_meta(stk_shard_writer *w, const char *key, const char *value)
{
    char *k = stk_strdup(key), *v = stk_strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    w->meta[w->nmeta++] = (stk_kv){k, v, strlen(v)};
    w->nmeta_owned = w->nmeta;
    return 0;
}

/* The metadata: the caller's pairs, created_by unless given, class_names,
 * then the set keys' placeholders (last: stk_shard_set_commit). */
static int take_metadata(stk_shard_writer *w, const stk_shard_writer_options *o)
{
    const char *d = w->dest;
    if (o->nmetadata > MAX_USER_METADATA || (o->nmetadata && !o->metadata))
        return stk_fail(STK_EINVAL, "%s: %u metadata pairs (at most %d, and not NULL)", d,
                        o->nmetadata, MAX_USER_METADATA);
    if (o->num_classes && !o->class_names)
        return stk_fail(STK_EINVAL, "%s: num_classes %u without class_names", d, o->num_classes);
    if (!(w->meta = calloc((size_t)o->nmetadata + 4, sizeof *w->meta)))
        return stk_fail(STK_ENOMEM, "out of memory");
    bool created_by = false;
    int rc;
    for (uint32_t i = 0; i < o->nmetadata; i++) {
        const char *key = o->metadata[2 * i], *value = o->metadata[2 * i + 1];
        if (!key || !*key || !value)
            return stk_fail(STK_EINVAL, "%s: metadata pair %u has an empty key or a NULL value",
                            d, i);
        if (!strcmp(key, "class_names") || !strcmp(key, "shard_set") || !strcmp(key, "shard"))
            return stk_fail(STK_EINVAL, "%s: metadata key '%s' is the writer's own%s", d, key,
                            !strcmp(key, "class_names") ? " (give the names as class_names)"
                                                        : " (the shard-set keys)");
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(o->metadata[2 * j], key))
                return stk_fail(STK_EINVAL, "%s: metadata key '%s' is given twice", d, key);
        created_by |= !strcmp(key, "created_by");
        if ((rc = add_meta(w, key, value)) < 0)
            return rc;
    }
    if (!created_by) {
        char by[64];
        snprintf(by, sizeof by, "stk_shard_writer %s", stk_version_string());
        if ((rc = add_meta(w, "created_by", by)) < 0)
            return rc;
    }
    if (o->num_classes) {
        for (uint32_t i = 0; i < o->num_classes; i++)
            if (!o->class_names[i])
                return stk_fail(STK_EINVAL, "%s: class name %u is NULL", d, i);
        char *names = stk_class_names_encode((char *const *)o->class_names, o->num_classes);
        if (!names)
            return STK_ENOMEM;
        rc = add_meta(w, "class_names", names);
        free(names);
        if (rc < 0)
            return rc;
    }
    w->meta[w->nmeta++] = (stk_kv){"shard_set", STK_SET_ID_PLACEHOLDER, STK_SET_ID_HEX};
    w->meta[w->nmeta++] = (stk_kv){"shard", STK_SHARD_PLACEHOLDER, strlen(STK_SHARD_PLACEHOLDER)};
    return 0;
}

static void writer_free(stk_shard_writer *w)
{
    stk_shard_file_abort(w->cur);
    for (uint32_t i = 0; i < w->nstaged; i++)
        stk_shard_file_abort(w->staged[i]); /* NULL once committed */
    free(w->staged);
    for (uint32_t i = 0; i < w->npaths; i++)
        free(w->paths[i]);
    free(w->paths);
    for (uint32_t i = 0; i < w->nmeta_owned; i++) {
        free((void *)w->meta[i].key);
        free((void *)w->meta[i].value);
    }
    free(w->meta);
    for (uint32_t i = 0; i < STK_MAX_FIELDS; i++)
        stk_scratch_free(&w->payload[i]);
    ZSTD_freeCCtx(w->zstd);
    free(w->dest);
    free(w);
}

int stk_shard_writer_create(const char *dest_dir, const stk_shard_field *fields, uint32_t nfields,
                            const stk_shard_writer_options *opts, stk_shard_writer **out)
{
    static const stk_shard_writer_options defaults;
    const stk_shard_writer_options *o = opts ? opts : &defaults;
    if (!out)
        return stk_fail(STK_EINVAL, "stk_shard_writer_create: NULL out");
    *out = NULL;
    if (!dest_dir || !*dest_dir)
        return stk_fail(STK_EINVAL, "stk_shard_writer_create: no destination directory");
    int rc = stk_reserved_check(o->reserved_, sizeof o->reserved_ / sizeof o->reserved_[0],
                                "stk_shard_writer_options");
    if (rc < 0)
        return rc;
    stk_shard_writer *w = calloc(1, sizeof *w);
    if (!w)
        return stk_fail(STK_ENOMEM, "out of memory");
    if (!(w->dest = stk_strdup(dest_dir))) {
        free(w);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    w->records_per_shard = o->records_per_shard;
    w->shard_bytes = o->shard_bytes ? o->shard_bytes : DEFAULT_SHARD_BYTES;
    if ((rc = take_schema(w, fields, nfields)) < 0 || (rc = take_metadata(w, o)) < 0 ||
        (rc = stk_shard_dest_ready(dest_dir)) < 0) {
        writer_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

/* STK_EINVAL naming record and field (the record is not written). */
static int bad_value(const stk_shard_writer *w, uint32_t f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_value(const stk_shard_writer *w, uint32_t f, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return stk_fail(STK_EINVAL, "%s: record %llu, field '%s' (%s): %s", w->dest,
                    (unsigned long long)w->records, w->defs[f].name, type_word(w->defs[f].type),
                    why);
}

/* Check value v of field f and set w->values[f] to the bytes to store. */
static int take_value(stk_shard_writer *w, uint32_t f, const stk_field_value *v)
{
    const stk_field_def *def = &w->defs[f];
    if (v->reserved_[0])
        return bad_value(w, f, "reserved_[0] of its stk_field_value is not zero");
    if (v->size && !v->data)
        return bad_value(w, f, "%zu bytes at NULL", v->size);
    stk_value_bytes *out = &w->values[f];
    *out = (stk_value_bytes){v->data, v->size};
    switch (def->type) {
    case STK_FIELD_IMAGE:
        if (stk_image_sniff(v->data, v->size) == STK_IMAGE_UNKNOWN) {
            char names[128];
            return bad_value(w, f,
                             "%zu bytes that are not an encoded image (%s; raw pixels go in a "
                             "raw_image field)",
                             v->size, stk_image_format_names(names, sizeof names, "or"));
        }
        return 0;
    case STK_FIELD_BYTES:
        return 0;
    case STK_FIELD_STRING:
        if (!stk_utf8_valid(v->data, v->size))
            return bad_value(w, f, "%zu bytes that are not well-formed UTF-8", v->size);
        return 0;
    case STK_FIELD_INT64:
    case STK_FIELD_FLOAT32: {
        size_t elem = def->type == STK_FIELD_INT64 ? 8 : 4;
        uint64_t count = v->count, bytes;
        if (!count && v->size % elem)
            return bad_value(w, f, "%zu bytes is not a whole number of %zu-byte values", v->size,
                             elem);
        if (!count)
            count = v->size / elem;
        if (!stk_mul_ok(count, elem, &bytes) || (v->size && v->size != bytes))
            return bad_value(w, f, "count %u and size %zu disagree (%zu bytes a value)",
                             v->count, v->size, elem);
        if (!v->data && count)
            return bad_value(w, f, "%llu values at NULL", (unsigned long long)count);
        out->size = (size_t)bytes;
        if (stk_field_varies(def)) {
            uint64_t row = stk_field_row_bytes(def) / elem;
            if (count % row)
                return bad_value(w, f, "%llu values are not whole rows of %llu",
                                 (unsigned long long)count, (unsigned long long)row);
            if (bytes > UINT32_MAX)
                return bad_value(w, f, "%llu bytes is over 4 GiB", (unsigned long long)bytes);
            return 0;
        }
        uint64_t want = 1;
        for (uint32_t d = 0; d < def->ndim; d++)
            want *= def->dims[d];
        if (count != want) {
            char shape[64] = "a scalar";
            if (def->ndim) {
                int k = snprintf(shape, sizeof shape, "shape (");
                for (uint32_t d = 0; d < def->ndim; d++)
                    k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%u", d ? ", " : "",
                                  def->dims[d]);
                snprintf(shape + k, sizeof shape - (size_t)k, ")");
            }
            return bad_value(w, f, "%llu values, the field's %s takes %llu",
                             (unsigned long long)count, shape, (unsigned long long)want);
        }
        return 0;
    }
    case STK_FIELD_RAW_IMAGE: {
        uint32_t h = v->shape[0], wd = v->shape[1], c = v->shape[2];
        uint64_t n;
        if (!h || !wd || !c || c > 4)
            return bad_value(w, f, "shape %ux%ux%u (height, width and 1 to 4 channels)", h, wd,
                             c);
        if (def->ndim == 3 && (h != def->dims[0] || wd != def->dims[1] || c != def->dims[2]))
            return bad_value(w, f, "shape %ux%ux%u, the field's is %ux%ux%u", h, wd, c,
                             def->dims[0], def->dims[1], def->dims[2]);
        if ((uint64_t)h * wd > STK_DEFAULT_MAX_PIXELS || !stk_mul_ok((uint64_t)h * wd, c, &n))
            return bad_value(w, f, "%ux%u is more pixels than a reader accepts (%llu)", h, wd,
                             (unsigned long long)STK_DEFAULT_MAX_PIXELS);
        if (v->size != n)
            return bad_value(w, f, "%zu bytes, the shape %ux%ux%u needs %llu", v->size, h, wd, c,
                             (unsigned long long)n);
        return 0;
    }
    default:
        return bad_value(w, f, "unknown type");
    }
}

/* A raw image value as the format stores it: prefix + pixels or + zstd. */
static int encode_raw(stk_shard_writer *w, uint32_t f, const stk_field_value *v)
{
    stk_scratch *p = &w->payload[f];
    size_t n = v->size, bound = w->zstd_level[f] ? ZSTD_compressBound(n) : n;
    int rc = stk_scratch_reserve(p, STK_RAW_PREFIX + bound);
    if (rc < 0)
        return rc;
    stk_wr32(p->data, v->shape[0]);
    stk_wr32(p->data + 4, v->shape[1]);
    stk_wr32(p->data + 8, v->shape[2]);
    size_t len = n;
    if (w->zstd_level[f]) {
        len = ZSTD_compressCCtx(w->zstd, p->data + STK_RAW_PREFIX, bound, v->data, n,
                                w->zstd_level[f]);
        if (ZSTD_isError(len))
            return stk_fail(STK_EIO, "%s: record %llu, field '%s': zstd: %s", w->dest,
                            (unsigned long long)w->records, w->defs[f].name,
                            ZSTD_getErrorName(len));
    } else {
        memcpy(p->data + STK_RAW_PREFIX, v->data, n);
    }
    w->values[f] = (stk_value_bytes){p->data, STK_RAW_PREFIX + len};
    return 0;
}

/* Seal the open shard and stage it for finish. */
static int seal_current(stk_shard_writer *w)
{
    int rc = stk_shard_file_seal(w->cur);
    if (rc < 0)
        return rc;
    w->bytes += stk_shard_file_bytes(w->cur);
    w->staged[w->nstaged++] = w->cur;
    w->cur = NULL;
    return 0;
}

/* Begin shard number npaths. */
static int begin_shard(stk_shard_writer *w)
{
    char path[4096];
    int len = snprintf(path, sizeof path, "%s/shard-%05u.stk", w->dest, w->npaths);
    if (len < 0 || (size_t)len >= sizeof path)
        return stk_fail(STK_EINVAL, "%s: destination path too long", w->dest);
    char **paths = realloc(w->paths, (w->npaths + 1) * sizeof *paths);
    if (paths)
        w->paths = paths;
    stk_shard_file **staged = realloc(w->staged, (w->npaths + 1) * sizeof *staged);
    if (staged)
        w->staged = staged;
    if (!paths || !staged)
        return stk_fail(STK_ENOMEM, "out of memory");
    if (!(w->paths[w->npaths] = stk_strdup(path)))
        return STK_ENOMEM;
    w->npaths++;
    return stk_shard_file_open(path, w->defs, w->nfields, w->meta, w->nmeta, &w->cur);
}

int stk_shard_writer_add(stk_shard_writer *w, const stk_field_value *values)
{
    if (!w || !values)
        return stk_fail(STK_EINVAL, "stk_shard_writer_add: NULL argument");
    if (w->failed)
        return stk_fail(STK_ESTATE, "%s: an earlier write failed; abort the writer", w->dest);
    int rc;
    for (uint32_t f = 0; f < w->nfields; f++)
        if ((rc = take_value(w, f, &values[f])) < 0)
            return rc;
    /* Checked: from here on a failure is the writer's, not the value's. */
    for (uint32_t f = 0; f < w->nfields; f++)
        if (w->defs[f].type == STK_FIELD_RAW_IMAGE && (rc = encode_raw(w, f, &values[f])) < 0)
            goto failed;
    if (!w->cur && (rc = begin_shard(w)) < 0)
        goto failed;
    if ((rc = stk_shard_file_add(w->cur, w->values)) < 0)
        goto failed;
    w->records++;
    if (stk_shard_file_bytes(w->cur) >= w->shard_bytes ||
        (w->records_per_shard && stk_shard_file_records(w->cur) >= w->records_per_shard))
        if ((rc = seal_current(w)) < 0)
            goto failed;
    return 0;
failed:
    w->failed = true;
    return rc;
}

uint64_t stk_shard_writer_records(const stk_shard_writer *w) { return w ? w->records : 0; }

int stk_shard_writer_finish(stk_shard_writer *w, stk_pack_result *result)
{
    if (!w)
        return stk_fail(STK_EINVAL, "stk_shard_writer_finish: NULL writer");
    int rc;
    stk_pack_result res = {0};
    if (w->failed) {
        rc = stk_fail(STK_ESTATE, "%s: an earlier write failed; nothing was written", w->dest);
        goto fail;
    }
    if (w->records == 0) {
        rc = stk_fail(STK_EINVAL, "%s: no records were added; nothing was written", w->dest);
        goto fail;
    }
    if (w->cur && (rc = seal_current(w)) < 0)
        goto fail;
    if ((rc = stk_shard_set_commit(w->staged, w->nstaged, w->meta, w->nmeta)) < 0)
        goto fail;
    res.records = w->records;
    res.shards = w->nstaged;
    res.bytes = w->bytes;
    writer_free(w);
    if (result)
        *result = res;
    return 0;
fail:
    stk_shard_writer_abort(w);
    return rc;
}

void stk_shard_writer_abort(stk_shard_writer *w)
{
    if (!w)
        return;
    /* Temporaries go with their writers (writer_free); shards a failed
     * commit had already renamed into place are removed by name. */
    for (uint32_t i = 0; i < w->nstaged; i++)
        if (!w->staged[i])
            unlink(w->paths[i]);
    writer_free(w);
}
