/*
 * test_stk.c — the .stk shard format: exact round trip of every field type;
 * multi-shard index spaces; damage detection (every single-byte flip inside
 * a record, in the header, in the index; truncation at many lengths; a
 * zeroed footer) naming the shard and record; the refusals of open (a
 * FIFO, too small, over max_bytes, unreadable) in their exact words; the loader's raise and skip
 * policies on a damaged record; pack output identical for any job count;
 * shard sets (missing, extra, renamed, foreign, mixed shards and stale
 * temporaries, each named); verify's global sample index and its check of
 * source_index order.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "format/dataset.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"

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
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, all_fields, 6, meta, 2, &w), 0);
    for (int i = first; i < first + count; i++) {
        record r;
        make_record(&r, i);
        uint8_t raw[256];
        size_t rl = raw_payload(&r, raw, sizeof raw);
        stk_value_bytes v[6] = {{r.blob, r.blob_len}, {&r.label, 8}, {raw, rl},
                                {r.vec, 12},          {r.caption, strlen(r.caption)},
                                {r.pair, 16}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
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
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(p, other, 1, NULL, 0, &w), 0);
    stk_value_bytes v = {"abc", 3};
    assert_int_equal(stk_shard_file_add(w, &v), 0);
    assert_int_equal(stk_shard_file_finish(w), 0);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dir, NULL, &ds), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "a-003.stk"));
    assert_non_null(strstr(stk_errmsg(), "schema"));
}

/* ------------------------------------------------------------------------ */
/* Damage                                                                    */
/* ------------------------------------------------------------------------ */

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
    uint8_t *orig = tu_read_file(path, &n);
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
    uint8_t *orig = tu_read_file(path, &n);
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
    stk_shard_file *w;
    const char *torn = tu_path("torn.stk");
    assert_int_equal(stk_shard_file_open(torn, all_fields, 6, NULL, 0, &w), 0);
    stk_shard_file_abort(w);
    struct stat st;
    assert_int_not_equal(stat(torn, &st), 0);
    free(orig);
}

/* Opening a shard refuses what is not one with this reader's own words and
 * codes, in both I/O modes (the file comes through src/io, which leaves the
 * wording to the reader): a FIFO (without hanging), a file too small, one
 * over max_bytes, one that cannot be opened. */
static void test_shard_open_refusals_keep_their_words(void **state)
{
    (void)state;
    static const char *const modes[] = {"", "?io=pread", "?io=mmap"};
    char uri[600], want[600];
    stk_dataset *ds;
    const char *fifo = tu_path("refuse-fifo.stk"), *tiny = tu_path("refuse-tiny.stk");
    const char *good = tu_path("refuse-good.stk");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    uint8_t zeros[100] = {0};
    tu_write_file(tiny, zeros, sizeof zeros);
    write_shard(good, 0, NREC);
    struct stat st;
    assert_int_equal(stat(good, &st), 0);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        snprintf(uri, sizeof uri, "stk:%s%s", fifo, modes[m]);
        assert_int_equal(stk_dataset_open(uri, NULL, &ds), STK_EINVAL);
        snprintf(want, sizeof want, "%s: not a regular file", fifo);
        assert_string_equal(stk_errmsg(), want);

        snprintf(uri, sizeof uri, "stk:%s%s", tiny, modes[m]);
        assert_int_equal(stk_dataset_open(uri, NULL, &ds), STK_EFORMAT);
        snprintf(want, sizeof want, "%s: 100 bytes is too small for a shard (truncated?)", tiny);
        assert_string_equal(stk_errmsg(), want);

        snprintf(uri, sizeof uri, "stk:%s%s", good, modes[m]);
        stk_dataset_options o = {.max_bytes = (uint64_t)st.st_size - 1};
        assert_int_equal(stk_dataset_open(uri, &o, &ds), STK_ELIMIT);
        snprintf(want, sizeof want, "%s: %llu bytes is over the %llu-byte limit", good,
                 (unsigned long long)st.st_size, (unsigned long long)st.st_size - 1);
        assert_string_equal(stk_errmsg(), want);
        o.max_bytes = (uint64_t)st.st_size;
        assert_int_equal(stk_dataset_open(uri, &o, &ds), 0);
        check_record(ds, 3, 3);
        stk_dataset_close(ds);

        if (geteuid() != 0) { /* root opens a mode-000 file */
            assert_int_equal(chmod(good, 0), 0);
            assert_int_equal(stk_dataset_open(uri, NULL, &ds), STK_EIO);
            snprintf(want, sizeof want, "%s: cannot open: Permission denied", good);
            assert_string_equal(stk_errmsg(), want);
            assert_int_equal(chmod(good, 0644), 0);
        }
    }
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
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, fields, 2, NULL, 0, &w), 0);
    for (int i = 0; i < 40; i++) {
        uint8_t payload[12 + 16];
        stk_wr32(payload, 4);
        stk_wr32(payload + 4, 4);
        stk_wr32(payload + 8, 1);
        memset(payload + 12, i, 16);
        int64_t label = i;
        stk_value_bytes v[2] = {{payload, sizeof payload}, {&label, 8}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
    size_t n;
    uint8_t *b = tu_read_file(path, &n);
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
    stk_shard_file *w;
    const char *p = tu_path("bad-writer.stk");
    stk_field_def dup[] = {{.name = "a", .type = STK_FIELD_BYTES}, {.name = "a", .type = STK_FIELD_BYTES}};
    assert_int_equal(stk_shard_file_open(p, dup, 2, NULL, 0, &w), STK_EINVAL);
    stk_field_def unknown[] = {{.name = "a", .type = 99}};
    assert_int_equal(stk_shard_file_open(p, unknown, 1, NULL, 0, &w), STK_EINVAL);
    stk_field_def zcomp[] = {{.name = "a", .type = STK_FIELD_BYTES, .compression = 1}};
    assert_int_equal(stk_shard_file_open(p, zcomp, 1, NULL, 0, &w), STK_EINVAL);
    stk_field_def ok[] = {{.name = "l", .type = STK_FIELD_INT64}};
    assert_int_equal(stk_shard_file_open(p, ok, 1, NULL, 0, &w), 0);
    stk_value_bytes v = {"abc", 3}; /* an int64 needs 8 bytes */
    assert_int_equal(stk_shard_file_add(w, &v), STK_EINVAL);
    stk_shard_file_abort(w);
    assert_int_equal(stk_shard_file_open("/nonexistent/dir/x.stk", ok, 1, NULL, 0, &w), STK_ENOENT);
}

/* Progress calls of a pack: both callbacks, recorded. */
typedef struct progress_log {
    uint64_t done[64], total[64], bytes[64], old_done[64];
    int n, old_n;
} progress_log;

static void log_progress_bytes(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    progress_log *g = ctx;
    assert_true(g->n < 64);
    g->done[g->n] = done;
    g->total[g->n] = total;
    g->bytes[g->n++] = bytes;
}

static void log_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress_log *g = ctx;
    assert_true(g->old_n < 64);
    assert_int_equal(total, 750);
    g->old_done[g->old_n++] = done;
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
    progress_log log = {0};
    o.on_progress = log_progress;
    o.on_progress_bytes = log_progress_bytes;
    o.ctx = &log;
    assert_int_equal(stk_pack(src, d1, &o, &r1), 0);
    /* jobs 1: blocks of 64 records, a call after each (750 = 11 * 64 + 46);
     * bytes written grow, the open shard's included, and end within the
     * final total (which adds the last shard's index and footer). */
    assert_int_equal(log.n, 12);
    assert_int_equal(log.old_n, 12);
    for (int i = 0; i < log.n; i++) {
        assert_int_equal(log.done[i], i < 11 ? (uint64_t)(i + 1) * 64 : 750);
        assert_int_equal(log.old_done[i], log.done[i]);
        assert_int_equal(log.total[i], 750);
        assert_true(log.bytes[i] > (i ? log.bytes[i - 1] : 0));
        assert_true(log.bytes[i] >= log.done[i] * 3072 / 2); /* zstd of random bytes barely shrinks */
    }
    assert_true(log.bytes[log.n - 1] <= r1.bytes);
    assert_true(log.bytes[log.n - 1] >= r1.bytes - r1.bytes / 10);
    o.on_progress = NULL;
    o.on_progress_bytes = NULL;
    o.ctx = NULL;
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
        uint8_t *ba = tu_read_file(a, &na), *bb = tu_read_file(b, &nb);
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

/* ------------------------------------------------------------------------ */
/* Shard sets (issue 9, defects 2 and 7)                                     */
/* ------------------------------------------------------------------------ */

/* CIFAR-10 files under tu_tmpdir()/name: files x per records; labels are
 * the first byte of each record mod 10. */
static void make_cifar(const char *dir, int files, int per, uint64_t seed)
{
    mkdir(dir, 0755);
    uint8_t *rec = malloc((size_t)per * 3073);
    for (int f = 1; f <= files; f++) {
        tu_fill_random(rec, (size_t)per * 3073, seed * 100 + (uint64_t)f);
        for (int i = 0; i < per; i++)
            rec[(size_t)i * 3073] %= 10;
        char p[700];
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f);
        tu_write_file(p, rec, (size_t)per * 3073);
    }
    free(rec);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = tu_read_file(from, &n);
    tu_write_file(to, b, n);
    free(b);
}

/* on_damage: append "shard: reason\n" (as the CLI prints it) to the
 * char[LOG_FULL_SIZE] ctx. */
#define LOG_FULL_SIZE 65536
static void log_full(void *ctx, const char *shard, uint64_t rec, const char *reason)
{
    char *all = ctx;
    (void)rec;
    size_t n = strlen(all);
    snprintf(all + n, LOG_FULL_SIZE - n, "%s: %s\n", shard, reason);
}

/* Open must fail with STK_EFORMAT and a message holding every `want`;
 * verify must report damage that holds want[0]. */
static void expect_refused(const char *dir, const char *const *want, int nwant)
{
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dir, NULL, &ds), STK_EFORMAT);
    for (int i = 0; i < nwant; i++)
        if (!strstr(stk_errmsg(), want[i]))
            fail_msg("open: '%s' is not in: %s", want[i], stk_errmsg());
    static char all[LOG_FULL_SIZE];
    all[0] = '\0';
    stk_verify_options vo = {.on_damage = log_full, .ctx = all};
    assert_int_equal(stk_verify(dir, &vo, NULL), STK_EDATA);
    if (!strstr(all, want[0]))
        fail_msg("verify: '%s' is not in: %s", want[0], all);
}

static void count_notice(void *ctx, const char *path, const char *msg)
{
    int *n = ctx;
    (*n)++;
    assert_non_null(strstr(path, ".stk.tmp-"));
    assert_non_null(strstr(msg, "interrupted pack"));
}

/* Packed from one directory with a relative input, the shards store the
 * names as opened plus that directory (source_root), and
 * stk_dataset_sample_path gives the absolute path from any other working
 * directory (issue 26: it resolved only from where the pack ran). */
static void test_pack_relative_source_resolves_from_any_directory(void **state)
{
    (void)state;
    char top[600], dir[700], real[4096], old[4096], want[4200];
    snprintf(top, sizeof top, "%s/relsrc", tu_tmpdir());
    mkdir(top, 0755);
    snprintf(dir, sizeof dir, "%s/imgs", top);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/imgs/cat", top);
    mkdir(dir, 0755);
    uint8_t *rgb = tu_smooth_image(16, 24, 3);
    size_t size;
    uint8_t *jpeg = tu_encode_jpeg(rgb, 16, 24, 90, &size);
    snprintf(dir, sizeof dir, "%s/imgs/cat/1.jpg", top);
    tu_write_file(dir, jpeg, size);
    assert_non_null(realpath(top, real));
    assert_non_null(getcwd(old, sizeof old));

    assert_int_equal(chdir(top), 0);
    stk_pack_options o = {.jobs = 1};
    assert_int_equal(stk_pack("imgs", "shards", &o, NULL), 0);
    assert_int_equal(chdir("/"), 0);

    snprintf(dir, sizeof dir, "%s/shards", top);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dir, NULL, &ds), 0);
    assert_string_equal(stk_dataset_metadata(ds, "source_root"), real);
    char *path = NULL;
    assert_int_equal(stk_dataset_sample_path(ds, 0, &path), 0);
    snprintf(want, sizeof want, "%s/imgs/cat/1.jpg", real);
    assert_string_equal(path, want);
    size_t n;
    uint8_t *back = tu_read_file(path, &n); /* opens from "/" */
    assert_int_equal(n, size);
    assert_memory_equal(back, jpeg, size);
    void *stored;
    size_t stored_size;
    assert_int_equal(stk_dataset_read_field(ds, 0, "source_name", &stored, &stored_size, NULL), 0);
    assert_int_equal(stored_size, strlen("imgs/cat/1.jpg")); /* stored as opened */
    assert_memory_equal(stored, "imgs/cat/1.jpg", stored_size);
    stk_free(stored);
    stk_free(path);
    stk_dataset_close(ds);

    assert_int_equal(chdir(old), 0);
    free(back);
    free(jpeg);
    free(rgb);
}

static void test_shard_set_problems_are_named(void **state)
{
    (void)state;
    char src[600], other[600], a[600], b[600], p[800], q[800];
    snprintf(src, sizeof src, "%s/set-src", tu_tmpdir());
    snprintf(other, sizeof other, "%s/set-other", tu_tmpdir());
    snprintf(a, sizeof a, "%s/set-a", tu_tmpdir());
    snprintf(b, sizeof b, "%s/set-b", tu_tmpdir());
    make_cifar(src, 5, 40, 1);
    make_cifar(other, 5, 40, 2);
    stk_pack_options o = {.shard_bytes = 100 << 10};
    stk_pack_result ra, rb;
    assert_int_equal(stk_pack(src, a, &o, &ra), 0);
    assert_int_equal(stk_pack(other, b, &o, &rb), 0);
    assert_true(ra.shards >= 5);
    assert_int_equal(ra.shards, rb.shards);

    /* Every shard says where it belongs: shard = i/n, one shard_set. */
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(a, NULL, &ds), 0);
    assert_int_equal(stk_dataset_shard_count(ds), ra.shards);
    char place[32];
    snprintf(place, sizeof place, "0/%u", ra.shards);
    assert_string_equal(stk_dataset_metadata(ds, "shard"), place);
    const char *id = stk_dataset_metadata(ds, "shard_set");
    assert_non_null(id);
    assert_int_equal(strlen(id), 32);
    char set_id[40];
    snprintf(set_id, sizeof set_id, "%s", id);
    stk_dataset_close(ds);
    assert_int_equal(stk_verify(a, NULL, NULL), 0);

    /* Missing: shard 2 moved away; a stale temporary beside it is named. */
    char tmp[800], n2[32];
    snprintf(p, sizeof p, "%s/shard-00002.stk", a);
    snprintf(q, sizeof q, "%s/moved", tu_tmpdir());
    assert_int_equal(rename(p, q), 0);
    snprintf(tmp, sizeof tmp, "%s/shard-00002.stk.tmp-1-00000000", a);
    tu_write_file(tmp, "x", 1);
    snprintf(n2, sizeof n2, "%u of %u shards", ra.shards - 1, ra.shards);
    const char *missing[] = {"incomplete shard set", "missing shard 2 ", set_id, n2,
                             "shard-00002.stk.tmp-1-00000000"};
    expect_refused(a, missing, 5);
    int notices = 0;
    stk_verify_options vo = {.on_notice = count_notice, .ctx = &notices};
    assert_int_equal(stk_verify(a, &vo, NULL), STK_EDATA);
    assert_int_equal(notices, 1);
    assert_int_equal(rename(q, p), 0);
    /* Complete again: the temporary is ignored (and reported by verify). */
    assert_int_equal(stk_dataset_open(a, NULL, &ds), 0);
    stk_dataset_close(ds);
    notices = 0;
    assert_int_equal(stk_verify(a, &vo, NULL), 0);
    assert_int_equal(notices, 1);
    unlink(tmp);

    /* Extra: a copy of shard 1 under another name. */
    snprintf(p, sizeof p, "%s/shard-00001.stk", a);
    snprintf(q, sizeof q, "%s/shard-00001-copy.stk", a);
    copy_file(p, q);
    const char *extra[] = {"repeats shard 1/", "shard-00001-copy.stk", "shard-00001.stk",
                           "extra copy"};
    expect_refused(a, extra, 4);
    unlink(q);

    /* Renamed: shard 1 now sorts last. */
    snprintf(q, sizeof q, "%s/shard-00099.stk", a);
    assert_int_equal(rename(p, q), 0);
    const char *renamed[] = {"shard-00099.stk: is shard 1/", "renamed"};
    expect_refused(a, renamed, 2);
    assert_int_equal(rename(q, p), 0);

    /* Foreign: shard 1 of another pack (same schema, same count). */
    snprintf(q, sizeof q, "%s/keep", tu_tmpdir());
    copy_file(p, q);
    char bp[800];
    snprintf(bp, sizeof bp, "%s/shard-00001.stk", b);
    copy_file(bp, p);
    const char *foreign[] = {"shard-00001.stk: belongs to another shard set", "foreign"};
    expect_refused(a, foreign, 2);
    copy_file(q, p);

    /* Mixed: a shard of the same schema without set keys. */
    snprintf(q, sizeof q, "%s/shard-00000-legacy.stk", a);
    stk_field_def fields[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {32, 32, 3}},
        {.name = "label", .type = STK_FIELD_INT64},
        {.name = "source_index", .type = STK_FIELD_INT64},
    };
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(q, fields, 3, NULL, 0, &w), 0);
    static uint8_t px[12 + 3072];
    stk_wr32(px, 32);
    stk_wr32(px + 4, 32);
    stk_wr32(px + 8, 3);
    int64_t zero = 0;
    stk_value_bytes v[3] = {{px, sizeof px}, {&zero, 8}, {&zero, 8}};
    assert_int_equal(stk_shard_file_add(w, v), 0);
    assert_int_equal(stk_shard_file_finish(w), 0);
    const char *mixed[] = {"shard-00000-legacy.stk: has no shard-set keys", "mixed"};
    expect_refused(a, mixed, 2);
    unlink(q);

    /* One shard of the set alone is an incomplete set too. */
    snprintf(p, sizeof p, "%s/shard-00003.stk", a);
    const char *alone[] = {"incomplete shard set", "1 of"};
    expect_refused(p, alone, 2);

    /* Everything back in place. */
    assert_int_equal(stk_verify(a, NULL, NULL), 0);
}

/* verify names record r of shard s with its global sample index. */
static void test_verify_names_the_global_sample(void **state)
{
    (void)state;
    char src[600], dir[600], p0[800], p1[800];
    snprintf(src, sizeof src, "%s/gs-src", tu_tmpdir());
    snprintf(dir, sizeof dir, "%s/gs", tu_tmpdir());
    make_cifar(src, 5, 20, 3);
    stk_pack_options o = {.shard_bytes = 100 << 10};
    stk_pack_result r;
    assert_int_equal(stk_pack(src, dir, &o, &r), 0);
    assert_true(r.shards >= 2);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dir, NULL, &ds), 0);
    stk_shard_info s0;
    assert_int_equal(stk_dataset_shard_info(ds, 0, &s0), 0);
    stk_dataset_close(ds);
    snprintf(p0, sizeof p0, "%s/shard-00000.stk", dir);
    snprintf(p1, sizeof p1, "%s/shard-00001.stk", dir);
    size_t n;
    uint8_t *orig = tu_read_file(p1, &n);
    uint64_t index_off = stk_rd64(orig + n - 64 + FTR_INDEX_OFFSET);
    uint64_t rec2 = stk_rd64(orig + index_off + 2 * 8);
    orig[rec2 + 100] ^= 0x10;
    tu_write_file(p1, orig, n);
    damage_log log = {0};
    stk_verify_options vo = {.on_damage = log_damage, .ctx = &log};
    assert_int_equal(stk_verify(dir, &vo, NULL), STK_EDATA);
    assert_int_equal(log.count, 1);
    assert_int_equal(log.record, 2);
    assert_string_equal(log.shard, p1);
    char want[200];
    snprintf(want, sizeof want, "shard-00001.stk: record 2 (sample %llu): checksum mismatch",
             (unsigned long long)(s0.records + 2));
    if (!strstr(log.reason, want))
        fail_msg("'%s' is not in: %s", want, log.reason);
    /* With shard 0 unreadable the sample index is unknown, and says so. */
    size_t n0;
    uint8_t *b0 = tu_read_file(p0, &n0);
    tu_write_file(p0, b0, n0 - 1);
    static char all[LOG_FULL_SIZE];
    all[0] = '\0';
    vo = (stk_verify_options){.on_damage = log_full, .ctx = all};
    assert_int_equal(stk_verify(dir, &vo, NULL), STK_EDATA);
    if (!strstr(all, "shard-00001.stk: record 2 (sample unknown: an earlier shard could not be "
                     "opened): checksum mismatch"))
        fail_msg("not named as unknown: %s", all);
    free(b0);
    free(orig);
}

/* verify: source_index must rise from record to record (a sample stored
 * twice is caught, naming the record and both values). */
static void test_verify_checks_source_order(void **state)
{
    (void)state;
    const char *path = tu_path("source-order.stk");
    stk_field_def fields[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {1, 1, 1}},
        {.name = "label", .type = STK_FIELD_INT64},
        {.name = "source_index", .type = STK_FIELD_INT64},
    };
    static const int64_t sources[] = {0, 1, 5, 5, 7, 6, 9};
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, fields, 3, NULL, 0, &w), 0);
    for (int i = 0; i < 7; i++) {
        uint8_t px[13] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, (uint8_t)i};
        int64_t label = i;
        stk_value_bytes v[3] = {{px, 13}, {&label, 8}, {&sources[i], 8}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
    damage_log log = {0};
    stk_verify_options vo = {.on_damage = log_damage, .ctx = &log};
    stk_verify_result res;
    assert_int_equal(stk_verify(path, &vo, &res), STK_EDATA);
    assert_int_equal(res.bad_records, 2); /* records 3 and 5 */
    assert_int_equal(log.record, 5);
    assert_non_null(strstr(log.reason, "record 5 (sample 5): source_index 6 is not after 7"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_field),
        cmocka_unit_test(test_multi_shard_dir_and_glob),
        cmocka_unit_test(test_every_single_byte_flip_in_records_is_caught),
        cmocka_unit_test(test_structure_damage_names_the_shard),
        cmocka_unit_test(test_shard_open_refusals_keep_their_words),
        cmocka_unit_test(test_loader_on_damaged_record),
        cmocka_unit_test(test_writer_rejects_bad_input),
        cmocka_unit_test(test_pack_cifar_round_trip_and_determinism),
        cmocka_unit_test(test_shard_set_problems_are_named),
        cmocka_unit_test(test_verify_names_the_global_sample),
        cmocka_unit_test(test_verify_checks_source_order),
        cmocka_unit_test(test_pack_relative_source_resolves_from_any_directory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
