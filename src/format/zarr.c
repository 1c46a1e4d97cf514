/*
 * zarr.c — Zarr v2 arrays: uint8 images (N,H,W[,C]) and integer labels (N,).
 *
 * URI: "zarr:DIR[?images=ARR&labels=ARR]" (defaults: images, labels). DIR
 * is a Zarr v2 group in the DirectoryStore layout: DIR/ARR/.zarray (JSON)
 * and one file per chunk beside it, named by the chunk's grid position
 * joined by '.' ("3.0.0.0") or, with "dimension_separator": "/", by '/'
 * ("3/0/0/0"). A bare directory holding .zgroup and images/.zarray is
 * detected; so is one holding zarr.json (Zarr v3), which is refused with a
 * message (no v3 writer is at hand to test a v3 reader against; see
 * docs/datasets.md).
 *
 * What is read. Images: dtype uint8 ("|u1", any byte-order mark), order
 * "C", filters null (or []), compressor null, zstd, blosc (any inner codec
 * and shuffle: the blosc header describes itself) or zlib, chunked along N
 * only: chunks (n, H, W[, C]) with the other axes whole. Chunking along H,
 * W or C is refused (rechunk with chunks=(n, H, W, C)): every sample then
 * lies in one chunk, and a sample is a contiguous run of the decoded chunk.
 * Labels: a 1-D integer array ([<>|][iu][1248]) of the images' N, any chunk
 * size and the same codecs, read whole at open into an int64 table.
 *
 * The .zarray parser is a small strict JSON parser (RFC 8259 grammar; no
 * NaN, no comments, no trailing commas, duplicate keys refused, depth and
 * node count bounded) building a flat node array; the reader then asks for
 * the keys it knows. zarr_format must be 2; shape, chunks, dtype,
 * compressor, fill_value, order and filters are required (the v2 spec says
 * so); other keys are ignored, as the spec asks.
 *
 * Missing chunks. A chunk file that does not exist reads as fill_value,
 * as zarr does (zarr-python leaves out chunks that are all fill_value when
 * write_empty_chunks=False): its samples are the fill value at every pixel,
 * served from one sample-sized buffer the dataset owns. With fill_value
 * null a missing image chunk is STK_EDATA (zarr itself would return
 * uninitialised memory) and a missing labels chunk fails the open. The
 * spec's reading is kept, but a chunk lost in a copy reads the same as one
 * left out on purpose (black images with fill_value 0), so the dataset
 * says how many are missing: metadata key "missing_chunks" (NULL when
 * none) counts them, naming the first few keys, by one stat per chunk the
 * first time it is asked (stk_verify prints it as a warning).
 *
 * Chunk cache (per thread, in the caller's scratch). The vtable contract
 * keeps per-thread state in the caller's stk_scratch. A compressed chunk
 * is decoded whole into the scratch behind a 32-byte header {magic,
 * generation, chunk, valid}; the next read with the same scratch whose
 * sample lies in that chunk finds the header matching and returns a view
 * into the decoded chunk without touching the file. `generation` is a
 * process-wide counter taken at each open, so a scratch that served
 * another zarr dataset (or this one's predecessor at the same address)
 * never serves its bytes here. The header is zeroed before the chunk is
 * (re)loaded and set valid only once the chunk decoded whole, so a failed
 * decode leaves nothing cached; stk_scratch_reserve may move the buffer,
 * which drops the old contents with the header. Other readers writing the
 * scratch overwrite the header with their own bytes; a false hit would
 * need them to write this magic and this dataset's generation at offset
 * 0.
 *
 * Uncompressed chunks are not decoded, so not cached. With at most
 * ZARR_MAX_MAPS chunks (a mapping each stays within vm.max_map_count's
 * budget) every chunk file is mapped at open, a file of the wrong size or
 * one that will not open excepted, and read is pointer arithmetic into the
 * mapping (read_check reports a file truncated under it). Above that, and
 * for the excepted files, the sample's bytes are pread from the chunk file
 * at their offset (one open, one pread) into the scratch after an emptied
 * cache header.
 *
 * Validation. At open: both .zarray files, the shapes, dtypes, chunk
 * layout, limits (max_samples, max_pixels, a decoded chunk at most
 * ZARR_MAX_CHUNK bytes and max_bytes), N equal in both arrays, every
 * labels chunk. At read (per chunk, STK_EDATA naming the URI, sample,
 * chunk file and reason, so on_error=skip counts each sample of a damaged
 * chunk once): a chunk file of the wrong size (uncompressed), a
 * compressed chunk that does not decode to exactly the chunk's size, a
 * blosc header that disagrees with the file, a file that cannot be read.
 *
 * Files are opened through the I/O layer relative to the array
 * directory's descriptor (stk_file_source_open_at on the stack: no
 * allocation per read); the directories themselves are opened here with
 * O_DIRECTORY. Invariants after open: labels holds count entries; every
 * image chunk holds chunk_n samples of sample_bytes bytes once decoded.
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"

#include <blosc.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define ZARR_MAX_META (1u << 20) /* bytes of a .zarray */
#define ZARR_MAX_NODES 4096u     /* JSON values in a .zarray */
#define ZARR_MAX_DEPTH 16u
#define ZARR_MAX_NDIM 8u
#define ZARR_MAX_CHUNK (1ull << 30) /* decoded bytes of one chunk */
#define ZARR_HDR 32u                /* cache header at the start of the scratch */
#define ZARR_MAGIC 0x315252415a4b5453ull /* "STKZARR1" */
#define ZARR_MAX_MAPS 4096u         /* uncompressed chunk files mapped at open */

/* ------------------------------------------------------------------------ */
/* A small strict JSON parser                                               */
/* ------------------------------------------------------------------------ */

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

/* One value. Objects' children alternate key (J_STR), value. */
typedef struct jnode {
    uint8_t type;
    uint32_t start, len; /* the value's text; strings: inside the quotes */
    int32_t first, next; /* first child, next sibling; -1 = none */
} jnode;

typedef struct jdoc {
    const char *s;  /* lent: the text */
    uint32_t n, i;  /* its length, the cursor */
    jnode *nodes;   /* owned (malloc), ZARR_MAX_NODES */
    uint32_t count;
    const char *err; /* static: why the parse stopped */
} jdoc;

static void j_ws(jdoc *d)
{
    while (d->i < d->n && (d->s[d->i] == ' ' || d->s[d->i] == '\t' || d->s[d->i] == '\n' ||
                           d->s[d->i] == '\r'))
        d->i++;
}

static int j_digit(jdoc *d) { return d->i < d->n && d->s[d->i] >= '0' && d->s[d->i] <= '9'; }

static int j_value(jdoc *d, unsigned depth);

static int j_new(jdoc *d, uint8_t type)
{
    if (d->count == ZARR_MAX_NODES) {
        d->err = "too many values";
        return -1;
    }
    jnode *n = &d->nodes[d->count];
    n->type = type;
    n->start = d->i;
    n->len = 0;
    n->first = n->next = -1;
    return (int)d->count++;
}

static int j_string(jdoc *d)
{
    int id = j_new(d, J_STR);
    if (id < 0)
        return -1;
    d->i++; /* the opening quote */
    d->nodes[id].start = d->i;
    while (d->i < d->n && d->s[d->i] != '"') {
        unsigned char ch = (unsigned char)d->s[d->i];
        if (ch < 0x20) {
            d->err = "control character in a string";
            return -1;
        }
        if (ch == '\\') {
            d->i++;
            if (d->i >= d->n)
                break;
            char e = d->s[d->i];
            if (e == 'u') {
                for (int k = 0; k < 4; k++) {
                    d->i++;
                    char h = d->i < d->n ? d->s[d->i] : 0;
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
                          (h >= 'A' && h <= 'F'))) {
                        d->err = "bad \\u escape";
                        return -1;
                    }
                }
            } else if (!strchr("\"\\/bfnrt", e) || e == 0) {
                d->err = "bad escape in a string";
                return -1;
            }
        }
        d->i++;
    }
    if (d->i >= d->n) {
        d->err = "unterminated string";
        return -1;
    }
    d->nodes[id].len = d->i - d->nodes[id].start;
    d->i++;
    return id;
}

static int j_number(jdoc *d)
{
    int id = j_new(d, J_NUM);
    if (id < 0)
        return -1;
    if (d->s[d->i] == '-')
        d->i++;
    if (!j_digit(d))
        goto bad;
    if (d->s[d->i] == '0')
        d->i++;
    else
        while (j_digit(d))
            d->i++;
    if (d->i < d->n && d->s[d->i] == '.') {
        d->i++;
        if (!j_digit(d))
            goto bad;
        while (j_digit(d))
            d->i++;
    }
    if (d->i < d->n && (d->s[d->i] == 'e' || d->s[d->i] == 'E')) {
        d->i++;
        if (d->i < d->n && (d->s[d->i] == '+' || d->s[d->i] == '-'))
            d->i++;
        if (!j_digit(d))
            goto bad;
        while (j_digit(d))
            d->i++;
    }
    d->nodes[id].len = d->i - d->nodes[id].start;
    return id;
bad:
    d->err = "bad number";
    return -1;
}

static int j_word(jdoc *d, const char *w, uint8_t type)
{
    size_t n = strlen(w);
    if (d->n - d->i < n || memcmp(d->s + d->i, w, n) != 0) {
        d->err = "unexpected character";
        return -1;
    }
    int id = j_new(d, type);
    if (id < 0)
        return -1;
    d->i += (uint32_t)n;
    d->nodes[id].len = (uint32_t)n;
    return id;
}

static int j_same_str(const jdoc *d, int a, int b)
{
    return d->nodes[a].len == d->nodes[b].len &&
           memcmp(d->s + d->nodes[a].start, d->s + d->nodes[b].start, d->nodes[a].len) == 0;
}

/* '[' or '{' at the cursor. */
static int j_container(jdoc *d, unsigned depth, int obj)
{
    int id = j_new(d, obj ? J_OBJ : J_ARR), last = -1;
    if (id < 0)
        return -1;
    d->i++;
    j_ws(d);
    if (d->i < d->n && d->s[d->i] == (obj ? '}' : ']')) {
        d->i++;
        return id;
    }
    for (;;) {
        int child;
        j_ws(d);
        if (obj) {
            if (d->i >= d->n || d->s[d->i] != '"') {
                d->err = "a quoted key expected";
                return -1;
            }
            if ((child = j_string(d)) < 0)
                return -1;
            for (int k = d->nodes[id].first; k >= 0; k = d->nodes[d->nodes[k].next].next)
                if (j_same_str(d, k, child)) {
                    d->err = "duplicate key";
                    return -1;
                }
            if (last < 0)
                d->nodes[id].first = child;
            else
                d->nodes[last].next = child;
            last = child;
            j_ws(d);
            if (d->i >= d->n || d->s[d->i] != ':') {
                d->err = "':' expected";
                return -1;
            }
            d->i++;
        }
        if ((child = j_value(d, depth + 1)) < 0)
            return -1;
        if (last < 0)
            d->nodes[id].first = child;
        else
            d->nodes[last].next = child;
        last = child;
        j_ws(d);
        if (d->i < d->n && d->s[d->i] == ',') {
            d->i++;
            continue;
        }
        if (d->i < d->n && d->s[d->i] == (obj ? '}' : ']')) {
            d->i++;
            d->nodes[id].len = d->i - d->nodes[id].start;
            return id;
        }
        d->err = obj ? "',' or '}' expected" : "',' or ']' expected";
        return -1;
    }
}

static int j_value(jdoc *d, unsigned depth)
{
    if (depth > ZARR_MAX_DEPTH) {
        d->err = "nested too deeply";
        return -1;
    }
    j_ws(d);
    if (d->i >= d->n) {
        d->err = "unexpected end";
        return -1;
    }
    switch (d->s[d->i]) {
    case '{': return j_container(d, depth, 1);
    case '[': return j_container(d, depth, 0);
    case '"': return j_string(d);
    case 't': return j_word(d, "true", J_TRUE);
    case 'f': return j_word(d, "false", J_FALSE);
    case 'n': return j_word(d, "null", J_NULL);
    default:
        if (d->s[d->i] == '-' || j_digit(d))
            return j_number(d);
        d->err = "unexpected character";
        return -1;
    }
}

/* Parse text[0..n) as one JSON value; its root is node 0. */
static int j_parse(jdoc *d, const char *text, uint32_t n)
{
    memset(d, 0, sizeof *d);
    d->s = text;
    d->n = n;
    if (!(d->nodes = malloc(ZARR_MAX_NODES * sizeof *d->nodes)))
        return STK_ENOMEM;
    if (j_value(d, 0) < 0)
        return STK_EFORMAT;
    j_ws(d);
    if (d->i != d->n) {
        d->err = "text after the value";
        return STK_EFORMAT;
    }
    return 0;
}

/* The value of `key` in object `obj`, or -1. */
static int j_get(const jdoc *d, int obj, const char *key)
{
    size_t kl = strlen(key);
    if (d->nodes[obj].type != J_OBJ)
        return -1;
    for (int k = d->nodes[obj].first; k >= 0; k = d->nodes[d->nodes[k].next].next)
        if (d->nodes[k].len == kl && memcmp(d->s + d->nodes[k].start, key, kl) == 0)
            return d->nodes[k].next;
    return -1;
}

static int j_streq(const jdoc *d, int v, const char *s)
{
    return v >= 0 && d->nodes[v].type == J_STR && d->nodes[v].len == strlen(s) &&
           memcmp(d->s + d->nodes[v].start, s, d->nodes[v].len) == 0;
}

/* An integer literal (no fraction or exponent) within +-2^62. */
static int j_int(const jdoc *d, int v, int64_t *out)
{
    if (v < 0 || d->nodes[v].type != J_NUM)
        return 0;
    const char *p = d->s + d->nodes[v].start, *e = p + d->nodes[v].len;
    int neg = *p == '-';
    int64_t x = 0;
    for (p += neg; p < e; p++) {
        if (*p < '0' || *p > '9' || x > (INT64_C(1) << 58))
            return 0;
        x = x * 10 + (*p - '0');
    }
    *out = neg ? -x : x;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Arrays                                                                   */
/* ------------------------------------------------------------------------ */

enum { ZARR_NONE, ZARR_ZSTD, ZARR_BLOSC, ZARR_ZLIB };
static const char *const zarr_codec_names[] = {"none", "zstd", "blosc", "zlib"};

typedef struct zarr_array {
    char *path;  /* owned: DIR/ARR, for messages */
    int dirfd;   /* owned: the array directory (O_DIRECTORY), -1 when closed */
    uint32_t ndim;
    uint64_t shape[ZARR_MAX_NDIM], chunks[ZARR_MAX_NDIM];
    char dtype[8];      /* as written, e.g. "|u1" */
    char kind;          /* 'u' or 'i' */
    uint32_t itemsize;  /* 1, 2, 4 or 8 */
    int big_endian;
    int codec;          /* ZARR_NONE ... */
    int has_fill;       /* fill_value is a number (0: null) */
    int64_t fill;
    char sep;           /* '.' or '/' */
    uint64_t nchunks;   /* along axis 0 */
    size_t chunk_bytes; /* decoded bytes of one chunk */
} zarr_array;

typedef struct stk_zarr_impl {
    zarr_array images, labels_arr; /* owned */
    int64_t *labels;      /* owned (malloc), count entries */
    uint8_t *fill_sample; /* owned (malloc): one sample of fill_value, or NULL */
    size_t sample_bytes;
    uint64_t chunk_n;     /* samples per image chunk */
    uint64_t generation;  /* this open's id in scratch cache headers */
    /* Uncompressed images with at most ZARR_MAX_MAPS chunks: each chunk
     * file mapped at open (owned; read-only after open), or NULL. */
    stk_mapped_file *maps;
    uint8_t *map_state;   /* owned: ZARR_MAPPED, ZARR_MISSING or ZARR_PREAD per chunk */
    /* metadata "missing_chunks": made on first ask, under missing_mu */
    pthread_mutex_t missing_mu;
    int missing_done;
    char *missing_text;   /* owned (malloc), NULL when no chunk is missing */
} stk_zarr_impl;

/* map_state: served from the mapping; missing at open (fill_value); or
 * neither (a file of the wrong size, one that would not open or map): read
 * goes the pread way, which words the error (or reads the file if it was
 * repaired since). */
enum { ZARR_MAPPED = 0, ZARR_MISSING = 1, ZARR_PREAD = 2 };

typedef struct zarr_cache_hdr {
    uint64_t magic, generation, chunk, valid;
} zarr_cache_hdr;

static _Atomic uint64_t zarr_generations = 1;

/* "3.0.0.0" (or with '/') into buf. */
static void zarr_chunk_key(const zarr_array *a, uint64_t c, char *buf, size_t n)
{
    int w = snprintf(buf, n, "%llu", (unsigned long long)c);
    for (uint32_t k = 1; k < a->ndim && w > 0 && (size_t)w + 2 < n; k++) {
        buf[w++] = a->sep;
        buf[w++] = '0';
        buf[w] = '\0';
    }
}

static void zarr_array_close(zarr_array *a)
{
    if (a->dirfd >= 0)
        close(a->dirfd);
    a->dirfd = -1;
    free(a->path);
    a->path = NULL;
}

/* Parse a .zarray's text into *a (path set). */
static int zarr_parse_meta(zarr_array *a, const char *text, uint32_t len)
{
    jdoc d;
    int rc = j_parse(&d, text, len), v;
    int64_t x;
    if (rc == STK_ENOMEM) {
        rc = stk_fail(STK_ENOMEM, "out of memory parsing %s/.zarray", a->path);
        goto out;
    }
    if (rc < 0) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: malformed JSON at byte %u: %s", a->path, d.i,
                      d.err);
        goto out;
    }
    if (d.nodes[0].type != J_OBJ) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: not a JSON object", a->path);
        goto out;
    }
    static const char *const required[] = {"zarr_format", "shape", "chunks", "dtype",
                                            "compressor", "fill_value", "order", "filters"};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++)
        if (j_get(&d, 0, required[i]) < 0) {
            rc = stk_fail(STK_EFORMAT, "%s/.zarray lacks '%s'", a->path, required[i]);
            goto out;
        }
    if (!j_int(&d, j_get(&d, 0, "zarr_format"), &x) || x != 2) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: zarr_format is not 2 (Zarr v2 is read)",
                      a->path);
        goto out;
    }
    /* shape and chunks: arrays of nonnegative / positive integers, same rank */
    int sh = j_get(&d, 0, "shape"), ch = j_get(&d, 0, "chunks");
    if (d.nodes[sh].type != J_ARR || d.nodes[ch].type != J_ARR) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: shape and chunks must be arrays of integers",
                      a->path);
        goto out;
    }
    a->ndim = 0;
    for (int s = d.nodes[sh].first, c = d.nodes[ch].first;; s = d.nodes[s].next,
             c = d.nodes[c].next) {
        if (s < 0 && c < 0)
            break;
        int64_t sv, cv;
        if (s < 0 || c < 0) {
            rc = stk_fail(STK_EFORMAT, "%s/.zarray: shape and chunks differ in length", a->path);
            goto out;
        }
        if (a->ndim == ZARR_MAX_NDIM) {
            rc = stk_fail(STK_EFORMAT, "%s/.zarray: more than %u dimensions", a->path,
                          ZARR_MAX_NDIM);
            goto out;
        }
        if (!j_int(&d, s, &sv) || !j_int(&d, c, &cv) || sv < 0 || cv < 1 ||
            sv >= (INT64_C(1) << 40) || cv >= (INT64_C(1) << 40)) {
            rc = stk_fail(STK_EFORMAT, "%s/.zarray: shape/chunks item %u is not an integer in "
                                       "range (shape >= 0, chunks >= 1)", a->path, a->ndim);
            goto out;
        }
        a->shape[a->ndim] = (uint64_t)sv;
        a->chunks[a->ndim++] = (uint64_t)cv;
    }
    /* dtype: [<>|][iu][1248] */
    v = j_get(&d, 0, "dtype");
    const char *dt = d.s + d.nodes[v].start;
    if (d.nodes[v].type != J_STR || d.nodes[v].len != 3 || !strchr("<>|", dt[0]) ||
        (dt[1] != 'u' && dt[1] != 'i') || !strchr("1248", dt[2]) || dt[2] == 0 ||
        (dt[0] == '|' && dt[2] != '1')) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: dtype '%.*s' (an integer dtype such as "
                                        "'|u1' or '<i8' expected)", a->path,
                      (int)(d.nodes[v].len > 40 ? 40 : d.nodes[v].len), d.s + d.nodes[v].start);
        goto out;
    }
    memcpy(a->dtype, dt, 3);
    a->dtype[3] = '\0';
    a->kind = dt[1];
    a->itemsize = (uint32_t)(dt[2] - '0');
    a->big_endian = dt[0] == '>';
    /* order */
    v = j_get(&d, 0, "order");
    if (!j_streq(&d, v, "C")) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: order is not \"C\" (only C order is read; "
                                        "write with order='C')", a->path);
        goto out;
    }
    /* filters: null or [] */
    v = j_get(&d, 0, "filters");
    if (!(d.nodes[v].type == J_NULL || (d.nodes[v].type == J_ARR && d.nodes[v].first < 0))) {
        int f = d.nodes[v].type == J_ARR ? j_get(&d, d.nodes[v].first, "id") : -1;
        rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: filters %s%.*s%s are not supported (only "
                                        "filters=None)", a->path, f >= 0 ? "['" : "",
                      f >= 0 ? (int)(d.nodes[f].len > 40 ? 40 : d.nodes[f].len) : 0,
                      f >= 0 ? d.s + d.nodes[f].start : "", f >= 0 ? "', ...]" : "");
        goto out;
    }
    /* compressor: null or {"id": ...} */
    v = j_get(&d, 0, "compressor");
    if (d.nodes[v].type == J_NULL) {
        a->codec = ZARR_NONE;
    } else {
        int id = j_get(&d, v, "id");
        if (id < 0 || d.nodes[id].type != J_STR) {
            rc = stk_fail(STK_EFORMAT, "%s/.zarray: compressor is neither null nor an object "
                                       "with an \"id\"", a->path);
            goto out;
        }
        if (j_streq(&d, id, "zstd"))
            a->codec = ZARR_ZSTD;
        else if (j_streq(&d, id, "blosc"))
            a->codec = ZARR_BLOSC;
        else if (j_streq(&d, id, "zlib"))
            a->codec = ZARR_ZLIB;
        else {
            rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: compressor '%.*s' is not supported "
                                            "(none, zstd, blosc and zlib are read)", a->path,
                          (int)(d.nodes[id].len > 40 ? 40 : d.nodes[id].len),
                          d.s + d.nodes[id].start);
            goto out;
        }
    }
    /* fill_value: null or an integer */
    v = j_get(&d, 0, "fill_value");
    if (d.nodes[v].type == J_NULL) {
        a->has_fill = 0;
    } else if (j_int(&d, v, &a->fill)) {
        a->has_fill = 1;
    } else {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: fill_value is neither null nor an integer",
                      a->path);
        goto out;
    }
    /* dimension_separator: "." (default) or "/" */
    v = j_get(&d, 0, "dimension_separator");
    if (v < 0 || j_streq(&d, v, "."))
        a->sep = '.';
    else if (j_streq(&d, v, "/"))
        a->sep = '/';
    else {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: dimension_separator is neither \".\" nor \"/\"",
                      a->path);
        goto out;
    }
    rc = 0;
out:
    free(d.nodes);
    return rc;
}

/* Open DIR/NAME as an array: its directory and .zarray. */
static int zarr_array_open(const char *dir, int group_fd, const char *name, zarr_array *a)
{
    stk_file_source fs;
    char *text = NULL;
    int rc;
    a->dirfd = -1;
    if (!(a->path = stk_path_join(dir, name)))
        return STK_ENOMEM;
    a->dirfd = openat(group_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (a->dirfd < 0)
        return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO,
                        "%s: cannot open the array directory: %s", a->path, strerror(errno));
    if ((rc = stk_file_source_open_at(&fs, a->dirfd, ".zarray", NULL)) < 0) {
        stk_source_close(&fs.base);
        return stk_fail_prefix(rc, "%s/.zarray", a->path);
    }
    if (fs.base.size > ZARR_MAX_META || fs.base.size == 0) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: %llu bytes (1 to %u expected)", a->path,
                      (unsigned long long)fs.base.size, ZARR_MAX_META);
        goto out;
    }
    if (!(text = malloc((size_t)fs.base.size))) {
        rc = stk_fail(STK_ENOMEM, "out of memory reading %s/.zarray", a->path);
        goto out;
    }
    if ((rc = stk_source_pread(&fs.base, text, (size_t)fs.base.size, 0)) < 0) {
        stk_fail_prefix(rc, "%s", a->path);
        goto out;
    }
    rc = zarr_parse_meta(a, text, (uint32_t)fs.base.size);
out:
    free(text);
    stk_source_close(&fs.base);
    return rc;
}

/*
 * Load chunk `c` of `a`, decoded, into sc->data[off, off + chunk_bytes)
 * (compressed bytes go after it). Zeroes sc->data[0, off) once the scratch
 * is reserved (the cache header: nothing stays valid while a load is under
 * way). *missing = 1 (and 0 returned) when the chunk file does not exist.
 * Errors: STK_EDATA "PATH/KEY: reason", STK_ENOMEM.
 */
static int zarr_chunk_load(const zarr_array *a, uint64_t c, stk_scratch *sc, size_t off,
                           int *missing)
{
    char key[96], name[1200];
    stk_file_source fs;
    size_t cb = a->chunk_bytes;
    int rc;
    *missing = 0;
    zarr_chunk_key(a, c, key, sizeof key);
    snprintf(name, sizeof name, "%s/%s", a->path, key);
    rc = stk_file_source_open_at(&fs, a->dirfd, key, name);
    if (rc == STK_ENOENT) {
        stk_source_close(&fs.base);
        *missing = 1;
        return 0;
    }
    if (rc < 0) {
        stk_source_close(&fs.base);
        return stk_fail_prefix(rc == STK_ENOMEM ? rc : STK_EDATA, "%s", name);
    }
    uint64_t s = fs.base.size;
    if (a->codec == ZARR_NONE ? s != cb : s > cb + cb / 16 + 65536 || s == 0) {
        rc = stk_fail(STK_EDATA, "%s: chunk file of %llu bytes; a %s chunk of %zu decoded bytes "
                                 "%s", name, (unsigned long long)s,
                      zarr_codec_names[a->codec], cb,
                      a->codec == ZARR_NONE ? "is stored as exactly that many" :
                                              "cannot be that size");
        goto out;
    }
    if ((rc = stk_scratch_reserve(sc, off + cb + (a->codec == ZARR_NONE ? 0 : (size_t)s))) < 0)
        goto out;
    memset(sc->data, 0, off);
    uint8_t *dst = sc->data + off, *src = a->codec == ZARR_NONE ? dst : dst + cb;
    if ((rc = stk_source_pread(&fs.base, src, (size_t)s, 0)) < 0) {
        rc = STK_EDATA;
        goto out;
    }
    switch (a->codec) {
    case ZARR_ZSTD: {
        unsigned long long cs = ZSTD_getFrameContentSize(src, (size_t)s);
        if (cs == ZSTD_CONTENTSIZE_ERROR) {
            rc = stk_fail(STK_EDATA, "%s: not a zstd frame", name);
            goto out;
        }
        if (cs != ZSTD_CONTENTSIZE_UNKNOWN && cs != cb) {
            rc = stk_fail(STK_EDATA, "%s: decompresses to %llu bytes, the chunk has %zu", name,
                          cs, cb);
            goto out;
        }
        size_t got = ZSTD_decompress(dst, cb, src, (size_t)s);
        if (ZSTD_isError(got) || got != cb) {
            rc = stk_fail(STK_EDATA, "%s: corrupt zstd data (%s)", name,
                          ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
            goto out;
        }
        break;
    }
    case ZARR_BLOSC: {
        size_t nbytes = 0, cbytes = 0, bsize = 0;
        if (blosc_cbuffer_validate(src, (size_t)s, &nbytes) < 0) {
            rc = stk_fail(STK_EDATA, "%s: corrupt blosc header", name);
            goto out;
        }
        blosc_cbuffer_sizes(src, &nbytes, &cbytes, &bsize);
        if (nbytes != cb || cbytes != s) {
            rc = stk_fail(STK_EDATA, "%s: blosc header says %zu bytes decoded from %zu, the chunk "
                                     "has %zu decoded and the file %llu", name, nbytes, cbytes,
                          cb, (unsigned long long)s);
            goto out;
        }
        if (blosc_decompress_ctx(src, dst, cb, 1) != (int)cb) {
            rc = stk_fail(STK_EDATA, "%s: corrupt blosc data", name);
            goto out;
        }
        break;
    }
    case ZARR_ZLIB: {
        uLongf dl = (uLongf)cb;
        uLong sl = (uLong)s;
        int z = uncompress2(dst, &dl, src, &sl);
        if (z != Z_OK || dl != cb || sl != s) {
            rc = stk_fail(STK_EDATA, "%s: corrupt zlib data (%s)", name,
                          z != Z_OK ? (z == Z_BUF_ERROR ? "truncated, or longer than the chunk"
                                                        : "bad stream")
                                    : dl != cb ? "shorter than the chunk" : "trailing bytes");
            goto out;
        }
        break;
    }
    default:
        break;
    }
    rc = 0;
out:
    stk_source_close(&fs.base);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

static void stk_zarr_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const stk_zarr_impl *m = ds->impl;
    char key[96];
    zarr_chunk_key(&m->images, index / m->chunk_n, key, sizeof key);
    snprintf(buf, size, "%s: sample %llu (chunk file %s/%s, item %llu)", ds->uri,
             (unsigned long long)index, m->images.path, key,
             (unsigned long long)(index % m->chunk_n));
}

static int zarr_read_fail(const stk_dataset *ds, uint64_t index, int rc)
{
    return stk_fail_prefix(rc, "%s: sample %llu", ds->uri, (unsigned long long)index);
}

static int stk_zarr_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                         stk_scratch *scratch)
{
    const stk_zarr_impl *m = ds->impl;
    const zarr_array *a = &m->images;
    uint64_t c = index / m->chunk_n, k = index % m->chunk_n;
    int missing = 0, rc;
    out->label = m->labels[index];

    if (a->codec == ZARR_NONE && m->maps && m->map_state[c] == ZARR_MAPPED) {
        stk_sample_set_hwc(ds, m->maps[c].data + k * m->sample_bytes, out);
        return 0;
    }
    if (a->codec == ZARR_NONE && m->maps && m->map_state[c] == ZARR_MISSING) {
        missing = 1;
    } else if (a->codec == ZARR_NONE) {
        /* pread the sample alone (after an emptied cache header) */
        char key[96], name[1200];
        stk_file_source fs;
        zarr_chunk_key(a, c, key, sizeof key);
        snprintf(name, sizeof name, "%s/%s", a->path, key);
        rc = stk_file_source_open_at(&fs, a->dirfd, key, name);
        if (rc == STK_ENOENT) {
            stk_source_close(&fs.base);
            missing = 1;
        } else if (rc < 0) {
            stk_source_close(&fs.base);
            return zarr_read_fail(ds, index, stk_fail_prefix(rc == STK_ENOMEM ? rc : STK_EDATA,
                                                             "%s", name));
        } else {
            if (fs.base.size != a->chunk_bytes)
                rc = stk_fail(STK_EDATA, "%s: chunk file of %llu bytes; a none chunk of %zu "
                                         "decoded bytes is stored as exactly that many", name,
                              (unsigned long long)fs.base.size, a->chunk_bytes);
            else if ((rc = stk_scratch_reserve(scratch, ZARR_HDR + m->sample_bytes)) == 0) {
                memset(scratch->data, 0, ZARR_HDR);
                if (stk_source_pread(&fs.base, scratch->data + ZARR_HDR, m->sample_bytes,
                                     k * m->sample_bytes) < 0)
                    rc = STK_EDATA;
            }
            stk_source_close(&fs.base);
            if (rc < 0)
                return zarr_read_fail(ds, index, rc);
            stk_sample_set_hwc(ds, scratch->data + ZARR_HDR, out);
            return 0;
        }
    } else {
        zarr_cache_hdr h;
        if (scratch->cap >= ZARR_HDR + a->chunk_bytes) {
            memcpy(&h, scratch->data, sizeof h);
            if (h.magic == ZARR_MAGIC && h.generation == m->generation && h.chunk == c &&
                h.valid == 1) {
                stk_sample_set_hwc(ds, scratch->data + ZARR_HDR + k * m->sample_bytes, out);
                return 0;
            }
        }
        if ((rc = zarr_chunk_load(a, c, scratch, ZARR_HDR, &missing)) < 0)
            return zarr_read_fail(ds, index, rc);
        if (!missing) {
            h = (zarr_cache_hdr){ZARR_MAGIC, m->generation, c, 1};
            memcpy(scratch->data, &h, sizeof h);
            stk_sample_set_hwc(ds, scratch->data + ZARR_HDR + k * m->sample_bytes, out);
            return 0;
        }
    }
    /* a missing chunk reads as fill_value */
    if (!m->fill_sample) {
        char key[96];
        zarr_chunk_key(a, c, key, sizeof key);
        return zarr_read_fail(ds, index, stk_fail(STK_EDATA, "%s/%s: chunk file missing and "
                                                             "the array's fill_value is null",
                                                  a->path, key));
    }
    stk_sample_set_hwc(ds, m->fill_sample, out);
    return 0;
}

/* vtable.read_check: for samples served from a mapped chunk file, were its
 * bytes still the file's after use (a file truncated while open reads as
 * zeros)? */
static int stk_zarr_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_zarr_impl *m = ds->impl;
    uint64_t c = index / m->chunk_n, off = (index % m->chunk_n) * m->sample_bytes, valid;
    if (!m->maps || m->map_state[c] != ZARR_MAPPED ||
        stk_mapped_file_intact(&m->maps[c], off, m->sample_bytes, &valid))
        return 0;
    char key[96];
    zarr_chunk_key(&m->images, c, key, sizeof key);
    return stk_fail(STK_EDATA, "%s: sample %llu: %s/%s was truncated while open (only its first "
                               "%llu of %zu bytes remain); the sample's bytes were lost",
                    ds->uri, (unsigned long long)index, m->images.path, key,
                    (unsigned long long)valid, m->maps[c].size);
}

/* vtable.label: from the table, without decoding a chunk. */
static int stk_zarr_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const stk_zarr_impl *m = ds->impl;
    *label = m->labels[index];
    return 0;
}

static void stk_zarr_close(stk_dataset *ds)
{
    stk_zarr_impl *m = ds->impl;
    if (m->maps)
        for (uint64_t c = 0; c < m->images.nchunks; c++)
            stk_unmap_file(&m->maps[c]);
    free(m->maps);
    free(m->map_state);
    zarr_array_close(&m->images);
    zarr_array_close(&m->labels_arr);
    free(m->labels);
    free(m->fill_sample);
    free(m->missing_text);
    pthread_mutex_destroy(&m->missing_mu);
    free(m);
    ds->impl = NULL;
}

#define ZARR_MISSING_NAMED 5 /* chunk keys named in "missing_chunks" */

/* The "missing_chunks" text of the image array, or NULL when every chunk
 * file is there (or out of memory: the dataset still reads). */
static char *zarr_missing_text(const stk_zarr_impl *m)
{
    const zarr_array *a = &m->images;
    char keys[ZARR_MISSING_NAMED][96], key[96], fill[48];
    uint64_t missing = 0;
    for (uint64_t c = 0; c < a->nchunks; c++) {
        struct stat st;
        zarr_chunk_key(a, c, key, sizeof key);
        int gone = m->map_state ? m->map_state[c] == ZARR_MISSING
                                : fstatat(a->dirfd, key, &st, 0) != 0 && errno == ENOENT;
        if (!gone)
            continue;
        if (missing < ZARR_MISSING_NAMED)
            memcpy(keys[missing], key, sizeof key);
        missing++;
    }
    if (!missing)
        return NULL;
    if (a->has_fill)
        snprintf(fill, sizeof fill, "their samples read as fill_value %lld",
                 (long long)a->fill);
    else
        snprintf(fill, sizeof fill, "fill_value is null: their samples fail");
    size_t cap = 512 + strlen(a->path) + ZARR_MISSING_NAMED * 100;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    int w = snprintf(t, cap, "%llu of %llu chunk files of %s are missing (%s): ",
                     (unsigned long long)missing, (unsigned long long)a->nchunks, a->path, fill);
    for (uint64_t k = 0; k < missing && k < ZARR_MISSING_NAMED && w > 0 && (size_t)w < cap; k++)
        w += snprintf(t + w, cap - (size_t)w, "%s%s", k ? ", " : "", keys[k]);
    if (missing > ZARR_MISSING_NAMED && w > 0 && (size_t)w < cap)
        snprintf(t + w, cap - (size_t)w, ", ... (%llu more)",
                 (unsigned long long)(missing - ZARR_MISSING_NAMED));
    return t;
}

/* vtable.metadata: "missing_chunks" only. */
static const char *stk_zarr_metadata(const stk_dataset *ds, const char *key)
{
    stk_zarr_impl *m = ds->impl;
    if (strcmp(key, "missing_chunks") != 0)
        return NULL;
    pthread_mutex_lock(&m->missing_mu);
    if (!m->missing_done) {
        m->missing_text = zarr_missing_text(m);
        m->missing_done = 1;
    }
    pthread_mutex_unlock(&m->missing_mu);
    return m->missing_text;
}

static const stk_dataset_vtable stk_zarr_vt = {.format = "zarr", .read = stk_zarr_read,
                                               .close = stk_zarr_close,
                                               .label = stk_zarr_label,
                                               .sample_name = stk_zarr_sample_name,
                                               .metadata = stk_zarr_metadata,
                                               .read_check = stk_zarr_read_check};

/* Chunk geometry of `a` along axis 0 (the others whole), checked against
 * the limits. */
static int zarr_geometry(zarr_array *a, const stk_dataset_options *o, const char *role)
{
    uint64_t per = a->itemsize, bytes;
    for (uint32_t k = 1; k < a->ndim; k++) {
        if (a->chunks[k] != a->shape[k])
            return stk_fail(STK_EUNSUPPORTED,
                            "%s/.zarray: %s chunked along axis %u (chunks %llu of %llu); only "
                            "chunking along the first axis is read: rechunk with chunks=(n, "
                            "%s)", a->path, role, k, (unsigned long long)a->chunks[k],
                            (unsigned long long)a->shape[k],
                            a->ndim == 4 ? "H, W, C" : "H, W");
        if (!stk_mul_ok(per, a->shape[k], &per))
            return stk_fail(STK_ELIMIT, "%s/.zarray: shape too large", a->path);
    }
    if (!stk_mul_ok(per, a->chunks[0], &bytes) || bytes > ZARR_MAX_CHUNK ||
        bytes > o->max_bytes || bytes > SIZE_MAX / 2)
        return stk_fail(STK_ELIMIT, "%s/.zarray: a chunk of %llu items decodes to more than "
                                    "the %llu-byte limit on one chunk", a->path,
                        (unsigned long long)a->chunks[0],
                        (unsigned long long)(o->max_bytes < ZARR_MAX_CHUNK ? o->max_bytes
                                                                           : ZARR_MAX_CHUNK));
    a->chunk_bytes = (size_t)bytes;
    a->nchunks = a->shape[0] / a->chunks[0] + (a->shape[0] % a->chunks[0] != 0);
    return 0;
}

/* The labels array, whole, into m->labels (count n). */
static int zarr_load_labels(stk_zarr_impl *m, uint64_t n)
{
    zarr_array *a = &m->labels_arr;
    stk_scratch sc = {0};
    int rc = 0, missing;
    if (n > SIZE_MAX / sizeof *m->labels || !(m->labels = malloc((size_t)n * sizeof *m->labels)))
        return stk_fail(STK_ENOMEM, "out of memory for %llu labels of %s", (unsigned long long)n,
                        a->path);
    for (uint64_t c = 0; c < a->nchunks; c++) {
        if ((rc = zarr_chunk_load(a, c, &sc, 0, &missing)) < 0) {
            rc = stk_fail_prefix(rc == STK_EDATA ? STK_EFORMAT : rc, "labels");
            goto out;
        }
        uint64_t first = c * a->chunks[0], cnt = a->chunks[0];
        if (cnt > n - first)
            cnt = n - first;
        if (missing && !a->has_fill) {
            char key[96];
            zarr_chunk_key(a, c, key, sizeof key);
            rc = stk_fail(STK_EFORMAT, "%s/%s: labels chunk file missing and fill_value is null",
                          a->path, key);
            goto out;
        }
        for (uint64_t i = 0; i < cnt; i++) {
            int64_t v;
            if (missing) {
                v = a->fill;
            } else {
                const uint8_t *p = sc.data + i * a->itemsize;
                uint64_t u = 0;
                for (uint32_t b = 0; b < a->itemsize; b++)
                    u |= (uint64_t)p[a->big_endian ? a->itemsize - 1 - b : b] << (8 * b);
                if (a->kind == 'i' && a->itemsize < 8 && (u >> (8 * a->itemsize - 1)) & 1)
                    u |= ~0ull << (8 * a->itemsize);
                if (a->kind == 'u' && u > (uint64_t)INT64_MAX) {
                    rc = stk_fail(STK_EFORMAT, "%s: label %llu of sample %llu does not fit int64",
                                  a->path, (unsigned long long)u,
                                  (unsigned long long)(first + i));
                    goto out;
                }
                v = (int64_t)u;
            }
            m->labels[first + i] = v;
        }
    }
out:
    stk_scratch_free(&sc);
    return rc;
}

/* Map every uncompressed image chunk file (see map_state). Only memory
 * failures fail the open; a chunk that cannot be served from a mapping is
 * left to the pread path, which reports it per sample. */
static int zarr_map_chunks(stk_zarr_impl *m, const char *uri)
{
    const zarr_array *a = &m->images;
    m->maps = calloc(a->nchunks, sizeof *m->maps);
    m->map_state = malloc(a->nchunks);
    if (!m->maps || !m->map_state)
        return stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
    /* Read in random order by views: the .stk reader's mapping advice,
     * for the whole array (it matters for chunks of 2 MiB and more). */
    stk_advice advice = stk_random_map_advice(a->chunk_bytes * a->nchunks);
    for (uint64_t c = 0; c < a->nchunks; c++) {
        char key[96];
        stk_file_source fs;
        const uint8_t *data = NULL;
        zarr_chunk_key(a, c, key, sizeof key);
        int rc = stk_file_source_open_at(&fs, a->dirfd, key, NULL);
        m->map_state[c] = rc == STK_ENOENT ? ZARR_MISSING : ZARR_PREAD;
        if (rc == 0 && fs.base.size == a->chunk_bytes &&
            stk_source_map(&fs.base, 0, &data, &m->maps[c].guard) == 0 && data) {
            m->maps[c].data = data;
            m->maps[c].size = a->chunk_bytes;
            m->map_state[c] = ZARR_MAPPED;
            stk_mapping_advise(data, 0, a->chunk_bytes, advice);
        }
        stk_source_close(&fs.base);
        if (rc == STK_ENOMEM)
            return rc;
    }
    stk_errmsg_clear();
    return 0;
}

static int stk_zarr_open(const char *uri, const char *path, const char *query,
                         const stk_dataset_options *opts, stk_dataset **out)
{
    static const char *const keys[] = {"images", "labels"};
    char *names[2] = {NULL, NULL};
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_dataset *ds = NULL;
    stk_zarr_impl *m;
    int group_fd = -1, rc;
    uint64_t n, px;

    if ((rc = stk_query_names(uri, "zarr", query, keys, names, 2)) < 0)
        goto fail;
    if (!(ds = stk_dataset_alloc(&stk_zarr_vt, uri))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = m;
    pthread_mutex_init(&m->missing_mu, NULL);
    m->images.dirfd = m->labels_arr.dirfd = -1;
    group_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (group_fd < 0) {
        rc = stk_fail(errno == ENOENT ? STK_ENOENT : STK_EINVAL,
                      "zarr: %s: %s (expected a Zarr v2 group directory)", path, strerror(errno));
        goto fail;
    }
    if (faccessat(group_fd, "zarr.json", F_OK, 0) == 0 &&
        faccessat(group_fd, ".zgroup", F_OK, 0) != 0) {
        rc = stk_fail(STK_EUNSUPPORTED, "zarr: %s holds zarr.json: Zarr v3 is not read yet (write "
                                        "the arrays as Zarr v2, zarr_format=2)", path);
        goto fail;
    }
    if ((rc = zarr_array_open(path, group_fd, names[0] ? names[0] : "images", &m->images)) < 0 ||
        (rc = zarr_array_open(path, group_fd, names[1] ? names[1] : "labels",
                              &m->labels_arr)) < 0)
        goto fail;

    /* images */
    zarr_array *a = &m->images;
    if (a->kind != 'u' || a->itemsize != 1) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s/.zarray: images dtype '%s' (uint8, '|u1', expected)",
                      a->path, a->dtype);
        goto fail;
    }
    if (a->ndim != 3 && a->ndim != 4) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: images have %u dimensions (N,H,W or N,H,W,C "
                                   "expected)", a->path, a->ndim);
        goto fail;
    }
    n = a->shape[0];
    uint64_t c = a->ndim == 4 ? a->shape[3] : 1;
    if (!n || !a->shape[1] || !a->shape[2] || c < 1 || c > 4) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: images shape (%llu, %llu, %llu, %llu): every "
                                   "dimension must be nonzero and C 1 to 4", a->path,
                      (unsigned long long)n, (unsigned long long)a->shape[1],
                      (unsigned long long)a->shape[2], (unsigned long long)c);
        goto fail;
    }
    if (n > o.max_samples || !stk_mul_ok(a->shape[1], a->shape[2], &px) || px > o.max_pixels ||
        a->shape[1] > UINT32_MAX || a->shape[2] > UINT32_MAX) {
        rc = stk_fail(STK_ELIMIT, "%s/.zarray: %llu images of %llux%llu pass the limits "
                                  "(max_samples %llu, max_pixels %llu)", a->path,
                      (unsigned long long)n, (unsigned long long)a->shape[1],
                      (unsigned long long)a->shape[2], (unsigned long long)o.max_samples,
                      (unsigned long long)o.max_pixels);
        goto fail;
    }
    if (a->has_fill && (a->fill < 0 || a->fill > 255)) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: fill_value %lld is not a uint8", a->path,
                      (long long)a->fill);
        goto fail;
    }
    if ((rc = zarr_geometry(a, &o, "images")) < 0)
        goto fail;
    m->sample_bytes = (size_t)(px * c);
    m->chunk_n = a->chunks[0];
    if (a->has_fill) {
        if (!(m->fill_sample = malloc(m->sample_bytes))) {
            rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
            goto fail;
        }
        memset(m->fill_sample, (int)a->fill, m->sample_bytes);
    }

    if (a->codec == ZARR_NONE && a->nchunks <= ZARR_MAX_MAPS &&
        (rc = zarr_map_chunks(m, uri)) < 0)
        goto fail;

    /* labels */
    zarr_array *l = &m->labels_arr;
    if (l->ndim != 1 || l->shape[0] != n) {
        rc = stk_fail(STK_EFORMAT, "%s/.zarray: labels must have shape (%llu,) to match %s, they "
                                   "have %u dimensions (first %llu)", l->path,
                      (unsigned long long)n, a->path, l->ndim,
                      (unsigned long long)(l->ndim ? l->shape[0] : 0));
        goto fail;
    }
    if ((rc = zarr_geometry(l, &o, "labels")) < 0 || (rc = zarr_load_labels(m, n)) < 0)
        goto fail;

    m->generation = atomic_fetch_add(&zarr_generations, 1);
    ds->count = n;
    ds->height = (uint32_t)a->shape[1];
    ds->width = (uint32_t)a->shape[2];
    ds->channels = (uint32_t)c;
    ds->num_classes = stk_num_classes(m->labels, n);
    close(group_fd);
    free(names[0]);
    free(names[1]);
    *out = ds;
    return 0;

fail:
    if (group_fd >= 0)
        close(group_fd);
    free(names[0]);
    free(names[1]);
    stk_dataset_close(ds);
    return rc;
}

/* A directory holding .zgroup and images/.zarray (v2), or zarr.json (v3,
 * refused at open with a message). */
static int stk_zarr_detect(const char *path)
{
    char *a, *b, *v3;
    int r;
    if (!stk_path_is_dir(path))
        return 0;
    a = stk_path_join(path, ".zgroup");
    b = stk_path_join(path, "images/.zarray");
    v3 = stk_path_join(path, "zarr.json");
    r = a && b && v3 ? (stk_path_is_file(a) && stk_path_is_file(b)) || stk_path_is_file(v3)
                     : STK_ENOMEM;
    free(a);
    free(b);
    free(v3);
    return r;
}

const stk_reader stk_reader_zarr = {
    "zarr", "zarr:DIR[?images=ARR&labels=ARR]",
    "Zarr v2 group: uint8 images (N,H,W[,C]) chunked along N (none/zstd/blosc/zlib), int "
    "labels (N,)",
    stk_zarr_open, NULL, stk_zarr_detect, ".zgroup and images/.zarray (Zarr)", NULL};
