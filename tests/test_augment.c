/*
 * test_augment.c — the augmentation primitives and policy draws
 * (ops/augment.[ch]) on hand-computed values, and the draw order
 * docs/pipeline.md documents, re-derived here from a fresh stream.
 * (The comparison with torchvision itself, primitive by primitive and
 * policy by policy, is tests/python/test_augment_torchvision.py.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/rng.h"
#include "ops/augment.h"
#include "ops/plan.h"

#include <string.h>

static const uint8_t zero3[3] = {0, 0, 0};

static void test_point_primitives(void **state)
{
    (void)state;
    uint8_t img[256], tmp[256];
    for (int v = 0; v < 256; v++)
        img[v] = (uint8_t)v;
    uint8_t *r = stk_aug_apply(STK_AUG_INVERT, 0.0, zero3, img, tmp, 16, 16, 1);
    for (int v = 0; v < 256; v++)
        assert_int_equal(r[v], 255 - v);
    for (int v = 0; v < 256; v++)
        img[v] = (uint8_t)v;
    r = stk_aug_apply(STK_AUG_POSTERIZE, 3.0, zero3, img, tmp, 16, 16, 1);
    for (int v = 0; v < 256; v++)
        assert_int_equal(r[v], v & 0xe0);
    for (int v = 0; v < 256; v++)
        img[v] = (uint8_t)v;
    r = stk_aug_apply(STK_AUG_SOLARIZE, 128.5, zero3, img, tmp, 16, 16, 1);
    for (int v = 0; v < 256; v++)
        assert_int_equal(r[v], v >= 129 ? 255 - v : v);
    for (int v = 0; v < 256; v++)
        img[v] = (uint8_t)v;
    /* Brightness -0.5: factor 0.5, trunc(0.5 v) */
    r = stk_aug_apply(STK_AUG_BRIGHTNESS, -0.5, zero3, img, tmp, 16, 16, 1);
    for (int v = 0; v < 256; v++)
        assert_int_equal(r[v], v / 2);
}

static void test_equalize_by_hand(void **state)
{
    (void)state;
    /* 1024 pixels: 512 at 0, 256 at 100, 256 at 200. The bins but the last
     * nonzero one hold 768, step = 768 / 255 = 3; lut[v] = (cum[v-1] + 1) / 3:
     * 100 -> 513 / 3 = 171, 200 -> 769 / 3 = 256 -> 255. */
    uint8_t img[1024], tmp[1024];
    for (int i = 0; i < 1024; i++)
        img[i] = i < 512 ? 0 : i < 768 ? 100 : 200;
    uint8_t *r = stk_aug_apply(STK_AUG_EQUALIZE, 0.0, zero3, img, tmp, 32, 32, 1);
    assert_int_equal(r[0], 0);
    assert_int_equal(r[600], 171);
    assert_int_equal(r[900], 255);
    /* Fewer than 255 pixels below the top bin: step 0, unchanged. */
    for (int i = 0; i < 16; i++)
        img[i] = (uint8_t)(i * 10);
    r = stk_aug_apply(STK_AUG_EQUALIZE, 0.0, zero3, img, tmp, 4, 4, 1);
    for (int i = 0; i < 16; i++)
        assert_int_equal(r[i], i * 10);
}

static void test_translate_and_sharpness_by_hand(void **state)
{
    (void)state;
    /* TranslateX +2 on one row 1..5: content moves right, fill comes in. */
    uint8_t row[5] = {1, 2, 3, 4, 5}, tmp[5];
    const uint8_t fill[3] = {9, 9, 9};
    uint8_t *r = stk_aug_apply(STK_AUG_TRANSLATE_X, 2.7, fill, row, tmp, 5, 1, 1);
    const uint8_t want[5] = {9, 9, 1, 2, 3}; /* int(2.7) = 2 */
    assert_memory_equal(r, want, 5);
    /* Sharpness -1 (factor 0): the 3x3 blur [1 1 1; 1 5 1; 1 1 1] / 13,
     * rounded, inside; the border kept. */
    uint8_t img[9] = {10, 20, 30, 40, 50, 60, 70, 80, 90}, t9[9];
    r = stk_aug_apply(STK_AUG_SHARPNESS, -1.0, zero3, img, t9, 3, 3, 1);
    /* (10+20+30+40+60+70+80+90 + 5*50) / 13 = 650 / 13 = 50 */
    const uint8_t w9[9] = {10, 20, 30, 40, 50, 60, 70, 80, 90};
    assert_memory_equal(r, w9, 9);
    uint8_t img2[9] = {0, 0, 0, 0, 255, 0, 0, 0, 0};
    r = stk_aug_apply(STK_AUG_SHARPNESS, -1.0, zero3, img2, t9, 3, 3, 1);
    assert_int_equal(r[4], 98); /* round(1275 / 13 = 98.08) */
    assert_int_equal(r[0], 0);
}

static void test_draw_order(void **state)
{
    (void)state;
    stk_aug_policy triv = {STK_AUG_POLICY_TRIVIAL, 0, 0, 31, {0, 0, 0}, 0};
    stk_aug_policy rnd = {STK_AUG_POLICY_RAND, 3, 9, 31, {0, 0, 0}, 0};
    stk_aug_policy aut = {STK_AUG_POLICY_AUTO, 0, 0, 0, {0, 0, 0}, 0};
    for (uint64_t index = 0; index < 500; index++) {
        stk_rng a, b;
        stk_aug_step st[STK_AUG_MAX_OPS];
        /* trivial_augment_wide: below(14), below(bins), below(2) */
        stk_rng_init(&a, 7, 0, 1, index);
        stk_rng_init(&b, 7, 0, 1, index);
        assert_int_equal(stk_aug_draw(&triv, &a, 224, 224, st), 1);
        int prim = (int)stk_rng_below(&b, 14), bin = (int)stk_rng_below(&b, 31);
        int sign = (int)stk_rng_below(&b, 2);
        assert_int_equal(st[0].prim, prim);
        assert_int_equal(st[0].bin, prim >= STK_AUG_SHEAR_X && prim <= STK_AUG_SOLARIZE ? bin : -1);
        assert_int_equal(st[0].neg, prim >= STK_AUG_SHEAR_X && prim <= STK_AUG_SHARPNESS && sign);
        assert_int_equal(stk_rng_u32(&a), stk_rng_u32(&b)); /* the same stream position */
        /* rand_augment: num_ops times below(14), below(2) */
        stk_rng_init(&a, 7, 0, 1, index);
        stk_rng_init(&b, 7, 0, 1, index);
        assert_int_equal(stk_aug_draw(&rnd, &a, 224, 224, st), 3);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(st[k].prim, (int)stk_rng_below(&b, 14));
            sign = (int)stk_rng_below(&b, 2);
            assert_int_equal(st[k].neg, st[k].prim >= STK_AUG_SHEAR_X &&
                                            st[k].prim <= STK_AUG_SHARPNESS && sign);
        }
        assert_int_equal(stk_rng_u32(&a), stk_rng_u32(&b));
        /* auto_augment: below(25), two uniforms, two below(2) — always */
        stk_rng_init(&a, 7, 0, 1, index);
        stk_rng_init(&b, 7, 0, 1, index);
        int n = stk_aug_draw(&aut, &a, 224, 224, st);
        assert_true(n >= 0 && n <= 2);
        (void)stk_rng_below(&b, 25);
        (void)stk_rng_uniform(&b);
        (void)stk_rng_uniform(&b);
        (void)stk_rng_below(&b, 2);
        (void)stk_rng_below(&b, 2);
        assert_int_equal(stk_rng_u32(&a), stk_rng_u32(&b));
    }
}

/* torchvision 0.14's AutoAugment ImageNet policy (autoaugment.py,
 * _get_policies), transcribed: (op, probability, magnitude bin or -1). */
typedef struct aa_ref {
    const char *op;
    double p;
    int bin;
} aa_ref;
static const aa_ref k_imagenet[25][2] = {
    {{"Posterize", 0.4, 8}, {"Rotate", 0.6, 9}},     {{"Solarize", 0.6, 5}, {"AutoContrast", 0.6, -1}},
    {{"Equalize", 0.8, -1}, {"Equalize", 0.6, -1}},  {{"Posterize", 0.6, 7}, {"Posterize", 0.6, 6}},
    {{"Equalize", 0.4, -1}, {"Solarize", 0.2, 4}},   {{"Equalize", 0.4, -1}, {"Rotate", 0.8, 8}},
    {{"Solarize", 0.6, 3}, {"Equalize", 0.6, -1}},   {{"Posterize", 0.8, 5}, {"Equalize", 1.0, -1}},
    {{"Rotate", 0.2, 3}, {"Solarize", 0.6, 8}},      {{"Equalize", 0.6, -1}, {"Posterize", 0.4, 6}},
    {{"Rotate", 0.8, 8}, {"Color", 0.4, 0}},         {{"Rotate", 0.4, 9}, {"Equalize", 0.6, -1}},
    {{"Equalize", 0.0, -1}, {"Equalize", 0.8, -1}},  {{"Invert", 0.6, -1}, {"Equalize", 1.0, -1}},
    {{"Color", 0.6, 4}, {"Contrast", 1.0, 8}},       {{"Rotate", 0.8, 8}, {"Color", 1.0, 2}},
    {{"Color", 0.8, 8}, {"Solarize", 0.8, 7}},       {{"Sharpness", 0.4, 7}, {"Invert", 0.6, -1}},
    {{"ShearX", 0.6, 5}, {"Equalize", 1.0, -1}},     {{"Color", 0.4, 0}, {"Equalize", 0.6, -1}},
    {{"Equalize", 0.4, -1}, {"Solarize", 0.2, 4}},   {{"Solarize", 0.6, 5}, {"AutoContrast", 0.6, -1}},
    {{"Invert", 0.6, -1}, {"Equalize", 1.0, -1}},    {{"Color", 0.6, 4}, {"Contrast", 1.0, 8}},
    {{"Equalize", 0.8, -1}, {"Equalize", 0.6, -1}},
};

/* auto_augment against the policy table above and torchvision's rules:
 * sub-policy = below(25); step i applies when u_i <= its probability
 * (torch.rand(2) <= p); a signed op is negated when its sign draw is 0. */
static void test_auto_augment_rules(void **state)
{
    (void)state;
    stk_aug_policy aut = {STK_AUG_POLICY_AUTO, 0, 0, 0, {0, 0, 0}, 0};
    int applied = 0, negated = 0, skipped = 0;
    for (uint64_t index = 0; index < 2000; index++) {
        stk_rng a, b;
        stk_aug_step st[STK_AUG_MAX_OPS];
        stk_rng_init(&a, 11, 0, 2, index);
        stk_rng_init(&b, 11, 0, 2, index);
        int n = stk_aug_draw(&aut, &a, 224, 224, st);
        int id = (int)stk_rng_below(&b, 25);
        double u[2] = {stk_rng_uniform(&b), stk_rng_uniform(&b)};
        int sign[2] = {(int)stk_rng_below(&b, 2), (int)stk_rng_below(&b, 2)};
        int k = 0;
        for (int i = 0; i < 2; i++) {
            const aa_ref *r = &k_imagenet[id][i];
            if (!(u[i] <= r->p)) {
                skipped++;
                continue;
            }
            assert_true(k < n);
            assert_string_equal(stk_aug_name(st[k].prim), r->op);
            assert_int_equal(st[k].bin, r->bin);
            int is_signed = st[k].prim >= STK_AUG_SHEAR_X && st[k].prim <= STK_AUG_SHARPNESS;
            assert_int_equal(st[k].neg, is_signed && sign[i] == 0);
            negated += st[k].neg;
            k++;
            applied++;
        }
        assert_int_equal(n, k);
    }
    assert_true(applied > 1000 && skipped > 300 && negated > 100); /* every branch met */
}

static void test_magnitudes(void **state)
{
    (void)state;
    /* rand_augment 31 bins, magnitude 9 on 224 x 224: Rotate 9 degrees,
     * Solarize 255 - 8.5 * 9 = 178.5, Posterize 8 - round(9 / 7.5) = 7. */
    stk_aug_policy rnd = {STK_AUG_POLICY_RAND, 16, 9, 31, {0, 0, 0}, 0};
    int seen_rot = 0, seen_sol = 0, seen_post = 0;
    for (uint64_t index = 0; index < 50; index++) {
        stk_rng a;
        stk_aug_step st[STK_AUG_MAX_OPS];
        stk_rng_init(&a, 3, 0, 0, index);
        int n = stk_aug_draw(&rnd, &a, 224, 224, st);
        for (int k = 0; k < n; k++) {
            if (st[k].prim == STK_AUG_ROTATE) {
                assert_true(st[k].mag == (st[k].neg ? -9.0 : 9.0));
                seen_rot++;
            } else if (st[k].prim == STK_AUG_SOLARIZE) {
                assert_true(st[k].mag == 178.5);
                seen_sol++;
            } else if (st[k].prim == STK_AUG_POSTERIZE) {
                assert_true(st[k].mag == 7.0);
                seen_post++;
            }
        }
    }
    assert_true(seen_rot && seen_sol && seen_post);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_point_primitives),
        cmocka_unit_test(test_equalize_by_hand),
        cmocka_unit_test(test_translate_and_sharpness_by_hand),
        cmocka_unit_test(test_draw_order),
        cmocka_unit_test(test_magnitudes),
        cmocka_unit_test(test_auto_augment_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
