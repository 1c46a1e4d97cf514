/*
 * ops_builtin.c — the rows of the op table for the built-in ops: pad,
 * random_crop, center_crop, flip (hflip), vflip, normalize, to, decode,
 * random_resized_crop, resize, rotate, color_jitter (docs/pipeline.md).
 *
 * Each row names the op, its aliases and order flags, and a parse hook that
 * turns a stage into ops with the toolkit of ops/spec.h. These ops
 * have hand-written parsers because their arguments are richer than one
 * number per param (size lists, ranges, presets, modes, keys that imply a
 * second op) and their messages are pinned by the tests; an op whose
 * arguments are plain numbers lists them as params and has no hook (see
 * op_posterize.c). Their compile and run live in the plan compilers
 * (plan.c: the fused fixed-shape kernel; image_plan.c: the image pipeline),
 * which switch on `kind`.
 */
#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

extern const stk_op_desc stk_op_pad;

#define PAD_COUNT_MSG                                                                              \
    "padding takes 1 (all sides), 2 (left/right,top/bottom) or 4 "                                 \
    "(left,top,right,bottom) sizes"

static int parse_pad_sizes(const stk_spec_parser *P, int a, int b, stk_spec_op *op, const char *ctx)
{
    uint32_t v[4];
    int n, rc = stk_spec_ints(P, a, b, (1u << 1) | (1u << 2) | (1u << 4), 0, STK_SPEC_MAX_SIZE, v,
                              &n, ctx, PAD_COUNT_MSG);
    if (rc < 0)
        return rc;
    if (n == 1) {
        op->u.pad.left = op->u.pad.top = op->u.pad.right = op->u.pad.bottom = v[0];
    } else if (n == 2) {
        op->u.pad.left = op->u.pad.right = v[0];
        op->u.pad.top = op->u.pad.bottom = v[1];
    } else {
        op->u.pad.left = v[0];
        op->u.pad.top = v[1];
        op->u.pad.right = v[2];
        op->u.pad.bottom = v[3];
    }
    op->arg_col = a + 1;
    return 0;
}

static int parse_fill(const stk_spec_parser *P, int a, int b, stk_spec_op *op)
{
    uint32_t v[STK_SPEC_MAX_LIST];
    int n, rc = stk_spec_ints(P, a, b, 0, 0, 255, v, &n,
                              "in fill=", "fill takes 1 value or 1 per channel");
    if (rc < 0)
        return rc;
    op->u.pad.nfill = (uint32_t)n;
    for (int k = 0; k < n; k++)
        op->u.pad.fill[k] = (uint8_t)v[k];
    op->u.pad.fill_col = a + 1;
    return 0;
}

static int parse_mode(const stk_spec_parser *P, int a, int b, stk_pad_mode *mode)
{
    static const struct {
        const char *name;
        stk_pad_mode mode;
    } modes[] = {{"constant", STK_PAD_CONSTANT},
                 {"edge", STK_PAD_EDGE},
                 {"reflect", STK_PAD_REFLECT},
                 {"symmetric", STK_PAD_SYMMETRIC}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (stk_spec_tok_is(P, a, b, modes[i].name)) {
            *mode = modes[i].mode;
            return 0;
        }
    }
    return stk_spec_err(P, a,
                        "unknown padding mode '%.*s' (known: constant, edge, reflect, symmetric)",
                        STK_SPEC_TOKARG(P, a, b));
}

/* The column to blame for a missing argument: just after the op name. */
static int missing_at(const stk_spec_stage *st) { return st->after_name; }

/* ---------------------------------------------------------------------- */
/* Ops                                                                     */
/* ---------------------------------------------------------------------- */

static int parse_pad(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"fill", "mode|padding_mode", NULL};
    int rc = 0, have_size = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.pad.mode = STK_PAD_CONSTANT;
    op->u.pad.nfill = 1;
    op->u.pad.fill_col = op->col;
    while ((rc = stk_spec_next_arg(P, st, keys, "fill, mode", &a)) > 0) {
        if (a.key < 0 && have_size++)
            return stk_spec_unexpected(P, st, a.t);
        rc = a.key < 0    ? parse_pad_sizes(P, a.va, a.vb, op, "after 'pad'")
             : a.key == 0 ? parse_fill(P, a.va, a.vb, op)
                          : parse_mode(P, a.va, a.vb, &op->u.pad.mode);
        if (rc < 0)
            return rc;
    }
    if (rc < 0)
        return rc;
    if (!have_size)
        return stk_spec_err(P, missing_at(st),
                            "expected padding sizes after 'pad' (N, LR,TB or L,T,R,B)");
    return 0;
}

/* `H` or `H,W` (square when one value). */
static int parse_crop_size(const stk_spec_parser *P, const stk_spec_tok *t, stk_spec_op *op,
                           const char *ctx)
{
    uint32_t v[2];
    int n, rc = stk_spec_ints(P, t->a, t->b, (1u << 1) | (1u << 2), 1, STK_SPEC_MAX_SIZE, v, &n,
                              ctx, "a crop size is H or H,W");
    if (rc < 0)
        return rc;
    op->u.crop.height = v[0];
    op->u.crop.width = n == 2 ? v[1] : v[0];
    op->arg_col = t->a + 1;
    return 0;
}

static int parse_crop(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    int random = def->kind == STK_OP_RANDOM_CROP;
    const char *name = random ? "random_crop" : "center_crop";
    char ctx[64];
    snprintf(ctx, sizeof ctx, "after '%s'", name);
    /* random_crop's keys; center_crop takes none. */
    static const char *const keys[] = {"padding", "fill", "mode|padding_mode", NULL};
    enum { PADDING, FILL, MODE };
    int rc = 0;
    stk_spec_arg a = {0}, size = {0}, got[3];
    while ((rc = stk_spec_next_arg(P, st, random ? keys : NULL,
                                   random ? "padding, fill, mode" : NULL, &a)) > 0) {
        if (a.key >= 0)
            got[a.key] = a;
        else if (size.t)
            return stk_spec_unexpected(P, st, a.t);
        else
            size = a;
    }
    if (rc < 0)
        return rc;
    if (!size.t)
        return stk_spec_err(P, missing_at(st), "expected a crop size after '%s' (H or H,W)", name);
    for (int k = FILL; k <= MODE; k++)
        if ((a.seen & (1u << k)) && !(a.seen & (1u << PADDING)))
            return stk_spec_err(P, got[k].ka,
                                "'%.*s=' needs padding=", STK_SPEC_TOKARG(P, got[k].ka, got[k].kb));

    if (a.seen & (1u << PADDING)) { /* random_crop ... padding=N  ==  pad N | random_crop ... */
        stk_spec_op *pad = stk_spec_new_op(P, &stk_op_pad.syntax, got[PADDING].ka, &rc);
        if (!pad)
            return rc;
        pad->u.pad.mode = STK_PAD_CONSTANT;
        pad->u.pad.nfill = 1;
        pad->u.pad.fill_col = pad->col;
        if ((rc = parse_pad_sizes(P, got[PADDING].va, got[PADDING].vb, pad, "in padding=")) < 0)
            return rc;
        if ((a.seen & (1u << FILL)) && (rc = parse_fill(P, got[FILL].va, got[FILL].vb, pad)) < 0)
            return rc;
        if ((a.seen & (1u << MODE)) &&
            (rc = parse_mode(P, got[MODE].va, got[MODE].vb, &pad->u.pad.mode)) < 0)
            return rc;
    }
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    return parse_crop_size(P, size.t, op, ctx);
}

static int parse_flip(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"p", NULL};
    int rc = 0, have_p = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.flip.p = 0.5;
    while ((rc = stk_spec_next_arg(P, st, keys, "p", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (have_p++) /* P, or p=P */
            return a.key >= 0 ? stk_spec_twice(P, a.ka, a.kb) : stk_spec_unexpected(P, st, a.t);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "after '%.*s'", STK_SPEC_TOKARG(P, st->name.a, st->name.b));
        double p;
        if ((rc = stk_spec_number(P, va, vb, &p, ctx)) < 0)
            return rc;
        if (!(p >= 0.0 && p <= 1.0))
            return stk_spec_err(P, va, "flip probability must be from 0 to 1, got '%.*s'",
                                STK_SPEC_TOKARG(P, va, vb));
        op->u.flip.p = p;
        op->arg_col = va + 1;
    }
    return rc;
}

static const struct preset {
    const char *name;
    int n;
    double mean[3], std[3];
} presets[] = {
    {"cifar10", 3, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}},
    {"imagenet", 3, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}},
    {"mnist", 1, {0.1307}, {0.3081}},
    {"fashion-mnist", 1, {0.2860}, {0.3530}},
    {"fashion_mnist", 1, {0.2860}, {0.3530}},
};
#define PRESET_NAMES "cifar10, imagenet, mnist, fashion-mnist"

/* Store a mean (means == NULL) or std list. A std must be > 0, and small
 * enough a divisor that the compiled float32 constants stay finite with
 * every mean (means[0..nm)). */
static int set_values(const stk_spec_parser *P, const stk_spec_numlist *L, double *dst, uint32_t *n,
                      const double *means, uint32_t nm)
{
    for (int k = 0; k < L->n; k++) {
        if (means && !(L->v[k] > 0.0))
            return stk_spec_err(P, L->a[k], "std must be > 0, got '%.*s'",
                                STK_SPEC_TOKARG(P, L->a[k], L->b[k]));
        int rc;
        if (means) {
            /* The means this std divides: all of them for one std, else its own. */
            const double *m = L->n == 1 || nm == 1 ? means : means + k;
            int mn = L->n == 1 ? (int)nm : nm == 1 || (uint32_t)k < nm ? 1 : 0;
            if ((rc = stk_spec_finite_recip(P, L->a[k], L->b[k], L->v[k], m, mn, "std")) < 0)
                return rc;
        }
        dst[k] = L->v[k];
    }
    *n = (uint32_t)L->n;
    return 0;
}

/* The values of a normalize list in 0-1 units: divided by `unit` (255 for
 * scale=255). */
static void scale_list(stk_spec_numlist *L, double unit)
{
    for (int k = 0; k < L->n; k++)
        L->v[k] /= unit;
}

/* Without scale=, a mean or std above 1 (up to 255) is almost surely a
 * 0-255 value (DALI's and OpenCV's spelling: mean=123.7,116.3,103.5): taken
 * as a 0-1 value it leaves near-constant tensors, silently. Refused, naming
 * both ways out; larger values are not pixel values and meet the overflow
 * checks instead. L: the list at offset `at`. */
static int refuse_255(const stk_spec_parser *P, const stk_spec_numlist *L, int at,
                      const char *what)
{
    for (int k = 0; k < L->n; k++)
        if (L->v[k] > 1.0 && L->v[k] <= 255.0)
            return stk_spec_err(P, L->a[k] > at ? L->a[k] : at,
                                "normalize %s value %.*s: these look like 0-255 values: add "
                                "scale=255 (or divide by 255); normalize takes 0-1 values, as "
                                "torchvision's Normalize after ToTensor",
                                what, STK_SPEC_TOKARG(P, L->a[k], L->b[k]));
    return 0;
}

static int parse_normalize(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"mean", "std", "scale", NULL};
    int rc = 0, npos = 0;
    stk_spec_arg a = {0}, pos[2], kv[3]; /* kv: mean=, std=, scale= */
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    while ((rc = stk_spec_next_arg(P, st, keys, "mean, std, scale", &a)) > 0) {
        if (a.key >= 0)
            kv[a.key] = a;
        else if (npos == 2)
            return stk_spec_unexpected(P, st, a.t);
        else
            pos[npos++] = a;
    }
    if (rc < 0)
        return rc;
    int mean_at = a.seen & 1u, std_at = a.seen & 2u, scale_at = a.seen & 4u;
    stk_spec_numlist L;
    /* scale=255: mean and std are given in 0-255 units (scale=1: in 0-1
     * units, whatever they look like); stored divided, so the pixel math is
     * the 0-1 spelling's. */
    double unit = 1.0;
    if (scale_at) {
        if ((rc = stk_spec_number(P, kv[2].va, kv[2].vb, &unit, "in scale=")) < 0)
            return rc;
        if (unit != 1.0 && unit != 255.0)
            return stk_spec_err(P, kv[2].va,
                                "normalize scale= must be 255 (mean and std in 0-255 units) "
                                "or 1 (0-1 units), got '%.*s'",
                                STK_SPEC_TOKARG(P, kv[2].va, kv[2].vb));
    }
    if (npos && (mean_at || std_at))
        return stk_spec_err(P, kv[mean_at ? 0 : 1].t->a,
                            "give normalize either MEAN STD or mean= std=, not both");
    if (npos >= 1) {
        const stk_spec_tok *t = pos[0].t;
        char c0 = P->s[t->a];
        if ((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z')) { /* a preset */
            if (npos == 2)
                return stk_spec_unexpected(P, st, pos[1].t);
            if (scale_at)
                return stk_spec_err(P, kv[2].t->a,
                                    "normalize scale= applies to given mean and std values, "
                                    "not to a preset");
            for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
                if (stk_spec_tok_is(P, t->a, t->b, presets[k].name)) {
                    op->u.normalize.nmean = op->u.normalize.nstd = (uint32_t)presets[k].n;
                    memcpy(op->u.normalize.mean, presets[k].mean, sizeof presets[k].mean);
                    memcpy(op->u.normalize.std, presets[k].std, sizeof presets[k].std);
                    op->u.normalize.mean_col = op->u.normalize.std_col = t->a + 1;
                    op->arg_col = t->a + 1;
                    return 0;
                }
            }
            return stk_spec_err(P, t->a,
                                "unknown normalize preset '%.*s' (known: " PRESET_NAMES ")",
                                STK_SPEC_TOKARG(P, t->a, t->b));
        }
        if ((rc = stk_spec_list(P, t->a, t->b, &L, "in the normalize mean")) < 0)
            return rc;
        if (!scale_at && (rc = refuse_255(P, &L, t->a, "mean")) < 0)
            return rc;
        scale_list(&L, unit);
        set_values(P, &L, op->u.normalize.mean, &op->u.normalize.nmean, NULL, 0);
        op->u.normalize.mean_col = op->arg_col = t->a + 1;
        if (npos < 2)
            return stk_spec_err(P, st->end, "expected the std values after the normalize mean");
        t = pos[1].t;
        if ((rc = stk_spec_list(P, t->a, t->b, &L, "in the normalize std")) < 0)
            return rc;
        if (!scale_at && (rc = refuse_255(P, &L, t->a, "std")) < 0)
            return rc;
        scale_list(&L, unit);
        if ((rc = set_values(P, &L, op->u.normalize.std, &op->u.normalize.nstd,
                             op->u.normalize.mean, op->u.normalize.nmean)) < 0)
            return rc;
        op->u.normalize.std_col = t->a + 1;
        return 0;
    }
    if (!mean_at && !std_at)
        return stk_spec_err(P, missing_at(st),
                            "expected a preset (" PRESET_NAMES ") or MEAN STD after 'normalize'");
    if (!mean_at || !std_at)
        return stk_spec_err(P, kv[mean_at ? 0 : 1].t->a, "normalize needs both mean= and std=");
    if ((rc = stk_spec_list(P, kv[0].va, kv[0].vb, &L, "in mean=")) < 0)
        return rc;
    if (!scale_at && (rc = refuse_255(P, &L, kv[0].va, "mean")) < 0)
        return rc;
    scale_list(&L, unit);
    set_values(P, &L, op->u.normalize.mean, &op->u.normalize.nmean, NULL, 0);
    op->u.normalize.mean_col = op->arg_col = kv[0].va + 1;
    if ((rc = stk_spec_list(P, kv[1].va, kv[1].vb, &L, "in std=")) < 0)
        return rc;
    if (!scale_at && (rc = refuse_255(P, &L, kv[1].va, "std")) < 0)
        return rc;
    scale_list(&L, unit);
    if ((rc = set_values(P, &L, op->u.normalize.std, &op->u.normalize.nstd, op->u.normalize.mean,
                         op->u.normalize.nmean)) < 0)
        return rc;
    op->u.normalize.std_col = kv[1].va + 1;
    return 0;
}

static int parse_to(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const struct {
        const char *name;
        stk_dtype dtype;
    } dtypes[] = {{"u8", STK_U8},    {"uint8", STK_U8}, {"f16", STK_F16},     {"float16", STK_F16},
                  {"half", STK_F16}, {"f32", STK_F32},  {"float32", STK_F32}, {"float", STK_F32},
                  {"bf16", STK_BF16}, {"bfloat16", STK_BF16}};
    int rc = 0;
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    if (st->nargs == 0)
        return stk_spec_err(P, missing_at(st), "expected a dtype after 'to' (u8, f16, bf16 or f32)");
    stk_spec_arg a = {0};
    while ((rc = stk_spec_next_arg(P, st, NULL, NULL, &a)) > 0)
        if (a.next > 2) /* DTYPE [LAYOUT] */
            return stk_spec_unexpected(P, st, a.t);
    if (rc < 0)
        return rc;
    const stk_spec_tok *t = &st->args[0];
    size_t k;
    for (k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (stk_spec_tok_is(P, t->a, t->b, dtypes[k].name))
            break;
    if (k == sizeof dtypes / sizeof dtypes[0])
        return stk_spec_err(P, t->a, "unknown dtype '%.*s' (known: u8, f16, bf16, f32)",
                            STK_SPEC_TOKARG(P, t->a, t->b));
    op->u.to.dtype = dtypes[k].dtype;
    op->arg_col = t->a + 1;
    op->u.to.layout = op->u.to.dtype == STK_U8 ? STK_HWC : STK_CHW;
    if (st->nargs == 2) {
        t = &st->args[1];
        if (stk_spec_tok_is(P, t->a, t->b, "hwc"))
            op->u.to.layout = STK_HWC;
        else if (stk_spec_tok_is(P, t->a, t->b, "chw"))
            op->u.to.layout = STK_CHW;
        else
            return stk_spec_err(P, t->a, "unknown layout '%.*s' (known: hwc, chw)",
                                STK_SPEC_TOKARG(P, t->a, t->b));
    }
    return 0;
}

static int parse_out_size(const stk_spec_parser *P, const stk_spec_tok *t, uint32_t v[2], int *n,
                          const char *ctx, const char *what)
{
    return stk_spec_ints(P, t->a, t->b, (1u << 1) | (1u << 2), 1, STK_SPEC_MAX_SIZE, v, n, ctx,
                         what);
}

static int parse_decode(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    int rc = 0;
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    if (st->nargs) {
        const stk_spec_tok *t = &st->args[0];
        if (t->eq >= 0)
            return stk_spec_err(P, t->a, "'decode' takes no arguments, got '%.*s'",
                                STK_SPEC_TOKARG(P, t->a, t->b));
        return stk_spec_unexpected(P, st, t);
    }
    return 0;
}

/* interpolation=bilinear|bicubic|nearest (Pillow's filters; resample.h):
 * 0, 1, 2 as STK_RS_BILINEAR, STK_RS_BICUBIC, STK_RS_NEAREST. */
static int parse_interp(const stk_spec_parser *P, int va, int vb, int *filter)
{
    if (stk_spec_tok_is(P, va, vb, "bilinear"))
        *filter = 0;
    else if (stk_spec_tok_is(P, va, vb, "bicubic"))
        *filter = 1;
    else if (stk_spec_tok_is(P, va, vb, "nearest"))
        *filter = 2;
    else
        return stk_spec_err(P, va,
                            "unknown interpolation '%.*s' (known: bilinear, bicubic, nearest)",
                            STK_SPEC_TOKARG(P, va, vb));
    return 0;
}

static int parse_rrc(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char ctx[] = "after 'random_resized_crop'";
    static const char *const keys[] = {"scale", "ratio", "interpolation", NULL};
    int rc = 0, have_size = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.rrc.scale[0] = 0.08;
    op->u.rrc.scale[1] = 1.0;
    op->u.rrc.ratio[0] = 3.0 / 4.0;
    op->u.rrc.ratio[1] = 4.0 / 3.0;
    while ((rc = stk_spec_next_arg(P, st, keys, "scale, ratio, interpolation", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (a.key == 2) {
            if ((rc = parse_interp(P, va, vb, &op->u.rrc.bicubic)) < 0)
                return rc;
        } else if (a.key < 0) {
            if (have_size++)
                return stk_spec_unexpected(P, st, a.t);
            uint32_t v[2];
            int n;
            if ((rc = parse_out_size(P, a.t, v, &n, ctx, "an output size is S or H,W")) < 0)
                return rc;
            op->u.rrc.height = v[0];
            op->u.rrc.width = n == 2 ? v[1] : v[0];
            op->arg_col = a.t->a + 1;
        } else {
            int is_scale = a.key == 0;
            double v[2];
            int n;
            if ((rc = stk_spec_range(P, va, vb, v, &n, is_scale ? "in scale=" : "in ratio=")) < 0)
                return rc;
            if (n != 2)
                return stk_spec_err(P, va, "%s= takes a range low:high, e.g. %s, got '%.*s'",
                                    is_scale ? "scale" : "ratio",
                                    is_scale ? "0.08:1" : "0.75:1.3333",
                                    STK_SPEC_TOKARG(P, va, vb));
            if (!(v[0] > 0.0))
                return stk_spec_err(P, va, "%s= must be > 0, got '%.*s'",
                                    is_scale ? "scale" : "ratio", STK_SPEC_TOKARG(P, va, vb));
            memcpy(is_scale ? op->u.rrc.scale : op->u.rrc.ratio, v, sizeof v);
        }
    }
    if (rc < 0)
        return rc;
    if (!have_size)
        return stk_spec_err(P, missing_at(st),
                            "expected an output size after 'random_resized_crop' (S or H,W)");
    return 0;
}

static int parse_resize(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"interpolation", NULL};
    int rc = 0, have = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    while ((rc = stk_spec_next_arg(P, st, keys, "interpolation", &a)) > 0) {
        const stk_spec_tok *t = a.t;
        if (a.key == 0) {
            if ((rc = parse_interp(P, a.va, a.vb, &op->u.resize.bicubic)) < 0)
                return rc;
            continue;
        }
        if (have++)
            return stk_spec_unexpected(P, st, t);
        uint32_t v[2];
        int n;
        if ((rc = parse_out_size(P, t, v, &n, "after 'resize'",
                                 "resize takes S (the shorter side) or H,W")) < 0)
            return rc;
        op->u.resize.height = v[0];
        op->u.resize.width = n == 2 ? v[1] : v[0];
        op->u.resize.shorter = n == 1;
        op->arg_col = t->a + 1;
    }
    if (rc < 0)
        return rc;
    if (!have)
        return stk_spec_err(P, missing_at(st),
                            "expected a size after 'resize' (S for the shorter side, or H,W)");
    return 0;
}

static int parse_rotate(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"degrees", "fill", NULL};
    int rc = 0, have_deg = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.rotate.nfill = 1;
    op->u.rotate.fill_col = op->col;
    while ((rc = stk_spec_next_arg(P, st, keys, "degrees, fill", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (a.key <= 0) { /* DEGREES, or degrees=DEGREES */
            if (have_deg++)
                return a.key == 0 ? stk_spec_twice(P, a.ka, a.kb) : stk_spec_unexpected(P, st, a.t);
            double v[2];
            int n;
            if ((rc = stk_spec_range(P, va, vb, v, &n, "after 'rotate'")) < 0)
                return rc;
            if (n == 1) {
                if (v[0] < 0.0)
                    return stk_spec_err(P, va,
                                        "rotate DEGREES must be >= 0 (the angle is drawn from "
                                        "-DEGREES:DEGREES), got '%.*s'",
                                        STK_SPEC_TOKARG(P, va, vb));
                v[1] = v[0];
                v[0] = -v[0];
            }
            if (v[0] < -36000.0 || v[1] > 36000.0)
                return stk_spec_err(P, va, "rotate angles must be within -36000:36000 degrees");
            op->u.rotate.lo = v[0];
            op->u.rotate.hi = v[1];
            op->arg_col = va + 1;
        } else { /* fill= */
            uint32_t f[STK_SPEC_MAX_LIST];
            int n;
            if ((rc = stk_spec_ints(P, va, vb, 0, 0, 255, f, &n,
                                    "in fill=", "fill takes 1 value or 1 per channel")) < 0)
                return rc;
            op->u.rotate.nfill = (uint32_t)n;
            for (int k = 0; k < n; k++)
                op->u.rotate.fill[k] = (uint8_t)f[k];
            op->u.rotate.fill_col = va + 1;
        }
    }
    if (rc < 0)
        return rc;
    if (!have_deg)
        return stk_spec_err(P, missing_at(st),
                            "expected DEGREES after 'rotate' (D for -D:D, or A:B)");
    return 0;
}

static int parse_color_jitter(stk_spec_parser *P, const stk_spec_stage *st,
                              const stk_spec_opdef *def)
{
    static const char *const keys[5] = {"brightness", "contrast", "saturation", "hue", NULL};
    int rc = 0, npos = 0, seen[4] = {0, 0, 0, 0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    int *has[4] = {&op->u.jitter.has_b, &op->u.jitter.has_c, &op->u.jitter.has_s,
                   &op->u.jitter.has_h};
    double *rng[4] = {op->u.jitter.b, op->u.jitter.c, op->u.jitter.s, op->u.jitter.h};
    for (int k = 0; k < 3; k++)
        rng[k][0] = rng[k][1] = 1.0;
    stk_spec_arg a = {0};
    while ((rc = stk_spec_next_arg(P, st, keys, "brightness, contrast, saturation, hue", &a)) > 0) {
        int va = a.va, vb = a.vb, which = a.key;
        if (which < 0) { /* positional: B C S [H] in order */
            if (npos == 4)
                return stk_spec_unexpected(P, st, a.t);
            which = npos++;
            if (seen[which])
                return stk_spec_err(P, a.t->a, "'%s' is given twice", keys[which]);
        } else if (seen[which]) {
            return stk_spec_twice(P, a.ka, a.kb);
        }
        seen[which] = 1;
        char ctx[64];
        snprintf(ctx, sizeof ctx, "for %s", keys[which]);
        double v[2];
        int n;
        if ((rc = stk_spec_range(P, va, vb, v, &n, ctx)) < 0)
            return rc;
        if (which < 3) {
            if (n == 1) {
                if (v[0] < 0.0)
                    return stk_spec_err(P, va, "%s must be >= 0, got '%.*s'", keys[which],
                                        STK_SPEC_TOKARG(P, va, vb));
                double x = v[0];
                v[0] = 1.0 - x > 0.0 ? 1.0 - x : 0.0;
                v[1] = 1.0 + x;
            } else if (v[0] < 0.0) {
                return stk_spec_err(P, va, "a %s range must be >= 0, got '%.*s'", keys[which],
                                    STK_SPEC_TOKARG(P, va, vb));
            }
            *has[which] = !(v[0] == 1.0 && v[1] == 1.0);
        } else {
            if (n == 1) {
                if (v[0] < 0.0 || v[0] > 0.5)
                    return stk_spec_err(P, va, "hue must be from 0 to 0.5, got '%.*s'",
                                        STK_SPEC_TOKARG(P, va, vb));
                v[1] = v[0];
                v[0] = -v[0];
            } else if (v[0] < -0.5 || v[1] > 0.5) {
                return stk_spec_err(P, va, "a hue range must lie within -0.5:0.5, got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            }
            *has[which] = !(v[0] == 0.0 && v[1] == 0.0);
        }
        rng[which][0] = v[0];
        rng[which][1] = v[1];
        if (a.next == 1)
            op->arg_col = va + 1;
    }
    if (rc < 0)
        return rc;
    if (!st->nargs)
        return stk_spec_err(
            P, missing_at(st),
            "expected factors after 'color_jitter' (BRIGHTNESS CONTRAST SATURATION [HUE])");
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The rows                                                                */
/* ---------------------------------------------------------------------- */

#define PIXELS_WHY "(it works on pixel values)"

/* name, aliases, kind, order flags, why (order message), parse hook,
 * params, nparams, usage; then the torchvision class it mirrors (op.h) */
const stk_op_desc stk_op_pad = {.syntax = {"pad", NULL, STK_OP_PAD, STK_ORD_PIXELS,
                                           "(fill values are pixel values 0-255)", parse_pad, NULL,
                                           0, "N | LR,TB | L,T,R,B [fill=V] [mode=M]"},
    .torchvision = "Pad"};
const stk_op_desc stk_op_random_crop = {.syntax = {"random_crop", NULL, STK_OP_RANDOM_CROP, 0, NULL,
                                                   parse_crop, NULL, 0,
                                                   "H[,W] [padding=P] [fill=V] [mode=M]"},
    .torchvision = "RandomCrop"};
const stk_op_desc stk_op_center_crop = {
    .syntax = {"center_crop", NULL, STK_OP_CENTER_CROP, 0, NULL, parse_crop, NULL, 0, "H[,W]"},
    .torchvision = "CenterCrop"};
const stk_op_desc stk_op_flip = {
    .syntax = {"flip", "hflip", STK_OP_HFLIP, 0, NULL, parse_flip, NULL, 0, "[P]"},
    .torchvision = "RandomHorizontalFlip"};
const stk_op_desc stk_op_vflip = {
    .syntax = {"vflip", NULL, STK_OP_VFLIP, 0, NULL, parse_flip, NULL, 0, "[P]"},
    .torchvision = "RandomVerticalFlip"};
const stk_op_desc stk_op_normalize = {.syntax = {"normalize", NULL, STK_OP_NORMALIZE, STK_ORD_ONCE,
                                                 NULL, parse_normalize, NULL, 0,
                                                 "MEAN STD [scale=255] | PRESET | "
                                                 "mean=MEAN std=STD [scale=255]"},
    .torchvision = "Normalize"};
const stk_op_desc stk_op_to = {
    .syntax = {"to", NULL, STK_OP_TO, STK_ORD_LAST, NULL, parse_to, NULL, 0, "DTYPE [LAYOUT]"}};
const stk_op_desc stk_op_decode = {
    .syntax = {"decode", NULL, STK_OP_DECODE, STK_ORD_FIRST, NULL, parse_decode, NULL, 0, ""}};
const stk_op_desc stk_op_random_resized_crop = {
    .syntax = {"random_resized_crop", NULL, STK_OP_RANDOM_RESIZED_CROP, STK_ORD_PIXELS, PIXELS_WHY,
               parse_rrc, NULL, 0, "S | H,W [scale=LO:HI] [ratio=LO:HI] [interpolation=I]"},
    .torchvision = "RandomResizedCrop"};
const stk_op_desc stk_op_resize = {.syntax = {"resize", NULL, STK_OP_RESIZE, STK_ORD_PIXELS,
                                              PIXELS_WHY, parse_resize, NULL, 0,
                                              "S | H,W [interpolation=I]"},
    .torchvision = "Resize"};
const stk_op_desc stk_op_rotate = {.syntax = {"rotate", NULL, STK_OP_ROTATE,
                                              STK_ORD_PIXELS | STK_ORD_FLOAT, PIXELS_WHY,
                                              parse_rotate, NULL, 0, "DEGREES [fill=V]"},
    .torchvision = "RandomRotation"};
const stk_op_desc stk_op_color_jitter = {.syntax = {"color_jitter", NULL, STK_OP_COLOR_JITTER,
                                                    STK_ORD_PIXELS | STK_ORD_FLOAT, PIXELS_WHY,
                                                    parse_color_jitter, NULL, 0, "B C S [H]"},
    .torchvision = "ColorJitter"};
