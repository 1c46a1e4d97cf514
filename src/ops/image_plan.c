/*
 * image_plan.c — the image pipeline: decode only what is needed, resample
 * it to the output size as Pillow would, then flips, rotation, colour
 * jitter, Normalize, dtype and layout, fused into as few passes as the ops
 * allow. This file compiles; the draws of a sample are image_draws.c, the
 * pixel work image_run.c, the types they share image_plan_impl.h.
 *
 * Compile splits a spec into three parts:
 *
 *   prefix  fixed-shape input only: the ops up to the last `pad`, run by
 *           the fixed-shape kernel into uint8 HWC (fixed_plan.c). Pads need a
 *           known image size, so variable input cannot have them.
 *   head    flips, crops and at most one resize or random_resized_crop, in
 *           any order. They compose into one affine map per axis: the
 *           output is the Pillow resample of a source rectangle (the
 *           "domain": windows are clamped to it) at `scale` source pixels per
 *           output pixel, starting `off` outputs into the resized grid, and
 *           possibly mirrored. `resize 256 | center_crop 224` is thus the
 *           224 central outputs of the full resize, evaluated directly;
 *           random_resized_crop is a crop (the domain) resized to its size.
 *   tail    flips, rotations, colour jitter, grayscale, Gaussian blur and
 *           random_apply groups of those after the head, then normalize,
 *           random_erasing (on the finished output) and to.
 *
 * Run, per sample (image_run.c; step 2 is image_draws.c):
 *
 *   1. size: stk_image_probe for encoded input (the header only), the view
 *      for raw input, the prefix's output otherwise;
 *   2. draws, in spec order (docs/pipeline.md lists them), giving the
 *      domain, scale and offset of each axis and the mirrorings. A flip
 *      after a rotation is moved before it by negating the angle (mirror o
 *      rotate(a) = rotate(-a) o mirror, exactly, on torchvision's centred
 *      grid), so every mirroring folds into the resample: the coefficient
 *      tables are built in reverse order, and the flip costs nothing. The
 *      uint8 point ops that apply (posterize, solarize: op.h) compose into
 *      two 256-entry tables, one for those before the resize, one for
 *      those after it;
 *   3. DCT scale: the largest d in {8, 4, 2, 1} with scale >= d on both axes
 *      (JPEG only), so the scaled decode never has fewer pixels than the
 *      output needs;
 *   4. the source rows and columns every resample window touches
 *      (stk_rs_range) — beyond the crop for `resize | center_crop`, whose
 *      windows reach past it — decoded at scale 1/d, or copied for raw
 *      input, into the start of the worker's scratch, where the table of
 *      the point ops before the resize is applied in place;
 *   5. horizontal pass over those rows into a uint8 buffer, then for each
 *      output row the vertical pass, giving a row of exactly the bytes
 *      Pillow's resize would produce (through the table of the point ops
 *      after the resize, when one applies), which is written out at once:
 *      without a float stage straight as v * scale + bias in the output
 *      dtype and layout (the fixed-shape kernel's formula); with colour
 *      jitter or rotation it is converted to float (ToTensor) and the tail
 *      runs in "segments". A segment ends where an op needs the whole image
 *      first: contrast needs the mean gray level of the image as it stands,
 *      rotation reads any pixel, a whole-image float op (op.h: the
 *      Gaussian blur reads the rows around it, perspective any pixel)
 *      starts one through its hooks; a row float op (grayscale) joins the
 *      segment it is in. Until then each row goes through the
 *      segment's ops while it is in L1; at a barrier rows are parked in a
 *      float image (and the gray sum accumulated), and the next segment
 *      reads them back. imagenet-train-extensive is thus 2 passes after the
 *      resample when contrast comes after another op, 1 otherwise.
 *      random_erasing then overwrites its rectangles of the finished
 *      sample in the output dtype.
 *
 * Memory: everything per sample lives in the caller's scratch, laid out as
 * [source pixels | slack | tables | row buffers | float images]. The scratch
 * only grows (keeping the decoded pixels when it must grow after decoding),
 * so after the first few samples nothing is allocated.
 *
 * Borders: torchvision's CenterCrop zero-pads an image smaller than the
 * crop. Before the resize the head works in source pixels, so a padding
 * center_crop just moves the domain past the source's edges (image_draws.c)
 * and every later flip, crop and resize composes as usual; step 4 then
 * decodes only the part inside the source (scale 1) and lays it into a
 * buffer whose border is 0 (or what the point ops after the pad made of
 * 0), which the windows read like any source pixel: the zeros Pillow's
 * resize sees on the padded image. A crop after the resize cannot pad at
 * run time (the size is known there, checked at compile). Images the crop
 * fits never take this path.
 *
 * Errors: undecodable input is the codec's STK_EDATA; an image over the
 * pixel limit becomes STK_EDATA too (one bad sample, skippable); a
 * random_crop that does not fit a variable-size image is STK_EDATA. Raw
 * input of the wrong shape for a fixed plan is STK_EINVAL.
 */
#include "ops/image_plan_impl.h"

#include "core/error.h"
#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Compile                                                                 */
/* ---------------------------------------------------------------------- */

static int is_image_op(stk_op_kind k)
{
    return k == STK_OP_RANDOM_RESIZED_CROP || k == STK_OP_RESIZE || k == STK_OP_ROTATE ||
           k == STK_OP_COLOR_JITTER || k == STK_OP_LUT || k == STK_OP_FLOAT ||
           k == STK_OP_RANDOM_ERASING || k == STK_OP_RANDOM_APPLY ||
           k == STK_OP_POLICY || k == STK_OP_AFFINE || k == STK_OP_BBOX_CROP ||
           k == STK_OP_USER;
}

int stk_imgplan_needed(const stk_spec *spec, uint32_t in_h, uint32_t in_w, uint32_t in_c)
{
    if (in_h == 0 && in_w == 0 && in_c == 0)
        return 1;
    for (int i = 0; i < spec->nops; i++)
        if (is_image_op(spec->ops[i].kind))
            return 1;
    return 0;
}

/* A rotate or affine stage's fill (pixel values, one or one per channel)
 * into t->fill in 0-1 units; a count that is neither is a spec error at
 * fill_col. */
static int tail_fill(const char *text, const uint8_t *fill, uint32_t nf, int fill_col, int nc,
                     stk_tail_op *t)
{
    if (nf != 1 && nf != (uint32_t)nc)
        return stk_spec_fail(text, fill_col,
                             "fill has %u values but the image has %d channel%s (give 1 value "
                             "or %d)",
                             nf, nc, nc == 1 ? "" : "s", nc);
    for (int c = 0; c < 3; c++)
        t->fill[c] = (float)fill[nf == 1 ? 0 : (c < nc ? c : 0)] / 255.0f;
    return 0;
}

static size_t dtype_size(stk_dtype dt) { return dt == STK_U8 ? 1 : dt == STK_F32 ? 4 : 2; }

int stk_imgplan_compile(const char *text, const stk_spec *spec, uint32_t in_h, uint32_t in_w,
                        uint32_t in_c, int spatial, stk_imgplan **out, uint32_t *out_h,
                        uint32_t *out_w, uint32_t *out_c, size_t *sample_bytes)
{
    int rc = 0;
    int variable = in_h == 0 && in_w == 0 && in_c == 0;
    stk_imgplan *ip = calloc(1, sizeof *ip);
    *out = NULL;
    if (!ip)
        return stk_fail(STK_ENOMEM, "pipeline plan: out of memory");
    ip->in_h = in_h;
    ip->in_w = in_w;
    ip->in_c = in_c;
    ip->spatial = spatial;

    int first_img = -1, last_pad = -1;
    for (int k = 0; k < spec->nops; k++) {
        const stk_spec_op *o = &spec->ops[k];
        if (is_image_op(o->kind) && first_img < 0)
            first_img = k;
        if (o->kind == STK_OP_PAD) {
            if (variable) {
                rc = stk_spec_fail(text, o->col,
                                   "pad needs images of one fixed size, and these vary; crop "
                                   "or resize them instead");
                goto fail;
            }
            if (first_img >= 0) {
                rc = stk_spec_fail(text, o->col,
                                   "pad after %s is not supported; pad before it",
                                   spec->ops[first_img].def->name);
                goto fail;
            }
            last_pad = k;
        }
    }
    ip->nc = variable ? 3 : (int)in_c;
    if (ip->nc != 1 && ip->nc != 3) {
        const stk_spec_op *o = &spec->ops[first_img >= 0 ? first_img : 0];
        rc = stk_spec_fail(text, o->col, "%s needs images with 1 or 3 channels, got %u",
                           o->def->name, in_c);
        goto fail;
    }
    int nc = ip->nc;

    /* Size entering the head, when known. */
    int known = !variable;
    int64_t kh = in_h, kw = in_w, short_s = 0;
    /* Masks and boxes replay the pads themselves (ops/spatial.c): the
     * prefix may hold nothing else then. */
    for (int k = 0; spatial && k <= last_pad; k++) {
        const stk_spec_op *o = &spec->ops[k];
        if (o->kind == STK_OP_DECODE)
            continue;
        if (o->kind != STK_OP_PAD) {
            rc = stk_spec_fail(text, o->col,
                               "%s before a pad is not supported with mask or box fields; "
                               "pad first",
                               o->def->name);
            goto fail;
        }
        stk_pad_step *ps = &ip->pads[ip->npads++];
        ps->left = o->u.pad.left;
        ps->top = o->u.pad.top;
        ps->right = o->u.pad.right;
        ps->bottom = o->u.pad.bottom;
        ps->mode = (int)o->u.pad.mode;
    }
    if (last_pad >= 0) {
        if ((rc = stk_fixplan_compile(text, spec, last_pad + 1, 1, in_h, in_w, in_c,
                                      &ip->prefix)) < 0)
            goto fail;
        int64_t shape[3];
        stk_fixplan_output(ip->prefix, shape, NULL, NULL, NULL);
        ip->pre_h = (uint32_t)shape[0];
        ip->pre_w = (uint32_t)shape[1];
        kh = shape[0];
        kw = shape[1];
    }

    int last_geo = -1;
    for (int k = last_pad + 1; k < spec->nops; k++) {
        stk_op_kind kd = spec->ops[k].kind;
        if (kd == STK_OP_RANDOM_CROP || kd == STK_OP_CENTER_CROP ||
            kd == STK_OP_RANDOM_RESIZED_CROP || kd == STK_OP_RESIZE || kd == STK_OP_BBOX_CROP)
            last_geo = k;
    }

    double mean[3] = {0, 0, 0}, stdv[3] = {1, 1, 1};
    int have_norm = 0, have_resize = 0, seen_color = 0, nrot = 0, last_geo_col = 1;
    int group_left = 0, group_col = 0, group_n = 0, erase_at = -1;
    const stk_spec_op *policy = NULL; /* the first augmentation policy */
    const stk_spec_op *moved = NULL;  /* the first float op that moves pixels */
    int naug = 0, nfop = 0;
    for (int k = last_pad + 1; k < spec->nops; k++) {
        const stk_spec_op *o = &spec->ops[k];
        /* random_erasing works on the output: only more of it, and `to`,
         * may follow. */
        if (erase_at >= 0 && o->kind != STK_OP_RANDOM_ERASING && o->kind != STK_OP_TO) {
            rc = stk_spec_fail(text, o->col,
                               "%s after random_erasing is not supported: random_erasing "
                               "erases the finished tensor, so it comes last (before 'to')",
                               o->def->name);
            goto fail;
        }
        /* random_apply's group: ops of the float tail only. */
        if (group_left > 0) {
            stk_op_kind kd = o->kind;
            int ok = kd == STK_OP_ROTATE || kd == STK_OP_COLOR_JITTER || kd == STK_OP_FLOAT ||
                     ((kd == STK_OP_HFLIP || kd == STK_OP_VFLIP || kd == STK_OP_LUT) &&
                      k > last_geo);
            if (!ok) {
                rc = stk_spec_fail(text, o->col,
                                   "random_apply cannot hold %s%s; it can hold rotate, "
                                   "color_jitter, the float ops (grayscale, gaussian_blur, "
                                   "...), and flips and point ops after the crops and resize",
                                   o->def->name,
                                   kd == STK_OP_HFLIP || kd == STK_OP_VFLIP || kd == STK_OP_LUT
                                       ? " before a crop or resize"
                                       : "");
                goto fail;
            }
            group_left--;
        }
        switch (o->kind) {
        case STK_OP_DECODE:
        case STK_OP_TO:
        case STK_OP_PAD: /* not reached: pads are in the prefix */
            break;
        case STK_OP_NORMALIZE: {
            uint32_t nm = o->u.normalize.nmean, ns = o->u.normalize.nstd;
            if (nm != 1 && nm != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.normalize.mean_col,
                                   "normalize has %u mean values but the image has %d "
                                   "channel%s (give 1 value or %d)",
                                   nm, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            if (ns != 1 && ns != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.normalize.std_col,
                                   "normalize has %u std values but the image has %d "
                                   "channel%s (give 1 value or %d)",
                                   ns, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            for (int c = 0; c < nc; c++) {
                mean[c] = o->u.normalize.mean[nm == 1 ? 0 : c];
                stdv[c] = o->u.normalize.std[ns == 1 ? 0 : c];
            }
            have_norm = 1;
            break;
        }
        case STK_OP_HFLIP:
        case STK_OP_VFLIP:
            if (k < last_geo) {
                stk_geo_op *g = &ip->geo[ip->ngeo++];
                g->kind = o->kind == STK_OP_HFLIP ? G_HFLIP : G_VFLIP;
                g->p = o->u.flip.p;
            } else {
                if (policy || moved) {
                    rc = stk_spec_fail(text, o->col,
                                       "%s after %s is not supported; flip before it",
                                       o->def->name, (policy ? policy : moved)->def->name);
                    goto fail;
                }
                stk_tail_op *t = &ip->tail[ip->ntail++];
                t->kind = o->kind == STK_OP_HFLIP ? T_HFLIP : T_VFLIP;
                t->p = o->u.flip.p;
            }
            break;
        case STK_OP_LUT: /* the parser keeps these before rotate and color_jitter */
            if (k < last_geo) {
                stk_geo_op *g = &ip->geo[ip->ngeo++];
                g->kind = G_LUT;
                g->lut = stk_op_desc_of(o);
                memcpy(g->arg, o->u.num.v, sizeof g->arg);
            } else {
                if (policy) {
                    rc = stk_spec_fail(text, o->col,
                                       "%s after %s is not supported; put it before",
                                       o->def->name, policy->def->name);
                    goto fail;
                }
                stk_tail_op *t = &ip->tail[ip->ntail++];
                t->kind = T_LUT;
                t->lut = stk_op_desc_of(o);
                memcpy(t->arg, o->u.num.v, sizeof t->arg);
            }
            break;
        case STK_OP_POLICY: { /* the parser keeps these before rotate and color_jitter */
            if (spatial) {
                rc = stk_spec_fail(text, o->col,
                                   "%s is not supported with mask or box fields (its "
                                   "geometric steps are not replayed on them)",
                                   o->def->name);
                goto fail;
            }
            if (k < last_geo) {
                rc = stk_spec_fail(text, o->col,
                                   "%s before %s is not supported; put the crops and the "
                                   "resize first",
                                   o->def->name, spec->ops[last_geo].def->name);
                goto fail;
            }
            stk_tail_op *t = &ip->tail[ip->ntail++];
            stk_aug_policy *pl = &t->pol;
            t->kind = T_POLICY;
            t->ih = (uint32_t)kh; /* the image here (final once `known`, checked below) */
            t->iw = (uint32_t)kw;
            pl->kind = stk_op_desc_of(o)->aug_policy;
            const double *v = o->u.num.v;
            double fill = pl->kind == STK_AUG_POLICY_AUTO ? v[0]
                          : pl->kind == STK_AUG_POLICY_RAND ? v[3]
                                                            : v[1];
            if (pl->kind == STK_AUG_POLICY_RAND) {
                pl->num_ops = (int)v[0];
                pl->magnitude = (int)v[1];
                pl->bins = (int)v[2];
                if (pl->magnitude >= pl->bins) {
                    rc = stk_spec_fail(text, o->arg_col,
                                       "rand_augment magnitude %d must be below "
                                       "num_magnitude_bins %d (it is a bin index)",
                                       pl->magnitude, pl->bins);
                    goto fail;
                }
            } else if (pl->kind == STK_AUG_POLICY_TRIVIAL) {
                pl->bins = (int)v[0];
            } else {
                pl->auto_policy = (int)v[1];
            }
            for (int c = 0; c < 3; c++)
                pl->fill[c] = (uint8_t)fill;
            naug += pl->kind == STK_AUG_POLICY_RAND ? pl->num_ops
                    : pl->kind == STK_AUG_POLICY_AUTO ? 2
                                                      : 1;
            if (naug > MAX_AUG) {
                rc = stk_spec_fail(text, o->col,
                                   "at most %d augmentation-policy steps per sample (the "
                                   "policies' ops add up to %d)",
                                   MAX_AUG, naug);
                goto fail;
            }
            if (!policy)
                policy = o;
            ip->has_policy = 1;
            break;
        }
        case STK_OP_BBOX_CROP: {
            last_geo_col = o->col;
            if (ip->ngeo > 0 || seen_color) {
                rc = stk_spec_fail(text, o->col,
                                   "random_bbox_crop must be the first geometric op (its draw "
                                   "reads the boxes as decoded)");
                goto fail;
            }
            stk_geo_op *g = &ip->geo[ip->ngeo++];
            g->kind = G_BBOX_CROP;
            g->nopt = o->u.bbox.nopt;
            memcpy(g->opt, o->u.bbox.opt, sizeof g->opt);
            memcpy(g->bscale, o->u.bbox.scale, sizeof g->bscale);
            memcpy(g->bratio, o->u.bbox.ratio, sizeof g->bratio);
            g->trials = o->u.bbox.trials;
            known = 0; /* the crop's size varies */
            short_s = 0;
            break;
        }
        case STK_OP_USER: { /* the parser keeps these before rotate and color_jitter */
            if (k < last_geo) {
                rc = stk_spec_fail(text, o->col,
                                   "%s before %s is not supported; put the crops and the "
                                   "resize first",
                                   o->def->name, spec->ops[last_geo].def->name);
                goto fail;
            }
            if (ip->nuser == MAX_USER) {
                rc = stk_spec_fail(text, o->col, "at most %d user-defined ops per pipeline",
                                   MAX_USER);
                goto fail;
            }
            stk_tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_USER;
            t->user = ip->nuser;
            if (!known)
                break; /* refused below: the size must be fixed by now */
            if (!ip->nuser) {
                ip->head_h = (uint32_t)kh;
                ip->head_w = (uint32_t)kw;
            }
            t->ih = (uint32_t)kh;
            t->iw = (uint32_t)kw;
            uint32_t in[3] = {(uint32_t)kh, (uint32_t)kw, (uint32_t)nc};
            stk_user_inst *u = &ip->user[ip->nuser++]; /* counted first: freed on failure */
            if ((rc = stk_user_compile(text, o, in, u)) < 0)
                goto fail;
            if (spatial && (u->out[0] != in[0] || u->out[1] != in[1])) {
                rc = stk_spec_fail(text, o->col,
                                   "%s changes the image's size (%ux%u to %ux%u), which masks "
                                   "and boxes cannot follow; with mask or box fields a "
                                   "user-defined op must keep the size (it is treated as "
                                   "photometric)",
                                   o->def->name, in[0], in[1], u->out[0], u->out[1]);
                goto fail;
            }
            kh = u->out[0];
            kw = u->out[1];
            nc = (int)u->out[2];
            if (!policy) /* flips and point ops after it would run before it */
                policy = o;
            break;
        }
        case STK_OP_RANDOM_CROP:
        case STK_OP_CENTER_CROP:
        case STK_OP_RANDOM_RESIZED_CROP:
        case STK_OP_RESIZE: {
            last_geo_col = o->col;
            if (seen_color) { /* the first float stage, as k + 1 */
                rc = stk_spec_fail(text, o->col,
                                   "%s after %s is not supported; put the crops and the resize "
                                   "first",
                                   o->def->name, spec->ops[seen_color - 1].def->name);
                goto fail;
            }
            stk_geo_op *g = &ip->geo[ip->ngeo++];
            if (o->kind == STK_OP_RANDOM_CROP || o->kind == STK_OP_CENTER_CROP) {
                g->kind = o->kind == STK_OP_RANDOM_CROP ? G_RCROP : G_CCROP;
                g->h = o->u.crop.height;
                g->w = o->u.crop.width;
                if (known && ((int64_t)g->h > kh || (int64_t)g->w > kw)) {
                    rc = stk_spec_fail(text, o->arg_col,
                                       "%s %ux%u (HxW) is larger than its input %lldx%lld",
                                       o->def->name, g->h, g->w, (long long)kh,
                                       (long long)kw);
                    goto fail;
                }
                if (!known && short_s && ((int64_t)g->h > short_s || (int64_t)g->w > short_s)) {
                    rc = stk_spec_fail(text, o->arg_col,
                                       "%s %ux%u (HxW) does not fit every image: 'resize %lld' "
                                       "makes the shorter side %lld; crop at most %lld",
                                       o->def->name, g->h, g->w, (long long)short_s,
                                       (long long)short_s, (long long)short_s);
                    goto fail;
                }
                known = 1;
                short_s = 0;
                kh = g->h;
                kw = g->w;
                break;
            }
            if (have_resize++) {
                rc = stk_spec_fail(text, o->col,
                                   "only one resize or random_resized_crop per pipeline");
                goto fail;
            }
            {
                int f = o->kind == STK_OP_RANDOM_RESIZED_CROP ? o->u.rrc.bicubic
                                                              : o->u.resize.bicubic;
                ip->filter = f == 2 ? STK_RS_NEAREST : f == 1 ? STK_RS_BICUBIC : STK_RS_BILINEAR;
            }
            if (o->kind == STK_OP_RANDOM_RESIZED_CROP) {
                g->kind = G_RRC;
                g->h = o->u.rrc.height;
                g->w = o->u.rrc.width;
                memcpy(g->scale, o->u.rrc.scale, sizeof g->scale);
                memcpy(g->ratio, o->u.rrc.ratio, sizeof g->ratio);
                g->logr[0] = logf((float)g->ratio[0]);
                g->logr[1] = logf((float)g->ratio[1]);
                known = 1;
                kh = g->h;
                kw = g->w;
            } else {
                g->kind = G_RESIZE;
                g->h = o->u.resize.height;
                g->w = o->u.resize.width;
                g->shorter = o->u.resize.shorter;
                if (!g->shorter) {
                    known = 1;
                    kh = g->h;
                    kw = g->w;
                } else if (known) {
                    int64_t nh, nw;
                    if (stk_resize_shorter(kh, kw, g->h, &nh, &nw) < 0) {
                        rc = stk_spec_fail(text, o->arg_col, "the resized image is too large");
                        goto fail;
                    }
                    kh = nh;
                    kw = nw;
                } else {
                    short_s = g->h;
                }
            }
            break;
        }
        case STK_OP_ROTATE: {
            if (nrot++ == MAX_ROT) {
                rc = stk_spec_fail(text, o->col, "at most %d rotate and affine stages", MAX_ROT);
                goto fail;
            }
            stk_tail_op *t = &ip->tail[ip->ntail];
            if ((rc = tail_fill(text, o->u.rotate.fill, o->u.rotate.nfill, o->u.rotate.fill_col,
                                nc, t)) < 0)
                goto fail;
            ip->ntail++;
            t->kind = T_ROTATE;
            t->lo = o->u.rotate.lo;
            t->hi = o->u.rotate.hi;
            seen_color = seen_color ? seen_color : k + 1;
            ip->float_path = 1;
            break;
        }
        case STK_OP_AFFINE: {
            if (nrot++ == MAX_ROT) {
                rc = stk_spec_fail(text, o->col, "at most %d rotate and affine stages", MAX_ROT);
                goto fail;
            }
            stk_tail_op *t = &ip->tail[ip->ntail];
            if ((rc = tail_fill(text, o->u.affine.fill, o->u.affine.nfill, o->u.affine.fill_col,
                                nc, t)) < 0)
                goto fail;
            ip->ntail++;
            t->kind = T_AFFINE;
            t->lo = o->u.affine.deg[0];
            t->hi = o->u.affine.deg[1];
            memcpy(t->tr, o->u.affine.tr, sizeof t->tr);
            memcpy(t->scale, o->u.affine.scale, sizeof t->scale);
            memcpy(t->shear, o->u.affine.shear, sizeof t->shear);
            t->nearest = o->u.affine.nearest;
            seen_color = seen_color ? seen_color : k + 1;
            ip->float_path = 1;
            break;
        }
        case STK_OP_COLOR_JITTER: {
            stk_tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_JITTER;
            t->has[0] = o->u.jitter.has_b;
            t->has[1] = o->u.jitter.has_c;
            t->has[2] = o->u.jitter.has_s;
            t->has[3] = o->u.jitter.has_h;
            const double *r[4] = {o->u.jitter.b, o->u.jitter.c, o->u.jitter.s, o->u.jitter.h};
            for (int q = 0; q < 4; q++) {
                t->rlo[q] = r[q][0];
                t->rhi[q] = r[q][1];
            }
            seen_color = seen_color ? seen_color : k + 1;
            ip->float_path = 1;
            break;
        }
        case STK_OP_FLOAT: { /* from its hooks alone (op.h); compiled below, at the output size */
            const stk_op_desc *d = stk_op_desc_of(o);
            if (d->fl->geometric && spatial) {
                rc = stk_spec_fail(text, o->col,
                                   "%s is not supported with mask or box fields (its "
                                   "geometric steps are not replayed on them)",
                                   o->def->name);
                goto fail;
            }
            if (nfop++ == MAX_FOP) {
                rc = stk_spec_fail(text, o->col, "at most %d %s and other float-op stages",
                                   MAX_FOP, o->def->name);
                goto fail;
            }
            if (d->fl->geometric && !moved)
                moved = o;
            stk_tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_FLOAT;
            t->lut = d;
            t->spec_at = k;
            seen_color = seen_color ? seen_color : k + 1;
            ip->float_path = 1;
            break;
        }
        case STK_OP_RANDOM_APPLY: {
            if (group_left > 0) { /* not reached: refused above */
                rc = stk_spec_fail(text, o->col, "random_apply cannot hold random_apply");
                goto fail;
            }
            stk_tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_APPLY;
            t->p = o->u.apply.p;
            t->n = o->u.apply.n;
            group_left = group_n = (int)o->u.apply.n;
            group_col = o->col;
            break;
        }
        case STK_OP_RANDOM_ERASING: {
            if (ip->nerase == MAX_ERASE) {
                rc = stk_spec_fail(text, o->col, "at most %d random_erasing stages", MAX_ERASE);
                goto fail;
            }
            uint32_t nv = o->u.erase.nvalue;
            if (nv != 1 && nv != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.erase.value_col,
                                   "random_erasing has %u values but the image has %d "
                                   "channel%s (give 1 value or %d)",
                                   nv, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            stk_erase_op *e = &ip->erase[ip->nerase++];
            e->p = o->u.erase.p;
            e->random = o->u.erase.random;
            memcpy(e->scale, o->u.erase.scale, sizeof e->scale);
            e->logr[0] = logf((float)o->u.erase.ratio[0]);
            e->logr[1] = logf((float)o->u.erase.ratio[1]);
            for (int c = 0; c < 3; c++)
                e->value[c] = (float)o->u.erase.value[nv == 1 ? 0 : (c < nc ? c : 0)];
            erase_at = k;
            break;
        }
        }
    }
    if (group_left > 0) {
        rc = stk_spec_fail(text, group_col,
                           "random_apply n=%d needs %d more stage%s after it", group_n,
                           group_left,
                           group_left == 1 ? "" : "s");
        goto fail;
    }
    if (!known) {
        rc = stk_spec_fail(text, last_geo >= 0 ? last_geo_col : 1,
                           "these images vary in size, so the pipeline needs a stage that "
                           "fixes the output size: random_resized_crop S, resize H,W, "
                           "center_crop or random_crop (e.g. resize 256 | center_crop 224)");
        goto fail;
    }
    if (kh > (int64_t)STK_SPEC_MAX_SIZE || kw > (int64_t)STK_SPEC_MAX_SIZE) {
        rc = stk_fail(STK_ELIMIT, "pipeline spec: output of %lldx%lld is too large",
                      (long long)kh, (long long)kw);
        goto fail;
    }
    ip->out_h = (uint32_t)kh;
    ip->out_w = (uint32_t)kw;
    if (!ip->nuser) {
        ip->head_h = ip->out_h;
        ip->head_w = ip->out_w;
    }
    /* The uint8 images between the head and the float tail. */
    ip->u8_bytes = (size_t)ip->head_h * ip->head_w * (size_t)ip->nc;
    for (int k = 0; k < ip->nuser; k++) {
        size_t b = (size_t)ip->user[k].out[0] * ip->user[k].out[1] * ip->user[k].out[2];
        if (b > ip->u8_bytes)
            ip->u8_bytes = b;
    }
    /* The float ops, against the output size they run at (the state
     * starts as the schema's values, for ops without a compile hook). */
    for (int k = 0; k < ip->ntail; k++) {
        stk_tail_op *t = &ip->tail[k];
        if (t->kind != T_FLOAT)
            continue;
        const stk_spec_op *o = &spec->ops[t->spec_at];
        memcpy(t->state, o->u.num.v, sizeof o->u.num.v);
        if (t->lut->fl->compile &&
            (rc = t->lut->fl->compile(text, o, ip->out_h, ip->out_w, nc, t->state)) < 0)
            goto fail;
    }

    uint64_t bytes;
    if (!stk_mul_ok((uint64_t)kh * (uint64_t)kw, (uint64_t)nc * dtype_size(spec->dtype), &bytes) ||
        bytes > (uint64_t)SIZE_MAX / 2) {
        rc = stk_fail(STK_ELIMIT, "pipeline spec: output sample of %lldx%lldx%d is too large",
                      (long long)kh, (long long)kw, nc);
        goto fail;
    }
    ip->sample_bytes = (size_t)bytes;

    stk_outfmt *f = &ip->fmt;
    f->dtype = spec->dtype;
    f->layout = spec->layout;
    f->nc = nc;
    f->width = (int32_t)kw;
    f->height = (int32_t)kh;
    for (int c = 0; c < 3; c++) {
        int cc = c < nc ? c : 0;
        if (have_norm) {
            f->scale[c] = (float)(1.0 / (255.0 * stdv[cc]));
            f->bias[c] = (float)(-mean[cc] / stdv[cc]);
            f->fscale[c] = (float)(1.0 / stdv[cc]);
            f->fbias[c] = (float)(-mean[cc] / stdv[cc]);
        } else {
            f->scale[c] = (float)(1.0 / 255.0);
            f->bias[c] = 0.0f;
            f->fscale[c] = 1.0f;
            f->fbias[c] = 0.0f;
        }
    }
    ip->rk = stk_rs_kernels_get();
    ip->ck = stk_color_kernels_get();
    *out_h = ip->out_h;
    *out_w = ip->out_w;
    *out_c = (uint32_t)nc;
    *sample_bytes = ip->sample_bytes;
    *out = ip;
    return 0;

fail:
    stk_imgplan_free(ip);
    return rc;
}

void stk_imgplan_free(stk_imgplan *ip)
{
    if (!ip)
        return;
    stk_fixplan_free(ip->prefix);
    for (int k = 0; k < ip->nuser; k++)
        stk_user_release(&ip->user[k]);
    free(ip);
}

