/*
 * test_access_hint.c — the reader interface's access hint (dataset.h,
 * vtable.access_hint): who gives it, and what the .stk reader does with it.
 *
 * 1. A reader written here records the hints it gets: a loader without
 *    shuffle says SEQUENTIAL, a shuffled one RANDOM, a reader without the
 *    hook is left alone, and the hint never changes a batch.
 * 2. The .stk reader over a mapping without huge pages turns the hint into
 *    madvise advice on the record bytes, which the kernel shows in
 *    /proc/self/smaps as the VMA flags "sr" (sequential) and "rr" (random).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/dataset.h"
#include "stoker/stoker.h"
#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* 1. A recording reader                                                     */
/* ------------------------------------------------------------------------ */

enum { N = 40, SIDE = 4 };

typedef struct recorder {
    uint8_t px[N][SIDE * SIDE];
    int hints, last; /* hints received, the last one */
} recorder;

static int rec_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    (void)scratch;
    recorder *r = ds->impl;
    memset(out, 0, sizeof *out);
    out->image = (stk_image_view){r->px[index], SIDE, SIDE, 1, SIDE, 1, 1};
    out->label = (int64_t)(index % 3);
    return 0;
}

static void rec_close(stk_dataset *ds) { free(ds->impl); }

static void rec_hint(const stk_dataset *ds, stk_access how)
{
    recorder *r = ds->impl;
    r->hints++;
    r->last = (int)how;
}

static const stk_dataset_vtable rec_vt = {
    .format = "recorder", .read = rec_read, .close = rec_close, .access_hint = rec_hint};
static const stk_dataset_vtable plain_vt = {.format = "plain", .read = rec_read, .close = rec_close};

static stk_dataset *recorder_open(const stk_dataset_vtable *vt)
{
    stk_dataset *ds = stk_dataset_alloc(vt, "recorder");
    assert_non_null(ds);
    recorder *r = calloc(1, sizeof *r);
    assert_non_null(r);
    tu_fill_random(r->px, sizeof r->px, 3);
    ds->impl = r;
    ds->count = N;
    ds->height = ds->width = SIDE;
    ds->channels = 1;
    return ds;
}

/* Digest of one epoch: the sum of (position + 1) * byte over every batch. */
static uint64_t epoch_sum(stk_dataset *ds, int no_shuffle)
{
    stk_loader_options o = {.batch_size = 8, .threads = 2, .no_shuffle = no_shuffle, .seed = 5};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "flip 0.5 | to u8 hwc", &o, &l), 0);
    uint64_t sum = 0, k = 0;
    stk_batch b;
    while (stk_loader_next(l, &b) == 1) {
        const uint8_t *p = b.data;
        for (size_t i = 0; i < b.size * b.sample_bytes; i++)
            sum += (++k) * p[i];
        stk_loader_release(l, &b);
    }
    stk_loader_destroy(l);
    return sum;
}

static void test_loader_gives_the_hint(void **state)
{
    (void)state;
    stk_dataset *ds = recorder_open(&rec_vt);
    recorder *r = ds->impl;
    uint64_t seq = epoch_sum(ds, 1);
    assert_int_equal(r->hints, 1);
    assert_int_equal(r->last, STK_ACCESS_SEQUENTIAL);
    uint64_t shuffled = epoch_sum(ds, 0);
    assert_int_equal(r->hints, 2);
    assert_int_equal(r->last, STK_ACCESS_RANDOM);
    assert_true(seq != shuffled); /* the orders differ... */

    /* ...and the hint changes nothing a reader without it delivers */
    stk_dataset *plain = recorder_open(&plain_vt);
    assert_int_equal(epoch_sum(plain, 1), seq);
    assert_int_equal(epoch_sum(plain, 0), shuffled);
    stk_dataset_close(plain);
    stk_dataset_close(ds);
}

/* ------------------------------------------------------------------------ */
/* 2. The .stk reader's advice, seen in /proc/self/smaps                     */
/* ------------------------------------------------------------------------ */

/* Over the mappings of files whose path contains `name`: how many carry the
 * VmFlags "sr" and "rr". */
static void advice_flags(const char *name, int *sr, int *rr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[4096];
    int mine = 0;
    *sr = *rr = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ' ')) {
            mine = strstr(line, name) != NULL;
            continue;
        }
        if (mine && strncmp(line, "VmFlags:", 8) == 0) {
            *sr += strstr(line, " sr") != NULL;
            *rr += strstr(line, " rr") != NULL;
        }
    }
    fclose(f);
}

static void test_stk_reader_advises_the_kernel(void **state)
{
    (void)state;
    char src[700], dest[700], uri[800];
    snprintf(src, sizeof src, "%s/hint-cifar", tu_tmpdir());
    snprintf(dest, sizeof dest, "%s/hint-shards", tu_tmpdir());
    mkdir(src, 0755);
    const int n = 1200; /* 3.7 MB of records: many pages */
    uint8_t *rec = malloc((size_t)n * 3073);
    assert_non_null(rec);
    tu_fill_random(rec, (size_t)n * 3073, 11);
    for (int i = 0; i < n; i++)
        rec[(size_t)i * 3073] %= 10;
    char p[800];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", src);
    tu_write_file(p, rec, (size_t)n * 3073);
    free(rec);
    stk_pack_options po = {.jobs = 1, .mode = STK_PACK_RAW};
    assert_int_equal(stk_pack(p, dest, &po, NULL), 0);

    snprintf(uri, sizeof uri, "stk:%s?io=mmap&hugepages=off", dest);
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    int sr, rr;
    advice_flags("hint-shards/shard-", &sr, &rr);
    assert_true(rr >= 1); /* records random, as opened */

    stk_loader_options o = {.batch_size = 64, .threads = 1, .no_shuffle = 1};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &o, &l), 0);
    advice_flags("hint-shards/shard-", &sr, &rr);
    assert_true(sr >= 1);
    assert_int_equal(rr, 0);
    stk_loader_destroy(l);

    o.no_shuffle = 0;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &o, &l), 0);
    advice_flags("hint-shards/shard-", &sr, &rr);
    assert_true(rr >= 1); /* back to random */
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_gives_the_hint),
        cmocka_unit_test(test_stk_reader_advises_the_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
