/*
 * fuzz_spec.c — libFuzzer target for the pipeline spec language: the lexer,
 * the generic walker over the op table, every op's argument parser
 * (src/ops/spec.c, src/ops/ops_builtin.c, src/ops/op_*.c), the plan
 * compilers (plan.c, image_plan.c) and one run of each plan that compiles.
 *
 * The input is the spec text (bytes up to the first NUL; any bytes at all,
 * whitespace and control characters included). Per input:
 *
 *  1. stk_spec_parse twice: both calls give the same code, and on success the
 *     same ops (the parser keeps no state between calls). A success has
 *     1..STK_SPEC_MAX_OPS ops (or none for an empty spec), each with its
 *     table row, kind == row kind, columns within the text (+1 for the end),
 *     a schema op's values within its params' ranges. A failure is STK_ESPEC
 *     whose message is "pipeline spec, column N: ..." followed by the spec
 *     line and a caret line with the caret at the shown column, or
 *     "pipeline spec is too long".
 *  2. stk_spec_check against a few input shapes (fixed RGB, gray, 4
 *     channels, and 0x0x0: images of any size); every parse error is also
 *     a check error, and a success gives a positive output shape.
 *  3. Each plan that compiles for a small fixed shape and gives at most
 *     OUT_MAX bytes per sample runs once on a synthetic image (fixed stream),
 *     so the draws, the point-op tables, the segments and the float tail run
 *     under ASan/UBSan; running twice on the same stream gives the same bytes.
 *
 * A failed check aborts. Work per input is bounded: the parser refuses specs
 * over 64 KiB, outputs are capped, and sizes in the spec are capped by the
 * parser (STK_SPEC_MAX_SIZE) and the compilers.
 */
#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"
#include "ops/op.h"
#include "ops/plan.h"

#include <stoker/stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_MAX (1u << 20) /* bytes per sample a run may write */

#define CHECK(c)                                                                              \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, "fuzz_spec: check failed: %s (line %d)\n", #c, __LINE__);         \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static stk_spec g_a, g_b; /* large: not on the stack */

/* The message of a failed parse: "pipeline spec, column N: what\n  <line>\n  <caret>". */
static void check_message(const char *text)
{
    const char *m = stk_errmsg();
    if (strncmp(m, "pipeline spec is too long", 25) == 0)
        return;
    int col = 0;
    CHECK(sscanf(m, "pipeline spec, column %d:", &col) == 1);
    CHECK(col >= 1 && (size_t)col <= strlen(text) + 1);
    const char *l2 = strchr(m, '\n');
    CHECK(l2 && strncmp(l2, "\n  ", 3) == 0);
    const char *l3 = strchr(l2 + 1, '\n');
    CHECK(l3 && strncmp(l3, "\n  ", 3) == 0);
    const char *caret = strchr(l3 + 1, '^');
    CHECK(caret && caret[1] == '\0');
    for (const char *p = l3 + 3; p < caret; p++)
        CHECK(*p == ' ');
    /* The shown line is the spec, or a window of it marked with "...". */
    size_t shown = (size_t)(l3 - (l2 + 3));
    CHECK((size_t)(caret - (l3 + 3)) <= shown);
}

static void check_ops(const char *text, const stk_spec *s)
{
    int len = (int)strlen(text);
    CHECK(s->nops >= 0 && s->nops <= STK_SPEC_MAX_OPS);
    for (int i = 0; i < s->nops; i++) {
        const stk_spec_op *o = &s->ops[i];
        CHECK(o->def != NULL);
        CHECK(o->kind == o->def->kind);
        CHECK(o->col >= 1 && o->col <= len + 1);
        CHECK(o->arg_col >= 1 && o->arg_col <= len + 1);
        if (!o->def->parse)
            for (int k = 0; k < o->def->nparams; k++) {
                const stk_spec_param *pm = &o->def->params[k];
                CHECK(o->u.num.v[k] >= pm->lo && o->u.num.v[k] <= pm->hi);
            }
        if (o->def->order & STK_ORD_FIRST)
            CHECK(i == 0);
        if (o->def->order & STK_ORD_LAST)
            CHECK(i == s->nops - 1);
    }
    CHECK(s->dtype == STK_U8 || s->dtype == STK_F16 || s->dtype == STK_F32 ||
          s->dtype == STK_BF16);
    CHECK(!(s->has_normalize && s->dtype == STK_U8));
}

static void fill_image(uint8_t *px, size_t n)
{
    for (size_t i = 0; i < n; i++)
        px[i] = (uint8_t)(i * 37u + (i >> 5));
}

static void run_plan(const char *text, uint32_t h, uint32_t w, uint32_t c)
{
    stk_plan *p = NULL;
    if (stk_plan_compile(text, h, w, c, &p) < 0)
        return;
    size_t bytes = 0;
    stk_plan_output(p, NULL, NULL, NULL, &bytes);
    if (bytes > 0 && bytes <= OUT_MAX) {
        uint8_t px[24 * 20 * 4];
        fill_image(px, (size_t)h * w * c);
        stk_image_view v = {.pixels = px, .height = h, .width = w, .channels = c,
                            .row_stride = (ptrdiff_t)w * c, .col_stride = (ptrdiff_t)c,
                            .chan_stride = 1};
        stk_plan_input in = {.image = &v, .encoded = NULL, .encoded_size = 0};
        uint8_t *o1 = malloc(bytes), *o2 = malloc(bytes);
        stk_scratch sc = {NULL, 0};
        CHECK(o1 && o2);
        stk_rng r1, r2;
        stk_rng_init(&r1, 7, 0, 1, 2);
        stk_rng_init(&r2, 7, 0, 1, 2);
        int rc1 = stk_plan_run_input(p, &in, &r1, o1, &sc);
        int rc2 = stk_plan_run_input(p, &in, &r2, o2, &sc);
        CHECK(rc1 == rc2);
        CHECK(rc1 < 0 || memcmp(o1, o2, bytes) == 0);
        stk_scratch_free(&sc);
        free(o1);
        free(o2);
    }
    stk_plan_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 70000)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    int ra = stk_spec_parse(text, &g_a);
    if (ra < 0)
        check_message(text);
    int rb = stk_spec_parse(text, &g_b);
    CHECK(ra == rb);
    if (ra == 0) {
        check_ops(text, &g_a);
        CHECK(g_a.nops == g_b.nops);
        CHECK(memcmp(g_a.ops, g_b.ops, sizeof g_a.ops[0] * (size_t)g_a.nops) == 0);
    } else {
        CHECK(ra == STK_ESPEC);
    }

    static const uint32_t shapes[][3] = {{24, 20, 3}, {9, 7, 1}, {6, 5, 4}, {0, 0, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t shape[3] = {0, 0, 0};
        int rc = stk_spec_check(text, shapes[k][0], shapes[k][1], shapes[k][2], shape, NULL, NULL);
        if (ra < 0)
            CHECK(rc == ra);
        if (rc == 0)
            CHECK(shape[0] > 0 && shape[1] > 0 && shape[2] > 0);
        else
            CHECK(rc == STK_ESPEC || rc == STK_ELIMIT || rc == STK_ENOMEM);
        if (rc == 0 && shapes[k][0])
            run_plan(text, shapes[k][0], shapes[k][1], shapes[k][2]);
    }
    free(text);
    return 0;
}
