/*
 * crc32c.h — CRC-32C (Castagnoli), the checksum of TFRecord framing (and of
 * iSCSI, ext4, LevelDB...), and TensorFlow's "masked" form of it.
 *
 * The SSE4.2 crc32 instruction, three chains interleaved, computes it at
 * ~20 GB/s; without it a slicing-by-8 table does ~2-3 GB/s. The instruction is picked at run time
 * (cpu.h), the value is the same either way (tests/test_crc32c.c checks the
 * published check value and both paths against each other).
 */
#ifndef STK_CORE_CRC32C_H
#define STK_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of data, continuing from `crc` (0 to start). */
uint32_t stk_crc32c(uint32_t crc, const void *data, size_t size);
/* The table-driven path alone (tests compare it with the hardware one). */
uint32_t stk_crc32c_sw(uint32_t crc, const void *data, size_t size);

/* TensorFlow's masking (tensorflow/core/lib/hash/crc32c.h): a CRC stored
 * beside the data it covers is rotated right by 15 and offset, so a CRC of
 * bytes that hold CRCs stays well spread. */
static inline uint32_t stk_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
