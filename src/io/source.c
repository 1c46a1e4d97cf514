/*
 * source.c — the local-file byte source, and whole-file mappings on top of
 * it.
 *
 * A file source holds one descriptor opened O_RDONLY | O_CLOEXEC |
 * O_NONBLOCK, by path or relative to a directory descriptor (openat):
 * naming a FIFO cannot hang the caller. Anything that is not a regular file
 * is refused before any byte is read. stk_source_open_file checks the size
 * against the caller's limit and names the path in its messages;
 * stk_source_open_file_at gives the bare reason and leaves the size to its
 * caller (the .stk reader and the image folder word both themselves).
 *
 * pread loops over short reads and EINTR; reaching the end of the file
 * early is STK_EFORMAT "unexpected end of file" (the caller words what it
 * means for its format), an OS error is STK_EIO with the errno text.
 * read_part is the same loop stopping at the end, for a caller that says
 * how many bytes it got. advise maps the hints onto madvise for a mapping
 * (stk_mapping_advise, usable after the source is closed) and
 * posix_fadvise for pread access; both are advisory, so their failures
 * cost speed, not correctness, and are ignored.
 *
 * map maps the whole file PROT_READ (readers hand out pointers into it and
 * nothing can write through them), MAP_SHARED or MAP_PRIVATE as asked
 * (source.h says why both exist), and registers the mapping with the
 * SIGBUS guard (map_guard.c), handing it the descriptor — the only reason
 * the guard needs one, and why registration happens here and not in the
 * reader: if the file is truncated while mapped, the lost pages read as
 * zeros instead of killing the process, and the readers that hand out
 * views into it check after use that a sample's bytes were still the
 * file's (stk_mapped_file_intact here, stk_shard_lost_check in the .stk
 * reader). A mapping keeps its own reference to the file, so the source
 * can be closed right after map; stk_source_unmap undoes both.
 */
#include "io/source.h"

#include "core/error.h"
#include "io/map_guard.h"
#include "io/remote_open.h" /* a path with a scheme: remote.c opens it */
#include "core/util.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The file source: storage allocated by file_new, or the caller's
 * (stk_file_source_open_at, `embedded`). */
typedef stk_file_source file_source;

static const char *errno_text(int e, char *buf, size_t n)
{
    /* GNU strerror_r (we build with _GNU_SOURCE): returns the text. */
    return strerror_r(e, buf, n);
}

/* Up to n bytes at offset: the count (short only at the end of the file),
 * or -1 with errno set. EINTR and short reads retried. */
int stk_source_get(const stk_source *s, uint64_t offset, size_t n, stk_scratch *scratch,
                   const uint8_t **p)
{
    if (stk_source_has_view(s))
        return stk_source_view(s, offset, n, p);
    int rc = stk_scratch_reserve(scratch, n ? n : 1);
    if (rc < 0)
        return rc;
    *p = scratch->data;
    /* One indirect call to the source's pread. */
    return stk_source_pread(s, scratch->data, n, offset);
}

ssize_t stk_pread_upto(int fd, void *buf, size_t n, uint64_t offset)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, p + done, n - done, (off_t)(offset + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

static int file_pread(const stk_source *s, void *buf, size_t n, uint64_t offset)
{
    const file_source *f = (const file_source *)s;
    char ebuf[128];
    ssize_t k = stk_pread_upto(f->fd, buf, n, offset);
    if (k < 0)
        return stk_fail(STK_EIO, "%s: read failed: %s", s->name,
                        errno_text(errno, ebuf, sizeof ebuf));
    if ((size_t)k < n)
        return stk_fail(STK_EFORMAT, "%s: unexpected end of file", s->name);
    return 0;
}

static int64_t file_read_part(const stk_source *s, void *buf, size_t n, uint64_t offset)
{
    const file_source *f = (const file_source *)s;
    char ebuf[128];
    ssize_t k = stk_pread_upto(f->fd, buf, n, offset);
    if (k < 0)
        return stk_fail(STK_EIO, "read error: %s", errno_text(errno, ebuf, sizeof ebuf));
    return (int64_t)k;
}

static int file_map(stk_source *s, unsigned flags, const uint8_t **data, stk_map_guard **guard)
{
    file_source *f = (file_source *)s;
    bool shared = flags & STK_MAP_SHARED;
    char ebuf[128];
    int rc;
    *data = NULL;
    *guard = NULL;
    if (s->size == 0)
        return 0;
    void *p = mmap(NULL, (size_t)s->size, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, f->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        if (shared)
            return stk_fail(STK_EIO, "%s: mmap failed: %s", s->name,
                            errno_text(e, ebuf, sizeof ebuf));
        return stk_fail(e == ENOMEM ? STK_ENOMEM : STK_EIO, "%s: cannot map %llu bytes: %s",
                        s->name, (unsigned long long)s->size, errno_text(e, ebuf, sizeof ebuf));
    }
    if ((rc = stk_map_guard_add(p, (size_t)s->size, f->fd, guard)) < 0) {
        stk_fail_prefix(rc, "%s", s->name);
        munmap(p, (size_t)s->size);
        return rc;
    }
    *data = p;
    return 0;
}

void stk_mapping_advise(const uint8_t *data, uint64_t offset, uint64_t len, stk_advice advice)
{
    static const int madv[] = {MADV_WILLNEED, MADV_SEQUENTIAL, MADV_RANDOM, MADV_HUGEPAGE,
                               MADV_NORMAL};
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = page > 0 ? offset / (uint64_t)page * (uint64_t)page : offset;
    if (!data || advice >= STK_ADVISE_CANCEL)
        return;
    (void)madvise((void *)(data + start), (size_t)(offset + len - start), madv[advice]);
}

static void file_advise(const stk_source *s, const uint8_t *data, uint64_t offset, uint64_t len,
                        stk_advice advice)
{
    const file_source *f = (const file_source *)s;
    if (data) {
        stk_mapping_advise(data, offset, len, advice);
        return;
    }
    static const int fadv[] = {POSIX_FADV_WILLNEED, POSIX_FADV_SEQUENTIAL, POSIX_FADV_RANDOM,
                               POSIX_FADV_NORMAL, POSIX_FADV_NORMAL};
    if (advice == STK_ADVISE_HUGEPAGE || advice >= STK_ADVISE_CANCEL) /* mappings; remote sources */
        return;
    (void)posix_fadvise(f->fd, (off_t)offset, (off_t)len, fadv[advice]);
}

stk_advice stk_random_map_advice(uint64_t dataset_bytes)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 && dataset_bytes <= (uint64_t)pages * (uint64_t)page / 2
               ? STK_ADVISE_HUGEPAGE
               : STK_ADVISE_RANDOM;
}

void stk_source_unmap(const uint8_t *data, uint64_t size, stk_map_guard *guard)
{
    stk_map_guard_remove(guard);
    if (data)
        munmap((void *)data, (size_t)size);
}

static void file_close(stk_source *s)
{
    file_source *f = (file_source *)s;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->embedded) /* the caller's storage, and a lent name */
        return;
    free(s->name);
    free(f);
}

static const stk_source_ops file_ops = {"file",   file_pread,  file_read_part,
                                        file_map, file_advise, file_close, NULL,  0};

/* A new file source named `name` with no descriptor yet (fd -1). */
static file_source *file_new(const char *name)
{
    file_source *f = calloc(1, sizeof *f);
    if (!f) {
        stk_fail(STK_ENOMEM, "out of memory opening %s", name);
        return NULL;
    }
    f->fd = -1;
    f->base.ops = &file_ops;
    if (!(f->base.name = stk_strdup(name))) {
        free(f);
        return NULL;
    }
    return f;
}

/* openat + fstat + regular-file check into f (fd -1 on entry); the reason
 * alone on failure (the caller names the file). */
static int file_open_at(file_source *f, int dirfd, const char *rel)
{
    char ebuf[128];
    struct stat st;
    f->fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) {
        int e = errno;
        return stk_fail(e == ENOENT ? STK_ENOENT : STK_EIO, "cannot open: %s",
                        errno_text(e, ebuf, sizeof ebuf));
    }
    if (fstat(f->fd, &st) != 0)
        return stk_fail(STK_EINVAL, "cannot stat: %s", errno_text(errno, ebuf, sizeof ebuf));
    if (!S_ISREG(st.st_mode) || st.st_size < 0)
        return stk_fail(STK_EINVAL, "not a regular file");
    f->base.size = (uint64_t)st.st_size;
    return 0;
}

int stk_source_open_file_at(int dirfd, const char *rel, const char *name, stk_source **out)
{
    file_source *f;
    int rc;

    *out = NULL;
    if (stk_is_remote(rel)) {
        /* An object store (remote.c): its messages name the URL; the
         * caller's prefix names it again, so give the reason alone. */
        if ((rc = stk_remote_open(rel, UINT64_MAX, out)) < 0) {
            char msg[STK_ERRMSG_MAX];
            const char *m = stk_errmsg();
            size_t k = strlen(rel);
            snprintf(msg, sizeof msg, "%s", strncmp(m, rel, k) == 0 && m[k] == ':' ? m + k + 2 : m);
            stk_errmsg_set(msg);
        }
        return rc;
    }
    if (!(f = file_new(name ? name : rel)))
        return STK_ENOMEM;
    if ((rc = file_open_at(f, dirfd, rel)) < 0) {
        file_close(&f->base);
        return rc;
    }
    *out = &f->base;
    return 0;
}

int stk_file_source_open_at(stk_file_source *fs, int dirfd, const char *rel, const char *name)
{
    memset(fs, 0, sizeof *fs);
    fs->base.ops = &file_ops;
    fs->base.name = (char *)(name ? name : rel); /* lent: embedded sources never free it */
    fs->fd = -1;
    fs->embedded = 1;
    int rc = file_open_at(fs, dirfd, rel);
    if (rc < 0)
        file_close(&fs->base);
    return rc;
}

int stk_source_open_file(const char *path, uint64_t max_bytes, stk_source **out)
{
    char ebuf[128];
    struct stat st;
    file_source *f;
    int rc;

    *out = NULL;
    if (stk_is_remote(path))
        return stk_remote_open(path, max_bytes, out); /* an object store (remote.c) */
    if (!(f = file_new(path)))
        return STK_ENOMEM;
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

int stk_file_write_atomic(const char *path, const void *data, size_t size)
{
    char ebuf[128];
    size_t n = strlen(path);
    char *tmp = malloc(n + 12);
    if (!tmp)
        return stk_fail(STK_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp-XXXXXX", 12);
    int fd = mkostemp(tmp, O_CLOEXEC), rc = 0;
    if (fd < 0) {
        rc = stk_fail(STK_EIO, "%s: cannot write: %s", path, errno_text(errno, ebuf, sizeof ebuf));
        free(tmp);
        return rc;
    }
    const uint8_t *p = data;
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, p + done, size - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rc = stk_fail(STK_EIO, "%s: cannot write: %s", path,
                          k < 0 ? errno_text(errno, ebuf, sizeof ebuf) : "no progress");
            break;
        }
        done += (size_t)k;
    }
    if (rc == 0 && fchmod(fd, 0644) != 0)
        rc = stk_fail(STK_EIO, "%s: cannot write: %s", path, errno_text(errno, ebuf, sizeof ebuf));
    if (close(fd) != 0 && rc == 0)
        rc = stk_fail(STK_EIO, "%s: cannot write: %s", path, errno_text(errno, ebuf, sizeof ebuf));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = stk_fail(STK_EIO, "%s: cannot write: %s", path, errno_text(errno, ebuf, sizeof ebuf));
    if (rc < 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

int stk_map_file(const char *path, uint64_t max_bytes, stk_mapped_file *out)
{
    stk_source *s;
    const uint8_t *data;
    int rc;

    out->data = NULL;
    out->size = 0;
    out->guard = NULL;
    out->heap = 0;
    if ((rc = stk_source_open_file(path, max_bytes, &s)) < 0)
        return rc;
    if (stk_is_remote(path)) {
        /* An object cannot be mapped: read it whole into memory (through
         * the cache), which stk_unmap_file frees. */
        uint8_t *buf = s->size ? malloc((size_t)s->size) : NULL;
        if (s->size && !buf)
            rc = stk_fail(STK_ENOMEM, "%s: out of memory for %llu bytes", path,
                          (unsigned long long)s->size);
        else if (s->size)
            rc = stk_source_pread(s, buf, (size_t)s->size, 0);
        if (rc == 0) {
            out->data = buf;
            out->size = (size_t)s->size;
            out->heap = 1;
        } else {
            free(buf);
        }
        stk_source_close(s);
        return rc;
    }
    rc = stk_source_map(s, 0, &data, &out->guard);
    if (rc == 0 && data) {
        stk_source_advise(s, data, 0, s->size, STK_ADVISE_WILLNEED);
        out->data = data;
        out->size = (size_t)s->size;
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
    if (m->heap)
        free((void *)m->data);
    else
        stk_source_unmap(m->data, m->size, m->guard);
    m->heap = 0;
    m->guard = NULL;
    m->data = NULL;
    m->size = 0;
}
