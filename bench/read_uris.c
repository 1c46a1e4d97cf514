/*
 * read_uris.c — raw record reads of any datasets, random order, N threads:
 * the same measurement for every reader (.stk, lmdb:, recordio:, ...), so
 * their costs compare directly. bench/make_record_sets.py writes the same
 * images as .stk, LMDB (encoded Datums) and RecordIO to feed it.
 *
 *   read_uris [--threads 2] [--reps 3] [--seed 1] URI...
 *
 * For each URI: open (timed), then R runs each reading every sample once in
 * one seeded random permutation, split into contiguous slices over the
 * threads. A read is the reader's own `read` (ds->vt->read: a view into
 * the mapping where the format allows, no copy), a sum of every 64th byte
 * of the encoded bytes or pixels (so every page really comes in), and the
 * reader's read_check. Reports the open time, records/s and MB/s of the
 * median run, and the process CPU seconds per run (user + sys: on a shared
 * machine records per CPU-second compares readers better than wall time).
 * The byte sums must agree between URIs holding the same records; they are
 * printed for that check. Warm cache only: run it twice, use the second.
 */
#include "format/dataset.h"

#include <stoker/stoker.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct job {
    const stk_dataset *ds;
    const uint64_t *perm;
    uint64_t begin, end;
    uint64_t sum, bytes;
    int rc;
} job;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

static void *worker(void *arg)
{
    job *j = arg;
    stk_scratch scratch = {0};
    for (uint64_t k = j->begin; k < j->end; k++) {
        stk_sample s;
        uint64_t i = j->perm[k];
        int rc = j->ds->vt->read(j->ds, i, &s, &scratch);
        if (rc < 0) {
            j->rc = rc;
            fprintf(stderr, "read %llu: %s\n", (unsigned long long)i, stk_errmsg());
            break;
        }
        const uint8_t *p = s.encoded;
        size_t n = s.encoded_size;
        if (s.image.pixels) { /* a raw view: the bytes its strides span, as they lie
                                 (a stride may be negative: BGR planes read as RGB) */
            const stk_image_view *v = &s.image;
            ptrdiff_t lo = 0, hi = 0;
            const ptrdiff_t ext[3] = {((ptrdiff_t)v->height - 1) * v->row_stride,
                                      ((ptrdiff_t)v->width - 1) * v->col_stride,
                                      ((ptrdiff_t)v->channels - 1) * v->chan_stride};
            for (int d = 0; d < 3; d++)
                *(ext[d] < 0 ? &lo : &hi) += ext[d];
            p = v->pixels + lo;
            n = (size_t)(hi - lo + 1);
        }
        for (size_t b = 0; b < n; b += 64)
            j->sum += p[b];
        j->bytes += n;
        if ((rc = stk_dataset_check(j->ds, i)) < 0) {
            j->rc = rc;
            break;
        }
    }
    stk_scratch_free(&scratch);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = 2, reps = 3;
    uint64_t seed = 1;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a += 2) {
        if (a + 1 >= argc)
            goto usage;
        if (!strcmp(argv[a], "--threads"))
            threads = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--reps"))
            reps = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "--seed"))
            seed = strtoull(argv[a + 1], NULL, 10);
        else
            goto usage;
    }
    if (a >= argc || threads < 1 || threads > 256 || reps < 1 || reps > 100)
        goto usage;
    printf("%-50s %9s %12s %10s %12s %s\n", "uri", "open_s", "records/s", "MB/s",
           "records/cpu-s", "sum");
    for (; a < argc; a++) {
        stk_dataset *ds = NULL;
        double t0 = now();
        if (stk_dataset_open(argv[a], NULL, &ds) < 0) {
            fprintf(stderr, "%s: %s\n", argv[a], stk_errmsg());
            return 1;
        }
        double open_s = now() - t0;
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        uint64_t n = info.count;
        uint64_t *perm = malloc(n * sizeof *perm);
        if (!perm)
            return 1;
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
        for (uint64_t i = 0; i < n; i++)
            perm[i] = i;
        for (uint64_t i = n; i > 1; i--) { /* Fisher-Yates, xorshift64 */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t j = x % i, t = perm[i - 1];
            perm[i - 1] = perm[j], perm[j] = t;
        }
        double wall[100], cpu[100];
        uint64_t sum = 0, bytes = 0;
        for (int r = 0; r < reps; r++) {
            job jobs[256];
            pthread_t tid[256];
            double c0 = cpu_seconds(), w0 = now();
            for (int t = 0; t < threads; t++) {
                jobs[t] = (job){.ds = ds, .perm = perm, .begin = n * (uint64_t)t / (uint64_t)threads,
                                .end = n * (uint64_t)(t + 1) / (uint64_t)threads};
                pthread_create(&tid[t], NULL, worker, &jobs[t]);
            }
            sum = bytes = 0;
            for (int t = 0; t < threads; t++) {
                pthread_join(tid[t], NULL);
                if (jobs[t].rc < 0)
                    return 1;
                sum += jobs[t].sum;
                bytes += jobs[t].bytes;
            }
            wall[r] = now() - w0;
            cpu[r] = cpu_seconds() - c0;
        }
        qsort(wall, (size_t)reps, sizeof wall[0], cmp_double);
        qsort(cpu, (size_t)reps, sizeof cpu[0], cmp_double);
        double w = wall[reps / 2], c = cpu[reps / 2];
        printf("%-50s %9.4f %12.0f %10.1f %12.0f %llu\n", argv[a], open_s, (double)n / w,
               (double)bytes / w / 1e6, c > 0 ? (double)n / c : 0.0, (unsigned long long)sum);
        free(perm);
        stk_dataset_close(ds);
    }
    return 0;
usage:
    fprintf(stderr, "usage: read_uris [--threads N] [--reps R] [--seed S] URI...\n");
    return 2;
}
