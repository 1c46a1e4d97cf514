/*
 * recordio.c — MXNet RecordIO image files (.rec, with or without .idx).
 *
 * URI: "recordio:PATH[?idx=FILE.idx|none]", PATH one .rec file, a
 * directory (its *.rec files) or a glob: several files are one index space
 * in name order, as DALI's mxnet reader takes a list of them. A bare path
 * naming a file, or a glob, ending in ".rec" is detected. Each file's
 * index defaults to FILE.idx beside FILE.rec (the name with ".rec"
 * replaced by ".idx") when that file exists; idx=PATH names another (one
 * file only), idx=none ignores them.
 *
 * The framing (dmlc-core include/dmlc/recordio.h, src/recordio.cc): a file
 * is a run of frames, each
 *
 *   uint32 magic    0xced7230a, little-endian
 *   uint32 lrecord  cflag << 29 | length  (length < 2^29)
 *   length bytes    the data
 *   0..3 zero bytes padding to a multiple of 4
 *
 * cflag 0 is a whole record. A record whose data holds the magic at a
 * 4-aligned position was split by the writer at each such magic: the first
 * part has cflag 1, middle parts 2, the last 3, and the magics themselves
 * are dropped from the parts, so the record is the parts' data joined with
 * the magic between each two. An MXNet image record (mxnet/recordio.py,
 * pack / pack_img) is
 *
 *   IRHeader        uint32 flag, float32 label, uint64 id, uint64 id2
 *                   (24 bytes, little-endian)
 *   float32[flag]   a label vector, when flag > 0
 *   the image       encoded (JPEG, PNG ...), to the end of the record
 *
 * Labels: with flag 0 the label is the header's float, which must be an
 * integer (|x| < 2^53): stoker's labels are int64 classes. With flag > 0
 * (im2rec --pack-label, or pack() given an array) the label is the
 * vector's first element, under the same rule: im2rec without
 * --pack-label stores that element in the header's label, so both files
 * give the same samples. The other elements are not read.
 *
 * How it works. The file is opened and mapped once through the record
 * table (recordset.h); at open one walk over the frames from byte 0
 * validates every frame (magic, cflag, length within the file, parts of a
 * split record in order) and every record's IRHeader, and records for
 * sample i (the i-th record in the file) the byte range `read` needs: for
 * a whole record its data (a view into the mapping; read skips the header
 * and label vector with one load), for a split record its frames (read
 * joins them into the caller's scratch). Damage that breaks the framing
 * fails the open, naming the file, record and byte: the records after it
 * cannot be found. Damage inside one record's data (an IRHeader shorter
 * than 24 bytes, a label vector running past the record, a label that is
 * not an integer, no image bytes) is kept and reported when that sample is
 * read, as STK_EDATA, so on_error=skip skips exactly that record.
 *
 * The .idx (MXNet's MXIndexedRecordIO: a text line "KEY<TAB>OFFSET" per
 * record, OFFSET the byte where the record's first frame starts) is
 * checked against the walk: every line must name the start of a record,
 * no record may be listed twice or left out, and KEY must be an integer.
 * A stale index (the .rec rewritten after it) fails the open naming the
 * index's line, rather than dropping or repeating samples. Samples are in
 * file order whatever the order of the lines, so a set reads the same with
 * and without its index. The index therefore buys no speed here: the walk
 * touches every record's first bytes either way (see docs/datasets.md for
 * its cost).
 *
 * Invariants after open: count records, file by file; labels[i] is the label, or
 * RIO_BAD when the record's header is damaged (read re-parses it to say
 * why); a whole record's range holds >= 24 bytes and its flag's label
 * vector when labels[i] != RIO_BAD; split[i/64] bit i%64 marks split
 * records, whose frames were validated.
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "format/recordset.h"
#include "format/byte_order.h"
#include "io/map_guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RIO_MAGIC 0xced7230au
#define RIO_HEADER 24u
#define RIO_BAD INT64_MIN

typedef struct stk_recordio_impl {
    stk_recordset rs;   /* owned: the file and the record table */
    int64_t *labels;    /* owned, count entries; RIO_BAD: a damaged header */
    uint64_t *split;    /* owned bitmap, (count + 63) / 64 words: split records */
} stk_recordio_impl;

static int rio_is_split(const stk_recordio_impl *m, uint64_t i)
{
    return m->split && (m->split[i >> 6] >> (i & 63) & 1);
}

/* "FILE: record R (byte O)", O the record's first frame. */
static void stk_recordio_sample_name(const stk_dataset *ds, uint64_t index, char *buf,
                                     size_t size)
{
    const stk_recordio_impl *m = ds->impl;
    const stk_record_ref *r = &m->rs.recs[index];
    const stk_recfile *f = &m->rs.files[r->file];
    uint64_t off = rio_is_split(m, index) ? r->offset : r->offset - 8;
    snprintf(buf, size, "%s: record %llu (byte %llu)", f->path,
             (unsigned long long)(index - f->first), (unsigned long long)off);
}

static uint32_t rio_pad4(uint32_t n) { return (n + 3u) & ~3u; }

/* --- the record's header ------------------------------------------------ */

/* Parse the IRHeader of record `index` (its joined bytes p[0..n)): the
 * label and where the image starts. 0, or a static reason in *why. */
static int rio_header(const uint8_t *p, size_t n, int64_t *label, size_t *skip, char *why,
                      size_t whylen)
{
    if (n < RIO_HEADER) {
        snprintf(why, whylen, "the record holds %zu bytes, fewer than the 24 of an IRHeader", n);
        return -1;
    }
    uint32_t flag = stk_rd32(p);
    float x;
    uint64_t need = RIO_HEADER + 4ull * flag;
    if (need > n) {
        snprintf(why, whylen,
                 "the IRHeader's flag announces a label vector of %u floats, which runs past "
                 "the %zu-byte record",
                 flag, n);
        return -1;
    }
    uint32_t bits = stk_rd32(flag ? p + RIO_HEADER : p + 4);
    memcpy(&x, &bits, sizeof x);
    if (!(x == floorf(x))) { /* NaN too */
        snprintf(why, whylen, "the label %g is not an integer (stoker's labels are int64 classes)",
                 (double)x);
        return -1;
    }
    if (fabsf(x) >= 9007199254740992.0f) {
        /* printed whole (a float this large is an integer, %.0f is exact):
         * "%g" gave "1.15292e+18 is not an integer", which it is */
        snprintf(why, whylen,
                 "the label %.0f is beyond 2^53 (9007199254740992), the largest integer a "
                 "float label is taken as (stoker's labels are int64 classes)",
                 (double)x);
        return -1;
    }
    if (need == n) {
        snprintf(why, whylen, "no image bytes after the IRHeader");
        return -1;
    }
    *label = (int64_t)x;
    *skip = (size_t)need;
    return 0;
}

/* Join the frames of a split record, frames p[0..n), into dst (which may
 * be p: the joined bytes never overtake the frames). Returns the joined
 * size, or (size_t)-1 when the frames are not what open found. */
static size_t rio_join(const uint8_t *p, size_t n, uint8_t *dst)
{
    size_t in = 0, out = 0;
    for (uint32_t part = 0;; part++) {
        if (n - in < 8 || stk_rd32(p + in) != RIO_MAGIC)
            return (size_t)-1;
        uint32_t lrec = stk_rd32(p + in + 4), cflag = lrec >> 29, len = lrec & ((1u << 29) - 1);
        if (cflag != (part == 0 ? 1u : cflag == 3 ? 3u : 2u) || rio_pad4(len) > n - in - 8)
            return (size_t)-1;
        if (part) { /* the magic the writer split at, little-endian */
            const uint8_t le[4] = {0x0a, 0x23, 0xd7, 0xce};
            memcpy(dst + out, le, 4);
            out += 4;
        }
        memmove(dst + out, p + in + 8, len);
        out += len;
        in += 8 + (size_t)rio_pad4(len);
        if (cflag == 3)
            return out;
    }
}

/* --- reader ------------------------------------------------------------- */

static int stk_recordio_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                             stk_scratch *scratch)
{
    const stk_recordio_impl *m = ds->impl;
    const uint8_t *p;
    size_t n, skip;
    int64_t label = m->labels[index];
    char name[1200], why[160];
    int rc = stk_recordset_get(&m->rs, index, scratch, &p, &n);
    if (rc < 0)
        return rc;
    if (rio_is_split(m, index)) {
        if (p != scratch->data && (rc = stk_scratch_reserve(scratch, n)) < 0)
            return rc;
        size_t joined = rio_join(p, n, scratch->data);
        if (joined == (size_t)-1 && (rc = stk_recordset_check(&m->rs, index, 0, n)) < 0)
            return rc; /* frames lost to a file cut while open: say that */
        if (joined == (size_t)-1) {
            stk_recordio_sample_name(ds, index, name, sizeof name);
            return stk_fail(STK_EDATA, "%s: the frames of the split record changed since open",
                            name);
        }
        /* a copy: bytes lost to a truncation are zeros in it, and no
         * read_check sees the copy, so check here */
        if ((rc = stk_recordset_check(&m->rs, index, 0, n)) < 0)
            return rc;
        p = scratch->data;
        n = joined;
    }
    if (label == RIO_BAD || n < RIO_HEADER) {
        stk_recordio_sample_name(ds, index, name, sizeof name);
        if (rio_header(p, n, &label, &skip, why, sizeof why) == 0)
            snprintf(why, sizeof why, "the record's header changed since open");
        return stk_fail(STK_EDATA, "%s: %s", name, why);
    }
    skip = RIO_HEADER + 4ull * stk_rd32(p);
    if (skip >= n) {
        stk_recordio_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA, "%s: the record's header changed since open", name);
    }
    memset(out, 0, sizeof *out);
    out->encoded = p + skip;
    out->encoded_size = n - skip;
    out->label = label;
    return 0;
}

static int stk_recordio_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_recordio_impl *m = ds->impl;
    return stk_recordset_check(&m->rs, index, 0, m->rs.recs[index].size);
}

static void stk_recordio_access_hint(const stk_dataset *ds, stk_access how)
{
    const stk_recordio_impl *m = ds->impl;
    stk_recordset_advise(&m->rs, how);
}

static int stk_recordio_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const stk_recordio_impl *m = ds->impl;
    if (m->labels[index] == RIO_BAD) {
        stk_sample s;
        stk_scratch scratch = {0};
        int rc = stk_recordio_read(ds, index, &s, &scratch);
        stk_scratch_free(&scratch);
        return rc < 0 ? rc : STK_EDATA;
    }
    *label = m->labels[index];
    return 0;
}

static void stk_recordio_close(stk_dataset *ds)
{
    stk_recordio_impl *m = ds->impl;
    stk_recordset_free(&m->rs);
    free(m->labels);
    free(m->split);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_recordio_vt = {
    .format = "recordio",
    .read = stk_recordio_read,
    .close = stk_recordio_close,
    .label = stk_recordio_label,
    .sample_name = stk_recordio_sample_name,
    .read_check = stk_recordio_read_check,
    .access_hint = stk_recordio_access_hint,
};

/* --- open: the walk ----------------------------------------------------- */

/* Bytes [off, off + n) of the file: from the mapping, or read into buf
 * (pread mode; n <= sizeof buf of the caller). */
static int rio_bytes(const stk_recordset *rs, const uint8_t *map, uint64_t off, size_t n,
                     uint8_t *buf, const uint8_t **out)
{
    if (map) {
        *out = map + off;
        return 0;
    }
    *out = buf;
    return stk_source_pread(rs->files[rs->nfiles - 1].src, buf, n, off);
}

/* Grow an array of `each`-byte items to hold n + 1. */
static int rio_grow(void **arr, uint64_t *cap, uint64_t n, size_t each, const char *path)
{
    if (n < *cap)
        return 0;
    uint64_t c = *cap ? *cap * 2 : 1024;
    if (c > SIZE_MAX / each)
        return stk_fail(STK_ENOMEM, "%s: out of memory for the record table", path);
    void *g = realloc(*arr, (size_t)c * each);
    if (!g)
        return stk_fail(STK_ENOMEM, "%s: out of memory for the record table", path);
    *arr = g;
    *cap = c;
    return 0;
}

typedef struct rio_walk {
    uint64_t *starts; /* owned: each record's first byte (for the .idx check) */
    uint64_t cap_starts, cap_labels;
    uint64_t *splits; /* owned: the indices of split records */
    uint64_t nsplit, cap_split;
} rio_walk;

static int rio_scan(stk_recordio_impl *m, const char *path, uint64_t max_records, rio_walk *w)
{
    stk_recordset *rs = &m->rs;
    uint32_t fi = rs->nfiles - 1; /* the file just added */
    const uint8_t *map = stk_recordset_file_data(rs, fi);
    uint64_t size = rs->files[fi].size, off = 0, n = 0; /* n: records of this file */
    uint8_t buf[RIO_HEADER + 8], *joined = NULL;
    size_t joined_cap = 0;
    const uint8_t *h;
    int rc = 0;

    while (off < size) {
        uint64_t start = off;
        if (size - off < 8) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: record %llu (byte %llu): truncated: a frame header needs 8 bytes, "
                          "%llu remain",
                          path, (unsigned long long)n, (unsigned long long)off,
                          (unsigned long long)(size - off));
            break;
        }
        /* the frames of one record */
        uint32_t parts = 0, first_len = 0;
        uint64_t data_len = 0;
        for (;;) {
            if (size - off < 8) {
                rc = stk_fail(STK_EFORMAT,
                              "%s: record %llu (byte %llu): truncated inside a split record: "
                              "part %u's frame header at byte %llu needs 8 bytes, %llu remain",
                              path, (unsigned long long)n, (unsigned long long)start, parts,
                              (unsigned long long)off, (unsigned long long)(size - off));
                goto out;
            }
            if ((rc = rio_bytes(rs, map, off, 8, buf, &h)) < 0)
                goto out;
            uint32_t magic = stk_rd32(h), lrec = stk_rd32(h + 4);
            uint32_t cflag = lrec >> 29, len = lrec & ((1u << 29) - 1);
            if (magic != RIO_MAGIC) {
                rc = stk_fail(STK_EFORMAT,
                              "%s: record %llu (byte %llu): bad magic 0x%08x at byte %llu "
                              "(0x%08x expected: not a RecordIO file, or damaged)",
                              path, (unsigned long long)n, (unsigned long long)start, magic,
                              (unsigned long long)off, RIO_MAGIC);
                goto out;
            }
            if (cflag > 3 || (parts == 0 && cflag >= 2) || (parts > 0 && cflag < 2)) {
                rc = stk_fail(STK_EFORMAT,
                              "%s: record %llu (byte %llu): frame at byte %llu has cflag %u, "
                              "%s expected",
                              path, (unsigned long long)n, (unsigned long long)start,
                              (unsigned long long)off, cflag,
                              parts == 0 ? "0 (a whole record) or 1 (the start of a split one)"
                                         : "2 or 3 (the next part of a split record)");
                goto out;
            }
            if ((uint64_t)rio_pad4(len) > size - off - 8) {
                rc = stk_fail(STK_EFORMAT,
                              "%s: record %llu (byte %llu): truncated: the frame at byte %llu "
                              "holds %u bytes (%u padded), %llu remain in the file",
                              path, (unsigned long long)n, (unsigned long long)start,
                              (unsigned long long)off, len, rio_pad4(len),
                              (unsigned long long)(size - off - 8));
                goto out;
            }
            if (parts == 0)
                first_len = len;
            data_len += len + (parts ? 4 : 0);
            parts++;
            off += 8 + (uint64_t)rio_pad4(len);
            if (cflag == 0 || cflag == 3)
                break;
            if (len & 3u) {
                rc = stk_fail(STK_EFORMAT,
                              "%s: record %llu (byte %llu): part %u of a split record holds %u "
                              "bytes, not a multiple of 4 (the writer splits at aligned magics)",
                              path, (unsigned long long)n, (unsigned long long)start, parts, len);
                goto out;
            }
        }
        if ((rc = rio_grow((void **)&w->starts, &w->cap_starts, n, sizeof *w->starts, path)) < 0 ||
            (rc = rio_grow((void **)&m->labels, &w->cap_labels, rs->count, sizeof *m->labels,
                           path)) < 0)
            goto out;
        w->starts[n] = start;
        uint64_t g = rs->count; /* the sample's index */
        /* the header: from the mapping (whole record) or the joined bytes */
        int64_t label = RIO_BAD;
        size_t skip;
        char why[160];
        if (parts == 1) {
            size_t k = first_len < sizeof buf ? first_len : sizeof buf;
            if ((rc = rio_bytes(rs, map, start + 8, k, buf, &h)) < 0)
                goto out;
            /* rio_header reads at most 24 + 4 bytes; a vector's end is
             * checked against the real length */
            if (rio_header(h, first_len, &label, &skip, why, sizeof why) < 0)
                label = RIO_BAD;
            if ((rc = stk_recordset_push(rs, start + 8, first_len, max_records)) < 0)
                goto out;
        } else {
            uint64_t framed = off - start;
            if (framed > SIZE_MAX || data_len > (1ull << 32)) {
                rc = stk_fail(STK_ELIMIT, "%s: record %llu (byte %llu): a record of 4 GiB or more",
                              path, (unsigned long long)n, (unsigned long long)start);
                goto out;
            }
            if (framed > joined_cap) {
                uint8_t *grown = realloc(joined, (size_t)framed);
                if (!grown) {
                    rc = stk_fail(STK_ENOMEM, "%s: out of memory", path);
                    goto out;
                }
                joined = grown;
                joined_cap = (size_t)framed;
            }
            const uint8_t *fr = joined;
            if (map)
                fr = map + start;
            else if ((rc = stk_source_pread(rs->files[fi].src, joined, (size_t)framed, start)) < 0)
                goto out;
            size_t jn = rio_join(fr, (size_t)framed, joined);
            if (jn == (size_t)-1 || rio_header(joined, jn, &label, &skip, why, sizeof why) < 0)
                label = RIO_BAD;
            /* a split record's padding after its last part: the range
             * ends at the last part's data, rounded to the frame end */
            if ((rc = stk_recordset_push(rs, start, framed, max_records)) < 0)
                goto out;
            if ((rc = rio_grow((void **)&w->splits, &w->cap_split, w->nsplit, sizeof *w->splits,
                               path)) < 0)
                goto out;
            w->splits[w->nsplit++] = g;
        }
        m->labels[g] = label;
        n++;
    }
    if (rc == 0 && n == 0)
        rc = stk_fail(STK_EFORMAT, "%s: no records (an empty file)", path);
out:
    free(joined);
    return rc;
}

/* --- open: the .idx check ----------------------------------------------- */

typedef struct rio_idx_line {
    uint64_t offset;
    uint64_t line;
} rio_idx_line;

static int rio_idx_cmp(const void *a, const void *b)
{
    const rio_idx_line *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int rio_check_idx(const char *idx, const char *rec, const uint64_t *starts, uint64_t n,
                         uint64_t max_bytes)
{
    stk_mapped_file f = {0};
    rio_idx_line *lines = NULL;
    uint64_t count = 0, cap = 0, line = 0;
    int rc = stk_map_file(idx, max_bytes, &f);
    if (rc < 0)
        return rc;
    const char *p = f.size ? (const char *)f.data : "", *end = p + f.size; /* empty: no map */
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *e = eol ? eol : end, *q = p;
        line++;
        while (e > q && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e == q) { /* a blank line */
            p = eol ? eol + 1 : end;
            continue;
        }
        /* KEY: an integer (MXNet writes the record's key) */
        if (q < e && *q == '-')
            q++;
        const char *k0 = q;
        while (q < e && *q >= '0' && *q <= '9')
            q++;
        int key_ok = q > k0 && q < e && (*q == '\t' || *q == ' ');
        while (q < e && (*q == '\t' || *q == ' '))
            q++;
        uint64_t off = 0;
        const char *o0 = q;
        while (q < e && *q >= '0' && *q <= '9' && off < (1ull << 60))
            off = off * 10 + (uint64_t)(*q++ - '0');
        if (!key_ok || q == o0 || q != e) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: line %llu: not \"KEY<TAB>OFFSET\" (two decimal integers): '%.*s'",
                          idx, (unsigned long long)line, (int)(e - p < 80 ? e - p : 80), p);
            goto out;
        }
        if ((rc = rio_grow((void **)&lines, &cap, count, sizeof *lines, idx)) < 0)
            goto out;
        lines[count++] = (rio_idx_line){off, line};
        p = eol ? eol + 1 : end;
    }
    if (count)
        qsort(lines, count, sizeof *lines, rio_idx_cmp);
    for (uint64_t i = 0, r = 0; i < count || r < n;) {
        if (i < count && i > 0 && lines[i].offset == lines[i - 1].offset) {
            rc = stk_fail(STK_EFORMAT, "%s: line %llu: offset %llu is listed twice (also line %llu)",
                          idx, (unsigned long long)lines[i].line,
                          (unsigned long long)lines[i].offset,
                          (unsigned long long)lines[i - 1].line);
            goto out;
        }
        if (r < n && (i == count || starts[r] < lines[i].offset)) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: record %llu (byte %llu) is not listed in the index %s (a stale "
                          "index? pass ?idx=none to read the file without it)",
                          rec, (unsigned long long)r, (unsigned long long)starts[r], idx);
            goto out;
        }
        if (r == n || lines[i].offset < starts[r]) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: line %llu: offset %llu is not where a record of %s starts (a "
                          "stale index? pass ?idx=none to read the file without it)",
                          idx, (unsigned long long)lines[i].line,
                          (unsigned long long)lines[i].offset, rec);
            goto out;
        }
        i++, r++;
    }
out:
    free(lines);
    stk_unmap_file(&f);
    return rc;
}

/* --- open --------------------------------------------------------------- */

/* "FILE.rec" -> "FILE.idx" (any other name: NAME.idx). */
static char *rio_default_idx(const char *path)
{
    size_t n = strlen(path);
    if (n >= 4 && strcmp(path + n - 4, ".rec") == 0)
        n -= 4;
    char *s = malloc(n + 5);
    if (!s) {
        stk_fail(STK_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(s, path, n);
    memcpy(s + n, ".idx", 5);
    return s;
}

static int stk_recordio_open(const char *uri, const char *path, const char *query,
                             const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_dataset *ds = NULL;
    stk_recordio_impl *m;
    rio_walk w = {0};
    char *idx = NULL;
    int no_idx = 0, explicit_idx = 0;
    int rc;

    static const char *const suffixes[] = {".rec", NULL};
    static const stk_file_list_words words = {"RecordIO file", "*.rec files",
                                               "RecordIO file or directory"};
    char **files = NULL;
    uint32_t nfiles = 0;

    /* The query: only idx=PATH|none (a free value, so parsed here). */
    if (query && *query) {
        const char *q = query;
        if (strncmp(q, "idx=", 4) != 0 || !q[4] || strchr(q, '&'))
            return stk_fail(STK_EINVAL,
                            "recordio: URI '%s': the query takes one key, idx=PATH or idx=none "
                            "(got '%s')",
                            uri, query);
        no_idx = strcmp(q + 4, "none") == 0;
        explicit_idx = !no_idx;
    }
    if ((rc = stk_file_list(path, suffixes, &words, &files, &nfiles)) < 0)
        return rc;
    if (explicit_idx && nfiles != 1) {
        rc = stk_fail(STK_EINVAL,
                      "recordio: URI '%s': idx=PATH names the index of one file, and %s names "
                      "%u (each file's index is found beside it: FILE.idx)",
                      uri, path, nfiles);
        goto fail;
    }
    if (!(ds = stk_dataset_alloc(&stk_recordio_vt, uri))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = m;
    for (uint32_t f = 0; f < nfiles; f++) {
        const char *file = files[f];
        /* its index: idx=PATH, FILE.idx when it exists, or none */
        free(idx);
        idx = NULL;
        if (explicit_idx) {
            if (!(idx = stk_strdup(query + 4))) {
                rc = STK_ENOMEM;
                goto fail;
            }
            if (!stk_path_is_file(idx)) {
                rc = stk_fail(STK_ENOENT, "recordio: %s: no such index file (URI '%s')", idx,
                              uri);
                goto fail;
            }
        } else if (!no_idx) {
            if (!(idx = rio_default_idx(file))) {
                rc = STK_ENOMEM;
                goto fail;
            }
            if (!stk_path_is_file(idx)) {
                free(idx);
                idx = NULL;
            }
        }
        uint64_t first = m->rs.count;
        if ((rc = stk_recordset_add_file(&m->rs, file, o.max_bytes, 0)) < 0)
            goto fail;
        rc = rio_scan(m, file, o.max_samples, &w);
        /* A file cut while it was scanned: say so, not what its zeros looked like. */
        int lost = stk_recordset_file_intact(&m->rs, m->rs.nfiles - 1);
        if ((rc = lost < 0 ? lost : rc) < 0)
            goto fail;
        if (idx && (rc = rio_check_idx(idx, file, w.starts, m->rs.count - first, o.max_bytes)) < 0)
            goto fail;
    }
    if (w.nsplit) {
        if (!(m->split = calloc((size_t)((m->rs.count + 63) / 64), sizeof *m->split))) {
            rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
            goto fail;
        }
        for (uint64_t i = 0; i < w.nsplit; i++)
            m->split[w.splits[i] >> 6] |= 1ull << (w.splits[i] & 63);
    }
    ds->count = m->rs.count;
    stk_recordset_advise(&m->rs, STK_ACCESS_RANDOM); /* until a hint says otherwise */
    int64_t maxl = -1;
    int all = 1;
    for (uint64_t i = 0; i < ds->count; i++) {
        if (m->labels[i] < 0)
            all = 0;
        else if (m->labels[i] > maxl)
            maxl = m->labels[i];
    }
    ds->num_classes = all && maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
    free(w.starts);
    free(w.splits);
    free(idx);
    stk_file_list_free(files, nfiles);
    *out = ds;
    return 0;

fail:
    free(w.starts);
    free(w.splits);
    free(idx);
    stk_file_list_free(files, nfiles);
    stk_dataset_close(ds);
    return rc;
}

/* A file whose name ends in ".rec", or a glob pattern ending in ".rec". */
static int stk_recordio_detect(const char *path)
{
    size_t n = strlen(path);
    if (n <= 4 || strcmp(path + n - 4, ".rec") != 0)
        return 0;
    return stk_path_is_file(path) || (!stk_path_exists(path) && strpbrk(path, "*?[") != NULL);
}

const stk_reader stk_reader_recordio = {
    "recordio", "recordio:PATH[?idx=FILE.idx|none]",
    "MXNet RecordIO: a .rec file, a directory of *.rec or a glob; IRHeader + encoded image; "
    "each FILE.idx checked",
    stk_recordio_open, NULL, stk_recordio_detect, NULL, "*.rec (MXNet RecordIO)"};
