/*
 * replay_main.c — runs a libFuzzer target's entry point over saved inputs,
 * without libFuzzer: the ordinary test build links each fuzz/fuzz_*.c with
 * this main() and CTest replays the committed corpus (and, in the ASan
 * build, under ASan + UBSan), as zstd's tests/fuzz and libjpeg-turbo do.
 *
 *   fuzz_shard_replay DIR_OR_FILE...
 *
 * Every regular file of each directory (sorted by name, not recursive) and
 * every file argument is read into a malloc of exactly its size (so ASan
 * catches a read one byte past the input) and passed to
 * LLVMFuzzerTestOneInput. A target that finds a problem aborts, which fails
 * the test. Exits 2 on usage errors, unreadable inputs or when no input was
 * found at all (an empty or missing corpus must not pass silently).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_one(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf || fread(buf, 1, size, f) != size) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    return 0;
}

static int run_dir(const char *dir, unsigned *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot list %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) {
                rc = -1;
                break;
            }
            names = grown;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = -1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (names)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            rc = run_one(names[i]);
            *count += rc == 0;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    unsigned count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
            return 2;
        }
        int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_one(argv[i]);
        if (rc < 0)
            return 2;
        if (!S_ISDIR(st.st_mode))
            count++;
    }
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 2;
    }
    fprintf(stderr, "replay: %u inputs, no failure\n", count);
    return 0;
}
