/*
 * stk_shard.c — one .stk shard file, and the files of a shard set: open and
 * validate a shard, list the shards a path names, check that the shards
 * opened together are one whole set. The rest of the .stk reader sits on
 * top: record access (stk_record.c), the dataset adapter (stk_dataset.c)
 * and stk_verify (src/tools/verify.c); the types they share are in
 * stk_shard.h.
 *
 * Opening a shard validates everything the format promises before anything
 * is trusted (docs/format.md, "Reading and validation"): footer, header and
 * their checksums, the field table, the metadata bounds, the layout
 * arithmetic, and the index checksum. The index is then used in place — in
 * the mapping (default) or in one buffer read with pread (?io=pread) — so
 * opening a shard of a million records costs one hash pass over its index
 * and no per-record parsing. Every shard after the first must have the
 * first one's schema, byte for byte.
 *
 * Invariants after stk_shard_open returns 0: the footer, header and index
 * checksums matched; the index lies between data_end and the footer, its
 * columns (offsets, lengths, checksums, fixed fields) point into it at the
 * sizes the schema gives for n records; a mapped shard's source is closed
 * and the mapping registered with the map guard (src/io/map_guard.c);
 * a pread shard keeps its source and a copy of the index. Nothing in a
 * record is trusted yet: stk_record.c checks each one as it is read.
 *
 * The bytes come through src/io (source.h): each shard is a file source
 * opened by path, read with its pread (footer, header, the index in pread
 * mode) and mapped by its map (shared, read-only, guarded); the advice
 * below goes through stk_mapping_advise. This file makes no read, map or
 * advice system call itself; only the listing (stat, opendir, glob) is
 * done here.
 *
 * Shard sets (docs/format.md, "Shard sets"): every shard pack writes
 * carries shard_set (the set's id) and shard ("i/n"); stk_shard_set_check
 * refuses a missing, extra, repeated, renamed or foreign shard, and names
 * the stale temporaries an interrupted pack left beside the set.
 *
 * Thread safety: opening and listing touch only their arguments (no static
 * state); a shard is written only while it is opened.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/reader_util.h"
#include "format/stk/stk_shard.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Opening one shard                                                         */
/* ------------------------------------------------------------------------ */

/*
 * How the kernel should bring a mapped shard in. What a first pass through
 * a new mapping costs is mostly the page-table set-up: ~0.35-0.45 us per
 * 4 KiB page, ~100 ms per GB (bench/mmap_floor.c), as much as copying the
 * bytes. When the page cache holds the shard in 2 MiB folios — as the
 * writer leaves it (stk_writer.c) and as faults through a MADV_HUGEPAGE
 * mapping read it — the kernel maps 2 MiB per entry and that cost
 * disappears (~4 ms per GB).
 *
 * So when the dataset fits in half of RAM (or with ?hugepages=on; =off
 * never) the whole mapping is MADV_HUGEPAGE: a cold fault reads the 2 MiB
 * around it (no more bytes in total than the dataset, which will stay
 * cached), and every later mapping of it, in this process or the next, is
 * set up 2 MiB at a time. Larger
 * datasets would read 2 MiB per random record without keeping it, so
 * there records are read in random order with no readahead around a fault
 * (stk_shard_record_get asks for each record's own pages instead), and the
 * index is read whole, sequentially (WILLNEED alone is not enough for it:
 * the kernel caps one such request at the readahead size).
 */
static void shard_map_advice(const shardset *set, shard *s, uint64_t index_offset)
{
    if (set->huge_pages) {
        stk_mapping_advise(s->map, 0, s->file_size, STK_ADVISE_HUGEPAGE);
        return;
    }
    uint64_t page_start = index_offset / STK_PAGE * STK_PAGE;
    if (page_start > s->data_offset)
        stk_mapping_advise(s->map, s->data_offset, page_start - s->data_offset,
                           STK_ADVISE_RANDOM);
    stk_mapping_advise(s->map, page_start, s->file_size - page_start, STK_ADVISE_SEQUENTIAL);
}

void stk_shard_close(shard *s)
{
    stk_source_unmap(s->map, s->file_size, s->guard);
    stk_source_close(s->src);
    free(s->index_copy);
    free((void *)s->verified);
    free((void *)s->touched);
    free(s->path);
    memset(s, 0, sizeof *s);
}

/* Parse a decimal u32 of text[0, len) into *v: digits only, no sign, no
 * leading zero except "0". */
static bool parse_u32(const char *text, size_t len, uint32_t *v)
{
    uint64_t x = 0;
    if (len == 0 || len > 10 || (len > 1 && text[0] == '0'))
        return false;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(text[i] - '0');
    }
    if (x > UINT32_MAX)
        return false;
    *v = (uint32_t)x;
    return true;
}

/* The shard-set keys of one shard's metadata (docs/format.md, "Shard
 * sets"): shard_set (1 to 64 lowercase hex digits) and shard ("i/n", i < n),
 * both or neither. Walks the metadata of every shard, bounds-checked;
 * `at` is where the metadata starts in `h`. */
static int parse_set_keys(shard *s, const uint8_t *h, uint64_t at, uint32_t header_size,
                          uint32_t nmeta)
{
    const char *p = s->path;
    const uint8_t *id = NULL, *place = NULL;
    uint32_t id_len = 0, place_len = 0;
    for (uint32_t i = 0; i < nmeta; i++) {
        uint32_t len[2];
        const uint8_t *str[2];
        for (int part = 0; part < 2; part++) {
            if (at + 4 > header_size || (len[part] = stk_rd32(h + at)) > header_size - at - 4)
                return stk_fail(STK_EFORMAT, "%s: header: metadata entry %u runs past the header",
                                p, i);
            str[part] = h + at + 4;
            at += 4 + (uint64_t)len[part];
        }
        if (len[0] == 9 && !memcmp(str[0], "shard_set", 9) && !id) {
            id = str[1];
            id_len = len[1];
        } else if (len[0] == 5 && !memcmp(str[0], "shard", 5) && !place) {
            place = str[1];
            place_len = len[1];
        }
    }
    s->set_count = 0;
    s->set_id[0] = '\0';
    if (!id && !place)
        return 0;
    if (!id || !place)
        return stk_fail(STK_EFORMAT, "%s: header: metadata has '%s' without '%s'", p,
                        id ? "shard_set" : "shard", id ? "shard" : "shard_set");
    bool hex = id_len >= 1 && id_len <= SET_ID_MAX;
    for (uint32_t i = 0; hex && i < id_len; i++)
        hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
    if (!hex)
        return stk_fail(STK_EFORMAT, "%s: header: metadata 'shard_set' is not 1 to %d lowercase "
                                     "hex digits", p, SET_ID_MAX);
    const uint8_t *slash = memchr(place, '/', place_len);
    uint32_t pos, count;
    if (!slash || !parse_u32((const char *)place, (size_t)(slash - place), &pos) ||
        !parse_u32((const char *)slash + 1, place_len - (size_t)(slash - place) - 1, &count) ||
        count == 0 || pos >= count)
        return stk_fail(STK_EFORMAT, "%s: header: metadata 'shard' is '%.*s', not i/n with "
                                     "i < n", p, (int)(place_len < 40 ? place_len : 40),
                        (const char *)place);
    memcpy(s->set_id, id, id_len);
    s->set_id[id_len] = '\0';
    s->set_pos = pos;
    s->set_count = count;
    return 0;
}

/* Parse and check the header; fill the schema (first shard) or compare it
 * (later shards). `h` holds header_size bytes. */
static int parse_header(shardset *set, shard *s, const uint8_t *h, uint32_t header_size,
                        bool first)
{
    const char *p = s->path;
    uint32_t nfields = stk_rd32(h + HDR_FIELD_COUNT), nmeta = stk_rd32(h + HDR_META_COUNT);
    if (nfields == 0 || nfields > STK_MAX_FIELDS)
        return stk_fail(STK_EFORMAT, "%s: header: %u fields (1 to %d allowed)", p, nfields,
                        STK_MAX_FIELDS);
    if (nmeta > STK_MAX_METADATA)
        return stk_fail(STK_EFORMAT, "%s: header: %u metadata entries (at most %d)", p, nmeta,
                        STK_MAX_METADATA);
    uint64_t fields_end = STK_HEADER_SIZE + (uint64_t)nfields * STK_FIELD_ENTRY_SIZE;
    if (fields_end > header_size)
        return stk_fail(STK_EFORMAT, "%s: header: field table runs past the header", p);
    memcpy(s->header_fields, h + STK_HEADER_SIZE, (size_t)(fields_end - STK_HEADER_SIZE));
    int rc = parse_set_keys(s, h, fields_end, header_size, nmeta);
    if (rc < 0)
        return rc;
    if (!first) {
        if (nfields != set->nfields ||
            memcmp(s->header_fields, set->shards[0].header_fields,
                   (size_t)nfields * STK_FIELD_ENTRY_SIZE) != 0)
            return stk_fail(STK_EFORMAT, "%s: its schema differs from the first shard's (%s)", p,
                            set->shards[0].path);
        return 0;
    }
    set->nfields = nfields;
    set->image_field = set->label_field = -1;
    for (uint32_t i = 0; i < nfields; i++) {
        const uint8_t *e = h + STK_HEADER_SIZE + (size_t)i * STK_FIELD_ENTRY_SIZE;
        stk_field_def *f = &set->fields[i];
        memset(f, 0, sizeof *f);
        size_t len = strnlen((const char *)e + FLD_NAME, STK_FIELD_NAME_MAX);
        if (len == 0 || len == STK_FIELD_NAME_MAX)
            return stk_fail(STK_EFORMAT, "%s: header: field %u has no valid name", p, i);
        memcpy(f->name, e + FLD_NAME, len);
        f->type = e[FLD_TYPE];
        f->compression = e[FLD_COMPRESSION];
        f->ndim = e[FLD_NDIM];
        for (unsigned d = 0; d < 4; d++)
            f->dims[d] = stk_rd32(e + FLD_DIMS + 4 * d);
        uint32_t elem;
        const char *why = "";
        if (stk_field_layout(f, &set->storage[i], &elem, &set->fixed_size[i], &why) < 0)
            return stk_fail(STK_EFORMAT, "%s: header: field '%s': %s", p, f->name, why);
        if (e[FLD_STORAGE] != set->storage[i] || stk_rd32(e + FLD_ELEM_SIZE) != elem ||
            stk_rd64(e + FLD_FIXED_SIZE) != set->fixed_size[i])
            return stk_fail(STK_EFORMAT, "%s: header: field '%s' has an inconsistent layout", p,
                            f->name);
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(set->fields[j].name, f->name))
                return stk_fail(STK_EFORMAT, "%s: header: field name '%s' appears twice", p,
                                f->name);
        set->var_slot[i] = set->nvar;
        if (set->storage[i] == STK_STORAGE_VARIABLE)
            set->nvar++;
        if (set->image_field < 0 && (f->type == STK_FIELD_IMAGE || f->type == STK_FIELD_RAW_IMAGE))
            set->image_field = (int)i;
        if (f->type == STK_FIELD_INT64 && f->ndim == 0 &&
            (set->label_field < 0 || !strcmp(f->name, "label")))
            set->label_field = (int)i;
    }
    /* Metadata: nmeta (u32 len, bytes) pairs, all inside the header. */
    set->meta_keys = calloc(nmeta ? nmeta : 1, sizeof *set->meta_keys);
    set->meta_values = calloc(nmeta ? nmeta : 1, sizeof *set->meta_values);
    if (!set->meta_keys || !set->meta_values)
        return stk_fail(STK_ENOMEM, "out of memory");
    uint64_t at = fields_end;
    for (uint32_t i = 0; i < nmeta; i++) {
        for (int part = 0; part < 2; part++) {
            if (at + 4 > header_size)
                return stk_fail(STK_EFORMAT, "%s: header: metadata entry %u runs past the header",
                                p, i);
            uint32_t len = stk_rd32(h + at);
            at += 4;
            if (len > header_size - at)
                return stk_fail(STK_EFORMAT, "%s: header: metadata entry %u runs past the header",
                                p, i);
            char *str = malloc((size_t)len + 1);
            if (!str)
                return stk_fail(STK_ENOMEM, "out of memory");
            memcpy(str, h + at, len);
            str[len] = '\0';
            at += len;
            (part == 0 ? set->meta_keys : set->meta_values)[i] = str;
            set->nmeta = i + 1;
        }
    }
    return 0;
}

static uint64_t index_size_for(const shardset *set, uint64_t n, bool *ok)
{
    uint64_t total = 0, part;
    *ok = true;
    /* offsets + checksums */
    *ok &= stk_mul_ok(n, 16, &part) && stk_add_ok(total, part, &total);
    *ok &= stk_mul_ok(n, (uint64_t)set->nvar * 4, &part) && stk_add_ok(total, stk_pad_to(part, 8), &total);
    for (uint32_t i = 0; i < set->nfields; i++)
        if (set->storage[i] == STK_STORAGE_FIXED)
            *ok &= stk_mul_ok(n, set->fixed_size[i], &part) &&
                   stk_add_ok(total, stk_pad_to(part, 8), &total);
    return total;
}

int stk_shard_open(shardset *set, shard *s, const char *path, bool first)
{
    int rc;
    uint8_t footer[STK_FOOTER_SIZE], head[STK_HEADER_SIZE];
    uint8_t *header = NULL;
    memset(s, 0, sizeof *s);
    if (!(s->path = stk_strdup(path)))
        return STK_ENOMEM;
    /* The source words the reason; the messages are this reader's own:
     * "PATH: cannot open: REASON" (STK_ENOENT or STK_EIO), and "PATH: not a
     * regular file" for anything else but a regular file, or one whose type
     * cannot be learned (STK_EINVAL). */
    if ((rc = stk_source_open_file_at(AT_FDCWD, path, path, &s->src)) < 0)
        return rc == STK_EINVAL ? stk_fail(STK_EINVAL, "%s: not a regular file", path)
                                : stk_fail_prefix(rc, "%s", path);
    s->file_size = s->src->size;
    if (s->file_size < STK_PAGE + STK_FOOTER_SIZE)
        return stk_fail(STK_EFORMAT, "%s: %llu bytes is too small for a shard (truncated?)", path,
                        (unsigned long long)s->file_size);
    if (s->file_size > set->max_bytes)
        return stk_fail(STK_ELIMIT, "%s: %llu bytes is over the %llu-byte limit", path,
                        (unsigned long long)s->file_size, (unsigned long long)set->max_bytes);

    /* Footer first: it is written last, so a torn or unfinished file fails
     * here. */
    if ((rc = stk_source_pread(s->src, footer, sizeof footer, s->file_size - STK_FOOTER_SIZE)) < 0)
        return rc;
    if (memcmp(footer + FTR_MAGIC, STK_FOOTER_MAGIC, 8) != 0)
        return stk_fail(STK_EFORMAT, "%s: no footer (the file is truncated, unfinished, or not "
                                     "a .stk shard)", path);
    if (stk_rd32(footer + FTR_CHECKSUM) != (uint32_t)stk_checksum(footer, FTR_CHECKSUM))
        return stk_fail(STK_EFORMAT, "%s: footer checksum mismatch (the footer is damaged)", path);
    uint32_t version = stk_rd32(footer + FTR_VERSION);
    if (version >> 16 != STK_SHARD_VERSION_MAJOR)
        return stk_fail(STK_EUNSUPPORTED, "%s: format version %u.%u (this stoker reads 1.x)", path,
                        version >> 16, version & 0xffff);

    if ((rc = stk_source_pread(s->src, head, sizeof head, 0)) < 0)
        return rc;
    if (memcmp(head + HDR_MAGIC, STK_SHARD_MAGIC, 8) != 0)
        return stk_fail(STK_EFORMAT, "%s: not a .stk shard (bad magic)", path);
    if (stk_rd16(head + HDR_VMAJOR) != STK_SHARD_VERSION_MAJOR)
        return stk_fail(STK_EUNSUPPORTED, "%s: format version %u.%u (this stoker reads 1.x)", path,
                        stk_rd16(head + HDR_VMAJOR), stk_rd16(head + HDR_VMINOR));
    uint32_t header_size = stk_rd32(head + HDR_SIZE);
    s->data_offset = stk_rd64(head + HDR_DATA_OFFSET);
    if (header_size < STK_HEADER_SIZE || s->data_offset % STK_PAGE ||
        s->data_offset < header_size || s->data_offset > s->file_size - STK_FOOTER_SIZE)
        return stk_fail(STK_EFORMAT, "%s: header: bad header size %u / data offset %llu", path,
                        header_size, (unsigned long long)s->data_offset);
    header = malloc(header_size);
    if (!header)
        return stk_fail(STK_ENOMEM, "out of memory reading %s", path);
    if ((rc = stk_source_pread(s->src, header, header_size, 0)) < 0)
        goto done;
    uint64_t stored = stk_rd64(header + HDR_CHECKSUM);
    stk_wr64(header + HDR_CHECKSUM, 0);
    if (stk_checksum(header, header_size) != stored) {
        rc = stk_fail(STK_EFORMAT, "%s: header checksum mismatch (the header is damaged)", path);
        goto done;
    }
    if (stk_rd64(footer + FTR_HEADER_CHECKSUM) != stored) {
        rc = stk_fail(STK_EFORMAT, "%s: footer and header do not belong together", path);
        goto done;
    }
    if ((rc = parse_header(set, s, header, header_size, first)) < 0)
        goto done;

    /* Layout. */
    s->n = stk_rd64(footer + FTR_RECORD_COUNT);
    s->data_end = stk_rd64(footer + FTR_DATA_END);
    uint64_t index_offset = stk_rd64(footer + FTR_INDEX_OFFSET);
    uint64_t index_size = stk_rd64(footer + FTR_INDEX_SIZE);
    bool ok;
    uint64_t expect = index_size_for(set, s->n, &ok);
    uint64_t end;
    if (s->n > STK_MAX_RECORDS || !ok || expect != index_size || index_offset % STK_PAGE ||
        s->data_end < s->data_offset || index_offset < s->data_end ||
        !stk_add_ok(index_offset, index_size, &end) || !stk_add_ok(end, STK_FOOTER_SIZE, &end) ||
        end != s->file_size) {
        rc = stk_fail(STK_EFORMAT,
                      "%s: footer: inconsistent layout (%llu records, data end %llu, index at "
                      "%llu of %llu bytes, file %llu bytes)",
                      path, (unsigned long long)s->n, (unsigned long long)s->data_end,
                      (unsigned long long)index_offset, (unsigned long long)index_size,
                      (unsigned long long)s->file_size);
        goto done;
    }

    const uint8_t *index;
    if (set->pread_io) {
        s->index_copy = malloc(index_size ? index_size : 1);
        if (!s->index_copy) {
            rc = stk_fail(STK_ENOMEM, "%s: out of memory for a %llu-byte index", path,
                          (unsigned long long)index_size);
            goto done;
        }
        if ((rc = stk_source_pread(s->src, s->index_copy, index_size, index_offset)) < 0)
            goto done;
        index = s->index_copy;
    } else {
        /* Shared and read-only (source.h, STK_MAP_SHARED), registered with
         * the SIGBUS guard by the source: "PATH: mmap failed: REASON". */
        if ((rc = stk_source_map(s->src, STK_MAP_SHARED, &s->map, &s->guard)) < 0)
            goto done;
        s->index_offset = index_offset;
        shard_map_advice(set, s, index_offset);
        index = s->map + index_offset;
    }
    if (stk_checksum(index, index_size) != stk_rd64(footer + FTR_INDEX_CHECKSUM)) {
        rc = stk_fail(STK_EFORMAT, "%s: index checksum mismatch (the index is damaged)", path);
        goto done;
    }
    uint64_t at = 0;
    s->offsets = index;
    at += s->n * 8;
    s->lengths = index + at;
    at += stk_pad_to(s->n * set->nvar * 4, 8);
    s->checksums = index + at;
    at += s->n * 8;
    for (uint32_t i = 0; i < set->nfields; i++) {
        if (set->storage[i] != STK_STORAGE_FIXED)
            continue;
        s->columns[i] = index + at;
        at += stk_pad_to(s->n * set->fixed_size[i], 8);
    }
    if (s->map && !set->huge_pages && !(s->touched = calloc((size_t)(s->n / 64 + 1), sizeof *s->touched))) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto done;
    }
    if (set->verify == VERIFY_FIRST) {
        s->verified = calloc((size_t)(s->n / 64 + 1), sizeof *s->verified);
        if (!s->verified) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto done;
        }
    }
    if (!set->pread_io) {
        stk_source_close(s->src); /* the mapping keeps the file */
        s->src = NULL;
    }
    rc = 0;
done:
    free(header);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Listing shard files                                                       */
/* ------------------------------------------------------------------------ */

static const char *const stk_suffixes[] = {".stk", NULL};

static bool ends_with_stk(const char *name) { return stk_path_has_suffix(name, stk_suffixes); }


/* The shard paths of `path` (file, directory or glob), sorted, in a new
 * NULL-terminated array of malloc'd strings (the listing every multi-file
 * reader shares: stk_file_list, reader_util.h). */
int stk_shard_list(const char *path, char ***out, uint32_t *count)
{
    static const stk_file_list_words words = {"shard file", "*.stk shard files",
                                               "shard file or directory"};
    return stk_file_list(path, stk_suffixes, &words, out, count);
}

void stk_shard_list_free(char **list, uint32_t n) { stk_file_list_free(list, n); }

/* ------------------------------------------------------------------------ */
/* Shard sets                                                                */
/* ------------------------------------------------------------------------ */

/*
 * The shards opened together must be one whole set (docs/format.md, "Shard
 * sets"): either none of them has the set keys (shards written by hand or
 * before format 1.1: nothing to check), or all of them do, with the same
 * shard_set and count n, each place 0..n-1 exactly once, listed (sorted by
 * name) in place order. Anything else — a missing, extra, repeated,
 * renamed or foreign shard, or keyed and unkeyed shards mixed — is a
 * problem naming the shard (and for missing ones the set and the places),
 * reported through `fn`; stk_shard_set_check returns how many it found.
 */
/* snprintf for messages that may be cut at `size` (as stk_fail's are). */
static void msg_printf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void msg_printf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* Names of up to `max` stale temporaries (NAME.stk.tmp-...) in the
 * directory holding `path` (or `path` itself if it is a directory), joined
 * by ", " into buf; the number found. */
uint32_t stk_shard_stale_temporaries(const char *path, char *buf, size_t size, uint32_t max,
                                     set_problem_fn fn, void *ctx)
{
    char dir[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
    } else {
        const char *slash = strrchr(path, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else
            snprintf(dir, sizeof dir, "%.*s", (int)(slash > path ? slash - path : 1), path);
    }
    if (size)
        buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint32_t found = 0;
    size_t used = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".stk.tmp-"))
            continue;
        if (fn) {
            char full[4400];
            snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
            fn(ctx, full, "a temporary file left by an interrupted pack: ignored by open; "
                          "delete it (a new pack into this directory does)");
        }
        if (found < max && used < size) {
            int k = snprintf(buf + used, size - used, "%s%s/%s", found ? ", " : "", dir,
                             e->d_name);
            used += k > 0 ? (size_t)k : 0;
        }
        found++;
    }
    closedir(d);
    return found;
}

static int cmp_member_pos(const void *a, const void *b)
{
    const set_member *x = *(const set_member *const *)a, *y = *(const set_member *const *)b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return x < y ? -1 : x > y; /* listing order among repeats */
}

uint32_t stk_shard_set_check(const char *where, const set_member *m, uint32_t n,
                             set_problem_fn fn, void *ctx)
{
    char msg[STK_ERRMSG_MAX];
    const set_member *ref = NULL;
    uint32_t problems = 0;
    for (uint32_t i = 0; i < n && !ref; i++)
        if (m[i].count)
            ref = &m[i];
    if (!ref)
        return 0;
    const set_member **own = calloc(n, sizeof *own);
    if (!own) {
        fn(ctx, where, "out of memory checking the shard set");
        return 1;
    }
    uint32_t nown = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!m[i].count) {
            msg_printf(msg, sizeof msg, "%s: has no shard-set keys, but %s belongs to shard set %s: "
                     "shards of different sets are mixed", m[i].path, ref->path, ref->id);
            fn(ctx, m[i].path, msg);
            problems++;
        } else if (strcmp(m[i].id, ref->id) || m[i].count != ref->count) {
            msg_printf(msg, sizeof msg, "%s: belongs to another shard set (%s, %u shards) than %s "
                     "(%s, %u shards): a foreign shard", m[i].path, m[i].id, m[i].count,
                     ref->path, ref->id, ref->count);
            fn(ctx, m[i].path, msg);
            problems++;
        } else {
            own[nown++] = &m[i];
        }
    }
    /* Listing order first: is member k at place k? (Checked only when
     * every place is there once; otherwise the places say more.) */
    bool in_order = true;
    for (uint32_t k = 0; k < nown; k++)
        in_order &= own[k]->pos == k;
    /* The shard furthest from its place is the one to name (a renamed
     * shard moves alone; the ones it passes move by one). */
    const set_member *misplaced = NULL;
    uint32_t misplaced_at = 0, worst = 0;
    for (uint32_t k = 0; k < nown; k++) {
        uint32_t off = own[k]->pos > k ? own[k]->pos - k : k - own[k]->pos;
        if (off > worst) {
            worst = off;
            misplaced = own[k];
            misplaced_at = k;
        }
    }
    qsort(own, nown, sizeof *own, cmp_member_pos);
    char missing[512];
    size_t used = 0;
    uint32_t nmissing = 0, expect = 0;
    missing[0] = '\0';
    for (uint32_t k = 0; k <= nown; k++) {
        uint32_t pos = k < nown ? own[k]->pos : ref->count;
        if (k > 0 && k < nown && pos == own[k - 1]->pos) {
            msg_printf(msg, sizeof msg, "%s: repeats shard %u/%u of shard set %s, which %s holds "
                     "too: one of them is an extra copy", own[k]->path, pos, ref->count, ref->id,
                     own[k - 1]->path);
            fn(ctx, own[k]->path, msg);
            problems++;
            continue;
        }
        if (pos > expect) {
            nmissing += pos - expect;
            if (used < sizeof missing - 32) {
                int w = pos - expect == 1
                            ? snprintf(missing + used, sizeof missing - used, "%s%u",
                                       used ? ", " : "", expect)
                            : snprintf(missing + used, sizeof missing - used, "%s%u-%u",
                                       used ? ", " : "", expect, pos - 1);
                used += w > 0 ? (size_t)w : 0;
            } else if (used < sizeof missing - 4) {
                strcpy(missing + used, ", ...");
                used = sizeof missing;
            }
        }
        expect = pos + 1;
    }
    if (nmissing) {
        char stale[1024];
        uint32_t nstale =
            stk_shard_stale_temporaries(ref->path, stale, sizeof stale, 3, NULL, NULL);
        msg_printf(msg, sizeof msg, "%s: incomplete shard set %s: %u of %u shards; missing shard%s "
                 "%s (numbered from 0, as in shard-NNNNN.stk)%s%s%s", where, ref->id,
                 ref->count - nmissing, ref->count, nmissing == 1 ? "" : "s", missing,
                 nstale ? "; temporary files of an interrupted pack are there: " : "",
                 nstale ? stale : "", nstale > 3 ? ", ..." : "");
        fn(ctx, where, msg);
        problems++;
    } else if (!in_order && misplaced && !problems) {
        msg_printf(msg, sizeof msg, "%s: is shard %u/%u of shard set %s but is listed at place %u "
                 "(renamed?): shards are read in name order, which must be the set's order",
                 misplaced->path, misplaced->pos, ref->count, ref->id, misplaced_at);
        fn(ctx, misplaced->path, msg);
        problems++;
    }
    free(own);
    return problems;
}

int stk_shards_detect(const char *path)
{
    struct stat st;
    if (ends_with_stk(path) && !stk_path_has_glob(path))
        return stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (stk_path_has_glob(path) && stat(path, &st) != 0)
        return ends_with_stk(path);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)))
        found = ends_with_stk(e->d_name);
    closedir(d);
    return found;
}
