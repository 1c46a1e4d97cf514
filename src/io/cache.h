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
 * file name: HASH is the XXH3-128 of the key, canonical big-endian, in 32
 * lower-case hex digits, and HH its first two; cache.c has the layout):
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
 * limit (as far as it knows: its own fills since its last scan of the
 * directory, which it repeats at least every 5 s while filling), the
 * filling process evicts whole objects in least-recently-used order down
 * to 90% of the limit (an object's use time is its .map file's mtime,
 * touched on open, read and fill, at most once a second per object), under
 * DIR/lock, skipping objects this process has open. An object another
 * process has open may be evicted: that process
 * keeps reading the unlinked files it has open, so nothing it trusted
 * changes under it.
 *
 * Thread safety: every function may be called from any thread; a
 * stk_cache_object may be used by many threads at once. stk_cache_close
 * and stk_cache_object_close by the owner, once, after all other calls on
 * it returned. A claim belongs to the process, not to the thread: any
 * thread may fill or abandon a chunk another thread claimed.
 *
 * fork(): caches and objects opened before a fork must not be used in the
 * child (their lock descriptors are shared with the parent); the child
 * opens its own (stk_cache_open in the child gives a new stk_cache even for
 * a directory the parent has open).
 *
 * Descriptors: an open object holds two (.map and .data); a wait for
 * another process opens a third for its duration.
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
 * directory twice in one process gives the same stk_cache (refcounted),
 * whose limit is the smallest nonzero one asked. Objects hold a reference
 * of their own, so the cache lives until its last object is closed.
 * STK_EIO "DIR: cannot create the cache directory: REASON" (or another
 * OS failure, naming the path), STK_ENOMEM, STK_EINVAL (no dir). */
int stk_cache_open(const char *dir, uint64_t limit_bytes, stk_cache **out);
/* Drop a reference. NULL is a no-op. */
void stk_cache_close(stk_cache *c);
const char *stk_cache_dir(const stk_cache *c);

/* The cached bytes of the object named `key` (the URL without its query,
 * with the object's identity appended by the caller, e.g. "URL#etag"), of
 * `size` bytes in chunks of chunk_size (> 0). An existing entry with
 * another size or chunk size is emptied and started afresh (its files are
 * replaced: a process that has the old ones open keeps reading them).
 * Opening a key already open in this process gives the same object
 * (refcounted). STK_EIO naming the cache file, STK_ENOMEM, STK_EINVAL
 * (chunk_size 0, an empty key or one over 16 KiB, a size too large, or the
 * key already open here with another size or chunk size). */
int stk_cache_object_open(stk_cache *c, const char *key, uint64_t size, uint32_t chunk_size,
                          stk_cache_object **out);
void stk_cache_object_close(stk_cache_object *o);
/* A local path (*out, malloc'd) for a small file derived from the object
 * (a reader's index of it): DIR/derived/HASH + suffix, HASH the object's
 * key hash as in its own files' names, so another key (a replaced remote
 * object: another ETag) gets another. The directory is created. Such files
 * are not evicted with the object. STK_EIO naming the directory,
 * STK_ENOMEM. */
int stk_cache_object_derived_path(const stk_cache_object *o, const char *suffix, char **out);
uint64_t stk_cache_object_size(const stk_cache_object *o);
uint32_t stk_cache_chunk_size(const stk_cache_object *o);
uint64_t stk_cache_chunk_count(const stk_cache_object *o);

/* Is chunk k present (and checked)? The first look at a present chunk in
 * this process reads its bytes and checks their CRC; one that does not
 * match is counted (bad_chunks) and reads false from then on, until a
 * claim of it (which checks again under the lock, and clears the entry so
 * that it is fetched again) or a fill. Absent chunks are looked up on disk
 * each time (another process may fill them); present ones are one atomic
 * load. false also for a chunk out of range and on an I/O error. */
bool stk_cache_has(stk_cache_object *o, uint64_t chunk);

/* Read bytes [off, off + n) of the object, all of whose chunks must be
 * present: 0, STK_ENOENT (a chunk is not present: the caller fetches it
 * and tries again; no message set), STK_EIO "FILE: read failed: REASON",
 * STK_EINVAL (past the object's end). Counts the bytes as cache hits
 * (stk_cache_stats). */
int stk_cache_read(stk_cache_object *o, void *buf, size_t n, uint64_t off);

/* Bytes [off, off + n) of the object in place, for a reader that wants no
 * copy: *p points into a read-only shared mapping of the object's .data
 * file (made at the first view), valid until the object's last close
 * (eviction or a reset by another process unlinks the files, whose inode
 * the mapping keeps; a present chunk is never rewritten). Same contract
 * as stk_cache_read otherwise: the chunks must be present (STK_ENOENT, no
 * message, when one is not), a chunk's first look in this process checks
 * its CRC (here over the mapped bytes), STK_EIO when .data cannot be
 * mapped, STK_EINVAL past the end; counted as cache hits. */
int stk_cache_view(stk_cache_object *o, uint64_t off, size_t n, const uint8_t **p);

/* What the cache directory holds now (a scan under DIR/lock): the number
 * of objects and the disk bytes their .data files take (allocated blocks:
 * what the limit bounds). STK_EIO when the directory cannot be read. */
int stk_cache_usage_scan(stk_cache *c, uint64_t *objects, uint64_t *bytes);

/* Remove least-recently-used objects until their bytes are at most
 * keep_bytes (0: all). Objects open in this process, or being opened by
 * another, stay; one that another process is reading goes from the
 * directory, and that process keeps reading its unlinked files. What was
 * removed and what is left, in the out-parameters (each may be NULL).
 * STK_EIO when the directory cannot be locked or read. */
int stk_cache_trim(stk_cache *c, uint64_t keep_bytes, uint64_t *removed_objects,
                   uint64_t *removed_bytes, uint64_t *left_objects, uint64_t *left_bytes);

/* Claim chunk k for downloading. */
enum {
    STK_CACHE_PRESENT = 0, /* already here: read it */
    STK_CACHE_MINE = 1,    /* claimed: the caller downloads it, then calls
                              stk_cache_fill or stk_cache_abandon */
    STK_CACHE_BUSY = 2,    /* another thread or process is downloading it */
    STK_CACHE_ABSENT = 3,  /* (stk_cache_wait) not here and not claimed */
};
/* STK_CACHE_PRESENT / MINE / BUSY, or STK_EIO, STK_EINVAL (k out of
 * range). Never waits for anyone (it may read the chunk once to check its
 * CRC, as stk_cache_has does). BUSY also when the claim lock is held for a
 * moment by a waiter testing it: the caller waits, and wait answers
 * ABSENT at once. */
int stk_cache_claim(stk_cache_object *o, uint64_t chunk);
/* The caller's claimed chunk k downloaded: `data` holds exactly its bytes
 * (chunk_size, or fewer for the last chunk). Writes the data, then the
 * entry; releases the claim; wakes waiters; may evict (see above). 0 or
 * STK_EIO "FILE: cannot write: REASON" (ENOSPC included, with a hint to
 * lower the limit or use another directory), STK_EINVAL (wrong length, or
 * k not claimed by this process). Every return releases the claim (the
 * chunk stays absent on failure); a later abandon is a harmless no-op. */
int stk_cache_fill(stk_cache_object *o, uint64_t chunk, const void *data, size_t n);
/* The caller's claimed chunk k could not be downloaded: release the claim
 * (waiters wake and see it absent). A no-op when k is not claimed. */
void stk_cache_abandon(stk_cache_object *o, uint64_t chunk);
/* Block until chunk k is not BUSY (in this process: its claimer filled or
 * abandoned it; in another: that process released its lock) or timeout_ms
 * passed (< 0: no limit). Returns STK_CACHE_PRESENT when it is present,
 * STK_CACHE_ABSENT when it is absent and unclaimed (the caller may claim
 * it), STK_ETIMEDOUT ("KEY: chunk K still being downloaded after N ms"),
 * STK_EIO, STK_EINVAL (k out of range). Without a timeout a wait for
 * another process sleeps in the kernel (F_OFD_SETLKW) until its lock goes;
 * with one it polls the lock (1 to 20 ms naps). */
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
