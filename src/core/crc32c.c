/*
 * crc32c.c — CRC-32C, by the SSE4.2 instruction when the CPU has it, else
 * by slicing-by-8 tables built once (see crc32c.h).
 *
 * The tables (and the hardware path's shift tables) are built on first use
 * behind a pthread_once, so any number of threads may call stk_crc32c at
 * once.
 */
#include "core/crc32c.h"

#include "core/cpu.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t g_table[8][256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        g_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xff];
}

uint32_t stk_crc32c_sw(uint32_t crc, const void *data, size_t size)
{
    const uint8_t *p = data;
    pthread_once(&g_table_once, build_tables);
    crc = ~crc;
    while (size >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* little-endian hosts only, like the rest of stoker */
        v ^= crc;
        crc = g_table[7][v & 0xff] ^ g_table[6][(v >> 8) & 0xff] ^ g_table[5][(v >> 16) & 0xff] ^
              g_table[4][(v >> 24) & 0xff] ^ g_table[3][(v >> 32) & 0xff] ^
              g_table[2][(v >> 40) & 0xff] ^ g_table[1][(v >> 48) & 0xff] ^
              g_table[0][v >> 56];
        p += 8;
        size -= 8;
    }
    while (size--)
        crc = (crc >> 8) ^ g_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of 1, so
 * one chain of it runs at a third of its speed. Long buffers are therefore
 * cut into three equal parts whose CRCs run interleaved (three independent
 * chains) and are then joined: the CRC register of A followed by n more
 * bytes is the register of A shifted through n zero bytes, XORed with the
 * register of those n bytes alone. Shifting through a fixed number of zero
 * bytes is a linear map over GF(2), tabulated once per part length
 * (Mark Adler's construction for zlib's crc32_combine and his crc32c.c):
 * four 256-entry tables, one per byte of the register.
 */
#define CRC32C_LONG 8192u
#define CRC32C_SHORT 256u

static uint32_t g_long[4][256], g_short[4][256];
static pthread_once_t g_shift_once = PTHREAD_ONCE_INIT;

/* mat x vec over GF(2): the XOR of the columns selected by vec's bits. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* The tables of the operator "append `len` zero bytes" (len a power of 2,
 * at least 1). */
static void shift_tables(uint32_t tables[4][256], uint32_t len)
{
    uint32_t op[32], sq[32];
    op[0] = CRC32C_POLY; /* one zero bit, on the reflected register */
    for (int n = 1; n < 32; n++)
        op[n] = 1u << (n - 1);
    for (uint32_t bits = 1; bits < 8 * len; bits *= 2) { /* 2, 4, ... 8*len bits */
        gf2_square(sq, op);
        memcpy(op, sq, sizeof op);
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            tables[k][b] = gf2_times(op, b << (8 * k));
}

static void build_shift_tables(void)
{
    shift_tables(g_long, CRC32C_LONG);
    shift_tables(g_short, CRC32C_SHORT);
}

static inline uint32_t shift(uint32_t tables[4][256], uint32_t crc)
{
    return tables[0][crc & 0xff] ^ tables[1][(crc >> 8) & 0xff] ^ tables[2][(crc >> 16) & 0xff] ^
           tables[3][crc >> 24];
}

/* Three interleaved chains over [p, p + 3 * part), joined; returns the
 * register after them, given the register before. */
__attribute__((target("sse4.2"))) static uint64_t crc32c_three(uint64_t c0, const uint8_t *p,
                                                               uint32_t part,
                                                               uint32_t tables[4][256])
{
    uint64_t c1 = 0, c2 = 0;
    for (const uint8_t *end = p + part; p < end; p += 8) {
        uint64_t a, b, c;
        memcpy(&a, p, 8);
        memcpy(&b, p + part, 8);
        memcpy(&c, p + 2 * part, 8);
        c0 = _mm_crc32_u64(c0, a);
        c1 = _mm_crc32_u64(c1, b);
        c2 = _mm_crc32_u64(c2, c);
    }
    c0 = shift(tables, (uint32_t)c0) ^ (uint32_t)c1;
    return shift(tables, (uint32_t)c0) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                            size_t size)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
    if (size >= 3 * CRC32C_SHORT)
        pthread_once(&g_shift_once, build_shift_tables);
    while (size >= 3 * CRC32C_LONG) {
        c = crc32c_three(c, p, CRC32C_LONG, g_long);
        p += 3 * CRC32C_LONG;
        size -= 3 * CRC32C_LONG;
    }
    while (size >= 3 * CRC32C_SHORT) {
        c = crc32c_three(c, p, CRC32C_SHORT, g_short);
        p += 3 * CRC32C_SHORT;
        size -= 3 * CRC32C_SHORT;
    }
    while (size >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        size -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (size--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

uint32_t stk_crc32c(uint32_t crc, const void *data, size_t size)
{
    return stk_cpu_has_sse42() ? crc32c_hw(crc, data, size) : stk_crc32c_sw(crc, data, size);
}
#else
uint32_t stk_crc32c(uint32_t crc, const void *data, size_t size)
{
    return stk_crc32c_sw(crc, data, size);
}
#endif
