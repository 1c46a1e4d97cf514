/*
 * reader_util.c — URI query parsing and path helpers shared by the dataset
 * readers.
 *
 * The query parser is the one every reader uses (the .stk reader's
 * included): it keeps no state outside the call (no strtok), so any number
 * of threads may open datasets at once, and it refuses a repeated key. The
 * file mapping these readers share moved to src/io/source.c.
 */
#include "format/reader_util.h"

#include "core/error.h"

#include "core/util.h"
#include "io/remote.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int stk_query_names(const char *uri, const char *what, const char *query,
                    const char *const *keys, char **values, size_t n)
{
    const char *p = query;
    for (size_t i = 0; i < n; i++)
        values[i] = NULL;
    if (!query || !*query)
        return 0;
    for (;;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t i, klen;
        if (!eq || eq == p + len - 1)
            return stk_fail(STK_EINVAL, "%s: query item '%.*s' needs 'key=value' (URI '%s')", what,
                            stk_clamp_len(len), p, uri);
        klen = (size_t)(eq - p);
        for (i = 0; i < n; i++)
            if (strlen(keys[i]) == klen && memcmp(keys[i], p, klen) == 0)
                break;
        if (i == n) {
            char known[256];
            stk_join_words(known, sizeof known, keys, n < 8 ? n : 8, " and ");
            return stk_fail(STK_EINVAL, "%s: unknown query key '%.*s' in URI '%s' (known keys: %s)",
                            what, stk_clamp_len(klen), p, uri, known);
        }
        if (values[i])
            return stk_fail(STK_EINVAL, "%s: query key '%s' given twice in URI '%s'", what,
                            keys[i], uri);
        size_t vlen = len - klen - 1;
        if (!(values[i] = malloc(vlen + 1)))
            return stk_fail(STK_ENOMEM, "out of memory parsing URI '%s'", uri);
        memcpy(values[i], eq + 1, vlen);
        values[i][vlen] = '\0';
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

const char *stk_path_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int stk_dir_has_any(const char *dir, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = stk_path_join(dir, names[i]);
        int r;
        if (!p)
            return STK_ENOMEM;
        r = stk_path_exists(p);
        free(p);
        if (r)
            return r;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Listing the files of a multi-file dataset                                */
/* ------------------------------------------------------------------------ */

static int stk_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

bool stk_path_has_glob(const char *p) { return strpbrk(p, "*?[") != NULL; }

bool stk_path_has_suffix(const char *name, const char *const *suffixes)
{
    size_t n = strlen(name);
    for (; *suffixes; suffixes++) {
        size_t k = strlen(*suffixes);
        if (n > k && !strcmp(name + n - k, *suffixes))
            return true;
    }
    return false;
}

int stk_file_list(const char *path, const char *const *suffixes, const stk_file_list_words *words,
                  char ***out, uint32_t *count)
{
    char **list = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    glob_t g;
    int globbed = 0; /* g holds a glob's result: globfree on the way out */
    *out = NULL;
    *count = 0;
    /* An object store: brace patterns and s3:// prefixes (io/remote.h). */
    if (stk_is_remote(path))
        return stk_remote_list(path, suffixes, out, count);
#define PUSH(s)                                                                    \
    do {                                                                           \
        if (n + 2 > cap) {                                                         \
            cap = cap ? cap * 2 : 16;                                              \
            char **grown = realloc(list, cap * sizeof *list);                      \
            if (!grown) {                                                          \
                rc = stk_fail(STK_ENOMEM, "out of memory");                        \
                goto fail;                                                         \
            }                                                                      \
            list = grown;                                                          \
        }                                                                          \
        if (!(list[n] = (s))) {                                                    \
            rc = STK_ENOMEM;                                                       \
            goto fail;                                                             \
        }                                                                          \
        list[++n] = NULL;                                                          \
    } while (0)
    struct stat st;
    if (stk_path_has_glob(path) && stat(path, &st) != 0) {
        int grc = glob(path, 0, NULL, &g);
        globbed = 1; /* glob leaves g for globfree on error too */
        if (grc == GLOB_NOMATCH) {
            rc = stk_fail(STK_ENOENT, "%s: no %s matches this pattern", path, words->file);
            goto fail;
        }
        if (grc != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot expand the pattern", path);
            goto fail;
        }
        for (size_t i = 0; i < g.gl_pathc; i++)
            PUSH(stk_strdup(g.gl_pathv[i]));
        globfree(&g);
        globbed = 0;
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) {
            rc = stk_fail(STK_EIO, "%s: cannot list: %s", path, strerror(errno));
            goto fail;
        }
        struct dirent *e;
        /* NULL with errno set is a read error, not the end of the list. */
        for (errno = 0; (e = readdir(d)); errno = 0) {
            if (!stk_path_has_suffix(e->d_name, suffixes))
                continue;
            char *p = malloc(strlen(path) + strlen(e->d_name) + 2);
            if (p)
                sprintf(p, "%s/%s", path, e->d_name);
            if (!p) {
                closedir(d);
                rc = stk_fail(STK_ENOMEM, "out of memory");
                goto fail;
            }
            if (n + 2 > cap) {
                cap = cap ? cap * 2 : 16;
                char **grown = realloc(list, cap * sizeof *list);
                if (!grown) {
                    free(p);
                    closedir(d);
                    rc = stk_fail(STK_ENOMEM, "out of memory");
                    goto fail;
                }
                list = grown;
            }
            list[n++] = p;
            list[n] = NULL;
        }
        if (errno != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot list: %s", path, strerror(errno));
            closedir(d);
            goto fail;
        }
        closedir(d);
        if (n == 0) {
            rc = stk_fail(STK_ENOENT, "%s: no %s in this directory", path, words->files);
            goto fail;
        }
    } else if (stat(path, &st) == 0) {
        PUSH(stk_strdup(path));
    } else {
        rc = stk_fail(STK_ENOENT, "%s: no such %s", path, words->file_or_dir);
        goto fail;
    }
#undef PUSH
    qsort(list, n, sizeof *list, stk_cmp_str);
    *out = list;
    *count = (uint32_t)n;
    return 0;
fail:
    if (globbed)
        globfree(&g);
    for (size_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
    return rc;
}

void stk_file_list_free(char **list, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

uint32_t stk_num_classes(const int64_t *labels, uint64_t n)
{
    int64_t maxl = -1;
    for (uint64_t i = 0; i < n; i++) {
        if (labels[i] < 0)
            return 0;
        if (labels[i] > maxl)
            maxl = labels[i];
    }
    return maxl >= 0 && maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
}
