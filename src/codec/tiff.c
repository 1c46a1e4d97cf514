/*
 * tiff.c — TIFF decoding through libtiff (4.5), first page only.
 *
 * Reading from memory. TIFFClientOpenExt is given read/seek/size procs over
 * the caller's buffer (no temporary file, no memory mapping: libtiff copies
 * what it reads into its own buffers, so the lent bytes are never written)
 * and a TIFFOpenOptions carrying this decode's own error and warning
 * handlers (per handle, so threads do not share them and libtiff's global
 * handlers, which print to stderr, are never reached). The first error
 * message is kept and reported as STK_EDATA "TIFF: <libtiff's message>";
 * any error during a read fails the decode even when libtiff carries on.
 * Warnings while reading the directory (unknown tags, odd but readable
 * fields) are ignored, as PIL ignores them; warnings while decoding pixels
 * are errors (libjpeg's "Premature end of JPEG file" reaches libtiff's JPEG
 * codec as a warning and the strip would be padded with grey; a CCITT line
 * of the wrong length likewise) — stricter than PIL, never grey pixels. libtiff's largest single allocation is capped
 * (TIFFOpenOptionsSetMaxSingleMemAlloc) by a bound derived from max_pixels.
 *
 * What it decodes — the layouts PIL 9.4's TiffImagePlugin reads as 8-bit
 * modes, with any compression libtiff has (none, LZW, deflate, PackBits,
 * JPEG, ...), stripped or tiled, contiguous samples (PLANARCONFIG_CONTIG):
 *
 *   - gray, 1/2/4/8 bits, min-is-black or min-is-white (PIL's "1", L;2,
 *     L;4, L and their inverted forms; v * 255 / (2^bits - 1)), and gray
 *     plus one extra sample (LA: alpha dropped);
 *   - palette, 1/2/4/8 bits, with or without an extra sample: the colour
 *     map's 16-bit entries keep their high byte, as PIL does;
 *   - RGB, 3 samples, or 4 to 6 with extra samples: alpha is dropped, but an
 *     associated (premultiplied) alpha is first divided out as PIL's "RGBa"
 *     unpacker does (v * 255 / a, clipped; 0 where a is 0);
 *   - CMYK (separated, 4 samples, or 5-6 with extra samples) converted with
 *     PIL's cmyk2rgb (nk = 255 - k; nk - c * nk / 255 rounded as MULDIV255);
 *   - YCbCr with JPEG compression, converted to RGB by libjpeg inside
 *     libtiff (TIFFTAG_JPEGCOLORMODE = RGB), as PIL does.
 *
 * Refused with a message naming what: other bit depths (16-bit samples
 * become I;16 in PIL, whose RGB conversion clips), signed or floating-point
 * samples, separate planes, other photometric interpretations (YCbCr
 * without JPEG, CIELab, ...). Orientation is ignored, as PIL does.
 *
 * Hostile input. The directory is read by TIFFClientOpenExt (small tag
 * arrays only; libtiff bounds them by the file size), width * height is
 * checked against max_pixels, and the strip or tile sizes against what the
 * image can need, before the sample buffer and the output exist. Every
 * strip (TIFFReadEncodedStrip) or tile (TIFFReadEncodedTile) must decode to
 * its full size: a truncated or corrupt one is an error, never zeros.
 * libtiff never longjmps (its JPEG codec catches libjpeg's own) and never
 * prints here. Region: the window of the whole decode; scale_denom 1 only.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tiffio.h>

typedef struct stk_tiff_job {
    const uint8_t *data; /* lent */
    uint64_t size;
    uint64_t pos;
    int failed;          /* an error was reported */
    int reading;         /* reading pixels: warnings are errors too */
    char msg[256];       /* the first error message */
} stk_tiff_job;

/* The layout, from the first directory. */
typedef struct stk_tiff_layout {
    uint32_t width, height;
    uint16_t bits, spp, photometric, planar, sample_format, compression;
    uint16_t extra_count;
    uint16_t *extras;           /* libtiff's; valid while the TIFF is open */
    uint16_t *cmap[3];          /* palette: libtiff's */
} stk_tiff_layout;

static tmsize_t stk_tiff_read(thandle_t h, void *buf, tmsize_t n)
{
    stk_tiff_job *j = (stk_tiff_job *)h;
    uint64_t left = j->pos < j->size ? j->size - j->pos : 0;
    uint64_t k = n < 0 ? 0 : (uint64_t)n;
    if (k > left)
        k = left;
    if (k)
        memcpy(buf, j->data + j->pos, (size_t)k);
    j->pos += k;
    return (tmsize_t)k;
}

static tmsize_t stk_tiff_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return -1;
}

static toff_t stk_tiff_seek(thandle_t h, toff_t off, int whence)
{
    stk_tiff_job *j = (stk_tiff_job *)h;
    uint64_t base = whence == SEEK_CUR ? j->pos : whence == SEEK_END ? j->size : 0;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
        return (toff_t)-1;
    if (off > UINT64_MAX - base)
        return (toff_t)-1;
    j->pos = base + off; /* past the end is allowed; reads there return 0 bytes */
    return (toff_t)j->pos;
}

static int stk_tiff_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t stk_tiff_size(thandle_t h)
{
    return (toff_t)((stk_tiff_job *)h)->size;
}

static int stk_tiff_nomap(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0;
}

static void stk_tiff_nounmap(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

static int stk_tiff_on_error(TIFF *tif, void *user, const char *module, const char *fmt,
                             va_list ap)
{
    stk_tiff_job *j = (stk_tiff_job *)user;
    (void)tif;
    if (!j->failed) {
        int n = 0;
        if (module && *module)
            n = snprintf(j->msg, sizeof j->msg, "%s: ", module);
        if (n < 0 || (size_t)n >= sizeof j->msg)
            n = 0;
        vsnprintf(j->msg + n, sizeof j->msg - (size_t)n, fmt, ap);
    }
    j->failed = 1;
    return 1; /* handled: the global handler is not called */
}

static int stk_tiff_on_warning(TIFF *tif, void *user, const char *module, const char *fmt,
                               va_list ap)
{
    stk_tiff_job *j = (stk_tiff_job *)user;
    /* While reading the directory: ignored (unknown tags, odd but readable
     * fields), as PIL ignores them. While decoding pixels, a warning means
     * damaged data that the codec papered over (libjpeg's "Premature end of
     * JPEG file" comes through libtiff's JPEG codec as a warning, a CCITT
     * line of the wrong length too): an error. */
    if (j->reading)
        return stk_tiff_on_error(tif, user, module, fmt, ap);
    return 1;
}

static int stk_tiff_fail(const stk_tiff_job *j, const char *doing)
{
    if (j->failed)
        return stk_fail(STK_EDATA, "TIFF: %s: %s", doing, j->msg);
    return stk_fail(STK_EDATA, "TIFF: %s failed", doing);
}

static TIFF *stk_tiff_open(stk_tiff_job *j, uint64_t max_pixels)
{
    TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
    TIFF *tif;
    if (!opts)
        return NULL;
    /* The largest buffer libtiff needs: a compressed strip or tile (at most
     * the file) or a decoded one (at most 8 bytes a pixel of the image). */
    uint64_t cap = max_pixels * 8 + j->size + ((uint64_t)1 << 20);
    if (cap > (uint64_t)INT64_MAX / 2)
        cap = (uint64_t)INT64_MAX / 2;
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, (tmsize_t)cap);
    TIFFOpenOptionsSetErrorHandlerExtR(opts, stk_tiff_on_error, j);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, stk_tiff_on_warning, j);
    tif = TIFFClientOpenExt("image", "rm", (thandle_t)j, stk_tiff_read, stk_tiff_write,
                            stk_tiff_seek, stk_tiff_close, stk_tiff_size, stk_tiff_nomap,
                            stk_tiff_nounmap, opts);
    TIFFOpenOptionsFree(opts);
    return tif;
}

static const char *stk_tiff_photometric_name(uint16_t p)
{
    switch (p) {
    case PHOTOMETRIC_MINISWHITE:
        return "min-is-white";
    case PHOTOMETRIC_MINISBLACK:
        return "min-is-black";
    case PHOTOMETRIC_RGB:
        return "RGB";
    case PHOTOMETRIC_PALETTE:
        return "palette";
    case PHOTOMETRIC_MASK:
        return "transparency mask";
    case PHOTOMETRIC_SEPARATED:
        return "separated (CMYK)";
    case PHOTOMETRIC_YCBCR:
        return "YCbCr";
    case PHOTOMETRIC_CIELAB:
    case PHOTOMETRIC_ICCLAB:
    case PHOTOMETRIC_ITULAB:
        return "Lab";
    default:
        return "unknown";
    }
}

/* Read the layout of the open TIFF, check it is one we decode, fill *info
 * and check the limit. */
static int stk_tiff_layout_read(TIFF *tif, stk_tiff_job *j, uint64_t max_pixels,
                                stk_tiff_layout *l, stk_image_info *info)
{
    memset(l, 0, sizeof *l);
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->width) ||
        !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->height))
        return stk_tiff_fail(j, "reading the image size");
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &l->sample_format);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &l->compression);
    TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &l->extra_count, &l->extras);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l->photometric))
        return stk_fail(STK_EDATA, "TIFF: no photometric interpretation tag");
    if (l->width == 0 || l->height == 0)
        return stk_fail(STK_EDATA, "TIFF: bad image size %ux%u", l->width, l->height);

    memset(info, 0, sizeof *info);
    info->format = STK_IMAGE_TIFF;
    info->width = l->width;
    info->height = l->height;
    info->components = l->spp;

    const char *pm = stk_tiff_photometric_name(l->photometric);
    if (l->sample_format != SAMPLEFORMAT_UINT)
        return stk_fail(STK_EDATA, "TIFF: sample format %u (signed or floating point) is not "
                                   "decoded; 8-bit unsigned samples only",
                        l->sample_format);
    if (l->planar != PLANARCONFIG_CONTIG && l->spp > 1)
        return stk_fail(STK_EDATA, "TIFF: separate sample planes are not decoded "
                                   "(PlanarConfiguration %u)",
                        l->planar);
    switch (l->photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE:
        if (!((l->spp == 1 && (l->bits == 1 || l->bits == 2 || l->bits == 4 || l->bits == 8)) ||
              (l->spp == 2 && l->bits == 8)))
            return stk_fail(STK_EDATA,
                            "TIFF: %s with %u samples of %u bits is not decoded (1, 2, 4 or "
                            "8-bit gray, 8-bit gray + alpha only)",
                            pm, l->spp, l->bits);
        info->components = l->spp;
        break;
    case PHOTOMETRIC_PALETTE:
        if (!((l->spp == 1 && (l->bits == 1 || l->bits == 2 || l->bits == 4 || l->bits == 8)) ||
              (l->spp == 2 && l->bits == 8)))
            return stk_fail(STK_EDATA,
                            "TIFF: palette with %u samples of %u bits is not decoded", l->spp,
                            l->bits);
        if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &l->cmap[0], &l->cmap[1], &l->cmap[2]))
            return stk_fail(STK_EDATA, "TIFF: palette image without a colour map");
        info->components = 3;
        break;
    case PHOTOMETRIC_YCBCR:
        if (l->compression != COMPRESSION_JPEG)
            return stk_fail(STK_EDATA, "TIFF: YCbCr without JPEG compression is not decoded");
        if (l->spp != 3 || l->bits != 8)
            return stk_fail(STK_EDATA, "TIFF: YCbCr with %u samples of %u bits is not decoded",
                            l->spp, l->bits);
        /* libjpeg converts to RGB inside libtiff, as PIL asks too. */
        if (!TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
            return stk_tiff_fail(j, "setting JPEG colour mode");
        break;
    case PHOTOMETRIC_RGB:
    case PHOTOMETRIC_SEPARATED:
        if (l->bits != 8 || l->spp < (l->photometric == PHOTOMETRIC_RGB ? 3 : 4) || l->spp > 6)
            return stk_fail(STK_EDATA,
                            "TIFF: %s with %u samples of %u bits is not decoded (8-bit "
                            "samples only)",
                            pm, l->spp, l->bits);
        if (l->photometric == PHOTOMETRIC_SEPARATED) {
            uint16_t inkset = INKSET_CMYK;
            TIFFGetFieldDefaulted(tif, TIFFTAG_INKSET, &inkset);
            if (inkset != INKSET_CMYK)
                return stk_fail(STK_EDATA, "TIFF: separated image with ink set %u (not CMYK)",
                                inkset);
        }
        break;
    default:
        return stk_fail(STK_EDATA, "TIFF: photometric interpretation %u (%s) is not decoded",
                        l->photometric, pm);
    }
    return stk_codec_check_pixels("TIFF", l->width, l->height, max_pixels);
}

static int stk_tiff_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                          stk_image_info *info)
{
    stk_tiff_job j = {data, size, 0, 0, 0, {0}};
    stk_tiff_layout l;
    TIFF *tif = stk_tiff_open(&j, max_pixels);
    int rc;
    if (!tif)
        return stk_tiff_fail(&j, "reading the header");
    rc = stk_tiff_layout_read(tif, &j, max_pixels, &l, info);
    TIFFClose(tif);
    return rc;
}

/* All rows of samples, `scan` bytes each, into `raw`. */
static int stk_tiff_read_samples(TIFF *tif, stk_tiff_job *j, const stk_tiff_layout *l,
                                 uint8_t *raw, uint64_t scan, uint64_t max_pixels)
{
    if (TIFFIsTiled(tif)) {
        uint32_t tw = 0, th = 0;
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) ||
            !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || tw == 0 || th == 0)
            return stk_tiff_fail(j, "reading the tile size");
        /* A tile larger than the image rounded up to 16, or than the limit,
         * is refused before libtiff allocates it. */
        if (tw > ((l->width + 15) & ~15u) + 16 || th > ((l->height + 15) & ~15u) + 16 ||
            (uint64_t)tw * th > max_pixels + 65536)
            return stk_fail(STK_EDATA, "TIFF: tile %ux%u is too large for a %ux%u image", tw,
                            th, l->width, l->height);
        /* Tiles are copied at byte offsets: a tile whose rows do not
         * start on a byte of the image's rows (libtiff only warns about
         * widths that are not multiples of 16) would put bits in the
         * wrong place; refused rather than decoded wrong. */
        if (((uint64_t)tw * l->bits * l->spp) % 8)
            return stk_fail(STK_EUNSUPPORTED,
                            "TIFF: tiles %u pixels wide of %u-bit samples do not start on a "
                            "byte",
                            tw, (unsigned)(l->bits * l->spp));
        tmsize_t tsize = TIFFTileSize(tif);
        tmsize_t trow = TIFFTileRowSize(tif);
        if (tsize <= 0 || trow <= 0)
            return stk_tiff_fail(j, "computing the tile size");
        uint8_t *tile = _TIFFmalloc(tsize);
        if (!tile)
            return stk_fail(STK_ENOMEM, "TIFF: out of memory for a %lld-byte tile",
                            (long long)tsize);
        int rc = 0;
        for (uint32_t y = 0; y < l->height && !rc; y += th)
            for (uint32_t x = 0; x < l->width && !rc; x += tw) {
                ttile_t t = TIFFComputeTile(tif, x, y, 0, 0);
                tmsize_t got = TIFFReadEncodedTile(tif, t, tile, tsize);
                if (got != tsize || j->failed) {
                    rc = stk_tiff_fail(j, "reading a tile");
                    break;
                }
                /* Copy the tile's part inside the image. The bits of
                 * column x start at byte x * bits_px / 8: whole bytes,
                 * since x is a multiple of tw (checked above). */
                uint32_t rows = th < l->height - y ? th : l->height - y;
                uint32_t cols = tw < l->width - x ? tw : l->width - x;
                uint64_t bits_px = (uint64_t)l->bits * l->spp;
                uint64_t x_byte = (uint64_t)x * bits_px / 8;
                uint64_t n = ((uint64_t)cols * bits_px + 7) / 8;
                for (uint32_t r = 0; r < rows; r++)
                    memcpy(raw + (uint64_t)(y + r) * scan + x_byte, tile + (uint64_t)r * trow,
                           (size_t)n);
            }
        _TIFFfree(tile);
        return rc;
    }

    uint32_t rps = 0;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > l->height)
        rps = l->height;
    uint32_t nstrips = TIFFNumberOfStrips(tif);
    uint32_t needed = (l->height - 1) / rps + 1;
    if (nstrips < needed)
        return stk_fail(STK_EDATA, "TIFF: %u strips, the image needs %u", nstrips, needed);
    for (uint32_t s = 0; s < needed; s++) {
        uint32_t rows = rps < l->height - s * rps ? rps : l->height - s * rps;
        uint64_t want = (uint64_t)rows * scan;
        tmsize_t got = TIFFReadEncodedStrip(tif, s, raw + (uint64_t)s * rps * scan,
                                            (tmsize_t)want);
        if (got < 0 || (uint64_t)got != want || j->failed)
            return j->failed || got < 0
                       ? stk_tiff_fail(j, "reading a strip")
                       : stk_fail(STK_EDATA, "TIFF: strip %u decoded to %lld bytes, %llu expected",
                                  s, (long long)got, (unsigned long long)want);
    }
    return 0;
}

/* PIL's MULDIV255: a * b / 255, rounded. */
static unsigned stk_muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static uint8_t stk_clip8(int v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row of samples to RGB. */
static void stk_tiff_row(const stk_tiff_layout *l, const uint8_t *s, uint8_t *o)
{
    uint32_t w = l->width;
    unsigned spp = l->spp;
    switch (l->photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE: {
        unsigned maxv = (1u << l->bits) - 1, inv = l->photometric == PHOTOMETRIC_MINISWHITE;
        for (uint32_t x = 0; x < w; x++) {
            unsigned v;
            if (l->bits == 8) {
                v = s[(size_t)x * spp];
            } else {
                uint64_t bit = (uint64_t)x * l->bits;
                v = (s[bit / 8] >> (8 - l->bits - bit % 8)) & maxv;
                v = v * 255 / maxv;
            }
            if (inv)
                v = 255 - v;
            o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = (uint8_t)v;
        }
        break;
    }
    case PHOTOMETRIC_PALETTE: {
        unsigned maxv = (1u << l->bits) - 1;
        for (uint32_t x = 0; x < w; x++) {
            unsigned i;
            if (l->bits == 8) {
                i = s[(size_t)x * spp];
            } else {
                uint64_t bit = (uint64_t)x * l->bits;
                i = (s[bit / 8] >> (8 - l->bits - bit % 8)) & maxv;
            }
            o[3 * x] = (uint8_t)(l->cmap[0][i] >> 8);
            o[3 * x + 1] = (uint8_t)(l->cmap[1][i] >> 8);
            o[3 * x + 2] = (uint8_t)(l->cmap[2][i] >> 8);
        }
        break;
    }
    case PHOTOMETRIC_SEPARATED:
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = s + (size_t)x * spp;
            int nk = 255 - p[3];
            for (int c = 0; c < 3; c++)
                o[3 * x + c] = stk_clip8(nk - (int)stk_muldiv255(p[c], (unsigned)nk));
        }
        break;
    default: { /* RGB (YCbCr comes out of libjpeg as RGB) */
        int assoc = l->photometric == PHOTOMETRIC_RGB && spp >= 4 && l->extra_count >= 1 &&
                    l->extras[0] == EXTRASAMPLE_ASSOCALPHA;
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *p = s + (size_t)x * spp;
            if (!assoc) {
                o[3 * x] = p[0], o[3 * x + 1] = p[1], o[3 * x + 2] = p[2];
                continue;
            }
            unsigned a = p[3];
            for (int c = 0; c < 3; c++)
                o[3 * x + c] = a == 0 ? 0 : a == 255 ? p[c] : stk_clip8((int)(p[c] * 255u / a));
        }
        break;
    }
    }
}

static int stk_tiff_decode(const stk_decode_req *req)
{
    stk_tiff_job j = {req->data, req->size, 0, 0, 0, {0}};
    stk_tiff_layout l;
    stk_image_info info;
    TIFF *tif = stk_tiff_open(&j, req->max_pixels);
    int rc;

    if (!tif)
        return stk_tiff_fail(&j, "reading the header");
    if ((rc = stk_tiff_layout_read(tif, &j, req->max_pixels, &l, &info)))
        goto out;
    if (req->region && (rc = stk_codec_check_region("TIFF", req->region, l.width, l.height)))
        goto out;

    /* The samples of one row as libtiff delivers them (after YCbCr -> RGB
     * for JPEG). Bounded: at most 6 bytes a pixel, checked against the
     * layout. */
    uint64_t scan = (uint64_t)TIFFScanlineSize64(tif);
    uint64_t expect = ((uint64_t)l.width * l.bits * l.spp + 7) / 8;
    if (scan != expect) {
        rc = stk_fail(STK_EDATA, "TIFF: row of %llu bytes, %llu expected",
                      (unsigned long long)scan, (unsigned long long)expect);
        goto out;
    }
    uint64_t rgb, raw, all;
    if (!stk_mul_ok((uint64_t)l.width * l.height, 3, &rgb) || !stk_mul_ok(scan, l.height, &raw) ||
        !stk_add_ok(rgb, raw, &all) || all > SIZE_MAX) {
        rc = stk_fail(STK_ELIMIT, "TIFF: image does not fit in memory");
        goto out;
    }
    /* libtiff's own: the compressed bytes of one strip or tile (no more
     * than the file), and for tiles the decoded tile we copy from
     * (strips decode straight into `raw`). */
    uint64_t unit = TIFFIsTiled(tif) ? (uint64_t)TIFFTileSize64(tif)
                                     : (uint64_t)TIFFStripSize64(tif);
    uint64_t own = (unit < j.size ? unit : j.size) + (TIFFIsTiled(tif) ? unit : 0);
    if ((rc = stk_codec_check_bytes(req, "TIFF", l.width, l.height, all, own)) ||
        (rc = stk_codec_reserve(req, (size_t)all)))
        goto out;
    uint8_t *samples = req->out->data + rgb;
    j.reading = 1;
    if ((rc = stk_tiff_read_samples(tif, &j, &l, samples, scan, req->max_pixels)))
        goto out;
    for (uint32_t y = 0; y < l.height; y++)
        stk_tiff_row(&l, samples + (uint64_t)y * scan, req->out->data + (uint64_t)y * l.width * 3);
    stk_codec_finish_view(req, req->out->data, l.width, l.height);

out:
    TIFFClose(tif);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

/* Classic TIFF, little or big endian ("II*\0", "MM\0*"); BigTIFF is
 * refused by name (codec_table.c). */
static int stk_tiff_sniff(const uint8_t *data, size_t size)
{
    return size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0);
}

const stk_codec_desc stk_codec_tiff = {
    .format = STK_IMAGE_TIFF,
    .name = "TIFF",
    .sniff = stk_tiff_sniff,
    .probe = stk_tiff_probe,
    .decode = stk_tiff_decode,
    .decode_mask = NULL,
    .near_miss = NULL,
    .scales = STK_CODEC_SCALE(1),
};
