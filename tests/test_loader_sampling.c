/*
 * test_loader_sampling.c — what the loader adds on top of the sampler's
 * sampling options: a lazy start (no worker thread, no batch buffer until
 * the first next() or stk_loader_start, the same batches either way), the
 * augmentation seed apart from the order seed, K views per sample, the
 * sampling options (subset, weights, class balance from the dataset's own
 * labels, num_samples) through the loader, and resume of such a loader.
 *
 * References: the sampler built with the same options (the order), the plan
 * run directly on the dataset sample with the documented stream (the
 * pixels), the process's thread list in /proc/self/task (laziness).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "core/rng.h"
#include "format/dataset.h"
#include "ops/plan.h"
#include "pipeline/sampler.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define H 6
#define W 5
#define C 3
#define SPEC "pad 2 | random_crop 6,5 | flip 0.5 | normalize 0.5,0.4,0.3 0.2,0.25,0.3 | to f32 chw"
#define ROW (C * H * W * 4)

typedef struct fixture {
    uint64_t n;
    uint8_t *pixels;
    int64_t *labels;
    stk_dataset *ds;
} fixture;

static void fixture_open(fixture *f, uint64_t n)
{
    f->n = n;
    f->pixels = malloc(n * H * W * C);
    tu_fill_random(f->pixels, n * H * W * C, n);
    f->labels = malloc(n * sizeof *f->labels);
    for (uint64_t i = 0; i < n; i++) /* imbalanced: class 0 is most of it */
        f->labels[i] = i % 10 == 0 ? 1 + (int64_t)(i / 10 % 3) : 0;
    assert_int_equal(stk_dataset_from_memory(f->pixels, f->labels, n, H, W, C, 0, &f->ds), 0);
}

static void fixture_close(fixture *f)
{
    stk_dataset_close(f->ds);
    free(f->pixels);
    free(f->labels);
}

typedef tu_run run; /* testutil.h */

static stk_loader *make_loader(stk_dataset *ds, stk_loader_options o)
{
    stk_loader *l = NULL;
    int rc = stk_loader_create(ds, SPEC, &o, &l);
    if (rc < 0)
        print_error("create: %s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    return l;
}

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void *nothing(void *arg) { return arg; }

static void test_lazy_start(void **state)
{
    (void)state;
    /* One thread created and joined first: a sanitizer's runtime starts its
     * own background thread at the first pthread_create, which must not
     * count as a worker below. */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, nothing, NULL), 0);
    pthread_join(t, NULL);
    fixture f;
    fixture_open(&f, 203);
    stk_loader_options o = {.batch_size = 16, .threads = 3, .prefetch = 2, .seed = 8};
    int before = thread_count();
    stk_loader *lazy = make_loader(f.ds, o);
    stk_loader_stats st;
    stk_loader_stats_get(lazy, &st);
    assert_int_equal(st.batches_allocated, 0);
    assert_int_equal(st.pool_bytes, 0);
    assert_int_equal(thread_count(), before); /* no worker */
    /* Cursors work unstarted: length, state, set_epoch. */
    assert_int_equal(stk_loader_length(lazy), 13);
    assert_int_equal(stk_loader_set_epoch(lazy, 1), 0);
    stk_loader_state s;
    stk_loader_state_get(lazy, &s);
    assert_int_equal(s.epoch, 1);
    stk_loader_stats_get(lazy, &st);
    assert_int_equal(st.batches_allocated, 0);
    assert_int_equal(thread_count(), before);

    /* An explicit start: the workers and prefetch + 1 buffers; twice is a
     * no-op. */
    stk_loader *warm = make_loader(f.ds, o);
    assert_int_equal(stk_loader_set_epoch(warm, 1), 0);
    assert_int_equal(stk_loader_start(warm), 0);
    assert_int_equal(stk_loader_start(warm), 0);
    assert_int_equal(thread_count(), before + 3);
    stk_loader_stats_get(warm, &st);
    assert_int_equal(st.batches_allocated, 3);

    /* STK_LOADER_EAGER at create. */
    o.flags = STK_LOADER_EAGER;
    stk_loader *eager = make_loader(f.ds, o);
    assert_int_equal(thread_count(), before + 6);
    stk_loader_stats_get(eager, &st);
    assert_int_equal(st.batches_allocated, 3);
    assert_int_equal(stk_loader_set_epoch(eager, 1), 0);

    /* The same batches from all three. */
    run a = {0}, b = {0}, c = {0};
    assert_int_equal(tu_drain(lazy, &a, 0), 0);
    assert_int_equal(thread_count(), before + 9); /* next() started it */
    assert_int_equal(tu_drain(warm, &b, 0), 0);
    assert_int_equal(tu_drain(eager, &c, 0), 0);
    assert_int_equal(a.rows, 203);
    assert_int_equal(b.rows, 203);
    assert_int_equal(c.rows, 203);
    assert_memory_equal(a.data, b.data, 203 * ROW);
    assert_memory_equal(a.data, c.data, 203 * ROW);
    assert_memory_equal(a.indices, c.indices, 203 * 8);
    tu_run_free(&a);
    tu_run_free(&b);
    tu_run_free(&c);
    stk_loader_destroy(lazy);
    stk_loader_destroy(warm);
    stk_loader_destroy(eager);
    assert_int_equal(thread_count(), before);
    /* A loader destroyed unstarted. */
    o.flags = 0;
    stk_loader_destroy(make_loader(f.ds, o));
    /* Unknown flags are refused. */
    o.flags = 0x80;
    stk_loader *bad = NULL;
    assert_int_equal(stk_loader_create(f.ds, SPEC, &o, &bad), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "unknown flags 0x80"));
    fixture_close(&f);
}

/* Row i of r (views rows per sample) against the plan run with (seed,
 * domain, epoch, counter | view << 56). */
static void check_rows(const fixture *f, const run *r, uint64_t aug_seed, uint64_t epoch,
                       uint32_t views, const uint64_t *draw, uint32_t domain)
{
    stk_plan *plan;
    assert_int_equal(stk_plan_compile(SPEC, H, W, C, &plan), 0);
    float expect[C * H * W];
    for (uint64_t i = 0; i < r->rows; i++) {
        uint64_t idx = r->indices[i];
        uint32_t v = (uint32_t)(i % views);
        assert_int_equal(idx, r->indices[i - v]);
        assert_int_equal(r->labels[i], f->labels[idx]);
        stk_image_view iv = {f->pixels + idx * H * W * C, H, W, C, W * C, C, 1};
        stk_rng rng;
        uint64_t ctr = draw ? draw[i / views] : idx;
        stk_rng_init(&rng, aug_seed, domain, epoch, ctr | (uint64_t)v << 56);
        assert_int_equal(stk_plan_run(plan, &iv, &rng, expect), 0);
        assert_memory_equal(r->data + i * ROW, expect, ROW);
    }
    stk_plan_free(plan);
}

static void test_aug_seed_and_views(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 101);
    stk_loader_options o = {.batch_size = 8, .threads = 2, .seed = 21};
    run plain = {0}, same = {0}, other = {0};
    stk_loader *l0 = make_loader(f.ds, o);
    assert_int_equal(tu_drain(l0, &plain, 0), 0);
    stk_loader_destroy(l0);
    stk_loader *l1 = make_loader(f.ds, (stk_loader_options){.batch_size = 8, .seed = 21,
                                                           .aug_seed = 21,
                                                           .flags = STK_LOADER_AUG_SEED});
    stk_loader *l2 = make_loader(f.ds, (stk_loader_options){.batch_size = 8, .seed = 21,
                                                           .aug_seed = 99,
                                                           .flags = STK_LOADER_AUG_SEED});
    assert_int_equal(tu_drain(l1, &same, 0), 0);
    assert_int_equal(tu_drain(l2, &other, 0), 0);
    /* aug_seed = seed is today's behaviour; another aug_seed keeps the order
     * and changes the pixels, drawn from (aug_seed, epoch, index). */
    assert_memory_equal(plain.data, same.data, 101 * ROW);
    assert_memory_equal(plain.indices, other.indices, 101 * 8);
    assert_true(memcmp(plain.data, other.data, 101 * ROW) != 0);
    check_rows(&f, &other, 99, 0, 1, NULL, STK_RNG_DOMAIN_SAMPLE);
    /* Another order seed with the same aug_seed: another order, but each
     * sample augmented as before (the draws follow the index). */
    stk_loader *l3 = make_loader(f.ds, (stk_loader_options){.batch_size = 8, .seed = 22,
                                                           .aug_seed = 99,
                                                           .flags = STK_LOADER_AUG_SEED});
    run third = {0};
    assert_int_equal(tu_drain(l3, &third, 0), 0);
    assert_true(memcmp(third.indices, other.indices, 101 * 8) != 0);
    check_rows(&f, &third, 99, 0, 1, NULL, STK_RNG_DOMAIN_SAMPLE);

    /* views = 3: 3 rows per sample, view 0 the plain row, the views
     * different, the same for any thread count; drop_last and the last short
     * batch count samples, not rows. */
    run v1 = {0}, v3 = {0};
    stk_loader *lv1 = make_loader(f.ds, (stk_loader_options){.batch_size = 8, .threads = 1,
                                                            .seed = 21, .views = 3});
    stk_loader *lv3 = make_loader(f.ds, (stk_loader_options){.batch_size = 8, .threads = 3,
                                                            .seed = 21, .views = 3});
    stk_batch b;
    assert_int_equal(stk_loader_next(lv1, &b), 1);
    assert_int_equal(b.size, 24);
    assert_int_equal(b.shape[0], 24);
    assert_int_equal(stk_loader_release(lv1, &b), 0);
    assert_int_equal(stk_loader_set_epoch(lv1, 0), 0);
    assert_int_equal(stk_loader_length(lv1), 13);
    assert_int_equal(tu_drain(lv1, &v1, 0), 0);
    assert_int_equal(tu_drain(lv3, &v3, 0), 0);
    assert_int_equal(v1.rows, 303);
    assert_memory_equal(v1.data, v3.data, 303 * ROW);
    for (uint64_t i = 0; i < 101; i++) {
        assert_memory_equal(v1.data + 3 * i * ROW, plain.data + i * ROW, ROW);
        assert_int_equal(v1.indices[3 * i], plain.indices[i]);
    }
    int differ = 0;
    for (uint64_t i = 0; i < 101; i++)
        differ += memcmp(v1.data + 3 * i * ROW, v1.data + (3 * i + 1) * ROW, ROW) != 0 &&
                  memcmp(v1.data + (3 * i + 1) * ROW, v1.data + (3 * i + 2) * ROW, ROW) != 0;
    assert_true(differ > 50); /* crop and flip: some views coincide by chance */
    check_rows(&f, &v1, 21, 0, 3, NULL, STK_RNG_DOMAIN_SAMPLE);
    stk_loader_stats st;
    stk_loader_stats_get(lv1, &st);
    assert_int_equal(st.pool_bytes, (uint64_t)st.batches_allocated * 24 * ROW);

    stk_loader *bad = NULL;
    assert_int_equal(stk_loader_create(f.ds, SPEC,
                                       &(stk_loader_options){.views = STK_MAX_VIEWS + 1}, &bad),
                     STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "views 257 is more than the limit of 256"));

    tu_run_free(&plain);
    tu_run_free(&same);
    tu_run_free(&other);
    tu_run_free(&third);
    tu_run_free(&v1);
    tu_run_free(&v3);
    stk_loader_destroy(l1);
    stk_loader_destroy(l2);
    stk_loader_destroy(l3);
    stk_loader_destroy(lv1);
    stk_loader_destroy(lv3);
    fixture_close(&f);
}

/* The loader's rows follow the sampler made with the same options. */
static void check_order(const run *r, const stk_sampler_options *so, uint64_t epoch, uint64_t pos0)
{
    stk_sampler *s = NULL;
    assert_int_equal(stk_sampler_create(so, &s), 0);
    for (uint64_t i = 0; i < r->rows; i++)
        assert_int_equal(r->indices[i], stk_sampler_index(s, epoch, pos0 + i));
    stk_sampler_destroy(s);
}

static void test_sampling_through_loader(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 300);
    /* Weights with views and aug_seed: the draws follow the list position
     * (an index may come twice in an epoch, each time augmented anew). */
    double w[300];
    for (int i = 0; i < 300; i++)
        w[i] = i < 100 ? 0 : 1 + i % 3;
    stk_sampling sg = {.weights = w, .num_weights = 300, .num_samples = 250};
    stk_loader_options o = {.batch_size = 16, .threads = 2, .seed = 5, .sampling = &sg,
                            .views = 2, .aug_seed = 6, .flags = STK_LOADER_AUG_SEED};
    stk_loader *l = make_loader(f.ds, o);
    assert_int_equal(stk_loader_length(l), 16);
    run r = {0};
    assert_int_equal(tu_drain(l, &r, 0), 0);
    assert_int_equal(r.rows, 500);
    run one = {0}; /* the sampler's order, one row per sample */
    one.rows = 250;
    one.indices = malloc(250 * 8);
    for (int i = 0; i < 250; i++) {
        one.indices[i] = r.indices[2 * i];
        assert_true(one.indices[i] >= 100);
    }
    stk_sampler_options so = {.dataset_size = 300, .seed = 5, .sampling = &sg};
    check_order(&one, &so, 0, 0);
    uint64_t pos[250];
    for (int i = 0; i < 250; i++)
        pos[i] = (uint64_t)i;
    check_rows(&f, &r, 6, 0, 2, pos, STK_RNG_DOMAIN_SAMPLE_POS);
    tu_run_free(&one);

    /* Resume mid-epoch: same layout, and 1 rank -> 3 ranks (union covers
     * the rest of the list exactly). */
    stk_loader *a = make_loader(f.ds, o);
    run first = {0};
    assert_int_equal(tu_drain(a, &first, 5), 1);
    stk_loader_state st;
    stk_loader_state_get(a, &st);
    stk_loader *b = make_loader(f.ds, o);
    assert_int_equal(stk_loader_state_set(b, &st), 0);
    run rest = {0};
    assert_int_equal(tu_drain(b, &rest, 0), 0);
    assert_int_equal(first.rows + rest.rows, 500);
    assert_memory_equal(first.data, r.data, first.rows * ROW);
    assert_memory_equal(rest.data, r.data + first.rows * ROW, rest.rows * ROW);
    unsigned seen[250] = {0};
    for (uint32_t rank = 0; rank < 3; rank++) {
        stk_loader_options o3 = o;
        o3.rank = rank;
        o3.world_size = 3;
        o3.batch_size = 7;
        stk_loader *c = make_loader(f.ds, o3);
        assert_int_equal(stk_loader_state_set(c, &st), 0);
        run part = {0};
        assert_int_equal(tu_drain(c, &part, 0), 0);
        /* 250 - 80 = 170 slots left over 3 ranks: 57 each, padded by wrap. */
        assert_int_equal(part.rows, 2 * 57);
        stk_sampler *s3 = NULL;
        stk_sampler_options so3 = so;
        so3.rank = rank;
        so3.world_size = 3;
        so3.start_slot = 80;
        assert_int_equal(stk_sampler_create(&so3, &s3), 0);
        for (uint64_t p = 0; p < 57; p++) {
            uint64_t slot = (80 + p * 3 + rank) % 250;
            assert_int_equal(part.indices[2 * p], r.indices[2 * slot]);
            assert_memory_equal(part.data + 2 * p * ROW, r.data + 2 * slot * ROW, 2 * ROW);
            seen[slot]++;
        }
        stk_sampler_destroy(s3);
        tu_run_free(&part);
        stk_loader_destroy(c);
    }
    for (int s = 0; s < 250; s++)
        assert_int_equal(seen[s], s < 80 ? (s < 1 ? 1 : 0) : 1); /* slot 0 is the 1 pad */

    /* A state of another sampling, aug_seed or views is refused. */
    stk_loader_options o2 = o;
    o2.aug_seed = 7;
    stk_loader *d = make_loader(f.ds, o2);
    assert_int_equal(stk_loader_state_set(d, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "another pipeline spec or sampling options"));
    stk_loader_destroy(d);
    w[150] = 2.5;
    d = make_loader(f.ds, o);
    assert_int_equal(stk_loader_state_set(d, &st), STK_EINVAL);
    stk_loader_destroy(d);
    /* Explicit class labels: a state taken with other labels is refused
     * (their contents are fingerprinted, not just their count). */
    int64_t lab[300];
    for (int i = 0; i < 300; i++)
        lab[i] = i % 4;
    stk_sampling sl = {.labels = lab, .num_labels = 300};
    stk_loader_options ol = {.batch_size = 16, .seed = 5, .sampling = &sl};
    stk_loader *la = make_loader(f.ds, ol);
    stk_loader_state sa;
    stk_loader_state_get(la, &sa);
    lab[7] = 0; /* one label changed (it was 3) */
    stk_loader *lb = make_loader(f.ds, ol);
    assert_int_equal(stk_loader_state_set(lb, &sa), STK_EINVAL);
    lab[7] = 3;
    stk_loader *lc = make_loader(f.ds, ol);
    assert_int_equal(stk_loader_state_set(lc, &sa), 0);
    stk_loader_destroy(la);
    stk_loader_destroy(lb);
    stk_loader_destroy(lc);
    /* Plain loaders' states are unchanged by all this (digest 0). */
    stk_loader *p1 = make_loader(f.ds, (stk_loader_options){.batch_size = 16, .seed = 5});
    stk_loader_state_get(p1, &st);
    stk_loader *p2 = make_loader(f.ds, (stk_loader_options){.batch_size = 16, .seed = 5,
                                                           .views = 1});
    assert_int_equal(stk_loader_state_set(p2, &st), 0);
    stk_loader_destroy(p1);
    stk_loader_destroy(p2);

    tu_run_free(&r);
    tu_run_free(&first);
    tu_run_free(&rest);
    stk_loader_destroy(l);
    stk_loader_destroy(a);
    stk_loader_destroy(b);
    fixture_close(&f);
}

static void test_balance_classes_from_dataset(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 300);
    /* A subset, class-balanced by the dataset's labels: the order is the
     * sampler's with those labels given explicitly. */
    uint64_t idx[200];
    int64_t lab[200];
    for (int i = 0; i < 200; i++) {
        idx[i] = (uint64_t)i + 50;
        lab[i] = f.labels[idx[i]];
    }
    stk_sampling sg = {.indices = idx, .num_indices = 200, .balance_classes = 1,
                       .num_samples = 400};
    stk_loader *l = make_loader(f.ds, (stk_loader_options){.batch_size = 32, .seed = 3,
                                                          .sampling = &sg});
    run r = {0};
    assert_int_equal(tu_drain(l, &r, 0), 0);
    assert_int_equal(r.rows, 400);
    stk_sampling ref = {.indices = idx, .num_indices = 200, .labels = lab, .num_labels = 200,
                        .num_samples = 400};
    stk_sampler_options so = {.dataset_size = 300, .seed = 3, .sampling = &ref};
    check_order(&r, &so, 0, 0);
    unsigned per_class[4] = {0};
    for (uint64_t i = 0; i < r.rows; i++)
        per_class[r.labels[i]]++;
    for (int c = 0; c < 4; c++)
        assert_true(per_class[c] > 50); /* 1/4 each (class 0 alone is 180 of 200) */
    tu_run_free(&r);
    stk_loader_destroy(l);
    /* With weights: refused, naming both. */
    double w[200] = {1};
    sg.weights = w;
    sg.num_weights = 200;
    stk_loader *bad = NULL;
    assert_int_equal(stk_loader_create(f.ds, SPEC, &(stk_loader_options){.sampling = &sg}, &bad),
                     STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "give neither weights nor labels"));
    fixture_close(&f);
}

static void test_mixing_concatenated_datasets(void **state)
{
    (void)state;
    /* Two parts, and one memory dataset holding the same samples in the
     * same order: the concatenation must read exactly what it reads. */
    fixture whole;
    fixture_open(&whole, 100);
    stk_dataset *a = NULL, *b = NULL, *ab = NULL;
    assert_int_equal(stk_dataset_from_memory(whole.pixels, whole.labels, 30, H, W, C, 0, &a), 0);
    assert_int_equal(stk_dataset_from_memory(whole.pixels + 30 * H * W * C, whole.labels + 30, 70,
                                             H, W, C, 0, &b),
                     0);
    stk_dataset *parts[2] = {a, b};
    assert_int_equal(stk_dataset_concat(parts, 2, &ab), 0);
    stk_dataset_info info;
    stk_dataset_info_get(ab, &info);
    assert_int_equal(info.count, 100);
    assert_int_equal(info.height, H);
    int64_t label;
    assert_int_equal(stk_dataset_label(ab, 42, &label), 0);
    assert_int_equal(label, whole.labels[42]);

    const uint64_t sizes[2] = {30, 70};
    const double w[2] = {3, 1};
    stk_sampling sg = {.mix_sizes = sizes, .mix_weights = w, .num_mix = 2, .num_samples = 200};
    stk_loader_options o = {.batch_size = 16, .threads = 2, .seed = 4, .sampling = &sg};
    stk_loader *lm = make_loader(ab, o), *lw = make_loader(whole.ds, o);
    for (uint64_t e = 0; e < 2; e++) {
        run rm = {0}, rw = {0};
        assert_int_equal(tu_drain(lm, &rm, 0), 0);
        assert_int_equal(tu_drain(lw, &rw, 0), 0);
        assert_int_equal(rm.rows, 200);
        assert_memory_equal(rm.indices, rw.indices, 200 * 8);
        assert_memory_equal(rm.labels, rw.labels, 200 * 8);
        assert_memory_equal(rm.data, rw.data, 200 * ROW);
        unsigned from_a = 0;
        for (int i = 0; i < 200; i++)
            from_a += rm.indices[i] < 30;
        assert_int_equal(from_a, 150); /* 3 : 1, exactly, every epoch */
        /* a repeats (150 draws of 30): augmented by list position */
        uint64_t pos[200];
        for (int i = 0; i < 200; i++)
            pos[i] = (uint64_t)i;
        check_rows(&whole, &rm, 4, e, 1, pos, STK_RNG_DOMAIN_SAMPLE_POS);
        tu_run_free(&rm);
        tu_run_free(&rw);
    }
    stk_loader_destroy(lm);
    stk_loader_destroy(lw);
    stk_dataset *bad = NULL;
    assert_int_equal(stk_dataset_concat(parts, 0, &bad), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no datasets"));
    stk_dataset *holes[2] = {a, NULL};
    assert_int_equal(stk_dataset_concat(holes, 2, &bad), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "dataset 1 is NULL"));
    stk_dataset_close(ab);
    stk_dataset_close(a);
    stk_dataset_close(b);
    fixture_close(&whole);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_start),
        cmocka_unit_test(test_aug_seed_and_views),
        cmocka_unit_test(test_sampling_through_loader),
        cmocka_unit_test(test_balance_classes_from_dataset),
        cmocka_unit_test(test_mixing_concatenated_datasets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
