/*
 * stk_schema.h — a shard's schema and metadata in memory (internal), shared
 * by the writer and the reader.
 */
#ifndef STK_FORMAT_STK_SCHEMA_H
#define STK_FORMAT_STK_SCHEMA_H

#include "stoker/stoker.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct stk_field_def {
    char name[32];        /* NUL-terminated */
    uint8_t type;         /* stk_field_type */
    uint8_t compression;  /* 0 none, 1 zstd */
    uint8_t ndim;
    uint32_t dims[4];     /* int64/float32 with ndim >= 1 and dims[0] == 0: the
                             leading dimension varies per record (storage
                             variable, format 1.2) */
} stk_field_def;

typedef struct stk_kv {
    const char *key;
    const char *value;
    size_t value_size;    /* bytes of value (no NUL needed) */
} stk_kv;

/* Storage, element size and fixed size implied by a field's type and shape.
 * Returns 0 or STK_EINVAL/STK_EFORMAT-worthy description via *why. */
int stk_field_layout(const stk_field_def *f, uint8_t *storage, uint32_t *elem_size,
                     uint64_t *fixed_size, const char **why);

/* An int64/float32 field whose leading dimension varies (dims[0] == 0). */
bool stk_field_varies(const stk_field_def *f);

/* Bytes of one row of an int64/float32 field: the element size times the
 * product of dims[1..ndim) (the element size for ndim <= 1). A varying
 * field's value is a whole number of rows. Call on a valid layout only. */
uint64_t stk_field_row_bytes(const stk_field_def *f);

#endif
