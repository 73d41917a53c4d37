// Our persistent work scheduler for FlashInfer's SM90 prefill kernels, which take the scheduler
// as a template parameter (PrefillWithKVCacheKernel / FP8PrefillWithKVCacheKernel).
//
// The plan lists the layout's query tiles in units of tiles_per_unit consecutive entries
// (sm90/schedule.cu): with a causal mask a unit pairs tile t with tile n-1-t of the same sequence, so
// every unit of a sequence costs the same; without one a unit is one tile. Heads are not in the
// list. Work items are (unit, query head) pairs in the order KV head, unit, query head of the
// KV head's group: the items running at one time share K/V (one KV head, consecutive units of
// one sequence), which then comes from L2. Plans of short sequences (heads_inner) order them
// unit, query head instead: the items running at one time read every head of a few units, so a
// row's neighbouring heads come in the same DRAM bursts (head dim 80: 160-byte head rows that
// bursts do not align with; docs/design/sm90-tiles.md, run H). A CTA runs both tiles of its unit back to back. Items
// are dealt in rounds of one per CTA, in serpentine order (CTA c takes position c of even rounds
// and num_ctas-1-c of odd ones), so the per-sequence cost differences of a varlen batch
// (sequences come longest first) cancel out between rounds. Why this order:
// docs/design/sm90-tiles.md (runs A, B, D). No per-run state: a plan may run on several streams at once. Producer and consumer
// warps compute the same sequence independently.
#ifndef FAS_SM90_TILE_SCHEDULER_CUH
#define FAS_SM90_TILE_SCHEDULER_CUH

#include <cute/tensor.hpp>
#include <cutlass/fast_math.h>

#include "sm90/ragged_args.h"

namespace fas_sm90 {

struct SerpentineTileScheduler {
    struct Arguments {
        const TileWork* tiles;  // num_units * tiles_per_unit entries; q_tile < 0 marks an empty
                                // slot, which is never a unit's first
        int num_units;
        int tiles_per_unit;
        int num_ctas;
        int num_qo_heads;
        int group_size;  // query heads per KV head
        bool heads_inner;
    };

    struct Params {
        const TileWork* tiles;
        int num_items;
        int tiles_per_unit;
        int num_ctas;
        cutlass::FastDivmod items_per_kv_head;  // num_units * group_size
        cutlass::FastDivmod group;
        cutlass::FastDivmod heads;  // num_qo_heads
        bool heads_inner;
    };

    static Params to_underlying_arguments(Arguments const& args) {
        return {args.tiles,
                args.num_units * args.num_qo_heads,
                args.tiles_per_unit,
                args.num_ctas,
                cutlass::FastDivmod(args.num_units * args.group_size),
                cutlass::FastDivmod(args.group_size),
                cutlass::FastDivmod(args.num_qo_heads),
                args.heads_inner};
    }

    static dim3 get_grid_dim(Arguments const& args, int /*num_sm*/) { return dim3(static_cast<unsigned>(args.num_ctas)); }

    struct WorkTileInfo {
        int q_tile_idx = 0;
        int qo_head_idx = -1;  // -1: no more work for this CTA
        int kv_head_idx = 0;
        int qo_indptr = 0;
        int kv_indptr = 0;
        int qo_len = 0;
        int kv_len = 0;
        int batch_idx = 0;
        int round = 0;
        int entry = 0;  // index into tiles
        int unit_end = 0;

        CUTLASS_DEVICE bool is_valid(Params const&) const { return qo_head_idx >= 0; }

        CUTLASS_DEVICE auto get_block_coord(Params const&) const {
            return cute::tuple{q_tile_idx, qo_head_idx, kv_head_idx, qo_indptr,
                               kv_indptr,  qo_len,      kv_len,      batch_idx};
        }
    };

    CUTLASS_DEVICE SerpentineTileScheduler() {}

    // The first tile of this CTA's item in `round` (never an empty slot), else an invalid info.
    CUTLASS_DEVICE WorkTileInfo first_of_round(Params const& params, int round) const {
        const int cta = static_cast<int>(blockIdx.x);
        const int item = round * params.num_ctas + ((round & 1) ? params.num_ctas - 1 - cta : cta);
        WorkTileInfo info;
        info.round = round;
        if (item >= params.num_items) return info;  // rounds only grow: this CTA is done
        int kv_head = 0;
        int unit = 0;
        int in_group = 0;
        if (params.heads_inner) {
            int qo_head = 0;
            params.heads(unit, qo_head, item);
            params.group(kv_head, in_group, qo_head);
        } else {
            int within = 0;
            params.items_per_kv_head(kv_head, within, item);
            params.group(unit, in_group, within);
        }
        info.kv_head_idx = kv_head;
        info.qo_head_idx = kv_head * static_cast<int>(params.group.divisor) + in_group;
        info.entry = unit * params.tiles_per_unit;
        info.unit_end = info.entry + params.tiles_per_unit;
        set_tile(info, params.tiles[info.entry]);
        return info;
    }

    static CUTLASS_DEVICE void set_tile(WorkTileInfo& info, const TileWork& work) {
        info.q_tile_idx = work.q_tile;
        info.qo_indptr = work.qo_start;
        info.kv_indptr = work.kv_start;
        info.qo_len = work.qo_len;
        info.kv_len = work.kv_len;
        info.batch_idx = work.batch;
    }

    CUTLASS_DEVICE WorkTileInfo get_initial_work(Params const& params) const { return first_of_round(params, 0); }

    CUTLASS_DEVICE void init_consumer() const {}

    CUTLASS_DEVICE void prefetch_next_work(Params const&, WorkTileInfo&) const {}

    CUTLASS_DEVICE void broadcast_next_work(WorkTileInfo&) const {}

    template <bool kIsProducer = false>
    CUTLASS_DEVICE WorkTileInfo get_next_work(Params const& params, WorkTileInfo const& current) const {
        if (current.entry + 1 < current.unit_end) {
            const TileWork work = params.tiles[current.entry + 1];
            if (work.q_tile >= 0) {  // the unit's second tile
                WorkTileInfo next = current;
                ++next.entry;
                set_tile(next, work);
                return next;
            }
        }
        return first_of_round(params, current.round + 1);
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_TILE_SCHEDULER_CUH
