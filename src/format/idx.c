/*
 * idx.c — IDX files (the MNIST / Fashion-MNIST layout), plain or gzipped.
 *
 * An IDX file is a big-endian header followed by a dense array:
 *
 *   00 00 TT DD   two zero bytes, element type TT, DD dimensions
 *   DD x uint32   the dimensions, big-endian, outermost first
 *   data          the product of the dimensions, in elements of type TT
 *
 * Images are (N, H, W) — one channel — or (N, H, W, C) interleaved; labels
 * are (N). Only TT = 0x08 (unsigned byte) is handled; the other types LeCun
 * defined (signed byte, short, int, float, double) are STK_EUNSUPPORTED, and
 * any other byte is not IDX at all (STK_EFORMAT).
 *
 * How it works. A file starting with the gzip magic (1f 8b — the content
 * decides, not the name) is decompressed into memory; any other file is
 * mapped read-only and used in place. Either way the header is read and
 * checked first: magic, type, the number of dimensions the role needs, every
 * dimension nonzero, and the limits (samples, pixels per sample, data bytes,
 * each product computed with overflow checks). Only then is the data looked
 * at. For a plain file its size must be exactly header + data: shorter is
 * "truncated", longer is "trailing data". For a gzip file the output buffer
 * starts small and doubles as decompressed bytes actually arrive, capped at
 * the size the header promised, so a tiny hostile file that claims huge
 * dimensions costs at most what it really inflates to; the stream must then
 * end (CRC checked by zlib) with nothing after it but further gzip members.
 *
 * The labels file is loaded first (it is small) and its count is handed to
 * the images load, so a count mismatch is reported right after the images
 * header, before the images are decompressed. Labels are kept as one uint8
 * table (copied out of a mapping, or the decompressed buffer itself) and
 * num_classes is the largest label + 1.
 *
 * Invariants after open: images.data holds exactly count * sample_bytes
 * bytes; labels holds count entries; read() is pointer arithmetic.
 *
 * Three rows of the reader table (reader_table.c) are defined at the end of
 * this file, each naming the two files its own way: idx: (IMAGES,LABELS,
 * or one images file whose labels file is found by name when detected),
 * and mnist: / fashion-mnist: (a directory in the MNIST layout, train-* or
 * t10k-* by ?split=).
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define STK_IDX_TYPE_U8 0x08
#define STK_IDX_MAX_NDIM 4
/* zlib counts in uInt; feed and drain it in pieces no larger than this. */
#define STK_ZCHUNK ((size_t)1 << 30)
/* First size of a decompression buffer; it doubles from here. */
#define STK_GZ_INITIAL ((size_t)1 << 20)

enum stk_idx_role { STK_IDX_IMAGES, STK_IDX_LABELS };

/* One loaded IDX file. */
typedef struct stk_idx_array {
    stk_mapped_file map;  /* owned: the file mapping (plain files; for .gz
                             only until decompression is done) */
    uint8_t *heap;        /* owned (malloc): decompressed data of a .gz */
    const uint8_t *data;  /* first data byte, inside map or heap */
    uint64_t data_bytes;  /* product of the dimensions */
    uint32_t ndim;
    uint32_t dims[STK_IDX_MAX_NDIM];
    int gz;               /* nonzero when the file was gzip */
} stk_idx_array;

typedef struct stk_idx_impl {
    stk_idx_array images; /* owned */
    uint8_t *labels;      /* owned (malloc), ds->count entries */
    size_t sample_bytes;  /* H * W * C */
} stk_idx_impl;

static void stk_idx_array_free(stk_idx_array *a)
{
    stk_unmap_file(&a->map);
    free(a->heap);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------------ */
/* read / close                                                             */
/* ------------------------------------------------------------------------ */

static int stk_idx_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                        stk_scratch *scratch)
{
    const stk_idx_impl *x = ds->impl;
    (void)scratch;

    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    stk_sample_set_hwc(ds, x->images.data + index * x->sample_bytes, out);
    out->label = x->labels[index];
    return 0;
}

/* vtable.read_check: were sample `index`'s pixels still the file's after
 * use (a plain file truncated while open reads as zeros; gzip data lives in
 * memory)? */
static int stk_idx_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_idx_impl *x = ds->impl;
    uint64_t valid;
    if (!x->images.map.data || x->images.data < x->images.map.data ||
        x->images.data >= x->images.map.data + x->images.map.size)
        return 0; /* decompressed into memory: nothing can shrink under it */
    uint64_t off = (uint64_t)(x->images.data - x->images.map.data) + index * x->sample_bytes;
    if (stk_mapped_file_intact(&x->images.map, off, x->sample_bytes, &valid))
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: sample %llu: the images file was truncated while open (only its first "
                    "%llu of %zu bytes remain); the sample's bytes were lost",
                    ds->uri, (unsigned long long)index, (unsigned long long)valid,
                    x->images.map.size);
}

static void stk_idx_close(stk_dataset *ds)
{
    stk_idx_impl *x = ds->impl;
    if (!x)
        return;
    stk_idx_array_free(&x->images);
    free(x->labels);
    free(x);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_idx_vt = {.format = "idx", .read = stk_idx_read,
                                              .close = stk_idx_close,
                                              .read_check = stk_idx_read_check};

/* ------------------------------------------------------------------------ */
/* gzip source                                                              */
/* ------------------------------------------------------------------------ */

typedef struct stk_gz_src {
    z_stream zs;
    int inited;
    const char *path;    /* lent, for messages */
    const uint8_t *end;  /* one past the last compressed byte (in the mapping) */
    int eof;             /* the last member ended exactly at the end of the file */
    int cut;             /* the file ended inside a member */
} stk_gz_src;

static int stk_gz_begin(stk_gz_src *g, const char *path, const stk_mapped_file *m)
{
    int zr;
    memset(g, 0, sizeof *g);
    g->path = path;
    g->end = m->data + m->size;
    g->zs.next_in = (Bytef *)m->data;
    g->zs.avail_in = 0;
    zr = inflateInit2(&g->zs, 16 + MAX_WBITS); /* gzip wrapper only */
    if (zr == Z_MEM_ERROR)
        return stk_fail(STK_ENOMEM, "%s: out of memory starting zlib", path);
    if (zr != Z_OK)
        return stk_fail(STK_EIO, "%s: zlib inflateInit2 failed (%d)", path, zr);
    g->inited = 1;
    return 0;
}

static void stk_gz_end(stk_gz_src *g)
{
    if (g->inited)
        inflateEnd(&g->zs);
    g->inited = 0;
}

/* Inflate up to `want` bytes into buf. *got < want only when the input is
 * used up (g->eof: cleanly, g->cut: inside a member). Concatenated gzip
 * members are one stream, as gzip(1) treats them; anything else after the
 * end of a member is an error. */
static int stk_gz_read(stk_gz_src *g, uint8_t *buf, size_t want, size_t *got)
{
    *got = 0;
    while (*got < want && !g->eof && !g->cut) {
        size_t room = want - *got;
        uInt in_before;
        int zr;

        if (g->zs.avail_in == 0) {
            size_t left = (size_t)(g->end - g->zs.next_in);
            if (left == 0) {
                g->cut = 1;
                break;
            }
            g->zs.avail_in = (uInt)(left < STK_ZCHUNK ? left : STK_ZCHUNK);
        }
        if (room > STK_ZCHUNK)
            room = STK_ZCHUNK;
        g->zs.next_out = buf + *got;
        g->zs.avail_out = (uInt)room;
        in_before = g->zs.avail_in;
        zr = inflate(&g->zs, Z_NO_FLUSH);
        *got += room - g->zs.avail_out;

        switch (zr) {
        case Z_OK:
            break;
        case Z_BUF_ERROR:
            /* No progress. With input and room both offered zlib never
             * says this; guard the loop against it anyway. */
            if (g->zs.avail_in == in_before && g->zs.avail_out == room && in_before > 0)
                return stk_fail(STK_EFORMAT, "%s: corrupt gzip stream: zlib made no progress",
                                g->path);
            break;
        case Z_STREAM_END: {
            size_t left = (size_t)(g->end - g->zs.next_in);
            if (left == 0) {
                g->eof = 1;
            } else if (left >= 2 && g->zs.next_in[0] == 0x1f && g->zs.next_in[1] == 0x8b) {
                inflateReset(&g->zs);
            } else {
                return stk_fail(STK_EFORMAT,
                                "%s: %zu bytes of trailing garbage after the end of the gzip "
                                "stream",
                                g->path, left);
            }
            break;
        }
        case Z_MEM_ERROR:
            return stk_fail(STK_ENOMEM, "%s: out of memory in zlib", g->path);
        case Z_DATA_ERROR:
            return stk_fail(STK_EFORMAT, "%s: corrupt gzip stream: %s", g->path,
                            g->zs.msg ? g->zs.msg : "invalid data");
        default:
            return stk_fail(STK_EFORMAT, "%s: corrupt gzip stream (zlib error %d%s%s)", g->path,
                            zr, g->zs.msg ? ": " : "", g->zs.msg ? g->zs.msg : "");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Header                                                                   */
/* ------------------------------------------------------------------------ */

static const char *stk_idx_type_name(unsigned t)
{
    switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return NULL;
    }
}

static uint32_t stk_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* "N images of HxW" / "N images of HxWxC" / "N labels". */
static void stk_idx_describe(const stk_idx_array *a, int role, char *buf, size_t n)
{
    if (role == STK_IDX_LABELS)
        snprintf(buf, n, "%u labels", a->dims[0]);
    else if (a->ndim == 3)
        snprintf(buf, n, "%u images of %ux%u", a->dims[0], a->dims[1], a->dims[2]);
    else
        snprintf(buf, n, "%u images of %ux%ux%u", a->dims[0], a->dims[1], a->dims[2],
                 a->dims[3]);
}

/* The 4 fixed bytes: magic, type and dimension count for this role. */
static int stk_idx_check_prefix(const char *path, int role, const uint8_t h[4])
{
    const char *tname;
    if (h[0] != 0 || h[1] != 0)
        return stk_fail(STK_EFORMAT,
                        "%s: not an IDX file: bad magic %02x %02x %02x %02x (expected 00 00 "
                        "then the type and dimension count)",
                        path, h[0], h[1], h[2], h[3]);
    tname = stk_idx_type_name(h[2]);
    if (!tname)
        return stk_fail(STK_EFORMAT, "%s: not an IDX file: unknown element type 0x%02x", path,
                        h[2]);
    if (h[2] != STK_IDX_TYPE_U8)
        return stk_fail(STK_EUNSUPPORTED,
                        "%s: IDX element type 0x%02x (%s) is not supported; only 0x08 "
                        "(unsigned byte) is",
                        path, h[2], tname);
    if (role == STK_IDX_IMAGES && h[3] != 3 && h[3] != 4)
        return stk_fail(STK_EFORMAT,
                        "%s: IDX images file has %u dimensions; expected 3 (N,H,W) or 4 "
                        "(N,H,W,C)",
                        path, h[3]);
    if (role == STK_IDX_LABELS && h[3] != 1)
        return stk_fail(STK_EFORMAT, "%s: IDX labels file has %u dimensions; expected 1 (N)",
                        path, h[3]);
    return 0;
}

/* Dimensions are known: check them against zero and the limits, and
 * compute a->data_bytes. `expect_n` (images only) is the label count. */
static int stk_idx_check_dims(const char *path, int role, stk_idx_array *a,
                              const stk_dataset_options *opts, const char *labels_path,
                              uint64_t expect_n)
{
    uint64_t pixels = 1, bytes = 1;
    char desc[128];

    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->dims[i] == 0)
            return stk_fail(STK_EFORMAT,
                            "%s: IDX dimension %u of %u is 0 (the header declares an empty "
                            "array)",
                            path, i, a->ndim);
    stk_idx_describe(a, role, desc, sizeof desc);
    if (a->dims[0] > opts->max_samples)
        return stk_fail(STK_ELIMIT, "%s: header says %s; %u exceeds max_samples %llu", path,
                        desc, a->dims[0], (unsigned long long)opts->max_samples);
    if (role == STK_IDX_IMAGES) {
        uint32_t ch = a->ndim == 4 ? a->dims[3] : 1;
        if (!stk_mul_ok(a->dims[1], a->dims[2], &pixels) || pixels > opts->max_pixels)
            return stk_fail(STK_ELIMIT, "%s: header says %s; %ux%u pixels per image exceed "
                                        "max_pixels %llu",
                            path, desc, a->dims[1], a->dims[2],
                            (unsigned long long)opts->max_pixels);
        if (ch > 4)
            return stk_fail(STK_EUNSUPPORTED,
                            "%s: header says %s; images with %u channels are not supported "
                            "(1 to 4)",
                            path, desc, ch);
        if (!stk_mul_ok(pixels, ch, &bytes) || !stk_mul_ok(bytes, a->dims[0], &bytes) ||
            bytes > opts->max_bytes || bytes > SIZE_MAX)
            return stk_fail(STK_ELIMIT, "%s: header says %s, more data than max_bytes %llu",
                            path, desc, (unsigned long long)opts->max_bytes);
        if (a->dims[0] != expect_n)
            return stk_fail(STK_EFORMAT, "%s has %u images but %s has %llu labels", path,
                            a->dims[0], labels_path, (unsigned long long)expect_n);
    } else {
        bytes = a->dims[0];
        if (bytes > opts->max_bytes)
            return stk_fail(STK_ELIMIT, "%s: header says %s, more data than max_bytes %llu",
                            path, desc, (unsigned long long)opts->max_bytes);
    }
    a->data_bytes = bytes;
    return 0;
}

static int stk_idx_truncated(const char *path, int role, const stk_idx_array *a,
                             uint64_t have, const char *where, const char *extra)
{
    char desc[128];
    stk_idx_describe(a, role, desc, sizeof desc);
    return stk_fail(STK_EFORMAT,
                    "%s: truncated: header says %s (%llu bytes of data) but the %s has %llu%s",
                    path, desc, (unsigned long long)a->data_bytes, where,
                    (unsigned long long)have, extra);
}

/* ------------------------------------------------------------------------ */
/* Loading one file                                                         */
/* ------------------------------------------------------------------------ */

static int stk_idx_load_plain(const char *path, int role, stk_idx_array *a,
                              const stk_dataset_options *opts, const char *labels_path,
                              uint64_t expect_n)
{
    const uint8_t *p = a->map.data;
    size_t size = a->map.size, hdr;
    int rc;

    if (size < 4)
        return stk_fail(STK_EFORMAT, "%s: truncated: %zu bytes, shorter than an IDX header",
                        path, size);
    rc = stk_idx_check_prefix(path, role, p);
    if (rc)
        return rc;
    a->ndim = p[3];
    hdr = 4 + 4 * (size_t)a->ndim;
    if (size < hdr)
        return stk_fail(STK_EFORMAT,
                        "%s: truncated: %zu bytes, shorter than its %zu-byte IDX header", path,
                        size, hdr);
    for (uint32_t i = 0; i < a->ndim; i++)
        a->dims[i] = stk_be32(p + 4 + 4 * i);
    rc = stk_idx_check_dims(path, role, a, opts, labels_path, expect_n);
    if (rc)
        return rc;
    if (size - hdr < a->data_bytes)
        return stk_idx_truncated(path, role, a, size - hdr, "file", " bytes after its header");
    if (size - hdr > a->data_bytes) {
        char desc[128];
        stk_idx_describe(a, role, desc, sizeof desc);
        return stk_fail(STK_EFORMAT,
                        "%s: %llu bytes of trailing data after the %llu bytes the header "
                        "describes (%s)",
                        path, (unsigned long long)(size - hdr - a->data_bytes),
                        (unsigned long long)a->data_bytes, desc);
    }
    a->data = p + hdr;
    return 0;
}

static int stk_idx_load_gz(const char *path, int role, stk_idx_array *a,
                           const stk_dataset_options *opts, const char *labels_path,
                           uint64_t expect_n)
{
    stk_gz_src g;
    uint8_t head[4 + 4 * STK_IDX_MAX_NDIM], sink[1];
    size_t got, have = 0, cap;
    int rc;

    rc = stk_gz_begin(&g, path, &a->map);
    if (rc)
        goto fail;

    /* Header: the fixed 4 bytes, then exactly the dimensions they announce. */
    rc = stk_gz_read(&g, head, 4, &got);
    if (rc)
        goto fail;
    if (got < 4) {
        rc = stk_fail(STK_EFORMAT,
                      "%s: truncated: the gzip stream holds %zu bytes%s, shorter than an IDX "
                      "header",
                      path, got, g.cut ? " before it is cut short" : "");
        goto fail;
    }
    rc = stk_idx_check_prefix(path, role, head);
    if (rc)
        goto fail;
    a->ndim = head[3];
    rc = stk_gz_read(&g, head + 4, 4 * (size_t)a->ndim, &got);
    if (rc)
        goto fail;
    if (got < 4 * (size_t)a->ndim) {
        rc = stk_fail(STK_EFORMAT,
                      "%s: truncated: the gzip stream ends inside the %u-byte IDX header",
                      path, 4 + 4 * a->ndim);
        goto fail;
    }
    for (uint32_t i = 0; i < a->ndim; i++)
        a->dims[i] = stk_be32(head + 4 + 4 * i);
    rc = stk_idx_check_dims(path, role, a, opts, labels_path, expect_n);
    if (rc)
        goto fail;

    /* Data: grow with what actually arrives, never past what was promised. */
    cap = a->data_bytes < STK_GZ_INITIAL ? (size_t)a->data_bytes : STK_GZ_INITIAL;
    a->heap = malloc(cap);
    if (!a->heap) {
        rc = stk_fail(STK_ENOMEM, "%s: out of memory (%zu bytes) decompressing", path, cap);
        goto fail;
    }
    while (have < a->data_bytes) {
        if (have == cap) {
            size_t ncap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
            uint8_t *np;
            if (ncap > a->data_bytes)
                ncap = (size_t)a->data_bytes;
            np = realloc(a->heap, ncap);
            if (!np) {
                rc = stk_fail(STK_ENOMEM, "%s: out of memory (%zu bytes) decompressing", path,
                              ncap);
                goto fail;
            }
            a->heap = np;
            cap = ncap;
        }
        rc = stk_gz_read(&g, a->heap + have, cap - have, &got);
        have += got;
        if (rc)
            goto fail;
        if (g.eof || g.cut)
            break;
    }
    if (have < a->data_bytes) {
        rc = stk_idx_truncated(path, role, a, have, "decompressed stream",
                               g.cut ? " bytes after its header, and the gzip stream is cut short"
                                     : " bytes after its header");
        goto fail;
    }

    /* Nothing may follow but the end of the stream (and its CRC check). */
    rc = stk_gz_read(&g, sink, 1, &got);
    if (rc)
        goto fail;
    if (got > 0) {
        char desc[128];
        stk_idx_describe(a, role, desc, sizeof desc);
        rc = stk_fail(STK_EFORMAT,
                      "%s: trailing data: the decompressed stream continues past the %llu "
                      "bytes the header describes (%s)",
                      path, (unsigned long long)a->data_bytes, desc);
        goto fail;
    }
    if (g.cut) {
        rc = stk_fail(STK_EFORMAT,
                      "%s: truncated gzip stream: the data is complete but the stream's end "
                      "(its CRC and length) is missing",
                      path);
        goto fail;
    }
    stk_gz_end(&g);
    stk_unmap_file(&a->map);
    a->data = a->heap;
    return 0;

fail:
    stk_gz_end(&g);
    return rc;
}

/* Map `path`, then parse it as plain or gzip IDX of `role`. */
static int stk_idx_load(const char *path, int role, const stk_dataset_options *opts,
                        const char *labels_path, uint64_t expect_n, stk_idx_array *a)
{
    int rc;

    memset(a, 0, sizeof *a);
    rc = stk_map_file(path, opts->max_bytes, &a->map);
    if (rc)
        return rc;
    if (a->map.size == 0)
        return stk_fail(STK_EFORMAT, "%s: empty file (expected an IDX %s file)", path,
                        role == STK_IDX_IMAGES ? "images" : "labels");
    a->gz = a->map.size >= 2 && a->map.data[0] == 0x1f && a->map.data[1] == 0x8b;
    if (a->gz)
        return stk_idx_load_gz(path, role, a, opts, labels_path, expect_n);
    return stk_idx_load_plain(path, role, a, opts, labels_path, expect_n);
}

/* ------------------------------------------------------------------------ */
/* Open                                                                     */
/* ------------------------------------------------------------------------ */

static int stk_idx_open(const char *uri, const char *images_path, const char *labels_path,
                        const stk_dataset_options *opts_in, stk_dataset **out)
{
    stk_dataset_options opts = stk_dataset_options_resolve(opts_in);
    stk_idx_array lab;
    stk_dataset *ds = NULL;
    stk_idx_impl *x = NULL;
    uint64_t n;
    unsigned maxl = 0;
    int rc;

    *out = NULL;
    memset(&lab, 0, sizeof lab);
    if (!*images_path || !*labels_path)
        return stk_fail(STK_EINVAL, "idx: empty file name in URI '%s' (expected IMAGES,LABELS)",
                        uri);

    rc = stk_idx_load(labels_path, STK_IDX_LABELS, &opts, NULL, 0, &lab);
    if (rc)
        goto fail;
    n = lab.dims[0];

    ds = stk_dataset_alloc(&stk_idx_vt, uri);
    if (!ds) {
        rc = STK_ENOMEM;
        goto fail;
    }
    x = calloc(1, sizeof *x);
    if (!x) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = x;

    /* The labels table: the decompressed buffer itself, or a copy of the
     * mapping (so the labels file is not kept open). */
    if (lab.heap) {
        x->labels = lab.heap;
        lab.heap = NULL;
    } else {
        x->labels = malloc((size_t)n);
        if (!x->labels) {
            rc = stk_fail(STK_ENOMEM, "out of memory for the %llu labels of %s",
                          (unsigned long long)n, labels_path);
            goto fail;
        }
        memcpy(x->labels, lab.data, (size_t)n);
    }
    stk_idx_array_free(&lab);
    for (uint64_t i = 0; i < n; i++)
        if (x->labels[i] > maxl)
            maxl = x->labels[i];

    rc = stk_idx_load(images_path, STK_IDX_IMAGES, &opts, labels_path, n, &x->images);
    if (rc)
        goto fail;

    ds->count = n;
    ds->height = x->images.dims[1];
    ds->width = x->images.dims[2];
    ds->channels = x->images.ndim == 4 ? x->images.dims[3] : 1;
    ds->num_classes = maxl + 1;
    x->sample_bytes = (size_t)ds->height * ds->width * ds->channels;
    *out = ds;
    return 0;

fail:
    stk_idx_array_free(&lab);
    stk_dataset_close(ds);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The reader table's rows: idx, mnist, fashion-mnist                       */
/* ------------------------------------------------------------------------ */

static const char *const stk_split_values[] = {"train", "test", NULL};

/* First of dir/name and dir/name.gz that exists; malloc'd, or NULL with
 * *rc = 0 when neither exists (or *rc = STK_ENOMEM). */
static char *stk_find_plain_or_gz(const char *dir, const char *name, int *rc)
{
    char gzname[64];
    char *p;
    *rc = 0;
    p = stk_path_join(dir, name);
    if (!p) {
        *rc = STK_ENOMEM;
        return NULL;
    }
    if (stk_path_exists(p))
        return p;
    free(p);
    strcpy(gzname, name);
    strcat(gzname, ".gz");
    p = stk_path_join(dir, gzname);
    if (!p) {
        *rc = STK_ENOMEM;
        return NULL;
    }
    if (stk_path_exists(p))
        return p;
    free(p);
    return NULL;
}

/* A directory in the MNIST layout (train-* / t10k-* IDX files). */
static int stk_open_mnist_dir(const char *uri, const char *what, const char *dir,
                              const char *query, const stk_dataset_options *opts,
                              stk_dataset **out)
{
    stk_query_key key = {"split", stk_split_values, -1};
    const char *pre;
    char iname[48], lname[48];
    char *ipath = NULL, *lpath = NULL;
    int rc;

    rc = stk_query_parse(uri, what, query, &key, 1);
    if (rc)
        return rc;
    if (!*dir)
        return stk_fail(STK_EINVAL, "%s: empty directory in URI '%s'", what, uri);
    if (!stk_path_is_dir(dir))
        return stk_fail(stk_path_exists(dir) ? STK_EINVAL : STK_ENOENT,
                        "%s: %s: %s (expected a directory with train-images-idx3-ubyte[.gz] "
                        "and the other MNIST-layout files)",
                        what, dir, stk_path_exists(dir) ? "not a directory" : "no such directory");
    pre = key.value == 1 ? "t10k" : "train";
    strcpy(iname, pre);
    strcat(iname, "-images-idx3-ubyte");
    strcpy(lname, pre);
    strcat(lname, "-labels-idx1-ubyte");
    ipath = stk_find_plain_or_gz(dir, iname, &rc);
    if (rc)
        goto out;
    if (!ipath) {
        rc = stk_fail(STK_ENOENT, "%s: %s: no %s or %s.gz in this directory", what, dir, iname,
                      iname);
        goto out;
    }
    lpath = stk_find_plain_or_gz(dir, lname, &rc);
    if (rc)
        goto out;
    if (!lpath) {
        rc = stk_fail(STK_ENOENT, "%s: %s: no %s or %s.gz in this directory", what, dir, lname,
                      lname);
        goto out;
    }
    rc = stk_idx_open(uri, ipath, lpath, opts, out);
out:
    free(ipath);
    free(lpath);
    return rc;
}

/* "idx:IMAGES,LABELS" — exactly one comma; no query keys exist. */
static int stk_open_idx_pair(const char *uri, const char *path, const char *query,
                             const stk_dataset_options *opts, stk_dataset **out)
{
    char *copy = stk_strdup(path);
    char *comma;
    int rc;

    if (!copy)
        return STK_ENOMEM;
    rc = stk_query_parse(uri, "idx", query, NULL, 0);
    if (rc)
        goto out;
    comma = strchr(copy, ',');
    if (!comma || strchr(comma + 1, ',')) {
        rc = stk_fail(STK_EINVAL,
                      "idx: URI '%s' must name exactly two files, IMAGES,LABELS, joined by one "
                      "','",
                      uri);
        goto out;
    }
    *comma = '\0';
    rc = stk_idx_open(uri, copy, comma + 1, opts, out);
out:
    free(copy);
    return rc;
}

/* Labels file of an IDX images file: the last "images-idx3" (or
 * "images.idx3") in the basename becomes "labels-idx1" ("labels.idx1"); if
 * that does not exist, the same name with ".gz" added or removed. Returns 1
 * and a malloc'd *labels when the name matches the pattern, 0 when it does
 * not, or a negative code. */
static int stk_idx_labels_for(const char *images, char **labels)
{
    static const char *const pats[][2] = {{"images-idx3", "labels-idx1"},
                                          {"images.idx3", "labels.idx1"}};
    const char *base = stk_path_basename(images);
    *labels = NULL;
    for (size_t k = 0; k < 2; k++) {
        const char *hit = NULL, *s = base;
        size_t n = strlen(images), plen = strlen(pats[k][0]);
        char *cand;
        while ((s = strstr(s, pats[k][0])) != NULL)
            hit = s++;
        if (!hit || strncmp(hit + plen, "-ubyte", 6) != 0)
            continue;
        /* room for the name + ".gz" */
        cand = malloc(n + 4);
        if (!cand)
            return stk_fail(STK_ENOMEM, "out of memory");
        memcpy(cand, images, n + 1);
        memcpy(cand + (hit - images), pats[k][1], plen); /* same length */
        if (!stk_path_exists(cand)) {
            if (n > 3 && strcmp(cand + n - 3, ".gz") == 0)
                cand[n - 3] = '\0';
            else
                strcat(cand, ".gz");
            if (!stk_path_exists(cand)) {
                /* report the plain replacement */
                memcpy(cand, images, n + 1);
                memcpy(cand + (hit - images), pats[k][1], plen);
                stk_fail(STK_ENOENT,
                         "%s: detected an IDX images file, but its labels file %s (or with "
                         ".gz added/removed) does not exist",
                         images, cand);
                free(cand);
                return STK_ENOENT;
            }
        }
        *labels = cand;
        return 1;
    }
    return 0;
}

/* An IDX images file named like MNIST's: its labels file found by name. */
static int stk_detect_idx(const char *path)
{
    char *labels = NULL;
    int r;
    if (!stk_path_is_file(path))
        return 0;
    r = stk_idx_labels_for(path, &labels);
    free(labels);
    return r; /* 1, 0, or the error naming the missing labels file */
}

static int stk_open_idx_detected(const char *uri, const char *path, const char *query,
                                 const stk_dataset_options *opts, stk_dataset **out)
{
    char *labels = NULL;
    int r = stk_idx_labels_for(path, &labels);
    if (r <= 0)
        return r < 0 ? r : stk_fail(STK_EINVAL, "%s: not an IDX images file name", path);
    r = stk_query_parse(uri, "idx", query, NULL, 0);
    if (r == 0)
        r = stk_idx_open(uri, path, labels, opts, out);
    free(labels);
    return r;
}

static int stk_open_mnist(const char *uri, const char *path, const char *query,
                          const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_open_mnist_dir(uri, "mnist", path, query, opts, out);
}

static int stk_open_fashion_mnist(const char *uri, const char *path, const char *query,
                                  const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_open_mnist_dir(uri, "fashion-mnist", path, query, opts, out);
}

static int stk_detect_mnist(const char *path)
{
    static const char *const names[] = {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                                        "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz"};
    return stk_path_is_dir(path) ? stk_dir_has_any(path, names, 4) : 0;
}

const stk_reader stk_reader_idx = {
    "idx", "idx:IMAGES,LABELS", "two IDX files (MNIST layout), plain or .gz; no query keys",
    stk_open_idx_pair, stk_open_idx_detected, stk_detect_idx, NULL,
    "*images-idx3-ubyte[.gz]"};

const stk_reader stk_reader_mnist = {
    "mnist", "mnist:DIR[?split=train|test]",
    "DIR with train-/t10k-{images-idx3,labels-idx1}-ubyte[.gz]", stk_open_mnist, NULL,
    stk_detect_mnist,
    "train-images-idx3-ubyte[.gz] or t10k-images-idx3-ubyte[.gz] (MNIST layout)", NULL};

const stk_reader stk_reader_fashion_mnist = {
    "fashion-mnist", "fashion-mnist:DIR[?split=train|test]", "the same file names as mnist:",
    stk_open_fashion_mnist, NULL, NULL, NULL, NULL};
