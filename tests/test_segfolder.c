/*
 * test_segfolder.c — the segfolder: reader on directories written here:
 * pairing by stem in both layouts (images/ + masks/, and *_mask.png beside
 * the images), the samples' order, the fields (the files byte for byte,
 * label -1), detection of a bare directory, the missing= policy for an
 * image without its mask and a mask without its image, two images of one
 * stem, the query, and a mask whose size differs from its image's
 * (STK_EDATA naming both files, at read time). tests/python/
 * test_segfolder_reader.py checks masks written by PIL.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "format/dataset.h"
#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* A w x h PNG of grey level v at ROOT/rel. */
static void png(const char *root, const char *rel, uint32_t w, uint32_t h, uint8_t v)
{
    char path[1024];
    uint8_t *px = malloc((size_t)w * h * 3);
    assert_non_null(px);
    memset(px, v, (size_t)w * h * 3);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    assert_int_equal(stk_png_write_rgb8(path, px, w, h, (size_t)w * 3), 0);
    free(px);
}

static const char *mkdirs(const char *name, const char *const *subs)
{
    const char *root = tu_path(name);
    mkdir(root, 0755);
    for (; subs && *subs; subs++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", root, *subs);
        mkdir(p, 0755);
    }
    return root;
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

/* Field `name` of sample i equals the file ROOT/rel byte for byte. */
static void expect_file(const stk_dataset *ds, uint64_t i, const char *name, const char *root,
                        const char *rel)
{
    char path[1024];
    void *d = NULL;
    size_t n = 0, fn = 0;
    snprintf(path, sizeof path, "%s/%s", root, rel);
    if (stk_dataset_read_field(ds, i, name, &d, &n, NULL) != 0)
        fail_msg("%s: sample %llu field %s: %s", ds->uri, (unsigned long long)i, name,
                 stk_errmsg());
    uint8_t *want = tu_read_file(path, &fn);
    assert_non_null(want);
    assert_int_equal(n, fn);
    assert_memory_equal(d, want, n);
    stk_free(d);
    free(want);
}

static void test_two_dirs(void **state)
{
    (void)state;
    const char *root = mkdirs("two", (const char *const[]){"images", "masks", "images/sub", NULL});
    png(root, "images/b.png", 6, 4, 10);
    png(root, "masks/b.png", 6, 4, 1);
    png(root, "images/a.jpg.png", 5, 5, 20); /* stem "a.jpg" */
    png(root, "masks/a.jpg.png", 5, 5, 2);
    png(root, "images/c.PNG", 3, 2, 30); /* extensions in any case */
    png(root, "masks/c.PNG", 3, 2, 3);
    png(root, "images/._c.png", 3, 2, 30); /* dot files left out */
    tu_write_file(tu_path("two/images/readme.txt"), "x", 1);
    png(root, "images/sub/x.png", 2, 2, 1); /* not recursive */

    char uri[1024];
    snprintf(uri, sizeof uri, "segfolder:%s", root);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "segfolder");
    assert_int_equal(info.count, 3);
    assert_int_equal(stk_dataset_skipped_count(ds), 0);
    /* by stem: "a.jpg" < "b" < "c" */
    static const char *const stems[] = {"a.jpg.png", "b.png", "c.PNG"};
    for (uint64_t i = 0; i < 3; i++) {
        char rel[64], want[1024];
        snprintf(rel, sizeof rel, "images/%s", stems[i]);
        expect_file(ds, i, "image", root, rel);
        snprintf(rel, sizeof rel, "masks/%s", stems[i]);
        expect_file(ds, i, "mask", root, rel);
        char *path = NULL;
        assert_int_equal(stk_dataset_sample_path(ds, i, &path), 0);
        snprintf(want, sizeof want, "%s/images/%s", root, stems[i]);
        assert_string_equal(path, want);
        stk_free(path);
        int64_t label = 0;
        assert_int_equal(stk_dataset_label(ds, i, &label), 0);
        assert_int_equal(label, -1);
        void *d;
        size_t n;
        assert_int_equal(stk_dataset_read_field(ds, i, "label", &d, &n, NULL), 0);
        assert_int_equal(n, 8);
        assert_int_equal(*(int64_t *)d, -1);
        stk_free(d);
    }
    assert_int_equal(stk_dataset_field_count(ds), 3);
    stk_field_info fi;
    assert_int_equal(stk_dataset_field_info(ds, 2, &fi), 0);
    assert_string_equal(fi.name, "mask");
    assert_int_equal(fi.type, STK_FIELD_IMAGE);
    assert_int_equal(stk_dataset_field_info(ds, 3, &fi), STK_EINVAL);
    uint8_t px[5 * 5 * 3];
    int64_t label;
    assert_int_equal(stk_dataset_read(ds, 0, px, sizeof px, &label), 75);
    assert_int_equal(px[0], 20);
    assert_string_equal(stk_dataset_metadata(ds, "masks_dir"), tu_path("two/masks"));
    stk_dataset_close(ds);

    /* detected from the bare directory */
    ds = open_ok(root);
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "segfolder");
    stk_dataset_close(ds);

    /* a mask of another size than its image: STK_EDATA naming both, when read */
    png(root, "masks/b.png", 6, 5, 1);
    ds = open_ok(uri);
    void *d;
    size_t n;
    assert_int_equal(stk_dataset_read_field(ds, 1, "mask", &d, &n, NULL), STK_EDATA);
    char want[2048];
    snprintf(want, sizeof want, "%s/masks/b.png: the mask is 6x5 (WxH) but its image %s/images/b.png "
             "is 6x4", root, root);
    assert_string_equal(stk_errmsg(), want);
    expect_file(ds, 1, "image", root, "images/b.png"); /* the image alone reads */
    /* a mask that is no image */
    tu_write_file(tu_path("two/masks/c.PNG"), "not a png", 9);
    assert_int_equal(stk_dataset_read_field(ds, 2, "mask", &d, &n, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "two/masks/c.PNG"));
    /* a file gone after the open */
    char p[1024];
    snprintf(p, sizeof p, "%s/images/a.jpg.png", root);
    unlink(p);
    assert_int_equal(stk_dataset_read_field(ds, 0, "mask", &d, &n, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "two/images/a.jpg.png"));
    assert_int_equal(stk_dataset_read(ds, 0, px, sizeof px, &label), STK_EDATA);
    stk_dataset_close(ds);
}

static void test_flat_and_keys(void **state)
{
    (void)state;
    const char *root = mkdirs("flat", NULL);
    png(root, "p1.png", 4, 3, 1);
    png(root, "p1_mask.png", 4, 3, 1);
    png(root, "p0.jpeg.png", 2, 2, 1);
    png(root, "p0.jpeg_mask.png", 2, 2, 1);
    char uri[1024];
    snprintf(uri, sizeof uri, "segfolder:%s", root);
    stk_dataset *ds = open_ok(uri);
    assert_int_equal(ds->count, 2);
    expect_file(ds, 0, "image", root, "p0.jpeg.png");
    expect_file(ds, 0, "mask", root, "p0.jpeg_mask.png");
    expect_file(ds, 1, "mask", root, "p1_mask.png");
    stk_dataset_close(ds);
    ds = open_ok(root); /* detected: *_mask.png beside the images */
    assert_int_equal(ds->count, 2);
    stk_dataset_close(ds);

    /* Carvana's layout by keys: train/ID.png + train_masks/ID_mask.png */
    const char *car = mkdirs("car", (const char *const[]){"train", "train_masks", NULL});
    png(car, "train/x_01.png", 3, 3, 5);
    png(car, "train_masks/x_01_mask.png", 3, 3, 1);
    snprintf(uri, sizeof uri, "segfolder:%s?images=train&masks=train_masks&mask_suffix=_mask",
             car);
    ds = open_ok(uri);
    assert_int_equal(ds->count, 1);
    expect_file(ds, 0, "mask", car, "train_masks/x_01_mask.png");
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri,
             "segfolder:%s?images=train&masks=train_masks&mask_suffix=_mask&mask_ext=gif", car);
    expect_open_fail(uri, STK_EFORMAT, "car/train/x_01.png has no mask", "train_masks/x_01_mask.gif");

    /* the query */
    snprintf(uri, sizeof uri, "segfolder:%s?images=../x", car);
    expect_open_fail(uri, STK_EINVAL, "images=../x", "relative");
    snprintf(uri, sizeof uri, "segfolder:%s?missing=maybe", car);
    expect_open_fail(uri, STK_EINVAL, "unknown value 'maybe' for query key 'missing'", NULL);
    snprintf(uri, sizeof uri, "segfolder:%s?mask_ext=.png", car);
    expect_open_fail(uri, STK_EINVAL, "without the dot", NULL);
    snprintf(uri, sizeof uri, "segfolder:%s?labels=x", car);
    expect_open_fail(uri, STK_EINVAL, "unknown query key 'labels'", NULL);
    snprintf(uri, sizeof uri, "segfolder:%s", car);
    expect_open_fail(uri, STK_ENOENT, "neither images/ and masks/ subdirectories nor", NULL);
    snprintf(uri, sizeof uri, "segfolder:%s?images=.&masks=.", root);
    expect_open_fail(uri, STK_EINVAL, "an image cannot be told from a mask", NULL);
    snprintf(uri, sizeof uri, "segfolder:%s?masks=nowhere", car);
    expect_open_fail(uri, STK_ENOENT, "images directory", "car/images");
    snprintf(uri, sizeof uri, "segfolder:%s?images=train&masks=nowhere", car);
    expect_open_fail(uri, STK_ENOENT, "masks directory", "car/nowhere");
    snprintf(uri, sizeof uri, "segfolder:%s/none", car);
    expect_open_fail(uri, STK_ENOENT, "none", NULL);
}

static void test_unpaired(void **state)
{
    (void)state;
    const char *root = mkdirs("unpaired", (const char *const[]){"images", "masks", NULL});
    png(root, "images/a.png", 2, 2, 1);
    png(root, "masks/a.png", 2, 2, 1);
    png(root, "images/b.jpg.png", 2, 2, 1); /* no mask */
    png(root, "masks/c.png", 2, 2, 1);      /* no image */
    png(root, "images/d.png", 2, 2, 1);
    png(root, "masks/d.png", 2, 2, 1);
    char uri[1024], want[2048];
    snprintf(uri, sizeof uri, "segfolder:%s", root);
    snprintf(want, sizeof want, "segfolder: %s/images/b.jpg.png has no mask %s/masks/b.jpg.png "
             "(missing=skip leaves such files out)", root, root);
    expect_open_fail(uri, STK_EFORMAT, want, NULL);
    snprintf(uri, sizeof uri, "segfolder:%s?missing=skip", root);
    stk_dataset *ds = open_ok(uri);
    assert_int_equal(ds->count, 2);
    assert_int_equal(stk_dataset_skipped_count(ds), 2);
    snprintf(want, sizeof want, "%s/images/b.jpg.png has no mask %s/masks/b.jpg.png", root, root);
    assert_string_equal(stk_dataset_skipped(ds, 0), want);
    snprintf(want, sizeof want, "%s/masks/c.png has no image %s/images/c.*", root, root);
    assert_string_equal(stk_dataset_skipped(ds, 1), want);
    expect_file(ds, 1, "image", root, "images/d.png");
    stk_dataset_close(ds);
    /* an extra mask alone */
    snprintf(want, sizeof want, "%s/images/b.jpg.png", root);
    unlink(want);
    snprintf(uri, sizeof uri, "segfolder:%s", root);
    expect_open_fail(uri, STK_EFORMAT, "masks/c.png has no image", "images/c.*");
    /* two images of one stem */
    png(root, "images/a.jpg", 2, 2, 1);
    expect_open_fail(uri, STK_EFORMAT, "images/a.jpg and a.png share the stem 'a'", NULL);
    /* nothing paired at all */
    const char *e = mkdirs("nopairs", (const char *const[]){"images", "masks", NULL});
    png(e, "images/q.png", 2, 2, 1);
    snprintf(uri, sizeof uri, "segfolder:%s?missing=skip", e);
    expect_open_fail(uri, STK_EFORMAT, "no image with its mask (1 images", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_dirs),
        cmocka_unit_test(test_flat_and_keys),
        cmocka_unit_test(test_unpaired),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
