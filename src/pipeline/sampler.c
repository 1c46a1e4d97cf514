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
 * Sampling options (stk_sampling) change what the permutation permutes and
 * how long the epoch's list is, not the sharding on top of it. The list has
 * M entries (num_samples, default the population size P: the `indices`
 * given, or N) and the sharding rules apply to M. Entry x is:
 *   - without weights: pass x / P of the population's permutation at x mod P
 *     (pass 0 keyed as the plain shuffle, so an unweighted full epoch is
 *     exactly the old order; passes 1, 2... keyed by (epoch, pass) in their
 *     own domain), mapped through `indices`;
 *   - with weights (or labels: weight 1 / count of the class): one draw with
 *     replacement from Walker's alias table (Vose's construction), keyed by
 *     (seed, epoch, x): a 64-bit word picks the column by a multiply-high,
 *     32 more bits the coin against the column's threshold. The table is
 *     built in integers (weights scaled to P * 2^32 in total, the rounding
 *     remainder given to the largest), so it is the same on every compiler.
 *   - mixing (mix_sizes: [0, N) as consecutive sources): source g owns q_g
 *     entries per epoch (M * w_g / sum w by largest remainder), laid end to
 *     end and scattered by the epoch's permutation of [0, M); the k-th entry
 *     of g is pass k / n_g of g's own permutation (keyed by (epoch, g, pass))
 *     at k mod n_g, offset by g's first index.
 *
 * Invariant: for fixed (seed, epoch), positions 0..N-1 of world_size 1 visit
 * every index in [0, N) exactly once (tests/test_sampler.c checks it for
 * every N up to 2000 and several large N).
 */
#include "pipeline/sampler.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct stk_sampler {
    uint64_t n;         /* entries in the epoch's list (M): what is sharded */
    uint64_t pop;       /* population size P: what is permuted */
    uint64_t dataset_size; /* N */
    uint64_t *indices;  /* P dataset indices (owned), or NULL: the identity */
    uint32_t *prob;     /* weights: P alias thresholds (of 2^32), owned, or NULL */
    uint32_t *alias;    /* weights: P alias columns (owned) */
    bool replacement;   /* weights, or M > P: an index may repeat in an epoch */
    /* mixing: num_mix sources, each with its first index, size, quota per
     * epoch, cumulative quota (its first slot in the interleave) and half
     * width; owned arrays, or mix_n = 0 */
    uint64_t mix_n;
    uint64_t *mix_off, *mix_size, *mix_quota, *mix_first;
    unsigned *mix_half;
    unsigned list_half; /* half width over [0, M): the interleave */
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

/* 64 x 64 -> high 64 bits, portably. */
static uint64_t mulhi64(uint64_t a, uint64_t b)
{
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

static int cmp_label_pos(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Class-balanced weights: 1 / count of each entry's label. */
static int weights_from_labels(const int64_t *labels, uint64_t p, double **out)
{
    *out = NULL;
    int64_t (*pairs)[2] = malloc(p * sizeof *pairs);
    double *w = malloc(p * sizeof *w);
    if (!pairs || !w) {
        free(pairs);
        free(w);
        return stk_fail(STK_ENOMEM, "sampler: out of memory for %llu labels",
                        (unsigned long long)p);
    }
    for (uint64_t i = 0; i < p; i++) {
        pairs[i][0] = labels[i];
        pairs[i][1] = (int64_t)i;
    }
    qsort(pairs, p, sizeof *pairs, cmp_label_pos);
    for (uint64_t i = 0; i < p;) {
        uint64_t j = i;
        while (j < p && pairs[j][0] == pairs[i][0])
            j++;
        for (uint64_t k = i; k < j; k++)
            w[pairs[k][1]] = 1.0 / (double)(j - i);
        i = j;
    }
    free(pairs);
    *out = w;
    return 0;
}

/* Walker's alias table by Vose's method, in integers: column j keeps j when
 * a uniform 32-bit coin is below prob[j], else gives alias[j]. */
static int build_alias(stk_sampler *s, const double *w, uint64_t p)
{
    double total = 0;
    for (uint64_t i = 0; i < p; i++) {
        if (!isfinite(w[i]) || w[i] < 0)
            return stk_fail(STK_EINVAL, "sampler: weight %llu is %g: weights must be finite "
                                        "and not negative",
                            (unsigned long long)i, w[i]);
        total += w[i];
    }
    if (!(total > 0) || !isfinite(total))
        return stk_fail(STK_EINVAL, "sampler: the weights sum to %g: at least one must be "
                                    "positive (and the sum finite)",
                        total);
    const uint64_t one = 1ull << 32;
    uint64_t *q = malloc(p * sizeof *q);
    uint32_t *work = malloc(p * sizeof *work);
    s->prob = malloc(p * sizeof *s->prob);
    s->alias = malloc(p * sizeof *s->alias);
    if (!q || !work || !s->prob || !s->alias) {
        free(q);
        free(work);
        return stk_fail(STK_ENOMEM, "sampler: out of memory for an alias table of %llu weights",
                        (unsigned long long)p);
    }
    /* Scale to P * 2^32 in total (each a division then a multiplication:
     * correctly rounded, nothing to fuse), the remainder to the largest. */
    double scale = (double)p * (double)one;
    uint64_t sum = 0, largest = 0;
    for (uint64_t i = 0; i < p; i++) {
        double f = w[i] / total;
        double v = f * scale;
        q[i] = v >= scale ? p * one : (uint64_t)v;
        sum += q[i];
        if (q[i] > q[largest])
            largest = i;
    }
    uint64_t target = p * one;
    if (sum <= target)
        q[largest] += target - sum;
    else
        q[largest] -= sum - target; /* rounding only: far below q[largest] */
    /* Vose: `small` grows from the front of work[], `large` from the back. */
    uint64_t ns = 0, nl = 0;
    for (uint64_t i = 0; i < p; i++) {
        if (q[i] < one)
            work[ns++] = (uint32_t)i;
        else
            work[p - 1 - nl++] = (uint32_t)i;
    }
    while (ns && nl) {
        uint32_t lo = work[--ns];
        uint32_t hi = work[p - nl]; /* the last pushed large */
        nl--;
        s->prob[lo] = (uint32_t)q[lo];
        s->alias[lo] = hi;
        q[hi] -= one - q[lo];
        if (q[hi] < one)
            work[ns++] = hi;
        else
            work[p - 1 - nl++] = hi;
    }
    /* What is left holds exactly 2^32 each (the sums are exact): always
     * itself. */
    while (ns) {
        uint32_t j = work[--ns];
        s->prob[j] = UINT32_MAX;
        s->alias[j] = j;
    }
    while (nl) {
        uint32_t j = work[p - nl];
        nl--;
        s->prob[j] = UINT32_MAX;
        s->alias[j] = j;
    }
    free(q);
    free(work);
    return 0;
}

/* Mixing: sources, their quotas by largest remainder, their half widths. */
static int apply_mix(stk_sampler *s, const stk_sampling *sp, stk_shuffle mode)
{
    uint64_t g = sp->num_mix, total = 0;
    if (!sp->mix_sizes || !g)
        return stk_fail(STK_EINVAL, "sampler: mixing needs mix_sizes and num_mix");
    if (sp->indices || sp->weights || sp->labels || sp->balance_classes)
        return stk_fail(STK_EINVAL, "sampler: mixing sources excludes indices, weights and "
                                    "class balance");
    if (mode == STK_SHUFFLE_BLOCK)
        return stk_fail(STK_EINVAL, "sampler: mixing sources takes shuffle=global or none, "
                                    "not block");
    s->mix_off = calloc(g, sizeof *s->mix_off);
    s->mix_size = calloc(g, sizeof *s->mix_size);
    s->mix_quota = calloc(g, sizeof *s->mix_quota);
    s->mix_first = calloc(g, sizeof *s->mix_first);
    s->mix_half = calloc(g, sizeof *s->mix_half);
    double *rem = calloc(g, sizeof *rem);
    if (!s->mix_off || !s->mix_size || !s->mix_quota || !s->mix_first || !s->mix_half || !rem) {
        free(rem);
        return stk_fail(STK_ENOMEM, "sampler: out of memory for %llu sources",
                        (unsigned long long)g);
    }
    s->mix_n = g;
    double wsum = 0;
    for (uint64_t i = 0; i < g; i++) {
        if (sp->mix_sizes[i] == 0 || sp->mix_sizes[i] > s->dataset_size - total) {
            free(rem);
            return stk_fail(STK_EINVAL, "sampler: source %llu has %llu samples: sources must "
                                        "be non-empty and sum to the dataset size %llu",
                            (unsigned long long)i, (unsigned long long)sp->mix_sizes[i],
                            (unsigned long long)s->dataset_size);
        }
        s->mix_off[i] = total;
        s->mix_size[i] = sp->mix_sizes[i];
        s->mix_half[i] = half_bits_for(sp->mix_sizes[i]);
        total += sp->mix_sizes[i];
        double w = sp->mix_weights ? sp->mix_weights[i] : (double)sp->mix_sizes[i];
        if (!isfinite(w) || w < 0) {
            free(rem);
            return stk_fail(STK_EINVAL, "sampler: mix weight %llu is %g: weights must be "
                                        "finite and not negative",
                            (unsigned long long)i, w);
        }
        wsum += w;
    }
    if (total != s->dataset_size) {
        free(rem);
        return stk_fail(STK_EINVAL, "sampler: the sources' sizes sum to %llu, not the dataset "
                                    "size %llu",
                        (unsigned long long)total, (unsigned long long)s->dataset_size);
    }
    if (!(wsum > 0) || !isfinite(wsum)) {
        free(rem);
        return stk_fail(STK_EINVAL, "sampler: the mix weights sum to %g: at least one must be "
                                    "positive",
                        wsum);
    }
    /* Quotas of M by largest remainder: floor(M * w / sum) each (a product
     * then a quotient: nothing to fuse), the rest one each to the largest
     * remainders, ties to the earlier source. */
    uint64_t m = s->n, given = 0;
    for (uint64_t i = 0; i < g; i++) {
        double w = sp->mix_weights ? sp->mix_weights[i] : (double)sp->mix_sizes[i];
        double exact = (double)m * w;
        exact = exact / wsum;
        double fl = floor(exact);
        uint64_t q = fl >= (double)m ? m : (uint64_t)fl;
        s->mix_quota[i] = q;
        rem[i] = exact - fl;
        given += q;
    }
    while (given > m) { /* rounding only: take from the largest quota */
        uint64_t big = 0;
        for (uint64_t i = 1; i < g; i++)
            if (s->mix_quota[i] > s->mix_quota[big])
                big = i;
        s->mix_quota[big]--;
        given--;
    }
    while (given < m) {
        uint64_t best = g;
        for (uint64_t i = 0; i < g; i++) {
            double w = sp->mix_weights ? sp->mix_weights[i] : 1;
            if (w > 0 && (best == g || rem[i] > rem[best]))
                best = i;
        }
        s->mix_quota[best]++;
        rem[best] = -1; /* one each, then round again if still short */
        given++;
        bool any = false; /* a source that can still take one (zero weights never do) */
        for (uint64_t i = 0; i < g; i++)
            any |= rem[i] >= 0 && (sp->mix_weights ? sp->mix_weights[i] : 1) > 0;
        if (!any)
            for (uint64_t i = 0; i < g; i++)
                rem[i] = 0;
    }
    free(rem);
    uint64_t first = 0;
    for (uint64_t i = 0; i < g; i++) {
        s->mix_first[i] = first;
        first += s->mix_quota[i];
        if (s->mix_quota[i] > s->mix_size[i])
            s->replacement = true;
    }
    s->list_half = half_bits_for(m);
    return 0;
}

/* The population, weights and list length from o->sampling. */
static int apply_sampling(stk_sampler *s, const stk_sampler_options *o, stk_shuffle mode)
{
    const stk_sampling *sp = o->sampling;
    s->pop = s->n = o->dataset_size;
    if (!sp)
        return 0;
    int rc = stk_reserved_check(sp->reserved_, sizeof sp->reserved_ / sizeof sp->reserved_[0],
                                "stk_sampling");
    if (rc < 0)
        return rc;
    if (sp->reserved32_)
        return stk_fail(STK_EINVAL, "stk_sampling: reserved32_ must be zero");
    if (sp->balance_classes && !sp->labels)
        return stk_fail(STK_EINVAL, "sampler: balance_classes needs the labels (the loader "
                                    "reads them from the dataset)");
    if (sp->indices || sp->num_indices) {
        if (!sp->indices || !sp->num_indices)
            return stk_fail(STK_EINVAL, "sampler: indices given without a count, or a count "
                                        "without indices");
        s->indices = malloc(sp->num_indices * sizeof *s->indices);
        if (!s->indices)
            return stk_fail(STK_ENOMEM, "sampler: out of memory for %llu indices",
                            (unsigned long long)sp->num_indices);
        for (uint64_t i = 0; i < sp->num_indices; i++) {
            if (sp->indices[i] >= o->dataset_size)
                return stk_fail(STK_EINVAL, "sampler: indices[%llu] = %llu is not below the "
                                            "dataset size %llu",
                                (unsigned long long)i, (unsigned long long)sp->indices[i],
                                (unsigned long long)o->dataset_size);
            s->indices[i] = sp->indices[i];
        }
        s->pop = sp->num_indices;
    }
    if ((sp->weights != NULL) != (sp->num_weights != 0) ||
        (sp->labels != NULL) != (sp->num_labels != 0))
        return stk_fail(STK_EINVAL, "sampler: weights or labels given without a count, or a "
                                    "count without the array");
    if (sp->weights && sp->labels)
        return stk_fail(STK_EINVAL, "sampler: weights and labels (class balance) exclude each "
                                    "other");
    if (sp->weights || sp->labels) {
        uint64_t count = sp->weights ? sp->num_weights : sp->num_labels;
        const char *what = sp->weights ? "weights" : "labels";
        if (count != s->pop)
            return stk_fail(STK_EINVAL, "sampler: %llu %s for a population of %llu (%s): one "
                                        "per entry",
                            (unsigned long long)count, what, (unsigned long long)s->pop,
                            s->indices ? "the indices given" : "the dataset");
        if (s->pop >= (1ull << 32))
            return stk_fail(STK_ELIMIT, "sampler: %s over %llu entries: at most 2^32 - 1",
                            what, (unsigned long long)s->pop);
        if (mode != STK_SHUFFLE_GLOBAL)
            return stk_fail(STK_EINVAL, "sampler: %s draw at random with replacement: "
                                        "shuffle=%s does not apply",
                            what, mode == STK_SHUFFLE_NONE ? "none" : "block");
        double *lw = NULL;
        if (sp->labels && (rc = weights_from_labels(sp->labels, s->pop, &lw)) < 0)
            return rc;
        rc = build_alias(s, sp->weights ? sp->weights : lw, s->pop);
        free(lw);
        if (rc < 0)
            return rc;
        s->replacement = true;
    }
    s->n = sp->num_samples ? sp->num_samples : s->pop;
    if (sp->mix_sizes || sp->num_mix || sp->mix_weights)
        return apply_mix(s, sp, mode);
    if (s->n > s->pop)
        s->replacement = true;
    return 0;
}

int stk_sampler_create(const stk_sampler_options *o, stk_sampler **out)
{
    *out = NULL;
    int rc;
    if (!o)
        return stk_fail(STK_EINVAL, "sampler: options are required");
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
    stk_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "sampler: out of memory");
    s->dataset_size = o->dataset_size;
    if ((rc = apply_sampling(s, o, mode)) < 0) {
        stk_sampler_destroy(s);
        return rc;
    }
    if (o->start_slot >= s->n) {
        rc = stk_fail(STK_EINVAL, "sampler: start_slot %llu is not below the %s %llu",
                      (unsigned long long)o->start_slot,
                      o->sampling ? "epoch's list size" : "dataset size", (unsigned long long)s->n);
        stk_sampler_destroy(s);
        return rc;
    }
    uint64_t length = stk_sampler_span(s->n, w, b, o->drop_last, o->start_slot);
    if (length == 0 && o->start_slot == 0) {
        rc = stk_fail(STK_EINVAL,
                      "sampler: with drop_last, %llu samples over %u ranks leave %llu per "
                      "rank, less than one batch of %u",
                      (unsigned long long)s->n, w, (unsigned long long)(s->n / w), b);
        stk_sampler_destroy(s);
        return rc;
    }
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
        if (s->bs > s->pop)
            s->bs = s->pop; /* one block: the same order, and no overflow below */
        s->k = o->shuffle_window ? o->shuffle_window : STK_DEFAULT_SHUFFLE_WINDOW;
        s->nb = s->pop / s->bs + (s->pop % s->bs != 0);
        s->deficit = s->nb * s->bs - s->pop; /* < bs, no overflow: nb*bs < pop + bs */
        if (s->k > s->nb)
            s->k = s->nb; /* one window holds everything */
        s->window = s->k * s->bs;  /* <= nb*bs */
        s->half_bits = half_bits_for(s->nb);
    } else {
        s->half_bits = half_bits_for(s->pop);
    }
    *out = s;
    return 0;
}

void stk_sampler_destroy(stk_sampler *s)
{
    if (!s)
        return;
    free(s->indices);
    free(s->prob);
    free(s->alias);
    free(s->mix_off);
    free(s->mix_size);
    free(s->mix_quota);
    free(s->mix_first);
    free(s->mix_half);
    free(s);
}

uint64_t stk_sampler_list_size(const stk_sampler *s) { return s->n; }

uint64_t stk_sampler_length(const stk_sampler *s) { return s->length; }

uint64_t stk_sampler_length_from(const stk_sampler *s, uint64_t start)
{
    return stk_sampler_span(s->n, s->world_size, s->batch_size, s->drop_last, start);
}

static void derive_key(const stk_sampler *s, uint64_t epoch, uint32_t domain, uint64_t base,
                       stk_epoch_key *key)
{
    stk_rng r;
    stk_rng_init(&r, s->seed, domain, epoch, base);
    key->epoch = epoch;
    key->domain = domain;
    key->base = base;
    for (int i = 0; i < STK_FEISTEL_ROUNDS; i++)
        key->round[i] = stk_rng_u32(&r);
    key->short_slot = 0;
    if (s->mode == STK_SHUFFLE_BLOCK)
        key->short_slot = walk_inverse(key->round, s->half_bits, s->nb, s->nb - 1);
}

void stk_sampler_epoch_key(const stk_sampler *s, uint64_t epoch, stk_epoch_key *key)
{
    derive_key(s, epoch, STK_RNG_DOMAIN_SAMPLER, 0, key);
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
    stk_rng_init(&r, s->seed, key->domain, key->epoch, key->base + 1 + w);
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
        return walk(key->round, s->half_bits, s->pop, x);
    }
}

/* Mixing: entry x -> its slot y of the epoch's interleave (the epoch's
 * permutation of [0, M)), the source g whose quota run holds y, the k-th
 * entry of g -> pass k / n_g of g's own permutation (keyed by (epoch, g,
 * pass)) at k mod n_g. */
static uint64_t mix_entry(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    uint64_t y = s->mode == STK_SHUFFLE_NONE ? x : walk(key->round, s->list_half, s->n, x);
    uint64_t lo = 0, hi = s->mix_n - 1; /* last source with first <= y */
    while (lo < hi) {
        uint64_t mid = (lo + hi + 1) / 2;
        if (s->mix_first[mid] <= y)
            lo = mid;
        else
            hi = mid - 1;
    }
    /* zero-quota sources share their first slot with the next: skip them */
    while (s->mix_quota[lo] == 0)
        lo++;
    uint64_t k = y - s->mix_first[lo], n = s->mix_size[lo];
    uint64_t r = k % n;
    if (s->mode != STK_SHUFFLE_NONE) {
        uint32_t rk[STK_FEISTEL_ROUNDS];
        stk_rng rng;
        stk_rng_init(&rng, s->seed, STK_RNG_DOMAIN_MIX, key->epoch, lo << 32 | k / n);
        for (int i = 0; i < STK_FEISTEL_ROUNDS; i++)
            rk[i] = stk_rng_u32(&rng);
        r = walk(rk, s->mix_half[lo], n, r);
    }
    return s->mix_off[lo] + r;
}

/* Entry x of the epoch's list: a population position, or an alias draw. */
static uint64_t entry(const stk_sampler *s, const stk_epoch_key *key, uint64_t x)
{
    uint64_t p;
    if (s->mix_n)
        return mix_entry(s, key, x);
    if (s->prob) {
        stk_rng r;
        stk_rng_init(&r, s->seed, STK_RNG_DOMAIN_WEIGHTS, key->epoch, x);
        uint64_t col = mulhi64(stk_rng_u64(&r), s->pop);
        uint32_t coin = stk_rng_u32(&r);
        p = coin < s->prob[col] ? col : s->alias[col];
    } else if (x < s->pop) {
        p = permute(s, key, x);
    } else {
        /* Pass x / P: its own permutation, keyed by (epoch, pass). */
        stk_epoch_key pk;
        derive_key(s, key->epoch, STK_RNG_DOMAIN_PASS, (x / s->pop) << 32, &pk);
        p = permute(s, &pk, x % s->pop);
    }
    return s->indices ? s->indices[p] : p;
}

void stk_sampler_place_from(const stk_sampler *s, const stk_epoch_key *key, uint64_t start,
                            uint64_t pos, stk_sampler_place *out)
{
    /* Global slot of this rank's position, then wrap into the list (only
     * pad-by-wrap slots reach n or more). */
    uint64_t slot = start + pos * s->world_size + s->rank;
    if (slot >= s->n)
        slot %= s->n;
    out->index = entry(s, key, slot);
    if (s->replacement) {
        out->draw = slot;
        out->draw_domain = STK_RNG_DOMAIN_SAMPLE_POS;
    } else {
        out->draw = out->index;
        out->draw_domain = STK_RNG_DOMAIN_SAMPLE;
    }
}

uint64_t stk_sampler_index_from(const stk_sampler *s, const stk_epoch_key *key, uint64_t start,
                                uint64_t pos)
{
    stk_sampler_place pl;
    stk_sampler_place_from(s, key, start, pos, &pl);
    return pl.index;
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
