/*
 * sampler.h — internal fast path of the epoch order (see stoker.h for the
 * public semantics and docs/sampler.md for the construction).
 *
 * The loader derives an epoch's permutation key once per batch
 * (stk_sampler_epoch_key) and maps each position with it, instead of
 * re-deriving the round keys for every sample. It also continues an epoch
 * checkpointed under another layout from a start slot, with the same
 * sampler: stk_sampler_length_from / stk_sampler_index_from take the start
 * slot explicitly (the public functions use the options' start_slot).
 */
#ifndef STK_PIPELINE_SAMPLER_H
#define STK_PIPELINE_SAMPLER_H

#include "stoker/stoker.h"

#define STK_FEISTEL_ROUNDS 6

typedef struct stk_epoch_key {
    uint64_t epoch;
    uint32_t domain;    /* Philox domain of the keys: SAMPLER (first pass) or PASS */
    uint64_t base;      /* counter base of the keys: 0, or pass << 32 */
    uint32_t round[STK_FEISTEL_ROUNDS]; /* the permutation (global) or the block order (block) */
    uint64_t short_slot; /* block: where the short last block lands in the block order */
} stk_epoch_key;

void stk_sampler_epoch_key(const stk_sampler *s, uint64_t epoch, stk_epoch_key *key);
uint64_t stk_sampler_index_keyed(const stk_sampler *s, const stk_epoch_key *key, uint64_t pos);

/* Samples per rank in an epoch whose list starts at global slot `start`
 * (< N; 0 is a full epoch). May be 0 for start > 0. */
uint64_t stk_sampler_length_from(const stk_sampler *s, uint64_t start);
uint64_t stk_sampler_index_from(const stk_sampler *s, const stk_epoch_key *key, uint64_t start,
                                uint64_t pos);

/* Where a position leads: the dataset index, and the counter of its
 * augmentation draws — the index itself when every index appears at most
 * once in the epoch's list (domain STK_RNG_DOMAIN_SAMPLE, as before
 * sampling options existed), the list position when entries are drawn
 * with replacement (weights, labels, num_samples > population: domain
 * STK_RNG_DOMAIN_SAMPLE_POS). */
typedef struct stk_sampler_place {
    uint64_t index;
    uint64_t draw;
    uint32_t draw_domain;
} stk_sampler_place;

void stk_sampler_place_from(const stk_sampler *s, const stk_epoch_key *key, uint64_t start,
                            uint64_t pos, stk_sampler_place *out);
/* Entries in the epoch's list (num_samples, or the population size). */
uint64_t stk_sampler_list_size(const stk_sampler *s);

/* The per-rank length of a layout (N samples, world size w, batch b,
 * drop_last, list starting at slot `start` < N), without a sampler: what
 * the loader needs to interpret a state taken under another layout. */
uint64_t stk_sampler_span(uint64_t n, uint32_t w, uint32_t b, int drop_last, uint64_t start);

#endif
