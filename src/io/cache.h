/*
 * cache.h — the local cache of remote objects (internal).
 *
 * A remote dataset (http(s)://, s3://: remote.h) reads each object (a .stk
 * shard, a tar, a TFRecord file) in aligned *chunks*: chunk k of an object is
 * its bytes [k * chunk_size, min((k + 1) * chunk_size, size)). The cache
 * keeps the chunks it has been given in a directory (cache_dir= /
 * STOKER_CACHE_DIR), so a second epoch, or a second process on the same
 * machine, reads them from local disk instead of the network.
 *
 * On disk, per object (named by a hash of its key, so any URL is a safe
 * file name):
 *
 *   DIR/objects/HH/HASH.data  the object's bytes at their own offsets (a
 *                             sparse file of the object's size)
 *   DIR/objects/HH/HASH.map   a header (magic, version, key, size, chunk
 *                             size) and one entry per chunk: its CRC-32C
 *                             and a "present" byte
 *   DIR/lock                  flock'ed while evicting
 *
 * Crash safety. A chunk is trusted only after its bytes are in .data *and*
 * its entry says present with the CRC of those bytes: fill writes the data
 * first, then the entry. A process killed mid-download leaves the entry
 * absent (the chunk is fetched again); a torn write under a power loss
 * leaves a CRC that does not match, which the first read in each process
 * checks (then the chunk counts as absent and is fetched again). So a
 * partial file is never trusted, without writing whole objects to a
 * temporary name first (which would need the whole shard before the first
 * record could be read).
 *
 * Sharing. Any number of threads and processes (torchrun ranks on one
 * machine) may use one directory. A chunk is downloaded once: the caller
 * that claims it (stk_cache_claim → STK_CACHE_MINE) holds an exclusive
 * open-file-description lock (fcntl F_OFD_SETLK) on the chunk's entry in
 * .map, and in-process the claim is also marked in memory; everyone else
 * gets STK_CACHE_BUSY and either waits for it (stk_cache_wait) or moves on
 * (a read-ahead hint). A process that dies holding a claim releases it with
 * its descriptors, and the chunk is simply absent.
 *
 * Eviction. limit_bytes (0: no limit) bounds the bytes of .data files (the
 * blocks actually allocated). When a fill takes the directory over the
 * limit, the filling process evicts whole objects in least-recently-used
 * order (an object's use time is its .map file's mtime, touched at most
 * once a second per object), under DIR/lock, skipping objects this process
 * has open. An object another process has open may be evicted: that process
 * keeps reading the unlinked files it has open, so nothing it trusted
 * changes under it.
 *
 * Thread safety: every function may be called from any thread; a
 * stk_cache_object may be used by many threads at once. stk_cache_close
 * and stk_cache_object_close by the owner, once, after all other calls on
 * it returned.
 */
#ifndef STK_IO_CACHE_H
#define STK_IO_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stk_cache stk_cache;
typedef struct stk_cache_object stk_cache_object;

/* The cache in directory `dir` (created, with parents, if missing), with
 * at most limit_bytes of object data (0: no limit). Opening the same
 * directory twice in one process gives the same stk_cache (refcounted).
 * STK_EIO "DIR: cannot create the cache directory: REASON" (or another
 * OS failure, naming the path), STK_ENOMEM. */
int stk_cache_open(const char *dir, uint64_t limit_bytes, stk_cache **out);
/* Drop a reference. NULL is a no-op. */
void stk_cache_close(stk_cache *c);
const char *stk_cache_dir(const stk_cache *c);

/* The cached bytes of the object named `key` (the URL without its query,
 * with the object's identity appended by the caller, e.g. "URL#etag"), of
 * `size` bytes in chunks of chunk_size (> 0). An existing entry with
 * another size or chunk size is emptied and started afresh. Opening a key
 * already open in this process gives the same object (refcounted).
 * STK_EIO naming the cache file, STK_ENOMEM, STK_EINVAL (chunk_size 0). */
int stk_cache_object_open(stk_cache *c, const char *key, uint64_t size, uint32_t chunk_size,
                          stk_cache_object **out);
void stk_cache_object_close(stk_cache_object *o);
uint64_t stk_cache_object_size(const stk_cache_object *o);
uint32_t stk_cache_chunk_size(const stk_cache_object *o);
uint64_t stk_cache_chunk_count(const stk_cache_object *o);

/* Is chunk k present (and checked)? A present chunk whose CRC does not
 * match (first look in this process) is marked absent and reads false.
 * Lock-free after the first check of each chunk. */
bool stk_cache_has(stk_cache_object *o, uint64_t chunk);

/* Read bytes [off, off + n) of the object, all of whose chunks must be
 * present: 0, STK_ENOENT (a chunk is not present: the caller fetches it
 * and tries again; no message set), STK_EIO "FILE: read failed: REASON".
 * Counts the bytes as cache hits (stk_cache_stats). */
int stk_cache_read(stk_cache_object *o, void *buf, size_t n, uint64_t off);

/* Claim chunk k for downloading. */
enum {
    STK_CACHE_PRESENT = 0, /* already here: read it */
    STK_CACHE_MINE = 1,    /* claimed: the caller downloads it, then calls
                              stk_cache_fill or stk_cache_abandon */
    STK_CACHE_BUSY = 2,    /* another thread or process is downloading it */
    STK_CACHE_ABSENT = 3,  /* (stk_cache_wait) not here and not claimed */
};
/* STK_CACHE_PRESENT / MINE / BUSY, or STK_EIO. Never blocks. */
int stk_cache_claim(stk_cache_object *o, uint64_t chunk);
/* The caller's claimed chunk k downloaded: `data` holds exactly its bytes
 * (chunk_size, or fewer for the last chunk). Writes the data, then the
 * entry; releases the claim; wakes waiters; may evict (see above). 0 or
 * STK_EIO "FILE: cannot write: REASON" (ENOSPC included: the claim is
 * released and the chunk stays absent), STK_EINVAL (wrong length). */
int stk_cache_fill(stk_cache_object *o, uint64_t chunk, const void *data, size_t n);
/* The caller's claimed chunk k could not be downloaded: release the claim
 * (waiters wake and see it absent). */
void stk_cache_abandon(stk_cache_object *o, uint64_t chunk);
/* Block until chunk k is not BUSY (in this process: its claimer filled or
 * abandoned it; in another: that process released its lock) or timeout_ms
 * passed (< 0: no limit). Returns STK_CACHE_PRESENT when it is present,
 * STK_CACHE_ABSENT when it is absent and unclaimed (the caller may claim
 * it), STK_ETIMEDOUT, STK_EIO. */
int stk_cache_wait(stk_cache_object *o, uint64_t chunk, int timeout_ms);

/* Counters since the process started (or the last reset), all caches. */
typedef struct stk_cache_stats {
    uint64_t hit_bytes;      /* bytes read by stk_cache_read */
    uint64_t filled_bytes;   /* bytes written by stk_cache_fill */
    uint64_t evicted_bytes;  /* .data bytes removed by eviction */
    uint64_t evicted_objects;
    uint64_t bad_chunks;     /* present entries whose CRC did not match */
} stk_cache_stats;
void stk_cache_stats_get(stk_cache_stats *out);
void stk_cache_stats_reset(void);

#endif
