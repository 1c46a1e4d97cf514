/*
 * fuzz_tfrecord.c — libFuzzer target for the TFRecord reader
 * (src/format/tfrecord.c, with protowire.c and recordset.c), through the
 * public API.
 *
 * The input plays four roles, so mutations reach each parser past the
 * checksums that guard it:
 *
 *   - a TFRecord file as given (the framing scan: lengths, their CRCs,
 *     truncation), opened with verify=always and verify=first;
 *   - the bytes of one tf.train.Example, framed by the harness with the
 *     right CRCs as record 1 of a file whose record 0 is a valid Example
 *     (the Example parser: wire types, lengths, keys, lists), read with the
 *     default keys and with image_key=a&label_key=b;
 *   - a DALI tfrecord2idx index (text) beside a valid 3-record file;
 *   - the offsets of a stoker index cache beside that file, with the header
 *     (staleness keys of the real file) and the checksum made right by the
 *     harness, so the tiling checks are reached.
 *
 * Every opened dataset is read record by record (the first and last
 * READ_BUDGET/2) through stk_dataset_read_field and stk_dataset_label, every
 * byte handed out touched; when the image reads, the label must read too
 * and agree with the "label" field.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_tfrecord"
#include "fuzz_util.h"

#include "core/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 48

static int g_fd = -1;
static char g_mem[64];
static char g_dir[512];
static volatile uint64_t g_sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    g_sink += s;
}

static void put_mem(const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = fuzz_memfd("fuzz_tfrecord");
        snprintf(g_mem, sizeof g_mem, "/proc/self/fd/%d", g_fd);
    }
    fuzz_write_fd(g_fd, data, size);
}

static void cleanup(void)
{
    static const char *const names[] = {"ok.tfrecord", "ok.tfrecord.idx", "ok.tfrecord.stkidx"};
    char p[1024];
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

static void put_file(const char *name, const void *data, size_t size)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    check(f != NULL, "fopen");
    check(fwrite(data, 1, size, f) == size, "fwrite");
    check(fclose(f) == 0, "fclose");
}

/* --- building records ------------------------------------------------------ */

typedef struct obuf {
    uint8_t *d;
    size_t n, cap;
} obuf;

static void put(obuf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->d = realloc(b->d, b->cap);
        check(b->d != NULL, "realloc");
    }
    if (n)
        memcpy(b->d + b->n, p, n);
    b->n += n;
}

static void put_u32(obuf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(obuf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void frame(obuf *b, const uint8_t *data, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put(b, len, 8);
    put_u32(b, stk_crc32c_mask(stk_crc32c(0, len, 8)));
    put(b, data, n);
    put_u32(b, stk_crc32c_mask(stk_crc32c(0, data, n)));
}

/* Example{features{feature{"image/encoded": bytes_list{"IMG01"}},
 * feature{"image/class/label": int64_list{[7]}}}}, hand-encoded. */
static const uint8_t k_example[] = {
    0x0a, 0x38, 0x0a, 0x1a, 0x0a, 0x0d, 'i', 'm', 'a', 'g', 'e', '/', 'e', 'n', 'c', 'o', 'd',
    'e', 'd', 0x12, 0x09, 0x0a, 0x07, 0x0a, 0x05, 'I', 'M', 'G', '0', '1', 0x0a, 0x1a, 0x0a,
    0x11, 'i', 'm', 'a', 'g', 'e', '/', 'c', 'l', 'a', 's', 's', '/', 'l', 'a', 'b', 'e', 'l',
    0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x07};

/* --- reading ----------------------------------------------------------------- */

static void read_all(const char *uri)
{
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.max_bytes = 16u << 20;
    o.max_samples = 1u << 16;
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, &o, &ds) != 0) {
        check(ds == NULL, "failed open left a dataset");
        check(stk_errmsg()[0] != '\0', "failed open without a message");
        return;
    }
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    check(info.count > 0, "an opened set has records");
    const char *note = stk_dataset_metadata(ds, "index");
    if (note)
        touch(note, strlen(note));
    for (uint64_t k = 0; k < info.count && k < READ_BUDGET; k++) {
        uint64_t i = k < READ_BUDGET / 2 ? k : info.count - (READ_BUDGET - k);
        if (k >= READ_BUDGET / 2 && info.count <= READ_BUDGET)
            i = k;
        void *img = NULL, *lab = NULL;
        size_t n = 0, ln = 0;
        int64_t label = 0;
        int rc = stk_dataset_read_field(ds, i, NULL, &img, &n, NULL);
        int rl = stk_dataset_label(ds, i, &label);
        if (rc == 0) {
            touch(img, n);
            check(rl == 0, "image read but label failed");
            check(stk_dataset_read_field(ds, i, "label", &lab, &ln, NULL) == 0,
                  "label field failed");
            check(ln == 8 && memcmp(lab, &label, 8) == 0, "label field disagrees");
        } else {
            check(rc == STK_EDATA, "a bad record is STK_EDATA");
            check(strstr(stk_errmsg(), ": record ") != NULL, "message names the record");
        }
        stk_free(img);
        stk_free(lab);
    }
    stk_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char uri[1024];
    if (!g_dir[0]) {
        fuzz_tempdir(g_dir, sizeof g_dir, "fuzz_tfrecord");
        atexit(cleanup);
    }
    if (size > (1u << 20))
        return 0;

    /* 1. The input as a TFRecord file. */
    put_mem(data, size);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&verify=always", g_mem);
    read_all(uri);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", g_mem);
    read_all(uri);

    /* 2. The input as an Example, framed, after a good record. */
    obuf f = {0};
    frame(&f, k_example, sizeof k_example);
    frame(&f, data, size);
    put_mem(f.d, f.n);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&verify=always", g_mem);
    read_all(uri);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&image_key=a&label_key=b", g_mem);
    read_all(uri);

    /* 3. A DALI index beside a valid 3-record file. */
    f.n = 0;
    for (int r = 0; r < 3; r++)
        frame(&f, k_example, sizeof k_example);
    put_file("ok.tfrecord", f.d, f.n);
    put_file("ok.tfrecord.idx", data, size);
    snprintf(uri, sizeof uri, "tfrecord:%s/ok.tfrecord?cache=off", g_dir);
    read_all(uri);

    /* 4. A cache of that file: the input as its offsets, the header and
     * checksum made right. */
    char p[1024];
    snprintf(p, sizeof p, "%s/ok.tfrecord.idx", g_dir);
    unlink(p);
    struct stat st;
    snprintf(p, sizeof p, "%s/ok.tfrecord", g_dir);
    check(stat(p, &st) == 0, "stat");
    obuf c = {0};
    uint64_t count = size / 8;
    size_t probe = f.n < 4096 ? f.n : 4096;
    put(&c, "STKTFIDX", 8);
    put_u32(&c, 1);
    put_u32(&c, 0);
    put_u64(&c, f.n);
    put_u64(&c, (uint64_t)((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec));
    put_u32(&c, stk_crc32c(0, f.d, probe));
    put_u32(&c, stk_crc32c(0, f.d + f.n - probe, probe));
    put_u64(&c, count);
    put(&c, data, count * 8);
    put_u32(&c, stk_crc32c(0, c.d, c.n));
    put_file("ok.tfrecord.stkidx", c.d, c.n);
    snprintf(uri, sizeof uri, "tfrecord:%s/ok.tfrecord?verify=always", g_dir);
    read_all(uri);
    /* (the open rewrote a bad cache: read through the rewritten one too) */
    read_all(uri);
    snprintf(p, sizeof p, "%s/ok.tfrecord.stkidx", g_dir);
    unlink(p);
    free(f.d);
    free(c.d);
    return 0;
}
