/*
 * remote_open.h — the two entries of the remote sources (remote.c) that the
 * local byte source needs (internal).
 *
 * stk_source_open_file and the other openers of source.c take any path a
 * dataset names; one with a scheme (http://, https://, s3://) is handed to
 * remote.c, which answers with a source of the same interface. This header
 * is what source.c sees of remote.c, so the dispatch runs one way: source.c
 * includes this header and not remote.h, while remote.c implements it and
 * includes source.h for the interface it implements
 * (scripts/check_circles.py checks that no module circle comes back).
 */
#ifndef STK_IO_REMOTE_OPEN_H
#define STK_IO_REMOTE_OPEN_H

#include <stdbool.h>
#include <stdint.h>

typedef struct stk_source stk_source;

/* Is `path` a URL this module reads (http://, https://, s3://)? */
bool stk_is_remote(const char *path);

/* Open the object at `url` (HEAD, or what a listing already said of it).
 * STK_ENOENT "URL: no such object", STK_ENETWORK, STK_EACCESS, STK_ELIMIT
 * (larger than max_bytes), STK_EIO (the cache). */
int stk_remote_open(const char *url, uint64_t max_bytes, stk_source **out);

#endif /* STK_IO_REMOTE_OPEN_H */
