/*
 * test_coco.c — the coco: reader on annotation files written by hand here:
 * the samples' order (image id), boxes converted from [x, y, w, h] to XYXY
 * and clipped, category ids mapped to contiguous labels with their names,
 * the crowd= / empty= / missing= policies, masks painted from rectangles
 * (whose pixels are known by hand: pycocotools fills the pixels whose
 * centres lie inside an axis-aligned rectangle of integer corners) and from
 * RLE counts, compressed strings included (encoded here by hand as cocoapi
 * defines them), every bad input with its code and the file and id in the
 * message, and reads from several threads at once.
 * tests/python/test_coco_reader.py checks general polygons and RLEs
 * against pycocotools itself.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "format/dataset.h"
#include "stoker/stoker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* A w x h PNG of one grey level at DIR/name. */
static void png(const char *dir, const char *name, uint32_t w, uint32_t h)
{
    char path[1024];
    uint8_t *px = malloc((size_t)w * h * 3);
    assert_non_null(px);
    memset(px, 100, (size_t)w * h * 3);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(stk_png_write_rgb8(path, px, w, h, (size_t)w * 3), 0);
    free(px);
}

static const char *write_json(const char *name, const char *text)
{
    const char *p = tu_path(name);
    tu_write_file(p, text, strlen(text));
    return p;
}

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("%s: %s", uri, stk_errmsg());
    return ds;
}

static void expect_open_fail(const char *uri, int code, const char *a, const char *b)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code)
        fail_msg("%s: rc %d, expected %d (%s)", uri, rc, code, stk_errmsg());
    assert_null(ds);
    if (a && !strstr(stk_errmsg(), a))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), a);
    if (b && !strstr(stk_errmsg(), b))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), b);
}

/* Field `name` of sample i, copied (stk_dataset_read_field). */
static void *field(const stk_dataset *ds, uint64_t i, const char *name, size_t *size,
                   uint32_t shape[3])
{
    void *d = NULL;
    size_t n = 0;
    if (stk_dataset_read_field(ds, i, name, &d, &n, shape) != 0)
        fail_msg("%s field %s of %llu: %s", ds->uri, name, (unsigned long long)i, stk_errmsg());
    if (size)
        *size = n;
    return d;
}

/* The images directory of the tests: a.png 8x6 (id 30), b.png 5x4 (id 10),
 * c.png 4x4 (id 20), sub/d.png 3x2 (id 40). */
static const char *images_dir(void)
{
    static char dir[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s", tu_path("img"));
        mkdir(dir, 0755);
        char sub[600];
        snprintf(sub, sizeof sub, "%s/sub", dir);
        mkdir(sub, 0755);
        png(dir, "a.png", 8, 6);
        png(dir, "b.png", 5, 4);
        png(dir, "c.png", 4, 4);
        png(dir, "sub/d.png", 3, 2);
    }
    return dir;
}

#define CATS "\"categories\": [{\"id\": 5, \"name\": \"b\"}, {\"id\": 2, \"name\": \"a\"}," \
             " {\"id\": 9, \"name\": \"c c\"}]"
#define IMAGES "\"images\": [" \
    "{\"id\": 30, \"file_name\": \"a.png\", \"height\": 6, \"width\": 8}," \
    "{\"id\": 10, \"file_name\": \"b.png\", \"height\": 4, \"width\": 5}," \
    "{\"id\": 40, \"file_name\": \"sub/d.png\", \"height\": 2, \"width\": 3}," \
    "{\"id\": 20, \"file_name\": \"c.png\", \"height\": 4, \"width\": 4}]"

/* Image 30 (8x6): a rectangle of category 5 over [1,4)x[1,3), then one of
 * category 2 over [3,7)x[2,5) (overlapping), a crowd RLE of category 9.
 * Image 10 (5x4): a box overshooting the image, no segmentation needed
 * with masks=none; with masks it has an uncompressed RLE. Image 20 (4x4):
 * a compressed RLE "263K1" (counts 2, 6, 3, 1, 4) and a two-part polygon.
 * Image 40: nothing. */
static const char *good_json(void)
{
    return write_json("good.json", "{" CATS ", " IMAGES ", \"annotations\": ["
        "{\"id\": 1, \"image_id\": 30, \"category_id\": 5, \"bbox\": [1, 1, 3, 2],"
        " \"segmentation\": [[1, 1, 4, 1, 4, 3, 1, 3]], \"iscrowd\": 0},"
        "{\"id\": 7, \"image_id\": 10, \"category_id\": 9, \"bbox\": [-1.5, 2.25, 10, 0.5],"
        " \"segmentation\": {\"size\": [4, 5], \"counts\": [3, 2, 14, 1]}, \"iscrowd\": 1},"
        "{\"id\": 2, \"image_id\": 30, \"category_id\": 2, \"bbox\": [3, 2, 4, 3],"
        " \"segmentation\": [[3, 2, 7, 2, 7, 5, 3, 5]]},"
        "{\"id\": 3, \"image_id\": 30, \"category_id\": 9, \"bbox\": [0, 0, 2, 1],"
        " \"segmentation\": {\"size\": [6, 8], \"counts\": [0, 1, 47]}, \"iscrowd\": 1},"
        "{\"id\": 4, \"image_id\": 20, \"category_id\": 5, \"bbox\": [0, 0, 4, 4],"
        " \"segmentation\": {\"size\": [4, 4], \"counts\": \"263K1\"}},"
        "{\"id\": 5, \"image_id\": 20, \"category_id\": 2, \"bbox\": [3, 3, 0, 1],"
        " \"segmentation\": [[3, 0, 4, 0, 4, 1, 3, 1], [0, 3, 1, 3, 1, 4, 0, 4], [2, 2]]}"
        "]}");
}

static char *uri_of(const char *json, const char *extra)
{
    static char uri[4][2048];
    static int k;
    char *u = uri[k++ % 4];
    snprintf(u, sizeof uri[0], "coco:%s?annotations=%s%s", images_dir(), json, extra);
    return u;
}

static void expect_boxes(const stk_dataset *ds, uint64_t i, const float *want, size_t k)
{
    size_t n;
    float *b = field(ds, i, "boxes", &n, NULL);
    assert_int_equal(n, k * 4 * sizeof(float));
    for (size_t j = 0; j < 4 * k; j++)
        if (b[j] != want[j])
            fail_msg("sample %llu box value %zu: %g, expected %g", (unsigned long long)i, j,
                     b[j], want[j]);
    stk_free(b);
}

static void expect_i64(const stk_dataset *ds, uint64_t i, const char *name, const int64_t *want,
                       size_t k)
{
    size_t n;
    int64_t *v = field(ds, i, name, &n, NULL);
    assert_int_equal(n, k * sizeof(int64_t));
    for (size_t j = 0; j < k; j++)
        if (v[j] != want[j])
            fail_msg("sample %llu %s[%zu]: %lld, expected %lld", (unsigned long long)i, name, j,
                     (long long)v[j], (long long)want[j]);
    stk_free(v);
}

/* The mask of sample i against rows of text ('0'..'9'). */
static void expect_mask(const stk_dataset *ds, uint64_t i, uint32_t h, uint32_t w,
                        const char *const *rows)
{
    size_t n;
    uint32_t shape[3] = {0};
    uint8_t *m = field(ds, i, "mask", &n, shape);
    assert_int_equal(shape[0], h);
    assert_int_equal(shape[1], w);
    assert_int_equal(shape[2], 1);
    assert_int_equal(n, (size_t)h * w);
    for (uint32_t r = 0; r < h; r++)
        for (uint32_t c = 0; c < w; c++)
            if (m[r * w + c] != rows[r][c] - '0')
                fail_msg("sample %llu mask (%u, %u): %u, expected %c", (unsigned long long)i, r,
                         c, m[r * w + c], rows[r][c]);
    stk_free(m);
}

static void test_values(void **state)
{
    (void)state;
    const char *json = good_json();
    stk_dataset *ds = open_ok(uri_of(json, ""));
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "coco");
    assert_int_equal(info.count, 4);
    assert_int_equal(info.height, 0);
    assert_int_equal(info.num_classes, 3);
    /* labels by increasing category id: 2 -> 0 "a", 5 -> 1 "b", 9 -> 2 */
    assert_string_equal(stk_dataset_class_name(ds, 0), "a");
    assert_string_equal(stk_dataset_class_name(ds, 1), "b");
    assert_string_equal(stk_dataset_class_name(ds, 2), "c c");
    assert_null(stk_dataset_class_name(ds, 3));
    assert_string_equal(stk_dataset_metadata(ds, "category_ids"), "2,5,9");
    assert_string_equal(stk_dataset_metadata(ds, "annotations"), json);
    assert_string_equal(stk_dataset_metadata(ds, "images_dir"), images_dir());

    /* fields */
    static const char *const names[] = {"image", "label", "boxes", "box_labels", "image_id",
                                        "iscrowd"};
    assert_int_equal(stk_dataset_field_count(ds), 6);
    for (uint32_t f = 0; f < 6; f++) {
        stk_field_info fi;
        assert_int_equal(stk_dataset_field_info(ds, f, &fi), 0);
        assert_string_equal(fi.name, names[f]);
    }
    stk_field_info fi;
    assert_int_equal(stk_dataset_field_info(ds, 2, &fi), 0);
    assert_int_equal(fi.type, STK_FIELD_FLOAT32);
    assert_int_equal(fi.ndim, 2);
    assert_int_equal(fi.dims[0], 0);
    assert_int_equal(fi.dims[1], 4);
    assert_int_equal(stk_dataset_field_info(ds, 3, &fi), 0);
    assert_int_equal(fi.type, STK_FIELD_INT64);
    assert_int_equal(fi.ndim, 1);
    assert_int_equal(fi.dims[0], 0);
    assert_int_equal(stk_dataset_field_info(ds, 0, &fi), 0);
    assert_int_equal(fi.type, STK_FIELD_IMAGE);
    assert_int_equal(stk_dataset_field_info(ds, 6, &fi), STK_EINVAL);

    /* samples by image id: 10 (b.png), 20 (c.png), 30 (a.png), 40 (sub/d.png) */
    static const int64_t ids[] = {10, 20, 30, 40};
    static const char *const files[] = {"b.png", "c.png", "a.png", "sub/d.png"};
    for (uint64_t i = 0; i < 4; i++) {
        expect_i64(ds, i, "image_id", &ids[i], 1);
        int64_t minus = -1, label = 0;
        expect_i64(ds, i, "label", &minus, 1);
        assert_int_equal(stk_dataset_label(ds, i, &label), 0);
        assert_int_equal(label, -1);
        char *path = NULL, want[1024];
        assert_int_equal(stk_dataset_sample_path(ds, i, &path), 0);
        snprintf(want, sizeof want, "%s/%s", images_dir(), files[i]);
        assert_string_equal(path, want);
        stk_free(path);
        /* the image field is the file, byte for byte */
        size_t n, fn;
        uint8_t *img = field(ds, i, "image", &n, NULL);
        uint8_t *file = tu_read_file(want, &fn);
        assert_int_equal(n, fn);
        assert_memory_equal(img, file, n);
        stk_free(img);
        free(file);
        int64_t lab;
        uint8_t px[8 * 6 * 3];
        assert_true(stk_dataset_read(ds, i, px, sizeof px, &lab) > 0);
        assert_int_equal(lab, -1);
    }
    /* 10: [-1.5, 2.25, 10, 0.5] clipped to the 5x4 image */
    expect_boxes(ds, 0, (const float[]){0, 2.25f, 5, 2.75f}, 1);
    expect_i64(ds, 0, "box_labels", (const int64_t[]){2}, 1);
    expect_i64(ds, 0, "iscrowd", (const int64_t[]){1}, 1);
    /* 20: a box of zero width is kept */
    expect_boxes(ds, 1, (const float[]){0, 0, 4, 4, 3, 3, 3, 4}, 2);
    expect_i64(ds, 1, "box_labels", (const int64_t[]){1, 0}, 2);
    /* 30: file order 1, 2, 3 */
    expect_boxes(ds, 2, (const float[]){1, 1, 4, 3, 3, 2, 7, 5, 0, 0, 2, 1}, 3);
    expect_i64(ds, 2, "box_labels", (const int64_t[]){1, 0, 2}, 3);
    expect_i64(ds, 2, "iscrowd", (const int64_t[]){0, 0, 1}, 3);
    /* 40: none */
    expect_boxes(ds, 3, NULL, 0);
    expect_i64(ds, 3, "box_labels", NULL, 0);

    /* field_view lends the tables: the same pointer each time, no copy */
    stk_scratch s1 = {0}, s2 = {0};
    stk_field_view v1, v2;
    assert_int_equal(stk_dataset_field_view(ds, 2, 2, &v1, &s1), 0);
    assert_int_equal(stk_dataset_field_view(ds, 2, 2, &v2, &s2), 0);
    assert_ptr_equal(v1.data, v2.data);
    assert_int_equal(v1.shape[0], 3);
    assert_int_equal(v1.size, 48);
    assert_null(s1.data);
    assert_int_equal(stk_dataset_field_view(ds, 3, 3, &v1, &s1), 0);
    assert_int_equal(v1.shape[0], 0);
    assert_int_equal(v1.size, 0);
    assert_int_equal(stk_dataset_field_view(ds, 0, 0, &v1, &s1), 0); /* the image, read */
    assert_non_null(s1.data);
    assert_ptr_equal(v1.data, s1.data);
    stk_scratch_free(&s1);
    stk_scratch_free(&s2);
    stk_dataset_close(ds);
}

static void test_masks(void **state)
{
    (void)state;
    const char *json = good_json();
    stk_dataset *ds = open_ok(uri_of(json, "&masks=semantic"));
    assert_int_equal(stk_dataset_field_count(ds), 7);
    stk_field_info fi;
    assert_int_equal(stk_dataset_field_info(ds, 6, &fi), 0);
    assert_string_equal(fi.name, "mask");
    assert_int_equal(fi.type, STK_FIELD_RAW_IMAGE);
    /* 10 (5x4): counts 3, 2, 14, 1: column-major ones at 3, 4 and 19 */
    expect_mask(ds, 0, 4, 5, (const char *const[]){"03000", "00000", "00000", "30003"});
    /* 20 (4x4): "263K1" = 2, 6, 3, 1, 4: ones at 2..7 and 11 (label 1 + 1),
     * then the two unit squares of label 0 + 1 over it; [2, 2] paints
     * nothing */
    expect_mask(ds, 1, 4, 4, (const char *const[]){"0201", "0200", "2200", "1220"});
    /* 30 (8x6): [1,4)x[1,3) of 2, [3,7)x[2,5) of 1 over it, (0, 0) of 3 */
    expect_mask(ds, 2, 6, 8,
                (const char *const[]){"30000000", "02220000", "02211110", "00011110",
                                      "00011110", "00000000"});
    expect_mask(ds, 3, 2, 3, (const char *const[]){"000", "000"});
    stk_dataset_close(ds);

    ds = open_ok(uri_of(json, "&masks=instance&crowd=drop"));
    assert_int_equal(stk_dataset_field_count(ds), 6); /* no iscrowd */
    assert_int_equal(stk_dataset_field_info(ds, 5, &fi), 0);
    assert_string_equal(fi.name, "mask");
    expect_mask(ds, 0, 4, 5, (const char *const[]){"00000", "00000", "00000", "00000"});
    expect_boxes(ds, 0, NULL, 0);
    expect_mask(ds, 2, 6, 8,
                (const char *const[]){"00000000", "01110000", "01122220", "00022220",
                                      "00022220", "00000000"});
    expect_boxes(ds, 2, (const float[]){1, 1, 4, 3, 3, 2, 7, 5}, 2);
    expect_mask(ds, 1, 4, 4, (const char *const[]){"0102", "0100", "1100", "2110"});
    stk_dataset_close(ds);
}

/* empty=, crowd=, missing= */
static void test_policies(void **state)
{
    (void)state;
    const char *json = good_json();
    stk_dataset *ds = open_ok(uri_of(json, "&empty=drop"));
    assert_int_equal(ds->count, 3);
    assert_int_equal(stk_dataset_skipped_count(ds), 1);
    assert_non_null(strstr(stk_dataset_skipped(ds, 0), "sub/d.png (image id 40): no annotations"));
    stk_dataset_close(ds);
    /* with crowd=drop, image 10 (only a crowd box) is empty too */
    ds = open_ok(uri_of(json, "&empty=drop&crowd=drop"));
    assert_int_equal(ds->count, 2);
    assert_int_equal(stk_dataset_skipped_count(ds), 2);
    assert_non_null(strstr(stk_dataset_skipped(ds, 0), "b.png (image id 10): no annotations "
                                                       "but crowd ones"));
    expect_i64(ds, 0, "image_id", (const int64_t[]){20}, 1);
    stk_dataset_close(ds);

    /* a missing image file */
    const char *j2 = write_json("missing.json", "{" CATS ", \"images\": ["
        "{\"id\": 1, \"file_name\": \"a.png\", \"height\": 6, \"width\": 8},"
        "{\"id\": 2, \"file_name\": \"gone.png\", \"height\": 6, \"width\": 8},"
        "{\"id\": 3, \"file_name\": \"sub\", \"height\": 6, \"width\": 8}],"
        "\"annotations\": []}");
    expect_open_fail(uri_of(j2, ""), STK_ENOENT, "img/gone.png (image id 2): no such file",
                     "2 of the 3 image files");
    ds = open_ok(uri_of(j2, "&missing=skip"));
    assert_int_equal(ds->count, 1);
    assert_int_equal(stk_dataset_skipped_count(ds), 2);
    assert_non_null(strstr(stk_dataset_skipped(ds, 0), "gone.png (image id 2): no such file"));
    assert_non_null(strstr(stk_dataset_skipped(ds, 1), "sub (image id 3): not a regular file"));
    stk_dataset_close(ds);
    ds = open_ok(uri_of(j2, "&missing=lazy"));
    assert_int_equal(ds->count, 3);
    uint8_t px[8 * 6 * 3];
    int64_t label;
    assert_int_equal(stk_dataset_read(ds, 1, px, sizeof px, &label), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "img/gone.png (image id 2)"));
    void *d;
    size_t n;
    assert_int_equal(stk_dataset_read_field(ds, 2, "image", &d, &n, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "img/sub (image id 3)"));
    stk_dataset_close(ds);
    /* all images left out */
    const char *j3 = write_json("none.json", "{" CATS ", \"images\": ["
        "{\"id\": 2, \"file_name\": \"gone.png\", \"height\": 6, \"width\": 8}],"
        "\"annotations\": []}");
    expect_open_fail(uri_of(j3, "&missing=skip"), STK_EFORMAT, "no images left", NULL);
}

/* A file whose size differs from the annotation file's; more than 255
 * instances; a semantic mask of too many categories. */
static void test_read_errors(void **state)
{
    (void)state;
    const char *j = write_json("size.json", "{" CATS ", \"images\": ["
        "{\"id\": 1, \"file_name\": \"a.png\", \"height\": 8, \"width\": 6}],"
        "\"annotations\": []}");
    stk_dataset *ds = open_ok(uri_of(j, ""));
    void *d;
    size_t n;
    assert_int_equal(stk_dataset_read_field(ds, 0, "image", &d, &n, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "img/a.png (image id 1): the image is 8x6 (WxH) but"));
    assert_non_null(strstr(stk_errmsg(), "size.json gives 6x8"));
    assert_int_equal(stk_dataset_read_field(ds, 0, "boxes", &d, &n, NULL), 0); /* not read */
    stk_free(d);
    stk_dataset_close(ds);

    /* 256 instances in one image */
    size_t cap = 1 << 20, used = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    used += (size_t)snprintf(t + used, cap - used, "{" CATS ", \"images\": [{\"id\": 1, "
                             "\"file_name\": \"c.png\", \"height\": 4, \"width\": 4}], "
                             "\"annotations\": [");
    for (int i = 0; i < 256; i++)
        used += (size_t)snprintf(t + used, cap - used,
                                 "%s{\"id\": %d, \"image_id\": 1, \"category_id\": 2, \"bbox\": "
                                 "[0, 0, 1, 1], \"segmentation\": [[0, 0, 1, 0, 1, 1, 0, 1]]}",
                                 i ? "," : "", i + 100);
    snprintf(t + used, cap - used, "]}");
    j = write_json("many.json", t);
    ds = open_ok(uri_of(j, "&masks=instance"));
    assert_int_equal(stk_dataset_read_field(ds, 0, "mask", &d, &n, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "img/c.png (image id 1): 256 annotations, but an "
                                         "instance mask holds at most 255"));
    stk_dataset_close(ds);
    ds = open_ok(uri_of(j, "&masks=semantic")); /* fine: one label */
    uint32_t shape[3];
    uint8_t *m = field(ds, 0, "mask", &n, shape);
    assert_int_equal(m[0], 1);
    assert_int_equal(m[5], 0);
    stk_free(m);
    stk_dataset_close(ds);

    /* 256 categories with masks=semantic */
    used = (size_t)snprintf(t, cap, "{\"images\": [], \"annotations\": [], \"categories\": [");
    for (int i = 0; i < 256; i++)
        used += (size_t)snprintf(t + used, cap - used, "%s{\"id\": %d, \"name\": \"k%d\"}",
                                 i ? "," : "", i, i);
    snprintf(t + used, cap - used, "]}");
    j = write_json("cats.json", t);
    expect_open_fail(uri_of(j, "&masks=semantic"), STK_EINVAL, "256 categories", "masks=instance");
    free(t);
}

typedef struct bad_case {
    const char *json;
    const char *uri_extra;
    int code;
    const char *a, *b;
} bad_case;

static void test_bad_input(void **state)
{
    (void)state;
#define ONE_IMAGE "\"images\": [{\"id\": 1, \"file_name\": \"a.png\", \"height\": 6, \"width\": 8}]"
#define ANN(body) "{" CATS ", " ONE_IMAGE ", \"annotations\": [{\"id\": 11, \"image_id\": 1, " body "}]}"
    static const bad_case cases[] = {
        {"{\"images\": [1, 2,, 3]}", "", STK_EFORMAT, "line 1, column 18: unexpected token near ','", "not valid JSON"},
        {"{\"images\": [],\n \"x\": [\n", "", STK_EFORMAT, "line 3, column 0", NULL},
        {"", "", STK_EFORMAT, "line 1, column 0", NULL},
        {"[1, 2]", "", STK_EFORMAT, "the top level is an array, an object expected", NULL},
        {"{" CATS ", " ONE_IMAGE "}", "", STK_EFORMAT, "no \"annotations\" array", NULL},
        {"{" CATS ", \"images\": {}, \"annotations\": []}", "", STK_EFORMAT,
         "\"images\" is an object, an array expected", NULL},
        {"{\"categories\": [], " ONE_IMAGE ", \"annotations\": []}", "", STK_EFORMAT,
         "\"categories\" is empty", NULL},
        {"{\"categories\": [{\"id\": 1, \"name\": \"x\"}, {\"id\": 1, \"name\": \"y\"}], " ONE_IMAGE
         ", \"annotations\": []}", "", STK_EFORMAT,
         "category id 1 is given twice (\"x\" and \"y\")", NULL},
        {"{\"categories\": [{\"id\": 1}], " ONE_IMAGE ", \"annotations\": []}", "", STK_EFORMAT,
         "category 1: \"name\" is missing", NULL},
        {"{" CATS ", \"images\": [{\"id\": 1, \"file_name\": \"a.png\", \"height\": 6, \"width\": "
         "8}, {\"id\": 1, \"file_name\": \"b.png\", \"height\": 4, \"width\": 5}], "
         "\"annotations\": []}", "", STK_EFORMAT,
         "image id 1 is given twice (\"a.png\" and \"b.png\")", NULL},
        {"{" CATS ", \"images\": [{\"id\": \"1\", \"file_name\": \"a.png\"}], \"annotations\": []}",
         "", STK_EFORMAT, "\"images\"[0]: \"id\" is a string, an integer expected", NULL},
        {"{" CATS ", \"images\": [{\"id\": 3, \"file_name\": \"a.png\", \"width\": 8}], "
         "\"annotations\": []}", "", STK_EFORMAT, "image id 3 has no \"height\"", NULL},
        {"{" CATS ", \"images\": [{\"id\": 3, \"file_name\": \"a.png\", \"height\": 0, \"width\": "
         "8}], \"annotations\": []}", "", STK_EFORMAT, "image id 3: height 0 x width 8", NULL},
        {"{" CATS ", \"images\": [{\"id\": 3, \"file_name\": \"../a.png\", \"height\": 6, "
         "\"width\": 8}], \"annotations\": []}", "", STK_EFORMAT,
         "image id 3: file_name \"../a.png\" is not a relative path", NULL},
        {"{" CATS ", \"images\": [{\"id\": 3, \"file_name\": \"/etc/passwd\", \"height\": 6, "
         "\"width\": 8}], \"annotations\": []}", "", STK_EFORMAT, "\"/etc/passwd\"", NULL},
        {ANN("\"category_id\": 4, \"bbox\": [0, 0, 1, 1]"), "", STK_EFORMAT,
         "annotation 11 (image id 1): category_id 4 is not in \"categories\"", NULL},
        {"{" CATS ", " ONE_IMAGE ", \"annotations\": [{\"id\": 12, \"image_id\": 2, "
         "\"category_id\": 2, \"bbox\": [0, 0, 1, 1]}]}", "", STK_EFORMAT,
         "annotation 12: image_id 2 is not in \"images\"", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, -1, 1]"), "", STK_EFORMAT,
         "annotation 11 (image id 1): bbox [0, 0, -1, 1] has a negative width", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, -0.5]"), "", STK_EFORMAT,
         "has a negative height", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1]"), "", STK_EFORMAT,
         "annotation 11 (image id 1): \"bbox\" is another array", NULL},
        {ANN("\"category_id\": 2"), "", STK_EFORMAT, "\"bbox\" is missing", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"iscrowd\": 2"), "", STK_EFORMAT,
         "annotation 11: \"iscrowd\" is another integer, 0 or 1 expected", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1]"), "&masks=semantic", STK_EFORMAT,
         "annotation 11 has no \"segmentation\"", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": [[0, 0, 1, 0, 1]]"),
         "&masks=semantic", STK_EFORMAT, "annotation 11: polygon 0 is an odd count of numbers",
         NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": [[0, 0, 1, 0, 1, "
             "\"x\"]]"),
         "&masks=semantic", STK_EFORMAT, "annotation 11: polygon value 4 is not a finite number",
         NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": [[0, 0, 3e6, 0, 1, "
             "1]]"),
         "&masks=semantic", STK_EFORMAT, "polygon vertex (3e+06, 0) lies more than 1000000 pixels",
         NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": [[0, 0, 9e5, 0, 1, "
             "1]]"),
         "&masks=semantic", STK_EFORMAT, "a polygon of 3 vertices whose outline is 9000003 steps",
         "not an outline"},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": 3"), "&masks=instance",
         STK_EFORMAT, "\"segmentation\" is an integer, polygons or an RLE expected", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 7], "
             "\"counts\": [42]}"),
         "&masks=semantic", STK_EFORMAT,
         "annotation 11: RLE size [6, 7] is not image id 1's [height, width] [6, 8]", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 8], "
             "\"counts\": [40, 7]}"),
         "&masks=semantic", STK_EFORMAT, "the RLE counts add up to 47 pixels, not the 6 x 8 = 48",
         NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 8], "
             "\"counts\": [40, -8]}"),
         "&masks=semantic", STK_EFORMAT, "RLE count 1 is not an integer in 0..2^32-1", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 8], "
             "\"counts\": \"0T~\"}"),
         "&masks=semantic", STK_EFORMAT, "the RLE string holds '~' at character 2", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 8], "
             "\"counts\": \"0T\"}"),
         "&masks=semantic", STK_EFORMAT, "the RLE string ends inside a count at character 2", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"size\": [6, 8], "
             "\"counts\": \"0K\"}"),
         "&masks=semantic", STK_EFORMAT, "RLE count 1 is -5", NULL},
        {ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], \"segmentation\": {\"counts\": \"0\"}"),
         "&masks=semantic", STK_EFORMAT, "needs \"size\": [h, w] and \"counts\"", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.json", i);
        const char *j = write_json(name, cases[i].json);
        char *u = uri_of(j, cases[i].uri_extra);
        expect_open_fail(u, cases[i].code, cases[i].a, cases[i].b);
        if (cases[i].code == STK_EFORMAT) /* every message names the file */
            expect_open_fail(u, cases[i].code, name, NULL);
    }
    /* the same annotations without masks= are fine: segmentations unread */
    const char *j = write_json("nomask.json", ANN("\"category_id\": 2, \"bbox\": [0, 0, 1, 1], "
                                                  "\"segmentation\": {\"counts\": \"0\"}"));
    stk_dataset_close(open_ok(uri_of(j, "")));

    /* the URI */
    char u[2048];
    snprintf(u, sizeof u, "coco:%s", images_dir());
    expect_open_fail(u, STK_EINVAL, "names no annotation file", NULL);
    expect_open_fail(uri_of(j, "&masks=poly"), STK_EINVAL,
                     "unknown value 'poly' for query key 'masks'", "none, semantic or instance");
    expect_open_fail(uri_of(j, "&crowd=yes"), STK_EINVAL, "query key 'crowd'", "keep or drop");
    expect_open_fail(uri_of(j, "&mask=none"), STK_EINVAL, "unknown query key 'mask'", NULL);
    snprintf(u, sizeof u, "coco:%s/nowhere?annotations=%s", tu_tmpdir(), j);
    expect_open_fail(u, STK_ENOENT, "images directory", "nowhere");
    snprintf(u, sizeof u, "coco:%s?annotations=%s/nothing.json", images_dir(), tu_tmpdir());
    expect_open_fail(u, STK_ENOENT, "annotation file", "nothing.json");

    /* max_bytes: the annotation file's limit, and how to raise it */
    stk_dataset_options o = {0};
    o.max_bytes = 100;
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_open(uri_of(good_json(), ""), &o, &ds), STK_ELIMIT);
    assert_null(ds);
    assert_non_null(strstr(stk_errmsg(), "good.json is "));
    assert_non_null(strstr(stk_errmsg(), "more than the limit of 100"));
    assert_non_null(strstr(stk_errmsg(), "max_bytes"));
    o.max_bytes = 1 << 20;
    assert_int_equal(stk_dataset_open(uri_of(good_json(), ""), &o, &ds), 0);
    stk_dataset_close(ds);
}

/* The painting of one image's mask is bounded over all of its annotations
 * (COCO_PAINT_LIMIT: 32 x pixels + 2^24), not per polygon alone: 10,000
 * triangles covering a 2000x2000 image, in one annotation or spread over
 * many, are refused at open naming the file and the image id. By hand, one
 * triangle (0,0) (2000,0) (0,2000), scaled by 5: 30,003 steps, 3 vertices,
 * 20,006 boundary points, a 2000x2000 box: 4,050,012; the limit is
 * 144,777,216, so 35 of them (141,750,420) open and 36 (145,800,432) do
 * not. */
static char *triangles_json(const char *name, int annotations, int per_annotation)
{
    size_t cap = 256 + (size_t)annotations * (120 + (size_t)per_annotation * 40);
    char *t = malloc(cap), *e = t;
    assert_non_null(t);
    e += sprintf(e, "{" CATS ", \"images\": [{\"id\": 1, \"file_name\": \"big.png\", "
                    "\"height\": 2000, \"width\": 2000}], \"annotations\": [");
    for (int a = 0; a < annotations; a++) {
        e += sprintf(e, "%s{\"id\": %d, \"image_id\": 1, \"category_id\": 2, \"bbox\": [0, 0, "
                        "2000, 2000], \"segmentation\": [", a ? ", " : "", 100 + a);
        for (int k = 0; k < per_annotation; k++)
            e += sprintf(e, "%s[0, 0, 2000, 0, 0, 2000]", k ? ", " : "");
        e += sprintf(e, "]}");
    }
    sprintf(e, "]}");
    const char *path = write_json(name, t);
    free(t);
    char *uri = malloc(2048);
    assert_non_null(uri);
    snprintf(uri, 2048, "coco:%s?annotations=%s&masks=semantic&missing=lazy", images_dir(), path);
    return uri;
}

static void test_paint_bound_per_image(void **state)
{
    (void)state;
    char *u = triangles_json("poly10k.json", 1, 10000);
    expect_open_fail(u, STK_ELIMIT, "poly10k.json: image id 1: painting its mask would take",
                     "more than the 144777216 allowed for a 2000x2000 image");
    free(u);
    u = triangles_json("poly36.json", 36, 1);
    expect_open_fail(u, STK_ELIMIT, "poly36.json: image id 1: painting its mask would take "
                                    "145800432 steps",
                     "reached at annotation 135");
    free(u);
    u = triangles_json("poly35.json", 35, 1);
    stk_dataset *ds = open_ok(u);
    stk_dataset_close(ds);
    free(u);
    u = triangles_json("poly35b.json", 1, 35);
    ds = open_ok(u);
    stk_dataset_close(ds);
    free(u);
}

/* Masks read from 4 threads at once equal the serial reads. */
typedef struct thread_arg {
    const stk_dataset *ds;
    uint8_t *serial[4];
    size_t sizes[4];
    int bad;
} thread_arg;

static void *reader(void *p)
{
    thread_arg *a = p;
    stk_scratch s = {0};
    for (int rep = 0; rep < 50; rep++)
        for (uint64_t i = 0; i < 4; i++) {
            stk_field_view v;
            if (stk_dataset_field_view(a->ds, i, 6, &v, &s) != 0 || v.size != a->sizes[i] ||
                memcmp(v.data, a->serial[i], v.size) != 0)
                a->bad = 1;
        }
    stk_scratch_free(&s);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    stk_dataset *ds = open_ok(uri_of(good_json(), "&masks=semantic"));
    thread_arg a = {.ds = ds};
    for (uint64_t i = 0; i < 4; i++)
        a.serial[i] = field(ds, i, "mask", &a.sizes[i], NULL);
    pthread_t t[4];
    thread_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = a;
        assert_int_equal(pthread_create(&t[k], NULL, reader, &args[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        assert_int_equal(args[k].bad, 0);
    }
    for (uint64_t i = 0; i < 4; i++)
        stk_free(a.serial[i]);
    stk_dataset_close(ds);
}

/* Through the reader table: the prefix is listed with its form. */
static void test_reader_row(void **state)
{
    (void)state;
    const char *form = NULL, *desc = NULL, *p;
    uint32_t i = 0;
    while ((p = stk_dataset_reader(i, &form, &desc)) && strcmp(p, "coco"))
        i++;
    assert_non_null(p);
    assert_non_null(strstr(form, "annotations=FILE.json"));
    assert_non_null(strstr(form, "masks=none|semantic|instance"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),      cmocka_unit_test(test_masks),
        cmocka_unit_test(test_policies),    cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_bad_input),   cmocka_unit_test(test_threads),
        cmocka_unit_test(test_reader_row),  cmocka_unit_test(test_paint_bound_per_image),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
