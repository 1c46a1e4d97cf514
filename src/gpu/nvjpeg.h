/*
 * nvjpeg.h — JPEG decoding on the GPU with nvJPEG, loaded at run time, or
 * its emulation on the CPU (internal; docs/gpu.md, "GPU JPEG decoding").
 *
 * A loader with decoder nvjpeg opens one stk_gpu_jdec (the library handle:
 * the backend chosen and what it can do, found by a self-test at open) and
 * one stk_gpu_jstate per batch slot (nvJPEG's batched-decoding state: one
 * thread at a time, here the worker that finishes the slot's batch). The
 * workers stage each row's JPEG bytes in the slot's pinned memory; the
 * finishing worker hands them all to stk_gpu_jdec_decode, which decodes
 * them into device memory on the slot's stream before the kernels run.
 */
#ifndef STK_GPU_NVJPEG_H
#define STK_GPU_NVJPEG_H

#include <stddef.h>
#include <stdint.h>

#include "codec/codec.h"
#include "gpu/device.h"

typedef struct stk_gpu_jdec stk_gpu_jdec;
typedef struct stk_gpu_jstate stk_gpu_jstate;

/* One image to decode (stk_gpu_jdec_layout fills all but data, size and
 * the two device pointers). The region and the scale mean what they mean
 * to stk_image_decode: `region` in full-resolution pixels, the output
 * ceil-scaled by 1/d (cols x rows, RGB). */
typedef struct stk_gpu_jitem {
    const uint8_t *data;      /* the JPEG (pinned host memory) */
    size_t size;
    stk_rect region;          /* what is decoded: the row's region, or the
                                 MCU-aligned one around it (a decoder that
                                 needs alignment) */
    unsigned d;               /* 1, 2, 4 or 8 */
    uint32_t width, height;   /* the image, full resolution */
    uint32_t cols, rows;      /* `region` as decoded */
    uint64_t full;            /* device: the buffer the decoder writes: the
                                 decoded region, or the whole image (a
                                 whole-image decoder), rows `pitch` apart */
    uint64_t dst;             /* device: where `region` lands in it (= full,
                                 except for a whole-image decoder) */
    size_t pitch;
} stk_gpu_jitem;

/* Open the decoder on `g`: libnvjpeg.so.13 (or $STOKER_NVJPEG) by dlopen,
 * the hardware backend if the GPU has the engine, else the GPU-hybrid one,
 * else the hybrid one ($STOKER_NVJPEG_BACKEND=hardware|gpu_hybrid|hybrid
 * names one), each kept only if it passes the self-test (a JPEG made here
 * decoded with a region and a DCT scale, compared with libjpeg-turbo).
 * Emulation: libjpeg-turbo itself, on the CPU. STK_EUNSUPPORTED (no
 * library, no backend passes) with a message saying why. */
int stk_gpu_jdec_open(stk_gpu *g, stk_gpu_jdec **out);
void stk_gpu_jdec_close(stk_gpu_jdec *j); /* NULL: no-op */

/* "nvJPEG hardware decoder (regions, DCT scaling)" and the like. */
const char *stk_gpu_jdec_name(const stk_gpu_jdec *j);
/* The largest DCT scale denominator it decodes at (8, or 1 when it has
 * no scaled decoding: the pipeline then plans the region at scale 1). */
unsigned stk_gpu_jdec_max_scale(const stk_gpu_jdec *j);
/* 1: it decodes regions; 0: whole images (the caller reserves room for
 * the image at scale d and points dst inside it). */
int stk_gpu_jdec_roi(const stk_gpu_jdec *j);
/* How the region (x, y, w, h at scale d: cols x rows once decoded) of a
 * W x H JPEG is decoded by this decoder: fills it->region, d, width,
 * height, cols, rows and pitch; returns the bytes of the buffer the
 * decoder writes (0 if absurdly large), and in *dst_off where it->dst lies
 * in that buffer, in *row_off where the row's own region starts (its
 * first pixel, rows it->pitch apart). */
size_t stk_gpu_jdec_layout(const stk_gpu_jdec *j, stk_rect region, unsigned d, uint32_t width,
                           uint32_t height, uint32_t cols, uint32_t rows, stk_gpu_jitem *it,
                           size_t *dst_off, size_t *row_off);

/* Whether a JPEG with this header is worth handing over (a cheap check
 * for the workers: 3 components (not gray, not CMYK), not progressive for the
 * hardware engine, an EOI marker at the end). 0: decode it on the CPU. */
int stk_gpu_jdec_accepts(const stk_gpu_jdec *j, const stk_image_info *info, const uint8_t *data,
                         size_t size);

int stk_gpu_jstate_create(stk_gpu_jdec *j, stk_gpu_jstate **out);
void stk_gpu_jstate_free(stk_gpu_jdec *j, stk_gpu_jstate *s); /* NULL: no-op */

/* Decode items[0..n) on `stream` (rows[i]: item i's batch row, for
 * messages). An item nvJPEG does not support, or every item of a batch
 * nvJPEG fails, is decoded on the CPU (libjpeg-turbo, this thread) and
 * copied in; *cpu_items counts those. An item libjpeg-turbo rejects too
 * (STK_EDATA: corrupt): with keep_going it is marked in bad[i] (bad has n
 * entries) and the others go on; without, the call returns STK_EDATA at
 * once with *failed = i. Any other error (device, memory) returns at once.
 * The items' data must stay untouched until the stream's work queued here
 * is done. */
int stk_gpu_jdec_decode(stk_gpu_jdec *j, stk_gpu_jstate *s, const stk_gpu_jitem *items,
                        const uint32_t *rows, uint32_t n, uint64_t stream, int keep_going,
                        uint8_t *bad, uint32_t *failed, uint32_t *cpu_items);

#endif
