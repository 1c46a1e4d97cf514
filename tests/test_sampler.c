/*
 * test_sampler.c — the epoch order: a bijection for every N, different per
 * seed and epoch, sharded so each sample is seen exactly once per epoch
 * across ranks (or the padded ones exactly twice), drop_last semantics; the
 * same for the block shuffle, which also reads each block within one window
 * of K blocks; and an epoch continued on another world size from a start
 * slot covers the rest of the epoch exactly once over the union of ranks.
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

/* ---- block shuffle ----------------------------------------------------- */

typedef struct order {
    stk_shuffle mode;
    uint64_t block, window; /* block mode */
} order;

static const order GLOBAL = {STK_SHUFFLE_GLOBAL, 0, 0};

static stk_sampler *make_o(uint64_t n, uint64_t seed, uint32_t rank, uint32_t world,
                           uint32_t batch, int drop_last, order ord, uint64_t start)
{
    stk_sampler_options o = {.dataset_size = n, .seed = seed, .rank = rank, .world_size = world,
                             .batch_size = batch, .drop_last = drop_last, .shuffle = ord.mode,
                             .block_size = ord.block, .shuffle_window = (uint32_t)ord.window,
                             .start_slot = start};
    stk_sampler *s = NULL;
    int rc = stk_sampler_create(&o, &s);
    if (rc < 0)
        print_error("sampler: %s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    return s;
}

static order block(uint64_t bs, uint64_t k) { return (order){STK_SHUFFLE_BLOCK, bs, k}; }

/* Positions 0..n-1 of world size 1 into pos_of[index]; checks the bijection. */
static void epoch_positions(stk_sampler *s, uint64_t n, uint64_t epoch, uint64_t *pos_of)
{
    for (uint64_t i = 0; i < n; i++)
        pos_of[i] = UINT64_MAX;
    for (uint64_t p = 0; p < n; p++) {
        uint64_t i = stk_sampler_index(s, epoch, p);
        assert_true(i < n);
        assert_true(pos_of[i] == UINT64_MAX);
        pos_of[i] = p;
    }
}

static void test_block_bijection(void **state)
{
    (void)state;
    /* N below a block, N not a multiple of the block, K above the number of
     * blocks, K = 1, block = 1. */
    const uint64_t bss[] = {1, 3, 7, 16, 64};
    const uint64_t ks[] = {1, 2, 5, 100};
    uint64_t *pos_of = malloc(1000 * sizeof *pos_of);
    for (uint64_t n = 1; n <= 300; n += (n < 40 ? 1 : 13))
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < 4; b++) {
                stk_sampler *s = make_o(n, n * 7 + a, 0, 1, 1, 0, block(bss[a], ks[b]), 0);
                assert_int_equal(stk_sampler_length(s), n);
                for (uint64_t e = 0; e < 3; e++)
                    epoch_positions(s, n, e, pos_of);
                stk_sampler_destroy(s);
            }
    free(pos_of);
    /* Large: default block and window, and an odd block. */
    const uint64_t big[][3] = {{1000003, 0, 0}, {(1u << 20) + 1, 1000, 3}, {65537, 4096, 40}};
    for (size_t k = 0; k < 3; k++) {
        uint64_t n = big[k][0];
        uint64_t *po = malloc(n * sizeof *po);
        stk_sampler *s = make_o(n, 99, 0, 1, 1, 0, block(big[k][1], big[k][2]), 0);
        epoch_positions(s, n, 5, po);
        stk_sampler_destroy(s);
        free(po);
    }
}

/* World size 1: each block's samples lie in one window; sorting the blocks
 * by their first position, every K consecutive blocks fill exactly a
 * contiguous run of positions, the runs following each other. */
static void check_block_local(uint64_t n, uint64_t bs, uint64_t k, uint64_t seed, uint64_t epoch)
{
    stk_sampler *s = make_o(n, seed, 0, 1, 1, 0, block(bs, k), 0);
    uint64_t *pos_of = malloc(n * sizeof *pos_of);
    epoch_positions(s, n, epoch, pos_of);
    uint64_t nb = (n + bs - 1) / bs;
    uint64_t *lo = malloc(nb * sizeof *lo), *hi = malloc(nb * sizeof *hi), *by_lo = malloc(n * sizeof *by_lo);
    for (uint64_t b = 0; b < nb; b++) {
        lo[b] = UINT64_MAX;
        hi[b] = 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t b = i / bs;
        lo[b] = pos_of[i] < lo[b] ? pos_of[i] : lo[b];
        hi[b] = pos_of[i] > hi[b] ? pos_of[i] : hi[b];
    }
    /* Blocks ordered by first position (each position holds one sample, so
     * by_lo[position] = block whose first sample is there). */
    for (uint64_t p = 0; p < n; p++)
        by_lo[p] = UINT64_MAX;
    for (uint64_t b = 0; b < nb; b++)
        by_lo[lo[b]] = b;
    uint64_t next = 0, in_group = 0, group_lo = 0, group_hi = 0, group_size = 0, groups = 0;
    for (uint64_t p = 0; p < n; p++) {
        uint64_t b = by_lo[p];
        if (b == UINT64_MAX)
            continue;
        if (in_group == 0) {
            group_lo = lo[b];
            group_hi = 0;
            group_size = 0;
        }
        group_hi = hi[b] > group_hi ? hi[b] : group_hi;
        group_size += (b == nb - 1) ? n - b * bs : bs;
        if (++in_group == k) {
            assert_int_equal(group_lo, next);
            assert_int_equal(group_hi - group_lo + 1, group_size);
            next = group_hi + 1;
            in_group = 0;
            groups++;
        }
    }
    if (in_group) { /* the last window may have fewer blocks */
        assert_int_equal(group_lo, next);
        assert_int_equal(group_hi - group_lo + 1, group_size);
        next = group_hi + 1;
        groups++;
    }
    assert_int_equal(next, n);
    assert_int_equal(groups, (nb + k - 1) / k);
    /* Aligned runs of K*bs positions hold exactly K blocks when no short
     * block shifts them. */
    if (n % bs == 0) {
        for (uint64_t w0 = 0; w0 < n; w0 += k * bs) {
            uint64_t distinct = 0;
            uint64_t end = w0 + k * bs < n ? w0 + k * bs : n;
            for (uint64_t p = w0; p < end; p++) {
                uint64_t b = stk_sampler_index(s, epoch, p) / bs, seen = 0;
                for (uint64_t q = w0; q < p && !seen; q++)
                    seen = stk_sampler_index(s, epoch, q) / bs == b;
                distinct += !seen;
            }
            assert_int_equal(distinct, (end - w0) / bs);
        }
    }
    /* And it does mix inside a window: consecutive positions rarely share a
     * block (about 1/K of the time for a uniform mix). */
    if (k >= 4 && bs >= 4 && n >= 4 * k * bs) {
        uint64_t same = 0;
        for (uint64_t p = 1; p < n; p++)
            same += stk_sampler_index(s, epoch, p) / bs == stk_sampler_index(s, epoch, p - 1) / bs;
        assert_true(same * 2 < n);
    }
    free(lo);
    free(hi);
    free(by_lo);
    free(pos_of);
    stk_sampler_destroy(s);
}

static void test_block_is_block_local(void **state)
{
    (void)state;
    check_block_local(4096, 64, 4, 1, 0);   /* multiple of the block */
    check_block_local(4096, 16, 8, 2, 3);
    check_block_local(1000, 64, 4, 3, 1);   /* short last block */
    check_block_local(1001, 10, 7, 4, 2);
    check_block_local(997, 16, 3, 5, 0);
    check_block_local(50, 64, 4, 6, 0);     /* one short block */
    check_block_local(300, 7, 100, 7, 0);   /* K above the number of blocks */
    for (uint64_t e = 0; e < 20; e++)       /* the short block lands everywhere */
        check_block_local(203, 10, 3, 8, e);
}

static void test_block_pure_function(void **state)
{
    (void)state;
    const uint64_t n = 5000;
    order ord = block(32, 6);
    stk_sampler *a = make_o(n, 42, 0, 1, 1, 0, ord, 0), *b = make_o(n, 42, 0, 1, 1, 0, ord, 0);
    stk_sampler *c = make_o(n, 43, 0, 1, 1, 0, ord, 0);
    uint64_t same_seed = 0, same_epoch = 0, fixed = 0;
    for (uint64_t p = 0; p < n; p++) {
        /* Two independent objects, any order of calls: the same answer. */
        assert_int_equal(stk_sampler_index(a, 4, n - 1 - p), stk_sampler_index(b, 4, n - 1 - p));
        assert_int_equal(stk_sampler_index(b, 9, p), stk_sampler_index(a, 9, p));
        same_seed += stk_sampler_index(a, 0, p) == stk_sampler_index(c, 0, p);
        same_epoch += stk_sampler_index(a, 0, p) == stk_sampler_index(a, 1, p);
        fixed += stk_sampler_index(a, 0, p) == p;
    }
    assert_true(same_seed < 20);
    assert_true(same_epoch < 20);
    assert_true(fixed < 20);
    /* The keyed path agrees with the plain one. */
    stk_epoch_key key;
    stk_sampler_epoch_key(a, 4, &key);
    for (uint64_t p = 0; p < n; p += 7)
        assert_int_equal(stk_sampler_index_keyed(a, &key, p), stk_sampler_index(b, 4, p));
    stk_sampler_destroy(a);
    stk_sampler_destroy(b);
    stk_sampler_destroy(c);
}

/* Exactly once across W = 1..8 ranks, pad and drop, for an order. */
static void check_sharding(order ord)
{
    const uint64_t sizes[] = {1, 7, 97, 100, 1001, 4099};
    for (size_t k = 0; k < 6; k++) {
        uint64_t n = sizes[k];
        for (uint32_t w = 1; w <= 8; w++) {
            /* pad by wrap */
            unsigned *count = calloc(n, sizeof *count);
            uint64_t per = (n + w - 1) / w;
            for (uint32_t r = 0; r < w; r++) {
                stk_sampler *s = make_o(n, 5, r, w, 3, 0, ord, 0);
                assert_int_equal(stk_sampler_length(s), per);
                for (uint64_t p = 0; p < per; p++)
                    count[stk_sampler_index(s, 2, p)]++;
                stk_sampler_destroy(s);
            }
            uint64_t padded = per * w - n, twice = 0;
            for (uint64_t i = 0; i < n; i++) {
                assert_true(count[i] >= 1);
                if (padded <= n)
                    assert_true(count[i] <= 2);
                twice += count[i] - 1;
            }
            assert_int_equal(twice, padded);
            /* drop */
            const uint32_t b = 4;
            uint64_t dper = n / w / b * b, total = 0;
            if (dper == 0) {
                free(count);
                continue;
            }
            memset(count, 0, n * sizeof *count);
            for (uint32_t r = 0; r < w; r++) {
                stk_sampler *s = make_o(n, 5, r, w, b, 1, ord, 0);
                assert_int_equal(stk_sampler_length(s), dper);
                for (uint64_t p = 0; p < dper; p++)
                    count[stk_sampler_index(s, 2, p)]++;
                stk_sampler_destroy(s);
            }
            for (uint64_t i = 0; i < n; i++) {
                assert_true(count[i] <= 1);
                total += count[i];
            }
            assert_int_equal(total, dper * w);
            free(count);
        }
    }
}

static void test_block_exactly_once_across_ranks(void **state)
{
    (void)state;
    check_sharding(block(16, 4));
    check_sharding(block(3, 100));
    check_sharding(block(0, 0)); /* defaults */
}

/* ---- resume on another world size ---------------------------------------- */

/* W ranks consume p batches each of epoch e, then W2 ranks continue from
 * start slot S = p*b*W: over the union every sample of the epoch is seen
 * exactly once, apart from the pad rule applied to the rest. */
static void check_world_change(uint64_t n, uint32_t w, uint32_t w2, uint32_t b, int drop,
                               order ord, uint64_t p)
{
    unsigned *count = calloc(n, sizeof *count);
    uint64_t consumed = 0;
    for (uint32_t r = 0; r < w; r++) {
        stk_sampler *s = make_o(n, 17, r, w, b, drop, ord, 0);
        assert_true(p * b <= stk_sampler_length(s));
        for (uint64_t q = 0; q < p * b; q++) {
            count[stk_sampler_index(s, 6, q)]++;
            consumed++;
        }
        stk_sampler_destroy(s);
    }
    uint64_t start = p * b * w;
    assert_int_equal(consumed, start);
    uint64_t rest = n - start;
    uint64_t per = drop ? rest / w2 / b * b : (rest + w2 - 1) / w2;
    for (uint32_t r = 0; r < w2; r++) {
        stk_sampler *s = make_o(n, 17, r, w2, b, drop, ord, start);
        assert_int_equal(stk_sampler_length(s), per);
        assert_int_equal(stk_sampler_length_from(s, start), per);
        for (uint64_t q = 0; q < per; q++)
            count[stk_sampler_index(s, 6, q)]++;
        stk_sampler_destroy(s);
    }
    uint64_t total = 0, twice = 0;
    for (uint64_t i = 0; i < n; i++) {
        total += count[i];
        if (drop) {
            assert_true(count[i] <= 1);
        } else {
            assert_true(count[i] >= 1);
            twice += count[i] - 1;
        }
    }
    if (drop)
        assert_int_equal(total, start + per * w2);
    else
        assert_int_equal(twice, per * w2 - rest); /* the padded slots */
    free(count);
}

static void test_resume_on_another_world_size(void **state)
{
    (void)state;
    const uint32_t pairs[][2] = {{1, 2}, {4, 3}, {8, 1}, {3, 5}, {2, 7}, {5, 5}, {7, 2}};
    const order orders[] = {GLOBAL, {STK_SHUFFLE_BLOCK, 16, 4}, {STK_SHUFFLE_NONE, 0, 0}};
    const uint64_t sizes[] = {1001, 96, 4099};
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
            for (size_t o = 0; o < 3; o++)
                for (int drop = 0; drop <= 1; drop++) {
                    uint64_t n = sizes[k];
                    uint32_t w = pairs[i][0], w2 = pairs[i][1], b = 4;
                    uint64_t len = drop ? n / w / b * b : (n + w - 1) / w;
                    uint64_t batches = (len + b - 1) / b;
                    /* every batch position but the end (that is the next epoch) */
                    for (uint64_t p = 0; p < batches; p += (batches > 20 ? batches / 7 : 1))
                        check_world_change(n, w, w2, b, drop, orders[o], p);
                    check_world_change(n, w, w2, b, drop, orders[o], batches - 1);
                }
}

/* Two hops in one epoch: 4 ranks, then 3 from S1, then 5 from S2. */
static void test_resume_twice_in_one_epoch(void **state)
{
    (void)state;
    const uint64_t n = 1003;
    const uint32_t b = 5;
    for (int drop = 0; drop <= 1; drop++) {
        order ord = drop ? block(8, 3) : GLOBAL;
        unsigned count[1003] = {0};
        uint64_t s1 = 7 * b * 4; /* 4 ranks took 7 batches */
        for (uint32_t r = 0; r < 4; r++) {
            stk_sampler *s = make_o(n, 3, r, 4, b, drop, ord, 0);
            for (uint64_t q = 0; q < 7 * b; q++)
                count[stk_sampler_index(s, 1, q)]++;
            stk_sampler_destroy(s);
        }
        uint64_t s2 = s1 + 11 * b * 3; /* then 3 ranks took 11 */
        for (uint32_t r = 0; r < 3; r++) {
            stk_sampler *s = make_o(n, 3, r, 3, b, drop, ord, s1);
            for (uint64_t q = 0; q < 11 * b; q++)
                count[stk_sampler_index(s, 1, q)]++;
            stk_sampler_destroy(s);
        }
        uint64_t rest = n - s2, per = drop ? rest / 5 / b * b : (rest + 4) / 5, total = 0;
        for (uint32_t r = 0; r < 5; r++) {
            stk_sampler *s = make_o(n, 3, r, 5, b, drop, ord, s2);
            assert_int_equal(stk_sampler_length(s), per);
            for (uint64_t q = 0; q < per; q++)
                count[stk_sampler_index(s, 1, q)]++;
            stk_sampler_destroy(s);
        }
        for (uint64_t i = 0; i < n; i++) {
            assert_true(drop ? count[i] <= 1 : count[i] >= 1 && count[i] <= 2);
            total += count[i];
        }
        assert_int_equal(total, s2 + per * 5);
        if (!drop)
            assert_int_equal(total - n, per * 5 - rest);
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
    /* The rest of an epoch may be empty with drop_last, not a whole one. */
    o.start_slot = 3;
    assert_int_equal(stk_sampler_create(&o, &s), 0);
    assert_int_equal(stk_sampler_length(s), 0);
    stk_sampler_destroy(s);
    s = NULL;
    o = (stk_sampler_options){.dataset_size = 10, .start_slot = 10};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "start_slot 10 is not below the dataset size 10"));
    o = (stk_sampler_options){.dataset_size = 10, .no_shuffle = 1, .shuffle = STK_SHUFFLE_BLOCK};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no_shuffle contradicts shuffle=block"));
    o = (stk_sampler_options){.dataset_size = 10, .block_size = 4};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "shuffle=block only"));
    o = (stk_sampler_options){.dataset_size = 10, .shuffle = (stk_shuffle)7};
    assert_int_equal(stk_sampler_create(&o, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "unknown shuffle mode 7"));
    assert_null(s);
    /* STK_SHUFFLE_NONE is the identity, like no_shuffle. */
    o = (stk_sampler_options){.dataset_size = 10, .shuffle = STK_SHUFFLE_NONE};
    assert_int_equal(stk_sampler_create(&o, &s), 0);
    for (uint64_t p = 0; p < 10; p++)
        assert_int_equal(stk_sampler_index(s, 3, p), p);
    stk_sampler_destroy(s);
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
        cmocka_unit_test(test_block_bijection),
        cmocka_unit_test(test_block_is_block_local),
        cmocka_unit_test(test_block_pure_function),
        cmocka_unit_test(test_block_exactly_once_across_ranks),
        cmocka_unit_test(test_resume_on_another_world_size),
        cmocka_unit_test(test_resume_twice_in_one_epoch),
        cmocka_unit_test(test_invalid_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
