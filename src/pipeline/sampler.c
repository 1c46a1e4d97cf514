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
 * Block shuffle (STK_SHUFFLE_BLOCK), for storage slow at random access, is
 * two such keyed bijections stacked. Cut [0, N) into nb = ceil(N / bs)
 * blocks of bs consecutive indices (the last one short by d = nb*bs - N).
 *   a. The block order is a Feistel/cycle-walk permutation of [0, nb) keyed
 *      by the epoch (the same round keys the global shuffle would use).
 *   b. The ordered blocks are grouped into windows of K consecutive blocks;
 *      the epoch lists window after window, and inside window w the samples
 *      of its blocks (concatenated in block order) are permuted by a third
 *      Feistel/cycle-walk bijection on [0, size of w), keyed by (epoch, w).
 * Only one window is shorter than K*bs for the short block (the window
 * holding it: its slot in the block order is the inverse of block nb-1
 * under (a), computed once per epoch by running the network backwards), plus
 * possibly the last window for having fewer blocks. So a position's window
 * and offset come from one division and one comparison, and each position
 * costs O(1): no table anywhere. Every index in [0, N) appears exactly once
 * because each step is a bijection between exactly sized sets.
 *
 * Sharding is layered on top (stoker.h, docs/sampler.md): position p of rank
 * r is global slot S + p*W + r of the epoch's list, S the start slot (0 but
 * in an epoch continued from a checkpoint taken under another world size);
 * with pad-by-wrap the list is the permutation repeated, so slot s maps to
 * permutation position s mod N.
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
    stk_shuffle mode;   /* resolved: no_shuffle folded in */
    int drop_last;
    uint64_t start;     /* options' start_slot (public index/length) */
    uint64_t length;    /* positions per rank per epoch from `start` */
    unsigned half_bits; /* Feistel half width over [0, n) (global) or [0, nb) (block) */
    /* block mode */
    uint64_t bs;        /* records per block */
    uint64_t nb;        /* blocks, ceil(n / bs) */
    uint64_t deficit;   /* nb * bs - n: how much the last block is short */
    uint64_t k;         /* blocks per window */
    uint64_t window;    /* k * bs: positions in a full window */
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

/* Half width of the balanced network for a domain of n: the smallest even
 * b >= 2 with 2^b >= n, halved. */
static unsigned half_bits_for(uint64_t n)
{
    unsigned bits = 2;
    while (bits < 64 && (1ull << bits) < n)
        bits++;
    bits += bits & 1u;
    return bits / 2;
}

static uint64_t feistel(const uint32_t *rk, unsigned half_bits, uint64_t x)
{
    uint64_t mask = (1ull << half_bits) - 1; /* half_bits <= 32 */
    uint64_t left = x >> half_bits, right = x & mask;
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++) {
        uint64_t f = mix32((uint32_t)right ^ rk[i]);
        uint64_t next = left ^ (f & mask);
        left = right;
        right = next;
    }
    return left << half_bits | right;
}

/* The network run backwards: (L, R) = (R', L' xor F(R)) undone round by
 * round from the last key. */
static uint64_t feistel_inverse(const uint32_t *rk, unsigned half_bits, uint64_t y)
{
    uint64_t mask = (1ull << half_bits) - 1;
    uint64_t left = y >> half_bits, right = y & mask;
    for (int i = STK_FEISTEL_ROUNDS - 1; i >= 0; i--) {
        uint64_t prev_right = left;
        uint64_t prev_left = right ^ (mix32((uint32_t)prev_right ^ rk[i]) & mask);
        left = prev_left;
        right = prev_right;
    }
    return left << half_bits | right;
}

/* Cycle-walking restriction of the network to [0, n). */
static uint64_t walk(const uint32_t *rk, unsigned half_bits, uint64_t n, uint64_t x)
{
    if (n <= 1)
        return 0;
    do
        x = feistel(rk, half_bits, x);
    while (x >= n);
    return x;
}

static uint64_t walk_inverse(const uint32_t *rk, unsigned half_bits, uint64_t n, uint64_t y)
{
    if (n <= 1)
        return 0;
    do
        y = feistel_inverse(rk, half_bits, y);
    while (y >= n);
    return y;
}

uint64_t stk_sampler_span(uint64_t n, uint32_t w, uint32_t b, int drop_last, uint64_t start)
{
    uint64_t rest = start < n ? n - start : 0;
    if (drop_last)
        return rest / w / b * b;
    return rest / w + (rest % w != 0);
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
    stk_shuffle mode = o->shuffle;
    if (mode != STK_SHUFFLE_GLOBAL && mode != STK_SHUFFLE_NONE && mode != STK_SHUFFLE_BLOCK)
        return stk_fail(STK_EINVAL, "sampler: unknown shuffle mode %d", (int)mode);
    if (o->no_shuffle) {
        if (mode == STK_SHUFFLE_BLOCK)
            return stk_fail(STK_EINVAL, "sampler: no_shuffle contradicts shuffle=block");
        mode = STK_SHUFFLE_NONE;
    }
    if (mode != STK_SHUFFLE_BLOCK && (o->block_size || o->shuffle_window))
        return stk_fail(STK_EINVAL, "sampler: block_size and shuffle_window apply to "
                                    "shuffle=block only");
    if (o->start_slot >= o->dataset_size)
        return stk_fail(STK_EINVAL, "sampler: start_slot %llu is not below the dataset size %llu",
                        (unsigned long long)o->start_slot, (unsigned long long)o->dataset_size);

    uint64_t length = stk_sampler_span(o->dataset_size, w, b, o->drop_last, o->start_slot);
    if (length == 0 && o->start_slot == 0)
        return stk_fail(STK_EINVAL,
                        "sampler: with drop_last, %llu samples over %u ranks leave %llu per "
                        "rank, less than one batch of %u",
                        (unsigned long long)o->dataset_size, w,
                        (unsigned long long)(o->dataset_size / w), b);

    stk_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "sampler: out of memory");
    s->n = o->dataset_size;
    s->seed = o->seed;
    s->batch_size = b;
    s->rank = o->rank;
    s->world_size = w;
    s->mode = mode;
    s->drop_last = o->drop_last != 0;
    s->start = o->start_slot;
    s->length = length;
    if (mode == STK_SHUFFLE_BLOCK) {
        s->bs = o->block_size ? o->block_size : STK_DEFAULT_BLOCK_SIZE;
        if (s->bs > s->n)
            s->bs = s->n; /* one block: the same order, and no overflow below */
        s->k = o->shuffle_window ? o->shuffle_window : STK_DEFAULT_SHUFFLE_WINDOW;
        s->nb = s->n / s->bs + (s->n % s->bs != 0);
        s->deficit = s->nb * s->bs - s->n; /* < bs, no overflow: nb*bs < n + bs */
        if (s->k > s->nb)
            s->k = s->nb; /* one window holds everything */
        s->window = s->k * s->bs;  /* <= nb*bs */
        s->half_bits = half_bits_for(s->nb);
    } else {
        s->half_bits = half_bits_for(s->n);
    }
    *out = s;
    return 0;
}

void stk_sampler_destroy(stk_sampler *s) { free(s); }

uint64_t stk_sampler_length(const stk_sampler *s) { return s->length; }

uint64_t stk_sampler_length_from(const stk_sampler *s, uint64_t start)
{
    return stk_sampler_span(s->n, s->world_size, s->batch_size, s->drop_last, start);
}

void stk_sampler_epoch_key(const stk_sampler *s, uint64_t epoch, stk_epoch_key *key)
{
    stk_rng r;
    stk_rng_init(&r, s->seed, STK_RNG_DOMAIN_SAMPLER, epoch, 0);
    key->epoch = epoch;
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++)
        key->round[i] = stk_rng_u32(&r);
    key->short_slot = 0;
    if (s->mode == STK_SHUFFLE_BLOCK)
        key->short_slot = walk_inverse(key->round, s->half_bits, s->nb, s->nb - 1);
}

/* Block shuffle: permutation position x in [0, n) -> dataset index. */
static uint64_t block_permute(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    uint64_t bs = s->bs, d = s->deficit;
    uint64_t ws = key->short_slot / s->k; /* the window holding the short block */
    /* Windows before and including ws start at w * window; later ones d
     * earlier. */
    uint64_t w, off;
    if (x < (ws + 1) * s->window - d) {
        w = x / s->window;
        off = x - w * s->window;
    } else {
        w = (x + d) / s->window;
        off = x + d - w * s->window;
    }
    uint64_t first = w * s->k; /* its first block slot */
    uint64_t blocks = s->nb - first < s->k ? s->nb - first : s->k;
    uint64_t size = blocks * bs - (w == ws ? d : 0);

    /* Mix inside the window, keyed by (epoch, window). */
    uint32_t rk[STK_FEISTEL_ROUNDS];
    stk_rng r;
    stk_rng_init(&r, s->seed, STK_RNG_DOMAIN_SAMPLER, key->epoch, 1 + w);
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++)
        rk[i] = stk_rng_u32(&r);
    off = walk(rk, half_bits_for(size), size, off);

    /* Offset within the window's concatenated blocks -> (block slot, row);
     * the short block (if here) covers bs - d offsets. */
    uint64_t t;
    if (w == ws && off >= (key->short_slot - first + 1) * bs - d)
        off += d;
    t = off / bs;
    uint64_t block = walk(key->round, s->half_bits, s->nb, first + t);
    return block * bs + (off - t * bs);
}

static uint64_t permute(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    switch (s->mode) {
    case STK_SHUFFLE_NONE:
        return x;
    case STK_SHUFFLE_BLOCK:
        return block_permute(s, key, x);
    default:
        return walk(key->round, s->half_bits, s->n, x);
    }
}

uint64_t stk_sampler_index_from(const stk_sampler *s, const stk_epoch_key *key, uint64_t start,
                                uint64_t pos)
{
    /* Global slot of this rank's position, then wrap into the permutation
     * (only pad-by-wrap slots reach n or more). */
    uint64_t slot = start + pos * s->world_size + s->rank;
    if (slot >= s->n)
        slot %= s->n;
    return permute(s, key, slot);
}

uint64_t stk_sampler_index_keyed(const stk_sampler *s, const stk_epoch_key *key, uint64_t pos)
{
    return stk_sampler_index_from(s, key, s->start, pos);
}

uint64_t stk_sampler_index(const stk_sampler *s, uint64_t epoch, uint64_t pos)
{
    stk_epoch_key key;
    stk_sampler_epoch_key(s, epoch, &key);
    return stk_sampler_index_keyed(s, &key, pos);
}
