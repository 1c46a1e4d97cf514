/*
 * test_abi.c — the ABI rules of docs/abi.md, checked.
 *
 * 1. The size of every public struct is pinned (LP64 values, computed by
 *    hand from the field lists in stoker.h). A field added anywhere but in
 *    the reserved_ space changes a size and fails here: carve new fields out
 *    of reserved_ instead and shrink it by as many words.
 * 2. Structs the caller fills refuse non-zero reserved words with
 *    STK_EINVAL and a message naming the struct and the word.
 * 3. Structs the library fills come back with their reserved words zeroed
 *    (they are poisoned with 0xff before the call).
 * 4. A batch's handle is opaque but not forgeable by accident: a second
 *    release, a stale copy after the buffer was lent again, or a changed
 *    handle are refused with STK_ESTATE.
 * 5. The loader's parameter and statistic keys, the first rows of the
 *    parameter table and the sized statistics struct's layout are pinned.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/op.h"
#include "stoker/stoker.h"
#include "testutil.h"

#define NWORDS(a) (sizeof(a) / sizeof((a)[0]))

static void test_struct_sizes_are_pinned(void **state)
{
    (void)state;
    /* 3 limits + 5 reserved words */
    assert_int_equal(sizeof(stk_dataset_options), 8 * 8);
    /* 2 pointers, count, 4 x u32, 4 reserved words */
    assert_int_equal(sizeof(stk_dataset_info), 16 + 8 + 16 + 32);
    /* name, type + ndim, dims[4], compressed (+4 padding), 2 reserved */
    assert_int_equal(sizeof(stk_field_info), 8 + 8 + 16 + 8 + 16);
    /* path, 3 x u64, 2 reserved */
    assert_int_equal(sizeof(stk_shard_info), 8 + 24 + 16);
    /* shard_bytes; jobs, mode, zstd_level, strict, no_validate (+4); 3 pointers;
     * max_side, quality; restart_interval (+4); then in the 8 words once
     * reserved: on_progress_bytes, 7 reserved */
    assert_int_equal(sizeof(stk_pack_options), 8 + 24 + 24 + 8 + 8 + 64);
    assert_int_equal(offsetof(stk_pack_options, on_progress_bytes), 72);
    assert_int_equal(offsetof(stk_pack_options, reserved_), 80);
    assert_int_equal(sizeof(stk_pack_result), 8 + 8 + 8 + 8 + 8 + 32);
    /* decode (+4), 3 pointers, 4 reserved */
    assert_int_equal(sizeof(stk_verify_options), 8 + 24 + 32);
    assert_int_equal(sizeof(stk_verify_result), 8 + 16 + 32);
    /* name, type + ndim, dims[4], zstd_level (+4 padding), 2 reserved */
    assert_int_equal(sizeof(stk_shard_field), 8 + 8 + 16 + 8 + 16);
    assert_int_equal(offsetof(stk_shard_field, zstd_level), 32);
    assert_int_equal(offsetof(stk_shard_field, reserved_), 40);
    /* data, size, shape[3] + count, 1 reserved */
    assert_int_equal(sizeof(stk_field_value), 8 + 8 + 16 + 8);
    assert_int_equal(offsetof(stk_field_value, count), 28);
    /* records_per_shard, shard_bytes, class_names, num_classes + nmetadata,
     * metadata, 6 reserved */
    assert_int_equal(sizeof(stk_shard_writer_options), 8 + 8 + 8 + 8 + 8 + 48);
    assert_int_equal(offsetof(stk_shard_writer_options, metadata), 32);
    assert_int_equal(offsetof(stk_shard_writer_options, reserved_), 40);
    /* size, seed, batch, rank, world, no_shuffle, drop_last (+4), then in the
     * 4 words once reserved: block_size, start_slot, shuffle + shuffle_window,
     * and the last one: the stk_sampling pointer (its own reserved words
     * extend the sampler from now on) */
    /* callback datasets: data, size; h, w, c (+4); 3 strides, label, token;
     * 4 reserved */
    assert_int_equal(sizeof(stk_callback_sample), 16 + 16 + 24 + 16 + 32);
    /* data, size; shape[3] (+4); token; 4 reserved */
    assert_int_equal(sizeof(stk_callback_field), 16 + 16 + 8 + 32);
    /* 4 function pointers, 4 reserved */
    assert_int_equal(sizeof(stk_dataset_callbacks), 32 + 32);
    /* count, name; h, w, c, num_classes; class_names, fields; nfields (+4);
     * max_pixels; 4 reserved */
    assert_int_equal(sizeof(stk_callback_options), 16 + 16 + 16 + 8 + 8 + 32);
    assert_int_equal(sizeof(stk_sampler_options), 8 + 8 + 4 * 5 + 4 + 32);
    assert_int_equal(offsetof(stk_sampler_options, block_size), 40);
    assert_int_equal(offsetof(stk_sampler_options, start_slot), 48);
    assert_int_equal(offsetof(stk_sampler_options, shuffle), 56);
    assert_int_equal(offsetof(stk_sampler_options, shuffle_window), 60);
    assert_int_equal(offsetof(stk_sampler_options, sampling), 64);
    /* 7 words of arrays, counts and num_samples, balance_classes +
     * reserved32_, then in the 4 words reserved: mix_sizes, mix_weights,
     * num_mix, 1 reserved */
    assert_int_equal(sizeof(stk_sampling), 56 + 8 + 32);
    assert_int_equal(offsetof(stk_sampling, num_samples), 48);
    assert_int_equal(offsetof(stk_sampling, balance_classes), 56);
    assert_int_equal(offsetof(stk_sampling, mix_sizes), 64);
    assert_int_equal(offsetof(stk_sampling, num_mix), 80);
    assert_int_equal(offsetof(stk_sampling, reserved_), 88);
    /* 4 x u32, seed, no_shuffle, drop_last, rank, world_size, on_error (+4),
     * then in the 8 words once reserved: block_size, shuffle + shuffle_window,
     * sampling, aug_seed, views + flags, memory_limit, fields, device */
    assert_int_equal(sizeof(stk_loader_options), 16 + 8 + 24 + 64);
    assert_int_equal(offsetof(stk_loader_options, block_size), 48);
    assert_int_equal(offsetof(stk_loader_options, shuffle), 56);
    assert_int_equal(offsetof(stk_loader_options, shuffle_window), 60);
    assert_int_equal(offsetof(stk_loader_options, sampling), 64);
    assert_int_equal(offsetof(stk_loader_options, aug_seed), 72);
    assert_int_equal(offsetof(stk_loader_options, views), 80);
    assert_int_equal(offsetof(stk_loader_options, flags), 84);
    assert_int_equal(offsetof(stk_loader_options, memory_limit), 88);
    assert_int_equal(offsetof(stk_loader_options, fields), 96);
    assert_int_equal(offsetof(stk_loader_options, device), 104);
    /* device, placement + flags, then in the 6 words once reserved:
     * decoder + reserved32_, 5 reserved */
    assert_int_equal(sizeof(stk_device_options), 8 + 8 + 48);
    assert_int_equal(offsetof(stk_device_options, decoder), 16);
    /* batches, launches, fused_batches, kernel_s, decode_batches,
     * decode_s, 4 reserved words */
    assert_int_equal(sizeof(stk_device_timing), 6 * 8 + 32);
    assert_int_equal(offsetof(stk_device_timing, decode_s), 40);
    /* files, windows, declined, bytes, budget, 3 reserved */
    assert_int_equal(sizeof(stk_jpeg_index_stats), 8 * 8);
    assert_int_equal(offsetof(stk_jpeg_index_stats, budget), 32);
    /* dir[4096], limit, objects, bytes, 4 reserved */
    assert_int_equal(sizeof(stk_remote_cache_info), 4096 + 7 * 8);
    assert_int_equal(offsetof(stk_remote_cache_info, bytes), 4096 + 16);
    assert_int_equal(offsetof(stk_device_options, reserved_), 24);
    /* name, role + elem, text (+4), data, bytes, offsets, ndim (+4),
     * shape[5], 2 reserved */
    assert_int_equal(sizeof(stk_batch_field), 8 + 8 + 8 + 8 + 8 + 8 + 8 + 40 + 16);
    assert_int_equal(offsetof(stk_batch_field, shape), 56);
    /* 3 pointers, size + ndim, shape[4], dtype + layout, sample_bytes, epoch,
     * position, skipped (+4), handle, 4 reserved */
    assert_int_equal(sizeof(stk_batch), 24 + 8 + 32 + 8 + 8 + 8 + 8 + 8 + 8 + 32);
    /* seed, epoch, position, dataset_size, batch/rank/world/flags, spec_hash,
     * then in the 4 words once reserved: start_slot, block_size,
     * shuffle_window, 1 reserved */
    assert_int_equal(sizeof(stk_loader_state), 32 + 16 + 8 + 32);
    assert_int_equal(offsetof(stk_loader_state, start_slot), 56);
    assert_int_equal(offsetof(stk_loader_state, block_size), 64);
    assert_int_equal(offsetof(stk_loader_state, shuffle_window), 72);
    assert_int_equal(offsetof(stk_loader_state, reserved_), 80);
    /* 3 x u64, 4 doubles, batches_allocated (+4), pool_bytes, pool_exhausted,
     * then in the 8 words once reserved: decode_s, collate_s, step_s,
     * memory_bytes, threads + prefetch, decisions, max_batches +
     * gpu_decode_cpu_rows, gpu_head_rows */
    assert_int_equal(sizeof(stk_loader_stats), 24 + 32 + 8 + 16 + 64);
    assert_int_equal(offsetof(stk_loader_stats, decode_s), 80);
    assert_int_equal(offsetof(stk_loader_stats, threads), 112);
    assert_int_equal(offsetof(stk_loader_stats, decisions), 120);
    assert_int_equal(offsetof(stk_loader_stats, max_batches), 128);
    assert_int_equal(offsetof(stk_loader_stats, gpu_decode_cpu_rows), 132);
    assert_int_equal(offsetof(stk_loader_stats, gpu_head_rows), 136);
    /* batches, samples, 19 doubles, threads, prefetch, bound, stage,
     * verdict[256], 8 reserved */
    assert_int_equal(sizeof(stk_loader_profile), 16 + 19 * 8 + 16 + 256 + 64);
    assert_int_equal(offsetof(stk_loader_profile, verdict), 184);
    /* t, wait_s, step_s, ready, threads, prefetch, reserved16_ */
    assert_int_equal(sizeof(stk_loader_event), 24);
    /* name, whole + required, lo, hi, def, 2 reserved */
    assert_int_equal(sizeof(stk_op_param), 8 + 8 + 24 + 16);
    /* 4 pointers, nparams + reserved32_, 4 params, 4 reserved */
    assert_int_equal(sizeof(stk_op_info), 32 + 8 + 4 * 56 + 32);
    /* stoker/op.h keeps its own version (STK_OP_ABI_VERSION, struct_size):
     * pixels, h, w, c, reserved0_, stride */
    assert_int_equal(sizeof(stk_op_image), 8 + 16 + 8);
    /* abi_version + struct_size, name, usage, 5 hooks, user: version 1's size */
    assert_int_equal(sizeof(stk_user_op), 8 + 8 * 8);
    assert_int_equal(STK_USER_OP_SIZE_V1, sizeof(stk_user_op));
    assert_int_equal(offsetof(stk_user_op, name), 8);
    /* abi_version + struct_size, path, 3 functions, 8 reserved */
    assert_int_equal(sizeof(stk_plugin_host), 8 + 8 + 24 + 64);
    /* count, columns, seed, labels, compare, scale, reserved32_, 4 reserved */
    assert_int_equal(sizeof(stk_preview_options), 8 + 8 + 16 + 32);
    assert_int_equal(offsetof(stk_preview_options, reserved_), 32);
    /* samples, batch_size, step_ms, time_budget_s, readers, max_cores, seed,
     * 6 reserved */
    assert_int_equal(sizeof(stk_doctor_options), 8 + 8 + 8 + 8 + 8 + 48);
    /* cores, images_per_s, threads + bottleneck, 2 reserved */
    assert_int_equal(sizeof(stk_doctor_prediction), 16 + 8 + 16);
    /* kind + param, images_per_s, gain, measured + text[188], 2 reserved */
    assert_int_equal(sizeof(stk_doctor_recommendation), 8 + 16 + 192 + 16);
    /* format[32], dataset_samples, 4 x u32, 3 doubles, 4 x u32 (sizes),
     * 5 doubles (read, storage), cpu_limited + bottleneck, 7 doubles, 2 x u32,
     * 32 predictions, 8 recommendations, summary[256], first_skipped,
     * 7 reserved */
    assert_int_equal(sizeof(stk_doctor_report),
                     32 + 8 + 16 + 24 + 16 + 40 + 8 + 56 + 8 + 32 * 40 + 8 * 232 + 256 + 64);
}

enum { N = 64, H = 4, W = 4, C = 3 };

static stk_dataset *small_dataset(void)
{
    static uint8_t px[N * H * W * C];
    static int64_t labels[N];
    tu_fill_random(px, sizeof px, 7);
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_from_memory(px, labels, N, H, W, C, 1, &ds), 0);
    return ds;
}

static void expect_reserved_error(int rc, const char *what)
{
    assert_int_equal(rc, STK_EINVAL);
    char want[128];
    snprintf(want, sizeof want, "%s: reserved_[", what);
    assert_non_null(strstr(stk_errmsg(), want));
    assert_non_null(strstr(stk_errmsg(), "is not zero"));
}

static void test_caller_structs_refuse_reserved_words(void **state)
{
    (void)state;
    stk_dataset *ds = small_dataset();

    stk_loader_options lo = {0};
    stk_device_options dev = {0};
    dev.reserved_[NWORDS(dev.reserved_) - 1] = 1;
    lo.device = &dev;
    stk_loader *l = NULL;
    expect_reserved_error(stk_loader_create(ds, "to u8 hwc", &lo, &l), "stk_device_options");
    assert_null(l);
    assert_non_null(strstr(stk_errmsg(), "reserved_[4]"));
    memset(&dev, 0, sizeof dev);
    dev.reserved32_ = 1;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &lo, &l), STK_EINVAL);
    assert_null(l);
    assert_non_null(strstr(stk_errmsg(), "stk_device_options: reserved32_ is not zero"));

    stk_dataset_options dopt = {0};
    dopt.reserved_[0] = 42;
    stk_dataset *d2 = NULL;
    expect_reserved_error(stk_dataset_open("/nonexistent-but-not-looked-at", &dopt, &d2),
                          "stk_dataset_options");
    assert_null(d2);

    stk_sampling sg = {0};
    sg.reserved_[0] = 1;
    stk_sampler_options so = {.dataset_size = 10, .sampling = &sg};
    stk_sampler *s = NULL;
    expect_reserved_error(stk_sampler_create(&so, &s), "stk_sampling");
    assert_null(s);

    stk_pack_options po = {0};
    po.reserved_[3] = 1;
    expect_reserved_error(stk_pack("memory-not-read", tu_path("abi-pack"), &po, NULL),
                          "stk_pack_options");

    stk_verify_options vo = {0};
    vo.reserved_[1] = 1;
    expect_reserved_error(stk_verify(tu_path("abi-pack"), &vo, NULL), "stk_verify_options");

    stk_shard_writer_options swo = {0};
    swo.reserved_[2] = 1;
    stk_shard_field sf = {.name = "b", .type = STK_FIELD_BYTES};
    stk_shard_writer *sw = NULL;
    expect_reserved_error(stk_shard_writer_create(tu_path("abi-writer"), &sf, 1, &swo, &sw),
                          "stk_shard_writer_options");
    assert_null(sw);
    sf.reserved_[0] = 1;
    expect_reserved_error(stk_shard_writer_create(tu_path("abi-writer"), &sf, 1, NULL, &sw),
                          "stk_shard_field 0");
    assert_null(sw);

    stk_preview_options pv = {0};
    pv.reserved_[3] = 1;
    expect_reserved_error(stk_preview_write(ds, "to u8", &pv, tu_path("abi.png")),
                          "stk_preview_options");
    pv.reserved_[3] = 0;
    pv.reserved32_ = 1;
    assert_int_equal(stk_preview_write(ds, "to u8", &pv, tu_path("abi.png")), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "reserved32_ is not zero"));
    stk_doctor_options dov = {0};
    dov.reserved_[5] = 1;
    stk_doctor_report drep;
    expect_reserved_error(stk_doctor_run("/nonexistent-but-not-looked-at", "to u8", &dov, &drep),
                          "stk_doctor_options");

    /* state_set: a valid state from state_get, then one reserved word set */
    lo.device = NULL;
    lo.batch_size = 8;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &lo, &l), 0);
    stk_loader_state st;
    stk_loader_state_get(l, &st);
    assert_int_equal(stk_loader_state_set(l, &st), 0);
    st.reserved_[0] = 5;
    expect_reserved_error(stk_loader_state_set(l, &st), "stk_loader_state");
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

static int all_zero(const uint64_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (w[i])
            return 0;
    return 1;
}

static void test_library_structs_zero_reserved_words(void **state)
{
    (void)state;
    stk_dataset *ds = small_dataset();

    stk_dataset_info info;
    memset(&info, 0xff, sizeof info);
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, N);
    assert_true(all_zero(info.reserved_, NWORDS(info.reserved_)));

    stk_loader_options lo = {.batch_size = 16, .threads = 2};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &lo, &l), 0);
    stk_batch b;
    memset(&b, 0xff, sizeof b);
    assert_int_equal(stk_loader_next(l, &b), 1);
    assert_true(all_zero(b.reserved_, NWORDS(b.reserved_)));
    assert_int_equal(b.size, 16);

    stk_loader_state st;
    memset(&st, 0xff, sizeof st);
    stk_loader_state_get(l, &st);
    assert_true(all_zero(st.reserved_, NWORDS(st.reserved_)));
    assert_int_equal(st.position, 1);

    stk_loader_stats stats;
    memset(&stats, 0xff, sizeof stats);
    stk_loader_stats_get(l, &stats);
    assert_int_equal(stats.gpu_decode_cpu_rows, 0);
    assert_int_equal(stats.gpu_head_rows, 0);
    assert_int_equal(stats.batches, 1);

    assert_int_equal(stk_loader_release(l, &b), 0);
    stk_loader_destroy(l);
    stk_dataset_close(ds);

    /* Every op of the table, unused params included. */
    int nops = stk_op_describe(-1, NULL);
    assert_true(nops > 0);
    for (int i = 0; i < nops; i++) {
        stk_op_info op;
        memset(&op, 0xff, sizeof op);
        assert_int_equal(stk_op_describe(i, &op), nops);
        assert_non_null(op.name);
        assert_int_equal(op.reserved32_, 0);
        assert_true(all_zero(op.reserved_, NWORDS(op.reserved_)));
        for (int k = 0; k < STK_OP_MAX_PARAMS; k++)
            assert_true(all_zero(op.params[k].reserved_, NWORDS(op.params[k].reserved_)));
    }
}

static void test_batch_handle_catches_stale_and_forged_releases(void **state)
{
    (void)state;
    stk_dataset *ds = small_dataset();
    /* prefetch 1, max_batches 2: buffers are reused quickly */
    stk_loader_options lo = {.batch_size = 8, .threads = 1, .prefetch = 1, .max_batches = 2,
                             .no_shuffle = 1};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "to u8 hwc", &lo, &l), 0);

    stk_batch first, stale;
    assert_int_equal(stk_loader_next(l, &first), 1);
    stale = first;
    assert_int_equal(stk_loader_release(l, &first), 0);
    /* a second release of the same copy */
    assert_int_equal(stk_loader_release(l, &first), STK_ESTATE);
    assert_non_null(strstr(stk_errmsg(), "not lent"));

    /* lend every buffer again at least once: the stale copy's buffer is now
     * lent under a new handle, and releasing the stale copy must not free it */
    stk_batch again[2];
    assert_int_equal(stk_loader_next(l, &again[0]), 1);
    assert_int_equal(stk_loader_next(l, &again[1]), 1);
    assert_int_equal(stk_loader_release(l, &stale), STK_ESTATE);

    stk_batch forged = again[0];
    forged.handle ^= UINT64_C(1) << 40;
    assert_int_equal(stk_loader_release(l, &forged), STK_ESTATE);

    /* the genuine ones still release, and delivery goes on in order */
    assert_int_equal(again[0].position, 1);
    assert_int_equal(again[1].position, 2);
    assert_int_equal(stk_loader_release(l, &again[0]), 0);
    assert_int_equal(stk_loader_release(l, &again[1]), 0);
    stk_batch next;
    assert_int_equal(stk_loader_next(l, &next), 1);
    assert_int_equal(next.position, 3);
    assert_int_equal(next.indices[0], 3 * 8);
    assert_int_equal(stk_loader_release(l, &next), 0);
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

/* 5. The loader's parameters and statistics (docs/abi.md, "Parameters"):
 * keys pinned, the describe table's first rows pinned, the sized
 * statistics struct growing only at its end; the frozen structs have no
 * reserved word left, so a new option or statistic can only be a key. */
static void test_loader_params_are_pinned(void **state)
{
    (void)state;
    assert_int_equal(STK_LOADER_BATCH_SIZE, 1);
    assert_int_equal(STK_LOADER_THREADS, 2);
    assert_int_equal(STK_LOADER_PREFETCH, 3);
    assert_int_equal(STK_LOADER_MAX_BATCHES, 4);
    assert_int_equal(STK_LOADER_SEED, 5);
    assert_int_equal(STK_LOADER_SHUFFLE, 6);
    assert_int_equal(STK_LOADER_DROP_LAST, 7);
    assert_int_equal(STK_LOADER_RANK, 8);
    assert_int_equal(STK_LOADER_WORLD_SIZE, 9);
    assert_int_equal(STK_LOADER_ON_ERROR, 10);
    assert_int_equal(STK_LOADER_SHUFFLE_MODE, 11);
    assert_int_equal(STK_LOADER_BLOCK, 12);
    assert_int_equal(STK_LOADER_BLOCK_SIZE, 13);
    assert_int_equal(STK_LOADER_SHUFFLE_WINDOW, 14);
    assert_int_equal(STK_LOADER_AUGMENT_SEED, 15);
    assert_int_equal(STK_LOADER_VIEWS, 16);
    assert_int_equal(STK_LOADER_EAGER_START, 17);
    assert_int_equal(STK_LOADER_MEMORY_LIMIT, 18);
    assert_int_equal(STK_LOADER_FIELDS, 19);
    assert_int_equal(STK_LOADER_SAMPLING, 20);
    assert_int_equal(STK_LOADER_DEVICE_OPTIONS, 21);
    assert_int_equal(STK_LOADER_DEVICE, 22);
    assert_int_equal(STK_LOADER_PLACEMENT, 23);
    assert_int_equal(STK_LOADER_DECODER, 24);
    assert_int_equal(STK_LOADER_DECODE_BUDGET, 25);
    assert_int_equal(STK_PARAM_INT, 1);
    assert_int_equal(STK_PARAM_UINT, 2);
    assert_int_equal(STK_PARAM_FLOAT, 3);
    assert_int_equal(STK_PARAM_BOOL, 4);
    assert_int_equal(STK_PARAM_ENUM, 5);
    assert_int_equal(STK_PARAM_STRING, 6);
    assert_int_equal(STK_PARAM_POINTER, 7);
    assert_int_equal(STK_LOADER_STAT_SAMPLES, 1);
    assert_int_equal(STK_LOADER_STAT_WAIT_S, 9);
    assert_int_equal(STK_LOADER_STAT_GPU_HEAD_ROWS, 20);
    assert_int_equal(STK_LOADER_STAT_DECODE_BUDGET, 21);
    /* min, max, def, type + reserved32_ */
    assert_int_equal(sizeof(stk_param_bounds), 24 + 8);
    /* key, type, name, doc, values, min, max, def, 4 reserved */
    assert_int_equal(sizeof(stk_loader_param_info), 8 + 24 + 24 + 32);
    /* key + seconds, name, doc, 2 reserved */
    assert_int_equal(sizeof(stk_loader_stat_info), 8 + 16 + 16);
    /* size, then 21 statistics of 8 bytes, in key order; new ones append */
    assert_int_equal(offsetof(stk_loader_statistics, samples), 8);
    assert_int_equal(offsetof(stk_loader_statistics, read_s), 32);
    assert_int_equal(offsetof(stk_loader_statistics, batches_allocated), 88);
    assert_int_equal(offsetof(stk_loader_statistics, gpu_head_rows), 160);
    assert_int_equal(offsetof(stk_loader_statistics, decode_budget), 168);
    assert_true(sizeof(stk_loader_statistics) >= 176);

    /* The describe table's first rows: the keys and names a binding's
     * keyword arguments come from (the Python Loader's names). */
    static const struct {
        stk_loader_param key;
        const char *name;
        stk_param_type type;
        int64_t min, max, def;
    } first[] = {
        {STK_LOADER_BATCH_SIZE, "batch_size", STK_PARAM_UINT, 1, 0xffffffff, 256},
        {STK_LOADER_THREADS, "threads", STK_PARAM_UINT, 0, 1024, 0},
        {STK_LOADER_PREFETCH, "prefetch", STK_PARAM_UINT, 0, 4095, 0},
        {STK_LOADER_MAX_BATCHES, "max_batches", STK_PARAM_UINT, 0, 0xffffffff, 0},
        {STK_LOADER_SEED, "seed", STK_PARAM_UINT, 0, -1 /* UINT64_MAX */, 0},
        {STK_LOADER_SHUFFLE, "shuffle", STK_PARAM_BOOL, 0, 1, 1},
        {STK_LOADER_DROP_LAST, "drop_last", STK_PARAM_BOOL, 0, 1, 0},
        {STK_LOADER_WORLD_SIZE, "world_size", STK_PARAM_UINT, 1, 0xffffffff, 1},
        {STK_LOADER_RANK, "rank", STK_PARAM_UINT, 0, 0xffffffff, 0},
        {STK_LOADER_ON_ERROR, "on_error", STK_PARAM_ENUM, 0, 2, 0},
    };
    for (int i = 0; i < (int)NWORDS(first); i++) {
        stk_loader_param_info info;
        memset(&info, 0xff, sizeof info);
        assert_int_equal(stk_loader_param_describe(i, &info), 0);
        assert_int_equal(info.key, first[i].key);
        assert_string_equal(info.name, first[i].name);
        assert_int_equal(info.type, first[i].type);
        assert_int_equal(info.min, first[i].min);
        assert_int_equal(info.max, first[i].max);
        assert_int_equal(info.def, first[i].def);
        for (int w = 0; w < (int)NWORDS(info.reserved_); w++)
            assert_int_equal(info.reserved_[w], 0);
    }
    stk_loader_param_info info;
    assert_int_equal(stk_loader_param_describe(9, &info), 0);
    assert_string_equal(info.values, "raise,skip,replace");
    stk_param_bounds b;
    memset(&b, 0xff, sizeof b);
    assert_int_equal(stk_loader_param_bounds(STK_LOADER_DECODE_BUDGET, &b), 0);
    assert_int_equal(b.reserved32_, 0);
    assert_int_equal(b.type, STK_PARAM_UINT);
    stk_loader_stat_info si;
    memset(&si, 0xff, sizeof si);
    assert_int_equal(stk_loader_stat_describe(0, &si), 0);
    assert_int_equal(si.key, STK_LOADER_STAT_SAMPLES);
    assert_string_equal(si.name, "samples");
    assert_int_equal(si.reserved_[0] | si.reserved_[1], 0);
}

static void test_stk_free_accepts_library_buffers_and_null(void **state)
{
    (void)state;
    stk_free(NULL);
    stk_dataset *ds = small_dataset();
    void *data = NULL;
    size_t size = 0;
    uint32_t shape[3] = {0};
    assert_int_equal(stk_dataset_read_field(ds, 3, NULL, &data, &size, shape), 0);
    assert_int_equal(size, H * W * C);
    assert_int_equal(shape[0], H);
    stk_free(data);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_sizes_are_pinned),
        cmocka_unit_test(test_caller_structs_refuse_reserved_words),
        cmocka_unit_test(test_library_structs_zero_reserved_words),
        cmocka_unit_test(test_batch_handle_catches_stale_and_forged_releases),
        cmocka_unit_test(test_stk_free_accepts_library_buffers_and_null),
        cmocka_unit_test(test_loader_params_are_pinned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
