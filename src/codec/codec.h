/*
 * codec.h — decoding encoded images (internal). The only module that
 * includes codec headers (libjpeg-turbo's jpeglib.h, libspng's spng.h,
 * libwebp's decode.h, libtiff's tiffio.h, giflib's gif_lib.h).
 *
 * Everything here treats its input as hostile: the header is read and the
 * dimensions checked against the limits before any pixel buffer is
 * allocated, every libjpeg error and warning (a truncated stream is only a
 * warning to libjpeg) becomes STK_EDATA with the decoder's reason, and
 * nothing longjmps across stoker frames.
 *
 * Output is always 8-bit RGB, HWC interleaved: grayscale is replicated,
 * CMYK/YCCK (including Adobe's inverted CMYK) converted, alpha dropped,
 * 16-bit PNG reduced to 8 bits, palettes expanded. EXIF orientation is
 * ignored, as torchvision/PIL do by default.
 *
 * Where it is implemented: codec_dispatch.c (probe, decode, mask: argument
 * checks, then the row's hook), codec_table.c (the table of codecs and the
 * lookups: sniff, names, scales), codec_util.c (stk_image_last_need), one
 * file per codec (jpeg.c, png.c, webp.c, bmp.c, tiff.c, gif.c).
 */
#ifndef STK_CODEC_CODEC_H
#define STK_CODEC_CODEC_H

#include "codec/codec_list.h"
#include "core/image.h"
#include "core/util.h"
#include "stoker/stoker.h"

/* A format's id: one per row of the codec list (codec_list.h), pinned: its
 * position there, from 1 (STK_IMAGE_JPEG 1, PNG 2, WEBP 3, BMP 4, TIFF 5,
 * GIF 6); a new codec is appended, so no value ever changes. */
#define STK_IMAGE_FORMAT_ID(id, name) STK_IMAGE_##id,
typedef enum stk_image_format {
    STK_IMAGE_UNKNOWN = 0,
    STK_CODECS(STK_IMAGE_FORMAT_ID)
} stk_image_format;
#undef STK_IMAGE_FORMAT_ID

typedef struct stk_image_info {
    stk_image_format format;
    uint32_t width, height;
    uint32_t components; /* as stored: 1 gray, 3 color, 4 CMYK/RGBA, 2 gray+alpha */
    int progressive;     /* JPEG only */
    int cmyk;            /* JPEG stored as CMYK or YCCK */
} stk_image_info;

/* Largest width * height decoded unless the caller says otherwise (also the
 * default of stk_dataset_options.max_pixels). */
#define STK_DEFAULT_MAX_PIXELS (1ull << 28)

/* Internal (not in include/stoker): fields may be added. Zero-initialise
 * it and set what you need. */
typedef struct stk_codec_limits {
    uint64_t max_pixels; /* width * height; 0 = STK_DEFAULT_MAX_PIXELS */
    /* The decode budget: the bytes one decode may need at its peak — the
     * output it writes into `out` plus the buffers the decoder allocates
     * itself (libjpeg's coefficients of a progressive file, libwebp's
     * lossless ARGB image, libtiff's strip, libspng's rows) — as computed
     * from the header, before anything sized by the image is allocated.
     * Over it: STK_ELIMIT naming the bytes needed and the budget. 0 = no
     * budget (the decode is then exactly what it was before the field
     * existed). The loader sets it from memory_limit (docs/engine.md). */
    uint64_t max_bytes;
} stk_codec_limits;

/* Sniff the format from magic bytes ("\xFF\xD8\xFF" JPEG, PNG signature,
 * RIFF....WEBP, "BM", "II*\0" / "MM\0*", "GIF87a" / "GIF89a"): each row
 * of the codec table tries its own. */
stk_image_format stk_image_sniff(const uint8_t *data, size_t size);
/* "JPEG", "PNG", "WebP", "BMP", "TIFF", "GIF" (the row's name, a static
 * string); "unknown" for STK_IMAGE_UNKNOWN or an id no row has. */
const char *stk_image_format_name(stk_image_format f);
/* The scale_denom values stk_image_decode takes for format f, as a mask
 * with bit d set for denominator d: 1 << 1 for a codec that decodes at full
 * size only, (1 << 1) | (1 << 2) | (1 << 4) | (1 << 8) for JPEG; 0 for
 * STK_IMAGE_UNKNOWN. So `scales & (1u << d)` asks "can it decode at 1/d?". */
unsigned stk_image_format_scales(stk_image_format f);
/* The names of every format decoded, in the table's order, joined with ", "
 * and `last` before the final one ("JPEG, PNG, WebP, BMP, TIFF and GIF" for
 * last = "and"), into buf (always terminated; cut to cap - 1 bytes, 128
 * is plenty). Returns buf. For messages that list what is decoded. */
const char *stk_image_format_names(char *buf, size_t cap, const char *last);

/* Read only the header. STK_EDATA (bad/unknown/truncated header),
 * STK_ELIMIT (over max_pixels) with the reason in stk_errmsg(). */
int stk_image_probe(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                    stk_image_info *info);

/* A rectangle in full-resolution pixel coordinates. */
typedef struct stk_rect {
    uint32_t x, y, width, height;
} stk_rect;

/*
 * Decode to RGB8 HWC into `out` (grown as needed) and describe it in *view.
 *
 * region: NULL for the whole image, else the part wanted (full-resolution
 *   coordinates, inside the image). JPEG decodes only the rows and the
 *   iMCU-aligned columns that cover it (jpeg_crop_scanline /
 *   jpeg_skip_scanlines); *view is then exactly the region (scaled).
 * scale_denom: 1, 2, 4 or 8 — JPEG DCT scaling (output is ceil(size/denom));
 *   every other format accepts only 1 (STK_EINVAL; stk_image_format_scales
 *   says what a format takes). With scaling, the region is scaled the same
 *   way: the view covers floor(x/d) .. ceil((x+w)/d).
 *
 * Errors: STK_EDATA with the decoder's reason for corrupt or truncated data,
 * STK_ELIMIT over the pixel limit, STK_EINVAL for a bad region/scale,
 * STK_ENOMEM.
 */
int stk_image_decode(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                     const stk_rect *region, unsigned scale_denom, stk_scratch *out,
                     stk_image_view *view);

/* What the calling thread's last stk_image_decode needed by the budget's
 * count (both 0 before the first, or after one refused before the decoder
 * read the header or over the budget: nothing was allocated for it):
 * `out_bytes` the part in `out`, `own_bytes` the
 * decoder's own buffers, freed before it returned. The loader adds the
 * latter to the memory it reports (stk_loader_stats.memory_bytes). */
void stk_image_last_need(uint64_t *out_bytes, uint64_t *own_bytes);

/*
 * Decode a segmentation mask: one channel of class ids. An indexed or
 * grayscale PNG gives its stored values (palette indices, gray samples of
 * up to 8 bits); any other image is decoded to RGB and its first channel
 * taken (*view then has col_stride 3). STK_EDATA for a PNG of another
 * colour type or a 16-bit one.
 */
int stk_image_decode_mask(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                          stk_scratch *out, stk_image_view *view);

#endif
