/*
 * tfrecord.c — TFRecord files of tf.train.Example messages.
 *
 * URI: "tfrecord:PATH[?image_key=K&label_key=K&index=DIR&verify=off|first|always
 * &cache=auto|off&io=mmap|pread]". io=pread reads each record with one
 * pread into the caller's scratch instead of mapping the files (mmap, the
 * default: views into the mapping, no copy). PATH is one file (any name), a directory (its
 * *.tfrecord, *.tfrec and *.tfrecords files, not recursive) or a glob (every
 * match, less the index files *.idx and *.stkidx that sit beside the data);
 * files are read in sorted order, records in file order. A bare path is
 * detected when it is a file named so, or any file whose first 12 bytes are
 * a TFRecord length header with a matching CRC (TensorFlow's own sets are
 * often named train-00000-of-01024, no extension), a directory holding such
 * names, or a glob ending in one of the extensions.
 *
 * The framing (tensorflow/core/lib/io/record_writer.cc), per record:
 *
 *   uint64 LE  length                  of the data
 *   uint32 LE  masked CRC-32C          of the 8 length bytes
 *   bytes      data                    `length` bytes: a tf.train.Example
 *   uint32 LE  masked CRC-32C          of the data
 *
 * and the Example (tensorflow/core/example/{example,feature}.proto):
 *
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }  entries {key = 1, value = 2}
 *   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
 *                      Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }  FloatList { repeated float value
 *   = 1 [packed]; }  Int64List { repeated int64 value = 1 [packed]; }
 *
 * A sample is the first bytes of `image_key`'s bytes_list (default
 * "image/encoded"), handed out as encoded bytes that point into the mapped
 * file (no copy), and the first int64 of `label_key`'s int64_list (default
 * "image/class/label"; packed or not). The Example is parsed with the
 * bounds-checked wire reader (protowire.h) at read time, not at open; a
 * missing key, a list of the wrong kind (a float label), an empty list or a
 * malformed message is STK_EDATA naming the file, record, byte offset of the
 * record and reason, like a data CRC mismatch: that record is damaged, the
 * others are fine (on_error=skip skips it). Protobuf's rules hold: unknown
 * fields are skipped, the last of a repeated map key or oneof member wins.
 *
 * The index. Random access needs each record's offset, and the framing only
 * gives them in a chain. Per file, in this order:
 *
 *  1. the cache FILE.stkidx (beside FILE, or DIR/NAME.stkidx with index=DIR),
 *     used when its staleness keys match the file — size, mtime in ns, the
 *     CRC-32C of the file's first and last 4 KiB — its contents match their
 *     CRC-32C, and its offsets tile the file (the first at 0, increasing,
 *     each record >= 16 bytes, the last ending at the file's end). Then the
 *     open reads no record: a 1 M-record set opens in the time it takes to
 *     read 8 MB of offsets. A cache that fails a check is not used; why is
 *     noted (metadata "index") and the file is indexed afresh.
 *  2. NVIDIA DALI's tfrecord2idx index: text lines "OFFSET SIZE", SIZE the
 *     whole framed record. DALI takes index paths as a list beside the data
 *     list; here they are found by name: DIR/NAME.idx, then DIR/STEM.idx
 *     (NAME less its .tfrecord/.tfrec/.tfrecords), then with index=DIR also
 *     DIR/NAME (a directory of index files named like the data, as
 *     tfrecord2idx is often run); DIR is index=DIR or FILE's own directory.
 *     Every line is checked against the file: the numbers parse, the entries
 *     tile the file in order (no gap, overlap or run past the end), and the
 *     length header at each offset has a good CRC and says SIZE - 16. Any
 *     mismatch fails the open naming the index file and line (a stale index:
 *     regenerate or delete it); it is never half-used.
 *  3. otherwise a scan of the length headers: 12 bytes read per record (the
 *     length and its CRC, checked), the data skipped. A length CRC mismatch
 *     means the framing is lost from that byte on (the next offset cannot be
 *     trusted), and a header or record running past the end means the file
 *     is truncated: both fail the open naming the file, record and byte, as
 *     does a record of 4 GiB or more.
 *
 * A remote file (http, s3: src/io/remote.c) keeps its cache (1) in the
 * local cache of remote objects (stk_remote_derived_path: keyed by the
 * object's URL, ETag and size; mtime 0 in the keys); its DALI index (2)
 * is a remote one the listing that named the file also named (an s3://
 * prefix), or one in a local index=DIR; else it is scanned (3) through the
 * cache of remote objects, which that also fills.
 *
 * With cache=auto (the default) an index from 2 or 3 is written to the
 * cache path atomically (src/io: a temporary file renamed into place); a
 * cache that cannot be written (a read-only directory) is noted and
 * skipped. cache=off neither reads nor writes one. The cache layout, all
 * little-endian: "STKTFIDX", u32 version 1, u32 0, u64 file size, i64 mtime
 * ns, u32 CRC-32C of the first 4 KiB, u32 of the last 4 KiB, u64 count N,
 * N x u64 record offsets, u32 CRC-32C of everything before it.
 *
 * The data CRC is checked under verify=: off never, first (the default) the
 * first time each record is read (an atomic bitmap remembers it, like the
 * .stk reader's), always on every read. A read also compares the length
 * header at the record's offset with the index (one load), so a file
 * rewritten in place behind a cache is an error, not garbage.
 *
 * Thread safety: after open everything is immutable but the verified
 * bitmap (atomic OR, no lock); read and label run on any number of threads.
 */
#include "core/crc32c.h"
#include "core/error.h"
#include "format/dataset.h"
#include "format/protowire.h"
#include "format/reader_util.h"
#include "format/recordset.h"
#include "format/byte_order.h"
#include "io/remote.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TFR_HEADER 12u /* length + its CRC */
#define TFR_FRAME 16u  /* header + data CRC */
#define TFR_PROBE 4096u
#define TFR_CACHE_MAGIC "STKTFIDX"
#define TFR_CACHE_VERSION 1u
#define TFR_CACHE_HEAD 48u
#define TFR_NOTE_MAX 2048u

enum { VERIFY_OFF, VERIFY_FIRST, VERIFY_ALWAYS };

typedef struct tfr_impl {
    stk_recordset rs;           /* owned: files and records (whole frames) */
    char *image_key, *label_key; /* owned */
    size_t image_key_len, label_key_len;
    int verify;                 /* VERIFY_* */
    _Atomic uint64_t *verified; /* owned bitmap (verify=first); atomic OR, no lock */
    char *note;                 /* owned: metadata "index" (how each file was indexed) */
} tfr_impl;

/* --- helpers ------------------------------------------------------------ */

static const char *const tfr_suffixes[] = {".tfrecord", ".tfrec", ".tfrecords", NULL};

static bool tfr_ends_with(const char *s, const char *suffix)
{
    const char *one[] = {suffix, NULL};
    return stk_path_has_suffix(s, one);
}

static uint32_t tfr_len_crc(const uint8_t *hdr) { return stk_crc32c_mask(stk_crc32c(0, hdr, 8)); }

/* Append a formatted line to the index note (best effort: truncated). */
static void tfr_note(tfr_impl *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tfr_note(tfr_impl *m, const char *fmt, ...)
{
    if (!m->note && !(m->note = calloc(1, TFR_NOTE_MAX)))
        return;
    size_t used = strlen(m->note);
    if (used + 2 >= TFR_NOTE_MAX)
        return;
    if (used)
        m->note[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->note + used, TFR_NOTE_MAX - used, fmt, ap);
    va_end(ap);
}

/* 12 bytes at `off` of file f: from the mapping or by pread. */
static int tfr_header_at(const stk_recfile *f, uint64_t off, uint8_t hdr[TFR_HEADER])
{
    if (f->map) {
        memcpy(hdr, f->map + off, TFR_HEADER);
        return 0;
    }
    return stk_source_pread(f->src, hdr, TFR_HEADER, off);
}

/* CRC-32C of [off, off + n) of file f. */
static int tfr_crc_range(const stk_recfile *f, uint64_t off, size_t n, uint32_t *crc)
{
    if (f->map) {
        *crc = stk_crc32c(0, f->map + off, n);
        return 0;
    }
    uint8_t buf[TFR_PROBE];
    int rc = stk_source_pread(f->src, buf, n, off);
    if (rc == 0)
        *crc = stk_crc32c(0, buf, n);
    return rc;
}

/* The cache's staleness keys of file f (at `path`). */
typedef struct tfr_keys {
    uint64_t size;
    int64_t mtime_ns;
    uint32_t head_crc, tail_crc;
} tfr_keys;

static int tfr_file_keys(const stk_recfile *f, tfr_keys *k)
{
    k->size = f->size;
    k->mtime_ns = 0; /* a remote object: its cache path is keyed by its ETag instead */
    if (!stk_is_remote(f->path)) {
        struct stat st;
        if (stat(f->path, &st) != 0)
            return stk_fail(STK_EIO, "%s: cannot stat: %s", f->path, strerror(errno));
        k->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    size_t n = f->size < TFR_PROBE ? (size_t)f->size : TFR_PROBE;
    int rc = tfr_crc_range(f, 0, n, &k->head_crc);
    if (rc == 0)
        rc = tfr_crc_range(f, f->size - n, n, &k->tail_crc);
    return rc;
}

/* --- the index: scan, DALI index, cache ---------------------------------- */

/* Scan the length headers of the last added file and push its records. */
static int tfr_scan(tfr_impl *m, uint64_t max_records)
{
    stk_recordset *rs = &m->rs;
    const stk_recfile *f = &rs->files[rs->nfiles - 1];
    uint64_t off = 0, r = 0;
    uint8_t hdr[TFR_HEADER];
    while (off < f->size) {
        if (f->size - off < TFR_HEADER)
            return stk_fail(STK_EFORMAT,
                            "%s: record %llu (byte %llu): the file ends inside the record's "
                            "12-byte length header (truncated)",
                            f->path, (unsigned long long)r, (unsigned long long)off);
        int rc = tfr_header_at(f, off, hdr);
        if (rc < 0)
            return rc;
        uint64_t len = stk_rd64(hdr);
        uint32_t want = stk_rd32(hdr + 8), got = tfr_len_crc(hdr);
        if (want != got)
            return stk_fail(STK_EFORMAT,
                            "%s: record %llu (byte %llu): the length's CRC does not match "
                            "(stored %08x, computed %08x): the framing is lost from here on",
                            f->path, (unsigned long long)r, (unsigned long long)off, want, got);
        if (len > f->size - off - TFR_HEADER || f->size - off - TFR_HEADER - len < 4)
            return stk_fail(STK_EFORMAT,
                            "%s: record %llu (byte %llu): its length of %llu bytes runs past the "
                            "end of the file (%llu bytes): truncated",
                            f->path, (unsigned long long)r, (unsigned long long)off,
                            (unsigned long long)len, (unsigned long long)f->size);
        if ((rc = stk_recordset_push(rs, off, len + TFR_FRAME, max_records)) < 0)
            return rc;
        off += len + TFR_FRAME;
        r++;
    }
    return 0;
}

/* Parse a decimal uint64 at *p (digits only), advancing it. */
static bool tfr_parse_u64(const char **p, const char *end, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    if (s >= end || *s < '0' || *s > '9')
        return false;
    while (s < end && *s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s++ - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *p = s;
    *v = x;
    return true;
}

/* A DALI tfrecord2idx index (text: "OFFSET SIZE" lines) for the last added
 * file, checked against it line by line. */
static int tfr_load_dali(tfr_impl *m, const char *idx_path, uint64_t max_bytes,
                         uint64_t max_records)
{
    stk_recordset *rs = &m->rs;
    const stk_recfile *f = &rs->files[rs->nfiles - 1];
    stk_mapped_file ix = {0};
    int rc = stk_map_file(idx_path, max_bytes, &ix);
    if (rc < 0)
        return rc;
    /* (an empty index maps to NULL: no pointer arithmetic on it) */
    const char *p = (const char *)ix.data, *end = p ? p + ix.size : NULL;
    uint64_t line = 0, expect = 0;
    uint8_t hdr[TFR_HEADER];
    while (p && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        line++;
        uint64_t off, size;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q == le) { /* a blank line (the last one, usually) */
            p = eol ? eol + 1 : end;
            continue;
        }
        bool ok = tfr_parse_u64(&q, le, &off);
        if (ok) {
            const char *sp = q;
            while (q < le && (*q == ' ' || *q == '\t'))
                q++;
            ok = q > sp && tfr_parse_u64(&q, le, &size);
            while (ok && q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
                q++;
            ok = ok && q == le;
        }
        if (!ok) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: line %llu: not \"OFFSET SIZE\" (a DALI tfrecord2idx index of %s)",
                          idx_path, (unsigned long long)line, f->path);
            goto out;
        }
        const char *why = NULL;
        if (off != expect)
            why = off < expect ? "overlaps the record before it (or is out of order)"
                               : "leaves a gap after the record before it";
        else if (size < TFR_FRAME || off > f->size || size > f->size - off)
            why = size < TFR_FRAME ? "is smaller than a record's 16 framing bytes"
                                   : "runs past the end of the file";
        if (!why) {
            if ((rc = tfr_header_at(f, off, hdr)) < 0)
                goto out;
            if (stk_rd32(hdr + 8) != tfr_len_crc(hdr))
                why = "points at no record: the length header there has a bad CRC";
            else if (stk_rd64(hdr) != size - TFR_FRAME)
                why = "disagrees with the length header there";
        }
        if (why) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: line %llu: entry %llu %llu %s of %s (%llu bytes); a stale "
                          "index? regenerate it with tfrecord2idx or delete it",
                          idx_path, (unsigned long long)line, (unsigned long long)off,
                          (unsigned long long)size, why, f->path, (unsigned long long)f->size);
            goto out;
        }
        if ((rc = stk_recordset_push(rs, off, size, max_records)) < 0)
            goto out;
        expect = off + size;
        p = eol ? eol + 1 : end;
    }
    if (expect != f->size)
        rc = stk_fail(STK_EFORMAT,
                      "%s: its entries end at byte %llu of %s, which has %llu bytes: records "
                      "after them are missing from the index; a stale index? regenerate it with "
                      "tfrecord2idx or delete it",
                      idx_path, (unsigned long long)expect, f->path, (unsigned long long)f->size);
out:
    stk_unmap_file(&ix);
    return rc;
}

/* Try the cache at `cpath` for the last added file: 1 used (records
 * pushed), 0 not (the reason noted), < 0 a fatal error. */
static int tfr_load_cache(tfr_impl *m, const char *cpath, const tfr_keys *k, uint64_t max_records)
{
    stk_recordset *rs = &m->rs;
    const stk_recfile *f = &rs->files[rs->nfiles - 1];
    stk_mapped_file c = {0};
    const char *why = NULL;
    if (!stk_path_exists(cpath))
        return 0;
    /* The largest cache max_records allows (no wrap for a huge max_samples). */
    uint64_t limit = max_records < (UINT64_MAX - TFR_CACHE_HEAD - 12) / 8
                         ? (uint64_t)TFR_CACHE_HEAD + 8 * (max_records + 1) + 4
                         : UINT64_MAX;
    int rc = stk_map_file(cpath, limit, &c);
    if (rc < 0) {
        tfr_note(m, "%s: cache not used: %s", f->path, stk_errmsg());
        stk_errmsg_clear();
        return 0;
    }
    const uint8_t *d = c.data;
    uint64_t n = 0;
    if (c.size < TFR_CACHE_HEAD + 4 || memcmp(d, TFR_CACHE_MAGIC, 8) != 0)
        why = "not a stoker TFRecord index (bad magic or too short)";
    else if (stk_rd32(d + 8) != TFR_CACHE_VERSION)
        why = "another version";
    else if ((n = stk_rd64(d + 40)) > (c.size - TFR_CACHE_HEAD - 4) / 8 ||
             c.size != TFR_CACHE_HEAD + 8 * n + 4)
        why = "its size does not match its record count";
    else if (stk_crc32c(0, d, c.size - 4) != stk_rd32(d + c.size - 4))
        why = "its checksum does not match (damaged)";
    else if (stk_rd64(d + 16) != k->size)
        why = "stale: the file's size changed";
    else if ((int64_t)stk_rd64(d + 24) != k->mtime_ns)
        why = "stale: the file's modification time changed";
    else if (stk_rd32(d + 32) != k->head_crc || stk_rd32(d + 36) != k->tail_crc)
        why = "stale: the file's first or last bytes changed";
    else if ((n == 0) != (k->size == 0))
        why = "its record count does not fit the file";
    uint64_t first = rs->count;
    for (uint64_t i = 0; !why && i < n; i++) {
        uint64_t off = stk_rd64(d + TFR_CACHE_HEAD + 8 * i);
        uint64_t next = i + 1 < n ? stk_rd64(d + TFR_CACHE_HEAD + 8 * (i + 1)) : k->size;
        if ((i == 0 && off != 0) || next < off || next - off < TFR_FRAME || next > k->size) {
            why = "its offsets do not tile the file";
            break;
        }
        if (next - off > UINT32_MAX || rs->count >= max_records) {
            why = "a record passes the limits";
            break;
        }
        if ((rc = stk_recordset_push(rs, off, next - off, max_records)) < 0) {
            stk_unmap_file(&c);
            return rc;
        }
    }
    stk_unmap_file(&c);
    if (why) {
        rs->count = first; /* drop what was pushed */
        tfr_note(m, "%s: cache %s not used: %s; indexed afresh", f->path, cpath, why);
        return 0;
    }
    return 1;
}

/* Write the cache of the last added file (best effort: a failure is noted). */
static void tfr_write_cache(tfr_impl *m, const char *cpath, const tfr_keys *k)
{
    stk_recordset *rs = &m->rs;
    const stk_recfile *f = &rs->files[rs->nfiles - 1];
    uint64_t n = rs->count - f->first;
    size_t bytes = TFR_CACHE_HEAD + (size_t)n * 8 + 4;
    uint8_t *b = malloc(bytes);
    if (!b) {
        tfr_note(m, "%s: cache not written: out of memory", f->path);
        return;
    }
    memcpy(b, TFR_CACHE_MAGIC, 8);
    stk_wr32(b + 8, TFR_CACHE_VERSION);
    stk_wr32(b + 12, 0);
    stk_wr64(b + 16, k->size);
    stk_wr64(b + 24, (uint64_t)k->mtime_ns);
    stk_wr32(b + 32, k->head_crc);
    stk_wr32(b + 36, k->tail_crc);
    stk_wr64(b + 40, n);
    for (uint64_t i = 0; i < n; i++)
        stk_wr64(b + TFR_CACHE_HEAD + 8 * i, rs->recs[f->first + i].offset);
    stk_wr32(b + bytes - 4, stk_crc32c(0, b, bytes - 4));
    if (stk_file_write_atomic(cpath, b, bytes) < 0) {
        tfr_note(m, "%s: cache not written: %s", f->path, stk_errmsg());
        stk_errmsg_clear();
    }
    free(b);
}

/* "DIR/BASE" + suffix (DIR NULL: the data file's own directory). */
static char *tfr_beside(const char *data_path, const char *dir, const char *suffix,
                        bool strip_ext)
{
    const char *slash = strrchr(data_path, '/');
    const char *base = slash ? slash + 1 : data_path;
    size_t dl = dir ? strlen(dir) : (size_t)(base - data_path);
    size_t bl = strlen(base);
    if (strip_ext)
        for (int i = 0; tfr_suffixes[i]; i++)
            if (tfr_ends_with(base, tfr_suffixes[i])) {
                bl -= strlen(tfr_suffixes[i]);
                break;
            }
    size_t sl = strlen(suffix);
    char *p = malloc(dl + 1 + bl + sl + 1);
    if (!p) {
        stk_fail(STK_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(p, dir ? dir : data_path, dl);
    size_t k = dl;
    if (dir && dl && dir[dl - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, base, bl);
    memcpy(p + k + bl, suffix, sl + 1);
    return p;
}

/* Index the last added file (see the essay: cache, DALI index, scan). */
static int tfr_index_file(tfr_impl *m, const char *index_dir, bool use_cache,
                          const stk_dataset_options *o)
{
    const stk_recfile *f = &m->rs.files[m->rs.nfiles - 1];
    tfr_keys k;
    char *cpath = NULL, *dali = NULL;
    int rc = 0, got = 0;
    /* A remote file (http, s3) keeps its offset cache in the local cache
     * of remote objects (CACHE/derived/HASH.stkidx, HASH of URL#ETAG#SIZE:
     * nothing can be written beside a URL, and a replaced object gets
     * another). Its DALI index is one the listing that named the file also
     * named (stk_remote_known: an s3:// prefix lists NAME.idx beside NAME),
     * or one in a local index=DIR: a HEAD per candidate and file would slow
     * every open. Else it is scanned through the cache of remote objects,
     * which that also fills. */
    bool remote = stk_is_remote(f->path);
    if (use_cache && remote && stk_remote_derived_path(f->src, ".stkidx", &cpath) < 0) {
        /* no place for it: indexed without one, as a local file beside a
         * read-only directory is (noted, not an error) */
        tfr_note(m, "%s: cache not used: %s", f->path, stk_errmsg());
        stk_errmsg_clear();
        use_cache = false;
    }
    if (use_cache) {
        if ((rc = tfr_file_keys(f, &k)) < 0)
            goto out;
        if (!remote && !(cpath = tfr_beside(f->path, index_dir, ".stkidx", false)))
            return STK_ENOMEM;
        if ((got = tfr_load_cache(m, cpath, &k, o->max_samples)) < 0) {
            rc = got;
            goto out;
        }
        if (got) {
            tfr_note(m, "%s: %llu records from the cache %s", f->path,
                     (unsigned long long)(m->rs.count - f->first), cpath);
            goto out;
        }
    }
    for (int cand = 0; cand < 3 && !dali; cand++) {
        if (cand == 2 && !index_dir)
            break;
        char *p = tfr_beside(f->path, index_dir, cand == 2 ? "" : ".idx", cand == 1);
        if (!p) {
            rc = STK_ENOMEM;
            goto out;
        }
        if ((stk_is_remote(p) ? stk_remote_known(p) : stk_path_is_file(p)) &&
            strcmp(p, f->path) != 0)
            dali = p;
        else
            free(p);
    }
    if (dali) {
        if ((rc = tfr_load_dali(m, dali, o->max_bytes, o->max_samples)) < 0)
            goto out;
        tfr_note(m, "%s: %llu records from the DALI index %s", f->path,
                 (unsigned long long)(m->rs.count - f->first), dali);
    } else {
        if ((rc = tfr_scan(m, o->max_samples)) < 0)
            goto out;
        tfr_note(m, "%s: %llu records, scanned", f->path,
                 (unsigned long long)(m->rs.count - f->first));
    }
    if (use_cache)
        tfr_write_cache(m, cpath, &k);
out:
    free(cpath);
    free(dali);
    return rc;
}

/* --- the Example --------------------------------------------------------- */

/* What a read wants from a record's Example. */
typedef struct tfr_want {
    bool image;
    const uint8_t *img;
    size_t img_size;
    int64_t label;
} tfr_want;

static int tfr_bad(const stk_dataset *ds, uint64_t index, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tfr_bad(const stk_dataset *ds, uint64_t index, const char *fmt, ...)
{
    char name[1024], why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    stk_recordset_name(&((const tfr_impl *)ds->impl)->rs, index, name, sizeof name);
    return stk_fail(STK_EDATA, "%s: %s", name, why);
}

/* Malformed wire data at `at` (a pointer into the Example `base`). */
static int tfr_malformed(const stk_dataset *ds, uint64_t index, const uint8_t *base,
                         const uint8_t *at, const char *why)
{
    return tfr_bad(ds, index, "malformed tf.train.Example: %s (at byte %zu of the record's data)",
                   why, (size_t)(at - base));
}

/* The names of the Example's features, "a, b, c" into buf (for messages). */
static void tfr_key_names(const uint8_t *data, size_t len, char *buf, size_t cap)
{
    stk_pb ex = stk_pb_init(data, len), fs, en;
    stk_pb_field f, e, kv;
    const char *why;
    size_t used = 0;
    buf[0] = '\0';
    while (stk_pb_next(&ex, &f, &why) > 0) {
        if (f.number != 1 || f.wire != STK_PB_BYTES)
            continue;
        fs = stk_pb_init(f.data, f.size);
        while (stk_pb_next(&fs, &e, &why) > 0) {
            if (e.number != 1 || e.wire != STK_PB_BYTES)
                continue;
            en = stk_pb_init(e.data, e.size);
            while (stk_pb_next(&en, &kv, &why) > 0)
                if (kv.number == 1 && kv.wire == STK_PB_BYTES && used + 8 < cap) {
                    int w = snprintf(buf + used, cap - used, "%s'%.*s'", used ? ", " : "",
                                     kv.size > 64 ? 64 : (int)kv.size, (const char *)kv.data);
                    if (w < 0 || (size_t)w >= cap - used) {
                        snprintf(buf + used, cap - used, "...");
                        return;
                    }
                    used += (size_t)w;
                }
        }
    }
}

static const char *const tfr_kinds[] = {"an empty Feature (no list)", "a bytes_list",
                                        "a float_list", "an int64_list"};

/* The list a Feature holds: kind 1..3 (0: none) and its message. */
static int tfr_feature(const stk_dataset *ds, uint64_t index, const uint8_t *base,
                       const stk_pb_field *value, int *kind, stk_pb *list)
{
    stk_pb c = stk_pb_init(value->data, value->size);
    stk_pb_field f;
    const char *why;
    int r;
    *kind = 0;
    while ((r = stk_pb_next(&c, &f, &why)) > 0) {
        if (f.number < 1 || f.number > 3)
            continue;
        if (f.wire != STK_PB_BYTES)
            return tfr_malformed(ds, index, base, c.start + f.offset,
                                 "a Feature's list has the wrong wire type");
        *kind = (int)f.number; /* a oneof: the last one wins */
        *list = stk_pb_init(f.data, f.size);
    }
    if (r < 0)
        return tfr_malformed(ds, index, base, c.start + f.offset, why);
    return 0;
}

static int tfr_parse(const stk_dataset *ds, uint64_t index, const uint8_t *data, size_t len,
                     tfr_want *w)
{
    const tfr_impl *m = ds->impl;
    stk_pb ex = stk_pb_init(data, len);
    stk_pb_field f, e, kv, img = {0}, lab = {0};
    bool have_img = false, have_lab = false;
    const char *why;
    int r;
    while ((r = stk_pb_next(&ex, &f, &why)) > 0) {
        if (f.number != 1)
            continue; /* unknown field */
        if (f.wire != STK_PB_BYTES)
            return tfr_malformed(ds, index, data, ex.start + f.offset,
                                 "Example.features has the wrong wire type (not a message)");
        stk_pb fs = stk_pb_init(f.data, f.size);
        while ((r = stk_pb_next(&fs, &e, &why)) > 0) {
            if (e.number != 1)
                continue;
            if (e.wire != STK_PB_BYTES)
                return tfr_malformed(ds, index, data, fs.start + e.offset,
                                     "a Features map entry has the wrong wire type");
            stk_pb en = stk_pb_init(e.data, e.size);
            const uint8_t *key = (const uint8_t *)"";
            size_t klen = 0;
            stk_pb_field value = {.data = e.data, .size = 0};
            while ((r = stk_pb_next(&en, &kv, &why)) > 0) {
                if (kv.number != 1 && kv.number != 2)
                    continue;
                if (kv.wire != STK_PB_BYTES)
                    return tfr_malformed(ds, index, data, en.start + kv.offset,
                                         kv.number == 1
                                             ? "a feature's key has the wrong wire type"
                                             : "a feature's value has the wrong wire type");
                if (kv.number == 1) {
                    key = kv.data;
                    klen = kv.size;
                } else {
                    value = kv;
                }
            }
            if (r < 0)
                return tfr_malformed(ds, index, data, en.start + kv.offset, why);
            /* A map: the last entry of a key wins. */
            if (w->image && klen == m->image_key_len && !memcmp(key, m->image_key, klen)) {
                img = value;
                have_img = true;
            }
            if (klen == m->label_key_len && !memcmp(key, m->label_key, klen)) {
                lab = value;
                have_lab = true;
            }
        }
        if (r < 0)
            return tfr_malformed(ds, index, data, fs.start + e.offset, why);
    }
    if (r < 0)
        return tfr_malformed(ds, index, data, ex.start + f.offset, why);

    if ((w->image && !have_img) || !have_lab) {
        char names[512];
        tfr_key_names(data, len, names, sizeof names);
        const char *k = w->image && !have_img ? m->image_key : m->label_key;
        return tfr_bad(ds, index, "the Example has no feature '%s' (the %s; it has %s)", k,
                       k == m->image_key ? "image_key" : "label_key",
                       names[0] ? names : "no features");
    }
    int kind;
    stk_pb list;
    stk_pb_field v;
    if (w->image) {
        if ((r = tfr_feature(ds, index, data, &img, &kind, &list)) < 0)
            return r;
        if (kind != 1)
            return tfr_bad(ds, index, "feature '%s' (the image_key) holds %s, a bytes_list "
                                      "expected", m->image_key, tfr_kinds[kind]);
        bool found = false;
        while (!found && (r = stk_pb_next(&list, &v, &why)) > 0) {
            if (v.number != 1)
                continue;
            if (v.wire != STK_PB_BYTES)
                return tfr_malformed(ds, index, data, list.start + v.offset,
                                     "a BytesList value has the wrong wire type");
            w->img = v.data;
            w->img_size = v.size;
            found = true;
        }
        if (r < 0)
            return tfr_malformed(ds, index, data, list.start + v.offset, why);
        if (!found)
            return tfr_bad(ds, index, "feature '%s' (the image_key) has an empty bytes_list",
                           m->image_key);
    }
    if ((r = tfr_feature(ds, index, data, &lab, &kind, &list)) < 0)
        return r;
    if (kind != 3)
        return tfr_bad(ds, index, "feature '%s' (the label_key) holds %s, an int64_list "
                                  "expected", m->label_key, tfr_kinds[kind]);
    while ((r = stk_pb_next(&list, &v, &why)) > 0) {
        if (v.number != 1)
            continue;
        if (v.wire == STK_PB_VARINT) {
            w->label = (int64_t)v.value;
            return 0;
        }
        if (v.wire != STK_PB_BYTES)
            return tfr_malformed(ds, index, data, list.start + v.offset,
                                 "an Int64List value has the wrong wire type");
        if (v.size == 0)
            continue; /* an empty packed run */
        const uint8_t *p = v.data;
        uint64_t x;
        if (stk_pb_varint(&p, v.data + v.size, &x, &why) < 0)
            return tfr_malformed(ds, index, data, v.data, why);
        w->label = (int64_t)x;
        return 0;
    }
    if (r < 0)
        return tfr_malformed(ds, index, data, list.start + v.offset, why);
    return tfr_bad(ds, index, "feature '%s' (the label_key) has an empty int64_list",
                   m->label_key);
}

/* --- reading -------------------------------------------------------------- */

/* Record `index`'s Example: its framing checked (the length header, and
 * the data CRC under the verify policy). */
static int tfr_record(const stk_dataset *ds, uint64_t index, stk_scratch *scratch,
                      const uint8_t **data, size_t *len)
{
    const tfr_impl *m = ds->impl;
    const uint8_t *p;
    size_t n;
    int rc = stk_recordset_get(&m->rs, index, scratch, &p, &n);
    if (rc < 0)
        return rc;
    size_t dl = n - TFR_FRAME;
    if (stk_rd64(p) != dl) {
        /* A file cut under the mapping reads as zeros: say that first. */
        if ((rc = stk_recordset_check(&m->rs, index, 0, n)) < 0)
            return rc;
        return tfr_bad(ds, index, "the length header says %llu bytes, the index %zu: the file "
                                  "changed after it was indexed",
                       (unsigned long long)stk_rd64(p), dl);
    }
    bool check = m->verify == VERIFY_ALWAYS;
    uint64_t bit = 1ull << (index % 64);
    if (m->verify == VERIFY_FIRST)
        check = !(atomic_load_explicit(&m->verified[index / 64], memory_order_relaxed) & bit);
    if (check) {
        uint32_t want = stk_rd32(p + TFR_HEADER + dl);
        uint32_t got = stk_crc32c_mask(stk_crc32c(0, p + TFR_HEADER, dl));
        if (want != got && (rc = stk_recordset_check(&m->rs, index, 0, n)) < 0)
            return rc; /* bytes lost to a file cut while open: say that, not "damaged" */
        if (want != got)
            return tfr_bad(ds, index, "the data's CRC does not match (stored %08x, computed "
                                      "%08x): the record is damaged", want, got);
        if (m->verify == VERIFY_FIRST)
            atomic_fetch_or_explicit(&m->verified[index / 64], bit, memory_order_relaxed);
    }
    *data = p + TFR_HEADER;
    *len = dl;
    return 0;
}

static int tfr_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const uint8_t *data = NULL;
    size_t len = 0;
    tfr_want w = {.image = true};
    int rc = tfr_record(ds, index, scratch, &data, &len);
    if (rc < 0)
        return rc;
    if ((rc = tfr_parse(ds, index, data, len, &w)) < 0)
        return rc;
    memset(&out->image, 0, sizeof out->image);
    out->encoded = w.img_size ? w.img : (const uint8_t *)"";
    out->encoded_size = w.img_size;
    out->label = w.label;
    return 0;
}

static int tfr_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    stk_scratch scratch = {0};
    const uint8_t *data = NULL;
    size_t len = 0;
    tfr_want w = {.image = false};
    int rc = tfr_record(ds, index, &scratch, &data, &len);
    if (rc == 0)
        rc = tfr_parse(ds, index, data, len, &w);
    if (rc == 0)
        rc = stk_recordset_check(&((const tfr_impl *)ds->impl)->rs, index, 0,
                                 ((const tfr_impl *)ds->impl)->rs.recs[index].size);
    stk_scratch_free(&scratch);
    if (rc == 0)
        *label = w.label;
    return rc;
}

static int tfr_read_check(const stk_dataset *ds, uint64_t index)
{
    const tfr_impl *m = ds->impl;
    return stk_recordset_check(&m->rs, index, 0, m->rs.recs[index].size);
}

static void tfr_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    stk_recordset_name(&((const tfr_impl *)ds->impl)->rs, index, buf, size);
}

static void tfr_access_hint(const stk_dataset *ds, stk_access how)
{
    stk_recordset_advise(&((const tfr_impl *)ds->impl)->rs, how);
}

static const char *tfr_metadata(const stk_dataset *ds, const char *key)
{
    const tfr_impl *m = ds->impl;
    return !strcmp(key, "index") ? m->note : NULL;
}

static void tfr_close(stk_dataset *ds)
{
    tfr_impl *m = ds->impl;
    stk_recordset_free(&m->rs);
    free(m->image_key);
    free(m->label_key);
    free((void *)m->verified);
    free(m->note);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable tfr_vt = {
    .format = "tfrecord",
    .read = tfr_read,
    .close = tfr_close,
    .label = tfr_label,
    .metadata = tfr_metadata,
    .sample_name = tfr_sample_name,
    .read_check = tfr_read_check,
    .access_hint = tfr_access_hint,
};

/* --- open ------------------------------------------------------------------ */

/* The query: image_key, label_key and index take any value (taken out here),
 * verify and cache a fixed set (stk_query_parse). */
static const char *const tfr_verify_values[] = {"off", "first", "always", NULL};
static const char *const tfr_cache_values[] = {"auto", "off", NULL};
static const char *const tfr_io_values[] = {"mmap", "pread", NULL};
static const char *const tfr_any[] = {NULL};
enum { Q_IMAGE, Q_LABEL, Q_INDEX, Q_VERIFY, Q_CACHE, Q_IO, Q_N };

static int tfr_query(const char *uri, const char *query, char *free_vals[3], int *verify,
                     int *cache, int *pread_only)
{
    stk_query_key keys[Q_N] = {{"image_key", tfr_any, -1},
                               {"label_key", tfr_any, -1},
                               {"index", tfr_any, -1},
                               {"verify", tfr_verify_values, -1},
                               {"cache", tfr_cache_values, -1},
                               {"io", tfr_io_values, -1}};
    char *rest = NULL;
    size_t used = 0;
    int rc = 0;
    if (query && *query) {
        if (!(rest = malloc(strlen(query) + 1)))
            return stk_fail(STK_ENOMEM, "out of memory parsing %s", uri);
        const char *p = query;
        for (;;) {
            const char *amp = strchr(p, '&');
            size_t len = amp ? (size_t)(amp - p) : strlen(p);
            const char *eq = memchr(p, '=', len);
            int which = -1;
            for (int i = 0; eq && i < 3; i++)
                if (strlen(keys[i].name) == (size_t)(eq - p) &&
                    !memcmp(keys[i].name, p, (size_t)(eq - p)))
                    which = i;
            if (which >= 0) {
                size_t vl = len - (size_t)(eq - p) - 1;
                if (free_vals[which]) {
                    rc = stk_fail(STK_EINVAL, "tfrecord: query key '%s' given twice in URI '%s'",
                                  keys[which].name, uri);
                    goto out;
                }
                if (vl == 0) {
                    rc = stk_fail(STK_EINVAL, "tfrecord: query key '%s' has an empty value in "
                                              "URI '%s'", keys[which].name, uri);
                    goto out;
                }
                if (!(free_vals[which] = malloc(vl + 1))) {
                    rc = stk_fail(STK_ENOMEM, "out of memory parsing %s", uri);
                    goto out;
                }
                memcpy(free_vals[which], eq + 1, vl);
                free_vals[which][vl] = '\0';
            } else {
                if (used)
                    rest[used++] = '&';
                memcpy(rest + used, p, len);
                used += len;
            }
            if (!amp)
                break;
            p = amp + 1;
        }
        rest[used] = '\0';
    }
    if ((rc = stk_query_parse(uri, "tfrecord", rest, keys, Q_N)) < 0)
        goto out;
    *verify = keys[Q_VERIFY].value < 0 ? VERIFY_FIRST : keys[Q_VERIFY].value;
    *cache = keys[Q_CACHE].value < 0 ? 0 : keys[Q_CACHE].value;
    *pread_only = keys[Q_IO].value == 1;
out:
    free(rest);
    return rc;
}

static bool tfr_index_name(const char *path)
{
    return tfr_ends_with(path, ".idx") || tfr_ends_with(path, ".stkidx") ||
           strstr(path, ".stkidx.tmp-") != NULL;
}

static int tfr_open(const char *uri, const char *path, const char *query,
                    const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    static const stk_file_list_words words = {"TFRecord file", "*.tfrecord, *.tfrec or "
                                              "*.tfrecords files", "TFRecord file or directory"};
    char *qv[3] = {NULL, NULL, NULL};
    char **files = NULL;
    uint32_t nfiles = 0;
    int verify = VERIFY_FIRST, cache = 0, pread_only = 0;
    stk_dataset *ds = NULL;
    tfr_impl *m;
    int rc = tfr_query(uri, query, qv, &verify, &cache, &pread_only);
    if (rc < 0)
        goto out;
    if (qv[Q_INDEX] && !stk_path_is_dir(qv[Q_INDEX])) {
        rc = stk_fail(STK_ENOENT, "tfrecord: index=%s: no such directory (URI '%s')",
                      qv[Q_INDEX], uri);
        goto out;
    }
    if ((rc = stk_file_list(path, tfr_suffixes, &words, &files, &nfiles)) < 0)
        goto out;
    if (stk_path_has_glob(path) && !stk_path_exists(path)) {
        /* A glob also matches the index files beside the data: not data. */
        uint32_t k = 0;
        for (uint32_t i = 0; i < nfiles; i++) {
            if (tfr_index_name(files[i]))
                free(files[i]);
            else
                files[k++] = files[i];
        }
        files[k] = NULL;
        nfiles = k;
        if (!nfiles) {
            rc = stk_fail(STK_ENOENT, "%s: no TFRecord file matches this pattern (only index "
                                      "files)", path);
            goto out;
        }
    }
    if (!(ds = stk_dataset_alloc(&tfr_vt, uri))) {
        rc = STK_ENOMEM;
        goto out;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto out;
    }
    ds->impl = m;
    m->verify = verify;
    m->image_key = qv[Q_IMAGE] ? qv[Q_IMAGE] : stk_strdup("image/encoded");
    m->label_key = qv[Q_LABEL] ? qv[Q_LABEL] : stk_strdup("image/class/label");
    qv[Q_IMAGE] = qv[Q_LABEL] = NULL;
    if (!m->image_key || !m->label_key) {
        rc = STK_ENOMEM;
        goto out;
    }
    m->image_key_len = strlen(m->image_key);
    m->label_key_len = strlen(m->label_key);
    for (uint32_t i = 0; i < nfiles; i++) {
        if ((rc = stk_recordset_add_file(&m->rs, files[i], o.max_bytes, pread_only)) < 0)
            goto out;
        rc = tfr_index_file(m, qv[Q_INDEX], cache == 0, &o);
        /* A file cut while it was indexed: say so, not what its zeros looked like. */
        int lost = stk_recordset_file_intact(&m->rs, m->rs.nfiles - 1);
        if ((rc = lost < 0 ? lost : rc) < 0)
            goto out;
    }
    if (m->rs.count == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: no records (%u empty file%s)", uri, nfiles,
                      nfiles == 1 ? "" : "s");
        goto out;
    }
    if (verify == VERIFY_FIRST) {
        size_t words64 = (size_t)((m->rs.count + 63) / 64);
        if (!(m->verified = calloc(words64, sizeof *m->verified))) {
            rc = stk_fail(STK_ENOMEM, "out of memory for the verified bitmap of %s", uri);
            goto out;
        }
    }
    ds->count = m->rs.count;
    stk_recordset_advise(&m->rs, STK_ACCESS_RANDOM); /* until a hint says otherwise */
    *out = ds;
    ds = NULL;
out:
    stk_dataset_close(ds);
    stk_file_list_free(files, nfiles);
    for (int i = 0; i < 3; i++)
        free(qv[i]);
    return rc;
}

/* A file of ours by name, or one that starts with a TFRecord length header
 * (good CRC) whose record fits; a directory holding such names; a glob
 * ending in one of the extensions. */
static int tfr_detect(const char *path)
{
    if (stk_path_has_glob(path) && !stk_path_exists(path))
        return stk_path_has_suffix(path, tfr_suffixes);
    if (stk_path_is_dir(path)) {
        static const stk_file_list_words words = {"", "", ""};
        char **files = NULL;
        uint32_t n = 0;
        int rc = stk_file_list(path, tfr_suffixes, &words, &files, &n);
        stk_file_list_free(files, n);
        if (rc < 0)
            stk_errmsg_clear();
        return rc == 0 && n > 0;
    }
    if (!stk_path_is_file(path))
        return 0;
    if (stk_path_has_suffix(path, tfr_suffixes))
        return 1;
    stk_source *s = NULL;
    uint8_t hdr[TFR_HEADER];
    int hit = 0;
    if (stk_source_open_file(path, UINT64_MAX, &s) == 0 && s->size >= TFR_FRAME &&
        stk_source_pread(s, hdr, TFR_HEADER, 0) == 0)
        hit = stk_rd32(hdr + 8) == tfr_len_crc(hdr) && stk_rd64(hdr) <= s->size - TFR_FRAME;
    stk_source_close(s);
    stk_errmsg_clear();
    return hit;
}

const stk_reader stk_reader_tfrecord = {
    "tfrecord",
    "tfrecord:PATH[?image_key=image/encoded][&label_key=image/class/label][&index=DIR]"
    "[&verify=off|first|always][&cache=auto|off][&io=mmap|pread]",
    "TFRecord files of tf.train.Example (a file, a directory of *.tfrecord, or a glob)",
    tfr_open,
    NULL,
    tfr_detect,
    "*.tfrecord, *.tfrec or *.tfrecords files (TFRecord)",
    "*.tfrecord, *.tfrec, *.tfrecords (or a file starting with a TFRecord header)"};
