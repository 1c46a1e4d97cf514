/*
 * coco_mask.h — the COCO reader's mask rasteriser (coco_mask.c; internal).
 *
 * Used by coco.c only: at open to bound each polygon's work, at read to
 * paint. Vertices are x, y pairs on the grid scaled by 5 (coco.c rounds
 * them); masks are h x w uint8, row-major; positions are column-major
 * (c * h + row), as pycocotools' RLE counts them.
 */
#ifndef STK_FORMAT_COCO_MASK_H
#define STK_FORMAT_COCO_MASK_H

#include <stdint.h>

/* An upper bound of the boundary points of the polygon of n scaled
 * vertices xy, in *points, and the steps of its walk, in *steps. */
void stk_coco_poly_bound(const int32_t *xy, uint64_t n, uint64_t *points, uint64_t *steps);

/* Paint the polygon of n scaled vertices xy into mask with val, using
 * pos[0 .. cap) for its boundary points (cap from stk_coco_poly_bound).
 * Returns the number of boundary points; more than cap is a bug, and then
 * nothing is painted (the caller reports it). */
uint64_t stk_coco_mask_poly(uint8_t *mask, uint32_t h, uint32_t w, const int32_t *xy, uint64_t n,
                            uint32_t *pos, uint64_t cap, uint8_t val);

/* Paint the runs of 1 of the n RLE counts (alternating runs of 0 and 1,
 * column-major, adding up to h x w) into mask with val. */
void stk_coco_mask_rle(uint8_t *mask, uint32_t h, uint32_t w, const uint32_t *counts, uint64_t n,
                       uint8_t val);

#endif
