/*
 * codec_util.c — the checks and helpers every decoder calls
 * (codec_internal.h): the region bounds, the pixel limit, the decode budget
 * with the calling thread's record of the last decode's need
 * (stk_image_last_need), the scratch reservation under a budget, and the
 * view of a window of a whole-image decode.
 *
 * They sit apart from the dispatcher (codec_dispatch.c) so that the
 * arrows run one way: codec_dispatch.c -> codec_table.c -> the codecs ->
 * this file. A codec calls down into these, never up into the dispatcher.
 *
 * The decode budget (stk_codec_limits.max_bytes) is checked by each decoder
 * once it knows the header: it counts what that decoder will put in the
 * output scratch and what it (or its library) allocates on its own, as a
 * pure function of the header, the region and the scale — never of what
 * the scratch already holds — so a sample is refused or decoded the same
 * way whichever thread, with whatever history, decodes it.
 *
 * Thread safety: the only state is the two thread-local counts of the last
 * decode's need; everything else works on the caller's arguments.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

int stk_codec_check_region(const char *what, const stk_rect *r, uint32_t width, uint32_t height)
{
    if ((uint64_t)r->x + r->width > width || (uint64_t)r->y + r->height > height)
        return stk_fail(STK_EINVAL,
                        "%s: region %ux%u at (%u, %u) is outside the %ux%u image", what,
                        r->width, r->height, r->x, r->y, width, height);
    return 0;
}

int stk_codec_check_pixels(const char *what, uint32_t width, uint32_t height, uint64_t max_pixels)
{
    uint64_t px = (uint64_t)width * height; /* < 2^64: both < 2^32 */
    if (px > max_pixels)
        return stk_fail(STK_ELIMIT,
                        "%s: %ux%u image (%llu pixels) exceeds the max_pixels limit of %llu",
                        what, width, height, (unsigned long long)px,
                        (unsigned long long)max_pixels);
    return 0;
}

/* The last decode's need on this thread (stk_image_last_need). */
static _Thread_local uint64_t stk_need_out, stk_need_own;

void stk_image_last_need(uint64_t *out_bytes, uint64_t *own_bytes)
{
    if (out_bytes)
        *out_bytes = stk_need_out;
    if (own_bytes)
        *own_bytes = stk_need_own;
}

void stk_codec_need_clear(void)
{
    stk_need_out = stk_need_own = 0;
}

int stk_codec_check_bytes(const stk_decode_req *req, const char *what, uint32_t width,
                          uint32_t height, uint64_t out_bytes, uint64_t own_bytes)
{
    uint64_t need = out_bytes + own_bytes; /* each < 2^60: sizes of < 2^32 x 2^32 x 8 */
    /* Recorded only when it will be allocated: a refused image used nothing. */
    stk_need_out = stk_need_own = 0;
    if (!req->max_bytes || need <= req->max_bytes) {
        stk_need_out = out_bytes;
        stk_need_own = own_bytes;
    }
    if (req->max_bytes && need > req->max_bytes)
        return stk_fail(STK_ELIMIT,
                        "%s: decoding the %ux%u image needs %llu bytes (%.1f MiB), over the "
                        "decode budget of %llu bytes (%.1f MiB) that memory_limit leaves each "
                        "worker thread",
                        what, width, height, (unsigned long long)need,
                        (double)need / (1024.0 * 1024.0), (unsigned long long)req->max_bytes,
                        (double)req->max_bytes / (1024.0 * 1024.0));
    return 0;
}

int stk_codec_reserve(const stk_decode_req *req, size_t bytes)
{
    stk_scratch *s = req->out;
    if (!req->max_bytes || s->cap >= bytes)
        return stk_scratch_reserve(s, bytes);
    uint8_t *p = stk_aligned_alloc(bytes);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory allocating %zu bytes of scratch", bytes);
    stk_aligned_free(s->data);
    s->data = p;
    s->cap = bytes;
    return 0;
}

void stk_codec_finish_view(const stk_decode_req *req, uint8_t *pixels, uint32_t width,
                           uint32_t height)
{
    stk_image_view *v = req->view;
    const stk_rect *r = req->region;
    v->channels = 3;
    v->col_stride = 3;
    v->chan_stride = 1;
    v->row_stride = (ptrdiff_t)width * 3;
    if (r) {
        v->pixels = pixels + (size_t)r->y * (size_t)v->row_stride + (size_t)r->x * 3;
        v->width = r->width;
        v->height = r->height;
    } else {
        v->pixels = pixels;
        v->width = width;
        v->height = height;
    }
}
