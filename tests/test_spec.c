/*
 * test_spec.c — the pipeline spec language: every op and argument form, the
 * output shapes stk_spec_check reports, and every error with its column and
 * caret.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "ops/op.h"
#include "stoker/stoker.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Accepted specs: shapes, dtypes, layouts                                 */
/* ---------------------------------------------------------------------- */

typedef struct okcase {
    const char *spec;
    uint32_t h, w, c;
    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
} okcase;

static const okcase okcases[] = {
    {"", 32, 32, 3, {32, 32, 3}, STK_U8, STK_HWC},
    {" \t\n ", 32, 32, 3, {32, 32, 3}, STK_U8, STK_HWC},
    {"to u8 chw", 32, 32, 3, {3, 32, 32}, STK_U8, STK_CHW},
    {"to uint8", 28, 28, 1, {28, 28, 1}, STK_U8, STK_HWC},
    {"to f32", 28, 28, 1, {1, 28, 28}, STK_F32, STK_CHW},
    {"to float32 hwc", 28, 20, 1, {28, 20, 1}, STK_F32, STK_HWC},
    {"to float", 8, 9, 2, {2, 8, 9}, STK_F32, STK_CHW},
    {"to f16", 8, 9, 2, {2, 8, 9}, STK_F16, STK_CHW},
    {"to half hwc", 8, 9, 2, {8, 9, 2}, STK_F16, STK_HWC},
    {"to float16 chw", 8, 9, 2, {2, 8, 9}, STK_F16, STK_CHW},
    {"to bf16", 8, 9, 2, {2, 8, 9}, STK_BF16, STK_CHW},
    {"to bfloat16 hwc", 8, 9, 2, {8, 9, 2}, STK_BF16, STK_HWC},
    {"pad 4", 32, 32, 3, {40, 40, 3}, STK_U8, STK_HWC},
    {"pad 1,2", 10, 20, 3, {14, 22, 3}, STK_U8, STK_HWC},
    {"pad 1,2,3,4", 10, 20, 3, {16, 24, 3}, STK_U8, STK_HWC},
    {"pad 0", 10, 20, 3, {10, 20, 3}, STK_U8, STK_HWC},
    {"pad 2 fill=7 mode=constant", 10, 20, 1, {14, 24, 1}, STK_U8, STK_HWC},
    {"pad 2 fill=1,2,3", 10, 20, 3, {14, 24, 3}, STK_U8, STK_HWC},
    {"pad 9 mode=reflect", 10, 20, 3, {28, 38, 3}, STK_U8, STK_HWC},
    {"pad 10 mode=symmetric", 10, 20, 3, {30, 40, 3}, STK_U8, STK_HWC},
    {"pad 100 mode=edge", 10, 20, 3, {210, 220, 3}, STK_U8, STK_HWC},
    {"pad 4 | random_crop 32", 32, 32, 3, {32, 32, 3}, STK_U8, STK_HWC},
    {"random_crop 28,24 padding=2", 32, 32, 3, {28, 24, 3}, STK_U8, STK_HWC},
    {"random_crop 36 padding=2 fill=1 mode=edge", 32, 32, 3, {36, 36, 3}, STK_U8, STK_HWC},
    {"random_crop 32", 32, 32, 3, {32, 32, 3}, STK_U8, STK_HWC},
    {"center_crop 20 | flip | vflip 0.1 | normalize imagenet", 32, 32, 3, {3, 20, 20}, STK_F32,
     STK_CHW},
    {"center_crop 10,31", 32, 32, 3, {10, 31, 3}, STK_U8, STK_HWC},
    {"normalize mnist", 28, 28, 1, {1, 28, 28}, STK_F32, STK_CHW},
    {"normalize mnist", 28, 28, 3, {3, 28, 28}, STK_F32, STK_CHW}, /* one value broadcasts */
    {"normalize fashion-mnist | to f16", 28, 28, 1, {1, 28, 28}, STK_F16, STK_CHW},
    {"normalize fashion_mnist | to f32 hwc", 28, 28, 1, {28, 28, 1}, STK_F32, STK_HWC},
    {"normalize 0.5 0.5 | to f16 hwc", 5, 6, 4, {5, 6, 4}, STK_F16, STK_HWC},
    {"normalize 0.1,0.2 0.3,0.4", 5, 6, 2, {2, 5, 6}, STK_F32, STK_CHW},
    {"normalize mean=0.1,0.2,0.3 std=0.5", 5, 6, 3, {3, 5, 6}, STK_F32, STK_CHW},
    {"normalize std=0.5 mean=0.1", 5, 6, 3, {3, 5, 6}, STK_F32, STK_CHW},
    {"flip", 5, 6, 3, {5, 6, 3}, STK_U8, STK_HWC},
    {"hflip 0 | vflip 1 | flip p=0.25", 5, 6, 3, {5, 6, 3}, STK_U8, STK_HWC},
    {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw", 32, 32, 3, {3, 32, 32},
     STK_F32, STK_CHW},
    /* whitespace and case */
    {"pad 4 ,4 | random_crop 32 , 32", 32, 32, 3, {32, 32, 3}, STK_U8, STK_HWC},
    {"\tpad\t4\n|\nflip\n|random_crop 30", 32, 32, 3, {30, 30, 3}, STK_U8, STK_HWC},
    {"pad 4|flip|to f32", 32, 32, 3, {3, 40, 40}, STK_F32, STK_CHW},
    {"PAD 4 | Flip | NORMALIZE CIFAR10 | TO F32 HWC", 32, 32, 3, {40, 40, 3}, STK_F32, STK_HWC},
    {"pad 4 fill = 1 , 2 , 3 mode = Reflect", 32, 32, 3, {40, 40, 3}, STK_U8, STK_HWC},
    {"normalize 0.5 , 0.5 , 0.5   0.2, 0.2 ,0.2", 4, 4, 3, {3, 4, 4}, STK_F32, STK_CHW},
    {"flip p = .5 | vflip 1.", 4, 4, 3, {4, 4, 3}, STK_U8, STK_HWC},
    {"normalize 5e-1 2.5E-1", 4, 4, 3, {3, 4, 4}, STK_F32, STK_CHW},
    /* small std, still finite in float32 (each std with its own mean) */
    {"normalize 0.5 1e-30", 4, 4, 3, {3, 4, 4}, STK_F32, STK_CHW},
    {"normalize mean=1e30,0 std=1,1e-10", 4, 4, 2, {2, 4, 4}, STK_F32, STK_CHW},
};

static void test_accepts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof okcases / sizeof okcases[0]; i++) {
        const okcase *k = &okcases[i];
        int64_t shape[3] = {-1, -1, -1};
        stk_dtype dt = (stk_dtype)-1;
        stk_layout lay = (stk_layout)-1;
        int rc = stk_spec_check(k->spec, k->h, k->w, k->c, shape, &dt, &lay);
        if (rc != 0) {
            print_error("'%s' on %ux%ux%u: %s\n", k->spec, k->h, k->w, k->c, stk_errmsg());
            fail();
        }
        if (memcmp(shape, k->shape, sizeof shape) != 0 || dt != k->dt || lay != k->lay) {
            print_error("'%s': shape %lld,%lld,%lld dtype %d layout %d\n", k->spec,
                        (long long)shape[0], (long long)shape[1], (long long)shape[2], dt, lay);
            fail();
        }
    }
    /* Output pointers may be NULL. */
    assert_int_equal(stk_spec_check("flip", 4, 4, 3, NULL, NULL, NULL), 0);
}

/* The parsed values. */
static void test_parsed_values(void **state)
{
    (void)state;
    stk_spec s;
    assert_int_equal(stk_spec_parse("pad 1,2,3,4 fill=5,6,7 mode=symmetric", &s), 0);
    assert_int_equal(s.nops, 1);
    assert_int_equal(s.ops[0].kind, STK_OP_PAD);
    assert_int_equal(s.ops[0].u.pad.left, 1);
    assert_int_equal(s.ops[0].u.pad.top, 2);
    assert_int_equal(s.ops[0].u.pad.right, 3);
    assert_int_equal(s.ops[0].u.pad.bottom, 4);
    assert_int_equal(s.ops[0].u.pad.mode, STK_PAD_SYMMETRIC);
    assert_int_equal(s.ops[0].u.pad.nfill, 3);
    assert_int_equal(s.ops[0].u.pad.fill[2], 7);

    assert_int_equal(stk_spec_parse("pad 3,8", &s), 0);
    assert_int_equal(s.ops[0].u.pad.left, 3);
    assert_int_equal(s.ops[0].u.pad.right, 3);
    assert_int_equal(s.ops[0].u.pad.top, 8);
    assert_int_equal(s.ops[0].u.pad.bottom, 8);
    assert_int_equal(s.ops[0].u.pad.mode, STK_PAD_CONSTANT);
    assert_int_equal(s.ops[0].u.pad.nfill, 1);
    assert_int_equal(s.ops[0].u.pad.fill[0], 0);

    assert_int_equal(stk_spec_parse("pad 2 padding_mode=edge", &s), 0);
    assert_int_equal(s.ops[0].u.pad.mode, STK_PAD_EDGE);

    /* random_crop padding= is a pad before the crop */
    assert_int_equal(stk_spec_parse("random_crop 24,20 padding=4 fill=9 mode=reflect", &s), 0);
    assert_int_equal(s.nops, 2);
    assert_int_equal(s.ops[0].kind, STK_OP_PAD);
    assert_int_equal(s.ops[0].u.pad.left, 4);
    assert_int_equal(s.ops[0].u.pad.bottom, 4);
    assert_int_equal(s.ops[0].u.pad.fill[0], 9);
    assert_int_equal(s.ops[0].u.pad.mode, STK_PAD_REFLECT);
    assert_int_equal(s.ops[1].kind, STK_OP_RANDOM_CROP);
    assert_int_equal(s.ops[1].u.crop.height, 24);
    assert_int_equal(s.ops[1].u.crop.width, 20);

    assert_int_equal(stk_spec_parse("center_crop 7", &s), 0);
    assert_int_equal(s.ops[0].kind, STK_OP_CENTER_CROP);
    assert_int_equal(s.ops[0].u.crop.height, 7);
    assert_int_equal(s.ops[0].u.crop.width, 7);

    assert_int_equal(stk_spec_parse("flip | hflip 0.25 | vflip p=1", &s), 0);
    assert_int_equal(s.nops, 3);
    assert_int_equal(s.ops[0].kind, STK_OP_HFLIP);
    assert_true(s.ops[0].u.flip.p == 0.5);
    assert_int_equal(s.ops[1].kind, STK_OP_HFLIP);
    assert_true(s.ops[1].u.flip.p == 0.25);
    assert_int_equal(s.ops[2].kind, STK_OP_VFLIP);
    assert_true(s.ops[2].u.flip.p == 1.0);

    assert_int_equal(stk_spec_parse("normalize cifar10", &s), 0);
    assert_int_equal(s.ops[0].u.normalize.nmean, 3);
    assert_true(s.ops[0].u.normalize.mean[0] == 0.4914);
    assert_true(s.ops[0].u.normalize.std[2] == 0.2616);
    assert_int_equal(s.dtype, STK_F32);
    assert_int_equal(s.layout, STK_CHW);
    assert_true(s.has_normalize);

    assert_int_equal(stk_spec_parse("normalize imagenet", &s), 0);
    assert_true(s.ops[0].u.normalize.mean[1] == 0.456);
    assert_true(s.ops[0].u.normalize.std[1] == 0.224);
    assert_int_equal(stk_spec_parse("normalize mnist", &s), 0);
    assert_int_equal(s.ops[0].u.normalize.nmean, 1);
    assert_true(s.ops[0].u.normalize.mean[0] == 0.1307);
    assert_true(s.ops[0].u.normalize.std[0] == 0.3081);
    assert_int_equal(stk_spec_parse("normalize fashion-mnist", &s), 0);
    assert_true(s.ops[0].u.normalize.mean[0] == 0.2860);
    assert_true(s.ops[0].u.normalize.std[0] == 0.3530);

    assert_int_equal(stk_spec_parse("normalize 0.1,0.2 3 scale=1", &s), 0);
    assert_int_equal(s.ops[0].u.normalize.nmean, 2);
    assert_int_equal(s.ops[0].u.normalize.nstd, 1);
    assert_true(s.ops[0].u.normalize.mean[1] == 0.2);
    assert_true(s.ops[0].u.normalize.std[0] == 3.0);

    /* scale=255: the values in 0-255 units, stored as their 0-1 values */
    assert_int_equal(stk_spec_parse("normalize mean=123.7,116.3,103.5 std=58.4,57.1,57.4 scale=255", &s), 0);
    assert_int_equal(s.ops[0].u.normalize.nmean, 3);
    assert_true(s.ops[0].u.normalize.mean[0] == 123.7 / 255.0);
    assert_true(s.ops[0].u.normalize.std[2] == 57.4 / 255.0);
    assert_int_equal(stk_spec_parse("normalize scale=255 127.5 63.75", &s), 0);
    assert_true(s.ops[0].u.normalize.mean[0] == 0.5 && s.ops[0].u.normalize.std[0] == 0.25);

    assert_int_equal(stk_spec_parse("to f16 hwc", &s), 0);
    assert_int_equal(s.ops[0].kind, STK_OP_TO);
    assert_int_equal(s.dtype, STK_F16);
    assert_int_equal(s.layout, STK_HWC);

    assert_int_equal(stk_spec_parse("", &s), 0);
    assert_int_equal(s.nops, 0);
    assert_int_equal(s.dtype, STK_U8);
    assert_int_equal(s.layout, STK_HWC);
    assert_false(s.has_normalize);
}

/* Numbers do not depend on the host's LC_NUMERIC. */
static void test_locale_independent(void **state)
{
    (void)state;
    static const char *const locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    const char *set = NULL;
    for (size_t i = 0; i < sizeof locales / sizeof locales[0] && !set; i++)
        set = setlocale(LC_NUMERIC, locales[i]);
    stk_spec s;
    assert_int_equal(stk_spec_parse("flip 0.25", &s), 0);
    assert_true(s.ops[0].u.flip.p == 0.25);
    setlocale(LC_NUMERIC, "C");
}

/* ---------------------------------------------------------------------- */
/* Errors                                                                  */
/* ---------------------------------------------------------------------- */

#define P4 "pad 16777216 | pad 16777216 | pad 16777216 | pad 16777216 | "

typedef struct errcase {
    const char *spec;
    uint32_t h, w, c; /* 0: parse only */
    const char *at;   /* the caret goes under the first occurrence of this... */
    int col;          /* ...or at this column when at is NULL */
    const char *words[3];
} errcase;

static const errcase errcases[] = {
    {"pad x | flip", 0, 0, 0, "x", 0, {"expected a number after 'pad', got 'x'"}},
    /* a quoted token with joined whitespace keeps the message on three lines */
    {"flip 0.5 1,\n2", 0, 0, 0, "1,", 0, {"unexpected argument '1, 2' to 'flip'"}},
    {"foo 3", 0, 0, 0, "foo", 0, {"unknown op 'foo'", "known ops: pad, random_crop, center_crop, flip, hflip, vflip, normalize, to"}},
    {"pad 4 | filp", 0, 0, 0, "filp", 0, {"unknown op 'filp'", "did you mean 'flip'?"}},
    {"random_crops 32", 0, 0, 0, "random_crops", 0, {"did you mean 'random_crop'?"}},
    {"fill=3", 0, 0, 0, "fill", 0, {"unknown op 'fill=3'"}},
    {"pad", 0, 0, 0, NULL, 4, {"expected padding sizes after 'pad'"}},
    {"pad | flip", 0, 0, 0, "|", 0, {"expected padding sizes after 'pad'"}},
    {"pad fill=3", 0, 0, 0, "fill", 0, {"expected padding sizes after 'pad'"}},
    {"pad 1,2,3", 0, 0, 0, "1", 0, {"padding takes 1 (all sides), 2 (left/right,top/bottom) or 4", "got 3 values"}},
    {"pad 1.5", 0, 0, 0, "1.5", 0, {"expected a whole number from 0 to 16777216 after 'pad', got '1.5'"}},
    {"pad -1", 0, 0, 0, "-1", 0, {"whole number", "got '-1'"}},
    {"pad 99999999", 0, 0, 0, "9", 0, {"whole number from 0 to 16777216"}},
    {"pad 4 4", 0, 0, 0, "4 4", 2, {"unexpected argument '4' to 'pad'"}},
    {"pad 4 fill=256", 0, 0, 0, "256", 0, {"whole number from 0 to 255 in fill=, got '256'"}},
    {"pad 4 colour=3", 0, 0, 0, "colour", 0, {"unknown key 'colour' for 'pad' (known: fill, mode)"}},
    {"pad 4 mode=wrap", 0, 0, 0, "wrap", 0, {"unknown padding mode 'wrap'", "constant, edge, reflect, symmetric"}},
    {"pad 4 fill=1 fill=2", 0, 0, 0, "fill=2", 0, {"'fill' is given twice"}},
    {"pad 4 fill=", 0, 0, 0, NULL, 12, {"expected a value after 'fill='"}},
    {"pad =3", 0, 0, 0, "=", 0, {"expected a key before '='"}},
    {"pad 4 =3", 0, 0, 0, "4 =", 0, {"unknown key '4' for 'pad'"}},
    {"pad 4,,4", 0, 0, 0, ",4", 0, {"expected a number after ','"}},
    {"pad 4,", 0, 0, 0, NULL, 7, {"expected a number after ','"}},
    {"pad 4 |", 0, 0, 0, NULL, 8, {"expected an op after '|'"}},
    {"| pad 4", 0, 0, 0, "|", 0, {"expected an op before '|'"}},
    {"pad 4 || flip", 0, 0, 0, "| flip", 0, {"expected an op before '|'"}},
    {"flip 2", 0, 0, 0, "2", 0, {"flip probability must be from 0 to 1, got '2'"}},
    {"vflip -0.1", 0, 0, 0, "-", 0, {"flip probability must be from 0 to 1"}},
    {"flip 0.5 0.5", 0, 0, 0, "0.5 0.5", 4, {"unexpected argument '0.5' to 'flip'"}},
    {"flip q=0.5", 0, 0, 0, "q", 0, {"unknown key 'q' for 'flip' (known: p)"}},
    {"flip 1e999", 0, 0, 0, "1", 0, {"number out of range after 'flip'"}},
    {"flip 0x1", 0, 0, 0, "0", 0, {"expected a number after 'flip', got '0x1'"}},
    {"flip nan", 0, 0, 0, "nan", 0, {"expected a number after 'flip', got 'nan'"}},
    {"flip 1e", 0, 0, 0, "1e", 0, {"expected a number"}},
    {"flip .", 0, 0, 0, ".", 0, {"expected a number"}},
    {"random_crop", 0, 0, 0, NULL, 12, {"expected a crop size after 'random_crop' (H or H,W)"}},
    {"random_crop 0", 0, 0, 0, "0", 0, {"whole number from 1 to 16777216 after 'random_crop'"}},
    {"random_crop 1,2,3", 0, 0, 0, "1", 0, {"a crop size is H or H,W, got 3 values"}},
    {"random_crop 32 fill=3", 0, 0, 0, "fill", 0, {"'fill=' needs padding="}},
    {"random_crop 32 mode=edge", 0, 0, 0, "mode", 0, {"'mode=' needs padding="}},
    {"random_crop 32 padding=1,2,3", 0, 0, 0, "1,2", 0, {"padding takes 1"}},
    {"random_crop 32 pad_if_needed=1", 0, 0, 0, "pad_if", 0, {"unknown key 'pad_if_needed' for 'random_crop' (known: padding, fill, mode)"}},
    {"center_crop 32 padding=4", 0, 0, 0, "padding", 0, {"'center_crop' takes no key=value arguments"}},
    {"center_crop 3 4", 0, 0, 0, "4", 0, {"unexpected argument '4' to 'center_crop'"}},
    {"normalize", 0, 0, 0, NULL, 10, {"expected a preset (cifar10, imagenet, mnist, fashion-mnist) or MEAN STD after 'normalize'"}},
    {"normalize cifar", 0, 0, 0, "cifar", 0, {"unknown normalize preset 'cifar' (known: cifar10, imagenet, mnist, fashion-mnist)"}},
    {"normalize cifar10 0.5", 0, 0, 0, "0.5", 0, {"unexpected argument '0.5' to 'normalize'"}},
    {"normalize 0.5", 0, 0, 0, NULL, 14, {"expected the std values after the normalize mean"}},
    {"normalize 0.5 0", 0, 0, 0, "0.5 0", 4, {"std must be > 0, got '0'"}},
    {"normalize 0.5 0.2,-1", 0, 0, 0, "-1", 0, {"std must be > 0, got '-1'"}},
    {"normalize 0.5,x 0.2", 0, 0, 0, "x", 0, {"expected a number in the normalize mean, got 'x'"}},
    {"normalize 0.5 0.2 0.3", 0, 0, 0, "0.3", 0, {"unexpected argument '0.3' to 'normalize'"}},
    {"normalize 0.5 0.2 mean=0.1", 0, 0, 0, "mean", 0, {"give normalize either MEAN STD or mean= std=, not both"}},
    {"normalize mean=0.5", 0, 0, 0, "mean", 0, {"normalize needs both mean= and std="}},
    {"normalize mean=0.5 std=0", 0, 0, 0, "std=0", 4, {"std must be > 0"}},
    /* 1/(255 std) or mean/std past float32: the output would be inf */
    {"normalize 0.5 1e-45", 0, 0, 0, "1e-45", 0,
     {"std '1e-45' is too small: dividing by it overflows float32"}},
    {"normalize mean=0 std=0.5,1e-39", 0, 0, 0, "1e-39", 0, {"std '1e-39' is too small"}},
    {"normalize mean=1e30 std=1e-10", 0, 0, 0, "1e-10", 0, {"mean 1e+30 divided by std '1e-10' overflows float32"}},
    {"normalize mean=0.5 sd=1", 0, 0, 0, "sd", 0, {"unknown key 'sd' for 'normalize' (known: mean, std, scale)"}},
    /* 0-255 means and stds (DALI's spelling) are refused unless scale=255 says so */
    {"normalize mean=123.7,116.3,103.5 std=58.4,57.1,57.4", 0, 0, 0, "123.7", 0,
     {"normalize mean value 123.7: these look like 0-255 values: add scale=255 (or divide by 255)"}},
    {"normalize 0.5 0.2,57.1", 0, 0, 0, "57.1", 0, {"normalize std value 57.1: these look like 0-255"}},
    {"normalize 0.1,0.2 3", 0, 0, 0, "3", 0, {"these look like 0-255 values"}},
    {"normalize mean=127 std=64 scale=256", 0, 0, 0, "256", 0, {"scale= must be 255"}},
    {"normalize imagenet scale=255", 0, 0, 0, "scale", 0, {"not to a preset"}},
    {"normalize cifar10 | normalize mnist", 0, 0, 0, "normalize mnist", 0, {"normalize is given twice; give it once"}},
    {"normalize cifar10 | pad 4", 0, 0, 0, "pad", 0, {"pad must come before normalize (fill values are pixel values 0-255)"}},
    {"normalize cifar10 | random_crop 32 padding=4", 0, 0, 0, "padding", 0, {"pad must come before normalize"}},
    {"to f32 | flip", 0, 0, 0, "flip", 0, {"'flip' comes after 'to', but 'to' must be the last stage"}},
    {"to f32 | to u8", 0, 0, 0, "to u8", 0, {"'to' comes after 'to'"}},
    {"to", 0, 0, 0, NULL, 3, {"expected a dtype after 'to' (u8, f16, bf16 or f32)"}},
    {"to f64", 0, 0, 0, "f64", 0, {"unknown dtype 'f64' (known: u8, f16, bf16, f32)"}},
    {"to f32 nhwc", 0, 0, 0, "nhwc", 0, {"unknown layout 'nhwc' (known: hwc, chw)"}},
    {"to f32 chw x", 0, 0, 0, "x", 0, {"unexpected argument 'x' to 'to'"}},
    {"to dtype=f32", 0, 0, 0, "dtype", 0, {"'to' takes no key=value arguments, got 'dtype='"}},
    {"normalize cifar10 | to u8", 0, 0, 0, "u8", 0, {"u8 output cannot hold normalized values; use f16 or f32"}},
    {"pad 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1", 0, 0, 0, NULL, 37, {"too many arguments to 'pad' (at most 16)"}},
    /* shape-dependent */
    {"random_crop 40", 32, 32, 3, "40", 0, {"random_crop 40x40 (HxW) is larger than its input 32x32", "padding="}},
    {"pad 4 | random_crop 41,8", 32, 32, 3, "41", 0, {"random_crop 41x8 (HxW) is larger than its input 40x40"}},
    {"random_crop 32,33 padding=0", 32, 32, 3, "32", 0, {"larger than its input 32x32"}},
    {"center_crop 33,10", 32, 32, 3, "33", 0, {"center_crop 33x10 (HxW) is larger than its input 32x32", "does not pad"}},
    {"center_crop 8 | center_crop 9", 32, 32, 3, "9", 0, {"center_crop 9x9 (HxW) is larger than its input 8x8"}},
    {"normalize cifar10", 28, 28, 1, "cifar10", 0, {"normalize has 3 mean values but the image has 1 channel (give 1 value or 1)"}},
    {"normalize 0.5 0.1,0.2", 32, 32, 3, "0.1", 0, {"normalize has 2 std values but the image has 3 channels"}},
    {"normalize mean=0.5,0.5 std=0.1", 32, 32, 3, "0.5,", 0, {"2 mean values but the image has 3 channels"}},
    {"pad 2 fill=1,2", 32, 32, 3, "1,2", 0, {"fill has 2 values but the image has 3 channels (give 1 value or 3)"}},
    {"random_crop 8 padding=2 fill=1,2", 8, 8, 1, "1,2", 0, {"fill has 2 values but the image has 1 channel"}},
    {"pad 32 mode=reflect", 32, 32, 3, "32", 0, {"reflect padding must be smaller than the image it pads (32x32 HxW)"}},
    {"pad 0,8 mode=reflect", 8, 100, 3, "0,8", 0, {"reflect padding must be smaller"}},
    {"pad 33,0 mode=symmetric", 32, 32, 3, "33", 0, {"symmetric padding must not exceed the image it pads"}},
    {"pad 1 | pad 1 | pad 1 | pad 1 | pad 1", 300, 300, 1, NULL, 33, {"too many pad stages"}},
    {P4 P4 P4 P4 "flip", 1u << 29, 1u << 29, 1, NULL, 0, {"the padded image is too large"}},
};

/* The message: "pipeline spec, column N: what\n  <spec>\n  <spaces>^" */
static void check_error(const errcase *e, int rc)
{
    const char *msg = stk_errmsg();
    int col = e->at ? (int)(strstr(e->spec, e->at) - e->spec) + 1 + e->col : e->col;
    char head[64];
    snprintf(head, sizeof head, "pipeline spec, column %d: ", col);
    if (rc != STK_ESPEC) {
        print_error("'%s': rc %d, want STK_ESPEC\n%s\n", e->spec, rc, msg);
        fail();
    }
    if (e->col || e->at) {
        if (strncmp(msg, head, strlen(head)) != 0) {
            print_error("'%s': want '%s...', got\n%s\n", e->spec, head, msg);
            fail();
        }
    } else if (strncmp(msg, "pipeline spec, column ", 22) != 0) {
        print_error("'%s': got\n%s\n", e->spec, msg);
        fail();
    }
    for (int i = 0; i < 3 && e->words[i]; i++) {
        if (!strstr(msg, e->words[i])) {
            print_error("'%s': message lacks '%s':\n%s\n", e->spec, e->words[i], msg);
            fail();
        }
    }
    /* Second line: the spec (short ones in full); third: caret under col. */
    const char *l2 = strchr(msg, '\n');
    assert_non_null(l2);
    l2++;
    const char *l3 = strchr(l2, '\n');
    assert_non_null(l3);
    l3++;
    if (strlen(e->spec) <= 100) {
        char want[256];
        snprintf(want, sizeof want, "  %s\n", e->spec);
        for (char *p = want + 2; *p && p[1]; p++) /* whitespace shown as spaces */
            if (*p == '\t' || *p == '\n')
                *p = ' ';
        assert_int_equal(strncmp(l2, want, strlen(want)), 0);
        const char *caret = strchr(l3, '^');
        assert_non_null(caret);
        if (e->col || e->at) {
            if ((int)(caret - l3) != col + 1) {
                print_error("'%s': caret at %d, want %d\n%s\n", e->spec, (int)(caret - l3) - 1,
                            col, msg);
                fail();
            }
        }
        for (const char *p = l3; p < caret; p++)
            assert_int_equal(*p, ' ');
        assert_int_equal(caret[1], '\0');
    }
}

static void test_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof errcases / sizeof errcases[0]; i++) {
        const errcase *e = &errcases[i];
        int rc;
        if (e->h) {
            int64_t shape[3];
            rc = stk_spec_check(e->spec, e->h, e->w, e->c, shape, NULL, NULL);
        } else {
            stk_spec s;
            rc = stk_spec_parse(e->spec, &s);
            /* a parse error is also what stk_spec_check reports */
            int rc2 = stk_spec_check(e->spec, 64, 64, 3, NULL, NULL, NULL);
            assert_int_equal(rc2, STK_ESPEC);
            check_error(e, rc2);
        }
        check_error(e, rc);
    }
}

/* A long spec shows a window around the column. */
static void test_long_spec_window(void **state)
{
    (void)state;
    char spec[600] = "";
    for (int i = 0; i < 20; i++)
        strcat(spec, "flip | ");
    strcat(spec, "bogus 1 | ");
    for (int i = 0; i < 10; i++)
        strcat(spec, "flip | ");
    strcat(spec, "flip");
    assert_int_equal(stk_spec_parse(spec, &(stk_spec){0}), STK_ESPEC);
    const char *msg = stk_errmsg();
    int col = (int)(strstr(spec, "bogus") - spec) + 1;
    char head[64];
    snprintf(head, sizeof head, "pipeline spec, column %d: unknown op 'bogus'", col);
    assert_int_equal(strncmp(msg, head, strlen(head)), 0);
    const char *l2 = strchr(msg, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    assert_int_equal(strncmp(l2, "  ...", 5), 0);
    const char *caret = strchr(l3, '^');
    assert_non_null(caret);
    assert_int_equal(strncmp(l2 + (caret - l3), "bogus", 5), 0);
    assert_non_null(strstr(l2, "...\n"));
}

static void test_too_many_stages(void **state)
{
    (void)state;
    char spec[600] = "";
    for (int i = 0; i < 33; i++)
        strcat(spec, i ? " | flip" : "flip");
    assert_int_equal(stk_spec_parse(spec, &(stk_spec){0}), STK_ESPEC);
    assert_non_null(strstr(stk_errmsg(), "too many stages (at most 32)"));
    /* 32 is fine; random_crop padding= counts two */
    spec[strlen(spec) - 7] = '\0';
    assert_int_equal(stk_spec_parse(spec, &(stk_spec){0}), 0);
    char spec2[700] = "random_crop 4 padding=1";
    for (int i = 0; i < 31; i++)
        strcat(spec2, " | flip");
    assert_int_equal(stk_spec_parse(spec2, &(stk_spec){0}), STK_ESPEC);
}

/* The op table: every row's name and alias parses as that row, a name one
 * edit away is suggested, and the known-ops list is the table's names. */
static void test_op_table(void **state)
{
    (void)state;
    assert_true(stk_op_count >= 12);
    for (int i = 0; i < stk_op_count; i++) {
        const stk_spec_opdef *d = stk_op_table[i];
        stk_spec s;
        int rc = stk_spec_parse(d->name, &s);
        /* Missing arguments are fine; an unknown op is not. */
        if (rc < 0)
            assert_null(strstr(stk_errmsg(), "unknown op"));
        else
            assert_ptr_equal(s.ops[s.nops - 1].def, d);
        char typo[64];
        snprintf(typo, sizeof typo, "%sx", d->name);
        assert_int_equal(stk_spec_parse(typo, &s), STK_ESPEC);
        char want[96];
        snprintf(want, sizeof want, "did you mean '%s'?", d->name);
        if (!strstr(stk_errmsg(), want)) {
            print_error("'%s': %s\n", typo, stk_errmsg());
            fail();
        }
        assert_non_null(strstr(stk_errmsg(), "known ops: pad, random_crop,"));
        assert_non_null(strstr(stk_errmsg(), d->name));
    }
    stk_spec s;
    assert_int_equal(stk_spec_parse("hflip 1", &s), 0);
    assert_int_equal(s.ops[0].kind, STK_OP_HFLIP);
    assert_string_equal(s.ops[0].def->name, "flip");
}

static void test_bad_calls(void **state)
{
    (void)state;
    assert_int_equal(stk_spec_check(NULL, 8, 8, 3, NULL, NULL, NULL), STK_EINVAL);
    assert_int_equal(stk_spec_check("flip", 0, 8, 3, NULL, NULL, NULL), STK_EINVAL);
    assert_int_equal(stk_spec_check("flip", 8, 8, 0, NULL, NULL, NULL), STK_EINVAL);
    assert_int_equal(stk_spec_parse(NULL, &(stk_spec){0}), STK_EINVAL);
    /* rows wider than the kernel indexes */
    assert_int_equal(stk_spec_check("flip", 8, 1u << 29, 1, NULL, NULL, NULL), STK_ELIMIT);
    assert_int_equal(stk_spec_check("flip", 8, 1u << 20, 1025, NULL, NULL, NULL), STK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_parsed_values),
        cmocka_unit_test(test_locale_independent),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_long_spec_window),
        cmocka_unit_test(test_too_many_stages),
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_bad_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
