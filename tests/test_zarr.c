/*
 * test_zarr.c — the zarr: reader on groups written byte by byte here
 * (.zarray JSON as zarr-python writes it, raw and zstd chunks made with
 * libzstd): every pixel and label (pixel = f(sample, y, x, c)), partial last
 * chunks, missing chunks read as fill_value, the strict JSON parser's
 * refusals with the byte and reason, and the per-thread chunk cache in the
 * caller's scratch: a hit serves the decoded chunk without touching the
 * file, a failed load caches nothing, and a scratch reused by another open
 * of the same path never serves the old dataset's bytes (the generation id).
 * tests/python/test_zarr_reader.py checks the reader against zarr-python.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include "core/util.h"
#include "format/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "testutil.h"

enum { N = 10, H = 3, W = 4, C = 2, CHUNK = 4 }; /* chunks 0..2, the last partial */
#define SAMPLE (H * W * C)

static uint8_t px_of(uint64_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(i * 37 + y * 11 + x * 5 + c * 3 + 1);
}

static const char *mkdirp(const char *path)
{
    mkdir(path, 0755);
    return path;
}

static char *cat(const char *a, const char *b)
{
    char *p = malloc(strlen(a) + strlen(b) + 2);
    sprintf(p, "%s/%s", a, b);
    return p;
}

static void put(const char *dir, const char *name, const void *data, size_t n)
{
    char *p = cat(dir, name);
    tu_write_file(p, data, n);
    free(p);
}

static void put_text(const char *dir, const char *name, const char *text)
{
    put(dir, name, text, strlen(text));
}

/* Chunk c of the images, full size (zarr pads the last chunk), `salt`
 * added to every pixel. */
static void image_chunk(uint64_t c, uint8_t salt, uint8_t *out)
{
    memset(out, 0, CHUNK * SAMPLE);
    for (uint64_t k = 0; k < CHUNK && c * CHUNK + k < N; k++)
        for (uint32_t y = 0; y < H; y++)
            for (uint32_t x = 0; x < W; x++)
                for (uint32_t ch = 0; ch < C; ch++)
                    out[k * SAMPLE + (y * W + x) * C + ch] =
                        (uint8_t)(px_of(c * CHUNK + k, y, x, ch) + salt);
}

/* A group at tu_path(name): images (N,H,W,C) chunks (CHUNK,H,W,C) with
 * `compressor` ("null" or zstd), int16 labels i*3-4 in chunks of 3. */
static const char *make_group(const char *name, int zstd, const char *fill, uint8_t salt)
{
    const char *g = tu_path(name);
    char meta[512];
    mkdirp(g);
    char *img = cat(g, "images"), *lab = cat(g, "labels");
    mkdirp(img);
    mkdirp(lab);
    put_text(g, ".zgroup", "{\n    \"zarr_format\": 2\n}");
    snprintf(meta, sizeof meta,
             "{\n    \"chunks\": [\n        %d,\n        %d,\n        %d,\n        %d\n    ],\n"
             "    \"compressor\": %s,\n    \"dtype\": \"|u1\",\n    \"fill_value\": %s,\n"
             "    \"filters\": null,\n    \"order\": \"C\",\n    \"shape\": [%d, %d, %d, %d],\n"
             "    \"zarr_format\": 2\n}",
             CHUNK, H, W, C, zstd ? "{\"id\": \"zstd\", \"level\": 1}" : "null", fill, N, H, W,
             C);
    put_text(img, ".zarray", meta);
    for (uint64_t c = 0; c < 3; c++) {
        uint8_t raw[CHUNK * SAMPLE], z[CHUNK * SAMPLE + 256];
        char key[32];
        image_chunk(c, salt, raw);
        snprintf(key, sizeof key, "%llu.0.0.0", (unsigned long long)c);
        if (zstd) {
            size_t k = ZSTD_compress(z, sizeof z, raw, sizeof raw, 1);
            assert_false(ZSTD_isError(k));
            put(img, key, z, k);
        } else {
            put(img, key, raw, sizeof raw);
        }
    }
    put_text(lab, ".zarray",
             "{\"chunks\": [3], \"compressor\": null, \"dtype\": \"<i2\", \"fill_value\": 0, "
             "\"filters\": null, \"order\": \"C\", \"shape\": [10], \"zarr_format\": 2}");
    for (int c = 0; c < 4; c++) {
        uint8_t b[6] = {0};
        char key[8];
        for (int k = 0; k < 3 && c * 3 + k < N; k++) {
            int16_t v = (int16_t)((c * 3 + k) * 3 - 4);
            b[2 * k] = (uint8_t)v;
            b[2 * k + 1] = (uint8_t)((uint16_t)v >> 8);
        }
        snprintf(key, sizeof key, "%d", c);
        put(lab, key, b, sizeof b);
    }
    free(img);
    free(lab);
    return g;
}

static void check_sample(const uint8_t *p, uint64_t i, uint8_t salt)
{
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++)
            for (uint32_t ch = 0; ch < C; ch++)
                assert_int_equal(p[(y * W + x) * C + ch], (uint8_t)(px_of(i, y, x, ch) + salt));
}

static void test_values(void **state)
{
    (void)state;
    for (int zstd = 0; zstd < 2; zstd++) {
        const char *g = make_group(zstd ? "vz" : "vn", zstd, "0", 0);
        char uri[512];
        for (int form = 0; form < 2; form++) {
            snprintf(uri, sizeof uri, form ? "%s" : "zarr:%s", g);
            stk_dataset *ds;
            if (stk_dataset_open(uri, NULL, &ds) != 0)
                fail_msg("open %s: %s", uri, stk_errmsg());
            stk_dataset_info info;
            stk_dataset_info_get(ds, &info);
            assert_string_equal(info.format, "zarr");
            assert_int_equal(info.count, N);
            assert_int_equal(info.height, H);
            assert_int_equal(info.width, W);
            assert_int_equal(info.channels, C);
            assert_int_equal(info.num_classes, 0); /* a label is negative */
            uint8_t px[SAMPLE];
            for (uint64_t i = 0; i < N; i++) {
                int64_t label = 999;
                assert_int_equal(stk_dataset_read(ds, i, px, sizeof px, &label), SAMPLE);
                assert_int_equal(label, (int64_t)i * 3 - 4);
                check_sample(px, i, 0);
            }
            stk_dataset_close(ds);
        }
    }
}

static int64_t read_view(stk_dataset *ds, uint64_t i, stk_scratch *s, const uint8_t **p)
{
    stk_sample smp;
    int rc = ds->vt->read(ds, i, &smp, s);
    *p = rc == 0 ? smp.image.pixels : NULL;
    return rc;
}

static void test_chunk_cache(void **state)
{
    (void)state;
    const char *g = make_group("cache", 1, "null", 0);
    char uri[512], *c0 = cat(g, "images/0.0.0.0"), *c2 = cat(g, "images/2.0.0.0");
    snprintf(uri, sizeof uri, "zarr:%s", g);
    stk_dataset *ds;
    stk_scratch s = {0}, fresh = {0};
    const uint8_t *p;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);

    /* chunk 0 loaded, then its file removed: samples 1..3 come from the
     * cache; a fresh scratch finds the chunk missing (fill_value null) */
    size_t n0;
    uint8_t *saved = tu_read_file(c0, &n0);
    assert_non_null(saved);
    assert_int_equal(read_view(ds, 0, &s, &p), 0);
    check_sample(p, 0, 0);
    const uint8_t *base = s.data;
    assert_int_equal(unlink(c0), 0);
    for (uint64_t i = 1; i < 4; i++) {
        assert_int_equal(read_view(ds, i, &s, &p), 0);
        check_sample(p, i, 0);
        assert_ptr_equal(p, base + 32 + i * SAMPLE); /* in the scratch, after the header */
    }
    int64_t l = 0; /* labels come from the table, no chunk needed */
    assert_int_equal(stk_dataset_label(ds, 2, &l), 0);
    assert_int_equal(l, 2 * 3 - 4);
    assert_int_equal(read_view(ds, 2, &fresh, &p), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "sample 2: "));
    assert_non_null(strstr(stk_errmsg(), "images/0.0.0.0: chunk file missing and the array's "
                                         "fill_value is null"));

    /* another chunk replaces it in the same scratch; chunk 0 is then gone */
    assert_int_equal(read_view(ds, 9, &s, &p), 0);
    check_sample(p, 9, 0);
    assert_int_equal(read_view(ds, 0, &s, &p), STK_EDATA);
    tu_write_file(c0, saved, n0);

    /* a damaged chunk caches nothing: the next read of it fails again, and
     * the good chunk held before it must be loaded again */
    assert_int_equal(read_view(ds, 5, &s, &p), 0);
    size_t n2;
    uint8_t *z2 = tu_read_file(c2, &n2);
    assert_non_null(z2);
    z2[n2 / 2] ^= 0xFF;
    z2[6] ^= 0x55;
    tu_write_file(c2, z2, n2);
    assert_int_equal(read_view(ds, 8, &s, &p), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "images/2.0.0.0: "));
    assert_int_equal(read_view(ds, 9, &s, &p), STK_EDATA);
    char *c1 = cat(g, "images/1.0.0.0");
    size_t n1;
    uint8_t *z1 = tu_read_file(c1, &n1);
    assert_int_equal(unlink(c1), 0); /* chunk 1 can no longer come from the cache */
    assert_int_equal(read_view(ds, 5, &s, &p), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "images/1.0.0.0: chunk file missing"));
    tu_write_file(c1, z1, n1);
    assert_int_equal(read_view(ds, 5, &s, &p), 0);
    check_sample(p, 5, 0);
    free(z1);
    free(c1);
    stk_dataset_close(ds);

    /* the same path rewritten with other pixels and opened again: the
     * scratch still holds chunk 1 of the old dataset, and must not serve it */
    g = make_group("cache", 1, "null", 100);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    assert_int_equal(read_view(ds, 5, &s, &p), 0);
    check_sample(p, 5, 100);
    stk_dataset_close(ds);

    stk_scratch_free(&s);
    stk_scratch_free(&fresh);
    free(saved);
    free(z2);
    free(c0);
    free(c2);
}

static void test_missing_chunk_fill(void **state)
{
    (void)state;
    const char *g = make_group("fill", 0, "7", 0);
    char uri[512], *c1 = cat(g, "images/1.0.0.0");
    snprintf(uri, sizeof uri, "zarr:%s", g);
    assert_int_equal(unlink(c1), 0);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    /* the spec's fill_value, but counted and named for verify */
    const char *gone = stk_dataset_metadata(ds, "missing_chunks");
    assert_non_null(gone);
    assert_true(strncmp(gone, "1 of 3 chunk files of ", 22) == 0);
    assert_non_null(strstr(gone, g));
    assert_non_null(strstr(gone, "images are missing (their samples read as fill_value 7): "
                                 "1.0.0.0"));
    assert_int_equal(strstr(gone, "1.0.0.0")[7], '\0');
    assert_null(stk_dataset_metadata(ds, "class_names"));
    uint8_t px[SAMPLE];
    int64_t label;
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(stk_dataset_read(ds, i, px, sizeof px, &label), SAMPLE);
        if (i >= 4 && i < 8) {
            for (int k = 0; k < SAMPLE; k++)
                assert_int_equal(px[k], 7);
        } else {
            check_sample(px, i, 0);
        }
    }
    /* an uncompressed chunk file is mapped at open: truncated while open,
     * the samples whose bytes remain still read, the others are STK_EDATA
     * (read_check) */
    char *c2 = cat(g, "images/2.0.0.0");
    uint8_t raw[CHUNK * SAMPLE];
    image_chunk(2, 0, raw);
    tu_write_file(c2, raw, 30);
    assert_int_equal(stk_dataset_read(ds, 8, px, sizeof px, &label), SAMPLE);
    check_sample(px, 8, 0);
    assert_int_equal(stk_dataset_read(ds, 9, px, sizeof px, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), ": sample 9: "));
    assert_non_null(strstr(stk_errmsg(), "images/2.0.0.0 was truncated while open (only its "
                                         "first 30 of 96 bytes remain)"));
    stk_dataset_close(ds);
    /* opened with that chunk file short: STK_EDATA naming file and sizes */
    tu_write_file(c2, raw, sizeof raw - 1);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    assert_int_equal(stk_dataset_read(ds, 8, px, sizeof px, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "images/2.0.0.0: chunk file of 95 bytes; a none chunk "
                                         "of 96 decoded bytes is stored as exactly that many"));
    tu_write_file(c2, raw, sizeof raw); /* repaired: read the pread way */
    assert_int_equal(stk_dataset_read(ds, 9, px, sizeof px, &label), SAMPLE);
    check_sample(px, 9, 0);
    char name[1024];
    stk_dataset_sample_name(ds, 9, name, sizeof name);
    assert_non_null(strstr(name, ": sample 9 (chunk file "));
    assert_non_null(strstr(name, "images/2.0.0.0, item 1)"));
    stk_dataset_close(ds);
    free(c1);
    free(c2);
}

/* The .zarray text `meta` for the images of a fresh copy of the group:
 * open fails with `code` and a message holding `want`. */
static void expect_meta_fail(const char *meta, int code, const char *want)
{
    const char *g = make_group("bad", 0, "0", 0);
    char *img = cat(g, "images"), uri[512];
    put_text(img, ".zarray", meta);
    snprintf(uri, sizeof uri, "zarr:%s", g);
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code || !strstr(stk_errmsg(), want) || !strstr(stk_errmsg(), "images/.zarray"))
        fail_msg("meta %s: rc %d, message '%s' (wanted %d, '%s')", meta, rc, stk_errmsg(), code,
                 want);
    assert_null(ds);
    free(img);
}

#define GOOD_REST                                                                          \
    "\"compressor\": null, \"dtype\": \"|u1\", \"fill_value\": 0, \"filters\": null, "     \
    "\"order\": \"C\", \"zarr_format\": 2"

static void test_json_and_meta(void **state)
{
    (void)state;
    /* the JSON grammar */
    expect_meta_fail("", STK_EFORMAT, "1 to 1048576 expected");
    expect_meta_fail("{", STK_EFORMAT, "malformed JSON at byte 1: a quoted key expected");
    expect_meta_fail("{\"a\" 1}", STK_EFORMAT, "at byte 5: ':' expected");
    expect_meta_fail("{\"a\": tru}", STK_EFORMAT, "at byte 6: unexpected character");
    expect_meta_fail("{\"a\": -}", STK_EFORMAT, "bad number");
    expect_meta_fail("{\"a\": 1.}", STK_EFORMAT, "bad number");
    expect_meta_fail("{\"a\": 1e}", STK_EFORMAT, "bad number");
    expect_meta_fail("{\"a\": \"x\ty\"}", STK_EFORMAT, "control character in a string");
    expect_meta_fail("{\"a\": \"\\u12g4\"}", STK_EFORMAT, "bad \\u escape");
    expect_meta_fail("{\"a\": \"abc", STK_EFORMAT, "unterminated string");
    expect_meta_fail("{\"a\": [1,]}", STK_EFORMAT, "unexpected character");
    expect_meta_fail("{\"a\": 1, \"a\": 2}", STK_EFORMAT, "duplicate key");
    expect_meta_fail("{\"a\": 1}{", STK_EFORMAT, "text after the value");
    /* a JSON with 5000 values passes the node limit */
    {
        char *big = malloc(5000 * 3 + 32);
        size_t k = (size_t)sprintf(big, "{\"a\": [");
        for (int i = 0; i < 5000; i++)
            k += (size_t)sprintf(big + k, "%s1", i ? "," : "");
        strcpy(big + k, "]}");
        expect_meta_fail(big, STK_EFORMAT, "too many values");
        free(big);
    }
    /* the metadata */
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], \"compressor\": null, "
                     "\"dtype\": \"|u1\", \"fill_value\": 0, \"order\": \"C\", \"zarr_format\": 2}",
                     STK_EFORMAT, "lacks 'filters'");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4], " GOOD_REST "}",
                     STK_EFORMAT, "shape and chunks differ in length");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [0, 3, 4, 2], " GOOD_REST "}",
                     STK_EFORMAT, "shape/chunks item 0 is not an integer in range");
    expect_meta_fail("{\"shape\": [10, 3, 4.5, 2], \"chunks\": [4, 3, 4, 2], " GOOD_REST "}",
                     STK_EFORMAT, "shape/chunks item 2");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2, 1], \"chunks\": [4, 3, 4, 2, 1], " GOOD_REST "}",
                     STK_EFORMAT, "images have 5 dimensions");
    expect_meta_fail("{\"shape\": [10, 3, 4, 5], \"chunks\": [4, 3, 4, 5], " GOOD_REST "}",
                     STK_EFORMAT, "C 1 to 4");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 1], " GOOD_REST "}",
                     STK_EUNSUPPORTED, "chunked along axis 3 (chunks 1 of 2)");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], "
                     "\"compressor\": {\"level\": 1}, \"dtype\": \"|u1\", \"fill_value\": 0, "
                     "\"filters\": null, \"order\": \"C\", \"zarr_format\": 2}",
                     STK_EFORMAT, "compressor is neither null nor an object with an \"id\"");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], "
                     "\"compressor\": {\"id\": \"gzip\"}, \"dtype\": \"|u1\", \"fill_value\": 0, "
                     "\"filters\": null, \"order\": \"C\", \"zarr_format\": 2}",
                     STK_EUNSUPPORTED, "compressor 'gzip' is not supported");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], "
                     "\"compressor\": null, \"dtype\": \"|b1\", \"fill_value\": 0, "
                     "\"filters\": null, \"order\": \"C\", \"zarr_format\": 2}",
                     STK_EUNSUPPORTED, "dtype '|b1'");
    expect_meta_fail("{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], " GOOD_REST
                     ", \"dimension_separator\": 1}", STK_EFORMAT, "dimension_separator");
    /* filters [] means none; unknown keys are ignored (the v2 spec) */
    const char *g = make_group("ok", 0, "0", 0);
    char *img = cat(g, "images"), uri[512];
    put_text(img, ".zarray",
             "{\"shape\": [10, 3, 4, 2], \"chunks\": [4, 3, 4, 2], \"compressor\": null, "
             "\"dtype\": \"<u1\", \"fill_value\": null, \"filters\": [], \"order\": \"C\", "
             "\"zarr_format\": 2, \"attrs\": {\"x\": [true, false, null, -1.5e3, \"\\u00e9\"]}}");
    snprintf(uri, sizeof uri, "zarr:%s", g);
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    stk_dataset_close(ds);
    free(img);
}

/* More chunk files than are mapped (4096): uncompressed samples are pread
 * from their chunk files; '/' separated keys; a missing file is
 * fill_value, a short one STK_EDATA. */
static void test_pread_path(void **state)
{
    (void)state;
    enum { M = 4100 };
    const char *g = tu_path("many");
    char *img = cat(g, "images"), *lab = cat(g, "labels"), uri[512], key[64];
    mkdirp(g);
    mkdirp(img);
    mkdirp(lab);
    put_text(g, ".zgroup", "{\"zarr_format\": 2}");
    put_text(img, ".zarray",
             "{\"chunks\": [1, 1, 2], \"compressor\": null, \"dtype\": \"|u1\", "
             "\"fill_value\": 200, \"filters\": null, \"order\": \"C\", \"shape\": [4100, 1, "
             "2], \"zarr_format\": 2, \"dimension_separator\": \"/\"}");
    for (int i = 0; i < M; i++) {
        uint8_t b[2] = {(uint8_t)i, (uint8_t)(i >> 8)};
        snprintf(key, sizeof key, "%d", i);
        char *d = cat(img, key);
        mkdirp(d);
        char *d0 = cat(d, "0");
        mkdirp(d0);
        if (i != 17)
            put(d0, "0", b, i == 4099 ? 1 : 2);
        free(d0);
        free(d);
    }
    put_text(lab, ".zarray",
             "{\"chunks\": [5000], \"compressor\": null, \"dtype\": \"|u1\", \"fill_value\": 3, "
             "\"filters\": null, \"order\": \"C\", \"shape\": [4100], \"zarr_format\": 2}");
    snprintf(uri, sizeof uri, "zarr:%s", g);
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    uint8_t px[2];
    int64_t label;
    for (int i = 0; i < M - 1; i++) {
        assert_int_equal(stk_dataset_read(ds, (uint64_t)i, px, 2, &label), 2);
        assert_int_equal(label, 3); /* the labels chunk is missing: fill_value */
        assert_int_equal(px[0], i == 17 ? 200 : (uint8_t)i);
        assert_int_equal(px[1], i == 17 ? 200 : (uint8_t)(i >> 8));
    }
    assert_int_equal(stk_dataset_read(ds, M - 1, px, 2, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "images/4099/0/0: chunk file of 1 bytes; a none chunk "
                                         "of 2 decoded bytes"));
    /* not mapped: each chunk file looked up; the short one is not missing */
    const char *gone = stk_dataset_metadata(ds, "missing_chunks");
    assert_non_null(gone);
    assert_non_null(strstr(gone, "1 of 4100 chunk files of "));
    assert_non_null(strstr(gone, "images are missing (their samples read as fill_value 200): "
                                 "17/0/0"));
    stk_dataset_close(ds);
    /* more than five missing: the first five named, the rest counted */
    for (int i = 0; i < 9; i++) {
        snprintf(key, sizeof key, "%d/0/0", 100 + i);
        char *f = cat(img, key);
        assert_int_equal(unlink(f), 0);
        free(f);
    }
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    gone = stk_dataset_metadata(ds, "missing_chunks");
    assert_non_null(gone);
    assert_non_null(strstr(gone, "10 of 4100 chunk files"));
    assert_non_null(strstr(gone, "): 17/0/0, 100/0/0, 101/0/0, 102/0/0, 103/0/0, ... (5 more)"));
    stk_dataset_close(ds);
    free(img);
    free(lab);
}

static void test_reader_row(void **state)
{
    (void)state;
    const char *form = NULL;
    uint32_t i = 0;
    const char *p;
    while ((p = stk_dataset_reader(i, &form, NULL)) && strcmp(p, "zarr"))
        i++;
    assert_non_null(p);
    assert_string_equal(form, "zarr:DIR[?images=ARR&labels=ARR]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_chunk_cache),
        cmocka_unit_test(test_missing_chunk_fill),
        cmocka_unit_test(test_json_and_meta),
        cmocka_unit_test(test_pread_path),
        cmocka_unit_test(test_reader_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
