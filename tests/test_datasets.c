/*
 * test_datasets.c — the dataset readers (src/format/): CIFAR-10/100 binary,
 * IDX plain and gzip, the in-memory dataset, URI parsing and detection, and
 * hostile files.
 *
 * Every dataset here is written by the test itself with known content: the
 * pixel (y, x, c) of sample g is cval(g, y, x, c) (CIFAR) or ival(n, y, x, c)
 * (IDX), formulas this file owns, and the expected HWC position of each
 * value is computed here, independently of the reader's strides. Every
 * sample checked is checked at every pixel. A few literal values are
 * asserted too, worked out by hand from the formulas.
 *
 * Hostile inputs assert the exact error code and that stk_errmsg() names
 * the file (and the record / sample where one is at fault).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "format/dataset.h"
#include "stoker/stoker.h"
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* Under AddressSanitizer, any single allocation over 512 MiB aborts the
 * test: the hostile headers below claim up to exabytes, and a reader that
 * believed them before seeing the data would be caught here. (Unused in
 * other builds.) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=512"; }

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    assert_non_null(p);
    return p;
}

/* A formatted string the caller frees. */
static char *fmt(const char *f, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return xstrdup(buf);
}

static char *mkdir_tmp(const char *name)
{
    char *p = xstrdup(tu_path(name));
    assert_int_equal(mkdir(p, 0700), 0);
    return p;
}

static void *read_whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    long len;
    void *p;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    len = ftell(f);
    assert_true(len >= 0);
    rewind(f);
    p = malloc((size_t)len + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Opening `uri` must fail with `code`, *out left NULL, and the message must
 * contain each of the non-NULL needles. */
static void expect_open_fail(const char *uri, const stk_dataset_options *opts, int code,
                             const char *n1, const char *n2, const char *n3)
{
    stk_dataset *ds = (stk_dataset *)(uintptr_t)1;
    int rc = stk_dataset_open(uri, opts, &ds);
    const char *needles[3] = {n1, n2, n3};
    if (rc != code)
        print_error("open(%s): rc %d (%s), expected %d; message: %s\n", uri, rc,
                    stk_strerror(rc), code, stk_errmsg());
    assert_int_equal(rc, code);
    assert_null(ds);
    if (getenv("STK_TEST_VERBOSE")) /* to read the messages themselves */
        fprintf(stderr, "  %s -> %s\n", stk_strerror(rc), stk_errmsg());
    for (int i = 0; i < 3; i++) {
        if (needles[i] && !strstr(stk_errmsg(), needles[i]))
            print_error("open(%s): message '%s' lacks '%s'\n", uri, stk_errmsg(), needles[i]);
        if (needles[i])
            assert_non_null(strstr(stk_errmsg(), needles[i]));
    }
}

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != 0)
        print_error("open(%s): rc %d: %s\n", uri, rc, stk_errmsg());
    assert_int_equal(rc, 0);
    assert_non_null(ds);
    return ds;
}

static void check_info(const stk_dataset *ds, const char *uri, const char *format,
                       uint64_t count, uint32_t h, uint32_t w, uint32_t c, uint32_t classes)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.uri, uri);
    assert_string_equal(info.format, format);
    assert_int_equal(info.count, count);
    assert_int_equal(info.height, h);
    assert_int_equal(info.width, w);
    assert_int_equal(info.channels, c);
    assert_int_equal(info.num_classes, classes);
}

/* ------------------------------------------------------------------------ */
/* CIFAR content                                                            */
/* ------------------------------------------------------------------------ */

#define CREC10 3073
#define CREC100 3074

/* Pixel value of sample g (a "global" id the test chooses per record). */
static uint8_t cval(uint64_t g, unsigned y, unsigned x, unsigned c)
{
    return (uint8_t)(g * 31 + y * 7 + x * 3 + c * 101);
}
static uint8_t c10_label(uint64_t g) { return (uint8_t)(g % 10); }
static uint8_t c100_fine(uint64_t g) { return (uint8_t)((g * 7 + 3) % 100); }
static uint8_t c100_coarse(uint64_t g) { return (uint8_t)((g * 3 + 1) % 20); }

/* One record of sample id g, in the file layout: labels, then R, G, B
 * planes, each row-major 32x32. */
static void cifar_record(uint8_t *rec, uint64_t g, int cifar100)
{
    size_t off = 0;
    if (cifar100) {
        rec[off++] = c100_coarse(g);
        rec[off++] = c100_fine(g);
    } else {
        rec[off++] = c10_label(g);
    }
    for (unsigned c = 0; c < 3; c++)
        for (unsigned y = 0; y < 32; y++)
            for (unsigned x = 0; x < 32; x++)
                rec[off + c * 1024 + y * 32 + x] = cval(g, y, x, c);
}

/* A file of n records with sample ids first, first+1, ... */
static void write_cifar(const char *path, uint64_t first, size_t n, int cifar100)
{
    size_t rs = cifar100 ? CREC100 : CREC10;
    uint8_t *buf = malloc(n * rs + 1);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        cifar_record(buf + i * rs, first + i, cifar100);
    tu_write_file(path, buf, n * rs);
    free(buf);
}

/* Read sample `index` through the public API and compare every HWC byte
 * with cval(g, ...) and the label with `label`. */
static void check_cifar_sample(const stk_dataset *ds, uint64_t index, uint64_t g, int64_t label)
{
    uint8_t buf[3072 + 16];
    int64_t got_label = -1;
    memset(buf, 0xEE, sizeof buf);
    assert_int_equal(stk_dataset_read(ds, index, buf, sizeof buf, &got_label), 3072);
    assert_int_equal(got_label, label);
    for (unsigned y = 0; y < 32; y++)
        for (unsigned x = 0; x < 32; x++)
            for (unsigned c = 0; c < 3; c++)
                if (buf[(y * 32 + x) * 3 + c] != cval(g, y, x, c)) {
                    print_error("sample %llu (id %llu) pixel y%u x%u c%u: %u != %u\n",
                                (unsigned long long)index, (unsigned long long)g, y, x, c,
                                buf[(y * 32 + x) * 3 + c], cval(g, y, x, c));
                    fail();
                }
    for (size_t i = 3072; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xEE); /* nothing written past the sample */
}

/* CIFAR-10 directory: data_batch_k.bin holds ids 3(k-1) .. 3(k-1)+2;
 * test_batch.bin holds ids 1000, 1001. */
static char *make_cifar10_dir(const char *name)
{
    char *dir = mkdir_tmp(name);
    for (int k = 1; k <= 5; k++) {
        char *p = fmt("%s/data_batch_%d.bin", dir, k);
        write_cifar(p, (uint64_t)(k - 1) * 3, 3, 0);
        free(p);
    }
    char *p = fmt("%s/test_batch.bin", dir);
    write_cifar(p, 1000, 2, 0);
    free(p);
    return dir;
}

/* CIFAR-100 directory: train.bin ids 0..3, test.bin ids 500, 501. */
static char *make_cifar100_dir(const char *name)
{
    char *dir = mkdir_tmp(name);
    char *p = fmt("%s/train.bin", dir);
    write_cifar(p, 0, 4, 1);
    free(p);
    p = fmt("%s/test.bin", dir);
    write_cifar(p, 500, 2, 1);
    free(p);
    return dir;
}

/* ------------------------------------------------------------------------ */
/* CIFAR tests                                                              */
/* ------------------------------------------------------------------------ */

static void test_cifar_hand_values(void **state)
{
    (void)state;
    /* The reference formula, worked by hand: id 3, y 1, x 2, green:
     * 3*31 + 7 + 6 + 101 = 207; id 1001, y 31, x 31, blue:
     * 1001*31 + 217 + 93 + 202 = 31543 = 123 * 256 + 55 -> 55. */
    assert_int_equal(cval(3, 1, 2, 1), 207);
    assert_int_equal(cval(1001, 31, 31, 2), 55);

    char *dir = make_cifar10_dir("c10_hand");
    char *uri = fmt("cifar10:%s", dir);
    stk_dataset *ds = open_ok(uri);
    uint8_t buf[3072];
    int64_t label;
    /* Sample 3 is data_batch_2.bin record 0 (id 3): label 3. */
    assert_int_equal(stk_dataset_read(ds, 3, buf, sizeof buf, &label), 3072);
    assert_int_equal(label, 3);
    assert_int_equal(buf[(1 * 32 + 2) * 3 + 1], 207);
    stk_dataset_close(ds);
    free(uri);

    uri = fmt("cifar10:%s?split=test", dir);
    ds = open_ok(uri);
    assert_int_equal(stk_dataset_read(ds, 1, buf, sizeof buf, &label), 3072);
    assert_int_equal(label, 1);
    assert_int_equal(buf[(31 * 32 + 31) * 3 + 2], 55);
    stk_dataset_close(ds);
    free(uri);
    free(dir);
}

static void test_cifar10_dir(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("c10");
    const char *forms[] = {"cifar10:%s", "cifar10:%s?split=train", "%s", "%s?split=train"};
    for (size_t f = 0; f < 4; f++) {
        char *uri = fmt(forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        check_info(ds, uri, "cifar10", 15, 32, 32, 3, 10);
        for (uint64_t i = 0; i < 15; i++)
            check_cifar_sample(ds, i, i, c10_label(i));
        stk_dataset_close(ds);
        free(uri);
    }
    const char *tforms[] = {"cifar10:%s?split=test", "%s?split=test"};
    for (size_t f = 0; f < 2; f++) {
        char *uri = fmt(tforms[f], dir);
        stk_dataset *ds = open_ok(uri);
        check_info(ds, uri, "cifar10", 2, 32, 32, 3, 10);
        check_cifar_sample(ds, 0, 1000, c10_label(1000));
        check_cifar_sample(ds, 1, 1001, c10_label(1001));
        stk_dataset_close(ds);
        free(uri);
    }
    free(dir);
}

static void test_cifar10_files(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("c10_files");

    /* A comma list, in the order given: batch 4 then batch 1 then test. */
    char *uri = fmt("cifar10:%s/data_batch_4.bin,%s/data_batch_1.bin,%s/test_batch.bin", dir,
                    dir, dir);
    stk_dataset *ds = open_ok(uri);
    check_info(ds, uri, "cifar10", 8, 32, 32, 3, 10);
    const uint64_t ids[8] = {9, 10, 11, 0, 1, 2, 1000, 1001};
    for (uint64_t i = 0; i < 8; i++)
        check_cifar_sample(ds, i, ids[i], c10_label(ids[i]));
    stk_dataset_close(ds);
    free(uri);

    /* One file, by prefix and by detection (its name). */
    uri = fmt("cifar10:%s/data_batch_5.bin", dir);
    ds = open_ok(uri);
    check_info(ds, uri, "cifar10", 3, 32, 32, 3, 10);
    for (uint64_t i = 0; i < 3; i++)
        check_cifar_sample(ds, i, 12 + i, c10_label(12 + i));
    stk_dataset_close(ds);
    free(uri);
    uri = fmt("%s/test_batch.bin", dir);
    ds = open_ok(uri);
    check_info(ds, uri, "cifar10", 2, 32, 32, 3, 10);
    check_cifar_sample(ds, 1, 1001, c10_label(1001));
    stk_dataset_close(ds);
    free(uri);

    /* The archive's own subdirectory is found from its parent. */
    char *parent = mkdir_tmp("c10_parent");
    char *sub = fmt("%s/cifar-10-batches-bin", parent);
    assert_int_equal(mkdir(sub, 0700), 0);
    for (int k = 1; k <= 5; k++) {
        char *p = fmt("%s/data_batch_%d.bin", sub, k);
        write_cifar(p, (uint64_t)(k - 1) * 3, 3, 0);
        free(p);
    }
    uri = fmt("cifar10:%s", parent);
    ds = open_ok(uri);
    check_info(ds, uri, "cifar10", 15, 32, 32, 3, 10);
    check_cifar_sample(ds, 14, 14, c10_label(14));
    stk_dataset_close(ds);
    free(uri);
    ds = open_ok(parent); /* detected */
    check_info(ds, parent, "cifar10", 15, 32, 32, 3, 10);
    check_cifar_sample(ds, 7, 7, c10_label(7));
    stk_dataset_close(ds);
    free(sub);
    free(parent);
    free(dir);
}

static void test_cifar100(void **state)
{
    (void)state;
    char *dir = make_cifar100_dir("c100");
    const char *fine_forms[] = {"cifar100:%s", "cifar100:%s?label=fine", "%s",
                                "cifar100:%s?split=train&label=fine"};
    for (size_t f = 0; f < 4; f++) {
        char *uri = fmt(fine_forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        check_info(ds, uri, "cifar100", 4, 32, 32, 3, 100);
        for (uint64_t i = 0; i < 4; i++)
            check_cifar_sample(ds, i, i, c100_fine(i));
        stk_dataset_close(ds);
        free(uri);
    }
    const char *coarse_forms[] = {"cifar100:%s?label=coarse", "%s?label=coarse"};
    for (size_t f = 0; f < 2; f++) {
        char *uri = fmt(coarse_forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        check_info(ds, uri, "cifar100", 4, 32, 32, 3, 20);
        for (uint64_t i = 0; i < 4; i++)
            check_cifar_sample(ds, i, i, c100_coarse(i));
        stk_dataset_close(ds);
        free(uri);
    }
    char *uri = fmt("cifar100:%s?label=coarse&split=test", dir);
    stk_dataset *ds = open_ok(uri);
    check_info(ds, uri, "cifar100", 2, 32, 32, 3, 20);
    check_cifar_sample(ds, 0, 500, c100_coarse(500));
    check_cifar_sample(ds, 1, 501, c100_coarse(501));
    stk_dataset_close(ds);
    free(uri);
    /* Hand check: id 501 fine = (3507 + 3) % 100 = 10, coarse = 1504 % 20 = 4. */
    uri = fmt("cifar100:%s?split=test", dir);
    ds = open_ok(uri);
    int64_t label;
    uint8_t buf[3072];
    assert_int_equal(stk_dataset_read(ds, 1, buf, sizeof buf, &label), 3072);
    assert_int_equal(label, 10);
    stk_dataset_close(ds);
    free(uri);
    uri = fmt("%s/test.bin", dir); /* detected by file name */
    ds = open_ok(uri);
    check_info(ds, uri, "cifar100", 2, 32, 32, 3, 100);
    check_cifar_sample(ds, 1, 501, 10);
    stk_dataset_close(ds);
    free(uri);
    free(dir);
}

static void test_cifar_hostile(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("c10_bad");
    char *uri, *p;

    /* Missing directory / file. */
    p = fmt("%s/nope", dir);
    uri = fmt("cifar10:%s", p);
    expect_open_fail(uri, NULL, STK_ENOENT, p, NULL, NULL);
    free(uri);
    free(p);
    /* A directory missing data_batch_5.bin. */
    p = fmt("%s/data_batch_5.bin", dir);
    assert_int_equal(remove(p), 0);
    uri = fmt("cifar10:%s", dir);
    expect_open_fail(uri, NULL, STK_ENOENT, p, NULL, NULL);
    free(uri);
    write_cifar(p, 12, 3, 0);
    free(p);

    /* Empty file. */
    p = fmt("%s/empty.bin", dir);
    tu_write_file(p, "", 0);
    uri = fmt("cifar10:%s", p);
    expect_open_fail(uri, NULL, STK_EFORMAT, p, "empty", NULL);
    free(uri);
    free(p);

    /* Size not a multiple of the record: 4 records + 53 bytes. */
    p = fmt("%s/short.bin", dir);
    {
        uint8_t *buf = calloc(4 * CREC10 + 53, 1);
        assert_non_null(buf);
        tu_write_file(p, buf, 4 * CREC10 + 53);
        free(buf);
    }
    uri = fmt("cifar10:%s", p);
    expect_open_fail(uri, NULL, STK_EFORMAT, p, "4 whole records + 53 bytes", "3073");
    free(uri);
    /* ... in CIFAR-100 terms: 12345 = 4 * 3074 + 49. */
    {
        uint8_t *buf = calloc(12345, 1);
        assert_non_null(buf);
        tu_write_file(p, buf, 12345);
        free(buf);
    }
    uri = fmt("cifar100:%s", p);
    expect_open_fail(uri, NULL, STK_EFORMAT, p, "size 12345", "4 whole records + 49 bytes");
    free(uri);
    free(p);

    /* Label 10 in data_batch_2.bin record 1 = sample 4. */
    p = fmt("%s/data_batch_2.bin", dir);
    {
        size_t n;
        uint8_t *buf = read_whole(p, &n);
        buf[1 * CREC10] = 10;
        tu_write_file(p, buf, n);
        free(buf);
    }
    uri = fmt("cifar10:%s", dir);
    expect_open_fail(uri, NULL, STK_EFORMAT, p, "record 1 (sample 4)", "label 10");
    free(uri);
    free(p);

    /* CIFAR-100: fine label 100 (record 2), then coarse label 20 (record 3). */
    char *d100 = make_cifar100_dir("c100_bad");
    p = fmt("%s/train.bin", d100);
    {
        size_t n;
        uint8_t *buf = read_whole(p, &n);
        buf[2 * CREC100 + 1] = 100;
        tu_write_file(p, buf, n);
        uri = fmt("cifar100:%s", d100);
        expect_open_fail(uri, NULL, STK_EFORMAT, p, "record 2 (sample 2)", "fine label 100");
        free(uri);
        buf[2 * CREC100 + 1] = 99;
        buf[3 * CREC100] = 20;
        tu_write_file(p, buf, n);
        uri = fmt("cifar100:%s?label=fine", d100);
        expect_open_fail(uri, NULL, STK_EFORMAT, p, "record 3 (sample 3)", "coarse label 20");
        free(uri);
        free(buf);
    }
    /* Label out of range in the second file of a list: global sample index. */
    {
        char *p2 = fmt("%s/test.bin", d100);
        uri = fmt("cifar100:%s,%s", p2, p);
        expect_open_fail(uri, NULL, STK_EFORMAT, p, "record 3 (sample 5)", "coarse label 20");
        free(uri);
        free(p2);
    }
    free(p);
    free(d100);

    /* A FIFO must be refused, not block. */
    p = fmt("%s/fifo", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    uri = fmt("cifar10:%s", p);
    expect_open_fail(uri, NULL, STK_EINVAL, p, "regular", NULL);
    free(uri);
    free(p);

    /* split= on a file, an empty list entry, a directory as a list entry. */
    uri = fmt("cifar10:%s/test_batch.bin?split=test", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "split", "test_batch.bin", NULL);
    free(uri);
    uri = fmt("cifar10:%s/test_batch.bin,,%s/test_batch.bin", dir, dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "empty file name", NULL, NULL);
    free(uri);
    uri = fmt("cifar10:%s/test_batch.bin,%s", dir, dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "directory", NULL, NULL);
    free(uri);
    free(dir);
}

static void test_cifar_limits(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("c10_lim");
    char *uri = fmt("cifar10:%s", dir);
    stk_dataset_options o = {.max_samples = 14};
    expect_open_fail(uri, &o, STK_ELIMIT, "max_samples", NULL, NULL);
    o = (stk_dataset_options){.max_samples = 15};
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_open(uri, &o, &ds), 0);
    stk_dataset_close(ds);
    o = (stk_dataset_options){.max_bytes = 3 * CREC10 - 1};
    expect_open_fail(uri, &o, STK_ELIMIT, "data_batch_1.bin", "max_bytes", NULL);
    o = (stk_dataset_options){.max_pixels = 1023};
    expect_open_fail(uri, &o, STK_ELIMIT, "max_pixels", NULL, NULL);
    free(uri);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* IDX content                                                              */
/* ------------------------------------------------------------------------ */

static uint8_t ival(uint64_t n, unsigned y, unsigned x, unsigned c)
{
    return (uint8_t)(n * 13 + y * 5 + x * 2 + c * 67 + 1);
}
static uint8_t ilabel(uint64_t n) { return (uint8_t)((n * 5 + 2) % 7); }

/* Bytes of an IDX file: header for `ndim` dims (type byte `type`) followed
 * by `data` (n bytes). */
static uint8_t *idx_bytes(uint8_t type, unsigned ndim, const uint32_t *dims, const uint8_t *data,
                          size_t n, size_t *len)
{
    size_t hdr = 4 + 4 * (size_t)ndim;
    uint8_t *b = malloc(hdr + n + 1);
    assert_non_null(b);
    b[0] = 0;
    b[1] = 0;
    b[2] = type;
    b[3] = (uint8_t)ndim;
    for (unsigned i = 0; i < ndim; i++) {
        b[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
        b[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
        b[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
        b[7 + 4 * i] = (uint8_t)dims[i];
    }
    if (n)
        memcpy(b + hdr, data, n);
    *len = hdr + n;
    return b;
}

/* Images (N, H, W[, C]) with ival content, HWC within a sample. */
static void write_idx_images(const char *path, int gz, uint32_t n, uint32_t h, uint32_t w,
                             uint32_t c, int ndim4)
{
    size_t bytes = (size_t)n * h * w * c, len;
    uint8_t *data = malloc(bytes + 1);
    assert_non_null(data);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t k = 0; k < c; k++)
                    data[(((size_t)s * h + y) * w + x) * c + k] = ival(s, y, x, k);
    uint32_t dims[4] = {n, h, w, c};
    uint8_t *file = idx_bytes(0x08, ndim4 ? 4 : 3, dims, data, bytes, &len);
    if (gz)
        tu_write_gz(path, file, len);
    else
        tu_write_file(path, file, len);
    free(file);
    free(data);
}

static void write_idx_labels(const char *path, int gz, uint32_t n)
{
    uint8_t *data = malloc(n + 1);
    size_t len;
    assert_non_null(data);
    for (uint32_t s = 0; s < n; s++)
        data[s] = ilabel(s);
    uint8_t *file = idx_bytes(0x08, 1, &n, data, n, &len);
    if (gz)
        tu_write_gz(path, file, len);
    else
        tu_write_file(path, file, len);
    free(file);
    free(data);
}

static void check_idx_sample(const stk_dataset *ds, uint64_t index, uint32_t h, uint32_t w,
                             uint32_t c)
{
    size_t bytes = (size_t)h * w * c;
    uint8_t *buf = malloc(bytes + 8);
    int64_t label = -1;
    assert_non_null(buf);
    memset(buf, 0xEE, bytes + 8);
    assert_int_equal(stk_dataset_read(ds, index, buf, bytes + 8, &label), (int64_t)bytes);
    assert_int_equal(label, ilabel(index));
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t k = 0; k < c; k++)
                assert_int_equal(buf[(y * w + x) * c + k], ival(index, y, x, k));
    for (size_t i = bytes; i < bytes + 8; i++)
        assert_int_equal(buf[i], 0xEE);
    free(buf);
}

/* 7 labels cover 0..6 for n >= 7 -> num_classes 7. */
#define IDX_N 9
#define IDX_H 5
#define IDX_W 4

/* ------------------------------------------------------------------------ */
/* IDX tests                                                                */
/* ------------------------------------------------------------------------ */

static void test_idx_hand_values(void **state)
{
    (void)state;
    /* ival(2, 1, 3, 0) = 26 + 5 + 6 + 1 = 38; ilabel(2) = 12 % 7 = 5. */
    assert_int_equal(ival(2, 1, 3, 0), 38);
    assert_int_equal(ilabel(2), 5);
    char *dir = mkdir_tmp("idx_hand");
    char *img = fmt("%s/a-images-idx3-ubyte", dir), *lab = fmt("%s/a-labels-idx1-ubyte", dir);
    write_idx_images(img, 0, IDX_N, IDX_H, IDX_W, 1, 0);
    write_idx_labels(lab, 0, IDX_N);
    /* Check the file bytes themselves: sample 2 starts at 16 + 2*20. */
    size_t n;
    uint8_t *raw = read_whole(img, &n);
    assert_int_equal(n, 16 + IDX_N * IDX_H * IDX_W);
    assert_int_equal(raw[16 + 2 * 20 + 1 * 4 + 3], 38);
    free(raw);
    char *uri = fmt("idx:%s,%s", img, lab);
    stk_dataset *ds = open_ok(uri);
    uint8_t buf[IDX_H * IDX_W];
    int64_t label;
    assert_int_equal(stk_dataset_read(ds, 2, buf, sizeof buf, &label), IDX_H * IDX_W);
    assert_int_equal(label, 5);
    assert_int_equal(buf[1 * IDX_W + 3], 38);
    stk_dataset_close(ds);
    free(uri);
    free(img);
    free(lab);
    free(dir);
}

static void test_idx_forms(void **state)
{
    (void)state;
    for (int gz = 0; gz < 2; gz++) {
        char *dir = mkdir_tmp(gz ? "mnist_gz" : "mnist_plain");
        const char *sfx = gz ? ".gz" : "";
        char *tri = fmt("%s/train-images-idx3-ubyte%s", dir, sfx);
        char *trl = fmt("%s/train-labels-idx1-ubyte%s", dir, sfx);
        char *tei = fmt("%s/t10k-images-idx3-ubyte%s", dir, sfx);
        char *tel = fmt("%s/t10k-labels-idx1-ubyte%s", dir, sfx);
        write_idx_images(tri, gz, IDX_N, IDX_H, IDX_W, 1, 0);
        write_idx_labels(trl, gz, IDX_N);
        write_idx_images(tei, gz, 3, IDX_H, IDX_W, 1, 0);
        write_idx_labels(tel, gz, 3);

        char *train_uris[] = {fmt("idx:%s,%s", tri, trl), fmt("mnist:%s", dir),
                              fmt("fashion-mnist:%s?split=train", dir), xstrdup(dir),
                              xstrdup(tri)};
        for (size_t u = 0; u < 5; u++) {
            stk_dataset *ds = open_ok(train_uris[u]);
            check_info(ds, train_uris[u], "idx", IDX_N, IDX_H, IDX_W, 1, 7);
            for (uint64_t i = 0; i < IDX_N; i++)
                check_idx_sample(ds, i, IDX_H, IDX_W, 1);
            stk_dataset_close(ds);
            free(train_uris[u]);
        }
        char *test_uris[] = {fmt("mnist:%s?split=test", dir),
                             fmt("fashion-mnist:%s?split=test", dir), fmt("%s?split=test", dir),
                             xstrdup(tei)};
        for (size_t u = 0; u < 4; u++) {
            stk_dataset *ds = open_ok(test_uris[u]);
            /* labels 2, 0, 5 -> num_classes 6 */
            check_info(ds, test_uris[u], "idx", 3, IDX_H, IDX_W, 1, 6);
            for (uint64_t i = 0; i < 3; i++)
                check_idx_sample(ds, i, IDX_H, IDX_W, 1);
            stk_dataset_close(ds);
            free(test_uris[u]);
        }
        free(tri);
        free(trl);
        free(tei);
        free(tel);
        free(dir);
    }
}

static void test_idx_mixed_and_ndim4(void **state)
{
    (void)state;
    char *dir = mkdir_tmp("idx_mixed");
    /* Plain images named *.gz (content decides) with gz labels found by
     * name from a bare images path. */
    char *img = fmt("%s/x-images-idx3-ubyte.gz", dir);
    char *lab = fmt("%s/x-labels-idx1-ubyte", dir);
    char *labgz = fmt("%s/x-labels-idx1-ubyte.gz", dir);
    write_idx_images(img, 0, IDX_N, IDX_H, IDX_W, 1, 0);
    write_idx_labels(labgz, 1, IDX_N);
    stk_dataset *ds = open_ok(img); /* labels: x-labels-idx1-ubyte.gz */
    check_info(ds, img, "idx", IDX_N, IDX_H, IDX_W, 1, 7);
    check_idx_sample(ds, IDX_N - 1, IDX_H, IDX_W, 1);
    stk_dataset_close(ds);
    /* Kaggle-style names: train-images.idx3-ubyte / train-labels.idx1-ubyte */
    char *kimg = fmt("%s/train-images.idx3-ubyte", dir);
    char *klab = fmt("%s/train-labels.idx1-ubyte", dir);
    write_idx_images(kimg, 1, IDX_N, IDX_H, IDX_W, 1, 0);
    write_idx_labels(klab, 0, IDX_N);
    ds = open_ok(kimg);
    check_idx_sample(ds, 4, IDX_H, IDX_W, 1);
    stk_dataset_close(ds);

    /* ndim 4: N, H, W, C interleaved, plain and gz. */
    for (int gz = 0; gz < 2; gz++) {
        char *img4 = fmt("%s/rgb%d-images", dir, gz);
        write_idx_images(img4, gz, IDX_N, 3, 2, 3, 1);
        write_idx_labels(lab, gz, IDX_N);
        char *uri = fmt("idx:%s,%s", img4, lab);
        ds = open_ok(uri);
        check_info(ds, uri, "idx", IDX_N, 3, 2, 3, 7);
        for (uint64_t i = 0; i < IDX_N; i++)
            check_idx_sample(ds, i, 3, 2, 3);
        stk_dataset_close(ds);
        free(uri);
        free(img4);
    }
    free(kimg);
    free(klab);
    free(img);
    free(lab);
    free(labgz);
    free(dir);
}

static void test_idx_multimember_gz(void **state)
{
    (void)state;
    /* gzip(1) treats concatenated members as one stream; so do we. The
     * split falls inside the header and inside the data. */
    char *dir = mkdir_tmp("idx_multi");
    char *img = fmt("%s/img", dir), *lab = fmt("%s/lab", dir), *part = fmt("%s/part", dir);
    write_idx_images(img, 0, IDX_N, IDX_H, IDX_W, 1, 0);
    write_idx_labels(lab, 0, IDX_N);
    size_t n, n1, n2, n3;
    uint8_t *raw = read_whole(img, &n);
    tu_write_gz(part, raw, 7);
    uint8_t *g1 = read_whole(part, &n1);
    tu_write_gz(part, raw + 7, 50);
    uint8_t *g2 = read_whole(part, &n2);
    tu_write_gz(part, raw + 57, n - 57);
    uint8_t *g3 = read_whole(part, &n3);
    uint8_t *all = malloc(n1 + n2 + n3);
    assert_non_null(all);
    memcpy(all, g1, n1);
    memcpy(all + n1, g2, n2);
    memcpy(all + n1 + n2, g3, n3);
    tu_write_file(img, all, n1 + n2 + n3);
    char *uri = fmt("idx:%s,%s", img, lab);
    stk_dataset *ds = open_ok(uri);
    for (uint64_t i = 0; i < IDX_N; i++)
        check_idx_sample(ds, i, IDX_H, IDX_W, 1);
    stk_dataset_close(ds);
    free(uri);
    free(all);
    free(g1);
    free(g2);
    free(g3);
    free(raw);
    free(img);
    free(lab);
    free(part);
    free(dir);
}

/* Write `file` (len bytes) as images, plain or gz, and expect open to fail
 * with `code` and the images path (plus `needle`) in the message. */
static void idx_expect(const char *img, const char *lab, const uint8_t *file, size_t len, int gz,
                       const stk_dataset_options *o, int code, const char *needle)
{
    if (gz)
        tu_write_gz(img, file, len);
    else
        tu_write_file(img, file, len);
    char *uri = fmt("idx:%s,%s", img, lab);
    expect_open_fail(uri, o, code, img, needle, NULL);
    free(uri);
}

static void test_idx_hostile_header(void **state)
{
    (void)state;
    char *dir = mkdir_tmp("idx_bad");
    char *img = fmt("%s/bad-images", dir), *lab = fmt("%s/bad-labels", dir);
    write_idx_labels(lab, 0, IDX_N);
    uint8_t data[IDX_N * IDX_H * IDX_W] = {0};
    uint32_t dims[4] = {IDX_N, IDX_H, IDX_W, 1};
    size_t len;
    uint8_t *f;

    for (int gz = 0; gz < 2; gz++) {
        /* Bad magic. */
        f = idx_bytes(0x08, 3, dims, data, sizeof data, &len);
        f[0] = 0x01;
        f[1] = 0x02;
        idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "magic");
        free(f);
        /* Known but unsupported type (float32), unknown type. */
        f = idx_bytes(0x0D, 3, dims, data, sizeof data, &len);
        idx_expect(img, lab, f, len, gz, NULL, STK_EUNSUPPORTED, "0x0d");
        free(f);
        f = idx_bytes(0x42, 3, dims, data, sizeof data, &len);
        idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "0x42");
        free(f);
        /* Wrong ndim for images (2, 5) and for labels (as images file: 1). */
        f = idx_bytes(0x08, 2, dims, data, sizeof data, &len);
        idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "2 dimensions");
        free(f);
        f = idx_bytes(0x08, 1, dims, data, sizeof data, &len);
        idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "1 dimensions");
        free(f);
        {
            uint8_t h[4] = {0, 0, 8, 200};
            idx_expect(img, lab, h, 4, gz, NULL, STK_EFORMAT, "200 dimensions");
        }
        /* A zero dimension. */
        {
            uint32_t z[3] = {IDX_N, 0, IDX_W};
            f = idx_bytes(0x08, 3, z, NULL, 0, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "is 0");
            free(f);
            uint32_t z0[3] = {0, IDX_H, IDX_W};
            f = idx_bytes(0x08, 3, z0, NULL, 0, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, "is 0");
            free(f);
        }
        /* Absurd dimensions: limits trip before any allocation. */
        {
            uint32_t big[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
            f = idx_bytes(0x08, 3, big, data, 16, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_ELIMIT, "max_pixels");
            free(f);
            uint32_t big4[4] = {1, 1, 1, 0xFFFFFFFFu};
            f = idx_bytes(0x08, 4, big4, data, 16, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_EUNSUPPORTED, "channels");
            free(f);
            /* pixels fine (2^28 - 1 x 1), total bytes 2^28 x 2^32 > 16 GiB. */
            uint32_t bigb[3] = {0xFFFFFFFFu, (1u << 28) - 1, 1};
            f = idx_bytes(0x08, 3, bigb, data, 16, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_ELIMIT, "max_bytes");
            free(f);
            /* Count mismatch is checked before any data is touched. */
            uint32_t many[3] = {IDX_N + 1, IDX_H, IDX_W};
            f = idx_bytes(0x08, 3, many, data, 16, &len);
            idx_expect(img, lab, f, len, gz, NULL, STK_EFORMAT, lab);
            free(f);
        }
        /* Header cut inside the dimensions; shorter than 4 bytes. */
        f = idx_bytes(0x08, 3, dims, NULL, 0, &len);
        idx_expect(img, lab, f, 9, gz, NULL, STK_EFORMAT, "header");
        idx_expect(img, lab, f, 3, gz, NULL, STK_EFORMAT, "header");
        free(f);
    }
    /* Empty file (plain) and empty gzip stream. */
    idx_expect(img, lab, (const uint8_t *)"", 0, 0, NULL, STK_EFORMAT, "empty");
    idx_expect(img, lab, (const uint8_t *)"", 0, 1, NULL, STK_EFORMAT, "header");

    /* Limits from options. */
    f = idx_bytes(0x08, 3, dims, data, sizeof data, &len);
    stk_dataset_options o = {.max_pixels = IDX_H * IDX_W - 1};
    idx_expect(img, lab, f, len, 0, &o, STK_ELIMIT, "max_pixels");
    o = (stk_dataset_options){.max_bytes = sizeof data - 1};
    idx_expect(img, lab, f, len, 1, &o, STK_ELIMIT, "max_bytes");
    o = (stk_dataset_options){.max_samples = IDX_N - 1};
    {
        char *uri = fmt("idx:%s,%s", img, lab);
        expect_open_fail(uri, &o, STK_ELIMIT, lab, "max_samples", NULL); /* labels first */
        free(uri);
    }
    free(f);

    /* Labels file faults: ndim, type, missing. */
    write_idx_images(img, 0, IDX_N, IDX_H, IDX_W, 1, 0);
    {
        uint32_t ld[2] = {IDX_N, 1};
        f = idx_bytes(0x08, 2, ld, data, IDX_N, &len);
        tu_write_file(lab, f, len);
        free(f);
        char *uri = fmt("idx:%s,%s", img, lab);
        expect_open_fail(uri, NULL, STK_EFORMAT, lab, "expected 1", NULL);
        free(uri);
        char *missing = fmt("%s/missing-labels", dir);
        uri = fmt("idx:%s,%s", img, missing);
        expect_open_fail(uri, NULL, STK_ENOENT, missing, NULL, NULL);
        free(uri);
        free(missing);
    }
    free(img);
    free(lab);
    free(dir);
}

static void test_idx_hostile_data(void **state)
{
    (void)state;
    char *dir = mkdir_tmp("idx_bad_data");
    char *img = fmt("%s/bad-images", dir), *lab = fmt("%s/bad-labels", dir);
    char *tmp = fmt("%s/tmp.gz", dir);
    write_idx_labels(lab, 0, IDX_N);
    uint8_t data[IDX_N * IDX_H * IDX_W + 10] = {0};
    uint32_t dims[3] = {IDX_N, IDX_H, IDX_W};
    const size_t full = IDX_N * IDX_H * IDX_W; /* 180 */
    size_t len;
    uint8_t *f;

    /* Truncated: 50 bytes of the 180, plain and as a complete gzip stream. */
    f = idx_bytes(0x08, 3, dims, data, 50, &len);
    idx_expect(img, lab, f, len, 0, NULL, STK_EFORMAT,
               "truncated: header says 9 images of 5x4 (180 bytes of data) but the file has 50");
    idx_expect(img, lab, f, len, 1, NULL, STK_EFORMAT,
               "truncated: header says 9 images of 5x4 (180 bytes of data) but the decompressed "
               "stream has 50");
    free(f);
    /* Trailing data: 10 bytes too many. */
    f = idx_bytes(0x08, 3, dims, data, full + 10, &len);
    idx_expect(img, lab, f, len, 0, NULL, STK_EFORMAT, "10 bytes of trailing data");
    idx_expect(img, lab, f, len, 1, NULL, STK_EFORMAT, "trailing data");
    free(f);

    /* A valid gz file, cut: (a) in the middle, (b) only its 8-byte trailer
     * (CRC + length) missing; (c) a CRC byte flipped; (d) garbage appended. */
    f = idx_bytes(0x08, 3, dims, data, full, &len);
    tu_fill_random(f + 16, full, 42); /* incompressible-ish data */
    tu_write_gz(tmp, f, len);
    free(f);
    size_t glen;
    uint8_t *g = read_whole(tmp, &glen);
    g = realloc(g, glen + 64);
    assert_non_null(g);
    tu_write_file(img, g, glen / 2);
    {
        char *uri = fmt("idx:%s,%s", img, lab);
        expect_open_fail(uri, NULL, STK_EFORMAT, img, "truncated", NULL);
        tu_write_file(img, g, glen - 8);
        expect_open_fail(uri, NULL, STK_EFORMAT, img, "truncated gzip stream", NULL);
        g[glen - 6] ^= 0x55; /* inside the CRC32 */
        tu_write_file(img, g, glen);
        expect_open_fail(uri, NULL, STK_EFORMAT, img, "corrupt gzip stream", NULL);
        g[glen - 6] ^= 0x55;
        memcpy(g + glen, "GARBAGE!", 8);
        tu_write_file(img, g, glen + 8);
        expect_open_fail(uri, NULL, STK_EFORMAT, img, "trailing garbage", NULL);
        /* still fine without the garbage */
        tu_write_file(img, g, glen);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_close(ds);
        free(uri);
    }
    free(g);

    /* Random bytes after a valid gzip magic, with several seeds. */
    for (uint64_t seed = 1; seed <= 20; seed++) {
        uint8_t junk[600];
        tu_fill_random(junk, sizeof junk, seed);
        junk[0] = 0x1f;
        junk[1] = 0x8b;
        tu_write_file(img, junk, sizeof junk);
        char *uri = fmt("idx:%s,%s", img, lab);
        stk_dataset *ds = (stk_dataset *)(uintptr_t)1;
        int rc = stk_dataset_open(uri, NULL, &ds);
        assert_int_equal(rc, STK_EFORMAT);
        assert_null(ds);
        assert_non_null(strstr(stk_errmsg(), img));
        free(uri);
    }
    /* Valid gzip header bytes (method 8, no flags) then garbage: zlib's
     * own message comes through. */
    {
        uint8_t junk[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff};
        idx_expect(img, lab, junk, sizeof junk, 0, NULL, STK_EFORMAT, "corrupt gzip stream: ");
    }

    /* A tiny gz claiming 16 GiB (within max_bytes): decompression stops
     * at what really arrives; the buffer never grows past it. */
    {
        char *lab16k = fmt("%s/labels-16k", dir);
        write_idx_labels(lab16k, 1, 16384);
        uint32_t huge[3] = {16384, 1024, 1024};
        f = idx_bytes(0x08, 3, huge, data, 100, &len);
        idx_expect(img, lab16k, f, len, 1, NULL, STK_EFORMAT,
                   "header says 16384 images of 1024x1024 (17179869184 bytes of data) but the "
                   "decompressed stream has 100");
        free(f);
        free(lab16k);
    }
    /* Random garbage whole files (not gzip): never a crash. */
    for (uint64_t seed = 100; seed < 140; seed++) {
        uint8_t junk[300];
        tu_fill_random(junk, sizeof junk, seed);
        if (seed & 1) { /* make it look like an IDX prefix */
            junk[0] = 0;
            junk[1] = 0;
            junk[2] = 8;
            junk[3] = (uint8_t)(3 + (seed & 2) / 2);
        }
        tu_write_file(img, junk, sizeof junk);
        char *uri = fmt("idx:%s,%s", img, lab);
        stk_dataset *ds = (stk_dataset *)(uintptr_t)1;
        int rc = stk_dataset_open(uri, NULL, &ds);
        assert_true(rc == STK_EFORMAT || rc == STK_ELIMIT || rc == STK_EUNSUPPORTED);
        assert_null(ds);
        assert_non_null(strstr(stk_errmsg(), img));
        free(uri);
    }
    free(tmp);
    free(img);
    free(lab);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* URI errors                                                               */
/* ------------------------------------------------------------------------ */

static void test_uri_errors(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("uri");
    char *uri;

    expect_open_fail("cifar:/data/x", NULL, STK_EINVAL, "'cifar:'", "cifar10:", NULL);
    /* A remote URL whose format its name does not tell (docs/remote.md). */
    expect_open_fail("s3://bucket/key", NULL, STK_EINVAL, "s3://bucket/key", "prefix (stk:", NULL);
    expect_open_fail("foo://bucket/key", NULL, STK_EINVAL, "'foo:'", NULL, NULL);
    uri = fmt("cifar10:%s?foo=1", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "unknown query key 'foo'", "split", NULL);
    free(uri);
    uri = fmt("cifar10:%s?split=valid", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "'valid'", "train or test", NULL);
    free(uri);
    uri = fmt("cifar10:%s?label=fine", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "'label'", NULL, NULL);
    free(uri);
    uri = fmt("cifar100:%s?label=medium", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "'medium'", "fine or coarse", NULL);
    free(uri);
    uri = fmt("cifar10:%s?split=train&split=test", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "twice", NULL, NULL);
    free(uri);
    uri = fmt("cifar10:%s?split", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "'split'", "=value", NULL);
    free(uri);
    uri = fmt("cifar10:%s?split=train&", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "empty item", NULL, NULL);
    free(uri);
    uri = fmt("%s?bogus=1", dir); /* bare path with a query */
    expect_open_fail(uri, NULL, STK_EINVAL, "'bogus'", NULL, NULL);
    free(uri);
    uri = fmt("mnist:%s?split=dev", dir);
    expect_open_fail(uri, NULL, STK_EINVAL, "'dev'", NULL, NULL);
    free(uri);

    expect_open_fail("idx:onlyone", NULL, STK_EINVAL, "IMAGES,LABELS", NULL, NULL);
    expect_open_fail("idx:a,b,c", NULL, STK_EINVAL, "IMAGES,LABELS", NULL, NULL);
    expect_open_fail("idx:a,b?split=test", NULL, STK_EINVAL, "'split'", "no query keys", NULL);
    expect_open_fail("idx:,b", NULL, STK_EINVAL, "empty", NULL, NULL);
    expect_open_fail("cifar10:", NULL, STK_EINVAL, "empty path", NULL, NULL);
    expect_open_fail("", NULL, STK_EINVAL, "empty URI", NULL, NULL);
    {
        stk_dataset *ds = NULL;
        assert_int_equal(stk_dataset_open(NULL, NULL, &ds), STK_EINVAL);
        assert_int_equal(stk_dataset_open("x", NULL, NULL), STK_EINVAL);
    }

    /* Missing paths, undetectable paths. */
    char *missing = fmt("%s/does-not-exist", dir);
    /* A missing path says so, without the list of layouts (issue 11). */
    expect_open_fail(missing, NULL, STK_ENOENT, missing, ": no such file or directory", NULL);
    assert_null(strstr(stk_errmsg(), "data_batch_1.bin"));
    assert_null(strstr(stk_errmsg(), "looked for"));
    {
        char *want = fmt("%s: no such file or directory", missing);
        assert_string_equal(stk_errmsg(), want);
        free(want);
        char *below = fmt("%s/x/y", missing); /* a parent missing too */
        expect_open_fail(below, NULL, STK_ENOENT, below, ": no such file or directory", NULL);
        free(below);
        /* A pattern matching nothing, and one matching files of no known format. */
        char *pat = fmt("%s/*.jpg", dir);
        expect_open_fail(pat, NULL, STK_ENOENT, pat, ": no file matches this pattern", NULL);
        assert_null(strstr(stk_errmsg(), "looked for"));
        free(pat);
        char *odd = fmt("%s/odd-1.xyz", dir);
        FILE *f = fopen(odd, "wb");
        assert_non_null(f);
        fputs("x", f);
        fclose(f);
        pat = fmt("%s/odd-*.xyz", dir);
        expect_open_fail(pat, NULL, STK_EINVAL, pat,
                         "cannot detect the dataset format of the 1 file this pattern matches",
                         "looked for");
        free(pat);
        /* An existing file of no known format keeps the list. */
        expect_open_fail(odd, NULL, STK_EINVAL, odd, "cannot detect the dataset format",
                         "looked for");
        unlink(odd);
        free(odd);
    }
    uri = fmt("mnist:%s", missing);
    expect_open_fail(uri, NULL, STK_ENOENT, missing, NULL, NULL);
    free(uri);
    uri = fmt("idx:%s,%s", missing, missing);
    expect_open_fail(uri, NULL, STK_ENOENT, missing, NULL, NULL);
    free(uri);
    free(missing);
    char *emptydir = mkdir_tmp("uri_empty");
    expect_open_fail(emptydir, NULL, STK_ENOENT, emptydir, "no dataset detected",
                     "train-images-idx3-ubyte");
    uri = fmt("mnist:%s", emptydir);
    expect_open_fail(uri, NULL, STK_ENOENT, "train-images-idx3-ubyte", emptydir, NULL);
    free(uri);
    /* images present, labels missing */
    char *p = fmt("%s/train-images-idx3-ubyte", emptydir);
    write_idx_images(p, 0, 2, 2, 2, 1, 0);
    uri = fmt("mnist:%s", emptydir);
    expect_open_fail(uri, NULL, STK_ENOENT, "train-labels-idx1-ubyte", NULL, NULL);
    free(uri);
    expect_open_fail(p, NULL, STK_ENOENT, "train-labels-idx1-ubyte", p, NULL);
    free(p);
    p = fmt("%s/something.dat", emptydir);
    tu_write_file(p, "abc", 3);
    expect_open_fail(p, NULL, STK_EINVAL, p, "cannot detect", NULL);
    free(p);
    free(emptydir);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* Public read, memory datasets                                             */
/* ------------------------------------------------------------------------ */

static void test_read_errors(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("readerr");
    char *uri = fmt("cifar10:%s", dir);
    stk_dataset *ds = open_ok(uri);
    uint8_t buf[3072];
    int64_t label = 77;
    assert_int_equal(stk_dataset_read(ds, 0, buf, 3071, &label), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "3072"));
    assert_non_null(strstr(stk_errmsg(), "3071"));
    assert_int_equal(stk_dataset_read(ds, 15, buf, sizeof buf, &label), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "out of range"));
    assert_non_null(strstr(stk_errmsg(), dir));
    assert_int_equal(stk_dataset_read(ds, UINT64_MAX, buf, sizeof buf, &label), STK_EINVAL);
    assert_int_equal(stk_dataset_read(ds, 0, NULL, sizeof buf, &label), STK_EINVAL);
    assert_int_equal(stk_dataset_read(NULL, 0, buf, sizeof buf, &label), STK_EINVAL);
    assert_int_equal(label, 77); /* untouched on failure */
    /* label may be NULL */
    assert_int_equal(stk_dataset_read(ds, 14, buf, sizeof buf, NULL), 3072);
    assert_int_equal(buf[0], cval(14, 0, 0, 0));
    /* the internal vtable read gives the planar view */
    stk_sample s;
    stk_scratch scratch = {0};
    assert_int_equal(ds->vt->read(ds, 4, &s, &scratch), 0);
    assert_int_equal(s.image.row_stride, 32);
    assert_int_equal(s.image.col_stride, 1);
    assert_int_equal(s.image.chan_stride, 1024);
    assert_int_equal(s.image.pixels[1024 + 33], cval(4, 1, 1, 1));
    assert_int_equal(s.label, 4);
    stk_scratch_free(&scratch);
    stk_dataset_close(ds);
    stk_dataset_close(NULL);
    stk_dataset_info info;
    stk_dataset_info_get(NULL, &info);
    assert_int_equal(info.count, 0);
    free(uri);
    free(dir);
}

static void test_memory(void **state)
{
    (void)state;
    enum { N = 4, H = 3, W = 2, C = 3 };
    uint8_t px[N * H * W * C];
    int64_t labels[N] = {3, 0, 8, 1};
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 7 + 1);
    uint8_t out[H * W * C];
    int64_t label;

    for (int copy = 0; copy < 2; copy++) {
        stk_dataset *ds = NULL;
        assert_int_equal(stk_dataset_from_memory(px, labels, N, H, W, C, copy, &ds), 0);
        check_info(ds, "memory", "memory", N, H, W, C, 9);
        for (uint64_t s = 0; s < N; s++) {
            assert_int_equal(stk_dataset_read(ds, s, out, sizeof out, &label), H * W * C);
            assert_int_equal(label, labels[s]);
            for (size_t i = 0; i < sizeof out; i++)
                assert_int_equal(out[i], (uint8_t)((s * H * W * C + i) * 7 + 1));
        }
        /* Change the source: a borrowed dataset sees it, a copy does not. */
        px[2 * H * W * C + 5] ^= 0xFF;
        labels[2] = 5;
        assert_int_equal(stk_dataset_read(ds, 2, out, sizeof out, &label), H * W * C);
        if (copy) {
            assert_int_equal(out[5], (uint8_t)((2 * H * W * C + 5) * 7 + 1));
            assert_int_equal(label, 8);
        } else {
            assert_int_equal(out[5], (uint8_t)(((2 * H * W * C + 5) * 7 + 1) ^ 0xFF));
            assert_int_equal(label, 5);
        }
        px[2 * H * W * C + 5] ^= 0xFF;
        labels[2] = 8;
        stk_dataset_close(ds);
    }

    /* The copy really is a copy: free the source before reading. */
    {
        uint8_t *heap = malloc(sizeof px);
        int64_t *hl = malloc(sizeof labels);
        assert_non_null(heap);
        assert_non_null(hl);
        memcpy(heap, px, sizeof px);
        memcpy(hl, labels, sizeof labels);
        stk_dataset *ds = NULL;
        assert_int_equal(stk_dataset_from_memory(heap, hl, N, H, W, C, 1, &ds), 0);
        free(heap);
        free(hl);
        assert_int_equal(stk_dataset_read(ds, 3, out, sizeof out, &label), H * W * C);
        assert_int_equal(label, 1);
        assert_int_equal(out[H * W * C - 1], (uint8_t)((4 * H * W * C - 1) * 7 + 1));
        stk_dataset_close(ds);
    }

    /* No labels: all 0, classes unknown. */
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_from_memory(px, NULL, N, H, W, C, 1, &ds), 0);
    check_info(ds, "memory", "memory", N, H, W, C, 0);
    assert_int_equal(stk_dataset_read(ds, 1, out, sizeof out, &label), H * W * C);
    assert_int_equal(label, 0);
    assert_int_equal(stk_dataset_read(ds, 4, out, sizeof out, &label), STK_EINVAL);
    assert_int_equal(stk_dataset_read(ds, 0, out, sizeof out - 1, &label), STK_EINVAL);
    stk_dataset_close(ds);

    /* Invalid arguments. */
    ds = (stk_dataset *)(uintptr_t)1;
    assert_int_equal(stk_dataset_from_memory(px, labels, 0, H, W, C, 0, &ds), STK_EINVAL);
    assert_null(ds);
    assert_int_equal(stk_dataset_from_memory(NULL, labels, N, H, W, C, 0, &ds), STK_EINVAL);
    assert_int_equal(stk_dataset_from_memory(px, labels, N, 0, W, C, 0, &ds), STK_EINVAL);
    assert_int_equal(stk_dataset_from_memory(px, labels, UINT64_MAX, 0xFFFFFFFFu, 0xFFFFFFFFu,
                                             C, 1, &ds),
                     STK_EINVAL);
    assert_int_equal(stk_dataset_from_memory(px, labels, N, H, W, C, 0, NULL), STK_EINVAL);
}

/* ------------------------------------------------------------------------ */
/* Concurrent reads                                                         */
/* ------------------------------------------------------------------------ */

typedef struct reader_arg {
    const stk_dataset *ds;
    int cifar;        /* 1: CIFAR-10 dir layout (id = index), 0: IDX */
    unsigned offset;  /* where this thread starts */
    int errors;       /* out */
} reader_arg;

static void *reader_thread(void *p)
{
    reader_arg *a = p;
    stk_dataset_info info;
    uint8_t buf[3072];
    stk_dataset_info_get(a->ds, &info);
    for (unsigned round = 0; round < 200; round++) {
        uint64_t i = (a->offset + round * 7u) % info.count;
        int64_t label;
        if (stk_dataset_read(a->ds, i, buf, sizeof buf, &label) < 0) {
            a->errors++;
            continue;
        }
        if (a->cifar) {
            a->errors += label != c10_label(i);
            for (unsigned y = 0; y < 32; y += 5)
                for (unsigned x = 0; x < 32; x += 3)
                    for (unsigned c = 0; c < 3; c++)
                        a->errors += buf[(y * 32 + x) * 3 + c] != cval(i, y, x, c);
        } else {
            a->errors += label != ilabel(i);
            for (unsigned y = 0; y < IDX_H; y++)
                for (unsigned x = 0; x < IDX_W; x++)
                    a->errors += buf[y * IDX_W + x] != ival(i, y, x, 0);
        }
    }
    return NULL;
}

/* One dataset, read by several threads at once (TSan builds check the
 * "read is thread-safe, no locks" claim). */
static void test_concurrent_reads(void **state)
{
    (void)state;
    char *dir = make_cifar10_dir("conc");
    char *img = fmt("%s/c-images-idx3-ubyte.gz", dir), *lab = fmt("%s/c-labels-idx1-ubyte", dir);
    write_idx_images(img, 1, IDX_N, IDX_H, IDX_W, 1, 0);
    write_idx_labels(lab, 0, IDX_N);
    stk_dataset *dss[2] = {open_ok(dir), open_ok(img)};
    for (int k = 0; k < 2; k++) {
        pthread_t t[4];
        reader_arg args[4];
        for (unsigned j = 0; j < 4; j++) {
            args[j] = (reader_arg){.ds = dss[k], .cifar = k == 0, .offset = j * 3};
            assert_int_equal(pthread_create(&t[j], NULL, reader_thread, &args[j]), 0);
        }
        for (unsigned j = 0; j < 4; j++) {
            assert_int_equal(pthread_join(t[j], NULL), 0);
            assert_int_equal(args[j].errors, 0);
        }
        stk_dataset_close(dss[k]);
    }
    free(img);
    free(lab);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* Fashion-MNIST as Debian ships it                                         */
/* ------------------------------------------------------------------------ */

/* Decompress a .gz with zlib's gz* API (the reference path). */
static uint8_t *gunzip_file(const char *path, size_t *n)
{
    gzFile f = gzopen(path, "rb");
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    int r;
    assert_non_null(f);
    assert_non_null(buf);
    while ((r = gzread(f, buf + len, (unsigned)(cap - len))) > 0) {
        len += (size_t)r;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    assert_int_equal(r, 0);
    gzclose(f);
    *n = len;
    return buf;
}

static void test_fashion_mnist_system(void **state)
{
    (void)state;
    struct stat st;
    if (stat(FASHION_DIR, &st) != 0) {
        /* under CI every prerequisite is installed (scripts/install-deps.sh) */
        const char *ci = getenv("CI");
        if (ci && !strcmp(ci, "true"))
            fail_msg("CI=true and no %s (Debian's dataset-fashion-mnist)", FASHION_DIR);
        skip();
        return;
    }
    stk_dataset *ds = open_ok("fashion-mnist:" FASHION_DIR);
    check_info(ds, "fashion-mnist:" FASHION_DIR, "idx", 60000, 28, 28, 1, 10);
    stk_dataset_close(ds);

    ds = open_ok("fashion-mnist:" FASHION_DIR "?split=test");
    check_info(ds, "fashion-mnist:" FASHION_DIR "?split=test", "idx", 10000, 28, 28, 1, 10);
    /* Against the files decompressed by zlib's gzread: header 16 / 8 bytes. */
    size_t ni, nl;
    uint8_t *img = gunzip_file(FASHION_DIR "/t10k-images-idx3-ubyte.gz", &ni);
    uint8_t *lab = gunzip_file(FASHION_DIR "/t10k-labels-idx1-ubyte.gz", &nl);
    assert_int_equal(ni, 16 + 10000 * 784);
    assert_int_equal(nl, 8 + 10000);
    uint64_t per_class[10] = {0};
    uint8_t buf[784];
    int64_t label;
    for (uint64_t i = 0; i < 10000; i++) {
        assert_int_equal(stk_dataset_read(ds, i, buf, sizeof buf, &label), 784);
        assert_int_equal(label, lab[8 + i]);
        assert_memory_equal(buf, img + 16 + i * 784, 784);
        per_class[label]++;
    }
    for (int c = 0; c < 10; c++)
        assert_int_equal(per_class[c], 1000); /* Fashion-MNIST test: 1000 per class */
    free(img);
    free(lab);
    stk_dataset_close(ds);

    /* Detection of the same directory. */
    ds = open_ok(FASHION_DIR);
    check_info(ds, FASHION_DIR, "idx", 60000, 28, 28, 1, 10);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cifar_hand_values),
        cmocka_unit_test(test_cifar10_dir),
        cmocka_unit_test(test_cifar10_files),
        cmocka_unit_test(test_cifar100),
        cmocka_unit_test(test_cifar_hostile),
        cmocka_unit_test(test_cifar_limits),
        cmocka_unit_test(test_idx_hand_values),
        cmocka_unit_test(test_idx_forms),
        cmocka_unit_test(test_idx_mixed_and_ndim4),
        cmocka_unit_test(test_idx_multimember_gz),
        cmocka_unit_test(test_idx_hostile_header),
        cmocka_unit_test(test_idx_hostile_data),
        cmocka_unit_test(test_uri_errors),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_concurrent_reads),
        cmocka_unit_test(test_fashion_mnist_system),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
