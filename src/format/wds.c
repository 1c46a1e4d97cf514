/*
 * wds.c — WebDataset tar shards: samples are runs of tar members sharing a
 * key, read in place (the image member is a view into the mapped tar).
 *
 * URI: "wds:PATH[?image=EXTS][&label=EXTS][&missing=error|skip]", also
 * "webdataset:PATH". PATH is a .tar file, a directory (its *.tar files,
 * not recursive), a glob ("shard-*.tar"), or a brace pattern as WebDataset
 * users write it, "shard-{000000..000099}.tar" ({A..B}: the integers from
 * A to B, counting down when B < A, zero-padded to the longer of the two
 * when either is written with a leading zero; {x,y,z}: the alternatives;
 * several groups multiply out, the leftmost varying slowest; at most 1 M
 * names; no nesting, no escapes). Each expanded name may itself be a file,
 * a directory or a glob. Files keep the order of the expansion (each glob
 * or directory sorted by name); a file named twice is an error. EXTS are
 * member extensions separated by ';' (WebDataset's to_tuple("jpg;png"))
 * or ',', in order of preference, matched case-insensitively against the
 * whole extension: image=jpg;jpeg;png;webp;bmp;tif;tiff;gif (every format
 * the codec decodes, docs/codec.md) and label=cls;txt by default.
 * A bare path is detected when it is a file named *.tar, a directory that
 * directly holds a *.tar file and is not an image folder (those stay with
 * imagefolder:), or a pattern ending in .tar with * ? [ or {.
 *
 * Grouping, as WebDataset's tariterators.py does it (base_plus_ext,
 * group_by_keys, tar_file_iterator), so the same tar gives the same
 * samples: only regular members count (type '0', '\0' and '7'; a '\0'
 * member whose name ends in '/' is a directory); a member whose first path
 * component is "__X__" (metadata) is left out; the name is split by the
 * regular expression ^((?:.*\/|)[^.]+)[.]([^/]*)$ into key and extension,
 * i.e. at the first '.' of the basename, the key keeping the directories
 * ("train/a.b/x.seg.png": key "train/a.b/x", extension "seg.png"; a
 * basename starting with '.' splits as the regex does, "d/.x.jpg": key
 * "d/", extension "x.jpg", when "d" holds no '.'), and a name the
 * expression does not match (no '.' in the basename) is left out; the
 * extension is lowercased. A sample is a run of consecutive members with
 * the same key within one tar (a key met again later starts a new sample,
 * as in WebDataset); the same extension twice in a run is an error, as in
 * WebDataset. A sample takes its image from the first of the image
 * extensions it has and its label from the first label extension; the
 * label member holds a decimal integer (optional sign, surrounding
 * whitespace allowed; anything else is an error naming the member and its
 * text). A sample lacking an image or a label member is an error naming
 * the tar, the key and what is missing, or with missing=skip it is left
 * out and recorded in ds->skipped (stk_dataset_skipped); never dropped in
 * silence.
 *
 * The index is built at open by walking the 512-byte headers of each tar
 * (mapped whole through the recordset, src/format/recordset.h). Checked for
 * every header: the checksum (the unsigned and the signed sum, as tar
 * accepts either), the size field (octal, or base-256 when its first byte
 * is 0x80; negative sizes refused), that the member lies inside the file.
 * Understood: ustar (name + prefix), GNU long names ('L'; 'K' long link
 * names skipped), pax extended headers ('x': path and size; 'g' global
 * headers are parsed and otherwise ignored; GNU sparse members refused).
 * The archive ends at the first all-zero block, after which only zero
 * bytes may follow (a second archive appended after the end marker would
 * otherwise be lost in silence), or at the end of the file right after a
 * member or after fewer than 512 zero bytes (as Python's tarfile accepts). A header cut short, a member
 * running past the end, a bad checksum, a compressed tar (gzip, bzip2, xz,
 * zstd magic) are errors naming the tar, the byte offset, the member where
 * known and the reason; they fail the open. Labels are parsed at open
 * (small members); the image's (offset, size) goes into the record table.
 *
 * Memory: 16 bytes per sample in the record table plus 16 here (label,
 * header offset). Member names are not kept: a message about a sample
 * re-reads its member's header ("TAR: member KEY.jpg (byte O)").
 *
 * Thread safety: built by one thread at open, immutable afterwards; read,
 * read_check, sample_name and access_hint may be called from any thread.
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "format/recordset.h"
#include "io/map_guard.h"
#include "io/source.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WDS_MAX_EXTS 16        /* extensions per query key */
#define WDS_EXT_CAP 32         /* bytes of one extension, with its NUL */
#define WDS_MAX_META (1u << 20) /* bytes of one long-name or pax header */
#define WDS_MAX_LABEL 4096     /* bytes of a label member */
#define WDS_MAX_GROUP 1024     /* members sharing one key */
#define WDS_MAX_EXPAND 1000000 /* names from one brace pattern */

enum { WDS_IMAGE, WDS_LABEL };

/* What the query asked for. */
typedef struct wds_spec {
    char ext[2][WDS_MAX_EXTS][WDS_EXT_CAP]; /* lowercase, in preference order */
    uint32_t n[2];
    int skip_missing;
} wds_spec;

/* Per sample, beside the record table's (offset, size) of its image. */
typedef struct wds_sample {
    int64_t label;
    uint64_t hdr; /* first header block of the image member (its 'L'/'x' included) */
} wds_sample;

typedef struct wds_impl {
    stk_recordset rs;    /* owned: one record (the image) per sample */
    wds_sample *samples; /* owned, rs.count entries (cap allocated) */
    uint64_t cap;
} wds_impl;

/* ------------------------------------------------------------------------ */
/* The tar walk                                                             */
/* ------------------------------------------------------------------------ */

/* Walks the members of one tar, from `pos`. Owns its buffers. */
typedef struct tar_walk {
    const stk_recfile *f; /* lent: path, map (or src for pread), size */
    uint64_t pos;         /* next header block */
    int quiet;            /* 1: errors are returned without stk_fail */
    uint8_t blk[512];     /* a header read by pread (no mapping) */
    char *buf;            /* owned: meta data read by pread */
    size_t buf_cap;
    char *name; /* owned: the current member's name, NUL-terminated */
    size_t name_cap;
    char *lname; /* owned: a pending GNU long name / pax path */
    size_t lname_cap;
} tar_walk;

typedef struct tar_member {
    uint64_t hdr;  /* first header block, its 'L'/'x' headers included */
    uint64_t data; /* first data byte */
    uint64_t size;
    char type;
    int regular;      /* a regular file (the only kind that makes samples) */
    const char *name; /* lent from the walk until the next call */
    size_t name_len;
} tar_member;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int tar_err(const tar_walk *w, int code, const char *fmt, ...)
{
    if (w->quiet)
        return code;
    va_list ap;
    va_start(ap, fmt);
    stk_failv(code, fmt, ap);
    va_end(ap);
    return code;
}

/* Bytes of the file for a message: printable ASCII as it is, every other
 * byte (control bytes, an ESC that would drive the terminal, bytes past
 * 0x7e) and the backslash as \xNN, up to the first NUL of the n bytes
 * (tar fields end there); cut with "..." where buf is full. Returns buf. */
static const char *wds_escape(const void *bytes, size_t n, char *buf, size_t cap)
{
    const uint8_t *b = bytes;
    size_t o = 0;
    for (size_t i = 0; i < n && b[i]; i++) {
        char one[5];
        int k = b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\'
                    ? snprintf(one, sizeof one, "%c", b[i])
                    : snprintf(one, sizeof one, "\\x%02x", b[i]);
        if (o + (size_t)k + 4 > cap) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, one, (size_t)k);
        o += (size_t)k;
    }
    buf[o] = '\0';
    return buf;
}

static void tar_walk_free(tar_walk *w)
{
    free(w->buf);
    free(w->name);
    free(w->lname);
}

static int tar_reserve(const tar_walk *w, char **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < n)
        c *= 2;
    char *g = realloc(*p, c);
    if (!g)
        return tar_err(w, STK_ENOMEM, "%s: out of memory", w->f->path);
    *p = g;
    *cap = c;
    return 0;
}

/* Bytes [off, off + n) of the file (inside it): the mapping, or a pread
 * into `into` (blk for a header, buf for meta data). */
static int tar_bytes(tar_walk *w, uint64_t off, size_t n, int header, const uint8_t **out)
{
    if (w->f->map) {
        *out = w->f->map + off;
        return 0;
    }
    uint8_t *dst = w->blk;
    if (!header) {
        int rc = tar_reserve(w, &w->buf, &w->buf_cap, n ? n : 1);
        if (rc < 0)
            return rc;
        dst = (uint8_t *)w->buf;
    }
    int rc = stk_source_pread(w->f->src, dst, n, off);
    if (rc < 0)
        return rc; /* the source's message names the file */
    *out = dst;
    return 0;
}

/* A numeric field as Python's tarfile.nti reads it: base-256 when the
 * first byte is 0x80 (0xff: negative, refused), else octal digits up to the
 * first NUL, surrounding spaces allowed, empty = 0. 0 or -1. */
static int tar_number(const uint8_t *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] == 0x80 || f[0] == 0xff) {
        if (f[0] == 0xff)
            return -1;
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = v << 8 | f[i];
        }
        *out = v;
        return 0;
    }
    size_t end = 0;
    while (end < n && f[end])
        end++;
    size_t i = 0;
    while (i < end && (f[i] == ' ' || f[i] == '\t' || f[i] == '\n' || f[i] == '\r' ||
                       f[i] == '\v' || f[i] == '\f'))
        i++;
    while (end > i && (f[end - 1] == ' ' || f[end - 1] == '\t' || f[end - 1] == '\n' ||
                       f[end - 1] == '\r' || f[end - 1] == '\v' || f[end - 1] == '\f'))
        end--;
    for (; i < end; i++) {
        if (f[i] < '0' || f[i] > '7' || (v >> 60))
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    *out = v;
    return 0;
}

static size_t tar_strnlen(const uint8_t *s, size_t n)
{
    const uint8_t *z = memchr(s, 0, n);
    return z ? (size_t)(z - s) : n;
}

static int tar_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Set the pending long name to `s` (n bytes, no NUL inside). */
static int tar_set_lname(tar_walk *w, const char *s, size_t n)
{
    int rc = tar_reserve(w, &w->lname, &w->lname_cap, n + 1);
    if (rc < 0)
        return rc;
    memcpy(w->lname, s, n);
    w->lname[n] = '\0';
    return 0;
}

/* The records of a pax header ("LEN KEY=VALUE\n" ...) at byte `off`:
 * path and size kept for the next member ('x'), everything checked. */
static int tar_pax(tar_walk *w, const uint8_t *d, size_t n, uint64_t off, int global,
                   int *have_path, int *have_size, uint64_t *size)
{
    size_t i = 0;
    while (i < n) {
        if (!d[i] && tar_zero(d + i, n - i)) /* NUL padding, as some writers leave */
            break;
        size_t len = 0, j = i;
        while (j < n && d[j] >= '0' && d[j] <= '9' && len < n)
            len = len * 10 + (size_t)(d[j++] - '0');
        if (j == i || j >= n || d[j] != ' ' || len <= j - i + 1 || len > n - i ||
            d[i + len - 1] != '\n')
            return tar_err(w, STK_EFORMAT,
                           "%s: byte %llu: pax header: malformed record at its byte %zu (expected "
                           "\"LENGTH KEY=VALUE\\n\")",
                           w->f->path, (unsigned long long)off, i);
        const uint8_t *kv = d + j + 1, *end = d + i + len - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq || eq == kv)
            return tar_err(w, STK_EFORMAT,
                           "%s: byte %llu: pax header: record at its byte %zu has no KEY=VALUE",
                           w->f->path, (unsigned long long)off, i);
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        const uint8_t *val = eq + 1;
        if (!global && klen == 4 && !memcmp(kv, "path", 4)) {
            if (memchr(val, 0, vlen))
                return tar_err(w, STK_EFORMAT, "%s: byte %llu: pax header: path holds a NUL byte",
                               w->f->path, (unsigned long long)off);
            int rc = tar_set_lname(w, (const char *)val, vlen);
            if (rc < 0)
                return rc;
            *have_path = 1;
        } else if (!global && klen == 4 && !memcmp(kv, "size", 4)) {
            uint64_t v = 0;
            size_t k = 0;
            for (; k < vlen && val[k] >= '0' && val[k] <= '9' && !(v >> 59); k++)
                v = v * 10 + (uint64_t)(val[k] - '0');
            char esc[200];
            if (!vlen || k != vlen)
                return tar_err(w, STK_EFORMAT,
                               "%s: byte %llu: pax header: size '%s' is not a decimal number",
                               w->f->path, (unsigned long long)off,
                               wds_escape(val, vlen > 40 ? 40 : vlen, esc, sizeof esc));
            *size = v;
            *have_size = 1;
        } else if (klen > 11 && !memcmp(kv, "GNU.sparse.", 11)) {
            char esc[200];
            return tar_err(w, STK_EUNSUPPORTED,
                           "%s: byte %llu: a GNU sparse member (pax %s); sparse files are not "
                           "read (write the tar without --sparse)",
                           w->f->path, (unsigned long long)off, wds_escape(kv, klen, esc, sizeof esc));
        }
        i += len;
    }
    return 0;
}

/* The next member from w->pos: 1 and *m, 0 at the end of the archive, or
 * a negative code (stk_fail unless quiet) naming the file, byte and reason. */
static int tar_next(tar_walk *w, tar_member *m)
{
    const char *path = w->f->path;
    const uint64_t fsize = w->f->size;
    int have_lname = 0, have_psize = 0, rc;
    uint64_t psize = 0, first = w->pos;
    const char *pending = NULL; /* what a dangling meta header was */
    for (;;) {
        const uint64_t pos = w->pos;
        const uint8_t *h;
        if (pos >= fsize) {
            if (pending)
                return tar_err(w, STK_EFORMAT,
                               "%s: byte %llu: the file ends after a %s header, before its member",
                               path, (unsigned long long)first, pending);
            return 0;
        }
        if (fsize - pos < 512) {
            const uint8_t *b;
            if ((rc = tar_bytes(w, pos, (size_t)(fsize - pos), 1, &b)) < 0)
                return rc;
            if (!pending && tar_zero(b, (size_t)(fsize - pos))) { /* a short zero tail */
                w->pos = fsize;
                return 0;
            }
            return tar_err(w, STK_EFORMAT,
                           "%s: byte %llu: truncated header (%llu of its 512 bytes are in the "
                           "file)",
                           path, (unsigned long long)pos, (unsigned long long)(fsize - pos));
        }
        if ((rc = tar_bytes(w, pos, 512, 1, &h)) < 0)
            return rc;
        /* Both checksums in one pass the compiler vectorises: the signed
         * sum is the unsigned one less 256 per byte >= 0x80. The field
         * itself counts as 8 spaces. An all-zero block sums to 0. */
        uint32_t sum_u = 0, high = 0; /* at most 512 * 255 */
        for (size_t k = 0; k < 512; k++) {
            sum_u += h[k];
            high += h[k] >> 7;
        }
        if (sum_u == 0) {
            if (pending)
                return tar_err(w, STK_EFORMAT,
                               "%s: byte %llu: the archive ends after a %s header, before its "
                               "member",
                               path, (unsigned long long)first, pending);
            /* The end marker; what follows must be zeros (the second zero
             * block, the padding to the record size). */
            for (uint64_t off = pos + 512; off < fsize;) {
                size_t n = fsize - off < 512 ? (size_t)(fsize - off) : 512;
                const uint8_t *b;
                if ((rc = tar_bytes(w, off, n, 1, &b)) < 0)
                    return rc;
                for (size_t k = 0; k < n; k++)
                    if (b[k])
                        return tar_err(w, STK_EFORMAT,
                                       "%s: byte %llu: data after the end-of-archive marker at "
                                       "byte %llu (a second archive appended? garbage?); "
                                       "refusing to leave it unread",
                                       path, (unsigned long long)(off + k),
                                       (unsigned long long)pos);
                off += n;
            }
            w->pos = fsize;
            return 0;
        }
        for (size_t k = 148; k < 156; k++) {
            sum_u -= h[k];
            high -= h[k] >> 7;
        }
        sum_u += 256;
        const int64_t sum_s = (int64_t)sum_u - 256 * (int64_t)high;
        uint64_t stored;
        if (tar_number(h + 148, 8, &stored) < 0 ||
            (stored != sum_u && (int64_t)stored != sum_s)) {
            if (pos == 0 && ((h[0] == 0x1f && h[1] == 0x8b) || !memcmp(h, "BZh", 3) ||
                             !memcmp(h, "\xfd" "7zXZ", 5) || !memcmp(h, "\x28\xb5\x2f\xfd", 4)))
                return tar_err(w, STK_EUNSUPPORTED,
                               "%s: a compressed tar (%s); WebDataset shards are read "
                               "uncompressed, for random access (decompress it first)",
                               path,
                               h[0] == 0x1f ? "gzip" : h[0] == 'B' ? "bzip2"
                                            : h[0] == 0xfd ? "xz" : "zstd");
            char esc[40];
            return tar_err(w, STK_EFORMAT,
                           "%s: byte %llu: header checksum mismatch (stored '%s', computed "
                           "%06llo)%s",
                           path, (unsigned long long)pos, wds_escape(h + 148, 8, esc, sizeof esc),
                           (unsigned long long)sum_u,
                           pos == 0 ? "; not a tar archive?" : "");
        }
        size_t nlen = tar_strnlen(h, 100);
        uint64_t size;
        char esc_name[420], esc[60];
        if (tar_number(h + 124, 12, &size) < 0)
            return tar_err(w, STK_EFORMAT, "%s: byte %llu: member '%s': bad size field '%s'", path,
                           (unsigned long long)pos, wds_escape(h, nlen, esc_name, sizeof esc_name),
                           wds_escape(h + 124, 12, esc, sizeof esc));
        const char type = (char)h[156];
        const uint64_t data = pos + 512;
        if (type == 'L' || type == 'K' || type == 'x' || type == 'g') {
            const char *what = type == 'L' ? "GNU long name" : type == 'K' ? "GNU long link name"
                               : type == 'x'                ? "pax extended"
                                                            : "pax global";
            if (size > WDS_MAX_META)
                return tar_err(w, STK_ELIMIT, "%s: byte %llu: %s header of %llu bytes (at most %u)",
                               path, (unsigned long long)pos, what, (unsigned long long)size,
                               WDS_MAX_META);
            if (size > fsize - data)
                return tar_err(w, STK_EFORMAT,
                               "%s: byte %llu: %s header: its %llu bytes run past the end of the "
                               "file (%llu bytes)",
                               path, (unsigned long long)pos, what, (unsigned long long)size,
                               (unsigned long long)fsize);
            const uint8_t *d;
            if ((rc = tar_bytes(w, data, (size_t)size, 0, &d)) < 0)
                return rc;
            if (type == 'L') {
                if ((rc = tar_set_lname(w, (const char *)d, tar_strnlen(d, (size_t)size))) < 0)
                    return rc;
                have_lname = 1;
            } else if (type == 'x' || type == 'g') {
                if ((rc = tar_pax(w, d, (size_t)size, pos, type == 'g', &have_lname, &have_psize,
                                  &psize)) < 0)
                    return rc;
            }
            if (type != 'g')
                pending = what;
            w->pos = data + ((size + 511) & ~(uint64_t)511);
            if (type == 'g' && !pending)
                first = w->pos;
            continue;
        }
        if (type == 'S')
            return tar_err(w, STK_EUNSUPPORTED,
                           "%s: byte %llu: member '%s' is a GNU sparse file; sparse files are "
                           "not read (write the tar without --sparse)",
                           path, (unsigned long long)pos,
                           wds_escape(h, nlen, esc_name, sizeof esc_name));
        /* The name: a pending long name / pax path, else prefix/name. */
        size_t len;
        if (have_lname) {
            len = strlen(w->lname);
            if ((rc = tar_reserve(w, &w->name, &w->name_cap, len + 1)) < 0)
                return rc;
            memcpy(w->name, w->lname, len + 1);
        } else {
            size_t plen = !memcmp(h + 257, "ustar\0", 6) ? tar_strnlen(h + 345, 155) : 0;
            if ((rc = tar_reserve(w, &w->name, &w->name_cap, plen + 1 + nlen + 1)) < 0)
                return rc;
            len = 0;
            if (plen) {
                memcpy(w->name, h + 345, plen);
                w->name[plen] = '/';
                len = plen + 1;
            }
            memcpy(w->name + len, h, nlen);
            len += nlen;
            w->name[len] = '\0';
        }
        if (have_psize)
            size = psize;
        int old_dir = type == '\0' && len && w->name[len - 1] == '/';
        int regular = (type == '0' || type == '\0' || type == '7') && !old_dir;
        /* tarfile skips the data of regular members and of unknown types;
         * links, directories, devices and FIFOs have none. */
        int has_data = !old_dir && !(type >= '1' && type <= '6');
        if (has_data && size > fsize - data)
            return tar_err(w, STK_EFORMAT,
                           "%s: byte %llu: member '%s': its size, %llu bytes, runs past the end "
                           "of the file (%llu bytes): truncated tar or absurd size",
                           path, (unsigned long long)pos,
                           wds_escape(w->name, strlen(w->name), esc_name, sizeof esc_name),
                           (unsigned long long)size,
                           (unsigned long long)fsize);
        m->hdr = first;
        m->data = data;
        m->size = has_data ? size : 0;
        m->type = type;
        m->regular = regular;
        m->name = w->name;
        m->name_len = len;
        w->pos = has_data ? data + ((size + 511) & ~(uint64_t)511) : data;
        if (w->pos > fsize) /* the last member's padding cut off: its data is whole */
            w->pos = fsize;
        return 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Keys, as WebDataset splits them                                          */
/* ------------------------------------------------------------------------ */

/* base_plus_ext: ^((?:.*\/|)[^.]+)[.]([^/]*)$ on name[0..n). 1 with the
 * key length (the extension starts after it and its '.'), 0 when the
 * expression does not match. */
static int wds_split(const char *name, size_t n, size_t *key_len)
{
    size_t slash = n; /* last '/' */
    for (size_t i = n; i-- > 0;)
        if (name[i] == '/') {
            slash = i;
            break;
        }
    size_t base = slash == n ? 0 : slash + 1;
    const char *dot = memchr(name + base, '.', n - base);
    if (!dot)
        return 0;
    size_t d = (size_t)(dot - name);
    if (d > base) { /* "dir/key.ext" */
        *key_len = d;
        return 1;
    }
    /* The basename starts with '.': the regex backtracks to an earlier
     * '/', so [^.]+ spans the last directory and its '/', which then must
     * hold no '.' (and there must be a directory). */
    if (slash == n)
        return 0;
    size_t prev = 0;
    for (size_t i = slash; i-- > 0;)
        if (name[i] == '/') {
            prev = i + 1;
            break;
        }
    if (memchr(name + prev, '.', slash - prev))
        return 0;
    *key_len = d;
    return 1;
}

/* tar_file_iterator's metadata rule: "__X__" alone, or a first path
 * component "__X__" (re.match(r"__[^/]*__($|/)", name)). */
static int wds_is_meta(const char *name, size_t n)
{
    const char *slash = memchr(name, '/', n);
    size_t c = slash ? (size_t)(slash - name) : n;
    return c >= 4 && name[0] == '_' && name[1] == '_' && name[c - 1] == '_' && name[c - 2] == '_';
}

/* ------------------------------------------------------------------------ */
/* Samples                                                                  */
/* ------------------------------------------------------------------------ */

/* The run of members being grouped. */
typedef struct wds_group {
    int active;
    char *key; /* owned */
    size_t key_len, key_cap;
    uint64_t hdr; /* of its first member */
    uint32_t members;
    char *exts; /* owned: its extensions, lowercase, NUL after each */
    size_t exts_len, exts_cap;
    int rank[2];          /* the chosen image/label: index into the spec's list, -1 */
    uint64_t hdr_of[2], data_of[2], size_of[2];
    char ext_of[2][WDS_EXT_CAP]; /* the chosen members' extensions as written */
} wds_group;

/* The open's state across files. */
typedef struct wds_build {
    const wds_spec *spec;
    uint64_t max_samples;
    wds_impl *m;
    char **skipped; /* owned until handed to ds */
    uint64_t nskipped, skipped_cap;
    int64_t max_label, min_label;
} wds_build;

static int wds_note_skipped(wds_build *b, const char *msg)
{
    if (b->nskipped == b->skipped_cap) {
        uint64_t cap = b->skipped_cap ? b->skipped_cap * 2 : 16;
        char **g = realloc(b->skipped, (size_t)cap * sizeof *g);
        if (!g)
            return stk_fail(STK_ENOMEM, "out of memory");
        b->skipped = g;
        b->skipped_cap = cap;
    }
    if (!(b->skipped[b->nskipped] = stk_strdup(msg)))
        return STK_ENOMEM;
    b->nskipped++;
    return 0;
}

/* A label member's text: decimal, optional sign, whitespace around. */
static int wds_parse_label(const uint8_t *d, size_t n, int64_t *out)
{
    size_t i = 0;
#define WDS_WS(c)                                                                       \
    ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r' || (c) == '\v' || (c) == '\f')
    while (i < n && WDS_WS(d[i]))
        i++;
    while (n > i && WDS_WS(d[n - 1]))
        n--;
#undef WDS_WS
    int neg = 0;
    if (i < n && (d[i] == '+' || d[i] == '-'))
        neg = d[i++] == '-';
    if (i == n)
        return -1;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (d[i] < '0' || d[i] > '9')
            return -1;
        uint64_t dig = (uint64_t)(d[i] - '0');
        if (v > (lim - dig) / 10)
            return -1;
        v = v * 10 + dig;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

/* The group's extensions as ".a, .b" for messages. */
static void wds_exts_text(const char *exts, size_t len, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < len; i += strlen(exts + i) + 1) {
        int w = snprintf(buf + used, cap - used, "%s.%s", used ? ", " : "", exts + i);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
}

static void wds_spec_text(const wds_spec *s, int which, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < s->n[which]; i++) {
        int w = snprintf(buf + used, cap - used, "%s.%s", i ? ", " : "", s->ext[which][i]);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
}

/* The run is over: check it, and append its sample (or skip it). */
static int wds_group_close(wds_build *b, tar_walk *w, wds_group *g)
{
    if (!g->active)
        return 0;
    g->active = 0;
    const char *path = w->f->path;
    int keylen = g->key_len > 300 ? 300 : (int)g->key_len;
    if (g->rank[WDS_IMAGE] < 0 || g->rank[WDS_LABEL] < 0) {
        char has[512], want[512], msg[1600];
        int which = g->rank[WDS_IMAGE] < 0 ? WDS_IMAGE : WDS_LABEL;
        wds_exts_text(g->exts, g->exts_len, has, sizeof has);
        wds_spec_text(b->spec, which, want, sizeof want);
        snprintf(msg, sizeof msg,
                 "%s: sample '%.*s' (byte %llu): no %s member%s (looked for %s; it has %s)", path,
                 keylen, g->key, (unsigned long long)g->hdr,
                 which == WDS_IMAGE ? "image" : "label",
                 which == WDS_IMAGE && g->rank[WDS_LABEL] < 0 ? " and no label member" : "", want,
                 has);
        if (b->spec->skip_missing)
            return wds_note_skipped(b, msg);
        return stk_fail(STK_EFORMAT,
                        "%s (missing=skip leaves such samples out; the members of a sample "
                        "must be adjacent in the tar: GNU tar needs --sort=name)",
                        msg);
    }
    /* The label. */
    const uint8_t *d;
    int rc;
    if (g->size_of[WDS_LABEL] > WDS_MAX_LABEL)
        return stk_fail(STK_EFORMAT,
                        "%s: member %.*s.%s (byte %llu): a label member of %llu bytes, not a "
                        "decimal integer",
                        path, keylen, g->key, g->ext_of[WDS_LABEL],
                        (unsigned long long)g->hdr_of[WDS_LABEL],
                        (unsigned long long)g->size_of[WDS_LABEL]);
    if ((rc = tar_bytes(w, g->data_of[WDS_LABEL], (size_t)g->size_of[WDS_LABEL], 0, &d)) < 0)
        return rc;
    int64_t label;
    if (wds_parse_label(d, (size_t)g->size_of[WDS_LABEL], &label) < 0) {
        char text[200];
        size_t n = g->size_of[WDS_LABEL] < 40 ? (size_t)g->size_of[WDS_LABEL] : 40;
        wds_escape(d, n, text, sizeof text);
        return stk_fail(STK_EFORMAT,
                        "%s: member %.*s.%s (byte %llu): label '%s%s' is not a decimal integer "
                        "(label=EXTS picks the label member)",
                        path, keylen, g->key, g->ext_of[WDS_LABEL],
                        (unsigned long long)g->hdr_of[WDS_LABEL], text,
                        g->size_of[WDS_LABEL] > n ? "..." : "");
    }
    /* The image, into the record table. */
    wds_impl *m = b->m;
    if ((rc = stk_recordset_push(&m->rs, g->data_of[WDS_IMAGE], g->size_of[WDS_IMAGE],
                                 b->max_samples)) < 0)
        return rc;
    if (m->rs.count > m->cap) {
        uint64_t cap = m->cap ? m->cap * 2 : 1024;
        wds_sample *grown = cap <= SIZE_MAX / sizeof *grown
                                ? realloc(m->samples, (size_t)cap * sizeof *grown)
                                : NULL;
        if (!grown)
            return stk_fail(STK_ENOMEM, "%s: out of memory for the sample table", path);
        m->samples = grown;
        m->cap = cap;
    }
    m->samples[m->rs.count - 1] = (wds_sample){.label = label, .hdr = g->hdr_of[WDS_IMAGE]};
    if (label > b->max_label)
        b->max_label = label;
    if (label < b->min_label)
        b->min_label = label;
    return 0;
}

static int wds_ext_rank(const wds_spec *s, int which, const char *ext)
{
    for (uint32_t i = 0; i < s->n[which]; i++)
        if (!strcmp(s->ext[which][i], ext))
            return (int)i;
    return -1;
}

/* One member into the current run (a new run when its key differs). */
static int wds_group_add(wds_build *b, tar_walk *w, wds_group *g, const tar_member *mb,
                         size_t key_len)
{
    const char *path = w->f->path;
    int rc;
    if (!g->active || g->key_len != key_len || memcmp(g->key, mb->name, key_len) != 0) {
        if ((rc = wds_group_close(b, w, g)) < 0)
            return rc;
        if ((rc = tar_reserve(w, &g->key, &g->key_cap, key_len + 1)) < 0)
            return rc;
        memcpy(g->key, mb->name, key_len);
        g->key[key_len] = '\0';
        g->key_len = key_len;
        g->active = 1;
        g->hdr = mb->hdr;
        g->members = 0;
        g->exts_len = 0;
        g->rank[0] = g->rank[1] = -1;
    }
    if (++g->members > WDS_MAX_GROUP)
        return stk_fail(STK_ELIMIT, "%s: sample '%.*s' (byte %llu): more than %u members share "
                                    "its key",
                        path, key_len > 300 ? 300 : (int)key_len, g->key,
                        (unsigned long long)g->hdr, WDS_MAX_GROUP);
    /* Its extension, lowercased (group_by_keys' lcase). */
    const char *ext = mb->name + key_len + 1;
    size_t elen = mb->name_len - key_len - 1;
    if ((rc = tar_reserve(w, &g->exts, &g->exts_cap, g->exts_len + elen + 1)) < 0)
        return rc;
    char *lower = g->exts + g->exts_len;
    for (size_t i = 0; i < elen; i++)
        lower[i] = ext[i] >= 'A' && ext[i] <= 'Z' ? (char)(ext[i] - 'A' + 'a') : ext[i];
    lower[elen] = '\0';
    for (size_t i = 0; i < g->exts_len; i += strlen(g->exts + i) + 1)
        if (!strcmp(g->exts + i, lower))
            return stk_fail(STK_EFORMAT,
                            "%s: member '%s' (byte %llu): sample '%.*s' already has a .%s member "
                            "(duplicate file name in the tar)",
                            path, mb->name, (unsigned long long)mb->hdr,
                            key_len > 300 ? 300 : (int)key_len, g->key, lower);
    for (int which = 0; which < 2; which++) {
        int r = wds_ext_rank(b->spec, which, lower);
        if (r >= 0 && (g->rank[which] < 0 || r < g->rank[which])) {
            g->rank[which] = r;
            g->hdr_of[which] = mb->hdr;
            g->data_of[which] = mb->data;
            g->size_of[which] = mb->size;
            memcpy(g->ext_of[which], ext, elen); /* elen < WDS_EXT_CAP: it matched */
            g->ext_of[which][elen] = '\0';
        }
    }
    g->exts_len += elen + 1;
    return 0;
}

/* Walk tar file f (the last added to the record set) into samples. */
static int wds_index_file(wds_build *b, const stk_recfile *f)
{
    tar_walk w = {.f = f};
    wds_group g = {0};
    tar_member mb;
    int rc;
    if (f->size == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: empty file (not a tar archive)", f->path);
        goto out;
    }
    while ((rc = tar_next(&w, &mb)) > 0) {
        size_t key_len;
        if (!mb.regular || wds_is_meta(mb.name, mb.name_len) ||
            !wds_split(mb.name, mb.name_len, &key_len))
            continue;
        if ((rc = wds_group_add(b, &w, &g, &mb, key_len)) < 0)
            goto out;
    }
    if (rc == 0)
        rc = wds_group_close(b, &w, &g);
out:
    free(g.key);
    free(g.exts);
    tar_walk_free(&w);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Query and file list                                                      */
/* ------------------------------------------------------------------------ */

static int wds_parse_exts(const char *uri, const char *prefix, const char *key, const char *v,
                          size_t vlen, wds_spec *s, int which)
{
    s->n[which] = 0;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < vlen && v[j] != ';' && v[j] != ',')
            j++;
        size_t n = j - i;
        if (n == 0 || n >= WDS_EXT_CAP || memchr(v + i, '/', n))
            return stk_fail(STK_EINVAL,
                            "%s: query key '%s' in URI '%s': '%.*s' is not an extension "
                            "(extensions are 1 to %d characters without '/', separated by ';' "
                            "or ',', e.g. %s=jpg;png)",
                            prefix, key, uri, (int)(n > 40 ? 40 : n), v + i, WDS_EXT_CAP - 1,
                            key);
        if (s->n[which] == WDS_MAX_EXTS)
            return stk_fail(STK_EINVAL, "%s: query key '%s' in URI '%s': more than %d extensions",
                            prefix, key, uri, WDS_MAX_EXTS);
        char *e = s->ext[which][s->n[which]];
        for (size_t k = 0; k < n; k++) {
            char c = v[i + k];
            e[k] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
        e[n] = '\0';
        if (e[0] == '.') /* ".jpg" as well as "jpg" */
            memmove(e, e + 1, n);
        if (!e[0])
            return stk_fail(STK_EINVAL, "%s: query key '%s' in URI '%s': an empty extension",
                            prefix, key, uri);
        for (uint32_t k = 0; k < s->n[which]; k++)
            if (!strcmp(s->ext[which][k], e))
                return stk_fail(STK_EINVAL,
                                "%s: query key '%s' in URI '%s': extension '%s' listed twice",
                                prefix, key, uri, e);
        s->n[which]++;
        if (j == vlen)
            return 0;
        i = j + 1;
    }
}

static int wds_parse_query(const char *uri, const char *prefix, const char *query, wds_spec *s)
{
    static const char *const image_def[] = {"jpg", "jpeg", "png", "webp",
                                            "bmp", "tif", "tiff", "gif"};
    static const char *const label_def[] = {"cls", "txt"};
    const uint32_t n_image_def = sizeof image_def / sizeof image_def[0];
    int seen[3] = {0, 0, 0};
    memset(s, 0, sizeof *s);
    for (uint32_t i = 0; i < n_image_def; i++)
        strcpy(s->ext[WDS_IMAGE][i], image_def[i]);
    s->n[WDS_IMAGE] = n_image_def;
    for (uint32_t i = 0; i < 2; i++)
        strcpy(s->ext[WDS_LABEL][i], label_def[i]);
    s->n[WDS_LABEL] = 2;
    const char *p = query;
    while (p && *p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return stk_fail(STK_EINVAL, "%s: query item '%.*s' has no '=value' (URI '%s')",
                            prefix, (int)(len > 200 ? 200 : len), p, uri);
        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
        const char *v = eq + 1;
        int k = klen == 5 && !memcmp(p, "image", 5)     ? 0
                : klen == 5 && !memcmp(p, "label", 5)   ? 1
                : klen == 7 && !memcmp(p, "missing", 7) ? 2
                                                        : -1;
        if (k < 0)
            return stk_fail(STK_EINVAL,
                            "%s: unknown query key '%.*s' in URI '%s' (known keys: image, label "
                            "and missing)",
                            prefix, (int)(klen > 200 ? 200 : klen), p, uri);
        if (seen[k]++)
            return stk_fail(STK_EINVAL, "%s: query key '%.*s' given twice in URI '%s'", prefix,
                            (int)klen, p, uri);
        int rc = 0;
        if (k == 2) {
            if (vlen == 5 && !memcmp(v, "error", 5))
                s->skip_missing = 0;
            else if (vlen == 4 && !memcmp(v, "skip", 4))
                s->skip_missing = 1;
            else
                rc = stk_fail(STK_EINVAL,
                              "%s: unknown value '%.*s' for query key 'missing' in URI '%s' "
                              "(expected error or skip)",
                              prefix, (int)(vlen > 200 ? 200 : vlen), v, uri);
        } else {
            rc = wds_parse_exts(uri, prefix, k ? "label" : "image", v, vlen, s, k);
        }
        if (rc < 0)
            return rc;
        if (amp && !amp[1])
            return stk_fail(STK_EINVAL, "%s: empty item at the end of the query of URI '%s'",
                            prefix, uri);
        p = amp ? amp + 1 : NULL;
    }
    for (uint32_t i = 0; i < s->n[WDS_IMAGE]; i++)
        if (wds_ext_rank(s, WDS_LABEL, s->ext[WDS_IMAGE][i]) >= 0)
            return stk_fail(STK_EINVAL,
                            "%s: extension '%s' is both an image and a label extension in URI "
                            "'%s'",
                            prefix, s->ext[WDS_IMAGE][i], uri);
    return 0;
}

/* A growing list of malloc'd strings. */
typedef stk_strlist wds_names; /* core/util.h */
#define wds_names_free stk_strlist_free
#define wds_names_push stk_strlist_push

/* A decimal integer of at most 18 digits: its value, or -1. */
static int64_t wds_decimal(const char *s, size_t n)
{
    if (n == 0 || n > 18)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Brace-expand pat from byte `from` on (what lies before is expanded). */
static int wds_brace(const char *uri, const char *prefix, const char *pat, size_t from,
                     wds_names *out)
{
    const char *open = strchr(pat + from, '{');
    if (!open)
        return wds_names_push(out, stk_strdup(pat));
    const char *close = strchr(open, '}');
    const char *inner_open = close ? memchr(open + 1, '{', (size_t)(close - open - 1)) : NULL;
    if (!close || inner_open)
        return stk_fail(STK_EINVAL,
                        "%s: '%s': %s in the brace pattern of URI '%s' (write {A..B} or "
                        "{x,y}, not nested)",
                        prefix, pat, close ? "nested braces" : "a '{' without its '}'", uri);
    size_t pre = (size_t)(open - pat), ilen = (size_t)(close - open - 1);
    const char *in = open + 1, *dots = NULL;
    for (size_t i = 0; i + 1 < ilen; i++)
        if (in[i] == '.' && in[i + 1] == '.') {
            dots = in + i;
            break;
        }
    const char *comma = memchr(in, ',', ilen);
    size_t rest_len = strlen(close + 1);
    int rc;
    if (dots && !comma) {
        size_t alen = (size_t)(dots - in), blen = ilen - alen - 2;
        int64_t a = wds_decimal(in, alen), bb = wds_decimal(dots + 2, blen);
        if (a < 0 || bb < 0)
            return stk_fail(STK_EINVAL,
                            "%s: '%s': {%.*s} is not a range of decimal integers {A..B} (URI "
                            "'%s')",
                            prefix, pat, (int)ilen, in, uri);
        int width = ((alen > 1 && in[0] == '0') || (blen > 1 && dots[2] == '0'))
                        ? (int)(alen > blen ? alen : blen)
                        : 0;
        int64_t count = (a <= bb ? bb - a : a - bb) + 1;
        if (count > WDS_MAX_EXPAND || out->n + (size_t)count > WDS_MAX_EXPAND)
            return stk_fail(STK_ELIMIT, "%s: '%s' expands to more than %d names (URI '%s')",
                            prefix, pat, WDS_MAX_EXPAND, uri);
        for (int64_t k = 0; k < count; k++) {
            int64_t v = a <= bb ? a + k : a - k;
            char num[32];
            int nl = snprintf(num, sizeof num, "%0*lld", width, (long long)v);
            char *s = malloc(pre + (size_t)nl + rest_len + 1);
            if (!s)
                return stk_fail(STK_ENOMEM, "out of memory");
            memcpy(s, pat, pre);
            memcpy(s + pre, num, (size_t)nl);
            memcpy(s + pre + (size_t)nl, close + 1, rest_len + 1);
            rc = wds_brace(uri, prefix, s, pre + (size_t)nl, out);
            free(s);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    if (!comma) /* "{x}": literal, as braceexpand leaves it */
        return wds_brace(uri, prefix, pat, (size_t)(close + 1 - pat), out);
    for (const char *alt = in;;) {
        const char *e = memchr(alt, ',', (size_t)(close - alt));
        if (!e)
            e = close;
        size_t al = (size_t)(e - alt);
        if (out->n >= WDS_MAX_EXPAND)
            return stk_fail(STK_ELIMIT, "%s: '%s' expands to more than %d names (URI '%s')",
                            prefix, pat, WDS_MAX_EXPAND, uri);
        char *s = malloc(pre + al + rest_len + 1);
        if (!s)
            return stk_fail(STK_ENOMEM, "out of memory");
        memcpy(s, pat, pre);
        memcpy(s + pre, alt, al);
        memcpy(s + pre + al, close + 1, rest_len + 1);
        rc = wds_brace(uri, prefix, s, pre + al, out);
        free(s);
        if (rc < 0)
            return rc;
        if (e == close)
            return 0;
        alt = e + 1;
    }
}

static int wds_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The tar files `path` names, in order. */
static int wds_list(const char *uri, const char *prefix, const char *path, wds_names *files)
{
    static const char *const suffixes[] = {".tar", NULL};
    static const stk_file_list_words words = {"tar file", "*.tar files", "tar file or directory"};
    wds_names pats = {0};
    int rc;
    if (strchr(path, '{') && !stk_path_exists(path))
        rc = wds_brace(uri, prefix, path, 0, &pats);
    else
        rc = wds_names_push(&pats, stk_strdup(path));
    for (size_t i = 0; rc >= 0 && i < pats.n; i++) {
        char **list;
        uint32_t n;
        if ((rc = stk_file_list(pats.v[i], suffixes, &words, &list, &n)) < 0)
            break;
        uint32_t k = 0;
        for (; k < n && rc >= 0; k++) {
            rc = wds_names_push(files, list[k]);
            list[k] = NULL;
        }
        stk_file_list_free(list, n);
    }
    wds_names_free(&pats);
    if (rc < 0)
        return rc;
    char **sorted = malloc(files->n * sizeof *sorted);
    if (!sorted)
        return stk_fail(STK_ENOMEM, "out of memory");
    memcpy(sorted, files->v, files->n * sizeof *sorted);
    qsort(sorted, files->n, sizeof *sorted, wds_cmp_str);
    for (size_t i = 1; i < files->n; i++)
        if (!strcmp(sorted[i - 1], sorted[i])) {
            rc = stk_fail(STK_EINVAL, "%s: %s is named twice by '%s' (its samples would be read "
                                      "twice)",
                          prefix, sorted[i], path);
            break;
        }
    free(sorted);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

static int wds_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const wds_impl *m = ds->impl;
    const uint8_t *d;
    size_t n;
    int rc = stk_recordset_get(&m->rs, index, scratch, &d, &n);
    if (rc < 0)
        return rc;
    memset(&out->image, 0, sizeof out->image);
    out->encoded = d;
    out->encoded_size = n;
    out->label = m->samples[index].label;
    return 0;
}

static void wds_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size);

/* Were the image member's bytes still the tar's after use? The message
 * names the member as sample_name does. */
static int wds_read_check(const stk_dataset *ds, uint64_t index)
{
    const wds_impl *m = ds->impl;
    const stk_record_ref *r = &m->rs.recs[index];
    const stk_recfile *f = &m->rs.files[r->file];
    if (stk_recordset_check(&m->rs, index, 0, r->size) == 0)
        return 0;
    char name[1200];
    wds_sample_name(ds, index, name, sizeof name);
    return stk_fail(STK_EDATA,
                    "%s: the tar was truncated while open (only its first %llu of %llu bytes "
                    "remain); the member's bytes were lost",
                    name, (unsigned long long)stk_map_guard_valid(f->guard),
                    (unsigned long long)f->size);
}

/* "TAR: member NAME (byte O)", NAME re-read from the member's header. */
static void wds_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const wds_impl *m = ds->impl;
    const stk_recfile *f = &m->rs.files[m->rs.recs[index].file];
    uint64_t hdr = m->samples[index].hdr;
    tar_walk w = {.f = f, .pos = hdr, .quiet = 1};
    tar_member mb;
    /* Only from a mapping: a pread's failure would replace the message the
     * caller is composing. */
    int ok = f->map && tar_next(&w, &mb) > 0;
    /* after use, over every byte the walk read (headers, long names, pax) */
    ok = ok && (!f->guard || stk_map_guard_intact(f->guard, hdr, w.pos - hdr));
    if (ok)
        snprintf(buf, size, "%s: member %s (byte %llu)", f->path, mb.name,
                 (unsigned long long)hdr);
    else
        snprintf(buf, size, "%s: sample %llu of the file (byte %llu)", f->path,
                 (unsigned long long)(index - f->first), (unsigned long long)hdr);
    tar_walk_free(&w);
}

static void wds_access_hint(const stk_dataset *ds, stk_access how)
{
    const wds_impl *m = ds->impl;
    stk_recordset_advise(&m->rs, how);
}

static void wds_close(stk_dataset *ds)
{
    wds_impl *m = ds->impl;
    stk_recordset_free(&m->rs);
    free(m->samples);
    free(m);
    ds->impl = NULL;
}

/* vtable.label: parsed at open, no member read. */
static int wds_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    *label = ((const wds_impl *)ds->impl)->samples[index].label;
    return 0;
}

static const stk_dataset_vtable wds_vt = {.format = "wds",
                                          .read = wds_read,
                                          .label = wds_label,
                                          .close = wds_close,
                                          .sample_name = wds_sample_name,
                                          .read_check = wds_read_check,
                                          .access_hint = wds_access_hint};

static int wds_open_as(const char *prefix, const char *uri, const char *path, const char *query,
                       const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    wds_spec spec;
    wds_names files = {0};
    wds_build b = {.spec = &spec, .max_samples = o.max_samples, .max_label = -1,
                   .min_label = 0};
    stk_dataset *ds = NULL;
    int rc;
    if ((rc = wds_parse_query(uri, prefix, query, &spec)) < 0)
        return rc;
    if ((rc = wds_list(uri, prefix, path, &files)) < 0)
        goto fail;
    if (!(ds = stk_dataset_alloc(&wds_vt, uri))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if (!(b.m = calloc(1, sizeof *b.m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = b.m;
    for (size_t i = 0; i < files.n; i++) {
        if ((rc = stk_recordset_add_file(&b.m->rs, files.v[i], o.max_bytes, 0)) < 0)
            goto fail;
        rc = wds_index_file(&b, &b.m->rs.files[b.m->rs.nfiles - 1]);
        /* A tar cut while it was walked reads as zeros, which look like the
         * end-of-archive marker: fail naming the file, never drop samples. */
        int lost = stk_recordset_file_intact(&b.m->rs, b.m->rs.nfiles - 1);
        if ((rc = lost < 0 ? lost : rc) < 0)
            goto fail;
    }
    if (b.m->rs.count == 0) {
        rc = stk_fail(STK_EFORMAT,
                      "%s: no samples in %s%s (a sample is an image member and a label member "
                      "sharing a key, e.g. 000001.jpg and 000001.cls)%s%s",
                      prefix, path, files.n > 1 ? " (all its tar files)" : "",
                      b.nskipped ? "; left out: " : "", b.nskipped ? b.skipped[0] : "");
        goto fail;
    }
    ds->count = b.m->rs.count;
    stk_recordset_advise(&b.m->rs, STK_ACCESS_RANDOM); /* until a hint says otherwise */
    ds->num_classes = b.min_label >= 0 && b.max_label < (int64_t)UINT32_MAX
                          ? (uint32_t)(b.max_label + 1)
                          : 0;
    ds->skipped = b.skipped;
    ds->nskipped = b.nskipped;
    b.skipped = NULL;
    b.nskipped = 0;
    wds_names_free(&files);
    *out = ds;
    return 0;
fail:
    for (uint64_t i = 0; i < b.nskipped; i++)
        free(b.skipped[i]);
    free(b.skipped);
    wds_names_free(&files);
    if (ds)
        stk_dataset_close(ds);
    return rc;
}

static int wds_open(const char *uri, const char *path, const char *query,
                    const stk_dataset_options *opts, stk_dataset **out)
{
    return wds_open_as("wds", uri, path, query, opts, out);
}

static int webdataset_open(const char *uri, const char *path, const char *query,
                           const stk_dataset_options *opts, stk_dataset **out)
{
    return wds_open_as("webdataset", uri, path, query, opts, out);
}

/* A bare path: a *.tar file, a pattern ending in .tar, or a directory that
 * directly holds a *.tar file and is not an image folder. */
static int wds_detect(const char *path)
{
    size_t n = strlen(path);
    int tar_name = n > 4 && !strcmp(path + n - 4, ".tar");
    if (stk_path_is_file(path))
        return tar_name;
    if (stk_path_is_dir(path)) {
        DIR *d = opendir(path);
        struct dirent *e;
        int found = 0;
        if (!d)
            return 0;
        while (!found && (e = readdir(d))) {
            size_t k = strlen(e->d_name);
            if (k > 4 && !strcmp(e->d_name + k - 4, ".tar")) {
                char *f = stk_path_join(path, e->d_name);
                if (!f) {
                    closedir(d);
                    return STK_ENOMEM;
                }
                found = stk_path_is_file(f);
                free(f);
            }
        }
        closedir(d);
        if (!found)
            return 0;
        int folder = stk_imagefolder_detect(path);
        return folder < 0 ? folder : !folder;
    }
    return !stk_path_exists(path) && tar_name && strpbrk(path, "*?[{") != NULL;
}

const stk_reader stk_reader_wds = {
    "wds", "wds:PATH[?image=jpg;jpeg;png;webp;bmp;tif;tiff;gif][&label=cls;txt]"
           "[&missing=error|skip]",
    "WebDataset tar shards: a .tar, a directory of *.tar, a glob or shard-{000..009}.tar; "
    "samples are members sharing a key",
    wds_open, NULL, wds_detect, "*.tar (WebDataset shards)", "*.tar"};

const stk_reader stk_reader_webdataset = {
    "webdataset", "webdataset:PATH[?image=...][&label=...][&missing=...]",
    "the same as wds:", webdataset_open, NULL, NULL, NULL, NULL};
