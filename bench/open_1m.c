/*
 * open_1m.c — time from stk_dataset_open to the first sample's bytes, on a
 * 1,000,000-record dataset of small records (goal: < 50 ms; the index is
 * mapped and used in place, never parsed record by record).
 *
 *   open_1m [--dir DIR] [--records N] [--reps R] [--no-cold]
 *
 * The dataset (one shard, DIR/shard-00000.stk, default DIR
 * /tmp/stoker-bench-1m) is written once with the library's shard writer —
 * fields "data" (100 bytes) and "label" (int64) — and reused while its
 * record count matches. Each measurement runs in a fresh process (fork +
 * exec of this program with --child URI), so nothing of an earlier open is
 * left in the address space or the allocator: the child takes the time
 * before stk_dataset_open and after stk_dataset_read_field(0, "data") has
 * delivered the bytes (and they were read), and reports both parts plus its
 * page faults. Process start-up is not in the figure.
 *
 * Warm: one untimed child first, then R timed ones. Cold: before each
 * child, `sync` and posix_fadvise(POSIX_FADV_DONTNEED) on the shard (best
 * effort on a VM: a host cache below it stays; the fraction of the file
 * still resident is printed). Both for the default (mmap, verify=first) and
 * ?io=pread. Prints a table and one JSON line; medians of R runs.
 */
#include "format/stk/stk_writer.h"

#include <stoker/stoker.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD_BYTES 100
#define MAX_REPS 64

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void die(const char *what)
{
    fprintf(stderr, "open_1m: %s: %s\n", what, stk_errmsg());
    exit(1);
}

/* The child: open, first sample, report. */
static int child(const char *uri)
{
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_ms();
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) < 0)
        die(uri);
    double t1 = now_ms();
    void *data;
    size_t size;
    if (stk_dataset_read_field(ds, 0, "data", &data, &size, NULL) < 0)
        die("read_field");
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < size; i++)
        sink ^= ((const uint8_t *)data)[i];
    (void)sink; /* read, so clang does not call it set but unused */
    double t2 = now_ms();
    getrusage(RUSAGE_SELF, &r1);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    printf("%.3f %.3f %ld %ld %llu %zu\n", t1 - t0, t2 - t1, r1.ru_minflt - r0.ru_minflt,
           r1.ru_majflt - r0.ru_majflt, (unsigned long long)info.count, size);
    free(data);
    stk_dataset_close(ds);
    return 0;
}

static void write_dataset(const char *dir, const char *path, uint64_t n)
{
    fprintf(stderr, "writing %s (%llu records of %d bytes + an int64 label)...\n", path,
            (unsigned long long)n, RECORD_BYTES);
    mkdir(dir, 0755);
    stk_field_def f[2];
    memset(f, 0, sizeof f);
    strcpy(f[0].name, "data");
    f[0].type = STK_FIELD_BYTES;
    strcpy(f[1].name, "label");
    f[1].type = STK_FIELD_INT64;
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 2, NULL, 0, &w) < 0)
        die(path);
    uint8_t rec[RECORD_BYTES];
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof rec; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rec[k] = (uint8_t)x;
        }
        int64_t label = (int64_t)(i % 1000);
        stk_value_bytes v[2] = {{rec, sizeof rec}, {&label, 8}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

static double resident_fraction(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), np = ((size_t)st.st_size + page - 1) / page;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    unsigned char *vec = malloc(np);
    size_t res = 0;
    if (vec && mincore(m, (size_t)st.st_size, vec) == 0)
        for (size_t i = 0; i < np; i++)
            res += vec[i] & 1;
    free(vec);
    munmap(m, (size_t)st.st_size);
    return (double)res / (double)np;
}

static void drop(const char *path)
{
    if (system("sync") != 0)
        fprintf(stderr, "open_1m: sync failed\n");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

typedef struct sample {
    double open_ms, first_ms, total_ms;
    long minflt, majflt;
} sample;

static sample run_child(const char *uri)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", "open_1m", "--child", uri, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[256] = {0};
    size_t got = 0;
    ssize_t k;
    while (got < sizeof buf - 1 && (k = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    sample s = {0};
    unsigned long long count;
    size_t size;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(buf, "%lf %lf %ld %ld %llu %zu", &s.open_ms, &s.first_ms, &s.minflt, &s.majflt,
               &count, &size) != 6) {
        fprintf(stderr, "open_1m: the child failed (%s)\n", buf);
        exit(1);
    }
    s.total_ms = s.open_ms + s.first_ms;
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child"))
        return child(argv[2]);
    const char *dir = "/tmp/stoker-bench-1m";
    uint64_t n = 1000000;
    int reps = 5, cold = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--records") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-cold"))
            cold = 0;
        else {
            fprintf(stderr, "usage: open_1m [--dir DIR] [--records N] [--reps R] [--no-cold]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || n == 0) {
        fprintf(stderr, "open_1m: --reps 1..%d, --records > 0\n", MAX_REPS);
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/shard-00000.stk", dir);
    stk_dataset *ds = NULL;
    char uri[1100];
    snprintf(uri, sizeof uri, "stk:%s?verify=off", path);
    int ok = stk_dataset_open(uri, NULL, &ds) == 0;
    if (ok) {
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        ok = info.count == n;
        stk_dataset_close(ds);
    }
    if (!ok)
        write_dataset(dir, path, n);
    struct stat st;
    stat(path, &st);

    static const char *const modes[] = {"", "?io=pread"};
    static const char *const mode_names[] = {"mmap (default)", "io=pread"};
    printf("open_1m: %llu records, shard %s (%.1f MB); medians of %d fresh processes\n",
           (unsigned long long)n, path, (double)st.st_size / 1e6, reps);
    printf("%-16s %-5s %10s %14s %10s %10s %8s %10s\n", "reader", "cache", "open ms",
           "1st sample ms", "total ms", "min flt", "maj flt", "resident");
    char json[4096];
    int jl = snprintf(json, sizeof json, "{\"records\": %llu, \"file_bytes\": %lld, \"runs\": [",
                      (unsigned long long)n, (long long)st.st_size);
    for (int m = 0; m < 2; m++) {
        snprintf(uri, sizeof uri, "stk:%s%s", path, modes[m]);
        for (int c = 0; c < 1 + cold; c++) {
            double open_ms[MAX_REPS], first_ms[MAX_REPS], total_ms[MAX_REPS];
            double minflt[MAX_REPS], majflt[MAX_REPS], resident = 0;
            if (!c)
                run_child(uri); /* warm the cache */
            for (int r = 0; r < reps; r++) {
                if (c) {
                    drop(path);
                    resident += resident_fraction(path) / reps;
                }
                sample s = run_child(uri);
                open_ms[r] = s.open_ms;
                first_ms[r] = s.first_ms;
                total_ms[r] = s.total_ms;
                minflt[r] = (double)s.minflt;
                majflt[r] = (double)s.majflt;
            }
            double all[MAX_REPS];
            memcpy(all, total_ms, sizeof all);
            double mo = median(open_ms, reps), mf = median(first_ms, reps);
            double mt = median(total_ms, reps), mi = median(minflt, reps);
            double ma = median(majflt, reps);
            printf("%-16s %-5s %10.2f %14.3f %10.2f %10.0f %8.0f %9.1f%%   runs:", mode_names[m],
                   c ? "cold" : "warm", mo, mf, mt, mi, ma, c ? resident * 100 : 100.0);
            for (int r = 0; r < reps; r++)
                printf(" %.1f", all[r]);
            printf("\n");
            jl += snprintf(json + jl, sizeof json - (size_t)jl,
                           "%s{\"reader\": \"%s\", \"cache\": \"%s\", \"open_ms\": %.3f, "
                           "\"first_sample_ms\": %.3f, \"total_ms\": %.3f}",
                           m || c ? ", " : "", m ? "pread" : "mmap", c ? "cold" : "warm", mo, mf,
                           mt);
        }
    }
    printf("goal: < 50 ms from open to the first sample (cold: DONTNEED is best effort on a VM; "
           "'resident' is what mincore saw right after the drop)\n");
    printf("%s]}\n", json);
    return 0;
}
