/*
 * bench_codec.c — decode time per image for the codec (src/codec/), full
 * size and with the region/scale tricks a RandomResizedCrop pipeline uses.
 *
 *   bench_codec [--repeat R] FILE...
 *
 * All files are read into memory first (I/O is not measured). For each
 * mode and file the decode is timed R times (default 5), with one scratch
 * buffer reused as a loader thread does, and the fastest is kept: on a
 * shared machine the minimum of a 1-3 ms call is the figure least disturbed
 * by other processes. Reported: the mean over files of those minima, in
 * milliseconds per image, and megapixels per second of pixels delivered.
 * Modes:
 *
 *   full 1/1     the whole image at full size
 *   crop50 1/1   a centred region of half the area (sides * 0.7071)
 *   crop50 1/2   the same region at 1/2 scale (DCT scaling)
 *   crop25 1/1   a centred region of a quarter of the area
 *   full 1/2, full 1/4, full 1/8
 *
 * One thread; run it on an idle machine. The figures in docs/codec.md come
 * from this program.
 */
#include "codec/codec.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct input {
    uint8_t *data;
    size_t size;
    uint32_t w, h;
} input;

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p;
    long len;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
        fclose(f);
        return NULL;
    }
    rewind(f);
    p = malloc((size_t)len + 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* A centred region with `frac` of the area. */
static stk_rect centred(const input *in, double frac)
{
    stk_rect r;
    double s = sqrt(frac);
    r.width = (uint32_t)(in->w * s + 0.5);
    r.height = (uint32_t)(in->h * s + 0.5);
    if (r.width < 1)
        r.width = 1;
    if (r.height < 1)
        r.height = 1;
    r.x = (in->w - r.width) / 2;
    r.y = (in->h - r.height) / 2;
    return r;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        double frac; /* 0 = whole image */
        unsigned scale;
    } modes[] = {
        {"full   1/1", 0, 1}, {"crop50 1/1", 0.5, 1}, {"crop50 1/2", 0.5, 2},
        {"crop25 1/1", 0.25, 1}, {"full   1/2", 0, 2}, {"full   1/4", 0, 4},
        {"full   1/8", 0, 8},
    };
    input *in;
    size_t n = 0;
    int repeat = 5, first = 1;
    stk_scratch s = {0};
    stk_image_view v;

    if (argc > 2 && strcmp(argv[1], "--repeat") == 0) {
        repeat = atoi(argv[2]);
        first = 3;
    }
    if (first >= argc || repeat < 1) {
        fprintf(stderr, "usage: bench_codec [--repeat R] FILE...\n");
        return 1;
    }
    in = calloc((size_t)(argc - first), sizeof *in);
    if (!in)
        return 1;
    for (int i = first; i < argc; i++) {
        stk_image_info info;
        input *x = &in[n];
        x->data = slurp(argv[i], &x->size);
        if (!x->data || stk_image_probe(x->data, x->size, NULL, &info) != 0) {
            fprintf(stderr, "bench_codec: skipping %s: %s\n", argv[i],
                    x->data ? stk_errmsg() : "cannot read");
            free(x->data);
            continue;
        }
        x->w = info.width;
        x->h = info.height;
        n++;
    }
    if (n == 0)
        return 1;

    printf("%zu images, each decode timed alone, best of %d per image and mode, one thread\n",
           n, repeat);
    printf("%-12s %10s %10s\n", "mode", "ms/image", "MP/s out");
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        double total = 0, px = 0;
        for (size_t i = 0; i < n; i++) {
            stk_rect reg = centred(&in[i], modes[m].frac);
            double best = 1e30;
            for (int r = 0; r < repeat; r++) {
                double t0 = stk_now(), t;
                int rc = stk_image_decode(in[i].data, in[i].size, NULL,
                                          modes[m].frac > 0 ? &reg : NULL, modes[m].scale, &s,
                                          &v);
                t = stk_now() - t0;
                if (rc) {
                    fprintf(stderr, "bench_codec: %s\n", stk_errmsg());
                    return 1;
                }
                if (t < best)
                    best = t;
            }
            total += best;
            px += (double)v.width * v.height;
        }
        printf("%-12s %10.3f %10.1f\n", modes[m].name, total * 1e3 / (double)n, px / total / 1e6);
    }
    for (size_t i = 0; i < n; i++)
        free(in[i].data);
    free(in);
    stk_scratch_free(&s);
    return 0;
}
