/*
 * recordset.c — the record table shared by the TFRecord, WebDataset and
 * RecordIO readers: files opened and mapped once, records as byte ranges
 * of them (see recordset.h).
 */
#include "format/recordset.h"

#include "core/error.h"
#include "io/map_guard.h"
#include "io/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Each file holds one descriptor while the set is open (a mapped file: the
 * SIGBUS guard's copy, its source is closed once mapped; a pread file: its
 * source), so a set of about a thousand files reaches the usual soft limit
 * of 1024 open files: ImageNet as WebDataset is 1,282 shards, LAION-400M
 * 41,000. As the set grows, raise the soft limit towards the hard one
 * (never lowering it), as Go's runtime does at start; past the hard limit
 * the open fails with the system's "Too many open files". */
static void stk_recordset_fd_room(uint32_t nfiles)
{
    struct rlimit rl;
    if (nfiles % 64 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)nfiles + 256;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    want *= 2; /* room for the next 64 files and more */
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
}

int stk_recordset_add_file(stk_recordset *rs, const char *path, uint64_t max_bytes,
                           int pread_only)
{
    if (rs->nfiles == UINT32_MAX)
        return stk_fail(STK_ELIMIT, "%s: too many files", path);
    stk_recordset_fd_room(rs->nfiles);
    stk_recfile *grown = realloc(rs->files, (rs->nfiles + 1) * sizeof *grown);
    if (!grown)
        return stk_fail(STK_ENOMEM, "%s: out of memory", path);
    rs->files = grown;
    stk_recfile *f = &rs->files[rs->nfiles];
    memset(f, 0, sizeof *f);
    f->first = rs->count;
    if (!(f->path = stk_strdup(path)))
        return STK_ENOMEM;
    rs->nfiles++; /* from here on stk_recordset_free frees f */
    int rc = stk_source_open_file(path, max_bytes, &f->src);
    if (rc < 0)
        return rc;
    f->size = f->src->size;
    if (!pread_only && f->size) {
        rc = stk_source_map(f->src, STK_MAP_SHARED, &f->map, &f->guard);
        if (rc == STK_EUNSUPPORTED) {
            stk_errmsg_clear();
            f->map = NULL;
        } else if (rc < 0) {
            return rc;
        } else {
            stk_source_close(f->src); /* the mapping (and its guard) keep the file */
            f->src = NULL;
        }
    }
    return 0;
}

int stk_recordset_push(stk_recordset *rs, uint64_t offset, uint64_t size, uint64_t max_records)
{
    const stk_recfile *f = &rs->files[rs->nfiles - 1];
    if (offset > f->size || size > f->size - offset)
        return stk_fail(STK_EFORMAT,
                        "%s: record %llu (byte %llu): its %llu bytes run past the end of the "
                        "file (%llu bytes)",
                        f->path, (unsigned long long)(rs->count - f->first),
                        (unsigned long long)offset, (unsigned long long)size,
                        (unsigned long long)f->size);
    if (size > UINT32_MAX)
        return stk_fail(STK_ELIMIT, "%s: record %llu (byte %llu): %llu bytes, 4 GiB or more",
                        f->path, (unsigned long long)(rs->count - f->first),
                        (unsigned long long)offset, (unsigned long long)size);
    if (rs->count >= max_records)
        return stk_fail(STK_ELIMIT, "%s: more than %llu records (the max_samples limit)",
                        f->path, (unsigned long long)max_records);
    if (rs->count == rs->cap) {
        uint64_t cap = rs->cap ? rs->cap * 2 : 1024;
        if (cap > SIZE_MAX / sizeof *rs->recs)
            return stk_fail(STK_ENOMEM, "%s: out of memory for the record table", f->path);
        stk_record_ref *grown = realloc(rs->recs, (size_t)cap * sizeof *grown);
        if (!grown)
            return stk_fail(STK_ENOMEM, "%s: out of memory for the record table", f->path);
        rs->recs = grown;
        rs->cap = cap;
    }
    rs->recs[rs->count++] =
        (stk_record_ref){.offset = offset, .size = (uint32_t)size, .file = rs->nfiles - 1};
    return 0;
}

int stk_recordset_get(const stk_recordset *rs, uint64_t i, stk_scratch *scratch,
                      const uint8_t **data, size_t *size)
{
    const stk_record_ref *r = &rs->recs[i];
    const stk_recfile *f = &rs->files[r->file];
    *size = r->size;
    if (f->map || r->size == 0) {
        *data = f->map ? f->map + r->offset : (const uint8_t *)"";
        return 0;
    }
    /* In place when the source lends views (a remote file: its cache's
     * mapping), as a mapping does; else read into scratch. */
    int rc = stk_source_get(f->src, r->offset, r->size, scratch, data);
    if (rc < 0) {
        /* A file shorter than at open lost this record: damage to skip, not
         * a reason to stop (other failures stay what they are, and so does
         * a remote object replaced while open: STK_EFORMAT, which stops the
         * loader); both name the record. */
        char name[1024];
        stk_recordset_name(rs, i, name, sizeof name);
        if (rc == STK_EFORMAT && stk_source_can_shrink(f->src))
            return stk_fail(STK_EDATA, "%s: the file ends before the record's end (truncated "
                                       "while open?)",
                            name);
        return stk_fail_prefix(rc, "%s", name);
    }
    return 0;
}

int stk_recordset_file_intact(const stk_recordset *rs, uint32_t f)
{
    const stk_recfile *file = &rs->files[f];
    if (!file->guard || stk_map_guard_intact(file->guard, 0, file->size))
        return 0;
    return stk_fail(STK_EIO,
                    "%s: the file was truncated while it was being opened (only its first %llu "
                    "of %llu bytes remain)",
                    file->path, (unsigned long long)stk_map_guard_valid(file->guard),
                    (unsigned long long)file->size);
}

int stk_recordset_check(const stk_recordset *rs, uint64_t i, uint64_t off, uint64_t len)
{
    const stk_record_ref *r = &rs->recs[i];
    const stk_recfile *f = &rs->files[r->file];
    if (!f->guard || stk_map_guard_intact(f->guard, r->offset + off, len))
        return 0;
    char name[1024];
    stk_recordset_name(rs, i, name, sizeof name);
    return stk_fail(STK_EDATA,
                    "%s: the file was truncated while open (only its first %llu of %llu bytes "
                    "remain); the record's bytes were lost",
                    name, (unsigned long long)stk_map_guard_valid(f->guard),
                    (unsigned long long)f->size);
}

void stk_recordset_name(const stk_recordset *rs, uint64_t i, char *buf, size_t size)
{
    const stk_record_ref *r = &rs->recs[i];
    const stk_recfile *f = &rs->files[r->file];
    snprintf(buf, size, "%s: record %llu (byte %llu)", f->path,
             (unsigned long long)(i - f->first), (unsigned long long)r->offset);
}

void stk_recordset_advise(const stk_recordset *rs, stk_access how)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < rs->nfiles; i++)
        total += rs->files[i].size;
    stk_advice random = stk_random_map_advice(total);
    for (uint32_t i = 0; i < rs->nfiles; i++) {
        const stk_recfile *f = &rs->files[i];
        if (f->map)
            stk_mapping_advise(f->map, 0, f->size,
                               how == STK_ACCESS_SEQUENTIAL ? STK_ADVISE_SEQUENTIAL : random);
        else if (f->src)
            stk_source_advise(f->src, NULL, 0, f->size,
                              how == STK_ACCESS_SEQUENTIAL ? STK_ADVISE_SEQUENTIAL
                                                           : STK_ADVISE_RANDOM);
    }
}

void stk_recordset_free(stk_recordset *rs)
{
    for (uint32_t i = 0; i < rs->nfiles; i++) {
        stk_recfile *f = &rs->files[i];
        stk_source_unmap(f->map, f->size, f->guard);
        stk_source_close(f->src);
        free(f->path);
    }
    free(rs->files);
    free(rs->recs);
    memset(rs, 0, sizeof *rs);
}
