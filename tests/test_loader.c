/*
 * test_loader.c — the executor: in-order, deterministic delivery for any
 * thread count; exactly-once coverage; mid-epoch resume; lent batches never
 * overwritten; pool exhaustion; destroy mid-epoch with full queues; error
 * and skip policies; interrupt. Runs under ASan/UBSan and TSan.
 *
 * The reference for a row's content is the plan run directly on the dataset
 * sample with the documented stream (seed, epoch, index) — so these tests
 * check the engine's wiring and scheduling, while test_ops.c checks the plan
 * against an independent reference.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "format/dataset.h"
#include "ops/plan.h"
#include "pipeline/sampler.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define H 6
#define W 5
#define C 3
#define SPEC "pad 2 | random_crop 6,5 | flip 0.5 | normalize 0.5,0.4,0.3 0.2,0.25,0.3 | to f32 chw"

static uint8_t *make_pixels(uint64_t n)
{
    uint8_t *p = malloc(n * H * W * C);
    tu_fill_random(p, n * H * W * C, n);
    return p;
}

static int64_t *make_labels(uint64_t n)
{
    int64_t *l = malloc(n * sizeof *l);
    for (uint64_t i = 0; i < n; i++)
        l[i] = (int64_t)(i * 7 % 10);
    return l;
}

typedef struct fixture {
    uint64_t n;
    uint8_t *pixels;
    int64_t *labels;
    stk_dataset *ds;
} fixture;

static void fixture_open(fixture *f, uint64_t n)
{
    f->n = n;
    f->pixels = make_pixels(n);
    f->labels = make_labels(n);
    assert_int_equal(stk_dataset_from_memory(f->pixels, f->labels, n, H, W, C, 0, &f->ds), 0);
}

static void fixture_close(fixture *f)
{
    stk_dataset_close(f->ds);
    free(f->pixels);
    free(f->labels);
}

/* Everything one epoch delivered, concatenated. */
typedef struct run {
    uint8_t *data;
    int64_t *labels;
    uint64_t *indices;
    uint64_t rows, batches;
    uint64_t skipped; /* sum of batch.skipped */
    uint32_t sizes[4096];
} run;

static void run_free(run *r)
{
    free(r->data);
    free(r->labels);
    free(r->indices);
    memset(r, 0, sizeof *r);
}

/* Drain up to max_batches of the current epoch (all if 0). Returns next()'s
 * last result. */
static int drain(stk_loader *l, run *r, uint64_t max_batches)
{
    int rc;
    stk_batch b;
    while ((max_batches == 0 || r->batches < max_batches) && (rc = stk_loader_next(l, &b)) == 1) {
        size_t bytes = (size_t)b.size * b.sample_bytes;
        r->data = realloc(r->data, (size_t)r->rows * b.sample_bytes + bytes);
        r->labels = realloc(r->labels, (r->rows + b.size) * sizeof *r->labels);
        r->indices = realloc(r->indices, (r->rows + b.size) * sizeof *r->indices);
        memcpy(r->data + r->rows * b.sample_bytes, b.data, bytes);
        memcpy(r->labels + r->rows, b.labels, b.size * sizeof *r->labels);
        memcpy(r->indices + r->rows, b.indices, b.size * sizeof *r->indices);
        r->sizes[r->batches++] = b.size;
        r->skipped += b.skipped;
        r->rows += b.size;
        assert_int_equal(stk_loader_release(l, &b), 0);
    }
    return max_batches && r->batches == max_batches ? 1 : rc;
}

static stk_loader *make_loader(stk_dataset *ds, const char *spec, stk_loader_options o)
{
    stk_loader *l = NULL;
    int rc = stk_loader_create(ds, spec, &o, &l);
    if (rc < 0)
        print_error("create: %s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    return l;
}

static void test_same_output_for_any_thread_count(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 1003);
    run ref[2] = {{0}};
    const uint32_t threads[] = {1, 2, 7};
    for (int t = 0; t < 3; t++) {
        stk_loader *l = make_loader(f.ds, SPEC,
                                    (stk_loader_options){.batch_size = 32, .threads = threads[t],
                                                         .prefetch = 3, .seed = 1234});
        assert_int_equal(stk_loader_length(l), 32); /* ceil(1003 / 32) */
        for (int e = 0; e < 2; e++) {
            run r = {0};
            assert_int_equal(stk_loader_set_epoch(l, e), 0);
            assert_int_equal(drain(l, &r, 0), 0);
            assert_int_equal(r.rows, 1003);
            assert_int_equal(r.sizes[31], 1003 - 31 * 32);
            if (t == 0) {
                ref[e] = r;
            } else {
                assert_memory_equal(r.data, ref[e].data, r.rows * 6 * 5 * 3 * 4);
                assert_memory_equal(r.labels, ref[e].labels, r.rows * 8);
                assert_memory_equal(r.indices, ref[e].indices, r.rows * 8);
                run_free(&r);
            }
        }
        stk_loader_destroy(l);
    }
    /* The two epochs differ; each is a permutation with the right labels;
     * each row equals the plan run on its sample with its stream. */
    assert_true(memcmp(ref[0].indices, ref[1].indices, 1003 * 8) != 0);
    stk_plan *plan;
    assert_int_equal(stk_plan_compile(SPEC, H, W, C, &plan), 0);
    float expect[C * H * W];
    for (int e = 0; e < 2; e++) {
        uint8_t *seen = calloc(1003, 1);
        for (uint64_t i = 0; i < 1003; i++) {
            uint64_t idx = ref[e].indices[i];
            assert_true(idx < 1003);
            assert_int_equal(seen[idx], 0);
            seen[idx] = 1;
            assert_int_equal(ref[e].labels[i], f.labels[idx]);
            stk_image_view v = {f.pixels + idx * H * W * C, H, W, C, W * C, C, 1};
            stk_rng rng;
            stk_rng_init(&rng, 1234, STK_RNG_DOMAIN_SAMPLE, (uint64_t)e, idx);
            assert_int_equal(stk_plan_run(plan, &v, &rng, expect), 0);
            assert_memory_equal(ref[e].data + i * sizeof expect, expect, sizeof expect);
        }
        free(seen);
        run_free(&ref[e]);
    }
    stk_plan_free(plan);

    /* Another seed gives other batches. */
    stk_loader *l = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 32, .seed = 1235});
    run r = {0};
    drain(l, &r, 0);
    stk_loader *l2 = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 32, .seed = 1234});
    run r2 = {0};
    drain(l2, &r2, 0);
    assert_true(memcmp(r.data, r2.data, r.rows * 6 * 5 * 3 * 4) != 0);
    run_free(&r);
    run_free(&r2);
    stk_loader_destroy(l);
    stk_loader_destroy(l2);
    fixture_close(&f);
}

static void test_exactly_once_across_world_sizes(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 103);
    for (uint32_t w = 1; w <= 8; w++) {
        unsigned count[103] = {0};
        uint64_t per = (103 + w - 1) / w;
        for (uint32_t r = 0; r < w; r++) {
            stk_loader *l = make_loader(f.ds, "to u8",
                                        (stk_loader_options){.batch_size = 5, .threads = 2,
                                                             .seed = 9, .rank = r, .world_size = w});
            assert_int_equal(stk_loader_length(l), (per + 4) / 5);
            run out = {0};
            assert_int_equal(drain(l, &out, 0), 0);
            assert_int_equal(out.rows, per);
            for (uint64_t i = 0; i < out.rows; i++)
                count[out.indices[i]]++;
            run_free(&out);
            stk_loader_destroy(l);
        }
        uint64_t twice = 0;
        for (int i = 0; i < 103; i++) {
            assert_true(count[i] == 1 || count[i] == 2);
            twice += count[i] - 1;
        }
        assert_int_equal(twice, per * w - 103);
    }
    fixture_close(&f);
}

static void test_drop_last(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 103);
    stk_loader *l = make_loader(f.ds, "to u8",
                                (stk_loader_options){.batch_size = 10, .drop_last = 1, .seed = 3});
    assert_int_equal(stk_loader_length(l), 10);
    run out = {0};
    assert_int_equal(drain(l, &out, 0), 0);
    assert_int_equal(out.rows, 100);
    for (uint64_t b = 0; b < out.batches; b++)
        assert_int_equal(out.sizes[b], 10);
    run_free(&out);
    stk_loader_destroy(l);
    fixture_close(&f);
}

static void test_resume_mid_epoch(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 500);
    stk_loader_options o = {.batch_size = 16, .threads = 2, .prefetch = 4, .seed = 77};
    /* Original: 2 epochs straight through, remembering the state at several
     * points. */
    const uint64_t stops[] = {0, 1, 13, 31, 32};
    for (size_t k = 0; k < 5; k++) {
        stk_loader *a = make_loader(f.ds, SPEC, o);
        assert_int_equal(stk_loader_set_epoch(a, 1), 0);
        run head = {0};
        if (stops[k])
            assert_int_equal(drain(a, &head, stops[k]), 1);
        stk_loader_state st;
        stk_loader_state_get(a, &st);
        assert_int_equal(st.epoch, 1);
        assert_int_equal(st.position, stops[k]);
        run rest = {0};
        assert_int_equal(drain(a, &rest, 0), 0);
        run next_epoch = {0};
        assert_int_equal(drain(a, &next_epoch, 0), 0); /* epoch 2 follows */

        /* Resumed: a fresh loader with other thread/prefetch settings. */
        stk_loader_options o2 = o;
        o2.threads = 3;
        o2.prefetch = 2;
        stk_loader *b = make_loader(f.ds, SPEC, o2);
        assert_int_equal(stk_loader_state_set(b, &st), 0);
        run rest2 = {0}, next2 = {0};
        assert_int_equal(drain(b, &rest2, 0), 0);
        assert_int_equal(drain(b, &next2, 0), 0);
        assert_int_equal(rest2.rows, rest.rows);
        assert_int_equal(rest.rows + head.rows, 500);
        if (rest.rows) {
            assert_memory_equal(rest2.data, rest.data, rest.rows * 360);
            assert_memory_equal(rest2.indices, rest.indices, rest.rows * 8);
        }
        assert_int_equal(next2.rows, 500);
        assert_memory_equal(next2.data, next_epoch.data, 500 * 360);
        run_free(&head);
        run_free(&rest);
        run_free(&rest2);
        run_free(&next_epoch);
        run_free(&next2);
        stk_loader_destroy(a);
        stk_loader_destroy(b);
    }
    fixture_close(&f);
}

static void test_state_mismatch_rejected(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 50);
    stk_loader *a = make_loader(f.ds, "to u8", (stk_loader_options){.batch_size = 8, .seed = 1});
    stk_loader *b = make_loader(f.ds, "to u8", (stk_loader_options){.batch_size = 9, .seed = 1});
    stk_loader_state st;
    stk_loader_state_get(a, &st);
    assert_int_equal(stk_loader_state_set(b, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "batch 8"));
    st.batch_size = 9;
    st.position = 100;
    assert_int_equal(stk_loader_state_set(b, &st), STK_EINVAL);
    /* Same everything but the spec: refused. */
    stk_loader *c = make_loader(f.ds, "flip 1", (stk_loader_options){.batch_size = 8, .seed = 1});
    stk_loader_state_get(a, &st);
    assert_int_equal(stk_loader_state_set(c, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "spec"));
    stk_loader_destroy(c);
    stk_loader_destroy(a);
    stk_loader_destroy(b);
    fixture_close(&f);
}

static void test_set_epoch_semantics(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 64);
    stk_loader_options o = {.batch_size = 8, .seed = 5};
    stk_loader *l = make_loader(f.ds, SPEC, o);
    /* Half of epoch 0, then jump to epoch 3: equals a fresh loader's
     * epoch 3. */
    run half = {0}, e3 = {0}, ref = {0};
    drain(l, &half, 4);
    assert_int_equal(stk_loader_set_epoch(l, 3), 0);
    assert_int_equal(drain(l, &e3, 0), 0);
    stk_loader *fresh = make_loader(f.ds, SPEC, o);
    stk_loader_set_epoch(fresh, 3);
    assert_int_equal(drain(fresh, &ref, 0), 0);
    assert_int_equal(e3.rows, 64);
    assert_memory_equal(e3.data, ref.data, 64 * 360);
    /* After the end of epoch 3 was reported the loader is at epoch 4. */
    stk_loader_state st;
    stk_loader_state_get(l, &st);
    assert_int_equal(st.epoch, 4);
    assert_int_equal(st.position, 0);
    run_free(&half);
    run_free(&e3);
    run_free(&ref);
    stk_loader_destroy(l);
    stk_loader_destroy(fresh);
    fixture_close(&f);
}

static void test_lent_batches_never_overwritten(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 200);
    stk_loader *l = make_loader(f.ds, SPEC,
                                (stk_loader_options){.batch_size = 10, .prefetch = 2,
                                                     .max_batches = 6, .seed = 2});
    stk_batch held[6];
    uint8_t *copies[6];
    int n = 0, rc;
    /* Hold batches until the pool (6 buffers) is exhausted. */
    while ((rc = stk_loader_next(l, &held[n])) == 1) {
        copies[n] = malloc(10 * 360);
        memcpy(copies[n], held[n].data, 10 * 360);
        n++;
        assert_true(n <= 6);
    }
    assert_int_equal(rc, STK_EEXHAUSTED);
    assert_int_equal(n, 6);
    assert_non_null(strstr(stk_errmsg(), "lent"));
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    assert_int_equal(st.batches_allocated, 6);
    assert_true(st.pool_exhausted >= 1);
    /* Release one; the rest of the epoch still flows through one buffer
     * while five stay lent — and the lent ones never change. */
    assert_int_equal(stk_loader_release(l, &held[5]), 0);
    assert_int_equal(stk_loader_release(l, &held[5]), STK_ESTATE); /* double release */
    stk_batch b;
    int more = 0;
    while ((rc = stk_loader_next(l, &b)) == 1) {
        more++;
        assert_int_equal(stk_loader_release(l, &b), 0);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(more, 20 - 6);
    for (int i = 0; i < 5; i++) {
        assert_memory_equal(held[i].data, copies[i], 10 * 360);
        assert_int_equal(stk_loader_release(l, &held[i]), 0);
    }
    for (int i = 0; i < 6; i++)
        free(copies[i]);
    stk_loader_destroy(l);
    fixture_close(&f);
}

/* A dataset whose reads are slow (to catch workers mid-sample) or fail on
 * chosen indices (to test the error policies). */
typedef struct test_ds {
    stk_dataset *inner;
    useconds_t delay_us;
    uint64_t bad_every; /* index % bad_every == bad_every - 1 fails; 0 = none */
} test_ds;

static int test_ds_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const test_ds *t = ds->impl;
    if (t->delay_us)
        usleep(t->delay_us);
    if (t->bad_every && index % t->bad_every == t->bad_every - 1)
        return stk_fail(STK_EDATA, "%s: record %llu: corrupt on purpose", ds->uri,
                        (unsigned long long)index);
    return t->inner->vt->read(t->inner, index, out, scratch);
}

static void test_ds_close(stk_dataset *ds) { free(ds->impl); }

static const stk_dataset_vtable test_ds_vt = {.format = "test", .read = test_ds_read, .close = test_ds_close};

static stk_dataset *wrap(stk_dataset *inner, useconds_t delay, uint64_t bad_every)
{
    stk_dataset *ds = stk_dataset_alloc(&test_ds_vt, "test:wrapped");
    assert_non_null(ds);
    test_ds *t = calloc(1, sizeof *t);
    t->inner = inner;
    t->delay_us = delay;
    t->bad_every = bad_every;
    ds->impl = t;
    ds->count = inner->count;
    ds->height = inner->height;
    ds->width = inner->width;
    ds->channels = inner->channels;
    return ds;
}

static void test_destroy_mid_epoch_with_full_queues(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 5000);
    /* Fast source: queues fill up completely; destroy with batches lent. */
    for (int round = 0; round < 20; round++) {
        stk_loader *l = make_loader(f.ds, SPEC,
                                    (stk_loader_options){.batch_size = 64, .threads = 3,
                                                         .prefetch = 6, .seed = (uint64_t)round});
        stk_batch b;
        assert_int_equal(stk_loader_next(l, &b), 1);
        if (round % 2)
            assert_int_equal(stk_loader_release(l, &b), 0);
        usleep(2000);
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        stk_loader_destroy(l); /* must neither hang nor leak */
    }
    /* Slow source: workers are inside read() when destroy comes. */
    stk_dataset *slow = wrap(f.ds, 2000, 0);
    stk_loader *l = make_loader(slow, SPEC,
                                (stk_loader_options){.batch_size = 64, .threads = 4, .prefetch = 4});
    usleep(10000);
    stk_loader_destroy(l);
    stk_dataset_close(slow);
    fixture_close(&f);
}

static void test_raise_policy_reports_record(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 300);
    stk_dataset *bad = wrap(f.ds, 0, 100); /* 99, 199, 299 are corrupt */
    stk_loader *l = make_loader(bad, SPEC, (stk_loader_options){.batch_size = 16, .seed = 1});
    run out = {0};
    int rc = drain(l, &out, 0);
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "corrupt on purpose"));
    assert_non_null(strstr(stk_errmsg(), "test:wrapped"));
    assert_non_null(strstr(stk_loader_errmsg(l), "record"));
    /* The error sticks until a reset... */
    stk_batch b;
    assert_int_equal(stk_loader_next(l, &b), STK_EDATA);
    /* ...after which the loader works again (and fails again at a bad one). */
    assert_int_equal(stk_loader_set_epoch(l, 1), 0);
    run again = {0};
    assert_int_equal(drain(l, &again, 0), STK_EDATA);
    run_free(&out);
    run_free(&again);
    stk_loader_destroy(l);
    stk_dataset_close(bad);
    fixture_close(&f);
}

static void test_skip_policy_counts_and_keeps_order(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 300);
    stk_dataset *bad = wrap(f.ds, 0, 10); /* 30 corrupt samples */
    for (uint32_t threads = 1; threads <= 3; threads += 2) {
        stk_loader *l = make_loader(bad, SPEC,
                                    (stk_loader_options){.batch_size = 16, .threads = threads,
                                                         .seed = 4, .on_error = STK_ON_ERROR_SKIP});
        run out = {0};
        assert_int_equal(drain(l, &out, 0), 0);
        assert_int_equal(out.rows, 270);
        uint8_t seen[300] = {0};
        for (uint64_t i = 0; i < out.rows; i++) {
            assert_true(out.indices[i] % 10 != 9);
            assert_int_equal(seen[out.indices[i]], 0);
            seen[out.indices[i]] = 1;
            assert_int_equal(out.labels[i], f.labels[out.indices[i]]);
        }
        /* Same rows, in the same order, as the unfiltered epoch minus the
         * bad ones. */
        stk_loader *ref = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 16, .seed = 4});
        run all = {0};
        drain(ref, &all, 0);
        uint64_t k = 0;
        for (uint64_t i = 0; i < all.rows; i++) {
            if (all.indices[i] % 10 == 9)
                continue;
            assert_int_equal(all.indices[i], out.indices[k]);
            assert_memory_equal(all.data + i * 360, out.data + k * 360, 360);
            k++;
        }
        assert_int_equal(k, 270);
        assert_int_equal(out.skipped, 30);
        /* stats also count what was prefetched into the next epoch */
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        assert_true(st.skipped >= 30);
        assert_true(st.samples >= 270);
        run_free(&out);
        run_free(&all);
        stk_loader_destroy(l);
        stk_loader_destroy(ref);
    }
    stk_dataset_close(bad);
    fixture_close(&f);
}

static void test_interrupt_leaves_loader_usable(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 100);
    stk_dataset *slow = wrap(f.ds, 500, 0);
    stk_loader *l = make_loader(slow, SPEC, (stk_loader_options){.batch_size = 10, .seed = 1});
    stk_loader_interrupt(l);
    stk_batch b;
    assert_int_equal(stk_loader_next(l, &b), STK_EINTR);
    /* A source taking 200 ms a sample cannot fill a batch of 10 within 1 ms;
     * the timed-out loader carries on. */
    stk_dataset *glacial = wrap(f.ds, 200000, 0);
    stk_loader *g = make_loader(glacial, "to u8", (stk_loader_options){.batch_size = 10, .threads = 2});
    assert_int_equal(stk_loader_next_timeout(g, &b, 1), STK_ETIMEDOUT);
    assert_non_null(strstr(stk_errmsg(), "1 ms"));
    stk_loader_destroy(g);
    stk_dataset_close(glacial);
    run out = {0};
    assert_int_equal(drain(l, &out, 0), 0);
    assert_int_equal(out.rows, 100);
    run_free(&out);
    stk_loader_destroy(l);
    stk_dataset_close(slow);
    fixture_close(&f);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 10);
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(f.ds, "pad x", NULL, &l), STK_ESPEC);
    assert_null(l);
    stk_loader_options o = {.prefetch = 4, .max_batches = 3};
    assert_int_equal(stk_loader_create(f.ds, "", &o, &l), STK_EINVAL);
    o = (stk_loader_options){.rank = 3, .world_size = 2};
    assert_int_equal(stk_loader_create(f.ds, "", &o, &l), STK_EINVAL);
    assert_int_equal(stk_loader_create(NULL, "", NULL, &l), STK_EINVAL);
    stk_loader_destroy(NULL);
    fixture_close(&f);
}

static void test_stats(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 256);
    stk_loader *l = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 32, .prefetch = 2});
    run out = {0};
    drain(l, &out, 0);
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    assert_int_equal(st.batches, 8);
    assert_true(st.samples >= 256); /* may have prefetched into epoch 1 */
    assert_true(st.augment_s > 0);
    assert_true(st.batches_allocated == 3);
    assert_int_equal(st.pool_bytes, 3ull * 32 * 360);
    run_free(&out);
    stk_loader_destroy(l);
    fixture_close(&f);
}

int main(void)
{
    alarm(600); /* a hang fails the test instead of blocking CI */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output_for_any_thread_count),
        cmocka_unit_test(test_exactly_once_across_world_sizes),
        cmocka_unit_test(test_drop_last),
        cmocka_unit_test(test_resume_mid_epoch),
        cmocka_unit_test(test_state_mismatch_rejected),
        cmocka_unit_test(test_set_epoch_semantics),
        cmocka_unit_test(test_lent_batches_never_overwritten),
        cmocka_unit_test(test_destroy_mid_epoch_with_full_queues),
        cmocka_unit_test(test_raise_policy_reports_record),
        cmocka_unit_test(test_skip_policy_counts_and_keeps_order),
        cmocka_unit_test(test_interrupt_leaves_loader_usable),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
