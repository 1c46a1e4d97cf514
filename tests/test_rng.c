/*
 * test_rng.c — Philox4x32-10 against Random123's published known-answer
 * vectors (tests/kat_vectors in the Random123 distribution), and the
 * statistical sanity of the helpers built on it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/rng.h"

#include <math.h>
#include <string.h>

static void test_philox_kat(void **state)
{
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        stk_philox4x32_10(kat[i].ctr, kat[i].key, out);
        assert_memory_equal(out, kat[i].out, sizeof out);
    }
}

static void test_streams_are_pure(void **state)
{
    (void)state;
    stk_rng a, b, c;
    stk_rng_init(&a, 42, STK_RNG_DOMAIN_SAMPLE, 3, 1000);
    stk_rng_init(&b, 42, STK_RNG_DOMAIN_SAMPLE, 3, 1000);
    stk_rng_init(&c, 42, STK_RNG_DOMAIN_SAMPLE, 3, 1001);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = stk_rng_u32(&a), y = stk_rng_u32(&b), z = stk_rng_u32(&c);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 90);
    /* Other epoch, seed or domain: other stream. */
    stk_rng d, e, f;
    stk_rng_init(&d, 42, STK_RNG_DOMAIN_SAMPLE, 4, 1000);
    stk_rng_init(&e, 43, STK_RNG_DOMAIN_SAMPLE, 3, 1000);
    stk_rng_init(&f, 42, STK_RNG_DOMAIN_SAMPLER, 3, 1000);
    stk_rng_init(&a, 42, STK_RNG_DOMAIN_SAMPLE, 3, 1000);
    uint32_t x = stk_rng_u32(&a);
    assert_int_not_equal(x, stk_rng_u32(&d));
    assert_int_not_equal(x, stk_rng_u32(&e));
    assert_int_not_equal(x, stk_rng_u32(&f));
}

static void test_below_uniform(void **state)
{
    (void)state;
    /* Chi-square over 7 buckets, 70000 draws: df = 6; P(chi2 > 35) < 5e-6. */
    enum { K = 7, N = 70000 };
    unsigned counts[K] = {0};
    stk_rng r;
    stk_rng_init(&r, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    for (int i = 0; i < N; i++) {
        uint32_t v = stk_rng_below(&r, K);
        assert_true(v < K);
        counts[v]++;
    }
    double chi2 = 0, expect = (double)N / K;
    for (int k = 0; k < K; k++)
        chi2 += (counts[k] - expect) * (counts[k] - expect) / expect;
    assert_true(chi2 < 35.0);
}

static void test_range_and_uniform(void **state)
{
    (void)state;
    stk_rng r;
    stk_rng_init(&r, 7, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    int seen_lo = 0, seen_hi = 0;
    double sum = 0;
    for (int i = 0; i < 20000; i++) {
        int64_t v = stk_rng_range(&r, -3, 3);
        assert_true(v >= -3 && v <= 3);
        seen_lo |= v == -3;
        seen_hi |= v == 3;
        double u = stk_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
    }
    assert_true(seen_lo && seen_hi);
    /* mean of 20000 U(0,1): sd = 0.00204; 6 sd bound */
    assert_true(fabs(sum / 20000 - 0.5) < 0.0123);
    assert_int_equal(stk_rng_range(&r, 5, 5), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),
        cmocka_unit_test(test_streams_are_pure),
        cmocka_unit_test(test_below_uniform),
        cmocka_unit_test(test_range_and_uniform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
