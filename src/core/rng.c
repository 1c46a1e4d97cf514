/*
 * rng.c — Philox4x32-10 and the per-stream helpers built on it.
 *
 * Philox is a counter-based generator: output block = f(counter, key) with
 * ten rounds of multiply-hi/lo mixing and a Weyl-sequence key schedule. It
 * passes BigCrush, needs no state beyond the counter, and is the generator
 * cuRAND and JAX use, so a future GPU backend can draw the same numbers.
 * Known-answer vectors from Random123's kat_vectors are in tests/test_rng.c.
 */
#include "core/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void stk_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void stk_rng_init(stk_rng *r, uint64_t seed, uint32_t domain, uint64_t epoch, uint64_t index)
{
    /* The domain is folded into the key, the epoch's high bits too (epochs
     * beyond 2^32 keep distinct streams). */
    r->key[0] = (uint32_t)seed ^ domain;
    r->key[1] = (uint32_t)(seed >> 32) ^ (uint32_t)(epoch >> 32) * 0x85EBCA6Bu;
    r->ctr[0] = (uint32_t)index;
    r->ctr[1] = (uint32_t)(index >> 32);
    r->ctr[2] = (uint32_t)epoch;
    r->ctr[3] = 0;
    r->used = 4;
}

uint32_t stk_rng_u32(stk_rng *r)
{
    if (r->used == 4) {
        stk_philox4x32_10(r->ctr, r->key, r->buf);
        r->ctr[3]++;
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t stk_rng_u64(stk_rng *r)
{
    uint64_t hi = stk_rng_u32(r);
    return hi << 32 | stk_rng_u32(r);
}

uint32_t stk_rng_below(stk_rng *r, uint32_t n)
{
    /* Lemire, "Fast Random Integer Generation in an Interval" (2019). */
    uint64_t m = (uint64_t)stk_rng_u32(r) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = -n % n;
        while (low < threshold) {
            m = (uint64_t)stk_rng_u32(r) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

int64_t stk_rng_range(stk_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    if (span == 0) /* full 64-bit range */
        return (int64_t)stk_rng_u64(r);
    if (span <= UINT32_MAX)
        return lo + (int64_t)stk_rng_below(r, (uint32_t)span);
    /* Rejection on 64 bits for wide ranges. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do
        x = stk_rng_u64(r);
    while (x >= limit);
    return lo + (int64_t)(x % span);
}

double stk_rng_uniform(stk_rng *r)
{
    return (double)(stk_rng_u64(r) >> 11) * 0x1.0p-53;
}
