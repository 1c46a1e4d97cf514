/*
 * crc32c.c — CRC-32C, by the SSE4.2 instruction when the CPU has it, else
 * by slicing-by-8 tables built once (see crc32c.h).
 *
 * The tables are built on first use behind a pthread_once, so any number
 * of threads may call stk_crc32c at once.
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

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                            size_t size)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
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
