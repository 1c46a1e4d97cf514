/*
 * remote.h — byte sources in object stores: http(s):// and s3:// (internal).
 *
 * A remote object is a stk_source (source.h) whose pread fetches the
 * object's bytes in aligned chunks through the local cache (cache.h) with
 * range GETs (http.h), so every reader that gets its bytes from src/io
 * reads URLs unchanged: source.c hands a URL given to stk_source_open_file,
 * stk_source_open_file_at or stk_map_file to this module, and
 * reader_util.c's file listing expands remote patterns here.
 *
 * URLs:
 *   https://host/path/train-{000..127}.stk   brace ranges and alternatives
 *   http://host/path/file.tar                 one object
 *   s3://bucket/prefix/                        every object under the prefix
 *   s3://bucket/key.stk                        one object
 * An http(s) "directory" cannot be listed (HTTP has no listing): name the
 * objects with braces, or use s3://.
 *
 * Reading (remote_pread in remote.c): the chunks covering the bytes asked
 * for are claimed in the cache; the caller fetches the ones it claimed
 * (consecutive chunks in one request), waits for the ones another thread
 * or process is fetching, then reads the bytes from the cache (pread), or
 * lends them in place (view: the cache's mapping). A warm cache costs a
 * lookup, and a pread of the cache file or none.
 *
 * Read-ahead (STK_ADVISE_WILLNEED): the chunks of the hinted range are
 * fetched in the background, within a process-wide budget of bytes in
 * flight (STOKER_READAHEAD, default 256 MiB); hints beyond it wait in a
 * queue. The loader hints the records of the batches it will fill next, in
 * the sampler's order (so a block shuffle becomes sequential downloads of
 * whole shards).
 *
 * Settings (process-wide): stk_remote_configure, else the environment:
 * STOKER_CACHE_DIR (default $XDG_CACHE_HOME/stoker, ~/.cache/stoker),
 * STOKER_CACHE_LIMIT (bytes, with an optional K/M/G/T suffix; default no
 * limit), STOKER_CHUNK_SIZE (default 64 KiB: about a record, so a cold random read fetches little it does not need; runs of chunks go out as one request), STOKER_READAHEAD.
 */
#ifndef STK_IO_REMOTE_H
#define STK_IO_REMOTE_H

#include "io/remote_open.h" /* stk_is_remote, stk_remote_open: what source.c calls */
#include "io/source.h"

#include <stdbool.h>
#include <stdint.h>

/* Expand `pattern` into object URLs ending in one of `suffixes` (a
 * NULL-terminated list; NULL: any), sorted: brace ranges, an s3:// prefix
 * listing, or one URL. Objects named by braces must exist (checked in
 * parallel). The list: malloc'd strings, NULL-terminated (free with
 * stk_remote_list_free). STK_ENOENT naming the pattern when nothing
 * matches. */
int stk_remote_list(const char *pattern, const char *const *suffixes, char ***out,
                    uint32_t *count);
void stk_remote_list_free(char **list, uint32_t n);

/* Has this process learned that the object at `url` exists (a listing named
 * it, every object of an s3:// listing counting, even those a reader's
 * suffixes left out; or a HEAD found it)? Asks no server: for a reader
 * looking for companion objects (the TFRecord reader's DALI indexes)
 * without a request per candidate. */
bool stk_remote_known(const char *url);

/* Fetch the first and last `tail_bytes` of each object in parallel (the
 * .stk header, and the index and footer), so opening many shards costs a
 * couple of round trips, not several per shard. Returns when every chunk
 * of those ranges is in the cache, the ones other processes fetch
 * included: none of its fetches is cancelled half-way, so no chunk of an
 * end is downloaded twice. Best effort: failures are left for the open to
 * report. */
void stk_remote_fetch_ends(char *const *urls, uint32_t n, uint64_t head_bytes,
                           uint64_t tail_bytes);

/* A local path (*out, malloc'd) for a file a reader derives from the
 * remote object `src` (the TFRecord reader's offset cache):
 * CACHE_DIR/derived/HASH + suffix, HASH the XXH3-128 of the object's cache
 * key (URL#ETAG#SIZE), so a replaced object gets another; the directory is
 * created. Such files are small (8 bytes per record) and are not evicted
 * with their object. STK_EINVAL (not a remote source), STK_EIO, STK_ENOMEM. */
int stk_remote_derived_path(const stk_source *src, const char *suffix, char **out);

/* Abandon every transfer of source `s` (a remote one; others: no-op):
 * reads waiting on it return STK_EINTR, and so do later reads. For the
 * loader's destroy and interrupts. */
void stk_remote_cancel(stk_source *s);

#endif
