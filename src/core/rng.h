/*
 * rng.h — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * Every random decision stoker makes is a pure function of a key and a
 * counter, never of which thread runs or in what order: the stream for a
 * sample is keyed by the seed and counted from (sample index, epoch, domain),
 * so the same seed gives bit-identical batches for any thread count, and a
 * loader resumed mid-epoch redraws exactly what the original drew.
 *
 * Counter layout for a stream: ctr = { index_lo, index_hi, epoch, block }
 * where `block` counts the 128-bit blocks drawn so far. Key = the 64-bit seed
 * xor a per-domain constant (samples, sampler keys...), so domains never
 * share streams.
 */
#ifndef STK_CORE_RNG_H
#define STK_CORE_RNG_H

#include <stdint.h>

/* Domains: distinct streams for distinct purposes under one seed. */
enum {
    STK_RNG_DOMAIN_SAMPLE = 0x53414d50u,  /* per-sample augmentation draws */
    STK_RNG_DOMAIN_SAMPLER = 0x5045524du, /* epoch permutation round keys */
    STK_RNG_DOMAIN_PASS = 0x50415353u,    /* round keys of passes 2, 3... (num_samples > P) */
    STK_RNG_DOMAIN_WEIGHTS = 0x57474854u, /* weighted draws, counted by list position */
    STK_RNG_DOMAIN_MIX = 0x4d495853u,     /* a mixed source's own permutations */
    /* augmentation draws counted by list position (sampling with
     * replacement: one index may appear twice in an epoch) */
    STK_RNG_DOMAIN_SAMPLE_POS = 0x534d5050u,
    /* on_error=replace: the substitute places drawn for a failed row */
    STK_RNG_DOMAIN_REPLACE = 0x5245504cu,
};

typedef struct stk_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4]; /* current block */
    unsigned used;   /* words of buf consumed, 4 = empty */
} stk_rng;

/* The raw block function: out = Philox4x32-10(ctr, key). */
void stk_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Stream for (seed, domain, epoch, index). */
void stk_rng_init(stk_rng *r, uint64_t seed, uint32_t domain, uint64_t epoch, uint64_t index);

uint32_t stk_rng_u32(stk_rng *r);
uint64_t stk_rng_u64(stk_rng *r);
/* Uniform integer in [0, n), unbiased (Lemire's method); n > 0. */
uint32_t stk_rng_below(stk_rng *r, uint32_t n);
/* Uniform integer in [lo, hi] inclusive, as Python's random.randint. */
int64_t stk_rng_range(stk_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1) with 53 random bits. */
double stk_rng_uniform(stk_rng *r);

#endif
