/*
 * gif.c — GIF decoding through giflib (5.2), the first frame only.
 *
 * What it produces: frame 0 as PIL 9.4's GifImagePlugin gives it for
 * Image.open(f).convert("RGB"), exactly (tests/python/test_codec_pil.py):
 *
 *   - the canvas is the logical screen, grown to contain the first frame's
 *     rectangle when that reaches beyond it (PIL does the same);
 *   - the canvas is filled with the transparent index of the frame's
 *     graphic control extension when it has one, else with index 0 (not
 *     the background colour: PIL ignores it for frame 0), and the frame's
 *     pixels are written over its rectangle, transparent ones included;
 *   - every index is looked up in the frame's colour table (the local one,
 *     else the global one); an index past the table's end gives gray
 *     (i, i, i), as PIL's palette, which starts as a gray ramp, does, and
 *     so does a file with no colour table at all (PIL's mode "L");
 *   - interlaced frames are put back in row order.
 *
 * How. DGifOpen with an input function over the caller's buffer (no file,
 * no copy), then the records one at a time (DGifGetRecordType): extensions
 * are read block by block (a graphic control extension sets the transparent
 * index; the last one before the image counts, as in PIL), and at the
 * first image descriptor the canvas size is known and checked against
 * max_pixels and the decode budget (4 bytes a canvas pixel: RGB and
 * index) before anything is allocated; the frame is read row by row
 * with DGifGetLine into the output, which also reads the rest of the
 * frame's data up to its terminating block. Later frames and the trailer
 * are not read (DGifSlurp, which reads every frame into memory, is not
 * used: an animation's later frames cost nothing).
 *
 * Hostile input. giflib reports errors by return value (no longjmp, no
 * printing); each becomes STK_EDATA "GIF: <GifErrorString>" (STK_ENOMEM
 * for D_GIF_ERR_NOT_ENOUGH_MEM). A frame whose data ends early is
 * D_GIF_ERR_READ_FAILED ("failed to read from given file"): an error,
 * never a partly filled picture. A file with no image before its trailer,
 * or a zero-sized canvas, is an error. Region: the window of the whole
 * decode; scale_denom 1 only.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <string.h>

#include <gif_lib.h>

typedef struct stk_gif_src {
    const uint8_t *data; /* lent */
    size_t size, pos;
} stk_gif_src;

/* The first frame's header, once reached. */
typedef struct stk_gif_frame {
    uint32_t cw, ch;               /* canvas */
    uint32_t x, y, w, h;           /* the frame's rectangle */
    int interlace;
    int transparent;               /* index, or -1 */
    const ColorMapObject *cmap;    /* giflib's; NULL for none */
} stk_gif_frame;

static int stk_gif_input(GifFileType *gif, GifByteType *buf, int n)
{
    stk_gif_src *s = (stk_gif_src *)gif->UserData;
    size_t left = s->size - s->pos, k = n < 0 ? 0 : (size_t)n;
    if (k > left)
        k = left;
    memcpy(buf, s->data + s->pos, k);
    s->pos += k;
    return (int)k;
}

static int stk_gif_err(int code, const char *doing)
{
    const char *why = GifErrorString(code);
    return stk_fail(code == D_GIF_ERR_NOT_ENOUGH_MEM ? STK_ENOMEM : STK_EDATA, "GIF: %s: %s",
                    doing, why ? why : "unknown error");
}

/* Read records up to the first image descriptor: fill *f, *info, check the
 * limit. */
static int stk_gif_first_frame(GifFileType *gif, uint64_t max_pixels, stk_gif_frame *f,
                               stk_image_info *info)
{
    GifRecordType type;
    memset(f, 0, sizeof *f);
    f->transparent = -1;
    for (;;) {
        if (DGifGetRecordType(gif, &type) == GIF_ERROR)
            return stk_gif_err(gif->Error, "reading a record");
        if (type == IMAGE_DESC_RECORD_TYPE)
            break;
        if (type == TERMINATE_RECORD_TYPE)
            return stk_fail(STK_EDATA, "GIF: no image before the trailer");
        if (type != EXTENSION_RECORD_TYPE)
            return stk_fail(STK_EDATA, "GIF: unexpected record type %d", (int)type);
        int code;
        GifByteType *ext;
        if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR)
            return stk_gif_err(gif->Error, "reading an extension");
        if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1))
            f->transparent = ext[4];
        while (ext)
            if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR)
                return stk_gif_err(gif->Error, "reading an extension");
    }
    if (DGifGetImageDesc(gif) == GIF_ERROR)
        return stk_gif_err(gif->Error, "reading the image descriptor");
    const GifImageDesc *d = &gif->Image;
    if (d->Left < 0 || d->Top < 0 || d->Width <= 0 || d->Height <= 0)
        return stk_fail(STK_EDATA, "GIF: bad frame %dx%d at (%d, %d)", d->Width, d->Height,
                        d->Left, d->Top);
    f->x = (uint32_t)d->Left, f->y = (uint32_t)d->Top;
    f->w = (uint32_t)d->Width, f->h = (uint32_t)d->Height;
    f->interlace = d->Interlace;
    f->cmap = d->ColorMap ? d->ColorMap : gif->SColorMap;
    f->cw = gif->SWidth > 0 ? (uint32_t)gif->SWidth : 0;
    f->ch = gif->SHeight > 0 ? (uint32_t)gif->SHeight : 0;
    if (f->x + f->w > f->cw)
        f->cw = f->x + f->w; /* < 2^17: fields are 16-bit */
    if (f->y + f->h > f->ch)
        f->ch = f->y + f->h;

    memset(info, 0, sizeof *info);
    info->format = STK_IMAGE_GIF;
    info->width = f->cw;
    info->height = f->ch;
    info->components = 3;
    return stk_codec_check_pixels("GIF", f->cw, f->ch, max_pixels);
}

static GifFileType *stk_gif_open(stk_gif_src *src, int *rc)
{
    int err = 0;
    GifFileType *gif = DGifOpen(src, stk_gif_input, &err);
    *rc = gif ? 0 : stk_gif_err(err, "reading the header");
    return gif;
}

static int stk_gif_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                         stk_image_info *info)
{
    stk_gif_src src = {data, size, 0};
    stk_gif_frame f;
    int rc, err;
    GifFileType *gif = stk_gif_open(&src, &rc);
    if (!gif)
        return rc;
    rc = stk_gif_first_frame(gif, max_pixels, &f, info);
    DGifCloseFile(gif, &err);
    return rc;
}

static int stk_gif_decode(const stk_decode_req *req)
{
    stk_gif_src src = {req->data, req->size, 0};
    stk_image_info info;
    stk_gif_frame f;
    int rc, err;
    GifFileType *gif = stk_gif_open(&src, &rc);

    if (!gif)
        return rc;
    if ((rc = stk_gif_first_frame(gif, req->max_pixels, &f, &info)))
        goto out;
    if (req->region && (rc = stk_codec_check_region("GIF", req->region, f.cw, f.ch)))
        goto out;

    /* The canvas as indices (1 byte a pixel) after the RGB output. */
    size_t rgb = (size_t)f.cw * f.ch * 3, idx = (size_t)f.cw * f.ch;
    /* (A 35-byte file can declare a 65535x65535 screen: the budget is
     * checked on the canvas, which is what gets allocated.) */
    if ((rc = stk_codec_check_bytes(req, "GIF", f.cw, f.ch, rgb + idx, 0)) ||
        (rc = stk_codec_reserve(req, rgb + idx)))
        goto out;
    uint8_t *canvas = req->out->data + rgb;
    memset(canvas, f.transparent >= 0 ? f.transparent : 0, idx);

    static const uint32_t start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < (f.interlace ? 4 : 1); pass++) {
        uint32_t y0 = f.interlace ? start[pass] : 0, dy = f.interlace ? step[pass] : 1;
        for (uint32_t y = y0; y < f.h; y += dy)
            if (DGifGetLine(gif, canvas + (size_t)(f.y + y) * f.cw + f.x, (int)f.w) ==
                GIF_ERROR) {
                rc = stk_gif_err(gif->Error, "reading the image data");
                goto out;
            }
    }

    /* Indices to RGB through the colour table (gray past its end). */
    uint8_t table[256 * 3];
    for (int i = 0; i < 256; i++) {
        if (f.cmap && i < f.cmap->ColorCount && f.cmap->Colors) {
            table[3 * i] = f.cmap->Colors[i].Red;
            table[3 * i + 1] = f.cmap->Colors[i].Green;
            table[3 * i + 2] = f.cmap->Colors[i].Blue;
        } else {
            table[3 * i] = table[3 * i + 1] = table[3 * i + 2] = (uint8_t)i;
        }
    }
    for (size_t k = 0; k < idx; k++)
        memcpy(req->out->data + 3 * k, table + 3 * (size_t)canvas[k], 3);
    stk_codec_finish_view(req, req->out->data, f.cw, f.ch);

out:
    DGifCloseFile(gif, &err);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

/* "GIF87a" or "GIF89a". */
static int stk_gif_sniff(const uint8_t *data, size_t size)
{
    return size >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0);
}

const stk_codec_desc stk_codec_gif = {
    .format = STK_IMAGE_GIF,
    .name = "GIF",
    .sniff = stk_gif_sniff,
    .probe = stk_gif_probe,
    .decode = stk_gif_decode,
    .decode_mask = NULL,
    .near_miss = NULL,
    .scales = STK_CODEC_SCALE(1),
};
