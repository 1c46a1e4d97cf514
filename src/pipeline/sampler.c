/*
 * sampler.c — the epoch order as a pure function of (seed, epoch, position).
 *
 * Shuffling N samples usually means materialising an O(N) permutation table;
 * for 10^9-sample datasets that is gigabytes per rank, and it must be rebuilt
 * to resume mid-epoch. Instead the permutation here is a keyed bijection
 * evaluated at one position at a time:
 *
 *   1. Let b be the smallest even number of bits with 2^b >= N (b >= 2).
 *      A balanced Feistel network with 6 rounds over b-bit integers is a
 *      bijection on [0, 2^b) for any round function (each round is
 *      invertible: (L, R) -> (R, L xor F(R))).
 *   2. Cycle-walking restricts it to [0, N): apply the network repeatedly
 *      until the value falls below N. Because the network is a bijection on
 *      the larger domain, the walk from any x < N ends at a unique y < N, so
 *      the restriction is a bijection on [0, N) (Black & Rogaway, 2002). The
 *      domain is at most 4N, so the expected walk is under 4 steps.
 *   3. Round keys are drawn from Philox keyed by the seed, counted by the
 *      epoch: every epoch gets an independent permutation.
 *
 * Sharding is layered on top (stoker.h, docs/sampler.md): position p of rank
 * r is global slot p*W + r of the epoch's list; with pad-by-wrap the list is
 * the permutation repeated, so slot s maps to permutation position s mod N.
 *
 * Invariant: for fixed (seed, epoch), positions 0..N-1 of world_size 1 visit
 * every index in [0, N) exactly once (tests/test_sampler.c checks it for
 * every N up to 2000 and several large N).
 */
#include "pipeline/sampler.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"

#include <stdlib.h>

struct stk_sampler {
    uint64_t n;         /* dataset size */
    uint64_t seed;
    uint32_t batch_size, rank, world_size;
    int shuffle, drop_last;
    uint64_t length;    /* positions per rank per epoch */
    unsigned half_bits; /* Feistel half width, 1..32 */
    uint64_t half_mask;
};

/* A strong 32-bit mixer (Wellons' "lowbias32"). */
static inline uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

int stk_sampler_create(const stk_sampler_options *o, stk_sampler **out)
{
    *out = NULL;
    if (!o)
        return stk_fail(STK_EINVAL, "sampler: options are required");
    int rc = stk_reserved_check(o->reserved_, sizeof o->reserved_ / sizeof o->reserved_[0],
                                "stk_sampler_options");
    if (rc < 0)
        return rc;
    uint32_t w = o->world_size ? o->world_size : 1;
    uint32_t b = o->batch_size ? o->batch_size : 1;
    if (o->dataset_size == 0)
        return stk_fail(STK_EINVAL, "sampler: the dataset is empty");
    if (o->rank >= w)
        return stk_fail(STK_EINVAL, "sampler: rank %u is not below world_size %u", o->rank, w);

    uint64_t length;
    if (o->drop_last) {
        uint64_t share = o->dataset_size / w;
        length = share / b * b;
        if (length == 0)
            return stk_fail(STK_EINVAL,
                            "sampler: with drop_last, %llu samples over %u ranks leave %llu per "
                            "rank, less than one batch of %u",
                            (unsigned long long)o->dataset_size, w, (unsigned long long)share, b);
    } else {
        length = o->dataset_size / w + (o->dataset_size % w != 0);
    }

    stk_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "sampler: out of memory");
    s->n = o->dataset_size;
    s->seed = o->seed;
    s->batch_size = b;
    s->rank = o->rank;
    s->world_size = w;
    s->shuffle = !o->no_shuffle;
    s->drop_last = o->drop_last != 0;
    s->length = length;
    unsigned bits = 2;
    while (bits < 64 && (1ull << bits) < s->n)
        bits++;
    bits += bits & 1u;
    s->half_bits = bits / 2;
    s->half_mask = (s->half_bits == 64) ? ~0ull : (1ull << s->half_bits) - 1;
    *out = s;
    return 0;
}

void stk_sampler_destroy(stk_sampler *s) { free(s); }

uint64_t stk_sampler_length(const stk_sampler *s) { return s->length; }

void stk_sampler_epoch_key(const stk_sampler *s, uint64_t epoch, stk_epoch_key *key)
{
    stk_rng r;
    stk_rng_init(&r, s->seed, STK_RNG_DOMAIN_SAMPLER, epoch, 0);
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++)
        key->round[i] = stk_rng_u32(&r);
}

static uint64_t feistel(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    uint64_t left = x >> s->half_bits, right = x & s->half_mask;
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++) {
        uint64_t f = mix32((uint32_t)right ^ key->round[i]); /* half_bits <= 32 */
        uint64_t next = left ^ (f & s->half_mask);
        left = right;
        right = next;
    }
    return left << s->half_bits | right;
}

static uint64_t permute(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    if (!s->shuffle || s->n == 1)
        return x;
    do
        x = feistel(s, key, x);
    while (x >= s->n);
    return x;
}

uint64_t stk_sampler_index_keyed(const stk_sampler *s, const stk_epoch_key *key, uint64_t pos)
{
    /* Global slot of this rank's position, then wrap into the permutation
     * (only pad-by-wrap slots reach n or more). */
    uint64_t slot = pos * s->world_size + s->rank;
    if (slot >= s->n)
        slot %= s->n;
    return permute(s, key, slot);
}

uint64_t stk_sampler_index(const stk_sampler *s, uint64_t epoch, uint64_t pos)
{
    stk_epoch_key key;
    stk_sampler_epoch_key(s, epoch, &key);
    return stk_sampler_index_keyed(s, &key, pos);
}
