/*
 * jpeg_sync.c — crops of JPEGs without restart markers, decoded from the
 * MCUs that cover them: a sync index per file, and windows synthesised
 * from it.
 *
 * Why. jpeg_window.c decodes a crop of a restart-marked JPEG from only the
 * restart intervals that cover it, which takes most of the Huffman decoding
 * out of a random resized crop. Most users' JPEGs have no restart markers,
 * and libjpeg must then entropy-decode every MCU above the crop and beside
 * it: Huffman decoding is sequential, because a block's code starts where
 * the previous one ended and its DC coefficient is coded as the difference
 * to the previous block's.
 *
 * The sync index. Those two facts are all a decoder needs to start
 * anywhere: the bit where an MCU begins and the DC predictors before it.
 * A crop of a file walks its scan with a Huffman skipper (symbols decoded
 * and dropped: no coefficients stored, no IDCT) down to the MCU row the
 * crop needs, and writes down, for every 4th MCU of every MCU row (a sync
 * point), the byte and bit where it begins and the DC predictor of each
 * component; a later crop that reaches further continues the walk from
 * the last point, and the point after the last MCU marks the end of the
 * scan. 16 bytes a point: 10 KB for a 420x370 4:4:4 photo, 3 KB for a
 * 500x375 4:2:0 one. The index of a file lives in a process-wide table
 * keyed by the XXH3-128 hash of its bytes (so any reader, any dataset,
 * any copy of the same bytes finds it; a different file is a different
 * key), bounded by STOKER_JPEG_INDEX_MB (default: 1/32 of the machine's
 * memory; 0 turns sync windows off). When the budget is spent, files not
 * yet indexed decode the ordinary way. Points are written only past the
 * published count (`known`, a release store after the walk, under the
 * file's `grow` lock) and never change; entries are never freed, so a
 * reader needs the table's lock only to find one.
 *
 * The window. A crop then becomes, as for restart-marked files, a smaller
 * JPEG of the MCUs that cover it (with jpeg_window.c's margin of one MCU
 * for chroma upsampling), rounded out to sync points, with the window's
 * size in its frame header. Its scan is synthesised from the original:
 * each window row's bits, from its first sync point to the one past the
 * window, copied bit-shifted (0xFF bytes unstuffed on the way in and
 * stuffed on the way out) right after the previous row's, and the first
 * block of each component re-coded so that its DC difference is taken
 * from what now precedes it: zero at the start, else the DC values at the
 * end of the previous window row (the sync point past it holds them). No
 * restart markers: libjpeg-turbo decodes a scan with restart intervals on
 * its slow Huffman path, which cost more than the markers saved. The
 * result is the same coefficients in a valid baseline JPEG, so libjpeg
 * decodes the same pixels (test_codec.c checks every sampling, every
 * scale and many crops against full decodes, bit for bit).
 *
 * What qualifies: what jpeg_window.c takes (baseline or extended
 * sequential Huffman, one scan with every component, 1 or 3 components),
 * but without a DRI, and with DC tables that code every difference
 * category 0-11 (the standard tables do; a re-coded DC value needs its
 * category). A file whose walk finds anything wrong (a bad code, a marker
 * or the end of the data before the last MCU) is remembered as declined
 * and decodes the ordinary way, which reports the damage with libjpeg's
 * reason where libjpeg would. Like the restart window, this code never
 * decides that a file is bad.
 *
 * Cost. The walk costs about what libjpeg's entropy decoding of the same
 * MCUs costs (about 0.9 ms for a whole 106 KB photo here), once per file
 * and process; each window then costs hashing the file and a bit-shifted
 * copy of the covered rows (about 40 us). What it saves, from a file's
 * second crop on, is libjpeg's Huffman decoding of every MCU above and
 * beside the crop (docs/codec.md, docs/benchmarks.md).
 *
 * Locking: `tab.mu` guards the table (slots, count) and the counters
 * but `windows` (atomic: one lock a crop is enough, the lookup's);
 * an entry's `grow` serialises the walks that extend it; its points below
 * `known` are read without a lock.
 */
#include "codec/codec_internal.h"

#include "core/error.h"
#include "stoker/stoker.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SYNC_EVERY 4u           /* MCUs between sync points in a row */
#define LOOK 9                  /* Huffman lookahead bits */
#define SKIP_LOOK 11            /* lookahead bits of the AC skip table */
#define MAX_SCAN_BYTES (1u << 28) /* bit positions are 32-bit */

/* ------------------------------------------------------------------------ */
/* Huffman tables                                                            */
/* ------------------------------------------------------------------------ */

typedef struct htab {
    uint16_t look[1 << LOOK]; /* (length << 8) | symbol; 0: longer than LOOK */
    /* AC tables: a code and its extra bits at once, for skipping: (1 <<
     * 15 when the extra bits are included) | (bits << 8) | symbol; 0:
     * code longer than SKIP_LOOK */
    uint16_t skip[1 << SKIP_LOOK];
    int32_t maxcode[17];      /* largest code of each length, -1 if none */
    int32_t valoff[17];       /* symbol index = valoff[l] + code */
    uint8_t vals[256];
    uint16_t nvals;
    uint16_t enc_code[16];    /* DC tables: the code of category s ... */
    uint8_t enc_len[16];      /* ... and its length (0: not in the table) */
    uint8_t defined;
} htab;

/* Build from a DHT's 16 counts and its symbols. 0, or -1 when the counts
 * do not describe a prefix code. */
static int htab_build(htab *t, const uint8_t bits[16], const uint8_t *vals, unsigned nvals,
                      bool ac)
{
    memset(t, 0, sizeof *t);
    memcpy(t->vals, vals, nvals);
    t->nvals = (uint16_t)nvals;
    uint32_t code = 0;
    unsigned k = 0;
    for (unsigned l = 1; l <= 16; l++) {
        t->valoff[l] = (int32_t)k - (int32_t)code;
        for (unsigned i = 0; i < bits[l - 1]; i++, k++, code++) {
            if (code >= (1u << l))
                return -1;
            uint8_t sym = vals[k];
            if (sym < 16 && !t->enc_len[sym]) {
                t->enc_code[sym] = (uint16_t)code;
                t->enc_len[sym] = (uint8_t)l;
            }
            if (l <= LOOK) {
                unsigned base = code << (LOOK - l), span = 1u << (LOOK - l);
                for (unsigned j = 0; j < span; j++)
                    t->look[base + j] = (uint16_t)(l << 8 | sym);
            }
            if (ac && l <= SKIP_LOOK) { /* (only the walk of AC codes uses it) */
                unsigned base = code << (SKIP_LOOK - l), span = 1u << (SKIP_LOOK - l);
                unsigned extra = sym & 15, all = l + extra <= SKIP_LOOK;
                for (unsigned j = 0; j < span; j++)
                    t->skip[base + j] =
                        (uint16_t)(all << 15 | (all ? l + extra : l) << 8 | sym);
            }
        }
        t->maxcode[l] = bits[l - 1] ? (int32_t)code - 1 : -1;
        code <<= 1;
    }
    t->defined = 1;
    return 0;
}

/* The scan's components: blocks per MCU and tables, in scan order. */
typedef struct scan_info {
    unsigned ncomp;
    unsigned blocks[3];     /* blocks of component i in one MCU */
    const htab *dc[3], *ac[3];
    htab tabs[2][4];        /* [DC=0 / AC=1][slot] */
    unsigned cols, rows;    /* MCUs (the window's span has the same) */
} scan_info;

/* Tables and sampling from the layout, the MCU counts from the window's
 * span. 1, or 0 when the file does not qualify. */
static int scan_setup(const uint8_t *d, const stk_jpeg_layout *h, const stk_jpeg_span *sp,
                      scan_info *si)
{
    for (unsigned c = 0; c < 2; c++) /* (the tables are big: built only when defined) */
        for (unsigned t = 0; t < 4; t++)
            si->tabs[c][t].defined = 0;
    memset(si->blocks, 0, sizeof si->blocks);
    for (unsigned i = 0; i < h->nkeep; i++) {
        const uint8_t *seg = d + h->keep[i].at;
        if (seg[1] != 0xC4)
            continue;
        size_t len = h->keep[i].len, p = 4;
        while (p < len) {
            if (p + 17 > len)
                return 0;
            unsigned tc = seg[p] >> 4, th = seg[p] & 15, total = 0;
            if (tc > 1 || th > 3)
                return 0;
            const uint8_t *bits = seg + p + 1;
            for (unsigned l = 0; l < 16; l++)
                total += bits[l];
            if (total > 256 || p + 17 + total > len)
                return 0;
            if (htab_build(&si->tabs[tc][th], bits, seg + p + 17, total, tc == 1) < 0)
                return 0;
            p += 17 + total;
        }
    }
    const uint8_t *sof = d + h->sof_at + 4, *sos = d + h->sos_at + 4;
    si->ncomp = h->ncomp;
    for (unsigned i = 0; i < h->ncomp; i++) {
        unsigned id = sos[1 + 2 * i], sel = sos[2 + 2 * i], c;
        for (c = 0; c < h->ncomp; c++)
            if (sof[6 + 3 * c] == id)
                break;
        if (c == h->ncomp || (sel >> 4) > 3 || (sel & 15) > 3)
            return 0;
        unsigned hs = sof[6 + 3 * c + 1] >> 4, vs = sof[6 + 3 * c + 1] & 15;
        si->blocks[i] = h->ncomp == 1 ? 1 : hs * vs;
        si->dc[i] = &si->tabs[0][sel >> 4];
        si->ac[i] = &si->tabs[1][sel & 15];
        if (!si->dc[i]->defined || !si->ac[i]->defined)
            return 0;
        /* A re-coded DC value may need any category: the table must have
         * all of 0-11 (the standard tables do). */
        for (unsigned s = 0; s <= 11; s++)
            if (!si->dc[i]->enc_len[s])
                return 0;
    }
    if (si->blocks[0] + si->blocks[1] + si->blocks[2] > 10) /* an MCU holds at most 10 */
        return 0;
    si->cols = sp->cols;
    si->rows = sp->rows;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Reading and writing entropy-coded bits                                    */
/* ------------------------------------------------------------------------ */

/* Bits of a scan, MSB first, with stuffed zero bytes taken out. Past the
 * data (a marker, or the end of the buffer) it reads zeros and counts
 * them, as libjpeg does. `ring` remembers where each of the last 16 data
 * bytes loaded sits in the file, so a position can be written down. */
typedef struct bitrd {
    const uint8_t *d;
    size_t n, p;
    uint64_t acc; /* nb valid bits at the top */
    int nb;
    uint64_t loaded, zeros; /* data bytes loaded; of which zeros past the data */
    uint32_t ring[16];
} bitrd;

static void br_init(bitrd *b, const uint8_t *d, size_t n, size_t at)
{
    memset(b, 0, sizeof *b);
    b->d = d;
    b->n = n;
    b->p = at;
}

/* Whether any byte of w is 0xFF. */
static inline int has_ff64(uint64_t w)
{
    uint64_t v = ~w;
    return ((v - 0x0101010101010101ull) & ~v & 0x8080808080808080ull) != 0;
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return __builtin_bswap64(w);
}

/* Top the buffer up to at least 57 bits: 8 bytes at a time where none is
 * 0xFF, byte by byte otherwise. */
static inline void br_fill(bitrd *b)
{
    int bytes = (64 - b->nb) >> 3;
    if (bytes && b->p + 8 <= b->n) {
        uint64_t w = load_be64(b->d + b->p);
        if (!has_ff64(w)) {
            for (int i = 0; i < bytes; i++)
                b->ring[(b->loaded + (uint64_t)i) & 15] = (uint32_t)(b->p + (size_t)i);
            if (bytes < 8)
                w &= ~0ull << (64 - 8 * bytes);
            b->acc |= w >> b->nb;
            b->nb += 8 * bytes;
            b->loaded += (uint64_t)bytes;
            b->p += (size_t)bytes;
            return;
        }
    }
    while (b->nb <= 56) {
        size_t p = b->p;
        unsigned v;
        if (p < b->n && b->d[p] != 0xFF) {
            v = b->d[p];
            b->p = p + 1;
        } else if (p + 1 < b->n && b->d[p + 1] == 0x00) {
            v = 0xFF;
            b->p = p + 2;
        } else {
            v = 0;
            b->zeros++;
        }
        b->ring[b->loaded & 15] = (uint32_t)p;
        b->acc |= (uint64_t)v << (56 - b->nb);
        b->nb += 8;
        b->loaded++;
    }
}

static inline uint32_t br_get(bitrd *b, int k)
{
    uint32_t v = k ? (uint32_t)(b->acc >> (64 - k)) : 0;
    b->acc <<= k;
    b->nb -= k;
    return v;
}

/* Bits consumed since the reader started. */
static inline uint64_t br_consumed(const bitrd *b) { return b->loaded * 8 - (uint64_t)b->nb; }

/* One symbol; needs nb >= 16. The symbol and *len its code's length, or -1
 * for a code the table does not have. */
static inline int huff_decode(bitrd *b, const htab *t, int *len)
{
    unsigned e = t->look[b->acc >> (64 - LOOK)];
    if (e) {
        *len = (int)(e >> 8);
        b->acc <<= e >> 8;
        b->nb -= (int)(e >> 8);
        return (int)(e & 0xFF);
    }
    for (int l = LOOK + 1; l <= 16; l++) {
        int32_t c = (int32_t)(b->acc >> (64 - l));
        if (c <= t->maxcode[l]) {
            int32_t i = t->valoff[l] + c;
            if (i < 0 || i >= t->nvals)
                return -1;
            *len = l;
            b->acc <<= l;
            b->nb -= l;
            return t->vals[i];
        }
    }
    return -1;
}

static inline int extend(uint32_t v, int s)
{
    return s && v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v;
}

/* Skip one block's codes, as libjpeg consumes them (a run past the 63rd
 * coefficient ends the block, as there). dc_len gets the length of the DC
 * part (code and extra bits), *pred the DC difference added. 0 or -1. */
static inline int skip_block(bitrd *b, const htab *dc, const htab *ac, int *pred, int *dc_len)
{
    int len;
    if (b->nb < 32)
        br_fill(b);
    int s = huff_decode(b, dc, &len);
    if (s < 0 || s > 11)
        return -1;
    if (dc_len)
        *dc_len = len + s;
    *pred += extend(br_get(b, s), s);
    for (int k = 1; k < 64; k++) {
        if (b->nb < 32)
            br_fill(b);
        int rs;
        unsigned e = ac->skip[b->acc >> (64 - SKIP_LOOK)];
        if (e) {
            int bits = (int)((e >> 8) & 0x7F);
            b->acc <<= bits;
            b->nb -= bits;
            rs = (int)(e & 0xFF);
            if (!(e & 0x8000)) {
                b->acc <<= rs & 15;
                b->nb -= rs & 15;
            }
        } else {
            rs = huff_decode(b, ac, &len);
            if (rs < 0)
                return -1;
            b->acc <<= rs & 15;
            b->nb -= rs & 15;
        }
        int r = rs >> 4, sz = rs & 15;
        if (sz) {
            k += r;
        } else {
            if (r != 15)
                break;
            k += 15;
        }
    }
    return 0;
}

/* Bits into a byte buffer, 0xFF bytes stuffed. The caller reserved room. */
typedef struct bitwr {
    uint8_t *o;
    size_t w;
    uint64_t acc; /* nb bits at the bottom */
    int nb;
} bitwr;

static inline void bw_put(bitwr *b, uint32_t v, int k)
{
    if (!k)
        return;
    b->acc = b->acc << k | (v & (uint32_t)((1ull << k) - 1));
    b->nb += k;
    if (b->nb >= 32) { /* four bytes at once when none is 0xFF */
        uint32_t q = (uint32_t)(b->acc >> (b->nb - 32)), nq = ~q;
        if (!((nq - 0x01010101u) & ~nq & 0x80808080u)) {
            q = __builtin_bswap32(q);
            memcpy(b->o + b->w, &q, 4);
            b->w += 4;
            b->nb -= 32;
        }
    }
    while (b->nb >= 8) {
        uint8_t byte = (uint8_t)(b->acc >> (b->nb - 8));
        b->o[b->w++] = byte;
        if (byte == 0xFF)
            b->o[b->w++] = 0;
        b->nb -= 8;
    }
}

/* Pad to a byte boundary with 1-bits (what an encoder writes before a
 * marker). */
static void bw_align(bitwr *b)
{
    if (b->nb)
        bw_put(b, 0xFF, 8 - b->nb);
}

/* Copy `bits` bits from r to w. */
static void copy_bits(bitrd *r, bitwr *w, uint64_t bits)
{
    while (bits >= 32) {
        if (r->nb < 32)
            br_fill(r);
        bw_put(w, br_get(r, 32), 32);
        bits -= 32;
    }
    if (bits) {
        if (r->nb < 32)
            br_fill(r);
        bw_put(w, br_get(r, (int)bits), (int)bits);
    }
}

/* Append `bits` bits to w, starting at bit `bit` (0-7, from the top) of
 * the data byte at file offset `off`: the bulk of a window row. In three
 * passes at about memcpy's speed instead of one bit-field at a time: the
 * data bytes unstuffed into u, shifted into s by the difference of the
 * read and write bit offsets, and written out with 0xFF bytes stuffed. tmp
 * holds 2 * (bytes + 48). The walk has seen these bytes: every 0xFF among
 * them is followed by a stuffed zero. */
static void copy_span(const uint8_t *d, size_t n, size_t off, unsigned bit, uint64_t bits,
                      bitwr *w, uint8_t *tmp)
{
    if (!bits)
        return;
    size_t need = (size_t)((bit + bits + 7) / 8), got = 0, p = off;
    uint8_t *u = tmp + 8;
    memset(tmp, 0, 8);
    while (got < need && p < n) {
        const uint8_t *ff = memchr(d + p, 0xFF, n - p);
        size_t run = ff ? (size_t)(ff - (d + p)) : n - p;
        if (run > need - got)
            run = need - got;
        memcpy(u + got, d + p, run);
        got += run;
        p += run;
        if (got < need && ff) {
            u[got++] = 0xFF;
            p += 2;
        }
    }
    memset(u + got, 0, need - got + 24);

    int delta = (int)bit - w->nb; /* output bit j is input bit j + delta */
    const uint8_t *src = delta < 0 ? u - 1 : u;
    unsigned sh = (unsigned)(delta + 8) & 7;
    uint64_t T = (uint64_t)w->nb + bits;
    size_t full = (size_t)(T / 8), rem = (size_t)(T % 8);
    uint8_t *o = u + need + 24;
    for (size_t i = 0; i <= full; i += 8) {
        uint64_t v = load_be64(src + i);
        if (sh)
            v = v << sh | (uint64_t)src[i + 8] >> (8 - sh);
        v = __builtin_bswap64(v);
        memcpy(o + i, &v, 8);
    }
    if (w->nb) /* the writer's pending bits go first */
        o[0] = (uint8_t)(w->acc << (8 - w->nb)) | (uint8_t)(o[0] & (0xFF >> w->nb));
    for (size_t i = 0; i < full;) {
        const uint8_t *ff = memchr(o + i, 0xFF, full - i);
        size_t run = ff ? (size_t)(ff - (o + i)) + 1 : full - i;
        memcpy(w->o + w->w, o + i, run);
        w->w += run;
        i += run;
        if (ff)
            w->o[w->w++] = 0;
    }
    w->acc = rem ? (uint64_t)(o[full] >> (8 - rem)) : 0;
    w->nb = (int)rem;
}

/* ------------------------------------------------------------------------ */
/* The index                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct sync_point {
    uint32_t off;   /* file offset of the data byte holding the MCU's first bit */
    uint32_t bit;   /* bits from the start of the scan (bit & 7: within that byte) */
    int16_t dc[3];  /* DC predictors before the MCU, scan order */
    uint16_t pad;
} sync_point;

typedef struct sync_index {
    XXH128_hash_t key;
    size_t size;         /* the file's bytes */
    uint32_t per_row;    /* sync points per MCU row */
    uint32_t npoints;    /* rows * per_row + 1 (the last: the end of the scan) */
    /* Points [0, known) are written and never change; the walk extends
     * them (under `grow`) only as far as a window needs, and publishes the
     * new count with a release store. `dead`: the walk found the data
     * wrong; the file decodes the ordinary way from then on. */
    _Atomic uint32_t known;
    _Atomic int dead;
    pthread_mutex_t grow;
    sync_point pt[];
} sync_index;

static struct {
    pthread_mutex_t mu;
    pthread_once_t once;
    uint64_t budget;     /* bytes; 0: off */
    sync_index **slot;   /* open addressing, cap a power of two */
    size_t cap, count;
    stk_jpeg_index_stats ctr;  /* (windows and budget filled in when read) */
    _Atomic uint64_t windows;  /* crops served: counted without the lock */
} tab = {.mu = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

/* fork(): the child has only the forking thread. Taking tab.mu before the
 * fork keeps the table whole (no half-done resize) and unlocked in the
 * child; an entry's `grow` may be held by a walk that does not exist in
 * the child, so every entry's is made anew there (its points below
 * `known` are complete: a walk publishes them only when written). Only
 * `grow -> tab.mu` nests, so holding tab.mu here cannot deadlock. */
static void tab_fork_prepare(void) { pthread_mutex_lock(&tab.mu); }
static void tab_fork_parent(void) { pthread_mutex_unlock(&tab.mu); }
static void tab_fork_child(void)
{
    pthread_mutex_init(&tab.mu, NULL);
    for (size_t i = 0; i < tab.cap; i++)
        if (tab.slot[i])
            pthread_mutex_init(&tab.slot[i]->grow, NULL);
}

static void tab_init(void)
{
    pthread_atfork(tab_fork_prepare, tab_fork_parent, tab_fork_child);
    /* Default: 1/32 of the machine's memory, at least 64 MiB. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 32 : 0;
    tab.budget = bytes > ((uint64_t)64 << 20) ? bytes : (uint64_t)64 << 20;
    const char *e = getenv("STOKER_JPEG_INDEX_MB");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == '\0' && v < (1ull << 40))
            tab.budget = (uint64_t)v << 20;
    }
}

static size_t slot_of(XXH128_hash_t k, size_t cap) { return (size_t)k.low64 & (cap - 1); }

/* The entry for key/size, or NULL. Under tab.mu. */
static sync_index *tab_find_locked(XXH128_hash_t key, size_t size)
{
    if (!tab.cap)
        return NULL;
    for (size_t i = slot_of(key, tab.cap);; i = (i + 1) & (tab.cap - 1)) {
        sync_index *e = tab.slot[i];
        if (!e)
            return NULL;
        if (e->size == size && XXH128_isEqual(e->key, key))
            return e;
    }
}

/* Publish x unless the budget is spent or the key is there already. The
 * entry the table now holds for the key (x, or the one found), or NULL
 * when x was not taken (the caller frees it). */
static sync_index *tab_insert(sync_index *x, size_t bytes)
{
    pthread_mutex_lock(&tab.mu);
    sync_index *e = tab_find_locked(x->key, x->size);
    if (e) {
        pthread_mutex_unlock(&tab.mu);
        return e;
    }
    if (tab.ctr.bytes + bytes > tab.budget) {
        pthread_mutex_unlock(&tab.mu);
        return NULL;
    }
    if ((tab.count + 1) * 2 > tab.cap) {
        size_t ncap = tab.cap ? tab.cap * 2 : 1024;
        sync_index **ns = calloc(ncap, sizeof *ns);
        if (!ns) {
            pthread_mutex_unlock(&tab.mu);
            return NULL;
        }
        for (size_t i = 0; i < tab.cap; i++)
            if (tab.slot[i]) {
                size_t j = slot_of(tab.slot[i]->key, ncap);
                while (ns[j])
                    j = (j + 1) & (ncap - 1);
                ns[j] = tab.slot[i];
            }
        free(tab.slot);
        tab.slot = ns;
        tab.cap = ncap;
    }
    size_t j = slot_of(x->key, tab.cap);
    while (tab.slot[j])
        j = (j + 1) & (tab.cap - 1);
    tab.slot[j] = x;
    tab.count++;
    tab.ctr.bytes += bytes;
    tab.ctr.files++;
    pthread_mutex_unlock(&tab.mu);
    return x;
}

/* Walk on from the last known point until point `want` is written. 0, or
 * -1 when the data is wrong (the codes run past it, or do not decode).
 * Under x->grow. */
static int index_walk(const uint8_t *d, size_t n, const stk_jpeg_layout *h, const scan_info *si,
                      sync_index *x, uint32_t want)
{
    uint32_t per_row = x->per_row, known = atomic_load_explicit(&x->known, memory_order_relaxed);
    uint32_t idx = known ? known - 1 : 0; /* where the walk starts */
    bitrd b;
    int pred[3] = {0, 0, 0};
    uint64_t base = 0;
    if (known) {
        const sync_point *p = &x->pt[idx];
        base = p->bit & ~7u;
        br_init(&b, d, n, p->off);
        br_fill(&b);
        br_get(&b, (int)(p->bit & 7));
        for (unsigned i = 0; i < si->ncomp; i++)
            pred[i] = p->dc[i];
    } else {
        br_init(&b, d, n, h->scan_at);
    }
    uint32_t row = idx / per_row, col = idx % per_row * SYNC_EVERY;
    for (; row < si->rows; row++, col = 0)
        for (; col < si->cols; col++) {
            if (col % SYNC_EVERY == 0) {
                uint32_t at = row * per_row + col / SYNC_EVERY;
                if (b.nb < 8)
                    br_fill(&b);
                uint64_t c = br_consumed(&b);
                if (c > (b.loaded - b.zeros) * 8 || base + c > UINT32_MAX)
                    return -1; /* the codes ran past the data: cut short or damaged */
                if (at >= known) { /* (the point a resumed walk starts at is there) */
                    sync_point *p = &x->pt[at];
                    p->bit = (uint32_t)(base + c);
                    p->off = b.ring[(c >> 3) & 15];
                    for (unsigned i = 0; i < si->ncomp; i++)
                        p->dc[i] = (int16_t)pred[i];
                }
                if (at >= want) {
                    atomic_store_explicit(&x->known, at + 1, memory_order_release);
                    return 0;
                }
            }
            for (unsigned i = 0; i < si->ncomp; i++) {
                for (unsigned k = 0; k < si->blocks[i]; k++)
                    if (skip_block(&b, si->dc[i], si->ac[i], &pred[i], NULL) < 0)
                        return -1;
                if (pred[i] < INT16_MIN || pred[i] > INT16_MAX)
                    return -1; /* no 8-bit JPEG's DC gets there: damaged */
            }
        }
    uint64_t end = br_consumed(&b);
    if (end > (b.loaded - b.zeros) * 8 || base + end > UINT32_MAX)
        return -1;
    sync_point *e = &x->pt[(size_t)si->rows * per_row];
    e->bit = (uint32_t)(base + end);
    e->off = 0; /* (never a start) */
    for (unsigned i = 0; i < si->ncomp; i++)
        e->dc[i] = (int16_t)pred[i];
    atomic_store_explicit(&x->known, x->npoints, memory_order_release);
    return 0;
}

/* The index of this file with at least points [0, want] known: found (and
 * extended), or made now. NULL when there is none to use (the walk found
 * the data wrong, the budget is spent, out of memory): the ordinary decode
 * then runs. */
static const sync_index *index_get(const uint8_t *d, size_t n, const stk_jpeg_layout *h,
                                   const scan_info *si, uint32_t want)
{
    XXH128_hash_t key = XXH3_128bits(d, n);
    pthread_mutex_lock(&tab.mu);
    sync_index *x = tab_find_locked(key, n);
    pthread_mutex_unlock(&tab.mu);
    if (!x) {
        uint32_t per_row = (si->cols + SYNC_EVERY - 1) / SYNC_EVERY;
        size_t np = (size_t)si->rows * per_row + 1;
        size_t bytes = sizeof(sync_index) + np * sizeof(sync_point);
        sync_index *fresh = malloc(bytes);
        if (!fresh)
            return NULL;
        memset(fresh, 0, sizeof *fresh);
        fresh->key = key;
        fresh->size = n;
        fresh->per_row = per_row;
        fresh->npoints = (uint32_t)np;
        atomic_init(&fresh->known, 0);
        atomic_init(&fresh->dead, 0);
        pthread_mutex_init(&fresh->grow, NULL);
        x = tab_insert(fresh, bytes);
        if (x != fresh) {
            pthread_mutex_destroy(&fresh->grow);
            free(fresh); /* another thread's is there, or no room */
        }
        if (!x)
            return NULL;
    }
    if (x->npoints != (size_t)si->rows * x->per_row + 1 || want >= x->npoints)
        return NULL; /* (cannot happen: the key covers every byte) */
    if (atomic_load_explicit(&x->known, memory_order_acquire) <= want) {
        pthread_mutex_lock(&x->grow);
        int rc = 0;
        if (!atomic_load(&x->dead) && atomic_load_explicit(&x->known, memory_order_relaxed) <= want)
            rc = index_walk(d, n, h, si, x, want);
        if (rc < 0) {
            atomic_store(&x->dead, 1);
            pthread_mutex_lock(&tab.mu);
            tab.ctr.declined++;
            pthread_mutex_unlock(&tab.mu);
        }
        pthread_mutex_unlock(&x->grow);
    }
    if (atomic_load(&x->dead))
        return NULL;
    atomic_fetch_add_explicit(&tab.windows, 1, memory_order_relaxed);
    return x;
}

STK_API void stk_jpeg_index_stats_get(stk_jpeg_index_stats *out)
{
    pthread_once(&tab.once, tab_init);
    pthread_mutex_lock(&tab.mu);
    *out = tab.ctr;
    pthread_mutex_unlock(&tab.mu);
    out->windows = atomic_load_explicit(&tab.windows, memory_order_relaxed);
    out->budget = tab.budget;
}

/* ------------------------------------------------------------------------ */
/* The window                                                                */
/* ------------------------------------------------------------------------ */

/* Write DC value v (a difference from zero) in table t. 0 or -1. */
static int put_dc(bitwr *w, const htab *t, int v)
{
    unsigned mag = (unsigned)(v < 0 ? -v : v), s = 0;
    while (mag >> s)
        s++;
    if (s > 11 || !t->enc_len[s])
        return -1;
    bw_put(w, t->enc_code[s], t->enc_len[s]);
    bw_put(w, (uint32_t)(v < 0 ? v + (1 << s) - 1 : v), (int)s);
    return 0;
}

/* One window row: the MCUs from sync point a to sync point z, appended to
 * the window's scan. The window has no restart markers (libjpeg-turbo
 * decodes a scan with restart intervals on its slow path), so the rows
 * follow each other bit to bit, and the first block of each component is
 * re-coded against what precedes it in the window: prev[], the DC values
 * at the end of the previous window row (zeros before the first); prev
 * then becomes this row's. 0 or -1 (the codes are not as the walk found
 * them: declined). */
static int emit_row(const uint8_t *d, size_t n, const scan_info *si, const sync_point *a,
                    const sync_point *z, int prev[3], bitwr *w, uint8_t *tmp)
{
    bitrd dec, src; /* dec finds the first MCU's code lengths; src copies */
    br_init(&dec, d, n, a->off);
    br_init(&src, d, n, a->off);
    br_fill(&dec);
    br_fill(&src);
    br_get(&dec, (int)(a->bit & 7));
    br_get(&src, (int)(a->bit & 7));
    uint64_t total = (uint64_t)z->bit - a->bit, done = 0;
    for (unsigned i = 0; i < si->ncomp; i++)
        for (unsigned k = 0; k < si->blocks[i]; k++) {
            uint64_t before = br_consumed(&dec);
            int diff = 0, dc_len = 0;
            if (skip_block(&dec, si->dc[i], si->ac[i], &diff, &dc_len) < 0)
                return -1;
            uint64_t len = br_consumed(&dec) - before;
            if (done + len > total)
                return -1;
            if (k == 0) { /* re-code the DC against the window's predictor */
                if (put_dc(w, si->dc[i], a->dc[i] + diff - prev[i]) < 0)
                    return -1;
                br_fill(&src);
                br_get(&src, dc_len);
                copy_bits(&src, w, len - (uint64_t)dc_len);
            } else {
                copy_bits(&src, w, len);
            }
            done += len;
        }
    /* The rest, in bulk, from where src stands. */
    uint64_t c = br_consumed(&src);
    size_t at = (c >> 3) < src.loaded ? src.ring[(c >> 3) & 15] : src.p;
    copy_span(d, n, at, (unsigned)(c & 7), total - done, w, tmp);
    for (unsigned i = 0; i < si->ncomp; i++)
        prev[i] = z->dc[i];
    return 0;
}

int stk_jpeg_sync_window(const uint8_t *d, size_t n, uint64_t max_pixels, const stk_rect *r,
                         stk_scratch *buf, stk_jpeg_window *win)
{
    pthread_once(&tab.once, tab_init);
    if (!tab.budget)
        return 0;
    stk_jpeg_layout h;
    if (n > MAX_SCAN_BYTES || !stk_jpeg_layout_parse(d, n, &h) || h.restart)
        return 0;
    stk_jpeg_span sp;
    if (!stk_jpeg_window_span(&h, max_pixels, r, SYNC_EVERY, &sp))
        return 0;
    scan_info si;
    if (!scan_setup(d, &h, &sp, &si))
        return 0;
    unsigned mw = sp.mcu_w, mh = sp.mcu_h;
    unsigned K = sp.per_row, k0 = sp.k0, k1 = sp.k1, my0 = sp.my0, my1 = sp.my1;
    unsigned wc0 = k0 * SYNC_EVERY;

    /* The last point the window reads: the one after its last row. */
    uint32_t want = k1 == K ? (my1 * K) : ((my1 - 1) * K + k1);
    const sync_index *x = index_get(d, n, &h, &si, want);
    if (!x)
        return 0;

    /* Room: the header, and per row its bytes twice over (stuffing after
     * the shift can at worst double them) plus a re-coded MCU and the
     * marker. */
    uint64_t need = h.scan_at + 64, widest = 0;
    for (unsigned y = my0; y < my1; y++) {
        const sync_point *a = &x->pt[(size_t)y * K + k0];
        const sync_point *z = k1 == K ? &x->pt[(size_t)(y + 1) * K] : &x->pt[(size_t)y * K + k1];
        uint64_t bytes = ((uint64_t)z->bit - a->bit) / 8 + 2;
        need += 2 * bytes + 64;
        widest = bytes > widest ? bytes : widest;
    }
    /* then copy_span's room */
    int rc = stk_scratch_reserve(buf, (size_t)(need + 2 * (widest + 48)));
    if (rc < 0)
        return rc;
    uint8_t *o = buf->data;
    size_t w = stk_jpeg_window_head(d, &h, &sp, SYNC_EVERY, o);
    memcpy(o + w, d + h.sos_at, h.scan_at - h.sos_at);
    w += h.scan_at - h.sos_at;

    bitwr bw = {o, w, 0, 0};
    int prev[3] = {0, 0, 0};
    for (unsigned y = my0; y < my1; y++) {
        const sync_point *a = &x->pt[(size_t)y * K + k0];
        const sync_point *z = k1 == K ? &x->pt[(size_t)(y + 1) * K] : &x->pt[(size_t)y * K + k1];
        if (emit_row(d, n, &si, a, z, prev, &bw, o + need) < 0)
            return 0;
    }
    bw_align(&bw);
    o[bw.w++] = 0xFF;
    o[bw.w++] = 0xD9;
    win->x = wc0 * mw;
    win->y = my0 * mh;
    win->size = bw.w;
    return 1;
}
