/*
 * coco_mask.c — the COCO reader's mask rasteriser: polygons and RLE counts
 * painted into an h x w uint8 mask, equal to pycocotools' annToMask bit for
 * bit (coco.c parses and checks the segmentations at open and calls these
 * at read).
 *
 * A polygon is rasterised as cocoapi's maskApi.c rleFrPoly defines it.
 * The vertices are scaled by 5 and rounded as (int)(5 * v + 0.5)
 * (truncation, so -0.5 rounds to 0); each edge is walked one step at a
 * time along its longer axis, from the end with the smaller coordinate
 * on that axis (so an edge rasterises alike in both directions), the
 * other coordinate computed in double as (int)(start + slope * t + 0.5);
 * the points are visited in the polygon's order. Where consecutive
 * points step across column 5 * c + 2.5 of the scaled grid (the centre
 * of pixel column c, 0 <= c < w), the pixel row ceil((Y - 2) / 5),
 * clamped to [0, h], of the lower of the two points' Y is a boundary
 * point at column-major position c * h + row. A pixel at column-major
 * position p is inside when an odd number of boundary points are at
 * positions <= p (the RLE pycocotools builds from the sorted points).
 * Here the boundary points are computed with integer arithmetic where
 * pycocotools uses doubles (the same values: the column test and the
 * ceil are exact on integers), sorted, and the odd runs painted. The
 * double expressions are evaluated as written, which needs
 * -ffp-contract=off (CMakeLists.txt, setup.py): a fused multiply-add
 * rounds differently. An edge of length 0 (a repeated vertex) has
 * pycocotools compute 0/0; its one point only matters when the points
 * around it differ in x, where x86's (int)NaN = INT_MIN makes the row
 * 0, which is what happens here too.
 *
 * The vertices come in already scaled and rounded (coco.c's coco_polygon,
 * at open, as (int)(5 * v + 0.5)), each within COCO_MAX_COORD pixels of
 * the origin; stk_coco_poly_bound gives, at open, an upper bound of a
 * polygon's boundary points (the room the read reserves) and the steps of
 * its walk (what coco.c's paint limit adds up). An RLE's counts alternate
 * runs of 0 and 1 in column-major order, starting with 0, and add up to
 * h x w (checked at open); the runs of 1 are painted.
 *
 * A run [a, b) of column-major positions is set on the row-major mask one
 * column at a time; later parts and annotations paint over earlier ones,
 * in the order coco.c calls them.
 *
 * Thread safety: no state; the caller owns the mask and the room for the
 * points (its scratch), so any number of reads paint at once.
 */
#include "format/coco_mask.h"

#include <stdbool.h>
#include <stdlib.h>

/* ceil(a / 5) for any sign of a. */
static int64_t coco_ceil5(int64_t a)
{
    int64_t q = a / 5;
    return q * 5 < a ? q + 1 : q;
}

/* The walk of one polygon: the previous point and the boundary points. */
typedef struct coco_walk {
    int64_t pu, pv;   /* the previous point (scaled grid) */
    bool have_prev;
    uint32_t h, w;
    uint32_t *pos;    /* out: column-major positions of the boundary points */
    uint64_t n, cap;  /* points found; room in pos (coco_poly_bound) */
} coco_walk;

/* The next point of the walk: a boundary point where the step from the
 * previous point crosses a pixel column centre (see the top of the file). */
static inline void coco_visit(coco_walk *k, int64_t u, int64_t v)
{
    if (k->have_prev && u != k->pu) {
        int64_t x = u < k->pu ? u : u - 1; /* the scaled column crossed after */
        if (x >= 0 && x % 5 == 2 && (x - 2) / 5 <= (int64_t)k->w - 1) {
            int64_t y = coco_ceil5((v < k->pv ? v : k->pv) - 2);
            if (y < 0)
                y = 0;
            else if (y > k->h)
                y = k->h;
            if (k->n < k->cap) /* always, by coco_poly_bound; a guard all the same */
                k->pos[k->n] = (uint32_t)((uint64_t)((x - 2) / 5) * k->h + (uint64_t)y);
            k->n++;
        }
    }
    k->pu = u;
    k->pv = v;
    k->have_prev = true;
}

/* The boundary points of the polygon of n scaled vertices xy into pos
 * (room for cap of them, coco_poly_bound's count); returns how many (more
 * than cap would be a bug: then only cap were stored). */
static uint64_t coco_poly_points(const int32_t *xy, uint64_t n, uint32_t h, uint32_t w,
                                 uint32_t *pos, uint64_t cap)
{
    coco_walk k = {.h = h, .w = w, .pos = pos, .cap = cap};
    for (uint64_t j = 0; j < n; j++) {
        uint64_t e = j + 1 == n ? 0 : j + 1;
        int64_t xs = xy[2 * j], ys = xy[2 * j + 1], xe = xy[2 * e], ye = xy[2 * e + 1];
        int64_t dx = xs < xe ? xe - xs : xs - xe, dy = ys < ye ? ye - ys : ys - ye;
        if (dx == 0 && dy == 0) { /* 0/0 in pycocotools: (int)NaN, INT_MIN on x86 */
            coco_visit(&k, xs, INT32_MIN);
            continue;
        }
        bool major_x = dx >= dy;
        bool flip = major_x ? xs > xe : ys > ye;
        if (flip) {
            int64_t t = xs;
            xs = xe;
            xe = t;
            t = ys;
            ys = ye;
            ye = t;
        }
        /* Evaluated as pycocotools does, in double, no fused multiply-add. */
        if (major_x) {
            double s = (double)(ye - ys) / (double)dx;
            for (int64_t d = 0; d <= dx; d++) {
                int64_t t = flip ? dx - d : d;
                coco_visit(&k, t + xs, (int64_t)(int)((double)ys + s * (double)t + 0.5));
            }
        } else {
            double s = (double)(xe - xs) / (double)dy;
            for (int64_t d = 0; d <= dy; d++) {
                int64_t t = flip ? dy - d : d;
                coco_visit(&k, (int64_t)(int)((double)xs + s * (double)t + 0.5), t + ys);
            }
        }
    }
    return k.n;
}

void stk_coco_poly_bound(const int32_t *xy, uint64_t n, uint64_t *points, uint64_t *steps)
{
    uint64_t p = 0, s = 0;
    for (uint64_t j = 0; j < n; j++) {
        uint64_t e = j + 1 == n ? 0 : j + 1;
        int64_t dx = llabs((long long)xy[2 * e] - xy[2 * j]);
        int64_t dy = llabs((long long)xy[2 * e + 1] - xy[2 * j + 1]);
        /* a boundary point needs a change of x between two points: within
         * an edge x moves monotonically, by at most dx + 1 (its ends are
         * rounded), and an edge's first point may differ from the point
         * before it */
        p += (uint64_t)dx + 2;
        s += (uint64_t)(dx > dy ? dx : dy) + 1;
    }
    *points = p;
    *steps = s;
}

static int coco_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Set the pixels of column-major positions [a, b) of the h x w row-major
 * mask to val. */
static void coco_paint_run(uint8_t *mask, uint32_t h, uint32_t w, uint64_t a, uint64_t b,
                           uint8_t val)
{
    while (a < b) {
        uint64_t col = a / h, row = a % h;
        uint64_t end = (col + 1) * h < b ? (col + 1) * h : b;
        uint8_t *p = mask + row * w + col;
        for (uint64_t q = a; q < end; q++, p += w)
            *p = val;
        a = end;
    }
}

uint64_t stk_coco_mask_poly(uint8_t *mask, uint32_t h, uint32_t w, const int32_t *xy, uint64_t n,
                            uint32_t *pos, uint64_t cap, uint8_t val)
{
    uint64_t pixels = (uint64_t)h * w;
    uint64_t np = coco_poly_points(xy, n, h, w, pos, cap);
    if (np > cap)
        return np;
    qsort(pos, (size_t)np, sizeof *pos, coco_cmp_u32);
    for (uint64_t i = 0; i < np; i += 2)
        coco_paint_run(mask, h, w, pos[i], i + 1 < np ? pos[i + 1] : pixels, val);
    return np;
}

void stk_coco_mask_rle(uint8_t *mask, uint32_t h, uint32_t w, const uint32_t *counts, uint64_t n,
                       uint8_t val)
{
    uint64_t q = 0;
    for (uint64_t c = 0; c < n; c++) {
        uint64_t len = counts[c];
        if (c & 1)
            coco_paint_run(mask, h, w, q, q + len, val);
        q += len;
    }
}
