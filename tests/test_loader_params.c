/*
 * test_loader_params.c — the loader's parameters and statistics by key
 * (stk_loader_set / get / param_bounds / param_describe, stk_loader_stat_get,
 * stk_loader_stats_sized; loader_params.c): set before the start and
 * refused after it (STK_ESTATE) or after state_set; bounds and the wrong
 * form refused with a message naming the parameter; a failed set leaves the
 * loader as it was; every parameter of the table reads back what was set; a
 * loader configured by set gives the batches, byte for byte, of one given
 * the same values in stk_loader_options (the copies are the loader's: the
 * caller's arrays and strings may change after the set); statistics by key
 * equal the version-1 struct; the sized struct of an older (smaller) and a
 * newer (larger) caller; and STK_LOADER_DECODE_BUDGET bounding a decode
 * (an image over it is STK_EDATA, or skipped and named under on_error=skip).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/dataset.h"
#include "testutil.h"

#define H 6
#define W 5
#define C 3
#define N 157
#define SPEC "pad 2 | random_crop 6,5 | flip 0.5 | normalize 0.5,0.4,0.3 0.2,0.25,0.3 | to f32 chw"

typedef struct fixture {
    uint8_t *pixels;
    int64_t *labels;
    stk_dataset *ds;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->pixels = malloc((size_t)N * H * W * C);
    tu_fill_random(f->pixels, (size_t)N * H * W * C, 11);
    f->labels = malloc(N * sizeof *f->labels);
    for (int i = 0; i < N; i++)
        f->labels[i] = i % 5;
    assert_int_equal(stk_dataset_from_memory(f->pixels, f->labels, N, H, W, C, 0, &f->ds), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    stk_dataset_close(f->ds);
    free(f->pixels);
    free(f->labels);
    free(f);
    return 0;
}

static stk_loader *make(stk_dataset *ds, const stk_loader_options *o)
{
    stk_loader *l = NULL;
    int rc = stk_loader_create(ds, SPEC, o, &l);
    if (rc < 0)
        fail_msg("create: %s", stk_errmsg());
    return l;
}

/* Every batch of `epochs` epochs, concatenated. */
static void drain_epochs(stk_loader *l, int epochs, tu_run *r)
{
    memset(r, 0, sizeof *r);
    for (int e = 0; e < epochs; e++) {
        tu_run one;
        memset(&one, 0, sizeof one);
        assert_int_equal(tu_drain(l, &one, 0), 0);
        size_t row = (size_t)H * W * C * 4;
        r->data = realloc(r->data, (r->rows + one.rows) * row + 1);
        r->labels = realloc(r->labels, (r->rows + one.rows + 1) * sizeof *r->labels);
        r->indices = realloc(r->indices, (r->rows + one.rows + 1) * sizeof *r->indices);
        memcpy(r->data + r->rows * row, one.data, one.rows * row);
        memcpy(r->labels + r->rows, one.labels, one.rows * sizeof *r->labels);
        memcpy(r->indices + r->rows, one.indices, one.rows * sizeof *r->indices);
        r->rows += one.rows;
        r->batches += one.batches;
        r->skipped += one.skipped;
        tu_run_free(&one);
    }
}

static void assert_same_run(const tu_run *a, const tu_run *b)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->batches, b->batches);
    assert_true(a->rows > 0);
    assert_memory_equal(a->data, b->data, a->rows * (size_t)H * W * C * 4);
    assert_memory_equal(a->labels, b->labels, a->rows * sizeof *a->labels);
    assert_memory_equal(a->indices, b->indices, a->rows * sizeof *a->indices);
}

static void test_set_before_start_refused_after(void **state)
{
    fixture *f = *state;
    stk_loader *l = make(f->ds, NULL);
    int64_t v = -1;
    assert_int_equal(stk_loader_get(l, STK_LOADER_BATCH_SIZE, &v), 0);
    assert_int_equal(v, 256); /* the default, as in effect */
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 10), 0);
    assert_int_equal(stk_loader_get(l, STK_LOADER_BATCH_SIZE, &v), 0);
    assert_int_equal(v, 10);
    assert_int_equal(stk_loader_length(l), (N + 9) / 10); /* re-derived */
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    assert_int_equal(st.max_batches, 20); /* auto prefetch's cap + 4 */

    assert_int_equal(stk_loader_start(l), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 12), STK_ESTATE);
    assert_non_null(strstr(stk_errmsg(), "batch_size cannot change once the loader has started"));
    assert_int_equal(stk_loader_set_string(l, STK_LOADER_FIELDS, "image,label,index"),
                     STK_ESTATE);
    assert_int_equal(stk_loader_get(l, STK_LOADER_BATCH_SIZE, &v), 0);
    assert_int_equal(v, 10);
    stk_batch b;
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.size, 10);
    stk_loader_release(l, &b);
    stk_loader_destroy(l);

    /* The first next() starts it too; so does EAGER (flag or parameter). */
    l = make(f->ds, &(stk_loader_options){.batch_size = 4});
    assert_int_equal(stk_loader_next(l, &b), 1);
    stk_loader_release(l, &b);
    assert_int_equal(stk_loader_set(l, STK_LOADER_SEED, 3), STK_ESTATE);
    stk_loader_destroy(l);
    l = make(f->ds, &(stk_loader_options){.batch_size = 4});
    assert_int_equal(stk_loader_set(l, STK_LOADER_EAGER_START, 1), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_SEED, 3), STK_ESTATE);
    assert_int_equal(stk_loader_get(l, STK_LOADER_EAGER_START, &v), 0);
    assert_int_equal(v, 1);
    stk_loader_destroy(l);

    /* After state_set moved it: refused (set parameters first); set_epoch
     * is kept across a set. */
    l = make(f->ds, &(stk_loader_options){.batch_size = 4});
    stk_loader_state s;
    stk_loader_state_get(l, &s);
    s.epoch = 2;
    s.position = 3;
    assert_int_equal(stk_loader_state_set(l, &s), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_THREADS, 2), STK_ESTATE);
    assert_non_null(strstr(stk_errmsg(), "stk_loader_state_set"));
    stk_loader_destroy(l);
    l = make(f->ds, &(stk_loader_options){.batch_size = 4});
    assert_int_equal(stk_loader_set_epoch(l, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_THREADS, 2), 0);
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.epoch, 3);
    assert_int_equal(b.position, 0);
    stk_loader_release(l, &b);
    stk_loader_destroy(l);
}

static void test_bounds_and_form_refused(void **state)
{
    fixture *f = *state;
    stk_loader *l = make(f->ds, NULL);
    assert_int_equal(stk_loader_set(l, STK_LOADER_VIEWS, 0), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "views 0 is out of bounds [1, 256]"));
    assert_int_equal(stk_loader_set(l, STK_LOADER_THREADS, 1025), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "threads 1025 is out of bounds [0, 1024]"));
    assert_int_equal(stk_loader_set(l, STK_LOADER_ON_ERROR, 3), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "on_error 3 is out of bounds [0, 2]"));
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, -1), STK_EINVAL); /* 2^64 - 1 */
    assert_int_equal(stk_loader_set(l, STK_LOADER_DROP_LAST, 2), STK_EINVAL);
    /* the wrong form */
    assert_int_equal(stk_loader_set(l, STK_LOADER_FIELDS, 1), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "fields is a string parameter (stk_loader_set_string)"));
    assert_int_equal(stk_loader_set_string(l, STK_LOADER_BATCH_SIZE, "8"), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "batch_size is a number parameter"));
    assert_int_equal(stk_loader_set_pointer(l, STK_LOADER_DEVICE, "cuda"), STK_EINVAL);
    const char *s;
    assert_int_equal(stk_loader_get_string(l, STK_LOADER_SEED, &s), STK_EINVAL);
    int64_t v;
    assert_int_equal(stk_loader_get(l, STK_LOADER_SAMPLING, &v), STK_EINVAL);
    /* unknown keys */
    assert_int_equal(stk_loader_set(l, (stk_loader_param)0, 1), STK_EINVAL);
    assert_int_equal(stk_loader_set(l, (stk_loader_param)9999, 1), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "unknown loader parameter 9999"));
    stk_param_bounds b;
    assert_int_equal(stk_loader_param_bounds((stk_loader_param)9999, &b), STK_EINVAL);
    assert_int_equal(stk_loader_param_bounds(STK_LOADER_VIEWS, &b), 0);
    assert_int_equal(b.min, 1);
    assert_int_equal(b.max, 256);
    assert_int_equal(b.def, 1);
    assert_int_equal(b.type, STK_PARAM_UINT);
    assert_int_equal(stk_loader_param_bounds(STK_LOADER_SEED, &b), 0);
    assert_true((uint64_t)b.max == UINT64_MAX);

    /* A value another option contradicts fails as create does, and the
     * loader keeps its configuration: same batches as an untouched one. */
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 16), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_MAX_BATCHES, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_PREFETCH, 10), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "max_batches 3 must be at least prefetch + 1 = 11"));
    assert_int_equal(stk_loader_set(l, STK_LOADER_MEMORY_LIMIT, 100), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "holds fewer than two batches"));
    assert_int_equal(stk_loader_set_string(l, STK_LOADER_FIELDS, "image,nosuchfield"),
                     STK_EINVAL);
    assert_int_equal(stk_loader_get(l, STK_LOADER_PREFETCH, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(stk_loader_get(l, STK_LOADER_MEMORY_LIMIT, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(stk_loader_get_string(l, STK_LOADER_FIELDS, &s), 0);
    assert_null(s);
    stk_loader *ref = make(f->ds, &(stk_loader_options){.batch_size = 16, .max_batches = 3});
    tu_run a, b2;
    drain_epochs(l, 1, &a);
    drain_epochs(ref, 1, &b2);
    assert_same_run(&a, &b2);
    tu_run_free(&a);
    tu_run_free(&b2);
    stk_loader_destroy(ref);
    stk_loader_destroy(l);
}

/* A value for every number parameter, not its default, that a loader over
 * the fixture accepts on its own. */
static int64_t test_value(stk_loader_param p)
{
    switch (p) {
    case STK_LOADER_BATCH_SIZE: return 7;
    case STK_LOADER_THREADS: return 3;
    case STK_LOADER_PREFETCH: return 2;
    case STK_LOADER_MAX_BATCHES: return 9;
    case STK_LOADER_SEED: return (int64_t)UINT64_C(0xfedcba9876543210); /* > INT64_MAX */
    case STK_LOADER_SHUFFLE: return 0;
    case STK_LOADER_DROP_LAST: return 1;
    case STK_LOADER_RANK: return 1;
    case STK_LOADER_WORLD_SIZE: return 2;
    case STK_LOADER_ON_ERROR: return STK_ON_ERROR_REPLACE;
    case STK_LOADER_SHUFFLE_MODE: return STK_SHUFFLE_BLOCK;
    case STK_LOADER_BLOCK: return 1;
    case STK_LOADER_BLOCK_SIZE: return 9;
    case STK_LOADER_SHUFFLE_WINDOW: return 3;
    case STK_LOADER_AUGMENT_SEED: return 12345;
    case STK_LOADER_VIEWS: return 2;
    case STK_LOADER_EAGER_START: return 0; /* (1 starts it: tested above) */
    case STK_LOADER_MEMORY_LIMIT: return INT64_C(1) << 30;
    case STK_LOADER_PLACEMENT: return STK_PLACE_CPU;
    case STK_LOADER_DECODER: return STK_DECODER_CPU;
    case STK_LOADER_DECODE_BUDGET: return 123456;
    default: fail_msg("parameter %d has no test value: add one", (int)p);
    }
    return 0;
}

static void test_every_param_round_trips(void **state)
{
    fixture *f = *state;
    int n = 0;
    stk_loader_param_info info;
    for (int i = 0; stk_loader_param_describe(i, &info) == 0; i++, n++) {
        stk_loader *l = make(f->ds, NULL);
        stk_param_bounds b;
        assert_int_equal(stk_loader_param_bounds(info.key, &b), 0);
        assert_int_equal(b.type, info.type);
        assert_int_equal(b.min, info.min);
        assert_int_equal(b.max, info.max);
        assert_int_equal(b.def, info.def);
        assert_non_null(info.name);
        assert_non_null(info.doc);
        assert_true(strlen(info.doc) > 10 && !strchr(info.doc, '\n'));
        assert_true((info.type == STK_PARAM_ENUM) == (info.values != NULL));
        if (info.type == STK_PARAM_STRING) {
            const char *s = "x";
            assert_int_equal(stk_loader_get_string(l, info.key, &s), 0);
            assert_null(s);
            const char *val = info.key == STK_LOADER_FIELDS ? "image,label,index" : "cpu";
            char copy[32];
            snprintf(copy, sizeof copy, "%s", val);
            if (stk_loader_set_string(l, info.key, copy) < 0)
                fail_msg("%s: %s", info.name, stk_errmsg());
            copy[0] = '#'; /* the loader keeps its own copy */
            assert_int_equal(stk_loader_get_string(l, info.key, &s), 0);
            assert_string_equal(s, val);
            assert_int_equal(stk_loader_set_string(l, info.key, NULL), 0);
            assert_int_equal(stk_loader_get_string(l, info.key, &s), 0);
            assert_null(s);
        } else if (info.type == STK_PARAM_POINTER) {
            const void *p = &p;
            assert_int_equal(stk_loader_get_pointer(l, info.key, &p), 0);
            assert_null(p);
            uint64_t idx[5] = {3, 1, 4, 1, 5};
            stk_sampling sp = {.indices = idx, .num_indices = 5, .num_samples = 9};
            stk_device_options dev = {.device = "cpu", .placement = STK_PLACE_CPU};
            const void *val = info.key == STK_LOADER_SAMPLING ? (const void *)&sp : &dev;
            if (stk_loader_set_pointer(l, info.key, val) < 0)
                fail_msg("%s: %s", info.name, stk_errmsg());
            assert_int_equal(stk_loader_get_pointer(l, info.key, &p), 0);
            assert_non_null(p);
            assert_ptr_not_equal(p, val); /* a copy */
            if (info.key == STK_LOADER_SAMPLING) {
                const stk_sampling *got = p;
                assert_int_equal(got->num_indices, 5);
                assert_int_equal(got->num_samples, 9);
                assert_ptr_not_equal(got->indices, idx);
                assert_memory_equal(got->indices, idx, sizeof idx);
                assert_int_equal(stk_loader_length(l), (9 + 255) / 256);
            } else {
                const stk_device_options *got = p;
                assert_string_equal(got->device, "cpu");
                assert_int_equal(got->placement, STK_PLACE_CPU);
            }
            assert_int_equal(stk_loader_set_pointer(l, info.key, NULL), 0);
            assert_int_equal(stk_loader_get_pointer(l, info.key, &p), 0);
            assert_null(p);
        } else {
            int64_t v;
            assert_int_equal(stk_loader_get(l, info.key, &v), 0);
            assert_int_equal(v, info.def); /* a fresh loader holds the defaults */
            int64_t want = test_value(info.key);
            /* What each needs set before it (describe's order has it so) */
            if (info.key == STK_LOADER_DROP_LAST) /* 157 samples: not one batch of 256 */
                assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 8), 0);
            if (info.key == STK_LOADER_BLOCK_SIZE || info.key == STK_LOADER_SHUFFLE_WINDOW)
                assert_int_equal(stk_loader_set(l, STK_LOADER_BLOCK, 1), 0);
            if (info.key == STK_LOADER_RANK)
                assert_int_equal(stk_loader_set(l, STK_LOADER_WORLD_SIZE, 2), 0);
            assert_true(want != info.def || info.key == STK_LOADER_EAGER_START ||
                        info.key == STK_LOADER_DECODER);
            if (stk_loader_set(l, info.key, want) < 0)
                fail_msg("%s = %lld: %s", info.name, (long long)want, stk_errmsg());
            assert_int_equal(stk_loader_get(l, info.key, &v), 0);
            assert_int_equal(v, want);
        }
        stk_loader_destroy(l);
    }
    assert_int_equal(n, 25);
    assert_int_equal(stk_loader_param_describe(n, &info), STK_ENOENT);
    assert_int_equal(stk_loader_param_describe(-1, &info), STK_ENOENT);

    /* The flag parameters and the struct agree: aug_seed sets its flag,
     * a v1 struct's values read back. */
    stk_loader *l = make(f->ds, &(stk_loader_options){.batch_size = 0,
                                                       .shuffle = STK_SHUFFLE_BLOCK,
                                                       .flags = STK_LOADER_AUG_SEED,
                                                       .aug_seed = 99, .views = 3});
    int64_t v;
    assert_int_equal(stk_loader_get(l, STK_LOADER_BATCH_SIZE, &v), 0);
    assert_int_equal(v, 256);
    assert_int_equal(stk_loader_get(l, STK_LOADER_SHUFFLE, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(stk_loader_get(l, STK_LOADER_BLOCK, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(stk_loader_get(l, STK_LOADER_SHUFFLE_MODE, &v), 0);
    assert_int_equal(v, STK_SHUFFLE_BLOCK);
    assert_int_equal(stk_loader_get(l, STK_LOADER_AUGMENT_SEED, &v), 0);
    assert_int_equal(v, 99);
    assert_int_equal(stk_loader_get(l, STK_LOADER_VIEWS, &v), 0);
    assert_int_equal(v, 3);
    stk_loader_destroy(l);
}

/* The same values through the struct and through set: the same bytes. */
static void test_set_equals_struct(void **state)
{
    fixture *f = *state;
    double weights[N];
    for (int i = 0; i < N; i++)
        weights[i] = 1 + i % 4;
    stk_sampling sp = {.weights = weights, .num_weights = N, .num_samples = 120};
    stk_loader_options o = {.batch_size = 16, .threads = 3, .prefetch = 2, .seed = 41,
                            .drop_last = 1, .views = 2, .flags = STK_LOADER_AUG_SEED,
                            .aug_seed = 5, .sampling = &sp};
    stk_loader *ref = make(f->ds, &o);

    stk_loader *l = make(f->ds, NULL);
    double mine[N];
    memcpy(mine, weights, sizeof mine);
    stk_sampling msp = {.weights = mine, .num_weights = N, .num_samples = 120};
    assert_int_equal(stk_loader_set(l, STK_LOADER_VIEWS, 2), 0);
    assert_int_equal(stk_loader_set_pointer(l, STK_LOADER_SAMPLING, &msp), 0);
    for (int i = 0; i < N; i++) /* the loader copied them */
        mine[i] = 0;
    msp.num_samples = 1;
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 16), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_THREADS, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_PREFETCH, 2), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_SEED, 41), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_DROP_LAST, 1), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_AUGMENT_SEED, 5), 0);

    tu_run a, b;
    drain_epochs(ref, 2, &a);
    drain_epochs(l, 2, &b);
    assert_same_run(&a, &b);
    assert_int_equal(a.rows, 2 * (120 / 16) * 16 * 2);
    /* The resume states agree (the spec hash covers the sampling). */
    stk_loader_state sa, sb;
    stk_loader_state_get(ref, &sa);
    stk_loader_state_get(l, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa);
    tu_run_free(&a);
    tu_run_free(&b);
    stk_loader_destroy(ref);
    stk_loader_destroy(l);

    /* Block shuffle, ranks, fields and on_error through set. */
    o = (stk_loader_options){.batch_size = 8, .threads = 2, .seed = 3, .rank = 1,
                             .world_size = 3, .shuffle = STK_SHUFFLE_BLOCK, .block_size = 10,
                             .shuffle_window = 3, .on_error = STK_ON_ERROR_SKIP,
                             .fields = "image,label,index"};
    ref = make(f->ds, &o);
    l = make(f->ds, NULL);
    assert_int_equal(stk_loader_set(l, STK_LOADER_BATCH_SIZE, 8), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_THREADS, 2), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_SEED, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_WORLD_SIZE, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_RANK, 1), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_BLOCK, 1), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_BLOCK_SIZE, 10), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_SHUFFLE_WINDOW, 3), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_ON_ERROR, STK_ON_ERROR_SKIP), 0);
    assert_int_equal(stk_loader_set_string(l, STK_LOADER_FIELDS, "image,label,index"), 0);
    assert_int_equal(stk_loader_field_count(l), 3);
    drain_epochs(ref, 2, &a);
    drain_epochs(l, 2, &b);
    assert_same_run(&a, &b);
    tu_run_free(&a);
    tu_run_free(&b);
    stk_loader_destroy(ref);
    stk_loader_destroy(l);
}

/* Statistics, once the workers are done (the epoch and what they prefetch
 * of the next), so the counts are stable. */
static void settle(stk_loader *l, stk_loader_stats *st)
{
    stk_loader_stats prev;
    stk_loader_stats_get(l, &prev);
    for (int i = 0; i < 200; i++) {
        usleep(10000);
        stk_loader_stats_get(l, st);
        if (st->samples == prev.samples && i > 2)
            return;
        prev = *st;
    }
}

static void test_stats_by_key(void **state)
{
    fixture *f = *state;
    stk_loader *l = make(f->ds, &(stk_loader_options){.batch_size = 10, .threads = 2,
                                                       .prefetch = 2, .memory_limit = 1 << 24});
    tu_run r;
    drain_epochs(l, 1, &r);
    tu_run_free(&r);
    stk_loader_stats st;
    settle(l, &st);
    double v;
    struct {
        stk_loader_stat key;
        double want;
    } counts[] = {
        {STK_LOADER_STAT_SAMPLES, (double)st.samples},
        {STK_LOADER_STAT_BATCHES, (double)st.batches},
        {STK_LOADER_STAT_SKIPPED, (double)st.skipped},
        {STK_LOADER_STAT_BATCHES_ALLOCATED, st.batches_allocated},
        {STK_LOADER_STAT_POOL_BYTES, (double)st.pool_bytes},
        {STK_LOADER_STAT_POOL_EXHAUSTED, (double)st.pool_exhausted},
        {STK_LOADER_STAT_MEMORY_BYTES, (double)st.memory_bytes},
        {STK_LOADER_STAT_THREADS, st.threads},
        {STK_LOADER_STAT_PREFETCH, st.prefetch},
        {STK_LOADER_STAT_DECISIONS, (double)st.decisions},
        {STK_LOADER_STAT_MAX_BATCHES, st.max_batches},
        {STK_LOADER_STAT_GPU_DECODE_CPU_ROWS, st.gpu_decode_cpu_rows},
        {STK_LOADER_STAT_GPU_HEAD_ROWS, (double)st.gpu_head_rows},
    };
    assert_int_equal(st.batches, (N + 9) / 10);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        assert_int_equal(stk_loader_stat_get(l, counts[i].key, &v), 0);
        if (v != counts[i].want)
            fail_msg("stat %d: %g, the struct says %g", (int)counts[i].key, v, counts[i].want);
    }
    /* Times only grow: between two struct readings. */
    stk_loader_stat keys[] = {STK_LOADER_STAT_READ_S,    STK_LOADER_STAT_DECODE_S,
                              STK_LOADER_STAT_AUGMENT_S, STK_LOADER_STAT_COLLATE_S,
                              STK_LOADER_STAT_IDLE_S,    STK_LOADER_STAT_WAIT_S,
                              STK_LOADER_STAT_STEP_S};
    double vals[7];
    for (int i = 0; i < 7; i++)
        assert_int_equal(stk_loader_stat_get(l, keys[i], &vals[i]), 0);
    stk_loader_stats after;
    stk_loader_stats_get(l, &after);
    double lo[7] = {st.read_s, st.decode_s, st.augment_s, st.collate_s, st.idle_s, st.wait_s,
                    st.step_s};
    double hi[7] = {after.read_s, after.decode_s, after.augment_s, after.collate_s,
                    after.idle_s, after.wait_s, after.step_s};
    for (int i = 0; i < 7; i++)
        if (!(vals[i] >= lo[i] && vals[i] <= hi[i]))
            fail_msg("stat %d: %g not within [%g, %g]", (int)keys[i], vals[i], lo[i], hi[i]);
    assert_true(vals[0] > 0);
    /* The new statistic: the decode budget in effect (memory_limit's share). */
    assert_int_equal(stk_loader_stat_get(l, STK_LOADER_STAT_DECODE_BUDGET, &v), 0);
    assert_true(v > 0 && v < (double)(1 << 24) / 2);
    assert_int_equal(stk_loader_stat_get(l, (stk_loader_stat)0, &v), STK_EINVAL);
    assert_int_equal(stk_loader_stat_get(l, (stk_loader_stat)999, &v), STK_EINVAL);

    /* describe: every key once, names as the struct's fields */
    stk_loader_stat_info info;
    int n = 0;
    for (; stk_loader_stat_describe(n, &info) == 0; n++) {
        assert_int_equal(info.key, n + 1);
        assert_non_null(info.doc);
        assert_int_equal(stk_loader_stat_get(l, info.key, &v), 0);
        assert_int_equal(info.seconds, strstr(info.name, "_s") &&
                                           info.name[strlen(info.name) - 1] == 's' &&
                                           info.name[strlen(info.name) - 2] == '_');
    }
    assert_int_equal(n, 21);
    assert_int_equal(stk_loader_stat_describe(0, &info), 0);
    assert_string_equal(info.name, "samples");
    assert_int_equal(stk_loader_stat_describe(20, &info), 0);
    assert_string_equal(info.name, "decode_budget");

    /* The sized struct: the whole, an older caller's head of it, a newer
     * caller's larger one. */
    stk_loader_statistics x;
    memset(&x, 0, sizeof x);
    x.size = sizeof x;
    assert_int_equal(stk_loader_stats_sized(l, &x, sizeof x), 0);
    assert_int_equal(x.size, sizeof x);
    assert_int_equal(x.samples, st.samples);
    assert_int_equal(x.batches, st.batches);
    assert_int_equal(x.max_batches, st.max_batches);
    assert_int_equal(x.pool_bytes, st.pool_bytes);
    assert_true(x.decode_budget > 0);
    struct old_statistics { /* a caller built when the struct had 3 fields */
        uint64_t size, samples, batches;
    };
    unsigned char buf[sizeof x + 64];
    memset(buf, 0xa5, sizeof buf);
    struct old_statistics old = {.size = sizeof old};
    memcpy(buf, &old, sizeof old);
    assert_int_equal(stk_loader_stats_sized(l, buf, sizeof old), 0);
    memcpy(&old, buf, sizeof old);
    assert_int_equal(old.size, sizeof old);
    assert_int_equal(old.samples, st.samples);
    assert_int_equal(old.batches, st.batches);
    for (size_t i = sizeof old; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xa5); /* nothing written past its size */
    uint64_t big = sizeof buf; /* a newer caller's: filled up to ours */
    memcpy(buf, &big, sizeof big);
    assert_int_equal(stk_loader_stats_sized(l, buf, sizeof buf), 0);
    memcpy(&big, buf, sizeof big);
    assert_int_equal(big, sizeof x);
    for (size_t i = sizeof x; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xa5);
    uint64_t wrong = 16;
    memcpy(buf, &wrong, sizeof wrong);
    assert_int_equal(stk_loader_stats_sized(l, buf, 24), STK_EINVAL);
    assert_int_equal(stk_loader_stats_sized(l, buf, 4), STK_EINVAL);
    stk_loader_destroy(l);
}

/* A folder of JPEGs: 12 small ones (16x16) and one large one (1200x1000). */
static const char *write_jpegs(void)
{
    static char root[512];
    snprintf(root, sizeof root, "%s", tu_path("budget"));
    char dir[600];
    mkdir(root, 0755);
    snprintf(dir, sizeof dir, "%s/c", root);
    mkdir(dir, 0755);
    for (int i = 0; i < 13; i++) {
        int h = i == 5 ? 1200 : 16, w = i == 5 ? 1000 : 16;
        uint8_t *px = tu_smooth_image(h, w, i);
        size_t size;
        uint8_t *jpg = tu_encode_jpeg(px, h, w, 90, &size);
        char path[700];
        snprintf(path, sizeof path, "%s/%02d.jpg", dir, i);
        tu_write_file(path, jpg, size);
        free(px);
        free(jpg);
    }
    return root;
}

static void test_decode_budget_bounds_a_decode(void **state)
{
    (void)state;
    const char *root = write_jpegs();
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(root, NULL, &ds), 0);
    assert_int_equal(ds->count, 13);
    const char *spec = "resize 16 | center_crop 16 | to u8";

    /* Without a budget every image decodes. */
    stk_loader *l = NULL;
    stk_loader_options o = {.batch_size = 13, .threads = 2, .no_shuffle = 1};
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    stk_batch b;
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.size, 13);
    uint8_t small_row[16 * 16 * 3];
    memcpy(small_row, (uint8_t *)b.data + 3 * b.sample_bytes, sizeof small_row); /* 03.jpg */
    stk_loader_release(l, &b);
    double v;
    assert_int_equal(stk_loader_stat_get(l, STK_LOADER_STAT_DECODE_BUDGET, &v), 0);
    assert_true(v == 0);
    stk_loader_destroy(l);

    /* 24 KiB: the 16x16 images fit, the 1200x1000 one (150x125 at 1/8,
     * 56 KB of output, plus libjpeg's own) does not. Skipped, and named. */
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_DECODE_BUDGET, 24 * 1024), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_ON_ERROR, STK_ON_ERROR_SKIP), 0);
    int64_t got;
    assert_int_equal(stk_loader_get(l, STK_LOADER_DECODE_BUDGET, &got), 0);
    assert_int_equal(got, 24 * 1024);
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.size, 12);
    assert_int_equal(b.skipped, 1);
    uint64_t index;
    const char *reason;
    assert_int_equal(stk_loader_skipped(l, &b, 0, &index, &reason), 0);
    assert_int_equal(index, 5);
    if (!strstr(reason, "05.jpg") || !strstr(reason, "24576"))
        fail_msg("reason: %s", reason);
    assert_memory_equal((uint8_t *)b.data + 3 * b.sample_bytes, small_row, sizeof small_row);
    stk_loader_release(l, &b);
    assert_int_equal(stk_loader_stat_get(l, STK_LOADER_STAT_DECODE_BUDGET, &v), 0);
    assert_true(v == 24 * 1024);
    stk_loader_destroy(l);

    /* Under raise: the error, naming the file. */
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_DECODE_BUDGET, 24 * 1024), 0);
    assert_int_equal(stk_loader_next(l, &b), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "05.jpg"));
    stk_loader_destroy(l);

    /* It overrides memory_limit's share, upwards too: a share under the
     * big image's need refuses it, the parameter lets it through. */
    o.memory_limit = 120000;
    o.on_error = STK_ON_ERROR_SKIP;
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    assert_int_equal(stk_loader_stat_get(l, STK_LOADER_STAT_DECODE_BUDGET, &v), 0);
    assert_true(v > 24 * 1024 && v < 50000);
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.size, 12);
    stk_loader_release(l, &b);
    stk_loader_destroy(l);
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    assert_int_equal(stk_loader_set(l, STK_LOADER_DECODE_BUDGET, 64 << 20), 0);
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_int_equal(b.size, 13);
    stk_loader_release(l, &b);
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_set_before_start_refused_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bounds_and_form_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_param_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_equals_struct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_by_key, setup, teardown),
        cmocka_unit_test(test_decode_budget_bounds_a_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
