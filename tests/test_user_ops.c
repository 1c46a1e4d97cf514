/*
 * test_user_ops.c — user-defined ops (stoker/op.h, src/ops/op_user.c):
 * registration and its refusals, plugins (the example brightness plugin
 * and the fixtures of tests/plugins/test_plugin.c), ops run through the
 * loader against independent references (the built-in ops, hand-computed
 * crops), determinism across thread counts, shape changes, and errors
 * that name the sample and the op.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/op.h"
#include "stoker/stoker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/dataset.h" /* stk_dataset_sample_name: how the loader names a sample */
#include "testutil.h"

#define H 8
#define W 6
#define C 3
#define N 37

static uint8_t *make_pixels(int n, uint64_t seed)
{
    uint8_t *p = malloc((size_t)n * H * W * C);
    assert_non_null(p);
    tu_fill_random(p, (size_t)n * H * W * C, seed);
    return p;
}

static stk_dataset *open_memory(const uint8_t *px, int n, uint32_t h, uint32_t w, uint32_t c)
{
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_from_memory(px, NULL, (uint64_t)n, h, w, c, 0, &ds), 0);
    return ds;
}

/* Every sample of one unshuffled epoch; rc of the last next() in *rc. */
static tu_run run_spec(stk_dataset *ds, const char *spec, uint32_t threads, int skip, int *rc_out)
{
    stk_loader_options o = {.batch_size = 8, .threads = threads, .prefetch = 2, .seed = 99,
                            .no_shuffle = 1,
                            .on_error = skip ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE};
    stk_loader *l = NULL;
    int rc = stk_loader_create(ds, spec, &o, &l);
    if (rc < 0)
        print_error("create '%s': %s\n", spec, stk_errmsg());
    assert_int_equal(rc, 0);
    tu_run r = {0};
    rc = tu_drain(l, &r, 0);
    if (rc_out)
        *rc_out = rc;
    else
        assert_int_equal(rc, 0);
    stk_loader_destroy(l);
    return r;
}

static void expect_same(stk_dataset *ds, const char *a, const char *b, uint32_t threads,
                        size_t sample_bytes)
{
    tu_run x = run_spec(ds, a, threads, 0, NULL), y = run_spec(ds, b, threads, 0, NULL);
    if (memcmp(x.data, y.data, x.rows * sample_bytes))
        print_error("'%s' differs from '%s' (%u threads)\n", a, b, threads);
    assert_int_equal(x.rows, y.rows);
    assert_memory_equal(x.data, y.data, x.rows * sample_bytes);
    tu_run_free(&x);
    tu_run_free(&y);
}

/* ---------------------------------------------------------------------- */
/* An op registered in-process                                             */
/* ---------------------------------------------------------------------- */

static int inv_run(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                   char *err, size_t errsize)
{
    for (uint32_t y = 0; y < in->height; y++)
        for (size_t i = 0; i < (size_t)in->width * in->channels; i++)
            out->pixels[y * out->stride + i] = (uint8_t)(255 - in->pixels[y * in->stride + i]);
    return 0;
}

static stk_user_op inv_op(const char *name)
{
    return (stk_user_op){.abi_version = STK_OP_ABI_VERSION, .struct_size = sizeof(stk_user_op),
                         .name = name, .run = inv_run};
}

static void test_register_and_run(void **state)
{
    (void)state;
    stk_user_op op = inv_op("t_invert");
    assert_int_equal(stk_op_register(&op), 0);
    uint8_t *px = make_pixels(N, 1);
    stk_dataset *ds = open_memory(px, N, H, W, C);
    /* The built-in RandomInvert(p=1) is the reference. */
    expect_same(ds, "t_invert", "invert 1", 1, H * W * C);
    expect_same(ds, "t_invert | to f32 chw", "invert 1 | to f32 chw", 2, H * W * C * 4);
    /* Case-insensitive, like every op name; after a resize. */
    expect_same(ds, "resize 5,4 | T_INVERT | normalize 0.5 0.25", "resize 5,4 | invert 1 | "
                "normalize 0.5 0.25", 2, 5 * 4 * C * 4);
    /* It takes no arguments (no parse hook). */
    assert_int_equal(stk_spec_validate("t_invert 3"), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "'t_invert' takes no arguments"));
    stk_dataset_close(ds);
    free(px);
}

static void test_register_refusals(void **state)
{
    (void)state;
    stk_user_op op = inv_op("t_dup");
    assert_int_equal(stk_op_register(&op), 0);
    assert_int_equal(stk_op_register(&op), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "'t_dup' is already registered"));
    const char *taken[] = {"resize", "hflip", "imagenet-val", "plugin"};
    for (int i = 0; i < 4; i++) {
        op = inv_op(taken[i]);
        assert_int_not_equal(stk_op_register(&op), 0);
    }
    op = inv_op("hflip");
    stk_op_register(&op);
    assert_non_null(strstr(stk_errmsg(), "alias of the built-in op 'flip'"));
    const char *bad[] = {"", "Upper", "9lives", "has space", "dash-ed", NULL};
    for (int i = 0; i < 5; i++) {
        op = inv_op(bad[i]);
        assert_int_equal(stk_op_register(&op), STK_EINVAL);
        assert_non_null(strstr(stk_errmsg(), "is not valid"));
    }
    op = inv_op(NULL);
    assert_int_equal(stk_op_register(&op), STK_EINVAL);
    op = inv_op("t_norun");
    op.run = NULL;
    assert_int_equal(stk_op_register(&op), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no run hook"));
    /* Versions: another ABI version names both; sizes outside the known range. */
    op = inv_op("t_v2");
    op.abi_version = STK_OP_ABI_VERSION + 1;
    assert_int_equal(stk_op_register(&op), STK_EUNSUPPORTED);
    char want[128];
    snprintf(want, sizeof want, "op ABI version %u, but this stoker", STK_OP_ABI_VERSION + 1);
    assert_non_null(strstr(stk_errmsg(), want));
    snprintf(want, sizeof want, "has op ABI version %u", STK_OP_ABI_VERSION);
    assert_non_null(strstr(stk_errmsg(), want));
    op = inv_op("t_small");
    op.struct_size = 16;
    assert_int_equal(stk_op_register(&op), STK_EUNSUPPORTED);
    op.struct_size = sizeof op + 8;
    assert_int_equal(stk_op_register(&op), STK_EUNSUPPORTED);
    assert_non_null(strstr(stk_errmsg(), "newer stoker/op.h"));
    assert_int_equal(stk_op_register(NULL), STK_EINVAL);
    /* None of the refused names became an op. */
    assert_int_equal(stk_spec_validate("t_v2"), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "unknown op 't_v2'"));
}

/* ---------------------------------------------------------------------- */
/* Plugins                                                                 */
/* ---------------------------------------------------------------------- */

static void test_plugin_brightness_equals_builtin(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load(STK_PLUGIN_BRIGHTNESS), 0);
    assert_int_equal(stk_plugin_load(STK_PLUGIN_BRIGHTNESS), 0); /* again: nothing */
    uint8_t *px = make_pixels(N, 2);
    stk_dataset *ds = open_memory(px, N, H, W, C);
    const double factors[] = {0.0, 0.5, 1.0, 1.37, 2.0, 4.5};
    for (int i = 0; i < 6; i++)
        for (uint32_t t = 1; t <= 2; t++) {
            char a[128], b[128];
            snprintf(a, sizeof a, "brightness %g", factors[i]);
            snprintf(b, sizeof b, "color_jitter brightness=%g:%g", factors[i], factors[i]);
            expect_same(ds, a, b, t, H * W * C);
        }
    /* After a resize, as CHW. (With float output they differ: the built-in
     * op hands its float result on, a user op rounds to uint8 first.) */
    expect_same(ds, "resize 7,5 | brightness 1.5 | to u8 chw",
                "resize 7,5 | color_jitter brightness=1.5:1.5 | to u8 chw", 2, 7 * 5 * C);
    stk_dataset_close(ds);
    free(px);

    /* Every one of 256 values, against the formula written out here. */
    uint8_t all[16 * 16 * 3];
    for (int i = 0; i < 16 * 16 * 3; i++)
        all[i] = (uint8_t)(i % 256);
    ds = open_memory(all, 1, 16, 16, 3);
    tu_run r = run_spec(ds, "brightness 1.3", 1, 0, NULL);
    for (int i = 0; i < 16 * 16 * 3; i++) {
        float x = 1.3f * ((float)all[i] / 255.0f);
        x = x > 1.0f ? 1.0f : x;
        assert_int_equal(r.data[i], (uint8_t)lrintf(x * 255.0f));
    }
    tu_run_free(&r);
    stk_dataset_close(ds);
}

static void test_plugin_spec_stage(void **state)
{
    (void)state;
    uint8_t *px = make_pixels(5, 3);
    stk_dataset *ds = open_memory(px, 5, H, W, C);
    char spec[1024];
    snprintf(spec, sizeof spec, "plugin %s | random_brightness 0.5 1.5", STK_PLUGIN_BRIGHTNESS);
    tu_run r = run_spec(ds, spec, 1, 0, NULL);
    assert_int_equal(r.rows, 5);
    tu_run_free(&r);
    assert_int_equal(stk_spec_validate("plugin"), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "expected a path after 'plugin'"));
    assert_int_equal(stk_spec_validate("plugin a b"), STK_ESPEC);
    /* A missing library: the spec error points at the path. */
    assert_int_equal(stk_spec_validate("resize 4,4 | plugin /nonexistent/libx.so"), STK_ENOENT);
    assert_non_null(strstr(stk_errmsg(), "column 21"));
    assert_non_null(strstr(stk_errmsg(), "/nonexistent/libx.so"));
    stk_dataset_close(ds);
    free(px);
}

static void test_plugin_load_errors(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load("/nonexistent/libnope.so"), STK_ENOENT);
    assert_non_null(strstr(stk_errmsg(), "plugin /nonexistent/libnope.so"));
    assert_int_equal(stk_plugin_load(NULL), STK_EINVAL);
    assert_int_equal(stk_plugin_load("libstoker_no_such_plugin.so"), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "cannot be loaded"));
    /* A file that is not a library. */
    const char *txt = tu_path("not_a_plugin.so");
    tu_write_file(txt, "hello", 5);
    assert_int_equal(stk_plugin_load(txt), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "cannot be loaded"));

    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN_NOINIT), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "has no stk_plugin_init function"));
    assert_non_null(strstr(stk_errmsg(), STK_TEST_PLUGIN_NOINIT));

    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN_BADABI), STK_EUNSUPPORTED);
    char want[256];
    snprintf(want, sizeof want, "plugin %s: op 'test_future' was built for stoker op ABI "
             "version %u, but this stoker (%s) has op ABI version %u",
             STK_TEST_PLUGIN_BADABI, STK_OP_ABI_VERSION + 1, stk_version_string(),
             STK_OP_ABI_VERSION);
    if (!strstr(stk_errmsg(), want))
        print_error("got: %s\nwant: %s\n", stk_errmsg(), want);
    assert_non_null(strstr(stk_errmsg(), want));

    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN_INITFAILS), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "stk_plugin_init returned -1"));
}

/* ---------------------------------------------------------------------- */
/* Errors at run time name the sample and the op                           */
/* ---------------------------------------------------------------------- */

static void test_run_errors(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN), 0);
    uint8_t *px = make_pixels(N, 4);
    for (int i = 0; i < N; i++)
        if (px[(size_t)i * H * W * C] == 200)
            px[(size_t)i * H * W * C] = 201;
    px[(size_t)13 * H * W * C] = 200; /* sample 13 is "bad" for test_fail 200 */
    stk_dataset *ds = open_memory(px, N, H, W, C);
    int rc;
    tu_run r = run_spec(ds, "test_fail 200", 2, 0, &rc);
    assert_int_equal(rc, STK_EDATA);
    char name[256];
    stk_dataset_sample_name(ds, 13, name, sizeof name);
    assert_non_null(strstr(stk_errmsg(), name));
    assert_non_null(strstr(stk_errmsg(), "op 'test_fail' of plugin "));
    assert_non_null(strstr(stk_errmsg(), "the first byte is 200"));
    tu_run_free(&r);
    /* Skipped under on_error=skip: the other samples, unchanged. */
    r = run_spec(ds, "test_fail 200", 2, 1, NULL);
    assert_int_equal(r.rows, N - 1);
    assert_int_equal(r.skipped, 1);
    assert_memory_equal(r.data, px, 13 * H * W * C);
    assert_memory_equal(r.data + 13 * H * W * C, px + 14 * H * W * C, (N - 14) * H * W * C);
    tu_run_free(&r);
    /* A code that is not stoker's is fatal even under skip. */
    r = run_spec(ds, "test_fatal", 1, 1, &rc);
    assert_int_equal(rc, STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "op 'test_fatal'"));
    assert_non_null(strstr(stk_errmsg(), "this op always fails"));
    tu_run_free(&r);
    stk_dataset_close(ds);
    free(px);
}

/* ---------------------------------------------------------------------- */
/* Shapes, order, determinism                                              */
/* ---------------------------------------------------------------------- */

static void test_shape_change(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN), 0);
    uint8_t *px = make_pixels(N, 5);
    stk_dataset *ds = open_memory(px, N, H, W, C);
    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
    assert_int_equal(stk_spec_check("test_crop 4 5 1 | to f32 chw", H, W, C, shape, &dt, &lay), 0);
    assert_int_equal(shape[0], 1);
    assert_int_equal(shape[1], 4);
    assert_int_equal(shape[2], 5);
    /* The top-left 4x5 of channel 0 (hand-made reference). */
    tu_run r = run_spec(ds, "test_crop 4 5 1", 2, 0, NULL);
    for (int i = 0; i < N; i++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 5; x++)
                assert_int_equal(r.data[(size_t)i * 20 + y * 5 + x],
                                 px[(size_t)i * H * W * C + (y * W + x) * C]);
    tu_run_free(&r);
    /* Gray to RGB, then the built-in ops see 3 channels; a normalize with
     * one value per channel of the new shape. */
    r = run_spec(ds, "test_crop 4 5 1 | test_crop 3 3 3 | normalize 0,0,0 1,1,1 | to f32 hwc",
                 1, 0, NULL);
    for (int i = 0; i < N; i++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 3; x++)
                for (int c = 0; c < 3; c++)
                    assert_true(fabsf(((float *)r.data)[(size_t)i * 27 + (y * 3 + x) * 3 + c] -
                                      (float)px[(size_t)i * H * W * C + (y * W + x) * C] /
                                          255.0f) < 1e-6f);
    tu_run_free(&r);
    r = run_spec(ds, "test_crop 4 5 1 | normalize 0.5 0.5 | to f32 chw", 1, 0, NULL);
    for (int y = 0; y < 4; y++)
        assert_true(fabsf(((float *)r.data)[y * 5] -
                          ((float)px[(y * W) * C] / 255.0f - 0.5f) / 0.5f) < 1e-6f);
    tu_run_free(&r);
    /* A policy after it runs on the new size (and keeps determinism). */
    tu_run a = run_spec(ds, "test_crop 6 4 3 | trivial_augment_wide", 1, 0, NULL);
    tu_run b = run_spec(ds, "test_crop 6 4 3 | trivial_augment_wide", 3, 0, NULL);
    assert_memory_equal(a.data, b.data, a.rows * 6 * 4 * 3);
    tu_run_free(&a);
    tu_run_free(&b);
    /* Too large for the image: a compile error naming the op and shape. */
    assert_int_equal(stk_spec_check("test_crop 9 9 3", H, W, C, shape, &dt, &lay), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "test_crop H W C cannot take a 8x6x3 (HxWxC) image"));
    assert_int_equal(stk_spec_check("test_crop 4 4 2", H, W, C, shape, &dt, &lay), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "channels 1 or 3"));
    stk_dataset_close(ds);
    free(px);
}

static void test_order_rules(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load(STK_PLUGIN_BRIGHTNESS), 0);
    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"brightness", "brightness FACTOR (plugin "},
        {"brightness x", "expected a factor from 0 to 100, got 'x'"},
        {"brightness 1.5 | resize 4,4", "brightness before resize is not supported"},
        {"color_jitter 0.4 | brightness 1.5", "brightness must come before color_jitter"},
        {"normalize imagenet | brightness 1.5", "brightness must come before normalize"},
        {"brightness 1.5 | flip", "flip after brightness is not supported"},
        {"brightness 1.5 | posterize 3", "posterize after brightness is not supported"},
        {"random_apply n=1 | brightness 1.5", "random_apply cannot hold brightness"},
        {"brightnes 1.5", "did you mean 'brightness'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = stk_spec_check(bad[i].spec, H, W, C, shape, &dt, &lay);
        if (rc != STK_ESPEC || !strstr(stk_errmsg(), bad[i].msg))
            print_error("'%s': %d %s\n", bad[i].spec, rc, stk_errmsg());
        assert_int_equal(rc, STK_ESPEC);
        assert_non_null(strstr(stk_errmsg(), bad[i].msg));
    }
    /* Variable-size input needs the size fixed before a user op. */
    assert_int_equal(stk_spec_check("brightness 1.5", 0, 0, 0, shape, &dt, &lay), STK_ESPEC);
    assert_int_equal(stk_spec_check("resize 10,10 | brightness 1.5 | rand_augment | "
                                    "color_jitter 0.2 | rotate 5 | normalize imagenet",
                                    0, 0, 0, shape, &dt, &lay), 0);
}

static void test_random_op_deterministic(void **state)
{
    (void)state;
    assert_int_equal(stk_plugin_load(STK_PLUGIN_BRIGHTNESS), 0);
    assert_int_equal(stk_plugin_load(STK_TEST_PLUGIN), 0);
    uint8_t *px = malloc((size_t)N * H * W * C);
    assert_non_null(px);
    memset(px, 100, (size_t)N * H * W * C); /* every sample the same */
    stk_dataset *ds = open_memory(px, N, H, W, C);
    const char *spec = "flip | random_brightness 0.2 1.8 | test_crop 8 6 3";
    tu_run a = run_spec(ds, spec, 1, 0, NULL);
    for (uint32_t t = 2; t <= 3; t++) {
        tu_run b = run_spec(ds, spec, t, 0, NULL);
        assert_memory_equal(a.data, b.data, a.rows * H * W * C);
        tu_run_free(&b);
    }
    /* The factor is drawn per sample: the samples differ, and each is the
     * brightness of 100 by a factor in [0.2, 1.8]. */
    int distinct = 0;
    for (int i = 1; i < N; i++)
        distinct += a.data[(size_t)i * H * W * C] != a.data[0];
    assert_true(distinct > N / 2);
    for (int i = 0; i < N; i++) {
        uint8_t v = a.data[(size_t)i * H * W * C];
        assert_true(v >= (uint8_t)lrintf(0.2f * 100.0f) - 1 && v <= (uint8_t)lrintf(1.8f * 100.0f) + 1);
    }
    tu_run_free(&a);
    stk_dataset_close(ds);
    free(px);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_and_run),
        cmocka_unit_test(test_register_refusals),
        cmocka_unit_test(test_plugin_brightness_equals_builtin),
        cmocka_unit_test(test_plugin_spec_stage),
        cmocka_unit_test(test_plugin_load_errors),
        cmocka_unit_test(test_run_errors),
        cmocka_unit_test(test_shape_change),
        cmocka_unit_test(test_order_rules),
        cmocka_unit_test(test_random_op_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
