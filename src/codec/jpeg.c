/*
 * jpeg.c — JPEG decoding through libjpeg-turbo's libjpeg API.
 *
 * What it produces. 8-bit RGB, HWC, for every colour space libjpeg reads:
 * YCbCr and RGB are converted by libjpeg (JCS_RGB), grayscale is replicated
 * by libjpeg's own gray->RGB converter, and CMYK/YCCK is decoded as JCS_CMYK
 * and converted here with PIL's formula (below). The IDCT is JDCT_ISLOW and
 * upsampling is libjpeg's default "fancy" (triangular) filter — the settings
 * PIL uses for a full-size decode, against the same library — so a full-size
 * decode is bit-exact with PIL's Image.open(f).convert("RGB").
 *
 * Errors without escaping longjmps. libjpeg reports a fatal error by calling
 * error_exit, which must not return; the only way out is longjmp. All of the
 * libjpeg calls of one probe or decode are made lexically inside one
 * function, stk_jpeg_run, which holds the setjmp; no stoker frame lies
 * between it and libjpeg, so a longjmp only ever unwinds libjpeg's frames
 * and lands in stk_jpeg_run, which destroys the decompressor and returns
 * STK_EDATA ("JPEG: <libjpeg's message>"; STK_ENOMEM for libjpeg's
 * out-of-memory error). Everything that the error path reads lives in the
 * caller-owned stk_jpeg_job, never in locals changed after setjmp.
 *
 * Warnings are errors. libjpeg treats a truncated file as a warning
 * (JWRN_JPEG_EOF: it pads the stream with a fake EOI and fills the missing
 * blocks with grey) and corrupt entropy data likewise (bad Huffman code,
 * premature end of a data segment, lost restart sync). emit_message turns each of those into the same error
 * path, so a damaged file is STK_EDATA and never grey pixels. Four
 * warnings are tolerated because the pixels are intact: an unknown JFIF
 * revision, an unknown Adobe transform code, a bad ICC marker (metadata
 * only), and extraneous bytes before a marker — junk between segments that
 * libjpeg skips, found in real ImageNet files that PIL opens (a truncated
 * stream is still caught by JWRN_JPEG_EOF). The decoder reads only the rows it needs and stops
 * (jpeg_finish_decompress is never called): for a whole baseline image the
 * entropy decoder still reads up to the marker after the last scan, so a
 * file cut anywhere, even just its EOI marker, fails; for a region, bytes
 * after the region's last row are not looked at, so a baseline file cut
 * below the region decodes. A progressive file is read whole by
 * jpeg_start_decompress, so its truncation always shows.
 *
 * Hostile input. The header is read first (jpeg_read_header allocates only
 * small tables), width * height is checked against max_pixels before
 * jpeg_start_decompress allocates anything sized by the image (a
 * progressive JPEG's coefficient buffer is 2 bytes per pixel and component),
 * and the number of scans is capped (STK_JPEG_MAX_SCANS, as libjpeg-turbo's
 * own fuzzers and TJPARAM_SCANLIMIT do) through the progress monitor, since
 * each scan of a progressive file costs a pass over the whole image. libjpeg
 * never prints: output_message is silenced.
 *
 * Region and scale. With scale_denom d libjpeg decodes through a reduced
 * IDCT to ceil(W/d) x ceil(H/d). A region (x, y, w, h) given in full-size
 * pixels maps to the scaled columns floor(x/d) .. ceil((x+w)/d) - 1 (and the
 * same for rows). After jpeg_start_decompress, jpeg_crop_scanline narrows
 * the decode to those columns; libjpeg widens the left edge down to an iMCU
 * boundary and reports where it put it, and the view is offset by the
 * difference, so the caller gets exactly the region. One more column is
 * asked for on each side: fancy upsampling of subsampled chroma reads one
 * neighbouring chroma sample, and at the edge of a crop libjpeg replicates
 * the edge sample instead, which would change the first or last column of
 * the region. And libjpeg picks its upsampler by the (cropped) width: a
 * component only 1 or 2 samples wide gets plain replication instead of the
 * fancy filter, so a crop is never narrower than 2 * max_h_samp_factor + 1
 * columns (found by fuzz/fuzz_codec.c: a 1-pixel-wide region of a 4:2:0
 * image). A progressive file whose coefficients are not all refined gets
 * libjpeg's block smoothing, which estimates AC terms from the DC values of
 * the neighbouring blocks up to two away; at a crop's left edge libjpeg
 * uses the edge block's own DC instead, so for progressive files the crop
 * starts two iMCU columns further left (also found by fuzzing). For
 * unusual sampling factors at some scales libjpeg-turbo 2.1
 * mis-sizes a cropped component (stk_jpeg_crop_ok); those files are
 * decoded at full width. With all that, every pixel of the region is computed
 * from the same inputs as in a full decode, so a region decode equals the
 * same window of a full decode exactly (the tests check this for baseline,
 * progressive, 4:2:0, 4:2:2, 4:4:4, gray and CMYK, at every scale).
 * jpeg_skip_scanlines then skips the rows above the region (whole iMCU rows
 * are entropy-decoded only; the last partial one is decoded and discarded,
 * which is what keeps the vertical upsampling context right), the region's
 * rows are read, and the decompressor is destroyed without reading the
 * rest.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

/* Scans allowed in one file. A real progressive JPEG has about 10. */
#define STK_JPEG_MAX_SCANS 500
/* Scanlines asked of libjpeg per jpeg_read_scanlines call. */
#define STK_JPEG_ROWS 16

typedef struct stk_jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg sees only this part */
    jmp_buf jump;              /* set by stk_jpeg_run */
    int code;                  /* STK_EDATA or STK_ENOMEM, set before the jump */
    char msg[JMSG_LENGTH_MAX + 64]; /* libjpeg's (or our) reason */
} stk_jpeg_err;

/* One probe or decode. Lives in the caller's frame; everything the error
 * path needs is here. */
typedef struct stk_jpeg_job {
    const uint8_t *data;          /* lent: the file */
    size_t size;
    uint64_t max_pixels;
    const stk_decode_req *req;    /* lent; NULL for a probe */
    stk_image_info *info;         /* caller's; filled from the header */
    struct jpeg_decompress_struct cinfo;
    stk_jpeg_err err;
    struct jpeg_progress_mgr progress;
    JSAMPROW rows[STK_JPEG_ROWS];
    uint64_t own;                 /* libjpeg's own bytes, by the budget's count
                                     (here, not a local: setjmp) */
} stk_jpeg_job;

/* ------------------------------------------------------------------------ */
/* libjpeg callbacks                                                        */
/* ------------------------------------------------------------------------ */

static void stk_jpeg_error_exit(j_common_ptr cinfo)
{
    stk_jpeg_err *e = (stk_jpeg_err *)cinfo->err;
    e->code = cinfo->err->msg_code == JERR_OUT_OF_MEMORY ? STK_ENOMEM : STK_EDATA;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

int stk_jpeg_warning_is_benign(int msg_code)
{
    switch (msg_code) {
    case JWRN_JFIF_MAJOR:  /* unknown JFIF revision: metadata only */
    case JWRN_ADOBE_XFORM: /* unknown Adobe transform code: libjpeg guesses */
    case JWRN_BOGUS_ICC:   /* bad ICC marker: we do not use ICC */
    case JWRN_EXTRANEOUS_DATA: /* junk before a marker, skipped; PIL accepts it */
        return 1;
    default:
        return 0; /* truncation or corrupt data */
    }
}

static void stk_jpeg_emit_message(j_common_ptr cinfo, int level)
{
    if (level >= 0)
        return; /* trace messages */
    if (!stk_jpeg_warning_is_benign(cinfo->err->msg_code))
        stk_jpeg_error_exit(cinfo);
    cinfo->err->num_warnings++;
}

static void stk_jpeg_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void stk_jpeg_progress(j_common_ptr cinfo)
{
    stk_jpeg_err *e = (stk_jpeg_err *)cinfo->err;
    if (cinfo->is_decompressor &&
        ((j_decompress_ptr)cinfo)->input_scan_number > STK_JPEG_MAX_SCANS) {
        e->code = STK_EDATA;
        snprintf(e->msg, sizeof e->msg, "more than %d scans (a hostile progressive file?)",
                 STK_JPEG_MAX_SCANS);
        longjmp(e->jump, 1);
    }
}

/* ------------------------------------------------------------------------ */
/* Pure helpers (no libjpeg calls: nothing longjmps through them)           */
/* ------------------------------------------------------------------------ */

static int stk_jpeg_is_cmyk(J_COLOR_SPACE cs) { return cs == JCS_CMYK || cs == JCS_YCCK; }

static void stk_jpeg_fill_info(const struct jpeg_decompress_struct *c, stk_image_info *info)
{
    info->format = STK_IMAGE_JPEG;
    info->width = c->image_width;
    info->height = c->image_height;
    info->components = (uint32_t)c->num_components;
    info->progressive = c->progressive_mode ? 1 : 0;
    info->cmyk = stk_jpeg_is_cmyk(c->jpeg_color_space);
}

/* a * b / 255, rounded, exactly as PIL's MULDIV255. */
static inline int stk_muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/*
 * CMYK scanlines -> RGB, the way PIL does it. PIL reads every CMYK JPEG as
 * Adobe-inverted ("CMYK;I": it stores 255 - v) and converts with
 * cmyk2rgb: nk = 255 - K; R = nk - nk * C / 255 (and G, B from M, Y). Here
 * `inv` is the inverted sample, 255 - ink: the stored byte for Adobe files,
 * 255 - stored otherwise, so in PIL's terms C = 255 - inv_c and
 * nk = inv_k. PIL would invert a non-Adobe file too and produce a negative;
 * stoker follows the Adobe marker instead (docs/codec.md).
 */
static void stk_cmyk_to_rgb(const uint8_t *in, uint8_t *out, uint32_t n, int adobe)
{
    uint8_t flip = adobe ? 0 : 255;
    for (uint32_t i = 0; i < n; i++, in += 4, out += 3) {
        int nk = in[3] ^ flip;
        for (int c = 0; c < 3; c++) {
            int ink = 255 - (in[c] ^ flip);
            out[c] = (uint8_t)(nk - stk_muldiv255(ink, nk));
        }
    }
}

/* Does libjpeg upsample any component horizontally at this scale? (After
 * jpeg_start_decompress: a component's output width per block is
 * DCT_scaled_size, so its expansion is max_h * min_size / (h * its size);
 * libjpeg scales chroma up through the IDCT where it can, e.g. 4:2:0 at
 * 1/2 needs no upsampling at all.) */
static int stk_jpeg_h_upsampled(const struct jpeg_decompress_struct *c)
{
    for (int i = 0; i < c->num_components; i++)
        if (c->comp_info[i].h_samp_factor * c->comp_info[i].DCT_scaled_size !=
            c->max_h_samp_factor * c->min_DCT_scaled_size)
            return 1;
    return 0;
}

/* Can jpeg_crop_scanline be trusted here? libjpeg-turbo 2.1 sizes a cropped
 * component as output_width * h / max_h samples, ignoring a component IDCT
 * scaled to a larger size than the others. That is harmless when such a
 * component then needs no upsampling at all (4:2:0 at 1/2), but any
 * upsampler, horizontal or vertical, then runs over the wrong width (h2v4
 * or h4v2 sampling at 1/2 or 1/4 — found by fuzzing). Such files are
 * decoded at full width (rows are still skipped). */
static int stk_jpeg_crop_ok(const struct jpeg_decompress_struct *c)
{
    for (int i = 0; i < c->num_components; i++) {
        const jpeg_component_info *ci = &c->comp_info[i];
        if (ci->DCT_scaled_size != c->min_DCT_scaled_size &&
            (ci->h_samp_factor * ci->DCT_scaled_size !=
                 c->max_h_samp_factor * c->min_DCT_scaled_size ||
             ci->v_samp_factor * ci->DCT_scaled_size !=
                 c->max_v_samp_factor * c->min_DCT_scaled_size))
            return 0;
    }
    return 1;
}

static unsigned stk_div_up(unsigned a, unsigned d) { return a / d + (a % d != 0); }

/* ------------------------------------------------------------------------ */
/* The one frame that talks to libjpeg                                      */
/* ------------------------------------------------------------------------ */

static int stk_jpeg_run(stk_jpeg_job *job)
{
    struct jpeg_decompress_struct *cinfo = &job->cinfo;
    const stk_decode_req *req = job->req;
    unsigned d = req ? req->scale_denom : 1;
    unsigned sx0, sx1, sy0, sy1, ow, oh;
    JDIMENSION xoff, cw;
    int cmyk, adobe, rc = 0;
    size_t row_bytes, tmp_row_bytes;
    uint64_t total, tmp;
    uint8_t *base, *tmpbuf;

    job->cinfo.err = jpeg_std_error(&job->err.pub);
    job->err.pub.error_exit = stk_jpeg_error_exit;
    job->err.pub.emit_message = stk_jpeg_emit_message;
    job->err.pub.output_message = stk_jpeg_output_message;
    job->err.code = STK_EDATA;
    job->progress.progress_monitor = stk_jpeg_progress;

    if (setjmp(job->err.jump)) {
        /* Every libjpeg error and rejected warning lands here. */
        jpeg_destroy_decompress(&job->cinfo);
        return stk_fail(job->err.code, "JPEG: %s", job->err.msg);
    }

    jpeg_create_decompress(cinfo);
    cinfo->progress = &job->progress;
    jpeg_mem_src(cinfo, job->data, (unsigned long)job->size);
    jpeg_read_header(cinfo, TRUE);

    stk_jpeg_fill_info(cinfo, job->info);
    rc = stk_codec_check_pixels("JPEG", cinfo->image_width, cinfo->image_height,
                                job->max_pixels);
    if (rc || !req)
        goto done;
    if (req->region) {
        rc = stk_codec_check_region("JPEG", req->region, cinfo->image_width,
                                    cinfo->image_height);
        if (rc)
            goto done;
    }

    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        cinfo->out_color_space = JCS_RGB;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        cinfo->out_color_space = JCS_CMYK;
        break;
    default:
        rc = stk_fail(STK_EDATA, "JPEG: unsupported colour space (%d components)",
                      cinfo->num_components);
        goto done;
    }
    cmyk = cinfo->out_color_space == JCS_CMYK;
    adobe = cinfo->saw_Adobe_marker ? 1 : 0;
    cinfo->dct_method = JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    cinfo->scale_num = 1;
    cinfo->scale_denom = d;

    /* The decode budget, part 1: a progressive file keeps every DCT
     * coefficient of the whole image (128 bytes a block of each
     * component, at any scale or crop) from jpeg_start_decompress on; a
     * sequential one only an iMCU row. Checked before that allocation. */
    if (cinfo->progressive_mode) {
        for (int c = 0; c < cinfo->num_components; c++) {
            const jpeg_component_info *ci = &cinfo->comp_info[c];
            /* blocks, rounded out to whole iMCUs (at most one more) */
            uint64_t bw = (uint64_t)cinfo->image_width * ci->h_samp_factor /
                              (8 * (uint64_t)cinfo->max_h_samp_factor) +
                          1 + (uint64_t)cinfo->max_h_samp_factor;
            uint64_t bh = (uint64_t)cinfo->image_height * ci->v_samp_factor /
                              (8 * (uint64_t)cinfo->max_v_samp_factor) +
                          1 + (uint64_t)cinfo->max_v_samp_factor;
            job->own += bw * bh * 128;
        }
    }
    rc = stk_codec_check_bytes(req, "JPEG", cinfo->image_width, cinfo->image_height, 0,
                               job->own);
    if (rc)
        goto done;

    jpeg_start_decompress(cinfo);
    ow = cinfo->output_width;
    oh = cinfo->output_height;

    /* The wanted window, in scaled pixels. */
    if (req->region) {
        sx0 = req->region->x / d;
        sy0 = req->region->y / d;
        sx1 = stk_div_up(req->region->x + req->region->width, d);
        sy1 = stk_div_up(req->region->y + req->region->height, d);
        if (sx1 > ow)
            sx1 = ow;
        if (sy1 > oh)
            sy1 = oh;
    } else {
        sx0 = sy0 = 0;
        sx1 = ow;
        sy1 = oh;
    }
    if (sx0 >= sx1 || sy0 >= sy1) {
        rc = stk_fail(STK_EDATA, "JPEG: empty scaled region (output %ux%u)", ow, oh);
        goto done;
    }

    /* Columns. With horizontally subsampled chroma, one extra column on
     * each side keeps the upsampling context, and the crop is kept wide
     * enough that libjpeg still chooses fancy upsampling for it (see the
     * essay). */
    xoff = 0;
    cw = ow;
    if (sx1 - sx0 < ow && stk_jpeg_crop_ok(cinfo)) {
        unsigned up = (unsigned)stk_jpeg_h_upsampled(cinfo);
        unsigned minw = up ? 2 * (unsigned)cinfo->max_h_samp_factor + 1 : 1;
        /* Progressive: block smoothing reads the DC of two blocks to the
         * left, which a crop replaces by its first block's own. */
        unsigned imcu = (unsigned)(cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size);
        unsigned left = cinfo->progressive_mode ? 2 * imcu : up;
        JDIMENSION lo = sx0 > left ? sx0 - left : 0;
        JDIMENSION hi = sx1 + up < ow ? sx1 + up : ow;
        if (hi - lo < minw) {
            hi = lo + minw < ow ? lo + minw : ow;
            lo = hi - lo < minw ? (hi > minw ? hi - minw : 0) : lo;
        }
        xoff = lo;
        cw = hi - lo;
    }
    if (cw < ow) {
        jpeg_crop_scanline(cinfo, &xoff, &cw);
        if (xoff > sx0 || (uint64_t)xoff + cw < sx1 || cinfo->output_width != cw) {
            rc = stk_fail(STK_EDATA, "JPEG: libjpeg cropped to %u+%u, outside the wanted %u..%u",
                          xoff, cw, sx0, sx1);
            goto done;
        }
    }

    /* Output buffer: the rows of the region at the cropped width, plus
     * STK_JPEG_ROWS CMYK rows to convert from. Bounded by max_pixels. */
    row_bytes = (size_t)cw * 3;
    tmp_row_bytes = cmyk ? (size_t)cw * 4 : 0;
    if (!stk_mul_ok(row_bytes, sy1 - sy0, &total) ||
        !stk_mul_ok(tmp_row_bytes, STK_JPEG_ROWS, &tmp) || !stk_add_ok(total, tmp, &total) ||
        total > SIZE_MAX) {
        rc = stk_fail(STK_ELIMIT, "JPEG: %ux%u output does not fit in memory", cw, sy1 - sy0);
        goto done;
    }
    /* Part 2: the output, now that the crop is known. */
    rc = stk_codec_check_bytes(req, "JPEG", cinfo->image_width, cinfo->image_height, total,
                               job->own);
    if (rc || (rc = stk_codec_reserve(req, (size_t)total)))
        goto done;
    base = req->out->data;
    tmpbuf = base + row_bytes * (sy1 - sy0);

    if (sy0 > 0 && jpeg_skip_scanlines(cinfo, sy0) != sy0) {
        rc = stk_fail(STK_EDATA, "JPEG: could not skip to row %u", sy0);
        goto done;
    }
    while (cinfo->output_scanline < sy1) {
        JDIMENSION at = cinfo->output_scanline;
        JDIMENSION want = sy1 - at < STK_JPEG_ROWS ? sy1 - at : STK_JPEG_ROWS;
        JDIMENSION got;
        if (at < sy0) { /* cannot happen: libjpeg skipped exactly sy0 rows */
            rc = stk_fail(STK_EDATA, "JPEG: decoder at row %u before the region", at);
            goto done;
        }
        for (JDIMENSION i = 0; i < want; i++)
            job->rows[i] = cmyk ? tmpbuf + i * tmp_row_bytes
                                : base + (size_t)(at - sy0 + i) * row_bytes;
        got = jpeg_read_scanlines(cinfo, job->rows, want);
        if (got == 0 || got > want) {
            rc = stk_fail(STK_EDATA, "JPEG: decoder made no progress at row %u", at);
            goto done;
        }
        if (cmyk)
            for (JDIMENSION i = 0; i < got; i++)
                stk_cmyk_to_rgb(job->rows[i], base + (size_t)(at - sy0 + i) * row_bytes, cw,
                                adobe);
    }

    req->view->pixels = base + (size_t)(sx0 - xoff) * 3;
    req->view->width = sx1 - sx0;
    req->view->height = sy1 - sy0;
    req->view->channels = 3;
    req->view->row_stride = (ptrdiff_t)row_bytes;
    req->view->col_stride = 3;
    req->view->chan_stride = 1;

done:
    /* Also aborts a decompression stopped part way. */
    jpeg_destroy_decompress(cinfo);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The hooks (the row at the end)                                           */
/* ------------------------------------------------------------------------ */

static int stk_jpeg_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                          stk_image_info *info)
{
    stk_jpeg_job job;
    memset(&job, 0, sizeof job);
    job.data = data;
    job.size = size;
    job.max_pixels = max_pixels;
    job.info = info;
    return stk_jpeg_run(&job);
}

static int stk_jpeg_decode(const stk_decode_req *req)
{
    stk_jpeg_job job;
    stk_image_info info;
    stk_decode_req sub;
    stk_rect sub_region;
    memset(&job, 0, sizeof job);
    job.data = req->data;
    job.size = req->size;
    job.max_pixels = req->max_pixels;
    job.req = req;
    job.info = &info;
    if (req->region) {
        /* A crop of a JPEG with suitable restart markers: decode only the
         * intervals that cover it (jpeg_window.c). */
        stk_scratch *buf = stk_jpeg_window_scratch();
        stk_jpeg_window win;
        int rc = buf ? stk_jpeg_window_build(req->data, req->size, req->max_pixels, req->region,
                                             buf, &win)
                     : 0;
        /* Without restart markers: a window synthesised from the file's
         * sync index (jpeg_sync.c). */
        if (rc == 0 && buf)
            rc = stk_jpeg_sync_window(req->data, req->size, req->max_pixels, req->region, buf,
                                      &win);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            sub = *req;
            sub_region = *req->region;
            sub_region.x -= win.x;
            sub_region.y -= win.y;
            sub.region = &sub_region;
            job.data = buf->data;
            job.size = win.size;
            job.req = &sub;
        }
    }
    return stk_jpeg_run(&job);
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

/* SOI and the first byte of the next marker. */
static int stk_jpeg_sniff(const uint8_t *data, size_t size)
{
    return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

/* A JPEG cut inside its first three bytes, or SOI without a marker after it. */
static int stk_jpeg_near_miss(const uint8_t *data, size_t size)
{
    if (data[0] == 0xFF && (size == 1 || (data[1] == 0xD8 && size == 2)))
        return stk_fail(STK_EDATA, "JPEG: truncated after %zu bytes", size);
    if (data[0] == 0xFF && data[1] == 0xD8)
        return stk_fail(STK_EDATA, "JPEG: no marker after SOI (starts ff d8 %02x)", data[2]);
    return 0;
}

const stk_codec_desc stk_codec_jpeg = {
    .format = STK_IMAGE_JPEG,
    .name = "JPEG",
    .sniff = stk_jpeg_sniff,
    .probe = stk_jpeg_probe,
    .decode = stk_jpeg_decode,
    .decode_mask = NULL,
    .near_miss = stk_jpeg_near_miss,
    .scales = STK_CODEC_SCALE(1) | STK_CODEC_SCALE(2) | STK_CODEC_SCALE(4) | STK_CODEC_SCALE(8),
};
