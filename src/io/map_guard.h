/*
 * map_guard.h — file mappings that survive the file shrinking under them
 * (internal).
 *
 * A reader that hands out pointers into a shared file mapping (zero copy)
 * cannot stop another process from truncating the file: the kernel then
 * raises SIGBUS on the first access to a lost page, which kills the process
 * whatever the caller's error policy. A mapping registered here turns that
 * fault into data the reader can reason about: the lost pages read as zeros
 * from then on, and the region remembers how much of it is still the
 * file's. The reader then checks, after the bytes of a record have been
 * used, that they all lay below that mark (stk_map_guard_intact) and
 * otherwise fails the read with STK_EDATA naming the file and record, so
 * zeros are never passed off as data. See src/io/map_guard.c for the
 * mechanism and why it was chosen over a copy or a size check.
 *
 * Thread safety: every function may be called from any thread; a region
 * may be checked by many threads while another registers or removes other
 * regions. A region must not be removed while a thread may still touch its
 * memory (the owner's close, like munmap).
 */
#ifndef STK_IO_MAP_GUARD_H
#define STK_IO_MAP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stk_map_guard stk_map_guard;

/* Register the mapping [base, base + size) (page-aligned base, as mmap
 * returns it) of the file open as `fd` (or -1): the guard keeps a duplicate
 * of fd to learn the file's exact new size. 0 with the region in *out, or
 * STK_ENOMEM / STK_EIO via stk_fail (*out NULL: the caller must then not
 * rely on the guard). Installs the process's SIGBUS handler on first use. */
int stk_map_guard_add(const void *base, size_t size, int fd, stk_map_guard **out);
/* Forget a region before its mapping is unmapped. NULL is a no-op. */
void stk_map_guard_remove(stk_map_guard *g);
/* Bytes from the start of the mapping known to hold the file: the mapping's
 * size until a fault, then the file's size found then (or, without an fd,
 * the offset of the first page found lost). */
uint64_t stk_map_guard_valid(const stk_map_guard *g);
/* Ask the file for its size now (fstat) and lower the valid mark to it;
 * returns the mark. For bytes in the mapping's last page: a file cut inside
 * its last page raises no SIGBUS (the kernel zero-fills a page's tail past
 * the end), so only this can see it. A system call: for the rare reads that
 * touch the last page, not for every read. */
uint64_t stk_map_guard_refresh(stk_map_guard *g);
/* Call after reading bytes of the mapping: the bytes from its start that
 * were still the file's when they were read. It first reads the mapping's
 * last 8 bytes (the probe): a cut anywhere below the last page makes that
 * read fault, and the handler records the file's exact new size; a cut
 * inside the last page changes them (zero-filled), which sends it to ask
 * the file (stk_map_guard_refresh). If those bytes were zeros to begin
 * with, a cut inside the last page cannot change them, so it also asks the
 * file when `end` (one past the last byte the caller used) reaches the
 * last page. Common case: one 8-byte load, one compare, one atomic load. */
uint64_t stk_map_guard_check(stk_map_guard *g, uint64_t end);
/* stk_map_guard_check(g, offset + len) covers [offset, offset + len). */
bool stk_map_guard_intact(stk_map_guard *g, uint64_t offset, uint64_t len);

#endif
