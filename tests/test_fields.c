/*
 * test_fields.c — masks and boxes moved with the image (ops/spatial.c).
 *
 * The references are independent of the library's geometry:
 *   - for pads, crops and flips (exact for images too) the mask must equal
 *     the image's own first channel when the image's first channel is the
 *     mask: the image's fused path and the mask's replayed steps meet;
 *   - a box drawn as a rectangle of one class in the mask must come out as
 *     the bounding rectangle of that class in the output mask (pixel edges
 *     map to pixel edges under pads, crops and flips);
 *   - a nearest resize is torch's formula, computed here in float;
 *   - random_bbox_crop keeps every box whose centre is in the crop, so with
 *     thresholds=1 nothing is cropped and boxes only scale.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "core/rng.h"
#include "ops/plan.h"
#include "stoker/stoker.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H 24
#define W 30

/* Class map: background 0, a rectangle of class 7 at x 4..13, y 5..16
 * (XYXY box 4, 5, 14, 17), a diagonal band of class 3. */
static void make_scene(uint8_t *img, uint8_t *mask, float box[4])
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t c = 0;
            if (x >= 4 && x < 14 && y >= 5 && y < 17)
                c = 7;
            else if ((x + y) % 11 == 0)
                c = 3;
            mask[y * W + x] = c;
            img[(y * W + x) * 3 + 0] = c;
            img[(y * W + x) * 3 + 1] = (uint8_t)(x * 8);
            img[(y * W + x) * 3 + 2] = (uint8_t)(y * 8);
        }
    box[0] = 4;
    box[1] = 5;
    box[2] = 14;
    box[3] = 17;
}

static stk_image_view view_of(const uint8_t *px, int h, int w, int c)
{
    stk_image_view v = {.pixels = px, .height = (uint32_t)h, .width = (uint32_t)w,
                        .channels = (uint32_t)c, .row_stride = (ptrdiff_t)w * c,
                        .col_stride = c, .chan_stride = 1};
    return v;
}

/* A stk_spatial of one mask (mask -> mout, NULL for none) and nboxes boxes
 * (bout, keep: room for nboxes). */
static stk_spatial spatial_of(const uint8_t *mask, int mh, uint8_t *mout, const float *boxes,
                              uint32_t nboxes, float *bout, uint8_t *keep, float min_size)
{
    stk_spatial sp = {0};
    if (mask) {
        sp.nmasks = 1;
        sp.mask_in[0] = view_of(mask, mh, W, 1);
        sp.mask_out[0] = mout;
    }
    sp.boxes_in = boxes;
    sp.nboxes = nboxes;
    sp.boxes_out = bout;
    sp.keep = keep;
    sp.min_size = min_size;
    return sp;
}

/* Run plan p on the scene image with draws of counter `draw`. */
static int run_scene(const stk_plan *p, const uint8_t *img, uint64_t seed, uint64_t draw,
                     uint8_t *out, stk_spatial *sp, stk_scratch *sc, stk_scratch *work)
{
    stk_image_view iv = view_of(img, H, W, 3);
    stk_plan_input in = {.image = &iv};
    stk_rng rng;
    stk_rng_init(&rng, seed, 0, draw ? 1 : 0, draw);
    return stk_plan_run_spatial(p, &in, &rng, out, sc, sp, work);
}

static void test_mask_follows_exact_geometry(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "pad 3 | random_crop 20,22 | flip 0.5 | vflip 0.5 | to u8 hwc",
        "pad 2,1 padding_mode=reflect | center_crop 18 | flip 0.5",
        "flip 0.5 | random_crop 16,12 | vflip 0.5",
        "random_crop 20 | flip 0.5 | vflip 0.5",
    };
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    make_scene(img, mask, box);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        stk_plan *p = NULL;
        assert_int_equal(stk_plan_compile_spatial(specs[s], H, W, 3, &p), 0);
        int64_t shape[3];
        size_t sb;
        stk_plan_output(p, shape, NULL, NULL, &sb);
        int oh = (int)shape[0], ow = (int)shape[1];
        uint8_t *out = malloc(sb), *mout = malloc((size_t)oh * ow);
        stk_scratch sc = {0}, work = {0};
        for (uint64_t i = 0; i < 64; i++) {
            float bout[4];
            uint8_t keep[1];
            stk_spatial sp = spatial_of(mask, H, mout, box, 1, bout, keep, 1.0f);
            assert_int_equal(run_scene(p, img, 42, i + 1, out, &sp, &sc, &work), 0);
            /* the image's first channel is the mask */
            int x0 = ow, y0 = oh, x1 = -1, y1 = -1;
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++) {
                    assert_int_equal(mout[y * ow + x], out[(y * ow + x) * 3]);
                    if (mout[y * ow + x] == 7) {
                        x0 = x < x0 ? x : x0;
                        y0 = y < y0 ? y : y0;
                        x1 = x > x1 ? x : x1;
                        y1 = y > y1 ? y : y1;
                    }
                }
            /* the box is the class-7 rectangle's bounds, or gone with it
             * (reflect padding may mirror class 7 into the border: skip
             * the bounds check there) */
            if (strstr(specs[s], "reflect"))
                continue;
            if (x1 < 0) {
                assert_int_equal(sp.nkept, 0);
                assert_int_equal(keep[0], 0);
                continue;
            }
            assert_int_equal(sp.nkept, 1);
            assert_true(fabsf(bout[0] - (float)x0) < 1e-4f);
            assert_true(fabsf(bout[1] - (float)y0) < 1e-4f);
            assert_true(fabsf(bout[2] - (float)(x1 + 1)) < 1e-4f);
            assert_true(fabsf(bout[3] - (float)(y1 + 1)) < 1e-4f);
        }
        stk_scratch_free(&sc);
        stk_scratch_free(&work);
        free(out);
        free(mout);
        stk_plan_free(p);
    }
}

static void test_mask_resize_is_torch_nearest(void **state)
{
    (void)state;
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    make_scene(img, mask, box);
    for (int k = 0; k < H * W; k++) /* every pixel a distinct-ish value */
        mask[k] = (uint8_t)(k * 7 + k / W);
    static const int sizes[][2] = {{7, 5}, {48, 60}, {13, 41}, {24, 30}};
    for (size_t s = 0; s < 4; s++) {
        char spec[64];
        snprintf(spec, sizeof spec, "resize %d,%d", sizes[s][0], sizes[s][1]);
        stk_plan *p = NULL;
        assert_int_equal(stk_plan_compile_spatial(spec, H, W, 3, &p), 0);
        int oh = sizes[s][0], ow = sizes[s][1];
        size_t sb;
        stk_plan_output(p, NULL, NULL, NULL, &sb);
        uint8_t *out = malloc(sb), *mout = malloc((size_t)oh * ow);
        stk_scratch sc = {0}, work = {0};
        float bout[4];
        uint8_t keep[1];
        stk_spatial sp = spatial_of(mask, H, mout, box, 1, bout, keep, 1.0f);
        assert_int_equal(run_scene(p, img, 1, 0, out, &sp, &sc, &work), 0);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int sy = oh == H ? y : oh == 2 * H ? y / 2 : (int)floorf((float)y * ((float)H / (float)oh));
                int sx = ow == W ? x : ow == 2 * W ? x / 2 : (int)floorf((float)x * ((float)W / (float)ow));
                sy = sy < H - 1 ? sy : H - 1;
                sx = sx < W - 1 ? sx : W - 1;
                assert_int_equal(mout[y * ow + x], mask[sy * W + sx]);
            }
        /* boxes scale by new / old */
        assert_int_equal(sp.nkept, 1);
        assert_true(fabs(bout[0] - 4.0 * ow / W) < 1e-4);
        assert_true(fabs(bout[3] - 17.0 * oh / H) < 1e-4);
        stk_scratch_free(&sc);
        stk_scratch_free(&work);
        free(out);
        free(mout);
        stk_plan_free(p);
    }
}

static void test_boxes_dropped_outside_and_small(void **state)
{
    (void)state;
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    make_scene(img, mask, box);
    /* crop x 10..29 (center_crop keeps the middle 10 columns... use a
     * fixed crop): boxes left of it vanish, one straddling is clipped. */
    float boxes[12] = {0, 0, 3, 3,     /* left of the crop: dropped */
                       8, 2, 12, 9,    /* straddles: clipped to 10..12 */
                       20, 10, 20.5f, 12}; /* 0.5 wide: below min_size */
    stk_plan *p = NULL;
    assert_int_equal(stk_plan_compile_spatial("center_crop 24,10", H, W, 3, &p), 0);
    size_t sb;
    stk_plan_output(p, NULL, NULL, NULL, &sb);
    uint8_t *out = malloc(sb);
    stk_scratch sc = {0}, work = {0};
    float bout[12];
    uint8_t keep[3];
    stk_spatial sp = spatial_of(NULL, 0, NULL, boxes, 3, bout, keep, 1.0f);
    assert_int_equal(run_scene(p, img, 1, 0, out, &sp, &sc, &work), 0);
    /* center_crop 24,10 of 24x30: left = round(20 / 2) = 10 */
    assert_int_equal(sp.nkept, 1);
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[1], 1);
    assert_int_equal(keep[2], 0);
    assert_true(bout[0] == 0.0f && bout[1] == 2.0f && bout[2] == 2.0f && bout[3] == 9.0f);
    stk_scratch_free(&sc);
    stk_scratch_free(&work);
    free(out);
    stk_plan_free(p);
}

static void test_bbox_crop(void **state)
{
    (void)state;
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    make_scene(img, mask, box);
    stk_plan *p = NULL;
    /* thresholds=1: never crops, so the box only scales */
    assert_int_equal(stk_plan_compile_spatial("random_bbox_crop thresholds=1 | resize 12,15", H, W,
                                              3, &p),
                     0);
    size_t sb;
    stk_plan_output(p, NULL, NULL, NULL, &sb);
    uint8_t *out = malloc(sb);
    stk_scratch sc = {0}, work = {0};
    float bout[4];
    uint8_t keep[1];
    for (uint64_t i = 0; i < 16; i++) {
        stk_spatial sp = spatial_of(NULL, 0, NULL, box, 1, bout, keep, 1.0f);
        assert_int_equal(run_scene(p, img, 3, i, out, &sp, &sc, &work), 0);
        assert_int_equal(sp.nkept, 1);
        assert_true(fabsf(bout[0] - 2.0f) < 1e-4f && fabsf(bout[2] - 7.0f) < 1e-4f);
        assert_true(fabsf(bout[1] - 2.5f) < 1e-4f && fabsf(bout[3] - 8.5f) < 1e-4f);
    }
    stk_plan_free(p);
    /* thresholds=0: a crop holding the box's centre; the box survives,
     * inside the output */
    assert_int_equal(stk_plan_compile_spatial("random_bbox_crop thresholds=0 | resize 12,15", H, W,
                                              3, &p),
                     0);
    int cropped = 0;
    for (uint64_t i = 0; i < 64; i++) {
        stk_spatial sp = spatial_of(NULL, 0, NULL, box, 1, bout, keep, 0.0f);
        assert_int_equal(run_scene(p, img, 3, i, out, &sp, &sc, &work), 0);
        assert_int_equal(sp.nkept, 1);
        assert_true(bout[0] >= 0.0f && bout[2] <= 15.0f && bout[1] >= 0.0f && bout[3] <= 12.0f);
        cropped += fabsf(bout[0] - 2.0f) > 1e-3f || fabsf(bout[2] - 7.0f) > 1e-3f;
    }
    assert_true(cropped > 0);
    stk_scratch_free(&sc);
    stk_scratch_free(&work);
    free(out);
    stk_plan_free(p);
}

static void test_errors(void **state)
{
    (void)state;
    stk_plan *p = NULL;
    assert_int_equal(stk_plan_compile_spatial("resize 16 | center_crop 16 | auto_augment", 0, 0, 0,
                                              &p),
                     STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "mask or box"));
    assert_int_equal(stk_plan_compile_spatial("flip | random_bbox_crop | resize 8,8", 0, 0, 0, &p),
                     STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "first geometric"));
    assert_int_equal(stk_plan_compile_spatial("random_bbox_crop", 0, 0, 0, &p), STK_ESPEC);
    /* a mask of the wrong size */
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    make_scene(img, mask, box);
    assert_int_equal(stk_plan_compile_spatial("center_crop 8", H, W, 3, &p), 0);
    size_t sb;
    stk_plan_output(p, NULL, NULL, NULL, &sb);
    uint8_t *out = malloc(sb), mout[64];
    stk_scratch sc = {0}, work = {0};
    stk_spatial sp = spatial_of(mask, H - 1, mout, NULL, 0, NULL, NULL, 1.0f);
    assert_int_equal(run_scene(p, img, 1, 0, out, &sp, &sc, &work), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "does not match"));
    /* a plan not compiled for fields */
    stk_plan *q = NULL;
    assert_int_equal(stk_plan_compile("center_crop 8", H, W, 3, &q), 0);
    sp.mask_in[0] = view_of(mask, H, W, 1);
    assert_int_equal(run_scene(q, img, 1, 0, out, &sp, &sc, &work), STK_EINVAL);
    stk_plan_free(q);
    stk_scratch_free(&sc);
    stk_scratch_free(&work);
    free(out);
    stk_plan_free(p);
}

/* A loader with fields over a .stk set written with stk_shard_writer:
 * masks and boxes from 1 and 4 threads (views = 2) are byte-identical, the
 * mask follows the image (its first channel) under exact geometry, a bad
 * mask is skipped under the skip policy and named under raise. */
static int write_set(const char *dir, int bad_at)
{
    stk_shard_field f[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {H, W, 3}},
        {.name = "label", .type = STK_FIELD_INT64},
        {.name = "mask", .type = STK_FIELD_RAW_IMAGE},
        {.name = "boxes", .type = STK_FIELD_FLOAT32, .ndim = 2, .dims = {0, 4}},
        {.name = "box_labels", .type = STK_FIELD_INT64, .ndim = 1, .dims = {0}},
    };
    stk_shard_writer *w = NULL;
    stk_shard_writer_options o = {.records_per_shard = 16};
    int rc = stk_shard_writer_create(dir, f, 5, &o, &w);
    if (rc < 0)
        return rc;
    uint8_t img[H * W * 3], mask[H * W];
    float box[4];
    for (int i = 0; i < 40; i++) {
        make_scene(img, mask, box);
        for (int k = 0; k < H * W; k++)
            img[k * 3 + 1] = (uint8_t)(img[k * 3 + 1] + i);
        float boxes[8] = {box[0], box[1], box[2], box[3], 1.0f + (float)(i % 5), 2, 20, 9};
        int64_t label = i % 3, bl[2] = {i, 100 + i};
        uint32_t nb = (uint32_t)(1 + i % 2);
        stk_field_value v[5] = {
            {.data = img, .size = sizeof img, .shape = {H, W, 3}},
            {.data = &label, .size = 8, .count = 1},
            {.data = mask, .size = i == bad_at ? (size_t)(H - 1) * W : sizeof mask,
             .shape = {i == bad_at ? H - 1 : H, W, 1}},
            {.data = boxes, .size = nb * 16, .count = 4 * nb},
            {.data = bl, .size = nb * 8, .count = nb},
        };
        if ((rc = stk_shard_writer_add(w, v)) < 0) {
            stk_shard_writer_abort(w);
            return rc;
        }
    }
    return stk_shard_writer_finish(w, NULL);
}

static void run_loader(stk_dataset *ds, uint32_t threads, stk_error_policy pol, uint8_t **all,
                       size_t *all_size, int *rc_out)
{
    stk_loader_options o = {.batch_size = 8, .threads = threads, .seed = 5, .views = 2,
                            .on_error = pol,
                            .fields = "image,label,mask,boxes,box_labels,index,geometry"};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "pad 2 | random_crop 20 | flip 0.5 | vflip 0.5", &o,
                                       &l),
                     0);
    assert_int_equal(stk_loader_field_count(l), 7);
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    stk_batch b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 1) {
        stk_batch_field f[7];
        for (uint32_t i = 0; i < 7; i++)
            assert_int_equal(stk_loader_field(l, &b, i, &f[i]), 0);
        assert_int_equal(f[2].role, STK_ROLE_MASK);
        assert_int_equal(f[3].role, STK_ROLE_BOXES);
        assert_int_equal(f[4].role, STK_ROLE_PER_BOX);
        assert_int_equal(f[2].shape[1], 20);
        const uint8_t *img = b.data;
        const uint8_t *m = f[2].data;
        for (uint32_t r = 0; r < b.size; r++) {
            for (int k = 0; k < 20 * 20; k++)
                assert_int_equal(m[(size_t)r * 400 + k], img[((size_t)r * 400 + k) * 3]);
            /* boxes and their labels: the same count per row */
            assert_int_equal(f[3].offsets[r + 1] - f[3].offsets[r],
                             f[4].offsets[r + 1] - f[4].offsets[r]);
        }
        for (uint32_t i = 0; i < 7; i++) {
            size_t add = f[i].bytes + (f[i].offsets ? ((size_t)b.size + 1) * 8 : 0);
            while (n + add > cap)
                buf = realloc(buf, cap *= 2);
            memcpy(buf + n, f[i].data, f[i].bytes);
            n += f[i].bytes;
            if (f[i].offsets) {
                memcpy(buf + n, f[i].offsets, ((size_t)b.size + 1) * 8);
                n += ((size_t)b.size + 1) * 8;
            }
        }
        stk_loader_release(l, &b);
    }
    *rc_out = rc;
    if (rc < 0)
        assert_non_null(strstr(stk_errmsg(), "mask"));
    stk_loader_destroy(l);
    *all = buf;
    *all_size = n;
}

static void test_loader_fields(void **state)
{
    (void)state;
    char dir[] = "/tmp/stk_fields_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    assert_int_equal(write_set(good, -1), 0);
    assert_int_equal(write_set(bad, 17), 0);
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_open(good, NULL, &ds), 0);
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rc;
    run_loader(ds, 1, STK_ON_ERROR_RAISE, &a, &na, &rc);
    assert_int_equal(rc, 0);
    run_loader(ds, 4, STK_ON_ERROR_RAISE, &b, &nb, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    stk_dataset_close(ds);
    assert_int_equal(stk_dataset_open(bad, NULL, &ds), 0);
    run_loader(ds, 4, STK_ON_ERROR_SKIP, &a, &na, &rc);
    assert_int_equal(rc, 0);
    free(a);
    run_loader(ds, 2, STK_ON_ERROR_RAISE, &a, &na, &rc);
    assert_true(rc == STK_EDATA);
    free(a);
    stk_dataset_close(ds);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_follows_exact_geometry),
        cmocka_unit_test(test_mask_resize_is_torch_nearest),
        cmocka_unit_test(test_boxes_dropped_outside_and_small),
        cmocka_unit_test(test_bbox_crop),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_loader_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
