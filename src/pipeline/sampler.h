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

/* The per-rank length of a layout (N samples, world size w, batch b,
 * drop_last, list starting at slot `start` < N), without a sampler: what
 * the loader needs to interpret a state taken under another layout. */
uint64_t stk_sampler_span(uint64_t n, uint32_t w, uint32_t b, int drop_last, uint64_t start);

#endif
