/*
 * test_loader.c — the executor: in-order, deterministic delivery for any
 * thread count; exactly-once coverage; mid-epoch resume; lent batches never
 * overwritten; pool exhaustion; destroy mid-epoch with full queues; error
 * skip and replace policies; interrupt; the block shuffle through the loader; resume
 * on another world size (the union of ranks across the checkpoint sees every
 * sample of the epoch once, apart from the pad rule). Runs under ASan/UBSan
 * and TSan.
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

typedef tu_run run; /* testutil.h */

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
            assert_int_equal(tu_drain(l, &r, 0), 0);
            assert_int_equal(r.rows, 1003);
            assert_int_equal(r.sizes[31], 1003 - 31 * 32);
            if (t == 0) {
                ref[e] = r;
            } else {
                assert_memory_equal(r.data, ref[e].data, r.rows * 6 * 5 * 3 * 4);
                assert_memory_equal(r.labels, ref[e].labels, r.rows * 8);
                assert_memory_equal(r.indices, ref[e].indices, r.rows * 8);
                tu_run_free(&r);
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
        tu_run_free(&ref[e]);
    }
    stk_plan_free(plan);

    /* Another seed gives other batches. */
    stk_loader *l = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 32, .seed = 1235});
    run r = {0};
    tu_drain(l, &r, 0);
    stk_loader *l2 = make_loader(f.ds, SPEC, (stk_loader_options){.batch_size = 32, .seed = 1234});
    run r2 = {0};
    tu_drain(l2, &r2, 0);
    assert_true(memcmp(r.data, r2.data, r.rows * 6 * 5 * 3 * 4) != 0);
    tu_run_free(&r);
    tu_run_free(&r2);
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
            assert_int_equal(tu_drain(l, &out, 0), 0);
            assert_int_equal(out.rows, per);
            for (uint64_t i = 0; i < out.rows; i++)
                count[out.indices[i]]++;
            tu_run_free(&out);
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
    assert_int_equal(tu_drain(l, &out, 0), 0);
    assert_int_equal(out.rows, 100);
    for (uint64_t b = 0; b < out.batches; b++)
        assert_int_equal(out.sizes[b], 10);
    tu_run_free(&out);
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
            assert_int_equal(tu_drain(a, &head, stops[k]), 1);
        stk_loader_state st;
        stk_loader_state_get(a, &st);
        assert_int_equal(st.epoch, 1);
        assert_int_equal(st.position, stops[k]);
        run rest = {0};
        assert_int_equal(tu_drain(a, &rest, 0), 0);
        run next_epoch = {0};
        assert_int_equal(tu_drain(a, &next_epoch, 0), 0); /* epoch 2 follows */

        /* Resumed: a fresh loader with other thread/prefetch settings. */
        stk_loader_options o2 = o;
        o2.threads = 3;
        o2.prefetch = 2;
        stk_loader *b = make_loader(f.ds, SPEC, o2);
        assert_int_equal(stk_loader_state_set(b, &st), 0);
        run rest2 = {0}, next2 = {0};
        assert_int_equal(tu_drain(b, &rest2, 0), 0);
        assert_int_equal(tu_drain(b, &next2, 0), 0);
        assert_int_equal(rest2.rows, rest.rows);
        assert_int_equal(rest.rows + head.rows, 500);
        if (rest.rows) {
            assert_memory_equal(rest2.data, rest.data, rest.rows * 360);
            assert_memory_equal(rest2.indices, rest.indices, rest.rows * 8);
        }
        assert_int_equal(next2.rows, 500);
        assert_memory_equal(next2.data, next_epoch.data, 500 * 360);
        tu_run_free(&head);
        tu_run_free(&rest);
        tu_run_free(&rest2);
        tu_run_free(&next_epoch);
        tu_run_free(&next2);
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
    stk_loader_options base = {.batch_size = 8, .seed = 1};
    stk_loader *a = make_loader(f.ds, "to u8", base);
    stk_loader_state st, good;
    stk_loader_state_get(a, &good);
    /* What still belongs to the job: seed, dataset size, drop_last, the
     * shuffle mode and its block size and window, the spec. */
    stk_loader_options os[] = {
        {.batch_size = 8, .seed = 2},
        {.batch_size = 8, .seed = 1, .drop_last = 1},
        {.batch_size = 8, .seed = 1, .no_shuffle = 1},
        {.batch_size = 8, .seed = 1, .shuffle = STK_SHUFFLE_BLOCK},
    };
    for (size_t k = 0; k < 4; k++) {
        stk_loader *b = make_loader(f.ds, "to u8", os[k]);
        assert_int_equal(stk_loader_state_set(b, &good), STK_EINVAL);
        assert_non_null(strstr(stk_errmsg(), "does not match this loader"));
        if (k == 1) /* the differing setting in words, not "flags 0 / flags 2" */
            assert_non_null(strstr(stk_errmsg(), "saved with drop_last=False; this loader has "
                                                 "drop_last=True"));
        stk_loader_destroy(b);
    }
    stk_loader *blk = make_loader(f.ds, "to u8",
                                  (stk_loader_options){.batch_size = 8, .seed = 1,
                                                       .shuffle = STK_SHUFFLE_BLOCK});
    stk_loader_state_get(blk, &st);
    assert_int_equal(st.flags, 4);
    assert_int_equal(st.block_size, STK_DEFAULT_BLOCK_SIZE);
    assert_int_equal(st.shuffle_window, STK_DEFAULT_SHUFFLE_WINDOW);
    assert_int_equal(stk_loader_state_set(blk, &st), 0);
    st.block_size = 32;
    assert_int_equal(stk_loader_state_set(blk, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "the state was saved with shuffle=block (block_size "
                                         "32, shuffle_window 16); this loader has "
                                         "shuffle=block (block_size 64, shuffle_window 16)"));
    stk_loader_state_get(blk, &st);
    st.shuffle_window = 3;
    assert_int_equal(stk_loader_state_set(blk, &st), STK_EINVAL);
    stk_loader_destroy(blk);
    st = good;
    st.dataset_size = 51;
    assert_int_equal(stk_loader_state_set(a, &st), STK_EINVAL);
    /* Positions past the epoch of the state's own layout: 50 samples over 2
     * ranks in batches of 8 make 4 batches. */
    st = good;
    st.world_size = 2;
    st.position = 5;
    assert_int_equal(stk_loader_state_set(a, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "position 5 is past the epoch's 4 batches"));
    st.position = 4; /* the end: accepted */
    assert_int_equal(stk_loader_state_set(a, &st), 0);
    st = good;
    st.start_slot = 50;
    assert_int_equal(stk_loader_state_set(a, &st), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "start slot 50 is not below the dataset size 50"));
    st = good;
    st.rank = 2;
    st.world_size = 2;
    assert_int_equal(stk_loader_state_set(a, &st), STK_EINVAL);
    st.world_size = 0;
    st.rank = 0;
    assert_int_equal(stk_loader_state_set(a, &st), STK_EINVAL);
    /* Same everything but the spec: refused. */
    stk_loader *c = make_loader(f.ds, "flip 1", base);
    assert_int_equal(stk_loader_state_set(c, &good), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "spec"));
    stk_loader_destroy(c);
    stk_loader_destroy(a);
    fixture_close(&f);
}

/* The block shuffle through the loader: the sampler's order, exactly once
 * over ranks (pad and drop), resumable mid-epoch with the same batches. */
static void test_block_shuffle_loader(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 103);
    for (uint32_t w = 1; w <= 8; w++) {
        for (int drop = 0; drop <= 1; drop++) {
            unsigned count[103] = {0};
            uint64_t per = drop ? 103 / w / 5 * 5 : (103 + w - 1) / w, total = 0;
            for (uint32_t r = 0; r < w; r++) {
                stk_loader_options o = {.batch_size = 5, .threads = 2, .seed = 9, .rank = r,
                                        .world_size = w, .drop_last = drop,
                                        .shuffle = STK_SHUFFLE_BLOCK, .block_size = 6,
                                        .shuffle_window = 3};
                stk_loader *l = make_loader(f.ds, "to u8", o);
                stk_sampler_options so = {.dataset_size = 103, .seed = 9, .rank = r,
                                          .world_size = w, .batch_size = 5, .drop_last = drop,
                                          .shuffle = STK_SHUFFLE_BLOCK, .block_size = 6,
                                          .shuffle_window = 3};
                stk_sampler *s = NULL;
                assert_int_equal(stk_sampler_create(&so, &s), 0);
                assert_int_equal(stk_loader_set_epoch(l, 4), 0);
                assert_int_equal(stk_loader_length(l), (per + 4) / 5);
                run out = {0};
                assert_int_equal(tu_drain(l, &out, 0), 0);
                assert_int_equal(out.rows, per);
                for (uint64_t i = 0; i < out.rows; i++) {
                    assert_int_equal(out.indices[i], stk_sampler_index(s, 4, i));
                    count[out.indices[i]]++;
                    total++;
                }
                tu_run_free(&out);
                stk_sampler_destroy(s);
                stk_loader_destroy(l);
            }
            for (int i = 0; i < 103; i++)
                assert_true(drop ? count[i] <= 1 : (count[i] == 1 || count[i] == 2));
            assert_int_equal(total, per * w);
        }
    }
    /* Resume mid-epoch: the same batches as straight through. */
    stk_loader_options o = {.batch_size = 7, .threads = 2, .seed = 3,
                            .shuffle = STK_SHUFFLE_BLOCK, .block_size = 10, .shuffle_window = 2};
    stk_loader *a = make_loader(f.ds, SPEC, o);
    run head = {0}, rest = {0}, rest2 = {0};
    assert_int_equal(tu_drain(a, &head, 6), 1);
    stk_loader_state st;
    stk_loader_state_get(a, &st);
    assert_int_equal(tu_drain(a, &rest, 0), 0);
    o.threads = 3;
    stk_loader *b = make_loader(f.ds, SPEC, o);
    assert_int_equal(stk_loader_state_set(b, &st), 0);
    assert_int_equal(tu_drain(b, &rest2, 0), 0);
    assert_int_equal(rest2.rows, rest.rows);
    assert_int_equal(head.rows + rest.rows, 103);
    assert_memory_equal(rest2.data, rest.data, rest.rows * H * W * C * 4);
    assert_memory_equal(rest2.indices, rest.indices, rest.rows * 8);
    tu_run_free(&head);
    tu_run_free(&rest);
    tu_run_free(&rest2);
    stk_loader_destroy(a);
    stk_loader_destroy(b);
    fixture_close(&f);
}

/* W ranks run p batches of epoch 2 in lockstep and checkpoint; W2 != W fresh
 * ranks load those states (rank r2 takes old rank r2 % W's: any works) and
 * finish the epoch. Over the union every sample is seen once, apart from the
 * padded slots of the rest; the next epoch is a full, fresh one in the new
 * layout. */
static void check_loader_world_change(fixture *f, uint32_t w, uint32_t w2, int drop,
                                      stk_shuffle mode, uint64_t p)
{
    const uint32_t b = 4;
    const uint64_t n = f->n;
    unsigned *count = calloc(n, sizeof *count);
    stk_loader_state *states = calloc(w, sizeof *states);
    for (uint32_t r = 0; r < w; r++) {
        stk_loader_options o = {.batch_size = b, .threads = 2, .seed = 21, .rank = r,
                                .world_size = w, .drop_last = drop, .shuffle = mode};
        stk_loader *l = make_loader(f->ds, "to u8", o);
        assert_int_equal(stk_loader_set_epoch(l, 2), 0);
        run head = {0};
        if (p)
            assert_int_equal(tu_drain(l, &head, p), 1);
        for (uint64_t i = 0; i < head.rows; i++)
            count[head.indices[i]]++;
        stk_loader_state_get(l, &states[r]);
        assert_int_equal(states[r].position, p);
        tu_run_free(&head);
        stk_loader_destroy(l);
    }
    uint64_t start = p * b * w, rest = n - start;
    uint64_t per = drop ? rest / w2 / b * b : (rest + w2 - 1) / w2, total = start, twice = 0;
    for (uint32_t r = 0; r < w2; r++) {
        stk_loader_options o = {.batch_size = b, .threads = 2, .seed = 21, .rank = r,
                                .world_size = w2, .drop_last = drop, .shuffle = mode};
        stk_loader *l = make_loader(f->ds, "to u8", o);
        uint64_t full = stk_loader_length(l);
        assert_int_equal(stk_loader_state_set(l, &states[r % w]), 0);
        stk_loader_state now;
        stk_loader_state_get(l, &now);
        assert_int_equal(now.epoch, 2);
        assert_int_equal(now.world_size, w2);
        assert_int_equal(now.rank, r);
        assert_int_equal(now.position, 0);
        assert_int_equal(now.start_slot, start);
        assert_int_equal(stk_loader_length(l), (per + b - 1) / b);
        run out = {0};
        assert_int_equal(tu_drain(l, &out, 0), 0);
        assert_int_equal(out.rows, per);
        for (uint64_t i = 0; i < out.rows; i++)
            count[out.indices[i]]++;
        total += out.rows;
        /* Then epoch 3, full, as a fresh loader of this layout has it. */
        assert_int_equal(stk_loader_length(l), full);
        run next = {0}, ref = {0};
        assert_int_equal(tu_drain(l, &next, 0), 0);
        stk_loader *fresh = make_loader(f->ds, "to u8", o);
        assert_int_equal(stk_loader_set_epoch(fresh, 3), 0);
        assert_int_equal(tu_drain(fresh, &ref, 0), 0);
        assert_int_equal(next.rows, ref.rows);
        assert_memory_equal(next.indices, ref.indices, ref.rows * 8);
        tu_run_free(&out);
        tu_run_free(&next);
        tu_run_free(&ref);
        stk_loader_destroy(fresh);
        stk_loader_destroy(l);
    }
    for (uint64_t i = 0; i < n; i++) {
        if (drop)
            assert_true(count[i] <= 1);
        else
            assert_true(count[i] >= 1 && count[i] <= 2);
        twice += count[i] ? count[i] - 1 : 0;
    }
    if (drop)
        assert_int_equal(total, start + per * w2);
    else
        assert_int_equal(twice, per * w2 - rest);
    free(states);
    free(count);
}

static void test_resume_on_another_world_size(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 203);
    const uint32_t pairs[][2] = {{1, 2}, {4, 3}, {8, 1}, {3, 5}, {2, 7}};
    const stk_shuffle modes[] = {STK_SHUFFLE_GLOBAL, STK_SHUFFLE_BLOCK};
    for (size_t i = 0; i < 5; i++)
        for (size_t m = 0; m < 2; m++)
            for (int drop = 0; drop <= 1; drop++) {
                uint32_t w = pairs[i][0];
                uint64_t len = drop ? 203 / w / 4 * 4 : (203 + w - 1) / w;
                uint64_t batches = (len + 3) / 4;
                const uint64_t ps[] = {1, batches / 2, batches - 1};
                for (size_t k = 0; k < 3; k++)
                    check_loader_world_change(&f, w, pairs[i][1], drop, modes[m], ps[k]);
            }
    fixture_close(&f);
}

/* A state taken inside a partial epoch, restored into the same layout,
 * continues it exactly; a state at its end starts the next epoch; and a
 * partial epoch left empty by drop_last ends at once. */
static void test_partial_epoch_state_round_trip(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 203);
    stk_loader_state st = {0};
    stk_loader_options old = {.batch_size = 4, .seed = 5, .world_size = 4};
    stk_loader *a = make_loader(f.ds, SPEC, old);
    run head = {0};
    assert_int_equal(tu_drain(a, &head, 5), 1);
    stk_loader_state_get(a, &st); /* 80 slots consumed */
    stk_loader_options o = {.batch_size = 4, .seed = 5, .world_size = 3, .rank = 1};
    stk_loader *b = make_loader(f.ds, SPEC, o);
    assert_int_equal(stk_loader_state_set(b, &st), 0);
    assert_int_equal(stk_loader_length(b), (41 + 3) / 4); /* 123 left over 3 ranks */
    run b1 = {0}, b2 = {0}, c2 = {0};
    assert_int_equal(tu_drain(b, &b1, 3), 1);
    stk_loader_state mid;
    stk_loader_state_get(b, &mid);
    assert_int_equal(mid.start_slot, 80);
    assert_int_equal(mid.position, 3);
    assert_int_equal(tu_drain(b, &b2, 0), 0);
    o.threads = 3;
    stk_loader *c = make_loader(f.ds, SPEC, o);
    assert_int_equal(stk_loader_state_set(c, &mid), 0);
    assert_int_equal(stk_loader_length(c), 11);
    assert_int_equal(tu_drain(c, &c2, 0), 0);
    assert_int_equal(c2.rows, b2.rows);
    assert_int_equal(b1.rows + b2.rows, 41);
    assert_memory_equal(c2.data, b2.data, b2.rows * 360);
    /* set_epoch to the partial epoch's own number restarts it in full. */
    assert_int_equal(stk_loader_set_epoch(c, 0), 0);
    assert_int_equal(stk_loader_length(c), 17);
    /* At the end of the partial epoch: the next one follows. */
    stk_loader_state end;
    stk_loader_state_get(b, &end); /* b moved on to epoch 1 */
    assert_int_equal(end.epoch, 1);
    assert_int_equal(end.start_slot, 0);
    mid.position = 11;
    assert_int_equal(stk_loader_state_set(c, &mid), 0);
    run none = {0}, e1 = {0};
    assert_int_equal(tu_drain(c, &none, 0), 0);
    assert_int_equal(none.rows, 0);
    assert_int_equal(tu_drain(c, &e1, 0), 0);
    assert_int_equal(e1.rows, 68);
    /* drop_last: 1 rank consumed 192 of 203; 11 left over 3 ranks is less
     * than a batch each. */
    stk_loader_options d = {.batch_size = 4, .seed = 5, .world_size = 3, .drop_last = 1};
    stk_loader *e = make_loader(f.ds, "to u8", d);
    stk_loader_state ds = {.seed = 5, .epoch = 7, .position = 48, .dataset_size = 203,
                           .batch_size = 4, .world_size = 1, .flags = 2,
                           .spec_hash = 0};
    stk_loader_state mine;
    stk_loader_state_get(e, &mine);
    ds.spec_hash = mine.spec_hash;
    assert_int_equal(stk_loader_state_set(e, &ds), 0);
    assert_int_equal(stk_loader_length(e), 0);
    run empty = {0}, e8 = {0};
    assert_int_equal(tu_drain(e, &empty, 0), 0);
    assert_int_equal(empty.rows, 0);
    assert_int_equal(tu_drain(e, &e8, 0), 0);
    assert_int_equal(e8.rows, 64);
    assert_int_equal(e8.batches, 16);
    tu_run_free(&e8);
    tu_run_free(&empty);
    tu_run_free(&none);
    tu_run_free(&e1);
    tu_run_free(&head);
    tu_run_free(&b1);
    tu_run_free(&b2);
    tu_run_free(&c2);
    stk_loader_destroy(a);
    stk_loader_destroy(b);
    stk_loader_destroy(c);
    stk_loader_destroy(e);
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
    tu_drain(l, &half, 4);
    assert_int_equal(stk_loader_set_epoch(l, 3), 0);
    assert_int_equal(tu_drain(l, &e3, 0), 0);
    stk_loader *fresh = make_loader(f.ds, SPEC, o);
    stk_loader_set_epoch(fresh, 3);
    assert_int_equal(tu_drain(fresh, &ref, 0), 0);
    assert_int_equal(e3.rows, 64);
    assert_memory_equal(e3.data, ref.data, 64 * 360);
    /* After the end of epoch 3 was reported the loader is at epoch 4. */
    stk_loader_state st;
    stk_loader_state_get(l, &st);
    assert_int_equal(st.epoch, 4);
    assert_int_equal(st.position, 0);
    tu_run_free(&half);
    tu_run_free(&e3);
    tu_run_free(&ref);
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
    int rc = tu_drain(l, &out, 0);
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
    assert_int_equal(tu_drain(l, &again, 0), STK_EDATA);
    tu_run_free(&out);
    tu_run_free(&again);
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
        assert_int_equal(tu_drain(l, &out, 0), 0);
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
        tu_drain(ref, &all, 0);
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
        /* stats.skipped counts the skipped samples of delivered batches
         * only, each once (not what workers read ahead into the next
         * epoch); samples counts all work done */
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        assert_int_equal(st.skipped, 30);
        assert_true(st.samples >= 270);
        tu_run_free(&out);
        tu_run_free(&all);
        stk_loader_destroy(l);
        stk_loader_destroy(ref);
    }
    /* With views = 2 a skipped sample takes both its rows out, and the
     * kept pairs move up together (tests/test_loader_sampling.c has the
     * rest of views). */
    stk_loader *lv = make_loader(bad, SPEC,
                                 (stk_loader_options){.batch_size = 16, .threads = 3, .seed = 4,
                                                      .views = 2,
                                                      .on_error = STK_ON_ERROR_SKIP});
    stk_loader *rv = make_loader(f.ds, SPEC,
                                 (stk_loader_options){.batch_size = 16, .seed = 4, .views = 2});
    run out = {0}, all = {0};
    assert_int_equal(tu_drain(lv, &out, 0), 0);
    assert_int_equal(tu_drain(rv, &all, 0), 0);
    assert_int_equal(out.rows, 540);
    assert_int_equal(out.skipped, 30);
    uint64_t k = 0;
    for (uint64_t i = 0; i < all.rows; i += 2) {
        if (all.indices[i] % 10 == 9)
            continue;
        assert_int_equal(all.indices[i], out.indices[k]);
        assert_int_equal(out.indices[k + 1], out.indices[k]);
        assert_memory_equal(all.data + i * 360, out.data + k * 360, 2 * 360);
        k += 2;
    }
    assert_int_equal(k, 540);
    tu_run_free(&out);
    tu_run_free(&all);
    stk_loader_destroy(lv);
    stk_loader_destroy(rv);
    stk_dataset_close(bad);
    fixture_close(&f);
}

/* on_error = replace (issue 26): every batch stays full under drop_last; a
 * row whose sample is corrupt holds another, good sample of the epoch (not
 * one of its batch), with that sample's label and index and the failed
 * row's augmentation stream; the rows that did not fail are the plain
 * run's; the same for any thread count and after a resume; the failures
 * are listed per batch (stk_loader_skipped) with their reasons. */
typedef struct replaced_run {
    run r;
    uint64_t failed[512]; /* stk_loader_skipped indices, in order */
    uint32_t nfailed;
} replaced_run;

static void drain_listing(stk_loader *l, replaced_run *out, uint64_t max_batches)
{
    stk_batch b;
    int rc;
    uint64_t taken = 0;
    while ((!max_batches || taken < max_batches) && (rc = stk_loader_next(l, &b)) == 1) {
        taken++;
        assert_int_equal(b.size, 16); /* full, drop_last or not (300 = 18 * 16 + 12) */
        size_t bytes = (size_t)b.size * b.sample_bytes;
        out->r.data = realloc(out->r.data, out->r.rows * b.sample_bytes + bytes);
        out->r.labels = realloc(out->r.labels, (out->r.rows + b.size) * 8);
        out->r.indices = realloc(out->r.indices, (out->r.rows + b.size) * 8);
        memcpy(out->r.data + out->r.rows * b.sample_bytes, b.data, bytes);
        memcpy(out->r.labels + out->r.rows, b.labels, b.size * 8);
        memcpy(out->r.indices + out->r.rows, b.indices, b.size * 8);
        for (uint32_t i = 0; i < b.size; i++)
            for (uint32_t j = 0; j < i; j++) /* never twice in one batch */
                assert_true(b.indices[i] != b.indices[j]);
        for (uint32_t i = 0; i < b.skipped; i++) {
            uint64_t index;
            const char *reason;
            assert_int_equal(stk_loader_skipped(l, &b, i, &index, &reason), 0);
            assert_non_null(strstr(reason, "corrupt on purpose"));
            assert_true(index % 10 == 9);
            assert_true(out->nfailed < 512);
            out->failed[out->nfailed++] = index;
        }
        assert_int_equal(stk_loader_skipped(l, &b, b.skipped, NULL, NULL), STK_EINVAL);
        out->r.rows += b.size;
        out->r.skipped += b.skipped;
        out->r.batches++;
        assert_int_equal(stk_loader_release(l, &b), 0);
    }
}

static void test_replace_policy_full_batches(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f, 300);
    stk_dataset *bad = wrap(f.ds, 0, 10); /* 9, 19, ... 299: 30 corrupt */
    stk_loader_options o = {.batch_size = 16, .seed = 4, .drop_last = 1,
                            .on_error = STK_ON_ERROR_REPLACE};
    /* The plain epoch over the sound dataset: the places and their rows. */
    stk_loader_options po = o;
    po.on_error = STK_ON_ERROR_RAISE;
    stk_loader *pl = make_loader(f.ds, SPEC, po);
    run plain = {0};
    assert_int_equal(tu_drain(pl, &plain, 0), 0);
    assert_int_equal(plain.rows, 288);
    stk_loader_destroy(pl);
    stk_plan *plan;
    assert_int_equal(stk_plan_compile(SPEC, H, W, C, &plan), 0);
    float expect[C * H * W];

    replaced_run ref = {0};
    const uint32_t threads[] = {1, 4, 3};
    for (int t = 0; t < 3; t++) {
        o.threads = threads[t];
        stk_loader *l = make_loader(bad, SPEC, o);
        replaced_run rr = {0};
        drain_listing(l, &rr, 0);
        assert_int_equal(rr.r.rows, 288);
        assert_int_equal(rr.r.batches, 18);
        stk_loader_stats st;
        stk_loader_stats_get(l, &st);
        assert_int_equal(st.skipped, rr.r.skipped);
        stk_loader_destroy(l);
        if (t == 0) {
            ref = rr;
            continue;
        }
        assert_int_equal(rr.r.skipped, ref.r.skipped);
        assert_memory_equal(rr.failed, ref.failed, ref.nfailed * 8);
        assert_memory_equal(rr.r.data, ref.r.data, 288 * 360);
        assert_memory_equal(rr.r.indices, ref.r.indices, 288 * 8);
        assert_memory_equal(rr.r.labels, ref.r.labels, 288 * 8);
        tu_run_free(&rr.r);
    }
    /* Each failed place is listed, in order, before any failed substitute
     * of it; a sound place keeps its plain row; a failed one holds a sound
     * sample with its own label, drawn with the failed place's stream. */
    uint32_t fi = 0, places_failed = 0;
    for (uint64_t i = 0; i < 288; i++) {
        uint64_t idx = ref.r.indices[i];
        assert_true(idx % 10 != 9);
        assert_int_equal(ref.r.labels[i], f.labels[idx]);
        if (plain.indices[i] % 10 != 9) {
            assert_int_equal(idx, plain.indices[i]);
            assert_memory_equal(ref.r.data + i * 360, plain.data + i * 360, 360);
            continue;
        }
        places_failed++;
        while (fi < ref.nfailed && ref.failed[fi] != plain.indices[i])
            fi++;
        assert_true(fi < ref.nfailed);
        fi++;
        stk_image_view v = {f.pixels + idx * H * W * C, H, W, C, W * C, C, 1};
        stk_rng rng;
        stk_rng_init(&rng, 4, STK_RNG_DOMAIN_SAMPLE, 0, plain.indices[i]);
        assert_int_equal(stk_plan_run(plan, &v, &rng, expect), 0);
        assert_memory_equal(ref.r.data + i * 360, expect, 360);
    }
    assert_true(places_failed >= 20); /* ~29 of the 30 in 288 of 300 places */
    assert_true(ref.r.skipped >= places_failed);
    assert_int_equal(ref.r.skipped, ref.nfailed);

    /* Resumed after 7 batches by a loader with other threads: the same
     * continuation, substitutes included. */
    o.threads = 2;
    stk_loader *a = make_loader(bad, SPEC, o);
    replaced_run head = {0}, rest = {0};
    drain_listing(a, &head, 7);
    stk_loader_state st;
    stk_loader_state_get(a, &st);
    stk_loader_destroy(a);
    o.threads = 3;
    stk_loader *b = make_loader(bad, SPEC, o);
    assert_int_equal(stk_loader_state_set(b, &st), 0);
    drain_listing(b, &rest, 0);
    assert_int_equal(head.r.rows + rest.r.rows, 288);
    assert_memory_equal(rest.r.data, ref.r.data + head.r.rows * 360, rest.r.rows * 360);
    assert_memory_equal(rest.r.indices, ref.r.indices + head.r.rows, rest.r.rows * 8);
    assert_int_equal(head.nfailed + rest.nfailed, ref.nfailed);
    stk_loader_destroy(b);

    /* Views: a replaced sample fills both its rows (the pair together). */
    o.views = 2;
    o.drop_last = 0;
    stk_loader *lv = make_loader(bad, SPEC, o);
    run rv = {0};
    assert_int_equal(tu_drain(lv, &rv, 0), 0);
    assert_int_equal(rv.rows, 600);
    for (uint64_t i = 0; i < rv.rows; i += 2) {
        assert_true(rv.indices[i] % 10 != 9);
        assert_int_equal(rv.indices[i + 1], rv.indices[i]);
    }
    stk_loader_destroy(lv);

    /* A dataset where every sample is corrupt stops the loader, naming the
     * sample and saying how many substitutes failed. */
    stk_dataset *all_bad = wrap(f.ds, 0, 1);
    o.views = 1;
    stk_loader *lb = make_loader(all_bad, SPEC, o);
    stk_batch bb;
    assert_int_equal(stk_loader_next(lb, &bb), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "substitutes"));
    stk_loader_destroy(lb);
    stk_dataset_close(all_bad);

    tu_run_free(&rv);
    tu_run_free(&head.r);
    tu_run_free(&rest.r);
    tu_run_free(&ref.r);
    tu_run_free(&plain);
    stk_plan_free(plan);
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
    assert_int_equal(tu_drain(l, &out, 0), 0);
    assert_int_equal(out.rows, 100);
    tu_run_free(&out);
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
    o = (stk_loader_options){.block_size = 8}; /* without shuffle=block */
    assert_int_equal(stk_loader_create(f.ds, "", &o, &l), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "shuffle=block only"));
    o = (stk_loader_options){.no_shuffle = 1, .shuffle = STK_SHUFFLE_BLOCK};
    assert_int_equal(stk_loader_create(f.ds, "", &o, &l), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no_shuffle contradicts shuffle=block"));
    assert_null(l);
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
    tu_drain(l, &out, 0);
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    assert_int_equal(st.batches, 8);
    assert_true(st.samples >= 256); /* may have prefetched into epoch 1 */
    assert_true(st.augment_s > 0);
    assert_true(st.batches_allocated == 3);
    assert_int_equal(st.pool_bytes, 3ull * 32 * 360);
    tu_run_free(&out);
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
        cmocka_unit_test(test_block_shuffle_loader),
        cmocka_unit_test(test_resume_on_another_world_size),
        cmocka_unit_test(test_partial_epoch_state_round_trip),
        cmocka_unit_test(test_set_epoch_semantics),
        cmocka_unit_test(test_lent_batches_never_overwritten),
        cmocka_unit_test(test_destroy_mid_epoch_with_full_queues),
        cmocka_unit_test(test_raise_policy_reports_record),
        cmocka_unit_test(test_skip_policy_counts_and_keeps_order),
        cmocka_unit_test(test_replace_policy_full_batches),
        cmocka_unit_test(test_interrupt_leaves_loader_usable),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
