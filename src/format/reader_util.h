/*
 * reader_util.h — helpers shared by the dataset readers (internal).
 *
 * Three small things every reader needs and should do the same way:
 *
 *  - Mapping a data file. stk_map_file opens a path without blocking (a FIFO
 *    named as a dataset must not hang the open), insists on a regular file no
 *    larger than the caller's byte limit, and maps it read-only and private
 *    with MADV_WILLNEED. Every failure names the path and says why, with the
 *    code a caller can act on: STK_ENOENT (missing), STK_EINVAL (a directory
 *    or device), STK_ELIMIT (too large), STK_EIO (the OS refused).
 *
 *  - Parsing the `?key=value&key=value` query of a URI against a table of
 *    known keys and their allowed values. Unknown keys, unknown values,
 *    repeated keys and items without '=' are all STK_EINVAL with a message
 *    that names the offending text and lists what would have been accepted.
 *
 *  - Joining and testing paths, with allocation failures reported through
 *    stk_fail like everything else.
 */
#ifndef STK_FORMAT_READER_UTIL_H
#define STK_FORMAT_READER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A read-only private mapping of a whole file. */
typedef struct stk_mapped_file {
    const uint8_t *data; /* owned mapping (munmap via stk_unmap_file); NULL
                            when the file is empty */
    size_t size;         /* file size in bytes at open */
} stk_mapped_file;

/* Map `path` (see the essay above). An empty file succeeds with data = NULL
 * and size = 0, so each format can word its own "empty file" message. */
int stk_map_file(const char *path, uint64_t max_bytes, stk_mapped_file *out);
/* Unmap and zero *m. Safe on a zeroed or already unmapped struct. */
void stk_unmap_file(stk_mapped_file *m);

/* One key a URI query may carry. */
typedef struct stk_query_key {
    const char *name;          /* "split" (static) */
    const char *const *values; /* allowed values, NULL-terminated (static) */
    int value;                 /* out: index into values, -1 when absent */
} stk_query_key;

/* Parse `query` (the text after '?', may be NULL or empty) of `uri` against
 * keys[0..nkeys). `what` names the URI form in messages ("cifar10:").
 * Returns 0 or STK_EINVAL via stk_fail. */
int stk_query_parse(const char *uri, const char *what, const char *query,
                    stk_query_key *keys, size_t nkeys);

/* "dir/name" in a new malloc'd string; NULL + STK_ENOMEM via stk_fail. */
char *stk_path_join(const char *dir, const char *name);
/* stat() follows links: true for an existing regular file / directory. */
bool stk_path_is_file(const char *path);
bool stk_path_is_dir(const char *path);
bool stk_path_exists(const char *path);

#endif
