/*
 * stoker/remote.h — remote datasets (http(s)://, s3://): the node cache,
 * prefetching, and the process-wide I/O and JPEG-index statistics
 * (docs/remote.md).
 */
#ifndef STOKER_REMOTE_H
#define STOKER_REMOTE_H

#include "stoker/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Remote datasets: http(s):// and s3:// (docs/remote.md)                    */
/* ------------------------------------------------------------------------ */

/* Any dataset URI may name objects in a store instead of local files
 * ("stk:https://host/train-{000..127}.stk", "stk:s3://bucket/prefix/"). Their
 * bytes go through a local cache; these settings are process-wide (the
 * environment's STOKER_CACHE_DIR / STOKER_CACHE_LIMIT until this is called).
 * cache_dir NULL keeps the directory; cache_limit UINT64_MAX keeps the limit
 * (0: no limit). Sources already open keep the cache they opened. */
STK_API int stk_remote_configure(const char *cache_dir, uint64_t cache_limit);

/* The cache directory in use (the configured one: stk_remote_configure,
 * else STOKER_CACHE_DIR, else $XDG_CACHE_HOME/stoker, ~/.cache/stoker) and
 * what it holds now, counted by a scan of the directory, so objects
 * cached by other processes count too. */
typedef struct stk_remote_cache_info {
    char dir[4096];          /* the directory */
    uint64_t limit;          /* the byte limit in force (0: none) */
    uint64_t objects;        /* objects cached (remote files: shards, tars, ...) */
    uint64_t bytes;          /* disk bytes their data takes (what the limit bounds) */
    uint64_t reserved_[4];   /* zeroed by the library */
} stk_remote_cache_info;

/* STK_EIO naming the directory when it cannot be created or read. */
STK_API int stk_remote_cache_info_get(stk_remote_cache_info *out);

/* Remove least-recently-used objects from the cache until their bytes are
 * at most keep_bytes (0: empty it). Objects open in this process stay; an
 * object another process is reading leaves the directory, and that process
 * keeps reading its unlinked files. What was removed in *removed_objects /
 * *removed_bytes (may be NULL), what is left in *left (may be NULL). */
STK_API int stk_remote_cache_trim(uint64_t keep_bytes, uint64_t *removed_objects,
                                  uint64_t *removed_bytes, stk_remote_cache_info *left);

/* Download every object that `uri` names into the cache ahead of training
 * (on a node before a job starts, say), with the read-ahead's parallel
 * range requests: a dataset URI with or without its reader prefix
 * ("stk:s3://bucket/train/", "https://host/train-{000..127}.stk"), brace
 * ranges and s3:// listings expanded as a reader expands them. Chunks
 * already cached are not fetched again. `progress` (may be NULL) is called
 * after each object with the count done, the total and the object's URL.
 * On return *objects and *bytes (may be NULL) hold the objects and their
 * bytes, *fetched (may be NULL) the bytes downloaded by this call. Errors
 * as a reader's: the URL, the status and the attempts after the retries. */
STK_API int stk_remote_prefetch(const char *uri,
                                void (*progress)(void *ctx, uint32_t done, uint32_t total,
                                                 const char *url),
                                void *ctx, uint64_t *objects, uint64_t *bytes, uint64_t *fetched);

/* Counters of the remote layer since the process started (or the last
 * reset), all datasets together. */
typedef struct stk_io_stats {
    uint64_t bytes_fetched;   /* object bytes downloaded into the cache */
    uint64_t bytes_received;  /* HTTP body bytes received, every attempt */
    uint64_t bytes_sent;      /* request bodies sent (uploads) */
    uint64_t requests;        /* HTTP requests completed */
    uint64_t retries;         /* attempts repeated after a fault */
    uint64_t failures;        /* requests that failed after their retries */
    uint64_t cache_hit_bytes; /* bytes read from the local cache */
    uint64_t cache_evicted_bytes; /* bytes the cache's LRU eviction removed */
    uint64_t reads;           /* reads of remote objects */
    uint64_t reads_waited;    /* reads that had to wait for the network */
    double wait_s;            /* seconds those reads waited (summed over threads) */
    uint64_t prefetch_bytes;  /* bytes the read-ahead asked for */
    uint64_t reserved_[8];    /* zeroed by the library */
} stk_io_stats;

STK_API void stk_io_stats_get(stk_io_stats *out);
STK_API void stk_io_stats_reset(void);

/* The JPEG sync index (docs/codec.md, "Sync windows"): crops of JPEGs
 * without restart markers decode from windows synthesised from a per-file
 * index of where MCUs start, made on a file's first crop and kept for the
 * process, within a memory budget (STOKER_JPEG_INDEX_MB; 0 turns it off). */
typedef struct stk_jpeg_index_stats {
    uint64_t files;    /* files with an index (walked at least in part) */
    uint64_t windows;  /* crops decoded from a synthesised window */
    uint64_t declined; /* files whose walk found the data unusable: decoded the ordinary way */
    uint64_t bytes;    /* memory the indexes hold */
    uint64_t budget;   /* the bound on it, bytes (0: sync windows off) */
    uint64_t reserved_[3]; /* zeroed by the library */
} stk_jpeg_index_stats;

STK_API void stk_jpeg_index_stats_get(stk_jpeg_index_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_REMOTE_H */
