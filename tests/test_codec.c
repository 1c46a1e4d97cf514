/*
 * test_codec.c — the image decoders (src/codec/): JPEG through libjpeg-turbo,
 * PNG through libspng, format sniffing, regions, DCT scaling, limits and
 * hostile files.
 *
 * Every image here is made by the test: pixels from a formula this file owns
 * (smooth gradients plus deterministic noise), encoded with libjpeg's
 * compressor or libspng's encoder. Three independent references are used:
 *
 *   - the source pixels: a JPEG decode must be close to them (PSNR bound),
 *     a PNG decode must equal them exactly (after the documented
 *     conversion: alpha dropped, 16-bit high byte, palette looked up,
 *     gray replicated);
 *   - a plain libjpeg decode written here (no crop, no skip, the same
 *     settings the codec documents: JDCT_ISLOW, fancy upsampling), which a
 *     full decode must equal exactly at every scale; CMYK is checked
 *     against a floating-point form of PIL's formula;
 *   - the codec's own full decode, which a region decode must equal
 *     exactly in the same window, for many random regions at every scale
 *     (iMCU-unaligned, at the image edges, one pixel, the whole image).
 *
 * Hostile inputs assert the exact code and a telling message. The
 * 65500x65500 header runs under AddressSanitizer's max_allocation_size_mb
 * (set below), so a decoder that allocated from it would abort the test.
 * PIL comparisons live in tests/python/test_codec_pil.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec.h"
#include "codec/codec_internal.h"
#include "codec/codec_write.h"
#include "core/error.h"
#include "format/dataset.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <spng.h>

/* Any single allocation over 512 MiB aborts the test under ASan. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=512"; }

/* ------------------------------------------------------------------------ */
/* Source images                                                            */
/* ------------------------------------------------------------------------ */

/* An h x w x c image: smooth waves per channel plus +-8 of noise. */
static uint8_t *make_pixels(unsigned w, unsigned h, unsigned c, uint64_t seed)
{
    uint8_t *px = malloc((size_t)w * h * c);
    uint8_t *noise = malloc((size_t)w * h * c);
    assert_non_null(px);
    assert_non_null(noise);
    tu_fill_random(noise, (size_t)w * h * c, seed);
    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++)
            for (unsigned k = 0; k < c; k++) {
                size_t i = ((size_t)y * w + x) * c + k;
                double v = 128 + 90 * sin(x / (9.0 + 3 * k) + k) * cos(y / (7.0 + k) - k) +
                           (noise[i] % 17) - 8;
                px[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    free(noise);
    return px;
}

/* ------------------------------------------------------------------------ */
/* JPEG encoding and a reference decode (plain libjpeg)                     */
/* ------------------------------------------------------------------------ */

typedef struct jpeg_opts {
    int comps;           /* 1 gray, 3 RGB, 4 CMYK */
    int quality;
    int hs, vs;          /* luma sampling factors: 1,1 4:4:4; 2,2 4:2:0; 2,1 4:2:2 */
    int progressive;
    int restart;         /* restart interval in MCUs, 0 = none */
    int adobe;           /* CMYK: write the Adobe marker (inverted convention) */
    int ycck;            /* CMYK: store as YCCK */
    int partial;         /* progressive, luma AC 1..5 never refined: the
                            decoder's block smoothing kicks in */
} jpeg_opts;

/* enc_jpeg writes optimised Huffman tables (only the codes used) while set. */
static int enc_optimize;

/* Encoded bytes (malloc'd by libjpeg; free()). libjpeg's default error
 * handler exits, which is a test failure. */
static uint8_t *enc_jpeg(const uint8_t *px, unsigned w, unsigned h, const jpeg_opts *o,
                         size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *buf = NULL;
    unsigned long len = 0;

    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &len);
    c.image_width = w;
    c.image_height = h;
    c.input_components = o->comps;
    c.in_color_space = o->comps == 1 ? JCS_GRAYSCALE : o->comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, o->quality, TRUE);
    if (o->comps == 4) {
        jpeg_set_colorspace(&c, o->ycck ? JCS_YCCK : JCS_CMYK);
        c.write_Adobe_marker = o->adobe ? TRUE : FALSE;
    }
    if (o->comps >= 3) {
        c.comp_info[0].h_samp_factor = o->hs;
        c.comp_info[0].v_samp_factor = o->vs;
        for (int k = 1; k < c.num_components; k++)
            c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
        if (o->comps == 4) /* K at full resolution, like C */
            c.comp_info[3].h_samp_factor = o->hs, c.comp_info[3].v_samp_factor = o->vs;
    }
    c.dct_method = JDCT_ISLOW;
    c.optimize_coding = enc_optimize ? TRUE : FALSE;
    c.restart_interval = (unsigned)o->restart;
    if (o->progressive)
        jpeg_simple_progression(&c);
    if (o->partial) {
        /* Luma AC 1..5 sent at half precision (Al = 1) and never refined:
         * valid, and the inexact low coefficients make libjpeg smooth the
         * blocks from their neighbours' DC. */
        static jpeg_scan_info scans[5] = {{3, {0, 1, 2}, 0, 0, 0, 0},
                                          {1, {0}, 1, 5, 0, 1},
                                          {1, {0}, 6, 63, 0, 0},
                                          {1, {1}, 1, 63, 0, 0},
                                          {1, {2}, 1, 63, 0, 0}};
        c.scan_info = scans;
        c.num_scans = 5;
    }
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * o->comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *size = len;
    return buf;
}

/* A whole decode at 1/scale with plain libjpeg, no crop or skip, as the
 * codec documents its settings: RGB (or raw CMYK when cmyk_raw). */
static uint8_t *ref_jpeg(const uint8_t *d, size_t n, unsigned scale, int cmyk_raw, unsigned *w,
                         unsigned *h, int *adobe)
{
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr e;
    unsigned comps = cmyk_raw ? 4 : 3;
    uint8_t *out;

    c.err = jpeg_std_error(&e);
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, d, (unsigned long)n);
    assert_int_equal(jpeg_read_header(&c, TRUE), JPEG_HEADER_OK);
    c.out_color_space = cmyk_raw ? JCS_CMYK : JCS_RGB;
    c.dct_method = JDCT_ISLOW;
    c.scale_num = 1;
    c.scale_denom = scale;
    jpeg_start_decompress(&c);
    *w = c.output_width;
    *h = c.output_height;
    if (adobe)
        *adobe = c.saw_Adobe_marker;
    out = malloc((size_t)*w * *h * comps);
    assert_non_null(out);
    while (c.output_scanline < c.output_height) {
        JSAMPROW row = out + (size_t)c.output_scanline * *w * comps;
        jpeg_read_scanlines(&c, &row, 1);
    }
    jpeg_finish_decompress(&c);
    jpeg_destroy_decompress(&c);
    return out;
}

/* PIL's CMYK -> RGB, as floating point: with inv = 255 - ink (the Adobe
 * byte as stored, 255 - stored otherwise), R = round(inv_c * inv_k / 255). */
static void ref_cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t n, int adobe)
{
    for (size_t i = 0; i < n; i++) {
        double k = adobe ? cmyk[i * 4 + 3] : 255 - cmyk[i * 4 + 3];
        for (int c = 0; c < 3; c++) {
            double v = adobe ? cmyk[i * 4 + c] : 255 - cmyk[i * 4 + c];
            rgb[i * 3 + c] = (uint8_t)floor(v * k / 255.0 + 0.5);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Checking views                                                           */
/* ------------------------------------------------------------------------ */

/* The view must be w x h x 3 and equal the dense HWC `ref` (ref_w wide) at
 * (x0, y0) onwards, at every byte. */
static void expect_view_eq(const stk_image_view *v, const uint8_t *ref, unsigned ref_w,
                           unsigned x0, unsigned y0, unsigned w, unsigned h, const char *what)
{
    if (v->width != w || v->height != h || v->channels != 3)
        print_error("%s: view %ux%ux%u, expected %ux%ux3\n", what, v->width, v->height,
                    v->channels, w, h);
    assert_int_equal(v->width, w);
    assert_int_equal(v->height, h);
    assert_int_equal(v->channels, 3);
    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++)
            for (unsigned c = 0; c < 3; c++) {
                uint8_t got = v->pixels[(ptrdiff_t)y * v->row_stride +
                                        (ptrdiff_t)x * v->col_stride +
                                        (ptrdiff_t)c * v->chan_stride];
                uint8_t want = ref[(((size_t)(y0 + y)) * ref_w + x0 + x) * 3 + c];
                if (got != want) {
                    print_error("%s: pixel (y %u, x %u, c %u): %u, expected %u\n", what, y, x,
                                c, got, want);
                    fail();
                }
            }
}

/* Copy a view into a dense HWC buffer the caller frees. */
static uint8_t *dense(const stk_image_view *v)
{
    uint8_t *p = malloc((size_t)v->width * v->height * 3 + 1);
    assert_non_null(p);
    for (unsigned y = 0; y < v->height; y++)
        for (unsigned x = 0; x < v->width; x++)
            for (unsigned c = 0; c < 3; c++)
                p[((size_t)y * v->width + x) * 3 + c] =
                    v->pixels[(ptrdiff_t)y * v->row_stride + (ptrdiff_t)x * v->col_stride +
                              (ptrdiff_t)c * v->chan_stride];
    return p;
}

static void expect_fail(const uint8_t *d, size_t n, const stk_codec_limits *lim,
                        const stk_rect *r, unsigned scale, int code, const char *needle)
{
    stk_scratch s = {0};
    stk_image_view v;
    int rc = stk_image_decode(d, n, lim, r, scale, &s, &v);
    if (rc != code || (needle && !strstr(stk_errmsg(), needle)))
        print_error("decode: rc %d (%s), expected %d; message '%s' (wanted '%s')\n", rc,
                    stk_strerror(rc), code, stk_errmsg(), needle ? needle : "");
    assert_int_equal(rc, code);
    if (needle)
        assert_non_null(strstr(stk_errmsg(), needle));
    assert_null(v.pixels);
    if (getenv("STK_TEST_VERBOSE"))
        fprintf(stderr, "  %s -> %s\n", stk_strerror(rc), stk_errmsg());
    stk_scratch_free(&s);
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++)
        se += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    if (se == 0)
        return 99;
    return 10 * log10(255.0 * 255.0 / (se / (double)n));
}

/* Deterministic small PRNG for regions. */
static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* ------------------------------------------------------------------------ */
/* JPEG tests                                                               */
/* ------------------------------------------------------------------------ */

typedef struct jpeg_case {
    const char *name;
    jpeg_opts o;
    unsigned w, h;
} jpeg_case;

static const jpeg_case jpeg_cases[] = {
    {"baseline 4:4:4 q96", {3, 96, 1, 1, 0, 0, 0, 0, 0}, 203, 157},
    {"baseline 4:2:0 q85", {3, 85, 2, 2, 0, 0, 0, 0, 0}, 203, 157},
    {"baseline 4:2:2 q90", {3, 90, 2, 1, 0, 0, 0, 0, 0}, 161, 98},
    {"progressive 4:2:0", {3, 90, 2, 2, 1, 0, 0, 0, 0}, 203, 157},
    {"progressive 4:4:4", {3, 92, 1, 1, 1, 0, 0, 0, 0}, 130, 77},
    {"restart 4:2:0", {3, 90, 2, 2, 0, 3, 0, 0, 0}, 150, 101},
    {"grayscale", {1, 90, 1, 1, 0, 0, 0, 0, 0}, 177, 133},
    {"grayscale progressive", {1, 90, 1, 1, 1, 0, 0, 0, 0}, 97, 61},
    {"CMYK Adobe", {4, 90, 1, 1, 0, 0, 1, 0, 0}, 120, 90},
    {"YCCK Adobe 4:2:0", {4, 90, 2, 2, 0, 0, 1, 1, 0}, 121, 91},
    {"CMYK no Adobe marker", {4, 90, 1, 1, 0, 0, 0, 0, 0}, 64, 48},
    /* Unusual sampling: 4:4:0, 4:1:1, h3v1, and h2v4 / h4v2, where
     * libjpeg-turbo 2.1's crop mis-sizes IDCT-scaled chroma at 1/2 and 1/4
     * (the codec decodes those at full width; found by fuzzing). */
    {"4:4:0 (h1v2)", {3, 90, 1, 2, 0, 0, 0, 0, 0}, 203, 157},
    {"4:1:1 (h4v1)", {3, 90, 4, 1, 0, 0, 0, 0, 0}, 203, 157},
    {"h3v1", {3, 90, 3, 1, 0, 0, 0, 0, 0}, 101, 57},
    {"h2v4", {3, 90, 2, 4, 0, 0, 0, 0, 0}, 203, 157},
    {"h4v2 progressive", {3, 90, 4, 2, 1, 0, 0, 0, 0}, 203, 157},
    /* Block smoothing reads two blocks to the left: a crop must leave room
     * (found by fuzzing). */
    {"progressive, luma AC 1..5 unrefined", {3, 90, 2, 2, 1, 0, 0, 0, 1}, 203, 157},
    /* Restart intervals that divide the MCU row: crops decode through a
     * window JPEG of the covered intervals (jpeg_window.c). */
    {"window 4:4:4, R=1", {3, 96, 1, 1, 0, 1, 0, 0, 0}, 203, 157},
    {"window 4:4:4, R=4", {3, 96, 1, 1, 0, 4, 0, 0, 0}, 224, 157},
    {"window 4:2:0, R=4", {3, 90, 2, 2, 0, 4, 0, 0, 0}, 190, 131},
    {"window 4:2:0, R=row", {3, 90, 2, 2, 0, 13, 0, 0, 0}, 203, 157},
    {"window 4:2:2, R=2", {3, 90, 2, 1, 0, 2, 0, 0, 0}, 160, 98},
    {"window gray, R=3", {1, 90, 1, 1, 0, 3, 0, 0, 0}, 168, 133},
    {"window h2v4, R=1", {3, 95, 2, 4, 0, 1, 0, 0, 0}, 203, 157},
    {"window 4:1:1, R=1", {3, 90, 4, 1, 0, 1, 0, 0, 0}, 203, 157},
    {"tiny 4:2:0", {3, 90, 2, 2, 0, 0, 0, 0, 0}, 1, 1},
    {"thin 4:2:0", {3, 90, 2, 2, 0, 0, 0, 0, 0}, 3, 40},
};
#define N_JPEG_CASES (sizeof jpeg_cases / sizeof jpeg_cases[0])

static uint8_t *case_jpeg(const jpeg_case *jc, uint64_t seed, size_t *n, uint8_t **src)
{
    uint8_t *px = make_pixels(jc->w, jc->h, (unsigned)jc->o.comps, seed);
    uint8_t *d = enc_jpeg(px, jc->w, jc->h, &jc->o, n);
    if (src)
        *src = px;
    else
        free(px);
    return d;
}

/* The expected full decode at 1/scale, from the plain libjpeg reference. */
static uint8_t *expected_full(const jpeg_case *jc, const uint8_t *d, size_t n, unsigned scale,
                              unsigned *w, unsigned *h)
{
    int adobe = 0;
    if (jc->o.comps != 4)
        return ref_jpeg(d, n, scale, 0, w, h, NULL);
    uint8_t *raw = ref_jpeg(d, n, scale, 1, w, h, &adobe);
    uint8_t *rgb = malloc((size_t)*w * *h * 3 + 1);
    assert_non_null(rgb);
    assert_int_equal(adobe, jc->o.adobe);
    ref_cmyk_to_rgb(raw, rgb, (size_t)*w * *h, adobe);
    free(raw);
    return rgb;
}

static void test_jpeg_full_matches_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_JPEG_CASES; i++) {
        const jpeg_case *jc = &jpeg_cases[i];
        size_t n;
        uint8_t *src;
        uint8_t *d = case_jpeg(jc, 100 + i, &n, &src);
        stk_scratch s = {0};
        stk_image_view v;
        stk_image_info info;

        assert_int_equal(stk_image_sniff(d, n), STK_IMAGE_JPEG);
        assert_int_equal(stk_image_probe(d, n, NULL, &info), 0);
        assert_int_equal(info.format, STK_IMAGE_JPEG);
        assert_int_equal(info.width, jc->w);
        assert_int_equal(info.height, jc->h);
        assert_int_equal(info.components, jc->o.comps);
        assert_int_equal(info.progressive, jc->o.progressive);
        assert_int_equal(info.cmyk, jc->o.comps == 4);

        for (unsigned scale = 1; scale <= 8; scale *= 2) {
            unsigned w, h;
            uint8_t *want = expected_full(jc, d, n, scale, &w, &h);
            char what[96];
            snprintf(what, sizeof what, "%s, full decode at 1/%u", jc->name, scale);
            assert_int_equal(w, (jc->w + scale - 1) / scale);
            assert_int_equal(h, (jc->h + scale - 1) / scale);
            /* CMYK: the float reference equals PIL's integer form exactly
             * (inv_c * inv_k / 255 is never a tie), so this is exact too. */
            assert_int_equal(stk_image_decode(d, n, NULL, NULL, scale, &s, &v), 0);
            expect_view_eq(&v, want, w, 0, 0, w, h, what);
            free(want);
        }

        /* Close to the source (lossy, so a PSNR bound): RGB and gray only. */
        if (jc->o.comps != 4 && jc->w > 8) {
            uint8_t *got;
            size_t npx = (size_t)jc->w * jc->h;
            uint8_t *src3 = malloc(npx * 3);
            assert_non_null(src3);
            for (size_t p = 0; p < npx; p++)
                for (int c = 0; c < 3; c++)
                    src3[p * 3 + c] = src[p * (size_t)jc->o.comps + (jc->o.comps == 1 ? 0 : c)];
            assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &s, &v), 0);
            got = dense(&v);
            double q = psnr(got, src3, npx * 3);
            if (q < 30)
                print_error("%s: PSNR %.1f dB against the source\n", jc->name, q);
            assert_true(q >= 30);
            free(got);
            free(src3);
        }
        stk_scratch_free(&s);
        free(src);
        free(d);
    }
}

/* Region decodes equal the same window of the full decode, exactly. */
static void test_jpeg_regions_exact(void **state)
{
    uint64_t seed = 12345;
    (void)state;
    for (size_t i = 0; i < N_JPEG_CASES; i++) {
        const jpeg_case *jc = &jpeg_cases[i];
        size_t n;
        uint8_t *d = case_jpeg(jc, 200 + i, &n, NULL);
        stk_scratch full_s = {0}, s = {0};
        const unsigned W = jc->w, H = jc->h;

        for (unsigned scale = 1; scale <= 8; scale *= 2) {
            stk_image_view fv, v;
            uint8_t *full;
            assert_int_equal(stk_image_decode(d, n, NULL, NULL, scale, &full_s, &fv), 0);
            full = dense(&fv);
            for (int t = 0; t < 60; t++) {
                stk_rect r;
                char what[160];
                r.width = 1 + rnd(&seed) % W;
                r.height = 1 + rnd(&seed) % H;
                r.x = rnd(&seed) % (W - r.width + 1);
                r.y = rnd(&seed) % (H - r.height + 1);
                switch (t) { /* fixed shapes first: whole, edges, corners, tiny */
                case 0: r = (stk_rect){0, 0, W, H}; break;
                case 1: r = (stk_rect){W - 1, H - 1, 1, 1}; break;
                case 2: r = (stk_rect){0, 0, 1, 1}; break;
                case 3: r.x = W - r.width; break;
                case 4: r.y = H - r.height; break;
                case 5: /* one iMCU exactly, aligned */
                    if (W >= 32 && H >= 16)
                        r = (stk_rect){16, 8, 16, 8};
                    break;
                case 6: if (W > 33) r = (stk_rect){15, 0, 17, H}; break;
                case 7: r.width = 1; r.x = rnd(&seed) % W; break;
                default: break;
                }
                if (t >= 8 && t < 24) {
                    /* Narrow full-height columns near iMCU boundaries: a
                     * crop whose chroma is 1-2 samples wide would switch
                     * libjpeg to box upsampling (found by fuzzing). */
                    static const unsigned xs[] = {0, 1, 15, 16, 17, 31, 32, 33};
                    r.x = xs[(t - 8) % 8] < W ? xs[(t - 8) % 8] : W - 1;
                    r.width = 1 + (unsigned)(t - 8) / 8 + (t % 3 == 0);
                    if (r.x + r.width > W)
                        r.x = W - r.width > W ? 0 : W - r.width;
                    if (r.width > W)
                        r.width = W, r.x = 0;
                    r.y = 0;
                    r.height = H;
                }
                if (r.width == 0 || r.height == 0 || r.x + r.width > W || r.y + r.height > H)
                    r = (stk_rect){0, 0, W, H};
                snprintf(what, sizeof what, "%s, region %ux%u at (%u,%u), 1/%u", jc->name,
                         r.width, r.height, r.x, r.y, scale);
                int rc = stk_image_decode(d, n, NULL, &r, scale, &s, &v);
                if (rc)
                    print_error("%s: %s\n", what, stk_errmsg());
                assert_int_equal(rc, 0);
                unsigned x0 = r.x / scale, y0 = r.y / scale;
                unsigned x1 = (r.x + r.width + scale - 1) / scale;
                unsigned y1 = (r.y + r.height + scale - 1) / scale;
                expect_view_eq(&v, full, fv.width, x0, y0, x1 - x0, y1 - y0, what);
            }
            free(full);
        }
        stk_scratch_free(&full_s);
        stk_scratch_free(&s);
        free(d);
    }
}

/* Offset of the first marker `m` (FF m) in d, or 0. */
static size_t find_marker(const uint8_t *d, size_t n, uint8_t m)
{
    for (size_t i = 2; i + 1 < n; i++)
        if (d[i] == 0xFF && d[i + 1] == m)
            return i;
    return 0;
}

/* The window (jpeg_window.c) is really taken for crops of the "window"
 * cases, is a valid smaller JPEG of the right size, and declines whatever
 * does not qualify; test_jpeg_regions_exact checks its pixels. */
static void test_jpeg_window(void **state)
{
    (void)state;
    stk_scratch buf = {0}, s = {0};
    stk_jpeg_window win;
    stk_image_info info;
    int windowed = 0;
    for (size_t i = 0; i < N_JPEG_CASES; i++) {
        const jpeg_case *jc = &jpeg_cases[i];
        size_t n;
        uint8_t *d = case_jpeg(jc, 300 + i, &n, NULL);
        stk_rect mid = {jc->w / 3, jc->h / 3, jc->w / 3 ? jc->w / 3 : 1, jc->h / 3 ? jc->h / 3 : 1};
        stk_rect all = {0, 0, jc->w, jc->h};
        int rc = stk_jpeg_window_build(d, n, 1u << 28, &mid, &buf, &win);
        int expect = !strncmp(jc->name, "window", 6);
        if (rc != expect)
            print_error("%s: window %d, expected %d\n", jc->name, rc, expect);
        assert_int_equal(rc, expect);
        assert_int_equal(stk_jpeg_window_build(d, n, 1u << 28, &all, &buf, &win), 0);
        if (!expect) {
            free(d);
            continue;
        }
        windowed++;
        /* Rebuild (the whole-image call above declined without touching
         * win) and look at it: smaller, a JPEG containing the crop. */
        assert_int_equal(stk_jpeg_window_build(d, n, 1u << 28, &mid, &buf, &win), 1);
        assert_true(win.size < n);
        assert_true(win.x <= mid.x && win.y <= mid.y);
        assert_int_equal(stk_image_probe(buf.data, win.size, NULL, &info), 0);
        assert_true(win.x + info.width >= mid.x + mid.width);
        assert_true(win.y + info.height >= mid.y + mid.height);
        assert_true(info.width < jc->w || info.height < jc->h);
        /* Over the pixel limit: declined (the ordinary path says why). */
        assert_int_equal(stk_jpeg_window_build(d, n, (uint64_t)jc->w * jc->h - 1, &mid, &buf,
                                               &win),
                         0);
        /* Damage the window relies on: a restart marker renumbered, or the
         * stream cut before the crop's last row. Declined, and the ordinary
         * decode then reports the damage. */
        uint8_t *bad = malloc(n);
        assert_non_null(bad);
        memcpy(bad, d, n);
        size_t rst = find_marker(bad, n, 0xD0);
        assert_true(rst > 0);
        bad[rst + 1] = 0xD5;
        assert_int_equal(stk_jpeg_window_build(bad, n, 1u << 28, &mid, &buf, &win), 0);
        assert_int_equal(stk_image_decode(bad, n, NULL, NULL, 1, &s, &(stk_image_view){0}),
                         STK_EDATA);
        size_t sos = find_marker(d, n, 0xDA);
        size_t cut = sos + (n - sos) / 3;
        assert_int_equal(stk_jpeg_window_build(d, cut, 1u << 28, &mid, &buf, &win), 0);
        assert_int_equal(stk_image_decode(d, cut, NULL, &mid, 1, &s, &(stk_image_view){0}),
                         STK_EDATA);
        free(bad);
        free(d);
    }
    assert_true(windowed >= 8);
    stk_scratch_free(&buf);
    stk_scratch_free(&s);
}

/* The sync index (jpeg_sync.c): crops of JPEGs without restart markers are
 * decoded from synthesised windows (test_jpeg_regions_exact checks their
 * pixels for every sampling and scale); the index is made once per file
 * and walked only as far as a crop needs; files it cannot serve decline. */
static void test_jpeg_sync(void **state)
{
    (void)state;
    stk_scratch buf = {0}, s = {0}, fs = {0};
    stk_jpeg_window win;
    stk_image_info info;
    stk_jpeg_index_stats c0, c1;
    jpeg_opts o420 = {3, 90, 2, 2, 0, 0, 0, 0, 0};
    const unsigned W = 203, H = 157;
    uint8_t *px = make_pixels(W, H, 3, 901);
    size_t n;
    uint8_t *d = enc_jpeg(px, W, H, &o420, &n);
    stk_rect top = {60, 20, 70, 30}, low = {40, 120, 100, 30}, all = {0, 0, W, H};

    /* First crop: an index is made (walked down to the crop only), the
     * window is smaller and holds the crop. */
    stk_jpeg_index_stats_get(&c0);
    assert_int_equal(stk_jpeg_sync_window(d, n, 1u << 28, &top, &buf, &win), 1);
    stk_jpeg_index_stats_get(&c1);
    assert_int_equal(c1.files, c0.files + 1);
    assert_true(c1.budget > 0);
    assert_int_equal(c1.windows, c0.windows + 1);
    assert_true(c1.bytes > c0.bytes);
    assert_true(win.size < n);
    assert_int_equal(stk_image_probe(buf.data, win.size, NULL, &info), 0);
    assert_true(info.height < H);
    assert_true(win.x <= top.x && win.y <= top.y);
    assert_true(win.x + info.width >= top.x + top.width);
    assert_true(win.y + info.height >= top.y + top.height);
    assert_false(info.progressive);
    /* Later crops reuse it (extended further down for `low`); the whole
     * image is declined (nothing to save). */
    assert_int_equal(stk_jpeg_sync_window(d, n, 1u << 28, &low, &buf, &win), 1);
    assert_int_equal(stk_jpeg_sync_window(d, n, 1u << 28, &top, &buf, &win), 1);
    assert_int_equal(stk_jpeg_sync_window(d, n, 1u << 28, &all, &buf, &win), 0);
    stk_jpeg_index_stats_get(&c0);
    assert_int_equal(c0.files, c1.files);
    assert_int_equal(c0.windows, c1.windows + 2);
    /* Over the pixel limit: declined (the ordinary path says why). */
    assert_int_equal(stk_jpeg_sync_window(d, n, (uint64_t)W * H - 1, &top, &buf, &win), 0);

    /* Through the decoder: the same pixels as a full decode. */
    stk_image_view fv, v;
    assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &fs, &fv), 0);
    uint8_t *full = dense(&fv);
    const stk_rect *rs[] = {&top, &low};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(stk_image_decode(d, n, NULL, rs[i], 1, &s, &v), 0);
        expect_view_eq(&v, full, W, rs[i]->x, rs[i]->y, rs[i]->width, rs[i]->height, "sync");
    }
    free(full);

    /* Cut short: a crop above the cut is served (the walk stops before
     * it, as libjpeg would); one below it finds the end, declines, and the
     * ordinary decode reports the damage. */
    size_t sos = find_marker(d, n, 0xDA);
    size_t cut = sos + (n - sos) / 2;
    uint8_t *cutd = malloc(cut);
    assert_non_null(cutd);
    memcpy(cutd, d, cut);
    assert_int_equal(stk_jpeg_sync_window(cutd, cut, 1u << 28, &top, &buf, &win), 1);
    stk_jpeg_index_stats_get(&c0);
    assert_int_equal(stk_jpeg_sync_window(cutd, cut, 1u << 28, &low, &buf, &win), 0);
    stk_jpeg_index_stats_get(&c1);
    assert_int_equal(c1.declined, c0.declined + 1);
    assert_int_equal(stk_image_decode(cutd, cut, NULL, &low, 1, &s, &v), STK_EDATA);
    free(cutd);

    /* Not served: restart markers (jpeg_window.c's), progressive, CMYK,
     * and optimised tables that lack a DC category (a flat image codes
     * few). */
    static const jpeg_opts others[] = {{3, 90, 2, 2, 0, 4, 0, 0, 0},
                                       {3, 90, 2, 2, 1, 0, 0, 0, 0},
                                       {4, 90, 1, 1, 0, 0, 1, 0, 0}};
    for (int i = 0; i < 3; i++) {
        uint8_t *px4 = make_pixels(W, H, (unsigned)others[i].comps, 902 + (uint64_t)i);
        size_t m;
        uint8_t *e = enc_jpeg(px4, W, H, &others[i], &m);
        assert_int_equal(stk_jpeg_sync_window(e, m, 1u << 28, &top, &buf, &win), 0);
        free(e);
        free(px4);
    }
    uint8_t *flat = calloc((size_t)W * H, 3);
    assert_non_null(flat);
    size_t m;
    enc_optimize = 1;
    uint8_t *e = enc_jpeg(flat, W, H, &o420, &m);
    enc_optimize = 0;
    assert_int_equal(stk_jpeg_sync_window(e, m, 1u << 28, &top, &buf, &win), 0);
    free(e); /* the standard tables have every category */
    e = enc_jpeg(flat, W, H, &o420, &m);
    assert_int_equal(stk_jpeg_sync_window(e, m, 1u << 28, &top, &buf, &win), 1);
    free(e);
    free(flat);

    free(d);
    free(px);
    stk_scratch_free(&buf);
    stk_scratch_free(&s);
    stk_scratch_free(&fs);
}

/* stk_jpeg_scan_check (decoder nvjpeg's guard): a restart-marked JPEG is
 * complete (1) as written, damaged (-1) when cut short (with an EOI
 * appended, as nvJPEG would take it), with a restart marker gone or
 * renumbered, or without its EOI; a JPEG without restart markers, or
 * progressive, or CMYK cannot be checked (0). libjpeg-turbo agrees on the
 * damage: each damaged file fails to decode. */
static void test_jpeg_scan_check(void **state)
{
    (void)state;
    stk_scratch s = {0};
    int checked = 0;
    for (size_t i = 0; i < N_JPEG_CASES; i++) {
        const jpeg_case *jc = &jpeg_cases[i];
        size_t n;
        uint8_t *d = case_jpeg(jc, 700 + i, &n, NULL);
        int checkable = jc->o.restart && !jc->o.progressive && jc->o.comps != 4;
        int rc = stk_jpeg_scan_check(d, n);
        if (rc != checkable)
            print_error("%s: scan check %d, expected %d\n", jc->name, rc, checkable);
        assert_int_equal(rc, checkable);
        if (!checkable) {
            free(d);
            continue;
        }
        checked++;
        uint8_t *bad = malloc(n + 2);
        assert_non_null(bad);
        /* cut in half, EOI appended */
        size_t sos = find_marker(d, n, 0xDA);
        size_t half = sos + (n - sos) / 2;
        memcpy(bad, d, half);
        bad[half] = 0xFF;
        bad[half + 1] = 0xD9;
        assert_int_equal(stk_jpeg_scan_check(bad, half + 2), -1);
        assert_int_equal(stk_image_decode(bad, half + 2, NULL, NULL, 1, &s, &(stk_image_view){0}),
                         STK_EDATA);
        /* the first restart marker taken out */
        size_t rst = find_marker(d, n, 0xD0);
        assert_true(rst > sos);
        memcpy(bad, d, rst);
        memcpy(bad + rst, d + rst + 2, n - rst - 2);
        assert_int_equal(stk_jpeg_scan_check(bad, n - 2), -1);
        /* renumbered */
        memcpy(bad, d, n);
        bad[rst + 1] = 0xD3;
        assert_int_equal(stk_jpeg_scan_check(bad, n), -1);
        /* no EOI */
        assert_int_equal(stk_jpeg_scan_check(d, n - 2), -1);
        free(bad);
        free(d);
    }
    assert_true(checked >= 9);
    /* Not a JPEG at all, or nothing after the SOS: 0 or -1, never a read
     * past the end. */
    static const uint8_t junk[] = {0xFF, 0xD8, 0xFF};
    assert_int_equal(stk_jpeg_scan_check(junk, sizeof junk), 0);
    stk_scratch_free(&s);
}

/* stk_jpeg_add_restarts (pack --restart): the same pixels at every scale,
 * a DRI that divides the MCU row (so crops get windows), CMYK left alone,
 * damage reported. */
static void test_jpeg_add_restarts(void **state)
{
    (void)state;
    stk_scratch out = {0}, a = {0}, b = {0}, buf = {0};
    stk_jpeg_window win;
    for (size_t i = 0; i < N_JPEG_CASES; i++) {
        const jpeg_case *jc = &jpeg_cases[i];
        size_t n, m;
        uint8_t *d = case_jpeg(jc, 400 + i, &n, NULL);
        for (unsigned maxr = 1; maxr <= 8; maxr += 3) {
            int rc = stk_jpeg_add_restarts(d, n, 1u << 28, maxr, &out, &m);
            if (jc->o.comps == 4 || jc->o.partial) {
                /* CMYK/YCCK, and progressive files whose coefficients are
                 * not all refined (libjpeg smooths those blocks; a
                 * baseline copy would not be): kept as they are. */
                assert_int_equal(rc, 0);
                break;
            }
            assert_int_equal(rc, 1);
            assert_true(find_marker(out.data, m, 0xDD) > 0);
            assert_int_equal(find_marker(out.data, m, 0xC2), 0); /* now baseline */
            for (unsigned scale = 1; scale <= 8; scale *= 2) {
                stk_image_view va, vb;
                char what[128];
                snprintf(what, sizeof what, "%s rewritten (R <= %u), 1/%u", jc->name, maxr, scale);
                assert_int_equal(stk_image_decode(d, n, NULL, NULL, scale, &a, &va), 0);
                assert_int_equal(stk_image_decode(out.data, m, NULL, NULL, scale, &b, &vb), 0);
                uint8_t *want = dense(&va);
                expect_view_eq(&vb, want, va.width, 0, 0, va.width, va.height, what);
                free(want);
            }
            if (jc->w >= 48 && jc->h >= 48) {
                stk_rect mid = {jc->w / 3, jc->h / 3, jc->w / 3, jc->h / 3};
                assert_int_equal(stk_jpeg_window_build(out.data, m, 1u << 28, &mid, &buf, &win),
                                 1);
            }
        }
        /* Truncated: libjpeg's reason, as STK_EDATA. */
        if (jc->o.comps != 4 && !jc->o.partial && n > 200) {
            int rc = stk_jpeg_add_restarts(d, n / 2, 1u << 28, 4, &out, &m);
            if (rc != STK_EDATA)
                print_error("%s: truncated file rewritten (%d)\n", jc->name, rc);
            assert_int_equal(rc, STK_EDATA);
            assert_non_null(strstr(stk_errmsg(), "JPEG"));
            assert_int_equal(stk_jpeg_add_restarts(d, n, (uint64_t)jc->w * jc->h - 1, 4, &out, &m),
                             STK_ELIMIT);
        }
        free(d);
    }
    assert_int_equal(stk_jpeg_add_restarts((const uint8_t *)"x", 1, 100, 0, &out, &(size_t){0}),
                     STK_EINVAL);
    stk_scratch_free(&out);
    stk_scratch_free(&a);
    stk_scratch_free(&b);
    stk_scratch_free(&buf);
}

/* A JPEG of w x h whose SOF claims new_w x new_h. */
static uint8_t *jpeg_with_dims(unsigned new_w, unsigned new_h, size_t *n)
{
    jpeg_opts o = {3, 90, 2, 2, 0, 0, 0, 0, 0};
    uint8_t *px = make_pixels(32, 32, 3, 7);
    uint8_t *d = enc_jpeg(px, 32, 32, &o, n);
    free(px);
    for (size_t i = 2; i + 9 < *n; i++)
        if (d[i] == 0xFF && (d[i + 1] == 0xC0 || d[i + 1] == 0xC2)) {
            d[i + 5] = (uint8_t)(new_h >> 8);
            d[i + 6] = (uint8_t)new_h;
            d[i + 7] = (uint8_t)(new_w >> 8);
            d[i + 8] = (uint8_t)new_w;
            return d;
        }
    fail_msg("no SOF marker");
    return NULL;
}

static void test_jpeg_limits(void **state)
{
    stk_codec_limits lim = {0};
    stk_image_info info;
    size_t n;
    uint8_t *d;
    (void)state;

    /* 65500 x 65500: 4.3 Gpixels, over the default 2^28. Under ASan any
     * allocation over 512 MiB aborts, so this also proves that nothing was
     * sized from the header. */
    d = jpeg_with_dims(65500, 65500, &n);
    assert_int_equal(stk_image_probe(d, n, NULL, &info), STK_ELIMIT);
    assert_int_equal(info.width, 65500);
    assert_int_equal(info.height, 65500);
    assert_non_null(strstr(stk_errmsg(), "65500x65500"));
    expect_fail(d, n, NULL, NULL, 1, STK_ELIMIT, "max_pixels");
    expect_fail(d, n, NULL, NULL, 8, STK_ELIMIT, "max_pixels"); /* scaling does not help */
    lim.max_pixels = (uint64_t)65500 * 65500; /* allowed: then the data is short */
    expect_fail(d, n, &lim, &(stk_rect){0, 0, 8, 8}, 8, STK_EDATA, "JPEG: ");
    free(d);

    /* A custom limit. */
    d = jpeg_with_dims(32, 32, &n);
    lim.max_pixels = 32 * 32 - 1;
    expect_fail(d, n, &lim, NULL, 1, STK_ELIMIT, "1023");
    lim.max_pixels = 32 * 32;
    stk_scratch s = {0};
    stk_image_view v;
    assert_int_equal(stk_image_decode(d, n, &lim, NULL, 1, &s, &v), 0);
    stk_scratch_free(&s);
    free(d);
}

static void test_jpeg_hostile(void **state)
{
    jpeg_opts base = {3, 95, 1, 1, 0, 0, 0, 0, 0};
    jpeg_opts prog = {3, 90, 2, 2, 1, 0, 0, 0, 0};
    uint8_t *px = make_pixels(160, 120, 3, 9);
    size_t n, pn;
    uint8_t *d = enc_jpeg(px, 160, 120, &base, &n);
    uint8_t *p = enc_jpeg(px, 160, 120, &prog, &pn);
    uint8_t *buf = malloc(n + pn + 64);
    stk_scratch s = {0};
    stk_image_view v;
    (void)state;
    assert_non_null(buf);

    /* Cut at 50%: libjpeg's "Premature end" warning is an error here. */
    expect_fail(d, n / 2, NULL, NULL, 1, STK_EDATA, "JPEG: Premature end of JPEG file");
    expect_fail(d, n / 2, NULL, NULL, 4, STK_EDATA, "Premature end");
    expect_fail(p, pn / 2, NULL, NULL, 1, STK_EDATA, "Premature end");
    /* A progressive file is read whole before output: any region fails. */
    expect_fail(p, pn / 2, NULL, &(stk_rect){0, 0, 8, 8}, 1, STK_EDATA, "Premature end");
    /* A baseline region entirely above the cut decodes (documented). */
    assert_int_equal(stk_image_decode(d, n / 2, NULL, &(stk_rect){0, 0, 160, 16}, 1, &s, &v),
                     0);
    /* Cut everywhere from 3 bytes on, down to a missing EOI marker (the
     * entropy decoder reads up to the marker, so it sees the end): never a
     * crash, never success. */
    for (size_t cut = 3; cut < n; cut += (cut < n - 200 ? 97 : 1)) {
        int rc = stk_image_decode(d, cut, NULL, NULL, 1, &s, &v);
        if (rc != STK_EDATA)
            print_error("cut at %zu of %zu: rc %d\n", cut, n, rc);
        assert_int_equal(rc, STK_EDATA);
    }
    assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &s, &v), 0);

    /* Corrupt entropy data (every 7th byte of a run set to 0xFF, others
     * flipped): a decoder error or warning, either way STK_EDATA. */
    memcpy(buf, d, n);
    for (size_t k = n / 2; k < n / 2 + 64; k++)
        buf[k] = k % 7 == 0 ? 0xFF : (uint8_t)(buf[k] ^ 0x5A);
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "JPEG: ");

    /* Random bytes after a JPEG signature; then not even a signature. */
    buf[0] = 0xFF, buf[1] = 0xD8, buf[2] = 0xFF;
    tu_fill_random(buf + 3, 5000, 77);
    expect_fail(buf, 5003, NULL, NULL, 1, STK_EDATA, "JPEG: ");
    tu_fill_random(buf, 5000, 78);
    buf[0] = 0x00;
    expect_fail(buf, 5000, NULL, NULL, 1, STK_EDATA, "not a JPEG, PNG, WebP, BMP, TIFF");
    expect_fail(buf, 0, NULL, NULL, 1, STK_EDATA, "empty");
    expect_fail(NULL, 0, NULL, NULL, 1, STK_EDATA, "empty");
    expect_fail(d, 2, NULL, NULL, 1, STK_EDATA, "JPEG: truncated after 2 bytes");
    memcpy(buf, "\xff\xd8\x00\x01", 4);
    expect_fail(buf, 4, NULL, NULL, 1, STK_EDATA, "JPEG: no marker after SOI");
    memcpy(buf, "GIF89a", 6);
    expect_fail(buf, 100, NULL, NULL, 1, STK_EDATA, "GIF");
    /* The lists in these messages are the codec table's names, in its order. */
    expect_fail((const uint8_t *)"ab", 2, NULL, NULL, 1, STK_EDATA,
                "image: not a JPEG, PNG, WebP, BMP, TIFF or GIF image (2 bytes starting 61 62)");
    expect_fail((const uint8_t *)"P6\n1 1\n", 7, NULL, NULL, 1, STK_EDATA,
                "image: PNM data, which stoker does not decode (JPEG, PNG, WebP, BMP, TIFF and "
                "GIF only)");
    expect_fail((const uint8_t *)"II+\0\x08\0\0\0", 8, NULL, NULL, 1, STK_EDATA,
                "image: BigTIFF data, which stoker does not decode");
    expect_fail((const uint8_t *)"\xff", 1, NULL, NULL, 1, STK_EDATA,
                "JPEG: truncated after 1 bytes");
    memcpy(buf, "RIFF\0\0\0\0WEBPVP8 ", 16);
    expect_fail(buf, 100, NULL, NULL, 1, STK_EDATA, "WebP");

    /* Tables-only / header-only: SOI + EOI. */
    buf[0] = 0xFF, buf[1] = 0xD8, buf[2] = 0xFF, buf[3] = 0xD9;
    expect_fail(buf, 4, NULL, NULL, 1, STK_EDATA, "JPEG: ");

    /* An unknown JFIF major version is a tolerated (metadata) warning. */
    memcpy(buf, d, n);
    for (size_t k = 0; k + 11 < n; k++)
        if (memcmp(buf + k, "JFIF\0", 5) == 0) {
            buf[k + 5] = 2; /* version 2.x */
            break;
        }
    assert_int_equal(stk_image_decode(buf, n, NULL, NULL, 1, &s, &v), 0);

    stk_scratch_free(&s);
    free(buf);
    free(px);
    free(d);
    free(p);
}

/* A progressive script of more than 500 scans (DC, then every AC
 * coefficient on its own, first at Al = 9, refined bit by bit): valid JPEG,
 * hostile cost. */
static void test_jpeg_scan_limit(void **state)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    jpeg_scan_info *scans = calloc(1 + 63 * 10, sizeof *scans);
    uint8_t *px = make_pixels(16, 16, 1, 3);
    unsigned char *buf = NULL;
    unsigned long len = 0;
    int ns = 0;
    (void)state;
    assert_non_null(scans);

    scans[ns++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
    for (int k = 1; k <= 63; k++) {
        scans[ns++] = (jpeg_scan_info){1, {0}, k, k, 0, 9};
        for (int al = 8; al >= 0; al--)
            scans[ns++] = (jpeg_scan_info){1, {0}, k, k, al + 1, al};
    }
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &len);
    c.image_width = c.image_height = 16;
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    c.scan_info = scans;
    c.num_scans = ns;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < 16) {
        JSAMPROW row = px + c.next_scanline * 16;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    assert_true(ns > 500);

    expect_fail(buf, len, NULL, NULL, 1, STK_EDATA, "more than 500 scans");
    free(buf);
    free(scans);
    free(px);
}

static void test_bad_arguments(void **state)
{
    jpeg_opts o = {3, 90, 1, 1, 0, 0, 0, 0, 0};
    uint8_t *px = make_pixels(40, 30, 3, 1);
    size_t n;
    uint8_t *d = enc_jpeg(px, 40, 30, &o, &n);
    stk_scratch s = {0};
    stk_image_view v;
    (void)state;

    expect_fail(d, n, NULL, NULL, 3, STK_EINVAL, "scale_denom 3");
    expect_fail(d, n, NULL, NULL, 0, STK_EINVAL, "scale_denom 0");
    expect_fail(d, n, NULL, NULL, 16, STK_EINVAL, "scale_denom 16");
    expect_fail(d, n, NULL, &(stk_rect){0, 0, 0, 5}, 1, STK_EINVAL, "empty region");
    expect_fail(d, n, NULL, &(stk_rect){30, 0, 11, 5}, 1, STK_EINVAL, "outside the 40x30");
    expect_fail(d, n, NULL, &(stk_rect){0, 29, 1, 2}, 1, STK_EINVAL, "outside");
    expect_fail(d, n, NULL, &(stk_rect){UINT32_MAX, 0, 2, 2}, 1, STK_EINVAL, "outside");
    assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, NULL, &v), STK_EINVAL);
    assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &s, NULL), STK_EINVAL);
    assert_int_equal(stk_image_probe(d, n, NULL, NULL), STK_EINVAL);
    assert_string_equal(stk_image_format_name(STK_IMAGE_JPEG), "JPEG");
    assert_string_equal(stk_image_format_name(STK_IMAGE_PNG), "PNG");
    assert_string_equal(stk_image_format_name(STK_IMAGE_UNKNOWN), "unknown");
    assert_int_equal(stk_image_sniff(NULL, 10), STK_IMAGE_UNKNOWN);
    assert_int_equal(stk_image_sniff(d, 2), STK_IMAGE_UNKNOWN);
    /* The codec table's lookups (codec_table.c): an id no row has is unknown. */
    assert_string_equal(stk_image_format_name((stk_image_format)99), "unknown");
    assert_int_equal(stk_image_format_scales(STK_IMAGE_JPEG),
                     (1u << 1) | (1u << 2) | (1u << 4) | (1u << 8));
    assert_int_equal(stk_image_format_scales(STK_IMAGE_PNG), 1u << 1);
    assert_int_equal(stk_image_format_scales(STK_IMAGE_UNKNOWN), 0);
    assert_int_equal(stk_image_format_scales((stk_image_format)99), 0);
    stk_scratch_free(&s);
    free(d);
    free(px);
}

/* ------------------------------------------------------------------------ */
/* PNG                                                                      */
/* ------------------------------------------------------------------------ */

/* Encode raw PNG rows (already in the file's sample layout, 16-bit
 * big-endian) with libspng; palette may be NULL. */
static uint8_t *enc_png(const uint8_t *rows, unsigned w, unsigned h, int color_type, int depth,
                        int interlace, const uint8_t *plte_rgb, int plte_n, size_t *n)
{
    struct spng_ihdr ihdr = {0};
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    size_t bits_per_px, row_bytes;
    int err;
    uint8_t *out;
    int channels = color_type == 0 || color_type == 3 ? 1 : color_type == 4 ? 2
                 : color_type == 2 ? 3 : 4;

    assert_non_null(ctx);
    spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    ihdr.width = w;
    ihdr.height = h;
    ihdr.color_type = (uint8_t)color_type;
    ihdr.bit_depth = (uint8_t)depth;
    ihdr.interlace_method = (uint8_t)interlace;
    assert_int_equal(spng_set_ihdr(ctx, &ihdr), 0);
    if (plte_rgb) {
        struct spng_plte plte = {0};
        plte.n_entries = (uint32_t)plte_n;
        for (int i = 0; i < plte_n; i++) {
            plte.entries[i].red = plte_rgb[i * 3];
            plte.entries[i].green = plte_rgb[i * 3 + 1];
            plte.entries[i].blue = plte_rgb[i * 3 + 2];
            plte.entries[i].alpha = 255;
        }
        assert_int_equal(spng_set_plte(ctx, &plte), 0);
    }
    bits_per_px = (size_t)channels * (size_t)depth;
    row_bytes = (w * bits_per_px + 7) / 8;
    /* SPNG_FMT_RAW: samples as in the file (16-bit big-endian). */
    err = spng_encode_image(ctx, rows, row_bytes * h, SPNG_FMT_RAW, SPNG_ENCODE_FINALIZE);
    if (err)
        print_error("spng_encode_image: %s\n", spng_strerror(err));
    assert_int_equal(err, 0);
    out = spng_get_png_buffer(ctx, n, &err);
    assert_int_equal(err, 0);
    assert_non_null(out);
    spng_ctx_free(ctx);
    return out;
}

typedef struct png_case {
    const char *name;
    int color_type, depth, interlace;
} png_case;

/* Build the file's rows for a case and the RGB8 the decoder must give,
 * from random samples. */
static uint8_t *png_case_data(const png_case *pc, unsigned w, unsigned h, uint64_t seed,
                              uint8_t **expect_rgb, size_t *n)
{
    int ch = pc->color_type == 0 || pc->color_type == 3 ? 1 : pc->color_type == 4 ? 2
           : pc->color_type == 2 ? 3 : 4;
    size_t row_bytes = ((size_t)w * ch * pc->depth + 7) / 8;
    uint8_t *rows = calloc(h, row_bytes);
    uint8_t *samples = malloc((size_t)w * h * ch * 2);
    uint8_t *rgb = malloc((size_t)w * h * 3);
    uint8_t plte[256 * 3];
    uint8_t *d;
    assert_non_null(rows);
    assert_non_null(samples);
    assert_non_null(rgb);
    tu_fill_random(samples, (size_t)w * h * ch * 2, seed);
    tu_fill_random(plte, sizeof plte, seed + 1);

    for (unsigned y = 0; y < h; y++)
        for (unsigned x = 0; x < w; x++) {
            uint8_t *o = rgb + ((size_t)y * w + x) * 3;
            for (int c = 0; c < ch; c++) {
                size_t si = (((size_t)y * w + x) * ch + c) * 2;
                unsigned v;
                if (pc->depth == 16) {
                    v = (unsigned)samples[si] << 8 | samples[si + 1];
                    rows[y * row_bytes + ((size_t)x * ch + c) * 2] = (uint8_t)(v >> 8);
                    rows[y * row_bytes + ((size_t)x * ch + c) * 2 + 1] = (uint8_t)v;
                    v >>= 8; /* the documented reduction: high byte */
                } else if (pc->depth == 8) {
                    v = samples[si];
                    rows[y * row_bytes + (size_t)x * ch + c] = (uint8_t)v;
                } else { /* 1, 2, 4 bits, one channel (gray or palette) */
                    unsigned bits = (unsigned)pc->depth, max = (1u << bits) - 1;
                    size_t bit = (size_t)x * bits;
                    v = samples[si] & max;
                    rows[y * row_bytes + bit / 8] |=
                        (uint8_t)(v << (8 - bits - bit % 8));
                    if (pc->color_type == 0)
                        v = v * 255 / max; /* scaled to 8 bits */
                }
                if (pc->color_type == 3) {
                    unsigned idx = pc->depth == 8 ? v % 200 : v;
                    if (pc->depth == 8)
                        rows[y * row_bytes + x] = (uint8_t)idx;
                    memcpy(o, plte + idx * 3, 3);
                } else if (pc->color_type == 0 || pc->color_type == 4) {
                    if (c == 0)
                        o[0] = o[1] = o[2] = (uint8_t)v; /* gray; alpha dropped */
                } else if (c < 3) {
                    o[c] = (uint8_t)v; /* RGB; alpha dropped */
                }
            }
        }
    d = enc_png(rows, w, h, pc->color_type, pc->depth, pc->interlace,
                pc->color_type == 3 ? plte : NULL,
                pc->color_type == 3 ? (pc->depth == 8 ? 200 : 1 << pc->depth) : 0, n);
    free(rows);
    free(samples);
    *expect_rgb = rgb;
    return d;
}

static const png_case png_cases[] = {
    {"RGB8", 2, 8, 0},          {"RGBA8", 6, 8, 0},         {"gray8", 0, 8, 0},
    {"gray+alpha8", 4, 8, 0},   {"palette8", 3, 8, 0},      {"palette4", 3, 4, 0},
    {"palette1", 3, 1, 0},      {"gray1", 0, 1, 0},         {"gray2", 0, 2, 0},
    {"gray4", 0, 4, 0},         {"RGB16", 2, 16, 0},        {"RGBA16", 6, 16, 0},
    {"gray16", 0, 16, 0},       {"RGB8 interlaced", 2, 8, 1},
    {"palette4 interlaced", 3, 4, 1},
};

static void test_png_exact(void **state)
{
    uint64_t seed = 99;
    (void)state;
    for (size_t i = 0; i < sizeof png_cases / sizeof png_cases[0]; i++) {
        const png_case *pc = &png_cases[i];
        const unsigned W = 53, H = 41;
        uint8_t *want;
        size_t n;
        uint8_t *d = png_case_data(pc, W, H, 1000 + i, &want, &n);
        stk_scratch s = {0};
        stk_image_view v;
        stk_image_info info;
        char what[96];

        assert_int_equal(stk_image_sniff(d, n), STK_IMAGE_PNG);
        assert_int_equal(stk_image_probe(d, n, NULL, &info), 0);
        assert_int_equal(info.format, STK_IMAGE_PNG);
        assert_int_equal(info.width, W);
        assert_int_equal(info.height, H);
        snprintf(what, sizeof what, "PNG %s", pc->name);
        assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &s, &v), 0);
        expect_view_eq(&v, want, W, 0, 0, W, H, what);

        for (int t = 0; t < 30; t++) {
            stk_rect r;
            r.width = 1 + rnd(&seed) % W;
            r.height = 1 + rnd(&seed) % H;
            r.x = rnd(&seed) % (W - r.width + 1);
            r.y = rnd(&seed) % (H - r.height + 1);
            if (t == 0)
                r = (stk_rect){0, 0, W, H};
            if (t == 1)
                r = (stk_rect){W - 1, H - 1, 1, 1};
            snprintf(what, sizeof what, "PNG %s region %ux%u at (%u,%u)", pc->name, r.width,
                     r.height, r.x, r.y);
            assert_int_equal(stk_image_decode(d, n, NULL, &r, 1, &s, &v), 0);
            expect_view_eq(&v, want, W, r.x, r.y, r.width, r.height, what);
        }
        expect_fail(d, n, NULL, NULL, 2, STK_EINVAL, "PNG");
        stk_scratch_free(&s);
        free(want);
        free(d);
    }
}

/* Length of the chunk whose length field is at `off`. */
static uint32_t png_len(const uint8_t *d, size_t off)
{
    return (uint32_t)d[off] << 24 | (uint32_t)d[off + 1] << 16 | (uint32_t)d[off + 2] << 8 |
           d[off + 3];
}

/* Fix the CRC of the chunk whose length field is at `off`. */
static void png_fix_crc(uint8_t *d, size_t off)
{
    uint32_t len = png_len(d, off);
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = off + 4; i < off + 8 + len; i++) {
        crc ^= d[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    crc ^= 0xFFFFFFFFu;
    d[off + 8 + len] = (uint8_t)(crc >> 24);
    d[off + 9 + len] = (uint8_t)(crc >> 16);
    d[off + 10 + len] = (uint8_t)(crc >> 8);
    d[off + 11 + len] = (uint8_t)crc;
}

/* Offset of the first chunk of `type` (its length field). */
static size_t png_find(const uint8_t *d, size_t n, const char *type)
{
    size_t off = 8;
    while (off + 12 <= n) {
        uint32_t len = png_len(d, off);
        if (memcmp(d + off + 4, type, 4) == 0)
            return off;
        off += 12 + (size_t)len;
    }
    fail_msg("no %s chunk", type);
    return 0;
}

static void test_png_hostile(void **state)
{
    png_case pc = {"RGB8", 2, 8, 0};
    uint8_t *want;
    size_t n, off;
    uint8_t *d = png_case_data(&pc, 120, 90, 5, &want, &n);
    uint8_t *buf = malloc(n + 16);
    stk_codec_limits lim = {0};
    stk_image_info info;
    (void)state;
    assert_non_null(buf);

    /* Truncated in the image data. */
    expect_fail(d, n / 2, NULL, NULL, 1, STK_EDATA, "PNG: ");
    expect_fail(d, 30, NULL, NULL, 1, STK_EDATA, "PNG: ");
    expect_fail(d, 20, NULL, NULL, 1, STK_EDATA, "PNG: ");
    for (size_t cut = 8; cut < n - 12; cut += 131) {
        stk_scratch s = {0};
        stk_image_view v;
        assert_int_equal(stk_image_decode(d, cut, NULL, NULL, 1, &s, &v), STK_EDATA);
        stk_scratch_free(&s);
    }

    /* Bad CRC: in the IHDR, in the (only) IDAT, in IEND. */
    memcpy(buf, d, n);
    buf[29] ^= 1;
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "checksum");
    memcpy(buf, d, n);
    off = png_find(buf, n, "IDAT");
    buf[off + 8 + png_len(buf, off)] ^= 1; /* first CRC byte */
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "checksum");
    memcpy(buf, d, n);
    buf[n - 1] ^= 1;
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "checksum");
    /* ... also when a region reaches the last row (not above it). */
    expect_fail(buf, n, NULL, &(stk_rect){3, 80, 10, 10}, 1, STK_EDATA, "checksum");
    {
        stk_scratch s = {0};
        stk_image_view v;
        assert_int_equal(stk_image_decode(buf, n, NULL, &(stk_rect){3, 70, 10, 10}, 1, &s, &v),
                         0);
        stk_scratch_free(&s);
    }

    /* A flipped byte inside the compressed data (CRC fixed up so that the
     * damage reaches zlib / the filters). */
    memcpy(buf, d, n);
    off = png_find(buf, n, "IDAT");
    buf[off + 8 + 40] ^= 0xFF;
    png_fix_crc(buf, off);
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "PNG: ");

    /* 65500 x 65500 in the IHDR (CRC fixed): over the limit before any
     * allocation; the probe reports the dimensions. */
    memcpy(buf, d, n);
    buf[16] = 0, buf[17] = 0, buf[18] = 0xFF, buf[19] = 0xDC;
    buf[20] = 0, buf[21] = 0, buf[22] = 0xFF, buf[23] = 0xDC;
    png_fix_crc(buf, 8);
    assert_int_equal(stk_image_probe(buf, n, NULL, &info), STK_ELIMIT);
    assert_int_equal(info.width, 65500);
    expect_fail(buf, n, NULL, NULL, 1, STK_ELIMIT, "65500x65500");
    /* One dimension alone over the pixel budget: libspng's own limit. */
    buf[16] = 0x7F, buf[17] = 0xFF, buf[18] = 0xFF, buf[19] = 0xFF;
    buf[20] = 0, buf[21] = 0, buf[22] = 0, buf[23] = 1;
    png_fix_crc(buf, 8);
    expect_fail(buf, n, NULL, NULL, 1, STK_ELIMIT, "PNG: image width exceeds the max_pixels");
    lim.max_pixels = 120 * 90 - 1;
    expect_fail(d, n, &lim, NULL, 1, STK_ELIMIT, "max_pixels");
    lim.max_pixels = 120 * 90;
    {
        stk_scratch s = {0};
        stk_image_view v;
        assert_int_equal(stk_image_decode(d, n, &lim, NULL, 1, &s, &v), 0);
        expect_view_eq(&v, want, 120, 0, 0, 120, 90, "PNG at the limit");
        stk_scratch_free(&s);
    }

    /* Bad signature tail, bad IHDR fields. */
    memcpy(buf, d, n);
    buf[24] = 3; /* RGB with bit depth 3 */
    png_fix_crc(buf, 8);
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "PNG: ");
    memcpy(buf, d, n);
    buf[7] = 0;
    expect_fail(buf, n, NULL, NULL, 1, STK_EDATA, "not a JPEG, PNG, WebP, BMP, TIFF");

    free(buf);
    free(want);
    free(d);
}

/* ------------------------------------------------------------------------ */
/* The decode budget (stk_codec_limits.max_bytes)                           */
/* ------------------------------------------------------------------------ */

/* A decode over the budget: STK_ELIMIT naming the need and the budget, and
 * the scratch untouched (nothing sized from the header was allocated). */
static void expect_over_budget(const uint8_t *d, size_t n, uint64_t budget, const stk_rect *r,
                               unsigned scale, const char *want)
{
    stk_codec_limits lim = {.max_bytes = budget};
    stk_scratch s = {0};
    stk_image_view v;
    assert_int_equal(stk_image_decode(d, n, &lim, r, scale, &s, &v), STK_ELIMIT);
    if (!strstr(stk_errmsg(), want))
        fail_msg("expected \"%s\" in \"%s\"", want, stk_errmsg());
    assert_int_equal(s.cap, 0);
    uint64_t o = 1, w = 1; /* nothing allocated: nothing for the loader to count */
    stk_image_last_need(&o, &w);
    assert_int_equal(o + w, 0);
}

/* Exactly `need` bytes: decodes, and the scratch grew to exactly that. */
static void expect_within_budget(const uint8_t *d, size_t n, uint64_t out_bytes,
                                 uint64_t own_bytes, const stk_rect *r, unsigned scale)
{
    stk_codec_limits lim = {.max_bytes = out_bytes + own_bytes};
    stk_scratch s = {0};
    stk_image_view v;
    uint64_t o, w;
    assert_int_equal(stk_image_decode(d, n, &lim, r, scale, &s, &v), 0);
    assert_int_equal(s.cap, out_bytes);
    stk_image_last_need(&o, &w);
    assert_int_equal(o, out_bytes);
    assert_int_equal(w, own_bytes);
    stk_scratch_free(&s);
    lim.max_bytes--;
    assert_int_equal(stk_image_decode(d, n, &lim, r, scale, &s, &v), STK_ELIMIT);
    assert_int_equal(s.cap, 0);
}

static void test_decode_budget(void **state)
{
    char want[200];
    size_t n;
    uint8_t *d;
    (void)state;

    /* Baseline JPEG: the output only (libjpeg keeps an iMCU row). */
    d = jpeg_with_dims(32, 32, &n);
    expect_within_budget(d, n, 32 * 32 * 3, 0, NULL, 1);
    expect_within_budget(d, n, 4 * 4 * 3, 0, NULL, 8); /* scaled: 4x4 */
    expect_over_budget(d, n, 3071, NULL, 1,
                       "JPEG: decoding the 32x32 image needs 3072 bytes (0.0 MiB), over the "
                       "decode budget of 3071 bytes (0.0 MiB) that memory_limit leaves each "
                       "worker thread");
    free(d);

    /* A progressive 4:2:0 JPEG that claims 16000x16000: libjpeg would hold
     * every coefficient, 128 bytes a block: luma 16000*2/16 + 1 + 2 = 2003
     * blocks a side, each chroma 16000/16 + 1 + 2 = 1003, so
     * 128 * (2003^2 + 2 * 1003^2) = 771075456 bytes, at any scale or
     * region; refused before jpeg_start_decompress (under ASan any
     * allocation over 512 MiB would abort). */
    {
        jpeg_opts o = {3, 90, 2, 2, 1, 0, 0, 0, 0};
        uint8_t *px = make_pixels(32, 32, 3, 7);
        d = enc_jpeg(px, 32, 32, &o, &n);
        free(px);
        size_t i;
        for (i = 2; i + 9 < n && !(d[i] == 0xFF && d[i + 1] == 0xC2); i++)
            ;
        assert_true(i + 9 < n);
        d[i + 5] = 16000 >> 8, d[i + 6] = 16000 & 255, d[i + 7] = 16000 >> 8,
        d[i + 8] = 16000 & 255;
        snprintf(want, sizeof want, "JPEG: decoding the 16000x16000 image needs 771075456 bytes");
        expect_over_budget(d, n, 64 << 20, NULL, 1, want);
        expect_over_budget(d, n, 64 << 20, &(stk_rect){0, 0, 64, 64}, 8, want);
        free(d);
    }

    /* PNG: whole, the output and libspng's rows (8 bytes a pixel, three
     * rows, 64 KiB of inflate state); a region of a non-interlaced image,
     * its rows and one full row. */
    {
        unsigned w = 37, h = 23;
        uint8_t *rows = make_pixels(w, h, 3, 3);
        d = enc_png(rows, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, 0, NULL, 0, &n);
        uint64_t own = (uint64_t)w * 24 + 65536;
        expect_within_budget(d, n, (uint64_t)w * h * 3, own, NULL, 1);
        expect_within_budget(d, n, 5 * 3 * 3 + (uint64_t)w * 3, own, &(stk_rect){2, 4, 5, 3},
                             1);
        free(rows);
        free(d);
    }

    /* A PNG of 2048x2048 zeros (a few KB): 12 MiB of output, refused under
     * 4 MiB from its header. */
    {
        unsigned w = 2048, h = 2048;
        uint8_t *rows = calloc((size_t)w * h, 3);
        d = enc_png(rows, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, 0, NULL, 0, &n);
        free(rows);
        assert_true(n < 200000);
        snprintf(want, sizeof want,
                 "PNG: decoding the 2048x2048 image needs %llu bytes (12.1 MiB), over the decode "
                 "budget of 4194304 bytes (4.0 MiB)",
                 (unsigned long long)w * h * 3 + w * 24 + 65536);
        expect_over_budget(d, n, 4 << 20, NULL, 1, want);
        free(d);
    }

    /* No budget (0): as before the field existed. */
    d = jpeg_with_dims(32, 32, &n);
    stk_codec_limits none = {0};
    stk_scratch s = {0};
    stk_image_view v;
    assert_int_equal(stk_image_decode(d, n, &none, NULL, 1, &s, &v), 0);
    stk_scratch_free(&s);
    free(d);
}

/* Decoding different images into one scratch, as a loader thread does. */
static void test_scratch_reuse(void **state)
{
    jpeg_opts o = {3, 90, 2, 2, 0, 0, 0, 0, 0};
    stk_scratch s = {0};
    stk_image_view v;
    (void)state;
    for (unsigned k = 0; k < 6; k++) {
        unsigned w = 20 + 37 * (k % 3), h = 15 + 29 * ((k + 1) % 3);
        uint8_t *px = make_pixels(w, h, 3, k);
        size_t n;
        uint8_t *d = enc_jpeg(px, w, h, &o, &n);
        unsigned rw, rh;
        uint8_t *ref = ref_jpeg(d, n, 1, 0, &rw, &rh, NULL);
        assert_int_equal(stk_image_decode(d, n, NULL, NULL, 1, &s, &v), 0);
        expect_view_eq(&v, ref, rw, 0, 0, rw, rh, "reused scratch");
        free(ref);
        free(d);
        free(px);
    }
    stk_scratch_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jpeg_full_matches_reference),
        cmocka_unit_test(test_jpeg_regions_exact),
        cmocka_unit_test(test_jpeg_window),
        cmocka_unit_test(test_jpeg_sync),
        cmocka_unit_test(test_jpeg_scan_check),
        cmocka_unit_test(test_jpeg_add_restarts),
        cmocka_unit_test(test_jpeg_limits),
        cmocka_unit_test(test_jpeg_hostile),
        cmocka_unit_test(test_jpeg_scan_limit),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_png_exact),
        cmocka_unit_test(test_png_hostile),
        cmocka_unit_test(test_scratch_reuse),
        cmocka_unit_test(test_decode_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
