/*
 * stk_writer.h — writing one .stk shard (internal; used by stk_pack and the
 * tests). One writer, one thread.
 */
#ifndef STK_FORMAT_STK_WRITER_H
#define STK_FORMAT_STK_WRITER_H

#include "format/stk_schema.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk_shard_writer stk_shard_writer;

/* A value per field, in field order. Variable fields: any size (< 4 GiB);
 * fixed fields: exactly the field's fixed size. */
typedef struct stk_field_value {
    const void *data;
    size_t size;
} stk_field_value;

/* Start `path` (written as a temporary file beside it; renamed into place by
 * finish). Fails with STK_EINVAL (bad schema), STK_EIO, STK_ENOMEM. */
int stk_shard_writer_open(const char *path, const stk_field_def *fields, uint32_t nfields,
                          const stk_kv *meta, uint32_t nmeta, stk_shard_writer **out);
int stk_shard_writer_add(stk_shard_writer *w, const stk_field_value *values);
/* Bytes written so far (records + header), for shard-size decisions; after
 * seal, the file size. */
uint64_t stk_shard_writer_bytes(const stk_shard_writer *w);
uint64_t stk_shard_writer_records(const stk_shard_writer *w);
/* Write index and footer into the temporary file, close it and free the
 * record buffers; the file keeps its temporary name. No add after it. On
 * failure the caller still owns w (abort it). */
int stk_shard_writer_seal(stk_shard_writer *w);
/* After seal: the footer as written (lent, STK_FOOTER_SIZE bytes); NULL
 * before. */
const uint8_t *stk_shard_writer_footer(const stk_shard_writer *w);
/* Seal if not yet sealed; with meta != NULL, replace the header's metadata
 * by `meta` (it must fit before the data offset the first header set:
 * STK_EINVAL otherwise) and update the footer to match; fsync, rename into
 * place, free. Always frees w; on failure the temporary file is removed. */
int stk_shard_writer_commit(stk_shard_writer *w, const stk_kv *meta, uint32_t nmeta);
/* commit(w, NULL, 0). */
int stk_shard_writer_finish(stk_shard_writer *w);
/* Remove the temporary file and free. NULL is a no-op. */
void stk_shard_writer_abort(stk_shard_writer *w);

#endif
