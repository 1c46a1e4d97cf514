/*
 * stk_reader.c — .stk shards as a dataset: one index space over one or more
 * shard files, random access in O(1), safe from any number of threads.
 *
 * Opening a shard validates everything the format promises before anything
 * is trusted (docs/format.md, "Reading and validation"): footer, header and
 * their checksums, the field table, the metadata bounds, the layout
 * arithmetic, and the index checksum. The index is then used in place — in
 * the mapping (default) or in one buffer read with pread (?io=pread) — so
 * opening a shard of a million records costs one hash pass over its index
 * and no per-record parsing.
 *
 * Per read, every value taken from the file is checked before use: the
 * record offset lies in the data area and is aligned, the field lengths sum
 * (with overflow checks) to a record that ends before data_end, and raw
 * image payloads carry a shape whose size matches. Then the checksum policy
 * applies (?verify=off|first|always; "first" keeps one bit per record).
 * Record damage is STK_EDATA — skippable by the loader's policy — and names
 * the shard file, its record and the global sample index.
 *
 * Thread safety: after open everything is read-only except the "verified"
 * bitmap, updated with atomic OR; the pread path reads into the caller's
 * scratch. No locks on the read path.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/class_names.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "format/stk_format.h"
#include "format/stk_schema.h"
#include "io/map_guard.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <glob.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

enum { VERIFY_OFF, VERIFY_FIRST, VERIFY_ALWAYS };
#define MAX_RECORD_BYTES (4ull << 30)
#define SET_ID_MAX 64

typedef struct shard {
    char *path;                 /* owned */
    int fd;                     /* owned; -1 when mapped and closed */
    const uint8_t *map;         /* owned mapping of the whole file, or NULL (pread); madvise
                                   per shard_map_advice */
    stk_map_guard *guard;       /* owned registration of map (src/io/map_guard.c): pages lost
                                   to a truncation read as zeros; see shard_lost_check */
    uint8_t *index_copy;        /* owned: the index, read with pread (pread mode) */
    uint64_t file_size;
    uint64_t n, first;          /* records; global index of record 0 */
    uint64_t data_offset, data_end;
    const uint8_t *offsets, *lengths, *checksums; /* into the index */
    const uint8_t *columns[STK_MAX_FIELDS];       /* fixed fields, into the index */
    _Atomic uint64_t *verified; /* owned bitmap (policy "first") */
    _Atomic uint64_t *touched;  /* owned bitmap (mmap without huge pages): records read once */
    uint8_t header_fields[STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE]; /* to compare schemas */
    /* Shard-set keys (metadata shard_set, shard = set_pos/set_count);
     * set_count 0 when the shard has none (written by hand, or before 1.1). */
    char set_id[SET_ID_MAX + 1];
    uint32_t set_pos, set_count;
} shard;

typedef struct shardset {
    shard *shards;              /* owned, nshards */
    uint32_t nshards;
    stk_field_def fields[STK_MAX_FIELDS];
    uint8_t storage[STK_MAX_FIELDS];
    uint64_t fixed_size[STK_MAX_FIELDS];
    uint32_t var_slot[STK_MAX_FIELDS]; /* position among variable fields */
    uint32_t nfields, nvar;
    int image_field, label_field;      /* -1 when absent */
    char **meta_keys, **meta_values;   /* owned, NUL-terminated, nmeta each */
    uint32_t nmeta;
    int verify;
    bool pread_io;
    /* mmap only: the whole dataset fits in half of RAM, so a cold fault may
     * read the 2 MiB around it (MADV_HUGEPAGE) — see shard_map_advice. */
    bool huge_pages;
    uint64_t max_bytes, max_pixels;
} shardset;

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
 * (record_get asks for each record's own pages instead), and the index is
 * read whole, sequentially (WILLNEED alone is not enough for it: the kernel
 * caps one such request at the readahead size).
 */
static void shard_map_advice(const shardset *set, shard *s, uint64_t index_offset)
{
    if (set->huge_pages) {
        madvise((void *)s->map, s->file_size, MADV_HUGEPAGE);
        return;
    }
    uint64_t page_start = index_offset / STK_PAGE * STK_PAGE;
    if (page_start > s->data_offset)
        madvise((void *)(s->map + s->data_offset), page_start - s->data_offset, MADV_RANDOM);
    madvise((void *)(s->map + page_start), s->file_size - page_start, MADV_SEQUENTIAL);
}

static int read_exact(int fd, void *buf, size_t size, uint64_t offset, const char *path)
{
    uint8_t *p = buf;
    while (size) {
        ssize_t k = pread(fd, p, size, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return stk_fail(STK_EIO, "%s: read failed: %s", path, strerror(errno));
        if (k == 0)
            return stk_fail(STK_EFORMAT, "%s: unexpected end of file", path);
        p += k;
        size -= (size_t)k;
        offset += (uint64_t)k;
    }
    return 0;
}

static void shard_close(shard *s)
{
    stk_map_guard_remove(s->guard);
    if (s->map)
        munmap((void *)s->map, s->file_size);
    if (s->fd >= 0)
        close(s->fd);
    free(s->index_copy);
    free((void *)s->verified);
    free((void *)s->touched);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
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

static int shard_open(shardset *set, shard *s, const char *path, bool first)
{
    int rc;
    uint8_t footer[STK_FOOTER_SIZE], head[STK_HEADER_SIZE];
    uint8_t *header = NULL;
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (!(s->path = stk_strdup(path)))
        return STK_ENOMEM;
    s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0)
        return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat st;
    if (fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode))
        return stk_fail(STK_EINVAL, "%s: not a regular file", path);
    s->file_size = (uint64_t)st.st_size;
    if (s->file_size < STK_PAGE + STK_FOOTER_SIZE)
        return stk_fail(STK_EFORMAT, "%s: %llu bytes is too small for a shard (truncated?)", path,
                        (unsigned long long)s->file_size);
    if (s->file_size > set->max_bytes)
        return stk_fail(STK_ELIMIT, "%s: %llu bytes is over the %llu-byte limit", path,
                        (unsigned long long)s->file_size, (unsigned long long)set->max_bytes);

    /* Footer first: it is written last, so a torn or unfinished file fails
     * here. */
    if ((rc = read_exact(s->fd, footer, sizeof footer, s->file_size - STK_FOOTER_SIZE, path)) < 0)
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

    if ((rc = read_exact(s->fd, head, sizeof head, 0, path)) < 0)
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
    if ((rc = read_exact(s->fd, header, header_size, 0, path)) < 0)
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
        if ((rc = read_exact(s->fd, s->index_copy, index_size, index_offset, path)) < 0)
            goto done;
        index = s->index_copy;
    } else {
        void *m = mmap(NULL, s->file_size, PROT_READ, MAP_SHARED, s->fd, 0);
        if (m == MAP_FAILED) {
            rc = stk_fail(STK_EIO, "%s: mmap failed: %s", path, strerror(errno));
            goto done;
        }
        s->map = m;
        if ((rc = stk_map_guard_add(m, s->file_size, s->fd, &s->guard)) < 0) {
            stk_fail_prefix(rc, "%s", path);
            goto done;
        }
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
        close(s->fd);
        s->fd = -1;
    }
    rc = 0;
done:
    free(header);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Records                                                                   */
/* ------------------------------------------------------------------------ */

static const shard *locate(const shardset *set, uint64_t index, uint64_t *local)
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
static int shard_lost_check(const shardset *set, const shard *s, uint64_t r, uint64_t global)
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
static int record_get(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                      const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                      stk_scratch *scratch, bool force_verify)
{
    int rc = record_get_unchecked(set, s, r, global, bytes, field_off, field_len, scratch,
                                  force_verify);
    /* On success the caller checks after using the bytes (read_check, or
     * shard_lost_check in the field, label and verify paths); a failure is
     * checked here, so a cut is reported as such, not as what it caused. */
    int lost = rc < 0 ? shard_lost_check(set, s, r, global) : 0;
    return lost ? lost : rc;
}

static int record_get_unchecked(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                      const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                      stk_scratch *scratch, bool force_verify)
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
    if (s->map) {
        *bytes = s->map + off;
        /* The first read of a record spanning pages: one readahead request
         * for all of them, not one synchronous 4 KiB read per page fault
         * (the data area is MADV_RANDOM). */
        uint64_t first = off / STK_PAGE * STK_PAGE, tbit = 1ull << (r % 64);
        if (!set->huge_pages && len && (off + len - 1) / STK_PAGE != off / STK_PAGE &&
            !(atomic_fetch_or_explicit(&s->touched[r / 64], tbit, memory_order_relaxed) & tbit))
            madvise((void *)(s->map + first), off + len - first, MADV_WILLNEED);
    } else {
        int rc = stk_scratch_reserve(scratch, len ? len : 1);
        if (rc < 0)
            return rc;
        if ((rc = read_exact(s->fd, scratch->data, len, off, s->path)) < 0)
            /* A short read: the file shrank since it was opened (its size
             * was checked against the layout then). Said here, not by
             * formatting stk_errmsg() into itself. */
            return rc == STK_EFORMAT
                       ? stk_fail(STK_EDATA,
                                  "%s: record %llu (sample %llu): the file ends before the "
                                  "record's %llu bytes at offset %llu (truncated while open?)",
                                  s->path, (unsigned long long)r, (unsigned long long)global,
                                  (unsigned long long)len, (unsigned long long)off)
                       : rc;
        *bytes = scratch->data;
    }
    bool check = force_verify || set->verify == VERIFY_ALWAYS;
    uint64_t bit = 1ull << (r % 64);
    if (set->verify == VERIFY_FIRST && !check)
        check = !(atomic_load_explicit(&s->verified[r / 64], memory_order_relaxed) & bit);
    if (check) {
        uint64_t want = stk_rd64(s->checksums + r * 8), got = stk_checksum(*bytes, len);
        if (want != got)
            return stk_fail(STK_EDATA,
                            "%s: record %llu (sample %llu): checksum mismatch (stored %016llx, "
                            "computed %016llx): the record is damaged",
                            s->path, (unsigned long long)r, (unsigned long long)global,
                            (unsigned long long)want, (unsigned long long)got);
        if (s->verified)
            atomic_fetch_or_explicit(&s->verified[r / 64], bit, memory_order_relaxed);
    }
    return 0;
}

/* Raw image payload -> view (decompressing into `out` if needed). */
static int raw_image(const shardset *set, uint32_t field, const shard *s, uint64_t r,
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

static int64_t label_of(const shardset *set, const shard *s, uint64_t r)
{
    if (set->label_field < 0)
        return 0;
    return (int64_t)stk_rd64(s->columns[set->label_field] + r * 8);
}

/* vtable.read_check: the caller is done with the bytes of sample `index`. */
static int shards_read_check(const stk_dataset *ds, uint64_t index)
{
    uint64_t r;
    const shard *s = locate(ds->impl, index, &r);
    return shard_lost_check(ds->impl, s, r, index);
}

static int shards_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const shardset *set = ds->impl;
    uint64_t r, foff[STK_MAX_FIELDS];
    uint32_t flen[STK_MAX_FIELDS];
    const shard *s = locate(set, index, &r);
    const uint8_t *bytes;
    int rc = record_get(set, s, r, index, &bytes, foff, flen, scratch, false);
    if (rc < 0)
        return rc;
    memset(out, 0, sizeof *out);
    out->label = label_of(set, s, r);
    if (set->image_field < 0)
        return stk_fail(STK_EUNSUPPORTED, "%s: the shards have no image field", ds->uri);
    uint32_t v = set->var_slot[set->image_field];
    const uint8_t *p = bytes + foff[v];
    if (set->fields[set->image_field].type == STK_FIELD_IMAGE) {
        out->encoded = p;
        out->encoded_size = flen[v];
        return 0;
    }
    /* pread records sit at scratch[0, len); decompress after them. */
    size_t after = s->map ? 0 : (size_t)stk_pad_to(foff[set->nvar - 1] + flen[set->nvar - 1], 64);
    rc = raw_image(set, (uint32_t)set->image_field, s, r, index, p, flen[v], scratch, after,
                   &out->image);
    /* zstd read the mapping: a failure over lost pages is the truncation. */
    int lost = rc < 0 ? shard_lost_check(set, s, r, index) : 0;
    return lost ? lost : rc;
}

/* ------------------------------------------------------------------------ */
/* Fields, metadata, shards                                                  */
/* ------------------------------------------------------------------------ */

static uint32_t shards_field_count(const stk_dataset *ds) { return ((shardset *)ds->impl)->nfields; }

static int shards_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    const shardset *set = ds->impl;
    if (i >= set->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i, set->nfields);
    const stk_field_def *f = &set->fields[i];
    memset(info, 0, sizeof *info);
    info->name = f->name;
    info->type = (stk_field_type)f->type;
    info->ndim = f->ndim;
    memcpy(info->dims, f->dims, sizeof info->dims);
    info->compressed = f->compression != 0;
    return 0;
}

static int shards_read_field(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                             size_t *size, uint32_t shape[3])
{
    const shardset *set = ds->impl;
    uint64_t r, foff[STK_MAX_FIELDS];
    uint32_t flen[STK_MAX_FIELDS];
    const shard *s = locate(set, index, &r);
    const stk_field_def *f = &set->fields[field];
    stk_scratch scratch = {0};
    int rc = 0;
    const void *src = NULL;
    size_t n = 0;
    if (set->storage[field] == STK_STORAGE_FIXED) {
        src = s->columns[field] + r * set->fixed_size[field];
        n = (size_t)set->fixed_size[field];
    } else {
        const uint8_t *bytes;
        if ((rc = record_get(set, s, r, index, &bytes, foff, flen, &scratch, false)) < 0)
            goto done;
        uint32_t v = set->var_slot[field];
        src = bytes + foff[v];
        n = flen[v];
        if (f->type == STK_FIELD_RAW_IMAGE) {
            stk_image_view view;
            size_t after = (size_t)stk_pad_to(foff[set->nvar - 1] + flen[set->nvar - 1], 64);
            if ((rc = raw_image(set, field, s, r, index, src, (uint32_t)n, &scratch,
                                s->map ? 0 : after, &view)) < 0)
                goto done;
            src = view.pixels;
            n = (size_t)view.height * view.width * view.channels;
            if (shape) {
                shape[0] = view.height;
                shape[1] = view.width;
                shape[2] = view.channels;
            }
        }
    }
    if ((rc = stk_memdup(src, n, data)) == 0)
        *size = n;
done:
    stk_scratch_free(&scratch);
    int lost = shard_lost_check(set, s, r, index);
    if (lost && rc == 0) {
        free(*data);
        *data = NULL;
    }
    return lost ? lost : rc;
}

static int shards_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const shardset *set = ds->impl;
    uint64_t r;
    const shard *s = locate(set, index, &r);
    *label = label_of(set, s, r);
    return shard_lost_check(set, s, r, index);
}

static const char *shards_metadata(const stk_dataset *ds, const char *key)
{
    const shardset *set = ds->impl;
    for (uint32_t i = 0; i < set->nmeta; i++)
        if (!strcmp(set->meta_keys[i], key))
            return set->meta_values[i];
    return NULL;
}

static uint32_t shards_shard_count(const stk_dataset *ds) { return ((shardset *)ds->impl)->nshards; }

static int shards_shard_info(const stk_dataset *ds, uint32_t i, stk_shard_info *info)
{
    const shardset *set = ds->impl;
    if (i >= set->nshards)
        return stk_fail(STK_EINVAL, "%s: no shard %u (%u shards)", ds->uri, i, set->nshards);
    const shard *s = &set->shards[i];
    *info = (stk_shard_info){.path = s->path, .records = s->n, .first_index = s->first,
                             .file_bytes = s->file_size};
    return 0;
}

static void shards_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    uint64_t r;
    const shard *s = locate(ds->impl, index, &r);
    snprintf(buf, size, "%s: record %llu (sample %llu)", s->path, (unsigned long long)r,
             (unsigned long long)index);
}

static void shardset_free(shardset *set)
{
    if (!set)
        return;
    for (uint32_t i = 0; i < set->nshards; i++)
        shard_close(&set->shards[i]);
    free(set->shards);
    for (uint32_t i = 0; i < set->nmeta; i++) {
        free(set->meta_keys[i]);
        free(set->meta_values[i]);
    }
    free(set->meta_keys);
    free(set->meta_values);
    free(set);
}

static void shards_close(stk_dataset *ds) { shardset_free(ds->impl); }

static const stk_dataset_vtable shards_vt = {
    .format = "stk",
    .read = shards_read,
    .close = shards_close,
    .field_count = shards_field_count,
    .field_info = shards_field_info,
    .read_field = shards_read_field,
    .label = shards_label,
    .metadata = shards_metadata,
    .shard_count = shards_shard_count,
    .shard_info = shards_shard_info,
    .sample_name = shards_sample_name,
    .read_check = shards_read_check,
};

/* ------------------------------------------------------------------------ */
/* Listing shard files                                                       */
/* ------------------------------------------------------------------------ */

static bool has_glob_chars(const char *p) { return strpbrk(p, "*?[") != NULL; }

static bool ends_with_stk(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && !strcmp(name + n - 4, ".stk");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard paths of `path` (file, directory or glob), sorted, in a new
 * NULL-terminated array of malloc'd strings. */
static int list_shards(const char *path, char ***out, uint32_t *count)
{
    char **list = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    glob_t g;
    int globbed = 0; /* g holds a glob's result: globfree on the way out */
    *out = NULL;
    *count = 0;
#define PUSH(s)                                                                    \
    do {                                                                           \
        if (n + 2 > cap) {                                                         \
            cap = cap ? cap * 2 : 16;                                              \
            char **grown = realloc(list, cap * sizeof *list);                      \
            if (!grown) {                                                          \
                rc = stk_fail(STK_ENOMEM, "out of memory");                        \
                goto fail;                                                         \
            }                                                                      \
            list = grown;                                                          \
        }                                                                          \
        if (!(list[n] = (s))) {                                                    \
            rc = STK_ENOMEM;                                                       \
            goto fail;                                                             \
        }                                                                          \
        list[++n] = NULL;                                                          \
    } while (0)
    struct stat st;
    if (has_glob_chars(path) && stat(path, &st) != 0) {
        int grc = glob(path, 0, NULL, &g);
        globbed = 1; /* glob leaves g for globfree on error too */
        if (grc == GLOB_NOMATCH) {
            rc = stk_fail(STK_ENOENT, "%s: no shard file matches this pattern", path);
            goto fail;
        }
        if (grc != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot expand the pattern", path);
            goto fail;
        }
        for (size_t i = 0; i < g.gl_pathc; i++)
            PUSH(stk_strdup(g.gl_pathv[i]));
        globfree(&g);
        globbed = 0;
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) {
            rc = stk_fail(STK_EIO, "%s: cannot list: %s", path, strerror(errno));
            goto fail;
        }
        struct dirent *e;
        /* NULL with errno set is a read error, not the end of the list. */
        for (errno = 0; (e = readdir(d)); errno = 0) {
            if (!ends_with_stk(e->d_name))
                continue;
            char *p = malloc(strlen(path) + strlen(e->d_name) + 2);
            if (p)
                sprintf(p, "%s/%s", path, e->d_name);
            if (!p) {
                closedir(d);
                rc = stk_fail(STK_ENOMEM, "out of memory");
                goto fail;
            }
            if (n + 2 > cap) {
                cap = cap ? cap * 2 : 16;
                char **grown = realloc(list, cap * sizeof *list);
                if (!grown) {
                    free(p);
                    closedir(d);
                    rc = stk_fail(STK_ENOMEM, "out of memory");
                    goto fail;
                }
                list = grown;
            }
            list[n++] = p;
            list[n] = NULL;
        }
        if (errno != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot list: %s", path, strerror(errno));
            closedir(d);
            goto fail;
        }
        closedir(d);
        if (n == 0) {
            rc = stk_fail(STK_ENOENT, "%s: no *.stk shard files in this directory", path);
            goto fail;
        }
    } else if (stat(path, &st) == 0) {
        PUSH(stk_strdup(path));
    } else {
        rc = stk_fail(STK_ENOENT, "%s: no such shard file or directory", path);
        goto fail;
    }
#undef PUSH
    qsort(list, n, sizeof *list, cmp_str);
    *out = list;
    *count = (uint32_t)n;
    return 0;
fail:
    if (globbed)
        globfree(&g);
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
    return rc;
}

static void free_list(char **list, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

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
 * reported through `fn`; set_check returns how many it found.
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

typedef struct set_member {
    const char *path;          /* lent */
    char id[SET_ID_MAX + 1];
    uint32_t pos, count;       /* count 0: no set keys */
} set_member;

typedef void (*set_problem_fn)(void *ctx, const char *path, const char *msg);

/* Names of up to `max` stale temporaries (NAME.stk.tmp-...) in the
 * directory holding `path` (or `path` itself if it is a directory), joined
 * by ", " into buf; the number found. */
static uint32_t stale_temporaries(const char *path, char *buf, size_t size, uint32_t max,
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

static uint32_t set_check(const char *where, const set_member *m, uint32_t n, set_problem_fn fn,
                          void *ctx)
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
        uint32_t nstale = stale_temporaries(ref->path, stale, sizeof stale, 3, NULL, NULL);
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

/* set_problem_fn for open: keep the first message. */
static void first_problem(void *ctx, const char *path, const char *msg)
{
    char *first = ctx;
    (void)path;
    if (!first[0])
        snprintf(first, STK_ERRMSG_MAX, "%s", msg);
}

int stk_shards_detect(const char *path)
{
    struct stat st;
    if (ends_with_stk(path) && !has_glob_chars(path))
        return stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (has_glob_chars(path) && stat(path, &st) != 0)
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

/* ------------------------------------------------------------------------ */
/* Open                                                                      */
/* ------------------------------------------------------------------------ */

/* ?io= not given: decided from the first shard's schema (see shardset_open). */
enum { IO_AUTO, IO_MMAP, IO_PREAD };

/* ?verify=off|first|always & io=auto|mmap|pread & hugepages=auto|on|off,
 * through the one query parser every reader uses (reader_util.c: no
 * strtok, no state outside the call, a repeated key is an error). */
static int parse_query(const char *uri, const char *query, shardset *set, int *io, int *huge)
{
    static const char *const verify_values[] = {"off", "first", "always", NULL};
    static const char *const io_values[] = {"auto", "mmap", "pread", NULL};
    static const char *const huge_values[] = {"auto", "on", "off", NULL};
    stk_query_key keys[] = {
        {"verify", verify_values, -1},
        {"io", io_values, -1},
        {"hugepages", huge_values, -1},
    };
    int rc = stk_query_parse(uri, "stk", query, keys, sizeof keys / sizeof keys[0]);
    if (rc < 0)
        return rc;
    set->verify = keys[0].value < 0 ? VERIFY_FIRST : keys[0].value; /* = VERIFY_* order */
    set->pread_io = false;
    *io = keys[1].value < 0 ? IO_AUTO : keys[1].value;                /* = IO_* order */
    *huge = keys[2].value <= 0 ? -1 : keys[2].value == 1;             /* auto -1, on 1, off 0 */
    return 0;
}

/* A hint for ?io=auto: does the first shard's first image field hold
 * encoded images? Reads only the field table; the real open validates
 * everything (a damaged file simply gets the mmap default and fails there). */
static bool first_image_is_encoded(const char *path)
{
    uint8_t buf[STK_HEADER_SIZE + STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    close(fd);
    if (n < STK_HEADER_SIZE || memcmp(buf, STK_SHARD_MAGIC, 8) != 0)
        return false;
    uint32_t nfields = stk_rd32(buf + HDR_FIELD_COUNT);
    for (uint32_t i = 0; i < nfields && i < STK_MAX_FIELDS; i++) {
        const uint8_t *e = buf + STK_HEADER_SIZE + (size_t)i * STK_FIELD_ENTRY_SIZE;
        if (e + STK_FIELD_ENTRY_SIZE > buf + n)
            return false;
        if (e[FLD_TYPE] == STK_FIELD_IMAGE)
            return true;
        if (e[FLD_TYPE] == STK_FIELD_RAW_IMAGE)
            return false;
    }
    return false;
}

/* Open every shard of `paths` into a new shardset. */
static int shardset_open(const char *uri, char **paths, uint32_t n, const char *query,
                         const stk_dataset_options *opts, shardset **out)
{
    int rc;
    shardset *set = calloc(1, sizeof *set);
    if (!set)
        return stk_fail(STK_ENOMEM, "out of memory");
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    set->max_bytes = o.max_bytes;
    set->max_pixels = o.max_pixels;
    int io, huge;
    if ((rc = parse_query(uri, query, set, &io, &huge)) < 0)
        goto fail;
    if (io == IO_AUTO) {
        /* Encoded images (~100 KB, then ~1 ms of decoding each) are read with
         * pread into the worker's scratch: the copy costs nothing next to the
         * decode, and the process does not keep the whole dataset mapped
         * and resident. Small raw records are used in place through mmap. */
        set->pread_io = first_image_is_encoded(paths[0]);
    } else {
        set->pread_io = io == IO_PREAD;
    }
    if (!set->pread_io && huge >= 0) {
        set->huge_pages = huge == 1;
    } else if (!set->pread_io) {
        uint64_t bytes = 0;
        struct stat st;
        for (uint32_t i = 0; i < n; i++)
            if (stat(paths[i], &st) == 0)
                bytes += (uint64_t)st.st_size;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        set->huge_pages = pages > 0 && page > 0 && bytes <= (uint64_t)pages * (uint64_t)page / 2;
    }
    set->shards = calloc(n, sizeof *set->shards);
    if (!set->shards) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto fail;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        rc = shard_open(set, &set->shards[i], paths[i], i == 0);
        set->nshards = i + 1;
        if (rc < 0)
            goto fail;
        set->shards[i].first = total;
        if (!stk_add_ok(total, set->shards[i].n, &total) || total > o.max_samples) {
            rc = stk_fail(STK_ELIMIT, "%s: more than %llu samples", uri,
                          (unsigned long long)o.max_samples);
            goto fail;
        }
    }
    *out = set;
    return 0;
fail:
    shardset_free(set);
    return rc;
}

int stk_shards_open(const char *uri, const char *path, const char *query,
                    const stk_dataset_options *opts, stk_dataset **out)
{
    char **paths;
    uint32_t n;
    shardset *set = NULL;
    int rc = list_shards(path, &paths, &n);
    if (rc < 0)
        return rc;
    rc = shardset_open(uri, paths, n, query, opts, &set);
    if (rc == 0) {
        set_member *m = calloc(set->nshards, sizeof *m);
        char first[STK_ERRMSG_MAX] = "";
        if (!m) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
        } else {
            for (uint32_t i = 0; i < set->nshards; i++) {
                m[i].path = set->shards[i].path;
                memcpy(m[i].id, set->shards[i].set_id, sizeof m[i].id);
                m[i].pos = set->shards[i].set_pos;
                m[i].count = set->shards[i].set_count;
            }
            if (set_check(uri, m, set->nshards, first_problem, first))
                rc = stk_fail(STK_EFORMAT, "%s", first);
            free(m);
        }
        if (rc < 0) {
            shardset_free(set);
            set = NULL;
        }
    }
    free_list(paths, n);
    if (rc < 0)
        return rc;
    stk_dataset *ds = stk_dataset_alloc(&shards_vt, uri);
    if (!ds) {
        shardset_free(set);
        return STK_ENOMEM;
    }
    ds->impl = set;
    for (uint32_t i = 0; i < set->nshards; i++)
        ds->count += set->shards[i].n;
    if (ds->count == 0) {
        stk_dataset_close(ds);
        return stk_fail(STK_EFORMAT, "%s: the shards hold no records", uri);
    }
    if (set->image_field >= 0) {
        const stk_field_def *f = &set->fields[set->image_field];
        if (f->type == STK_FIELD_RAW_IMAGE && f->ndim == 3) {
            ds->height = f->dims[0];
            ds->width = f->dims[1];
            ds->channels = f->dims[2];
        }
    }
    /* Label map from the metadata: one escaped name a line (class_names.c). */
    const char *names = shards_metadata(ds, "class_names");
    if (names && *names) {
        int nrc = stk_class_names_decode(names, &ds->class_names, &ds->num_classes);
        if (nrc < 0) {
            stk_dataset_close(ds);
            return nrc;
        }
    }
    *out = ds;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Verify                                                                    */
/* ------------------------------------------------------------------------ */

#include "codec/codec.h"

static void report(const stk_verify_options *o, const char *shard_path, uint64_t record,
                   const char *reason)
{
    if (o && o->on_damage)
        o->on_damage(o->ctx, shard_path, record, reason);
}

typedef struct verify_ctx {
    const stk_verify_options *opts;
    stk_verify_result *res;
} verify_ctx;

static void set_damage(void *ctx, const char *path, const char *msg)
{
    verify_ctx *v = ctx;
    size_t n = strlen(path);
    v->res->bad_shards++;
    /* on_damage gets the path apart: not twice. */
    bool prefixed = !strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2);
    report(v->opts, path, UINT64_MAX, prefixed ? msg + n + 2 : msg);
}

static void stale_notice(void *ctx, const char *path, const char *msg)
{
    const stk_verify_options *o = ctx;
    if (o && o->on_notice)
        o->on_notice(o->ctx, path, msg);
}

/* The current message into `reason`; with the global sample index unknown
 * (passed as UINT64_MAX), say so instead of printing that number. */
static void take_reason(char *reason, size_t size, bool global_known)
{
    static const char unknown[] = " (sample 18446744073709551615)";
    const char *m = stk_errmsg(), *at = global_known ? NULL : strstr(m, unknown);
    if (!at)
        snprintf(reason, size, "%s", m);
    else
        snprintf(reason, size, "%.*s (sample unknown: an earlier shard could not be opened)%s",
                 (int)(at - m), m, at + sizeof unknown - 1);
}

/*
 * stk_verify: each shard is opened alone with every record checksummed (so
 * one damaged shard does not hide the others), then the shards are checked
 * as a set (set_check). Record problems name the shard, the record in it and
 * the global sample index — the shard's first index is the sum of the
 * records of the shards listed before it, unknown after one that could not
 * be opened. Where the shards store source_index (stk_pack), it must rise
 * strictly from record to record across the whole set: record i comes
 * from a later source sample than record i - 1, so no sample is stored
 * twice or out of order. Stale temporaries of an interrupted pack beside
 * the shards are reported through on_notice; they do not fail the check.
 */
int stk_verify(const char *uri, const stk_verify_options *opts, stk_verify_result *result)
{
    stk_verify_result res = {0};
    if (!uri)
        return stk_fail(STK_EINVAL, "stk_verify: NULL URI");
    int rc;
    if (opts && (rc = stk_reserved_check(opts->reserved_, sizeof opts->reserved_ / sizeof opts->reserved_[0], "stk_verify_options")) < 0)
        return rc;
    const char *path = strncmp(uri, "stk:", 4) == 0 ? uri + 4 : uri;
    char **paths;
    uint32_t n;
    rc = list_shards(path, &paths, &n);
    if (rc < 0)
        return rc;
    stk_scratch scratch = {0}, pixels = {0};
    char reason[STK_ERRMSG_MAX];
    uint8_t schema0[STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE];
    uint32_t nfields0 = 0, nmembers = 0;
    set_member *members = calloc(n, sizeof *members);
    if (!members) {
        free_list(paths, n);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    uint64_t base = 0;     /* global index of the current shard's record 0 */
    bool base_known = true;
    int64_t prev_source = -1;
    bool schema_differs = false;
    for (uint32_t i = 0; i < n; i++) {
        res.shards++;
        shardset *set = NULL;
        /* Each shard alone, every record checked. */
        rc = shardset_open(uri, &paths[i], 1, "verify=always", NULL, &set);
        if (rc < 0) {
            res.bad_shards++;
            snprintf(reason, sizeof reason, "%s", stk_errmsg());
            report(opts, paths[i], UINT64_MAX, reason);
            base_known = false;
            continue;
        }
        const shard *s = &set->shards[0];
        members[nmembers].path = paths[i];
        memcpy(members[nmembers].id, s->set_id, sizeof members[nmembers].id);
        members[nmembers].pos = s->set_pos;
        members[nmembers].count = s->set_count;
        nmembers++;
        if (i == 0 || nfields0 == 0) {
            nfields0 = set->nfields;
            memcpy(schema0, s->header_fields, nfields0 * STK_FIELD_ENTRY_SIZE);
        } else if (set->nfields != nfields0 ||
                   memcmp(schema0, s->header_fields, nfields0 * STK_FIELD_ENTRY_SIZE)) {
            res.bad_shards++;
            schema_differs = true;
            report(opts, paths[i], UINT64_MAX, "its schema differs from the first shard's");
        }
        int source_field = -1;
        for (uint32_t f = 0; f < set->nfields; f++)
            if (!strcmp(set->fields[f].name, "source_index") &&
                set->fields[f].type == STK_FIELD_INT64 && set->fields[f].ndim == 0)
                source_field = (int)f;
        for (uint64_t r = 0; r < s->n; r++) {
            uint64_t foff[STK_MAX_FIELDS];
            uint32_t flen[STK_MAX_FIELDS];
            const uint8_t *bytes;
            uint64_t global = base_known ? base + r : UINT64_MAX;
            res.records++;
            rc = record_get(set, s, r, global, &bytes, foff, flen, &scratch, true);
            for (uint32_t f = 0; rc == 0 && f < set->nfields; f++) {
                if (set->storage[f] != STK_STORAGE_VARIABLE)
                    continue;
                uint32_t v = set->var_slot[f];
                const uint8_t *p = bytes + foff[v];
                if (set->fields[f].type == STK_FIELD_RAW_IMAGE) {
                    stk_image_view view;
                    rc = raw_image(set, f, s, r, global, p, flen[v], &pixels, 0, &view);
                } else if (set->fields[f].type == STK_FIELD_IMAGE && opts && opts->decode) {
                    stk_image_view view;
                    rc = stk_image_decode(p, flen[v], NULL, NULL, 1, &pixels, &view);
                    if (rc < 0)
                        rc = stk_fail_prefix(rc, "%s: record %llu (sample %llu): field '%s'",
                                             s->path, (unsigned long long)r,
                                             (unsigned long long)global, set->fields[f].name);
                }
            }
            if (rc == 0 && source_field >= 0) {
                int64_t src = (int64_t)stk_rd64(s->columns[source_field] + r * 8);
                if (src < 0)
                    rc = stk_fail(STK_EDATA, "%s: record %llu (sample %llu): source_index %lld "
                                             "is negative", s->path, (unsigned long long)r,
                                  (unsigned long long)global, (long long)src);
                else if (src <= prev_source)
                    rc = stk_fail(STK_EDATA, "%s: record %llu (sample %llu): source_index %lld "
                                             "is not after %lld, the previous record's: a "
                                             "source sample is stored twice or out of order",
                                  s->path, (unsigned long long)r, (unsigned long long)global,
                                  (long long)src, (long long)prev_source);
                /* From here on, against this one: one report where the
                 * order breaks, not one for every record after it. */
                prev_source = src;
            }
            int lost = shard_lost_check(set, s, r, global);
            rc = lost ? lost : rc;
            if (rc < 0) {
                res.bad_records++;
                take_reason(reason, sizeof reason, base_known);
                report(opts, s->path, r, reason);
            }
        }
        base += s->n;
        shardset_free(set);
    }
    /* Shards of another schema are already reported, and cannot be of
     * this set: one report for them, at most one per shard in all. */
    verify_ctx vc = {opts, &res};
    if (!schema_differs)
        set_check(uri, members, nmembers, set_damage, &vc);
    char none[1];
    stale_temporaries(path, none, 0, 0, stale_notice, (void *)opts);
    free(members);
    stk_scratch_free(&scratch);
    stk_scratch_free(&pixels);
    free_list(paths, n);
    if (result)
        *result = res;
    if (res.bad_shards || res.bad_records)
        return stk_fail(STK_EDATA, "%s: %u of %u shards and %llu of %llu records are damaged", uri,
                        res.bad_shards, res.shards, (unsigned long long)res.bad_records,
                        (unsigned long long)res.records);
    return 0;
}
