/*
 * image_ops_dump.c — runs single image-pipeline operations on files and
 * writes raw results, so tests/python/test_image_ops_torchvision.py can
 * compare them with Pillow and torchvision, and prints what a plan decided
 * (the DCT scale histogram of bench figures).
 *
 *   image_ops_dump [--isa c|avx2|avx512] resize IN OUT H W C OH OW [X0 Y0 X1 Y1]
 *       IN: H x W x C uint8 (C 1 or 3); OUT: OH x OW x C uint8, as Pillow's
 *       Image.resize((OW, OH), BILINEAR, box=(X0, Y0, X1, Y1)).
 *   image_ops_dump [--isa ..] color OP FACTOR IN OUT H W C
 *       OP brightness|contrast|saturation|hue; IN/OUT float32 C x H x W.
 *   image_ops_dump [--isa ..] rotate DEGREES FILL IN OUT H W C
 *       FILL one value in [0, 1] (or C comma-separated); float32 CHW.
 *   image_ops_dump [--isa ..] run SPEC FILE OUT SEED [INDEX]
 *       run a variable-size plan on one encoded image, stream (SEED, epoch
 *       0, INDEX); OUT gets the sample; prints the trace as JSON.
 *   image_ops_dump [--isa ..] runraw SPEC IN H W C OUT SEED [INDEX]
 *       the same on a raw H x W x C uint8 image (variable-size plan).
 *   image_ops_dump aug PRIM MAGNITUDE FILL IN OUT H W C
 *       one augmentation primitive (ops/augment.h: PRIM is torchvision's
 *       name, ShearX ... Invert) with the magnitude torchvision's _apply_op
 *       receives, on H x W x C uint8 HWC; FILL one value 0-255.
 *   image_ops_dump trace SPEC SEED FILE...   (FILE "-": paths from stdin)
 *       the trace of each file (one JSON line each; index = its position),
 *       then the DCT scale histogram.
 *   image_ops_dump rrc SPEC H W N SEED
 *       N draws of the spec's geometry on an H x W raw image: one line
 *       "attempt x y w h hflip" per draw.
 */
#include "core/error.h"
#include "core/rng.h"
#include "ops/augment.h"
#include "ops/color.h"
#include "ops/kernel.h"
#include "ops/plan.h"
#include "ops/resample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || (n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static void write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "%s: write failed\n", path);
        exit(2);
    }
}

static void die(int rc)
{
    fprintf(stderr, "error %d (%s): %s\n", rc, stk_strerror(rc), stk_errmsg());
    exit(1);
}

static void print_trace(const char *name, const stk_plan_trace *t)
{
    printf("{\"file\": \"%s\", \"src\": [%u, %u], \"resized\": %d, \"rrc_attempt\": %d, "
           "\"box\": [%lld, %lld, %lld, %lld], \"scale\": [%.17g, %.17g], \"off\": [%d, %d], "
           "\"scale_denom\": %u, \"region\": [%u, %u, %u, %u], \"hflip\": %d, \"vflip\": %d, "
           "\"angle\": [",
           name, t->src_width, t->src_height, t->resized, t->rrc_attempt, (long long)t->box[0],
           (long long)t->box[1], (long long)t->box[2], (long long)t->box[3], t->scale[0],
           t->scale[1], t->off[0], t->off[1], t->scale_denom, t->region[0], t->region[1],
           t->region[2], t->region[3], t->hflip, t->vflip);
    for (int i = 0; i < t->nrot; i++)
        printf("%s%.17g", i ? ", " : "", t->angle[i]);
    printf("], \"perm\": [");
    for (int i = 0; t->njitter && i < 4; i++)
        printf("%s%d", i ? ", " : "", t->perm[i]);
    printf("], \"factor\": [");
    for (int i = 0; t->njitter && i < 4; i++) {
        if (isnan(t->factor[i]))
            printf("%snull", i ? ", " : "");
        else
            printf("%s%.17g", i ? ", " : "", t->factor[i]);
    }
    printf("], \"ngray\": %d, \"nblur\": %d, \"sigma\": %.17g, \"applied\": %d, "
           "\"nerase\": %d, \"erase\": [%d, %d, %d, %d]",
           t->ngray, t->nblur, t->sigma, t->applied, t->nerase, t->erase[0], t->erase[1],
           t->erase[2], t->erase[3]);
    printf(", \"affine\": [");
    for (int i = 0; i < t->nrot; i++) {
        if (!t->rot_affine[i]) {
            printf("%snull", i ? ", " : "");
            continue;
        }
        printf("%s[", i ? ", " : "");
        for (int k = 0; k < 6; k++)
            printf("%s%.17g", k ? ", " : "", t->affine[i][k]);
        printf("]");
    }
    printf("], \"aug\": [");
    for (int i = 0; i < t->naug; i++)
        printf("%s[\"%s\", %d, %d, %.17g]", i ? ", " : "", stk_aug_name(t->aug_prim[i]),
               t->aug_bin[i], t->aug_neg[i], t->aug_mag[i]);
    printf("], \"float_ops\": [");
    for (int i = 0; i < t->nfloat; i++) {
        printf("%s[\"%s\", [", i ? ", " : "", t->float_name[i]);
        for (int k = 0; k < 8; k++)
            printf("%s%.17g", k ? ", " : "", t->float_param[i][k]);
        printf("]]");
    }
    printf("]}\n");
}

static int run_plan(const char *spec, const stk_plan_input *in, uint64_t seed, uint64_t index,
                    const char *out_path, const char *name)
{
    stk_plan *p;
    int rc = stk_plan_compile(spec, 0, 0, 0, &p);
    if (rc < 0)
        die(rc);
    size_t bytes;
    stk_plan_output(p, NULL, NULL, NULL, &bytes);
    void *out = malloc(bytes);
    stk_scratch sc = {NULL, 0};
    stk_rng rng;
    stk_plan_trace tr;
    stk_rng_init(&rng, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    if ((rc = stk_plan_trace_input(p, in, &rng, &tr)) < 0)
        die(rc);
    stk_rng_init(&rng, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    if ((rc = stk_plan_run_input(p, in, &rng, out, &sc)) < 0)
        die(rc);
    write_all(out_path, out, bytes);
    print_trace(name, &tr);
    stk_scratch_free(&sc);
    free(out);
    stk_plan_free(p);
    return 0;
}

int main(int argc, char **argv)
{
    int a = 1;
    if (argc > 2 && !strcmp(argv[1], "--isa")) {
        /* c, avx2 or avx512 (the best one is the default) */
        stk_kernel_force_isa(!strcmp(argv[2], "c") ? STK_ISA_C : STK_ISA_AVX2);
        if (!strcmp(argv[2], "avx2"))
            setenv("STK_NO_AVX512", "1", 1);
        a = 3;
    }
    if (argc - a < 1) {
        fprintf(stderr, "usage: see the comment at the top of bench/image_ops_dump.c\n");
        return 2;
    }
    const char *cmd = argv[a];
    char **v = argv + a + 1;
    int n = argc - a - 1;

    if (!strcmp(cmd, "resize") && (n == 8 || n == 12)) {
        size_t sz;
        uint8_t *in = read_all(v[0], &sz);
        uint32_t h = (uint32_t)atoi(v[2]), w = (uint32_t)atoi(v[3]), c = (uint32_t)atoi(v[4]);
        uint32_t oh = (uint32_t)atoi(v[5]), ow = (uint32_t)atoi(v[6]);
        double box[4], *bp = NULL;
        if (n == 12) {
            for (int i = 0; i < 4; i++)
                box[i] = atof(v[8 + i]);
            bp = box;
        }
        (void)v[7];
        if (sz != (size_t)h * w * c) {
            fprintf(stderr, "resize: input is %zu bytes, want %u\n", sz, h * w * c);
            return 2;
        }
        uint8_t *out = malloc((size_t)oh * ow * c);
        int rc = stk_rs_resize_u8(in, h, w, (ptrdiff_t)w * c, (int)c, bp, oh, ow, out, NULL);
        if (rc < 0)
            die(rc);
        write_all(v[1], out, (size_t)oh * ow * c);
        return 0;
    }
    if (!strcmp(cmd, "aug") && n == 8) {
        size_t sz;
        int prim = -1;
        for (int k = 0; k < STK_AUG_NPRIM; k++)
            if (!strcmp(v[0], stk_aug_name(k)))
                prim = k;
        int h = atoi(v[5]), w = atoi(v[6]), c = atoi(v[7]);
        uint8_t fill[3];
        fill[0] = fill[1] = fill[2] = (uint8_t)atoi(v[2]);
        uint8_t *img = read_all(v[3], &sz);
        if (prim < 0 || sz != (size_t)h * w * c || (c != 1 && c != 3)) {
            fprintf(stderr, "aug: bad primitive or size\n");
            return 2;
        }
        uint8_t *tmp = malloc(sz);
        uint8_t *res = stk_aug_apply(prim, atof(v[1]), fill, img, tmp, w, h, c);
        write_all(v[4], res, sz);
        free(tmp);
        free(img);
        return 0;
    }
    if (!strcmp(cmd, "color") && n == 7) {
        size_t sz;
        float *img = read_all(v[2], &sz);
        int h = atoi(v[4]), w = atoi(v[5]), c = atoi(v[6]);
        double f = atof(v[1]);
        int32_t np = h * w;
        float *p[3] = {img, img + (c > 1 ? np : 0), img + (c > 2 ? 2 * np : 0)};
        const stk_color_kernels *k = stk_color_kernels_get();
        if (!strcmp(v[0], "brightness")) {
            k->brightness(p, np, c, (float)f);
        } else if (!strcmp(v[0], "contrast")) {
            double s = k->gray_sum(p, np, c);
            float mean = (float)(s / np);
            k->contrast(p, np, c, (float)f, (float)(1.0 - f) * mean);
        } else if (!strcmp(v[0], "saturation")) {
            k->saturation(p, np, c, (float)f, (float)(1.0 - f));
        } else if (!strcmp(v[0], "hue")) {
            k->hue(p, np, c, (float)f);
        } else {
            fprintf(stderr, "unknown op %s\n", v[0]);
            return 2;
        }
        write_all(v[3], img, sz);
        return 0;
    }
    if (!strcmp(cmd, "rotate") && n == 7) {
        size_t sz;
        float *img = read_all(v[2], &sz);
        int h = atoi(v[4]), w = atoi(v[5]), c = atoi(v[6]);
        float fill[3] = {0, 0, 0};
        char *s = v[1];
        for (int i = 0; i < 3 && *s; i++) {
            fill[i] = strtof(s, &s);
            if (*s == ',')
                s++;
            if (i == 0)
                fill[1] = fill[2] = fill[0];
        }
        stk_rotation r;
        stk_rotation_init(&r, atof(v[0]), w, h, fill, 3);
        float *out = malloc(sz);
        const stk_color_kernels *k = stk_color_kernels_get();
        for (int y = 0; y < h; y++) {
            float *p[3];
            for (int q = 0; q < c; q++)
                p[q] = out + (size_t)q * h * w + (size_t)y * w;
            k->rotate_row(&r, img, c, y, p);
        }
        write_all(v[3], out, sz);
        return 0;
    }
    if (!strcmp(cmd, "run") && (n == 4 || n == 5)) {
        size_t sz;
        uint8_t *data = read_all(v[1], &sz);
        stk_plan_input in = {.image = NULL, .encoded = data, .encoded_size = sz};
        return run_plan(v[0], &in, strtoull(v[3], NULL, 10), n == 5 ? strtoull(v[4], NULL, 10) : 0,
                        v[2], v[1]);
    }
    if (!strcmp(cmd, "runraw") && (n == 7 || n == 8)) {
        size_t sz;
        uint8_t *px = read_all(v[1], &sz);
        uint32_t h = (uint32_t)atoi(v[2]), w = (uint32_t)atoi(v[3]), c = (uint32_t)atoi(v[4]);
        stk_image_view view = {px, h, w, c, (ptrdiff_t)w * c, (ptrdiff_t)c, 1};
        stk_plan_input in = {.image = &view, .encoded = NULL, .encoded_size = 0};
        return run_plan(v[0], &in, strtoull(v[6], NULL, 10), n == 8 ? strtoull(v[7], NULL, 10) : 0,
                        v[5], v[1]);
    }
    if (!strcmp(cmd, "trace") && n >= 3) {
        stk_plan *p;
        int rc = stk_plan_compile(v[0], 0, 0, 0, &p);
        if (rc < 0)
            die(rc);
        uint64_t seed = strtoull(v[1], NULL, 10), hist[9] = {0}, bad = 0, index = 0;
        int from_stdin = n == 3 && !strcmp(v[2], "-");
        char line[4096];
        for (int i = 2;; i++) {
            const char *path;
            if (from_stdin) {
                if (!fgets(line, sizeof line, stdin))
                    break;
                line[strcspn(line, "\r\n")] = '\0';
                if (!line[0])
                    continue;
                path = line;
            } else {
                if (i >= n)
                    break;
                path = v[i];
            }
            size_t sz;
            uint8_t *data = read_all(path, &sz);
            stk_plan_input in = {.image = NULL, .encoded = data, .encoded_size = sz};
            stk_rng rng;
            stk_plan_trace tr;
            stk_rng_init(&rng, seed, STK_RNG_DOMAIN_SAMPLE, 0, index++);
            if (stk_plan_trace_input(p, &in, &rng, &tr) < 0) {
                bad++;
            } else {
                hist[tr.scale_denom]++;
                print_trace(path, &tr);
            }
            free(data);
        }
        printf("{\"scale_histogram\": {\"1\": %llu, \"2\": %llu, \"4\": %llu, \"8\": %llu}, "
               "\"errors\": %llu}\n",
               (unsigned long long)hist[1], (unsigned long long)hist[2],
               (unsigned long long)hist[4], (unsigned long long)hist[8],
               (unsigned long long)bad);
        stk_plan_free(p);
        return 0;
    }
    if (!strcmp(cmd, "rrc") && n == 5) {
        stk_plan *p;
        int rc = stk_plan_compile(v[0], 0, 0, 0, &p);
        if (rc < 0)
            die(rc);
        uint32_t h = (uint32_t)atoi(v[1]), w = (uint32_t)atoi(v[2]);
        long cnt = atol(v[3]);
        uint64_t seed = strtoull(v[4], NULL, 10);
        uint8_t px[3] = {0, 0, 0};
        /* A zero-stride view: any size without the memory. */
        stk_image_view view = {px, h, w, 3, 0, 0, 1};
        stk_plan_input in = {.image = &view, .encoded = NULL, .encoded_size = 0};
        for (long i = 0; i < cnt; i++) {
            stk_rng rng;
            stk_plan_trace tr;
            stk_rng_init(&rng, seed, STK_RNG_DOMAIN_SAMPLE, 0, (uint64_t)i);
            if ((rc = stk_plan_trace_input(p, &in, &rng, &tr)) < 0)
                die(rc);
            printf("%d %lld %lld %lld %lld %d\n", tr.rrc_attempt, (long long)tr.box[0],
                   (long long)tr.box[1], (long long)tr.box[2], (long long)tr.box[3], tr.hflip);
        }
        stk_plan_free(p);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of bench/image_ops_dump.c\n");
    return 2;
}
