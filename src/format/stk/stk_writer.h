/*
 * stk_writer.h — writing one .stk shard (internal; used by stk_pack and the
 * tests). One writer, one thread.
 */
#ifndef STK_FORMAT_STK_WRITER_H
#define STK_FORMAT_STK_WRITER_H

#include "format/stk/stk_schema.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk_shard_file stk_shard_file;

/* A value per field, in field order. Variable fields: any size (< 4 GiB);
 * fixed fields: exactly the field's fixed size. */
typedef struct stk_value_bytes {
    const void *data;
    size_t size;
} stk_value_bytes;

/* Start `path` (written as a temporary file beside it; renamed into place by
 * finish). Fails with STK_EINVAL (bad schema), STK_EIO, STK_ENOMEM. */
int stk_shard_file_open(const char *path, const stk_field_def *fields, uint32_t nfields,
                          const stk_kv *meta, uint32_t nmeta, stk_shard_file **out);
int stk_shard_file_add(stk_shard_file *w, const stk_value_bytes *values);
/* Bytes written so far (records + header), for shard-size decisions; after
 * seal, the file size. */
uint64_t stk_shard_file_bytes(const stk_shard_file *w);
uint64_t stk_shard_file_records(const stk_shard_file *w);
/* Write index and footer into the temporary file, close it and free the
 * record buffers; the file keeps its temporary name. No add after it. On
 * failure the caller still owns w (abort it). */
int stk_shard_file_seal(stk_shard_file *w);
/* After seal: the footer as written (lent, STK_FOOTER_SIZE bytes); NULL
 * before. */
const uint8_t *stk_shard_file_footer(const stk_shard_file *w);
/* Seal if not yet sealed; with meta != NULL, replace the header's metadata
 * by `meta` (it must fit before the data offset the first header set:
 * STK_EINVAL otherwise) and update the footer to match; fsync, rename into
 * place, free. Always frees w; on failure the temporary file is removed. */
int stk_shard_file_commit(stk_shard_file *w, const stk_kv *meta, uint32_t nmeta);
/* commit(w, NULL, 0). */
int stk_shard_file_finish(stk_shard_file *w);
/* Remove the temporary file and free. NULL is a no-op. */
void stk_shard_file_abort(stk_shard_file *w);

/* Shard sets (docs/format.md, "Shard sets"), as stk_pack and the public
 * stk_shard_writer write them. */

/* Make `dest` ready for a new set: created (mkdir -p); STK_EINVAL when it
 * already holds a *.stk file or a temporary of a live process; temporaries
 * NAME.stk.tmp-PID-... of dead processes are removed. */
int stk_shard_dest_ready(const char *dest);

/* The set keys' placeholders, of the longest length: a shard is written
 * with these (the last two metadata entries) so that its header keeps room
 * for the final values. */
#define STK_SET_ID_HEX 32
#define STK_SET_ID_PLACEHOLDER "00000000000000000000000000000000"
#define STK_SHARD_PLACEHOLDER "4294967295/4294967295"

/* Commit the n sealed shards staged[0, n) with their final set keys:
 * shard_set = XXH3-128 of their footers in order, shard = i/n, written over
 * the last two entries of meta[0, nmeta). staged[i] is set to NULL as it
 * is committed (the caller aborts the rest on failure). */
int stk_shard_set_commit(stk_shard_file **staged, uint32_t n, stk_kv *meta, uint32_t nmeta);

#endif
