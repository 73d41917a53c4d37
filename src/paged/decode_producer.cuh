// The stream decode kernel's producer warp (decode_tma.cuh: the kernel and its consumer warps):
// the TMA engine's copies of K and V boxes into the ring of stages, meeting the consumers at
// mbarriers (mbarrier.cuh), `full` (a stage's bytes have landed) and `empty` (each consumer warp
// is done with it).
#ifndef FAS_PAGED_DECODE_PRODUCER_CUH
#define FAS_PAGED_DECODE_PRODUCER_CUH

#include <cstdint>

#include "paged/decode_handoff.cuh"
#include "paged/decode_items.cuh"
#include "paged/decode_shape.h"
#include "paged/mbarrier.cuh"

namespace fas_paged {
namespace decode {

// The producer warp: every stage of every item of this CTA, in the consumers' order. Lane b copies
// box b of a stage (its rows of K, then of V, a copy per segment). Over a paged cache its page id
// comes from the stage's id group (StageIds), loaded a group ahead, the next group's loads issued
// after the stage's copies; over contiguous KV (Flat) a row is the sequence's first row,
// looked up once per item, plus the key. Nothing issued between a slot's release and its copies
// may delay them (a lookup moved there cost contiguous keys 8-15%; docs/design/decode-producer.md).
// Tail (decode_items.cuh): after its round-robin items, this CTA's pieces of the tail, as
// planned in `tail` (ready once tail_ready completes); their first id group (or row) looked up
// ahead like a round-robin item's, tagged items + x.
// HandoffQBytes > 0 (e4m3 caches; q's element size): each item is also handed to the consumers
// through the item slots (decode_handoff.cuh), before its first stage's copies.
template <typename S, bool Flat, bool Tail, int HandoffQBytes = 0>
__device__ __forceinline__ void produce(const LaunchArgs& a, uint8_t* ring, uint64_t* full, uint64_t* empty,
                                        TailPlan* tail, uint64_t* tail_ready, int lane, uint8_t* slots = nullptr) {
    // A lane per box: boxes of any size for stages of up to 256 keys; larger stages (paged.h's
    // FAS_DECODE_HD64_E4M3_WARP_KEYS) 16-row boxes only, which the plan sees to (stream_boxes_fit).
    static_assert(S::kKeys / (S::kKeys <= 256 ? kMinStreamBox : kStreamBoxRows) <= 32, "a lane per box");
    const int box = 1 << a.box_shift;
    const int page_shift = __popc(a.page_size) == 1 ? __ffs(a.page_size) - 1 : -1;
    const int id_shift = 5 - (StageIds<S::kKeys>::kKeysShift - a.box_shift);  // 1 << id_shift: stages of an id group
    int stage = 0;  // over all items: slot stage % kStages, its use stage / kStages
    const int items = item_count(a);
    ItemStream<S::kKeys> ahead(a, items, true);
    const int dp = Tail ? round_robin_items(items, tail_on(a, ahead.chunk)) : items;  // walked round-robin
    int tail_x = -1;  // the tail's next item (-1: not reached)
    const auto tail_more = [&] {
        if constexpr (Tail) {
            if (dp == items) return false;
            if (tail_x < 0) {
                tma::wait(tail_ready, 0);
                tail_x = tail->x0;
            }
            return in_run(*tail, tail_x, items - dp);
        }
        return false;
    };
    StageIds<S::kKeys> ids, next, upcoming;  // id groups: this stage's, the item's next, the next item's first
    struct FirstRow {
        int index = -1, row = 0;
    } next_first;  // contiguous KV: the next item's first row
    // Round-robin items, then (Tail) this CTA's pieces, counted into `end` after the last
    // round-robin item's copies (before them, a CTA of one such item would wait for the plan to
    // start). The loop keeps the form it had before the tail: other forms (a lambda per item, a
    // bound of rounds and pieces) changed the plain kernels' SASS.
    int end = Tail ? dp : items;
    for (int round = blockIdx.x; round < end; round += gridDim.x) {
        const bool piece = Tail && round >= dp;
        const int index = piece ? items + tail_x : round;  // the item's tag
        const Item w = piece ? tail_piece<S::kKeys>(*tail, tail_x++, a.box_shift) : ahead.take(a, items);
        if constexpr (HandoffQBytes > 0) {
            const int n = (round - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x);  // this CTA's n-th item
            hand_over<S, S::kRowBytes, HandoffQBytes>(a, w, slots, n, lane);
        }
        // Contiguous KV: a page's id is its first row (paged.h, kContiguousPageSize), so a
        // sequence's first page locates all of its rows; looked up during the item before where it can be.
        const int first_row = !Flat || w.iterations == 0 ? 0
                              : next_first.index == index ? next_first.row
                                                          : a.page_indices[w.page_begin];
        // The stage after whose copies the next item's first id group (or row) is loaded: a group
        // before the item's end, once take()'s loads of its description have had two stages to land.
        const int next_item_at = max(w.iterations - (1 << id_shift), min(2, w.iterations - 1));
        for (int it = 0; it < w.iterations; ++it, ++stage) {
            const int slot = stage % S::kStages;
            const int base = w.first + it * S::kKeys;
            const int boxes = (min(S::kKeys, w.kv_end - base) + box - 1) / box;
            const bool new_id_group = !Flat && (it & ((1 << id_shift) - 1)) == 0;
            if (new_id_group) {
                if (it == 0 && upcoming.index == index) {
                    ids = upcoming;
                } else if (it > 0 && next.index == index && next.first == it) {
                    ids = next;
                } else {  // not loaded ahead (a CTA's first item, or one after an item without keys)
                    ids.load(a, w, index, it, a.box_shift, page_shift, lane);
                }
            }
            const int key = base + lane * box;
            int row = first_row + key, page = 0;
            if constexpr (!Flat) {
                const int page_slot = page_shift >= 0 ? key >> page_shift : key / a.page_size;
                page = ids.at(it, lane, a.box_shift);
                row = key - page_slot * a.page_size;
            }
            if (stage >= S::kStages) tma::wait(&empty[slot], ((stage / S::kStages) + 1) & 1);
            if (lane == 0) tma::arrive_expect(&full[slot], 2 * boxes * box * S::kRowBytes);
            __syncwarp();
            if (lane < boxes) {
                uint8_t* const k_box = ring + slot * S::kStageBytes + lane * box * S::kSegBytes;
#pragma unroll
                for (int seg = 0; seg < S::kSegs; ++seg) {
                    uint8_t* const at = k_box + seg * S::kKeys * S::kSegBytes;
                    tma::copy(at, &a.k_map, 0, w.kv_head * S::kSegs + seg, row, page, &full[slot]);
                    tma::copy(at + S::kTileBytes, &a.v_map, 0, w.kv_head * S::kSegs + seg, row, page, &full[slot]);
                }
            }
            if (new_id_group && it + (1 << id_shift) < w.iterations) {
                next.load(a, w, index, it + (1 << id_shift), a.box_shift, page_shift, lane);
            }
            if (it == next_item_at && ahead.index < dp) {
                const Item n = describe<S::kKeys>(a, ahead.index, ahead.row[0], ahead.seq, ahead.chunk);
                if constexpr (Flat) {
                    next_first = FirstRow{ahead.index, n.iterations > 0 ? a.page_indices[n.page_begin] : 0};
                } else {
                    upcoming.load(a, n, ahead.index, 0, a.box_shift, page_shift, lane);
                }
            } else if (Tail && it == next_item_at && tail_more()) {  // the next piece (tail_x: its item)
                const Item n = tail_piece<S::kKeys>(*tail, tail_x, a.box_shift);
                if constexpr (Flat) {
                    next_first = FirstRow{items + tail_x, n.iterations > 0 ? a.page_indices[n.page_begin] : 0};
                } else {
                    upcoming.load(a, n, items + tail_x, 0, a.box_shift, page_shift, lane);
                }
            }
        }
        if constexpr (Tail) {  // after the last round-robin item's copies: its tail pieces join the loop
            if (dp < items && round < dp && round + static_cast<int>(gridDim.x) >= dp) {
                int pieces = 0;
                while (tail_more()) ++tail_x, ++pieces;  // tail_more() waits for the plan
                tail_x = tail->x0;
                end = round + static_cast<int>(gridDim.x) * (1 + pieces);
            }
        }
    }
}

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_PRODUCER_CUH
