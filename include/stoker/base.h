/*
 * stoker/base.h — what every part of the public API shares: the export
 * macro, the version, the pinned error codes and their messages, and
 * stk_free, the image element types. Included by every topical header
 * (programs include <stoker/stoker.h>, the umbrella, or a topical header).
 */
#ifndef STOKER_BASE_H
#define STOKER_BASE_H

#include <stddef.h>
#include <stdint.h>

#if defined(STK_STATIC_DEFINE)
#  define STK_API
#elif defined(STK_BUILDING_LIBRARY)
#  define STK_API __attribute__((visibility("default")))
#else
#  define STK_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 1
#define STK_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, as zstd does. */
#define STK_VERSION_NUMBER \
    (STK_VERSION_MAJOR * 10000 + STK_VERSION_MINOR * 100 + STK_VERSION_PATCH)
#define STK_VERSION_STRING "0.1.0"

/* The version of the library actually linked (may differ from the header). */
STK_API unsigned stk_version_number(void);

STK_API const char *stk_version_string(void);

/* The CPU this process may use, in cores (fractional under a cgroup quota):
 * the smallest of the affinity mask, the cgroup v1/v2 CPU quota and the
 * STOKER_CPUS environment variable when set. What the autotuner and
 * `stoker doctor` plan with; read afresh on each call. Thread-safe. */
STK_API double stk_cpus_available(void);

/* ------------------------------------------------------------------------ */
/* Errors (pinned: never renumber, only append)                              */
/* ------------------------------------------------------------------------ */

enum stk_error {
    STK_OK = 0,
    STK_EINVAL = -1,       /* an argument or option is invalid */
    STK_ENOMEM = -2,       /* out of memory */
    STK_EIO = -3,          /* the operating system failed a read/open/mmap */
    STK_ENOENT = -4,       /* a file or directory does not exist */
    STK_EFORMAT = -5,      /* a data file is malformed (bad header, size...) */
    STK_ESPEC = -6,        /* the pipeline spec does not parse or compile */
    STK_ESTATE = -7,       /* the call is not valid in the object's state */
    STK_ESTOPPED = -8,     /* the loader was stopped while the call waited */
    STK_ELIMIT = -9,       /* input exceeds a configured safety limit */
    STK_EUNSUPPORTED = -10,/* a valid input stoker does not handle (yet) */
    STK_EDATA = -11,       /* one sample is corrupt (skippable by policy) */
    STK_ETHREAD = -12,     /* a thread could not be created */
    STK_EEXHAUSTED = -13,  /* every batch buffer is lent out; release one */
    STK_EINTR = -14,       /* interrupted by the caller (stk_loader_interrupt) */
    STK_ETIMEDOUT = -15,   /* a wait with a timeout expired */
    STK_ENETWORK = -16,    /* a remote store failed after its retries (URL, status, attempts) */
    STK_EACCESS = -17,     /* a remote store refused the credentials (401/403) */
};

/* Static name and one-line description of a code ("STK_EFORMAT: malformed
 * data file"). Never NULL; unknown codes give "unknown error". */
STK_API const char *stk_strerror(int code);

/* Detailed message of the last failing stoker call on the calling thread.
 * Lent: valid until the next stoker call on this thread. Never NULL (empty
 * when no call has failed). */
STK_API const char *stk_errmsg(void);

/* Frees memory that a stoker function gave to the caller (its doc comment
 * says so: the buffers of stk_dataset_read_field and stk_dataset_read_alloc).
 * NULL is a no-op. Use it rather than free(): the library and the program
 * may not share one allocator (a statically linked library, a Python
 * extension, another C runtime). */
STK_API void stk_free(void *p);

/* The element type and layout of images (a loader's batches, a spec's
 * output). STK_BF16: bfloat16 (the top 16 bits of a float32, rounded to nearest, ties
 * to even), as torch's .to(torch.bfloat16). */
typedef enum stk_dtype { STK_U8 = 0, STK_F16 = 1, STK_F32 = 2, STK_BF16 = 3 } stk_dtype;
typedef enum stk_layout { STK_HWC = 0, STK_CHW = 1 } stk_layout;

#ifdef __cplusplus
}
#endif

#endif /* STOKER_BASE_H */
