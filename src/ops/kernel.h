/*
 * kernel.h — the fused output kernel: geometry + value transform + dtype +
 * layout in one pass (internal, used by plan.c).
 *
 * The geometry of one sample arrives as two short lists of segments, one per
 * axis, that partition the output rows and the output columns. A segment
 * says: output coordinates out0 .. out0+len-1 come from source coordinates
 * src0, src0+step, ... (step +1 forward, -1 mirrored by a flip or by reflect
 * padding, 0 repeated by edge padding), or, when `fill` >= 0, from the
 * constant fill of the pad op with that index. Pad, crop and flip compose
 * into such lists (plan.c derives them per sample from the drawn parameters),
 * so the kernel never materialises an intermediate image: for each output
 * row and each column segment it either writes the precomputed fill value or
 * converts one contiguous forward/reversed run of source pixels.
 *
 * A pixel whose row and column are both fill takes the fill of the later pad
 * op (the larger index): that op wrote it last.
 *
 * Every output element is written exactly once. Values: u8 copies; f32 is
 * v * scale[c] + bias[c] in float (no fused multiply-add, so every kernel
 * variant gives bit-identical results); f16 is that float value rounded to
 * half, looked up in a per-channel table of 256 entries.
 *
 * Variants, all generated from kernel_impl.h: plain C (any CPU), SSE2
 * intrinsics (the x86-64 baseline) and AVX2+F16C intrinsics (x86-64 with GCC
 * or Clang, chosen at run time when the CPU has both). They give
 * bit-identical output; tests run every variant the CPU supports.
 */
#ifndef STK_OPS_KERNEL_H
#define STK_OPS_KERNEL_H

#include "core/image.h"
#include "stoker/stoker.h"

#include <stddef.h>
#include <stdint.h>

/* Segments per axis a plan may produce (each pad stage can split a segment
 * into three). plan.c refuses specs whose worst case exceeds it. */
#define STK_MAX_SEGS 128

typedef struct stk_seg {
    int32_t out0, len; /* output coordinates [out0, out0 + len) */
    int32_t src0;      /* source coordinate of out0 (unused for fill) */
    int32_t step;      /* -1, 0 or +1 */
    int32_t fill;      /* -1: from the source; else the pad op whose fill it is */
} stk_seg;

/* The constants of a compiled plan that the kernel reads. Owned by the plan;
 * immutable after compile. */
typedef struct stk_kctx {
    uint32_t channels, out_h, out_w;
    stk_layout layout;
    const float *scale, *bias;         /* [channels] (f32) */
    const float *scale_rep, *bias_rep; /* [out_w * channels]: scale[i % channels]
                                          (f32 hwc: a whole interleaved row) */
    const uint16_t *lut16;             /* [channels * 256] (f16) */
    const void *fill;                  /* [op index * channels + c], output dtype */
} stk_kctx;

typedef void (*stk_kernel_fn)(const stk_kctx *kc, const stk_image_view *in,
                              const stk_seg *ys, int nys, const stk_seg *xs, int nxs,
                              void *out);

/* The fastest kernel for `dtype` on this CPU. */
stk_kernel_fn stk_kernel_select(stk_dtype dtype);

enum { STK_ISA_AUTO = -1, STK_ISA_C = 0, STK_ISA_SSE2 = 1, STK_ISA_AVX2 = 2 };

/* Name of the variant stk_kernel_select picks now: "c", "sse2" or "avx2". */
const char *stk_kernel_isa(void);

/* Whether this build and CPU can run variant `isa`. */
int stk_kernel_isa_available(int isa);

/* Tests and benchmarks: make stk_kernel_select pick variant `isa` (or the
 * best, STK_ISA_AUTO) for plans compiled afterwards; an unavailable one
 * falls back to the best available. Returns the previous setting. Not
 * synchronised: call it before compiling plans on other threads. */
int stk_kernel_force_isa(int isa);

/* Three-channel byte shuffles (pshufb masks) for 16 pixels = 48 bytes in
 * three registers: stk_perm48[perm][output register][input register], 0x80
 * zeroes a byte. IL interleave planes to HWC, ILR the same reversed, DI
 * deinterleave HWC to planes, DIR the same reversed, RV reverse 16 HWC
 * pixels. Defined in kernel.c (also used by color.c). */
enum { STK_P48_IL, STK_P48_ILR, STK_P48_DI, STK_P48_DIR, STK_P48_RV };
extern const uint8_t stk_perm48[5][3][3][16];

#endif
