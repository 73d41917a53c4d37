// Packed SM90 plans, the part host code shares with the kernels (no CUTLASS / FlashInfer types).
//
// A varlen batch of short sequences (vision windows of 64 patches, short prompts) wastes most of
// a 128-row query tile when each sequence gets a tile of its own: a 64-token window fills a
// quarter of a 128 x 128 score tile. A packed plan lets consecutive sequences share one query
// tile and one key tile (their rows and keys are contiguous in the packed tensors) and masks
// each row to its own sequence's keys: a block-diagonal mask, with the sequence's causal and
// left-window bounds folded in (sm90/schedule.cu plans it, sm90/packed_launch.cuh runs it).
//
// The schedule's device block holds the tile list (TileWork entries; every entry is a tile 0
// whose qo/kv start and lengths span its sequences) followed by one uint32 per query row of the
// batch, rows 0 .. nnz_qo - 1: the keys [lo, hi) the row sees, relative to its tile's kv_start,
// lo in the low 16 bits (a tile has at most 256 keys). packed_row_keys() is where both ends find it.
#ifndef FAS_SM90_PACKED_ARGS_H
#define FAS_SM90_PACKED_ARGS_H

#include <cstddef>
#include <cstdint>

#include "sm90/ragged_args.h"

namespace fas_sm90 {

constexpr uint32_t pack_row_keys(uint32_t lo, uint32_t hi) { return lo | hi << 16; }

// Bytes of the tile list; the row table starts there (TileWork is 32 bytes: 4-byte aligned).
inline size_t packed_tiles_bytes(int num_units, int tiles_per_unit) {
    return sizeof(TileWork) * static_cast<size_t>(num_units) * static_cast<size_t>(tiles_per_unit);
}

// The row table of a packed plan's launch arguments.
inline const uint32_t* packed_row_keys(const RaggedArgs& args) {
    return reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(args.tiles) +
                                             packed_tiles_bytes(args.num_units, args.tiles_per_unit));
}

// 16-bit varlen packed plans (sm90_packed_prefill; built non-causal: the row table carries
// causality and windows).
template <int Dtype, int HeadDim, bool Causal>
cudaError_t launch_ragged_packed(const RaggedArgs& args, cudaStream_t stream);

}  // namespace fas_sm90

#endif  // FAS_SM90_PACKED_ARGS_H
