/*
 * test_gpu_pipeline.c — the CUDA backend's image pipeline, run on the
 * emulated device (STOKER_CUDA_EMULATE=1; src/gpu/stage.c, kernels.h):
 * for every preset and a set of specs covering each GPU kernel (resample
 * with both flips, point-op tables before and after the resize, every
 * colour step in drawn order, grayscale, each output dtype and layout,
 * views), every placement gives batches byte-identical to the loader
 * without a device — images, labels and indices, over two shuffled
 * epochs with a partial last batch, two threads, and the skip policy on a
 * corrupt sample. The reference is the CPU pipeline, itself checked
 * against Pillow/torchvision in tests/python. Also: rows too large for
 * the staging memory (raw images of 700 px at scale 1) take the head
 * fallback and still match; the kernels one launch per op
 * (STOKER_GPU_KERNELS=per-op) and with the fused vertical pass + output
 * give the same batches, and the device timing counts each way's launches;
 * decoder nvjpeg sends a restart-marked JPEG whose scan is cut short to
 * the CPU (nvJPEG would decode it without an error); placement gpu refuses
 * an op it lacks and names it; a device without a driver is
 * STK_EUNSUPPORTED.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_write.h"
#include "core/util.h"
#include "testutil.h"

#define NSAMPLES 13

typedef struct sample {
    uint8_t *bytes; /* JPEG, or raw pixels */
    size_t size;
    uint32_t h, w;  /* raw: > 0 */
} sample;

static sample samples[NSAMPLES];

static int setup(void **state)
{
    (void)state;
    /* JPEGs of assorted sizes and aspects (DCT scales 1 to 1/8 for a
     * 64-pixel output), raw images (scale 1; the 700-pixel ones exceed a
     * row's staging share), one corrupt sample. */
    static const int sizes[NSAMPLES][3] = {
        {375, 500, 0}, {500, 333, 0}, {64, 64, 0},   {1200, 900, 0}, {81, 223, 0},
        {700, 700, 1}, {240, 320, 0}, {50, 47, 1},   {333, 500, 0},  {2000, 1500, 0},
        {700, 690, 1}, {96, 128, 0},  {0, 0, 2}};
    for (int i = 0; i < NSAMPLES; i++) {
        int h = sizes[i][0], w = sizes[i][1];
        sample *s = &samples[i];
        if (sizes[i][2] == 2) {
            s->bytes = (uint8_t *)strdup("\xff\xd8 not a JPEG");
            s->size = 14;
            continue;
        }
        uint8_t *rgb = tu_smooth_image(h, w, i);
        if (sizes[i][2] == 1) {
            s->bytes = rgb;
            s->size = (size_t)h * w * 3;
            s->h = (uint32_t)h;
            s->w = (uint32_t)w;
        } else {
            s->bytes = tu_encode_jpeg(rgb, h, w, 90, &s->size);
            free(rgb);
        }
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NSAMPLES; i++)
        free(samples[i].bytes);
    return 0;
}

static int read_sample(void *user, uint64_t index, stk_callback_sample *out)
{
    (void)user;
    const sample *s = &samples[index];
    out->data = s->bytes;
    out->size = s->size;
    if (s->h) {
        out->height = s->h;
        out->width = s->w;
        out->channels = 3;
    }
    out->label = (int64_t)index * 3;
    return 0;
}

static stk_dataset *open_dataset(uint64_t count)
{
    stk_dataset_callbacks cb = {0};
    cb.read = read_sample;
    stk_callback_options o = {0};
    o.count = count;
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_from_callbacks(&cb, NULL, &o, &ds), 0);
    return ds;
}

typedef struct run {
    uint8_t *bytes;
    size_t nbytes;
    int64_t labels[4 * NSAMPLES * 4];
    uint64_t indices[4 * NSAMPLES * 4];
    uint32_t rows;
    uint64_t head_rows;
    uint32_t decode_cpu_rows;
    stk_device_timing timing; /* with a device that runs kernels */
} run;

/* Two epochs of `spec`, all batches' bytes appended. */
static int drain(stk_dataset *ds, const char *spec, const stk_device_options *dev, uint32_t views,
                 run *r)
{
    stk_loader_options o = {0};
    o.batch_size = 5;
    o.threads = 2;
    o.seed = 7;
    o.views = views;
    o.on_error = STK_ON_ERROR_SKIP;
    o.device = dev;
    stk_loader *l = NULL;
    memset(r, 0, sizeof *r);
    int rc = stk_loader_create(ds, spec, &o, &l);
    if (rc < 0)
        return rc;
    for (int epoch = 0; epoch < 2; epoch++) {
        stk_batch b;
        while ((rc = stk_loader_next(l, &b)) == 1) {
            /* host memory: 0 without a device, STK_DEVICE_HOST emulated */
            assert_true(b.device_type == 0 || b.device_type == STK_DEVICE_HOST);
            size_t n = (size_t)b.size * b.sample_bytes;
            r->bytes = realloc(r->bytes, r->nbytes + n + 1);
            assert_non_null(r->bytes);
            memcpy(r->bytes + r->nbytes, b.data, n);
            r->nbytes += n;
            assert_true(r->rows + b.size <= sizeof r->labels / sizeof r->labels[0]);
            memcpy(r->labels + r->rows, b.labels, b.size * sizeof *b.labels);
            memcpy(r->indices + r->rows, b.indices, b.size * sizeof *b.indices);
            r->rows += b.size;
            assert_int_equal(stk_loader_batch_wait(l, &b, 0), 0);
            assert_int_equal(stk_loader_release(l, &b), 0);
        }
        if (rc < 0)
            fail_msg("%s: %s", spec, stk_errmsg());
    }
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    r->head_rows = st.gpu_head_rows;
    r->decode_cpu_rows = st.gpu_decode_cpu_rows;
    rc = stk_loader_device_timing(l, &r->timing);
    if (!dev)
        assert_int_equal(rc, STK_EUNSUPPORTED);
    stk_loader_destroy(l);
    return 0;
}

static const char *const specs[] = {
    "imagenet-train-few",
    "imagenet-train-extensive",
    "imagenet-val",
    "random_resized_crop 64 | flip 0.5 | color_jitter 0.4 0.4 0.4 0.1 | normalize imagenet | "
    "to f16 chw",
    "resize 72 | center_crop 64 | posterize 4 | to u8 hwc",
    "random_resized_crop 48 | invert 0.5 | grayscale 0.5 | vflip 0.5 | to bf16 hwc",
    "solarize 100 | random_resized_crop 40 scale=0.5,1 | color_jitter 0.5 0.9 0 0.3 | "
    "color_jitter 0.2 0.6 0.5 | to u8 chw",
    "resize 50,40 | flip 0.5 | normalize 0.5,0.4,0.3 0.2,0.25,0.3 | to f32 hwc",
};

static void test_placements_match_cpu(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    stk_dataset *ds = open_dataset(NSAMPLES);
    uint64_t head_rows = 0;
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        uint32_t views = k == 1 ? 2 : 1;
        run ref;
        if (drain(ds, specs[k], NULL, views, &ref) < 0)
            fail_msg("%s: %s", specs[k], stk_errmsg());
        assert_true(ref.rows > 0);
        for (int pl = STK_PLACE_AUTO; pl <= STK_PLACE_GPU; pl++) {
            stk_device_options dev = {0};
            dev.device = "cuda:0";
            dev.placement = (stk_placement)pl;
            run got;
            int rc = drain(ds, specs[k], &dev, views, &got);
            if (rc < 0)
                fail_msg("%s, placement %d: %s", specs[k], pl, stk_errmsg());
            assert_int_equal(got.rows, ref.rows);
            assert_int_equal(got.nbytes, ref.nbytes);
            if (memcmp(got.bytes, ref.bytes, ref.nbytes) != 0) {
                size_t i = 0;
                while (got.bytes[i] == ref.bytes[i])
                    i++;
                fail_msg("%s, placement %d: byte %zu differs (%u vs %u)", specs[k], pl, i,
                         got.bytes[i], ref.bytes[i]);
            }
            assert_memory_equal(got.labels, ref.labels, ref.rows * sizeof ref.labels[0]);
            assert_memory_equal(got.indices, ref.indices, ref.rows * sizeof ref.indices[0]);
            head_rows += got.head_rows;
            free(got.bytes);
        }
        free(ref.bytes);
    }
    /* The two 700-pixel raw images at scale 1 exceed their share of the
     * staging memory at least once: the fallback was taken and matched. */
    assert_true(head_rows > 0);
    stk_dataset_close(ds);
    unsetenv("STOKER_CUDA_EMULATE");
}

/* The fused STK_K_VOUT (the default) runs for batches in which no row has
 * a contrast step; per-op runs VPASS then OUT. Same bytes either way, and
 * the timing says which ran: per batch, fused saves the VPASS launch. */
static void test_kernels_fused_and_per_op(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    stk_dataset *ds = open_dataset(NSAMPLES);
    /* specs[2], [4], [5], [7] have no contrast step; [1] always has one */
    static const size_t which[] = {2, 4, 5, 7, 1};
    for (size_t w = 0; w < sizeof which / sizeof which[0]; w++) {
        size_t k = which[w];
        uint32_t views = k == 1 ? 2 : 1;
        int contrast = k == 1;
        stk_device_options dev = {0};
        dev.device = "cuda:0";
        dev.placement = STK_PLACE_GPU;
        run ref, fused, perop;
        if (drain(ds, specs[k], NULL, views, &ref) < 0)
            fail_msg("%s: %s", specs[k], stk_errmsg());
        unsetenv("STOKER_GPU_KERNELS");
        if (drain(ds, specs[k], &dev, views, &fused) < 0)
            fail_msg("%s, fused: %s", specs[k], stk_errmsg());
        setenv("STOKER_GPU_KERNELS", "per-op", 1);
        if (drain(ds, specs[k], &dev, views, &perop) < 0)
            fail_msg("%s, per-op: %s", specs[k], stk_errmsg());
        unsetenv("STOKER_GPU_KERNELS");
        assert_int_equal(fused.nbytes, ref.nbytes);
        assert_int_equal(perop.nbytes, ref.nbytes);
        assert_memory_equal(fused.bytes, ref.bytes, ref.nbytes);
        assert_memory_equal(perop.bytes, ref.bytes, ref.nbytes);
        /* Timed batches: two epochs of 3 (13 samples, one skipped, 5 a
         * batch) through a pool of a few slots: some slots were reused. */
        const stk_device_timing *f = &fused.timing, *p = &perop.timing;
        assert_true(f->batches > 0 && p->batches > 0);
        assert_true(f->kernel_s > 0 && p->kernel_s > 0);
        assert_int_equal(p->fused_batches, 0);
        assert_int_equal(f->fused_batches, contrast ? 0 : f->batches);
        assert_int_equal(f->decode_batches, 0);
        /* per op: [HPASS] VPASS OUT; fused: [HPASS] VOUT */
        /* with a contrast step: + ROWSUM IMGSUM per contrast, both ways */
        if (contrast) {
            assert_true(p->launches >= 4 * p->batches);
            assert_true(f->launches >= 4 * f->batches);
        } else {
            assert_true(p->launches >= 2 * p->batches && p->launches <= 3 * p->batches);
            assert_true(f->launches >= f->batches && f->launches <= 2 * f->batches);
        }
        free(ref.bytes);
        free(fused.bytes);
        free(perop.bytes);
    }
    /* A value it does not know is refused, by name. */
    setenv("STOKER_GPU_KERNELS", "fast", 1);
    stk_device_options dev = {0};
    dev.device = "cuda:0";
    dev.placement = STK_PLACE_GPU;
    run r;
    assert_int_equal(drain(ds, "imagenet-val", &dev, 1, &r), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "STOKER_GPU_KERNELS=fast"));
    unsetenv("STOKER_GPU_KERNELS");
    stk_dataset_close(ds);
    unsetenv("STOKER_CUDA_EMULATE");
}

/* Decoder nvjpeg on the emulated device (whose nvJPEG is libjpeg-turbo):
 * the JPEG rows are staged as bytes and decoded at submit into the work
 * arena, the rest take the CPU path; batches equal the CPU loader's. */
static void test_nvjpeg_decoder_matches_cpu(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    stk_dataset *ds = open_dataset(NSAMPLES);
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        uint32_t views = k == 1 ? 2 : 1;
        run ref, got;
        if (drain(ds, specs[k], NULL, views, &ref) < 0)
            fail_msg("%s: %s", specs[k], stk_errmsg());
        stk_device_options dev = {0};
        dev.device = "cuda:0";
        dev.placement = STK_PLACE_GPU;
        dev.decoder = STK_DECODER_NVJPEG;
        if (drain(ds, specs[k], &dev, views, &got) < 0)
            fail_msg("%s, decoder nvjpeg: %s", specs[k], stk_errmsg());
        assert_int_equal(got.rows, ref.rows);
        assert_int_equal(got.nbytes, ref.nbytes);
        assert_memory_equal(got.bytes, ref.bytes, ref.nbytes);
        assert_memory_equal(got.labels, ref.labels, ref.rows * sizeof ref.labels[0]);
        assert_memory_equal(got.indices, ref.indices, ref.rows * sizeof ref.indices[0]);
        /* 9 valid JPEGs a view an epoch: only rows whose point op before
         * the resize was drawn (solarize, p 0.5: it runs on the source
         * pixels) and regions too large for the arena go to the CPU. */
        if (got.decode_cpu_rows >= 2 * 9 * views)
            fail_msg("%s: %u rows decoded on the CPU", specs[k], got.decode_cpu_rows);
        assert_true(got.timing.decode_batches > 0);
        free(got.bytes);
        free(ref.bytes);
    }
    /* solarize drawn for every row (p=1): every JPEG goes to the CPU (the
     * rows staged ahead of the last batch may count too). */
    {
        const char *spec = "solarize 100 p=1 | random_resized_crop 40 | to u8 hwc";
        run ref, got;
        stk_device_options dev = {0};
        dev.device = "cuda:0";
        dev.placement = STK_PLACE_GPU;
        dev.decoder = STK_DECODER_NVJPEG;
        if (drain(ds, spec, NULL, 1, &ref) < 0 || drain(ds, spec, &dev, 1, &got) < 0)
            fail_msg("%s: %s", spec, stk_errmsg());
        assert_int_equal(got.nbytes, ref.nbytes);
        assert_memory_equal(got.bytes, ref.bytes, ref.nbytes);
        if (got.decode_cpu_rows < 2 * 9)
            fail_msg("%s: %u rows decoded on the CPU", spec, got.decode_cpu_rows);
        free(got.bytes);
        free(ref.bytes);
    }
    /* It needs the GPU's augmentation: placement cpu is refused, by name. */
    stk_device_options dev = {0};
    dev.device = "cuda:0";
    dev.placement = STK_PLACE_CPU;
    dev.decoder = STK_DECODER_NVJPEG;
    run r;
    assert_int_equal(drain(ds, "imagenet-val", &dev, 1, &r), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "decoder nvjpeg"));
    dev.placement = STK_PLACE_GPU;
    dev.decoder = (stk_decoder)7;
    assert_int_equal(drain(ds, "imagenet-val", &dev, 1, &r), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "decoder 7"));
    stk_dataset_close(ds);
    unsetenv("STOKER_CUDA_EMULATE");
}

/* decoder nvjpeg's guard (stk_jpeg_scan_check): of a complete
 * restart-marked JPEG, the same cut in half with an EOI appended, and a
 * plain JPEG cut the same way, only the cut restart-marked one is staged
 * for the CPU (counted in gpu_decode_cpu_rows): its scan is checked before
 * the hand-over. The plain one reaches the decoder (on a device nvJPEG
 * takes it silently: docs/gpu.md, "Damaged files"; here the emulated
 * decoder is libjpeg-turbo, which finds it). Both cut ones are skipped. */
static sample guard[3];

/* user: the guard sample each index reads (int[2]) */
static int read_guard(void *user, uint64_t index, stk_callback_sample *out)
{
    const sample *g = &guard[((const int *)user)[index]];
    out->data = g->bytes;
    out->size = g->size;
    out->label = (int64_t)index;
    return 0;
}

static uint8_t *cut_with_eoi(const uint8_t *d, size_t n, size_t *out)
{
    size_t half = n / 2;
    uint8_t *c = malloc(half + 2);
    assert_non_null(c);
    memcpy(c, d, half);
    c[half] = 0xFF;
    c[half + 1] = 0xD9;
    *out = half + 2;
    return c;
}

static void test_nvjpeg_guard_sends_cut_restart_scans_to_the_cpu(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    uint8_t *rgb = tu_smooth_image(240, 320, 5);
    size_t plain_n;
    uint8_t *plain = tu_encode_jpeg(rgb, 240, 320, 90, &plain_n);
    free(rgb);
    stk_scratch rst = {0};
    size_t rst_n;
    assert_int_equal(stk_jpeg_add_restarts(plain, plain_n, 1u << 26, 4, &rst, &rst_n), 1);
    guard[0].bytes = malloc(rst_n);
    assert_non_null(guard[0].bytes);
    memcpy(guard[0].bytes, rst.data, rst_n);
    guard[0].size = rst_n;
    guard[1].bytes = cut_with_eoi(rst.data, rst_n, &guard[1].size);
    guard[2].bytes = cut_with_eoi(plain, plain_n, &guard[2].size);
    stk_scratch_free(&rst);
    free(plain);

    /* The complete one with each cut one in turn: the same rows as the CPU
     * path (the cut one skipped); only with the cut restart-marked one are
     * rows decoded on the CPU. */
    static const int pairs[2][2] = {{0, 1}, {0, 2}};
    uint32_t cpu_rows[2];
    for (int k = 0; k < 2; k++) {
        stk_dataset_callbacks cb = {0};
        cb.read = read_guard;
        stk_callback_options co = {0};
        co.count = 2;
        stk_dataset *ds = NULL;
        assert_int_equal(stk_dataset_from_callbacks(&cb, (void *)pairs[k], &co, &ds), 0);
        const char *spec = "resize 64,64 | to u8 hwc";
        stk_device_options dev = {0};
        dev.device = "cuda:0";
        dev.placement = STK_PLACE_GPU;
        dev.decoder = STK_DECODER_NVJPEG;
        run ref, got;
        if (drain(ds, spec, NULL, 1, &ref) < 0 || drain(ds, spec, &dev, 1, &got) < 0)
            fail_msg("%s: %s", spec, stk_errmsg());
        assert_int_equal(ref.rows, 2); /* the complete one, each epoch */
        assert_int_equal(got.rows, 2);
        assert_int_equal(got.indices[0], 0);
        assert_int_equal(got.indices[1], 0);
        assert_memory_equal(got.bytes, ref.bytes, ref.nbytes);
        cpu_rows[k] = got.decode_cpu_rows;
        free(ref.bytes);
        free(got.bytes);
        stk_dataset_close(ds);
    }
    assert_true(cpu_rows[0] >= 2); /* each epoch (and maybe rows staged ahead) */
    assert_int_equal(cpu_rows[1], 0);
    for (int i = 0; i < 3; i++)
        free(guard[i].bytes);
    unsetenv("STOKER_CUDA_EMULATE");
}

static void test_gpu_placement_refuses_missing_kernels(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    stk_dataset *ds = open_dataset(4);
    static const char *const cpu_only[][2] = {
        {"random_resized_crop 32 | rotate 10 | to f32 chw", "rotate"},
        {"random_resized_crop 32 | random_erasing 0.5 | to f32 chw", "random_erasing"},
        {"random_resized_crop 32 | gaussian_blur 3 | to f32 chw", "gaussian_blur"},
    };
    for (size_t k = 0; k < sizeof cpu_only / sizeof cpu_only[0]; k++) {
        stk_device_options dev = {0};
        dev.device = "cuda:0";
        dev.placement = STK_PLACE_GPU;
        stk_loader_options o = {0};
        o.device = &dev;
        stk_loader *l = NULL;
        assert_int_equal(stk_loader_create(ds, cpu_only[k][0], &o, &l), STK_EINVAL);
        assert_null(l);
        assert_non_null(strstr(stk_errmsg(), cpu_only[k][1]));
        /* auto: the same spec runs (on the CPU) and matches */
        dev.placement = STK_PLACE_AUTO;
        run ref, got;
        assert_int_equal(drain(ds, cpu_only[k][0], NULL, 1, &ref), 0);
        assert_int_equal(drain(ds, cpu_only[k][0], &dev, 1, &got), 0);
        assert_int_equal(got.nbytes, ref.nbytes);
        assert_memory_equal(got.bytes, ref.bytes, ref.nbytes);
        free(ref.bytes);
        free(got.bytes);
    }
    stk_device_options dev = {0};
    dev.device = "cuda:0";
    dev.placement = (stk_placement)7;
    stk_loader_options o = {0};
    o.device = &dev;
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, "imagenet-val", &o, &l), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "placement"));
    dev.placement = STK_PLACE_AUTO;
    dev.flags = 1;
    assert_int_equal(stk_loader_create(ds, "imagenet-val", &o, &l), STK_EINVAL);
    stk_dataset_close(ds);
    unsetenv("STOKER_CUDA_EMULATE");
}

static void test_no_driver_is_unsupported(void **state)
{
    (void)state;
    unsetenv("STOKER_CUDA_EMULATE");
    stk_dataset *ds = open_dataset(4);
    stk_device_options dev = {0};
    dev.device = "cuda:0";
    stk_loader_options o = {0};
    o.device = &dev;
    stk_loader *l = NULL;
    int rc = stk_loader_create(ds, "imagenet-val", &o, &l);
    if (rc == 0) { /* a machine with a GPU and its driver */
        stk_loader_destroy(l);
    } else {
        assert_int_equal(rc, STK_EUNSUPPORTED);
        assert_true(strstr(stk_errmsg(), "libcuda") ||
                    strstr(stk_errmsg(), "without CUDA kernels"));
    }
    /* "cpu" and "" are host memory */
    dev.device = "cpu";
    assert_int_equal(stk_loader_create(ds, "imagenet-val", &o, &l), 0);
    stk_loader_destroy(l);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placements_match_cpu),
        cmocka_unit_test(test_kernels_fused_and_per_op),
        cmocka_unit_test(test_nvjpeg_decoder_matches_cpu),
        cmocka_unit_test(test_nvjpeg_guard_sends_cut_restart_scans_to_the_cpu),
        cmocka_unit_test(test_gpu_placement_refuses_missing_kernels),
        cmocka_unit_test(test_no_driver_is_unsupported),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
