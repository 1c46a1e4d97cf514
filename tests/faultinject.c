/*
 * faultinject.c — the wrappers behind faultinject.h (docs/testing.md).
 *
 * The test executable is linked with -Wl,--wrap=NAME for every NAME below:
 * the linker resolves each undefined reference to NAME in the linked objects
 * (the static library's and the test's) to __wrap_NAME, and __real_NAME to
 * the real NAME. Calls made inside shared libraries (libc itself, libjpeg,
 * zlib, ...) are not redirected, and under AddressSanitizer __real_malloc
 * still reaches ASan's malloc, so leak detection sees every allocation.
 *
 * Three kinds of wrappers:
 *  - memory: malloc, calloc, realloc, posix_memalign fail with ENOMEM;
 *  - system calls: open, openat, read, pread, write, pwrite, mmap, fstat,
 *    fstatat, stat, lstat, fsync, fdatasync, ftruncate, rename, mkdir,
 *    opendir, fdopendir, readdir, glob fail as the kernel would (EIO,
 *    ENOMEM for mmap and fdopendir, GLOB_NOSPACE for glob);
 *    pthread_create fails with EAGAIN;
 *  - the codec libraries' allocating entry points fail the way those
 *    libraries report running out of memory: zstd returns
 *    ZSTD_error_memory_allocation, zlib Z_MEM_ERROR, libspng NULL or
 *    SPNG_EMEM, and libjpeg calls the caller's error_exit with
 *    JERR_OUT_OF_MEMORY (which longjmps back into the library's decoder).
 *
 * One counter (atomic: loader workers call these concurrently) numbers the
 * calls made while armed, from 1; the call that draws number fail_at fails
 * instead of running, and in persistent mode every later one too. Unarmed,
 * every wrapper only forwards.
 */
#include "faultinject.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <spng.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

static int armed;               /* atomic: counting calls */
static uint64_t calls;          /* atomic: calls counted since fi_arm */
static uint64_t fail_at;        /* set by fi_arm before armed is raised */
static int persist;             /* likewise */
static int fired;               /* atomic */
static const char *fired_what;  /* written once, by the thread that fires */
static void *fired_caller;
static long live_maps;          /* atomic */

void fi_arm(uint64_t n, int persistent)
{
    persist = persistent;
    __atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&fired, 0, __ATOMIC_SEQ_CST);
    fired_what = NULL;
    fired_caller = NULL;
    fail_at = n;
    __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
}

uint64_t fi_disarm(void)
{
    __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&calls, __ATOMIC_SEQ_CST);
}

int fi_fired(void) { return __atomic_load_n(&fired, __ATOMIC_SEQ_CST); }
const char *fi_fired_what(void) { return fired_what; }
void *fi_fired_caller(void) { return fired_caller; }
long fi_live_maps(void) { return __atomic_load_n(&live_maps, __ATOMIC_SEQ_CST); }

int fi_open_fds(void)
{
    /* Unarmed callers only (the test, between runs). */
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* Does this call fail? */
static int fail_here(const char *what, void *caller)
{
    if (!__atomic_load_n(&armed, __ATOMIC_SEQ_CST))
        return 0;
    uint64_t k = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
    if (fail_at == 0 || k < fail_at)
        return 0;
    if (k > fail_at)
        return persist;
    fired_what = what;
    fired_caller = caller;
    __atomic_store_n(&fired, 1, __ATOMIC_SEQ_CST);
    return 1;
}

#define FAIL(name) fail_here(name, __builtin_return_address(0))
/* In a wrapper: when this call is the one to fail, set errno and return
 * `ret` (the failure value of the wrapped function). */
#define FAIL_WITH(name, err, ret)                                                                  \
    do {                                                                                           \
        if (FAIL(name)) {                                                                          \
            errno = (err);                                                                         \
            return ret;                                                                            \
        }                                                                                          \
    } while (0)

/* The prototypes -Wmissing-prototypes wants; the linker supplies __real_.
 * Default visibility: the linker also looks the wrapper up for references
 * from the shared libraries it links against (libspng's to inflate) and
 * refuses a hidden one. */
#define WRAP(ret, name, params)                                                                    \
    ret __real_##name params;                                                                      \
    __attribute__((visibility("default"))) ret __wrap_##name params;                               \
    ret __wrap_##name params

/* ------------------------------------------------------------------------ */
/* Memory                                                                   */
/* ------------------------------------------------------------------------ */

WRAP(void *, malloc, (size_t n))
{
    FAIL_WITH("malloc", ENOMEM, NULL);
    return __real_malloc(n);
}

WRAP(void *, calloc, (size_t n, size_t m))
{
    FAIL_WITH("calloc", ENOMEM, NULL);
    return __real_calloc(n, m);
}

WRAP(void *, realloc, (void *p, size_t n))
{
    FAIL_WITH("realloc", ENOMEM, NULL);
    return __real_realloc(p, n);
}

WRAP(int, posix_memalign, (void **p, size_t align, size_t n))
{
    if (FAIL("posix_memalign"))
        return ENOMEM;
    return __real_posix_memalign(p, align, n);
}

/* ------------------------------------------------------------------------ */
/* Files and threads                                                        */
/* ------------------------------------------------------------------------ */

WRAP(int, open, (const char *path, int flags, ...))
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    FAIL_WITH("open", EIO, -1);
    return __real_open(path, flags, mode);
}

WRAP(int, openat, (int dirfd, const char *path, int flags, ...))
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    FAIL_WITH("openat", EIO, -1);
    return __real_openat(dirfd, path, flags, mode);
}

WRAP(ssize_t, read, (int fd, void *buf, size_t n))
{
    FAIL_WITH("read", EIO, -1);
    return __real_read(fd, buf, n);
}

WRAP(ssize_t, pread, (int fd, void *buf, size_t n, off_t off))
{
    FAIL_WITH("pread", EIO, -1);
    return __real_pread(fd, buf, n, off);
}

WRAP(ssize_t, write, (int fd, const void *buf, size_t n))
{
    FAIL_WITH("write", EIO, -1);
    return __real_write(fd, buf, n);
}

WRAP(ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off))
{
    FAIL_WITH("pwrite", EIO, -1);
    return __real_pwrite(fd, buf, n, off);
}

WRAP(int, ftruncate, (int fd, off_t n))
{
    FAIL_WITH("ftruncate", EIO, -1);
    return __real_ftruncate(fd, n);
}

WRAP(int, fdatasync, (int fd))
{
    FAIL_WITH("fdatasync", EIO, -1);
    return __real_fdatasync(fd);
}

WRAP(void *, mmap, (void *addr, size_t n, int prot, int flags, int fd, off_t off))
{
    FAIL_WITH("mmap", ENOMEM, MAP_FAILED);
    void *p = __real_mmap(addr, n, prot, flags, fd, off);
    if (p != MAP_FAILED)
        __atomic_add_fetch(&live_maps, 1, __ATOMIC_SEQ_CST);
    return p;
}

WRAP(int, munmap, (void *addr, size_t n))
{
    int rc = __real_munmap(addr, n);
    if (rc == 0)
        __atomic_sub_fetch(&live_maps, 1, __ATOMIC_SEQ_CST);
    return rc;
}

WRAP(int, fstat, (int fd, struct stat *st))
{
    FAIL_WITH("fstat", EIO, -1);
    return __real_fstat(fd, st);
}

WRAP(int, fstatat, (int dirfd, const char *path, struct stat *st, int flags))
{
    FAIL_WITH("fstatat", EIO, -1);
    return __real_fstatat(dirfd, path, st, flags);
}

WRAP(int, stat, (const char *path, struct stat *st))
{
    FAIL_WITH("stat", EIO, -1);
    return __real_stat(path, st);
}

WRAP(int, lstat, (const char *path, struct stat *st))
{
    FAIL_WITH("lstat", EIO, -1);
    return __real_lstat(path, st);
}

WRAP(int, fsync, (int fd))
{
    FAIL_WITH("fsync", EIO, -1);
    return __real_fsync(fd);
}

WRAP(int, rename, (const char *a, const char *b))
{
    FAIL_WITH("rename", EIO, -1);
    return __real_rename(a, b);
}

WRAP(int, mkdir, (const char *path, mode_t mode))
{
    FAIL_WITH("mkdir", EIO, -1);
    return __real_mkdir(path, mode);
}

WRAP(DIR *, opendir, (const char *path))
{
    FAIL_WITH("opendir", EIO, NULL);
    return __real_opendir(path);
}

WRAP(DIR *, fdopendir, (int fd))
{
    FAIL_WITH("fdopendir", ENOMEM, NULL);
    return __real_fdopendir(fd);
}

WRAP(struct dirent *, readdir, (DIR *d))
{
    FAIL_WITH("readdir", EIO, NULL);
    return __real_readdir(d);
}

WRAP(int, glob, (const char *pattern, int flags, int (*errfunc)(const char *, int), glob_t *g))
{
    if (FAIL("glob")) {
        /* glob leaves *g valid for globfree on every error. */
        memset(g, 0, sizeof *g);
        return GLOB_NOSPACE;
    }
    return __real_glob(pattern, flags, errfunc, g);
}

WRAP(int, pthread_create,
     (pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg))
{
    if (FAIL("pthread_create"))
        return EAGAIN;
    return __real_pthread_create(t, attr, fn, arg);
}

/* ------------------------------------------------------------------------ */
/* Codec libraries                                                          */
/* ------------------------------------------------------------------------ */

WRAP(ZSTD_CCtx *, ZSTD_createCCtx, (void))
{
    if (FAIL("ZSTD_createCCtx"))
        return NULL;
    return __real_ZSTD_createCCtx();
}

WRAP(size_t, ZSTD_compressCCtx,
     (ZSTD_CCtx * c, void *dst, size_t cap, const void *src, size_t n, int level))
{
    if (FAIL("ZSTD_compressCCtx"))
        return (size_t) - (int)ZSTD_error_memory_allocation;
    return __real_ZSTD_compressCCtx(c, dst, cap, src, n, level);
}

WRAP(size_t, ZSTD_decompress, (void *dst, size_t cap, const void *src, size_t n))
{
    if (FAIL("ZSTD_decompress"))
        return (size_t) - (int)ZSTD_error_memory_allocation;
    return __real_ZSTD_decompress(dst, cap, src, n);
}

WRAP(int, inflateInit2_, (z_streamp s, int bits, const char *version, int size))
{
    if (FAIL("inflateInit2_"))
        return Z_MEM_ERROR;
    return __real_inflateInit2_(s, bits, version, size);
}

WRAP(int, inflate, (z_streamp s, int flush))
{
    if (FAIL("inflate"))
        return Z_MEM_ERROR;
    return __real_inflate(s, flush);
}

WRAP(spng_ctx *, spng_ctx_new, (int flags))
{
    if (FAIL("spng_ctx_new"))
        return NULL;
    return __real_spng_ctx_new(flags);
}

WRAP(int, spng_get_ihdr, (spng_ctx * c, struct spng_ihdr *h))
{
    if (FAIL("spng_get_ihdr"))
        return SPNG_EMEM;
    return __real_spng_get_ihdr(c, h);
}

WRAP(int, spng_decode_chunks, (spng_ctx * c))
{
    if (FAIL("spng_decode_chunks"))
        return SPNG_EMEM;
    return __real_spng_decode_chunks(c);
}

WRAP(int, spng_decode_image, (spng_ctx * c, void *out, size_t n, int fmt, int flags))
{
    if (FAIL("spng_decode_image"))
        return SPNG_EMEM;
    return __real_spng_decode_image(c, out, n, fmt, flags);
}

WRAP(int, spng_decode_row, (spng_ctx * c, void *out, size_t n))
{
    if (FAIL("spng_decode_row"))
        return SPNG_EMEM;
    return __real_spng_decode_row(c, out, n);
}

WRAP(int, spng_encode_image, (spng_ctx * c, const void *img, size_t n, int fmt, int flags))
{
    if (FAIL("spng_encode_image"))
        return SPNG_EMEM;
    return __real_spng_encode_image(c, img, n, fmt, flags);
}

/* libjpeg reports running out of memory through error_exit, which must not
 * return (the library's handlers longjmp). */
static void jpeg_oom(j_common_ptr c)
{
    c->err->msg_code = JERR_OUT_OF_MEMORY;
    c->err->msg_parm.i[0] = 0;
    c->err->error_exit(c);
}

/* jpeg_Create* zero the object (keeping err and client_data) before their
 * memory manager can fail: the state error_exit sees. */
WRAP(void, jpeg_CreateDecompress, (j_decompress_ptr c, int version, size_t size))
{
    if (FAIL("jpeg_CreateDecompress")) {
        struct jpeg_error_mgr *err = c->err;
        void *cd = c->client_data;
        memset(c, 0, size);
        c->err = err;
        c->client_data = cd;
        c->is_decompressor = TRUE;
        jpeg_oom((j_common_ptr)c);
    }
    __real_jpeg_CreateDecompress(c, version, size);
}

WRAP(void, jpeg_CreateCompress, (j_compress_ptr c, int version, size_t size))
{
    if (FAIL("jpeg_CreateCompress")) {
        struct jpeg_error_mgr *err = c->err;
        void *cd = c->client_data;
        memset(c, 0, size);
        c->err = err;
        c->client_data = cd;
        c->is_decompressor = FALSE;
        jpeg_oom((j_common_ptr)c);
    }
    __real_jpeg_CreateCompress(c, version, size);
}

#define JPEG_WRAP(ret, name, params, args)                                                        \
    WRAP(ret, name, params)                                                                        \
    {                                                                                              \
        if (FAIL(#name))                                                                           \
            jpeg_oom((j_common_ptr)c);                                                             \
        return __real_##name args;                                                                 \
    }
#define JPEG_WRAP_VOID(name, params, args)                                                        \
    WRAP(void, name, params)                                                                       \
    {                                                                                              \
        if (FAIL(#name))                                                                           \
            jpeg_oom((j_common_ptr)c);                                                             \
        __real_##name args;                                                                        \
    }

JPEG_WRAP(int, jpeg_read_header, (j_decompress_ptr c, boolean req), (c, req))
JPEG_WRAP(boolean, jpeg_start_decompress, (j_decompress_ptr c), (c))
JPEG_WRAP(JDIMENSION, jpeg_read_scanlines, (j_decompress_ptr c, JSAMPARRAY s, JDIMENSION n),
          (c, s, n))
JPEG_WRAP(JDIMENSION, jpeg_skip_scanlines, (j_decompress_ptr c, JDIMENSION n), (c, n))
JPEG_WRAP(boolean, jpeg_finish_decompress, (j_decompress_ptr c), (c))
JPEG_WRAP(jvirt_barray_ptr *, jpeg_read_coefficients, (j_decompress_ptr c), (c))
JPEG_WRAP(JDIMENSION, jpeg_write_scanlines, (j_compress_ptr c, JSAMPARRAY s, JDIMENSION n),
          (c, s, n))
JPEG_WRAP_VOID(jpeg_start_compress, (j_compress_ptr c, boolean all), (c, all))
JPEG_WRAP_VOID(jpeg_finish_compress, (j_compress_ptr c), (c))
JPEG_WRAP_VOID(jpeg_write_coefficients, (j_compress_ptr c, jvirt_barray_ptr *v), (c, v))
JPEG_WRAP_VOID(jpeg_crop_scanline, (j_decompress_ptr c, JDIMENSION *x, JDIMENSION *w), (c, x, w))
