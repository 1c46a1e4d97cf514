/*
 * stoker/op.h — user-defined ops: the C ABI of an op written outside stoker
 * (a plugin, a program that links libstoker, or a binding such as the
 * Python module's NumbaOp and PythonOp).
 *
 * A user op is a named stage of the pipeline spec language. It runs on the
 * uint8 HWC image of one sample in the image pipeline's tail: after the
 * geometry head (crops, resize, flips before them), before normalize and
 * the float stages (rotate, color_jitter, ...), in spec order relative to
 * the other uint8 tail stages (augmentation policies). docs/ops.md is the
 * guide, with a worked example; examples/plugin_brightness/ is a complete
 * plugin built against the installed library.
 *
 * The op is a table of hooks (stk_user_op), registered once per process by
 * name with stk_op_register(), or by a plugin's stk_plugin_init() through
 * the host table it is handed (stk_plugin_load(), the spec stage
 * `plugin PATH`, the CLI's --plugin, Python's stoker.load_plugin()):
 *
 *   parse         the stage's arguments (argv-style strings, as written in
 *                 the spec) -> the op's state, or an error message. Called
 *                 when a spec is checked and again for each compiled plan;
 *                 each state is released with free().
 *   output_shape  the image shape the op makes from its input shape, at
 *                 compile time, when the shape is fixed (NULL: unchanged).
 *   draw          (optional) the sample's random parameters, from the
 *                 sample's own random stream through stk_op_rng_uniform /
 *                 stk_op_rng_u32 (or the host's copies of them). It is the
 *                 only source of randomness an op may use: the stream is a
 *                 pure function of (seed, epoch, sample), so results are
 *                 bit-identical for any thread count.
 *   run           the pixel work on one sample: `in` (h x w x c) into `out`
 *                 (the shape output_shape gave), given the drawn params.
 *   free          release a state made by parse.
 *
 * Threads: parse, output_shape and free run in the thread that parses the
 * spec or creates / destroys a loader; draw and run run in the loader's
 * worker threads, concurrently, on the same state: treat the state as
 * read-only after parse (keep per-call data on the stack or in `out`).
 *
 * Versioning (docs/ops.md, "The ABI"): abi_version is STK_OP_ABI_VERSION
 * of the header the op was built with, and changes only when a hook's
 * meaning or a struct's existing layout changes; stoker refuses an op of
 * another version with a message naming both. New hooks are appended, so
 * struct_size grows: a library accepts any struct_size from the first
 * version's size up to its own (hooks it would read past the end are
 * NULL), and refuses a larger one (the op was built against a newer
 * stoker.h). All structs here are plain data; no allocation crosses the
 * boundary except the op's own state.
 */
#ifndef STOKER_OP_H
#define STOKER_OP_H

#include "stoker/stoker.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STK_OP_ABI_VERSION 1

/* Random parameters one draw() may write (the size of its `params`). */
#define STK_OP_MAX_DRAWS 16

/* Longest op name, in bytes. Names are [a-z_][a-z0-9_]* (the spec matches
 * them case-insensitively). */
#define STK_OP_NAME_MAX 63

/* The sample's random stream (opaque; valid only during the draw call). */
typedef struct stk_op_rng stk_op_rng;

/* A uniform double in [0, 1) with 53 random bits, the next value of the
 * stream (the same numbers stoker's own ops draw). */
STK_API double stk_op_rng_uniform(stk_op_rng *rng);
/* The next 32 random bits of the stream. */
STK_API uint32_t stk_op_rng_u32(stk_op_rng *rng);

/* One image: `height` rows of width * channels bytes, HWC (interleaved
 * channels), each row `stride` bytes after the previous one. In this
 * version rows are contiguous: stride == width * channels. */
typedef struct stk_op_image {
    uint8_t *pixels;                  /* lent for the call; `in` is read-only */
    uint32_t height, width, channels; /* channels: 1 or 3 */
    uint32_t reserved0_;              /* 0 */
    size_t stride;
} stk_op_image;

/* A user op. Fill every field you use and zero the rest; stoker copies the
 * struct at registration (the strings and `user` must outlive the process's
 * use of the op: registrations are never removed). */
typedef struct stk_user_op {
    uint32_t abi_version; /* STK_OP_ABI_VERSION */
    uint32_t struct_size; /* sizeof(stk_user_op) */
    const char *name;     /* the spec name: [a-z_][a-z0-9_]*, at most STK_OP_NAME_MAX bytes */
    const char *usage;    /* the arguments as a user writes them ("FACTOR"), for
                             messages; may be NULL */

    /* The stage's arguments: argv[0..argc) are its whitespace-separated
     * words as written (a `key=value` word is one string; spaces around
     * ',' and '=' removed). Store what run needs in *state (may stay
     * NULL). Return 0, or a negative value with a message in err (a
     * NUL-terminated string of at most errsize bytes): the spec error then
     * names the op and its column. NULL: the op takes no arguments. */
    int (*parse)(void *user, int argc, const char *const *argv, void **state, char *err,
                 size_t errsize);

    /* The output shape (height, width, channels) for an input of in[]:
     * channels must stay 1 or 3, sides 1 .. 2^24. Return 0, or a negative
     * value with a message (the spec cannot be compiled for this input).
     * NULL: the output has the input's shape. */
    int (*output_shape)(void *state, const uint32_t in[3], uint32_t out[3], char *err,
                        size_t errsize);

    /* Draw this sample's random parameters into params[0..STK_OP_MAX_DRAWS)
     * (zeroed before the call) from rng, and nothing else. Called for every
     * sample, in spec order with the other ops' draws. NULL: no draws. */
    void (*draw)(void *state, stk_op_rng *rng, double *params);

    /* The pixel work: read `in`, write every byte of `out` (whose shape is
     * the one output_shape gave; it never overlaps `in`). Return 0, or a
     * negative value with a message in err: STK_EDATA marks this sample as
     * bad (skipped under the loader's on_error=skip, else the loader
     * fails); any other negative value fails the loader. The message is
     * reported with the sample's name and the op's. */
    int (*run)(void *state, const double *params, const stk_op_image *in, stk_op_image *out,
               char *err, size_t errsize);

    /* Release a state made by parse (may be NULL). */
    void (*free)(void *state);

    void *user; /* passed to parse */
} stk_user_op;

/* The size of version 1's stk_user_op, the smallest struct_size accepted. */
#define STK_USER_OP_SIZE_V1 (8 + 8 * 8)

/*
 * Register `op` for every spec parsed from now on in this process.
 * Thread-safe. STK_EINVAL for a bad name or a missing run hook, for a name
 * already taken (a built-in op, a preset, or an op registered before) —
 * the message names who holds it; STK_EUNSUPPORTED for another
 * abi_version or a struct_size this library does not know (the message
 * names both versions); STK_ELIMIT past 1024 ops.
 */
STK_API int stk_op_register(const stk_user_op *op);

/* What a plugin's init function is handed: the ABI version of the stoker
 * that loads it, the path it was loaded from, and the functions to call
 * (use these, not the exported ones, so the plugin works in a program that
 * links stoker statically, such as the Python module). The table stays
 * valid for the life of the process: a plugin may keep the pointer. */
typedef struct stk_plugin_host {
    uint32_t abi_version; /* STK_OP_ABI_VERSION of the loading library */
    uint32_t struct_size; /* sizeof(stk_plugin_host) of the loading library */
    const char *path;     /* the library's path as given */
    /* stk_op_register, with the plugin named in its messages. */
    int (*register_op)(const struct stk_plugin_host *host, const stk_user_op *op);
    double (*rng_uniform)(stk_op_rng *rng);
    uint32_t (*rng_u32)(stk_op_rng *rng);
    void *reserved_[8]; /* NULL */
} stk_plugin_host;

/* The function a plugin exports (C linkage, default visibility):
 *
 *     int stk_plugin_init(const stk_plugin_host *host);
 *
 * registering its ops through host->register_op and returning 0, or a
 * negative value (the load fails with that code; ops registered before the
 * failure stay registered). */
#define STK_PLUGIN_INIT_SYMBOL "stk_plugin_init"
typedef int (*stk_plugin_init_fn)(const stk_plugin_host *host);

/*
 * Load the shared library at `path` (dlopen) and call its stk_plugin_init.
 * Loading the same library again does nothing. Thread-safe. STK_ENOENT when
 * the file does not exist, STK_EINVAL when it cannot be loaded or has no
 * stk_plugin_init, the init's code when it fails; the message names the
 * path. A loaded library is never unloaded.
 */
STK_API int stk_plugin_load(const char *path);

#ifdef __cplusplus
}
#endif

#endif
