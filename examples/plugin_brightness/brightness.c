/*
 * brightness.c — an example stoker plugin: two user-defined ops written
 * against stoker's installed header <stoker/op.h> (docs/ops.md walks
 * through it).
 *
 *   brightness FACTOR           every pixel v -> the value stoker's
 *                               `color_jitter brightness=F:F` gives on a
 *                               uint8 image written as uint8: ToTensor
 *                               (v / 255 in float), times F, clamped to
 *                               [0, 1], times 255, rounded half to even.
 *   random_brightness LO HI     the same with F drawn per sample, uniform
 *                               in [LO, HI], from the sample's stream.
 *
 * Build it with the CMakeLists.txt beside it (pkg-config finds the
 * installed stoker), then use it from a spec:
 *
 *     plugin ./build/libstoker_brightness.so | resize 64,64 | brightness 1.5
 *
 * or load it first (stk_plugin_load, `stoker --plugin PATH`,
 * `stoker.load_plugin(PATH)`) and write `brightness 1.5`.
 *
 * The plugin calls stoker only through the host table it is handed, so it
 * does not link libstoker and works in any program that loads it (the
 * Python module links stoker statically).
 */
#include <stoker/op.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const stk_plugin_host *host; /* set once by stk_plugin_init */

/* A number in [0, 100] from one argument; -1 with a message otherwise. */
static int parse_factor(const char *text, double *out, char *err, size_t errsize)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !(v >= 0.0 && v <= 100.0)) {
        snprintf(err, errsize, "expected a factor from 0 to 100, got '%s'", text);
        return -1;
    }
    *out = v;
    return 0;
}

/* One pixel value, as the built-in op computes it in float32. */
static uint8_t bright(uint8_t v, float f)
{
    float x = f * ((float)v / 255.0f); /* ToTensor, then adjust_brightness */
    x = x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
    return (uint8_t)lrintf(x * 255.0f); /* round half to even */
}

/* --- brightness FACTOR: a table per spec, built by parse ----------------- */

typedef struct table_state {
    uint8_t lut[256];
} table_state;

static int table_parse(void *user, int argc, const char *const *argv, void **state, char *err,
                       size_t errsize)
{
    double f;
    if (argc != 1) {
        snprintf(err, errsize, "expected one argument, the factor, got %d", argc);
        return -1;
    }
    if (parse_factor(argv[0], &f, err, errsize) < 0)
        return -1;
    table_state *s = malloc(sizeof *s);
    if (!s) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    for (int v = 0; v < 256; v++)
        s->lut[v] = bright((uint8_t)v, (float)f);
    *state = s;
    return 0;
}

static int table_run(void *state, const double *params, const stk_op_image *in,
                     stk_op_image *out, char *err, size_t errsize)
{
    const table_state *s = state;
    for (uint32_t y = 0; y < in->height; y++) {
        const uint8_t *src = in->pixels + y * in->stride;
        uint8_t *dst = out->pixels + y * out->stride;
        for (size_t i = 0; i < (size_t)in->width * in->channels; i++)
            dst[i] = s->lut[src[i]];
    }
    return 0;
}

/* --- random_brightness LO HI: one draw per sample ------------------------ */

typedef struct range_state {
    double lo, hi;
} range_state;

static int range_parse(void *user, int argc, const char *const *argv, void **state, char *err,
                       size_t errsize)
{
    range_state r;
    if (argc != 2) {
        snprintf(err, errsize, "expected two arguments, LO and HI, got %d", argc);
        return -1;
    }
    if (parse_factor(argv[0], &r.lo, err, errsize) < 0 ||
        parse_factor(argv[1], &r.hi, err, errsize) < 0)
        return -1;
    if (r.lo > r.hi) {
        snprintf(err, errsize, "LO %g is above HI %g", r.lo, r.hi);
        return -1;
    }
    range_state *s = malloc(sizeof *s);
    if (!s) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    *s = r;
    *state = s;
    return 0;
}

/* The factor of this sample: the only randomness, from stoker's stream. */
static void range_draw(void *state, stk_op_rng *rng, double *params)
{
    const range_state *s = state;
    params[0] = s->lo + (s->hi - s->lo) * host->rng_uniform(rng);
}

static int range_run(void *state, const double *params, const stk_op_image *in,
                     stk_op_image *out, char *err, size_t errsize)
{
    float f = (float)params[0];
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = bright((uint8_t)v, f);
    for (uint32_t y = 0; y < in->height; y++) {
        const uint8_t *src = in->pixels + y * in->stride;
        uint8_t *dst = out->pixels + y * out->stride;
        for (size_t i = 0; i < (size_t)in->width * in->channels; i++)
            dst[i] = lut[src[i]];
    }
    return 0;
}

/* --- registration --------------------------------------------------------- */

__attribute__((visibility("default"))) int stk_plugin_init(const stk_plugin_host *h);

int stk_plugin_init(const stk_plugin_host *h)
{
    if (h->abi_version != STK_OP_ABI_VERSION)
        return -1; /* (register_op would refuse our ops with a message, too) */
    host = h;
    stk_user_op table = {
        .abi_version = STK_OP_ABI_VERSION,
        .struct_size = sizeof(stk_user_op),
        .name = "brightness",
        .usage = "FACTOR",
        .parse = table_parse,
        .run = table_run,
        .free = free,
    };
    int rc = h->register_op(h, &table);
    if (rc < 0)
        return rc;
    stk_user_op range = {
        .abi_version = STK_OP_ABI_VERSION,
        .struct_size = sizeof(stk_user_op),
        .name = "random_brightness",
        .usage = "LO HI",
        .parse = range_parse,
        .draw = range_draw,
        .run = range_run,
        .free = free,
    };
    return h->register_op(h, &range);
}
