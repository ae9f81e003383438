/* The workspace of the multi-block sampling path (include/ignis/sampling.h,
 * ignis_sampling_workspace_size; the kernel is src/cuda/sampling/split.cu). One layout, computed
 * here for the size query and for the launch:
 *
 *   state      IGNIS_SAMPLING_SPLIT_MAX_ROWS x 4 u32 at offset 0, per output row: the grid barrier's
 *              arrivals, the blocks done, the row's largest key, the candidate list's length. Zero
 *              between calls (the caller zero-fills the workspace once; the last block of every row
 *              zeroes them again), and at a fixed place so that calls of any shape find them.
 *   hist_count rows x SPLIT_BINS u32   level-1 counts of the row (zeroed by the call itself)
 *   hist_mass  rows x SPLIT_BINS u64   level-1 exact masses
 *   tile_mass  rows x ceil(vocab / SPLIT_TILE) u64   allowed mass of each tile of the row
 *   list       rows x vocab u64        the candidates of the level-1 bin: key << 32 | index
 * Every region starts on 256 bytes. */
#ifndef IGNIS_CORE_SAMPLING_SPLIT_H
#define IGNIS_CORE_SAMPLING_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "ignis/sampling.h"

#define IGNIS_SPLIT_BINS 2048 /* level-1 digits of a weight key: bits 30..20 */
#define IGNIS_SPLIT_TILE 2048 /* elements of a tile: one 4-element chunk per thread of a block */
#define IGNIS_SPLIT_MIN_VOCAB 4096
#define IGNIS_SPLIT_STATE_WORDS 4

typedef struct ignis_split_layout {
  size_t state, hist_count, hist_mass, tile_mass, list, bytes;
} ignis_split_layout;

static inline size_t ignis_split_align(size_t x) {
  return (x + 255) & ~(size_t)255;
}

static inline ignis_split_layout ignis_split_layout_of(int64_t rows, int64_t vocab) {
  ignis_split_layout l;
  const size_t r = (size_t)rows;
  l.state = 0;
  l.hist_count =
      ignis_split_align(sizeof(uint32_t) * IGNIS_SAMPLING_SPLIT_MAX_ROWS * IGNIS_SPLIT_STATE_WORDS);
  l.hist_mass = l.hist_count + ignis_split_align(sizeof(uint32_t) * IGNIS_SPLIT_BINS * r);
  l.tile_mass = l.hist_mass + ignis_split_align(sizeof(uint64_t) * IGNIS_SPLIT_BINS * r);
  l.list = l.tile_mass + ignis_split_align(sizeof(uint64_t) *
                                           (size_t)((vocab + IGNIS_SPLIT_TILE - 1) / IGNIS_SPLIT_TILE) * r);
  l.bytes = l.list + ignis_split_align(sizeof(uint64_t) * (size_t)vocab * r);
  return l;
}

#endif
