/*
 * test_sampler.c — the epoch order: a bijection for every N, different per
 * seed and epoch, sharded so each sample is seen exactly once per epoch
 * across ranks (or the padded ones exactly twice), drop_last semantics.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pipeline/sampler.h"

#include <stdlib.h>
#include <string.h>

static stk_sampler *make(uint64_t n, uint64_t seed, uint32_t rank, uint32_t world, uint32_t batch,
                         int drop_last, int no_shuffle)
{
    stk_sampler_options o = {.dataset_size = n, .seed = seed, .rank = rank, .world_size = world,
                             .batch_size = batch, .drop_last = drop_last, .no_shuffle = no_shuffle};
    stk_sampler *s = NULL;
    assert_int_equal(stk_sampler_create(&o, &s), 0);
    return s;
}

static void test_bijection_all_small_n(void **state)
{
    (void)state;
    uint8_t *seen = malloc(2000);
    for (uint64_t n = 1; n <= 2000; n++) {
        stk_sampler *s = make(n, n * 31 + 7, 0, 1, 1, 0, 0);
        assert_int_equal(stk_sampler_length(s), n);
        memset(seen, 0, n);
        for (uint64_t p = 0; p < n; p++) {
            uint64_t i = stk_sampler_index(s, 0, p);
            assert_true(i < n);
            assert_int_equal(seen[i], 0);
            seen[i] = 1;
        }
        stk_sampler_destroy(s);
    }
    free(seen);
}

static void test_bijection_large_n(void **state)
{
    (void)state;
    /* Odd sizes around powers of two, including one just above 2^20. */
    const uint64_t sizes[] = {65537, 1000003, (1u << 20) + 1};
    for (size_t k = 0; k < 3; k++) {
        uint64_t n = sizes[k];
        uint8_t *seen = calloc(n, 1);
        stk_sampler *s = make(n, 99, 0, 1, 1, 0, 0);
        stk_epoch_key key;
        stk_sampler_epoch_key(s, 5, &key);
        for (uint64_t p = 0; p < n; p++) {
            uint64_t i = stk_sampler_index_keyed(s, &key, p);
            assert_true(i < n);
            assert_int_equal(seen[i], 0);
            seen[i] = 1;
        }
        stk_sampler_destroy(s);
        free(seen);
    }
}

static void test_huge_n_is_cheap_and_in_range(void **state)
{
    (void)state;
    /* 10^12 samples: no table; positions map into range and differ. */
    uint64_t n = 1000000000000ull;
    stk_sampler *s = make(n, 1, 0, 1, 1, 0, 0);
    uint64_t prev = n;
    for (uint64_t p = 0; p < 10000; p++) {
        uint64_t i = stk_sampler_index(s, 0, p * 99991);
        assert_true(i < n);
        assert_true(i != prev);
        prev = i;
    }
    stk_sampler_destroy(s);
}

static void test_shuffle_depends_on_seed_and_epoch(void **state)
{
    (void)state;
    uint64_t n = 1000;
    stk_sampler *a = make(n, 1, 0, 1, 1, 0, 0), *b = make(n, 2, 0, 1, 1, 0, 0);
    int same_seed = 0, same_epoch = 0, fixed = 0;
    for (uint64_t p = 0; p < n; p++) {
        same_seed += stk_sampler_index(a, 0, p) == stk_sampler_index(b, 0, p);
        same_epoch += stk_sampler_index(a, 0, p) == stk_sampler_index(a, 1, p);
        fixed += stk_sampler_index(a, 0, p) == p;
        assert_int_equal(stk_sampler_index(a, 3, p), stk_sampler_index(a, 3, p));
    }
    /* A random permutation agrees with another at ~1 place on average. */
    assert_true(same_seed < 20);
    assert_true(same_epoch < 20);
    assert_true(fixed < 20);
    stk_sampler_destroy(a);
    stk_sampler_destroy(b);
    stk_sampler *c = make(n, 1, 0, 1, 1, 0, 1);
    for (uint64_t p = 0; p < n; p++)
        assert_int_equal(stk_sampler_index(c, 7, p), p);
    stk_sampler_destroy(c);
}

static void test_exactly_once_across_ranks(void **state)
{
    (void)state;
    /* Sizes that do not divide evenly by most world sizes. */
    const uint64_t sizes[] = {1, 7, 97, 100, 1001, 4099};
    for (size_t k = 0; k < 6; k++) {
        uint64_t n = sizes[k];
        for (uint32_t w = 1; w <= 8; w++) {
            unsigned *count = calloc(n, sizeof *count);
            uint64_t per = (n + w - 1) / w;
            for (uint32_t r = 0; r < w; r++) {
                stk_sampler *s = make(n, 5, r, w, 3, 0, 0);
                assert_int_equal(stk_sampler_length(s), per); /* same for every rank */
                for (uint64_t p = 0; p < per; p++)
                    count[stk_sampler_index(s, 2, p)]++;
                stk_sampler_destroy(s);
            }
            uint64_t padded = per * w - n, twice = 0;
            for (uint64_t i = 0; i < n; i++) {
                if (padded <= n) {
                    assert_true(count[i] == 1 || count[i] == 2);
                } else {
                    assert_true(count[i] >= 1);
                }
                twice += count[i] - 1;
            }
            assert_int_equal(twice, padded);
            free(count);
        }
    }
}

static void test_drop_last_never_twice(void **state)
{
    (void)state;
    const uint64_t n = 1001;
    for (uint32_t w = 1; w <= 8; w++) {
        for (uint32_t b = 1; b <= 9; b += 4) {
            unsigned *count = calloc(n, sizeof *count);
            uint64_t per = n / w / b * b, total = 0;
            for (uint32_t r = 0; r < w; r++) {
                stk_sampler *s = make(n, 11, r, w, b, 1, 0);
                assert_int_equal(stk_sampler_length(s), per);
                assert_int_equal(stk_sampler_length(s) % b, 0);
                for (uint64_t p = 0; p < per; p++)
                    count[stk_sampler_index(s, 0, p)]++;
                stk_sampler_destroy(s);
            }
            for (uint64_t i = 0; i < n; i++) {
                assert_true(count[i] <= 1);
                total += count[i];
            }
            assert_int_equal(total, per * w);
            free(count);
        }
    }
}

static void test_invalid_options(void **state)
{
    (void)state;
    stk_sampler *s = NULL;
    stk_sampler_options o = {.dataset_size = 0};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    o = (stk_sampler_options){.dataset_size = 10, .rank = 2, .world_size = 2};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "rank 2"));
    o = (stk_sampler_options){.dataset_size = 10, .world_size = 4, .batch_size = 3, .drop_last = 1};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bijection_all_small_n),
        cmocka_unit_test(test_bijection_large_n),
        cmocka_unit_test(test_huge_n_is_cheap_and_in_range),
        cmocka_unit_test(test_shuffle_depends_on_seed_and_epoch),
        cmocka_unit_test(test_exactly_once_across_ranks),
        cmocka_unit_test(test_drop_last_never_twice),
        cmocka_unit_test(test_invalid_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
