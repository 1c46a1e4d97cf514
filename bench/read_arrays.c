/*
 * read_arrays.c — random-order raw reads from array datasets (zarr:, npy:,
 * .npz, .stk, any URI whose samples are raw pixels): what the loader's
 * workers do before augmenting, without the pipeline.
 *
 *   read_arrays [--threads 2] [--reps 3] [--seed 1] [--sequential] URI...
 *
 * Each URI is opened once; every run reads every sample once, in one
 * seeded random permutation (the same for every URI of the same count),
 * split into contiguous slices of that order, one per thread. A thread
 * keeps one stk_scratch across its reads (as a loader worker does, so the
 * zarr chunk cache works as it does in training) and sums every 64th byte
 * of each view, so every page of every sample comes in; the sums must
 * agree between URIs of the same data (printed). Reported per URI: the
 * median over --reps runs (runs taken in rounds, every URI once per round,
 * so load from elsewhere spreads over all of them) of samples/s and of
 * samples per CPU-second (user + sys of the process), as one JSON line.
 * Warm page cache only: run it once first to warm.
 */
#include "core/util.h"
#include "format/dataset.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_URIS 8
#define MAX_REPS 15

typedef struct job {
    stk_dataset *ds;
    const uint64_t *order;
    uint64_t from, to;
    uint64_t sum, failed;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    stk_scratch s = {0};
    uint64_t sum = 0;
    for (uint64_t k = j->from; k < j->to; k++) {
        stk_sample smp;
        if (j->ds->vt->read(j->ds, j->order[k], &smp, &s) < 0) {
            j->failed++;
            continue;
        }
        const stk_image_view *v = &smp.image;
        size_t row = (size_t)v->width * v->channels;
        for (uint32_t y = 0; y < v->height; y++) {
            const uint8_t *p = v->pixels + y * v->row_stride;
            for (size_t x = 0; x < row; x += 64)
                sum += p[x];
        }
    }
    j->sum = sum;
    stk_scratch_free(&s);
    return NULL;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned threads = 2, reps = 3, sequential = 0;
    uint64_t seed = 1;
    const char *uris[MAX_URIS];
    int nuris = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--sequential"))
            sequential = 1;
        else if (argv[i][0] != '-' && nuris < MAX_URIS)
            uris[nuris++] = argv[i];
        else {
            fprintf(stderr, "usage: read_arrays [--threads T] [--reps R] [--seed S] "
                            "[--sequential] URI...\n");
            return 2;
        }
    }
    if (!nuris || threads < 1 || threads > 64 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "read_arrays: need 1-%d URIs, 1-64 threads, 1-%d reps\n", MAX_URIS,
                MAX_REPS);
        return 2;
    }
    stk_dataset *ds[MAX_URIS];
    uint64_t *order[MAX_URIS];
    double wall[MAX_URIS][MAX_REPS], cpu[MAX_URIS][MAX_REPS];
    uint64_t sums[MAX_URIS] = {0};
    for (int u = 0; u < nuris; u++) {
        if (stk_dataset_open(uris[u], NULL, &ds[u]) < 0) {
            fprintf(stderr, "read_arrays: %s\n", stk_errmsg());
            return 1;
        }
        uint64_t n = ds[u]->count;
        order[u] = malloc(n * sizeof *order[u]);
        for (uint64_t i = 0; i < n; i++)
            order[u][i] = i;
        uint64_t x = seed;
        for (uint64_t i = n; !sequential && i > 1; i--) { /* Fisher-Yates, splitmix64 */
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            uint64_t j = z % i, t = order[u][i - 1];
            order[u][i - 1] = order[u][j];
            order[u][j] = t;
        }
    }
    for (unsigned r = 0; r < reps; r++)
        for (int u = 0; u < nuris; u++) {
            pthread_t th[64];
            job jobs[64];
            uint64_t n = ds[u]->count;
            struct timespec a, b;
            double c0 = cpu_seconds();
            clock_gettime(CLOCK_MONOTONIC, &a);
            for (unsigned t = 0; t < threads; t++) {
                jobs[t] = (job){ds[u], order[u], n * t / threads, n * (t + 1) / threads, 0, 0};
                pthread_create(&th[t], NULL, worker, &jobs[t]);
            }
            uint64_t sum = 0, failed = 0;
            for (unsigned t = 0; t < threads; t++) {
                pthread_join(th[t], NULL);
                sum += jobs[t].sum;
                failed += jobs[t].failed;
            }
            clock_gettime(CLOCK_MONOTONIC, &b);
            wall[u][r] = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
            cpu[u][r] = cpu_seconds() - c0;
            if (failed) {
                fprintf(stderr, "read_arrays: %s: %llu reads failed\n", uris[u],
                        (unsigned long long)failed);
                return 1;
            }
            sums[u] = sum;
        }
    for (int u = 0; u < nuris; u++) {
        uint64_t n = ds[u]->count;
        qsort(wall[u], reps, sizeof(double), cmp_double);
        qsort(cpu[u], reps, sizeof(double), cmp_double);
        printf("{\"uri\": \"%s\", \"samples\": %llu, \"threads\": %u, \"order\": \"%s\", "
               "\"samples_per_s\": %.0f, \"samples_per_cpu_s\": %.0f, \"sum\": %llu}\n",
               uris[u], (unsigned long long)n, threads, sequential ? "sequential" : "random",
               n / wall[u][reps / 2], n / cpu[u][reps / 2], (unsigned long long)sums[u]);
        stk_dataset_close(ds[u]);
        free(order[u]);
    }
    return 0;
}
