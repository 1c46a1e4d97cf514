/*
 * test_plugin.c — plugins for the tests of user-defined ops
 * (tests/test_user_ops.c, tests/python/test_user_ops.py), one source built
 * several ways (CMakeLists.txt):
 *
 *   (default)        stk_test_plugin: ops that fail and that change the shape
 *     test_fail V      STK_EDATA (a bad sample) when the first byte is V
 *     test_fatal       always fails with a code that is not stoker's (-1000)
 *     test_crop H W C  the top-left H x W, as C channels (gray <-> RGB by
 *                      copying channel 0), plus its params[0] (one u32 draw)
 *                      written nowhere: it only consumes the stream
 *   STK_TEST_BAD_ABI stk_test_plugin_badabi: registers an op built for op
 *                    ABI version STK_OP_ABI_VERSION + 1
 *   STK_TEST_NO_INIT stk_test_plugin_noinit: exports no stk_plugin_init
 *   STK_TEST_INIT_FAILS stk_test_plugin_initfails: stk_plugin_init returns STK_EINVAL
 */
#include <stoker/op.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#if defined(STK_TEST_NO_INIT)

EXPORT int stk_plugin_start(void);
EXPORT int stk_plugin_start(void) { return 0; }

#elif defined(STK_TEST_INIT_FAILS)

EXPORT int stk_plugin_init(const stk_plugin_host *h);
EXPORT int stk_plugin_init(const stk_plugin_host *h) { return STK_EINVAL; }

#else

static int run_copy(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                    char *err, size_t errsize)
{
    memcpy(out->pixels, in->pixels, (size_t)in->height * in->stride);
    return 0;
}

#if defined(STK_TEST_BAD_ABI)

EXPORT int stk_plugin_init(const stk_plugin_host *h);
EXPORT int stk_plugin_init(const stk_plugin_host *h)
{
    stk_user_op op = {.abi_version = STK_OP_ABI_VERSION + 1, .struct_size = sizeof op,
                      .name = "test_future", .run = run_copy};
    return h->register_op(h, &op);
}

#else

static const stk_plugin_host *host;

static int fail_parse(void *user, int argc, const char *const *argv, void **state, char *err,
                      size_t errsize)
{
    if (argc != 1) {
        snprintf(err, errsize, "expected one argument, the byte value V");
        return -1;
    }
    int *v = malloc(sizeof *v);
    if (!v)
        return -1;
    *v = atoi(argv[0]);
    *state = v;
    return 0;
}

static int fail_run(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                    char *err, size_t errsize)
{
    if (in->pixels[0] == *(const int *)state) {
        snprintf(err, errsize, "the first byte is %d", in->pixels[0]);
        return STK_EDATA;
    }
    return run_copy(state, params, in, out, err, errsize);
}

static int fatal_run(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                     char *err, size_t errsize)
{
    snprintf(err, errsize, "this op always fails");
    return -1000;
}

typedef struct crop_state {
    uint32_t h, w, c;
} crop_state;

static int crop_parse(void *user, int argc, const char *const *argv, void **state, char *err,
                      size_t errsize)
{
    if (argc != 3) {
        snprintf(err, errsize, "expected H W C");
        return -1;
    }
    crop_state *s = malloc(sizeof *s);
    if (!s)
        return -1;
    s->h = (uint32_t)atoi(argv[0]);
    s->w = (uint32_t)atoi(argv[1]);
    s->c = (uint32_t)atoi(argv[2]);
    *state = s;
    return 0;
}

static int crop_shape(void *state, const uint32_t in[3], uint32_t out[3], char *err,
                      size_t errsize)
{
    const crop_state *s = state;
    if (s->h > in[0] || s->w > in[1]) {
        snprintf(err, errsize, "the crop %ux%u is larger than the image", s->h, s->w);
        return -1;
    }
    out[0] = s->h;
    out[1] = s->w;
    out[2] = s->c;
    return 0;
}

static void crop_draw(void *state, stk_op_rng *rng, double *params)
{
    params[0] = (double)host->rng_u32(rng);
}

static int crop_run(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
                    char *err, size_t errsize)
{
    for (uint32_t y = 0; y < out->height; y++)
        for (uint32_t x = 0; x < out->width; x++)
            for (uint32_t c = 0; c < out->channels; c++)
                out->pixels[y * out->stride + x * out->channels + c] =
                    in->pixels[y * in->stride + x * in->channels +
                               (c < in->channels ? c : 0) * (in->channels == out->channels)];
    return 0;
}

EXPORT int stk_plugin_init(const stk_plugin_host *h);
EXPORT int stk_plugin_init(const stk_plugin_host *h)
{
    host = h;
    stk_user_op ops[] = {
        {.abi_version = STK_OP_ABI_VERSION, .struct_size = sizeof(stk_user_op),
         .name = "test_fail", .usage = "V", .parse = fail_parse, .run = fail_run, .free = free},
        {.abi_version = STK_OP_ABI_VERSION, .struct_size = sizeof(stk_user_op),
         .name = "test_fatal", .run = fatal_run},
        {.abi_version = STK_OP_ABI_VERSION, .struct_size = sizeof(stk_user_op),
         .name = "test_crop", .usage = "H W C", .parse = crop_parse, .output_shape = crop_shape,
         .draw = crop_draw, .run = crop_run, .free = free},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int rc = h->register_op(h, &ops[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

#endif
#endif
