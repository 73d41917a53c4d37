// The decode kernels' shapes: warps, keys per stage, stages and shared memory of each (decode.cuh:
// short, long; e4m3 caches: short and dense; decode_tma.cuh: stream), tied to the planner's KV
// tiles (paged.h).
#ifndef FAS_PAGED_DECODE_SHAPE_H
#define FAS_PAGED_DECODE_SHAPE_H

#include "paged/paged.h"

namespace fas_paged {
namespace decode {

// KvBytes: bytes per cache element (2, or 1 for e4m3).
template <int HeadDim, bool Long, int KvBytes = 2>
struct Shape {
    static constexpr int kWarps = HeadDim == 256 ? 2 : 4;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr bool kDense = Long && KvBytes == 1;  // e4m3's second shape (paged.h)
    static constexpr int kWarpKeys = Long && !kDense ? 32 : 16;  // each warp's keys of a stage, in blocks of 16
    static constexpr int kBlocks = kWarpKeys / 16;
    static constexpr int kKeys = kWarpKeys * kWarps;  // keys per stage
    static constexpr int kRowBytes = HeadDim * KvBytes;  // of a cache row
    static constexpr int kChunks = kRowBytes / 16;      // 16-byte chunks per cache row
    static constexpr int kTileBytes = kKeys * kRowBytes;
    static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
    static constexpr int kQBytes = 16 * HeadDim * 2;    // q is 16-bit
    // As many stages as fit in the CTA's share of shared memory (paged.h: the two shapes). e4m3's
    // dense shape: three CTAs per SM in 64 KiB rings (4 stages at head dim 128), so that 12 warps,
    // not 8, hide the latency of a stage's chain of loads, widening and mma, which twice the keys
    // per byte make the limit (docs/design/mixed-and-fp8-kv.md).
    static constexpr int kCtasPerSm = kDense ? 3 : Long ? 1 : 2;
    static constexpr int kBudget = kDense ? 64 * 1024 : Long ? 200 * 1024 : 96 * 1024;
    static constexpr int kStages = kBudget / kStageBytes < 2 ? 2 : kBudget / kStageBytes > 8 ? 8 : kBudget / kStageBytes;
    // At head dim 64 the short e4m3 shape's 8 stages leave part of its budget unused; it is
    // requested all the same, so that the short shape stays at 2 CTAs per SM (the planner's
    // choice between the shapes is a choice of CTAs per SM).
    static constexpr int kRingBytes =
        KvBytes == 1 && !kDense && kBudget / kStageBytes > 8 ? kBudget : kStages * kStageBytes;
    static constexpr int kSmemBytes = kQBytes + kRingBytes;
    static constexpr int kRowsPerPass = kThreads / kChunks;
    static constexpr int kPasses = kKeys / kRowsPerPass;  // rows each thread loads per stage
    static_assert(kChunks >= (KvBytes == 2 ? 8 : 4), "the swizzles need 8 chunks per row (e4m3: 4)");
    static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0, "loads must tile the stage");
    static_assert(kWarpKeys % 16 == 0 && kKeys == kv_tile_rows(HeadDim, 16, Long ? kLong : kShort, KvBytes == 1), "the planner's chunks are whole stages");
    // The epilogue reuses the stages for every warp's (m, l, O).
    static_assert(kWarps * 16 * (HeadDim + 2) * 4 <= kStages * kStageBytes, "epilogue scratch must fit");
};

// The stream shape (decode_tma.cuh): consumer warps (paged.h: stream_consumer_warps) and a
// producer warp, one persistent CTA per SM, a ring of as many stages as fit 200 KiB (so that a
// stage in flight per ~2 us of HBM time leaves several in flight), the last stage of an item
// doubling as the scratch of its end. RowBlocks: 16-row blocks per query tile (kPairStream: 2);
// Fine: stages of 16 keys per consumer warp (kFineStream).
template <int HeadDim, int KvBytes, bool Wide, int RowBlocks = 1, bool Fine = false>
struct StreamShape {
    static constexpr int kKeySlices = stream_consumer_warps(Wide);  // warps splitting a stage's keys
    static constexpr int kConsumerWarps = kKeySlices * RowBlocks;   // a warp per key slice and row block
    static constexpr int kThreads = 32 * (kConsumerWarps + 1);
    static constexpr int kKeys = stream_keys(HeadDim, KvBytes == 1, Wide, Fine);
    static constexpr int kWarpKeys = kKeys / kKeySlices;
    static constexpr int kBlocks = kWarpKeys / 16;
    static constexpr int kRowBytes = HeadDim * KvBytes;               // of one KV head's cache row
    static constexpr int kSegBytes = kRowBytes >= 128 ? 128 : kRowBytes;  // one TMA box's width
    static constexpr int kSegs = kRowBytes / kSegBytes;
    static constexpr int kTileBytes = kKeys * kRowBytes;
    static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
    static constexpr int kStages = 200 * 1024 / kStageBytes > 8 ? 8 : 200 * 1024 / kStageBytes;
    static constexpr int kRingBytes = kStages * kStageBytes;
    static constexpr int kQBytes = 16 * RowBlocks * HeadDim * 2;  // q is 16-bit; two tiles (this item's, the next's)
    // e4m3 caches: the item handoff's slots (decode_handoff.cuh: a 256-byte header and a raw Q
    // tile of 16-bit q's size), 4 where they fit beside the ring, else 2. 16-bit shapes take
    // none: one slot of no bytes, so that the handoff's arithmetic, compiled there unused, has
    // no zero to divide by.
    static constexpr int kItemSlotBytes = KvBytes == 1 ? 256 + kQBytes : 0;
    static constexpr int kItemSlots =
        KvBytes != 1 ? 1 : kRingBytes + 2 * kQBytes + 4 * kItemSlotBytes <= 220 * 1024 ? 4 : 2;
    static constexpr int kSmemBytes = kRingBytes + 2 * kQBytes + kItemSlots * kItemSlotBytes;
    static_assert(kSegBytes == 64 || kSegBytes == 128, "TMA swizzles of 64 or 128 bytes");
    static_assert(kStages >= 2 && kWarpKeys % 16 == 0, "a ring of whole 16-key blocks");
    static_assert(!Wide || has_wide_stream(HeadDim, KvBytes == 1), "the wide shape is e4m3's, up to head dim 128");
    static_assert(!Fine || (has_fine_stream(HeadDim, KvBytes == 1) && RowBlocks == 1 && !Wide), "the fine shape: 16-bit, one block");
    static_assert(kConsumerWarps * 16 * HeadDim * 4 <= kStageBytes, "an item's end borrows one stage");
    static_assert(kSmemBytes + 2 * 1024 <= 227 * 1024, "the ring, Q tiles and item slots fit with the static barriers");
};

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_SHAPE_H
