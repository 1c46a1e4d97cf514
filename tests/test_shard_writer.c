/*
 * test_shard_writer.c — the public stk_shard_writer API and the format 1.2
 * fields it writes: every field type written, rolled into shards by record
 * count, read back value by value through stk_dataset_read_field and
 * through the .stk field_view hook (mmap and pread, every checksum policy;
 * views of uncompressed values lent from the mapping, not copied), checked
 * by stk_verify; the varying int64/float32 fields (boxes {0, 4}, labels {0})
 * with 0 rows and many; each kind of bad value refused with the record and
 * field named, the writer still usable after; schema and option errors;
 * nothing left behind by an abort or a failed finish; a damaged varying
 * field (bytes that are not whole rows) as STK_EDATA naming shard, record
 * and field from read_field, field_view and verify; files without varying
 * fields still written as format 1.1; stk_pack carrying every field of a
 * multi-field set (keep and raw modes) and refusing a shrinking reencode.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "format/dataset.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define NREC 23

enum { F_IMAGE, F_LABEL, F_RAW, F_MASK, F_VEC, F_BOXES, F_BOX_LABELS, F_BLOB, F_CAPTION, F_GRID,
       NF };

static const stk_shard_field schema[NF] = {
    [F_IMAGE] = {.name = "image", .type = STK_FIELD_IMAGE},
    [F_LABEL] = {.name = "label", .type = STK_FIELD_INT64},
    [F_RAW] = {.name = "raw", .type = STK_FIELD_RAW_IMAGE},      /* any shape */
    [F_MASK] = {.name = "mask", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {6, 5, 1},
                .zstd_level = 3},
    [F_VEC] = {.name = "vec", .type = STK_FIELD_FLOAT32, .ndim = 1, .dims = {3}},
    [F_BOXES] = {.name = "boxes", .type = STK_FIELD_FLOAT32, .ndim = 2, .dims = {0, 4}},
    [F_BOX_LABELS] = {.name = "box_labels", .type = STK_FIELD_INT64, .ndim = 1, .dims = {0}},
    [F_BLOB] = {.name = "blob", .type = STK_FIELD_BYTES},
    [F_CAPTION] = {.name = "caption", .type = STK_FIELD_STRING},
    [F_GRID] = {.name = "grid", .type = STK_FIELD_INT64, .ndim = 2, .dims = {2, 3}},
};

/* Record i's values, computed from i alone (the reference). */
typedef struct rec {
    stk_scratch jpeg;
    size_t jpeg_size;
    int64_t label;
    uint8_t raw[7 * 9 * 3];
    uint32_t raw_shape[3];
    uint8_t mask[30];
    float vec[3];
    float boxes[5 * 4];
    int64_t box_labels[5];
    uint32_t nboxes;
    uint8_t blob[100];
    size_t blob_len;
    char caption[40];
    int64_t grid[6];
} rec;

static void make_rec(rec *r, int i)
{
    stk_scratch keep = r->jpeg;
    memset(r, 0, sizeof *r);
    r->jpeg = keep;
    uint8_t px[8 * 10 * 3];
    tu_fill_random(px, sizeof px, (uint64_t)i + 100);
    assert_int_equal(stk_jpeg_encode(px, 10, 8, 3, 30, 90, &r->jpeg, &r->jpeg_size), 0);
    r->label = i % 4;
    r->raw_shape[0] = 1 + (uint32_t)i % 7;
    r->raw_shape[1] = 1 + (uint32_t)(i * 5) % 9;
    r->raw_shape[2] = i % 2 ? 3 : 1;
    tu_fill_random(r->raw, sizeof r->raw, (uint64_t)i + 200);
    for (int k = 0; k < 30; k++)
        r->mask[k] = (uint8_t)((k + i) % 3);
    for (int k = 0; k < 3; k++)
        r->vec[k] = (float)i * 0.5f - (float)k;
    r->nboxes = (uint32_t)i % 6; /* record 0: no boxes */
    for (uint32_t b = 0; b < r->nboxes; b++) {
        for (int k = 0; k < 4; k++)
            r->boxes[b * 4 + k] = (float)(i + (int)b) + 0.125f * (float)k;
        r->box_labels[b] = (int64_t)b * 1000 + i;
    }
    r->blob_len = (size_t)(i * 13) % 100;
    tu_fill_random(r->blob, r->blob_len, (uint64_t)i + 300);
    snprintf(r->caption, sizeof r->caption, "caption %d \xc3\xa9", i); /* é: UTF-8 */
    for (int k = 0; k < 6; k++)
        r->grid[k] = (int64_t)i << 33 | k;
}

static void rec_values(const rec *r, stk_field_value *v)
{
    memset(v, 0, NF * sizeof *v);
    v[F_IMAGE] = (stk_field_value){.data = r->jpeg.data, .size = r->jpeg_size};
    v[F_LABEL] = (stk_field_value){.data = &r->label, .count = 1};
    size_t rn = (size_t)r->raw_shape[0] * r->raw_shape[1] * r->raw_shape[2];
    v[F_RAW] = (stk_field_value){.data = r->raw, .size = rn,
                                 .shape = {r->raw_shape[0], r->raw_shape[1], r->raw_shape[2]}};
    v[F_MASK] = (stk_field_value){.data = r->mask, .size = 30, .shape = {6, 5, 1}};
    v[F_VEC] = (stk_field_value){.data = r->vec, .size = 12};
    v[F_BOXES] = (stk_field_value){.data = r->boxes, .count = r->nboxes * 4};
    v[F_BOX_LABELS] = (stk_field_value){.data = r->box_labels, .count = r->nboxes,
                                        .size = r->nboxes * 8};
    v[F_BLOB] = (stk_field_value){.data = r->blob, .size = r->blob_len};
    v[F_CAPTION] = (stk_field_value){.data = r->caption, .size = strlen(r->caption)};
    v[F_GRID] = (stk_field_value){.data = r->grid, .count = 6};
}

/* The expected bytes of field f of record r (and its shape for a view). */
static const void *expected(const rec *r, int f, size_t *size, uint32_t shape[3])
{
    shape[0] = shape[1] = shape[2] = 0;
    switch (f) {
    case F_IMAGE: *size = r->jpeg_size; return r->jpeg.data;
    case F_LABEL: *size = 8; shape[0] = 1; return &r->label;
    case F_RAW:
        memcpy(shape, r->raw_shape, 12);
        *size = (size_t)shape[0] * shape[1] * shape[2];
        return r->raw;
    case F_MASK: shape[0] = 6, shape[1] = 5, shape[2] = 1; *size = 30; return r->mask;
    case F_VEC: *size = 12; shape[0] = 3; return r->vec;
    case F_BOXES: *size = r->nboxes * 16; shape[0] = r->nboxes; return r->boxes;
    case F_BOX_LABELS: *size = r->nboxes * 8; shape[0] = r->nboxes; return r->box_labels;
    case F_BLOB: *size = r->blob_len; return r->blob;
    case F_CAPTION: *size = strlen(r->caption); return r->caption;
    case F_GRID: *size = 48; shape[0] = 2; return r->grid;
    }
    return NULL;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void write_set(const char *dest, uint64_t per_shard, stk_pack_result *res)
{
    const char *classes[] = {"cat", "dog", "line\nbreak", "bird"};
    const char *meta[] = {"source", "a Python generator", "note", "hello"};
    stk_shard_writer_options o = {.records_per_shard = per_shard, .class_names = classes,
                                  .num_classes = 4, .metadata = meta, .nmetadata = 2};
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_create(dest, schema, NF, &o, &w), 0);
    rec r = {0};
    stk_field_value v[NF];
    for (int i = 0; i < NREC; i++) {
        make_rec(&r, i);
        rec_values(&r, v);
        assert_int_equal(stk_shard_writer_add(w, v), 0);
        /* Nothing under a shard name before finish. */
        if (i == NREC - 1) {
            char path[4096];
            snprintf(path, sizeof path, "%s/shard-00000.stk", dest);
            assert_int_not_equal(access(path, F_OK), 0);
        }
    }
    assert_int_equal(stk_shard_writer_records(w), NREC);
    stk_scratch_free(&r.jpeg);
    assert_int_equal(stk_shard_writer_finish(w, res), 0);
}

/* Every field of every record through read_field and field_view, against
 * the reference; views of what is stored uncompressed point into the
 * mapping (mmap) instead of the scratch. */
static void check_dataset(const char *uri, bool mapped)
{
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    assert_int_equal(ds->count, NREC);
    assert_int_equal(stk_dataset_field_count(ds), NF);
    for (int f = 0; f < NF; f++) {
        stk_field_info info;
        assert_int_equal(stk_dataset_field_info(ds, (uint32_t)f, &info), 0);
        assert_string_equal(info.name, schema[f].name);
        assert_int_equal(info.type, schema[f].type);
        assert_int_equal(info.ndim, schema[f].ndim);
        assert_memory_equal(info.dims, schema[f].dims, sizeof info.dims);
        assert_int_equal(info.compressed, schema[f].zstd_level != 0);
    }
    assert_string_equal(stk_dataset_class_name(ds, 2), "line\nbreak");
    assert_string_equal(stk_dataset_metadata(ds, "source"), "a Python generator");
    assert_string_equal(stk_dataset_metadata(ds, "note"), "hello");
    assert_non_null(strstr(stk_dataset_metadata(ds, "created_by"), "stk_shard_writer"));
    rec r = {0};
    stk_scratch scratch[NF] = {{0}};
    for (int i = 0; i < NREC; i++) {
        make_rec(&r, i);
        for (int f = 0; f < NF; f++) {
            size_t want_size;
            uint32_t want_shape[3];
            const void *want = expected(&r, f, &want_size, want_shape);
            void *data;
            size_t size;
            uint32_t shape[3] = {0};
            assert_int_equal(stk_dataset_read_field(ds, (uint64_t)i, schema[f].name, &data, &size,
                                                    shape), 0);
            assert_int_equal(size, want_size);
            if (size)
                assert_memory_equal(data, want, size);
            if (schema[f].type == STK_FIELD_RAW_IMAGE)
                assert_memory_equal(shape, want_shape, sizeof shape);
            stk_free(data);
            stk_field_view v;
            assert_int_equal(stk_dataset_field_view(ds, (uint64_t)i, (uint32_t)f, &v, &scratch[f]),
                             0);
            assert_int_equal(v.size, want_size);
            if (v.size)
                assert_memory_equal(v.data, want, v.size);
            if (schema[f].type != STK_FIELD_IMAGE && schema[f].type != STK_FIELD_BYTES &&
                schema[f].type != STK_FIELD_STRING)
                assert_memory_equal(v.shape, want_shape, sizeof v.shape);
            /* Lent, not copied: fixed columns always (the index), the
             * rest when mapped and uncompressed. */
            const uint8_t *p = v.data;
            bool in_scratch = v.size && scratch[f].data && p >= scratch[f].data &&
                              p < scratch[f].data + scratch[f].cap;
            bool fixed = f == F_LABEL || f == F_VEC || f == F_GRID;
            if (fixed || (mapped && f != F_MASK))
                assert_false(in_scratch);
            if (f == F_MASK || (!mapped && !fixed && v.size))
                assert_true(in_scratch);
            assert_int_equal(stk_dataset_check(ds, (uint64_t)i), 0);
        }
    }
    for (int f = 0; f < NF; f++)
        stk_scratch_free(&scratch[f]);
    stk_scratch_free(&r.jpeg);
    stk_dataset_close(ds);
}

static void test_round_trip_every_type(void **state)
{
    (void)state;
    const char *dest = tu_path("every");
    stk_pack_result res;
    write_set(dest, 5, &res);
    assert_int_equal(res.records, NREC);
    assert_int_equal(res.shards, 5); /* 5 + 5 + 5 + 5 + 3 */
    assert_int_equal(count_entries(dest), 5);
    const char *modes[] = {"?io=mmap", "?io=pread", "?io=pread&verify=always",
                           "?io=mmap&verify=off", "?io=pread&verify=off"};
    char uri[4200];
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        snprintf(uri, sizeof uri, "stk:%s%s", dest, modes[m]);
        check_dataset(uri, strstr(modes[m], "mmap") != NULL);
    }
    /* The set verifies, and the files say format 1.2 (a varying field). */
    stk_verify_result vr;
    assert_int_equal(stk_verify(dest, NULL, &vr), 0);
    assert_int_equal(vr.records, NREC);
    assert_int_equal(vr.shards, 5);
    size_t n;
    uint8_t *file = tu_read_file(tu_path("every/shard-00004.stk"), &n);
    assert_non_null(file);
    assert_int_equal(stk_rd16(file + HDR_VMINOR), 2);
    assert_int_equal(stk_rd32(file + n - STK_FOOTER_SIZE + FTR_VERSION), 1u << 16 | 2);
    free(file);
}

/* Without a varying field the writer writes format 1.1, as before. */
static void test_format_minor_follows_schema(void **state)
{
    (void)state;
    const char *dest = tu_path("minor");
    stk_shard_field f[2] = {{.name = "x", .type = STK_FIELD_FLOAT32, .ndim = 1, .dims = {2}},
                            {.name = "s", .type = STK_FIELD_STRING}};
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_create(dest, f, 2, NULL, &w), 0);
    float x[2] = {1.5f, -2};
    stk_field_value v[2] = {{.data = x, .count = 2}, {.data = "hi", .size = 2}};
    assert_int_equal(stk_shard_writer_add(w, v), 0);
    assert_int_equal(stk_shard_writer_finish(w, NULL), 0);
    size_t n;
    uint8_t *file = tu_read_file(tu_path("minor/shard-00000.stk"), &n);
    assert_non_null(file);
    assert_int_equal(stk_rd16(file + HDR_VMINOR), 1);
    free(file);
    /* A dataset without an image field opens and reads its fields. */
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dest, NULL, &ds), 0);
    void *data;
    size_t size;
    assert_int_equal(stk_dataset_read_field(ds, 0, "x", &data, &size, NULL), 0);
    assert_int_equal(size, 8);
    assert_memory_equal(data, x, 8);
    stk_free(data);
    stk_dataset_close(ds);
}

/* add() must fail with STK_EINVAL naming record `rec_no` and `field`. */
static void expect_bad(stk_shard_writer *w, const stk_field_value *v, uint64_t rec_no,
                       const char *field, const char *words)
{
    assert_int_equal(stk_shard_writer_add(w, v), STK_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "record %llu, field '%s'", (unsigned long long)rec_no, field);
    if (!strstr(stk_errmsg(), want) || (words && !strstr(stk_errmsg(), words)))
        fail_msg("message '%s' lacks '%s' / '%s'", stk_errmsg(), want, words ? words : "");
}

static void test_bad_values_name_record_and_field(void **state)
{
    (void)state;
    const char *dest = tu_path("bad");
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_create(dest, schema, NF, NULL, &w), 0);
    rec r = {0};
    stk_field_value v[NF];
    for (int i = 0; i < 3; i++) {
        make_rec(&r, i + 1);
        rec_values(&r, v);
        assert_int_equal(stk_shard_writer_add(w, v), 0);
    }
    make_rec(&r, 4);
    stk_field_value good[NF];
    rec_values(&r, good);
#define BAD(field_idx, ...)                                                                      \
    do {                                                                                         \
        memcpy(v, good, sizeof v);                                                               \
        stk_field_value *x = &v[field_idx];                                                      \
        __VA_ARGS__;                                                                             \
    } while (0)
    BAD(F_IMAGE, x->data = r.raw, x->size = 20);
    expect_bad(w, v, 3, "image", "not an encoded image");
    BAD(F_IMAGE, x->size = 0);
    expect_bad(w, v, 3, "image", NULL);
    BAD(F_LABEL, x->count = 2);
    expect_bad(w, v, 3, "label", "a scalar takes 1");
    BAD(F_LABEL, x->count = 1, x->size = 4);
    expect_bad(w, v, 3, "label", "disagree");
    BAD(F_VEC, x->size = 8);
    expect_bad(w, v, 3, "vec", "shape (3) takes 3");
    BAD(F_GRID, x->count = 5);
    expect_bad(w, v, 3, "grid", "shape (2, 3) takes 6");
    BAD(F_BOXES, x->count = 7);
    expect_bad(w, v, 3, "boxes", "not whole rows of 4");
    BAD(F_BOXES, x->size = 10, x->count = 0);
    expect_bad(w, v, 3, "boxes", "whole number");
    BAD(F_BOXES, x->data = NULL, x->count = 4);
    expect_bad(w, v, 3, "boxes", "at NULL");
    BAD(F_MASK, x->shape[0] = 5, x->size = 25);
    expect_bad(w, v, 3, "mask", "5x5x1, the field's is 6x5x1");
    BAD(F_RAW, x->size -= 1);
    expect_bad(w, v, 3, "raw", "needs");
    BAD(F_RAW, x->shape[2] = 5);
    expect_bad(w, v, 3, "raw", "1 to 4 channels");
    BAD(F_RAW, x->shape[0] = 0);
    expect_bad(w, v, 3, "raw", NULL);
    BAD(F_CAPTION, x->data = "\xff\xfe", x->size = 2);
    expect_bad(w, v, 3, "caption", "UTF-8");
    BAD(F_CAPTION, x->data = "\xed\xa0\x80", x->size = 3); /* a surrogate */
    expect_bad(w, v, 3, "caption", "UTF-8");
    BAD(F_BLOB, x->reserved_[0] = 1);
    expect_bad(w, v, 3, "blob", "reserved");
#undef BAD
    /* The writer is still usable: the good record becomes record 3. */
    assert_int_equal(stk_shard_writer_add(w, good), 0);
    assert_int_equal(stk_shard_writer_records(w), 4);
    assert_int_equal(stk_shard_writer_finish(w, NULL), 0);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dest, NULL, &ds), 0);
    assert_int_equal(ds->count, 4);
    void *data;
    size_t size;
    assert_int_equal(stk_dataset_read_field(ds, 3, "boxes", &data, &size, NULL), 0);
    assert_int_equal(size, r.nboxes * 16);
    assert_memory_equal(data, r.boxes, size);
    stk_free(data);
    stk_dataset_close(ds);
    stk_scratch_free(&r.jpeg);
}

static void test_schema_and_option_errors(void **state)
{
    (void)state;
    stk_shard_writer *w = (stk_shard_writer *)1;
    const char *dest = tu_path("schema");
    struct {
        stk_shard_field f;
        const char *words;
    } bad[] = {
        {{.name = "", .type = STK_FIELD_BYTES}, "name of 1 to 31"},
        {{.name = "a_name_that_is_much_longer_than_31", .type = STK_FIELD_BYTES}, "31"},
        {{.name = "x", .type = 9}, "unknown type"},
        {{.name = "x", .type = STK_FIELD_IMAGE, .ndim = 1, .dims = {3}}, "no shape"},
        {{.name = "x", .type = STK_FIELD_RAW_IMAGE, .ndim = 2, .dims = {3, 3}}, "0 (any shape) or 3"},
        {{.name = "x", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {0, 3, 3}}, "dimension 0 is 0"},
        {{.name = "x", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {3, 3, 5}}, "5 channels"},
        {{.name = "x", .type = STK_FIELD_FLOAT32, .ndim = 2, .dims = {4, 0}}, "dimension 1 is 0"},
        {{.name = "x", .type = STK_FIELD_FLOAT32, .ndim = 5}, "5 dimensions"},
        {{.name = "x", .type = STK_FIELD_INT64, .zstd_level = 3}, "raw_image fields only"},
        {{.name = "x", .type = STK_FIELD_RAW_IMAGE, .zstd_level = 20}, "1..19"},
        {{.name = "x", .type = STK_FIELD_BYTES, .reserved_ = {0, 1}}, "reserved_[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(stk_shard_writer_create(dest, &bad[i].f, 1, NULL, &w), STK_EINVAL);
        assert_null(w);
        if (!strstr(stk_errmsg(), bad[i].words))
            fail_msg("case %zu: '%s' lacks '%s'", i, stk_errmsg(), bad[i].words);
    }
    stk_shard_field two[2] = {{.name = "x", .type = STK_FIELD_BYTES},
                              {.name = "x", .type = STK_FIELD_STRING}};
    assert_int_equal(stk_shard_writer_create(dest, two, 2, NULL, &w), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "used twice"));
    assert_int_equal(stk_shard_writer_create(dest, two, 0, NULL, &w), STK_EINVAL);
    const char *meta_bad[][2] = {{"shard", "0/1"}, {"class_names", "a"}, {"shard_set", "ab"}};
    for (int i = 0; i < 3; i++) {
        stk_shard_writer_options o = {.metadata = meta_bad[i], .nmetadata = 1};
        assert_int_equal(stk_shard_writer_create(dest, two, 1, &o, &w), STK_EINVAL);
        assert_non_null(strstr(stk_errmsg(), "the writer's own"));
    }
    const char *meta_twice[] = {"k", "1", "k", "2"};
    stk_shard_writer_options o = {.metadata = meta_twice, .nmetadata = 2};
    assert_int_equal(stk_shard_writer_create(dest, two, 1, &o, &w), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "given twice"));
    stk_shard_writer_options r = {.reserved_ = {[5] = 1}};
    assert_int_equal(stk_shard_writer_create(dest, two, 1, &r, &w), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "reserved_[5]"));
    /* No writer made: nothing was written into dest. */
    assert_true(count_entries(dest) <= 0);
}

static void test_abort_and_failed_finish_leave_nothing(void **state)
{
    (void)state;
    const char *dest = tu_path("aborted");
    stk_shard_field f = {.name = "b", .type = STK_FIELD_BYTES};
    stk_shard_writer_options o = {.records_per_shard = 2};
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_create(dest, &f, 1, &o, &w), 0);
    stk_field_value v = {.data = "abc", .size = 3};
    for (int i = 0; i < 5; i++)
        assert_int_equal(stk_shard_writer_add(w, &v), 0);
    assert_int_equal(count_entries(dest), 3); /* three temporaries */
    stk_shard_writer_abort(w);
    assert_int_equal(count_entries(dest), 0);
    stk_shard_writer_abort(NULL);
    /* No record: finish fails, and leaves nothing. */
    assert_int_equal(stk_shard_writer_create(dest, &f, 1, &o, &w), 0);
    assert_int_equal(stk_shard_writer_finish(w, NULL), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no records"));
    assert_int_equal(count_entries(dest), 0);
    /* A destination that holds shards is refused. */
    const char *full = tu_path("full");
    assert_int_equal(stk_shard_writer_create(full, &f, 1, NULL, &w), 0);
    assert_int_equal(stk_shard_writer_add(w, &v), 0);
    assert_int_equal(stk_shard_writer_finish(w, NULL), 0);
    assert_int_equal(stk_shard_writer_create(full, &f, 1, NULL, &w), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "already holds shards"));
}

/* A float32 {0, 4} field whose stored value is 10 bytes: STK_EDATA naming
 * the shard, the record and the field — from read_field, field_view and
 * verify. The file is written with a bytes field, then its field entry is
 * turned into the varying float32 and the checksums recomputed. */
static void test_damaged_rows_are_named(void **state)
{
    (void)state;
    const char *path = tu_path("rows.stk");
    stk_field_def defs[2] = {{.name = "label", .type = STK_FIELD_INT64},
                             {.name = "boxes", .type = STK_FIELD_BYTES}};
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, defs, 2, NULL, 0, &w), 0);
    uint8_t b[32] = {0};
    for (int i = 0; i < 3; i++) {
        int64_t l = i;
        stk_value_bytes v[2] = {{&l, 8}, {b, i == 1 ? 10 : 16}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
    size_t n;
    uint8_t *file = tu_read_file(path, &n);
    assert_non_null(file);
    uint8_t *e = file + STK_HEADER_SIZE + STK_FIELD_ENTRY_SIZE; /* field 1 */
    e[FLD_TYPE] = STK_FIELD_FLOAT32;
    e[FLD_NDIM] = 2;
    stk_wr32(e + FLD_DIMS, 0);
    stk_wr32(e + FLD_DIMS + 4, 4);
    stk_wr32(e + FLD_ELEM_SIZE, 4);
    uint32_t hsize = stk_rd32(file + HDR_SIZE);
    stk_wr64(file + HDR_CHECKSUM, 0);
    uint64_t hc = stk_checksum(file, hsize);
    stk_wr64(file + HDR_CHECKSUM, hc);
    uint8_t *ft = file + n - STK_FOOTER_SIZE;
    stk_wr64(ft + FTR_HEADER_CHECKSUM, hc);
    stk_wr32(ft + FTR_CHECKSUM, (uint32_t)stk_checksum(ft, FTR_CHECKSUM));
    tu_write_file(path, file, n);
    free(file);
    const char *uris[] = {"stk:%s?io=mmap", "stk:%s?io=pread", "stk:%s?io=pread&verify=off"};
    for (int u = 0; u < 3; u++) {
        char uri[4200];
        snprintf(uri, sizeof uri, uris[u], path);
        stk_dataset *ds;
        assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
        stk_field_info info;
        assert_int_equal(stk_dataset_field_info(ds, 1, &info), 0);
        assert_int_equal(info.ndim, 2);
        assert_int_equal(info.dims[0], 0);
        assert_int_equal(info.dims[1], 4);
        void *data;
        size_t size;
        assert_int_equal(stk_dataset_read_field(ds, 0, "boxes", &data, &size, NULL), 0);
        assert_int_equal(size, 16);
        stk_free(data);
        assert_int_equal(stk_dataset_read_field(ds, 1, "boxes", &data, &size, NULL), STK_EDATA);
        assert_non_null(strstr(stk_errmsg(), "rows.stk: record 1 (sample 1): field 'boxes': 10 "
                                             "bytes is not a whole number of 16-byte rows"));
        stk_scratch s = {0};
        stk_field_view v;
        assert_int_equal(stk_dataset_field_view(ds, 1, 1, &v, &s), STK_EDATA);
        assert_non_null(strstr(stk_errmsg(), "record 1 (sample 1): field 'boxes'"));
        assert_null(v.data);
        assert_int_equal(stk_dataset_field_view(ds, 2, 1, &v, &s), 0);
        assert_int_equal(v.shape[0], 1);
        stk_scratch_free(&s);
        stk_dataset_close(ds);
    }
    stk_verify_result vr;
    assert_int_equal(stk_verify(path, NULL, &vr), STK_EDATA);
    assert_int_equal(vr.bad_records, 1);
}

/* stk_pack carries every field of a multi-field set: image as its mode
 * says, label, source_index, then the rest with their values. */
static void check_packed(const char *packed, const char *src, bool raw)
{
    stk_dataset *a, *b;
    assert_int_equal(stk_dataset_open(src, NULL, &a), 0);
    assert_int_equal(stk_dataset_open(packed, NULL, &b), 0);
    assert_int_equal(b->count, NREC);
    /* image, label, source_index, source_name (shards name their records),
     * then the carried fields in source order */
    assert_int_equal(stk_dataset_field_count(b), 4 + NF - 2);
    stk_field_info info;
    assert_int_equal(stk_dataset_field_info(b, 0, &info), 0);
    assert_int_equal(info.type, raw ? STK_FIELD_RAW_IMAGE : STK_FIELD_IMAGE);
    assert_int_equal(stk_dataset_field_info(b, 2, &info), 0);
    assert_string_equal(info.name, "source_index");
    assert_int_equal(stk_dataset_field_info(b, 3, &info), 0);
    assert_string_equal(info.name, "source_name");
    uint32_t k = 4;
    for (int f = 0; f < NF; f++) {
        if (f == F_IMAGE || f == F_LABEL)
            continue;
        assert_int_equal(stk_dataset_field_info(b, k++, &info), 0);
        assert_string_equal(info.name, schema[f].name);
        assert_int_equal(info.type, schema[f].type);
        assert_int_equal(info.ndim, schema[f].ndim);
        assert_memory_equal(info.dims, schema[f].dims, sizeof info.dims);
    }
    assert_string_equal(stk_dataset_class_name(b, 2), "line\nbreak");
    for (uint64_t i = 0; i < NREC; i++)
        for (int f = 0; f < NF; f++) {
            void *x, *y;
            size_t nx, ny;
            uint32_t sx[3] = {0}, sy[3] = {0};
            if (f == F_IMAGE && raw)
                continue;
            assert_int_equal(stk_dataset_read_field(a, i, schema[f].name, &x, &nx, sx), 0);
            assert_int_equal(stk_dataset_read_field(b, i, schema[f].name, &y, &ny, sy), 0);
            assert_int_equal(nx, ny);
            if (nx)
                assert_memory_equal(x, y, nx);
            assert_memory_equal(sx, sy, sizeof sx);
            stk_free(x);
            stk_free(y);
        }
    stk_dataset_close(a);
    stk_dataset_close(b);
    assert_int_equal(stk_verify(packed, NULL, NULL), 0);
}

static void test_pack_carries_every_field(void **state)
{
    (void)state;
    const char *src = tu_path("packsrc");
    write_set(src, 7, NULL);
    stk_pack_result res;
    const char *keep = tu_path("packed-keep");
    assert_int_equal(stk_pack(src, keep, NULL, &res), 0);
    assert_int_equal(res.records, NREC);
    check_packed(keep, src, false);
    stk_pack_options o = {.mode = STK_PACK_RAW, .zstd_level = 2};
    const char *raw = tu_path("packed-raw");
    assert_int_equal(stk_pack(src, raw, &o, &res), 0);
    check_packed(raw, src, true);
    /* A repack of the repack carries the same fields again (source_index is
     * pack's own, not carried twice). */
    const char *again = tu_path("packed-again");
    assert_int_equal(stk_pack(keep, again, NULL, &res), 0);
    check_packed(again, src, false);
    /* A shrinking reencode would leave the masks at the old size. */
    stk_pack_options re = {.mode = STK_PACK_REENCODE, .max_side = 4};
    assert_int_equal(stk_pack(src, tu_path("packed-re"), &re, &res), STK_EUNSUPPORTED);
    assert_non_null(strstr(stk_errmsg(), "field 'raw'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_type),
        cmocka_unit_test(test_format_minor_follows_schema),
        cmocka_unit_test(test_bad_values_name_record_and_field),
        cmocka_unit_test(test_schema_and_option_errors),
        cmocka_unit_test(test_abort_and_failed_finish_leave_nothing),
        cmocka_unit_test(test_damaged_rows_are_named),
        cmocka_unit_test(test_pack_carries_every_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
