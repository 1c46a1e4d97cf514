/*
 * shuffle_quality.c — what the block shuffle gives up against the global
 * one, and what it saves, measured on the sampler itself (no data read).
 *
 *   shuffle_quality [N] [--epochs E]
 *
 * For N samples (default 10^6), world size 1, and each order (global, none,
 * block with several block sizes bs and windows K), over E epochs (default
 * 8):
 *
 *   disp     mean |position - index| / N in epoch 0 (a uniform permutation:
 *            1/3; the dataset order: 0)
 *   e2e      mean |position in epoch e+1 - position in epoch e| / N (1/3
 *            when epochs are independent)
 *   ks       Kolmogorov-Smirnov distance from uniform of the positions the
 *            first 1000 samples take over the E epochs (8000 values for a
 *            uniform shuffle: about 0.01; larger when samples move together)
 *   lag1     correlation of the indices at consecutive positions (0 for a
 *            uniform shuffle, 1 for the dataset order)
 *   classes  distinct classes in a batch of 256 when the data is stored
 *            sorted by class (1000 classes of N/1000 consecutive samples:
 *            the worst case, e.g. tar shards written class by class); a
 *            uniform shuffle gives about 226
 *   reads    storage blocks loaded per epoch / blocks in the dataset, for
 *            storage read in blocks of bs records with an LRU cache of K
 *            blocks (the global shuffle is given bs = 64, K = 16): 1.0 means
 *            every byte is read once per epoch
 *   reads8   the same summed over 8 ranks (strided sharding, each rank with
 *            its own K-block cache) / blocks in the dataset: every rank
 *            touches every block of a window, so block storage read whole
 *            blocks at a time is read about 8 times (the per-record share of
 *            each rank is still 1/8)
 *   ns       nanoseconds per stk_sampler_index call
 */
#include <stoker/stoker.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct config {
    const char *name;
    stk_shuffle mode;
    uint64_t bs;
    uint32_t k;
} config;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* LRU of k block ids (small k: a linear scan). Returns 1 on a miss. */
static int lru_touch(uint64_t *cache, uint64_t *stamp, uint32_t k, uint64_t block, uint64_t t)
{
    uint32_t victim = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (cache[i] == block) {
            stamp[i] = t;
            return 0;
        }
        if (stamp[i] < stamp[victim])
            victim = i;
    }
    cache[victim] = block;
    stamp[victim] = t;
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t n = 1000000;
    uint64_t epochs = 8;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--epochs") == 0 && i + 1 < argc)
            epochs = strtoull(argv[++i], NULL, 10);
        else
            n = strtoull(argv[i], NULL, 10);
    }
    if (n < 2000 || epochs < 2) {
        fprintf(stderr, "usage: shuffle_quality [N >= 2000] [--epochs E >= 2]\n");
        return 2;
    }
    const config configs[] = {
        {"global", STK_SHUFFLE_GLOBAL, 64, 16},  {"none", STK_SHUFFLE_NONE, 64, 16},
        {"block", STK_SHUFFLE_BLOCK, 16, 16},    {"block", STK_SHUFFLE_BLOCK, 64, 4},
        {"block", STK_SHUFFLE_BLOCK, 64, 16},    {"block", STK_SHUFFLE_BLOCK, 64, 64},
        {"block", STK_SHUFFLE_BLOCK, 256, 16},   {"block", STK_SHUFFLE_BLOCK, 1024, 16},
        {"block", STK_SHUFFLE_BLOCK, 1024, 64},
    };
    const uint64_t track = 1000, batch = 256, per_class = n / 1000;
    uint64_t *prev = malloc(n * sizeof *prev), *pos = malloc(n * sizeof *pos);
    uint64_t *idx = malloc(n * sizeof *idx);
    uint64_t *ks_values = malloc(track * epochs * sizeof *ks_values);
    if (!prev || !pos || !idx || !ks_values)
        return 1;
    printf("N = %llu, %llu epochs, world size 1\n\n", (unsigned long long)n,
           (unsigned long long)epochs);
    printf("| order | block | K | disp | e2e | ks | lag1 | classes/256 | reads | reads8 | ns |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        const config *cf = &configs[c];
        stk_sampler_options o = {.dataset_size = n, .seed = 7, .shuffle = cf->mode};
        if (cf->mode == STK_SHUFFLE_BLOCK) {
            o.block_size = cf->bs;
            o.shuffle_window = cf->k;
        }
        stk_sampler *s;
        if (stk_sampler_create(&o, &s) < 0) {
            fprintf(stderr, "%s\n", stk_errmsg());
            return 1;
        }
        double disp = 0, e2e = 0, lag1 = 0, classes = 0, reads = 0, reads8 = 0, secs = 0;
        uint64_t nks = 0;
        uint64_t nb = (n + cf->bs - 1) / cf->bs;
        uint64_t *cache = calloc(cf->k, sizeof *cache), *stamp = calloc(cf->k, sizeof *stamp);
        uint8_t *class_seen = calloc(1000, 1);
        for (uint64_t e = 0; e < epochs; e++) {
            double t0 = now();
            for (uint64_t p = 0; p < n; p++)
                idx[p] = stk_sampler_index(s, e, p);
            secs += now() - t0;
            for (uint64_t p = 0; p < n; p++)
                pos[idx[p]] = p;
            for (uint64_t i = 0; i < track; i++)
                ks_values[nks++] = pos[i];
            if (e == 0) {
                for (uint64_t i = 0; i < n; i++)
                    disp += fabs((double)pos[i] - (double)i);
                disp /= (double)n * (double)n;
                /* lag-1 correlation of the index sequence */
                double mean = (double)(n - 1) / 2, var = 0, cov = 0;
                for (uint64_t p = 0; p < n; p++)
                    var += ((double)idx[p] - mean) * ((double)idx[p] - mean);
                for (uint64_t p = 1; p < n; p++)
                    cov += ((double)idx[p] - mean) * ((double)idx[p - 1] - mean);
                lag1 = cov / var;
                /* distinct classes per batch, class-sorted storage */
                uint64_t batches = 0, distinct = 0;
                for (uint64_t b0 = 0; b0 + batch <= n; b0 += batch) {
                    memset(class_seen, 0, 1000);
                    for (uint64_t p = b0; p < b0 + batch; p++) {
                        uint64_t cl = idx[p] / per_class;
                        cl = cl < 1000 ? cl : 999;
                        distinct += !class_seen[cl];
                        class_seen[cl] = 1;
                    }
                    batches++;
                }
                classes = (double)distinct / (double)batches;
                /* storage blocks loaded through an LRU of K blocks */
                uint64_t misses = 0;
                for (uint32_t i = 0; i < cf->k; i++)
                    cache[i] = UINT64_MAX;
                memset(stamp, 0, cf->k * sizeof *stamp);
                for (uint64_t p = 0; p < n; p++)
                    misses += (uint64_t)lru_touch(cache, stamp, cf->k, idx[p] / cf->bs, p + 1);
                reads = (double)misses / (double)nb;
                /* 8 ranks: rank r reads positions r, r + 8, ... (slots
                 * past n wrap, as pad-by-wrap does) */
                misses = 0;
                for (uint64_t r = 0; r < 8; r++) {
                    for (uint32_t i = 0; i < cf->k; i++)
                        cache[i] = UINT64_MAX;
                    memset(stamp, 0, cf->k * sizeof *stamp);
                    for (uint64_t p = r, t = 1; p < n; p += 8, t++)
                        misses += (uint64_t)lru_touch(cache, stamp, cf->k, idx[p] / cf->bs, t);
                }
                reads8 = (double)misses / (double)nb;
            } else {
                double sum = 0;
                for (uint64_t i = 0; i < n; i++)
                    sum += fabs((double)pos[i] - (double)prev[i]);
                e2e += sum / ((double)n * (double)n);
            }
            uint64_t *t = prev;
            prev = pos;
            pos = t;
        }
        e2e /= (double)(epochs - 1);
        /* KS distance of the tracked positions from uniform on [0, n) */
        qsort(ks_values, nks, sizeof *ks_values, cmp_u64);
        double ks = 0;
        for (uint64_t i = 0; i < nks; i++) {
            double f = ((double)ks_values[i] + 0.5) / (double)n;
            double lo = fabs(f - (double)i / (double)nks), hi = fabs((double)(i + 1) / (double)nks - f);
            ks = fmax(ks, fmax(lo, hi));
        }
        char bs[32] = "-", k[32] = "-";
        if (cf->mode == STK_SHUFFLE_BLOCK) {
            snprintf(bs, sizeof bs, "%llu", (unsigned long long)cf->bs);
            snprintf(k, sizeof k, "%u", cf->k);
        }
        printf("| %s | %s | %s | %.3f | %.3f | %.3f | %.3f | %.1f | %.2f | %.2f | %.0f |\n",
               cf->name, bs, k, disp, e2e, ks, lag1, classes, reads, reads8,
               1e9 * secs / ((double)n * (double)epochs));
        free(cache);
        free(stamp);
        free(class_seen);
        stk_sampler_destroy(s);
    }
    free(prev);
    free(pos);
    free(idx);
    free(ks_values);
    return 0;
}
