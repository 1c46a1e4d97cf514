/*
 * lmdb.c — LMDB environments: Caffe's Datum sets, and plain encoded images.
 *
 * URI: "lmdb:DIR[?value=datum|encoded&color=bgr|rgb]". DIR is an LMDB
 * environment directory (data.mdb, and lock.mdb when a writer made one);
 * a path naming a file is opened as a subdirectory-less environment
 * (MDB_NOSUBDIR). A bare directory holding data.mdb is detected. Samples
 * are the main database's records in key order: sample i is the i-th key
 * (Caffe's convert_imageset writes keys "%08d_PATH", so key order is the
 * order the images were written in).
 *
 * value=datum (the default): every value is a Caffe Datum message
 * (caffe.proto):
 *
 *   message Datum {
 *     optional int32 channels = 1;  optional int32 height = 2;
 *     optional int32 width = 3;     optional bytes data = 4;
 *     optional int32 label = 5;     repeated float float_data = 6;
 *     optional bool encoded = 7 [default = false];
 *   }
 *
 * read through the bounds-checked wire reader (protowire.h). encoded=true:
 * `data` is an encoded image (JPEG/PNG...), handed out as encoded bytes.
 * encoded=false: `data` is channels x height x width raw pixels in CHW
 * order, channels 1 or 3; it is handed out as a strided image view
 * without a copy (col_stride 1, row_stride W, chan_stride H*W). Caffe
 * fills raw color Datums from OpenCV images, so their planes are B, G, R:
 * with color=bgr (the default) the view starts at the R plane and walks
 * the planes backwards (chan_stride -H*W), so the sample is RGB like every
 * other reader's; color=rgb takes planes already in R, G, B order as they
 * are. The label is the Datum's int32 label (0 when absent: protobuf's
 * default). float_data Datums (float pixels) are refused. A Datum with
 * neither the encoded field nor any dimension can only be an encoded image
 * and is read as one (caffe.proto's default would say raw, but then it has
 * no shape; DALI reads it as encoded too).
 *
 * DALI's caffe reader, for comparison: it hands raw data out as stored,
 * shaped H x W x C without reordering the CHW planes or the BGR order,
 * and reads a Datum as encoded unless the encoded field says false.
 *
 * value=encoded: every value is an encoded image. Labels follow the
 * WebDataset convention: a key ending in ".cls" holds, as ASCII decimal
 * text, the label of the images whose keys have the same stem (the key up
 * to its last '.'): "cat/001.jpg" gets its label from "cat/001.cls". The
 * .cls keys are not samples; an image without one has label -1.
 *
 * How it works. liblmdb maps data.mdb read-only and is opened with
 * MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD. At open one read
 * transaction is begun and held until close; one cursor walk records, for
 * every record, the key and value pointers LMDB returns (into its map),
 * so sample i is a table lookup: `read` never calls liblmdb, takes no
 * lock and allocates nothing, and every view it returns points into the
 * map and stays valid until the dataset is closed.
 *
 * Why one transaction for the dataset rather than one per worker thread:
 * the pointers are only valid while a transaction that saw them is open,
 * and every thread must see the same snapshot, or index i could name
 * different records in different threads if a writer committed between
 * their transactions. One snapshot held for the dataset's life gives both;
 * MDB_NOTLS lets the thread that closes the dataset end a transaction
 * another thread began, and since only open and close touch it, no two
 * threads use it at once (LMDB's rule). MDB_NOLOCK: no lock file is read
 * or written, so an environment on read-only storage opens, and the same
 * environment may be opened by several datasets of one process (LMDB's
 * POSIX locks break when one process opens an environment twice). The
 * price: a writer running at the same time is not told of this reader and
 * may reuse pages it is reading. Do not read an environment while it is
 * being written (a training set is written once, then read).
 *
 * liblmdb, not src/io, maps the file: this is the one reader whose bytes do
 * not come through a stk_source. Its map (found from the page format,
 * lmdb_find_map: liblmdb does not tell) is registered with the SIGBUS
 * guard (src/io/map_guard.h) over the pages in use, so a data.mdb
 * truncated while open reads as zeros rather than killing the process,
 * and read_check fails the sample with STK_EDATA. liblmdb is not hardened
 * against a corrupt data.mdb: it reports the damage it notices
 * (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID), which fails the open
 * with liblmdb's words, but a crafted file can crash it; values are what
 * this reader parses, and every Datum is fully checked at every read.
 *
 * Shape: a set whose raw Datums all have one shape (and that holds no
 * encoded Datum) reports it as the dataset's height, width and channels,
 * so consumers such as pack see a fixed-shape raw set; finding it reads
 * each value's fields but not its data (one page per value, raw sets
 * only). Otherwise the shape is 0 (varies).
 *
 * Invariants after open: count records, each with key and value pointers
 * into the map (value < 4 GiB); labels (value=encoded) holds count
 * entries; the transaction is open until close; when height is not 0
 * every Datum that reads has that shape.
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/protowire.h"
#include "format/reader_util.h"
#include "io/map_guard.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct lmdb_rec {
    const uint8_t *key; /* into LMDB's map, valid while txn is open */
    const uint8_t *val; /* into LMDB's map */
    uint32_t val_size;
    uint32_t key_size; /* <= 511 (LMDB's default key limit) */
} lmdb_rec;

enum { LMDB_VALUE_DATUM, LMDB_VALUE_ENCODED };

typedef struct stk_lmdb_impl {
    MDB_env *env;               /* owned; closed last */
    MDB_txn *txn;               /* owned read transaction: the snapshot every
                                   pointer below belongs to; aborted at close */
    char *path;                 /* owned: the environment path, for messages */
    const uint8_t *map;         /* LMDB's map (lmdb_find_map), or NULL */
    uint64_t map_used;          /* bytes of it in use at open (pages * psize) */
    struct stk_map_guard *guard; /* owned SIGBUS-guard registration, or NULL */
    lmdb_rec *recs;             /* owned, count entries, key order */
    int64_t *labels;            /* owned, count entries (value=encoded), or NULL */
    int value;                  /* LMDB_VALUE_* */
    int rgb;                    /* color=rgb: raw planes already R, G, B */
    uint64_t max_pixels;        /* the options' limit on a raw Datum's H * W */
} stk_lmdb_impl;

/* --- names and messages ------------------------------------------------- */

/* The key as printable text: bytes 0x20..0x7e as they are ('\'' and '\\'
 * escaped), others \xHH, cut at 80 characters with "...". */
static void lmdb_key_text(const uint8_t *k, size_t n, char *buf, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < size; i++) {
        if (o >= 80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        uint8_t c = k[i];
        if (c == '\'' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            buf[o++] = (char)c;
        } else {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        }
    }
    buf[o < size ? o : size - 1] = '\0';
}

/* "ENV: key 'K' (record I)". */
static void stk_lmdb_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const stk_lmdb_impl *m = ds->impl;
    char key[128];
    lmdb_key_text(m->recs[index].key, m->recs[index].key_size, key, sizeof key);
    snprintf(buf, size, "%s: key '%s' (record %llu)", m->path, key, (unsigned long long)index);
}

/* --- Datum -------------------------------------------------------------- */

static const char *const lmdb_datum_fields[] = {"", "channels", "height", "width", "data",
                                                "label", "float_data", "encoded"};

/* Parse Datum `v` of record `index` into *out: 0, or STK_EDATA naming the
 * record and reason. */
static int lmdb_datum(const stk_dataset *ds, uint64_t index, const uint8_t *v, size_t n,
                      stk_sample *out)
{
    const stk_lmdb_impl *m = ds->impl;
    stk_pb c = stk_pb_init(v, n);
    stk_pb_field f;
    const char *why = NULL;
    int64_t dims[4] = {0, 0, 0, 0}; /* [1..3]: channels, height, width */
    int64_t label = 0;
    int encoded = 0, have_encoded = 0, have_data = 0, have_float = 0;
    const uint8_t *data = NULL;
    size_t data_size = 0;
    char name[256];
    int rc;

    while ((rc = stk_pb_next(&c, &f, &why)) == 1) {
        if (f.number > 7)
            continue; /* an unknown field: skipped, as protobuf does */
        /* data: bytes; float_data: fixed32, or bytes when packed; the rest varints */
        uint32_t want = f.number == 4 ? STK_PB_BYTES : f.number == 6 ? STK_PB_FIXED32
                                                                      : STK_PB_VARINT;
        if (f.wire != want && !(f.number == 6 && f.wire == STK_PB_BYTES)) {
            stk_lmdb_sample_name(ds, index, name, sizeof name);
            return stk_fail(STK_EDATA,
                            "%s: not a Caffe Datum: field %u (%s) at byte %zu has wire type %u, "
                            "expected %u",
                            name, f.number, lmdb_datum_fields[f.number], f.offset, f.wire, want);
        }
        switch (f.number) {
        case 1: case 2: case 3:
            dims[f.number] = (int32_t)(uint32_t)f.value; /* int32: the low 32 bits */
            break;
        case 4:
            data = f.data;
            data_size = f.size;
            have_data = 1;
            break;
        case 5:
            label = (int32_t)(uint32_t)f.value;
            break;
        case 6:
            if (f.wire == STK_PB_FIXED32 || f.size > 0)
                have_float = 1;
            break;
        case 7:
            encoded = f.value != 0;
            have_encoded = 1;
            break;
        }
    }
    /* No encoded field and no dimensions: only an encoded image fits (some
     * writers leave the flag out; DALI reads such Datums as encoded too). */
    if (!have_encoded && !dims[1] && !dims[2] && !dims[3])
        encoded = 1;
    if (rc < 0) {
        stk_lmdb_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA, "%s: not a Caffe Datum: %s (at byte %zu of the %zu-byte value)",
                        name, why, f.offset, n);
    }
    if (have_float && (!have_data || data_size == 0)) {
        stk_lmdb_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA,
                        "%s: the Datum holds float_data (float pixels), which stoker does not "
                        "read (uint8 data or an encoded image expected)",
                        name);
    }
    if (!have_data) {
        stk_lmdb_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA, "%s: not a Caffe Datum: no data field (4) in the %zu-byte value",
                        name, n);
    }
    out->label = label;
    if (encoded) {
        if (data_size == 0) {
            stk_lmdb_sample_name(ds, index, name, sizeof name);
            return stk_fail(STK_EDATA, "%s: encoded Datum with an empty data field", name);
        }
        out->encoded = data;
        out->encoded_size = data_size;
        return 0;
    }
    int64_t ch = dims[1], h = dims[2], w = dims[3];
    if ((ch != 1 && ch != 3) || h <= 0 || w <= 0 ||
        (uint64_t)h * (uint64_t)w > m->max_pixels) {
        stk_lmdb_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA,
                        "%s: raw Datum of %lld x %lld x %lld (channels x height x width): "
                        "channels must be 1 or 3 and height and width positive (at most %llu "
                        "pixels)",
                        name, (long long)ch, (long long)h, (long long)w,
                        (unsigned long long)m->max_pixels);
    }
    uint64_t plane = (uint64_t)h * (uint64_t)w;
    if (plane * (uint64_t)ch != data_size) {
        stk_lmdb_sample_name(ds, index, name, sizeof name);
        return stk_fail(STK_EDATA,
                        "%s: raw Datum data holds %zu bytes, channels x height x width = %lld x "
                        "%lld x %lld = %llu",
                        name, data_size, (long long)ch, (long long)h, (long long)w,
                        (unsigned long long)(plane * (uint64_t)ch));
    }
    out->image.height = (uint32_t)h;
    out->image.width = (uint32_t)w;
    out->image.channels = (uint32_t)ch;
    out->image.row_stride = (ptrdiff_t)w;
    out->image.col_stride = 1;
    if (ch == 3 && !m->rgb) { /* B, G, R planes: start at R, walk backwards */
        out->image.pixels = data + 2 * plane;
        out->image.chan_stride = -(ptrdiff_t)plane;
    } else {
        out->image.pixels = data;
        out->image.chan_stride = (ptrdiff_t)plane;
    }
    return 0;
}

/* The dimensions of a Datum, reading its fields but not its data bytes:
 * 1 with c/h/w set for a raw Datum whose fields parse, 0 for an encoded
 * one, -1 when it does not parse (its read will say why). */
static int lmdb_datum_dims(const uint8_t *v, size_t n, int64_t dims[3])
{
    stk_pb c = stk_pb_init(v, n);
    stk_pb_field f;
    const char *why;
    int rc, encoded = 0, have_encoded = 0, have_data = 0;
    dims[0] = dims[1] = dims[2] = 0;
    while ((rc = stk_pb_next(&c, &f, &why)) == 1) {
        if (f.number >= 1 && f.number <= 3 && f.wire == STK_PB_VARINT)
            dims[f.number - 1] = (int32_t)(uint32_t)f.value;
        else if (f.number == 7 && f.wire == STK_PB_VARINT)
            encoded = f.value != 0, have_encoded = 1;
        else if (f.number == 4 && f.wire == STK_PB_BYTES)
            have_data = 1;
    }
    if (rc < 0 || !have_data)
        return -1;
    if (!have_encoded && !dims[0] && !dims[1] && !dims[2])
        encoded = 1; /* as lmdb_datum decides */
    return encoded ? 0 : 1;
}

/* --- reader ------------------------------------------------------------- */

static int stk_lmdb_read_check(const stk_dataset *ds, uint64_t index);

static int stk_lmdb_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                         stk_scratch *scratch)
{
    const stk_lmdb_impl *m = ds->impl;
    const lmdb_rec *r = &m->recs[index];
    (void)scratch;
    memset(out, 0, sizeof *out);
    if (m->value == LMDB_VALUE_ENCODED) {
        out->encoded = r->val;
        out->encoded_size = r->val_size;
        out->label = m->labels[index];
        return 0;
    }
    int rc = lmdb_datum(ds, index, r->val, r->val_size, out);
    /* zeros where data.mdb was cut under the map do not parse: say so */
    if (rc < 0 && m->guard && !stk_map_guard_intact(m->guard, (uint64_t)(r->val - m->map),
                                                     r->val_size))
        return stk_lmdb_read_check(ds, index);
    return rc;
}

/* vtable.read_check: were the value's bytes still the file's after use? */
static int stk_lmdb_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_lmdb_impl *m = ds->impl;
    const lmdb_rec *r = &m->recs[index];
    if (!m->guard || stk_map_guard_intact(m->guard, (uint64_t)(r->val - m->map), r->val_size))
        return 0;
    char name[256];
    stk_lmdb_sample_name(ds, index, name, sizeof name);
    return stk_fail(STK_EDATA,
                    "%s: data.mdb was truncated while open (only its first %llu of %llu bytes in "
                    "use remain); the value's bytes were lost",
                    name, (unsigned long long)stk_map_guard_valid(m->guard),
                    (unsigned long long)m->map_used);
}

static void stk_lmdb_access_hint(const stk_dataset *ds, stk_access how)
{
    const stk_lmdb_impl *m = ds->impl;
    if (m->map && m->map_used)
        stk_mapping_advise(m->map, 0, m->map_used,
                           how == STK_ACCESS_SEQUENTIAL ? STK_ADVISE_SEQUENTIAL
                                                        : STK_ADVISE_RANDOM);
}

static void stk_lmdb_close(stk_dataset *ds)
{
    stk_lmdb_impl *m = ds->impl;
    if (m->guard)
        stk_map_guard_remove(m->guard);
    if (m->txn)
        mdb_txn_abort(m->txn);
    if (m->env)
        mdb_env_close(m->env);
    free(m->recs);
    free(m->labels);
    free(m->path);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_lmdb_vt = {
    .format = "lmdb",
    .read = stk_lmdb_read,
    .close = stk_lmdb_close,
    .sample_name = stk_lmdb_sample_name,
    .read_check = stk_lmdb_read_check,
    .access_hint = stk_lmdb_access_hint,
};

/* --- value=encoded labels ------------------------------------------------ */

typedef struct lmdb_cls {
    const uint8_t *stem;
    size_t len;
    int64_t label;
} lmdb_cls;

static int lmdb_cls_cmp(const void *a, const void *b)
{
    const lmdb_cls *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->stem, y->stem, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int lmdb_is_cls(const uint8_t *k, size_t n)
{
    return n >= 4 && memcmp(k + n - 4, ".cls", 4) == 0;
}

static size_t lmdb_stem_len(const uint8_t *k, size_t n)
{
    for (size_t i = n; i > 0; i--)
        if (k[i - 1] == '.')
            return i - 1;
        else if (k[i - 1] == '/')
            break;
    return n;
}

/* The ASCII decimal label of a .cls value (surrounding white space allowed). */
static int lmdb_parse_cls(const char *path, const MDB_val *k, const MDB_val *v, int64_t *out)
{
    const char *p = v->mv_data, *e = p + v->mv_size;
    int neg = 0, digits = 0;
    uint64_t x = 0;
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    if (p < e && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    while (p < e && *p >= '0' && *p <= '9' && x < (1ull << 62)) {
        x = x * 10 + (uint64_t)(*p++ - '0');
        digits++;
    }
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    if (!digits || p != e || x >= (1ull << 62)) {
        char key[128];
        lmdb_key_text(k->mv_data, k->mv_size, key, sizeof key);
        return stk_fail(STK_EFORMAT,
                        "%s: key '%s': a .cls value must be a decimal integer label, it holds %zu "
                        "bytes that are not",
                        path, key, v->mv_size);
    }
    *out = neg ? -(int64_t)x : (int64_t)x;
    return 0;
}

/* Where liblmdb mapped data.mdb. The API does not say (me_mapaddr is
 * only set for MDB_FIXEDMAP environments), so it is derived from the
 * on-disk page format (lmdb.h's MDB_page, stable since LMDB 0.9): every
 * page starts with its own page number (a size_t), and page 0 holds the
 * meta page, whose first word after the page header is MDB_MAGIC
 * 0xBEEFC0DE. The page holding the first key is found by rounding its
 * address down to the page size, and base = page - pgno * psize; it is
 * used only if page 0 there holds the magic and every key and value the
 * walk recorded lies inside [base, base + map_used). Otherwise (a page
 * size other than the OS's, an unexpected layout) the map goes unguarded:
 * NULL. */
static const uint8_t *lmdb_find_map(const stk_lmdb_impl *m, uint64_t n, uint64_t psize,
                                    uint64_t last_pgno)
{
    long os = sysconf(_SC_PAGESIZE);
    size_t pgno;
    if (n == 0 || os <= 0 || psize != (uint64_t)os)
        return NULL;
    uintptr_t page = (uintptr_t)m->recs[0].key & ~(uintptr_t)(psize - 1);
    memcpy(&pgno, (const void *)page, sizeof pgno);
    if (pgno == 0 || pgno > last_pgno || pgno * psize > page)
        return NULL;
    uintptr_t base = page - pgno * psize;
    uint32_t magic;
    memcpy(&magic, (const void *)(base + sizeof(size_t) + 8), sizeof magic);
    if (magic != 0xBEEFC0DEu)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        uintptr_t k = (uintptr_t)m->recs[i].key, v = (uintptr_t)m->recs[i].val;
        if (k < base || k - base + m->recs[i].key_size > m->map_used || v < base ||
            v - base + m->recs[i].val_size > m->map_used)
            return NULL;
    }
    return (const uint8_t *)base;
}

/* --- open --------------------------------------------------------------- */

static int lmdb_fail(int code, const char *path, const char *what, int rc)
{
    return stk_fail(code, "%s: %s: %s", path, what, mdb_strerror(rc));
}

/* liblmdb's return code from opening `path` as a stoker code. */
static int lmdb_open_code(int rc)
{
    if (rc == ENOENT)
        return STK_ENOENT;
    if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_VERSION_MISMATCH ||
        rc == MDB_PAGE_NOTFOUND || rc == MDB_BAD_TXN)
        return STK_EFORMAT;
    if (rc == ENOMEM)
        return STK_ENOMEM;
    return STK_EIO;
}

static const char *const lmdb_values[] = {"datum", "encoded", NULL};
static const char *const lmdb_colors[] = {"bgr", "rgb", NULL};

static int stk_lmdb_open(const char *uri, const char *path, const char *query,
                         const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_query_key keys[] = {{"value", lmdb_values, -1}, {"color", lmdb_colors, -1}};
    stk_dataset *ds = NULL;
    stk_lmdb_impl *m;
    MDB_cursor *cur = NULL;
    MDB_dbi dbi;
    MDB_stat st;
    MDB_envinfo info;
    MDB_val k, v;
    lmdb_cls *cls = NULL;
    size_t ncls = 0, capcls = 0;
    uint64_t n = 0;
    unsigned flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD;
    uint64_t psize = 0, last_pgno = 0;
    int rc;

    if ((rc = stk_query_parse(uri, "lmdb", query, keys, 2)) < 0)
        return rc;
    if (stk_path_is_dir(path)) {
        char *data = stk_path_join(path, "data.mdb");
        if (!data)
            return STK_ENOMEM;
        int ok = stk_path_is_file(data);
        free(data);
        if (!ok)
            return stk_fail(STK_EFORMAT,
                            "lmdb: %s: not an LMDB environment (the directory holds no data.mdb)",
                            path);
    } else if (stk_path_is_file(path)) {
        flags |= MDB_NOSUBDIR;
    } else {
        return stk_fail(STK_ENOENT, "lmdb: %s: no such LMDB environment directory", path);
    }

    if (!(ds = stk_dataset_alloc(&stk_lmdb_vt, uri)))
        return STK_ENOMEM;
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = m;
    m->value = keys[0].value < 0 ? LMDB_VALUE_DATUM : keys[0].value;
    m->rgb = keys[1].value == 1;
    m->max_pixels = o.max_pixels;
    if (keys[1].value >= 0 && m->value != LMDB_VALUE_DATUM) {
        rc = stk_fail(STK_EINVAL, "lmdb: URI '%s': color= applies to raw Datums (value=datum)",
                      uri);
        goto fail;
    }
    if (!(m->path = stk_strdup(path))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if ((rc = mdb_env_create(&m->env)) != 0) {
        rc = lmdb_fail(STK_ENOMEM, path, "creating an LMDB environment handle", rc);
        goto fail;
    }
    if ((rc = mdb_env_open(m->env, path, flags, 0444)) != 0) {
        rc = stk_fail(lmdb_open_code(rc), "%s: not a readable LMDB environment: %s", path,
                      mdb_strerror(rc));
        goto fail;
    }
    if ((rc = mdb_env_info(m->env, &info)) != 0 || (rc = mdb_env_stat(m->env, &st)) != 0) {
        rc = lmdb_fail(STK_EIO, path, "reading the environment's info", rc);
        goto fail;
    }
    m->map_used = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    if (m->map_used > info.me_mapsize)
        m->map_used = info.me_mapsize;
    psize = st.ms_psize;
    last_pgno = info.me_last_pgno;
    if ((rc = mdb_txn_begin(m->env, NULL, MDB_RDONLY, &m->txn)) != 0) {
        m->txn = NULL;
        rc = stk_fail(lmdb_open_code(rc), "%s: beginning a read transaction: %s", path,
                      mdb_strerror(rc));
        goto fail;
    }
    if ((rc = mdb_dbi_open(m->txn, NULL, 0, &dbi)) != 0 ||
        (rc = mdb_stat(m->txn, dbi, &st)) != 0) {
        rc = stk_fail(lmdb_open_code(rc), "%s: opening the main database: %s", path,
                      mdb_strerror(rc));
        goto fail;
    }
    if (st.ms_entries == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: the LMDB environment holds no records", path);
        goto fail;
    }
    if (st.ms_entries > o.max_samples) {
        rc = stk_fail(STK_ELIMIT, "%s: %llu records pass the max_samples limit of %llu", path,
                      (unsigned long long)st.ms_entries, (unsigned long long)o.max_samples);
        goto fail;
    }
    if (st.ms_entries > SIZE_MAX / sizeof *m->recs ||
        !(m->recs = malloc((size_t)st.ms_entries * sizeof *m->recs))) {
        rc = stk_fail(STK_ENOMEM, "%s: out of memory for a table of %llu records", path,
                      (unsigned long long)st.ms_entries);
        goto fail;
    }
    if ((rc = mdb_cursor_open(m->txn, dbi, &cur)) != 0) {
        rc = lmdb_fail(STK_EIO, path, "opening a cursor", rc);
        goto fail;
    }
    for (int op = MDB_FIRST;; op = MDB_NEXT) {
        rc = mdb_cursor_get(cur, &k, &v, op);
        if (rc == MDB_NOTFOUND)
            break;
        if (rc != 0) {
            rc = stk_fail(lmdb_open_code(rc), "%s: walking the keys (after record %llu): %s",
                          path, (unsigned long long)n, mdb_strerror(rc));
            goto fail;
        }
        if (m->value == LMDB_VALUE_ENCODED && lmdb_is_cls(k.mv_data, k.mv_size)) {
            if (ncls == capcls) {
                size_t cap = capcls ? capcls * 2 : 256;
                lmdb_cls *g = realloc(cls, cap * sizeof *g);
                if (!g) {
                    rc = stk_fail(STK_ENOMEM, "%s: out of memory for the labels", path);
                    goto fail;
                }
                cls = g;
                capcls = cap;
            }
            lmdb_cls *c = &cls[ncls];
            c->stem = k.mv_data;
            c->len = k.mv_size - 4;
            if ((rc = lmdb_parse_cls(path, &k, &v, &c->label)) < 0)
                goto fail;
            ncls++;
            continue;
        }
        if (n == st.ms_entries) {
            rc = stk_fail(STK_EFORMAT, "%s: the main database holds more records than its %llu "
                                       "entries (a corrupt B-tree)",
                          path, (unsigned long long)st.ms_entries);
            goto fail;
        }
        if (v.mv_size > UINT32_MAX) {
            char key[128];
            lmdb_key_text(k.mv_data, k.mv_size, key, sizeof key);
            rc = stk_fail(STK_ELIMIT, "%s: key '%s' (record %llu): a value of 4 GiB or more",
                          path, key, (unsigned long long)n);
            goto fail;
        }
        m->recs[n++] = (lmdb_rec){.key = k.mv_data, .val = v.mv_data,
                                  .val_size = (uint32_t)v.mv_size,
                                  .key_size = (uint32_t)k.mv_size};
    }
    mdb_cursor_close(cur);
    cur = NULL;
    if (n == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: the LMDB environment holds no images (%zu .cls label "
                                   "keys and nothing else)",
                      path, ncls);
        goto fail;
    }
    ds->count = n;
    if (m->value == LMDB_VALUE_DATUM) {
        /* Raw Datums: one shape for the whole set when every raw Datum that
         * parses has the same dims and none is encoded (a Caffe set written
         * with --resize_height/--resize_width), so that consumers (pack)
         * see a fixed-shape raw set. Reads only the fields before and after
         * each value's data: one page per value, for raw sets only. */
        int64_t first[3], d[3];
        int kind = lmdb_datum_dims(m->recs[0].val, m->recs[0].val_size, first);
        for (uint64_t i = 1; kind == 1 && i < n; i++) {
            int dk = lmdb_datum_dims(m->recs[i].val, m->recs[i].val_size, d);
            if (dk == 0 || (dk == 1 && memcmp(d, first, sizeof d) != 0))
                kind = 0;
        }
        if (kind == 1 && (first[0] == 1 || first[0] == 3) && first[1] > 0 && first[2] > 0 &&
            (uint64_t)first[1] * (uint64_t)first[2] <= m->max_pixels) {
            ds->channels = (uint32_t)first[0];
            ds->height = (uint32_t)first[1];
            ds->width = (uint32_t)first[2];
        }
    }
    if (m->value == LMDB_VALUE_ENCODED) {
        int64_t maxl = -1;
        int all = 1;
        if (!(m->labels = malloc((size_t)n * sizeof *m->labels))) {
            rc = stk_fail(STK_ENOMEM, "%s: out of memory for the labels", path);
            goto fail;
        }
        if (ncls)
            qsort(cls, ncls, sizeof *cls, lmdb_cls_cmp);
        for (uint64_t i = 0; i < n; i++) {
            lmdb_cls want = {m->recs[i].key, lmdb_stem_len(m->recs[i].key, m->recs[i].key_size),
                             -1};
            const lmdb_cls *hit =
                ncls ? bsearch(&want, cls, ncls, sizeof *cls, lmdb_cls_cmp) : NULL;
            m->labels[i] = hit ? hit->label : -1;
            if (m->labels[i] < 0)
                all = 0;
            else if (m->labels[i] > maxl)
                maxl = m->labels[i];
        }
        ds->num_classes = all && maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
    }
    /* The map under the SIGBUS guard (see lmdb_find_map). */
    if ((m->map = lmdb_find_map(m, n, psize, last_pgno)) != NULL) {
        mdb_filehandle_t fd;
        if (mdb_env_get_fd(m->env, &fd) == 0 &&
            (rc = stk_map_guard_add(m->map, (size_t)m->map_used, fd, &m->guard)) < 0)
            goto fail;
    }
    if (m->guard && !stk_map_guard_intact(m->guard, 0, m->map_used)) {
        rc = stk_fail(STK_EIO, "%s: data.mdb was truncated while being opened", path);
        goto fail;
    }
    free(cls);
    *out = ds;
    return 0;

fail:
    if (cur)
        mdb_cursor_close(cur);
    free(cls);
    stk_dataset_close(ds);
    return rc;
}

/* A directory holding data.mdb. */
static int stk_lmdb_detect(const char *path)
{
    if (!stk_path_is_dir(path))
        return 0;
    char *data = stk_path_join(path, "data.mdb");
    if (!data)
        return STK_ENOMEM;
    int r = stk_path_is_file(data);
    free(data);
    return r;
}

const stk_reader stk_reader_lmdb = {
    "lmdb", "lmdb:DIR[?value=datum|encoded&color=bgr|rgb]",
    "LMDB environment: Caffe Datums (encoded or raw CHW pixels + label), or encoded images "
    "with KEY.cls labels",
    stk_lmdb_open, NULL, stk_lmdb_detect, "data.mdb (LMDB)", NULL};
