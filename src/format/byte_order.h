/*
 * byte_order.h — little-endian integers read from and written to bytes
 * (internal).
 *
 * The formats the readers parse store their integers little-endian (.stk,
 * TFRecord's framing, RecordIO, the .npy/.npz ZIP records); these read and
 * write them byte by byte, so the code is endian-neutral and never
 * dereferences an unaligned pointer into a mapped file. They lived in the
 * .stk layout header (stk/stk_format.h, which includes this one) until the
 * .stk files moved into their own folder: the other readers include this
 * header rather than the .stk reader's.
 */
#ifndef STK_FORMAT_BYTE_ORDER_H
#define STK_FORMAT_BYTE_ORDER_H

#include <stdint.h>

static inline uint16_t stk_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t stk_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t stk_rd64(const uint8_t *p)
{
    return (uint64_t)stk_rd32(p) | (uint64_t)stk_rd32(p + 4) << 32;
}
static inline void stk_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void stk_wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void stk_wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

#endif
