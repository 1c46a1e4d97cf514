/*
 * stage.c — the GPU image pipeline: the CPU stages each row, the GPU
 * finishes the batch (docs/gpu.md).
 *
 * A loader with a device has one stk_gpu_pipe and one stk_gpu_batch per
 * slot of its pool. The pipe fixes, at create, how the work is split
 * (stk_gpu_mode): AUGMENT when every op of the spec after the decode has a
 * GPU kernel, FORMAT when the spec ends in uint8 pixels (the GPU only
 * normalizes, converts and lays out), COPY otherwise. The batch is the
 * same in all three: the split moves work, never changes a value.
 *
 * Staging (AUGMENT). A worker runs the CPU path's steps 1-6 unchanged
 * (stk_imgplan_prepare: probe, draws from the row's Philox stream, DCT
 * scale, region decode, the point-op table of the ops before the resize),
 * then writes the row's record into the slot's pinned staging memory: a
 * descriptor (stk_gpu_sample: flips, the table of the ops after the
 * resize, the colour steps in drawn order) in the record array, and the
 * region's pixels plus both resample tables (stk_rs_build, Pillow's
 * fixed-point weights, the horizontal flip folded in) in the stage arena.
 * It also reserves device-only space in the work arena: the horizontal
 * pass's output and the head (the uint8 image after the resample).
 *
 * Bounded memory. Both arenas have a fixed size per slot (per row: twice
 * the head, plus room for tables), handed out by a bump allocator under
 * the batch's mutex. The allocator always keeps room for a head per row
 * not yet staged, so a row whose region does not fit (a large PNG, a
 * huge JPEG cropped near its full size at scale 1/8) is staged as its
 * head instead: the CPU runs the two resample passes itself — with the
 * very per-element functions the kernels run — and the GPU takes over
 * after them (STK_GS_HEAD, counted in the loader's stats). No row ever
 * fails for lack of staging memory, and the memory never grows.
 *
 * Submitting. The worker that finishes a batch assigns the kept rows
 * their output positions (the skip policy compacts), copies the records
 * and the used part of the stage arena to the device in one transfer
 * each, queues the kernels (kernels.h's order) on the slot's stream and
 * records the slot's event. The consumer receives the device buffer with
 * that event and stream (stoker.h, stk_batch). The staging memory is
 * reused for the slot's next batch only after that event (host wait in
 * stk_gpu_batch_ready, by each worker before it writes rows, outside the
 * loader's lock; normally already complete), and the device output
 * only after the consumer's stream has passed the point where it released
 * the batch (release_event, recorded on the stream it named in
 * stk_loader_batch_wait).
 *
 * Decoder nvjpeg (gpu/nvjpeg.c). A JPEG row is staged as its bytes (plus
 * both tables) instead of its decoded region: the worker plans the row
 * without decoding (stk_imgplan_prepare_jpeg, the DCT scale capped at what
 * the decoder does), takes stage room for the bytes and work room for the
 * decoded region (device only; record.region_dev), and notes the row in
 * jpeg_items. When every row is staged, stk_gpu_batch_decode (before the
 * loader compacts the rows) makes one batched nvJPEG call that decodes
 * them into the work arena on the slot's stream, ahead of submit's copy
 * and kernels. A row the worker cannot hand over is rewound (its rng copy)
 * and staged by the CPU path below; jpeg_cpu counts those rows and the
 * ones nvJPEG refused (decoded at decode time by libjpeg-turbo). A row
 * libjpeg-turbo rejects too is corrupt: under the skip policy it is
 * marked (jpeg_failed) and the loader drops it as it drops rows that fail
 * in a worker; otherwise the error names it.
 *
 * Kernels (kernels.h). A batch in which no row has a contrast step runs
 * STK_K_HPASS then the fused STK_K_VOUT (the vertical pass straight into
 * the output); one with a contrast step needs the head's grayscale mean
 * before any output pixel, so it runs the five kernels one launch per op.
 * STOKER_GPU_KERNELS=per-op keeps the separate launches always (the
 * outputs are equal bit for bit; bench/gpu.py measures both).
 *
 * Timing. Each slot has two pairs of timed events: around its kernels
 * (first launch to last) and around the nvJPEG decode. When a later
 * worker has waited for the slot's event (stk_gpu_batch_ready), the
 * elapsed device times are added to the pipe's totals
 * (stk_gpu_pipe_timing; stk_loader_device_timing).
 *
 * FORMAT stages each row as its head: the CPU runs the spec into uint8
 * HWC (a shallow copy of the image plan with that output format), the GPU
 * runs STK_K_OUT. COPY stages the finished rows in pinned memory and
 * copies the batch.
 */
#include "gpu/stage.h"

#include "core/error.h"
#include "ops/image_plan_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stk_gpu_pipe {
    stk_gpu *g;               /* borrowed */
    const stk_plan *plan;     /* borrowed */
    const stk_imgplan *ip;    /* the plan's image plan (NULL: fixed-shape) */
    stk_imgplan u8plan;       /* FORMAT: *ip writing uint8 HWC; borrows ip's parts */
    stk_gpu_mode mode;
    char reason[1280];
    uint32_t rows;            /* output rows per batch */
    size_t sample_bytes;      /* of the loader's output rows */
    int32_t out_w, out_h, nc; /* the head entering STK_K_OUT (= the output's) */
    size_t head_bytes;        /* out_w * out_h * nc */
    size_t rec_bytes;         /* the record array, 64-aligned */
    size_t stage_cap, work_cap;
    stk_gpu_fmt fmt;
    stk_gpu_jdec *jdec;       /* decoder nvjpeg (owned); NULL: libjpeg-turbo */
    uint32_t jshare;          /* of 65536 JPEG rows, those offered to jdec
                                 ($STOKER_NVJPEG_SHARE, 0-1; default all) */
    int fused;                /* AUGMENT: STK_K_VOUT for batches without a
                                 contrast step ($STOKER_GPU_KERNELS) */
    pthread_mutex_t tmu;      /* guards `timing` */
    stk_device_timing timing; /* totals of the batches timed so far */
};

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

const char *stk_gpu_mode_name(stk_gpu_mode m)
{
    return m == STK_GPU_AUGMENT ? "gpu" : m == STK_GPU_FORMAT ? "format" : "copy";
}

stk_gpu_mode stk_gpu_pipe_mode(const stk_gpu_pipe *p) { return p->mode; }
const char *stk_gpu_pipe_reason(const stk_gpu_pipe *p) { return p->reason; }

/* A float op (op.h) the GPU's colour kernels run: grayscale ("gray"). */
static int gpu_gray(const stk_tail_op *t)
{
    const char *kn = t->kind == T_FLOAT ? t->lut->fl->gpu_kernel : NULL;
    return kn && !strcmp(kn, "gray");
}

static const char *tail_name(const stk_tail_op *t)
{
    switch (t->kind) {
    case T_ROTATE: return "rotate";
    case T_AFFINE: return "random_affine";
    case T_FLOAT: return t->lut->syntax.name;
    case T_APPLY: return "random_apply";
    case T_POLICY: return "an augmentation policy";
    case T_USER: return "a user-defined op";
    default: return "an op";
    }
}

/* Why `ip` cannot run on the GPU (NULL: it can); *format_ok: whether its
 * last stage is uint8 (FORMAT possible). */
static const char *augment_blocker(const stk_imgplan *ip, int host_fields, int *format_ok)
{
    *format_ok = 0;
    if (!ip)
        return "the spec runs as a fixed-shape plan (raw images of one size), which has no GPU "
               "kernels";
    if (host_fields || ip->spatial)
        return "fields moved with the image (masks, boxes) are transformed on the CPU";
    if (ip->nerase)
        return "random_erasing has no GPU kernel";
    int float_tail = 0, njitter = 0, ngray = 0;
    const char *blocker = NULL;
    for (int k = 0; k < ip->ntail; k++) {
        int kind = ip->tail[k].kind, gray = gpu_gray(&ip->tail[k]);
        if (kind == T_JITTER)
            njitter++;
        else if (gray)
            ngray++;
        if (kind == T_JITTER || kind == T_FLOAT || kind == T_ROTATE || kind == T_AFFINE ||
            kind == T_APPLY)
            float_tail = 1;
        if (!blocker && kind != T_HFLIP && kind != T_VFLIP && kind != T_LUT && kind != T_JITTER &&
            !gray)
            blocker = tail_name(&ip->tail[k]);
    }
    *format_ok = !float_tail;
    if (blocker)
        return blocker;
    if (ip->nuser)
        return "a user-defined op";
    if (ip->has_policy)
        return "an augmentation policy";
    if (ip->fmt.nc != ip->nc || ip->out_w != ip->head_w || ip->out_h != ip->head_h ||
        (ip->nc != 1 && ip->nc != 3))
        return "the image changes size or channels after its resample";
    if (njitter * 4 + ngray > STK_GPU_MAX_STEPS || njitter + 1 > STK_GPU_MAX_SEGS)
        return "more colour steps than the GPU path takes";
    return NULL;
}

int stk_gpu_pipe_create(stk_gpu *g, const stk_plan *plan, const char *spec,
                        stk_placement placement, stk_decoder decoder, int host_fields,
                        uint32_t rows, stk_gpu_pipe **out)
{
    *out = NULL;
    if ((unsigned)placement > STK_PLACE_GPU)
        return stk_fail(STK_EINVAL, "stk_device_options: placement %d is not one of "
                                    "STK_PLACE_AUTO, STK_PLACE_CPU, STK_PLACE_GPU",
                        (int)placement);
    stk_gpu_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory");
    p->g = g;
    p->plan = plan;
    p->ip = stk_plan_image(plan);
    p->rows = rows;
    int64_t shape[3];
    stk_dtype dtype;
    stk_layout layout;
    stk_plan_output(plan, shape, &dtype, &layout, &p->sample_bytes);
    int format_ok = 0;
    const char *blocker = augment_blocker(p->ip, host_fields, &format_ok);
    if (host_fields)
        format_ok = 0;
    if (p->ip && p->ip->nerase)
        format_ok = 0;
    if (placement == STK_PLACE_GPU && blocker) {
        stk_fail(STK_EINVAL, "placement gpu: %s (spec \"%s\"); use placement auto or cpu", blocker,
                 spec ? spec : "");
        free(p);
        return STK_EINVAL;
    }
    const char *kernels = getenv("STOKER_GPU_KERNELS");
    if (kernels && *kernels && strcmp(kernels, "fused") != 0 && strcmp(kernels, "per-op") != 0) {
        free(p);
        return stk_fail(STK_EINVAL, "STOKER_GPU_KERNELS=%s: expected fused or per-op", kernels);
    }
    if (placement != STK_PLACE_CPU && !blocker) {
        p->mode = STK_GPU_AUGMENT;
        p->fused = !(kernels && strcmp(kernels, "per-op") == 0);
        snprintf(p->reason, sizeof p->reason, "placement %s: the resample, tables, colour steps "
                 "and output format run on the GPU (kernels %s)",
                 placement == STK_PLACE_GPU ? "gpu" : "auto", p->fused ? "fused" : "per op");
    } else if (p->ip && format_ok) {
        p->mode = STK_GPU_FORMAT;
        snprintf(p->reason, sizeof p->reason, "%s%s; uint8 HWC is copied and the output format "
                 "runs on the GPU",
                 placement == STK_PLACE_CPU ? "placement cpu" : "",
                 placement == STK_PLACE_CPU ? "" : blocker);
    } else {
        p->mode = STK_GPU_COPY;
        snprintf(p->reason, sizeof p->reason, "%s; the finished batch is copied",
                 placement == STK_PLACE_CPU && !blocker
                     ? "placement cpu and the spec ends in floats"
                     : blocker ? blocker : "placement cpu");
    }
    if (p->mode != STK_GPU_COPY) {
        const stk_imgplan *ip = p->ip;
        p->out_w = (int32_t)ip->out_w;
        p->out_h = (int32_t)ip->out_h;
        p->nc = ip->fmt.nc;
        p->head_bytes = (size_t)p->out_w * (size_t)p->out_h * (size_t)p->nc;
        const stk_outfmt *o = &ip->fmt;
        p->fmt.dtype = (int32_t)o->dtype;
        p->fmt.layout = (int32_t)o->layout;
        p->fmt.nc = o->nc;
        p->fmt.width = o->width;
        p->fmt.height = o->height;
        for (int c = 0; c < 3; c++) {
            p->fmt.scale[c] = o->scale[c];
            p->fmt.bias[c] = o->bias[c];
            p->fmt.fscale[c] = o->fscale[c];
            p->fmt.fbias[c] = o->fbias[c];
        }
        if (p->mode == STK_GPU_FORMAT) {
            p->u8plan = *ip;
            p->u8plan.fmt.dtype = STK_U8;
            p->u8plan.fmt.layout = STK_HWC;
            p->u8plan.sample_bytes = p->head_bytes;
        }
        p->rec_bytes = al64((size_t)rows * sizeof(stk_gpu_sample));
        size_t hb = al64(p->head_bytes);
        /* Per row: a head always; AUGMENT: room for a region twice the
         * head's size and its two tables, and device-only tmp + head. */
        size_t per_stage = p->mode == STK_GPU_AUGMENT ? 3 * hb + 65536 : hb;
        p->stage_cap = (size_t)rows * per_stage;
        /* decoder nvjpeg: the decoded regions live on the device too (a
         * region at its DCT scale is up to ~4 heads; the horizontal pass's
         * output up to 2) */
        p->work_cap = p->mode != STK_GPU_AUGMENT ? 64
                      : decoder == STK_DECODER_NVJPEG ? (size_t)rows * 10 * hb
                                                      : (size_t)rows * 4 * hb;
    }
    if (decoder == STK_DECODER_NVJPEG) {
        int rc;
        if (p->mode != STK_GPU_AUGMENT) {
            rc = stk_fail(STK_EINVAL, "decoder nvjpeg decodes for the GPU's augmentation, which "
                          "this loader does not run (%s); use placement gpu with a spec the GPU "
                          "takes, or decoder cpu", p->reason);
            free(p);
            return rc;
        }
        if (p->nc != 3) {
            rc = stk_fail(STK_EINVAL, "decoder nvjpeg: the pipeline has %d channels (JPEGs "
                          "decode to RGB)", p->nc);
            free(p);
            return rc;
        }
        if ((rc = stk_gpu_jdec_open(g, &p->jdec)) < 0) {
            free(p);
            return rc;
        }
        p->jshare = 65536;
        const char *share = getenv("STOKER_NVJPEG_SHARE");
        if (share && *share) {
            char *end;
            double f = strtod(share, &end);
            if (*end || !(f >= 0.0 && f <= 1.0)) {
                stk_gpu_jdec_close(p->jdec);
                free(p);
                return stk_fail(STK_EINVAL, "STOKER_NVJPEG_SHARE=%s: expected a fraction "
                                "from 0 to 1", share);
            }
            p->jshare = (uint32_t)(f * 65536.0 + 0.5);
        }
        size_t at = strlen(p->reason);
        snprintf(p->reason + at, sizeof p->reason - at, "; JPEGs%s: %s",
                 p->jshare < 65536 ? " (a share)" : "", stk_gpu_jdec_name(p->jdec));
    }
    pthread_mutex_init(&p->tmu, NULL);
    *out = p;
    return 0;
}

void stk_gpu_pipe_free(stk_gpu_pipe *p)
{
    if (!p)
        return;
    stk_gpu_jdec_close(p->jdec);
    pthread_mutex_destroy(&p->tmu);
    free(p);
}

void stk_gpu_pipe_timing(stk_gpu_pipe *p, stk_device_timing *t)
{
    pthread_mutex_lock(&p->tmu);
    *t = p->timing;
    pthread_mutex_unlock(&p->tmu);
}

/* Add a finished batch's timed work to the pipe's totals (its event has
 * completed, so every event recorded before it has). Errors are not the
 * batch's: a pair that cannot be read is left out. */
static void collect_timing(stk_gpu_pipe *p, stk_gpu_batch *b)
{
    pthread_mutex_lock(&b->mu);
    int kernels = b->timed_kernels, decode = b->timed_decode;
    uint32_t launches = b->launches;
    int fused = b->fused_used;
    b->timed_kernels = b->timed_decode = 0;
    pthread_mutex_unlock(&b->mu);
    double ks = 0, ds = 0;
    if (kernels && stk_gpu_event_elapsed(p->g, b->t_kernels[0], b->t_kernels[1], &ks) < 0)
        kernels = 0;
    if (decode && stk_gpu_event_elapsed(p->g, b->t_decode[0], b->t_decode[1], &ds) < 0)
        decode = 0;
    if (!kernels && !decode)
        return;
    pthread_mutex_lock(&p->tmu);
    if (kernels) {
        p->timing.batches++;
        p->timing.launches += launches;
        p->timing.fused_batches += (uint64_t)fused;
        p->timing.kernel_s += ks;
    }
    if (decode) {
        p->timing.decode_batches++;
        p->timing.decode_s += ds;
    }
    pthread_mutex_unlock(&p->tmu);
}

/* ---------------------------------------------------------------------- */
/* Batches                                                                 */
/* ---------------------------------------------------------------------- */

void stk_gpu_batch_free(stk_gpu_pipe *p, stk_gpu_batch *b)
{
    if (!b->host && !b->stream && !b->d_out)
        return;
    if (b->in_flight || b->release_pending)
        stk_gpu_stream_sync(p->g, b->stream); /* nothing may still read or write them */
    stk_gpu_host_free(p->g, b->host);
    if (b->d_stage)
        stk_gpu_dev_free(p->g, b->d_stage);
    if (b->d_work)
        stk_gpu_dev_free(p->g, b->d_work);
    if (b->d_rowsum)
        stk_gpu_dev_free(p->g, b->d_rowsum);
    if (b->d_out)
        stk_gpu_dev_free(p->g, b->d_out);
    if (b->event)
        stk_gpu_event_destroy(p->g, b->event);
    if (b->release_event)
        stk_gpu_event_destroy(p->g, b->release_event);
    for (int i = 0; i < 2; i++) {
        if (b->t_kernels[i])
            stk_gpu_event_destroy(p->g, b->t_kernels[i]);
        if (b->t_decode[i])
            stk_gpu_event_destroy(p->g, b->t_decode[i]);
    }
    if (b->stream)
        stk_gpu_stream_destroy(p->g, b->stream);
    if (b->jstate)
        stk_gpu_jstate_free(p->jdec, b->jstate);
    free(b->jpeg_items);
    free(b->jpeg_row);
    free(b->jpeg_batch);
    free(b->jpeg_batch_row);
    free(b->jpeg_bad);
    free(b->jpeg_failed);
    pthread_mutex_destroy(&b->mu);
    memset(b, 0, sizeof *b);
}

int stk_gpu_batch_init(stk_gpu_pipe *p, stk_gpu_batch *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    stk_gpu *g = p->g;
    size_t out_bytes = (size_t)p->rows * p->sample_bytes;
    b->host_bytes = p->mode == STK_GPU_COPY ? out_bytes : p->rec_bytes + p->stage_cap;
    int rc;
    if ((rc = stk_gpu_host_alloc(g, b->host_bytes, (void **)&b->host)) < 0 ||
        (rc = stk_gpu_dev_alloc(g, out_bytes, &b->d_out)) < 0 ||
        (rc = stk_gpu_stream_create(g, &b->stream)) < 0 ||
        (rc = stk_gpu_event_create(g, &b->event)) < 0 ||
        (rc = stk_gpu_event_create(g, &b->release_event)) < 0)
        goto fail;
    for (int i = 0; i < 2 && p->mode != STK_GPU_COPY; i++)
        if ((rc = stk_gpu_event_create_timed(g, &b->t_kernels[i])) < 0 ||
            (p->jdec && (rc = stk_gpu_event_create_timed(g, &b->t_decode[i])) < 0))
            goto fail;
    if (p->mode != STK_GPU_COPY &&
        ((rc = stk_gpu_dev_alloc(g, b->host_bytes, &b->d_stage)) < 0 ||
         (rc = stk_gpu_dev_alloc(g, p->work_cap, &b->d_work)) < 0 ||
         (rc = stk_gpu_dev_alloc(g, (size_t)p->rows * (size_t)p->out_h * sizeof(double),
                                 &b->d_rowsum)) < 0))
        goto fail;
    if (p->jdec) {
        if ((rc = stk_gpu_jstate_create(p->jdec, &b->jstate)) < 0)
            goto fail;
        b->jpeg_items = calloc(p->rows, sizeof *b->jpeg_items);
        b->jpeg_row = calloc(p->rows, 1);
        b->jpeg_batch = calloc(p->rows, sizeof *b->jpeg_batch);
        b->jpeg_batch_row = calloc(p->rows, sizeof *b->jpeg_batch_row);
        b->jpeg_bad = calloc(p->rows, 1);
        b->jpeg_failed = calloc(p->rows, 1);
        if (!b->jpeg_items || !b->jpeg_row || !b->jpeg_batch || !b->jpeg_batch_row ||
            !b->jpeg_bad || !b->jpeg_failed) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto fail;
        }
    }
    return 0;
fail:
    stk_gpu_batch_free(p, b);
    return rc;
}

int stk_gpu_batch_ready(stk_gpu_pipe *p, stk_gpu_batch *b)
{
    /* Idempotent: an event already complete returns at once, and several
     * workers may wait on it together. */
    if (!b->in_flight)
        return 0;
    int rc = stk_gpu_event_sync(p->g, b->event);
    if (rc == 0)
        collect_timing(p, b);
    return rc;
}

void stk_gpu_batch_begin(stk_gpu_pipe *p, stk_gpu_batch *b)
{
    pthread_mutex_lock(&b->mu);
    b->stage_used = b->work_used = 0;
    b->unstaged = p->rows;
    b->fallbacks = 0;
    b->jpeg_cpu = 0;
    pthread_mutex_unlock(&b->mu);
}

/* Take `stage` bytes of the stage arena and `work` of the work arena for
 * a region record, keeping a head's room for every other unstaged row;
 * with head_only, a head's room (always there). Offsets into each arena
 * (the stage one past the record array). 0, or -1 when a region does not
 * fit. */
static int arena_take(stk_gpu_pipe *p, stk_gpu_batch *b, int head_only, size_t stage,
                      size_t work, size_t *stage_off, size_t *work_off)
{
    size_t hb = al64(p->head_bytes);
    int ok;
    pthread_mutex_lock(&b->mu);
    size_t keep = (size_t)(b->unstaged ? b->unstaged - 1 : 0) * hb;
    if (head_only) {
        stage = hb;
        work = 0;
        ok = 1;
    } else {
        ok = stage <= p->stage_cap - b->stage_used && keep <= p->stage_cap - b->stage_used - stage &&
             work <= p->work_cap - b->work_used;
    }
    if (ok) {
        *stage_off = p->rec_bytes + b->stage_used;
        *work_off = b->work_used;
        b->stage_used += stage;
        b->work_used += work;
        if (b->unstaged)
            b->unstaged--;
    }
    pthread_mutex_unlock(&b->mu);
    return ok ? 0 : -1;
}

static stk_gpu_sample *record(stk_gpu_batch *b, uint32_t row)
{
    return (stk_gpu_sample *)b->host + row;
}

void stk_gpu_stage_skip(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t row)
{
    (void)p;
    stk_gpu_sample *sm = record(b, row);
    memset(sm, 0, sizeof *sm);
    sm->kind = STK_GS_SKIP;
    if (b->jpeg_row)
        b->jpeg_row[row] = 0;
}

/* Fill the colour steps of a record from the draws (segments start at
 * each contrast step, as image_run.c's float tail). */
static int set_steps(const stk_imgplan *ip, const stk_draws *dr, stk_gpu_sample *sm)
{
    if (dr->nsteps > STK_GPU_MAX_STEPS)
        return stk_fail(STK_EINVAL, "GPU pipeline: %d colour steps drawn (at most %d)",
                        dr->nsteps, STK_GPU_MAX_STEPS);
    sm->nsteps = dr->nsteps;
    sm->nseg = 1;
    sm->seg[0] = 0;
    for (int k = 0; k < dr->nsteps; k++) {
        const stk_draw_step *st = &dr->steps[k];
        int gray = st->kind == S_FOP && gpu_gray(&ip->tail[st->tail]);
        if (st->kind != S_BRIGHT && st->kind != S_CONTRAST && st->kind != S_SAT &&
            st->kind != S_HUE && !gray)
            return stk_fail(STK_EINVAL, "GPU pipeline: colour step %d has no kernel", st->kind);
        sm->steps[k].kind = gray ? STK_GST_GRAY : st->kind;
        sm->steps[k].f = st->f;
        sm->steps[k].g = st->g;
        if (st->kind == S_CONTRAST) { /* (at k = 0 too: segment 0 is then empty) */
            if (sm->nseg >= STK_GPU_MAX_SEGS)
                return stk_fail(STK_EINVAL, "GPU pipeline: too many contrast steps");
            sm->seg[sm->nseg++] = k;
        }
    }
    sm->seg[sm->nseg] = dr->nsteps;
    return 0;
}

/* The two resample passes of one region on the CPU, through the kernels'
 * own per-element functions, into `head` (the fallback for a region too
 * large for the arena). */
static int head_on_cpu(stk_gpu_pipe *p, const stk_gpu_sample *proto, const uint8_t *region,
                       const stk_img_prepared *pr, const stk_draws *dr, uint8_t *head)
{
    size_t rb = (size_t)proto->rows * (size_t)proto->cols * (size_t)p->nc;
    size_t xb = stk_rs_axis_bytes(&pr->xp, 0), yb = stk_rs_axis_bytes(&pr->yp, 0);
    size_t tb = (size_t)proto->rows * (size_t)p->out_w * (size_t)p->nc;
    size_t total = al64(sizeof(stk_gpu_sample)) + al64(rb) + al64(xb) + al64(yb) + al64(tb) +
                   al64(p->head_bytes);
    uint8_t *mem = stk_aligned_alloc(total);
    if (!mem)
        return stk_fail(STK_ENOMEM, "out of memory staging a %dx%d region", proto->cols,
                        proto->rows);
    stk_gpu_sample *sm = (stk_gpu_sample *)mem;
    *sm = *proto;
    sm->kind = STK_GS_REGION;
    size_t at = al64(sizeof *sm);
    sm->region = at;
    memcpy(mem + at, region, rb);
    at += al64(rb);
    stk_rs_axis ax, ay;
    stk_rs_build(&pr->xp, pr->xf, dr->hflip, 0, mem + at, &ax);
    sm->xbounds = (uint64_t)((uint8_t *)ax.bounds - mem);
    sm->xcoef = (uint64_t)((uint8_t *)ax.coef - mem);
    sm->xtaps = ax.taps;
    at += al64(xb);
    stk_rs_build(&pr->yp, pr->yf, dr->vflip, 0, mem + at, &ay);
    sm->ybounds = (uint64_t)((uint8_t *)ay.bounds - mem);
    sm->ycoef = (uint64_t)((uint8_t *)ay.coef - mem);
    sm->ytaps = ay.taps;
    at += al64(yb);
    sm->tmp = at;
    at += al64(tb);
    sm->head = at;
    stk_gpu_args a;
    memset(&a, 0, sizeof a);
    a.samples = (uint64_t)(uintptr_t)sm;
    a.stage = (uint64_t)(uintptr_t)mem;
    a.work = (uint64_t)(uintptr_t)mem;
    a.n = 1;
    a.nc = p->nc;
    a.out_w = p->out_w;
    a.out_h = p->out_h;
    for (int32_t r = 0; r < sm->rows; r++)
        for (int32_t x = 0; x < p->out_w; x++)
            stk_gb_hpass(&a, (uint32_t)x, (uint32_t)r, 0);
    for (int32_t y = 0; y < p->out_h; y++)
        for (int32_t x = 0; x < p->out_w; x++)
            stk_gb_vpass(&a, (uint32_t)x, (uint32_t)y, 0);
    memcpy(head, mem + sm->head, p->head_bytes);
    stk_aligned_free(mem);
    return 0;
}

/* Decoder nvjpeg: stage row `row` as its JPEG's bytes (the GPU decodes the
 * region into the work arena in stk_gpu_batch_decode) plus both tables. 1: staged; 0:
 * it does not fit the arenas (the caller decodes on the CPU). */
static int stage_jpeg(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t row, const stk_plan_input *in,
                      const stk_draws *dr, const stk_img_prepared *pr, const stk_img_jpeg *jr)
{
    stk_gpu_sample proto;
    int rc;
    memset(&proto, 0, sizeof proto);
    proto.rows = (int32_t)jr->rows;
    proto.cols = (int32_t)jr->cols;
    proto.need_h = pr->need_h;
    proto.need_v = pr->need_v;
    proto.vflip = dr->vflip;
    proto.has_lut = dr->has_lut[1];
    if (dr->has_lut[1])
        memcpy(proto.lut, dr->lut[1], 256);
    if ((rc = set_steps(p->ip, dr, &proto)) < 0)
        return rc;
    size_t xb = stk_rs_axis_bytes(&pr->xp, 0), yb = stk_rs_axis_bytes(&pr->yp, 0);
    if (!xb || !yb)
        return stk_fail(STK_EDATA, "image geometry out of range");
    /* Where the decoder writes (the region, an aligned region around it,
     * or the whole image) and where the row's region lands in that. */
    stk_gpu_jitem *it = &b->jpeg_items[row];
    memset(it, 0, sizeof *it);
    size_t dst_off, row_off;
    size_t rb = stk_gpu_jdec_layout(p->jdec, jr->region, jr->d, jr->info.width, jr->info.height,
                                    jr->cols, jr->rows, it, &dst_off, &row_off);
    if (!rb)
        return 0;
    size_t tb = proto.need_h ? (size_t)proto.rows * (size_t)p->out_w * 3 : 0;
    size_t stage = al64(in->encoded_size) + al64(xb) + al64(yb);
    size_t work = al64(rb) + al64(tb) + al64(p->head_bytes);
    size_t soff, woff;
    if (arena_take(p, b, 0, stage, work, &soff, &woff) < 0)
        return 0;
    uint8_t *base = b->host;
    memcpy(base + soff, in->encoded, in->encoded_size);
    size_t at = soff + al64(in->encoded_size);
    stk_rs_axis ax, ay;
    stk_rs_build(&pr->xp, pr->xf, dr->hflip, 0, base + at, &ax);
    proto.xbounds = (uint64_t)((uint8_t *)ax.bounds - base);
    proto.xcoef = (uint64_t)((uint8_t *)ax.coef - base);
    proto.xtaps = ax.taps;
    at += al64(xb);
    stk_rs_build(&pr->yp, pr->yf, dr->vflip, 0, base + at, &ay);
    proto.ybounds = (uint64_t)((uint8_t *)ay.bounds - base);
    proto.ycoef = (uint64_t)((uint8_t *)ay.coef - base);
    proto.ytaps = ay.taps;
    proto.kind = STK_GS_REGION;
    proto.region_dev = 1;
    proto.region_pitch = (int32_t)it->pitch;
    proto.region = woff + row_off;
    proto.tmp = woff + al64(rb);
    proto.head = proto.tmp + al64(tb);
    *record(b, row) = proto;
    it->data = base + soff;
    it->size = in->encoded_size;
    it->full = b->d_work + woff;
    it->dst = it->full + dst_off;
    b->jpeg_row[row] = 1;
    return 1;
}

int stk_gpu_stage_row(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t row, const stk_plan_input *in,
                      stk_rng *rng, stk_scratch *scratch)
{
    stk_gpu_sample *sm = record(b, row);
    size_t soff = 0, woff = 0;
    int rc;
    if (p->mode == STK_GPU_FORMAT) {
        memset(sm, 0, sizeof *sm);
        sm->kind = STK_GS_SKIP; /* until the row is done */
        arena_take(p, b, 1, 0, 0, &soff, &woff);
        if ((rc = stk_imgplan_run(&p->u8plan, in, rng, b->host + soff, scratch, NULL, 1)) < 0)
            return rc;
        sm->head = soff;
        sm->kind = STK_GS_HEAD;
        return 0;
    }
    stk_draws dr;
    stk_img_prepared pr;
    memset(sm, 0, sizeof *sm);
    sm->kind = STK_GS_SKIP;
    if (p->jdec) {
        b->jpeg_row[row] = 0;
        if (in->encoded) {
            /* The GPU decodes it if it can; else the rng is rewound and
             * the row takes the CPU path below, draws and all. */
            stk_rng start = *rng;
            stk_img_jpeg jr;
            /* a fixed share: the rows whose stream key hashes below it */
            uint32_t pick = (start.key[0] ^ start.ctr[0] * 0x9E3779B1u ^ start.ctr[1] *
                             0x85EBCA77u) * 0xC2B2AE3Du >> 16;
            rc = stk_imgplan_prepare_jpeg(p->ip, in, rng, scratch,
                                          stk_gpu_jdec_max_scale(p->jdec), &dr, &pr, &jr);
            if (rc < 0)
                return rc;
            if (rc == 1 && pick < p->jshare &&
                stk_gpu_jdec_accepts(p->jdec, &jr.info, in->encoded,
                                                in->encoded_size) &&
                (rc = stage_jpeg(p, b, row, in, &dr, &pr, &jr)) != 0)
                return rc < 0 ? rc : 0;
            *rng = start;
            pthread_mutex_lock(&b->mu);
            b->jpeg_cpu++;
            pthread_mutex_unlock(&b->mu);
        }
    }
    if ((rc = stk_imgplan_prepare(p->ip, in, rng, scratch, &dr, &pr)) < 0)
        return rc;
    stk_gpu_sample proto;
    memset(&proto, 0, sizeof proto);
    proto.rows = (int32_t)pr.view.height;
    proto.cols = (int32_t)pr.view.width;
    proto.need_h = pr.need_h;
    proto.need_v = pr.need_v;
    proto.vflip = dr.vflip;
    proto.has_lut = dr.has_lut[1];
    if (dr.has_lut[1])
        memcpy(proto.lut, dr.lut[1], 256);
    if ((rc = set_steps(p->ip, &dr, &proto)) < 0)
        return rc;
    int nc = p->nc;
    size_t rowb = (size_t)proto.cols * (size_t)nc;
    size_t rb = rowb * (size_t)proto.rows;
    size_t xb = stk_rs_axis_bytes(&pr.xp, 0), yb = stk_rs_axis_bytes(&pr.yp, 0);
    if (!xb || !yb)
        return stk_fail(STK_EDATA, "image geometry out of range");
    size_t tb = proto.need_h ? (size_t)proto.rows * (size_t)p->out_w * (size_t)nc : 0;
    size_t stage = al64(rb) + al64(xb) + al64(yb), work = al64(tb) + al64(p->head_bytes);
    if (arena_take(p, b, 0, stage, work, &soff, &woff) == 0) {
        uint8_t *base = b->host;
        proto.kind = STK_GS_REGION;
        proto.region = soff;
        for (int32_t r = 0; r < proto.rows; r++)
            memcpy(base + soff + (size_t)r * rowb, pr.view.pixels + (ptrdiff_t)r * pr.view.row_stride,
                   rowb);
        size_t at = soff + al64(rb);
        stk_rs_axis ax, ay;
        stk_rs_build(&pr.xp, pr.xf, dr.hflip, 0, base + at, &ax);
        proto.xbounds = (uint64_t)((uint8_t *)ax.bounds - base);
        proto.xcoef = (uint64_t)((uint8_t *)ax.coef - base);
        proto.xtaps = ax.taps;
        at += al64(xb);
        stk_rs_build(&pr.yp, pr.yf, dr.vflip, 0, base + at, &ay);
        proto.ybounds = (uint64_t)((uint8_t *)ay.bounds - base);
        proto.ycoef = (uint64_t)((uint8_t *)ay.coef - base);
        proto.ytaps = ay.taps;
        proto.tmp = woff;
        proto.head = woff + al64(tb);
        *sm = proto;
        return 0;
    }
    /* The region does not fit: resample here, stage the head. */
    arena_take(p, b, 1, 0, 0, &soff, &woff);
    uint8_t *tight = stk_aligned_alloc(rb ? rb : 1);
    if (!tight)
        return stk_fail(STK_ENOMEM, "out of memory staging a %dx%d region", proto.cols,
                        proto.rows);
    for (int32_t r = 0; r < proto.rows; r++)
        memcpy(tight + (size_t)r * rowb, pr.view.pixels + (ptrdiff_t)r * pr.view.row_stride, rowb);
    rc = head_on_cpu(p, &proto, tight, &pr, &dr, b->host + soff);
    stk_aligned_free(tight);
    if (rc < 0)
        return rc;
    proto.kind = STK_GS_HEAD;
    proto.head = soff;
    proto.need_h = proto.need_v = 0;
    *sm = proto;
    pthread_mutex_lock(&b->mu);
    b->fallbacks++;
    pthread_mutex_unlock(&b->mu);
    return 0;
}

static int launch(stk_gpu_pipe *p, stk_gpu_batch *b, stk_kernel_id k, uint32_t gx, uint32_t gy,
                  uint32_t gz, const stk_gpu_args *a)
{
    uint32_t grid[3] = {gx ? gx : 1, gy ? gy : 1, gz ? gz : 1};
    uint32_t block[3] = {STK_GPU_BLOCK, 1, 1};
    b->launches++;
    return stk_gpu_launch(p->g, k, grid, block, a, sizeof *a, b->stream);
}

int stk_gpu_batch_decode(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t staged, int keep_going,
                         uint32_t *failed_row)
{
    *failed_row = UINT32_MAX;
    if (!p->jdec)
        return 0;
    uint32_t n = staged < p->rows ? staged : p->rows, nj = 0, cpu = 0, failed;
    memset(b->jpeg_failed, 0, p->rows);
    for (uint32_t i = 0; i < n; i++)
        if (b->jpeg_row[i] && record(b, i)->kind == STK_GS_REGION) {
            b->jpeg_batch[nj] = b->jpeg_items[i];
            b->jpeg_batch_row[nj++] = i;
        }
    int rc = nj ? stk_gpu_event_record(p->g, b->t_decode[0], b->stream) : 0;
    if (rc < 0)
        return rc;
    rc = stk_gpu_jdec_decode(p->jdec, b->jstate, b->jpeg_batch, b->jpeg_batch_row, nj,
                             b->stream, keep_going, b->jpeg_bad, &failed, &cpu);
    if (rc == 0 && nj && (rc = stk_gpu_event_record(p->g, b->t_decode[1], b->stream)) == 0) {
        pthread_mutex_lock(&b->mu);
        b->timed_decode = 1;
        pthread_mutex_unlock(&b->mu);
    }
    pthread_mutex_lock(&b->mu);
    b->jpeg_cpu += cpu;
    pthread_mutex_unlock(&b->mu);
    if (rc < 0) {
        if (failed != UINT32_MAX)
            *failed_row = b->jpeg_batch_row[failed];
        stk_gpu_stream_sync(p->g, b->stream); /* nothing queued reads the staging after this */
        return rc;
    }
    for (uint32_t k = 0; k < nj; k++)
        if (b->jpeg_bad[k]) {
            uint32_t row = b->jpeg_batch_row[k];
            b->jpeg_failed[row] = 1;
            stk_gpu_stage_skip(p, b, row);
        }
    /* What nvJPEG queued reads the pinned staging: the slot's event covers
     * it as it covers the copy (submit records it again after the kernels). */
    if ((rc = stk_gpu_event_record(p->g, b->event, b->stream)) < 0)
        return rc;
    b->in_flight = 1;
    return 0;
}

int stk_gpu_row_failed(const stk_gpu_batch *b, uint32_t row)
{
    return b->jpeg_failed && b->jpeg_failed[row];
}

int stk_gpu_batch_submit(stk_gpu_pipe *p, stk_gpu_batch *b, uint32_t staged, uint32_t rows)
{
    stk_gpu *g = p->g;
    int rc;
    if (b->release_pending) { /* the consumer's reads of d_out come first */
        if ((rc = stk_gpu_stream_wait_event(g, b->stream, b->release_event)) < 0)
            return rc;
        b->release_pending = 0;
    }
    if (p->mode == STK_GPU_COPY) {
        if (rows && (rc = stk_gpu_copy_h2d(g, b->d_out, b->host, (size_t)rows * p->sample_bytes,
                                           b->stream)) < 0)
            return rc;
    } else {
        uint32_t n = staged < p->rows ? staged : p->rows, kept = 0;
        int32_t max_rows = 0, max_seg = 1;
        for (uint32_t i = 0; i < n; i++) {
            stk_gpu_sample *sm = record(b, i);
            if (sm->kind == STK_GS_SKIP)
                continue;
            sm->out_row = (int32_t)kept++;
            if (sm->kind == STK_GS_REGION && sm->need_h && sm->rows > max_rows)
                max_rows = sm->rows;
            if (sm->nseg > max_seg)
                max_seg = sm->nseg;
        }
        if (kept != rows)
            return stk_fail(STK_EINVAL, "GPU pipeline: %u rows staged, %u expected", kept, rows);
        size_t used;
        pthread_mutex_lock(&b->mu);
        used = p->rec_bytes + b->stage_used;
        pthread_mutex_unlock(&b->mu);
        if ((rc = stk_gpu_copy_h2d(g, b->d_stage, b->host, used, b->stream)) < 0)
            return rc;
        stk_gpu_args a;
        memset(&a, 0, sizeof a);
        a.samples = b->d_stage;
        a.stage = b->d_stage;
        a.work = b->d_work;
        a.rowsum = b->d_rowsum;
        a.out = b->d_out;
        a.sample_bytes = p->sample_bytes;
        a.n = (int32_t)n;
        a.nc = p->nc;
        a.out_w = p->out_w;
        a.out_h = p->out_h;
        a.fmt = p->fmt;
        uint32_t gx = (uint32_t)((p->out_w + STK_GPU_BLOCK - 1) / STK_GPU_BLOCK);
        /* fused: no row waits for its head's mean (kernels.h) */
        int fused = p->mode == STK_GPU_AUGMENT && p->fused && max_seg == 1;
        b->launches = 0;
        if ((rc = stk_gpu_event_record(g, b->t_kernels[0], b->stream)) < 0)
            return rc;
        if (p->mode == STK_GPU_AUGMENT) {
            if (max_rows && (rc = launch(p, b, STK_K_HPASS, gx, (uint32_t)max_rows, n, &a)) < 0)
                return rc;
            if (!fused && (rc = launch(p, b, STK_K_VPASS, gx, (uint32_t)p->out_h, n, &a)) < 0)
                return rc;
            for (int32_t j = 0; j + 1 < max_seg; j++) {
                a.seg = j;
                uint32_t gy = (uint32_t)((p->out_h + STK_GPU_BLOCK - 1) / STK_GPU_BLOCK);
                if ((rc = launch(p, b, STK_K_ROWSUM, gy, 1, n, &a)) < 0 ||
                    (rc = launch(p, b, STK_K_IMGSUM, (n + STK_GPU_BLOCK - 1) / STK_GPU_BLOCK, 1,
                                 1, &a)) < 0)
                    return rc;
            }
            a.seg = 0;
        }
        if (rows && (rc = launch(p, b, fused ? STK_K_VOUT : STK_K_OUT, gx, (uint32_t)p->out_h, n,
                                 &a)) < 0)
            return rc;
        if ((rc = stk_gpu_event_record(g, b->t_kernels[1], b->stream)) < 0)
            return rc;
        pthread_mutex_lock(&b->mu);
        b->timed_kernels = 1;
        b->fused_used = fused;
        pthread_mutex_unlock(&b->mu);
    }
    if ((rc = stk_gpu_event_record(g, b->event, b->stream)) < 0)
        return rc;
    b->in_flight = 1;
    return 0;
}
