/*
 * sampling_cost.c — what the sampling options (docs/sampler.md) cost per
 * position, measured on the sampler alone (no data read).
 *
 *   sampling_cost [N]
 *
 * For N samples (default 10^6), world size 1, epoch 1: nanoseconds per
 * stk_sampler_index call (it re-derives the epoch key every call; the loader
 * derives it once per chunk) for the plain global shuffle, a subset of N/2
 * indices, weights (an alias draw), num_samples = 3N (passes), class
 * balance over 1000 classes, and a mix of three sources; and the time to
 * build the alias table of N weights. Indicative only on a shared machine:
 * the coordinator runs the real measurement.
 */
#include <stoker/stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void run(const char *name, const stk_sampler_options *o)
{
    stk_sampler *s;
    double t = now();
    if (stk_sampler_create(o, &s) < 0) {
        fprintf(stderr, "%s: %s\n", name, stk_errmsg());
        exit(1);
    }
    double build = now() - t;
    uint64_t n = stk_sampler_length(s), acc = 0;
    t = now();
    for (uint64_t p = 0; p < n; p++)
        acc += stk_sampler_index(s, 1, p);
    t = now() - t;
    printf("%-26s %12llu %9.1f %10.1f   (checksum %llu)\n", name, (unsigned long long)n,
           t * 1e9 / (double)n, build * 1e3, (unsigned long long)acc);
    stk_sampler_destroy(s);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    if (n < 1000) {
        fprintf(stderr, "usage: sampling_cost [N >= 1000]\n");
        return 2;
    }
    double *w = malloc(n * sizeof *w);
    int64_t *labels = malloc(n * sizeof *labels);
    uint64_t *idx = malloc(n / 2 * sizeof *idx);
    if (!w || !labels || !idx)
        return 1;
    for (uint64_t i = 0; i < n; i++) {
        w[i] = 1 + (double)(i % 7);
        labels[i] = (int64_t)(i * i % 1000);
    }
    for (uint64_t i = 0; i < n / 2; i++)
        idx[i] = 2 * i;
    printf("%-26s %12s %9s %10s\n", "sampling", "entries", "ns/index", "create ms");
    stk_sampler_options o = {.dataset_size = n, .seed = 1};
    run("global", &o);
    stk_sampling sub = {.indices = idx, .num_indices = n / 2};
    o.sampling = &sub;
    run("indices (N/2)", &o);
    stk_sampling wt = {.weights = w, .num_weights = n};
    o.sampling = &wt;
    run("weights (alias)", &o);
    stk_sampling lab = {.labels = labels, .num_labels = n};
    o.sampling = &lab;
    run("class balance (1000)", &o);
    stk_sampling passes = {.num_samples = 3 * n};
    o.sampling = &passes;
    run("num_samples 3N", &o);
    uint64_t sizes[3] = {n / 2, n / 4, n - n / 2 - n / 4};
    double mw[3] = {1, 1, 2};
    stk_sampling mix = {.mix_sizes = sizes, .mix_weights = mw, .num_mix = 3};
    o.sampling = &mix;
    run("mix of 3 (1:1:2)", &o);
    free(w);
    free(labels);
    free(idx);
    return 0;
}
