/*
 * nvjpeg.c — JPEG decoding on the GPU through nvJPEG, loaded at run time
 * (nvjpeg.h; docs/gpu.md, "GPU JPEG decoding").
 *
 * Why. On a machine with few cores per GPU, decoding is most of the CPU's
 * work even when the GPU runs every augmentation (docs/gpu.md measures it:
 * placement gpu leaves decode at 97% of a worker's time). nvJPEG's batched
 * decoder takes it off the CPU: on GPUs with a JPEG engine (A100, H100,
 * H200) the hardware backend parses, entropy-decodes and transforms on the
 * engine; elsewhere the GPU-hybrid backend decodes Huffman on the GPU.
 *
 * Loading. As device.c does for the driver: nothing links against nvJPEG or
 * includes its header. The handful of types, constants and entry points used
 * are declared below (nvjpeg.h's stable C ABI); the first open loads
 * libnvjpeg.so.13 ($STOKER_NVJPEG names another path; then the CUDA
 * toolkit's /usr/local/cuda/lib64 copy is tried) with dlopen, once per
 * process, and resolves each symbol with dlsym. nvJPEG runs on the CUDA
 * runtime, which uses the context current on the calling thread: every call
 * here first makes the device's primary context current (stk_gpu_enter), so
 * nvJPEG works in the same context, on the same streams, as the kernels.
 *
 * The backend and what it can do are found, not assumed. Open tries the
 * hardware backend, then GPU-hybrid, then hybrid ($STOKER_NVJPEG_BACKEND
 * names one), and keeps the first whose self-test passes. The self-test
 * encodes a small JPEG here (libjpeg-turbo; smooth ramps, so that a wrong
 * offset shows), decodes a region of it at DCT scale 1/2 with nvJPEG and
 * compares the pixels with libjpeg-turbo's decode of the same region at the
 * same scale: region coordinates in full-resolution pixels first, then in
 * scaled pixels (the documentation does not say which), then both again
 * with the region widened to multiples of 16 (an MCU), then the region at
 * scale 1, then whole images at 1/2 and at 1. Every way is tried and the
 * report goes into the decoder's name; the first that passes decides
 * stk_gpu_jdec_max_scale (8 or 1) and the layout (stk_gpu_jdec_layout:
 * regions, widened regions, whole images); a backend that passes none is
 * not used. The comparison allows what two correct decoders
 * differ by (IDCT rounding, chroma upsampling): a mean difference under 3
 * levels and under 0.5% of the values off by more than 48 — a misplaced
 * region or a missing column fails both by far (every test pixel is 64 to
 * 192, the output buffer starts as zeros).
 *
 * Decoding a batch (stk_gpu_jdec_decode, by the worker that finishes the
 * slot's batch; the slot's stk_gpu_jstate is its alone): each image's header
 * is parsed (nvjpegJpegStreamParseHeader) and its decode parameters set
 * (interleaved RGB; the region; the scale factor); nvjpegDecodeBatchedSupportedEx
 * says whether the backend takes it. Those it takes go to one
 * nvjpegDecodeBatchedEx call on the slot's stream, writing straight into the
 * slot's device work arena. That call, with its per-image parameters, is the
 * hardware engine's alone: on the H100 the hybrid and GPU-hybrid backends
 * answered it NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED for every image.
 * Those two take the plain nvjpegDecodeBatched (the output format set at
 * nvjpegDecodeBatchedInitialize; no region, no scale), so with them whole
 * images are decoded at scale 1 and the kernels read the region in place;
 * their self-test tries only that way. An image it does not take, or every image of a
 * batch the call fails, is decoded on the CPU by libjpeg-turbo — the CPU
 * path's decoder, at the same region and scale — and copied into place; the
 * caller counts those (stk_loader_stats.gpu_decode_cpu_rows). An image
 * that libjpeg-turbo rejects too is corrupt: the caller either drops its
 * row (skip policy: keep_going, bad[]) or fails naming it.
 *
 * Emulation (the emulated device, STOKER_CUDA_EMULATE=1): the decoder is
 * libjpeg-turbo itself, on regions widened to multiples of 16 (libjpeg-turbo
 * gives a region the same pixels as any region around it), so emulated
 * batches equal the CPU path's bit for bit and CI tests every line around
 * the decode, the widening included.
 */
#include "gpu/nvjpeg.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/codec_write.h"
#include "core/error.h"
#include "core/util.h"

/* ---------------------------------------------------------------------- */
/* The nvJPEG API, declared here (nvjpeg.h is not needed to build)          */
/* ---------------------------------------------------------------------- */

typedef int nvjpegStatus_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
typedef struct nvjpegDecodeParams *nvjpegDecodeParams_t;
typedef struct {
    unsigned char *channel[4];
    size_t pitch[4];
} nvjpegImage_t;
typedef void *cudaStream_t;

#define NVJPEG_STATUS_SUCCESS 0
#define NVJPEG_BACKEND_HYBRID 1
#define NVJPEG_BACKEND_GPU_HYBRID 2
#define NVJPEG_BACKEND_HARDWARE 3
#define NVJPEG_OUTPUT_RGBI 5
#define NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION (1u << 5)

#define STK_NVJPEG_LIB "libnvjpeg.so.13"
#define STK_NVJPEG_TOOLKIT "/usr/local/cuda/lib64/libnvjpeg.so.13"

#define STK_NVJ_FUNCS(X)                                                                   \
    X(CreateEx, "nvjpegCreateEx", (int, void *, void *, unsigned int, nvjpegHandle_t *))   \
    X(Destroy, "nvjpegDestroy", (nvjpegHandle_t))                                          \
    X(StateCreate, "nvjpegJpegStateCreate", (nvjpegHandle_t, nvjpegJpegState_t *))         \
    X(StateDestroy, "nvjpegJpegStateDestroy", (nvjpegJpegState_t))                         \
    X(StreamCreate, "nvjpegJpegStreamCreate", (nvjpegHandle_t, nvjpegJpegStream_t *))      \
    X(StreamDestroy, "nvjpegJpegStreamDestroy", (nvjpegJpegStream_t))                      \
    X(ParseHeader, "nvjpegJpegStreamParseHeader",                                          \
      (nvjpegHandle_t, const unsigned char *, size_t, nvjpegJpegStream_t))                 \
    X(ParamsCreate, "nvjpegDecodeParamsCreate", (nvjpegHandle_t, nvjpegDecodeParams_t *))  \
    X(ParamsDestroy, "nvjpegDecodeParamsDestroy", (nvjpegDecodeParams_t))                  \
    X(ParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat", (nvjpegDecodeParams_t, int)) \
    X(ParamsSetROI, "nvjpegDecodeParamsSetROI", (nvjpegDecodeParams_t, int, int, int, int)) \
    X(ParamsSetScaleFactor, "nvjpegDecodeParamsSetScaleFactor", (nvjpegDecodeParams_t, int)) \
    X(BatchedInitialize, "nvjpegDecodeBatchedInitialize",                                  \
      (nvjpegHandle_t, nvjpegJpegState_t, int, int, int))                                  \
    X(BatchedSupportedEx, "nvjpegDecodeBatchedSupportedEx",                                \
      (nvjpegHandle_t, nvjpegJpegStream_t, nvjpegDecodeParams_t, int *))                   \
    X(BatchedEx, "nvjpegDecodeBatchedEx",                                                  \
      (nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *, const size_t *,    \
       nvjpegImage_t *, nvjpegDecodeParams_t *, cudaStream_t))                             \
    X(Batched, "nvjpegDecodeBatched",                                                      \
      (nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *, const size_t *,    \
       nvjpegImage_t *, cudaStream_t))

typedef struct stk_nvj_api {
#define STK_NVJ_FIELD(field, sym, args) nvjpegStatus_t (*field) args;
    STK_NVJ_FUNCS(STK_NVJ_FIELD)
#undef STK_NVJ_FIELD
} stk_nvj_api;

/* Written once by nvj_load (pthread_once), read-only afterwards. */
static pthread_once_t nvj_once = PTHREAD_ONCE_INIT;
static stk_nvj_api nvj;
static int nvj_ok;
static char nvj_why[600];

static void nvj_load(void)
{
    const char *env = getenv("STOKER_NVJPEG");
    void *lib = NULL;
    char first[300] = "";
    if (env && *env) {
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        lib = dlopen(STK_NVJPEG_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            snprintf(first, sizeof first, "%s", e ? e : STK_NVJPEG_LIB);
            lib = dlopen(STK_NVJPEG_TOOLKIT, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!lib) {
        const char *e = dlerror();
        snprintf(nvj_why, sizeof nvj_why, "%s%s%s", first, first[0] ? "; " : "",
                 e ? e : "libnvjpeg not found");
        return;
    }
    void *sym;
#define STK_NVJ_RESOLVE(field, name, args)                                                 \
    if (!(sym = dlsym(lib, name))) {                                                       \
        snprintf(nvj_why, sizeof nvj_why, "libnvjpeg: no symbol %s (nvJPEG older than "    \
                 "CUDA 12?)", name);                                                       \
        return;                                                                            \
    }                                                                                      \
    memcpy(&nvj.field, &sym, sizeof sym);
    STK_NVJ_FUNCS(STK_NVJ_RESOLVE)
#undef STK_NVJ_RESOLVE
    nvj_ok = 1;
}

static const char *nvj_status_name(nvjpegStatus_t s)
{
    static const char *const names[] = {
        "NVJPEG_STATUS_SUCCESS",          "NVJPEG_STATUS_NOT_INITIALIZED",
        "NVJPEG_STATUS_INVALID_PARAMETER", "NVJPEG_STATUS_BAD_JPEG",
        "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", "NVJPEG_STATUS_ALLOCATOR_FAILURE",
        "NVJPEG_STATUS_EXECUTION_FAILED", "NVJPEG_STATUS_ARCH_MISMATCH",
        "NVJPEG_STATUS_INTERNAL_ERROR",   "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
        "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};
    return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "NVJPEG_STATUS_?";
}

static const char *backend_name(int b)
{
    return b == NVJPEG_BACKEND_HARDWARE     ? "hardware"
           : b == NVJPEG_BACKEND_GPU_HYBRID ? "GPU-hybrid"
                                            : "hybrid";
}

/* ---------------------------------------------------------------------- */
/* Objects                                                                  */
/* ---------------------------------------------------------------------- */

struct stk_gpu_jdec {
    stk_gpu *g;             /* borrowed */
    int emulated;
    int backend;            /* NVJPEG_BACKEND_* (real) */
    int roi;                /* regions (else whole images) */
    int roi_scaled;         /* region coordinates in scaled pixels */
    uint32_t align;         /* regions widened to multiples of this (0: as is) */
    unsigned max_scale;     /* 8 or 1 */
    char name[1024];
    nvjpegHandle_t h;       /* thread-safe (nvJPEG's handle) */
};

/* One slot's: used by one thread at a time (the slot's submitter). */
struct stk_gpu_jstate {
    nvjpegHandle_t h;               /* the decoder's (thread-safe) */
    char why[120];                  /* why the last image went to the CPU */
    nvjpegJpegState_t st;
    nvjpegJpegStream_t js;
    int init_n;                     /* the batch size initialised (0: none) */
    uint32_t cap;                   /* entries of the arrays below */
    nvjpegDecodeParams_t *params;   /* [cap], created as needed */
    uint32_t nparams;
    const unsigned char **data;
    size_t *len;
    nvjpegImage_t *dst;
    uint32_t *gpu, *cpu;            /* item indices */
    stk_scratch scratch;            /* CPU decodes */
};

const char *stk_gpu_jdec_name(const stk_gpu_jdec *j) { return j->name; }
unsigned stk_gpu_jdec_max_scale(const stk_gpu_jdec *j) { return j->max_scale; }
int stk_gpu_jdec_roi(const stk_gpu_jdec *j) { return j->roi; }

size_t stk_gpu_jdec_layout(const stk_gpu_jdec *j, stk_rect region, unsigned d, uint32_t width,
                           uint32_t height, uint32_t cols, uint32_t rows, stk_gpu_jitem *it,
                           size_t *dst_off, size_t *row_off)
{
    it->d = d;
    it->width = width;
    it->height = height;
    if (!j->roi) { /* the whole image at 1/d; the region read in place */
        uint64_t fw = ((uint64_t)width + d - 1) / d, fh = ((uint64_t)height + d - 1) / d;
        it->region = region;
        it->cols = cols;
        it->rows = rows;
        it->pitch = (size_t)fw * 3;
        *dst_off = *row_off = (size_t)(region.y / d) * it->pitch + (size_t)(region.x / d) * 3;
        return fw * fh > ((uint64_t)1 << 40) ? 0 : (size_t)(fw * fh * 3);
    }
    if (!j->align) {
        it->region = region;
        it->cols = cols;
        it->rows = rows;
        it->pitch = (size_t)cols * 3;
        *dst_off = *row_off = 0;
        return (size_t)cols * rows * 3;
    }
    /* The aligned region around it: x and y rounded down, the far edges
     * up (to the image's edge at most). region.x and .y are multiples of d
     * (the pipeline plans them so), so the row's region starts at a whole
     * decoded pixel: (x - ax) / d, (y - ay) / d. */
    uint32_t a = j->align;
    uint64_t ax = region.x / a * a, ay = region.y / a * a;
    uint64_t ax1 = ((uint64_t)region.x + region.width + a - 1) / a * a;
    uint64_t ay1 = ((uint64_t)region.y + region.height + a - 1) / a * a;
    if (ax1 > width)
        ax1 = width;
    if (ay1 > height)
        ay1 = height;
    it->region.x = (uint32_t)ax;
    it->region.y = (uint32_t)ay;
    it->region.width = (uint32_t)(ax1 - ax);
    it->region.height = (uint32_t)(ay1 - ay);
    it->cols = (uint32_t)((ax1 + d - 1) / d - ax / d);
    it->rows = (uint32_t)((ay1 + d - 1) / d - ay / d);
    it->pitch = (size_t)it->cols * 3;
    *dst_off = 0;
    *row_off = (size_t)((region.y - ay) / d) * it->pitch + (size_t)((region.x - ax) / d) * 3;
    return (size_t)it->cols * it->rows * 3;
}

int stk_gpu_jdec_accepts(const stk_gpu_jdec *j, const stk_image_info *info, const uint8_t *data,
                         size_t size)
{
    /* Three components only: how a backend expands a grayscale JPEG to
     * interleaved RGB is not pinned down, and such files are rare. */
    if (info->format != STK_IMAGE_JPEG || info->cmyk || info->components != 3)
        return 0;
    if (info->progressive && !j->emulated && j->backend == NVJPEG_BACKEND_HARDWARE)
        return 0; /* the engine decodes single-scan baseline JPEGs only */
    /* A truncated file has no EOI: libjpeg-turbo calls that an error (the
     * CPU path's rule), a GPU decoder might fill grey. Leave it to the CPU
     * so that the same files fail. (Junk after the EOI is allowed, as
     * libjpeg allows it: look a little way back.) */
    size_t from = size > 64 ? size - 64 : 0;
    int eoi = 0;
    for (size_t i = size; i-- > from + 1 && !eoi;)
        eoi = data[i - 1] == 0xFF && data[i] == 0xD9;
    if (!eoi)
        return 0;
    /* nvJPEG reports no damage inside the entropy-coded data: on the H100
     * every backend decoded a scan cut in half (then an EOI) without an
     * error, where libjpeg-turbo fails it. A restart-marked JPEG's scan is
     * checked here (its restart markers counted, no decoding): one that is
     * short goes to the CPU, which names it. One without restart markers
     * cannot be checked short of decoding it (docs/gpu.md, "Damaged
     * files"). */
    return stk_jpeg_scan_check(data, size) >= 0;
}

void stk_gpu_jstate_free(stk_gpu_jdec *j, stk_gpu_jstate *s)
{
    if (!s)
        return;
    if (!j->emulated && stk_gpu_enter(j->g) == 0) {
        for (uint32_t i = 0; i < s->nparams; i++)
            nvj.ParamsDestroy(s->params[i]);
        if (s->js)
            nvj.StreamDestroy(s->js);
        if (s->st)
            nvj.StateDestroy(s->st);
    }
    free(s->params);
    free(s->data);
    free(s->len);
    free(s->dst);
    free(s->gpu);
    free(s->cpu);
    stk_scratch_free(&s->scratch);
    free(s);
}

static int nvj_fail(const stk_gpu_jdec *j, nvjpegStatus_t st, const char *call)
{
    return stk_fail(st == 5 /* ALLOCATOR_FAILURE */ ? STK_ENOMEM : STK_EUNSUPPORTED,
                    "cuda:%d: nvJPEG (%s backend): %s failed: %s (%d)",
                    stk_gpu_ordinal(j->g), backend_name(j->backend), call, nvj_status_name(st),
                    st);
}

int stk_gpu_jstate_create(stk_gpu_jdec *j, stk_gpu_jstate **out)
{
    *out = NULL;
    stk_gpu_jstate *s = calloc(1, sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "out of memory");
    if (!j->emulated) {
        int rc = stk_gpu_enter(j->g);
        nvjpegStatus_t st;
        s->h = j->h;
        if (rc == 0 && (st = nvj.StateCreate(s->h, &s->st)) != NVJPEG_STATUS_SUCCESS)
            rc = nvj_fail(j, st, "nvjpegJpegStateCreate");
        if (rc == 0 && (st = nvj.StreamCreate(s->h, &s->js)) != NVJPEG_STATUS_SUCCESS)
            rc = nvj_fail(j, st, "nvjpegJpegStreamCreate");
        if (rc < 0) {
            stk_gpu_jstate_free(j, s);
            return rc;
        }
    }
    *out = s;
    return 0;
}

/* Grow *p to cap elements of `size` bytes (contents kept). */
static int grow(void *pp, uint32_t cap, size_t size)
{
    void *q = realloc(*(void **)pp, (size_t)cap * size);
    if (!q)
        return stk_fail(STK_ENOMEM, "nvJPEG decoder: out of memory");
    *(void **)pp = q;
    return 0;
}

static int state_reserve(stk_gpu_jdec *j, stk_gpu_jstate *s, uint32_t n)
{
    if (n > s->cap) {
        uint32_t cap = n < 16 ? 16 : n;
        int rc;
        if ((rc = grow(&s->params, cap, sizeof *s->params)) < 0 ||
            (rc = grow(&s->data, cap, sizeof *s->data)) < 0 ||
            (rc = grow(&s->len, cap, sizeof *s->len)) < 0 ||
            (rc = grow(&s->dst, cap, sizeof *s->dst)) < 0 ||
            (rc = grow(&s->gpu, cap, sizeof *s->gpu)) < 0 ||
            (rc = grow(&s->cpu, cap, sizeof *s->cpu)) < 0)
            return rc;
        s->cap = cap;
    }
    if (!j->emulated)
        while (s->nparams < n) {
            nvjpegStatus_t st = nvj.ParamsCreate(s->h, &s->params[s->nparams]);
            if (st != NVJPEG_STATUS_SUCCESS)
                return nvj_fail(j, st, "nvjpegDecodeParamsCreate");
            s->nparams++;
        }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Decoding                                                                 */
/* ---------------------------------------------------------------------- */

/* One item by libjpeg-turbo, copied to its place on the device (queued on
 * `stream` from the scratch: the caller synchronises before the scratch is
 * reused). */
static int cpu_decode(stk_gpu_jdec *j, stk_gpu_jstate *s, const stk_gpu_jitem *it, uint32_t row,
                      uint64_t stream)
{
    stk_image_view v;
    int rc = stk_image_decode(it->data, it->size, NULL, &it->region, it->d, &s->scratch, &v);
    if (rc == STK_ELIMIT)
        rc = STK_EDATA;
    if (rc < 0)
        return stk_fail_prefix(rc, "GPU JPEG decode, batch row %u (decoded on the CPU)", row);
    if (v.width != it->cols || v.height != it->rows || v.channels != 3 || v.col_stride != 3 ||
        v.chan_stride != 1)
        return stk_fail(STK_EDATA, "GPU JPEG decode, batch row %u: the decoder gave %ux%ux%u "
                        "pixels for a %ux%u region", row, v.height, v.width, v.channels, it->rows,
                        it->cols);
    size_t rowb = (size_t)it->cols * 3;
    for (uint32_t r = 0; r < it->rows; r++)
        if ((rc = stk_gpu_copy_h2d(j->g, it->dst + (uint64_t)r * it->pitch,
                                   v.pixels + (ptrdiff_t)r * v.row_stride, rowb, stream)) < 0)
            return rc;
    return 0;
}

/* The decode parameters of one item: interleaved RGB, its region (or the
 * whole image), its scale. */
static nvjpegStatus_t set_params(const stk_gpu_jdec *j, nvjpegDecodeParams_t p,
                                 const stk_gpu_jitem *it)
{
    nvjpegStatus_t st = nvj.ParamsSetOutputFormat(p, NVJPEG_OUTPUT_RGBI);
    if (st == NVJPEG_STATUS_SUCCESS) {
        if (!j->roi)
            st = nvj.ParamsSetROI(p, 0, 0, -1, -1);
        else if (j->roi_scaled)
            st = nvj.ParamsSetROI(p, (int)(it->region.x / it->d), (int)(it->region.y / it->d),
                                  (int)it->cols, (int)it->rows);
        else
            st = nvj.ParamsSetROI(p, (int)it->region.x, (int)it->region.y,
                                  (int)it->region.width, (int)it->region.height);
    }
    if (st == NVJPEG_STATUS_SUCCESS && j->backend == NVJPEG_BACKEND_HARDWARE)
        st = nvj.ParamsSetScaleFactor(p, it->d == 8 ? 3 : it->d == 4 ? 2 : it->d == 2 ? 1 : 0);
    return st;
}

/* Items [0, n) of `list` on the CPU: a corrupt one (STK_EDATA) is marked
 * in bad[] and passed over when keep_going, else returned at once with
 * *failed = its index; any other error is returned at once. */
static int cpu_decode_list(stk_gpu_jdec *j, stk_gpu_jstate *s, const stk_gpu_jitem *items,
                           const uint32_t *rows, const uint32_t *list, uint32_t n,
                           uint64_t stream, int keep_going, uint8_t *bad, uint32_t *failed)
{
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = list ? list[k] : k;
        int rc = cpu_decode(j, s, &items[i], rows[i], stream);
        /* the copies read the scratch: done before it is reused (the
         * emulated device copies at once) */
        int src = rc < 0 || j->emulated ? 0 : stk_gpu_stream_sync(j->g, stream);
        if (rc == STK_EDATA && keep_going) {
            bad[i] = 1;
            continue;
        }
        if (rc < 0) {
            *failed = i;
            return rc;
        }
        if (src < 0)
            return src;
    }
    return 0;
}

int stk_gpu_jdec_decode(stk_gpu_jdec *j, stk_gpu_jstate *s, const stk_gpu_jitem *items,
                        const uint32_t *rows, uint32_t n, uint64_t stream, int keep_going,
                        uint8_t *bad, uint32_t *failed, uint32_t *cpu_items)
{
    *cpu_items = 0;
    *failed = UINT32_MAX;
    memset(bad, 0, n);
    int rc;
    if (n == 0)
        return 0;
    if ((rc = state_reserve(j, s, n)) < 0)
        return rc;
    uint32_t ngpu = 0, ncpu = 0;
    if (j->emulated)
        return cpu_decode_list(j, s, items, rows, NULL, n, stream, keep_going, bad, failed);
    if ((rc = stk_gpu_enter(j->g)) < 0)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        const stk_gpu_jitem *it = &items[i];
        nvjpegDecodeParams_t p = s->params[ngpu];
        nvjpegStatus_t st;
        int unsupported = 0;
        const char *step = NULL;
        if ((st = nvj.ParseHeader(s->h, it->data, it->size, s->js)) != NVJPEG_STATUS_SUCCESS)
            step = "nvjpegJpegStreamParseHeader";
        else if ((st = set_params(j, p, it)) != NVJPEG_STATUS_SUCCESS)
            step = "the decode parameters";
        /* Only the hardware engine answers this question (the others
         * decode what they parse; a failure is caught below). */
        else if (j->backend == NVJPEG_BACKEND_HARDWARE &&
                 ((st = nvj.BatchedSupportedEx(s->h, s->js, p, &unsupported)) !=
                      NVJPEG_STATUS_SUCCESS ||
                  unsupported != 0))
            step = "nvjpegDecodeBatchedSupportedEx";
        if (!step) {
            s->data[ngpu] = it->data;
            s->len[ngpu] = it->size;
            memset(&s->dst[ngpu], 0, sizeof s->dst[ngpu]);
            s->dst[ngpu].channel[0] = (unsigned char *)(uintptr_t)it->full;
            s->dst[ngpu].pitch[0] = it->pitch;
            s->gpu[ngpu++] = i;
        } else {
            if (st != NVJPEG_STATUS_SUCCESS)
                snprintf(s->why, sizeof s->why, "%s: %s", step, nvj_status_name(st));
            else
                snprintf(s->why, sizeof s->why, "%s: not supported (%d)", step, unsupported);
            s->cpu[ncpu++] = i;
        }
    }
    if (ngpu) {
        nvjpegStatus_t st = NVJPEG_STATUS_SUCCESS;
        if (s->init_n != (int)ngpu) {
            st = nvj.BatchedInitialize(s->h, s->st, (int)ngpu, 1, NVJPEG_OUTPUT_RGBI);
            s->init_n = st == NVJPEG_STATUS_SUCCESS ? (int)ngpu : 0;
        }
        int ex = j->backend == NVJPEG_BACKEND_HARDWARE;
        if (st == NVJPEG_STATUS_SUCCESS)
            st = ex ? nvj.BatchedEx(s->h, s->st, s->data, s->len, s->dst, s->params,
                                    (cudaStream_t)(uintptr_t)stream)
                    : nvj.Batched(s->h, s->st, s->data, s->len, s->dst,
                                  (cudaStream_t)(uintptr_t)stream);
        if (st != NVJPEG_STATUS_SUCCESS) {
            snprintf(s->why, sizeof s->why, "%s: %s",
                     ex ? "nvjpegDecodeBatchedEx" : "nvjpegDecodeBatched", nvj_status_name(st));
            /* The whole call failed: every image it had goes to the CPU,
             * and the state is initialised afresh next time. */
            s->init_n = 0;
            for (uint32_t k = 0; k < ngpu; k++)
                s->cpu[ncpu++] = s->gpu[k];
        }
    }
    *cpu_items = ncpu;
    return cpu_decode_list(j, s, items, rows, s->cpu, ncpu, stream, keep_going, bad, failed);
}

/* ---------------------------------------------------------------------- */
/* Open: the backend and the self-test                                      */
/* ---------------------------------------------------------------------- */

#define TEST_W 128
#define TEST_H 96

/* Smooth ramps in 64..192: a misplaced region shows as a mean error of
 * several levels; a pixel never written (the buffer starts at 0) as 64+. */
static void test_image(uint8_t *px)
{
    for (int y = 0; y < TEST_H; y++)
        for (int x = 0; x < TEST_W; x++) {
            uint8_t *p = px + ((size_t)y * TEST_W + (size_t)x) * 3;
            p[0] = (uint8_t)(64 + x);
            p[1] = (uint8_t)(64 + (y * 4) / 3);
            p[2] = (uint8_t)(64 + (x + 2 * y) / 3);
        }
}

/* Decode `it` with the backend as configured into a fresh device buffer and
 * compare with libjpeg-turbo's. 1: passed; 0: not; < 0: a device error. */
static int self_test_one(stk_gpu_jdec *j, stk_gpu_jstate *s, stk_gpu_jitem *it,
                         const stk_image_view *ref, char *why, size_t why_size)
{
    size_t dst_off, row_off;
    size_t full_bytes = stk_gpu_jdec_layout(j, it->region, it->d, TEST_W, TEST_H, ref->width,
                                            ref->height, it, &dst_off, &row_off);
    uint64_t buf = 0;
    uint8_t *host = malloc(full_bytes);
    int rc = host ? stk_gpu_dev_alloc(j->g, full_bytes, &buf) : stk_fail(STK_ENOMEM, "oom");
    if (rc < 0) {
        free(host);
        return rc;
    }
    it->full = buf;
    it->dst = buf + dst_off;
    int pass = 0;
    uint32_t row = 0, cpu = 0, failed;
    uint8_t bad;
    s->init_n = 0;
    if ((rc = stk_gpu_memset_d8(j->g, buf, 0, full_bytes, 0)) == 0 &&
        (rc = stk_gpu_stream_sync(j->g, 0)) == 0 &&
        (rc = stk_gpu_jdec_decode(j, s, it, &row, 1, 0, 0, &bad, &failed, &cpu)) == 0 &&
        (rc = stk_gpu_copy_d2h(j->g, host, buf, full_bytes, 0)) == 0 &&
        (rc = stk_gpu_stream_sync(j->g, 0)) == 0) {
        if (cpu) {
            snprintf(why, why_size, "%s", s->why);
        } else {
            uint64_t sum = 0, big = 0, count = (uint64_t)ref->height * ref->width * 3;
            const uint8_t *got0 = host + row_off;
            for (uint32_t y = 0; y < ref->height; y++)
                for (uint32_t i = 0; i < ref->width * 3; i++) {
                    int a = got0[(size_t)y * it->pitch + i];
                    int b = ref->pixels[(ptrdiff_t)y * ref->row_stride + (ptrdiff_t)i];
                    int dd = a > b ? a - b : b - a;
                    sum += (uint64_t)dd;
                    big += dd > 48;
                }
            double mean = (double)sum / (double)count;
            pass = mean < 3.0 && big * 200 < count;
            snprintf(why, why_size, "mean difference %.2f, %.2f%% of values off by more than 48",
                     mean, 100.0 * (double)big / (double)count);
        }
    } else if (rc < 0) {
        snprintf(why, why_size, "%s", stk_errmsg());
    }
    stk_gpu_dev_free(j->g, buf);
    free(host);
    return pass; /* a device error is a failed trial (its message in `why`) */
}

/* Find what this backend can do (max_scale, roi, roi_scaled). 1: usable. */
static int self_test(stk_gpu_jdec *j, char *report, size_t report_size)
{
    static const struct {
        int roi, roi_scaled;
        uint32_t align;
        unsigned d;
        const char *what;
    } trials[] = {
        {1, 0, 0, 2, "regions (full-resolution coordinates) at DCT scale 1/2"},
        {1, 1, 0, 2, "regions (scaled coordinates) at DCT scale 1/2"},
        {1, 0, 16, 2, "16-aligned regions (full-resolution coordinates) at DCT scale 1/2"},
        {1, 1, 16, 2, "16-aligned regions (scaled coordinates) at DCT scale 1/2"},
        {1, 0, 0, 1, "regions at scale 1"},
        {0, 0, 0, 2, "whole images at DCT scale 1/2"},
        {0, 0, 0, 1, "whole images at scale 1"},
    };
    uint8_t *px = malloc((size_t)TEST_W * TEST_H * 3);
    stk_scratch jpg = {0}, dec = {0};
    size_t jpg_size = 0;
    stk_gpu_jstate *s = NULL;
    int ok = 0;
    report[0] = '\0';
    if (px)
        test_image(px);
    if (!px || stk_jpeg_encode(px, TEST_W, TEST_H, 3, TEST_W * 3, 95, &jpg, &jpg_size) < 0 ||
        stk_gpu_jstate_create(j, &s) < 0) {
        snprintf(report, report_size, "self-test set-up: %s", stk_errmsg());
        goto done;
    }
    int chosen = -1;
    for (size_t t = 0; t < sizeof trials / sizeof trials[0]; t++) {
        if ((trials[t].d > 1 || trials[t].roi) && j->backend != NVJPEG_BACKEND_HARDWARE)
            continue; /* regions and scales are the hardware backend's alone
                         (nvjpegDecodeBatchedEx; the others: whole images) */
        j->roi = trials[t].roi;
        j->roi_scaled = trials[t].roi_scaled;
        j->align = trials[t].align;
        stk_gpu_jitem it;
        memset(&it, 0, sizeof it);
        it.data = jpg.data;
        it.size = jpg_size;
        it.d = trials[t].d;
        it.region.x = 24;
        it.region.y = 16;
        it.region.width = 74; /* odd at 1/2: ceil-scaled */
        it.region.height = 57;
        it.width = TEST_W;
        it.height = TEST_H;
        stk_image_view ref;
        if (stk_image_decode(jpg.data, jpg_size, NULL, &it.region, it.d, &dec, &ref) < 0) {
            snprintf(report, report_size, "self-test reference decode: %s", stk_errmsg());
            goto done;
        }
        char why[160];
        int r = self_test_one(j, s, &it, &ref, why, sizeof why);
        size_t at = strlen(report);
        snprintf(report + at, report_size - at, "%s%s: %s", at ? "; " : "", trials[t].what,
                 r == 1 ? "ok" : why);
        if (r == 1 && chosen < 0)
            chosen = (int)t;
    }
    if (chosen >= 0) {
        ok = 1;
        j->roi = trials[chosen].roi;
        j->roi_scaled = trials[chosen].roi_scaled;
        j->align = trials[chosen].align;
        j->max_scale = trials[chosen].d > 1 ? 8 : 1;
    }
done:
    stk_gpu_jstate_free(j, s);
    stk_scratch_free(&jpg);
    stk_scratch_free(&dec);
    free(px);
    return ok;
}

void stk_gpu_jdec_close(stk_gpu_jdec *j)
{
    if (!j)
        return;
    if (!j->emulated && j->h && stk_gpu_enter(j->g) == 0)
        nvj.Destroy(j->h);
    free(j);
}

int stk_gpu_jdec_open(stk_gpu *g, stk_gpu_jdec **out)
{
    *out = NULL;
    stk_gpu_jdec *j = calloc(1, sizeof *j);
    if (!j)
        return stk_fail(STK_ENOMEM, "out of memory");
    j->g = g;
    if (stk_gpu_emulated(g)) {
        j->emulated = 1;
        j->roi = 1;
        j->max_scale = 8;
        /* aligned regions, so that CI runs the widening (libjpeg-turbo's
         * pixels of a region equal those of any region around it) */
        j->align = 16;
        snprintf(j->name, sizeof j->name, "emulated nvJPEG (libjpeg-turbo on the CPU)");
        *out = j;
        return 0;
    }
    int n = stk_gpu_ordinal(g);
    pthread_once(&nvj_once, nvj_load);
    if (!nvj_ok) {
        free(j);
        return stk_fail(STK_EUNSUPPORTED, "cuda:%d: decoder nvjpeg: no nvJPEG library (%s); it "
                        "comes with the CUDA toolkit (libnvjpeg) or PyPI's nvidia-nvjpeg: set "
                        "STOKER_NVJPEG=/path/to/libnvjpeg.so.13, or use decoder cpu",
                        n, nvj_why);
    }
    int rc = stk_gpu_enter(g);
    if (rc < 0) {
        free(j);
        return rc;
    }
    int backends[3] = {NVJPEG_BACKEND_HARDWARE, NVJPEG_BACKEND_GPU_HYBRID, NVJPEG_BACKEND_HYBRID};
    int nb = 3;
    const char *want = getenv("STOKER_NVJPEG_BACKEND");
    if (want && *want) {
        nb = 1;
        if (!strcmp(want, "hardware"))
            backends[0] = NVJPEG_BACKEND_HARDWARE;
        else if (!strcmp(want, "gpu_hybrid"))
            backends[0] = NVJPEG_BACKEND_GPU_HYBRID;
        else if (!strcmp(want, "hybrid"))
            backends[0] = NVJPEG_BACKEND_HYBRID;
        else {
            free(j);
            return stk_fail(STK_EINVAL, "STOKER_NVJPEG_BACKEND=%s: expected hardware, gpu_hybrid "
                            "or hybrid", want);
        }
    }
    char tried[1400] = "";
    for (int b = 0; b < nb; b++) {
        j->backend = backends[b];
        /* libjpeg-turbo's "fancy" chroma upsampling is the CPU path's: ask
         * for the interpolating one where the backend has it. */
        unsigned flags[2] = {NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, 0};
        nvjpegStatus_t st = NVJPEG_STATUS_SUCCESS;
        for (int f = 0; f < 2; f++) {
            j->h = NULL;
            st = nvj.CreateEx(j->backend, NULL, NULL, flags[f], &j->h);
            if (st != NVJPEG_STATUS_SUCCESS) {
                j->h = NULL;
                continue;
            }
            char report[700];
            if (self_test(j, report, sizeof report)) {
                /* the name says what it does and, for the record, what the
                 * self-test found (docs/gpu.md quotes it) */
                snprintf(j->name, sizeof j->name, "nvJPEG %s decoder (%s%s%s; self-test: %s)",
                         backend_name(j->backend),
                         !j->roi ? "whole images" : j->align ? "16-aligned regions" : "regions",
                         j->max_scale > 1 ? ", DCT scaling" : "",
                         flags[f] ? ", interpolated chroma" : "", report);
                *out = j;
                return 0;
            }
            size_t at = strlen(tried);
            snprintf(tried + at, sizeof tried - at, "%s%s%s: %s", at ? "; " : "",
                     backend_name(j->backend), flags[f] ? " (interpolated chroma)" : "", report);
            nvj.Destroy(j->h);
            j->h = NULL;
        }
        if (st != NVJPEG_STATUS_SUCCESS) {
            size_t at = strlen(tried);
            snprintf(tried + at, sizeof tried - at, "%s%s: nvjpegCreateEx: %s", at ? "; " : "",
                     backend_name(j->backend), nvj_status_name(st));
        }
    }
    free(j);
    return stk_fail(STK_EUNSUPPORTED, "cuda:%d: decoder nvjpeg: no nvJPEG backend passed the "
                    "self-test (%s); use decoder cpu",
                    n, tried);
}
