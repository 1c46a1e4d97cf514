/*
 * checksum.c — stk_checksum, the .stk format's XXH3-64 (seed 0), at the
 * speed of the widest vector unit the CPU has.
 *
 * The library is compiled for the x86-64 baseline (SSE2), where XXH3 runs
 * at ~18 GB/s; with AVX2 it runs at ~53 GB/s (110 KB records, L2-resident,
 * measured on the development machine). Every record's first read is
 * hashed under the default verify=first policy, so on a warm first pass
 * through a dataset the hash is most of the reader's own work. XXH3's
 * vector code is chosen at compile time, so the AVX2 flavour lives in its
 * own file compiled with -mavx2 (checksum_avx2.c) and is picked at run
 * time; the value is the same either way (XXH3 is defined on bytes, not
 * on the instructions that compute it).
 */
#include "core/cpu.h"
#include "format/stk/stk_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(STK_HAVE_CHECKSUM_AVX2)
uint64_t stk_checksum_avx2(const void *data, size_t size);
#endif

uint64_t stk_checksum(const void *data, size_t size)
{
#if defined(STK_HAVE_CHECKSUM_AVX2)
    if (stk_cpu_has_avx2_f16c()) /* cached by cpu.c: one relaxed atomic load */
        return stk_checksum_avx2(data, size);
#endif
    return XXH3_64bits(data, size);
}
