/*
 * stk_shard.h — the private types and functions of the .stk reader, shared
 * by the four files it is made of (docs/layers.md):
 *
 *   stk_shard.c    one shard file: open and validate (footer, header,
 *                  schema, set keys, index), close; list the shards of a
 *                  path (file, directory or glob); check that shards opened
 *                  together are one whole set; stk_shards_detect.
 *   stk_record.c   record access: locate a global index, read and validate
 *                  a record (checksum policy, truncation under a mapping),
 *                  raw image payloads, labels.
 *   stk_dataset.c  the stk_dataset adapter (the vtable, the URI query,
 *                  stk_shards_open, the stk: row of the reader table):
 *                  one index space over the shards.
 *   src/tools/verify.c  stk_verify, a client of the three above.
 *
 * A shardset is built once by stk_shardset_open and is read-only afterwards
 * except for each shard's "verified" and "touched" bitmaps, updated with
 * atomic OR: any number of threads may read records at once, with no locks.
 * Nothing here is exported from the library (hidden visibility); the names
 * carry the stk_ prefix because they cross files.
 */
#ifndef STK_FORMAT_STK_SHARD_H
#define STK_FORMAT_STK_SHARD_H

#include "core/util.h"
#include "format/dataset.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_schema.h"
#include "io/map_guard.h"
#include "io/source.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Checksum policy (?verify=off|first|always, in that order). */
enum { VERIFY_OFF, VERIFY_FIRST, VERIFY_ALWAYS };
/* Longest shard_set value (hex digits). */
#define SET_ID_MAX 64

typedef struct shard {
    char *path;                 /* owned */
    stk_source *src;            /* owned (src/io/source.h): the file, for pread; NULL once
                                   mapped (the mapping keeps the file) */
    const uint8_t *map;         /* owned mapping of the whole file (shared, read-only), or
                                   NULL (pread); advice per shard_map_advice (stk_shard.c) */
    stk_map_guard *guard;       /* owned registration of map (src/io/map_guard.c), made by
                                   the source's map: pages lost to a truncation read as
                                   zeros; see stk_shard_lost_check */
    uint8_t *index_copy;        /* owned: the index, read with pread (pread mode) */
    uint64_t file_size;
    uint64_t n, first;          /* records; global index of record 0 */
    uint64_t data_offset, data_end;
    uint64_t index_offset;      /* where the index starts (after data_end) */
    const uint8_t *offsets, *lengths, *checksums; /* into the index */
    const uint8_t *columns[STK_MAX_FIELDS];       /* fixed fields, into the index */
    _Atomic uint64_t *verified; /* owned bitmap (policy "first"); atomic OR, no lock */
    _Atomic uint64_t *touched;  /* owned bitmap (mmap without huge pages): records read once;
                                   atomic OR, no lock */
    uint8_t header_fields[STK_MAX_FIELDS * STK_FIELD_ENTRY_SIZE]; /* to compare schemas */
    /* Shard-set keys (metadata shard_set, shard = set_pos/set_count);
     * set_count 0 when the shard has none (written by hand, or before 1.1). */
    char set_id[SET_ID_MAX + 1];
    uint32_t set_pos, set_count;
} shard;

/* Everything below is written while the set is opened and read-only after. */
typedef struct shardset {
    shard *shards;              /* owned, nshards */
    uint32_t nshards;
    stk_field_def fields[STK_MAX_FIELDS];
    uint8_t storage[STK_MAX_FIELDS];
    uint64_t fixed_size[STK_MAX_FIELDS];
    uint32_t var_slot[STK_MAX_FIELDS]; /* position among variable fields */
    uint32_t nfields, nvar;
    int image_field, label_field;      /* -1 when absent */
    char **meta_keys, **meta_values;   /* owned, NUL-terminated, nmeta each */
    uint32_t nmeta;
    int verify;
    bool pread_io;
    bool remote;                /* the shards are objects in a store (io/remote.h):
                                   pread, and the loader's read-ahead */
    /* mmap only: the whole dataset fits in half of RAM, so a cold fault may
     * read the 2 MiB around it (MADV_HUGEPAGE) — see shard_map_advice. */
    bool huge_pages;
    uint64_t max_bytes, max_pixels;
} shardset;

/* One shard's place in a set, as stk_shard_set_check compares them. */
typedef struct set_member {
    const char *path;          /* lent */
    char id[SET_ID_MAX + 1];
    uint32_t pos, count;       /* count 0: no set keys */
} set_member;

/* Called once per problem stk_shard_set_check (or stale temporary) finds. */
typedef void (*set_problem_fn)(void *ctx, const char *path, const char *msg);

/* --- stk_shard.c: one shard file ----------------------------------------- */

/* Open and validate `path` into *s: the schema is taken from it (first) or
 * compared with set->shards[0]'s. On failure *s holds what to close. */
int stk_shard_open(shardset *set, shard *s, const char *path, bool first);
void stk_shard_close(shard *s);
/* The shard paths of `path` (file, directory or glob), sorted, in a new
 * NULL-terminated array of malloc'd strings; free with stk_shard_list_free. */
int stk_shard_list(const char *path, char ***out, uint32_t *count);
void stk_shard_list_free(char **list, uint32_t n);
/* True if `path` looks like .stk shards (a *.stk file, a glob, or a
 * directory holding *.stk files): the stk: row's detect hook, and
 * stk_verify's test of a bare path. */
int stk_shards_detect(const char *path);
/* Is m[0, n) one whole set (or no set at all)? Each problem goes to fn;
 * returns how many there were. `where` names the set in messages. */
uint32_t stk_shard_set_check(const char *where, const set_member *m, uint32_t n,
                             set_problem_fn fn, void *ctx);
/* Stale temporaries (NAME.stk.tmp-...) beside `path`: each to fn (if not
 * NULL), up to `max` names joined into buf; returns how many there are. */
uint32_t stk_shard_stale_temporaries(const char *path, char *buf, size_t size, uint32_t max,
                                     set_problem_fn fn, void *ctx);

/* --- stk_record.c: record access ----------------------------------------- */

/* Start fetching record r's bytes (a remote shard's read-ahead; a hint). */
void stk_shard_record_prefetch(const shardset *set, const shard *s, uint64_t r, uint64_t global);
/* The shard holding global sample `index`, and the record in it. */
const shard *stk_shard_locate(const shardset *set, uint64_t index, uint64_t *local);
/* Are the shard's records read in place (a mapping, or a source that lends
 * views: a remote shard's cache) rather than into the caller's scratch? */
static inline bool stk_shard_in_place(const shard *s)
{
    return s->map || (s->src && stk_source_has_view(s->src));
}
/* 0, or STK_EDATA when a truncation under the mapping took bytes record r
 * depends on. Call after the bytes have been used. */
int stk_shard_lost_check(const shardset *set, const shard *s, uint64_t r, uint64_t global);
/* The bytes of record r of s, validated and checksummed per policy (always
 * with force_verify); field_off/field_len per variable field. */
int stk_shard_record_get(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                         const uint8_t **bytes, uint64_t *field_off, uint32_t *field_len,
                         stk_scratch *scratch, bool force_verify);
/* The bytes of variable field `field` of record r: *p and *len. Mapped
 * shards: into the mapping (*end = 0). pread: into scratch, either the
 * whole record (when the checksum policy asks for it to be checked) or the
 * field alone; *end is where the bytes in scratch end (a zstd image is
 * decompressed after them). Checked as stk_shard_record_get, and with
 * stk_shard_value_check. */
int stk_shard_field_get(const shardset *set, const shard *s, uint64_t r, uint64_t global,
                        uint32_t field, const uint8_t **p, uint32_t *len, size_t *end,
                        stk_scratch *scratch);
/* 0, or STK_EDATA naming the shard, record and field when a value of `len`
 * bytes cannot be field `field`'s (a varying int64/float32 field takes a
 * whole number of rows). */
int stk_shard_value_check(const shardset *set, uint32_t field, const shard *s, uint64_t r,
                          uint64_t global, uint32_t len);
/* A raw image payload as a view, decompressed into out[out_at, ...) if zstd. */
int stk_shard_raw_image(const shardset *set, uint32_t field, const shard *s, uint64_t r,
                        uint64_t global, const uint8_t *p, uint32_t len, stk_scratch *out,
                        size_t out_at, stk_image_view *view);
/* The label column of record r (0 when the shards have none). */
int64_t stk_shard_label_of(const shardset *set, const shard *s, uint64_t r);

/* --- stk_dataset.c: the set as a dataset --------------------------------- */

/* Open every shard of paths[0, n) into a new shardset (query as in a URI:
 * verify, io, hugepages). No set check: the caller does it. */
int stk_shardset_open(const char *uri, char **paths, uint32_t n, const char *query,
                      const stk_dataset_options *opts, shardset **out);
void stk_shardset_free(shardset *set);

#endif
