/*
 * faultinject.h — fail the Nth allocation or I/O call the library makes.
 *
 * tests/faultinject.c defines __wrap_malloc, __wrap_pread, ... for the test
 * executable that links it with -Wl,--wrap=malloc,... (CMakeLists.txt): every
 * call the library objects make to a wrapped function goes through the
 * wrapper, which forwards to the real one unless it is the call chosen to
 * fail. The mechanism and the list of wrapped functions: docs/testing.md.
 *
 * Usage: fi_arm(n, persistent) counts every wrapped call from now on (all
 * threads) and makes the nth one fail (n = 0: count only), and with
 * `persistent` every later one too (SQLite's two modes: a single failure
 * tests recovery, persistent ones test the cleanup paths). fi_disarm()
 * stops counting and returns the number of calls counted. fi_fired() says
 * whether the nth call happened, fi_fired_what() names the function that
 * failed first.
 */
#ifndef STK_FAULTINJECT_H
#define STK_FAULTINJECT_H

#include <stdint.h>

void fi_arm(uint64_t fail_at, int persistent);
uint64_t fi_disarm(void);
int fi_fired(void);
/* Name of the function failed, and the address it was called from. */
const char *fi_fired_what(void);
void *fi_fired_caller(void);
/* Open file descriptors of this process (entries of /proc/self/fd). */
int fi_open_fds(void);
/* Mappings made through mmap by wrapped callers and not yet unmapped. */
long fi_live_maps(void);

#endif
