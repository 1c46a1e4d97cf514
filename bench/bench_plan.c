/*
 * bench_plan.c — samples per second of the fused pipeline kernel on one core.
 *
 * Not a test: a timing program, built by hand (CMake has no bench target):
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_plan.c \
 *      build/libstoker.a -lm -lpthread -lz -o bench_plan
 *   ./bench_plan [seconds-per-case]
 *
 * Each case compiles a spec for a source layout (planar CHW as CIFAR
 * stores it, or interleaved HWC), then runs stk_plan_run on one source image
 * with a fresh per-sample rng stream (as the loader does: stk_rng_init per
 * sample, so the rng cost is included), writing into a rotating batch of
 * SLOTS outputs (default 256, like a batch buffer; env SLOTS overrides).
 * Reports the best of 5 trials, samples/s and ns/sample, for the SSE2
 * ("portable", the x86-64 baseline) and the best available kernel.
 */
#include "core/rng.h"
#include "core/util.h"
#include "ops/kernel.h"
#include "ops/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bcase {
    const char *spec;
    uint32_t h, w, c;
    int planar; /* source CHW planar (CIFAR) or HWC interleaved */
} bcase;

static double run_case(const bcase *bc, double seconds, int portable)
{
    stk_kernel_force_isa(portable ? STK_ISA_SSE2 : STK_ISA_AUTO);
    stk_plan *p;
    if (stk_plan_compile(bc->spec, bc->h, bc->w, bc->c, &p) < 0) {
        fprintf(stderr, "%s\n", stk_errmsg());
        exit(1);
    }
    size_t bytes;
    stk_plan_output(p, NULL, NULL, NULL, &bytes);
    size_t npix = (size_t)bc->h * bc->w * bc->c;
    uint8_t *src = malloc(npix);
    for (size_t i = 0; i < npix; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    size_t SLOTS = getenv("SLOTS") ? (size_t)atoi(getenv("SLOTS")) : 256;
    uint8_t *out = stk_aligned_alloc(bytes * SLOTS);
    memset(out, 0, bytes * SLOTS);
    stk_image_view v = {src, bc->h, bc->w, bc->c, 0, 0, 0};
    if (bc->planar) {
        v.row_stride = bc->w;
        v.col_stride = 1;
        v.chan_stride = (ptrdiff_t)bc->h * bc->w;
    } else {
        v.row_stride = (ptrdiff_t)bc->w * bc->c;
        v.col_stride = bc->c;
        v.chan_stride = 1;
    }
    /* Best of 5 trials: the machine is shared, the best is the least
     * disturbed. */
    double best = 0;
    uint64_t n = 0;
    for (int trial = 0; trial < 5; trial++) {
        uint64_t n0 = n;
        double t0 = stk_now(), t;
        do {
            for (int k = 0; k < 4096; k++, n++) {
                stk_rng rng;
                stk_rng_init(&rng, 42, STK_RNG_DOMAIN_SAMPLE, 0, n);
                stk_plan_run(p, &v, &rng, out + (n % SLOTS) * bytes);
            }
            t = stk_now() - t0;
        } while (t < seconds / 5);
        double rate = (double)(n - n0) / t;
        if (rate > best)
            best = rate;
    }
    stk_aligned_free(out);
    free(src);
    stk_plan_free(p);
    return best;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    static const bcase cases[] = {
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw", 32, 32, 3, 1},
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f16 chw", 32, 32, 3, 1},
        {"pad 4 | random_crop 32 | flip | to u8 hwc", 32, 32, 3, 1},
        {"pad 4 | random_crop 32 | flip | to u8 chw", 32, 32, 3, 1},
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 hwc", 32, 32, 3, 1},
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw", 32, 32, 3, 0},
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 hwc", 32, 32, 3, 0},
        {"pad 4 | random_crop 32 | flip | to u8 hwc", 32, 32, 3, 0},
        {"", 32, 32, 3, 1},
        {"normalize mnist", 28, 28, 1, 0},
        {"pad 2 mode=reflect | random_crop 28 | normalize mnist | to f16", 28, 28, 1, 0},
        {"center_crop 224 | flip | normalize imagenet | to f32 chw", 256, 256, 3, 0},
    };
    printf("isa available: %s\n", stk_kernel_isa());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bcase *bc = &cases[i];
        double port = run_case(bc, secs, 1);
        double best = run_case(bc, secs, 0);
        printf("%-66s %ux%ux%u %-6s portable %10.0f/s (%6.1f ns)  %s %10.0f/s (%6.1f ns)\n",
               bc->spec[0] ? bc->spec : "(empty)", bc->h, bc->w, bc->c,
               bc->planar ? "planar" : "hwc", port, 1e9 / port, stk_kernel_isa(), best,
               1e9 / best);
    }
    return 0;
}
