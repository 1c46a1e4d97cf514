/*
 * test_npy.c — the npy: reader, on .npy files written byte by byte here
 * (header dicts as numpy writes them, versions 1.0 and 2.0): every pixel and
 * label of N,H,W and N,H,W,C arrays with int64 / int32 / uint8 labels, every
 * URI form and detection, and each hostile header with its code, the file
 * name and the reason in the message. tests/python/test_npy_reader.py checks
 * the same reader against files written by numpy.save.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static uint8_t px_of(uint64_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(i * 37 + y * 11 + x * 5 + c * 3 + 1);
}

/* A .npy file: magic, version, header length, `dict` padded with spaces to
 * a multiple of 64 bytes in total and ended by '\n' (as numpy does), then
 * `data`. `raw_header` != NULL replaces the padded dict verbatim. */
static void write_npy_ex(const char *path, int major, const char *dict, const char *raw_header,
                         const void *data, size_t n)
{
    uint8_t buf[1 << 16];
    size_t pre = major == 1 ? 10 : 12, hl;
    char header[4096];
    if (raw_header) {
        hl = strlen(raw_header);
        memcpy(header, raw_header, hl);
    } else {
        hl = strlen(dict);
        memcpy(header, dict, hl);
        while ((pre + hl + 1) % 64)
            header[hl++] = ' ';
        header[hl++] = '\n';
    }
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    if (major != 1) {
        buf[10] = 0;
        buf[11] = 0;
    }
    memcpy(buf + pre, header, hl);
    assert_true(pre + hl + n <= sizeof buf);
    if (n)
        memcpy(buf + pre + hl, data, n);
    tu_write_file(path, buf, pre + hl + n);
}

static void write_npy(const char *path, const char *descr, const char *shape, const void *data,
                      size_t n)
{
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    write_npy_ex(path, 1, dict, NULL, data, n);
}

/* images (n,h,w[,c]) following px_of. */
static size_t make_images(uint8_t *out, uint64_t n, uint32_t h, uint32_t w, uint32_t c)
{
    size_t k = 0;
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t ch = 0; ch < c; ch++)
                    out[k++] = px_of(i, y, x, ch);
    return k;
}

static const char *dir_with(const char *name)
{
    const char *d = tu_path(name);
    mkdir(d, 0755);
    return d;
}

static char *join(const char *a, const char *b)
{
    char *p = malloc(strlen(a) + strlen(b) + 2);
    sprintf(p, "%s/%s", a, b);
    return p;
}

static void check_all(const char *uri, uint64_t n, uint32_t h, uint32_t w, uint32_t c,
                      const int64_t *labels, uint32_t num_classes)
{
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "npy");
    assert_int_equal(info.count, n);
    assert_int_equal(info.height, h);
    assert_int_equal(info.width, w);
    assert_int_equal(info.channels, c);
    assert_int_equal(info.num_classes, num_classes);
    uint8_t px[512];
    for (uint64_t i = 0; i < n; i++) {
        int64_t label = 12345;
        assert_int_equal(stk_dataset_read(ds, i, px, sizeof px, &label), (int64_t)h * w * c);
        assert_int_equal(label, labels[i]);
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t ch = 0; ch < c; ch++)
                    assert_int_equal(px[(y * w + x) * c + ch], px_of(i, y, x, ch));
    }
    stk_dataset_close(ds);
}

static void test_values_and_uri_forms(void **state)
{
    (void)state;
    uint8_t img[4096];
    /* N,H,W with int64 labels, in a directory: npy:DIR, detection, pair. */
    const char *d = dir_with("npy-gray");
    char *ip = join(d, "images.npy"), *lp = join(d, "labels.npy");
    size_t n = make_images(img, 5, 3, 4, 1);
    write_npy(ip, "|u1", "(5, 3, 4)", img, n);
    int64_t l64[5] = {3, 0, 9, 2, 2};
    write_npy(lp, "<i8", "(5,)", l64, sizeof l64);
    char uri[1200];
    snprintf(uri, sizeof uri, "npy:%s", d);
    check_all(uri, 5, 3, 4, 1, l64, 10);
    check_all(d, 5, 3, 4, 1, l64, 10); /* detected */
    snprintf(uri, sizeof uri, "npy:%s,%s", ip, lp);
    check_all(uri, 5, 3, 4, 1, l64, 10);
    free(ip);
    free(lp);

    /* N,H,W,C, int32 labels (one negative: num_classes unknown), format 2.0. */
    d = dir_with("npy-rgb");
    ip = join(d, "images.npy");
    lp = join(d, "labels.npy");
    n = make_images(img, 4, 2, 3, 3);
    write_npy_ex(ip, 2, "{'descr': '|u1', 'fortran_order': False, 'shape': (4, 2, 3, 3), }",
                 NULL, img, n);
    int32_t l32[4] = {1, -7, 2147483647, 0};
    write_npy(lp, "<i4", "(4,)", l32, sizeof l32);
    int64_t want32[4] = {1, -7, 2147483647, 0};
    snprintf(uri, sizeof uri, "npy:%s", d);
    check_all(uri, 4, 2, 3, 3, want32, 0);
    /* uint8 labels, keys in another order, double quotes, no trailing ','. */
    uint8_t l8[4] = {4, 1, 0, 255};
    write_npy_ex(lp, 1, "{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"|u1\"}", NULL,
                 l8, sizeof l8);
    int64_t want8[4] = {4, 1, 0, 255};
    check_all(uri, 4, 2, 3, 3, want8, 256);
    free(ip);
    free(lp);
}

/* ------------------------------------------------------------------------ */
/* Hostile files                                                             */
/* ------------------------------------------------------------------------ */

static void expect_fail(const char *uri, int code, const char *a, const char *b)
{
    stk_dataset *ds = (stk_dataset *)1;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code)
        fail_msg("%s: rc %d, expected %d (%s)", uri, rc, code, stk_errmsg());
    assert_null(ds);
    if (a && !strstr(stk_errmsg(), a))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), a);
    if (b && !strstr(stk_errmsg(), b))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), b);
}

static void test_hostile_headers(void **state)
{
    (void)state;
    uint8_t img[4096];
    size_t n = make_images(img, 3, 2, 2, 1);
    int64_t lab[3] = {0, 1, 2};
    const char *d = dir_with("npy-bad");
    char *ip = join(d, "images.npy"), *lp = join(d, "labels.npy");
    char uri[1200];
    snprintf(uri, sizeof uri, "npy:%s", d);
    write_npy(lp, "<i8", "(3,)", lab, sizeof lab);

    /* Bad magic. */
    tu_write_file(ip, "\x93NUMPX\x01\x00\x00\x00", 10);
    expect_fail(uri, STK_EFORMAT, "images.npy: not a .npy file (bad magic", NULL);
    /* Empty file. */
    tu_write_file(ip, "", 0);
    expect_fail(uri, STK_EFORMAT, "images.npy: empty file", NULL);
    /* Version 3.0. */
    write_npy_ex(ip, 3, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 2), }", NULL,
                 img, n);
    expect_fail(uri, STK_EUNSUPPORTED, "images.npy: .npy format version 3.0", NULL);
    /* Fortran order. */
    write_npy_ex(ip, 1, "{'descr': '|u1', 'fortran_order': True, 'shape': (3, 2, 2), }", NULL,
                 img, n);
    expect_fail(uri, STK_EUNSUPPORTED, "images.npy: fortran_order is True", NULL);
    /* Wrong image dtype. */
    write_npy(ip, "<f4", "(3, 1, 1)", img, 12);
    expect_fail(uri, STK_EUNSUPPORTED, "images.npy: images dtype '<f4'", NULL);
    /* Two dimensions; a zero dimension; five channels. */
    write_npy(ip, "|u1", "(3, 4)", img, 12);
    expect_fail(uri, STK_EFORMAT, "images.npy: images shape has 2 dimensions", NULL);
    write_npy(ip, "|u1", "(3, 0, 2)", img, 0);
    expect_fail(uri, STK_EFORMAT, "images.npy: images shape (3, 0, 2, 1)", "nonzero");
    write_npy(ip, "|u1", "(3, 1, 1, 5)", img, 15);
    expect_fail(uri, STK_EFORMAT, "C 1 to 4", NULL);
    /* Truncated data, trailing bytes. */
    write_npy(ip, "|u1", "(3, 2, 2)", img, n - 1);
    expect_fail(uri, STK_EFORMAT, "images.npy: truncated: the shape needs 12 data bytes", NULL);
    write_npy(ip, "|u1", "(3, 2, 2)", img, n + 2);
    expect_fail(uri, STK_EFORMAT, "images.npy: 2 trailing bytes after the array's data", NULL);
    /* Header length past the end of the file. */
    {
        uint8_t b[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x00, '{', '}'};
        tu_write_file(ip, b, 12);
        expect_fail(uri, STK_EFORMAT, "images.npy: truncated: the .npy header needs 265 bytes",
                    NULL);
    }
    /* Grammar: no newline, unknown key, repeated key, missing key, "(3)",
     * a call instead of a literal, a huge dimension. */
    write_npy_ex(ip, 1, NULL, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 2), } ",
                 img, n);
    expect_fail(uri, STK_EFORMAT, "images.npy: .npy header does not end with a newline", NULL);
    write_npy_ex(ip, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 2), 'x': 1}",
                 NULL, img, n);
    expect_fail(uri, STK_EFORMAT, "images.npy: .npy header: unknown key 'x'", NULL);
    write_npy_ex(ip, 1, "{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (3, "
                        "2, 2)}", NULL, img, n);
    expect_fail(uri, STK_EFORMAT, "bad or repeated 'descr'", NULL);
    write_npy_ex(ip, 1, "{'descr': '|u1', 'shape': (3, 2, 2)}", NULL, img, n);
    expect_fail(uri, STK_EFORMAT, "images.npy: .npy header lacks 'fortran_order'", NULL);
    write_npy(lp, "<i8", "(3)", lab, sizeof lab);
    write_npy(ip, "|u1", "(3, 2, 2)", img, n);
    expect_fail(uri, STK_EFORMAT, "labels.npy: .npy header: bad or repeated 'shape'", NULL);
    write_npy_ex(ip, 1, "{'descr': '|u1', 'fortran_order': bool(1), 'shape': (3, 2, 2)}", NULL,
                 img, n);
    expect_fail(uri, STK_EFORMAT, "'fortran_order' is not True or False", NULL);
    write_npy(ip, "|u1", "(3, 2, 99999999999999999999)", img, n);
    expect_fail(uri, STK_EFORMAT, "images.npy: .npy header: bad or repeated 'shape'", NULL);

    /* Labels: dtype, count mismatch, ndim, big-endian. */
    write_npy(ip, "|u1", "(3, 2, 2)", img, n);
    write_npy(lp, "<f8", "(3,)", lab, sizeof lab);
    expect_fail(uri, STK_EUNSUPPORTED, "labels.npy: labels dtype '<f8'", NULL);
    write_npy(lp, ">i8", "(3,)", lab, sizeof lab);
    expect_fail(uri, STK_EUNSUPPORTED, "labels.npy: labels dtype '>i8'", NULL);
    int64_t four[4] = {0, 1, 2, 3};
    write_npy(lp, "<i8", "(4,)", four, sizeof four);
    expect_fail(uri, STK_EFORMAT, "labels.npy: labels shape must be (3,) to match the images",
                NULL);
    write_npy(lp, "<i8", "(3, 1)", lab, sizeof lab);
    expect_fail(uri, STK_EFORMAT, "labels shape must be (3,)", "2 dimensions");
    write_npy(lp, "<i8", "(3,)", lab, sizeof lab - 1);
    expect_fail(uri, STK_EFORMAT, "labels.npy: truncated", NULL);

    /* URI forms. */
    write_npy(lp, "<i8", "(3,)", lab, sizeof lab);
    snprintf(uri, sizeof uri, "npy:%s,%s,%s", ip, lp, lp);
    expect_fail(uri, STK_EINVAL, "must name two files, IMAGES,LABELS", NULL);
    snprintf(uri, sizeof uri, "npy:%s/missing", d);
    expect_fail(uri, STK_ENOENT, "missing: no such directory", NULL);
    snprintf(uri, sizeof uri, "npy:%s,%s/missing.npy", ip, d);
    expect_fail(uri, STK_ENOENT, "missing.npy: no such file", NULL);
    snprintf(uri, sizeof uri, "npy:%s?mode=fast", d);
    expect_fail(uri, STK_EINVAL, "npy: unknown query key 'mode'", "known keys: images and labels");
    snprintf(uri, sizeof uri, "npy:%s?images=x", d);
    expect_fail(uri, STK_EINVAL, "name the members of a .npz file", NULL);
    snprintf(uri, sizeof uri, "npy:%s", d);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0); /* all repaired */
    stk_dataset_close(ds);
    free(ip);
    free(lp);
}

/* The reader table feeds stk_dataset_reader and the unknown-prefix message. */
static void test_reader_table(void **state)
{
    (void)state;
    static const char *const want[] = {"stk",       "cifar10",  "cifar100", "idx",
                                       "mnist",     "fashion-mnist", "npy", "zarr",
                                       "tfrecord",  "wds",      "webdataset", "lmdb",
                                       "recordio",  "hdf5",     "coco",     "segfolder",
                                       "imagefolder", "list"};
    const size_t nwant = sizeof want / sizeof want[0];
    const char *form = NULL, *desc = NULL;
    uint32_t i = 0;
    for (; stk_dataset_reader(i, &form, &desc); i++) {
        assert_true(i < nwant);
        assert_string_equal(stk_dataset_reader(i, NULL, NULL), want[i]);
        assert_int_equal(strncmp(form, want[i], strlen(want[i])), 0);
        assert_int_equal(form[strlen(want[i])], ':');
        assert_true(strlen(desc) > 10);
    }
    assert_int_equal(i, nwant);
    /* The message lists every prefix, in table order. */
    char expect[1024] = "unknown dataset URI prefix 'numpy:' in 'numpy:x' (known prefixes: ";
    for (i = 0; i < nwant; i++) {
        strcat(expect, want[i]);
        strcat(expect, i + 1 < nwant ? ":, " : ":; or a path to detect)");
    }
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open("numpy:x", NULL, &ds), STK_EINVAL);
    assert_string_equal(stk_errmsg(), expect);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_uri_forms),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_reader_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
