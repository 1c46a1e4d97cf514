/*
 * wds_open.c — what building the index of a WebDataset tar costs: the time
 * of stk_dataset_open("wds:TAR") on a synthetic shard of N samples (2N
 * members: KEY.jpg of IMAGE bytes and KEY.cls of a decimal label), then the
 * first sample's bytes. The wds reader keeps no index file: every open walks
 * every 512-byte header (checksum, size, name, grouping, label), so this is
 * the figure docs/datasets.md reports as members per second.
 *
 *   wds_open [--dir DIR] [--samples N] [--image-bytes B] [--reps R]
 *
 * The tar (DIR/synthetic-N-B.tar, default DIR /tmp/stoker-bench-wds, N
 * 500000, B 100) is written once with hand-made ustar headers and reused.
 * One untimed open warms the page cache, then R timed opens (default 5)
 * run in this process; the median, the best, and members/s and MB/s of the
 * median are printed, with one JSON line.
 */
#include <stoker/stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_REPS 64

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void header(FILE *f, const char *name, size_t size)
{
    unsigned char h[512] = {0};
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011zo", size);
    memcpy(h + 136, "14567034562", 12);
    h[156] = '0';
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    fwrite(h, 1, 512, f);
}

static void write_tar(const char *path, long n, size_t image_bytes)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        perror(tmp);
        exit(1);
    }
    unsigned char *img = calloc(1, image_bytes + 512);
    static const unsigned char zero[512];
    for (long i = 0; i < n; i++) {
        char name[64], label[24];
        for (size_t k = 0; k < image_bytes; k++)
            img[k] = (unsigned char)(i + k);
        snprintf(name, sizeof name, "%09ld.jpg", i);
        header(f, name, image_bytes);
        fwrite(img, 1, (image_bytes + 511) / 512 * 512, f);
        int ll = snprintf(label, sizeof label, "%ld", i % 1000);
        snprintf(name, sizeof name, "%09ld.cls", i);
        header(f, name, (size_t)ll);
        memset(label + ll, 0, sizeof label - (size_t)ll);
        fwrite(label, 1, sizeof label, f);
        fwrite(zero, 1, 512 - sizeof label, f);
    }
    fwrite(zero, 1, 512, f);
    fwrite(zero, 1, 512, f);
    free(img);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp/stoker-bench-wds";
    long n = 500000;
    size_t image_bytes = 100;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--samples") && i + 1 < argc)
            n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--image-bytes") && i + 1 < argc)
            image_bytes = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: wds_open [--dir DIR] [--samples N] [--image-bytes B] "
                            "[--reps R]\n");
            return 2;
        }
    }
    if (n < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "wds_open: --samples >= 1, --reps 1..%d\n", MAX_REPS);
        return 2;
    }
    char path[1024], uri[1100];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/synthetic-%ld-%zu.tar", dir, n, image_bytes);
    struct stat st;
    if (stat(path, &st) != 0) {
        double t0 = now_ms();
        write_tar(path, n, image_bytes);
        printf("wrote %s in %.1f s\n", path, (now_ms() - t0) / 1e3);
        stat(path, &st);
    }
    snprintf(uri, sizeof uri, "wds:%s", path);
    double ms[MAX_REPS], first_ms[MAX_REPS];
    for (int r = -1; r < reps; r++) {
        stk_dataset *ds;
        double t0 = now_ms();
        if (stk_dataset_open(uri, NULL, &ds) != 0) {
            fprintf(stderr, "wds_open: %s\n", stk_errmsg());
            return 1;
        }
        double t1 = now_ms();
        void *p;
        size_t size;
        if (stk_dataset_read_field(ds, 0, "image", &p, &size, NULL) != 0) {
            fprintf(stderr, "wds_open: %s\n", stk_errmsg());
            return 1;
        }
        double t2 = now_ms();
        stk_free(p);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        if (info.count != (uint64_t)n) {
            fprintf(stderr, "wds_open: %llu samples, expected %ld\n",
                    (unsigned long long)info.count, n);
            return 1;
        }
        stk_dataset_close(ds);
        if (r >= 0) {
            ms[r] = t1 - t0;
            first_ms[r] = t2 - t0;
        }
    }
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    qsort(first_ms, (size_t)reps, sizeof first_ms[0], cmp_double);
    double med = ms[reps / 2], members = 2.0 * (double)n;
    printf("%s: %ld samples, %.0f members, %.1f MB\n", path, n, members, st.st_size / 1e6);
    printf("open (index build), warm cache: median %.1f ms, best %.1f ms; first sample after "
           "%.1f ms\n",
           med, ms[0], first_ms[reps / 2]);
    printf("%.2f M members/s, %.0f MB/s of tar\n", members / med / 1e3, st.st_size / 1e3 / med);
    printf("{\"samples\": %ld, \"members\": %.0f, \"bytes\": %lld, \"open_ms_median\": %.2f, "
           "\"open_ms_best\": %.2f, \"members_per_s\": %.0f}\n",
           n, members, (long long)st.st_size, med, ms[0], members / med * 1e3);
    return 0;
}
