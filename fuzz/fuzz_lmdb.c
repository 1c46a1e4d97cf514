/*
 * fuzz_lmdb.c — libFuzzer target for the LMDB reader's value parsing
 * (src/format/lmdb.c: Caffe Datums through protowire.c, KEY.cls labels),
 * through the public API.
 *
 * What is not fuzzed, and why: data.mdb itself. liblmdb trusts its file
 * (it checks the meta pages' magic and version, and reports some damage as
 * MDB_CORRUPTED, but a crafted B-tree page can make it read out of bounds),
 * so mutating the environment file would find liblmdb's bugs, not
 * stoker's. The harness instead writes a valid environment with liblmdb
 * whose keys and values come from the input, and fuzzes what stoker parses:
 *
 *   input := flags record*          flags: bit 0 value=encoded, bit 1 color=rgb
 *   record := kind len8 bytes[len8] kind bit 0: a ".cls" key (value=encoded
 *                                   labels), else an image key
 *
 * Keys are "%06u.jpg" / "%06u.cls", numbered per kind modulo 64: the
 * k-th image pairs with the k-th label (so some images have labels, some
 * labels no image, and past 64 keys repeat: the last put wins). The environment is opened and every sample read through
 * stk_dataset_read_field, stk_dataset_label and stk_dataset_read_alloc;
 * a read must return 0 or STK_EDATA naming the key, and field and label
 * reads must agree.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_lmdb"
#include "fuzz_util.h"

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 64

static char g_dir[512];
static char g_env[600];
static volatile uint64_t g_sink;

/* The directory and what write_env made in it, at exit. */
static void cleanup(void)
{
    char lock[620];
    snprintf(lock, sizeof lock, "%s-lock", g_env);
    unlink(g_env);
    unlink(lock);
    rmdir(g_dir);
}

/* Write the environment (one file, MDB_NOSUBDIR); 0 if it has no record. */
static int write_env(const uint8_t *d, size_t n)
{
    char lock[620];
    if (!g_env[0]) {
        fuzz_tempdir(g_dir, sizeof g_dir, "fuzz_lmdb");
        snprintf(g_env, sizeof g_env, "%s/env.mdb", g_dir);
        atexit(cleanup);
    }
    snprintf(lock, sizeof lock, "%s-lock", g_env);
    unlink(g_env);
    unlink(lock);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    check(mdb_env_create(&env) == 0, "mdb_env_create");
    check(mdb_env_set_mapsize(env, 8u << 20) == 0, "mdb_env_set_mapsize");
    check(mdb_env_open(env, g_env, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOLOCK, 0600) == 0,
          "mdb_env_open");
    check(mdb_txn_begin(env, NULL, 0, &txn) == 0, "mdb_txn_begin");
    check(mdb_dbi_open(txn, NULL, 0, &dbi) == 0, "mdb_dbi_open");
    size_t o = 0;
    int puts = 0;
    unsigned counter[2] = {0, 0};
    while (o + 2 <= n) {
        uint8_t kind = d[o], len = d[o + 1];
        o += 2;
        if (len > n - o)
            len = (uint8_t)(n - o);
        char key[32];
        snprintf(key, sizeof key, "%06u.%s", counter[kind & 1]++ % 64, kind & 1 ? "cls" : "jpg");
        MDB_val k = {strlen(key), key}, v = {len, (void *)(d + o)};
        if (mdb_put(txn, dbi, &k, &v, 0) == 0)
            puts++;
        o += len;
    }
    check(mdb_txn_commit(txn) == 0, "mdb_txn_commit");
    mdb_env_close(env);
    return puts;
}

static void exercise(stk_dataset *ds)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    for (uint64_t i = 0; i < info.count && i < READ_BUDGET; i++) {
        void *p = NULL;
        size_t n = 0;
        int rc = stk_dataset_read_field(ds, i, NULL, &p, &n, NULL);
        check(rc == 0 || rc == STK_EDATA, "read_field: 0 or STK_EDATA");
        if (rc == STK_EDATA)
            check(strstr(stk_errmsg(), ": key '") != NULL, "a damage message names the key");
        int64_t label;
        int lrc = stk_dataset_label(ds, i, &label);
        check((rc == 0) == (lrc == 0), "read_field and label agree on damage");
        if (rc == 0) {
            uint64_t s = 0;
            for (size_t k = 0; k < n; k++)
                s += ((const uint8_t *)p)[k];
            g_sink += s + (uint64_t)label;
            stk_free(p);
        }
        uint8_t *px = NULL;
        uint32_t shape[3];
        int64_t got = stk_dataset_read_alloc(ds, i, &px, shape, &label);
        check(got >= 0 || got == STK_EDATA, "read_alloc: bytes or STK_EDATA");
        if (got > 0) {
            check((uint64_t)got == (uint64_t)shape[0] * shape[1] * shape[2], "read_alloc size");
            uint64_t s = 0;
            for (int64_t k = 0; k < got; k++)
                s += px[k];
            g_sink += s;
        }
        stk_free(px);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    int puts = write_env(data + 1, size - 1);
    char uri[1024];
    snprintf(uri, sizeof uri, "lmdb:%s?value=%s%s", g_env, flags & 1 ? "encoded" : "datum",
             (flags & 3) == 2 ? "&color=rgb" : "");
    stk_dataset_options opts = {.max_bytes = 16u << 20, .max_samples = 1u << 20,
                                .max_pixels = 1u << 20};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, &opts, &ds);
    if (rc == 0) {
        check(puts > 0, "an environment without records does not open");
        exercise(ds);
        stk_dataset_close(ds);
    } else {
        check(ds == NULL, "a failed open leaves no dataset");
        check(rc == STK_EFORMAT, "only an empty environment or a bad .cls fails the open");
    }
    return 0;
}
