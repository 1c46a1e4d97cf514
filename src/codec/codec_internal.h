/*
 * codec_internal.h — what the codecs of src/codec/ share (internal to
 * src/codec/): the row type every codec fills (stk_codec_desc), the work of
 * one decode as the dispatcher hands it over (stk_decode_req), and the
 * checks and helpers every decoder calls (codec_util.c), plus the JPEG
 * window code's types shared by jpeg.c, jpeg_window.c and jpeg_sync.c.
 *
 * Who includes what. A codec's file (jpeg.c, png.c, webp.c, bmp.c, tiff.c,
 * gif.c) includes this header and defines one `const stk_codec_desc
 * stk_codec_NAME`, its row; everything else in it is static. The table
 * (codec_table.c) lists the rows; the dispatcher (codec_dispatch.c)
 * reaches a codec only through the table (codec_table.h). No codec
 * includes codec_table.h: the arrows run dispatcher -> table -> codecs ->
 * this header (and codec.h), never back. This header and codec.h are the
 * module `codec` of scripts/check_circles.py, with no source file of its
 * own: that is why the dispatcher is not called codec.c.
 *
 * The public codec calls (codec.h) check the arguments that do not need the
 * header (scale, region shape, NULLs), resolve the limits to a plain pixel
 * count, sniff the format and call the row's hook. Each format then owns
 * everything that needs its header: the pixel limit (checked before any
 * pixel buffer exists), the region bounds, and every decoder error, reported
 * through stk_fail with a "JPEG: " / "PNG: " / "WebP: " / "BMP: " / "TIFF: " /
 * "GIF: " prefix (its row's name) and the decoder's reason.
 * Callers (dataset readers, the loader) prefix the file or record name.
 */
#ifndef STK_CODEC_CODEC_INTERNAL_H
#define STK_CODEC_CODEC_INTERNAL_H

#include "codec/codec.h"

/* The work of one decode, as the dispatcher hands it over. */
typedef struct stk_decode_req {
    const uint8_t *data;   /* lent: the encoded bytes */
    size_t size;
    uint64_t max_pixels;   /* resolved: never 0 */
    uint64_t max_bytes;    /* the decode budget (codec.h); 0 = none */
    const stk_rect *region;/* NULL = whole image; shape nonzero, bounds unchecked */
    unsigned scale_denom;  /* 1, 2, 4 or 8 (PNG: 1) */
    stk_scratch *out;      /* caller's: grown to hold the pixels */
    stk_image_view *view;  /* filled on success */
} stk_decode_req;

/* A scale denominator as a bit of stk_codec_desc.scales. */
#define STK_CODEC_SCALE(d) (1u << (d))

/*
 * One codec: one row of the table (codec_table.c), defined in the codec's
 * own file as `const stk_codec_desc stk_codec_NAME`. The hooks are called
 * only by the dispatcher (codec_dispatch.c), after the checks it makes for
 * every format; each hook may assume them.
 */
typedef struct stk_codec_desc {
    stk_image_format format; /* its id (codec.h); also what probe writes in info->format */
    const char *name;        /* "JPEG": stk_image_format_name, the lists in messages */
    /* 1 when `data` (never NULL) starts with this format's magic bytes, else 0.
     * The magics of the rows are disjoint, so the table's order decides nothing. */
    int (*sniff)(const uint8_t *data, size_t size);
    /* Read only the header into *info (zeroed by the caller; set format too):
     * STK_EDATA, STK_ELIMIT over max_pixels (never 0). */
    int (*probe)(const uint8_t *data, size_t size, uint64_t max_pixels, stk_image_info *info);
    /* Decode req (scale_denom one of `scales`, region nonzero) into req->out
     * and req->view. Without a region decode of its own, a codec decodes the
     * whole image and calls stk_codec_finish_view for the window. */
    int (*decode)(const stk_decode_req *req);
    /* NULL, or a mask decode of its own (stk_image_decode_mask's contract;
     * *view zeroed by the caller). With NULL the mask is the first channel
     * of the RGB decode. */
    int (*decode_mask)(const uint8_t *data, size_t size, uint64_t max_pixels, stk_scratch *out,
                       stk_image_view *view);
    /* NULL, or for bytes that no row's sniff took: the STK_EDATA error naming
     * why, when they are this format cut or damaged before its magic is
     * whole ("JPEG: truncated after 2 bytes"), else 0. `size` >= 1. */
    int (*near_miss)(const uint8_t *data, size_t size);
    /* The scale denominators decode takes: STK_CODEC_SCALE(1), plus 2, 4
     * and 8 for a codec with a reduced decode of its own (JPEG's DCT). */
    unsigned scales;
} stk_codec_desc;

/* For the decoders that decode whole images (WebP, BMP, TIFF, GIF): fill
 * req->view with the width x height RGB8 image at `pixels` (rows packed),
 * or with req->region's window of it (bounds already checked). */
void stk_codec_finish_view(const stk_decode_req *req, uint8_t *pixels, uint32_t width,
                           uint32_t height);

/* The segments of a JPEG from SOI to its first SOS, as the window code
 * (jpeg_window.c, jpeg_sync.c) needs them: a baseline or extended
 * sequential Huffman frame (SOF0/SOF1, 8-bit, 1 or 3 components) whose
 * first scan is sequential and holds every component; the DQT, DHT, JFIF
 * and Adobe segments a window must keep (other APPn and COM are left out);
 * the DRI's interval (0: none). */
#define STK_JPEG_LAYOUT_MAX_SEGMENTS 64
typedef struct stk_jpeg_layout {
    struct {
        size_t at, len; /* bytes of data, marker included */
    } keep[STK_JPEG_LAYOUT_MAX_SEGMENTS];
    unsigned nkeep;
    size_t sof_at; /* offset of the SOF marker */
    unsigned width, height;
    unsigned ncomp, max_h, max_v;
    unsigned restart;       /* R: MCUs per interval, 0 without a DRI */
    size_t sos_at, scan_at; /* SOS marker; first entropy-coded byte */
} stk_jpeg_layout;
/* 1 when the file has that shape (layout filled), 0 otherwise. */
int stk_jpeg_layout_parse(const uint8_t *data, size_t size, stk_jpeg_layout *layout);

/* A window JPEG (jpeg_window.c): a valid JPEG of only the restart
 * intervals that cover a region, whose pixel (0, 0) is the original's
 * (x, y). */
typedef struct stk_jpeg_window {
    uint32_t x, y;
    size_t size; /* bytes, at the start of the buffer it was built in */
} stk_jpeg_window;

/* A window's geometry, shared by restart and sync windows: the MCU size
 * and counts, and the covered MCUs (with one MCU of margin for chroma
 * upsampling) rounded out to spans of R MCUs: spans [k0, k1) of the
 * per_row = ceil(cols / R) of each row, MCU rows [my0, my1). */
typedef struct stk_jpeg_span {
    unsigned mcu_w, mcu_h, cols, rows, per_row;
    unsigned k0, k1, my0, my1;
} stk_jpeg_span;
/* 1 with *sp filled, 0 when the window would not do (over max_pixels, the
 * region out of bounds: the ordinary path reports those; or only rows
 * below the region left out: the region path stops there anyway). */
int stk_jpeg_window_span(const stk_jpeg_layout *h, uint64_t max_pixels, const stk_rect *r,
                         unsigned R, stk_jpeg_span *sp);
/* Write a window's SOI, the kept segments and its SOF (the window's width
 * and height) in the file's order into o; the bytes written (at most
 * h's segments plus the SOF and 2). The caller adds DRI, SOS and scan. */
size_t stk_jpeg_window_head(const uint8_t *data, const stk_jpeg_layout *h,
                            const stk_jpeg_span *sp, unsigned R, uint8_t *o);

/* Build the window of `data` that covers region `r` into `buf`. 1 when
 * built, 0 when the file does not qualify or nothing would be saved (decode
 * the file itself), STK_ENOMEM. Never reports damage: it declines instead. */
int stk_jpeg_window_build(const uint8_t *data, size_t size, uint64_t max_pixels,
                          const stk_rect *r, stk_scratch *buf, stk_jpeg_window *win);
/* A restart-marked JPEG of the shape the window takes (one sequential
 * Huffman scan of every component, a DRI): 1 when its scan holds every
 * restart interval (RST0-7 in order, as many as the MCUs need) and ends in
 * EOI; -1 when it does not (cut short, markers lost or out of order); 0
 * when the file is not of that shape (no DRI, progressive, ...), so the
 * scan cannot be checked without decoding it. No decoding: one memchr walk
 * over the entropy-coded data. decoder nvjpeg uses it (gpu/nvjpeg.c). */
int stk_jpeg_scan_check(const uint8_t *data, size_t size);
/* The window of a JPEG without restart markers (jpeg_sync.c): the same
 * contract as stk_jpeg_window_build, for baseline files whose scan has no
 * DRI. A file's scan is walked (once, and only as far down as crops
 * need) to find where every 4th MCU of each row starts, kept in a
 * process-wide table bounded by STOKER_JPEG_INDEX_MB; the window is then
 * synthesised as a JPEG of the covered MCUs. */
int stk_jpeg_sync_window(const uint8_t *data, size_t size, uint64_t max_pixels,
                         const stk_rect *r, stk_scratch *buf, stk_jpeg_window *win);
/* (its counters: stk_jpeg_index_stats_get, stoker.h) */

/* The calling thread's window buffer (freed at thread exit); NULL if none
 * could be made. */
stk_scratch *stk_jpeg_window_scratch(void);

/* Is libjpeg warning `msg_code` one whose pixels are intact (metadata, junk
 * between segments)? Every other warning is treated as an error, by the
 * decoder (jpeg.c) and the restart transcoder (jpeg_write.c) alike. */
int stk_jpeg_warning_is_benign(int msg_code);

/* STK_EINVAL when `r` does not fit inside a width x height image; `what` is
 * the codec's name ("JPEG"). */
int stk_codec_check_region(const char *what, const stk_rect *r, uint32_t width,
                           uint32_t height);
/* The budget check every decoder makes after reading the header and
 * before it allocates anything sized by the image: `out_bytes` it will
 * reserve in req->out, `own_bytes` it (or its library) will allocate
 * itself. Records both for stk_image_last_need, then STK_ELIMIT when
 * their sum is over req->max_bytes (a nonzero budget), with `what`'s
 * prefix, the image's size and the numbers. */
int stk_codec_check_bytes(const stk_decode_req *req, const char *what, uint32_t width,
                          uint32_t height, uint64_t out_bytes, uint64_t own_bytes);
/* stk_scratch_reserve for a decoder's output: under a budget, grown to
 * exactly `bytes` (no doubling), so the scratch a worker keeps stays
 * within what the budget allowed; without one, as stk_scratch_reserve. */
int stk_codec_reserve(const stk_decode_req *req, size_t bytes);

/* STK_ELIMIT when width * height > max_pixels (with the numbers). */
int stk_codec_check_pixels(const char *what, uint32_t width, uint32_t height,
                           uint64_t max_pixels);
/* Forget the calling thread's last need (stk_image_last_need reads 0, 0):
 * the dispatcher's first step of every decode. */
void stk_codec_need_clear(void);

#endif
