/*
 * read_formats.c — read throughput of the same JPEG bytes from .stk shards,
 * individual files and a TFRecord-style file; random order, 2 threads, warm
 * and cold page cache. Prints JSON (bench/read_formats.py prints the table
 * with HDF5 beside it and the ratios).
 *
 *   read_formats --images DIR --stk DIR --work DIR [--threads 2] [--seed 1]
 *                [--reps 3] [--no-cold] [--only METHOD,...]
 *
 * Data. DIR is an ImageFolder root (class directories of image files). The
 * record order is the files sorted by class then name; WORK/files.txt lists
 * them (read_hdf5.py writes its HDF5 file from it) and WORK/perm.u32 holds
 * the random order (a seeded Fisher-Yates permutation, shared with
 * read_hdf5.py). --stk names a dataset packed from DIR (`stoker pack DIR
 * STKDIR`); if it does not exist it is written here with the library's
 * shard writer (fields image + label, as stk_pack writes them). The
 * TFRecord file WORK/photos.tfrecord is written on first use, with a
 * text offset index WORK/photos.tfrecord.idx ("offset size" lines, what
 * DALI's tfrecord2idx produces).
 *
 * Methods. Each delivers every record's full bytes to a consumer that sums
 * every 64th byte, so every page really comes in; the sum is the same for
 * every method (checked: it proves they all read the same bytes).
 *   stk            the library's reader, ds->vt->read: a pointer lent into
 *                  the mapping (zero copy); ?verify=first (the default)
 *   stk_always     ?verify=always (XXH3 of every record at every read)
 *   stk_pread      ?io=pread (one pread per record into a thread scratch)
 *   stk_verify_off ?verify=off (the cost of the mapping without hashing)
 *   stk_willneed   diagnostic, not a reader mode: ?verify=off, and the
 *                  benchmark calls madvise(MADV_WILLNEED) on the record's
 *                  pages before touching them — what the reader could do in
 *                  stk_shard_record_get (the mapping is MADV_RANDOM, so a cold record
 *                  otherwise comes in one synchronous 4 KiB read per page;
 *                  MADV_POPULATE_READ was tried too and is slower, warm and
 *                  cold)
 *   files          open + fstat + read into a per-thread buffer + close
 *   tfrecord_crc   one pread per record (u64 length, u32 masked crc32c of
 *                  the length, data, u32 masked crc32c of the data), both
 *                  CRCs checked as TensorFlow's reader does; crc32c in
 *                  software, slicing-by-8 tables
 *   tfrecord_hwcrc the same with the SSE4.2 crc32 instruction (what TF/absl
 *                  use on x86), when the CPU has it
 *   tfrecord       the same pread, no CRC check
 *   stoker_tfrecord        the library's tfrecord: reader (src/format/tfrecord.c),
 *                  ds->vt->read, on WORK/photos-example.tfrecord: the same
 *                  bytes as tf.train.Example records (image/encoded,
 *                  image/class/label), so each read also parses the
 *                  Example; a pointer into the mapping (zero copy), the data
 *                  CRC checked on first read (verify=first, the default);
 *                  the index from its cache WORK/photos-example.tfrecord.stkidx
 *   stoker_tfrecord_always the same, ?verify=always (CRC-32C at every read)
 *   stoker_hdf5    the library's hdf5: reader, ds->vt->read, on WORK/photos.h5
 *                  (one contiguous vlen uint8 dataset "images", h5py's
 *                  layout, and int64 "labels"; the file bench/read_hdf5.py
 *                  reads with h5py, written here with libhdf5 when absent
 *                  or without labels): a pointer lent into the mapping,
 *                  found through the global heap table built at open
 *
 * Every figure is the median of R runs (--reps, default 3; each run's time
 * is listed too: the machine is shared), taken in rounds — every method
 * once per round — so that load from elsewhere spreads over all methods.
 * The process's CPU time (user + sys) per run is reported beside the wall
 * time: on a busy machine records per CPU-second compares the methods'
 * cost better than wall time does. Warm: every file is dropped from the
 * cache (as for cold runs, below), one untimed run of each method brings
 * its files in again (the shards are first read by the mmap reader, which
 * for a dataset that fits in half of RAM maps them MADV_HUGEPAGE, so the
 * kernel caches them in 2 MiB folios and later mappings are set up 2 MiB
 * at a time), then R runs, everything reopened for each (for stk: a fresh
 * open of a cached file, as a new training process sees it — every page of
 * the mapping faults in once and verify=first hashes every record). For
 * the stk methods R more runs through the same open dataset are reported as
 * "warm_epoch2" (pages already mapped, nothing left to verify: later
 * epochs). Cold: R times `sync`, posix_fadvise(POSIX_FADV_DONTNEED) on
 * every file involved (each image, each shard, the TFRecord file) and a run
 * with everything reopened (stk: verify=first hashes every record, as in a
 * first epoch). DONTNEED is best effort — pages mapped by anyone, and any cache
 * below this VM, stay — so the fraction of pages still resident after the
 * drop (mincore) is reported with the cold figures.
 */
#include "format/dataset.h"

#include <stoker/stoker.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "read_formats: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory%s", "");
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        die("out of memory%s", "");
    return p;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The consumer: every 64th byte, so every page and cache line is touched. */
static inline uint64_t consume(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 64)
        s += p[i];
    return s;
}

/* ------------------------------------------------------------------------ */
/* CRC32C (Castagnoli), masked as TFRecord does                              */
/* ------------------------------------------------------------------------ */

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

/* Slicing-by-8: eight table lookups per 8 bytes. */
static uint32_t crc32c_sw(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
            crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
            crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
            crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, size_t n)
{
    uint64_t c = 0xffffffffu;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

static int have_sse42(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
}
#else
static uint32_t crc32c_hw(const uint8_t *p, size_t n) { return crc32c_sw(p, n); }
static int have_sse42(void) { return 0; }
#endif

static uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void wr64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void wr32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t rd64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint32_t rd32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ------------------------------------------------------------------------ */
/* The data                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct corpus {
    char **paths;      /* N image files, record order */
    int64_t *labels;
    uint64_t *sizes;
    uint64_t n, bytes;
    uint32_t *perm;    /* the random order */
    /* TFRecord */
    char tfr_path[1024];
    uint64_t *tfr_offset, *tfr_size; /* whole record: 12 + len + 4 */
    char tfx_path[1024]; /* the same records as tf.train.Example messages */
    /* HDF5 (stoker_hdf5) */
    char h5_path[1024];
    /* .stk */
    char stk_dir[1024];
    char **shards;
    uint32_t nshards;
} corpus;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **list_dir(const char *dir, int want_dirs, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        die("cannot list %s", dir);
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || (want_dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            v = realloc(v, cap * sizeof *v);
            if (!v)
                die("out of memory%s", "");
        }
        v[n++] = xstrdup(path);
    }
    closedir(d);
    qsort(v, n, sizeof *v, cmp_str);
    *count = n;
    return v;
}

static void load_images(corpus *c, const char *root)
{
    size_t nclasses;
    char **classes = list_dir(root, 1, &nclasses);
    size_t cap = 0;
    for (size_t k = 0; k < nclasses; k++) {
        size_t nf;
        char **files = list_dir(classes[k], 0, &nf);
        for (size_t i = 0; i < nf; i++) {
            if (c->n == cap) {
                cap = cap ? 2 * cap : 4096;
                c->paths = realloc(c->paths, cap * sizeof *c->paths);
                c->labels = realloc(c->labels, cap * sizeof *c->labels);
                c->sizes = realloc(c->sizes, cap * sizeof *c->sizes);
                if (!c->paths || !c->labels || !c->sizes)
                    die("out of memory%s", "");
            }
            struct stat st;
            if (stat(files[i], &st) != 0)
                die("cannot stat %s", files[i]);
            c->paths[c->n] = files[i];
            c->labels[c->n] = (int64_t)k;
            c->sizes[c->n] = (uint64_t)st.st_size;
            c->bytes += (uint64_t)st.st_size;
            c->n++;
        }
        free(files);
        free(classes[k]);
    }
    free(classes);
    if (c->n == 0)
        die("no image files under %s", root);
}

static uint8_t *read_file(const char *path, uint64_t size)
{
    uint8_t *b = xmalloc(size);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, b, size) != (ssize_t)size)
        die("cannot read %s", path);
    close(fd);
    return b;
}

static void write_lists(corpus *c, const char *work, uint64_t seed)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/files.txt", work);
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s", path);
    for (uint64_t i = 0; i < c->n; i++)
        fprintf(f, "%s\n", c->paths[i]);
    fclose(f);
    c->perm = xmalloc(c->n * sizeof *c->perm);
    for (uint64_t i = 0; i < c->n; i++)
        c->perm[i] = (uint32_t)i;
    uint64_t st = seed;
    for (uint64_t i = c->n - 1; i > 0; i--) {
        uint64_t j = splitmix64(&st) % (i + 1);
        uint32_t t = c->perm[i];
        c->perm[i] = c->perm[j];
        c->perm[j] = t;
    }
    snprintf(path, sizeof path, "%s/perm.u32", work);
    f = fopen(path, "wb");
    if (!f || fwrite(c->perm, sizeof *c->perm, c->n, f) != c->n || fclose(f) != 0)
        die("cannot write %s", path);
}

/* TFRecord: write once (if absent or of the wrong size), index by offset. */
static void prepare_tfrecord(corpus *c, const char *work)
{
    snprintf(c->tfr_path, sizeof c->tfr_path, "%s/photos.tfrecord", work);
    char idx_path[1100];
    snprintf(idx_path, sizeof idx_path, "%s.idx", c->tfr_path);
    uint64_t total = c->bytes + 16 * c->n;
    struct stat st;
    c->tfr_offset = xmalloc(c->n * sizeof *c->tfr_offset);
    c->tfr_size = xmalloc(c->n * sizeof *c->tfr_size);
    FILE *idx;
    if (stat(c->tfr_path, &st) == 0 && (uint64_t)st.st_size == total &&
        (idx = fopen(idx_path, "r"))) {
        uint64_t i = 0;
        unsigned long long off, size;
        while (i < c->n && fscanf(idx, "%llu %llu", &off, &size) == 2) {
            c->tfr_offset[i] = off;
            c->tfr_size[i++] = size;
        }
        fclose(idx);
        if (i == c->n)
            return;
    }
    fprintf(stderr, "writing %s (%llu records)\n", c->tfr_path, (unsigned long long)c->n);
    FILE *f = fopen(c->tfr_path, "wb");
    idx = fopen(idx_path, "w");
    if (!f || !idx)
        die("cannot write %s", c->tfr_path);
    uint64_t off = 0;
    for (uint64_t i = 0; i < c->n; i++) {
        uint8_t head[12], tail[4];
        uint8_t *data = read_file(c->paths[i], c->sizes[i]);
        wr64le(head, c->sizes[i]);
        wr32le(head + 8, mask_crc(crc32c_sw(head, 8)));
        wr32le(tail, mask_crc(crc32c_sw(data, c->sizes[i])));
        if (fwrite(head, 1, 12, f) != 12 || fwrite(data, 1, c->sizes[i], f) != c->sizes[i] ||
            fwrite(tail, 1, 4, f) != 4)
            die("cannot write %s", c->tfr_path);
        free(data);
        c->tfr_offset[i] = off;
        c->tfr_size[i] = 16 + c->sizes[i];
        fprintf(idx, "%llu %llu\n", (unsigned long long)off, (unsigned long long)c->tfr_size[i]);
        off += c->tfr_size[i];
    }
    if (fclose(f) != 0 || fclose(idx) != 0)
        die("cannot write %s", c->tfr_path);
}

/* A varint into p; its length. */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static size_t varint_len(uint64_t v)
{
    uint8_t tmp[10];
    return put_varint(tmp, v);
}

/* tf.train.Example{features{feature{"image/encoded": bytes_list{data}},
 * feature{"image/class/label": int64_list{[label]}}}} into out (NULL: the
 * size only). */
static size_t encode_example(uint8_t *out, const uint8_t *data, size_t n, int64_t label)
{
    static const char kimg[] = "image/encoded", klab[] = "image/class/label";
    size_t blist = 1 + varint_len(n) + n;                 /* BytesList{value} */
    size_t feat1 = 1 + varint_len(blist) + blist;         /* Feature{bytes_list} */
    size_t ent1 = 2 + (sizeof kimg - 1) + 1 + varint_len(feat1) + feat1;
    size_t lv = varint_len((uint64_t)label);
    size_t ilist = 1 + varint_len(lv) + lv;               /* Int64List{packed} */
    size_t feat2 = 1 + varint_len(ilist) + ilist;
    size_t ent2 = 2 + (sizeof klab - 1) + 1 + varint_len(feat2) + feat2;
    size_t fs = 1 + varint_len(ent1) + ent1 + 1 + varint_len(ent2) + ent2;
    size_t total = 1 + varint_len(fs) + fs;
    if (!out)
        return total;
    uint8_t *p = out;
    *p++ = 0x0a;
    p += put_varint(p, fs);
    *p++ = 0x0a;
    p += put_varint(p, ent1);
    *p++ = 0x0a;
    *p++ = (uint8_t)(sizeof kimg - 1);
    memcpy(p, kimg, sizeof kimg - 1);
    p += sizeof kimg - 1;
    *p++ = 0x12;
    p += put_varint(p, feat1);
    *p++ = 0x0a;
    p += put_varint(p, blist);
    *p++ = 0x0a;
    p += put_varint(p, n);
    memcpy(p, data, n);
    p += n;
    *p++ = 0x0a;
    p += put_varint(p, ent2);
    *p++ = 0x0a;
    *p++ = (uint8_t)(sizeof klab - 1);
    memcpy(p, klab, sizeof klab - 1);
    p += sizeof klab - 1;
    *p++ = 0x12;
    p += put_varint(p, feat2);
    *p++ = 0x1a;
    p += put_varint(p, ilist);
    *p++ = 0x0a;
    p += put_varint(p, lv);
    p += put_varint(p, (uint64_t)label);
    return (size_t)(p - out);
}

/* The same records as tf.train.Example messages (for the tfrecord:
 * reader): written once, when absent or of the wrong size. */
static void prepare_tfrecord_examples(corpus *c, const char *work)
{
    snprintf(c->tfx_path, sizeof c->tfx_path, "%s/photos-example.tfrecord", work);
    uint64_t total = 0;
    for (uint64_t i = 0; i < c->n; i++)
        total += 16 + encode_example(NULL, NULL, c->sizes[i], c->labels[i]);
    struct stat st;
    if (stat(c->tfx_path, &st) == 0 && (uint64_t)st.st_size == total)
        return;
    fprintf(stderr, "writing %s (%llu records)\n", c->tfx_path, (unsigned long long)c->n);
    FILE *f = fopen(c->tfx_path, "wb");
    if (!f)
        die("cannot write %s", c->tfx_path);
    for (uint64_t i = 0; i < c->n; i++) {
        uint8_t head[12], tail[4];
        uint8_t *data = read_file(c->paths[i], c->sizes[i]);
        size_t n = encode_example(NULL, NULL, c->sizes[i], c->labels[i]);
        uint8_t *ex = xmalloc(n);
        encode_example(ex, data, c->sizes[i], c->labels[i]);
        wr64le(head, n);
        wr32le(head + 8, mask_crc(crc32c_sw(head, 8)));
        wr32le(tail, mask_crc(crc32c_sw(ex, n)));
        if (fwrite(head, 1, 12, f) != 12 || fwrite(ex, 1, n, f) != n || fwrite(tail, 1, 4, f) != 4)
            die("cannot write %s", c->tfx_path);
        free(ex);
        free(data);
    }
    if (fclose(f) != 0)
        die("cannot write %s", c->tfx_path);
}

#ifdef STK_HAVE_HDF5
#include <hdf5.h>
#endif

/* WORK/photos.h5 for stoker_hdf5 (and read_hdf5.py): kept when the hdf5:
 * reader opens it with one record per image (the bytes are checked by the
 * touch sums), else written here record by record, as h5py's d[i] = ...
 * does. Without libhdf5 in the build the method is left out. */
static int in_list(const char *list, const char *name);
static void prepare_hdf5(corpus *c, const char *work, const char *only)
{
    char uri[1200];
    stk_dataset *ds = NULL;
    if (only && !in_list(only, "stoker_hdf5"))
        return;
#ifdef STK_HAVE_HDF5
    snprintf(c->h5_path, sizeof c->h5_path, "%s/photos.h5", work);
    snprintf(uri, sizeof uri, "hdf5:%s", c->h5_path);
    if (stk_dataset_open(uri, NULL, &ds) == 0) {
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        stk_dataset_close(ds);
        if (info.count == c->n)
            return;
    }
    fprintf(stderr, "writing %s (%llu records)\n", c->h5_path, (unsigned long long)c->n);
    hsize_t n = c->n, one = 1;
    hid_t f = H5Fcreate(c->h5_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t fs = H5Screate_simple(1, &n, NULL), ms = H5Screate_simple(1, &one, NULL);
    hid_t t = H5Tvlen_create(H5T_NATIVE_UINT8);
    hid_t d = f < 0 ? -1 : H5Dcreate2(f, "images", t, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0)
        die("cannot write %s", c->h5_path);
    for (uint64_t i = 0; i < c->n; i++) {
        hsize_t start = i;
        hvl_t v = {c->sizes[i], read_file(c->paths[i], c->sizes[i])};
        if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL) < 0 ||
            H5Dwrite(d, t, ms, fs, H5P_DEFAULT, &v) < 0)
            die("cannot write %s", c->h5_path);
        free(v.p);
    }
    H5Dclose(d);
    H5Sselect_all(fs);
    d = H5Dcreate2(f, "labels", H5T_STD_I64LE, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, c->labels) < 0)
        die("cannot write %s", c->h5_path);
    H5Dclose(d);
    H5Tclose(t);
    H5Sclose(ms);
    H5Sclose(fs);
    if (H5Fclose(f) < 0)
        die("cannot write %s", c->h5_path);
#else
    (void)c, (void)work, (void)uri, (void)ds;
    fprintf(stderr, "stoker_hdf5: built without libhdf5, left out\n");
#endif
}

#include "format/stk/stk_writer.h"

/* The shards: packed by `stoker pack` beforehand, or written here. */
static void prepare_stk(corpus *c, const char *dir)
{
    snprintf(c->stk_dir, sizeof c->stk_dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "writing %s with the shard writer (no `stoker pack` output there)\n", dir);
        if (mkdir(dir, 0755) != 0)
            die("cannot create %s", dir);
        stk_field_def f[2];
        memset(f, 0, sizeof f);
        strcpy(f[0].name, "image");
        f[0].type = STK_FIELD_IMAGE;
        strcpy(f[1].name, "label");
        f[1].type = STK_FIELD_INT64;
        stk_shard_file *w = NULL;
        uint32_t shard = 0;
        for (uint64_t i = 0; i < c->n; i++) {
            if (!w) {
                char path[1200];
                snprintf(path, sizeof path, "%s/shard-%05u.stk", dir, shard++);
                if (stk_shard_file_open(path, f, 2, NULL, 0, &w) < 0)
                    die("%s", stk_errmsg());
            }
            uint8_t *data = read_file(c->paths[i], c->sizes[i]);
            stk_value_bytes v[2] = {{data, c->sizes[i]}, {&c->labels[i], 8}};
            if (stk_shard_file_add(w, v) < 0)
                die("%s", stk_errmsg());
            free(data);
            if (stk_shard_file_bytes(w) > (1ull << 30) || i + 1 == c->n) {
                if (stk_shard_file_finish(w) < 0)
                    die("%s", stk_errmsg());
                w = NULL;
            }
        }
    }
    size_t n;
    char **files = list_dir(dir, 0, &n);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(files[i]);
        if (len > 4 && !strcmp(files[i] + len - 4, ".stk")) {
            c->shards = realloc(c->shards, (c->nshards + 1) * sizeof *c->shards);
            c->shards[c->nshards++] = files[i];
        } else {
            free(files[i]);
        }
    }
    free(files);
    /* Same records, same bytes? */
    stk_dataset *ds;
    char uri[1100];
    snprintf(uri, sizeof uri, "stk:%s?verify=off&io=mmap", dir);
    if (stk_dataset_open(uri, NULL, &ds) < 0)
        die("%s", stk_errmsg());
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    if (info.count != c->n)
        die("%s does not hold one record per image file (run `stoker pack` again)", dir);
    stk_dataset_close(ds);
}

/* ------------------------------------------------------------------------ */
/* Methods                                                                   */
/* ------------------------------------------------------------------------ */

enum method {
    M_STK, M_STK_ALWAYS, M_STK_PREAD, M_STK_OFF, M_STK_WILLNEED, M_FILES, M_TFR_CRC, M_TFR_HWCRC,
    M_TFR, M_STOKER_TFR, M_STOKER_TFR_ALWAYS, M_HDF5, M_COUNT
};
static const char *const method_name[M_COUNT] = {
    "stk",          "stk_always",   "stk_pread",      "stk_verify_off", "stk_willneed",
    "files",        "tfrecord_crc", "tfrecord_hwcrc", "tfrecord",
    "stoker_tfrecord", "stoker_tfrecord_always", "stoker_hdf5"};

typedef struct run_ctx {
    const corpus *c;
    enum method m;
    stk_dataset *ds;     /* stk methods */
    int tfr_fd;          /* tfrecord methods */
    uint32_t threads;
    _Atomic uint64_t sum, delivered_bytes, errors;
} run_ctx;

typedef struct worker {
    run_ctx *ctx;
    uint32_t id;
    pthread_t thread;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    run_ctx *x = w->ctx;
    const corpus *c = x->c;
    uint64_t sum = 0, bytes = 0, errors = 0;
    stk_scratch scratch = {0};
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (uint64_t pos = w->id; pos < c->n; pos += x->threads) {
        uint32_t rec = c->perm[pos];
        const uint8_t *p = NULL;
        size_t n = 0;
        switch (x->m) {
        case M_HDF5:
        case M_STK_WILLNEED:
        case M_STK_OFF:
        case M_STK:
        case M_STK_ALWAYS:
        case M_STOKER_TFR:
        case M_STOKER_TFR_ALWAYS:
        case M_STK_PREAD: {
            stk_sample s;
            if (x->m == M_STK_WILLNEED) {
                /* Diagnostic: what the reader could do before touching a
                 * record in the mapping (verify=off here, so the hint comes
                 * before the first byte is read). */
                if (x->ds->vt->read(x->ds, rec, &s, &scratch) < 0) {
                    errors++;
                    continue;
                }
                uintptr_t a = (uintptr_t)s.encoded & ~(uintptr_t)4095;
                madvise((void *)a, (uintptr_t)s.encoded + s.encoded_size - a, MADV_WILLNEED);
            } else if (x->ds->vt->read(x->ds, rec, &s, &scratch) < 0) {
                errors++;
                continue;
            }
            p = s.encoded;
            n = s.encoded_size;
            break;
        }
        case M_FILES: {
            int fd = open(c->paths[rec], O_RDONLY | O_CLOEXEC);
            struct stat st;
            if (fd < 0 || fstat(fd, &st) != 0) {
                errors++;
                if (fd >= 0)
                    close(fd);
                continue;
            }
            n = (size_t)st.st_size;
            if (n > cap) {
                free(buf);
                cap = n * 2;
                buf = xmalloc(cap);
            }
            size_t got = 0;
            while (got < n) {
                ssize_t k = read(fd, buf + got, n - got);
                if (k <= 0)
                    break;
                got += (size_t)k;
            }
            close(fd);
            if (got != n) {
                errors++;
                continue;
            }
            p = buf;
            break;
        }
        default: { /* TFRecord */
            size_t total = (size_t)c->tfr_size[rec];
            if (total > cap) {
                free(buf);
                cap = total * 2;
                buf = xmalloc(cap);
            }
            if (pread(x->tfr_fd, buf, total, (off_t)c->tfr_offset[rec]) != (ssize_t)total) {
                errors++;
                continue;
            }
            uint64_t len = rd64le(buf);
            if (len + 16 != total) {
                errors++;
                continue;
            }
            if (x->m != M_TFR) {
                uint32_t (*crc)(const uint8_t *, size_t) =
                    x->m == M_TFR_HWCRC ? crc32c_hw : crc32c_sw;
                if (mask_crc(crc(buf, 8)) != rd32le(buf + 8) ||
                    mask_crc(crc(buf + 12, len)) != rd32le(buf + 12 + len)) {
                    errors++;
                    continue;
                }
            }
            p = buf + 12;
            n = (size_t)len;
            break;
        }
        }
        sum += consume(p, n);
        bytes += n;
    }
    stk_scratch_free(&scratch);
    free(buf);
    atomic_fetch_add(&x->sum, sum);
    atomic_fetch_add(&x->delivered_bytes, bytes);
    atomic_fetch_add(&x->errors, errors);
    return NULL;
}

static int is_stk(enum method m)
{
    return m == M_STK || m == M_STK_ALWAYS || m == M_STK_PREAD || m == M_STK_OFF ||
           m == M_STK_WILLNEED;
}

/* Methods reading through a dataset of the library. */
static int is_ds(enum method m)
{
    return is_stk(m) || m == M_STOKER_TFR || m == M_STOKER_TFR_ALWAYS || m == M_HDF5;
}

static void method_open(run_ctx *x)
{
    if (x->m == M_STOKER_TFR || x->m == M_STOKER_TFR_ALWAYS) {
        char uri[1200];
        snprintf(uri, sizeof uri, "tfrecord:%s%s", x->c->tfx_path,
                 x->m == M_STOKER_TFR_ALWAYS ? "?verify=always" : "");
        if (stk_dataset_open(uri, NULL, &x->ds) < 0)
            die("%s", stk_errmsg());
    } else if (x->m == M_HDF5) {
        char uri[1200];
        snprintf(uri, sizeof uri, "hdf5:%s", x->c->h5_path);
        if (stk_dataset_open(uri, NULL, &x->ds) < 0)
            die("%s", stk_errmsg());
    } else if (is_stk(x->m)) {
        char uri[1200];
        /* The mapping explicitly: for encoded images the reader's default
         * (io=auto) is pread, measured as stk_pread. */
        snprintf(uri, sizeof uri, "stk:%s%s", x->c->stk_dir,
                 x->m == M_STK_ALWAYS   ? "?verify=always&io=mmap"
                 : x->m == M_STK_PREAD  ? "?io=pread"
                 : x->m == M_STK        ? "?io=mmap"
                                        : "?verify=off&io=mmap");
        if (stk_dataset_open(uri, NULL, &x->ds) < 0)
            die("%s", stk_errmsg());
    } else if (x->m != M_FILES) {
        x->tfr_fd = open(x->c->tfr_path, O_RDONLY | O_CLOEXEC);
        if (x->tfr_fd < 0)
            die("cannot open %s", x->c->tfr_path);
    }
}

static void method_close(run_ctx *x)
{
    stk_dataset_close(x->ds);
    x->ds = NULL;
    if (x->tfr_fd >= 0)
        close(x->tfr_fd);
    x->tfr_fd = -1;
}

typedef struct result {
    double seconds, cpu_s; /* wall time; CPU time of the process (user + sys) */
    uint64_t sum, bytes, errors;
} result;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One pass over every record; `reopen`: open inside the timed region. */
static result run_once(run_ctx *x, int reopen)
{
    double t0 = now(), c0 = cpu_seconds();
    if (reopen)
        method_open(x);
    atomic_store(&x->sum, 0);
    atomic_store(&x->delivered_bytes, 0);
    atomic_store(&x->errors, 0);
    worker w[64];
    for (uint32_t t = 0; t < x->threads; t++) {
        w[t] = (worker){x, t, 0};
        if (pthread_create(&w[t].thread, NULL, worker_main, &w[t]) != 0)
            die("cannot start a thread%s", "");
    }
    for (uint32_t t = 0; t < x->threads; t++)
        pthread_join(w[t].thread, NULL);
    result r = {now() - t0, cpu_seconds() - c0, atomic_load(&x->sum),
                atomic_load(&x->delivered_bytes), atomic_load(&x->errors)};
    return r;
}

/* ------------------------------------------------------------------------ */
/* Page cache                                                                */
/* ------------------------------------------------------------------------ */

static void drop_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Resident pages / pages, by mincore over a mapping of the file. */
static void residency(const char *path, uint64_t *resident, uint64_t *pages)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    size_t np = ((size_t)st.st_size + (size_t)page - 1) / (size_t)page;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    unsigned char *vec = xmalloc(np);
    if (mincore(m, (size_t)st.st_size, vec) == 0)
        for (size_t i = 0; i < np; i++)
            *resident += vec[i] & 1;
    *pages += np;
    free(vec);
    munmap(m, (size_t)st.st_size);
}

/* Drop every file of method m; return the fraction still resident. */
static double drop_caches(const corpus *c, enum method m)
{
    if (system("sync") != 0)
        fprintf(stderr, "sync failed\n");
    uint64_t resident = 0, pages = 0;
    if (is_stk(m)) {
        for (uint32_t i = 0; i < c->nshards; i++) {
            drop_file(c->shards[i]);
            residency(c->shards[i], &resident, &pages);
        }
    } else if (m == M_STOKER_TFR || m == M_STOKER_TFR_ALWAYS) {
        char idx[1100];
        snprintf(idx, sizeof idx, "%s.stkidx", c->tfx_path);
        drop_file(idx);
        drop_file(c->tfx_path);
        residency(c->tfx_path, &resident, &pages);
    } else if (m == M_HDF5) {
        drop_file(c->h5_path);
        residency(c->h5_path, &resident, &pages);
    } else if (m == M_FILES) {
        for (uint64_t i = 0; i < c->n; i++)
            drop_file(c->paths[i]);
        for (uint64_t i = 0; i < c->n; i += 10) /* a sample of them */
            residency(c->paths[i], &resident, &pages);
    } else {
        drop_file(c->tfr_path);
        residency(c->tfr_path, &resident, &pages);
    }
    return pages ? (double)resident / (double)pages : 0;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

/* Is `name` one of the comma-separated items of `list`? */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static int cmp_result(const void *a, const void *b)
{
    double x = ((const result *)a)->seconds, y = ((const result *)b)->seconds;
    return (x > y) - (x < y);
}

/* The median of `n` runs (by time), with every run's time listed. */
static void print_result(const corpus *c, const char *label, result *runs, int n, double resident,
                         int last)
{
    result sorted[16];
    memcpy(sorted, runs, (size_t)n * sizeof *runs);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_result);
    result r = sorted[n / 2];
    double cpu[16] = {0};
    for (int i = 0; i < n; i++)
        cpu[i] = runs[i].cpu_s;
    for (int i = 1; i < n; i++) /* median CPU time, sorted on its own */
        for (int j = i; j > 0 && cpu[j - 1] > cpu[j]; j--) {
            double t = cpu[j];
            cpu[j] = cpu[j - 1];
            cpu[j - 1] = t;
        }
    printf("      \"%s\": {\"seconds\": %.4f, \"records_per_s\": %.1f, \"mb_per_s\": %.1f, "
           "\"cpu_s\": %.4f, \"records_per_cpu_s\": %.1f, "
           "\"touch_sum\": %llu, \"errors\": %llu, \"runs_s\": [",
           label, r.seconds, (double)c->n / r.seconds, (double)r.bytes / r.seconds / 1e6,
           cpu[n / 2], (double)c->n / cpu[n / 2], (unsigned long long)r.sum,
           (unsigned long long)r.errors);
    for (int i = 0; i < n; i++)
        printf("%s%.4f", i ? ", " : "", runs[i].seconds);
    printf("]");
    if (resident >= 0)
        printf(", \"resident_after_drop\": %.4f", resident);
    printf("}%s\n", last ? "" : ",");
}

int main(int argc, char **argv)
{
    const char *images = NULL, *stk = NULL, *work = NULL, *only = NULL;
    uint32_t threads = 2;
    uint64_t seed = 1;
    int cold = 1, reps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--images") && i + 1 < argc)
            images = argv[++i];
        else if (!strcmp(a, "--stk") && i + 1 < argc)
            stk = argv[++i];
        else if (!strcmp(a, "--work") && i + 1 < argc)
            work = argv[++i];
        else if (!strcmp(a, "--threads") && i + 1 < argc)
            threads = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(a, "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(a, "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--no-cold"))
            cold = 0;
        else
            die("usage: read_formats --images DIR --stk DIR --work DIR [--threads N] [--seed S] "
                "[--reps R] [--no-cold] [--only m1,m2]%s", "");
    }
    if (!images || !stk || !work || threads < 1 || threads > 64 || reps < 1 || reps > 16)
        die("--images, --stk and --work are required (threads 1..64, reps 1..16)%s", "");
    mkdir(work, 0755);
    crc_init();
    corpus c;
    memset(&c, 0, sizeof c);
    load_images(&c, images);
    write_lists(&c, work, seed);
    prepare_stk(&c, stk);
    prepare_tfrecord(&c, work);
    prepare_tfrecord_examples(&c, work);
    prepare_hdf5(&c, work, only);
    int hw = have_sse42();

    printf("{\n  \"records\": %llu,\n  \"bytes\": %llu,\n  \"threads\": %u,\n  \"seed\": %llu,\n",
           (unsigned long long)c.n, (unsigned long long)c.bytes, threads,
           (unsigned long long)seed);
    printf("  \"reps\": %d,\n", reps);
    printf("  \"note\": \"MB = 1e6 bytes of JPEG payload; medians of %d runs. Warm: files cached "
           "(after an untimed run), each run opens afresh; stk warm_epoch2: further runs through "
           "the same open dataset. Cold: sync + posix_fadvise(DONTNEED) on every file first; "
           "DONTNEED is best-effort on this VM (a host cache below it stays), "
           "resident_after_drop is what mincore still saw.\",\n", reps);
    /* Rounds: every method once per round, so that load from elsewhere on
     * a shared machine spreads over all of them instead of hitting one. */
    run_ctx xs[M_COUNT];
    int on[M_COUNT] = {0};
    static result warm[M_COUNT][16], again[M_COUNT][16], cold_runs[M_COUNT][16];
    double resident[M_COUNT] = {0};
    for (int m = 0; m < M_COUNT; m++) {
        on[m] = (!only || in_list(only, method_name[m])) && (m != M_TFR_HWCRC || hw) &&
                (m != M_HDF5 || c.h5_path[0]);
        memset(&xs[m], 0, sizeof xs[m]);
        xs[m].c = &c;
        xs[m].m = (enum method)m;
        xs[m].threads = threads;
        xs[m].tfr_fd = -1;
    }
    fprintf(stderr, "warm-up (untimed)...\n");
    /* From a cold cache, so that what each method's own first pass leaves
     * in the page cache (for mmap'd shards: 2 MiB folios, see
     * stk_shard.c shard_map_advice) is what the warm runs see, not
     * whatever earlier runs left. */
    for (int m = 0; m < M_COUNT; m++)
        if (on[m])
            drop_caches(&c, (enum method)m);
    for (int m = 0; m < M_COUNT; m++)
        if (on[m]) {
            run_once(&xs[m], 1);
            method_close(&xs[m]);
        }
    for (int r = 0; r < reps; r++) {
        fprintf(stderr, "warm, round %d/%d...\n", r + 1, reps);
        for (int m = 0; m < M_COUNT; m++)
            if (on[m]) {
                warm[m][r] = run_once(&xs[m], 1); /* opened afresh */
                method_close(&xs[m]);
                if (warm[m][r].bytes != c.bytes || warm[m][r].errors)
                    fprintf(stderr, "%s: delivered %llu of %llu bytes, %llu errors\n",
                            method_name[m], (unsigned long long)warm[m][r].bytes,
                            (unsigned long long)c.bytes, (unsigned long long)warm[m][r].errors);
            }
    }
    /* Later epochs through one open dataset: pages already mapped,
     * verify=first has nothing left to hash. */
    for (int m = 0; m < M_COUNT; m++)
        if (on[m] && is_ds((enum method)m))
            run_once(&xs[m], 1);
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < M_COUNT; m++)
            if (on[m] && is_ds((enum method)m))
                again[m][r] = run_once(&xs[m], 0);
    for (int m = 0; m < M_COUNT; m++)
        method_close(&xs[m]);
    for (int r = 0; r < reps && cold; r++) {
        fprintf(stderr, "cold, round %d/%d...\n", r + 1, reps);
        for (int m = 0; m < M_COUNT; m++)
            if (on[m]) {
                resident[m] += drop_caches(&c, (enum method)m) / reps;
                cold_runs[m][r] = run_once(&xs[m], 1);
                method_close(&xs[m]);
            }
    }
    printf("  \"methods\": {\n");
    int first = 1;
    for (int m = 0; m < M_COUNT; m++) {
        if (!on[m])
            continue;
        printf("%s    \"%s\": {\n", first ? "" : ",\n", method_name[m]);
        first = 0;
        if (is_ds((enum method)m))
            print_result(&c, "warm_epoch2", again[m], reps, -1, 0);
        print_result(&c, "warm", warm[m], reps, -1, !cold);
        if (cold)
            print_result(&c, "cold", cold_runs[m], reps, resident[m], 1);
        printf("    }");
    }
    printf("\n  },\n  \"crc32c_hw_available\": %s\n}\n", hw ? "true" : "false");
    return 0;
}
