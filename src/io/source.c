/*
 * source.c — the local-file byte source, and whole-file mappings on top of
 * it.
 *
 * A file source holds one descriptor opened O_RDONLY | O_CLOEXEC |
 * O_NONBLOCK: naming a FIFO cannot hang the caller. Anything that is not a
 * regular file is refused before any byte is read, and the size is checked
 * against the caller's limit before a mapping exists. pread loops over
 * short reads and EINTR; reaching the end of the file early is STK_EFORMAT
 * "unexpected end of file" (the caller words what it means for its format),
 * an OS error is STK_EIO with the errno text. advise maps the hints onto
 * madvise for a mapping and posix_fadvise for pread access; both are
 * advisory, so their failures cost speed, not correctness, and are ignored.
 *
 * stk_map_file maps a whole file MAP_PRIVATE and PROT_READ (readers hand out
 * pointers into it and nothing can write through them) and closes the
 * source: a mapping keeps its own reference to the file. The mapping is
 * registered with the SIGBUS guard (map_guard.c): if the file is truncated
 * while open, the lost pages read as zeros instead of killing the process,
 * and the readers that hand out views into it (CIFAR, IDX, npy) check with
 * stk_mapped_file_intact, in their read_check, that a sample's bytes were
 * still the file's after the caller used them.
 */
#include "io/source.h"

#include "core/error.h"
#include "io/map_guard.h"
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct file_source {
    stk_source base;
    int fd; /* owned */
} file_source;

static const char *errno_text(int e, char *buf, size_t n)
{
    /* GNU strerror_r (we build with _GNU_SOURCE): returns the text. */
    return strerror_r(e, buf, n);
}

static int file_pread(const stk_source *s, void *buf, size_t n, uint64_t offset)
{
    const file_source *f = (const file_source *)s;
    uint8_t *p = buf;
    char ebuf[128];
    while (n) {
        ssize_t k = pread(f->fd, p, n, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return stk_fail(STK_EIO, "%s: read failed: %s", s->name,
                            errno_text(errno, ebuf, sizeof ebuf));
        if (k == 0)
            return stk_fail(STK_EFORMAT, "%s: unexpected end of file", s->name);
        p += k;
        n -= (size_t)k;
        offset += (uint64_t)k;
    }
    return 0;
}

static int file_map(stk_source *s, const uint8_t **data)
{
    file_source *f = (file_source *)s;
    char ebuf[128];
    *data = NULL;
    if (s->size == 0)
        return 0;
    void *p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        return stk_fail(e == ENOMEM ? STK_ENOMEM : STK_EIO, "%s: cannot map %llu bytes: %s",
                        s->name, (unsigned long long)s->size, errno_text(e, ebuf, sizeof ebuf));
    }
    *data = p;
    return 0;
}

static void file_advise(const stk_source *s, const uint8_t *data, uint64_t offset, uint64_t len,
                        stk_advice advice)
{
    const file_source *f = (const file_source *)s;
    if (data) {
        static const int madv[] = {MADV_WILLNEED, MADV_SEQUENTIAL, MADV_RANDOM, MADV_HUGEPAGE};
        long page = sysconf(_SC_PAGESIZE);
        uint64_t start = page > 0 ? offset / (uint64_t)page * (uint64_t)page : offset;
        (void)madvise((void *)(data + start), (size_t)(offset + len - start), madv[advice]);
        return;
    }
    static const int fadv[] = {POSIX_FADV_WILLNEED, POSIX_FADV_SEQUENTIAL, POSIX_FADV_RANDOM};
    if (advice == STK_ADVISE_HUGEPAGE) /* only means something for a mapping */
        return;
    (void)posix_fadvise(f->fd, (off_t)offset, (off_t)len, fadv[advice]);
}

static void file_close(stk_source *s)
{
    file_source *f = (file_source *)s;
    if (f->fd >= 0)
        close(f->fd);
    free(s->name);
    free(f);
}

static const stk_source_ops file_ops = {"file", file_pread, file_map, file_advise, file_close};

int stk_source_open_file(const char *path, uint64_t max_bytes, stk_source **out)
{
    char ebuf[128];
    struct stat st;
    file_source *f;
    int rc;

    *out = NULL;
    f = calloc(1, sizeof *f);
    if (!f)
        return stk_fail(STK_ENOMEM, "out of memory opening %s", path);
    f->fd = -1;
    f->base.ops = &file_ops;
    if (!(f->base.name = stk_strdup(path))) {
        free(f);
        return STK_ENOMEM;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            rc = stk_fail(STK_ENOENT, "%s: no such file", path);
        else
            rc = stk_fail(STK_EIO, "%s: cannot open: %s", path, errno_text(e, ebuf, sizeof ebuf));
        goto fail;
    }
    if (fstat(f->fd, &st) != 0) {
        rc = stk_fail(STK_EIO, "%s: cannot stat: %s", path, errno_text(errno, ebuf, sizeof ebuf));
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = stk_fail(STK_EINVAL, "%s: is a directory, expected a data file", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = stk_fail(STK_EINVAL, "%s: not a regular file (device, FIFO or socket)", path);
        goto fail;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes || (uint64_t)st.st_size > SIZE_MAX) {
        rc = stk_fail(STK_ELIMIT, "%s: size %lld bytes exceeds the max_bytes limit of %llu",
                      path, (long long)st.st_size, (unsigned long long)max_bytes);
        goto fail;
    }
    f->base.size = (uint64_t)st.st_size;
    *out = &f->base;
    return 0;

fail:
    file_close(&f->base);
    return rc;
}

void stk_source_close(stk_source *s)
{
    if (s)
        s->ops->close(s);
}

int stk_map_file(const char *path, uint64_t max_bytes, stk_mapped_file *out)
{
    stk_source *s;
    const uint8_t *data;
    int rc;

    out->data = NULL;
    out->size = 0;
    out->guard = NULL;
    if ((rc = stk_source_open_file(path, max_bytes, &s)) < 0)
        return rc;
    rc = stk_source_map(s, &data);
    if (rc == 0 && data) {
        rc = stk_map_guard_add(data, (size_t)s->size, ((file_source *)s)->fd, &out->guard);
        if (rc < 0) {
            stk_fail_prefix(rc, "%s", path);
            munmap((void *)data, (size_t)s->size);
        } else {
            stk_source_advise(s, data, 0, s->size, STK_ADVISE_WILLNEED);
            out->data = data;
            out->size = (size_t)s->size;
        }
    }
    stk_source_close(s);
    return rc;
}

int stk_mapped_file_intact(const stk_mapped_file *m, uint64_t offset, uint64_t len,
                           uint64_t *valid)
{
    uint64_t v = m->guard ? stk_map_guard_check(m->guard, offset + len) : m->size;
    if (valid)
        *valid = v;
    return offset <= v && len <= v - offset;
}

void stk_unmap_file(stk_mapped_file *m)
{
    stk_map_guard_remove(m->guard);
    m->guard = NULL;
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
