/*
 * reader_util.c — file mapping, URI query parsing and path helpers shared by
 * the dataset readers.
 *
 * stk_map_file is the one place a dataset file is opened. It opens with
 * O_NONBLOCK so that naming a FIFO cannot hang the caller, rejects anything
 * that is not a regular file before mapping, checks the size against the
 * caller's limit before the mapping exists, and closes the descriptor once
 * the mapping holds the file (a mapping keeps its own reference). The
 * mapping is MAP_PRIVATE and PROT_READ: readers hand out pointers into it
 * and nothing can write through them.
 *
 * These private mappings (CIFAR, IDX) are not registered with the SIGBUS
 * guard that .stk shards use (src/io/map_guard.c): their readers hand out
 * views without a read_check, so a file truncated while open still raises
 * SIGBUS on access; docs/datasets.md says so. Everything else about the
 * file is validated at open.
 */
#include "format/reader_util.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Mapping                                                                  */
/* ------------------------------------------------------------------------ */

static const char *stk_errno_text(int e, char *buf, size_t n)
{
    /* GNU strerror_r (we build with _GNU_SOURCE): returns the text. */
    return strerror_r(e, buf, n);
}

int stk_map_file(const char *path, uint64_t max_bytes, stk_mapped_file *out)
{
    char ebuf[128];
    struct stat st;
    int rc;
    void *p;
    int fd;

    out->data = NULL;
    out->size = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return stk_fail(STK_ENOENT, "%s: no such file", path);
        return stk_fail(STK_EIO, "%s: cannot open: %s", path, stk_errno_text(e, ebuf, sizeof ebuf));
    }
    if (fstat(fd, &st) != 0) {
        rc = stk_fail(STK_EIO, "%s: cannot stat: %s", path, stk_errno_text(errno, ebuf, sizeof ebuf));
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
    if (st.st_size == 0) {
        close(fd);
        return 0;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        rc = stk_fail(e == ENOMEM ? STK_ENOMEM : STK_EIO, "%s: cannot map %lld bytes: %s", path,
                      (long long)st.st_size, stk_errno_text(e, ebuf, sizeof ebuf));
        goto fail;
    }
    /* Advisory only: a failure here costs speed, not correctness. */
    (void)madvise(p, (size_t)st.st_size, MADV_WILLNEED);
    close(fd);
    out->data = p;
    out->size = (size_t)st.st_size;
    return 0;

fail:
    close(fd);
    return rc;
}

void stk_unmap_file(stk_mapped_file *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

/* ------------------------------------------------------------------------ */
/* URI query                                                                */
/* ------------------------------------------------------------------------ */

/* Append "a, b or c" (the allowed values) or "split, label" (keys) to buf. */
static void stk_join_words(char *buf, size_t n, const char *const *words, size_t count,
                           const char *last_sep)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        const char *sep = i == 0 ? "" : (i + 1 == count ? last_sep : ", ");
        int w = snprintf(buf + used, n - used, "%s%s", sep, words[i]);
        if (w < 0 || (size_t)w >= n - used)
            return;
        used += (size_t)w;
    }
}

static int stk_clamp_len(size_t n) { return n > 200 ? 200 : (int)n; }

int stk_query_parse(const char *uri, const char *what, const char *query,
                    stk_query_key *keys, size_t nkeys)
{
    const char *p = query;

    for (size_t i = 0; i < nkeys; i++)
        keys[i].value = -1;
    if (!query || !*query)
        return 0;

    for (;;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        stk_query_key *key = NULL;
        size_t klen, vlen;
        const char *val;

        if (len == 0)
            return stk_fail(STK_EINVAL, "%s: empty item in the query '%s' of URI '%s'", what,
                            query, uri);
        if (!eq)
            return stk_fail(STK_EINVAL, "%s: query item '%.*s' has no '=value' (URI '%s')", what,
                            stk_clamp_len(len), p, uri);
        klen = (size_t)(eq - p);
        val = eq + 1;
        vlen = len - klen - 1;
        for (size_t i = 0; i < nkeys; i++)
            if (strlen(keys[i].name) == klen && memcmp(keys[i].name, p, klen) == 0)
                key = &keys[i];
        if (!key) {
            char known[256];
            const char *names[8] = {0};
            size_t nn = nkeys < 8 ? nkeys : 8;
            for (size_t i = 0; i < nn; i++)
                names[i] = keys[i].name;
            stk_join_words(known, sizeof known, names, nn, " and ");
            if (nkeys == 0)
                return stk_fail(STK_EINVAL,
                                "%s: unknown query key '%.*s' in URI '%s' (this form takes no "
                                "query keys)",
                                what, stk_clamp_len(klen), p, uri);
            return stk_fail(STK_EINVAL,
                            "%s: unknown query key '%.*s' in URI '%s' (known keys: %s)", what,
                            stk_clamp_len(klen), p, uri, known);
        }
        if (key->value >= 0)
            return stk_fail(STK_EINVAL, "%s: query key '%s' given twice in URI '%s'", what,
                            key->name, uri);
        for (int v = 0; key->values[v]; v++)
            if (strlen(key->values[v]) == vlen && memcmp(key->values[v], val, vlen) == 0)
                key->value = v;
        if (key->value < 0) {
            char allowed[256];
            size_t nv = 0;
            while (key->values[nv])
                nv++;
            stk_join_words(allowed, sizeof allowed, key->values, nv, " or ");
            return stk_fail(STK_EINVAL,
                            "%s: unknown value '%.*s' for query key '%s' in URI '%s' "
                            "(expected %s)",
                            what, stk_clamp_len(vlen), val, key->name, uri, allowed);
        }
        if (!amp)
            return 0;
        p = amp + 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Paths                                                                    */
/* ------------------------------------------------------------------------ */

char *stk_path_join(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + (size_t)slash + nl + 1);
    if (!p) {
        stk_fail(STK_ENOMEM, "out of memory joining path %s/%s", dir, name);
        return NULL;
    }
    memcpy(p, dir, dl);
    if (slash)
        p[dl] = '/';
    memcpy(p + dl + (size_t)slash, name, nl + 1);
    return p;
}

bool stk_path_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool stk_path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool stk_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}
