/*
 * sampler.h — internal fast path of the epoch order (see stoker.h for the
 * public semantics and docs/sampler.md for the construction).
 *
 * The loader derives an epoch's permutation key once per batch
 * (stk_sampler_epoch_key) and maps each position with it, instead of
 * re-deriving the round keys for every sample.
 */
#ifndef STK_PIPELINE_SAMPLER_H
#define STK_PIPELINE_SAMPLER_H

#include "stoker/stoker.h"

#define STK_FEISTEL_ROUNDS 6

typedef struct stk_epoch_key {
    uint32_t round[STK_FEISTEL_ROUNDS];
} stk_epoch_key;

void stk_sampler_epoch_key(const stk_sampler *s, uint64_t epoch, stk_epoch_key *key);
uint64_t stk_sampler_index_keyed(const stk_sampler *s, const stk_epoch_key *key, uint64_t pos);

#endif
