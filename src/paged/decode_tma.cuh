// The decode kernel's stream shape (paged.h: kStream): a persistent CTA per SM whose producer warp
// copies K and V with the TMA engine, one copy per segment of a box of cache rows (a page, or a
// part of one), into a ring of stages, while consumer warps (4; 8 over e4m3, or 4 per 16-row block
// of the pair shape's 32-row tiles) run the math of the other shapes (decode_math.cuh) on what
// has landed; they meet at mbarriers, `full` (a stage's bytes
// have landed) and `empty` (each consumer warp is done with it).
//
// Why (docs/design/decode-roofline.md): decode moves bytes and does little else, and the other
// shapes, whose warps both load (cp.async, 16 bytes a thread) and compute at one warp per
// scheduler, issued ~1000 instructions per warp per 64 KiB stage on an H200: their address
// arithmetic and copies, not the memory, capped them at ~3 TB/s on either card. Here a stage costs
// the consumers only their math and the producer a few copies, the ring runs ahead across work
// items (a CTA takes items blockIdx.x, + gridDim.x, ...), and the end of an item (combining the
// warps' states, in the item's last stage, held until then) overlaps the next item's loads.
// Producer warps issuing cp.async instead were slower (3.3 against 4.1 TB/s): two instruction
// streams per scheduler again.
//
// Stage layout: per K or V tile, as tensor-map copies of one 128-byte segment of a box of rows
// with SWIZZLE_128B write them (64-byte rows: SWIZZLE_64B), stage_layout.h's `stream`. Rows of a
// stage that no copy writes, or past the chunk's last key, may hold anything: their scores are
// masked, and each consumer warp zeroes the V rows of its keys past the end before its P V (0 x
// NaN would be NaN).
#ifndef FAS_PAGED_DECODE_TMA_CUH
#define FAS_PAGED_DECODE_TMA_CUH

#include <cuda.h>

#include <cstdint>

#include <flashinfer/cp_async.cuh>

#include "paged/decode_handoff.cuh"
#include "paged/decode_items.cuh"
#include "paged/decode_math.cuh"
#include "paged/decode_producer.cuh"
#include "paged/decode_shape.h"
#include "paged/stage_layout.h"

namespace fas_paged {
namespace decode {

// FAS_DECODE_ARRIVE_ALL_LANES=1, a build for compute-sanitizer's racecheck: every lane of a warp
// arrives on `empty` and `tail_ready` (their counts 32 times as high) instead of lane 0 after
// __syncwarp. PTX orders the other lanes' accesses through the warp barrier and lane 0's release;
// racecheck does not follow that and reports hazards in the 16-bit pair and tail kernels, none in
// this build (docs/design/decode-roofline.md, "Racecheck of the 16-bit pair and tail kernels").
// Off by default: up to 1% slower on an H200 where items are many or short.
#ifndef FAS_DECODE_ARRIVE_ALL_LANES
#define FAS_DECODE_ARRIVE_ALL_LANES 0
#endif
constexpr int kWarpArrivals = FAS_DECODE_ARRIVE_ALL_LANES ? 32 : 1;  // a warp's arrivals on a barrier

// T: q and out; KV: the caches' element (T, or __nv_fp8_e4m3); Wide: kWideStream; QFp8: e4m3 q
// (e4m3 caches only); RowBlocks: 16-row blocks per query tile (2: kPairStream), each with its own
// consumer warps over the same stages, so that 17-32 rows per sequence read the KV once. Tail:
// the variant that spreads a launch's leftover items over the CTAs (decode_items.cuh; 16-bit
// one-block shapes), with a warp more that plans it and kTailSmemBytes more shared memory; a
// launch without a tail takes the other, whose code is the same as before the tail existed.
template <typename T, typename KV, int HeadDim, bool Causal, bool Wide, bool QFp8, int RowBlocks, bool Fine,
          bool Tail = false>
__global__ void __launch_bounds__(StreamShape<HeadDim, sizeof(KV), Wide, RowBlocks, Fine>::kThreads + (Tail ? 32 : 0), 1)
    stream_kernel(const __grid_constant__ LaunchArgs a) {
    using S = StreamShape<HeadDim, static_cast<int>(sizeof(KV)), Wide, RowBlocks, Fine>;
    constexpr bool kFp8 = sizeof(KV) == 1;
    static_assert(!Tail || (!kFp8 && !Wide && RowBlocks == 1), "the tail: 16-bit one-block shapes");
    constexpr int kRows = 16 * RowBlocks;  // of a query tile
    static_assert(RowBlocks == 1 || (!kFp8 && HeadDim <= 128), "paired blocks: 16-bit caches up to head dim 128");
    constexpr int kConsumers = 32 * S::kConsumerWarps;
    extern __shared__ __align__(1024) uint8_t smem[];
    __shared__ uint64_t full[S::kStages], empty[S::kStages];
    __shared__ float state[S::kConsumerWarps * 16 * 2];  // the end of an item: [warp][row][m, l]
    __shared__ int fold_flag[RowBlocks];                   // fold_if_last's, per 16-row tile
    uint8_t* const ring = smem;
    uint8_t* const q_smem = smem + S::kRingBytes;
    uint8_t* const slots = q_smem + 2 * S::kQBytes;  // e4m3 caches: the item handoff's (decode_handoff.cuh)
    TailPlan* const tail = reinterpret_cast<TailPlan*>(smem + S::kSmemBytes);  // Tail only
    uint64_t* const tail_ready = reinterpret_cast<uint64_t*>(smem + S::kSmemBytes + sizeof(TailPlan));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // A warp's arrival on `empty` or `tail_ready`, after its __syncwarp: lane 0's (all lanes' with the probe).
    const auto warp_arrive = [lane](uint64_t* bar) {
        if (kWarpArrivals == 32 || lane == 0) tma::arrive(bar);
    };
    if (tid == 0) {
        for (int s = 0; s < S::kStages; ++s) {
            tma::init(&full[s], 1);
            tma::init(&empty[s], S::kConsumerWarps * kWarpArrivals);
        }
        if constexpr (Tail) tma::init(tail_ready, kWarpArrivals);
        if constexpr (kFp8) init_item_slots<S>(slots);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    if constexpr (Tail) {
        if (warp == S::kConsumerWarps + 1) {  // the tail's planner, then done
            // Its own warp: made by the producer once its ring was full, the plan's two round
            // trips waited behind the ring's copies (~5 us each); made by a consumer warp at the
            // start, it held every consumer ~2.5 us (docs/design/decode-producer.md).
            const int items = item_count(a);
            const int chunk = a.split ? a.kv_chunk_size[0] : 0;
            const int dp = round_robin_items(items, tail_on(a, chunk));
            if (dp < items) {
                plan_tail<S::kKeys>(a, dp, items, chunk, 2LL * S::kRowBytes << a.box_shift, *tail, lane);
                __syncwarp();
                warp_arrive(tail_ready);
            }
            return;
        }
    }
    if (warp == S::kConsumerWarps) {
        constexpr int kHandoffQBytes = kFp8 ? (QFp8 ? 1 : static_cast<int>(sizeof(T))) : 0;
        if (a.tma_flat) {
            produce<S, true, Tail, kHandoffQBytes>(a, ring, full, empty, tail, tail_ready, lane, slots);
        } else {
            produce<S, false, Tail, kHandoffQBytes>(a, ring, full, empty, tail, tail_ready, lane, slots);
        }
        return;
    }

    const int g = lane / 4;
    const int group = a.num_heads_q / a.num_heads_k;
    const T* q = static_cast<const T*>(a.q);
    constexpr int kQChunks = HeadDim / 8;
    // Two blocks run twice the warps (9 with the producer), at most 168 registers each (ptxas):
    // their Q fragments come from shared memory at each step, and their scores' loop is unrolled
    // two steps, not all: fully unrolled it spilled 240 bytes and ran 64 x 4k 4-query GQA 8 at
    // 91 us against 73 (H200; docs/design/decode-roofline.md). The wide shape's read from shared
    // memory too ran no faster (docs/design/decode-e4m3.md, "Fragment addresses").
    constexpr bool kQInRegisters = HeadDim <= 128 && RowBlocks == 1;
    constexpr int kQkUnroll = RowBlocks == 1 ? HeadDim / 16 : 2;
    const int block = RowBlocks == 1 ? 0 : warp / S::kKeySlices;  // this warp's 16-row block of the query tile
    const int key0 = (warp % S::kKeySlices) * S::kWarpKeys;        // and its keys of each stage
    const int block_tid = tid - block * 32 * S::kKeySlices;         // among the block's warps
    const auto offset = [](int row, int chunk) { return layout::stream<S::kRowBytes, S::kKeys>(row, chunk); };
    const auto q_offset = [](int row, int chunk) { return layout::rows16<HeadDim>(row, chunk); };  // the Q tile
    const uint32_t q_part = q_offset(lane % 16, lane / 16);
    // 16-bit q: each item's Q tile is copied an item ahead, into the other of two buffers, so that
    // an item starts on a Q that has landed (e4m3 caches: staged through registers at the item,
    // from the raw tile the producer copied).
    const int items = item_count(a);
    const auto copy_q = [&](const Item& w, uint8_t* to) {
        for (int i = tid; i < kRows * kQChunks; i += kConsumers) {
            const int row = i / kQChunks, packed = w.qo_tile * kRows + row, token = packed / group;
            const bool valid = token < w.qo_len;
            const T* src = q + static_cast<int64_t>(w.q_begin + (valid ? token : 0)) * a.q_row_stride +
                           (w.kv_head * group + packed % group) * HeadDim + (i % kQChunks) * 8;
            flashinfer::cp_async::pred_load_128b<flashinfer::cp_async::PrefetchMode::kNoPrefetch,
                                                 flashinfer::cp_async::SharedMemFillMode::kFillZero>(
                reinterpret_cast<T*>(to + q_offset(row, i % kQChunks)), src, valid);
        }
        flashinfer::cp_async::commit_group();
    };
    // 16-bit one-block consumers describe the next item (for its Q copy) from loads issued an item
    // ahead; the pair shape's on the spot (held to 168 registers, the e4m3 kernels spilled more
    // with the loads ahead and ran 6-14% slower: docs/design/decode-producer.md); e4m3 consumers
    // take their items, Q and descales from the producer (decode_handoff.cuh).
    constexpr bool kAhead = !kFp8 && RowBlocks == 1;
    ItemStream<S::kKeys> ahead(a, items, kAhead);
    const auto take = [&](int index) {
        return kAhead ? ahead.take(a, items) : describe<S::kKeys>(a, index, ahead.chunk);
    };
    const int dp = Tail ? round_robin_items(items, tail_on(a, ahead.chunk)) : items;  // walked round-robin
    int tail_x = -1;     // Tail: the tail's next item (-1: not reached)
    int next_tail = -1;  // Tail: the tail item `next` is a piece of (-1: a round-robin item)
    bool more = true;    // Tail: whether the next iteration has an item (known with its Q copy)
    const auto take_piece = [&](Item* w) {  // Tail: this CTA's next tail piece into *w, if any
        if constexpr (Tail) {
            if (dp == items) return false;
            if (tail_x < 0) {
                tma::wait(tail_ready, 0);
                tail_x = tail->x0;
            }
            if (!in_run(*tail, tail_x, items - dp)) return false;
            next_tail = tail_x;
            *w = tail_piece<S::kKeys>(*tail, tail_x++, a.box_shift);
            return true;
        }
        return false;
    };
    // e4m3 caches: the item in this CTA's n-th slot as the producer handed it over (no global
    // load here).
    const auto handed_over = [&](ItemSlotHeader* slot, int n) {
        tma::wait(&slot->full, (n / S::kItemSlots) & 1);
        return slot->item;
    };
    Item next{};
    if (!kFp8 && static_cast<int>(blockIdx.x) < items) {
        next = take(blockIdx.x);
        copy_q(next, q_smem);
    }
    int stage = 0, buffer = 0;
    for (int index = blockIdx.x; Tail ? more : index < items; index += gridDim.x, buffer ^= 1) {
        const int n = (index - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x);  // e4m3: the slot's item
        ItemSlotHeader* const slot = item_slot<S>(slots, n);
        const Item w = kFp8 ? handed_over(slot, n) : next;
        const int w_tail = Tail ? next_tail : -1;  // before the prefetch below replaces next
        uint8_t* const q_tile = q_smem + buffer * S::kQBytes;
        const int row0 = w.qo_tile * kRows;
        float q_scale = 1.f, k_scale = 1.f, v_scale = 1.f;
        if constexpr (kFp8) {
            fp8::QStaging<T, HeadDim, kConsumers, true, QFp8> staging;
            staging.load_slot(tid, item_slot_q<S>(slots, n), a.q_descale != nullptr ? slot->q_descale : nullptr);
            if (a.k_descale != nullptr) k_scale = slot->k_scale;
            if (a.v_descale != nullptr) v_scale = slot->v_scale;
            q_scale = staging.scale(warp, lane, state, [] { tma::consumers_sync<kConsumers>(); });
            staging.store(q_tile, tid, q_scale, q_offset);
        } else {
            if (index + static_cast<int>(gridDim.x) < dp) {  // the other buffer's item is done
                next = take(index + gridDim.x);
                copy_q(next, q_smem + (buffer ^ 1) * S::kQBytes);
            } else if (take_piece(&next)) {
                copy_q(next, q_smem + (buffer ^ 1) * S::kQBytes);
            } else {
                more = false;
                flashinfer::cp_async::commit_group();  // an empty group: wait_group<1> below stays right
            }
            flashinfer::cp_async::wait_group<1>();  // this item's Q
        }
        tma::consumers_sync<kConsumers>();
        // e4m3 caches: every consumer has read the item's slot (and stored its Q tile): free it.
        if (kFp8 && tid == 0) tma::arrive(&slot->empty);
        uint32_t q_frag[kQInRegisters ? HeadDim / 16 : 1][4];
        const auto q_address = [&](int step) {  // q_part: this thread's part (stage_layout.h)
            return reinterpret_cast<T*>(q_tile + layout::at(q_offset, q_part, 16 * block, 2 * step));
        };
        if constexpr (kQInRegisters) {
#pragma unroll
            for (int step = 0; step < HeadDim / 16; ++step) flashinfer::mma::ldmatrix_m8n8x4(q_frag[step], q_address(step));
        }
        const auto q_step = [&](int step, uint32_t(&frag)[4]) {
            if constexpr (kQInRegisters) {
#pragma unroll
                for (int e = 0; e < 4; ++e) frag[e] = q_frag[step][e];
            } else {
                flashinfer::mma::ldmatrix_m8n8x4(frag, q_address(step));
            }
        };
        const ScoreScale sc(a.softmax_scale, a.softcap, k_scale, q_scale);
        const KeyBounds bounds = key_bounds<Causal>(row0 + 16 * block, g, group, w.kv_len, w.qo_len, w.kv_begin,
                                                    w.kv_end, a.window_left);
        // A block past the item's rows (a sequence with fewer queries than the plan's longest)
        // skips the math, and keeps its warps' part in the barriers.
        const bool active = RowBlocks == 1 || 16 * block < w.qo_len * group - row0;
        const bool upper = 16 * block + 8 < w.qo_len * group - row0;  // rows 8-15 of its block hold a query
        WarpState<HeadDim> st;
        st.init();
        for (int it = 0; it < w.iterations; ++it, ++stage) {
            const int slot = stage % S::kStages;
            tma::wait(&full[slot], (stage / S::kStages) & 1);
            uint8_t* const k_tile = ring + slot * S::kStageBytes;
            uint8_t* const v_tile = k_tile + S::kTileBytes;
            const int stage_key = w.first + it * S::kKeys + key0;
            // The pair shape tests the stage's end, the same for every warp, so that all consumer
            // warps meet at their one barrier after the zeroing: a barrier per key slice (bar.sync
            // 2 + slice, 64) orders the same, but racecheck then reported hazards across the
            // consumers' later barriers, none with this one (docs/design/decode-roofline.md).
            const int past = RowBlocks > 1 ? w.first + (it + 1) * S::kKeys : stage_key + S::kWarpKeys;
            if (past > w.kv_end) {  // zero this warp's V rows past the end (none: an empty loop)
                if (block == 0) {  // once per key slice: the other blocks' warps wait for it
                    constexpr int kChunksPerRow = S::kRowBytes / 16;
                    const int from = max(0, w.kv_end - stage_key);
                    for (int i = from * kChunksPerRow + lane; i < S::kWarpKeys * kChunksPerRow; i += 32) {
                        *reinterpret_cast<uint4*>(v_tile + offset(key0 + i / kChunksPerRow, i % kChunksPerRow)) =
                            make_uint4(0, 0, 0, 0);
                    }
                    tma::fence_async();
                }
                if constexpr (RowBlocks > 1) {
                    tma::consumers_sync<kConsumers>();
                } else {
                    __syncwarp();
                }
            }
            if (active) {
                warp_stage<T, KV, HeadDim, S::kBlocks, kQkUnroll>(st, k_tile, v_tile, key0, stage_key, bounds, sc,
                                                                  offset, q_step, lane, upper);
            }
            if (it + 1 < w.iterations) {  // the last stage's slot is the scratch of the item's end
                __syncwarp();
                warp_arrive(&empty[slot]);
            }
        }
        // Each 16-row block ends as a tile of its own, its warps' states and O in their own part of
        // the scratch (finish_tile's tiles are 16 rows, combined by the warps of one block).
        std::conditional_t<Tail, TailTileOutput, TileOutput> tile{w.request,  w.qo_tile * RowBlocks + block, w.kv_tile,
                                                                  w.kv_head, w.qo_len, group, w.num_chunks};
        if constexpr (Tail) tile.tail = w_tail;
        const auto sync = [] { tma::consumers_sync<kConsumers>(); };
        if (w.iterations > 0) {
            const int slot = (stage - 1) % S::kStages;
            float* const scratch = reinterpret_cast<float*>(ring + slot * S::kStageBytes);
            sync();  // every warp is done with the last stage: its slot becomes the scratch
            finish_tile<T, KV, HeadDim, S::kKeySlices>(st, state + block * S::kKeySlices * 16 * 2,
                                                       scratch + block * S::kKeySlices * 16 * HeadDim, a, tile, v_scale,
                                                       block_tid, sync);
            sync();  // every warp has read the scratch
            tma::fence_async();
            __syncwarp();
            warp_arrive(&empty[slot]);
        } else {  // no keys (and no landed stage to borrow as scratch)
            finish_empty_tile<T, HeadDim>(a, tile, block_tid, 32 * S::kKeySlices);
            sync();  // every warp is done with this item's Q tile
        }
    }
    if constexpr (Tail) {  // pieces cut from items of several (at most the first and last): counted, maybe folded
        for (int k = 0; dp < items && tail_x > tail->x0 && k < 2; ++k) {
            const int x = k == 0 ? tail->x0 : tail_x - 1;
            if (k == 1 && x == tail->x0) break;
            const Item w = tail_piece<S::kKeys>(*tail, x, a.box_shift);
            const TailTileOutput tile{w.request, w.qo_tile, w.kv_tile, w.kv_head, w.qo_len, group, w.num_chunks, x};
            fold_if_last<T, HeadDim>(a, tile, block_tid, 32 * S::kKeySlices, &fold_flag[block],
                                     [] { tma::consumers_sync<kConsumers>(); });
        }
    }
    // A split plan's items fit one wave (plan.cpp's choose_chunk; the device update alike), and the
    // grid is a wave: a CTA of such a plan held one item, whose tile it counts (and maybe folds)
    // now, after the loop. Inside the loop (or out of line) its code slowed the main loop of every
    // plan (docs/design/device-lengths.md). A device plan's unsplit update leaves every tile one
    // chunk: nothing to count, and the description's two loads would delay the next launch.
    if (a.fold_counts != nullptr && ahead.chunk != kUnsplitChunk && items <= static_cast<int>(gridDim.x) &&
        static_cast<int>(blockIdx.x) < items) {
        // e4m3 caches: the one item is still in the first item slot (nothing came after it).
        const Item w = kFp8 ? item_slot<S>(slots, 0)->item : describe<S::kKeys>(a, blockIdx.x, ahead.chunk);
        const TileOutput tile{w.request,  w.qo_tile * RowBlocks + block, w.kv_tile, w.kv_head, w.qo_len, group,
                              w.num_chunks};
        fold_if_last<T, HeadDim>(a, tile, block_tid, 32 * S::kKeySlices, &fold_flag[block],
                                 [] { tma::consumers_sync<kConsumers>(); });
    }
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_TMA_CUH
