/*
 * test_shard_faults.c — .stk shards that change under an open dataset, and
 * the shard URI's query:
 *
 *  - a mapped (raw, default I/O) shard truncated with ftruncate after open:
 *    reads fail with STK_EDATA naming the shard and record, no SIGBUS; a
 *    loader under the raise policy stops with that error, under the skip
 *    policy it delivers only intact rows (pixels and labels checked against
 *    the values written) and counts the rest as skipped; stk_pack reading a
 *    source shard cut between blocks packs the intact records and leaves
 *    the rest out with the reason (never zeros);
 *  - the same under ?io=pread: the message is said once, not formatted
 *    into itself ("record R: ...: record R:" was the old text);
 *  - the query: a repeated key is refused, unknown keys and values are named,
 *    and 8 threads opening shard URIs with queries at once all get their own
 *    answer (the parser once used strtok).
 *
 * Each truncation happens at a fixed point (after open, or after the first
 * batch), so what is lost is known; what the loader had already prefetched
 * before it is intact and may be delivered, which the checks allow.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "format/dataset.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define NREC 256
#define SIDE 64
#define PIXELS (SIDE * SIDE)

static uint8_t pixel_of(uint64_t i) { return (uint8_t)(i % 251 + 1); } /* never 0 */

/* NREC raw 64x64x1 records (4 KiB of pixels each, so a record spans
 * pages), pixels all pixel_of(i), label i. */
static void write_raw_shard(const char *path)
{
    static const stk_field_def fields[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {SIDE, SIDE, 1}},
        {.name = "label", .type = STK_FIELD_INT64},
    };
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, fields, 2, NULL, 0, &w), 0);
    for (uint64_t i = 0; i < NREC; i++) {
        static uint8_t payload[12 + PIXELS];
        stk_wr32(payload, SIDE);
        stk_wr32(payload + 4, SIDE);
        stk_wr32(payload + 8, 1);
        memset(payload + 12, pixel_of(i), PIXELS);
        int64_t label = (int64_t)i;
        stk_value_bytes v[2] = {{payload, sizeof payload}, {&label, 8}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static void truncate_to(const char *path, off_t size)
{
    assert_int_equal(truncate(path, size), 0);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void check_pixels(const uint8_t *px, uint64_t index)
{
    for (size_t k = 0; k < PIXELS; k++)
        if (px[k] != pixel_of(index))
            fail_msg("sample %llu: pixel %zu is %u, written %u", (unsigned long long)index, k,
                     px[k], pixel_of(index));
}

/* ------------------------------------------------------------------------ */
/* Truncation under a mapped shard                                          */
/* ------------------------------------------------------------------------ */

static void test_truncated_mapped_reads_fail(void **state)
{
    (void)state;
    const char *path = tu_path("trunc-read.stk");
    write_raw_shard(path);
    off_t size = file_size(path);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0); /* raw: mmap by default */
    uint8_t px[PIXELS];
    int64_t label = -1;
    assert_int_equal(stk_dataset_read(ds, 3, px, sizeof px, &label), PIXELS);
    check_pixels(px, 3);
    assert_int_equal(label, 3);

    truncate_to(path, size / 2);
    /* A record in the lost half, and one in the kept half whose index entry
     * (at the end of the file) was lost: both fail, naming shard and record. */
    assert_int_equal(stk_dataset_read(ds, 200, px, sizeof px, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "trunc-read.stk: record 200 (sample 200): the shard was "
                                         "truncated while open"));
    assert_non_null(strstr(stk_errmsg(), "the record's bytes were lost"));
    assert_int_equal(stk_dataset_read(ds, 3, px, sizeof px, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "trunc-read.stk: record 3 (sample 3): the shard was "
                                         "truncated while open"));
    /* Field and label calls read the same mapping. */
    void *data = NULL;
    size_t n = 0;
    assert_int_equal(stk_dataset_read_field(ds, 100, "image", &data, &n, NULL), STK_EDATA);
    assert_null(data);
    assert_non_null(strstr(stk_errmsg(), "record 100 (sample 100)"));
    assert_int_equal(stk_dataset_label(ds, 7, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "record 7 (sample 7): the shard was truncated"));
    /* stk_dataset_read_alloc too (it now also checks after its copy, for a
     * cut that lands between the read and the copy) */
    uint8_t *alloc = (uint8_t *)1;
    uint32_t shape[3] = {0};
    assert_int_equal(stk_dataset_read_alloc(ds, 5, &alloc, shape, &label), STK_EDATA);
    assert_null(alloc);
    assert_non_null(strstr(stk_errmsg(), "record 5 (sample 5): the shard was truncated"));
    stk_dataset_close(ds);
}

/* The race the after-use check exists for: a zero-copy view taken before
 * the cut and used after it. Its pixels read as zeros (no SIGBUS), and the
 * check that every user of a view makes afterwards fails the sample. */
static void test_view_used_after_truncation(void **state)
{
    (void)state;
    const char *path = tu_path("trunc-view.stk");
    write_raw_shard(path);
    off_t size = file_size(path);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    stk_sample s;
    stk_scratch scratch = {0};
    assert_int_equal(ds->vt->read(ds, 250, &s, &scratch), 0);
    assert_non_null(s.image.pixels);
    assert_int_equal(s.image.pixels[0], pixel_of(250));
    assert_int_equal(stk_dataset_check(ds, 250), 0);
    truncate_to(path, size / 2);
    unsigned sum = 0;
    for (size_t k = 0; k < PIXELS; k++)
        sum += s.image.pixels[k]; /* the lost page, now a zero page */
    assert_int_equal(sum, 0);
    assert_int_equal(stk_dataset_check(ds, 250), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "trunc-view.stk: record 250 (sample 250): the shard was "
                                         "truncated while open (only its first "));
    stk_scratch_free(&scratch);
    stk_dataset_close(ds);
}

/* A cut of 100 bytes: inside the file's last page, so no access faults
 * (the kernel zero-fills the page's tail). The footer and the label entries
 * of the last 5 records are gone (the label column ends 64 bytes before the
 * end: 256 records, index 7168 bytes); those reads fail, the others are
 * exact. Without asking the file its size, labels 251..255 would read 0. */
static void test_cut_inside_last_page(void **state)
{
    (void)state;
    const char *path = tu_path("trunc-tail.stk");
    write_raw_shard(path);
    off_t size = file_size(path);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    truncate_to(path, size - 100);
    uint8_t px[PIXELS];
    for (uint64_t i = 0; i < NREC; i++) {
        int64_t label = -1;
        int64_t rc = stk_dataset_read(ds, i, px, sizeof px, &label);
        if (i <= 250) {
            assert_int_equal(rc, PIXELS);
            assert_int_equal(label, (int64_t)i);
            check_pixels(px, i);
        } else {
            assert_int_equal(rc, STK_EDATA);
            char want[96];
            snprintf(want, sizeof want, "record %llu (sample %llu): the shard was truncated",
                     (unsigned long long)i, (unsigned long long)i);
            assert_non_null(strstr(stk_errmsg(), want));
        }
    }
    stk_dataset_close(ds);
}

/* A cut inside a record's last page: reading that record faults nowhere
 * (the kernel zero-fills the page past the new end), so only the probe of
 * the file's last bytes made by the check can tell its tail was lost. */
static void test_cut_inside_a_record(void **state)
{
    (void)state;
    const char *path = tu_path("trunc-mid.stk");
    write_raw_shard(path);
    size_t n;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t file[2 << 20];
    n = fread(file, 1, sizeof file, f);
    fclose(f);
    uint64_t index_off = stk_rd64(file + n - STK_FOOTER_SIZE + FTR_INDEX_OFFSET);
    uint64_t off = stk_rd64(file + index_off + 100 * 8), len = 12 + PIXELS;
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    stk_sample s;
    stk_scratch scratch = {0};
    assert_int_equal(ds->vt->read(ds, 100, &s, &scratch), 0);
    truncate_to(path, (off_t)(off + len - 100));
    unsigned zeros = 0;
    for (size_t k = 0; k < PIXELS; k++)
        zeros += s.image.pixels[k] == 0; /* the last 100 bytes, zero-filled */
    assert_int_equal(zeros, 100);
    assert_int_equal(stk_dataset_check(ds, 100), STK_EDATA);
    char want[160];
    snprintf(want, sizeof want, "trunc-mid.stk: record 100 (sample 100): the shard was truncated "
             "while open (only its first %llu of ", (unsigned long long)(off + len - 100));
    assert_non_null(strstr(stk_errmsg(), want));
    assert_int_equal(stk_dataset_check(ds, 99), STK_EDATA); /* index entries lost */
    stk_scratch_free(&scratch);
    stk_dataset_close(ds);
}

static void run_loader_over_truncation(const char *name, stk_error_policy policy)
{
    const char *path = tu_path(name);
    write_raw_shard(path);
    off_t size = file_size(path);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    stk_loader_options o = {.batch_size = 4, .threads = 2, .prefetch = 2, .seed = 5,
                            .on_error = policy};
    stk_loader *l;
    assert_int_equal(stk_loader_create(ds, "to u8", &o, &l), 0);
    stk_batch b;
    uint8_t seen[NREC] = {0};
    uint64_t rows = 0, skipped = 0;
    int rc, batches = 0;
    while ((rc = stk_loader_next(l, &b)) == 1) {
        for (uint32_t i = 0; i < b.size; i++) {
            uint64_t idx = b.indices[i];
            assert_true(idx < NREC);
            assert_int_equal(seen[idx], 0);
            seen[idx] = 1;
            check_pixels((const uint8_t *)b.data + (size_t)i * PIXELS, idx);
            assert_int_equal(b.labels[i], (int64_t)idx);
        }
        rows += b.size;
        skipped += b.skipped;
        stk_loader_release(l, &b);
        if (++batches == 1)
            truncate_to(path, size / 3); /* while the workers run ahead */
    }
    if (policy == STK_ON_ERROR_RAISE) {
        assert_int_equal(rc, STK_EDATA);
        assert_non_null(strstr(stk_errmsg(), name));
        assert_non_null(strstr(stk_errmsg(), "the shard was truncated while open"));
        assert_non_null(strstr(stk_errmsg(), "record "));
        assert_true(rows < NREC);
    } else {
        /* Every sample either delivered intact or counted as skipped; the
         * pool is far smaller than the epoch, so most were lost. */
        assert_int_equal(rc, 0);
        assert_int_equal(rows + skipped, NREC);
        assert_true(skipped > NREC / 2);
    }
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

static void test_truncated_under_loader_raise(void **state)
{
    (void)state;
    run_loader_over_truncation("trunc-raise.stk", STK_ON_ERROR_RAISE);
}

static void test_truncated_under_loader_skip(void **state)
{
    (void)state;
    run_loader_over_truncation("trunc-skip.stk", STK_ON_ERROR_SKIP);
}

/* pack reading a mapped source shard that is truncated between blocks: the
 * records packed before are intact, the later ones are left out with the
 * reason (never packed as zeros). */
typedef struct pack_ctx {
    const char *src;
    off_t cut;
    uint64_t skips, truncated_reasons, progress_calls;
} pack_ctx;

static void on_pack_progress(void *ctx, uint64_t done, uint64_t total)
{
    pack_ctx *c = ctx;
    (void)total;
    if (c->progress_calls++ == 0 && done < NREC)
        truncate_to(c->src, c->cut);
}

static void on_pack_skip(void *ctx, uint64_t index, const char *reason)
{
    pack_ctx *c = ctx;
    (void)index;
    c->skips++;
    c->truncated_reasons += strstr(reason, "pack-src.stk") &&
                            strstr(reason, "the shard was truncated while open") != NULL;
}

static void test_truncated_pack_source(void **state)
{
    (void)state;
    const char *src = tu_path("pack-src.stk");
    write_raw_shard(src);
    const char *dest = tu_path("pack-out");
    pack_ctx c = {.src = src, .cut = file_size(src) / 3};
    stk_pack_options o = {.jobs = 1, .on_progress = on_pack_progress, .on_skip = on_pack_skip,
                          .ctx = &c};
    stk_pack_result res;
    assert_int_equal(stk_pack(src, dest, &o, &res), 0);
    assert_true(res.records > 0 && res.records < NREC);
    assert_int_equal(res.records + res.skipped, NREC);
    assert_int_equal(c.skips, res.skipped);
    assert_int_equal(c.truncated_reasons, res.skipped);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(dest, NULL, &ds), 0);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, res.records);
    for (uint64_t i = 0; i < info.count; i++) {
        uint8_t px[PIXELS];
        int64_t label = -1;
        assert_int_equal(stk_dataset_read(ds, i, px, sizeof px, &label), PIXELS);
        assert_int_equal(label, (int64_t)i); /* the first block, in order */
        check_pixels(px, i);
    }
    stk_dataset_close(ds);
}

/* pread: the index was read at open, so records before the cut still read;
 * the ones after it fail with one clean message. */
static void test_truncated_pread_message(void **state)
{
    (void)state;
    const char *path = tu_path("trunc-pread.stk");
    write_raw_shard(path);
    off_t size = file_size(path);
    char uri[600];
    snprintf(uri, sizeof uri, "stk:%s?io=pread", path);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    truncate_to(path, size / 2);
    uint8_t px[PIXELS];
    int64_t label = -1;
    assert_int_equal(stk_dataset_read(ds, 10, px, sizeof px, &label), PIXELS);
    check_pixels(px, 10);
    assert_int_equal(label, 10);
    assert_int_equal(stk_dataset_read(ds, 200, px, sizeof px, &label), STK_EDATA);
    const char *m = stk_errmsg();
    assert_non_null(strstr(m, "trunc-pread.stk: record 200 (sample 200): the file ends before "
                              "the record's 4108 bytes at offset "));
    assert_non_null(strstr(m, "(truncated while open?)"));
    assert_int_equal(count_of(m, "record 200"), 1);
    assert_int_equal(count_of(m, "trunc-pread.stk"), 1);
    stk_dataset_close(ds);
}

/* stk_fail given its own message as an argument (the shape of the old
 * record_get bug): the text is formatted aside first, so it reads whole. */
static void test_fail_with_own_message(void **state)
{
    (void)state;
    stk_fail(STK_EIO, "shard.stk: unexpected end of file");
    assert_int_equal(stk_fail(STK_EDATA, "shard.stk: record %d: %s", 7, stk_errmsg()), STK_EDATA);
    assert_string_equal(stk_errmsg(), "shard.stk: record 7: shard.stk: unexpected end of file");
}

/* ------------------------------------------------------------------------ */
/* Query                                                                     */
/* ------------------------------------------------------------------------ */

static int open_uri(const char *fmt, const char *path, stk_dataset **ds)
{
    char uri[700];
    snprintf(uri, sizeof uri, fmt, path);
    return stk_dataset_open(uri, NULL, ds);
}

static void test_query_errors(void **state)
{
    (void)state;
    const char *path = tu_path("query.stk");
    write_raw_shard(path);
    stk_dataset *ds = NULL;
    assert_int_equal(open_uri("stk:%s?io=mmap&io=pread", path, &ds), STK_EINVAL);
    assert_null(ds);
    assert_non_null(strstr(stk_errmsg(), "stk: query key 'io' given twice in URI 'stk:"));
    assert_int_equal(open_uri("%s?verify=off&verify=off", path, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "query key 'verify' given twice"));
    assert_int_equal(open_uri("stk:%s?io=disk", path, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "unknown value 'disk' for query key 'io'"));
    assert_non_null(strstr(stk_errmsg(), "(expected auto, mmap or pread)"));
    assert_int_equal(open_uri("stk:%s?cache=on", path, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "unknown query key 'cache'"));
    assert_non_null(strstr(stk_errmsg(), "(known keys: verify, io and hugepages)"));
    assert_int_equal(open_uri("stk:%s?io", path, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "query item 'io' has no '=value'"));
    assert_int_equal(open_uri("stk:%s?io=pread&verify=always&hugepages=off", path, &ds), 0);
    stk_dataset_close(ds);
}

typedef struct opener {
    const char *path;
    int id;
    int failures;
    char first_failure[1100];
} opener;

static void opener_fail(opener *o, const char *what)
{
    if (o->failures++ == 0)
        snprintf(o->first_failure, sizeof o->first_failure, "thread %d: %s: %s", o->id, what,
                 stk_errmsg());
}

static void *opener_main(void *arg)
{
    opener *o = arg;
    static const char *const good[] = {
        "stk:%s?io=pread&verify=always&hugepages=off",
        "stk:%s?verify=off&io=mmap",
        "%s?hugepages=on&verify=first&io=auto",
        "stk:%s?io=mmap&hugepages=auto&verify=always",
    };
    for (int it = 0; it < 40; it++) {
        stk_dataset *ds = NULL;
        uint8_t px[PIXELS];
        int64_t label = -1;
        uint64_t idx = (uint64_t)(o->id * 31 + it) % NREC;
        if (open_uri(good[(o->id + it) % 4], o->path, &ds) != 0) {
            opener_fail(o, "open");
            continue;
        }
        if (stk_dataset_read(ds, idx, px, sizeof px, &label) != PIXELS ||
            label != (int64_t)idx || px[0] != pixel_of(idx) || px[PIXELS - 1] != pixel_of(idx))
            opener_fail(o, "read");
        stk_dataset_close(ds);
        /* A bad URI, its own key in each thread: the message must be ours. */
        char key[32], want[64];
        snprintf(key, sizeof key, "k%dx%d", o->id, it);
        char fmt[96];
        snprintf(fmt, sizeof fmt, "stk:%%s?io=pread&%s=1", key);
        snprintf(want, sizeof want, "unknown query key '%s'", key);
        if (open_uri(fmt, o->path, &ds) != STK_EINVAL || !strstr(stk_errmsg(), want))
            opener_fail(o, "bad key");
        if (open_uri("stk:%s?io=pread&verify=off&io=mmap", o->path, &ds) != STK_EINVAL ||
            !strstr(stk_errmsg(), "query key 'io' given twice"))
            opener_fail(o, "repeated key");
    }
    return NULL;
}

static void test_eight_threads_open_at_once(void **state)
{
    (void)state;
    const char *path = tu_path("threads.stk");
    write_raw_shard(path);
    pthread_t t[8];
    opener o[8];
    for (int i = 0; i < 8; i++) {
        memset(&o[i], 0, sizeof o[i]);
        o[i].path = path;
        o[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, opener_main, &o[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 8; i++)
        if (o[i].failures)
            fail_msg("%d failures; first: %s", o[i].failures, o[i].first_failure);
}

/* An optional argument is a cmocka test-name filter ("*pread*"). */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_mapped_reads_fail),
        cmocka_unit_test(test_view_used_after_truncation),
        cmocka_unit_test(test_cut_inside_last_page),
        cmocka_unit_test(test_cut_inside_a_record),
        cmocka_unit_test(test_truncated_under_loader_raise),
        cmocka_unit_test(test_truncated_under_loader_skip),
        cmocka_unit_test(test_truncated_pack_source),
        cmocka_unit_test(test_truncated_pread_message),
        cmocka_unit_test(test_fail_with_own_message),
        cmocka_unit_test(test_query_errors),
        cmocka_unit_test(test_eight_threads_open_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
