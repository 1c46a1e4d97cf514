/*
 * source.h — byte sources: where a reader's bytes come from (internal).
 *
 * A source is a named, fixed-size run of bytes that can be read at any
 * offset (pread), may be mapped into memory whole (map), and takes access
 * hints (advise). Today the one kind is a local file (source.c); an object
 * store (HTTP/S3 range requests) or a cache implements the same operations,
 * answering map with STK_EUNSUPPORTED so that readers fall back to pread.
 *
 * Opening a local file is done in one place and one way: without blocking
 * (a FIFO named as a dataset must not hang the open), regular files only,
 * the size checked against the caller's byte limit before anything is
 * read. Every failure names the path and says why, with the code a caller
 * can act on: STK_ENOENT (missing), STK_EINVAL (a directory or device),
 * STK_ELIMIT (too large), STK_EIO (the OS refused).
 *
 * Thread safety: after open a source is immutable; pread and advise may be
 * called by any number of threads at once. map, close: by the owner, once.
 */
#ifndef STK_IO_SOURCE_H
#define STK_IO_SOURCE_H

#include <stddef.h>
#include <stdint.h>

typedef struct stk_source stk_source;

/* Access hints (advisory: a source may ignore any of them). */
typedef enum stk_advice {
    STK_ADVISE_WILLNEED,   /* these bytes will be read soon: start fetching */
    STK_ADVISE_SEQUENTIAL, /* read in order: read ahead generously */
    STK_ADVISE_RANDOM,     /* read in no order: no readahead around a read */
    STK_ADVISE_HUGEPAGE,   /* mapped: back the mapping with 2 MiB pages */
} stk_advice;

typedef struct stk_source_ops {
    const char *kind; /* "file" */
    /* Exactly n bytes at `offset` into buf: 0, STK_EFORMAT when the source
     * ends first ("unexpected end of file"), STK_EIO. */
    int (*pread)(const stk_source *s, void *buf, size_t n, uint64_t offset);
    /* The whole source mapped read-only (private), in *data, owned by the
     * caller from then on (munmap(data, size)); STK_EUNSUPPORTED when the
     * source cannot be mapped. A zero-size source maps to NULL. */
    int (*map)(stk_source *s, const uint8_t **data);
    /* A hint for [offset, offset + len) of a mapping `data` from map (or
     * NULL for pread access). */
    void (*advise)(const stk_source *s, const uint8_t *data, uint64_t offset, uint64_t len,
                   stk_advice advice);
    void (*close)(stk_source *s);
} stk_source_ops;

struct stk_source {
    const stk_source_ops *ops;
    char *name;    /* owned: the path or URL, for messages */
    uint64_t size; /* bytes, fixed at open */
};

/* Open the local file `path` (see the essay above). */
int stk_source_open_file(const char *path, uint64_t max_bytes, stk_source **out);

static inline int stk_source_pread(const stk_source *s, void *buf, size_t n, uint64_t offset)
{
    return s->ops->pread(s, buf, n, offset);
}
static inline int stk_source_map(stk_source *s, const uint8_t **data)
{
    return s->ops->map(s, data);
}
static inline void stk_source_advise(const stk_source *s, const uint8_t *data, uint64_t offset,
                                     uint64_t len, stk_advice advice)
{
    if (s->ops->advise)
        s->ops->advise(s, data, offset, len, advice);
}
/* NULL is a no-op. */
void stk_source_close(stk_source *s);

/* ------------------------------------------------------------------------ */
/* A whole file mapped: what the array readers (CIFAR, IDX, npy) use        */
/* ------------------------------------------------------------------------ */

struct stk_map_guard;

/* A read-only private mapping of a whole file. */
typedef struct stk_mapped_file {
    const uint8_t *data; /* owned mapping (munmap via stk_unmap_file); NULL
                            when the file is empty */
    size_t size;         /* file size in bytes at open */
    struct stk_map_guard *guard; /* owned SIGBUS-guard registration
                                    (io/map_guard.h), or NULL when empty */
} stk_mapped_file;

/* Open `path` as a source, map it whole with STK_ADVISE_WILLNEED, register
 * the mapping with the SIGBUS guard, close the source (the mapping keeps
 * the file). An empty file succeeds with data = NULL and size = 0, so each
 * format can word its own "empty file" message. Errors as
 * stk_source_open_file's, and the mapping's (STK_ENOMEM, STK_EIO). */
int stk_map_file(const char *path, uint64_t max_bytes, stk_mapped_file *out);
/* After using bytes [offset, offset + len) of the mapping: were they the
 * file's? False when the file was truncated under the mapping so that they
 * read as zeros (*valid, if not NULL, gets the bytes that remain). See
 * stk_map_guard_check: a probe of the file's last bytes and an atomic load
 * in the common case. Thread-safe. */
int stk_mapped_file_intact(const stk_mapped_file *m, uint64_t offset, uint64_t len,
                           uint64_t *valid);
/* Unmap and zero *m. Safe on a zeroed or already unmapped struct. */
void stk_unmap_file(stk_mapped_file *m);

#endif
