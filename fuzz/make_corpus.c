/*
 * make_corpus.c — writes the seed corpora of the fuzz targets (run by
 * fuzz/make_corpus.sh, which builds it against the static library; not part
 * of the CMake build).
 *
 *   make_corpus SHARD_DIR DATASETS_DIR REPRO_DIR TINY.jpg TINY.png
 *
 * SHARD_DIR gets small valid shards written with the library's own writer
 * (src/format/stk/stk_writer.c) — raw, raw+zstd, encoded JPEG/PNG, many fields,
 * bytes only, fixed only, 0..3 records — and damaged copies of one of them
 * (truncated, bad magic/version, one flipped byte in the header, the index,
 * a record, the footer). DATASETS_DIR gets CIFAR-10/100 files and IDX
 * images/labels files, plain and gzip, valid and damaged. REPRO_DIR gets
 * the reproducers of findings not fixed yet (see repro()).
 *
 * Every input stays under 64 KiB (the fuzzers run with -max_len=65536).
 * Pixel values come from a fixed formula, so the output is reproducible.
 */
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"

#include <stoker/stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static const char *g_shard_dir, *g_data_dir;

static void die(const char *what)
{
    fprintf(stderr, "make_corpus: %s: %s\n", what, stk_errmsg());
    exit(1);
}

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n ? (size_t)n : 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        die(path);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void spit(const char *dir, const char *name, const void *data, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        die(path);
}

static void spit_gz(const char *dir, const char *name, const void *data, size_t size)
{
    uLong cap = compressBound((uLong)size) + 64;
    uint8_t *out = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (!out || deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        die("deflateInit2");
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)size;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        die("deflate");
    spit(dir, name, out, zs.total_out);
    deflateEnd(&zs);
    free(out);
}

/* ------------------------------------------------------------------------ */
/* Shards                                                                    */
/* ------------------------------------------------------------------------ */

static stk_field_def field(const char *name, stk_field_type type, uint8_t compression,
                           uint8_t ndim, uint32_t d0, uint32_t d1, uint32_t d2)
{
    stk_field_def f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "%s", name);
    f.type = (uint8_t)type;
    f.compression = compression;
    f.ndim = ndim;
    f.dims[0] = d0;
    f.dims[1] = d1;
    f.dims[2] = d2;
    return f;
}

enum { FLAT, GRADIENT, BLOCKY, NOISE };

/* Raw image payload: 12-byte prefix, then pixels (or one zstd frame). */
static size_t raw_payload(uint8_t *out, uint32_t h, uint32_t w, uint32_t c, int pattern,
                          int seed, int zstd)
{
    size_t n = (size_t)h * w * c;
    uint8_t *px = malloc(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = pattern == GRADIENT ? (uint32_t)(i * (size_t)seed / 7 + (i % c) * 40)
                   : pattern == BLOCKY   ? (uint32_t)((i / 96) * (size_t)seed + (i % c) * 40)
                   : pattern == NOISE    ? (uint32_t)((i + 1) * 2654435761u >> 13)
                                         : 128u;
        px[i] = (uint8_t)v;
    }
    stk_wr32(out, h);
    stk_wr32(out + 4, w);
    stk_wr32(out + 8, c);
    size_t size;
    if (zstd) {
        size_t z = ZSTD_compress(out + 12, ZSTD_compressBound(n), px, n, 3);
        if (ZSTD_isError(z))
            die("zstd");
        size = 12 + z;
    } else {
        memcpy(out + 12, px, n);
        size = 12 + n;
    }
    free(px);
    return size;
}

static const char k_classes[] = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck";

static void shard_path(char *path, size_t n, const char *name)
{
    snprintf(path, n, "%s/%s", g_shard_dir, name);
}

/* image: raw_image 32x32x3 (zstd if asked) + label int64; `count` records. */
static void raw_shard(const char *name, uint64_t count, int zstd)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[2] = {field("image", STK_FIELD_RAW_IMAGE, (uint8_t)zstd, 3, 32, 32, 3),
                          field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0)};
    stk_kv meta[3] = {{"class_names", k_classes, sizeof k_classes - 1},
                      {"source", "cifar10:corpus", 14},
                      {"created_by", "fuzz/make_corpus", 16}};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 2, meta, 3, &w) < 0)
        die(path);
    uint8_t *buf = malloc(12 + ZSTD_compressBound(3072));
    for (uint64_t r = 0; r < count; r++) {
        /* zstd records stay small (a flat image, then blocky ones): a
         * noisy one is the pread reproducer, see repro() */
        size_t n = zstd ? raw_payload(buf, 32, 32, 3, r ? BLOCKY : FLAT, (int)r, 1)
                        : raw_payload(buf, 32, 32, 3, r ? GRADIENT : FLAT, (int)r, 0);
        int64_t label = (int64_t)(r * 3 % 10);
        stk_value_bytes v[2] = {{buf, n}, {&label, 8}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    free(buf);
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* image: encoded bytes (JPEG or PNG) + label. */
static void encoded_shard(const char *name, const uint8_t *img, size_t size, uint64_t count)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[2] = {field("image", STK_FIELD_IMAGE, 0, 0, 0, 0, 0),
                          field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0)};
    stk_kv meta[2] = {{"class_names", "a\nb", 3}, {"shard", "0/1", 3}};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 2, meta, 2, &w) < 0)
        die(path);
    for (uint64_t r = 0; r < count; r++) {
        int64_t label = (int64_t)(r % 2);
        stk_value_bytes v[2] = {{img, size}, {&label, 8}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* image + label + source_name (as stk_pack writes it: one escaped name a
 * record; record 2's holds a raw LF, which stk_dataset_sample_path refuses). */
static void named_shard(const char *name, const uint8_t *img, size_t size)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[4] = {field("image", STK_FIELD_IMAGE, 0, 0, 0, 0, 0),
                          field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0),
                          field("source_index", STK_FIELD_INT64, 0, 0, 0, 0, 0),
                          field("source_name", STK_FIELD_STRING, 0, 0, 0, 0, 0)};
    static const char *const names[3] = {"train/a/x\\y.jpg", "train/b/\\xff\\n.jpg",
                                         "raw\nbreak"};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 4, NULL, 0, &w) < 0)
        die(path);
    for (uint64_t r = 0; r < 3; r++) {
        int64_t label = (int64_t)(r % 2), src = (int64_t)r;
        stk_value_bytes v[4] = {{img, size}, {&label, 8}, {&src, 8},
                                {names[r], strlen(names[r])}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* Every field type: encoded image, raw image of varying shape (zstd),
 * bytes, string, int64 scalar and array, float32 array. */
static void multi_shard(const char *name, const uint8_t *jpg, size_t jpg_size, uint64_t count)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[8] = {
        field("image", STK_FIELD_IMAGE, 0, 0, 0, 0, 0),
        field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0),
        field("mask", STK_FIELD_RAW_IMAGE, 1, 0, 0, 0, 0),
        field("caption", STK_FIELD_STRING, 0, 0, 0, 0, 0),
        field("blob", STK_FIELD_BYTES, 0, 0, 0, 0, 0),
        field("bbox", STK_FIELD_FLOAT32, 0, 2, 2, 2, 0),
        field("tags", STK_FIELD_INT64, 0, 1, 3, 0, 0),
        field("depth", STK_FIELD_RAW_IMAGE, 0, 0, 0, 0, 0),
    };
    stk_kv meta[2] = {{"class_names", "zero\none\ntwo", 12}, {"note", "", 0}};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 8, meta, 2, &w) < 0)
        die(path);
    uint8_t mask[512], depth[256];
    for (uint64_t r = 0; r < count; r++) {
        int64_t label = (int64_t)(r % 3), tags[3] = {(int64_t)r, -1, INT64_MAX};
        float bbox[4] = {0.f, 0.5f, 1.f, -2.f};
        char caption[32];
        int cl = snprintf(caption, sizeof caption, "record %llu", (unsigned long long)r);
        uint8_t blob[7] = {0, 1, 2, 3, 4, 5, (uint8_t)r};
        size_t mn = raw_payload(mask, 4 + (uint32_t)r, 5, 1, FLAT, 0, 1);
        size_t dn = raw_payload(depth, 3, 2 + (uint32_t)r, 2, GRADIENT, (int)r + 1, 0);
        stk_value_bytes v[8] = {{jpg, jpg_size}, {&label, 8},        {mask, mn},
                                {caption, (size_t)cl}, {blob, r ? sizeof blob : 0},
                                {bbox, 16},      {tags, 24},         {depth, dn}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* Format 1.2: a detection record — boxes float32 {0, 4} and box_labels
 * int64 {0} whose rows vary per record (0, 1, 2 ...), and a mask. */
static void detect_shard(const char *name, const uint8_t *jpg, size_t jpg_size, uint64_t count)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[5] = {
        field("image", STK_FIELD_IMAGE, 0, 0, 0, 0, 0),
        field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0),
        field("boxes", STK_FIELD_FLOAT32, 0, 2, 0, 4, 0),
        field("box_labels", STK_FIELD_INT64, 0, 1, 0, 0, 0),
        field("mask", STK_FIELD_RAW_IMAGE, 0, 3, 12, 16, 1),
    };
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 5, NULL, 0, &w) < 0)
        die(path);
    uint8_t mask[STK_RAW_PREFIX + 12 * 16];
    for (uint64_t r = 0; r < count; r++) {
        int64_t label = (int64_t)r, box_labels[4] = {1, 2, 3, 4};
        float boxes[16] = {0, 0, 4, 4, 1, 2, 3, 5, 8, 8, 16, 12, 0.5f, 0.5f, 1.5f, 1.5f};
        size_t mn = raw_payload(mask, 12, 16, 1, FLAT, (int)r, 0);
        stk_value_bytes v[5] = {{jpg, jpg_size}, {&label, 8}, {boxes, r * 16},
                                {box_labels, r * 8}, {mask, mn}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* One variable bytes field, no image, no label. */
static void bytes_shard(const char *name, uint64_t count)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[1] = {field("data", STK_FIELD_BYTES, 0, 0, 0, 0, 0)};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 1, NULL, 0, &w) < 0)
        die(path);
    for (uint64_t r = 0; r < count; r++) {
        uint8_t b[100];
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (uint8_t)(r + i);
        stk_value_bytes v[1] = {{b, (size_t)(r * 37 % 100)}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* Fixed fields only: nothing in the data area. */
static void fixed_shard(const char *name, uint64_t count)
{
    char path[1024];
    shard_path(path, sizeof path, name);
    stk_field_def f[2] = {field("label", STK_FIELD_INT64, 0, 0, 0, 0, 0),
                          field("score", STK_FIELD_FLOAT32, 0, 1, 1, 0, 0)};
    stk_shard_file *w;
    if (stk_shard_file_open(path, f, 2, NULL, 0, &w) < 0)
        die(path);
    for (uint64_t r = 0; r < count; r++) {
        int64_t label = (int64_t)r - 1;
        float score = (float)r / 3;
        stk_value_bytes v[2] = {{&label, 8}, {&score, 4}};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);
}

/* Damaged copies of `src` (a valid shard in SHARD_DIR). */
static void damaged(const char *src)
{
    char path[1024], name[256];
    shard_path(path, sizeof path, src);
    size_t size;
    uint8_t *b = slurp(path, &size);
    uint8_t *c = malloc(size);
    const uint8_t *footer = b + size - STK_FOOTER_SIZE;
    uint64_t index_offset = stk_rd64(footer + FTR_INDEX_OFFSET);
    uint64_t data_offset = stk_rd64(b + HDR_DATA_OFFSET);
    struct {
        const char *what;
        size_t at;   /* byte to flip (xor 0x01), or SIZE_MAX */
        size_t keep; /* bytes kept (truncation) */
    } cases[] = {
        {"truncated-footer", SIZE_MAX, size - 1},
        {"truncated-index", SIZE_MAX, (size_t)index_offset + 8},
        {"truncated-min", SIZE_MAX, STK_PAGE + STK_FOOTER_SIZE},
        {"flip-magic", HDR_MAGIC + 1, size},
        {"flip-version", HDR_VMAJOR, size},
        {"flip-fieldtable", STK_HEADER_SIZE + FLD_TYPE, size},
        {"flip-index", (size_t)index_offset + 3, size},
        {"flip-record", (size_t)data_offset + 100, size},
        {"flip-footer", size - STK_FOOTER_SIZE + FTR_RECORD_COUNT, size},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(c, b, size);
        if (cases[i].at != SIZE_MAX)
            c[cases[i].at] ^= 0x01;
        snprintf(name, sizeof name, "bad-%s-%s", cases[i].what, src);
        spit(g_shard_dir, name, c, cases[i].keep);
    }
    free(b);
    free(c);
    uint8_t zeros[STK_PAGE + STK_FOOTER_SIZE] = {0};
    spit(g_shard_dir, "bad-zeros.stk", zeros, sizeof zeros);
    spit(g_shard_dir, "bad-empty.stk", zeros, 0);
}

/* Reproducers of open findings (REPRO_DIR, not replayed by CTest until the
 * fix lands; then move them into the shard corpus). */
static void repro(const char *dir)
{
    char path[1024];
    stk_field_def f[1] = {field("image", STK_FIELD_RAW_IMAGE, 1, 0, 0, 0, 0)};
    stk_shard_file *w;
    uint8_t *buf = malloc(12 + ZSTD_compressBound(4096u * 4096 * 4));

    /* ?io=pread: the record sits in the read scratch, which raw_image()
     * grows (freeing it) before ZSTD_decompress reads the frame from it. */
    snprintf(path, sizeof path, "%s/pread-zstd-use-after-free.stk", dir);
    if (stk_shard_file_open(path, f, 1, NULL, 0, &w) < 0)
        die(path);
    stk_value_bytes v[1];
    for (int r = 0; r < 3; r++) { /* ASan sees the first; release builds the third */
        v[0] = (stk_value_bytes){buf, raw_payload(buf, 32, 32, 3, r == 2 ? GRADIENT : NOISE, r, 1)};
        if (stk_shard_file_add(w, v) < 0)
            die(path);
    }
    if (stk_shard_file_finish(w) < 0)
        die(path);

    /* 16 KiB of file, 4096x4096x4 = 64 MiB of pixels: over the harness's
     * max_pixels (2^20), which the shard reader does not consult. */
    snprintf(path, sizeof path, "%s/zstd-over-max-pixels.stk", dir);
    if (stk_shard_file_open(path, f, 1, NULL, 0, &w) < 0)
        die(path);
    v[0].size = raw_payload(buf, 4096, 4096, 4, FLAT, 0, 1);
    if (stk_shard_file_add(w, v) < 0 || stk_shard_file_finish(w) < 0)
        die(path);
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* CIFAR and IDX                                                             */
/* ------------------------------------------------------------------------ */

static void datasets(void)
{
    /* CIFAR-10: 2 records; CIFAR-100: 2 records (coarse, fine, pixels). */
    uint8_t cifar[2 * 3074];
    for (size_t i = 0; i < sizeof cifar; i++)
        cifar[i] = (uint8_t)(i * 7);
    cifar[0] = 3;
    cifar[3073] = 9;
    spit(g_data_dir, "cifar10-2.bin", cifar, 2 * 3073);
    spit(g_data_dir, "cifar10-bad-label.bin", (uint8_t[3073]){42}, 3073);
    spit(g_data_dir, "cifar10-short.bin", cifar, 3000);
    cifar[0] = 19;
    cifar[1] = 99;
    cifar[3074] = 0;
    cifar[3075] = 5;
    spit(g_data_dir, "cifar100-2.bin", cifar, sizeof cifar);

    /* IDX images 3 x 4 x 4 (N,H,W), 2 x 3 x 3 x 3 (N,H,W,C); labels of 3. */
    uint8_t img3[16 + 48] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 4};
    for (int i = 0; i < 48; i++)
        img3[16 + i] = (uint8_t)(i * 5);
    uint8_t img4[20 + 54] = {0, 0, 8, 4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 3};
    for (int i = 0; i < 54; i++)
        img4[20 + i] = (uint8_t)(255 - i);
    uint8_t lab[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 7, 2};
    spit(g_data_dir, "idx-images3", img3, sizeof img3);
    spit(g_data_dir, "idx-images4", img4, sizeof img4);
    spit(g_data_dir, "idx-labels", lab, sizeof lab);
    spit_gz(g_data_dir, "idx-images3.gz", img3, sizeof img3);
    spit_gz(g_data_dir, "idx-labels.gz", lab, sizeof lab);
    spit(g_data_dir, "idx-images3-truncated", img3, sizeof img3 - 5);
    spit_gz(g_data_dir, "idx-images3-truncated.gz", img3, sizeof img3 - 5);
    uint8_t huge[16] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0x40, 0, 0, 0, 0x40, 0}; /* 1 x 16384^2 */
    spit_gz(g_data_dir, "idx-huge-claim.gz", huge, sizeof huge);
    uint8_t i16[8 + 6] = {0, 0, 0x0b, 1, 0, 0, 0, 3}; /* int16 labels: unsupported */
    spit(g_data_dir, "idx-int16", i16, sizeof i16);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: make_corpus SHARD_DIR DATASETS_DIR REPRO_DIR TINY.jpg TINY.png\n");
        return 2;
    }
    g_shard_dir = argv[1];
    g_data_dir = argv[2];
    size_t jn, pn;
    uint8_t *jpg = slurp(argv[4], &jn), *png = slurp(argv[5], &pn);

    raw_shard("raw-0.stk", 0, 0);
    raw_shard("raw-1.stk", 1, 0);
    raw_shard("raw-3.stk", 3, 0);
    raw_shard("zstd-1.stk", 1, 1);
    raw_shard("zstd-3.stk", 3, 1);
    encoded_shard("jpeg-2.stk", jpg, jn, 2);
    encoded_shard("png-1.stk", png, pn, 1);
    multi_shard("multi-3.stk", jpg, jn, 3);
    named_shard("named-3.stk", jpg, jn);
    bytes_shard("bytes-3.stk", 3);
    detect_shard("detect-4.stk", jpg, jn, 4);
    fixed_shard("fixed-2.stk", 2);
    damaged("raw-3.stk");
    datasets();
    repro(argv[3]);
    free(jpg);
    free(png);
    return 0;
}
