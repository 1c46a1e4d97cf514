/*
 * tfrecord_open.c — what opening a 1,000,000-record TFRecord set costs
 * with the tfrecord: reader (goal: open with a cached index and read the
 * first sample in < 100 ms), and how fast the index is built without one.
 *
 *   tfrecord_open [--dir DIR] [--records N] [--files F] [--reps R]
 *
 * The set (F files DIR/part-NNNNN.tfrecord, default DIR
 * /tmp/stoker-bench-tfrecord, 1,000,000 records in 8 files) is written
 * once — each record a tf.train.Example holding a 100-byte "image/encoded"
 * and an int64 "image/class/label", framed with the masked CRC-32Cs — and
 * reused while its size matches. Each measurement runs in a fresh process
 * (fork + exec of this program with --child URI), which times
 * stk_dataset_open and then stk_dataset_read_field(0) (the first sample's
 * bytes delivered and read) and reports both and its page faults. Warm page
 * cache throughout (one untimed child first). Reported, medians of R:
 *
 *   scan     ?cache=off: the index built by scanning every length header
 *            (12 bytes read and a CRC-32C checked per record), nothing
 *            written — records/s of the index build;
 *   build    the first open with the default cache=auto: the scan plus
 *            writing DIR/part-NNNNN.tfrecord.stkidx (timed once, after the
 *            caches are deleted);
 *   cached   the default open once the caches exist: per file a stat, the
 *            staleness probes (CRC-32C of the first and last 4 KiB) and the
 *            cache read and checked (8 bytes per record); no record read;
 *   dali     ?cache=off with DALI tfrecord2idx text indexes beside the data
 *            (DIR/part-NNNNN.tfrecord.idx; each line parsed and its length
 *            header checked) — written once, removed after.
 *
 * Prints a table and one JSON line.
 */
#include <stoker/stoker.h>

#include "core/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAYLOAD 100
#define MAX_REPS 32

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void die(const char *what)
{
    fprintf(stderr, "tfrecord_open: %s: %s\n", what, stk_errmsg());
    exit(1);
}

static int child(const char *uri)
{
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_ms();
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        die(uri);
    double t1 = now_ms();
    void *data = NULL;
    size_t n = 0;
    if (stk_dataset_read_field(ds, 0, NULL, &data, &n, NULL) != 0)
        die("read_field");
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++)
        sink = (uint8_t)(sink + ((uint8_t *)data)[i]);
    double t2 = now_ms();
    getrusage(RUSAGE_SELF, &r1);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    printf("%.3f %.3f %ld %llu\n", t1 - t0, t2 - t0, r1.ru_minflt - r0.ru_minflt,
           (unsigned long long)info.count);
    stk_free(data);
    stk_dataset_close(ds);
    return 0;
}

/* Run this program as a child on `uri`; its open and first-sample times. */
static void run_child(const char *self, const char *uri, double *open_ms, double *first_ms,
                      long *faults, unsigned long long *count)
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        execl(self, self, "--child", uri, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    char buf[256] = {0};
    ssize_t k = read(pipefd[0], buf, sizeof buf - 1);
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (k <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        sscanf(buf, "%lf %lf %ld %llu", open_ms, first_ms, faults, count) != 4) {
        fprintf(stderr, "tfrecord_open: child on %s failed\n", uri);
        exit(1);
    }
}

static void wr_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void wr_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* One framed record: Example{image/encoded: PAYLOAD bytes, image/class/label:
 * label (< 128)} into out; its size. */
static size_t record(uint8_t *out, uint64_t i)
{
    static const char kimg[] = "image/encoded", klab[] = "image/class/label";
    uint8_t ex[256], *p = ex;
    /* sizes: BytesList 2+100, Feature 2+102, entry 2+13+2+104 = 121 (2 bytes: 0x79);
     * Int64List 2+1, Feature 2+3, entry 2+17+2+5 = 26; Features 2+121+2+26 = 151 */
    *p++ = 0x0a, *p++ = 0x97, *p++ = 0x01;            /* features, 151 bytes */
    *p++ = 0x0a, *p++ = 121;                          /* entry */
    *p++ = 0x0a, *p++ = 13;
    memcpy(p, kimg, 13), p += 13;
    *p++ = 0x12, *p++ = 104, *p++ = 0x0a, *p++ = 102, *p++ = 0x0a, *p++ = PAYLOAD;
    for (int k = 0; k < PAYLOAD; k++)
        *p++ = (uint8_t)(i * 31 + (uint64_t)k);
    *p++ = 0x0a, *p++ = 26;
    *p++ = 0x0a, *p++ = 17;
    memcpy(p, klab, 17), p += 17;
    *p++ = 0x12, *p++ = 5, *p++ = 0x1a, *p++ = 3, *p++ = 0x0a, *p++ = 1;
    *p++ = (uint8_t)(i % 100);
    size_t n = (size_t)(p - ex);
    wr_u64(out, n);
    wr_u32(out + 8, stk_crc32c_mask(stk_crc32c(0, out, 8)));
    memcpy(out + 12, ex, n);
    wr_u32(out + 12 + n, stk_crc32c_mask(stk_crc32c(0, ex, n)));
    return n + 16;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static void remove_suffix_files(const char *dir, uint32_t files, const char *suffix)
{
    char p[1100];
    for (uint32_t f = 0; f < files; f++) {
        snprintf(p, sizeof p, "%s/part-%05u.tfrecord%s", dir, f, suffix);
        unlink(p);
    }
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp/stoker-bench-tfrecord";
    uint64_t records = 1000000;
    uint32_t files = 8;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--child") && i + 1 < argc)
            return child(argv[i + 1]);
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--records") && i + 1 < argc)
            records = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--files") && i + 1 < argc)
            files = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: tfrecord_open [--dir DIR] [--records N] [--files F] "
                            "[--reps R]\n");
            return 2;
        }
    }
    if (!records || !files || files > records || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "tfrecord_open: bad arguments\n");
        return 2;
    }
    mkdir(dir, 0755);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        die("readlink");
    self[sl] = '\0';

    /* The set: written once. */
    uint8_t rec[512];
    size_t rsize = record(rec, 0);
    char path[1100];
    int have = 1;
    for (uint32_t f = 0; f < files && have; f++) {
        uint64_t lo = records * f / files, hi = records * (f + 1) / files;
        struct stat st;
        snprintf(path, sizeof path, "%s/part-%05u.tfrecord", dir, f);
        have = stat(path, &st) == 0 && (uint64_t)st.st_size == (hi - lo) * rsize;
    }
    if (!have) {
        fprintf(stderr, "writing %llu records in %u files to %s...\n",
                (unsigned long long)records, files, dir);
        for (uint32_t f = 0; f < files; f++) {
            uint64_t lo = records * f / files, hi = records * (f + 1) / files;
            snprintf(path, sizeof path, "%s/part-%05u.tfrecord", dir, f);
            FILE *fp = fopen(path, "wb");
            if (!fp)
                die(path);
            for (uint64_t i = lo; i < hi; i++) {
                size_t n = record(rec, i);
                if (fwrite(rec, 1, n, fp) != n)
                    die(path);
            }
            if (fclose(fp) != 0)
                die(path);
        }
    }
    remove_suffix_files(dir, files, ".stkidx");
    remove_suffix_files(dir, files, ".idx");

    char uri_scan[1200], uri_auto[1200];
    snprintf(uri_scan, sizeof uri_scan, "tfrecord:%s?cache=off", dir);
    snprintf(uri_auto, sizeof uri_auto, "tfrecord:%s", dir);
    double o[MAX_REPS], fst[MAX_REPS], res[4][2];
    long faults[4] = {0}, flt;
    unsigned long long count = 0;
    double build_open, build_first;

    /* Untimed warm-up: the data in the page cache. */
    run_child(self, uri_scan, &o[0], &fst[0], &flt, &count);
    if (count != records) {
        fprintf(stderr, "tfrecord_open: %llu records opened, %llu expected\n", count,
                (unsigned long long)records);
        return 1;
    }
    for (int r = 0; r < reps; r++)
        run_child(self, uri_scan, &o[r], &fst[r], &faults[0], &count);
    res[0][0] = median(o, reps);
    res[0][1] = median(fst, reps);
    /* Build: the first default open writes the caches. */
    run_child(self, uri_auto, &build_open, &build_first, &faults[1], &count);
    for (int r = 0; r < reps; r++)
        run_child(self, uri_auto, &o[r], &fst[r], &faults[2], &count);
    res[2][0] = median(o, reps);
    res[2][1] = median(fst, reps);
    /* DALI text indexes (written from the table the reader built). */
    remove_suffix_files(dir, files, ".stkidx");
    for (uint32_t f = 0; f < files; f++) {
        uint64_t lo = records * f / files, hi = records * (f + 1) / files;
        snprintf(path, sizeof path, "%s/part-%05u.tfrecord.idx", dir, f);
        FILE *fp = fopen(path, "w");
        if (!fp)
            die(path);
        for (uint64_t i = 0; i < hi - lo; i++)
            fprintf(fp, "%llu %zu\n", (unsigned long long)(i * rsize), rsize);
        if (fclose(fp) != 0)
            die(path);
    }
    for (int r = 0; r < reps; r++)
        run_child(self, uri_scan, &o[r], &fst[r], &faults[3], &count);
    res[3][0] = median(o, reps);
    res[3][1] = median(fst, reps);
    remove_suffix_files(dir, files, ".idx");

    printf("tfrecord_open: %llu records (%zu bytes each framed) in %u files, warm cache, "
           "medians of %d fresh processes\n",
           (unsigned long long)records, rsize, files, reps);
    printf("%-8s %12s %14s %10s %14s\n", "index", "open ms", "+first ms", "faults",
           "records/s");
    printf("%-8s %12.2f %14.2f %10ld %14.0f\n", "scan", res[0][0], res[0][1], faults[0],
           records / (res[0][0] / 1e3));
    printf("%-8s %12.2f %14.2f %10ld %14.0f\n", "build", build_open, build_first, faults[1],
           records / (build_open / 1e3));
    printf("%-8s %12.2f %14.2f %10ld %14s\n", "cached", res[2][0], res[2][1], faults[2], "-");
    printf("%-8s %12.2f %14.2f %10ld %14.0f\n", "dali", res[3][0], res[3][1], faults[3],
           records / (res[3][0] / 1e3));
    printf("{\"records\": %llu, \"files\": %u, \"scan_open_ms\": %.3f, \"scan_records_per_s\": "
           "%.0f, \"build_open_ms\": %.3f, \"cached_open_ms\": %.3f, \"cached_first_ms\": %.3f, "
           "\"dali_open_ms\": %.3f, \"goal_first_sample_ms\": 100, \"goal_met\": %s}\n",
           (unsigned long long)records, files, res[0][0], records / (res[0][0] / 1e3),
           build_open, res[2][0], res[2][1], res[3][0], res[2][1] < 100 ? "true" : "false");
    return 0;
}
