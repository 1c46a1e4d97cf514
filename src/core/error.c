/*
 * error.c — pinned error codes, their names, and the thread-local message.
 *
 * Codes are part of the ABI: a code's value and meaning never change, new
 * ones are appended. The detailed message is per thread (no global "last
 * error" that another thread could overwrite, unlike stb's
 * stbi_failure_reason); handles that must carry a message across threads keep
 * their own stk_errbuf.
 */
#include "core/error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char tls_msg[STK_ERRMSG_MAX];

static const struct {
    int code;
    const char *text;
} error_names[] = {
    {STK_OK, "STK_OK: success"},
    {STK_EINVAL, "STK_EINVAL: invalid argument"},
    {STK_ENOMEM, "STK_ENOMEM: out of memory"},
    {STK_EIO, "STK_EIO: input/output error"},
    {STK_ENOENT, "STK_ENOENT: no such file or directory"},
    {STK_EFORMAT, "STK_EFORMAT: malformed data file"},
    {STK_ESPEC, "STK_ESPEC: invalid pipeline spec"},
    {STK_ESTATE, "STK_ESTATE: call not valid in this state"},
    {STK_ESTOPPED, "STK_ESTOPPED: loader stopped"},
    {STK_ELIMIT, "STK_ELIMIT: input exceeds a safety limit"},
    {STK_EUNSUPPORTED, "STK_EUNSUPPORTED: unsupported input"},
    {STK_EDATA, "STK_EDATA: corrupt sample"},
    {STK_ETHREAD, "STK_ETHREAD: cannot create thread"},
    {STK_EEXHAUSTED, "STK_EEXHAUSTED: every batch buffer is lent out"},
    {STK_EINTR, "STK_EINTR: interrupted"},
    {STK_ETIMEDOUT, "STK_ETIMEDOUT: timed out"},
    {STK_ENETWORK, "STK_ENETWORK: a remote store failed"},
    {STK_EACCESS, "STK_EACCESS: a remote store refused the credentials"},
};

const char *stk_strerror(int code)
{
    for (size_t i = 0; i < sizeof error_names / sizeof error_names[0]; i++)
        if (error_names[i].code == code)
            return error_names[i].text;
    return "unknown error";
}

const char *stk_errmsg(void) { return tls_msg; }

int stk_failv(int code, const char *fmt, va_list ap)
{
    /* Formatted aside first: an argument may be stk_errmsg() itself (the
     * buffer being written), which vsnprintf must not read as it writes. */
    char msg[STK_ERRMSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(tls_msg, msg, sizeof msg);
    return code;
}

int stk_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    stk_failv(code, fmt, ap);
    va_end(ap);
    return code;
}

int stk_fail_prefix(int code, const char *fmt, ...)
{
    char prefix[STK_ERRMSG_MAX], old[STK_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tls_msg, sizeof old);
    /* prefix + ": " + old, truncated to the buffer (messages may be cut). */
    const char *rest = old[0] ? old : stk_strerror(code);
    size_t n = strlen(prefix);
    if (n > sizeof tls_msg - 1)
        n = sizeof tls_msg - 1;
    memcpy(tls_msg, prefix, n);
    size_t room = sizeof tls_msg - 1 - n;
    size_t m = strlen(rest) + 2;
    if (m > room)
        m = room;
    memcpy(tls_msg + n, ": ", m < 2 ? m : 2);
    if (m > 2)
        memcpy(tls_msg + n + 2, rest, m - 2);
    tls_msg[n + m] = '\0';
    return code;
}

void stk_errmsg_clear(void) { tls_msg[0] = '\0'; }

void stk_errmsg_set(const char *msg) { snprintf(tls_msg, sizeof tls_msg, "%s", msg); }

void stk_errbuf_capture(stk_errbuf *b, int code)
{
    b->code = code;
    snprintf(b->msg, sizeof b->msg, "%s", tls_msg[0] ? tls_msg : stk_strerror(code));
}
