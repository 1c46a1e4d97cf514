/*
 * device.c — one CUDA device through the driver API, loaded at run time,
 * or its emulation on the CPU (device.h; docs/gpu.md, "Runtime").
 *
 * Why dlopen. One build of the library must run on machines with and
 * without a GPU, and `import stoker` must work where no CUDA library is
 * installed. So nothing here links against CUDA or includes its headers:
 * the few driver types and constants used are declared below (they are
 * part of the driver's stable ABI), and the first stk_gpu_open loads
 * libcuda.so.1 with dlopen (once per process, pthread_once) and resolves
 * each entry point by name with dlsym, taking the _v2 symbol where the
 * driver exports one (the names cuda.h's macros map to). The driver stays
 * loaded until exit (no dlclose: the driver keeps threads of its own).
 *
 * A device. stk_gpu_open parses "cuda" / "cuda:N" (anything else is
 * STK_EINVAL), then refuses, with STK_EUNSUPPORTED and a message saying
 * which, a build without kernels (stk_gpu_fatbin_size 0), a machine
 * without the driver, and an ordinal the driver does not have. It retains
 * the device's primary context (the one the CUDA runtime, hence PyTorch,
 * uses too, so pointers and streams are shared with them), loads the
 * embedded fat binary as a module and looks up every kernel of
 * STK_KERNEL_NAMES. Each later call first makes the primary context
 * current on the calling thread (cuCtxSetCurrent, a thread-local store in
 * the driver), so any thread may call any function. A driver error
 * becomes STK_EUNSUPPORTED (STK_ENOMEM for CUDA_ERROR_OUT_OF_MEMORY) with
 * the call, the driver's error name and text, and the device.
 *
 * Emulation (STOKER_CUDA_EMULATE=1 when stk_gpu_open runs; any ordinal is
 * accepted and no driver or kernels are needed): device memory is host
 * memory from stk_aligned_alloc (a device pointer is its address), filled
 * with 0xA5 at allocation so that a read of memory nothing wrote shows up
 * as wrong values, as it would on a GPU (cuMemAlloc does not clear);
 * copies and memsets run at once; a launch runs the kernel on the CPU
 * (stk_gpu_emu_launch). Streams and events are small heap tokens with a
 * magic word, so that a wrong handle is STK_EINVAL, and under ASan a
 * handle used after destroy or destroyed twice is caught. Events are
 * complete as soon as recorded; syncs return at once.
 *
 * Conventions of both backends: zero bytes allocate nothing (*p = NULL,
 * *dptr = 0) and copy nothing; freeing NULL / 0 does nothing, as does
 * destroying stream or event 0. Stream 0 is the context's default stream.
 * stk_gpu_launch checks what the device would refuse (argument size, an
 * empty or oversized grid or block) the same way in both, so emulation
 * catches it.
 */
#include "gpu/device.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "gpu/emulate.h"

/* ---------------------------------------------------------------------- */
/* The driver API, declared here (cuda.h is not needed to build)            */
/* ---------------------------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NO_DEVICE 100
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_MEMHOSTALLOC_PORTABLE 0x01u
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_DISABLE_TIMING 0x2u

#define STK_CUDA_DRIVER "libcuda.so.1"

/* The entry points, resolved once (X(field, symbol, signature)). */
#define STK_CU_FUNCS(X)                                                                    \
    X(Init, "cuInit", (unsigned int))                                                      \
    X(DeviceGetCount, "cuDeviceGetCount", (int *))                                         \
    X(DeviceGet, "cuDeviceGet", (CUdevice *, int))                                         \
    X(DeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                           \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))                  \
    X(DeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *, CUdevice))                         \
    X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))               \
    X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                       \
    X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                       \
    X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                  \
    X(MemFree, "cuMemFree_v2", (CUdeviceptr))                                              \
    X(MemHostAlloc, "cuMemHostAlloc", (void **, size_t, unsigned int))                     \
    X(MemFreeHost, "cuMemFreeHost", (void *))                                              \
    X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr, const void *, size_t, CUstream)) \
    X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *, CUdeviceptr, size_t, CUstream))   \
    X(MemsetD8Async, "cuMemsetD8Async", (CUdeviceptr, unsigned char, size_t, CUstream))   \
    X(StreamCreate, "cuStreamCreate", (CUstream *, unsigned int))                          \
    X(StreamDestroy, "cuStreamDestroy_v2", (CUstream))                                     \
    X(StreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned int))             \
    X(StreamSynchronize, "cuStreamSynchronize", (CUstream))                                \
    X(EventCreate, "cuEventCreate", (CUevent *, unsigned int))                             \
    X(EventDestroy, "cuEventDestroy_v2", (CUevent))                                        \
    X(EventRecord, "cuEventRecord", (CUevent, CUstream))                                   \
    X(EventSynchronize, "cuEventSynchronize", (CUevent))                                   \
    X(ModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                      \
    X(ModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *))    \
    X(ModuleUnload, "cuModuleUnload", (CUmodule))                                          \
    X(LaunchKernel, "cuLaunchKernel",                                                      \
      (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,   \
       unsigned int, unsigned int, CUstream, void **, void **))                            \
    X(GetErrorName, "cuGetErrorName", (CUresult, const char **))                           \
    X(GetErrorString, "cuGetErrorString", (CUresult, const char **))

typedef struct stk_cu_api {
#define STK_CU_FIELD(field, sym, args) CUresult (*field) args;
    STK_CU_FUNCS(STK_CU_FIELD)
#undef STK_CU_FIELD
} stk_cu_api;

/* Written once by cu_load (under pthread_once), read-only afterwards. */
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static stk_cu_api cu;
static int cu_ok;            /* every symbol resolved and cuInit ran */
static CUresult cu_init_rc;  /* cuInit's result (CUDA_ERROR_NO_DEVICE: none) */
static char cu_why[512];     /* why the driver is unusable (!cu_ok) */
/* cuEventElapsedTime (_v2 where the driver has it, CUDA 12.8 and later);
 * optional: NULL leaves the timing of stk_gpu_event_elapsed out. */
static CUresult (*cu_elapsed)(float *, CUevent, CUevent);

static void cu_load(void)
{
    void *lib = dlopen(STK_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(cu_why, sizeof cu_why, "%s", e ? e : STK_CUDA_DRIVER ": not found");
        return;
    }
    void *sym;
    /* POSIX: a function pointer is stored from dlsym's void * bit for bit. */
#define STK_CU_RESOLVE(field, name, args)                                                  \
    if (!(sym = dlsym(lib, name))) {                                                       \
        snprintf(cu_why, sizeof cu_why, "%s: no symbol %s (a CUDA driver too old?)",       \
                 STK_CUDA_DRIVER, name);                                                   \
        return;                                                                            \
    }                                                                                      \
    memcpy(&cu.field, &sym, sizeof sym);
    STK_CU_FUNCS(STK_CU_RESOLVE)
#undef STK_CU_RESOLVE
    if ((sym = dlsym(lib, "cuEventElapsedTime_v2")) || (sym = dlsym(lib, "cuEventElapsedTime")))
        memcpy(&cu_elapsed, &sym, sizeof sym);
    cu_init_rc = cu.Init(0);
    cu_ok = 1;
}

struct stk_gpu {
    int emulated;
    int ordinal;
    char name[160];
    /* The driver's objects (not in emulation); all immutable after open. */
    CUdevice dev;
    CUcontext ctx; /* the primary context, retained by open, released by close */
    CUmodule mod;  /* the embedded fat binary */
    CUfunction fn[STK_K_COUNT];
};

/* Emulated stream and event handles. */
#define STK_EMU_STREAM 0x53544b53u /* "STKS" */
#define STK_EMU_EVENT 0x53544b45u  /* "STKE" */
typedef struct stk_emu_token {
    uint32_t magic;
    double at; /* an event: stk_now() at its last record (emulation runs
                  each operation at once, so this is when the work before
                  it finished) */
} stk_emu_token;

/* The driver's words for a result code. */
static void cu_text(CUresult r, const char **name, const char **text)
{
    *name = NULL;
    *text = NULL;
    if (cu.GetErrorName)
        cu.GetErrorName(r, name);
    if (cu.GetErrorString)
        cu.GetErrorString(r, text);
    if (!*name)
        *name = "CUDA_ERROR_?";
    if (!*text)
        *text = "unknown error";
}

/* A driver error as a stoker error: "cuda:N: CALL: NAME (TEXT)". */
static int cu_fail(int ordinal, CUresult r, const char *call)
{
    const char *name, *text;
    cu_text(r, &name, &text);
    return stk_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? STK_ENOMEM : STK_EUNSUPPORTED,
                    "cuda:%d: %s failed: %s (%d: %s)", ordinal, call, name, (int)r, text);
}

/* Make the device's primary context current on this thread. */
static int cu_enter(const stk_gpu *g)
{
    CUresult r = cu.CtxSetCurrent(g->ctx);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuCtxSetCurrent");
}

/* "cuda" -> 0, "cuda:N" -> N; -1 if malformed. */
static int parse_device(const char *s)
{
    if (!s || strncmp(s, "cuda", 4) != 0)
        return -1;
    s += 4;
    if (*s == '\0')
        return 0;
    if (*s != ':' || s[1] < '0' || s[1] > '9')
        return -1;
    long v = 0;
    for (s++; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > INT_MAX)
            return -1;
    }
    return (int)v;
}

static int emulate_requested(void)
{
    const char *e = getenv("STOKER_CUDA_EMULATE");
    return e && *e && strcmp(e, "0") != 0;
}

static int open_real(stk_gpu *g)
{
    static const char *const names[STK_K_COUNT] = STK_KERNEL_NAMES;
    int n = g->ordinal;
    if (stk_gpu_fatbin_size == 0)
        return stk_fail(STK_EUNSUPPORTED,
                        "cuda:%d: this stoker was built without CUDA kernels (nvcc was not "
                        "found, or STK_CUDA=OFF / STOKER_CUDA=0; rebuild with STK_CUDA=ON); "
                        "set STOKER_CUDA_EMULATE=1 to emulate the device on the CPU",
                        n);
    pthread_once(&cu_once, cu_load);
    if (!cu_ok)
        return stk_fail(STK_EUNSUPPORTED,
                        "cuda:%d: no CUDA driver (%s); set STOKER_CUDA_EMULATE=1 to emulate "
                        "the device on the CPU",
                        n, cu_why);
    int count = 0;
    if (cu_init_rc == CUDA_SUCCESS) {
        CUresult r = cu.DeviceGetCount(&count);
        if (r != CUDA_SUCCESS)
            return cu_fail(n, r, "cuDeviceGetCount");
    } else if (cu_init_rc != CUDA_ERROR_NO_DEVICE) {
        return cu_fail(n, cu_init_rc, "cuInit");
    }
    if (n >= count) {
        if (count == 0)
            return stk_fail(STK_EUNSUPPORTED, "cuda:%d: no such device: the CUDA driver sees "
                            "no CUDA device", n);
        if (count == 1)
            return stk_fail(STK_EUNSUPPORTED, "cuda:%d: no such device: the CUDA driver sees "
                            "1 device (cuda:0)", n);
        return stk_fail(STK_EUNSUPPORTED, "cuda:%d: no such device: the CUDA driver sees %d "
                        "devices (cuda:0 to cuda:%d)", n, count, count - 1);
    }
    CUresult r = cu.DeviceGet(&g->dev, n);
    if (r != CUDA_SUCCESS)
        return cu_fail(n, r, "cuDeviceGet");
    r = cu.PrimaryCtxRetain(&g->ctx, g->dev);
    if (r != CUDA_SUCCESS) {
        g->ctx = NULL;
        return cu_fail(n, r, "cuDevicePrimaryCtxRetain");
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    char dname[128] = "", call[256];
    int major = 0, minor = 0;
    size_t mem = 0;
    if ((r = cu.DeviceGetName(dname, (int)sizeof dname - 1, g->dev)) != CUDA_SUCCESS)
        return cu_fail(n, r, "cuDeviceGetName");
    if ((r = cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                   g->dev)) != CUDA_SUCCESS ||
        (r = cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                   g->dev)) != CUDA_SUCCESS)
        return cu_fail(n, r, "cuDeviceGetAttribute");
    if ((r = cu.DeviceTotalMem(&mem, g->dev)) != CUDA_SUCCESS)
        return cu_fail(n, r, "cuDeviceTotalMem");
    snprintf(g->name, sizeof g->name, "%s (sm_%d%d, %.0f GiB)", dname, major, minor,
             (double)mem / (1024.0 * 1024.0 * 1024.0));
    if ((r = cu.ModuleLoadData(&g->mod, stk_gpu_fatbin)) != CUDA_SUCCESS) {
        g->mod = NULL;
        /* e.g. CUDA_ERROR_NO_BINARY_FOR_GPU on a GPU older than sm_80. */
        snprintf(call, sizeof call, "%s: cuModuleLoadData (the kernels: sm_80, sm_90, "
                 "compute_90 PTX)", g->name);
        return cu_fail(n, r, call);
    }
    for (int k = 0; k < STK_K_COUNT; k++)
        if ((r = cu.ModuleGetFunction(&g->fn[k], g->mod, names[k])) != CUDA_SUCCESS) {
            snprintf(call, sizeof call, "cuModuleGetFunction(%s)", names[k]);
            return cu_fail(n, r, call);
        }
    return 0;
}

int stk_gpu_open(const char *device, stk_gpu **out)
{
    *out = NULL;
    int n = parse_device(device);
    if (n < 0)
        return stk_fail(STK_EINVAL, "device \"%s\": expected \"cuda\" or \"cuda:N\" (N: a CUDA "
                        "device ordinal, 0, 1, ...)", device ? device : "(null)");
    stk_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return stk_fail(STK_ENOMEM, "cuda:%d: out of memory", n);
    g->ordinal = n;
    if (emulate_requested()) {
        g->emulated = 1;
        snprintf(g->name, sizeof g->name, "emulated CUDA device %d", n);
        *out = g;
        return 0;
    }
    int rc = open_real(g);
    if (rc < 0) {
        stk_gpu_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

void stk_gpu_close(stk_gpu *g)
{
    if (!g)
        return;
    if (!g->emulated && g->ctx) {
        if (g->mod && cu.CtxSetCurrent(g->ctx) == CUDA_SUCCESS)
            cu.ModuleUnload(g->mod);
        cu.PrimaryCtxRelease(g->dev);
    }
    free(g);
}

int stk_gpu_emulated(const stk_gpu *g) { return g->emulated; }
int stk_gpu_enter(stk_gpu *g) { return g->emulated ? 0 : cu_enter(g); }
int stk_gpu_ordinal(const stk_gpu *g) { return g->ordinal; }
const char *stk_gpu_name(const stk_gpu *g) { return g->name; }

/* ---------------------------------------------------------------------- */
/* Memory                                                                  */
/* ---------------------------------------------------------------------- */

int stk_gpu_host_alloc(stk_gpu *g, size_t bytes, void **p)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    if (g->emulated) {
        *p = stk_aligned_alloc(bytes);
        return *p ? 0 : stk_fail(STK_ENOMEM, "%s: %zu bytes of host memory", g->name, bytes);
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.MemHostAlloc(p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
        char call[64];
        *p = NULL;
        snprintf(call, sizeof call, "cuMemHostAlloc(%zu bytes)", bytes);
        return cu_fail(g->ordinal, r, call);
    }
    return 0;
}

void stk_gpu_host_free(stk_gpu *g, void *p)
{
    if (!p)
        return;
    if (g->emulated) {
        stk_aligned_free(p);
        return;
    }
    if (cu_enter(g) == 0)
        cu.MemFreeHost(p);
}

int stk_gpu_dev_alloc(stk_gpu *g, size_t bytes, uint64_t *dptr)
{
    *dptr = 0;
    if (bytes == 0)
        return 0;
    if (g->emulated) {
        void *p = stk_aligned_alloc(bytes);
        if (!p)
            return stk_fail(STK_ENOMEM, "%s: %zu bytes of device memory", g->name, bytes);
        memset(p, 0xA5, bytes); /* as uninitialised device memory reads: not zero */
        *dptr = (uint64_t)(uintptr_t)p;
        return 0;
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUdeviceptr d = 0;
    CUresult r = cu.MemAlloc(&d, bytes);
    if (r != CUDA_SUCCESS) {
        char call[64];
        snprintf(call, sizeof call, "cuMemAlloc(%zu bytes)", bytes);
        return cu_fail(g->ordinal, r, call);
    }
    *dptr = d;
    return 0;
}

void stk_gpu_dev_free(stk_gpu *g, uint64_t dptr)
{
    if (!dptr)
        return;
    if (g->emulated) {
        stk_aligned_free((void *)(uintptr_t)dptr);
        return;
    }
    if (cu_enter(g) == 0)
        cu.MemFree(dptr);
}

/* ---------------------------------------------------------------------- */
/* Streams and events                                                      */
/* ---------------------------------------------------------------------- */

static int emu_token_new(const stk_gpu *g, uint32_t magic, uint64_t *h, const char *what)
{
    stk_emu_token *t = malloc(sizeof *t);
    if (!t)
        return stk_fail(STK_ENOMEM, "%s: a %s", g->name, what);
    t->magic = magic;
    t->at = 0;
    *h = (uint64_t)(uintptr_t)t;
    return 0;
}

/* An emulated handle's check: 0 if `h` is a live token of that kind. */
static int emu_token_check(const stk_gpu *g, uint64_t h, uint32_t magic, const char *what)
{
    if (!h || ((const stk_emu_token *)(uintptr_t)h)->magic != magic)
        return stk_fail(STK_EINVAL, "%s: 0x%llx is not a %s", g->name, (unsigned long long)h,
                        what);
    return 0;
}

static void emu_token_free(uint64_t h)
{
    stk_emu_token *t = (stk_emu_token *)(uintptr_t)h;
    t->magic = 0;
    free(t);
}

int stk_gpu_stream_create(stk_gpu *g, uint64_t *stream)
{
    *stream = 0;
    if (g->emulated)
        return emu_token_new(g, STK_EMU_STREAM, stream, "stream");
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUstream s = NULL;
    CUresult r = cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS)
        return cu_fail(g->ordinal, r, "cuStreamCreate");
    *stream = (uint64_t)(uintptr_t)s;
    return 0;
}

void stk_gpu_stream_destroy(stk_gpu *g, uint64_t stream)
{
    if (!stream)
        return;
    if (g->emulated) {
        if (emu_token_check(g, stream, STK_EMU_STREAM, "stream") == 0)
            emu_token_free(stream);
        return;
    }
    if (cu_enter(g) == 0)
        cu.StreamDestroy((CUstream)(uintptr_t)stream);
}

static int event_create(stk_gpu *g, uint64_t *event, unsigned flags)
{
    *event = 0;
    if (g->emulated)
        return emu_token_new(g, STK_EMU_EVENT, event, "event");
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUevent e = NULL;
    CUresult r = cu.EventCreate(&e, flags);
    if (r != CUDA_SUCCESS)
        return cu_fail(g->ordinal, r, "cuEventCreate");
    *event = (uint64_t)(uintptr_t)e;
    return 0;
}

int stk_gpu_event_create(stk_gpu *g, uint64_t *event)
{
    return event_create(g, event, CU_EVENT_DISABLE_TIMING);
}

int stk_gpu_event_create_timed(stk_gpu *g, uint64_t *event)
{
    return event_create(g, event, 0);
}

int stk_gpu_event_elapsed(stk_gpu *g, uint64_t start, uint64_t end, double *seconds)
{
    *seconds = 0;
    if (g->emulated) {
        int rc;
        if ((rc = emu_token_check(g, start, STK_EMU_EVENT, "event")) < 0 ||
            (rc = emu_token_check(g, end, STK_EMU_EVENT, "event")) < 0)
            return rc;
        const stk_emu_token *a = (const stk_emu_token *)(uintptr_t)start;
        const stk_emu_token *b = (const stk_emu_token *)(uintptr_t)end;
        *seconds = b->at > a->at ? b->at - a->at : 0;
        return 0;
    }
    if (!cu_elapsed)
        return stk_fail(STK_EUNSUPPORTED, "%s: the driver has no cuEventElapsedTime", g->name);
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    float ms = 0;
    CUresult r = cu_elapsed(&ms, (CUevent)(uintptr_t)start, (CUevent)(uintptr_t)end);
    if (r != CUDA_SUCCESS)
        return cu_fail(g->ordinal, r, "cuEventElapsedTime");
    *seconds = ms * 1e-3;
    return 0;
}

void stk_gpu_event_destroy(stk_gpu *g, uint64_t event)
{
    if (!event)
        return;
    if (g->emulated) {
        if (emu_token_check(g, event, STK_EMU_EVENT, "event") == 0)
            emu_token_free(event);
        return;
    }
    if (cu_enter(g) == 0)
        cu.EventDestroy((CUevent)(uintptr_t)event);
}

/* Emulation: stream 0 (the default stream) or a live stream token. */
static int emu_stream(const stk_gpu *g, uint64_t stream)
{
    return stream ? emu_token_check(g, stream, STK_EMU_STREAM, "stream") : 0;
}

int stk_gpu_event_record(stk_gpu *g, uint64_t event, uint64_t stream)
{
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        if (rc == 0 && (rc = emu_token_check(g, event, STK_EMU_EVENT, "event")) == 0)
            ((stk_emu_token *)(uintptr_t)event)->at = stk_now();
        return rc;
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.EventRecord((CUevent)(uintptr_t)event, (CUstream)(uintptr_t)stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuEventRecord");
}

int stk_gpu_stream_wait_event(stk_gpu *g, uint64_t stream, uint64_t event)
{
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        return rc < 0 ? rc : emu_token_check(g, event, STK_EMU_EVENT, "event");
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.StreamWaitEvent((CUstream)(uintptr_t)stream, (CUevent)(uintptr_t)event, 0);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuStreamWaitEvent");
}

int stk_gpu_event_sync(stk_gpu *g, uint64_t event)
{
    if (g->emulated)
        return emu_token_check(g, event, STK_EMU_EVENT, "event");
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.EventSynchronize((CUevent)(uintptr_t)event);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuEventSynchronize");
}

int stk_gpu_stream_sync(stk_gpu *g, uint64_t stream)
{
    if (g->emulated)
        return emu_stream(g, stream);
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.StreamSynchronize((CUstream)(uintptr_t)stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuStreamSynchronize");
}

/* ---------------------------------------------------------------------- */
/* Copies, memset, launches                                                */
/* ---------------------------------------------------------------------- */

int stk_gpu_copy_h2d(stk_gpu *g, uint64_t dst, const void *src, size_t bytes, uint64_t stream)
{
    if (bytes == 0)
        return 0;
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        if (rc < 0)
            return rc;
        if (!dst || !src)
            return stk_fail(STK_EINVAL, "%s: copy of %zu bytes to or from NULL", g->name, bytes);
        memcpy((void *)(uintptr_t)dst, src, bytes);
        return 0;
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.MemcpyHtoDAsync(dst, src, bytes, (CUstream)(uintptr_t)stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuMemcpyHtoDAsync");
}

int stk_gpu_copy_d2h(stk_gpu *g, void *dst, uint64_t src, size_t bytes, uint64_t stream)
{
    if (bytes == 0)
        return 0;
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        if (rc < 0)
            return rc;
        if (!dst || !src)
            return stk_fail(STK_EINVAL, "%s: copy of %zu bytes to or from NULL", g->name, bytes);
        memcpy(dst, (const void *)(uintptr_t)src, bytes);
        return 0;
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.MemcpyDtoHAsync(dst, src, bytes, (CUstream)(uintptr_t)stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuMemcpyDtoHAsync");
}

int stk_gpu_memset_d8(stk_gpu *g, uint64_t dst, uint8_t v, size_t bytes, uint64_t stream)
{
    if (bytes == 0)
        return 0;
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        if (rc < 0)
            return rc;
        if (!dst)
            return stk_fail(STK_EINVAL, "%s: memset of %zu bytes at NULL", g->name, bytes);
        memset((void *)(uintptr_t)dst, v, bytes);
        return 0;
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    CUresult r = cu.MemsetD8Async(dst, v, bytes, (CUstream)(uintptr_t)stream);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuMemsetD8Async");
}

int stk_gpu_launch(stk_gpu *g, stk_kernel_id k, const uint32_t grid[3], const uint32_t block[3],
                   const void *args, size_t args_bytes, uint64_t stream)
{
    if ((unsigned)k >= STK_K_COUNT)
        return stk_fail(STK_EINVAL, "%s: no kernel %d", g->name, (int)k);
    if (!args || args_bytes != sizeof(stk_gpu_args))
        return stk_fail(STK_EINVAL, "%s: kernel %d takes %zu bytes of arguments, not %zu",
                        g->name, (int)k, sizeof(stk_gpu_args), args_bytes);
    /* What a device refuses: an empty grid or block; more threads per
     * block than the kernels' __launch_bounds__ (STK_GPU_BLOCK); a grid
     * beyond 2^31 - 1 blocks in x or 65535 in y and z. */
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
        threads > STK_GPU_BLOCK || grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535)
        return stk_fail(STK_EINVAL,
                        "%s: kernel %d: grid %ux%ux%u of blocks %ux%ux%u (blocks of 1 to %d "
                        "threads; grid up to 2^31-1 x 65535 x 65535)",
                        g->name, (int)k, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                        STK_GPU_BLOCK);
    if (g->emulated) {
        int rc = emu_stream(g, stream);
        return rc < 0 ? rc : stk_gpu_emu_launch(k, grid, block, args, args_bytes);
    }
    int rc = cu_enter(g);
    if (rc < 0)
        return rc;
    void *params[1] = {(void *)(uintptr_t)args}; /* the driver copies the struct at launch */
    CUresult r = cu.LaunchKernel(g->fn[k], grid[0], grid[1], grid[2], block[0], block[1],
                                 block[2], 0, (CUstream)(uintptr_t)stream, params, NULL);
    return r == CUDA_SUCCESS ? 0 : cu_fail(g->ordinal, r, "cuLaunchKernel");
}
