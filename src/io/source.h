/*
 * source.h — byte sources: where a reader's bytes come from (internal).
 *
 * A source is a named, fixed-size run of bytes that can be read at any
 * offset (pread, read_part), may be mapped into memory whole (map) or lend
 * views of parts of itself in place (view), and takes access hints
 * (advise). Today the one kind is a local file
 * (source.c); an object store (HTTP/S3 range requests) or a cache
 * implements the same operations, answering map with STK_EUNSUPPORTED so
 * that readers fall back to pread.
 *
 * Every reader of src/format/ gets its bytes here: the array readers
 * (CIFAR, IDX, npy) map whole files (stk_map_file), the .stk reader opens
 * each shard as a source and preads or maps it (stk_shard.c,
 * stk_record.c, stk_dataset.c), the image folder opens each image
 * relative to its root directory (stk_source_open_file_at) and reads it
 * whole. No file of src/format/ calls open, pread, read, mmap, madvise or
 * posix_fadvise itself (scripts/check_layers.py checks it), with two
 * exceptions: walking directories (opendir/readdir, openat of a directory
 * with O_DIRECTORY, fstatat: the image folder and the shard listing) and
 * the .stk writer (stk_writer.c), which creates files rather than reading
 * them.
 *
 * Opening a local file is done in one place and one way: without blocking
 * (a FIFO named as a dataset must not hang the open), regular files only.
 * stk_source_open_file checks the size against the caller's byte limit
 * before anything is read and names the path in every failure, with the
 * code a caller can act on: STK_ENOENT (missing), STK_EINVAL (a directory
 * or device), STK_ELIMIT (too large), STK_EIO (the OS refused).
 * stk_source_open_file_at is for readers that word their own messages
 * (the .stk reader, the image folder, whose tests pin them): its failures
 * give only the reason, for the caller to put the name it knows in front,
 * and it leaves the size to the caller.
 *
 * Mappings. map maps the whole source read-only and registers it with the
 * SIGBUS guard (map_guard.h), so that a file truncated under the mapping
 * reads as zeros instead of killing the process; the guard's registration
 * comes back with the mapping, the descriptor it needs stays in source.c.
 * A mapping outlives its source (the source may be closed at once):
 * stk_mapping_advise and stk_source_unmap take the mapping, not the
 * source.
 *
 * Thread safety: after open a source is immutable; pread, read_part and
 * advise may be called by any number of threads at once. map, close: by
 * the owner, once. stk_mapping_advise: any thread.
 */
#ifndef STK_IO_SOURCE_H
#define STK_IO_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct stk_source stk_source;

/* Access hints (advisory: a source may ignore any of them). */
typedef enum stk_advice {
    STK_ADVISE_WILLNEED,   /* these bytes will be read soon: start fetching */
    STK_ADVISE_SEQUENTIAL, /* read in order: read ahead generously */
    STK_ADVISE_RANDOM,     /* read in no order: no readahead around a read */
    STK_ADVISE_HUGEPAGE,   /* mapped: back the mapping with 2 MiB pages */
    STK_ADVISE_NORMAL,     /* back to the default readahead */
    STK_ADVISE_CANCEL,     /* the reader stops: abandon transfers in flight
                              (remote sources; reads waiting on them, and
                              later reads, fail with STK_EINTR) ... */
    STK_ADVISE_RESUME,     /* ... until this hint: read again */
} stk_advice;

/* map flags. Without STK_MAP_SHARED a mapping is MAP_PRIVATE. Read-only
 * either way (PROT_READ: nothing can write through it), so both show the
 * file's page-cache pages and no private copy is ever made; the .stk reader
 * asks for a shared mapping, the one its measurements were taken with
 * (whole 2 MiB folios mapped at once, bench/mmap_floor.c), the array
 * readers keep the private one they always had. */
#define STK_MAP_SHARED 1u

struct stk_map_guard;

typedef struct stk_source_ops {
    const char *kind; /* "file" */
    /* Exactly n bytes at `offset` into buf: 0, STK_EFORMAT "NAME:
     * unexpected end of file" when the source ends first, STK_EIO "NAME:
     * read failed: REASON". The per-record read of the .stk reader's pread
     * mode: one indirect call, no allocation. */
    int (*pread)(const stk_source *s, void *buf, size_t n, uint64_t offset);
    /* Up to n bytes at `offset` into buf: how many were read (0 only at the
     * end of the source; fewer than n when the source ends first), or
     * STK_EIO with the message "read error: REASON" (no name: the caller
     * puts its own in front). For a caller that says how far it got. */
    int64_t (*read_part)(const stk_source *s, void *buf, size_t n, uint64_t offset);
    /* The whole source mapped read-only (flags: STK_MAP_SHARED or 0), in
     * *data, registered with the SIGBUS guard in *guard; both owned by the
     * caller from then on (stk_source_unmap), the source may be closed.
     * A zero-size source maps to NULL with no guard. Failures: STK_EIO
     * "NAME: mmap failed: REASON" for a shared mapping, STK_ENOMEM or
     * STK_EIO "NAME: cannot map N bytes: REASON" for a private one (the
     * messages each reader gave before it moved here), the guard's failure
     * prefixed with NAME; STK_EUNSUPPORTED when the source cannot be
     * mapped. */
    int (*map)(stk_source *s, unsigned flags, const uint8_t **data,
               struct stk_map_guard **guard);
    /* A hint for [offset, offset + len) of a mapping `data` from map (or
     * NULL for pread access). STK_ADVISE_HUGEPAGE means nothing to pread
     * access. */
    void (*advise)(const stk_source *s, const uint8_t *data, uint64_t offset, uint64_t len,
                   stk_advice advice);
    void (*close)(stk_source *s);
    /* Optional (NULL: pread only). Exactly n bytes at `offset` in place, no
     * copy: *p stays valid, unchanged, until the source is closed. Failures
     * as pread's. A remote source lends its cache's mapping (cache.h,
     * stk_cache_view), so a reader of a warm cache reads as it reads a
     * mapped local file; a local file source has no view (its readers map
     * it whole instead). */
    int (*view)(const stk_source *s, uint64_t offset, size_t n, const uint8_t **p);
    /* 1: the bytes cannot change under a reader (a remote object, read
     * against the identity it was opened with): STK_EFORMAT from a read
     * means the object was replaced, which stops the loader. 0 (a local
     * file): STK_EFORMAT from a read is a file truncated while open, which
     * readers report as damage to the records it cut off (STK_EDATA). */
    int fixed;
} stk_source_ops;

struct stk_source {
    const stk_source_ops *ops;
    char *name;    /* owned: the path or URL, for messages */
    uint64_t size; /* bytes, fixed at open */
};

/* Open the local file `path` (see the essay above). */
int stk_source_open_file(const char *path, uint64_t max_bytes, stk_source **out);
/* Open the local file `rel` relative to the directory open as `dirfd`
 * (AT_FDCWD: the working directory; an absolute rel ignores dirfd), without
 * blocking, regular files only, any size. Failures give the reason alone,
 * for the caller to name the file: STK_ENOENT "cannot open: REASON" (no
 * such file), STK_EIO "cannot open: REASON" (any other refusal), STK_EINVAL
 * "not a regular file" (a directory, device, FIFO or socket) or "cannot
 * stat: REASON" (its type could not be learned), STK_ENOMEM. `name` (NULL:
 * rel) names the source in the messages of pread and map. */
int stk_source_open_file_at(int dirfd, const char *rel, const char *name, stk_source **out);

/* A local file source in storage the caller provides (on its stack), for a
 * reader that opens one file per sample (the image folder): opening and
 * closing it allocate nothing, so the hot path stays free of malloc. The
 * fields are the file source's own; use it through `base`. */
typedef struct stk_file_source {
    stk_source base;
    int fd;       /* owned: closed by stk_source_close(&fs.base) */
    int embedded; /* this storage is the caller's: close frees nothing */
} stk_file_source;
/* stk_source_open_file_at into *fs (same checks, same messages, no
 * allocation). `name` (NULL: rel) is lent and must outlive the source.
 * After success or failure alike, stk_source_close(&fs->base) is safe. */
int stk_file_source_open_at(stk_file_source *fs, int dirfd, const char *rel, const char *name);

static inline int stk_source_pread(const stk_source *s, void *buf, size_t n, uint64_t offset)
{
    return s->ops->pread(s, buf, n, offset);
}
static inline int64_t stk_source_read_part(const stk_source *s, void *buf, size_t n,
                                           uint64_t offset)
{
    return s->ops->read_part(s, buf, n, offset);
}
static inline int stk_source_map(stk_source *s, unsigned flags, const uint8_t **data,
                                 struct stk_map_guard **guard)
{
    return s->ops->map(s, flags, data, guard);
}
/* Is a short read (STK_EFORMAT) from s damage to the records it cut off
 * (a local file truncated while open), rather than a replaced object that
 * must stop the reader (ops.fixed)? */
static inline int stk_source_can_shrink(const stk_source *s)
{
    return !s->ops->fixed;
}
/* Does the source lend views (stk_source_view)? */
static inline int stk_source_has_view(const stk_source *s)
{
    return s->ops->view != NULL;
}
/* Only for a source that has them (stk_source_has_view). */
static inline int stk_source_view(const stk_source *s, uint64_t offset, size_t n, const uint8_t **p)
{
    return s->ops->view(s, offset, n, p);
}
struct stk_scratch;
/* Exactly n bytes at `offset` for a reader that uses them and lets go (a
 * record): in place when the source lends views (*p valid until the source
 * closes), else read into `scratch` (grown as needed; *p = its data).
 * Failures as pread's (STK_EFORMAT for a source that ends first). */
int stk_source_get(const stk_source *s, uint64_t offset, size_t n, struct stk_scratch *scratch,
                   const uint8_t **p);
static inline void stk_source_advise(const stk_source *s, const uint8_t *data, uint64_t offset,
                                     uint64_t len, stk_advice advice)
{
    if (s->ops->advise)
        s->ops->advise(s, data, offset, len, advice);
}
/* NULL is a no-op. */
void stk_source_close(stk_source *s);

/* Up to n bytes at `offset` of descriptor fd: the count (short only at the
 * end of the file), or -1 with errno set; EINTR and short reads retried.
 * The one pread loop of src/io (the file source, the cache). */
ssize_t stk_pread_upto(int fd, void *buf, size_t n, uint64_t offset);

/* A hint for [offset, offset + len) of a mapping from map, whether or not
 * its source is still open (offset is rounded down to a page). Advisory:
 * a failure costs speed only and is ignored. */
void stk_mapping_advise(const uint8_t *data, uint64_t offset, uint64_t len, stk_advice advice);
/* The advice for mappings read in random order, given the bytes of the
 * whole dataset they belong to: STK_ADVISE_HUGEPAGE when the dataset fits
 * in half of RAM (a page cache filled through such a mapping holds it in
 * 2 MiB folios, so one fault maps 2 MiB instead of 4 KiB: docs/format.md,
 * bench/mmap_floor.c), else STK_ADVISE_RANDOM (no readahead around a fault:
 * a record's neighbours are not wanted). The .stk reader's rule
 * (?hugepages=auto), shared by every reader that lends views into
 * mappings. */
stk_advice stk_random_map_advice(uint64_t dataset_bytes);
/* Forget the guard registration, then unmap [data, data + size). NULL data
 * or guard: that part is skipped. */
void stk_source_unmap(const uint8_t *data, uint64_t size, struct stk_map_guard *guard);

/* Write `size` bytes of `data` as the file `path`, atomically: into a new
 * temporary file beside it ("PATH.tmp-XXXXXX", mode 0644), then renamed
 * over `path`, so a reader sees the old file or the whole new one, never a
 * part (no fsync: the one writer today is an index cache that is checked
 * before use, so a file lost in a crash is rebuilt, not trusted). The
 * temporary file is removed on failure. STK_EIO "PATH: cannot write:
 * REASON", STK_ENOMEM. The one write a reader of src/format/ does (the
 * TFRecord reader's offset cache); writers of data (.stk) have their own. */
int stk_file_write_atomic(const char *path, const void *data, size_t size);

/* ------------------------------------------------------------------------ */
/* A whole file mapped: what the array readers (CIFAR, IDX, npy) use        */
/* ------------------------------------------------------------------------ */

/* A read-only private mapping of a whole file. */
typedef struct stk_mapped_file {
    const uint8_t *data; /* owned mapping (munmap via stk_unmap_file); NULL
                            when the file is empty */
    size_t size;         /* file size in bytes at open */
    struct stk_map_guard *guard; /* owned SIGBUS-guard registration
                                    (io/map_guard.h), or NULL when empty */
    int heap;            /* data is a malloc'd copy (a remote object, remote.h),
                            not a mapping */
} stk_mapped_file;

/* Open `path` as a source, map it whole (private, so registered with the
 * SIGBUS guard) with STK_ADVISE_WILLNEED, close the source (the mapping keeps
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
