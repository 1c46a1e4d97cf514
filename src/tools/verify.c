/*
 * verify.c — stk_verify: check a shard set end to end, every record of every
 * shard, and report each problem instead of stopping at the first. A tool on
 * top of the library (docs/layers.md), like pack.c and preview.c: it uses
 * the .stk reader's shard and record functions (format/stk_shard.h) and the
 * codec, and nothing below calls it.
 *
 * Each shard is opened alone with every record checksummed (so one damaged
 * shard does not hide the others), then the shards are checked as a set
 * (stk_shard_set_check). Problems go to the caller's on_damage (shard path,
 * record or UINT64_MAX for the whole shard, reason) and stale temporaries
 * to on_notice; the return value sums them up.
 *
 * Any other dataset (TFRecord, WebDataset, LMDB, RecordIO, HDF5, Zarr,
 * NumPy, an image folder...) is checked through the reader table: opened
 * (damage that makes it unusable fails the open, and the call), then every
 * sample read once through the reader, with the reader's own checks — a
 * TFRecord's data CRC on that first read, a tar member's bounds, a Datum's
 * wire format, a file truncated while open — and, with decode, every
 * encoded image decoded. A reader with fields beyond "image" and "label"
 * (coco:, segfolder:) has each of those read too (stk_dataset_field_view:
 * a segmentation mask's size against its image, a COCO mask painted), and
 * with decode its encoded ones decoded. Each damaged sample is reported
 * with its index as the record and the reader's message, which names its file, record and
 * byte offset; `shards` stays 0. A Zarr array's missing chunk files (they
 * read as fill_value, as the spec says) go to on_notice as a warning.
 *
 * Without decode an encoded image is only read, not parsed: a truncated,
 * random or oversized image file passes (the CLI says so). on_progress
 * gets the samples or records done every 64 of them; for shards the total
 * comes from a first pass that opens each shard's header and index.
 *
 * Thread safety: no state between calls; concurrent calls are independent.
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"
#include "format/stk/stk_shard.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void report(const stk_verify_options *o, const char *shard_path, uint64_t record,
                   const char *reason)
{
    if (o && o->on_damage)
        o->on_damage(o->ctx, shard_path, record, reason);
}

/* on_progress every 64 samples or records, and at the end with done ==
 * total (a shard that opened for the count but not for the check leaves
 * done short of the total counted before). */
static void progress(const stk_verify_options *o, uint64_t done, uint64_t total, bool end)
{
    if (o && o->on_progress && (end || done % 64 == 0))
        o->on_progress(o->ctx, done, end || total < done ? done : total);
}

/* The records of the shards that open, from their headers and indexes (no
 * record read): the total for on_progress. */
static uint64_t shard_records(const char *uri, char **paths, uint32_t n)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        shardset *set = NULL;
        if (stk_shardset_open(uri, &paths[i], 1, NULL, NULL, &set) == 0)
            total += set->shards[0].n;
        stk_shardset_free(set);
    }
    return total;
}

typedef struct verify_ctx {
    const stk_verify_options *opts;
    stk_verify_result *res;
} verify_ctx;

static void set_damage(void *ctx, const char *path, const char *msg)
{
    verify_ctx *v = ctx;
    size_t n = strlen(path);
    v->res->bad_shards++;
    /* on_damage gets the path apart: not twice. */
    bool prefixed = !strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2);
    report(v->opts, path, UINT64_MAX, prefixed ? msg + n + 2 : msg);
}

static void stale_notice(void *ctx, const char *path, const char *msg)
{
    const stk_verify_options *o = ctx;
    if (o && o->on_notice)
        o->on_notice(o->ctx, path, msg);
}

/* The current message into `reason`; with the global sample index unknown
 * (passed as UINT64_MAX), say so instead of printing that number. */
static void take_reason(char *reason, size_t size, bool global_known)
{
    static const char unknown[] = " (sample 18446744073709551615)";
    const char *m = stk_errmsg(), *at = global_known ? NULL : strstr(m, unknown);
    if (!at)
        snprintf(reason, size, "%s", m);
    else
        snprintf(reason, size, "%.*s (sample unknown: an earlier shard could not be opened)%s",
                 (int)(at - m), m, at + sizeof unknown - 1);
}

/* Every sample of a dataset that is not .stk shards, read once (see the top
 * of this file). */
static int verify_dataset(const char *uri, const stk_verify_options *opts, stk_verify_result *res)
{
    stk_dataset *ds;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc < 0)
        return rc;
    stk_dataset_access_hint(ds, STK_ACCESS_SEQUENTIAL);
    stk_scratch scratch = {0}, pixels = {0}, field = {0};
    char reason[STK_ERRMSG_MAX], name[1024];
    /* the fields read through field_view besides the sample's image and label */
    uint32_t nfields = ds->vt->field_view ? stk_dataset_field_count(ds) : 0;
    /* Chunk files a Zarr array lacks read as its fill_value (the spec's
     * meaning): not damage, but a lost chunk reads the same, so say so. */
    const char *gone = stk_dataset_metadata(ds, "missing_chunks");
    if (gone && opts && opts->on_notice) {
        snprintf(reason, sizeof reason, "warning: %s", gone);
        opts->on_notice(opts->ctx, ds->uri, reason);
    }
    for (uint64_t i = 0; i < ds->count; i++) {
        stk_sample s;
        memset(&s, 0, sizeof s);
        res->records++;
        rc = ds->vt->read(ds, i, &s, &scratch);
        if (rc == 0 && !s.image.pixels && opts && opts->decode) {
            stk_image_view view;
            rc = stk_image_decode(s.encoded, s.encoded_size, NULL, NULL, 1, &pixels, &view);
            if (rc < 0) {
                stk_dataset_sample_name(ds, i, name, sizeof name);
                rc = stk_fail_prefix(rc, "%s", name);
            }
        }
        for (uint32_t f = 0; rc == 0 && f < nfields; f++) {
            stk_field_info info;
            stk_field_view view;
            if ((rc = stk_dataset_field_info(ds, f, &info)) < 0 || !strcmp(info.name, "image") ||
                !strcmp(info.name, "label"))
                continue;
            rc = stk_dataset_field_view(ds, i, f, &view, &field);
            if (rc == 0 && info.type == STK_FIELD_IMAGE && opts && opts->decode) {
                stk_image_view iv;
                rc = stk_image_decode(view.data, view.size, NULL, NULL, 1, &pixels, &iv);
                if (rc < 0) {
                    stk_dataset_sample_name(ds, i, name, sizeof name);
                    rc = stk_fail_prefix(rc, "%s: field %s", name, info.name);
                }
            }
        }
        int lost = rc == 0 ? stk_dataset_check(ds, i) : 0;
        rc = lost ? lost : rc;
        if (rc == STK_ENOMEM)
            break;
        if (rc < 0) {
            res->bad_records++;
            snprintf(reason, sizeof reason, "%s", stk_errmsg());
            report(opts, ds->uri, i, reason);
            rc = 0;
        }
        progress(opts, res->records, ds->count, false);
    }
    progress(opts, res->records, ds->count, true);
    stk_scratch_free(&scratch);
    stk_scratch_free(&pixels);
    stk_scratch_free(&field);
    stk_dataset_close(ds);
    return rc;
}

/*
 * stk_verify: each shard is opened alone with every record checksummed (so
 * one damaged shard does not hide the others), then the shards are checked
 * as a set (stk_shard_set_check). Record problems name the shard, the
 * record in it and the global sample index — the shard's first index is the sum of the
 * records of the shards listed before it, unknown after one that could not
 * be opened. Where the shards store source_index (stk_pack), it must rise
 * strictly from record to record across the whole set: record i comes
 * from a later source sample than record i - 1, so no sample is stored
 * twice or out of order. Stale temporaries of an interrupted pack beside
 * the shards are reported through on_notice; they do not fail the check.
 */
int stk_verify(const char *uri, const stk_verify_options *opts, stk_verify_result *result)
{
    stk_verify_result res = {0};
    if (!uri)
        return stk_fail(STK_EINVAL, "stk_verify: NULL URI");
    int rc;
    if (opts && (rc = stk_reserved_check(opts->reserved_, sizeof opts->reserved_ / sizeof opts->reserved_[0], "stk_verify_options")) < 0)
        return rc;
    const char *path = strncmp(uri, "stk:", 4) == 0 ? uri + 4 : uri;
    if (path == uri && (rc = stk_shards_detect(uri)) <= 0) { /* not .stk shards */
        if (rc < 0 || (rc = verify_dataset(uri, opts, &res)) < 0)
            return rc;
        if (result)
            *result = res;
        if (res.bad_records)
            return stk_fail(STK_EDATA, "%s: %llu of %llu samples are damaged", uri,
                            (unsigned long long)res.bad_records,
                            (unsigned long long)res.records);
        return 0;
    }
    char **paths;
    uint32_t n;
    rc = stk_shard_list(path, &paths, &n);
    if (rc < 0)
        return rc;
    stk_scratch scratch = {0}, pixels = {0};
    char reason[STK_ERRMSG_MAX];
    uint8_t schema0[STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE];
    uint32_t nfields0 = 0, nmembers = 0;
    set_member *members = calloc(n, sizeof *members);
    if (!members) {
        stk_shard_list_free(paths, n);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    uint64_t total = opts && opts->on_progress ? shard_records(uri, paths, n) : 0;
    uint64_t base = 0;     /* global index of the current shard's record 0 */
    bool base_known = true;
    int64_t prev_source = -1;
    bool schema_differs = false;
    for (uint32_t i = 0; i < n; i++) {
        res.shards++;
        shardset *set = NULL;
        /* Each shard alone, every record checked. */
        rc = stk_shardset_open(uri, &paths[i], 1, "verify=always", NULL, &set);
        if (rc < 0) {
            res.bad_shards++;
            snprintf(reason, sizeof reason, "%s", stk_errmsg());
            report(opts, paths[i], UINT64_MAX, reason);
            base_known = false;
            continue;
        }
        const shard *s = &set->shards[0];
        members[nmembers].path = paths[i];
        memcpy(members[nmembers].id, s->set_id, sizeof members[nmembers].id);
        members[nmembers].pos = s->set_pos;
        members[nmembers].count = s->set_count;
        nmembers++;
        if (i == 0 || nfields0 == 0) {
            nfields0 = set->nfields;
            memcpy(schema0, s->header_fields, nfields0 * STK_FIELD_ENTRY_SIZE);
        } else if (set->nfields != nfields0 ||
                   memcmp(schema0, s->header_fields, nfields0 * STK_FIELD_ENTRY_SIZE)) {
            res.bad_shards++;
            schema_differs = true;
            report(opts, paths[i], UINT64_MAX, "its schema differs from the first shard's");
        }
        int source_field = -1;
        for (uint32_t f = 0; f < set->nfields; f++)
            if (!strcmp(set->fields[f].name, "source_index") &&
                set->fields[f].type == STK_FIELD_INT64 && set->fields[f].ndim == 0)
                source_field = (int)f;
        for (uint64_t r = 0; r < s->n; r++) {
            uint64_t foff[STK_MAX_FIELDS];
            uint32_t flen[STK_MAX_FIELDS];
            const uint8_t *bytes;
            uint64_t global = base_known ? base + r : UINT64_MAX;
            res.records++;
            rc = stk_shard_record_get(set, s, r, global, &bytes, foff, flen, &scratch, true);
            for (uint32_t f = 0; rc == 0 && f < set->nfields; f++) {
                if (set->storage[f] != STK_STORAGE_VARIABLE)
                    continue;
                uint32_t v = set->var_slot[f];
                const uint8_t *p = bytes + foff[v];
                /* a varying int64/float32 value: whole rows */
                rc = stk_shard_value_check(set, f, s, r, global, flen[v]);
                if (rc < 0)
                    break;
                if (set->fields[f].type == STK_FIELD_RAW_IMAGE) {
                    stk_image_view view;
                    rc = stk_shard_raw_image(set, f, s, r, global, p, flen[v], &pixels, 0, &view);
                } else if (set->fields[f].type == STK_FIELD_IMAGE && opts && opts->decode) {
                    stk_image_view view;
                    rc = stk_image_decode(p, flen[v], NULL, NULL, 1, &pixels, &view);
                    if (rc < 0)
                        rc = stk_fail_prefix(rc, "%s: record %llu (sample %llu): field '%s'",
                                             s->path, (unsigned long long)r,
                                             (unsigned long long)global, set->fields[f].name);
                }
            }
            if (rc == 0 && source_field >= 0) {
                int64_t src = (int64_t)stk_rd64(s->columns[source_field] + r * 8);
                if (src < 0)
                    rc = stk_fail(STK_EDATA, "%s: record %llu (sample %llu): source_index %lld "
                                             "is negative", s->path, (unsigned long long)r,
                                  (unsigned long long)global, (long long)src);
                else if (src <= prev_source)
                    rc = stk_fail(STK_EDATA, "%s: record %llu (sample %llu): source_index %lld "
                                             "is not after %lld, the previous record's: a "
                                             "source sample is stored twice or out of order",
                                  s->path, (unsigned long long)r, (unsigned long long)global,
                                  (long long)src, (long long)prev_source);
                /* From here on, against this one: one report where the
                 * order breaks, not one for every record after it. */
                prev_source = src;
            }
            int lost = stk_shard_lost_check(set, s, r, global);
            rc = lost ? lost : rc;
            if (rc < 0) {
                res.bad_records++;
                take_reason(reason, sizeof reason, base_known);
                report(opts, s->path, r, reason);
            }
            progress(opts, res.records, total, false);
        }
        base += s->n;
        stk_shardset_free(set);
    }
    /* Shards of another schema are already reported, and cannot be of
     * this set: one report for them, at most one per shard in all. */
    verify_ctx vc = {opts, &res};
    if (!schema_differs)
        stk_shard_set_check(uri, members, nmembers, set_damage, &vc);
    char none[1];
    stk_shard_stale_temporaries(path, none, 0, 0, stale_notice, (void *)opts);
    progress(opts, res.records, total, true);
    free(members);
    stk_scratch_free(&scratch);
    stk_scratch_free(&pixels);
    stk_shard_list_free(paths, n);
    if (result)
        *result = res;
    if (res.bad_shards || res.bad_records)
        return stk_fail(STK_EDATA, "%s: %u of %u shards and %llu of %llu records are damaged", uri,
                        res.bad_shards, res.shards, (unsigned long long)res.bad_records,
                        (unsigned long long)res.records);
    return 0;
}
