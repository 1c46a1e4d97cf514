/*
 * stk_format.h — the on-disk layout of a .stk shard (internal).
 *
 * docs/format.md is the normative description; this header only names its
 * constants and offsets. Integers are little-endian on disk; the accessors
 * of format/byte_order.h (stk_rd32, stk_wr64, ...) read and write them byte
 * by byte, so the code is endian-neutral and never dereferences unaligned
 * pointers into a mapped file.
 */
#ifndef STK_FORMAT_STK_FORMAT_H
#define STK_FORMAT_STK_FORMAT_H

#include "format/byte_order.h"

#include <stddef.h>
#include <stdint.h>

#define STK_SHARD_MAGIC "\x89STK\r\n\x1a\n"
#define STK_FOOTER_MAGIC "STKFOOT\n"
#define STK_SHARD_VERSION_MAJOR 1
/* The newest minor version this code reads and writes. 1.1: shard-set keys;
 * 1.2: int64/float32 fields whose leading dimension varies (storage
 * variable, dims[0] == 0). The writer writes 1.1 (MINOR_BASE) unless the
 * schema has such a field, so files that do not need 1.2 stay as before. */
#define STK_SHARD_VERSION_MINOR 2
#define STK_SHARD_VERSION_MINOR_BASE 1

#define STK_HEADER_SIZE 64
#define STK_FIELD_ENTRY_SIZE 64
#define STK_FOOTER_SIZE 64
#define STK_PAGE 4096
#define STK_RECORD_ALIGN 64
#define STK_FIELD_NAME_MAX 32
#define STK_MAX_FIELDS 64
#define STK_MAX_METADATA 65536
#define STK_MAX_RECORDS (1ull << 40)
#define STK_RAW_PREFIX 12 /* u32 height, width, channels */

/* Header offsets. */
enum {
    HDR_MAGIC = 0,
    HDR_VMAJOR = 8,
    HDR_VMINOR = 10,
    HDR_SIZE = 12,
    HDR_DATA_OFFSET = 16,
    HDR_FIELD_COUNT = 24,
    HDR_META_COUNT = 28,
    HDR_CHECKSUM = 32,
};

/* Field entry offsets. */
enum {
    FLD_NAME = 0,
    FLD_TYPE = 32,
    FLD_STORAGE = 33,
    FLD_COMPRESSION = 34,
    FLD_NDIM = 35,
    FLD_DIMS = 36,
    FLD_ELEM_SIZE = 52,
    FLD_FIXED_SIZE = 56,
};

/* Footer offsets. */
enum {
    FTR_INDEX_OFFSET = 0,
    FTR_INDEX_SIZE = 8,
    FTR_RECORD_COUNT = 16,
    FTR_DATA_END = 24,
    FTR_INDEX_CHECKSUM = 32,
    FTR_HEADER_CHECKSUM = 40,
    FTR_VERSION = 48,
    FTR_CHECKSUM = 52,
    FTR_MAGIC = 56,
};

enum { STK_STORAGE_VARIABLE = 0, STK_STORAGE_FIXED = 1 };

static inline uint64_t stk_pad_to(uint64_t v, uint64_t align) { return (v + align - 1) / align * align; }

/* XXH3-64 (seed 0), the format's checksum. */
uint64_t stk_checksum(const void *data, size_t size);

#endif
