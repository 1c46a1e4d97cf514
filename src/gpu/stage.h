/*
 * stage.h — the GPU image pipeline of one loader: what the CPU stages per
 * row, and what one batch queues on its device (internal; docs/gpu.md,
 * essay in stage.c).
 */
#ifndef STK_GPU_STAGE_H
#define STK_GPU_STAGE_H

#include <pthread.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/util.h"
#include "gpu/device.h"
#include "gpu/nvjpeg.h"
#include "ops/plan.h"

/* How a loader uses its device (chosen at create from the placement and
 * the spec; stk_gpu_pipe_create):
 *   STK_GPU_COPY     the CPU runs the whole spec into a pinned batch; the
 *                    batch is copied to the device as is.
 *   STK_GPU_FORMAT   the CPU runs the spec up to its uint8 image (uint8
 *                    HWC crosses the bus); the GPU normalizes, converts
 *                    and lays out.
 *   STK_GPU_AUGMENT  the CPU decodes the region the crop needs; the GPU
 *                    resamples, applies the tables and the colour steps,
 *                    normalizes, converts and lays out. */
typedef enum stk_gpu_mode { STK_GPU_COPY = 0, STK_GPU_FORMAT = 1, STK_GPU_AUGMENT = 2 } stk_gpu_mode;

typedef struct stk_gpu_pipe stk_gpu_pipe;

/* Choose the mode for `plan` under `placement` (STK_EINVAL naming the op
 * that keeps the spec on the CPU when placement is STK_PLACE_GPU). `spec`
 * is the spec's text (for messages); `host_fields`: the loader delivers
 * fields besides image and label that the image's geometry moves (masks,
 * boxes), which keeps the spec on the CPU. `rows`: output rows per batch.
 * `decoder` STK_DECODER_NVJPEG: JPEGs are decoded on the GPU (gpu/nvjpeg.c;
 * needs STK_GPU_AUGMENT: STK_EINVAL otherwise, STK_EUNSUPPORTED without
 * nvJPEG). Borrows g and plan. */
int stk_gpu_pipe_create(stk_gpu *g, const stk_plan *plan, const char *spec,
                        stk_placement placement, stk_decoder decoder, int host_fields,
                        uint32_t rows, stk_gpu_pipe **out);
void stk_gpu_pipe_free(stk_gpu_pipe *p);
stk_gpu_mode stk_gpu_pipe_mode(const stk_gpu_pipe *p);
const char *stk_gpu_mode_name(stk_gpu_mode m);
/* Why the mode is what it is ("colour jitter runs on the GPU", "rotate has
 * no GPU kernel", ...): for stats and the CLI. */
const char *stk_gpu_pipe_reason(const stk_gpu_pipe *p);
/* The device time of the batches timed so far (stage.c, "Timing"). */
void stk_gpu_pipe_timing(stk_gpu_pipe *p, stk_device_timing *t);

/* One batch's buffers (one per loader slot). Host memory is pinned. */
typedef struct stk_gpu_batch {
    uint8_t *host;        /* COPY: the batch; else records, then the stage arena */
    size_t host_bytes;
    uint64_t d_stage, d_work, d_rowsum, d_out;
    uint64_t stream, event;
    uint64_t release_event; /* recorded on the consumer's stream at release */
    /* Guarded by the loader's mutex: */
    uint64_t consumer_stream; /* the last stream stk_loader_batch_wait named */
    int consumer_known;
    int release_pending;      /* release_event recorded, not yet waited on */
    int in_flight;            /* a submit queued work that reads `host`: wait
                                 for `event` before writing it again (set by
                                 the submitting worker; read by the next
                                 batch's workers after they claim rows under
                                 the loader's lock) */
    /* The arena's allocator (mu): bytes handed out of the stage arena and
     * of the work arena, rows not yet staged. */
    pthread_mutex_t mu;
    size_t stage_used, work_used;
    uint32_t unstaged;
    uint32_t fallbacks;       /* rows staged as heads (the region did not fit) */
    uint32_t jpeg_cpu;        /* decoder nvjpeg: rows decoded on the CPU (mu) */
    /* Decoder nvjpeg: the slot's nvJPEG state and, per output row, the JPEG
     * handed to it (jpeg_row[r]: whether row r has one; written by the
     * row's worker, read by the submitting one after every row is staged). */
    stk_gpu_jstate *jstate;
    stk_gpu_jitem *jpeg_items;   /* [rows] */
    uint8_t *jpeg_row;           /* [rows] */
    stk_gpu_jitem *jpeg_batch;   /* [rows]: stk_gpu_batch_decode's list */
    uint32_t *jpeg_batch_row;    /* [rows] */
    uint8_t *jpeg_bad;           /* [rows]: of the list, corrupt */
    uint8_t *jpeg_failed;        /* [rows]: output rows dropped as corrupt */
    /* Timing (stage.c, "Timing"): events around the kernels and around the
     * decode (not in COPY mode), written by the submitting worker; the
     * flags (mu) say a pair was recorded and is not yet collected. */
    uint64_t t_kernels[2], t_decode[2];
    int timed_kernels, timed_decode; /* mu */
    int fused_used;                  /* mu: the batch ran STK_K_VOUT */
    uint32_t launches;               /* kernel launches of the batch */
} stk_gpu_batch;

int stk_gpu_batch_init(stk_gpu_pipe *p, stk_gpu_batch *b);
void stk_gpu_batch_free(stk_gpu_pipe *p, stk_gpu_batch *b);
/* When the slot is given a new batch (under the loader's lock; never
 * blocks): empties the arena. */
void stk_gpu_batch_begin(stk_gpu_pipe *p, stk_gpu_batch *b);
/* Before a worker writes rows of the batch (no lock held): waits on the
 * host until the previous batch's copy has read the staging memory. */
int stk_gpu_batch_ready(stk_gpu_pipe *p, stk_gpu_batch *b);

/* FORMAT/AUGMENT: stage output row `row` from one sample and its rng (a
 * worker, no lock; rows are disjoint). Errors as stk_plan_run_input. */
int stk_gpu_stage_row(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t row, const stk_plan_input *in,
                      stk_rng *rng, stk_scratch *scratch);
/* Mark output row `row` as left out (skip policy). */
void stk_gpu_stage_skip(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t row);

/* Decoder nvjpeg, once every row is staged and before the rows are
 * compacted (the worker that finished the batch): decode the batch's JPEG
 * rows into the work arena on the slot's stream. A corrupt row (libjpeg-
 * turbo rejects it as well) is, with keep_going (the skip policy), left out
 * (stk_gpu_row_failed) for the caller to drop; without, the call returns
 * STK_EDATA with *failed_row = that output row (the message says why;
 * the caller names the sample). No-op with decoder cpu. */
int stk_gpu_batch_decode(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t staged, int keep_going,
                         uint32_t *failed_row);
int stk_gpu_row_failed(const stk_gpu_batch *b, uint32_t row);

/* Queue the batch: output rows [0, staged) were staged, `rows` of them
 * kept (COPY: the first `rows` rows of b->host, already compacted); the
 * kept ones go in row order into d_out; then record b->event. The worker
 * that finished the batch. */
int stk_gpu_batch_submit(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t staged, uint32_t rows);

#endif
