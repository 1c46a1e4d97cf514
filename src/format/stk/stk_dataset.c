/*
 * stk_dataset.c — .stk shards as a dataset: one index space over one or more
 * shard files, random access in O(1), safe from any number of threads. This
 * is the adapter between the stk_dataset interface (dataset.h; the "stk:"
 * row of the reader table, stk_reader_stk at the end of this file) and the
 * shard code below it:
 * stk_shard.c opens and checks the files, stk_record.c reads records.
 *
 * stk_shards_open lists the shards of the path (file, directory or glob,
 * sorted by name), opens each (stk_shardset_open), checks that they are one
 * whole shard set, and gives sample i of shard k the global index
 * first(k) + i, where first(k) is the number of records in the shards
 * before it. The URI query chooses the checksum policy
 * (?verify=off|first|always), the I/O (?io=auto|mmap|pread: auto reads
 * encoded images with pread and raw pixels through the mapping) and huge
 * pages (?hugepages=auto|on|off), through the one query parser every reader
 * uses (reader_util.c).
 *
 * Fields (field_count, field_info, read_field, field_view): the schema of
 * the first shard; field_view lends each value in place (index columns,
 * the mapping) or in the caller's scratch (pread, zstd raw images), so the
 * loader's per-field reads allocate nothing in the steady state.
 *
 * Thread safety: the dataset is read-only after open (the per-record
 * bitmaps aside, see stk_record.c); every vtable function may be called from
 * any number of threads at once.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/class_names.h"
#include "format/reader_util.h"
#include "format/stk/stk_shard.h"
#include "io/remote.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Samples                                                                   */
/* ------------------------------------------------------------------------ */

/* vtable.read_check: the caller is done with the bytes of sample `index`. */
static int shards_read_check(const stk_dataset *ds, uint64_t index)
{
    uint64_t r;
    const shard *s = stk_shard_locate(ds->impl, index, &r);
    return stk_shard_lost_check(ds->impl, s, r, index);
}

static int shards_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const shardset *set = ds->impl;
    uint64_t r, foff[STK_MAX_FIELDS];
    uint32_t flen[STK_MAX_FIELDS];
    const shard *s = stk_shard_locate(set, index, &r);
    const uint8_t *bytes;
    int rc = stk_shard_record_get(set, s, r, index, &bytes, foff, flen, scratch, false);
    if (rc < 0)
        return rc;
    memset(out, 0, sizeof *out);
    out->label = stk_shard_label_of(set, s, r);
    if (set->image_field < 0)
        return stk_fail(STK_EUNSUPPORTED, "%s: the shards have no image field", ds->uri);
    uint32_t v = set->var_slot[set->image_field];
    const uint8_t *p = bytes + foff[v];
    if (set->fields[set->image_field].type == STK_FIELD_IMAGE) {
        out->encoded = p;
        out->encoded_size = flen[v];
        return 0;
    }
    /* pread records sit at scratch[0, len); decompress after them. */
    size_t after = stk_shard_in_place(s) ? 0 : (size_t)stk_pad_to(foff[set->nvar - 1] + flen[set->nvar - 1], 64);
    rc = stk_shard_raw_image(set, (uint32_t)set->image_field, s, r, index, p, flen[v], scratch, after,
                   &out->image);
    /* zstd read the mapping: a failure over lost pages is the truncation. */
    int lost = rc < 0 ? stk_shard_lost_check(set, s, r, index) : 0;
    return lost ? lost : rc;
}

/* ------------------------------------------------------------------------ */
/* Fields, metadata, shards                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t shards_field_count(const stk_dataset *ds) { return ((shardset *)ds->impl)->nfields; }

static int shards_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    const shardset *set = ds->impl;
    if (i >= set->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i, set->nfields);
    const stk_field_def *f = &set->fields[i];
    memset(info, 0, sizeof *info);
    info->name = f->name;
    info->type = (stk_field_type)f->type;
    info->ndim = f->ndim;
    memcpy(info->dims, f->dims, sizeof info->dims);
    info->compressed = f->compression != 0;
    return 0;
}

static int shards_read_field(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                             size_t *size, uint32_t shape[3])
{
    const shardset *set = ds->impl;
    uint64_t r, foff[STK_MAX_FIELDS];
    uint32_t flen[STK_MAX_FIELDS];
    const shard *s = stk_shard_locate(set, index, &r);
    const stk_field_def *f = &set->fields[field];
    stk_scratch scratch = {0};
    int rc = 0;
    const void *src = NULL;
    size_t n = 0;
    if (set->storage[field] == STK_STORAGE_FIXED) {
        src = s->columns[field] + r * set->fixed_size[field];
        n = (size_t)set->fixed_size[field];
    } else {
        const uint8_t *bytes;
        if ((rc = stk_shard_record_get(set, s, r, index, &bytes, foff, flen, &scratch, false)) < 0)
            goto done;
        uint32_t v = set->var_slot[field];
        src = bytes + foff[v];
        n = flen[v];
        if ((rc = stk_shard_value_check(set, field, s, r, index, flen[v])) < 0)
            goto done;
        if (f->type == STK_FIELD_RAW_IMAGE) {
            stk_image_view view;
            size_t after = (size_t)stk_pad_to(foff[set->nvar - 1] + flen[set->nvar - 1], 64);
            if ((rc = stk_shard_raw_image(set, field, s, r, index, src, (uint32_t)n, &scratch,
                                stk_shard_in_place(s) ? 0 : after, &view)) < 0)
                goto done;
            src = view.pixels;
            n = (size_t)view.height * view.width * view.channels;
            if (shape) {
                shape[0] = view.height;
                shape[1] = view.width;
                shape[2] = view.channels;
            }
        }
    }
    if ((rc = stk_memdup(src, n, data)) == 0)
        *size = n;
done:
    stk_scratch_free(&scratch);
    int lost = stk_shard_lost_check(set, s, r, index);
    if (lost && rc == 0) {
        free(*data);
        *data = NULL;
    }
    return lost ? lost : rc;
}

/*
 * vtable.field_view: field `field` of sample `index`, lent (dataset.h).
 * Fixed fields are their column in the index (mapped, or the index copy of
 * pread mode). Variable fields come through stk_shard_field_get: in place
 * in a mapping, or read into `scratch` (the field alone once the record has
 * been checked, as the checksum policy allows); a zstd raw image is
 * decompressed into `scratch` after them. Checksums as read_field (the
 * dataset's policy). The caller calls read_check after using a view.
 */
static int shards_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                             stk_field_view *out, stk_scratch *scratch)
{
    const shardset *set = ds->impl;
    if (field >= set->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, field, set->nfields);
    uint64_t r;
    const shard *s = stk_shard_locate(set, index, &r);
    const stk_field_def *f = &set->fields[field];
    memset(out, 0, sizeof *out);
    if (set->storage[field] == STK_STORAGE_FIXED) {
        out->data = s->columns[field] + r * set->fixed_size[field];
        out->size = (size_t)set->fixed_size[field];
        out->shape[0] = f->ndim ? f->dims[0] : 1;
        return 0;
    }
    const uint8_t *p;
    uint32_t len;
    size_t end;
    int rc = stk_shard_field_get(set, s, r, index, field, &p, &len, &end, scratch);
    if (rc == 0 && f->type == STK_FIELD_RAW_IMAGE) {
        stk_image_view view;
        rc = stk_shard_raw_image(set, field, s, r, index, p, len, scratch,
                                 end ? (size_t)stk_pad_to(end, 64) : 0, &view);
        if (rc == 0) {
            out->data = view.pixels;
            out->size = (size_t)view.height * view.width * view.channels;
            out->shape[0] = view.height;
            out->shape[1] = view.width;
            out->shape[2] = view.channels;
        }
    } else if (rc == 0) {
        out->data = p;
        out->size = len;
        if (f->type == STK_FIELD_INT64 || f->type == STK_FIELD_FLOAT32)
            out->shape[0] = (uint32_t)(len / stk_field_row_bytes(f));
    }
    if (rc < 0) {
        memset(out, 0, sizeof *out);
        /* A failure over pages a truncation took is the truncation. */
        int lost = stk_shard_lost_check(set, s, r, index);
        return lost ? lost : rc;
    }
    return 0;
}

static int shards_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const shardset *set = ds->impl;
    uint64_t r;
    const shard *s = stk_shard_locate(set, index, &r);
    *label = stk_shard_label_of(set, s, r);
    return stk_shard_lost_check(set, s, r, index);
}

static const char *shards_metadata(const stk_dataset *ds, const char *key)
{
    const shardset *set = ds->impl;
    for (uint32_t i = 0; i < set->nmeta; i++)
        if (!strcmp(set->meta_keys[i], key))
            return set->meta_values[i];
    return NULL;
}

static uint32_t shards_shard_count(const stk_dataset *ds) { return ((shardset *)ds->impl)->nshards; }

static int shards_shard_info(const stk_dataset *ds, uint32_t i, stk_shard_info *info)
{
    const shardset *set = ds->impl;
    if (i >= set->nshards)
        return stk_fail(STK_EINVAL, "%s: no shard %u (%u shards)", ds->uri, i, set->nshards);
    const shard *s = &set->shards[i];
    *info = (stk_shard_info){.path = s->path, .records = s->n, .first_index = s->first,
                             .file_bytes = s->file_size};
    return 0;
}

static void shards_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    uint64_t r;
    const shard *s = stk_shard_locate(ds->impl, index, &r);
    snprintf(buf, size, "%s: record %llu (sample %llu)", s->path, (unsigned long long)r,
             (unsigned long long)index);
}

void stk_shardset_free(shardset *set)
{
    if (!set)
        return;
    for (uint32_t i = 0; i < set->nshards; i++)
        stk_shard_close(&set->shards[i]);
    free(set->shards);
    for (uint32_t i = 0; i < set->nmeta; i++) {
        free(set->meta_keys[i]);
        free(set->meta_values[i]);
    }
    free(set->meta_keys);
    free(set->meta_values);
    free(set);
}

static void shards_close(stk_dataset *ds) { stk_shardset_free(ds->impl); }

/* vtable.access_hint. Without a hint the record bytes are read in random
 * order: a mapping without huge pages is MADV_RANDOM over its records
 * (stk_shard.c, shard_map_advice) and pread asks for each record alone.
 * Read in order (pack, a loader without shuffle), the kernel's readahead
 * is what a cold pass wants: MADV_SEQUENTIAL over the records of a mapping,
 * POSIX_FADV_SEQUENTIAL (a doubled readahead window) for pread. With huge
 * pages a fault already reads 2 MiB, in either order. */
static void shards_access_hint(const stk_dataset *ds, stk_access how)
{
    const shardset *set = ds->impl;
    if (how == STK_ACCESS_STOP || how == STK_ACCESS_RESUME) {
        for (uint32_t i = 0; i < set->nshards; i++)
            if (set->shards[i].src)
                stk_source_advise(set->shards[i].src, NULL, 0, 0,
                                  how == STK_ACCESS_STOP ? STK_ADVISE_CANCEL : STK_ADVISE_RESUME);
        return;
    }
    bool seq = how == STK_ACCESS_SEQUENTIAL;
    for (uint32_t i = 0; i < set->nshards; i++) {
        const shard *s = &set->shards[i];
        if (s->data_end <= s->data_offset)
            continue;
        if (s->map && !set->huge_pages) {
            /* the pages shard_map_advice made random (the index's first
             * page keeps its sequential advice) */
            uint64_t start = s->data_offset / STK_PAGE * STK_PAGE;
            uint64_t end = s->index_offset / STK_PAGE * STK_PAGE;
            if (end > start)
                stk_mapping_advise(s->map, start, end - start,
                                   seq ? STK_ADVISE_SEQUENTIAL : STK_ADVISE_RANDOM);
        } else if (!s->map && s->src) {
            stk_source_advise(s->src, NULL, s->data_offset, s->data_end - s->data_offset,
                              seq ? STK_ADVISE_SEQUENTIAL : STK_ADVISE_NORMAL);
        }
    }
}

/* vtable.prefetch: a remote shard fetches the record's chunks ahead. */
static void shards_prefetch(const stk_dataset *ds, uint64_t index)
{
    uint64_t r;
    const shardset *set = ds->impl;
    if (index >= ds->count)
        return;
    const shard *s = stk_shard_locate(set, index, &r);
    stk_shard_record_prefetch(set, s, r, index);
}

static const stk_dataset_vtable shards_vt = {
    .format = "stk",
    .read = shards_read,
    .close = shards_close,
    .field_count = shards_field_count,
    .field_info = shards_field_info,
    .read_field = shards_read_field,
    .field_view = shards_field_view,
    .label = shards_label,
    .metadata = shards_metadata,
    .shard_count = shards_shard_count,
    .shard_info = shards_shard_info,
    .sample_name = shards_sample_name,
    .read_check = shards_read_check,
    .access_hint = shards_access_hint,
    .prefetch = shards_prefetch,
};

/* set_problem_fn for open: keep the first message. */
static void first_problem(void *ctx, const char *path, const char *msg)
{
    char *first = ctx;
    (void)path;
    if (!first[0])
        snprintf(first, STK_ERRMSG_MAX, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* Open                                                                      */
/* ------------------------------------------------------------------------ */

/* ?io= not given: decided from the first shard's schema (see stk_shardset_open). */
enum { IO_AUTO, IO_MMAP, IO_PREAD };

/* ?verify=off|first|always & io=auto|mmap|pread & hugepages=auto|on|off,
 * through the one query parser every reader uses (reader_util.c: no
 * strtok, no state outside the call, a repeated key is an error). */
static int parse_query(const char *uri, const char *query, shardset *set, int *io, int *huge)
{
    static const char *const verify_values[] = {"off", "first", "always", NULL};
    static const char *const io_values[] = {"auto", "mmap", "pread", NULL};
    static const char *const huge_values[] = {"auto", "on", "off", NULL};
    stk_query_key keys[] = {
        {"verify", verify_values, -1},
        {"io", io_values, -1},
        {"hugepages", huge_values, -1},
    };
    int rc = stk_query_parse(uri, "stk", query, keys, sizeof keys / sizeof keys[0]);
    if (rc < 0)
        return rc;
    set->verify = keys[0].value < 0 ? VERIFY_FIRST : keys[0].value; /* = VERIFY_* order */
    set->pread_io = false;
    *io = keys[1].value < 0 ? IO_AUTO : keys[1].value;                /* = IO_* order */
    *huge = keys[2].value <= 0 ? -1 : keys[2].value == 1;             /* auto -1, on 1, off 0 */
    return 0;
}

/* A hint for ?io=auto: does the first shard's first image field hold
 * encoded images? Reads only the field table; the real open validates
 * everything (a damaged file simply gets the mmap default and fails there). */
static bool first_image_is_encoded(const char *path)
{
    uint8_t buf[STK_HEADER_SIZE + STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE];
    char msg[STK_ERRMSG_MAX];
    stk_source *src;
    int64_t n = -1;
    /* A failure here is the real open's to report: the thread's message
     * is left as it was. */
    snprintf(msg, sizeof msg, "%s", stk_errmsg());
    if (stk_source_open_file_at(AT_FDCWD, path, path, &src) == 0) {
        n = stk_source_read_part(src, buf, sizeof buf, 0);
        stk_source_close(src);
    }
    if (n < 0)
        stk_errmsg_set(msg);
    if (n < STK_HEADER_SIZE || memcmp(buf, STK_SHARD_MAGIC, 8) != 0)
        return false;
    uint32_t nfields = stk_rd32(buf + HDR_FIELD_COUNT);
    for (uint32_t i = 0; i < nfields && i < STK_MAX_FIELDS; i++) {
        const uint8_t *e = buf + STK_HEADER_SIZE + (size_t)i * STK_FIELD_ENTRY_SIZE;
        if (e + STK_FIELD_ENTRY_SIZE > buf + n)
            return false;
        if (e[FLD_TYPE] == STK_FIELD_IMAGE)
            return true;
        if (e[FLD_TYPE] == STK_FIELD_RAW_IMAGE)
            return false;
    }
    return false;
}

/* Open every shard of `paths` into a new shardset. */
int stk_shardset_open(const char *uri, char **paths, uint32_t n, const char *query,
                      const stk_dataset_options *opts, shardset **out)
{
    int rc;
    shardset *set = calloc(1, sizeof *set);
    if (!set)
        return stk_fail(STK_ENOMEM, "out of memory");
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    set->max_bytes = o.max_bytes;
    set->max_pixels = o.max_pixels;
    int io, huge;
    if ((rc = parse_query(uri, query, set, &io, &huge)) < 0)
        goto fail;
    set->remote = n > 0 && stk_is_remote(paths[0]);
    if (set->remote) {
        /* Objects in a store are read with pread, through the cache; their
         * headers and index+footer come in parallel first (one or two
         * round trips for the whole set instead of several per shard). */
        if (io == IO_MMAP) {
            rc = stk_fail(STK_EINVAL, "%s: io=mmap needs local files (this is a remote dataset)",
                          uri);
            goto fail;
        }
        io = IO_PREAD;
        stk_remote_fetch_ends(paths, n, STK_HEADER_SIZE + STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE,
                              (uint64_t)256 << 10);
    }
    if (io == IO_AUTO) {
        /* Encoded images (~100 KB, then ~1 ms of decoding each) are read with
         * pread into the worker's scratch: the copy costs nothing next to the
         * decode, and the process does not keep the whole dataset mapped
         * and resident. Small raw records are used in place through mmap. */
        set->pread_io = first_image_is_encoded(paths[0]);
    } else {
        set->pread_io = io == IO_PREAD;
    }
    if (!set->pread_io && huge >= 0) {
        set->huge_pages = huge == 1;
    } else if (!set->pread_io) {
        uint64_t bytes = 0;
        struct stat st;
        for (uint32_t i = 0; i < n; i++)
            if (stat(paths[i], &st) == 0)
                bytes += (uint64_t)st.st_size;
        set->huge_pages = stk_random_map_advice(bytes) == STK_ADVISE_HUGEPAGE;
    }
    set->shards = calloc(n, sizeof *set->shards);
    if (!set->shards) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        rc = stk_shard_open(set, &set->shards[i], paths[i], i == 0);
        set->nshards = i + 1;
        if (rc < 0)
            goto fail;
        set->shards[i].first = total;
        if (!stk_add_ok(total, set->shards[i].n, &total) || total > o.max_samples) {
            rc = stk_fail(STK_ELIMIT, "%s: more than %llu samples", uri,
                          (unsigned long long)o.max_samples);
            goto fail;
        }
    }
    *out = set;
    return 0;
fail:
    stk_shardset_free(set);
    return rc;
}

static int stk_shards_open(const char *uri, const char *path, const char *query,
                           const stk_dataset_options *opts, stk_dataset **out)
{
    char **paths;
    uint32_t n;
    shardset *set = NULL;
    int rc = stk_shard_list(path, &paths, &n);
    if (rc < 0)
        return rc;
    rc = stk_shardset_open(uri, paths, n, query, opts, &set);
    if (rc == 0) {
        set_member *m = calloc(set->nshards, sizeof *m);
        char first[STK_ERRMSG_MAX] = "";
        if (!m) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
        } else {
            for (uint32_t i = 0; i < set->nshards; i++) {
                m[i].path = set->shards[i].path;
                memcpy(m[i].id, set->shards[i].set_id, sizeof m[i].id);
                m[i].pos = set->shards[i].set_pos;
                m[i].count = set->shards[i].set_count;
            }
            if (stk_shard_set_check(uri, m, set->nshards, first_problem, first))
                rc = stk_fail(STK_EFORMAT, "%s", first);
            free(m);
        }
        if (rc < 0) {
            stk_shardset_free(set);
            set = NULL;
        }
    }
    stk_shard_list_free(paths, n);
    if (rc < 0)
        return rc;
    stk_dataset *ds = stk_dataset_alloc(&shards_vt, uri);
    if (!ds) {
        stk_shardset_free(set);
        return STK_ENOMEM;
    }
    ds->impl = set;
    for (uint32_t i = 0; i < set->nshards; i++)
        ds->count += set->shards[i].n;
    if (set->remote)
        ds->wants_prefetch = 1024; /* samples ahead of the workers (loader.c) */
    if (ds->count == 0) {
        stk_dataset_close(ds);
        return stk_fail(STK_EFORMAT, "%s: the shards hold no records", uri);
    }
    if (set->image_field >= 0) {
        const stk_field_def *f = &set->fields[set->image_field];
        if (f->type == STK_FIELD_RAW_IMAGE && f->ndim == 3) {
            ds->height = f->dims[0];
            ds->width = f->dims[1];
            ds->channels = f->dims[2];
        }
    }
    /* Label map from the metadata: one escaped name a line (class_names.c). */
    const char *names = shards_metadata(ds, "class_names");
    if (names && *names) {
        int nrc = stk_class_names_decode(names, &ds->class_names, &ds->num_classes);
        if (nrc < 0) {
            stk_dataset_close(ds);
            return nrc;
        }
    }
    *out = ds;
    return 0;
}

const stk_reader stk_reader_stk = {
    "stk", "stk:PATH[?verify=off|first|always][&io=auto|mmap|pread][&hugepages=auto|on|off]",
    ".stk shards: a file, a directory of *.stk, or a glob (docs/format.md)", stk_shards_open,
    NULL, stk_shards_detect, "*.stk shards", "*.stk"};
