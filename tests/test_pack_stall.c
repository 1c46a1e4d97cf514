/*
 * test_pack_stall.c — stk_pack under injected thread stalls: the output is
 * byte-identical for jobs 1, 2, 4 and 16, and every record is its source
 * sample (issue 9, defect 1).
 *
 * How: this executable is linked with -Wl,--wrap=pthread_mutex_unlock
 * (CMakeLists.txt), so every pthread_mutex_unlock the library makes goes
 * through __wrap_pthread_mutex_unlock below, which unlocks and then, in any
 * thread but the test's own, yields or sleeps up to 3 ms at random. A pack
 * worker unlocks right after it learns which block to work on, so the stall
 * lands exactly in the window where the block can finish and the next one
 * start without it. A pack whose claims are not tied to their block then
 * fills the new block with the old block's samples. The reference is
 * independent of pack: the CIFAR reader over the files written here, the
 * label bytes written here, and the source_index column must equal the
 * record's position in the source.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "format/dataset.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "testutil.h"

static pthread_t main_thread;
static atomic_int stalls_on;
static atomic_uint stalls_done;

int __real_pthread_mutex_unlock(pthread_mutex_t *m);
int __wrap_pthread_mutex_unlock(pthread_mutex_t *m);

int __wrap_pthread_mutex_unlock(pthread_mutex_t *m)
{
    int rc = __real_pthread_mutex_unlock(m);
    if (!atomic_load(&stalls_on) || pthread_equal(pthread_self(), main_thread))
        return rc;
    static _Thread_local uint64_t x;
    if (!x)
        x = (uint64_t)(uintptr_t)&x ^ (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    switch (x % 4) {
    case 0:
        break;
    case 1:
        sched_yield();
        break;
    default: {
        struct timespec ts = {0, (long)((x >> 16) % 3000000)};
        nanosleep(&ts, NULL);
        atomic_fetch_add(&stalls_done, 1);
    }
    }
    return rc;
}

#define PER_FILE 600
#define FILES 5
#define TOTAL (PER_FILE * FILES)

/* Every record of `dir` is CIFAR sample i: pixels as the CIFAR reader gives
 * them, label as written, source_index = i. */
static void check_against_source(const char *dir, stk_dataset *cifar, const uint8_t *labels)
{
    stk_dataset *packed;
    assert_int_equal(stk_dataset_open(dir, NULL, &packed), 0);
    stk_dataset_info info;
    stk_dataset_info_get(packed, &info);
    assert_int_equal(info.count, TOTAL);
    static uint8_t x[3072], y[3072];
    for (uint64_t i = 0; i < TOTAL; i++) {
        int64_t lx, ly;
        assert_int_equal(stk_dataset_read(cifar, i, x, sizeof x, &lx), 3072);
        assert_int_equal(stk_dataset_read(packed, i, y, sizeof y, &ly), 3072);
        assert_memory_equal(x, y, 3072);
        assert_int_equal(ly, labels[i]);
        void *v;
        size_t n;
        assert_int_equal(stk_dataset_read_field(packed, i, "source_index", &v, &n, NULL), 0);
        assert_int_equal(n, 8);
        int64_t src;
        memcpy(&src, v, 8);
        free(v);
        assert_int_equal(src, (int64_t)i);
    }
    stk_dataset_close(packed);
}

static void test_pack_is_identical_for_any_jobs_under_stalls(void **state)
{
    (void)state;
    main_thread = pthread_self();
    char src[600];
    snprintf(src, sizeof src, "%s/cifar", tu_tmpdir());
    mkdir(src, 0755);
    static uint8_t labels[TOTAL];
    uint8_t *rec = malloc((size_t)PER_FILE * 3073);
    for (int f = 0; f < FILES; f++) {
        tu_fill_random(rec, (size_t)PER_FILE * 3073, (uint64_t)f + 11);
        for (int i = 0; i < PER_FILE; i++) {
            rec[(size_t)i * 3073] %= 10;
            labels[f * PER_FILE + i] = rec[(size_t)i * 3073];
        }
        char p[700];
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", src, f + 1);
        tu_write_file(p, rec, (size_t)PER_FILE * 3073);
    }
    free(rec);
    stk_dataset *cifar;
    assert_int_equal(stk_dataset_open(src, NULL, &cifar), 0);

    static const uint32_t jobs[] = {1, 2, 4, 16};
    const int rounds = 3;
    for (int round = 0; round < rounds; round++) {
        uint8_t *ref[64] = {0};
        size_t ref_n[64] = {0};
        uint32_t ref_shards = 0;
        for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
            char dest[700];
            snprintf(dest, sizeof dest, "%s/r%d-j%u", tu_tmpdir(), round, jobs[j]);
            stk_pack_options o = {.jobs = jobs[j], .shard_bytes = 1 << 20};
            stk_pack_result r;
            atomic_store(&stalls_on, 1);
            int rc = stk_pack(src, dest, &o, &r);
            atomic_store(&stalls_on, 0);
            assert_int_equal(rc, 0);
            assert_int_equal(r.records, TOTAL);
            assert_true(r.shards >= 3 && r.shards < 64);
            if (j == 0)
                ref_shards = r.shards;
            assert_int_equal(r.shards, ref_shards);
            for (uint32_t s = 0; s < r.shards; s++) {
                char path[800];
                snprintf(path, sizeof path, "%s/shard-%05u.stk", dest, s);
                size_t n = 0;
                uint8_t *b = tu_read_file(path, &n);
                assert_non_null(b);
                if (j == 0) {
                    ref[s] = b;
                    ref_n[s] = n;
                    continue;
                }
                if (n != ref_n[s] || memcmp(b, ref[s], n) != 0)
                    fail_msg("round %d: --jobs %u: %s differs from the --jobs 1 shard", round,
                             jobs[j], path);
                free(b);
            }
            check_against_source(dest, cifar, labels);
        }
        for (uint32_t s = 0; s < ref_shards; s++)
            free(ref[s]);
    }
    stk_dataset_close(cifar);
    /* The stalls did happen (the wrapper is linked in). */
    assert_true(atomic_load(&stalls_done) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_is_identical_for_any_jobs_under_stalls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
