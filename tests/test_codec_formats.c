/*
 * test_codec_formats.c — the WebP, BMP, TIFF and GIF decoders (src/codec/
 * webp.c, bmp.c, tiff.c, gif.c) against independent writers: libwebp's
 * lossless encoder, libtiff's writer (uncompressed, LZW, deflate, tiled),
 * giflib's encoder, and BMP files assembled here byte by byte from the
 * format's specification. All of them are lossless, so the decoded pixels
 * must equal the source pixels exactly. (Comparisons with PIL, lossy WebP,
 * JPEG-in-TIFF and the odd layouts are in
 * tests/python/test_codec_formats_pil.py.)
 *
 * Hostile input: the pixel limit is checked from the header before the
 * scratch grows (its capacity stays 0), every truncation of every file is
 * either an error with the format's prefix or (for bytes the decoder never
 * needs, like a GIF's trailer) exactly the right pixels, and damaged headers
 * fail with their messages.
 */
#include "codec/codec.h"
#include "core/error.h"
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <gif_lib.h>
#include <tiffio.h>
#include <webp/encode.h>

#define W 37
#define H 23

typedef struct encoded {
    const char *name; /* format name as messages start with it */
    uint8_t *data;
    size_t size;
    int needs_all;    /* every byte is needed: every cut fails */
} encoded;

static uint8_t g_src[H][W][3];

static void make_source(void)
{
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            g_src[y][x][0] = (uint8_t)(x * 7 + y);
            g_src[y][x][1] = (uint8_t)(y * 11);
            g_src[y][x][2] = (uint8_t)((x * y) ^ 0x5A);
        }
}

/* The source reduced to an 8-entry palette: index = (x + 2y) % 8. */
static const uint8_t g_pal[8][3] = {{0, 0, 0},     {255, 0, 0},   {0, 255, 0},   {0, 0, 255},
                                    {255, 255, 0}, {0, 255, 255}, {255, 0, 255}, {90, 60, 30}};
static int pal_index(int x, int y)
{
    return (x + 2 * y) % 8;
}

static encoded make_webp(void)
{
    encoded e = {"WebP", NULL, 0, 1};
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(&g_src[0][0][0], W, H, W * 3, &out);
    assert_true(n > 0);
    e.data = malloc(n);
    memcpy(e.data, out, n);
    e.size = n;
    WebPFree(out);
    return e;
}

/* A 24-bit bottom-up BITMAPINFOHEADER file; row stride padded to 4. */
static encoded make_bmp24(void)
{
    encoded e = {"BMP", NULL, 0, 1};
    size_t stride = (W * 3 + 3) & ~(size_t)3, n = 54 + stride * H;
    uint8_t *d = calloc(1, n);
    d[0] = 'B', d[1] = 'M';
    memcpy(d + 2, &(uint32_t){(uint32_t)n}, 4);
    memcpy(d + 10, &(uint32_t){54}, 4);
    memcpy(d + 14, &(uint32_t){40}, 4);
    memcpy(d + 18, &(int32_t){W}, 4);
    memcpy(d + 22, &(int32_t){H}, 4);
    memcpy(d + 26, &(uint16_t){1}, 2);
    memcpy(d + 28, &(uint16_t){24}, 2);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = d + 54 + (size_t)(H - 1 - y) * stride + (size_t)x * 3;
            p[0] = g_src[y][x][2], p[1] = g_src[y][x][1], p[2] = g_src[y][x][0];
        }
    e.data = d;
    e.size = n;
    return e;
}

/* An 8-bit top-down palette BMP (V5 header, 8 palette entries). */
static encoded make_bmp8(void)
{
    encoded e = {"BMP", NULL, 0, 1};
    size_t stride = (W + 3) & ~(size_t)3, off = 14 + 124 + 8 * 4, n = off + stride * H;
    uint8_t *d = calloc(1, n);
    d[0] = 'B', d[1] = 'M';
    memcpy(d + 2, &(uint32_t){(uint32_t)n}, 4);
    memcpy(d + 10, &(uint32_t){(uint32_t)off}, 4);
    memcpy(d + 14, &(uint32_t){124}, 4);
    memcpy(d + 18, &(int32_t){W}, 4);
    memcpy(d + 22, &(int32_t){-H}, 4);
    memcpy(d + 26, &(uint16_t){1}, 2);
    memcpy(d + 28, &(uint16_t){8}, 2);
    memcpy(d + 46, &(uint32_t){8}, 4); /* colours used */
    for (int i = 0; i < 8; i++) {
        uint8_t *p = d + 14 + 124 + 4 * i;
        p[0] = g_pal[i][2], p[1] = g_pal[i][1], p[2] = g_pal[i][0];
    }
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            d[off + (size_t)y * stride + (size_t)x] = (uint8_t)pal_index(x, y);
    e.data = d;
    e.size = n;
    return e;
}

static void quiet_tiff(const char *module, const char *fmt, va_list ap)
{
    (void)module, (void)fmt, (void)ap;
}

static encoded make_tiff(const char *file, uint16_t compression, int tiled)
{
    encoded e = {"TIFF", NULL, 0, 0};
    const char *path = tu_path(file);
    TIFF *t = TIFFOpen(path, "w");
    assert_non_null(t);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, W);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, H);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_COMPRESSION, compression);
    if (tiled) {
        TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
        TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
        uint8_t tile[16 * 16 * 3];
        for (int ty = 0; ty < H; ty += 16)
            for (int tx = 0; tx < W; tx += 16) {
                memset(tile, 0, sizeof tile);
                for (int y = 0; y < 16 && ty + y < H; y++)
                    for (int x = 0; x < 16 && tx + x < W; x++)
                        memcpy(tile + (y * 16 + x) * 3, g_src[ty + y][tx + x], 3);
                assert_true(TIFFWriteTile(t, tile, (uint32_t)tx, (uint32_t)ty, 0, 0) > 0);
            }
    } else {
        TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 5);
        for (int y = 0; y < H; y++)
            assert_int_equal(TIFFWriteScanline(t, g_src[y], (uint32_t)y, 0), 1);
    }
    TIFFClose(t);
    e.data = tu_read_file(path, &e.size);
    assert_non_null(e.data);
    return e;
}

typedef struct gif_buf {
    uint8_t *data;
    size_t size, cap;
} gif_buf;

static int gif_write(GifFileType *g, const GifByteType *buf, int n)
{
    gif_buf *o = (gif_buf *)g->UserData;
    if (o->size + (size_t)n > o->cap) {
        o->cap = (o->size + (size_t)n) * 2;
        o->data = realloc(o->data, o->cap);
        assert_non_null(o->data);
    }
    memcpy(o->data + o->size, buf, (size_t)n);
    o->size += (size_t)n;
    return n;
}

/* A GIF of the palette image written by giflib's encoder, interlaced or
 * not, the frame inset at (1, 2) on a (W + 3) x (H + 4) screen, with
 * transparent index 6 when `transparent`. */
static encoded make_gif(int interlace, int transparent)
{
    encoded e = {"GIF", NULL, 0, 0};
    int err = 0;
    gif_buf o = {NULL, 0, 0};
    GifFileType *g = EGifOpen(&o, gif_write, &err);
    assert_non_null(g);
    GifColorType colors[8];
    for (int i = 0; i < 8; i++)
        colors[i].Red = g_pal[i][0], colors[i].Green = g_pal[i][1], colors[i].Blue = g_pal[i][2];
    ColorMapObject *cmap = GifMakeMapObject(8, colors);
    EGifSetGifVersion(g, true);
    assert_int_equal(EGifPutScreenDesc(g, W + 3, H + 4, 3, 0, cmap), GIF_OK);
    if (transparent) {
        GifByteType gce[4] = {1, 0, 0, 6};
        assert_int_equal(EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, 4, gce), GIF_OK);
    }
    assert_int_equal(EGifPutImageDesc(g, 1, 2, W, H, interlace, NULL), GIF_OK);
    GifPixelType row[W];
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < (interlace ? 4 : 1); pass++)
        for (int y = interlace ? start[pass] : 0; y < H; y += interlace ? step[pass] : 1) {
            for (int x = 0; x < W; x++)
                row[x] = (GifPixelType)pal_index(x, y);
            assert_int_equal(EGifPutLine(g, row, W), GIF_OK);
        }
    assert_int_equal(EGifCloseFile(g, &err), GIF_OK);
    GifFreeMapObject(cmap);
    e.data = o.data;
    e.size = o.size;
    return e;
}

/* Expected pixel (x, y) of a decode of `e` made from the source. */
static void expected(const encoded *e, int palette, int gif, int transparent, int x, int y,
                     uint8_t out[3])
{
    if (gif) {
        /* canvas: frame at (1, 2); outside it index 0 or the transparent 6 */
        int fx = x - 1, fy = y - 2;
        int i = (fx >= 0 && fx < W && fy >= 0 && fy < H) ? pal_index(fx, fy)
                                                          : (transparent ? 6 : 0);
        memcpy(out, g_pal[i], 3);
        return;
    }
    (void)e;
    memcpy(out, palette ? g_pal[pal_index(x, y)] : g_src[y][x], 3);
}

static void check_pixels(const encoded *e, const stk_image_view *v, int palette, int gif,
                         int transparent, uint32_t x0, uint32_t y0)
{
    for (uint32_t y = 0; y < v->height; y++)
        for (uint32_t x = 0; x < v->width; x++) {
            uint8_t want[3];
            expected(e, palette, gif, transparent, (int)(x0 + x), (int)(y0 + y), want);
            const uint8_t *p = v->pixels + (ptrdiff_t)y * v->row_stride + (ptrdiff_t)x * 3;
            if (memcmp(p, want, 3) != 0)
                fail_msg("%s: pixel (%u, %u) is %u %u %u, expected %u %u %u", e->name, x0 + x,
                         y0 + y, p[0], p[1], p[2], want[0], want[1], want[2]);
        }
}

static void check_format(encoded e, stk_image_format fmt, int palette, int gif, int transparent)
{
    uint32_t w = gif ? W + 3 : W, h = gif ? H + 4 : H;
    stk_scratch s = {0};
    stk_image_view v;
    stk_image_info info;
    char want[160];

    assert_int_equal(stk_image_sniff(e.data, e.size), fmt);
    assert_string_equal(stk_image_format_name(fmt), e.name); /* the table's row */
    assert_int_equal(stk_image_format_scales(fmt), 1u << 1); /* full size only */
    assert_int_equal(stk_image_probe(e.data, e.size, NULL, &info), 0);
    assert_int_equal(info.format, fmt);
    assert_int_equal(info.width, w);
    assert_int_equal(info.height, h);

    /* whole, then regions: exactly the source */
    assert_int_equal(stk_image_decode(e.data, e.size, NULL, NULL, 1, &s, &v), 0);
    assert_int_equal(v.width, w);
    assert_int_equal(v.height, h);
    assert_int_equal(v.channels, 3);
    check_pixels(&e, &v, palette, gif, transparent, 0, 0);
    const stk_rect regions[] = {{0, 0, 1, 1}, {5, 3, 17, 9}, {w - 1, h - 1, 1, 1}, {0, 0, w, h}};
    for (size_t k = 0; k < sizeof regions / sizeof regions[0]; k++) {
        assert_int_equal(stk_image_decode(e.data, e.size, NULL, &regions[k], 1, &s, &v), 0);
        assert_int_equal(v.width, regions[k].width);
        assert_int_equal(v.height, regions[k].height);
        check_pixels(&e, &v, palette, gif, transparent, regions[k].x, regions[k].y);
    }
    stk_rect outside = {w - 2, 0, 3, 1};
    assert_int_equal(stk_image_decode(e.data, e.size, NULL, &outside, 1, &s, &v), STK_EINVAL);
    snprintf(want, sizeof want, "%s: region 3x1 at (%u, 0) is outside the %ux%u image", e.name,
             w - 2, w, h);
    assert_string_equal(stk_errmsg(), want);
    assert_int_equal(stk_image_decode(e.data, e.size, NULL, NULL, 2, &s, &v), STK_EINVAL);
    snprintf(want, sizeof want, "%s: scale_denom 2 requested; %s decodes at full size only",
             e.name, e.name);
    assert_string_equal(stk_errmsg(), want);
    stk_scratch_free(&s);

    /* The limit, from the header, before the scratch grows. */
    stk_codec_limits lim = {.max_pixels = (uint64_t)w * h - 1};
    snprintf(want, sizeof want, "%s: %ux%u image (%u pixels) exceeds the max_pixels limit of %u",
             e.name, w, h, w * h, w * h - 1);
    assert_int_equal(stk_image_probe(e.data, e.size, &lim, &info), STK_ELIMIT);
    assert_string_equal(stk_errmsg(), want);
    assert_int_equal(stk_image_decode(e.data, e.size, &lim, NULL, 1, &s, &v), STK_ELIMIT);
    assert_string_equal(stk_errmsg(), want);
    assert_int_equal(s.cap, 0);

    /* Every truncation: an error with the format's prefix, or (bytes the
     * decoder never needs) the right pixels — never anything else. */
    size_t fails = 0;
    uint8_t *cut = malloc(e.size);
    for (size_t n = 0; n < e.size; n++) {
        memcpy(cut, e.data, n); /* a copy of exactly n bytes: ASan sees overreads */
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, cut, n);
        int rc = stk_image_decode(exact, n, NULL, NULL, 1, &s, &v);
        if (rc == 0) {
            assert_int_equal(v.width, w);
            check_pixels(&e, &v, palette, gif, transparent, 0, 0);
        } else {
            fails++;
            if (rc != STK_EDATA)
                fail_msg("%s cut at %zu: code %d (%s)", e.name, n, rc, stk_errmsg());
            const char *m = stk_errmsg();
            size_t k = strlen(e.name);
            if (!(strncmp(m, e.name, k) == 0 && m[k] == ':') && strncmp(m, "image: ", 7) != 0)
                fail_msg("%s cut at %zu: message \"%s\"", e.name, n, m);
        }
        free(exact);
    }
    free(cut);
    if (e.needs_all)
        assert_int_equal(fails, e.size);
    else
        assert_true(fails >= e.size / 2);
    stk_scratch_free(&s);
    free(e.data);
}

static void test_webp_lossless(void **state)
{
    (void)state;
    check_format(make_webp(), STK_IMAGE_WEBP, 0, 0, 0);
}

static void test_bmp(void **state)
{
    (void)state;
    check_format(make_bmp24(), STK_IMAGE_BMP, 0, 0, 0);
    check_format(make_bmp8(), STK_IMAGE_BMP, 1, 0, 0);
}

static void test_tiff(void **state)
{
    (void)state;
    TIFFErrorHandler old = TIFFSetWarningHandler(quiet_tiff);
    check_format(make_tiff("raw.tif", COMPRESSION_NONE, 0), STK_IMAGE_TIFF, 0, 0, 0);
    check_format(make_tiff("lzw.tif", COMPRESSION_LZW, 0), STK_IMAGE_TIFF, 0, 0, 0);
    check_format(make_tiff("deflate.tif", COMPRESSION_ADOBE_DEFLATE, 0), STK_IMAGE_TIFF, 0, 0, 0);
    check_format(make_tiff("tiled.tif", COMPRESSION_LZW, 1), STK_IMAGE_TIFF, 0, 0, 0);
    TIFFSetWarningHandler(old);
}

static void test_gif(void **state)
{
    (void)state;
    check_format(make_gif(0, 0), STK_IMAGE_GIF, 1, 1, 0);
    check_format(make_gif(1, 0), STK_IMAGE_GIF, 1, 1, 0);
    check_format(make_gif(0, 1), STK_IMAGE_GIF, 1, 1, 1);
}

static void expect(const uint8_t *d, size_t n, int code, const char *text)
{
    stk_scratch s = {0};
    stk_image_view v;
    int rc = stk_image_decode(d, n, NULL, NULL, 1, &s, &v);
    if (rc != code || !strstr(stk_errmsg(), text))
        fail_msg("expected %d \"%s\", got %d \"%s\"", code, text, rc, stk_errmsg());
    stk_scratch_free(&s);
}

static void test_damaged_headers(void **state)
{
    (void)state;
    /* BMP: huge dimensions (checked before the pixel data is looked at) */
    encoded b = make_bmp24();
    memcpy(b.data + 18, &(int32_t){100000}, 4);
    memcpy(b.data + 22, &(int32_t){-100000}, 4);
    expect(b.data, b.size, STK_ELIMIT,
           "BMP: 100000x100000 image (10000000000 pixels) exceeds the max_pixels limit");
    memcpy(b.data + 22, &(int32_t){INT32_MIN}, 4);
    expect(b.data, b.size, STK_EDATA, "BMP: bad image size 100000x-2147483648");
    memcpy(b.data + 18, &(int32_t){W}, 4);
    memcpy(b.data + 22, &(int32_t){H}, 4);
    memcpy(b.data + 10, &(uint32_t){0xFFFFFFF0u}, 4); /* pixel offset past the end */
    expect(b.data, b.size, STK_EDATA, "BMP: truncated pixel data");
    free(b.data);

    /* TIFF: an IFD offset past the end, a strip offset past the end */
    TIFFErrorHandler old = TIFFSetWarningHandler(quiet_tiff);
    encoded t = make_tiff("d.tif", COMPRESSION_NONE, 0);
    TIFFSetWarningHandler(old);
    uint8_t *bad = malloc(t.size);
    memcpy(bad, t.data, t.size);
    memcpy(bad + 4, &(uint32_t){0x7FFFFFF0u}, 4);
    expect(bad, t.size, STK_EDATA, "TIFF: reading the header: ");
    free(bad);
    free(t.data);

    /* GIF: an LZW minimum code size of 12 */
    encoded g = make_gif(0, 0);
    size_t at = 13 + 8 * 3 + 10; /* header, screen, table, image descriptor */
    assert_int_equal(g.data[at - 10], ',');
    g.data[at] = 12;
    expect(g.data, g.size, STK_EDATA, "GIF: ");
    free(g.data);

    /* WebP: RIFF header with a bad chunk */
    static const uint8_t riff[] = "RIFF\x1a\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00"
                                  "\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff";
    expect(riff, sizeof riff - 1, STK_EDATA, "WebP: reading the header: ");
}

/* The decode budget (stk_codec_limits.max_bytes): each decoder counts the
 * output it reserves and its own memory, from the header, before
 * allocating. Exactly the need decodes (and the scratch grows to exactly
 * the output); one byte less is STK_ELIMIT with the scratch untouched. */
static void budget_exact(const encoded *e, uint64_t out_bytes, uint64_t own_bytes)
{
    stk_codec_limits lim = {.max_bytes = out_bytes + own_bytes};
    stk_scratch s = {0};
    stk_image_view v;
    char want[160];
    assert_int_equal(stk_image_decode(e->data, e->size, &lim, NULL, 1, &s, &v), 0);
    assert_int_equal(s.cap, out_bytes);
    stk_scratch_free(&s);
    lim.max_bytes--;
    if (stk_image_decode(e->data, e->size, &lim, NULL, 1, &s, &v) != STK_ELIMIT)
        fail_msg("%s: decoded within %llu bytes", e->name, (unsigned long long)lim.max_bytes);
    snprintf(want, sizeof want, "%s: decoding the ", e->name);
    assert_true(strncmp(stk_errmsg(), want, strlen(want)) == 0);
    snprintf(want, sizeof want, " needs %llu bytes", (unsigned long long)(out_bytes + own_bytes));
    assert_non_null(strstr(stk_errmsg(), want));
    assert_int_equal(s.cap, 0);
}

static void test_decode_budget(void **state)
{
    (void)state;
    encoded e;
    /* GIF: the canvas as RGB and as indices, 4 bytes a pixel. */
    e = make_gif(0, 0);
    budget_exact(&e, (uint64_t)(W + 3) * (H + 4) * 4, 0);
    free(e.data);
    /* BMP: the RGB output (8-bit palette: no more). */
    e = make_bmp24();
    budget_exact(&e, (uint64_t)W * H * 3, 0);
    free(e.data);
    e = make_bmp8();
    budget_exact(&e, (uint64_t)W * H * 3, 0);
    free(e.data);
    /* WebP lossless: the output, libwebp's ARGB picture and 64 rows. */
    e = make_webp();
    budget_exact(&e, (uint64_t)W * H * 3, (uint64_t)W * H * 4 + (uint64_t)W * 64 * 4);
    free(e.data);
    /* TIFF, uncompressed, strips of 5 rows (make_tiff): RGB plus the
     * stored rows, and libtiff's buffer for one strip's bytes; tiled
     * (16x16 tiles): also the decoded tile. */
    TIFFErrorHandler old = TIFFSetWarningHandler(quiet_tiff);
    e = make_tiff("budget.tif", COMPRESSION_NONE, 0);
    TIFFSetWarningHandler(old);
    budget_exact(&e, (uint64_t)W * H * 6, (uint64_t)5 * W * 3);
    free(e.data);
    old = TIFFSetWarningHandler(quiet_tiff);
    e = make_tiff("budget-tiled.tif", COMPRESSION_LZW, 1);
    TIFFSetWarningHandler(old);
    budget_exact(&e, (uint64_t)W * H * 6, 2 * 16 * 16 * 3);
    free(e.data);
}

/* A GIF of 35 bytes whose logical screen is 16000x16000 and whose only
 * frame is one pixel: 1 GB of canvas (RGB + indices) from nothing. Written
 * byte by byte from the GIF89a specification. */
static void test_gif_screen_bomb(void **state)
{
    (void)state;
    static const uint8_t gif[] = {
        'G', 'I', 'F', '8', '9', 'a', 0x80, 0x3E, 0x80, 0x3E, /* 16000 x 16000 */
        0x80, 0, 0,                                           /* 2-colour table */
        0, 0, 0, 255, 255, 255,                               /* black, white */
        ',', 0, 0, 0, 0, 1, 0, 1, 0, 0,                       /* 1x1 frame at 0,0 */
        2, 2, 0x44, 0x01, 0,                                  /* LZW: one index 0 */
        ';'};
    assert_int_equal(sizeof gif, 35);
    stk_image_info info;
    assert_int_equal(stk_image_probe(gif, sizeof gif, NULL, &info), 0);
    assert_int_equal(info.width, 16000);
    assert_int_equal(info.height, 16000);
    stk_codec_limits lim = {.max_bytes = 64 << 20};
    stk_scratch s = {0};
    stk_image_view v;
    assert_int_equal(stk_image_decode(gif, sizeof gif, &lim, &(stk_rect){0, 0, 1, 1}, 1, &s, &v),
                     STK_ELIMIT);
    assert_string_equal(stk_errmsg(),
                        "GIF: decoding the 16000x16000 image needs 1024000000 bytes (976.6 MiB), "
                        "over the decode budget of 67108864 bytes (64.0 MiB) that memory_limit "
                        "leaves each worker thread");
    assert_int_equal(s.cap, 0);
    /* Within a budget that holds the canvas: the pixel is index 0, black. */
    lim.max_bytes = 1024000000;
    assert_int_equal(stk_image_decode(gif, sizeof gif, &lim, &(stk_rect){0, 0, 1, 1}, 1, &s, &v),
                     0);
    assert_int_equal(v.pixels[0] | v.pixels[1] | v.pixels[2], 0);
    stk_scratch_free(&s);
}

int main(void)
{
    make_source();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_webp_lossless), cmocka_unit_test(test_bmp),
        cmocka_unit_test(test_tiff),          cmocka_unit_test(test_gif),
        cmocka_unit_test(test_damaged_headers),
        cmocka_unit_test(test_decode_budget), cmocka_unit_test(test_gif_screen_bomb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
