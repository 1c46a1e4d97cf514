/*
 * stk_writer.c — streams records into a temporary file, then writes the
 * index and, last, the footer; fsyncs and renames into place.
 *
 * Why this order: a reader trusts a shard only through its footer, which
 * carries the checksums of the index and the header. The footer is the
 * last write, the file gets its final name only after fsync, so a crash or
 * a full disk leaves either no shard or a temporary file — never a shard
 * that reads as valid but is incomplete (docs/format.md, "Writing").
 *
 * Two steps for shard sets: seal writes the index and footer into the
 * temporary and frees the record buffers; commit may then rewrite the
 * header with final metadata (pack's `shard` = i/n and `shard_set`, known
 * only when the last shard is sealed) — the new header must fit in the
 * space before data_offset that the first one reserved, and the footer's
 * copy of the header checksum is updated with it — then fsyncs and renames.
 * finish is seal + commit with the header as it was. The set-level half —
 * the destination made ready (stale temporaries removed) and the commit of
 * all sealed shards with their set keys — is at the end of this file,
 * shared by stk_pack and the public stk_shard_writer (src/tools).
 *
 * Version: a file is written as format 1.1 unless its schema has an
 * int64/float32 field whose leading dimension varies (1.2), so files that
 * do not need 1.2 are byte for byte what earlier versions wrote.
 *
 * Memory: the index (offsets, lengths, checksums, fixed columns) is kept in
 * growable arrays until finish: ~28 bytes a record for one image + label.
 * Records pass through a 2 MiB write buffer that is always written whole,
 * so every write() covers exactly one 2 MiB-aligned stretch of the file.
 * On filesystems with large folios (ext4 and XFS on recent kernels) the
 * page cache then holds the new shard in 2 MiB folios, and a reader that
 * maps it while it is still cached gets 2 MiB page-table entries: its first
 * pass costs ~4 ms per GB of mapping set-up instead of ~100 ms per GB for
 * 4 KiB pages (bench/mmap_floor.c; docs/benchmarks.md).
 */
#include "format/stk/stk_writer.h"

#include "core/error.h"
#include "core/util.h"
#include "format/stk/stk_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define WRITE_BUFFER (2u << 20) /* = the x86-64 PMD size; see the essay */


int stk_field_layout(const stk_field_def *f, uint8_t *storage, uint32_t *elem_size,
                     uint64_t *fixed_size, const char **why)
{
    uint64_t count = 1;
    bool array = f->type == STK_FIELD_INT64 || f->type == STK_FIELD_FLOAT32;
    /* int64 / float32 with dims[0] == 0: the leading dimension varies per
     * record (format 1.2, docs/format.md); every other dimension is fixed. */
    bool varies = array && f->ndim >= 1 && f->dims[0] == 0;
    if (f->ndim > 4) {
        *why = "more than 4 dimensions";
        return STK_EINVAL;
    }
    for (unsigned i = varies ? 1 : 0; i < f->ndim; i++)
        if (!f->dims[i] || !stk_mul_ok(count, f->dims[i], &count)) {
            *why = "a zero or overflowing dimension";
            return STK_EINVAL;
        }
    *fixed_size = 0;
    switch (f->type) {
    case STK_FIELD_BYTES:
    case STK_FIELD_IMAGE:
    case STK_FIELD_STRING:
    case STK_FIELD_RAW_IMAGE:
        *storage = STK_STORAGE_VARIABLE;
        *elem_size = 1;
        if (f->type == STK_FIELD_RAW_IMAGE && f->ndim != 0 && f->ndim != 3) {
            *why = "a raw_image shape must have 3 dimensions (H, W, C) or none";
            return STK_EINVAL;
        }
        if (f->compression > 1 || (f->compression && f->type != STK_FIELD_RAW_IMAGE)) {
            *why = "compression is only defined for raw_image (zstd)";
            return STK_EINVAL;
        }
        return 0;
    case STK_FIELD_INT64:
    case STK_FIELD_FLOAT32:
        *elem_size = f->type == STK_FIELD_INT64 ? 8 : 4;
        if (f->compression) {
            *why = "compression is only defined for raw_image (zstd)";
            return STK_EINVAL;
        }
        if (varies) {
            /* The bytes of each record's value are in the record; their
             * length is a multiple of the row (product of dims[1..]). */
            uint64_t row;
            *storage = STK_STORAGE_VARIABLE;
            if (!stk_mul_ok(count, *elem_size, &row) || row > UINT32_MAX) {
                *why = "a row larger than 4 GiB";
                return STK_EINVAL;
            }
            return 0;
        }
        *storage = STK_STORAGE_FIXED;
        if (!stk_mul_ok(count, *elem_size, fixed_size) || *fixed_size > UINT32_MAX) {
            *why = "a fixed field larger than 4 GiB per record";
            return STK_EINVAL;
        }
        return 0;
    default:
        *why = "an unknown field type";
        return STK_EINVAL;
    }
}

bool stk_field_varies(const stk_field_def *f)
{
    return (f->type == STK_FIELD_INT64 || f->type == STK_FIELD_FLOAT32) && f->ndim >= 1 &&
           f->dims[0] == 0;
}

uint64_t stk_field_row_bytes(const stk_field_def *f)
{
    uint64_t row = f->type == STK_FIELD_INT64 ? 8 : f->type == STK_FIELD_FLOAT32 ? 4 : 1;
    for (unsigned d = 1; d < f->ndim && d < 4; d++)
        row *= f->dims[d];
    return row;
}

struct stk_shard_file {
    char *path, *tmp_path;     /* owned */
    int fd;
    stk_field_def fields[STK_MAX_FIELDS];
    uint8_t storage[STK_MAX_FIELDS];
    uint64_t fixed_size[STK_MAX_FIELDS];
    uint32_t nfields, nvar;
    uint64_t row_bytes[STK_MAX_FIELDS]; /* varying int64/float32 fields: bytes per row */
    uint16_t minor;            /* format minor version written: 1, or 2 with a varying field */
    uint8_t *header;           /* owned, header_size bytes */
    uint32_t header_size;
    uint64_t data_offset, pos; /* pos: file offset of the next byte */
    uint8_t *buf;              /* write buffer, owned */
    size_t buf_len;
    /* Index columns, owned, grown together. */
    uint64_t n, cap;
    uint64_t *offsets, *checksums;
    uint32_t *lengths;         /* n * nvar */
    uint8_t *columns[STK_MAX_FIELDS]; /* fixed fields only */
    XXH3_state_t *hash;
    /* After seal: the file is complete under tmp_path, fd is closed, the
     * buffers and index columns above are freed; pos is the file size. */
    bool sealed;
    uint8_t footer[STK_FOOTER_SIZE];
};

static int write_all(stk_shard_file *w, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size) {
        ssize_t k = write(w->fd, p, size);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return stk_fail(STK_EIO, "%s: write failed: %s", w->tmp_path, strerror(errno));
        }
        p += k;
        size -= (size_t)k;
    }
    return 0;
}

static int flush_buffer(stk_shard_file *w)
{
    int rc = write_all(w, w->buf, w->buf_len);
    w->buf_len = 0;
    return rc;
}

/* Append to the stream; the buffer goes out each time it is full, so all
 * writes but the last are WRITE_BUFFER bytes at multiples of WRITE_BUFFER. */
static int emit(stk_shard_file *w, const void *data, size_t size)
{
    const uint8_t *p = data;
    w->pos += size;
    while (size) {
        size_t k = WRITE_BUFFER - w->buf_len < size ? WRITE_BUFFER - w->buf_len : size;
        memcpy(w->buf + w->buf_len, p, k);
        w->buf_len += k;
        p += k;
        size -= k;
        if (w->buf_len == WRITE_BUFFER) {
            int rc = flush_buffer(w);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int emit_zeros(stk_shard_file *w, size_t size)
{
    static const uint8_t zeros[STK_PAGE];
    while (size) {
        size_t k = size < sizeof zeros ? size : sizeof zeros;
        int rc = emit(w, zeros, k);
        if (rc < 0)
            return rc;
        size -= k;
    }
    return 0;
}

/* The record buffers and index columns (not needed after seal). */
static void free_buffers(stk_shard_file *w)
{
    free(w->buf);
    free(w->offsets);
    free(w->checksums);
    free(w->lengths);
    w->buf = NULL;
    w->offsets = w->checksums = NULL;
    w->lengths = NULL;
    for (uint32_t i = 0; i < w->nfields; i++) {
        free(w->columns[i]);
        w->columns[i] = NULL;
    }
}

static void writer_free(stk_shard_file *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    free(w->path);
    free(w->tmp_path);
    free(w->header);
    free_buffers(w);
    XXH3_freeState(w->hash);
    free(w);
}

/* Build w->header from the schema and `meta`. data_offset 0: place the data
 * area after it; otherwise keep that data_offset (the header must fit). */
static int build_header(stk_shard_file *w, const stk_kv *meta, uint32_t nmeta,
                        uint64_t data_offset)
{
    uint64_t size = STK_HEADER_SIZE + (uint64_t)w->nfields * STK_FIELD_ENTRY_SIZE;
    for (uint32_t i = 0; i < nmeta; i++)
        size += 8 + strlen(meta[i].key) + meta[i].value_size;
    if (size > UINT32_MAX)
        return stk_fail(STK_EINVAL, "%s: metadata larger than 4 GiB", w->path);
    if (data_offset && size > data_offset)
        return stk_fail(STK_EINVAL, "%s: the final metadata (%llu bytes of header) does not fit "
                                    "in the %llu bytes reserved before the data",
                        w->path, (unsigned long long)size, (unsigned long long)data_offset);
    free(w->header);
    w->header_size = (uint32_t)size;
    w->header = calloc(1, size);
    if (!w->header)
        return stk_fail(STK_ENOMEM, "out of memory");
    uint8_t *h = w->header;
    memcpy(h + HDR_MAGIC, STK_SHARD_MAGIC, 8);
    stk_wr16(h + HDR_VMAJOR, STK_SHARD_VERSION_MAJOR);
    stk_wr16(h + HDR_VMINOR, w->minor);
    stk_wr32(h + HDR_SIZE, w->header_size);
    w->data_offset = data_offset ? data_offset : stk_pad_to(size, STK_PAGE);
    stk_wr64(h + HDR_DATA_OFFSET, w->data_offset);
    stk_wr32(h + HDR_FIELD_COUNT, w->nfields);
    stk_wr32(h + HDR_META_COUNT, nmeta);
    for (uint32_t i = 0; i < w->nfields; i++) {
        uint8_t *e = h + STK_HEADER_SIZE + i * STK_FIELD_ENTRY_SIZE;
        const stk_field_def *f = &w->fields[i];
        uint8_t storage;
        uint32_t elem;
        uint64_t fixed;
        const char *why = "";
        stk_field_layout(f, &storage, &elem, &fixed, &why);
        memcpy(e + FLD_NAME, f->name, strlen(f->name));
        e[FLD_TYPE] = f->type;
        e[FLD_STORAGE] = storage;
        e[FLD_COMPRESSION] = f->compression;
        e[FLD_NDIM] = f->ndim;
        for (unsigned d = 0; d < 4; d++)
            stk_wr32(e + FLD_DIMS + 4 * d, d < f->ndim ? f->dims[d] : 0);
        stk_wr32(e + FLD_ELEM_SIZE, elem);
        stk_wr64(e + FLD_FIXED_SIZE, fixed);
    }
    uint8_t *m = h + STK_HEADER_SIZE + (size_t)w->nfields * STK_FIELD_ENTRY_SIZE;
    for (uint32_t i = 0; i < nmeta; i++) {
        uint32_t kl = (uint32_t)strlen(meta[i].key), vl = (uint32_t)meta[i].value_size;
        stk_wr32(m, kl);
        memcpy(m + 4, meta[i].key, kl);
        stk_wr32(m + 4 + kl, vl);
        if (vl)
            memcpy(m + 8 + kl, meta[i].value, vl);
        m += 8 + kl + vl;
    }
    stk_wr64(h + HDR_CHECKSUM, stk_checksum(h, size)); /* computed with the field zero */
    return 0;
}

int stk_shard_file_open(const char *path, const stk_field_def *fields, uint32_t nfields,
                          const stk_kv *meta, uint32_t nmeta, stk_shard_file **out)
{
    int rc;
    *out = NULL;
    if (nfields == 0 || nfields > STK_MAX_FIELDS)
        return stk_fail(STK_EINVAL, "%s: a shard needs 1 to %d fields, got %u", path, STK_MAX_FIELDS,
                        nfields);
    if (nmeta > STK_MAX_METADATA)
        return stk_fail(STK_EINVAL, "%s: too many metadata entries (%u)", path, nmeta);
    stk_shard_file *w = calloc(1, sizeof *w);
    if (!w)
        return stk_fail(STK_ENOMEM, "out of memory");
    w->fd = -1;
    w->nfields = nfields;
    /* 1.1 unless a field needs 1.2 (varying int64/float32): files without
     * one stay byte for byte what earlier versions wrote. */
    w->minor = STK_SHARD_VERSION_MINOR_BASE;
    for (uint32_t i = 0; i < nfields; i++)
        if (stk_field_varies(&fields[i]))
            w->minor = STK_SHARD_VERSION_MINOR;
    for (uint32_t i = 0; i < nfields; i++) {
        const stk_field_def *f = &fields[i];
        size_t len = strnlen(f->name, sizeof f->name);
        if (len == 0 || len >= sizeof f->name) {
            rc = stk_fail(STK_EINVAL, "%s: field %u needs a name of 1 to 31 bytes", path, i);
            goto fail;
        }
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(fields[j].name, f->name)) {
                rc = stk_fail(STK_EINVAL, "%s: field name '%s' is used twice", path, f->name);
                goto fail;
            }
        const char *why = "";
        uint32_t elem;
        if (stk_field_layout(f, &w->storage[i], &elem, &w->fixed_size[i], &why) < 0) {
            rc = stk_fail(STK_EINVAL, "%s: field '%s': %s", path, f->name, why);
            goto fail;
        }
        w->fields[i] = *f;
        if (w->storage[i] == STK_STORAGE_VARIABLE)
            w->nvar++;
        if (stk_field_varies(f))
            w->row_bytes[i] = stk_field_row_bytes(f);
    }
    w->path = stk_strdup(path);
    w->tmp_path = malloc(strlen(path) + 64);
    w->buf = malloc(WRITE_BUFFER);
    w->hash = XXH3_createState();
    if (!w->path || !w->tmp_path || !w->buf || !w->hash) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto fail;
    }
    snprintf(w->tmp_path, strlen(path) + 64, "%s.tmp-%ld-%08x", path, (long)getpid(),
             (unsigned)(stk_ticks() & 0xffffffffu));
    if ((rc = build_header(w, meta, nmeta, 0)) < 0)
        goto fail;
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot create: %s", w->tmp_path,
                      strerror(errno));
        goto fail;
    }
    if ((rc = emit(w, w->header, w->header_size)) < 0 ||
        (rc = emit_zeros(w, w->data_offset - w->header_size)) < 0)
        goto fail_unlink;
    *out = w;
    return 0;

fail_unlink:
    unlink(w->tmp_path);
fail:
    writer_free(w);
    return rc;
}

static int grow(stk_shard_file *w)
{
    uint64_t cap = w->cap ? w->cap * 2 : 1024;
    uint64_t *o = realloc(w->offsets, cap * sizeof *o);
    if (o)
        w->offsets = o;
    uint64_t *c = realloc(w->checksums, cap * sizeof *c);
    if (c)
        w->checksums = c;
    uint32_t *l = w->nvar ? realloc(w->lengths, cap * w->nvar * sizeof *l) : w->lengths;
    if (l)
        w->lengths = l;
    if (!o || !c || (w->nvar && !l))
        return stk_fail(STK_ENOMEM, "%s: out of memory growing the index", w->path);
    for (uint32_t i = 0; i < w->nfields; i++) {
        if (w->storage[i] != STK_STORAGE_FIXED)
            continue;
        uint8_t *col = realloc(w->columns[i], cap * w->fixed_size[i]);
        if (!col)
            return stk_fail(STK_ENOMEM, "%s: out of memory growing the index", w->path);
        w->columns[i] = col;
    }
    w->cap = cap;
    return 0;
}

int stk_shard_file_add(stk_shard_file *w, const stk_value_bytes *values)
{
    int rc;
    if (w->sealed)
        return stk_fail(STK_ESTATE, "%s: records added after the shard was sealed", w->path);
    if (w->n >= STK_MAX_RECORDS)
        return stk_fail(STK_ELIMIT, "%s: more than 2^40 records", w->path);
    for (uint32_t i = 0; i < w->nfields; i++) {
        if (w->storage[i] == STK_STORAGE_FIXED && values[i].size != w->fixed_size[i])
            return stk_fail(STK_EINVAL, "%s: field '%s' takes %llu bytes, got %zu", w->path,
                            w->fields[i].name, (unsigned long long)w->fixed_size[i], values[i].size);
        if (w->storage[i] == STK_STORAGE_VARIABLE && values[i].size > UINT32_MAX)
            return stk_fail(STK_ELIMIT, "%s: field '%s' of %zu bytes is over 4 GiB", w->path,
                            w->fields[i].name, values[i].size);
        if (w->row_bytes[i] && values[i].size % w->row_bytes[i])
            return stk_fail(STK_EINVAL, "%s: field '%s' takes whole rows of %llu bytes, got %zu",
                            w->path, w->fields[i].name, (unsigned long long)w->row_bytes[i],
                            values[i].size);
    }
    if (w->n == w->cap && (rc = grow(w)) < 0)
        return rc;
    if ((rc = emit_zeros(w, stk_pad_to(w->pos, STK_RECORD_ALIGN) - w->pos)) < 0)
        return rc;
    w->offsets[w->n] = w->pos;
    XXH3_64bits_reset(w->hash);
    uint32_t v = 0;
    for (uint32_t i = 0; i < w->nfields; i++) {
        if (w->storage[i] == STK_STORAGE_FIXED) {
            memcpy(w->columns[i] + w->n * w->fixed_size[i], values[i].data, values[i].size);
            continue;
        }
        if (values[i].size) {
            XXH3_64bits_update(w->hash, values[i].data, values[i].size);
            if ((rc = emit(w, values[i].data, values[i].size)) < 0)
                return rc;
        }
        w->lengths[w->n * w->nvar + v++] = (uint32_t)values[i].size;
    }
    w->checksums[w->n] = XXH3_64bits_digest(w->hash);
    w->n++;
    return 0;
}

uint64_t stk_shard_file_bytes(const stk_shard_file *w) { return w->pos; }
uint64_t stk_shard_file_records(const stk_shard_file *w) { return w->n; }

/* Emit one index array padded to 8 bytes, feeding the index checksum. */
static int emit_index_part(stk_shard_file *w, const void *data, uint64_t size)
{
    static const uint8_t zeros[8];
    int rc;
    if (size) {
        XXH3_64bits_update(w->hash, data, (size_t)size);
        if ((rc = emit(w, data, (size_t)size)) < 0)
            return rc;
    }
    uint64_t pad = stk_pad_to(size, 8) - size;
    if (pad) {
        XXH3_64bits_update(w->hash, zeros, (size_t)pad);
        if ((rc = emit(w, zeros, (size_t)pad)) < 0)
            return rc;
    }
    return 0;
}

static int pwrite_all(int fd, const void *data, size_t size, uint64_t at, const char *path)
{
    const uint8_t *p = data;
    while (size) {
        ssize_t k = pwrite(fd, p, size, (off_t)at);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return stk_fail(STK_EIO, "%s: write failed: %s", path, strerror(errno));
        }
        p += k;
        size -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

int stk_shard_file_seal(stk_shard_file *w)
{
    int rc;
    if (w->sealed)
        return 0;
    uint64_t data_end = w->pos;
    if ((rc = emit_zeros(w, stk_pad_to(w->pos, STK_PAGE) - w->pos)) < 0)
        return rc;
    uint64_t index_offset = w->pos;
    /* Little-endian hosts write the arrays as they are; others convert. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stk_writer.c: big-endian hosts need byte-swapping of the index arrays"
#endif
    XXH3_64bits_reset(w->hash);
    if ((rc = emit_index_part(w, w->offsets, w->n * 8)) < 0 ||
        (rc = emit_index_part(w, w->lengths, w->n * w->nvar * 4)) < 0 ||
        (rc = emit_index_part(w, w->checksums, w->n * 8)) < 0)
        return rc;
    for (uint32_t i = 0; i < w->nfields; i++)
        if (w->storage[i] == STK_STORAGE_FIXED &&
            (rc = emit_index_part(w, w->columns[i], w->n * w->fixed_size[i])) < 0)
            return rc;
    uint64_t index_size = w->pos - index_offset;
    uint8_t *f = w->footer;
    memset(f, 0, STK_FOOTER_SIZE);
    stk_wr64(f + FTR_INDEX_OFFSET, index_offset);
    stk_wr64(f + FTR_INDEX_SIZE, index_size);
    stk_wr64(f + FTR_RECORD_COUNT, w->n);
    stk_wr64(f + FTR_DATA_END, data_end);
    stk_wr64(f + FTR_INDEX_CHECKSUM, XXH3_64bits_digest(w->hash));
    stk_wr64(f + FTR_HEADER_CHECKSUM, stk_rd64(w->header + HDR_CHECKSUM));
    stk_wr32(f + FTR_VERSION, STK_SHARD_VERSION_MAJOR << 16 | w->minor);
    stk_wr32(f + FTR_CHECKSUM, (uint32_t)stk_checksum(f, FTR_CHECKSUM));
    memcpy(f + FTR_MAGIC, STK_FOOTER_MAGIC, 8);
    if ((rc = emit(w, f, STK_FOOTER_SIZE)) < 0 || (rc = flush_buffer(w)) < 0)
        return rc;
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0)
        return stk_fail(STK_EIO, "%s: close failed: %s", w->tmp_path, strerror(errno));
    free_buffers(w);
    w->sealed = true;
    return 0;
}

const uint8_t *stk_shard_file_footer(const stk_shard_file *w)
{
    return w->sealed ? w->footer : NULL;
}

int stk_shard_file_commit(stk_shard_file *w, const stk_kv *meta, uint32_t nmeta)
{
    int rc;
    uint8_t *region = NULL;
    if ((rc = stk_shard_file_seal(w)) < 0)
        goto fail;
    w->fd = open(w->tmp_path, O_WRONLY | O_CLOEXEC);
    if (w->fd < 0) {
        rc = stk_fail(STK_EIO, "%s: cannot reopen: %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    if (meta) {
        /* New header over [0, data_offset): zeros after it clear the old
         * one's tail; then the footer's copy of its checksum. */
        if ((rc = build_header(w, meta, nmeta, w->data_offset)) < 0)
            goto fail;
        if (!(region = calloc(1, (size_t)w->data_offset))) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto fail;
        }
        memcpy(region, w->header, w->header_size);
        stk_wr64(w->footer + FTR_HEADER_CHECKSUM, stk_rd64(w->header + HDR_CHECKSUM));
        stk_wr32(w->footer + FTR_CHECKSUM, (uint32_t)stk_checksum(w->footer, FTR_CHECKSUM));
        if ((rc = pwrite_all(w->fd, region, (size_t)w->data_offset, 0, w->tmp_path)) < 0 ||
            (rc = pwrite_all(w->fd, w->footer, STK_FOOTER_SIZE, w->pos - STK_FOOTER_SIZE,
                             w->tmp_path)) < 0)
            goto fail;
    }
    if (fsync(w->fd) != 0) {
        rc = stk_fail(STK_EIO, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        rc = stk_fail(STK_EIO, "%s: close failed: %s", w->tmp_path, strerror(errno));
        goto fail;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        rc = stk_fail(STK_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
        goto fail;
    }
    free(region);
    writer_free(w);
    return 0;
fail:
    free(region);
    unlink(w->tmp_path);
    writer_free(w);
    return rc;
}

int stk_shard_file_finish(stk_shard_file *w) { return stk_shard_file_commit(w, NULL, 0); }

void stk_shard_file_abort(stk_shard_file *w)
{
    if (!w)
        return;
    if (w->tmp_path)
        unlink(w->tmp_path);
    writer_free(w);
}

/* ------------------------------------------------------------------------ */
/* Shard sets: the destination, and the commit of all shards at the end       */
/* ------------------------------------------------------------------------ */

/* mkdir -p */
static int make_dirs(const char *dest)
{
    char path[4096];
    size_t n = strlen(dest);
    if (n >= sizeof path)
        return stk_fail(STK_EINVAL, "%s: destination path too long", dest);
    memcpy(path, dest, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char keep = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot create: %s", path,
                            strerror(errno));
        path[i] = keep;
    }
    return 0;
}

int stk_shard_dest_ready(const char *dest)
{
    int mrc = make_dirs(dest);
    if (mrc < 0)
        return mrc;
    DIR *d = opendir(dest);
    if (!d)
        return stk_fail(STK_EIO, "%s: cannot open the destination directory: %s", dest,
                        strerror(errno));
    struct dirent *e;
    int rc = 0;
    /* NULL with errno set is a read error, not the end of the directory. */
    for (errno = 0; (e = readdir(d)); errno = 0) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".stk")) {
            rc = stk_fail(STK_EINVAL, "%s: already holds shards (%s); remove them or choose "
                                      "another destination", dest, e->d_name);
            break;
        }
        /* A temporary NAME.stk.tmp-<pid>-<random> of a pack that was killed
         * (its process is gone) is removed; one of a live process means
         * another pack is writing here. */
        const char *t = strstr(e->d_name, ".stk.tmp-");
        if (!t)
            continue;
        long pid = strtol(t + 9, NULL, 10);
        /* This process's own: a pack or shard writer of it is writing
         * there now (each removes its temporaries when it ends). */
        if (pid == (long)getpid()) {
            rc = stk_fail(STK_EINVAL, "%s: %s is being written by this process (another pack "
                                      "or shard writer into the same destination); finish it "
                                      "or choose another destination",
                          dest, e->d_name);
            break;
        }
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            rc = stk_fail(STK_EINVAL, "%s: %s is being written by another process (pid %ld); "
                                      "wait for it or choose another destination",
                          dest, e->d_name, pid);
            break;
        }
        char tmp[4096];
        if (snprintf(tmp, sizeof tmp, "%s/%s", dest, e->d_name) < (int)sizeof tmp &&
            unlink(tmp) != 0 && errno != ENOENT) {
            rc = stk_fail(STK_EIO, "%s: cannot remove the stale temporary file: %s", tmp,
                          strerror(errno));
            break;
        }
    }
    if (!e && errno != 0)
        rc = stk_fail(STK_EIO, "%s: cannot list the destination directory: %s", dest,
                      strerror(errno));
    closedir(d);
    return rc;
}

/*
 * The shard-set keys (docs/format.md, "Shard sets"). Every shard of a pack
 * carries `shard_set`, the set's identity — 32 hex digits of XXH3-128 over
 * the footers of all its shards, in order (so a set's identity follows
 * from its content, and the same input packs to the same bytes whatever
 * `jobs` is) — and `shard` = "i/n", its place among the n shards, from 0.
 * Both are known only once the last shard is sealed: every shard is
 * written under its temporary name with placeholders of the longest
 * values, and is renamed into place only here, after its header has been
 * rewritten with the final values. A pack killed at any point therefore
 * leaves temporaries only, or a set whose shards say how many there must
 * be: a reader can always tell it is incomplete.
 */

/* Commit the n sealed shards with their final set keys (the last two
 * entries of meta). staged[i] is set to NULL as it is committed. */
int stk_shard_set_commit(stk_shard_file **staged, uint32_t n, stk_kv *meta, uint32_t nmeta)
{
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return stk_fail(STK_ENOMEM, "out of memory");
    XXH3_128bits_reset(h);
    for (uint32_t i = 0; i < n; i++)
        XXH3_128bits_update(h, stk_shard_file_footer(staged[i]), STK_FOOTER_SIZE);
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    char id[STK_SET_ID_HEX + 1], place[sizeof STK_SHARD_PLACEHOLDER];
    snprintf(id, sizeof id, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
    meta[nmeta - 2] = (stk_kv){"shard_set", id, STK_SET_ID_HEX};
    for (uint32_t i = 0; i < n; i++) {
        snprintf(place, sizeof place, "%u/%u", i, n);
        meta[nmeta - 1] = (stk_kv){"shard", place, strlen(place)};
        stk_shard_file *w = staged[i];
        staged[i] = NULL;
        int rc = stk_shard_file_commit(w, meta, nmeta);
        if (rc < 0)
            return rc;
    }
    return 0;
}
