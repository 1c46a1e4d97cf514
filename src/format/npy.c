/*
 * npy.c — a pair of NumPy .npy files: images and labels.
 *
 * URI: "npy:IMAGES,LABELS" (two .npy files joined by one ','), "npy:DIR"
 * (DIR/images.npy and DIR/labels.npy) or "npy:FILE.npz[?images=NAME&
 * labels=NAME]" (the members NAME.npy of an np.savez archive, default
 * images and labels); a bare directory holding both files and a bare
 * *.npz file are detected. The query keys apply to .npz only.
 *
 * .npz. np.savez writes a ZIP archive whose members are stored (method 0),
 * so each array lies in the file as a plain .npy: the archive is mapped
 * once and each member is parsed exactly as a .npy file in place, no copy.
 * The archive is checked before any member byte is used: the end of
 * central directory record (the last "PK\5\6" whose comment reaches the
 * end of the file; one disk), the ZIP64 end record through its locator
 * when a 32-bit field is saturated (archives past 4 GiB; numpy's zipfile
 * writes them), every central directory entry inside the directory, the
 * member's ZIP64 extra field when its sizes or offset are saturated, then
 * its local header (signature, the same name and method) and its data
 * inside the members' area. A compressed member (np.savez_compressed,
 * deflate) or an encrypted one is refused: serving it would mean
 * inflating the whole array into memory at open, which np.savez avoids.
 * The labels member's CRC-32 is checked (it is read whole at open anyway);
 * the images member's is not, like the .npy images (reading the whole
 * array at open would cost what mapping it saves).
 *
 * The .npy format (numpy/lib/format.py, versions 1.0 and 2.0):
 *
 *   "\x93NUMPY" major minor   6 magic bytes, then the version (1 0 or 2 0)
 *   HEADER_LEN                uint16 LE (1.0) or uint32 LE (2.0)
 *   HEADER                    an ASCII Python dict literal, e.g.
 *                             {'descr': '|u1', 'fortran_order': False,
 *                              'shape': (60000, 28, 28), }
 *                             padded with spaces, ending in '\n'
 *   data                      the array, C order, exactly prod(shape) items
 *
 * Images are uint8 ('|u1' or '<u1'), shape (N, H, W) (one channel) or (N,
 * H, W, C) with C = 1..4, C order. Labels are int64 ('<i8'), int32 ('<i4')
 * or uint8 ('|u1', '<u1'), shape (N,), the same N.
 *
 * How it works. The header is parsed by a strict little grammar, not
 * evaluated: '{', then 'key': value items separated by ',' (a trailing ','
 * allowed), '}', then only spaces and one final '\n'. The three keys descr,
 * fortran_order and shape must each appear exactly once and no other key
 * may; descr is a quoted string, fortran_order True or False, shape a
 * tuple of decimal integers. Anything else — bad magic, an unknown
 * version, a header running past the file, Fortran order, another dtype, a
 * wrong number of dimensions, a zero dimension, a shape whose size
 * overflows or passes the limits, a file shorter ("truncated") or longer
 * ("trailing bytes") than header + data — is an error naming the file and
 * the reason, before any data byte is used. Each file is mapped with
 * stk_map_file; the labels are converted once into an int64 table and
 * their file unmapped; the images stay mapped and read() is pointer
 * arithmetic into them. num_classes is the largest label + 1 when every
 * label is >= 0, else 0.
 *
 * Invariants after open: the images mapping holds exactly count *
 * sample_bytes bytes after data_offset; labels holds count entries.
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "format/byte_order.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define NPY_MAX_HEADER 65536u
#define NPY_MAX_NDIM 8

/* A parsed header. */
typedef struct npy_header {
    char descr[16];
    int fortran;
    uint32_t ndim;
    uint64_t shape[NPY_MAX_NDIM];
    uint64_t data_offset; /* first data byte */
} npy_header;

typedef struct stk_npy_impl {
    stk_mapped_file images; /* owned mapping of the images file */
    const uint8_t *pixels;  /* images.data + data_offset */
    int64_t *labels;        /* owned (malloc), count entries */
    size_t sample_bytes;
} stk_npy_impl;

/* --- header grammar ----------------------------------------------------- */

typedef struct npy_cursor {
    const char *p, *end;
} npy_cursor;

static void npy_ws(npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static int npy_eat(npy_cursor *c, char ch)
{
    npy_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('..' or ".."), copied into out (cap bytes, NUL added). */
static int npy_string(npy_cursor *c, char *out, size_t cap)
{
    npy_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap)
            return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return 0;
    c->p++;
    out[n] = '\0';
    return 1;
}

static int npy_word(npy_cursor *c, const char *w)
{
    size_t n = strlen(w);
    npy_ws(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* "(a, b, c)" / "(a,)" / "()": decimal integers, each < 2^40. */
static int npy_shape(npy_cursor *c, npy_header *h)
{
    if (!npy_eat(c, '('))
        return 0;
    h->ndim = 0;
    for (;;) {
        if (npy_eat(c, ')'))
            return 1;
        npy_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9' || h->ndim == NPY_MAX_NDIM)
            return 0;
        uint64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            v = v * 10 + (uint64_t)(*c->p++ - '0');
            if (v >= (1ull << 40))
                return 0;
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2 long */
            c->p++;
        h->shape[h->ndim++] = v;
        if (npy_eat(c, ','))
            continue;
        /* "(a)" is an int in Python, not a tuple: one dimension needs "(a,)" */
        return h->ndim != 1 && npy_eat(c, ')');
    }
}

static int npy_parse_dict(const char *path, const char *text, size_t len, npy_header *h)
{
    npy_cursor c = {text, text + len};
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    char key[32];
    /* numpy ends the header with '\n' after the padding */
    if (len == 0 || text[len - 1] != '\n')
        return stk_fail(STK_EFORMAT, "%s: .npy header does not end with a newline", path);
    c.end--;
    if (!npy_eat(&c, '{'))
        return stk_fail(STK_EFORMAT, "%s: .npy header is not a dict literal ('{' expected)", path);
    for (;;) {
        if (npy_eat(&c, '}'))
            break;
        if (!npy_string(&c, key, sizeof key))
            return stk_fail(STK_EFORMAT, "%s: .npy header: a quoted key or '}' expected at byte %zu",
                            path, (size_t)(c.p - text));
        if (!npy_eat(&c, ':'))
            return stk_fail(STK_EFORMAT, "%s: .npy header: ':' expected after key '%s'", path, key);
        if (!strcmp(key, "descr")) {
            if (seen_descr++ || !npy_string(&c, h->descr, sizeof h->descr))
                return stk_fail(STK_EFORMAT, "%s: .npy header: bad or repeated 'descr'", path);
        } else if (!strcmp(key, "fortran_order")) {
            if (seen_fortran++)
                return stk_fail(STK_EFORMAT, "%s: .npy header: 'fortran_order' given twice", path);
            if (npy_word(&c, "True"))
                h->fortran = 1;
            else if (npy_word(&c, "False"))
                h->fortran = 0;
            else
                return stk_fail(STK_EFORMAT, "%s: .npy header: 'fortran_order' is not True or False",
                                path);
        } else if (!strcmp(key, "shape")) {
            if (seen_shape++ || !npy_shape(&c, h))
                return stk_fail(STK_EFORMAT,
                                "%s: .npy header: bad or repeated 'shape' (a tuple of integers "
                                "expected)", path);
        } else {
            return stk_fail(STK_EFORMAT,
                            "%s: .npy header: unknown key '%s' (only descr, fortran_order and "
                            "shape are allowed)", path, key);
        }
        if (npy_eat(&c, ','))
            continue;
        if (npy_eat(&c, '}'))
            break;
        return stk_fail(STK_EFORMAT, "%s: .npy header: ',' or '}' expected at byte %zu", path,
                        (size_t)(c.p - text));
    }
    npy_ws(&c);
    if (c.p != c.end)
        return stk_fail(STK_EFORMAT, "%s: .npy header: unexpected text after the dict", path);
    if (!seen_descr || !seen_fortran || !seen_shape)
        return stk_fail(STK_EFORMAT, "%s: .npy header lacks '%s'", path,
                        !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    return 0;
}

/* Magic, version, header length and dict of a mapped file. */
static int npy_parse(const char *path, const stk_mapped_file *m, npy_header *h)
{
    const uint8_t *d = m->data;
    uint32_t hlen, pre;
    memset(h, 0, sizeof *h);
    if (m->size < 10 || memcmp(d, "\x93NUMPY", 6) != 0)
        return stk_fail(STK_EFORMAT, "%s: not a .npy file (bad magic; expected \\x93NUMPY)", path);
    if (d[6] == 1 && d[7] == 0) {
        hlen = (uint32_t)d[8] | (uint32_t)d[9] << 8;
        pre = 10;
    } else if (d[6] == 2 && d[7] == 0) {
        if (m->size < 12)
            return stk_fail(STK_EFORMAT, "%s: truncated .npy header", path);
        hlen = (uint32_t)d[8] | (uint32_t)d[9] << 8 | (uint32_t)d[10] << 16 |
               (uint32_t)d[11] << 24;
        pre = 12;
    } else {
        return stk_fail(STK_EUNSUPPORTED, "%s: .npy format version %u.%u (1.0 and 2.0 are read)",
                        path, d[6], d[7]);
    }
    if (hlen > NPY_MAX_HEADER)
        return stk_fail(STK_ELIMIT, "%s: .npy header of %u bytes (at most %u)", path, hlen,
                        NPY_MAX_HEADER);
    if ((uint64_t)pre + hlen > m->size)
        return stk_fail(STK_EFORMAT, "%s: truncated: the .npy header needs %u bytes, the file has "
                                     "%zu", path, pre + hlen, m->size);
    for (uint32_t i = 0; i < hlen; i++)
        if (d[pre + i] < 0x20 && d[pre + i] != '\n' && d[pre + i] != '\t')
            return stk_fail(STK_EFORMAT, "%s: .npy header holds a control byte", path);
    h->data_offset = pre + hlen;
    int rc = npy_parse_dict(path, (const char *)d + pre, hlen, h);
    if (rc < 0)
        return rc;
    if (h->fortran)
        return stk_fail(STK_EUNSUPPORTED,
                        "%s: fortran_order is True; save a C-order array "
                        "(numpy.ascontiguousarray)", path);
    return 0;
}

/* Items of the array, with `itemsize`, must fill the file exactly. */
static int npy_check_size(const char *path, const stk_mapped_file *m, const npy_header *h,
                          uint64_t items, uint64_t itemsize, uint64_t max_bytes)
{
    uint64_t bytes, end;
    if (!stk_mul_ok(items, itemsize, &bytes) || !stk_add_ok(bytes, h->data_offset, &end) ||
        bytes > max_bytes)
        return stk_fail(STK_ELIMIT, "%s: the shape's data size passes the max_bytes limit of %llu",
                        path, (unsigned long long)max_bytes);
    if (end > m->size)
        return stk_fail(STK_EFORMAT,
                        "%s: truncated: the shape needs %llu data bytes after the %llu-byte "
                        "header, the file has %llu",
                        path, (unsigned long long)bytes, (unsigned long long)h->data_offset,
                        (unsigned long long)(m->size - h->data_offset));
    if (end < m->size)
        return stk_fail(STK_EFORMAT, "%s: %llu trailing bytes after the array's data", path,
                        (unsigned long long)(m->size - end));
    return 0;
}

/* --- reader ------------------------------------------------------------- */

static int stk_npy_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                        stk_scratch *scratch)
{
    const stk_npy_impl *m = ds->impl;
    (void)scratch;
    stk_sample_set_hwc(ds, m->pixels + index * m->sample_bytes, out);
    out->label = m->labels[index];
    return 0;
}

/* vtable.read_check: were sample `index`'s pixels still the file's after
 * use (a file truncated while open reads as zeros)? */
static int stk_npy_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_npy_impl *m = ds->impl;
    uint64_t valid;
    uint64_t off = (uint64_t)(m->pixels - m->images.data) + index * m->sample_bytes;
    if (stk_mapped_file_intact(&m->images, off, m->sample_bytes, &valid))
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: sample %llu: the images file was truncated while open (only its first "
                    "%llu of %zu bytes remain); the sample's bytes were lost",
                    ds->uri, (unsigned long long)index, (unsigned long long)valid,
                    m->images.size);
}

static void stk_npy_close(stk_dataset *ds)
{
    stk_npy_impl *m = ds->impl;
    stk_unmap_file(&m->images);
    free(m->labels);
    free(m);
    ds->impl = NULL;
}

/* vtable.label: the table built at open. */
static int stk_npy_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    *label = ((const stk_npy_impl *)ds->impl)->labels[index];
    return 0;
}

static const stk_dataset_vtable stk_npy_vt = {.format = "npy", .read = stk_npy_read,
                                              .label = stk_npy_label,
                                              .close = stk_npy_close,
                                              .read_check = stk_npy_read_check};

/* --- .npz: an uncompressed ZIP archive of .npy members ------------------- */

#define ZIP_EOCD 22u      /* end of central directory record, fixed part */
#define ZIP_CEN 46u       /* central directory entry, fixed part */
#define ZIP_LOC 30u       /* local file header, fixed part */
#define ZIP_MAX_ENTRIES 65536u

static uint16_t zip16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t zip32(const uint8_t *p) { return (uint32_t)zip16(p) | (uint32_t)zip16(p + 2) << 16; }
static uint64_t zip64v(const uint8_t *p) { return (uint64_t)zip32(p) | (uint64_t)zip32(p + 4) << 32; }

/* The ZIP64 extended-information extra field (id 1) of an entry: replaces
 * each of *usize, *csize, *off that is saturated (0xFFFFFFFF), in that
 * order. 0, or -1 when a saturated value has no replacement. */
static int zip_zip64(const uint8_t *x, size_t xlen, uint64_t *usize, uint64_t *csize,
                     uint64_t *off)
{
    uint64_t *want[3] = {usize, csize, off};
    size_t i = 0;
    while (i + 4 <= xlen) {
        uint16_t id = zip16(x + i), len = zip16(x + i + 2);
        if (i + 4 + len > xlen)
            return -1;
        if (id == 1) {
            size_t at = i + 4;
            for (int k = 0; k < 3; k++) {
                if (!want[k] || *want[k] != 0xFFFFFFFFu)
                    continue;
                if (at + 8 > i + 4 + len)
                    return -1;
                *want[k] = zip64v(x + at);
                at += 8;
            }
            return 0;
        }
        i += 4 + (size_t)len;
    }
    for (int k = 0; k < 3; k++)
        if (want[k] && *want[k] == 0xFFFFFFFFu)
            return -1;
    return 0;
}

/*
 * Find member `name` (NAME or NAME.npy) of the archive mapped in *zip and
 * make *view the bytes of its data (no copy; guard NULL: the archive's
 * mapping is the one to check). *shown gets "FILE.npz member NAME.npy"
 * for messages (malloc'd). The end-of-central-directory record (the last
 * one, with its comment reaching the end of the file), its ZIP64 record
 * when a field is saturated, every central entry's bounds, then the
 * member's local header (same name and method, its data inside the
 * archive, before the central directory) are checked; a compressed or
 * encrypted member is refused. `crc`: check the member's CRC-32 too (the
 * labels, read whole anyway; the images' data is not read at open).
 */
static int npz_member(const char *path, const stk_mapped_file *zip, const char *name,
                      stk_mapped_file *view, char **shown, int crc)
{
    const uint8_t *d = zip->data;
    uint64_t size = zip->size, eocd = 0, entries, cd_size, cd_off;
    char want[256];
    int found = 0;
    size_t nl = strlen(name);
    snprintf(want, sizeof want, "%s%s", name,
             nl >= 4 && !strcmp(name + nl - 4, ".npy") ? "" : ".npy");
    size_t wl = strlen(want);
    if (!(*shown = malloc(strlen(path) + wl + 16)))
        return stk_fail(STK_ENOMEM, "out of memory opening %s", path);
    sprintf(*shown, "%s member %s", path, want);

    if (size < ZIP_EOCD)
        return stk_fail(STK_EFORMAT, "%s: not a .npz (ZIP) archive: %llu bytes", path,
                        (unsigned long long)size);
    for (uint64_t p = size - ZIP_EOCD + 1; p-- > 0 && size - p <= ZIP_EOCD + 65535u;) {
        if (d[p] == 'P' && d[p + 1] == 'K' && d[p + 2] == 5 && d[p + 3] == 6 &&
            p + ZIP_EOCD + zip16(d + p + 20) == size) {
            eocd = p;
            found = 1;
            break;
        }
    }
    if (!found)
        return stk_fail(STK_EFORMAT, "%s: not a .npz (ZIP) archive: no end-of-central-directory "
                                     "record", path);
    const uint8_t *e = d + eocd;
    if (zip16(e + 4) || zip16(e + 6) || zip16(e + 8) != zip16(e + 10))
        return stk_fail(STK_EUNSUPPORTED, "%s: a multi-disk ZIP archive", path);
    entries = zip16(e + 10);
    cd_size = zip32(e + 12);
    cd_off = zip32(e + 16);
    uint64_t cd_end_limit = eocd;
    if (entries == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        /* ZIP64: the locator just before the record points at the record */
        if (eocd < 20 || zip32(d + eocd - 20) != 0x07064b50u)
            return stk_fail(STK_EFORMAT, "%s: saturated ZIP fields without a ZIP64 locator", path);
        uint64_t r = zip64v(d + eocd - 20 + 8);
        if (r > eocd - 20 || eocd - 20 - r < 56 || zip32(d + r) != 0x06064b50u)
            return stk_fail(STK_EFORMAT, "%s: bad ZIP64 end-of-central-directory record", path);
        if (zip32(d + r + 16) || zip32(d + r + 20) || zip64v(d + r + 24) != zip64v(d + r + 32))
            return stk_fail(STK_EUNSUPPORTED, "%s: a multi-disk ZIP archive", path);
        entries = zip64v(d + r + 32);
        cd_size = zip64v(d + r + 40);
        cd_off = zip64v(d + r + 48);
        cd_end_limit = r;
    }
    if (cd_off > cd_end_limit || cd_size > cd_end_limit - cd_off)
        return stk_fail(STK_EFORMAT, "%s: the central directory (%llu bytes at %llu) lies outside "
                                     "the file", path, (unsigned long long)cd_size,
                        (unsigned long long)cd_off);
    if (entries > ZIP_MAX_ENTRIES)
        return stk_fail(STK_ELIMIT, "%s: %llu ZIP entries (at most %u)", path,
                        (unsigned long long)entries, ZIP_MAX_ENTRIES);

    uint64_t at = cd_off, end = cd_off + cd_size, usize = 0, csize = 0, loff = 0;
    uint32_t ccrc = 0;
    uint16_t method = 0, flags = 0;
    found = 0;
    for (uint64_t i = 0; i < entries; i++) {
        if (end - at < ZIP_CEN || zip32(d + at) != 0x02014b50u)
            return stk_fail(STK_EFORMAT, "%s: bad central directory entry %llu at byte %llu", path,
                            (unsigned long long)i, (unsigned long long)at);
        const uint8_t *c = d + at;
        uint64_t n = zip16(c + 28), x = zip16(c + 30), k = zip16(c + 32);
        if (end - at - ZIP_CEN < n + x + k)
            return stk_fail(STK_EFORMAT, "%s: central directory entry %llu at byte %llu runs past "
                                         "the directory", path, (unsigned long long)i,
                            (unsigned long long)at);
        if (n == wl && !memcmp(c + ZIP_CEN, want, wl)) {
            if (found)
                return stk_fail(STK_EFORMAT, "%s: two members named %s", path, want);
            found = 1;
            flags = zip16(c + 8);
            method = zip16(c + 10);
            ccrc = zip32(c + 16);
            csize = zip32(c + 20);
            usize = zip32(c + 24);
            loff = zip32(c + 42);
            if (zip_zip64(c + ZIP_CEN + n, (size_t)x, &usize, &csize, &loff) < 0)
                return stk_fail(STK_EFORMAT, "%s: saturated sizes without a ZIP64 extra field",
                                *shown);
        }
        at += ZIP_CEN + n + x + k;
    }
    if (at != end)
        return stk_fail(STK_EFORMAT, "%s: the central directory's %llu entries end at byte %llu, "
                                     "it is %llu bytes long", path, (unsigned long long)entries,
                        (unsigned long long)(at - cd_off), (unsigned long long)cd_size);
    if (!found)
        return stk_fail(STK_ENOENT, "%s: no member %s (np.savez(FILE, images=..., labels=...) "
                                    "writes images.npy and labels.npy; ?images=NAME&labels=NAME "
                                    "picks others)", path, want);
    if (flags & 1)
        return stk_fail(STK_EUNSUPPORTED, "%s: encrypted", *shown);
    if (method != 0)
        return stk_fail(STK_EUNSUPPORTED, "%s: compressed (ZIP method %u%s); members are mapped "
                                          "in place, so write the archive with np.savez, not "
                                          "np.savez_compressed", *shown, method,
                        method == 8 ? ", deflate" : "");
    if (csize != usize)
        return stk_fail(STK_EFORMAT, "%s: stored, but %llu bytes stand for %llu", *shown,
                        (unsigned long long)csize, (unsigned long long)usize);
    /* the local header */
    if (loff > cd_off || cd_off - loff < ZIP_LOC || zip32(d + loff) != 0x04034b50u)
        return stk_fail(STK_EFORMAT, "%s: bad local header at byte %llu", *shown,
                        (unsigned long long)loff);
    const uint8_t *l = d + loff;
    uint64_t data = loff + ZIP_LOC + zip16(l + 26) + zip16(l + 28);
    if (zip16(l + 26) != wl || memcmp(l + ZIP_LOC, want, wl) || zip16(l + 8) != method)
        return stk_fail(STK_EFORMAT, "%s: the local header at byte %llu disagrees with the "
                                     "central directory", *shown, (unsigned long long)loff);
    if (data > cd_off || usize > cd_off - data)
        return stk_fail(STK_EFORMAT, "%s: truncated: %llu data bytes at byte %llu run past the "
                                     "members' area (%llu bytes)", *shown,
                        (unsigned long long)usize, (unsigned long long)data,
                        (unsigned long long)cd_off);
    view->data = d + data;
    view->size = (size_t)usize;
    view->guard = NULL;
    if (crc) {
        uLong v = crc32(0L, Z_NULL, 0);
        for (uint64_t o = 0; o < usize;) {
            uInt step = usize - o > (1u << 30) ? (1u << 30) : (uInt)(usize - o);
            v = crc32(v, view->data + o, step);
            o += step;
        }
        if ((uint32_t)v != ccrc)
            return stk_fail(STK_EFORMAT, "%s: CRC-32 mismatch (stored %08x, data %08x)", *shown,
                            ccrc, (uint32_t)v);
    }
    return 0;
}

/* Open the arrays: the files images_path and labels_path, or (npz_path not
 * NULL) the members images_path and labels_path of that archive. */
static int stk_npy_open_arrays(const char *uri, const char *npz_path, const char *images_path,
                               const char *labels_path, const stk_dataset_options *opts,
                               stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_mapped_file lm = {0};
    stk_mapped_file iv = {0}, lv = {0}; /* views of the two arrays' bytes */
    char *iname = NULL, *lname = NULL;
    npy_header ih, lh;
    stk_dataset *ds = NULL;
    stk_npy_impl *m;
    uint64_t n, px, sample;
    uint32_t lsize;
    int rc;

    ds = stk_dataset_alloc(&stk_npy_vt, uri);
    if (!ds)
        return STK_ENOMEM;
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = m;

    if (npz_path) {
        if ((rc = stk_map_file(npz_path, o.max_bytes, &m->images)) < 0 ||
            (rc = npz_member(npz_path, &m->images, images_path, &iv, &iname, 0)) < 0 ||
            (rc = npz_member(npz_path, &m->images, labels_path, &lv, &lname, 1)) < 0)
            goto fail;
        images_path = iname;
        labels_path = lname;
    } else {
        if ((rc = stk_map_file(images_path, o.max_bytes, &m->images)) < 0)
            goto fail;
        iv = m->images;
    }
    /* Read in random order by views: the .stk reader's mapping advice. */
    stk_mapping_advise(m->images.data, 0, m->images.size, stk_random_map_advice(m->images.size));

    /* Images. */
    if (iv.size == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: empty file (expected a .npy images array)", images_path);
        goto fail;
    }
    if ((rc = npy_parse(images_path, &iv, &ih)) < 0)
        goto fail;
    if (strcmp(ih.descr, "|u1") && strcmp(ih.descr, "<u1")) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s: images dtype '%s' (uint8, '|u1', expected)",
                      images_path, ih.descr);
        goto fail;
    }
    if (ih.ndim != 3 && ih.ndim != 4) {
        rc = stk_fail(STK_EFORMAT, "%s: images shape has %u dimensions (N,H,W or N,H,W,C "
                                   "expected)", images_path, ih.ndim);
        goto fail;
    }
    n = ih.shape[0];
    uint64_t c = ih.ndim == 4 ? ih.shape[3] : 1;
    if (!n || !ih.shape[1] || !ih.shape[2] || c < 1 || c > 4) {
        rc = stk_fail(STK_EFORMAT, "%s: images shape (%llu, %llu, %llu, %llu): every dimension "
                                   "must be nonzero and C 1 to 4", images_path,
                      (unsigned long long)n, (unsigned long long)ih.shape[1],
                      (unsigned long long)ih.shape[2], (unsigned long long)c);
        goto fail;
    }
    if (n > o.max_samples || !stk_mul_ok(ih.shape[1], ih.shape[2], &px) || px > o.max_pixels ||
        ih.shape[1] > UINT32_MAX || ih.shape[2] > UINT32_MAX) {
        rc = stk_fail(STK_ELIMIT, "%s: %llu images of %llux%llu pass the limits (max_samples "
                                  "%llu, max_pixels %llu)", images_path, (unsigned long long)n,
                      (unsigned long long)ih.shape[1], (unsigned long long)ih.shape[2],
                      (unsigned long long)o.max_samples, (unsigned long long)o.max_pixels);
        goto fail;
    }
    sample = px * c;
    if ((rc = npy_check_size(images_path, &iv, &ih, n, sample, o.max_bytes)) < 0)
        goto fail;

    /* Labels. */
    if (!npz_path) {
        if ((rc = stk_map_file(labels_path, o.max_bytes, &lm)) < 0)
            goto fail;
        lv = lm;
    }
    if (lv.size == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: empty file (expected a .npy labels array)", labels_path);
        goto fail;
    }
    if ((rc = npy_parse(labels_path, &lv, &lh)) < 0)
        goto fail;
    if (!strcmp(lh.descr, "<i8"))
        lsize = 8;
    else if (!strcmp(lh.descr, "<i4"))
        lsize = 4;
    else if (!strcmp(lh.descr, "|u1") || !strcmp(lh.descr, "<u1"))
        lsize = 1;
    else {
        rc = stk_fail(STK_EUNSUPPORTED, "%s: labels dtype '%s' (int64 '<i8', int32 '<i4' or "
                                        "uint8 '|u1' expected)", labels_path, lh.descr);
        goto fail;
    }
    if (lh.ndim != 1 || lh.shape[0] != n) {
        rc = stk_fail(STK_EFORMAT, "%s: labels shape must be (%llu,) to match the images, it has "
                                   "%u dimensions (first %llu)", labels_path,
                      (unsigned long long)n, lh.ndim,
                      (unsigned long long)(lh.ndim ? lh.shape[0] : 0));
        goto fail;
    }
    if ((rc = npy_check_size(labels_path, &lv, &lh, n, lsize, o.max_bytes)) < 0)
        goto fail;
    if (n > SIZE_MAX / sizeof *m->labels ||
        !(m->labels = malloc((size_t)n * sizeof *m->labels))) {
        rc = stk_fail(STK_ENOMEM, "out of memory for %llu labels of %s", (unsigned long long)n,
                      labels_path);
        goto fail;
    }
    const uint8_t *ld = lv.data + lh.data_offset;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (lsize == 8)
            v = (int64_t)stk_rd64(ld + i * 8);
        else if (lsize == 4)
            v = (int32_t)stk_rd32(ld + i * 4);
        else
            v = ld[i];
        m->labels[i] = v;
    }
    stk_unmap_file(&lm);

    m->pixels = iv.data + ih.data_offset;
    m->sample_bytes = (size_t)sample;
    ds->count = n;
    ds->height = (uint32_t)ih.shape[1];
    ds->width = (uint32_t)ih.shape[2];
    ds->channels = (uint32_t)c;
    ds->num_classes = stk_num_classes(m->labels, n);
    free(iname);
    free(lname);
    *out = ds;
    return 0;

fail:
    free(iname);
    free(lname);
    stk_unmap_file(&lm);
    stk_dataset_close(ds);
    return rc;
}

static int npy_is_npz(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && !strcmp(path + n - 4, ".npz");
}

/* npy:IMAGES,LABELS or npy:DIR (DIR/images.npy, DIR/labels.npy), or
 * npy:FILE.npz[?images=NAME&labels=NAME]. */
static int stk_npy_open(const char *uri, const char *path, const char *query,
                        const stk_dataset_options *opts, stk_dataset **out)
{
    static const char *const keys[] = {"images", "labels"};
    char *names[2] = {NULL, NULL};
    char *images = NULL, *labels = NULL;
    const char *comma = strchr(path, ',');
    int rc = stk_query_names(uri, "npy", query, keys, names, 2);
    if (rc < 0)
        goto out;
    if (!comma && npy_is_npz(path)) {
        rc = stk_npy_open_arrays(uri, path, names[0] ? names[0] : "images",
                                 names[1] ? names[1] : "labels", opts, out);
        goto out;
    }
    if (names[0] || names[1]) {
        rc = stk_fail(STK_EINVAL, "npy: URI '%s': the query keys images and labels name the "
                                  "members of a .npz file; this form takes none", uri);
        goto out;
    }
    if (comma) {
        if (strchr(comma + 1, ',') || comma == path || !comma[1]) {
            rc = stk_fail(STK_EINVAL, "npy: URI '%s' must name two files, IMAGES,LABELS, "
                                      "joined by one ',' (or a directory)", uri);
            goto out;
        }
        images = malloc((size_t)(comma - path) + 1);
        labels = stk_strdup(comma + 1);
        if (!images || !labels) {
            rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
            goto out;
        }
        memcpy(images, path, (size_t)(comma - path));
        images[comma - path] = '\0';
    } else {
        if (!stk_path_is_dir(path)) {
            rc = stk_fail(stk_path_exists(path) ? STK_EINVAL : STK_ENOENT,
                          "npy: %s: %s (expected IMAGES.npy,LABELS.npy, FILE.npz or a directory "
                          "holding images.npy and labels.npy)",
                          path, stk_path_exists(path) ? "not a directory" : "no such directory");
            goto out;
        }
        images = stk_path_join(path, "images.npy");
        labels = stk_path_join(path, "labels.npy");
        if (!images || !labels) {
            rc = STK_ENOMEM;
            goto out;
        }
    }
    rc = stk_npy_open_arrays(uri, NULL, images, labels, opts, out);
out:
    free(names[0]);
    free(names[1]);
    free(images);
    free(labels);
    return rc;
}

/* A directory holding both images.npy and labels.npy, or a *.npz file. */
static int stk_npy_detect(const char *path)
{
    char *a, *b;
    int r;
    if (npy_is_npz(path))
        return stk_path_is_file(path);
    if (!stk_path_is_dir(path))
        return 0;
    a = stk_path_join(path, "images.npy");
    b = stk_path_join(path, "labels.npy");
    r = a && b ? stk_path_is_file(a) && stk_path_is_file(b) : STK_ENOMEM;
    free(a);
    free(b);
    return r;
}

const stk_reader stk_reader_npy = {
    "npy", "npy:IMAGES,LABELS or npy:DIR or npy:FILE.npz[?images=NAME&labels=NAME]",
    "NumPy .npy: uint8 images (N,H,W[,C]), int labels (N,); DIR/{images,labels}.npy, or an "
    "uncompressed .npz",
    stk_npy_open, NULL, stk_npy_detect, "images.npy and labels.npy (NumPy)", "*.npz"};
