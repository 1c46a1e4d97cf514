/*
 * stoker.h — the whole public API of libstoker, as an umbrella over the
 * topical headers, each of which may also be included alone:
 *
 *   stoker/base.h     export macro, version, error codes, stk_free
 *   stoker/remote.h   http(s):// and s3:// datasets: cache, prefetch, I/O stats
 *   stoker/dataset.h  datasets: open, read, fields, callback datasets
 *   stoker/loader.h   sampler (epoch order) and loader (threads, batches, state)
 *   stoker/spec.h     the pipeline spec language and the op table
 *   stoker/tools.h    pack, verify, shard writer, preview, doctor
 *   stoker/op.h       user-defined ops (the plugin ABI; not included here)
 *
 * If a function or type does not appear in these headers, it is not a
 * published API. Everything exported carries the `stk_` / `STK_` prefix.
 *
 * The objects, and how they relate:
 *
 *   stk_dataset   an opened source of samples (CIFAR binary, IDX, an in-memory
 *                 array...). Random access by index. Immutable once opened, so
 *                 it may be shared by any number of threads and loaders.
 *   stk_sampler   the epoch order: a seeded permutation of [0, N) sharded by
 *                 rank/world_size, evaluated at any position in O(1) memory.
 *   stk_loader    worker threads that read, augment and batch the samples of a
 *                 dataset through a pipeline spec into a bounded pool of batch
 *                 buffers, delivered in order and lent to the caller.
 *   stk_batch     a lent, read-only view of one finished batch.
 *
 * Errors. Functions that can fail return an int: >= 0 on success, one of the
 * negative STK_E* codes on failure. The codes are pinned: they never change
 * value. stk_strerror() names a code; stk_errmsg() gives the detailed message
 * of the last failure on the calling thread (file, record, reason), and a
 * loader also keeps the message of the failure that stopped it
 * (stk_loader_errmsg()).
 *
 * Ownership is stated on every function: "lent" memory stays owned by stoker
 * and is valid only for the stated time; do not free or modify it. Memory a
 * function gives to the caller is freed with stk_free().
 *
 * ABI (docs/abi.md). Within a major version the size and layout of every
 * public struct stay fixed: each ends in reserved space (`reserved_`), and a
 * new field is carved out of it. In structs the caller fills (options,
 * states) the reserved words must be zero (zero-initialise the struct: `=
 * {0}` or memset) and a non-zero word is refused with STK_EINVAL, so a
 * program built against a newer header fails clearly on an older library
 * instead of having a new option ignored; a new field's zero value always
 * means the old behaviour. In structs the library fills (info, results,
 * stats, batches) the reserved words are zeroed. Codes and enum values are
 * only appended.
 *
 * Thread safety. Every function may be called from any thread; a paragraph
 * before each object's functions says which calls may run at the same time
 * on the same object, and a function's own comment says so where it differs.
 * Calls on different objects never interfere: there is no global state
 * except the per-thread error message and, for mapped .stk shards, a
 * process-wide SIGBUS handler with a locked registry (docs/datasets.md).
 * No stoker function is async-signal-safe: none may be called from a signal
 * handler. stk_version_number, stk_version_string, stk_strerror and
 * stk_errmsg (which reads the calling thread's own message) are safe from
 * any number of threads at once.
 */
#ifndef STOKER_STOKER_H
#define STOKER_STOKER_H

#include "stoker/base.h"
#include "stoker/remote.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/spec.h"
#include "stoker/tools.h"

#endif /* STOKER_STOKER_H */
