/*
 * bench_augment.c — what the augmentation policies cost per image: the CPU
 * time of `random_resized_crop 224 | flip | POLICY | normalize imagenet |
 * to f32 chw` against the same pipeline without the policy, on the same
 * JPEGs, in one thread, the specs run alternately image by image so that
 * the load of a shared machine falls on all of them alike (thread CPU
 * time, CLOCK_THREAD_CPUTIME_ID).
 *
 *   bench_augment [ROUNDS] FILE...        (FILE "-": paths from stdin)
 *
 * Prints, per spec, microseconds of CPU per image, images per CPU-second,
 * and the difference from the pipeline without a policy.
 */
#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"
#include "ops/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const specs[] = {
    "random_resized_crop 224 | flip | normalize imagenet | to f32 chw",
    "random_resized_crop 224 | flip | trivial_augment_wide | normalize imagenet | to f32 chw",
    "random_resized_crop 224 | flip | rand_augment | normalize imagenet | to f32 chw",
    "random_resized_crop 224 | flip | auto_augment | normalize imagenet | to f32 chw",
    ("random_resized_crop 224 | flip | affine 15 translate=0.1,0.1 scale=0.9:1.1 shear=5 | "
     "normalize imagenet | to f32 chw"),
};
#define NSPECS ((int)(sizeof specs / sizeof specs[0]))

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(n > 0 ? (size_t)n : 1);
    int ok = *data && n > 0 && fread(*data, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    *size = (size_t)n;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    int a = 1, rounds = 3;
    if (argc > 2 && atoi(argv[1]) > 0 && strchr(argv[1], '.') == NULL &&
        strchr(argv[1], '/') == NULL) {
        rounds = atoi(argv[1]);
        a = 2;
    }
    if (argc <= a) {
        fprintf(stderr, "usage: bench_augment [ROUNDS] FILE... (FILE '-': paths on stdin)\n");
        return 2;
    }
    int cap = 1024, n = 0;
    uint8_t **data = malloc(sizeof *data * (size_t)cap);
    size_t *size = malloc(sizeof *size * (size_t)cap);
    char line[4096];
    for (int i = a; i < argc; i++) {
        int from_stdin = !strcmp(argv[i], "-");
        while (1) {
            const char *path = argv[i];
            if (from_stdin) {
                if (!fgets(line, sizeof line, stdin))
                    break;
                line[strcspn(line, "\n")] = 0;
                path = line;
            }
            if (n == cap) {
                cap *= 2;
                data = realloc(data, sizeof *data * (size_t)cap);
                size = realloc(size, sizeof *size * (size_t)cap);
            }
            if (read_file(path, &data[n], &size[n]) == 0)
                n++;
            else
                fprintf(stderr, "%s: cannot read\n", path);
            if (!from_stdin)
                break;
        }
    }
    stk_plan *plans[NSPECS];
    for (int s = 0; s < NSPECS; s++)
        if (stk_plan_compile(specs[s], 0, 0, 0, &plans[s]) < 0) {
            fprintf(stderr, "%s: %s\n", specs[s], stk_errmsg());
            return 1;
        }
    void *out = malloc(224 * 224 * 3 * 4);
    stk_scratch sc = {0};
    double cpu[NSPECS] = {0};
    long done = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < NSPECS; k++) {
                int s = (k + i) % NSPECS; /* rotate the order too */
                stk_rng rng;
                stk_rng_init(&rng, 1, 0, (uint64_t)r, (uint64_t)i);
                stk_plan_input in = {.image = NULL, .encoded = data[i], .encoded_size = size[i]};
                double t0 = cpu_now();
                int rc = stk_plan_run_input(plans[s], &in, &rng, out, &sc);
                cpu[s] += cpu_now() - t0;
                if (rc < 0) {
                    fprintf(stderr, "image %d: %s\n", i, stk_errmsg());
                    return 1;
                }
            }
            done++;
        }
    printf("%ld images per spec, 1 thread, CPU time\n", done);
    for (int s = 0; s < NSPECS; s++)
        printf("%8.1f us/image %7.0f images/CPU-s  %+7.1f us  %s\n", 1e6 * cpu[s] / (double)done,
               (double)done / cpu[s], 1e6 * (cpu[s] - cpu[0]) / (double)done, specs[s]);
    stk_scratch_free(&sc);
    for (int s = 0; s < NSPECS; s++)
        stk_plan_free(plans[s]);
    return 0;
}
