/*
 * recordset.h — records laid end to end in a set of files (internal).
 *
 * TFRecord files, WebDataset tar shards and MXNet RecordIO files have the
 * same shape: a list of files, each a run of records, each record's payload
 * a byte range of its file. What differs is the framing, which each reader
 * parses at open (or takes from an index) to build the table here: for
 * every record, (file, offset, size) of the bytes its `read` needs. After
 * that the reading is the same for all three, and lives here once:
 *
 *   - each file is opened as a source (src/io/source.h) and mapped whole
 *     (shared, read-only, registered with the SIGBUS guard); a view of a
 *     record is a pointer into the mapping, no copy. A file that cannot be
 *     mapped (a remote object: src/io/remote.c) is read per record: in
 *     place when its source lends views (the cache's mapping,
 *     stk_source_view), else with one pread into the caller's scratch.
 *   - stk_recordset_check tells whether a record's bytes were still the
 *     file's after use (a file truncated while open reads as zeros).
 *   - stk_recordset_name names a record "FILE: record R (byte O)", R
 *     counted within its file, for every message.
 *   - stk_recordset_advise passes the dataset's access hint to every
 *     mapping (sequential: generous readahead; random: the .stk reader's
 *     rule, stk_random_map_advice: huge pages when the whole set fits in
 *     half of RAM, else no readahead).
 *
 * The table costs 16 bytes per record (a 1 M-record set: 16 MB). Records
 * are pushed in order, file by file; `first` of each file is the index of
 * its first record, so a record's file-relative number is a subtraction.
 *
 * Thread safety: built by one thread at open; afterwards immutable, and
 * get/check/name/advise may be called by any number of threads.
 */
#ifndef STK_FORMAT_RECORDSET_H
#define STK_FORMAT_RECORDSET_H

#include "core/util.h"
#include "format/dataset.h"

#include <stdint.h>

struct stk_map_guard;
struct stk_source;

typedef struct stk_recfile {
    char *path;                  /* owned */
    struct stk_source *src;      /* owned; open for the set's life in pread mode,
                                    closed (NULL) once the file is mapped */
    const uint8_t *map;          /* owned mapping of the whole file, or NULL */
    struct stk_map_guard *guard; /* owned SIGBUS-guard registration, or NULL */
    uint64_t size;               /* bytes at open */
    uint64_t first;              /* index of the file's first record */
} stk_recfile;

typedef struct stk_record_ref {
    uint64_t offset; /* of the record's bytes within its file */
    uint32_t size;   /* bytes (a record is < 4 GiB) */
    uint32_t file;   /* index into files */
} stk_record_ref;

typedef struct stk_recordset {
    stk_recfile *files; /* owned, nfiles entries */
    uint32_t nfiles;
    stk_record_ref *recs; /* owned, count entries (cap allocated) */
    uint64_t count, cap;
} stk_recordset;

/* Open `path` (size checked against max_bytes), map it unless `pread_only`,
 * and append it to rs->files; its records follow with stk_recordset_push.
 * Errors name the path (stk_source_open_file's, the mapping's). */
int stk_recordset_add_file(stk_recordset *rs, const char *path, uint64_t max_bytes,
                           int pread_only);
/* The mapping of file f, or NULL (pread mode, or an empty file): for
 * parsing the framing at open without a copy. */
static inline const uint8_t *stk_recordset_file_data(const stk_recordset *rs, uint32_t f)
{
    return rs->files[f].map;
}
/* Append a record of the last added file: [offset, offset + size), which
 * must lie within the file (STK_EFORMAT otherwise, and STK_ELIMIT for a
 * record of 4 GiB or more or when there are more than max_records). */
int stk_recordset_push(stk_recordset *rs, uint64_t offset, uint64_t size, uint64_t max_records);
/* The bytes of record i: a view into the mapping or the source's view, or
 * read into `scratch` (pread mode: a file that ends early is STK_EDATA,
 * other failures keep their code; both messages name the record). */
int stk_recordset_get(const stk_recordset *rs, uint64_t i, stk_scratch *scratch,
                      const uint8_t **data, size_t *size);
/* After indexing file f from its mapping: 0, or STK_EIO naming the file
 * when it was cut while it was read (its lost pages read as zeros, which a
 * framing walk could take for an end marker and so drop records). */
int stk_recordset_file_intact(const stk_recordset *rs, uint32_t f);
/* After using bytes [off, off + len) of record i (relative to the record):
 * 0, or STK_EDATA via stk_fail naming the file and record when they were
 * lost to a truncation under the mapping. `what` names the dataset. */
int stk_recordset_check(const stk_recordset *rs, uint64_t i, uint64_t off, uint64_t len);
/* "FILE: record R (byte O)". */
void stk_recordset_name(const stk_recordset *rs, uint64_t i, char *buf, size_t size);
/* Pass an access hint to every mapping. */
void stk_recordset_advise(const stk_recordset *rs, stk_access how);
/* Free everything; safe on a partly built or zeroed set. */
void stk_recordset_free(stk_recordset *rs);

#endif
