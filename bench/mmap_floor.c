/*
 * mmap_floor.c — what a first pass through a freshly mapped, already cached
 * file costs the kernel, against copying the same bytes with read().
 *
 *   mmap_floor FILE [--reps R]
 *
 * Why: reading .stk shards through mmap is zero copy, but the first touch
 * of each 4 KiB page of a new mapping takes a page fault that installs its
 * page-table entry (fault-around maps up to 16 at a time). That one-time
 * cost is the floor under a new process's first epoch, whatever the
 * reader does; from then on a record costs only the consumer's own reads.
 * This measures, on a file already in the page cache (it is read once
 * first), one thread each, best of R:
 *
 *   touch        mmap + touch one byte per page (the faults)
 *   populate     mmap + madvise(MADV_POPULATE_READ) (the same entries, in
 *                one call) + the touch
 *   hugepage     mmap at a 2 MiB-aligned address + MADV_HUGEPAGE + touch;
 *                FilePmdMapped from /proc/self/smaps tells whether the
 *                kernel mapped the page cache with 2 MiB entries (it needs
 *                CONFIG_READ_ONLY_THP_FOR_FS or a filesystem with PMD-sized
 *                folios; where it does, the first-touch cost all but goes)
 *   retouch      the touch again through a populated mapping (steady state)
 *   read         read() of the whole file in 128 KiB pieces into one buffer
 *                (the kernel's copy, what reading individual files costs
 *                per byte, without open/close)
 *
 * and prints ns per 4 KiB page for each.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile uint64_t sink;

static void touch(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 4096)
        s += p[i];
    sink += s;
}

/* FilePmdMapped (kB) of the mapping at p, from /proc/self/smaps. */
static long pmd_mapped_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512], head[32];
    long kb = -1;
    int in = 0;
    if (!f)
        return -1;
    snprintf(head, sizeof head, "%lx-", (unsigned long)(uintptr_t)p);
    while (fgets(line, sizeof line, f)) {
        if (strchr(line, '-') && strncmp(line, head, strlen(head)) == 0)
            in = 1;
        else if (in && sscanf(line, "FilePmdMapped: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mmap_floor FILE [--reps R]\n");
        return 2;
    }
    int reps = argc > 3 && !strcmp(argv[2], "--reps") ? atoi(argv[3]) : 5;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < (1 << 22)) {
        fprintf(stderr, "mmap_floor: %s: cannot open, or smaller than 4 MiB\n", argv[1]);
        return 1;
    }
    size_t n = (size_t)st.st_size, pages = (n + 4095) / 4096, align = 2u << 20;
    uint8_t *buf = malloc(1 << 17);
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    long pmd = -1;
    /* Bring the file into the page cache. */
    for (ssize_t r; (r = read(fd, buf, 1 << 17)) > 0;)
        ;
    for (int rep = 0; rep < reps; rep++) {
        for (int m = 0; m < 3; m++) {
            uint8_t *res = NULL, *at = NULL;
            if (m == 2) { /* reserve, to place the mapping 2 MiB-aligned */
                res = mmap(NULL, n + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (res == MAP_FAILED)
                    return 1;
                at = (uint8_t *)(((uintptr_t)res + align - 1) & ~(uintptr_t)(align - 1));
            }
            double t0 = now();
            uint8_t *p = mmap(at, n, PROT_READ, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
            if (p == MAP_FAILED)
                return 1;
            if (m == 1)
                madvise(p, n, MADV_POPULATE_READ);
            if (m == 2)
                madvise(p, n, MADV_HUGEPAGE);
            touch(p, n);
            double t = now() - t0;
            best[m] = t < best[m] ? t : best[m];
            if (m == 2)
                pmd = pmd_mapped_kb(p);
            if (m == 0) {
                t0 = now();
                touch(p, n);
                t = now() - t0;
                best[3] = t < best[3] ? t : best[3];
            }
            munmap(res ? res : p, res ? n + align : n);
        }
        double t0 = now();
        for (off_t off = 0; off < (off_t)n; off += 1 << 17)
            if (pread(fd, buf, 1 << 17, off) < 0)
                return 1;
        double t = now() - t0;
        best[4] = t < best[4] ? t : best[4];
    }
    static const char *names[5] = {"touch (page faults)", "populate + touch",
                                   "hugepage + touch", "retouch (steady state)",
                                   "read() copy"};
    printf("%s: %.0f MB, %zu pages, best of %d, one thread\n", argv[1], n / 1e6, pages, reps);
    for (int m = 0; m < 5; m++)
        printf("  %-24s %8.1f ms  %6.0f ns/page\n", names[m], best[m] * 1e3,
               best[m] * 1e9 / (double)pages);
    printf("  FilePmdMapped with MADV_HUGEPAGE: %ld kB (0: the page cache is mapped 4 KiB at a "
           "time)\n",
           pmd);
    printf("  first touch / read() copy: %.2f\n", best[0] / best[4]);
    free(buf);
    close(fd);
    return 0;
}
