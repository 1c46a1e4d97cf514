/*
 * checksum_avx2.c — XXH3-64 compiled for AVX2 (this file alone gets
 * -mavx2; see checksum.c). Only called after the CPU check.
 */
#include "format/stk/stk_format.h"

#if defined(STK_HAVE_CHECKSUM_AVX2)
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t stk_checksum_avx2(const void *data, size_t size);
uint64_t stk_checksum_avx2(const void *data, size_t size) { return XXH3_64bits(data, size); }
#else
typedef int stk_checksum_avx2_unused; /* not an x86-64 build */
#endif
