/*
 * stk_record.c — record access in an open shard set: which shard holds a
 * global index, the bytes of one record (validated, checksummed per
 * policy), raw image payloads and labels. Used by the dataset adapter
 * (stk_dataset.c) and by stk_verify (src/tools/verify.c); the types are in
 * stk_shard.h, the opening in stk_shard.c.
 *
 * Per read, every value taken from the file is checked before use: the
 * record offset lies in the data area and is aligned, the field lengths sum
 * (with overflow checks) to a record that ends before data_end, and raw
 * image payloads carry a shape whose size matches, and a varying int64/float32
 * value is whole rows (stk_shard_value_check). Then the checksum policy
 * applies (?verify=off|first|always; "first" keeps one bit per record).
 * Record damage is STK_EDATA — skippable by the loader's policy — and names
 * the shard file, its record and the global sample index.
 *
 * A mapped shard can be truncated while open: the lost pages then read as
 * zeros (src/io/map_guard.c). stk_shard_lost_check says whether a record's
 * bytes were among them; it runs after the bytes were used (on success, by
 * the caller) or at once on a failure, so a cut is reported as such and
 * never as the checksum mismatch or bad index entry it caused.
 *
 * The bytes come through the shard's source (src/io/source.h): in pread
 * mode each record is one stk_source_pread into the caller's scratch (one
 * indirect call, its failures worded by the source: "PATH: read failed:
 * REASON", or a short read said here as a truncation); in mmap mode a
 * record is a pointer into the mapping, and its pages are asked for with
 * stk_mapping_advise. A source that lends views (a remote shard: the
 * bytes in place in its cache's mapping, stk_source_view) is read in
 * pread mode's order but without the copy: the record is a pointer, as in
 * mmap mode, valid while the shard is open. No system call is made here
 * directly.
 *
 * Thread safety: after open everything is read-only except the "verified"
 * and "touched" bitmaps, updated with atomic OR; the pread path reads into
 * the caller's scratch. No locks on the read path.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/stk/stk_shard.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define MAX_RECORD_BYTES (4ull << 30)

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

const shard *stk_shard_locate(const shardset *set, uint64_t index, uint64_t *local)
{
    uint32_t lo = 0, hi = set->nshards;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (set->shards[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    *local = index - set->shards[lo].first;
    return &set->shards[lo];
}

/*
 * Mapped shards: were record r's index entries and bytes still the file's
 * when they were last read? A truncation under the mapping turns the lost
 * pages into zeros (src/io/map_guard.c) and lowers the guard's valid mark
 * to the new size; this says whether anything record r depends on lies at
 * or past it. Call it after the bytes have been used (the read, a checksum,
 * the consumer's crop): then a 0 means they were real. While nothing was
 * cut: an 8-byte load of the footer's magic, a compare and an atomic load
 * (stk_map_guard_check). Returns 0 or STK_EDATA naming the shard and
 * record.
 */
int stk_shard_lost_check(const shardset *set, const shard *s, uint64_t r, uint64_t global)
{
    if (!s->guard)
        return 0;
    /* Probes the file's last bytes (the footer magic, never zeros): any cut
     * shows there, and the guard then holds the exact new size. */
    uint64_t valid = stk_map_guard_check(s->guard, 0);
    if (valid >= s->file_size)
        return 0; /* the common case: nothing was cut */
    /* The index entries of record r (the highest byte of each column). */
    uint64_t need = (uint64_t)(s->offsets - s->map) + (r + 1) * 8;
    uint64_t e = (uint64_t)(s->checksums - s->map) + (r + 1) * 8;
    need = e > need ? e : need;
    if (set->nvar) {
        e = (uint64_t)(s->lengths - s->map) + (r + 1) * set->nvar * 4;
        need = e > need ? e : need;
    }
    for (uint32_t i = 0; i < set->nfields; i++) {
        if (set->storage[i] != STK_STORAGE_FIXED)
            continue;
        e = (uint64_t)(s->columns[i] - s->map) + (r + 1) * set->fixed_size[i];
        need = e > need ? e : need;
    }
    if (need <= valid) {
        /* The index entries are real: so is the record's extent. */
        uint64_t off = stk_rd64(s->offsets + r * 8), len = 0;
        for (uint32_t v = 0; v < set->nvar; v++)
            len += stk_rd32(s->lengths + (r * set->nvar + v) * 4);
        if (off <= valid && len <= valid - off)
            return 0;
    }
    return stk_fail(STK_EDATA,
                    "%s: record %llu (sample %llu): the shard was truncated while open (only "
                    "its first %llu of %llu bytes remain); the record's bytes were lost",
                    s->path, (unsigned long long)r, (unsigned long long)global,
                    (unsigned long long)valid, (unsigned long long)s->file_size);
}

static int record_get_unchecked(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                                const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                                stk_scratch *scratch, bool force_verify);

/* The bytes of record `r` of shard `s`, validated and checksummed per
 * policy; field_off[v] / field_len[v] for each variable field. `scratch` is
 * used by the pread path (record placed at scratch offset 0). A mapped
 * shard that lost the record to a truncation fails here with that reason
 * (not a misleading "index entry out of range" or "checksum mismatch"
 * computed over zeros). */
int stk_shard_record_get(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                         const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                         stk_scratch *scratch, bool force_verify)
{
    int rc = record_get_unchecked(set, s, r, global, bytes, field_off, field_len, scratch,
                                  force_verify);
    /* On success the caller checks after using the bytes (read_check, or
     * stk_shard_lost_check in the field, label and verify paths); a failure
     * is checked here, so a cut is reported as such, not as what it
     * caused. */
    int lost = rc < 0 ? stk_shard_lost_check(set, s, r, global) : 0;
    return lost ? lost : rc;
}

/* Record r's extent (offset, length) and its variable fields' places in
 * it, checked against the data area and the record size limit. */
static int record_extent(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                         uint64_t *off_out, uint64_t *len_out, uint64_t *field_off,
                         uint32_t *field_len)
{
    uint64_t off = stk_rd64(s->offsets + r * 8), len = 0;
    for (uint32_t v = 0; v < set->nvar; v++) {
        field_len[v] = stk_rd32(s->lengths + (r * set->nvar + v) * 4);
        field_off[v] = len;
        len += field_len[v]; /* at most 64 x 2^32: no overflow */
    }
    if (off < s->data_offset || off % STK_RECORD_ALIGN || off > s->data_end ||
        len > s->data_end - off || len > MAX_RECORD_BYTES)
        return stk_fail(STK_EDATA,
                        "%s: record %llu (sample %llu): its index entry is out of range (offset "
                        "%llu, %llu bytes, data area %llu..%llu)",
                        s->path, (unsigned long long)r, (unsigned long long)global,
                        (unsigned long long)off, (unsigned long long)len,
                        (unsigned long long)s->data_offset, (unsigned long long)s->data_end);
    *off_out = off;
    *len_out = len;
    return 0;
}

/* Does this read of record r compare its checksum (policy, or forced)? */
static bool checksum_due(const shardset *set, const shard *s, uint64_t r, bool force_verify)
{
    if (force_verify || set->verify == VERIFY_ALWAYS)
        return true;
    if (set->verify != VERIFY_FIRST)
        return false;
    return !(atomic_load_explicit(&s->verified[r / 64], memory_order_relaxed) &
             (1ull << (r % 64)));
}

/* The `len` bytes at `off` of s (pread mode): in place when the source
 * lends views, else read into scratch[0, len). */
static int record_pread(const shard *s, uint64_t r, uint64_t global, uint64_t off, uint64_t len,
                        stk_scratch *scratch, const uint8_t **bytes)
{
    int rc = stk_source_get(s->src, off, (size_t)len, scratch, bytes);
    if (rc == STK_EFORMAT && stk_source_can_shrink(s->src))
        /* A short read: the file shrank since it was opened (its size
         * was checked against the layout then). Said here, not by
         * formatting stk_errmsg() into itself. (A remote shard replaced
         * while open fails with STK_EFORMAT naming its URL: passed on as
         * it is, so the loader stops instead of skipping the rest.) */
        return stk_fail(STK_EDATA,
                        "%s: record %llu (sample %llu): the file ends before the "
                        "record's %llu bytes at offset %llu (truncated while open?)",
                        s->path, (unsigned long long)r, (unsigned long long)global,
                        (unsigned long long)len, (unsigned long long)off);
    return rc;
}

static int record_get_unchecked(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                      const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                      stk_scratch *scratch, bool force_verify)
{
    uint64_t off, len;
    int rc = record_extent(set, s, r, global, &off, &len, field_off, field_len);
    if (rc < 0)
        return rc;
    if (s->map) {
        *bytes = s->map + off;
        /* The first read of a record spanning pages: one readahead request
         * for all of them, not one synchronous 4 KiB read per page fault
         * (the data area is MADV_RANDOM). */
        uint64_t first = off / STK_PAGE * STK_PAGE, tbit = 1ull << (r % 64);
        if (!set->huge_pages && len && (off + len - 1) / STK_PAGE != off / STK_PAGE &&
            !(atomic_fetch_or_explicit(&s->touched[r / 64], tbit, memory_order_relaxed) & tbit))
            stk_mapping_advise(s->map, first, off + len - first, STK_ADVISE_WILLNEED);
    } else if ((rc = record_pread(s, r, global, off, len, scratch, bytes)) < 0) {
        return rc;
    }
    if (checksum_due(set, s, r, force_verify)) {
        uint64_t want = stk_rd64(s->checksums + r * 8), got = stk_checksum(*bytes, len);
        if (want != got)
            return stk_fail(STK_EDATA,
                            "%s: record %llu (sample %llu): checksum mismatch (stored %016llx, "
                            "computed %016llx): the record is damaged",
                            s->path, (unsigned long long)r, (unsigned long long)global,
                            (unsigned long long)want, (unsigned long long)got);
        if (s->verified)
            atomic_fetch_or_explicit(&s->verified[r / 64], 1ull << (r % 64),
                                     memory_order_relaxed);
    }
    return 0;
}

int stk_shard_value_check(const shardset *set, uint32_t field, const shard *s, uint64_t r,
                          uint64_t global, uint32_t len)
{
    const stk_field_def *f = &set->fields[field];
    if (!stk_field_varies(f))
        return 0;
    uint64_t row = stk_field_row_bytes(f);
    if (len % row == 0)
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: record %llu (sample %llu): field '%s': %u bytes is not a whole number "
                    "of %llu-byte rows (%s, %u dimensions)",
                    s->path, (unsigned long long)r, (unsigned long long)global, f->name, len,
                    (unsigned long long)row, f->type == STK_FIELD_INT64 ? "int64" : "float32",
                    f->ndim);
}

int stk_shard_field_get(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                        uint32_t field, const uint8_t **p, uint32_t *len, size_t *end,
                        stk_scratch *scratch)
{
    uint64_t foff[STK_MAX_FIELDS], off, rlen;
    uint32_t flen[STK_MAX_FIELDS];
    uint32_t v = set->var_slot[field];
    int rc;
    if (s->map || checksum_due(set, s, r, false)) {
        /* The whole record: in place (mmap), or read whole to be checked. */
        const uint8_t *bytes;
        if ((rc = stk_shard_record_get(set, s, r, global, &bytes, foff, flen, scratch, false)) < 0)
            return rc;
        *p = bytes + foff[v];
        *len = flen[v];
        *end = stk_shard_in_place(s) ? 0 : (size_t)(foff[set->nvar - 1] + flen[set->nvar - 1]);
    } else {
        /* pread of a record already checked (or never to be): only this
         * field's bytes. */
        if ((rc = record_extent(set, s, r, global, &off, &rlen, foff, flen)) < 0 ||
            (rc = record_pread(s, r, global, off + foff[v], flen[v], scratch, p)) < 0)
            return rc;
        *len = flen[v];
        *end = stk_shard_in_place(s) ? 0 : flen[v];
    }
    return stk_shard_value_check(set, field, s, r, global, *len);
}

/* Raw image payload -> view (decompressing into `out` if needed). */
int stk_shard_raw_image(const shardset *set, uint32_t field, const shard *s, uint64_t r,
                        uint64_t global, const uint8_t *p, uint32_t len, stk_scratch *out,
                        size_t out_at, stk_image_view *view)
{
    const stk_field_def *f = &set->fields[field];
    if (len < STK_RAW_PREFIX)
        return stk_fail(STK_EDATA, "%s: record %llu (sample %llu): raw image shorter than its "
                                   "12-byte shape prefix", s->path, (unsigned long long)r,
                        (unsigned long long)global);
    uint32_t h = stk_rd32(p), w = stk_rd32(p + 4), c = stk_rd32(p + 8);
    uint64_t pixels;
    if (!h || !w || !c || c > 4 || !stk_mul_ok((uint64_t)h * w, c, &pixels) ||
        (uint64_t)h * w > set->max_pixels ||
        (f->ndim == 3 && (h != f->dims[0] || w != f->dims[1] || c != f->dims[2])))
        return stk_fail(STK_EDATA, "%s: record %llu (sample %llu): bad raw image shape %ux%ux%u",
                        s->path, (unsigned long long)r, (unsigned long long)global, h, w, c);
    const uint8_t *px = p + STK_RAW_PREFIX;
    size_t plen = len - STK_RAW_PREFIX;
    if (f->compression) {
        unsigned long long content = ZSTD_getFrameContentSize(px, plen);
        if (content != pixels)
            return stk_fail(STK_EDATA, "%s: record %llu (sample %llu): zstd frame holds %llu "
                                       "bytes, the shape says %llu", s->path,
                            (unsigned long long)r, (unsigned long long)global, content,
                            (unsigned long long)pixels);
        /* pread: the record itself sits in out[0, out_at) and px points
         * into it; grow without losing it (stk_scratch_reserve does not
         * keep contents). */
        if (out->cap < out_at + pixels) {
            stk_scratch grown = {0};
            int rc = stk_scratch_reserve(&grown, out_at + pixels);
            if (rc < 0)
                return rc;
            if (out_at)
                memcpy(grown.data, out->data, out_at);
            if (out->data && px >= out->data && px < out->data + out_at)
                px = grown.data + (px - out->data);
            stk_scratch_free(out);
            *out = grown;
        }
        size_t got = ZSTD_decompress(out->data + out_at, pixels, px, plen);
        if (ZSTD_isError(got) || got != pixels)
            return stk_fail(STK_EDATA, "%s: record %llu (sample %llu): zstd: %s", s->path,
                            (unsigned long long)r, (unsigned long long)global,
                            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
        px = out->data + out_at;
    } else if (plen != pixels) {
        return stk_fail(STK_EDATA, "%s: record %llu (sample %llu): %zu pixel bytes, the shape "
                                   "%ux%ux%u needs %llu", s->path, (unsigned long long)r,
                        (unsigned long long)global, plen, h, w, c, (unsigned long long)pixels);
    }
    *view = (stk_image_view){px, h, w, c, (ptrdiff_t)w * c, (ptrdiff_t)c, 1};
    return 0;
}

int64_t stk_shard_label_of(const shardset *set, const shard *s, uint64_t r)
{
    if (set->label_field < 0)
        return 0;
    return (int64_t)stk_rd64(s->columns[set->label_field] + r * 8);
}

void stk_shard_record_prefetch(const shardset *set, const shard *s, uint64_t r, uint64_t global)
{
    uint64_t off, len, foff[STK_MAX_FIELDS];
    uint32_t flen[STK_MAX_FIELDS];
    char keep[STK_ERRMSG_MAX];
    snprintf(keep, sizeof keep, "%s", stk_errmsg());
    if (s->src && record_extent(set, s, r, global, &off, &len, foff, flen) == 0)
        stk_source_advise(s->src, NULL, off, len, STK_ADVISE_WILLNEED);
    stk_errmsg_set(keep); /* a bad entry is the read's to report */
}
