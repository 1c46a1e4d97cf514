/*
 * test_gpu_device.c — the CUDA device layer (src/gpu/device.c): device
 * names, the error a machine without a driver gives, and on the emulated
 * device (STOKER_CUDA_EMULATE=1), and on a real one where there is one:
 * memory round trips, streams and events, and launches of STK_K_OUT on a
 * hand-built batch checked against values computed by hand.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "gpu/device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tests of memory and launches run twice: on the emulated device
 * (always), and on the real cuda:0 when the driver and a GPU are there
 * (tests/gpu/run.sh's machines); without them the real run returns at
 * once (test_real_device_or_clear_error checks that case's error). */
static int real_device = 1;
#define ON_BOTH(t)                                                                         \
    cmocka_unit_test_prestate(t, NULL), cmocka_unit_test_prestate(t, &real_device)

/* Open the device a test runs on; 0 when the real one is not there. */
static int open_test_gpu(void **state, stk_gpu **g)
{
    *g = NULL;
    if (*state) {
        unsetenv("STOKER_CUDA_EMULATE");
        if (stk_gpu_open("cuda:0", g) < 0) {
            print_message("no real CUDA device: %s\n", stk_errmsg());
            return 0;
        }
        print_message("real device: %s\n", stk_gpu_name(*g));
        return 1;
    }
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    assert_int_equal(stk_gpu_open("cuda:0", g), 0);
    assert_true(stk_gpu_emulated(*g));
    return 1;
}

static void test_malformed_names(void **state)
{
    (void)state;
    static const char *const bad[] = {"cuda:x", "gpu:0",  "cuda:-1", "cuda:",  "",
                                      "cuda0",  "cuda:0x", "cuda:+1", "CUDA:0", "cuda:1 ",
                                      " cuda",  "cpu",    "cuda:99999999999"};
    setenv("STOKER_CUDA_EMULATE", "1", 1); /* malformed whether emulated or not */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        stk_gpu *g = (stk_gpu *)1;
        assert_int_equal(stk_gpu_open(bad[i], &g), STK_EINVAL);
        assert_null(g);
        assert_non_null(strstr(stk_errmsg(), "cuda:N"));
    }
    stk_gpu *g = (stk_gpu *)1;
    assert_int_equal(stk_gpu_open(NULL, &g), STK_EINVAL);
    assert_null(g);
    unsetenv("STOKER_CUDA_EMULATE");
    assert_int_equal(stk_gpu_open("cuda:x", &g), STK_EINVAL);
    stk_gpu_close(NULL);
}

/* Without emulation: a real device where there is one, else a message
 * saying what is missing (this project's CI has no driver). */
static void test_real_device_or_clear_error(void **state)
{
    (void)state;
    unsetenv("STOKER_CUDA_EMULATE");
    stk_gpu *g = NULL;
    int rc = stk_gpu_open("cuda:0", &g);
    if (rc == 0) {
        assert_false(stk_gpu_emulated(g));
        assert_int_equal(stk_gpu_ordinal(g), 0);
        assert_true(strlen(stk_gpu_name(g)) > 0);
        stk_gpu_close(g);
        return;
    }
    assert_int_equal(rc, STK_EUNSUPPORTED);
    assert_null(g);
    const char *msg = stk_errmsg();
    assert_non_null(strstr(msg, "cuda:0"));
    assert_non_null(strstr(msg, "STOKER_CUDA_EMULATE=1"));
    if (stk_gpu_fatbin_size == 0)
        assert_non_null(strstr(msg, "built without CUDA kernels"));
    else
        assert_non_null(strstr(msg, "libcuda.so.1"));
    /* the same answer the second time (the driver is looked for once) */
    assert_int_equal(stk_gpu_open("cuda", &g), STK_EUNSUPPORTED);
    assert_null(g);
}

static void test_emulated_open(void **state)
{
    (void)state;
    setenv("STOKER_CUDA_EMULATE", "1", 1);
    stk_gpu *g = NULL, *h = NULL;
    assert_int_equal(stk_gpu_open("cuda", &g), 0);
    assert_true(stk_gpu_emulated(g));
    assert_int_equal(stk_gpu_ordinal(g), 0);
    assert_string_equal(stk_gpu_name(g), "emulated CUDA device 0");
    assert_int_equal(stk_gpu_open("cuda:3", &h), 0);
    assert_int_equal(stk_gpu_ordinal(h), 3);
    assert_string_equal(stk_gpu_name(h), "emulated CUDA device 3");
    stk_gpu_close(h);
    stk_gpu_close(g);
    unsetenv("STOKER_CUDA_EMULATE");
}

static void test_memory(void **state)
{
    stk_gpu *g = NULL;
    if (!open_test_gpu(state, &g))
        return;
    enum { N = 1000 };
    uint8_t *host = NULL, back[N];
    uint64_t dev = 0;
    assert_int_equal(stk_gpu_host_alloc(g, N, (void **)&host), 0);
    assert_non_null(host);
    assert_int_equal(stk_gpu_dev_alloc(g, N, &dev), 0);
    assert_true(dev != 0);
    if (stk_gpu_emulated(g)) {
        /* fresh device memory is not zero (it is not on a GPU either) */
        assert_int_equal(stk_gpu_copy_d2h(g, back, dev, N, 0), 0);
        for (int i = 0; i < N; i++)
            assert_int_equal(back[i], 0xA5);
    }
    for (int i = 0; i < N; i++)
        host[i] = (uint8_t)(i * 7 + 3);
    uint64_t s = 0;
    assert_int_equal(stk_gpu_stream_create(g, &s), 0);
    assert_int_equal(stk_gpu_copy_h2d(g, dev, host, N, s), 0);
    assert_int_equal(stk_gpu_memset_d8(g, dev + 100, 0x5a, 50, s), 0);
    memset(back, 0, sizeof back);
    assert_int_equal(stk_gpu_copy_d2h(g, back, dev, N, s), 0);
    assert_int_equal(stk_gpu_stream_sync(g, s), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(back[i], i >= 100 && i < 150 ? 0x5a : (uint8_t)(i * 7 + 3));
    /* zero bytes: nothing allocated, nothing copied */
    void *none = (void *)1;
    uint64_t dnone = 1;
    assert_int_equal(stk_gpu_host_alloc(g, 0, &none), 0);
    assert_null(none);
    assert_int_equal(stk_gpu_dev_alloc(g, 0, &dnone), 0);
    assert_true(dnone == 0);
    assert_int_equal(stk_gpu_copy_h2d(g, 0, NULL, 0, s), 0);
    if (stk_gpu_emulated(g)) {
        /* a copy to NULL, or on something that is not a stream */
        assert_int_equal(stk_gpu_copy_h2d(g, 0, host, 4, s), STK_EINVAL);
        assert_int_equal(stk_gpu_copy_h2d(g, dev, host, 4, dev), STK_EINVAL);
    }
    stk_gpu_stream_destroy(g, s);
    stk_gpu_dev_free(g, dev);
    stk_gpu_host_free(g, host);
    stk_gpu_dev_free(g, 0);
    stk_gpu_host_free(g, NULL);
    stk_gpu_close(g);
    unsetenv("STOKER_CUDA_EMULATE");
}

static void test_streams_events(void **state)
{
    stk_gpu *g = NULL;
    if (!open_test_gpu(state, &g))
        return;
    uint64_t s1 = 0, s2 = 0, e = 0;
    assert_int_equal(stk_gpu_stream_create(g, &s1), 0);
    assert_int_equal(stk_gpu_stream_create(g, &s2), 0);
    assert_int_equal(stk_gpu_event_create(g, &e), 0);
    assert_true(s1 != 0 && s2 != 0 && e != 0 && s1 != s2);
    assert_int_equal(stk_gpu_event_record(g, e, s1), 0);
    assert_int_equal(stk_gpu_stream_wait_event(g, s2, e), 0);
    assert_int_equal(stk_gpu_stream_wait_event(g, 0, e), 0); /* the default stream */
    assert_int_equal(stk_gpu_event_sync(g, e), 0);
    assert_int_equal(stk_gpu_stream_sync(g, s1), 0);
    assert_int_equal(stk_gpu_stream_sync(g, s2), 0);
    assert_int_equal(stk_gpu_stream_sync(g, 0), 0);
    if (stk_gpu_emulated(g)) {
        /* handles of the wrong kind (a driver's behaviour there is undefined) */
        assert_int_equal(stk_gpu_event_record(g, s1, s2), STK_EINVAL);
        assert_int_equal(stk_gpu_event_record(g, e, e), STK_EINVAL);
        assert_int_equal(stk_gpu_event_record(g, 0, s1), STK_EINVAL);
        assert_int_equal(stk_gpu_stream_wait_event(g, e, e), STK_EINVAL);
        assert_int_equal(stk_gpu_event_sync(g, s1), STK_EINVAL);
        assert_int_equal(stk_gpu_stream_sync(g, e), STK_EINVAL);
    }
    stk_gpu_event_destroy(g, e);
    stk_gpu_stream_destroy(g, s2);
    stk_gpu_stream_destroy(g, s1);
    stk_gpu_event_destroy(g, 0);
    stk_gpu_stream_destroy(g, 0);
    stk_gpu_close(g);
    unsetenv("STOKER_CUDA_EMULATE");
}

/* A batch of two rows: row 1 a 2x3 RGB head the CPU resampled
 * (STK_GS_HEAD), row 0 left out (STK_GS_SKIP: its output untouched). */
enum { OH = 2, OW = 3, NC = 3 };

static const uint8_t head_px[OH * OW * NC] = {
    0,   10,  20,  30,  40,  50,  60,  70,  80,   /* row 0: x = 0, 1, 2 */
    102, 128, 255, 1,   2,   3,   200, 100, 50,   /* row 1 */
};

typedef struct launch_fixture {
    stk_gpu *g;
    uint64_t stage, samples, out, stream;
    stk_gpu_sample sm[2];
    stk_gpu_args a;
    size_t sample_bytes;
} launch_fixture;

/* 0 when the test's device is not there (the real one on this machine). */
static int fixture_open(void **state, launch_fixture *f, int dtype, int layout, size_t elem)
{
    memset(f, 0, sizeof *f);
    if (!open_test_gpu(state, &f->g))
        return 0;
    assert_int_equal(stk_gpu_stream_create(f->g, &f->stream), 0);
    /* the stage: 64 bytes of something else, then the head */
    uint8_t stage[64 + sizeof head_px];
    memset(stage, 0xEE, 64);
    memcpy(stage + 64, head_px, sizeof head_px);
    assert_int_equal(stk_gpu_dev_alloc(f->g, sizeof stage, &f->stage), 0);
    assert_int_equal(stk_gpu_copy_h2d(f->g, f->stage, stage, sizeof stage, f->stream), 0);
    f->sm[0].kind = STK_GS_SKIP;
    f->sm[0].out_row = 0;
    f->sm[1].kind = STK_GS_HEAD;
    f->sm[1].out_row = 1;
    f->sm[1].head = 64;
    f->sample_bytes = (size_t)OH * OW * NC * elem;
    assert_int_equal(stk_gpu_dev_alloc(f->g, 2 * f->sample_bytes, &f->out), 0);
    assert_int_equal(stk_gpu_memset_d8(f->g, f->out, 0x77, 2 * f->sample_bytes, f->stream), 0);
    stk_gpu_args *a = &f->a;
    a->stage = f->stage;
    a->out = f->out;
    a->sample_bytes = f->sample_bytes;
    a->n = 2;
    a->nc = NC;
    a->out_w = OW;
    a->out_h = OH;
    a->fmt.dtype = dtype;
    a->fmt.layout = layout;
    a->fmt.nc = NC;
    a->fmt.width = OW;
    a->fmt.height = OH;
    for (int c = 0; c < 3; c++) {
        a->fmt.scale[c] = (float)(c + 1);       /* v * (c + 1) - 0.5 * c: exact in float */
        a->fmt.bias[c] = -0.5f * (float)c;
        a->fmt.fscale[c] = 2.0f;                /* x * 2 - 1 */
        a->fmt.fbias[c] = -1.0f;
    }
    assert_int_equal(stk_gpu_stream_sync(f->g, f->stream), 0); /* stage[] goes out of scope */
    return 1;
}

static void fixture_launch(launch_fixture *f)
{
    assert_int_equal(stk_gpu_dev_alloc(f->g, sizeof f->sm, &f->samples), 0);
    assert_int_equal(stk_gpu_copy_h2d(f->g, f->samples, f->sm, sizeof f->sm, f->stream), 0);
    f->a.samples = f->samples;
    const uint32_t grid[3] = {(OW + STK_GPU_BLOCK - 1) / STK_GPU_BLOCK, OH, 2};
    const uint32_t block[3] = {STK_GPU_BLOCK, 1, 1};
    assert_int_equal(stk_gpu_launch(f->g, STK_K_OUT, grid, block, &f->a, sizeof f->a, f->stream),
                     0);
}

/* The whole output (both rows) back on the host. */
static void fixture_read(launch_fixture *f, void *out, size_t bytes)
{
    assert_int_equal(stk_gpu_copy_d2h(f->g, out, f->out, bytes, f->stream), 0);
    assert_int_equal(stk_gpu_stream_sync(f->g, f->stream), 0);
}

static void fixture_close(launch_fixture *f)
{
    stk_gpu_dev_free(f->g, f->samples);
    stk_gpu_dev_free(f->g, f->out);
    stk_gpu_dev_free(f->g, f->stage);
    stk_gpu_stream_destroy(f->g, f->stream);
    stk_gpu_close(f->g);
}

/* Row 0 (skipped) keeps the 0x77 the output was filled with. */
static void check_row0_untouched(const uint8_t *out, size_t sample_bytes)
{
    for (size_t i = 0; i < sample_bytes; i++)
        assert_int_equal(out[i], 0x77);
}

/* No colour steps, float32 CHW: out[c][y][x] = v * scale[c] + bias[c]. */
static void test_launch_out_f32_chw(void **state)
{
    launch_fixture f;
    if (!fixture_open(state, &f, STK_GD_F32, STK_GL_CHW, sizeof(float)))
        return;
    fixture_launch(&f);
    uint8_t out[2 * OH * OW * NC * sizeof(float)];
    fixture_read(&f, out, sizeof out);
    check_row0_untouched(out, f.sample_bytes);
    float got[OH * OW * NC];
    memcpy(got, out + f.sample_bytes, sizeof got);
    for (int c = 0; c < NC; c++)
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
                double v = head_px[(y * OW + x) * NC + c];
                double want = v * (c + 1) - 0.5 * c;
                assert_true(got[c * OH * OW + y * OW + x] == (float)want);
            }
    /* spot values by hand: R of (1,0) = 102; G of (1,0) = 128*2-0.5; B of (1,2) = 50*3-1 */
    assert_true(got[0 * 6 + 3] == 102.0f);
    assert_true(got[1 * 6 + 3] == 255.5f);
    assert_true(got[2 * 6 + 5] == 149.0f);
    fixture_close(&f);
}

/* No colour steps, uint8 HWC: the head itself. */
static void test_launch_out_u8_hwc(void **state)
{
    launch_fixture f;
    if (!fixture_open(state, &f, STK_GD_U8, STK_GL_HWC, 1))
        return;
    fixture_launch(&f);
    uint8_t out[2 * OH * OW * NC];
    fixture_read(&f, out, sizeof out);
    check_row0_untouched(out, f.sample_bytes);
    assert_memory_equal(out + f.sample_bytes, head_px, sizeof head_px);
    fixture_close(&f);
}

/* One brightness step (factor 0.5), float32 HWC: out = clamp(v/255 * 0.5) * 2 - 1. */
static void test_launch_out_brightness(void **state)
{
    launch_fixture f;
    if (!fixture_open(state, &f, STK_GD_F32, STK_GL_HWC, sizeof(float)))
        return;
    f.sm[1].nsteps = 1;
    f.sm[1].nseg = 1;
    f.sm[1].seg[0] = 0;
    f.sm[1].seg[1] = 1;
    f.sm[1].steps[0].kind = STK_GST_BRIGHT;
    f.sm[1].steps[0].f = 0.5f;
    f.sm[1].steps[0].g = 0.5f;
    fixture_launch(&f);
    uint8_t out[2 * OH * OW * NC * sizeof(float)];
    fixture_read(&f, out, sizeof out);
    check_row0_untouched(out, f.sample_bytes);
    float got[OH * OW * NC];
    memcpy(got, out + f.sample_bytes, sizeof got);
    for (int i = 0; i < OH * OW * NC; i++) {
        double want = head_px[i] / 255.0 * 0.5 * 2.0 - 1.0;
        assert_true(fabs(got[i] - want) < 1e-6);
    }
    assert_true(got[0] == -1.0f);        /* 0 -> -1 */
    assert_true(got[3 * 3 + 2] == 0.0f); /* 255 -> 0.5 -> 0 */
    fixture_close(&f);
}

/* What a launch refuses, in emulation as on a device. */
static void test_launch_refusals(void **state)
{
    launch_fixture f;
    if (!fixture_open(state, &f, STK_GD_F32, STK_GL_CHW, sizeof(float)))
        return;
    uint32_t grid[3] = {1, OH, 2}, block[3] = {STK_GPU_BLOCK, 1, 1};
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, grid, block, &f.a, sizeof f.a - 8, 0),
                     STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "bytes of arguments"));
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, grid, block, &f.a, sizeof f.a + 1, 0),
                     STK_EINVAL);
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, grid, block, NULL, sizeof f.a, 0), STK_EINVAL);
    assert_int_equal(stk_gpu_launch(f.g, STK_K_COUNT, grid, block, &f.a, sizeof f.a, 0),
                     STK_EINVAL);
    uint32_t g0[3] = {0, 1, 1}, b0[3] = {0, 1, 1}, big[3] = {STK_GPU_BLOCK * 2, 1, 1},
             gy[3] = {1, 70000, 1};
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, g0, block, &f.a, sizeof f.a, 0), STK_EINVAL);
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, grid, b0, &f.a, sizeof f.a, 0), STK_EINVAL);
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, grid, big, &f.a, sizeof f.a, 0), STK_EINVAL);
    assert_int_equal(stk_gpu_launch(f.g, STK_K_OUT, gy, block, &f.a, sizeof f.a, 0), STK_EINVAL);
    /* the output was not written by any of them */
    uint8_t out[2 * OH * OW * NC * sizeof(float)];
    fixture_read(&f, out, sizeof out);
    check_row0_untouched(out, sizeof out);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_names),
        cmocka_unit_test(test_real_device_or_clear_error),
        cmocka_unit_test(test_emulated_open),
        ON_BOTH(test_memory),
        ON_BOTH(test_streams_events),
        ON_BOTH(test_launch_out_f32_chw),
        ON_BOTH(test_launch_out_u8_hwc),
        ON_BOTH(test_launch_out_brightness),
        ON_BOTH(test_launch_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
