/*
 * error.h — how stoker reports failures internally.
 *
 * Every failing path calls stk_fail(code, fmt, ...) once, where the facts are
 * known (file, record, reason). It formats the message into the calling
 * thread's buffer (what stk_errmsg() returns) and returns `code`, so the
 * idiom is `return stk_fail(STK_EFORMAT, "%s: record %llu: ...", ...)`.
 * Objects that outlive the call (a loader whose worker failed) copy the
 * message and code into their own stk_errbuf with stk_errbuf_capture.
 */
#ifndef STK_CORE_ERROR_H
#define STK_CORE_ERROR_H

#include "stoker/stoker.h"

#include <stdarg.h>

#define STK_ERRMSG_MAX 1024

/* Set the thread-local message and return `code`. */
int stk_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int stk_failv(int code, const char *fmt, va_list ap);
/* Prefix the current thread-local message with "prefix: " (keeps the code). */
int stk_fail_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clear the thread-local message. */
void stk_errmsg_clear(void);
/* Replace the thread-local message with `msg` verbatim. */
void stk_errmsg_set(const char *msg);

/* A handle's copy of a message. */
typedef struct stk_errbuf {
    int code;
    char msg[STK_ERRMSG_MAX];
} stk_errbuf;

/* Copy the calling thread's current message and `code` into *b. */
void stk_errbuf_capture(stk_errbuf *b, int code);

#endif
