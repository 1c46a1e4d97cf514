/*
 * decode_floor.c — the floor the image pipeline is measured against: read
 * every image file of a folder and decode it fully (stk_image_decode, no
 * region, scale 1 — a plain full-size libjpeg-turbo decode, as Pillow's
 * Image.open().convert("RGB") does), on N threads, and report images/s.
 *
 *   decode_floor DIR [--threads N] [--limit N] [--epochs E] [--json]
 *   decode_floor --dataset URI [...]
 *
 * DIR is walked two levels deep (DIR/CLASS/FILE, the image-folder layout)
 * and the paths sorted; each thread claims the next file from an atomic
 * counter, reads it into its own buffer (open/read/close, as the image-folder
 * reader does) and decodes it into its own scratch. Undecodable files are
 * counted and skipped. With --dataset the encoded bytes come from any
 * dataset stoker opens instead (e.g. shards packed with --restart, to see
 * what a full decode of the rewritten bytes costs). CPU seconds (user + system) are printed too, since
 * on a shared machine they are steadier than wall time.
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char **paths;
static size_t npaths, cap;
static size_t total_jobs;
static _Atomic size_t next_job;
static _Atomic uint64_t bad, pixels;
static stk_dataset *dataset; /* --dataset: read samples from here instead */

static void *dataset_worker(void *arg)
{
    (void)arg;
    stk_scratch sc = {NULL, 0}, rd = {NULL, 0};
    for (;;) {
        size_t j = atomic_fetch_add(&next_job, 1);
        if (j >= total_jobs)
            break;
        stk_sample s;
        stk_image_view v;
        if (dataset->vt->read(dataset, j % npaths, &s, &rd) < 0 || !s.encoded ||
            stk_image_decode(s.encoded, s.encoded_size, NULL, NULL, 1, &sc, &v) < 0)
            atomic_fetch_add(&bad, 1);
        else
            atomic_fetch_add(&pixels, (uint64_t)v.width * v.height);
    }
    stk_scratch_free(&sc);
    stk_scratch_free(&rd);
    return NULL;
}

static void add_path(const char *p)
{
    if (npaths == cap) {
        cap = cap ? cap * 2 : 1024;
        paths = realloc(paths, cap * sizeof *paths);
        if (!paths)
            exit(2);
    }
    paths[npaths++] = strdup(p);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void walk(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < 1)
            walk(p, depth + 1);
        else if (S_ISREG(st.st_mode))
            add_path(p);
    }
    closedir(d);
}

static void *worker(void *arg)
{
    (void)arg;
    stk_scratch sc = {NULL, 0};
    uint8_t *buf = NULL;
    size_t bcap = 0;
    for (;;) {
        size_t j = atomic_fetch_add(&next_job, 1);
        if (j >= total_jobs)
            break;
        const char *path = paths[j % npaths];
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            atomic_fetch_add(&bad, 1);
            continue;
        }
        struct stat st;
        fstat(fd, &st);
        size_t n = (size_t)st.st_size;
        if (n > bcap) {
            free(buf);
            bcap = n * 2;
            buf = malloc(bcap);
        }
        size_t got = 0;
        while (got < n) {
            ssize_t r = read(fd, buf + got, n - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fd);
        stk_image_view v;
        if (stk_image_decode(buf, got, NULL, NULL, 1, &sc, &v) < 0)
            atomic_fetch_add(&bad, 1);
        else
            atomic_fetch_add(&pixels, (uint64_t)v.width * v.height);
    }
    free(buf);
    stk_scratch_free(&sc);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: decode_floor DIR [--threads N] [--limit N] [--epochs E] [--json]\n");
        return 2;
    }
    int threads = 2, epochs = 1, json = 0, first = 2;
    if (!strcmp(argv[1], "--dataset")) {
        if (argc < 3 || stk_dataset_open(argv[2], NULL, &dataset) < 0) {
            fprintf(stderr, "decode_floor: %s\n", argc < 3 ? "--dataset needs a URI" : stk_errmsg());
            return 1;
        }
        first = 3;
    }
    size_t limit = 0;
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc)
            break;
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs"))
            epochs = atoi(argv[i + 1]);
        i++;
    }
    if (dataset)
        npaths = (size_t)dataset->count;
    else
        walk(argv[1], 0);
    if (!npaths) {
        fprintf(stderr, "decode_floor: no files under %s\n", argv[1]);
        return 1;
    }
    if (!dataset)
        qsort(paths, npaths, sizeof *paths, cmp);
    if (limit && limit < npaths)
        npaths = limit;
    total_jobs = npaths * (size_t)epochs;
    if (threads < 1 || threads > 256)
        threads = 2;
    pthread_t th[256];
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = stk_now();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, dataset ? dataset_worker : worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double dt = stk_now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                 (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) * 1e-6 +
                 (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e-6;
    size_t done = total_jobs - (size_t)bad;
    if (json) {
        printf("{\"samples\": %zu, \"undecodable\": %llu, \"threads\": %d, \"elapsed_s\": %.6f, "
               "\"samples_per_s\": %.2f, \"cpu_s\": %.3f}\n",
               done, (unsigned long long)bad, threads, dt, done / dt, cpu);
        return 0;
    }
    printf("decode_floor: %zu images (%llu undecodable), %d threads: %.1f images/s, "
           "%.1f Mpixel/s; %.3f s wall, %.3f s cpu (%.1f images per cpu-second)\n",
           done, (unsigned long long)bad, threads, done / dt, (double)pixels / dt * 1e-6, dt,
           cpu, done / cpu);
    return 0;
}
