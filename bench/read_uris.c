/*
 * read_uris.c — raw record reads from any datasets, random order, N threads:
 * how fast each reader hands out its samples' bytes, before any decode.
 *
 *   read_uris [--threads 2] [--reps 3] [--seed 1] URI [URI...]
 *
 * For each URI: open it, run one untimed pass (the warm cache: every page
 * comes in, verify=first has hashed what it hashes), then --reps timed
 * passes, each over a seeded random permutation of every index, thread t
 * taking positions t, t+T, t+2T... Each sample goes through the reader's own
 * `read` (src/format/dataset.h): for an encoded sample the bytes the reader
 * lends (a view into its mapping, or its scratch), for raw pixels the view;
 * every 64th byte is summed, so every page and cache line is touched, and
 * read_check is called as every real caller does. Datasets are reopened for
 * every pass, as a new process sees a warm page cache.
 *
 * Prints one JSON line per URI: records/s (median wall), records per
 * CPU-second (process user + sys over the same passes), the bytes touched and
 * their sum (equal across URIs that hold the same bytes: it proves they were
 * read), and the ratio to the first URI (give .stk first to get "x .stk").
 */
#include "format/dataset.h"

#include "core/rng.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct job {
    stk_dataset *ds;
    const uint64_t *perm;
    uint64_t n;
    unsigned t, nthreads;
    uint64_t sum, bytes, errors;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6 +
           (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
}

static void *worker(void *arg)
{
    job *j = arg;
    stk_scratch scratch = {0};
    for (uint64_t p = j->t; p < j->n; p += j->nthreads) {
        uint64_t i = j->perm[p];
        stk_sample s;
        memset(&s, 0, sizeof s);
        if (j->ds->vt->read(j->ds, i, &s, &scratch) < 0) {
            j->errors++;
            continue;
        }
        const uint8_t *b = s.image.pixels ? s.image.pixels : s.encoded;
        size_t n = s.encoded_size;
        if (s.image.pixels) /* interleaved: H rows; planar: C planes */
            n = s.image.chan_stride == 1
                    ? (size_t)s.image.height * (size_t)s.image.row_stride
                    : (size_t)s.image.channels * (size_t)s.image.chan_stride;
        uint64_t sum = 0;
        for (size_t k = 0; k < n; k += 64)
            sum += b[k];
        if (n)
            sum += b[n - 1];
        j->sum += sum + (uint64_t)s.label;
        j->bytes += n;
        if (stk_dataset_check(j->ds, i) < 0)
            j->errors++;
    }
    stk_scratch_free(&scratch);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One pass over uri: wall seconds, sum, bytes; -1 on error. */
static double pass(const char *uri, unsigned nthreads, uint64_t seed, uint64_t *sum,
                   uint64_t *bytes, uint64_t *count)
{
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) < 0) {
        fprintf(stderr, "read_uris: %s\n", stk_errmsg());
        return -1;
    }
    uint64_t n = ds->count;
    uint64_t *perm = malloc(n * sizeof *perm);
    if (!perm)
        abort();
    stk_rng r;
    stk_rng_init(&r, seed, 0, 0, 0);
    for (uint64_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint64_t i = n; i > 1; i--) { /* Fisher-Yates */
        uint64_t k = stk_rng_u64(&r) % i;
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[k];
        perm[k] = t;
    }
    stk_dataset_access_hint(ds, STK_ACCESS_RANDOM);
    job jobs[64];
    pthread_t th[64];
    double t0 = now_s();
    for (unsigned t = 0; t < nthreads; t++) {
        jobs[t] = (job){.ds = ds, .perm = perm, .n = n, .t = t, .nthreads = nthreads};
        pthread_create(&th[t], NULL, worker, &jobs[t]);
    }
    uint64_t errors = 0;
    *sum = *bytes = 0;
    for (unsigned t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        *sum += jobs[t].sum;
        *bytes += jobs[t].bytes;
        errors += jobs[t].errors;
    }
    double wall = now_s() - t0;
    *count = n;
    free(perm);
    stk_dataset_close(ds);
    if (errors) {
        fprintf(stderr, "read_uris: %s: %llu read errors (last: %s)\n", uri,
                (unsigned long long)errors, stk_errmsg());
        return -1;
    }
    return wall;
}

int main(int argc, char **argv)
{
    unsigned nthreads = 2, reps = 3;
    uint64_t seed = 1;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
        if (i + 1 >= argc)
            break;
        if (!strcmp(argv[i], "--threads"))
            nthreads = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else
            break;
    }
    if (i >= argc || nthreads < 1 || nthreads > 64 || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: read_uris [--threads 2] [--reps 3] [--seed 1] URI [URI...]\n");
        return 2;
    }
    double first_rate = 0, first_cpu_rate = 0;
    for (; i < argc; i++) {
        uint64_t sum, bytes, n;
        if (pass(argv[i], nthreads, seed + 99, &sum, &bytes, &n) < 0) /* warm-up */
            return 1;
        double walls[100], c0 = cpu_s(), total = 0;
        for (unsigned r = 0; r < reps; r++) {
            if ((walls[r] = pass(argv[i], nthreads, seed, &sum, &bytes, &n)) < 0)
                return 1;
            total += walls[r];
        }
        double cpu = cpu_s() - c0;
        qsort(walls, reps, sizeof walls[0], cmp_double);
        double rate = (double)n / walls[reps / 2], cpu_rate = (double)n * reps / cpu;
        if (!first_rate) {
            first_rate = rate;
            first_cpu_rate = cpu_rate;
        }
        printf("{\"uri\": \"%s\", \"records\": %llu, \"threads\": %u, \"records_per_s\": %.0f, "
               "\"records_per_cpu_s\": %.0f, \"mb_per_s\": %.1f, \"vs_first\": %.3f, "
               "\"vs_first_cpu\": %.3f, \"touch_sum\": %llu, \"wall_total_s\": %.3f}\n",
               argv[i], (unsigned long long)n, nthreads, rate, cpu_rate,
               (double)bytes / walls[reps / 2] / 1e6, rate / first_rate, cpu_rate / first_cpu_rate,
               (unsigned long long)sum, total);
        fflush(stdout);
    }
    return 0;
}
