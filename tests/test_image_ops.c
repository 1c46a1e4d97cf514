/*
 * test_image_ops.c — the image pipeline (random_resized_crop, resize,
 * rotate, color_jitter, presets, encoded and variable-size input).
 *
 * References are independent of the library where it matters:
 *   - random_resized_crop's draws are re-derived here from the procedure
 *     docs/pipeline.md documents (torchvision's get_params with stk_rng
 *     draws in the documented order), with Python-style rounding written out;
 *     and its distribution is compared with a simulation of torchvision's
 *     procedure driven by an unrelated generator (splitmix64);
 *   - resize is checked on properties (a constant image stays constant) and
 *     on a 2x downscale whose fixed-point result is computed by hand from
 *     the triangle filter;
 *   - encoded input is checked against the same pipeline run on the pixels
 *     a full decode gives (equal when the DCT scale is 1, close when not).
 * Every kernel variant the CPU has must give identical bytes; every output
 * byte must be written (two runs over different sentinels agree, a guard
 * zone stays untouched); the scratch must stop growing after warm-up.
 * (Comparisons with Pillow and torchvision themselves are in
 * tests/python/test_image_ops_torchvision.py.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec.h"
#include "codec/codec_write.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/color.h"
#include "ops/half.h"
#include "ops/kernel.h"
#include "ops/plan.h"
#include "ops/resample.h"
#include "ops/op.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* ---------------------------------------------------------------------- */
/* Helpers                                                                 */
/* ---------------------------------------------------------------------- */

static stk_plan *compile_ok(const char *spec, uint32_t h, uint32_t w, uint32_t c)
{
    stk_plan *p = NULL;
    int rc = stk_plan_compile(spec, h, w, c, &p);
    if (rc != 0) {
        print_error("compile '%s': %s\n", spec, stk_errmsg());
        fail();
    }
    return p;
}

static size_t plan_bytes(const stk_plan *p)
{
    size_t b;
    stk_plan_output(p, NULL, NULL, NULL, &b);
    return b;
}

#define GUARD 64

/* Run a plan twice over different sentinels; both must agree and the guard
 * must stay untouched. Returns the output (malloc'd) or NULL with *rc. */
static uint8_t *run_checked(const stk_plan *p, const stk_plan_input *in, uint64_t seed,
                            uint64_t index, stk_scratch *sc, int *rc_out)
{
    size_t n = plan_bytes(p);
    uint8_t *a = malloc(n + GUARD), *b = malloc(n + GUARD);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 0x00, n + GUARD);
    memset(b, 0xFF, n + GUARD);
    stk_rng r;
    stk_rng_init(&r, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    int rc = stk_plan_run_input(p, in, &r, a, sc);
    if (rc == 0) {
        stk_rng_init(&r, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
        assert_int_equal(stk_plan_run_input(p, in, &r, b, sc), 0);
        if (memcmp(a, b, n) != 0) {
            print_error("an output byte was not written\n");
            fail();
        }
        for (int i = 0; i < GUARD; i++) {
            assert_int_equal(a[n + i], 0x00);
            assert_int_equal(b[n + i], 0xFF);
        }
    }
    free(b);
    if (rc_out)
        *rc_out = rc;
    if (rc != 0) {
        free(a);
        return NULL;
    }
    return a;
}

/* Python's round(): to nearest, halves to even — written out. */
static double py_round(double x)
{
    double r = floor(x), d = x - r;
    if (d > 0.5)
        return r + 1;
    if (d < 0.5)
        return r;
    return fmod(r, 2.0) == 0.0 ? r : r + 1;
}

/* ---------------------------------------------------------------------- */
/* Spec                                                                    */
/* ---------------------------------------------------------------------- */

static void test_spec_parse(void **state)
{
    (void)state;
    stk_spec s;
    assert_int_equal(stk_spec_parse("random_resized_crop 224", &s), 0);
    assert_int_equal(s.ops[0].kind, STK_OP_RANDOM_RESIZED_CROP);
    assert_int_equal(s.ops[0].u.rrc.height, 224);
    assert_int_equal(s.ops[0].u.rrc.width, 224);
    assert_true(s.ops[0].u.rrc.scale[0] == 0.08 && s.ops[0].u.rrc.scale[1] == 1.0);
    assert_true(s.ops[0].u.rrc.ratio[0] == 0.75 && s.ops[0].u.rrc.ratio[1] == 4.0 / 3.0);

    assert_int_equal(stk_spec_parse("decode | random_resized_crop 200,100 scale=0.5:0.9 ratio=1,2", &s), 0);
    assert_int_equal(s.nops, 2);
    assert_int_equal(s.ops[0].kind, STK_OP_DECODE);
    assert_int_equal(s.ops[1].u.rrc.height, 200);
    assert_int_equal(s.ops[1].u.rrc.width, 100);
    assert_true(s.ops[1].u.rrc.scale[0] == 0.5 && s.ops[1].u.rrc.scale[1] == 0.9);
    assert_true(s.ops[1].u.rrc.ratio[0] == 1.0 && s.ops[1].u.rrc.ratio[1] == 2.0);

    assert_int_equal(stk_spec_parse("resize 256", &s), 0);
    assert_true(s.ops[0].u.resize.shorter && s.ops[0].u.resize.height == 256);
    assert_int_equal(stk_spec_parse("resize 10,20", &s), 0);
    assert_true(!s.ops[0].u.resize.shorter && s.ops[0].u.resize.height == 10 &&
                s.ops[0].u.resize.width == 20);

    assert_int_equal(stk_spec_parse("rotate 10", &s), 0);
    assert_true(s.ops[0].u.rotate.lo == -10 && s.ops[0].u.rotate.hi == 10);
    assert_int_equal(s.ops[0].u.rotate.nfill, 1);
    assert_int_equal(s.ops[0].u.rotate.fill[0], 0);
    assert_int_equal(stk_spec_parse("rotate -5:20 fill=1,2,3", &s), 0);
    assert_true(s.ops[0].u.rotate.lo == -5 && s.ops[0].u.rotate.hi == 20);
    assert_int_equal(s.ops[0].u.rotate.nfill, 3);
    assert_int_equal(s.ops[0].u.rotate.fill[2], 3);

    assert_int_equal(stk_spec_parse("color_jitter 0.4 0.4 0.4", &s), 0);
    assert_true(s.ops[0].u.jitter.has_b && s.ops[0].u.jitter.has_c && s.ops[0].u.jitter.has_s);
    assert_false(s.ops[0].u.jitter.has_h);
    assert_true(fabs(s.ops[0].u.jitter.b[0] - 0.6) < 1e-12 && s.ops[0].u.jitter.b[1] == 1.4);
    assert_int_equal(stk_spec_parse("color_jitter 0 1.5 hue=0.1", &s), 0);
    assert_false(s.ops[0].u.jitter.has_b);
    assert_true(s.ops[0].u.jitter.c[0] == 0.0 && s.ops[0].u.jitter.c[1] == 2.5);
    assert_false(s.ops[0].u.jitter.has_s);
    assert_true(s.ops[0].u.jitter.has_h && s.ops[0].u.jitter.h[0] == -0.1);
    assert_int_equal(stk_spec_parse("color_jitter saturation=0.5:1.5 brightness = 1:1", &s), 0);
    assert_false(s.ops[0].u.jitter.has_b);
    assert_true(s.ops[0].u.jitter.has_s && s.ops[0].u.jitter.s[0] == 0.5);

    /* Presets */
    assert_int_equal(stk_spec_parse("imagenet-train-few", &s), 0);
    assert_int_equal(s.nops, 4);
    assert_int_equal(s.ops[0].kind, STK_OP_RANDOM_RESIZED_CROP);
    assert_int_equal(s.ops[1].kind, STK_OP_HFLIP);
    assert_int_equal(s.ops[2].kind, STK_OP_NORMALIZE);
    assert_int_equal(s.dtype, STK_F32);
    assert_int_equal(s.layout, STK_CHW);
    assert_string_equal(s.preset, "imagenet-train-few");
    assert_int_equal(stk_spec_parse(" IMAGENET_TRAIN_EXTENSIVE ", &s), 0);
    assert_int_equal(s.ops[2].kind, STK_OP_COLOR_JITTER);
    assert_int_equal(stk_spec_parse("imagenet-val | to f16 hwc", &s), 0);
    assert_int_equal(s.nops, 4);
    assert_int_equal(s.ops[0].kind, STK_OP_RESIZE);
    assert_int_equal(s.ops[1].kind, STK_OP_CENTER_CROP);
    assert_int_equal(s.ops[3].kind, STK_OP_TO);
    assert_int_equal(s.dtype, STK_F16);
    assert_int_equal(s.layout, STK_HWC);
    assert_non_null(stk_spec_preset("imagenet-val"));
    assert_null(stk_spec_preset("imagenet"));
}

typedef struct errcase {
    const char *spec;
    uint32_t h, w, c; /* stk_spec_check shape; 0,0,0 = variable */
    int parse_only;
    const char *words;
} errcase;

static const errcase errcases[] = {
    {"resize 256 | decode", 0, 0, 0, 1, "decode must be the first stage"},
    {"decode 1", 0, 0, 0, 1, "unexpected argument '1' to 'decode'"},
    {"normalize imagenet | color_jitter 0.4", 0, 0, 0, 1, "color_jitter must come before normalize"},
    {"normalize imagenet | resize 10", 0, 0, 0, 1, "resize must come before normalize"},
    {"imagenet-val | flip", 0, 0, 0, 1, "only '| to DTYPE [LAYOUT]' may follow the preset 'imagenet-val'"},
    {"imagenet-val | to f16 | to f32", 0, 0, 0, 1, "'to' comes after 'to'"},
    {"flip | imagenet-val", 0, 0, 0, 1, "must be the first stage"},
    {"imagenet-val 3", 0, 0, 0, 1, "takes no arguments"},
    {"imagenet-trian-few", 0, 0, 0, 1, "did you mean 'imagenet-train-few'?"},
    {"random_resized_crops 224", 0, 0, 0, 1, "did you mean 'random_resized_crop'?"},
    {"rotate", 0, 0, 0, 1, "expected DEGREES after 'rotate'"},
    {"rotate -3", 0, 0, 0, 1, "must be >= 0"},
    {"rotate 10 fill=300", 0, 0, 0, 1, "whole number from 0 to 255"},
    {"color_jitter", 0, 0, 0, 1, "expected factors after 'color_jitter'"},
    {"color_jitter 1 1 1 0.6", 0, 0, 0, 1, "hue must be from 0 to 0.5"},
    {"color_jitter -1", 0, 0, 0, 1, "brightness must be >= 0"},
    {"color_jitter 1 2 contrast=3", 0, 0, 0, 1, "'contrast' is given twice"},
    {"color_jitter 0.1 0.1 0.1 0.1 0.1", 0, 0, 0, 1, "unexpected argument"},
    {"color_jitter gamma=1", 0, 0, 0, 1, "unknown key 'gamma'"},
    {"random_resized_crop", 0, 0, 0, 1, "expected an output size after 'random_resized_crop'"},
    {"random_resized_crop 224 scale=0.5", 0, 0, 0, 1, "scale= takes a range low:high"},
    {"random_resized_crop 224 scale=0.9:0.1", 0, 0, 0, 1, "must be low:high"},
    {"random_resized_crop 224 ratio=0:1", 0, 0, 0, 1, "ratio= must be > 0"},
    {"random_resized_crop 224 size=3", 0, 0, 0, 1, "unknown key 'size'"},
    {"resize", 0, 0, 0, 1, "expected a size after 'resize'"},
    {"resize 1,2,3", 0, 0, 0, 1, "resize takes S (the shorter side) or H,W"},
    /* shape-dependent */
    {"resize 256", 0, 0, 0, 0, "vary in size"},
    {"flip | normalize imagenet", 0, 0, 0, 0, "vary in size"},
    {"", 0, 0, 0, 0, "vary in size"},
    {"resize 256 | center_crop 300", 0, 0, 0, 0, "does not fit every image"},
    {"pad 4 | center_crop 224", 0, 0, 0, 0, "pad needs images of one fixed size"},
    {"random_crop 24 padding=4", 0, 0, 0, 0, "pad needs images of one fixed size"},
    {"random_resized_crop 24 | pad 2", 32, 32, 3, 0, "pad after random_resized_crop"},
    {"rotate 10 | center_crop 20", 32, 32, 3, 0, "center_crop after rotate is not supported"},
    {"resize 10,10 | random_resized_crop 5", 32, 32, 3, 0, "only one resize or random_resized_crop"},
    {"color_jitter 0.1", 32, 32, 4, 0, "needs images with 1 or 3 channels, got 4"},
    {"resize 10 | center_crop 12", 32, 32, 3, 0, "larger than its input 10x10"},
    {"rotate 3 fill=1,2", 32, 32, 3, 0, "fill has 2 values but the image has 3 channels"},
    {"resize 8,8 | normalize 0.5,0.5 0.2", 32, 32, 3, 0, "normalize has 2 mean values"},
    /* grayscale, gaussian_blur, random_erasing, random_apply */
    {"grayscale 2", 0, 0, 0, 1, "grayscale p must be a number from 0 to 1, got '2'"},
    {"normalize mnist | grayscale", 0, 0, 0, 1, "grayscale must come before normalize"},
    {"grayscale | posterize 2", 0, 0, 0, 1, "posterize must come before grayscale"},
    {"gaussian_blur", 0, 0, 0, 1, "expected a kernel size after 'gaussian_blur'"},
    {"gaussian_blur 4", 0, 0, 0, 1, "gaussian_blur kernel sizes must be odd, got '4'"},
    {"gaussian_blur 3,4", 0, 0, 0, 1, "gaussian_blur kernel sizes must be odd, got '3,4'"},
    {"gaussian_blur 257", 0, 0, 0, 1, "from 1 to 255"},
    {"gaussian_blur 3 sigma=0", 0, 0, 0, 1, "sigma must be > 0"},
    {"gaussian_blur 3 sigma=1e-50", 0, 0, 0, 1, "sigma must be > 0 as a float32"},
    {"gaussian_blur 3 sigma=2:1", 0, 0, 0, 1, "must be low:high"},
    {"gaussian_blur 3 0.5 kernel_size=5", 0, 0, 0, 1, "'kernel_size' is given twice"},
    {"random_erasing 1.5", 0, 0, 0, 1, "random_erasing p must be from 0 to 1, got '1.5'"},
    {"random_erasing scale=0.5", 0, 0, 0, 1, "scale= takes a range low:high"},
    {"random_erasing scale=0.5:2", 0, 0, 0, 1, "random_erasing scale= must lie within 0:1"},
    {"random_erasing ratio=0:2", 0, 0, 0, 1, "random_erasing ratio= must lie within (0, 1e6)"},
    {"random_erasing value=noise", 0, 0, 0, 1, "in value="},
    {"random_erasing inplace=1", 0, 0, 0, 1, "unknown key 'inplace'"},
    {"random_apply 2", 0, 0, 0, 1, "random_apply p must be from 0 to 1, got '2'"},
    {"random_apply 0.5 n=0", 0, 0, 0, 1, "random_apply n must be a whole number from 1 to 16"},
    {"random_apply 0.5 n=1.5", 0, 0, 0, 1, "random_apply n must be a whole number from 1 to 16"},
    {"gaussian_blur 65", 32, 32, 3, 0, "gaussian_blur kernel 65x65 (KX,KY) needs an image larger"},
    {"resize 20,40 | gaussian_blur 31,41", 32, 32, 3, 0, "the image here is 20x40 (HxW)"},
    {"random_erasing | flip", 32, 32, 3, 0, "flip after random_erasing is not supported"},
    {"normalize mnist | random_erasing value=1,2", 28, 28, 1, 0,
     "random_erasing has 2 values but the image has 1 channel (give 1 value or 1)"},
    {"random_apply 0.5 | resize 10", 32, 32, 3, 0, "random_apply cannot hold resize"},
    {"random_apply 0.5 | flip | resize 10", 32, 32, 3, 0,
     "random_apply cannot hold flip before a crop or resize"},
    {"random_apply 0.5 | random_apply | grayscale", 32, 32, 3, 0,
     "random_apply cannot hold random_apply"},
    {"random_apply 0.5 | normalize mnist", 28, 28, 1, 0, "random_apply cannot hold normalize"},
    {"random_apply 0.5 n=3 | grayscale | gaussian_blur 3", 32, 32, 3, 0,
     "random_apply n=3 needs 1 more stage after it"},
    {"grayscale | center_crop 20", 32, 32, 3, 0, "center_crop after grayscale is not supported"},
    {"flip | gaussian_blur 3 | color_jitter 0.1 | resize 8", 32, 32, 3, 0,
     "resize after gaussian_blur is not supported; put the crops and the resize first"},
    {"resize 8 interpolation=area", 0, 0, 0, 1,
     "unknown interpolation 'area' (known: bilinear, bicubic, nearest)"},
    {"random_resized_crop 8 interpolation=lanczos", 0, 0, 0, 1, "unknown interpolation 'lanczos'"},
    {"resize 8 mode=bicubic", 0, 0, 0, 1, "unknown key 'mode' for 'resize' (known: interpolation)"},
    {"random_erasing x", 0, 0, 0, 1, "expected a number after 'random_erasing', got 'x'"},
};

static void test_spec_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof errcases / sizeof errcases[0]; i++) {
        const errcase *e = &errcases[i];
        int rc;
        if (e->parse_only) {
            stk_spec s;
            rc = stk_spec_parse(e->spec, &s);
        } else {
            int64_t shape[3];
            rc = stk_spec_check(e->spec, e->h, e->w, e->c, shape, NULL, NULL);
        }
        if (rc != STK_ESPEC || !strstr(stk_errmsg(), e->words)) {
            print_error("'%s': rc %d, message:\n%s\nwanted '%s'\n", e->spec, rc, stk_errmsg(),
                        e->words);
            fail();
        }
        assert_non_null(strstr(stk_errmsg(), "pipeline spec, column "));
    }
}

typedef struct okcase {
    const char *spec;
    uint32_t h, w, c;
    int64_t shape[3];
    stk_dtype dt;
} okcase;

static const okcase okcases[] = {
    {"imagenet-train-few", 0, 0, 0, {3, 224, 224}, STK_F32},
    {"imagenet-train-extensive | to f16", 0, 0, 0, {3, 224, 224}, STK_F16},
    {"imagenet-val | to f16 hwc", 0, 0, 0, {224, 224, 3}, STK_F16},
    {"decode | resize 256 | center_crop 224 | to u8", 0, 0, 0, {224, 224, 3}, STK_U8},
    {"center_crop 100,50 | flip", 0, 0, 0, {100, 50, 3}, STK_U8},
    {"flip | random_crop 20 | resize 10,12 | vflip | to f32", 0, 0, 0, {3, 10, 12}, STK_F32},
    {"resize 64,32 | rotate 30 | color_jitter 0.5 0.5 0.5 0.5 | normalize imagenet", 0, 0, 0,
     {3, 64, 32}, STK_F32},
    {"resize 16 | to u8 chw", 32, 64, 1, {1, 16, 32}, STK_U8},
    {"pad 4 | random_crop 32 | flip | color_jitter 0.4 0.4 0.4 | normalize cifar10", 32, 32, 3,
     {3, 32, 32}, STK_F32},
    {"random_resized_crop 24 | normalize mnist", 28, 28, 1, {1, 24, 24}, STK_F32},
    {"rotate 10", 28, 28, 1, {28, 28, 1}, STK_U8},
};

static void test_spec_shapes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof okcases / sizeof okcases[0]; i++) {
        const okcase *k = &okcases[i];
        int64_t shape[3];
        stk_dtype dt;
        int rc = stk_spec_check(k->spec, k->h, k->w, k->c, shape, &dt, NULL);
        if (rc != 0) {
            print_error("'%s': %s\n", k->spec, stk_errmsg());
            fail();
        }
        if (memcmp(shape, k->shape, sizeof shape) != 0 || dt != k->dt) {
            print_error("'%s': shape %lld %lld %lld dtype %d\n", k->spec, (long long)shape[0],
                        (long long)shape[1], (long long)shape[2], dt);
            fail();
        }
    }
}

/* ---------------------------------------------------------------------- */
/* random_resized_crop draws                                               */
/* ---------------------------------------------------------------------- */

/* docs/pipeline.md's procedure, written out from the documentation. */
static int doc_rrc(stk_rng *r, int64_t W, int64_t H, const double scale[2], const double ratio[2],
                   int64_t *x, int64_t *y, int64_t *w, int64_t *h)
{
    double area = (double)W * (double)H;
    float lr0 = logf((float)ratio[0]), lr1 = logf((float)ratio[1]);
    for (int attempt = 1; attempt <= 10; attempt++) {
        double u1 = stk_rng_uniform(r);
        double u2 = stk_rng_uniform(r);
        float s = (float)(scale[0] + (scale[1] - scale[0]) * u1);
        float lr = (float)((double)lr0 + ((double)lr1 - (double)lr0) * u2);
        double ar = (double)expf(lr);
        double ww = py_round(sqrt(area * s * ar)), hh = py_round(sqrt(area * s / ar));
        if (ww > 0 && ww <= W && hh > 0 && hh <= H) {
            *w = (int64_t)ww;
            *h = (int64_t)hh;
            *y = stk_rng_range(r, 0, H - *h);
            *x = stk_rng_range(r, 0, W - *w);
            return attempt;
        }
    }
    double in_ratio = (double)W / (double)H;
    if (in_ratio < ratio[0]) {
        *w = W;
        *h = (int64_t)py_round((double)W / ratio[0]);
    } else if (in_ratio > ratio[1]) {
        *h = H;
        *w = (int64_t)py_round((double)H * ratio[1]);
    } else {
        *w = W;
        *h = H;
    }
    /* documented deviation: a degenerate image gets a 1-pixel crop, not an
     * empty one */
    *h = *h < 1 ? 1 : *h > H ? H : *h;
    *w = *w < 1 ? 1 : *w > W ? W : *w;
    *y = (H - *h) / 2;
    *x = (W - *w) / 2;
    return 0;
}

static int trace_raw(const stk_plan *p, uint32_t h, uint32_t w, uint64_t seed, uint64_t index,
                     stk_plan_trace *t)
{
    static uint8_t px[3];
    stk_image_view v = {px, h, w, 3, 0, 0, 1}; /* zero strides: any size, no memory */
    stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
    stk_rng r;
    stk_rng_init(&r, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    return stk_plan_trace_input(p, &in, &r, t);
}

static void test_rrc_documented_draws(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{375, 500}, {500, 333}, {100, 2000}, {2000, 90},
                                        {1, 1},     {3, 2},     {224, 224},  {17, 4000}};
    static const double scales[][2] = {{0.08, 1.0}, {0.5, 0.5}, {0.9, 1.5}};
    static const double ratios[][2] = {{0.75, 4.0 / 3.0}, {0.25, 0.5}, {1.0, 1.0}};
    char spec[200];
    for (size_t si = 0; si < 3; si++) {
        snprintf(spec, sizeof spec, "random_resized_crop 32 scale=%.17g:%.17g ratio=%.17g:%.17g | flip",
                 scales[si][0], scales[si][1], ratios[si][0], ratios[si][1]);
        stk_plan *p = compile_ok(spec, 0, 0, 0);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (uint64_t idx = 0; idx < 300; idx++) {
                stk_plan_trace t;
                assert_int_equal(trace_raw(p, sizes[k][0], sizes[k][1], 42, idx, &t), 0);
                stk_rng r;
                stk_rng_init(&r, 42, STK_RNG_DOMAIN_SAMPLE, 0, idx);
                int64_t x, y, w, h;
                int a = doc_rrc(&r, sizes[k][1], sizes[k][0], scales[si], ratios[si], &x, &y, &w, &h);
                int flip = stk_rng_uniform(&r) < 0.5;
                if (a != t.rrc_attempt || x != t.box[0] || y != t.box[1] || w != t.box[2] ||
                    h != t.box[3] || flip != t.hflip) {
                    print_error("%s on %ux%u #%llu: doc %d (%lld,%lld %lldx%lld) flip %d, plan %d "
                                "(%lld,%lld %lldx%lld) flip %d\n",
                                spec, sizes[k][0], sizes[k][1], (unsigned long long)idx, a,
                                (long long)x, (long long)y, (long long)w, (long long)h, flip,
                                t.rrc_attempt, (long long)t.box[0], (long long)t.box[1],
                                (long long)t.box[2], (long long)t.box[3], t.hflip);
                    fail();
                }
                assert_true(t.scale[0] == (double)w / 32 && t.scale[1] == (double)h / 32);
            }
        }
        stk_plan_free(p);
    }
}

/* random_apply, grayscale, gaussian_blur and random_erasing draw as
 * docs/pipeline.md writes it (the procedure re-derived here). */
static void test_new_op_documented_draws(void **state)
{
    (void)state;
    stk_plan *p = compile_ok("resize 30,40 | random_apply 0.6 n=2 | grayscale 0.5 | "
                             "gaussian_blur 5 sigma=0.2:3 | flip | normalize 0.5 0.2 | "
                             "random_erasing 0.7 scale=0.02:0.5 ratio=0.3:3.3 | "
                             "random_erasing 0.4 value=1",
                             0, 0, 0);
    int ran = 0, skipped = 0, grays = 0, erased = 0;
    for (uint64_t idx = 0; idx < 400; idx++) {
        stk_plan_trace t;
        assert_int_equal(trace_raw(p, 50, 70, 9, idx, &t), 0);
        stk_rng r;
        stk_rng_init(&r, 9, STK_RNG_DOMAIN_SAMPLE, 0, idx);
        int apply = stk_rng_uniform(&r) < 0.6, gray = 0;
        float sigma = 0.0f;
        if (apply) {
            gray = stk_rng_uniform(&r) < 0.5;
            sigma = (float)(0.2 + (3.0 - 0.2) * stk_rng_uniform(&r));
        }
        int flip = stk_rng_uniform(&r) < 0.5;
        assert_int_equal(t.applied, apply);
        assert_int_equal(t.ngray, gray);
        assert_int_equal(t.nblur, apply);
        assert_true(t.sigma == (double)sigma);
        assert_int_equal(t.hflip, flip);
        /* RandomErasing.get_params on the 30 x 40 output */
        int n = 0;
        int32_t first[4] = {0, 0, 0, 0};
        static const double P[2] = {0.7, 0.4}, S[2][2] = {{0.02, 0.5}, {0.02, 0.33}},
                            R[2][2] = {{0.3, 3.3}, {0.3, 3.3}};
        for (int e = 0; e < 2; e++) {
            if (!(stk_rng_uniform(&r) < P[e]))
                continue;
            float l0 = logf((float)R[e][0]), l1 = logf((float)R[e][1]);
            for (int a = 0; a < 10; a++) {
                double u1 = stk_rng_uniform(&r), u2 = stk_rng_uniform(&r);
                float s = (float)(S[e][0] + (S[e][1] - S[e][0]) * u1);
                float lr = (float)((double)l0 + ((double)l1 - (double)l0) * u2);
                double ar = (double)expf(lr), area = 30.0 * 40.0 * (double)s;
                double h = py_round(sqrt(area * ar)), w = py_round(sqrt(area / ar));
                if (!(h < 30 && w < 40))
                    continue;
                int32_t top = (int32_t)stk_rng_range(&r, 0, 30 - (int64_t)h);
                int32_t left = (int32_t)stk_rng_range(&r, 0, 40 - (int64_t)w);
                if (n++ == 0) {
                    first[0] = top;
                    first[1] = left;
                    first[2] = (int32_t)h;
                    first[3] = (int32_t)w;
                }
                break;
            }
        }
        assert_int_equal(t.nerase, n);
        if (n)
            assert_memory_equal(t.erase, first, sizeof first);
        ran += apply;
        skipped += !apply;
        grays += gray;
        erased += n;
    }
    assert_true(ran > 200 && skipped > 100 && grays > 80 && erased > 250);
    stk_plan_free(p);
}

/* torchvision's get_params driven by splitmix64 instead of torch's RNG. */
static uint64_t sm_state;
static double sm_uniform(void)
{
    uint64_t z = (sm_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

typedef struct rrc_stats {
    long n, fallback;
    double mean_scale, mean_logr;
    long hist[10]; /* accepted crops by area fraction (scale), 10 bins over [0.08, 1] */
} rrc_stats;

static void stats_add(rrc_stats *s, int attempt, int64_t w, int64_t h, int64_t W, int64_t H)
{
    s->n++;
    if (attempt == 0) {
        s->fallback++;
        return;
    }
    double sc = (double)w * h / ((double)W * H);
    s->mean_scale += sc;
    s->mean_logr += log((double)w / h);
    int b = (int)((sc - 0.08) / 0.092);
    s->hist[b < 0 ? 0 : b > 9 ? 9 : b]++;
}

static void test_rrc_distribution(void **state)
{
    (void)state;
    stk_plan *p = compile_ok("random_resized_crop 224", 0, 0, 0);
    static const int64_t sizes[][2] = {{375, 500}, {1000, 60}, {50, 49}};
    const long N = 20000;
    for (size_t k = 0; k < 3; k++) {
        int64_t H = sizes[k][0], W = sizes[k][1];
        rrc_stats ours, ref;
        memset(&ours, 0, sizeof ours);
        memset(&ref, 0, sizeof ref);
        sm_state = 12345 + k;
        for (long i = 0; i < N; i++) {
            stk_plan_trace t;
            assert_int_equal(trace_raw(p, (uint32_t)H, (uint32_t)W, 7, (uint64_t)i, &t), 0);
            assert_true(t.box[0] >= 0 && t.box[1] >= 0 && t.box[2] >= 1 && t.box[3] >= 1);
            assert_true(t.box[0] + t.box[2] <= W && t.box[1] + t.box[3] <= H);
            stats_add(&ours, t.rrc_attempt, t.box[2], t.box[3], W, H);
            /* the reference, in plain double arithmetic */
            int attempt = 0;
            int64_t w = 0, h = 0;
            for (int a = 1; a <= 10 && !attempt; a++) {
                double ta = (double)W * H * (0.08 + 0.92 * sm_uniform());
                double ar = exp(log(0.75) + (log(4.0 / 3.0) - log(0.75)) * sm_uniform());
                w = (int64_t)py_round(sqrt(ta * ar));
                h = (int64_t)py_round(sqrt(ta / ar));
                if (w > 0 && w <= W && h > 0 && h <= H)
                    attempt = a;
            }
            stats_add(&ref, attempt, w, h, W, H);
        }
        /* fallback fraction: binomial, 5 sigma */
        double pf = (double)ref.fallback / N, po = (double)ours.fallback / N;
        double sig = sqrt((pf * (1 - pf) + 1e-4) / N);
        if (fabs(pf - po) > 5 * sig * 1.5) {
            print_error("%lldx%lld: fallback %.4f, reference %.4f\n", (long long)H, (long long)W,
                        po, pf);
            fail();
        }
        long acc_o = ours.n - ours.fallback, acc_r = ref.n - ref.fallback;
        if (acc_r > 1000) {
            double ms_o = ours.mean_scale / acc_o, ms_r = ref.mean_scale / acc_r;
            double ml_o = ours.mean_logr / acc_o, ml_r = ref.mean_logr / acc_r;
            assert_true(fabs(ms_o - ms_r) < 0.01);
            assert_true(fabs(ml_o - ml_r) < 0.01);
            for (int b = 0; b < 10; b++) {
                double eo = (double)ours.hist[b] / acc_o, er = (double)ref.hist[b] / acc_r;
                double sb = sqrt(er * (1 - er) / acc_r + 1e-6);
                if (fabs(eo - er) > 6 * sb) {
                    print_error("%lldx%lld: scale bin %d: %.4f vs reference %.4f\n",
                                (long long)H, (long long)W, b, eo, er);
                    fail();
                }
            }
        }
        if (k == 1) /* a 1000x60 strip: most draws do not fit, many fall back */
            assert_true(po > 0.2);
        if (k == 0) /* a photo: fallbacks are rare */
            assert_true(po < 0.01);
    }
    stk_plan_free(p);
}

/* ---------------------------------------------------------------------- */
/* Resampling                                                              */
/* ---------------------------------------------------------------------- */

static void test_resize_constant(void **state)
{
    (void)state;
    uint64_t seed = 1;
    for (int trial = 0; trial < 60; trial++) {
        uint8_t r[8];
        tu_fill_random(r, sizeof r, seed++);
        int h = 1 + r[0] % 90, w = 1 + r[1] % 90, nc = r[2] & 1 ? 3 : 1;
        int oh = 1 + r[3] % 70, ow = 1 + r[4] % 70;
        uint8_t c = r[5];
        uint8_t *src = malloc((size_t)h * w * nc), *dst = malloc((size_t)oh * ow * nc);
        memset(src, c, (size_t)h * w * nc);
        double box[4] = {r[6] % 3 * 0.37, r[7] % 3 * 0.29, w - (r[6] % 2) * 0.41,
                         h - (r[7] % 2) * 0.53};
        for (int v = 0; v < 3; v++) {
            const stk_rs_kernels *k = stk_rs_kernels_variant(v);
            if (!k)
                continue;
            assert_int_equal(stk_rs_resize_u8(src, (uint32_t)h, (uint32_t)w, (ptrdiff_t)w * nc, nc,
                                              trial % 2 ? box : NULL, (uint32_t)oh, (uint32_t)ow,
                                              dst, k),
                             0);
            for (int i = 0; i < oh * ow * nc; i++)
                if (dst[i] != c) {
                    print_error("%s: constant %d became %d (%dx%d -> %dx%d)\n", k->name, c,
                                dst[i], h, w, oh, ow);
                    fail();
                }
        }
        free(src);
        free(dst);
    }
}

/* A 2x downscale of one row: the triangle filter stretched to support 2
 * puts weights 1/8, 3/8, 3/8, 1/8 on pixels 2i-1 .. 2i+2; at the ends the
 * missing pixel's weight is dropped and the rest renormalised (1:3:3 / 7).
 * In 22-bit fixed point: 1/8 = 524288, 3/8 = 1572864; 3/7 -> 1797559,
 * 1/7 -> 599186. */
static void test_resize_half_by_hand(void **state)
{
    (void)state;
    const int W = 16;
    uint8_t src[16 * 3], dst[8 * 3];
    for (int x = 0; x < W; x++)
        for (int c = 0; c < 3; c++)
            src[x * 3 + c] = (uint8_t)((x * x * 7 + c * 50 + (x % 3) * 40) & 255);
    for (int v = 0; v < 3; v++) {
        const stk_rs_kernels *k = stk_rs_kernels_variant(v);
        if (!k)
            continue;
        assert_int_equal(stk_rs_resize_u8(src, 1, W, W * 3, 3, NULL, 1, W / 2, dst, k), 0);
        for (int i = 0; i < W / 2; i++) {
            for (int c = 0; c < 3; c++) {
                int64_t s = 1 << 21;
                if (i == 0) {
                    s += 1797559ll * src[c] + 1797559ll * src[3 + c] + 599186ll * src[6 + c];
                } else if (i == W / 2 - 1) {
                    s += 599186ll * src[(2 * i - 1) * 3 + c] + 1797559ll * src[2 * i * 3 + c] +
                         1797559ll * src[(2 * i + 1) * 3 + c];
                } else {
                    s += 524288ll * (src[(2 * i - 1) * 3 + c] + src[(2 * i + 2) * 3 + c]) +
                         1572864ll * (src[2 * i * 3 + c] + src[(2 * i + 1) * 3 + c]);
                }
                int want = (int)(s >> 22);
                if (dst[i * 3 + c] != want) {
                    print_error("%s: pixel %d channel %d: %d, by hand %d\n", k->name, i, c,
                                dst[i * 3 + c], want);
                    fail();
                }
            }
        }
    }
}

static void test_resize_variants_identical(void **state)
{
    (void)state;
    uint64_t seed = 99;
    for (int trial = 0; trial < 40; trial++) {
        uint8_t r[8];
        tu_fill_random(r, sizeof r, seed++);
        int h = 1 + r[0] % 200, w = 1 + r[1] % 200, nc = r[2] & 1 ? 3 : 1;
        int oh = 1 + r[3] % 150, ow = 1 + r[4] % 150;
        uint8_t *src = malloc((size_t)h * w * nc);
        uint8_t *ref = malloc((size_t)oh * ow * nc), *dst = malloc((size_t)oh * ow * nc);
        tu_fill_random(src, (size_t)h * w * nc, seed++);
        double box[4] = {w * 0.1 * (r[5] % 3), h * 0.07 * (r[6] % 3), w - 0.3 * (r[7] % 4), h};
        const double *bp = trial % 2 ? box : NULL;
        assert_int_equal(stk_rs_resize_u8(src, (uint32_t)h, (uint32_t)w, (ptrdiff_t)w * nc, nc,
                                          bp, (uint32_t)oh, (uint32_t)ow, ref,
                                          stk_rs_kernels_variant(0)),
                         0);
        for (int v = 1; v < 3; v++) {
            const stk_rs_kernels *k = stk_rs_kernels_variant(v);
            if (!k)
                continue;
            assert_int_equal(stk_rs_resize_u8(src, (uint32_t)h, (uint32_t)w, (ptrdiff_t)w * nc,
                                              nc, bp, (uint32_t)oh, (uint32_t)ow, dst, k),
                             0);
            if (memcmp(ref, dst, (size_t)oh * ow * nc) != 0) {
                print_error("%s differs from c on %dx%dx%d -> %dx%d\n", k->name, h, w, nc, oh, ow);
                fail();
            }
        }
        free(src);
        free(ref);
        free(dst);
    }
}

/* ---------------------------------------------------------------------- */
/* Whole plans                                                             */
/* ---------------------------------------------------------------------- */

static const char *const plan_specs[] = {
    "imagenet-train-few",
    "imagenet-train-extensive | to f16 hwc",
    "imagenet-val",
    "resize 64 | center_crop 60,50 | to u8 chw",
    ("random_resized_crop 50,70 scale=0.3:1 | vflip 0.5 | rotate 20 fill=10,20,30 | "
     "color_jitter 0.4 0.4 0.4 0.2 | flip | normalize imagenet | to f16 chw"),
    "flip | center_crop 40 | resize 33,21 | color_jitter 0.2 0.3 0.4 0.5 | to u8 hwc",
    "random_crop 30,20 | rotate 45 | rotate -10:10 fill=255 | to f32 hwc",
    "resize 17,9 | color_jitter contrast=0.5 | color_jitter brightness=0.5 | to f32",
};

/* Kernel variants a CPU cannot run are reported once each (not silently
 * left out of the equality tests): "avx2" (kernels, colour, resampling) and
 * "avx512" (resampling's AVX-512BW path). */
static void report_variant_skips(void)
{
    static int done;
    if (done++)
        return;
    if (!stk_kernel_isa_available(STK_ISA_AVX2))
        print_message("[ SKIPPED  ] kernel variants avx2 and avx512: no AVX2 on this CPU, "
                      "only plain C compared\n");
    else if (!stk_cpu_has_avx512bw())
        print_message("[ SKIPPED  ] kernel variant avx512 (resampling): no AVX-512BW on this "
                      "CPU, avx2 compared with plain C\n");
}

static void run_all_isas(const char *spec, const stk_plan_input *in, uint32_t fh, uint32_t fw,
                         uint32_t fc, uint64_t index)
{
    report_variant_skips();
    uint8_t *ref = NULL;
    size_t n = 0;
    static const int isas[] = {STK_ISA_C, STK_ISA_AVX2, STK_ISA_AVX2};
    for (int v = 0; v < 3; v++) {
        if (v > 0 && !stk_kernel_isa_available(STK_ISA_AVX2))
            break;
        if (v == 1)
            setenv("STK_NO_AVX512", "1", 1);
        else
            unsetenv("STK_NO_AVX512");
        int prev = stk_kernel_force_isa(isas[v]);
        stk_plan *p = compile_ok(spec, fh, fw, fc);
        stk_scratch sc = {NULL, 0};
        int rc;
        uint8_t *out = run_checked(p, in, 5, index, &sc, &rc);
        if (rc != 0) {
            print_error("'%s': %s\n", spec, stk_errmsg());
            fail();
        }
        if (!ref) {
            ref = out;
            n = plan_bytes(p);
        } else {
            if (memcmp(ref, out, n) != 0) {
                print_error("'%s': kernel variant %d differs from plain C\n", spec, v);
                fail();
            }
            free(out);
        }
        stk_scratch_free(&sc);
        stk_plan_free(p);
        stk_kernel_force_isa(prev);
    }
    unsetenv("STK_NO_AVX512");
    free(ref);
}

static void test_plans_raw_inputs(void **state)
{
    (void)state;
    /* variable-size raw images: HWC 3 channels, 1 channel, RGBA, planar */
    static const struct { uint32_t h, w, c; int planar; } imgs[] = {
        {120, 90, 3, 0}, {77, 301, 1, 0}, {64, 64, 4, 0}, {100, 80, 3, 1}};
    for (size_t i = 0; i < sizeof imgs / sizeof imgs[0]; i++) {
        uint32_t h = imgs[i].h, w = imgs[i].w, c = imgs[i].c;
        uint8_t *px = malloc((size_t)h * w * c);
        tu_fill_random(px, (size_t)h * w * c, i + 1);
        stk_image_view v = {px, h, w, c, (ptrdiff_t)w * c, (ptrdiff_t)c, 1};
        if (imgs[i].planar) {
            v.row_stride = w;
            v.col_stride = 1;
            v.chan_stride = (ptrdiff_t)h * w;
        }
        stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
        for (size_t s = 0; s < sizeof plan_specs / sizeof plan_specs[0]; s++)
            run_all_isas(plan_specs[s], &in, 0, 0, 0, i * 10 + s);
        free(px);
    }
    /* fixed-shape raw images with image ops */
    uint8_t cifar[3 * 32 * 32], gray[28 * 28];
    tu_fill_random(cifar, sizeof cifar, 7);
    tu_fill_random(gray, sizeof gray, 8);
    stk_image_view cv = {cifar, 32, 32, 3, 32, 1, 32 * 32}; /* planar, as CIFAR */
    stk_plan_input cin = {.image = &cv, .encoded = NULL, .encoded_size = 0};
    run_all_isas("pad 4 | random_crop 32 | flip | color_jitter 0.4 0.4 0.4 0.1 | normalize cifar10",
                 &cin, 32, 32, 3, 1);
    run_all_isas("pad 2 mode=reflect | random_resized_crop 24 | rotate 15 | to f16 hwc", &cin, 32,
                 32, 3, 2);
    stk_image_view gv = {gray, 28, 28, 1, 28, 1, 1};
    stk_plan_input gin = {.image = &gv, .encoded = NULL, .encoded_size = 0};
    run_all_isas("resize 16 | color_jitter 0.5 0.5 0.5 0.5 | normalize mnist", &gin, 28, 28, 1, 3);
    run_all_isas("random_resized_crop 20 | rotate 30 fill=128 | to u8", &gin, 28, 28, 1, 4);
    /* grayscale, gaussian_blur, random_apply, random_erasing, bf16 */
    for (uint64_t k = 0; k < 6; k++) {
        run_all_isas("random_resized_crop 24 | random_apply 0.7 n=2 | grayscale 0.5 | "
                     "gaussian_blur 7,3 | color_jitter 0.4 0.4 0.4 | normalize cifar10 | "
                     "random_erasing 0.8 value=1,2,3 | to bf16 hwc",
                     &cin, 32, 32, 3, 10 + k);
        run_all_isas("resize 30,20 | gaussian_blur 9 sigma=0.1:5 | rotate 20 | gaussian_blur 3 | "
                     "random_erasing 1 value=200 | to u8",
                     &cin, 32, 32, 3, 20 + k);
        run_all_isas(k % 2 ? "resize 45,17 interpolation=bicubic | to u8"
                           : "random_resized_crop 20,40 interpolation=bicubic | flip | to u8",
                     &cin, 32, 32, 3, 40 + k);
        run_all_isas(k % 2 ? "resize 45,17 interpolation=nearest | vflip 1 | to u8"
                           : "resize 24 interpolation=nearest | center_crop 20 | to u8",
                     &cin, 32, 32, 3, 50 + k);
        run_all_isas("resize 9,40 interpolation=bicubic | to u8", &gin, 28, 28, 1, 60 + k);
        run_all_isas("random_crop 20 | grayscale 1 | gaussian_blur 5 | normalize mnist | "
                     "random_erasing 1 | random_erasing 1 value=random | to f16",
                     &gin, 28, 28, 1, 30 + k);
    }
}

static void test_determinism_and_streams(void **state)
{
    (void)state;
    uint8_t *px = tu_smooth_image(150, 200, 3);
    stk_image_view v = {px, 150, 200, 3, 600, 3, 1};
    stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
    stk_plan *p = compile_ok(plan_specs[4], 0, 0, 0);
    size_t n = plan_bytes(p);
    stk_scratch sc = {NULL, 0};
    uint8_t *a = run_checked(p, &in, 11, 3, &sc, NULL);
    uint8_t *b = run_checked(p, &in, 11, 3, &sc, NULL);
    uint8_t *c = run_checked(p, &in, 11, 4, &sc, NULL);
    uint8_t *d = run_checked(p, &in, 12, 3, &sc, NULL);
    assert_memory_equal(a, b, n);
    assert_memory_not_equal(a, c, n);
    assert_memory_not_equal(a, d, n);
    free(a);
    free(b);
    free(c);
    free(d);
    stk_scratch_free(&sc);
    stk_plan_free(p);
    free(px);
}

/* u8, f16 and f32 outputs of one draw are one set of pixels in three
 * encodings: f32 = v * (1/255) (no normalize) and f16 = f32 rounded. */
static void test_dtypes_agree(void **state)
{
    (void)state;
    uint8_t *px = tu_smooth_image(90, 130, 1);
    stk_image_view v = {px, 90, 130, 3, 390, 3, 1};
    stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
    stk_scratch sc = {NULL, 0};
    static const char *const bases[] = {"random_resized_crop 40,30 | flip",
                                        "random_resized_crop 40,30 | flip | color_jitter 0.3 0.3 0.3 0.05"};
    for (int b = 0; b < 2; b++) {
        char s8[160], s16[160], s32[160];
        snprintf(s8, sizeof s8, "%s | to u8 chw", bases[b]);
        snprintf(s16, sizeof s16, "%s | to f16 chw", bases[b]);
        snprintf(s32, sizeof s32, "%s | to f32 chw", bases[b]);
        stk_plan *p8 = compile_ok(s8, 0, 0, 0), *p16 = compile_ok(s16, 0, 0, 0),
                 *p32 = compile_ok(s32, 0, 0, 0);
        for (uint64_t idx = 0; idx < 20; idx++) {
            uint8_t *o8 = run_checked(p8, &in, 3, idx, &sc, NULL);
            uint16_t *o16 = (uint16_t *)run_checked(p16, &in, 3, idx, &sc, NULL);
            float *o32 = (float *)run_checked(p32, &in, 3, idx, &sc, NULL);
            for (int i = 0; i < 3 * 40 * 30; i++) {
                assert_int_equal(o16[i], stk_f32_to_f16(o32[i]));
                if (b == 0) /* the uint8 path: exactly v / 255 in the fixed-shape formula */
                    assert_true(o32[i] == (float)o8[i] * (float)(1.0 / 255.0));
                else /* the float path: u8 is the float rounded */
                    assert_int_equal(o8[i], (uint8_t)lrintf(o32[i] * 255.0f));
            }
            free(o8);
            free(o16);
            free(o32);
        }
        stk_plan_free(p8);
        stk_plan_free(p16);
        stk_plan_free(p32);
    }
    stk_scratch_free(&sc);
    free(px);
}

/* Flips after a rotation are moved before it with the angle negated: the
 * result must equal rotating, then mirroring the output. */
static void test_flip_after_rotate(void **state)
{
    (void)state;
    uint8_t *px = tu_smooth_image(40, 56, 2);
    stk_image_view v = {px, 40, 56, 3, 168, 3, 1};
    stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
    stk_scratch sc = {NULL, 0};
    static const char *const pairs[][2] = {
        {"rotate 25:25 | flip 1 | to f32 chw", "rotate 25:25 | to f32 chw"},
        {"rotate -40:-40 fill=200 | vflip 1 | to f32 chw", "rotate -40:-40 fill=200 | to f32 chw"},
    };
    for (int k = 0; k < 2; k++) {
        stk_plan *pa = compile_ok(pairs[k][0], 40, 56, 3), *pb = compile_ok(pairs[k][1], 40, 56, 3);
        float *a = (float *)run_checked(pa, &in, 1, 0, &sc, NULL);
        float *b = (float *)run_checked(pb, &in, 1, 0, &sc, NULL);
        double worst = 0;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 40; y++)
                for (int x = 0; x < 56; x++) {
                    float va = a[(c * 40 + y) * 56 + x];
                    float vb = k == 0 ? b[(c * 40 + y) * 56 + (55 - x)] : b[(c * 40 + (39 - y)) * 56 + x];
                    if (fabs(va - vb) > worst)
                        worst = fabs(va - vb);
                }
        if (worst > 2e-5) {
            print_error("'%s': differs from mirroring by %g\n", pairs[k][0], worst);
            fail();
        }
        free(a);
        free(b);
        stk_plan_free(pa);
        stk_plan_free(pb);
    }
    /* rotate 0 is the identity, to float rounding */
    stk_plan *p0 = compile_ok("rotate 0 | to f32 chw", 40, 56, 3);
    float *o = (float *)run_checked(p0, &in, 1, 0, &sc, NULL);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 40 * 56; i++)
            assert_true(fabs(o[c * 40 * 56 + i] - px[i * 3 + c] / 255.0) < 1e-5);
    free(o);
    stk_plan_free(p0);
    stk_scratch_free(&sc);
    free(px);
}

static void test_jitter_draws(void **state)
{
    (void)state;
    stk_plan *p = compile_ok("color_jitter 0.4 0.3 0.2 0.1", 8, 8, 3);
    long perm_count[24] = {0};
    const long N = 24000;
    double mean_b = 0;
    for (long i = 0; i < N; i++) {
        stk_plan_trace t;
        assert_int_equal(trace_raw(p, 8, 8, 3, (uint64_t)i, &t), 0);
        assert_int_equal(t.njitter, 1);
        int seen = 0, code = 0;
        for (int k = 0; k < 4; k++) {
            assert_true(t.perm[k] >= 0 && t.perm[k] < 4);
            seen |= 1 << t.perm[k];
            code = code * 4 + t.perm[k];
        }
        assert_int_equal(seen, 15);
        /* rank of the permutation */
        int rank = 0, used[4] = {0, 0, 0, 0};
        static const int fact[4] = {6, 2, 1, 1};
        for (int k = 0; k < 4; k++) {
            int smaller = 0;
            for (int q = 0; q < t.perm[k]; q++)
                smaller += !used[q];
            rank += smaller * fact[k];
            used[t.perm[k]] = 1;
        }
        perm_count[rank]++;
        assert_true(t.factor[0] >= 0.6 && t.factor[0] <= 1.4);
        assert_true(t.factor[1] >= 0.7 && t.factor[1] <= 1.3);
        assert_true(t.factor[2] >= 0.8 && t.factor[2] <= 1.2);
        assert_true(t.factor[3] >= -0.1 && t.factor[3] <= 0.1);
        mean_b += t.factor[0];
        (void)code;
    }
    for (int k = 0; k < 24; k++) /* 1000 expected each, sigma ~31 */
        assert_true(labs(perm_count[k] - N / 24) < 160);
    assert_true(fabs(mean_b / N - 1.0) < 0.01);
    stk_plan_free(p);
    /* an op that is off is not drawn and reports NaN */
    p = compile_ok("color_jitter 0 0.5", 8, 8, 3);
    stk_plan_trace t;
    assert_int_equal(trace_raw(p, 8, 8, 3, 1, &t), 0);
    assert_true(isnan(t.factor[0]) && !isnan(t.factor[1]) && isnan(t.factor[2]) &&
                isnan(t.factor[3]));
    stk_plan_free(p);
}

static void test_color_kernels(void **state)
{
    (void)state;
    /* ToTensor: exactly v / 255.0f for every byte, in every variant */
    report_variant_skips();
    uint8_t all[256 * 3];
    float t0[256], t1[256], t2[256];
    for (int v = 0; v < 256; v++)
        all[3 * v] = all[3 * v + 1] = all[3 * v + 2] = (uint8_t)v;
    for (int q = 0; q < 2; q++) {
        const stk_color_kernels *k = q ? stk_color_kernels_get() : stk_color_kernels_c();
        k->u8_to_float(all, 256, 3, (float *[]){t0, t1, t2});
        for (int v = 0; v < 256; v++)
            assert_true(t0[v] == (float)v / 255.0f && t2[v] == t0[v]);
    }
    const int n = 1000;
    float *base = malloc(sizeof(float) * 3 * n), *a = malloc(sizeof(float) * 3 * n),
          *b = malloc(sizeof(float) * 3 * n);
    uint8_t rnd[3000];
    tu_fill_random(rnd, sizeof rnd, 5);
    for (int i = 0; i < 3 * n; i++)
        base[i] = (float)rnd[i] / 255.0f;
    for (int i = 0; i < 30; i++) /* grays, where hue and saturation are degenerate */
        base[i] = base[n + i] = base[2 * n + i];
    const stk_color_kernels *kc = stk_color_kernels_c(), *kv = stk_color_kernels_get();
    for (int op = 0; op < 4; op++) {
        for (int rep = 0; rep < 3; rep++) {
            float f = op == 3 ? -0.4f + 0.4f * rep : 0.5f + 0.5f * rep;
            memcpy(a, base, sizeof(float) * 3 * n);
            memcpy(b, base, sizeof(float) * 3 * n);
            float *pa[3] = {a, a + n, a + 2 * n}, *pb[3] = {b, b + n, b + 2 * n};
            const stk_color_kernels *ks[2] = {kc, kv};
            float *const *ps[2] = {pa, pb};
            for (int q = 0; q < 2; q++) {
                switch (op) {
                case 0: ks[q]->brightness(ps[q], n, 3, f); break;
                case 1: ks[q]->contrast(ps[q], n, 3, f, (1.0f - f) * 0.4f); break;
                case 2: ks[q]->saturation(ps[q], n, 3, f, 1.0f - f); break;
                case 3: ks[q]->hue(ps[q], n, 3, f); break;
                }
            }
            assert_memory_equal(a, b, sizeof(float) * 3 * n);
            for (int i = 0; i < 3 * n; i++)
                assert_true(a[i] >= 0.0f && a[i] <= 1.0f);
            if (f == 1.0f && op < 3)
                assert_memory_equal(a, base, sizeof(float) * 3 * n);
            if (op == 3 && f == 0.0f)
                for (int i = 0; i < 3 * n; i++)
                    assert_true(fabsf(a[i] - base[i]) < 2e-6f);
        }
    }
    assert_true(fabs(kc->gray_sum((float *[]){base, base + n, base + 2 * n}, n, 3) -
                     kv->gray_sum((float *[]){base, base + n, base + 2 * n}, n, 3)) < 1e-9);
    free(base);
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------- */
/* Encoded input                                                           */
/* ---------------------------------------------------------------------- */

static void test_encoded_matches_raw(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "resize 256 | center_crop 224 | to u8 hwc",
        "random_resized_crop 96 | flip | to u8 chw",
        "resize 200 | random_crop 180 | color_jitter 0.4 0.4 0.4 | to f32",
        "center_crop 120,160 | resize 80,100 | to u8",
    };
    int h = 300, w = 410;
    uint8_t *rgb = tu_smooth_image(h, w, 4);
    size_t jlen;
    uint8_t *jpg = tu_encode_jpeg(rgb, h, w, 92, &jlen);
    /* the pixels a full decode gives, as the raw reference */
    stk_scratch dsc = {NULL, 0};
    stk_image_view full;
    assert_int_equal(stk_image_decode(jpg, jlen, NULL, NULL, 1, &dsc, &full), 0);
    /* and a PNG of the same pixels, through stk_png_write_rgb8 */
    const char *png_path = tu_path("same.png");
    assert_int_equal(stk_png_write_rgb8(png_path, full.pixels, full.width, full.height,
                                        (size_t)full.row_stride), 0);
    FILE *f = fopen(png_path, "rb");
    assert_non_null(f);
    uint8_t *png = malloc(4 << 20);
    size_t plen = fread(png, 1, 4 << 20, f);
    fclose(f);
    stk_plan_input enc = {.image = NULL, .encoded = jpg, .encoded_size = jlen}, pin = {.image = NULL, .encoded = png, .encoded_size = plen}, raw = {.image = &full, .encoded = NULL, .encoded_size = 0};
    stk_scratch sc = {NULL, 0};
    int exact = 0;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        stk_plan *p = compile_ok(specs[s], 0, 0, 0);
        size_t n = plan_bytes(p);
        for (uint64_t idx = 0; idx < 12; idx++) {
            stk_plan_trace t;
            stk_rng r;
            stk_rng_init(&r, 9, STK_RNG_DOMAIN_SAMPLE, 0, idx);
            assert_int_equal(stk_plan_trace_input(p, &enc, &r, &t), 0);
            uint8_t *a = run_checked(p, &enc, 9, idx, &sc, NULL);
            uint8_t *b = run_checked(p, &raw, 9, idx, &sc, NULL);
            uint8_t *c = run_checked(p, &pin, 9, idx, &sc, NULL);
            /* PNG is lossless and decodes at full size: always equal */
            assert_memory_equal(b, c, n);
            if (t.scale_denom == 1) {
                exact++;
                if (memcmp(a, b, n) != 0) {
                    print_error("'%s' #%llu: encoded input differs from its decoded pixels\n",
                                specs[s], (unsigned long long)idx);
                    fail();
                }
            }
            free(a);
            free(b);
            free(c);
        }
        stk_plan_free(p);
    }
    assert_true(exact >= 30); /* most of these draws decode at full scale */
    free(png);
    free(jpg);
    free(rgb);
    stk_scratch_free(&dsc);
    stk_scratch_free(&sc);
}

/* A large JPEG resized a lot decodes at 1/2, 1/4 or 1/8 and stays close to
 * the full-size result. */
static void test_dct_scaled_decode(void **state)
{
    (void)state;
    int h = 960, w = 1280;
    uint8_t *rgb = tu_smooth_image(h, w, 5);
    size_t jlen;
    uint8_t *jpg = tu_encode_jpeg(rgb, h, w, 90, &jlen);
    stk_scratch dsc = {NULL, 0};
    stk_image_view full;
    assert_int_equal(stk_image_decode(jpg, jlen, NULL, NULL, 1, &dsc, &full), 0);
    static const struct { const char *spec; unsigned d; } cases[] = {
        {"resize 480 | center_crop 400 | to u8", 2},  /* scale 2 */
        {"resize 200 | center_crop 180 | to u8", 4},  /* scale 4.8 */
        {"resize 100,120 | to u8", 8},                /* scale 9.6 x 10.7 */
        {"center_crop 400 | resize 190 | to u8", 2},  /* 400 -> 190: 2.1 */
    };
    stk_plan_input enc = {.image = NULL, .encoded = jpg, .encoded_size = jlen}, raw = {.image = &full, .encoded = NULL, .encoded_size = 0};
    stk_scratch sc = {NULL, 0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        stk_plan *p = compile_ok(cases[k].spec, 0, 0, 0);
        size_t n = plan_bytes(p);
        stk_plan_trace t;
        stk_rng r;
        stk_rng_init(&r, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
        assert_int_equal(stk_plan_trace_input(p, &enc, &r, &t), 0);
        if (t.scale_denom != cases[k].d) {
            print_error("'%s': scale 1/%u, want 1/%u\n", cases[k].spec, t.scale_denom, cases[k].d);
            fail();
        }
        uint8_t *a = run_checked(p, &enc, 1, 0, &sc, NULL);
        uint8_t *b = run_checked(p, &raw, 1, 0, &sc, NULL);
        double sum = 0;
        int worst = 0;
        for (size_t i = 0; i < n; i++) {
            int d = abs((int)a[i] - (int)b[i]);
            sum += d;
            worst = d > worst ? d : worst;
        }
        if (sum / n > 2.0) {
            print_error("'%s': mean difference %.3f from the full-size decode (max %d)\n",
                        cases[k].spec, sum / n, worst);
            fail();
        }
        free(a);
        free(b);
        stk_plan_free(p);
    }
    free(jpg);
    free(rgb);
    stk_scratch_free(&dsc);
    stk_scratch_free(&sc);
}

static void test_corrupt_encoded(void **state)
{
    (void)state;
    uint8_t *rgb = tu_smooth_image(64, 80, 6);
    size_t jlen;
    uint8_t *jpg = tu_encode_jpeg(rgb, 64, 80, 90, &jlen);
    stk_plan *p = compile_ok("imagenet-train-few", 0, 0, 0);
    stk_scratch sc = {NULL, 0};
    int rc;
    /* truncated */
    stk_plan_input in = {.image = NULL, .encoded = jpg, .encoded_size = jlen / 2};
    assert_null(run_checked(p, &in, 1, 0, &sc, &rc));
    assert_int_equal(rc, STK_EDATA);
    /* empty, garbage */
    uint8_t junk[300];
    tu_fill_random(junk, sizeof junk, 3);
    stk_plan_input e0 = {.image = NULL, .encoded = junk, .encoded_size = 0}, e1 = {.image = NULL, .encoded = junk, .encoded_size = sizeof junk};
    assert_null(run_checked(p, &e0, 1, 0, &sc, &rc));
    assert_int_equal(rc, STK_EDATA);
    assert_null(run_checked(p, &e1, 1, 0, &sc, &rc));
    assert_int_equal(rc, STK_EDATA);
    /* a header claiming 65000 x 65000: over the pixel limit, one bad sample */
    uint8_t *big = malloc(jlen);
    memcpy(big, jpg, jlen);
    for (size_t i = 0; i + 8 < jlen; i++) {
        if (big[i] == 0xFF && (big[i + 1] == 0xC0 || big[i + 1] == 0xC1)) {
            big[i + 5] = 0xFD;
            big[i + 6] = 0xE8;
            big[i + 7] = 0xFD;
            big[i + 8] = 0xE8;
            break;
        }
    }
    stk_plan_input eb = {.image = NULL, .encoded = big, .encoded_size = jlen};
    assert_null(run_checked(p, &eb, 1, 0, &sc, &rc));
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "max_pixels"));
    /* an encoded image for a fixed-shape plan is the caller's mistake */
    stk_plan *pf = compile_ok("flip", 8, 8, 3);
    stk_plan_input ok = {.image = NULL, .encoded = jpg, .encoded_size = jlen};
    uint8_t out[8 * 8 * 3];
    stk_rng r;
    stk_rng_init(&r, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    assert_int_equal(stk_plan_run_input(pf, &ok, &r, out, &sc), STK_EINVAL);
    /* a random crop bigger than a variable-size image is one bad sample
     * (torchvision's RandomCrop raises; center_crop pads: below) */
    stk_plan *pc = compile_ok("random_crop 100 | to u8", 0, 0, 0);
    assert_null(run_checked(pc, &ok, 1, 0, &sc, &rc));
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "random_crop 100x100 (HxW) does not fit the 64x80 "
                                         "image; resize first or crop less"));
    stk_plan_free(pc);
    stk_plan_free(pf);
    stk_plan_free(p);
    stk_scratch_free(&sc);
    free(big);
    free(jpg);
    free(rgb);
}

/* center_crop larger than a variable-size image pads it with zeros, as
 * torchvision's F.center_crop: (c - n) // 2 before, the rest after, on
 * each axis that is too short, the other axis cropped at its centre. The
 * reference is the full decode (a crop of the image's own size) padded
 * here by hand; encoded (JPEG) and raw input (4 channels: alpha dropped),
 * flipped and not, a resize after it, and crops that keep only border. */
static void test_center_crop_pads(void **state)
{
    (void)state;
    const int H = 64, W = 80;
    uint8_t *rgb = tu_smooth_image(H, W, 11);
    size_t jlen;
    uint8_t *jpg = tu_encode_jpeg(rgb, H, W, 90, &jlen);
    stk_scratch sc = {NULL, 0};
    int rc;
    stk_plan_input enc = {.image = NULL, .encoded = jpg, .encoded_size = jlen};
    stk_plan *pfull = compile_ok("center_crop 64,80 | to u8", 0, 0, 0);
    uint8_t *full = run_checked(pfull, &enc, 1, 0, &sc, &rc);
    assert_non_null(full);
    /* raw RGBA of the same pixels */
    uint8_t *rgba = malloc((size_t)H * W * 4);
    assert_non_null(rgba);
    for (int i = 0; i < H * W; i++) {
        memcpy(rgba + 4 * i, full + 3 * i, 3);
        rgba[4 * i + 3] = 200;
    }
    stk_image_view rv = {rgba, (uint32_t)H, (uint32_t)W, 4, (ptrdiff_t)W * 4, 4, 1};
    stk_plan_input raw = {.image = &rv};
    /* crop (h, w), flipped or not; h 65 pads 0 before and 1 after, w 99
     * pads 9 and 10; 31 x 200 crops rows at the centre (offset 16) */
    static const struct { int h, w, flip; } cases[] = {
        {100, 100, 0}, {65, 99, 0}, {31, 200, 0}, {65, 99, 1}, {200, 21, 1}, {64, 81, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int ch = cases[k].h, cw = cases[k].w;
        char spec[96];
        snprintf(spec, sizeof spec, "%scenter_crop %d,%d | to u8", cases[k].flip ? "flip 1 | " : "",
                 ch, cw);
        stk_plan *p = compile_ok(spec, 0, 0, 0);
        /* torchvision: int(round((n - c) / 2.0)), halves to even */
        int top = ch > H ? -((ch - H) / 2) : (int)nearbyint((H - ch) / 2.0);
        int left = cw > W ? -((cw - W) / 2) : (int)nearbyint((W - cw) / 2.0);
        uint8_t *want = calloc((size_t)ch * cw, 3);
        assert_non_null(want);
        for (int y = 0; y < ch; y++)
            for (int x = 0; x < cw; x++) {
                int sy = top + y, sx = left + x;
                if (sy < 0 || sy >= H || sx < 0 || sx >= W)
                    continue;
                if (cases[k].flip)
                    sx = W - 1 - sx;
                memcpy(want + 3 * ((size_t)y * cw + x), full + 3 * ((size_t)sy * W + sx), 3);
            }
        for (int src = 0; src < 2; src++) {
            uint8_t *got = run_checked(p, src ? &raw : &enc, 1, 0, &sc, &rc);
            assert_non_null(got);
            if (memcmp(got, want, (size_t)ch * cw * 3) != 0) {
                print_error("%s (%s input) differs from the padded image\n", spec,
                            src ? "raw" : "encoded");
                fail();
            }
            free(got);
        }
        free(want);
        stk_plan_free(p);
    }
    /* a resize after the pad averages over the zeros: a 2x downscale of a
     * 100 x 100 pad of a constant image keeps the border's edge mixed */
    uint8_t flat[10 * 12 * 3];
    memset(flat, 255, sizeof flat);
    stk_image_view fv = {flat, 10, 12, 3, 12 * 3, 3, 1};
    stk_plan_input fin = {.image = &fv};
    stk_plan *pr = compile_ok("center_crop 20 | resize 10 | to u8", 0, 0, 0);
    uint8_t *r10 = run_checked(pr, &fin, 1, 0, &sc, &rc);
    assert_non_null(r10);
    /* rows 5..14 and columns 4..15 of the 20 x 20 pad are 255: output rows
     * 0-1 and 7-9 are zero or mixed, the centre pixel (5, 5) is 255 */
    assert_int_equal(r10[3 * (0 * 10 + 5)], 0);
    assert_int_equal(r10[3 * (5 * 10 + 5)], 255);
    assert_true(r10[3 * (5 * 10 + 2)] > 0 && r10[3 * (5 * 10 + 2)] < 255);
    free(r10);
    stk_plan_free(pr);
    /* a random crop of the padded image that may keep only border: every
     * pixel is 0 or the image's 255, and over the seeds both happen */
    stk_plan *pb = compile_ok("center_crop 40 | random_crop 8 | to u8", 0, 0, 0);
    int zero_only = 0, some = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        uint8_t *o = run_checked(pb, &fin, seed, 0, &sc, &rc);
        assert_non_null(o);
        int n255 = 0;
        for (int i = 0; i < 8 * 8 * 3; i++) {
            assert_true(o[i] == 0 || o[i] == 255);
            n255 += o[i] == 255;
        }
        zero_only += n255 == 0;
        some += n255 > 0;
        free(o);
    }
    assert_true(zero_only > 0 && some > 0);
    stk_plan_free(pb);
    free(full);
    free(rgba);
    free(jpg);
    free(rgb);
    stk_plan_free(pfull);
    stk_scratch_free(&sc);
}

/* After warm-up a worker's scratch neither grows nor moves: no allocation
 * per sample. */
static void test_scratch_steady(void **state)
{
    (void)state;
    enum { NIMG = 6 };
    uint8_t *jpg[NIMG];
    size_t len[NIMG];
    for (int i = 0; i < NIMG; i++) {
        int h = 200 + 37 * i, w = 260 - 13 * i;
        uint8_t *rgb = tu_smooth_image(h, w, i);
        jpg[i] = tu_encode_jpeg(rgb, h, w, 90, &len[i]);
        free(rgb);
    }
    /* not static: plan_specs[4] is no constant expression in C11 (clang refuses it) */
    const char *const specs[] = {"imagenet-train-few", "imagenet-train-extensive",
                                 "imagenet-val", plan_specs[4]};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        stk_plan *p = compile_ok(specs[s], 0, 0, 0);
        void *out = malloc(plan_bytes(p));
        stk_scratch sc = {NULL, 0};
        uint8_t *data = NULL;
        size_t cap = 0;
        for (int pass = 0; pass < 4; pass++) {
            for (uint64_t k = 0; k < 200; k++) {
                stk_plan_input in = {.image = NULL, .encoded = jpg[k % NIMG], .encoded_size = len[k % NIMG]};
                stk_rng r;
                stk_rng_init(&r, 1, STK_RNG_DOMAIN_SAMPLE, 0, k);
                assert_int_equal(stk_plan_run_input(p, &in, &r, out, &sc), 0);
            }
            if (pass == 2) {
                data = sc.data;
                cap = sc.cap;
            }
        }
        assert_ptr_equal(sc.data, data);
        assert_int_equal(sc.cap, cap);
        stk_scratch_free(&sc);
        free(out);
        stk_plan_free(p);
    }
    for (int i = 0; i < NIMG; i++)
        free(jpg[i]);
}

/* stk_plan_run (no scratch) works on image plans too. */
static void test_plan_run_fixed(void **state)
{
    (void)state;
    uint8_t *px = tu_smooth_image(48, 64, 7);
    stk_image_view v = {px, 48, 64, 3, 192, 3, 1};
    stk_plan *p = compile_ok("random_resized_crop 32 | color_jitter 0.4 0.4 0.4 | to u8", 48, 64, 3);
    uint8_t a[32 * 32 * 3], b[32 * 32 * 3];
    stk_rng r;
    stk_rng_init(&r, 2, STK_RNG_DOMAIN_SAMPLE, 0, 1);
    assert_int_equal(stk_plan_run(p, &v, &r, a), 0);
    stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
    stk_scratch sc = {NULL, 0};
    stk_rng_init(&r, 2, STK_RNG_DOMAIN_SAMPLE, 0, 1);
    assert_int_equal(stk_plan_run_input(p, &in, &r, b, &sc), 0);
    assert_memory_equal(a, b, sizeof a);
    /* wrong shape for a fixed plan */
    stk_image_view bad = v;
    bad.width = 63;
    stk_plan_input bin = {.image = &bad, .encoded = NULL, .encoded_size = 0};
    stk_rng_init(&r, 2, STK_RNG_DOMAIN_SAMPLE, 0, 1);
    assert_int_equal(stk_plan_run_input(p, &bin, &r, b, &sc), STK_EINVAL);
    stk_scratch_free(&sc);
    stk_plan_free(p);
    free(px);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_spec_shapes),
        cmocka_unit_test(test_rrc_documented_draws),
        cmocka_unit_test(test_rrc_distribution),
        cmocka_unit_test(test_new_op_documented_draws),
        cmocka_unit_test(test_resize_constant),
        cmocka_unit_test(test_resize_half_by_hand),
        cmocka_unit_test(test_resize_variants_identical),
        cmocka_unit_test(test_plans_raw_inputs),
        cmocka_unit_test(test_determinism_and_streams),
        cmocka_unit_test(test_dtypes_agree),
        cmocka_unit_test(test_flip_after_rotate),
        cmocka_unit_test(test_jitter_draws),
        cmocka_unit_test(test_color_kernels),
        cmocka_unit_test(test_encoded_matches_raw),
        cmocka_unit_test(test_dct_scaled_decode),
        cmocka_unit_test(test_corrupt_encoded),
        cmocka_unit_test(test_center_crop_pads),
        cmocka_unit_test(test_scratch_steady),
        cmocka_unit_test(test_plan_run_fixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
