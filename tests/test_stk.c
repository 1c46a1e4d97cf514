/*
 * test_stk.c — the .stk shard format: exact round trip of every field type;
 * multi-shard index spaces; damage detection (every single-byte flip inside
 * a record, in the header, in the index; truncation at many lengths; a
 * zeroed footer) naming the shard and record; the loader's raise and skip
 * policies on a damaged record; pack output identical for any job count.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "format/dataset.h"
#include "format/stk_format.h"
#include "format/stk_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* A shard with every field type                                             */
/* ------------------------------------------------------------------------ */

#define NREC 7

static const stk_field_def all_fields[] = {
    {.name = "blob", .type = STK_FIELD_BYTES},
    {.name = "label", .type = STK_FIELD_INT64},
    {.name = "pixels", .type = STK_FIELD_RAW_IMAGE, .compression = 1, .ndim = 3, .dims = {3, 4, 2}},
    {.name = "vec", .type = STK_FIELD_FLOAT32, .ndim = 1, .dims = {3}},
    {.name = "caption", .type = STK_FIELD_STRING},
    {.name = "pair", .type = STK_FIELD_INT64, .ndim = 1, .dims = {2}},
};

typedef struct record {
    uint8_t blob[300];
    size_t blob_len;
    int64_t label;
    uint8_t pixels[24];
    float vec[3];
    char caption[32];
    int64_t pair[2];
} record;

static void make_record(record *r, int i)
{
    memset(r, 0, sizeof *r);
    r->blob_len = (size_t)(i * 37) % 300; /* record 0 has an empty blob */
    tu_fill_random(r->blob, r->blob_len, (uint64_t)i);
    r->label = i % 3;
    for (int k = 0; k < 24; k++)
        r->pixels[k] = (uint8_t)(i * 24 + k);
    for (int k = 0; k < 3; k++)
        r->vec[k] = (float)i + 0.25f * (float)k;
    snprintf(r->caption, sizeof r->caption, "caption %d", i);
    r->pair[0] = -i;
    r->pair[1] = (int64_t)i << 40;
}

/* Raw payload: prefix + zstd frame of the pixels. */
#include <zstd.h>
static size_t raw_payload(const record *r, uint8_t *out, size_t cap)
{
    stk_wr32(out, 3);
    stk_wr32(out + 4, 4);
    stk_wr32(out + 8, 2);
    size_t z = ZSTD_compress(out + 12, cap - 12, r->pixels, 24, 3);
    assert_false(ZSTD_isError(z));
    return 12 + z;
}

static void write_shard(const char *path, int first, int count)
{
    stk_kv meta[] = {{"class_names", "zero\none\ntwo", 12}, {"note", "hello", 5}};
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_open(path, all_fields, 6, meta, 2, &w), 0);
    for (int i = first; i < first + count; i++) {
        record r;
        make_record(&r, i);
        uint8_t raw[256];
        size_t rl = raw_payload(&r, raw, sizeof raw);
        stk_field_value v[6] = {{r.blob, r.blob_len}, {&r.label, 8}, {raw, rl},
                                {r.vec, 12},          {r.caption, strlen(r.caption)},
                                {r.pair, 16}};
        assert_int_equal(stk_shard_writer_add(w, v), 0);
    }
    assert_int_equal(stk_shard_writer_finish(w), 0);
}

static void check_record(stk_dataset *ds, uint64_t index, int i)
{
    record r;
    make_record(&r, i);
    void *data;
    size_t size;
    uint32_t shape[3] = {0};
    assert_int_equal(stk_dataset_read_field(ds, index, "blob", &data, &size, NULL), 0);
    assert_int_equal(size, r.blob_len);
    if (size)
        assert_memory_equal(data, r.blob, size);
    free(data);
    assert_int_equal(stk_dataset_read_field(ds, index, "pixels", &data, &size, shape), 0);
    assert_int_equal(size, 24);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 4);
    assert_int_equal(shape[2], 2);
    assert_memory_equal(data, r.pixels, 24);
    free(data);
    assert_int_equal(stk_dataset_read_field(ds, index, NULL, &data, &size, NULL), 0); /* image */
    assert_memory_equal(data, r.pixels, 24);
    free(data);
    assert_int_equal(stk_dataset_read_field(ds, index, "vec", &data, &size, NULL), 0);
    assert_int_equal(size, 12);
    assert_memory_equal(data, r.vec, 12);
    free(data);
    assert_int_equal(stk_dataset_read_field(ds, index, "caption", &data, &size, NULL), 0);
    assert_int_equal(size, strlen(r.caption));
    assert_memory_equal(data, r.caption, size);
    free(data);
    assert_int_equal(stk_dataset_read_field(ds, index, "pair", &data, &size, NULL), 0);
    assert_memory_equal(data, r.pair, 16);
    free(data);
    int64_t label;
    assert_int_equal(stk_dataset_label(ds, index, &label), 0);
    assert_int_equal(label, r.label);
    /* The loader's view: pixels HWC, and the label. */
    uint8_t px[24];
    int64_t l2;
    assert_int_equal(stk_dataset_read(ds, index, px, sizeof px, &l2), 24);
    assert_memory_equal(px, r.pixels, 24);
    assert_int_equal(l2, r.label);
}

static void test_round_trip_every_field(void **state)
{
    (void)state;
    const char *path = tu_path("all.stk");
    write_shard(path, 0, NREC);
    const char *uris[] = {"stk:%s",
                          "stk:%s?io=pread",
                          "stk:%s?verify=always",
                          "%s",
                          "stk:%s?io=mmap&hugepages=off",
                          "stk:%s?io=mmap&hugepages=on&verify=always",
                          "stk:%s?hugepages=auto"};
    for (int u = 0; u < (int)(sizeof uris / sizeof uris[0]); u++) {
        char uri[700];
        snprintf(uri, sizeof uri, uris[u], path);
        stk_dataset *ds;
        int rc = stk_dataset_open(uri, NULL, &ds);
        if (rc < 0)
            print_error("%s\n", stk_errmsg());
        assert_int_equal(rc, 0);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_int_equal(info.count, NREC);
        assert_string_equal(info.format, "stk");
        assert_int_equal(info.height, 3);
        assert_int_equal(info.width, 4);
        assert_int_equal(info.channels, 2);
        assert_int_equal(stk_dataset_field_count(ds), 6);
        stk_field_info fi;
        assert_int_equal(stk_dataset_field_info(ds, 3, &fi), 0);
        assert_string_equal(fi.name, "vec");
        assert_int_equal(fi.type, STK_FIELD_FLOAT32);
        assert_int_equal(fi.dims[0], 3);
        for (int i = 0; i < NREC; i++)
            check_record(ds, (uint64_t)i, i);
        assert_string_equal(stk_dataset_metadata(ds, "note"), "hello");
        assert_null(stk_dataset_metadata(ds, "nope"));
        assert_string_equal(stk_dataset_class_name(ds, 2), "two");
        assert_null(stk_dataset_class_name(ds, 3));
        assert_int_equal(stk_dataset_shard_count(ds), 1);
        void *d;
        size_t sz;
        assert_int_equal(stk_dataset_read_field(ds, 0, "missing", &d, &sz, NULL), STK_EINVAL);
        assert_int_equal(stk_dataset_read_field(ds, NREC, "blob", &d, &sz, NULL), STK_EINVAL);
        stk_dataset_close(ds);
    }
    {
        char uri[700];
        stk_dataset *ds;
        snprintf(uri, sizeof uri, "stk:%s?hugepages=maybe", path);
        assert_int_equal(stk_dataset_open(uri, NULL, &ds), STK_EINVAL);
        assert_non_null(strstr(stk_errmsg(), "unknown value 'maybe' for query key 'hugepages'"));
        assert_non_null(strstr(stk_errmsg(), "(expected auto, on or off)"));
    }
    /* Alignment promises of the format. */
    FILE *f = fopen(path, "rb");
    uint8_t head[64], foot[64];
    assert_int_equal(fread(head, 1, 64, f), 64);
    fseek(f, -64, SEEK_END);
    assert_int_equal(fread(foot, 1, 64, f), 64);
    fclose(f);
    assert_int_equal(stk_rd64(head + HDR_DATA_OFFSET) % 4096, 0);
    assert_int_equal(stk_rd64(foot + FTR_INDEX_OFFSET) % 4096, 0);
}

static void test_multi_shard_dir_and_glob(void **state)
{
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/multi", tu_tmpdir());
    mkdir(dir, 0755);
    char p[700];
    snprintf(p, sizeof p, "%s/a-000.stk", dir);
    write_shard(p, 0, 3);
    snprintf(p, sizeof p, "%s/a-001.stk", dir);
    write_shard(p, 3, 1);
    snprintf(p, sizeof p, "%s/a-002.stk", dir);
    write_shard(p, 4, 3);
    snprintf(p, sizeof p, "%s/ignored.txt", dir);
    tu_write_file(p, "x", 1);
    char glob_uri[700];
    snprintf(glob_uri, sizeof glob_uri, "%s/a-00[02].stk", dir);
    const char *uris[] = {dir, glob_uri};
    for (int u = 0; u < 2; u++) {
        stk_dataset *ds;
        assert_int_equal(stk_dataset_open(uris[u], NULL, &ds), 0);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        if (u == 0) {
            assert_int_equal(info.count, 7);
            assert_int_equal(stk_dataset_shard_count(ds), 3);
            for (int i = 0; i < 7; i++)
                check_record(ds, (uint64_t)i, i);
            stk_shard_info si;
            assert_int_equal(stk_dataset_shard_info(ds, 2, &si), 0);
            assert_int_equal(si.first_index, 4);
            assert_int_equal(si.records, 3);
        } else {
            assert_int_equal(info.count, 6);
            check_record(ds, 2, 2);
            check_record(ds, 3, 4); /* second shard of the glob is a-002 */
        }
        stk_dataset_close(ds);
    }
    /* A shard with another schema in the set is refused, naming it. */
    snprintf(p, sizeof p, "%s/a-003.stk", dir);
    stk_field_def other[] = {{.name = "x", .type = STK_FIELD_BYTES}};
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_open(p, other, 1, NULL, 0, &w), 0);
    stk_field_value v = {"abc", 3};
    assert_int_equal(stk_shard_writer_add(w, &v), 0);
    assert_int_equal(stk_shard_writer_finish(w), 0);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dir, NULL, &ds), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "a-003.stk"));
    assert_non_null(strstr(stk_errmsg(), "schema"));
}

/* ------------------------------------------------------------------------ */
/* Damage                                                                    */
/* ------------------------------------------------------------------------ */

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

typedef struct damage_log {
    int count;
    char shard[600];
    uint64_t record;
    char reason[1024];
} damage_log;

static void log_damage(void *ctx, const char *shard, uint64_t rec, const char *reason)
{
    damage_log *d = ctx;
    d->count++;
    snprintf(d->shard, sizeof d->shard, "%s", shard);
    d->record = rec;
    snprintf(d->reason, sizeof d->reason, "%s", reason);
}

static void test_every_single_byte_flip_in_records_is_caught(void **state)
{
    (void)state;
    const char *path = tu_path("flip.stk"), *bad = tu_path("flip-bad.stk");
    write_shard(path, 0, NREC);
    size_t n;
    uint8_t *orig = slurp(path, &n);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    stk_shard_info si;
    stk_dataset_shard_info(ds, 0, &si);
    stk_dataset_close(ds);
    /* Record r spans [offset, offset + sum of lengths) per the index. */
    uint64_t index_off = stk_rd64(orig + n - 64 + FTR_INDEX_OFFSET);
    const uint8_t *offsets = orig + index_off, *lengths = offsets + NREC * 8;
    int flips = 0;
    for (uint64_t r = 0; r < NREC; r++) {
        uint64_t off = stk_rd64(offsets + r * 8), len = 0;
        for (int v = 0; v < 3; v++)
            len += stk_rd32(lengths + (r * 3 + v) * 4);
        for (uint64_t b = off; b < off + len; b++) {
            orig[b] ^= 0x01;
            tu_write_file(bad, orig, n);
            orig[b] ^= 0x01;
            damage_log log = {0};
            stk_verify_options vo = {.on_damage = log_damage, .ctx = &log};
            stk_verify_result res;
            assert_int_equal(stk_verify(bad, &vo, &res), STK_EDATA);
            assert_int_equal(log.count, 1);
            assert_int_equal(log.record, r);
            assert_non_null(strstr(log.shard, "flip-bad.stk"));
            assert_int_equal(res.bad_records, 1);
            flips++;
        }
    }
    assert_true(flips > 500);
    /* Clean file verifies. */
    tu_write_file(bad, orig, n);
    stk_verify_result res;
    assert_int_equal(stk_verify(bad, NULL, &res), 0);
    assert_int_equal(res.records, NREC);
    free(orig);
}

static void test_structure_damage_names_the_shard(void **state)
{
    (void)state;
    const char *path = tu_path("struct.stk"), *bad = tu_path("struct-bad.stk");
    write_shard(path, 0, NREC);
    size_t n;
    uint8_t *orig = slurp(path, &n);
    uint64_t index_off = stk_rd64(orig + n - 64 + FTR_INDEX_OFFSET);
    struct {
        const char *what;
        size_t at; /* byte to flip, or SIZE_MAX for special cases */
    } cases[] = {
        {"header", 3}, {"header", 70}, {"header", 200}, {"index", index_off + 5},
        {"index", n - 65}, {"footer", n - 60}, {"footer", n - 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        orig[cases[k].at] ^= 0x40;
        tu_write_file(bad, orig, n);
        orig[cases[k].at] ^= 0x40;
        stk_dataset *ds;
        int rc = stk_dataset_open(bad, NULL, &ds);
        assert_true(rc == STK_EFORMAT || rc == STK_EUNSUPPORTED);
        assert_non_null(strstr(stk_errmsg(), "struct-bad.stk"));
        damage_log log = {0};
        stk_verify_options vo = {.on_damage = log_damage, .ctx = &log};
        assert_int_equal(stk_verify(bad, &vo, NULL), STK_EDATA);
        assert_int_equal(log.record, UINT64_MAX);
    }
    /* Zeroed footer. */
    uint8_t *z = malloc(n);
    memcpy(z, orig, n);
    memset(z + n - 64, 0, 64);
    tu_write_file(bad, z, n);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(bad, NULL, &ds), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "footer"));
    free(z);
    /* Truncation at many lengths (a torn write). */
    for (size_t len = 0; len < n; len += (len < 4200 ? 97 : 1 + len / 7)) {
        tu_write_file(bad, orig, len);

        int rc = stk_dataset_open(bad, NULL, &ds);
        assert_true(rc == STK_EFORMAT);
        assert_non_null(strstr(stk_errmsg(), "struct-bad.stk"));
    }
    /* A writer that never finishes leaves no shard behind. */
    stk_shard_writer *w;
    const char *torn = tu_path("torn.stk");
    assert_int_equal(stk_shard_writer_open(torn, all_fields, 6, NULL, 0, &w), 0);
    stk_shard_writer_abort(w);
    struct stat st;
    assert_int_not_equal(stat(torn, &st), 0);
    free(orig);
}

/* The loader on a damaged record: raise names shard + record; skip counts
 * it and delivers every other sample exactly once. */
static void test_loader_on_damaged_record(void **state)
{
    (void)state;
    const char *path = tu_path("loader.stk"), *bad = tu_path("loader-bad.stk");
    /* 40 records of raw 4x4x1 pixels. */
    stk_field_def fields[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {4, 4, 1}},
        {.name = "label", .type = STK_FIELD_INT64},
    };
    stk_shard_writer *w;
    assert_int_equal(stk_shard_writer_open(path, fields, 2, NULL, 0, &w), 0);
    for (int i = 0; i < 40; i++) {
        uint8_t payload[12 + 16];
        stk_wr32(payload, 4);
        stk_wr32(payload + 4, 4);
        stk_wr32(payload + 8, 1);
        memset(payload + 12, i, 16);
        int64_t label = i;
        stk_field_value v[2] = {{payload, sizeof payload}, {&label, 8}};
        assert_int_equal(stk_shard_writer_add(w, v), 0);
    }
    assert_int_equal(stk_shard_writer_finish(w), 0);
    size_t n;
    uint8_t *b = slurp(path, &n);
    uint64_t index_off = stk_rd64(b + n - 64 + FTR_INDEX_OFFSET);
    uint64_t rec17 = stk_rd64(b + index_off + 17 * 8);
    b[rec17 + 20] ^= 0xff; /* a pixel of record 17 */
    tu_write_file(bad, b, n);
    free(b);

    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(bad, NULL, &ds), 0);
    stk_loader_options o = {.batch_size = 8, .threads = 2, .seed = 1};
    stk_loader *l;
    assert_int_equal(stk_loader_create(ds, "to u8", &o, &l), 0);
    stk_batch batch;
    int rc;
    while ((rc = stk_loader_next(l, &batch)) == 1)
        stk_loader_release(l, &batch);
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "loader-bad.stk"));
    assert_non_null(strstr(stk_errmsg(), "record 17"));
    assert_non_null(strstr(stk_errmsg(), "checksum"));
    stk_loader_destroy(l);

    o.on_error = STK_ON_ERROR_SKIP;
    assert_int_equal(stk_loader_create(ds, "to u8", &o, &l), 0);
    uint8_t seen[40] = {0};
    uint32_t skipped = 0, rows = 0;
    while ((rc = stk_loader_next(l, &batch)) == 1) {
        for (uint32_t i = 0; i < batch.size; i++) {
            uint64_t idx = batch.indices[i];
            assert_int_equal(seen[idx], 0);
            seen[idx] = 1;
            assert_int_equal(((uint8_t *)batch.data)[i * 16], (uint8_t)idx);
            assert_int_equal(batch.labels[i], (int64_t)idx);
        }
        rows += batch.size;
        skipped += batch.skipped;
        stk_loader_release(l, &batch);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(rows, 39);
    assert_int_equal(skipped, 1);
    assert_int_equal(seen[17], 0);
    stk_loader_destroy(l);
    stk_dataset_close(ds);

    /* verify=off does not look at checksums (the damaged pixel passes). */
    char uri[700];
    snprintf(uri, sizeof uri, "stk:%s?verify=off", bad);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    uint8_t px[16];
    assert_int_equal(stk_dataset_read(ds, 17, px, sizeof px, NULL), 16);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "stk:%s?verify=sometimes", bad);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "verify=sometimes"));
}

static void test_writer_rejects_bad_input(void **state)
{
    (void)state;
    stk_shard_writer *w;
    const char *p = tu_path("bad-writer.stk");
    stk_field_def dup[] = {{.name = "a", .type = STK_FIELD_BYTES}, {.name = "a", .type = STK_FIELD_BYTES}};
    assert_int_equal(stk_shard_writer_open(p, dup, 2, NULL, 0, &w), STK_EINVAL);
    stk_field_def unknown[] = {{.name = "a", .type = 99}};
    assert_int_equal(stk_shard_writer_open(p, unknown, 1, NULL, 0, &w), STK_EINVAL);
    stk_field_def zcomp[] = {{.name = "a", .type = STK_FIELD_BYTES, .compression = 1}};
    assert_int_equal(stk_shard_writer_open(p, zcomp, 1, NULL, 0, &w), STK_EINVAL);
    stk_field_def ok[] = {{.name = "l", .type = STK_FIELD_INT64}};
    assert_int_equal(stk_shard_writer_open(p, ok, 1, NULL, 0, &w), 0);
    stk_field_value v = {"abc", 3}; /* an int64 needs 8 bytes */
    assert_int_equal(stk_shard_writer_add(w, &v), STK_EINVAL);
    stk_shard_writer_abort(w);
    assert_int_equal(stk_shard_writer_open("/nonexistent/dir/x.stk", ok, 1, NULL, 0, &w), STK_ENOENT);
}

/* stk_pack from CIFAR-10 files: every sample equals the source, labels and
 * order kept; the output is byte-identical for 1 and 3 jobs. */
static void test_pack_cifar_round_trip_and_determinism(void **state)
{
    (void)state;
    char src[600], d1[600], d3[600];
    snprintf(src, sizeof src, "%s/cifar", tu_tmpdir());
    snprintf(d1, sizeof d1, "%s/packed1", tu_tmpdir());
    snprintf(d3, sizeof d3, "%s/packed3", tu_tmpdir());
    mkdir(src, 0755);
    const int per = 150;
    uint8_t *rec = malloc((size_t)per * 3073);
    for (int f = 1; f <= 5; f++) {
        tu_fill_random(rec, (size_t)per * 3073, (uint64_t)f);
        for (int i = 0; i < per; i++)
            rec[(size_t)i * 3073] %= 10;
        char p[700];
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", src, f);
        tu_write_file(p, rec, (size_t)per * 3073);
    }
    free(rec);
    stk_pack_options o = {.jobs = 1, .shard_bytes = 1 << 20, .mode = STK_PACK_RAW, .zstd_level = 1};
    stk_pack_result r1, r3;
    assert_int_equal(stk_pack(src, d1, &o, &r1), 0);
    o.jobs = 3;
    assert_int_equal(stk_pack(src, d3, &o, &r3), 0);
    assert_int_equal(r1.records, 750);
    assert_int_equal(r1.skipped, 0);
    assert_true(r1.shards >= 2);
    assert_int_equal(r1.shards, r3.shards);
    for (uint32_t s = 0; s < r1.shards; s++) {
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/shard-%05u.stk", d1, s);
        snprintf(b, sizeof b, "%s/shard-%05u.stk", d3, s);
        size_t na, nb;
        uint8_t *ba = slurp(a, &na), *bb = slurp(b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ba, bb, na);
        free(ba);
        free(bb);
    }
    stk_dataset *cifar, *packed;
    assert_int_equal(stk_dataset_open(src, NULL, &cifar), 0);
    assert_int_equal(stk_dataset_open(d1, NULL, &packed), 0);
    uint8_t x[3072], y[3072];
    for (uint64_t i = 0; i < 750; i++) {
        int64_t lx, ly;
        assert_int_equal(stk_dataset_read(cifar, i, x, sizeof x, &lx), 3072);
        assert_int_equal(stk_dataset_read(packed, i, y, sizeof y, &ly), 3072);
        assert_memory_equal(x, y, 3072);
        assert_int_equal(lx, ly);
    }
    stk_dataset_close(cifar);
    stk_dataset_close(packed);
    /* Packing into a directory that already holds shards is refused. */
    assert_int_equal(stk_pack(src, d1, &o, &r1), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "already holds shards"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_field),
        cmocka_unit_test(test_multi_shard_dir_and_glob),
        cmocka_unit_test(test_every_single_byte_flip_in_records_is_caught),
        cmocka_unit_test(test_structure_damage_names_the_shard),
        cmocka_unit_test(test_loader_on_damaged_record),
        cmocka_unit_test(test_writer_rejects_bad_input),
        cmocka_unit_test(test_pack_cifar_round_trip_and_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
