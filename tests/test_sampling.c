/*
 * test_sampling.c — the sampling options of the epoch order (stk_sampling):
 * subsets (`indices`), weighted draws with replacement (`weights`, an alias
 * table), class balance (`labels`: weight 1 / class count), and num_samples
 * (a subset of the permutation, or extra passes).
 *
 * References are independent of the sampler's construction: empirical
 * frequencies against the weights (within 3 sigma per entry, or a
 * chi-square bound where there are many entries), counts of each index, and
 * for sharding and resume the W = 1 list itself: rank r's position p of any
 * layout must be entry (S + p*W + r) mod M of the one-rank list — the
 * sharded lists are the same list, whatever the sampling.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "pipeline/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static stk_sampler *make(const stk_sampler_options *o)
{
    stk_sampler *s = NULL;
    int rc = stk_sampler_create(o, &s);
    if (rc < 0)
        print_error("create: %s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    return s;
}

/* The one-rank list of epoch e (M entries). */
static uint64_t *one_rank_list(stk_sampler_options o, uint64_t epoch, uint64_t *m)
{
    o.rank = 0;
    o.world_size = 1;
    o.batch_size = 1;
    o.drop_last = 0;
    o.start_slot = 0;
    stk_sampler *s = make(&o);
    *m = stk_sampler_length(s);
    uint64_t *list = malloc(*m * sizeof *list);
    for (uint64_t p = 0; p < *m; p++)
        list[p] = stk_sampler_index(s, epoch, p);
    stk_sampler_destroy(s);
    return list;
}

/* Every layout W = 1..8 (pad and drop, batch 3), from slot 0 and from a few
 * start slots, reads exactly the one-rank list's entries at its slots. */
static void check_layouts(stk_sampler_options o)
{
    for (uint64_t e = 0; e < 2; e++) {
        uint64_t m;
        uint64_t *list = one_rank_list(o, e, &m);
        for (uint32_t w = 1; w <= 8; w++) {
            for (int drop = 0; drop <= 1; drop++) {
                const uint64_t starts[] = {0, 1, m / 3, m - 1};
                for (int si = 0; si < 4; si++) {
                    uint64_t start = starts[si];
                    if (drop && start == 0 && m / w < 3)
                        continue;
                    uint64_t rest = m - start;
                    uint64_t per = drop ? rest / w / 3 * 3 : (rest + w - 1) / w;
                    for (uint32_t r = 0; r < w; r++) {
                        stk_sampler_options so = o;
                        so.rank = r;
                        so.world_size = w;
                        so.batch_size = 3;
                        so.drop_last = drop;
                        so.start_slot = start;
                        stk_sampler *s = make(&so);
                        assert_int_equal(stk_sampler_length(s), per);
                        for (uint64_t p = 0; p < per; p++)
                            assert_int_equal(stk_sampler_index(s, e, p),
                                             list[(start + p * w + r) % m]);
                        stk_sampler_destroy(s);
                    }
                }
            }
        }
        free(list);
    }
}

static void test_indices_subset_exactly_once(void **state)
{
    (void)state;
    enum { N = 1000, P = 137 };
    uint64_t idx[P];
    for (uint64_t i = 0; i < P; i++)
        idx[i] = (i * 577 + 3) % N; /* distinct: 577 is prime to 1000 */
    stk_sampling sg = {.indices = idx, .num_indices = P};
    const stk_shuffle modes[] = {STK_SHUFFLE_GLOBAL, STK_SHUFFLE_BLOCK, STK_SHUFFLE_NONE};
    for (int mi = 0; mi < 3; mi++) {
        stk_sampler_options o = {.dataset_size = N, .seed = 9, .shuffle = modes[mi],
                                 .sampling = &sg};
        if (modes[mi] == STK_SHUFFLE_BLOCK) {
            o.block_size = 8;
            o.shuffle_window = 3;
        }
        uint64_t m, m1;
        uint64_t *l0 = one_rank_list(o, 0, &m);
        uint64_t *l1 = one_rank_list(o, 1, &m1);
        assert_int_equal(m, P);
        /* Each epoch lists every given index exactly once. */
        for (int e = 0; e < 2; e++) {
            uint64_t *l = e ? l1 : l0;
            unsigned count[N] = {0};
            for (uint64_t p = 0; p < P; p++)
                count[l[p]]++;
            for (uint64_t i = 0; i < P; i++) {
                assert_int_equal(count[idx[i]], 1);
                count[idx[i]] = 0;
            }
            for (uint64_t i = 0; i < N; i++)
                assert_int_equal(count[i], 0); /* nothing outside the subset */
        }
        if (modes[mi] == STK_SHUFFLE_NONE) {
            for (uint64_t p = 0; p < P; p++)
                assert_int_equal(l0[p], idx[p]); /* the list in its order */
        } else {
            assert_true(memcmp(l0, l1, sizeof(uint64_t) * P) != 0);
        }
        free(l0);
        free(l1);
        check_layouts(o);
    }

    /* The identity list gives exactly the plain order: a subset permutes
     * positions in the list with the dataset's own permutation. */
    uint64_t *all = malloc(N * sizeof *all);
    for (uint64_t i = 0; i < N; i++)
        all[i] = i;
    stk_sampling full = {.indices = all, .num_indices = N};
    stk_sampler_options a = {.dataset_size = N, .seed = 5, .sampling = &full};
    stk_sampler_options b = {.dataset_size = N, .seed = 5};
    stk_sampler *sa = make(&a), *sb = make(&b);
    for (uint64_t p = 0; p < N; p++)
        assert_int_equal(stk_sampler_index(sa, 3, p), stk_sampler_index(sb, 3, p));
    stk_sampler_destroy(sa);
    stk_sampler_destroy(sb);
    free(all);
}

/* Counts of `draws` entries of epoch 0 over a population of p. */
static uint64_t *draw_counts(const stk_sampler_options *o, uint64_t draws, uint64_t range)
{
    stk_sampler *s = make(o);
    assert_int_equal(stk_sampler_length(s), draws);
    uint64_t *count = calloc(range, sizeof *count);
    stk_epoch_key key;
    stk_sampler_epoch_key(s, 0, &key);
    for (uint64_t p = 0; p < draws; p++) {
        uint64_t i = stk_sampler_index_keyed(s, &key, p);
        assert_true(i < range);
        count[i]++;
    }
    stk_sampler_destroy(s);
    return count;
}

static void test_weights_frequencies(void **state)
{
    (void)state;
    enum { P = 10 };
    const uint64_t draws = 1000000;
    const double w[P] = {1, 2, 3, 0, 4, 0.5, 10, 0.25, 7, 2.25};
    double total = 0;
    for (int i = 0; i < P; i++)
        total += w[i];
    stk_sampling sg = {.weights = w, .num_weights = P, .num_samples = draws};
    stk_sampler_options o = {.dataset_size = P, .seed = 2024, .sampling = &sg};
    uint64_t *count = draw_counts(&o, draws, P);
    for (int i = 0; i < P; i++) {
        double pi = w[i] / total, mean = draws * pi;
        double sigma = sqrt(draws * pi * (1 - pi));
        if (w[i] == 0)
            assert_int_equal(count[i], 0);
        else if (fabs((double)count[i] - mean) > 3 * sigma)
            fail_msg("entry %d: %llu draws, expected %.1f +- 3 x %.1f", i,
                     (unsigned long long)count[i], mean, sigma);
    }
    free(count);

    /* Many entries (weights 1..1000 over a subset): chi-square with 999
     * degrees of freedom within 5 standard deviations (sqrt(2 df)). */
    enum { Q = 1000 };
    double wq[Q];
    uint64_t idx[Q];
    for (int i = 0; i < Q; i++) {
        wq[i] = i + 1;
        idx[i] = 5000 - 3 * (uint64_t)i;
    }
    double tq = Q * (Q + 1) / 2.0;
    stk_sampling sq = {.indices = idx, .num_indices = Q, .weights = wq, .num_weights = Q,
                       .num_samples = draws};
    stk_sampler_options oq = {.dataset_size = 5001, .seed = 77, .sampling = &sq};
    count = draw_counts(&oq, draws, 5001);
    double chi2 = 0;
    for (int i = 0; i < Q; i++) {
        double mean = draws * wq[i] / tq;
        double d = (double)count[idx[i]] - mean;
        chi2 += d * d / mean;
        count[idx[i]] = 0;
    }
    for (int i = 0; i < 5001; i++)
        assert_int_equal(count[i], 0); /* only the subset is drawn */
    if (fabs(chi2 - (Q - 1)) > 5 * sqrt(2.0 * (Q - 1)))
        fail_msg("chi-square %.1f for %d degrees of freedom", chi2, Q - 1);
    free(count);
}

static void test_weights_layouts_and_epochs(void **state)
{
    (void)state;
    enum { P = 53 };
    double w[P];
    for (int i = 0; i < P; i++)
        w[i] = (i % 7) + 0.5;
    stk_sampling sg = {.weights = w, .num_weights = P, .num_samples = 101};
    stk_sampler_options o = {.dataset_size = P, .seed = 4, .sampling = &sg};
    check_layouts(o);
    /* Epochs and seeds draw differently; a second sampler draws the same. */
    uint64_t m;
    uint64_t *a = one_rank_list(o, 0, &m), *b = one_rank_list(o, 1, &m), *c = one_rank_list(o, 0, &m);
    assert_int_equal(m, 101);
    assert_memory_equal(a, c, sizeof(uint64_t) * m);
    assert_true(memcmp(a, b, sizeof(uint64_t) * m) != 0);
    o.seed = 5;
    uint64_t *d = one_rank_list(o, 0, &m);
    assert_true(memcmp(a, d, sizeof(uint64_t) * m) != 0);
    free(a);
    free(b);
    free(c);
    free(d);
    /* num_samples 0: one draw per population entry. */
    sg.num_samples = 0;
    stk_sampler *s = make(&o);
    assert_int_equal(stk_sampler_length(s), P);
    stk_sampler_destroy(s);
}

static void test_class_balanced(void **state)
{
    (void)state;
    /* 4 classes of 5000, 500, 50 and 5 samples, interleaved. */
    enum { P = 5555, C = 4 };
    int64_t *labels = malloc(P * sizeof *labels);
    const uint64_t sizes[C] = {5000, 500, 50, 5};
    uint64_t k = 0;
    for (int c = 0; c < C; c++)
        for (uint64_t i = 0; i < sizes[c]; i++)
            labels[k++] = 10 * c - 7; /* any int64 labels */
    for (uint64_t i = P - 1; i > 0; i--) { /* a fixed shuffle of the layout */
        uint64_t j = (i * 2654435761u) % (i + 1);
        int64_t t = labels[i];
        labels[i] = labels[j];
        labels[j] = t;
    }
    const uint64_t draws = 1000000;
    stk_sampling sg = {.labels = labels, .num_labels = P, .num_samples = draws};
    stk_sampler_options o = {.dataset_size = P, .seed = 11, .sampling = &sg};
    uint64_t *count = draw_counts(&o, draws, P);
    uint64_t per_class[C] = {0};
    for (uint64_t i = 0; i < P; i++)
        per_class[(labels[i] + 7) / 10] += count[i];
    double pc = 1.0 / C, sigma = sqrt(draws * pc * (1 - pc));
    for (int c = 0; c < C; c++)
        if (fabs((double)per_class[c] - draws * pc) > 3 * sigma)
            fail_msg("class %d: %llu draws, expected %.0f +- 3 x %.1f", c,
                     (unsigned long long)per_class[c], draws * pc, sigma);
    /* Within the smallest class, each of its 5 samples equally: 1/20. */
    double ps = 1.0 / (C * 5), ss = sqrt(draws * ps * (1 - ps));
    for (uint64_t i = 0; i < P; i++)
        if (labels[i] == 23 && fabs((double)count[i] - draws * ps) > 3 * ss)
            fail_msg("sample %llu of the smallest class: %llu draws", (unsigned long long)i,
                     (unsigned long long)count[i]);
    free(count);
    sg.num_samples = 200;
    check_layouts(o);
    free(labels);
}

static void test_num_samples(void **state)
{
    (void)state;
    enum { N = 97 };
    const stk_shuffle modes[] = {STK_SHUFFLE_GLOBAL, STK_SHUFFLE_BLOCK, STK_SHUFFLE_NONE};
    for (int mi = 0; mi < 3; mi++) {
        /* Fewer: a different subset of the permutation each epoch, no repeat. */
        stk_sampling sg = {.num_samples = 40};
        stk_sampler_options o = {.dataset_size = N, .seed = 3, .shuffle = modes[mi],
                                 .sampling = &sg};
        if (modes[mi] == STK_SHUFFLE_BLOCK)
            o.block_size = 5;
        uint64_t m;
        uint64_t *l = one_rank_list(o, 0, &m);
        assert_int_equal(m, 40);
        stk_sampler_options plain = o;
        plain.sampling = NULL;
        stk_sampler *ps = make(&plain);
        for (uint64_t p = 0; p < 40; p++) /* the first 40 of the plain order */
            assert_int_equal(l[p], stk_sampler_index(ps, 0, p));
        stk_sampler_destroy(ps);
        free(l);
        check_layouts(o);

        /* More: 2.5 passes, each pass a permutation of its own. */
        sg.num_samples = 2 * N + N / 2;
        l = one_rank_list(o, 1, &m);
        assert_int_equal(m, 2 * N + N / 2);
        for (int pass = 0; pass < 3; pass++) {
            unsigned count[N] = {0};
            uint64_t end = pass < 2 ? (uint64_t)(pass + 1) * N : m;
            for (uint64_t p = (uint64_t)pass * N; p < end; p++)
                count[l[p]]++;
            for (uint64_t i = 0; i < N; i++)
                assert_true(count[i] <= 1);
        }
        if (modes[mi] != STK_SHUFFLE_NONE)
            assert_true(memcmp(l, l + N, N * sizeof *l) != 0); /* passes differ */
        else
            for (uint64_t p = 0; p < m; p++)
                assert_int_equal(l[p], p % N);
        free(l);
        check_layouts(o);
    }
}

static void test_mixing(void **state)
{
    (void)state;
    const uint64_t sizes[3] = {50, 200, 13};
    const double w[3] = {0.5, 0.3, 0.2};
    stk_sampling sg = {.mix_sizes = sizes, .mix_weights = w, .num_mix = 3, .num_samples = 1000};
    stk_sampler_options o = {.dataset_size = 263, .seed = 8, .sampling = &sg};
    for (uint64_t e = 0; e < 2; e++) {
        uint64_t m;
        uint64_t *l = one_rank_list(o, e, &m);
        assert_int_equal(m, 1000);
        unsigned count[263] = {0}, per[3] = {0}, half[3] = {0};
        for (uint64_t p = 0; p < m; p++) {
            int g = l[p] < 50 ? 0 : l[p] < 250 ? 1 : 2;
            count[l[p]]++;
            per[g]++;
            if (p < 500)
                half[g]++;
        }
        /* Exactly the proportions each epoch: 500, 300, 200. */
        assert_int_equal(per[0], 500);
        assert_int_equal(per[1], 300);
        assert_int_equal(per[2], 200);
        /* Each source walks whole passes of its own permutation: 10 of
         * source 0, 1.5 of source 1, 15 and 5/13 of source 2. */
        for (int i = 0; i < 50; i++)
            assert_int_equal(count[i], 10);
        unsigned twice = 0;
        for (int i = 50; i < 250; i++) {
            assert_true(count[i] == 1 || count[i] == 2);
            twice += count[i] == 2;
        }
        assert_int_equal(twice, 100);
        for (int i = 250; i < 263; i++)
            assert_true(count[i] == 15 || count[i] == 16);
        /* Interleaved, not in runs: the first half holds about half of each
         * (hypergeometric: within 3 binomial sigmas). */
        for (int g = 0; g < 3; g++) {
            double mean = per[g] / 2.0, sigma = sqrt(500 * (per[g] / 1000.0) * (1 - per[g] / 1000.0));
            if (fabs(half[g] - mean) > 3 * sigma)
                fail_msg("source %d: %u of %u in the first half", g, half[g], per[g]);
        }
        free(l);
    }
    check_layouts(o);

    /* Defaults: proportional to the sizes, M = N: every sample exactly once
     * (a shuffled concatenation). Largest remainder: 10 of sizes 1, 1, 1
     * weights 1, 1, 1 is 4, 3, 3. */
    stk_sampling dg = {.mix_sizes = sizes, .num_mix = 3};
    stk_sampler_options d = {.dataset_size = 263, .seed = 8, .sampling = &dg};
    uint64_t m;
    uint64_t *l = one_rank_list(d, 0, &m);
    assert_int_equal(m, 263);
    unsigned seen[263] = {0};
    for (uint64_t p = 0; p < m; p++)
        assert_int_equal(seen[l[p]]++, 0);
    free(l);
    check_layouts(d);
    const uint64_t ones[3] = {1, 1, 1};
    stk_sampling tg = {.mix_sizes = ones, .num_mix = 3, .num_samples = 10};
    stk_sampler_options t = {.dataset_size = 3, .shuffle = STK_SHUFFLE_NONE, .sampling = &tg};
    l = one_rank_list(t, 0, &m);
    const uint64_t want[10] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
    assert_memory_equal(l, want, sizeof want);
    free(l);
    /* A zero weight: that source is never read. */
    const double wz[3] = {1, 0, 3};
    sg.mix_weights = wz;
    l = one_rank_list(o, 0, &m);
    for (uint64_t p = 0; p < m; p++)
        assert_true(l[p] < 50 || l[p] >= 250);
    free(l);
}

static void expect_einval(const stk_sampler_options *o, const char *text)
{
    stk_sampler *s = NULL;
    assert_int_equal(stk_sampler_create(o, &s), STK_EINVAL);
    assert_null(s);
    if (!strstr(stk_errmsg(), text))
        fail_msg("message \"%s\" lacks \"%s\"", stk_errmsg(), text);
}

static void test_invalid_sampling(void **state)
{
    (void)state;
    uint64_t idx[3] = {0, 9, 10};
    stk_sampling sg = {.indices = idx, .num_indices = 3};
    stk_sampler_options o = {.dataset_size = 10, .sampling = &sg};
    expect_einval(&o, "indices[2] = 10 is not below the dataset size 10");
    sg = (stk_sampling){.indices = idx};
    expect_einval(&o, "indices given without a count");
    double w[3] = {1, -1, 2};
    sg = (stk_sampling){.weights = w, .num_weights = 3};
    o.dataset_size = 3;
    expect_einval(&o, "weight 1 is -1");
    w[1] = NAN;
    expect_einval(&o, "weight 1 is nan");
    w[0] = w[1] = w[2] = 0;
    expect_einval(&o, "the weights sum to 0");
    w[0] = 1;
    sg.num_weights = 2;
    expect_einval(&o, "2 weights for a population of 3 (the dataset)");
    sg.num_weights = 3;
    o.shuffle = STK_SHUFFLE_NONE;
    expect_einval(&o, "weights draw at random with replacement: shuffle=none does not apply");
    o.shuffle = STK_SHUFFLE_GLOBAL;
    int64_t lab[3] = {1, 1, 2};
    sg.labels = lab;
    sg.num_labels = 3;
    expect_einval(&o, "weights and labels (class balance) exclude each other");
    sg = (stk_sampling){.balance_classes = 1};
    expect_einval(&o, "balance_classes needs the labels");
    sg = (stk_sampling){.reserved32_ = 1};
    expect_einval(&o, "reserved32_ must be zero");
    sg = (stk_sampling){.num_samples = 5};
    o.start_slot = 5;
    expect_einval(&o, "start_slot 5 is not below the epoch's list size 5");
    const uint64_t sizes[2] = {4, 5};
    const double mw[2] = {1, -2};
    sg = (stk_sampling){.mix_sizes = sizes, .num_mix = 2};
    o = (stk_sampler_options){.dataset_size = 10, .sampling = &sg};
    expect_einval(&o, "the sources' sizes sum to 9, not the dataset size 10");
    o.dataset_size = 9;
    sg.mix_weights = mw;
    expect_einval(&o, "mix weight 1 is -2");
    sg.mix_weights = NULL;
    o.shuffle = STK_SHUFFLE_BLOCK;
    expect_einval(&o, "mixing sources takes shuffle=global or none, not block");
    o.shuffle = STK_SHUFFLE_GLOBAL;
    sg.indices = idx;
    sg.num_indices = 1;
    expect_einval(&o, "mixing sources excludes indices, weights and class balance");
    sg = (stk_sampling){.mix_sizes = sizes, .num_mix = 2};
    stk_sampler *ok = NULL;
    assert_int_equal(stk_sampler_create(&o, &ok), 0);
    stk_sampler_destroy(ok);
    /* drop_last on the list's size, not the dataset's. */
    sg = (stk_sampling){.num_samples = 5};
    o = (stk_sampler_options){.dataset_size = 100, .world_size = 4, .batch_size = 2,
                              .drop_last = 1, .sampling = &sg};
    expect_einval(&o, "5 samples over 4 ranks leave 1 per rank");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indices_subset_exactly_once),
        cmocka_unit_test(test_weights_frequencies),
        cmocka_unit_test(test_weights_layouts_and_epochs),
        cmocka_unit_test(test_class_balanced),
        cmocka_unit_test(test_num_samples),
        cmocka_unit_test(test_mixing),
        cmocka_unit_test(test_invalid_sampling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
