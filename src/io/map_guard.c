/*
 * map_guard.c — a SIGBUS handler that turns pages lost from a truncated,
 * mapped file into zero pages, and the registry of mappings it may touch.
 *
 * The problem. The .stk reader maps raw shards and hands out pointers into
 * the mapping: the worker's crop and normalize read the pixels in place.
 * When another process truncates the file, the kernel drops the pages past
 * the new end from every mapping, and the next access to one raises SIGBUS.
 * With the default disposition that kills the process — a loader with
 * on_error=skip included.
 *
 * The options, and why this one.
 *  - Check the file size (fstat) before each access: racy on its own — the
 *    truncation can land between the check and the access, or while the
 *    consumer is still reading the pixels — and a system call per record.
 *  - Copy each record out of the mapping inside a guarded region (a
 *    per-thread sigsetjmp that the handler longjmps to): safe, but it gives
 *    up zero copy. docs/benchmarks.md measures mmap zero copy at ~45 GB/s
 *    against one copy per record; the copy would cost the figures the
 *    mapping exists for, and the bytes handed out are consumed after the
 *    reader returns, so the guard would also have to cover the consumer.
 *  - Fall back to pread when the size changed: needs the size check first,
 *    so it has the same race.
 *  - What is done here: the handler recognises a fault inside a registered
 *    mapping, replaces the pages from the faulting one to the end of the
 *    mapping with anonymous zero pages (MAP_FIXED), lowers the region's
 *    "valid" mark to the file's new size (fstat on a descriptor the guard
 *    keeps; the faulting page without one), and returns; the faulting load
 *    restarts and reads zeros. Nothing crashes, wherever the access was
 *    (reader, decoder, an op in the worker). The reader makes the result
 *    honest: after a record's bytes have been used, it checks that they and
 *    the record's index entries lay below the valid mark, and otherwise
 *    fails that read with STK_EDATA naming the shard and record (skippable
 *    by policy). The check is one atomic load while nothing was lost. Pages
 *    from the fault on are all past the new end of the file (truncation
 *    removes a suffix), so everything the mark keeps is real.
 *  - A cut raises SIGBUS only on pages wholly past the new end: the page
 *    holding the new end is zero-filled past it, silently, and a reader
 *    may use such a tail before anyone faults. So the check after use
 *    first probes the mapping's last 8 bytes (stk_map_guard_check): after
 *    any cut below the last page that read faults and the handler records
 *    the exact new size (fstat on a descriptor the guard keeps); a cut
 *    inside the last page changes those bytes (zero-filled), which sends
 *    the check to fstat. Only if they were zeros to begin with does a read
 *    that reaches the last page always ask the file. Linux's truncation
 *    (truncate_pagecache) unmaps the pages past a cut before it zeroes the
 *    partial page, so a reader that saw zeros there faults on the probe.
 *
 * The handler. Installed when the first region is registered, and installed
 * again at a later registration if someone replaced it meanwhile (the one
 * found is chained to), with SA_SIGINFO | SA_ONSTACK | SA_NODEFER. A program
 * that installs its own SIGBUS handler while mapped datasets are open should
 * chain to the previous one, or those datasets lose the guard. It only reads the registry (atomics) and makes
 * one mmap system call: no locks, no allocation. mmap is not on POSIX's
 * async-signal-safe list, but on Linux it is a plain system call wrapper and
 * this is a synchronous fault in the faulting thread, not an asynchronous
 * signal. A SIGBUS that is not a fault inside a registered region (another
 * library's mapping, kill -BUS) goes to the handler that was installed
 * before: its function is called, or, if it was SIG_DFL/SIG_IGN, that
 * disposition is restored and the fault repeats (or the signal is raised
 * again), so the process dies as it would have without stoker.
 *
 * The registry. Fixed chunks of slots, allocated under a mutex and never
 * freed, published with release stores; a slot is free when its base is 0.
 * The handler scans the published chunks (a fault is rare; the scan is
 * linear in the number of open mappings). Removing a region clears its base
 * before the owner unmaps it.
 */
#include "io/map_guard.h"

#include "core/error.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct stk_map_guard {
    _Atomic uintptr_t base; /* mapping start; 0 = free slot */
    _Atomic size_t size;    /* mapping length */
    _Atomic uint64_t valid; /* bytes still the file's; lowered by the handler / refresh */
    _Atomic int fd;         /* owned duplicate of the file's descriptor, or -1 */
    uint64_t tail;          /* the mapping's last (up to) 8 bytes at registration;
                               written before base is published, then read-only */
    uint64_t last_page;     /* offset of the mapping's last system page; idem */
};

/* The mapping's last min(8, size) bytes (may fault: the handler is in
 * place). One load; the asm barrier keeps the compiler from moving it
 * before the caller's reads or dropping it. */
static uint64_t guard_tail(uintptr_t base, size_t size)
{
    uint64_t t = 0;
    size_t n = size < 8 ? size : 8;
    __asm__ volatile("" ::: "memory");
    memcpy(&t, (const void *)(base + size - n), n);
    __asm__ volatile("" ::: "memory");
    return t;
}

/* Lower g->valid to `v` if it is higher (from the handler too: lock-free). */
static uint64_t guard_lower(stk_map_guard *g, uint64_t v)
{
    uint64_t cur = atomic_load(&g->valid);
    while (v < cur && !atomic_compare_exchange_weak(&g->valid, &cur, v))
        ;
    return v < cur ? v : cur;
}

#define GUARD_CHUNK 256
#define GUARD_CHUNKS 1024 /* 262 144 mappings at once */

/* Published chunks (release store, never freed); written under guard_mu. */
static _Atomic(stk_map_guard *) guard_chunks[GUARD_CHUNKS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction guard_prev; /* the handler before ours; written under guard_mu */
static uintptr_t guard_page = 4096; /* written under guard_mu before the first region */

/* fork(): a mapping opened or closed by another thread at that moment
 * would leave guard_mu locked in the child, where every later open or
 * close of a mapped dataset would hang. guard_mu is a leaf (nothing else
 * is locked under it), so taking it before the fork cannot deadlock. */
static void guard_fork_prepare(void) { pthread_mutex_lock(&guard_mu); }
static void guard_fork_parent(void) { pthread_mutex_unlock(&guard_mu); }
static void guard_fork_child(void) { pthread_mutex_init(&guard_mu, NULL); }
__attribute__((constructor)) static void guard_fork_register(void)
{
    pthread_atfork(guard_fork_prepare, guard_fork_parent, guard_fork_child);
}

static void guard_chain(int sig, siginfo_t *si, void *ctx)
{
    if ((guard_prev.sa_flags & SA_SIGINFO) && guard_prev.sa_sigaction) {
        guard_prev.sa_sigaction(sig, si, ctx);
        return;
    }
    if (guard_prev.sa_handler != SIG_DFL && guard_prev.sa_handler != SIG_IGN) {
        guard_prev.sa_handler(sig);
        return;
    }
    /* Default (or ignored, which the kernel does not honour for a fault):
     * restore it; a fault repeats on return, a sent signal is raised again. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (si == NULL || si->si_code <= 0)
        raise(sig);
}

static void guard_on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    int saved = errno;
    uintptr_t a = si ? (uintptr_t)si->si_addr : 0;
    if (a && si->si_code > 0) {
        for (size_t c = 0; c < GUARD_CHUNKS; c++) {
            stk_map_guard *chunk = atomic_load_explicit(&guard_chunks[c], memory_order_acquire);
            if (!chunk)
                break;
            for (size_t i = 0; i < GUARD_CHUNK; i++) {
                stk_map_guard *g = &chunk[i];
                uintptr_t base = atomic_load_explicit(&g->base, memory_order_acquire);
                size_t size = atomic_load_explicit(&g->size, memory_order_relaxed);
                if (!base || a < base || a - base >= size)
                    continue;
                uintptr_t page = a & ~(guard_page - 1);
                uint64_t off = page - base;
                struct stat st; /* fstat is async-signal-safe */
                int fd = atomic_load_explicit(&g->fd, memory_order_relaxed);
                if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 0 &&
                    (uint64_t)st.st_size < off)
                    off = (uint64_t)st.st_size;
                guard_lower(g, off);
                void *p = mmap((void *)page, base + size - page, PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
                errno = saved;
                if (p != MAP_FAILED)
                    return; /* the load restarts and reads zeros */
                goto chain;
            }
        }
    }
chain:
    errno = saved;
    guard_chain(sig, si, ctx);
}

/* Make ours the SIGBUS handler unless it already is, chaining to the one
 * found. Checked at every registration, under guard_mu: a handler installed
 * after ours (a test harness, a runtime) that did not chain would otherwise
 * switch the guard off for every dataset opened later. */
static bool guard_install_locked(void)
{
    struct sigaction cur, sa;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0)
        guard_page = (uintptr_t)ps;
    if (sigaction(SIGBUS, NULL, &cur) != 0)
        return false;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == guard_on_sigbus)
        return true;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    guard_prev = cur;
    return sigaction(SIGBUS, &sa, NULL) == 0;
}

int stk_map_guard_add(const void *base, size_t size, int fd, stk_map_guard **out)
{
    stk_map_guard *found = NULL;
    int dup_fd = -1;
    *out = NULL;
    if (fd >= 0 && (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return stk_fail(STK_EIO, "cannot duplicate a mapped file's descriptor: %s",
                        strerror(errno));
    pthread_mutex_lock(&guard_mu);
    if (!guard_install_locked()) {
        pthread_mutex_unlock(&guard_mu);
        if (dup_fd >= 0)
            close(dup_fd);
        return stk_fail(STK_EIO, "cannot install the SIGBUS handler that guards mapped files");
    }
    for (size_t c = 0; c < GUARD_CHUNKS && !found; c++) {
        stk_map_guard *chunk = atomic_load_explicit(&guard_chunks[c], memory_order_relaxed);
        if (!chunk) {
            chunk = calloc(GUARD_CHUNK, sizeof *chunk);
            if (!chunk)
                break;
            for (size_t i = 0; i < GUARD_CHUNK; i++)
                atomic_init(&chunk[i].fd, -1);
            atomic_store_explicit(&guard_chunks[c], chunk, memory_order_release);
        }
        for (size_t i = 0; i < GUARD_CHUNK && !found; i++)
            if (!atomic_load_explicit(&chunk[i].base, memory_order_relaxed))
                found = &chunk[i];
    }
    if (found) {
        atomic_store_explicit(&found->size, size, memory_order_relaxed);
        atomic_store_explicit(&found->valid, (uint64_t)size, memory_order_relaxed);
        atomic_store_explicit(&found->fd, dup_fd, memory_order_relaxed);
        found->last_page = size ? (size - 1) / guard_page * guard_page : 0;
        atomic_store_explicit(&found->base, (uintptr_t)base, memory_order_release);
    }
    pthread_mutex_unlock(&guard_mu);
    /* Registered first, so a file already cut reads zeros here, no SIGBUS. */
    if (found && size)
        found->tail = guard_tail((uintptr_t)base, size);
    if (!found) {
        if (dup_fd >= 0)
            close(dup_fd);
        return stk_fail(STK_ENOMEM, "out of memory (or over %d mapped files) guarding a mapping",
                        GUARD_CHUNK * GUARD_CHUNKS);
    }
    *out = found;
    return 0;
}

void stk_map_guard_remove(stk_map_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&guard_mu);
    atomic_store_explicit(&g->base, 0, memory_order_release);
    int fd = atomic_exchange_explicit(&g->fd, -1, memory_order_relaxed);
    pthread_mutex_unlock(&guard_mu);
    if (fd >= 0)
        close(fd);
}

uint64_t stk_map_guard_refresh(stk_map_guard *g)
{
    struct stat st;
    int fd = atomic_load_explicit(&g->fd, memory_order_relaxed);
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 0)
        return guard_lower(g, (uint64_t)st.st_size);
    return stk_map_guard_valid(g);
}

uint64_t stk_map_guard_valid(const stk_map_guard *g)
{
    return atomic_load_explicit(&((stk_map_guard *)g)->valid, memory_order_acquire);
}

uint64_t stk_map_guard_check(stk_map_guard *g, uint64_t end)
{
    uintptr_t base = atomic_load_explicit(&g->base, memory_order_relaxed);
    size_t size = atomic_load_explicit(&g->size, memory_order_relaxed);
    if (!size)
        return 0;
    /* The caller's reads of the mapping come before the probe. */
    atomic_thread_fence(memory_order_acquire);
    uint64_t t = guard_tail(base, size);
    uint64_t v = stk_map_guard_valid(g);
    if (t != g->tail || (g->tail == 0 && end > g->last_page))
        v = stk_map_guard_refresh(g);
    return v;
}

bool stk_map_guard_intact(stk_map_guard *g, uint64_t offset, uint64_t len)
{
    uint64_t v = stk_map_guard_check(g, offset + len);
    return offset <= v && len <= v - offset;
}
